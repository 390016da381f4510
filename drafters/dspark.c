/* dspark.c — DFlash and DSpark (Markov / RNN head) as drafters in the decoding loop.
 *
 * Per request the drafter keeps, for every draft layer, the K/V of the context rows: the target's
 * tapped states of every committed token but the anchor, added as the engine commits them. A round
 * runs the block [anchor, mask x (B-1)] through the draft layers in one parallel pass, takes base
 * logits U from the target's own head, then drafts left to right: z_k = U_k (+ the Markov or RNN
 * correction from x_{k-1}), q_k = processed z_k, x_k ~ q_k, and the confidence c_k. The time of
 * that sequential loop is measured separately (share of a round). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/common.h"
#include "../runtime/jcfg.h"
#include "../runtime/quant.h"
#include "../runtime/train_ops.h"
#include "blockdraft.h"
#include "drafter.h"

typedef struct {
    bd_model m;
    qmat W2q;            /* the head's W2 as an F32 matrix, for the backend's parallel matmul */
    float *x, *xn, *q, *kb, *vb, *att, *tmp, *g, *u, *hm, *h, *U, *rstd, *prob, *zrow, *bias, *qalt;
    float *state, *state_new, *o, *cell_inp, *cell_pre, *cin; /* the sequential head's one-row scratch */
    int *pos;
    int cap_ctx;         /* prob scratch sized for this many context rows */
    lp_scratch scr;
} dspark;

typedef struct {
    float **kc, **vc;    /* [layers] -> [cap][kv_dim], RoPE applied */
    int n_ctx, cap;
} dstate;

static int ensure_prob(dspark *s, int n_ctx) {
    const bd_config *c = &s->m.cfg;
    if (n_ctx <= s->cap_ctx) return 0;
    int cap = DS_MAX(n_ctx, 2 * s->cap_ctx);
    free(s->prob);
    s->prob = ds_malloc(sizeof(float) * (size_t)bd_rows(c) * c->n_heads * (size_t)(cap + bd_rows(c)), "draft attention");
    if (!s->prob) return -1;
    s->cap_ctx = cap;
    return 0;
}

