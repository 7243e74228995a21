/*
 * matmul.cu - CUDA linear layer (out = inp @ weight^T + bias) and its
 * backward, through cuBLAS.
 *
 * fp32 (the default, and the CPU parity runs): cublasGemmEx with
 * CUBLAS_COMPUTE_32F_PEDANTIC on a handle in CUBLAS_PEDANTIC_MATH, so no
 * TF32 and no reduced-precision reduction; the results sit within fp32
 * rounding of the CPU's (cuBLAS sums in its own order, so not its bits).
 *
 * bf16 / fp16 (the backend's compute dtype, which the model sets to its
 * working dtype): the operands are then values of that dtype already (the
 * model rounds every activation, gradient and weight it keeps), so they are
 * converted to 16-bit copies exactly and multiplied on the tensor cores
 * with fp32 accumulation and an fp32 result, as Megatron's bf16 and fp16
 * GEMMs accumulate: each product of two 16-bit values is exact in fp32,
 * so this is the fp32 computation on the same values up to the order of
 * the sums.  The copies live in the backend's scratch, the weight's once
 * per call and the activations' in chunks of rows of at most 256 MiB (the
 * logits' gradient of a large vocabulary would otherwise double in size);
 * the weight gradient accumulates over the chunks in order (beta = 1).
 *
 * Row-major (M, K) x (N, K)^T is, in cuBLAS's column-major view,
 * C^T (N, M) = W (N, K as op T) x inp^T; dweight accumulates with beta = 1
 * (+=, kernels.h's contract), dinp is written (beta = 0, backend.h), a
 * 16-bit one rounded by the GEMM's epilogue.  The bias is a separate kernel
 * after the product, as the CPU adds it after the sum; dbias is a column
 * sum of dout in double (common.cuh's mds_cu_colsum).  cuBLAS is
 * deterministic run to run on one GPU model and toolkit.  An input stored
 * in 16 bits (backend.h's stored dtypes: the model's norm, GELU/SwiGLU and
 * attention outputs) is multiplied as it is, without a copy, and a 16-bit
 * output with a bias (qkv) comes from cuBLASLt's BIAS epilogue (below), and
 * the MLP's fch with its GELU from the GELU_AUX_BIAS epilogue, its
 * backward from DGELU (matmul_gelu_forward/backward, at the end).
 * The residual stream's gradient, the projections' dout, is 16-bit too
 * where the model stores it so (model.h's rd); where it stays fp32
 * (pipeline stages, sequence parallelism, hidden dropout) its 16-bit copy
 * is made in dbias's column-sum pass, which reads it anyway (dbias_copy).
 * Not yet: 16-bit working weights kept between calls (each call copies its
 * weight to 16 bits).
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "dtype.h"

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

/* C (m, n col-major, ldc, fp32, or cd: dt's 16-bit values, which the
 * GEMM rounds its fp32 sums to) = alpha op(A) op(B) + beta C: fp32
 * operands (dt MDS_F32) pedantic on the pedantic handle, or 16-bit ones
 * (MDS_BF16, MDS_F16) with fp32 accumulation on the tensor cores (the
 * default-math handle).  A failure is noted as a runtime one: the next
 * sync() reports it. */
static cudaDataType cuda_type(int dt) { return dt == MDS_F32 ? CUDA_R_32F : dt == MDS_BF16 ? CUDA_R_16BF : CUDA_R_16F; }

static void gemm(const char *what, int dt, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 const void *A, int lda, const void *Bm, int ldb, float beta, void *Cm, int cd, int ldc)
{
    const float one = 1.0f;
    int f32 = dt == MDS_F32;
    cudaDataType t = cuda_type(dt);
    cublasStatus_t s = cublasGemmEx(f32 ? mds_cuda_cublas() : mds_cuda_cublas_tc(), ta, tb, m, n, k, &one, A, t, lda,
                                    Bm, t, ldb, &beta, Cm, cuda_type(cd), ldc,
                                    f32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        static char msg[96];
        snprintf(msg, sizeof msg, "%s (cublasGemmEx%s%s: %s)", what, f32 ? "" : ", ", f32 ? "" : mds_dtype_name(dt),
                 cublas_name(s));
        mds_cuda_note(cudaErrorUnknown, msg);
    }
}

/*
 * cuBLASLt with the BIAS epilogue: D (m, n col-major, ld m) = A^T B + bias,
 * A (k, m) and B (k, n) with ld k, all 16-bit of one type (dt), the bias m
 * values of dt, one a row of D (a column of the row-major output), added to
 * the fp32 sum before D's one rounding: matmul_forward's 16-bit output
 * with its bias, as the CPU computes it, in the GEMM itself.  A plan
 * depends on the shapes, the dtype and its pointers' alignments (cuBLASLt's
 * heuristic assumes 256 bytes unless told, and reads the bias pointer's),
 * so plans are kept by those (lt_get, the heuristic asked once per kind of
 * call) and run on the call's pointers; matmul_forward finds every chunk's
 * before its first product and falls back to an fp32 chunk and bias_put
 * where cuBLASLt offers no algorithm.
 */
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    void *ws;
    size_t wsb;
} lt_plan;

