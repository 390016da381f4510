/* dspark.c — DFlash and DSpark (Markov / RNN head) as drafters in the decoding loop.
 *
 * Per request the drafter keeps, for every draft layer, the K/V of the context rows: the target's
 * tapped states of every committed token but the anchor, added as the engine commits them. A round
 * runs the block [anchor, mask x (B-1)] through the draft layers in one parallel pass, takes base
 * logits U from the target's own head, then drafts left to right: z_k = U_k (+ the Markov or RNN
 * correction from x_{k-1}), q_k = processed z_k, x_k ~ q_k, and the confidence c_k. The time of
 * that sequential loop is measured separately (share of a round).
 *
 * Every layer, the context K/V and the head's W2 run through the target's backend ops (one shared
 * implementation per backend, the drafter's weights described as fp32 qmats); only the sequential
 * head's per-step cell and the confidence dot (r- and d-sized vectors) and sampling stay on the
 * host, where the logits come back to anyway. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/formats/quant.h"
#include "../runtime/train/train_ops.h"
#include "blockdraft.h"
#include "drafter.h"
#include "tree_build.h"

typedef struct {
    bd_model m;
    backend *be;         /* the target's: it runs the block pass and keeps the context K/V */
    /* the drafter's matrices as fp32 qmats over its parameters (backend weight descriptors) */
    qmat Eq, fcq, W2q;
    qmat headq;          /* the target's quantized head, or its draft-vocabulary rows gathered */
    void *w2_q;          /* the Markov/RNN factor W2 quantized (head_precision q8_0 or q4_1), owned */
    struct dlayer { qmat wq, wk, wv, wo, w_gate, w_up, w_down; } *lq;
    uint32_t lt;         /* the draft layers' and the taps' projection's type (layer_precision); quantized: owned */
    /* backend buffers for one block of B rows */
    float *x, *xn, *q, *kb, *vb, *att, *tmp, *g, *u, *h, *Ud, *w2in, *w2out;
    /* host */
    float *U, *hh, *zrow, *bias, *qalt, *qsub, *cos, *sin;
    float *state, *state_new, *o, *cell_inp, *cell_pre, *cin; /* the sequential head's one-row scratch */
    int *pos, *vis, *seq, *tok;
    lp_scratch scr;
    /* tree mode (DDTree): tree_nodes > 0 nodes best first, tree_width children a node at most; DFlash's
     * rows are one a depth (cached in rid / rp), DSpark-Markov's one a parent (its token moves the head) */
    int tree_nodes, tree_width, rows_done, anchor;
    int rid[64][TREE_MAX_K];
    float rp[64][TREE_MAX_K];
    const sampling_params *sp;
    const tokenizer *tk;
} dspark;

typedef struct {
    kv_cache *kv;        /* per draft layer: K (RoPE applied) and V of the context rows, backend memory */
} dstate;

#define F32Q(rows, cols, p) ((qmat){GGML_F32, (rows), (cols), sizeof(float) * (size_t)(cols), (p)})

