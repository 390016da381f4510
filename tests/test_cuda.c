/* test_cuda — the CUDA backend against the CPU backend, llm.c dev/cuda style. The exact (fp32)
 * contract: every op on random inputs with a stated bound, the whole forward on tiny models (prefill
 * on the cuBLAS path, decode and varlen batches on the warp-per-row path, hidden-state capture),
 * batch invariance below gemm_min_T, and SmolLM2: prefill logits and greedy continuations. The int8
 * contract (the default): every op and the whole forward bit for bit the CPU's int8 backend, on
 * every quantized type (Q4_1, Q8_0, Q5_0, Q4_K, Q6_K), with a mutant kernel shown red.
 *
 * Bounds: a dot product of n terms summed in another order differs by at most ~n * eps * sum|terms|
 * (we allow 4x that); elementwise ops within a few ulps; logits of the forward within 1e-3 of their
 * scale on tiny models. Where there is no GPU (or the build has no CUDA) every test skips, saying
 * so: CI is GPU-free; `make test` on a GPU machine runs them (see BENCHMARKS.md for the command). */
#include "testutil.h"

#include <float.h>

#include "../runtime/backends/backend.h"
#include "../runtime/forward.h"
#include "../runtime/model/model.h"
#include "../runtime/text/tokenizer.h"
#ifdef DS_CUDA
#include "../runtime/kernels/kernels_cuda.h"
#endif

static backend *gpu, *cpu, *gpu8, *cpu8; /* exact contract; int8 contract */
static char why_skip[512];

#define NEED_GPU()                                                        \
    do {                                                                  \
        if (!gpu) {                                                       \
            print_message("[  SKIP    ] no CUDA backend: %s\n", why_skip); \
            skip();                                                       \
        }                                                                 \
    } while (0)

static void rnd(float *x, size_t n, uint64_t seed, float scale) {
    rng_t r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)((rng_u64(&r) >> 11) * 0x1.0p-53 * 2 - 1) * scale;
}

static float *put(backend *be, const float *h, size_t n) {
    float *d = be->alloc(be, n * sizeof(float));
    assert_non_null(d);
    assert_int_equal(be->to_device(be, d, h, n * sizeof(float)), 0);
    return d;
}
static float *get(backend *be, const float *d, size_t n) {
    float *h = malloc(n * sizeof(float));
    assert_int_equal(be->to_host(be, h, d, n * sizeof(float)), 0);
    return h;
}

/* -------------------------------------------------------------------------------- matrices */

typedef struct {
    qmat w;
    void *buf;
} tmat;

static void make_mat(tmat *m, uint32_t type, int rows, int cols, uint64_t seed) {
    const ggml_type_info *ti = ggml_type_get(type);
    size_t n = (size_t)rows * cols;
    float *f = malloc(n * sizeof(float));
    rnd(f, n, seed, 1.0f);
    m->w.type = type, m->w.rows = rows, m->w.cols = cols;
    m->w.row_bytes = (size_t)(cols / ti->blck) * ti->size;
    m->buf = calloc(1, (size_t)rows * m->w.row_bytes);
    uint8_t *b = m->buf;
    if (type == GGML_F32) memcpy(b, f, n * sizeof(float));
    else if (type == GGML_F16) for (size_t i = 0; i < n; i++) ((ds_f16 *)b)[i] = ds_f32_to_f16(f[i]);
    else if (type == GGML_BF16) for (size_t i = 0; i < n; i++) ((ds_bf16 *)b)[i] = ds_f32_to_bf16(f[i]);
    else if (type == GGML_Q8_0) quantize_q8_0(f, (block_q8_0 *)b, (int64_t)n);
    else if (type == GGML_Q4_1) quantize_q4_1(f, (block_q4_1 *)b, (int64_t)n);
    else if (type == GGML_Q4_0) {
        for (size_t k = 0; k < n / 32; k++) {
            block_q4_0 *q = (block_q4_0 *)b + k;
            q->d = ds_f32_to_f16(1.0f / 8);
            for (int i = 0; i < 16; i++) q->qs[i] = (uint8_t)((int)((f[k * 32 + i] + 1) * 7.99f) | ((int)((f[k * 32 + 16 + i] + 1) * 7.99f) << 4));
        }
    } else if (type == GGML_Q5_0) quantize_q5_0(f, (block_q5_0 *)b, (int64_t)n);
    else if (type == GGML_Q6_K) quantize_q6_k(f, (block_q6_K *)b, (int64_t)n);
    else if (type == GGML_Q4_K && seed % 2) quantize_q4_k(f, (block_q4_K *)b, (int64_t)n);
    else if (type == GGML_Q4_K) { /* random bytes, sane scales: the host-decoded path */
        rng_t r;
        rng_seed(&r, seed + 1);
        for (size_t i = 0; i < (size_t)rows * m->w.row_bytes; i++) b[i] = (uint8_t)rng_u64(&r);
        for (size_t k = 0; k < n / 256; k++) {
            block_q4_K *q = (block_q4_K *)b + k;
            q->d = ds_f32_to_f16(0.01f), q->dmin = ds_f32_to_f16(0.01f);
        }
    } else fail_msg("make_mat: type %u", type);
    m->w.data = m->buf;
    free(f);
}

/* out = W x on both backends; each output within 4 n eps sum|w x| of the CPU's */
static void check_matmul(uint32_t type, int rows, int cols, int T) {
    tmat m;
    make_mat(&m, type, rows, cols, 100 + type);
    float *x = malloc(sizeof(float) * (size_t)T * cols), *wr = malloc(sizeof(float) * (size_t)cols);
    rnd(x, (size_t)T * cols, 7 + T, 1.0f);
    float *xg = put(gpu, x, (size_t)T * cols), *og = gpu->alloc(gpu, sizeof(float) * (size_t)T * rows);
    float *xc = put(cpu, x, (size_t)T * cols), *oc = cpu->alloc(cpu, sizeof(float) * (size_t)T * rows);
    const qmat *ws[1] = {&m.w};
    assert_int_equal(gpu->matmul(gpu, 1, &og, ws, xg, T), 0);
    assert_int_equal(cpu->matmul(cpu, 1, &oc, ws, xc, T), 0);
    float *a = get(gpu, og, (size_t)T * rows), *b = get(cpu, oc, (size_t)T * rows);
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        qmat_row_f32(&m.w, r, wr);
        for (int t = 0; t < T; t++) {
            double mag = 0;
            for (int j = 0; j < cols; j++) mag += fabs((double)wr[j] * x[(size_t)t * cols + j]);
            double bound = 4.0 * cols * FLT_EPSILON * mag + 1e-30, d = fabs((double)a[(size_t)t * rows + r] - b[(size_t)t * rows + r]);
            if (!(d <= bound)) fail_msg("matmul %s %dx%d T=%d: row %d token %d: gpu %.9g cpu %.9g (bound %.3g)",
                                        ggml_type_name(type), rows, cols, T, r, t, a[(size_t)t * rows + r], b[(size_t)t * rows + r], bound);
            worst = fmax(worst, d / bound);
        }
    }
    print_message("  matmul %-5s %5dx%-4d T=%-3d worst |gpu-cpu| / bound = %.3f\n", ggml_type_name(type), rows, cols, T, worst);
    gpu->forget_mats(gpu, ws, 1);
    cpu->forget_mats(cpu, ws, 1);
    gpu->release(gpu, xg), gpu->release(gpu, og), cpu->release(cpu, xc), cpu->release(cpu, oc);
    free(a), free(b), free(x), free(wr), free(m.buf);
}

