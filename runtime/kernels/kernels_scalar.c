/* kernels_scalar.c — the portable path: plain C loops, the reference the SIMD paths are tested
 * against (bit for bit on the int8 contract). */
#include <math.h>

#include "../base/common.h"
#include "kernels_cpu.h"
#include "../formats/quant.h"

static const uint8_t *row_ptr(const qk_mat *w, int r) { return w->data + (size_t)r * w->rb; }

/* code j of Q4_1 block b of a packed row (kernels_cpu.h: blocks come in nibble-interleaved pairs) */
static int q4_code(const uint8_t *row, int b, int j) { return (row[32 * (b >> 1) + j] >> (4 * (b & 1))) & 15; }

static void rows_f32(const qk_mat *w, int r0, int r1, const float *x, const float *xsum, int T, float *out, size_t ld) {
    int nb = w->nb, q4 = qk_nibbles(w->kind), q6 = w->kind == QK_Q6_K;
    for (int r = r0; r < r1; r++) {
        const uint8_t *row = row_ptr(w, r);
        const float *d = (const float *)(row + w->qoff), *m = d + nb;
        for (int t = 0; t < T; t++) {
            const float *xt = x + (size_t)t * w->cols;
            float y = 0;
            for (int b = 0; b < nb; b++) {
                const float *xb = xt + 32 * b;
                float p = 0;
                if (q4) {
                    for (int j = 0; j < 32; j++) p += (float)q4_code(row, b, j) * xb[j];
                } else if (q6) { /* each half of 16 has its own d */
                    const int8_t *qs = (const int8_t *)row + 32 * (size_t)b;
                    float h = 0;
                    for (int j = 0; j < 16; j++) p += (float)qs[j] * xb[j];
                    for (int j = 16; j < 32; j++) h += (float)qs[j] * xb[j];
                    y += d[2 * b] * p;
                    y += d[2 * b + 1] * h;
                    continue;
                } else {
                    const int8_t *qs = (const int8_t *)row + 32 * (size_t)b;
                    for (int j = 0; j < 32; j++) p += (float)qs[j] * xb[j];
                }
                y += d[b] * p;
                if (q4) y += m[b] * xsum[(size_t)t * nb + b];
            }
            out[(size_t)t * ld + r] = y;
        }
    }
}

/* code k of row r in block b of the panel layout */
static int panel_code(const qk_mat *w, int r, int b, int k) {
    const uint8_t *blk = w->data + (size_t)(r / QK_PANEL) * w->rb + (size_t)b * w->bb;
    int rr = r % QK_PANEL, step = k / 4, j = k % 4;
    int nib = (blk[64 * (step % 4) + 4 * rr + j] >> (4 * (step / 4))) & 15;
    if (w->kind == QK_Q5_0) { /* the signed code q = u - 16: the integer dot equals the kernels' u . p - 16 sum(p) */
        int bit = 64 * (step / 4) + 4 * rr + j;
        return (nib | ((blk[256 + 16 * (step % 4) + bit / 8] >> (bit % 8)) & 1) << 4) - 16;
    }
    if (qk_nibbles(w->kind)) return nib;
    return (int8_t)blk[64 * step + 4 * rr + j];
}

/* the d (k = 0) and m (k = 1) of row r in block b of the panel layout, as the kernels use them:
 * Q4_K's D sc and -(Dmin mn) are exact products; Q6_K's d is D (its halves' scales are integers) */
static float panel_scale(const qk_mat *w, int r, int b, int k) {
    const uint8_t *scr = w->data + (size_t)(r / QK_PANEL) * w->rb + w->qoff;
    const uint8_t *at = scr + qk_scale_at(w->kind, b);
    const uint16_t *sup = (const uint16_t *)(scr + qk_super_at(w->kind, b));
    int rr = r % QK_PANEL;
    switch (w->kind) {
    case QK_Q4_K:
        if (k == 0) return ds_f16_to_f32(sup[rr]) * (float)at[rr];
        return -(ds_f16_to_f32(sup[QK_PANEL + rr]) * (float)at[QK_PANEL + rr]);
    case QK_Q6_K: return k == 0 ? ds_f16_to_f32(sup[rr]) : 0.0f;
    default: return ds_f16_to_f32(((const uint16_t *)at)[k * QK_PANEL + rr]);
    }
}

/* Q6_K: the int8 scale of half h of row r's block b */
static int panel_half_scale(const qk_mat *w, int r, int b, int h) {
    const uint8_t *at = w->data + (size_t)(r / QK_PANEL) * w->rb + w->qoff + qk_scale_at(w->kind, b);
    return (int8_t)at[h * QK_PANEL + r % QK_PANEL];
}

