/* test_kernels — the fused quantized matmul kernels, on every path this CPU runs (scalar always,
 * AVX2 and AVX-512 VNNI where present), against float64 computations written here independently:
 *  - int8 contract: bit-identical to the scalar path; within a derived rounding bound of the same
 *    quantized formula in double; within a derived quantization bound of the exact product;
 *  - exact contract: within the fp32 summation bound of the exact product;
 *  - both: a token's result does not depend on the batch it is in.
 * Bounds (u = 2^-24, g(k) = k u / (1 - k u), the standard bound on k float operations in sequence):
 *  activation quantization: p = round(fl(x * fl(127/amax))), e = fl(amax/127), so
 *    |e p - x| <= e/2 + 3.01 u |x|;  the kernels add d*e*i and m*fl(e*sum p) per block, which is
 *    sum_j (d q_j + m) e p_j up to rounding, so
 *    |y_int - y| <= sum_bj |d_b q_bj + m_b| (e_b/2 + 3.01 u |x_bj|)                             (quantization)
 *                 + g(nb/4 + 6) sum_b (|i_b d_b e_b| + |m_b e_b sum p_b|)                          (rounding)
 *  exact: |y_f32 - y| <= g(cols + 2 nb + 8) (sum_j |w_j x_j| + sum_b |m_b| sum_j |x_bj|). */
#include "testutil.h"

#include <omp.h>

#include "../runtime/kernels/kernels_cpu.h"

static double gam(double k) { return k * 0x1p-24 / (1 - k * 0x1p-24); }

typedef struct {
    uint32_t type;
    int rows, cols;
    void *blocks;  /* the GGUF blocks */
    qmat w;
    qk_mat pk; /* rows layout (exact contract) */
    qk_mat pp; /* panel layout (int8 contract) */
} tmat;

static uint16_t rand_f16(rng_t *r, double lo, double hi, int any_sign) {
    double v = lo + (hi - lo) * rng_uniform(r);
    return ds_f32_to_f16((float)(any_sign && rng_uniform(r) < 0.5 ? -v : v));
}

/* Random blocks of the file's layout: random code bytes, fp16 scales of a size real files have
 * (Q4_K's D positive, its Dmin either sign; Q6_K's int8 scales anywhere in -128..127) */
static void random_blocks(uint32_t type, uint8_t *p, size_t n_blocks, rng_t *r) {
    size_t bs = (size_t)ggml_type_get(type)->size;
    for (size_t i = 0; i < n_blocks * bs; i++) p[i] = (uint8_t)(rng_u64(r) & 255);
    for (size_t i = 0; i < n_blocks; i++) {
        uint8_t *b = p + i * bs;
        if (type == GGML_Q5_0) ((block_q5_0 *)b)->d = rand_f16(r, 0.001, 0.03, 1);
        else if (type == GGML_Q4_K) {
            ((block_q4_K *)b)->d = rand_f16(r, 0.0002, 0.004, 0);
            ((block_q4_K *)b)->dmin = rand_f16(r, 0.0002, 0.004, 1);
        } else if (type == GGML_Q6_K) ((block_q6_K *)b)->d = rand_f16(r, 0.00002, 0.0004, 1);
    }
}

static void tmat_make(tmat *m, uint32_t type, int rows, int cols, rng_t *r) {
    m->type = type, m->rows = rows, m->cols = cols;
    size_t n = (size_t)rows * cols;
    const ggml_type_info *ti = ggml_type_get(type);
    size_t rb = (size_t)cols / (size_t)ti->blck * (size_t)ti->size;
    m->blocks = malloc(rb * rows);
    if (type == GGML_Q4_1 || type == GGML_Q8_0) {
        float *f = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) f[i] = (float)(rng_uniform(r) * 2 - 1) * (i % 97 == 0 ? 4.0f : 0.3f);
        if (type == GGML_Q4_1) quantize_q4_1(f, m->blocks, (int64_t)n);
        else quantize_q8_0(f, m->blocks, (int64_t)n);
        free(f);
    } else
        random_blocks(type, m->blocks, n / (size_t)ti->blck, r);
    m->w = (qmat){type, rows, cols, rb, m->blocks};
    if (qk_pack(&m->w, QK_ROWS, &m->pk) || qk_pack(&m->w, QK_PANELS, &m->pp)) fail_msg("%s", ds_errmsg());
}

static void tmat_free(tmat *m) {
    qk_mat_free(&m->pk);
    qk_mat_free(&m->pp);
    free(m->blocks);
}

/* Block b (32 weights) of row r read from the GGUF blocks, written here from ggml's layouts (not
 * kernels_cpu.c's packer): weight j = D k[j] c[j] + M exactly, with integer codes c, integer
 * multipliers k (Q6_K's half scales, else 1) and D, M doubles (Q4_K: D = d sc, M = -dmin mn). Checked
 * against the type table's decoder (itself checked against gguf-py) to float rounding. */