static void test_matmul(void **state) {
    (void)state;
    NEED_GPU();
    const uint32_t types[] = {GGML_F32, GGML_F16, GGML_BF16, GGML_Q4_0, GGML_Q4_1, GGML_Q8_0, GGML_Q4_K};
    const int Ts[] = {1, 3, 8, 9, 31, 32, 70};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        for (size_t k = 0; k < sizeof Ts / sizeof *Ts; k++) check_matmul(types[i], 77, types[i] == GGML_Q4_K ? 512 : 576, Ts[k]);
    check_matmul(GGML_Q8_0, 49152, 576, 1); /* the head's shape */
    check_matmul(GGML_F32, 77, 100, 3);     /* rows that are not whole blocks: the element kernel */
    check_matmul(GGML_F16, 77, 100, 40);
    check_matmul(GGML_Q4_1, 1536, 576, 40);
    check_matmul(GGML_Q4_1, 64, 4192, 3); /* 131 blocks a row: passes of four that end part way */
    check_matmul(GGML_BF16, 40, 2080, 1);
}

/* n matrices sharing an input go in one launch (q, k, v; gate, up): every output bit for bit what a
 * call with that matrix alone gives, for a set of one type and for a mixed one (one launch each) */
static void check_matmul_set(const uint32_t *types, const int *rows, int n, int T) {
    int cols = 576;
    tmat m[8];
    const qmat *ws[8];
    float *og[8];
    float *x = malloc(sizeof(float) * (size_t)T * cols);
    rnd(x, (size_t)T * cols, 21 + T, 1.0f);
    float *xg = put(gpu, x, (size_t)T * cols), *o1 = gpu->alloc(gpu, sizeof(float) * (size_t)T * 1024);
    for (int i = 0; i < n; i++) {
        make_mat(&m[i], types[i], rows[i], cols, 40 + i);
        ws[i] = &m[i].w;
        og[i] = gpu->alloc(gpu, sizeof(float) * (size_t)T * rows[i]);
    }
    assert_int_equal(gpu->matmul(gpu, n, og, ws, xg, T), 0);
    for (int i = 0; i < n; i++) {
        assert_int_equal(gpu->matmul(gpu, 1, &o1, &ws[i], xg, T), 0);
        float *a = get(gpu, og[i], (size_t)T * rows[i]), *b = get(gpu, o1, (size_t)T * rows[i]);
        if (memcmp(a, b, sizeof(float) * (size_t)T * rows[i]))
            fail_msg("matmul set of %d, T=%d: matrix %d (%s, %d rows) differs from its own call", n, T, i,
                     ggml_type_name(types[i]), rows[i]);
        free(a), free(b);
        gpu->release(gpu, og[i]);
    }
    gpu->forget_mats(gpu, ws, n);
    for (int i = 0; i < n; i++) free(m[i].buf);
    gpu->release(gpu, xg), gpu->release(gpu, o1);
    free(x);
}

/* matmul_add (a residual add fused into the matmul) against matmul then add: bit for bit */
static void check_matmul_add(uint32_t type, int rows, int cols, int T) {
    tmat m;
    make_mat(&m, type, rows, cols, 60 + T);
    size_t nx = (size_t)T * cols, no = (size_t)T * rows;
    float *x = malloc(sizeof(float) * nx), *r = malloc(sizeof(float) * no);
    rnd(x, nx, 61 + T, 1.0f);
    rnd(r, no, 62 + T, 3.0f);
    float *xg = put(gpu, x, nx), *fused = put(gpu, r, no), *plain = put(gpu, r, no), *prod = gpu->alloc(gpu, sizeof(float) * no);
    const qmat *ws[1] = {&m.w};
    assert_non_null(gpu->matmul_add);
    assert_int_equal(gpu->matmul_add(gpu, fused, &m.w, xg, T), 0);
    assert_int_equal(gpu->matmul(gpu, 1, &prod, ws, xg, T), 0);
    assert_int_equal(gpu->add(gpu, plain, prod, no), 0);
    float *a = get(gpu, fused, no), *b = get(gpu, plain, no);
    if (memcmp(a, b, sizeof(float) * no))
        fail_msg("matmul_add %s %dx%d T=%d differs from matmul then add", ggml_type_name(type), rows, cols, T);
    gpu->forget_mats(gpu, ws, 1);
    gpu->release(gpu, xg), gpu->release(gpu, fused), gpu->release(gpu, plain), gpu->release(gpu, prod);
    free(a), free(b), free(x), free(r), free(m.buf);
}

static void test_matmul_add(void **state) {
    (void)state;
    NEED_GPU();
    const int Ts[] = {1, 9, 31, 40};
    for (size_t k = 0; k < sizeof Ts / sizeof *Ts; k++) {
        check_matmul_add(GGML_Q4_1, 576, 1536, Ts[k]);
        check_matmul_add(GGML_F32, 64, 576, Ts[k]); /* uploaded at the call */
        check_matmul_add(GGML_F16, 77, 100, Ts[k]); /* not whole blocks: through scratch */
    }
    print_message("  matmul_add (Q4_1, F32, F16 of 100 columns; T = 1, 9, 31, 40): equal to matmul then add\n");
}

static void test_matmul_set(void **state) {
    (void)state;
    NEED_GPU();
    const uint32_t q41[3] = {GGML_Q4_1, GGML_Q4_1, GGML_Q4_1}, mixed[3] = {GGML_Q8_0, GGML_F32, GGML_Q4_1};
    const uint32_t bf[8] = {GGML_BF16, GGML_BF16, GGML_BF16, GGML_BF16, GGML_BF16, GGML_BF16, GGML_BF16, GGML_BF16};
    const int qkv[3] = {576, 192, 192}, eight[8] = {8, 9, 16, 17, 100, 1, 64, 1000};
    for (int T = 1; T <= 9; T += 8) {
        check_matmul_set(q41, qkv, 3, T);
        check_matmul_set(mixed, qkv, 3, T);
        check_matmul_set(bf, eight, 8, T);
    }
    print_message("  matmul sets (3 x Q4_1, mixed types, 8 x BF16; T = 1, 9): each output equal to its own call\n");
}

/* Below gemm_min_T a token's outputs do not depend on its batch: bit for bit */
static void test_batch_invariance(void **state) {
    (void)state;
    NEED_GPU();
    tmat m;
    make_mat(&m, GGML_Q4_1, 300, 576, 3);
    int T = gpu->gemm_min_T - 1, cols = 576;
    float *x = malloc(sizeof(float) * (size_t)T * cols);
    rnd(x, (size_t)T * cols, 9, 1.0f);
    float *xg = put(gpu, x, (size_t)T * cols), *og = gpu->alloc(gpu, sizeof(float) * (size_t)T * 300);
    const qmat *ws[1] = {&m.w};
    assert_int_equal(gpu->matmul(gpu, 1, &og, ws, xg, T), 0);
    float *all = get(gpu, og, (size_t)T * 300);
    for (int t = 0; t < T; t++) {
        assert_int_equal(gpu->matmul(gpu, 1, &og, ws, xg + (size_t)t * cols, 1), 0);
        float *one = get(gpu, og, 300);
        assert_memory_equal(one, all + (size_t)t * 300, sizeof(float) * 300);
        free(one);
    }
    gpu->forget_mats(gpu, ws, 1);
    gpu->release(gpu, xg), gpu->release(gpu, og);
    free(all), free(x), free(m.buf);
}

