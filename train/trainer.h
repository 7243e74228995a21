/*
 * trainer.h - the training engine of mdstrain: Megatron's learning-rate
 * schedule, the parallel layout (rank order and communicator groups), one
 * iteration's micro-batches under Megatron's schedules (1F1B across
 * pipeline stages), the gradient reduction over data-parallel ranks with or
 * without the distributed optimizer (ZeRO-1), the clipped AdamW update,
 * evaluation, and checkpoints of every rank.  docs/architecture.md ("mdstrain
 * in parallel") draws the design.
 *
 * The engine owns its buffers (batches, the distributed optimizer's padded
 * gradient and shard); the model (model.h) owns the tensors and the AdamW
 * state, reached only through model.h's functions.  The program
 * (programs/mdstrain.c) parses flags, prints, and decides what to do with
 * errors.
 *
 * What it deliberately does not do: print, exit, parse flags, build the data
 * pipeline (it reads samples from the caller's ds_pipeline), mixed precision
 * and loss scaling (coming), interleaved pipeline stages.
 *
 * Errors: functions return 0 or -1 with a one-line message (naming the rank
 * and the collective, the sample or the file) in t->err.  The one exception
 * is a failure inside a tensor-parallel collective that the model calls
 * mid-forward: it cannot return through the model, so it calls the
 * program's fatal() hook (trainer_config), which must not return.
 * Thread safety: one thread drives a trainer.
 */
#ifndef MDS_TRAINER_H
#define MDS_TRAINER_H

#include "checkpoint.h"
#include "comm.h"
#include "loss_scale.h"
#include "dataset.h"
#include "model.h"
#include "timers.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Megatron's learning-rate schedule ---------------------------------------- */

enum train_decay {
    TRAIN_DECAY_CONSTANT, TRAIN_DECAY_LINEAR, TRAIN_DECAY_COSINE, TRAIN_DECAY_INV_SQRT, TRAIN_DECAY_WSD,
    TRAIN_DECAY_COUNT
};
/* Megatron's names of the styles (--lr-decay-style, the scheduler's
 * lr_decay_style), indexed by enum train_decay; NULL-terminated. */
extern const char *const train_decay_names[TRAIN_DECAY_COUNT + 1];
/* WSD's annealing (--lr-wsd-decay-style), the same way. */
enum train_wsd { TRAIN_WSD_EXPONENTIAL, TRAIN_WSD_LINEAR, TRAIN_WSD_COSINE, TRAIN_WSD_MINUS_SQRT };
extern const char *const train_wsd_names[5];

/* Megatron's OptimizerParamScheduler, in samples; with Megatron-DeepSpeed's
 * token schedule when warmup_tokens or decay_tokens is >= 0. */
typedef struct train_schedule {
    double max_lr, min_lr, init_lr, warmup_steps, decay_steps;
    int style;                       /* enum train_decay */
    double wsd_decay_steps;          /* WSD: the annealing's samples (--lr-wsd-decay-*); -1: none given */
    int wsd_style;                   /* enum train_wsd */
    double warmup_tokens, decay_tokens;   /* --lr-warmup-tokens, --lr-decay-tokens; -1: not given */
    double latch_tokens;             /* step warmup + token decay: tokens consumed when the warmup
                                        ended (train_rampup_warmup_tokens); -1 until the caller sets it */
} train_schedule;

/* The flags the schedule is made from (Megatron's and Megatron-DeepSpeed's names). */
typedef struct train_schedule_args {
    double lr, min_lr, lr_warmup_init;
    int decay_style;                  /* enum train_decay */
    int wsd_style;                    /* enum train_wsd; -1: not given (Megatron's default, exponential) */
    int have_wsd_iters, have_wsd_samples;
    uint64_t lr_wsd_decay_iters, lr_wsd_decay_samples;
    uint64_t global_batch_size;
    uint64_t train_iters, train_samples;           /* one of them nonzero */
    int have_decay_iters, have_decay_samples, have_warmup_fraction;
    uint64_t lr_decay_iters, lr_decay_samples, lr_warmup_iters, lr_warmup_samples;
    double lr_warmup_fraction;
    int have_decay_tokens, have_warmup_tokens;
    uint64_t lr_decay_tokens, lr_warmup_tokens;
} train_schedule_args;

