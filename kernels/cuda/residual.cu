/*
 * residual.cu - CUDA residual add (forward) and its gradient (backward),
 * elementwise, the CPU's bits; the forward's sum kept as its dt (rounded
 * as it is stored: backend.h).
 */
#include "common.cuh"

/* MDS_CU_ILP elements a thread at a time (common.cuh); the backward (no
 * model calls it) as the CPU's loop, whatever the pointers alias */
__global__ static void residual_forward_kernel(float *out, const float *a, const void *b, int bd, size_t N, int dt)
{
    size_t S = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += MDS_CU_ILP * S) {
        float x[MDS_CU_ILP], y[MDS_CU_ILP];
        for (int k = 0; k < MDS_CU_ILP; k++) {
            size_t j = i + k * S;
            x[k] = j < N ? a[j] : 0.0f;
            y[k] = j < N ? mds_load(bd, b, j) : 0.0f;
        }
        for (int k = 0; k < MDS_CU_ILP; k++)
            if (i + k * S < N)
                out[i + k * S] = mds_round_to(dt, x[k] + y[k]);
    }
}

__global__ static void residual_backward_kernel(float *d1, float *d2, const float *dout, size_t N)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        d1[i] += dout[i];
        d2[i] += dout[i];
    }
}

void residual_forward_cuda(float *out, const float *inp1, const void *inp2, int inp2_dt, size_t N, int dt)
{
    if (!N) return;
    residual_forward_kernel<<<mds_cu_ilp_blocks(N, 256), 256>>>(out, inp1, inp2, inp2_dt, N, dt);
    MDS_CU_LAUNCHED("residual_forward");
}

void residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N)
{
    if (!N) return;
    residual_backward_kernel<<<mds_cu_blocks(N, 256), 256>>>(dinp1, dinp2, dout, N);
    MDS_CU_LAUNCHED("residual_backward");
}
