// kernels_cuda_i8.cu — the CPU's int8 contract (kernels_cpu.h) for quantized matrices on the GPU,
// operation for operation, so a projection's outputs equal the CPU's bit for bit:
//   activations quantized per token and block of 32 as qk_quantize_rows does (kc_quantize);
//   i_b = q_b . p_b exactly, by dp4a on the raw codes (qk_pack's QK_DEVICE form);
//   s_b = float(i_b) (d_b e_b) [+ m_b (e_b sum p_b)], lane[b mod 4] += s_b in order of b,
//   y = (l0 + l1) + (l2 + l3)
// Each rounding is an explicit intrinsic (never contracted into a fused multiply-add). One warp per
// row: lane L computes s_b for b = L, L + 32, ...; lanes 0-3 then add a pass's 32 values in order
// (a shuffle each), which keeps the contract's order while the loads and dots run 32 wide.
#include <cuda_fp16.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_cuda.h"
#include "kernels_cuda_launch.cuh"

#define FULL 0xffffffffu
#define I8_ROWS 8 // rows (warps) per block
#define I8_TT 8   // tokens per tile above one

static int g_mutant; // tests: the epilogue's lanes summed as (l0 + l2) + (l1 + l3)
extern "C" void kc_i8_mutant(int on) { g_mutant = on; }

// ------------------------------------------------------------------------------ quantization

// qk_quantize_rows and qk_quantize_finish for one block of 32, by a warp (lane j: element j)
__device__ __forceinline__ void quant_block(const float *xb, int lane, int8_t *qb, float *eb, float *sb) {
    float v = xb[lane], av = fabsf(v);
    float amax = av > 0.f ? av : 0.f; // a NaN never wins the CPU's scan (it starts at 0)
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, o));
    int bad = __any_sync(FULL, !isfinite(v)); // the CPU's sum of v - v is NaN
    float inv = amax > 0.f ? __fdiv_rn(127.0f, amax) : 0.0f;
    float r = __fsub_rn(__fadd_rn(__fmul_rn(v, inv), 12582912.0f), 12582912.0f);
    int qi = r == r ? (int)r : INT_MIN;
    qi = qi > 127 ? 127 : qi < -127 ? -127 : qi;
    qb[lane] = (int8_t)qi;
    int sum = qi;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(FULL, sum, o);
    if (lane == 0) {
        float ee = __fdiv_rn(amax, 127.0f);
        *eb = !bad && isfinite(amax) ? ee : __int_as_float(0x7fc00000);
        *sb = __fmul_rn(ee, (float)sum);
    }
}

// one warp per (token, block)
__global__ void k_quantize(const float *x, size_t n_blocks, int8_t *q, float *e, float *s) {
    size_t blk = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= n_blocks) return; // a whole warp
    quant_block(x + blk * 32, threadIdx.x & 31, q + blk * 32, e + blk, s + blk);
}

extern "C" int kc_quantize(const float *x, int T, int cols, int8_t *q, float *e, float *s) {
    size_t n = (size_t)T * (size_t)(cols / 32);
    if (!n) return 0;
    if (cols % 32) {
        snprintf(kc_err, sizeof kc_err, "quantize: %d columns are not whole blocks of 32", cols);
        return -1;
    }
    return launch("quantize", k_quantize, dim3((unsigned)((n + 7) / 8)), dim3(256), x, n, q, e, s);
}

// -------------------------------------------------------------------------------- the GEMV

struct i8_set {
    kc_i8mat m[KC_MV_SET];
    int start[KC_MV_SET + 1]; // first block of rows of each matrix
    int n, add, mutant;
};

// the integer dot of block b's codes with the token's 32 activations (pw: 8 words of them); Q6_K's
// halves apart (lo: codes 0-15, hi: 16-31)
template <int KIND> __device__ __forceinline__ void idot(const uint4 *c, const int *pw, int *lo, int *hi) {
    if (KIND == KC_I8_Q4_1 || KIND == KC_I8_Q4_K) { // byte j = code j | code j + 16 << 4
        unsigned w[4] = {c[0].x, c[0].y, c[0].z, c[0].w};
        int a = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            a = __dp4a((int)(w[k] & 0x0F0F0F0Fu), pw[k], a);
            a = __dp4a((int)((w[k] >> 4) & 0x0F0F0F0Fu), pw[4 + k], a);
        }
        *lo = a, *hi = 0;
    } else {
        unsigned w[8] = {c[0].x, c[0].y, c[0].z, c[0].w, c[1].x, c[1].y, c[1].z, c[1].w};
        int a = 0, b = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) a = __dp4a((int)w[k], pw[k], a), b = __dp4a((int)w[4 + k], pw[4 + k], b);
        if (KIND == KC_I8_Q6_K) *lo = a, *hi = b;
        else *lo = a + b, *hi = 0;
    }
}

