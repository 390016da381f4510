/* backend.h — the ops table every compute backend implements (CPU now; CUDA mirrors it).
 *
 * A backend owns everything it computes with: its copies of the weights (repacked for its kernels,
 * or uploaded), its scratch, and the buffers it hands out with alloc. Callers name weights by the
 * model's host descriptors (a qmat, a norm's float vector); the backend maps each to its own copy
 * (`prepare` makes them up front for a whole model, `prepare_mats` for a drafter's matrices,
 * `forget` drops them). Activations handed to an op live in backend memory (alloc; to_device /
 * to_host move them); index arrays (tokens, positions, visibility) are host arrays. Every op
 * returns 0 or -1 with a message. forward.c and the drafters are written once against this table;
 * a new backend is one file and one line in backend.c's registry. Shapes are [rows][cols]. */
#ifndef DS_BACKEND_H
#define DS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "../model/model.h"

/* Per-request KV cache: K and V for every layer at positions 0..len-1. Rollback is crop: set len.
 * Two layouts, the backend's choice (be->kv_head_major): [cap][kv_dim] (a position's heads side by
 * side, what a GPU kernel wants), or head-major [n_heads][cap][head_dim] (a head's positions one
 * contiguous stream, what a CPU core's prefetchers want: a decode step reads them end to end).
 * kv_head() and kv_ld() locate a head's rows in either. */
typedef struct kv_cache {
    int n_layers, kv_dim, n_heads, head_dim;
    int head_major;
    int elem;       /* bytes an element: 4 (fp32), or 2 (bf16, the backend's be->kv_bf16) */
    int len, cap;
    float **k, **v; /* [n_layers] -> [cap][kv_dim] or [n_heads][cap][head_dim] elements, backend memory
                     * (bf16 caches hold uint16_t elements: index them through kv_row) */
    /* a draft tree in the cache (tree = 1): the slots from tree0 to len are its nodes, each seen only by
     * itself and its descendants; tpar[i] and tdep[i] of slot tree0 + i are its parent's slot (-1: a
     * child of the rows before tree0) and its depth (0 for those). Host arrays [tcap] that the forward
     * sets; a forward without parent_slot (fwd_batch), a crop and a keep end the tree (every row is
     * then seen by what comes after it, as before any tree). */
    int tree, tree0, tcap;
    int *tpar, *tdep;
} kv_cache;

/* offset of KV head h's row 0 in a layer's buffer, and the floats between consecutive rows */
static inline size_t kv_head(const kv_cache *kv, int h) {
    return (size_t)h * (size_t)kv->head_dim * (kv->head_major ? (size_t)kv->cap : 1);
}
static inline size_t kv_ld(const kv_cache *kv) { return (size_t)(kv->head_major ? kv->head_dim : kv->kv_dim); }
/* the address of element `at` of a layer's K or V buffer, whatever the element size */
static inline void *kv_row(const kv_cache *kv, float *buf, size_t at) { return (char *)buf + at * (size_t)kv->elem; }

/* Where each token of a flattened varlen batch goes: its request, its K/V slot in the cache (pos;
 * its RoPE position too, except in a tree) and what it sees: slots 0..pos of its own request's cache
 * (causal), or, when n_vis is given, slots 0..n_vis[t]-1 (a drafter's bidirectional block sees the
 * rows after it too). Where the request's cache holds a draft tree (kv->tree), a token sees the rows
 * before the tree and, from tree0 on, only its own ancestors' slots and its own (kv->tpar), never a
 * sibling's branch: a tree's nodes lie in slots one after another, a parent before its children. */
typedef struct {
    int T;
    const int *seq;      /* [T] */
    const int *pos;      /* [T] */
    kv_cache *const *kv; /* [n_seq] */
    const int *n_vis;    /* [T] or NULL */
} attn_batch;

typedef struct {
    int head_dim;
    int neox;               /* rotate halves instead of adjacent pairs */
    const float *cos, *sin; /* [T][head_dim/2] host tables (rope_tables_fill) */
} rope_tables;

/* cos/sin of pos[t] * freq_i, freq_i = theta^(-2i/hd) / scale (/ freqs[i] when given), in double */
void rope_tables_fill(float *cos, float *sin, const int *pos, int T, int head_dim, double theta, double scale,
                      const float *freqs);

/* How to make a backend: which one, its threads, and the numerical contract of its matmuls. */
typedef struct {
    const char *name;  /* "cpu" (default) */
    int n_threads;     /* <= 0: all cores */
    int exact;         /* 1: fp32 activations everywhere (the reference); 0: int8 activations for quantized weights */
    const char *isa;   /* CPU kernel path: NULL/"auto" = the best this CPU runs, or "scalar", "avx2", "avx512-vnni", "avx512-amx" */
} backend_opts;

typedef struct backend backend;
struct backend {
    const char *name;
    char kernels[48];    /* the kernel path and contract in use, e.g. "avx2 int8" */
    int n_threads;
    int exact;
    int gemm_min_T;      /* exact contract: batches of at least this many rows use BLAS GEMM on fp32 weights */
    int kv_head_major;   /* the KV caches it makes are head-major (kv_cache) */
    int kv_bf16;         /* ... and hold bf16 (rounded to nearest even as written) instead of fp32 */
    const char *device;  /* the accelerator it runs on (its name), NULL on the CPU */
    void *ctx;

