/*
 * backend.c - the CPU backend (host memory, the reference kernels of
 * kernels/cpu/) and the list of backends this build has; see backend.h.
 *
 * The CPU backend is the oracle: its op table is exactly the `<op>_cpu`
 * functions (those with a 16-bit stored tensor widen it to a float copy,
 * or round their float result into it: backend.h's stored dtypes), so what
 * the trainer computes through it is what the kernels' own tests check.  A build with CUDA (MDS_HAVE_CUDA) lists "cuda" second
 * when a device is found at run time (kernels/cuda/backend_cuda.cu).
 */
#include "backend.h"
#include "dtype.h"
#include "grow.h"
#include "kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* The ledgers are process-wide while threads may each drive a model of
 * their own on one backend (test_model's tensor-parallel ranks are threads;
 * mdstrain's communication thread frees nothing, but may one day): one lock
 * for every ledger, held for a few instructions per alloc and free. */
static pthread_mutex_t ledger_mu = PTHREAD_MUTEX_INITIALIZER;

int mds_mem_ledger_add(mds_mem_ledger *l, void *ptr, size_t bytes)
{
    int rc = 0;
    pthread_mutex_lock(&ledger_mu);
    if (mds_grow((void **)&l->blocks, &l->cap, l->n + 1, sizeof *l->blocks) != 0) {
        rc = -1;
    } else {
        l->blocks[l->n++] = (mds_mem_block){ptr, bytes};
        l->now += bytes;
        if (l->now > l->peak)
            l->peak = l->now;
    }
    pthread_mutex_unlock(&ledger_mu);
    return rc;
}

void mds_mem_ledger_remove(mds_mem_ledger *l, void *ptr)
{
    pthread_mutex_lock(&ledger_mu);
    for (size_t i = l->n; ptr && i-- > 0;)   /* the newest first: scratch is replaced, tensors live long */
        if (l->blocks[i].ptr == ptr) {
            l->now -= l->blocks[i].bytes;
            l->blocks[i] = l->blocks[--l->n];
            break;
        }
    pthread_mutex_unlock(&ledger_mu);
}

void mds_mem_ledger_read(mds_mem_ledger *l, size_t *now_bytes, size_t *peak_bytes)
{
    pthread_mutex_lock(&ledger_mu);
    *now_bytes = l->now;
    *peak_bytes = l->peak;
    pthread_mutex_unlock(&ledger_mu);
}

static char cpu_err[160];
static mds_mem_ledger cpu_ledger;

static int cpu_alloc(void **ptr, size_t bytes)
{
    *ptr = calloc(bytes ? bytes : 1, 1);
    if (*ptr && mds_mem_ledger_add(&cpu_ledger, *ptr, bytes) == 0)
        return 0;
    free(*ptr);
    *ptr = NULL;
    snprintf(cpu_err, sizeof cpu_err, "out of host memory (%zu bytes asked)", bytes);
    return -1;
}

static void cpu_free(void *ptr)
{
    mds_mem_ledger_remove(&cpu_ledger, ptr);
    free(ptr);
}

static void cpu_mem_held(size_t *now_bytes, size_t *peak_bytes)
{
    mds_mem_ledger_read(&cpu_ledger, now_bytes, peak_bytes);
}
static void cpu_zero(void *ptr, size_t bytes) { if (bytes) memset(ptr, 0, bytes); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { if (bytes && dst != src) memmove(dst, src, bytes); }
/* A failure inside an op (an op returns nothing): noted, and reported by
 * the next sync(), as a GPU backend reports its kernels' failures. */
static int cpu_failed;

static int cpu_sync(void)
{
    pthread_mutex_lock(&ledger_mu);
    int rc = cpu_failed ? -1 : 0;
    cpu_failed = 0;
    pthread_mutex_unlock(&ledger_mu);
    return rc;
}
static const char *cpu_error(void) { return cpu_err; }

/* A mark is the monotonic clock's reading, in seconds. */
static int cpu_mark_new(void **mark)
{
    *mark = malloc(sizeof(double));
    if (*mark)
        return 0;
    snprintf(cpu_err, sizeof cpu_err, "out of host memory (a timing mark)");
    return -1;
}
static void cpu_mark_take(void *mark)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *(double *)mark = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double cpu_mark_ms(void *from, void *to) { return (*(double *)to - *(double *)from) * 1e3; }
static void cpu_mark_free(void *mark) { free(mark); }

static int cpu_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), ps = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || avail < 0 || ps <= 0)
        return -1;
    *free_bytes = (size_t)avail * (size_t)ps;
    *total_bytes = (size_t)pages * (size_t)ps;
    return 0;
}

