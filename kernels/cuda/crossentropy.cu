/*
 * crossentropy.cu - CUDA softmax cross-entropy over a vocabulary shard,
 * forward, the vocab-parallel rescale and loss steps, and backward
 * (kernels.h's protocol; nothing here communicates).
 *
 * One block per token row.  The max is exact; sum-exp accumulates in double
 * with the fixed-order mds_cu_block_sum (the CPU's sum up to double
 * rounding), with mds_expf, the CPU's exp.  The backward overwrites
 * dlogits and may run in place: each element is read and written by the
 * same thread, and the target logit is read before the block writes
 * anything.  The logits and their gradient may be stored as 16-bit values
 * (backend.h's stored dtypes; the kernels are instantiated per dtype).
 * A 16-bit row that fits is kept in shared memory by the forward's max
 * pass for its sum (the logits read once), and crossentropy_fused writes
 * the row's gradient from there too (one read and one write of the logits
 * for the loss and its gradient, where the two kernels made two reads and
 * a write).  Not fused with the classifier matmul.
 */
#include <math.h>

#include "common.cuh"

/* A thread's elements v, v + st, ..., v + (MDS_CU_ILP - 1) st of a row
 * (stored as LD: backend.h's stored dtypes) are loaded together
 * (common.cuh) and then used in that order (each thread's sequence and so
 * every sum as before, bit for bit). */
template <int LD>
__device__ static inline void ce_fetch(float (&x)[MDS_CU_ILP], const void *l, int v, int st)
{
    for (int k = 0; k < MDS_CU_ILP; k++)
        x[k] = mds_load(LD, l, v + k * st);
}

/* Row bt of the logits (V wide, stored as LD). */
template <int LD>
__device__ static inline const void *ce_row(const void *logits, size_t bt, int V)
{
    return (const char *)logits + bt * V * mds_dtype_size(LD);
}

/* ROW: the 16-bit row (vec) is kept whole in shared memory (dynamic, V / 8
 * uint4s) by the max pass, and the sum reads it from there: the logits
 * are read from memory once, not twice; the same elements in the same
 * order, so the same bits (crossentropy_forward_cuda's `row` says when).
 * BWD (with ROW; crossentropy_fused): then the row's gradient is written
 * over it from the kept row, with dlosses[bt] as ce_backward_kernel
 * writes it (the same expressions on the same values: maxes[bt], 1 /
 * sumexp[bt], the target's logit; the same bits). */