static void block_of(const tmat *m, int r, int b, int *c, int *k, double *D, double *M) {
    const uint8_t *row = (const uint8_t *)m->blocks + (size_t)r * m->w.row_bytes;
    for (int j = 0; j < 32; j++) k[j] = 1;
    *M = 0;
    if (m->type == GGML_Q4_1) {
        const block_q4_1 *bl = (const block_q4_1 *)row + b;
        for (int j = 0; j < 16; j++) c[j] = bl->qs[j] & 15, c[j + 16] = bl->qs[j] >> 4;
        *D = ds_f16_to_f32(bl->d), *M = ds_f16_to_f32(bl->m);
    } else if (m->type == GGML_Q8_0) {
        const block_q8_0 *bl = (const block_q8_0 *)row + b;
        for (int j = 0; j < 32; j++) c[j] = bl->qs[j];
        *D = ds_f16_to_f32(bl->d);
    } else if (m->type == GGML_Q5_0) {
        const block_q5_0 *bl = (const block_q5_0 *)row + b;
        for (int j = 0; j < 32; j++) {
            int hb = (bl->qh[j / 8] >> (j % 8)) & 1; /* the fifth bits, little-endian over 4 bytes */
            c[j] = ((j < 16 ? bl->qs[j] & 15 : bl->qs[j - 16] >> 4) | hb << 4) - 16;
        }
        *D = ds_f16_to_f32(bl->d);
    } else if (m->type == GGML_Q4_K) {
        const block_q4_K *bl = (const block_q4_K *)row + b / 8;
        int s = b % 8;
        const uint8_t *sc = bl->scales;
        int scale = s < 4 ? sc[s] & 63 : (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
        int mn = s < 4 ? sc[s + 4] & 63 : (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
        for (int j = 0; j < 32; j++) c[j] = s % 2 ? bl->qs[32 * (s / 2) + j] >> 4 : bl->qs[32 * (s / 2) + j] & 15;
        *D = (double)ds_f16_to_f32(bl->d) * scale, *M = -(double)ds_f16_to_f32(bl->dmin) * mn;
    } else { /* Q6_K: 256 weights in two halves of 128, each 4 groups of 32 sharing ql bytes and qh */
        const block_q6_K *bl = (const block_q6_K *)row + b / 8;
        int e0 = 32 * (b % 8), half = e0 / 128, grp = e0 % 128 / 32;
        for (int j = 0; j < 32; j++) {
            uint8_t l = bl->ql[64 * half + (grp == 1 || grp == 3 ? 32 : 0) + j];
            int lo = grp < 2 ? l & 15 : l >> 4, hi = (bl->qh[32 * half + j] >> (2 * grp)) & 3;
            c[j] = (lo | hi << 4) - 32;
            k[j] = bl->scales[(e0 + j) / 16];
        }
        *D = ds_f16_to_f32(bl->d);
    }
}

/* activations with a spread of scales, an all-zero block and an outlier */
static float *make_x(int T, int cols, rng_t *r) {
    float *x = malloc(sizeof(float) * (size_t)T * cols);
    for (int i = 0; i < T * cols; i++) x[i] = (float)((rng_uniform(r) * 2 - 1) * (1 + 10 * (i % 7 == 0)));
    for (int j = 0; j < 32 && cols >= 64; j++) x[32 + j] = 0; /* token 0, block 1 */
    x[5] = 60.0f;
    return x;
}

static void alloc_act(qk_act *a, int T, int cols) {
    a->q = malloc((size_t)T * cols);
    a->e = malloc(sizeof(float) * (size_t)T * cols / 32);
    a->s = malloc(sizeof(float) * (size_t)T * cols / 32);
    a->ps = malloc(sizeof(int32_t) * (size_t)T * cols / 32);
    a->ph = malloc(sizeof(int32_t) * (size_t)T * cols / 32);
    a->ph2 = malloc(sizeof(int32_t) * (size_t)T * cols / 32);
}
static void free_act(qk_act *a) { free(a->q), free(a->e), free(a->s), free(a->ps), free(a->ph), free(a->ph2); }

static float f16u(const uint8_t *p) { return ds_f16_to_f32((ds_f16)(p[0] | p[1] << 8)); }

/* The CUDA backend's int8 kernel (kernels_cuda_i8.cu) on qk_pack's QK_DEVICE form, written again in
 * C as the GPU computes it (a lane per block of a pass of 32, lanes 0-3 adding the pass's values in
 * order): a machine without a GPU checks the packer and the kernel's arithmetic against the CPU's
 * panels here, bit for bit; test_cuda checks the GPU itself. */
static void device_rows_i8(const qk_mat *m, const qk_act *a, float *out, size_t ld) {
    int nb = m->nb, kind = m->kind;
    size_t srb = qk_device_scale_bytes(kind, nb);
    for (int r = 0; r < m->rows; r++)
        for (int t = 0; t < a->T; t++) {
            const uint8_t *codes = m->data + (size_t)r * m->rb, *sc = m->data + m->qoff + (size_t)r * srb;
            float acc[4] = {0, 0, 0, 0};
            for (int b0 = 0; b0 < nb; b0 += 32) {
                float sb[32] = {0};
                for (int lane = 0; lane < 32 && b0 + lane < nb; lane++) {
                    int b = b0 + lane, lo = 0, hi = 0;
                    const uint8_t *c = codes + (size_t)b * m->bb;
                    const int8_t *p = a->q + (size_t)t * a->cols + 32 * b;
                    if (m->bb == 16)
                        for (int j = 0; j < 16; j++) lo += (c[j] & 15) * p[j] + (c[j] >> 4) * p[j + 16];
                    else
                        for (int j = 0; j < 16; j++) lo += (int8_t)c[j] * p[j], hi += (int8_t)c[j + 16] * p[j + 16];
                    float d, mm = 0;
                    int i = lo + hi;
                    if (kind == QK_Q8_0) d = f16u(sc + 2 * b);
                    else if (kind == QK_Q4_1) d = f16u(sc + 4 * b), mm = f16u(sc + 4 * b + 2);
                    else {
                        const uint8_t *sup = sc + 20 * (b / 8);
                        d = f16u(sup);
                        if (kind == QK_Q4_K) d = d * (float)sup[4 + b % 8], mm = -(f16u(sup + 2) * (float)sup[12 + b % 8]);
                        else i = (int8_t)sup[4 + 2 * (b % 8)] * lo + (int8_t)sup[5 + 2 * (b % 8)] * hi;
                    }
                    size_t tb = (size_t)t * nb + b;
                    float v = (float)i * (d * a->e[tb]);
                    if (kind == QK_Q4_1 || kind == QK_Q4_K) v = v + mm * a->s[tb];
                    sb[lane] = v;
                }
                for (int i = 0; i < 8; i++)
                    for (int k = 0; k < 4; k++)
                        if (k + 4 * i < nb - b0) acc[k] = acc[k] + sb[k + 4 * i];
            }
            out[(size_t)t * ld + r] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        }
}

/* the device form against the CPU's panels: equal bit for bit, and red when one scale is broken */
static void check_device_form(const tmat *m, const qk_act *a, const float *ref, int T) {
    qk_mat dm;
    if (qk_pack(&m->w, QK_DEVICE, &dm)) fail_msg("%s", ds_errmsg());
    int rows = m->rows;
    float *out = malloc(sizeof(float) * (size_t)T * rows);
    device_rows_i8(&dm, a, out, (size_t)rows);
    for (int i = 0; i < T * rows; i++)
        if (memcmp(&out[i], &ref[i], 4) != 0)
            fail_msg("device form %s %dx%d T=%d: out[%d] = %.9g, panels %.9g", ggml_type_name(m->type), rows, m->cols, T, i,
                     (double)out[i], (double)ref[i]);
    dm.data[dm.qoff + 1] ^= 0x08; /* the first row's first scale (its fp16's high byte) */
    device_rows_i8(&dm, a, out, (size_t)rows);
    int moved = 0;
    for (int t = 0; t < T; t++) moved |= memcmp(&out[(size_t)t * rows], &ref[(size_t)t * rows], 4) != 0;
    if (!moved) fail_msg("device form %s: a broken scale went unseen", ggml_type_name(m->type));
    qk_mat_free(&dm);
    free(out);
}

static void check_matrix(uint32_t type, int rows, int cols, int T, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    tmat m;
    tmat_make(&m, type, rows, cols, &r);
    int nb = cols / 32;
    float *x = make_x(T, cols, &r), *xsum = malloc(sizeof(float) * (size_t)T * nb);
    qk_block_sums(x, T, cols, xsum);
    qk_act a;
    alloc_act(&a, T, cols);
    qk_quantize(x, T, cols, &a);
    qk_half_sums(&a, 0, T);
    /* the decoding here agrees with the type table's (to float rounding) */
    {
        const ggml_type_info *ti = ggml_type_get(type);
        float *wf = malloc(sizeof(float) * (size_t)cols);
        for (int row = 0; row < rows; row++) {
            ti->to_float((const uint8_t *)m.blocks + (size_t)row * m.w.row_bytes, wf, cols);
            for (int b = 0; b < nb; b++) {
                int c[32], kk[32];
                double D, M;
                block_of(&m, row, b, c, kk, &D, &M);
                for (int j = 0; j < 32; j++) {
                    double w = D * kk[j] * c[j] + M, got = wf[32 * b + j];
                    if (!(fabs(got - w) <= 0x1p-22 * (fabs(D * kk[j] * c[j]) + fabs(M))))
                        fail_msg("%s row %d block %d weight %d: decoded %.9g here, %.9g by the type table",
                                 ggml_type_name(type), row, b, j, w, got);
                }
            }
        }
        free(wf);
    }
    float *ref_i8 = malloc(sizeof(float) * (size_t)T * rows), *out = malloc(sizeof(float) * (size_t)T * rows);
    float *one = malloc(sizeof(float) * (size_t)rows);
    qk_scalar.rows_i8(&m.pp, 0, rows, &a, ref_i8, (size_t)rows, NULL);
    check_device_form(&m, &a, ref_i8, T);
    for (int isa = 0; isa < ISA_COUNT; isa++) {
        const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
        if (!k) continue;
        /* int8: bit-identical to the scalar path, in two row slices (as two threads would; the first
         * fetching, past its end, the first panels of a thread's next work: prefetches only) */
        qk_next nx;
        qk_next_of(&m.pp, 1, 2, &nx);
        k->rows_i8(&m.pp, 0, rows / 3, &a, out, (size_t)rows, &nx);
        k->rows_i8(&m.pp, rows / 3, rows, &a, out, (size_t)rows, NULL);
        for (int i = 0; i < T * rows; i++)
            if (memcmp(&out[i], &ref_i8[i], 4) != 0)
                fail_msg("%s int8 %s %dx%d T=%d: out[%d] = %.9g, scalar %.9g", k->name, ggml_type_name(type), rows, cols, T,
                         i, (double)out[i], (double)ref_i8[i]);
        /* batch invariance: each token alone gives the same bits */
        for (int t = 0; t < T; t++) {
            qk_act a1 = {1, cols, nb, a.q + (size_t)t * cols, a.e + (size_t)t * nb, a.s + (size_t)t * nb,
                         a.ps + (size_t)t * nb, a.ph + (size_t)t * nb, a.ph2 + (size_t)t * nb};
            k->rows_i8(&m.pp, 0, rows, &a1, one, 1, NULL);
            assert_memory_equal(one, out + (size_t)t * rows, sizeof(float) * (size_t)rows);
        }
        /* exact contract against the float64 product */
        k->rows_f32(&m.pk, 0, rows, x, xsum, T, out, (size_t)rows);
        double worst = 0;
        for (int t = 0; t < T; t++)
            for (int row = 0; row < rows; row++) {
                double y = 0, mag = 0;
                for (int b = 0; b < nb; b++) {
                    int q[32], kk[32];
                    double d, mn, sx = 0;
                    block_of(&m, row, b, q, kk, &d, &mn);
                    for (int j = 0; j < 32; j++) {
                        double xv = x[(size_t)t * cols + 32 * b + j];
                        y += (d * kk[j] * q[j] + mn) * xv;
                        mag += fabs(d * kk[j] * q[j] * xv);
                        sx += fabs(xv);
                    }
                    mag += fabs(mn) * sx;
                }
                double err = fabs(out[(size_t)t * rows + row] - y), bound = gam(cols + 2 * nb + 8) * mag;
                if (!(err <= bound))
                    fail_msg("%s exact %s T=%d row %d: |y - y64| = %.3g > bound %.3g", k->name, ggml_type_name(type), t,
                             row, err, bound);
                worst = fmax(worst, err / bound);
            }
        /* the same batch again: one token at a time gives the same bits */
        for (int t = 0; t < T; t++) {
            k->rows_f32(&m.pk, 0, rows, x + (size_t)t * cols, xsum + (size_t)t * nb, 1, one, 1);
            assert_memory_equal(one, out + (size_t)t * rows, sizeof(float) * (size_t)rows);
        }
    }
    /* int8 contract (the scalar result, which every path equals) against float64 */
    for (int t = 0; t < T; t++)
        for (int row = 0; row < rows; row++) {
            double yq = 0, ytrue = 0, round_mag = 0, qbound = 0;
            for (int b = 0; b < nb; b++) {
                int q[32], kk[32];
                double d, mn;
                block_of(&m, row, b, q, kk, &d, &mn);
                const int8_t *p = a.q + (size_t)t * cols + 32 * b;
                double e = a.e[(size_t)t * nb + b];
                long i = 0, sp = 0;
                for (int j = 0; j < 32; j++) {
                    double xv = x[(size_t)t * cols + 32 * b + j];
                    i += (long)kk[j] * q[j] * p[j];
                    sp += p[j];
                    ytrue += (d * kk[j] * q[j] + mn) * xv;
                    qbound += fabs(d * kk[j] * q[j] + mn) * (e / 2 + 3.01 * 0x1p-24 * fabs(xv));
                }
                yq += (double)i * d * e + mn * e * (double)sp;
                round_mag += fabs((double)i * d * e) + fabs(mn * e * (double)sp);
            }
            double y = ref_i8[(size_t)t * rows + row], rb = gam(nb / 4 + 6) * round_mag;
            if (!(fabs(y - yq) <= rb))
                fail_msg("int8 %s T=%d row %d: |y - yq64| = %.3g > rounding bound %.3g", ggml_type_name(type), t, row,
                         fabs(y - yq), rb);
            if (!(fabs(y - ytrue) <= qbound + rb))
                fail_msg("int8 %s T=%d row %d: |y - y64| = %.3g > quantization bound %.3g", ggml_type_name(type), t, row,
                         fabs(y - ytrue), qbound + rb);
        }
    free(x), free(xsum), free(ref_i8), free(out), free(one);
    free_act(&a);
    tmat_free(&m);
}

static void test_q4_1(void **state) {
    (void)state;
    check_matrix(GGML_Q4_1, 37, 576, 9, 1);  /* nb = 18: a partial last step of 2 blocks */
    check_matrix(GGML_Q4_1, 21, 1536, 5, 2); /* nb = 48 */
    check_matrix(GGML_Q4_1, 8, 96, 3, 3);    /* nb = 3: only the partial step */
}

/* the real pair's types: Q4_K (the 1.5B's matrices), Q6_K (its head and some FFN downs), Q5_0 (most
 * of the 0.5B's), over several super-blocks, slices that cut panels, and every pass shape */
static void test_k_quants(void **state) {
    (void)state;
    static const int Ts[] = {1, 2, 3, 4, 5, 8, 9, 13};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        check_matrix(GGML_Q4_K, 37, 768, Ts[i], 50 + i);  /* nb = 24: three super-blocks */
        check_matrix(GGML_Q6_K, 21, 512, Ts[i], 60 + i);
        check_matrix(GGML_Q5_0, 19, 224, Ts[i], 70 + i);  /* nb = 7 */
    }
    check_matrix(GGML_Q4_K, 16, 256, 6, 80);              /* one super-block, one whole panel */
    check_matrix(GGML_Q6_K, 40, 1536, 7, 81);
}

static void test_q8_0(void **state) {
    (void)state;
    check_matrix(GGML_Q8_0, 37, 576, 9, 4);
    check_matrix(GGML_Q8_0, 21, 1536, 5, 5);
    check_matrix(GGML_Q8_0, 8, 32, 4, 6);
}

/* every batch a verify step or a prefill chunk splits into passes: the AVX-512 path's one-pass
 * kernel for 5 to 8 tokens (its classes of blocks b mod 4 taken in turn) and panel_i8's passes of up
 * to 4 after it, on 1, 3, 5 and 18 blocks (classes with no block, one, several) and slices that cut
 * panels; each equals the scalar path and each token alone */
static void test_batch_passes(void **state) {
    (void)state;
    static const int Ts[] = {5, 6, 7, 8, 12, 13, 16, 19};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        check_matrix(GGML_Q4_1, 37, 576, Ts[i], 10 + i);
        check_matrix(GGML_Q8_0, 21, 160, Ts[i], 20 + i);
        check_matrix(GGML_Q4_1, 19, 96, Ts[i], 30 + i);
        check_matrix(GGML_Q8_0, 17, 32, Ts[i], 40 + i);
    }
}