static void test_elementwise(void **state) {
    (void)state;
    NEED_GPU();
    size_t n = 5 * 1536 + 7;
    float *g = malloc(n * sizeof(float)), *u = malloc(n * sizeof(float));
    rnd(g, n, 1, 6.0f), rnd(u, n, 2, 2.0f);
    float *gg = put(gpu, g, n), *ug = put(gpu, u, n), *gc = put(cpu, g, n), *uc = put(cpu, u, n);
    assert_int_equal(gpu->swiglu(gpu, gg, gg, ug, n), 0);
    assert_int_equal(cpu->swiglu(cpu, gc, gc, uc, n), 0);
    float *a = get(gpu, gg, n), *b = get(cpu, gc, n);
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= 16 * FLT_EPSILON * fabsf(b[i]) + 1e-30f)) /* two exp implementations */
            fail_msg("swiglu %zu: %g vs %g", i, a[i], b[i]);
    free(a), free(b);
    assert_int_equal(gpu->add(gpu, gg, ug, n), 0);
    assert_int_equal(cpu->add(cpu, gc, uc, n), 0);
    a = get(gpu, gg, n), b = get(cpu, gc, n);
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= 4 * FLT_EPSILON * fabsf(b[i]) + 1e-30f)) fail_msg("add %zu: %g vs %g", i, a[i], b[i]);
    free(a), free(b);
    /* rmsnorm, in place too (q/k norms run in place) */
    int rows = 7, C = 576;
    float *w = malloc(sizeof(float) * C);
    rnd(w, C, 3, 2.0f);
    assert_int_equal(gpu->rmsnorm(gpu, ug, gg, w, rows, C, 1e-5f), 0);
    assert_int_equal(cpu->rmsnorm(cpu, uc, gc, w, rows, C, 1e-5f), 0);
    assert_int_equal(gpu->rmsnorm(gpu, gg, gg, w, 9 * rows, 64, 1e-6f), 0);
    assert_int_equal(cpu->rmsnorm(cpu, gc, gc, w, 9 * rows, 64, 1e-6f), 0);
    a = get(gpu, ug, (size_t)rows * C), b = get(cpu, uc, (size_t)rows * C);
    for (int i = 0; i < rows * C; i++)
        if (!(fabsf(a[i] - b[i]) <= 4 * FLT_EPSILON * fabsf(b[i]) + 1e-30f)) fail_msg("rmsnorm %d: %g vs %g", i, a[i], b[i]);
    free(a), free(b);
    a = get(gpu, gg, (size_t)rows * C), b = get(cpu, gc, (size_t)rows * C);
    for (int i = 0; i < rows * C; i++)
        if (!(fabsf(a[i] - b[i]) <= 4 * FLT_EPSILON * fabsf(b[i]) + 1e-30f)) fail_msg("rmsnorm in place %d: %g vs %g", i, a[i], b[i]);
    free(a), free(b);
    gpu->release(gpu, gg), gpu->release(gpu, ug), cpu->release(cpu, gc), cpu->release(cpu, uc);
    free(g), free(u), free(w);
}

/* embed and rope with their small inputs as launch arguments and, past KC_TOK_MAX tokens /
 * KC_ROPE_MAX table entries, uploaded */
static void test_embed_rope(void **state) {
    (void)state;
    NEED_GPU();
    const uint32_t types[] = {GGML_Q8_0, GGML_Q4_1, GGML_F32, GGML_F16};
    int tok[100], dim = 64;
    for (int i = 0; i < 100; i++) tok[i] = (i * 37 + 5) % 300;
    tok[1] = 299, tok[2] = 0;
    for (int i = 0; i < 4; i++)
        for (int T = 5; T <= 100; T += 95) {
            tmat m;
            make_mat(&m, types[i], 300, dim, 20 + i);
            float *og = gpu->alloc(gpu, sizeof(float) * T * dim), *oc = cpu->alloc(cpu, sizeof(float) * T * dim);
            assert_int_equal(gpu->embed(gpu, og, &m.w, tok, T), 0);
            assert_int_equal(cpu->embed(cpu, oc, &m.w, tok, T), 0);
            float *a = get(gpu, og, (size_t)T * dim), *b = get(cpu, oc, (size_t)T * dim);
            for (int k = 0; k < T * dim; k++)
                if (!(fabsf(a[k] - b[k]) <= 2 * FLT_EPSILON * fabsf(b[k])))
                    fail_msg("embed %s T=%d %d: %g vs %g", ggml_type_name(types[i]), T, k, a[k], b[k]);
            const qmat *ws[1] = {&m.w};
            gpu->forget_mats(gpu, ws, 1);
            gpu->release(gpu, og), cpu->release(cpu, oc);
            free(a), free(b), free(m.buf);
        }
    int pos[20] = {0, 1, 2, 100, 4000, 8191}, nh = 3, hd = 64;
    for (int i = 6; i < 20; i++) pos[i] = 37 * i;
    float cs[20 * 32], sn[20 * 32], *x = malloc(sizeof(float) * 20 * nh * hd);
    rope_tables_fill(cs, sn, pos, 20, hd, 100000.0, 1.0, NULL);
    for (int neox = 0; neox < 2; neox++)
        for (int T = 6; T <= 20; T += 14) {
            size_t n = (size_t)T * nh * hd;
            rnd(x, n, 30 + neox, 3.0f);
            rope_tables rt = {hd, neox, cs, sn};
            float *xg = put(gpu, x, n), *xc = put(cpu, x, n);
            assert_int_equal(gpu->rope(gpu, xg, T, nh, &rt), 0);
            assert_int_equal(cpu->rope(cpu, xc, T, nh, &rt), 0);
            float *a = get(gpu, xg, n), *b = get(cpu, xc, n);
            for (size_t k = 0; k < n; k++)
                if (!(fabsf(a[k] - b[k]) <= 8 * FLT_EPSILON * 3)) fail_msg("rope neox=%d T=%d %zu: %g vs %g", neox, T, k, a[k], b[k]);
            gpu->release(gpu, xg), cpu->release(cpu, xc);
            free(a), free(b);
        }
    free(x);
}

/* kv_write then attention over varlen requests (a table per call as an argument, T <= 32, and
 * through device scratch, T > 32), causal and with explicit visibility, four head layouts */
static void test_attention(void **state) {
    (void)state;
    NEED_GPU();
    /* head sizes that are multiples of 4 read K as float4; 34 takes the scalar loop */
    const int cfg[4][3] = {{4, 2, 64}, {8, 2, 128}, {6, 3, 32}, {2, 1, 34}};
    for (int ci = 0; ci < 4; ci++) {
        int nh = cfg[ci][0], nkv = cfg[ci][1], hd = cfg[ci][2], kvd = nkv * hd, cap = 96;
        kv_cache *kg[3], *kc[3];
        for (int s = 0; s < 3; s++) {
            kg[s] = kv_cache_new_dims(gpu, 1, nkv, hd, cap);
            kc[s] = kv_cache_new_dims(cpu, 1, nkv, hd, cap);
            /* fill every slot: one request of cap tokens */
            int *seq = calloc(cap, sizeof(int)), *pos = malloc(sizeof(int) * cap);
            for (int t = 0; t < cap; t++) pos[t] = t;
            float *k = malloc(sizeof(float) * cap * kvd), *v = malloc(sizeof(float) * cap * kvd);
            rnd(k, (size_t)cap * kvd, 40 + s, 2.0f), rnd(v, (size_t)cap * kvd, 50 + s, 2.0f);
            float *kgd = put(gpu, k, (size_t)cap * kvd), *vgd = put(gpu, v, (size_t)cap * kvd);
            float *kcd = put(cpu, k, (size_t)cap * kvd), *vcd = put(cpu, v, (size_t)cap * kvd);
            attn_batch abg = {cap, seq, pos, kg + s, NULL}, abc = {cap, seq, pos, kc + s, NULL};
            assert_int_equal(gpu->kv_write(gpu, &abg, 0, kgd, vgd), 0);
            assert_int_equal(cpu->kv_write(cpu, &abc, 0, kcd, vcd), 0);
            float *back = get(gpu, kg[s]->k[0], (size_t)cap * kvd);
            assert_memory_equal(back, k, sizeof(float) * cap * kvd);
            free(back);
            gpu->release(gpu, kgd), gpu->release(gpu, vgd), cpu->release(cpu, kcd), cpu->release(cpu, vcd);
            free(seq), free(pos), free(k), free(v);
        }
        /* batches: (a) 3 requests, 3 + 1 + 40 tokens; (b) the first two; (c) (a) with n_vis */
        int seqA[44], posA[44], nvis[44];
        for (int t = 0; t < 44; t++) {
            seqA[t] = t < 3 ? 0 : t < 4 ? 1 : 2;
            posA[t] = t < 3 ? 7 + t : t < 4 ? 0 : 50 + (t - 4);
            nvis[t] = t < 3 ? 10 : t < 4 ? 1 : 96 - (t % 5);
        }
        struct { int T; const int *nv; } cases[3] = {{44, NULL}, {4, NULL}, {44, nvis}};
        for (int k = 0; k < 3; k++) {
            int T = cases[k].T;
            size_t qn = (size_t)T * nh * hd;
            float *q = malloc(sizeof(float) * qn);
            rnd(q, qn, 60 + k, 2.0f);
            float *qg = put(gpu, q, qn), *qc = put(cpu, q, qn), *og = gpu->alloc(gpu, qn * 4), *oc = cpu->alloc(cpu, qn * 4);
            attn_batch abg = {T, seqA, posA, kg, cases[k].nv}, abc = {T, seqA, posA, kc, cases[k].nv};
            assert_int_equal(gpu->attention(gpu, og, qg, &abg, 0, nh, nkv, hd), 0);
            assert_int_equal(cpu->attention(cpu, oc, qc, &abc, 0, nh, nkv, hd), 0);
            float *a = get(gpu, og, qn), *b = get(cpu, oc, qn);
            size_t where;
            float d = max_abs_diff(a, b, qn, &where);
            print_message("  attention heads %d/%d hd %d case %d (T=%d): max |gpu-cpu| %.3g\n", nh, nkv, hd, k, T, d);
            if (!(d <= 1e-5f)) fail_msg("attention case %d: %g at %zu (gpu %g cpu %g)", k, d, where, a[where], b[where]);
            gpu->release(gpu, qg), gpu->release(gpu, og), cpu->release(cpu, qc), cpu->release(cpu, oc);
            free(a), free(b), free(q);
        }
        for (int s = 0; s < 3; s++) kv_cache_free(gpu, kg[s]), kv_cache_free(cpu, kc[s]);
    }
}

