/* greedy — the paper's Algorithm 1: hardware-aware verification lengths for a batch.
 *
 * a_{r,j} = c_{r,1} ... c_{r,j}. All candidate extensions (r, j) are sorted by a descending (ties:
 * request, then position, so (r, j) always precedes (r, j+1)) and admitted one at a time; with
 * B = sum(1 + l_r) and tau = sum(1 + sum_{j <= l_r} a_{r,j}), the throughput Theta = tau * SPS(B) is
 * updated in O(1), and the search STOPS at the first admission that does not raise Theta. The
 * early stop is what keeps it lossless: admitting (r, j) depends only on candidates sorted before
 * it, none of which is computed from x_{r,j}.
 *
 * "retrospective" is the same search without the early stop (keep the best Theta over all
 * prefixes of the order): a later candidate such as a_{r,j+1}, computed from x_{r,j}, can then
 * decide whether x_{r,j} is verified. It exists only as the losslessness gate's negative control
 * (the paper's Appendix A: output law (0.85, 0.15) instead of (0.7, 0.3)). */
#include <stdlib.h>
#include <string.h>

#include "../runtime/common.h"
#include "scheduler.h"

typedef struct {
    float a;
    int r, j;
} cand;

static int cand_cmp(const void *x, const void *y) {
    const cand *p = x, *q = y;
    if (p->a != q->a) return p->a > q->a ? -1 : 1;
    if (p->r != q->r) return p->r - q->r;
    return p->j - q->j;
}

static int search(const sched_batch *b, int *len, int early_stop) {
    if (!b->conf) {
        ds_error("the greedy scheduler needs a drafter with confidences");
        return -1;
    }
    if (!b->sps || b->sps->n < 1) {
        ds_error("the greedy scheduler needs an SPS(B) table");
        return -1;
    }
    int n = 0;
    for (int r = 0; r < b->R; r++) n += b->n_draft[r];
    cand *c = ds_malloc(sizeof(cand) * (size_t)(n ? n : 1), "scheduler candidates");
    if (!c) return -1;
    int m = 0;
    for (int r = 0; r < b->R; r++) {
        double a = 1;
        for (int j = 1; j <= b->n_draft[r]; j++) {
            a *= b->conf[(size_t)r * b->gamma + (j - 1)];
            if (a > 0) c[m++] = (cand){(float)a, r, j};
        }
    }
    qsort(c, (size_t)m, sizeof *c, cand_cmp);
    int B = b->R, best_at = 0;
    double tau = b->R, best = tau * sps_at(b->sps, B);
    for (int i = 0; i < m; i++) {
        B += 1;
        tau += c[i].a;
        double theta = tau * sps_at(b->sps, B);
        if (theta > best) {
            best = theta;
            best_at = i + 1;
        } else if (early_stop) {
            break;
        }
    }
    /* replay the admitted prefix of the order */
    for (int r = 0; r < b->R; r++) len[r] = 0;
    for (int i = 0; i < best_at; i++) len[c[i].r] = DS_MAX(len[c[i].r], c[i].j);
    free(c);
    return 0;
}

static int greedy_schedule(scheduler *s, const sched_batch *b, int *len) {
    DS_UNUSED(s);
    return search(b, len, 1);
}

static int retrospective_schedule(scheduler *s, const sched_batch *b, int *len) {
    DS_UNUSED(s);
    return search(b, len, 0);
}

const scheduler_ops sched_greedy = {"greedy", "hardware-aware throughput search with early stop (paper Algorithm 1)", 1,
                                    1, NULL, greedy_schedule, NULL, NULL};
const scheduler_ops sched_retrospective = {"retrospective", "Algorithm 1 without the early stop: NOT lossless (control)",
                                           0, 1, NULL, retrospective_schedule, NULL, NULL};
