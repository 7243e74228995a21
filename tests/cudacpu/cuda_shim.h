/*
 * cuda_shim.h - the CUDA runtime and cuBLAS names that the kernels/cuda/ files
 * use, mapped onto ROCm's HIP-CPU (a header-only runtime that runs HIP
 * kernels on the CPU: a block's threads are fibers on one OS thread,
 * __syncthreads a switch to the next fiber, __shared__ a thread_local), so
 * that the CUDA backend's kernels and wrappers run, compiled by g++, on a
 * machine without a GPU (make check-cuda-cpu, docs/architecture.md "CUDA on
 * the CPU").  tests/cudacpu/include/{cuda_runtime,cublas_v2,cublasLt}.h include this
 * file; tests/cudacpu/hipcc.sh rewrites the two spellings C++ cannot parse
 * (kernel<<<grid, block, smem>>>(args) and `extern __shared__ T x[];`).
 *
 * Where the emulation would accept what a GPU refuses, the shim refuses it
 * the way CUDA does, so the wrappers' launch logic is checked too:
 *  - a launch with an empty grid or block, more than 1024 threads, a grid
 *    beyond 2^31-1 x 65535 x 65535, or dynamic shared memory over 48 KiB
 *    without cudaFuncSetAttribute's opt-in (at most an H100's 227 KiB)
 *    fails with the error CUDA gives, read by cudaGetLastError;
 *  - a pointer argument of a kernel that is not inside a cudaMalloc'd block
 *    (a host pointer) fails the launch with cudaErrorIllegalAddress and one
 *    stderr line naming the kernel and the argument;
 *  - warp shuffles are CUDA's 32 lanes (HIP-CPU's own are 64 wide and
 *    mis-handle a width below 64), implemented with a block-wide exchange,
 *    so like every CUDA use here they must be called by the whole block;
 *  - every launch and memset waits for the kernel: HIP-CPU's null stream
 *    can run two batches of queued work at once (its wait_all_streams_
 *    drains the null stream in a std::async and again in its for_each over
 *    streams_, which holds the null stream too), so kernels queued behind
 *    each other ran out of order now and then; in order, as CUDA's legacy
 *    stream runs them, the results are the same run to run;
 *  - cublasGemmEx is a reference GEMM launched as a kernel on the stream
 *    (column-major, cuBLAS's transposes, leading-dimension checks and
 *    beta = 0 semantics), fp32 products summed in order; cublasLtMatmul
 *    the same GEMM, for the 16-bit products matmul.cu asks of it (with the
 *    BIAS epilogue: the bias added in fp32, then the one rounding).
 * What it cannot show: GPU timing, races that fibers run in order hide,
 * cuBLAS's own numerics, tensor cores, NCCL.
 */
#ifndef MDS_TESTS_CUDACPU_CUDA_SHIM_H
#define MDS_TESTS_CUDACPU_CUDA_SHIM_H

#include <hip/hip_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>
#include "dtype.h"   /* kernels/: the 16-bit operands of cublasGemmEx, widened as the kernels do */

/* Plain functions: HIP-CPU's GCC attributes (simd clones) buy nothing here. */
#undef __device__
#define __device__
#undef __global__
#define __global__

/* ---- errors --------------------------------------------------------------------- */

typedef hipError_t cudaError_t;
#define cudaSuccess hipSuccess
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaErrorUnknown hipErrorUnknown
#define cudaErrorInvalidConfiguration hipErrorInvalidConfiguration
#define cudaErrorIllegalAddress hipErrorIllegalAddress
#define cudaErrorMemoryAllocation hipErrorOutOfMemory

/* The launch errors the shim finds (HIP-CPU's own launches never fail). */
inline cudaError_t mds_cucpu_launch_error = cudaSuccess;

inline cudaError_t cudaGetLastError(void)
{
    cudaError_t e = mds_cucpu_launch_error;
    mds_cucpu_launch_error = cudaSuccess;
    cudaError_t h = hipGetLastError();
    return e != cudaSuccess ? e : h;
}

