/* kernels_cpu.c — what every kernel path shares: repacking, activation quantization, dispatch. */
#include "kernels_cpu.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "../base/common.h"
#include "../formats/quant.h"

size_t qk_sweep2_bytes = (size_t)1 << 20;
int qk_amx_min = 10;

const qk_kernels *qk_kernels_for(cpu_isa isa) {
    if (!cpu_isa_supported(isa)) return NULL;
    switch (isa) {
    case ISA_SCALAR: return &qk_scalar;
#if defined(__x86_64__)
    case ISA_AVX2: return &qk_avx2;
    case ISA_AVX512: return &qk_avx512;
    case ISA_AMX: return &qk_amx;
#endif
    default: return NULL;
    }
}

static const qk_kernels *qk_exp_path;

void qk_exp_use(const qk_kernels *k) { __atomic_store_n(&qk_exp_path, k, __ATOMIC_RELAXED); }

static const qk_kernels *process_path(void);
double qk_exp_sum(const float *x, float shift, float *out, int n) { return process_path()->exp_sum(x, shift, out, n); }

static const qk_kernels *process_path(void) {
    const qk_kernels *k = __atomic_load_n(&qk_exp_path, __ATOMIC_RELAXED);
    if (!k) qk_exp_use(k = qk_kernels_for(cpu_isa_best()));
    return k;
}

float qk_max_scan(const float *x, int n, int *bad) { return process_path()->max_scan(x, n, bad); }
int qk_first_eq(const float *x, int n, float v) { return process_path()->first_eq(x, n, v); }

