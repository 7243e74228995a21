/*
 * tblog.c - mdstrain's TensorBoard flags and scalars (tblog.h), following
 * Megatron-LM's training.py (training_log, evaluate_and_print_results) and
 * its logging arguments, or under --deepspeed microsoft/Megatron-DeepSpeed's.
 *
 * Not written: Megatron's add_text of every argument (write_args_to_tensorboard),
 * energy and MoE scalars.
 */
#include "tblog.h"

#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    T_DIR = 1, T_LOG_INTERVAL, T_QUEUE, T_TIMERS, T_MEMORY, T_VALID_PPL, T_WORLD, T_NO_LOSS_SCALE, T_NO_LR,
    T_BATCH_SIZE, T_OPT_STATES
};

static const struct cli_option tb_options[] = {
    {"tensorboard-dir", 0, CLI_ARG_ONE, T_DIR, "DIR", "write TensorBoard event files to DIR (from the last rank, as Megatron)"},
    {"tensorboard-log-interval", 0, CLI_ARG_ONE, T_LOG_INTERVAL, "N", "training scalars every N iterations (default 1)"},
    {"tensorboard-queue-size", 0, CLI_ARG_ONE, T_QUEUE, "N", "events kept in memory before a write (default 1000); all are written at each --log-interval"},
    {"log-timers-to-tensorboard", 0, CLI_ARG_NONE, T_TIMERS, NULL, "also iteration-time (and throughput with --log-throughput), and each timer of --timing-log-level 1 or 2 as NAME-time"},
    {"log-memory-to-tensorboard", 0, CLI_ARG_NONE, T_MEMORY, NULL, "also mem-reserved-bytes (RSS), mem-allocated-bytes (heap), mem-max-allocated-bytes (peak RSS)"},
    {"log-validation-ppl-to-tensorboard", 0, CLI_ARG_NONE, T_VALID_PPL, NULL, "also lm loss validation ppl"},
    {"log-world-size-to-tensorboard", 0, CLI_ARG_NONE, T_WORLD, NULL, "also world-size"},
    {"no-log-loss-scale-to-tensorboard", 0, CLI_ARG_NONE, T_NO_LOSS_SCALE, NULL, "no loss-scale scalars"},
    {"disable-log-loss-scale-to-tensorboard", 0, CLI_ARG_NONE, T_NO_LOSS_SCALE, NULL, NULL},
    {"no-log-learnig-rate-to-tensorboard", 0, CLI_ARG_NONE, T_NO_LR, NULL, "no learning-rate scalars (Megatron 0.8's spelling)"},
    /* Megatron 0.8 and Megatron-DeepSpeed write batch-size only with this flag; HEAD always does */
    {"log-batch-size-to-tensorboard", 0, CLI_ARG_NONE, T_BATCH_SIZE, NULL, NULL},
    {"log-optimizer-states-to-tensorboard", 0, CLI_ARG_NONE, T_OPT_STATES, NULL,
     "also optimizer/{variance,variance_sqrt,momentum,weight}_{l2,l1,abs_max} (Megatron-DeepSpeed)"},
};

static void tb_handle(void *ctx, const struct cli_option *o, const char *const *vals, size_t nvals)
{
    struct tb_flags *f = ctx;
    const char *v = nvals ? vals[0] : NULL;
    switch (o->id) {
    case T_DIR: f->dir = v; break;
    case T_LOG_INTERVAL: f->log_interval = cli_opt_u64(o, v, 1, 1ull << 40); break;
    case T_QUEUE: f->queue_size = cli_opt_u64(o, v, 1, 1 << 24); break;
    case T_TIMERS: f->timers = 1; break;
    case T_MEMORY: f->memory = 1; break;
    case T_VALID_PPL: f->validation_ppl = 1; break;
    case T_WORLD: f->world_size = 1; break;
    case T_NO_LOSS_SCALE: f->loss_scale = 0; break;
    case T_NO_LR: f->learning_rate = 0; break;
    case T_BATCH_SIZE: f->batch_size = 1; break;
    case T_OPT_STATES: f->optimizer_states = 1; break;
    }
}

struct cli_table tb_flags_table(struct tb_flags *f)
{
    memset(f, 0, sizeof *f);
    f->log_interval = 1;
    f->queue_size = 1000;
    f->loss_scale = 1;
    f->learning_rate = 1;
    return (struct cli_table){ "TensorBoard", tb_options, sizeof tb_options / sizeof tb_options[0], tb_handle, f };
}

/* ---- writing ------------------------------------------------------------------ */

/* A failed write ends TensorBoard logging with one warning; training goes on. */
static void give_up(struct tblog *t)
{
    cli_error("warning: TensorBoard: %s; no more events are written", tb_writer_error(t->w));
    tb_writer_close(t->w);
    t->w = NULL;
}

