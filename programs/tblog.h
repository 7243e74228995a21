/*
 * tblog.h - mdstrain's TensorBoard logging: Megatron's flags
 * (--tensorboard-dir, --tensorboard-log-interval, --tensorboard-queue-size,
 * --log-timers-to-tensorboard, ...) as one option table, and the scalars
 * Megatron's training_log and evaluate_and_print_results write, with its
 * tags and steps (docs/cli.md, "TensorBoard").  The event files themselves
 * are train/tensorboard.h's.
 *
 * Program-side code: bad flags are cli_usage (exit 2); a directory that
 * cannot be written at the start is cli_die (exit 1); a write that fails
 * later is one warning and the end of TensorBoard logging (training goes on).
 * Only the rank that opened a writer writes; on the others every call is a
 * no-op, so the training loop calls them on every rank.
 */
#ifndef MDS_TBLOG_H
#define MDS_TBLOG_H

#include "cli.h"
#include "tensorboard.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tb_flags {
    const char *dir;            /* --tensorboard-dir; NULL: no TensorBoard */
    uint64_t log_interval;      /* --tensorboard-log-interval (1) */
    uint64_t queue_size;        /* --tensorboard-queue-size (1000) */
    int timers;                 /* --log-timers-to-tensorboard */
    int memory;                 /* --log-memory-to-tensorboard */
    int validation_ppl;         /* --log-validation-ppl-to-tensorboard */
    int world_size;             /* --log-world-size-to-tensorboard */
    int loss_scale;             /* 1 unless --no-log-loss-scale-to-tensorboard */
    int learning_rate;          /* 1 unless --no-log-learnig-rate-to-tensorboard (Megatron 0.8's spelling) */
    int optimizer_states;       /* --log-optimizer-states-to-tensorboard (Megatron-DeepSpeed) */
    int batch_size;             /* --log-batch-size-to-tensorboard (Megatron-DeepSpeed's condition) */
};

/* The table (static rows) whose handler fills f (set to the defaults first). */
struct cli_table tb_flags_table(struct tb_flags *f);

struct tblog {
    const struct tb_flags *f;
    tb_writer *w;               /* NULL: this rank does not write */
    int ds;                     /* Megatron-DeepSpeed's tags (tblog_deepspeed) */
    uint64_t seq;               /* tokens per sample, for its "vs tokens" steps */
};

/* Opens the writer when writes and f->dir are set (Megatron: the last rank). */
void tblog_open(struct tblog *t, const struct tb_flags *f, int writes);

/* training_log's TensorBoard block, at iterations that are multiples of
 * --tensorboard-log-interval: learning-rate, batch-size, lm loss, loss-scale,
 * world-size, grad-norm, num-zeros and params-norm (--log-num-zeros-in-grad,
 * --log-params-norm; NaN: not written) (each also "... vs samples" at step =
 * consumed samples), and the mem-* scalars.  loss and grad_norm NaN: a skipped
 * iteration (--fp16 overflow): neither is written, as Megatron writes
 * nothing from its empty loss dict and None norm then. */
void tblog_training(struct tblog *t, uint64_t iteration, uint64_t consumed, double loss, double lr,
                    uint64_t batch_size, double loss_scale, double grad_norm, double num_zeros, double params_norm,
                    int world_size);

/* Under --deepspeed: Megatron-DeepSpeed's tags from here on (microsoft's
 * training.py at f4157bea; docs/cli.md, "TensorBoard"), its "vs tokens"
 * steps at consumed samples x seq. */
void tblog_deepspeed(struct tblog *t, uint64_t seq);

/* Megatron-DeepSpeed's training_log block, at the iterations of
 * --tensorboard-log-interval: steps-vs-samples/..., steps-vs-tokens/...,
 * then learning-rate/, batch-size/ (with its flag), lm-loss-training/lm
 * loss, loss-scale/, world-size/, grad-norm/, num-zeros/ and
 * seqlen/actual_seq_length, each at iteration, "vs samples" and "vs
 * tokens".  loss_scale, grad_norm and num_zeros NaN: None there, not written;
 * the loss is written on a skipped iteration too, as there. */
void tblog_ds_training(struct tblog *t, uint64_t iteration, uint64_t consumed, double loss, double lr,
                       uint64_t batch_size, double loss_scale, double grad_norm, double num_zeros, int world_size);

/* At each --log-interval: iteration-time (s) and, with --log-throughput,
 * throughput (TFLOP/s/GPU) under --log-timers-to-tensorboard (under
 * --deepspeed: iteration-time/iteration-time and its "vs" pair only); then
 * every queued event is written (a live TensorBoard sees them). */
void tblog_interval(struct tblog *t, uint64_t iteration, uint64_t consumed, double seconds_per_iteration,
                    int log_throughput, double throughput);

/* Megatron's Timers.write at each --log-interval under
 * --log-timers-to-tensorboard: "NAME-time" for each timer some rank ran
 * (have[i]), its largest total over the ranks per iteration, in seconds
 * (mds_timers_max); flushed. */
void tblog_timers(struct tblog *t, uint64_t iteration, const char *const *names, size_t n, const double *seconds,
                  const int *have);

/* evaluate_and_print_results: "lm loss validation" (+ "vs samples"), and
 * its "ppl" with --log-validation-ppl-to-tensorboard, the test set (test 1)
 * under the same tag; under --deepspeed "lm-loss-validation/lm loss
 * validation" or "... test" (+ "vs samples", "vs tokens"); flushed. */
void tblog_validation(struct tblog *t, uint64_t iteration, uint64_t consumed, double loss, int test);

/* Megatron-DeepSpeed's --log-optimizer-states-to-tensorboard block, at the
 * iterations of --tensorboard-log-interval: "optimizer/variance_l2",
 * variance_sqrt_l2, momentum_l2, weight_l2, the four _l1 and the four
 * _abs_max (stats in that order: trainer_optimizer_stats()), each at step =
 * iteration and "... vs tokens" at step = consumed tokens. */
void tblog_optimizer(struct tblog *t, uint64_t iteration, uint64_t tokens, const double stats[12]);

/* Flushes and closes (nothing on a rank without a writer). */
void tblog_close(struct tblog *t);

#ifdef __cplusplus
}
#endif

#endif /* MDS_TBLOG_H */