static int dspark_open(drafter *d, const cJSON *cfg, target *t) {
    dspark *s = ds_calloc(1, sizeof *s, "dspark drafter");
    if (!s) return -1;
    d->impl = s;
    jcfg r;
    const char *ck = NULL;
    DS_TRY(jcfg_open(&r, cfg, "drafter"));
    DS_TRY(jcfg_str(&r, "checkpoint", &ck));
    if (ck) {
        DS_TRY(jcfg_close(&r)); /* a checkpoint carries its architecture: nothing else may be given */
        DS_TRY(bd_load(&s->m, ck, &t->m));
        DS_CHECK(strcmp(s->m.cfg.kind, d->ops->name) == 0, "%s holds a '%s' drafter, not '%s'", ck, s->m.cfg.kind,
                 d->ops->name);
        snprintf(d->describe, sizeof d->describe, "%s: checkpoint %s (%d layers, gamma %d, %s)", d->ops->name, ck,
                 s->m.cfg.n_layers, s->m.cfg.gamma, s->m.cfg.anchor_first ? "anchor row predicts" : "mask rows predict");
    } else {
        /* untrained, for tests and the losslessness gate: {"seed": N, "init_noise": x, "init_std": y, ...architecture} */
        bd_config c;
        uint64_t seed = 1;
        float noise = 0, istd = 0;
        DS_TRY(jcfg_u64(&r, "seed", &seed));
        DS_TRY(jcfg_float(&r, "init_noise", 0, 100, &noise));
        DS_TRY(jcfg_float(&r, "init_std", 0, 100, &istd));
        cJSON *arch = cJSON_Duplicate(cfg, 1);
        if (arch) {
            cJSON_DeleteItemFromObjectCaseSensitive(arch, "seed");
            cJSON_DeleteItemFromObjectCaseSensitive(arch, "init_noise");
            cJSON_DeleteItemFromObjectCaseSensitive(arch, "init_std");
        }
        int rc = bd_config_init(&c, &t->m, d->ops->name, arch); /* the rest, strictly */
        cJSON_Delete(arch);
        DS_TRY(rc);
        DS_TRY(bd_model_init(&s->m, &c, &t->m, seed, noise));
        /* weights drawn at std 0.02 scaled to init_std: an untrained drafter whose layers matter */
        if (istd > 0) bd_model_rescale(&s->m, istd / 0.02f);
        snprintf(d->describe, sizeof d->describe, "%s: untrained (random init)", d->ops->name);
    }
    const bd_config *c = &s->m.cfg;
    d->has_conf = c->conf;
    d->n_capture = c->n_tap;
    memcpy(d->capture_layers, c->tap, sizeof(int) * (size_t)c->n_tap);
    snprintf(d->fingerprint, sizeof d->fingerprint, "%s-%016llx", c->kind, (unsigned long long)s->m.n_params);
    if (c->head != HEAD_NONE) {
        s->W2q = (qmat){GGML_F32, c->vocab, c->rank, sizeof(float) * (size_t)c->rank, s->m.W2, NULL};
    }
    int B = bd_rows(c), D = c->dim, QD = c->n_heads * c->head_dim, KD = c->n_kv_heads * c->head_dim, HF = c->hidden_dim;
    DS_TRYP(s->x = ds_malloc(sizeof(float) * (size_t)B * D, "draft block"));
    DS_TRYP(s->xn = ds_malloc(sizeof(float) * (size_t)B * D, "draft block"));
    DS_TRYP(s->q = ds_malloc(sizeof(float) * (size_t)B * QD, "draft block"));
    DS_TRYP(s->kb = ds_malloc(sizeof(float) * (size_t)B * KD, "draft block"));
    DS_TRYP(s->vb = ds_malloc(sizeof(float) * (size_t)B * KD, "draft block"));
    DS_TRYP(s->att = ds_malloc(sizeof(float) * (size_t)B * QD, "draft block"));
    DS_TRYP(s->tmp = ds_malloc(sizeof(float) * (size_t)B * D, "draft block"));
    DS_TRYP(s->g = ds_malloc(sizeof(float) * (size_t)B * HF, "draft block"));
    DS_TRYP(s->u = ds_malloc(sizeof(float) * (size_t)B * HF, "draft block"));
    DS_TRYP(s->hm = ds_malloc(sizeof(float) * (size_t)B * HF, "draft block"));
    DS_TRYP(s->h = ds_malloc(sizeof(float) * (size_t)B * D, "draft block"));
    DS_TRYP(s->U = ds_malloc(sizeof(float) * (size_t)B * c->vocab, "draft logits"));
    DS_TRYP(s->rstd = ds_malloc(sizeof(float) * (size_t)B, "draft block"));
    DS_TRYP(s->zrow = ds_malloc(sizeof(float) * (size_t)c->vocab, "draft logits"));
    DS_TRYP(s->bias = ds_malloc(sizeof(float) * (size_t)c->vocab, "draft logits"));
    DS_TRYP(s->qalt = ds_malloc(sizeof(float) * (size_t)c->vocab, "draft logits"));
    DS_TRYP(s->pos = ds_malloc(sizeof(int) * (size_t)B, "draft block"));
    int rk = DS_MAX(c->rank, 1);
    DS_TRYP(s->state = ds_calloc((size_t)rk, sizeof(float), "draft head"));
    DS_TRYP(s->state_new = ds_calloc((size_t)rk, sizeof(float), "draft head"));
    DS_TRYP(s->o = ds_calloc((size_t)rk, sizeof(float), "draft head"));
    DS_TRYP(s->cell_inp = ds_calloc((size_t)(2 * rk + D), sizeof(float), "draft head"));
    DS_TRYP(s->cell_pre = ds_calloc((size_t)3 * rk, sizeof(float), "draft head"));
    DS_TRYP(s->cin = ds_calloc((size_t)(D + rk), sizeof(float), "draft head"));
    return 0;
fail:
    return -1;
}

static void state_free(drafter *d, dstate *st) {
    dspark *s = d->impl;
    if (!st) return;
    for (int l = 0; l < s->m.cfg.n_layers; l++) {
        if (st->kc) free(st->kc[l]);
        if (st->vc) free(st->vc[l]);
    }
    free(st->kc);
    free(st->vc);
    free(st);
}

