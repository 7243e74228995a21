/*
 * layernorm.c - CPU reference of LayerNorm over the last dimension, forward
 * (saving mean and rstd) and backward.
 *
 * It does not implement RMSNorm or sequence-parallel weight-gradient
 * reduction (the caller all-reduces dweight/dbias when SP splits the rows).
 */
#include <math.h>

#include "kernels.h"
#include "common.h"

#define LN_CBLOCK 16

void layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int B, int T, int C, float eps)
{
    OMP(parallel for schedule(dynamic, 16))
    for (long bt = 0; bt < (long)B * T; bt++) {
        const float *x = inp + (size_t)bt * C;
        float *o = out + (size_t)bt * C;
        /* Two passes in double: exact enough to serve as the oracle for
         * single-pass float kernels, and cheap next to the matmuls. */
        double s = 0.0;
        for (int c = 0; c < C; c++)
            s += x[c];
        double mu = s / C;
        double ss = 0.0;
        for (int c = 0; c < C; c++) {
            double d = x[c] - mu;
            ss += d * d;
        }
        float m = (float)mu;
        float r = (float)(1.0 / sqrt(ss / C + (double)eps));
        for (int c = 0; c < C; c++)
            o[c] = (x[c] - m) * r * weight[c] + bias[c];
        mean[bt] = m;
        rstd[bt] = r;
    }
}

/*
 * With n = (x - mean) * rstd and g = dout * weight:
 *   dinp = rstd * (g - mean_c(g) - n * mean_c(g * n)),
 *   dweight += sum_rows dout * n,  dbias += sum_rows dout.
 * dinp is per row; the weight gradients sum over rows, so they run as a
 * second loop in which each task owns a block of channels and visits the
 * rows in order (no atomics, thread-count independent).
 */
void layernorm_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int B, int T, int C)
{
    long N = (long)B * T;
    OMP(parallel for schedule(dynamic, 16))
    for (long bt = 0; bt < N; bt++) {
        const float *x = inp + (size_t)bt * C;
        const float *d = dout + (size_t)bt * C;
        float *di = dinp + (size_t)bt * C;
        float m = mean[bt], r = rstd[bt];
        double sg = 0.0, sgn = 0.0;
        for (int c = 0; c < C; c++) {
            float n = (x[c] - m) * r;
            float g = d[c] * weight[c];
            sg += g;
            sgn += (double)g * n;
        }
        float mg = (float)(sg / C), mgn = (float)(sgn / C);
        for (int c = 0; c < C; c++) {
            float n = (x[c] - m) * r;
            float g = d[c] * weight[c];
            di[c] += r * (g - mg - n * mgn);
        }
    }
    int nblocks = (C + LN_CBLOCK - 1) / LN_CBLOCK;
    OMP(parallel for schedule(static))
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * LN_CBLOCK;
        int c1 = c0 + LN_CBLOCK < C ? c0 + LN_CBLOCK : C;
        double dw[LN_CBLOCK] = {0}, db[LN_CBLOCK] = {0};
        for (long bt = 0; bt < N; bt++) {
            const float *x = inp + (size_t)bt * C;
            const float *d = dout + (size_t)bt * C;
            float m = mean[bt], r = rstd[bt];
            for (int c = c0; c < c1; c++) {
                dw[c - c0] += (double)d[c] * ((x[c] - m) * r);
                db[c - c0] += d[c];
            }
        }
        for (int c = c0; c < c1; c++) {
            dweight[c] += (float)dw[c - c0];
            dbias[c] += (float)db[c - c0];
        }
    }
}
