#include "cpu_features.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "common.h"

char *openblas_get_corename(void); /* OpenBLAS extension */

#if defined(__x86_64__) || defined(__i386__)
/* F16C from cpuid leaf 1 (ECX bit 29): not every compiler's __builtin_cpu_supports knows "f16c" */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}
#endif

#if defined(__x86_64__)
/* AMX-TILE and AMX-INT8 (cpuid leaf 7 EDX bits 24, 25), the OS saving tile state (XCR0 bits 17,
 * 18), and Linux's permission for this process to use it (arch_prctl ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA; without it the first tile instruction faults). Asked once; the answer holds
 * for every thread of the process. */
static int amx_usable(void) {
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    unsigned a, b, c, d, lo, hi;
    v = __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1) /* OSXSAVE */ && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
        (d >> 24 & 1) && (d >> 25 & 1);
    if (v) {
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        v = (lo >> 17 & 1) && (lo >> 18 & 1) && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18) == 0;
    }
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    return v;
}
#endif
int cpu_isa_supported(cpu_isa isa) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    switch (isa) {
    case ISA_SCALAR: return 1;
    case ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case ISA_AVX512:
        return cpu_isa_supported(ISA_AVX2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#if defined(__x86_64__)
    case ISA_AMX: return cpu_isa_supported(ISA_AVX512) && amx_usable();
#endif
    default: return 0;
    }
#else
    return isa == ISA_SCALAR;
#endif
}

cpu_isa cpu_isa_best(void) {
    for (int i = ISA_COUNT - 1; i > 0; i--)
        if (cpu_isa_supported((cpu_isa)i)) return (cpu_isa)i;
    return ISA_SCALAR;
}

static const char *const NAMES[ISA_COUNT] = {"scalar", "avx2", "avx512-vnni", "avx512-amx"};

const char *cpu_isa_name(cpu_isa isa) { return isa >= 0 && isa < ISA_COUNT ? NAMES[isa] : "?"; }

int cpu_isa_parse(const char *name, cpu_isa *out) {
    if (!name || !*name || strcmp(name, "auto") == 0) {
        *out = cpu_isa_best();
        return 0;
    }
    for (int i = 0; i < ISA_COUNT; i++)
        if (strcmp(name, NAMES[i]) == 0) {
            if (!cpu_isa_supported((cpu_isa)i)) {
                ds_error("kernel path '%s': this CPU does not support it (best here: %s)", name, NAMES[cpu_isa_best()]);
                return -1;
            }
            *out = (cpu_isa)i;
            return 0;
        }
    ds_error("unknown kernel path '%s' (known: auto, scalar, avx2, avx512-vnni, avx512-amx)", name);
    return -1;
}

void cpu_describe(char *buf, size_t n) {
    char model[128] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                const char *p = strchr(line, ':');
                if (p) {
                    p++;
                    while (*p == ' ' || *p == '\t') p++;
                    snprintf(model, sizeof model, "%.*s", (int)strcspn(p, "\n"), p);
                }
                break;
            }
        fclose(f);
    }
    char flags[160] = "";
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const char *names[] = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni"};
    int has[] = {__builtin_cpu_supports("avx2"),    __builtin_cpu_supports("fma"),      has_f16c(),
                 __builtin_cpu_supports("avx512f"), __builtin_cpu_supports("avx512bw"), __builtin_cpu_supports("avx512vl"),
                 __builtin_cpu_supports("avx512vnni")};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (has[i]) snprintf(flags + strlen(flags), sizeof flags - strlen(flags), "%s%s", *flags ? " " : "", names[i]);
    if (cpu_isa_supported(ISA_AMX)) snprintf(flags + strlen(flags), sizeof flags - strlen(flags), " amx-int8");
#endif
    snprintf(buf, n, "%s (%s; OpenBLAS %s kernels)", model, *flags ? flags : "no SIMD extensions used",
             openblas_get_corename());
}

/* OpenBLAS's names for the x86 cores whose kernels use AVX2 or AVX-512 */
static const char *const BLAS_WIDE[] = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"};

int cpu_blas_core_is_wide(const char *name) {
    for (size_t i = 0; i < sizeof BLAS_WIDE / sizeof *BLAS_WIDE; i++)
        if (name && strcasecmp(name, BLAS_WIDE[i]) == 0) return 1;
    return 0;
}

const char *cpu_blas_core_override(void) {
#if defined(__x86_64__) || defined(__i386__)
    if (getenv("OPENBLAS_CORETYPE") || !cpu_isa_supported(ISA_AVX2)) return NULL;
    if (cpu_blas_core_is_wide(openblas_get_corename())) return NULL;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512cd")
               ? "SkylakeX"
               : "Haswell";
#else
    return NULL;
#endif
}

static int read_int_file(const char *path) {
    FILE *f = fopen(path, "r");
    int v = -1;
    if (f) {
        if (fscanf(f, "%d", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

void cpu_topology(int *logical, int *cores) {
    cpu_set_t set;
    *logical = *cores = -1;
    if (sched_getaffinity(0, sizeof set, &set)) return;
    int n = 0, nc = 0, seen[CPU_SETSIZE][2];
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        n++;
        char p[128];
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
        int core = read_int_file(p);
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
        int pkg = read_int_file(p);
        if (core < 0 || pkg < 0) nc = -1;
        if (nc < 0) continue;
        int dup = 0;
        for (int i = 0; i < nc && !dup; i++) dup = seen[i][0] == pkg && seen[i][1] == core;
        if (!dup) seen[nc][0] = pkg, seen[nc][1] = core, nc++;
    }
    *logical = n;
    *cores = nc;
}
