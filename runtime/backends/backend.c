/* backend.c — the backend registry, KV caches and RoPE tables, written once against the ops table. */
#include "backend.h"

#include <math.h>
#include <string.h>

#include "../base/common.h"

typedef struct {
    const char *name;
    backend *(*create)(const backend_opts *);
} backend_entry;

/* a new backend is one file plus one line here */
static const backend_entry BACKENDS[] = {
    {"cpu", backend_cpu_new},
#ifdef DS_CUDA
    {"cuda", backend_cuda_new},
#endif
};
#define N_BACKENDS (sizeof BACKENDS / sizeof *BACKENDS)

const char *backend_names(void) {
    static char buf[128];
    buf[0] = 0;
    for (size_t i = 0; i < N_BACKENDS; i++)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? ", " : "", BACKENDS[i].name);
    return buf;
}

backend *backend_new(const backend_opts *o) {
    backend_opts def = {0};
    if (!o) o = &def;
    const char *name = o->name && *o->name ? o->name : "cpu";
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (strcmp(BACKENDS[i].name, name) == 0) return BACKENDS[i].create(o);
    ds_error("unknown backend '%s' (this build has: %s)", name, backend_names());
    return NULL;
}

void backend_contract(const backend *be, char *out, size_t n) {
    if (!be->device && !be->exact) snprintf(out, n, "%s int8 c%d", be->name, DS_CONTRACT_VERSION);
    else snprintf(out, n, "%s %s c%d", be->name, be->kernels, DS_CONTRACT_VERSION);
}

void backend_free(backend *be) {
    if (be) be->destroy(be);
}

void rope_tables_fill(float *cos_t, float *sin_t, const int *pos, int T, int head_dim, double theta, double scale,
                      const float *freqs) {
    int half = head_dim / 2;
    double inv[512];
    for (int i = 0; i < half && i < 512; i++) {
        inv[i] = pow(theta, -2.0 * i / head_dim);
        if (freqs) inv[i] /= freqs[i];
    }
    for (int t = 0; t < T; t++) {
        double p = (double)pos[t] / scale;
        for (int i = 0; i < half; i++) {
            cos_t[(size_t)t * half + i] = (float)cos(p * inv[i]);
            sin_t[(size_t)t * half + i] = (float)sin(p * inv[i]);
        }
    }
}

/* -------------------------------------------------------------------------------- KV caches */

static kv_cache *kv_cache_make(backend *be, int n_layers, int n_heads, int head_dim, int cap, int elem) {
    kv_cache *kv = ds_calloc(1, sizeof *kv, "kv cache");
    if (!kv) return NULL;
    kv->n_layers = n_layers;
    kv->n_heads = n_heads;
    kv->head_dim = head_dim;
    kv->kv_dim = n_heads * head_dim;
    kv->head_major = be->kv_head_major;
    kv->elem = elem;
    kv->k = ds_calloc((size_t)n_layers, sizeof(float *), "kv cache");
    kv->v = ds_calloc((size_t)n_layers, sizeof(float *), "kv cache");
    if (!kv->k || !kv->v || kv_cache_reserve(be, kv, cap > 0 ? cap : 64)) {
        kv_cache_free(be, kv);
        return NULL;
    }
    return kv;
}

kv_cache *kv_cache_new(backend *be, const model_config *c, int cap) {
    return kv_cache_make(be, c->n_layers, c->n_kv_heads, c->head_dim, cap, be->kv_bf16 ? 2 : 4);
}

kv_cache *kv_cache_new_dims(backend *be, int n_layers, int n_heads, int head_dim, int cap) {
    return kv_cache_make(be, n_layers, n_heads, head_dim, cap, 4);
}

int kv_cache_reserve(backend *be, kv_cache *kv, int cap) {
    if (cap <= kv->cap) return 0;
    size_t row = (size_t)kv->elem * (size_t)kv->kv_dim;
    for (int l = 0; l < kv->n_layers; l++) {
        float *nk = be->alloc(be, row * (size_t)cap), *nv = be->alloc(be, row * (size_t)cap);
        if (!nk || !nv) {
            be->release(be, nk);
            be->release(be, nv);
            ds_error("out of memory growing a KV cache to %d positions", cap);
            return -1;
        }
        if (kv->k[l]) { /* the first len rows: one block, or one per head at the new capacity's offsets */
            int nh = kv->head_major ? kv->n_heads : 1;
            size_t n = kv->head_major ? (size_t)kv->elem * (size_t)kv->head_dim * (size_t)kv->len : row * (size_t)kv->len;
            for (int h = 0; h < nh; h++) {
                size_t from = kv_head(kv, h), to = (size_t)h * (size_t)kv->head_dim * (size_t)cap;
                if (be->copy(be, kv_row(kv, nk, to), kv_row(kv, kv->k[l], from), n) ||
                    be->copy(be, kv_row(kv, nv, to), kv_row(kv, kv->v[l], from), n)) {
                    be->release(be, nk);
                    be->release(be, nv);
                    return -1;
                }
            }
            be->release(be, kv->k[l]);
            be->release(be, kv->v[l]);
        }
        kv->k[l] = nk;
        kv->v[l] = nv;
    }
    kv->cap = cap;
    return 0;
}

void kv_cache_crop(kv_cache *kv, int len) {
    if (len < 0) len = 0;
    if (len < kv->len) kv->len = len;
    kv->tree = 0;
}

int kv_cache_keep(backend *be, kv_cache *kv, int base, const int *slots, int n) {
    DS_CHECK(base >= 0 && n >= 0 && base + n <= kv->len, "kv_cache_keep: %d rows after %d of a cache holding %d", n, base,
             kv->len);
    for (int i = 0; i < n; i++)
        DS_CHECK(slots[i] >= base + i && slots[i] < kv->len && (i == 0 || slots[i] > slots[i - 1]),
                 "kv_cache_keep: row %d from slot %d (base %d, %d held)", i, slots[i], base, kv->len);
    /* one head's row: head_dim elements in either layout; moved upward in order, a source never
     * below its destination, so no row is overwritten before it is read */
    size_t rb = (size_t)kv->elem * (size_t)kv->head_dim, ld = kv_ld(kv);
    for (int i = 0; i < n; i++) {
        if (slots[i] == base + i) continue;
        for (int l = 0; l < kv->n_layers; l++)
            for (int h = 0; h < kv->n_heads; h++) {
                size_t from = kv_head(kv, h) + (size_t)slots[i] * ld, to = kv_head(kv, h) + (size_t)(base + i) * ld;
                DS_TRY(be->copy(be, kv_row(kv, kv->k[l], to), kv_row(kv, kv->k[l], from), rb));
                DS_TRY(be->copy(be, kv_row(kv, kv->v[l], to), kv_row(kv, kv->v[l], from), rb));
            }
    }
    kv->len = base + n;
    kv->tree = 0;
    return 0;
fail:
    return -1;
}

void kv_cache_free(backend *be, kv_cache *kv) {
    if (!kv) return;
    for (int l = 0; l < kv->n_layers; l++) {
        if (kv->k) be->release(be, kv->k[l]);
        if (kv->v) be->release(be, kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    free(kv->tpar);
    free(kv->tdep);
    free(kv);
}
