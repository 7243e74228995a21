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

void gelu_forward_cpu(float *out, const float *inp, size_t N)
{
    OMP(parallel for schedule(static))
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + GELU_CUBE * x * x * x)));
    }
}

/* d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
 * u = sqrt(2/pi) (x + 0.044715 x^3): Megatron's bias_gelu_back, exactly. */
void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t N)
{
    OMP(parallel for schedule(static))
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float th = tanhf(GELU_SCALE * (x + GELU_CUBE * x * x * x));
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        dinp[i] += grad * dout[i];
    }
}