/* add n context rows (the target's tapped states, [n_tap][n][dim]) at positions n_ctx.. */
static int append_context(drafter *d, dstate *st, const float *hidden, int n) {
    dspark *s = d->impl;
    const bd_config *c = &s->m.cfg;
    int D = c->dim, TD = c->n_tap * D, KD = c->n_kv_heads * c->head_dim;
    if (n <= 0) return 0;
    if (st->n_ctx + n > st->cap) {
        int cap = DS_MAX(st->n_ctx + n, 2 * st->cap);
        for (int l = 0; l < c->n_layers; l++) {
            float *k = ds_realloc(st->kc[l], sizeof(float) * (size_t)cap * KD, "draft context");
            if (!k) return -1;
            st->kc[l] = k;
            float *v = ds_realloc(st->vc[l], sizeof(float) * (size_t)cap * KD, "draft context");
            if (!v) return -1;
            st->vc[l] = v;
        }
        st->cap = cap;
    }
    float *taps = ds_malloc(sizeof(float) * (size_t)n * TD, "context rows"), *fc = ds_malloc(sizeof(float) * (size_t)n * D, "context rows");
    float *C = ds_malloc(sizeof(float) * (size_t)n * D, "context rows"), *rs = ds_malloc(sizeof(float) * (size_t)n, "context rows");
    int *pos = ds_malloc(sizeof(int) * (size_t)n, "context rows"), rc = -1;
    if (!taps || !fc || !C || !rs || !pos) goto done;
    for (int i = 0; i < n; i++) { /* engine layout [tap][row][dim] -> [row][tap*dim] as in training */
        for (int t = 0; t < c->n_tap; t++)
            memcpy(taps + (size_t)i * TD + (size_t)t * D, hidden + ((size_t)t * n + i) * D, sizeof(float) * D);
        pos[i] = st->n_ctx + i;
    }
    linear_forward_f(fc, taps, s->m.fc, NULL, n, TD, D);
    rmsnorm_forward_f(C, rs, fc, s->m.hidden_norm, n, D, c->eps);
    for (int l = 0; l < c->n_layers; l++) {
        float *k = st->kc[l] + (size_t)st->n_ctx * KD, *v = st->vc[l] + (size_t)st->n_ctx * KD;
        linear_forward_f(k, C, s->m.layer[l].wk, NULL, n, D, KD);
        linear_forward_f(v, C, s->m.layer[l].wv, NULL, n, D, KD);
        rope_forward_f(k, pos, n, c->n_kv_heads, c->head_dim, c->rope_theta);
    }
    st->n_ctx += n;
    rc = 0;
done:
    free(taps), free(fc), free(C), free(rs), free(pos);
    return rc;
}

static int dspark_begin(drafter *d, request *r, const float *prompt_hidden) {
    dspark *s = d->impl;
    dstate *st = ds_calloc(1, sizeof *st, "draft state");
    if (!st) return -1;
    st->kc = ds_calloc((size_t)s->m.cfg.n_layers, sizeof(float *), "draft state");
    st->vc = ds_calloc((size_t)s->m.cfg.n_layers, sizeof(float *), "draft state");
    r->dstate = st;
    if (!st->kc || !st->vc) return -1;
    if (!prompt_hidden) {
        ds_error("%s needs the target's hidden states of the prompt", d->ops->name);
        return -1;
    }
    return append_context(d, st, prompt_hidden, r->n_prompt);
}

/* The parallel pass: the block [anchor, mask x (B-1)] through the draft layers over the context,
 * then the target's head on the prediction rows -> s->U [gamma][V], s->h. */
