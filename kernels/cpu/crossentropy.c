/*
 * crossentropy.c - CPU reference of softmax cross-entropy over the
 * vocabulary (the language-model loss), forward and backward, on one
 * vocabulary shard so that it serves vocab-parallel training unchanged.
 *
 * It never materialises probabilities (the backward recomputes them from
 * the logits and the saved max / sum-exp) and does not communicate: the
 * reduction protocol is in kernels.h.  It does not reduce the per-token
 * losses to the mean (the caller does, with the loss mask).
 */
#include <math.h>

#include "kernels.h"
#include "common.h"

/* The two vocabulary-wide loops are compiled for AVX-512, AVX2 and baseline
 * x86-64 and picked at load time; they are elementwise or reduce in a
 * written order, so every clone gives the same bits. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define CE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CE_CLONES
#endif

/* max_v l[v] (max is exact, so the lane order does not matter) and
 * sum_v exp(l[v] - max) in double: 16 interleaved partial sums over v,
 * combined in order, then the tail. */
CE_CLONES
static void ce_row_stats(float *maxp, double *sump, const float *l, int V)
{
    float m[16];
    for (int j = 0; j < 16; j++)
        m[j] = -INFINITY;
    int v = 0;
    for (; v + 16 <= V; v += 16)
        for (int j = 0; j < 16; j++)
            m[j] = l[v + j] > m[j] ? l[v + j] : m[j];
    float mx = -INFINITY;
    for (int j = 0; j < 16; j++)
        mx = m[j] > mx ? m[j] : mx;
    for (; v < V; v++)
        mx = l[v] > mx ? l[v] : mx;
    double acc[16] = {0};
    v = 0;
    for (; v + 16 <= V; v += 16)
        for (int j = 0; j < 16; j++)
            acc[j] += mds_expf(l[v + j] - mx);
    double s = 0.0;
    for (int j = 0; j < 16; j++)
        s += acc[j];
    for (; v < V; v++)
        s += mds_expf(l[v] - mx);
    *maxp = mx;
    *sump = s;
}

/* dl[v] = exp(l[v] - mx) * inv * d; dl may be l. */
CE_CLONES
static void ce_row_grad(float *dl, const float *l, int V, float mx, float inv, float d)
{
    for (int v = 0; v < V; v++)
        dl[v] = mds_expf(l[v] - mx) * inv * d;
}

/* exp is mds_expf (common.h), within 2 ulp of expf and vectorisable: with a
 * 50304-wide vocabulary, libm's expf was a third of the step. */
void crossentropy_forward_cpu(float *losses, float *maxes, float *sumexp, float *tlogits,
                              const float *logits, const int *targets, const float *mask,
                              int B, int T, int V, int v_start)
{
    OMP(parallel for schedule(dynamic, 8))
    for (long bt = 0; bt < (long)B * T; bt++) {
        const float *l = logits + (size_t)bt * V;
        float mx;
        double s;
        ce_row_stats(&mx, &s, l, V);
        float tl = mds_ce_target_logit(l, targets[bt], V, v_start);
        maxes[bt] = mx;
        sumexp[bt] = (float)s;
        tlogits[bt] = tl;
        losses[bt] = mds_ce_loss(mask, bt, s, mx, tl);
    }
}

void crossentropy_rescale_cpu(float *sumexp, float *maxes, const float *gmax, int B, int T)
{
    for (long bt = 0; bt < (long)B * T; bt++) {
        sumexp[bt] *= expf(maxes[bt] - gmax[bt]);
        maxes[bt] = gmax[bt];
    }
}

void crossentropy_loss_cpu(float *losses, const float *maxes, const float *sumexp,
                           const float *tlogits, const float *mask, int B, int T)
{
    for (long bt = 0; bt < (long)B * T; bt++)
        losses[bt] = mask && mask[bt] == 0.0f ? 0.0f : logf(sumexp[bt]) + maxes[bt] - tlogits[bt];
}

/* Reads each logit before writing its gradient, so dlogits may be logits.
 * The target column is (p - 1) * d, from the logit saved before the row is
 * overwritten. */
void crossentropy_backward_cpu(float *dlogits, const float *logits, const float *maxes,
                               const float *sumexp, const int *targets, const float *dlosses,
                               int B, int T, int V, int v_start)
{
    OMP(parallel for schedule(dynamic, 8))
    for (long bt = 0; bt < (long)B * T; bt++) {
        const float *l = logits + (size_t)bt * V;
        float *dl = dlogits + (size_t)bt * V;
        float d = dlosses[bt];
        if (d == 0.0f) {
            for (int v = 0; v < V; v++)
                dl[v] = 0.0f;
            continue;
        }
        float mx = maxes[bt], inv = 1.0f / sumexp[bt];
        long ix = (long)targets[bt] - v_start;
        float lt = ix >= 0 && ix < V ? l[ix] : 0.0f;
        ce_row_grad(dl, l, V, mx, inv, d);
        if (ix >= 0 && ix < V)
            dl[ix] = (mds_expf(lt - mx) * inv - 1.0f) * d;
    }
}
