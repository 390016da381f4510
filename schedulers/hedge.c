/* hedge — full-information Hedge (exponential weights) over the verification length, per request.
 *
 * Each request keeps weights over l = 0..gamma and draws its length from them (the scheduler's
 * seeded stream, requests in batch order) before any draft of the round is seen: lossless. The
 * round then reveals what other lengths would have yielded: with k of l verified drafts accepted
 * and a rejection seen (k < l), every length l' commits min(l', k) + 1 tokens; with all l accepted,
 * every l' <= l commits l' + 1, and a longer one is estimated: l + 1 for sure plus the expected
 * acceptances past l, from the drafter's confidences, or without a confidence head from the
 * request's own acceptance rate so far (Laplace estimate): neither blindly optimistic (a request that
 * never accepts would keep being pushed to verify) nor pessimistic (one that always accepts would
 * stop short of its best length). A length's gain is its tokens per second of what the request costs
 * the round at length l' instead of l — its share (1/R) of a forward over the R next tokens alone plus
 * all the time its own drafts add, from the SPS table (a counterfactual time cannot be measured) — scaled to
 * [0, 1] by the best rate the table allows; its weight is multiplied by exp(-eta (1 - gain)). Every
 * length is updated every round: full information. (Charging only the request's own tokens against
 * the whole round made extra rows look free at B = 16: Hedge verified more as load grew.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/sampling.h"
#include "scheduler.h"

#define HEDGE_MAX 65

typedef struct {
    int init, n; /* lengths 0..n-1 */
    double logw[HEDGE_MAX];
    double tested, passed; /* verified positions reached, and accepted: the acceptance estimate */
} hedge_req;

typedef struct {
    double eta;
    uint64_t seed;
    req_table reqs;
} hedge_state;

static int hedge_open(scheduler *s, const cJSON *cfg) {
    hedge_state *h = ds_calloc(1, sizeof *h, "hedge state");
    if (!h) return -1;
    s->impl = h;
    h->eta = 1.0;
    h->seed = 1;
    jcfg r;
    if (jcfg_open(&r, cfg, "scheduler") || jcfg_double(&r, "eta", 1e-6, 100, &h->eta) || jcfg_u64(&r, "seed", &h->seed) ||
        jcfg_close(&r))
        return -1;
    rng_seed(&s->rng, h->seed * 0x9e3779b97f4a7c15ull + 0x5eed);
    return 0;
}

static hedge_req *hedge_get(hedge_state *h, int id, int gamma) {
    hedge_req *q = req_table_get(&h->reqs, id, sizeof(hedge_req));
    if (q && !q->init) {
        q->init = 1;
        q->n = DS_MIN(gamma + 1, HEDGE_MAX);
    }
    return q;
}

static int hedge_schedule(scheduler *s, const sched_batch *b, int *len) {
    hedge_state *h = s->impl;
    for (int r = 0; r < b->R; r++) {
        hedge_req *q = hedge_get(h, sched_req_id(b->req, r), b->gamma);
        if (!q) return -1;
        double mx = -INFINITY, w[HEDGE_MAX];
        for (int l = 0; l < q->n; l++) mx = DS_MAX(mx, q->logw[l]);
        for (int l = 0; l < q->n; l++) w[l] = exp(q->logw[l] - mx);
        int l = rng_draw_d(&s->rng, w, q->n); /* requests draw in batch order from one stream */
        if (l < 0) return -1;
        len[r] = DS_MIN(l, b->n_draft[r]);
    }
    return 0;
}

static int hedge_observe(scheduler *s, const round_result *rr) {
    hedge_state *h = s->impl;
    for (int r = 0; r < rr->R; r++) {
        hedge_req *q = hedge_get(h, sched_req_id(rr->req, r), rr->gamma);
        if (!q) return -1;
        int v = rr->verified[r], k = rr->accepted[r], n = rr->proposed[r];
        /* this request at length l, the rest of the batch as it was: it pays its share of a forward
         * over the batch's next tokens alone plus all the time its own drafts add, since every request
         * waits for them (at R = 1, the round's time; under load, extra rows are not free to the others) */
        int has_sps = rr->sps && rr->sps->n > 0, B0 = rr->batch_tokens - v;
        double share = has_sps ? sps_seconds(rr->sps, rr->R) / rr->R : 1.0, cost[HEDGE_MAX], best = 0;
        double base = has_sps ? sps_seconds(rr->sps, B0) : 0;
        for (int l = 0; l < q->n; l++) {
            double extra = has_sps ? sps_seconds(rr->sps, B0 + l) - base : l;
            cost[l] = share + DS_MAX(extra, 0);
            best = DS_MAX(best, (l + 1) / cost[l]);
        }
        for (int l = 0; l < q->n; l++) {
            int lt = DS_MIN(l, n); /* no more than the proposed drafts can be verified */
            double tok = DS_MIN(lt, k) + 1;
            if (k == v && lt > v) { /* unrevealed: v + 1 for sure, plus the expected acceptances past v */
                double a = 1, alpha = (q->passed + 1) / (q->tested + 2);
                for (int j = v + 1; j <= lt; j++) tok += a *= rr->conf ? rr->conf[(size_t)r * rr->gamma + (j - 1)] : alpha;
            }
            q->logw[l] -= h->eta * (1 - tok / cost[lt] / best);
        }
        q->tested += k < v ? k + 1 : v;
        q->passed += k;
    }
    return 0;
}

static void hedge_release(scheduler *s, int id) { req_table_drop(&((hedge_state *)s->impl)->reqs, id); }
static void hedge_reset(scheduler *s) {
    hedge_state *h = s->impl;
    req_table_clear(&h->reqs);
    rng_seed(&s->rng, h->seed * 0x9e3779b97f4a7c15ull + 0x5eed);
}

static void hedge_close(scheduler *s) {
    hedge_state *h = s->impl;
    if (h) req_table_free(&h->reqs);
    free(h);
    s->impl = NULL;
}

const scheduler_ops sched_hedge = {
    .name = "hedge",
    .help = "per-request Hedge over the verification length, full information from the verified prefix {\"eta\": 1}",
    .lossless = 1, .open = hedge_open, .schedule = hedge_schedule, .observe = hedge_observe, .release = hedge_release,
    .reset = hedge_reset, .close = hedge_close, .gate_config = "{\"eta\": 2}",
    .gate_sparse = 1};