/* ------------------------------------------------------------------------------ the forward */

/* the tiny models the forward tests run (dim, layers, heads, KV heads, hidden, vocab, matrices, embedding,
 * family: 0 Llama, 1 Qwen3, 2 Qwen2) */
static const tiny_spec LLAMA_Q41 = {64, 2, 4, 2, 96, 300, GGML_Q4_1, GGML_Q8_0, 0, 10000.0f};
static const tiny_spec QWEN3_Q8 = {128, 3, 4, 1, 256, 500, GGML_Q8_0, GGML_Q8_0, 1, 1000000.0f};

/* the forward on backends g and c, step by step: within the bounds of the CPU comparison, or (bitwise)
 * equal bit for bit (the same kernels run as a CUDA graph or one launch at a time; the int8 contract
 * on the GPU and on the CPU) */
static void forward_case(const tiny_spec *spec, const char *name, backend *gpu, backend *cpu, int bitwise) {
    size_t n;
    uint8_t *img = tiny_model_gguf(spec, 77, &n);
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path(name));
    write_file(path, img, n);
    free(img);
    model m;
    if (model_load(&m, path)) fail_msg("tiny model: %s", ds_errmsg());
    assert_int_equal(gpu->prepare(gpu, &m), 0);
    assert_int_equal(cpu->prepare(cpu, &m), 0);
    fwd_state fg, fc;
    fwd_state_init(&fg, gpu), fwd_state_init(&fc, cpu);
    int V = m.cfg.vocab_size, dim = m.cfg.dim;
    kv_cache *kg[2] = {kv_cache_new(gpu, &m.cfg, 64), kv_cache_new(gpu, &m.cfg, 64)};
    kv_cache *kc[2] = {kv_cache_new(cpu, &m.cfg, 64), kv_cache_new(cpu, &m.cfg, 64)};
    int toks[64];
    for (int i = 0; i < 64; i++) toks[i] = (i * 37 + 11) % V;
    float *lg = malloc(sizeof(float) * 64 * V), *lc = malloc(sizeof(float) * 64 * V);
    int caps[3] = {-1, 0, spec->n_layers - 1};
    float *capg = malloc(sizeof(float) * 3 * 64 * dim), *capc = malloc(sizeof(float) * 3 * 64 * dim);
    float *hg = malloc(sizeof(float) * 64 * dim), *hc = malloc(sizeof(float) * 64 * dim);
    /* steps: prefill 40 (cuBLAS path), 1 token three times, 3 tokens three times, a 2-request batch of
     * 2 + 5, 1 token (with graphs: a shape runs one kernel at a time when first seen, as a new graph the
     * second time and as that graph with its arguments updated the third) */
    enum { NSTEP = 9 };
    struct { int n_seq, n_new[2]; } steps[NSTEP] = {{1, {40, 0}}, {1, {1, 0}}, {1, {1, 0}}, {1, {1, 0}}, {1, {3, 0}},
                                                    {1, {3, 0}},  {1, {3, 0}}, {2, {2, 5}}, {1, {1, 0}}};
    int off = 0;
    for (int s = 0; s < NSTEP; s++) {
        int T = steps[s].n_new[0] + (steps[s].n_seq > 1 ? steps[s].n_new[1] : 0);
        fwd_batch bg = {steps[s].n_seq, kg, steps[s].n_new, toks + off, 1, lg, 3, caps, capg, hg};
        fwd_batch bc = {steps[s].n_seq, kc, steps[s].n_new, toks + off, 1, lc, 3, caps, capc, hc};
        if (model_forward(&m, &fg, &bg)) fail_msg("gpu forward: %s", ds_errmsg());
        if (model_forward(&m, &fc, &bc)) fail_msg("cpu forward: %s", ds_errmsg());
        float scale = 0;
        for (size_t i = 0; i < (size_t)T * V; i++) scale = fmaxf(scale, fabsf(lc[i]));
        size_t where;
        float d = max_abs_diff(lg, lc, (size_t)T * V, &where), dh = max_abs_diff(hg, hc, (size_t)T * dim, NULL);
        float dc = max_abs_diff(capg, capc, (size_t)3 * T * dim, NULL);
        print_message("  forward %s step %d (%d tokens): logits max |[%s] - [%s]| %.3g (scale %.3g), final hidden %.3g,"
                      " captures %.3g\n", name, s, T, gpu->kernels, cpu->kernels, d, scale, dh, dc);
        if (bitwise && (memcmp(lg, lc, sizeof(float) * (size_t)T * V) || memcmp(hg, hc, sizeof(float) * (size_t)T * dim) ||
                        memcmp(capg, capc, sizeof(float) * (size_t)3 * T * dim)))
            fail_msg("%s step %d: the forward on [%s] differs from [%s] (logits by %g, hidden %g, captures %g): not bit"
                     " for bit", name, s, gpu->kernels, cpu->kernels, d, dh, dc);
        if (!(d <= 1e-3f * fmaxf(1, scale))) fail_msg("%s step %d: logits differ by %g at %zu", name, s, d, where);
        if (!(dh <= 1e-3f && dc <= 1e-3f)) fail_msg("%s step %d: hidden states differ (%g, %g)", name, s, dh, dc);
        off += T;
    }
    for (int s = 0; s < 2; s++) kv_cache_free(gpu, kg[s]), kv_cache_free(cpu, kc[s]);
    fwd_state_free(&fg), fwd_state_free(&fc);
    gpu->forget(gpu, &m), cpu->forget(cpu, &m);
    model_free(&m);
    remove(path);
    free(lg), free(lc), free(capg), free(capc), free(hg), free(hc);
}

