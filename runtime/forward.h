/* forward.h — the transformer forward over a flattened varlen batch.
 *
 * One call advances several requests at once: request s adds n_new[s] tokens after the kv[s]->len
 * it already holds (prefill, single-token decode and multi-token verification are the same call).
 * Logits come back for every new token or only each request's last one; hidden states can be
 * captured after any list of layers, and the final normed (pre-head) state for every token. */
#ifndef DS_FORWARD_H
#define DS_FORWARD_H

#include "backends/backend.h"
#include "model/model.h"

typedef struct {
    int n_seq;
    kv_cache *const *kv;       /* [n_seq], each extended by n_new[s]; crop to roll back */
    const int *n_new;          /* [n_seq] */
    const int *tokens;         /* [sum n_new], request by request */
    int all_logits;            /* 1: logits for every token; 0: only each request's last token */
    float *logits;             /* host out [rows][vocab], rows = sum n_new or n_seq; NULL = none */
    int n_capture;
    const int *capture_layers; /* layer ids, 0-based; -1 = embedding output */
    float *capture;            /* host out [n_capture][T][dim] residual stream after each layer */
    float *final_hidden;       /* host out [T][dim] after the final norm (what the head sees) */
    /* a draft tree (NULL: every request's new tokens are a chain): [T], for token j of request s the
     * index among that request's new tokens of its parent (< j), or -1 for a child of the cache's
     * last row. Token j goes to slot kv->len + j, at RoPE position kv->len + its depth, and attends
     * to the cache and its own ancestors; crop or kv_cache_keep the branches away after. */
    const int *parent;
    /* a draft tree grown over several forwards (NULL: none; excludes parent): [T], the cache slot of
     * token t's parent: a slot of this batch before it (kv->len + its index), a node of the tree the
     * cache holds from an earlier forward with parent_slot (kv->tree0 .. kv->len - 1), or -1 for a
     * child of the rows before the tree. Its slot and RoPE position as with parent: the tree's first
     * slot + its depth. A drafter expands a tree's frontier level by level this way without feeding a
     * node twice; a crop ends the tree. */
    const int *parent_slot;
} fwd_batch;

/* Scratch for the forward, grown on demand and reused across calls. On the CPU in the int8 contract a
 * batch of more than pass_T tokens (a prompt's prefill) goes through in passes of at most pass_T
 * consecutive tokens when it is a chain batch with no capture or final_hidden: each pass's tokens attend
 * to the rows the passes before wrote and every operation of a token is the same whatever the batch
 * (batch-invariant), so the result is the one-pass result bit for bit. A pass's activations stay in the
 * cores' caches (64 tokens of the 1.5B's widest input, 573 KB of int8: prefill 512 +5-8 % on the AVX2 and
 * AMX paths, a verify batch of 128 tokens 0.90x the time) and the scratch no longer grows with the
 * prompt (a 4,598-token prompt held ~1.5 GB of activations for the 1.5B). The exact contract keeps its
 * batches whole (its BLAS GEMM rounds by the batch's size), and so does a GPU backend (not measured). */
#define FWD_PASS_T 64
typedef struct {
    backend *be;
    int pass_T;                /* tokens a pass at most (fwd_state_init: FWD_PASS_T, 0 on a GPU; 0 = one pass) */
    int cap_T, cap_logit_rows;
    float *x, *xb, *q, *k, *v, *att, *h1, *h2, *logits, *hid; /* backend memory */
    float *cos, *sin;                                            /* host */
    int *seq, *pos, *rows, *rpos;                                /* host (rpos: RoPE positions) */
} fwd_state;

int fwd_state_init(fwd_state *st, backend *be);
void fwd_state_free(fwd_state *st);
int model_forward(const model *m, fwd_state *st, const fwd_batch *b);

/* Convenience for one request: append n tokens, logits of the last (or all) into `logits`. */
int model_forward_one(const model *m, fwd_state *st, kv_cache *kv, const int *tokens, int n, int all_logits,
                      float *logits);

#endif
