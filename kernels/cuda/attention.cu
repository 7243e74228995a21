/*
 * attention.cu - CUDA causal self-attention core with grouped-query heads
 * (NH query heads, NKV key/value heads), forward (out and the row lse) and
 * backward (dq, dk, dv into the fused dqkv), with attention dropout drawn
 * from kernels/dropout.h's counter-based masks (the CPU's masks), tiled in
 * the manner of flash attention 2.
 *
 * Two sets of kernels.  fp32 on CUDA cores, head sizes up to 256 (the
 * fp32 runs, and attention dropout at any dtype):
 *  - forward: a block per tile of queries (64; 32 for heads over 128) of
 *    one head and row, the last tiles first; Q stays in shared memory, K
 *    and V tiles stream through it up to the diagonal (tiles above it are
 *    skipped), and each row keeps a running max m and sum l (online
 *    softmax): per tile S = Q K^T scaled and masked, m' = max(m, rowmax S),
 *    p = exp(S - m'), l = l e^(m - m') + rowsum p, O = O e^(m - m') +
 *    (p dropped) V; at the end out = O / l and lse = m + log l.  Not the
 *    CPU's bits: the rescaling and the order of the sum differ.
 *  - backward: D = rowsum(dO * O) first (a thread per row, the rows
 *    staged in shared memory; the CPU's bits), then two kernels
 *    recomputing p = exp(s scale - lse) and ds =
 *    p (dP - D) scale from tiles in shared memory: dq per query tile over
 *    the key tiles up to the diagonal; dk and dv per key tile over the
 *    group's heads in order and the query tiles from the diagonal on.  No
 *    atomics; every sum runs in the CPU's order from the value already in
 *    dqkv, and masked or padded pairs add exact zeros, so the backward
 *    gives the CPU's bits.
 *  - heads are padded to 64, 128 or 256 in shared memory (dot products
 *    stop at hs); nothing is O(T), so T is bounded only by int positions.
 *
 * And on the tensor cores (the "am_" kernels below, taken when the
 * backend's compute dtype is bf16 or fp16, there is no attention dropout
 * and heads are at most 128 wide): the same tiling with mma.sync on
 * 16-bit tiles, P and dS rounded to the 16-bit type; their own comment
 * says what differs.  First run on an H200 on 2026-11-27 (docs/benchmarks.md).
 */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.cuh"
#include "dtype.h"

/* 0 for a shape the kernels take, else -1 (with the error noted past the
 * kernels' limits: the grid's y and z, head sizes over 256). */
static int att_check(int B, int T, int C, int NH, int NKV, const char *what)
{
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || C % NH || NH % NKV)
        return -1;
    if (B > 65535 || NH > 65535 || C / NH > 256) {
        static char msg[128];
        snprintf(msg, sizeof msg, "%s: B %d, NH %d or head size %d beyond this kernel's limits", what, B, NH, C / NH);
        mds_cuda_note(cudaErrorInvalidValue, msg);
        return -1;
    }
    return 0;
}

/*
 * 128 threads per block as a 16 x 8 grid (ty = threadIdx.x / 8, tx = % 8).
 * A tile of R rows and N columns is owned thread by thread as rows ty + 16 m
 * and columns tx + 8 n: interleaved, so that a warp (4 ty, 8 tx) reads 4
 * distinct rows (a broadcast) and 8 consecutive columns of shared memory.
 * Shared tiles have a row stride of their width + 1: the rows a warp reads
 * at one column fall in distinct banks.
 */
#define FA_THREADS 128
#define FA_TY 16
#define FA_TX 8

/* Tile sizes per padded head width D (64, 128, 256): queries and keys of
 * the forward, of the dq kernel, and keys and queries of the dk/dv kernel.
 * Each keeps a thread's accumulators at 32-64 floats and a block's shared
 * memory at 70-116 KiB (one or two blocks an SM on an H100). */
template <int D> struct fa_cfg;
template <> struct fa_cfg<64> { static constexpr int fq = 64, fk = 64, qq = 64, qk = 64, kk = 64, kq = 64; };
template <> struct fa_cfg<128> { static constexpr int fq = 64, fk = 32, qq = 64, qk = 32, kk = 32, kq = 64; };
template <> struct fa_cfg<256> { static constexpr int fq = 32, fk = 32, qq = 32, qk = 16, kk = 16, kq = 32; };

__device__ static inline int fa_min(int a, int b) { return a < b ? a : b; }

/* Rows [0, rows) of a shared tile (row stride D + 1) from rows of x (row r
 * at x + r * stride, hs floats): zeros past the n valid rows and past hs. */
template <int D>
__device__ static void fa_load(float *dst, const float *x, size_t stride, int rows, int n, int hs)
{
    for (int e = threadIdx.x; e < rows * D; e += FA_THREADS) {
        int r = e / D, c = e % D;
        dst[r * (D + 1) + c] = r < n && c < hs ? x[(size_t)r * stride + c] : 0.0f;
    }
}

/*
 * a[m][n] = A_r . B_j (r = ty + 16 m, j = tx + 8 n), summed over the head
 * dimension in order from 0: the CPU's order for a score or a dO . v, so
 * these products are the CPU's bits.  One of the two tile products of the
 * kernels (the other is fa_axpy); the am_ kernels below do both with mma.
 */
template <int D, int RM, int SN>
__device__ static void fa_dots(float (&a)[RM][SN], const float *A, const float *B, int hs)
{
    int ty = threadIdx.x / FA_TX, tx = threadIdx.x % FA_TX;
MDS_CU_UNROLL
    for (int m = 0; m < RM; m++)
MDS_CU_UNROLL
        for (int n = 0; n < SN; n++)
            a[m][n] = 0.0f;
    for (int i = 0; i < hs; i++) {
        float x[RM], y[SN];
MDS_CU_UNROLL
        for (int m = 0; m < RM; m++)
            x[m] = A[(ty + FA_TY * m) * (D + 1) + i];
MDS_CU_UNROLL
        for (int n = 0; n < SN; n++)
            y[n] = B[(tx + FA_TX * n) * (D + 1) + i];
MDS_CU_UNROLL
        for (int m = 0; m < RM; m++)
MDS_CU_UNROLL
            for (int n = 0; n < SN; n++)
                a[m][n] = a[m][n] + x[m] * y[n];
    }
}

/*
 * a[m][k] += sum_j W[r][j] X[j][c] (r = ty + 16 m, c = tx + 8 k), j = 0..NJ-1
 * in order; W has row stride NJ + 1, X is a (NJ, D) tile.  A zero weight
 * (a masked or padded pair) adds an exact zero, so over tiles in order this
 * is the CPU's sequence of rank-1 updates.
 */
template <int D, int RM, int NJ>
__device__ static void fa_axpy(float (&a)[RM][D / FA_TX], const float *W, const float *X)
{
    int ty = threadIdx.x / FA_TX, tx = threadIdx.x % FA_TX;
    for (int j = 0; j < NJ; j++) {
        float w[RM], x[D / FA_TX];
MDS_CU_UNROLL
        for (int m = 0; m < RM; m++)
            w[m] = W[(ty + FA_TY * m) * (NJ + 1) + j];
MDS_CU_UNROLL
        for (int k = 0; k < D / FA_TX; k++)
            x[k] = X[j * (D + 1) + tx + FA_TX * k];
MDS_CU_UNROLL
        for (int m = 0; m < RM; m++)
MDS_CU_UNROLL
            for (int k = 0; k < D / FA_TX; k++)
                a[m][k] = a[m][k] + w[m] * x[k];
    }
}

/* A thread's accumulators from (LOAD; zeros elsewhere) or to rows of x
 * (row stride `stride`): the n valid rows and hs valid columns only. */
template <bool LOAD, int RM, int CN>
__device__ static void fa_move(float (&a)[RM][CN], float *x, size_t stride, int n, int hs)
{
    int ty = threadIdx.x / FA_TX, tx = threadIdx.x % FA_TX;
MDS_CU_UNROLL
    for (int m = 0; m < RM; m++)
MDS_CU_UNROLL
        for (int k = 0; k < CN; k++) {
            int r = ty + FA_TY * m, c = tx + FA_TX * k;
            int in = r < n && c < hs;
            if (LOAD)
                a[m][k] = in ? x[(size_t)r * stride + c] : 0.0f;
            else if (in)
                x[(size_t)r * stride + c] = a[m][k];
        }
}

/* 16-bit heads as the tensor-core kernels read them (am_at): packed
 * copies (B, heads, Tp, D), or qkv's or dout's own rows in place
 * (am_source); bs, hs, ts: the elements between batch rows, heads and
 * positions. */
struct am_src {
    const uint16_t *p;
    size_t bs, hs, ts;
};

/* What every kernel of this file is given (pointers device memory),
 * made once per op by fa_args_of. */
struct fa_args {
    const void *qsrc;     /* (B, T, row) stored as qd: per token [q (NH hs) | k (NKV hs) | v (NKV hs)] */
    int qd;
    const float *qkv;     /* the same as floats (the fp32 kernels: qsrc itself, or a widened copy) */
    void *out;            /* (B, T, C) stored as od (backend.h): written forward, read backward */
    float *lse;           /* (B, NH, T) */
    float *dqkv;          /* (B, T, row) floats the fp32 kernels add into (backward: zeroed first) */
    void *dqs;            /* (B, T, row) stored as gd, written by the tensor-core kernels */
    int gd;
    const void *dout;     /* (B, T, C) stored as dd (backward; the fp32 kernels: MDS_F32 only) */
    float *Dg;            /* (B, NH, T): D = rowsum(dO * O), the backward's scratch */
    int T, C, NH, NKV, hs;
    size_t row;           /* C + 2 NKV hs */
    float scale, dscale;  /* 1 / sqrt(hs); 1 / (1 - p) */
    uint32_t thr;         /* the dropout threshold of p */
    mds_dropout drop;
    int vec;              /* hs, row, C and the tensors' addresses all multiples of 4 floats (am_heads) */
    am_src p16;           /* the tensor-core kernels' 16-bit q, k, v: heads NH + 2 NKV */
    am_src d16;           /* and dO: heads NH (backward) */
    int Tp;               /* T rounded up to 64 (AM_ROWS) */
    int kd;               /* the dtype out and dqkv are kept as (rounds_kept: the compute dtype) */
    int od;               /* out's stored dtype (the fp32 kernels: MDS_F32 only) */
    int dd;               /* dout's */
};

/* The dropout factor of pair (query t, key j) of head h: 1 without
 * dropout, else dscale kept and 0 dropped (the CPU's p * dscale or 0). */
__device__ static inline float fa_keep(const fa_args &a, uint64_t rk, int h, int t, int j)
{
    if (!(a.drop.p > 0.0f))
        return 1.0f;
    uint64_t T = (uint64_t)a.T, idx = ((uint64_t)(a.drop.head0 + h) * T + (uint64_t)t) * T + (uint64_t)j;
    return mds_dropout_keep(rk, a.drop.site, idx, a.thr) ? a.dscale : 0.0f;
}