static void lt_free(lt_plan *p)
{
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

/* The largest power of two up to 256 dividing address p. */
static uint32_t lt_align(uintptr_t p)
{
    uint32_t a = 256;
    while (a > 1 && p % a)
        a /= 2;
    return a;
}

/* The epilogues a plan applies: LT_BIAS (D = A^T B + bias), LT_GELU
 * (cuBLASLt's GELU_AUX_BIAS, or GELU_AUX without a bias: aux = A^T B +
 * bias, D = gelu(aux), both in D's type), LT_DGELU (D = (A B) gelu'(aux),
 * A (m, k) with ld m, aux read in D's type).  aux is m x n with ld m, as
 * D (cuBLASLt wants that ld a multiple of 8). */
enum { LT_BIAS, LT_GELU, LT_DGELU };

static cublasLtEpilogue_t lt_epilogue(int kind, const void *bias)
{
    return kind == LT_BIAS ? CUBLASLT_EPILOGUE_BIAS
         : kind == LT_DGELU ? CUBLASLT_EPILOGUE_DGELU
         : bias             ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                            : CUBLASLT_EPILOGUE_GELU_AUX;
}

/* The call's pointers into plan p's description: the bias's and aux's
 * where the epilogue has them; 0, or -1. */
static int lt_point(lt_plan *p, const void *bias, const void *aux)
{
    if (bias && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) != 0)
        return -1;
    if (aux && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux) != 0)
        return -1;
    return 0;
}

/* 0 with *p ready, or -1 (nothing held) when cuBLASLt has no algorithm;
 * al: the alignments A, B, C and D have (lt_get's). */
static int lt_make(lt_plan *p, int dt, int m, int n, int k, const uint32_t *al, int kind, const void *bias,
                   const void *aux)
{
    memset(p, 0, sizeof *p);
    cublasLtHandle_t lt = mds_cuda_cublaslt();
    if (!lt)
        return -1;
    /* A (k, m) with ld k read transposed; LT_DGELU's A (the weight, m, k)
       with ld m as it is (matmul_backward's dinp product) */
    cublasOperation_t ta = kind == LT_DGELU ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = lt_epilogue(kind, bias);
    int64_t auxld = m;
    cudaDataType t = cuda_type(dt);
    p->ws = mds_cuda_lt_workspace(&p->wsb);
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t r;
    int found = 0, ok = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == 0;
    ok = ok && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == 0;
    ok = ok && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == 0;
    ok = ok && lt_point(p, bias, aux) == 0;
    ok = ok && (!aux || cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxld,
                                                       sizeof auxld) == 0);
    ok = ok && (kind == LT_DGELU ? cublasLtMatrixLayoutCreate(&p->a, t, (uint64_t)m, (uint64_t)k, m)
                                 : cublasLtMatrixLayoutCreate(&p->a, t, (uint64_t)k, (uint64_t)m, k)) == 0;
    ok = ok && cublasLtMatrixLayoutCreate(&p->b, t, (uint64_t)k, (uint64_t)n, k) == 0;
    ok = ok && cublasLtMatrixLayoutCreate(&p->d, t, (uint64_t)m, (uint64_t)n, m) == 0;
    ok = ok && cublasLtMatmulPreferenceCreate(&pref) == 0;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p->wsb,
                                                    sizeof p->wsb) == 0;
    for (int i = 0; ok && i < 4; i++)
        ok = cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)(
                                                            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i),
                                                  &al[i], sizeof al[i]) == 0;
    ok = ok && cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->d, p->d, pref, 1, &r, &found) == 0 && found;
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (!ok) {
        lt_free(p);
        return -1;
    }
    p->algo = r.algo;
    return 0;
}

/* Plans kept between calls (one thread drives the backend), the answer
 * "no algorithm" included: LT_KEPT of them, the oldest replaced first. */
#define LT_KEPT 32
typedef struct {
    int dt, m, n, k, kind, ok;
    uint32_t al[6];   /* A, B, C, D, bias, aux (1 for a null pointer: none) */
    lt_plan p;
} lt_kept;
static lt_kept lt_cache[LT_KEPT];
static int lt_ncache, lt_oldest;

/* The plan for these shapes, this epilogue and these pointers (its bias
 * and aux pointers set to bias and aux), or NULL when cuBLASLt has no
 * algorithm for them. */
