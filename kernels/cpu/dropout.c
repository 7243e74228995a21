/*
 * dropout.c - CPU reference of hidden-state dropout with the counter-based
 * masks of kernels/dropout.h, forward and backward (the same mask, redrawn).
 *
 * It does not store masks (they are recomputed from the keys) and does not
 * implement attention-probability dropout (attention.c does, inside the
 * softmax) or fused bias-dropout-add.
 */
#include "kernels.h"
#include "common.h"

static void apply(float *out, const float *inp, int B, int T, int C, mds_dropout d)
{
    uint32_t thr = mds_dropout_threshold(d.p);
    float scale = 1.0f / (1.0f - d.p);
    OMP(parallel for schedule(static))
    for (long bt = 0; bt < (long)B * T; bt++) {
        uint64_t row = d.row_keys[bt / T];
        uint64_t base = ((uint64_t)(bt % T) + (uint64_t)d.t0) * (uint64_t)C;
        const float *x = inp + (size_t)bt * C;
        float *o = out + (size_t)bt * C;
        for (int c = 0; c < C; c++)
            o[c] = mds_dropout_keep(row, d.site, base + (uint64_t)c, thr) ? x[c] * scale : 0.0f;
    }
}

void dropout_forward_cpu(float *out, const float *inp, int B, int T, int C, mds_dropout drop)
{
    apply(out, inp, B, T, C, drop);
}

void dropout_backward_cpu(float *dinp, const float *dout, int B, int T, int C, mds_dropout drop)
{
    apply(dinp, dout, B, T, C, drop);
}