/*
 * Forward of a tile of fq queries of head h, row b (the last query tile
 * first: it has the most key tiles).  Per key tile up to the diagonal: S =
 * Q K^T (scaled, causal mask as -inf), the row max over the tile (8 partial
 * maxima in shared memory, exact), the running max m' = max(m, max), p =
 * exp(s - m'), the running sum l = l exp(m - m') + sum p (8 partial sums
 * combined in order: every thread of a row gets the same bits), O =
 * O exp(m - m') + (p dropped) V.  Then out = O / l and lse = m + log l.
 */
template <int D>
__global__ __launch_bounds__(FA_THREADS) static void fa_forward_kernel(fa_args a)
{
    constexpr int BQ = fa_cfg<D>::fq, BK = fa_cfg<D>::fk;
    constexpr int RM = BQ / FA_TY, SN = BK / FA_TX, CN = D / FA_TX, LD = D + 1;
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + BQ * LD, *Vs = Ks + BK * LD, *Ps = Vs + BK * LD;
    float *rmax = Ps + BQ * (BK + 1), *rsum = rmax + BQ * FA_TX;
    int h = blockIdx.y, b = blockIdx.z, q0 = (int)(gridDim.x - 1 - blockIdx.x) * BQ;
    int T = a.T, hs = a.hs, g = h / (a.NH / a.NKV), nq = fa_min(BQ, T - q0);
    int ty = threadIdx.x / FA_TX, tx = threadIdx.x % FA_TX;
    size_t row = a.row;
    const float *base = a.qkv + (size_t)b * T * row;
    uint64_t rk = a.drop.p > 0.0f ? a.drop.row_keys[b] : 0;
    fa_load<D>(Qs, base + (size_t)q0 * row + (size_t)h * hs, row, BQ, nq, hs);
    float o[RM][CN], mrow[RM], lrow[RM];
MDS_CU_UNROLL
    for (int m = 0; m < RM; m++) {
        mrow[m] = -INFINITY;
        lrow[m] = 0.0f;
MDS_CU_UNROLL
        for (int k = 0; k < CN; k++)
            o[m][k] = 0.0f;
    }
    for (int k0 = 0; k0 < q0 + nq; k0 += BK) {
        int nk = fa_min(BK, T - k0);
        __syncthreads();   /* the previous tile's K, V and P are no longer read */
        fa_load<D>(Ks, base + (size_t)k0 * row + a.C + (size_t)g * hs, row, BK, nk, hs);
        fa_load<D>(Vs, base + (size_t)k0 * row + a.C + ((size_t)a.NKV + g) * hs, row, BK, nk, hs);
        __syncthreads();
        float s[RM][SN];
        fa_dots<D, RM, SN>(s, Qs, Ks, hs);
MDS_CU_UNROLL
        for (int m = 0; m < RM; m++) {
            int t = q0 + ty + FA_TY * m;
            float mx = -INFINITY;
MDS_CU_UNROLL
            for (int n = 0; n < SN; n++) {
                int j = k0 + tx + FA_TX * n;
                s[m][n] = j <= t && j < T ? s[m][n] * a.scale : -INFINITY;
                mx = s[m][n] > mx ? s[m][n] : mx;
            }
            rmax[(ty + FA_TY * m) * FA_TX + tx] = mx;
        }
        __syncthreads();
        float mnew[RM];
MDS_CU_UNROLL
        for (int m = 0; m < RM; m++) {
            int r = ty + FA_TY * m, t = q0 + r;
            float mx = mrow[m], sum = 0.0f;
            for (int u = 0; u < FA_TX; u++)
                mx = rmax[r * FA_TX + u] > mx ? rmax[r * FA_TX + u] : mx;
            mnew[m] = mx;   /* finite: key 0 is in every row's first tile */
MDS_CU_UNROLL
            for (int n = 0; n < SN; n++) {
                int j = k0 + tx + FA_TX * n;
                float p = s[m][n] == -INFINITY ? 0.0f : mds_expf(s[m][n] - mx);
                sum = sum + p;
                Ps[r * (BK + 1) + tx + FA_TX * n] = p == 0.0f ? 0.0f : p * fa_keep(a, rk, h, t, j);
            }
            rsum[r * FA_TX + tx] = sum;
        }
        __syncthreads();
MDS_CU_UNROLL
        for (int m = 0; m < RM; m++) {
            int r = ty + FA_TY * m;
            float sum = 0.0f;
            for (int u = 0; u < FA_TX; u++)
                sum = sum + rsum[r * FA_TX + u];
            float alpha = mrow[m] == -INFINITY ? 0.0f : mds_expf(mrow[m] - mnew[m]);
            lrow[m] = lrow[m] * alpha + sum;
            mrow[m] = mnew[m];
MDS_CU_UNROLL
            for (int k = 0; k < CN; k++)
                o[m][k] = o[m][k] * alpha;
        }
        fa_axpy<D, RM, BK>(o, Ps, Vs);
    }
MDS_CU_UNROLL
    for (int m = 0; m < RM; m++) {
        float inv = 1.0f / lrow[m];
MDS_CU_UNROLL
        for (int k = 0; k < CN; k++)
            o[m][k] = o[m][k] * inv;
        int r = ty + FA_TY * m;
        if (tx == 0 && r < nq)
            a.lse[((size_t)b * a.NH + h) * T + q0 + r] = mrow[m] + (float)log((double)lrow[m]);
    }
    fa_move<false, RM, CN>(o, (float *)a.out + ((size_t)b * T + q0) * a.C + (size_t)h * hs, a.C, nq, hs);
}

/* D_t = dO_t . O_t of every (b, h, t), into Dg in (b, h, t) order, summed
 * over the head dimension in order (the CPU's bits): a block per FA_RD
 * positions of one head and row, whose dO and O rows are first copied to
 * shared memory together (row stride hs + 1), then a thread per position
 * sums its row. */
#define FA_RD 16
__global__ static void fa_rowdot_kernel(fa_args a)
{
    extern __shared__ float fa_rd[];
    int hs = a.hs, ld = hs + 1, t0 = blockIdx.x * FA_RD, h = blockIdx.y, b = blockIdx.z, n = fa_min(FA_RD, a.T - t0);
    float *dOs = fa_rd, *Os = fa_rd + FA_RD * ld;
    size_t base = ((size_t)b * a.T + t0) * a.C + (size_t)h * hs;
    for (int e = threadIdx.x; e < n * hs; e += blockDim.x) {
        int r = e / hs, c = e % hs;
        dOs[r * ld + c] = mds_load(a.dd, a.dout, base + (size_t)r * a.C + c);
        Os[r * ld + c] = mds_load(a.od, a.out, base + (size_t)r * a.C + c);
    }
    __syncthreads();
    if ((int)threadIdx.x < n) {
        const float *dO = dOs + threadIdx.x * ld, *O = Os + threadIdx.x * ld;
        float D = 0.0f;
        for (int c = 0; c < hs; c++)
            D = D + dO[c] * O[c];
        a.Dg[((size_t)b * a.NH + h) * a.T + t0 + threadIdx.x] = D;
    }
}

/* The same D with dO and O both stored as DT, hs and C multiples of 8 and
 * both 16-byte aligned: a thread per position reads its two rows straight
 * from memory, 8 elements a uint4, and sums them in the same order (the
 * same bits), where the kernel above spent most of its time copying rows
 * 2 bytes a load. */
template <int DT>
__global__ static void fa_rowdot8_kernel(fa_args a, size_t n)
{
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x, T = (size_t)a.T, bh = id / T;
    if (id >= n)   /* (n: B NH T) */
        return;
    size_t t = id % T, b = bh / a.NH, h = bh % a.NH, at = (b * T + t) * a.C + h * a.hs;
    const uint4 *dO = (const uint4 *)((const uint16_t *)a.dout + at), *O = (const uint4 *)((const uint16_t *)a.out + at);
    float D = 0.0f;
    for (int c = 0; c < a.hs / 8; c++) {
        float x[8], y[8];
        mds_cu_unpack8<DT>(x, dO[c]);
        mds_cu_unpack8<DT>(y, O[c]);
        for (int e = 0; e < 8; e++)
            D = D + x[e] * y[e];
    }
    a.Dg[id] = D;   /* ((b NH + h) T + t) */
}

static void fa_rowdot(const fa_args &a, int B)
{
    if (a.dd != MDS_F32 && a.od == a.dd && a.hs % 8 == 0 && a.C % 8 == 0 && mds_cu_al16(a.dout) &&
        mds_cu_al16(a.out)) {
        size_t n = (size_t)B * a.NH * a.T;
        auto kernel = a.dd == MDS_BF16 ? fa_rowdot8_kernel<MDS_BF16> : fa_rowdot8_kernel<MDS_F16>;
        kernel<<<mds_cu_blocks(n, 256), 256>>>(a, n);
        MDS_CU_LAUNCHED("attention_backward (D)");
        return;
    }
    size_t smem = 2 * (size_t)FA_RD * (a.hs + 1) * sizeof(float);   /* 32.9 KiB at most (hs 256) */
    fa_rowdot_kernel<<<dim3((a.T + FA_RD - 1) / FA_RD, a.NH, B), FA_THREADS, smem>>>(a);
    MDS_CU_LAUNCHED("attention_backward (D)");
}

/* The backward's tile of queries [q0, q0 + rows) of head h, row b, into
 * shared memory: q and dO (zeros past the n valid rows, padded as
 * fa_load), lse and D. */
template <int D>
__device__ static void fa_load_queries(float *Qs, float *dOs, float *Ls, float *Ds, const fa_args &a, int b, int h,
                                       int q0, int rows, int n)
{
    size_t at = ((size_t)b * a.NH + h) * a.T + q0;
    fa_load<D>(Qs, a.qkv + ((size_t)b * a.T + q0) * a.row + (size_t)h * a.hs, a.row, rows, n, a.hs);
    fa_load<D>(dOs, (const float *)a.dout + ((size_t)b * a.T + q0) * a.C + (size_t)h * a.hs, a.C, rows, n, a.hs);
    for (int r = threadIdx.x; r < rows; r += FA_THREADS) {
        Ls[r] = r < n ? a.lse[at + r] : 0.0f;
        Ds[r] = r < n ? a.Dg[at + r] : 0.0f;
    }
}

/*
 * The backward's pairs of one tile, into shared memory (row stride N + 1,
 * N = 8 SN): S = X1 Y1^T and dP = X2 Y2^T, then p = exp(s scale - lse)
 * and ds = p (mk dP - D) scale (the CPU backward's formulas, mk the
 * dropout factor: 1 without, an exact 1 * dP), into dS and (times mk)
 * into P when P is not NULL.  Rows are queries q0 + r and columns keys
 * k0 + c (QROWS: the dq kernel's S), or the transpose (the dk/dv kernel's
 * S^T); masked pairs and queries past T are zeros.  Ls and Ds hold the
 * tile's queries' lse and D.
 */
