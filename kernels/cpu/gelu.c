/*
 * gelu.c - CPU reference of GELU, tanh approximation, forward and backward.
 *
 * Why the tanh form: kernels.h (gelu_forward_cpu).  It does not provide the
 * exact erf GELU nor fuse the bias add (matmul adds the bias).
 */
#include <math.h>

#include "kernels.h"
#include "common.h"

/* sqrt(2/pi); as a float it equals Megatron's literal 0.79788456. */
#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBE 0.044715f

/* The loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at
 * load time (elementwise, so every clone gives the same bits); OpenMP hands
 * out blocks of GELU_BLOCK elements. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define GELU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GELU_CLONES
#endif
#define GELU_BLOCK 4096

/*
 * 0.5 (1 + tanh u) is computed as the logistic function 1 / (1 + exp(-2u)),
 * the same quantity, with mds_expf (common.h), so the loops vectorize: libm's
 * tanhf is a call per element.  Then out = x * sig and, with
 * 1 - tanh^2 u = 4 sig (1 - sig), the derivative below.
 */
GELU_CLONES
static void gelu_forward_block(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float sig = 1.0f / (1.0f + mds_expf(-2.0f * GELU_SCALE * (x + GELU_CUBE * x * x * x)));
        out[i] = x * sig;
    }
}

/* d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
 * u = sqrt(2/pi) (x + 0.044715 x^3): Megatron's bias_gelu_back, with
 * 0.5 (1 + tanh u) = sig and 0.5 (1 - tanh^2 u) = 2 sig (1 - sig). */
GELU_CLONES
static void gelu_backward_block(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float sig = 1.0f / (1.0f + mds_expf(-2.0f * GELU_SCALE * (x + GELU_CUBE * x * x * x)));
        float grad = sig + 2.0f * x * sig * (1.0f - sig) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        dinp[i] = dinp[i] + grad * dout[i];
    }
}

void gelu_forward_cpu(float *out, const float *inp, size_t N)
{
    size_t nb = (N + GELU_BLOCK - 1) / GELU_BLOCK;
    OMP(parallel for schedule(dynamic, 8))
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * GELU_BLOCK;
        gelu_forward_block(out + i0, inp + i0, N - i0 < GELU_BLOCK ? N - i0 : GELU_BLOCK);
    }
}

void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t N)
{
    size_t nb = (N + GELU_BLOCK - 1) / GELU_BLOCK;
    OMP(parallel for schedule(dynamic, 8))
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * GELU_BLOCK;
        gelu_backward_block(dinp + i0, inp + i0, dout + i0, N - i0 < GELU_BLOCK ? N - i0 : GELU_BLOCK);
    }
}