/* the AMX path's tiles, here from one token on: every kind, groups of 16 tokens and a tail on the
 * tiles (or, below qk_amx_min, on the VNNI kernels), 1, 3, 7 and 24 blocks, slices cutting panels */
static void test_amx_tiles(void **state) {
    (void)state;
    if (!qk_kernels_for(ISA_AMX)) skip();
    static const int Ts[] = {1, 2, 5, 8, 16, 17, 19, 35};
    static const int mins[] = {1, 1, 4, 4, 4, 1, 4, 4};
    int keep = qk_amx_min;
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        qk_amx_min = mins[i];
        check_matrix(GGML_Q4_1, 37, 96, Ts[i], 140 + i);
        check_matrix(GGML_Q8_0, 17, 224, Ts[i], 150 + i);
        check_matrix(GGML_Q4_K, 21, 768, Ts[i], 160 + i);
        check_matrix(GGML_Q6_K, 19, 512, Ts[i], 170 + i);
        check_matrix(GGML_Q5_0, 23, 32, Ts[i], 180 + i);
    }
    qk_amx_min = keep;
}

/* the AVX2 path's one-pass sweep for large matrices (3 to 8 tokens a pass), here forced on small ones:
 * every kind, the classes with no block, one or several, slices cutting panels, 3..19 tokens */
