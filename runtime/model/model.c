#include "model.h"
#include "models.h"

#include <cJSON.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/common.h"
#include "../formats/quant.h"
#include "../base/jcfg.h"

const char *model_arch_name(model_arch a) { return a == ARCH_QWEN3 ? "qwen3" : a == ARCH_QWEN2 ? "qwen2" : "llama"; }

static int own(model *m, void *p) {
    void **n = ds_realloc(m->owned, sizeof(void *) * (size_t)(m->n_owned + 1), "model buffers");
    if (!n) {
        free(p);
        return -1;
    }
    m->owned = n;
    m->owned[m->n_owned++] = p;
    return 0;
}

static float *own_floats(model *m, size_t n, const char *what) {
    float *p = ds_aligned_alloc(n * sizeof(float), what);
    if (!p || own(m, p)) return NULL;
    return p;
}

void qmat_row_f32(const qmat *w, int row, float *dst) {
    ggml_type_get(w->type)->to_float((const uint8_t *)w->data + (size_t)row * w->row_bytes, dst, w->cols);
}

void qmat_to_f32(const qmat *w, float *dst) {
    for (int r = 0; r < w->rows; r++) qmat_row_f32(w, r, dst + (size_t)r * w->cols);
}

void layer_to_f32(const layer_weights *l, int dim, float *const dst[9]) {
    const qmat *mats[9] = {NULL, &l->wq, &l->wk, &l->wv, &l->wo, NULL, &l->w_gate, &l->w_up, &l->w_down};
    memcpy(dst[0], l->attn_norm, sizeof(float) * (size_t)dim);
    memcpy(dst[5], l->ffn_norm, sizeof(float) * (size_t)dim);
    for (int i = 0; i < 9; i++)
        if (mats[i]) qmat_to_f32(mats[i], dst[i]);
}

static uint64_t fnv1a(const uint8_t *p, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int model_load_any(model *m, const char *path);

static void set_fingerprint(model *m, const uint8_t *p, size_t n, uint64_t size) {
    uint64_t h = fnv1a(p, n, 0xcbf29ce484222325ull);
    h = fnv1a((const uint8_t *)&size, sizeof size, h);
    snprintf(m->fingerprint, sizeof m->fingerprint, "%016llx", (unsigned long long)h);
}

/* Dimension sanity shared by both loaders: everything later indexes with these. */
static int check_config(const model_config *c, const char *path) {
    DS_CHECK(c->dim > 0 && c->dim <= 65536, "%s: hidden size %d outside 1..65536", path, c->dim);
    DS_CHECK(c->n_layers > 0 && c->n_layers <= 512, "%s: layer count %d outside 1..512", path, c->n_layers);
    DS_CHECK(c->n_heads > 0 && c->n_heads <= 1024, "%s: head count %d outside 1..1024", path, c->n_heads);
    DS_CHECK(c->n_kv_heads > 0 && c->n_kv_heads <= c->n_heads && c->n_heads % c->n_kv_heads == 0,
             "%s: kv head count %d must divide the head count %d", path, c->n_kv_heads, c->n_heads);
    DS_CHECK(c->head_dim > 0 && c->head_dim <= 1024 && c->head_dim % 2 == 0, "%s: head size %d must be even, 2..1024",
             path, c->head_dim);
    DS_CHECK(c->hidden_dim > 0 && c->hidden_dim <= (1 << 20), "%s: feed-forward size %d outside 1..2^20", path,
             c->hidden_dim);
    DS_CHECK(c->vocab_size > 0 && c->vocab_size <= (1 << 22), "%s: vocabulary size %d outside 1..2^22", path,
             c->vocab_size);
    DS_CHECK(c->max_seq > 0 && c->max_seq <= (1 << 24), "%s: context length %d outside 1..2^24", path, c->max_seq);
    DS_CHECK(c->norm_eps > 0 && c->norm_eps < 1, "%s: RMSNorm epsilon %g outside (0, 1)", path, (double)c->norm_eps);
    DS_CHECK(c->rope_theta > 0 && isfinite(c->rope_theta), "%s: RoPE base %g must be positive", path,
             (double)c->rope_theta);
    DS_CHECK(c->rope_scale > 0 && isfinite(c->rope_scale), "%s: RoPE scaling factor %g must be positive", path,
             (double)c->rope_scale);
    return 0;
fail:
    return -1;
}

/* ------------------------------------------------------------------------------------------ GGUF */

static uint64_t tensors_taken(const model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->gguf.n_tensors; i++) n += m->taken[i];
    return n;
}

