/* mtp.c — the DeepSeek-V3-style MTP module (mtp.h): its model, checkpoint, training step, and the
 * drafter. A round: step 1's state was made at the last commit (the module's row before the anchor,
 * committed to its cache); each later step is one speculative row through the module on the host,
 * and every step's state goes through the module's final norm and one pass of the target's own
 * quantized head on the backend. */
#include "mtp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/formats/safetensors.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/train/train_ops.h"
#include "drafter.h"
#include "train_family.h"
#include "tree_build.h"

const char *const MTP_TENSOR_NAMES[MTP_N_TENSORS] = {
    "hnorm.weight", "enorm.weight", "eh_proj.weight", "block.attn_norm.weight", "block.attn.wq.weight",
    "block.attn.wk.weight", "block.attn.wv.weight", "block.attn.wo.weight", "block.ffn_norm.weight",
    "block.mlp.w_gate.weight", "block.mlp.w_up.weight", "block.mlp.w_down.weight", "shared_head.norm.weight",
    "fc.weight"};

/* [rows][cols] of tensor i (cols 0: a vector; rows 0: absent, eagle3's F in an mtp) */
static void tensor_shape(const mtp_config *c, int i, int *rows, int *cols) {
    int D = c->dim, QD = c->n_heads * c->head_dim, KD = c->n_kv_heads * c->head_dim, HF = c->hidden_dim;
    static const int kind[MTP_N_TENSORS] = {0, 0, 1, 0, 2, 3, 3, 4, 0, 5, 5, 6, 0, 7};
    switch (kind[i]) {
    case 7: *rows = mtp_fused(c) ? D : 0, *cols = mtp_fused(c) * D; break;
    case 1: *rows = D, *cols = 2 * D; break;
    case 2: *rows = QD, *cols = D; break;
    case 3: *rows = KD, *cols = D; break;
    case 4: *rows = D, *cols = QD; break;
    case 5: *rows = HF, *cols = D; break;
    case 6: *rows = D, *cols = HF; break;
    default: *rows = D, *cols = 0;
    }
}

/* ------------------------------------------------------------------------------ config */

static int can_copy_layer(const model *t) {
    const model_config *tc = &t->cfg;
    const layer_weights *l = &t->layers[tc->n_layers - 1];
    return !tc->rope_neox && !l->q_norm && !l->k_norm; /* the training ops rotate adjacent pairs */
}

int mtp_config_init(mtp_config *c, const model *target, const char *kind, const cJSON *j) {
    memset(c, 0, sizeof *c);
    const model_config *t = &target->cfg;
    int L = t->n_layers, eagle = !strcmp(kind, "eagle3");
    DS_CHECK(eagle || !strcmp(kind, "mtp"), "mtp: unknown kind '%s'", kind);
    snprintf(c->kind, sizeof c->kind, "%s", kind);
    c->dim = t->dim, c->vocab = t->vocab_size, c->n_heads = t->n_heads, c->n_kv_heads = t->n_kv_heads;
    c->head_dim = t->head_dim, c->hidden_dim = t->hidden_dim, c->depth = 3, c->n_tap = 1, c->taps[0] = L - 1;
    if (eagle && L >= 8) /* EAGLE-3's low, middle and high layers (SafeAILab: 2, L/2, L-3 counted from 1) */
        c->n_tap = 3, c->taps[0] = 1, c->taps[1] = L / 2 - 1, c->taps[2] = L - 3;
    else if (eagle) /* a tiny target: its first and last */
        c->n_tap = 2, c->taps[0] = 0, c->taps[1] = L - 1;
    c->init_layer = can_copy_layer(target) ? t->n_layers - 1 : -1;
    c->eps = t->norm_eps, c->rope_theta = t->rope_theta;
    c->w_ce = 0.1f, c->w_l1 = 0.9f;
    contract_init(&c->contract, target);
    if (!j) return 0;
    jcfg r;
    const char *jk = kind;
    DS_TRY(jcfg_open(&r, j, kind));
    DS_TRY(jcfg_str(&r, "kind", &jk));
    DS_CHECK(!strcmp(jk, kind), "%s: a checkpoint of kind '%s'", kind, jk);
    DS_TRY(jcfg_int(&r, "depth", 1, MTP_MAX_DEPTH, &c->depth));
    DS_TRY(jcfg_int(&r, "hidden_dim", 1, 1 << 20, &c->hidden_dim));
    DS_TRY(jcfg_int(&r, "init_layer", -1, t->n_layers - 1, &c->init_layer));
    DS_TRY(jcfg_float(&r, "w_ce", 0, 100, &c->w_ce));
    DS_TRY(jcfg_float(&r, "w_l1", 0, 100, &c->w_l1));
    DS_TRY(contract_read(&r, &c->contract));
    int g[7] = {c->dim, c->vocab, c->n_heads, c->n_kv_heads, c->head_dim, c->taps[0], 0};
    DS_TRY(jcfg_int(&r, "dim", 1, 1 << 20, &g[0]));
    DS_TRY(jcfg_int(&r, "vocab", 1, 1 << 24, &g[1]));
    DS_TRY(jcfg_int(&r, "n_heads", 1, 1 << 10, &g[2]));
    DS_TRY(jcfg_int(&r, "n_kv_heads", 1, 1 << 10, &g[3]));
    DS_TRY(jcfg_int(&r, "head_dim", 1, 1 << 12, &g[4]));
    if (eagle) DS_TRY(jcfg_ints(&r, "taps", 1, MTP_MAX_TAPS, 0, L - 1, c->taps, &c->n_tap));
    else DS_TRY(jcfg_int(&r, "tap", 0, 1 << 10, &g[5]));
    g[5] = eagle ? c->taps[0] : g[5];
    DS_TRY(jcfg_float(&r, "eps", 0, 1, &c->eps));
    DS_TRY(jcfg_float(&r, "rope_theta", 1, 1e9, &c->rope_theta));
    DS_TRY(jcfg_close(&r));
    /* the module shares the target's embedding, head and attention geometry: a checkpoint records it */
    DS_CHECK(g[0] == c->dim && g[1] == c->vocab && g[2] == c->n_heads && g[3] == c->n_kv_heads && g[4] == c->head_dim &&
                 g[5] == c->taps[0],
             "%s: dim %d, vocab %d, heads %d/%d, head_dim %d, tap %d do not match the target's %d, %d, %d/%d, %d, %d",
             kind, g[0], g[1], g[2], g[3], g[4], g[5], c->dim, c->vocab, c->n_heads, c->n_kv_heads, c->head_dim,
             c->taps[0]);
    DS_CHECK(c->init_layer < 0 || (can_copy_layer(target) && c->hidden_dim == t->hidden_dim),
             "mtp: 'init_layer' needs the target's FFN width and interleaved RoPE without q/k norms (use -1)");
    return contract_check_target(&c->contract, target, c->vocab, kind);
fail:
    return -1;
}

