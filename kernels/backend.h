/*
 * backend.h - where the trainer's tensors live and its kernels run: memory
 * (allocate, zero, copy, synchronise, free) and the op table of kernels.h,
 * behind one struct per backend.  The model (train/model.c) calls nothing
 * else, so adding a device means adding a backend, not touching the model.
 *
 * Backends today: "cpu", the reference kernels of kernels/cpu/ on host
 * memory — the oracle every other backend is held to by
 * tests/unit/test_backend_ops.c, which runs each op of this table on every
 * backend present against the CPU functions; and "cuda" (kernels/cuda/,
 * fp32 on one NVIDIA GPU), present when the build has CUDA (make
 * HAVE_CUDA=1) and the machine a device.
 *
 * Contract of the op table: the arguments, shapes, accumulate-or-overwrite
 * rules and determinism promises of the `<op>_cpu` functions in kernels.h,
 * with every pointer in the backend's memory (device pointers on a GPU),
 * except the `double *out` of the reductions, which is also backend memory
 * (copy it to the host to read it).  Ops are enqueued in order; sync() waits
 * for all of them.
 *
 * Stored dtypes: the tensors a 16-bit model keeps only as matmul inputs
 * (the norms' outputs, GELU's and SwiGLU's, attention's out), the
 * outputs of the matmuls that feed attention and the activation (qkv,
 * which rope_forward turns in place, and fch) and of the projections the
 * residual adds take (residual_forward's inp2), the logits with their
 * gradient, the gradients the matmuls write for the norms and attention
 * (the backward ops' dout) and the one attention writes for the QKV
 * matmul (dqkv, which rope_backward turns in place), and the residual
 * stream's gradient (the norms' backward's dinp, which they add into, and
 * the embedding's backward's dout) come with a dtype (enum mds_dtype, `out_dt`,
 * `inp_dt`, ...): MDS_F32, a float array as in kernels.h, or MDS_BF16 /
 * MDS_F16, an array of that type's 16-bit values.  A 16-bit out is the
 * fp32 result rounded to nearest even once (round_to's bits; a GPU's GEMM
 * may round its own fp32 sum in its epilogue), and a 16-bit dtype is the
 * compute dtype where the backend has one; a 16-bit input is read as its
 * values, exactly; a 16-bit tensor added into is read, added to in fp32
 * and rounded once.  So the results are those of the fp32 op on an fp32
 * array holding the same values, rounded: the CPU widens and rounds at
 * the boundaries.  crossentropy_backward's dt is its logits' and dlogits'
 * (the model runs it in place), GELU's and SwiGLU's backward's their
 * dinp's and dout's (the MLP's gradients).
 *
 * Written, not added into: the dinp of matmul_backward, gelu_backward and
 * swiglu_backward, and attention_backward's dqkv, are the gradient itself
 * (kernels.h's functions add into theirs; the CPU backend zeroes first),
 * so a GPU writes each once, 16-bit straight from the GEMM or the kernel,
 * without reading what was there.  The other backward ops add into their
 * outputs as kernels.h says.
 *
 * Memory: alloc() returns zeroed memory or fails with a message (naming the
 * bytes asked and, where the backend knows it, the bytes free) in error();
 * copy() moves bytes between any two of host and backend memory (a GPU
 * backend uses unified addressing).  What a backend deliberately does not
 * do: communication (train/comm.h), printing, exiting.
 *
 * Thread safety: one thread drives a backend at a time.
 */
#ifndef MDS_BACKEND_H
#define MDS_BACKEND_H

#include <stddef.h>