/* ---- stored dtypes (backend.h): the fp32 kernels, widened and rounded ---- */

/* n floats of scratch, or NULL with the failure noted for sync() (the op
 * then does nothing). */
static float *scratch_f32(size_t n)
{
    float *f = n <= ((size_t)-1) / sizeof(float) ? malloc((n ? n : 1) * sizeof(float)) : NULL;
    if (!f) {
        pthread_mutex_lock(&ledger_mu);
        snprintf(cpu_err, sizeof cpu_err, "out of host memory (%zu floats of a 16-bit tensor's float copy)", n);
        cpu_failed = 1;
        pthread_mutex_unlock(&ledger_mu);
    }
    return f;
}

/* A float copy of the n values of a dt array (p itself at fp32), or NULL
 * (scratch_f32).  Freed by done_f32. */
static float *as_f32(const void *p, int dt, size_t n)
{
    if (dt == MDS_F32)
        return (float *)p;
    float *f = scratch_f32(n);
    if (f)
        for (size_t i = 0; i < n; i++)
            f[i] = mds_load(dt, p, i);
    return f;
}

/* An fp32 array to compute n outputs in: out itself at fp32, else scratch. */
static float *out_f32(void *out, int dt, size_t n)
{
    return dt == MDS_F32 ? (float *)out : scratch_f32(n);
}

/* The scratch f of out_f32 stored into out as dt, and freed. */
static void store_out(void *out, int dt, float *f, size_t n)
{
    if (dt == MDS_F32 || !f)
        return;
    for (size_t i = 0; i < n; i++)
        mds_store(dt, out, i, f[i]);
    free(f);
}

static void done_f32(const void *p, int dt, float *f)
{
    if (dt != MDS_F32 && f != p)
        free(f);
}


static void cpu_layernorm_forward(void *out, int out_dt, float *mean, float *rstd, const float *inp,
                                  const float *weight, const float *bias, int B, int T, int C, float eps)
{
    size_t n = (size_t)B * T * C;
    float *o = out_f32(out, out_dt, n);
    if (!o) return;
    layernorm_forward_cpu(o, mean, rstd, inp, weight, bias, B, T, C, eps);
    store_out(out, out_dt, o, n);
}

static void cpu_rmsnorm_forward(void *out, int out_dt, float *rstd, const float *inp, const float *weight, int B,
                                int T, int C, float eps)
{
    size_t n = (size_t)B * T * C;
    float *o = out_f32(out, out_dt, n);
    if (!o) return;
    rmsnorm_forward_cpu(o, rstd, inp, weight, B, T, C, eps);
    store_out(out, out_dt, o, n);
}

static void cpu_gelu_forward(void *out, int out_dt, const void *inp, int inp_dt, size_t N)
{
    float *x = as_f32(inp, inp_dt, N), *o = x ? out_f32(out, out_dt, N) : NULL;
    if (o)
        gelu_forward_cpu(o, x, N);
    store_out(out, out_dt, o, N);
    done_f32(inp, inp_dt, x);
}

static void cpu_swiglu_forward(void *out, int out_dt, const void *inp, int inp_dt, size_t N, int F)
{
    float *x = as_f32(inp, inp_dt, 2 * N * (size_t)F), *o = x ? out_f32(out, out_dt, N * (size_t)F) : NULL;
    if (o)
        swiglu_forward_cpu(o, x, N, F);
    store_out(out, out_dt, o, N * (size_t)F);
    done_f32(inp, inp_dt, x);
}

/* The qkv row width of attention's shapes. */
static size_t qkv_row(int C, int NH, int NKV) { return (size_t)C + 2 * (size_t)NKV * (size_t)(C / NH); }

static void cpu_attention_forward(void *out, int out_dt, float *lse, const void *qkv, int qkv_dt, int B, int T,
                                  int C, int NH, int NKV, mds_dropout drop)
{
    size_t n = (size_t)B * T * C;
    float *q = as_f32(qkv, qkv_dt, (size_t)B * T * qkv_row(C, NH, NKV)), *o = q ? out_f32(out, out_dt, n) : NULL;
    if (o)
        attention_forward_cpu(o, lse, q, B, T, C, NH, NKV, drop);
    store_out(out, out_dt, o, n);
    done_f32(qkv, qkv_dt, q);
}

