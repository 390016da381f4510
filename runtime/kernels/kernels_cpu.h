/* kernels_cpu.h — quantized matrix x activation kernels for the CPU backend, one table per SIMD
 * path (scalar, AVX2, AVX-512 VNNI), chosen at run time from the CPU's features.
 *
 * Q4_1 and Q8_0 matrices are repacked once, in one of two layouts:
 *  - rows (the exact contract's kernels): a row's codes contiguous, its block scales fp32 arrays
 *      Q4_1 row: pair[(nb+1)/2][32] | d[nb] | m[nb]   byte j of pair p = code j of block 2p | code j of block 2p+1 << 4
 *      Q8_0 row: qs[nb][32] | d[nb]
 *  - panels (the int8 contract's kernels): QK_PANEL = 16 rows interleaved so that one 64-byte load
 *    holds 4 consecutive codes of each of the 16 rows (one 32-bit lane per row: vpdpbusd / maddubs
 *    against 4 broadcast activation bytes leave each row's dot in its own lane, no horizontal sums).
 *    A panel is its blocks' codes, then their scales as fp16 (the file's own, converted exactly
 *    when used: 20 bytes per 32 Q4_1 weights, not 24 with fp32 scales), padded to 64 bytes:
 *      Q4_1 codes of a block: chunk[4][64]   byte 4r + j of chunk c = code 4c + j of row r (low
 *                  nibble) | code 4c + 16 + j << 4 (high nibble): one load, an AND and a shift give two steps
 *      Q8_0 codes of a block: chunk[8][64]   byte 4r + j of chunk s = code 4s + j of row r (signed)
 *      scales of a block: d[16] (| m[16] for Q4_1), fp16
 *    Rows past the matrix's end are zero (their results are never stored). Bytes 0..31 of a chunk
 *    are rows 0..7, so an AVX2 kernel takes a panel as two halves of 8 rows.
 *
 * Two numerical contracts:
 *  - exact (rows_f32): the integer codes dotted with fp32 activations, y = sum_b d_b (q_b . x_b)
 *    (+ sum_b m_b sum(x_b) for Q4_1). Closest to the float64 reference; the summation order is the
 *    path's own, so paths agree only to float rounding.
 *  - int8 (rows_i8): activations quantized per token and block of 32 to x ~ e_b * p_b with p_b int8,
 *    e_b = max|x_b| / 127 (error <= e_b / 2 per element), integer dot i_b = q_b . p_b, then
 *        Q8_0: s_b = float(i_b) * (d_b * e_b)        Q4_1: s_b = float(i_b) * (d_b * e_b) + m_b * (e_b * sum(p_b))
 *    accumulated in four lanes, lane[b mod 4] += s_b in order of b, y = (l0 + l1) + (l2 + l3).
 *    Every path performs exactly these float operations (i_b is an exact integer), so the scalar,
 *    AVX2 and AVX-512 results are bit-identical: a trace does not depend on the machine's SIMD.
 * In both, a block's codes are unpacked once per tile of 4 tokens and every (row, token) result is
 * computed in the same order whatever the batch, so a token's logits do not depend on its batch.
 * Attention (attend, attend_multi) is fp32 with fused multiply-adds; on the int8 contract a target's
 * KV cache holds bf16 (to_bf16 as written, attend_multi_bf16 widens it exactly). */
#ifndef DS_KERNELS_CPU_H
#define DS_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "../base/cpu_features.h"
#include "../formats/quant.h"

#define QK_PANEL 16 /* rows per panel of the int8 layout */
#define QK_ATT_BLOCK 64 /* cache rows attention reads at a time (kept in L1 for all its queries) */
#define QK_ATT_MAXQ 64  /* queries of one KV head in one attend_multi / att_pv call, at most */

typedef enum { QK_ROWS, QK_PANELS, QK_DEVICE } qk_layout;

