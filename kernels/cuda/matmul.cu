/*
 * matmul.cu - CUDA linear layer (out = inp @ weight^T + bias) and its
 * backward, through cuBLAS in fp32: cublasGemmEx with
 * CUBLAS_COMPUTE_32F_PEDANTIC on a handle in CUBLAS_PEDANTIC_MATH, so no
 * TF32 and no reduced-precision reduction; the results sit within fp32
 * rounding of the CPU's (cuBLAS sums in its own order, so not its bits).
 * cuBLAS is deterministic run to run on one GPU model and toolkit.
 *
 * Row-major (M, K) x (N, K)^T is, in cuBLAS's column-major view,
 * C^T (N, M) = W (N, K as op T) x inp^T; dinp and dweight accumulate with
 * beta = 1 (+=, kernels.h's contract).  The bias is a separate kernel after
 * the product, as the CPU adds it after the sum; dbias gives each thread one
 * output channel and sums the rows in order in double (the CPU's bits).
 * Deliberately simple: no fused bias/GELU epilogue (cuBLASLt's is the fast
 * version), no bf16.
 */
#include <cublas_v2.h>
#include <stdio.h>

#include "common.cuh"

static const char *cublas_name(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}

/* C (m, n col-major, ldc) = alpha op(A) op(B) + beta C, fp32, pedantic. */
static void gemm(const char *what, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *A,
                 int lda, const float *Bm, int ldb, float beta, float *Cm, int ldc)
{
    const float one = 1.0f;
    cublasStatus_t s = cublasGemmEx(mds_cuda_cublas(), ta, tb, m, n, k, &one, A, CUDA_R_32F, lda, Bm, CUDA_R_32F, ldb,
                                    &beta, Cm, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        /* noted as a runtime failure: the next sync() reports it */
        static char msg[96];
        snprintf(msg, sizeof msg, "%s (cublasGemmEx: %s)", what, cublas_name(s));
        mds_cuda_note(cudaErrorUnknown, msg);
    }
}

__global__ static void add_bias_kernel(float *out, const float *bias, size_t rows, int OC)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * OC)
        out[i] += bias[i % OC];
}

void matmul_forward_cuda(float *out, const float *inp, const float *weight, const float *bias, int B, int T, int C,
                         int OC)
{
    size_t rows = (size_t)B * T;
    if (!rows || !OC) return;
    if (C == 0) {
        mds_cuda_note(cudaMemsetAsync(out, 0, rows * OC * sizeof(float), 0), "matmul_forward");
    } else {
        gemm("matmul_forward", CUBLAS_OP_T, CUBLAS_OP_N, OC, (int)rows, C, weight, C, inp, C, 0.0f, out, OC);
    }
    if (bias) {
        add_bias_kernel<<<mds_cu_blocks(rows * OC, 256), 256>>>(out, bias, rows, OC);
        MDS_CU_LAUNCHED("matmul_forward (bias)");
    }
}

__global__ static void dbias_kernel(float *dbias, const float *dout, long N, int OC)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC)
        return;
    double s = 0.0;
    for (long r = 0; r < N; r++)
        s += dout[(size_t)r * OC + o];
    dbias[o] += (float)s;
}

void matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, int B, int T, int C, int OC)
{
    long N = (long)B * T;
    if (!N || !OC || !C) return;
    /* dinp (N, C) += dout (N, OC) @ weight (OC, C) */
    gemm("matmul_backward (dinp)", CUBLAS_OP_N, CUBLAS_OP_N, C, (int)N, OC, weight, C, dout, OC, 1.0f, dinp, C);
    /* dweight (OC, C) += dout^T (OC, N) @ inp (N, C) */
    gemm("matmul_backward (dweight)", CUBLAS_OP_N, CUBLAS_OP_T, C, OC, (int)N, inp, C, dout, OC, 1.0f, dweight, C);
    if (dbias) {
        dbias_kernel<<<mds_cu_blocks((size_t)OC, 128), 128>>>(dbias, dout, N, OC);
        MDS_CU_LAUNCHED("matmul_backward (dbias)");
    }
}
