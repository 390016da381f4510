/* backend_cpu.c — the reference backend: OpenMP over rows, OpenBLAS sgemm for large batches.
 *
 * Matmul has two paths with one contract. Below gemm_min_T rows the weights stay in their file
 * format: each thread dequantizes up to 4 weight rows into an L1-resident fp32 buffer and dots them
 * with every token of the batch, so the cost of decoding the weights is shared by the whole batch
 * (what makes verifying several draft tokens nearly as cheap as one), and each output element is
 * computed in the same order whatever T is — a token's logits do not depend on what else is in its
 * batch. From gemm_min_T rows on (prefill) each thread decodes 64 weight rows at a time into L2
 * and hands them to OpenBLAS sgemm; the two paths agree to float rounding. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "backend.h"
#include "common.h"
#include "kernels_cpu.h"
#include "quant.h"

void openblas_set_num_threads(int); /* OpenBLAS extension; our threads split the GEMM instead */

#define MAX_THREADS 256
#define ROWS_PER_GROUP 4 /* weight rows dequantized together by the generic small-batch path */
#define GEMM_ROWS 64     /* weight rows dequantized per sgemm call by the large-batch path */

typedef struct {
    float *wbuf[MAX_THREADS];   /* [GEMM_ROWS][max_cols] dequantized weight rows */
    size_t wbuf_cols;
    float *sbuf[MAX_THREADS];   /* attention scores */
    size_t sbuf_len;
    float *xsum;                /* [T][cols/32] block sums of the activations (Q4_1 kernel) */
    size_t xsum_len;
} cpu_ctx;

/* --------------------------------------------------------------------------------- dot products */

#if defined(__AVX2__) && defined(__FMA__)
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

/* res[j] = w[j] . x for nr (1..4) rows of length n, stride ldw. Every row is accumulated the same
 * way (two 8-lane partial sums over alternating chunks of 8, then a fixed reduction, then the
 * scalar tail), so the value of a dot does not depend on nr. */
static void dot_rows(const float *w, size_t ldw, int nr, const float *x, int n, float *res) {
    int k = 0;
#if defined(__AVX2__) && defined(__FMA__)
    int n16 = n & ~15;
    if (nr == 4) {
        __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
        const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
        for (; k < n16; k += 16) {
            __m256 xa = _mm256_loadu_ps(x + k), xb = _mm256_loadu_ps(x + k + 8);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + k), xa, a0);
            b0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + k + 8), xb, b0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + k), xa, a1);
            b1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + k + 8), xb, b1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + k), xa, a2);
            b2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + k + 8), xb, b2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + k), xa, a3);
            b3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + k + 8), xb, b3);
        }
        res[0] = hsum8(_mm256_add_ps(a0, b0));
        res[1] = hsum8(_mm256_add_ps(a1, b1));
        res[2] = hsum8(_mm256_add_ps(a2, b2));
        res[3] = hsum8(_mm256_add_ps(a3, b3));
    } else {
        for (int j = 0; j < nr; j++) {
            const float *wj = w + (size_t)j * ldw;
            __m256 a = _mm256_setzero_ps(), b = a;
            for (int kk = 0; kk < n16; kk += 16) {
                a = _mm256_fmadd_ps(_mm256_loadu_ps(wj + kk), _mm256_loadu_ps(x + kk), a);
                b = _mm256_fmadd_ps(_mm256_loadu_ps(wj + kk + 8), _mm256_loadu_ps(x + kk + 8), b);
            }
            res[j] = hsum8(_mm256_add_ps(a, b));
        }
        k = n16;
    }
    k = n16;
#else
    for (int j = 0; j < nr; j++) res[j] = 0.0f;
#endif
    for (int j = 0; j < nr; j++) {
        const float *wj = w + (size_t)j * ldw;
        float t = 0.0f;
        for (int kk = k; kk < n; kk++) t += wj[kk] * x[kk];
        res[j] += t;
    }
}

/* ------------------------------------------------------------------------------------- memory */