static int block_pass(drafter *d, request *r, int gamma) {
    dspark *s = d->impl;
    dstate *st = r->dstate;
    const bd_config *c = &s->m.cfg;
    const bd_model *m = &s->m;
    int B = bd_rows(c), D = c->dim, QD = c->n_heads * c->head_dim, KD = c->n_kv_heads * c->head_dim, HF = c->hidden_dim;
    int anchor = request_anchor(r);
    if (st->n_ctx != r->toks.n - 1) {
        ds_error("%s: context holds %d rows but %d tokens are committed", d->ops->name, st->n_ctx, r->toks.n - 1);
        return -1;
    }
    if (ensure_prob(s, st->n_ctx)) return -1;
    for (int j = 0; j < B; j++) {
        memcpy(s->x + (size_t)j * D, m->E + (size_t)(j == 0 ? anchor : c->mask_token) * D, sizeof(float) * D);
        s->pos[j] = st->n_ctx + j;
    }
    int ctx_len[32], lo[32], hi[32]; /* B <= 17 */
    for (int j = 0; j < B; j++) ctx_len[j] = st->n_ctx, lo[j] = 0, hi[j] = B;
    int Lmax = st->n_ctx + B;
    for (int l = 0; l < c->n_layers; l++) {
        const struct bd_layer *w = &m->layer[l];
        rmsnorm_forward_f(s->xn, s->rstd, s->x, w->attn_norm, B, D, c->eps);
        linear_forward_f(s->q, s->xn, w->wq, NULL, B, D, QD);
        linear_forward_f(s->kb, s->xn, w->wk, NULL, B, D, KD);
        linear_forward_f(s->vb, s->xn, w->wv, NULL, B, D, KD);
        rope_forward_f(s->q, s->pos, B, c->n_heads, c->head_dim, c->rope_theta);
        rope_forward_f(s->kb, s->pos, B, c->n_kv_heads, c->head_dim, c->rope_theta);
        attn_forward_f(s->att, s->prob, s->q, st->kc[l], st->vc[l], s->kb, s->vb, ctx_len, lo, hi, B, c->n_heads,
                       c->n_kv_heads, c->head_dim, Lmax);
        linear_forward_f(s->tmp, s->att, w->wo, NULL, B, QD, D);
        for (size_t i = 0; i < (size_t)B * D; i++) s->x[i] += s->tmp[i];
        rmsnorm_forward_f(s->xn, s->rstd, s->x, w->ffn_norm, B, D, c->eps);
        linear_forward_f(s->g, s->xn, w->w_gate, NULL, B, D, HF);
        linear_forward_f(s->u, s->xn, w->w_up, NULL, B, D, HF);
        swiglu_forward_f(s->hm, s->g, s->u, (long)B * HF);
        linear_forward_f(s->tmp, s->hm, w->w_down, NULL, B, HF, D);
        for (size_t i = 0; i < (size_t)B * D; i++) s->x[i] += s->tmp[i];
    }
    rmsnorm_forward_f(s->h, s->rstd, s->x, m->final_norm, B, D, c->eps);
    /* base logits of the prediction rows through the target's own (quantized) head */
    backend *be = d->t->be;
    float *outs[1] = {s->U};
    const qmat *ws[1] = {&d->t->m.output};
    return be->matmul(be, 1, outs, ws, s->h + (size_t)(c->anchor_first ? 0 : 1) * D, gamma);
}

/* Position k (0-based) of the left-to-right loop: z_k = U_k + correction(x_{k-1}), q_k, c_k.
 * prev is x_{k-1} (the anchor at k = 0); the RNN state in s->state is advanced. */
static int head_step(drafter *d, int k, int prev, const sampling_params *sp, float *q, float *conf) {
    dspark *s = d->impl;
    const bd_config *c = &s->m.cfg;
    const bd_model *m = &s->m;
    int V = c->vocab, D = c->dim, r_ = c->rank;
    float *z = s->zrow, *hk = s->h + (size_t)(k + (c->anchor_first ? 0 : 1)) * D;
    memcpy(z, s->U + (size_t)k * V, sizeof(float) * (size_t)V);
    const float *e = c->head != HEAD_NONE ? m->W1 + (size_t)prev * r_ : NULL;
    if (c->head != HEAD_NONE) {
        const float *in = e;
        if (c->head == HEAD_RNN) {
            rnn_cell_forward_f(s->state_new, s->o, s->cell_inp, s->cell_pre, s->state, e, hk, m->Wr, m->br, 1, r_, D);
            memcpy(s->state, s->state_new, sizeof(float) * (size_t)r_);
            in = s->o;
        }
        backend *be = d->t->be;
        float *bo[1] = {s->bias};
        const qmat *bw[1] = {&s->W2q};
        if (be->matmul(be, 1, bo, bw, in, 1)) return -1;
        for (int i = 0; i < V; i++) z[i] += s->bias[i];
    }
    if (logits_process(z, V, sp, q, &s->scr)) return -1;
    if (c->conf && conf) {
        float lg;
        memcpy(s->cin, hk, sizeof(float) * D);
        if (e) memcpy(s->cin + D, e, sizeof(float) * (size_t)r_);
        linear_forward_f(&lg, s->cin, m->wc, m->bc, 1, D + (e ? r_ : 0), 1);
        if (k < c->n_calib && c->calib[k] > 0) lg /= c->calib[k]; /* sequential temperature scaling */
        *conf = 1.0f / (1.0f + expf(-lg));
    }
    return 0;
}

