/* request.h — one generation request as the decoding loop and the drafters see it.
 *
 * Invariant between rounds: toks holds the prompt and every committed output token; the target's
 * KV cache holds all of them but the last one (the anchor), whose forward is the first row of the
 * next verification batch. */
#ifndef DS_REQUEST_H
#define DS_REQUEST_H

#include "../runtime/backends/backend.h"
#include "../runtime/text/tokenizer.h"
#include "../verify/verify.h"

typedef struct request {
    int id;
    ivec toks;          /* prompt + committed output */
    int n_prompt;
    int max_new;        /* output budget (also bounds how many tokens are drafted) */
    int stop_at;        /* when > 0: done once this many output tokens exist (sampling tests) */
    kv_cache *tkv;      /* target cache */
    void *dstate;       /* the drafter's per-request state */
    rng_t rng_draft;    /* draft sampling */
    verify_rng vr;      /* accept tests; residual and bonus draws */
    int done;           /* end of generation or budget reached */
    int rounds;
    double t0;          /* when it was admitted (ds_now), 0 = not yet */
    double wall_s;      /* t0 to its last token */
} request;

static inline int request_n_out(const request *r) { return r->toks.n - r->n_prompt; }
static inline int request_anchor(const request *r) { return r->toks.v[r->toks.n - 1]; }

#endif