/* QK_DEVICE: the CUDA backend's int8-contract form (kernels_cuda_i8.cu), made here from the same
 * decoded blocks so the GPU reads the very integers and scales the CPU's panels hold. All rows'
 * codes first, [rows][nb][bb], then all rows' scales, [rows][qk_device_scale_bytes]:
 *   codes: nibble kinds (Q4_1, Q4_K) 16 bytes a block, byte j = code j | code j + 16 << 4 (ggml's
 *          Q4_1 order); signed kinds (Q8_0, Q5_0 as q - 16, Q6_K as q - 32) 32 int8 a block
 *   scales: Q8_0, Q5_0  fp16 d per block                         (2 bytes a block)
 *           Q4_1        fp16 d, fp16 m per block                 (4 bytes a block)
 *           Q4_K        per super-block fp16 D, Dmin, sc[8], mn[8] (20 bytes per 8 blocks)
 *           Q6_K        per super-block fp16 D, 2 zero bytes, (sl, sh) int8 x 8 (20 bytes)
 * A row's scales are padded to 4 bytes (qk_device_scale_bytes). The kind is QK_Q8_0 for Q5_0 (as in
 * the rows layout). */

/* How a packed matrix's codes and scales are laid out, whatever the file's type:
 *  QK_Q8_0  signed codes (Q8_0; Q5_0 as q - 16, exact), fp16 d per block
 *  QK_Q4_1  nibble codes, fp16 d and m per block
 *  QK_Q4_K  nibble codes (Q4_K's q), per super-block of 8 blocks fp16 D and Dmin, per block its 6-bit
 *           scale sc and min mn as bytes: the block's d = D sc and m = -(Dmin mn), both exact in fp32,
 *           then Q4_1's operations
 *  QK_Q6_K  signed codes q - 32 (as Q8_0), per super-block fp16 D, per block the int8 scales sl, sh
 *           of its two halves of 16: i_b = sl (c . p)_lo + sh (c . p)_hi exactly in int32, then Q8_0's
 *           operations with d = D
 *  QK_Q5_0  (panels; the rows layout keeps Q5_0 as Q8_0) the 5-bit code u = q + 16 as a Q4_1 nibble
 *           plus its fifth bit: a block's 4 nibble chunks, then 4 x 16 bytes of bits (chunk c: bit i
 *           of bytes 0..7 is the fifth bit of the low nibble at byte i of the chunk, bytes 8..15 of
 *           the high one), fp16 d per block; i_b = (u . p) - 16 sum(p) exactly in int32 (the same
 *           integer as the Q8_0 form's), then Q8_0's operations: 22 bytes per 32 weights, not 34 */
typedef enum { QK_Q8_0, QK_Q4_1, QK_Q4_K, QK_Q6_K, QK_Q5_0 } qk_kind;

/* Panel layout, scale region (at qoff): bytes of the scales per block (Q4_K/Q6_K: averaged over a
 * super-block, whose fp16 header comes first), and where block b's own bytes and its super-block's
 * header are. Q4_K: [D[16] Dmin[16] | (sc[16] mn[16]) x 8] = 320 bytes a super-block; Q6_K:
 * [D[16] | (sl[16] sh[16]) x 8] = 288. */
static inline size_t qk_scale_block_bytes(int kind) {
    return kind == QK_Q8_0 || kind == QK_Q5_0 ? 2 * 16 : kind == QK_Q4_1 ? 4 * 16 : kind == QK_Q4_K ? 40 : 36;
}
static inline size_t qk_scale_at(int kind, int b) {
    if (kind == QK_Q8_0 || kind == QK_Q5_0) return (size_t)b * 32;
    if (kind == QK_Q4_1) return (size_t)b * 64;
    size_t head = kind == QK_Q4_K ? 64 : 32;
    return (size_t)(b / 8) * (head + 256) + head + (size_t)(b % 8) * 32;
}
static inline size_t qk_super_at(int kind, int b) { return (size_t)(b / 8) * (kind == QK_Q4_K ? 320 : 288); }
/* codes stored as nibbles (4 chunks of a block; Q5_0's fifth bits after them) */
static inline int qk_nibbles(int kind) { return kind == QK_Q4_1 || kind == QK_Q4_K || kind == QK_Q5_0; }
/* an m per block (the epilogue's m_b e_b sum(p_b)) */
static inline int qk_has_min(int kind) { return kind == QK_Q4_1 || kind == QK_Q4_K; }
/* bytes of codes per block of a panel */
static inline size_t qk_block_bytes(int kind) { return kind == QK_Q5_0 ? 4 * 64 + 4 * 16 : qk_nibbles(kind) ? 4 * 64 : 8 * 64; }
/* QK_DEVICE: bytes of a row's scales */
static inline size_t qk_device_scale_bytes(int kind, int nb) {
    size_t n = kind == QK_Q8_0 ? 2 * (size_t)nb : kind == QK_Q4_1 ? 4 * (size_t)nb : 20 * (size_t)(nb / 8);
    return (n + 3) / 4 * 4;
}