static void scalar(struct tblog *t, const char *tag, double value, uint64_t step)
{
    if (t->w && tb_writer_add_scalar(t->w, tag, value, (int64_t)step, -1) != 0) give_up(t);
}

/* scalar at step = iteration and "TAG vs samples" at step = consumed samples */
static void scalar2(struct tblog *t, const char *tag, double value, uint64_t iteration, uint64_t consumed)
{
    char vs[128];
    snprintf(vs, sizeof vs, "%s vs samples", tag);
    scalar(t, tag, value, iteration);
    scalar(t, vs, value, consumed);
}

/* Megatron-DeepSpeed's triple: TAG at step = iteration, "TAG vs samples"
   at consumed samples, "TAG vs tokens" at consumed tokens */
static void scalar3(struct tblog *t, const char *tag, double value, uint64_t iteration, uint64_t consumed)
{
    char vs[128];
    scalar2(t, tag, value, iteration, consumed);
    snprintf(vs, sizeof vs, "%s vs tokens", tag);
    scalar(t, vs, value, consumed * t->seq);
}

static void flush(struct tblog *t)
{
    if (t->w && tb_writer_flush(t->w) != 0) give_up(t);
}

void tblog_optimizer(struct tblog *t, uint64_t iteration, uint64_t tokens, const double stats[12])
{
    static const char *const names[12] = {
        "variance_l2", "variance_sqrt_l2", "momentum_l2", "weight_l2", "variance_l1", "variance_sqrt_l1",
        "momentum_l1", "weight_l1", "variance_abs_max", "variance_sqrt_abs_max", "momentum_abs_max",
        "weight_abs_max"};
    if (!t->w) return;
    char tag[96];
    for (int i = 0; i < 12; i++) {   /* Megatron-DeepSpeed writes the "vs tokens" ones first */
        snprintf(tag, sizeof tag, "optimizer/%s vs tokens", names[i]);
        scalar(t, tag, stats[i], tokens);
    }
    for (int i = 0; i < 12; i++) {
        snprintf(tag, sizeof tag, "optimizer/%s", names[i]);
        scalar(t, tag, stats[i], iteration);
    }
}

void tblog_open(struct tblog *t, const struct tb_flags *f, int writes)
{
    t->f = f;
    t->w = NULL;
    t->ds = 0;
    t->seq = 0;
    if (!writes || !f->dir) return;
    int rc = tb_writer_open(f->dir, (size_t)f->queue_size, &t->w);
    if (rc) {
        char msg[PATH_MAX + 200];
        snprintf(msg, sizeof msg, "%s", tb_writer_error(t->w));
        tb_writer_close(t->w);
        t->w = NULL;
        cli_die(1, "cannot write TensorBoard events: %s\nhint: check --tensorboard-dir", msg);
    }
    cli_note("> setting tensorboard ... writing %s", tb_writer_path(t->w));
}

/* The process's memory (the CPU backend has no allocator statistics):
 * resident set and its peak from /proc/self/status, heap in use from
 * mallinfo2.  0 when unknown. */
static void memory_stats(double *rss, double *peak, double *heap)
{
    *rss = *peak = *heap = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned long long kb;
            if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) *rss = (double)kb * 1024;
            if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) *peak = (double)kb * 1024;
        }
        fclose(f);
    }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    *heap = (double)mi.uordblks + (double)mi.hblkhd;
#endif
}

/* --log-memory-to-tensorboard: Megatron-LM's three (Megatron-DeepSpeed
   writes no mem-max-allocated-bytes) */
static void memory_scalars(struct tblog *t, uint64_t iteration)
{
    double rss, peak, heap;
    memory_stats(&rss, &peak, &heap);
    scalar(t, "mem-reserved-bytes", rss, iteration);
    scalar(t, "mem-allocated-bytes", heap, iteration);
    if (!t->ds) scalar(t, "mem-max-allocated-bytes", peak, iteration);
}

void tblog_training(struct tblog *t, uint64_t iteration, uint64_t consumed, double loss, double lr,
                    uint64_t batch_size, double loss_scale, double grad_norm, double num_zeros, double params_norm,
                    int world_size)
{
    if (!t->w || iteration % t->f->log_interval) return;
    if (t->f->learning_rate) scalar2(t, "learning-rate", lr, iteration, consumed);
    scalar2(t, "batch-size", (double)batch_size, iteration, consumed);
    if (!isnan(loss)) scalar2(t, "lm loss", loss, iteration, consumed);
    if (t->f->loss_scale) scalar2(t, "loss-scale", loss_scale, iteration, consumed);
    if (t->f->world_size) scalar2(t, "world-size", world_size, iteration, consumed);
    if (!isnan(grad_norm)) scalar2(t, "grad-norm", grad_norm, iteration, consumed);
    if (!isnan(num_zeros)) scalar2(t, "num-zeros", num_zeros, iteration, consumed);
    if (!isnan(params_norm)) scalar2(t, "params-norm", params_norm, iteration, consumed);
    if (t->f->memory) memory_scalars(t, iteration);
}

