/* backend_cuda.c — the CUDA backend: the ops table of backend.h on one NVIDIA GPU.
 *
 * Weights are uploaded once (prepare / prepare_mats, or on first sight for quantized matrices, as
 * the CPU backend packs them) and stay in their file's blocks on the device; the kernels
 * (kernels/kernels_cuda.cu) decode them in registers. Two contracts, as on the CPU:
 *  - int8 (the default): quantized matrices (Q4_1, Q8_0, Q5_0, Q4_K, Q6_K) are held in qk_pack's
 *    QK_DEVICE form and multiplied by kernels_cuda_i8.cu with the CPU's int8 contract, operation
 *    for operation; the KV cache holds bf16 and attention, RMSNorm, SwiGLU, RoPE, embed and the adds
 *    are the CPU's operations in its order, so the logits equal the CPU backend's bit for bit
 *    (test_cuda). Other matrices (a drafter's fp32) take the exact contract's kernels.
 *  - exact (--exact): fp32 activations throughout. Batches of fewer than gemm_min_T tokens take the
 *    warp-per-row kernel, whose every output is summed in the same order whatever the batch; larger
 *    ones decode each matrix to fp32 in scratch and run cuBLAS SGEMM (fp32, no TF32), as the CPU's
 *    exact contract switches to OpenBLAS at the same size.
 *
 * cuBLAS is opened with dlopen when the backend is made, and the CUDA runtime is linked
 * statically: a build with CUDA runs on machines without a GPU or the CUDA libraries, and only
 * `--backend cuda` needs them. Matrices and norm vectors the backend was not given up front (a
 * drafter's fp32 weights, which training may change between calls) are uploaded at each call. */
#ifdef DS_CUDA

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "../base/common.h"
#include "../formats/quant.h"
#include "../kernels/kernels_cpu.h"
#include "../kernels/kernels_cuda.h"

_Static_assert((int)KC_I8_Q8_0 == (int)QK_Q8_0 && (int)KC_I8_Q4_1 == (int)QK_Q4_1 && (int)KC_I8_Q4_K == (int)QK_Q4_K &&
                   (int)KC_I8_Q6_K == (int)QK_Q6_K,
               "the int8 kernels take qk_kind's values");

typedef cublasStatus_t (*cublas_create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*cublas_destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*cublas_sgemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                          const float *, const float *, int, const float *, int, const float *, float *,
                                          int);

/* the backend's copy of a weight matrix or norm vector, found by the host address it came from */
typedef struct {
    const void *key;
    void *dev;
    size_t bytes;
    uint32_t type;         /* device storage type (F32 for types decoded at upload) */
    int rows, cols;        /* 1 x n for a norm vector */
    size_t row_bytes;      /* of the device copy */
    int kind;              /* the int8 form (key: i8_key): its qk_kind; its scales and their bytes a row */
    const uint8_t *scales;
    size_t srb;
} dev_slot;

typedef struct {
    char gpu[96];
    void *cublas_lib;
    cublasHandle_t cublas;
    cublas_sgemm_fn sgemm;
    cublas_destroy_fn cublas_destroy;
    dev_slot *slots;       /* open addressing, power-of-two capacity */
    size_t n_slots, n_used;
    void *tmp[8];          /* per-call uploads of matrices the backend does not keep */
    size_t tmp_bytes[8];
    float *ntmp;           /* per-call upload of a norm vector */
    size_t ntmp_len;
    float *deq;            /* a matrix decoded to fp32 for cuBLAS */
    float *resid;          /* matmul_add's product where it is not fused */
    size_t resid_len;
    size_t deq_len;
    float *scores;         /* attention scores [T*n_heads][n_ctx] */
    size_t scores_len;
    kc_kvdst *tdst, *hdst; /* per-token tables: device, host */
    kc_kvsrc *tsrc, *hsrc;
    size_t tab_cap;
    int *tok;              /* token ids for embed */
    size_t tok_cap;
    float *cos, *sin;      /* rope tables on the device, and the host copy they were made from */
    float *rope_host;
    size_t rope_len;
    struct cuda_prof *prof; /* DSPARK_CUDA_PROFILE: per-op host and GPU time, printed at destroy */
    /* DSPARK_CUDA_GRAPH: each forward (session) is recorded and run on `stream` as one CUDA graph,
     * its kernels back to back on the GPU instead of one launch at a time from the host */
    int graphs;
    cudaStream_t stream;
    long graph_breaks; /* recordings run early by an op that needs the host */
    int i8;            /* the int8 contract (be->exact == 0) */
    int8_t *aq;        /* int8 activations [T][cols], their scales and block sums [T][cols/32] */
    float *ae, *as;
    size_t aq_len, ae_len, as_len;
    float *emb;        /* host rows of an embedding decoded on the host (types the device does not read) */
    size_t emb_len;
} cuda_ctx;

static int cu_ok(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 0;
    ds_error("cuda: %s: %s", what, cudaGetErrorString(e));
    cudaGetLastError();
    return -1;
}

static int kc_ok(int rc) {
    if (rc == 0) return 0;
    ds_error("cuda: %s", kc_last_error());
    return -1;
}

/* ------------------------------------------------------------------------------- profiling */

/* With DSPARK_CUDA_PROFILE set, every op records host time (what it costs to issue: checks and
 * launches) and GPU time (CUDA events around its launches, read in batches so the GPU is not
 * waited on an op at a time). Printed to stderr when the backend is freed: where a forward's time
 * goes, launch cost against kernel time. */
enum { P_EMBED, P_RMSNORM, P_MATMUL, P_MATMUL_ADD, P_ROPE, P_KV_WRITE, P_ATTENTION, P_SWIGLU, P_ADD, P_COPY, P_NOPS };
static const char *const prof_names[P_NOPS] = {"embed",     "rmsnorm", "matmul", "matmul_add", "rope", "kv_write",
                                               "attention", "swiglu",  "add",    "copy (device)"};
#define PROF_PENDING 2048
/* [0]: one-token forwards (decode), [1]: the rest; an op without a token count (swiglu, add, copy)
 * counts with the last op that had one */
typedef struct cuda_prof {
    long calls[2][P_NOPS];
    double host_s[2][P_NOPS], gpu_ms[2][P_NOPS];
    cudaEvent_t ev[2 * PROF_PENDING];
    int op[PROF_PENDING], n, many;
    double t0;
} cuda_prof;

static void prof_drain(cuda_prof *p) {
    if (!p->n) return;
    cudaEventSynchronize(p->ev[2 * p->n - 1]);
    for (int i = 0; i < p->n; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]) == cudaSuccess)
            p->gpu_ms[p->op[i] / P_NOPS][p->op[i] % P_NOPS] += ms;
    }
    cudaGetLastError();
    p->n = 0;
}

static void prof_begin(cuda_ctx *c) {
    cuda_prof *p = c->prof;
    if (!p) return;
    if (p->n == PROF_PENDING) prof_drain(p);
    cudaEventRecord(p->ev[2 * p->n], 0);
    p->t0 = ds_now();
}

