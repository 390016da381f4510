/* kernels_avx512.c — the AVX-512 VNNI path (built with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vnni; see kernels_x86.inc): vpdpbusd instead of maddubs + madd, 16-lane exact path. */
#if defined(__x86_64__)
#define QK_AVX512 1
#include "kernels_x86.inc"

const qk_kernels qk_avx512 = {"avx512-vnni", ISA_AVX512, rows_f32, rows_i8, dot_rows, axpy, attend, exp_sum,
                             peak_i8, "vpdpbusd zmm (64 MAC)"};
#endif
