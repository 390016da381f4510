#include "verify.h"

#include <math.h>
#include <string.h>

#include "../runtime/base/common.h"

double row_sum(const float *x, int V) {
    double s = 0;
    for (int i = 0; i < V; i++)
        if (x[i] > 0) s += x[i];
    return s;
}

const char *const VERIFY_FAULT_NAMES[FAULT_COUNT] = {
    "none", "unnormalised-residual", "reused-uniform", "accept-bias-1%", "bonus-row", "shifted-q", "draft-no-top-p",
    "draft-wrong-q", "combine-peeks", "draft-stop-peeks", "tree-ratio",
    "tree-resample-p", "block-tokenwise", "tree-sibling-row", "tree-kv-kept",
    "tree-trunc-residual", "tree-dup-unmerged", "tree-wor-parent-q", "tree-conf-token", "tree-keep-token",
    "tree-keep-share", "draft-no-min-p", "verify-no-min-p",
};

const char *const CHAIN_RULE_NAMES[2] = {"token", "block"};

int chain_rule_parse(const char *name, chain_rule *out) {
    for (int i = 0; i < 2; i++)
        if (!strcmp(name, CHAIN_RULE_NAMES[i])) {
            *out = (chain_rule)i;
            return 0;
        }
    ds_error("unknown verifier '%s' (valid: token, block)", name);
    return -1;
}

double verify_log_ratio(float p_x, float q_x, double sp, double sq) {
    if (!(p_x > 0)) return -INFINITY;
    if (!(q_x > 0)) return INFINITY;
    return (log((double)p_x) - log(sp)) - (log((double)q_x) - log(sq));
}

double verify_residual(const float *p, const float *q, int V, double sp, double sq, double *r) {
    double mass = 0;
    for (int i = 0; i < V; i++) {
        double d = (p[i] > 0 ? p[i] / sp : 0) - (q[i] > 0 ? q[i] / sq : 0);
        r[i] = d > 0 ? d : 0.0;
        mass += r[i];
    }
    if (mass > 0) {
        for (int i = 0; i < V; i++) r[i] /= mass;
    } else {
        for (int i = 0; i < V; i++) r[i] = p[i] > 0 ? p[i] / sp : 0;
    }
    return mass;
}

/* The negative control's bug: walk max(0, p-q) with a uniform as if it summed to one, and take the
 * last token when the walk falls off the end. */
static int sample_unnormalised(const float *p, const float *q, int V, double u) {
    double c = 0;
    for (int i = 0; i < V; i++) {
        double d = (double)p[i] - q[i];
        if (d > 0) c += d;
        if (u < c) return i;
    }
    return V - 1;
}

int verify_chain(const float *p, const float *q, const int *x, int l, int V, verify_rng *rng, double *scratch,
                 verify_fault fault, verify_result *out) {
    for (int k = 0; k < l; k++) {
        if (x[k] < 0 || x[k] >= V) {
            ds_error("verify: draft token %d at position %d is outside the vocabulary (0..%d)", x[k], k + 1, V - 1);
            return -1;
        }
        const float *pk = p + (size_t)k * V, *qk = q + (size_t)k * V;
        double sp = row_sum(pk, V), sq = row_sum(qk, V), u;
        double lr = verify_log_ratio(pk[x[k]], qk[x[k]], sp, sq);
        if (fault == FAULT_ACCEPT_BIAS) lr += log(1.01);
        int acc = rng_accept(&rng->accept, lr, &u);
        if (acc < 0) return -1;
        if (acc) continue;
        out->n_accepted = k;
        out->bonus = 0;
        if (fault == FAULT_UNNORMALISED_RESIDUAL) {
            out->token = sample_unnormalised(pk, qk, V, rng_uniform(&rng->resample));
        } else {
            verify_residual(pk, qk, V, sp, sq, scratch);
            /* the reused-uniform bug: u is conditioned on the rejection (u >= p/q), so not uniform */
            out->token = fault == FAULT_REUSED_UNIFORM ? sample_probs_d(scratch, V, u) : rng_draw_d(&rng->resample, scratch, V);
        }
        return out->token < 0 ? -1 : 0;
    }
    out->n_accepted = l;
    out->bonus = 1;
    int row = fault == FAULT_BONUS_ROW && l > 0 ? l - 1 : l;
    out->token = rng_draw(&rng->resample, p + (size_t)row * V, V);
    return out->token < 0 ? -1 : 0;
}

void verify_greedy(const float *p, const int *x, int l, int V, verify_result *out) {
    int k = 0;
    while (k < l && x[k] == argmax_f32(p + (size_t)k * V, V)) k++;
    out->n_accepted = k;
    out->bonus = k == l;
    out->token = argmax_f32(p + (size_t)k * V, V);
}

int verify_result_check(const verify_result *r, int l, int V, int chain) {
    if (r->n_accepted < 0 || r->n_accepted > l || r->token < 0 || r->token >= V || (chain && r->bonus != (r->n_accepted == l))) {
        ds_error("the verifier returned %d accepted of %d verified drafts, token %d, bonus %d (a verifier bug)", r->n_accepted,
                 l, r->token, r->bonus);
        return -1;
    }
    return 0;
}

int verify_round(const float *p, const float *q, const int *x, int l, int V, int greedy, chain_rule rule, verify_rng *rng,
                 double *scratch, verify_fault fault, verify_result *res, int *emitted) {
    if (greedy) verify_greedy(p, x, l, V, res);
    else if (rule == VERIFY_BLOCK ? verify_block(p, q, x, l, V, rng, scratch, fault, res)
                                  : verify_chain(p, q, x, l, V, rng, scratch, fault, res))
        return -1;
    for (int k = 0; k < res->n_accepted; k++) emitted[k] = x[k];
    emitted[res->n_accepted] = res->token;
    return res->n_accepted + 1;
}
