/*
 * rmsnorm.c - CPU reference of RMSNorm over the last dimension (Megatron's
 * --normalization RMSNorm), forward (saving rstd) and backward.
 *
 * It does not implement a bias (RMSNorm has none), zero-centred weights
 * (--apply-layernorm-1p) or sequence-parallel weight-gradient reduction.
 */
#include <math.h>

#include "kernels.h"
#include "common.h"

#define RMS_CBLOCK 16

void rmsnorm_forward_cpu(float *out, float *rstd, const float *inp, const float *weight, int B, int T, int C,
                         float eps)
{
    OMP(parallel for schedule(dynamic, 16))
    for (long bt = 0; bt < (long)B * T; bt++) {
        const float *x = inp + (size_t)bt * C;
        float *o = out + (size_t)bt * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++)
            ss += (double)x[c] * x[c];
        float r = (float)(1.0 / sqrt(ss / C + (double)eps));
        for (int c = 0; c < C; c++)
            o[c] = x[c] * r * weight[c];
        rstd[bt] = r;
    }
}

/*
 * With n = x * rstd and g = dout * weight:
 *   dinp = rstd * (g - n * mean_c(g * n)),   dweight += sum_rows dout * n.
 * The weight gradient runs as a second loop in which each task owns a block
 * of channels and visits the rows in order (no atomics, thread-count
 * independent), as layernorm_backward_cpu does.
 */
void rmsnorm_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          const float *rstd, int B, int T, int C)
{
    long N = (long)B * T;
    OMP(parallel for schedule(dynamic, 16))
    for (long bt = 0; bt < N; bt++) {
        const float *x = inp + (size_t)bt * C;
        const float *d = dout + (size_t)bt * C;
        float *di = dinp + (size_t)bt * C;
        float r = rstd[bt];
        double sgn = 0.0;
        for (int c = 0; c < C; c++)
            sgn += (double)(d[c] * weight[c]) * (x[c] * r);
        float mgn = (float)(sgn / C);
        for (int c = 0; c < C; c++) {
            float n = x[c] * r;
            float g = d[c] * weight[c];
            di[c] += r * (g - n * mgn);
        }
    }
    int nblocks = (C + RMS_CBLOCK - 1) / RMS_CBLOCK;
    OMP(parallel for schedule(static))
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * RMS_CBLOCK;
        int c1 = c0 + RMS_CBLOCK < C ? c0 + RMS_CBLOCK : C;
        double dw[RMS_CBLOCK] = {0};
        for (long bt = 0; bt < N; bt++) {
            const float *x = inp + (size_t)bt * C;
            const float *d = dout + (size_t)bt * C;
            float r = rstd[bt];
            for (int c = c0; c < c1; c++)
                dw[c - c0] += (double)d[c] * (x[c] * r);
        }
        for (int c = c0; c < c1; c++)
            dweight[c] += (float)dw[c - c0];
    }
}