cJSON *mtp_config_json(const mtp_config *c) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", c->kind);
    cJSON_AddNumberToObject(j, "depth", c->depth);
    cJSON_AddNumberToObject(j, "dim", c->dim);
    cJSON_AddNumberToObject(j, "vocab", c->vocab);
    cJSON_AddNumberToObject(j, "n_heads", c->n_heads);
    cJSON_AddNumberToObject(j, "n_kv_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(j, "hidden_dim", c->hidden_dim);
    if (mtp_fused(c)) {
        cJSON *t = cJSON_AddArrayToObject(j, "taps");
        for (int i = 0; i < c->n_tap; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(c->taps[i]));
    } else
        cJSON_AddNumberToObject(j, "tap", c->taps[0]);
    cJSON_AddNumberToObject(j, "init_layer", c->init_layer);
    cJSON_AddNumberToObject(j, "eps", c->eps);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "w_ce", c->w_ce);
    cJSON_AddNumberToObject(j, "w_l1", c->w_l1);
    contract_json(j, &c->contract);
    return j;
}

/* ------------------------------------------------------------------------------- model */

static void mtp_ws_release_f(mtp_ws_f *w); /* mtp_train.inc */

#define PV_SET(REAL, SFX)                                                                                  \
    void mtp_pv_set##SFX(mtp_pv##SFX *v, const mtp_model *m, REAL *base) {                                \
        REAL **f[MTP_N_TENSORS] = {&v->hnorm, &v->enorm,  &v->proj,   &v->attn_norm, &v->wq,         \
                                   &v->wk,    &v->wv,     &v->wo,     &v->ffn_norm,  &v->w_gate,     \
                                   &v->w_up,  &v->w_down, &v->final_norm, &v->fc};                    \
        memset(v, 0, sizeof *v); /* no biases */                                                           \
        for (int i = 0; i < MTP_N_TENSORS; i++) *f[i] = base ? base + m->tt[i].offset : NULL;              \
    }
PV_SET(float, _f)
PV_SET(double, _d)

void mtp_model_free(mtp_model *m) {
    free(m->params);
    if (m->E != m->Ein) free(m->E);
    free(m->Ein);
    subvocab_free(&m->sv);
    mtp_ws_release_f(&m->ws);
    memset(m, 0, sizeof *m);
}

/* the model's buffers around its draft vocabulary m->sv (already set and checked) */
static int mtp_alloc(mtp_model *m, const mtp_config *c, const model *target, int with_embed) {
    subvocab sv = m->sv;
    memset(m, 0, sizeof *m);
    m->sv = sv;
    m->cfg = *c;
    snprintf(m->cfg.contract.vocab_hash, sizeof m->cfg.contract.vocab_hash, "%s", sv.hash);
    size_t off = 0;
    for (int i = 0; i < MTP_N_TENSORS; i++) {
        int rows, cols;
        tensor_shape(c, i, &rows, &cols);
        size_t n = (size_t)rows * (cols ? cols : 1);
        m->tt[i] = (train_tensor){off, n, cols > 0};
        off += n;
    }
    m->n_params = off;
    DS_TRYP(m->params = ds_calloc(m->n_params, sizeof(float), "mtp parameters"));
    mtp_pv_set_f(&m->pv, m, m->params);
    if (with_embed) DS_TRY(subvocab_frozen_f32(&sv, target, &m->Ein, &m->E)); /* the training step's Ein and E */
    return 0;
fail:
    mtp_model_free(m);
    return -1;
}

int mtp_model_init(mtp_model *m, const mtp_config *c, const model *target, uint64_t seed, int with_embed,
                   const int *ids) {
    memset(m, 0, sizeof *m);
    DS_TRY(contract_vocab_set(&c->contract, &m->sv, c->vocab, ids, c->kind));
    DS_TRY(mtp_alloc(m, c, target, with_embed));
    rng_t r;
    rng_seed(&r, seed);
    float out_scale = 0.02f / sqrtf(2.0f);
    for (int i = 0; i < MTP_N_TENSORS; i++) {
        float *p = m->params + m->tt[i].offset;
        float sd = i == 7 || i == 11 ? out_scale : 0.02f; /* residual-output projections, GPT-2 style */
        for (size_t k = 0; k < m->tt[i].numel; k++) {
            if (!m->tt[i].decay) p[k] = 1.0f; /* norms */
            else p[k] = (float)rng_normal(&r) * sd;
        }
    }
    memcpy(m->pv.final_norm, target->out_norm, sizeof(float) * c->dim); /* the module ends as the target does */
    if (mtp_fused(c)) { /* F = [0 .. 0 I]: the fused state starts as the high tap's, as mtp's is its tap's */
        size_t D = (size_t)c->dim, W = (size_t)mtp_fused(c) * D;
        memset(m->pv.fc, 0, sizeof(float) * D * W);
        for (size_t i = 0; i < D; i++) m->pv.fc[i * W + (W - D) + i] = 1.0f;
    }
    if (c->init_layer >= 0) { /* the block starts as the target's layer: a transformer layer that works */
        const layer_weights *l = &target->layers[c->init_layer];
        const mtp_pv_f *p = &m->pv;
        layer_to_f32(l, c->dim, (float *const[9]){p->attn_norm, p->wq, p->wk, p->wv, p->wo, p->ffn_norm, p->w_gate,
                                                  p->w_up, p->w_down});
    }
    return 0;
fail:
    return -1;
}