int qk_argmax(const float *x, int n) {
    int bad, best = 0;
    float m = qk_max_scan(x, n, &bad);
    if (!bad) return n > 0 ? qk_first_eq(x, n, m) : 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int qk_supported(const qmat *w) {
    switch (w->type) {
    case GGML_Q4_1: case GGML_Q8_0: case GGML_Q5_0: return w->cols % 32 == 0;
    case GGML_Q4_K: case GGML_Q6_K: return w->cols % 256 == 0;
    default: return 0;
    }
}

int qk_kind_of(uint32_t type) {
    return type == GGML_Q4_1 ? QK_Q4_1 : type == GGML_Q4_K ? QK_Q4_K : type == GGML_Q6_K ? QK_Q6_K : QK_Q8_0;
}

/* block i (32 weights) of a GGUF row, whatever its type: the codes in element order and what the
 * packed forms keep of its scales */
typedef struct {
    int q[32];        /* Q4_1, Q4_K: 0..15; Q8_0: -128..127; Q5_0: q - 16; Q6_K: q - 32 */
    float d, m;       /* Q8_0, Q5_0, Q4_1 (m = 0 but for Q4_1) */
    uint16_t D, Dmin; /* Q4_K, Q6_K: the super-block's fp16 scales (Dmin: Q4_K) */
    int sc, mn;       /* Q4_K: the block's 6-bit scale and min */
    int sl, sh;       /* Q6_K: the int8 scales of its halves */
} qblock;

static void gguf_block(const qmat *w, const uint8_t *src, size_t i, qblock *o) {
    memset(o, 0, sizeof *o);
    if (w->type == GGML_Q4_1) {
        const block_q4_1 *b = (const block_q4_1 *)src + i;
        for (int j = 0; j < 16; j++) o->q[j] = b->qs[j] & 15, o->q[j + 16] = b->qs[j] >> 4; /* ggml: low nibbles first */
        o->d = ds_f16_to_f32(b->d), o->m = ds_f16_to_f32(b->m);
    } else if (w->type == GGML_Q8_0) {
        const block_q8_0 *b = (const block_q8_0 *)src + i;
        for (int j = 0; j < 32; j++) o->q[j] = b->qs[j];
        o->d = ds_f16_to_f32(b->d);
    } else if (w->type == GGML_Q5_0) {
        const block_q5_0 *b = (const block_q5_0 *)src + i;
        uint32_t qh;
        memcpy(&qh, b->qh, 4);
        for (int j = 0; j < 16; j++) {
            o->q[j] = ((b->qs[j] & 15) | (int)(((qh >> j) & 1u) << 4)) - 16;
            o->q[j + 16] = ((b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4)) - 16;
        }
        o->d = ds_f16_to_f32(b->d);
    } else if (w->type == GGML_Q4_K) {
        const block_q4_K *b = (const block_q4_K *)src + i / 8;
        int j = (int)(i % 8);
        uint8_t sc, mn;
        for (int l = 0; l < 32; l++) o->q[l] = (b->qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
        q4k_scale_min(j, b->scales, &sc, &mn);
        o->D = b->d, o->Dmin = b->dmin, o->sc = sc, o->mn = mn;
    } else { /* Q6_K: element 32 j + l of the super-block is in its half n = j / 4, group g = j % 4 */
        const block_q6_K *b = (const block_q6_K *)src + i / 8;
        int j = (int)(i % 8), n = j / 4, g = j % 4;
        for (int l = 0; l < 32; l++) {
            int lo = (b->ql[64 * n + 32 * (g % 2) + l] >> (4 * (g / 2))) & 15, hi = (b->qh[32 * n + l] >> (2 * g)) & 3;
            o->q[l] = (lo | hi << 4) - 32;
        }
        o->D = b->d, o->sl = b->scales[2 * j], o->sh = b->scales[2 * j + 1];
    }
}

static void pack_rows(const qmat *w, int kind, uint8_t *p, size_t nb, size_t rb, size_t qoff) {
    int q4 = qk_nibbles(kind);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < w->rows; r++) {
        const uint8_t *src = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        uint8_t *row = p + (size_t)r * rb;
        float *d = (float *)(row + qoff), *m = d + nb;
        for (size_t i = 0; i < nb; i++) {
            qblock k;
            gguf_block(w, src, i, &k);
            if (kind == QK_Q4_K) { /* exact in fp32: an fp16 times a 6-bit integer */
                k.d = ds_f16_to_f32(k.D) * (float)k.sc;
                k.m = -(ds_f16_to_f32(k.Dmin) * (float)k.mn);
            }
            if (kind == QK_Q6_K) { /* d of each half of 16 (exact: an fp16 times an int8) */
                d[2 * i] = ds_f16_to_f32(k.D) * (float)k.sl;
                d[2 * i + 1] = ds_f16_to_f32(k.D) * (float)k.sh;
            } else d[i] = k.d;
            if (q4) {
                m[i] = k.m;
                for (int j = 0; j < 32; j++) row[32 * (i / 2) + j] |= (uint8_t)(k.q[j] << (4 * (i % 2)));
            } else {
                for (int j = 0; j < 32; j++) row[32 * i + j] = (uint8_t)(int8_t)k.q[j];
            }
        }
    }
}

static void pack_panels(const qmat *w, int kind, uint8_t *p, size_t nb, size_t pb, size_t bb, size_t qoff) {
    int q4 = qk_nibbles(kind);
    /* panels are disjoint: packed on every core (a 1.5B model's 1 GB took 14 s on one), a panel a
     * thread. Not a row a thread: two rows share each byte of Q5_0's fifth bits (rows 2k, 2k + 1), so
     * rows of one panel on two threads OR'd into the same bytes at once and lost bits (seen on a
     * 16-core host, where test_cuda's GPU, packed alone, disagreed with the CPU) */
    int n_panels = (w->rows + QK_PANEL - 1) / QK_PANEL;
#pragma omp parallel for schedule(static)
    for (int pi = 0; pi < n_panels; pi++) {
        for (int r = pi * QK_PANEL; r < w->rows && r < (pi + 1) * QK_PANEL; r++) {
            const uint8_t *src = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
            int rr = r % QK_PANEL;
            uint8_t *pan = p + (size_t)(r / QK_PANEL) * pb, *scr = pan + qoff;
            for (size_t i = 0; i < nb; i++) {
                uint8_t *blk = pan + i * bb, *at = scr + qk_scale_at(kind, (int)i), *sup = scr + qk_super_at(kind, (int)i);
                qblock k;
                gguf_block(w, src, i, &k);
                /* fp16 scales: the file's own, back from the exact fp32 they were widened to */
                if (kind == QK_Q8_0 || kind == QK_Q4_1) {
                    ((uint16_t *)at)[rr] = ds_f32_to_f16(k.d);
                    if (kind == QK_Q4_1) ((uint16_t *)at)[QK_PANEL + rr] = ds_f32_to_f16(k.m);
                } else if (kind == QK_Q4_K) {
                    ((uint16_t *)sup)[rr] = k.D, ((uint16_t *)sup)[QK_PANEL + rr] = k.Dmin;
                    at[rr] = (uint8_t)k.sc, at[QK_PANEL + rr] = (uint8_t)k.mn;
                } else if (kind == QK_Q5_0) {
                    ((uint16_t *)at)[rr] = ds_f32_to_f16(k.d);
                } else {
                    ((uint16_t *)sup)[rr] = k.D;
                    at[rr] = (uint8_t)(int8_t)k.sl, at[QK_PANEL + rr] = (uint8_t)(int8_t)k.sh;
                }
                for (int c = 0; c < 32; c++) {
                    int step = c / 4, j = c % 4;
                    if (kind == QK_Q5_0) { /* u = q + 16: its nibble as Q4_1's, its fifth bit in the chunk's bit bytes */
                        int u = k.q[c] + 16, bit = 64 * (step / 4) + 4 * rr + j;
                        blk[64 * (step % 4) + 4 * rr + j] |= (uint8_t)((u & 15) << (4 * (step / 4)));
                        blk[256 + 16 * (step % 4) + bit / 8] |= (uint8_t)((u >> 4) << (bit % 8));
                    } else if (q4)
                        blk[64 * (step % 4) + 4 * rr + j] |= (uint8_t)(k.q[c] << (4 * (step / 4)));
                    else blk[64 * step + 4 * rr + j] = (uint8_t)(int8_t)k.q[c];
                }
            }
        }
    }
}

static void pack_device(const qmat *w, int kind, uint8_t *p, size_t nb, size_t bb, size_t qoff) {
    size_t srb = qk_device_scale_bytes(kind, (int)nb);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < w->rows; r++) {
        const uint8_t *src = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        uint8_t *codes = p + (size_t)r * nb * bb, *sc = p + qoff + (size_t)r * srb;
        for (size_t i = 0; i < nb; i++) {
            qblock k;
            gguf_block(w, src, i, &k);
            uint8_t *blk = codes + i * bb, *sup = sc + 20 * (i / 8);
            if (kind == QK_Q4_1 || kind == QK_Q4_K)
                for (int j = 0; j < 16; j++) blk[j] = (uint8_t)(k.q[j] | k.q[j + 16] << 4);
            else
                for (int j = 0; j < 32; j++) blk[j] = (uint8_t)(int8_t)k.q[j];
            if (kind == QK_Q8_0) ((uint16_t *)sc)[i] = ds_f32_to_f16(k.d); /* Q8_0, Q5_0 */
            else if (kind == QK_Q4_1) ((uint16_t *)sc)[2 * i] = ds_f32_to_f16(k.d), ((uint16_t *)sc)[2 * i + 1] = ds_f32_to_f16(k.m);
            else if (kind == QK_Q4_K) {
                ((uint16_t *)sup)[0] = k.D, ((uint16_t *)sup)[1] = k.Dmin;
                sup[4 + i % 8] = (uint8_t)k.sc, sup[12 + i % 8] = (uint8_t)k.mn;
            } else { /* Q6_K */
                ((uint16_t *)sup)[0] = k.D;
                sup[4 + 2 * (i % 8)] = (uint8_t)(int8_t)k.sl, sup[5 + 2 * (i % 8)] = (uint8_t)(int8_t)k.sh;
            }
        }
    }
}

