/* ngram — prompt lookup: the longest suffix of the request's own tokens (prompt, earlier turns,
 * generated text), of length n_max down to n_min, that occurs earlier in the request; the tokens
 * that followed its most recent occurrence are the draft (copied LZ77-style, so a repeat that runs
 * into the drafted tokens keeps going); with n_min 0 a context without any match repeats its last
 * token. No model and no randomness: q_k = delta(x_k), so the verifier accepts x_k with
 * probability p(x_k) and the round is exact at every temperature.
 *
 * Confidence c_k (what the scheduler reads) is the online acceptance rate of earlier drafts
 * (accept_stats.h) in the cell of this match: match-length bucket, whether the matched n-gram's
 * occurrences agree on the next token, and whether this match continues the copy whose tokens the
 * last round committed. Optional "calibration" temperatures (from `calibrate`) scale logit(c_k). */
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "accept_stats.h"
#include "drafter.h"

#define NG_LB 8     /* match-length buckets: 0, 1, 2, 3, 4-5, 6-8, 9-15, 16+ */
#define NG_AB 3     /* occurrences of the matched n-gram: one, several agreeing, several disagreeing */
#define NG_CONT 2   /* continues the copy of the last round */
#define NG_CELLS (NG_LB * NG_AB * NG_CONT)
#define NG_MAXG 64

typedef struct {
    int n_min, n_max;
    accept_prior ap;        /* how own counts and run-wide rates combine (accept_stats.h) */
    accept_counts run;      /* finished requests */
    int eos_ok;             /* the target has a tokenizer: a draft stops after end-of-generation */
} ngram;

typedef struct {
    accept_counts own;      /* this request's outcomes */
    int n;                  /* drafts of the last proposal */
    int n0;                 /* committed tokens when it was made */
    int tok[NG_MAXG], cell[NG_MAXG];
    int src;                /* where the last proposal's copy started (in ext) */
    int src_next;           /* where it continues, when the last round committed only copied tokens */
    int last_full;          /* ... which it did */
    int *ext;               /* context + draft, for copies that run into the draft */
    int ext_cap;
} ng_state;

static int len_bucket(int m) { return m <= 3 ? m : m <= 5 ? 4 : m <= 8 ? 5 : m <= 15 ? 6 : 7; }

static int ngram_open(drafter *d, const cJSON *cfg, target *t) {
    ngram *g = ds_calloc(1, sizeof *g, "ngram drafter");
    if (!g) return -1;
    d->impl = g;
    g->n_min = 1, g->n_max = 8;
    jcfg r;
    DS_TRY(jcfg_open(&r, cfg, "drafter"));
    DS_TRY(jcfg_int(&r, "n_min", 0, 64, &g->n_min));
    DS_TRY(jcfg_int(&r, "n_max", 1, 64, &g->n_max));
    DS_TRY(accept_prior_read(&r, &g->ap));
    DS_TRY(jcfg_close(&r));
    DS_CHECK(g->n_min <= g->n_max, "drafter: n_min %d exceeds n_max %d", g->n_min, g->n_max);
    DS_TRY(accept_counts_init(&g->run, NG_CELLS, g->ap.prior, g->ap.prior_n));
    g->eos_ok = t->has_tokenizer;
    d->has_conf = 1;
    d->deterministic = 1;
    snprintf(d->describe, sizeof d->describe, "ngram: prompt lookup, longest suffix match n = %d..%d, most recent occurrence",
             g->n_min, g->n_max);
    snprintf(d->fingerprint, sizeof d->fingerprint, "ngram:%d:%d", g->n_min, g->n_max);
    return 0;
fail:
    return -1; /* close() frees what was made */
}

static int ngram_begin(drafter *d, request *r, const float *prompt_hidden) {
    DS_UNUSED(d), DS_UNUSED(prompt_hidden);
    ng_state *s = ds_calloc(1, sizeof *s, "ngram state");
    if (!s) return -1;
    r->dstate = s;
    s->ext_cap = r->n_prompt + r->max_new + NG_MAXG + 2;
    DS_TRYP(s->ext = ds_malloc(sizeof(int) * (size_t)s->ext_cap, "ngram context"));
    DS_TRY(accept_counts_init(&s->own, NG_CELLS, 0, 0));
    return 0;
fail:
    return -1; /* end() frees what was made */
}

