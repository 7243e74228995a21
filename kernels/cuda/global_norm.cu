/*
 * global_norm.cu - CUDA squared L2 norm of a buffer, in double: a fixed
 * grid of GN_BLOCKS blocks with fixed boundaries (each thread a strided
 * subset in order, then mds_cu_block_sum) writes one partial per block to
 * the scratch, and one block adds the partials in order.  Deterministic for
 * any N; it differs from the CPU's blocking only by double rounding.
 */
#include "common.cuh"

#define GN_BLOCKS 256

__global__ static void gn_partial_kernel(double *part, const float *x, size_t N)
{
    size_t per = (N + GN_BLOCKS - 1) / GN_BLOCKS;
    size_t i0 = (size_t)blockIdx.x * per, i1 = i0 + per < N ? i0 + per : N;
    double s = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x)
        s += (double)x[i] * x[i];
    s = mds_cu_block_sum<double>(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

__global__ static void gn_final_kernel(double *out, const double *part)
{
    double s = 0.0;
    for (int k = 0; k < GN_BLOCKS; k++)
        s += part[k];
    *out = s;
}

void global_norm_squared_cuda(double *out, const float *x, size_t N)
{
    double *part = (double *)mds_cuda_scratch(GN_BLOCKS * sizeof(double));
    if (!part) return;
    gn_partial_kernel<<<GN_BLOCKS, MDS_CU_THREADS>>>(part, x, N);
    MDS_CU_LAUNCHED("global_norm_squared");
    gn_final_kernel<<<1, 1>>>(out, part);
    MDS_CU_LAUNCHED("global_norm_squared");
}
