/*
 * matmul.c - CPU reference of the linear layer out = inp @ weight^T + bias,
 * weight (OC, C), forward and backward.
 *
 * All three products (out, dinp, dweight) go through one packed, blocked
 * GEMM with a register-tiled micro-kernel (BLIS's loop nest): an AVX-512
 * kernel, an AVX2+FMA kernel and a portable one, picked at run time
 * (cpu.c), so the binary runs on any x86-64 and builds on any
 * architecture.  It does not call BLAS and does not communicate (the
 * tensor-parallel all-reduces are the caller's).
 *
 * Summation order, the property everything else rests on: each output
 * element is ONE accumulator that runs over the reduction index k = 0, 1,
 * ..., K-1 in order, acc = acc + a_k * b_k (a fused multiply-add on the
 * AVX2 and AVX-512 paths, a multiply then an add on the portable path),
 * starting from 0 (forward, then + bias) or from the gradient's current
 * value (backward, which accumulates).  Blocking over K stores the
 * accumulator and reloads it, which changes nothing; blocking over rows and
 * columns, packing, the micro-tile shape and which thread computes a tile
 * never enter that order.  So results are bitwise independent of the
 * thread count, of how the work is split, and of where a column sits in
 * the weight (column-parallel shards equal the TP=1 slice), and identical
 * on every CPU that has FMA.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define MM_X86 1
#else
#define MM_X86 0
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels.h"
#include "common.h"

/* Cache blocking: a (MC x KC) block of A and a (KC x NC) block of B are
 * packed per task (up to 0.5 MB + 1 MB, in L2); the micro-kernel streams a
 * KC x NR micro-panel of B (up to 64 KB) past the A micro-panels.  KC up to
 * 512 rather than the L1-sized 256: measured faster here, because an
 * output tile is then loaded and stored fewer times (once when K <= 512). */
#define MM_KC 512
#define MM_MC 256
#define MM_NC 512
#define MM_MR_MAX 12
#define MM_NR_MAX 32

/* C (MR x NR, row stride ldc) = (load ? C : 0) + A_panel * B_panel over kc.
 * A_panel is k-major (MR values per k), B_panel k-major (NR per k). */
typedef void (*mm_kernel)(int kc, const float *A, const float *B, float *C, long ldc, int load);

/* Portable kernel, 4 x 8: small enough for 16 SSE registers. */
static void mm_kernel_generic(int kc, const float *A, const float *B, float *C, long ldc, int load)
{
    float acc[4][8];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            acc[i][j] = load ? C[i * ldc + j] : 0.0f;
    for (int k = 0; k < kc; k++)
        for (int i = 0; i < 4; i++) {
            float a = A[k * 4 + i];
            for (int j = 0; j < 8; j++)
                acc[i][j] = acc[i][j] + a * B[k * 8 + j];
        }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            C[i * ldc + j] = acc[i][j];
}