static void prof_end(cuda_ctx *c, int op) {
    cuda_prof *p = c->prof;
    if (!p) return;
    cudaEventRecord(p->ev[2 * p->n + 1], 0);
    p->op[p->n++] = op + p->many * P_NOPS;
    p->calls[p->many][op]++;
    p->host_s[p->many][op] += ds_now() - p->t0;
}

static void prof_tokens(cuda_ctx *c, int T) {
    if (c->prof) c->prof->many = T > 1;
}

static void prof_free(cuda_ctx *c) {
    cuda_prof *p = c->prof;
    if (!p) return;
    prof_drain(p);
    fprintf(stderr, "cuda profile (DSPARK_CUDA_PROFILE): host = time to issue an op, gpu = its kernels' time\n");
    for (int k = 0; k < 2; k++) {
        double host = 0, gpu = 0;
        for (int i = 0; i < P_NOPS; i++) host += p->host_s[k][i], gpu += p->gpu_ms[k][i];
        fprintf(stderr, "  %-14s %9s %12s %12s %10s %10s   %s\n", "op", "calls", "host us/call", "gpu us/call", "host ms",
                "gpu ms", k ? "(forwards of several tokens)" : "(one-token forwards: decode)");
        for (int i = 0; i < P_NOPS; i++)
            if (p->calls[k][i])
                fprintf(stderr, "  %-14s %9ld %12.2f %12.2f %10.1f %10.1f\n", prof_names[i], p->calls[k][i],
                        1e6 * p->host_s[k][i] / p->calls[k][i], 1e3 * p->gpu_ms[k][i] / p->calls[k][i],
                        1e3 * p->host_s[k][i], p->gpu_ms[k][i]);
        fprintf(stderr, "  %-14s %9s %12s %12s %10.1f %10.1f\n", "all", "", "", "", 1e3 * host, gpu);
    }
    for (int i = 0; i < 2 * PROF_PENDING; i++) cudaEventDestroy(p->ev[i]);
    free(p);
    c->prof = NULL;
}

static int prof_new(cuda_ctx *c) {
    const char *e = getenv("DSPARK_CUDA_PROFILE");
    if (!e || !*e || !strcmp(e, "0")) return 0;
    cuda_prof *p = ds_calloc(1, sizeof *p, "cuda profile");
    if (!p) return -1;
    for (int i = 0; i < 2 * PROF_PENDING; i++)
        if (cu_ok(cudaEventCreate(&p->ev[i]), "profile events")) {
            for (int j = 0; j < i; j++) cudaEventDestroy(p->ev[j]);
            free(p);
            return -1;
        }
    c->prof = p;
    return 0;
}

/* ------------------------------------------------------------------------------ CUDA graphs */

/* DSPARK_CUDA_GRAPH: a forward (session) is recorded and run as a CUDA graph (kernels_cuda.h's
 * kc_record_*): its kernels back to back on the GPU for one call from the host. An op that needs the
 * host (a copy, an allocation, cuBLAS) runs what was recorded first; the rest of the forward is
 * recorded again after it. */
static int eager(cuda_ctx *c) {
    if (!c->graphs || !kc_recording()) return 0;
    c->graph_breaks++;
    return kc_ok(kc_record_flush());
}

static int cuda_session(backend *be, int (*body)(void *), void *arg) {
    cuda_ctx *c = be->ctx;
    if (!c->graphs || c->prof || kc_recording()) return body(arg);
    kc_set_stream(c->stream); /* the kernels' stream is global: another backend may have reset it */
    kc_record_begin();
    int rc = body(arg);
    int rc2 = kc_ok(kc_record_end(!rc));
    return rc ? rc : rc2;
}

static int graphs_new(cuda_ctx *c) {
    const char *e = getenv("DSPARK_CUDA_GRAPH");
    if (!e || !*e || !strcmp(e, "0")) return 0;
    DS_TRY(cu_ok(cudaStreamCreateWithFlags(&c->stream, cudaStreamDefault), "graph stream"));
    kc_set_stream(c->stream);
    c->graphs = 1;
    return 0;
fail:
    return -1;
}

static void graphs_free(cuda_ctx *c) {
    if (!c->graphs) return;
    kc_record_end(0);
    kc_graphs_free();
    if (getenv("DSPARK_CUDA_GRAPH_STATS")) {
        long st[KC_GRAPH_NSTAT];
        kc_graph_stats(st);
        fprintf(stderr, "cuda graphs: %ld run (%ld node arguments updated), %ld made, %ld stretches launched one kernel"
                        " at a time; %ld recordings broken by an op that needs the host\n",
                st[KC_GRAPH_RUNS], st[KC_GRAPH_UPDATES], st[KC_GRAPH_BUILDS], st[KC_GRAPH_EAGER], c->graph_breaks);
    }
    kc_set_stream(NULL);
    cudaStreamDestroy(c->stream);
    c->graphs = 0;
}

/* grow a device buffer to at least `bytes` (contents are not kept) */
static int dev_reserve(void **p, size_t *have, size_t bytes, const char *what) {
    if (*have >= bytes) return 0;
    size_t n = DS_MAX(bytes, 2 * *have);
    cudaFree(*p);
    *p = NULL;
    *have = 0;
    if (cu_ok(cudaMalloc(p, n), what)) return -1;
    *have = n;
    return 0;
}

/* -------------------------------------------------------------------------- weight copies */