static int dspark_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out) {
    dspark *s = d->impl;
    const bd_config *c = &s->m.cfg;
    gamma = DS_MIN(gamma, c->gamma);
    if (block_pass(d, r, gamma)) return -1;
    double t1 = ds_now();
    if (c->head == HEAD_RNN) memset(s->state, 0, sizeof(float) * (size_t)c->rank);
    int prev = request_anchor(r);
    for (int k = 0; k < gamma; k++) {
        float *qk = out->q + (size_t)k * c->vocab;
        if (head_step(d, k, prev, sp, qk, c->conf ? &out->conf[k] : NULL)) return -1;
        const float *law = qk;
        if (d->fault == FAULT_DRAFT_NO_TOP_P) { /* the control: sample one law, report another */
            sampling_params nop = *sp;
            nop.top_p = 1.0f;
            if (logits_process(s->zrow, c->vocab, &nop, s->qalt, &s->scr)) return -1;
            law = s->qalt;
        }
        if ((out->tok[k] = rng_draw(&r->rng_draft, law, c->vocab)) < 0) return -1;
        prev = out->tok[k];
    }
    out->n = gamma;
    /* DFlash's per-position head calls are independent; only a Markov/RNN head makes it a chain */
    if (c->head != HEAD_NONE) d->t_seq_loop += ds_now() - t1;
    return 0;
}

static int dspark_commit(drafter *d, request *r, int n_accepted, int next_token, const float *hidden) {
    DS_UNUSED(next_token);
    if (!hidden) {
        ds_error("%s needs the target's hidden states of the accepted rows", d->ops->name);
        return -1;
    }
    return append_context(d, r->dstate, hidden, n_accepted + 1); /* the anchor and the accepted drafts */
}

static int dspark_rewind(drafter *d, request *r) {
    DS_UNUSED(d);
    dstate *st = r->dstate;
    if (st->n_ctx > r->n_prompt) st->n_ctx = r->n_prompt;
    return 0;
}

static void dspark_end(drafter *d, request *r) {
    state_free(d, r->dstate);
    r->dstate = NULL;
}

static int dspark_save(const drafter *d, const char *dir) { return bd_save(&((dspark *)d->impl)->m, dir); }

static void dspark_close(drafter *d) {
    dspark *s = d->impl;
    if (!s) return;
    bd_model_free(&s->m);
    free(s->x), free(s->xn), free(s->q), free(s->kb), free(s->vb), free(s->att), free(s->tmp), free(s->g), free(s->u);
    free(s->hm), free(s->h), free(s->U), free(s->rstd), free(s->prob), free(s->zrow), free(s->bias), free(s->qalt), free(s->pos);
    free(s->state), free(s->state_new), free(s->o), free(s->cell_inp), free(s->cell_pre), free(s->cin);
    lp_scratch_free(&s->scr);
    free(s);
    d->impl = NULL;
}

/* the gate's untrained configuration: one layer, noisy init so the drafts are stochastic */
#define BLOCK_GATE                                                                                        \
    "{\"init_noise\": 0.5, \"init_std\": 0.3, \"layers\": 1, \"rank\": 8, \"gamma\": 3, \"taps\": [0, 1]}"
#define BLOCK_OPS(NAME, HELP)                                                                                    \
    {NAME, HELP, dspark_open, dspark_begin, dspark_propose, dspark_commit, dspark_end, dspark_rewind, dspark_save, \
     dspark_close, BLOCK_GATE}

const drafter_ops drafter_dflash =
    BLOCK_OPS("dflash", "parallel block drafter on injected target states: {\"checkpoint\": DIR}");
const drafter_ops drafter_dspark_markov =
    BLOCK_OPS("dspark-markov", "DFlash backbone + Markov head + confidence head: {\"checkpoint\": DIR}");
const drafter_ops drafter_dspark_rnn =
    BLOCK_OPS("dspark-rnn", "DFlash backbone + gated RNN head + confidence head: {\"checkpoint\": DIR}");
