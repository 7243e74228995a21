/*
 * attention.cu - CUDA causal self-attention core with grouped-query heads
 * (NH query heads, NKV key/value heads), forward (out and the row lse) and
 * backward (dq, dk, dv into the fused dqkv), with attention dropout drawn
 * from kernels/dropout.h's counter-based masks (the CPU's masks).
 *
 * Version 1 is written for correctness and for the CPU's bits, not speed:
 *  - forward: one block per query row (t, h, b); the scores q_t . k_s of
 *    the row go to shared memory (T floats), each a dot product over the
 *    head dimension in order; the max (exact), p_s = exp(score * scale -
 *    max) with the CPU's exp, their sum in double (fixed-order block sum),
 *    dropout on p, then out_t[i] = (sum_s p_s v_s[i], s in order) / sum,
 *    one thread per channel, and lse = max + log(sum);
 *  - backward, dq: one block per query row recomputes p and ds_s = p_s
 *    (dO_t . v_s - D_t) scale (D_t = dO_t . out_t) and adds
 *    sum_s ds_s k_s (s in order) to dq;
 *  - backward, dk and dv: one block per key row (s, group, b) walks the
 *    group's heads in order and the queries t >= s in order, recomputing
 *    p_ts and ds_ts, and adds ds_ts q_t to dk_s and p_ts dO_t to dv_s:
 *    the CPU's summation order, so no atomics and the CPU's bits.
 * Each (query, key) pair is visited once forward and twice backward, with
 * O(T) shared memory per block: T is limited by the shared memory a block
 * may opt into (about 57,000 positions on an H100).  The fast version is a
 * tiled flash-attention kernel (tensor cores, bf16, K/V tiles in shared
 * memory) or cuDNN's; it will not keep the CPU's bits.
 */
#include <math.h>
#include <stdio.h>

#include "common.cuh"

#define ATT_THREADS 128

__global__ static void attention_forward_kernel(float *out, float *lse, const float *qkv, int T, int C, int NH,
                                                int NKV, float scale, mds_dropout drop, uint32_t thr, float dscale)
{
    extern __shared__ float p[];   /* (t + 1) */
    int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int hs = C / NH, g = h / (NH / NKV), n = t + 1;
    size_t row = (size_t)C + 2 * (size_t)NKV * hs;
    const float *base = qkv + (size_t)b * T * row;
    const float *q = base + (size_t)t * row + (size_t)h * hs;
    const float *k = base + C + (size_t)g * hs;
    const float *v = base + C + ((size_t)NKV + g) * hs;
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        const float *ks = k + (size_t)s * row;
        float a = 0.0f;
        for (int i = 0; i < hs; i++)
            a = a + q[i] * ks[i];
        p[s] = a;
        mx = a * scale > mx ? a * scale : mx;
    }
    mx = mds_cu_block_max(mx);
    double sum = 0.0;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        float e = mds_expf(p[s] * scale - mx);
        p[s] = e;
        sum += e;
    }
    sum = mds_cu_block_sum<double>(sum);
    if (drop.p > 0.0f) {
        uint64_t rk = drop.row_keys[b], i0 = ((uint64_t)(drop.head0 + h) * (uint64_t)T + (uint64_t)t) * (uint64_t)T;
        for (int s = threadIdx.x; s < n; s += blockDim.x)
            p[s] = mds_dropout_keep(rk, drop.site, i0 + (uint64_t)s, thr) ? p[s] * dscale : 0.0f;
    }
    __syncthreads();
    float inv = (float)(1.0 / sum);
    float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float a = 0.0f;
        for (int s = 0; s < n; s++)
            a = a + p[s] * v[(size_t)s * row + i];
        o[i] = a * inv;
    }
    if (threadIdx.x == 0)
        lse[((size_t)b * NH + h) * T + t] = mx + (float)log(sum);
}

