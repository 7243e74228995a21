/*
 * backend_cuda.cu - the "cuda" backend of kernels/backend.h: device memory
 * (cudaMalloc, zeroed), copies in any direction through unified addressing
 * (cudaMemcpyDefault), the cuBLAS handle, and the op table of the
 * `<op>_cuda` kernels in kernels/cuda/<op>.cu.
 *
 * Everything runs on the legacy default stream of one device (0, or the
 * ordinal mds_backend_find_device bound: mdstrain's GPU of the local
 * rank), so ops, copies and memsets are ordered as the model issues them
 * and a copy to the host waits for the kernels before it.  Failures never
 * exit: a failed launch or copy is noted and the next sync() returns -1
 * with the CUDA error string.  What it deliberately does not do: several
 * GPUs in one process, peer copies, communication (train/comm_nccl.c).
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "common.cuh"
#include "dtype.h"

static char cu_err[256];
static int cu_failed;
static cublasHandle_t cu_blas, cu_blas_tc;   /* pedantic fp32; default math (16-bit operands) */
static cublasLtHandle_t cu_lt;                /* the bias epilogue's GEMMs (matmul.cu) */
static void *cu_lt_ws;                        /* and their workspace: MDS_CUDA_LT_WS bytes, or none */
static int cu_lt_ws_tried;
#define MDS_CUDA_LT_WS ((size_t)32 << 20)
static void *cu_scratch;
static size_t cu_scratch_bytes;
static mds_mem_ledger cu_ledger;   /* alloc() and the scratch: mem_held() */

void mds_cuda_note(cudaError_t e, const char *what)
{
    if (e == cudaSuccess || cu_failed)
        return;
    cu_failed = 1;
    snprintf(cu_err, sizeof cu_err, "%s: %s", what, cudaGetErrorString(e));
}

void *mds_cuda_scratch(size_t bytes)
{
    if (bytes <= cu_scratch_bytes)
        return cu_scratch;
    /* cudaFree synchronises, so the old scratch is no longer in use */
    if (cu_scratch) {
        mds_mem_ledger_remove(&cu_ledger, cu_scratch);
        cudaFree(cu_scratch);
    }
    cu_scratch = NULL;
    cu_scratch_bytes = 0;
    cudaError_t e = cudaMalloc(&cu_scratch, bytes);
    if (e == cudaSuccess && mds_mem_ledger_add(&cu_ledger, cu_scratch, bytes) != 0) {
        cudaFree(cu_scratch);
        e = cudaErrorMemoryAllocation;
    }
    if (e != cudaSuccess) {
        cu_scratch = NULL;
        mds_cuda_note(e, "cannot allocate the kernels' scratch");
        return NULL;
    }
    cu_scratch_bytes = bytes;
    return cu_scratch;
}

struct cublasContext *mds_cuda_cublas(void) { return cu_blas; }
struct cublasContext *mds_cuda_cublas_tc(void) { return cu_blas_tc; }
struct cublasLtContext *mds_cuda_cublaslt(void) { return cu_lt; }

void *mds_cuda_lt_workspace(size_t *bytes)
{
    if (!cu_lt_ws_tried) {   /* once: without it cuBLASLt still runs, with fewer algorithms */
        cu_lt_ws_tried = 1;
        if (cudaMalloc(&cu_lt_ws, MDS_CUDA_LT_WS) != cudaSuccess) {
            cudaGetLastError();
            cu_lt_ws = NULL;
        } else if (mds_mem_ledger_add(&cu_ledger, cu_lt_ws, MDS_CUDA_LT_WS) != 0) {
            cudaFree(cu_lt_ws);
            cu_lt_ws = NULL;
        }
    }
    *bytes = cu_lt_ws ? MDS_CUDA_LT_WS : 0;
    return cu_lt_ws;
}

static int cu_compute_dtype = MDS_F32;
void mds_cuda_set_compute_dtype(int dtype)
{
    cu_compute_dtype = dtype == MDS_BF16 || dtype == MDS_F16 ? dtype : MDS_F32;
}
int mds_cuda_compute_dtype(void) { return cu_compute_dtype; }

static int cu_alloc(void **ptr, size_t bytes)
{
    *ptr = NULL;
    cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 1);
    if (e == cudaSuccess)
        e = cudaMemset(*ptr, 0, bytes ? bytes : 1);
    if (e == cudaSuccess && mds_mem_ledger_add(&cu_ledger, *ptr, bytes) == 0)
        return 0;
    if (e == cudaSuccess) {   /* the ledger could not grow: out of host memory */
        cudaFree(*ptr);
        *ptr = NULL;
        snprintf(cu_err, sizeof cu_err, "cudaMalloc of %zu bytes: out of host memory for its record", bytes);
        return -1;
    }
    if (*ptr)
        cudaFree(*ptr);
    *ptr = NULL;
    cudaGetLastError();   /* an out-of-memory error is not sticky: clear it */
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess)
        snprintf(cu_err, sizeof cu_err, "cudaMalloc of %zu bytes: %s (%zu bytes free of %zu)", bytes,
                 cudaGetErrorString(e), fr, tot);
    else
        snprintf(cu_err, sizeof cu_err, "cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
    return -1;
}

static void cu_free(void *ptr)
{
    if (!ptr)
        return;
    mds_mem_ledger_remove(&cu_ledger, ptr);
    mds_cuda_note(cudaFree(ptr), "cudaFree");
}

static void cu_zero(void *ptr, size_t bytes)
{
    if (bytes)
        mds_cuda_note(cudaMemset(ptr, 0, bytes), "cudaMemset");
}

