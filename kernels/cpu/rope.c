/*
 * rope.c - CPU reference of rotary position embeddings (Megatron's
 * RotaryEmbedding and apply_rotary_pos_emb), in place over the q and k heads
 * of the fused qkv rows, forward and backward; and the cos/sin tables.
 *
 * It does not implement context-parallel slicing, sequence-length
 * interpolation, YaRN or multimodal RoPE, and rotates by position t of the
 * sequence (Megatron's GPT: positions 0..T-1, whatever the position ids).
 */
#include <math.h>

#include "kernels.h"
#include "common.h"

void rope_tables(float *cos_t, float *sin_t, int T, int rot, double base, double llama3_factor)
{
    int half = rot / 2;
    for (int i = 0; i < half; i++) {
        /* torch: arange(0, dim, 2, float32) / dim, base ** that, 1.0 / that, all float */
        float e = (float)(2 * i) / (float)rot;
        float inv = 1.0f / powf((float)base, e);
        if (llama3_factor > 0) {
            /* Megatron's _apply_scaling (Llama 3.1), in float as torch runs it:
               low/high frequency factors 1 and 4, original context 8192 */
            float f = (float)llama3_factor, wavelen = (float)(2.0 * M_PI) / inv;
            float low = 8192.0f, high = 2048.0f;
            float scaled = wavelen > low ? inv / f : inv;
            if (!(wavelen < high) && !(wavelen > low)) {
                float smooth = (8192.0f / wavelen - 1.0f) / 3.0f;
                scaled = (1.0f - smooth) * scaled / f + smooth * scaled;
            }
            inv = scaled;
        }
        for (int t = 0; t < T; t++) {
            float a = (float)t * inv;
            cos_t[(size_t)t * half + i] = cosf(a);
            sin_t[(size_t)t * half + i] = sinf(a);
        }
    }
}

/* Rotate the first rot channels of nheads heads of hs channels at x by the
 * angles of one position (sign -1: the inverse rotation). */
static void rotate_heads(float *x, int nheads, int hs, const float *c, const float *sn, int rot, int interleaved,
                         float sign)
{
    int half = rot / 2;
    for (int h = 0; h < nheads; h++) {
        float *v = x + (size_t)h * hs;
        for (int i = 0; i < half; i++) {
            int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
            float xa = v[a], xb = v[b], cs = c[i], s = sign * sn[i];
            /* t * cos + rotate_half(t) * sin, rotate_half = (-x_b, x_a) */
            v[a] = xa * cs + (-xb) * s;
            v[b] = xb * cs + xa * s;
        }
    }
}

static void rope(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV, int hs, int rot,
                 int interleaved, float sign)
{
    size_t row = ((size_t)NH + 2 * (size_t)NKV) * hs;
    int half = rot / 2;
    OMP(parallel for schedule(static))
    for (long bt = 0; bt < (long)B * T; bt++) {
        int t = (int)(bt % T);
        float *x = qkv + (size_t)bt * row;
        const float *c = cos_t + (size_t)t * half, *sn = sin_t + (size_t)t * half;
        rotate_heads(x, NH, hs, c, sn, rot, interleaved, sign);                      /* q */
        rotate_heads(x + (size_t)NH * hs, NKV, hs, c, sn, rot, interleaved, sign);   /* k */
    }
}

void rope_forward_cpu(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV, int hs,
                      int rot, int interleaved)
{
    rope(qkv, cos_t, sin_t, B, T, NH, NKV, hs, rot, interleaved, 1.0f);
}

void rope_backward_cpu(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV, int hs,
                       int rot, int interleaved)
{
    rope(dqkv, cos_t, sin_t, B, T, NH, NKV, hs, rot, interleaved, -1.0f);
}
