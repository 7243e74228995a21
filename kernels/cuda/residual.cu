/*
 * residual.cu - CUDA residual add (forward) and its gradient (backward),
 * elementwise, the CPU's bits; the forward's sum kept as its dt (rounded
 * as it is stored: backend.h).  Where inp2 is stored as the 16-bit
 * compute dtype and every pointer is 16-byte aligned, the forward takes 8
 * elements a thread at a time (two float4s and a uint4): the same bits.
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

/* inp2 stored as DT, the sum kept as DT: N / 8 groups of 8 MDS_CU_VEC a
 * thread at a time, then the last N % 8 elements a thread each. */
template <int DT>
__global__ static void residual_forward8_kernel(float4 *out, const float4 *a, const uint4 *b, size_t N)
{
    size_t n8 = N / 8, S = (size_t)gridDim.x * blockDim.x, id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = id; i < n8; i += MDS_CU_VEC * S) {
        float4 x[MDS_CU_VEC][2];
        uint4 y[MDS_CU_VEC];
        for (int k = 0; k < MDS_CU_VEC; k++) {
            size_t j = i + k * S;
            bool in = j < n8;
            x[k][0] = in ? a[2 * j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            x[k][1] = in ? a[2 * j + 1] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            y[k] = in ? b[j] : make_uint4(0u, 0u, 0u, 0u);
        }
        for (int k = 0; k < MDS_CU_VEC; k++) {
            size_t j = i + k * S;
            float f[8];
            mds_cu_unpack8<DT>(f, y[k]);
            float4 o0 = make_float4(mds_round_to(DT, x[k][0].x + f[0]), mds_round_to(DT, x[k][0].y + f[1]),
                                    mds_round_to(DT, x[k][0].z + f[2]), mds_round_to(DT, x[k][0].w + f[3]));
            float4 o1 = make_float4(mds_round_to(DT, x[k][1].x + f[4]), mds_round_to(DT, x[k][1].y + f[5]),
                                    mds_round_to(DT, x[k][1].z + f[6]), mds_round_to(DT, x[k][1].w + f[7]));
            if (j < n8) {
                out[2 * j] = o0;
                out[2 * j + 1] = o1;
            }
        }
    }
    size_t j = n8 * 8 + id;
    if (j < N)
        ((float *)out)[j] = mds_round_to(DT, ((const float *)a)[j] + mds_load(DT, b, j));
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
    if (dt != MDS_F32 && inp2_dt == dt && mds_cu_al16(out) && mds_cu_al16(inp1) && mds_cu_al16(inp2)) {
        auto kernel = dt == MDS_BF16 ? residual_forward8_kernel<MDS_BF16> : residual_forward8_kernel<MDS_F16>;
        kernel<<<mds_cu_vec_blocks(N / 8, 256), 256>>>((float4 *)out, (const float4 *)inp1, (const uint4 *)inp2, N);
        MDS_CU_LAUNCHED("residual_forward");
        return;
    }
    residual_forward_kernel<<<mds_cu_ilp_blocks(N, 256), 256>>>(out, inp1, inp2, inp2_dt, N, dt);
    MDS_CU_LAUNCHED("residual_forward");
}

void residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N)
{
    if (!N) return;
    residual_backward_kernel<<<mds_cu_blocks(N, 256), 256>>>(dinp1, dinp2, dout, N);
    MDS_CU_LAUNCHED("residual_backward");
}
