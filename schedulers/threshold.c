/* threshold — verify while the survival a_k = c_1 ... c_k stays >= t (static threshold of the
 * confidence-head literature). Non-anticipating: a_k depends on x_1..x_{k-1} only. */
#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "scheduler.h"

static int threshold_open(scheduler *s, const cJSON *cfg) {
    jcfg r;
    s->threshold = 0.5;
    if (jcfg_open(&r, cfg, "scheduler") || jcfg_double(&r, "threshold", 0, 1, &s->threshold)) return -1;
    return jcfg_close(&r);
}

static int threshold_schedule(scheduler *s, const sched_batch *b, int *len) {
    for (int r = 0; r < b->R; r++) {
        double a = 1;
        int l = 0;
        while (l < b->n_draft[r] && (a *= b->conf[(size_t)r * b->gamma + l]) >= s->threshold) l++;
        len[r] = l;
    }
    return 0;
}

const scheduler_ops sched_threshold = {.name = "threshold",
                                       .help = "verify while the cumulative confidence >= {\"threshold\": t}",
                                       .lossless = 1, .needs_conf = 1, .open = threshold_open,
                                       .schedule = threshold_schedule};