// lane's block b of a row: s_b for the tile's tokens (0 past the row's end or the tile's tokens)
template <int KIND, int TT>
__device__ __forceinline__ void pass_sb(const uint8_t *codes, const uint8_t *sc, int b, int nb, int t0, int nt,
                                        const int8_t *q, const float *e, const float *s, float *sb) {
    constexpr int CB = KIND == KC_I8_Q4_1 || KIND == KC_I8_Q4_K ? 16 : 32; // code bytes a block
#pragma unroll
    for (int t = 0; t < TT; t++) sb[t] = 0.f;
    if (b >= nb) return;
    uint4 c[2];
    c[0] = ((const uint4 *)(codes + (size_t)b * CB))[0];
    if (CB == 32) c[1] = ((const uint4 *)(codes + (size_t)b * CB))[1];
    // the block's d (and m), as the CPU's kernels form them (kernels_scalar.c panel_scale)
    float d, m = 0.f;
    int sl = 0, sh = 0;
    if (KIND == KC_I8_Q8_0) d = kc_h2f(((const unsigned short *)sc)[b]);
    else if (KIND == KC_I8_Q4_1) {
        unsigned dm = ((const unsigned *)sc)[b];
        d = kc_h2f((unsigned short)(dm & 0xffffu)), m = kc_h2f((unsigned short)(dm >> 16));
    } else {
        const uint8_t *sup = sc + 20 * (b >> 3);
        d = kc_h2f(*(const unsigned short *)sup);
        if (KIND == KC_I8_Q4_K) {
            d = __fmul_rn(d, (float)sup[4 + (b & 7)]);
            m = -__fmul_rn(kc_h2f(*(const unsigned short *)(sup + 2)), (float)sup[12 + (b & 7)]);
        } else sl = (int8_t)sup[4 + 2 * (b & 7)], sh = (int8_t)sup[5 + 2 * (b & 7)];
    }
    int cols = 32 * nb;
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (t < nt) {
            size_t tb = (size_t)(t0 + t) * nb + b;
            const int4 *pp = (const int4 *)(q + (size_t)(t0 + t) * cols + (size_t)b * 32);
            int4 p0 = pp[0], p1 = pp[1];
            int pw[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w}, lo, hi;
            idot<KIND>(c, pw, &lo, &hi);
            int i = KIND == KC_I8_Q6_K ? sl * lo + sh * hi : lo;
            float v = __fmul_rn(__int2float_rn(i), __fmul_rn(d, e[tb]));
            if (KIND == KC_I8_Q4_1 || KIND == KC_I8_Q4_K) v = __fadd_rn(v, __fmul_rn(m, s[tb]));
            sb[t] = v;
        }
    }
}