static int dspark_open(drafter *d, const cJSON *cfg, target *t) {
    dspark *s = ds_calloc(1, sizeof *s, "dspark drafter");
    if (!s) return -1;
    d->impl = s;
    jcfg r;
    const char *ck = NULL;
    DS_TRY(jcfg_open(&r, cfg, "drafter"));
    DS_TRY(jcfg_str(&r, "checkpoint", &ck));
    /* the sequential head reads all of W2 (Vd x rank) once per drafted position: in Q8_0 it moves a
     * quarter of fp32's bytes. q stays the law the token is drawn from, so verification is exact
     * either way; only the draft distribution moves (by the Q8_0 rounding of W2). */
    const char *hp, *lp;
    DS_TRY(drafter_precision(&r, "head_precision", &hp));
    /* the draft layers and the taps' projection are read whole by every block pass: two layers at the 1.5B's
     * width are ~400 MB in fp32 (a third of a target step), ~110 MB in Q8_0; exact either way, as above */
    DS_TRY(drafter_precision(&r, "layer_precision", &lp));
    DS_TRY(tree_read_opts(&r, &s->tree_nodes, &s->tree_width));
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
        /* a draft vocabulary given by its ids (the gate's case; trained drafters carry theirs) */
        const cJSON *vj = jcfg_get(&r, "vocab_ids");
        int vids[256], nv = 0;
        if (vj) DS_TRY(subvocab_json_ids(vj, vids, 256, &nv));
        cJSON *arch = cJSON_Duplicate(cfg, 1);
        if (arch) {
            cJSON_DeleteItemFromObjectCaseSensitive(arch, "seed");
            cJSON_DeleteItemFromObjectCaseSensitive(arch, "init_noise");
            cJSON_DeleteItemFromObjectCaseSensitive(arch, "init_std");
            cJSON_DeleteItemFromObjectCaseSensitive(arch, "vocab_ids");
            cJSON_DeleteItemFromObjectCaseSensitive(arch, "head_precision");
            cJSON_DeleteItemFromObjectCaseSensitive(arch, "layer_precision");
            cJSON_DeleteItemFromObjectCaseSensitive(arch, "tree_nodes");
            cJSON_DeleteItemFromObjectCaseSensitive(arch, "tree_width");
        }
        int rc = bd_config_init(&c, &t->m, d->ops->name, arch); /* the rest, strictly */
        cJSON_Delete(arch);
        DS_TRY(rc);
        if (nv) c.contract.draft_vocab = nv < c.vocab ? nv : 0;
        DS_TRY(bd_model_init_vocab(&s->m, &c, &t->m, seed, noise, nv ? vids : NULL));
        /* weights drawn at std 0.02 scaled to init_std: an untrained drafter whose layers matter */
        if (istd > 0) bd_model_rescale(&s->m, istd / 0.02f);
        snprintf(d->describe, sizeof d->describe, "%s: untrained (random init)", d->ops->name);
    }
    const bd_config *c = &s->m.cfg;
    d->has_conf = c->conf || s->tree_nodes; /* a tree node's confidence is its path probability */
    d->max_gamma = c->gamma;
    DS_TRY(contract_check_serving(&c->contract, t, ck ? ck : d->ops->name));
    d->n_capture = c->n_tap;
    memcpy(d->capture_layers, c->tap, sizeof(int) * (size_t)c->n_tap);
    snprintf(d->fingerprint, sizeof d->fingerprint, "%s-%016llx", c->kind, (unsigned long long)s->m.n_params);
    contract_weights_tag(&c->contract, s->m.params, s->m.n_params, d->fingerprint, sizeof d->fingerprint);
    s->tk = &t->tk;
    if (s->tree_nodes) {
        /* an RNN head's state is its path's: every node would carry its own, which this tree does not */
        DS_CHECK(c->head != HEAD_RNN, "%s: tree_nodes needs a head whose rows depend on the parent token only "
                 "(dflash, dspark-markov), not an RNN head", d->ops->name);
        tree_mark(d, "a best-first tree", s->tree_nodes, s->tree_width);
    }
    int Vd = s->m.Vd;
    if (c->head != HEAD_NONE) {
        char why[64];
        snprintf(why, sizeof why, "a rank that is a multiple of %d (it is %d)", QK8_0, c->rank);
        uint32_t ty;
        DS_TRY(drafter_type_of(hp, "head_precision", c->rank % QK8_0 == 0, why, &ty));
        if (ty != GGML_F32) {
            DS_TRY(drafter_quantize(s->m.W2, Vd, c->rank, ty, &s->W2q, "the head factor"));
            s->w2_q = (void *)s->W2q.data; /* ours: drafter_quantize allocated it */
        } else
            s->W2q = F32Q(Vd, c->rank, s->m.W2);
        snprintf(d->describe + strlen(d->describe), sizeof d->describe - strlen(d->describe), ", head %s",
                 drafter_type_key(ty));
    }
    int B = bd_rows(c), D = c->dim, QD = c->n_heads * c->head_dim, KD = c->n_kv_heads * c->head_dim, HF = c->hidden_dim;
    int V = c->vocab, L = c->n_layers;
    s->headq = t->m.output;
    if (s->m.sv.vid) { /* the head's draft-vocabulary rows, in the target's own (quantized) format */
        DS_TRY(subvocab_gather_head(&s->m.sv, &t->m.output));
        s->headq = s->m.sv.head;
        DS_TRY(t->be->prepare_mats(t->be, (const qmat *[]){&s->headq}, 1));
    }
    backend *be = s->be = t->be;
    s->Eq = F32Q(V, D, s->m.E);
    int fits = D % QK8_0 == 0 && QD % QK8_0 == 0 && HF % QK8_0 == 0;
    DS_TRY(drafter_type_of(lp, "layer_precision", fits, "widths that are multiples of 32", &s->lt));
    DS_TRYP(s->lq = ds_calloc((size_t)L, sizeof *s->lq, "draft layers"));
    if (s->lt == GGML_F32) s->fcq = F32Q(D, c->n_tap * D, s->m.fc);
    else DS_TRY(drafter_quantize(s->m.fc, D, c->n_tap * D, s->lt, &s->fcq, "the taps' projection"));
    for (int l = 0; l < L; l++) {
        const struct bd_layer *w = &s->m.layer[l];
        struct dlayer *q = &s->lq[l];
        const float *src[7] = {w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down};
        const int rows[7] = {QD, KD, KD, D, HF, HF, D}, cols[7] = {D, D, D, QD, D, D, HF};
        qmat *ws[7] = {&q->wq, &q->wk, &q->wv, &q->wo, &q->w_gate, &q->w_up, &q->w_down};
        for (int i = 0; i < 7; i++)
            if (s->lt == GGML_F32) *ws[i] = F32Q(rows[i], cols[i], (float *)src[i]);
            else DS_TRY(drafter_quantize(src[i], rows[i], cols[i], s->lt, ws[i], "a draft layer"));
        DS_TRY(be->prepare_mats(be, (const qmat *const *)ws, 7));
    }
    snprintf(d->describe + strlen(d->describe), sizeof d->describe - strlen(d->describe), ", layers %s",
             drafter_type_key(s->lt));
    {
        const qmat *ws[3] = {&s->Eq, &s->fcq, &s->W2q};
        DS_TRY(be->prepare_mats(be, ws, c->head != HEAD_NONE ? 3 : 2));
    }
