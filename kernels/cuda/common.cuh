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
#include <stdio.h>

#include "kernels.h"
#include "dropout.h"
#include "formulas.h"   /* mds_expf and the other formulas the CPU kernels use */
#include "dtype.h"

/* A launch written in this header: tests/cudacpu/hipcc.sh rewrites the
 * <<<...>>> of the .cu files it compiles, not of what they include, so a
 * header launches through this (the emulation's own launcher there). */
#ifdef MDS_TESTS_CUDACPU_CUDA_SHIM_H
#define MDS_CU_LAUNCH(kernel, grid, block) mds_cucpu_launch(kernel, grid, block)
#else
#define MDS_CU_LAUNCH(kernel, grid, block) kernel<<<grid, block>>>
#endif

/* Loops over a thread's registers are unrolled (an array indexed by a loop
 * variable stays in registers only then); other compilers of these files
 * (tests/cudacpu) need no hint. */
#ifdef __NVCC__
#define MDS_CU_UNROLL _Pragma("unroll")
#else
#define MDS_CU_UNROLL
#endif

/* Threads per block of the row kernels (a multiple of 32, at most 1024). */
#define MDS_CU_THREADS 256

/* Records the first launch or runtime failure (backend_cuda.cu); the next
 * sync() returns -1 with its message.  Ops are void, as on the CPU. */
void mds_cuda_note(cudaError_t e, const char *what);
#define MDS_CU_LAUNCHED(what) mds_cuda_note(cudaGetLastError(), (what))

/* A device scratch of at least `bytes` (owned by the backend, reused by the
 * next op: ops run in order on one stream); NULL with the error noted. */
void *mds_cuda_scratch(size_t bytes);

/* Opts kernel k into `bytes` of dynamic shared memory when that is more
 * than the kernel may use by default: 48 KiB less its static shared memory,
 * which counts against the same limit, as it does against the device's
 * opt-in maximum (cudaFuncGetAttributes says how much the kernel has); 0, or
 * -1 with the error noted when the device has less. */
static inline int mds_cu_smem(const void *k, size_t bytes, const char *what)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, k);
    if (e != cudaSuccess) {
        mds_cuda_note(e, what);
        return -1;
    }
    if (bytes <= (size_t)fa.maxDynamicSharedSizeBytes)
        return 0;
    int dev = 0, optin = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (bytes + fa.sharedSizeBytes > (size_t)optin) {
        static char msg[192];
        snprintf(msg, sizeof msg, "%s needs %zu bytes of shared memory per block (and %zu static), the "
                 "device allows %d", what, bytes, fa.sharedSizeBytes, optin);
        mds_cuda_note(cudaErrorInvalidValue, msg);
        return -1;
    }
    mds_cuda_note(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), what);
    return 0;
}

/* Elementwise kernels give each thread MDS_CU_ILP elements at a time, i,
 * i + S, ..., i + (MDS_CU_ILP - 1) S (S = the grid's threads: each load a
 * warp's consecutive floats), all loaded before any is used or stored:
 * with one 4-byte load a thread in flight, an H100's resident threads keep
 * about 1 MB of loads in flight, a third of what its bandwidth needs. */
#define MDS_CU_ILP 4

/* The grid of such a kernel over n elements (threads a block). */
static inline unsigned mds_cu_ilp_blocks(size_t n, unsigned threads)
{
    size_t b = (n + (size_t)threads * MDS_CU_ILP - 1) / ((size_t)threads * MDS_CU_ILP);
    return (unsigned)(b < 1 ? 1 : b > 65535u * 16 ? 65535u * 16 : b);
}

static inline unsigned mds_cu_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 0x7fffffffu ? 0x7fffffffu : b);
}

/* Row kernels (the norms) give each row of the input a warp, MDS_CU_ROWS
 * warps a block: no shared memory and no barrier, where a block a row
 * spent most of its time in two block reductions (three barriers each). */
#define MDS_CU_ROWS 8
static inline unsigned mds_cu_row_blocks(size_t rows)
{
    return (unsigned)((rows + MDS_CU_ROWS - 1) / MDS_CU_ROWS);
}
/* The row of the calling warp, rows past n ending their warp. */
#define MDS_CU_ROW_OF_WARP() ((size_t)blockIdx.x * MDS_CU_ROWS + (threadIdx.x >> 5))

/* Sum of v over the warp, a butterfly: at each step both lanes of a pair
 * add the same two values, so every lane gets the same bits. */
