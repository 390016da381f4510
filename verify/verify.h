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

/* Deliberate bugs, used only by the losslessness gate's negative controls (each must turn the
 * gate red). The first four live here, SHIFTED_Q in the decoding loop, DRAFT_NO_TOP_P and
 * DRAFT_WRONG_Q in a drafter's propose, COMBINE_PEEKS in combine's choice, DRAFT_STOP_PEEKS in vanilla's
 * draft-length stop. */
typedef enum {
    FAULT_NONE = 0,
    FAULT_UNNORMALISED_RESIDUAL, /* inverse CDF on max(0,p-q) without dividing by its mass */
    FAULT_REUSED_UNIFORM,        /* the accept test's uniform reused for the residual draw */
    FAULT_ACCEPT_BIAS,           /* accept with probability 1.01 p/q: a 1 % bias */
    FAULT_BONUS_ROW,             /* the bonus drawn from p[l-1] instead of p[l] */
    FAULT_SHIFTED_Q,             /* the loop hands the verifier q rows shifted by one position */
    FAULT_DRAFT_NO_TOP_P,        /* a drafter samples without top-p but reports the top-p'd q */
    FAULT_DRAFT_WRONG_Q,         /* a deterministic drafter copies x but reports q(x) = 0.5 */
    FAULT_COMBINE_PEEKS,         /* combine asks every member and keeps the draft whose x_1 the target's
                                  * own row favours most, p(x_1) / q(x_1) (stochastic drafts included) */
    FAULT_DRAFT_STOP_PEEKS,      /* where the scheduler stops a draft block, vanilla also drops x_k when it
                                  * is not its argmax: a stop that reads x_k's own value */
    FAULT_TREE_RATIO,            /* deterministic (top-k) children verified by min(1, p/q) with q the draft's
                                  * probability of the child, as if they had been sampled (trees.md rule 1) */
    FAULT_TREE_RESAMPLE_P,       /* after a sampled child's rejection p' stays p: resampling from p instead of
                                  * the residual (rule 2) */
    FAULT_BLOCK_TOKENWISE,       /* block verification whose per-position pass test is the token-wise ratio
                                  * min(1, p/q) instead of the block's h_i (trees.md control 6) */
    FAULT_TREE_SIBLING_ROW,      /* the loop's tree mask lets a node after its parent's first child see the node
                                  * before it (its sibling's row) as its parent (trees.md rule 5) */
    FAULT_TREE_KV_KEPT,          /* after a tree round the cache keeps the first k nodes' rows instead of the
                                  * accepted path's: a rejected branch's KV kept (rule 5) */
    FAULT_TREE_TRUNC_RESIDUAL,   /* sampled children: after a rejection the residual is kept over a truncated
                                  * candidate list (its 2 largest entries) instead of the vocabulary (rule 4) */
    FAULT_TREE_DUP_UNMERGED,     /* top-k children verified one by one (accept c_j with p(c_j) over the mass not
                                  * yet rejected) with a duplicated child tested again: its rejected mass counted
                                  * twice (rule 3; the gate's drafting duplicates a child under this fault) */
    FAULT_TREE_WOR_PARENT_Q,     /* children drawn without replacement (vanilla's sampled shape, and its chain's
                                  * siblings) reported with their parent's whole row as their law, the draft and
                                  * the earlier siblings not removed */
    FAULT_TREE_CONF_TOKEN,       /* vanilla's sampled dynamic tree scores a node by its drawn token's own draft
                                  * probability instead of its rank's: its place and greedy's cut read its token */
    FAULT_TREE_KEEP_TOKEN,       /* vanilla's sampled dynamic tree keeps a drawn sibling only when its own token's
                                  * path probability reaches the threshold: its existence reads its token */
    FAULT_TREE_KEEP_SHARE,       /* ... keeps it only when its token's share of what its earlier siblings left of the
                                  * processed row, times its parent's path probability, reaches the threshold */
    FAULT_DRAFT_NO_MIN_P,        /* a drafter samples without min-p but reports the min-p'd q */
    FAULT_VERIFY_NO_MIN_P,       /* the round's target rows processed without min-p (the prefill's first token
                                  * keeps it): min-p silently dropped for verified tokens (vLLM #42744) */
    FAULT_COUNT
} verify_fault;
extern const char *const VERIFY_FAULT_NAMES[FAULT_COUNT];

/* Rows are used normalised by their sums (in double): float softmax rows sum to 1 only up to
 * rounding, and the chain is exactly lossless with respect to p / sum(p) only if the accept ratio
 * and the residual use the same normalisation as the draws. */
double row_sum(const float *x, int V);
/* log of the accept ratio (p/sp) / (q/sq): -inf when p = 0, +inf when q = 0 < p; x_k is accepted
 * iff log(u) < this, u uniform in (0, 1) */
