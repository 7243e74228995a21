/*
 * mixed.cu - CUDA mixed-precision helpers: round_to (fp32 -> bf16/fp16 ->
 * fp32 in place, with kernels/dtype.h's own conversions compiled for the
 * device, so the CPU's bits for NaN, infinities and subnormals too) and
 * unscale_check (x *= factor, then the count of non-finite values).
 *
 * The count is an integer: per-block counts, then one unsigned 64-bit
 * atomicAdd per block into the scratch (integer addition is exact in any
 * order, so the result is deterministic), converted to the double.
 */
#include "common.cuh"
#include "dtype.h"

__global__ static void round_to_kernel(float *x, size_t N, int dtype)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N)
        x[i] = dtype == MDS_BF16 ? mds_bf16_to_f32(mds_f32_to_bf16(x[i])) : mds_f16_to_f32(mds_f32_to_f16(x[i]));
}

void round_to_cuda(float *x, size_t N, int dtype)
{
    if (!N || (dtype != MDS_BF16 && dtype != MDS_F16)) return;
    round_to_kernel<<<mds_cu_blocks(N, 256), 256>>>(x, N, dtype);
    MDS_CU_LAUNCHED("round_to");
}

__global__ static void unscale_kernel(unsigned long long *count, float *x, size_t N, float factor)
{
    unsigned bad = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i] * factor;
        x[i] = v;
        bad += !isfinite(v);
    }
    unsigned long long total = mds_cu_block_sum<unsigned long long>(bad);
    if (threadIdx.x == 0 && total)
        atomicAdd(count, total);
}

__global__ static void count_to_double_kernel(double *out, const unsigned long long *count)
{
    *out = (double)*count;
}

void unscale_check_cuda(double *nonfinite, float *x, size_t N, float factor)
{
    unsigned long long *count = (unsigned long long *)mds_cuda_scratch(sizeof *count);
    if (!count) return;
    mds_cuda_note(cudaMemsetAsync(count, 0, sizeof *count, 0), "unscale_check");
    if (N) {
        unsigned nb = mds_cu_blocks(N, MDS_CU_THREADS);
        unscale_kernel<<<nb < 1024 ? nb : 1024, MDS_CU_THREADS>>>(count, x, N, factor);
        MDS_CU_LAUNCHED("unscale_check");
    }
    count_to_double_kernel<<<1, 1>>>(nonfinite, count);
    MDS_CU_LAUNCHED("unscale_check");
}
