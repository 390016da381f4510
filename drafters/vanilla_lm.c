/* vanilla_lm.c — the distilled small LM (vanilla_lm.h): its config, parameters, checkpoint and
 * training step; vanilla.c serves it. */
#include "vanilla_lm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/formats/safetensors.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/train/train_ops.h"
#include "train_family.h"

static const char *const PER_LAYER[VLM_PER_LAYER] = {"attn_norm", "attn.wq",    "attn.wk",  "attn.wv",
                                                     "attn.wo",   "ffn_norm",   "mlp.w_gate", "mlp.w_up",
                                                     "mlp.w_down", "attn.bq",   "attn.bk",  "attn.bv"};

/* [rows][cols] of a layer's tensor i, in PER_LAYER's order (cols 0: a vector) */
static void layer_shape(const mtp_config *c, int i, int *rows, int *cols) {
    int D = c->dim, QD = c->n_heads * c->head_dim, KD = c->n_kv_heads * c->head_dim, HF = c->hidden_dim;
    const int R[VLM_PER_LAYER] = {D, QD, KD, KD, D, D, HF, HF, D, QD, KD, KD};
    const int C[VLM_PER_LAYER] = {0, D, D, D, QD, 0, D, D, HF, 0, 0, 0};
    *rows = R[i], *cols = C[i];
}

/* the training ops rotate pairs (adjacent or the halves') by pos * theta^(-2i/hd) and have no q/k norms */
static int trainable_target(const model *t) {
    const model_config *tc = &t->cfg;
    return !t->layers[0].q_norm && !t->layers[0].k_norm && !t->rope_freqs && tc->rope_scale == 1.0f;
}

int vlm_config_init(vlm_config *vc, const model *target, const cJSON *j) {
    memset(vc, 0, sizeof *vc);
    mtp_config *c = &vc->c;
    const model_config *t = &target->cfg;
    DS_CHECK(trainable_target(target), "vanilla: a distilled LM needs a target without q/k norms and RoPE scaling "
                                       "(this one has %s)", target->layers[0].q_norm ? "q/k norms" : "scaled RoPE");
    snprintf(c->kind, sizeof c->kind, "vanilla");
    c->dim = t->dim, c->vocab = t->vocab_size, c->n_heads = t->n_heads, c->n_kv_heads = t->n_kv_heads;
    c->head_dim = t->head_dim, c->hidden_dim = t->hidden_dim, c->depth = 4, c->init_layer = -1;
    c->eps = t->norm_eps, c->rope_theta = t->rope_theta;
    c->rope_neox = t->rope_neox; /* served through the runtime's forward with the target's RoPE tables */
    c->w_ce = 0.1f, c->w_l1 = 0.9f;
    vc->n_layers = DS_MIN(2, t->n_layers), vc->init_layers = 1;
    vc->qkv_bias = target->layers[0].bq != NULL; /* checkpoints before the key were of bias-free targets */
    contract_init(&c->contract, target);
    if (j) {
        jcfg r;
        const char *jk = "vanilla";
        DS_TRY(jcfg_open(&r, j, "vanilla"));
        DS_TRY(jcfg_str(&r, "kind", &jk));
        DS_CHECK(!strcmp(jk, "vanilla"), "vanilla: a checkpoint of kind '%s'", jk);
        DS_TRY(jcfg_int(&r, "n_layers", 1, VLM_MAX_LAYERS, &vc->n_layers));
        DS_TRY(jcfg_bool(&r, "init_layers", &vc->init_layers));
        DS_TRY(jcfg_bool(&r, "qkv_bias", &vc->qkv_bias));
        DS_TRY(jcfg_int(&r, "depth", 1, MTP_MAX_DEPTH, &c->depth));
        DS_TRY(jcfg_int(&r, "hidden_dim", 1, 1 << 20, &c->hidden_dim));
        DS_TRY(jcfg_float(&r, "w_ce", 0, 100, &c->w_ce));
        DS_TRY(jcfg_float(&r, "w_l1", 0, 100, &c->w_l1));
        DS_TRY(contract_read(&r, &c->contract));
        int g[5] = {c->dim, c->vocab, c->n_heads, c->n_kv_heads, c->head_dim};
        DS_TRY(jcfg_int(&r, "dim", 1, 1 << 20, &g[0]));
        DS_TRY(jcfg_int(&r, "vocab", 1, 1 << 24, &g[1]));
        DS_TRY(jcfg_int(&r, "n_heads", 1, 1 << 10, &g[2]));
        DS_TRY(jcfg_int(&r, "n_kv_heads", 1, 1 << 10, &g[3]));
        DS_TRY(jcfg_int(&r, "head_dim", 1, 1 << 12, &g[4]));
        DS_TRY(jcfg_float(&r, "eps", 0, 1, &c->eps));
        DS_TRY(jcfg_float(&r, "rope_theta", 1, 1e9, &c->rope_theta));
        DS_TRY(jcfg_close(&r));
        /* the LM shares the target's embedding, head and attention geometry: a checkpoint records it */
        DS_CHECK(g[0] == c->dim && g[1] == c->vocab && g[2] == c->n_heads && g[3] == c->n_kv_heads && g[4] == c->head_dim,
                 "vanilla: dim %d, vocab %d, heads %d/%d, head_dim %d do not match the target's %d, %d, %d/%d, %d", g[0],
                 g[1], g[2], g[3], g[4], c->dim, c->vocab, c->n_heads, c->n_kv_heads, c->head_dim);
    }
    return vlm_config_check(vc, target);
fail:
    return -1;
}