template <typename Tv>
static __device__ Tv mds_cu_warp_sum(Tv v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
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

/* Eight 16-bit values of DT (MDS_BF16 or MDS_F16) in a uint4, the first
 * in the low half of .x, as floats, and back (kernels/dtype.h's
 * conversions: the bits of mds_load and mds_store element by element).
 * The elementwise kernels' 16-byte loads and stores: with one 2-byte load
 * a thread at a time, an H200 kept a quarter of the bytes in flight that
 * its bandwidth needs (gelu's forward ran at a third of it). */
template <int DT>
__device__ static inline void mds_cu_unpack8(float (&f)[8], uint4 v)
{
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    for (int k = 0; k < 8; k++) {
        uint16_t h = (uint16_t)(w[k >> 1] >> (16 * (k & 1)));
        f[k] = DT == MDS_BF16 ? mds_bf16_to_f32(h) : mds_f16_to_f32(h);
    }
}
template <int DT>
__device__ static inline uint4 mds_cu_pack8(const float (&f)[8])
{
    uint32_t w[4];
    for (int k = 0; k < 4; k++)
        w[k] = (uint32_t)mds_f32_to_16(DT, f[2 * k]) | (uint32_t)mds_f32_to_16(DT, f[2 * k + 1]) << 16;
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Whether p is 16-byte aligned (a uint4 or float4 at it). */
static inline int mds_cu_al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Kernels that take 8 elements a uint4 take MDS_CU_VEC of them a thread
 * at a time (64 bytes of 16-bit loads in flight a thread); the grid over
 * n8 such groups. */
#define MDS_CU_VEC 2
static inline unsigned mds_cu_vec_blocks(size_t n8, unsigned threads)
{
    size_t b = (n8 + (size_t)threads * MDS_CU_VEC - 1) / ((size_t)threads * MDS_CU_VEC);
    return (unsigned)(b < 1 ? 1 : b > 65535u * 16 ? 65535u * 16 : b);
}

/* Elements i .. i + 7 of a dt array as floats (i a multiple of 8, the
 * array 16-byte aligned): a uint4 of 16-bit values or two float4s. */
__device__ static inline void mds_cu_load8(float (&f)[8], int dt, const void *p, size_t i)
{
    if (dt == MDS_F32) {
        float4 a = ((const float4 *)p)[i / 4], b = ((const float4 *)p)[i / 4 + 1];
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else if (dt == MDS_BF16) {
        mds_cu_unpack8<MDS_BF16>(f, ((const uint4 *)p)[i / 8]);
    } else {
        mds_cu_unpack8<MDS_F16>(f, ((const uint4 *)p)[i / 8]);
    }
}

/* Column sums of a row-major (N, C) matrix, NS sums at once (the weight
 * gradients of the norms and the biases): dst_k[c] += (float) sum over rows
 * r of the double terms f(r, c) adds into s[k].  Deterministic and
 * independent of the device: the rows are cut into chunks of a fixed size
 * (64, doubled until there are at most 65535), each chunk summed in double by
 * a (32, 8) block, its 8 row-strided partial sums combined in order; then
 * the chunks' sums are added in double by mds_cu_colsum_final.  Against the
 * CPU's one in-order double sum only the double rounding differs, which the
 * final rounding to float almost always absorbs.  The partial sums live in
 * the backend's scratch.  The one-thread-per-column loop this replaces used
 * C threads for all N rows (a sixth of a GPT-2 step on an H200). */
template <int NS, typename F>
__global__ static void mds_cu_colsum_partial(double *part, F f, long N, int C, long rows, long chunks)
{
    __shared__ double sh[NS][8][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = (int)blockIdx.x * 32 + tx;
    long r0 = (long)blockIdx.y * rows, r1 = r0 + rows < N ? r0 + rows : N;
    double s[NS];
    for (int k = 0; k < NS; k++)
        s[k] = 0.0;
    if (c < C)
        for (long r = r0 + ty; r < r1; r += 8)
            f(r, c, s);
    for (int k = 0; k < NS; k++)
        sh[k][ty][tx] = s[k];
    __syncthreads();
    if (ty == 0 && c < C)
        for (int k = 0; k < NS; k++) {
            double t = sh[k][0][tx];
            for (int y = 1; y < 8; y++)
                t += sh[k][y][tx];
            part[((size_t)k * chunks + blockIdx.y) * C + c] = t;
        }
}

#ifndef MDS_CU_COLSUM8   /* 0 at build time: the partial sums a column a thread only (A/B runs) */
#define MDS_CU_COLSUM8 1
#endif

/* The same sums, 8 adjacent columns a thread (256 a block): F's row8(r,
 * c, s) adds row r's terms of columns c .. c + 7 into s[e], each as its
 * operator() would (16-byte loads: C a multiple of 8, F's arrays 16-byte
 * aligned, F's vec8()).  Every column's terms are added in the same order
 * as above (rows ty, ty + 8, ... of the chunk, then the 8 partials in
 * order of ty): the same bits, with a warp's loads 512 contiguous bytes of
 * a 16-bit row where they were 64. */
template <int NS, typename F>
__global__ static void mds_cu_colsum_partial8(double *part, F f, long N, int C, long rows, long chunks)
{
    __shared__ double sh[NS][8][8][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = ((int)blockIdx.x * 32 + tx) * 8;
    long r0 = (long)blockIdx.y * rows, r1 = r0 + rows < N ? r0 + rows : N;
    double s[8][NS];
    for (int e = 0; e < 8; e++)
        for (int k = 0; k < NS; k++)
            s[e][k] = 0.0;
    if (c < C)
        for (long r = r0 + ty; r < r1; r += 8)
            f.row8(r, c, s);
    for (int e = 0; e < 8; e++)
        for (int k = 0; k < NS; k++)
            sh[k][ty][e][tx] = s[e][k];
    __syncthreads();
    if (ty == 0 && c < C)
        for (int k = 0; k < NS; k++)
            for (int e = 0; e < 8; e++) {
                double t = sh[k][0][e][tx];
                for (int y = 1; y < 8; y++)
                    t += sh[k][y][e][tx];
                part[((size_t)k * chunks + blockIdx.y) * C + c + e] = t;
            }
}

/* The chunks' sums of 32 columns a block (32, 32): thread (ty, tx) sums
 * chunks ty, ty + 32, ... in order, then the 32 partials are added in
 * order of ty.  Up to 32 chunks (2,048 rows) that is the one in-order sum
 * of the chunks; beyond, a fixed tree that depends on N alone. */
template <int NS>
__global__ static void mds_cu_colsum_final(float *d0, float *d1, const double *part, long chunks, int C)
{
    __shared__ double sh[NS][32][33];
    int tx = threadIdx.x, ty = threadIdx.y, c = (int)blockIdx.x * 32 + tx;
    for (int k = 0; k < NS; k++) {
        double t = 0.0;
        if (c < C)
            for (long j = ty; j < chunks; j += 32)
                t += part[((size_t)k * chunks + j) * C + c];
        sh[k][ty][tx] = t;
    }
    __syncthreads();
    if (ty == 0 && c < C)
        for (int k = 0; k < NS; k++) {
            double t = sh[k][0][tx];
            for (int y = 1; y < 32; y++)
                t += sh[k][y][tx];
            float *d = k == 0 ? d0 : d1;
            d[c] += (float)t;
        }
}

/* The chunks of mds_cu_colsum's partial sums: rows each (64, doubled
 * until there are at most 65535 chunks), and the bytes of NS such sums. */
static long mds_cu_colsum_chunks(long N, long *rows)
{
    long r = 64, chunks = (N + r - 1) / r;
    while (chunks > 65535) {
        r *= 2;
        chunks = (N + r - 1) / r;
    }
    *rows = r;
    return chunks;
}
static size_t mds_cu_colsum_bytes(int NS, long N, int C)
{
    long rows;
    return (size_t)NS * (size_t)mds_cu_colsum_chunks(N, &rows) * (size_t)C * sizeof(double);
}

/* mds_cu_colsum with its partial sums at part (mds_cu_colsum_bytes): for
 * a caller whose scratch holds more than the sums (matmul.cu's 16-bit
 * copy of dout, made in the same pass as dbias's sums). */
template <int NS, typename F>
static void mds_cu_colsum_at(double *part, float *d0, float *d1, F f, long N, int C, const char *what)
{
    if (N <= 0 || C <= 0)
        return;
    long rows, chunks = mds_cu_colsum_chunks(N, &rows);
    void (*final)(float *, float *, const double *, long, int) = mds_cu_colsum_final<NS>;
    if (MDS_CU_COLSUM8 && C % 8 == 0 && f.vec8()) {
        void (*partial8)(double *, F, long, int, long, long) = mds_cu_colsum_partial8<NS, F>;
        MDS_CU_LAUNCH(partial8, dim3((unsigned)((C / 8 + 31) / 32), (unsigned)chunks), dim3(32, 8))(part, f, N, C,
                                                                                                 rows, chunks);
    } else {
        void (*partial)(double *, F, long, int, long, long) = mds_cu_colsum_partial<NS, F>;
        MDS_CU_LAUNCH(partial, dim3((unsigned)((C + 31) / 32), (unsigned)chunks), dim3(32, 8))(part, f, N, C, rows,
                                                                                            chunks);
    }
    MDS_CU_LAUNCHED(what);
    MDS_CU_LAUNCH(final, dim3((unsigned)((C + 31) / 32)), dim3(32, 32))(d0, d1, part, chunks, C);
    MDS_CU_LAUNCHED(what);
}

template <int NS, typename F>
static void mds_cu_colsum(float *d0, float *d1, F f, long N, int C, const char *what)
{
    if (N <= 0 || C <= 0)
        return;
    double *part = (double *)mds_cuda_scratch(mds_cu_colsum_bytes(NS, N, C));
    if (!part)
        return;
    mds_cu_colsum_at<NS>(part, d0, d1, f, N, C, what);
}

/* Element i of an output stored as od (backend.h's stored dtypes): v kept
 * as the compute dtype dt (rounds_kept) in a float array, or rounded once
 * into a 16-bit one (od is then dt: the same bits). */
__device__ static inline void mds_cu_put(void *out, int od, size_t i, float v, int dt)
{
    if (od == MDS_F32)
        ((float *)out)[i] = mds_round_to(dt, v);
    else
        mds_store(od, out, i, v);
}

/* Elements i and i + 1, as two mds_cu_put: one 32-bit store of the two
 * 16-bit values where od is 16-bit and element i is 4-byte aligned. */
__device__ static inline void mds_cu_put2(void *out, int od, size_t i, float v0, float v1, int dt)
{
    uint16_t *p = (uint16_t *)out + i;
    if (od != MDS_F32 && ((uintptr_t)p & 3) == 0) {
        *(uint32_t *)p = (uint32_t)mds_f32_to_16(od, v0) | (uint32_t)mds_f32_to_16(od, v1) << 16;
        return;
    }
    mds_cu_put(out, od, i, v0, dt);
    mds_cu_put(out, od, i + 1, v1, dt);
}

/* bytes rounded up to 256 (the scratch's pieces stay aligned) */
static inline size_t mds_cu_al256(size_t bytes) { return (bytes + 255) / 256 * 256; }

/* A stored tensor's dtype sdt must be fp32 or the compute dtype kd
 * (backend.h): noted as a failure of op `what` (1), else 0. */
static inline int mds_cu_stored_bad(int sdt, int kd, const char *what, const char *tensor)
{
    if (sdt == MDS_F32 || sdt == kd)
        return 0;
    static char msg[96];
    snprintf(msg, sizeof msg, "%s: %s stored as %s, compute dtype %s", what, tensor, mds_dtype_name(sdt),
             mds_dtype_name(kd));
    mds_cuda_note(cudaErrorInvalidValue, msg);
    return 1;
}

#ifdef __cplusplus
extern "C" {
#endif

/* The op table of the CUDA backend: the arguments of the `<op>_cpu`
 * functions in kernels.h, every pointer device memory (and the stored
 * dtypes of backend.h). */
void encoder_forward_cuda(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C, int V,
                          int v_start);
void encoder_backward_cuda(float *dwte, float *dwpe, const void *dout, int dout_dt, const int *inp, int B, int T,
                           int C, int V, int v_start);
void layernorm_forward_cuda(void *out, int out_dt, float *mean, float *rstd, const float *inp, const float *weight,
                            const float *bias, int B, int T, int C, float eps);
void layernorm_backward_cuda(void *dinp, int dinp_dt, float *dweight, float *dbias, const void *dout, int dout_dt,
                             const float *inp, const float *weight, const float *mean, const float *rstd, int B, int T,
                             int C);
void matmul_forward_cuda(void *out, int out_dt, const void *inp, int inp_dt, const float *weight, const float *bias,
                         int B, int T, int C, int OC);
void matmul_backward_cuda(void *dinp, int dinp_dt, float *dweight, float *dbias, const void *dout, int dout_dt,
                          const void *inp, int inp_dt, const float *weight, int B, int T, int C, int OC);
void attention_forward_cuda(void *out, int out_dt, float *lse, const void *qkv, int qkv_dt, int B, int T, int C,
                            int NH, int NKV, mds_dropout drop);
void attention_backward_cuda(void *dqkv, int dqkv_dt, const void *dout, int dout_dt, const void *qkv, int qkv_dt,
                             const void *out, int out_dt, const float *lse, int B, int T, int C, int NH, int NKV,
                             mds_dropout drop);
void dropout_forward_cuda(float *out, const float *inp, int B, int T, int C, mds_dropout drop);
void dropout_backward_cuda(float *dinp, const float *dout, int B, int T, int C, mds_dropout drop);
void rope_forward_cuda(void *qkv, int qkv_dt, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV,
                       int hs, int rot, int interleaved);
void rope_backward_cuda(void *dqkv, int dqkv_dt, const float *cos_t, const float *sin_t, int B, int T, int NH,
                        int NKV, int hs, int rot, int interleaved);
void rmsnorm_forward_cuda(void *out, int out_dt, float *rstd, const float *inp, const float *weight, int B, int T,
                          int C, float eps);
void rmsnorm_backward_cuda(void *dinp, int dinp_dt, float *dweight, const void *dout, int dout_dt, const float *inp,
                           const float *weight, const float *rstd, int B, int T, int C);
void swiglu_forward_cuda(void *out, int out_dt, const void *inp, int inp_dt, size_t N, int F);
void swiglu_backward_cuda(void *dinp, const void *inp, int inp_dt, const void *dout, int gd, size_t N, int F);
void gelu_forward_cuda(void *out, int out_dt, const void *inp, int inp_dt, size_t N);
void gelu_backward_cuda(void *dinp, const void *inp, int inp_dt, const void *dout, int gd, size_t N);
void matmul_gelu_forward_cuda(void *out, int out_dt, void *pre, int pre_dt, const void *inp, int inp_dt,
                              const float *weight, const float *bias, int B, int T, int C, int OC);
void matmul_gelu_backward_cuda(void *dpre, void *dmid, int dt, float *dweight, float *dbias, const void *dout,
                               int dout_dt, const void *inp, int inp_dt, const float *weight, const void *pre,
                               int pre_dt, int B, int T, int C, int OC);
void residual_forward_cuda(float *out, const float *inp1, const void *inp2, int inp2_dt, size_t N, int dt);
void residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N);
void crossentropy_forward_cuda(float *losses, float *maxes, float *sumexp, float *tlogits, const void *logits,
                               int logits_dt, const int *targets, const float *mask, int B, int T, int V,
                               int v_start);
void crossentropy_rescale_cuda(float *sumexp, float *maxes, const float *gmax, int B, int T);
void crossentropy_loss_cuda(float *losses, const float *maxes, const float *sumexp, const float *tlogits,
                            const float *mask, int B, int T);
void crossentropy_backward_cuda(void *dlogits, const void *logits, int dt, const float *maxes, const float *sumexp,
                                const int *targets, const float *dlosses, int B, int T, int V, int v_start);
void crossentropy_fused_cuda(float *losses, float *maxes, float *sumexp, float *tlogits, void *logits, int dt,
                             const int *targets, const float *mask, const float *dlosses, int B, int T, int V,
                             int v_start);
void loss_reduce_cuda(double *out, const float *losses, const float *mask, size_t N);
void loss_grad_cuda(float *dlosses, const float *mask, float inv, size_t N);
void round_to_cuda(float *x, size_t N, int dtype);
/* dst[0, n) = src's values as dt (MDS_BF16, MDS_F16), rounded to nearest
 * even; what names the caller in a launch failure. */
void to16_cuda(uint16_t *dst, const float *src, size_t n, int dt, const char *what);
void unscale_check_cuda(double *nonfinite, float *x, size_t N, float factor);
void adamw_update_cuda(float *params, float *m, float *v, const float *grads, size_t N, int t, float lr, float beta1,
                       float beta2, float eps, float weight_decay, float grad_scale);
void global_norm_squared_cuda(double *out, const float *x, size_t N);

/* The backend's compute dtype (backend.h's set_compute_dtype): MDS_F32,
 * or MDS_BF16 / MDS_F16 for 16-bit products with fp32 accumulation, and
 * the dtype the ops of backend.h's rounds_kept list round outputs to. */
void mds_cuda_set_compute_dtype(int dtype);
int mds_cuda_compute_dtype(void);

/* The cuBLAS handles of the backend (backend_cuda.cu): pedantic fp32 math,
 * and default math for the 16-bit products on the tensor cores. */
struct cublasContext *mds_cuda_cublas(void);
struct cublasContext *mds_cuda_cublas_tc(void);
/* The cuBLASLt handle (NULL when cublasLtCreate failed) and its workspace
 * (allocated on first use; NULL and *bytes 0 when it could not be). */
struct cublasLtContext *mds_cuda_cublaslt(void);
void *mds_cuda_lt_workspace(size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* MDS_KERNELS_CUDA_COMMON_CUH */