static void test_avx2_sweep(void **state) {
    (void)state;
    size_t keep = qk_sweep2_bytes;
    qk_sweep2_bytes = 0;
    static const int Ts[] = {3, 4, 5, 8, 9, 11, 19};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        check_matrix(GGML_Q4_1, 37, 576, Ts[i], 90 + i);
        check_matrix(GGML_Q8_0, 17, 96, Ts[i], 100 + i);
        check_matrix(GGML_Q4_K, 21, 768, Ts[i], 110 + i);
        check_matrix(GGML_Q6_K, 19, 512, Ts[i], 120 + i);
        check_matrix(GGML_Q5_0, 23, 224, Ts[i], 130 + i);
    }
    qk_sweep2_bytes = keep;
}

/* every kernel path's rows_i8 of pk against a equals the scalar path's ref [a->T][rows] bit for bit */
static void paths_equal_ref(const qk_mat *pk, const qk_act *a, int rows, const float *ref, const char *what) {
    float *out = malloc(sizeof(float) * (size_t)(a->T * rows));
    assert_non_null(out);
    for (int isa = 1; isa < ISA_COUNT; isa++) {
        const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
        if (!k) continue;
        k->rows_i8(pk, 0, rows, a, out, rows, NULL);
        if (memcmp(out, ref, sizeof(float) * (size_t)(a->T * rows)))
            fail_msg("%s, %d tokens: the %s path differs from the scalar path", what, a->T, k->name);
    }
    free(out);
}

/* codes at the extremes: Q8_0 -128 and 127 against activations at +-127 (the int16 pair sums of
 * the AVX2 path are at their largest, 2 * 128 * 127, and must not saturate) */
static void test_q8_0_extremes(void **state) {
    (void)state;
    enum { ROWS = 4, COLS = 64 };
    block_q8_0 bl[ROWS * COLS / 32];
    for (int i = 0; i < ROWS * COLS / 32; i++) {
        bl[i].d = ds_f32_to_f16(0.5f);
        for (int j = 0; j < 32; j++) bl[i].qs[j] = (int8_t)((i + j) % 3 == 0 ? -128 : 127);
    }
    qmat w = {GGML_Q8_0, ROWS, COLS, sizeof(block_q8_0) * 2, bl};
    qk_mat pk;
    assert_int_equal(qk_pack(&w, QK_PANELS, &pk), 0);
    float x[COLS], ref[ROWS];
    for (int j = 0; j < COLS; j++) x[j] = j % 2 ? -1.0f : 1.0f; /* quantizes to exactly +-127 */
    qk_act a;
    alloc_act(&a, 1, COLS);
    qk_quantize(x, 1, COLS, &a);
    for (int j = 0; j < COLS; j++) assert_int_equal(abs(a.q[j]), 127);
    qk_scalar.rows_i8(&pk, 0, ROWS, &a, ref, ROWS, NULL);
    for (int r = 0; r < ROWS; r++) { /* exact here: every product and sum is representable */
        double y = 0;
        for (int j = 0; j < COLS; j++) y += 0.5 * bl[r * 2 + j / 32].qs[j % 32] * x[j];
        assert_true(fabs(ref[r] - y) <= 1e-3 * fabs(y) + 1e-3);
    }
    paths_equal_ref(&pk, &a, ROWS, ref, "Q8_0 extremes");
    free_act(&a);
    qk_mat_free(&pk);
}

/* Q5_0 codes at the extremes, u = 31 (q = 15) everywhere against activations of +127: the AVX2
 * path's int16 sums of 4 steps reach 4 * 2 * 31 * 127 = 31496 (a sum of all 8 steps would
 * saturate), and the fifth bits of every byte position are set; then u = 0 (q = -16) */
/* Packing runs on every core; the packed bytes must not depend on how rows fall to threads (Q5_0's
 * fifth bits share bytes between rows 2k and 2k + 1: packed a row a thread, rows of one panel on two
 * threads lost bits, seen on a 16-core host). 77 rows on 3, 5 and 16 threads put thread boundaries
 * inside panels and between row pairs; each packing equals the one-thread packing. */
static void test_pack_threads(void **state) {
    (void)state;
    const uint32_t types[] = {GGML_Q5_0, GGML_Q4_1, GGML_Q8_0, GGML_Q4_K, GGML_Q6_K};
    const int nths[] = {3, 5, 16};
    int keep = omp_get_max_threads();
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        rng_t r;
        rng_seed(&r, 90 + i);
        tmat m;
        tmat_make(&m, types[i], 77, types[i] == GGML_Q4_K || types[i] == GGML_Q6_K ? 512 : 160, &r);
        omp_set_num_threads(1);
        qk_mat one;
        assert_int_equal(qk_pack(&m.w, QK_PANELS, &one), 0);
        size_t bytes = one.rb * (size_t)((77 + QK_PANEL - 1) / QK_PANEL);
        for (size_t k = 0; k < sizeof nths / sizeof *nths; k++)
            for (int rep = 0; rep < 40; rep++) {
                omp_set_num_threads(nths[k]);
                qk_mat many;
                assert_int_equal(qk_pack(&m.w, QK_PANELS, &many), 0);
                if (memcmp(one.data, many.data, bytes))
                    fail_msg("%s packed on %d threads differs from one thread's packing", ggml_type_name(types[i]), nths[k]);
                qk_mat_free(&many);
            }
        qk_mat_free(&one);
        tmat_free(&m);
    }
    omp_set_num_threads(keep);
}

static void test_q5_0_extremes(void **state) {
    (void)state;
    enum { ROWS = 17, COLS = 256 };
    for (int pass = 0; pass < 2; pass++) {
        block_q5_0 bl[ROWS * COLS / 32];
        for (int i = 0; i < ROWS * COLS / 32; i++) {
            bl[i].d = ds_f32_to_f16(0.25f);
            memset(bl[i].qs, pass ? 0x00 : 0xff, sizeof bl[i].qs);
            memset(bl[i].qh, pass ? 0x00 : 0xff, sizeof bl[i].qh);
        }
        qmat w = {GGML_Q5_0, ROWS, COLS, sizeof(block_q5_0) * (COLS / 32), bl};
        qk_mat pk;
        assert_int_equal(qk_pack(&w, QK_PANELS, &pk), 0);
        assert_int_equal(pk.kind, QK_Q5_0);
        float x[2 * COLS], ref[2 * ROWS];
        for (int j = 0; j < 2 * COLS; j++) x[j] = j < COLS ? 1.0f : (j % 3 ? 1.0f : -1.0f); /* +-127 */
        qk_act a;
        alloc_act(&a, 2, COLS);
        qk_quantize(x, 2, COLS, &a);
        qk_scalar.rows_i8(&pk, 0, ROWS, &a, ref, ROWS, NULL);
        for (int t = 0; t < 2; t++)
            for (int r = 0; r < ROWS; r++) { /* exact: every product and sum is representable */
                double y = 0;
                for (int j = 0; j < COLS; j++) y += 0.25 * (pass ? -16 : 15) * x[t * COLS + j];
                assert_true(fabs(ref[t * ROWS + r] - y) <= 1e-3 * fabs(y) + 1e-3);
            }
        paths_equal_ref(&pk, &a, ROWS, ref, pass ? "Q5_0 extremes (u = 0)" : "Q5_0 extremes (u = 31)");
        free_act(&a);
        qk_mat_free(&pk);
    }
}