#define BALLOC(p, n) DS_TRYP((p) = be->alloc(be, sizeof(float) * (size_t)(n)))
    BALLOC(s->x, B * D); BALLOC(s->xn, B * D); BALLOC(s->q, B * QD); BALLOC(s->kb, B * KD); BALLOC(s->vb, B * KD);
    BALLOC(s->att, B * QD); BALLOC(s->tmp, B * D); BALLOC(s->g, B * HF); BALLOC(s->u, B * HF); BALLOC(s->h, B * D);
    BALLOC(s->Ud, (size_t)B * Vd); BALLOC(s->w2in, DS_MAX(c->rank, 1)); BALLOC(s->w2out, Vd);
#undef BALLOC
    DS_TRYP(s->U = ds_malloc(sizeof(float) * (size_t)B * Vd, "draft logits"));
    DS_TRYP(s->qsub = ds_malloc(sizeof(float) * (size_t)Vd, "draft logits"));
    DS_TRYP(s->hh = ds_malloc(sizeof(float) * (size_t)B * D, "draft block"));
    DS_TRYP(s->zrow = ds_malloc(sizeof(float) * (size_t)V, "draft logits"));
    DS_TRYP(s->bias = ds_malloc(sizeof(float) * (size_t)V, "draft logits"));
    DS_TRYP(s->qalt = ds_malloc(sizeof(float) * (size_t)V, "draft logits"));
    DS_TRYP(s->cos = ds_malloc(sizeof(float) * (size_t)B * (c->head_dim / 2), "draft rope"));
    DS_TRYP(s->sin = ds_malloc(sizeof(float) * (size_t)B * (c->head_dim / 2), "draft rope"));
    DS_TRYP(s->pos = ds_malloc(sizeof(int) * (size_t)B, "draft block"));
    DS_TRYP(s->vis = ds_malloc(sizeof(int) * (size_t)B, "draft block"));
    DS_TRYP(s->seq = ds_calloc((size_t)B, sizeof(int), "draft block"));
    DS_TRYP(s->tok = ds_malloc(sizeof(int) * (size_t)B, "draft block"));
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
    kv_cache_free(s->be, st->kv);
    free(st);
}

