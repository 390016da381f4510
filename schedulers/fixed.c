/* fixed — verify every proposed draft, or a configured number of them ("length"). */
#include "../runtime/common.h"
#include "scheduler.h"

static int fixed_open(scheduler *s, const cJSON *cfg) {
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(cfg, "length");
    if (l && (!cJSON_IsNumber(l) || l->valueint < 0 || l->valueint > 1024)) {
        ds_error("'length' must be an integer 0..1024 (0 = all proposed drafts)");
        return -1;
    }
    s->length = l ? l->valueint : 0;
    return 0;
}

static int fixed_schedule(scheduler *s, const sched_batch *b, int *len) {
    for (int r = 0; r < b->R; r++) len[r] = s->length > 0 ? DS_MIN(s->length, b->n_draft[r]) : b->n_draft[r];
    return 0;
}

const scheduler_ops sched_fixed = {"fixed", "verify all proposed drafts (or {\"length\": N})", 1, 0, fixed_open,
                                   fixed_schedule, NULL, NULL};
