/* vanilla — a small autoregressive LM as drafter: a separate model with the target's vocabulary
 * ({"model": PATH}), or the target's own first k layers followed by its final norm and head
 * ({"layers": k}, self-drafting, no extra weights). It keeps its own KV cache per request, rolls
 * it back to the accepted prefix, and returns the real processed q of every draft. */
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/jcfg.h"
#include "drafter.h"

typedef struct {
    model own;       /* a separate draft model, when loaded */
    model view;      /* self-draft: the target's struct with fewer layers (shares every weight) */
    const model *m;
    tokenizer tk;
    int has_tk, self;
    backend *prepared;   /* the backend holding copies of own's weights (forgotten at close) */
    fwd_state fs;
    float *logits;   /* [V] */
    lp_scratch scr;
} vanilla;

typedef struct {
    kv_cache *kv;
    int base;        /* committed tokens (anchor included) when the last block was drafted */
} vstate;

static int vanilla_open(drafter *d, const cJSON *cfg, target *t) {
    vanilla *v = ds_calloc(1, sizeof *v, "vanilla drafter");
    if (!v) return -1;
    d->impl = v;
    jcfg r;
    int k = 4, has_layers = 0;
    const char *path = NULL;
    DS_TRY(jcfg_open(&r, cfg, "drafter"));
    has_layers = jcfg_get(&r, "layers") != NULL;
    DS_TRY(jcfg_int(&r, "layers", 1, 1 << 20, &k));
    DS_TRY(jcfg_str(&r, "model", &path));
    DS_TRY(jcfg_close(&r));
    DS_CHECK(!(has_layers && path), "drafter: give either \"layers\" (self-draft) or \"model\" (a separate LM), not both");
    if (path) {
        DS_TRY(model_load(&v->own, path));
        if (v->own.format == 0 && gguf_get(&v->own.gguf, "tokenizer.ggml.model")) {
            DS_TRY(tokenizer_load_gguf(&v->tk, &v->own.gguf));
            v->has_tk = 1;
        }
        DS_TRY(vocab_compatible(t, &v->own, v->has_tk ? &v->tk : NULL, path));
        DS_TRY(t->be->prepare(t->be, &v->own)); /* the backend's copies of the draft model's weights */
        v->prepared = t->be;
        v->m = &v->own;
        snprintf(d->describe, sizeof d->describe, "vanilla: separate LM %s (%d layers, dim %d)", path,
                 v->own.cfg.n_layers, v->own.cfg.dim);
        snprintf(d->fingerprint, sizeof d->fingerprint, "%s", v->own.fingerprint);
    } else {
        /* k = L drafts with the whole target: every draft is accepted (a check of the loop, not a speedup) */
        DS_CHECK(k >= 1 && k <= t->m.cfg.n_layers, "\"layers\" %d must be in 1..%d (the target's layer count)", k,
                 t->m.cfg.n_layers);
        v->view = t->m; /* shallow: same weights, fewer layers; never freed as a model */
        v->view.cfg.n_layers = k;
        v->m = &v->view;
        v->self = 1;
        snprintf(d->describe, sizeof d->describe, "vanilla: self-draft, first %d of %d target layers + final norm + head",
                 k, t->m.cfg.n_layers);
        snprintf(d->fingerprint, sizeof d->fingerprint, "self:%s:%d", t->m.fingerprint, k);
    }
    DS_TRY(fwd_state_init(&v->fs, t->be));
    DS_TRYP(v->logits = ds_malloc(sizeof(float) * (size_t)t->m.cfg.vocab_size, "draft logits"));
    return 0;
fail:
    return -1; /* close() frees what was made */
}

static int vanilla_begin(drafter *d, request *r, const float *prompt_hidden) {
    DS_UNUSED(prompt_hidden);
    vanilla *v = d->impl;
    vstate *s = ds_calloc(1, sizeof *s, "draft state");
    if (!s) return -1;
    s->kv = kv_cache_new(d->t->be, &v->m->cfg, DS_MIN(r->n_prompt + r->max_new + 64, v->m->cfg.max_seq));
    if (!s->kv) {
        free(s);
        return -1;
    }
    r->dstate = s;
    return 0;
}

static int vanilla_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out) {
    vanilla *v = d->impl;
    vstate *s = r->dstate;
    int V = v->m->cfg.vocab_size;
    /* feed what the draft cache lacks: the anchor, and accepted tokens it never saw */
    int missing = r->toks.n - s->kv->len;
    if (model_forward_one(v->m, &v->fs, s->kv, r->toks.v + s->kv->len, missing, 0, v->logits)) return -1;
    s->base = r->toks.n;
    gamma = DS_MIN(gamma, v->m->cfg.max_seq - s->kv->len);
    for (int k = 0; k < gamma; k++) {
        float *q = out->q + (size_t)k * V;
        if (logits_process(v->logits, V, sp, q, &v->scr)) return -1;
        if ((out->tok[k] = rng_draw(&r->rng_draft, q, V)) < 0) return -1;
        if (k + 1 < gamma && model_forward_one(v->m, &v->fs, s->kv, &out->tok[k], 1, 0, v->logits)) return -1;
    }
    out->n = gamma;
    return 0;
}

static int vanilla_commit(drafter *d, request *r, int n_accepted, int next_token, const float *hidden) {
    DS_UNUSED(d), DS_UNUSED(next_token), DS_UNUSED(hidden);
    vstate *s = r->dstate;
    /* keep the anchor and the accepted drafts; rejected drafts are forgotten */
    kv_cache_crop(s->kv, s->base + n_accepted);
    return 0;
}

static void vanilla_end(drafter *d, request *r) {
    vstate *s = r->dstate;
    if (!s) return;
    kv_cache_free(d->t->be, s->kv);
    free(s);
    r->dstate = NULL;
}

static int vanilla_rewind(drafter *d, request *r) {
    DS_UNUSED(d);
    vstate *s = r->dstate;
    kv_cache_crop(s->kv, r->n_prompt); /* the prompt's cache stays valid */
    s->base = 0;
    return 0;
}

static void vanilla_close(drafter *d) {
    vanilla *v = d->impl;
    if (!v) return;
    fwd_state_free(&v->fs);
    free(v->logits);
    lp_scratch_free(&v->scr);
    if (v->has_tk) tokenizer_free(&v->tk);
    if (v->prepared) v->prepared->forget(v->prepared, &v->own);
    if (!v->self) model_free(&v->own);
    free(v);
    d->impl = NULL;
}

const drafter_ops drafter_vanilla = {
    "vanilla",
    "small autoregressive LM: {\"layers\": k} self-draft from the target's first k layers, or {\"model\": PATH}",
    vanilla_open, vanilla_begin, vanilla_propose, vanilla_commit, vanilla_end, vanilla_rewind, NULL, vanilla_close,
    "{\"layers\": 1}",
    "{\"layers\": 24}", /* on SmolLM2: deep enough that drafts share the target's top tokens */
};
