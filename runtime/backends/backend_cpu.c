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
#include <sched.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "../base/common.h"
#include "../kernels/kernels_cpu.h"
#include "../formats/quant.h"

void openblas_set_num_threads(int); /* OpenBLAS extension; our threads split the GEMM instead */

#define MAX_THREADS 256
#define ROWS_PER_GROUP 4 /* weight rows dequantized together by the generic small-batch path */
#define GEMM_ROWS 64     /* weight rows dequantized per sgemm call by the large-batch path */

/* the backend's repacked copy of a matrix, found by the address of the file's data */
typedef struct {
    const void *key;
    qk_mat m;
    const void *succ;  /* the key of the matrix the last matmul after this one's began with (see cpu_matmul) */
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
    qk_act own[MAX_THREADS];    /* a few tokens' int8 activations, each thread's own copy */
    size_t own_len;
    int attn_gemm_min_T;        /* requests adding this many tokens attend through two GEMMs */
    int *attn_runs;             /* attention: first token of each request's run, then T */
    struct attn_task *attn_tasks;
    struct att_run *att_runs;   /* attention split by positions and columns: its runs, scores */
    float *att_s;
    size_t runs_cap, tasks_cap, att_runs_cap, att_s_cap;
    struct team_session *sess;  /* the held team while a forward holds the threads (cpu_session) */
    const void *last_key;       /* the last matrix of the last int8 matmul (cpu_matmul) */
} cpu_ctx;

/* ------------------------------------------------------------------------------- threads */

/* Each op's parallel part is fn(arg, tid, nth), over its share of the work. A part that runs on one
 * thread is called directly, never in an OpenMP region: libgomp builds (mallocs and frees) a team
 * even for if(0) or num_threads(1), and in the gate's tiny worlds that free, next to the heap's top,
 * trimmed and consolidated the heap on every op (a third of their time in malloc and brk).
 *
 * A whole forward can hold the threads (cpu_session): one OpenMP region for all its ~150 ops, in
 * which thread 0 runs the forward and the others wait for parts, posted through a generation
 * counter. A libgomp fork and join cost ~1 us an op here (measured); a post and its join cost a
 * couple of cache-line transfers. The waiting threads are OpenMP's own, so there is no second pool
 * spinning beside libgomp's between forwards. */
typedef void (*team_fn)(void *arg, int tid, int nth);

typedef struct team_session {
    team_fn fn;
    void *arg;
    int nth, quit;
    unsigned gen __attribute__((aligned(64))); /* bumped (release) when a part or the end is posted */
    int done __attribute__((aligned(64)));     /* threads other than 0 done with the current part */
    int bar_count __attribute__((aligned(64)));
    unsigned bar_gen;
} team_session;

/* one step of a wait: spin a while, then yield (more threads than cores must not starve the one
 * that is being waited for) */
static void team_relax(long i) {
#if defined(__x86_64__) || defined(__i386__)
    if (i < 20000) {
        __builtin_ia32_pause();
        return;
    }
#endif
    sched_yield();
}

/* wait until *p != v */
static unsigned team_wait_ne(const unsigned *p, unsigned v) {
    unsigned x;
    for (long i = 0; (x = __atomic_load_n(p, __ATOMIC_ACQUIRE)) == v; i++) team_relax(i);
    return x;
}

/* all nth threads of the held team meet (a central barrier: the last one in bumps the generation) */
static void session_barrier(team_session *s) {
    unsigned g = __atomic_load_n(&s->bar_gen, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&s->bar_count, 1, __ATOMIC_ACQ_REL) == s->nth) {
        __atomic_store_n(&s->bar_count, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&s->bar_gen, 1, __ATOMIC_RELEASE);
    } else team_wait_ne(&s->bar_gen, g);
}

/* a thread other than 0 of a held team: run each posted part until the end is posted */
static void session_worker(team_session *s, int tid) {
    for (unsigned seen = 0;;) {
        seen = team_wait_ne(&s->gen, seen);
        if (s->quit) return;
        s->fn(s->arg, tid, s->nth);
        __atomic_add_fetch(&s->done, 1, __ATOMIC_RELEASE);
    }
}

static team_session *held(const backend *be) {
    team_session *s = ((cpu_ctx *)be->ctx)->sess;
    return s && s->nth > 1 ? s : NULL;
}

static void team_run(const backend *be, int split, team_fn fn, void *arg) {
    if (!split || be->n_threads <= 1) {
        fn(arg, 0, 1);
        return;
    }
    team_session *s = held(be);
    if (s) {
        s->fn = fn, s->arg = arg;
        __atomic_store_n(&s->done, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&s->gen, 1, __ATOMIC_RELEASE);
        fn(arg, 0, s->nth);
        for (long i = 0; __atomic_load_n(&s->done, __ATOMIC_ACQUIRE) < s->nth - 1; i++) team_relax(i);
        return;
    }
#pragma omp parallel num_threads(be->n_threads)
    fn(arg, omp_get_thread_num(), omp_get_num_threads());
}

