/*
 * attention.c - CPU reference of causal multi-head self-attention (the core
 * between the QKV and output projections), forward and backward.
 *
 * It saves the per-row log-sum-exp instead of the (T, T) probabilities and
 * recomputes scores in the backward, like flash attention, so the CUDA
 * backend can keep the same arguments.  Grouped-query attention: NKV key/
 * value heads, each serving NH/NKV consecutive query heads.  Attention
 * dropout on the probabilities, with the counter-based masks of dropout.h
 * (redrawn in the backward).  It does not implement context parallelism or
 * masks other than causal.
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

/* 16 floats as one GCC vector (unaligned, may alias float): a plain
 * multiply and add per lane, so any instruction set gives the same bits. */
typedef float att_v16 __attribute__((vector_size(64), aligned(4), may_alias));

/* sc[s] = q . k_s for s < n, each summed over i = 0..hs-1 in order, 64 keys
 * at a time held in registers; the rest one key at a time, same order. */
ATT_CLONES
static void att_scores(float *sc, const float *q, const float *kT, int n, int T, int hs)
{
    int s0 = 0;
    for (; s0 + 64 <= n; s0 += 64) {
        att_v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int i = 0; i < hs; i++) {
            const float *k = kT + (size_t)i * T + s0;
            float qi = q[i];
            a0 = a0 + qi * *(const att_v16 *)k;
            a1 = a1 + qi * *(const att_v16 *)(k + 16);
            a2 = a2 + qi * *(const att_v16 *)(k + 32);
            a3 = a3 + qi * *(const att_v16 *)(k + 48);
        }
        *(att_v16 *)(sc + s0) = a0;
        *(att_v16 *)(sc + s0 + 16) = a1;
        *(att_v16 *)(sc + s0 + 32) = a2;
        *(att_v16 *)(sc + s0 + 48) = a3;
    }
    for (int s = s0; s < n; s++)
        sc[s] = 0.0f;
    for (int i = 0; i < hs; i++) {
        float qi = q[i];
        const float *k = kT + (size_t)i * T;
        for (int s = s0; s < n; s++)
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

/* o[i] += w[s] * x_s[i] over s < n in order (x_s at x + s * stride); a
 * 64-wide head keeps o in registers across s. */
ATT_CLONES
static void att_axpys(float *o, const float *w, const float *x, size_t stride, int n, int hs)
{
    if (hs == 64) {
        att_v16 o0 = *(att_v16 *)o, o1 = *(att_v16 *)(o + 16);
        att_v16 o2 = *(att_v16 *)(o + 32), o3 = *(att_v16 *)(o + 48);
        for (int s = 0; s < n; s++) {
            const float *xs = x + (size_t)s * stride;
            float ws = w[s];
            o0 = o0 + ws * *(const att_v16 *)xs;
            o1 = o1 + ws * *(const att_v16 *)(xs + 16);
            o2 = o2 + ws * *(const att_v16 *)(xs + 32);
            o3 = o3 + ws * *(const att_v16 *)(xs + 48);
        }
        *(att_v16 *)o = o0;
        *(att_v16 *)(o + 16) = o1;
        *(att_v16 *)(o + 32) = o2;
        *(att_v16 *)(o + 48) = o3;
        return;
    }
    for (int s = 0; s < n; s++) {
        float ws = w[s];
        const float *xs = x + (size_t)s * stride;
        for (int i = 0; i < hs; i++)
            o[i] = o[i] + ws * xs[i];
    }
}

/*
 * dx_s[i] += w_t[s] * y_t[i] for the queries t of one tile [t0, t1), t in
 * order, and every key s <= t (w_t is row t - t0 of w, ld T; y_t at y + t *
 * ystride).  The same per-element sequence as one rank-1 update per query,
 * but each dx row is loaded and stored once per tile, not once per query.
 */
ATT_CLONES
static void att_outer_tile(float *dx, size_t dstride, const float *w, const float *y,
                           size_t ystride, int t0, int t1, int T, int hs)
{
    for (int s = 0; s < t1; s++) {
        float *d = dx + (size_t)s * dstride;
        int tb = s > t0 ? s : t0;
        if (hs == 64) {
            att_v16 d0 = *(att_v16 *)d, d1 = *(att_v16 *)(d + 16);
            att_v16 d2 = *(att_v16 *)(d + 32), d3 = *(att_v16 *)(d + 48);
            for (int t = tb; t < t1; t++) {
                float ws = w[(size_t)(t - t0) * T + s];
                const float *yt = y + (size_t)t * ystride;
                d0 = d0 + ws * *(const att_v16 *)yt;
                d1 = d1 + ws * *(const att_v16 *)(yt + 16);
                d2 = d2 + ws * *(const att_v16 *)(yt + 32);
                d3 = d3 + ws * *(const att_v16 *)(yt + 48);
            }
            *(att_v16 *)d = d0;
            *(att_v16 *)(d + 16) = d1;
            *(att_v16 *)(d + 32) = d2;
            *(att_v16 *)(d + 48) = d3;
            continue;
        }
        for (int t = tb; t < t1; t++) {
            float ws = w[(size_t)(t - t0) * T + s];
            const float *yt = y + (size_t)t * ystride;
            for (int i = 0; i < hs; i++)
                d[i] = d[i] + ws * yt[i];
        }
    }
}

/* Queries per tile in the backward (att_outer_tile). */
#define ATT_TQ 16

/*
 * Each task owns one (b, h) head and keeps its group's keys transposed in
 * scratch.  Per query row t: the scores q_t . k_s (each summed over the head
 * dimension in order), their max, p_s = exp(score - max) and its sum
 * (double, 16 interleaved partial sums), then out_t = (sum_s p_s v_s) / sum
 * with s in order.  No online softmax: no rescaling error.
 */
/* Attention dropout: p[s] of query t, head hg (global) of row b becomes
 * p[s] * scale where kept and 0 where dropped. */
static void att_drop_row(float *p, int n, const mds_dropout *d, int b, int hg, int t, int T, uint32_t thr,
                         float scale)
{
    uint64_t row = d->row_keys[b], base = ((uint64_t)hg * (uint64_t)T + (uint64_t)t) * (uint64_t)T;
    for (int s = 0; s < n; s++)
        p[s] = mds_dropout_keep(row, d->site, base + (uint64_t)s, thr) ? p[s] * scale : 0.0f;
}

void attention_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV,
                           mds_dropout drop)
{
    uint32_t thr = mds_dropout_threshold(drop.p);
    float dscale = 1.0f / (1.0f - drop.p);
    assert(NH > 0 && C % NH == 0 && NKV > 0 && NH % NKV == 0);
    int hs = C / NH, R = NH / NKV;
    size_t row = (size_t)C + 2 * (size_t)NKV * hs;
    float scale = 1.0f / sqrtf((float)hs);
    OMP(parallel)
    {
        float *kT = malloc(((size_t)hs * T + 2 * (size_t)T) * sizeof(float));
        float *sc = kT + (size_t)hs * T, *p = sc + T;
        OMP(for collapse(2) schedule(dynamic, 1))
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                int g = h / R;
                const float *base = qkv + (size_t)b * T * row;
                const float *vb = base + (size_t)C + ((size_t)NKV + g) * hs;
                att_transpose(kT, base + C + (size_t)g * hs, row, T, hs);
                for (int t = 0; t < T; t++) {
                    const float *q = base + (size_t)t * row + (size_t)h * hs;
                    float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                    att_scores(sc, q, kT, t + 1, T, hs);
                    float mx = -INFINITY;
                    for (int s = 0; s <= t; s++)
                        mx = sc[s] * scale > mx ? sc[s] * scale : mx;
                    double sum = att_exp(p, sc, t + 1, scale, mx);
                    if (drop.p > 0.0f)
                        att_drop_row(p, t + 1, &drop, b, drop.head0 + h, t, T, thr, dscale);
                    for (int i = 0; i < hs; i++)
                        o[i] = 0.0f;
                    att_axpys(o, p, vb, row, t + 1, hs);
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
 * dk and dv of key s collect from every query t >= s of every head of the
 * group, so a task owns a whole (b, group) and walks its heads in order,
 * then t, then s: no atomics, a fixed order.  Dot products over the head
 * dimension run in order, like the forward's.
 */
void attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *out,
                            const float *lse, int B, int T, int C, int NH, int NKV, mds_dropout drop)
{
    uint32_t thr = mds_dropout_threshold(drop.p);
    float dscale = 1.0f / (1.0f - drop.p);
    assert(NH > 0 && C % NH == 0 && NKV > 0 && NH % NKV == 0);
    int hs = C / NH, R = NH / NKV;
    size_t row = (size_t)C + 2 * (size_t)NKV * hs;
    float scale = 1.0f / sqrtf((float)hs);
    OMP(parallel)
    {
        float *kT = malloc((2 * (size_t)hs * T + (1 + 2 * (size_t)ATT_TQ) * T) * sizeof(float));
        float *vT = kT + (size_t)hs * T, *sc = vT + (size_t)hs * T;
        float *P = sc + T, *DS = P + (size_t)ATT_TQ * T;
        OMP(for collapse(2) schedule(dynamic, 1))
        for (int b = 0; b < B; b++)
            for (int g = 0; g < NKV; g++) {
                const float *base = qkv + (size_t)b * T * row;
                float *dbase = dqkv + (size_t)b * T * row;
                size_t koff = (size_t)C + (size_t)g * hs, voff = (size_t)C + ((size_t)NKV + g) * hs;
                att_transpose(kT, base + koff, row, T, hs);
                att_transpose(vT, base + voff, row, T, hs);
                for (int h = g * R; h < (g + 1) * R; h++) {
                    const float *dbO = dout + (size_t)b * T * C + (size_t)h * hs;
                    for (int t0 = 0; t0 < T; t0 += ATT_TQ) {
                        int t1 = t0 + ATT_TQ < T ? t0 + ATT_TQ : T;
                        for (int t = t0; t < t1; t++) {
                            const float *q = base + (size_t)t * row + (size_t)h * hs;
                            float *dq = dbase + (size_t)t * row + (size_t)h * hs;
                            const float *dO = dbO + (size_t)t * C;
                            const float *O = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                            float *p = P + (size_t)(t - t0) * T, *ds = DS + (size_t)(t - t0) * T;
                            float D = 0.0f;
                            for (int i = 0; i < hs; i++)
                                D += dO[i] * O[i];
                            float l = lse[((size_t)b * NH + h) * T + t];
                            att_scores(sc, q, kT, t + 1, T, hs);
                            att_exp(p, sc, t + 1, scale, l);
                            att_scores(ds, dO, vT, t + 1, T, hs);
                            if (drop.p > 0.0f) {
                                /* with the kept factors m_s: dP = m (dO . v), P~ = P m for dv */
                                uint64_t rk = drop.row_keys[b];
                                uint64_t i0 = ((uint64_t)(drop.head0 + h) * (uint64_t)T + (uint64_t)t) * (uint64_t)T;
                                for (int s = 0; s <= t; s++) {
                                    float m = mds_dropout_keep(rk, drop.site, i0 + (uint64_t)s, thr) ? dscale : 0.0f;
                                    ds[s] = p[s] * (m * ds[s] - D) * scale;
                                    p[s] = p[s] * m;
                                }
                            } else {
                                for (int s = 0; s <= t; s++)
                                    ds[s] = p[s] * (ds[s] - D) * scale;
                            }
                            att_axpys(dq, ds, base + koff, row, t + 1, hs);
                        }
                        att_outer_tile(dbase + koff, row, DS, base + (size_t)h * hs, row, t0, t1, T, hs);
                        att_outer_tile(dbase + voff, row, P, dbO, C, t0, t1, T, hs);
                    }
                }
            }
        free(kT);
    }
}