static lt_plan *lt_get(int dt, int m, int n, int k, int kind, const void *A, const void *Bm, const void *bias,
                       const void *aux, const void *D)
{
    uint32_t al[6] = {lt_align((uintptr_t)A), lt_align((uintptr_t)Bm), lt_align((uintptr_t)D),
                      lt_align((uintptr_t)D), bias ? lt_align((uintptr_t)bias) : 1u,
                      aux ? lt_align((uintptr_t)aux) : 1u};
    for (int i = 0; i < lt_ncache; i++) {
        lt_kept *e = &lt_cache[i];
        if (e->dt != dt || e->m != m || e->n != n || e->k != k || e->kind != kind ||
            memcmp(e->al, al, sizeof al) != 0)
            continue;
        if (!e->ok)
            return NULL;
        return lt_point(&e->p, bias, aux) == 0 ? &e->p : NULL;
    }
    lt_kept *e = lt_ncache < LT_KEPT ? &lt_cache[lt_ncache++] : &lt_cache[lt_oldest++ % LT_KEPT];
    if (e->ok)
        lt_free(&e->p);
    e->dt = dt, e->m = m, e->n = n, e->k = k, e->kind = kind;
    memcpy(e->al, al, sizeof al);
    e->ok = lt_make(&e->p, dt, m, n, k, al, kind, bias, aux) == 0;
    return e->ok ? &e->p : NULL;
}

/* Kept plan p refused when it was run: that kind of call has no
 * algorithm from now on. */
static void lt_refuse(lt_plan *p)
{
    for (int i = 0; i < lt_ncache; i++)
        if (&lt_cache[i].p == p && lt_cache[i].ok) {
            lt_free(p);
            lt_cache[i].ok = 0;
        }
}

/* Run plan p on A, B and D (the pointers it was made for, with its bias
 * and aux): 0, or 1 when cuBLASLt refused it without running anything (the
 * caller then takes the way without it); other failures are noted (0). */
static int lt_run(const char *what, lt_plan *p, const void *A, const void *Bm, void *D)
{
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasLtMatmul(mds_cuda_cublaslt(), p->op, &one, A, p->a, Bm, p->b, &zero, D, p->d, D, p->d,
                                      &p->algo, p->ws, p->wsb, 0);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE || s == CUBLAS_STATUS_ARCH_MISMATCH)
        return 1;
    if (s != CUBLAS_STATUS_SUCCESS) {
        static char msg[96];
        snprintf(msg, sizeof msg, "%s (cublasLtMatmul: %s)", what, cublas_name(s));
        mds_cuda_note(cudaErrorUnknown, msg);
    }
    return 0;
}

/* Rows per chunk of the 16-bit copies: `per_row` bytes each, 256 MiB at most. */
static long chunk_rows(long rows, size_t per_row)
{
    long r = (long)(((size_t)256 << 20) / (per_row ? per_row : 1));
    return r < 1 ? 1 : r < rows ? r : rows;
}

/* out (rows, OC) += bias along every row, kept as dtype dt (rounds_kept):
 * a thread per column (four columns, as a float4, when OC is a multiple of
 * 4 and out and bias are 16-byte aligned), down the rows from blockIdx.y
 * in steps of gridDim.y; no division per element. */
__device__ static inline float add_v(float a, float b, int dt) { return mds_round_to(dt, a + b); }
__device__ static inline float4 add_v(float4 a, float4 b, int dt)
{
    return make_float4(mds_round_to(dt, a.x + b.x), mds_round_to(dt, a.y + b.y), mds_round_to(dt, a.z + b.z),
                       mds_round_to(dt, a.w + b.w));
}

template <typename V>
__global__ static void add_bias_kernel(V *out, const V *bias, size_t rows, int cols, int dt)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    V b = bias[c];
    for (size_t r = blockIdx.y; r < rows; r += gridDim.y) {
        out[r * cols + c] = add_v(out[r * cols + c], b, dt);
    }
}

/* out (rows, OC, stored as od) = src (rows, OC, fp32; NULL: zeros) +
 * bias, rounded once: a 16-bit output with a bias (one a thread, down
 * the rows) */
__global__ static void bias_put_kernel(void *out, int od, const float *src, const float *bias, size_t rows, int OC,
                                       int dt)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    float b = bias[c];
    for (size_t r = blockIdx.y; r < rows; r += gridDim.y)
        mds_cu_put(out, od, r * OC + c, (src ? src[r * OC + c] : 0.0f) + b, dt);
}

static void bias_put(void *out, int od, const float *src, const float *bias, size_t rows, int OC, int dt)
{
    dim3 grid((unsigned)((OC + 127) / 128), (unsigned)(rows < 2048 ? rows : 2048));
    bias_put_kernel<<<grid, 128>>>(out, od, src, bias, rows, OC, dt);
    MDS_CU_LAUNCHED("matmul_forward (bias)");
}

