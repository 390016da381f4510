#include "quant.h"

#include "../base/cpu_features.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define QUANT_X86 1
#else
#define QUANT_X86 0
#endif

/* ---------------------------------------------------------------------------------------------
 * scalar conversions (exact: every f16/bf16 value is representable in f32) */

float ds_f16_to_f32(ds_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13); /* inf / nan */
    } else if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: value = mant * 2^-24 */
            float f = (float)mant * 0x1p-24f;
            memcpy(&bits, &f, 4);
            bits |= sign;
        }
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

ds_f16 ds_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (ds_f16)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (ds_f16)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                                 /* result is subnormal or zero */
        float a;
        memcpy(&a, &ax, 4);
        /* scale so the subnormal grid becomes integers, then round to nearest even */
        float s = a * 0x1p24f;
        uint32_t m = (uint32_t)s;
        float r = s - (float)m;
        if (r > 0.5f || (r == 0.5f && (m & 1))) m++;
        return (ds_f16)(sign | m);
    }
    uint32_t mant = ax & 0x7fffff, exp = (ax >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (ds_f16)(sign | h);
}

float ds_bf16_to_f32(ds_bf16 h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

ds_bf16 ds_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (ds_bf16)((x >> 16) | 64); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (ds_bf16)(x >> 16);
}

/* ---------------------------------------------------------------------------------------------
 * decoders; each reads blocks with memcpy-free struct access (the structs are byte-packed by
 * construction, alignment 2) and writes n floats. */

static void dequant_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

static void dequant_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        ds_f16 h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = ds_f16_to_f32(h);
    }
}

static void dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        ds_bf16 h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = ds_bf16_to_f32(h);
    }
}

/* Q5_0: 5-bit codes, the low nibbles as Q4_0 (element j in the low half of byte j, j + 16 in the
 * high half) and the fifth bits in qh (bit j for element j), value (code - 16) * d */
static void dequant_q5_0(const void *src, float *dst, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = ds_f16_to_f32(b[i].d);
        uint32_t qh;
        memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < 16; j++) {
            int lo = (b[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
            int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[i * 32 + j] = (float)(lo - 16) * d;
            dst[i * 32 + j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void dequant_q4_0(const void *src, float *dst, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        float d = ds_f16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[i * QK4_0 + j] = (float)((b[i].qs[j] & 0xf) - 8) * d;
            dst[i * QK4_0 + j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1: value = q*d + m (the min is added). Rounded as mul then add (no fused multiply-add), so the
 * scalar and vector decoders produce identical bits. */
void dequant_q4_1_ref(const void *src, float *dst, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        float d = ds_f16_to_f32(b[i].d), m = ds_f16_to_f32(b[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            float lo = (float)(b[i].qs[j] & 0xf) * d, hi = (float)(b[i].qs[j] >> 4) * d;
            dst[i * QK4_1 + j] = lo + m;
            dst[i * QK4_1 + j + 16] = hi + m;
        }
    }
}

void dequant_q8_0_ref(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        float d = ds_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) dst[i * QK8_0 + j] = (float)b[i].qs[j] * d;
    }
}

#if QUANT_X86
/* built for AVX2 whatever the baseline; the table entry below calls it only on CPUs that have it */
__attribute__((target("avx2,f16c"))) static void dequant_q4_1_avx2(const void *src, float *dst, int64_t n) {
    const block_q4_1 *b = src;
    const __m128i lomask = _mm_set1_epi8(0xf);
    for (int64_t i = 0; i < n / QK4_1; i++) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d)), m = _mm256_set1_ps(_cvtsh_ss(b[i].m));
        __m128i q = _mm_loadu_si128((const __m128i *)b[i].qs);
        __m128i lo = _mm_and_si128(q, lomask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), lomask);
        float *o = dst + i * QK4_1;
        __m256 v0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
        __m256 v1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
        __m256 v2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
        __m256 v3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
        _mm256_storeu_ps(o + 0, _mm256_add_ps(_mm256_mul_ps(v0, d), m));
        _mm256_storeu_ps(o + 8, _mm256_add_ps(_mm256_mul_ps(v1, d), m));
        _mm256_storeu_ps(o + 16, _mm256_add_ps(_mm256_mul_ps(v2, d), m));
        _mm256_storeu_ps(o + 24, _mm256_add_ps(_mm256_mul_ps(v3, d), m));
    }
}

