/*
 * matmul.c - CPU reference of the linear layer out = inp @ weight^T + bias,
 * weight (OC, C), forward and backward.
 *
 * Plain loops tiled for cache reuse; it does not call BLAS (a BLAS path, if
 * one is added, is held to this by a parity test) and does not communicate
 * (the tensor-parallel all-reduces are the caller's).
 */
#include "kernels.h"
#include "common.h"

/* Rows (or output channels) per task: the shared operand row is read once
 * from memory and reused from L1 for each member of the tile. */
#define MM_TILE 4

/*
 * The dot product keeps 8 interleaved partial sums, combined pairwise: a
 * fixed order (so results are reproducible) that the compiler can keep in
 * vector registers without -ffast-math's licence to reassociate.
 */
static inline float dot8(const float *a, const float *b, int n)
{
    float acc[8] = {0};
    int c = 0;
    for (; c + 8 <= n; c += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += a[c + k] * b[c + k];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; c < n; c++)
        s += a[c] * b[c];
    return s;
}

void matmul_forward_cpu(float *out, const float *inp, const float *weight, const float *bias,
                        int B, int T, int C, int OC)
{
    long N = (long)B * T;
    long ntiles = (N + MM_TILE - 1) / MM_TILE;
    OMP(parallel for schedule(static))
    for (long tile = 0; tile < ntiles; tile++) {
        long r0 = tile * MM_TILE;
        long r1 = r0 + MM_TILE < N ? r0 + MM_TILE : N;
        for (int o = 0; o < OC; o++) {
            const float *w = weight + (size_t)o * C;
            float b = bias ? bias[o] : 0.0f;
            for (long r = r0; r < r1; r++)
                out[(size_t)r * OC + o] = dot8(inp + (size_t)r * C, w, C) + b;
        }
    }
}

/*
 * dinp[r] += sum_o dout[r,o] weight[o]       (tasks own rows; o in order)
 * dweight[o] += sum_r dout[r,o] inp[r]        (tasks own output channels; r in order)
 * dbias[o] += sum_r dout[r,o]                 (accumulated in double)
 */
void matmul_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const float *weight, int B, int T, int C, int OC)
{
    long N = (long)B * T;
    long ntiles = (N + MM_TILE - 1) / MM_TILE;
    OMP(parallel for schedule(static))
    for (long tile = 0; tile < ntiles; tile++) {
        long r0 = tile * MM_TILE;
        long r1 = r0 + MM_TILE < N ? r0 + MM_TILE : N;
        for (int o = 0; o < OC; o++) {
            const float *w = weight + (size_t)o * C;
            for (long r = r0; r < r1; r++) {
                float d = dout[(size_t)r * OC + o];
                float *di = dinp + (size_t)r * C;
                for (int c = 0; c < C; c++)
                    di[c] += d * w[c];
            }
        }
    }
    int otiles = (OC + MM_TILE - 1) / MM_TILE;
    OMP(parallel for schedule(static))
    for (int tile = 0; tile < otiles; tile++) {
        int o0 = tile * MM_TILE;
        int o1 = o0 + MM_TILE < OC ? o0 + MM_TILE : OC;
        double db[MM_TILE] = {0};
        for (long r = 0; r < N; r++) {
            const float *x = inp + (size_t)r * C;
            for (int o = o0; o < o1; o++) {
                float d = dout[(size_t)r * OC + o];
                float *dw = dweight + (size_t)o * C;
                for (int c = 0; c < C; c++)
                    dw[c] += d * x[c];
                db[o - o0] += d;
            }
        }
        if (dbias)
            for (int o = o0; o < o1; o++)
                dbias[o] += (float)db[o - o0];
    }
}