/* the checkpoint's tensors: names, shapes and the parameters they are (save and read alike); a
 * kind's absent tensors (mtp's F) are left out */
static int mtp_tensors(const mtp_model *m, st_write_tensor *w) {
    int nw = 0;
    for (int i = 0; i < MTP_N_TENSORS; i++) {
        int rows, cols;
        tensor_shape(&m->cfg, i, &rows, &cols);
        if (rows) w[nw++] = (st_write_tensor){MTP_TENSOR_NAMES[i], m->params + m->tt[i].offset, cols ? 2 : 1, {rows, cols}};
    }
    return nw;
}

int mtp_save(const mtp_model *m, const char *dir) {
    st_write_tensor w[MTP_N_TENSORS + 1];
    int nw = mtp_tensors(m, w);
    return subvocab_write_checkpoint(&m->sv, dir, w, nw, mtp_config_json(&m->cfg));
}

int mtp_read_params(mtp_model *m, const char *dir) {
    st_write_tensor w[MTP_N_TENSORS + 1];
    int nw = mtp_tensors(m, w);
    return subvocab_read_checkpoint(&m->sv, dir, w, nw);
}

int mtp_load(mtp_model *m, const char *dir, const model *target, const char *kind_want, int with_embed) {
    char p[4096];
    cJSON *j = NULL;
    mtp_config c;
    memset(m, 0, sizeof *m);
    snprintf(p, sizeof p, "%s/config.json", dir);
    DS_TRYP(j = subvocab_read_config(dir, kind_want));
    if (mtp_config_init(&c, target, kind_want, j)) {
        ds_error_prefix("%s", p);
        goto fail;
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    DS_TRY(contract_vocab_read(&c.contract, &m->sv, c.vocab, p));
    DS_TRY(mtp_alloc(m, &c, target, with_embed));
    DS_TRY(mtp_read_params(m, dir));
    cJSON_Delete(j);
    return 0;
fail:
    cJSON_Delete(j);
    mtp_model_free(m);
    return -1;
}

/* ---------------------------------------------------------------------- training step */

#define REAL float
#define FN(name) name##_f
#define SEQ train_seq
#define WS mtp_ws_f
#define ACTS mtp_acts_f
#define PV mtp_pv_f
#include "mtp_train.inc"
#undef REAL
#undef FN
#undef SEQ
#undef WS
#undef ACTS
#undef PV
#define REAL double
#define FN(name) name##_d
#define SEQ train_seq_d
#define WS mtp_ws_d
#define ACTS mtp_acts_d
#define PV mtp_pv_d
#include "mtp_train.inc"
#undef REAL
#undef FN
#undef SEQ
#undef WS
#undef ACTS
#undef PV

void mtp_ws_free_d(mtp_ws_d *w) { mtp_ws_release_d(w); }
void mtp_ws_free_f(mtp_ws_f *w) { mtp_ws_release_f(w); }
void mtp_acts_free_f(mtp_acts_f *a) { mtp_acts_release_f(a); }

static int tr_step(trainable *tr, const train_seq *s, float *grad, double norm, train_stats *st) {
    mtp_model *m = tr->impl;
    DS_CHECK(m->Ein != NULL, "mtp: the model was opened without the training tables");
    mtp_pv_f G;
    mtp_pv_set_f(&G, m, grad);
    return mtp_step_f(&m->cfg, &m->pv, grad ? &G : NULL, m->Ein, m->E, m->sv.Vd, m->sv.vmap, s, norm, st, &m->ws);
fail:
    return -1;
}
static double tr_weight(const trainable *tr, int A, const int *n_valid) {
    DS_UNUSED(tr);
    double w = 0;
    for (int a = 0; a < A; a++) w += n_valid[a]; /* every supervised position weight 1 */
    return w;
}
static int tr_save(const trainable *tr, const char *dir) { return mtp_save(tr->impl, dir); }
static int tr_read(trainable *tr, const char *dir) { return mtp_read_params(tr->impl, dir); }
static cJSON *tr_config(const trainable *tr) { return mtp_config_json(&((const mtp_model *)tr->impl)->cfg); }

int mtp_trainable(mtp_model *m, trainable *tr) {
    *tr = (trainable){.impl = m, .kind = m->cfg.kind, .params = m->params, .n_params = m->n_params, .n_t = MTP_N_TENSORS,
                      .t = m->tt, .positions = m->cfg.depth, .n_tap = m->cfg.n_tap, .dim = m->cfg.dim, .taps = m->cfg.taps,
                      .w_ce = m->cfg.w_ce, .w_l1 = m->cfg.w_l1, .w_bce = 0, .full_vocab = !m->sv.vid, .step = tr_step,
                      .seq_weight = tr_weight, .save = tr_save, .read_params = tr_read, .config_json = tr_config};
    return 0;
}

/* -------------------------------------------------------------------------------- drafter */

#define MTP_CHUNK 128 /* prompt rows per pass at begin (bounds the attention buffer) */

/* the block's 8 matrices in the order of the groups: proj | wq wk wv | wo | w_gate w_up | w_down, then
 * eagle3's F */
#define MTP_BLOCK_MATS 9
static const int group_first[MTP_MM_GROUPS] = {0, 1, 4, 5, 7, 8}, group_n[MTP_MM_GROUPS] = {1, 3, 1, 2, 1, 1};

typedef struct {
    mtp_model m;
    backend *be;
    const qmat *emb, *head;     /* the target's, frozen */
    uint32_t bt;                /* the block's matrices: GGML_F32 on the host, or quantized on the backend */
    qmat bq[MTP_BLOCK_MATS];
    float *Bin, *Bout[3];       /* backend: a pass's input rows and a group's outputs */
    float *Xd, *Zd;             /* backend: one normed state, its logits */
    float *z, *hf, *ych, *qalt; /* host */
    float *cat;                 /* eagle3: [MTP_CHUNK][n_tap dim] a chunk's taps side by side */
    float rstd[1];
    mtp_acts_f acts;            /* the serving pass (requests take turns) */
    lp_scratch scr;
    const tokenizer *tk;
    /* EAGLE-2's tree ("tree_nodes" > 0): tree_width children a node, tree_width nodes expanded a depth */
    int tree_nodes, tree_width;
    int *ctok, *cpar, *cdep, *crow;      /* the candidates: token, parent, depth, expanded row (-1: none) */
    struct cand_key { float score; int dep, i; } *cord; /* their order */
    float *cscore;                       /* their path probabilities */
    float *TK, *TV;                      /* a pass's block rows: row r's ancestors then its own, r x depth */
    float *RK, *RV, *RY;                 /* the expanded rows' K, V and y (their children read y) */
} mtp;

typedef struct {
    float *K, *V;               /* [cap][KD]: committed rows 0..n-1, then the chain's speculative rows */
    int cap, n, n0;             /* n: the anchor's position; n0: after the prompt (rewind) */
    float *y1, *y1_0;           /* [dim] the module's row before the anchor (step 1's state); the prompt's */
} mtp_state;

static int state_reserve(const mtp *s, mtp_state *st, int need) {
    if (need <= st->cap) return 0;
    int cap = DS_MAX(need + need / 2, 64);
    size_t KD = (size_t)s->m.cfg.n_kv_heads * s->m.cfg.head_dim;
    float *K = realloc(st->K, sizeof(float) * (size_t)cap * KD), *V = K ? realloc(st->V, sizeof(float) * (size_t)cap * KD) : NULL;
    if (K) st->K = K;
    if (V) st->V = V;
    DS_CHECK(K && V, "out of memory (the mtp cache, %d rows)", cap);
    st->cap = cap;
    return 0;
fail:
    return -1;
}

static int block_mm(void *ctx, int group, float *const *out, const float *in, int N);

/* rows at positions pos0.. from states h and next tokens tok[N]; y of the last row to y_last. h: the
 * module's own states [N][dim], or (target = 1) the target's captured taps [n_tap][N][dim], which
 * eagle3 fuses (F on the backend with the block, or on the host in fp32) */
static int run_rows(mtp *s, mtp_state *st, const float *h, int target, const int *tok, int N, int pos0, float *y_last) {
    const mtp_config *c = &s->m.cfg;
    int D = c->dim, F = target ? mtp_fused(c) : 0;
    DS_TRY(state_reserve(s, st, pos0 + N + c->depth));
    for (int i0 = 0; i0 < N; i0 += MTP_CHUNK) {
        int n = DS_MIN(MTP_CHUNK, N - i0);
        DS_TRY(mtp_acts_reserve_f(&s->acts, c, n, pos0 + i0 + n));
        if (F) {
            for (int i = 0; i < n; i++)
                for (int t = 0; t < F; t++)
                    memcpy(s->cat + ((size_t)i * F + t) * D, h + ((size_t)t * N + i0 + i) * D, sizeof(float) * D);
            if (s->bt != GGML_F32) DS_TRY(block_mm(s, MTP_MM_FC, (float *const[]){s->acts.hin}, s->cat, n));
            else linear_forward_f(s->acts.hin, s->cat, s->m.pv.fc, NULL, n, F * D, D);
        } else
            memcpy(s->acts.hin, h + (size_t)i0 * D, sizeof(float) * (size_t)n * D);
        for (int i = 0; i < n; i++) {
            DS_CHECK(tok[i0 + i] >= 0 && tok[i0 + i] < c->vocab, "mtp: token %d outside the vocabulary", tok[i0 + i]);
            qmat_row_f32(s->emb, tok[i0 + i], s->acts.ein + (size_t)i * D);
        }
        DS_TRY(mtp_rows_forward_f(c, &s->m.pv, &s->acts, n, pos0 + i0, st->K, st->V));
    }
    memcpy(y_last, s->acts.y + (size_t)((N - 1) % MTP_CHUNK) * D, sizeof(float) * D);
    return 0;
fail:
    return -1;
}

/* the serving hook (mtp.h): group G's matrices on the backend, over N rows of in */
static int block_mm(void *ctx, int group, float *const *out, const float *in, int N) {
    mtp *s = ctx;
    backend *be = s->be;
    const qmat *w[3];
    int n = group_n[group], cols = s->bq[group_first[group]].cols;
    for (int i = 0; i < n; i++) w[i] = &s->bq[group_first[group] + i];
    DS_TRY(be->to_device(be, s->Bin, in, sizeof(float) * (size_t)N * cols));
    DS_TRY(be->matmul(be, n, s->Bout, w, s->Bin, N));
    for (int i = 0; i < n; i++) DS_TRY(be->to_host(be, out[i], s->Bout[i], sizeof(float) * (size_t)N * w[i]->rows));
    return 0;
fail:
    return -1;
}

/* The block in Q8_0 on the backend: one row reads 4.4 MB of weights instead of the fp32 17.7 MB (SmolLM2's
 * geometry), on the backend's int8 kernels. The drafts move by the rounding; q stays the law each token is
 * drawn from, so verification is exact either way. */
static int block_to_backend(mtp *s) {
    const mtp_config *c = &s->m.cfg;
    float *const src[MTP_BLOCK_MATS] = {s->m.pv.proj, s->m.pv.wq,     s->m.pv.wk,   s->m.pv.wv,    s->m.pv.wo,
                                        s->m.pv.w_gate, s->m.pv.w_up, s->m.pv.w_down, s->m.pv.fc};
    static const int tensor[MTP_BLOCK_MATS] = {2, 4, 5, 6, 7, 9, 10, 11, 13}; /* their MTP_TENSOR_NAMES */
    const qmat *ws[MTP_BLOCK_MATS];
    size_t maxin = 0, maxout = 0;
    int n_mats = mtp_fused(c) ? MTP_BLOCK_MATS : MTP_BLOCK_MATS - 1;
    for (int i = 0; i < n_mats; i++) {
        int rows, cols;
        tensor_shape(c, tensor[i], &rows, &cols);
        DS_TRY(drafter_quantize(src[i], rows, cols, s->bt, &s->bq[i], "mtp block"));
        ws[i] = &s->bq[i];
        maxin = DS_MAX(maxin, (size_t)cols), maxout = DS_MAX(maxout, (size_t)rows);
    }
    DS_TRY(s->be->prepare_mats(s->be, ws, n_mats));
    DS_TRYP(s->Bin = s->be->alloc(s->be, sizeof(float) * MTP_CHUNK * maxin));
    for (int i = 0; i < 3; i++) DS_TRYP(s->Bout[i] = s->be->alloc(s->be, sizeof(float) * MTP_CHUNK * maxout));
    s->acts.mm = block_mm, s->acts.mm_ctx = s;
    return 0;
fail:
    return -1;
}

int mtp_drafter_open(drafter *d, const cJSON *cfg, target *t, const char *kind) {
    mtp *s = ds_calloc(1, sizeof *s, "mtp drafter");
    if (!s) return -1;
    d->impl = s;
    jcfg r;
    const char *ck = NULL;
    DS_TRY(jcfg_open(&r, cfg, "drafter"));
    DS_TRY(jcfg_str(&r, "checkpoint", &ck));
    const char *bp;
    DS_TRY(drafter_precision(&r, "block_precision", &bp));
    DS_TRY(tree_read_opts(&r, &s->tree_nodes, &s->tree_width));
    if (ck) {
        DS_TRY(jcfg_close(&r)); /* a checkpoint carries its architecture */
        DS_TRY(mtp_load(&s->m, ck, &t->m, kind, 0));
        snprintf(d->describe, sizeof d->describe, "%s: checkpoint %s (one module, depth %d)", kind, ck, s->m.cfg.depth);
    } else { /* untrained, for tests and the gate: {"depth": N, "seed": S, "init_layer": L, "vocab_ids": [...]} */
        mtp_config c;
        uint64_t seed = 1;
        int vids[256], nv = 0;
        DS_TRY(mtp_config_init(&c, &t->m, kind, NULL));
        DS_TRY(jcfg_u64(&r, "seed", &seed));
        DS_TRY(jcfg_int(&r, "depth", 1, MTP_MAX_DEPTH, &c.depth));
        DS_TRY(jcfg_int(&r, "init_layer", -1, c.init_layer, &c.init_layer));
        const cJSON *vj = jcfg_get(&r, "vocab_ids");
        if (vj) DS_TRY(subvocab_json_ids(vj, vids, 256, &nv));
        DS_TRY(jcfg_close(&r));
        c.contract.draft_vocab = nv < c.vocab ? nv : 0;
        DS_TRY(mtp_model_init(&s->m, &c, &t->m, seed, 0, nv ? vids : NULL));
        snprintf(d->describe, sizeof d->describe, "%s: untrained (depth %d)", kind, c.depth);
    }
    const mtp_config *c = &s->m.cfg;
    DS_TRY(contract_check_serving(&c->contract, t, ck ? ck : kind));
    d->has_conf = 1;
    d->max_gamma = c->depth;
    d->n_capture = c->n_tap;
    memcpy(d->capture_layers, c->taps, sizeof(int) * (size_t)c->n_tap);
    snprintf(d->fingerprint, sizeof d->fingerprint, "%s-%d-%016llx", kind, c->depth, (unsigned long long)s->m.n_params);
    contract_weights_tag(&c->contract, s->m.params, s->m.n_params, d->fingerprint, sizeof d->fingerprint);
    s->tk = &t->tk;
    int D = c->dim, V = c->vocab, Vd = s->m.sv.Vd, W = s->tree_nodes ? s->tree_width : 1;
    if (s->tree_nodes) { /* EAGLE-2's tree: candidates W at depth 1, W x W at every depth after */
        size_t KD = (size_t)c->n_kv_heads * c->head_dim, NC = (size_t)W + (size_t)(c->depth - 1) * W * W;
        size_t NE = (size_t)(c->depth - 1) * W + 1;
        tree_mark(d, "EAGLE-2's tree (as many expanded a depth)", s->tree_nodes, W);
        DS_TRYP(s->ctok = ds_malloc(sizeof(int) * 4 * NC, "mtp tree"));
        s->cpar = s->ctok + NC, s->cdep = s->cpar + NC, s->crow = s->cdep + NC;
        DS_TRYP(s->cord = ds_malloc(sizeof *s->cord * NC, "mtp tree"));
        DS_TRYP(s->cscore = ds_malloc(sizeof(float) * NC, "mtp tree"));
        DS_TRYP(s->TK = ds_malloc(sizeof(float) * 2 * (size_t)W * c->depth * KD, "mtp tree"));
        s->TV = s->TK + (size_t)W * c->depth * KD;
        DS_TRYP(s->RK = ds_malloc(sizeof(float) * NE * (2 * KD + (size_t)D), "mtp tree"));
        s->RV = s->RK + NE * KD, s->RY = s->RV + NE * KD;
    }
    backend *be = s->be = t->be;
    int fits = c->dim % QK8_0 == 0 && (c->n_heads * c->head_dim) % QK8_0 == 0 && c->hidden_dim % QK8_0 == 0;
    DS_TRY(drafter_type_of(bp, "block_precision", fits, "widths that are multiples of 32", &s->bt));
    if (s->bt != GGML_F32) DS_TRY(block_to_backend(s));
    snprintf(d->describe + strlen(d->describe), sizeof d->describe - strlen(d->describe), ", block %s",
             drafter_type_key(s->bt));
    /* the head the drafts come from: the target's own, or its draft-vocabulary rows (prepared once) */
    DS_TRY(subvocab_gather_head(&s->m.sv, &t->m.output));
    if (s->m.sv.rows) DS_TRY(be->prepare_mats(be, (const qmat *[]){&s->m.sv.head}, 1));
    s->emb = &t->m.tok_embd, s->head = &s->m.sv.head;
    DS_TRYP(s->Xd = be->alloc(be, sizeof(float) * (size_t)W * D));
    DS_TRYP(s->Zd = be->alloc(be, sizeof(float) * (size_t)W * Vd));
    DS_TRYP(s->z = ds_malloc(sizeof(float) * (size_t)W * Vd, "mtp logits"));
    DS_TRYP(s->qalt = ds_malloc(sizeof(float) * (size_t)V, "mtp logits"));
    DS_TRYP(s->hf = ds_malloc(sizeof(float) * (size_t)W * D, "mtp state"));
    DS_TRYP(s->ych = ds_malloc(sizeof(float) * (size_t)D, "mtp state"));
    if (mtp_fused(c)) DS_TRYP(s->cat = ds_malloc(sizeof(float) * MTP_CHUNK * (size_t)mtp_fused(c) * D, "eagle3 taps"));
    return 0;
fail:
    return -1; /* close() frees what was made */
}

static int mtp_open(drafter *d, const cJSON *cfg, target *t) { return mtp_drafter_open(d, cfg, t, "mtp"); }

int mtp_drafter_begin(drafter *d, request *r, const float *prompt_hidden) {
    mtp *s = d->impl;
    int D = s->m.cfg.dim, n = r->n_prompt;
    mtp_state *st = ds_calloc(1, sizeof *st, "mtp state");
    if (!st) return -1;
    r->dstate = st;
    DS_CHECK(prompt_hidden != NULL, "mtp needs the target's hidden states of the prompt");
    DS_CHECK(r->toks.n == n + 1, "mtp: begin expects the prompt and its first token (%d tokens, prompt %d)", r->toks.n, n);
    DS_TRYP(st->y1 = ds_malloc(sizeof(float) * (size_t)D, "mtp state"));
    DS_TRYP(st->y1_0 = ds_malloc(sizeof(float) * (size_t)D, "mtp state"));
    /* rows 0..n-1: (h_i, t_{i+1}); the last reads the anchor and is step 1 of the first round */
    DS_TRY(run_rows(s, st, prompt_hidden, 1, r->toks.v + 1, n, 0, st->y1));
    st->n = st->n0 = n;
    memcpy(st->y1_0, st->y1, sizeof(float) * (size_t)D);
    return 0;
fail:
    return -1; /* end() frees what was made */
}

/* z = head(final_norm(y)) on the backend, for N rows of y (N <= the tree's width) */
static int head_logits(mtp *s, const float *y, int N) {
    const mtp_config *c = &s->m.cfg;
    backend *be = s->be;
    for (int i = 0; i < N; i++)
        rmsnorm_forward_f(s->hf + (size_t)i * c->dim, s->rstd, y + (size_t)i * c->dim, s->m.pv.final_norm, 1, c->dim, c->eps);
    float *o[1] = {s->Zd};
    const qmat *w[1] = {s->head};
    DS_TRY(be->to_device(be, s->Xd, s->hf, sizeof(float) * (size_t)N * c->dim));
    DS_TRY(be->matmul(be, 1, o, w, s->Xd, N));
    DS_TRY(be->to_host(be, s->z, s->Zd, sizeof(float) * (size_t)N * s->m.sv.Vd));
    return 0;
fail:
    return -1;
}

/* candidates by path probability, then depth (a parent before a child of equal probability), then age */
static int cand_cmp(const void *a, const void *b) {
    const struct cand_key *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->dep != y->dep) return x->dep - y->dep;
    return x->i - y->i;
}