static void *cpu_alloc(backend *be, size_t n) {
    DS_UNUSED(be);
    return ds_aligned_alloc(n, "backend buffer");
}
static void cpu_release(backend *be, void *p) {
    DS_UNUSED(be);
    free(p);
}
static void cpu_memcpy(backend *be, void *dst, const void *src, size_t n) {
    DS_UNUSED(be);
    if (n) memcpy(dst, src, n);
}

/* Per-thread scratch, grown outside parallel regions. */
static int ensure_wbuf(backend *be, size_t cols) {
    cpu_ctx *c = be->ctx;
    if (c->wbuf_cols >= cols) return 0;
    for (int t = 0; t < be->n_threads; t++) {
        free(c->wbuf[t]);
        c->wbuf[t] = ds_aligned_alloc(sizeof(float) * GEMM_ROWS * cols, "matmul scratch");
        if (!c->wbuf[t]) return -1;
    }
    c->wbuf_cols = cols;
    return 0;
}

static int ensure_sbuf(backend *be, size_t len) {
    cpu_ctx *c = be->ctx;
    if (c->sbuf_len >= len) return 0;
    size_t n = DS_MAX(len, 2 * c->sbuf_len);
    for (int t = 0; t < be->n_threads; t++) {
        free(c->sbuf[t]);
        c->sbuf[t] = ds_aligned_alloc(sizeof(float) * n, "attention scratch");
        if (!c->sbuf[t]) return -1;
    }
    c->sbuf_len = n;
    return 0;
}

/* ----------------------------------------------------------------------------------------- ops */

static void cpu_embed(backend *be, float *out, const qmat *emb, const int *tok, int T) {
    DS_UNUSED(be);
    for (int t = 0; t < T; t++) qmat_row_f32(emb, tok[t], out + (size_t)t * emb->cols);
}

static void cpu_rmsnorm(backend *be, float *out, const float *x, const float *w, int n_rows, int C, float eps) {
#pragma omp parallel for num_threads(be->n_threads) if (n_rows >= 64)
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * C;
        float *o = out + (size_t)r * C;
        double ss = 0;
        for (int i = 0; i < C; i++) ss += (double)xr[i] * xr[i];
        float s = (float)(1.0 / sqrt(ss / C + eps));
        for (int i = 0; i < C; i++) o[i] = xr[i] * s * w[i];
    }
}

static int cpu_matmul(backend *be, int n, float *const *out, const qmat *const *W, const float *x, int T) {
    int cols = W[0]->cols;
    for (int i = 1; i < n; i++)
        if (W[i]->cols != cols) {
            ds_error("matmul: matrices sharing an input must have the same width (%d vs %d)", W[i]->cols, cols);
            return -1;
        }
    if (ensure_wbuf(be, (size_t)cols)) return -1;
    cpu_ctx *c = be->ctx;
    if (T >= be->gemm_min_T) {
        /* each thread decodes GEMM_ROWS rows of its slice into L2 and runs sgemm on them: the
         * decode cost is shared by all T tokens, and no fp32 copy of the model is kept */
#pragma omp parallel num_threads(be->n_threads)
        {
            int tid = omp_get_thread_num(), nth = omp_get_num_threads();
            float *buf = c->wbuf[tid];
            for (int i = 0; i < n; i++) {
                const qmat *w = W[i];
                to_float_fn deq = ggml_type_get(w->type)->to_float;
                int rows = w->rows, r0 = (int)((long)rows * tid / nth), r1 = (int)((long)rows * (tid + 1) / nth);
                for (int r = r0; r < r1; r += GEMM_ROWS) {
                    int nr = DS_MIN(GEMM_ROWS, r1 - r);
                    const float *wr = (const float *)w->data + (size_t)r * cols;
                    if (w->type != GGML_F32) {
                        for (int j = 0; j < nr; j++)
                            deq((const uint8_t *)w->data + (size_t)(r + j) * w->row_bytes, buf + (size_t)j * cols, cols);
                        wr = buf;
                    }
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, nr, cols, 1.0f, x, cols, wr, cols, 0.0f,
                                out[i] + r, rows);
                }
            }
        }
        return 0;
    }
    int need_sums = 0;
    for (int i = 0; i < n; i++) {
        if (!qk_supported(W[i]->type)) continue;
        if (!W[i]->packed && !(((qmat *)W[i])->packed = qk_pack(W[i]))) return -1;
        need_sums |= W[i]->type == GGML_Q4_1;
    }
    if (need_sums) {
        size_t len = (size_t)T * (size_t)(cols / 32);
        if (c->xsum_len < len) {
            free(c->xsum);
            c->xsum_len = 0;
            DS_TRYP(c->xsum = ds_aligned_alloc(sizeof(float) * len, "block sums"));
            c->xsum_len = len;
        }
        qk_block_sums(x, T, cols, c->xsum);
    }
