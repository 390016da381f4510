/* verify.h — lossless chain verification of a block of draft tokens.
 *
 * Rows are processed distributions (verify/logits.c, the same processing for target and draft):
 * p[k] (k = 0..l) is the target's distribution of the token after the anchor and x_1..x_k, so
 * p[k-1] judges draft x_k and p[l] gives the bonus token; q[k-1] is the draft distribution x_k
 * was sampled from. Left to right, x_k is accepted with probability min(1, p(x_k)/q(x_k)) (compared
 * in log space); at the first rejection one token is drawn from the normalised residual
 * max(0, p - q) and the round stops; if all l are accepted the bonus token is drawn from p[l].
 * The accept test and the residual/bonus draw use different random streams. */
#ifndef DS_VERIFY_H
#define DS_VERIFY_H

#include "../runtime/sampling.h"

typedef struct {
    int n_accepted; /* accepted drafts, 0..l */
    int token;      /* the residual token after a rejection, or the bonus token */
    int bonus;      /* 1 when every verified draft was accepted */
} verify_result;

typedef struct {
    rng_t accept;   /* uniforms of the accept tests */
    rng_t resample; /* uniforms of the residual and bonus draws */
} verify_rng;

/* Deliberate bugs, used only by the losslessness gate's negative controls. */
typedef enum {
    FAULT_NONE = 0,
    FAULT_UNNORMALISED_RESIDUAL, /* inverse CDF on max(0,p-q) without dividing by its mass */
    FAULT_REUSED_UNIFORM,        /* the accept test's uniform reused for the residual draw */
} verify_fault;

/* Rows are used normalised by their sums (in double): float softmax rows sum to 1 only up to
 * rounding, and the chain is exactly lossless with respect to p / sum(p) only if the accept ratio
 * and the residual use the same normalisation as the draws. */
double row_sum(const float *x, int V);
/* min(1, (p/sp) / (q/sq)) as the accept test realises it (0 when p = 0; 1 when q = 0 < p). */
double verify_accept_prob(float p_x, float q_x, double sp, double sq);
/* accept iff log(u) < log(p/sp) - log(q/sq), u in (0, 1) */
int verify_accept(float p_x, float q_x, double sp, double sq, double u);
/* r = max(0, p/sp - q/sq) / mass, in double; returns the mass. When the mass is 0 (p <= q
 * everywhere, which a rejection cannot produce in exact arithmetic) r = p/sp. */
double verify_residual(const float *p, const float *q, int V, double sp, double sq, double *r);

/* Chain rejection sampling over l drafts; scratch holds V doubles. Every emitted id is < V. */
int verify_chain(const float *p, const float *q, const int *x, int l, int V, verify_rng *rng, double *scratch,
                 verify_fault fault, verify_result *out);
/* Temperature 0: accept while x_k is the argmax of p[k-1]; the next token is the argmax of p[k]. */
void verify_greedy(const float *p, const int *x, int l, int V, verify_result *out);

#endif
