/*
 * swiglu.cu - CUDA SwiGLU (out = silu(gate) * up over FC1's [gate | up]
 * rows), forward and backward: swiglu.c's expressions and exp, elementwise,
 * the CPU's bits.  No bias fusion, no other GLU variants.
 */
#include "common.cuh"

/* A thread per column i of F, down the rows from blockIdx.y in steps of
 * gridDim.y (no division per element). */
__global__ static void swiglu_forward_kernel(void *out, int od, const float *inp, size_t N, int F, int dt)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= F)
        return;
    for (size_t n = blockIdx.y; n < N; n += gridDim.y) {
        const float *x = inp + n * 2 * (size_t)F;
        float g = x[i];
        float sig = 1.0f / (1.0f + mds_expf(-g));
        mds_cu_put(out, od, n * (size_t)F + i, g * sig * x[F + i], dt);
    }
}

__global__ static void swiglu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t N, int F,
                                              int dt)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= F)
        return;
    for (size_t n = blockIdx.y; n < N; n += gridDim.y) {
        const float *x = inp + n * 2 * (size_t)F;
        float *dx = dinp + n * 2 * (size_t)F;
        float g = x[i], up = x[F + i], d = dout[n * (size_t)F + i];
        float sig = 1.0f / (1.0f + mds_expf(-g));
        dx[i] = mds_round_to(dt, dx[i] + d * up * sig * (1.0f + g * (1.0f - sig)));
        dx[F + i] = mds_round_to(dt, dx[F + i] + d * g * sig);
    }
}

static dim3 swiglu_grid(size_t N, int F)
{
    return dim3((unsigned)((F + 255) / 256), (unsigned)(N < 4096 ? N : 4096));
}

void swiglu_forward_cuda(void *out, int out_dt, const float *inp, size_t N, int F)
{
    size_t n = N * (size_t)F;
    if (!n) return;
    swiglu_forward_kernel<<<swiglu_grid(N, F), 256>>>(out, out_dt, inp, N, F, mds_cuda_compute_dtype());
    MDS_CU_LAUNCHED("swiglu_forward");
}

void swiglu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N, int F)
{
    size_t n = N * (size_t)F;
    if (!n) return;
    swiglu_backward_kernel<<<swiglu_grid(N, F), 256>>>(dinp, inp, dout, N, F, mds_cuda_compute_dtype());
    MDS_CU_LAUNCHED("swiglu_backward");
}