template <int D, int RM, int SN, bool QROWS>
__device__ static void fa_pairs(float *P, float *dS, const fa_args &a, int h, uint64_t rk, int r0, int c0,
                                const float *X1, const float *Y1, const float *X2, const float *Y2, const float *Ls,
                                const float *Ds)
{
    constexpr int N = SN * FA_TX;
    int ty = threadIdx.x / FA_TX, tx = threadIdx.x % FA_TX;
    float s[RM][SN], dp[RM][SN];
    fa_dots<D, RM, SN>(s, X1, Y1, a.hs);
    fa_dots<D, RM, SN>(dp, X2, Y2, a.hs);
MDS_CU_UNROLL
    for (int m = 0; m < RM; m++)
MDS_CU_UNROLL
        for (int n = 0; n < SN; n++) {
            int r = ty + FA_TY * m, c = tx + FA_TX * n, i = QROWS ? r : c;
            int t = QROWS ? r0 + r : c0 + c, j = QROWS ? c0 + c : r0 + r;
            float pk = 0.0f, ds = 0.0f;
            if (j <= t && t < a.T) {
                float mk = fa_keep(a, rk, h, t, j), p = mds_expf(s[m][n] * a.scale - Ls[i]);
                ds = p * (mk * dp[m][n] - Ds[i]) * a.scale;
                pk = p * mk;
            }
            if (P)
                P[r * (N + 1) + c] = pk;
            dS[r * (N + 1) + c] = ds;
        }
}

/*
 * dq of a tile of qq queries of head h, row b: per key tile up to the
 * diagonal, S = Q K^T and dP = dO V^T, then dS, then dq += dS K.  The
 * accumulators start from dq's values and take the keys in order, the
 * CPU's sequence: these are the CPU's bits.
 */
template <int D>
__global__ __launch_bounds__(FA_THREADS) static void fa_dq_kernel(fa_args a)
{
    constexpr int BQ = fa_cfg<D>::qq, BK = fa_cfg<D>::qk;
    constexpr int RM = BQ / FA_TY, SN = BK / FA_TX, CN = D / FA_TX, LD = D + 1;
    extern __shared__ float sm[];
    float *Qs = sm, *dOs = Qs + BQ * LD, *Ks = dOs + BQ * LD, *Vs = Ks + BK * LD, *dSs = Vs + BK * LD;
    float *Ls = dSs + BQ * (BK + 1), *Ds = Ls + BQ;
    int h = blockIdx.y, b = blockIdx.z, q0 = (int)(gridDim.x - 1 - blockIdx.x) * BQ;
    int T = a.T, hs = a.hs, g = h / (a.NH / a.NKV), nq = fa_min(BQ, T - q0);
    size_t row = a.row;
    const float *base = a.qkv + (size_t)b * T * row;
    float *dq = a.dqkv + ((size_t)b * T + q0) * row + (size_t)h * hs;
    uint64_t rk = a.drop.p > 0.0f ? a.drop.row_keys[b] : 0;
    fa_load_queries<D>(Qs, dOs, Ls, Ds, a, b, h, q0, BQ, nq);
    float acc[RM][CN];
    fa_move<true, RM, CN>(acc, dq, row, nq, hs);
    for (int k0 = 0; k0 < q0 + nq; k0 += BK) {
        int nk = fa_min(BK, T - k0);
        __syncthreads();
        fa_load<D>(Ks, base + (size_t)k0 * row + a.C + (size_t)g * hs, row, BK, nk, hs);
        fa_load<D>(Vs, base + (size_t)k0 * row + a.C + ((size_t)a.NKV + g) * hs, row, BK, nk, hs);
        __syncthreads();
        fa_pairs<D, RM, SN, true>(NULL, dSs, a, h, rk, q0, k0, Qs, Ks, dOs, Vs, Ls, Ds);
        __syncthreads();
        fa_axpy<D, RM, BK>(acc, dSs, Ks);
    }
    fa_move<false, RM, CN>(acc, dq, row, nq, hs);
}

/*
 * dk and dv of a tile of kk keys of group g, row b: for the group's heads
 * in order, for the query tiles from the diagonal on, S^T = K Q^T and
 * dP^T = V dO^T, then P (dropped) and dS, then dv += P^T dO and dk += dS^T
 * Q.  Accumulators start from dk's and dv's values and take heads, then
 * queries, in order (the CPU's order): no atomics, the CPU's bits.
 */
template <int D>
__global__ __launch_bounds__(FA_THREADS) static void fa_dkv_kernel(fa_args a)
{
    constexpr int BK = fa_cfg<D>::kk, BQ = fa_cfg<D>::kq;
    int k0 = blockIdx.x * BK, g = blockIdx.y, b = blockIdx.z;
    constexpr int RM = BK / FA_TY, SN = BQ / FA_TX, CN = D / FA_TX, LD = D + 1;
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + BK * LD, *Qs = Vs + BK * LD, *dOs = Qs + BQ * LD, *Pt = dOs + BQ * LD;
    float *dSt = Pt + BK * (BQ + 1), *Ls = dSt + BK * (BQ + 1), *Ds = Ls + BQ;
    int T = a.T, hs = a.hs, R = a.NH / a.NKV, nk = fa_min(BK, T - k0);
    size_t row = a.row, koff = (size_t)a.C + (size_t)g * hs, voff = (size_t)a.C + ((size_t)a.NKV + g) * hs;
    const float *base = a.qkv + (size_t)b * T * row;
    float *dk = a.dqkv + ((size_t)b * T + k0) * row + koff, *dv = a.dqkv + ((size_t)b * T + k0) * row + voff;
    uint64_t rk = a.drop.p > 0.0f ? a.drop.row_keys[b] : 0;
    fa_load<D>(Ks, base + (size_t)k0 * row + koff, row, BK, nk, hs);
    fa_load<D>(Vs, base + (size_t)k0 * row + voff, row, BK, nk, hs);
    float ak[RM][CN], av[RM][CN];
    fa_move<true, RM, CN>(ak, dk, row, nk, hs);
    fa_move<true, RM, CN>(av, dv, row, nk, hs);
    for (int h = g * R; h < (g + 1) * R; h++)
        for (int q0 = k0 / BQ * BQ; q0 < T; q0 += BQ) {
            int nq = fa_min(BQ, T - q0);
            __syncthreads();
            fa_load_queries<D>(Qs, dOs, Ls, Ds, a, b, h, q0, BQ, nq);
            __syncthreads();
            fa_pairs<D, RM, SN, false>(Pt, dSt, a, h, rk, k0, q0, Ks, Qs, Vs, dOs, Ls, Ds);
            __syncthreads();
            fa_axpy<D, RM, BQ>(av, Pt, dOs);
            fa_axpy<D, RM, BQ>(ak, dSt, Qs);
        }
    fa_move<false, RM, CN>(ak, dk, row, nk, hs);
    fa_move<false, RM, CN>(av, dv, row, nk, hs);
}

/* ======================================================================
 * The tensor-core kernels (16-bit compute dtype, no attention dropout,
 * head sizes up to 128): the same tiling and order of work as the fp32
 * kernels above (forward per query tile with online softmax; dq per query
 * tile; dk, dv per key tile over the group's heads), with every tile
 * product a warp-level mma.sync.m16n8k16 on bf16 or fp16 operands with
 * fp32 accumulators.  A block is 4 warps; each warp owns 16 rows of the
 * block's 64 (queries, or keys in the dk/dv kernel), tiles are 64 rows of
 * the head width D (64 or 128, zero-padded past hs) in shared memory,
 * row-major with a row stride of D + 8 halves (the eight rows an ldmatrix
 * phase reads fall in distinct banks).
 *
 * The operands are first packed as 16-bit heads (am_heads: rounded once,
 * zero-padded to 64-row tiles and D columns), unless they are 16-bit
 * already, T is a multiple of 64 and hs is D: then the kernels read qkv's
 * (and dout's) rows in place (am_direct; on an H200 at micro-batch 16 the
 * packing took 2.6 % of a GPT-2 124M step).  Tiles are copied from there
 * to shared memory with cp.async, 16 bytes a copy, double-buffered:
 * the next tile's copies are in flight while the current tile computes
 * (on an H200 this halved the forward's time against tiles loaded from
 * fp32 into registers and converted there).  Fragments are read with ldmatrix: as they lie
 * for A operands and for B operands whose columns are the tile's rows (K
 * in S = Q K^T), and with .trans where the product reduces over the
 * tile's rows (V forward, K for dq, Q and dO for dk/dv), so no tile is
 * stored twice.  Scores and dP are exact products of 16-bit values
 * summed in fp32; the softmax runs in fp32 in base 2 (exp2 of s scale
 * log2 e), masked only in the tiles the diagonal or the sequence's end
 * crosses; the probabilities P and the score gradients dS are rounded to
 * the 16-bit type for their products with V, dO, K and Q, as flash
 * attention does: the one rounding the fp32 kernels do not have
 * (test_backend_ops holds these to the CPU at 8 units of that type's
 * rounding).  Row max and row sum are exchanged among the four threads of
 * an mma row (shuffles); each thread keeps its partial row sums, combined
 * once at the end.  Fixed order throughout and no atomics: deterministic,
 * but not the CPU's bits.  Under tests/cudacpu, mma and ldmatrix are
 * emulated with shuffles in PTX's fragment layouts (am_mma, am_ldsm4),
 * which checks the indexing here, not the tensor cores.
 * ====================================================================== */

#define AM_THREADS 128
#define AM_ROWS 64     /* rows of a block's own tile, and of every streamed tile */

/* Blocks of the forward and of the dk/dv kernel that an SM must hold at
 * once at head width 64, which caps their registers at 65536 / (128 n).
 * ptxas -v for sm_90 (CUDA 13): the forward takes 128 registers at 4
 * (uncapped 155: 3 blocks, 12 warps an SM), no spill; dk/dv 168 at 3
 * (uncapped 190: 2 blocks, 8 warps), no spill; dq's 126 give it 4 blocks
 * uncapped (am_bwd_cw).  Width 128 is left uncapped (240 and more).  -D at
 * build time sets others (the device's A/B runs: 3 and 2 are the uncapped
 * kernels). */
#ifndef AM_FWD_BLOCKS
#define AM_FWD_BLOCKS 4
#endif
#ifndef AM_DKV_BLOCKS
#define AM_DKV_BLOCKS 3
#endif

typedef uint32_t am_u32;
typedef uint16_t am_u16;

/* Two floats as the 16-bit type DT, the first in the low half (an mma
 * register's element order); round to nearest even, as kernels/dtype.h
 * (one cvt.rn on the GPU). */
