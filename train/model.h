/*
 * model.h - Megatron's GPT on the kernels of kernels/kernels.h: the
 * configuration, the parameter / gradient / optimizer / activation tables,
 * forward with a masked loss, backward, gradient norm and the AdamW update.
 *
 * The model is written per rank: a tensor-parallel (TP) shard of the heads,
 * the FFN columns and the padded vocabulary, and a pipeline-parallel (PP)
 * range of layers; every size below is the LOCAL one.  The TP collectives
 * (Megatron's f/g all-reduces and the vocab-parallel cross-entropy's three
 * reductions) run inside gpt_forward/gpt_backward through the caller's
 * gpt_tp_ops; the PP transfers are the caller's: it fills the stage input
 * (gpt_stage_input) before a forward on a stage after the first, sends
 * gpt_stage_output after it, fills the output gradient (gpt_stage_dgrad)
 * before a backward on a stage before the last and sends the input gradient
 * (gpt_stage_dgrad again) after it.  A stage keeps the activations of
 * cfg.act_slots micro-batches (1F1B keeps up to PP - pp_rank in flight);
 * gpt_set_slot() picks the one the next forward/backward uses.
 *
 * Backend.  Every buffer lives in the memory of cfg.backend (kernels/backend.h;
 * the CPU when NULL) and every computation is an op of its table: the model
 * allocates, zeroes and copies through it and never touches tensor memory
 * with the host, except through gpt_state_read/gpt_state_write and the
 * staging of token ids and masks.  With the CPU backend that memory is host
 * memory and the tests read the tensors directly.
 *
 * Memory follows llm.c: parameters, gradients, AdamW state (m and v
 * together) and activations (with the backward's scratch) are each ONE
 * allocation, addressed through a table of pointers.  Each tensor has a
 * dtype (param_dtype[], act_dtype) and an element count (param_sizes[],
 * act_sizes[]); its bytes are the product with mds_dtype_size().  The fp32
 * master weights (master_memory), which the optimizer updates and
 * checkpoints save, are kept apart from the working weights the kernels read
 * (params_memory); with fp32 working weights they are the same buffer, with
 * bf16/fp16 ones the working copy is the master rounded after every update.
 * Mixed precision on a backend that computes in fp32 (the CPU): every op
 * computes in fp32 and the tensors a GPU would store in 16 bits (weights,
 * activations, activation gradients, logits) are rounded to that format
 * (the backend's round_to) where they are stored; LayerNorm/RMSNorm
 * statistics, the attention lse, losses and weight gradients stay fp32
 * (Megatron's main grads), unless grad_dtype is the working dtype (fp16
 * without --accumulate-allreduce-grads-in-fp32, bf16 with
 * --grad-reduce-in-bf16): then the gradient buffer is rounded after each
 * micro-batch's backward.
 * The AdamW state covers pieces of the flat elements: all of them in one
 * piece, or a data-parallel rank's (gpt_set_optimizer_pieces, ZeRO-1: one
 * range, or one per --overlap-grad-reduce bucket).  Activations
 * are sized for act_slots micro-batches of B sequences of T tokens (one
 * unless a pipeline keeps several in flight); gradient accumulation runs
 * micro-batches one after another into the same gradients.
 *
 * Dropout (cfg.hidden_dropout, cfg.attention_dropout) runs only in a forward
 * whose rows were given their training positions (gpt_set_dropout_rows); the
 * masks are kernels/dropout.h's, a function of the seed, the positions and
 * global coordinates, so every parallel layout draws the one-process masks
 * and the backward redraws the forward's.
 *
 * What it deliberately does not do: read data, open communicators, print, exit,
 * bf16/fp16 working weights, checkpoint files (train/checkpoint.h reads and
 * writes the state through gpt_state_read/gpt_state_write).
 *
 * Error handling: functions that can fail return 0 or a negative
 * enum gpt_err and write a one-line message into the caller's buffer.
 * Thread safety: a gpt_model is used by one thread at a time; the kernels
 * parallelise internally with OpenMP.
 */
#ifndef MDS_MODEL_H
#define MDS_MODEL_H

#include "backend.h"
#include "dtype.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum gpt_err {
    GPT_OK = 0,
    GPT_ERR_ARG = -1,    /* inconsistent configuration or arguments */
    GPT_ERR_NOMEM = -2   /* an allocation failed (or its size overflows) */
};

/* A short name for an error code ("bad argument", ...); never NULL. */
const char *gpt_strerror(int code);

/*
 * gpt_config - Megatron's GPT hyperparameters plus this rank's place in the
 * TP x PP grid.  Start from gpt_config_init() (Megatron's defaults), set the
 * required fields, then gpt_config_check().
 */