inline const char *cudaGetErrorString(cudaError_t e) { return hipGetErrorString(e); }

/* ---- device memory: tracked, so that a kernel given a host pointer fails ---------- */

inline std::map<std::uintptr_t, std::size_t> mds_cucpu_blocks;
inline std::mutex mds_cucpu_blocks_lock;

inline bool mds_cucpu_is_device(const void *p)
{
    std::lock_guard<std::mutex> g(mds_cucpu_blocks_lock);
    std::uintptr_t a = (std::uintptr_t)p;
    auto it = mds_cucpu_blocks.upper_bound(a);
    if (it == mds_cucpu_blocks.begin())
        return false;
    --it;
    return a <= it->first + it->second;   /* one past the end is a valid argument */
}

inline cudaError_t cudaMalloc(void **p, std::size_t bytes)
{
    cudaError_t e = hipMalloc(p, bytes);
    if (e == hipSuccess && !*p)
        return cudaErrorMemoryAllocation;
    if (e == hipSuccess) {
        std::lock_guard<std::mutex> g(mds_cucpu_blocks_lock);
        mds_cucpu_blocks[(std::uintptr_t)*p] = bytes;
    }
    return e;
}

inline cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> g(mds_cucpu_blocks_lock);
        if (!mds_cucpu_blocks.erase((std::uintptr_t)p))
            return cudaErrorInvalidValue;   /* not a cudaMalloc'd block: CUDA refuses it too */
    }
    return hipFree(p);
}

/* Page-locked host memory (the host-staged transport's staging buffers):
 * plain host memory here, which kernels may not take as an argument, as on
 * a GPU without mapped memory. */
#define cudaHostAllocDefault 0u
inline cudaError_t cudaHostAlloc(void **p, std::size_t bytes, unsigned)
{
    return hipHostMalloc(p, bytes, hipHostMallocDefault);
}

inline cudaError_t cudaFreeHost(void *p)
{
    return hipHostFree(p);
}

typedef hipMemcpyKind cudaMemcpyKind;
#define cudaMemcpyDefault hipMemcpyDefault
typedef hipStream_t cudaStream_t;

inline cudaError_t cudaMemcpy(void *dst, const void *src, std::size_t n, cudaMemcpyKind k)
{
    return hipMemcpy(dst, src, n, k);
}

inline cudaError_t cudaMemset(void *p, int v, std::size_t n)
{
    if (n && !mds_cucpu_is_device(p))
        return cudaErrorInvalidValue;
    return hipMemset(p, v, n);
}

/* Synchronous, as every launch here (the file comment says why); the
 * legacy default stream is the only one the backend uses. */
inline cudaError_t cudaMemsetAsync(void *p, int v, std::size_t n, cudaStream_t s)
{
    if (s)
        return cudaErrorInvalidValue;
    return cudaMemset(p, v, n);
}

/* Events (backend_cuda.cu's timing marks): recorded in the null stream,
 * the times between them the host's, as the emulated kernels run there. */
typedef hipEvent_t cudaEvent_t;
inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return hipEventCreate(e); }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return hipEventRecord(e, s); }
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { return hipEventElapsedTime(ms, a, b); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { return hipEventDestroy(e); }

inline cudaError_t cudaStreamSynchronize(cudaStream_t s) { return hipStreamSynchronize(s); }
inline cudaError_t cudaDeviceSynchronize(void) { return hipDeviceSynchronize(); }
inline cudaError_t cudaMemGetInfo(std::size_t *fr, std::size_t *tot) { return hipMemGetInfo(fr, tot); }

/* ---- the device --------------------------------------------------------------------- */

typedef hipDeviceProp_t cudaDeviceProp;

inline cudaError_t cudaGetDeviceCount(int *n) { return hipGetDeviceCount(n); }
inline cudaError_t cudaSetDevice(int d) { return hipSetDevice(d); }
inline cudaError_t cudaGetDevice(int *d) { return hipGetDevice(d); }

inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    cudaError_t e = hipGetDeviceProperties(p, d);
    if (e == hipSuccess) {
        std::snprintf(p->name, sizeof p->name, "HIP-CPU emulation");
        p->major = 9;   /* the launch limits below are an sm_90's */
        p->minor = 0;
    }
    return e;
}

enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

#define MDS_CUCPU_SMEM_DEFAULT (48 * 1024)
#define MDS_CUCPU_SMEM_OPTIN 232448   /* an H100's, as cudaDevAttrMaxSharedMemoryPerBlockOptin reads there */

inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int)
{
    if (a != cudaDevAttrMaxSharedMemoryPerBlockOptin)
        return cudaErrorInvalidValue;
    *v = MDS_CUCPU_SMEM_OPTIN;
    return cudaSuccess;
}

/* The dynamic shared memory each kernel opted into. */
inline std::map<const void *, int> mds_cucpu_smem_optin;

inline cudaError_t cudaFuncSetAttribute(const void *k, cudaFuncAttribute a, int v)
{
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || v > MDS_CUCPU_SMEM_OPTIN)
        return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> g(mds_cucpu_blocks_lock);
    mds_cucpu_smem_optin[k] = v;
    return cudaSuccess;
}

/* Static shared memory is a thread_local here, not counted: 0 bytes, and
 * the dynamic limit is 48 KiB or what the kernel opted into. */
struct cudaFuncAttributes {
    std::size_t sharedSizeBytes;
    int maxDynamicSharedSizeBytes;
};

inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *fa, const void *k)
{
    std::lock_guard<std::mutex> g(mds_cucpu_blocks_lock);
    auto it = mds_cucpu_smem_optin.find(k);
    fa->sharedSizeBytes = 0;
    fa->maxDynamicSharedSizeBytes = it != mds_cucpu_smem_optin.end() && it->second > MDS_CUCPU_SMEM_DEFAULT
                                        ? it->second : MDS_CUCPU_SMEM_DEFAULT;
    return cudaSuccess;
}

/* ---- warp shuffles: 32 lanes of the linear thread index --------------------------------- */

/* Every thread of the block writes its value, waits, reads its source lane's
 * and waits again before the buffer is reused: a block-wide exchange, so it
 * assumes (as each use in kernels/cuda/ does) a full mask and the whole
 * block calling it together. */
template <typename T>
inline T mds_cucpu_shfl(T v, int lane_src, bool in_range)
{
    thread_local static T buf[1024];
    unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    buf[tid] = v;
    __syncthreads();
    T r = in_range ? buf[(tid & ~31u) + (unsigned)lane_src] : v;
    __syncthreads();
    return r;
}

template <typename T>
inline T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32)
{
    unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned lane = tid & 31u, seg = lane / (unsigned)width * (unsigned)width;
    unsigned src = lane + delta;
    return mds_cucpu_shfl(v, (int)src, src < seg + (unsigned)width);
}

template <typename T>
inline T __shfl_sync(unsigned, T v, int src_lane, int width = 32)
{
    unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned lane = tid & 31u, seg = lane / (unsigned)width * (unsigned)width;
    return mds_cucpu_shfl(v, (int)(seg + (unsigned)src_lane % (unsigned)width), true);
}

template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32)
{
    unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned lane = tid & 31u, seg = lane / (unsigned)width * (unsigned)width;
    unsigned src = lane ^ (unsigned)mask;
    return mds_cucpu_shfl(v, (int)src, src >= seg && src < seg + (unsigned)width);
}

/* ---- launches: kernel<<<grid, block, smem>>>(args) becomes
 *      mds_cucpu_launch(kernel, grid, block, smem)(args) (hipcc.sh) ------------------- */

template <typename A>
inline bool mds_cucpu_arg_ok(const char *kernel, int i, const A &a)
{
    if constexpr (std::is_pointer_v<A>) {
        if (a && !mds_cucpu_is_device((const void *)a)) {
            std::fprintf(stderr, "cuda-on-cpu: %s: argument %d (%p) is not device memory\n", kernel, i,
                         (const void *)a);
            return false;
        }
    }
    return true;
}