// One warp per row, U passes of 32 blocks loaded before their sums (more bytes in flight a warp:
// a row of the down projection is 9 passes); the order of the sums does not depend on U. (Quantizing
// x inside each block instead of k_quantize's launch was measured slower on the H200, 3.07 vs 2.22 ms
// a 1.5B-shape token: every block of rows quantized the whole x again.)
template <int KIND, int TT, int U>
__global__ void __launch_bounds__(32 * I8_ROWS)
    k_matvec_i8(i8_set set, int nb, const int8_t *q, const float *e, const float *s, int T) {
    constexpr int CB = KIND == KC_I8_Q4_1 || KIND == KC_I8_Q4_K ? 16 : 32;
    kc_i8mat M = set.m[0];
    int first = 0;
#pragma unroll
    for (int i = 1; i < KC_MV_SET; i++)
        if (i < set.n && (int)blockIdx.x >= set.start[i]) M = set.m[i], first = set.start[i];
    int lane = threadIdx.x & 31, r = (blockIdx.x - first) * I8_ROWS + (threadIdx.x >> 5);
    if (r >= M.rows) return; // a whole warp
    int t0 = blockIdx.y * TT, nt = min(TT, T - t0);
    const uint8_t *codes = M.codes + (size_t)r * nb * CB, *sc = M.scales + (size_t)r * M.srb;
    float acc[TT];
#pragma unroll
    for (int t = 0; t < TT; t++) acc[t] = 0.f;
    for (int b0 = 0; b0 < nb; b0 += 32 * U) {
        float sb[U][TT];
#pragma unroll
        for (int u = 0; u < U; u++) pass_sb<KIND, TT>(codes, sc, b0 + 32 * u + lane, nb, t0, nt, q, e, s, sb[u]);
        // lane k (< 4) adds s_{b + k}, s_{b + k + 4}, ..., in order of b
#pragma unroll
        for (int u = 0; u < U; u++) {
            int lim = nb - (b0 + 32 * u);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int idx = (lane & 3) + 4 * i;
#pragma unroll
                for (int t = 0; t < TT; t++) {
                    float v = __shfl_sync(FULL, sb[u][t], idx);
                    if (lane < 4 && idx < lim) acc[t] = __fadd_rn(acc[t], v);
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < TT; t++) {
        float l1 = __shfl_sync(FULL, acc[t], 1), l2 = __shfl_sync(FULL, acc[t], 2), l3 = __shfl_sync(FULL, acc[t], 3);
        if (lane == 0 && t < nt) {
            float y = set.mutant ? __fadd_rn(__fadd_rn(acc[t], l2), __fadd_rn(l1, l3))
                                 : __fadd_rn(__fadd_rn(acc[t], l1), __fadd_rn(l2, l3));
            float *o = M.out + (size_t)(t0 + t) * M.rows + r;
            *o = set.add ? __fadd_rn(*o, y) : y;
        }
    }
}

// passes in flight per warp at decode: 2 unless DSPARK_CUDA_I8_U says 1 or 4 (to measure)
static int i8_unroll(void) {
    static int u = 0;
    if (!u) {
        const char *v = getenv("DSPARK_CUDA_I8_U");
        u = v && (!strcmp(v, "1") || !strcmp(v, "4")) ? atoi(v) : 2;
    }
    return u;
}

#define I8_KIND(kind, CALL)                                                                      \
    switch (kind) {                                                                              \
    case KC_I8_Q8_0: { constexpr int K = KC_I8_Q8_0; return CALL; }                              \
    case KC_I8_Q4_1: { constexpr int K = KC_I8_Q4_1; return CALL; }                              \
    case KC_I8_Q4_K: { constexpr int K = KC_I8_Q4_K; return CALL; }                              \
    case KC_I8_Q6_K: { constexpr int K = KC_I8_Q6_K; return CALL; }                              \
    default: snprintf(kc_err, sizeof kc_err, "int8 matvec: unknown kind %d", kind); return -1; \
    }

extern "C" int kc_matvec_i8(const kc_i8mat *mats, int n, int kind, int cols, const int8_t *q, const float *e,
                            const float *s, int T, int add) {
    if (T <= 0) return 0;
    if (n < 1 || n > KC_MV_SET || cols % 32 || (kind == KC_I8_Q4_K || kind == KC_I8_Q6_K) && cols % 256) {
        snprintf(kc_err, sizeof kc_err, "int8 matvec: %d matrices of %d columns (1..%d, whole blocks)", n, cols,
                 KC_MV_SET);
        return -1;
    }
    i8_set set;
    memset(&set, 0, sizeof set);
    set.n = n, set.add = add, set.mutant = g_mutant;
    int blocks = 0;
    for (int i = 0; i < n; i++) {
        set.m[i] = mats[i];
        set.start[i] = blocks;
        blocks += (mats[i].rows + I8_ROWS - 1) / I8_ROWS;
    }
    set.start[n] = blocks;
    if (!blocks) return 0;
    int nb = cols / 32;
    dim3 b(32 * I8_ROWS);
    if (T == 1) {
        int u = i8_unroll();
        dim3 g(blocks, 1);
        if (u == 1) I8_KIND(kind, launch("matvec int8", k_matvec_i8<K, 1, 1>, g, b, set, nb, q, e, s, T));
        if (u == 4) I8_KIND(kind, launch("matvec int8", k_matvec_i8<K, 1, 4>, g, b, set, nb, q, e, s, T));
        I8_KIND(kind, launch("matvec int8", k_matvec_i8<K, 1, 2>, g, b, set, nb, q, e, s, T));
    }
    if ((T + I8_TT - 1) / I8_TT > 65535) {
        snprintf(kc_err, sizeof kc_err, "int8 matvec: %d tokens in one call (at most %d)", T, 65535 * I8_TT);
        return -1;
    }
    I8_KIND(kind, launch("matvec int8", k_matvec_i8<K, I8_TT, 1>, dim3(blocks, (T + I8_TT - 1) / I8_TT), b, set,
                         nb, q, e, s, T));
}

// timing models: random codes, every scale byte pair the fp16 0x1400 (~1e-3: small and finite)
__global__ void k_fill_i8(uint8_t *codes, size_t n_codes, uint16_t *scales, size_t n_scales, uint64_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    for (size_t k = i; k < n_codes; k += step) {
        uint64_t z = (k + seed) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        codes[k] = (uint8_t)(z >> 56);
    }
    for (size_t k = i; k < n_scales; k += step) scales[k] = 0x1400;
}

extern "C" int kc_fill_i8(void *codes, size_t code_bytes, void *scales, size_t scale_bytes, uint64_t seed) {
    return launch("fill int8", k_fill_i8, dim3(1024), dim3(256), (uint8_t *)codes, code_bytes, (uint16_t *)scales,
                  scale_bytes / 2, seed);
}