/* EAGLE-2's dynamic tree (Li et al. 2024): depth 1 is the anchor row's top W tokens (W = tree_width);
 * at each depth the W candidates of highest path probability (the product of their ancestors' and their
 * own draft probabilities, softmax of the logits at temperature 1) are expanded in one pass of the
 * module, each row reading its parent's y and its own token at position p + depth - 1 and attending to
 * the committed cache and to its ancestors' rows alone (the tree mask, as block rows), and each adds its
 * top W children. The tree is the budget best candidates: a child's path probability never exceeds its
 * parent's, so in that order parents come first and every prefix is a tree. The tree is a function of
 * the context alone (TREE_TOPK: q unused); an end-of-generation token is not expanded. */
static int propose_tree(mtp *s, mtp_state *st, int budget, draft_block *out) {
    const mtp_config *c = &s->m.cfg;
    int W = s->tree_width, D = c->dim, Vd = s->m.sv.Vd, p = st->n, nc = 0, ne = 0, ids[TREE_MAX_K];
    size_t KD = (size_t)c->n_kv_heads * c->head_dim;
    float pr[TREE_MAX_K];
    out->n = 0;
    out->tree = TREE_TOPK;
    budget = DS_MIN(budget, DS_MIN(out->cap, 64));
    if (budget <= 0) return 0;
    DS_TRY(head_logits(s, st->y1, 1));
    int n = tree_topk_softmax(s->z, Vd, s->m.sv.vid, W, ids, pr, s->qalt);
    for (int i = 0; i < n; i++)
        s->ctok[nc] = ids[i], s->cpar[nc] = -1, s->cdep[nc] = 1, s->crow[nc] = -1, s->cscore[nc++] = pr[i];
    for (int dd = 1; dd < c->depth; dd++) {
        int sel[TREE_MAX_K], ns = 0;
        for (int i = 0; i < nc; i++) { /* the W best at depth dd, by path probability (ties: the older) */
            if (s->cdep[i] != dd || tokenizer_is_eog(s->tk, s->ctok[i])) continue;
            if (ns == W && !(s->cscore[i] > s->cscore[sel[ns - 1]])) continue;
            int k = ns < W ? ns++ : W - 1;
            while (k > 0 && s->cscore[i] > s->cscore[sel[k - 1]]) sel[k] = sel[k - 1], k--;
            sel[k] = i;
        }
        if (!ns) break;
        if (out->more && out->conf) { /* a level costs a module pass: greedy prices it on the best path */
            float pc[64];
            int k = 0;
            for (int u = sel[0]; u >= 0 && k < 64; u = s->cpar[u]) k++;
            for (int u = sel[0], i = k - 1; u >= 0 && i >= 0; u = s->cpar[u], i--)
                pc[i] = s->cpar[u] < 0 ? s->cscore[u] : s->cscore[s->cpar[u]] > 0 ? s->cscore[u] / s->cscore[s->cpar[u]] : 0;
            if (!out->more(out->more_ctx, k, pc)) break;
        }
        DS_TRY(mtp_acts_reserve_f(&s->acts, c, ns, p + dd));
        mtp_acts_f *a = &s->acts;
        for (int r = 0; r < ns; r++) { /* row r: block rows r*depth.. hold its ancestors (depth 1..dd-1), then its own */
            int i = sel[r], slot = dd - 2;
            DS_CHECK(s->ctok[i] >= 0 && s->ctok[i] < c->vocab, "mtp: token %d outside the vocabulary", s->ctok[i]);
            memcpy(a->hin + (size_t)r * D, s->cpar[i] < 0 ? st->y1 : s->RY + (size_t)s->crow[s->cpar[i]] * D,
                   sizeof(float) * (size_t)D);
            qmat_row_f32(s->emb, s->ctok[i], a->ein + (size_t)r * D);
            for (int an = s->cpar[i]; an >= 0; an = s->cpar[an], slot--) {
                size_t to = ((size_t)r * c->depth + slot) * KD, from = (size_t)s->crow[an] * KD;
                memcpy(s->TK + to, s->RK + from, sizeof(float) * KD), memcpy(s->TV + to, s->RV + from, sizeof(float) * KD);
            }
            a->pos[r] = p + dd - 1, a->bidx[r] = r * c->depth + dd - 1;
            a->ctx_len[r] = p, a->lo[r] = r * c->depth, a->hi[r] = r * c->depth + dd;
        }
        DS_TRY(mtp_pass_forward_f(c, &s->m.pv, a, ns, st->K, st->V, s->TK, s->TV, a->cap_l));
        for (int r = 0; r < ns; r++, ne++) {
            size_t from = (size_t)a->bidx[r] * KD;
            s->crow[sel[r]] = ne;
            memcpy(s->RK + (size_t)ne * KD, s->TK + from, sizeof(float) * KD);
            memcpy(s->RV + (size_t)ne * KD, s->TV + from, sizeof(float) * KD);
            memcpy(s->RY + (size_t)ne * D, a->y + (size_t)r * D, sizeof(float) * (size_t)D);
        }
        DS_TRY(head_logits(s, a->y, ns));
        for (int r = 0; r < ns; r++) {
            n = tree_topk_softmax(s->z + (size_t)r * Vd, Vd, s->m.sv.vid, W, ids, pr, s->qalt);
            for (int k = 0; k < n; k++)
                s->ctok[nc] = ids[k], s->cpar[nc] = sel[r], s->cdep[nc] = dd + 1, s->crow[nc] = -1,
                s->cscore[nc++] = s->cscore[sel[r]] * pr[k];
        }
    }
    for (int i = 0; i < nc; i++) s->cord[i] = (struct cand_key){s->cscore[i], s->cdep[i], i};
    qsort(s->cord, (size_t)nc, sizeof *s->cord, cand_cmp);
    n = DS_MIN(budget, nc);
    for (int k = 0; k < n; k++) s->crow[s->cord[k].i] = k; /* crow now: the candidate's node index */
    for (int k = 0; k < n; k++) {
        int i = s->cord[k].i;
        out->tok[k] = s->ctok[i], out->parent[k] = s->cpar[i] < 0 ? -1 : s->crow[s->cpar[i]];
        DS_CHECK(out->parent[k] < k, "mtp: the tree's node %d comes before its parent", k);
        if (out->conf) out->conf[k] = s->cscore[i];
        if (out->conf_raw) out->conf_raw[k] = s->cscore[i];
    }
    out->n = n;
    return 0;
fail:
    out->n = 0;
    return -1;
}