#include "dropout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mds_ops {
    void (*encoder_forward)(float *out, const int *inp, const float *wte, const float *wpe,
                            int B, int T, int C, int V, int v_start);
    void (*encoder_backward)(float *dwte, float *dwpe, const void *dout, int dout_dt, const int *inp,
                             int B, int T, int C, int V, int v_start);
    void (*layernorm_forward)(void *out, int out_dt, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int B, int T, int C, float eps);
    void (*layernorm_backward)(void *dinp, int dinp_dt, float *dweight, float *dbias, const void *dout, int dout_dt,
                               const float *inp, const float *weight, const float *mean, const float *rstd, int B,
                               int T, int C);
    void (*matmul_forward)(void *out, int out_dt, const void *inp, int inp_dt, const float *weight,
                           const float *bias, int B, int T, int C, int OC);
    void (*matmul_backward)(void *dinp, int dinp_dt, float *dweight, float *dbias, const void *dout, int dout_dt,
                            const void *inp, int inp_dt, const float *weight, int B, int T, int C, int OC);
    void (*attention_forward)(void *out, int out_dt, float *lse, const void *qkv, int qkv_dt, int B, int T, int C,
                              int NH, int NKV, mds_dropout drop);
    void (*attention_backward)(void *dqkv, int dqkv_dt, const void *dout, int dout_dt, const void *qkv,
                               int qkv_dt, const void *out, int out_dt, const float *lse, int B, int T, int C, int NH,
                               int NKV, mds_dropout drop);
    void (*dropout_forward)(float *out, const float *inp, int B, int T, int C, mds_dropout drop);
    void (*dropout_backward)(float *dinp, const float *dout, int B, int T, int C, mds_dropout drop);
    void (*rope_forward)(void *qkv, int qkv_dt, const float *cos_t, const float *sin_t, int B, int T, int NH,
                         int NKV, int hs, int rot, int interleaved);
    void (*rope_backward)(void *dqkv, int dqkv_dt, const float *cos_t, const float *sin_t, int B, int T, int NH,
                          int NKV, int hs, int rot, int interleaved);
    void (*rmsnorm_forward)(void *out, int out_dt, float *rstd, const float *inp, const float *weight, int B, int T,
                            int C, float eps);
    void (*rmsnorm_backward)(void *dinp, int dinp_dt, float *dweight, const void *dout, int dout_dt, const float *inp,
                             const float *weight, const float *rstd, int B, int T, int C);
    void (*swiglu_forward)(void *out, int out_dt, const void *inp, int inp_dt, size_t N, int F);
    void (*swiglu_backward)(void *dinp, const void *inp, int inp_dt, const void *dout, int dt, size_t N, int F);
    void (*gelu_forward)(void *out, int out_dt, const void *inp, int inp_dt, size_t N);
    void (*gelu_backward)(void *dinp, const void *inp, int inp_dt, const void *dout, int dt, size_t N);
    /* The MLP's linear and its GELU as one op (the model's GPT MLP; no
       SwiGLU): pre = matmul_forward(inp, weight, bias) stored as pre_dt,
       then out = gelu_forward(pre) stored as out_dt.  The CPU runs those
       two ops; a GPU may apply GELU in the GEMM's epilogue (cuBLASLt's
       GELU_AUX_BIAS, its own tanh: within the tolerance test_backend_ops
       states, not the CPU's bits), from the fp32 sum rather than pre's
       rounded value. */
    void (*matmul_gelu_forward)(void *out, int out_dt, void *pre, int pre_dt, const void *inp, int inp_dt,
                                const float *weight, const float *bias, int B, int T, int C, int OC);
    /* Backward through a linear whose input is gelu(pre): dmid =
       matmul_backward's dinp (stored as dt; dweight and dbias as
       matmul_backward), then dpre = gelu_backward(pre (stored as pre_dt),
       dmid) stored as dt.  dmid is scratch of B T C values of dt that a GPU
       may leave unwritten (cuBLASLt's DGELU epilogue gives dpre from the
       fp32 product: one rounding where the CPU rounds dmid too). */
    void (*matmul_gelu_backward)(void *dpre, void *dmid, int dt, float *dweight, float *dbias, const void *dout,
                                 int dout_dt, const void *inp, int inp_dt, const float *weight, const void *pre,
                                 int pre_dt, int B, int T, int C, int OC);
    /* out = inp1 + inp2 (stored as inp2_dt) kept as dt (enum mds_dtype):
       the fp32 sum rounded to dt's values (round_to's bits), fp32 itself
       at MDS_F32 */
    void (*residual_forward)(float *out, const float *inp1, const void *inp2, int inp2_dt, size_t N, int dt);
    void (*residual_backward)(float *dinp1, float *dinp2, const float *dout, size_t N);
    void (*crossentropy_forward)(float *losses, float *maxes, float *sumexp, float *tlogits, const void *logits,
                                 int logits_dt, const int *targets, const float *mask, int B, int T, int V,
                                 int v_start);
    void (*crossentropy_rescale)(float *sumexp, float *maxes, const float *gmax, int B, int T);
    void (*crossentropy_loss)(float *losses, const float *maxes, const float *sumexp, const float *tlogits,
                              const float *mask, int B, int T);
    void (*crossentropy_backward)(void *dlogits, const void *logits, int dt, const float *maxes,
                                  const float *sumexp, const int *targets, const float *dlosses, int B, int T,
                                  int V, int v_start);
    /* crossentropy_forward, then crossentropy_backward in place (dlogits
       over logits, both stored as dt), with dlosses already written
       (loss_grad): the last stage's loss and its gradient together, where
       nothing reads the logits between (one tensor-parallel rank, no
       rescale).  The CPU runs the two ops; a GPU may write the gradient
       from the row it read for the loss (the same bits). */
    void (*crossentropy_fused)(float *losses, float *maxes, float *sumexp, float *tlogits, void *logits, int dt,
                               const int *targets, const float *mask, const float *dlosses, int B, int T, int V,
                               int v_start);
    void (*loss_reduce)(double *out, const float *losses, const float *mask, size_t N);
    void (*loss_grad)(float *dlosses, const float *mask, float inv, size_t N);
    void (*round_to)(float *x, size_t N, int dtype);
    void (*unscale_check)(double *nonfinite, float *x, size_t N, float factor);
    void (*adamw_update)(float *params, float *m, float *v, const float *grads, size_t N, int t, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float grad_scale);
    void (*global_norm_squared)(double *out, const float *x, size_t N);
} mds_ops;