/* the int8 contract of kernels_cpu.h, operation for operation */
static void rows_i8(const qk_mat *w, int r0, int r1, const qk_act *a, float *out, size_t ld, const qk_next *nx) {
    (void)nx; /* a reference: nothing fetched ahead */
    int nb = w->nb, q4 = qk_has_min(w->kind), q6 = w->kind == QK_Q6_K;
    for (int r = r0; r < r1; r++) {
        for (int t = 0; t < a->T; t++) {
            const int8_t *p = a->q + (size_t)t * a->cols;
            const float *e = a->e + (size_t)t * nb, *xs = a->s + (size_t)t * nb;
            float lane[4] = {0, 0, 0, 0};
            for (int b = 0; b < nb; b++) {
                const int8_t *pb = p + 32 * b;
                int32_t i = 0;
                if (q6) { /* i_b = sl (c . p)_lo + sh (c . p)_hi, exactly */
                    int32_t lo = 0, hi = 0;
                    for (int j = 0; j < 16; j++) lo += panel_code(w, r, b, j) * pb[j];
                    for (int j = 16; j < 32; j++) hi += panel_code(w, r, b, j) * pb[j];
                    i = panel_half_scale(w, r, b, 0) * lo + panel_half_scale(w, r, b, 1) * hi;
                } else
                    for (int j = 0; j < 32; j++) i += panel_code(w, r, b, j) * pb[j];
                float de = panel_scale(w, r, b, 0) * e[b], sb = (float)i * de;
                if (q4) {
                    float mo = panel_scale(w, r, b, 1) * xs[b];
                    sb = sb + mo;
                }
                lane[b & 3] = lane[b & 3] + sb;
            }
            out[(size_t)t * ld + r] = (lane[0] + lane[1]) + (lane[2] + lane[3]);
        }
    }
}

/* the canonical fp32 dot of kernels_x86.inc, operation for operation: lanes l of two 8-lane sums
 * over alternating chunks of 8, v = a + b, q_i = v_i + v_{i+4}, (q0 + q2) + (q1 + q3), + the tail */
static void dot_rows(const float *w, size_t ldw, int nr, const float *x, int n, float *res) {
    int n16 = n & ~15;
    for (int j = 0; j < nr; j++) {
        const float *wj = w + (size_t)j * ldw;
        float a[8] = {0}, b[8] = {0}, v[8], q[4], t = 0;
        for (int k = 0; k < n16; k += 16)
            for (int l = 0; l < 8; l++) {
                float pa = wj[k + l] * x[k + l], pb = wj[k + 8 + l] * x[k + 8 + l];
                a[l] = a[l] + pa;
                b[l] = b[l] + pb;
            }
        for (int l = 0; l < 8; l++) v[l] = a[l] + b[l];
        for (int i = 0; i < 4; i++) q[i] = v[i] + v[i + 4];
        float s = (q[0] + q[2]) + (q[1] + q[3]);
        for (int k = n16; k < n; k++) t += wj[k] * x[k];
        res[j] = s + t;
    }
}

static void axpy(float *o, float a, const float *v, int n) {
    for (int i = 0; i < n; i++) o[i] = fmaf(a, v[i], o[i]);
}

/* the attention dot of kernels_cpu.h: dot_rows's lanes, chunks and reduction, each product added
 * by one fused multiply-add (fmaf is correctly rounded, so equal to the SIMD paths' vfmadd) */
static float adot(const float *w, const float *x, int n) {
    int n16 = n & ~15;
    float a[8] = {0}, b[8] = {0}, v[8], q[4], t = 0;
    for (int k = 0; k < n16; k += 16)
        for (int l = 0; l < 8; l++) {
            a[l] = fmaf(w[k + l], x[k + l], a[l]);
            b[l] = fmaf(w[k + 8 + l], x[k + 8 + l], b[l]);
        }
    for (int l = 0; l < 8; l++) v[l] = a[l] + b[l];
    for (int i = 0; i < 4; i++) q[i] = v[i] + v[i + 4];
    float s = (q[0] + q[2]) + (q[1] + q[3]);
    for (int k = n16; k < n; k++) t = fmaf(w[k], x[k], t);
    return s + t;
}

static void scale(float *x, float a, int n) {
    for (int i = 0; i < n; i++) x[i] *= a;
}

/* row j's columns d0..d0+w-1 of an fp32 cache, or of a bf16 one widened into blk */
static const float *att_row(const float *F, const uint16_t *B, size_t ld, int j, int d0, int w, float *blk) {
    if (F) return F + (size_t)j * ld + d0;
    for (int i = 0; i < w; i++) blk[i] = ds_bf16_to_f32(B[(size_t)j * ld + d0 + i]);
    return blk;
}

