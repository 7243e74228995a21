/*
 * gelu.cu - CUDA GELU (tanh approximation), forward and backward: the
 * expressions of gelu.c with the same exp (mds_expf), elementwise, so
 * the CPU's bits.  No bias fusion.
 */
#include "common.cuh"

#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBE 0.044715f

__global__ static void gelu_forward_kernel(float *out, const float *inp, size_t N)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N)
        return;
    float x = inp[i];
    float sig = 1.0f / (1.0f + mds_expf(-2.0f * GELU_SCALE * (x + GELU_CUBE * x * x * x)));
    out[i] = x * sig;
}

__global__ static void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t N)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N)
        return;
    float x = inp[i];
    float sig = 1.0f / (1.0f + mds_expf(-2.0f * GELU_SCALE * (x + GELU_CUBE * x * x * x)));
    float grad = sig + 2.0f * x * sig * (1.0f - sig) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
    dinp[i] = dinp[i] + grad * dout[i];
}

void gelu_forward_cuda(float *out, const float *inp, size_t N)
{
    if (!N) return;
    gelu_forward_kernel<<<mds_cu_blocks(N, 256), 256>>>(out, inp, N);
    MDS_CU_LAUNCHED("gelu_forward");
}

void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N)
{
    if (!N) return;
    gelu_backward_kernel<<<mds_cu_blocks(N, 256), 256>>>(dinp, inp, dout, N);
    MDS_CU_LAUNCHED("gelu_backward");
}
