/* kernels_avx2.c — the AVX2 + FMA path (built with -mavx2 -mfma -mf16c; see kernels_x86.inc). */
#if defined(__x86_64__)
#define QK_AVX512 0
#include "kernels_x86.inc"

const qk_kernels qk_avx2 = {"avx2", ISA_AVX2, rows_f32, rows_i8, dot_rows, axpy, attend, exp_sum,
                             peak_i8, "vpmaddubsw + vpaddw ymm (32 MAC)"};
#endif