typedef struct {
    uint32_t type;      /* the file's type: GGML_Q4_1, Q8_0, Q5_0, Q4_K or Q6_K */
    int kind;           /* qk_kind: the packed form the kernels read */
    int rows, cols, nb; /* nb = cols / 32 */
    qk_layout layout;
    size_t rb;          /* bytes per packed row (QK_ROWS, QK_DEVICE: of codes) or per panel of 16 rows (QK_PANELS) */
    size_t qoff;        /* bytes of codes before the row's or the panel's scales (QK_DEVICE: before all scales) */
    size_t bb;          /* QK_PANELS, QK_DEVICE: bytes of codes per block */
    uint8_t *data;
} qk_mat;

/* activations of T tokens quantized per block of 32 (the int8 contract) */
typedef struct {
    int T, cols, nb;
    int8_t *q;          /* [T][cols] */
    float *e;           /* [T][nb] scale */
    float *s;           /* [T][nb] e * sum(p): the block sum of the quantized activations */
    int32_t *ps;        /* [T][nb] sum(p), the integer (a Q8_0 kernel with biased codes subtracts 128 of it) */
    int32_t *ph;        /* [T][nb] sum(p) over the block's first 16 (Q6_K's halves; qk_half_sums), or NULL */
    int32_t *ph2;       /* [T][nb] both halves' sums as int16s, ph | (ps - ph) << 16 (each <= 16 * 127 in
                         * magnitude): the AVX2 Q6_K kernels' one broadcast for their bias; set with ph
                         * (qk_half_sums), NULL where ph is */
} qk_act;

/* The first two panels of the rows a thread computes next (NULL where there are none, or unknown):
 * rows_i8 fetches them while its own last panels compute, so the next matrix's stream does not
 * start cold (qk_next_of fills it). */
typedef struct {
    const uint8_t *p[2];
} qk_next;