/* add n context rows (the target's tapped states, [n_tap][n][dim] host) at positions kv->len.. */
static int append_context(drafter *d, dstate *st, const float *hidden, int n) {
    dspark *s = d->impl;
    backend *be = s->be;
    const bd_config *c = &s->m.cfg;
    int D = c->dim, TD = c->n_tap * D, KD = c->n_kv_heads * c->head_dim, n_ctx = st->kv->len, rc = -1;
    if (n <= 0) return 0;
    float *taps = NULL, *cs = NULL, *sn = NULL, *dtaps = NULL, *fc = NULL, *C = NULL, *k = NULL, *v = NULL;
    int *pos = NULL, *seq = NULL;
    kv_cache *kvs[1] = {st->kv};
    if (n_ctx + n + bd_rows(c) > st->kv->cap) /* room for the rows and the next block, grown geometrically */
        DS_TRY(kv_cache_reserve(be, st->kv, DS_MAX(n_ctx + n + bd_rows(c), 2 * st->kv->cap)));
    DS_TRYP(taps = ds_malloc(sizeof(float) * (size_t)n * TD, "context rows"));
    DS_TRYP(cs = ds_malloc(sizeof(float) * (size_t)n * (c->head_dim / 2), "context rope"));
    DS_TRYP(sn = ds_malloc(sizeof(float) * (size_t)n * (c->head_dim / 2), "context rope"));
    DS_TRYP(pos = ds_malloc(sizeof(int) * (size_t)n, "context rows"));
    DS_TRYP(seq = ds_calloc((size_t)n, sizeof(int), "context rows"));
    DS_TRYP(dtaps = be->alloc(be, sizeof(float) * (size_t)n * TD));
    DS_TRYP(fc = be->alloc(be, sizeof(float) * (size_t)n * D));
    DS_TRYP(C = be->alloc(be, sizeof(float) * (size_t)n * D));
    DS_TRYP(k = be->alloc(be, sizeof(float) * (size_t)n * KD));
    DS_TRYP(v = be->alloc(be, sizeof(float) * (size_t)n * KD));
    for (int i = 0; i < n; i++) { /* engine layout [tap][row][dim] -> [row][tap*dim] as in training */
        for (int t = 0; t < c->n_tap; t++)
            memcpy(taps + (size_t)i * TD + (size_t)t * D, hidden + ((size_t)t * n + i) * D, sizeof(float) * D);
        pos[i] = n_ctx + i;
    }
    rope_tables_fill(cs, sn, pos, n, c->head_dim, c->rope_theta, 1.0, NULL);
    rope_tables rt = {c->head_dim, 0, cs, sn}; /* adjacent pairs, as the training op rotates */
    attn_batch ab = {n, seq, pos, kvs, NULL};
    DS_TRY(be->to_device(be, dtaps, taps, sizeof(float) * (size_t)n * TD));
    {
        float *o[1] = {fc};
        const qmat *w[1] = {&s->fcq};
        DS_TRY(be->matmul(be, 1, o, w, dtaps, n));
    }
    DS_TRY(be->rmsnorm(be, C, fc, s->m.hidden_norm, n, D, c->eps));
    for (int l = 0; l < c->n_layers; l++) {
        float *o[2] = {k, v};
        const qmat *w[2] = {&s->lq[l].wk, &s->lq[l].wv};
        DS_TRY(be->matmul(be, 2, o, w, C, n));
        DS_TRY(be->rope(be, k, n, c->n_kv_heads, &rt));
        DS_TRY(be->kv_write(be, &ab, l, k, v));
    }
    st->kv->len += n;
    rc = 0;
fail:
    free(taps), free(cs), free(sn), free(pos), free(seq);
    be->release(be, dtaps), be->release(be, fc), be->release(be, C), be->release(be, k), be->release(be, v);
    return rc;
}

static int dspark_begin(drafter *d, request *r, const float *prompt_hidden) {
    dspark *s = d->impl;
    const bd_config *c = &s->m.cfg;
    dstate *st = ds_calloc(1, sizeof *st, "draft state");
    if (!st) return -1;
    r->dstate = st;
    if (!(st->kv = kv_cache_new_dims(s->be, c->n_layers, c->n_kv_heads, c->head_dim, r->n_prompt + bd_rows(c) + 64)))
        return -1;
    if (!prompt_hidden) {
        ds_error("%s needs the target's hidden states of the prompt", d->ops->name);
        return -1;
    }
    return append_context(d, st, prompt_hidden, r->n_prompt);
}