#pragma omp parallel num_threads(be->n_threads)
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        float *buf = c->wbuf[tid], res[ROWS_PER_GROUP];
        for (int i = 0; i < n; i++) {
            const qmat *w = W[i];
            if (w->packed) { /* fused kernel on this thread's slice of rows */
                int r0 = (int)((long)w->rows * tid / nth), r1 = (int)((long)w->rows * (tid + 1) / nth);
                qk_rows(w, r0, r1, x, c->xsum, T, out[i], (size_t)w->rows);
                continue;
            }
            to_float_fn deq = ggml_type_get(w->type)->to_float;
            int rows = w->rows, groups = (rows + ROWS_PER_GROUP - 1) / ROWS_PER_GROUP;
            int g0 = (int)((long)groups * tid / nth), g1 = (int)((long)groups * (tid + 1) / nth);
            for (int g = g0; g < g1; g++) {
                int r0 = g * ROWS_PER_GROUP, nr = DS_MIN(ROWS_PER_GROUP, rows - r0);
                const float *wr;
                if (w->type == GGML_F32) {
                    wr = (const float *)w->data + (size_t)r0 * cols;
                } else {
                    for (int j = 0; j < nr; j++)
                        deq((const uint8_t *)w->data + (size_t)(r0 + j) * w->row_bytes, buf + (size_t)j * cols, cols);
                    wr = buf;
                }
                for (int t = 0; t < T; t++) {
                    dot_rows(wr, (size_t)cols, nr, x + (size_t)t * cols, cols, res);
                    float *o = out[i] + (size_t)t * rows + r0;
                    for (int j = 0; j < nr; j++) o[j] = res[j];
                }
            }
        }
    }
    return 0;
fail:
    return -1;
}

static void cpu_rope(backend *be, float *x, int T, int n_heads, const rope_tables *rt) {
    int hd = rt->head_dim, half = hd / 2;
#pragma omp parallel for num_threads(be->n_threads) if (T >= 64)
    for (int t = 0; t < T; t++) {
        const float *cs = rt->cos + (size_t)t * half, *sn = rt->sin + (size_t)t * half;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)t * n_heads + h) * hd;
            for (int i = 0; i < half; i++) {
                int a = rt->neox ? i : 2 * i, b = rt->neox ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs[i] - x1 * sn[i];
                v[b] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
}

static void cpu_kv_write(backend *be, const attn_batch *ab, int layer, const float *k, const float *v) {
    DS_UNUSED(be);
    for (int t = 0; t < ab->T; t++) {
        kv_cache *kv = ab->kv[ab->seq[t]];
        size_t d = (size_t)kv->kv_dim;
        memcpy(kv->k[layer] + (size_t)ab->pos[t] * d, k + (size_t)t * d, d * sizeof(float));
        memcpy(kv->v[layer] + (size_t)ab->pos[t] * d, v + (size_t)t * d, d * sizeof(float));
    }
}

/* o[i] += a * v[i] */
static inline void axpy(float *o, float a, const float *v, int n) {
    int i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 av = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(v + i), _mm256_loadu_ps(o + i)));
#endif
    for (; i < n; i++) o[i] += a * v[i];
}

/* softmax of s[0..n) in place */
static void softmax_row(float *s, int n) {
    float mx = -INFINITY, sum = 0;
    for (int j = 0; j < n; j++) mx = fmaxf(mx, s[j]);
    for (int j = 0; j < n; j++) sum += (s[j] = expf(s[j] - mx));
    float inv = 1.0f / sum;
    for (int j = 0; j < n; j++) s[j] *= inv;
}

