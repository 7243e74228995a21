/*
 * swiglu.cu - CUDA SwiGLU (out = silu(gate) * up over FC1's [gate | up]
 * rows), forward and backward: swiglu.c's expressions and exp, elementwise,
 * the CPU's bits.  No bias fusion, no other GLU variants.
 */
#include "common.cuh"

__global__ static void swiglu_forward_kernel(float *out, const float *inp, size_t N, int F)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * (size_t)F)
        return;
    size_t n = idx / F, i = idx % F;
    const float *x = inp + n * 2 * (size_t)F;
    float g = x[i];
    float sig = 1.0f / (1.0f + mds_expf(-g));
    out[idx] = g * sig * x[F + i];
}

__global__ static void swiglu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t N, int F)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * (size_t)F)
        return;
    size_t n = idx / F, i = idx % F;
    const float *x = inp + n * 2 * (size_t)F;
    float *dx = dinp + n * 2 * (size_t)F;
    float g = x[i], up = x[F + i], d = dout[idx];
    float sig = 1.0f / (1.0f + mds_expf(-g));
    dx[i] = dx[i] + d * up * sig * (1.0f + g * (1.0f - sig));
    dx[F + i] = dx[F + i] + d * g * sig;
}

void swiglu_forward_cuda(float *out, const float *inp, size_t N, int F)
{
    size_t n = N * (size_t)F;
    if (!n) return;
    swiglu_forward_kernel<<<mds_cu_blocks(n, 256), 256>>>(out, inp, N, F);
    MDS_CU_LAUNCHED("swiglu_forward");
}

void swiglu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N, int F)
{
    size_t n = N * (size_t)F;
    if (!n) return;
    swiglu_backward_kernel<<<mds_cu_blocks(n, 256), 256>>>(dinp, inp, dout, N, F);
    MDS_CU_LAUNCHED("swiglu_backward");
}