template <int LD, bool ROW, bool BWD = false>
__global__ static void ce_forward_kernel(float *losses, float *maxes, float *sumexp, float *tlogits,
                                         const void *logits, const int *targets, const float *mask, int V,
                                         int v_start, int vec, const float *dlosses)
{
    static_assert(ROW || !BWD, "the fused gradient is written from the kept row");
    extern __shared__ uint4 ce_sm[];
    size_t bt = blockIdx.x;
    const void *l = ce_row<LD>(logits, bt, V);
    const int st = blockDim.x;
    float mx = -INFINITY, x[MDS_CU_ILP];
    int v = threadIdx.x;
    if (vec) {   /* (the max is exact: any order gives it) */
        const uint4 *l8 = (const uint4 *)l;
        int V8 = V / 8;
        constexpr int NW = ROW ? 4 : 2;   /* loads in flight a thread (ROW: fewer blocks an SM) */
        for (; v + (NW - 1) * st < V8; v += NW * st) {
            uint4 w[NW];
            for (int k = 0; k < NW; k++)
                w[k] = l8[v + k * st];
            for (int k = 0; k < NW; k++) {
                float y[8];
                if (ROW)
                    ce_sm[v + k * st] = w[k];
                mds_cu_unpack8<LD>(y, w[k]);
                for (int e = 0; e < 8; e++)
                    mx = y[e] > mx ? y[e] : mx;
            }
        }
        for (; v < V8; v += st) {
            float y[8];
            uint4 w = l8[v];
            if (ROW)
                ce_sm[v] = w;
            mds_cu_unpack8<LD>(y, w);
            for (int e = 0; e < 8; e++)
                mx = y[e] > mx ? y[e] : mx;
        }
    } else {
        for (; v + (MDS_CU_ILP - 1) * st < V; v += MDS_CU_ILP * st) {
            ce_fetch<LD>(x, l, v, st);
            for (int k = 0; k < MDS_CU_ILP; k++)
                mx = x[k] > mx ? x[k] : mx;
        }
        for (; v < V; v += st) {
            float y = mds_load(LD, l, v);
            mx = y > mx ? y : mx;
        }
    }
    mx = mds_cu_block_max(mx);
    double s = 0.0;
    if (vec) {
        /* The sum adds each thread's elements v, v + st, ... in order (the
           bits of the loop below), two chunks of 8 st elements at a time,
           each thread taking its 8 elements of a chunk from shared memory:
           from the row the max pass kept there (ROW), else from the chunk
           staged a uint4 a thread. */
        __shared__ uint4 stage[2][MDS_CU_THREADS];
        const uint4 *l8 = (const uint4 *)l;
        int V8 = V / 8;
        if (ROW)
            __syncthreads();   /* the kept row whole */
        for (int c8 = 0; c8 < V8; c8 += 2 * st) {
            if (!ROW) {
                for (int h = 0; h < 2; h++)
                    if (c8 + h * st + (int)threadIdx.x < V8)
                        stage[h][threadIdx.x] = l8[c8 + h * st + threadIdx.x];
                __syncthreads();
            }
            for (int h = 0; h < 2; h++) {
                int n = V - 8 * (c8 + h * st);   /* elements left from this chunk's first */
                const uint4 *chunk = ROW ? ce_sm + c8 + h * st : stage[h];
                for (int k = 0; k < 8; k++) {
                    int e = (int)threadIdx.x + k * st;
                    if (e < n)
                        s += mds_expf(mds_load(LD, chunk, e) - mx);
                }
            }
            if (!ROW)
                __syncthreads();
        }
    } else {
        for (v = threadIdx.x; v + (MDS_CU_ILP - 1) * st < V; v += MDS_CU_ILP * st) {
            ce_fetch<LD>(x, l, v, st);
            for (int k = 0; k < MDS_CU_ILP; k++)
                s += mds_expf(x[k] - mx);
        }
        for (; v < V; v += st)
            s += mds_expf(mds_load(LD, l, v) - mx);
    }
    s = mds_cu_block_sum<double>(s);
    long ix = (long)targets[bt] - v_start;   /* (formulas.h's mds_ce_target_logit, on a stored row) */
    int has = ix >= 0 && ix < V;
    if (threadIdx.x == 0) {
        /* (BWD: from the kept row, as the row in memory is about to be written) */
        float tl = has ? mds_load(LD, BWD ? (const void *)ce_sm : l, ix) : 0.0f;
        maxes[bt] = mx;
        sumexp[bt] = (float)s;
        tlogits[bt] = tl;
        losses[bt] = mds_ce_loss(mask, bt, s, mx, tl);
    }
    if (!BWD)
        return;
    /* ce_backward_kernel's vec path, reading the kept row */
    uint4 *d8 = (uint4 *)l;
    int V8 = V / 8;
    float d = dlosses[bt];
    if (d == 0.0f) {
        for (v = threadIdx.x; v < V8; v += st)
            d8[v] = make_uint4(0u, 0u, 0u, 0u);   /* (+0 as either 16-bit type) */
        return;
    }
    float inv = 1.0f / (float)s;
    for (v = threadIdx.x; v < V8; v += st) {
        float y[8];
        mds_cu_unpack8<LD>(y, ce_sm[v]);
        for (int e = 0; e < 8; e++)
            y[e] = mds_expf(y[e] - mx) * inv * d;
        d8[v] = mds_cu_pack8<LD>(y);
    }
    __syncthreads();
    if (threadIdx.x == 0 && has)
        mds_cu_put((void *)l, LD, ix, (mds_expf(mds_load(LD, (const void *)ce_sm, ix) - mx) * inv - 1.0f) * d, LD);
}

#ifndef MDS_CU_CE_ROW   /* 0 at build time: the row read twice (the device's A/B runs) */
#define MDS_CU_CE_ROW 1
#endif
/* the most shared memory a block keeps a row in: two blocks an SM (228 KiB
   on an H100 or H200, 1 KiB a block reserved, the sum's 8 KiB static) */
#define CE_ROW_MAX ((size_t)104 << 10)