/* 0 = found, 1 = absent and optional, -1 = absent and required (message set) */
static int gguf_lookup(model *m, const char *name, int required, const gguf_tensor **t) {
    *t = gguf_find_tensor(&m->gguf, name);
    if (*t && m->taken) m->taken[*t - m->gguf.tensors] = 1;
    if (*t) return 0;
    if (!required) return 1;
    ds_error("%s: missing tensor '%s'", m->path, name);
    return -1;
}

static int gguf_mat(model *m, const char *name, int cols, int rows, qmat *w, int required) {
    const gguf_tensor *t;
    int rc = gguf_lookup(m, name, required, &t);
    if (rc) return rc;
    const ggml_type_info *ti = ggml_type_get(t->type);
    DS_CHECK(t->n_dims == 2 && t->ne[0] == cols && t->ne[1] == rows,
             "%s: tensor '%s' has shape [%lld, %lld] (%u dims), expected [%d, %d]", m->path, name, (long long)t->ne[0],
             (long long)t->ne[1], t->n_dims, cols, rows);
    DS_CHECK(ti->to_float != NULL,
             "%s: tensor '%s' has type %s, which this build cannot decode (supported: F32 F16 BF16 Q4_0 Q4_1 Q8_0 "
             "Q4_K Q6_K)",
             m->path, name, ti->name);
    DS_CHECK(((uintptr_t)t->data % (t->type == GGML_F32 ? 4 : 2)) == 0,
             "%s: tensor '%s' data is not aligned for type %s (file alignment %u)", m->path, name, ti->name,
             m->gguf.alignment);
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = (size_t)cols / (size_t)ti->blck * (size_t)ti->size;
    w->data = t->data;
    return 0;
fail:
    return -1;
}

static int gguf_vec(model *m, const char *name, int n, float **out, int required) {
    const gguf_tensor *t;
    int rc = gguf_lookup(m, name, required, &t);
    if (rc) return rc;
    const ggml_type_info *ti = ggml_type_get(t->type);
    DS_CHECK(t->n_dims == 1 && t->ne[0] == n, "%s: tensor '%s' has %u dims and %lld elements, expected a vector of %d",
             m->path, name, t->n_dims, (long long)t->ne[0], n);
    DS_CHECK(ti->to_float != NULL, "%s: tensor '%s' has type %s, which this build cannot decode", m->path, name, ti->name);
    DS_TRYP(*out = own_floats(m, (size_t)n, name));
    if (t->type == GGML_F32) memcpy(*out, t->data, (size_t)n * 4); /* the image may be unaligned */
    else ti->to_float(t->data, *out, n);
    return 0;
fail:
    return -1;
}

/* An integer hyperparameter "<arch>.<key>"; def < 0 means required. */
static int hp_int(model *m, const char *arch, const char *key, int64_t def, int64_t hi, int *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    const gguf_value *v = gguf_get(&m->gguf, full);
    if (v && v->type == GGUF_ARRAY) {
        ds_error("%s: '%s' is a per-layer array, which this runtime does not support", m->path, full);
        return -1;
    }
    int64_t x;
    int rc = gguf_get_int(&m->gguf, full, 0, hi, &x);
    if (rc < 0) return -1;
    if (rc == 1) {
        if (def < 0) {
            ds_error("%s: missing metadata key '%s'", m->path, full);
            return -1;
        }
        x = def;
    }
    *out = (int)x;
    return 0;
}

static int hp_float(model *m, const char *arch, const char *key, double def, float *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    double x;
    int rc = gguf_get_float(&m->gguf, full, &x);
    if (rc < 0) return -1;
    if (rc == 1 && isnan(def)) {
        ds_error("%s: missing metadata key '%s'", m->path, full);
        return -1;
    }
    *out = (float)(rc == 1 ? def : x);
    return 0;
}