static void test_forward_tiny(void **state) {
    (void)state;
    NEED_GPU();
    const tiny_spec f32 = {64, 2, 4, 2, 96, 300, GGML_F32, GGML_F32, 0, 10000.0f};
    forward_case(&LLAMA_Q41, "cuda-q41.gguf", gpu, cpu, 0);
    forward_case(&f32, "cuda-f32.gguf", gpu, cpu, 0);
    forward_case(&QWEN3_Q8, "cuda-qwen3.gguf", gpu, cpu, 0);
    const tiny_spec qwen2 = {128, 3, 4, 2, 256, 500, GGML_Q8_0, GGML_Q8_0, 2, 1000000.0f}; /* q/k/v biases */
    forward_case(&qwen2, "cuda-qwen2.gguf", gpu, cpu, 0);
}

/* Each forward captured and run as a CUDA graph (DSPARK_CUDA_GRAPH) against the same kernels launched
 * one at a time: bit for bit, with the graph made, updated in place and broken by an eager op */
static void test_graphs(void **state) {
    (void)state;
    NEED_GPU();
    /* the reference launches one kernel at a time whatever DSPARK_CUDA_GRAPH says for the others */
    const char *env = getenv("DSPARK_CUDA_GRAPH");
    char *keep = env ? strdup(env) : NULL;
    unsetenv("DSPARK_CUDA_GRAPH");
    backend *plain = backend_new(&(backend_opts){.name = "cuda", .exact = 1});
    setenv("DSPARK_CUDA_GRAPH", "1", 1);
    backend *g = backend_new(&(backend_opts){.name = "cuda", .exact = 1});
    if (keep) setenv("DSPARK_CUDA_GRAPH", keep, 1);
    else unsetenv("DSPARK_CUDA_GRAPH");
    free(keep);
    if (!g || !plain) fail_msg("cuda backend with and without graphs: %s", ds_errmsg());
#ifdef DS_CUDA
    long st0[KC_GRAPH_NSTAT], st[KC_GRAPH_NSTAT];
    kc_graphs_free(); /* graphs are shared by the process: none made by earlier tests */
    kc_graph_stats(st0);
    forward_case(&LLAMA_Q41, "cuda-graph-q41.gguf", g, plain, 1);
    forward_case(&QWEN3_Q8, "cuda-graph-qwen3.gguf", g, plain, 1);
    kc_graph_stats(st);
    /* per model: the 1-token and 3-token shapes each made once and run updated twice (more segments
     * where an op breaks a recording) */
    print_message("  graphs: %ld run, %ld node arguments updated, %ld made, %ld stretches one kernel at a time\n",
                  st[KC_GRAPH_RUNS] - st0[KC_GRAPH_RUNS], st[KC_GRAPH_UPDATES] - st0[KC_GRAPH_UPDATES],
                  st[KC_GRAPH_BUILDS] - st0[KC_GRAPH_BUILDS], st[KC_GRAPH_EAGER] - st0[KC_GRAPH_EAGER]);
    assert_true(st[KC_GRAPH_BUILDS] - st0[KC_GRAPH_BUILDS] >= 4);
    assert_true(st[KC_GRAPH_RUNS] - st0[KC_GRAPH_RUNS] >= 8);
    assert_true(st[KC_GRAPH_UPDATES] - st0[KC_GRAPH_UPDATES] >= 4);
#endif
    setenv("DSPARK_CUDA_GRAPH_STATS", "1", 1); /* how many graphs ran, were made and updated: on stderr */
    backend_free(g);
    backend_free(plain);
    unsetenv("DSPARK_CUDA_GRAPH_STATS");
}

/* ------------------------------------------------------------------------------- SmolLM2 */

/* the argmax and its lead over the runner-up */
static float top2_gap(const float *l, int V, int *best) {
    int b = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[b]) b = i;
    float second = -INFINITY;
    for (int i = 0; i < V; i++)
        if (i != b && l[i] > second) second = l[i];
    *best = b;
    return l[b] - second;
}

static void test_smollm2(void **state) {
    (void)state;
    NEED_GPU();
    if (!need_real_model()) skip();
    target tg, tc;
    if (target_open(&tg, real_model_path(), &(backend_opts){.name = "cuda", .exact = 1})) fail_msg("%s", ds_errmsg());
    if (target_open(&tc, real_model_path(), &(backend_opts){.exact = 1})) fail_msg("%s", ds_errmsg());
    const char *prompts[] = {"The capital of France is", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.",
                             "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                             "How many clips did Natalia sell altogether in April and May? Let's think step by step."};
    int V = tg.m.cfg.vocab_size, n_gen = 48, equal_runs = 0;
    float *lg = malloc(sizeof(float) * (size_t)V * 256), *lc = malloc(sizeof(float) * (size_t)V * 256);
    for (int p = 0; p < 3; p++) {
        ivec ids = {0};
        assert_int_equal(tokenizer_encode(&tc.tk, prompts[p], strlen(prompts[p]), 0, &ids), 0);
        kv_cache *kg = kv_cache_new(tg.be, &tg.m.cfg, 256), *kc = kv_cache_new(tc.be, &tc.m.cfg, 256);
        /* prefill with all logits (prompts of 5-40 tokens: both matmul paths) */
        assert_int_equal(model_forward_one(&tg.m, &tg.fs, kg, ids.v, ids.n, 1, lg), 0);
        assert_int_equal(model_forward_one(&tc.m, &tc.fs, kc, ids.v, ids.n, 1, lc), 0);
        size_t where;
        float d = max_abs_diff(lg, lc, (size_t)ids.n * V, &where);
        print_message("  SmolLM2 prompt %d (%d tokens): prefill logits max |gpu-cpu| %.3g\n", p, ids.n, d);
        if (!(d <= 2e-2f)) fail_msg("SmolLM2 prefill logits differ by %g (token %zu)", d, where / V);
        int tg_tok, tc_tok, diverged = -1;
        top2_gap(lg + (size_t)(ids.n - 1) * V, V, &tg_tok);
        top2_gap(lc + (size_t)(ids.n - 1) * V, V, &tc_tok);
        double t_gpu = 0;
        for (int i = 0; i < n_gen; i++) {
            if (tg_tok != tc_tok) {
                int b;
                float gap = top2_gap(lc, V, &b);
                print_message("  greedy diverges at step %d: gpu %d cpu %d, cpu's top-2 gap %.4f\n", i, tg_tok, tc_tok, gap);
                if (gap > 0.05f) fail_msg("greedy continuation diverges at step %d with a top-2 gap of %.4f (not a near-tie)", i, gap);
                diverged = i;
                break;
            }
            double t0 = ds_now();
            assert_int_equal(model_forward_one(&tg.m, &tg.fs, kg, &tg_tok, 1, 0, lg), 0);
            t_gpu += ds_now() - t0;
            assert_int_equal(model_forward_one(&tc.m, &tc.fs, kc, &tc_tok, 1, 0, lc), 0);
            d = max_abs_diff(lg, lc, (size_t)V, &where);
            if (!(d <= 2e-2f)) fail_msg("SmolLM2 decode step %d: logits differ by %g", i, d);
            top2_gap(lg, V, &tg_tok);
            top2_gap(lc, V, &tc_tok);
        }
        if (diverged < 0) equal_runs++;
        print_message("  prompt %d: greedy %s over %d tokens; gpu decode %.3f ms/token (single forwards, synchronous)\n", p,
                      diverged < 0 ? "equal" : "diverged at a near-tie", n_gen, 1e3 * t_gpu / n_gen);
        kv_cache_free(tg.be, kg), kv_cache_free(tc.be, kc);
        ivec_free(&ids);
    }
    assert_true(equal_runs >= 2);
    free(lg), free(lc);
    target_close(&tg), target_close(&tc);
}

/* ------------------------------------------------------------------------- the int8 contract */

#define NEED_GPU8()                                                                 \
    do {                                                                            \
        NEED_GPU();                                                                 \
        if (!gpu8 || !cpu8) fail_msg("int8 backends: %s", ds_errmsg());             \
    } while (0)

/* n bytes of a and b equal, else the first difference named */
static void same_bits(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4)) fail_msg("%s: [%zu] gpu %.9g cpu %.9g (not bit for bit)", what, i, a[i], b[i]);
}

