/* kernels_amx.c — the AVX-512 + AMX path: kernels_x86.inc's AVX-512 VNNI kernels, with the int8
 * contract's batched products (a verify step, a prefill chunk) on AMX tiles (built with the AVX-512
 * flags plus -mamx-tile -mamx-int8).
 *
 * Why: on the VNNI path a block of 16 rows x 32 codes costs each token 8 vpdpbusd beside the
 * contract's six-operation float epilogue, all on the same two vector ports, so from ~4 tokens on a
 * forward is bound by them (Qwen2.5-Coder-1.5B: cost(16)/cost(1) 2.79, prefill at a third of the
 * roof). One tile multiply does a block's integer dots for 16 tokens x 16 rows on the AMX unit, which
 * leaves the vector ports only the epilogue.
 *
 * The contract is unchanged: per token and block, i_b is the same exact integer (tdpbssd: signed
 * activations x signed codes; tdpbsud: x unsigned nibbles), then pblock_i8's float operations in
 * the same order into lane b mod 4, so this path is bit-identical to the others and batch-invariant.
 * Tiles (per block, m tokens):
 *   A  the activations' block, m rows of 32 bytes, read in place (rows cols bytes apart)
 *   B  the panel's codes as 8 rows of 64 bytes: byte 4r + j of row c = code 4c + j of row r, which is
 *      the panel's own chunk layout for signed codes (Q8_0, Q6_K: read in place); nibbles (Q4_1, Q4_K)
 *      and Q5_0 (as q = u - 16) are unpacked to it once per block and token group
 *   C  m x 16 int32 (token x row), stored to L1 for the epilogue
 * Q6_K takes the block's halves apart (A m x 16, B 4 x 64 each) and joins them as the other paths do,
 * i_b = sl lo + sh hi in int32. Measured on a 2-core Xeon guest: the tile unit does not run beside
 * the vector ports there, so the epilogue is most of the time and the gain is modest (prefill +8-20 %,
 * 16 tokens 12 %; BENCHMARKS.md); below qk_amx_min tokens the VNNI kernels are as fast. */
#if defined(__x86_64__)
#include "kernels_cpu.h" /* first: its struct's fields are not renamed below */

#include <sys/syscall.h>
#include <unistd.h>

#define QK_AVX512 1
#define rows_i8 rows_i8_vnni
#define peak_i8 peak_i8_vnni /* not used: this path's roof is the tiles' */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "kernels_x86.inc"
#pragma GCC diagnostic pop
#undef rows_i8
#undef peak_i8

/* palette 1's configuration: 64 bytes, tile i's bytes a row and rows */
typedef struct {
    uint8_t palette, start_row, pad[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) tile_cfg;

static inline void cfg_tile(tile_cfg *c, int t, int rows, int colsb) {
    c->rows[t] = (uint8_t)rows;
    c->colsb[t] = (uint16_t)colsb;
}

/* tiles: 0, 1 C of even / odd blocks; 2, 3 A; 4, 5 B. Q6_K: 0 C lo, 1 C hi, 2 A lo, 3 A hi, 4 B lo, 5 B hi */
static void amx_config(int kind, int m) {
    tile_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    cfg_tile(&c, 0, m, 64);
    cfg_tile(&c, 1, m, 64);
    int q6 = kind == QK_Q6_K;
    cfg_tile(&c, 2, m, q6 ? 16 : 32);
    cfg_tile(&c, 3, m, q6 ? 16 : 32);
    cfg_tile(&c, 4, q6 ? 4 : 8, 64);
    cfg_tile(&c, 5, q6 ? 4 : 8, 64);
    _tile_loadconfig(&c);
}

/* Blocks go in chunks, three phases apart: the codes of chunk k + 1 are unpacked (vector stores),
 * chunk k's multiplies run on the tiles and their C are stored, and chunk k - 1's epilogue reads its C
 * back. A tile load waits for the vector stores it reads to reach L1, and the epilogue's loads wait
 * for the tile stores: done block by block (a multiply, its store, its epilogue) each block paid
 * both round trips in turn (~100 cycles a Q4_1 block, measured), in phases they overlap. */
#define AMX_CHUNK 8 /* blocks a chunk (Q6_K: its two C a block, 4) */

/* the chunk's nibble codes (Q4_1, Q4_K, Q5_0 as q = u - 16) as 8 rows of 64 bytes a block */
static inline __attribute__((always_inline)) void amx_unpack(const uint8_t *pan, size_t bb, const int kind, int b0,
                                                             int nbk, uint8_t *wb) {
    const __m512i mask = _mm512_set1_epi8(15);
    for (int j = 0; j < nbk; j++) {
        const uint8_t *blk = pan + (size_t)(b0 + j) * bb;
        uint8_t *o = wb + 512 * (size_t)j;
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i v = _mm512_load_si512((const void *)(blk + 64 * c));
            __m512i lo = _mm512_and_si512(v, mask), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
            if (kind == QK_Q5_0) { /* u = nibble + 16 fifth bit, then the signed q = u - 16 */
                q5_bits512(blk, c, &lo, &hi);
                lo = _mm512_sub_epi8(lo, _mm512_set1_epi8(16));
                hi = _mm512_sub_epi8(hi, _mm512_set1_epi8(16));
            }
            _mm512_store_si512((void *)(o + 64 * c), lo);
            _mm512_store_si512((void *)(o + 64 * (c + 4)), hi);
        }
    }
}

