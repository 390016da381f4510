// kernels_cuda_launch.cuh — what the CUDA kernel files share (internal, C++ only): the last error's
// message, the stream every kernel goes to, recorded launches (kernels_cuda.cu keeps the recording
// and the graphs), and the CPU contract's exp on the device.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#define REC_ARGS 12

extern char kc_err[256];
extern cudaStream_t kc_stream;
int kc_check_launch(const char *what);
int kc_rec_on(void);
size_t kc_rec_arg(const void *p, size_t size, size_t align);
int kc_rec_push(const char *what, const void *fn, dim3 grid, dim3 block, const size_t *off, int n);

template <typename T> struct arg_of { typedef T type; };

// k<<<grid, block>>>(a...) on the kernels' stream, or recorded (the arguments converted to the
// kernel's parameter types first, so the recorded bytes are what the launch would pass)
template <typename... P>
static int launch(const char *what, void (*k)(P...), dim3 grid, dim3 block, typename arg_of<P>::type... a) {
    static_assert(sizeof...(P) <= REC_ARGS, "a kernel with more arguments than a record holds");
    if (!kc_rec_on()) {
        k<<<grid, block, 0, kc_stream>>>(a...);
        return kc_check_launch(what);
    }
    size_t off[] = {kc_rec_arg(&a, sizeof(P), alignof(P))...};
    return kc_rec_push(what, (const void *)k, grid, block, off, (int)sizeof...(P));
}

// qk_exp1 of kernels_cpu.h operation for operation (each rounding explicit, never contracted into a
// fused multiply-add): exp(t) for t <= 0, 0 below QK_EXP_LO
__device__ __forceinline__ float kc_exp1(float t) {
    if (!(t >= -87.33654f)) return 0.0f;
    float n = rintf(__fmul_rn(t, 1.44269504088896341f));
    float r = __fsub_rn(__fsub_rn(t, __fmul_rn(n, 0.693359375f)), __fmul_rn(n, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    float e = __fadd_rn(__fadd_rn(__fmul_rn(p, __fmul_rn(r, r)), r), 1.0f);
    return __fmul_rn(e, __int_as_float(((int)n + 127) * (1 << 23)));
}

// qk_silu: g / (1 + E) or g E / (1 + E), E = exp(-|g|)
__device__ __forceinline__ float kc_silu(float g) {
    float E = kc_exp1(-fabsf(g)), d = __fadd_rn(1.0f, E);
    return g >= 0.f ? __fdiv_rn(g, d) : __fdiv_rn(__fmul_rn(g, E), d);
}

// an fp16's bits as fp32 (exact)
__device__ __forceinline__ float kc_h2f(unsigned short h) { return __half2float(__ushort_as_half(h)); }
