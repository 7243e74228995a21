/*
 * common.cuh - private helpers of the CUDA kernels (the .cu files of kernels/cuda/):
 * launch-error bookkeeping, the device twin of the CPU's mds_expf, the
 * fixed-order block reductions, and the `<op>_cuda` prototypes that
 * backend_cuda.cu puts in the op table.  Not installed, not included by
 * anything outside kernels/cuda/.
 *
 * Every file is compiled with -fmad=false (the CPU reference is built with
 * -ffp-contract=off), so an elementwise kernel written as the CPU loop is
 * written gives the CPU's bits.  Reductions are deterministic: each thread
 * sums a fixed strided subset in order, then a fixed tree over the warp and
 * a fixed order over the warps (no atomics on floats anywhere).
 *
 * What it deliberately does not do: streams other than the legacy default
 * stream, CUDA graphs, bf16 storage.
 */
#ifndef MDS_KERNELS_CUDA_COMMON_CUH
#define MDS_KERNELS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "dropout.h"
#include "formulas.h"   /* mds_expf and the other formulas the CPU kernels use */

/* Threads per block of the row kernels (a multiple of 32, at most 1024). */
#define MDS_CU_THREADS 256

/* Records the first launch or runtime failure (backend_cuda.cu); the next
 * sync() returns -1 with its message.  Ops are void, as on the CPU. */
void mds_cuda_note(cudaError_t e, const char *what);
#define MDS_CU_LAUNCHED(what) mds_cuda_note(cudaGetLastError(), (what))

/* A device scratch of at least `bytes` (owned by the backend, reused by the
 * next op: ops run in order on one stream); NULL with the error noted. */
void *mds_cuda_scratch(size_t bytes);

static inline unsigned mds_cu_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 0x7fffffffu ? 0x7fffffffu : b);
}

/* Sum of v over the block in a fixed order (warp tree, then the warps in
 * order); every thread gets the result.  blockDim.x a multiple of 32.
 * Uses a __shared__ array of 32 and synchronises the block. */
template <typename Tv>
static __device__ Tv mds_cu_block_sum(Tv v)
{
    __shared__ Tv part[32];
    __shared__ Tv total;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();   /* part may still be read by a previous call */
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        Tv s = part[0];
        for (int i = 1; i < (int)(blockDim.x >> 5); i++)
            s += part[i];
        total = s;
    }
    __syncthreads();
    return total;
}

/* Max over the block (exact, so the order does not matter). */
static __device__ float mds_cu_block_max(float v)
{
    __shared__ float part[32];
    __shared__ float total;
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_down_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = part[0];
        for (int i = 1; i < (int)(blockDim.x >> 5); i++)
            m = part[i] > m ? part[i] : m;
        total = m;
    }
    __syncthreads();
    return total;
}

#ifdef __cplusplus
extern "C" {
#endif

/* The op table of the CUDA backend: the arguments of the `<op>_cpu`
 * functions in kernels.h, every pointer device memory. */
void encoder_forward_cuda(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C, int V,
                          int v_start);
void encoder_backward_cuda(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C, int V,
                           int v_start);
void layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                            const float *bias, int B, int T, int C, float eps);
void layernorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, const float *mean, const float *rstd, int B, int T, int C);
void matmul_forward_cuda(float *out, const float *inp, const float *weight, const float *bias, int B, int T, int C,
                         int OC);
void matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, int B, int T, int C, int OC);
void attention_forward_cuda(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV,
                            mds_dropout drop);
void attention_backward_cuda(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                             int B, int T, int C, int NH, int NKV, mds_dropout drop);
void dropout_forward_cuda(float *out, const float *inp, int B, int T, int C, mds_dropout drop);
void dropout_backward_cuda(float *dinp, const float *dout, int B, int T, int C, mds_dropout drop);
void rope_forward_cuda(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV, int hs,
                       int rot, int interleaved);
void rope_backward_cuda(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV, int hs,
                        int rot, int interleaved);
void rmsnorm_forward_cuda(float *out, float *rstd, const float *inp, const float *weight, int B, int T, int C,
                          float eps);
void rmsnorm_backward_cuda(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                           const float *rstd, int B, int T, int C);
void swiglu_forward_cuda(float *out, const float *inp, size_t N, int F);
void swiglu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N, int F);
void gelu_forward_cuda(float *out, const float *inp, size_t N);
void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N);
void residual_forward_cuda(float *out, const float *inp1, const float *inp2, size_t N);
void residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N);
void crossentropy_forward_cuda(float *losses, float *maxes, float *sumexp, float *tlogits, const float *logits,
                               const int *targets, const float *mask, int B, int T, int V, int v_start);
void crossentropy_rescale_cuda(float *sumexp, float *maxes, const float *gmax, int B, int T);
void crossentropy_loss_cuda(float *losses, const float *maxes, const float *sumexp, const float *tlogits,
                            const float *mask, int B, int T);
void crossentropy_backward_cuda(float *dlogits, const float *logits, const float *maxes, const float *sumexp,
                                const int *targets, const float *dlosses, int B, int T, int V, int v_start);
void loss_reduce_cuda(double *out, const float *losses, const float *mask, size_t N);
void loss_grad_cuda(float *dlosses, const float *mask, float inv, size_t N);
void round_to_cuda(float *x, size_t N, int dtype);
void unscale_check_cuda(double *nonfinite, float *x, size_t N, float factor);
void adamw_update_cuda(float *params, float *m, float *v, const float *grads, size_t N, int t, float lr, float beta1,
                       float beta2, float eps, float weight_decay, float grad_scale);
void global_norm_squared_cuda(double *out, const float *x, size_t N);

/* The cuBLAS handle of the backend (backend_cuda.cu). */
struct cublasContext *mds_cuda_cublas(void);

#ifdef __cplusplus
}
#endif

#endif /* MDS_KERNELS_CUDA_COMMON_CUH */