/* Q6_K codes at the extremes through every token count's kernel (the AVX2 sweep forced on): q - 32 =
 * -32 everywhere against activations of -127, then 31 against +127. The AVX2 kernels take the codes
 * as q = 0 / 63 and sum two steps in int16, 4 * 63 * 127 = 32004 a lane at most (a third step would
 * saturate), then take the bias 32 (sl ph + sh (ps - ph)) off */
static void test_q6_k_extremes(void **state) {
    (void)state;
    enum { ROWS = 19, COLS = 512, T = 8 };
    size_t keep = qk_sweep2_bytes;
    qk_sweep2_bytes = 0;
    for (int pass = 0; pass < 2; pass++) {
        block_q6_K bl[ROWS * COLS / 256];
        for (int i = 0; i < ROWS * COLS / 256; i++) {
            bl[i].d = ds_f32_to_f16(0.25f);
            memset(bl[i].ql, pass ? 0xff : 0x00, sizeof bl[i].ql);
            memset(bl[i].qh, pass ? 0xff : 0x00, sizeof bl[i].qh);
            for (int j = 0; j < 16; j++) bl[i].scales[j] = (int8_t)(j % 2 ? 3 : -2);
        }
        qmat w = {GGML_Q6_K, ROWS, COLS, sizeof(block_q6_K) * (COLS / 256), bl};
        qk_mat pk;
        assert_int_equal(qk_pack(&w, QK_PANELS, &pk), 0);
        assert_int_equal(pk.kind, QK_Q6_K);
        float x[T * COLS], ref[T * ROWS];
        for (int j = 0; j < T * COLS; j++) x[j] = pass ? 1.0f : -1.0f; /* +-127 */
        for (int nt = 1; nt <= T; nt++) {
            qk_act a;
            alloc_act(&a, nt, COLS);
            qk_quantize(x, nt, COLS, &a);
            qk_half_sums(&a, 0, nt);
            qk_scalar.rows_i8(&pk, 0, ROWS, &a, ref, ROWS, NULL);
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < ROWS; r++) { /* exact: every product and sum is representable */
                    double y = 0;
                    for (int j = 0; j < COLS; j++) y += 0.25 * (j / 16 % 2 ? 3 : -2) * (pass ? 31 : -32) * x[t * COLS + j];
                    assert_true(fabs(ref[t * ROWS + r] - y) <= 1e-3 * fabs(y) + 1e-3);
                }
            paths_equal_ref(&pk, &a, ROWS, ref, pass ? "Q6_K extremes (31 by 127)" : "Q6_K extremes (-32 by -127)");
            free_act(&a);
        }
        qk_mat_free(&pk);
    }
    qk_sweep2_bytes = keep;
}

/* activation quantization: every path's codes, scales and sums equal the reference's, bit for bit,
 * on blocks with ties, zeros, tiny and huge values, an infinity and a NaN */
static void test_quantize_paths(void **state) {
    (void)state;
    enum { T = 5, COLS = 96 };
    rng_t r;
    rng_seed(&r, 21);
    float x[T * COLS];
    for (int i = 0; i < T * COLS; i++) x[i] = (float)((rng_uniform(&r) * 2 - 1) * (i % 5 == 0 ? 1e3 : 1));
    for (int j = 0; j < 32; j++) x[32 + j] = 0;                          /* token 0 block 1: all zero */
    for (int j = 0; j < 32; j++) x[COLS + j] = (float)(j - 16) * 0.5f;   /* ties at .5 steps */
    x[2 * COLS + 3] = INFINITY, x[3 * COLS + 40] = NAN, x[3 * COLS + 41] = -1e-30f;
    x[4 * COLS + 70] = -3e38f;
    qk_act ref, got;
    alloc_act(&ref, T, COLS), alloc_act(&got, T, COLS);
    qk_quantize(x, T, COLS, &ref);
    for (int isa = 0; isa < ISA_COUNT; isa++) {
        const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
        if (!k) continue;
        memset(got.q, 0x55, T * COLS);
        got.T = T, got.cols = COLS, got.nb = COLS / 32;
        k->quantize(x, 0, 2, COLS, &got); /* in two token ranges, as two threads do */
        k->quantize(x, 2, T, COLS, &got);
        assert_memory_equal(got.q, ref.q, T * COLS);
        assert_memory_equal(got.e, ref.e, sizeof(float) * T * COLS / 32);
        assert_memory_equal(got.s, ref.s, sizeof(float) * T * COLS / 32);
        assert_memory_equal(got.ps, ref.ps, sizeof(int32_t) * T * COLS / 32);
    }
    assert_true(isnan(ref.e[2 * 3]) && isnan(ref.e[3 * 3 + 1]) && ref.e[1] == 0.0f);
    free_act(&ref), free_act(&got);
}

/* swiglu: every path bit-identical to the scalar one, within a few ulp of the float64 silu * u,
 * over a sweep that covers both signs, the exp cut-off, infinities and NaN */
static void test_swiglu_paths(void **state) {
    (void)state;
    enum { N = 4099 };
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N), *ref = malloc(sizeof(float) * N),
          *got = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) g[i] = (float)(i - N / 2) * 0.05f, u[i] = 1.0f + (float)(i % 3);
    g[0] = -INFINITY, g[1] = INFINITY, g[2] = NAN, g[3] = -100.0f, g[4] = 100.0f, g[5] = -0.0f;
    qk_scalar.swiglu(ref, g, u, N);
    for (int i = 6; i < N; i++) {
        double gd = g[i], want = gd / (1 + exp(-gd)) * u[i];
        /* below QK_EXP_LO, E = 0 flushes |silu| < 100 e^-87.3 ~ 1e-36 to 0 */
        if (!(fabs(ref[i] - want) <= 8 * 0x1p-24 * fabs(want) + 1e-35))
            fail_msg("silu(%.9g) * %g = %.9g, float64 %.9g", gd, (double)u[i], (double)ref[i], want);
    }
    assert_true(isnan(ref[0]) && ref[1] == INFINITY && isnan(ref[2]) && ref[4] == 100.0f * u[4]);
    for (int isa = 0; isa < ISA_COUNT; isa++) {
        const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
        if (!k) continue;
        k->swiglu(got, g, u, N);
        assert_memory_equal(got, ref, sizeof(float) * N);
    }
    free(g), free(u), free(ref), free(got);
}

