/* blockdraft.c — the DFlash / DSpark model: configuration, parameters, checkpoints, and the
 * training forward and backward of one sequence (forward pass first, then the backward pass in
 * reverse, each layer's pieces side by side with its forward). */
#include "blockdraft.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../runtime/base/common.h"
#include "../runtime/formats/quant.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/formats/safetensors.h"
#include "../runtime/sampling.h"
#include "../runtime/train/train_ops.h"
#include "contract.h"
#include "train_family.h"

/* ------------------------------------------------------------------------------ config */

int bd_rows(const bd_config *c) { return c->anchor_first ? c->gamma : c->gamma + 1; }

/* an optional array of lo..hi target layer ids (taps, init_layers); absent leaves *n as it is */
static int layer_ids(const cJSON *a, const char *key, int lo, int hi, int *ids, int *n, const char *what) {
    if (!a) return 0;
    int k = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || k < lo || k > hi) {
        ds_error("%s: '%s' must be an array of %d..%d target layer ids", what, key, lo, hi);
        return -1;
    }
    for (int i = 0; i < k; i++) {
        const cJSON *t = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 || t->valuedouble > 1023) {
            ds_error("%s: '%s'[%d] must be a layer id (an integer >= 0)", what, key, i);
            return -1;
        }
        ids[i] = t->valueint;
    }
    *n = k;
    return 0;
}

/* every field of the config: the schema of a checkpoint's config.json (bd_config_json writes the
 * same keys); a drafter object in a run or train config uses the architecture keys of it. Unknown
 * keys are errors (jcfg). */
int bd_config_from_json(bd_config *c, const cJSON *j, const char *what) {
    if (!j) return 0;
    jcfg r;
    int af = c->anchor_first, hk = (int)c->head;
    const char *jk = c->kind;
    if (jcfg_open(&r, j, what) || jcfg_str(&r, "kind", &jk)) return -1;
    if (strcmp(jk, c->kind)) {
        ds_error("%s: a checkpoint of kind '%s', not %s", what, jk, c->kind);
        return -1;
    }
    if (jcfg_int(&r, "dim", 8, 65536, &c->dim) || jcfg_int(&r, "layers", 1, 64, &c->n_layers) ||
        jcfg_int(&r, "heads", 1, 256, &c->n_heads) || jcfg_int(&r, "kv_heads", 1, 256, &c->n_kv_heads) ||
        jcfg_int(&r, "head_dim", 2, 1024, &c->head_dim) || jcfg_int(&r, "hidden_dim", 1, 1 << 18, &c->hidden_dim) ||
        jcfg_int(&r, "vocab", 2, 1 << 22, &c->vocab) || jcfg_int(&r, "gamma", 1, 16, &c->gamma) ||
        jcfg_int(&r, "anchor_first", 0, 1, &af) || jcfg_int(&r, "head", 0, 2, &hk) ||
        jcfg_int(&r, "rank", 0, 4096, &c->rank) || jcfg_int(&r, "confidence", 0, 1, &c->conf) ||
        jcfg_int(&r, "mask_token", 0, 1 << 22, &c->mask_token) || jcfg_float(&r, "eps", 1e-12, 1, &c->eps) ||
        jcfg_float(&r, "rope_theta", 1, 1e9, &c->rope_theta) || jcfg_float(&r, "w_ce", 0, 100, &c->w_ce) ||
        jcfg_float(&r, "w_l1", 0, 100, &c->w_l1) || jcfg_float(&r, "w_bce", 0, 100, &c->w_bce) ||
        jcfg_float(&r, "lambda", 1e-3, 1e6, &c->lambda) || contract_read(&r, &c->contract))
        return -1;
    c->anchor_first = af;
    c->head = (bd_head)hk;
    if (layer_ids(jcfg_get(&r, "taps"), "taps", 1, 8, c->tap, &c->n_tap, what) ||
        layer_ids(jcfg_get(&r, "init_layers"), "init_layers", 0, 16, c->init_layer, &c->n_init, what))
        return -1;
    if (jcfg_close(&r)) return -1;
    if (c->n_heads % c->n_kv_heads) {
        ds_error("%s: heads %d must be a multiple of kv_heads %d", what, c->n_heads, c->n_kv_heads);
        return -1;
    }
    if (c->head != HEAD_NONE && c->rank < 1) {
        ds_error("%s: a Markov/RNN head needs a rank", what);
        return -1;
    }
    return 0;
}

