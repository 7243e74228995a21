/*
 * gemm_gpu.cu - `make bench-gpu`'s "cuBLAS alone": the matrix products of
 * one training step of a GPT (its linears, each three times: the forward,
 * the input gradient and the weight gradient), timed with nothing else on
 * the GPU, in two precisions:
 *
 *   bf16  cuBLASLt, bf16 inputs and outputs, fp32 accumulation (what
 *         PyTorch's autocast and llm.c run: the floor for a bf16 trainer);
 *   fp32  cublasGemmEx with CUBLAS_COMPUTE_32F_PEDANTIC (no TF32), with
 *         the transposes and betas of kernels/cuda/matmul.cu: what
 *         mdstrain's CUDA backend (version 1, fp32 storage) spends on them;
 *   mds16 cublasGemmEx on bf16 operands with an fp32 result, what
 *         matmul.cu issues under --bf16 after copying its operands to 16
 *         bits (the copies, its to16 kernel, not included: the profile in
 *         docs/benchmarks.md times them);
 *   fast  the same products from the fp32 operands themselves, with
 *         CUBLAS_COMPUTE_32F_FAST_16BF (cuBLAS converts them to bf16: on
 *         values that are already bf16, as the model's kept tensors are,
 *         exactly): whether that beats mds16 plus the copies.
 *
 * The shapes are the model's, Megatron's layout y = x W^T with W (OC, IC):
 * per layer the QKV (IC h, OC h + 2 kv), the attention output (h, h), the
 * first MLP linear (h, F, or 2F with SwiGLU) and the second (F, h); once the
 * output layer (h, padded vocabulary).  Attention's own products (Q K^T, P V)
 * are left out: flash attention owns them.  Each product runs --iters times
 * after two warm-up runs, timed by CUDA events; the step total is L times the
 * layer's products plus the output layer's.
 *
 * Output: one line per product, then
 *   per_step bf16_ms X fp32_ms Y tflop Z mds16_ms A fast16bf_ms B
 * (bench/gpu.sh reads X and Y by position)
 * (Z the step's matmul work in TFLOP, 2 m n k per product).  No GPU: one
 * line and exit 1; bad usage: exit 2.  Built by the Makefile with nvcc
 * ($(BUILD)/gemm_gpu), not part of libmds.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKSPACE_BYTES (32u << 20)

static void die(const char *what, const char *why)
{
    fprintf(stderr, "gemm_gpu: %s: %s\n", what, why);
    exit(1);
}

static void cu_check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) die(what, cudaGetErrorString(e));
}

static void blas_check(cublasStatus_t s, const char *what)
{
    if (s != CUBLAS_STATUS_SUCCESS) die(what, cublasGetStatusString(s));
}

/* a cheap hash into [-1, 1): products of zeros could take another path */
__global__ static void fill_kernel(float *f, __nv_bfloat16 *h, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u;
        x ^= x >> 15;
        float v = (float)(x & 0xffff) / 32768.0f - 1.0f;
        f[i] = v;
        h[i] = __float2bfloat16(v);
    }
}

struct bufs {
    float *f[3];
    __nv_bfloat16 *h[3];
    void *ws;
};

/* one product in cuBLAS's column-major terms: D (m, n) = op(A) op(B) + beta D */
struct gemm {
    const char *what;
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb;
    float beta;
};

/* One product through cublasGemmEx into b->f[2], fp32 result: fp32 (the
 * pedantic handle, COMPUTE_32F_PEDANTIC), mds16 (the bf16 copies of the
 * operands, COMPUTE_32F) and fast (the fp32 operands,
 * COMPUTE_32F_FAST_16BF), the last two on the default-math handle. */
static void run_ex(cublasHandle_t h, const struct gemm *g, struct bufs *b, int bf16, cublasComputeType_t compute)
{
    const float one = 1.0f;
    const void *A = bf16 ? (const void *)b->h[0] : (const void *)b->f[0];
    const void *B = bf16 ? (const void *)b->h[1] : (const void *)b->f[1];
    cudaDataType t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    blas_check(cublasGemmEx(h, g->ta, g->tb, g->m, g->n, g->k, &one, A, t, g->lda, B, t, g->ldb, &g->beta, b->f[2],
                            CUDA_R_32F, g->m, compute, CUBLAS_GEMM_DEFAULT),
               g->what);
}

struct lt_plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulHeuristicResult_t algo;
};

