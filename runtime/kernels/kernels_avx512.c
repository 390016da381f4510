/* kernels_avx512.c — the AVX-512 VNNI path (built with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vnni; see kernels_x86.inc): vpdpbusd instead of maddubs + madd, 16-lane exact path. */
#if defined(__x86_64__)
#define QK_AVX512 1
#include "kernels_x86.inc"

const qk_kernels qk_avx512 = {.name = "avx512-vnni", .isa = ISA_AVX512, .rows_f32 = rows_f32, .rows_i8 = rows_i8,
                             .dot_rows = dot_rows, .axpy = axpy, .attend = attend, .attend_multi = attend_multi, .attend_multi_bf16 = attend_multi_bf16, .att_scores = att_scores, .att_pv = att_pv, .to_bf16 = to_bf16, .exp_sum = exp_sum, .max_scan = max_scan, .scale = scale, .first_eq = first_eq, .swiglu = swiglu,
                             .peak_i8 = peak_i8, .peak_what = "vpdpbusd zmm (64 MAC)", .quantize = quantize};
#endif
