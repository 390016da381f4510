/* greedy — the paper's Algorithm 1: hardware-aware verification lengths for a batch.
 *
 * a_{r,j} = c_{r,1} ... c_{r,j}. All candidate extensions (r, j) are sorted by a descending (ties:
 * request, then position, so (r, j) always precedes (r, j+1)) and admitted one at a time; with
 * B = sum(1 + l_r) and tau = sum(1 + sum_{j <= l_r} a_{r,j}), the throughput Theta = tau * SPS(B) is
 * updated in O(1), and the search STOPS at the first admission that does not raise Theta. The
 * early stop is what keeps it lossless: admitting (r, j) depends only on candidates sorted before
 * it, none of which is computed from x_{r,j}.
 *
 * A tree's nodes (sched_batch.tree) are candidates with their own path probabilities as a; a request's
 * length is the highest admitted node index, so a drafter that orders nodes best first (recycling)
 * gets exactly the admitted ones.
 *
 * "retrospective" is the same search without the early stop (keep the best Theta over all
 * prefixes of the order): a later candidate such as a_{r,j+1}, computed from x_{r,j}, can then
 * decide whether x_{r,j} is verified. It exists only as the losslessness gate's negative control
 * (the paper's Appendix A: output law (0.85, 0.15) instead of (0.7, 0.3)). */
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "scheduler.h"

static int cand_cmp(const void *x, const void *y) {
    const sched_cand *p = x, *q = y;
    if (p->a != q->a) return p->a > q->a ? -1 : 1;
    if (p->r != q->r) return p->r - q->r;
    return p->j - q->j;
}

int sched_candidates(const sched_batch *b, sched_cand **out, int *m_out) {
    int n = 0;
    for (int r = 0; r < b->R; r++) n += b->n_draft[r];
    sched_cand *c = ds_malloc(sizeof(sched_cand) * (size_t)(n ? n : 1), "scheduler candidates");
    if (!c) return -1;
    int m = 0;
    for (int r = 0; r < b->R; r++) {
        double a = 1;
        int tree = b->tree && b->tree[r];
        for (int j = 1; j <= b->n_draft[r]; j++) {
            /* a tree's node carries its path probability; its parent's is never smaller, and on a tie the
             * parent (earlier index) sorts first, so the admitted nodes' prefix is a tree */
            a = tree ? b->conf[(size_t)r * b->gamma + (j - 1)] : a * b->conf[(size_t)r * b->gamma + (j - 1)];
            if (a > 0) c[m++] = (sched_cand){(float)a, r, j};
        }
    }
    qsort(c, (size_t)m, sizeof *c, cand_cmp);
    *out = c;
    *m_out = m;
    return 0;
}

int sched_admit_count(const sched_cand *c, int m, int R, const sps_table *sps, int early_stop) {
    int B = R, best_at = 0;
    double tau = R, best = tau * sps_at(sps, B);
    for (int i = 0; i < m; i++) {
        B += 1;
        tau += c[i].a;
        double theta = tau * sps_at(sps, B);
        if (theta > best) {
            best = theta;
            best_at = i + 1;
        } else if (early_stop) {
            break;
        }
    }
    return best_at;
}

void sched_admit(const sched_cand *c, int n, int R, int *len) {
    for (int r = 0; r < R; r++) len[r] = 0;
    for (int i = 0; i < n; i++) len[c[i].r] = DS_MAX(len[c[i].r], c[i].j);
}

int sched_needs(const sched_batch *b, const char *who, int sps) {
    if (!b->conf) {
        ds_error("the %s scheduler needs a drafter with confidences", who);
        return -1;
    }
    if (sps && (!b->sps || b->sps->n < 1)) {
        ds_error("the %s scheduler needs an SPS(B) table", who);
        return -1;
    }
    return 0;
}

static int search(const sched_batch *b, int *len, int early_stop) {
    sched_cand *c;
    int m;
    if (sched_needs(b, "greedy", 1) || sched_candidates(b, &c, &m)) return -1;
    sched_admit(c, sched_admit_count(c, m, b->R, b->sps, early_stop), b->R, len);
    free(c);
    return 0;
}

static int greedy_schedule(scheduler *s, const sched_batch *b, int *len) {
    DS_UNUSED(s);
    return search(b, len, 1);
}

/* Draft one more only if it raises the round's expected throughput. With k drafts, a_j = c_1 ... c_j
 * and tau = 1 + sum a_j tokens expected from B = rows_other + k + 1 rows, the round takes
 * T = k D + u / SPS(B) (D: a draft's cost; u: the target's measured speed against the table's, when D
 * is measured too, so both sides are priced at the day's speed: with a table 1.3x faster than the
 * day's target the 0.5B drafted 533 tokens on 7 Spec-Bench requests (tau 3.04) against 549 (3.26) with
 * the day's table; priced with u, 545 (3.20)).
 * One more adds a_k c' tokens, c' = c_k standing in for the next draft's unknown confidence, and costs
 * D plus the verify forward's growth; the draft goes on while (tau + a_k c') / T' > tau / T. */
static int greedy_draft_more(scheduler *s, const sched_draft *q) {
    double D = s->draft_cost > 0 ? s->draft_cost : q->draft_s;
    if (D <= 0 || !q->sps || q->sps->n < 1) return 1; /* no price known yet: draft what was asked */
    /* a fixed draft_cost is in the table's units (the gate's, deterministic) */
    double u = s->draft_cost > 0 || q->sps_scale <= 0 ? 1 : q->sps_scale;
    double a = 1, tau = 1;
    for (int j = 0; j < q->k; j++) a *= q->conf[j], tau += a;
    int B = q->rows_other + q->k + 1;
    double T = q->k * D + u / sps_at(q->sps, B), T1 = T + D + u * (1 / sps_at(q->sps, B + 1) - 1 / sps_at(q->sps, B));
    double gain = a * q->conf[q->k - 1];
    return (tau + gain) * T > tau * T1;
}

static int greedy_open(scheduler *s, const cJSON *cfg) {
    jcfg r;
    if (jcfg_open(&r, cfg, "scheduler") || jcfg_double(&r, "draft_cost", 0, 1e3, &s->draft_cost)) return -1;
    return jcfg_close(&r);
}

static int retrospective_schedule(scheduler *s, const sched_batch *b, int *len) {
    DS_UNUSED(s);
    return search(b, len, 0);
}

const scheduler_ops sched_greedy = {.name = "greedy",
                                    .help = "hardware-aware throughput search with early stop (paper Algorithm 1); a drafter that pays a "
                                            "forward a draft drafts while the next one is worth its cost (measured, or "
                                            "{\"draft_cost\": seconds})",
                                    .lossless = 1, .needs_conf = 1, .open = greedy_open, .schedule = greedy_schedule,
                                    .draft_more = greedy_draft_more};
const scheduler_ops sched_retrospective = {.name = "retrospective",
                                           .help = "Algorithm 1 without the early stop: NOT lossless (control)",
                                           .needs_conf = 1, .schedule = retrospective_schedule};
