/*
 * loss.cu - CUDA masked-mean loss reduction (sum of losses, sum of the mask,
 * in double) and its gradient.  One block reduces in a fixed order (each
 * thread a strided subset in order, then mds_cu_block_sum), so the result
 * is deterministic; it differs from the CPU's single in-order sum only by
 * double rounding.  N is B*T: one block is plenty.
 */
#include "common.cuh"

__global__ static void loss_reduce_kernel(double *out, const float *losses, const float *mask, size_t N)
{
    double ls = 0.0, nt = 0.0;
    for (size_t i = threadIdx.x; i < N; i += blockDim.x) {
        if (losses)
            ls += (double)losses[i];
        if (mask)
            nt += (double)mask[i];
    }
    ls = mds_cu_block_sum<double>(ls);
    nt = mds_cu_block_sum<double>(nt);
    if (threadIdx.x == 0) {
        out[0] = ls;
        out[1] = mask ? nt : (double)N;
    }
}

void loss_reduce_cuda(double *out, const float *losses, const float *mask, size_t N)
{
    loss_reduce_kernel<<<1, 1024>>>(out, losses, mask, N);
    MDS_CU_LAUNCHED("loss_reduce");
}

__global__ static void loss_grad_kernel(float *dlosses, const float *mask, float inv, size_t N)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N)
        dlosses[i] = mask[i] * inv;
}

void loss_grad_cuda(float *dlosses, const float *mask, float inv, size_t N)
{
    if (!N) return;
    loss_grad_kernel<<<mds_cu_blocks(N, 256), 256>>>(dlosses, mask, inv, N);
    MDS_CU_LAUNCHED("loss_grad");
}
