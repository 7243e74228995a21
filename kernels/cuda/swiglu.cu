/*
 * swiglu.cu - CUDA SwiGLU (out = silu(gate) * up over FC1's [gate | up]
 * rows), forward and backward: swiglu.c's expressions and exp, elementwise,
 * the CPU's bits.  No bias fusion, no other GLU variants.
 */
#include "common.cuh"

/* A thread per column i of F, down the rows from blockIdx.y in steps of
 * gridDim.y (no division per element). */
__global__ static void swiglu_forward_kernel(void *out, int od, const void *inp, int xd, size_t N, int F, int dt)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= F)
        return;
    for (size_t n = blockIdx.y; n < N; n += gridDim.y) {
        size_t r = n * 2 * (size_t)F;   /* inp's row */
        float g = mds_load(xd, inp, r + i);
        float sig = 1.0f / (1.0f + mds_expf(-g));
        mds_cu_put(out, od, n * (size_t)F + i, g * sig * mds_load(xd, inp, r + F + i), dt);
    }
}

/* dinp (written) and dout stored as gd (backend.h's stored dtypes) */
__global__ static void swiglu_backward_kernel(void *dinp, const void *inp, int xd, const void *dout, int gd,
                                              size_t N, int F, int dt)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= F)
        return;
    for (size_t n = blockIdx.y; n < N; n += gridDim.y) {
        size_t r = n * 2 * (size_t)F;   /* inp's and dinp's row */
        float g = mds_load(xd, inp, r + i), up = mds_load(xd, inp, r + F + i);
        float d = mds_load(gd, dout, n * (size_t)F + i);
        float sig = 1.0f / (1.0f + mds_expf(-g));
        mds_cu_put(dinp, gd, r + i, 0.0f + d * up * sig * (1.0f + g * (1.0f - sig)), dt);   /* written (backend.h) */
        mds_cu_put(dinp, gd, r + F + i, 0.0f + d * g * sig, dt);
    }
}

static dim3 swiglu_grid(size_t N, int F)
{
    return dim3((unsigned)((F + 255) / 256), (unsigned)(N < 4096 ? N : 4096));
}

void swiglu_forward_cuda(void *out, int out_dt, const void *inp, int inp_dt, size_t N, int F)
{
    size_t n = N * (size_t)F;
    if (!n) return;
    swiglu_forward_kernel<<<swiglu_grid(N, F), 256>>>(out, out_dt, inp, inp_dt, N, F, mds_cuda_compute_dtype());
    MDS_CU_LAUNCHED("swiglu_forward");
}

void swiglu_backward_cuda(void *dinp, const void *inp, int inp_dt, const void *dout, int gd, size_t N, int F)
{
    size_t n = N * (size_t)F;
    if (!n) return;
    swiglu_backward_kernel<<<swiglu_grid(N, F), 256>>>(dinp, inp, inp_dt, dout, gd, N, F, mds_cuda_compute_dtype());
    MDS_CU_LAUNCHED("swiglu_backward");
}
