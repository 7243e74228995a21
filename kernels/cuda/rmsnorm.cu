/*
 * rmsnorm.cu - CUDA RMSNorm over the last dimension, forward (saving rstd)
 * and backward; the structure of layernorm.cu (a warp per row with
 * fixed-order double sums; dweight a column sum in double over fixed
 * chunks of rows, common.cuh's mds_cu_colsum).  No bias, no zero-centred weights.
 */
#include <math.h>

#include "common.cuh"

__global__ static void rmsnorm_forward_kernel(void *out, int od, float *rstd, const float *inp, const float *weight,
                                              size_t N, int C, float eps, int dt)
{
    size_t bt = MDS_CU_ROW_OF_WARP();
    int lane = threadIdx.x & 31;
    if (bt >= N)
        return;
    const float *x = inp + bt * C;
    double ss = 0.0;
    for (int c = lane; c < C; c += 32)
        ss += (double)x[c] * x[c];
    ss = mds_cu_warp_sum<double>(ss);
    float r = (float)(1.0 / sqrt(ss / C + (double)eps));
    for (int c = lane; c < C; c += 32)
        mds_cu_put(out, od, bt * C + c, x[c] * r * weight[c], dt);
    if (lane == 0)
        rstd[bt] = r;
}

void rmsnorm_forward_cuda(void *out, int out_dt, float *rstd, const float *inp, const float *weight, int B, int T,
                          int C, float eps)
{
    size_t N = (size_t)B * T;
    if (!N) return;
    rmsnorm_forward_kernel<<<mds_cu_row_blocks(N), 32 * MDS_CU_ROWS>>>(out, out_dt, rstd, inp, weight, N, C, eps,
                                                                       mds_cuda_compute_dtype());
    MDS_CU_LAUNCHED("rmsnorm_forward");
}

__global__ static void rmsnorm_backward_dinp_kernel(void *dinp, int ds, const void *dout, int dd, const float *inp,
                                                    const float *weight, const float *rstd, size_t N, int C, int dt)
{
    size_t bt = MDS_CU_ROW_OF_WARP();
    int lane = threadIdx.x & 31;
    if (bt >= N)
        return;
    const float *x = inp + bt * C;
    float r = rstd[bt];
    double sgn = 0.0;
    for (int c = lane; c < C; c += 32)
        sgn += (double)(mds_load(dd, dout, bt * C + c) * weight[c]) * (x[c] * r);
    sgn = mds_cu_warp_sum<double>(sgn);
    float mgn = (float)(sgn / C);
    for (int c = lane; c < C; c += 32) {
        float n = x[c] * r;
        float g = mds_load(dd, dout, bt * C + c) * weight[c];
        size_t i = bt * C + c;   /* (added into as stored: ds) */
        mds_cu_put(dinp, ds, i, mds_load(ds, dinp, i) + r * (g - n * mgn), dt);
    }
}

/* the weight gradient's term, as the CPU forms it: d * (x * rstd) */
struct rms_weight_term {
    const void *dout;
    const float *inp, *rstd;
    int C, dd;
    __device__ void operator()(long bt, int c, double *s) const
    {
        s[0] += (double)mds_load(dd, dout, (size_t)bt * C + c) * (inp[(size_t)bt * C + c] * rstd[bt]);
    }
    __device__ void row8(long bt, int c, double (&s)[8][1]) const
    {
        float d[8], x[8];
        mds_cu_load8(d, dd, dout, (size_t)bt * C + c);
        mds_cu_load8(x, MDS_F32, inp, (size_t)bt * C + c);
        float r = rstd[bt];
        for (int e = 0; e < 8; e++)
            s[e][0] += (double)d[e] * (x[e] * r);
    }
    int vec8(void) const { return mds_cu_al16(dout) && mds_cu_al16(inp); }
};

void rmsnorm_backward_cuda(void *dinp, int dinp_dt, float *dweight, const void *dout, int dout_dt, const float *inp,
                           const float *weight, const float *rstd, int B, int T, int C)
{
    long N = (long)B * T;
    if (!N) return;
    rmsnorm_backward_dinp_kernel<<<mds_cu_row_blocks((size_t)N), 32 * MDS_CU_ROWS>>>(
        dinp, dinp_dt, dout, dout_dt, inp, weight, rstd, (size_t)N, C, mds_cuda_compute_dtype());
    MDS_CU_LAUNCHED("rmsnorm_backward");
    mds_cu_colsum<1>(dweight, NULL, rms_weight_term{dout, inp, rstd, C, dout_dt}, N, C, "rmsnorm_backward (weights)");
}