template <int DT>
__device__ static inline am_u32 am_pack(float lo, float hi)
{
#ifdef MDS_TESTS_CUDACPU_CUDA_SHIM_H
    return (am_u32)mds_f32_to_16(DT, lo) | ((am_u32)mds_f32_to_16(DT, hi) << 16);
#else
    am_u32 r;
    if (DT == MDS_BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#endif
}

/* c (16 x 8, fp32) += A (16 x 16, row-major) B (16 x 8, column-major): the
 * PTX fragment layouts, with g = lane / 4 and t = lane % 4: a[0] holds A
 * (g, 2t..2t+1), a[1] (g+8, 2t..), a[2] (g, 2t+8..), a[3] (g+8, 2t+8..);
 * b0 holds B (2t..2t+1, g), b1 (2t+8.., g); c[0..1] is C (g, 2t..2t+1),
 * c[2..3] (g+8, 2t..).  Not volatile: independent products may be
 * interleaved by the compiler. */
template <int DT>
__device__ static inline void am_mma(float (&c)[4], const am_u32 (&a)[4], am_u32 b0, am_u32 b1)
{
#ifdef MDS_TESTS_CUDACPU_CUDA_SHIM_H
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float r[4];
    for (int i = 0; i < 4; i++) {
        int hi = i >> 1, n = t * 2 + (i & 1);
        float acc = 0.0f;
        for (int k = 0; k < 16; k++) {
            am_u32 av = __shfl_sync(0xffffffffu, a[hi + 2 * (k >> 3)], g * 4 + (k & 7) / 2);
            am_u32 bv = __shfl_sync(0xffffffffu, (k >> 3) ? b1 : b0, n * 4 + (k & 7) / 2);
            am_u16 ah = (am_u16)((k & 1) ? av >> 16 : av), bh = (am_u16)((k & 1) ? bv >> 16 : bv);
            float x = DT == MDS_BF16 ? mds_bf16_to_f32(ah) : mds_f16_to_f32(ah);
            float y = DT == MDS_BF16 ? mds_bf16_to_f32(bh) : mds_f16_to_f32(bh);
            acc = acc + x * y;
        }
        r[i] = acc;
    }
    for (int i = 0; i < 4; i++)
        c[i] = c[i] + r[i];
#else
    if (DT == MDS_BF16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/*
 * ldmatrix.x4 (TR: .trans) of the four 8 x 8 blocks of a row-major shared
 * tile (stride ld halves) at (r0, c0), (r0 + 8, c0), (r0, c0 + 8) and (r0 +
 * 8, c0 + 8), into r[0..3]: lane l names row r0 + l % 8 + 8 (l / 8 % 2) at
 * column c0 + 8 (l / 16).  Without TR, r[m] holds block m's (g, 2t..2t+1);
 * with it, (2t, g) and (2t+1, g).  So with (r0, c0) = (row0, k0) r is an A
 * fragment; for B (k, n) = M (n0 + n, k0 + k) at (n0, k0), {r[0], r[2]} is
 * the B fragment of columns n0.., {r[1], r[3]} of n0 + 8..; and with TR
 * for B (k, n) = X (k0 + k, n0 + n) at (k0, n0), {r[0], r[1]} is that of
 * columns n0.., {r[2], r[3]} of n0 + 8...  Every row address is 16-byte
 * aligned (the stride and c0 are multiples of 8 halves).
 */
template <bool TR>
__device__ static inline void am_ldsm4(am_u32 (&r)[4], const am_u16 *tile, int ld, int r0, int c0)
{
    int lane = threadIdx.x & 31;
    int off = (r0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + c0 + 8 * (lane >> 4);
#ifdef MDS_TESTS_CUDACPU_CUDA_SHIM_H
    int g = lane >> 2, t = lane & 3;
    for (int m = 0; m < 4; m++) {
        if (TR) {
            int lo = __shfl_sync(0xffffffffu, off, 8 * m + 2 * t), hi = __shfl_sync(0xffffffffu, off, 8 * m + 2 * t + 1);
            r[m] = (am_u32)tile[lo + g] | ((am_u32)tile[hi + g] << 16);
        } else {
            int o = __shfl_sync(0xffffffffu, off, 8 * m + g);
            r[m] = (am_u32)tile[o + 2 * t] | ((am_u32)tile[o + 2 * t + 1] << 16);
        }
    }
#else
    unsigned addr = (unsigned)__cvta_generic_to_shared(tile + off);
    if (TR)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
#endif
}

/* Two C fragments (columns 16 kk .. 16 kk + 15 of a 16-row result) as the
 * A fragment of the next product over those columns. */
template <int DT>
__device__ static inline void am_ctoa(am_u32 (&a)[4], const float (&c0)[4], const float (&c1)[4])
{
    a[0] = am_pack<DT>(c0[0], c0[1]);
    a[1] = am_pack<DT>(c0[2], c0[3]);
    a[2] = am_pack<DT>(c1[0], c1[1]);
    a[3] = am_pack<DT>(c1[2], c1[3]);
}

/* The tensor-core kernels read 16-bit copies of their operands, packed
 * head by head (am_heads): (B, heads, Tp, D), Tp = T rounded up to 64, each
 * head's rows D halves long, zeros past T and past hs, so that a tile of
 * 64 rows is 64 D contiguous halves and loads without a bound or a
 * conversion.  Rounded as the kernels rounded their tiles before (cvt.rn):
 * the same operands, the same bits. */
template <int DT, int D>
__global__ static void am_heads_kernel(am_u16 *dst, const void *src, int sd, size_t stride, int T, int Tp, int nh,
                                      int hs, int vec)
{
    size_t e = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (e >= (size_t)Tp * D)
        return;
    int j = blockIdx.y, b = blockIdx.z, t = (int)(e / D), d = (int)(e % D);
    uint2 w = make_uint2(0u, 0u);   /* (am_pack of zeros) */
    if (t < T && d < hs) {
        size_t i = ((size_t)b * T + t) * stride + (size_t)j * hs + d;
        if (sd != MDS_F32 && vec) {   /* stored as DT: its bits as they are */
            w = *(const uint2 *)((const am_u16 *)src + i);
        } else {
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (vec) {
                v = __ldg((const float4 *)((const float *)src + i));
            } else {
                v.x = mds_load(sd, src, i);
                if (d + 1 < hs) v.y = mds_load(sd, src, i + 1);
                if (d + 2 < hs) v.z = mds_load(sd, src, i + 2);
                if (d + 3 < hs) v.w = mds_load(sd, src, i + 3);
            }
            w.x = am_pack<DT>(v.x, v.y);
            w.y = am_pack<DT>(v.z, v.w);
        }
    }
    *(uint2 *)(dst + (((size_t)b * nh + j) * Tp + t) * D + d) = w;
}

/* Asynchronous copies into shared memory (cp.async: issued, committed as a
 * group, waited for; each thread then syncs the block before reading what
 * others copied).  16 bytes, or 4 with zeros where `in` is false.  Under
 * tests/cudacpu a copy is done when issued. */
__device__ static inline void am_cp16(void *dst, const void *src)
{
#ifdef MDS_TESTS_CUDACPU_CUDA_SHIM_H
    memcpy(dst, src, 16);
#else
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
#endif
}
__device__ static inline void am_cp4(float *dst, const float *src, bool in)
{
#ifdef MDS_TESTS_CUDACPU_CUDA_SHIM_H
    *dst = in ? *src : 0.0f;
#else
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(src), "r"(in ? 4 : 0) : "memory");
#endif
}
__device__ static inline void am_commit(void)
{
#ifndef MDS_TESTS_CUDACPU_CUDA_SHIM_H
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
/* until at most N of this thread's groups are still in flight */
template <int N>
__device__ static inline void am_wait(void)
{
#ifndef MDS_TESTS_CUDACPU_CUDA_SHIM_H
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

/* A tile (64 rows of D halves from src, ld halves apart) into `rows`
 * (stride D + 8 halves: the eight rows an ldmatrix phase reads fall in
 * distinct banks), 16 bytes a copy. */
template <int D>
__device__ static inline void am_tile(am_u16 *rows, const am_u16 *src, size_t ld)
{
    constexpr int CR = D / 8, N = AM_ROWS * CR / AM_THREADS;
MDS_CU_UNROLL
    for (int i = 0; i < N; i++) {
        int f = (int)threadIdx.x + i * AM_THREADS, r = f / CR, c = f % CR * 8;
        am_cp16(rows + r * (D + 8) + c, src + (size_t)r * ld + c);
    }
}

/* The current stage of a double-buffered stream ready for the block: with
 * the next stage's copies just issued (more), commits them and waits for
 * every earlier group; else waits for all; then syncs the block.  The
 * caller syncs again once done with the stage: it is refilled a tile later. */
__device__ static inline void am_ready(bool more)
{
    if (more) {
        am_commit();
        am_wait<1>();
    } else {
        am_wait<0>();
    }
    __syncthreads();
}

/* Position t of head j of batch row b in x (p16's heads: q, then k, then
 * v; d16's: dO). */
__device__ static inline const am_u16 *am_at(const am_src &x, int b, int j, int t)
{
    return x.p + (size_t)b * x.bs + (size_t)j * x.hs + (size_t)t * x.ts;
}

/* Key tile `it` of nt streamed from heads ks and vs, positions ld apart
 * (the forward's and dq's K and V), through two stages of KV (stage st: K
 * at KV + 2 st TL, V after it): issues the next tile's copies, waits for
 * this tile's (am_ready), and returns this tile's K (V follows it). */
template <int D>
__device__ static inline const am_u16 *am_kv_tile(am_u16 *KV, const am_u16 *ks, const am_u16 *vs, size_t ld, int it,
                                                 int nt)
{
    constexpr int TL = AM_ROWS * (D + 8);
    if (it + 1 < nt) {
        am_u16 *Kn = KV + 2 * ((it + 1) & 1) * TL;
        am_tile<D>(Kn, ks + (size_t)(it + 1) * AM_ROWS * ld, ld);
        am_tile<D>(Kn + TL, vs + (size_t)(it + 1) * AM_ROWS * ld, ld);
    }
    am_ready(it + 1 < nt);
    return KV + 2 * (it & 1) * TL;
}

/* The backward's lse and D of the 64 queries from q0 (zeros past T) into
 * Ls and Ds: a thread each. */
__device__ static inline void am_rows(float *Ls, float *Ds, const fa_args &a, int b, int h, int q0)
{
    int i = threadIdx.x & (AM_ROWS - 1);
    size_t at = ((size_t)b * a.NH + h) * a.T + q0 + i;
    bool in = q0 + i < a.T;
    if (threadIdx.x < AM_ROWS)
        am_cp4(Ls + i, a.lse + (in ? at : 0), in);
    else
        am_cp4(Ds + i, a.Dg + (in ? at : 0), in);
}

/* Quad (the four threads of an mma row) max and sum. */
__device__ static inline float am_qmax(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ static inline float am_qsum(float v)
{
    v = v + __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

#define AM_LOG2E 1.4426950408889634f
#define AM_LN2 0.6931471805599453f

/* Accumulator fragments set to zero. */
template <int N>
__device__ static inline void am_zero(float (&x)[N][4])
{
MDS_CU_UNROLL
    for (int i = 0; i < N; i++)
        x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
}

/* A's fragments for the head dimension: its 16 rows from row0 of shared
 * tile At (stride D + 8), one fragment for each 16 columns. */
template <int D>
__device__ static inline void am_frags(am_u32 (&fa)[D / 16][4], const am_u16 *At, int row0)
{
MDS_CU_UNROLL
    for (int kk = 0; kk < D / 16; kk++)
        am_ldsm4<false>(fa[kk], At, D + 8, row0, kk * 16);
}

/* s (16 rows x 8 NB columns, C fragments) += A B^T over columns 16 kk ..
 * 16 kk + 15 of the head dimension: fa A's fragment there, B's 8 NB rows
 * from row col0 of shared tile Bt (stride D + 8). */
template <int DT, int D, int NB>
__device__ static inline void am_scores_kk(float (&s)[NB][4], const am_u32 (&fa)[4], const am_u16 *Bt, int kk, int col0)
{
MDS_CU_UNROLL
    for (int nb = 0; nb < NB; nb += 2) {
        am_u32 fb[4];
        am_ldsm4<false>(fb, Bt, D + 8, col0 + nb * 8, kk * 16);
        am_mma<DT>(s[nb], fa, fb[0], fb[2]);
        am_mma<DT>(s[nb + 1], fa, fb[1], fb[3]);
    }
}

/* s = A B^T over the head dimension, A's 16 rows being fa (am_frags) or,
 * built with AM_BWD_REGA=0, rows row0.. of shared tile At read a slice at a
 * time.  Each element sums its 16-column slices in order, whatever NB and
 * col0: a tile's scores have the same bits taken whole or a part at a time. */
#ifndef AM_BWD_REGA   /* 0: the backward re-reads its rows' fragments from shared memory (the device's A/B runs) */
#define AM_BWD_REGA 1
#endif
template <int DT, int D, int NB>
__device__ static inline void am_scores(float (&s)[NB][4], const am_u32 (&fa)[D / 16][4], const am_u16 *At, int row0,
                                        const am_u16 *Bt, int col0)
{
    am_zero(s);
MDS_CU_UNROLL
    for (int kk = 0; kk < D / 16; kk++) {
        if (AM_BWD_REGA) {
            am_scores_kk<DT, D>(s, fa[kk], Bt, kk, col0);
        } else {
            am_u32 f[4];
            am_ldsm4<false>(f, At, D + 8, row0, kk * 16);
            am_scores_kk<DT, D>(s, f, Bt, kk, col0);
        }
    }
}

/* acc (16 x D) += W (16 x 8 NW, C fragments, rounded to DT) X (8 NW x D:
 * the rows from row0 of X, a row-major shared tile of stride D + 8, read
 * transposed), 16 rows of X at a time in order. */
template <int DT, int D, int NW>
__device__ static inline void am_accum(float (&acc)[D / 8][4], const float (&w)[NW][4], const am_u16 *X, int row0)
{
MDS_CU_UNROLL
    for (int kk = 0; kk < NW / 2; kk++) {
        am_u32 wa[4];
        am_ctoa<DT>(wa, w[2 * kk], w[2 * kk + 1]);
MDS_CU_UNROLL
        for (int nd = 0; nd < D / 8; nd += 2) {
            am_u32 fb[4];
            am_ldsm4<true>(fb, X, D + 8, row0 + kk * 16, nd * 8);
            am_mma<DT>(acc[nd], wa, fb[0], fb[1]);
            am_mma<DT>(acc[nd + 1], wa, fb[2], fb[3]);
        }
    }
}

/* acc's rows (rbase + 16-row fragment layout) written into rows of x
 * (stored as xd, from element x0, row stride `stride`): rows below T,
 * columns below hs, each element by one thread (backend.h: written, not
 * added into; 0 + acc as the CPU's sum from a zeroed dqkv). */
template <int D>
__device__ static inline void am_put_out(void *x, int xd, size_t x0, size_t stride, const float (&acc)[D / 8][4],
                                         int rbase, int T, int hs, int kd)
{
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
MDS_CU_UNROLL
    for (int nd = 0; nd < D / 8; nd++)
MDS_CU_UNROLL
        for (int i = 0; i < 4; i++) {
            int rr = rbase + g + 8 * (i >> 1), d = nd * 8 + t * 2 + (i & 1);
            if (rr < T && d < hs)
                mds_cu_put(x, xd, x0 + (size_t)rr * stride + d, 0.0f + acc[nd][i], kd);
        }
}

/*
 * Forward of the 64 MT queries from q0 of head h, row b (the last tiles
 * first): Q's fragments stay in registers; per key tile up to the
 * diagonal, S = Q K^T, masked (where a tile needs it) and scaled into
 * base 2, the running max, P = exp2(S - m) (rounded to DT for the
 * product), O = O 2^(m - m') + P V.  K and V tiles are double-buffered:
 * the next tile's copies are in flight while the current one computes.
 * MT (am_fwd_mt) row tiles of 16 a warp: warp w takes rows 16 w + 64 i of
 * the block for i < MT, and each fragment of K and V it reads from shared
 * memory serves its MT products.  The 64 rows 64 i .. 64 i + 63 take the
 * key tiles a block of those 64 rows would (up to their diagonal; none
 * where they start past T), so every row's arithmetic, and its bits, are
 * those of MT = 1 whatever MT is.
 */
#ifndef AM_FWD_MT   /* row tiles a warp at head width 64 (2: the device's A/B runs); 1 at 128 */
#define AM_FWD_MT 1
#endif
template <int D> struct am_fwd_mt { static constexpr int n = D == 64 ? AM_FWD_MT : 1; };

template <int DT, int D>
__global__ __launch_bounds__(AM_THREADS, D == 64 ? (am_fwd_mt<D>::n > 1 ? 2 : AM_FWD_BLOCKS) : 1) static void
am_forward_kernel(fa_args a)
{
    constexpr int MT = am_fwd_mt<D>::n, LD = D + 8, NB = AM_ROWS / 8, KD = D / 16, ND = D / 8, TL = AM_ROWS * LD;
    extern __shared__ uint4 am_sm[];
    am_u16 *Qs = (am_u16 *)am_sm, *KV = Qs + MT * TL;   /* stage st: K at KV + 2 st TL, V after it */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int h = blockIdx.x, b = blockIdx.y, q0 = (int)(gridDim.z - 1 - blockIdx.z) * AM_ROWS * MT;   /* (am_grid) */
    int T = a.T, hs = a.hs, grp = h / (a.NH / a.NKV), nq = fa_min(AM_ROWS * MT, T - q0), kend = q0 + nq;
    const am_u16 *ks = am_at(a.p16, b, a.NH + grp, 0), *vs = am_at(a.p16, b, a.NH + a.NKV + grp, 0);
MDS_CU_UNROLL
    for (int i = 0; i < MT; i++)   /* (no row past T is read: past it a row tile is never used) */
        if (q0 + i * AM_ROWS < T)
            am_tile<D>(Qs + i * TL, am_at(a.p16, b, h, q0 + i * AM_ROWS), a.p16.ts);
    am_tile<D>(KV, ks, a.p16.ts);
    am_tile<D>(KV + TL, vs, a.p16.ts);
    am_commit();
    am_u32 qa[MT][KD][4];
    float o[MT][ND][4];
    float m[MT][2], l[MT][2];
    int r[MT][2];   /* this thread's two rows of each row tile */
MDS_CU_UNROLL
    for (int i = 0; i < MT; i++) {
        am_zero(o[i]);
        m[i][0] = m[i][1] = -INFINITY;
        l[i][0] = l[i][1] = 0.0f;
        r[i][0] = q0 + i * AM_ROWS + warp * 16 + g, r[i][1] = r[i][0] + 8;
    }
    float sl2 = a.scale * AM_LOG2E;
    int nt = (kend + AM_ROWS - 1) / AM_ROWS;
    for (int it = 0; it < nt; it++) {
        int k0 = it * AM_ROWS;
        const am_u16 *Ks = am_kv_tile<D>(KV, ks, vs, a.p16.ts, it, nt), *Vs = Ks + TL;
        if (it == 0)
MDS_CU_UNROLL
            for (int i = 0; i < MT; i++)
MDS_CU_UNROLL
                for (int kk = 0; kk < KD; kk++)
                    am_ldsm4<false>(qa[i][kk], Qs + i * TL, LD, warp * 16, kk * 16);
        /* row tile i takes this key tile where its 64 rows (over the four
           warps) reach k0 and start below T, as a block of 64 rows from
           q0 + 64 i would: the same for every warp of the block (the
           emulation's shuffles exchange across the whole block) */
        bool on[MT];
MDS_CU_UNROLL
        for (int i = 0; i < MT; i++)
            on[i] = k0 <= q0 + i * AM_ROWS && q0 + i * AM_ROWS < T;
        float s[MT][NB][4];   /* S = Q K^T, Q's fragments from registers */
MDS_CU_UNROLL
        for (int i = 0; i < MT; i++)
            am_zero(s[i]);
MDS_CU_UNROLL
        for (int kk = 0; kk < KD; kk++)
MDS_CU_UNROLL
            for (int nb = 0; nb < NB; nb += 2) {
                am_u32 fb[4];
                am_ldsm4<false>(fb, Ks, LD, nb * 8, kk * 16);
MDS_CU_UNROLL
                for (int i = 0; i < MT; i++)
                    if (on[i]) {
                        am_mma<DT>(s[i][nb], qa[i][kk], fb[0], fb[2]);
                        am_mma<DT>(s[i][nb + 1], qa[i][kk], fb[1], fb[3]);
                    }
            }
        float alpha[MT][2];
MDS_CU_UNROLL
        for (int i = 0; i < MT; i++) {
            if (!on[i]) {   /* (left as they are: alpha 1, no P) */
                alpha[i][0] = alpha[i][1] = 1.0f;
                continue;
            }
            /* every key of the tile before every row of the row tile, and below T */
            bool whole = k0 + AM_ROWS <= q0 + i * AM_ROWS && k0 + AM_ROWS <= T;
            float mx[2] = {-INFINITY, -INFINITY};
            if (whole) {   /* (no key index or comparison in the tiles that need no mask) */
MDS_CU_UNROLL
                for (int nb = 0; nb < NB; nb++)
MDS_CU_UNROLL
                    for (int e = 0; e < 4; e++) {
                        float x = s[i][nb][e] * sl2;
                        s[i][nb][e] = x;
                        mx[e >> 1] = fmaxf(mx[e >> 1], x);
                    }
            } else {
MDS_CU_UNROLL
                for (int nb = 0; nb < NB; nb++)
MDS_CU_UNROLL
                    for (int e = 0; e < 4; e++) {
                        int j = k0 + nb * 8 + t * 2 + (e & 1), hi = e >> 1;
                        float x = j <= r[i][hi] && j < T ? s[i][nb][e] * sl2 : -INFINITY;
                        s[i][nb][e] = x;
                        mx[hi] = fmaxf(mx[hi], x);
                    }
            }
MDS_CU_UNROLL
            for (int hi = 0; hi < 2; hi++) {
                /* finite: key k0 is in every row's tile (tiles of the same 64) */
                float mn = fmaxf(m[i][hi], am_qmax(mx[hi]));
                alpha[i][hi] = m[i][hi] == -INFINITY ? 0.0f : exp2f(m[i][hi] - mn);
                m[i][hi] = mn;
                l[i][hi] = l[i][hi] * alpha[i][hi];
            }
            if (whole) {
MDS_CU_UNROLL
                for (int nb = 0; nb < NB; nb++)
MDS_CU_UNROLL
                    for (int e = 0; e < 4; e++) {
                        float p = exp2f(s[i][nb][e] - m[i][e >> 1]);
                        s[i][nb][e] = p;
                        l[i][e >> 1] = l[i][e >> 1] + p;
                    }
            } else {
MDS_CU_UNROLL
                for (int nb = 0; nb < NB; nb++)
MDS_CU_UNROLL
                    for (int e = 0; e < 4; e++) {
                        float p = s[i][nb][e] == -INFINITY ? 0.0f : exp2f(s[i][nb][e] - m[i][e >> 1]);
                        s[i][nb][e] = p;
                        l[i][e >> 1] = l[i][e >> 1] + p;
                    }
            }
MDS_CU_UNROLL
            for (int nd = 0; nd < ND; nd++)
MDS_CU_UNROLL
                for (int e = 0; e < 4; e++)
                    o[i][nd][e] = o[i][nd][e] * alpha[i][e >> 1];
        }
        /* O += P V, each fragment of V read once for the row tiles */
MDS_CU_UNROLL
        for (int kk = 0; kk < AM_ROWS / 16; kk++) {
            am_u32 wa[MT][4];
MDS_CU_UNROLL
            for (int i = 0; i < MT; i++)
                if (on[i])
                    am_ctoa<DT>(wa[i], s[i][2 * kk], s[i][2 * kk + 1]);
MDS_CU_UNROLL
            for (int nd = 0; nd < ND; nd += 2) {
                am_u32 fb[4];
                am_ldsm4<true>(fb, Vs, LD, kk * 16, nd * 8);
MDS_CU_UNROLL
                for (int i = 0; i < MT; i++)
                    if (on[i]) {
                        am_mma<DT>(o[i][nd], wa[i], fb[0], fb[1]);
                        am_mma<DT>(o[i][nd + 1], wa[i], fb[2], fb[3]);
                    }
            }
        }
        __syncthreads();   /* this stage is refilled at the top of the next tile but one */
    }
    size_t ob = (size_t)b * T * a.C + (size_t)h * hs;
MDS_CU_UNROLL
    for (int i = 0; i < MT; i++) {
MDS_CU_UNROLL
        for (int hi = 0; hi < 2; hi++)
            l[i][hi] = am_qsum(l[i][hi]);
MDS_CU_UNROLL
        for (int nd = 0; nd < ND; nd++)
MDS_CU_UNROLL
            for (int e = 0; e < 4; e += 2) {   /* columns d and d + 1 of row rr: a pair */
                int rr = r[i][e >> 1], d = nd * 8 + t * 2;
                float li = l[i][e >> 1];
                if (rr < T && d + 1 < hs)
                    mds_cu_put2(a.out, a.od, ob + (size_t)rr * a.C + d, o[i][nd][e] / li, o[i][nd][e + 1] / li, a.kd);
                else if (rr < T && d < hs)
                    mds_cu_put(a.out, a.od, ob + (size_t)rr * a.C + d, o[i][nd][e] / li, a.kd);
            }
        if (t == 0)
MDS_CU_UNROLL
            for (int hi = 0; hi < 2; hi++)
                if (r[i][hi] < T)
                    a.lse[((size_t)b * a.NH + h) * T + r[i][hi]] = (m[i][hi] + log2f(l[i][hi])) * AM_LN2;
    }
}

/* The backward kernels take a tile's 64 columns (keys for dq, queries for
 * dk/dv) CW at a time: scores, their gradient and the products that use
 * them, before the next CW.  The same products in the same order as the
 * whole tile at once (am_scores, am_accum), so the same bits for every CW;
 * what changes is how many of the tile's scores a thread holds at once.
 * The rows' A fragments (q and dO for dq, K and V for dk/dv) are read into
 * registers once a block instead of once a tile. */
#ifndef AM_BWD_CW   /* at head width 64: 16, 32 or 64 (the device's A/B runs) */
#define AM_BWD_CW 16
#endif
#ifndef AM_BWD_CW128   /* the same at width 128 */
#define AM_BWD_CW128 16
#endif
template <int D> struct am_bwd_cw {
    static constexpr int n = D == 64 ? AM_BWD_CW : AM_BWD_CW128;
    static_assert(n % 16 == 0 && AM_ROWS % n == 0, "AM_BWD_CW: 16, 32 or 64 (am_accum takes 16 rows a step)");
};

/* The query side of a backward tile, issued (am_tile, am_rows): q and dO
 * of the 64 queries from q0 of head h in row b, their lse and D. */
template <int D>
__device__ static inline void am_queries(am_u16 *Qs, am_u16 *dOs, float *Ls, float *Ds, const fa_args &a, int b,
                                         int h, int q0)
{
    am_tile<D>(Qs, am_at(a.p16, b, h, q0), a.p16.ts);
    am_tile<D>(dOs, am_at(a.d16, b, h, q0), a.d16.ts);
    am_rows(Ls, Ds, a, b, h, q0);
}

/* dq of the 64 queries from q0 of head h, row b: per key tile up to the
 * diagonal (double-buffered as the forward's), S = Q K^T and dP = dO V^T,
 * P = exp2(S scale log2 e - lse log2 e), dS = P (dP - D) scale, dq += dS K. */
template <int DT, int D>
__global__ __launch_bounds__(AM_THREADS) static void am_dq_kernel(fa_args a)
{
    constexpr int LD = D + 8, CW = am_bwd_cw<D>::n, NB = CW / 8, TL = AM_ROWS * LD;
    extern __shared__ uint4 am_sm[];
    am_u16 *Qs = (am_u16 *)am_sm, *dOs = Qs + TL, *KV = dOs + TL;   /* stage st: K at KV + 2 st TL, V after */
    float *Ls = (float *)(KV + 4 * TL), *Ds = Ls + AM_ROWS;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int h = blockIdx.x, b = blockIdx.y, q0 = (int)(gridDim.z - 1 - blockIdx.z) * AM_ROWS;   /* (am_grid) */
    int T = a.T, hs = a.hs, grp = h / (a.NH / a.NKV), nq = fa_min(AM_ROWS, T - q0), kend = q0 + nq;
    const am_u16 *ks = am_at(a.p16, b, a.NH + grp, 0), *vs = am_at(a.p16, b, a.NH + a.NKV + grp, 0);
    am_queries<D>(Qs, dOs, Ls, Ds, a, b, h, q0);
    am_tile<D>(KV, ks, a.p16.ts);
    am_tile<D>(KV + TL, vs, a.p16.ts);
    am_commit();
    float acc[D / 8][4];
    am_zero(acc);
    am_u32 qa[D / 16][4], da[D / 16][4];   /* this warp's 16 queries of q and dO, read once */
    float sl2 = a.scale * AM_LOG2E, lr[2] = {0.0f, 0.0f}, dr[2] = {0.0f, 0.0f};
    int nt = (kend + AM_ROWS - 1) / AM_ROWS;
    for (int it = 0; it < nt; it++) {
        int k0 = it * AM_ROWS;
        const am_u16 *Ks = am_kv_tile<D>(KV, ks, vs, a.p16.ts, it, nt), *Vs = Ks + TL;
        if (it == 0) {
MDS_CU_UNROLL
            for (int hi = 0; hi < 2; hi++) {
                lr[hi] = Ls[warp * 16 + g + 8 * hi] * AM_LOG2E;
                dr[hi] = Ds[warp * 16 + g + 8 * hi];
            }
            if (AM_BWD_REGA) {
                am_frags<D>(qa, Qs, warp * 16);
                am_frags<D>(da, dOs, warp * 16);
            }
        }
        /* every key of the tile before every query of the block, every query below T */
        bool whole = k0 + AM_ROWS <= q0 && q0 + AM_ROWS <= T;
        for (int c0 = 0; c0 < AM_ROWS; c0 += CW) {   /* (am_bwd_cw) */
            float s[NB][4], dp[NB][4];
            am_scores<DT, D>(s, qa, Qs, warp * 16, Ks, c0);
            am_scores<DT, D>(dp, da, dOs, warp * 16, Vs, c0);
            if (whole) {
MDS_CU_UNROLL
                for (int nb = 0; nb < NB; nb++)
MDS_CU_UNROLL
                    for (int i = 0; i < 4; i++) {
                        float p = exp2f(s[nb][i] * sl2 - lr[i >> 1]);
                        s[nb][i] = p * (dp[nb][i] - dr[i >> 1]) * a.scale;
                    }
            } else {
MDS_CU_UNROLL
                for (int nb = 0; nb < NB; nb++)
MDS_CU_UNROLL
                    for (int i = 0; i < 4; i++) {
                        int tq = q0 + warp * 16 + g + 8 * (i >> 1), j = k0 + c0 + nb * 8 + t * 2 + (i & 1);
                        float ds = 0.0f;
                        if (j <= tq && tq < T) {
                            float p = exp2f(s[nb][i] * sl2 - lr[i >> 1]);
                            ds = p * (dp[nb][i] - dr[i >> 1]) * a.scale;
                        }
                        s[nb][i] = ds;
                    }
            }
            am_accum<DT, D>(acc, s, Ks, c0);
        }
        __syncthreads();
    }
    am_put_out<D>(a.dqs, a.gd, (size_t)b * T * a.row + (size_t)h * hs, a.row, acc, q0 + warp * 16, T, hs, a.kd);
}

/* dk and dv of the 64 keys from k0 of group grp, row b: for the group's
 * heads in order and the query tiles from the diagonal on (their q, dO,
 * lse and D double-buffered), S^T = K Q^T, dP^T = V dO^T, P^T, dS^T, then
 * dv += P^T dO and dk += dS^T Q. */
template <int DT, int D>
__global__ __launch_bounds__(AM_THREADS, D == 64 ? AM_DKV_BLOCKS : 1) static void am_dkv_kernel(fa_args a)
{
    constexpr int LD = D + 8, CW = am_bwd_cw<D>::n, NB = CW / 8, TL = AM_ROWS * LD;
    extern __shared__ uint4 am_sm[];
    am_u16 *Ks = (am_u16 *)am_sm, *Vs = Ks + TL, *QD = Vs + TL;   /* stage st: q at QD + 2 st TL, dO after */
    float *LDs = (float *)(QD + 4 * TL);                         /* stage st: lse at LDs + 2 st 64, D after */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int k0 = blockIdx.z * AM_ROWS, grp = blockIdx.x, b = blockIdx.y;   /* (am_grid) */
    int T = a.T, hs = a.hs, R = a.NH / a.NKV, nqt = (T - k0 + AM_ROWS - 1) / AM_ROWS, nt = R * nqt;
    size_t koff = (size_t)a.C + (size_t)grp * hs, voff = (size_t)a.C + ((size_t)a.NKV + grp) * hs;
    am_tile<D>(Ks, am_at(a.p16, b, a.NH + grp, k0), a.p16.ts);
    am_tile<D>(Vs, am_at(a.p16, b, a.NH + a.NKV + grp, k0), a.p16.ts);
    am_queries<D>(QD, QD + TL, LDs, LDs + AM_ROWS, a, b, grp * R, k0);
    am_commit();
    float ak[D / 8][4], av[D / 8][4];
    am_zero(ak);
    am_zero(av);
    am_u32 ka[D / 16][4], va[D / 16][4];   /* this warp's 16 keys of K and V, read once */
    float sl2 = a.scale * AM_LOG2E;
    for (int it = 0; it < nt; it++) {
        int q0 = k0 + it % nqt * AM_ROWS, st = it & 1;
        const am_u16 *Qs = QD + 2 * st * TL, *dOs = Qs + TL;
        const float *Ls = LDs + 2 * st * AM_ROWS, *Ds = Ls + AM_ROWS;
        if (it + 1 < nt) {
            int n = it + 1, sn = n & 1;
            am_queries<D>(QD + 2 * sn * TL, QD + (2 * sn + 1) * TL, LDs + 2 * sn * AM_ROWS, LDs + (2 * sn + 1) * AM_ROWS,
                          a, b, grp * R + n / nqt, k0 + n % nqt * AM_ROWS);
        }
        am_ready(it + 1 < nt);
        if (it == 0 && AM_BWD_REGA) {
            am_frags<D>(ka, Ks, warp * 16);
            am_frags<D>(va, Vs, warp * 16);
        }
        /* every key of the block before every query of the tile, every query below T */
        bool whole = k0 + AM_ROWS <= q0 && q0 + AM_ROWS <= T;
        for (int c0 = 0; c0 < AM_ROWS; c0 += CW) {   /* (am_bwd_cw) */
            float s[NB][4], dp[NB][4];
            am_scores<DT, D>(s, ka, Ks, warp * 16, Qs, c0);
            am_scores<DT, D>(dp, va, Vs, warp * 16, dOs, c0);
            if (whole) {
MDS_CU_UNROLL
                for (int nb = 0; nb < NB; nb++)
MDS_CU_UNROLL
                    for (int i = 0; i < 4; i++) {
                        int ql = c0 + nb * 8 + t * 2 + (i & 1);
                        float p = exp2f(s[nb][i] * sl2 - Ls[ql] * AM_LOG2E);
                        s[nb][i] = p;
                        dp[nb][i] = p * (dp[nb][i] - Ds[ql]) * a.scale;
                    }
            } else {
MDS_CU_UNROLL
                for (int nb = 0; nb < NB; nb++)
MDS_CU_UNROLL
                    for (int i = 0; i < 4; i++) {
                        int j = k0 + warp * 16 + g + 8 * (i >> 1), ql = c0 + nb * 8 + t * 2 + (i & 1), tq = q0 + ql;
                        float p = 0.0f, ds = 0.0f;
                        if (j <= tq && tq < T && j < T) {
                            p = exp2f(s[nb][i] * sl2 - Ls[ql] * AM_LOG2E);
                            ds = p * (dp[nb][i] - Ds[ql]) * a.scale;
                        }
                        s[nb][i] = p;
                        dp[nb][i] = ds;
                    }
            }
            am_accum<DT, D>(av, s, dOs, c0);
            am_accum<DT, D>(ak, dp, Qs, c0);
        }
        __syncthreads();
    }
    am_put_out<D>(a.dqs, a.gd, (size_t)b * T * a.row + koff, a.row, ak, k0 + warp * 16, T, hs, a.kd);
    am_put_out<D>(a.dqs, a.gd, (size_t)b * T * a.row + voff, a.row, av, k0 + warp * 16, T, hs, a.kd);
}

/* Shared memory: the forward's Q and two stages of K and V; the dq
 * kernel's Q and dO, two stages of K and V, lse and D; the dk/dv kernel's
 * K and V, two stages of q, dO, lse and D. */
template <int D> static size_t am_tile_bytes(void) { return 2 * (size_t)AM_ROWS * (D + 8); }
template <int D> static size_t am_forward_smem(void) { return (am_fwd_mt<D>::n + 4) * am_tile_bytes<D>(); }
template <int D> static size_t am_dq_smem(void) { return 6 * am_tile_bytes<D>() + 2 * AM_ROWS * sizeof(float); }
template <int D> static size_t am_dkv_smem(void) { return 6 * am_tile_bytes<D>() + 4 * AM_ROWS * sizeof(float); }

/* The grid of the tensor-core kernels: (heads, B, tiles of 64).  Blocks
 * start in order of z last, so the tiles with the most work (the last
 * query tiles forward and for dq, the first key tiles for dk/dv) start
 * first for every head and row: with blocks whose work ranges over T / 64
 * to 1 tiles, launching them a head at a time left a tail of heavy blocks
 * (ncu, GPT-2 124M at micro-batch 4: 1.9 waves forward, 2.9 for dk/dv). */
static dim3 am_grid(const fa_args &a, int heads, int B, int rows = AM_ROWS)
{
    return dim3((unsigned)heads, (unsigned)B, (unsigned)((a.T + rows - 1) / rows));
}

/* Bytes of nh packed heads of B rows. */
template <int D> static size_t am_heads_bytes(const fa_args &a, int B, int nh)
{
    return (size_t)B * nh * a.Tp * D * sizeof(am_u16);
}

/* nh heads of hs values, from column 0 of rows of src (stored as sd,
 * stride values apart), packed into dst (am_heads_kernel); vec as
 * fa_args's. */
template <int DT, int D>
static void am_heads(am_u16 *dst, const void *src, int sd, size_t stride, const fa_args &a, int B, int nh, int vec)
{
    size_t n4 = (size_t)a.Tp * D / 4;
    auto kernel = am_heads_kernel<DT, D>;
    kernel<<<dim3((unsigned)((n4 + 255) / 256), nh, B), 256>>>(dst, src, sd, stride, a.T, a.Tp, nh, a.hs, vec);
    MDS_CU_LAUNCHED("attention (16-bit heads)");
}

/* Whether the kernels can read nh heads of hs straight from x (stored as
 * xd, rows of `ld` values): the compute dtype DT itself, hs the padded
 * width D, T a multiple of the tile (no row past T is read), and every
 * head's rows 16-byte aligned (cp.async) - then no packed copy is made.
 * The same bits either way: packing copies 16-bit values unchanged. */
#ifndef AM_DIRECT   /* 0 at build time: always the packed copies (the device's A/B runs) */
#define AM_DIRECT 1
#endif
template <int DT, int D>
static int am_direct(const fa_args &a, const void *x, int xd, size_t ld)
{
    return AM_DIRECT && xd == DT && a.hs == D && a.T % AM_ROWS == 0 && ld % 8 == 0 && mds_cu_al16(x);
}

/* The nh heads of x (rows of ld values, stored as xd) as the kernels
 * read them: x itself where direct (am_direct), else packed into dst
 * (am_heads). */
template <int DT, int D>
static am_src am_source(const fa_args &a, int direct, am_u16 *dst, const void *x, int xd, size_t ld, int B, int nh,
                        int vec)
{
    if (direct)
        return am_src{(const am_u16 *)x, (size_t)a.T * ld, (size_t)a.hs, ld};
    am_heads<DT, D>(dst, x, xd, ld, a, B, nh, vec);
    return am_src{dst, (size_t)nh * a.Tp * D, (size_t)a.Tp * D, (size_t)D};
}

template <int DT, int D>
static void am_forward(fa_args a, int B)
{
    int nhp = a.NH + 2 * a.NKV;
    size_t smem = am_forward_smem<D>();
    if (mds_cu_smem((const void *)am_forward_kernel<DT, D>, smem, "attention_forward")) return;
    int qx = am_direct<DT, D>(a, a.qsrc, a.qd, a.row);
    am_u16 *p16 = qx ? NULL : (am_u16 *)mds_cuda_scratch(am_heads_bytes<D>(a, B, nhp));
    if (!qx && !p16) return;
    a.p16 = am_source<DT, D>(a, qx, p16, a.qsrc, a.qd, a.row, B, nhp, a.vec);
    auto kernel = am_forward_kernel<DT, D>;
    kernel<<<am_grid(a, a.NH, B, AM_ROWS * am_fwd_mt<D>::n), AM_THREADS, smem>>>(a);
    MDS_CU_LAUNCHED("attention_forward");
}

/* The scratch: D, then the packed q, k, v and dO (those not read in place: am_direct). */
template <int DT, int D>
static void am_backward(fa_args a, int B, int dvec)
{
    int nhp = a.NH + 2 * a.NKV;
    size_t sq = am_dq_smem<D>(), skv = am_dkv_smem<D>();
    if (mds_cu_smem((const void *)am_dq_kernel<DT, D>, sq, "attention_backward (dq)")) return;
    if (mds_cu_smem((const void *)am_dkv_kernel<DT, D>, skv, "attention_backward (dk, dv)")) return;
    int qx = am_direct<DT, D>(a, a.qsrc, a.qd, a.row), dx = am_direct<DT, D>(a, a.dout, a.dd, (size_t)a.C);
    size_t n = (size_t)B * a.NH * a.T, dg = mds_cu_al256(n * sizeof(float));
    size_t pq = qx ? 0 : am_heads_bytes<D>(a, B, nhp), pd = dx ? 0 : am_heads_bytes<D>(a, B, a.NH);
    char *s = (char *)mds_cuda_scratch(dg + pq + pd);
    if (!s) return;
    a.Dg = (float *)s;
    fa_rowdot(a, B);
    a.p16 = am_source<DT, D>(a, qx, (am_u16 *)(s + dg), a.qsrc, a.qd, a.row, B, nhp, a.vec);
    a.d16 = am_source<DT, D>(a, dx, (am_u16 *)(s + dg + pq), a.dout, a.dd, (size_t)a.C, B, a.NH, dvec);
    auto dq = am_dq_kernel<DT, D>, dkv = am_dkv_kernel<DT, D>;
    dq<<<am_grid(a, a.NH, B), AM_THREADS, sq>>>(a);
    MDS_CU_LAUNCHED("attention_backward (dq)");
    dkv<<<am_grid(a, a.NKV, B), AM_THREADS, skv>>>(a);
    MDS_CU_LAUNCHED("attention_backward (dk, dv)");
}

/* The tensor-core kernels take this op: a 16-bit compute dtype, no
 * attention dropout, heads up to 128 wide, at most 65535 heads in a row
 * of qkv (the packing's grid) and 65535 tiles of 64 positions (am_grid). */
static int am_takes(const fa_args &a)
{
    return mds_cuda_compute_dtype() != MDS_F32 && !(a.drop.p > 0.0f) && a.hs <= 128 &&
           a.NH + 2 * (long)a.NKV <= 65535 && ((long)a.T + AM_ROWS - 1) / AM_ROWS <= 65535;
}

/* the forward and backward on the tensor cores, by dtype and padded width
 * (dvec: dout's rows load as float4s) */
static void am_run(const fa_args &a, int B, int backward, int dvec)
{
    int bf = mds_cuda_compute_dtype() == MDS_BF16, w64 = a.hs <= 64;
    if (backward) {
        if (bf) w64 ? am_backward<MDS_BF16, 64>(a, B, dvec) : am_backward<MDS_BF16, 128>(a, B, dvec);
        else w64 ? am_backward<MDS_F16, 64>(a, B, dvec) : am_backward<MDS_F16, 128>(a, B, dvec);
    } else {
        if (bf) w64 ? am_forward<MDS_BF16, 64>(a, B) : am_forward<MDS_BF16, 128>(a, B);
        else w64 ? am_forward<MDS_F16, 64>(a, B) : am_forward<MDS_F16, 128>(a, B);
    }
}

/* Shared memory of each kernel, in bytes (the carve-up of its sm[]). */
template <int D> static size_t fa_forward_smem(void)
{
    constexpr int BQ = fa_cfg<D>::fq, BK = fa_cfg<D>::fk;
    return sizeof(float) * ((size_t)(BQ + 2 * BK) * (D + 1) + (size_t)BQ * (BK + 1) + 2 * (size_t)BQ * FA_TX);
}

template <int D> static size_t fa_dq_smem(void)
{
    constexpr int BQ = fa_cfg<D>::qq, BK = fa_cfg<D>::qk;
    return sizeof(float) * ((size_t)(2 * BQ + 2 * BK) * (D + 1) + (size_t)BQ * (BK + 1) + 2 * (size_t)BQ);
}

template <int D> static size_t fa_dkv_smem(void)
{
    constexpr int BK = fa_cfg<D>::kk, BQ = fa_cfg<D>::kq;
    return sizeof(float) * ((size_t)(2 * BK + 2 * BQ) * (D + 1) + 2 * (size_t)BK * (BQ + 1) + 2 * (size_t)BQ);
}

/* Kernels are launched through plain names: tests/cudacpu/hipcc.sh's
 * rewrite of a launch wants an identifier before the brackets. */
template <int D>
static void fa_forward(const fa_args &a, int B)
{
    size_t smem = fa_forward_smem<D>();
    if (mds_cu_smem((const void *)fa_forward_kernel<D>, smem, "attention_forward")) return;
    auto kernel = fa_forward_kernel<D>;
    kernel<<<dim3((a.T + fa_cfg<D>::fq - 1) / fa_cfg<D>::fq, a.NH, B), FA_THREADS, smem>>>(a);
    MDS_CU_LAUNCHED("attention_forward");
}

template <int D>
static void fa_backward(const fa_args &a, int B)
{
    size_t sq = fa_dq_smem<D>(), skv = fa_dkv_smem<D>();
    if (mds_cu_smem((const void *)fa_dq_kernel<D>, sq, "attention_backward (dq)")) return;
    if (mds_cu_smem((const void *)fa_dkv_kernel<D>, skv, "attention_backward (dk, dv)")) return;
    auto dq = fa_dq_kernel<D>, dkv = fa_dkv_kernel<D>;
    dq<<<dim3((a.T + fa_cfg<D>::qq - 1) / fa_cfg<D>::qq, a.NH, B), FA_THREADS, sq>>>(a);
    MDS_CU_LAUNCHED("attention_backward (dq)");
    dkv<<<dim3((a.T + fa_cfg<D>::kk - 1) / fa_cfg<D>::kk, a.NKV, B), FA_THREADS, skv>>>(a);
    MDS_CU_LAUNCHED("attention_backward (dk, dv)");
}

static fa_args fa_args_of(const void *qkv, int qd, int T, int C, int NH, int NKV, mds_dropout drop)
{
    fa_args a;
    memset(&a, 0, sizeof a);
    a.qsrc = qkv, a.qd = qd;
    a.qkv = qd == MDS_F32 ? (const float *)qkv : NULL;
    a.T = T, a.C = C, a.NH = NH, a.NKV = NKV, a.hs = C / NH;
    a.row = (size_t)C + 2 * (size_t)NKV * a.hs;
    a.scale = 1.0f / sqrtf((float)a.hs);
    a.dscale = 1.0f / (1.0f - drop.p);
    a.thr = mds_dropout_threshold(drop.p);
    a.drop = drop;
    a.vec = a.hs % 4 == 0 && C % 4 == 0 && a.row % 4 == 0 && mds_cu_al16(qkv);
    a.Tp = (int)(((long)T + AM_ROWS - 1) / AM_ROWS * AM_ROWS);
    a.kd = mds_cuda_compute_dtype();
    return a;
}

/* The padded head width of head size hs: 64, 128 or 256. */
static int fa_width(int hs) { return hs <= 64 ? 64 : hs <= 128 ? 128 : 256; }

/* x (n, stored as xd) widened to floats */
__global__ static void fa_widen_kernel(float *dst, const void *x, int xd, size_t n)
{
    size_t S = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += S)
        dst[i] = mds_load(xd, x, i);
}

/* x (n values stored as xd) widened into dst, named what */
static void fa_widen(float *dst, const void *x, int xd, size_t n, const char *what)
{
    fa_widen_kernel<<<mds_cu_blocks(n, 256), 256>>>(dst, x, xd, n);
    MDS_CU_LAUNCHED(what);
}

void attention_forward_cuda(void *out, int out_dt, float *lse, const void *qkv, int qkv_dt, int B, int T, int C,
                            int NH, int NKV, mds_dropout drop)
{
    if (att_check(B, T, C, NH, NKV, "attention_forward")) return;
    fa_args a = fa_args_of(qkv, qkv_dt, T, C, NH, NKV, drop);
    if (mds_cu_stored_bad(qkv_dt, a.kd, "attention_forward", "qkv") ||
        mds_cu_stored_bad(out_dt, a.kd, "attention_forward", "out"))
        return;
    a.out = out, a.od = out_dt, a.lse = lse;
    if (am_takes(a)) {
        am_run(a, B, 0, 0);
        return;
    }
    /* the fp32 kernels read and write floats: a 16-bit qkv widened, a
       16-bit out from a float copy (both in the scratch) */
    size_t n = (size_t)B * T * C, nq = (size_t)B * T * a.row;
    size_t ob = out_dt != MDS_F32 ? mds_cu_al256(n * sizeof(float)) : 0;
    size_t need = ob + (qkv_dt != MDS_F32 ? nq * sizeof(float) : 0);
    char *s = NULL;
    if (need && !(s = (char *)mds_cuda_scratch(need))) return;
    if (out_dt != MDS_F32)
        a.out = s, a.od = MDS_F32;
    if (qkv_dt != MDS_F32) {
        fa_widen((float *)(s + ob), qkv, qkv_dt, nq, "attention_forward (qkv to floats)");
        a.qkv = (const float *)(s + ob);
    }
    switch (fa_width(a.hs)) {
    case 64: fa_forward<64>(a, B); break;
    case 128: fa_forward<128>(a, B); break;
    default: fa_forward<256>(a, B); break;
    }
    if (out_dt != MDS_F32)
        to16_cuda((uint16_t *)out, (const float *)a.out, n, out_dt, "attention_forward (out to 16 bits)");
    else if (a.kd != MDS_F32)   /* kept (rounds_kept); the tensor-core kernels round as they store */
        round_to_cuda((float *)out, n, a.kd);
}

void attention_backward_cuda(void *dqkv, int dqkv_dt, const void *dout, int dout_dt, const void *qkv, int qkv_dt,
                             const void *out, int out_dt, const float *lse, int B, int T, int C, int NH, int NKV,
                             mds_dropout drop)
{
    if (att_check(B, T, C, NH, NKV, "attention_backward")) return;
    fa_args a = fa_args_of(qkv, qkv_dt, T, C, NH, NKV, drop);
    if (mds_cu_stored_bad(qkv_dt, a.kd, "attention_backward", "qkv") ||
        mds_cu_stored_bad(out_dt, a.kd, "attention_backward", "out") ||
        mds_cu_stored_bad(dout_dt, a.kd, "attention_backward", "dout") ||
        mds_cu_stored_bad(dqkv_dt, a.kd, "attention_backward", "dqkv"))
        return;
    size_t n = (size_t)B * NH * T, dg = mds_cu_al256(n * sizeof(float)), nd = (size_t)B * T * C;
    size_t nq = (size_t)B * T * a.row, db = dout_dt != MDS_F32 ? mds_cu_al256(nd * sizeof(float)) : 0;
    size_t qb = qkv_dt != MDS_F32 ? mds_cu_al256(nq * sizeof(float)) : 0;
    /* out, lse and dout are only read backward (D's rows and the packed
       dO: any stored dtype) */
    a.out = (void *)out, a.od = out_dt, a.lse = (float *)lse, a.dout = dout, a.dd = dout_dt;
    a.dqs = dqkv, a.gd = dqkv_dt;
    if (am_takes(a)) {   /* D in its scratch, beside the 16-bit copies; dqkv written as stored */
        am_run(a, B, 1, a.vec && mds_cu_al16(dout));
        return;
    }
    /* the fp32 kernels read dO and qkv as floats (16-bit ones widened,
       after D in the scratch) and add into a zeroed float dqkv (a 16-bit
       one's: after them, rounded into it at the end) */
    char *s = (char *)mds_cuda_scratch(dg + db + qb + (dqkv_dt != MDS_F32 ? nq * sizeof(float) : 0));
    if (!s) return;
    a.Dg = (float *)s;
    a.dqkv = dqkv_dt != MDS_F32 ? (float *)(s + dg + db + qb) : (float *)dqkv;
    mds_cuda_note(cudaMemsetAsync(a.dqkv, 0, nq * sizeof(float), 0), "attention_backward (dqkv)");
    if (dout_dt != MDS_F32) {
        fa_widen((float *)(s + dg), dout, dout_dt, nd, "attention_backward (dout to floats)");
        a.dout = s + dg, a.dd = MDS_F32;
    }
    if (qkv_dt != MDS_F32) {
        fa_widen((float *)(s + dg + db), qkv, qkv_dt, nq, "attention_backward (qkv to floats)");
        a.qkv = (const float *)(s + dg + db);
    }
    fa_rowdot(a, B);
    switch (fa_width(a.hs)) {
    case 64: fa_backward<64>(a, B); break;
    case 128: fa_backward<128>(a, B); break;
    default: fa_backward<256>(a, B); break;
    }
    if (dqkv_dt != MDS_F32)
        to16_cuda((uint16_t *)dqkv, a.dqkv, nq, dqkv_dt, "attention_backward (dqkv to 16 bits)");
    else if (a.kd != MDS_F32)
        round_to_cuda((float *)dqkv, nq, a.kd);
}