    /* make the backend's copies of a model's weights (repacking, uploads) */
    int (*prepare)(backend *, const model *);
    /* the same for n loose matrices (a drafter's) */
    int (*prepare_mats)(backend *, const qmat *const *W, int n);
    /* drop the copies of a model's weights (before the model is freed while the backend lives on) */
    void (*forget)(backend *, const model *);
    void (*forget_mats)(backend *, const qmat *const *W, int n);
    void *(*alloc)(backend *, size_t bytes);                 /* NULL + message on failure */
    void (*release)(backend *, void *p);
    int (*to_host)(backend *, void *dst, const void *src, size_t bytes);
    int (*to_device)(backend *, void *dst, const void *src, size_t bytes);
    int (*copy)(backend *, void *dst, const void *src, size_t bytes);

    /* out[T][dim] = rows tok[t] of the embedding table */
    int (*embed)(backend *, float *out, const qmat *emb, const int *tok, int T);
    /* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for rows r < n_rows of width C */
    int (*rmsnorm)(backend *, float *out, const float *x, const float *w, int n_rows, int C, float eps);
    /* out[i][T][W[i].rows] = x[T][cols] . W[i]^T for n matrices sharing the input */
    int (*matmul)(backend *, int n, float *const *out, const qmat *const *W, const float *x, int T);
    /* rotate x[T][n_heads][head_dim] in place */
    int (*rope)(backend *, float *x, int T, int n_heads, const rope_tables *);
    /* write k, v [T][kv_dim] of one layer into each token's cache slot */
    int (*kv_write)(backend *, const attn_batch *, int layer, const float *k, const float *v);
    /* out[T][n_heads*hd] = softmax(q k^T / sqrt(hd)) v over each token's visible cache */
    int (*attention)(backend *, float *out, const float *q, const attn_batch *, int layer, int n_heads, int n_kv_heads,
                     int head_dim);
    /* out[i] = silu(gate[i]) * up[i] */
    int (*swiglu)(backend *, float *out, const float *gate, const float *up, size_t n);
    /* x[i] += y[i] */
    int (*add)(backend *, float *x, const float *y, size_t n);
    /* x[r][c] += b[c] for rows r < n_rows of width C (qwen2's Q/K/V projection biases) */
    int (*add_bias)(backend *, float *x, const float *b, int n_rows, int C);
    void (*destroy)(backend *);

    /* optional (NULL where the backend has none): */
    /* make the backend's copy of w random, valid blocks, never read from w->data: a timing model at
     * a scale whose weights never exist on the host */
    int (*fill_random)(backend *, const qmat *w, uint64_t seed);
    /* read bandwidth of the backend's own memory in GB/s (a GPU's HBM), 0 if it cannot tell */
    double (*bandwidth)(backend *);
    /* run body(arg), which calls this backend's ops, with its threads held for all of them (one fork
     * for a whole forward instead of one an op); returns body's result */
    int (*session)(backend *, int (*body)(void *), void *arg);
    /* out[T][W->rows] += x[T][cols] . W^T: a residual add in the matmul's last step (one launch
     * instead of two on a GPU); the same values as matmul into scratch, then add */
    int (*matmul_add)(backend *, float *out, const qmat *W, const float *x, int T);
};

/* The numbers a backend computes change when its kernels, attention or KV cache change (a contract
 * change: e.g. fused multiply-adds in attention, a bf16 cache). Anything stored from a target's
 * outputs and resumed later (the training cache) is keyed by backend_contract, so results of two
 * contracts never mix. Bump this whenever any backend's results change; test_forward holds a
 * digest of the int8 contract's logits on a tiny model and fails until it is bumped. */
#define DS_CONTRACT_VERSION 1

/* "cpu int8 c1" (the same bits on every kernel path), "cpu fp32 (exact) avx2 c1" (the exact
 * contract's sums are each path's own), or a device backend's name and kernels */
void backend_contract(const backend *be, char *out, size_t n);

/* The backend named in o (NULL: the CPU with all cores, int8 contract); NULL + message if unknown. */
backend *backend_new(const backend_opts *o);
backend *backend_cpu_new(const backend_opts *o);
backend *backend_cuda_new(const backend_opts *o); /* built when DS_CUDA is defined (make CUDA=1) */
void backend_free(backend *be);
/* the registered backend names, comma-separated, for messages and --help */
const char *backend_names(void);

/* KV caches live in backend memory; reserve grows capacity (keeping contents). A target's cache
 * (kv_cache_new) holds the backend's element (bf16 where be->kv_bf16); a drafter's (kv_cache_new_dims)
 * stays fp32: small, and what its training computed. */
kv_cache *kv_cache_new(backend *be, const model_config *c, int cap);
kv_cache *kv_cache_new_dims(backend *be, int n_layers, int n_heads, int head_dim, int cap);
int kv_cache_reserve(backend *be, kv_cache *kv, int cap);
void kv_cache_crop(kv_cache *kv, int len); /* rollback: positions >= len are forgotten */
/* After a tree round: keep the n rows at slots[0..n) (increasing, slots[i] >= base + i) as slots
 * base..base+n-1, in every layer, and forget everything after them (the accepted path compacted
 * into place, the other branches dropped). */
int kv_cache_keep(backend *be, kv_cache *kv, int base, const int *slots, int n);
void kv_cache_free(backend *be, kv_cache *kv);

#endif
