/*
 * swiglu.c - CPU reference of Megatron's SwiGLU (gated linear unit with
 * SiLU, --swiglu): out = silu(gate) * up from FC1's [gate | up] rows,
 * forward and backward.
 *
 * It does not fuse the bias (matmul adds it) or implement other GLU
 * variants (GEGLU, ReGLU).
 */
#include "kernels.h"
#include "common.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define SWIGLU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SWIGLU_CLONES
#endif

/* sigmoid through mds_expf (common.h) so the loops vectorize; elementwise,
 * so every instruction-set clone gives the same bits. */
SWIGLU_CLONES
static void swiglu_row(float *o, const float *gate, const float *up, int F)
{
    for (int i = 0; i < F; i++) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + mds_expf(-g));
        o[i] = g * sig * up[i];
    }
}

/* d/dgate = up * sig * (1 + g (1 - sig)),  d/dup = silu(g). */
SWIGLU_CLONES
static void swiglu_row_backward(float *dgate, float *dup, const float *gate, const float *up, const float *d, int F)
{
    for (int i = 0; i < F; i++) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + mds_expf(-g));
        dgate[i] = dgate[i] + d[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
        dup[i] = dup[i] + d[i] * g * sig;
    }
}

void swiglu_forward_cpu(float *out, const float *inp, size_t N, int F)
{
    OMP(parallel for schedule(static))
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * 2 * (size_t)F;
        swiglu_row(out + n * (size_t)F, x, x + F, F);
    }
}

void swiglu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t N, int F)
{
    OMP(parallel for schedule(static))
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * 2 * (size_t)F;
        float *dx = dinp + n * 2 * (size_t)F;
        swiglu_row_backward(dx, dx + F, x, x + F, dout + n * (size_t)F, F);
    }
}