static size_t slot_of(const dev_slot *s, size_t cap, const void *key) {
    size_t h = (size_t)(((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
    while (s[h].key && s[h].key != key) h = (h + 1) & (cap - 1);
    return h;
}

static dev_slot *slot_find(cuda_ctx *c, const void *key) {
    if (!c->n_slots) return NULL;
    dev_slot *s = &c->slots[slot_of(c->slots, c->n_slots, key)];
    return s->key ? s : NULL;
}

/* an empty slot for key (the table grown to keep its load under 1/2) */
static dev_slot *slot_new(cuda_ctx *c, const void *key) {
    if (2 * (c->n_used + 1) > c->n_slots) {
        size_t cap = c->n_slots ? 2 * c->n_slots : 256;
        dev_slot *ns = ds_calloc(cap, sizeof *ns, "cuda weight table");
        if (!ns) return NULL;
        for (size_t i = 0; i < c->n_slots; i++)
            if (c->slots[i].key) ns[slot_of(ns, cap, c->slots[i].key)] = c->slots[i];
        free(c->slots);
        c->slots = ns;
        c->n_slots = cap;
    }
    dev_slot *s = &c->slots[slot_of(c->slots, c->n_slots, key)];
    memset(s, 0, sizeof *s);
    s->key = key;
    c->n_used++;
    return s;
}

/* upload w into dev (rows x row_bytes of its device type); types the kernels cannot read are
 * decoded to fp32 on the host first */
static int upload_mat(const qmat *w, void **dev, size_t *have, uint32_t *type, size_t *row_bytes) {
    if (kc_type_native(w->type)) {
        *type = w->type;
        *row_bytes = w->row_bytes;
        size_t bytes = (size_t)w->rows * w->row_bytes;
        if (dev_reserve(dev, have, bytes, "weight upload")) return -1;
        return cu_ok(cudaMemcpy(*dev, w->data, bytes, cudaMemcpyHostToDevice), "weight upload");
    }
    const ggml_type_info *ti = ggml_type_get(w->type);
    DS_CHECK(ti && ti->to_float, "cuda: cannot decode a %s matrix", ggml_type_name(w->type));
    size_t bytes = sizeof(float) * (size_t)w->rows * w->cols;
    float *host = ds_malloc(bytes, "weight decode");
    if (!host) return -1;
    qmat_to_f32(w, host);
    int rc = dev_reserve(dev, have, bytes, "weight upload") ||
             cu_ok(cudaMemcpy(*dev, host, bytes, cudaMemcpyHostToDevice), "weight upload");
    free(host);
    *type = GGML_F32;
    *row_bytes = sizeof(float) * (size_t)w->cols;
    return rc ? -1 : 0;
fail:
    return -1;
}

/* the slot kept under key for w (NULL, *bad = 0: none), *bad = 1 when it holds another shape */
static dev_slot *kept(cuda_ctx *c, const void *key, const qmat *w, int *bad) {
    dev_slot *s = slot_find(c, key);
    *bad = s && (s->rows != w->rows || s->cols != w->cols);
    if (*bad)
        ds_error("cuda: a %dx%d %s matrix shares its data with a kept %dx%d one", w->rows, w->cols,
                 ggml_type_name(w->type), s->rows, s->cols);
    return *bad ? NULL : s;
}

/* keep a device copy of w (no-op if it has one) */
static const dev_slot *keep_mat(cuda_ctx *c, const qmat *w) {
    int bad;
    dev_slot *s = kept(c, w->data, w, &bad);
    if (s || bad) return s;
    void *dev = NULL;
    size_t have = 0, rb = 0;
    uint32_t type = 0;
    if (eager(c) || upload_mat(w, &dev, &have, &type, &rb)) return NULL;
    if (!(s = slot_new(c, w->data))) {
        cudaFree(dev);
        return NULL;
    }
    s->dev = dev, s->bytes = have, s->type = type, s->rows = w->rows, s->cols = w->cols, s->row_bytes = rb;
    return s;
}

static const float *keep_vec(cuda_ctx *c, const float *v, int n) {
    dev_slot *s = slot_find(c, v);
    if (s) return s->dev;
    void *dev = NULL;
    if (eager(c)) return NULL;
    if (cu_ok(cudaMalloc(&dev, sizeof(float) * (size_t)n), "norm upload") ||
        cu_ok(cudaMemcpy(dev, v, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice), "norm upload")) {
        cudaFree(dev);
        return NULL;
    }
    if (!(s = slot_new(c, v))) {
        cudaFree(dev);
        return NULL;
    }
    s->dev = dev, s->bytes = sizeof(float) * (size_t)n, s->type = GGML_F32, s->rows = 1, s->cols = n;
    s->row_bytes = s->bytes;
    return dev;
}

/* A matrix's int8 form is kept under its data's address plus one (a weight's data is never at an odd
 * address), beside a raw copy of the same matrix where embed needs one. */
static const void *i8_key(const qmat *w) { return (const char *)w->data + 1; }

/* keep the int8 contract's form of a quantized matrix (qk_pack's QK_DEVICE, packed here, uploaded) */
static const dev_slot *keep_i8(cuda_ctx *c, const qmat *w) {
    int bad;
    dev_slot *s = kept(c, i8_key(w), w, &bad);
    if (s || bad) return s;
    qk_mat pk;
    if (eager(c) || qk_pack(w, QK_DEVICE, &pk)) return NULL;
    size_t srb = qk_device_scale_bytes(pk.kind, pk.nb), bytes = pk.qoff + srb * (size_t)w->rows;
    void *dev = NULL;
    if (cu_ok(cudaMalloc(&dev, bytes), "weight upload") ||
        cu_ok(cudaMemcpy(dev, pk.data, bytes, cudaMemcpyHostToDevice), "weight upload") ||
        !(s = slot_new(c, i8_key(w)))) {
        cudaFree(dev);
        qk_mat_free(&pk);
        return NULL;
    }
    s->dev = dev, s->bytes = bytes, s->type = w->type, s->rows = w->rows, s->cols = w->cols, s->row_bytes = pk.rb;
    s->kind = pk.kind, s->scales = (const uint8_t *)dev + pk.qoff, s->srb = srb;
    qk_mat_free(&pk);
    return s;
}

/* the copy a matmul reads: the int8 form on the int8 contract where the type has one */
static int keep_for_matmul(cuda_ctx *c, const qmat *w) {
    if (c->i8 && qk_supported(w)) return keep_i8(c, w) ? 0 : -1;
    return keep_mat(c, w) ? 0 : -1;
}

static int cuda_prepare_mats(backend *be, const qmat *const *W, int n) {
    for (int i = 0; i < n; i++)
        if (keep_for_matmul(be->ctx, W[i])) return -1;
    return 0;
}

/* every matrix and norm of a model (the embedding too: embed reads it on the device) */
static int model_mats(const model *m, const qmat **out) {
    int n = 0;
    out[n++] = &m->tok_embd;
    if (m->output.data != m->tok_embd.data) out[n++] = &m->output;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        const qmat *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) out[n++] = ws[i];
    }
    return n;
}

static int model_vecs(const model *m, const float **v, int *len) {
    int n = 0;
    const model_config *c = &m->cfg;
    v[n] = m->out_norm, len[n++] = c->dim;
    for (int l = 0; l < c->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        v[n] = L->attn_norm, len[n++] = c->dim;
        v[n] = L->ffn_norm, len[n++] = c->dim;
        if (L->q_norm) {
            v[n] = L->q_norm, len[n++] = c->head_dim;
            v[n] = L->k_norm, len[n++] = c->head_dim;
        }
        if (L->bq) {
            v[n] = L->bq, len[n++] = c->n_heads * c->head_dim;
            v[n] = L->bk, len[n++] = c->n_kv_heads * c->head_dim;
            v[n] = L->bv, len[n++] = c->n_kv_heads * c->head_dim;
        }
    }
    return n;
}

static int cuda_prepare(backend *be, const model *m) {
    int cap = 2 + 7 * m->cfg.n_layers, vcap = 1 + 7 * m->cfg.n_layers, rc = -1;
    const qmat **ws = ds_malloc(sizeof *ws * (size_t)cap, "weight list");
    const float **vs = ds_malloc(sizeof *vs * (size_t)vcap, "norm list");
    int *len = ds_malloc(sizeof *len * (size_t)vcap, "norm list");
    cuda_ctx *c = be->ctx;
    if (ws && vs && len) {
        int n = model_mats(m, ws);
        rc = 0;
        for (int i = 0; i < n && !rc; i++) {
            /* the embedding: read on the device where it can be (the int8 contract decodes other
             * types' rows on the host: op_embed), and as a matmul's where it is the head too */
            if (ws[i] == &m->tok_embd && c->i8) {
                if (kc_type_native(ws[i]->type)) rc = keep_mat(c, ws[i]) ? 0 : -1;
                if (!rc && m->output.data == m->tok_embd.data) rc = keep_for_matmul(c, ws[i]);
            } else rc = ws[i] == &m->tok_embd ? (keep_mat(c, ws[i]) ? 0 : -1) : keep_for_matmul(c, ws[i]);
        }
        int nv = model_vecs(m, vs, len);
        for (int i = 0; i < nv && !rc; i++) rc = keep_vec(be->ctx, vs[i], len[i]) ? 0 : -1;
    }
    free(ws);
    free(vs);
    free(len);
    return rc;
}

static void forget_keys(cuda_ctx *c, const void *const *keys, int n) {
    if (!c->n_slots) return;
    eager(c);
    cudaDeviceSynchronize(); /* nothing in flight reads what is freed */
    dev_slot *old = c->slots;
    size_t cap = c->n_slots;
    for (size_t i = 0; i < cap; i++)
        for (int j = 0; j < n && old[i].key; j++)
            if (old[i].key == keys[j]) {
                cudaFree(old[i].dev);
                old[i].key = NULL;
                c->n_used--;
            }
    dev_slot *ns = ds_calloc(cap, sizeof *ns, "cuda weight table");
    if (ns) {
        for (size_t i = 0; i < cap; i++)
            if (old[i].key) ns[slot_of(ns, cap, old[i].key)] = old[i];
        c->slots = ns;
        free(old);
    } else { /* keep the table consistent: drop everything (copies are remade on demand) */
        for (size_t i = 0; i < cap; i++)
            if (old[i].key) cudaFree(old[i].dev), old[i].key = NULL;
        c->n_used = 0;
    }
}

static void cuda_forget_mats(backend *be, const qmat *const *W, int n) {
    const void **keys = ds_malloc(sizeof *keys * (size_t)(n ? 2 * n : 1), "weight list");
    if (!keys) return;
    for (int i = 0; i < n; i++) keys[2 * i] = W[i]->data, keys[2 * i + 1] = i8_key(W[i]);
    forget_keys(be->ctx, keys, 2 * n);
    free(keys);
}

static void cuda_forget(backend *be, const model *m) {
    int cap = 2 + 7 * m->cfg.n_layers, vcap = 1 + 7 * m->cfg.n_layers;
    const qmat **ws = ds_malloc(sizeof *ws * (size_t)cap, "weight list");
    const float **vs = ds_malloc(sizeof *vs * (size_t)vcap, "norm list");
    int *len = ds_malloc(sizeof *len * (size_t)vcap, "norm list");
    const void **keys = ds_malloc(sizeof *keys * (size_t)(2 * cap + vcap), "weight list");
    if (ws && vs && len && keys) {
        int n = model_mats(m, ws), nv = model_vecs(m, vs, len), k = 0;
        for (int i = 0; i < n; i++) keys[k++] = ws[i]->data, keys[k++] = i8_key(ws[i]);
        for (int i = 0; i < nv; i++) keys[k++] = vs[i];
        forget_keys(be->ctx, keys, k);
    }
    free(ws);
    free(vs);
    free(len);
    free(keys);
}

/* random device copies for a model whose weights never exist on the host (timing only) */
static int cuda_fill_random(backend *be, const qmat *w, uint64_t seed) {
    cuda_ctx *c = be->ctx;
    DS_CHECK(kc_type_native(w->type), "cuda: random %s weights are not supported", ggml_type_name(w->type));
    DS_CHECK(!slot_find(c, w->data), "cuda: fill_random on a matrix the backend already holds");
    DS_TRY(eager(c));
    size_t bytes = (size_t)w->rows * w->row_bytes;
    void *dev = NULL;
    DS_TRY(cu_ok(cudaMalloc(&dev, bytes), "random weights"));
    if (kc_ok(kc_fill_random(dev, w->type, w->row_bytes, w->rows, w->cols, seed))) {
        cudaFree(dev);
        return -1;
    }
    dev_slot *s = slot_new(c, w->data);
    if (!s) {
        cudaFree(dev);
        return -1;
    }
    s->dev = dev, s->bytes = bytes, s->type = w->type, s->rows = w->rows, s->cols = w->cols, s->row_bytes = w->row_bytes;
    if (c->i8 && qk_supported(w)) { /* and the int8 form the matmuls read, random too */
        int kind = qk_kind_of(w->type), nb = w->cols / 32;
        size_t rb = (size_t)nb * (kind == QK_Q4_1 || kind == QK_Q4_K ? 16 : 32), srb = qk_device_scale_bytes(kind, nb);
        size_t code_bytes = rb * (size_t)w->rows, all = code_bytes + srb * (size_t)w->rows;
        void *d8 = NULL;
        DS_TRY(cu_ok(cudaMalloc(&d8, all), "random weights"));
        if (kc_ok(kc_fill_i8(d8, code_bytes, (uint8_t *)d8 + code_bytes, all - code_bytes, seed)) ||
            !(s = slot_new(c, i8_key(w)))) {
            cudaFree(d8);
            return -1;
        }
        s->dev = d8, s->bytes = all, s->type = w->type, s->rows = w->rows, s->cols = w->cols, s->row_bytes = rb;
        s->kind = kind, s->scales = (const uint8_t *)d8 + code_bytes, s->srb = srb;
    }
    return 0;
fail:
    return -1;
}

static double cuda_bandwidth(backend *be) {
    DS_UNUSED(be);
    return kc_bandwidth((size_t)2 << 30);
}

/* the device copy of a matrix for this call: kept, kept now (quantized: immutable by convention,
 * as the CPU backend assumes when it packs them), or uploaded into slot i's scratch */
static const dev_slot *mat_for_call(cuda_ctx *c, const qmat *w, int i, dev_slot *tmp) {
    const dev_slot *s = slot_find(c, w->data);
    if (s) return s;
    if (w->type != GGML_F32 && w->type != GGML_F16 && w->type != GGML_BF16) return keep_mat(c, w);
    if (eager(c) || upload_mat(w, &c->tmp[i], &c->tmp_bytes[i], &tmp->type, &tmp->row_bytes)) return NULL;
    tmp->dev = c->tmp[i], tmp->rows = w->rows, tmp->cols = w->cols;
    return tmp;
}

/* ------------------------------------------------------------------------------------- memory */

static void *cuda_alloc(backend *be, size_t n) {
    void *p = NULL;
    if (eager(be->ctx)) return NULL;
    if (cu_ok(cudaMalloc(&p, n ? n : 16), "alloc")) return NULL;
    return p;
}
static void cuda_release(backend *be, void *p) {
    eager(be->ctx);
    if (p) cudaFree(p);
}
static int cuda_to_host(backend *be, void *dst, const void *src, size_t n) {
    if (eager(be->ctx)) return -1;
    return n ? cu_ok(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "copy to host") : 0;
}
static int cuda_to_device(backend *be, void *dst, const void *src, size_t n) {
    if (eager(be->ctx)) return -1;
    return n ? cu_ok(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "copy to device") : 0;
}
static int op_copy(backend *be, void *dst, const void *src, size_t n) {
    DS_UNUSED(be);
    return kc_ok(kc_copy(dst, src, n)); /* recorded too: no break in a graph */
}

/* ----------------------------------------------------------------------------------------- ops */

static int op_embed(backend *be, float *out, const qmat *emb, const int *tok, int T) {
    cuda_ctx *c = be->ctx;
    if (T <= 0) return 0;
    for (int t = 0; t < T; t++)
        DS_CHECK(tok[t] >= 0 && tok[t] < emb->rows, "embed: token %d outside the table (%d rows)", tok[t], emb->rows);
    if (c->i8 && !kc_type_native(emb->type) && !slot_find(c, emb->data)) {
        /* a type the device does not read (Q4_K, Q6_K...): the rows decoded on the host, as the CPU
         * decodes them, then copied (a table of 151,936 x 1,536 would be 0.9 GB in fp32 on the device) */
        size_t n = (size_t)T * (size_t)emb->cols;
        if (c->emb_len < n) {
            free(c->emb);
            c->emb_len = 0;
            DS_TRYP(c->emb = ds_malloc(n * sizeof(float), "embedding rows"));
            c->emb_len = n;
        }
        for (int t = 0; t < T; t++) qmat_row_f32(emb, tok[t], c->emb + (size_t)t * emb->cols);
        DS_TRY(eager(c));
        return cu_ok(cudaMemcpy(out, c->emb, n * sizeof(float), cudaMemcpyHostToDevice), "embedding rows");
    }
    dev_slot tmp;
    const dev_slot *s = mat_for_call(c, emb, 0, &tmp);
    DS_TRYP(s);
    if (T > KC_TOK_MAX) { /* else the ids travel with the launch: no copy, no wait */
        DS_TRY(eager(c));
        DS_TRY(dev_reserve((void **)&c->tok, &c->tok_cap, sizeof(int) * (size_t)T, "token ids"));
        DS_TRY(cu_ok(cudaMemcpy(c->tok, tok, sizeof(int) * (size_t)T, cudaMemcpyHostToDevice), "token ids"));
    }
    return kc_ok(kc_embed(out, s->dev, s->type, s->row_bytes, emb->cols, tok, c->tok, T));
fail:
    return -1;
}

/* the device copy of a host vector of C floats (a norm's weights, a bias): kept at prepare, or
 * uploaded now (a drafter's), after the previous user of the upload buffer is done */
static int vec_dev(cuda_ctx *c, const float *w, int C, const char *what, const float **wd) {
    const dev_slot *s = slot_find(c, w);
    if (s) {
        DS_CHECK(s->cols == C, "%s: a vector of %d kept with %d entries", what, C, s->cols);
        *wd = s->dev;
        return 0;
    }
    DS_TRY(eager(c));
    DS_TRY(dev_reserve((void **)&c->ntmp, &c->ntmp_len, sizeof(float) * (size_t)C, "vector upload"));
    DS_TRY(cu_ok(cudaMemcpy(c->ntmp, w, sizeof(float) * (size_t)C, cudaMemcpyHostToDevice), "vector upload"));
    *wd = c->ntmp;
    return 0;
fail:
    return -1;
}

static int op_rmsnorm(backend *be, float *out, const float *x, const float *w, int n_rows, int C, float eps) {
    const float *wd;
    DS_TRY(vec_dev(be->ctx, w, C, "rmsnorm", &wd));
    return kc_ok(kc_rmsnorm(out, x, wd, n_rows, C, eps));
fail:
    return -1;
}

static int op_add_bias(backend *be, float *x, const float *b, int n_rows, int C) {
    const float *bd;
    DS_TRY(vec_dev(be->ctx, b, C, "add_bias", &bd));
    return kc_ok(kc_add_bias(x, bd, n_rows, C));
fail:
    return -1;
}

/* the exact contract's matmul (every matrix on the int8 contract without an int8 form) */
static int op_matmul_f32(backend *be, int n, float *const *out, const qmat *const *W, const float *x, int T) {
    cuda_ctx *c = be->ctx;
    int cols = W[0]->cols;
    if (T < be->gemm_min_T) { /* the warp-per-row kernel: one launch for the set where it can */
        dev_slot tmp[8];
        kc_mat set[8];
        int one = 1;
        for (int i = 0; i < n; i++) {
            const dev_slot *s = mat_for_call(c, W[i], i, &tmp[i]);
            DS_TRYP(s);
            set[i] = (kc_mat){s->dev, out[i], s->row_bytes, s->rows};
            tmp[i].type = s->type;
            one = one && s->type == tmp[0].type && kc_matvec_set_ok(s->dev, s->type, s->row_bytes, cols, x);
        }
        if (one) return kc_ok(kc_matvec_set(set, n, tmp[0].type, cols, x, T, 0));
        for (int i = 0; i < n; i++)
            DS_TRY(kc_ok(kc_matvec(out[i], set[i].W, tmp[i].type, set[i].row_bytes, set[i].rows, cols, x, T)));
        return 0;
    }
    DS_TRY(eager(c)); /* cuBLAS runs on the legacy stream */
    for (int i = 0; i < n; i++) {
        dev_slot tmp;
        const dev_slot *s = mat_for_call(c, W[i], i, &tmp);
        DS_TRYP(s);
        const float *wf = s->dev;
        if (s->type != GGML_F32) {
            size_t bytes = sizeof(float) * (size_t)s->rows * cols;
            DS_TRY(dev_reserve((void **)&c->deq, &c->deq_len, bytes, "matmul scratch"));
            DS_TRY(kc_ok(kc_dequant(c->deq, s->dev, s->type, s->row_bytes, s->rows, cols)));
            wf = c->deq;
        }
        DS_TRY(eager(c)); /* cuBLAS reads the decoded tile now: the dequant must not stay recorded */
        const float one = 1.0f, zero = 0.0f;
        /* column-major: out^T [rows][T] = W (cols x rows)^T . x^T (cols x T) */
        cublasStatus_t st = c->sgemm(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, s->rows, T, cols, &one, wf, cols, x, cols,
                                     &zero, out[i], s->rows);
        DS_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuda: cublasSgemm failed (status %d) on %dx%d x %d tokens", (int)st,
                 s->rows, cols, T);
    }
    return 0;
fail:
    return -1;
}

