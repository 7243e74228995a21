/*
 * rope.cu - CUDA rotary position embeddings in place over the q and k heads
 * of the fused qkv rows, forward and backward (the inverse rotation), one
 * thread per rotated pair: rope.c's expressions, the CPU's bits (qkv or
 * dqkv fp32, or stored in 16 bits and rounded once).  The cos
 * and sin tables are rope_tables()'s, uploaded by the model.
 */
#include "common.cuh"

__global__ static void rope_kernel(void *qkv, int qd, const float *cos_t, const float *sin_t, int B, int T, int NH,
                                   int NKV, int hs, int rot, int interleaved, float sign)
{
    int half = rot / 2, heads = NH + NKV;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * heads * half)
        return;
    int i = (int)(idx % half);
    size_t r = idx / half;
    int h = (int)(r % heads);
    size_t bt = r / heads;
    int t = (int)(bt % T);
    size_t v = bt * ((size_t)NH + 2 * (size_t)NKV) * hs + (size_t)h * hs;   /* k heads follow the q heads */
    size_t a = v + (interleaved ? 2 * i : i), b = v + (interleaved ? 2 * i + 1 : i + half);
    float xa = mds_load(qd, qkv, a), xb = mds_load(qd, qkv, b);
    float cs = cos_t[(size_t)t * half + i], s = sign * sin_t[(size_t)t * half + i];
    /* fp32 as computed (the model keeps it), 16-bit rounded once */
    mds_cu_put(qkv, qd, a, xa * cs + (-xb) * s, MDS_F32);
    mds_cu_put(qkv, qd, b, xb * cs + xa * s, MDS_F32);
}

static void rope_cuda(void *qkv, int qd, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV,
                      int hs, int rot, int interleaved, float sign, const char *what)
{
    size_t n = (size_t)B * T * (size_t)(NH + NKV) * (size_t)(rot / 2);
    if (!n) return;
    rope_kernel<<<mds_cu_blocks(n, 256), 256>>>(qkv, qd, cos_t, sin_t, B, T, NH, NKV, hs, rot, interleaved, sign);
    MDS_CU_LAUNCHED(what);
}

void rope_forward_cuda(void *qkv, int qkv_dt, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV,
                       int hs, int rot, int interleaved)
{
    rope_cuda(qkv, qkv_dt, cos_t, sin_t, B, T, NH, NKV, hs, rot, interleaved, 1.0f, "rope_forward");
}

void rope_backward_cuda(void *dqkv, int dqkv_dt, const float *cos_t, const float *sin_t, int B, int T, int NH,
                        int NKV, int hs, int rot, int interleaved)
{
    rope_cuda(dqkv, dqkv_dt, cos_t, sin_t, B, T, NH, NKV, hs, rot, interleaved, -1.0f, "rope_backward");
}