/* the chunk's multiplies for m tokens (activations of block b at p + 32 b): C of block j at
 * cb + 16 m j (Q6_K: its low half's there, its high half's at cb + 16 m (j + nbk)) */
static inline __attribute__((always_inline)) void amx_mul(const uint8_t *pan, size_t bb, const int kind,
                                                          const int8_t *p, size_t cols, int b0, int nbk,
                                                          const uint8_t *wb, int32_t *cb, int m) {
    const int uns = kind == QK_Q4_1 || kind == QK_Q4_K; /* unsigned codes: tdpbsud */
    for (int j = 0; j < nbk; j++) {
        const int8_t *pb = p + 32 * (size_t)(b0 + j);
        const uint8_t *blk = pan + (size_t)(b0 + j) * bb;
        int32_t *c = cb + 16 * (size_t)m * j;
        if (kind == QK_Q6_K) {
            _tile_loadd(2, pb, cols);
            _tile_loadd(3, pb + 16, cols);
            _tile_loadd(4, blk, 64);
            _tile_loadd(5, blk + 256, 64);
            _tile_zero(0);
            _tile_zero(1);
            _tile_dpbssd(0, 2, 4);
            _tile_dpbssd(1, 3, 5);
            _tile_stored(0, c, 64);
            _tile_stored(1, c + 16 * (size_t)m * nbk, 64);
            continue;
        }
        const uint8_t *src = qk_nibbles(kind) ? wb + 512 * (size_t)j : blk;
        /* two sets of tiles (C, A, B), alternating: one block's multiply need not wait for the last's
         * store (tile numbers are immediates, hence the macro) */
#define AMX_ONE(C, A, B)                                                                                  \
    do {                                                                                                  \
        _tile_loadd(A, pb, cols);                                                                         \
        _tile_loadd(B, src, 64);                                                                          \
        _tile_zero(C);                                                                                    \
        if (uns) _tile_dpbsud(C, A, B);                                                                   \
        else _tile_dpbssd(C, A, B);                                                                       \
        _tile_stored(C, c, 64);                                                                           \
    } while (0)
        if ((j & 1) == 0) AMX_ONE(0, 2, 4);
        else AMX_ONE(1, 3, 5);
#undef AMX_ONE
    }
}

/* the chunk's epilogue for m tokens from t0 (b0 a multiple of 4): token by token, its four lane
 * accumulators held in registers over the chunk's blocks, each block's s_b added to lane b mod 4 in
 * order of b (epi_block's operations) */
static inline __attribute__((always_inline)) void amx_epilogue(const int32_t *cb, float *acc, const uint8_t *scr,
                                                               const int kind, const qk_act *a, int t0, int m,
                                                               int b0, int nbk) {
    const int nb = a->nb, hm = qk_has_min(kind), q6 = kind == QK_Q6_K;
    __m512 dv[AMX_CHUNK], mv[AMX_CHUNK];
    __m512i sl[AMX_CHUNK / 2], sh[AMX_CHUNK / 2];
#pragma GCC unroll 8
    for (int k = 0; k < AMX_CHUNK; k++) { /* a short last chunk leaves the rest unused */
        dv[k] = mv[k] = _mm512_setzero_ps();
        if (k < AMX_CHUNK / 2) sl[k] = sh[k] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int k = 0; k < AMX_CHUNK; k++) {
        if (k >= nbk) break;
        block_dm(scr, kind, b0 + k, &dv[k], &mv[k]);
        if (q6 && k < AMX_CHUNK / 2) {
            const uint8_t *at = scr + qk_scale_at(kind, b0 + k);
            sl[k] = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)at));
            sh[k] = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(at + 16)));
        }
    }
    const size_t cs = 16 * (size_t)m; /* int32 between two blocks' C */
    for (int j = 0; j < m; j++) {
        __m512 l[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) l[c] = _mm512_load_ps(acc + 256 * c + 16 * j);
        const float *e = a->e + (size_t)(t0 + j) * nb + b0, *xs = a->s + (size_t)(t0 + j) * nb + b0;
        const int32_t *cj = cb + 16 * j;
#pragma GCC unroll 8
        for (int k = 0; k < AMX_CHUNK; k++) {
            if (k >= nbk) break;
            __m512i i = _mm512_load_si512((const void *)(cj + cs * k));
            if (q6)
                i = _mm512_add_epi32(_mm512_mullo_epi32(i, sl[k & 3]),
                                     _mm512_mullo_epi32(_mm512_load_si512((const void *)(cj + cs * (k + nbk))), sh[k & 3]));
            l[k & 3] = epi_block(l[k & 3], i, dv[k], mv[k], e[k], xs[k], hm);
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) _mm512_store_ps(acc + 256 * c + 16 * j, l[c]);
    }
}