/* x's int8 activations in the backend's scratch (grown outside a recording: launches kept earlier
 * may read the old buffers) */
static int quantize_x(cuda_ctx *c, const float *x, int T, int cols) {
    size_t nq = (size_t)T * (size_t)cols, ne = (size_t)T * (size_t)(cols / 32) * sizeof(float);
    if (c->aq_len < nq || c->ae_len < ne || c->as_len < ne) DS_TRY(eager(c));
    DS_TRY(dev_reserve((void **)&c->aq, &c->aq_len, nq, "int8 activations"));
    DS_TRY(dev_reserve((void **)&c->ae, &c->ae_len, ne, "int8 activations"));
    DS_TRY(dev_reserve((void **)&c->as, &c->as_len, ne, "int8 activations"));
    return kc_ok(kc_quantize(x, T, cols, c->aq, c->ae, c->as));
fail:
    return -1;
}

/* the int8 contract: x quantized once, then each run of matrices with an int8 form of one kind in
 * one launch (add: out += the product, matmul_add's); the others on the exact contract's kernels */
static int matmul_i8(backend *be, int n, float *const *out, const qmat *const *W, const float *x, int T, int add) {
    cuda_ctx *c = be->ctx;
    int cols = W[0]->cols;
    DS_TRY(quantize_x(c, x, T, cols));
    for (int i = 0; i < n;) {
        if (!qk_supported(W[i])) {
            DS_CHECK(!add, "cuda: matmul_add of a %s matrix on the int8 path", ggml_type_name(W[i]->type));
            DS_TRY(op_matmul_f32(be, 1, &out[i], &W[i], x, T));
            i++;
            continue;
        }
        kc_i8mat set[KC_MV_SET];
        int k = 0, kind = -1;
        for (; i < n && k < KC_MV_SET && qk_supported(W[i]); i++, k++) {
            const dev_slot *s = keep_i8(c, W[i]);
            DS_TRYP(s);
            if (k && s->kind != kind) break;
            kind = s->kind;
            set[k] = (kc_i8mat){s->dev, s->scales, s->srb, out[i], s->rows};
        }
        DS_TRY(kc_ok(kc_matvec_i8(set, k, kind, cols, c->aq, c->ae, c->as, T, add)));
    }
    return 0;
fail:
    return -1;
}

