/* fixed — verify every proposed draft, or a configured number of them ("length"). */
#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "scheduler.h"

static int fixed_open(scheduler *s, const cJSON *cfg) {
    jcfg r;
    s->length = 0;
    if (jcfg_open(&r, cfg, "scheduler") || jcfg_int(&r, "length", 0, 1024, &s->length)) return -1;
    return jcfg_close(&r);
}

static int fixed_schedule(scheduler *s, const sched_batch *b, int *len) {
    for (int r = 0; r < b->R; r++) len[r] = s->length > 0 ? DS_MIN(s->length, b->n_draft[r]) : b->n_draft[r];
    return 0;
}

const scheduler_ops sched_fixed = {.name = "fixed", .help = "verify all proposed drafts (or {\"length\": N})",
                                   .lossless = 1, .open = fixed_open, .schedule = fixed_schedule};
