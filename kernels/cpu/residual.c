/*
 * residual.c - CPU reference of the residual add, forward and backward.
 *
 * It does not fuse dropout or a bias (hidden-dropout is 0 in tests).
 */
#include "kernels.h"
#include "common.h"

void residual_forward_cpu(float *out, const float *inp1, const float *inp2, size_t N)
{
    OMP(parallel for schedule(static))
    for (size_t i = 0; i < N; i++)
        out[i] = inp1[i] + inp2[i];
}

void residual_backward_cpu(float *dinp1, float *dinp2, const float *dout, size_t N)
{
    OMP(parallel for schedule(static))
    for (size_t i = 0; i < N; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}