/* one panel against m tokens from t0 (m = the configured tile rows); pf, pf2 as panel_i8's */
static inline __attribute__((always_inline)) void amx_panel(const uint8_t *pan, const qk_mat *w, const int kind,
                                                            const qk_act *a, int t0, int m, float *o, size_t ld,
                                                            int lo, int hi, const uint8_t *pf, const uint8_t *pf2) {
    const int nb = w->nb, ch = kind == QK_Q6_K ? AMX_CHUNK / 2 : AMX_CHUNK, nib = qk_nibbles(kind);
    const size_t bb = w->bb, cols = (size_t)a->cols;
    const uint8_t *scr = pan + w->qoff;
    const int8_t *p0 = a->q + (size_t)t0 * cols;
    _Alignas(64) float acc[4 * 256];
    _Alignas(64) int32_t cbuf[2][AMX_CHUNK * 256];
    _Alignas(64) uint8_t wbuf[2][AMX_CHUNK * 512];
    for (int c = 0; c < 4; c++) memset(acc + 256 * c, 0, sizeof(float) * 16 * (size_t)m);
    if (nib) amx_unpack(pan, bb, kind, 0, DS_MIN(ch, nb), wbuf[0]);
    int k = 0, pb0 = -1, pn = 0; /* the chunk whose epilogue is pending, and its size */
    for (int b0 = 0; b0 < nb; b0 += ch, k ^= 1) {
        int n = DS_MIN(ch, nb - b0);
        if (pf) prefetch_blocks(pf, pf2, w, kind, b0, b0 + n);
        amx_mul(pan, bb, kind, p0, cols, b0, n, wbuf[k], cbuf[k], m);
        if (nib && b0 + ch < nb) amx_unpack(pan, bb, kind, b0 + ch, DS_MIN(ch, nb - b0 - ch), wbuf[k ^ 1]);
        if (pb0 >= 0) amx_epilogue(cbuf[k ^ 1], acc, scr, kind, a, t0, m, pb0, pn);
        pb0 = b0, pn = n;
    }
    amx_epilogue(cbuf[k ^ 1], acc, scr, kind, a, t0, m, pb0, pn);
    for (int j = 0; j < m; j++) {
        __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(acc + 16 * j), _mm512_load_ps(acc + 256 + 16 * j)),
                                 _mm512_add_ps(_mm512_load_ps(acc + 512 + 16 * j), _mm512_load_ps(acc + 768 + 16 * j)));
        pstore(o + (size_t)(t0 + j) * ld, y, lo, hi);
    }
}

/* tokens t_begin..t_end-1 in groups of m (the tile rows) over the panels of rows r0..r1-1 */
static inline __attribute__((always_inline)) void amx_rows_kind(const qk_mat *w, const int kind, int r0, int r1,
                                                                const qk_act *a, int t_begin, int t_end, int m,
                                                                float *out, size_t ld, const qk_next *nx) {
    const uint8_t *n0 = nx ? nx->p[0] : NULL, *n1 = nx ? nx->p[1] : NULL;
    for (int pr = r0 / QK_PANEL * QK_PANEL; pr < r1; pr += QK_PANEL) {
        const uint8_t *pan = w->data + (size_t)(pr / QK_PANEL) * w->rb;
        const uint8_t *pf = pr + QK_PANEL < r1 ? pan + w->rb : n0;
        const uint8_t *pf2 = pr + 2 * QK_PANEL < r1 ? pan + 2 * w->rb : pr + QK_PANEL < r1 ? n0 : n1;
        if (!pf) pf2 = NULL;
        int lo = DS_MAX(r0, pr) - pr, hi = DS_MIN(r1, pr + QK_PANEL) - pr;
        for (int t0 = t_begin; t0 < t_end; t0 += m, pf = pf2 = NULL)
            amx_panel(pan, w, kind, a, t0, m, out + pr, ld, lo, hi, pf, pf2);
    }
}

