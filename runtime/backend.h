/* backend.h — the ops table every compute backend implements (CPU now; CUDA mirrors it).
 *
 * All float pointers handed to an op live in that backend's memory (host memory for the CPU
 * backend, device memory for CUDA); index arrays (tokens, positions, sequence ids) are host arrays
 * the backend copies as it needs. The transformer forward in forward.c is written once against this
 * table. Shapes are given in comments as [rows][cols], row-major. */
#ifndef DS_BACKEND_H
#define DS_BACKEND_H

#include <stddef.h>

#include "model.h"

/* Per-request KV cache: K and V for every layer at positions 0..len-1. Rollback is crop: set len. */
typedef struct kv_cache {
    int n_layers, kv_dim;
    int len, cap;
    float **k, **v; /* [n_layers] -> [cap][kv_dim], backend memory */
} kv_cache;

/* Where each token of a flattened varlen batch goes: its request and its absolute position. A token
 * attends to positions 0..pos of its own request's cache (causal inside the new tokens too). */
typedef struct {
    int T;
    const int *seq;      /* [T] */
    const int *pos;      /* [T] */
    kv_cache *const *kv; /* [n_seq] */
} attn_batch;

typedef struct {
    int head_dim;
    int neox;            /* rotate halves instead of adjacent pairs */
    const float *cos, *sin; /* [T][head_dim/2] host tables computed by the forward */
} rope_tables;

typedef struct backend backend;
struct backend {
    const char *name;
    int n_threads;
    int gemm_min_T;      /* batches of at least this many rows use BLAS GEMM on fp32 weights */
    void *ctx;

    /* make the model's weights ready for this backend's kernels (repacking, uploads) */
    int (*prepare)(backend *, model *);
    void *(*alloc)(backend *, size_t bytes);                 /* NULL + message on failure */
    void (*release)(backend *, void *p);
    void (*to_host)(backend *, void *dst, const void *src, size_t bytes);
    void (*to_device)(backend *, void *dst, const void *src, size_t bytes);
    void (*copy)(backend *, void *dst, const void *src, size_t bytes);

    /* out[T][dim] = rows tok[t] of the embedding table */
    void (*embed)(backend *, float *out, const qmat *emb, const int *tok, int T);
    /* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for rows r < n_rows of width C */
    void (*rmsnorm)(backend *, float *out, const float *x, const float *w, int n_rows, int C, float eps);
    /* out[i][T][W[i].rows] = x[T][cols] . W[i]^T for n matrices sharing the input */
    int (*matmul)(backend *, int n, float *const *out, const qmat *const *W, const float *x, int T);
    /* rotate x[T][n_heads][head_dim] in place */
    void (*rope)(backend *, float *x, int T, int n_heads, const rope_tables *);
    /* write k, v [T][kv_dim] of one layer into each token's cache slot */
    void (*kv_write)(backend *, const attn_batch *, int layer, const float *k, const float *v);
    /* out[T][n_heads*hd] = softmax(q k^T / sqrt(hd)) v over each token's visible cache */
    void (*attention)(backend *, float *out, const float *q, const attn_batch *, int layer, int n_heads,
                      int n_kv_heads, int head_dim);
    /* out[i] = silu(gate[i]) * up[i] */
    void (*swiglu)(backend *, float *out, const float *gate, const float *up, size_t n);
    /* x[i] += y[i] */
    void (*add)(backend *, float *x, const float *y, size_t n);
    void (*destroy)(backend *);
};

/* CPU backend: OpenMP threads over rows; n_threads <= 0 means all cores. */
backend *backend_cpu_new(int n_threads);
void backend_free(backend *be);

/* KV caches live in backend memory; reserve grows capacity (keeping contents). */
kv_cache *kv_cache_new(backend *be, const model_config *c, int cap);
int kv_cache_reserve(backend *be, kv_cache *kv, int cap);
void kv_cache_crop(kv_cache *kv, int len); /* rollback: positions >= len are forgotten */
void kv_cache_free(backend *be, kv_cache *kv);

#endif
