/*
 * global_norm.cu - CUDA squared L2 norm of a buffer, in double: a fixed
 * grid of GN_BLOCKS blocks with fixed boundaries (each thread a strided
 * subset in order, then mds_cu_block_sum) writes one partial per block to
 * the scratch, and one block adds the partials in order.  Deterministic for
 * any N; it differs from the CPU's blocking only by double rounding.
 */
#include "common.cuh"

#define GN_BLOCKS 256   /* a multiple of 8 (gn_final_kernel) */

__global__ static void gn_partial_kernel(double *part, const float *x, size_t N)
{
    size_t per = (N + GN_BLOCKS - 1) / GN_BLOCKS, S = blockDim.x;
    size_t i0 = (size_t)blockIdx.x * per, i1 = i0 + per < N ? i0 + per : N;
    double s = 0.0;
    size_t i = i0 + threadIdx.x;
    /* in order, MDS_CU_ILP loads issued before their adds (256 blocks of
       256 threads: few threads for the bandwidth, each needs several
       loads in flight) */
    for (; i + (MDS_CU_ILP - 1) * S < i1; i += MDS_CU_ILP * S) {
        float v[MDS_CU_ILP];
        for (int k = 0; k < MDS_CU_ILP; k++)
            v[k] = x[i + k * S];
        for (int k = 0; k < MDS_CU_ILP; k++)
            s += (double)v[k] * v[k];
    }
    for (; i < i1; i += S)
        s += (double)x[i] * x[i];
    s = mds_cu_block_sum<double>(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

/* the partials in order, their loads issued 8 at a time */
__global__ static void gn_final_kernel(double *out, const double *part)
{
    double s = 0.0;
    for (int k = 0; k < GN_BLOCKS; k += 8) {
        double v[8];
        for (int u = 0; u < 8; u++)
            v[u] = part[k + u];
        for (int u = 0; u < 8; u++)
            s += v[u];
    }
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