/*
 * train_schedule_init() - Megatron's OptimizerParamScheduler.__init__ in
 * samples: with --train-samples the decay and warmup are in samples; with
 * --train-iters in iterations times the global batch; a warmup fraction is
 * of the decay length.  The token settings are copied (latch_tokens -1).
 * @return : 0, or -1 with a message in err (a zero decay length, a warmup
 *           not shorter than the decay: Megatron's asserts; a token decay
 *           without any warmup setting, a token warmup not shorter than the
 *           token decay: where Megatron-DeepSpeed fails).
 */
int train_schedule_init(train_schedule *s, const train_schedule_args *a, char *err, size_t errlen);

/*
 * train_schedule_lr() - OptimizerParamScheduler.get_lr after num_steps
 * samples: linear warmup from init_lr, then constant, linear or cosine decay
 * to min_lr.  The scheduler advances by the global batch after each step, so
 * iteration k (from 1) trains with lr(k-1)*G and Megatron logs lr(k*G).
 */
double train_schedule_lr(const train_schedule *s, double num_steps);

/*
 * train_schedule_lr_tokens() - Megatron-DeepSpeed's get_lr after num_steps
 * samples and num_tokens tokens (its scheduler reads the consumed tokens
 * before the iteration that just stepped: the caller passes them).  Token
 * warmup when warmup_tokens >= 0: lr = init + (max - init) tokens / warmup
 * while tokens <= warmup_tokens (Megatron-DeepSpeed has no init: 0); token
 * decay when decay_tokens >= 0: min after decay_tokens, else the decay style
 * over (tokens - warmup_tokens) / (decay_tokens - warmup_tokens).  A step
 * warmup with a token decay needs warmup_tokens set to the tokens consumed
 * when the warmup ended (train_rampup_warmup_tokens); the step warmup still
 * applies up to warmup_steps.  Without token settings it is
 * train_schedule_lr.
 */
double train_schedule_lr_tokens(const train_schedule *s, double num_steps, double num_tokens);

/* ---- DeepSpeed's learning-rate schedulers (a ds_config "scheduler") ------------ */

enum train_ds_sched { TRAIN_DS_NONE, TRAIN_DS_WARMUP_LR, TRAIN_DS_WARMUP_DECAY_LR };

/* DeepSpeed's WarmupLR and WarmupDecayLR (deepspeed/runtime/lr_schedules.py,
 * unchanged from v0.10.3 to v0.14.4) as their constructors keep them. */
typedef struct train_ds_schedule {
    int type;                         /* enum train_ds_sched */
    double min_lr, max_lr;            /* warmup_min_lr, warmup_max_lr */
    double warmup_num_steps;          /* max(2, warmup_num_steps), as the constructor stores it */
    double total_num_steps;           /* WarmupDecayLR's */
    int linear;                       /* warmup_type "linear"; else "log" */
    double last_batch_iteration;      /* the constructor's argument (-1) */
} train_ds_schedule;

/*
 * train_ds_schedule_lr() - get_lr() once last_batch_iteration is n >= 0:
 * min + (max - min) gamma, where during the warmup (n < W) gamma is
 * log(n + 1) / log(W) ("log", as 1/log(W) times log(n + 1)) or n / W
 * ("linear"); after it 1 (WarmupLR) or max(0, (T - n) / max(1, T - W))
 * (WarmupDecayLR).  DeepSpeed evaluates it only inside step(), after n is
 * set; a schedule whose step() was never called leaves the optimizer's
 * learning rate as it found it.
 */
double train_ds_schedule_lr(const train_ds_schedule *s, double n);

/* ---- Megatron's batch-size ramp-up -------------------------------------------- */

/* Megatron's RampupBatchsizeNumMicroBatchesCalculator (core
 * num_microbatches_calculator.py, before it became step schedules in April
 * 2026) for --rampup-batch-size START INCR SAMPLES; start 0 means a
 * constant global batch. */
typedef struct train_rampup {
    uint64_t start, incr, samples, global_batch_size;
    double samples_per_increment;     /* samples / ((G - start) / incr), a float as in Python */
} train_rampup;

/*
 * train_rampup_init() - checks Megatron's asserts (start, incr > 0, start
 * <= G, incr divides G - start) and the divisions Python would fail at
 * (start == G, samples == 0: ZeroDivisionError in Megatron).
 * @return : 0, or -1 with a message in err.
 */
int train_rampup_init(train_rampup *r, uint64_t start, uint64_t incr, uint64_t samples, uint64_t global_batch_size,
                      char *err, size_t errlen);

