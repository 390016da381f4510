/* cpu_features.h — which SIMD kernel paths this CPU can run, read at run time (cpuid through
 * libgcc, which also checks that the OS saves the wider registers), so one build runs on every
 * x86-64 machine and picks the fastest path it supports. */
#ifndef DS_CPU_FEATURES_H
#define DS_CPU_FEATURES_H

#include <stddef.h>

typedef enum {
    ISA_SCALAR = 0,  /* portable C, the reference every other path must match */
    ISA_AVX2 = 1,    /* AVX2 + FMA + F16C: int8 dots with maddubs/madd */
    ISA_AVX512 = 2,  /* AVX-512 F/BW/VL + VNNI: int8 dots with vpdpbusd */
    ISA_AMX = 3,     /* AVX-512 VNNI + AMX-INT8 tiles (the OS must grant them): batched int8 dots on tiles */
    ISA_COUNT
} cpu_isa;

int cpu_isa_supported(cpu_isa isa);
cpu_isa cpu_isa_best(void);
const char *cpu_isa_name(cpu_isa isa);
/* "auto" -> the best supported; a path name -> that path if this CPU runs it; else -1 + message */
int cpu_isa_parse(const char *name, cpu_isa *out);
/* "AMD EPYC 7B13 (avx2 fma f16c; OpenBLAS Zen kernels)" — the CPU model from /proc/cpuinfo, the
 * flags that matter and the kernels OpenBLAS chose */
void cpu_describe(char *buf, size_t n);
/* the logical CPUs this process may run on and how many distinct physical cores (package, core_id
 * in sysfs) they sit on: 2 logical on 1 core means SMT siblings sharing one core's vector pipes.
 * Either is -1 where the system does not say. (A VM shows its virtual topology, not the host's.) */
void cpu_topology(int *logical, int *cores);
/* OpenBLAS picks its kernels from the CPU model when it loads; a model newer than the library
 * falls back to SSE3 "Prescott" kernels (seen: an Intel Xeon family 6 model 207 with 0.3.21, 6x
 * slower sgemm than its AVX-512 ones). Returns the OPENBLAS_CORETYPE that fixes it here ("SkylakeX",
 * "Haswell"), or NULL when the choice is already a wide one, the user set the variable, or the CPU
 * has no AVX2. The choice only takes effect in a process started with the variable set. */
const char *cpu_blas_core_override(void);
/* 1 if an OpenBLAS core name is one whose kernels use AVX2 or AVX-512 (Haswell, Zen, SkylakeX, ...) */
int cpu_blas_core_is_wide(const char *name);

#endif