typedef struct gpt_config {
    int num_layers;           /* L, --num-layers (all stages together); required */
    int hidden_size;          /* C, --hidden-size; required */
    int num_heads;            /* NH, --num-attention-heads; C % NH == 0; required */
    int ffn_hidden_size;      /* --ffn-hidden-size; 0: 4*C */
    int max_position_embeddings; /* maxT, --max-position-embeddings; required */
    int vocab_size;           /* the tokenizer's vocabulary (GPT-2: 50257); required */
    int make_vocab_size_divisible_by; /* default 128; the padding multiple is this x TP */
    int untie_embeddings;     /* --untie-embeddings-and-output-weights; default 0 (tied) */
    float init_method_std;    /* --init-method-std, default 0.02; output projections /sqrt(2L) */
    float layernorm_eps;      /* --norm-epsilon, default 1e-5 */
    uint64_t seed;            /* --seed, default 1234: the initialisation stream (see gpt_init_normal) */
    int tp_size, tp_rank;     /* default 1, 0 */
    int pp_size, pp_rank;     /* default 1, 0 */
    int act_slots;            /* micro-batches whose activations are kept; 0 or 1: one */
    const mds_backend *backend; /* where tensors live and ops run; NULL: mds_backend_cpu() */
    int dtype;                /* working weights and activations: MDS_F32 (default), MDS_BF16 (--bf16),
                                 MDS_F16 (--fp16); masters, optimizer state, losses and norm
                                 statistics stay fp32 */
    int grad_dtype;           /* main gradients: MDS_F32 (default; always with bf16), or MDS_F16
                                 (--fp16 without --accumulate-allreduce-grads-in-fp32) */
    /* the Llama family (Megatron's flags); the defaults are GPT-2's */
    int position_embedding;   /* enum gpt_position: learned absolute (default), rope, none */
    double rotary_base;       /* --rotary-base, default 10000 */
    double rotary_percent;    /* --rotary-percent, default 1.0: rot = int(hs * percent), even */
    int rotary_interleaved;   /* --rotary-interleaved: pairs (2i, 2i+1) instead of (i, i + rot/2) */
    int apply_layernorm_1p;   /* --apply-layernorm-1p: norm weights w used as 1 + w, initialised to 0 */
    int embed_layernorm;      /* --embed-layernorm (bigscience's Megatron-DeepSpeed): a LayerNorm of the
                                 word embeddings before the positions are added (see below) */
    double rope_scaling_factor; /* --use-rope-scaling --rope-scaling-factor (Llama 3.1); 0: none */
    int normalization;        /* enum gpt_norm: LayerNorm (default) or RMSNorm (no bias) */
    int swiglu;               /* --swiglu: FC1 is [gate | up] of ffn width each, silu(gate) * up */
    int num_query_groups;     /* --num-query-groups G (grouped-query attention); 0: = num_heads */
    int add_bias_linear;      /* default 1; --disable-bias-linear: no bias in QKV, proj, FC1, FC2 */
    float hidden_dropout;     /* --hidden-dropout: embedding, attention and MLP outputs; default 0 here
                                 (mdstrain passes Megatron's 0.1) */
    float attention_dropout;  /* --attention-dropout: the attention probabilities; default 0 here */
    /* full activation recomputation (Megatron's --recompute-granularity full) */
    int recompute_method;     /* enum gpt_recompute: none (default), uniform, block */
    int recompute_num_layers; /* --recompute-num-layers N >= 1 with uniform or block (see below) */
    int sequence_parallel;    /* --sequence-parallel (see below); ignored when tp_size is 1 */
} gpt_config;

/*
 * Sequence parallelism (Megatron's --sequence-parallel, Korthikanti et al.
 * 2022), with tp_size > 1 and T % tp_size == 0: the tensors outside the
 * tensor-parallel linears (the embedding output, the LayerNorm/RMSNorm
 * inputs and outputs with their statistics, the attention and MLP outputs
 * after dropout, the residual stream, the final norm, the recomputation
 * checkpoints and the stage input/output) hold only this rank's Ts = T / TP
 * tokens of each sequence, the global tokens [t0, t0 + Ts) with t0 =
 * tp_rank Ts, as (B, Ts, C).  Forward: an all-gather along the sequence
 * before each column-parallel linear (QKV, FC1, the output layer) and a
 * reduce-scatter after each row-parallel one (attention projection, FC2)
 * and after the vocab-parallel embedding, in place of the all-reduces;
 * norms, dropout (masks keyed by global tokens) and residual adds run on
 * the slice.  Pipeline stages exchange (B, Ts, C) slices both ways.
 * Backward: the linears' weight gradients need their full inputs, which are
 * all-gathered from the kept slices (Megatron re-gathers them too); the
 * residual stream's gradient is kept whole, the column-parallel linears'
 * input gradients are all-reduced, and the norms' backward runs over the
 * whole sequence on gathered inputs and statistics.  Megatron instead
 * reduce-scatters there and all-reduces the norm weight gradients computed
 * on slices; that would change the order in which the norms' weight
 * gradients are summed (the kernels sum all B T rows in one double
 * accumulator), so this keeps the full-sequence sums: losses, gradients and
 * checkpoints are bitwise those without sequence parallelism, and the
 * stored activations outside the linears shrink by TP (the shared
 * full-sequence scratch of the gathers is counted in gpt_activation_bytes).
 * The collectives' sums run in rank order like the all-reduce's.
 */

