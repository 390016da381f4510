/* backend_cpu.c — the CPU backend: OpenMP over rows, the run-time selected kernel path
 * (kernels_cpu.h) for quantized weights, OpenBLAS sgemm for large batches.
 *
 * A Q4_1 / Q8_0 matrix is read in the backend's repacked copy by the fused kernels: each weight
 * block is unpacked once for a tile of 4 tokens, so verifying several draft tokens costs little more
 * than one, and every output is computed in the same order whatever T is. The activations are
 * quantized to int8 per block of 32 (the default contract, at every batch size, so a token's logits
 * never depend on what else is in its batch) or fp32 (exact; see kernels_cpu.h for both). On the
 * exact contract, from gemm_min_T rows on (prefill), and for other weight types at any size (fp32
 * drafter weights, F16, ...) rows are decoded to fp32 instead: 4 at a time into an L1 buffer and
 * dotted with every token for small batches, 64 at a time into L2 and handed to OpenBLAS sgemm for
 * large ones; the exact contract's two regimes agree to float rounding. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "base/common.h"
#include "kernels/kernels_cpu.h"
#include "formats/quant.h"

void openblas_set_num_threads(int); /* OpenBLAS extension; our threads split the GEMM instead */

#define MAX_THREADS 256
#define ROWS_PER_GROUP 4 /* weight rows dequantized together by the generic small-batch path */
#define GEMM_ROWS 64     /* weight rows dequantized per sgemm call by the large-batch path */

/* the backend's repacked copy of a matrix, found by the address of the file's data */
typedef struct {
    const void *key;
    qk_mat m;
} packed_slot;

typedef struct {
    const qk_kernels *k;
    qk_layout layout;           /* rows for the exact contract's kernels, panels for the int8 ones */
    packed_slot *slots;         /* open addressing, power-of-two capacity */
    size_t n_slots, n_used;
    float *wbuf[MAX_THREADS];   /* [GEMM_ROWS][max_cols] dequantized weight rows */
    size_t wbuf_cols;
    float *sbuf[MAX_THREADS];   /* attention scores */
    size_t sbuf_len;
    float *xsum;                /* [T][cols/32] block sums of the activations (exact Q4_1 kernel) */
    size_t xsum_len;
    qk_act act;                 /* int8 activations */
    size_t act_len;
    int attn_gemm_min_T;        /* requests adding this many tokens attend through two GEMMs */
} cpu_ctx;

/* ------------------------------------------------------------------------- packed weights */