static void lt_prepare(cublasLtHandle_t lt, const struct gemm *g, struct lt_plan *p)
{
    blas_check(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    blas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &g->ta, sizeof g->ta), g->what);
    blas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &g->tb, sizeof g->tb), g->what);
    int ar = g->ta == CUBLAS_OP_N ? g->m : g->k, ac = g->ta == CUBLAS_OP_N ? g->k : g->m;
    int br = g->tb == CUBLAS_OP_N ? g->k : g->n, bc = g->tb == CUBLAS_OP_N ? g->n : g->k;
    blas_check(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, ar, ac, g->lda), g->what);
    blas_check(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, br, bc, g->ldb), g->what);
    blas_check(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_16BF, g->m, g->n, g->m), g->what);
    cublasLtMatmulPreference_t pref;
    size_t ws = WORKSPACE_BYTES;
    blas_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    blas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
               g->what);
    int found = 0;
    blas_check(cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->d, p->d, pref, 1, &p->algo, &found), g->what);
    if (!found) die(g->what, "cuBLASLt has no bf16 algorithm for this shape");
    cublasLtMatmulPreferenceDestroy(pref);
}

static void lt_release(struct lt_plan *p)
{
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->d);
    cublasLtMatmulDescDestroy(p->op);
}

static void run_bf16(cublasLtHandle_t lt, const struct gemm *g, const struct lt_plan *p, struct bufs *b)
{
    const float one = 1.0f;
    blas_check(cublasLtMatmul(lt, p->op, &one, b->h[0], p->a, b->h[1], p->b, &g->beta, b->h[2], p->d, b->h[2], p->d,
                              &p->algo.algo, b->ws, WORKSPACE_BYTES, 0),
               g->what);
}

/* milliseconds per run of one product in one precision (0 fp32, 1 bf16,
 * 2 mds16, 3 fast; h the pedantic handle, htc one in the default math
 * mode), after two warm-ups */
static double time_ms(int prec, cublasHandle_t h, cublasHandle_t htc, cublasLtHandle_t lt, const struct gemm *g,
                      struct bufs *b, int iters)
{
    struct lt_plan p;
    int bf16 = prec == 1;
    if (bf16) lt_prepare(lt, g, &p);
    cudaEvent_t e0, e1;
    cu_check(cudaEventCreate(&e0), "cudaEventCreate");
    cu_check(cudaEventCreate(&e1), "cudaEventCreate");
    for (int i = -2; i < iters; i++) {
        if (i == 0) cu_check(cudaEventRecord(e0, 0), "cudaEventRecord");
        if (bf16) run_bf16(lt, g, &p, b);
        else if (prec == 2) run_ex(htc, g, b, 1, CUBLAS_COMPUTE_32F);
        else if (prec == 3) run_ex(htc, g, b, 0, CUBLAS_COMPUTE_32F_FAST_16BF);
        else run_ex(h, g, b, 0, CUBLAS_COMPUTE_32F_PEDANTIC);
    }
    cu_check(cudaEventRecord(e1, 0), "cudaEventRecord");
    cu_check(cudaEventSynchronize(e1), g->what);
    float ms = 0;
    cu_check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (bf16) lt_release(&p);
    return (double)ms / iters;
}

/* The three products of a linear of IC inputs and OC outputs over N tokens,
 * as kernels/cuda/matmul.cu issues them (row-major tensors, column-major
 * cuBLAS): out = x W^T, dinp += dout W, dW += dout^T x. */
static void linear_gemms(const char *name, int N, int IC, int OC, struct gemm g[3], char names[3][48])
{
    snprintf(names[0], 48, "%s fwd", name);
    snprintf(names[1], 48, "%s dinp", name);
    snprintf(names[2], 48, "%s dweight", name);
    g[0] = (struct gemm){names[0], CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, IC, IC, 0.0f};
    g[1] = (struct gemm){names[1], CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, IC, OC, 1.0f};
    g[2] = (struct gemm){names[2], CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, IC, OC, 1.0f};
}