/*
 * Full recomputation, Megatron's _checkpointed_forward per pipeline stage of
 * Ll layers: uniform checkpoints the input of every chunk of N consecutive
 * layers (the last chunk may be shorter; N >= Ll: one chunk) and recomputes
 * whole chunks; block checkpoints the input of each of the first min(N, Ll)
 * layers one by one and keeps the activations of the others.  A recomputed
 * layer's activations live in one working set of a chunk's layers shared by
 * every slot (block with kept layers: the slot's last kept layer, whose
 * backward has run by the time a recomputed layer's does); a slot keeps only
 * the output of each chunk (the next chunk's input; the first chunk's input
 * is the stage input).  gpt_backward reruns a
 * chunk's forward, with the same dropout masks and TP collectives, just
 * before its backward, so gradients are bitwise those without recomputation.
 * Selective recomputation (core attention) is what the attention op does
 * anyway: it stores no T x T probabilities, only the (B, NH, T) log-sum-exp.
 */
/*
 * The embedding LayerNorm (bigscience-workshop/Megatron-DeepSpeed's
 * --embed-layernorm, megatron/mpu/layers.py VocabParallelEmbedding): the
 * first stage computes  LN(wte[token]) + wpe[position],  then the embedding
 * dropout.  The norm sits inside the vocab-parallel embedding, after its
 * all-reduce, so its weight and bias (C each, ones and zeros, outside
 * weight decay as every LayerNorm) are replicated over TP and held by the
 * first pipeline stage only (the last stage's tied copy of wte has none);
 * every TP rank computes the same gradient for them, as for the other
 * norms.  Its epsilon is GPT_EMBED_LN_EPS whatever --norm-epsilon says:
 * bigscience builds it as LayerNorm(hidden) with MixedFusedLayerNorm's
 * default.  A LayerNorm always: with RMSNorm or apply_layernorm_1p no
 * reference defines it, so gpt_config_check refuses those.
 */
#define GPT_EMBED_LN_EPS 1e-5f

enum gpt_recompute { GPT_RECOMPUTE_NONE = 0, GPT_RECOMPUTE_UNIFORM = 1, GPT_RECOMPUTE_BLOCK = 2 };

enum gpt_position { GPT_POS_LEARNED = 0, GPT_POS_ROPE = 1, GPT_POS_NONE = 2 };
enum gpt_norm { GPT_NORM_LAYERNORM = 0, GPT_NORM_RMSNORM = 1 };

/* Megatron's default FFN width: 4 C, or with --swiglu int(4 C 2/3 / 64) 64. */
int gpt_default_ffn(int hidden_size, int swiglu);

/*
 * gpt_tp_ops - the tensor-parallel group's collectives, given by the
 * caller (train/comm.h); in place over n floats, identical results on every
 * rank of the group.  Unused when tp_size is 1.  A failure must not return
 * (the trainer aborts the job).
 */
typedef struct gpt_tp_ops {
    void *ctx;
    void (*allreduce_sum)(void *ctx, float *buf, size_t n);
    void (*allreduce_max)(void *ctx, float *buf, size_t n);
    /* sequence parallelism only: out (chunk floats) = the rank-ordered sum
       over ranks of their in[tp_rank chunk, (tp_rank + 1) chunk); and out
       (tp_size chunk floats) = every rank's in (chunk floats), in rank order */
    void (*reduce_scatter)(void *ctx, float *out, const float *in, size_t chunk);
    void (*allgather)(void *ctx, float *out, const float *in, size_t chunk);
} gpt_tp_ops;

void gpt_config_init(gpt_config *cfg);

/*
 * gpt_config_check() - validate cfg (required fields, Megatron's
 * divisibility rules for TP and PP, sizes that fit int and size_t).
 * @return : 0, or GPT_ERR_ARG with a message in err (lowercase, no stop).
 */
int gpt_config_check(const gpt_config *cfg, char *err, size_t errlen);

/* The vocabulary padded as Megatron pads it: up to a multiple of
 * make_vocab_size_divisible_by * tp_size (GPT-2 50257 -> 50304 at TP=1). */
int gpt_padded_vocab_size(const gpt_config *cfg);

/* Parameter tensors, in storage order (llm.c's order, plus the untied output
 * layer).  A tensor that this rank does not hold, or that the architecture
 * lacks (wpe with RoPE, biases with --disable-bias-linear, norm biases with
 * RMSNorm, the embedding LayerNorm without embed_layernorm), has size 0.
 * The embedding LayerNorm comes last so that the storage (and the
 * initialisation streams) of the models without it stay as they were. */