int vlm_config_check(vlm_config *vc, const model *target) {
    const model_config *t = &target->cfg;
    mtp_config *c = &vc->c;
    DS_CHECK(vc->n_layers <= t->n_layers || !vc->init_layers,
             "vanilla: n_layers %d with init_layers needs as many target layers (it has %d)", vc->n_layers, t->n_layers);
    DS_CHECK(!vc->init_layers || c->hidden_dim == t->hidden_dim,
             "vanilla: 'init_layers' copies the target's layers and needs its FFN width %d (hidden_dim %d; use false)",
             t->hidden_dim, c->hidden_dim);
    return contract_check_target(&c->contract, target, c->vocab, "vanilla");
fail:
    return -1;
}

cJSON *vlm_config_json(const vlm_config *vc) {
    const mtp_config *c = &vc->c;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", "vanilla");
    cJSON_AddNumberToObject(j, "n_layers", vc->n_layers);
    cJSON_AddBoolToObject(j, "init_layers", vc->init_layers);
    cJSON_AddBoolToObject(j, "qkv_bias", vc->qkv_bias);
    cJSON_AddNumberToObject(j, "depth", c->depth);
    cJSON_AddNumberToObject(j, "dim", c->dim);
    cJSON_AddNumberToObject(j, "vocab", c->vocab);
    cJSON_AddNumberToObject(j, "n_heads", c->n_heads);
    cJSON_AddNumberToObject(j, "n_kv_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(j, "hidden_dim", c->hidden_dim);
    cJSON_AddNumberToObject(j, "eps", c->eps);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "w_ce", c->w_ce);
    cJSON_AddNumberToObject(j, "w_l1", c->w_l1);
    contract_json(j, &c->contract);
    return j;
}

/* ------------------------------------------------------------------------------- model */

#define VIEWS(REAL, SFX)                                                                                   \
    void vlm_views##SFX(const vlm_model *m, REAL *base, mtp_pv##SFX *lay, REAL **final_norm) {              \
        for (int l = 0; l < m->cfg.n_layers; l++) {                                                         \
            REAL **f[VLM_PER_LAYER] = {&lay[l].attn_norm, &lay[l].wq,     &lay[l].wk,   &lay[l].wv,        \
                                       &lay[l].wo,        &lay[l].ffn_norm, &lay[l].w_gate, &lay[l].w_up,  \
                                       &lay[l].w_down,    &lay[l].bq,     &lay[l].bk,   &lay[l].bv};       \
            memset(&lay[l], 0, sizeof lay[l]);                                                              \
            for (int i = 0; i < m->per_layer; i++) *f[i] = base + m->tt[l * m->per_layer + i].offset;       \
        }                                                                                                   \
        *final_norm = base + m->tt[m->n_t - 1].offset;                                                     \
    }
VIEWS(float, _f)
VIEWS(double, _d)

static void vlm_ws_release_f(vlm_ws_f *w);

void vlm_model_free(vlm_model *m) {
    free(m->params);
    if (m->E != m->Ein) free(m->E);
    free(m->Ein);
    subvocab_free(&m->sv);
    vlm_ws_release_f(&m->ws);
    memset(m, 0, sizeof *m);
}