typedef void (*amx_fn)(const qk_mat *w, int r0, int r1, const qk_act *a, int t_begin, int t_end, int m, float *out,
                       size_t ld, const qk_next *nx);
#define AMX_FN(K)                                                                                                   \
    static __attribute__((noinline)) void amx_rows_##K(const qk_mat *w, int r0, int r1, const qk_act *a,            \
                                                       int t_begin, int t_end, int m, float *out, size_t ld,        \
                                                       const qk_next *nx) {                                         \
        amx_rows_kind(w, K, r0, r1, a, t_begin, t_end, m, out, ld, nx);                                             \
    }
AMX_FN(0) AMX_FN(1) AMX_FN(2) AMX_FN(3) AMX_FN(4)
#undef AMX_FN
static const amx_fn amx_rows[5] = {amx_rows_0, amx_rows_1, amx_rows_2, amx_rows_3, amx_rows_4};
_Static_assert(QK_Q8_0 == 0 && QK_Q4_1 == 1 && QK_Q4_K == 2 && QK_Q6_K == 3 && QK_Q5_0 == 4,
               "amx_rows[] is indexed by kind");

static void amx_run(const qk_mat *w, int r0, int r1, const qk_act *a, int t_begin, int t_end, int m, float *out,
                    size_t ld, const qk_next *nx) {
    amx_config(w->kind, m);
    amx_rows[w->kind](w, r0, r1, a, t_begin, t_end, m, out, ld, nx);
    _tile_release();
}

/* groups of 16 tokens on the tiles, then the rest: on the tiles from qk_amx_min tokens, else on the
 * VNNI kernels (the same bits either way) */
static void rows_i8(const qk_mat *w, int r0, int r1, const qk_act *a, float *out, size_t ld, const qk_next *nx) {
    int T = a->T, full = T / 16 * 16, tail = T - full;
    if (T < qk_amx_min) {
        rows_i8_vnni(w, r0, r1, a, out, ld, nx);
        return;
    }
    if (full) amx_run(w, r0, r1, a, 0, full, 16, out, ld, nx);
    if (tail >= qk_amx_min) amx_run(w, r0, r1, a, full, T, tail, out, ld, full ? NULL : nx);
    else if (tail) {
        size_t nb = (size_t)a->nb;
        qk_act rest = {tail,
                       a->cols,
                       a->nb,
                       a->q + (size_t)full * a->cols,
                       a->e + full * nb,
                       a->s + full * nb,
                       a->ps + full * nb,
                       a->ph ? a->ph + full * nb : NULL,
                       a->ph2 ? a->ph2 + full * nb : NULL};
        rows_i8_vnni(w, r0, r1, &rest, out + (size_t)full * ld, ld, NULL);
    }
}

/* the roof on the tiles: n rounds of 4 independent 16 x 16 x 64 int8 tile multiplies */
static double peak_i8(long n) {
    tile_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) cfg_tile(&c, t, 16, 64);
    _tile_loadconfig(&c);
    _Alignas(64) int8_t src[1024];
    memset(src, 3, sizeof src);
    _tile_loadd(4, src, 64);
    _tile_loadd(5, src, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (long i = 0; i < n; i++) {
        _tile_dpbssd(0, 4, 5);
        _tile_dpbssd(1, 4, 5);
        _tile_dpbssd(2, 4, 5);
        _tile_dpbssd(3, 4, 5);
    }
    _Alignas(64) int32_t sink[256];
    _tile_stored(0, sink, 64);
    _tile_release();
    volatile int32_t keep = sink[0];
    (void)keep;
    return (double)n * 4 * 16 * 16 * 64;
}

const qk_kernels qk_amx = {.name = "avx512-amx", .isa = ISA_AMX, .rows_f32 = rows_f32, .rows_i8 = rows_i8,
                           .dot_rows = dot_rows, .axpy = axpy, .attend = attend, .attend_multi = attend_multi, .attend_multi_bf16 = attend_multi_bf16, .att_scores = att_scores, .att_pv = att_pv, .to_bf16 = to_bf16, .exp_sum = exp_sum, .max_scan = max_scan, .scale = scale, .first_eq = first_eq, .swiglu = swiglu,
                           .peak_i8 = peak_i8, .peak_what = "tdpbssd 16x16x64 tile (16384 MAC)", .quantize = quantize};
#endif