enum gpt_param_id {
    GPT_WTE, GPT_WPE, GPT_LN1W, GPT_LN1B, GPT_QKVW, GPT_QKVB, GPT_ATTPROJW, GPT_ATTPROJB,
    GPT_LN2W, GPT_LN2B, GPT_FCW, GPT_FCB, GPT_FCPROJW, GPT_FCPROJB, GPT_LNFW, GPT_LNFB,
    GPT_OUTW, GPT_EMBLNW, GPT_EMBLNB, GPT_NUM_PARAMS
};

/* Pointers into one allocation; shapes are this rank's (local) shapes with
 * Ll = local layers, Vl = Vp / tp, Cl = C / tp (query width), KVl = G hs / tp
 * (key/value width; = Cl without grouped-query attention), QKVl = Cl + 2 KVl,
 * Fl = ffn / tp, FC1l = Fl, or 2 Fl with SwiGLU ([gate | up]). */
typedef struct gpt_params {
    float *wte;      // (Vl, C)     word embeddings; also the output layer when tied
    float *wpe;      // (maxT, C)   learned absolute position embeddings (none with RoPE)
    float *ln1w;     // (Ll, C)
    float *ln1b;     // (Ll, C)
    float *qkvw;     // (Ll, QKVl, C)  column-parallel; local rows [q | k | v]
    float *qkvb;     // (Ll, QKVl)
    float *attprojw; // (Ll, C, Cl)    row-parallel
    float *attprojb; // (Ll, C)
    float *ln2w;     // (Ll, C)
    float *ln2b;     // (Ll, C)
    float *fcw;      // (Ll, FC1l, C)  column-parallel
    float *fcb;      // (Ll, FC1l)
    float *fcprojw;  // (Ll, C, Fl)    row-parallel
    float *fcprojb;  // (Ll, C)
    float *lnfw;     // (C)
    float *lnfb;     // (C)
    float *outw;     // (Vl, C)     only with untie_embeddings, else size 0
    float *emblnw;   // (C)         embedding LayerNorm (embed_layernorm, first stage)
    float *emblnb;   // (C)
} gpt_params;

/* Activations of one micro-batch (B, T), plus the backward's scratch; with
 * sequence parallelism the tensors marked Ts hold (B, Ts) tokens (else
 * Ts = T).  Lk
 * is the number of layers whose activations are kept (Ll without
 * recomputation); the per-layer tensors of layer l >= Ll - Lk are at index
 * l - (Ll - Lk).  The working set of recomputed layers (gpt_model.work) has
 * the same per-layer tensors for a chunk's layers. */
typedef struct gpt_acts {
    float *encoded;   // (B, Ts, C)
    void *ln1;        // (Lk, B, Ts, C)  stored as sd (gpt_model)
    float *ln1_mean;  // (Lk, B, Ts)   LayerNorm only
    float *ln1_rstd;  // (Lk, B, Ts)
    void *qkv;        // (Lk, B, T, QKVl)  q and k rotated with RoPE; stored as act_dtype
    void *atty;       // (Lk, B, T, Cl)  stored as sd
    float *att_lse;   // (Lk, B, NHl, T)
    void *attproj;    // (Lk, B, Ts, C)  stored as pd
    float *residual2; // (Lk, B, Ts, C)
    void *ln2;        // (Lk, B, Ts, C)  stored as sd
    float *ln2_mean;  // (Lk, B, Ts)   LayerNorm only
    float *ln2_rstd;  // (Lk, B, Ts)
    void *fch;        // (Lk, B, T, FC1l)  stored as act_dtype
    void *fch_gelu;   // (Lk, B, T, Fl)  GELU, or SwiGLU, of fch; stored as sd
    void *fcproj;     // (Lk, B, Ts, C)  stored as pd
    float *residual3; // (Lk, B, Ts, C)
    void *lnf;        // (B, Ts, C)  stored as sd
    float *lnf_mean;  // (B, Ts)        LayerNorm only
    float *lnf_rstd;  // (B, Ts)
    void *logits;     // (B, T, Vl)  stored as act_dtype; overwritten in place by dlogits in backward
    float *losses;    // (B, T)
    float *maxes;     // (B, T)
    float *sumexp;    // (B, T)
    float *tlogits;   // (B, T)
    float *mask;      // (B, T)  the loss mask of the last forward
    float *dlosses;   // (B, T)
    float *dresidual; // (B, T, C)   backward: the residual stream's gradient
    float *dln;       // (B, T, C)   backward: gradient into a LayerNorm output
    void *dqkv;       // (B, T, QKVl)  stored as act_dtype
    void *datty;      // (B, T, Cl)  stored as act_dtype
    void *dfch;       // (B, T, FC1l)  stored as act_dtype
    void *dfch_gelu;  // (B, T, Fl)  stored as act_dtype
    float *ckpt;      // (nck, B, Ts, C)  recomputation: chunk k's output (chunk k + 1's input)
    float *dgrad_in;  // (B, Ts, C)  sequence parallelism: the stage's gradient slice received/sent
    float *emb;       // (B, Ts, C)  embed_layernorm: the word embeddings, its input
    float *emb_mean;  // (B, Ts)
    float *emb_rstd;  // (B, Ts)
    int *inputs;      // (B, T)
    int *targets;     // (B, T)
} gpt_acts;

