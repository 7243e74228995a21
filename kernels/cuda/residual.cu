/*
 * residual.cu - CUDA residual add (forward) and its gradient (backward),
 * elementwise, the CPU's bits.  Nothing fused.
 */
#include "common.cuh"

__global__ static void residual_forward_kernel(float *out, const float *a, const float *b, size_t N)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N)
        out[i] = a[i] + b[i];
}

__global__ static void residual_backward_kernel(float *d1, float *d2, const float *dout, size_t N)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        d1[i] += dout[i];
        d2[i] += dout[i];
    }
}

void residual_forward_cuda(float *out, const float *inp1, const float *inp2, size_t N)
{
    if (!N) return;
    residual_forward_kernel<<<mds_cu_blocks(N, 256), 256>>>(out, inp1, inp2, N);
    MDS_CU_LAUNCHED("residual_forward");
}

void residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N)
{
    if (!N) return;
    residual_backward_kernel<<<mds_cu_blocks(N, 256), 256>>>(dinp1, dinp2, dout, N);
    MDS_CU_LAUNCHED("residual_backward");
}