/* The parallel pass: the block [anchor, mask x (B-1)] through the draft layers over the context,
 * then the target's head on the prediction rows -> s->U [gamma][V], s->hh (host). Block row j sits
 * at position n_ctx + j; its K/V go into the cache's slots past the context (len is not advanced,
 * so the next pass overwrites them) and every block row sees the whole context and the whole block. */
static int block_pass(drafter *d, request *r, int gamma) {
    dspark *s = d->impl;
    backend *be = s->be;
    dstate *st = r->dstate;
    const bd_config *c = &s->m.cfg;
    const bd_model *m = &s->m;
    int B = bd_rows(c), D = c->dim, Vd = m->Vd, n_ctx = st->kv->len;
    if (n_ctx != r->toks.n - 1) {
        ds_error("%s: context holds %d rows but %d tokens are committed", d->ops->name, n_ctx, r->toks.n - 1);
        return -1;
    }
    DS_TRY(kv_cache_reserve(be, st->kv, n_ctx + B));
    for (int j = 0; j < B; j++) {
        s->tok[j] = j == 0 ? request_anchor(r) : c->mask_token;
        s->pos[j] = n_ctx + j;
        s->vis[j] = n_ctx + B; /* bidirectional inside the block */
    }
    rope_tables_fill(s->cos, s->sin, s->pos, B, c->head_dim, c->rope_theta, 1.0, NULL);
    rope_tables rt = {c->head_dim, 0, s->cos, s->sin};
    kv_cache *kvs[1] = {st->kv};
    attn_batch ab = {B, s->seq, s->pos, kvs, s->vis};
    DS_TRY(be->embed(be, s->x, &s->Eq, s->tok, B));
    for (int l = 0; l < c->n_layers; l++) {
        const struct bd_layer *w = &m->layer[l];
        const struct dlayer *wq = &s->lq[l];
        DS_TRY(be->rmsnorm(be, s->xn, s->x, w->attn_norm, B, D, c->eps));
        {
            float *o[3] = {s->q, s->kb, s->vb};
            const qmat *ws[3] = {&wq->wq, &wq->wk, &wq->wv};
            DS_TRY(be->matmul(be, 3, o, ws, s->xn, B));
        }
        DS_TRY(be->rope(be, s->q, B, c->n_heads, &rt));
        DS_TRY(be->rope(be, s->kb, B, c->n_kv_heads, &rt));
        DS_TRY(be->kv_write(be, &ab, l, s->kb, s->vb));
        DS_TRY(be->attention(be, s->att, s->q, &ab, l, c->n_heads, c->n_kv_heads, c->head_dim));
        {
            float *o[1] = {s->tmp};
            const qmat *ws[1] = {&wq->wo};
            DS_TRY(be->matmul(be, 1, o, ws, s->att, B));
        }
        DS_TRY(be->add(be, s->x, s->tmp, (size_t)B * D));
        DS_TRY(be->rmsnorm(be, s->xn, s->x, w->ffn_norm, B, D, c->eps));
        {
            float *o[2] = {s->g, s->u};
            const qmat *ws[2] = {&wq->w_gate, &wq->w_up};
            DS_TRY(be->matmul(be, 2, o, ws, s->xn, B));
        }
        DS_TRY(be->swiglu(be, s->g, s->g, s->u, (size_t)B * c->hidden_dim));
        {
            float *o[1] = {s->tmp};
            const qmat *ws[1] = {&wq->w_down};
            DS_TRY(be->matmul(be, 1, o, ws, s->g, B));
        }
        DS_TRY(be->add(be, s->x, s->tmp, (size_t)B * D));
    }
    DS_TRY(be->rmsnorm(be, s->h, s->x, m->final_norm, B, D, c->eps));
    /* base logits of the prediction rows through the target's own (quantized) head */
    {
        float *o[1] = {s->Ud};
        const qmat *ws[1] = {&s->headq};
        DS_TRY(be->matmul(be, 1, o, ws, s->h + (size_t)(c->anchor_first ? 0 : 1) * D, gamma));
    }
    DS_TRY(be->to_host(be, s->U, s->Ud, sizeof(float) * (size_t)gamma * Vd));
    DS_TRY(be->to_host(be, s->hh, s->h, sizeof(float) * (size_t)B * D));
    return 0;
fail:
    return -1;
}

