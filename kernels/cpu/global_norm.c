/*
 * global_norm.c - CPU reference of the squared L2 norm of a gradient buffer
 * and the clipping factor derived from the global norm.
 *
 * It does not reduce across tensors or ranks (the caller does) and does not
 * scale the gradients (adamw_update_cpu takes the factor as grad_scale).
 */
#include "kernels.h"
#include "common.h"

/* A fixed number of blocks with fixed boundaries, each summed in order in
 * double, then the block sums in order: the same value for any thread count. */
#define GN_BLOCKS 64

void global_norm_squared_cpu(double *out, const float *x, size_t N)
{
    double part[GN_BLOCKS];
    OMP(parallel for schedule(static))
    for (int k = 0; k < GN_BLOCKS; k++) {
        size_t i0 = N / GN_BLOCKS * k + (N % GN_BLOCKS < (size_t)k ? N % GN_BLOCKS : (size_t)k);
        size_t i1 = i0 + N / GN_BLOCKS + ((size_t)k < N % GN_BLOCKS);
        double s = 0.0;
        for (size_t i = i0; i < i1; i++)
            s += (double)x[i] * x[i];
        part[k] = s;
    }
    double s = 0.0;
    for (int k = 0; k < GN_BLOCKS; k++)
        s += part[k];
    *out = s;
}

/* Megatron's clip_grad_norm_: clip_coeff = max_norm / (total_norm + 1e-6),
 * applied only when below 1. */
float global_norm_clip_scale(float norm, float clip_grad)
{
    if (clip_grad <= 0.0f)
        return 1.0f;
    float coeff = clip_grad / (norm + 1.0e-6f);
    return coeff < 1.0f ? coeff : 1.0f;
}