static void add_bias(float *out, const float *bias, size_t rows, int OC, int dt)
{
    int vec = OC % 4 == 0 && ((uintptr_t)out & 15) == 0 && ((uintptr_t)bias & 15) == 0;
    int cols = vec ? OC / 4 : OC;
    dim3 grid((unsigned)((cols + 127) / 128), (unsigned)(rows < 2048 ? rows : 2048));
    if (vec) {
        auto kernel = add_bias_kernel<float4>;
        kernel<<<grid, 128>>>((float4 *)out, (const float4 *)bias, rows, cols, dt);
    } else {
        auto kernel = add_bias_kernel<float>;
        kernel<<<grid, 128>>>(out, bias, rows, cols, dt);
    }
    MDS_CU_LAUNCHED("matmul_forward (bias)");
}

/* Where chunk r0's input rows (K wide) will be: the 16-bit copy x16 where
 * the input is fp32 (copy), else the stored rows themselves. */
static const void *lt_x(const void *inp, int copy, const void *x16, long r0, int K)
{
    return copy ? x16 : (const void *)((const uint16_t *)inp + (size_t)r0 * K);
}

/* Rows [r0, r0 + n) of a K-wide operand as dt's 16-bit values: in place
 * where it is stored so (sdt), else copied into x16. */
static const uint16_t *rows16(const void *x, int sdt, uint16_t *x16, long r0, long n, int K, int dt, const char *what)
{
    if (sdt == MDS_F32)
        to16_cuda(x16, (const float *)x + (size_t)r0 * K, (size_t)n * K, dt, what);
    return (const uint16_t *)lt_x(x, sdt == MDS_F32, x16, r0, K);
}

void matmul_forward_cuda(void *out, int out_dt, const void *inp, int inp_dt, const float *weight, const float *bias,
                         int B, int T, int C, int OC)
{
    size_t rows = (size_t)B * T;
    if (!rows || !OC) return;
    int mm_dtype = mds_cuda_compute_dtype();
    if (mds_cu_stored_bad(inp_dt, mm_dtype, "matmul_forward", "input") ||
        mds_cu_stored_bad(out_dt, mm_dtype, "matmul_forward", "output"))
        return;
    size_t os = mds_dtype_size(out_dt);
    if (C == 0) {
        mds_cuda_note(cudaMemsetAsync(out, 0, rows * OC * os, 0), "matmul_forward");
    } else if (mm_dtype != MDS_F32) {
        /* the input's 16-bit copy only where it is stored as fp32 (the same
           chunks of rows either way); a 16-bit output straight from the
           GEMM, with a bias in cuBLASLt's epilogue, else (no algorithm for
           it) through an fp32 chunk and bias_put (one rounding either way) */
        int copy = inp_dt == MDS_F32, want = out_dt != MDS_F32 && bias, epi = want, via = 0;
        long R = chunk_rows((long)rows, (size_t)C * 2), nch = ((long)rows + R - 1) / R;
        size_t wb = mds_cu_al256((size_t)OC * C * 2), bb = epi ? mds_cu_al256((size_t)OC * 2) : 0;
        size_t xb = copy ? mds_cu_al256((size_t)R * C * 2) : 0;
        char *sc = (char *)mds_cuda_scratch(wb + bb + xb);
        for (long c = 0; sc && epi && c < nch; c++) {   /* a plan for every chunk, on its pointers */
            long r0 = c * R, n = (long)rows - r0 < R ? (long)rows - r0 : R;
            if (!lt_get(mm_dtype, OC, (int)n, C, LT_BIAS, sc, lt_x(inp, copy, sc + wb + bb, r0, C), sc + wb, NULL,
                        (char *)out + (size_t)r0 * OC * os))
                epi = 0;
        }
        if (sc && want && !epi) {   /* no cuBLASLt: an fp32 chunk (sc holds nothing yet) */
            via = 1, bb = 0;
            R = chunk_rows((long)rows, (size_t)C * 2 + (size_t)OC * 4);
            xb = copy ? mds_cu_al256((size_t)R * C * 2) : 0;
            sc = (char *)mds_cuda_scratch(wb + xb + (size_t)R * OC * 4);
        }
        if (!sc)
            return;
        uint16_t *w16 = (uint16_t *)sc, *b16 = (uint16_t *)(sc + wb), *x16 = (uint16_t *)(sc + wb + bb);
        float *o32 = (float *)(sc + wb + bb + xb);
        to16_cuda(w16, weight, (size_t)OC * C, mm_dtype, "matmul_forward (weight to 16 bits)");
        if (epi)   /* (the working bias is a value of the compute dtype: exact) */
            to16_cuda(b16, bias, (size_t)OC, mm_dtype, "matmul_forward (bias to 16 bits)");
        for (long r0 = 0; r0 < (long)rows; r0 += R) {
            long n = (long)rows - r0 < R ? (long)rows - r0 : R;
            const uint16_t *x = rows16(inp, inp_dt, x16, r0, n, C, mm_dtype, "matmul_forward (input to 16 bits)");
            char *o = (char *)out + (size_t)r0 * OC * os;
            if (epi) {   /* (found above: kept, or made again the same) */
                lt_plan *pl = lt_get(mm_dtype, OC, (int)n, C, LT_BIAS, w16, x, b16, NULL, o);
                if (!pl || lt_run("matmul_forward", pl, w16, x, o) != 0) {
                    /* refused after all: this kind of call goes without
                       cuBLASLt from now on, this one from its start (its
                       first pass now finds no plan) */
                    if (pl)
                        lt_refuse(pl);
                    matmul_forward_cuda(out, out_dt, inp, inp_dt, weight, bias, B, T, C, OC);
                    return;
                }
                continue;
            }
            gemm("matmul_forward", mm_dtype, CUBLAS_OP_T, CUBLAS_OP_N, OC, (int)n, C, w16, C, x, C, 0.0f,
                 via ? (void *)o32 : (void *)o, via ? MDS_F32 : out_dt, OC);
            if (via)
                bias_put(o, out_dt, o32, bias, (size_t)n, OC, mm_dtype);
        }
        if (out_dt != MDS_F32)
            return;   /* rounded by the GEMM, or with its bias */
    } else {
        gemm("matmul_forward", MDS_F32, CUBLAS_OP_T, CUBLAS_OP_N, OC, (int)rows, C, weight, C, inp, C, 0.0f, out,
             MDS_F32, OC);
    }
    if (out_dt != MDS_F32) {   /* C == 0: zeros, plus the bias rounded */
        if (bias)
            bias_put(out, out_dt, NULL, bias, rows, OC, mm_dtype);
        return;
    }
    /* kept as the compute dtype (backend.h, rounds_kept): with the bias
       add, else alone */
    if (bias) {
        add_bias((float *)out, bias, rows, OC, mm_dtype);
    } else if (mm_dtype != MDS_F32) {
        round_to_cuda((float *)out, rows * OC, mm_dtype);
    }
}

