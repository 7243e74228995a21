/*
 * common.h - private helpers of the CPU reference kernels (not installed,
 * not included by anything outside kernels/cpu/).
 *
 * OMP(...) emits `#pragma omp ...` when OpenMP is on and nothing otherwise,
 * so a build without OpenMP stays free of -Wunknown-pragmas warnings.
 * Kernels use only `parallel for` (static or dynamic schedules) over
 * independent outputs, never reductions or atomics: which thread computes an
 * output never changes how it is computed, and that is what keeps results
 * bitwise independent of the thread count.  Dynamic schedules only help when
 * another process shares a core.
 */
#ifndef MDS_KERNELS_CPU_COMMON_H
#define MDS_KERNELS_CPU_COMMON_H

#ifdef _OPENMP
#define OMP_PRAGMA_(x) _Pragma(#x)
#define OMP(x) OMP_PRAGMA_(omp x)
#else
#define OMP(x)
#endif

/*
 * exp(x) in float, branch-free so that loops over it vectorize (libm's
 * expf is a call per element): Cody-Waite reduction x = n ln2 + r, |r| <=
 * ln2/2, Cephes' degree-6 polynomial for e^r, then 2^n by exponent
 * arithmetic.  Relative error within 2 ulp of expf; 0 below -87.3 (no
 * subnormal results), +inf above 88.72, NaN stays NaN.  Plain arithmetic
 * under the build's -ffp-contract=off, so every vectorisation of it gives
 * the same bits.
 */
static inline float mds_expf(float x)
{
    float xc = x < -87.3f ? -87.3f : (x > 88.72f ? 88.72f : x);
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    union { float f; int i; } u = { y };
    u.i += (int)n * (1 << 23);
    y = x > 88.72f ? __builtin_inff() : u.f;
    y = x < -87.3f ? 0.0f : y;
    return x != x ? x : y;
}

/* Instruction-set levels, ordered: a kernel may use any level <= the one
 * mds_cpu_isa() returns (cpu.c). */
enum { MDS_ISA_GENERIC = 0, MDS_ISA_AVX2 = 1, MDS_ISA_AVX512 = 2 };
int mds_cpu_isa(void);

#endif