static size_t slot_of(const packed_slot *s, size_t cap, const void *key) {
    size_t h = (size_t)(((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
    while (s[h].key && s[h].key != key) h = (h + 1) & (cap - 1);
    return h;
}

static const qk_mat *packed_find(const cpu_ctx *c, const qmat *w) {
    if (!c->n_slots) return NULL;
    const packed_slot *s = &c->slots[slot_of(c->slots, c->n_slots, w->data)];
    return s->key ? &s->m : NULL;
}

/* the packed copy of w, made on first sight (qk_supported types only) */
static const qk_mat *packed_get(cpu_ctx *c, const qmat *w) {
    const qk_mat *p = packed_find(c, w);
    if (p) {
        if (p->rows != w->rows || p->cols != w->cols || p->type != w->type) {
            ds_error("matmul: a %dx%d %s matrix shares its data with a packed %dx%d one", w->rows, w->cols,
                     ggml_type_name(w->type), p->rows, p->cols);
            return NULL;
        }
        return p;
    }
    if (2 * (c->n_used + 1) > c->n_slots) { /* grow, keeping the load under 1/2 */
        size_t cap = c->n_slots ? 2 * c->n_slots : 256;
        packed_slot *ns = ds_calloc(cap, sizeof *ns, "packed weight table");
        if (!ns) return NULL;
        for (size_t i = 0; i < c->n_slots; i++)
            if (c->slots[i].key) ns[slot_of(ns, cap, c->slots[i].key)] = c->slots[i];
        free(c->slots);
        c->slots = ns;
        c->n_slots = cap;
    }
    packed_slot *s = &c->slots[slot_of(c->slots, c->n_slots, w->data)];
    if (qk_pack(w, c->layout, &s->m)) return NULL;
    s->key = w->data;
    c->n_used++;
    return &s->m;
}

static int cpu_prepare_mats(backend *be, const qmat *const *W, int n) {
    for (int i = 0; i < n; i++)
        if (qk_supported(W[i]) && !packed_get(be->ctx, W[i])) return -1;
    return 0;
}

/* Repack every matrix the fused kernels read, up front (views of the model that share its layers,
 * like a self-draft, find the same copies: the table is keyed by the weights' address). */
static int model_mats(const model *m, const qmat **out);
static int cpu_prepare(backend *be, const model *m) {
    const qmat **ws = ds_malloc(sizeof *ws * (size_t)(1 + 7 * m->cfg.n_layers), "weight list");
    if (!ws) return -1;
    int rc = cpu_prepare_mats(be, ws, model_mats(m, ws));
    free(ws);
    return rc;
}

/* every matrix of a model, for prepare and forget */
static int model_mats(const model *m, const qmat **out) {
    int n = 0;
    out[n++] = &m->output;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        const qmat *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) out[n++] = ws[i];
    }
    return n;
}

static void cpu_forget_mats(backend *be, const qmat *const *ws, int n) {
    cpu_ctx *c = be->ctx;
    if (!c->n_slots) return;
    /* free the matching copies, then rebuild the table from the survivors (open addressing) */
    packed_slot *old = c->slots;
    size_t cap = c->n_slots;
    for (size_t i = 0; i < cap; i++)
        for (int j = 0; j < n && old[i].key; j++)
            if (old[i].key == ws[j]->data) {
                qk_mat_free(&old[i].m);
                old[i].key = NULL;
                c->n_used--;
            }
    packed_slot *ns = ds_calloc(cap, sizeof *ns, "packed weight table");
    if (ns) {
        for (size_t i = 0; i < cap; i++)
            if (old[i].key) ns[slot_of(ns, cap, old[i].key)] = old[i];
        c->slots = ns;
        free(old);
    } else { /* keep the table usable: no deletion marks needed if nothing else is ever looked up */
        c->n_used = 0;
        for (size_t i = 0; i < cap; i++)
            if (old[i].key) qk_mat_free(&old[i].m), old[i].key = NULL;
    }
}

static void cpu_forget(backend *be, const model *m) {
    const qmat **ws = ds_malloc(sizeof *ws * (size_t)(1 + 7 * m->cfg.n_layers), "weight list");
    if (!ws) return;
    cpu_forget_mats(be, ws, model_mats(m, ws));
    free(ws);
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
static int cpu_memcpy(backend *be, void *dst, const void *src, size_t n) {
    DS_UNUSED(be);
    if (n && dst != src) memmove(dst, src, n);
    return 0;
}

/* Per-thread scratch, grown outside parallel regions. */
static int ensure_wbuf(backend *be, size_t cols) {
    cpu_ctx *c = be->ctx;
    if (c->wbuf_cols >= cols) return 0;
    for (int t = 0; t < be->n_threads; t++) {
        free(c->wbuf[t]);
        c->wbuf[t] = ds_aligned_alloc(sizeof(float) * GEMM_ROWS * cols, "matmul scratch");
        if (!c->wbuf[t]) {
            c->wbuf_cols = 0;
            return -1;
        }
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
        if (!c->sbuf[t]) {
            c->sbuf_len = 0;
            return -1;
        }
    }
    c->sbuf_len = n;
    return 0;
}

static int ensure_act(cpu_ctx *c, int T, int cols) {
    size_t n = (size_t)T * (size_t)cols;
    if (c->act_len >= n) return 0;
    free(c->act.q), free(c->act.e), free(c->act.s), free(c->act.ps);
    c->act_len = 0;
    c->act.q = ds_aligned_alloc(n, "int8 activations");
    c->act.e = ds_aligned_alloc(sizeof(float) * (n / 32 + 1), "int8 activation scales");
    c->act.s = ds_aligned_alloc(sizeof(float) * (n / 32 + 1), "int8 activation sums");
    c->act.ps = ds_aligned_alloc(sizeof(int32_t) * (n / 32 + 1), "int8 activation sums");
    if (!c->act.q || !c->act.e || !c->act.s || !c->act.ps) return -1;
    c->act_len = n;
    return 0;
}

/* ----------------------------------------------------------------------------------------- ops */

static int cpu_embed(backend *be, float *out, const qmat *emb, const int *tok, int T) {
    DS_UNUSED(be);
    for (int t = 0; t < T; t++) qmat_row_f32(emb, tok[t], out + (size_t)t * emb->cols);
    return 0;
}

static int cpu_rmsnorm(backend *be, float *out, const float *x, const float *w, int n_rows, int C, float eps) {
#pragma omp parallel for num_threads(be->n_threads) if (n_rows >= 64)
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * C;
        float *o = out + (size_t)r * C;
        /* the squares (exact in double) summed in 8 lanes, lane[i mod 8] in order of i, then halved
         * pairwise: one chain of C dependent adds was ~0.8 us a row, serial at decode */
        double l[8] = {0};
        int i = 0;
        for (; i + 8 <= C; i += 8)
            for (int j = 0; j < 8; j++) l[j] += (double)xr[i + j] * xr[i + j];
        for (; i < C; i++) l[i % 8] += (double)xr[i] * xr[i];
        for (int h = 4; h >= 1; h /= 2)
            for (int j = 0; j < h; j++) l[j] = l[j] + l[j + h];
        double ss = l[0];
        float s = (float)(1.0 / sqrt(ss / C + eps));
        for (int i = 0; i < C; i++) o[i] = xr[i] * s * w[i];
    }
    return 0;
}

static int cpu_matmul(backend *be, int n, float *const *out, const qmat *const *W, const float *x, int T) {
    cpu_ctx *c = be->ctx;
    int cols = W[0]->cols;
    const qk_mat *pk[8];
    DS_CHECK(n >= 1 && n <= 8, "matmul: %d matrices in one call (1..8)", n);
    for (int i = 1; i < n; i++)
        DS_CHECK(W[i]->cols == cols, "matmul: matrices sharing an input must have the same width (%d vs %d)", W[i]->cols,
                 cols);
    if (T <= 0) return 0;
    DS_TRY(ensure_wbuf(be, (size_t)cols));
    /* which matrices the fused kernels take: all quantized ones on the int8 contract (at every T,
     * so a token's result never depends on its batch), only small batches on the exact one */
    int gemm = T >= be->gemm_min_T, need_sums = 0, need_act = 0;
    for (int i = 0; i < n; i++) {
        pk[i] = NULL;
        if (!qk_supported(W[i]) || (gemm && be->exact)) continue;
        DS_TRYP(pk[i] = packed_get(c, W[i]));
        if (be->exact) need_sums |= W[i]->type == GGML_Q4_1;
        else need_act = 1;
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
    if (need_act) {
        DS_TRY(ensure_act(c, T, cols));
        c->act.T = T, c->act.cols = cols, c->act.nb = cols / 32;
    }
    const qk_kernels *k = c->k;
#pragma omp parallel num_threads(be->n_threads)
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        float *buf = c->wbuf[tid], res[ROWS_PER_GROUP];
        if (need_act) { /* each thread quantizes its share of the tokens, then all read all */
            k->quantize(x, (int)((long)T * tid / nth), (int)((long)T * (tid + 1) / nth), cols, &c->act);
#pragma omp barrier
        }
        for (int i = 0; i < n; i++) {
            const qmat *w = W[i];
            int rows = w->rows;
            to_float_fn deq = ggml_type_get(w->type)->to_float;
            if (pk[i]) { /* fused kernel on this thread's slice of rows (whole panels) */
                int r0, r1;
                qk_split(pk[i], tid, nth, &r0, &r1);
                if (be->exact) k->rows_f32(pk[i], r0, r1, x, c->xsum, T, out[i], (size_t)rows);
                else k->rows_i8(pk[i], r0, r1, &c->act, out[i], (size_t)rows);
            } else if (gemm) {
                /* decode GEMM_ROWS rows of this thread's slice into L2 and run sgemm on them: the
                 * decode cost is shared by all T tokens, and no fp32 copy of the model is kept */
                int r0 = (int)((long)rows * tid / nth), r1 = (int)((long)rows * (tid + 1) / nth);
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
            } else {
                int groups = (rows + ROWS_PER_GROUP - 1) / ROWS_PER_GROUP;
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
                        k->dot_rows(wr, (size_t)cols, nr, x + (size_t)t * cols, cols, res);
                        float *o = out[i] + (size_t)t * rows + r0;
                        for (int j = 0; j < nr; j++) o[j] = res[j];
                    }
                }
            }
        }
    }
    return 0;