int mtp_drafter_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out) {
    mtp *s = d->impl;
    mtp_state *st = r->dstate;
    const mtp_config *c = &s->m.cfg;
    int g = DS_MIN(gamma, c->depth), p = st->n;
    out->n = 0;
    if (g <= 0) return 0;
    DS_CHECK(p == r->toks.n - 1, "mtp: the module's cache ends at %d but the anchor is at %d", p, r->toks.n - 1);
    if (s->tree_nodes) return propose_tree(s, st, gamma, out);
    const float *y = st->y1;
    for (int k = 1; k <= g; k++) {
        if (k >= 2) { /* a speculative row at position p + k - 2: (y of step k - 1, x_{k-1}) */
            DS_TRY(run_rows(s, st, y, 0, &out->tok[k - 2], 1, p + k - 2, s->ych));
            y = s->ych;
        }
        DS_TRY(head_logits(s, y, 1));
        DS_TRY(draft_from_logits(d, r, s->z, &s->m.sv, sp, &c->contract, k - 1, out, &s->scr, s->qalt));
        out->n = k;
        /* the next draft costs a module row and a head pass: the scheduler may stop here (its rule reads
         * c_1..c_k only, never x_k's value, so any stop is lossless) */
        if (k < g && out->more && out->conf && !out->more(out->more_ctx, k, out->conf)) break;
    }
    return 0;
fail:
    out->n = 0;
    return -1;
}

