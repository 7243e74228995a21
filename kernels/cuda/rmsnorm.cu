/*
 * rmsnorm.cu - CUDA RMSNorm over the last dimension, forward (saving rstd)
 * and backward; the structure of layernorm.cu (block per row with
 * fixed-order double sums; dweight one thread per channel over the rows in
 * order, the CPU's bits).  No bias, no zero-centred weights.
 */
#include <math.h>

#include "common.cuh"

__global__ static void rmsnorm_forward_kernel(float *out, float *rstd, const float *inp, const float *weight, int C,
                                              float eps)
{
    size_t bt = blockIdx.x;
    const float *x = inp + bt * C;
    float *o = out + bt * C;
    double ss = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        ss += (double)x[c] * x[c];
    ss = mds_cu_block_sum<double>(ss);
    float r = (float)(1.0 / sqrt(ss / C + (double)eps));
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        o[c] = x[c] * r * weight[c];
    if (threadIdx.x == 0)
        rstd[bt] = r;
}

void rmsnorm_forward_cuda(float *out, float *rstd, const float *inp, const float *weight, int B, int T, int C,
                          float eps)
{
    if ((size_t)B * T == 0) return;
    rmsnorm_forward_kernel<<<(unsigned)((size_t)B * T), MDS_CU_THREADS>>>(out, rstd, inp, weight, C, eps);
    MDS_CU_LAUNCHED("rmsnorm_forward");
}

__global__ static void rmsnorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                                    const float *weight, const float *rstd, int C)
{
    size_t bt = blockIdx.x;
    const float *x = inp + bt * C, *d = dout + bt * C;
    float *di = dinp + bt * C;
    float r = rstd[bt];
    double sgn = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        sgn += (double)(d[c] * weight[c]) * (x[c] * r);
    sgn = mds_cu_block_sum<double>(sgn);
    float mgn = (float)(sgn / C);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float n = x[c] * r;
        float g = d[c] * weight[c];
        di[c] += r * (g - n * mgn);
    }
}

__global__ static void rmsnorm_backward_weight_kernel(float *dweight, const float *dout, const float *inp,
                                                      const float *rstd, long N, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    double dw = 0.0;
    for (long bt = 0; bt < N; bt++)
        dw += (double)dout[(size_t)bt * C + c] * (inp[(size_t)bt * C + c] * rstd[bt]);
    dweight[c] += (float)dw;
}

void rmsnorm_backward_cuda(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                           const float *rstd, int B, int T, int C)
{
    long N = (long)B * T;
    if (!N) return;
    rmsnorm_backward_dinp_kernel<<<(unsigned)N, MDS_CU_THREADS>>>(dinp, dout, inp, weight, rstd, C);
    MDS_CU_LAUNCHED("rmsnorm_backward");
    rmsnorm_backward_weight_kernel<<<mds_cu_blocks((size_t)C, 128), 128>>>(dweight, dout, inp, rstd, N, C);
    MDS_CU_LAUNCHED("rmsnorm_backward (weights)");
}