fail:
    return -1;
}

static int cpu_rope(backend *be, float *x, int T, int n_heads, const rope_tables *rt) {
    int hd = rt->head_dim, half = hd / 2;
#pragma omp parallel for num_threads(be->n_threads) if (T >= 64)
    for (int t = 0; t < T; t++) {
        const float *cs = rt->cos + (size_t)t * half, *sn = rt->sin + (size_t)t * half;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)t * n_heads + h) * hd;
            if (rt->neox) /* pairs (i, i + half): two loops the compiler vectorizes */
                for (int i = 0; i < half; i++) {
                    float x0 = v[i], x1 = v[i + half];
                    v[i] = x0 * cs[i] - x1 * sn[i];
                    v[i + half] = x0 * sn[i] + x1 * cs[i];
                }
            else
                for (int i = 0; i < half; i++) {
                    float x0 = v[2 * i], x1 = v[2 * i + 1];
                    v[2 * i] = x0 * cs[i] - x1 * sn[i];
                    v[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
                }
        }
    }
    return 0;
}

static int cpu_kv_write(backend *be, const attn_batch *ab, int layer, const float *k, const float *v) {
    DS_UNUSED(be);
    for (int t = 0; t < ab->T; t++) {
        kv_cache *kv = ab->kv[ab->seq[t]];
        size_t d = (size_t)kv->kv_dim, hd = (size_t)kv->head_dim, ld = kv_ld(kv);
        if (ab->pos[t] < 0 || ab->pos[t] >= kv->cap) {
            ds_error("kv_write: position %d outside the cache (capacity %d)", ab->pos[t], kv->cap);
            return -1;
        }
        for (int h = 0; h < kv->n_heads; h++) {
            size_t at = kv_head(kv, h) + (size_t)ab->pos[t] * ld;
            memcpy(kv->k[layer] + at, k + (size_t)t * d + h * hd, hd * sizeof(float));
            memcpy(kv->v[layer] + at, v + (size_t)t * d + h * hd, hd * sizeof(float));
        }
    }
    return 0;
}

