/*
 * dropout.cu - CUDA hidden-state dropout with the counter-based masks of
 * kernels/dropout.h (the same header, compiled for the device), forward and
 * backward: element (t0 + t)*C + c of row b, so the CPU's masks and bits.  Masks
 * are recomputed, never stored.  No fused bias-dropout-add.
 */
#include "common.cuh"

__global__ static void dropout_kernel(float *out, const float *inp, int B, int T, int C, mds_dropout d,
                                      uint32_t thr, float scale)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C)
        return;
    size_t bt = idx / C;
    uint64_t row = d.row_keys[bt / T];
    uint64_t e = ((uint64_t)(bt % T) + (uint64_t)d.t0) * (uint64_t)C + (uint64_t)(idx % C);
    out[idx] = mds_dropout_keep(row, d.site, e, thr) ? inp[idx] * scale : 0.0f;
}

static void dropout_apply(float *out, const float *inp, int B, int T, int C, mds_dropout d, const char *what)
{
    size_t n = (size_t)B * T * C;
    if (!n) return;
    dropout_kernel<<<mds_cu_blocks(n, 256), 256>>>(out, inp, B, T, C, d, mds_dropout_threshold(d.p),
                                                   1.0f / (1.0f - d.p));
    MDS_CU_LAUNCHED(what);
}

void dropout_forward_cuda(float *out, const float *inp, int B, int T, int C, mds_dropout drop)
{
    dropout_apply(out, inp, B, T, C, drop, "dropout_forward");
}

void dropout_backward_cuda(float *dinp, const float *dout, int B, int T, int C, mds_dropout drop)
{
    dropout_apply(dinp, dout, B, T, C, drop, "dropout_backward");
}
