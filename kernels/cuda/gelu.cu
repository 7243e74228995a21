/*
 * gelu.cu - CUDA GELU (tanh approximation), forward and backward: the
 * expressions of gelu.c with the same exp (mds_expf), elementwise, so
 * the CPU's bits.  No bias fusion.  Where every tensor is stored as the
 * 16-bit compute dtype and 16-byte aligned, 8 elements a uint4 (common.cuh's
 * mds_cu_unpack8): the same expressions, the same bits.
 */
#include "common.cuh"

#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBE 0.044715f

__device__ static inline float gelu_sig(float x)
{
    return 1.0f / (1.0f + mds_expf(-2.0f * GELU_SCALE * (x + GELU_CUBE * x * x * x)));
}

/* GELU's derivative at x (gelu.c's expression) */
__device__ static inline float gelu_grad(float x)
{
    float sig = gelu_sig(x);
    return sig + 2.0f * x * sig * (1.0f - sig) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
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
            if (i + k * S < N)
                mds_cu_put(dinp, gd, i + k * S, 0.0f + gelu_grad(x[k]) * d[k], dt);   /* written (backend.h): the CPU's 0 + */
        }
    }
}

/* Every tensor stored as DT: the N / 8 uint4s MDS_CU_VEC a thread at a
 * time, then the last N % 8 elements a thread each. */
template <int DT>
__global__ static void gelu_forward8_kernel(uint4 *out, const uint4 *inp, size_t N)
{
    size_t n8 = N / 8, S = (size_t)gridDim.x * blockDim.x, id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = id; i < n8; i += MDS_CU_VEC * S) {
        uint4 v[MDS_CU_VEC];
        for (int k = 0; k < MDS_CU_VEC; k++)
            v[k] = i + k * S < n8 ? inp[i + k * S] : make_uint4(0u, 0u, 0u, 0u);
        for (int k = 0; k < MDS_CU_VEC; k++) {
            float x[8];
            mds_cu_unpack8<DT>(x, v[k]);
            for (int e = 0; e < 8; e++)
                x[e] = x[e] * gelu_sig(x[e]);
            if (i + k * S < n8)
                out[i + k * S] = mds_cu_pack8<DT>(x);
        }
    }
    size_t j = n8 * 8 + id;
    if (j < N) {
        float x = mds_load(DT, inp, j);
        mds_store(DT, out, j, x * gelu_sig(x));
    }
}

template <int DT>
__global__ static void gelu_backward8_kernel(uint4 *dinp, const uint4 *inp, const uint4 *dout, size_t N)
{
    size_t n8 = N / 8, S = (size_t)gridDim.x * blockDim.x, id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = id; i < n8; i += MDS_CU_VEC * S) {
        uint4 v[MDS_CU_VEC], w[MDS_CU_VEC];
        for (int k = 0; k < MDS_CU_VEC; k++) {
            bool in = i + k * S < n8;
            v[k] = in ? inp[i + k * S] : make_uint4(0u, 0u, 0u, 0u);
            w[k] = in ? dout[i + k * S] : make_uint4(0u, 0u, 0u, 0u);
        }
        for (int k = 0; k < MDS_CU_VEC; k++) {
            float x[8], d[8];
            mds_cu_unpack8<DT>(x, v[k]);
            mds_cu_unpack8<DT>(d, w[k]);
            for (int e = 0; e < 8; e++)
                x[e] = 0.0f + gelu_grad(x[e]) * d[e];
            if (i + k * S < n8)
                dinp[i + k * S] = mds_cu_pack8<DT>(x);
        }
    }
    size_t j = n8 * 8 + id;
    if (j < N)
        mds_store(DT, dinp, j, 0.0f + gelu_grad(mds_load(DT, inp, j)) * mds_load(DT, dout, j));
}

/* the 8-element kernels take: every tensor stored as the 16-bit compute
 * dtype dt, every pointer 16-byte aligned */
static int gelu_vec(int dt, int d0, int d1, const void *p0, const void *p1, const void *p2)
{
    return dt != MDS_F32 && d0 == dt && d1 == dt && mds_cu_al16(p0) && mds_cu_al16(p1) && mds_cu_al16(p2);
}

void gelu_forward_cuda(void *out, int out_dt, const void *inp, int inp_dt, size_t N)
{
    if (!N) return;
    int dt = mds_cuda_compute_dtype();
    if (gelu_vec(dt, out_dt, inp_dt, out, inp, inp)) {
        auto kernel = dt == MDS_BF16 ? gelu_forward8_kernel<MDS_BF16> : gelu_forward8_kernel<MDS_F16>;
        kernel<<<mds_cu_vec_blocks(N / 8, 256), 256>>>((uint4 *)out, (const uint4 *)inp, N);
        MDS_CU_LAUNCHED("gelu_forward");
        return;
    }
    gelu_forward_kernel<<<mds_cu_ilp_blocks(N, 256), 256>>>(out, out_dt, inp, inp_dt, N, dt);
    MDS_CU_LAUNCHED("gelu_forward");
}

void gelu_backward_cuda(void *dinp, const void *inp, int inp_dt, const void *dout, int gd, size_t N)
{
    if (!N) return;
    int dt = mds_cuda_compute_dtype();
    if (gelu_vec(dt, inp_dt, gd, dinp, inp, dout)) {
        auto kernel = dt == MDS_BF16 ? gelu_backward8_kernel<MDS_BF16> : gelu_backward8_kernel<MDS_F16>;
        kernel<<<mds_cu_vec_blocks(N / 8, 256), 256>>>((uint4 *)dinp, (const uint4 *)inp, (const uint4 *)dout, N);
        MDS_CU_LAUNCHED("gelu_backward");
        return;
    }
    gelu_backward_kernel<<<mds_cu_ilp_blocks(N, 256), 256>>>(dinp, inp, inp_dt, dout, gd, N, dt);
    MDS_CU_LAUNCHED("gelu_backward");
}