/* The global batch of the iteration that starts after `consumed` samples:
 * G once consumed > samples, else start + incr int(consumed / (samples /
 * increments)). */
uint64_t train_rampup_batch(const train_rampup *r, uint64_t consumed);

/*
 * train_rampup_train_iters() - Megatron's update_train_iters for
 * --train-samples with a ramp-up: iterations while consumed <= samples and
 * consumed <= train_samples (each adding that iteration's batch, so the
 * ramp may overshoot train_samples), then (train_samples - consumed) // G
 * more.  Without a ramp-up: train_samples // G.
 */
uint64_t train_rampup_train_iters(const train_rampup *r, uint64_t train_samples);

/*
 * train_rampup_consumed() - the samples consumed after k iterations
 * (*after) and after k - 1 (*before; 0 when k is 0), replaying the ramp.
 */
void train_rampup_consumed(const train_rampup *r, uint64_t k, uint64_t *before, uint64_t *after);

/*
 * train_rampup_warmup_tokens() - Megatron-DeepSpeed's "step/sample-wise
 * warmup + token-wise decay" latch: the tokens consumed before the
 * iteration whose step makes the scheduler's sample count exactly
 * warmup_steps (seq_length tokens per sample).
 * @return : 0 with *tokens, or -1 when no iteration ends exactly there
 *           (Megatron-DeepSpeed then fails with a TypeError).
 */
int train_rampup_warmup_tokens(const train_rampup *r, double warmup_steps, uint64_t seq_length, double *tokens);

/* ---- the parallel layout ------------------------------------------------------- */

/*
 * Megatron's rank order tp-dp-pp: rank = tp_rank + TP (dp_rank + DP pp_rank),
 * so TP groups are adjacent ranks.  Groups: tp (same dp, pp), dp (same tp,
 * pp), pp (same tp, dp), mp = the model-parallel group TP x PP (same dp; the
 * gradient norm), emb = the first and last stage of a pipeline (the tied
 * word embedding's gradient; a one-rank group elsewhere or with PP = 1).
 */
typedef struct train_layout {
    mds_comm *world, *tp, *dp, *pp, *mp, *emb;
    int rank, size, tp_size, pp_size, dp_size, tp_rank, pp_rank, dp_rank;
} train_layout;

/*
 * train_layout_init() - split world (kept, not owned) into the groups for
 * TP x PP model parallelism; DP = world size / (TP PP).  Collective.
 * @return : 0, or -1 with a message (a world size not divisible by TP PP is
 *           checked by the caller first; here only communication failures).
 */
int train_layout_init(train_layout *P, mds_comm *world, int tp_size, int pp_size, char *err, size_t errlen);
void train_layout_release(train_layout *P);      /* frees the groups, not world */
void train_layout_reset_stats(train_layout *P);  /* zero every group's counters */

/* ---- the engine ----------------------------------------------------------------- */

typedef struct trainer_config {
    uint64_t global_batch_size;       /* G: samples per iteration, all ranks together */
    int vocab_size;                   /* token ids must be below it */
    int dist_opt;                     /* --use-distributed-optimizer */
    int overlap_grad_reduce;          /* --overlap-grad-reduce (see plan_buckets) */
    int overlap_param_gather;         /* --overlap-param-gather (with dist_opt and overlap_grad_reduce) */
    size_t bucket_size;               /* --ddp-bucket-size: elements per bucket, at least */
    int per_token_loss;               /* --calculate-per-token-loss: gradients of the token sum / all tokens */
    float beta1, beta2, eps, weight_decay, clip_grad;
    double weight_decay_arg;          /* --weight-decay as given, which torch_dist checkpoints record
                                         (AdamW uses the float above); 0: take that float */
    train_loss_scaler scaler;         /* its initial state (disabled unless --fp16) */
    void (*fatal)(const char *msg);   /* a tensor-parallel collective failed; must not return */
    int no_save_optim;                /* --no-save-optim: torch_dist saves without AdamW and the scheduler */
    mds_timers *timers;               /* Megatron's timers (--timing-log-level), or NULL: with them, each
                                         trainer_backward_pass() is followed by trainer_update() (the
                                         optimizer timer runs from one into the other) */
} trainer_config;