static int n_visible(const attn_batch *ab, int t) { return ab->n_vis ? ab->n_vis[t] : ab->pos[t] + 1; }

/* On the exact contract a request with many new tokens (prefill) runs each head as two GEMMs:
 * S = Q K^T over all its visible positions, mask per row, softmax, O = P V. Otherwise every query
 * row takes attend_multi, whose result for a row does not depend on what else it is computed with:
 * a task is one KV head of one request and a slice of that request's queries (its new tokens times
 * the group's heads, token-major), so K and V are read once per slice, not once per token.
 * Slices are cut so that the batch makes at least two tasks a thread (one decode token: 3 KV heads
 * on 2 threads would leave one idle a third of the time), and at most ATT_QMAX queries each. */
#define ATT_QMAX 48
typedef struct {
    int t0, kvh, q0, q1; /* request's first token, KV head, queries [q0, q1) of its run */
} attn_task;

/* queries a slice of a run of len tokens takes: the run cut in `parts`, at most ATT_QMAX */
static int attn_slice(int len, int group, int parts) { return DS_MIN(ATT_QMAX, (len * group + parts - 1) / parts); }

static int cpu_attention(backend *be, float *out, const float *q, const attn_batch *ab, int layer, int n_heads,
                         int n_kv_heads, int hd) {
    cpu_ctx *c = be->ctx;
    int group = n_heads / n_kv_heads, T = ab->T, rc = -1;
    size_t qld = (size_t)n_heads * hd;
    float scale = 1.0f / sqrtf((float)hd);
    /* requests are contiguous runs of the batch: find each run and its widest context */
    int n_runs = 0, *run_start = ds_malloc(sizeof(int) * (size_t)(T + 1), "attention runs");
    attn_task *tasks = NULL;
    if (!run_start) return -1;
    for (int t = 0; t < T; t++)
        if (t == 0 || ab->seq[t] != ab->seq[t - 1]) run_start[n_runs++] = t;
    run_start[n_runs] = T;
    int n_small = 0, n_tasks = 0;
    for (int r = 0; r < n_runs; r++) n_small += run_start[r + 1] - run_start[r] < c->attn_gemm_min_T;
    int parts = DS_MAX(1, (2 * be->n_threads + n_small * n_kv_heads - 1) / DS_MAX(1, n_small * n_kv_heads));
    size_t need = 0, max_tasks = 0;
    for (int r = 0; r < n_runs; r++) {
        int t0 = run_start[r], t1 = run_start[r + 1], len = t1 - t0, maxn = 0;
        const kv_cache *kv = ab->kv[ab->seq[t0]];
        if (kv->n_heads != n_kv_heads || kv->head_dim != hd) {
            ds_error("attention: a cache of %d KV heads of %d for %d KV heads of %d", kv->n_heads, kv->head_dim,
                     n_kv_heads, hd);
            goto done;
        }
        for (int t = t0; t < t1; t++) {
            int nv = n_visible(ab, t);
            if (nv < 1 || nv > kv->cap) {
                ds_error("attention: token %d would see %d positions of a cache of %d", t, nv, kv->cap);
                goto done;
            }
            maxn = DS_MAX(maxn, nv);
        }
        int qn = len * group, qc = attn_slice(len, group, parts);
        if (len >= c->attn_gemm_min_T) need = DS_MAX(need, (size_t)len * (size_t)maxn);
        else need = DS_MAX(need, (size_t)qc * (size_t)maxn), max_tasks += (size_t)n_kv_heads * (size_t)((qn + qc - 1) / qc);
    }
    if (ensure_sbuf(be, need)) goto done;
    if (!(tasks = ds_malloc(sizeof *tasks * (max_tasks + 1), "attention tasks"))) goto done;
    for (int r = 0; r < n_runs; r++) {
        int t0 = run_start[r], t1 = run_start[r + 1], len = t1 - t0;
        const kv_cache *kv = ab->kv[ab->seq[t0]];
        size_t ld = kv_ld(kv);
        if (len < c->attn_gemm_min_T) { /* slices for the per-row kernel */
            int qn = len * group, qc = attn_slice(len, group, parts);
            for (int h = 0; h < n_kv_heads; h++)
                for (int q0 = 0; q0 < qn; q0 += qc) tasks[n_tasks++] = (attn_task){t0, h, q0, DS_MIN(qn, q0 + qc)};
            continue;
        }
        int n_ctx = 0;
        for (int t = t0; t < t1; t++) n_ctx = DS_MAX(n_ctx, n_visible(ab, t));
#pragma omp parallel for num_threads(be->n_threads) schedule(dynamic, 1)
        for (int h = 0; h < n_heads; h++) {
            float *S = c->sbuf[omp_get_thread_num()];
            const float *K = kv->k[layer] + kv_head(kv, h / group), *V = kv->v[layer] + kv_head(kv, h / group);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, len, n_ctx, hd, scale, q + (size_t)t0 * qld + (size_t)h * hd,
                        (int)qld, K, (int)ld, 0.0f, S, n_ctx);
            for (int i = 0; i < len; i++) {
                float *row = S + (size_t)i * n_ctx;
                for (int j = n_visible(ab, t0 + i); j < n_ctx; j++) row[j] = -INFINITY;
                qk_softmax(row, n_ctx);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, len, hd, n_ctx, 1.0f, S, n_ctx, V, (int)ld, 0.0f,
                        out + (size_t)t0 * qld + (size_t)h * hd, (int)qld);
        }
    }
    const qk_kernels *k = c->k;