static int op_matmul(backend *be, int n, float *const *out, const qmat *const *W, const float *x, int T) {
    cuda_ctx *c = be->ctx;
    int cols = W[0]->cols, any_i8 = 0;
    DS_CHECK(n >= 1 && n <= 8, "matmul: %d matrices in one call (1..8)", n);
    for (int i = 1; i < n; i++)
        DS_CHECK(W[i]->cols == cols, "matmul: matrices sharing an input must have the same width (%d vs %d)", W[i]->cols,
                 cols);
    if (T <= 0) return 0;
    for (int i = 0; i < n; i++) any_i8 |= c->i8 && qk_supported(W[i]);
    return any_i8 ? matmul_i8(be, n, out, W, x, T, 0) : op_matmul_f32(be, n, out, W, x, T);
fail:
    return -1;
}

static int op_rope(backend *be, float *x, int T, int n_heads, const rope_tables *rt) {
    cuda_ctx *c = be->ctx;
    size_t n = (size_t)T * (size_t)(rt->head_dim / 2);
    if (!n) return 0;
    if (n <= KC_ROPE_MAX) /* decode and small verification batches: the tables travel with the launch */
        return kc_ok(kc_rope(x, T, n_heads, rt->head_dim, rt->neox, rt->cos, rt->sin, NULL, NULL));
    /* q and k of a layer, and every layer of a forward, share the tables: upload when they change */
    int same = c->rope_host && c->rope_len == n && !memcmp(c->rope_host, rt->cos, n * sizeof(float)) &&
               !memcmp(c->rope_host + n, rt->sin, n * sizeof(float));
    DS_TRY(eager(c));
    if (!same) {
        size_t have = c->rope_len;
        if (have < n) {
            cudaFree(c->cos), cudaFree(c->sin), free(c->rope_host);
            c->cos = c->sin = c->rope_host = NULL;
            c->rope_len = 0;
            DS_TRY(cu_ok(cudaMalloc((void **)&c->cos, n * sizeof(float)), "rope tables"));
            DS_TRY(cu_ok(cudaMalloc((void **)&c->sin, n * sizeof(float)), "rope tables"));
            DS_TRYP(c->rope_host = ds_malloc(2 * n * sizeof(float), "rope tables"));
        }
        DS_TRY(cu_ok(cudaMemcpy(c->cos, rt->cos, n * sizeof(float), cudaMemcpyHostToDevice), "rope tables"));
        DS_TRY(cu_ok(cudaMemcpy(c->sin, rt->sin, n * sizeof(float), cudaMemcpyHostToDevice), "rope tables"));
        memcpy(c->rope_host, rt->cos, n * sizeof(float));
        memcpy(c->rope_host + n, rt->sin, n * sizeof(float));
        c->rope_len = n;
    }
    return kc_ok(kc_rope(x, T, n_heads, rt->head_dim, rt->neox, rt->cos, rt->sin, c->cos, c->sin));
fail:
    c->rope_len = 0; /* what is on the device is not known now */
    return -1;
}