static void cpu_attention_backward(void *dqkv, int dqkv_dt, const void *dout, int dout_dt, const void *qkv,
                                   int qkv_dt, const void *out, int out_dt, const float *lse, int B, int T, int C,
                                   int NH, int NKV, mds_dropout drop)
{
    size_t n = (size_t)B * T * C, nq = (size_t)B * T * qkv_row(C, NH, NKV);
    float *o = as_f32(out, out_dt, n), *d = o ? as_f32(dout, dout_dt, n) : NULL;
    float *q = d ? as_f32(qkv, qkv_dt, nq) : NULL, *dq = q ? out_f32(dqkv, dqkv_dt, nq) : NULL;
    if (dq) {   /* (written: backend.h) */
        memset(dq, 0, nq * sizeof *dq);
        attention_backward_cpu(dq, d, q, o, lse, B, T, C, NH, NKV, drop);
    }
    store_out(dqkv, dqkv_dt, dq, nq);
    done_f32(qkv, qkv_dt, q);
    done_f32(dout, dout_dt, d);
    done_f32(out, out_dt, o);
}

/* in place: a 16-bit qkv (dqkv) widened, turned, rounded back */
static void cpu_rope(void *qkv, int qkv_dt, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV,
                     int hs, int rot, int interleaved, int backward)
{
    size_t n = (size_t)B * T * ((size_t)NH + 2 * (size_t)NKV) * (size_t)hs;
    float *q = as_f32(qkv, qkv_dt, n);
    if (!q) return;
    if (backward)
        rope_backward_cpu(q, cos_t, sin_t, B, T, NH, NKV, hs, rot, interleaved);
    else
        rope_forward_cpu(q, cos_t, sin_t, B, T, NH, NKV, hs, rot, interleaved);
    store_out(qkv, qkv_dt, q, n);
}

static void cpu_rope_forward(void *qkv, int qkv_dt, const float *cos_t, const float *sin_t, int B, int T, int NH,
                             int NKV, int hs, int rot, int interleaved)
{
    cpu_rope(qkv, qkv_dt, cos_t, sin_t, B, T, NH, NKV, hs, rot, interleaved, 0);
}

static void cpu_rope_backward(void *dqkv, int dqkv_dt, const float *cos_t, const float *sin_t, int B, int T, int NH,
                              int NKV, int hs, int rot, int interleaved)
{
    cpu_rope(dqkv, dqkv_dt, cos_t, sin_t, B, T, NH, NKV, hs, rot, interleaved, 1);
}

/* (a 16-bit dinp: widened, added into, rounded once as it is stored) */
static void cpu_layernorm_backward(void *dinp, int dinp_dt, float *dweight, float *dbias, const void *dout,
                                   int dout_dt, const float *inp, const float *weight, const float *mean,
                                   const float *rstd, int B, int T, int C)
{
    size_t n = (size_t)B * T * C;
    float *d = as_f32(dout, dout_dt, n), *di = d ? as_f32(dinp, dinp_dt, n) : NULL;
    if (di)
        layernorm_backward_cpu(di, dweight, dbias, d, inp, weight, mean, rstd, B, T, C);
    store_out(dinp, dinp_dt, di, n);
    done_f32(dout, dout_dt, d);
}

static void cpu_rmsnorm_backward(void *dinp, int dinp_dt, float *dweight, const void *dout, int dout_dt,
                                 const float *inp, const float *weight, const float *rstd, int B, int T, int C)
{
    size_t n = (size_t)B * T * C;
    float *d = as_f32(dout, dout_dt, n), *di = d ? as_f32(dinp, dinp_dt, n) : NULL;
    if (di)
        rmsnorm_backward_cpu(di, dweight, d, inp, weight, rstd, B, T, C);
    store_out(dinp, dinp_dt, di, n);
    done_f32(dout, dout_dt, d);
}

static void cpu_encoder_backward(float *dwte, float *dwpe, const void *dout, int dout_dt, const int *inp, int B,
                                 int T, int C, int V, int v_start)
{
    float *d = as_f32(dout, dout_dt, (size_t)B * T * C);
    if (!d) return;
    encoder_backward_cpu(dwte, dwpe, d, inp, B, T, C, V, v_start);
    done_f32(dout, dout_dt, d);
}

static void cpu_matmul_forward(void *out, int out_dt, const void *inp, int inp_dt, const float *weight,
                               const float *bias, int B, int T, int C, int OC)
{
    size_t n = (size_t)B * T * OC;
    float *x = as_f32(inp, inp_dt, (size_t)B * T * C), *o = x ? out_f32(out, out_dt, n) : NULL;
    if (o)
        matmul_forward_cpu(o, x, weight, bias, B, T, C, OC);
    store_out(out, out_dt, o, n);
    done_f32(inp, inp_dt, x);
}

