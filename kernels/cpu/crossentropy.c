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

void crossentropy_forward_cpu(float *losses, float *maxes, float *sumexp, float *tlogits,
                              const float *logits, const int *targets, const float *mask,
                              int B, int T, int V, int v_start)
{
    OMP(parallel for schedule(static))
    for (long bt = 0; bt < (long)B * T; bt++) {
        const float *l = logits + (size_t)bt * V;
        float mx = -INFINITY;
        for (int v = 0; v < V; v++)
            if (l[v] > mx)
                mx = l[v];
        double s = 0.0;
        for (int v = 0; v < V; v++)
            s += expf(l[v] - mx);
        long ix = (long)targets[bt] - v_start;
        float tl = ix >= 0 && ix < V ? l[ix] : 0.0f;
        maxes[bt] = mx;
        sumexp[bt] = (float)s;
        tlogits[bt] = tl;
        losses[bt] = mask && mask[bt] == 0.0f ? 0.0f : logf((float)s) + mx - tl;
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

/* Reads each logit before writing its gradient, so dlogits may be logits. */
void crossentropy_backward_cpu(float *dlogits, const float *logits, const float *maxes,
                               const float *sumexp, const int *targets, const float *dlosses,
                               int B, int T, int V, int v_start)
{
    OMP(parallel for schedule(static))
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
        for (int v = 0; v < V; v++) {
            float p = expf(l[v] - mx) * inv;
            dl[v] = (p - (v == ix ? 1.0f : 0.0f)) * d;
        }
    }
}