int model_load_gguf(model *m, const char *path) {
    memset(m, 0, sizeof *m);
    DS_TRYP(m->path = ds_strndup(path, strlen(path), "path"));
    DS_TRY(gguf_open(&m->gguf, path));
    DS_TRYP(m->taken = ds_calloc(m->gguf.n_tensors ? m->gguf.n_tensors : 1, 1, "tensor flags"));
    model_config *c = &m->cfg;
    const char *as;
    uint64_t al;
    int rc = gguf_get_str(&m->gguf, "general.architecture", &as, &al);
    DS_TRY(rc < 0 ? -1 : 0);
    DS_CHECK(rc == 0, "%s: missing metadata key 'general.architecture'", path);
    char arch[32] = {0};
    DS_CHECK(al < sizeof arch, "%s: architecture name too long", path);
    memcpy(arch, as, al);
    if (strcmp(arch, "llama") == 0) c->arch = ARCH_LLAMA;
    else if (strcmp(arch, "qwen3") == 0) c->arch = ARCH_QWEN3;
    else if (strcmp(arch, "qwen2") == 0) c->arch = ARCH_QWEN2;
    else DS_CHECK(0, "%s: architecture '%s' is not supported (supported: llama, qwen2, qwen3)", path, arch);

    DS_TRY(hp_int(m, arch, "embedding_length", -1, 65536, &c->dim));
    DS_TRY(hp_int(m, arch, "block_count", -1, 512, &c->n_layers));
    DS_TRY(hp_int(m, arch, "attention.head_count", -1, 1024, &c->n_heads));
    DS_TRY(hp_int(m, arch, "attention.head_count_kv", c->n_heads, 1024, &c->n_kv_heads));
    DS_TRY(hp_int(m, arch, "feed_forward_length", -1, 1 << 20, &c->hidden_dim));
    /* the context and the norm's epsilon have no default, as in llama.cpp: a guessed epsilon moves every
     * logit of a file that lacks it, silently (Qwen2's is 1e-6, Llama's 1e-5) */
    DS_TRY(hp_int(m, arch, "context_length", -1, 1 << 24, &c->max_seq));
    DS_CHECK(c->n_heads > 0 && c->dim % c->n_heads == 0, "%s: hidden size %d is not a multiple of the head count %d",
             path, c->dim, c->n_heads);
    DS_TRY(hp_int(m, arch, "attention.key_length", c->dim / c->n_heads, 1024, &c->head_dim));
    int vlen, rope_dims;
    DS_TRY(hp_int(m, arch, "attention.value_length", c->head_dim, 1024, &vlen));
    DS_CHECK(vlen == c->head_dim, "%s: value head size %d differs from key head size %d (unsupported)", path, vlen,
             c->head_dim);
    DS_TRY(hp_float(m, arch, "attention.layer_norm_rms_epsilon", NAN, &c->norm_eps));
    DS_TRY(hp_float(m, arch, "rope.freq_base", 10000.0, &c->rope_theta));
    DS_TRY(hp_int(m, arch, "rope.dimension_count", c->head_dim, 1024, &rope_dims));
    DS_CHECK(rope_dims == c->head_dim, "%s: partial rotary embedding (%d of %d dims) is not supported", path, rope_dims,
             c->head_dim);
    c->rope_scale = 1.0f;
    {
        char key[128];
        const char *st;
        uint64_t sl;
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        int r = gguf_get_str(&m->gguf, key, &st, &sl);
        DS_TRY(r < 0 ? -1 : 0);
        if (r == 0 && !(sl == 4 && memcmp(st, "none", 4) == 0)) {
            DS_CHECK(sl == 6 && memcmp(st, "linear", 6) == 0, "%s: RoPE scaling '%.*s' is not supported (none, linear)",
                     path, (int)DS_MIN(sl, 32), st);
            DS_TRY(hp_float(m, arch, "rope.scaling.factor", 1.0, &c->rope_scale));
        }
    }
    c->rope_neox = c->arch != ARCH_LLAMA; /* llama.cpp: LLAMA uses NORM rope, QWEN2 and QWEN3 NEOX */
    const gguf_tensor *emb = gguf_find_tensor(&m->gguf, "token_embd.weight");
    DS_CHECK(emb != NULL, "%s: missing tensor 'token_embd.weight'", path);
    DS_CHECK(emb->n_dims == 2 && emb->ne[1] > 0 && emb->ne[1] <= (1 << 22), "%s: token_embd.weight has a bad shape", path);
    c->vocab_size = (int)emb->ne[1];
    DS_TRY(check_config(c, path));

    DS_TRY(gguf_mat(m, "token_embd.weight", c->dim, c->vocab_size, &m->tok_embd, 1));
    rc = gguf_mat(m, "output.weight", c->dim, c->vocab_size, &m->output, 0);
    DS_TRY(rc < 0 ? -1 : 0);
    c->tied = rc == 1;
    if (c->tied) m->output = m->tok_embd;
    DS_TRY(gguf_vec(m, "output_norm.weight", c->dim, &m->out_norm, 1));
    DS_TRY(gguf_vec(m, "rope_freqs.weight", c->head_dim / 2, &m->rope_freqs, 0) < 0 ? -1 : 0);

    DS_TRYP(m->layers = ds_calloc((size_t)c->n_layers, sizeof(layer_weights), "layers"));
    int q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        layer_weights *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s.weight", l, s), n)
        DS_TRY(gguf_vec(m, NAME("attn_norm"), c->dim, &L->attn_norm, 1));
        DS_TRY(gguf_vec(m, NAME("ffn_norm"), c->dim, &L->ffn_norm, 1));
        DS_TRY(gguf_mat(m, NAME("attn_q"), c->dim, q, &L->wq, 1));
        DS_TRY(gguf_mat(m, NAME("attn_k"), c->dim, kv, &L->wk, 1));
        DS_TRY(gguf_mat(m, NAME("attn_v"), c->dim, kv, &L->wv, 1));
        DS_TRY(gguf_mat(m, NAME("attn_output"), q, c->dim, &L->wo, 1));
        DS_TRY(gguf_mat(m, NAME("ffn_gate"), c->dim, c->hidden_dim, &L->w_gate, 1));
        DS_TRY(gguf_mat(m, NAME("ffn_up"), c->dim, c->hidden_dim, &L->w_up, 1));
        DS_TRY(gguf_mat(m, NAME("ffn_down"), c->hidden_dim, c->dim, &L->w_down, 1));
        if (c->arch == ARCH_QWEN3) {
            DS_TRY(gguf_vec(m, NAME("attn_q_norm"), c->head_dim, &L->q_norm, 1));
            DS_TRY(gguf_vec(m, NAME("attn_k_norm"), c->head_dim, &L->k_norm, 1));
        }
#undef NAME
#define BIAS(s) (snprintf(n, sizeof n, "blk.%d.%s.bias", l, s), n)
        if (c->arch == ARCH_QWEN2) {
            DS_TRY(gguf_vec(m, BIAS("attn_q"), q, &L->bq, 1));
            DS_TRY(gguf_vec(m, BIAS("attn_k"), kv, &L->bk, 1));
            DS_TRY(gguf_vec(m, BIAS("attn_v"), kv, &L->bv, 1));
        }
#undef BIAS
    }
    /* a tensor nobody reads is a part of the model this runtime would leave out (a bias, a layer past
     * block_count, an expert): refused as llama.cpp refuses it ("wrong number of tensors") */
    for (uint64_t i = 0; i < m->gguf.n_tensors; i++)
        DS_CHECK(m->taken[i], "%s: tensor '%s' is not part of a %s model as this runtime runs it (%llu of %llu tensors "
                 "unread): it would be left out of the forward", path, m->gguf.tensors[i].name, arch,
                 (unsigned long long)(m->gguf.n_tensors - tensors_taken(m)), (unsigned long long)m->gguf.n_tensors);
    free(m->taken);
    m->taken = NULL;
    set_fingerprint(m, m->gguf.image, (size_t)m->gguf.data_offset, m->gguf.size);
    m->format = 0;
    return 0;