/* dbias's term: dout itself (stored as dd) */
struct dbias_term {
    const void *dout;
    int OC, dd;
    __device__ void operator()(long r, int o, double *s) const { s[0] += mds_load(dd, dout, (size_t)r * OC + o); }
    __device__ void row8(long r, int o, double (&s)[8][1]) const
    {
        float d[8];
        mds_cu_load8(d, dd, dout, (size_t)r * OC + o);
        for (int e = 0; e < 8; e++)
            s[e][0] += d[e];
    }
    int vec8(void) const { return mds_cu_al16(dout); }
};

/* dbias's term where dout is fp32 and its 16-bit copy is made in the same
 * pass (dbias_copy): each element read once, summed as dbias_term sums it
 * and stored as kd into d16 as to16_cuda would store it (the value is one
 * of kd already: the same bits either way). */
struct dbias_copy_term {
    const float *dout;
    uint16_t *d16;
    int OC, kd;
    __device__ void operator()(long r, int o, double *s) const
    {
        size_t i = (size_t)r * OC + o;
        float d = dout[i];
        s[0] += d;
        d16[i] = mds_f32_to_16(kd, d);
    }
    __device__ void row8(long r, int o, double (&s)[8][1]) const
    {
        float d[8];
        size_t i = (size_t)r * OC + o;
        mds_cu_load8(d, MDS_F32, dout, i);
        for (int e = 0; e < 8; e++)
            s[e][0] += d[e];
        ((uint4 *)d16)[i / 8] = kd == MDS_BF16 ? mds_cu_pack8<MDS_BF16>(d) : mds_cu_pack8<MDS_F16>(d);
    }
    int vec8(void) const { return mds_cu_al16(dout) && mds_cu_al16(d16); }
};

/* Whether the backward of a 16-bit GEMM makes dout's 16-bit copy in dbias's
 * column-sum pass instead of a pass of its own: dout fp32 (the residual
 * stream's gradient, which the attention and MLP projections' backward
 * read), a bias, and one chunk of rows (the copy is of all of dout).  The
 * to16 pass read the fp32 dout a second time; the same bits. */