static void cu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        mds_cuda_note(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

static int cu_sync(void)
{
    mds_cuda_note(cudaStreamSynchronize(0), "cudaStreamSynchronize");
    mds_cuda_note(cudaGetLastError(), "a kernel");
    if (!cu_failed)
        return 0;
    return -1;
}

static int cu_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    return cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess ? 0 : -1;
}

static void cu_mem_held(size_t *now_bytes, size_t *peak_bytes)
{
    mds_mem_ledger_read(&cu_ledger, now_bytes, peak_bytes);
}

static const char *cu_error(void) { return cu_err; }

/* Page-locked host memory: cudaMemcpy to and from it runs at the bus's
 * speed without a bounce through a driver buffer (host staging's copies). */
static int cu_host_alloc(void **ptr, size_t bytes)
{
    cudaError_t e = cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e == cudaSuccess)
        return 0;
    *ptr = NULL;
    cudaGetLastError();
    snprintf(cu_err, sizeof cu_err, "cudaHostAlloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
    return -1;
}

static void cu_host_free(void *ptr)
{
    if (ptr)
        mds_cuda_note(cudaFreeHost(ptr), "cudaFreeHost");
}

/* A mark is an event recorded in the stream the ops run on (the legacy
 * default one); the time between two is the device's (cudaEventElapsedTime,
 * about half a microsecond's resolution). */
static int cu_mark_new(void **mark)
{
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreate(&ev);
    if (e == cudaSuccess) {
        *mark = (void *)ev;
        return 0;
    }
    cudaGetLastError();
    snprintf(cu_err, sizeof cu_err, "cudaEventCreate (a timing mark): %s", cudaGetErrorString(e));
    return -1;
}

static void cu_mark_take(void *mark) { mds_cuda_note(cudaEventRecord((cudaEvent_t)mark, 0), "cudaEventRecord"); }

static double cu_mark_ms(void *from, void *to)
{
    float ms = 0.0f;
    mds_cuda_note(cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to), "cudaEventElapsedTime");
    return ms;
}

static void cu_mark_free(void *mark)
{
    if (mark)
        mds_cuda_note(cudaEventDestroy((cudaEvent_t)mark), "cudaEventDestroy");
}

static char cu_device[300];

static mds_backend cu = {
    "cuda",
    cu_device,
    cu_alloc,
    cu_free,
    cu_zero,
    cu_copy,
    cu_sync,
    cu_mem_info,
    cu_mem_held,
    cu_error,
    {
        encoder_forward_cuda,
        encoder_backward_cuda,
        layernorm_forward_cuda,
        layernorm_backward_cuda,
        matmul_forward_cuda,
        matmul_backward_cuda,
        attention_forward_cuda,
        attention_backward_cuda,
        dropout_forward_cuda,
        dropout_backward_cuda,
        rope_forward_cuda,
        rope_backward_cuda,
        rmsnorm_forward_cuda,
        rmsnorm_backward_cuda,
        swiglu_forward_cuda,
        swiglu_backward_cuda,
        gelu_forward_cuda,
        gelu_backward_cuda,
        matmul_gelu_forward_cuda,
        matmul_gelu_backward_cuda,
        residual_forward_cuda,
        residual_backward_cuda,
        crossentropy_forward_cuda,
        crossentropy_rescale_cuda,
        crossentropy_loss_cuda,
        crossentropy_backward_cuda,
        crossentropy_fused_cuda,
        loss_reduce_cuda,
        loss_grad_cuda,
        round_to_cuda,
        unscale_check_cuda,
        adamw_update_cuda,
        global_norm_squared_cuda,
    },
    cu_host_alloc,
    cu_host_free,
    mds_cuda_set_compute_dtype,
    1,   /* rounds_kept */
    cu_mark_new,
    cu_mark_take,
    cu_mark_ms,
    cu_mark_free,
};

/*
 * The first call probes: no device (or no driver) gives NULL for good, and
 * then nothing else of CUDA is touched, so a CUDA build behaves on a
 * machine without a GPU exactly as a CPU build.  cuBLAS runs fp32 products
 * with TF32 off (CUBLAS_PEDANTIC_MATH; matmul.cu asks for
 * CUBLAS_COMPUTE_32F_PEDANTIC too), so they stay within fp32 rounding of
 * the CPU's; a second handle in the default math mode multiplies the
 * 16-bit copies of --bf16 / --fp16 operands on the tensor cores.
 */
extern "C" int mds_backend_cuda_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" const mds_backend *mds_backend_cuda_probe(int device)
{
    static int state;   /* 0 not probed, 1 present, -1 absent */
    static int bound;   /* the ordinal when present */
    if (state)
        return state > 0 && (device < 0 || device == bound) ? &cu : NULL;
    state = -1;
    int n = mds_backend_cuda_count();
    if (device < 0)
        device = 0;
    if (device >= n)
        return NULL;
    cudaDeviceProp prop;
    if (cudaSetDevice(device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    bound = device;
    if (cublasCreate(&cu_blas) != CUBLAS_STATUS_SUCCESS || cublasCreate(&cu_blas_tc) != CUBLAS_STATUS_SUCCESS)
        return NULL;
    if (cublasLtCreate(&cu_lt) != CUBLAS_STATUS_SUCCESS)
        cu_lt = NULL;   /* matmul.cu then adds the bias after the GEMM */
    cublasSetMathMode(cu_blas, CUBLAS_PEDANTIC_MATH);
    cublasSetStream(cu_blas, 0);
    cublasSetStream(cu_blas_tc, 0);
    snprintf(cu_device, sizeof cu_device, "GPU %d: %s, sm_%d%d, %.1f GiB", device, prop.name, prop.major, prop.minor,
             (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    state = 1;
    return &cu;
}