/* Attention of one query row against positions 0..pos of one KV head. */
static void attend_row(float *o, const float *q, const float *K, const float *V, size_t ld, int pos, int hd,
                       float scale, float *s) {
    int n = pos + 1;
    for (int j = 0; j < n; j++) {
        float d;
        dot_rows(K + (size_t)j * ld, 0, 1, q, hd, &d);
        s[j] = d * scale;
    }
    softmax_row(s, n);
    for (int i = 0; i < hd; i++) o[i] = 0;
    for (int j = 0; j < n; j++) axpy(o, s[j], V + (size_t)j * ld, hd);
}

/* A request with many new tokens (prefill) runs each head as two GEMMs: S = Q K^T over all its
 * visible positions, causal mask per row, softmax, O = P V. Few new tokens (decode, verification)
 * take the per-row path, whose result for a row does not depend on what else is in the batch. */
static void cpu_attention(backend *be, float *out, const float *q, const attn_batch *ab, int layer, int n_heads,
                          int n_kv_heads, int hd) {
    cpu_ctx *c = be->ctx;
    int group = n_heads / n_kv_heads, T = ab->T;
    size_t qld = (size_t)n_heads * hd;
    float scale = 1.0f / sqrtf((float)hd);
    /* requests are contiguous runs of the batch: find each run and its widest context */
    int n_runs = 0, run_start[T + 1];
    for (int t = 0; t < T; t++)
        if (t == 0 || ab->seq[t] != ab->seq[t - 1]) run_start[n_runs++] = t;
    run_start[n_runs] = T;
    size_t need = 0;
    for (int r = 0; r < n_runs; r++) {
        int t0 = run_start[r], t1 = run_start[r + 1], len = t1 - t0, maxpos = 0;
        for (int t = t0; t < t1; t++) maxpos = DS_MAX(maxpos, ab->pos[t]);
        size_t n = len >= be->gemm_min_T ? (size_t)len * (size_t)(maxpos + 1) : (size_t)(maxpos + 1);
        need = DS_MAX(need, n);
    }
    if (ensure_sbuf(be, need)) {
        memset(out, 0, sizeof(float) * (size_t)T * qld); /* cannot happen after the forward reserved scratch */
        return;
    }
    for (int r = 0; r < n_runs; r++) {
        int t0 = run_start[r], t1 = run_start[r + 1], len = t1 - t0;
        const kv_cache *kv = ab->kv[ab->seq[t0]];
        size_t ld = (size_t)kv->kv_dim;
        if (len >= be->gemm_min_T) {
            int maxpos = 0;
            for (int t = t0; t < t1; t++) maxpos = DS_MAX(maxpos, ab->pos[t]);
            int n_ctx = maxpos + 1;
#pragma omp parallel for num_threads(be->n_threads) schedule(dynamic, 1)
            for (int h = 0; h < n_heads; h++) {
                float *S = c->sbuf[omp_get_thread_num()];
                const float *K = kv->k[layer] + (size_t)(h / group) * hd, *V = kv->v[layer] + (size_t)(h / group) * hd;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, len, n_ctx, hd, scale, q + (size_t)t0 * qld + (size_t)h * hd,
                            (int)qld, K, (int)ld, 0.0f, S, n_ctx);
                for (int i = 0; i < len; i++) {
                    float *row = S + (size_t)i * n_ctx;
                    int p = ab->pos[t0 + i];
                    for (int j = p + 1; j < n_ctx; j++) row[j] = -INFINITY;
                    softmax_row(row, n_ctx);
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, len, hd, n_ctx, 1.0f, S, n_ctx, V, (int)ld, 0.0f,
                            out + (size_t)t0 * qld + (size_t)h * hd, (int)qld);
            }
        } else {
#pragma omp parallel for num_threads(be->n_threads) schedule(dynamic, 1) if (len * n_heads >= 4)
            for (int th = 0; th < len * n_heads; th++) {
                int t = t0 + th / n_heads, h = th % n_heads, kvh = h / group;
                attend_row(out + (size_t)t * qld + (size_t)h * hd, q + (size_t)t * qld + (size_t)h * hd,
                           kv->k[layer] + (size_t)kvh * hd, kv->v[layer] + (size_t)kvh * hd, ld, ab->pos[t], hd, scale,
                           c->sbuf[omp_get_thread_num()]);
            }
        }
    }
}

