/*
 * layernorm.cu - CUDA LayerNorm over the last dimension, forward (saving
 * mean and rstd) and backward.
 *
 * One warp per row (MDS_CU_ROWS a block); the statistics are two passes in
 * double with the fixed-order mds_cu_warp_sum, so they match the CPU's
 * in-order double sums up to double rounding.  The weight gradients are
 * column sums in double over fixed chunks of rows (common.cuh's
 * mds_cu_colsum): deterministic, no atomics.
 */
#include <math.h>

#include "common.cuh"

__global__ static void layernorm_forward_kernel(void *out, int od, float *mean, float *rstd, const float *inp,
                                                const float *weight, const float *bias, size_t N, int C, float eps,
                                                int dt)
{
    size_t bt = MDS_CU_ROW_OF_WARP();
    int lane = threadIdx.x & 31;
    if (bt >= N)
        return;
    const float *x = inp + bt * C;
    double s = 0.0;
    for (int c = lane; c < C; c += 32)
        s += x[c];
    double mu = mds_cu_warp_sum<double>(s) / C;
    double ss = 0.0;
    for (int c = lane; c < C; c += 32) {
        double d = x[c] - mu;
        ss += d * d;
    }
    ss = mds_cu_warp_sum<double>(ss);
    float m = (float)mu;
    float r = (float)(1.0 / sqrt(ss / C + (double)eps));
    for (int c = lane; c < C; c += 32)
        mds_cu_put(out, od, bt * C + c, (x[c] - m) * r * weight[c] + bias[c], dt);
    if (lane == 0) {
        mean[bt] = m;
        rstd[bt] = r;
    }
}

void layernorm_forward_cuda(void *out, int out_dt, float *mean, float *rstd, const float *inp, const float *weight,
                            const float *bias, int B, int T, int C, float eps)
{
    size_t N = (size_t)B * T;
    if (!N) return;
    layernorm_forward_kernel<<<mds_cu_row_blocks(N), 32 * MDS_CU_ROWS>>>(out, out_dt, mean, rstd, inp, weight, bias,
                                                                         N, C, eps, mds_cuda_compute_dtype());
    MDS_CU_LAUNCHED("layernorm_forward");
}

__global__ static void layernorm_backward_dinp_kernel(void *dinp, int ds, const void *dout, int dd, const float *inp,
                                                      const float *weight, const float *mean, const float *rstd,
                                                      size_t N, int C, int dt)
{
    size_t bt = MDS_CU_ROW_OF_WARP();
    int lane = threadIdx.x & 31;
    if (bt >= N)
        return;
    const float *x = inp + bt * C;
    float m = mean[bt], r = rstd[bt];
    double sg = 0.0, sgn = 0.0;
    for (int c = lane; c < C; c += 32) {
        float n = (x[c] - m) * r;
        float g = mds_load(dd, dout, bt * C + c) * weight[c];
        sg += g;
        sgn += (double)g * n;
    }
    sg = mds_cu_warp_sum<double>(sg);
    sgn = mds_cu_warp_sum<double>(sgn);
    float mg = (float)(sg / C), mgn = (float)(sgn / C);
    for (int c = lane; c < C; c += 32) {
        float n = (x[c] - m) * r;
        float g = mds_load(dd, dout, bt * C + c) * weight[c];
        size_t i = bt * C + c;   /* (added into as stored: ds) */
        mds_cu_put(dinp, ds, i, mds_load(ds, dinp, i) + r * (g - mg - n * mgn), dt);
    }
}

/* the weight gradients' terms, as the CPU forms them: d * ((x - mean) * rstd), d */
struct ln_weight_terms {
    const void *dout;
    const float *inp, *mean, *rstd;
    int C, dd;
    __device__ void operator()(long bt, int c, double *s) const
    {
        float d = mds_load(dd, dout, (size_t)bt * C + c);
        s[0] += (double)d * ((inp[(size_t)bt * C + c] - mean[bt]) * rstd[bt]);
        s[1] += d;
    }
    __device__ void row8(long bt, int c, double (&s)[8][2]) const
    {
        float d[8], x[8];
        mds_cu_load8(d, dd, dout, (size_t)bt * C + c);
        mds_cu_load8(x, MDS_F32, inp, (size_t)bt * C + c);
        float m = mean[bt], r = rstd[bt];
        for (int e = 0; e < 8; e++) {
            s[e][0] += (double)d[e] * ((x[e] - m) * r);
            s[e][1] += d[e];
        }
    }
    int vec8(void) const { return mds_cu_al16(dout) && mds_cu_al16(inp); }
};

void layernorm_backward_cuda(void *dinp, int dinp_dt, float *dweight, float *dbias, const void *dout, int dout_dt,
                             const float *inp, const float *weight, const float *mean, const float *rstd, int B, int T,
                             int C)
{
    long N = (long)B * T;
    if (!N) return;
    layernorm_backward_dinp_kernel<<<mds_cu_row_blocks((size_t)N), 32 * MDS_CU_ROWS>>>(
        dinp, dinp_dt, dout, dout_dt, inp, weight, mean, rstd, (size_t)N, C, mds_cuda_compute_dtype());
    MDS_CU_LAUNCHED("layernorm_backward");
    mds_cu_colsum<2>(dweight, dbias, ln_weight_terms{dout, inp, mean, rstd, C, dout_dt}, N, C,
                     "layernorm_backward (weights)");
}