#define GPT_NUM_ACTS 37   /* tensors in gpt_acts (inputs/targets apart) */

/* Names of the parameter tensors ("wte", "wpe", "ln1w", ...), for messages. */
extern const char *const gpt_param_names[GPT_NUM_PARAMS];

/* A piece of the AdamW state: the flat elements [lo, hi), whose moments sit
 * at slots [at, at + hi - lo) (gpt_set_optimizer_pieces). */
typedef struct gpt_opt_piece {
    size_t lo, hi, at;
} gpt_opt_piece;

typedef struct gpt_model {
    gpt_config cfg;
    const mds_backend *be;        /* cfg.backend, or the CPU */
    /* local dimensions */
    int L, C, NH, F, maxT, Vp;    /* global: layers, hidden, heads, ffn, positions, padded vocab */
    int Ll, layer_begin;          /* this stage's layers [layer_begin, layer_begin + Ll) */
    int Cl, NHl, Fl, Vl, v_start; /* this TP rank's attention width, heads, ffn, vocab rows */
    int hs, G, Gl, KVl, QKVl, FC1l; /* head size; query groups (global, local); widths above */
    int rot;                      /* rotary channels per head (0 without RoPE) */
    float *rope_memory;           /* (2, T, rot/2): the cos and sin tables (backend memory) */
    float *ln1p_memory;           /* (2, C) with apply_layernorm_1p: ones, then the current norm's 1 + w */
    int first_stage, last_stage;
    const gpt_tp_ops *tp;         /* the TP collectives; must be set when tp_size > 1 */
    /* when set, gpt_backward calls it after local layer l's backward: the
       layer's slices of the tensors GPT_LN1W..GPT_FCPROJB are final for
       this micro-batch (the trainer's --overlap-grad-reduce reduces them
       while the layers below compute) */
    void (*layer_grads_done)(void *ctx, int l);
    void *layer_grads_ctx;
    /* when set, gpt_forward calls it before it first reads the parameters
       of the embedding (l = -1), of local layer l, and of the final norm and
       output layer (l = Ll): the trainer's --overlap-param-gather waits
       there for the bucket that holds them (a recomputed layer's forward in
       the backward does not call it) */
    void (*params_needed)(void *ctx, int l);
    void *params_needed_ctx;
    /* parameters, gradients, optimizer state: one allocation each */
    size_t param_sizes[GPT_NUM_PARAMS];   /* elements */
    int param_dtype[GPT_NUM_PARAMS];      /* working dtype of each tensor (enum mds_dtype) */
    size_t num_params;            /* this rank's parameter count */
    float *params_memory;         /* working weights, flat, in param_sizes order */
    float *master_memory;         /* fp32 master weights (== params_memory while dtype is fp32) */
    float *grads_memory;          /* fp32 gradients, flat */
    float *opt_memory;            /* AdamW m then v, each opt_slots floats */
    gpt_opt_piece *opt_pieces;    /* the flat elements whose AdamW state this rank keeps, by slot */
    size_t opt_npieces, opt_slots;
    gpt_opt_piece opt_whole;      /* the one piece [0, num_params) before gpt_set_optimizer_pieces */
    gpt_params params, grads;
    float *m, *v;                 /* AdamW state, slot 0 onwards */
    /* activations for micro-batches of B x T */
    int B, T;
    int sp, Ts, t0;               /* sequence parallelism: on, tokens per rank, first global token */
    size_t act_sizes[GPT_NUM_ACTS];   /* floats (the stored tensors': their bytes / 4, rounded up) */
    /* dtype of the activations (enum mds_dtype); the outputs of the
       matmuls before attention and the activation (qkv, fch), the logits
       (and, in place, their gradient), the MLP's activation gradients
       (dfch_gelu, dfch), attention's out's (datty) and attention's
       own (dqkv) are stored in it (ops that take
       a stored dtype write and read them; no gather moves them); the
       others are fp32 arrays rounded to it, but for the tensors stored as
       sd and gd (below) */
    int act_dtype;
    /* The tensors only matmuls read (and attention's backward, its out):
       the norms' outputs, GELU's or SwiGLU's, attention's.  A 16-bit model
       stores them in its dtype (backend.h's stored dtypes: the matmuls
       take them without a copy); fp32 otherwise, and where sequence
       parallelism's gather of B x Ts x C of them would be an odd number
       of 16-bit values (the gather moves floats). */
    int sd;
    /* dln's: the gradient the matmuls hand the norms' backward, stored as
       act_dtype (written by the matmul, read by the norm) but where TP
       sums it between them (then fp32: the sum is in fp32, rounded once).
       datty, attention's out's gradient (never summed), is act_dtype. */
    int gd;
    /* attproj's and fcproj's: the row-parallel projections' outputs, which
       the residual adds read, stored as act_dtype where nothing between
       reads them as floats (no TP sum, no hidden dropout), else fp32 */
    int pd;
    /* dresidual's, the residual stream's gradient (the norms' backward add
       into it, the projections' backward and the embedding's read it):
       act_dtype where it stays within this rank's backward as a whole (no
       pipeline sends, no sequence-parallel gather, no hidden dropout,
       which runs on floats, no embedding LayerNorm, which takes it as fp32
       scratch), else fp32 */
    int rd;
    size_t num_acts;              /* elements per slot */
    int slots, slot;              /* activation slots, the current one */
    float *acts_memory;           /* slots x num_acts floats */
    int *tokens_memory;           /* slots x (inputs, targets) */
    gpt_acts acts;                /* the current slot's tensors */
    /* full recomputation: local layers [0, rc_layers) are recomputed in
       chunks of rc_chunk layers (nck chunks); the others' are kept */
    int rc_layers, rc_chunk, nck;
    int work_in_slot;             /* the working set is the slot's last kept layers (block with kept layers) */
    size_t num_work;              /* elements of the shared working set */
    float *work_memory;           /* the working set of one chunk (shared by the slots) */
    gpt_acts work;                /* its per-layer tensors (rc_chunk layers; the rest NULL) */
    size_t num_sp;                /* elements of the sequence-parallel scratch (0 without) */
    float *sp_full, *sp_full2;    /* (B, T, C) each: gathered inputs, row-parallel outputs */
    float *sp_perm;               /* (TP, B, Ts, C): the collectives' rank-major layout */
    float *sp_mean, *sp_rstd;     /* (B, T) each: gathered norm statistics */
    float num_tokens;             /* sum of the mask in the last forward */
    int step;                     /* AdamW steps taken (t of the bias correction) */
    double *dsum;                 /* backend scratch: the reductions' outputs (2 doubles) */
    float *host_mask;             /* host staging: (B, T) loss mask */
    uint64_t *keys_memory;        /* (slots, B) dropout row keys (backend memory) */
    int *slot_dropout;            /* (slots) host: the slot's forward ran with dropout */
    /* gpt_set_loss_grad's request for the next forward (ce_scale < 0: none),
       and the backward scale whose logits' gradient the last forward wrote
       with the loss (ce_done < 0: none; gpt_backward then checks its scale) */
    float ce_scale, ce_done;
    int ce_per_token;
} gpt_model;