#pragma omp parallel for num_threads(be->n_threads) schedule(dynamic, 1) if (n_tasks >= 2)
    for (int it = 0; it < n_tasks; it++) {
        const attn_task *a = &tasks[it];
        const kv_cache *kv = ab->kv[ab->seq[a->t0]];
        float *o[ATT_QMAX];
        const float *qq[ATT_QMAX];
        int nv[ATT_QMAX];
        for (int m = a->q0; m < a->q1; m++) { /* query m: token t0 + m / group, head kvh * group + m % group */
            int t = a->t0 + m / group, h = a->kvh * group + m % group;
            o[m - a->q0] = out + (size_t)t * qld + (size_t)h * hd;
            qq[m - a->q0] = q + (size_t)t * qld + (size_t)h * hd;
            nv[m - a->q0] = n_visible(ab, t);
        }
        k->attend_multi(o, qq, nv, a->q1 - a->q0, kv->k[layer] + kv_head(kv, a->kvh), kv->v[layer] + kv_head(kv, a->kvh),
                        kv_ld(kv), hd, scale, c->sbuf[omp_get_thread_num()]);
    }
    rc = 0;
done:
    free(tasks);
    free(run_start);
    return rc;
}

static int cpu_swiglu(backend *be, float *out, const float *gate, const float *up, size_t n) {
    const qk_kernels *k = ((cpu_ctx *)be->ctx)->k;
    /* elementwise, so any split gives the same bits; a verify step's 8 x 1536 is worth two threads */
#pragma omp parallel num_threads(be->n_threads) if (n >= 4096)
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        size_t i0 = n * (size_t)tid / (size_t)nth / 8 * 8, i1 = tid + 1 == nth ? n : n * (size_t)(tid + 1) / (size_t)nth / 8 * 8;
        k->swiglu(out + i0, gate + i0, up + i0, i1 - i0);
    }
    return 0;
}