/* what a config (a drafter object or a checkpoint's config.json) must agree on with the target */
static int config_check(bd_config *c, const model *target, const char *what);

int bd_config_init(bd_config *c, const model *target, const char *kind, const cJSON *j) {
    memset(c, 0, sizeof *c);
    const model_config *t = &target->cfg;
    snprintf(c->kind, sizeof c->kind, "%s", kind);
    contract_init(&c->contract, target);
    /* the draft layers copy the target's geometry; depth is chosen for a 2-core CPU (README) */
    c->dim = t->dim;
    c->n_heads = t->n_heads;
    c->n_kv_heads = t->n_kv_heads;
    c->head_dim = t->head_dim;
    c->hidden_dim = t->hidden_dim;
    c->vocab = t->vocab_size;
    c->n_layers = 3;
    c->eps = t->norm_eps;
    c->rope_theta = t->rope_theta;
    /* five taps evenly spaced over layers 1..L-3 (never the last layer) */
    c->n_tap = DS_MIN(5, t->n_layers);
    for (int i = 0; i < c->n_tap; i++)
        c->tap[i] = c->n_tap == 1 ? t->n_layers / 2 : 1 + (int)((double)i * (t->n_layers - 4) / (c->n_tap - 1));
    c->gamma = 7;
    c->mask_token = t->vocab_size > 16 ? 16 : t->vocab_size - 1; /* SmolLM2: <empty_output>, never in chat data */
    if (strcmp(kind, "dflash") == 0) {
        c->anchor_first = 1;
        c->head = HEAD_NONE;
        c->w_ce = 1;
    } else if (strcmp(kind, "dspark-markov") == 0 || strcmp(kind, "dspark-rnn") == 0) {
        c->anchor_first = 1;
        c->head = strcmp(kind, "dspark-rnn") == 0 ? HEAD_RNN : HEAD_MARKOV;
        c->rank = 256;
        c->conf = 1;
        c->w_ce = 0.1f;
        c->w_l1 = 0.9f;
        c->w_bce = 1.0f;
    } else {
        ds_error("block drafter kind '%s' unknown (dflash, dspark-markov, dspark-rnn)", kind);
        return -1;
    }
    if (bd_config_from_json(c, j, "drafter")) return -1;
    return config_check(c, target, "drafter");
}

/* what a config (a drafter object or a checkpoint's config.json) must agree on with the target */
static int config_check(bd_config *c, const model *target, const char *what) {
    const model_config *t = &target->cfg;
    for (int i = 0; i < c->n_tap; i++)
        if (c->tap[i] < -1 || c->tap[i] >= t->n_layers) { /* -1: the embedding's output */
            ds_error("%s: 'taps': layer %d does not exist (the target has layers -1..%d)", what, c->tap[i], t->n_layers - 1);
            return -1;
        }
    if (c->n_init && c->n_init != c->n_layers) {
        ds_error("%s: 'init_layers' names %d target layers but the drafter has %d layers (one each)", what, c->n_init,
                 c->n_layers);
        return -1;
    }
    for (int i = 0; i < c->n_init; i++)
        if (c->init_layer[i] >= t->n_layers) {
            ds_error("%s: 'init_layers': layer %d does not exist (the target has layers 0..%d)", what, c->init_layer[i],
                     t->n_layers - 1);
            return -1;
        }
    if (c->lambda <= 0) c->lambda = (float)c->gamma; /* the paper's choice; DeepSpec's code uses 4 */
    if (contract_check_target(&c->contract, target, c->vocab, what)) return -1;
    if (c->dim != t->dim || c->vocab != t->vocab_size) {
        ds_error("%s: a block drafter shares the target's embedding: dim %d / vocab %d must equal the target's %d / %d",
                 what, c->dim, c->vocab, t->dim, t->vocab_size);
        return -1;
    }
    if (c->mask_token >= c->vocab) { /* an embedding row */
        ds_error("%s: 'mask_token' %d is not a token id (vocab %d)", what, c->mask_token, c->vocab);
        return -1;
    }
    return 0;
}