/*
 * gpt_model_init() - allocate the tables for micro-batches of B x T
 * (T <= max_position_embeddings) and initialise the weights as Megatron
 * does: every weight matrix and both embeddings ~ N(0, init_method_std),
 * the attention and FC2 output projections ~ N(0, init_method_std /
 * sqrt(2 L)) (Megatron's scaled_init_method_normal), biases 0, LayerNorm
 * weights 1 and biases 0.  Gradients and AdamW state start at 0.
 * Values come from gpt_init_normal(), so they depend on the seed and on each
 * element's GLOBAL coordinates only: a TP shard or PP stage holds exactly the
 * slice of the TP = PP = 1 model.  On failure the model is left empty (safe
 * to pass to gpt_model_free()).
 * @return : 0, GPT_ERR_ARG (config or B, T), GPT_ERR_NOMEM.
 */
int gpt_model_init(gpt_model *m, const gpt_config *cfg, int B, int T, char *err, size_t errlen);

/* Free every allocation; accepts a zeroed or already freed model. */
void gpt_model_free(gpt_model *m);

/*
 * gpt_init_normal() - the initialisation RNG, documented so that other
 * implementations can reproduce it (it does not equal PyTorch's):
 *   x = splitmix64(seed ^ splitmix64(tensor_id * 2^40 + layer * 2^20 + 1)
 *                  + (row * ncols_global + col))   (64-bit wrap-around)
 *   u1 = ((x >> 40) + 0.5) / 2^24,  u2 = ((x >> 16 & 0xffffff) + 0.5) / 2^24
 *   n = sqrt(-2 ln u1) cos(2 pi u2)   (Box-Muller, in double, then * std)
 * with splitmix64(z) = the finaliser of z + 0x9e3779b97f4a7c15 (Vigna),
 * tensor_id the enum gpt_param_id, layer the GLOBAL layer (0 for non-layer
 * tensors), row/col the element's global coordinates in the TP = 1 tensor
 * and ncols_global its global width.
 */
