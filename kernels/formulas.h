/*
 * formulas.h - the element formulas that the CPU kernels (kernels/cpu/) and
 * the CUDA kernels (kernels/cuda/) compute alike, written once so that the
 * oracle and the GPU cannot drift apart: exp, one AdamW element, and the
 * cross-entropy loss of a row from its statistics.  Plain arithmetic: the CPU
 * build's -ffp-contract=off and nvcc's -fmad=false give the same bits on both
 * sides (the Makefile sets both).  Included by kernels/cpu/common.h and
 * kernels/cuda/common.cuh only.
 */
#ifndef MDS_KERNELS_FORMULAS_H
#define MDS_KERNELS_FORMULAS_H

#include <math.h>

/* Callable from CUDA device code too; plain C elsewhere (as kernels/dtype.h). */
#ifdef __CUDACC__
#define MDS_HD __host__ __device__
#else
#define MDS_HD
#endif

/*
 * exp(x) in float, branch-free so that loops over it vectorize (libm's
 * expf is a call per element): Cody-Waite reduction x = n ln2 + r, |r| <=
 * ln2/2, Cephes' degree-6 polynomial for e^r, then 2^n by exponent
 * arithmetic.  Relative error within 2 ulp of expf; 0 below -87.3 (no
 * subnormal results), +inf above 88.72, NaN stays NaN.
 */
static inline MDS_HD float mds_expf(float x)
{
    float xc = x < -87.3f ? -87.3f : (x > 88.72f ? 88.72f : x);
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    union { float f; int i; } u = { y }, inf;
    u.i += (int)n * (1 << 23);
    inf.i = 0x7f800000;
    y = x > 88.72f ? inf.f : u.f;
    y = x < -87.3f ? 0.0f : y;
    return x != x ? x : y;
}

/*
 * One element of PyTorch's AdamW (decoupled weight decay), as Megatron's
 * FusedAdam runs it: update = m_hat / (sqrt(v_hat) + eps) + wd * p, then
 * p -= lr * update; bc1, bc2 are the bias corrections 1 - beta^t.
 */
static inline MDS_HD void mds_adamw_elem(float *p, float *m, float *v, float grad, float lr, float beta1,
                                         float beta2, float eps, float weight_decay, float grad_scale,
                                         float bc1, float bc2)
{
    float g = grad * grad_scale;
    float mi = beta1 * *m + (1.0f - beta1) * g;
    float vi = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mi;
    *v = vi;
    float update = (mi / bc1) / (sqrtf(vi / bc2) + eps) + weight_decay * *p;
    *p -= lr * update;
}

/*
 * A cross-entropy row's target logit: l[target - v_start] when this rank's
 * vocabulary shard [v_start, v_start + V) holds the target, else 0 (the
 * vocabulary-parallel sum over ranks then adds it exactly once).
 */
static inline MDS_HD float mds_ce_target_logit(const float *l, long target, int V, int v_start)
{
    long ix = target - v_start;
    return ix >= 0 && ix < V ? l[ix] : 0.0f;
}

/* The row's loss log(sum exp(l - mx)) + mx - l[target]; 0 where masked out. */
static inline MDS_HD float mds_ce_loss(const float *mask, long bt, double sumexp, float mx, float tl)
{
    return mask && mask[bt] == 0.0f ? 0.0f : logf((float)sumexp) + mx - tl;
}

#endif