fail:
    ds_error_prefix("cannot load model");
    model_free(m);
    return -1;
}

/* ----------------------------------------------------------------------------- safetensors + HF */

static int js_int(const cJSON *root, const char *key, int def, int *out, const char *path) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j || cJSON_IsNull(j)) {
        if (def < 0) {
            ds_error("%s: config.json has no '%s'", path, key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!jcfg_integral(j, 0, INT_MAX)) {
        ds_error("%s: config.json '%s' is not a non-negative integer", path, key);
        return -1;
    }
    *out = (int)j->valuedouble;
    return 0;
}

static int js_float(const cJSON *root, const char *key, double def, float *out, const char *path) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j || cJSON_IsNull(j)) {
        *out = (float)def;
        return 0;
    }
    if (!cJSON_IsNumber(j)) {
        ds_error("%s: config.json '%s' is not a number", path, key);
        return -1;
    }
    *out = (float)j->valuedouble;
    return 0;
}

static int st_mat(model *m, const char *name, int rows, int cols, qmat *w, int required) {
    const st_tensor *t = st_find(&m->st, name);
    if (t && m->taken) m->taken[t - m->st.tensors] = 1;
    if (!t) {
        if (!required) return 1;
        ds_error("%s: missing tensor '%s'", m->st.name, name);
        return -1;
    }
    DS_CHECK(t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols,
             "%s: tensor '%s' has shape [%lld, %lld] (%d dims), expected [%d, %d]", m->st.name, name,
             (long long)t->shape[0], (long long)(t->n_dims > 1 ? t->shape[1] : 0), t->n_dims, rows, cols);
    float *p;
    DS_TRYP(p = own_floats(m, (size_t)rows * (size_t)cols, name));
    DS_TRY(st_to_f32(&m->st, t, p));
    w->type = GGML_F32;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = (size_t)cols * 4;
    w->data = p;
    return 0;
fail:
    return -1;
}