static int reserve_tables(cuda_ctx *c, int T) {
    if ((size_t)T <= c->tab_cap) return 0;
    DS_TRY(eager(c));
    size_t n = DS_MAX((size_t)T, 2 * c->tab_cap);
    cudaFree(c->tdst), cudaFree(c->tsrc), free(c->hdst), free(c->hsrc);
    c->tdst = NULL, c->tsrc = NULL, c->hdst = NULL, c->hsrc = NULL;
    c->tab_cap = 0;
    DS_TRY(cu_ok(cudaMalloc((void **)&c->tdst, n * sizeof(kc_kvdst)), "attention tables"));
    DS_TRY(cu_ok(cudaMalloc((void **)&c->tsrc, n * sizeof(kc_kvsrc)), "attention tables"));
    DS_TRYP(c->hdst = ds_malloc(n * sizeof(kc_kvdst), "attention tables"));
    DS_TRYP(c->hsrc = ds_malloc(n * sizeof(kc_kvsrc), "attention tables"));
    c->tab_cap = n;
    return 0;
fail:
    return -1;
}

static int op_kv_write(backend *be, const attn_batch *ab, int layer, const float *k, const float *v) {
    cuda_ctx *c = be->ctx;
    int T = ab->T, d = 0, elem = 0;
    if (T <= 0) return 0;
    DS_TRY(reserve_tables(c, T));
    if (T > KC_TAB_MAX) DS_TRY(eager(c)); /* the table is copied to the device */
    for (int t = 0; t < T; t++) {
        kv_cache *kv = ab->kv[ab->seq[t]];
        DS_CHECK(ab->pos[t] >= 0 && ab->pos[t] < kv->cap, "kv_write: position %d outside the cache (capacity %d)",
                 ab->pos[t], kv->cap);
        DS_CHECK(t == 0 || (kv->kv_dim == d && kv->elem == elem),
                 "kv_write: caches of different widths or elements in one batch (%d, %d)", d, kv->kv_dim);
        d = kv->kv_dim, elem = kv->elem;
        c->hdst[t].k = kv_row(kv, kv->k[layer], (size_t)ab->pos[t] * d);
        c->hdst[t].v = kv_row(kv, kv->v[layer], (size_t)ab->pos[t] * d);
    }
    return kc_ok(kc_kv_write(c->hdst, c->tdst, T, d, k, v, elem == 2));
fail:
    return -1;
}

