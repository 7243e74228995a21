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
#include <stdlib.h>

#include "kernels.h"
#include "common.h"

/* The heavy loops are compiled for AVX-512, AVX2 and baseline x86-64 and
 * picked at load time; they are elementwise or reduce in a written order,
 * so every clone gives the same bits. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define ATT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ATT_CLONES
#endif

/* kT[i * T + s] = x[s * stride + i]: a head's keys (or values) transposed so
 * that the scores of consecutive keys are one vector. */
static void att_transpose(float *kT, const float *x, size_t stride, int T, int hs)
{
    for (int s = 0; s < T; s++)
        for (int i = 0; i < hs; i++)
            kT[(size_t)i * T + s] = x[(size_t)s * stride + i];
}

/* sc[s] = q . k_s for s < n, each summed over i = 0..hs-1 in order. */
ATT_CLONES
static void att_scores(float *sc, const float *q, const float *kT, int n, int T, int hs)
{
    for (int s = 0; s < n; s++)
        sc[s] = 0.0f;
    for (int i = 0; i < hs; i++) {
        float qi = q[i];
        const float *k = kT + (size_t)i * T;
        for (int s = 0; s < n; s++)
            sc[s] = sc[s] + qi * k[s];
    }
}

/* p[s] = exp(sc[s] * scale - sub); returns the sum in double, 16 interleaved
 * partial sums combined in order. */
ATT_CLONES
static double att_exp(float *p, const float *sc, int n, float scale, float sub)
{
    double acc[16] = {0};
    int s = 0;
    for (; s + 16 <= n; s += 16)
        for (int j = 0; j < 16; j++) {
            p[s + j] = mds_expf(sc[s + j] * scale - sub);
            acc[j] += p[s + j];
        }
    for (; s < n; s++) {
        p[s] = mds_expf(sc[s] * scale - sub);
        acc[0] += p[s];
    }
    double sum = 0.0;
    for (int j = 0; j < 16; j++)
        sum += acc[j];
    return sum;
}

/* o[i] += w[s] * x_s[i] over s < n in order (x_s at x + s * stride). */
ATT_CLONES
static void att_axpys(float *o, const float *w, const float *x, size_t stride, int n, int hs)
{
    for (int s = 0; s < n; s++) {
        float ws = w[s];
        const float *xs = x + (size_t)s * stride;
        for (int i = 0; i < hs; i++)
            o[i] = o[i] + ws * xs[i];
    }
}

/* dx_s[i] += w[s] * y[i] for s < n (dx_s at dx + s * stride). */
ATT_CLONES
static void att_outer(float *dx, const float *w, const float *y, size_t stride, int n, int hs)
{
    for (int s = 0; s < n; s++) {
        float ws = w[s];
        float *d = dx + (size_t)s * stride;
        for (int i = 0; i < hs; i++)
            d[i] = d[i] + ws * y[i];
    }
}

/*
 * Each task owns one (b, h) head and keeps its keys and values transposed
 * in scratch.  Per query row t: the scores q_t . k_s (each summed over the
 * head dimension in order), their max, p_s = exp(score - max) and its sum
 * (double, 16 interleaved partial sums), then out_t = (sum_s p_s v_s) / sum
 * with s in order.  No online softmax: no rescaling error.
 */
void attention_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    assert(NH > 0 && C % NH == 0);
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    OMP(parallel)
    {
        float *kT = malloc(((size_t)hs * T + 2 * (size_t)T) * sizeof(float));
        float *sc = kT + (size_t)hs * T, *p = sc + T;
        OMP(for collapse(2) schedule(dynamic, 1))
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                const float *base = qkv + (size_t)b * T * C3;
                const float *vb = base + 2 * (size_t)C + (size_t)h * hs;
                att_transpose(kT, base + C + (size_t)h * hs, C3, T, hs);
                for (int t = 0; t < T; t++) {
                    const float *q = base + (size_t)t * C3 + (size_t)h * hs;
                    float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                    att_scores(sc, q, kT, t + 1, T, hs);
                    float mx = -INFINITY;
                    for (int s = 0; s <= t; s++)
                        mx = sc[s] * scale > mx ? sc[s] * scale : mx;
                    double sum = att_exp(p, sc, t + 1, scale, mx);
                    for (int i = 0; i < hs; i++)
                        o[i] = 0.0f;
                    att_axpys(o, p, vb, C3, t + 1, hs);
                    float inv = (float)(1.0 / sum);
                    for (int i = 0; i < hs; i++)
                        o[i] *= inv;
                    lse[((size_t)b * NH + h) * T + t] = mx + (float)log(sum);
                }
            }
        free(kT);
    }
}

/*
 * With p_ts = exp(q_t.k_s * scale - lse_t) and D_t = dout_t . out_t
 * (= sum_s p_ts dout_t . v_s):
 *   dv_s += sum_t p_ts dout_t,
 *   ds_ts = p_ts (dout_t . v_s - D_t),
 *   dq_t += scale sum_s ds_ts k_s,  dk_s += scale sum_t ds_ts q_t.
 * dk and dv of key s collect from every query t >= s, so a task owns a whole
 * (b, h) head and walks t, then s, in order: no atomics, fixed order.  Dot
 * products over the head dimension run in order, like the forward's.
 */
void attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *out,
                            const float *lse, int B, int T, int C, int NH)
{
    assert(NH > 0 && C % NH == 0);
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    OMP(parallel)
    {
        float *kT = malloc((2 * (size_t)hs * T + 3 * (size_t)T) * sizeof(float));
        float *vT = kT + (size_t)hs * T, *sc = vT + (size_t)hs * T, *p = sc + T, *ds = p + T;
        OMP(for collapse(2) schedule(dynamic, 1))
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                const float *base = qkv + (size_t)b * T * C3;
                float *dbase = dqkv + (size_t)b * T * C3;
                size_t koff = C + (size_t)h * hs, voff = 2 * (size_t)C + (size_t)h * hs;
                att_transpose(kT, base + koff, C3, T, hs);
                att_transpose(vT, base + voff, C3, T, hs);
                for (int t = 0; t < T; t++) {
                    const float *q = base + (size_t)t * C3 + (size_t)h * hs;
                    float *dq = dbase + (size_t)t * C3 + (size_t)h * hs;
                    const float *dO = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                    const float *O = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                    float D = 0.0f;
                    for (int i = 0; i < hs; i++)
                        D += dO[i] * O[i];
                    float l = lse[((size_t)b * NH + h) * T + t];
                    att_scores(sc, q, kT, t + 1, T, hs);
                    att_exp(p, sc, t + 1, scale, l);
                    att_scores(ds, dO, vT, t + 1, T, hs);
                    for (int s = 0; s <= t; s++)
                        ds[s] = p[s] * (ds[s] - D) * scale;
                    att_axpys(dq, ds, base + koff, C3, t + 1, hs);
                    att_outer(dbase + koff, ds, q, C3, t + 1, hs);
                    att_outer(dbase + voff, p, dO, C3, t + 1, hs);
                }
            }
        free(kT);
    }
}