static int st_vec(model *m, const char *name, int n, float **out) {
    const st_tensor *t = st_find(&m->st, name);
    if (t && m->taken) m->taken[t - m->st.tensors] = 1;
    DS_CHECK(t != NULL, "%s: missing tensor '%s'", m->st.name, name);
    DS_CHECK(t->n_dims == 1 && t->shape[0] == n, "%s: tensor '%s' is not a vector of %d", m->st.name, name, n);
    DS_TRYP(*out = own_floats(m, (size_t)n, name));
    DS_TRY(st_to_f32(&m->st, t, *out));
    return 0;
fail:
    return -1;
}

int model_load_safetensors(model *m, const char *dir) {
    memset(m, 0, sizeof *m);
    char path[4096];
    char *text = NULL;
    cJSON *cfg = NULL;
    DS_TRYP(m->path = ds_strndup(dir, strlen(dir), "path"));
    DS_CHECK(snprintf(path, sizeof path, "%s/config.json", dir) < (int)sizeof path, "%s: path too long", dir);
    size_t tl;
    DS_TRY(ds_read_file(path, &text, &tl));
    size_t stop;
    int why;
    cfg = ds_json_parse(text, tl, &stop, &why);
    DS_CHECK(cfg || why == DS_JSON_BAD, "%s: %s at byte %zu", path, ds_json_why(why), stop);
    DS_CHECK(cfg && cJSON_IsObject(cfg), "%s: not a valid JSON object", path);
    model_config *c = &m->cfg;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
    DS_CHECK(cJSON_IsString(mt), "%s: no 'model_type' string", path);
    if (strcmp(mt->valuestring, "llama") == 0) c->arch = ARCH_LLAMA;
    else if (strcmp(mt->valuestring, "qwen3") == 0) c->arch = ARCH_QWEN3;
    else if (strcmp(mt->valuestring, "qwen2") == 0) c->arch = ARCH_QWEN2; /* q/k/v biases always, no attention_bias key */
    else DS_CHECK(0, "%s: model_type '%s' is not supported (supported: llama, qwen2, qwen3)", path, mt->valuestring);
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
    DS_CHECK(!act || (cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0),
             "%s: hidden_act must be 'silu'", path);
    DS_CHECK(!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "attention_bias")) &&
                 !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "mlp_bias")),
             "%s: attention_bias / mlp_bias are not supported", path);
    DS_TRY(js_int(cfg, "hidden_size", -1, &c->dim, path));
    DS_TRY(js_int(cfg, "num_hidden_layers", -1, &c->n_layers, path));
    DS_TRY(js_int(cfg, "num_attention_heads", -1, &c->n_heads, path));
    DS_TRY(js_int(cfg, "num_key_value_heads", c->n_heads, &c->n_kv_heads, path));
    DS_CHECK(c->n_heads > 0, "%s: num_attention_heads must be positive", path);
    DS_TRY(js_int(cfg, "head_dim", c->dim / c->n_heads, &c->head_dim, path));
    DS_TRY(js_int(cfg, "intermediate_size", -1, &c->hidden_dim, path));
    DS_TRY(js_int(cfg, "vocab_size", -1, &c->vocab_size, path));
    DS_TRY(js_int(cfg, "max_position_embeddings", 2048, &c->max_seq, path));
    DS_TRY(js_float(cfg, "rms_norm_eps", 1e-6, &c->norm_eps, path));
    DS_TRY(js_float(cfg, "rope_theta", 10000.0, &c->rope_theta, path));
    c->rope_scale = 1.0f;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    if (rs && !cJSON_IsNull(rs)) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!ty) ty = cJSON_GetObjectItemCaseSensitive(rs, "type");
        DS_CHECK(cJSON_IsString(ty) && (strcmp(ty->valuestring, "linear") == 0 || strcmp(ty->valuestring, "default") == 0),
                 "%s: rope_scaling type is not supported (linear only)", path);
        if (strcmp(ty->valuestring, "linear") == 0) DS_TRY(js_float(rs, "factor", 1.0, &c->rope_scale, path));
    }
    c->tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings"));
    c->rope_neox = 1; /* HF checkpoints keep q/k in the rotate-half layout */
    DS_TRY(check_config(c, path));

    DS_CHECK(snprintf(path, sizeof path, "%s/model.safetensors", dir) < (int)sizeof path, "%s: path too long", dir);
    DS_TRY(st_open(&m->st, path));
    DS_TRYP(m->taken = ds_calloc(m->st.n_tensors ? (size_t)m->st.n_tensors : 1, 1, "tensor flags"));
    DS_TRY(st_mat(m, "model.embed_tokens.weight", c->vocab_size, c->dim, &m->tok_embd, 1));
    if (!c->tied) DS_TRY(st_mat(m, "lm_head.weight", c->vocab_size, c->dim, &m->output, 1));
    else m->output = m->tok_embd;
    DS_TRY(st_vec(m, "model.norm.weight", c->dim, &m->out_norm));
    DS_TRYP(m->layers = ds_calloc((size_t)c->n_layers, sizeof(layer_weights), "layers"));
    int q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        layer_weights *L = &m->layers[l];
        char n[128];