cJSON *bd_config_json(const bd_config *c) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", c->kind);
    cJSON_AddNumberToObject(j, "dim", c->dim);
    cJSON_AddNumberToObject(j, "layers", c->n_layers);
    cJSON_AddNumberToObject(j, "heads", c->n_heads);
    cJSON_AddNumberToObject(j, "kv_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(j, "hidden_dim", c->hidden_dim);
    cJSON_AddNumberToObject(j, "vocab", c->vocab);
    cJSON *t = cJSON_AddArrayToObject(j, "taps");
    for (int i = 0; i < c->n_tap; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(c->tap[i]));
    cJSON_AddNumberToObject(j, "gamma", c->gamma);
    cJSON_AddNumberToObject(j, "anchor_first", c->anchor_first);
    cJSON_AddNumberToObject(j, "head", c->head);
    cJSON_AddNumberToObject(j, "rank", c->rank);
    cJSON_AddNumberToObject(j, "confidence", c->conf);
    cJSON_AddNumberToObject(j, "mask_token", c->mask_token);
    cJSON_AddNumberToObject(j, "eps", c->eps);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "w_ce", c->w_ce);
    cJSON_AddNumberToObject(j, "w_l1", c->w_l1);
    cJSON_AddNumberToObject(j, "w_bce", c->w_bce);
    cJSON_AddNumberToObject(j, "lambda", c->lambda);
    if (c->n_init) { /* provenance: what the layers started from */
        cJSON *il = cJSON_AddArrayToObject(j, "init_layers");
        for (int i = 0; i < c->n_init; i++) cJSON_AddItemToArray(il, cJSON_CreateNumber(c->init_layer[i]));
    }
    contract_json(j, &c->contract);
    return j;
}

const char *const bd_prof_names[BD_PROF_N] = {
    "context fc + norm (fwd)", "draft layers, not attention (fwd)", "attention (fwd)", "target distribution",
    "draft head: h Eh^T (fwd)", "Markov/RNN factor + confidence (fwd)", "losses (softmax, L1, CE, BCE)",
    "Markov/RNN factor + confidence (bwd)", "draft head (bwd)", "draft layers, not attention (bwd)", "attention (bwd)",
    "context fc + norm (bwd)"};

/* ---------------------------------------------------------------------------- parameters */

static void add_tensor(bd_model *m, const char *name, int64_t r, int64_t cols) {
    bd_tensor *t = &m->t[m->n_t++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = cols ? 2 : 1;
    t->shape[0] = r;
    t->shape[1] = cols;
    t->numel = (size_t)r * (size_t)(cols ? cols : 1);
    t->offset = m->n_params;
    m->n_params += t->numel;
}

static void build_table(bd_model *m) {
    const bd_config *c = &m->cfg;
    int D = c->dim, Q = c->n_heads * c->head_dim, K = c->n_kv_heads * c->head_dim, H = c->hidden_dim, r = c->rank;
    char n[48];
    m->n_t = 0;
    m->n_params = 0;
    add_tensor(m, "fc.weight", D, (int64_t)c->n_tap * D);
    add_tensor(m, "hidden_norm.weight", D, 0);
    for (int l = 0; l < c->n_layers; l++) {
#define T(nm, a, b) (snprintf(n, sizeof n, "layers.%d.%s", l, nm), add_tensor(m, n, a, b))
        T("attn_norm.weight", D, 0);
        T("wq.weight", Q, D);
        T("wk.weight", K, D);
        T("wv.weight", K, D);
        T("wo.weight", D, Q);
        T("ffn_norm.weight", D, 0);
        T("w_gate.weight", H, D);
        T("w_up.weight", H, D);
        T("w_down.weight", D, H);
#undef T
    }
    add_tensor(m, "final_norm.weight", D, 0);
    if (c->head != HEAD_NONE) {
        add_tensor(m, "head.W1", c->vocab, r);
        add_tensor(m, "head.W2", contract_rows(&c->contract, c->vocab), r); /* output side: draft rows */
    }
    if (c->head == HEAD_RNN) {
        add_tensor(m, "head.Wr", 3 * (int64_t)r, 2 * (int64_t)r + D);
        add_tensor(m, "head.br", 3 * (int64_t)r, 0);
    }
    if (c->conf) {
        add_tensor(m, "conf.w", D + (c->head != HEAD_NONE ? r : 0), 0);
        add_tensor(m, "conf.b", 1, 0);
    }
}

/* the named views (blockdraft_train.inc's bd_pv_set walks the table in build order) */
static void bd_pv_set_f(bd_pv_f *v, const bd_config *c, const bd_tensor *tab, float *base);
static void bd_ws_free_f(bd_ws_f *w);

static void set_views(bd_model *m) {
    bd_pv_set_f(&m->pv, &m->cfg, m->t, m->params);
    m->fc = m->pv.fc, m->hidden_norm = m->pv.hidden_norm, m->final_norm = m->pv.final_norm;
    m->W1 = m->pv.W1, m->W2 = m->pv.W2, m->Wr = m->pv.Wr, m->br = m->pv.br, m->wc = m->pv.wc, m->bc = m->pv.bc;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const bd_layer_pv_f *p = &m->pv.layer[l];
        m->layer[l] = (struct bd_layer){p->attn_norm, p->wq, p->wk, p->wv, p->wo, p->ffn_norm, p->w_gate, p->w_up, p->w_down};
    }
}