/* Position k (0-based) of the left-to-right loop: z_k = U_k + correction(x_{k-1}), q_k, c_k.
 * prev is x_{k-1} (the anchor at k = 0); the RNN state in s->state is advanced. */
static int head_step(drafter *d, int k, int prev, const sampling_params *sp, float *q, float *conf, float *conf_raw) {
    dspark *s = d->impl;
    const bd_config *c = &s->m.cfg;
    const bd_model *m = &s->m;
    int V = m->Vd, D = c->dim, r_ = c->rank; /* logits over the draft vocabulary */
    float *z = s->zrow, *hk = s->hh + (size_t)(k + (c->anchor_first ? 0 : 1)) * D;
    memcpy(z, s->U + (size_t)k * V, sizeof(float) * (size_t)V);
    const float *e = c->head != HEAD_NONE ? m->W1 + (size_t)prev * r_ : NULL;
    if (c->head != HEAD_NONE) {
        const float *in = e;
        if (c->head == HEAD_RNN) {
            rnn_cell_forward_f(s->state_new, s->o, s->cell_inp, s->cell_pre, s->state, e, hk, m->Wr, m->br, 1, r_, D);
            memcpy(s->state, s->state_new, sizeof(float) * (size_t)r_);
            in = s->o;
        }
        backend *be = s->be;
        float *bo[1] = {s->w2out};
        const qmat *bw[1] = {&s->W2q};
        if (be->to_device(be, s->w2in, in, sizeof(float) * (size_t)r_) || be->matmul(be, 1, bo, bw, s->w2in, 1) ||
            be->to_host(be, s->bias, s->w2out, sizeof(float) * (size_t)V))
            return -1;
        for (int i = 0; i < V; i++) z[i] += s->bias[i];
    }
    if (m->sv.vid) { /* q over the whole vocabulary: the draft's law on its rows, 0 elsewhere */
        if (logits_process(z, V, sp, s->qsub, &s->scr)) return -1;
        subvocab_scatter(&m->sv, s->qsub, q);
    } else if (logits_process(z, V, sp, q, &s->scr))
        return -1;
    if (c->conf && conf) {
        float lg;
        memcpy(s->cin, hk, sizeof(float) * D);
        if (e) memcpy(s->cin + D, e, sizeof(float) * (size_t)r_);
        linear_forward_f(&lg, s->cin, m->wc, m->bc, 1, D + (e ? r_ : 0), 1);
        if (conf_raw) *conf_raw = 1.0f / (1.0f + expf(-lg));
        if (k < c->contract.n_calib && c->contract.calib[k] > 0) lg /= c->contract.calib[k]; /* sequential temperature scaling */
        *conf = 1.0f / (1.0f + expf(-lg));
    }
    return 0;
}

/* A tree node's children: position depth's logits, plus for a Markov head the correction from the
 * node's own token (the anchor for the first depth), as the chain's left-to-right loop would give them
 * after that token; none past the block or after an end token. */
static int dspark_row(void *ctx, int node, int tok, int depth, int K, int *ids, float *p) {
    drafter *d = ctx;
    dspark *s = d->impl;
    const bd_config *c = &s->m.cfg;
    if (depth >= c->gamma || (depth > 0 && tokenizer_is_eog(s->tk, tok))) return 0;
    int n = 0, prev = node < 0 ? s->anchor : tok;
    if (c->head == HEAD_NONE) { /* DFlash: one row a depth */
        for (; s->rows_done <= depth; s->rows_done++)
            tree_topk_softmax(s->U + (size_t)s->rows_done * s->m.Vd, s->m.Vd, s->m.sv.vid, s->tree_width,
                              s->rid[s->rows_done], s->rp[s->rows_done], s->qsub);
        for (; n < K && n < s->tree_width && s->rp[depth][n] > 0; n++) ids[n] = s->rid[depth][n], p[n] = s->rp[depth][n];
        return n;
    }
    if (head_step(d, depth, prev, s->sp, s->qalt, NULL, NULL)) return -1; /* z = U_depth + W2 W1[prev] in zrow */
    return tree_topk_softmax(s->zrow, s->m.Vd, s->m.sv.vid, DS_MIN(K, s->tree_width), ids, p, s->qsub);
}

