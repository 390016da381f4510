#include "kernels_cpu.h"

#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define QK_HAVE_SIMD 1
#else
#define QK_HAVE_SIMD 0
#endif

#include "common.h"
#include "quant.h"

#define TOK_TILE 4 /* tokens sharing one conversion of a block's codes */

int qk_supported(uint32_t type) { return QK_HAVE_SIMD && (type == GGML_Q4_1 || type == GGML_Q8_0); }

static size_t packed_row_bytes(uint32_t type, int cols) {
    size_t nb = (size_t)cols / 32;
    return type == GGML_Q4_1 ? nb * (16 + 8) : nb * (32 + 4);
}

void *qk_pack(const qmat *w) {
    size_t nb = (size_t)w->cols / 32, rb = packed_row_bytes(w->type, w->cols);
    uint8_t *p = ds_aligned_alloc(rb * (size_t)w->rows, "repacked weights");
    if (!p) return NULL;
    for (int r = 0; r < w->rows; r++) {
        const uint8_t *src = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        uint8_t *row = p + (size_t)r * rb;
        if (w->type == GGML_Q4_1) {
            const block_q4_1 *b = (const block_q4_1 *)src;
            float *d = (float *)(row + nb * 16), *m = d + nb;
            for (size_t i = 0; i < nb; i++) {
                memcpy(row + 16 * i, b[i].qs, 16);
                d[i] = ds_f16_to_f32(b[i].d);
                m[i] = ds_f16_to_f32(b[i].m);
            }
        } else {
            const block_q8_0 *b = (const block_q8_0 *)src;
            float *d = (float *)(row + nb * 32);
            for (size_t i = 0; i < nb; i++) {
                memcpy(row + 32 * i, b[i].qs, 32);
                d[i] = ds_f16_to_f32(b[i].d);
            }
        }
    }
    return p;
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

/* fixed-order dot of two short float vectors (the m-term of Q4_1) */
static float small_dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

#if QK_HAVE_SIMD
#if defined(__AVX512F__)
/* ------------------------------------------------------------------------------- AVX-512 */
typedef __m512 vacc;
#define VZERO() _mm512_setzero_ps()
static inline float vsum(vacc a, vacc b) { return _mm512_reduce_add_ps(_mm512_add_ps(a, b)); }

/* one Q4_1 block against nt tokens: codes -> 2 x 16 floats, then per token p = lo*x0 + hi*x1 */
static inline __attribute__((always_inline)) void q4_1_block(const uint8_t *qs, float d, const float *x, size_t xstride, int nt, vacc *acc) {
    __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
    __m512 dv = _mm512_set1_ps(d);
    __m512 lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(15))), dv);
    __m512 hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)), dv);
#pragma GCC unroll 4
    for (int j = 0; j < nt; j++) {
        const float *xt = x + (size_t)j * xstride;
        acc[j] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xt), acc[j]);
        acc[j] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xt + 16), acc[j]);
    }
}

static inline __attribute__((always_inline)) void q8_0_block(const uint8_t *qs, float d, const float *x, size_t xstride, int nt, vacc *acc) {
    __m512 a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)qs)));
    __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(qs + 16))));
    __m512 dv = _mm512_set1_ps(d);
#pragma GCC unroll 4
    for (int j = 0; j < nt; j++) {
        const float *xt = x + (size_t)j * xstride;
        __m512 p = _mm512_mul_ps(a, _mm512_loadu_ps(xt));
        p = _mm512_fmadd_ps(b, _mm512_loadu_ps(xt + 16), p);
        acc[j] = _mm512_fmadd_ps(p, dv, acc[j]);
    }
}
#else
/* ---------------------------------------------------------------------------------- AVX2 */
typedef __m256 vacc;
#define VZERO() _mm256_setzero_ps()
static inline float vsum(vacc a, vacc b) {
    __m256 v = _mm256_add_ps(a, b);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline)) void q4_1_block(const uint8_t *qs, float d, const float *x, size_t xstride, int nt, vacc *acc) {
    __m128i q = _mm_loadu_si128((const __m128i *)qs), mask = _mm_set1_epi8(15);
    __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    __m256 dv = _mm256_set1_ps(d);
    __m256 v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), dv);
    __m256 v1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), dv);
    __m256 v2 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), dv);
    __m256 v3 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), dv);
#pragma GCC unroll 4
    for (int j = 0; j < nt; j++) {
        const float *xt = x + (size_t)j * xstride;
        acc[j] = _mm256_fmadd_ps(v0, _mm256_loadu_ps(xt), acc[j]);
        acc[j] = _mm256_fmadd_ps(v1, _mm256_loadu_ps(xt + 8), acc[j]);
        acc[j] = _mm256_fmadd_ps(v2, _mm256_loadu_ps(xt + 16), acc[j]);
        acc[j] = _mm256_fmadd_ps(v3, _mm256_loadu_ps(xt + 24), acc[j]);
    }
}