double gpt_init_normal(uint64_t seed, int tensor_id, int layer, uint64_t row, uint64_t col,
                       uint64_t ncols_global);

/* The bytes allocated for activations: every slot's tensors (with the
 * backward's scratch and the recomputation checkpoints) and the working set
 * of a recomputed chunk.  On the CPU every tensor is stored as fp32 (16-bit
 * formats are rounded in place), so these are 4-byte elements. */
size_t gpt_activation_bytes(const gpt_model *m);

/* Point m->acts at activation slot s (0 <= s < m->slots). */
void gpt_set_slot(gpt_model *m, int s);

/*
 * gpt_set_dropout_rows() - the training positions (B, host memory) of the
 * rows of the current slot's next forward: with them the forward and its
 * backward apply dropout (keyed by cfg.seed and the positions); with NULL
 * (evaluation) they do not.  Call before each gpt_forward that should drop.
 */
void gpt_set_dropout_rows(gpt_model *m, const uint64_t *positions);

/* The elements of a stage's input, output and gradient transfer: B T C, or
 * B Ts C with sequence parallelism. */
size_t gpt_stage_elems(const gpt_model *m);

/* The current slot's stage input (B, Ts, C): the embedding output on the
 * first stage, what the previous stage sent on the others (write it there
 * before gpt_forward). */
float *gpt_stage_input(gpt_model *m);

/* The current slot's stage output (B, Ts, C) after gpt_forward on a stage
 * before the last: the hidden states to send to the next stage. */
const float *gpt_stage_output(const gpt_model *m);

/* The current slot's gradient buffer of gpt_stage_elems() floats: before
 * gpt_backward on a stage before the last, write the gradient received from
 * the next stage here; after it, on a stage after the first, it holds the
 * gradient of the stage input to send back (with sequence parallelism: this
 * rank's slice of each). */
float *gpt_stage_dgrad(gpt_model *m);

/* Nonzero when parameter tensor id takes weight decay (Megatron's decay
 * group: not biases, not LayerNorm weights; embeddings decay). */
int gpt_param_decays(int id);

/*
 * gpt_forward() - forward one micro-batch in the current slot: inputs and
 * targets (B, T) token ids (< vocab; targets may be anything where mask is
 * 0), mask (B, T) the loss mask or NULL (all ones).  Fills the activations
 * and returns in *loss_sum the sum of mask * per-token loss (summed in
 * double) and in *num_tokens the sum of the mask.  Megatron's micro-batch
 * loss is loss_sum / num_tokens.  Under PP, inputs are read on the first
 * stage only and the loss is computed on the last (elsewhere *loss_sum is 0;
 * *num_tokens is the mask sum on every stage).
 * @return : 0, or GPT_ERR_ARG (a token id out of range).
 */
int gpt_forward(gpt_model *m, const int *inputs, const int *targets, const float *mask,
                double *loss_sum, double *num_tokens);

/*
 * gpt_set_loss_grad() - the next gpt_forward is followed by
 * gpt_backward(m, per_token ? scale * num_tokens : scale), with num_tokens
 * the mask sum that forward returns, and nothing reads the logits between:
 * the forward may then write the logits' gradient with the loss (the
 * backend's crossentropy_fused; one activation slot and one
 * tensor-parallel rank, where nothing is rescaled between), and that
 * backward starts from it.  The same bits as the two apart.  For the next
 * gpt_forward only; gpt_backward with another scale after it is a bug, and
 * aborts.
 */
void gpt_set_loss_grad(gpt_model *m, float scale, int per_token);

/* Zero every gradient (once per step, before the first micro-batch). */
void gpt_zero_grad(gpt_model *m);

/*
 * gpt_backward() - add the gradients of  scale * loss_sum / num_tokens  of
 * the last gpt_forward() (Megatron's masked mean; scale = 1 / number of
 * micro-batches under accumulation).  A micro-batch with no unmasked token
 * contributes nothing (Megatron would produce NaN).  Overwrites the logits.
 */
void gpt_backward(gpt_model *m, float scale);

/* The L2 norm of this rank's counted gradients (gpt_grad_sq_range over the
 * whole buffer, then the square root).  With TP = PP = 1 every tensor
 * counts and that is the global norm; otherwise see below. */
double gpt_grad_norm(const gpt_model *m);

/*
 * Nonzero when tensor id counts towards the global gradient norm on this
 * rank: TP-replicated tensors (position embedding, LayerNorms, row-parallel
 * biases) on TP rank 0 only, and the word embedding's copy on the last
 * stage (tied, PP > 1) not at all, as Megatron's clip_grad_norm_ does; then
 * the sum of the ranks' squares over the whole model-parallel group is the
 * square of the global norm.
 */
int gpt_param_counts_in_norm(const gpt_model *m, int id);