/* dq of query row (t, h, b): see the file comment. */
__global__ static void attention_backward_dq_kernel(float *dqkv, const float *dout, const float *qkv, const float *out,
                                                    const float *lse, int T, int C, int NH, int NKV, float scale,
                                                    mds_dropout drop, uint32_t thr, float dscale)
{
    extern __shared__ float ds[];   /* (t + 1) */
    __shared__ float Dsh;
    int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int hs = C / NH, g = h / (NH / NKV), n = t + 1;
    size_t row = (size_t)C + 2 * (size_t)NKV * hs;
    const float *base = qkv + (size_t)b * T * row;
    const float *q = base + (size_t)t * row + (size_t)h * hs;
    const float *k = base + C + (size_t)g * hs;
    const float *v = base + C + ((size_t)NKV + g) * hs;
    const float *dO = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
    const float *O = out + ((size_t)b * T + t) * C + (size_t)h * hs;
    float *dq = dqkv + (size_t)b * T * row + (size_t)t * row + (size_t)h * hs;
    if (threadIdx.x == 0) {
        float D = 0.0f;
        for (int i = 0; i < hs; i++)
            D += dO[i] * O[i];
        Dsh = D;
    }
    __syncthreads();
    float D = Dsh, l = lse[((size_t)b * NH + h) * T + t];
    uint64_t rk = drop.p > 0.0f ? drop.row_keys[b] : 0;
    uint64_t i0 = ((uint64_t)(drop.head0 + h) * (uint64_t)T + (uint64_t)t) * (uint64_t)T;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        const float *ks = k + (size_t)s * row, *vs = v + (size_t)s * row;
        float a = 0.0f, dv = 0.0f;
        for (int i = 0; i < hs; i++)
            a = a + q[i] * ks[i];
        for (int i = 0; i < hs; i++)
            dv = dv + dO[i] * vs[i];
        float pe = mds_expf(a * scale - l);
        if (drop.p > 0.0f) {
            float m = mds_dropout_keep(rk, drop.site, i0 + (uint64_t)s, thr) ? dscale : 0.0f;
            ds[s] = pe * (m * dv - D) * scale;
        } else {
            ds[s] = pe * (dv - D) * scale;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float a = dq[i];
        for (int s = 0; s < n; s++)
            a = a + ds[s] * k[(size_t)s * row + i];
        dq[i] = a;
    }
}

/* dk and dv of key row (s, group g, b); blockDim >= hs: thread i owns
 * channel i's two accumulators.  See the file comment. */
__global__ static void attention_backward_dkv_kernel(float *dqkv, const float *dout, const float *qkv,
                                                     const float *out, const float *lse, int T, int C, int NH,
                                                     int NKV, float scale, mds_dropout drop, uint32_t thr,
                                                     float dscale)
{
    extern __shared__ float sm[];   /* P and DS of one chunk of blockDim queries */
    float *P = sm, *DS = sm + blockDim.x;
    int s = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
    int hs = C / NH, R = NH / NKV;
    size_t row = (size_t)C + 2 * (size_t)NKV * hs;
    const float *base = qkv + (size_t)b * T * row;
    const float *ks = base + (size_t)s * row + C + (size_t)g * hs;
    const float *vs = base + (size_t)s * row + C + ((size_t)NKV + g) * hs;
    float *dk = dqkv + (size_t)b * T * row + (size_t)s * row + C + (size_t)g * hs;
    float *dv = dqkv + (size_t)b * T * row + (size_t)s * row + C + ((size_t)NKV + g) * hs;
    int i = threadIdx.x;
    float ak = 0.0f, av = 0.0f;
    if (i < hs) {
        ak = dk[i];
        av = dv[i];
    }
    uint64_t rk = drop.p > 0.0f ? drop.row_keys[b] : 0;
    for (int h = g * R; h < (g + 1) * R; h++) {
        const float *dOb = dout + (size_t)b * T * C + (size_t)h * hs;
        const float *Ob = out + (size_t)b * T * C + (size_t)h * hs;
        for (int t0 = s; t0 < T; t0 += blockDim.x) {
            int t = t0 + threadIdx.x;
            if (t < T) {
                const float *q = base + (size_t)t * row + (size_t)h * hs;
                const float *dO = dOb + (size_t)t * C, *O = Ob + (size_t)t * C;
                float D = 0.0f, a = 0.0f, dvd = 0.0f;
                for (int c = 0; c < hs; c++)
                    D += dO[c] * O[c];
                for (int c = 0; c < hs; c++)
                    a = a + q[c] * ks[c];
                for (int c = 0; c < hs; c++)
                    dvd = dvd + dO[c] * vs[c];
                float pe = mds_expf(a * scale - lse[((size_t)b * NH + h) * T + t]);
                if (drop.p > 0.0f) {
                    uint64_t idx = ((uint64_t)(drop.head0 + h) * (uint64_t)T + (uint64_t)t) * (uint64_t)T + (uint64_t)s;
                    float m = mds_dropout_keep(rk, drop.site, idx, thr) ? dscale : 0.0f;
                    DS[threadIdx.x] = pe * (m * dvd - D) * scale;
                    P[threadIdx.x] = pe * m;
                } else {
                    DS[threadIdx.x] = pe * (dvd - D) * scale;
                    P[threadIdx.x] = pe;
                }
            }
            __syncthreads();
            int cnt = T - t0 < (int)blockDim.x ? T - t0 : (int)blockDim.x;
            if (i < hs)
                for (int j = 0; j < cnt; j++) {
                    size_t tt = (size_t)(t0 + j);
                    ak = ak + DS[j] * base[tt * row + (size_t)h * hs + i];
                    av = av + P[j] * dOb[tt * C + i];
                }
            __syncthreads();
        }
    }
    if (i < hs) {
        dk[i] = ak;
        dv[i] = av;
    }
}