static int dspark_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out) {
    dspark *s = d->impl;
    const bd_config *c = &s->m.cfg;
    if (s->tree_nodes) { /* DDTree over the block's positions */
        if (gamma <= 0) return out->n = 0, 0;
        if (block_pass(d, r, c->gamma)) return -1;
        double t1 = ds_now();
        s->rows_done = 0, s->anchor = request_anchor(r), s->sp = sp;
        int rc = tree_best_first(dspark_row, d, s->tree_width, DS_MIN(gamma, out->cap), c->head != HEAD_NONE, out);
        if (c->head != HEAD_NONE) d->t_seq_loop += ds_now() - t1;
        return rc;
    }
    gamma = DS_MIN(gamma, c->gamma);
    if (block_pass(d, r, gamma)) return -1;
    double t1 = ds_now();
    if (c->head == HEAD_RNN) memset(s->state, 0, sizeof(float) * (size_t)c->rank);
    int prev = request_anchor(r);
    for (int k = 0; k < gamma; k++) {
        float *qk = out->q + (size_t)k * c->vocab;
        if (head_step(d, k, prev, sp, qk, c->conf ? &out->conf[k] : NULL,
                      c->conf && out->conf_raw ? &out->conf_raw[k] : NULL))
            return -1;
        const float *law = qk;
        sampling_params nop;
        if (drafter_mutant_sp(d, sp, &nop)) { /* the controls: sample one law, report another */
            if (logits_process(s->zrow, s->m.Vd, &nop, s->m.sv.vid ? s->qsub : s->qalt, &s->scr)) return -1;
            if (s->m.sv.vid) subvocab_scatter(&s->m.sv, s->qsub, s->qalt);
            law = s->qalt;
        }
        /* with a draft vocabulary, the same law drawn over its rows only (a third of the vocabulary) */
        out->tok[k] = law == qk && s->m.sv.vid ? rng_draw_ids(&r->rng_draft, s->qsub, s->m.sv.vid, s->m.Vd)
                                            : rng_draw(&r->rng_draft, law, c->vocab);
        if (out->tok[k] < 0) return -1;
        prev = out->tok[k];
        out->n = k + 1;
        /* a Markov / RNN head's next draft costs a head step after this token: the scheduler may stop
         * here (its rule reads c_1..c_{k+1}, never a later draft, so any stop is lossless) */
        if (c->head != HEAD_NONE && k + 1 < gamma && out->more && out->conf && !out->more(out->more_ctx, k + 1, out->conf))
            break;
    }
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
    kv_cache_crop(st->kv, r->n_prompt);
    return 0;
}

static void dspark_end(drafter *d, request *r) {
    state_free(d, r->dstate);
    r->dstate = NULL;
}

static void dspark_close(drafter *d) {
    dspark *s = d->impl;
    if (!s) return;
    if (s->be) {
        float *bufs[] = {s->x, s->xn, s->q, s->kb, s->vb, s->att, s->tmp, s->g, s->u, s->h, s->Ud, s->w2in, s->w2out};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) s->be->release(s->be, bufs[i]);
    }
    /* the backend keys its copies by the data's address: forget them before the rows are freed */
    if (s->m.sv.rows && s->be) s->be->forget_mats(s->be, (const qmat *[]){&s->headq}, 1);
    if (s->lt != GGML_F32 && s->lq) { /* ours: forgotten by the backend, then freed */
        for (int l = 0; l < s->m.cfg.n_layers; l++) {
            qmat *ws[7] = {&s->lq[l].wq, &s->lq[l].wk, &s->lq[l].wv, &s->lq[l].wo, &s->lq[l].w_gate, &s->lq[l].w_up,
                           &s->lq[l].w_down};
            for (int i = 0; i < 7; i++) {
                if (ws[i]->data && s->be) s->be->forget_mats(s->be, (const qmat *[]){ws[i]}, 1);
                free((void *)ws[i]->data);
            }
        }
        if (s->fcq.data && s->be) s->be->forget_mats(s->be, (const qmat *[]){&s->fcq}, 1);
        free((void *)s->fcq.data);
    }
    bd_model_free(&s->m);
    free(s->lq);
    if (s->w2_q && s->be) s->be->forget_mats(s->be, (const qmat *[]){&s->W2q}, 1);
    free(s->w2_q);
    free(s->U), free(s->hh), free(s->zrow), free(s->bias), free(s->qalt), free(s->qsub), free(s->cos), free(s->sin);
    free(s->pos), free(s->vis), free(s->seq), free(s->tok);
    free(s->state), free(s->state_new), free(s->o), free(s->cell_inp), free(s->cell_pre), free(s->cin);
    lp_scratch_free(&s->scr);
    free(s);
    d->impl = NULL;
}