static void cpu_matmul_backward(void *dinp, int dinp_dt, float *dweight, float *dbias, const void *dout,
                                int dout_dt, const void *inp, int inp_dt, const float *weight, int B, int T, int C,
                                int OC)
{
    size_t n = (size_t)B * T * C;
    float *x = as_f32(inp, inp_dt, n), *d = x ? as_f32(dout, dout_dt, (size_t)B * T * OC) : NULL;
    float *di = d ? out_f32(dinp, dinp_dt, n) : NULL;   /* (written: backend.h) */
    if (di) {
        memset(di, 0, n * sizeof *di);
        matmul_backward_cpu(di, dweight, dbias, d, x, weight, B, T, C, OC);
    }
    store_out(dinp, dinp_dt, di, n);
    done_f32(dout, dout_dt, d);
    done_f32(inp, inp_dt, x);
}

static void cpu_gelu_backward(void *dinp, const void *inp, int inp_dt, const void *dout, int dt, size_t N)
{
    float *x = as_f32(inp, inp_dt, N), *d = x ? as_f32(dout, dt, N) : NULL, *di = d ? out_f32(dinp, dt, N) : NULL;
    if (di) {
        memset(di, 0, N * sizeof *di);
        gelu_backward_cpu(di, x, d, N);
    }
    store_out(dinp, dt, di, N);
    done_f32(dout, dt, d);
    done_f32(inp, inp_dt, x);
}

/* backend.h's compositions: the two ops, as the model called them before */
static void cpu_matmul_gelu_forward(void *out, int out_dt, void *pre, int pre_dt, const void *inp, int inp_dt,
                                    const float *weight, const float *bias, int B, int T, int C, int OC)
{
    cpu_matmul_forward(pre, pre_dt, inp, inp_dt, weight, bias, B, T, C, OC);
    cpu_gelu_forward(out, out_dt, pre, pre_dt, (size_t)B * T * OC);
}

static void cpu_matmul_gelu_backward(void *dpre, void *dmid, int dt, float *dweight, float *dbias, const void *dout,
                                     int dout_dt, const void *inp, int inp_dt, const float *weight, const void *pre,
                                     int pre_dt, int B, int T, int C, int OC)
{
    cpu_matmul_backward(dmid, dt, dweight, dbias, dout, dout_dt, inp, inp_dt, weight, B, T, C, OC);
    cpu_gelu_backward(dpre, pre, pre_dt, dmid, dt, (size_t)B * T * C);
}

static void cpu_swiglu_backward(void *dinp, const void *inp, int inp_dt, const void *dout, int dt, size_t N, int F)
{
    size_t n2 = 2 * N * (size_t)F;
    float *x = as_f32(inp, inp_dt, n2), *d = x ? as_f32(dout, dt, N * (size_t)F) : NULL;
    float *di = d ? out_f32(dinp, dt, n2) : NULL;
    if (di) {
        memset(di, 0, n2 * sizeof *di);
        swiglu_backward_cpu(di, x, d, N, F);
    }
    store_out(dinp, dt, di, n2);
    done_f32(dout, dt, d);
    done_f32(inp, inp_dt, x);
}

static void cpu_crossentropy_forward(float *losses, float *maxes, float *sumexp, float *tlogits, const void *logits,
                                     int logits_dt, const int *targets, const float *mask, int B, int T, int V,
                                     int v_start)
{
    float *l = as_f32(logits, logits_dt, (size_t)B * T * V);
    if (!l) return;
    crossentropy_forward_cpu(losses, maxes, sumexp, tlogits, l, targets, mask, B, T, V, v_start);
    done_f32(logits, logits_dt, l);
}

/* (16-bit: in place on the float copy, which may be of dlogits itself) */
static void cpu_crossentropy_backward(void *dlogits, const void *logits, int dt, const float *maxes,
                                      const float *sumexp, const int *targets, const float *dlosses, int B, int T,
                                      int V, int v_start)
{
    size_t n = (size_t)B * T * V;
    if (dt == MDS_F32) {
        crossentropy_backward_cpu(dlogits, logits, maxes, sumexp, targets, dlosses, B, T, V, v_start);
        return;
    }
    float *l = as_f32(logits, dt, n);
    if (!l) return;
    crossentropy_backward_cpu(l, l, maxes, sumexp, targets, dlosses, B, T, V, v_start);
    store_out(dlogits, dt, l, n);
}

static void cpu_crossentropy_fused(float *losses, float *maxes, float *sumexp, float *tlogits, void *logits, int dt,
                                   const int *targets, const float *mask, const float *dlosses, int B, int T, int V,
                                   int v_start)
{
    cpu_crossentropy_forward(losses, maxes, sumexp, tlogits, logits, dt, targets, mask, B, T, V, v_start);
    cpu_crossentropy_backward(logits, logits, dt, maxes, sumexp, targets, dlosses, B, T, V, v_start);
}