typedef struct trainer {
    gpt_model *m;
    const train_layout *P;
    const ds_pipeline *data;
    trainer_config cfg;
    uint64_t nmicro;                  /* micro-batches per data-parallel rank and iteration */
    gpt_tp_ops tp_ops;                /* the model's TP collectives, over P->tp */
    /* host batch of one micro-batch */
    int *inputs, *targets;            /* (B, T) */
    float *mask;                      /* (B, T) */
    int64_t *tok, *lab;               /* (T) scratch */
    float *lm;                        /* (T) */
    /* The data-parallel buckets (trainer.c, "Data-parallel buckets"):
       slices of the flat gradients packed into `pack` (backend memory)
       bucket by bucket.  Without the distributed optimizer they exist only
       with --overlap-grad-reduce (the layers' buckets, all-reduced while
       the backward goes on); with it always: one bucket of everything, or
       with --overlap-grad-reduce the layers' buckets and one of the rest,
       each padded to dp * chunk and reduce-scattered into gshard (chunk
       slots per bucket): this rank's shard, whose pieces are the model's
       optimizer pieces. */
    struct dp_bucket *bk;
    size_t nbk;
    size_t *sl_off, *sl_len, *sl_pack, nsl;   /* slice s: flat offset, length, place in pack */
    size_t *layer_sl;                 /* the first slice of local layer l (overlapped buckets) */
    size_t layer_nsl;                 /* slices per layer */
    float *pack, *gshard;
    size_t slots;                     /* gshard's floats: the buckets' chunks */
    int overlap;                      /* buckets started by the backward's hook */
    int param_gather;                 /* buckets' all-gathers waited for by the forward's hook */
    size_t gathers_left;              /* of the last step's all-gathers, those not yet unpacked */
    int *layer_bk;                    /* the bucket of local layer l */
    char overlap_err[512];            /* a start that failed in the backward's hook; "" none */
    double ls, nt;                    /* the last schedule's loss and mask sums (last stage) */
    train_loss_scaler scaler;         /* the live loss scale */
    int found_inf;                    /* the last backward pass overflowed (fp16): skip its update */
    char err[1024];
} trainer;

/*
 * trainer_init() - the engine for model m (built for this rank of P, with
 * cfg.act_slots = trainer_act_slots()), reading samples from data.  With the
 * distributed optimizer the model's AdamW state is cut to this rank's shard.
 * @return : 0, or -1 with t->err (memory).
 */
int trainer_init(trainer *t, gpt_model *m, const train_layout *P, const ds_pipeline *data,
                 const trainer_config *cfg);
void trainer_release(trainer *t);

/* --overlap-param-gather: finish the last step's all-gathers (the forward's
 * hooks finish them as it needs them; evaluation, checkpoints and the next
 * step call this themselves).  0, or -1 with t->err.  A collective on a
 * group that shares ranks with the data-parallel one (the world's
 * barriers and all-reduces) must not run while they are in flight: a host
 * transport carries one group's messages at a time between two ranks
 * (comm.h, comm_allreduce_start); the trainer's functions that run one
 * call this first, and so must a caller's own between trainer_update()
 * and the next trainer_backward_pass(). */
int trainer_params_sync(trainer *t);

/* The global batch of the next training iterations (a ramp-up changes it;
 * evaluation keeps cfg.global_batch_size): nmicro = G / (B DP), which the
 * caller checks divides, and at most the configured one. */
void trainer_set_global_batch(trainer *t, uint64_t global_batch_size);

/* Micro-batches per data-parallel rank: G / (B DP).  The caller checks that
 * it divides. */
uint64_t trainer_micro_batches(uint64_t global_batch_size, int micro_batch_size, int dp_size);

/* Activation slots a stage keeps under 1F1B: min(PP - stage, micro-batches). */
int trainer_act_slots(const train_layout *P, uint64_t nmicro);

/*
 * trainer_backward_pass() - one iteration's forward and backward over the
 * global batch that starts at sample `base` of the train split: zero the
 * gradients, run the micro-batches (1F1B when PP > 1), sum the tied
 * embedding's gradient over its first and last stage, reduce the gradients
 * over data-parallel ranks (all-reduce, or reduce-scatter into the shard),
 * unscale them by the loss scale and, with a scaler, look for non-finite
 * values on every rank (t->found_inf), and compute the global gradient norm
 * (NaN when found_inf).  *loss is Megatron's logged lm loss (sum of masked
 * losses / sum of the mask over the global batch) on the last stage, 0
 * elsewhere; it is not scaled.
 * @return : 0, or -1 with t->err.
 */
int trainer_backward_pass(trainer *t, uint64_t base, double *loss, double *grad_norm);

