/*
 * cpu.c - which instruction set the CPU kernels use (common.h).
 *
 * It only detects; the kernels keep a portable path for every op, so the
 * library builds for any architecture and runs on any x86-64.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"

/*
 * The best level the CPU and OS support, lowered (never raised) by the
 * environment variable MDS_CPU_ISA=generic|avx2|avx512, which the tests use
 * to run every path on one machine.  Read on each call: it is cheap next to
 * any kernel that asks.
 */
int mds_cpu_isa(void)
{
    int best = MDS_ISA_GENERIC;
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        best = MDS_ISA_AVX2;
    if (best == MDS_ISA_AVX2 && __builtin_cpu_supports("avx512f"))
        best = MDS_ISA_AVX512;
#endif
    const char *env = getenv("MDS_CPU_ISA");
    if (env) {
        int want = strcmp(env, "generic") == 0 ? MDS_ISA_GENERIC
                 : strcmp(env, "avx2") == 0    ? MDS_ISA_AVX2
                                               : MDS_ISA_AVX512;
        if (want < best)
            best = want;
    }
    return best;
}
