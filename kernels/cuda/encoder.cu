/*
 * encoder.cu - CUDA embedding (token + learned position), forward and
 * backward, vocab-parallel as encoder.c.
 *
 * The backward, dwte: the token ids are copied to the host and sorted
 * there by id (a counting sort, stable: each id's positions stay in (b, t)
 * order), then a block per distinct id adds that id's rows of dout in that
 * order, each thread a channel: the CPU's summation order per element, no
 * atomics, the CPU's bits, with as many blocks as distinct tokens (the
 * kernel this replaces gave the whole batch to C threads: 4.5 % of a GPT-2
 * 124M step at micro-batch 4 on an H200, more at larger ones).  dwpe: a
 * thread per (t, channel) over b in order.
 */
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "grow.h"

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

/* dwte rows of the distinct ids: block k adds, for id ids[k], dout rows
 * order[start[k]] .. order[start[k + 1] - 1] in that order */
__global__ static void encoder_backward_wte_kernel(float *dwte, const void *dout, int dd, const int *order,
                                                   const int *start, const int *ids, int C)
{
    int k = blockIdx.x, lo = start[k], hi = start[k + 1];
    float *w = dwte + (size_t)ids[k] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = w[c];
        for (int i = lo; i < hi; i++)
            acc = acc + mds_load(dd, dout, (size_t)order[i] * C + c);
        w[c] = acc;
    }
}

/* Host buffers of the sort, grown as needed (one thread drives the backend):
 * the ids; the count, then the next slot, of each id (V + 1); and one int
 * array of the sorted positions (BT), the starts (up to BT + 1) and the
 * distinct ids (up to BT), copied to the device in one piece. */
static int *h_tok, *h_cnt, *h_out;
static size_t h_tok_cap, h_cnt_cap, h_out_cap;

/* dwte += dout summed by token: sort on the host, a block per distinct id. */
static void wte_backward(float *dwte, const void *dout, int dd, const int *inp, size_t BT, int C, int V, int v_start)
{
    if (mds_grow((void **)&h_tok, &h_tok_cap, BT, sizeof *h_tok) ||
        mds_grow((void **)&h_cnt, &h_cnt_cap, (size_t)V + 1, sizeof *h_cnt) ||
        mds_grow((void **)&h_out, &h_out_cap, 3 * BT + 1, sizeof *h_out)) {
        mds_cuda_note(cudaErrorMemoryAllocation, "encoder_backward: out of host memory for the token sort");
        return;
    }
    mds_cuda_note(cudaMemcpy(h_tok, inp, BT * sizeof(int), cudaMemcpyDefault), "encoder_backward (ids)");
    memset(h_cnt, 0, ((size_t)V + 1) * sizeof(int));
    for (size_t i = 0; i < BT; i++) {
        long ix = (long)h_tok[i] - v_start;
        if (ix >= 0 && ix < V) h_cnt[ix]++;
    }
    /* the distinct ids, each one's first slot, and h_cnt[v] becomes id v's next slot */
    int *order = h_out, *starts = h_out + BT, *ids = h_out + 2 * BT + 1;
    int nd = 0, at = 0;
    for (int v = 0; v < V; v++) {
        int n = h_cnt[v];
        h_cnt[v] = at;
        if (n) {
            starts[nd] = at;
            ids[nd++] = v;
            at += n;
        }
    }
    if (!nd) return;
    starts[nd] = at;
    for (size_t i = 0; i < BT; i++) {   /* stable: positions in (b, t) order */
        long ix = (long)h_tok[i] - v_start;
        if (ix >= 0 && ix < V) order[h_cnt[ix]++] = (int)i;
    }
    int *d = (int *)mds_cuda_scratch((3 * BT + 1) * sizeof(int));
    if (!d) return;
    mds_cuda_note(cudaMemcpy(d, h_out, (3 * BT + 1) * sizeof(int), cudaMemcpyDefault), "encoder_backward");
    encoder_backward_wte_kernel<<<(unsigned)nd, 128>>>(dwte, dout, dd, d, d + BT, d + 2 * BT + 1, C);
    MDS_CU_LAUNCHED("encoder_backward");
}

__global__ static void encoder_backward_wpe_kernel(float *dwpe, const void *dout, int dd, int B, int T, int C)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * C)
        return;
    size_t t = idx / C, c = idx % C;
    float p = dwpe[idx];
    for (int b = 0; b < B; b++)
        p = p + mds_load(dd, dout, ((size_t)b * T + t) * C + c);
    dwpe[idx] = p;
}

void encoder_backward_cuda(float *dwte, float *dwpe, const void *dout, int dout_dt, const int *inp, int B, int T,
                           int C, int V, int v_start)
{
    if ((size_t)B * T * C == 0) return;
    if (dwte) {
        wte_backward(dwte, dout, dout_dt, inp, (size_t)B * T, C, V, v_start);
    }
    if (dwpe) {
        encoder_backward_wpe_kernel<<<mds_cu_blocks((size_t)T * C, 256), 256>>>(dwpe, dout, dout_dt, B, T, C);
        MDS_CU_LAUNCHED("encoder_backward (wpe)");
    }
}
