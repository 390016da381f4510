/* registry.c — scheduler names to ops. */
#include <stdio.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "scheduler.h"

extern const scheduler_ops sched_fixed, sched_threshold, sched_greedy, sched_retrospective, sched_async_topk,
    sched_async_topk_now, sched_bandit_ucb1, sched_bandit_thompson, sched_hedge;

static const scheduler_ops *const SCHEDULERS[] = {
    &sched_fixed,
    &sched_threshold,
    &sched_greedy,
    &sched_async_topk,
    &sched_bandit_ucb1,
    &sched_bandit_thompson,
    &sched_hedge,
    &sched_retrospective,  /* negative controls of the losslessness gate, never lossless */
    &sched_async_topk_now,
};
#define N_SCHEDULERS (int)(sizeof SCHEDULERS / sizeof *SCHEDULERS)

void scheduler_list(char *buf, int cap, int allow_controls) {
    int w = 0;
    buf[0] = 0;
    for (int i = 0; i < N_SCHEDULERS && w < cap; i++)
        if (SCHEDULERS[i]->lossless || allow_controls)
            w += snprintf(buf + w, (size_t)(cap - w), "%s%s", w ? ", " : "", SCHEDULERS[i]->name);
}

const scheduler_ops *scheduler_nth(int i) { return i >= 0 && i < N_SCHEDULERS ? SCHEDULERS[i] : NULL; }

const scheduler_ops *scheduler_find(const char *name, int allow_controls) {
    for (int i = 0; i < N_SCHEDULERS; i++)
        if (strcmp(SCHEDULERS[i]->name, name) == 0 && (SCHEDULERS[i]->lossless || allow_controls)) return SCHEDULERS[i];
    char known[256];
    scheduler_list(known, sizeof known, allow_controls);
    ds_error("unknown scheduler '%s' (known: %s)", name, known);
    return NULL;
}

int scheduler_open(scheduler *s, const char *name, const cJSON *cfg, int allow_controls) {
    memset(s, 0, sizeof *s);
    s->ops = scheduler_find(name, allow_controls);
    if (!s->ops) return -1;
    jcfg none; /* a scheduler without settings refuses every key */
    if (!s->ops->open && (jcfg_open(&none, cfg, "scheduler") || jcfg_close(&none))) {
        ds_error_prefix("scheduler '%s' takes no settings", name);
        return -1;
    }
    if (s->ops->open && s->ops->open(s, cfg)) {
        ds_error_prefix("scheduler '%s'", name);
        scheduler_close(s); /* what open allocated before it failed */
        return -1;
    }
    return 0;
}

void scheduler_close(scheduler *s) {
    if (s->ops && s->ops->close) s->ops->close(s);
    memset(s, 0, sizeof *s);
}