/* the layout and buffers around the draft vocabulary m->sv (already set) */
static int vlm_alloc(vlm_model *m, const vlm_config *c, const model *target, int with_embed) {
    subvocab sv = m->sv;
    memset(m, 0, sizeof *m);
    m->sv = sv;
    m->cfg = *c;
    snprintf(m->cfg.c.contract.vocab_hash, sizeof m->cfg.c.contract.vocab_hash, "%s", sv.hash);
    size_t off = 0;
    m->per_layer = c->qkv_bias ? VLM_PER_LAYER : VLM_PER_LAYER - 3;
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0; i < m->per_layer; i++) {
            int rows, cols, t = l * m->per_layer + i;
            layer_shape(&c->c, i, &rows, &cols);
            size_t n = (size_t)rows * (cols ? cols : 1);
            m->tt[t] = (train_tensor){off, n, cols > 0};
            snprintf(m->names[t], sizeof m->names[t], "layers.%d.%s.weight", l, PER_LAYER[i]);
            off += n;
        }
    m->n_t = c->n_layers * m->per_layer + 1;
    m->tt[m->n_t - 1] = (train_tensor){off, (size_t)c->c.dim, 0};
    snprintf(m->names[m->n_t - 1], sizeof m->names[0], "norm.weight");
    m->n_params = off + (size_t)c->c.dim;
    DS_TRYP(m->params = ds_calloc(m->n_params, sizeof(float), "vanilla parameters"));
    vlm_views_f(m, m->params, m->lay, &m->final_norm);
    if (with_embed) DS_TRY(subvocab_frozen_f32(&sv, target, &m->Ein, &m->E)); /* the training step's Ein and E */
    return 0;
fail:
    vlm_model_free(m);
    return -1;
}

int vlm_model_init(vlm_model *m, const vlm_config *c, const model *target, uint64_t seed, int with_embed,
                   const int *ids) {
    memset(m, 0, sizeof *m);
    int V = c->c.vocab;
    DS_TRY(contract_vocab_set(&c->c.contract, &m->sv, V, ids, "vanilla"));
    DS_TRY(vlm_alloc(m, c, target, with_embed));
    rng_t r;
    rng_seed(&r, seed);
    for (int l = 0; l < c->n_layers; l++) {
        mtp_pv_f *p = &m->lay[l];
        if (c->init_layers) { /* the target's layer l: step 0 is the self-draft of those layers */
            const layer_weights *tl = &target->layers[l];
            layer_to_f32(tl, c->c.dim, (float *const[9]){p->attn_norm, p->wq, p->wk, p->wv, p->wo, p->ffn_norm,
                                                         p->w_gate, p->w_up, p->w_down});
            const float *tb[3] = {tl->bq, tl->bk, tl->bv};
            float *b[3] = {p->bq, p->bk, p->bv};
            for (int i = 0; i < 3 && c->qkv_bias && tl->bq; i++)
                memcpy(b[i], tb[i], sizeof(float) * m->tt[l * m->per_layer + 9 + i].numel);
            continue;
        }
        for (int i = 0; i < 9; i++) { /* GPT-2 style: N(0, 0.02), residual outputs / sqrt(2 layers); biases 0 */
            const train_tensor *t = &m->tt[l * m->per_layer + i];
            float *x = m->params + t->offset, sd = i == 4 || i == 8 ? 0.02f / sqrtf(2.0f * c->n_layers) : 0.02f;
            for (size_t k = 0; k < t->numel; k++) {
                if (!t->decay) x[k] = 1.0f;
                else x[k] = (float)rng_normal(&r) * sd;
            }
        }
    }
    memcpy(m->final_norm, target->out_norm, sizeof(float) * c->c.dim);
    return 0;
fail:
    return -1;
}

/* the checkpoint's tensors: names, shapes and the parameters they are (save and read alike) */
static int vlm_tensors(const vlm_model *m, st_write_tensor *w) {
    for (int t = 0; t < m->n_t; t++) {
        int rows = (int)m->tt[t].numel, cols = 0;
        if (t < m->n_t - 1) layer_shape(&m->cfg.c, t % m->per_layer, &rows, &cols);
        w[t] = (st_write_tensor){m->names[t], m->params + m->tt[t].offset, cols ? 2 : 1, {rows, cols}};
    }
    return m->n_t;
}

int vlm_save(const vlm_model *m, const char *dir) {
    st_write_tensor w[VLM_MAX_TENSORS + 1];
    int n = vlm_tensors(m, w);
    return subvocab_write_checkpoint(&m->sv, dir, w, n, vlm_config_json(&m->cfg));
}

int vlm_read_params(vlm_model *m, const char *dir) {
    st_write_tensor w[VLM_MAX_TENSORS + 1];
    int n = vlm_tensors(m, w);
    return subvocab_read_checkpoint(&m->sv, dir, w, n);
}