/* out = W x on both int8 backends (n matrices sharing x in one call, or matmul_add onto r): bit for bit */
static int check_i8(const uint32_t *types, const int *rows, int n, int cols, int T, int add, uint64_t seed) {
    tmat m[8];
    const qmat *ws[8];
    float *og[8], *oc[8];
    size_t nx = (size_t)T * cols;
    float *x = malloc(sizeof(float) * nx);
    rnd(x, nx, seed, 1.0f);
    x[3] = 9.0f; /* an outlier in a block */
    float *xg = put(gpu8, x, nx), *xc = put(cpu8, x, nx);
    for (int i = 0; i < n; i++) {
        make_mat(&m[i], types[i], rows[i], cols, seed + 2 * (uint64_t)i + 1);
        ws[i] = &m[i].w;
        float *r0 = malloc(sizeof(float) * (size_t)T * rows[i]);
        rnd(r0, (size_t)T * rows[i], seed + 50 + i, 2.0f);
        og[i] = put(gpu8, r0, (size_t)T * rows[i]), oc[i] = put(cpu8, r0, (size_t)T * rows[i]);
        free(r0);
    }
    if (add) {
        float *prod = cpu8->alloc(cpu8, sizeof(float) * (size_t)T * rows[0]);
        assert_int_equal(gpu8->matmul_add(gpu8, og[0], ws[0], xg, T), 0);
        assert_int_equal(cpu8->matmul(cpu8, 1, &prod, ws, xc, T), 0); /* the CPU: matmul then add */
        assert_int_equal(cpu8->add(cpu8, oc[0], prod, (size_t)T * rows[0]), 0);
        cpu8->release(cpu8, prod);
    } else {
        assert_int_equal(gpu8->matmul(gpu8, n, og, ws, xg, T), 0);
        assert_int_equal(cpu8->matmul(cpu8, n, oc, ws, xc, T), 0);
    }
    int differ = 0;
    for (int i = 0; i < n; i++) {
        size_t no = (size_t)T * rows[i];
        float *a = get(gpu8, og[i], no), *b = get(cpu8, oc[i], no);
        if (memcmp(a, b, sizeof(float) * no) && !add) { /* which side moved: each again, against itself */
            differ = 1;
            size_t at = 0;
            while (!memcmp(&a[at], &b[at], 4)) at++;
            assert_int_equal(gpu8->matmul(gpu8, 1, &og[i], &ws[i], xg, T), 0);
            assert_int_equal(cpu8->matmul(cpu8, 1, &oc[i], &ws[i], xc, T), 0);
            float *a2 = get(gpu8, og[i], no), *b2 = get(cpu8, oc[i], no);
            print_message("  %s %dx%d T=%d matrix %d: first difference [%zu] (token %zu, row %zu): gpu %.9g cpu %.9g;"
                          " again alone: gpu %s, cpu %s, now %s\n", ggml_type_name(types[i]), rows[i], cols, T, i, at,
                          at / rows[i], at % rows[i], a[at], b[at], memcmp(a, a2, 4 * no) ? "moved" : "the same",
                          memcmp(b, b2, 4 * no) ? "moved" : "the same", memcmp(a2, b2, 4 * no) ? "differ" : "equal");
            free(a2), free(b2);
        } else differ |= memcmp(a, b, sizeof(float) * no) != 0;
        free(a), free(b);
        gpu8->release(gpu8, og[i]), cpu8->release(cpu8, oc[i]);
    }
    gpu8->forget_mats(gpu8, ws, n);
    cpu8->forget_mats(cpu8, ws, n);
    for (int i = 0; i < n; i++) free(m[i].buf);
    gpu8->release(gpu8, xg), cpu8->release(cpu8, xc);
    free(x);
    return differ;
}

static void test_i8_matmul(void **state) {
    (void)state;
    NEED_GPU8();
    const uint32_t types[] = {GGML_Q8_0, GGML_Q4_1, GGML_Q5_0, GGML_Q4_K, GGML_Q6_K};
    const int Ts[] = {1, 3, 8, 9, 33, 70};
    int cases = 0;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        int kq = types[i] == GGML_Q4_K || types[i] == GGML_Q6_K;
        for (size_t k = 0; k < sizeof Ts / sizeof *Ts; k++) {
            int rows[1] = {77};
            /* 18 and 40 blocks a row (a pass of 32 and part of the next); K types 16 and 48 */
            int cols = kq ? (k % 2 ? 1536 : 512) : (k % 2 ? 1280 : 576);
            if (check_i8(&types[i], rows, 1, cols, Ts[k], 0, 300 + 10 * i + k))
                fail_msg("int8 matmul %s 77x%d T=%d: gpu and cpu differ", ggml_type_name(types[i]), cols, Ts[k]);
            cases++;
        }
    }
    /* sets in one launch (q/k/v of one type; a run broken by a kind change), the head's shape, matmul_add */
    const uint32_t qkv[3] = {GGML_Q4_K, GGML_Q4_K, GGML_Q6_K}, q41[3] = {GGML_Q4_1, GGML_Q4_1, GGML_Q4_1};
    const int qkv_rows[3] = {512, 128, 128}, head[1] = {8192}, down[1] = {256};
    for (int T = 1; T <= 9; T += 8) {
        if (check_i8(qkv, qkv_rows, 3, 512, T, 0, 400 + T)) fail_msg("int8 matmul set (Q4_K, Q4_K, Q6_K) T=%d differs", T);
        if (check_i8(q41, qkv_rows, 3, 576, T, 0, 410 + T)) fail_msg("int8 matmul set of 3 Q4_1 T=%d differs", T);
        if (check_i8(&types[4], head, 1, 1536, T, 0, 420 + T)) fail_msg("int8 Q6_K head 8192x1536 T=%d differs", T);
        if (check_i8(&types[3], down, 1, 8960 / 256 * 256, T, 1, 430 + T)) fail_msg("int8 matmul_add Q4_K T=%d differs", T);
        if (check_i8(&types[1], down, 1, 576, T, 1, 440 + T)) fail_msg("int8 matmul_add Q4_1 T=%d differs", T);
        cases += 5;
    }
    print_message("  int8 matmul: %d cases (5 types, T = 1..70, sets, the head's shape, matmul_add): gpu == cpu bit for bit\n",
                  cases);
#ifdef DS_CUDA
    /* the mutant (the epilogue's lanes summed in another order) must be seen */
    kc_i8_mutant(1);
    int seen = 0;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        for (int T = 1; T <= 9; T += 8) { /* one token (quantized in the kernel) and a tile */
            int rows[1] = {77}, kq = types[i] == GGML_Q4_K || types[i] == GGML_Q6_K;
            seen += check_i8(&types[i], rows, 1, kq ? 1536 : 1280, T, 0, 500 + i);
        }
    kc_i8_mutant(0);
    print_message("  int8 matmul mutant (lanes summed (l0 + l2) + (l1 + l3)): caught in %d of 10 cases (5 types, T = 1, 9)\n",
                  seen);
    assert_int_equal(seen, 10);
#endif
}