/* whether n units are worth splitting: at least `forked` of them for an OpenMP fork, `held` when
 * the forward holds the threads */
static int team_worth(const backend *be, long n, long forked, long held_min) {
    return n >= (held(be) ? held_min : forked);
}

/* inside a part: all threads of the part meet */
static void team_sync(const backend *be, int nth) {
    if (nth <= 1) return;
    team_session *s = held(be);
    if (s) session_barrier(s);
    else {
#pragma omp barrier
    }
}

static int cpu_session(backend *be, int (*body)(void *), void *arg) {
    cpu_ctx *c = be->ctx;
    if (be->n_threads <= 1 || c->sess) return body(arg);
    team_session s = {0};
    int rc = 0;
#pragma omp parallel num_threads(be->n_threads)
    {
        int tid = omp_get_thread_num();
        if (tid == 0) {
            s.nth = omp_get_num_threads();
            c->sess = &s;
            rc = body(arg);
            c->sess = NULL;
            s.quit = 1;
            __atomic_add_fetch(&s.gen, 1, __ATOMIC_RELEASE);
        } else session_worker(&s, tid);
    }
    return rc;
}

/* [i0, i1) of n for thread tid of nth */
static void team_share(long n, int tid, int nth, long *i0, long *i1) {
    *i0 = n * tid / nth;
    *i1 = n * (tid + 1) / nth;
}

/* dynamic scheduling: the next unclaimed index of a shared counter */
static int team_next(int *counter) { return __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED); }

/* ------------------------------------------------------------------------- packed weights */