void bd_views(const bd_model *m, float *base, float **out) {
    for (int i = 0; i < m->n_t; i++) out[i] = base + m->t[i].offset;
}

/* the model's side of its draft vocabulary m->sv (set and checked): Vd, the recorded hash, the
 * head's fp32 rows */
static int finish_vocab(bd_model *m) {
    bd_config *c = &m->cfg;
    m->Vd = m->sv.Vd;
    m->Eh = m->E;
    if (!m->sv.vid) return 0;
    snprintf(c->contract.vocab_hash, sizeof c->contract.vocab_hash, "%s", m->sv.hash);
    DS_TRYP(m->Eh_owned = ds_malloc(sizeof(float) * (size_t)m->Vd * c->dim, "draft head"));
    subvocab_gather_f32(&m->sv, m->E, c->dim, m->Eh_owned);
    m->Eh = m->Eh_owned;
    return 0;
fail:
    return -1;
}

/* the draft vocabulary from its ids: checked (distinct, in range, the recorded hash), rows gathered */
static int set_vocab(bd_model *m, const int *ids) {
    const bd_config *c = &m->cfg;
    DS_TRY(contract_vocab_set(&c->contract, &m->sv, c->vocab, ids, c->kind));
    return finish_vocab(m);
fail:
    return -1;
}

static int alloc_model(bd_model *m, const bd_config *c, const model *target) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    DS_CHECK(c->n_layers <= BD_MAX_LAYERS, "a block drafter has at most %d layers", BD_MAX_LAYERS);
    int max_t = 4 + 9 * c->n_layers + 8;
    DS_TRYP(m->t = ds_calloc((size_t)max_t, sizeof(bd_tensor), "parameter table"));
    DS_TRYP(m->layer = ds_calloc((size_t)c->n_layers, sizeof *m->layer, "layers"));
    build_table(m);
    DS_TRYP(m->params = ds_calloc(m->n_params, sizeof(float), "drafter parameters"));
    set_views(m);
    /* the frozen embedding/head, dequantized once (shared by every block drafter of this target) */
    DS_TRYP(m->E_owned = ds_malloc(sizeof(float) * (size_t)c->vocab * c->dim, "target head copy"));
    for (int v = 0; v < c->vocab; v++) qmat_row_f32(&target->output, v, m->E_owned + (size_t)v * c->dim);
    m->E = m->E_owned;
    return 0;
fail:
    bd_model_free(m);
    return -1;
}

/* init_layers: the target's layer weights and output norm as a starting point (the same geometry,
 * the same interleaved RoPE pairs as the training step's rope_rotate; the context rows' fc stays random) */
