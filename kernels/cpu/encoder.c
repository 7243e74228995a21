/*
 * encoder.c - CPU reference of the embedding: word (token) plus learned
 * absolute position embedding, forward and backward, vocab-parallel capable.
 *
 * It does not apply embedding dropout (hidden-dropout is 0 in tests) and does
 * not communicate: summing over tensor-parallel ranks is the caller's.
 */
#include <string.h>

#include "kernels.h"
#include "common.h"

/* Channels per task in the backward: 16 floats, one cache line of each row. */
#define ENC_CBLOCK 16

void encoder_forward_cpu(float *out, const int *inp, const float *wte, const float *wpe,
                         int B, int T, int C, int V, int v_start)
{
    OMP(parallel for schedule(static))
    for (long bt = 0; bt < (long)B * T; bt++) {
        int t = (int)(bt % T);
        float *o = out + (size_t)bt * C;
        long ix = (long)inp[bt] - v_start;
        const float *pos = wpe ? wpe + (size_t)t * C : NULL;
        if (ix >= 0 && ix < V) {
            const float *tok = wte + (size_t)ix * C;
            if (pos)
                for (int c = 0; c < C; c++)
                    o[c] = tok[c] + pos[c];
            else
                memcpy(o, tok, (size_t)C * sizeof *o);
        } else if (pos) {
            memcpy(o, pos, (size_t)C * sizeof *o);
        } else {
            memset(o, 0, (size_t)C * sizeof *o);
        }
    }
}

/*
 * Several tokens may share a vocabulary row, so rows cannot be given to
 * threads by token without atomics.  Instead each task owns a block of
 * channels and walks all tokens in (b, t) order: every element of dwte and
 * dwpe is summed in that one order whatever the thread count.
 */
void encoder_backward_cpu(float *dwte, float *dwpe, const float *dout, const int *inp,
                          int B, int T, int C, int V, int v_start)
{
    int nblocks = (C + ENC_CBLOCK - 1) / ENC_CBLOCK;
    OMP(parallel for schedule(static))
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * ENC_CBLOCK;
        int c1 = c0 + ENC_CBLOCK < C ? c0 + ENC_CBLOCK : C;
        for (long bt = 0; dwte && bt < (long)B * T; bt++) {
            long ix = (long)inp[bt] - v_start;
            if (ix < 0 || ix >= V)
                continue;
            const float *d = dout + (size_t)bt * C;
            float *w = dwte + (size_t)ix * C;
            for (int c = c0; c < c1; c++)
                w[c] += d[c];
        }
        if (dwpe)
            for (int t = 0; t < T; t++) {
                float *p = dwpe + (size_t)t * C;
                for (int b = 0; b < B; b++) {
                    const float *d = dout + ((size_t)b * T + t) * C;
                    for (int c = c0; c < c1; c++)
                        p[c] += d[c];
                }
            }
    }
}
