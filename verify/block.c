/* block.c — block verification of a draft chain (Sun, Mendlovic, Leviathan, Aharoni, Beirami,
 * Ro, Suresh: "Block Verification Accelerates Speculative Decoding", arXiv 2403.10444).
 *
 * Token-wise verification stops at the first rejection. Block verification decides the accepted
 * length from the whole block: it carries the prefix weight w_i = min(1, w_{i-1} P_i(x_i)/Q_i(x_i))
 * (w_0 = 1) and, for each i < l, the mass the target could still "give back" at the next position,
 * Z_i = sum_y max(0, w_i P_{i+1}(y) - Q_{i+1}(y)); position i passes its own test with probability
 * h_i = Z_i / (Z_i + 1 - w_i) (h_l = w_l), the accepted length tau is the LAST position that
 * passes, and the next token is drawn from max(0, w_tau P_{tau+1} - Q_{tau+1}) normalised (the
 * bonus row P_{l+1} when tau = l). It emits the target's law exactly and accepts at least as
 * many tokens in expectation as token-wise verification; at T = 0 both are verify_greedy.
 *
 * Here P_i is p[i-1], Q_i is q[i-1] and x_i is x[i-1]; rows are normalised by their sums, as in
 * verify_chain. The tests run from the last position down and stop at the first pass, so the
 * draws made are exactly those the enumerator must branch on. */
#include <math.h>

#include "../runtime/base/common.h"
#include "verify.h"

/* sum_y max(0, w P(y) - Q(y)) over normalised rows; with r != NULL the terms, normalised, go there
 * (P itself when the mass is 0, which a chosen position cannot have in exact arithmetic) */
static double give_back(const float *P, const float *Q, int V, double w, double *r) {
    double sp = row_sum(P, V), sq = row_sum(Q, V), mass = 0;
    for (int y = 0; y < V; y++) {
        double d = w * (P[y] > 0 ? P[y] / sp : 0) - (Q[y] > 0 ? Q[y] / sq : 0);
        if (d > 0) mass += d;
        if (r) r[y] = d > 0 ? d : 0;
    }
    if (r) {
        for (int y = 0; y < V; y++) r[y] = mass > 0 ? r[y] / mass : (P[y] > 0 ? P[y] / sp : 0);
    }
    return mass;
}

/* the prefix weights w[0..l] and pass probabilities h[1..l] of a block (h[0] unused) */
static void block_weights(const float *p, const float *q, const int *x, int l, int V, verify_fault fault, double *w,
                          double *h) {
    w[0] = 1;
    for (int i = 1; i <= l; i++) {
        const float *P = p + (size_t)(i - 1) * V, *Q = q + (size_t)(i - 1) * V;
        double lr = verify_log_ratio(P[x[i - 1]], Q[x[i - 1]], row_sum(P, V), row_sum(Q, V));
        double r = lr >= 0 ? 1 : exp(lr); /* min(1, P/Q), 0 when P = 0 */
        w[i] = w[i - 1] > 0 ? fmin(1.0, w[i - 1] * exp(lr)) : 0;
        if (fault == FAULT_BLOCK_TOKENWISE) { /* the control: each position's own token-wise ratio */
            h[i] = r;
        } else if (i == l) {
            h[i] = w[i];
        } else if (w[i] <= 0) {
            h[i] = 0;
        } else {
            double z = give_back(p + (size_t)i * V, q + (size_t)i * V, V, w[i], NULL);
            h[i] = z > 0 ? z / (z + 1 - w[i]) : 0;
        }
    }
}

int verify_block(const float *p, const float *q, const int *x, int l, int V, verify_rng *rng, double *scratch,
                 verify_fault fault, verify_result *out) {
    double w[65], h[65];
    if (l > 64) {
        ds_error("verify: block verification takes at most 64 drafts (got %d)", l);
        return -1;
    }
    for (int k = 0; k < l; k++)
        if (x[k] < 0 || x[k] >= V) {
            ds_error("verify: draft token %d at position %d is outside the vocabulary (0..%d)", x[k], k + 1, V - 1);
            return -1;
        }
    block_weights(p, q, x, l, V, fault, w, h);
    int tau = 0;
    for (int i = l; i >= 1 && !tau; i--) {
        if (!(h[i] > 0)) continue;
        double u;
        int acc = rng_accept(&rng->accept, h[i] >= 1 ? 0.0 : log(h[i]), &u);
        if (acc < 0) return -1;
        if (acc) tau = i;
    }
    out->n_accepted = tau;
    out->bonus = tau == l;
    if (tau == l) {
        out->token = rng_draw(&rng->resample, p + (size_t)l * V, V);
    } else {
        give_back(p + (size_t)tau * V, q + (size_t)tau * V, V, w[tau], scratch);
        out->token = rng_draw_d(&rng->resample, scratch, V);
    }
    return out->token < 0 ? -1 : 0;
}

double verify_expected_accepted(const float *p, const float *q, const int *x, int l, int V, chain_rule rule) {
    double w[65], h[65], e = 0;
    if (l > 64) l = 64;
    if (rule == VERIFY_BLOCK) {
        /* P(tau >= k) = 1 - prod_{i >= k} (1 - h_i) */
        block_weights(p, q, x, l, V, FAULT_NONE, w, h);
        double none = 1;
        for (int k = l; k >= 1; k--) {
            none *= 1 - h[k];
            e += 1 - none;
        }
        return e;
    }
    /* token-wise: P(tau >= k) = prod_{i <= k} min(1, P_i(x_i) / Q_i(x_i)) */
    double all = 1;
    for (int k = 1; k <= l && all > 0; k++) {
        const float *P = p + (size_t)(k - 1) * V, *Q = q + (size_t)(k - 1) * V;
        double lr = verify_log_ratio(P[x[k - 1]], Q[x[k - 1]], row_sum(P, V), row_sum(Q, V));
        all *= lr >= 0 ? 1 : exp(lr);
        e += all;
    }
    return e;
}