static int copy_target_layers(bd_model *m, const model *target) {
    const bd_config *c = &m->cfg;
    const model_config *tc = &target->cfg;
    if (!c->n_init) return 0;
    if (c->n_heads != tc->n_heads || c->n_kv_heads != tc->n_kv_heads || c->head_dim != tc->head_dim ||
        c->hidden_dim != tc->hidden_dim || tc->rope_neox) {
        ds_error("drafter: 'init_layers' needs the target's layer geometry and interleaved RoPE (heads %d/%d, kv %d/%d, "
                 "head_dim %d/%d, hidden %d/%d%s)", c->n_heads, tc->n_heads, c->n_kv_heads, tc->n_kv_heads, c->head_dim,
                 tc->head_dim, c->hidden_dim, tc->hidden_dim, tc->rope_neox ? ", the target's RoPE is NEOX" : "");
        bd_model_free(m);
        return -1;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const layer_weights *s = &target->layers[c->init_layer[l]];
        const bd_layer_pv_f *d = &m->pv.layer[l];
        if (s->q_norm || s->k_norm) {
            ds_error("drafter: 'init_layers': target layer %d has q/k norms the draft layers do not", c->init_layer[l]);
            bd_model_free(m);
            return -1;
        }
        layer_to_f32(s, c->dim, (float *const[9]){d->attn_norm, d->wq, d->wk, d->wv, d->wo, d->ffn_norm, d->w_gate,
                                                  d->w_up, d->w_down});
    }
    memcpy(m->pv.final_norm, target->out_norm, sizeof(float) * c->dim); /* the stack ends as the target's does */
    return 0;
}

int bd_model_init(bd_model *m, const bd_config *c, const model *target, uint64_t seed, float zero_noise) {
    return bd_model_init_vocab(m, c, target, seed, zero_noise, NULL);
}

int bd_model_init_vocab(bd_model *m, const bd_config *c, const model *target, uint64_t seed, float zero_noise,
                        const int *ids) {
    if (alloc_model(m, c, target)) return -1;
    if (set_vocab(m, ids)) {
        bd_model_free(m);
        return -1;
    }
    rng_t r;
    rng_seed(&r, seed);
    float out_scale = 0.02f / sqrtf(2.0f * c->n_layers); /* residual-output projections, GPT-2 style */
    for (int i = 0; i < m->n_t; i++) {
        bd_tensor *t = &m->t[i];
        float *p = m->params + t->offset;
        int is_norm = strstr(t->name, "norm") != NULL;
        int is_zero = strcmp(t->name, "head.W2") == 0 || strcmp(t->name, "head.br") == 0 || strncmp(t->name, "conf.", 5) == 0;
        float std = strstr(t->name, "wo.") || strstr(t->name, "w_down.") ? out_scale : 0.02f;
        if (is_zero && zero_noise > 0) {
            is_zero = 0;
            std = zero_noise;
        }
        for (size_t k = 0; k < t->numel; k++) {
            if (is_norm) p[k] = 1.0f;
            else if (is_zero) p[k] = 0.0f; /* the head starts as no correction; the confidence at 1/2 */
            else p[k] = (float)rng_normal(&r) * std;
        }
    }
    return copy_target_layers(m, target);
}

void bd_model_rescale(bd_model *m, float f) {
    for (int i = 0; i < m->n_t; i++) {
        const char *n = m->t[i].name;
        if (strstr(n, "norm") || !strcmp(n, "head.W2") || !strcmp(n, "head.br") || !strncmp(n, "conf.", 5))
            continue; /* the norms, and what init_noise sets */
        for (size_t k = 0; k < m->t[i].numel; k++) m->params[m->t[i].offset + k] *= f;
    }
}

void bd_model_free(bd_model *m) {
    free(m->t);
    free(m->layer);
    free(m->params);
    free(m->E_owned);
    subvocab_free(&m->sv);
    free(m->Eh_owned), free(m->tt);
    bd_ws_free_f(&m->ws);
    memset(m, 0, sizeof *m);
}