static inline __attribute__((always_inline)) void q8_0_block(const uint8_t *qs, float d, const float *x, size_t xstride, int nt, vacc *acc) {
    __m256 v[4];
    for (int k = 0; k < 4; k++)
        v[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * k))));
    __m256 dv = _mm256_set1_ps(d);
#pragma GCC unroll 4
    for (int j = 0; j < nt; j++) {
        const float *xt = x + (size_t)j * xstride;
        __m256 p = _mm256_mul_ps(v[0], _mm256_loadu_ps(xt));
        p = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(xt + 8), p);
        p = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(xt + 16), p);
        p = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(xt + 24), p);
        acc[j] = _mm256_fmadd_ps(p, dv, acc[j]);
    }
}
#endif

/* One row against nt (a compile-time constant after inlining) tokens. Even and odd blocks go to
 * separate accumulators (two independent FMA chains); each (row, token) sees the same operations
 * in the same order whatever nt is. */
static inline __attribute__((always_inline)) void row_tile(const uint8_t *row, int nb, int q4, const float *x, int cols,
                                                           const float *xsum, int nt, float *out, size_t ld) {
    size_t qbytes = q4 ? 16 : 32;
    const float *d = (const float *)(row + (size_t)nb * qbytes), *m = d + nb;
    vacc even[TOK_TILE], odd[TOK_TILE];
#pragma GCC unroll 4
    for (int j = 0; j < nt; j++) even[j] = odd[j] = VZERO();
    int b = 0;
    for (; b + 1 < nb; b += 2) {
        if (q4) {
            q4_1_block(row + 16 * (size_t)b, d[b], x + 32 * b, (size_t)cols, nt, even);
            q4_1_block(row + 16 * (size_t)(b + 1), d[b + 1], x + 32 * (b + 1), (size_t)cols, nt, odd);
        } else {
            q8_0_block(row + 32 * (size_t)b, d[b], x + 32 * b, (size_t)cols, nt, even);
            q8_0_block(row + 32 * (size_t)(b + 1), d[b + 1], x + 32 * (b + 1), (size_t)cols, nt, odd);
        }
    }
    if (b < nb) {
        if (q4) q4_1_block(row + 16 * (size_t)b, d[b], x + 32 * b, (size_t)cols, nt, even);
        else q8_0_block(row + 32 * (size_t)b, d[b], x + 32 * b, (size_t)cols, nt, even);
    }
#pragma GCC unroll 4
    for (int j = 0; j < nt; j++) {
        float y = vsum(even[j], odd[j]);
        if (q4) y += small_dot(m, xsum + (size_t)j * nb, nb);
        out[(size_t)j * ld] = y;
    }
}

/* Rows r0..r1 against all tokens, TOK_TILE tokens at a time; the tile width is dispatched to a
 * constant so the accumulators live in registers. */
void qk_rows(const qmat *w, int r0, int r1, const float *x, const float *xsum, int T, float *out, size_t ld) {
    int cols = w->cols, nb = cols / 32, q4 = w->type == GGML_Q4_1;
    size_t rb = packed_row_bytes(w->type, cols);
    const uint8_t *base = w->packed;
    for (int r = r0; r < r1; r++) {
        const uint8_t *row = base + (size_t)r * rb;
        for (int t0 = 0; t0 < T; t0 += TOK_TILE) {
            int nt = DS_MIN(TOK_TILE, T - t0);
            const float *xt = x + (size_t)t0 * cols, *st = xsum ? xsum + (size_t)t0 * nb : NULL;
            float *o = out + (size_t)t0 * ld + r;
            if (q4) {
                switch (nt) {
                case 1: row_tile(row, nb, 1, xt, cols, st, 1, o, ld); break;
                case 2: row_tile(row, nb, 1, xt, cols, st, 2, o, ld); break;
                case 3: row_tile(row, nb, 1, xt, cols, st, 3, o, ld); break;
                default: row_tile(row, nb, 1, xt, cols, st, 4, o, ld); break;
                }
            } else {
                switch (nt) {
                case 1: row_tile(row, nb, 0, xt, cols, st, 1, o, ld); break;
                case 2: row_tile(row, nb, 0, xt, cols, st, 2, o, ld); break;
                case 3: row_tile(row, nb, 0, xt, cols, st, 3, o, ld); break;
                default: row_tile(row, nb, 0, xt, cols, st, 4, o, ld); break;
                }
            }
        }
    }
}
#else
void qk_rows(const qmat *w, int r0, int r1, const float *x, const float *xsum, int T, float *out, size_t ld) {
    DS_UNUSED(w), DS_UNUSED(r0), DS_UNUSED(r1), DS_UNUSED(x), DS_UNUSED(xsum), DS_UNUSED(T), DS_UNUSED(out), DS_UNUSED(ld);
    DS_UNUSED(small_dot);
}
#endif