template <typename K>
struct mds_cucpu_launcher {
    K *kernel;
    const char *name;
    dim3 grid, block;
    std::size_t smem;

    cudaError_t check() const
    {
        unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
        if (!grid.x || !grid.y || !grid.z || !threads || threads > 1024 || block.z > 64 || grid.x > 0x7fffffffu ||
            grid.y > 65535 || grid.z > 65535)
            return cudaErrorInvalidConfiguration;
        cudaFuncAttributes fa;
        cudaFuncGetAttributes(&fa, (const void *)kernel);
        if (smem > (std::size_t)fa.maxDynamicSharedSizeBytes)
            return cudaErrorInvalidValue;
        return cudaSuccess;
    }

    template <typename... A>
    void operator()(A... args) const
    {
        cudaError_t e = check();
        int i = 0;
        bool ok = (... && mds_cucpu_arg_ok(name, i++, args));
        if (e == cudaSuccess && !ok)
            e = cudaErrorIllegalAddress;
        if (e != cudaSuccess) {
            if (mds_cucpu_launch_error == cudaSuccess)
                mds_cucpu_launch_error = e;
            return;
        }
        K *k = kernel;
        hipLaunchKernelGGL(k, grid, block, (std::uint32_t)smem, nullptr, args...);
        hipDeviceSynchronize();   /* one kernel in flight: see the file comment */
    }
};

template <typename K>
inline mds_cucpu_launcher<K> mds_cucpu_launch_(K *kernel, const char *name, dim3 grid, dim3 block,
                                               std::size_t smem = 0)
{
    return mds_cucpu_launcher<K>{kernel, name, grid, block, smem};
}
#define mds_cucpu_launch(kernel, ...) mds_cucpu_launch_(kernel, #kernel, __VA_ARGS__)

/* ---- cuBLAS: a reference GEMM with cublasGemmEx's contract -------------------------------- */

struct cublasContext { int math_mode; };
typedef struct cublasContext *cublasHandle_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2 } cublasMath_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_PEDANTIC = 69 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

inline cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    static cublasContext ctx;
    *h = &ctx;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math_mode = m;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    return !h ? CUBLAS_STATUS_NOT_INITIALIZED : s ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS;
}

/* Element i of a cuBLAS operand of type t (fp32, or 16-bit bits widened
 * exactly as kernels/dtype.h does). */
inline float mds_cucpu_elem(const void *p, int t, std::size_t i)
{
    if (t == CUDA_R_32F)
        return ((const float *)p)[i];
    std::uint16_t h = ((const std::uint16_t *)p)[i];
    return t == CUDA_R_16BF ? mds_bf16_to_f32(h) : mds_f16_to_f32(h);
}

/* One thread per element of C (m, n), column-major: C = alpha op(A) op(B)
 * + beta C, C not read when beta is 0 (cuBLAS's rule: NaN there is
 * overwritten).  A and B fp32, or both 16-bit (each product then exact, as
 * on the tensor cores); C fp32, or (16-bit operands) their type, the fp32
 * result rounded to nearest even. */
/* cuBLASLt's GELU epilogues: the tanh form, computed as a GPU library
 * would (tanhf; not the bits of mds's own GELU, which the tests'
 * tolerance then has to cover, as on the GPU) */
inline float mds_cucpu_gelu(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}
inline float mds_cucpu_dgelu(float x)
{
    float t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
}

/* the epilogue of one element: MDS_CUCPU_EPI_* (cuBLASLt's, below) */
enum { MDS_CUCPU_EPI_NONE, MDS_CUCPU_EPI_GELU, MDS_CUCPU_EPI_DGELU };

