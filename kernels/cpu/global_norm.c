/*
 * global_norm.c - CPU reference of the squared L2 norm of a gradient buffer
 * and the clipping factor derived from the global norm.
 *
 * It does not reduce across tensors or ranks (the caller does) and does not
 * scale the gradients (adamw_update_cpu takes the factor as grad_scale).
 */
#include "kernels.h"
#include "common.h"

/* A fixed number of blocks with fixed boundaries, each summed in double as 8
 * interleaved partial sums combined in order (so the loop vectorizes), then
 * the block sums in order: the same value for any thread count. */
#define GN_BLOCKS 64

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static double gn_block(const float *x, size_t n)
{
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += (double)x[i + j] * x[i + j];
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

void global_norm_squared_cpu(double *out, const float *x, size_t N)
{
    double part[GN_BLOCKS];
    OMP(parallel for schedule(dynamic, 1))
    for (int k = 0; k < GN_BLOCKS; k++) {
        size_t i0 = N / GN_BLOCKS * k + (N % GN_BLOCKS < (size_t)k ? N % GN_BLOCKS : (size_t)k);
        size_t i1 = i0 + N / GN_BLOCKS + ((size_t)k < N % GN_BLOCKS);
        part[k] = gn_block(x + i0, i1 - i0);
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