/* a NaN activation reaches the output on the int8 path (it must not be quantized to a number) */
static void test_nan_propagates(void **state) {
    (void)state;
    rng_t r;
    rng_seed(&r, 9);
    tmat m;
    tmat_make(&m, GGML_Q4_1, 4, 64, &r);
    float x[64] = {0}, out[4];
    x[3] = NAN;
    qk_act a;
    alloc_act(&a, 1, 64);
    qk_quantize(x, 1, 64, &a);
    for (int isa = 0; isa < ISA_COUNT; isa++) {
        const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
        if (!k) continue;
        k->rows_i8(&m.pp, 0, 4, &a, out, 4, NULL);
        for (int i = 0; i < 4; i++) assert_true(isnan(out[i]));
    }
    free_act(&a);
    tmat_free(&m);
}

/* the fp32 helpers (drafter weights, attention) are canonical too: bit-identical on every path */
static void test_fp32_helpers(void **state) {
    (void)state;
    rng_t r;
    rng_seed(&r, 11);
    enum { N = 200, LD = 203 };
    float w[4 * LD], x[N], ref[4], got[4], o_ref[N], o[N];
    for (int i = 0; i < 4 * LD; i++) w[i] = (float)(rng_uniform(&r) - 0.5);
    for (int i = 0; i < N; i++) x[i] = (float)(rng_uniform(&r) - 0.5) * 3;
    int lens[] = {N, 64, 15, 1};
    for (int li = 0; li < 4; li++) {
        int n = lens[li];
        qk_scalar.dot_rows(w, LD, 4, x, n, ref);
        double worst = 0;
        for (int j = 0; j < 4; j++) { /* and against float64: the fp32 summation bound */
            double y = 0, mag = 0;
            for (int k = 0; k < n; k++) y += (double)w[j * LD + k] * x[k], mag += fabs((double)w[j * LD + k] * x[k]);
            assert_true(fabs(ref[j] - y) <= gam(n + 4) * mag);
            worst = fmax(worst, fabs(ref[j] - y));
        }
        for (int isa = 0; isa < ISA_COUNT; isa++) {
            const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
            if (!k) continue;
            for (int nr = 1; nr <= 4; nr++) {
                k->dot_rows(w, LD, nr, x, n, got);
                assert_memory_equal(got, ref, sizeof(float) * (size_t)nr);
            }
            for (int i = 0; i < n; i++) o_ref[i] = o[i] = x[i];
            qk_scalar.axpy(o_ref, 0.37f, w, n);
            k->axpy(o, 0.37f, w, n);
            assert_memory_equal(o, o_ref, sizeof(float) * (size_t)n);
            for (int i = 0; i < n; i++) o_ref[i] = o[i] = x[i];
            qk_scalar.scale(o_ref, 0.37f, n);
            k->scale(o, 0.37f, n);
            assert_memory_equal(o, o_ref, sizeof(float) * (size_t)n);
            for (int i = 0; i < n; i++) assert_true(o[i] == x[i] * 0.37f); /* every element, the tail's too */
        }
    }
    /* one attention row (head sizes 64, 40 and 20; 1, 9 and 33 positions): bit-identical on every path
     * (the forward tests compare the whole attention with a float64 one) */
    int hds[] = {64, 40, 20}, npos[] = {1, 9, 33}; /* 33: four blocks of eight scores and a tail */
    for (int hi = 0; hi < 3; hi++)
        for (int ni = 0; ni < 3; ni++) {
            int hd = hds[hi], n = npos[ni];
            size_t ld = 3 * (size_t)hd;
            float K[33 * 3 * 64], Vv[33 * 3 * 64], q[64], sc[40], oref[64], og[64];
            for (size_t i = 0; i < sizeof K / sizeof *K; i++) K[i] = (float)(rng_uniform(&r) - 0.5), Vv[i] = (float)(rng_uniform(&r) - 0.5);
            for (int i = 0; i < hd; i++) q[i] = (float)(rng_uniform(&r) - 0.5) * 4;
            qk_scalar.attend(oref, q, K, Vv, ld, n, hd, 0.125f, sc);
            for (int isa = 0; isa < ISA_COUNT; isa++) {
                const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
                if (!k) continue;
                k->attend(og, q, K, Vv, ld, n, hd, 0.125f, sc);
                assert_memory_equal(og, oref, sizeof(float) * (size_t)hd);
            }
        }
    /* attend_multi: every query bit-identical to attend alone, 1-9 queries (groups of four and
     * their rest), each with its own number of positions (a verify step's causal rows, up to 150:
     * blocks of 64 and a tail, queries ending inside, at and past a block's end), head sizes the
     * blocked kernel takes and ones it hands back to attend */
    static float K2[150 * 3 * 64], V2[150 * 3 * 64];
    for (size_t i = 0; i < sizeof K2 / sizeof *K2; i++) K2[i] = (float)(rng_uniform(&r) - 0.5), V2[i] = (float)(rng_uniform(&r) - 0.5);
    for (int hi = 0; hi < 3; hi++)
        for (int nq = 1; nq <= 9; nq++)
            for (int shape = 0; shape < 3; shape++) {
                int hd = hds[hi], nv[9];
                size_t ld = 3 * (size_t)hd;
                static float qs[9][64], outs[9][64], sc[9 * 150];
                float oref[64];
                float *o[9];
                const float *qp[9];
                for (int m = 0; m < nq; m++) {
                    /* equal (a decode token's heads), rising by one (a verify step), scattered */
                    nv[m] = shape == 0 ? 33 : shape == 1 ? 60 + m : 1 + (int)(rng_uniform(&r) * 150);
                    if (nv[m] > 150) nv[m] = 150;
                    for (int i = 0; i < hd; i++) qs[m][i] = (float)(rng_uniform(&r) - 0.5) * 4;
                    o[m] = outs[m], qp[m] = qs[m];
                }
                for (int isa = 0; isa < ISA_COUNT; isa++) {
                    const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
                    if (!k) continue;
                    k->attend_multi(o, qp, nv, nq, K2 + hd, V2 + hd, ld, hd, 0.125f, sc);
                    for (int m = 0; m < nq; m++) {
                        qk_scalar.attend(oref, qs[m], K2 + hd, V2 + hd, ld, nv[m], hd, 0.125f, sc);
                        if (memcmp(oref, outs[m], sizeof(float) * (size_t)hd))
                            fail_msg("%s attend_multi hd %d nq %d shape %d: query %d (n %d) differs from attend", k->name,
                                     hd, nq, shape, m, nv[m]);
                    }
                }
            }
}

/* a bf16 KV cache: to_bf16 equals ds_f32_to_bf16 on every path (ties both ways, NaN, infinities,
 * subnormals, lengths 1-40), and attend_multi_bf16 equals attend_multi on the cache widened to fp32,
 * bit for bit, for 1-9 queries of up to 150 positions and head sizes 64, 40, 20; so do att_scores
 * and att_pv in parts (positions in blocks, columns in slices) on either cache */