#ifndef MDS_CU_DBIAS_COPY   /* 0 at build time: the copy a pass of its own (the device's A/B runs) */
#define MDS_CU_DBIAS_COPY 1
#endif
static int dbias_copy(const float *dbias, int dout_dt, long R, long N)
{
    return MDS_CU_DBIAS_COPY && dbias && dout_dt == MDS_F32 && R >= N;
}

/*
 * The 16-bit backward of a linear (matmul_backward's, and
 * matmul_gelu_backward's with its DGELU epilogue): dbias first (its partial
 * sums and the 16-bit copies share the scratch), by its own pass or, where
 * dbias_copy, with dout's 16-bit copy; the weight's 16-bit copy; then per
 * chunk of R rows the copies of dout and of the input where they are
 * stored as fp32 (bwd16_rows).
 */
/* What its passes are called in errors, for each op (string constants:
 * nothing formatted a call). */
struct bwd16_names {
    const char *dbias, *dbias_copy, *weight, *dout, *input;
};
#define BWD16_NAMES(op) \
    { op " (dbias)", op " (dbias, dout to 16 bits)", op " (weight to 16 bits)", op " (dout to 16 bits)", \
      op " (input to 16 bits)" }
static const bwd16_names bwd16_matmul = BWD16_NAMES("matmul_backward"),
                         bwd16_matmul_gelu = BWD16_NAMES("matmul_gelu_backward");

struct bwd16 {
    uint16_t *w16, *d16, *x16;
    long R;
    int C, OC, kd, fused;
    const bwd16_names *what;
};

/* 0 when ready, 1 when the scratch was refused (noted) */
static int bwd16_begin(bwd16 *b, const bwd16_names *what, float *dbias, const void *dout, int dout_dt, int inp_dt,
                       const float *weight, long N, int C, int OC, int kd)
{
    *b = bwd16{NULL, NULL, NULL, chunk_rows(N, ((size_t)C + (size_t)OC) * 2), C, OC, kd, 0, what};
    b->fused = dbias_copy(dbias, dout_dt, b->R, N);
    if (dbias && !b->fused)
        mds_cu_colsum<1>(dbias, NULL, dbias_term{dout, OC, dout_dt}, N, OC, what->dbias);
    int xcopy = inp_dt == MDS_F32, dcopy = dout_dt == MDS_F32;
    size_t wb = mds_cu_al256((size_t)OC * C * 2), db = dcopy ? mds_cu_al256((size_t)b->R * OC * 2) : 0;
    size_t xb = xcopy ? mds_cu_al256((size_t)b->R * C * 2) : 0, pb = b->fused ? mds_cu_colsum_bytes(1, N, OC) : 0;
    char *sc = (char *)mds_cuda_scratch(wb + db + xb + pb);
    if (!sc) return 1;
    b->w16 = (uint16_t *)sc, b->d16 = (uint16_t *)(sc + wb), b->x16 = (uint16_t *)(sc + wb + db);
    if (b->fused)
        mds_cu_colsum_at<1>((double *)(sc + wb + db + xb), dbias, NULL,
                            dbias_copy_term{(const float *)dout, b->d16, OC, kd}, N, OC, what->dbias_copy);
    to16_cuda(b->w16, weight, (size_t)OC * C, kd, what->weight);
    return 0;
}

/* Rows r0 .. r0 + n - 1 of dout and of the input in 16 bits: in place where
 * they are stored so, else their copies (dout's made whole by bwd16_begin
 * where fused). */
static void bwd16_rows(const bwd16 *b, const void *dout, int dout_dt, const void *inp, int inp_dt, long r0, long n,
                       const uint16_t **d, const uint16_t **x)
{
    *d = b->fused ? b->d16 : rows16(dout, dout_dt, b->d16, r0, n, b->OC, b->kd, b->what->dout);
    *x = rows16(inp, inp_dt, b->x16, r0, n, b->C, b->kd, b->what->input);
}