inline void mds_cucpu_gemm_kernel(int ta, int tb, int m, int n, int k, float alpha, const void *A, int at, int lda,
                                  const void *Bm, int bt, int ldb, float beta, void *Cm, int ct, int ldc,
                                  const void *bias, int epi, void *aux, long auxld)
{
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)m * n)
        return;
    int i = (int)(idx % m), j = (int)(idx / m);
    float s = 0.0f;
    for (int p = 0; p < k; p++) {
        float a = ta ? mds_cucpu_elem(A, at, (std::size_t)i * lda + p) : mds_cucpu_elem(A, at, (std::size_t)p * lda + i);
        float b = tb ? mds_cucpu_elem(Bm, bt, (std::size_t)p * ldb + j) : mds_cucpu_elem(Bm, bt, (std::size_t)j * ldb + p);
        s = s + a * b;
    }
    std::size_t ci = (std::size_t)j * ldc + i;
    float r = beta == 0.0f ? alpha * s : alpha * s + beta * mds_cucpu_elem(Cm, ct, ci);
    if (bias)   /* cuBLASLt's BIAS epilogue: one value a row of C, C's type, added before the rounding */
        r = r + mds_cucpu_elem(bias, ct, (std::size_t)i);
    std::size_t ai = (std::size_t)j * auxld + i;
    if (epi == MDS_CUCPU_EPI_GELU) {   /* aux: the GELU's input, in C's type; C: GELU of the fp32 value */
        ((std::uint16_t *)aux)[ai] = mds_f32_to_16(ct == CUDA_R_16BF ? MDS_BF16 : MDS_F16, r);
        r = mds_cucpu_gelu(r);
    } else if (epi == MDS_CUCPU_EPI_DGELU) {   /* aux read: the GELU's input the forward stored */
        r = r * mds_cucpu_dgelu(mds_cucpu_elem(aux, ct, ai));
    }
    if (ct == CUDA_R_32F)
        ((float *)Cm)[ci] = r;
    else
        ((std::uint16_t *)Cm)[ci] = mds_f32_to_16(ct == CUDA_R_16BF ? MDS_BF16 : MDS_F16, r);
}

/* cuBLAS's combinations that mds uses: fp32 operands with (pedantic) fp32
 * compute, or two 16-bit operands of one type with fp32 compute (not
 * pedantic: the tensor cores); C fp32, or the 16-bit operands' type with
 * beta 0. */
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                   int k, const void *alpha, const void *A, cudaDataType at, int lda, const void *Bm,
                                   cudaDataType bt, int ldb, const void *beta, void *Cm, cudaDataType ct, int ldc,
                                   cublasComputeType_t comp, cublasGemmAlgo_t)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int f32 = at == CUDA_R_32F && bt == CUDA_R_32F &&
              (comp == CUBLAS_COMPUTE_32F || comp == CUBLAS_COMPUTE_32F_PEDANTIC);
    int h16 = at == bt && (at == CUDA_R_16BF || at == CUDA_R_16F) && comp == CUBLAS_COMPUTE_32F;
    if ((ct != CUDA_R_32F && !(h16 && ct == at)) || (!f32 && !h16))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* a 16-bit C only written (beta 0): on an H200, cuBLAS adding into a
       16-bit C (beta 1) missed the fp32 sum rounded once by many units, so
       mds never asks for it, and the emulation refuses it to keep it so */
    if (ct != CUDA_R_32F && beta && *(const float *)beta != 0.0f)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    int rows_a = ta == CUBLAS_OP_N ? m : k, rows_b = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (rows_a > 1 ? rows_a : 1) || ldb < (rows_b > 1 ? rows_b : 1) ||
        ldc < (m > 1 ? m : 1) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n)
        return CUBLAS_STATUS_SUCCESS;
    std::size_t cells = (std::size_t)m * n;
    mds_cucpu_launch(mds_cucpu_gemm_kernel, dim3((unsigned)((cells + 255) / 256)), dim3(256))(
        (int)ta, (int)tb, m, n, k, *(const float *)alpha, A, (int)at, lda, Bm, (int)bt, ldb, *(const float *)beta,
        Cm, (int)ct, ldc, (const void *)nullptr, (int)MDS_CUCPU_EPI_NONE, (void *)nullptr, 0L);
    return mds_cucpu_launch_error == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