typedef struct {
    const char *name;
    cpu_isa isa;
    /* out[t*ld + r] = W[r] . x[t] for r0 <= r < r1, t < T; xsum = qk_block_sums(x) (Q4_1) */
    void (*rows_f32)(const qk_mat *w, int r0, int r1, const float *x, const float *xsum, int T, float *out, size_t ld);
    /* the int8 contract on the panel layout; r0, r1 need not be panel-aligned (qk_split aligns them);
     * nx: what this thread computes next, or NULL */
    void (*rows_i8)(const qk_mat *w, int r0, int r1, const qk_act *a, float *out, size_t ld, const qk_next *nx);
    /* res[j] = w[j] . x for nr (1..4) fp32 rows of length n, stride ldw; res[j] does not depend on nr */
    void (*dot_rows)(const float *w, size_t ldw, int nr, const float *x, int n, float *res);
    /* o[i] = fma(a, v[i], o[i]) (attention's accumulation) */
    void (*axpy)(float *o, float a, const float *v, int n);
    /* one attention row over n positions of one KV head (rows ld floats apart): s[j] = scale * q.K[j]
     * (the attention dot: the canonical dot's lanes, chunks and reduction with each product added by
     * one fused multiply-add), qk_softmax(s), o = sum_j s[j] V[j] (axpy in order of j); s has n
     * floats. Fused multiply-adds are correctly rounded on every path (fmaf in C), so the paths stay
     * bit-identical; unfused, scores and P V were bound by the FP ports (mul then add) */
    void (*attend)(float *o, const float *q, const float *K, const float *V, size_t ld, int n, int hd, float scale,
                   float *s);
    /* attend for nq queries sharing one KV head (o[m], q[m]), query m over positions 0..n[m]-1 (the
     * heads of a group, the tokens of a verify step); s has nq * max(n) floats; each o[m] is
     * bit-identical to attend's */
    void (*attend_multi)(float *const *o, const float *const *q, const int *n, int nq, const float *K, const float *V,
                         size_t ld, int hd, float scale, float *s);
    /* attend_multi over a bf16 cache (K, V: uint16_t elements, ld apart): each row widened to fp32
     * exactly, then attend_multi's operations, so bit-identical to it on the widened cache; blk holds
     * QK_ATT_BLOCK * hd floats */
    void (*attend_multi_bf16)(float *const *o, const float *const *q, const int *n, int nq, const uint16_t *K,
                              const uint16_t *V, size_t ld, int hd, float scale, float *s, float *blk);
    /* attend_multi in parts, for threads that share one KV head: att_scores writes s[m*sld + j] =
     * attend's score of query m at position j for j0 <= j < min(j1, n[m]) (j0 a multiple of
     * QK_ATT_BLOCK); after qk_softmax of each row and o zeroed, att_pv adds sum_{j < n[m]} s[m*sld + j]
     * V[j][d] into o[m][d] for d0 <= d < d1, in order of j. Split by positions and by dimensions
     * (each reads its share of the cache once), the result is attend_multi's bit for bit. K, V are
     * fp32 (Kb, Vb NULL) or bf16 (K, V NULL, widened exactly); blk holds QK_ATT_BLOCK * hd floats;
     * nq <= QK_ATT_MAXQ. */
    void (*att_scores)(float *s, size_t sld, const float *const *q, const int *n, int nq, const float *K,
                       const uint16_t *Kb, size_t ld, int hd, float scale, int j0, int j1, float *blk);
    void (*att_pv)(float *const *o, const float *s, size_t sld, const int *n, int nq, const float *V,
                   const uint16_t *Vb, size_t ld, int d0, int d1, float *blk);
    /* out[i] = ds_f32_to_bf16(x[i]) (a KV cache's writes) */
    void (*to_bf16)(const float *x, uint16_t *out, int n);
    /* out[i] = qk_exp1(x[i] - shift) (out may be x); returns their sum in qk_exp_sum's order */
    double (*exp_sum)(const float *x, float shift, float *out, int n);
    /* *bad = 1 when some x[i] is NaN or +inf; otherwise returns the largest x[i] (-inf for n = 0) */
    float (*max_scan)(const float *x, int n, int *bad);
    /* the first i with x[i] == v (n when none) */
    int (*first_eq)(const float *x, int n, float v);
    /* x[i] *= a (softmax's normalization: a prefill's scores, a row of logits) */
    void (*scale)(float *x, float a, int n);
    /* the roof: n rounds of 12 independent int8 multiply-adds of the kind rows_i8 issues, on
     * registers only (no memory traffic); returns the multiply-adds done. peak_what names them. */
    double (*peak_i8)(long n);
    /* out[i] = qk_silu(g[i]) * u[i] (bit-identical on every path) */
    void (*swiglu)(float *out, const float *g, const float *u, size_t n);
    /* qk_quantize_rows on this path (bit-identical) */
    void (*quantize)(const float *x, int t0, int t1, int cols, qk_act *a);
    const char *peak_what;
} qk_kernels;

/* softmax of s[0..n) in place: max, qk_exp_sum(s - max) (the process's path, bit-identical on
 * every path), times float(1 / sum) */
void qk_softmax(float *s, int n);

/* exp(t) for t <= 0 with the same float operations on every path (no FMA, -ffp-contract=off):
 * t = n ln2 + r with n = rint(t log2 e) and ln2 in two parts (Cody-Waite, |r| <= ln2/2), Cephes'
 * degree-7 polynomial e^r = 1 + r + r^2 P(r), times 2^n built from its exponent bits; 0 below
 * QK_EXP_LO (where 2^n would leave the normal range). Within 2 ulp of exp over [QK_EXP_LO, 0]. */