__attribute__((target("avx2,f16c"))) static void dequant_q8_0_avx2(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        float *o = dst + i * QK8_0;
        for (int j = 0; j < 4; j++) {
            __m128i q = _mm_loadl_epi64((const __m128i *)(b[i].qs + 8 * j));
            _mm256_storeu_ps(o + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
        }
    }
}
static int have_avx2(void) {
    static int v = -1;
    if (v < 0) v = cpu_isa_supported(ISA_AVX2);
    return v;
}
static void dequant_q4_1_any(const void *src, float *dst, int64_t n) {
    (have_avx2() ? dequant_q4_1_avx2 : dequant_q4_1_ref)(src, dst, n);
}
static void dequant_q8_0_any(const void *src, float *dst, int64_t n) {
    (have_avx2() ? dequant_q8_0_avx2 : dequant_q8_0_ref)(src, dst, n);
}
#define DEQUANT_Q4_1 dequant_q4_1_any
#define DEQUANT_Q8_0 dequant_q8_0_any
#else
#define DEQUANT_Q4_1 dequant_q4_1_ref
#define DEQUANT_Q8_0 dequant_q8_0_ref
#endif

/* Q4_K: 8 sub-blocks of 32, 6-bit scale and min each, packed in scales[12]. */
void q4k_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4));
        *mn = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

static void dequant_q4_k(const void *src, float *dst, int64_t n) {
    const block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = ds_f16_to_f32(b[i].d), dmin = ds_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        float *y = dst + i * QK_K;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc0, m0, sc1, m1;
            q4k_scale_min(2 * c, b[i].scales, &sc0, &m0);
            q4k_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            float d0 = d * sc0, o0 = dmin * m0, d1 = d * sc1, o1 = dmin * m1;
            for (int l = 0; l < 32; l++) {
                y[64 * c + l] = d0 * (float)(q[l] & 0xf) - o0;
                y[64 * c + 32 + l] = d1 * (float)(q[l] >> 4) - o1;
            }
        }
    }
}

