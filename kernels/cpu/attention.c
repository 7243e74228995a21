/*
 * attention.c - CPU reference of causal multi-head self-attention (the core
 * between the QKV and output projections), forward and backward.
 *
 * It saves the per-row log-sum-exp instead of the (T, T) probabilities and
 * recomputes scores in the backward, like flash attention, so the CUDA
 * backend can keep the same arguments.  It does not implement attention
 * dropout, grouped-query attention, context parallelism or masks other than
 * causal.
 */
#include <assert.h>
#include <math.h>

#include "kernels.h"
#include "common.h"

static inline float dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/*
 * Each task owns one (b, t, h) output row.  Two passes over the keys (max,
 * then exp-sum and weighted values) rather than an online softmax: the
 * scores are recomputed, but there is no rescaling error and no scratch.
 */
void attention_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    assert(NH > 0 && C % NH == 0);
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    OMP(parallel for collapse(3) schedule(static))
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const float *base = qkv + (size_t)b * T * C3;
                const float *q = base + (size_t)t * C3 + (size_t)h * hs;
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                float mx = -INFINITY;
                for (int s = 0; s <= t; s++) {
                    float sc = dot(q, base + (size_t)s * C3 + C + (size_t)h * hs, hs) * scale;
                    if (sc > mx)
                        mx = sc;
                }
                for (int i = 0; i < hs; i++)
                    o[i] = 0.0f;
                double sum = 0.0;
                for (int s = 0; s <= t; s++) {
                    const float *k = base + (size_t)s * C3 + C + (size_t)h * hs;
                    const float *v = base + (size_t)s * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float p = expf(dot(q, k, hs) * scale - mx);
                    sum += p;
                    for (int i = 0; i < hs; i++)
                        o[i] += p * v[i];
                }
                float inv = (float)(1.0 / sum);
                for (int i = 0; i < hs; i++)
                    o[i] *= inv;
                lse[((size_t)b * NH + h) * T + t] = mx + (float)log(sum);
            }
}

/*
 * With p_ts = exp(q_t.k_s * scale - lse_t) and D_t = dout_t . out_t
 * (= sum_s p_ts dout_t . v_s):
 *   dv_s += sum_t p_ts dout_t,
 *   ds_ts = p_ts (dout_t . v_s - D_t),
 *   dq_t += scale sum_s ds_ts k_s,  dk_s += scale sum_t ds_ts q_t.
 * dk and dv of key s collect from every query t >= s, so a task owns a whole
 * (b, h) head and walks t, then s, in order: no atomics, fixed order.
 */
void attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *out,
                            const float *lse, int B, int T, int C, int NH)
{
    assert(NH > 0 && C % NH == 0);
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    OMP(parallel for collapse(2) schedule(static))
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *base = qkv + (size_t)b * T * C3;
            float *dbase = dqkv + (size_t)b * T * C3;
            for (int t = 0; t < T; t++) {
                const float *q = base + (size_t)t * C3 + (size_t)h * hs;
                float *dq = dbase + (size_t)t * C3 + (size_t)h * hs;
                const float *dO = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                const float *O = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                float D = dot(dO, O, hs);
                float l = lse[((size_t)b * NH + h) * T + t];
                for (int s = 0; s <= t; s++) {
                    size_t koff = (size_t)s * C3 + C + (size_t)h * hs;
                    size_t voff = (size_t)s * C3 + 2 * (size_t)C + (size_t)h * hs;
                    const float *k = base + koff, *v = base + voff;
                    float p = expf(dot(q, k, hs) * scale - l);
                    float ds = p * (dot(dO, v, hs) - D) * scale;
                    float *dk = dbase + koff, *dv = dbase + voff;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                        dv[i] += p * dO[i];
                    }
                }
            }
        }
}