static void usage(void)
{
    fprintf(stderr, "usage: gemm_gpu --tokens N --hidden H --ffn F --layers L --vocab V --kv KV [--swiglu] "
                    "[--iters K]\n  (tokens = micro-batch x sequence; kv = key/value channels, H without GQA)\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long N = 0, H = 0, F = 0, L = 0, V = 0, KV = 0, iters = 10;
    int swiglu = 0;
    for (int i = 1; i < argc; i++) {
        long *dst = !strcmp(argv[i], "--tokens") ? &N : !strcmp(argv[i], "--hidden") ? &H : !strcmp(argv[i], "--ffn") ? &F
                  : !strcmp(argv[i], "--layers") ? &L : !strcmp(argv[i], "--vocab") ? &V : !strcmp(argv[i], "--kv") ? &KV
                  : !strcmp(argv[i], "--iters") ? &iters : NULL;
        if (!strcmp(argv[i], "--swiglu")) { swiglu = 1; continue; }
        char *end = NULL;
        if (!dst || i + 1 >= argc || (*dst = strtol(argv[i + 1], &end, 10)) <= 0 || *end || *dst > (1L << 30)) {
            fprintf(stderr, "gemm_gpu: %s '%s'\n", dst ? "bad value for" : "unknown argument", argv[i]);
            usage();
        }
        i++;
    }
    if (!N || !H || !F || !L || !V || !KV) usage();
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) die("no CUDA device", "cudaGetDeviceCount found none");
    cudaDeviceProp prop;
    cu_check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");

    struct gemm g[15];
    char names[15][48];
    linear_gemms("qkv", (int)N, (int)H, (int)(H + 2 * KV), g, names);
    linear_gemms("proj", (int)N, (int)H, (int)H, g + 3, names + 3);
    linear_gemms("fc", (int)N, (int)H, (int)(swiglu ? 2 * F : F), g + 6, names + 6);
    linear_gemms("fcproj", (int)N, (int)F, (int)H, g + 9, names + 9);
    linear_gemms("output", (int)N, (int)H, (int)V, g + 12, names + 12);

    size_t most = 0;   /* the largest operand: every buffer holds any of them */
    for (int i = 0; i < 15; i++) {
        size_t m = (size_t)g[i].m, n = (size_t)g[i].n, k = (size_t)g[i].k;
        size_t s[3] = {m * k, k * n, m * n};
        for (int j = 0; j < 3; j++) most = s[j] > most ? s[j] : most;
    }
    struct bufs b;
    for (int j = 0; j < 3; j++) {
        cu_check(cudaMalloc(&b.f[j], most * sizeof(float)), "cudaMalloc");
        cu_check(cudaMalloc(&b.h[j], most * sizeof(__nv_bfloat16)), "cudaMalloc");
        fill_kernel<<<1024, 256>>>(b.f[j], b.h[j], most);
    }
    cu_check(cudaMalloc(&b.ws, WORKSPACE_BYTES), "cudaMalloc");
    cublasHandle_t h, htc;
    cublasLtHandle_t lt;
    blas_check(cublasCreate(&h), "cublasCreate");
    blas_check(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    blas_check(cublasCreate(&htc), "cublasCreate");
    blas_check(cublasLtCreate(&lt), "cublasLtCreate");

    printf("gemm_gpu: %s, %ld tokens, %ld layers, hidden %ld, ffn %ld%s, kv %ld, vocab %ld, %ld runs each\n",
           prop.name, N, L, H, F, swiglu ? " (SwiGLU)" : "", KV, V, iters);
    printf("%-18s %7s %7s %7s %10s %10s %10s %10s %9s %9s\n", "product", "m", "n", "k", "bf16 ms", "fp32 ms",
           "mds16 ms", "fast ms", "bf16 TF/s", "fp32 TF/s");
    double step16 = 0, step32 = 0, stepm = 0, stepf = 0, flop = 0;
    for (int i = 0; i < 15; i++) {
        double f = 2.0 * g[i].m * g[i].n * g[i].k, t16 = time_ms(1, h, htc, lt, &g[i], &b, (int)iters),
               t32 = time_ms(0, h, htc, lt, &g[i], &b, (int)iters), tm = time_ms(2, h, htc, lt, &g[i], &b, (int)iters),
               tf = time_ms(3, h, htc, lt, &g[i], &b, (int)iters), times = i < 12 ? (double)L : 1.0;
        printf("%-18s %7d %7d %7d %10.3f %10.3f %10.3f %10.3f %9.1f %9.1f\n", g[i].what, g[i].m, g[i].n, g[i].k, t16,
               t32, tm, tf, f / t16 / 1e9, f / t32 / 1e9);
        step16 += times * t16;
        step32 += times * t32;
        stepm += times * tm;
        stepf += times * tf;
        flop += times * f;
    }
    printf("per_step bf16_ms %.3f fp32_ms %.3f tflop %.4f mds16_ms %.3f fast16bf_ms %.3f\n", step16, step32,
           flop / 1e12, stepm, stepf);
    cublasLtDestroy(lt);
    cublasDestroy(htc);
    cublasDestroy(h);
    return 0;
}