/*
 * trainer_update() - with t->found_inf, skip the step (Megatron's skipped
 * iteration); else clip by grad_norm (Megatron's clip_grad_norm_) and take
 * one AdamW step at lr (lr_embed for the word embeddings and output layer:
 * gpt_update()); with the distributed optimizer on this rank's shard, then
 * all-gather the parameters.  Either way the loss scaler is updated.
 * @return : 0, or -1 with t->err.
 */
int trainer_update(trainer *t, double lr, double lr_embed, double grad_norm);

/*
 * trainer_optimizer_stats() - Megatron-DeepSpeed's
 * --log-optimizer-states-to-tensorboard figures over the AdamW state and the
 * fp32 master weights: out[0..3] the L2 norms of v, sqrt(v), m and the
 * weights, out[4..7] their L1 norms, out[8..11] their largest magnitudes.
 * Each rank takes what its optimizer holds, then sums (L1, squared L2) and
 * maxes over the data-parallel ranks with the distributed optimizer, over
 * TP and over PP, as Megatron-DeepSpeed does (so a tensor every TP rank
 * keeps whole counts TP times, as there).  A collective: every rank calls it.
 * @return : 0, or -1 with t->err.
 */
int trainer_optimizer_stats(trainer *t, double out[12]);

/*
 * Megatron's --log-params-norm (calc_params_l2_norm, after the step): the
 * L2 norm of the counted parameters (as the gradient norm counts them) over
 * the whole model: with --bf16 the fp32 masters (the distributed
 * optimizer's shards summed over every rank), else the working weights.
 * Collective over the world.  0, or -1 with t->err.
 */
int trainer_params_norm(trainer *t, double *norm);

/*
 * Megatron's --log-num-zeros-in-grad (count_zeros_fp32 after clipping): the
 * zeros among the last backward pass's counted main gradients times the
 * clipping factor of grad_norm, summed over the ranks the norm sums over.
 * Collective.  0, or -1 with t->err.
 */
int trainer_grad_zeros(trainer *t, double grad_norm, double *zeros);

/*
 * trainer_evaluate() - mean loss (sum of masked losses / sum of the mask) of
 * `iters` global batches of `split` from sample *cursor, which advances by
 * the global batch each; forward only, the stages in a chain.  Meaningful on
 * the last stage.
 * @return : 0, or -1 with t->err.
 */
int trainer_evaluate(trainer *t, int split, uint64_t *cursor, uint64_t iters, double *loss);

/*
 * trainer_save() - every rank's checkpoint of iteration st->iteration under
 * dir: one file per (TP, PP) rank written by data-parallel rank 0 (the
 * distributed optimizer's AdamW shards gathered first, so the file does not
 * depend on DP), then rank 0 replaces latest_checkpointed_iteration.txt
 * after a barrier.  Collective.
 * @return : 0, or -1 with t->err.
 */
int trainer_save(trainer *t, const char *dir, const ckpt_state *st);

/*
 * trainer_save_torch_dist() - the same iteration as a Megatron-Core torch_dist
 * checkpoint (--ckpt-format torch_dist, train/tdsave.h): DIR/iter_%07d/ with
 * every rank's __R_0.distcp (the fp32 masters of the chunks td_items lists
 * for it, replicas only from their owner, on data-parallel rank 0; the
 * [None] _extra_state objects on TP rank 0; the AdamW moments as
 * optimizer.state.exp_avg(_sq).KEY with the same chunks, the distributed
 * optimizer's shards gathered first), then rank 0's .metadata and
 * metadata.json, then the tracker.  The common state holds args (the model's
 * sizes, the parallel sizes, the iteration and consumed samples), the
 * scheduler and the optimizer's Adam step; no RNG state (mds keeps none).
 * Collective.
 * @return : 0, or -1 with t->err.
 */
int trainer_save_torch_dist(trainer *t, const char *dir, const ckpt_state *st);

/*
 * trainer_load() - every rank reads its (TP, PP) file of `iteration` under
 * dir: weights, AdamW state (this rank's shard of it with the distributed
 * optimizer) and step, and *st.  Collective (ends with a barrier).
 * @return : 0, or -1 with t->err and *code the ckpt_err of the failure.
 */
int trainer_load(trainer *t, const char *dir, uint64_t iteration, ckpt_state *st, int *code);

#ifdef __cplusplus
}
#endif

#endif /* MDS_TRAINER_H */
