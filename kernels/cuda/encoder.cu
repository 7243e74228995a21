/*
 * encoder.cu - CUDA embedding (token + learned position), forward and
 * backward, vocab-parallel as encoder.c.
 *
 * The backward gives each thread one channel (dwte) or one (t, channel)
 * (dwpe) and walks the tokens in (b, t) order: the CPU's summation order,
 * no atomics, the CPU's bits.  Deliberately simple: only C threads work on
 * dwte; a sort-by-token backward (llm.c's) is the fast version.
 */
#include "common.cuh"

__global__ static void encoder_forward_kernel(float *out, const int *inp, const float *wte, const float *wpe,
                                              int B, int T, int C, int V, int v_start)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C)
        return;
    size_t bt = idx / C;
    int c = (int)(idx % C), t = (int)(bt % T);
    long ix = (long)inp[bt] - v_start;
    float pos = wpe ? wpe[(size_t)t * C + c] : 0.0f;
    if (ix >= 0 && ix < V)
        out[idx] = wpe ? wte[(size_t)ix * C + c] + pos : wte[(size_t)ix * C + c];
    else
        out[idx] = pos;
}

void encoder_forward_cuda(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C, int V,
                          int v_start)
{
    size_t n = (size_t)B * T * C;
    if (!n) return;
    encoder_forward_kernel<<<mds_cu_blocks(n, 256), 256>>>(out, inp, wte, wpe, B, T, C, V, v_start);
    MDS_CU_LAUNCHED("encoder_forward");
}

__global__ static void encoder_backward_wte_kernel(float *dwte, const float *dout, const int *inp, int B, int T,
                                                   int C, int V, int v_start)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    for (long bt = 0; bt < (long)B * T; bt++) {
        long ix = (long)inp[bt] - v_start;
        if (ix < 0 || ix >= V)
            continue;
        float *w = dwte + (size_t)ix * C + c;
        *w = *w + dout[(size_t)bt * C + c];
    }
}

__global__ static void encoder_backward_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * C)
        return;
    size_t t = idx / C, c = idx % C;
    float p = dwpe[idx];
    for (int b = 0; b < B; b++)
        p = p + dout[((size_t)b * T + t) * C + c];
    dwpe[idx] = p;
}

void encoder_backward_cuda(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C, int V,
                           int v_start)
{
    if ((size_t)B * T * C == 0) return;
    if (dwte) {
        encoder_backward_wte_kernel<<<mds_cu_blocks((size_t)C, 128), 128>>>(dwte, dout, inp, B, T, C, V, v_start);
        MDS_CU_LAUNCHED("encoder_backward");
    }
    if (dwpe) {
        encoder_backward_wpe_kernel<<<mds_cu_blocks((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
        MDS_CU_LAUNCHED("encoder_backward (wpe)");
    }
}