int mtp_drafter_commit(drafter *d, request *r, int n_accepted, int next_token, const float *hidden) {
    mtp *s = d->impl;
    mtp_state *st = r->dstate;
    int p = st->n, tok[MTP_MAX_DEPTH + 66];
    DS_CHECK(hidden != NULL, "mtp needs the target's hidden states of the accepted rows");
    DS_CHECK(n_accepted >= 0 && n_accepted < (int)(sizeof tok / sizeof *tok), "mtp: %d accepted tokens", n_accepted);
    /* rows anchor .. x_accepted (positions p .. p + n_accepted), each reading the token after it: the
     * accepted drafts as committed, then next_token (the new anchor); the last is the next step 1 */
    for (int i = 0; i < n_accepted; i++) tok[i] = p + 1 + i < r->toks.n ? r->toks.v[p + 1 + i] : next_token;
    tok[n_accepted] = next_token;
    DS_TRY(run_rows(s, st, hidden, 1, tok, n_accepted + 1, p, st->y1));
    st->n = p + n_accepted + 1;
    return 0;
fail:
    return -1;
}

int mtp_drafter_rewind(drafter *d, request *r) {
    mtp *s = d->impl;
    mtp_state *st = r->dstate;
    st->n = st->n0; /* the prompt's rows stay in the cache; later ones are overwritten */
    memcpy(st->y1, st->y1_0, sizeof(float) * (size_t)s->m.cfg.dim);
    return 0;
}