int qk_pack(const qmat *w, qk_layout layout, qk_mat *out) {
    memset(out, 0, sizeof *out);
    if (!qk_supported(w)) {
        ds_error("no fused kernel for a %s matrix of %d columns", ggml_type_name(w->type), w->cols);
        return -1;
    }
    int kind = qk_kind_of(w->type);
    if (layout == QK_PANELS && w->type == GGML_Q5_0) kind = QK_Q5_0; /* the rows layout reads it as Q8_0 */
    int q4 = qk_nibbles(kind);
    size_t nb = (size_t)w->cols / 32, qoff, rb, bb = 0, n_units;
    if (layout == QK_DEVICE) {
        bb = q4 ? 16 : 32;
        rb = nb * bb;
        qoff = rb * (size_t)w->rows;
        size_t bytes = qoff + qk_device_scale_bytes(kind, (int)nb) * (size_t)w->rows;
        uint8_t *p = ds_huge_alloc(bytes, "repacked weights");
        if (!p) return -1;
        memset(p, 0, bytes);
        pack_device(w, kind, p, nb, bb, qoff);
        *out = (qk_mat){w->type, kind, w->rows, w->cols, (int)nb, layout, rb, qoff, bb, p};
        return 0;
    }
    if (layout == QK_PANELS) {
        bb = qk_block_bytes(kind);
        qoff = nb * bb;
        rb = (qoff + nb * qk_scale_block_bytes(kind) + 63) / 64 * 64; /* panels 64-byte aligned */
        n_units = ((size_t)w->rows + QK_PANEL - 1) / QK_PANEL;
    } else {
        qoff = q4 ? (nb + 1) / 2 * 32 : nb * 32;
        rb = qoff + (q4 || kind == QK_Q6_K ? 8 : 4) * nb; /* fp32 d (and m, or a second d) per block */
        n_units = (size_t)w->rows;
    }
    uint8_t *p = ds_huge_alloc(rb * n_units, "repacked weights");
    if (!p) return -1;
    memset(p, 0, rb * n_units); /* nibbles are ORed in; padding rows and an odd block's pair stay 0 */
    if (layout == QK_PANELS) pack_panels(w, kind, p, nb, rb, bb, qoff);
    else pack_rows(w, kind, p, nb, rb, qoff);
    *out = (qk_mat){w->type, kind, w->rows, w->cols, (int)nb, layout, rb, qoff, bb, p};
    return 0;
}

