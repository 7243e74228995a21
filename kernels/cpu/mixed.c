/*
 * mixed.c - CPU reference of the mixed-precision helpers: rounding stored
 * tensors to bf16/fp16 (the CPU's emulation of 16-bit storage) and the
 * unscale-and-check of the main gradients.
 *
 * It does not do arithmetic in 16 bits (nothing does: every kernel computes
 * in fp32 and only what it stores is rounded) nor decide what to round (the
 * model does).
 */
#include <math.h>

#include "kernels.h"
#include "common.h"
#include "dtype.h"

void round_to_cpu(float *x, size_t N, int dtype)
{
    if (dtype == MDS_BF16) {
        OMP(parallel for schedule(static))
        for (size_t i = 0; i < N; i++)
            x[i] = mds_bf16_to_f32(mds_f32_to_bf16(x[i]));
    } else if (dtype == MDS_F16) {
        OMP(parallel for schedule(static))
        for (size_t i = 0; i < N; i++)
            x[i] = mds_f16_to_f32(mds_f32_to_f16(x[i]));
    }
}

void unscale_check_cpu(double *nonfinite, float *x, size_t N, float factor)
{
    size_t bad = 0;
    OMP(parallel for schedule(static) reduction(+ : bad))
    for (size_t i = 0; i < N; i++) {
        x[i] *= factor;
        bad += !isfinite(x[i]);
    }
    *nonfinite = (double)bad;
}