void mtp_drafter_end(drafter *d, request *r) {
    DS_UNUSED(d);
    mtp_state *st = r->dstate;
    if (!st) return;
    free(st->K), free(st->V), free(st->y1), free(st->y1_0), free(st);
    r->dstate = NULL;
}

void mtp_drafter_close(drafter *d) {
    mtp *s = d->impl;
    if (!s) return;
    if (s->be) {
        s->be->release(s->be, s->Xd), s->be->release(s->be, s->Zd), s->be->release(s->be, s->Bin);
        for (int i = 0; i < 3; i++) s->be->release(s->be, s->Bout[i]);
    }
    /* the backend keys its copies by the data's address: forget them before the rows are freed */
    if (s->be && s->m.sv.rows) s->be->forget_mats(s->be, (const qmat *[]){&s->m.sv.head}, 1);
    for (int i = 0; i < MTP_BLOCK_MATS; i++) {
        if (s->be && s->bq[i].data) s->be->forget_mats(s->be, (const qmat *[]){&s->bq[i]}, 1);
        free((void *)s->bq[i].data);
    }
    mtp_model_free(&s->m);
    mtp_acts_free_f(&s->acts);
    free(s->z), free(s->hf), free(s->ych), free(s->qalt), free(s->cat);
    free(s->ctok), free(s->cord), free(s->cscore), free(s->TK), free(s->RK);
    lp_scratch_free(&s->scr);
    free(s);
    d->impl = NULL;
}

