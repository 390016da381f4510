/* synthetic.c — timing models at the paper's scale whose weights exist only on the backend: the
 * shapes of real 1-4 B Llama / Qwen3 models, random valid blocks made on the device
 * (backend->fill_random). For throughput, never for acceptance: their outputs mean nothing. */
#include "synthetic.h"

#include <stdio.h>
#include <string.h>

#include "base/common.h"

typedef struct {
    const char *name;
    model_arch arch;
    int dim, n_layers, n_heads, n_kv_heads, head_dim, hidden, vocab;
    float theta;
} shape;

static const shape SHAPES[] = {
    {"smollm2-135m", ARCH_LLAMA, 576, 30, 9, 3, 64, 1536, 49152, 100000.0f},
    {"llama-1b", ARCH_LLAMA, 2048, 16, 32, 8, 64, 8192, 128256, 500000.0f},   /* Llama-3.2-1B */
    {"llama-3b", ARCH_LLAMA, 3072, 28, 24, 8, 128, 8192, 128256, 500000.0f},  /* Llama-3.2-3B */
    {"qwen3-4b", ARCH_QWEN3, 2560, 36, 32, 8, 128, 9728, 151936, 1000000.0f}, /* Qwen3-4B */
    /* the real pair's target (its Q/K/V biases left out: 1,792 additions a token) */
    {"qwen2.5-1.5b", ARCH_QWEN2, 1536, 28, 12, 2, 128, 8960, 151936, 1000000.0f}, /* Qwen2.5-Coder-1.5B */
};
#define N_SHAPES (sizeof SHAPES / sizeof *SHAPES)

const char *synthetic_names(void) { return "smollm2-135m, llama-1b, llama-3b, qwen3-4b, qwen2.5-1.5b"; }

static void *own(model *m, size_t bytes, const char *what) {
    void *p = ds_calloc(1, bytes, what);
    if (!p) return NULL;
    void **n = ds_realloc(m->owned, sizeof(void *) * (size_t)(m->n_owned + 1), "model buffers");
    if (!n) {
        free(p);
        return NULL;
    }
    m->owned = n;
    m->owned[m->n_owned++] = p;
    return p;
}

/* a matrix whose host data is a one-byte stand-in: its address is the backend's key */
static int mat(model *m, qmat *w, uint32_t type, int rows, int cols) {
    const ggml_type_info *ti = ggml_type_get(type);
    DS_CHECK(ti && ti->blck && cols % ti->blck == 0, "synthetic: %d columns do not fill %s blocks", cols,
             ggml_type_name(type));
    w->type = type, w->rows = rows, w->cols = cols;
    w->row_bytes = (size_t)(cols / ti->blck) * (size_t)ti->size;
    DS_TRYP(w->data = own(m, 1, "synthetic weight key"));
    return 0;
fail:
    return -1;
}

int model_synthetic(model *m, const char *name, uint32_t type, backend *be, uint64_t seed) {
    memset(m, 0, sizeof *m);
    const shape *s = NULL;
    for (size_t i = 0; i < N_SHAPES; i++)
        if (strcmp(SHAPES[i].name, name) == 0) s = &SHAPES[i];
    DS_CHECK(s, "unknown synthetic model '%s' (known: %s)", name, synthetic_names());
    DS_CHECK(be->fill_random, "synthetic models live on the backend's memory: backend '%s' cannot make them "
             "(use --backend cuda)", be->name);
    model_config *c = &m->cfg;
    c->arch = s->arch, c->dim = s->dim, c->n_layers = s->n_layers, c->n_heads = s->n_heads;
    c->n_kv_heads = s->n_kv_heads, c->head_dim = s->head_dim, c->hidden_dim = s->hidden, c->vocab_size = s->vocab;
    c->max_seq = 8192, c->norm_eps = 1e-5f, c->rope_theta = s->theta, c->rope_scale = 1, c->rope_neox = 1, c->tied = 1;
    DS_TRYP(m->path = ds_calloc(1, strlen(name) + 1, "model name"));
    memcpy(m->path, name, strlen(name));
    snprintf(m->fingerprint, sizeof m->fingerprint, "synthetic");
    float *ones_dim, *ones_hd;
    DS_TRYP(ones_dim = own(m, sizeof(float) * (size_t)c->dim, "norm"));
    DS_TRYP(ones_hd = own(m, sizeof(float) * (size_t)c->head_dim, "norm"));
    for (int i = 0; i < c->dim; i++) ones_dim[i] = 1.0f;
    for (int i = 0; i < c->head_dim; i++) ones_hd[i] = 1.0f;
    DS_TRYP(m->layers = ds_calloc((size_t)c->n_layers, sizeof *m->layers, "layers"));
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    DS_TRY(mat(m, &m->tok_embd, type, c->vocab_size, c->dim));
    m->output = m->tok_embd;
    m->out_norm = ones_dim;
    DS_TRY(be->fill_random(be, &m->tok_embd, seed));
    for (int l = 0; l < c->n_layers; l++) {
        layer_weights *L = &m->layers[l];
        L->attn_norm = L->ffn_norm = ones_dim;
        if (c->arch == ARCH_QWEN3) L->q_norm = L->k_norm = ones_hd;
        DS_TRY(mat(m, &L->wq, type, qd, c->dim));
        DS_TRY(mat(m, &L->wk, type, kvd, c->dim));
        DS_TRY(mat(m, &L->wv, type, kvd, c->dim));
        DS_TRY(mat(m, &L->wo, type, c->dim, qd));
        DS_TRY(mat(m, &L->w_gate, type, c->hidden_dim, c->dim));
        DS_TRY(mat(m, &L->w_up, type, c->hidden_dim, c->dim));
        DS_TRY(mat(m, &L->w_down, type, c->dim, c->hidden_dim));
        qmat *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) DS_TRY(be->fill_random(be, ws[i], seed + 1 + 7 * (uint64_t)l + (uint64_t)i));
    }
    DS_TRY(be->prepare(be, m)); /* the norms (the matrices are there already) */
    return 0;
fail:
    model_free(m);
    return -1;
}