/* the gate's untrained configuration: one layer, noisy init so the drafts are stochastic */
#define BLOCK_GATE                                                                                        \
    "{\"init_noise\": 0.5, \"init_std\": 0.3, \"layers\": 1, \"rank\": 8, \"gamma\": 3, \"taps\": [0, 1]}"
/* DSpark-Markov enters the gate with a draft vocabulary (6 of the tiny target's 8 tokens; q = 0 on
 * the other two), so the reduced-vocabulary path is certified by every case the registry walk runs */
#define BLOCK_GATE_VOCAB                                                                                        \
    "{\"init_noise\": 0.5, \"init_std\": 0.3, \"layers\": 1, \"rank\": 8, \"gamma\": 3, \"taps\": [0, 1], "    \
    "\"vocab_ids\": [0, 1, 2, 4, 5, 6]}"
#define BLOCK_OPS(NAME, HELP, GATE, ...)                                                                         \
    {NAME, HELP, dspark_open, dspark_begin, dspark_propose, dspark_commit, dspark_end, dspark_rewind, \
     dspark_close, GATE, BLOCK_GATE, .train = &bd_train_family, __VA_ARGS__}

/* their trees on the tiny target: 6 nodes, 2 children a node */
#define BLOCK_GATE_TREE                                                                                   \
    "{\"init_noise\": 0.5, \"init_std\": 0.3, \"layers\": 1, \"rank\": 8, \"gamma\": 3, \"taps\": [0, 1], " \
    "\"tree_nodes\": 6, \"tree_width\": 2}"
#define BLOCK_GATE_VOCAB_TREE                                                                                 \
    "{\"init_noise\": 0.5, \"init_std\": 0.3, \"layers\": 1, \"rank\": 8, \"gamma\": 3, \"taps\": [0, 1], "     \
    "\"vocab_ids\": [0, 1, 2, 4, 5, 6], \"tree_nodes\": 6, \"tree_width\": 2}"
const drafter_ops drafter_dflash =
    BLOCK_OPS("dflash", "parallel block drafter on injected target states: {\"checkpoint\": DIR, \"layer_precision\": \"auto\", \"tree_nodes\": 0, "
              "\"tree_width\": 4} (tree_nodes N > 0: DDTree's best-first tree of N nodes over the positions' top tree_width "
              "tokens, verified exactly)", BLOCK_GATE, .gate_config_tree = BLOCK_GATE_TREE);
const drafter_ops drafter_dspark_markov =
    BLOCK_OPS("dspark-markov", "DFlash backbone + Markov head + confidence head: {\"checkpoint\": DIR, \"layer_precision\": \"auto\", \"head_precision\": \"auto\", \"tree_nodes\": 0, "
              "\"tree_width\": 4} (tree_nodes N > 0: a best-first tree, each node's children from the Markov head after "
              "its own token)", BLOCK_GATE_VOCAB, .gate_config_tree = BLOCK_GATE_VOCAB_TREE);
const drafter_ops drafter_dspark_rnn =
    BLOCK_OPS("dspark-rnn", "DFlash backbone + gated RNN head + confidence head: {\"checkpoint\": DIR, \"layer_precision\": \"auto\", \"head_precision\": \"auto\"}", BLOCK_GATE);
