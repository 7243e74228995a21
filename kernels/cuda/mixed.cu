/*
 * mixed.cu - CUDA mixed-precision helpers: round_to (fp32 -> bf16/fp16 ->
 * fp32 in place, with kernels/dtype.h's own conversions compiled for the
 * device, so the CPU's bits for NaN, infinities and subnormals too),
 * to16 (fp32 -> a 16-bit array, the same rounding: the matmuls' operand
 * copies, attention's out where its fp32 kernels ran) and unscale_check
 * (x *= factor, then the count of non-finite values).
 *
 * The count is an integer: per-block counts, then one unsigned 64-bit
 * atomicAdd per block into the scratch (integer addition is exact in any
 * order, so the result is deterministic), converted to the double.
 */
#include "common.cuh"
#include "dtype.h"

/* x[0, N) rounded in place: the `head` elements before x's first 16-byte
 * boundary and the tail one a thread, the rest four a thread (a float4
 * load and store: one float a thread keeps too few bytes in flight to
 * reach the memory's bandwidth). */
template <int DT>
__global__ static void round_to_kernel(float *x, size_t N, size_t head)
{
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    size_t n4 = (N - head) / 4, tail = head + 4 * n4 + id;
    if (id < head)
        x[id] = mds_round_to(DT, x[id]);
    float4 *v = (float4 *)(x + head);
    for (size_t i = id; i < n4; i += stride) {
        float4 a = v[i];
        a.x = mds_round_to(DT, a.x);
        a.y = mds_round_to(DT, a.y);
        a.z = mds_round_to(DT, a.z);
        a.w = mds_round_to(DT, a.w);
        v[i] = a;
    }
    if (tail < N)
        x[tail] = mds_round_to(DT, x[tail]);
}

void round_to_cuda(float *x, size_t N, int dtype)
{
    if (!N || (dtype != MDS_BF16 && dtype != MDS_F16)) return;
    size_t head = (16 - ((uintptr_t)x & 15)) % 16 / sizeof(float);   /* (x itself is 4-byte aligned) */
    if (head > N) head = N;
    unsigned nb = mds_cu_blocks((N - head) / 4, 256);
    if (nb > 8192) nb = 8192;
    auto kernel = dtype == MDS_BF16 ? round_to_kernel<MDS_BF16> : round_to_kernel<MDS_F16>;
    kernel<<<nb, 256>>>(x, N, head);
    MDS_CU_LAUNCHED("round_to");
}

/* dst[i] = src[i] as DT, rounded to nearest even (exact on values of DT):
 * four a thread (a float4 load, an 8-byte store) from `head`, the elements
 * before src's first 16-byte boundary, when dst + head is 8-byte aligned
 * too (vec), else one a thread. */
template <int DT>
__global__ static void to16_kernel(uint16_t *dst, const float *src, size_t n, size_t head, int vec)
{
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    if (!vec) {
        for (size_t i = id; i < n; i += stride)
            dst[i] = mds_f32_to_16(DT, src[i]);
        return;
    }
    size_t n4 = (n - head) / 4, tail = head + 4 * n4 + id;
    if (id < head)
        dst[id] = mds_f32_to_16(DT, src[id]);
    const float4 *s4 = (const float4 *)(src + head);
    uint2 *d4 = (uint2 *)(dst + head);
    for (size_t i = id; i < n4; i += stride) {
        float4 a = s4[i];
        uint2 w;
        w.x = (uint32_t)mds_f32_to_16(DT, a.x) | (uint32_t)mds_f32_to_16(DT, a.y) << 16;
        w.y = (uint32_t)mds_f32_to_16(DT, a.z) | (uint32_t)mds_f32_to_16(DT, a.w) << 16;
        d4[i] = w;
    }
    if (tail < n)
        dst[tail] = mds_f32_to_16(DT, src[tail]);
}

void to16_cuda(uint16_t *dst, const float *src, size_t n, int dt, const char *what)
{
    if (!n) return;
    size_t head = (16 - ((uintptr_t)src & 15)) % 16 / sizeof(float);
    if (head > n) head = n;
    int vec = ((uintptr_t)(dst + head) & 7) == 0;
    size_t blocks = ((vec ? (n - head) / 4 : n) + 255) / 256;
    auto kernel = dt == MDS_BF16 ? to16_kernel<MDS_BF16> : to16_kernel<MDS_F16>;
    kernel<<<(unsigned)(blocks < 1 ? 1 : blocks < 8192 ? blocks : 8192), 256>>>(dst, src, n, head, vec);
    MDS_CU_LAUNCHED(what);
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