int vlm_load(vlm_model *m, const char *dir, const model *target, int with_embed) {
    char p[4096];
    cJSON *j = NULL;
    vlm_config c;
    memset(m, 0, sizeof *m);
    snprintf(p, sizeof p, "%s/config.json", dir);
    DS_TRYP(j = subvocab_read_config(dir, "vanilla"));
    if (vlm_config_init(&c, target, j)) {
        ds_error_prefix("%s", p);
        goto fail;
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    int V = c.c.vocab;
    DS_TRY(contract_vocab_read(&c.c.contract, &m->sv, V, p));
    DS_TRY(vlm_alloc(m, &c, target, with_embed));
    DS_TRY(vlm_read_params(m, dir));
    cJSON_Delete(j);
    return 0;
fail:
    cJSON_Delete(j);
    vlm_model_free(m);
    return -1;
}

/* ---------------------------------------------------------------------- training step */

#define REAL float
#define FN(name) name##_f
#define SEQ train_seq
#define WS vlm_ws_f
#define MWS mtp_ws_f
#define ACTS mtp_acts_f
#define PV mtp_pv_f
#include "vanilla_lm_train.inc"
#undef REAL
#undef FN
#undef SEQ
#undef WS
#undef MWS
#undef ACTS
#undef PV
#define REAL double
#define FN(name) name##_d
#define SEQ train_seq_d
#define WS vlm_ws_d
#define MWS mtp_ws_d
#define ACTS mtp_acts_d
#define PV mtp_pv_d
#include "vanilla_lm_train.inc"
#undef REAL
#undef FN
#undef SEQ
#undef WS
#undef MWS
#undef ACTS
#undef PV

static int tr_step(trainable *tr, const train_seq *s, float *grad, double norm, train_stats *st) {
    vlm_model *m = tr->impl;
    DS_CHECK(m->Ein != NULL, "vanilla: the model was opened without the training tables");
    mtp_pv_f G[VLM_MAX_LAYERS];
    float *dfn = NULL;
    if (grad) vlm_views_f(m, grad, G, &dfn);
    return vlm_step_f(&m->cfg, m->lay, m->final_norm, grad ? G : NULL, dfn, m->Ein, m->E, m->sv.Vd, m->sv.vmap, s, norm,
                      st, &m->ws);
fail:
    return -1;
}
static double tr_weight(const trainable *tr, int A, const int *n_valid) {
    DS_UNUSED(tr);
    double w = 0;
    for (int a = 0; a < A; a++) w += n_valid[a]; /* every supervised position weight 1 */
    return w;
}
static int tr_save(const trainable *tr, const char *dir) { return vlm_save(tr->impl, dir); }
static int tr_read(trainable *tr, const char *dir) { return vlm_read_params(tr->impl, dir); }
static cJSON *tr_config(const trainable *tr) { return vlm_config_json(&((const vlm_model *)tr->impl)->cfg); }

int vlm_trainable(vlm_model *m, trainable *tr) {
    const mtp_config *c = &m->cfg.c;
    *tr = (trainable){.impl = m, .kind = "vanilla", .params = m->params, .n_params = m->n_params, .n_t = m->n_t,
                      .t = m->tt, .positions = c->depth, .n_tap = 0, .dim = c->dim, .taps = NULL, .w_ce = c->w_ce,
                      .w_l1 = c->w_l1, .w_bce = 0, .full_vocab = !m->sv.vid, .step = tr_step, .seq_weight = tr_weight,
                      .save = tr_save, .read_params = tr_read, .config_json = tr_config};
    return 0;
}

/* ------------------------------------------------------------------ the training family (train_family.h) */

typedef struct {
    vlm_config c;
    vlm_model m;
} vlm_train;

static int vlm_tf_configure(void *st, const char *name, const cJSON *arch, const target *t, int *taps, int *n_tap) {
    (void)name, (void)taps;
    vlm_train *b = st;
    DS_TRY(vlm_config_init(&b->c, &t->m, arch));
    contract_stamp(&b->c.c.contract, t);
    *n_tap = 0; /* it reads no target states */
    return 0;
fail:
    return -1;
}

static int vlm_tf_init(void *st, const target *t, const train_cache *d, uint64_t seed, int full_vocab,
                       const char *resume_dir, trainable *tr, char *describe, size_t n) {
    (void)resume_dir; /* a resumed run reads its parameters from OUT/last in train_run */
    vlm_train *b = st;
    const vlm_config *c = &b->c;
    int *ids;
    DS_TRY(train_family_vocab(d, t, c->c.contract.draft_vocab, full_vocab, &ids));
    int e = vlm_model_init(&b->m, c, &t->m, seed, 1, ids);
    free(ids);
    DS_TRY(e);
    DS_TRY(vlm_trainable(&b->m, tr));
    snprintf(describe, n, "vanilla, %zu parameters (a distilled LM: %d layers, FFN %d, %s; the target's embedding and "
             "head, frozen)", b->m.n_params, c->n_layers, c->c.hidden_dim,
             c->init_layers ? "layers from the target's first" : "random");
    return 0;
fail:
    return -1;
}

static void vlm_tf_release(void *st) { vlm_model_free(&((vlm_train *)st)->m); }

const train_family vlm_train_family = {sizeof(vlm_train), vlm_tf_configure, vlm_tf_init, vlm_tf_release};