static void cpu_swiglu(backend *be, float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel for num_threads(be->n_threads) if (n >= 65536)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void cpu_add(backend *be, float *x, const float *y, size_t n) {
#pragma omp parallel for num_threads(be->n_threads) if (n >= 65536)
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static int pack(qmat *w) {
    if (!qk_supported(w->type) || w->packed) return 0;
    return (w->packed = qk_pack(w)) ? 0 : -1;
}

/* Repack every matrix the fused kernels read, up front (so views of the model that share its
 * layers, like a self-draft, share the packed copies too). */
static int cpu_prepare(backend *be, model *m) {
    DS_UNUSED(be);
    if (pack(&m->output)) return -1;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        layer_weights *L = &m->layers[l];
        qmat *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++)
            if (pack(ws[i])) return -1;
    }
    return 0;
}

static void cpu_destroy(backend *be) {
    cpu_ctx *c = be->ctx;
    for (int t = 0; t < MAX_THREADS; t++) {
        free(c->wbuf[t]);
        free(c->sbuf[t]);
    }
    free(c->xsum);
    free(c);
    free(be);
}

backend *backend_cpu_new(int n_threads) {
    if (n_threads <= 0) n_threads = omp_get_num_procs();
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    backend *be = ds_calloc(1, sizeof *be, "backend");
    cpu_ctx *c = ds_calloc(1, sizeof *c, "backend context");
    if (!be || !c) {
        free(be);
        free(c);
        return NULL;
    }
    openblas_set_num_threads(1);
    be->name = "cpu";
    be->n_threads = n_threads;
    be->gemm_min_T = 32;
    be->ctx = c;
    be->prepare = cpu_prepare;
    be->alloc = cpu_alloc;
    be->release = cpu_release;
    be->to_host = cpu_memcpy;
    be->to_device = cpu_memcpy;
    be->copy = cpu_memcpy;
    be->embed = cpu_embed;
    be->rmsnorm = cpu_rmsnorm;
    be->matmul = cpu_matmul;
    be->rope = cpu_rope;
    be->kv_write = cpu_kv_write;
    be->attention = cpu_attention;
    be->swiglu = cpu_swiglu;
    be->add = cpu_add;
    be->destroy = cpu_destroy;
    return be;
}

void backend_free(backend *be) {
    if (be) be->destroy(be);
}

/* -------------------------------------------------------------------------------- KV caches */

kv_cache *kv_cache_new(backend *be, const model_config *c, int cap) {
    kv_cache *kv = ds_calloc(1, sizeof *kv, "kv cache");
    if (!kv) return NULL;
    kv->n_layers = c->n_layers;
    kv->kv_dim = c->n_kv_heads * c->head_dim;
    kv->k = ds_calloc((size_t)c->n_layers, sizeof(float *), "kv cache");
    kv->v = ds_calloc((size_t)c->n_layers, sizeof(float *), "kv cache");
    if (!kv->k || !kv->v || kv_cache_reserve(be, kv, cap > 0 ? cap : 64)) {
        kv_cache_free(be, kv);
        return NULL;
    }
    return kv;
}

int kv_cache_reserve(backend *be, kv_cache *kv, int cap) {
    if (cap <= kv->cap) return 0;
    size_t row = sizeof(float) * (size_t)kv->kv_dim;
    for (int l = 0; l < kv->n_layers; l++) {
        float *nk = be->alloc(be, row * (size_t)cap), *nv = be->alloc(be, row * (size_t)cap);
        if (!nk || !nv) {
            be->release(be, nk);
            be->release(be, nv);
            ds_error("out of memory growing a KV cache to %d positions", cap);
            return -1;
        }
        if (kv->k[l]) {
            be->copy(be, nk, kv->k[l], row * (size_t)kv->len);
            be->copy(be, nv, kv->v[l], row * (size_t)kv->len);
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
}

void kv_cache_free(backend *be, kv_cache *kv) {
    if (!kv) return;
    for (int l = 0; l < kv->n_layers; l++) {
        if (kv->k) be->release(be, kv->k[l]);
        if (kv->v) be->release(be, kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    free(kv);
}
