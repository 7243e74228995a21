/*
 * loss.c - CPU reference of the masked-mean loss reduction and of the
 * gradient that seeds the backward (kernels.h, "loss").
 *
 * The sums run in index order in double, one accumulator each, so they are
 * the same for any thread count; they are O(B T), next to nothing beside the
 * (B, T, V) cross-entropy, and are not parallelised.
 */
#include "kernels.h"
#include "common.h"

void loss_reduce_cpu(double *out, const float *losses, const float *mask, size_t N)
{
    double ls = 0.0, nt = 0.0;
    if (losses)
        for (size_t i = 0; i < N; i++)
            ls += (double)losses[i];
    if (mask)
        for (size_t i = 0; i < N; i++)
            nt += (double)mask[i];
    else
        nt = (double)N;
    out[0] = ls;
    out[1] = nt;
}

void loss_grad_cpu(float *dlosses, const float *mask, float inv, size_t N)
{
    OMP(parallel for schedule(static))
    for (size_t i = 0; i < N; i++)
        dlosses[i] = mask[i] * inv;
}