/* ---- cuBLASLt: the subset matmul.cu uses, on the same reference GEMM --------------------- */

/* cublasLtMatmul with a transpose each for A and B, 16-bit A, B and D of
 * one type (fp32 compute and scale), C == D with beta 0, and the DEFAULT or
 * BIAS epilogue (the bias in D's type, the default); anything else is
 * refused as NOT_SUPPORTED by the heuristic, as a GPU may refuse it. */
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
} cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
    CUBLASLT_EPILOGUE_DGELU = 64 | 128,
} cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;
struct cublasLtContext { int unused; };
typedef struct cublasLtContext *cublasLtHandle_t;
struct cublasLtMatmulDescOpaque {
    int ta, tb, epi;
    const void *bias;
    cublasComputeType_t comp;
    cudaDataType scale;
    void *aux;
    std::int64_t auxld;
};
typedef struct cublasLtMatmulDescOpaque *cublasLtMatmulDesc_t;
struct cublasLtMatrixLayoutOpaque { cudaDataType t; std::uint64_t rows, cols; std::int64_t ld; };
typedef struct cublasLtMatrixLayoutOpaque *cublasLtMatrixLayout_t;
/* the alignments A, B, C, D are promised to have (cuBLASLt assumes 256
   bytes unless told less; an algorithm chosen so fails on a pointer
   aligned less, and so does the emulation) */