/*
 * The sum of squares of the counted gradients whose flat index (in the
 * param_sizes order) lies in [lo, hi); g points at element lo of those
 * gradients in backend memory (m->grads_memory + lo for the whole buffer,
 * or a distributed optimizer's shard).  Each tensor's part is one
 * global_norm_squared op; the parts are added in tensor order.
 */
double gpt_grad_sq_range(const gpt_model *m, const float *g, size_t lo, size_t hi);

/* gpt_grad_sq_range over the optimizer's pieces, g holding each piece's
 * gradients at its slot (a distributed optimizer's shard), piece by piece. */
double gpt_grad_sq_shard(const gpt_model *m, const float *g);

/*
 * The zeros among the counted elements of gpt_grad_sq_range's range, each
 * taken as float(g x scale) (a clipping factor, 1 for none), counted on the
 * host a chunk at a time (Megatron's count_zeros_fp32 after clipping, for
 * --log-num-zeros-in-grad); the _shard form as gpt_grad_sq_shard.
 * @return : the count, or -1 when the host buffer cannot be had.
 */
int64_t gpt_grad_zeros_range(const gpt_model *m, const float *g, size_t lo, size_t hi, float scale);
int64_t gpt_grad_zeros_shard(const gpt_model *m, const float *g, float scale);

/*
 * gpt_set_optimizer_pieces() - keep the AdamW state of n pieces of the flat
 * elements only (a distributed optimizer's shard), zeroed, instead of all of
 * them: piece k is [lo, hi) (lo <= hi <= num_params) at slots [at, at + hi -
 * lo) of m and v, within `slots`; pieces do not overlap.  Slots no piece
 * covers (a bucket's padding) are kept but never used.  Collective
 * nothing; call before training.  gpt_set_optimizer_shard is one piece [lo,
 * hi) at slot 0.
 * @return : 0, GPT_ERR_ARG (a bad piece), GPT_ERR_NOMEM (message in err).
 */
int gpt_set_optimizer_pieces(gpt_model *m, const gpt_opt_piece *pieces, size_t n, size_t slots, char *err,
                             size_t errlen);
int gpt_set_optimizer_shard(gpt_model *m, size_t lo, size_t hi, char *err, size_t errlen);

/*
 * gpt_update() - one AdamW step over the elements of the optimizer's pieces
 * in every tensor they touch, weight_decay applied only to the decay group,
 * gradients multiplied by grad_scale (the clipping factor from
 * global_norm_clip_scale()).  The word embeddings and the untied output
 * layer step at lr_embed (Megatron's --decoupled-lr group, its
 * is_embedding_or_output_parameter; pass lr when there is none), every other
 * tensor at lr.  The gradients are the model's own (grads_memory).
 * Increments m->step first.
 */
void gpt_update(gpt_model *m, float lr, float lr_embed, float beta1, float beta2, float eps,
                float weight_decay, float grad_scale);

/*
 * gpt_update_shard() - the same step with each piece's gradients taken from
 * g at the piece's slot (backend memory; a reduce-scattered shard) instead.
 */
void gpt_update_shard(gpt_model *m, const float *g, float lr, float lr_embed, float beta1, float beta2, float eps,
                      float weight_decay, float grad_scale);

/* What gpt_state_read/gpt_state_write move: the sections of a checkpoint. */
enum gpt_state { GPT_STATE_WEIGHTS, GPT_STATE_ADAM_M, GPT_STATE_ADAM_V };

/*
 * gpt_state_read() - copy n fp32 values of a state section, from flat
 * element off, into dst (host memory): the master weights, or the AdamW
 * moments ([off, off + n) within one of the optimizer's pieces).  gpt_state_write() is the
 * reverse (writing the weights updates the master and the working copy).
 * @return : 0, or GPT_ERR_ARG when [off, off + n) is outside the section.
 */
int gpt_state_read(const gpt_model *m, int which, size_t off, float *dst, size_t n);
int gpt_state_write(gpt_model *m, int which, size_t off, const float *src, size_t n);

/* gpt_state_write_pieces() - a moment (GPT_STATE_ADAM_M or _V) over all of
 * the optimizer's pieces, from the whole flat array `flat` (num_params
 * values, host memory: element i goes to the slot of flat index i), or
 * zeros when flat is NULL.  0, or GPT_ERR_ARG. */
int gpt_state_write_pieces(gpt_model *m, int which, const float *flat);

/* Model FLOPs of one training step (forward + backward) per token, counted
 * as Megatron HEAD's num_floating_point_operations does for GELU MLP and MHA
 * with causal-halved attention: 6 * (matmul weights incl. the logit layer)
 * + 6 * L * C * T.  Global (whole model), not per rank. */
double gpt_flops_per_token(const gpt_model *m);

#ifdef __cplusplus
}
#endif

#endif /* MDS_MODEL_H */