/* the training family of mtp and eagle3 (train_family.h) */
typedef struct {
    mtp_config c;
    mtp_model m;
} mtp_train;

static int mtp_tf_configure(void *st, const char *name, const cJSON *arch, const target *t, int *taps, int *n_tap) {
    mtp_train *b = st;
    DS_TRY(mtp_config_init(&b->c, &t->m, name, arch));
    contract_stamp(&b->c.contract, t);
    *n_tap = b->c.n_tap;
    memcpy(taps, b->c.taps, sizeof(int) * (size_t)b->c.n_tap);
    return 0;
fail:
    return -1;
}

static int mtp_tf_init(void *st, const target *t, const train_cache *d, uint64_t seed, int full_vocab,
                       const char *resume_dir, trainable *tr, char *describe, size_t n) {
    (void)resume_dir; /* a resumed run reads its parameters from OUT/last in train_run */
    mtp_train *b = st;
    const mtp_config *c = &b->c;
    int *ids;
    DS_TRY(train_family_vocab(d, t, c->contract.draft_vocab, full_vocab, &ids));
    int e = mtp_model_init(&b->m, c, &t->m, seed, 1, ids);
    free(ids);
    DS_TRY(e);
    DS_TRY(mtp_trainable(&b->m, tr));
    char taps[64] = "";
    for (int i = 0; i < c->n_tap; i++) snprintf(taps + strlen(taps), sizeof taps - strlen(taps), "%s%d", i ? ", " : "", c->taps[i]);
    snprintf(describe, n, "%s, %zu parameters (one module on layer%s %s%s, depth %d, block from %s)", c->kind,
             b->m.n_params, c->n_tap > 1 ? "s" : "", taps, mtp_fused(c) ? " fused" : "", c->depth,
             c->init_layer >= 0 ? "the target's last layer" : "random");
    return 0;
fail:
    return -1;
}

static void mtp_tf_release(void *st) { mtp_model_free(&((mtp_train *)st)->m); }

const train_family mtp_train_family = {sizeof(mtp_train), mtp_tf_configure, mtp_tf_init, mtp_tf_release};

const drafter_ops drafter_mtp = {
    "mtp",
    "DeepSeek-V3-style MTP module on the target's last hidden state, one module chained: {\"checkpoint\": DIR, "
    "\"block_precision\": \"auto\" | \"q8_0\" | \"q4_1\" | \"f32\", \"tree_nodes\": 0, \"tree_width\": 4} (tree_nodes N > 0: "
    "EAGLE-2's dynamic tree of N nodes, tree_width children a node and nodes expanded a depth, verified exactly; "
    "untrained: {\"depth\": 3, \"seed\": 1, \"init_layer\": -1})",
    mtp_open, mtp_drafter_begin, mtp_drafter_propose, mtp_drafter_commit, mtp_drafter_end, mtp_drafter_rewind, mtp_drafter_close,
    /* the gate's untrained module: the block copied from the tiny target's last layer, P random; on
     * the tiny target over a draft vocabulary of 6 of its 8 tokens in a scrambled order, on the real
     * one over the whole vocabulary */
    "{\"depth\": 3, \"vocab_ids\": [6, 1, 4, 0, 7, 2]}",
    "{\"depth\": 3}",
    .train = &mtp_train_family,
    /* its EAGLE-2 tree on the tiny target: 2 children a node, 2 expanded a depth, 6 of 10 candidates */
    .gate_config_tree = "{\"depth\": 3, \"vocab_ids\": [6, 1, 4, 0, 7, 2], \"tree_nodes\": 6, \"tree_width\": 2}",
};