int bd_save(const bd_model *m, const char *dir) {
    st_write_tensor *w = ds_calloc((size_t)m->n_t + 1, sizeof *w, "checkpoint");
    if (!w) return -1;
    for (int i = 0; i < m->n_t; i++) {
        w[i].name = m->t[i].name;
        w[i].data = m->params + m->t[i].offset;
        w[i].n_dims = m->t[i].n_dims;
        w[i].shape[0] = m->t[i].shape[0];
        w[i].shape[1] = m->t[i].shape[1];
    }
    int rc = subvocab_write_checkpoint(&m->sv, dir, w, m->n_t, bd_config_json(&m->cfg));
    free(w);
    return rc;
}

int bd_read_params(bd_model *m, const char *dir) {
    char p[4096];
    st_file f;
    uint8_t *taken = NULL;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (st_open(&f, p)) return -1;
    DS_TRYP(taken = ds_calloc((size_t)f.n_tensors + 1, 1, "tensor flags"));
    for (int i = 0; i < m->n_t; i++) {
        const bd_tensor *t = &m->t[i];
        const st_tensor *s = st_find(&f, t->name);
        DS_CHECK(s != NULL, "%s: missing tensor '%s'", p, t->name);
        DS_CHECK(s->n_dims == t->n_dims && s->shape[0] == t->shape[0] && (t->n_dims == 1 || s->shape[1] == t->shape[1]),
                 "%s: tensor '%s' has the wrong shape", p, t->name);
        DS_TRY(st_to_f32(&f, s, m->params + t->offset));
        taken[s - f.tensors] = 1;
    }
    DS_TRY(st_check_taken(&f, taken, "vocab.ids")); /* the draft vocabulary's, read by the contract */
    free(taken);
    st_close(&f);
    return 0;
fail:
    free(taken);
    st_close(&f);
    return -1;
}

int bd_load(bd_model *m, const char *dir, const model *target) {
    char p[4096];
    cJSON *j = NULL;
    memset(m, 0, sizeof *m);
    snprintf(p, sizeof p, "%s/config.json", dir);
    DS_TRYP(j = ds_read_json(p));
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
    DS_CHECK(cJSON_IsString(kind), "%s: no 'kind' (dflash, dspark-markov, dspark-rnn)", p);
    bd_config c;
    DS_TRY(bd_config_init(&c, target, kind->valuestring, NULL));
    DS_TRY(bd_config_from_json(&c, j, p));
    DS_TRY(config_check(&c, target, p)); /* a checkpoint's geometry, as a drafter object's is */
    DS_TRY(alloc_model(m, &c, target));
    DS_TRY(bd_read_params(m, dir));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    DS_TRY(contract_vocab_read(&c.contract, &m->sv, c.vocab, p));
    DS_TRY(finish_vocab(m));
    cJSON_Delete(j);
    return 0;
fail:
    cJSON_Delete(j);
    bd_model_free(m);
    return -1;
}

/* -------------------------------------------------------------------------------- training */

double bd_seq_weight(const bd_config *c, int A, const int *n_valid) {
    double w = 0;
    for (int a = 0; a < A; a++)
        for (int k = 1; k <= n_valid[a]; k++) w += exp(-(k - 1) / (double)c->lambda);
    return w;
}

/* The sequence forward/backward is written once (blockdraft_train.inc) and compiled for float
 * (training) and double (the finite-difference check of the whole loss in tests/test_train.c). */
#define REAL float
#define FN(name) name##_f
#define SEQ bd_seq
#include "blockdraft_train.inc"
#undef REAL
#undef FN
#undef SEQ

int bd_train_seq(bd_model *m, const bd_seq *s, float *grad, double norm, bd_stats *st) {
    bd_pv_f g;
    bd_pv_set_f(&g, &m->cfg, m->t, grad);
    return bd_train_seq_f(&m->cfg, &m->pv, grad ? &g : NULL, m->E, m->Eh, m->Vd, m->sv.vmap, s, norm, st, &m->ws);
}

/* ----------------------------------------------------------------------- the trainer's view */