static int op_attention(backend *be, float *out, const float *q, const attn_batch *ab, int layer, int n_heads,
                          int n_kv_heads, int hd) {
    cuda_ctx *c = be->ctx;
    int T = ab->T, maxn = 1, elem;
    if (T <= 0) return 0;
    elem = ab->kv[ab->seq[0]]->elem;
    DS_TRY(reserve_tables(c, T));
    if (T > KC_TAB_MAX) DS_TRY(eager(c)); /* the table is copied to the device */
    for (int t0 = 0, t1; t0 < T; t0 = t1) { /* each request's run: a draft tree in its cache is masked */
        const kv_cache *kv = ab->kv[ab->seq[t0]];
        int tree = kv->tree;
        for (t1 = t0; t1 < T && ab->seq[t1] == ab->seq[t0]; t1++) {}
        DS_CHECK(!tree || elem == 2, "attention: on the GPU a draft tree attends only over a bf16 cache (the int8"
                 " contract's target cache; token %d)", t0);
        DS_CHECK(!tree || !ab->n_vis, "attention: a draft tree with explicit visibility");
        for (int t = t0; t < t1; t++) {
            kc_kvsrc *e = &c->hsrc[t];
            memset(e->anc, 0, sizeof e->anc);
            e->tree0 = tree ? kv->tree0 : INT_MAX;
            for (int u = ab->pos[t]; tree && u >= 0; u = kv->tpar[u - kv->tree0]) { /* its slot, then its ancestors' */
                int k = u - kv->tree0;
                DS_CHECK(k >= 0 && k < KC_TREE_SLOTS, "attention: a draft tree of more than %d slots (token %d)",
                         KC_TREE_SLOTS, t);
                e->anc[k >> 5] |= 1u << (k & 31);
            }
        }
    }
    for (int t = 0; t < T; t++) {
        const kv_cache *kv = ab->kv[ab->seq[t]];
        int nv = ab->n_vis ? ab->n_vis[t] : ab->pos[t] + 1;
        DS_CHECK(nv >= 1 && nv <= kv->cap, "attention: token %d would see %d positions of a cache of %d", t, nv, kv->cap);
        DS_CHECK(kv->kv_dim == n_kv_heads * hd, "attention: a cache of width %d for %d KV heads of %d", kv->kv_dim,
                 n_kv_heads, hd);
        DS_CHECK(kv->elem == elem, "attention: fp32 and bf16 caches in one batch");
        c->hsrc[t].k = kv->k[layer], c->hsrc[t].v = kv->v[layer], c->hsrc[t].n_vis = nv, c->hsrc[t].ld = kv->kv_dim;
        maxn = DS_MAX(maxn, nv);
    }
    size_t len = (size_t)T * n_heads * maxn;
    if (len * sizeof(float) > c->scores_len) DS_TRY(eager(c));
    DS_TRY(dev_reserve((void **)&c->scores, &c->scores_len, len * sizeof(float), "attention scores"));
    /* the scale as the CPU backend computes it (the same expression, so the same float) */
    return kc_ok(kc_attention(out, q, c->hsrc, c->tsrc, T, n_heads, n_kv_heads, hd, 1.0f / sqrtf((float)hd), c->scores,
                              (size_t)maxn, elem == 2));
fail:
    return -1;
}

static int op_add(backend *be, float *x, const float *y, size_t n);

/* out += x W^T: the warp-per-row kernel adds in its last step; elsewhere the product goes through
 * scratch and the add kernel (the same rounding: one fp32 add of the product) */
static int op_matmul_add(backend *be, float *out, const qmat *W, const float *x, int T) {
    cuda_ctx *c = be->ctx;
    if (T <= 0) return 0;
    if (c->i8 && qk_supported(W)) return matmul_i8(be, 1, &out, &W, x, T, 1);
    if (T < be->gemm_min_T) {
        dev_slot tmp;
        const dev_slot *s = mat_for_call(c, W, 0, &tmp);
        DS_TRYP(s);
        if (kc_matvec_set_ok(s->dev, s->type, s->row_bytes, W->cols, x)) {
            kc_mat one = {s->dev, out, s->row_bytes, s->rows};
            return kc_ok(kc_matvec_set(&one, 1, s->type, W->cols, x, T, 1));
        }
    }
    size_t n = (size_t)T * W->rows;
    if (n * sizeof(float) > c->resid_len) DS_TRY(eager(c));
    DS_TRY(dev_reserve((void **)&c->resid, &c->resid_len, n * sizeof(float), "residual scratch"));
    float *outs[1] = {c->resid};
    DS_TRY(op_matmul(be, 1, outs, &W, x, T));
    return op_add(be, out, c->resid, n);
fail:
    return -1;
}

static int op_swiglu(backend *be, float *out, const float *gate, const float *up, size_t n) {
    DS_UNUSED(be);
    return kc_ok(kc_swiglu(out, gate, up, n));
}

static int op_add(backend *be, float *x, const float *y, size_t n) {
    DS_UNUSED(be);
    return kc_ok(kc_add(x, y, n));
}