#define NAME(s) (snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, s), n)
        DS_TRY(st_vec(m, NAME("input_layernorm"), c->dim, &L->attn_norm));
        DS_TRY(st_vec(m, NAME("post_attention_layernorm"), c->dim, &L->ffn_norm));
        DS_TRY(st_mat(m, NAME("self_attn.q_proj"), q, c->dim, &L->wq, 1));
        DS_TRY(st_mat(m, NAME("self_attn.k_proj"), kv, c->dim, &L->wk, 1));
        DS_TRY(st_mat(m, NAME("self_attn.v_proj"), kv, c->dim, &L->wv, 1));
        DS_TRY(st_mat(m, NAME("self_attn.o_proj"), c->dim, q, &L->wo, 1));
        DS_TRY(st_mat(m, NAME("mlp.gate_proj"), c->hidden_dim, c->dim, &L->w_gate, 1));
        DS_TRY(st_mat(m, NAME("mlp.up_proj"), c->hidden_dim, c->dim, &L->w_up, 1));
        DS_TRY(st_mat(m, NAME("mlp.down_proj"), c->dim, c->hidden_dim, &L->w_down, 1));
        if (c->arch == ARCH_QWEN3) {
            DS_TRY(st_vec(m, NAME("self_attn.q_norm"), c->head_dim, &L->q_norm));
            DS_TRY(st_vec(m, NAME("self_attn.k_norm"), c->head_dim, &L->k_norm));
        }
