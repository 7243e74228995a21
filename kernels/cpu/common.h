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

/* mds_expf, mds_adamw_elem and the cross-entropy row formulas: one copy for
 * both backends. */
#include "formulas.h"

/* Instruction-set levels, ordered: a kernel may use any level <= the one
 * mds_cpu_isa() returns (cpu.c). */
enum { MDS_ISA_GENERIC = 0, MDS_ISA_AVX2 = 1, MDS_ISA_AVX512 = 2 };
int mds_cpu_isa(void);

#endif