static void test_bf16_cache(void **state) {
    (void)state;
    rng_t r;
    rng_seed(&r, 21);
    float x[40];
    uint16_t want[40], got[40];
    const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-42f, 3.4e38f, -3.4e38f,
                             1.00390625f /* a tie to even, down */, 1.01171875f /* a tie, up */, 65504.0f};
    for (int n = 1; n <= 40; n++) {
        for (int i = 0; i < n; i++)
            x[i] = i < 13 && n == 40 ? special[i] : (float)((rng_uniform(&r) - 0.5) * pow(10, (int)(rng_u64(&r) % 9) - 4));
        qk_scalar.to_bf16(x, want, n);
        for (int i = 0; i < n; i++) assert_int_equal(want[i], ds_f32_to_bf16(x[i]));
        for (int isa = 0; isa < ISA_COUNT; isa++) {
            const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
            if (!k) continue;
            memset(got, 0xa5, sizeof got);
            k->to_bf16(x, got, n);
            assert_memory_equal(got, want, sizeof(uint16_t) * (size_t)n);
        }
    }
    enum { NP = 150, LDX = 3 * 64 };
    static uint16_t Kb[NP * LDX], Vb[NP * LDX];
    static float Kf[NP * LDX], Vf[NP * LDX], blk[QK_ATT_BLOCK * 64], sc[9 * NP], qs[9][64], want_o[9][64], got_o[9][64];
    for (int i = 0; i < NP * LDX; i++) {
        Kb[i] = ds_f32_to_bf16((float)(rng_uniform(&r) - 0.5)), Vb[i] = ds_f32_to_bf16((float)(rng_uniform(&r) - 0.5));
        Kf[i] = ds_bf16_to_f32(Kb[i]), Vf[i] = ds_bf16_to_f32(Vb[i]);
    }
    const int hds[3] = {64, 40, 20};
    for (int hi = 0; hi < 3; hi++)
        for (int nq = 1; nq <= 9; nq += 2) {
            int hd = hds[hi], nv[9];
            size_t ld = 3 * (size_t)hd;
            float *ow[9], *og[9];
            const float *qp[9];
            for (int m = 0; m < nq; m++) {
                nv[m] = 1 + (int)(rng_uniform(&r) * NP);
                if (nv[m] > NP) nv[m] = NP;
                for (int i = 0; i < hd; i++) qs[m][i] = (float)(rng_uniform(&r) - 0.5) * 4;
                ow[m] = want_o[m], og[m] = got_o[m], qp[m] = qs[m];
            }
            for (int isa = 0; isa < ISA_COUNT; isa++) {
                const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
                if (!k) continue;
                qk_scalar.attend_multi(ow, qp, nv, nq, Kf + hd, Vf + hd, ld, hd, 0.125f, sc);
                k->attend_multi_bf16(og, qp, nv, nq, Kb + hd, Vb + hd, ld, hd, 0.125f, sc, blk);
                for (int m = 0; m < nq; m++)
                    if (memcmp(want_o[m], got_o[m], sizeof(float) * (size_t)hd))
                        fail_msg("%s attend_multi_bf16 hd %d nq %d: query %d (n %d) differs from the widened cache's",
                                 k->name, hd, nq, m, nv[m]);
                /* the same in parts, as threads split it: scores by blocks of positions (the later
                 * block first), softmax, P V by columns (a cache line of bf16 each where hd allows) */
                for (int bf = 0; bf < 2; bf++) {
                    const float *K = bf ? NULL : Kf + hd, *V = bf ? NULL : Vf + hd;
                    const uint16_t *KB = bf ? Kb + hd : NULL, *VB = bf ? Vb + hd : NULL;
                    k->att_scores(sc, NP, qp, nv, nq, K, KB, ld, hd, 0.125f, QK_ATT_BLOCK, NP, blk);
                    k->att_scores(sc, NP, qp, nv, nq, K, KB, ld, hd, 0.125f, 0, QK_ATT_BLOCK, blk);
                    for (int m = 0; m < nq; m++) {
                        qk_softmax(sc + (size_t)m * NP, nv[m]);
                        memset(got_o[m], 0, sizeof(float) * (size_t)hd);
                    }
                    int cut = hd % 32 == 0 ? 32 : hd % 8 == 0 ? 8 : hd;
                    for (int d0 = 0; d0 < hd; d0 += cut) k->att_pv(og, sc, NP, nv, nq, V, VB, ld, d0, DS_MIN(hd, d0 + cut), blk);
                    for (int m = 0; m < nq; m++)
                        if (memcmp(want_o[m], got_o[m], sizeof(float) * (size_t)hd))
                            fail_msg("%s att_scores + att_pv (%s) hd %d nq %d: query %d (n %d) differs from attend_multi",
                                     k->name, bf ? "bf16" : "fp32", hd, nq, m, nv[m]);
                }
            }
        }
}

/* sampling's exp: within 2 ulp of the float64 exp over its whole range (every float in a sweep of
 * [QK_EXP_LO, 0]), 0 below it and at -inf, and exp_sum bit-identical on every path (values and
 * the defined 16-lane sum), in place too */
static void test_exp_sum(void **state) {
    (void)state;
    double worst = 0;
    long checked = 0;
    for (float t = 0.0f; t >= QK_EXP_LO; t = nextafterf(t, -INFINITY) - (float)(checked % 7) * 1e-6f, checked++) {
        double want = exp((double)t), got = qk_exp1(t);
        double ulp = ldexp(1.0, ilogb(want) - 23);
        if (want < 0x1p-126) ulp = 0x1p-149; /* subnormal results: one step of the last bit */
        double err = fabs(got - want) / ulp;
        if (err > worst) worst = err;
        if (err > 2.0) fail_msg("exp(%.9g): %.9g, want %.9g (%.2f ulp)", (double)t, got, want, err);
    }
    fprintf(stderr, "exp: %ld points of [%g, 0], worst %.2f ulp\n", checked, (double)QK_EXP_LO, worst);
    assert_true(checked > 1000000);
    assert_true(qk_exp1(-INFINITY) == 0.0f && qk_exp1(-88.0f) == 0.0f && qk_exp1(0.0f) == 1.0f);

    rng_t r;
    rng_seed(&r, 5);
    enum { N = 49157 };
    float *x = malloc(sizeof(float) * N), *ref = malloc(sizeof(float) * N), *got = malloc(sizeof(float) * N);
    assert_non_null(x);
    assert_non_null(ref);
    assert_non_null(got);
    for (int i = 0; i < N; i++) x[i] = (float)(rng_uniform(&r) * 40 - 30);
    x[3] = -INFINITY, x[20] = -200.0f, x[N - 1] = -INFINITY;
    int lens[] = {0, 1, 15, 16, 17, 100, N};
    for (int li = 0; li < 7; li++) {
        int n = lens[li];
        double sref = qk_scalar.exp_sum(x, 10.0f, ref, n), naive = 0;
        for (int i = 0; i < n; i++) {
            assert_true(ref[i] == qk_exp1(x[i] - 10.0f));
            naive += ref[i];
        }
        assert_true(fabs(sref - naive) <= 1e-15 * n * naive + 1e-300);
        for (int isa = 0; isa < ISA_COUNT; isa++) {
            const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
            if (!k) continue;
            memset(got, 0xff, sizeof(float) * N);
            double s = k->exp_sum(x, 10.0f, got, n);
            assert_memory_equal(&s, &sref, sizeof s);
            if (n) assert_memory_equal(got, ref, sizeof(float) * (size_t)n);
            memcpy(got, x, sizeof(float) * N); /* in place */
            s = k->exp_sum(got, 10.0f, got, n);
            assert_memory_equal(&s, &sref, sizeof s);
            if (n) assert_memory_equal(got, ref, sizeof(float) * (size_t)n);
        }
    }
    assert_true(ref[3] == 0.0f && ref[20] == 0.0f && ref[N - 1] == 0.0f);
    free(x);
    free(ref);
    free(got);
}

/* argmax as the scalar scan from best = 0 with x[i] > x[best] defines it (first of ties, NaN never
 * wins, -0 == +0), and the logits checks' max and NaN/+inf flag, on every path, over lengths that
 * take the SIMD body, the tail and both, with the maximum in every lane position */