struct cublasLtMatmulPreferenceOpaque { std::size_t ws; std::uint32_t align[4]; };
typedef struct cublasLtMatmulPreferenceOpaque *cublasLtMatmulPreference_t;
typedef struct { std::uint32_t align[4]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    std::size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    static cublasLtContext ctx;
    *h = &ctx;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t comp, cudaDataType scale)
{
    *d = new cublasLtMatmulDescOpaque{0, 0, CUBLASLT_EPILOGUE_DEFAULT, nullptr, comp, scale, nullptr, 0};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                     const void *v, std::size_t n)
{
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (n != sizeof(int)) return CUBLAS_STATUS_INVALID_VALUE;
        (a == CUBLASLT_MATMUL_DESC_TRANSA   ? d->ta
         : a == CUBLASLT_MATMUL_DESC_TRANSB ? d->tb
                                            : d->epi) = *(const int *)v;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (n != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
        d->bias = *(const void *const *)v;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if (n != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
        d->aux = *(void *const *)v;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if (n != sizeof(std::int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        d->auxld = *(const std::int64_t *)v;
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, std::uint64_t rows,
                                                 std::uint64_t cols, std::int64_t ld)
{
    *l = new cublasLtMatrixLayoutOpaque{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = new cublasLtMatmulPreferenceOpaque{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t a, const void *v,
                                                           std::size_t n)
{
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && n == sizeof(std::size_t)) {
        p->ws = *(const std::size_t *)v;
        return CUBLAS_STATUS_SUCCESS;
    }
    /* the alignments: powers of two, as cuBLASLt wants them (uint32_t) */
    if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES &&
        n == sizeof(std::uint32_t)) {
        std::uint32_t al = *(const std::uint32_t *)v;
        if (!al || (al & (al - 1)))
            return CUBLAS_STATUS_INVALID_VALUE;
        p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = al;
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

/* MDS_CUCPU_LT=heuristic: the heuristic offers no algorithm; =matmul: it
 * does, and cublasLtMatmul refuses it (NOT_SUPPORTED): the two ways a GPU
 * may turn matmul.cu to its path without cuBLASLt (make check-cuda-cpu). */
inline int mds_cucpu_lt_refuses(const char *where)
{
    const char *e = getenv("MDS_CUCPU_LT");
    return e && strcmp(e, where) == 0;
}

/* What the emulation runs: the shapes must agree as cuBLASLt checks them. */
inline cublasStatus_t mds_cucpu_lt_check(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                         cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl)
{
    int h16 = a->t == b->t && (a->t == CUDA_R_16BF || a->t == CUDA_R_16F);
    int gelu = d->epi == CUBLASLT_EPILOGUE_GELU_AUX || d->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
               d->epi == CUBLASLT_EPILOGUE_DGELU;
    if (!h16 || d->comp != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F || dl->t != a->t || c->t != dl->t ||
        (d->epi != CUBLASLT_EPILOGUE_DEFAULT && d->epi != CUBLASLT_EPILOGUE_BIAS && !gelu) ||
        ((d->epi & CUBLASLT_EPILOGUE_BIAS) && !d->bias))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* the GELU epilogues' aux: D's shape, its ld a multiple of 8 and no
       less than D's rows (cublasLt.h) */
    if (gelu && (!d->aux || d->auxld % 8 || d->auxld < (std::int64_t)dl->rows))
        return CUBLAS_STATUS_INVALID_VALUE;
    std::uint64_t m = dl->rows, n = dl->cols, k = d->ta ? a->rows : a->cols;
    if ((d->ta ? a->cols : a->rows) != m || (d->tb ? b->rows : b->cols) != n || (d->tb ? b->cols : b->rows) != k ||
        c->rows != m || c->cols != n || a->ld < (std::int64_t)a->rows || b->ld < (std::int64_t)b->rows ||
        dl->ld < (std::int64_t)m)
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                                     cublasLtMatmulPreference_t pref, int want,
                                                     cublasLtMatmulHeuristicResult_t *res, int *found)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t st = mds_cucpu_lt_check(d, a, b, c, dl);
    *found = 0;
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (mds_cucpu_lt_refuses("heuristic"))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (want >= 1) {
        res[0] = cublasLtMatmulHeuristicResult_t{};
        for (int i = 0; i < 4; i++)
            res[0].algo.align[i] = pref ? pref->align[i] : 256;
        res[0].state = CUBLAS_STATUS_SUCCESS;
        *found = 1;
    }
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                                     cublasLtMatrixLayout_t a, const void *Bm, cublasLtMatrixLayout_t b,
                                     const void *beta, const void *Cm, cublasLtMatrixLayout_t c, void *Dm,
                                     cublasLtMatrixLayout_t dl, const cublasLtMatmulAlgo_t *algo, void *,
                                     std::size_t, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t st = mds_cucpu_lt_check(d, a, b, c, dl);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (mds_cucpu_lt_refuses("matmul"))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* C is D, written only (beta 0): the shim's GEMM reads no C then */
    if (!alpha || !beta || *(const float *)beta != 0.0f || Cm != Dm || s || !algo)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const void *ptrs[4] = {A, Bm, Cm, Dm};
    for (int i = 0; i < 4; i++)
        if ((std::uintptr_t)ptrs[i] % algo->align[i])
            return CUBLAS_STATUS_INVALID_VALUE;   /* (the GPU: a misaligned access, or this) */
    int m = (int)dl->rows, n = (int)dl->cols, k = (int)(d->ta ? a->rows : a->cols);
    if (!m || !n)
        return CUBLAS_STATUS_SUCCESS;
    std::size_t cells = (std::size_t)m * n;
    mds_cucpu_launch(mds_cucpu_gemm_kernel, dim3((unsigned)((cells + 255) / 256)), dim3(256))(
        d->ta, d->tb, m, n, k, *(const float *)alpha, A, (int)a->t, (int)a->ld, Bm, (int)b->t, (int)b->ld, 0.0f, Dm,
        (int)dl->t, (int)dl->ld, (d->epi & CUBLASLT_EPILOGUE_BIAS) ? d->bias : nullptr,
        d->epi == CUBLASLT_EPILOGUE_DGELU ? (int)MDS_CUCPU_EPI_DGELU
        : d->epi == CUBLASLT_EPILOGUE_GELU_AUX || d->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? (int)MDS_CUCPU_EPI_GELU
                                                                                            : (int)MDS_CUCPU_EPI_NONE,
        d->aux, (long)d->auxld);
    return mds_cucpu_launch_error == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

#endif /* MDS_TESTS_CUDACPU_CUDA_SHIM_H */