#undef NAME
#define BIAS(s) (snprintf(n, sizeof n, "model.layers.%d.%s.bias", l, s), n)
        if (c->arch == ARCH_QWEN2) {
            DS_TRY(st_vec(m, BIAS("self_attn.q_proj"), q, &L->bq));
            DS_TRY(st_vec(m, BIAS("self_attn.k_proj"), kv, &L->bk));
            DS_TRY(st_vec(m, BIAS("self_attn.v_proj"), kv, &L->bv));
        }
#undef BIAS
    }
    /* a weight nobody reads would be left out of the forward (a layer past num_hidden_layers, a bias):
     * refused; what transformers itself skips is not: rotary_emb.inv_freq buffers, a tied lm_head */
    for (int i = 0; i < m->st.n_tensors; i++) {
        const char *tn = m->st.tensors[i].name;
        size_t tl2 = strlen(tn);
        int skipped = (tl2 >= 20 && strcmp(tn + tl2 - 20, ".rotary_emb.inv_freq") == 0) ||
                      (c->tied && strcmp(tn, "lm_head.weight") == 0);
        DS_CHECK(m->taken[i] || skipped, "%s: tensor '%s' is not part of a %s model as this runtime runs it: it would be "
                 "left out of the forward", path, tn, mt->valuestring);
    }
    free(m->taken);
    m->taken = NULL;
    {
        uint64_t hl;
        memcpy(&hl, m->st.image, 8);
        set_fingerprint(m, m->st.image, (size_t)(8 + hl), m->st.size);
    }
    m->format = 1;
    free(text);
    cJSON_Delete(cfg);
    return 0;
fail:
    ds_error_prefix("cannot load model");
    free(text);
    cJSON_Delete(cfg);
    model_free(m);
    return -1;
}

/* Every weight finite, checked once at load: a model with a NaN or Inf anywhere produces rows of
 * NaN logits, which the sampler would turn into token 0 without a word. Dequantizing each row
 * once costs a fraction of a second on a 135M model. */
static int vec_finite(const float *v, int n, const char *path, const char *what, int layer) {
    for (int i = 0; v && i < n; i++)
        if (!isfinite(v[i])) {
            if (layer >= 0) ds_error("%s: weight %s of layer %d is not finite (%g at index %d)", path, what, layer, (double)v[i], i);
            else ds_error("%s: weight %s is not finite (%g at index %d)", path, what, (double)v[i], i);
            return -1;
        }
    return 0;
}

static int qmat_finite(const qmat *w, float *row, const char *path, const char *what, int layer) {
    for (int r = 0; r < w->rows; r++) {
        qmat_row_f32(w, r, row);
        for (int i = 0; i < w->cols; i++)
            if (!isfinite(row[i])) {
                if (layer >= 0)
                    ds_error("%s: weight %s of layer %d is not finite (%g at row %d, column %d)", path, what, layer,
                             (double)row[i], r, i);
                else ds_error("%s: weight %s is not finite (%g at row %d, column %d)", path, what, (double)row[i], r, i);
                return -1;
            }
    }
    return 0;
}

/* qmat_finite, then the file's pages it read go back (the scan reads every weight once; leaving them
 * resident held the whole file in the process before a backend made its own copies) */
static int mat_finite(const model *m, const qmat *w, float *row, const char *p, const char *name, int l) {
    if (qmat_finite(w, row, p, name, l)) return -1;
    (void)model_release_mapped(m, w->data, (size_t)w->rows * w->row_bytes);
    return 0;
}