static void dequant_q6_k(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = ds_f16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        float *y = dst + i * QK_K;
        for (int half = 0; half < 2; half++) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = (int)((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q2 = (int)((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q3 = (int)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q4 = (int)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

/* Block sizes of every ggml type id this reader knows, decodable or not (so a file holding, say,
 * Q5_K tensors still parses and `info` can describe it; loading such a tensor is a clear error). */
static const ggml_type_info TYPES[GGML_TYPE_LIMIT] = {
    [GGML_F32] = {"F32", 1, 4, dequant_f32},
    [GGML_F16] = {"F16", 1, 2, dequant_f16},
    [GGML_Q4_0] = {"Q4_0", 32, 18, dequant_q4_0},
    [GGML_Q4_1] = {"Q4_1", 32, 20, DEQUANT_Q4_1},
    [GGML_Q5_0] = {"Q5_0", 32, 22, dequant_q5_0},
    [GGML_Q5_1] = {"Q5_1", 32, 24, NULL},
    [GGML_Q8_0] = {"Q8_0", 32, 34, DEQUANT_Q8_0},
    [GGML_Q8_1] = {"Q8_1", 32, 36, NULL},
    [GGML_Q2_K] = {"Q2_K", 256, 84, NULL},
    [GGML_Q3_K] = {"Q3_K", 256, 110, NULL},
    [GGML_Q4_K] = {"Q4_K", 256, 144, dequant_q4_k},
    [GGML_Q5_K] = {"Q5_K", 256, 176, NULL},
    [GGML_Q6_K] = {"Q6_K", 256, 210, dequant_q6_k},
    [GGML_Q8_K] = {"Q8_K", 256, 292, NULL},
    [GGML_I8] = {"I8", 1, 1, NULL},
    [GGML_I16] = {"I16", 1, 2, NULL},
    [GGML_I32] = {"I32", 1, 4, NULL},
    [GGML_I64] = {"I64", 1, 8, NULL},
    [GGML_F64] = {"F64", 1, 8, NULL},
    [GGML_BF16] = {"BF16", 1, 2, dequant_bf16},
};

const ggml_type_info *ggml_type_get(uint32_t type) {
    if (type >= GGML_TYPE_LIMIT || TYPES[type].blck == 0) return NULL;
    return &TYPES[type];
}

const char *ggml_type_name(uint32_t type) {
    const ggml_type_info *t = ggml_type_get(type);
    return t ? t->name : "unknown";
}

/* Simple reference quantizers (per-block min/max for Q4_1, absmax for Q8_0): enough to build
 * valid models of these types, not tuned for accuracy. */
void quantize_q4_1(const float *x, block_q4_1 *b, int64_t n) {
    for (int64_t i = 0; i < n / 32; i++) {
        const float *v = x + 32 * i;
        float mn = v[0], mx = v[0];
        for (int j = 1; j < 32; j++) {
            mn = fminf(mn, v[j]);
            mx = fmaxf(mx, v[j]);
        }
        float d = (mx - mn) / 15.0f, id = d > 0 ? 1.0f / d : 0.0f;
        b[i].d = ds_f32_to_f16(d);
        b[i].m = ds_f32_to_f16(mn);
        for (int j = 0; j < 16; j++) {
            int lo = (int)lroundf((v[j] - mn) * id), hi = (int)lroundf((v[j + 16] - mn) * id);
            lo = lo < 0 ? 0 : lo > 15 ? 15 : lo;
            hi = hi < 0 ? 0 : hi > 15 ? 15 : hi;
            b[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}
void quantize_q8_0(const float *x, block_q8_0 *b, int64_t n) {
    for (int64_t i = 0; i < n / 32; i++) {
        const float *v = x + 32 * i;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        b[i].d = ds_f32_to_f16(d);
        for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)lroundf(v[j] * id);
    }
}

void quantize_q5_0(const float *x, block_q5_0 *b, int64_t n) {
    for (int64_t i = 0; i < n / 32; i++) {
        const float *v = x + 32 * i;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 15.0f, id = d > 0 ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        b[i].d = ds_f32_to_f16(d);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int j = 0; j < 32; j++) {
            long q = lroundf(v[j] * id) + 16;
            q = q < 0 ? 0 : q > 31 ? 31 : q;
            b[i].qs[j % 16] |= (uint8_t)((q & 15) << (4 * (j / 16)));
            qh |= (uint32_t)(q >> 4) << j;
        }
        memcpy(b[i].qh, &qh, 4);
    }
}

/* Q4_K: per sub-block of 32 its min and range, both onto 6-bit multiples of the super-block's D, Dmin */
void quantize_q4_k(const float *x, block_q4_K *b, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *v = x + QK_K * i;
        float scale[8], minv[8], smax = 0, mmax = 0;
        for (int j = 0; j < 8; j++) {
            float lo = 0, hi = 0;
            for (int l = 0; l < 32; l++) lo = fminf(lo, v[32 * j + l]), hi = fmaxf(hi, v[32 * j + l]);
            scale[j] = (hi - lo) / 15.0f, minv[j] = -lo;
            smax = fmaxf(smax, scale[j]), mmax = fmaxf(mmax, minv[j]);
        }
        float D = ds_f16_to_f32(ds_f32_to_f16(smax / 63.0f)), Dm = ds_f16_to_f32(ds_f32_to_f16(mmax / 63.0f));
        b[i].d = ds_f32_to_f16(D), b[i].dmin = ds_f32_to_f16(Dm);
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) {
            long s = D > 0 ? lroundf(scale[j] / D) : 0, m = Dm > 0 ? lroundf(minv[j] / Dm) : 0;
            sc[j] = (uint8_t)(s > 63 ? 63 : s), mn[j] = (uint8_t)(m > 63 ? 63 : m);
        }
        for (int j = 0; j < 4; j++) {
            b[i].scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
            b[i].scales[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
            b[i].scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
        }
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int j = 0; j < 8; j++) {
            float d = D * sc[j], m = Dm * mn[j], id = d > 0 ? 1.0f / d : 0.0f;
            for (int l = 0; l < 32; l++) {
                long q = lroundf((v[32 * j + l] + m) * id);
                q = q < 0 ? 0 : q > 15 ? 15 : q;
                b[i].qs[32 * (j / 2) + l] |= (uint8_t)(q << (4 * (j % 2)));
            }
        }
    }
}

/* Q6_K: per sub-block of 16 its absmax onto an int8 multiple of the super-block's d, codes q + 32 */
void quantize_q6_k(const float *x, block_q6_K *b, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *v = x + QK_K * i;
        float scale[16], smax = 0;
        for (int k = 0; k < 16; k++) {
            float a = 0;
            for (int l = 0; l < 16; l++) a = fmaxf(a, fabsf(v[16 * k + l]));
            scale[k] = a / 31.0f, smax = fmaxf(smax, scale[k]);
        }
        float d = ds_f16_to_f32(ds_f32_to_f16(smax / 127.0f));
        b[i].d = ds_f32_to_f16(d);
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int k = 0; k < 16; k++) {
            long s = d > 0 ? lroundf(scale[k] / d) : 0;
            b[i].scales[k] = (int8_t)(s > 127 ? 127 : s);
        }
        for (int e = 0; e < QK_K; e++) {
            float ds = d * b[i].scales[e / 16], id = ds > 0 ? 1.0f / ds : 0.0f;
            long q = lroundf(v[e] * id) + 32;
            q = q < 0 ? 0 : q > 63 ? 63 : q;
            int h = e / 128, g = e % 128 / 32, l = e % 32;
            b[i].ql[64 * h + 32 * (g % 2) + l] |= (uint8_t)((q & 15) << (4 * (g / 2)));
            b[i].qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * g));
        }
    }
}