#if MM_X86
/* 6 x 16: 12 ymm accumulators, 2 for B, 1 broadcast. */
__attribute__((target("avx2,fma")))
static void mm_kernel_avx2(int kc, const float *A, const float *B, float *C, long ldc, int load)
{
    __m256 c[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        c[i][0] = load ? _mm256_loadu_ps(C + i * ldc) : _mm256_setzero_ps();
        c[i][1] = load ? _mm256_loadu_ps(C + i * ldc + 8) : _mm256_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(B + k * 16), b1 = _mm256_load_ps(B + k * 16 + 8);
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) {
            __m256 a = _mm256_broadcast_ss(A + k * 6 + i);
            c[i][0] = _mm256_fmadd_ps(a, b0, c[i][0]);
            c[i][1] = _mm256_fmadd_ps(a, b1, c[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        _mm256_storeu_ps(C + i * ldc, c[i][0]);
        _mm256_storeu_ps(C + i * ldc + 8, c[i][1]);
    }
}

/* 12 x 32: 24 zmm accumulators, 2 for B, 1 broadcast. */
__attribute__((target("avx512f")))
static void mm_kernel_avx512(int kc, const float *A, const float *B, float *C, long ldc, int load)
{
    __m512 c[12][2];
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
        c[i][0] = load ? _mm512_loadu_ps(C + i * ldc) : _mm512_setzero_ps();
        c[i][1] = load ? _mm512_loadu_ps(C + i * ldc + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(B + k * 32), b1 = _mm512_load_ps(B + k * 32 + 16);
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            __m512 a = _mm512_set1_ps(A[k * 12 + i]);
            c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
        _mm512_storeu_ps(C + i * ldc, c[i][0]);
        _mm512_storeu_ps(C + i * ldc + 16, c[i][1]);
    }
}
#endif

struct mm_isa {
    mm_kernel kernel;
    int mr, nr;
};

static struct mm_isa mm_pick(void)
{
    struct mm_isa g = { mm_kernel_generic, 4, 8 };
#if MM_X86
    int isa = mds_cpu_isa();
    if (isa >= MDS_ISA_AVX512) {
        struct mm_isa z = { mm_kernel_avx512, 12, 32 };
        return z;
    }
    if (isa >= MDS_ISA_AVX2) {
        struct mm_isa y = { mm_kernel_avx2, 6, 16 };
        return y;
    }
#endif
    return g;
}

/* One operand as a strided matrix: X[i][k] = p[i * rs + k * cs]. */
struct mm_mat {
    const float *p;
    long rs, cs;
};

/* Packs rows [i0, i0+m) x k in [k0, k0+kc) of X into micro-panels of mr
 * rows, k-major, zero-padding the last panel to mr rows. */
static void mm_pack(float *dst, struct mm_mat x, long i0, int m, long k0, int kc, int mr)
{
    for (int ir = 0; ir < m; ir += mr) {
        int mm = m - ir < mr ? m - ir : mr;
        float *d = dst + (size_t)ir * kc;
        const float *s = x.p + (i0 + ir) * x.rs + k0 * x.cs;
        if (x.cs == 1) {
            for (int i = 0; i < mm; i++)
                for (int k = 0; k < kc; k++)
                    d[(size_t)k * mr + i] = s[i * x.rs + k];
        } else if (x.rs == 1) {
            for (int k = 0; k < kc; k++)
                memcpy(d + (size_t)k * mr, s + k * x.cs, (size_t)mm * sizeof(float));
        } else {
            for (int k = 0; k < kc; k++)
                for (int i = 0; i < mm; i++)
                    d[(size_t)k * mr + i] = s[k * x.cs + i * x.rs];
        }
        for (int k = 0; k < kc && mm < mr; k++)
            for (int i = mm; i < mr; i++)
                d[(size_t)k * mr + i] = 0.0f;
    }
}

/*
 * Scratch: each thread's A and B blocks are fixed-size thread-local arrays
 * (about 1.6 MB per thread that runs a matmul), and the whole-operand pack (up to
 * MM_PREPACK_MAX floats) is a thread-local buffer that grows and is kept.
 * Nothing is mapped and unmapped per call (each munmap is a TLB shoot-down
 * across the cores), concurrent calls from different threads stay safe, and
 * a failed allocation only means the operand is not packed whole.
 */
#define MM_AP_SIZE ((MM_MC + MM_MR_MAX) * MM_KC)
#define MM_BP_SIZE ((MM_NC + MM_NR_MAX) * MM_KC)
static _Thread_local float mm_ap[MM_AP_SIZE] __attribute__((aligned(64)));
static _Thread_local float mm_bp[MM_BP_SIZE] __attribute__((aligned(64)));
static _Thread_local struct {
    float *p;
    size_t n;
} mm_whole;

/* The buffer is freed when its thread ends (a key's destructor): threads
 * other than OpenMP's pool, e.g. one per simulated rank, come and go. */
static pthread_key_t mm_whole_key;
static pthread_once_t mm_whole_once = PTHREAD_ONCE_INIT;
static void mm_whole_key_init(void) { (void)pthread_key_create(&mm_whole_key, free); }

static float *mm_whole_buffer(size_t n)
{
    if (mm_whole.n < n) {
        free(mm_whole.p);
        mm_whole.p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
        mm_whole.n = mm_whole.p ? n : 0;
        (void)pthread_once(&mm_whole_once, mm_whole_key_init);
        (void)pthread_setspecific(mm_whole_key, mm_whole.p);
    }
    return mm_whole.p;
}

static int mm_ceil(long a, long b)
{
    return (int)((a + b - 1) / b);
}

static long mm_roundup(long a, long b)
{
    return (a + b - 1) / b * b;
}

/* Largest operand (in floats) that is packed whole, once per call. */
#define MM_PREPACK_MAX (4L << 20)

/*
 * C (M x N, row stride ldc) = C * accumulate + A (M x K) @ Bt^T, with Bt
 * given as (N x K) strided, then + bias[j] (forward).
 *
 * Packing is the cost to keep down (the 50304-wide vocabulary makes one
 * operand large): the operand along the smaller output dimension is packed
 * whole, once, by all threads together, and tasks split the other
 * dimension, each packing its own slice of the large operand exactly once.
 * When even that operand is too large to pack whole, tasks are (row block,
 * column block) pairs that pack both.  The split may depend on the thread
 * count; the per-element order (file header) does not.
 */
static void mm_gemm(float *C, long ldc, struct mm_mat a, struct mm_mat bt, int M, int N, int K,
                    int accumulate, const float *bias)
{
    if (M <= 0 || N <= 0)
        return;
    struct mm_isa isa = mm_pick();
    int mr = isa.mr, nr = isa.nr;
    int nth = 1;
#ifdef _OPENMP
    nth = omp_get_max_threads();
#endif
    long Mp = mm_roundup(M, mr), Np = mm_roundup(N, nr);
    /* pre: 1 = A packed whole (tasks split columns), 2 = B packed whole
     * (tasks split rows), 0 = neither. */
    int pre = M <= N ? (Mp * K <= MM_PREPACK_MAX ? 1 : 0) : (Np * K <= MM_PREPACK_MAX ? 2 : 0);
    float *whole = NULL;
    if (pre && K > 0) {
        whole = mm_whole_buffer((size_t)(pre == 1 ? Mp : Np) * K);
        if (!whole)
            pre = 0;
    }
    int nmb = pre == 1 ? 1 : mm_ceil(M, MM_MC), nnb = pre == 2 ? 1 : mm_ceil(N, pre ? MM_NC / 2 : MM_NC);
    /* A task count that spreads evenly over the threads when tasks are few. */
    while ((nmb * nnb) % nth && nmb * nnb < 8 * nth) {
        if (pre != 1 && nmb * mr < M)
            nmb++;
        else if (pre != 2 && nnb * nr < N)
            nnb++;
        else
            break;
    }
    long mc = mm_roundup(mm_ceil(M, nmb), mr), nc = mm_roundup(mm_ceil(N, nnb), nr);
    nmb = mm_ceil(M, mc);
    nnb = mm_ceil(N, nc);
    long ntasks = (long)nmb * nnb;
    /* K in equal blocks of at most MM_KC: K = 384 (the model's C) is one
     * block, so an output tile is written once, not stored and reloaded. */
    int nkb = mm_ceil(K, MM_KC);
    long kb = K > 0 ? mm_ceil(K, nkb) : 1;
    OMP(parallel)
    {
        if (pre && K > 0) {
            /* Block k0 of the whole operand starts at k0 * (Mp or Np); its
             * panel of rows [i, i + mr) at i * kc within it. */
            struct mm_mat x = pre == 1 ? a : bt;
            int dim = pre == 1 ? M : N, r = pre == 1 ? mr : nr;
            long dimp = pre == 1 ? Mp : Np, chunk = mm_roundup(256, r);
            long nchunks = mm_ceil(dim, chunk);
            OMP(for schedule(dynamic, 1))
            for (long job = 0; job < nkb * nchunks; job++) {
                long k0 = job / nchunks * kb, i0 = job % nchunks * chunk;
                int kc = (int)(K - k0 < kb ? K - k0 : kb);
                int m = (int)(dim - i0 < chunk ? dim - i0 : chunk);
                mm_pack(whole + k0 * dimp + i0 * kc, x, i0, m, k0, kc, r);
            }
        }
        float *Ap = mm_ap, *Bp = mm_bp;
        float tile[MM_MR_MAX * MM_NR_MAX];
        OMP(for schedule(dynamic, 1))
        for (long task = 0; task < ntasks; task++) {
            long i0 = task % nmb * mc, j0 = task / nmb * nc;
            int m = (int)(M - i0 < mc ? M - i0 : mc), n = (int)(N - j0 < nc ? N - j0 : nc);
            if (K <= 0 && !accumulate)
                for (int i = 0; i < m; i++)
                    memset(C + (i0 + i) * ldc + j0, 0, (size_t)n * sizeof(float));
            for (long k0 = 0; k0 < K; k0 += kb) {
                int kc = (int)(K - k0 < kb ? K - k0 : kb);
                int load = accumulate || k0 > 0;
                const float *Ab, *Bb;
                if (pre == 1) {
                    Ab = whole + k0 * Mp + i0 * kc;
                } else {
                    mm_pack(Ap, a, i0, m, k0, kc, mr);
                    Ab = Ap;
                }
                if (pre == 2) {
                    Bb = whole + k0 * Np + j0 * kc;
                } else {
                    mm_pack(Bp, bt, j0, n, k0, kc, nr);
                    Bb = Bp;
                }
                for (int jr = 0; jr < n; jr += nr)
                    for (int ir = 0; ir < m; ir += mr) {
                        const float *ap = Ab + (size_t)ir * kc, *bp = Bb + (size_t)jr * kc;
                        float *c = C + (i0 + ir) * ldc + j0 + jr;
                        int mm = m - ir < mr ? m - ir : mr, nn = n - jr < nr ? n - jr : nr;
                        if (mm == mr && nn == nr) {
                            isa.kernel(kc, ap, bp, c, ldc, load);
                            continue;
                        }
                        /* Edge tile: the same kernel on a full-size copy. */
                        memset(tile, 0, sizeof tile);
                        for (int i = 0; i < mm; i++)
                            for (int j = 0; j < nn; j++)
                                tile[i * nr + j] = load ? c[i * ldc + j] : 0.0f;
                        isa.kernel(kc, ap, bp, tile, nr, 1);
                        for (int i = 0; i < mm; i++)
                            for (int j = 0; j < nn; j++)
                                c[i * ldc + j] = tile[i * nr + j];
                    }
            }
            if (bias)
                for (int i = 0; i < m; i++) {
                    float *c = C + (i0 + i) * ldc + j0;
                    for (int j = 0; j < n; j++)
                        c[j] += bias[j0 + j];
                }
        }
    }
}

void matmul_forward_cpu(float *out, const float *inp, const float *weight, const float *bias,
                        int B, int T, int C, int OC)
{
    struct mm_mat a = { inp, C, 1 }, bt = { weight, C, 1 };
    mm_gemm(out, OC, a, bt, B * T, OC, C, 0, bias);
}

/*
 * dinp[r,:] += sum_o dout[r,o] weight[o,:]   (o in order, from dinp's value)
 * dweight[o,:] += sum_r dout[r,o] inp[r,:]   (r in order, from dweight's value)
 * dbias[o] += sum_r dout[r,o]                (r in order, in double)
 */
void matmul_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const float *weight, int B, int T, int C, int OC)
{
    long N = (long)B * T;
    struct mm_mat dA = { dout, OC, 1 }, wT = { weight, 1, C };
    mm_gemm(dinp, C, dA, wT, (int)N, C, OC, 1, NULL);
    struct mm_mat dT = { dout, 1, OC }, xT = { inp, 1, C };
    mm_gemm(dweight, C, dT, xT, OC, C, (int)N, 1, NULL);
    if (!dbias)
        return;
    int nblk = mm_ceil(OC, 256);
    OMP(parallel for schedule(static))
    for (int blk = 0; blk < nblk; blk++) {
        int o0 = blk * 256, o1 = o0 + 256 < OC ? o0 + 256 : OC;
        double db[256] = {0};
        for (long r = 0; r < N; r++) {
            const float *d = dout + (size_t)r * OC;
            for (int o = o0; o < o1; o++)
                db[o - o0] += d[o];
        }
        for (int o = o0; o < o1; o++)
            dbias[o] += (float)db[o - o0];
    }
}