static int ngram_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out) {
    DS_UNUSED(sp);
    ngram *g = d->impl;
    ng_state *s = r->dstate;
    const int *x = r->toks.v;
    int n = r->toks.n;
    gamma = DS_MIN(gamma, DS_MIN(NG_MAXG, out->cap));
    out->n = s->n = 0;
    s->n0 = n;
    if (n < 2 || gamma <= 0) return 0;
    /* the longest suffix match ending before the last token, the most recent on ties */
    int best = 0, best_e = -1, last = x[n - 1];
    for (int e = n - 2; e >= 0; e--) {
        if (x[e] != last) continue;
        int l = 1, lim = DS_MIN(g->n_max, e + 1);
        while (l < lim && x[e - l] == x[n - 1 - l]) l++;
        if (l > best) best = l, best_e = e;
        if (best == g->n_max) break;
    }
    if (best < g->n_min) return 0;
    if (best == 0) best_e = n - 2; /* n_min 0 and no match: repeat the last token (its own bucket) */
    /* do the occurrences of the matched n-gram agree on what follows? (newest 64) */
    int occ = 0, agree = 0, nxt = x[best_e + 1];
    for (int e = best_e; best > 0 && e >= 0 && occ < 64; e--) {
        if (x[e] != last || e + 1 < best) continue;
        int l = 1;
        while (l < best && x[e - l] == x[n - 1 - l]) l++;
        if (l == best) occ++, agree += x[e + 1] == nxt;
    }
    int ab = occ <= 1 ? 0 : agree == occ ? 1 : 2, cont = s->last_full && best_e + 1 == s->src_next;
    int cell = (len_bucket(best) * NG_AB + ab) * NG_CONT + cont;
    /* copy the continuation; the source may run into the drafted tokens themselves */
    DS_CHECK(n + gamma < s->ext_cap, "ngram: context of %d tokens exceeds the request's %d", n + gamma, s->ext_cap);
    memcpy(s->ext, x, sizeof(int) * (size_t)n);
    int src = best_e + 1, k = 0;
    while (k < gamma) {
        int tk = s->ext[src + k];
        s->ext[n + k] = tk;
        accept_draft(out, k, tk, cell, d->fault, &g->run, &s->own, &g->ap);
        s->cell[k++] = cell;
        if (g->eos_ok && tokenizer_is_eog(&d->t->tk, tk)) break;
    }
    out->n = s->n = k;
    memcpy(s->tok, out->tok, sizeof(int) * (size_t)k);
    s->src = src;
    return 0;
fail:
    return -1;
}

static int ngram_commit(drafter *d, request *r, int n_accepted, int next_token, const float *hidden) {
    DS_UNUSED(hidden);
    ngram *g = d->impl;
    ng_state *s = r->dstate;
    DS_UNUSED(n_accepted), DS_UNUSED(next_token);
    int after = s->n ? s->ext[s->src + s->n] : -1, m = r->toks.n - s->n0;
    int copied = accept_observe(&s->own, &g->run, &g->ap, s->cell, s->tok, s->n, r->toks.v + s->n0, m, after);
    /* the round committed only copied tokens: a match continuing this copy starts at src_next */
    s->last_full = s->n > 0 && copied == m;
    s->src_next = s->src + copied;
    s->n = 0;
    return 0;
}

static void ngram_end(drafter *d, request *r) {
    ngram *g = d->impl;
    ng_state *s = r->dstate;
    if (!s) return;
    if (s->own.acc) accept_counts_add(&g->run, &s->own);
    accept_counts_free(&s->own);
    free(s->ext);
    free(s);
    r->dstate = NULL;
}

static int ngram_rewind(drafter *d, request *r) {
    DS_UNUSED(d);
    ng_state *s = r->dstate;
    accept_counts own = s->own;
    int *ext = s->ext, cap = s->ext_cap;
    memset(s, 0, sizeof *s);
    s->ext = ext, s->ext_cap = cap, s->own = own;
    accept_counts_zero(&s->own);
    return 0;
}

static void ngram_close(drafter *d) {
    ngram *g = d->impl;
    if (!g) return;
    accept_counts_free(&g->run);
    free(g);
    d->impl = NULL;
}

const drafter_ops drafter_ngram = {
    "ngram",
    "prompt lookup (training-free): {\"n_min\": 1, \"n_max\": 8, \"prior\": 0.2, \"prior_weight\": 2, \"shrink\": 8, \"request_weight\": 4, "
    "\"calibration\": [T_1, ...]}",
    ngram_open, ngram_begin, ngram_propose, ngram_commit, ngram_end, ngram_rewind, ngram_close,
    "{\"n_min\": 0, \"n_max\": 3}",
    NULL,
};