static void att_scores(float *s, size_t sld, const float *const *q, const int *n, int nq, const float *K,
                       const uint16_t *Kb, size_t ld, int hd, float scale, int j0, int j1, float *blk) {
    for (int m = 0; m < nq; m++)
        for (int j = j0; j < DS_MIN(j1, n[m]); j++) s[(size_t)m * sld + j] = adot(att_row(K, Kb, ld, j, 0, hd, blk), q[m], hd) * scale;
}

static void att_pv(float *const *o, const float *s, size_t sld, const int *n, int nq, const float *V,
                   const uint16_t *Vb, size_t ld, int d0, int d1, float *blk) {
    for (int m = 0; m < nq; m++)
        for (int j = 0; j < n[m]; j++) axpy(o[m] + d0, s[(size_t)m * sld + j], att_row(V, Vb, ld, j, d0, d1 - d0, blk), d1 - d0);
}

/* the scores, each row's softmax, then P V: attend, attend_multi and attend_multi_bf16 */
static void attend_parts(float *const *o, const float *const *q, const int *n, int nq, const float *K, const float *V,
                         const uint16_t *Kb, const uint16_t *Vb, size_t ld, int hd, float scale, float *s, float *blk) {
    int nmax = 0;
    for (int m = 0; m < nq; m++) nmax = DS_MAX(nmax, n[m]);
    att_scores(s, (size_t)nmax, q, n, nq, K, Kb, ld, hd, scale, 0, nmax, blk);
    for (int m = 0; m < nq; m++) {
        qk_softmax(s + (size_t)m * nmax, n[m]);
        for (int i = 0; i < hd; i++) o[m][i] = 0;
    }
    att_pv(o, s, (size_t)nmax, n, nq, V, Vb, ld, 0, hd, blk);
}

static void attend(float *o, const float *q, const float *K, const float *V, size_t ld, int n, int hd, float scale,
                   float *s) {
    attend_parts(&o, &q, &n, 1, K, V, NULL, NULL, ld, hd, scale, s, NULL);
}

static void attend_multi(float *const *o, const float *const *q, const int *n, int nq, const float *K, const float *V,
                         size_t ld, int hd, float scale, float *s) {
    attend_parts(o, q, n, nq, K, V, NULL, NULL, ld, hd, scale, s, NULL);
}

static void attend_multi_bf16(float *const *o, const float *const *q, const int *n, int nq, const uint16_t *K,
                              const uint16_t *V, size_t ld, int hd, float scale, float *s, float *blk) {
    attend_parts(o, q, n, nq, NULL, NULL, K, V, ld, hd, scale, s, blk);
}

static void to_bf16(const float *x, uint16_t *out, int n) {
    for (int i = 0; i < n; i++) out[i] = ds_f32_to_bf16(x[i]);
}

static double exp_sum(const float *x, float shift, float *out, int n) {
    double l[16] = {0};
    return qk_exp_sum_tail(x, shift, out, 0, n, l);
}

static float max_scan(const float *x, int n, int *bad) {
    float m = -__builtin_inff();
    int b = 0;
    for (int i = 0; i < n; i++) {
        b |= !(x[i] < __builtin_inff());
        m = x[i] > m ? x[i] : m;
    }
    *bad = b;
    return m;
}

static int first_eq(const float *x, int n, float v) {
    for (int i = 0; i < n; i++)
        if (x[i] == v) return i;
    return n;
}

/* int32 multiply-adds in 12 independent chains (the compiler may vectorise them: this is the
 * scalar path's roof only in the sense of what plain C gets) */
static double peak_i8(long n) {
    int32_t a[12], ss = 5;
    for (int k = 0; k < 12; k++) a[k] = k + 1;
    for (long i = 0; i < n; i++) {
        __asm__ volatile("" : "+r"(ss));
        for (int k = 0; k < 12; k++) a[k] += a[k] * ss; /* own chains, as the SIMD paths' */
    }
    int32_t t = 0;
    for (int k = 0; k < 12; k++) t += a[k];
    volatile int32_t sink = t;
    (void)sink;
    return (double)n * 12;
}

static void swiglu(float *out, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = qk_silu(g[i]) * u[i];
}

const qk_kernels qk_scalar = {.name = "scalar", .isa = ISA_SCALAR, .rows_f32 = rows_f32, .rows_i8 = rows_i8,
                             .dot_rows = dot_rows, .axpy = axpy, .attend = attend, .attend_multi = attend_multi, .attend_multi_bf16 = attend_multi_bf16, .att_scores = att_scores, .att_pv = att_pv, .to_bf16 = to_bf16, .exp_sum = exp_sum, .max_scan = max_scan, .scale = scale, .first_eq = first_eq, .swiglu = swiglu,
                             .peak_i8 = peak_i8, .peak_what = "imul (1 MAC)", .quantize = qk_quantize_rows};