void qk_half_sums(qk_act *a, int t0, int t1) {
    for (int t = t0; t < t1; t++)
        for (int b = 0; b < a->nb; b++) {
            const int8_t *q = a->q + (size_t)t * a->cols + 32 * b;
            int32_t s = 0;
            for (int j = 0; j < 16; j++) s += q[j];
            size_t ti = (size_t)t * a->nb + b;
            a->ph[ti] = s;
            a->ph2[ti] = (int32_t)((uint32_t)(uint16_t)s | (uint32_t)(a->ps[ti] - s) << 16);
        }
}

void qk_split(const qk_mat *m, int tid, int nth, int *r0, int *r1) {
    long unit = m->layout == QK_PANELS ? QK_PANEL : 1, n = (m->rows + unit - 1) / unit;
    *r0 = (int)DS_MIN((long)m->rows, n * tid / nth * unit);
    *r1 = (int)DS_MIN((long)m->rows, n * (tid + 1) / nth * unit);
}

void qk_next_of(const qk_mat *m, int tid, int nth, qk_next *nx) {
    nx->p[0] = nx->p[1] = NULL;
    if (!m || m->layout != QK_PANELS) return;
    int r0, r1;
    qk_split(m, tid, nth, &r0, &r1);
    if (r1 > r0) nx->p[0] = m->data + (size_t)(r0 / QK_PANEL) * m->rb;
    if (r1 > r0 + QK_PANEL) nx->p[1] = nx->p[0] + m->rb;
}

void qk_softmax(float *s, int n) {
    /* the max on the process's path: the same value as the scalar scan whenever no entry is NaN or
     * +inf (max does not depend on order; a zero's sign may, and x - 0 and x + 0 are the same for a
     * shift); with one, the scalar scan itself, a compare, not a libm call */
    int bad;
    float mx = qk_max_scan(s, n, &bad);
    if (bad) {
        mx = -INFINITY;
        for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    }
    float inv = (float)(1.0 / qk_exp_sum(s, mx, s, n));
    process_path()->scale(s, inv, n);
}

void qk_mat_free(qk_mat *m) {
    free(m->data);
    m->data = NULL;
}

void qk_block_sums(const float *x, int T, int cols, float *xsum) {
    int nb = cols / 32;
    for (int t = 0; t < T; t++)
        for (int b = 0; b < nb; b++) {
            const float *v = x + (size_t)t * cols + 32 * b;
            float s = 0;
            for (int j = 0; j < 32; j++) s += v[j];
            xsum[(size_t)t * nb + b] = s;
        }
}

/* One implementation for every path, so every path sees the same int8 activations. The block sum
 * is that of the quantized values, s = e * sum(p): Q4_1's offset term m * s then makes the block's
 * error sum_j (d q_j + m)(e p_j - x_j), the rounding error weighted by the actual (centred) weights,
 * rather than by the all-positive d q_j (measured on SmolLM2: top-1 agreement with float64 rises
 * from 93.8 % with the exact fp32 sum to the figure in BENCHMARKS.md). */
void qk_quantize_rows(const float *x, int t0, int t1, int cols, qk_act *a) {
    int nb = cols / 32;
    for (int t = t0; t < t1; t++)
        for (int b = 0; b < nb; b++) {
            const float *v = x + (size_t)t * cols + 32 * b;
            int8_t *q = a->q + (size_t)t * cols + 32 * b;
            float amax = 0, fin = 0;
            for (int j = 0; j < 32; j++) { /* plain compares vectorise (fmaxf is a libm call here) */
                float av = fabsf(v[j]);
                amax = av > amax ? av : amax;
                fin += v[j] - v[j]; /* NaN if any v[j] is NaN or infinite */
            }
            float inv = amax > 0 ? 127.0f / amax : 0.0f;
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                /* round to nearest, ties to even: adding and removing 1.5 * 2^23 leaves the integer
                 * part (|v * inv| <= 127.0001); the same result as lrintf, without the call */
                float r = (v[j] * inv + 12582912.0f) - 12582912.0f;
                /* NaN in a non-finite block (flagged by fin, its result NaN whatever the codes): the
                 * code cvtps2dq gives it on x86, INT_MIN, clamped; casting NaN itself is undefined */
                int qi = r == r ? (int)r : INT_MIN;
                q[j] = (int8_t)(qi > 127 ? 127 : qi < -127 ? -127 : qi);
                sum += q[j];
            }
            qk_quantize_finish(a, (size_t)t * nb + b, amax, fin, sum);
        }
}

void qk_quantize(const float *x, int T, int cols, qk_act *a) {
    a->T = T, a->cols = cols, a->nb = cols / 32;
    qk_quantize_rows(x, 0, T, cols, a);
}
