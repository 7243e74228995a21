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
 * anything.  Deliberately simple: not fused with the classifier matmul.
 */
#include <math.h>

#include "common.cuh"

/* A thread's elements v, v + st, ..., v + (MDS_CU_ILP - 1) st of a row
 * are loaded together (common.cuh) and then used in that order (each
 * thread's sequence and so every sum as before, bit for bit). */
__device__ static inline void ce_fetch(float (&x)[MDS_CU_ILP], const float *l, int v, int st)
{
    for (int k = 0; k < MDS_CU_ILP; k++)
        x[k] = l[v + k * st];
}

__global__ static void ce_forward_kernel(float *losses, float *maxes, float *sumexp, float *tlogits,
                                         const float *logits, const int *targets, const float *mask, int V,
                                         int v_start)
{
    size_t bt = blockIdx.x;
    const float *l = logits + bt * V;
    const int st = blockDim.x;
    float mx = -INFINITY, x[MDS_CU_ILP];
    int v = threadIdx.x;
    for (; v + (MDS_CU_ILP - 1) * st < V; v += MDS_CU_ILP * st) {
        ce_fetch(x, l, v, st);
        for (int k = 0; k < MDS_CU_ILP; k++)
            mx = x[k] > mx ? x[k] : mx;
    }
    for (; v < V; v += st)
        mx = l[v] > mx ? l[v] : mx;
    mx = mds_cu_block_max(mx);
    double s = 0.0;
    for (v = threadIdx.x; v + (MDS_CU_ILP - 1) * st < V; v += MDS_CU_ILP * st) {
        ce_fetch(x, l, v, st);
        for (int k = 0; k < MDS_CU_ILP; k++)
            s += mds_expf(x[k] - mx);
    }
    for (; v < V; v += st)
        s += mds_expf(l[v] - mx);
    s = mds_cu_block_sum<double>(s);
    if (threadIdx.x == 0) {
        float tl = mds_ce_target_logit(l, targets[bt], V, v_start);
        maxes[bt] = mx;
        sumexp[bt] = (float)s;
        tlogits[bt] = tl;
        losses[bt] = mds_ce_loss(mask, bt, s, mx, tl);
    }
}

void crossentropy_forward_cuda(float *losses, float *maxes, float *sumexp, float *tlogits, const float *logits,
                               const int *targets, const float *mask, int B, int T, int V, int v_start)
{
    size_t n = (size_t)B * T;
    if (!n) return;
    ce_forward_kernel<<<(unsigned)n, MDS_CU_THREADS>>>(losses, maxes, sumexp, tlogits, logits, targets, mask, V,
                                                       v_start);
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

__global__ static void ce_backward_kernel(float *dlogits, const float *logits, const float *maxes,
                                          const float *sumexp, const int *targets, const float *dlosses, int V,
                                          int v_start, int dt)
{
    size_t bt = blockIdx.x;
    const float *l = logits + bt * V;
    float *dl = dlogits + bt * V;
    float d = dlosses[bt];
    if (d == 0.0f) {
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            dl[v] = 0.0f;
        return;
    }
    float mx = maxes[bt], inv = 1.0f / sumexp[bt];
    long ix = (long)targets[bt] - v_start;
    int has = ix >= 0 && ix < V;
    float lt = has ? l[ix] : 0.0f;
    __syncthreads();   /* every thread holds lt before any writes */
    const int st = blockDim.x;
    float x[MDS_CU_ILP];
    int v = threadIdx.x;
    for (; v + (MDS_CU_ILP - 1) * st < V; v += MDS_CU_ILP * st) {
        ce_fetch(x, l, v, st);   /* (in place, the same elements this thread writes next) */
        for (int k = 0; k < MDS_CU_ILP; k++)
            dl[v + k * st] = mds_round_to(dt, mds_expf(x[k] - mx) * inv * d);
    }
    for (; v < V; v += st)
        dl[v] = mds_round_to(dt, mds_expf(l[v] - mx) * inv * d);
    __syncthreads();
    if (threadIdx.x == 0 && has)
        dl[ix] = mds_round_to(dt, (mds_expf(lt - mx) * inv - 1.0f) * d);
}

void crossentropy_backward_cuda(float *dlogits, const float *logits, const float *maxes, const float *sumexp,
                                const int *targets, const float *dlosses, int B, int T, int V, int v_start)
{
    size_t n = (size_t)B * T;
    if (!n) return;
    ce_backward_kernel<<<(unsigned)n, MDS_CU_THREADS>>>(dlogits, logits, maxes, sumexp, targets, dlosses, V,
                                                        v_start, mds_cuda_compute_dtype());
    MDS_CU_LAUNCHED("crossentropy_backward");
}