double verify_log_ratio(float p_x, float q_x, double sp, double sq);
/* r = max(0, p/sp - q/sq) / mass, in double; returns the mass. When the mass is 0 (p <= q
 * everywhere, which a rejection cannot produce in exact arithmetic) r = p/sp. */
double verify_residual(const float *p, const float *q, int V, double sp, double sq, double *r);

/* Chain rejection sampling over l drafts; scratch holds V doubles. Every emitted id is < V. All
 * draws go through rng_accept / rng_draw, so the gate can enumerate this very function. */
int verify_chain(const float *p, const float *q, const int *x, int l, int V, verify_rng *rng, double *scratch,
                 verify_fault fault, verify_result *out);
/* How a chain is verified at T > 0: token by token (verify_chain) or as a block (verify_block, Sun et al.
 * 2024: lossless, never fewer accepted tokens in expectation). At T = 0 both are verify_greedy. */
typedef enum { VERIFY_TOKEN = 0, VERIFY_BLOCK } chain_rule;
extern const char *const CHAIN_RULE_NAMES[2];
int chain_rule_parse(const char *name, chain_rule *out); /* -1 with an error naming the valid rules */

/* Block verification (verify/block.c), same rows and streams as verify_chain: the accepted length is
 * the last position whose pass test succeeds (tests drawn from the last position down), then one draw
 * from the block residual or the bonus row. */
int verify_block(const float *p, const float *q, const int *x, int l, int V, verify_rng *rng, double *scratch,
                 verify_fault fault, verify_result *out);
/* The expected number of accepted drafts of this very block under a rule (no draws): the two rules
 * compared on the same drafts. */
double verify_expected_accepted(const float *p, const float *q, const int *x, int l, int V, chain_rule rule);

/* Temperature 0: accept while x_k is the argmax of p[k-1]; the next token is the argmax of p[k]. */
void verify_greedy(const float *p, const int *x, int l, int V, verify_result *out);

/* The verify step of one request's round, shared by the decoding loop and the gate: greedy, token-wise
 * or block verification of x_1..x_l against p[0..l], then the emitted tokens (the accepted drafts and
 * the residual or bonus token) into emitted[0..l]. Returns how many were emitted, -1 on error. */
int verify_round(const float *p, const float *q, const int *x, int l, int V, int greedy, chain_rule rule, verify_rng *rng,
                 double *scratch, verify_fault fault, verify_result *res, int *emitted);

/* What a verifier returned, checked by its callers before a token is emitted: accepted <= l verified,
 * the token in the vocabulary and, for a chain, the bonus flag set exactly when every draft was accepted.
 * A verifier that accepts past the verified drafts takes its bonus from a row nobody computed; a budget
 * that ends on the last verified row hides it from the emitted law, so it is an error here. */
int verify_result_check(const verify_result *r, int l, int V, int chain);

/* How a draft tree's children were made (trees.md): the verification rule depends on it. */
typedef enum {
    TREE_CHAIN = 0, /* no tree: one child a node, verified by verify_chain */
    TREE_TOPK,      /* deterministic children (top-k of a table or a head, a template): q unused */
    TREE_IID,       /* children drawn independently from q (SpecInfer's multi-step rejection) */
    TREE_WOR,       /* children drawn without replacement: each child's q row is the law it was drawn
                     * from (q with the earlier siblings removed, renormalised) */
} tree_kind;
extern const char *const TREE_KIND_NAMES[4];

/* Exact verification of a draft tree of n nodes: node i holds tok[i] and its parent parent[i] (< i;
 * -1: a child of the anchor); siblings are tried in index order. p[0] is the target's row at the
 * anchor, p[1 + i] at node i; q[i] the law node i was drawn from (TREE_IID, TREE_WOR; NULL for
 * TREE_TOPK; read there only by the FAULT_TREE_RATIO control). Walks from the anchor: at T = 0 descends while the argmax is a child; TREE_TOPK draws
 * y ~ p and descends to the child holding y, else emits y; TREE_IID / TREE_WOR accept child j with
 * min(1, p'(c_j) / q_j(c_j)), after a rejection p' <- normalise(max(p' - q_j, 0)), and emit a draw
 * of p' when every child is rejected. A leaf reached draws the bonus from its row. The accepted
 * nodes go to path[0..n_accepted) (out->n_accepted), the drawn token to out->token; scratch holds
 * 2 V doubles. Every draw goes through rng_accept / rng_draw, so the gate enumerates this very
 * function. */
int verify_tree(const float *p, const float *q, const int *tok, const int *parent, int n, int V, tree_kind kind,
                int greedy, verify_rng *rng, double *scratch, verify_fault fault, int *path, verify_result *out);

#endif