void matmul_backward_cuda(void *dinp, int dinp_dt, float *dweight, float *dbias, const void *dout, int dout_dt,
                          const void *inp, int inp_dt, const float *weight, int B, int T, int C, int OC)
{
    long N = (long)B * T;
    if (!N || !OC || !C) return;
    int mm_dtype = mds_cuda_compute_dtype();
    if (mds_cu_stored_bad(inp_dt, mm_dtype, "matmul_backward", "input") ||
        mds_cu_stored_bad(dout_dt, mm_dtype, "matmul_backward", "dout") ||
        mds_cu_stored_bad(dinp_dt, mm_dtype, "matmul_backward", "dinp"))
        return;
    if (mm_dtype != MDS_F32) {
        /* dinp written by the GEMM (beta 0: backend.h), a 16-bit one
           rounded in its epilogue */
        bwd16 b;
        if (bwd16_begin(&b, &bwd16_matmul, dbias, dout, dout_dt, inp_dt, weight, N, C, OC, mm_dtype)) return;
        size_t ds = mds_dtype_size(dinp_dt);
        for (long r0 = 0; r0 < N; r0 += b.R) {
            long n = N - r0 < b.R ? N - r0 : b.R;
            const uint16_t *d, *x;
            bwd16_rows(&b, dout, dout_dt, inp, inp_dt, r0, n, &d, &x);
            /* dinp rows (n, C) = dout rows (n, OC) @ weight (OC, C) */
            gemm("matmul_backward (dinp)", mm_dtype, CUBLAS_OP_N, CUBLAS_OP_N, C, (int)n, OC, b.w16, C, d, OC, 0.0f,
                 (char *)dinp + (size_t)r0 * C * ds, dinp_dt, C);
            /* dweight (OC, C) += dout rows^T (OC, n) @ inp rows (n, C) */
            gemm("matmul_backward (dweight)", mm_dtype, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, (int)n, x, C, d, OC, 1.0f,
                 dweight, MDS_F32, C);
        }
        return;
    }
    if (dbias)
        mds_cu_colsum<1>(dbias, NULL, dbias_term{dout, OC, dout_dt}, N, OC, "matmul_backward (dbias)");
    /* dinp (N, C) = dout (N, OC) @ weight (OC, C) */
    gemm("matmul_backward (dinp)", MDS_F32, CUBLAS_OP_N, CUBLAS_OP_N, C, (int)N, OC, weight, C, dout, OC, 0.0f, dinp,
         MDS_F32, C);
    /* dweight (OC, C) += dout^T (OC, N) @ inp (N, C) */
    gemm("matmul_backward (dweight)", MDS_F32, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, (int)N, inp, C, dout, OC, 1.0f,
         dweight, MDS_F32, C);
}

/*
 * The MLP's linear and GELU in one GEMM (backend.h's matmul_gelu_forward
 * and matmul_gelu_backward): cuBLASLt's GELU_AUX_BIAS epilogue writes pre
 * (the biased sum, rounded) and out = gelu of the fp32 sum, and DGELU
 * writes dpre = (dout W) gelu'(pre) from the fp32 product, so the GELU
 * kernels' pass over the BT x 4C activations (and the dmid they go
 * through) is not made.  cuBLASLt's GELU is its tanh form computed its own
 * way: not the CPU's bits, within test_backend_ops's stated tolerance.
 * Taken where every tensor is the 16-bit compute dtype (the aux is stored
 * in D's type) and the widths are multiples of 8 (the aux's ld); else, or
 * where cuBLASLt has no algorithm, the two ops as the CPU runs them.
 */
#ifndef MDS_CU_GELU_EPI   /* 0 at build time: GELU always by its own kernels (the device's A/B runs) */
#define MDS_CU_GELU_EPI 1
#endif

/* 0 when done, 1 when nothing was written (no plan for some chunk) */
static int gelu_epi_forward(void *out, void *pre, int dt, const void *inp, int inp_dt, const float *weight,
                            const float *bias, size_t rows, int C, int OC)
{
    int copy = inp_dt == MDS_F32;
    long R = chunk_rows((long)rows, (size_t)C * 2), nch = ((long)rows + R - 1) / R;
    size_t wb = mds_cu_al256((size_t)OC * C * 2), bb = bias ? mds_cu_al256((size_t)OC * 2) : 0;
    size_t xb = copy ? mds_cu_al256((size_t)R * C * 2) : 0, ob = (size_t)OC * 2;
    char *sc = (char *)mds_cuda_scratch(wb + bb + xb);
    if (!sc)
        return 0;   /* (noted) */
    const void *b16p = bias ? sc + wb : NULL;
    for (long c = 0; c < nch; c++) {   /* a plan for every chunk, on its pointers, before anything is written */
        long r0 = c * R, n = (long)rows - r0 < R ? (long)rows - r0 : R;
        if (!lt_get(dt, OC, (int)n, C, LT_GELU, sc, lt_x(inp, copy, sc + wb + bb, r0, C), b16p,
                    (char *)pre + (size_t)r0 * ob, (char *)out + (size_t)r0 * ob))
            return 1;
    }
    uint16_t *w16 = (uint16_t *)sc, *b16 = (uint16_t *)(sc + wb), *x16 = (uint16_t *)(sc + wb + bb);
    to16_cuda(w16, weight, (size_t)OC * C, dt, "matmul_gelu_forward (weight to 16 bits)");
    if (bias)
        to16_cuda(b16, bias, (size_t)OC, dt, "matmul_gelu_forward (bias to 16 bits)");
    for (long r0 = 0; r0 < (long)rows; r0 += R) {
        long n = (long)rows - r0 < R ? (long)rows - r0 : R;
        const uint16_t *x = rows16(inp, inp_dt, x16, r0, n, C, dt, "matmul_gelu_forward (input to 16 bits)");
        char *a = (char *)pre + (size_t)r0 * ob, *o = (char *)out + (size_t)r0 * ob;
        lt_plan *pl = lt_get(dt, OC, (int)n, C, LT_GELU, w16, x, bias ? b16 : NULL, a, o);
        if (!pl || lt_run("matmul_gelu_forward", pl, w16, x, o) != 0) {
            /* refused after all: this chunk and the rest as two ops (and
               this kind of call without the epilogue from now on) */
            if (pl)
                lt_refuse(pl);
            size_t left = rows - (size_t)r0;
            matmul_forward_cuda(a, dt, (const char *)inp + (size_t)r0 * C * mds_dtype_size(inp_dt), inp_dt, weight,
                                bias, 1, (int)left, C, OC);
            gelu_forward_cuda(o, dt, a, dt, left * OC);
            return 0;
        }
    }
    return 0;
}