int model_check_finite(const model *m) {
    const model_config *c = &m->cfg;
    int width = DS_MAX(DS_MAX(c->dim, c->hidden_dim), c->n_heads * c->head_dim);
    float *row = ds_malloc(sizeof(float) * (size_t)width, "weight check");
    if (!row) return -1;
    int rc = -1;
    const char *p = m->path ? m->path : "model";
    if (mat_finite(m, &m->tok_embd, row, p, "token_embd", -1) || vec_finite(m->out_norm, c->dim, p, "output_norm", -1) ||
        (!c->tied && mat_finite(m, &m->output, row, p, "output", -1)))
        goto done;
    for (int l = 0; l < c->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        const qmat *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        static const char *names[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
        if (vec_finite(L->attn_norm, c->dim, p, "attn_norm", l) || vec_finite(L->ffn_norm, c->dim, p, "ffn_norm", l) ||
            vec_finite(L->q_norm, c->head_dim, p, "attn_q_norm", l) || vec_finite(L->k_norm, c->head_dim, p, "attn_k_norm", l) ||
            vec_finite(L->bq, c->n_heads * c->head_dim, p, "attn_q.bias", l) ||
            vec_finite(L->bk, c->n_kv_heads * c->head_dim, p, "attn_k.bias", l) ||
            vec_finite(L->bv, c->n_kv_heads * c->head_dim, p, "attn_v.bias", l))
            goto done;
        for (int i = 0; i < 7; i++)
            if (mat_finite(m, ws[i], row, p, names[i], l)) goto done;
    }
    rc = 0;
done:
    free(row);
    return rc;
}

int model_load(model *m, const char *name_or_path) {
    char path[4096];
    const model_name *named;
    if (model_resolve(name_or_path, path, sizeof path, &named)) {
        memset(m, 0, sizeof *m);
        return -1;
    }
    if (named) fprintf(stderr, "model %s: %s\n", named->name, path);
    int rc = model_load_any(m, path);
    if (rc == 0 && model_check_finite(m)) {
        model_free(m);
        return -1;
    }
    return rc;
}

static int model_load_any(model *m, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        memset(m, 0, sizeof *m);
        ds_error("model file not found: %s%s%s%s", path, strchr(path, '/') ? "" : " (not a file, nor a model name: ",
                 strchr(path, '/') ? "" : model_names(), strchr(path, '/') ? "" : ")");
        return -1;
    }
    if (S_ISDIR(st.st_mode)) return model_load_safetensors(m, path);
    size_t n = strlen(path);
    if (n > 12 && strcmp(path + n - 12, ".safetensors") == 0) {
        char dir[4096];
        const char *slash = strrchr(path, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
        return model_load_safetensors(m, dir);
    }
    return model_load_gguf(m, path);
}

size_t model_release_mapped(const model *m, const void *p, size_t n) {
    if (m->format == 0) return m->gguf.mapped ? ds_release_mapped(m->gguf.image, m->gguf.size, p, n) : 0;
    return m->st.mapped ? ds_release_mapped(m->st.image, m->st.size, p, n) : 0;
}

void model_free(model *m) {
    free(m->taken);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    gguf_close(&m->gguf);
    st_close(&m->st);
    free(m->path);
    memset(m, 0, sizeof *m);
}

uint64_t model_n_params(const model *m) {
    const model_config *c = &m->cfg;
    uint64_t q = (uint64_t)c->n_heads * c->head_dim, kv = (uint64_t)c->n_kv_heads * c->head_dim;
    uint64_t per = 2 * (uint64_t)c->dim + 2 * q * c->dim + 2 * kv * c->dim + 3 * (uint64_t)c->dim * c->hidden_dim;
    if (c->arch == ARCH_QWEN3) per += 2 * (uint64_t)c->head_dim;
    if (c->arch == ARCH_QWEN2) per += q + 2 * kv;
    uint64_t n = per * (uint64_t)c->n_layers + (uint64_t)c->vocab_size * c->dim + c->dim;
    if (!c->tied) n += (uint64_t)c->vocab_size * c->dim;
    return n;
}