static size_t slot_of(const packed_slot *s, size_t cap, const void *key) {
    size_t h = (size_t)(((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
    while (s[h].key && s[h].key != key) h = (h + 1) & (cap - 1);
    return h;
}

static packed_slot *slot_find(const cpu_ctx *c, const void *key) {
    if (!c->n_slots || !key) return NULL;
    packed_slot *s = &c->slots[slot_of(c->slots, c->n_slots, key)];
    return s->key ? s : NULL;
}

static const qk_mat *packed_find(const cpu_ctx *c, const qmat *w) {
    const packed_slot *s = slot_find(c, w->data);
    return s ? &s->m : NULL;
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
    int n = model_mats(m, ws), rc = 0;
    /* the file's pages behind a packed matrix are never read by the kernels again: each goes back as
     * soon as its copy is made, so the process holds the weights about once, during the packing too
     * (the 1.5B's 1 GB had been resident twice); a later reader of the raw rows (the embedding table
     * when the head is tied, a reference forward) faults in only what it touches */
    for (int i = 0; !rc && i < n; i++) {
        rc = cpu_prepare_mats(be, &ws[i], 1);
        if (!rc && packed_find(be->ctx, ws[i]))
            (void)model_release_mapped(m, ws[i]->data, (size_t)ws[i]->rows * ws[i]->row_bytes);
    }
    /* and once more at the end: reading a matrix maps its neighbours' pages again (the kernel's
     * fault-around, a large folio: 75 of a 144-page matrix's pages on this machine's tmp) */
    for (int i = 0; !rc && i < n; i++)
        if (packed_find(be->ctx, ws[i])) (void)model_release_mapped(m, ws[i]->data, (size_t)ws[i]->rows * ws[i]->row_bytes);
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

static void act_free(qk_act *a) { free(a->q), free(a->e), free(a->s), free(a->ps), free(a->ph), free(a->ph2); }

/* a's buffers for n activations (replacing the old ones) */
static int act_alloc(qk_act *a, size_t n) {
    act_free(a);
    a->q = ds_aligned_alloc(n, "int8 activations");
    a->e = ds_aligned_alloc(sizeof(float) * (n / 32 + 1), "int8 activation scales");
    a->s = ds_aligned_alloc(sizeof(float) * (n / 32 + 1), "int8 activation sums");
    a->ps = ds_aligned_alloc(sizeof(int32_t) * (n / 32 + 1), "int8 activation sums");
    a->ph = ds_aligned_alloc(sizeof(int32_t) * (n / 32 + 1), "int8 activation half sums");
    a->ph2 = ds_aligned_alloc(sizeof(int32_t) * (n / 32 + 1), "int8 activation half sums");
    return a->q && a->e && a->s && a->ps && a->ph && a->ph2 ? 0 : -1;
}

static int ensure_act(cpu_ctx *c, int T, int cols) {
    size_t n = (size_t)T * (size_t)cols;
    if (c->act_len >= n) return 0;
    c->act_len = 0;
    if (act_alloc(&c->act, n)) return -1;
    c->act_len = n;
    return 0;
}

/* Up to OWN_T tokens every thread quantizes all of them into its own buffer instead of its share
 * into the shared one: the same bytes, and the matmul needs no barrier (a decode step has ~120) */
#define OWN_T 4
static int ensure_own(backend *be, int cols) {
    cpu_ctx *c = be->ctx;
    size_t n = (size_t)OWN_T * (size_t)cols;
    if (c->own_len >= n) return 0;
    c->own_len = 0;
    for (int t = 0; t < be->n_threads; t++)
        if (act_alloc(&c->own[t], n)) return -1;
    c->own_len = n;
    return 0;
}

/* ----------------------------------------------------------------------------------------- ops */

static int cpu_embed(backend *be, float *out, const qmat *emb, const int *tok, int T) {
    DS_UNUSED(be);
    for (int t = 0; t < T; t++) qmat_row_f32(emb, tok[t], out + (size_t)t * emb->cols);
    return 0;
}

typedef struct {
    float *out;
    const float *x, *w;
    int n_rows, C;
    float eps;
} rmsnorm_args;

static void rmsnorm_part(void *arg, int tid, int nth) {
    const rmsnorm_args *a = arg;
    const int C = a->C;
    long r0, r1;
    team_share(a->n_rows, tid, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        const float *xr = a->x + (size_t)r * C, *w = a->w;
        float *o = a->out + (size_t)r * C;
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
        float s = (float)(1.0 / sqrt(ss / C + a->eps));
        for (int i = 0; i < C; i++) o[i] = xr[i] * s * w[i];
    }
}

static int cpu_rmsnorm(backend *be, float *out, const float *x, const float *w, int n_rows, int C, float eps) {
    rmsnorm_args a = {out, x, w, n_rows, C, eps};
    team_run(be, team_worth(be, n_rows, 64, 4), rmsnorm_part, &a);
    return 0;
}

typedef struct {
    const backend *be;
    cpu_ctx *c;
    int n, T, cols, gemm, need_act, need_half, own, exact;
    float *const *out;
    const qmat *const *W;
    const qk_mat *const *pk;
    const float *x;
    const qk_mat *succ; /* the matrix the next matmul most likely begins with, or NULL */
} matmul_args;

static void matmul_part(void *arg, int tid, int nth) {
    const matmul_args *a = arg;
    cpu_ctx *c = a->c;
    const qk_kernels *k = c->k;
    const int n = a->n, T = a->T, cols = a->cols, gemm = a->gemm;
    const float *x = a->x;
    float *const *out = a->out;
    const qmat *const *W = a->W;
    const qk_mat *const *pk = a->pk;
    float *buf = c->wbuf[tid], res[ROWS_PER_GROUP];
    const qk_act *act = &c->act;
    if (a->need_act && a->own) {
        qk_act *m = &c->own[tid];
        m->T = T, m->cols = cols, m->nb = cols / 32;
        k->quantize(x, 0, T, cols, m);
        if (a->need_half) qk_half_sums(m, 0, T);
        act = m;
    } else if (a->need_act) { /* each thread quantizes its share of the tokens, then all read all */
        long t0, t1;
        team_share(T, tid, nth, &t0, &t1);
        k->quantize(x, (int)t0, (int)t1, cols, &c->act);
        if (a->need_half) qk_half_sums(&c->act, (int)t0, (int)t1);
        team_sync(a->be, nth);
    }
    for (int i = 0; i < n; i++) {
        const qmat *w = W[i];
        int rows = w->rows;
        to_float_fn deq = ggml_type_get(w->type)->to_float;
        if (pk[i]) { /* fused kernel on this thread's slice of rows (whole panels) */
            int r0, r1;
            qk_split(pk[i], tid, nth, &r0, &r1);
            if (a->exact) k->rows_f32(pk[i], r0, r1, x, c->xsum, T, out[i], (size_t)rows);
            else {
                qk_next nx; /* this thread's next rows: the call's next matrix, or the next call's first */
                qk_next_of(i + 1 < n ? pk[i + 1] : a->succ, tid, nth, &nx);
                k->rows_i8(pk[i], r0, r1, act, out[i], (size_t)rows, &nx);
            }
        } else if (gemm) {
            /* decode GEMM_ROWS rows of this thread's slice into L2 and run sgemm on them: the
             * decode cost is shared by all T tokens, and no fp32 copy of the model is kept */
            long r0, r1;
            team_share(rows, tid, nth, &r0, &r1);
            for (int r = (int)r0; r < r1; r += GEMM_ROWS) {
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
            long g0, g1;
            team_share(groups, tid, nth, &g0, &g1);
            for (int g = (int)g0; g < g1; g++) {
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
        if (be->exact) need_sums |= qk_nibbles(pk[i]->kind); /* Q4_1's and Q4_K's m sum(x) */
        else need_act = 1;
    }
    /* packing a later matrix may have grown (moved) the table: where the earlier ones live now */
    for (int i = 0; i < n; i++)
        if (pk[i]) pk[i] = packed_find(c, W[i]);
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
    int own = need_act && T <= OWN_T && be->n_threads > 1;
    if (own) DS_TRY(ensure_own(be, cols));
    else if (need_act) {
        DS_TRY(ensure_act(c, T, cols));
        c->act.T = T, c->act.cols = cols, c->act.nb = cols / 32;
    }
    /* A forward runs the same matmuls in the same order every time, so the matrix the last matmul
     * after this one began with most likely begins the next one again: the threads fetch its first
     * panels while their last ones here compute (rows_i8's nx), instead of starting each matrix's
     * stream cold (forward after 128 positions, 20 pairs: B = 1 0.982x, B = 8 0.981x). A wrong guess
     * costs a few prefetches. */
    const qk_mat *succ = NULL;
    if (need_act && pk[0] && pk[n - 1]) {
        packed_slot *prev = slot_find(c, c->last_key), *last = slot_find(c, W[n - 1]->data);
        if (prev) prev->succ = W[0]->data;
        c->last_key = W[n - 1]->data;
        const packed_slot *s = last ? slot_find(c, last->succ) : NULL;
        succ = s ? &s->m : NULL;
    }
    int need_half = 0; /* Q6_K's halves: the activations' sums over each block's first 16 */
    for (int i = 0; i < n; i++) need_half |= need_act && pk[i] && pk[i]->kind == QK_Q6_K;
    matmul_args a = {be, c, n, T, cols, gemm, need_act, need_half, own, be->exact, out, W, pk, x, succ};
    team_run(be, 1, matmul_part, &a);
    return 0;
fail:
    return -1;
}

typedef struct {
    float *x;
    int T, n_heads;
    const rope_tables *rt;
} rope_args;

static void rope_part(void *arg, int tid, int nth) {
    const rope_args *a = arg;
    const rope_tables *rt = a->rt;
    const int hd = rt->head_dim, half = hd / 2, n_heads = a->n_heads;
    long t0, t1;
    team_share(a->T, tid, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) {
        const float *cs = rt->cos + (size_t)t * half, *sn = rt->sin + (size_t)t * half;
        for (int h = 0; h < n_heads; h++) {
            float *v = a->x + ((size_t)t * n_heads + h) * hd;
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
}

static int cpu_rope(backend *be, float *x, int T, int n_heads, const rope_tables *rt) {
    rope_args a = {x, T, n_heads, rt};
    team_run(be, team_worth(be, T, 64, 4), rope_part, &a);
    return 0;
}

static int cpu_kv_write(backend *be, const attn_batch *ab, int layer, const float *k, const float *v) {
    const qk_kernels *kk = ((cpu_ctx *)be->ctx)->k;
    for (int t = 0; t < ab->T; t++) {
        kv_cache *kv = ab->kv[ab->seq[t]];
        size_t d = (size_t)kv->kv_dim, hd = (size_t)kv->head_dim, ld = kv_ld(kv);
        if (ab->pos[t] < 0 || ab->pos[t] >= kv->cap) {
            ds_error("kv_write: position %d outside the cache (capacity %d)", ab->pos[t], kv->cap);
            return -1;
        }
        for (int h = 0; h < kv->n_heads; h++) {
            size_t at = kv_head(kv, h) + (size_t)ab->pos[t] * ld;
            const float *kr = k + (size_t)t * d + h * hd, *vr = v + (size_t)t * d + h * hd;
            if (kv->elem == 2) { /* a bf16 cache: rounded to nearest even as written */
                kk->to_bf16(kr, kv_row(kv, kv->k[layer], at), (int)hd);
                kk->to_bf16(vr, kv_row(kv, kv->v[layer], at), (int)hd);
            } else {
                memcpy(kv->k[layer] + at, kr, hd * sizeof(float));
                memcpy(kv->v[layer] + at, vr, hd * sizeof(float));
            }
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
 * A (request, KV head) pair is one task while the pairs share out evenly over the threads; the last
 * (pairs mod threads) are cut in one slice a thread (one verify step: 3 KV heads on 2 threads would
 * leave one idle a third of the time, and slicing all three read each head twice); at most ATT_QMAX
 * queries a slice. */
#define ATT_QMAX 48
typedef struct attn_task {
    int t0, kvh, q0, q1; /* request's first token, KV head, queries [q0, q1) of its run */
} attn_task;

/* p grown to at least n entries of elem bytes (the run and task lists are kept by the backend:
 * they were two mallocs a layer); NULL on failure, with p and *cap as they were */
static void *grow_list(void *p, size_t *cap, size_t n, size_t elem, const char *what) {
    if (p && *cap >= n) return p;
    size_t c2 = DS_MAX(n, 2 * *cap);
    void *q = ds_realloc(p, elem * c2, what);
    if (q) *cap = c2;
    return q;
}

typedef struct {
    cpu_ctx *c;
    float *out;
    const float *q;
    const attn_batch *ab;
    int layer, group, hd, n;       /* n: heads (the GEMM path) or tasks */
    size_t qld;
    float scale;
    int t0, len, n_ctx;            /* the GEMM path's request */
    size_t blk_off;                /* where a bf16 cache's widened rows go in a thread's scratch */
    int next;                      /* the next unclaimed head or task */
} attn_args;

/* the GEMM path: one request's heads, claimed one at a time */
static void attn_gemm_part(void *arg, int tid, int nth) {
    DS_UNUSED(nth);
    attn_args *a = arg;
    const kv_cache *kv = a->ab->kv[a->ab->seq[a->t0]];
    const int len = a->len, n_ctx = a->n_ctx, hd = a->hd, ld = (int)kv_ld(kv);
    float *S = a->c->sbuf[tid];
    for (int h; (h = team_next(&a->next)) < a->n;) {
        const float *K = kv->k[a->layer] + kv_head(kv, h / a->group), *V = kv->v[a->layer] + kv_head(kv, h / a->group);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, len, n_ctx, hd, a->scale,
                    a->q + (size_t)a->t0 * a->qld + (size_t)h * hd, (int)a->qld, K, ld, 0.0f, S, n_ctx);
        for (int i = 0; i < len; i++) {
            float *row = S + (size_t)i * n_ctx;
            for (int j = n_visible(a->ab, a->t0 + i); j < n_ctx; j++) row[j] = -INFINITY;
            qk_softmax(row, n_ctx);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, len, hd, n_ctx, 1.0f, S, n_ctx, V, ld, 0.0f,
                    a->out + (size_t)a->t0 * a->qld + (size_t)h * hd, (int)a->qld);
    }
}

/* the per-row kernel: the tasks, claimed one at a time */
static void attn_task_part(void *arg, int tid, int nth) {
    DS_UNUSED(nth);
    attn_args *a = arg;
    const int group = a->group, hd = a->hd;
    float *o[ATT_QMAX];
    const float *qq[ATT_QMAX];
    int nv[ATT_QMAX];
    for (int it; (it = team_next(&a->next)) < a->n;) {
        const attn_task *t = &a->c->attn_tasks[it];
        const kv_cache *kv = a->ab->kv[a->ab->seq[t->t0]];
        for (int m = t->q0; m < t->q1; m++) { /* query m: token t0 + m / group, head kvh * group + m % group */
            int tok = t->t0 + m / group, h = t->kvh * group + m % group;
            o[m - t->q0] = a->out + (size_t)tok * a->qld + (size_t)h * hd;
            qq[m - t->q0] = a->q + (size_t)tok * a->qld + (size_t)h * hd;
            nv[m - t->q0] = n_visible(a->ab, tok);
        }
        size_t at = kv_head(kv, t->kvh);
        if (kv->elem == 2)
            a->c->k->attend_multi_bf16(o, qq, nv, t->q1 - t->q0, kv_row(kv, kv->k[a->layer], at), kv_row(kv, kv->v[a->layer], at),
                                       kv_ld(kv), hd, a->scale, a->c->sbuf[tid], a->c->sbuf[tid] + a->blk_off);
        else
            a->c->k->attend_multi(o, qq, nv, t->q1 - t->q0, kv->k[a->layer] + at, kv->v[a->layer] + at, kv_ld(kv), hd,
                                  a->scale, a->c->sbuf[tid]);
    }
}

/* A run of few queries over a long context (a decode step after 256 positions or more) is split
 * across the threads by positions and columns instead of by queries: every thread reads its share
 * of each KV head once (by query slices each slice read the whole head: a decode step's three heads
 * made six slices for two threads). Three phases, the threads meeting between them: the scores of
 * every query for a range of position blocks (att_scores), each query's softmax (and its output
 * zeroed), then P V for a slice of the columns (att_pv: a 64-byte line of a bf16 row). The
 * operations are attend_multi's, so the result is the same bit for bit. Measured on the VNNI Xeon
 * against the slices (paired medians): B = 1 0.97x at 256-512 positions, 0.92x at 1,024, B = 2
 * 0.95x; but B = 1 at 128 1.02x and B = 8 1.07-1.13x (the phases' meetings, and scores one
 * thread wrote read by the other), hence the limits. */
#define ATT_SPLIT_MAXQ 8     /* queries of a KV head: a decode step (a group of 3) or two */
#define ATT_SPLIT_MIN_POS 256

typedef struct att_run {
    int t0, len, nmax, chunks; /* first token, tokens, widest context, position chunks */
    int tree;                  /* a draft tree's round: each query's scores masked to its ancestors */
    size_t s_off;              /* its scores in att_s: [kv head][query][nmax] */
    int first[3];              /* its first item in each phase */
} att_run;

typedef struct {
    const backend *be;
    attn_args *a;
    att_run *runs;
    int n_runs, dw;           /* dw: columns a P V item takes */
    int n[3], next[3];        /* items of each phase, and the next unclaimed one */
} att_split;

/* the run holding item it of phase p, and the item's index within the run */
static const att_run *split_run(const att_split *sp, int p, int it, int *k) {
    int r = 0;
    while (r + 1 < sp->n_runs && sp->runs[r + 1].first[p] <= it) r++;
    *k = it - sp->runs[r].first[p];
    return &sp->runs[r];
}

/* query m of a run's KV head h (token-major: token t0 + m / group, head h * group + m % group): the
 * offset of its output and query rows; *nv its visible positions */
static size_t split_query(const attn_args *a, const att_run *r, int h, int m, int *nv) {
    int tok = r->t0 + m / a->group, head = h * a->group + m % a->group;
    *nv = n_visible(a->ab, tok);
    return (size_t)tok * a->qld + (size_t)head * a->hd;
}

/* queries m0.. of the run (at most ATT_QMAX, a kernel call's): their count */
static int split_queries(const attn_args *a, const att_run *r, int h, int m0, float **o, const float **qq, int *nv) {
    int qn = DS_MIN(ATT_QMAX, r->len * a->group - m0);
    for (int m = 0; m < qn; m++) {
        size_t at = split_query(a, r, h, m0 + m, &nv[m]);
        o[m] = a->out + at, qq[m] = a->q + at;
    }
    return qn;
}

/* a tree's query row S over its nv visible slots: the tree's slots (from kv->tree0) that are not the
 * token's own or its ancestors' get -inf, so softmax gives them weight 0 and P V adds exact zeros */
static void tree_mask(const attn_batch *ab, int tok, float *S, int nv) {
    const kv_cache *kv = ab->kv[ab->seq[tok]];
    int cur = ab->pos[tok];
    for (int j = nv - 1; j >= kv->tree0; j--) {
        if (j == cur) cur = kv->tpar[cur - kv->tree0];
        else S[j] = -INFINITY;
    }
}

/* KV head h of layer l's K or V buffer: as fp32 (*f) or bf16 (*b), the other NULL */
static void kv_part(const kv_cache *kv, float *buf, int h, const float **f, const uint16_t **b) {
    size_t at = kv_head(kv, h);
    *f = kv->elem == 2 ? NULL : buf + at;
    *b = kv->elem == 2 ? kv_row(kv, buf, at) : NULL;
}

static void attn_split_part(void *arg, int tid, int nth) {
    att_split *sp = arg;
    attn_args *a = sp->a;
    const qk_kernels *k = a->c->k;
    float *o[ATT_QMAX], *blk = a->c->sbuf[tid];
    const float *qq[ATT_QMAX];
    int nv[ATT_QMAX], hd = a->hd, kk;
    for (int it; (it = team_next(&sp->next[0])) < sp->n[0];) { /* scores: (run, head, chunk of blocks) */
        const att_run *r = split_run(sp, 0, it, &kk);
        int h = kk / r->chunks, c = kk % r->chunks, nblk = (r->nmax + QK_ATT_BLOCK - 1) / QK_ATT_BLOCK;
        int qall = r->len * a->group;
        const kv_cache *kv = a->ab->kv[a->ab->seq[r->t0]];
        const float *K;
        const uint16_t *Kb;
        kv_part(kv, kv->k[a->layer], h, &K, &Kb);
        int j0 = QK_ATT_BLOCK * (nblk * c / r->chunks), j1 = QK_ATT_BLOCK * (nblk * (c + 1) / r->chunks);
        for (int m0 = 0; m0 < qall; m0 += ATT_QMAX) {
            int qn = split_queries(a, r, h, m0, o, qq, nv);
            float *S = a->c->att_s + r->s_off + ((size_t)h * qall + m0) * r->nmax;
            k->att_scores(S, r->nmax, qq, nv, qn, K, Kb, kv_ld(kv), hd, a->scale, j0, j1, blk);
        }
    }
    team_sync(sp->be, nth);
    for (int it; (it = team_next(&sp->next[1])) < sp->n[1];) { /* softmax: (run, head, query) */
        const att_run *r = split_run(sp, 1, it, &kk);
        int qn = r->len * a->group, h = kk / qn, m = kk % qn, n;
        memset(a->out + split_query(a, r, h, m, &n), 0, sizeof(float) * (size_t)hd);
        float *S = a->c->att_s + r->s_off + ((size_t)h * qn + m) * r->nmax;
        if (r->tree) tree_mask(a->ab, r->t0 + m / a->group, S, n);
        qk_softmax(S, n);
    }
    team_sync(sp->be, nth);
    for (int it; (it = team_next(&sp->next[2])) < sp->n[2];) { /* P V: (run, head, columns) */
        const att_run *r = split_run(sp, 2, it, &kk);
        int nds = hd / sp->dw, h = kk / nds, d0 = (kk % nds) * sp->dw, qall = r->len * a->group;
        const kv_cache *kv = a->ab->kv[a->ab->seq[r->t0]];
        const float *V;
        const uint16_t *Vb;
        kv_part(kv, kv->v[a->layer], h, &V, &Vb);
        for (int m0 = 0; m0 < qall; m0 += ATT_QMAX) {
            int qn = split_queries(a, r, h, m0, o, qq, nv);
            const float *S = a->c->att_s + r->s_off + ((size_t)h * qall + m0) * r->nmax;
            k->att_pv(o, S, r->nmax, nv, qn, V, Vb, kv_ld(kv), d0, d0 + sp->dw, blk);
        }
    }
}

/* queries a slice of pair p (of the per-row kernel's, whole ones first) takes, its run len tokens */
static int attn_slice(int len, int group, int p, int whole, int nth) {
    int parts = p < whole ? 1 : nth;
    return DS_MIN(ATT_QMAX, (len * group + parts - 1) / parts);
}

static int cpu_attention(backend *be, float *out, const float *q, const attn_batch *ab, int layer, int n_heads,
                         int n_kv_heads, int hd) {
    cpu_ctx *c = be->ctx;
    int group = n_heads / n_kv_heads, T = ab->T, rc = -1;
    size_t qld = (size_t)n_heads * hd;
    float scale = 1.0f / sqrtf((float)hd);
    /* requests are contiguous runs of the batch: find each run and its widest context */
    int n_runs = 0, *run_start = grow_list(c->attn_runs, &c->runs_cap, 3 * (size_t)T + 1, sizeof(int), "attention runs");
    if (!run_start) return -1;
    c->attn_runs = run_start;
    int *run_nmax = run_start + T + 1; /* each run's widest context */
    int *run_tree = run_nmax + T;      /* each run's tree: 1 when its cache holds a draft tree */
    for (int t = 0; t < T; t++)
        if (t == 0 || ab->seq[t] != ab->seq[t - 1]) run_start[n_runs++] = t;
    run_start[n_runs] = T;
    for (int r = 0; r < n_runs; r++) {
        int t0 = run_start[r], t1 = run_start[r + 1], len = t1 - t0, maxn = 0;
        const kv_cache *kv = ab->kv[ab->seq[t0]];
        run_tree[r] = kv->tree;
        if (run_tree[r] && ab->n_vis) {
            ds_error("attention: a draft tree with explicit visibility");
            goto done;
        }
        if (len >= c->attn_gemm_min_T && kv->elem != 4 && !run_tree[r]) {
            ds_error("attention: the GEMM path needs an fp32 cache");
            goto done;
        }
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
        run_nmax[r] = maxn;
    }
    /* a run is split by positions and columns (few queries over a long context), sliced by
     * queries, or two GEMMs */
    /* a tree's run always takes the split path: the only one whose scores are materialised between
     * phases, where the mask goes (on a chain-shaped round it is attend_multi's result bit for bit) */
#define SPLIT(r) (run_tree[r] || (run_start[(r) + 1] - run_start[r] < c->attn_gemm_min_T &&      \
                                  (run_start[(r) + 1] - run_start[r]) * group <= ATT_SPLIT_MAXQ && \
                                  run_nmax[r] >= ATT_SPLIT_MIN_POS))
    int n_small = 0, n_split = 0, n_tasks = 0;
    for (int r = 0; r < n_runs; r++) {
        int len = run_start[r + 1] - run_start[r], split = SPLIT(r);
        n_small += len < c->attn_gemm_min_T && !split;
        n_split += split;
    }
    const int nth = be->n_threads, whole = n_small * n_kv_heads / nth * nth; /* pairs kept whole */
    size_t need = 0, max_tasks = 0, split_s = 0;
    for (int r = 0, p = 0; r < n_runs; r++) {
        int len = run_start[r + 1] - run_start[r], maxn = run_nmax[r], qn = len * group;
        if (SPLIT(r)) split_s += (size_t)n_kv_heads * (size_t)qn * (size_t)maxn;
        else if (len >= c->attn_gemm_min_T) need = DS_MAX(need, (size_t)len * (size_t)maxn);
        else
            for (int h = 0; h < n_kv_heads; h++, p++) {
                int qc = attn_slice(len, group, p, whole, nth);
                need = DS_MAX(need, (size_t)qc * (size_t)maxn), max_tasks += (size_t)((qn + qc - 1) / qc);
            }
    }
    size_t blk_off = need;
    need += (size_t)QK_ATT_BLOCK * (size_t)hd; /* a bf16 cache's rows, widened a block at a time */
    attn_task *tasks;
    att_run *sruns;
    float *ss;
    if (ensure_sbuf(be, need) ||
        !(tasks = grow_list(c->attn_tasks, &c->tasks_cap, max_tasks + 1, sizeof(attn_task), "attention tasks")))
        goto done;
    c->attn_tasks = tasks;
    if (!(sruns = grow_list(c->att_runs, &c->att_runs_cap, (size_t)n_split + 1, sizeof(att_run), "attention runs")))
        goto done;
    c->att_runs = sruns;
    if (!(ss = grow_list(c->att_s, &c->att_s_cap, split_s + 1, sizeof(float), "attention scores"))) goto done;
    c->att_s = ss;
    attn_args a = {c, out, q, ab, layer, group, hd, 0, qld, scale, 0, 0, 0, blk_off, 0};
    /* columns a P V item takes: a 64-byte line of a bf16 row where the head is whole lines of them */
    att_split sp = {be, &a, sruns, 0, hd % 32 == 0 && hd >= 64 ? 32 : hd, {0, 0, 0}, {0, 0, 0}};
    size_t s_off = 0;
    for (int r = 0, p = 0; r < n_runs; r++) {
        int t0 = run_start[r], t1 = run_start[r + 1], len = t1 - t0;
        if (SPLIT(r)) {
            int nmax = run_nmax[r], qn = len * group;
            int nblk = (nmax + QK_ATT_BLOCK - 1) / QK_ATT_BLOCK, chunks = DS_MIN(nblk, be->n_threads);
            sruns[sp.n_runs++] = (att_run){t0, len, nmax, chunks, run_tree[r], s_off, {sp.n[0], sp.n[1], sp.n[2]}};
            sp.n[0] += n_kv_heads * chunks, sp.n[1] += n_kv_heads * qn, sp.n[2] += n_kv_heads * (hd / sp.dw);
            s_off += (size_t)n_kv_heads * qn * nmax;
            continue;
        }
        if (len < c->attn_gemm_min_T) { /* slices for the per-row kernel */
            int qn = len * group;
            for (int h = 0; h < n_kv_heads; h++, p++) {
                int qc = attn_slice(len, group, p, whole, nth);
                for (int q0 = 0; q0 < qn; q0 += qc) tasks[n_tasks++] = (attn_task){t0, h, q0, DS_MIN(qn, q0 + qc)};
            }
            continue;
        }
        a.n = n_heads, a.t0 = t0, a.len = len, a.n_ctx = run_nmax[r], a.next = 0;
        team_run(be, n_heads >= 2, attn_gemm_part, &a);
    }
    a.n = n_tasks, a.next = 0;
    if (n_tasks) team_run(be, n_tasks >= 2, attn_task_part, &a);
    if (sp.n_runs) team_run(be, sp.n[0] >= 2 || sp.n[2] >= 2, attn_split_part, &sp);
#undef SPLIT
    rc = 0;
done:
    return rc;
}

/* elementwise ops: any split gives the same bits; shares are whole 8-float vectors */
typedef struct {
    const qk_kernels *k;
    float *out;
    const float *a, *b;
    size_t n;
} ew_args;

static void ew_share(const ew_args *e, int tid, int nth, size_t *i0, size_t *i1) {
    *i0 = e->n * (size_t)tid / (size_t)nth / 8 * 8;
    *i1 = tid + 1 == nth ? e->n : e->n * (size_t)(tid + 1) / (size_t)nth / 8 * 8;
}

static void swiglu_part(void *arg, int tid, int nth) {
    const ew_args *e = arg;
    size_t i0, i1;
    ew_share(e, tid, nth, &i0, &i1);
    e->k->swiglu(e->out + i0, e->a + i0, e->b + i0, i1 - i0);
}

static int cpu_swiglu(backend *be, float *out, const float *gate, const float *up, size_t n) {
    ew_args e = {((cpu_ctx *)be->ctx)->k, out, gate, up, n};
    team_run(be, team_worth(be, (long)n, 4096, 1024), swiglu_part, &e); /* a verify step's 8 x 1536 is worth two threads */
    return 0;
}

static void add_part(void *arg, int tid, int nth) {
    const ew_args *e = arg;
    size_t i0, i1;
    ew_share(e, tid, nth, &i0, &i1);
    float *o = e->out;
    const float *x = e->a, *y = e->b; /* x is out: the residual add in place */
#pragma omp simd
    for (size_t i = i0; i < i1; i++) o[i] = x[i] + y[i];
}

static int cpu_add(backend *be, float *x, const float *y, size_t n) {
    ew_args e = {NULL, x, x, y, n};
    team_run(be, team_worth(be, (long)n, 65536, 16384), add_part, &e);
    return 0;
}

typedef struct {
    float *x;
    const float *b;
    int n_rows, C;
} bias_args;

static void bias_part(void *arg, int tid, int nth) {
    const bias_args *a = arg;
    long r0, r1;
    team_share(a->n_rows, tid, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        float *o = a->x + (size_t)r * (size_t)a->C;
        const float *b = a->b;
#pragma omp simd
        for (int i = 0; i < a->C; i++) o[i] = o[i] + b[i];
    }
}

static int cpu_add_bias(backend *be, float *x, const float *b, int n_rows, int C) {
    bias_args a = {x, b, n_rows, C};
    team_run(be, team_worth(be, n_rows, 64, 4), bias_part, &a);
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
        free(c->attn_runs), free(c->attn_tasks), free(c->att_runs), free(c->att_s);
        act_free(&c->act);
        for (int t = 0; t < MAX_THREADS; t++) act_free(&c->own[t]);
        free(c);
    }
    free(be);
}

backend *backend_cpu_new(const backend_opts *o) {
    backend_opts def = {0};
    if (!o) o = &def;
    cpu_isa isa;
    if (cpu_isa_parse(o->isa, &isa)) return NULL;
    /* the default is OpenMP's: OMP_NUM_THREADS where set (make test runs suites one a core), else every core */
    int n_threads = o->n_threads <= 0 ? omp_get_max_threads() : o->n_threads;
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
    /* the int8 contract keeps its caches in bf16: at 1,000 positions the fp32 cache (46 KB a
     * position for SmolLM2) was half of a decode step; the exact contract keeps fp32, the reference */
    be->kv_bf16 = !o->exact;
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
    be->add_bias = cpu_add_bias;
    be->destroy = cpu_destroy;
    be->session = cpu_session;
    return be;
}