/* the ops table's entries: each op between the profiler's marks (which do nothing unless profiling) */
static int cuda_embed(backend *be, float *out, const qmat *emb, const int *tok, int T) {
    prof_tokens(be->ctx, T);
    prof_begin(be->ctx);
    int rc = op_embed(be, out, emb, tok, T);
    prof_end(be->ctx, P_EMBED);
    return rc;
}
static int cuda_rmsnorm(backend *be, float *out, const float *x, const float *w, int n_rows, int C, float eps) {
    prof_tokens(be->ctx, n_rows);
    prof_begin(be->ctx);
    int rc = op_rmsnorm(be, out, x, w, n_rows, C, eps);
    prof_end(be->ctx, P_RMSNORM);
    return rc;
}
static int cuda_matmul(backend *be, int n, float *const *out, const qmat *const *W, const float *x, int T) {
    prof_tokens(be->ctx, T);
    prof_begin(be->ctx);
    int rc = op_matmul(be, n, out, W, x, T);
    prof_end(be->ctx, P_MATMUL);
    return rc;
}
static int cuda_rope(backend *be, float *x, int T, int n_heads, const rope_tables *rt) {
    prof_tokens(be->ctx, T);
    prof_begin(be->ctx);
    int rc = op_rope(be, x, T, n_heads, rt);
    prof_end(be->ctx, P_ROPE);
    return rc;
}
static int cuda_kv_write(backend *be, const attn_batch *ab, int layer, const float *k, const float *v) {
    prof_tokens(be->ctx, ab->T);
    prof_begin(be->ctx);
    int rc = op_kv_write(be, ab, layer, k, v);
    prof_end(be->ctx, P_KV_WRITE);
    return rc;
}
static int cuda_attention(backend *be, float *out, const float *q, const attn_batch *ab, int layer, int n_heads, int n_kv_heads, int hd) {
    prof_tokens(be->ctx, ab->T);
    prof_begin(be->ctx);
    int rc = op_attention(be, out, q, ab, layer, n_heads, n_kv_heads, hd);
    prof_end(be->ctx, P_ATTENTION);
    return rc;
}
static int cuda_matmul_add(backend *be, float *out, const qmat *W, const float *x, int T) {
    prof_tokens(be->ctx, T);
    prof_begin(be->ctx);
    int rc = op_matmul_add(be, out, W, x, T);
    prof_end(be->ctx, P_MATMUL_ADD);
    return rc;
}
static int cuda_swiglu(backend *be, float *out, const float *gate, const float *up, size_t n) {
    prof_begin(be->ctx);
    int rc = op_swiglu(be, out, gate, up, n);
    prof_end(be->ctx, P_SWIGLU);
    return rc;
}
static int cuda_add(backend *be, float *x, const float *y, size_t n) {
    prof_begin(be->ctx);
    int rc = op_add(be, x, y, n);
    prof_end(be->ctx, P_ADD);
    return rc;
}
static int cuda_add_bias(backend *be, float *x, const float *b, int n_rows, int C) {
    prof_begin(be->ctx);
    int rc = op_add_bias(be, x, b, n_rows, C);
    prof_end(be->ctx, P_ADD);
    return rc;
}
static int cuda_copy(backend *be, void *dst, const void *src, size_t n) {
    prof_begin(be->ctx);
    int rc = op_copy(be, dst, src, n);
    prof_end(be->ctx, P_COPY);
    return rc;
}

static void cuda_destroy(backend *be) {
    cuda_ctx *c = be->ctx;
    if (c) {
        graphs_free(c);
        cudaDeviceSynchronize();
        prof_free(c);
        for (size_t i = 0; i < c->n_slots; i++)
            if (c->slots[i].key) cudaFree(c->slots[i].dev);
        free(c->slots);
        for (int i = 0; i < 8; i++) cudaFree(c->tmp[i]);
        cudaFree(c->ntmp), cudaFree(c->deq), cudaFree(c->resid), cudaFree(c->scores), cudaFree(c->tdst), cudaFree(c->tsrc);
        cudaFree(c->tok), cudaFree(c->cos), cudaFree(c->sin), cudaFree(c->aq), cudaFree(c->ae), cudaFree(c->as);
        free(c->hdst), free(c->hsrc), free(c->rope_host), free(c->emb);
        if (c->cublas) c->cublas_destroy(c->cublas);
        if (c->cublas_lib) dlclose(c->cublas_lib);
        free(c);
    }
    free(be);
}

/* cuBLAS from the CUDA Toolkit the binary was built with, found by the dynamic loader */
static int open_cublas(cuda_ctx *c) {
#define CU_STR2(x) #x
#define CU_STR(x) CU_STR2(x)
    const char *names[] = {"libcublas.so." CU_STR(CUBLAS_VER_MAJOR), "libcublas.so"};
    for (size_t i = 0; i < 2 && !c->cublas_lib; i++) c->cublas_lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    DS_CHECK(c->cublas_lib, "cuda backend: cannot open cuBLAS (%s); is the CUDA Toolkit's lib64 on LD_LIBRARY_PATH?",
             dlerror());
    cublas_create_fn create = (cublas_create_fn)dlsym(c->cublas_lib, "cublasCreate_v2");
    c->cublas_destroy = (cublas_destroy_fn)dlsym(c->cublas_lib, "cublasDestroy_v2");
    c->sgemm = (cublas_sgemm_fn)dlsym(c->cublas_lib, "cublasSgemm_v2");
    DS_CHECK(create && c->cublas_destroy && c->sgemm, "cuda backend: cuBLAS lacks cublasCreate_v2/cublasSgemm_v2");
    cublasStatus_t st = create(&c->cublas);
    DS_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuda backend: cublasCreate failed (status %d)", (int)st);
    return 0;
fail:
    return -1;
}

backend *backend_cuda_new(const backend_opts *o) {
    int exact = o ? o->exact : 0;
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev < 1) {
        ds_error("cuda backend: no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        cudaGetLastError();
        return NULL;
    }
    backend *be = ds_calloc(1, sizeof *be, "backend");
    cuda_ctx *c = ds_calloc(1, sizeof *c, "backend context");
    if (!be || !c) {
        free(be);
        free(c);
        return NULL;
    }
    be->ctx = c;
    be->destroy = cuda_destroy;
    struct cudaDeviceProp p;
    if (cu_ok(cudaSetDevice(0), "select device 0") || cu_ok(cudaGetDeviceProperties(&p, 0), "device properties") ||
        open_cublas(c) || prof_new(c) || graphs_new(c)) {
        cuda_destroy(be);
        return NULL;
    }
    snprintf(c->gpu, sizeof c->gpu, "%.95s", p.name);
    be->name = "cuda";
    snprintf(be->kernels, sizeof be->kernels, "cuda %s, sm_%d%d%s", exact ? "fp32 (exact)" : "int8", p.major, p.minor,
             c->graphs ? ", graphs" : "");
    be->n_threads = 1;
    be->exact = exact;
    c->i8 = !exact;
    be->kv_bf16 = !exact; /* the CPU's int8 contract keeps bf16 caches: the same values */
    be->gemm_min_T = 32;
    be->device = c->gpu;
    be->prepare = cuda_prepare;
    be->prepare_mats = cuda_prepare_mats;
    be->forget = cuda_forget;
    be->forget_mats = cuda_forget_mats;
    be->alloc = cuda_alloc;
    be->release = cuda_release;
    be->to_host = cuda_to_host;
    be->to_device = cuda_to_device;
    be->copy = cuda_copy;
    be->embed = cuda_embed;
    be->rmsnorm = cuda_rmsnorm;
    be->matmul = cuda_matmul;
    be->rope = cuda_rope;
    be->kv_write = cuda_kv_write;
    be->attention = cuda_attention;
    be->swiglu = cuda_swiglu;
    be->add = cuda_add;
    be->add_bias = cuda_add_bias;
    be->fill_random = cuda_fill_random;
    be->bandwidth = cuda_bandwidth;
    be->session = cuda_session;
    be->matmul_add = cuda_matmul_add;
    return be;
}

#else
typedef int backend_cuda_not_built; /* ISO C wants a declaration in every translation unit */
#endif