static int ref_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void test_argmax_paths(void **state) {
    (void)state;
    enum { N = 200 };
    float x[N];
    rng_t r;
    rng_seed(&r, 7);
    for (int trial = 0; trial < 4000; trial++) {
        int n = 1 + trial % N, kind = trial / N % 10;
        for (int i = 0; i < n; i++) x[i] = (float)(int)(rng_uniform(&r) * 9) - 4; /* many ties */
        int at = (int)(rng_uniform(&r) * n);
        if (kind == 1) x[at] = NAN;
        if (kind == 2) x[0] = NAN;
        if (kind == 3) x[at] = INFINITY;
        if (kind == 4)
            for (int i = 0; i < n; i++) x[i] = -INFINITY;
        if (kind == 5)
            for (int i = 0; i < n; i++) x[i] = i % 2 ? 0.0f : -0.0f;
        if (kind == 6) x[at] = 100.0f, x[n - 1] = 100.0f;
        int want = ref_argmax(x, n), rbad = 0;
        float rmax = -INFINITY;
        for (int i = 0; i < n; i++) {
            rbad |= isnan(x[i]) || x[i] == INFINITY;
            if (x[i] > rmax) rmax = x[i];
        }
        for (int isa = 0; isa < ISA_COUNT; isa++) {
            const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
            if (!k) continue;
            int bad = -1;
            float m = k->max_scan(x, n, &bad);
            if (bad != rbad || (!rbad && !(m == rmax))) fail_msg("%s: n %d kind %d: max %g bad %d, want %g %d", k->name, n, kind, (double)m, bad, (double)rmax, rbad);
            if (!rbad && ref_argmax(x, n) != k->first_eq(x, n, m))
                fail_msg("%s: n %d kind %d: first max at %d, want %d", k->name, n, kind, k->first_eq(x, n, m), want);
            qk_exp_use(k);
            if (qk_argmax(x, n) != want) fail_msg("%s: n %d kind %d: argmax %d, want %d", k->name, n, kind, qk_argmax(x, n), want);
        }
    }
    qk_exp_use(qk_kernels_for(cpu_isa_best()));
    assert_int_equal(qk_scalar.first_eq(x, 0, 1.0f), 0);
    assert_int_equal(qk_argmax(x, 0), 0);
}

/* qk_softmax on every path equals its scalar definition bit for bit (the max by a compare scan, then
 * exp_sum from it, times float(1 / sum)): random rows, ties of -0 and +0 at the max (a zero max's
 * sign may differ by path; the shift's result may not), -inf (masked) entries, a NaN or +inf (the
 * scalar scan itself) */
static void test_softmax_paths(void **state) {
    (void)state;
    enum { N = 150 };
    float x[N], got[N], want[N];
    rng_t r;
    rng_seed(&r, 11);
    for (int trial = 0; trial < 1500; trial++) {
        int n = 1 + trial % N, kind = trial / N % 6, at = (int)(rng_uniform(&r) * n);
        for (int i = 0; i < n; i++) x[i] = (float)(rng_uniform(&r) * 20 - 10);
        if (kind == 1)
            for (int i = 0; i < n; i++) x[i] = i % 3 == 0 ? 0.0f : i % 3 == 1 ? -0.0f : -(float)i;
        if (kind == 2)
            for (int i = 0; i < n; i += 2) x[i] = -INFINITY;
        if (kind == 3) x[at] = NAN;
        if (kind == 4) x[at] = INFINITY;
        if (kind == 5) x[at] = -0.0f, x[(at + 1) % n] = 0.0f, x[(at + 2) % n] = -1e-30f;
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
        memcpy(want, x, sizeof(float) * (size_t)n);
        float inv = (float)(1.0 / qk_scalar.exp_sum(want, mx, want, n));
        for (int i = 0; i < n; i++) want[i] *= inv;
        for (int isa = 0; isa < ISA_COUNT; isa++) {
            const qk_kernels *k = qk_kernels_for((cpu_isa)isa);
            if (!k) continue;
            qk_exp_use(k);
            memcpy(got, x, sizeof(float) * (size_t)n);
            qk_softmax(got, n);
            if (memcmp(got, want, sizeof(float) * (size_t)n)) fail_msg("%s: softmax n %d kind %d differs from its definition", k->name, n, kind);
        }
    }
    qk_exp_use(qk_kernels_for(cpu_isa_best()));
}

/* the OpenBLAS kernel check behind main's re-exec: never overrides a user's OPENBLAS_CORETYPE; asks
 * for wide kernels only on an AVX2 machine whose OpenBLAS fell back to narrow ones, and names them */
char *openblas_get_corename(void);
static void test_blas_core_override(void **state) {
    (void)state;
    char ubuf[64] = "";
    const char *user = getenv("OPENBLAS_CORETYPE") ? strncpy(ubuf, getenv("OPENBLAS_CORETYPE"), sizeof ubuf - 1) : NULL;
    setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    assert_null(cpu_blas_core_override());
    unsetenv("OPENBLAS_CORETYPE");
    const char *want = cpu_blas_core_override(), *have = openblas_get_corename();
    fprintf(stderr, "OpenBLAS kernels here: %s%s%s\n", have, want ? "; dspark-bench runs with OPENBLAS_CORETYPE=" : "",
            want ? want : "");
    if (want) {
        assert_true(cpu_isa_supported(ISA_AVX2));
        assert_true(strcmp(want, "SkylakeX") == 0 || strcmp(want, "Haswell") == 0);
        assert_false(cpu_blas_core_is_wide(have));
    } else if (!user && cpu_isa_supported(ISA_AVX2)) /* nothing to fix: OpenBLAS already runs wide kernels */
        assert_true(cpu_blas_core_is_wide(have));
    if (user) setenv("OPENBLAS_CORETYPE", user, 1);
}

/* which paths ran: a machine without AVX2 must still run the scalar one; say what was covered */
static void test_paths_present(void **state) {
    (void)state;
    char cpu[256];
    cpu_describe(cpu, sizeof cpu);
    int n = 0;
    for (int isa = 0; isa < ISA_COUNT; isa++)
        if (qk_kernels_for((cpu_isa)isa)) n++;
    fprintf(stderr, "kernel paths tested on %s: %d of %d (best: %s)\n", cpu, n, ISA_COUNT, cpu_isa_name(cpu_isa_best()));
    assert_non_null(qk_kernels_for(ISA_SCALAR));
    assert_non_null(qk_kernels_for(cpu_isa_best()));
    cpu_isa got;
    assert_int_equal(cpu_isa_parse("auto", &got), 0);
    assert_int_equal(got, cpu_isa_best());
    assert_int_equal(cpu_isa_parse("sse9", &got), -1);
    assert_non_null(strstr(ds_errmsg(), "sse9"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_present), cmocka_unit_test(test_blas_core_override), cmocka_unit_test(test_q4_1), cmocka_unit_test(test_q8_0), cmocka_unit_test(test_k_quants), cmocka_unit_test(test_avx2_sweep), cmocka_unit_test(test_amx_tiles), cmocka_unit_test(test_batch_passes),
        cmocka_unit_test(test_q8_0_extremes), cmocka_unit_test(test_q5_0_extremes), cmocka_unit_test(test_q6_k_extremes), cmocka_unit_test(test_pack_threads), cmocka_unit_test(test_nan_propagates), cmocka_unit_test(test_fp32_helpers),
        cmocka_unit_test(test_exp_sum),
        cmocka_unit_test(test_bf16_cache), cmocka_unit_test(test_argmax_paths), cmocka_unit_test(test_softmax_paths), cmocka_unit_test(test_quantize_paths),
        cmocka_unit_test(test_swiglu_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
