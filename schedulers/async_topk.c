/* async_topk — the paper's asynchronous scheduler (§5.2) as a dynamic top-K.
 *
 * A real serving stack must know the next step's batch size before the current step finishes, so
 * the verification budget K of round t comes from the confidences of round t - delay (default 2):
 * Algorithm 1's search WITHOUT the early stop (the global best prefix, which jumps over SPS
 * cliffs) runs on that old round, and its admitted count, scaled by how many requests the batch
 * now holds, is this round's K. The current candidates, ranked by their own up-to-date cumulative
 * confidences (greedy.c's order), are admitted top-K in rank order.
 *
 * Lossless for delay >= 1: K depends only on earlier rounds, and whether (r, j) is in the top K
 * depends on the candidates ranked before it, which never include one computed from x_{r,j}
 * ((r, j+1) always ranks after (r, j); other requests are independent of x_{r,j}). With delay 0
 * the unconstrained search sees a_{r,j+1} and decides x_{r,j}'s fate: that is the retrospective
 * control (Appendix A), registered as "async-topk-now" for the gate only.
 *
 * Until delay rounds have passed, K = "initial" (default -1: every candidate). */
#include <math.h>
#include <stdlib.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "scheduler.h"

#define ASYNC_RING 16 /* delay < ASYNC_RING */

typedef struct {
    int delay, initial;
    long round;
    int K[ASYNC_RING], R[ASYNC_RING]; /* the unconstrained search's count and batch size, per round */
} async_state;

static int async_open_delay(scheduler *s, const cJSON *cfg, int delay, int lo) {
    async_state *a = ds_calloc(1, sizeof *a, "async-topk state");
    if (!a) return -1;
    s->impl = a;
    jcfg r;
    a->delay = delay;
    a->initial = -1;
    if (jcfg_open(&r, cfg, "scheduler") || jcfg_int(&r, "delay", lo, ASYNC_RING - 1, &a->delay) ||
        jcfg_int(&r, "initial", -1, 1 << 20, &a->initial) || jcfg_close(&r))
        return -1;
    return 0;
}

static int async_open(scheduler *s, const cJSON *cfg) { return async_open_delay(s, cfg, 2, 1); }
static int async_now_open(scheduler *s, const cJSON *cfg) { return async_open_delay(s, cfg, 0, 0); }

static int async_schedule(scheduler *s, const sched_batch *b, int *len) {
    async_state *a = s->impl;
    sched_cand *c;
    int m;
    if (sched_needs(b, "async-topk", 1) || sched_candidates(b, &c, &m)) return -1;
    /* this round's own unconstrained count: used delay rounds from now (or now, for the control) */
    int slot = (int)(a->round % ASYNC_RING);
    a->K[slot] = sched_admit_count(c, m, b->R, b->sps, 0);
    a->R[slot] = b->R;
    int K = a->initial < 0 ? m : a->initial;
    if (a->round >= a->delay) {
        int old = (int)((a->round - a->delay) % ASYNC_RING);
        K = (int)lround((double)a->K[old] * b->R / DS_MAX(a->R[old], 1));
    }
    sched_admit(c, DS_MIN(K, m), b->R, len);
    a->round++;
    free(c);
    return 0;
}

static void async_reset(scheduler *s) {
    async_state *a = s->impl;
    a->round = 0;
}

static void async_close(scheduler *s) {
    free(s->impl);
    s->impl = NULL;
}

const scheduler_ops sched_async_topk = {
    .name = "async-topk",
    .help = "top-K by current confidence, K from Algorithm 1 without early stop on the round {\"delay\": 2} back",
    .lossless = 1, .needs_conf = 1, .open = async_open, .schedule = async_schedule, .reset = async_reset,
    .close = async_close, .gate_config = "{\"delay\": 1, \"initial\": 1}"};
const scheduler_ops sched_async_topk_now = {
    .name = "async-topk-now",
    .help = "async-topk with delay 0: K from the current round's unconstrained search, NOT lossless (control)",
    .needs_conf = 1, .open = async_now_open, .schedule = async_schedule, .reset = async_reset,
    .close = async_close};