static int tr_step(trainable *tr, const train_seq *s, float *grad, double norm, train_stats *st) {
    return bd_train_seq(tr->impl, s, grad, norm, st);
}
static double tr_weight(const trainable *tr, int A, const int *n_valid) {
    return bd_seq_weight(&((const bd_model *)tr->impl)->cfg, A, n_valid);
}
static int tr_save(const trainable *tr, const char *dir) { return bd_save(tr->impl, dir); }
static int tr_read(trainable *tr, const char *dir) { return bd_read_params(tr->impl, dir); }
static cJSON *tr_config(const trainable *tr) { return bd_config_json(&((const bd_model *)tr->impl)->cfg); }

int bd_trainable(bd_model *m, trainable *tr) {
    free(m->tt);
    DS_TRYP(m->tt = ds_calloc((size_t)m->n_t, sizeof *m->tt, "parameter table"));
    for (int i = 0; i < m->n_t; i++) {
        const char *n = m->t[i].name;
        m->tt[i] = (train_tensor){m->t[i].offset, m->t[i].numel,
                                  strstr(n, "norm") == NULL && strncmp(n, "conf.", 5) != 0 && strcmp(n, "head.br") != 0};
    }
    *tr = (trainable){.impl = m, .kind = m->cfg.kind, .params = m->params, .n_params = m->n_params, .n_t = m->n_t,
                      .t = m->tt, .positions = m->cfg.gamma, .n_tap = m->cfg.n_tap, .dim = m->cfg.dim,
                      .taps = m->cfg.tap, .w_ce = m->cfg.w_ce, .w_l1 = m->cfg.w_l1,
                      .w_bce = m->cfg.w_bce, .full_vocab = m->Vd == m->cfg.vocab, .step = tr_step,
                      .seq_weight = tr_weight, .save = tr_save, .read_params = tr_read, .config_json = tr_config};
    return 0;
fail:
    return -1;
}

/* ------------------------------------------------------------------ the training family (train_family.h) */

typedef struct {
    bd_config c;
    bd_model m;
} bd_train;

static int bd_tf_configure(void *st, const char *name, const cJSON *arch, const target *t, int *taps, int *n_tap) {
    bd_train *b = st;
    DS_TRY(bd_config_init(&b->c, &t->m, name, arch));
    contract_stamp(&b->c.contract, t);
    *n_tap = b->c.n_tap;
    memcpy(taps, b->c.tap, sizeof(int) * (size_t)b->c.n_tap);
    return 0;
fail:
    return -1;
}

int bd_train_new(const bd_config *c0, const target *t, const train_cache *d, int full_vocab, uint64_t seed,
                 const char *resume_dir, bd_model *m) {
    bd_config c = *c0;
    char p[4200];
    struct stat sb;
    if (full_vocab) c.contract.draft_vocab = 0;
    snprintf(p, sizeof p, "%s/config.json", resume_dir ? resume_dir : "");
    if (c.contract.draft_vocab && resume_dir && stat(p, &sb) == 0) /* resuming: the checkpoint's own vocabulary */
        return bd_load(m, resume_dir, &t->m);
    int *ids;
    if (train_family_vocab(d, t, c.contract.draft_vocab, 0, &ids)) return -1;
    int e = bd_model_init_vocab(m, &c, &t->m, seed, 0, ids);
    free(ids);
    return e;
}

static int bd_tf_init(void *st, const target *t, const train_cache *d, uint64_t seed, int full_vocab,
                      const char *resume_dir, trainable *tr, char *describe, size_t n) {
    bd_train *b = st;
    const bd_config *c = &b->c;
    DS_TRY(bd_train_new(c, t, d, full_vocab, seed, resume_dir, &b->m));
    DS_TRY(bd_trainable(&b->m, tr));
    snprintf(describe, n, "%s, %zu parameters (%d layers, gamma %d, %s, lambda %g)", c->kind, b->m.n_params, c->n_layers,
             c->gamma, c->head == HEAD_NONE ? "no head" : c->head == HEAD_MARKOV ? "Markov head" : "RNN head",
             (double)c->lambda);
    return 0;
fail:
    return -1;
}

static void bd_tf_release(void *st) { bd_model_free(&((bd_train *)st)->m); }

const train_family bd_train_family = {sizeof(bd_train), bd_tf_configure, bd_tf_init, bd_tf_release};