/* Opts kernel k into `bytes` of dynamic shared memory when that is more
 * than the kernel may use by default: 48 KiB less its static shared memory
 * (the block reductions' partials, Dsh), which counts against the same
 * limit, as it does against the device's opt-in maximum; 0, or -1 with the
 * error noted when the device has less. */
static int att_smem(const void *k, size_t bytes, const char *what)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, k);
    if (e != cudaSuccess) {
        mds_cuda_note(e, what);
        return -1;
    }
    if (bytes <= (size_t)fa.maxDynamicSharedSizeBytes)
        return 0;
    int dev = 0, optin = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (bytes + fa.sharedSizeBytes > (size_t)optin) {
        static char msg[192];
        snprintf(msg, sizeof msg, "%s: a sequence this long needs %zu bytes of shared memory per block (and %zu "
                 "static), the device allows %d", what, bytes, fa.sharedSizeBytes, optin);
        mds_cuda_note(cudaErrorInvalidValue, msg);
        return -1;
    }
    mds_cuda_note(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), what);
    return 0;
}

static int att_check(int B, int T, int C, int NH, int NKV, const char *what)
{
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || C % NH || NH % NKV)
        return -1;
    if (B > 65535 || NH > 65535 || C / NH > 1024) {
        static char msg[128];
        snprintf(msg, sizeof msg, "%s: B %d, NH %d or head size %d beyond this kernel's limits", what, B, NH, C / NH);
        mds_cuda_note(cudaErrorInvalidValue, msg);
        return -1;
    }
    return 0;
}

void attention_forward_cuda(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV,
                            mds_dropout drop)
{
    if (att_check(B, T, C, NH, NKV, "attention_forward")) return;
    size_t smem = (size_t)T * sizeof(float);
    if (att_smem((const void *)attention_forward_kernel, smem, "attention_forward")) return;
    float scale = 1.0f / sqrtf((float)(C / NH));
    attention_forward_kernel<<<dim3(T, NH, B), ATT_THREADS, smem>>>(out, lse, qkv, T, C, NH, NKV, scale, drop,
                                                                     mds_dropout_threshold(drop.p),
                                                                     1.0f / (1.0f - drop.p));
    MDS_CU_LAUNCHED("attention_forward");
}

void attention_backward_cuda(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                             int B, int T, int C, int NH, int NKV, mds_dropout drop)
{
    if (att_check(B, T, C, NH, NKV, "attention_backward")) return;
    int hs = C / NH;
    size_t smem = (size_t)T * sizeof(float);
    if (att_smem((const void *)attention_backward_dq_kernel, smem, "attention_backward")) return;
    float scale = 1.0f / sqrtf((float)hs);
    uint32_t thr = mds_dropout_threshold(drop.p);
    float dscale = 1.0f / (1.0f - drop.p);
    attention_backward_dq_kernel<<<dim3(T, NH, B), ATT_THREADS, smem>>>(dqkv, dout, qkv, out, lse, T, C, NH, NKV,
                                                                         scale, drop, thr, dscale);
    MDS_CU_LAUNCHED("attention_backward (dq)");
    int nt = (hs + 31) / 32 * 32;
    nt = nt < 64 ? 64 : nt;
    attention_backward_dkv_kernel<<<dim3(T, NKV, B), nt, 2 * (size_t)nt * sizeof(float)>>>(
        dqkv, dout, qkv, out, lse, T, C, NH, NKV, scale, drop, thr, dscale);
    MDS_CU_LAUNCHED("attention_backward (dk, dv)");
}
