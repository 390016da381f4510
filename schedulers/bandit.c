/* bandit — UCB1 and Thompson sampling over verification lengths.
 *
 * Arms are verification lengths ("arms": [0, 2, 4, ...], default 0..gamma): each round every
 * request verifies min(arm, its drafts), the arm chosen before any draft of the round is seen, so
 * the choice depends only on earlier rounds (lossless). The reward, given by observe, is the
 * round's committed tokens per second: measured wall time ("clock": "wall", the default) or the
 * SPS table's forward time at the round's batch size ("clock": "model", deterministic: what the
 * losslessness gate uses, since its exact check replays every path and needs the same choices).
 *
 * UCB1 plays every arm once, then the arm maximising mean/r_max + c sqrt(ln t / n_a) (rewards
 * scaled to [0, 1] by the largest seen). Thompson keeps a Gaussian posterior per arm (mean, pooled
 * variance / n_a) and plays the arm with the largest draw from its own seeded stream. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/sampling.h"
#include "scheduler.h"

#define BANDIT_MAX_ARMS 65

typedef struct {
    int thompson, model_clock, n_arms, configured;
    int arm[BANDIT_MAX_ARMS];
    double c;
    uint64_t seed;
    /* learned */
    rng_t rng;
    long t, n[BANDIT_MAX_ARMS];
    double sum[BANDIT_MAX_ARMS], sumsq[BANDIT_MAX_ARMS], rmax;
    int playing; /* the arm of the round in flight, -1 none */
} bandit_state;

static void bandit_reset(scheduler *s) {
    bandit_state *b = s->impl;
    b->t = 0;
    b->rmax = 0;
    b->playing = -1;
    memset(b->n, 0, sizeof b->n);
    memset(b->sum, 0, sizeof b->sum);
    memset(b->sumsq, 0, sizeof b->sumsq);
    rng_seed(&b->rng, b->seed * 0x9e3779b97f4a7c15ull + 77);
    if (!b->configured) b->n_arms = 0; /* 0..gamma, set by the first batch */
}

static int bandit_open_kind(scheduler *s, const cJSON *cfg, int thompson) {
    bandit_state *b = ds_calloc(1, sizeof *b, "bandit state");
    if (!b) return -1;
    s->impl = b;
    b->thompson = thompson;
    b->c = thompson ? 0 : sqrt(2.0);
    b->seed = 1;
    const char *clock = "wall";
    jcfg r;
    if (jcfg_open(&r, cfg, "scheduler") || jcfg_str(&r, "clock", &clock)) return -1;
    if (!thompson && jcfg_double(&r, "c", 0, 100, &b->c)) return -1;
    if (thompson && jcfg_u64(&r, "seed", &b->seed)) return -1;
    const cJSON *arms = jcfg_get(&r, "arms");
    if (jcfg_close(&r)) return -1;
    if (strcmp(clock, "wall") && strcmp(clock, "model")) {
        ds_error("scheduler.clock: '%s' is not a clock (known: wall, model)", clock);
        return -1;
    }
    b->model_clock = !strcmp(clock, "model");
    if (arms) {
        int n = cJSON_IsArray(arms) ? cJSON_GetArraySize(arms) : -1;
        if (n < 2 || n > BANDIT_MAX_ARMS) {
            ds_error("scheduler.arms: an array of 2..%d verification lengths", BANDIT_MAX_ARMS);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            const cJSON *a = cJSON_GetArrayItem(arms, i);
            if (!jcfg_integral(a, 0, 64)) {
                ds_error("scheduler.arms[%d]: a verification length must be an integer in 0..64", i);
                return -1;
            }
            b->arm[i] = a->valueint;
        }
        b->n_arms = n;
        b->configured = 1;
    }
    bandit_reset(s);
    return 0;
}

static int ucb_open(scheduler *s, const cJSON *cfg) { return bandit_open_kind(s, cfg, 0); }
static int thompson_open(scheduler *s, const cJSON *cfg) { return bandit_open_kind(s, cfg, 1); }


static int bandit_choose(bandit_state *b) {
    for (int a = 0; a < b->n_arms; a++)
        if (b->n[a] == 0) return a; /* every arm once, in order */
    double scale = b->rmax > 0 ? b->rmax : 1, var = 0;
    long dof = 0;
    if (b->thompson) { /* pooled within-arm variance of the scaled rewards */
        for (int a = 0; a < b->n_arms; a++) {
            double m = b->sum[a] / b->n[a];
            var += b->sumsq[a] - b->n[a] * m * m;
            dof += b->n[a] - 1;
        }
        var = dof > 0 ? DS_MAX(var / dof, 1e-6 * scale * scale) : scale * scale;
    }
    int best = 0;
    double best_v = -INFINITY;
    for (int a = 0; a < b->n_arms; a++) {
        double mean = b->sum[a] / b->n[a], v;
        if (b->thompson) v = (mean + sqrt(var / b->n[a]) * rng_normal(&b->rng)) / scale;
        else v = mean / scale + b->c * sqrt(log((double)b->t) / b->n[a]);
        if (v > best_v) best_v = v, best = a;
    }
    return best;
}

static int bandit_schedule(scheduler *s, const sched_batch *sb, int *len) {
    bandit_state *b = s->impl;
    if (!b->n_arms) {
        b->n_arms = DS_MIN(sb->gamma + 1, BANDIT_MAX_ARMS);
        for (int a = 0; a < b->n_arms; a++) b->arm[a] = a;
    }
    b->playing = bandit_choose(b);
    for (int r = 0; r < sb->R; r++) len[r] = DS_MIN(b->arm[b->playing], sb->n_draft[r]);
    return 0;
}

static int bandit_observe(scheduler *s, const round_result *rr) {
    bandit_state *b = s->impl;
    if (b->playing < 0) return 0;
    double sec = b->model_clock ? rr->model_seconds : rr->seconds;
    if (!(sec > 0)) {
        ds_error("bandit scheduler: the round's %s time is %g s (the model clock needs an SPS table)",
                 b->model_clock ? "modelled" : "measured", sec);
        return -1;
    }
    long tok = 0;
    for (int r = 0; r < rr->R; r++) tok += rr->emitted[r];
    double x = (double)tok / sec;
    int a = b->playing;
    b->n[a]++;
    b->sum[a] += x;
    b->sumsq[a] += x * x;
    b->t++;
    b->rmax = DS_MAX(b->rmax, x);
    b->playing = -1;
    return 0;
}

static void bandit_close(scheduler *s) {
    free(s->impl);
    s->impl = NULL;
}

const scheduler_ops sched_bandit_ucb1 = {
    .name = "bandit-ucb1",
    .help = "UCB1 over verification lengths {\"arms\": [...], \"c\": 1.41, \"clock\": \"wall\"|\"model\"}",
    .lossless = 1, .open = ucb_open, .schedule = bandit_schedule, .observe = bandit_observe, .reset = bandit_reset,
    .close = bandit_close, .gate_config = "{\"clock\": \"model\", \"arms\": [1, 2]}"};
const scheduler_ops sched_bandit_thompson = {
    .name = "bandit-thompson",
    .help = "Gaussian Thompson sampling over verification lengths {\"arms\": [...], \"seed\": 1, \"clock\": ...}",
    .lossless = 1, .open = thompson_open, .schedule = bandit_schedule, .observe = bandit_observe,
    .reset = bandit_reset, .close = bandit_close, .gate_config = "{\"clock\": \"model\", \"arms\": [1, 2]}"};