static int cpu_add(backend *be, float *x, const float *y, size_t n) {
#pragma omp parallel for num_threads(be->n_threads) if (n >= 65536)
    for (size_t i = 0; i < n; i++) x[i] += y[i];
    return 0;
}

static void cpu_destroy(backend *be) {
    cpu_ctx *c = be->ctx;
    if (c) {
        for (int t = 0; t < MAX_THREADS; t++) {
            free(c->wbuf[t]);
            free(c->sbuf[t]);
        }
        for (size_t i = 0; i < c->n_slots; i++)
            if (c->slots[i].key) qk_mat_free(&c->slots[i].m);
        free(c->slots);
        free(c->xsum);
        free(c->act.q), free(c->act.e), free(c->act.s), free(c->act.ps);
        free(c);
    }
    free(be);
}

backend *backend_cpu_new(const backend_opts *o) {
    backend_opts def = {0};
    if (!o) o = &def;
    cpu_isa isa;
    if (cpu_isa_parse(o->isa, &isa)) return NULL;
    int n_threads = o->n_threads <= 0 ? omp_get_num_procs() : o->n_threads;
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    backend *be = ds_calloc(1, sizeof *be, "backend");
    cpu_ctx *c = ds_calloc(1, sizeof *c, "backend context");
    if (!be || !c) {
        free(be);
        free(c);
        return NULL;
    }
    c->k = qk_kernels_for(isa);
    c->layout = o->exact ? QK_ROWS : QK_PANELS;
    qk_exp_use(c->k); /* sampling's softmax on the same path (bit-identical on every path) */
    openblas_set_num_threads(1);
    be->name = "cpu";
    snprintf(be->kernels, sizeof be->kernels, "%s %s", c->k->name, o->exact ? "fp32 (exact)" : "int8");
    be->n_threads = n_threads;
    be->exact = o->exact;
    be->gemm_min_T = 32;
    be->kv_head_major = 1;
    /* the int8 contract is batch-invariant at every size: attention stays per row (a GEMM's other
     * summation order would move activations across int8 rounding boundaries) */
    c->attn_gemm_min_T = o->exact ? 32 : 1 << 30;
    be->ctx = c;
    be->prepare = cpu_prepare;
    be->prepare_mats = cpu_prepare_mats;
    be->forget = cpu_forget;
    be->forget_mats = cpu_forget_mats;
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