static void test_i8_ops(void **state) {
    (void)state;
    NEED_GPU8();
    size_t n = 5 * 1536 + 7;
    float *g = malloc(n * sizeof(float)), *u = malloc(n * sizeof(float));
    rnd(g, n, 1, 12.0f), rnd(u, n, 2, 2.0f);
    g[0] = 100.0f, g[1] = -100.0f, g[2] = 0.0f;
    float *gg = put(gpu8, g, n), *ug = put(gpu8, u, n), *gc = put(cpu8, g, n), *uc = put(cpu8, u, n);
    assert_int_equal(gpu8->swiglu(gpu8, gg, gg, ug, n), 0);
    assert_int_equal(cpu8->swiglu(cpu8, gc, gc, uc, n), 0);
    float *a = get(gpu8, gg, n), *b = get(cpu8, gc, n);
    same_bits(a, b, n, "swiglu");
    free(a), free(b);
    assert_int_equal(gpu8->add(gpu8, gg, ug, n), 0);
    assert_int_equal(cpu8->add(cpu8, gc, uc, n), 0);
    a = get(gpu8, gg, n), b = get(cpu8, gc, n);
    same_bits(a, b, n, "add");
    free(a), free(b);
    const int shapes[3][2] = {{7, 576}, {63, 64}, {5, 100}}; /* 100: a tail of 4 past the lanes */
    float *w = malloc(sizeof(float) * 576);
    rnd(w, 576, 3, 2.0f);
    for (int k = 0; k < 3; k++) {
        int rows = shapes[k][0], C = shapes[k][1];
        assert_int_equal(gpu8->rmsnorm(gpu8, ug, gg, w, rows, C, 1e-6f), 0);
        assert_int_equal(cpu8->rmsnorm(cpu8, uc, gc, w, rows, C, 1e-6f), 0);
        a = get(gpu8, ug, (size_t)rows * C), b = get(cpu8, uc, (size_t)rows * C);
        same_bits(a, b, (size_t)rows * C, "rmsnorm");
        free(a), free(b);
        assert_int_equal(gpu8->rmsnorm(gpu8, gg, gg, w, rows, C, 1e-5f), 0); /* in place */
        assert_int_equal(cpu8->rmsnorm(cpu8, gc, gc, w, rows, C, 1e-5f), 0);
        a = get(gpu8, gg, (size_t)rows * C), b = get(cpu8, gc, (size_t)rows * C);
        same_bits(a, b, (size_t)rows * C, "rmsnorm in place");
        free(a), free(b);
    }
    /* embed (types the device reads, and Q6_K decoded on the host), rope */
    const uint32_t et[] = {GGML_Q8_0, GGML_Q4_1, GGML_F32, GGML_F16, GGML_Q6_K};
    int tok[40];
    for (int i = 0; i < 40; i++) tok[i] = (i * 37 + 5) % 300;
    for (int i = 0; i < 5; i++) {
        tmat m;
        int dim = et[i] == GGML_Q6_K ? 256 : 64, T = 40;
        make_mat(&m, et[i], 300, dim, 20 + i);
        float *og = gpu8->alloc(gpu8, sizeof(float) * T * dim), *oc = cpu8->alloc(cpu8, sizeof(float) * T * dim);
        assert_int_equal(gpu8->embed(gpu8, og, &m.w, tok, T), 0);
        assert_int_equal(cpu8->embed(cpu8, oc, &m.w, tok, T), 0);
        a = get(gpu8, og, (size_t)T * dim), b = get(cpu8, oc, (size_t)T * dim);
        same_bits(a, b, (size_t)T * dim, ggml_type_name(et[i]));
        const qmat *ws[1] = {&m.w};
        gpu8->forget_mats(gpu8, ws, 1);
        gpu8->release(gpu8, og), cpu8->release(cpu8, oc);
        free(a), free(b), free(m.buf);
    }
    int pos[20];
    for (int i = 0; i < 20; i++) pos[i] = 37 * i + (i == 3) * 4000;
    float cs[20 * 64], sn[20 * 64], *x = malloc(sizeof(float) * 20 * 3 * 128);
    rope_tables_fill(cs, sn, pos, 20, 128, 1000000.0, 1.0, NULL);
    for (int neox = 0; neox < 2; neox++) {
        size_t nr = (size_t)20 * 3 * 128;
        rnd(x, nr, 30 + neox, 3.0f);
        rope_tables rt = {128, neox, cs, sn};
        float *xg = put(gpu8, x, nr), *xc = put(cpu8, x, nr);
        assert_int_equal(gpu8->rope(gpu8, xg, 20, 3, &rt), 0);
        assert_int_equal(cpu8->rope(cpu8, xc, 20, 3, &rt), 0);
        a = get(gpu8, xg, nr), b = get(cpu8, xc, nr);
        same_bits(a, b, nr, "rope");
        gpu8->release(gpu8, xg), cpu8->release(cpu8, xc);
        free(a), free(b);
    }
    print_message("  int8 ops: swiglu, add, rmsnorm (3 shapes, in place), embed (5 types), rope: gpu == cpu bit for bit\n");
    gpu8->release(gpu8, gg), gpu8->release(gpu8, ug), cpu8->release(cpu8, gc), cpu8->release(cpu8, uc);
    free(g), free(u), free(w), free(x);
}

/* kv_write into bf16 caches, then attention over varlen requests: bit for bit the CPU's */
static void test_i8_attention(void **state) {
    (void)state;
    NEED_GPU8();
    const int cfg[3][3] = {{12, 2, 128}, {4, 2, 64}, {6, 3, 40}}; /* 40: a tail past the chunks of 16 */
    for (int ci = 0; ci < 3; ci++) {
        int nh = cfg[ci][0], nkv = cfg[ci][1], hd = cfg[ci][2], kvd = nkv * hd, cap = 300;
        model_config mc = {0};
        mc.n_layers = 1, mc.n_kv_heads = nkv, mc.head_dim = hd, mc.n_heads = nh;
        kv_cache *kg[2], *kc[2];
        for (int s = 0; s < 2; s++) {
            kg[s] = kv_cache_new(gpu8, &mc, cap), kc[s] = kv_cache_new(cpu8, &mc, cap);
            assert_int_equal(kg[s]->elem, 2);
            int *seq = calloc(cap, sizeof(int)), *pos = malloc(sizeof(int) * cap);
            for (int t = 0; t < cap; t++) pos[t] = t;
            float *k = malloc(sizeof(float) * cap * kvd), *v = malloc(sizeof(float) * cap * kvd);
            rnd(k, (size_t)cap * kvd, 40 + s, 3.0f), rnd(v, (size_t)cap * kvd, 50 + s, 2.0f);
            float *kgd = put(gpu8, k, (size_t)cap * kvd), *vgd = put(gpu8, v, (size_t)cap * kvd);
            float *kcd = put(cpu8, k, (size_t)cap * kvd), *vcd = put(cpu8, v, (size_t)cap * kvd);
            attn_batch abg = {cap, seq, pos, kg + s, NULL}, abc = {cap, seq, pos, kc + s, NULL};
            assert_int_equal(gpu8->kv_write(gpu8, &abg, 0, kgd, vgd), 0);
            assert_int_equal(cpu8->kv_write(cpu8, &abc, 0, kcd, vcd), 0);
            gpu8->release(gpu8, kgd), gpu8->release(gpu8, vgd), cpu8->release(cpu8, kcd), cpu8->release(cpu8, vcd);
            free(seq), free(pos), free(k), free(v);
        }
        /* (a) decode of both requests at 299 and 130 positions; (b) 3 + 40 tokens (c) 1 token, n_vis */
        int seqA[43], posA[43], nvis[43];
        for (int t = 0; t < 43; t++) {
            seqA[t] = t < 3 ? 0 : 1;
            posA[t] = t < 3 ? 296 + t : 90 + (t - 3);
            nvis[t] = t < 3 ? 17 : 300 - t;
        }
        struct { int T; const int *seq, *pos, *nv; } cases[3] = {{2, (int[]){0, 1}, (int[]){299, 129}, NULL},
                                                                 {43, seqA, posA, NULL}, {43, seqA, posA, nvis}};
        for (int k = 0; k < 3; k++) {
            int T = cases[k].T;
            size_t qn = (size_t)T * nh * hd;
            float *q = malloc(sizeof(float) * qn);
            rnd(q, qn, 60 + k, 2.0f);
            float *qg = put(gpu8, q, qn), *qc = put(cpu8, q, qn), *og = gpu8->alloc(gpu8, qn * 4), *oc = cpu8->alloc(cpu8, qn * 4);
            attn_batch abg = {T, cases[k].seq, cases[k].pos, kg, cases[k].nv}, abc = {T, cases[k].seq, cases[k].pos, kc, cases[k].nv};
            assert_int_equal(gpu8->attention(gpu8, og, qg, &abg, 0, nh, nkv, hd), 0);
            assert_int_equal(cpu8->attention(cpu8, oc, qc, &abc, 0, nh, nkv, hd), 0);
            float *a = get(gpu8, og, qn), *b = get(cpu8, oc, qn);
            char what[96];
            snprintf(what, sizeof what, "attention heads %d/%d hd %d case %d", nh, nkv, hd, k);
            same_bits(a, b, qn, what);
            gpu8->release(gpu8, qg), gpu8->release(gpu8, og), cpu8->release(cpu8, qc), cpu8->release(cpu8, oc);
            free(a), free(b), free(q);
        }
        for (int s = 0; s < 2; s++) kv_cache_free(gpu8, kg[s]), kv_cache_free(cpu8, kc[s]);
    }
    print_message("  int8 attention (bf16 caches; 3 head layouts; decode at 130-300 positions, 43-token batches,"
                  " explicit visibility): gpu == cpu bit for bit\n");
}

