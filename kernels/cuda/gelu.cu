/*
 * gelu.cu - CUDA GELU (tanh approximation), forward and backward: the
 * expressions of gelu.c with the same exp (mds_expf), elementwise, so
 * the CPU's bits.  No bias fusion.
 */
#include "common.cuh"

#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBE 0.044715f

__device__ static inline float gelu_sig(float x)
{
    return 1.0f / (1.0f + mds_expf(-2.0f * GELU_SCALE * (x + GELU_CUBE * x * x * x)));
}

/* MDS_CU_ILP elements a thread at a time (common.cuh) */
__global__ static void gelu_forward_kernel(void *out, int od, const void *inp, int xd, size_t N, int dt)
{
    size_t S = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += MDS_CU_ILP * S) {
        float x[MDS_CU_ILP];
        for (int k = 0; k < MDS_CU_ILP; k++)
            x[k] = i + k * S < N ? mds_load(xd, inp, i + k * S) : 0.0f;
        for (int k = 0; k < MDS_CU_ILP; k++)
            if (i + k * S < N)
                mds_cu_put(out, od, i + k * S, x[k] * gelu_sig(x[k]), dt);
    }
}

/* dinp and dout stored as gd (backend.h's stored dtypes) */
__global__ static void gelu_backward_kernel(void *dinp, const void *inp, int xd, const void *dout, int gd, size_t N,
                                            int dt)
{
    size_t S = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += MDS_CU_ILP * S) {
        float x[MDS_CU_ILP], d[MDS_CU_ILP];
        for (int k = 0; k < MDS_CU_ILP; k++) {
            size_t j = i + k * S;
            x[k] = j < N ? mds_load(xd, inp, j) : 0.0f;
            d[k] = j < N ? mds_load(gd, dout, j) : 0.0f;
        }
        for (int k = 0; k < MDS_CU_ILP; k++) {
            float sig = gelu_sig(x[k]);
            float grad = sig + 2.0f * x[k] * sig * (1.0f - sig) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x[k] * x[k]);
            if (i + k * S < N)
                mds_cu_put(dinp, gd, i + k * S, 0.0f + grad * d[k], dt);   /* written (backend.h): the CPU's 0 + */
        }
    }
}

void gelu_forward_cuda(void *out, int out_dt, const void *inp, int inp_dt, size_t N)
{
    if (!N) return;
    gelu_forward_kernel<<<mds_cu_ilp_blocks(N, 256), 256>>>(out, out_dt, inp, inp_dt, N, mds_cuda_compute_dtype());
    MDS_CU_LAUNCHED("gelu_forward");
}

void gelu_backward_cuda(void *dinp, const void *inp, int inp_dt, const void *dout, int gd, size_t N)
{
    if (!N) return;
    gelu_backward_kernel<<<mds_cu_ilp_blocks(N, 256), 256>>>(dinp, inp, inp_dt, dout, gd, N,
                                                             mds_cuda_compute_dtype());
    MDS_CU_LAUNCHED("gelu_backward");
}