void matmul_gelu_forward_cuda(void *out, int out_dt, void *pre, int pre_dt, const void *inp, int inp_dt,
                              const float *weight, const float *bias, int B, int T, int C, int OC)
{
    size_t rows = (size_t)B * T;
    int dt = mds_cuda_compute_dtype();
    if (MDS_CU_GELU_EPI && dt != MDS_F32 && out_dt == dt && pre_dt == dt && rows && C && OC % 8 == 0 &&
        rows <= 0x7fffffff && (inp_dt == MDS_F32 || inp_dt == dt) &&
        gelu_epi_forward(out, pre, dt, inp, inp_dt, weight, bias, rows, C, OC) == 0)
        return;
    matmul_forward_cuda(pre, pre_dt, inp, inp_dt, weight, bias, B, T, C, OC);
    gelu_forward_cuda(out, out_dt, pre, pre_dt, rows * OC);
}

void matmul_gelu_backward_cuda(void *dpre, void *dmid, int dt, float *dweight, float *dbias, const void *dout,
                               int dout_dt, const void *inp, int inp_dt, const float *weight, const void *pre,
                               int pre_dt, int B, int T, int C, int OC)
{
    long N = (long)B * T;
    int kd = mds_cuda_compute_dtype();
    if (!MDS_CU_GELU_EPI || kd == MDS_F32 || dt != kd || pre_dt != kd || C % 8 || !N || !OC || !C ||
        (inp_dt != MDS_F32 && inp_dt != kd) || (dout_dt != MDS_F32 && dout_dt != kd)) {
        matmul_backward_cuda(dmid, dt, dweight, dbias, dout, dout_dt, inp, inp_dt, weight, B, T, C, OC);
        gelu_backward_cuda(dpre, pre, pre_dt, dmid, dt, (size_t)N * C);
        return;
    }
    /* matmul_backward_cuda's 16-bit way, its dinp product with the DGELU
       epilogue: a chunk without a plan (or refused) goes through dmid and
       the GELU kernel instead, so nothing is done twice */
    bwd16 b;
    if (bwd16_begin(&b, &bwd16_matmul_gelu, dbias, dout, dout_dt, inp_dt, weight, N, C, OC, kd)) return;
    uint16_t *w16 = b.w16;
    size_t rb = (size_t)C * 2;
    for (long r0 = 0; r0 < N; r0 += b.R) {
        long n = N - r0 < b.R ? N - r0 : b.R;
        const uint16_t *d, *x;
        bwd16_rows(&b, dout, dout_dt, inp, inp_dt, r0, n, &d, &x);
        char *dp = (char *)dpre + (size_t)r0 * rb, *dm = (char *)dmid + (size_t)r0 * rb;
        const char *a = (const char *)pre + (size_t)r0 * rb;
        /* dpre rows (n, C) = (dout rows (n, OC) @ weight (OC, C)) gelu'(pre rows) */
        lt_plan *pl = lt_get(kd, C, (int)n, OC, LT_DGELU, w16, d, NULL, a, dp);
        if (!pl || lt_run("matmul_gelu_backward", pl, w16, d, dp) != 0) {
            if (pl)
                lt_refuse(pl);
            gemm("matmul_gelu_backward (dinp)", kd, CUBLAS_OP_N, CUBLAS_OP_N, C, (int)n, OC, w16, C, d, OC, 0.0f, dm,
                 dt, C);
            gelu_backward_cuda(dp, a, pre_dt, dm, dt, (size_t)n * C);
        }
        /* dweight (OC, C) += dout rows^T (OC, n) @ inp rows (n, C) */
        gemm("matmul_gelu_backward (dweight)", kd, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, (int)n, x, C, d, OC, 1.0f,
             dweight, MDS_F32, C);
    }
}
