/* kernels_avx2.c — the AVX2 + FMA path (built with -mavx2 -mfma -mf16c; see kernels_x86.inc). */
#if defined(__x86_64__)
#define QK_AVX512 0
#include "kernels_x86.inc"

const qk_kernels qk_avx2 = {.name = "avx2", .isa = ISA_AVX2, .rows_f32 = rows_f32, .rows_i8 = rows_i8,
                             .dot_rows = dot_rows, .axpy = axpy, .attend = attend, .attend_multi = attend_multi, .attend_multi_bf16 = attend_multi_bf16, .att_scores = att_scores, .att_pv = att_pv, .to_bf16 = to_bf16, .exp_sum = exp_sum, .max_scan = max_scan, .scale = scale, .first_eq = first_eq, .swiglu = swiglu,
                             .peak_i8 = peak_i8, .peak_what = "vpmaddubsw + vpaddw ymm (32 MAC)", .quantize = quantize};
#endif