void crossentropy_forward_cuda(float *losses, float *maxes, float *sumexp, float *tlogits, const void *logits,
                               int logits_dt, const int *targets, const float *mask, int B, int T, int V,
                               int v_start)
{
    size_t n = (size_t)B * T;
    if (!n) return;
    /* vec: 16-bit rows read 8 elements a uint4 (rows of V a multiple of 8,
       16-byte aligned); blocks of MDS_CU_THREADS (the sum's staging); row:
       such a row kept whole in shared memory where two blocks of it fit
       an SM (GPT-2's 50,304 bf16 logits, 98 KiB; not Llama 3's 128,256) */
    int vec = logits_dt != MDS_F32 && V % 8 == 0 && mds_cu_al16(logits);
    size_t rb = vec ? (size_t)V * 2 : 0;
    int row = MDS_CU_CE_ROW && vec && rb <= CE_ROW_MAX;
    auto kernel = logits_dt == MDS_BF16 ? (row ? ce_forward_kernel<MDS_BF16, true> : ce_forward_kernel<MDS_BF16, false>)
                : logits_dt == MDS_F16  ? (row ? ce_forward_kernel<MDS_F16, true> : ce_forward_kernel<MDS_F16, false>)
                                        : ce_forward_kernel<MDS_F32, false>;
    if (row && mds_cu_smem((const void *)kernel, rb, "crossentropy_forward"))
        return;
    kernel<<<(unsigned)n, MDS_CU_THREADS, row ? rb : 0>>>(losses, maxes, sumexp, tlogits, logits, targets, mask, V,
                                                           v_start, vec, (const float *)NULL);
    MDS_CU_LAUNCHED("crossentropy_forward");
}

__global__ static void ce_rescale_kernel(float *sumexp, float *maxes, const float *gmax, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        sumexp[i] *= expf(maxes[i] - gmax[i]);
        maxes[i] = gmax[i];
    }
}

void crossentropy_rescale_cuda(float *sumexp, float *maxes, const float *gmax, int B, int T)
{
    size_t n = (size_t)B * T;
    if (!n) return;
    ce_rescale_kernel<<<mds_cu_blocks(n, 256), 256>>>(sumexp, maxes, gmax, n);
    MDS_CU_LAUNCHED("crossentropy_rescale");
}

__global__ static void ce_loss_kernel(float *losses, const float *maxes, const float *sumexp, const float *tlogits,
                                      const float *mask, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        losses[i] = mask && mask[i] == 0.0f ? 0.0f : logf(sumexp[i]) + maxes[i] - tlogits[i];
}

void crossentropy_loss_cuda(float *losses, const float *maxes, const float *sumexp, const float *tlogits,
                            const float *mask, int B, int T)
{
    size_t n = (size_t)B * T;
    if (!n) return;
    ce_loss_kernel<<<mds_cu_blocks(n, 256), 256>>>(losses, maxes, sumexp, tlogits, mask, n);
    MDS_CU_LAUNCHED("crossentropy_loss");
}

/* dlogits and logits both stored as LD (rows bt * V elements in).  vec:
 * LD is the 16-bit compute dtype, V a multiple of 8 and both rows 16-byte
 * aligned, so each thread's elements go 8 a uint4 (common.cuh's
 * mds_cu_unpack8), two uint4s at a time; the same expressions either way. */