typedef struct mds_backend {
    const char *name;          /* "cpu", "cuda" */
    const char *device;        /* e.g. "2 OpenMP threads", "NVIDIA H100 80GB HBM3" */
    /* memory */
    int (*alloc)(void **ptr, size_t bytes);              /* zeroed; 0, or -1 with error() */
    void (*free)(void *ptr);                             /* NULL is fine */
    void (*zero)(void *ptr, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);
    int (*sync)(void);                                   /* 0, or -1 with error() */
    int (*mem_info)(size_t *free_bytes, size_t *total_bytes);   /* -1: unknown */
    /* bytes this process holds through alloc() (and the kernels' scratch):
       now, and the most at once since it started (the peak memory reports) */
    void (*mem_held)(size_t *now_bytes, size_t *peak_bytes);
    const char *(*error)(void);                          /* the last failure's message */
    mds_ops ops;
    /* host memory the device copies from and to fastest (CUDA: page-locked,
       cudaHostAlloc; the CPU: malloc), for comm.h's host staging */
    int (*host_alloc)(void **ptr, size_t bytes);         /* 0, or -1 with error() */
    void (*host_free)(void *ptr);
    /* The inputs of the matmuls and attentions that follow, the matmuls'
       weights and biases included, are values of dtype (enum mds_dtype;
       the caller rounded them: the model's --bf16 / --fp16), so a backend
       may multiply in that type with fp32 accumulation and fp32 results
       (CUDA: the tensor cores, a 16-bit output's bias in the GEMM's
       epilogue).  A product
       of two such values is exact in fp32, so the matmuls change only the
       order of their sums; attention also rounds its probabilities and
       score gradients to dtype before their products, as flash attention
       does (docs/architecture.md).  NULL (the CPU): fp32 throughout. */
    void (*set_compute_dtype)(int dtype);
    /* Non-zero: with a 16-bit compute dtype, these ops also round what
       they write to it, as the model keeps it (round_to's bits): the out
       of matmul_forward, layernorm_forward, rmsnorm_forward and
       attention_forward, the dinp of layernorm_backward and
       rmsnorm_backward, attention_backward's dqkv, gelu's and swiglu's out
       and dinp, matmul_gelu_forward's pre and out, matmul_gelu_backward's
       dpre and dmid, crossentropy_backward's and crossentropy_fused's dlogits.  The model then skips its
       own round_to pass after them (the CUDA kernels round as they store).
       0 (the CPU): outputs as computed, rounded by the model's round_to. */
    int rounds_kept;
    /* Marks, for timing ops (kernels/optime.h): mark_take() notes how far
       the ops and memory calls made so far have run, in a mark from
       mark_new(); once sync() has returned, mark_ms() is the time in
       milliseconds from one mark to a later one.  The CPU runs each op as
       it is called, so its marks read the host's clock; a GPU's are events
       in its stream, so the time is the device's own. */
    int (*mark_new)(void **mark);                 /* 0, or -1 with error() */
    void (*mark_take)(void *mark);
    double (*mark_ms)(void *from, void *to);
    void (*mark_free)(void *mark);                /* NULL is fine */
} mds_backend;

/* The bookkeeping behind mem_held(), one for each backend: every block
 * alloc() handed out and not yet freed, with its size (free() gets only
 * the pointer).  Tensors are allocated once, so a linear search is cheap. */
typedef struct mds_mem_block {
    void *ptr;
    size_t bytes;
} mds_mem_block;
typedef struct mds_mem_ledger {
    mds_mem_block *blocks;
    size_t n, cap;
    size_t now, peak;
} mds_mem_ledger;

/* Record a block; 0, or -1 when the ledger itself cannot grow (host memory). */
int mds_mem_ledger_add(mds_mem_ledger *l, void *ptr, size_t bytes);
/* Forget the block at ptr (NULL, or a pointer not recorded: nothing). */
void mds_mem_ledger_remove(mds_mem_ledger *l, void *ptr);
/* The bytes held now and at peak.  The three are safe from any thread. */
void mds_mem_ledger_read(mds_mem_ledger *l, size_t *now_bytes, size_t *peak_bytes);

/* The CPU reference backend (always present). */
const mds_backend *mds_backend_cpu(void);

/* The backends of this build that can run here, the CPU first (then
 * "cuda" when built with CUDA and a device is found: the first call probes
 * with cudaGetDeviceCount, and on a machine without a GPU nothing else of
 * CUDA runs); returns how many were written into out (at most cap). */
size_t mds_backend_list(const mds_backend **out, size_t cap);

/* The backend called name, or NULL when this build or machine lacks it. */
const mds_backend *mds_backend_find(const char *name);

/* How many devices the backend called name can use here: 1 for "cpu";
 * for "cuda" what cudaGetDeviceCount says (0 without a CUDA build, driver
 * or GPU), creating no context.  Not thread-safe before the first find. */
int mds_backend_devices(const char *name);

/* mds_backend_find() on device ordinal `device` of that backend: a GPU
 * backend binds it (cudaSetDevice) on its first use in the process, so
 * call this before any find or list; later calls return that backend for
 * its device only (NULL for another ordinal).  The CPU ignores device. */
const mds_backend *mds_backend_find_device(const char *name, int device);

#ifdef __cplusplus
}
#endif

#endif /* MDS_BACKEND_H */