#define QK_EXP_LO (-87.33654f)
static inline float qk_exp1(float t) {
    if (!(t >= QK_EXP_LO)) return 0.0f; /* also -inf, a masked token */
    float n = __builtin_rintf(t * 1.44269504088896341f);
    float r = (t - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float e = (p * (r * r) + r) + 1.0f;
    union {
        int32_t i;
        float f;
    } s = {((int32_t)n + 127) * (1 << 23)};
    return e * s.f;
}

/* silu(g) = g / (1 + exp(-g)) from E = qk_exp1(-|g|) <= 1, which never overflows: g / (1 + E) for
 * g >= 0, g E / (1 + E) below (a NaN takes the second form and stays NaN) */
static inline float qk_silu(float g) {
    float E = qk_exp1(-__builtin_fabsf(g)), d = 1.0f + E;
    return g >= 0 ? g / d : (g * E) / d;
}

/* The sum of an exp_sum is defined, not left to a path: 16 double lanes, lane[i mod 16] +=
 * (double)out[i] in order of i, then halved pairwise (l[j] + l[j+8], + l[j+4], + l[j+2], + l[j+1]).
 * A path does the 16-aligned part in SIMD and hands the lanes to this shared tail. */
static inline double qk_exp_sum_tail(const float *x, float shift, float *out, int from, int n, double *l) {
    for (int i = from; i < n; i++) l[i % 16] += (double)(out[i] = qk_exp1(x[i] - shift));
    for (int h = 8; h >= 1; h /= 2)
        for (int j = 0; j < h; j++) l[j] = l[j] + l[j + h];
    return l[0];
}

/* exp_sum on the process's path (the best this CPU runs, or the one qk_exp_use chose); the paths
 * are bit-identical, so the choice only changes speed */
double qk_exp_sum(const float *x, float shift, float *out, int n);
void qk_exp_use(const qk_kernels *k);
/* max_scan and first_eq on the same path: a logits row's checks and its argmax are 49,152 scalar
 * compares a row otherwise, every verified position */
float qk_max_scan(const float *x, int n, int *bad);
int qk_first_eq(const float *x, int n, float v);
/* the first index of the largest entry, as a scalar x[i] > x[best] scan from best = 0 gives it
 * (NaN never wins; with a NaN anywhere the scan itself runs) */
int qk_argmax(const float *x, int n);

/* The table of a path (NULL if this CPU cannot run it). */
const qk_kernels *qk_kernels_for(cpu_isa isa);
/* 1 for the weight types with fused kernels (Q4_1, Q8_0, Q5_0 with cols a multiple of 32; Q4_K, Q6_K
 * with cols a multiple of 256) */
int qk_supported(const qmat *w);
/* the packed form of a supported type (qk_kind) */
int qk_kind_of(uint32_t type);
/* a->ph for tokens t0..t1-1 from a->q (what a QK_Q6_K matrix reads besides ps) */
void qk_half_sums(qk_act *a, int t0, int t1);
/* repack w into out in the given layout (out->data freed with qk_mat_free); -1 with a message */
int qk_pack(const qmat *w, qk_layout layout, qk_mat *out);
/* thread tid of nth takes rows [r0, r1) of m: whole panels on the panel layout */
void qk_split(const qk_mat *m, int tid, int nth, int *r0, int *r1);
/* the first two panels of thread tid's share of m (qk_split), for rows_i8's nx; m may be NULL */
void qk_next_of(const qk_mat *m, int tid, int nth, qk_next *nx);
void qk_mat_free(qk_mat *m);
/* Per-token block sums of x[T][cols] into xsum[T][cols/32] (the exact Q4_1 kernel needs them). */
void qk_block_sums(const float *x, int T, int cols, float *xsum);
/* quantize x[T][cols] into a (buffers sized by the caller: q T*cols, e, s and ps T*cols/32) */
void qk_quantize(const float *x, int T, int cols, qk_act *a);
/* tokens t0..t1-1 of x into a (a->T, cols, nb set by the caller): the reference every path's
 * quantize equals; a path does the integer codes and hands each block to qk_quantize_finish */
void qk_quantize_rows(const float *x, int t0, int t1, int cols, qk_act *a);

/* a block's scale and sums from its max |x|, its finiteness probe (0, or NaN if any x was not
 * finite) and the sum of its codes: one definition for every path */
static inline void qk_quantize_finish(qk_act *a, size_t i, float amax, float fin, int sum) {
    float e = amax / 127.0f;
    /* a NaN or Inf activation must reach the logits (where it is an error), not become 127 */
    a->e[i] = __builtin_isfinite(fin) && __builtin_isfinite(amax) ? e : __builtin_nanf("");
    a->s[i] = e * (float)sum;
    a->ps[i] = sum;
}

extern const qk_kernels qk_scalar, qk_avx2, qk_avx512, qk_amx;

/* the AMX path takes a batch on its tiles from this many tokens (fewer: its VNNI kernels, the same
 * bits); tests lower it to 1 */
extern int qk_amx_min;

/* the AVX2 path takes 3 to 8 tokens in one pass over a matrix of at least this many packed bytes (1
 * MB; streamed from memory, a pass a token pair would read it 4 times at B = 8); tests lower it */
extern size_t qk_sweep2_bytes;

#endif
