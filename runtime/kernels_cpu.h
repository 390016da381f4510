/* kernels_cpu.h — fused quantized matrix x activations kernels for the CPU backend.
 *
 * Q4_1 and Q8_0 matrices are repacked once (on first use) so that a row's quant bytes are
 * contiguous and its block scales are fp32 arrays:
 *   Q4_1 row: qs[nb][16] | d[nb] | m[nb]        Q8_0 row: qs[nb][32] | d[nb]
 * The kernels then dot the integer codes with fp32 activations directly, without writing
 * dequantized weights anywhere:
 *   Q4_1: y = sum_b sum_j (d_b q_bj) x_bj + sum_b m_b (sum_j x_bj)     Q8_0: y = sum_b d_b (sum_j q_bj x_bj)
 * A block's codes are converted once and reused for every token of the batch, and every
 * (row, token) result is accumulated in the same order whatever the batch size. */
#ifndef DS_KERNELS_CPU_H
#define DS_KERNELS_CPU_H

#include <stddef.h>

#include "model.h"

/* 1 when this build has a fused kernel for the type (AVX2+FMA or AVX-512). */
int qk_supported(uint32_t type);
/* The repacked copy of w (caller frees), or NULL with a message. */
void *qk_pack(const qmat *w);
/* Per-token block sums of x[T][cols] into xsum[T][cols/32] (Q4_1 needs them). */
void qk_block_sums(const float *x, int T, int cols, float *xsum);
/* out[t*ld + r] = W[r] . x[t] for rows r0 <= r < r1 and all T tokens. */
void qk_rows(const qmat *w, int r0, int r1, const float *x, const float *xsum, int T, float *out, size_t ld);

#endif