template <int LD>
__global__ static void ce_backward_kernel(void *dlogits, const void *logits, const float *maxes,
                                          const float *sumexp, const int *targets, const float *dlosses, int V,
                                          int v_start, int dt, int vec)
{
    size_t bt = blockIdx.x, row = bt * V;
    const void *l = ce_row<LD>(logits, bt, V);
    const uint4 *l8 = (const uint4 *)l;
    uint4 *d8 = (uint4 *)ce_row<LD>(dlogits, bt, V);
    const int st = blockDim.x, V8 = V / 8;
    float d = dlosses[bt];
    if (d == 0.0f) {
        if (vec)
            for (int v = threadIdx.x; v < V8; v += st)
                d8[v] = make_uint4(0u, 0u, 0u, 0u);   /* (+0 as either 16-bit type) */
        else
            for (int v = threadIdx.x; v < V; v += st)
                mds_cu_put(dlogits, LD, row + v, 0.0f, dt);
        return;
    }
    float mx = maxes[bt], inv = 1.0f / sumexp[bt];
    long ix = (long)targets[bt] - v_start;
    int has = ix >= 0 && ix < V;
    float lt = has ? mds_load(LD, l, ix) : 0.0f;
    __syncthreads();   /* every thread holds lt before any writes */
    int v = threadIdx.x;
    if (vec) {   /* (in place, the same elements this thread writes next) */
        for (; v < V8; v += 2 * st) {
            uint4 w[2] = {l8[v], v + st < V8 ? l8[v + st] : make_uint4(0u, 0u, 0u, 0u)};
            for (int k = 0; k < 2 && v + k * st < V8; k++) {
                float x[8];
                mds_cu_unpack8<LD>(x, w[k]);
                for (int e = 0; e < 8; e++)
                    x[e] = mds_expf(x[e] - mx) * inv * d;
                d8[v + k * st] = mds_cu_pack8<LD>(x);
            }
        }
    } else {
        float x[MDS_CU_ILP];
        for (; v + (MDS_CU_ILP - 1) * st < V; v += MDS_CU_ILP * st) {
            ce_fetch<LD>(x, l, v, st);
            for (int k = 0; k < MDS_CU_ILP; k++)
                mds_cu_put(dlogits, LD, row + v + k * st, mds_expf(x[k] - mx) * inv * d, dt);
        }
        for (; v < V; v += st)
            mds_cu_put(dlogits, LD, row + v, mds_expf(mds_load(LD, l, v) - mx) * inv * d, dt);
    }
    __syncthreads();
    if (threadIdx.x == 0 && has)
        mds_cu_put(dlogits, LD, row + ix, (mds_expf(lt - mx) * inv - 1.0f) * d, dt);
}

void crossentropy_backward_cuda(void *dlogits, const void *logits, int dt, const float *maxes, const float *sumexp,
                                const int *targets, const float *dlosses, int B, int T, int V, int v_start)
{
    size_t n = (size_t)B * T;
    if (!n) return;
    int kd = mds_cuda_compute_dtype(), vec = dt != MDS_F32 && dt == kd && V % 8 == 0 && mds_cu_al16(dlogits) &&
                                       mds_cu_al16(logits);
    auto kernel = dt == MDS_BF16 ? ce_backward_kernel<MDS_BF16>
                : dt == MDS_F16  ? ce_backward_kernel<MDS_F16>
                                 : ce_backward_kernel<MDS_F32>;
    kernel<<<(unsigned)n, MDS_CU_THREADS>>>(dlogits, logits, maxes, sumexp, targets, dlosses, V, v_start, kd, vec);
    MDS_CU_LAUNCHED("crossentropy_backward");
}

/* backend.h's crossentropy_fused: in one kernel where the forward keeps
 * the row (and the logits are the compute dtype, as the backward's vec
 * path needs), else the two kernels. */
#ifndef MDS_CU_CE_FUSED   /* 0 at build time: the forward and backward kernels apart (the device's A/B runs) */
#define MDS_CU_CE_FUSED 1
#endif

void crossentropy_fused_cuda(float *losses, float *maxes, float *sumexp, float *tlogits, void *logits, int dt,
                             const int *targets, const float *mask, const float *dlosses, int B, int T, int V,
                             int v_start)
{
    size_t n = (size_t)B * T, rb = (size_t)V * 2;
    if (!n) return;
    int kd = mds_cuda_compute_dtype();
    if (MDS_CU_CE_FUSED && MDS_CU_CE_ROW && dt != MDS_F32 && dt == kd && V % 8 == 0 && mds_cu_al16(logits) &&
        rb <= CE_ROW_MAX) {
        auto kernel = dt == MDS_BF16 ? ce_forward_kernel<MDS_BF16, true, true> : ce_forward_kernel<MDS_F16, true, true>;
        if (mds_cu_smem((const void *)kernel, rb, "crossentropy_fused"))
            return;
        kernel<<<(unsigned)n, MDS_CU_THREADS, rb>>>(losses, maxes, sumexp, tlogits, logits, targets, mask, V,
                                                   v_start, 1, dlosses);
        MDS_CU_LAUNCHED("crossentropy_fused");
        return;
    }
    crossentropy_forward_cuda(losses, maxes, sumexp, tlogits, logits, dt, targets, mask, B, T, V, v_start);
    crossentropy_backward_cuda(logits, logits, dt, maxes, sumexp, targets, dlosses, B, T, V, v_start);
}