/* A draft tree's round on the GPU (int8 contract): every node's logits bit for bit the CPU's, beside a
 * chain request in the same batch; then the accepted path kept (kv_cache_keep) and one more token */
static void test_i8_tree(void **state) {
    (void)state;
    NEED_GPU8();
    const tiny_spec spec = {128, 3, 4, 2, 256, 500, GGML_Q4_1, GGML_Q8_0, 2, 1000000.0f};
    size_t n;
    uint8_t *img = tiny_model_gguf(&spec, 78, &n);
    const char *path = tmp_path("cuda8-tree.gguf");
    write_file(path, img, n);
    free(img);
    model m;
    if (model_load(&m, path)) fail_msg("tiny model: %s", ds_errmsg());
    backend *be[2] = {gpu8, cpu8};
    fwd_state fs[2];
    kv_cache *kv[2][2];
    int V = m.cfg.vocab_size;
    enum { NT = 12, PRE = 37 };
    const int par[NT] = {-1, 0, 0, 1, 1, 1, 2, 3, 7, 8, 9, 6};
    int pre[PRE], flat[NT + 5], parent[NT + 5], n_new[2] = {NT, 5};
    for (int i = 0; i < PRE; i++) pre[i] = (i * 41 + 3) % V;
    for (int i = 0; i < NT + 5; i++) flat[i] = (i * 29 + 7) % V;
    flat[4] = flat[3]; /* a repeated token on two branches */
    memcpy(parent, par, sizeof par);
    for (int j = 0; j < 5; j++) parent[NT + j] = j - 1;
    float *lg[2], *l1[2];
    for (int b = 0; b < 2; b++) {
        assert_int_equal(be[b]->prepare(be[b], &m), 0);
        fwd_state_init(&fs[b], be[b]);
        kv[b][0] = kv_cache_new(be[b], &m.cfg, 96), kv[b][1] = kv_cache_new(be[b], &m.cfg, 96);
        assert_int_equal(model_forward_one(&m, &fs[b], kv[b][0], pre, PRE, 0, NULL), 0);
        assert_int_equal(model_forward_one(&m, &fs[b], kv[b][1], pre, 7, 0, NULL), 0);
        lg[b] = malloc(sizeof(float) * (NT + 5) * (size_t)V), l1[b] = malloc(sizeof(float) * (size_t)V);
        fwd_batch fb = {.n_seq = 2, .kv = kv[b], .n_new = n_new, .tokens = flat, .all_logits = 1, .logits = lg[b],
                        .parent = parent};
        if (model_forward(&m, &fs[b], &fb)) fail_msg("%s: tree forward: %s", be[b]->kernels, ds_errmsg());
        const int keep[5] = {0, 1, 3, 7, 8};
        int slots[5], nxt = (flat[5] + 1) % V;
        for (int j = 0; j < 5; j++) slots[j] = PRE + keep[j];
        assert_int_equal(kv_cache_keep(be[b], kv[b][0], PRE, slots, 5), 0);
        assert_int_equal(model_forward_one(&m, &fs[b], kv[b][0], &nxt, 1, 0, l1[b]), 0);
    }
    same_bits(lg[0], lg[1], (size_t)(NT + 5) * V, "tree round's logits (12 nodes and a 5-token chain)");
    same_bits(l1[0], l1[1], (size_t)V, "the token after the kept path");
    print_message("  int8 tree round (12 nodes, branches of 2 and 3, a repeated token; a chain beside it), then the kept"
                  " path and one token: gpu == cpu bit for bit\n");
    for (int b = 0; b < 2; b++) {
        kv_cache_free(be[b], kv[b][0]), kv_cache_free(be[b], kv[b][1]);
        fwd_state_free(&fs[b]);
        be[b]->forget(be[b], &m);
        free(lg[b]), free(l1[b]);
    }
    model_free(&m);
    remove(path);
}

/* the whole forward, every step's logits, hidden states and captures bit for bit the CPU's */
static void test_i8_forward(void **state) {
    (void)state;
    NEED_GPU8();
    const tiny_spec qwen2k = {256, 2, 4, 2, 512, 300, GGML_Q4_K, GGML_Q6_K, 2, 1000000.0f};
    const tiny_spec qwen2q5 = {256, 2, 4, 2, 512, 300, GGML_Q5_0, GGML_Q8_0, 2, 1000000.0f};
    forward_case(&LLAMA_Q41, "cuda8-q41.gguf", gpu8, cpu8, 1);
    forward_case(&QWEN3_Q8, "cuda8-qwen3.gguf", gpu8, cpu8, 1);
    forward_case(&qwen2k, "cuda8-qwen2k.gguf", gpu8, cpu8, 1);
    forward_case(&qwen2q5, "cuda8-qwen2q5.gguf", gpu8, cpu8, 1);
}

int main(void) {
#ifdef DS_CUDA
    gpu = backend_new(&(backend_opts){.name = "cuda", .exact = 1});
    if (!gpu) snprintf(why_skip, sizeof why_skip, "%s", ds_errmsg());
    else gpu8 = backend_new(&(backend_opts){.name = "cuda"});
#else
    snprintf(why_skip, sizeof why_skip, "this build has no CUDA (make CUDA=1 with nvcc)");
#endif
    if (!gpu) fprintf(stderr, "test_cuda: every test skips: %s\n", why_skip);
    else fprintf(stderr, "test_cuda: %s, %s\n", gpu->device, gpu->kernels);
    cpu = backend_cpu_new(&(backend_opts){.n_threads = 0, .exact = 1});
    cpu8 = backend_cpu_new(&(backend_opts){.n_threads = 0});
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),      cmocka_unit_test(test_matmul_set), cmocka_unit_test(test_matmul_add), cmocka_unit_test(test_batch_invariance), cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_embed_rope),  cmocka_unit_test(test_attention),        cmocka_unit_test(test_forward_tiny), cmocka_unit_test(test_graphs),
        cmocka_unit_test(test_smollm2),
        cmocka_unit_test(test_i8_matmul),   cmocka_unit_test(test_i8_ops),     cmocka_unit_test(test_i8_attention), cmocka_unit_test(test_i8_forward), cmocka_unit_test(test_i8_tree),
    };
    int rc = cmocka_run_group_tests_name("cuda", tests, NULL, NULL);
    backend_free(gpu);
    backend_free(cpu);
    backend_free(gpu8);
    backend_free(cpu8);
    return rc;
}