void tblog_deepspeed(struct tblog *t, uint64_t seq)
{
    t->ds = 1;
    t->seq = seq;
}

/* microsoft/Megatron-DeepSpeed training_log at f4157bea, lines 937-1027, in its order */
void tblog_ds_training(struct tblog *t, uint64_t iteration, uint64_t consumed, double loss, double lr,
                       uint64_t batch_size, double loss_scale, double grad_norm, double num_zeros, int world_size)
{
    if (!t->w || iteration % t->f->log_interval) return;
    uint64_t tokens = consumed * t->seq;
    scalar(t, "steps-vs-samples/y=steps,x=samples", (double)iteration, consumed);
    scalar(t, "steps-vs-samples/y=samples,x=steps", (double)consumed, iteration);
    scalar(t, "steps-vs-tokens/y=steps,x=tokens", (double)iteration, tokens);
    scalar(t, "steps-vs-tokens/y=tokens,x=steps", (double)tokens, iteration);
    if (t->f->learning_rate) scalar3(t, "learning-rate/learning-rate", lr, iteration, consumed);
    if (t->f->batch_size) scalar3(t, "batch-size/batch-size", (double)batch_size, iteration, consumed);
    scalar3(t, "lm-loss-training/lm loss", loss, iteration, consumed);
    if (!isnan(loss_scale) && loss_scale != 0 && t->f->loss_scale)
        scalar3(t, "loss-scale/loss-scale", loss_scale, iteration, consumed);
    if (t->f->world_size) scalar3(t, "world-size/world-size", world_size, iteration, consumed);
    if (!isnan(grad_norm)) scalar3(t, "grad-norm/grad-norm", grad_norm, iteration, consumed);
    if (!isnan(num_zeros)) scalar3(t, "num-zeros/num-zeros", num_zeros, iteration, consumed);
    scalar3(t, "seqlen/actual_seq_length", (double)t->seq, iteration, consumed);
    if (t->f->memory) memory_scalars(t, iteration);   /* its third, mem-allocated-count, mds has not */
}

void tblog_interval(struct tblog *t, uint64_t iteration, uint64_t consumed, double seconds_per_iteration,
                    int log_throughput, double throughput)
{
    if (!t->w) return;
    if (t->ds) {   /* its throughput/ scalars go to wandb only (add_scalar_to_wandb) */
        if (t->f->timers) scalar3(t, "iteration-time/iteration-time", seconds_per_iteration, iteration, consumed);
    } else if (t->f->timers) {
        scalar(t, "iteration-time", seconds_per_iteration, iteration);
        if (log_throughput) scalar(t, "throughput", throughput, iteration);
    }
    flush(t);
}

void tblog_timers(struct tblog *t, uint64_t iteration, const char *const *names, size_t n, const double *seconds,
                  const int *have)
{
    if (!t->w || !t->f->timers) return;
    for (size_t i = 0; i < n; i++) {
        char tag[96];
        if (!have[i]) continue;
        snprintf(tag, sizeof tag, "%s-time", names[i]);
        scalar(t, tag, seconds[i], iteration);
    }
    flush(t);
}

void tblog_validation(struct tblog *t, uint64_t iteration, uint64_t consumed, double loss, int test)
{
    if (!t->w) return;
    double ppl = exp(loss < 20 ? loss : 20);   /* Megatron: math.exp(min(20, loss)) */
    if (t->ds) {   /* evaluate_and_print_results, f4157bea lines 1508-1530 */
        char tag[64];
        snprintf(tag, sizeof tag, "lm-loss-validation/lm loss %s", test ? "test" : "validation");
        scalar3(t, tag, loss, iteration, consumed);
        snprintf(tag, sizeof tag, "lm-loss-validation/lm loss %s ppl", test ? "test" : "validation");
        if (t->f->validation_ppl) scalar3(t, tag, ppl, iteration, consumed);
    } else {   /* Megatron-LM: the test set under the same tag */
        scalar2(t, "lm loss validation", loss, iteration, consumed);
        if (t->f->validation_ppl) scalar2(t, "lm loss validation ppl", ppl, iteration, consumed);
    }
    flush(t);
}

void tblog_close(struct tblog *t)
{
    if (!t->w) return;
    flush(t);
    if (t->w && tb_writer_close(t->w) != 0)
        cli_error("warning: TensorBoard: cannot close the event file");
    t->w = NULL;
}