static void cpu_residual_forward(float *out, const float *inp1, const void *inp2, int inp2_dt, size_t N, int dt)
{
    float *b = as_f32(inp2, inp2_dt, N);
    if (!b) return;
    residual_forward_cpu(out, inp1, b, N);
    done_f32(inp2, inp2_dt, b);
    if (dt != MDS_F32)
        round_to_cpu(out, N, dt);
}

static mds_backend cpu = {
    .name = "cpu",
    .device = "host",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .mem_info = cpu_mem_info,
    .mem_held = cpu_mem_held,
    .error = cpu_error,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .mark_new = cpu_mark_new,
    .mark_take = cpu_mark_take,
    .mark_ms = cpu_mark_ms,
    .mark_free = cpu_mark_free,
    .ops = {
        .encoder_forward = encoder_forward_cpu,
        .encoder_backward = cpu_encoder_backward,
        .layernorm_forward = cpu_layernorm_forward,
        .layernorm_backward = cpu_layernorm_backward,
        .matmul_forward = cpu_matmul_forward,
        .matmul_backward = cpu_matmul_backward,
        .attention_forward = cpu_attention_forward,
        .attention_backward = cpu_attention_backward,
        .dropout_forward = dropout_forward_cpu,
        .dropout_backward = dropout_backward_cpu,
        .rope_forward = cpu_rope_forward,
        .rope_backward = cpu_rope_backward,
        .rmsnorm_forward = cpu_rmsnorm_forward,
        .rmsnorm_backward = cpu_rmsnorm_backward,
        .swiglu_forward = cpu_swiglu_forward,
        .swiglu_backward = cpu_swiglu_backward,
        .gelu_forward = cpu_gelu_forward,
        .gelu_backward = cpu_gelu_backward,
        .matmul_gelu_forward = cpu_matmul_gelu_forward,
        .matmul_gelu_backward = cpu_matmul_gelu_backward,
        .residual_forward = cpu_residual_forward,
        .residual_backward = residual_backward_cpu,
        .crossentropy_forward = cpu_crossentropy_forward,
        .crossentropy_rescale = crossentropy_rescale_cpu,
        .crossentropy_loss = crossentropy_loss_cpu,
        .crossentropy_backward = cpu_crossentropy_backward,
        .crossentropy_fused = cpu_crossentropy_fused,
        .loss_reduce = loss_reduce_cpu,
        .loss_grad = loss_grad_cpu,
        .round_to = round_to_cpu,
        .unscale_check = unscale_check_cpu,
        .adamw_update = adamw_update_cpu,
        .global_norm_squared = global_norm_squared_cpu,
    },
};

const mds_backend *mds_backend_cpu(void)
{
    static char device[64];
    if (!device[0]) {
        int threads = 1;
#ifdef _OPENMP
        threads = omp_get_max_threads();
#endif
        snprintf(device, sizeof device, "host, %d OpenMP thread%s", threads, threads == 1 ? "" : "s");
        cpu.device = device;
    }
    return &cpu;
}

#ifdef MDS_HAVE_CUDA
/* kernels/cuda/backend_cuda.cu: the CUDA backend on device ordinal device
 * (-1: the one already bound, else 0), or NULL when no such device (or no
 * driver) is found or another is bound; binds once.  The device count. */
const mds_backend *mds_backend_cuda_probe(int device);
int mds_backend_cuda_count(void);
#endif

size_t mds_backend_list(const mds_backend **out, size_t cap)
{
    size_t n = 0;
    if (n < cap)
        out[n++] = mds_backend_cpu();
#ifdef MDS_HAVE_CUDA
    const mds_backend *cu = mds_backend_cuda_probe(-1);
    if (cu && n < cap)
        out[n++] = cu;
#endif
    return n;
}

const mds_backend *mds_backend_find(const char *name)
{
    const mds_backend *list[8];
    size_t n = mds_backend_list(list, 8);
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i]->name, name) == 0)
            return list[i];
    return NULL;
}

int mds_backend_devices(const char *name)
{
    if (strcmp(name, "cpu") == 0)
        return 1;
#ifdef MDS_HAVE_CUDA
    if (strcmp(name, "cuda") == 0)
        return mds_backend_cuda_count();
#endif
    return 0;
}

const mds_backend *mds_backend_find_device(const char *name, int device)
{
#ifdef MDS_HAVE_CUDA
    if (strcmp(name, "cuda") == 0)
        return mds_backend_cuda_probe(device);
#endif
    (void)device;
    return mds_backend_find(name);
}
