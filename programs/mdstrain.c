/*
 * mdstrain.c - mdstrain: GPT pretraining with Megatron-LM's flags, data,
 * learning-rate schedule and log line, in one process or in parallel over
 * MPI or TCP: Megatron's tensor, pipeline (1F1B) and data parallelism,
 * optionally with the distributed optimizer (ZeRO-1).
 *
 * This file is the program: the option table (parser and --help), Megatron's
 * validate_args for what exists here, the tokenizer (only its size and EOD
 * matter), the data pipeline with Megatron's builder sample counts, the
 * configuration table, the loop with Megatron's log and validation lines,
 * and what to do with errors.  The engine (schedule, layout, 1F1B, gradient
 * reduction, ZeRO-1 shards, checkpoints) is train/trainer.[ch]; the model is
 * train/model.[ch] on the backend of kernels/backend.h; the data is
 * dataset.h's pipeline (Megatron's GPTDataset samples, same order).
 *
 * It also reads Megatron-DeepSpeed's command lines: the DeepSpeed config
 * (programs/dsconfig.h), the token schedules, the kill switch; and the flags
 * of both that name what mds does, accepted at those values only.
 *
 * What it deliberately does not do yet: context parallelism, interleaved
 * pipeline stages, several GPUs in one process (one rank per GPU, or ranks
 * sharing GPUs through host staging: --device-comm).
 * Log lines go to stdout (where Megatron prints them); the configuration
 * table, notes and errors go to stderr.  Exit status: 0 success, 1 runtime
 * failure, 2 bad usage.
 */
#include "cli.h"
#include "dataflags.h"
#include "tblog.h"
#include "dsconfig.h"
#include "bpe.h"
#include "tokenizer.h"
#include "checkpoint.h"
#include "hfckpt.h"
#include "torchdist.h"
#include "comm.h"
#include "dataset.h"
#include "kernels.h"
#include "model.h"
#include "optime.h"
#include "trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- errors: every rank ends with the job ---------------------------------- */

/* Help, version and bad usage end this rank normally (every rank parses the
 * same arguments and reaches the same verdict); a runtime failure ends
 * every rank of the job. */
static void end_job(int code)
{
    if (code == 0 || code == 2) {
        comm_finalize();
        exit(code);
    }
    comm_abort(code);
}

/* Every rank reached the same failure together (none waits for another):
 * end without aborting the job, whose launcher reports the exit status. */
static void end_job_quietly(int code) __attribute__((noreturn));
static void end_job_quietly(int code)
{
    fflush(stdout);
    comm_finalize();
    exit(code);
}

static void fatal(const char *msg)
{
    cli_die(1, "%s", msg);
}

/* --distributed-timeout-minutes: the watchdog thread of comm.h found this
 * rank stuck in a collective; the main thread is blocked, so end here. */
static int timeout_rank;
static double timeout_minutes;
static void collective_timeout(double waited)
{
    if (!cli_claim_end())
        cli_wait_for_end();   /* the main thread is already ending with its own line */
    fflush(stdout);
    fprintf(stderr, "%s: rank %d: waited %.1f s in a collective, more than --distributed-timeout-minutes %g; "
            "ending the job\nhint: a rank stopped or is far slower than the others\n", cli.name, timeout_rank, waited,
            timeout_minutes);
    _exit(1);
}

/* ---- the option table ----------------------------------------------------- */

/* --exit-signal: Megatron's signal.Signals[NAME]; those a process cannot
 * catch (Python's signal.signal refuses them) are refused here. */
static int signal_by_name(const char *name)
{
    static const struct { const char *name; int sig; } S[] = {
        {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGHUP", SIGHUP}, {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1},
        {"SIGUSR2", SIGUSR2}, {"SIGALRM", SIGALRM}, {"SIGCONT", SIGCONT}, {"SIGXCPU", SIGXCPU},
    };
    for (size_t i = 0; i < sizeof S / sizeof *S; i++)
        if (strcmp(name, S[i].name) == 0) return S[i].sig;
    cli_usage("option '--exit-signal' %s is not supported (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, "
              "SIGALRM, SIGCONT or SIGXCPU)", name);
    return -1;
}

/* Python's int() of a logging level (cli_parse_int); anything else is exit
 * 2 naming what. */
static long python_int(const char *v, const char *what)
{
    long x;
    if (cli_parse_int(v, &x) != 0) cli_usage("%s: invalid literal for int() with base 10: '%s'", what, v);
    return x;
}

/* --exit-signal-handler: set when the signal arrives, read at each
 * iteration's end (Megatron's DistributedSignalHandler). */
static volatile sig_atomic_t exit_signal_got;
static void on_exit_signal(int sig)
{
    (void)sig;
    exit_signal_got = 1;
}

enum {
    O_NUM_LAYERS = 1, O_HIDDEN, O_HEADS, O_FFN, O_SEQ, O_MAXPOS, O_MBS, O_GBS, O_TRAIN_ITERS,
    O_TRAIN_SAMPLES, O_LR, O_MIN_LR, O_DECOUPLED_LR, O_DECOUPLED_MIN_LR, O_LR_WARMUP_INIT, O_DECAY_STYLE, O_WARMUP_ITERS,
    O_WARMUP_FRACTION, O_WARMUP_SAMPLES, O_DECAY_ITERS, O_DECAY_SAMPLES, O_WD, O_CLIP, O_BETA1,
    O_BETA2, O_EPS, O_SEED, O_LOG_INTERVAL, O_EVAL_INTERVAL, O_EVAL_ITERS, O_EXIT_INTERVAL,
    O_VOCAB_FILE, O_MERGE_FILE, O_TOKENIZER, O_VOCAB_SIZE, O_TOKENIZER_MODEL,
    O_TP, O_PP, O_EOD_MASK, O_VOCAB_DIV, O_INIT_STD, O_UNTIE, O_NORM_EPS, O_HIDDEN_DROPOUT,
    O_ATTN_DROPOUT, O_DIST_OPT, O_LOG_THROUGHPUT, O_QUIET, O_VERBOSE, O_HELP, O_VERSION,
    O_SAVE, O_SAVE_INTERVAL, O_CKPT_FORMAT, O_LOAD, O_EXPORT_HF, O_LOAD_HF, O_CHECK_LOGITS,
    O_POS_TYPE, O_USE_ROPE, O_NO_POS_EMB, O_ROTARY_BASE, O_ROTARY_PERCENT, O_ROTARY_INTERLEAVED,
    O_USE_ROPE_SCALING, O_ROPE_SCALING_FACTOR, O_NORMALIZATION, O_SWIGLU, O_GQA, O_QUERY_GROUPS, O_KV_HEADS, O_LN1P, O_EMBED_LN,
    O_DISABLE_BIAS, O_KV_CHANNELS, O_SOFTMAX_FP32,
    O_BF16, O_FP16, O_LOSS_SCALE, O_INITIAL_LOSS_SCALE, O_MIN_LOSS_SCALE, O_LOSS_SCALE_WINDOW, O_HYSTERESIS,
    O_GRADS_FP32, O_GRADS_BF16, O_PER_TOKEN_LOSS, O_DEVICE, O_DEVICE_COMM, O_OP_TIMES,
    O_TIMING_LEVEL, O_TIMING_OPTION, O_NO_L1_BARRIER, O_EXIT_SIGNAL_HANDLER, O_EXIT_SIGNAL, O_MANUAL_GC_INTERVAL,
    O_NO_CHECK_NAN, O_LOG_PARAMS_NORM, O_LOG_NUM_ZEROS, O_LOGGING_LEVEL, O_WSD_STYLE, O_WSD_ITERS, O_WSD_SAMPLES,
    O_NO_SAVE_OPTIM, O_CKPT_STEP, O_EXIT_ON_MISSING, O_WANDB, O_SKIP_TRAIN,
    /* Megatron flags naming what mds does (their values checked) */
    O_CP, O_DIST_BACKEND, O_DATA_IMPL, O_OPTIMIZER, O_DDP_IMPL, O_TRANSFORMER_IMPL,
    O_MCORE, O_NUM_WORKERS, O_DATALOADER, O_NO_ASYNC_TP, O_NO_GRAD_FUSION, O_ATTN_BACKEND, O_FLASH_ATTN,
    O_QK_SCALING, O_NO_QK_SCALING, O_MANUAL_GC, O_SCHEDULING_ONLY, O_OVERLAP_PARAM, O_EMPTY_CACHE, O_TIKTOKEN_PATTERN, O_OVERRIDE_SCHED, O_USE_CKPT_SCHED, O_DIST_TIMEOUT,
    O_OVERLAP_GRAD, O_DDP_BUCKET,
    O_NO_LOAD_OPTIM, O_NO_LOAD_RNG, O_FINETUNE,
    O_KILL_SWITCH, O_EXIT_DURATION, O_NULL_EOD, O_NULL_LEGACY,
    /* batch ramp-up and token schedules */
    O_RAMPUP, O_TRAIN_TOKENS, O_DECAY_TOKENS, O_WARMUP_TOKENS,
    /* Megatron-DeepSpeed */
    O_DEEPSPEED, O_DS_CONFIG, O_ZERO_STAGE, O_DS_ACT_CKPT, O_PARTITION_ACT, O_NO_PP, O_DS_MPI, O_CPU_OPT, O_DS_SP,
    O_CKPT_ACT, O_CKPT_NUM,
    /* activation recomputation */
    O_RECOMPUTE_ACT, O_RECOMPUTE_GRAN, O_RECOMPUTE_METHOD, O_RECOMPUTE_NUM, O_SEQ_PAR
};

#define NOT_YET(name, arg) {name, 0, arg, CLI_REFUSED, NULL, "yet"}
#define CANNOT(name, arg) {name, 0, arg, CLI_REFUSED, NULL, "(FP8 needs a GPU with FP8 tensor cores and Transformer Engine)"}

static const struct cli_option model_options[] = {
    {"num-layers", 0, CLI_ARG_ONE, O_NUM_LAYERS, "N", "transformer layers (required)"},
    {"hidden-size", 0, CLI_ARG_ONE, O_HIDDEN, "N", "hidden size (required)"},
    {"num-attention-heads", 0, CLI_ARG_ONE, O_HEADS, "N", "attention heads (required)"},
    {"ffn-hidden-size", 0, CLI_ARG_ONE, O_FFN, "N", "MLP hidden size (default 4 x hidden size)"},
    {"seq-length", 0, CLI_ARG_ONE, O_SEQ, "N", "tokens per sample (required)"},
    {"max-position-embeddings", 0, CLI_ARG_ONE, O_MAXPOS, "N", "position embeddings, >= seq length (required)"},
    {"make-vocab-size-divisible-by", 0, CLI_ARG_ONE, O_VOCAB_DIV, "N", "pad the vocabulary to a multiple of N x TP (default 128)"},
    {"untie-embeddings-and-output-weights", 0, CLI_ARG_NONE, O_UNTIE, NULL, "separate output layer (default: tied to the word embeddings)"},
    {"init-method-std", 0, CLI_ARG_ONE, O_INIT_STD, "X", "init std (default 0.02; output projections / sqrt(2 L))"},
    {"norm-epsilon", 0, CLI_ARG_ONE, O_NORM_EPS, "X", "LayerNorm epsilon (default 1e-5)"},
    {"layernorm-epsilon", 0, CLI_ARG_ONE, O_NORM_EPS, "X", "its older spelling (Megatron-DeepSpeed); not the --embed-layernorm norm's"},
    {"hidden-dropout", 0, CLI_ARG_ONE, O_HIDDEN_DROPOUT, "P", "dropout of the embedding, attention and MLP outputs (default 0.1)"},
    {"attention-dropout", 0, CLI_ARG_ONE, O_ATTN_DROPOUT, "P", "dropout of the attention probabilities (default 0.1)"},
    /* the Llama family */
    {"position-embedding-type", 0, CLI_ARG_ONE, O_POS_TYPE, "TYPE", "learned_absolute (default), rope or none"},
    {"use-rotary-position-embeddings", 0, CLI_ARG_NONE, O_USE_ROPE, NULL, "the old spelling of --position-embedding-type rope"},
    {"no-position-embedding", 0, CLI_ARG_NONE, O_NO_POS_EMB, NULL, "no learned position embedding (the old spelling of none; RoPE unaffected)"},
    {"rotary-base", 0, CLI_ARG_ONE, O_ROTARY_BASE, "N", "RoPE base period (default 10000)"},
    {"rotary-percent", 0, CLI_ARG_ONE, O_ROTARY_PERCENT, "X", "fraction of each head's channels RoPE rotates (default 1.0)"},
    {"rotary-interleaved", 0, CLI_ARG_NONE, O_ROTARY_INTERLEAVED, NULL, "rotate channel pairs (2i, 2i+1) instead of (i, i + d/2)"},
    {"use-rope-scaling", 0, CLI_ARG_NONE, O_USE_ROPE_SCALING, NULL, "Llama 3.1's RoPE frequency scaling"},
    {"rope-scaling-factor", 0, CLI_ARG_ONE, O_ROPE_SCALING_FACTOR, "X", "its factor (default 8.0)"},
    {"normalization", 0, CLI_ARG_ONE, O_NORMALIZATION, "NORM", "LayerNorm (default) or RMSNorm"},
    {"apply-layernorm-1p", 0, CLI_ARG_NONE, O_LN1P, NULL, "norm weights stored as w and applied as 1 + w, w starting at 0 (zero-centred gamma)"},
    {"embed-layernorm", 0, CLI_ARG_NONE, O_EMBED_LN, NULL, "a LayerNorm (eps 1e-5) of the word embeddings before the positions are added (bigscience)"},
    {"swiglu", 0, CLI_ARG_NONE, O_SWIGLU, NULL, "SwiGLU MLP: FC1 gives gate and up, silu(gate) * up (default ffn int(8h/3/64)*64)"},
    {"group-query-attention", 0, CLI_ARG_NONE, O_GQA, NULL, "grouped-query attention with --num-query-groups"},
    {"num-query-groups", 0, CLI_ARG_ONE, O_QUERY_GROUPS, "G", "key/value heads under --group-query-attention (default 1)"},
    {"num-key-value-heads", 0, CLI_ARG_ONE, O_KV_HEADS, "G", "Megatron-DeepSpeed's spelling: G key/value heads (GQA when G < heads)"},
    {"disable-bias-linear", 0, CLI_ARG_NONE, O_DISABLE_BIAS, NULL, "no bias in the QKV, projection and MLP linears"},
    {"kv-channels", 0, CLI_ARG_ONE, O_KV_CHANNELS, "N", "head size; only hidden size / heads"},
    {"attention-softmax-in-fp32", 0, CLI_ARG_NONE, O_SOFTMAX_FP32, NULL, "accepted: the softmax is computed in fp32 (double sums)"},
    NOT_YET("rotary-seq-len-interpolation-factor", CLI_ARG_ONE),
    /* mixed precision */
    {"bf16", 0, CLI_ARG_NONE, O_BF16, NULL, "bf16 weights and activations, fp32 masters, optimizer state and main grads"},
    {"fp16", 0, CLI_ARG_NONE, O_FP16, NULL, "fp16 weights and activations with Megatron's dynamic loss scale"},
    {"loss-scale", 0, CLI_ARG_ONE, O_LOSS_SCALE, "X", "a constant loss scale for --fp16 (default: dynamic)"},
    {"initial-loss-scale", 0, CLI_ARG_ONE, O_INITIAL_LOSS_SCALE, "X", "the dynamic scale's start (default 2^32)"},
    {"min-loss-scale", 0, CLI_ARG_ONE, O_MIN_LOSS_SCALE, "X", "its floor (default 1.0)"},
    {"loss-scale-window", 0, CLI_ARG_ONE, O_LOSS_SCALE_WINDOW, "N", "iterations without overflow before it doubles (default 1000)"},
    {"hysteresis", 0, CLI_ARG_ONE, O_HYSTERESIS, "N", "overflows before it halves (default 2)"},
    {"accumulate-allreduce-grads-in-fp32", 0, CLI_ARG_NONE, O_GRADS_FP32, NULL, "fp32 main gradients with --fp16 (always with --bf16)"},
    {"grad-reduce-in-bf16", 0, CLI_ARG_NONE, O_GRADS_BF16, NULL, "bf16 main gradients with --bf16: accumulated and reduced in bf16"},
    {"calculate-per-token-loss", 0, CLI_ARG_NONE, O_PER_TOKEN_LOSS, NULL,
     "gradients of the global batch's token-loss sum over its token count (not a mean of micro-batch means)"},
    NOT_YET("fp16-lm-cross-entropy", CLI_ARG_NONE),
    NOT_YET("fp32-residual-connection", CLI_ARG_NONE),
};

static const struct cli_option train_options[] = {
    /* batch and length of training */
    {"micro-batch-size", 0, CLI_ARG_ONE, O_MBS, "N", "samples per micro-batch (required)"},
    {"global-batch-size", 0, CLI_ARG_ONE, O_GBS, "N", "samples per iteration, a multiple of the micro-batch (default: micro-batch)"},
    {"train-iters", 0, CLI_ARG_ONE, O_TRAIN_ITERS, "N", "iterations to train (or --train-samples)"},
    {"train-samples", 0, CLI_ARG_ONE, O_TRAIN_SAMPLES, "N", "samples to train (iterations = N / global batch)"},
    {"exit-interval", 0, CLI_ARG_ONE, O_EXIT_INTERVAL, "N", "stop after an iteration that is a multiple of N (saving first with --save)"},
    {"rampup-batch-size", 0, CLI_ARG_MANY, O_RAMPUP, "START INCR SAMPLES",
     "grow the global batch from START by INCR over SAMPLES samples (Megatron's ramp-up)"},
    {"train-tokens", 0, CLI_ARG_ONE, O_TRAIN_TOKENS, "N", "also stop once N tokens are consumed (Megatron-DeepSpeed)"},
    {"exit-duration-in-mins", 0, CLI_ARG_ONE, O_EXIT_DURATION, "X",
     "stop (saving first with --save) after X minutes, 0 = never; X may be fractional"},
    {"exit-signal-handler", 0, CLI_ARG_NONE, O_EXIT_SIGNAL_HANDLER, NULL,
     "on --exit-signal (SIGTERM) to any rank: save (with --save) after the iteration under way and stop"},
    {"exit-signal", 0, CLI_ARG_ONE, O_EXIT_SIGNAL, "SIGNAME", "the signal of --exit-signal-handler (default SIGTERM)"},
    {"kill-switch-path", 0, CLI_ARG_ONE, O_KILL_SWITCH, "PATH",
     "stop (saving first with --save) before an iteration when PATH exists"},
    /* checkpoints */
    {"save", 0, CLI_ARG_ONE, O_SAVE, "DIR", "save checkpoints to DIR (at --save-interval and at the end)"},
    {"save-interval", 0, CLI_ARG_ONE, O_SAVE_INTERVAL, "N", "save every N iterations (with --save)"},
    {"ckpt-format", 0, CLI_ARG_ONE, O_CKPT_FORMAT, "FMT",
     "--save as torch_dist (Megatron-Core's distributed checkpoint: the model, AdamW state, scheduler and args; without the flag: mds's own files)"},
    {"load", 0, CLI_ARG_ONE, O_LOAD, "DIR", "resume from DIR's latest checkpoint (none there: start afresh)"},
    {"ckpt-step", 0, CLI_ARG_ONE, O_CKPT_STEP, "N", "with --load: iteration N's checkpoint instead of the latest (0: the latest)"},
    {"exit-on-missing-checkpoint", 0, CLI_ARG_NONE, O_EXIT_ON_MISSING, NULL,
     "with --load: no checkpoint there ends the run (exit 1) instead of starting afresh"},
    {"export-hf", 0, CLI_ARG_ONE, O_EXPORT_HF, "DIR",
     "write --load's latest checkpoint (its TP/PP layout given by the flags) as a HuggingFace folder and exit"},
    {"load-hf", 0, CLI_ARG_ONE, O_LOAD_HF, "DIR",
     "start from a HuggingFace folder's weights (GPT2LMHeadModel, LlamaForCausalLM) unless --load resumes a checkpoint"},
    {"no-load-optim", 0, CLI_ARG_NONE, O_NO_LOAD_OPTIM, NULL,
     "on --load, restore the weights and counters but start AdamW, the loss scale and the lr schedule afresh"},
    {"no-load-rng", 0, CLI_ARG_NONE, O_NO_LOAD_RNG, NULL,
     "on --load, do not ask for the checkpoint's RNG state (mds keeps none: the flag only lifts torch_dist's check)"},
    {"finetune", 0, CLI_ARG_NONE, O_FINETUNE, NULL,
     "on --load, take only the weights: iteration, consumed samples, optimizer and schedule start afresh"},
    {"check-logits", 0, CLI_ARG_ONE, O_CHECK_LOGITS, "FILE",
     "test: compare the logits of the loaded model on FILE's tokens with FILE's logits (1e-4 relative) and exit"},
    /* optimizer and schedule */
    {"lr", 0, CLI_ARG_ONE, O_LR, "X", "peak learning rate (required)"},
    {"min-lr", 0, CLI_ARG_ONE, O_MIN_LR, "X", "final learning rate (default 0)"},
    {"decoupled-lr", 0, CLI_ARG_ONE, O_DECOUPLED_LR, "X", "peak learning rate of the word embeddings and output layer (default --lr)"},
    {"decoupled-min-lr", 0, CLI_ARG_ONE, O_DECOUPLED_MIN_LR, "X", "their final learning rate (default --min-lr)"},
    {"lr-warmup-init", 0, CLI_ARG_ONE, O_LR_WARMUP_INIT, "X", "learning rate at the start of the warmup (default 0)"},
    {"lr-decay-style", 0, CLI_ARG_ONE, O_DECAY_STYLE, "STYLE",
     "constant, linear (default), cosine, inverse-square-root or WSD (warmup, stable, then the last "
     "--lr-wsd-decay-iters/-samples anneal)"},
    {"lr-wsd-decay-style", 0, CLI_ARG_ONE, O_WSD_STYLE, "STYLE", "WSD's annealing: exponential (default), linear, cosine or minus_sqrt"},
    {"lr-wsd-decay-iters", 0, CLI_ARG_ONE, O_WSD_ITERS, "N", "WSD's annealing iterations (with --train-iters)"},
    {"lr-wsd-decay-samples", 0, CLI_ARG_ONE, O_WSD_SAMPLES, "N", "WSD's annealing samples (with --train-samples)"},
    {"lr-warmup-iters", 0, CLI_ARG_ONE, O_WARMUP_ITERS, "N", "warmup iterations (default 0)"},
    {"lr-warmup-fraction", 0, CLI_ARG_ONE, O_WARMUP_FRACTION, "X", "warmup as a fraction of the decay length"},
    {"lr-warmup-samples", 0, CLI_ARG_ONE, O_WARMUP_SAMPLES, "N", "warmup samples (with --train-samples)"},
    {"lr-decay-iters", 0, CLI_ARG_ONE, O_DECAY_ITERS, "N", "decay iterations (default --train-iters)"},
    {"lr-decay-samples", 0, CLI_ARG_ONE, O_DECAY_SAMPLES, "N", "decay samples (default --train-samples)"},
    {"lr-warmup-tokens", 0, CLI_ARG_ONE, O_WARMUP_TOKENS, "N", "warmup tokens (Megatron-DeepSpeed's token schedule)"},
    {"lr-decay-tokens", 0, CLI_ARG_ONE, O_DECAY_TOKENS, "N", "decay tokens (Megatron-DeepSpeed's token schedule)"},
    {"override-opt_param-scheduler", 0, CLI_ARG_NONE, O_OVERRIDE_SCHED, NULL,
     "on --load, take the schedule from these flags, not the checkpoint"},
    {"use-checkpoint-opt_param-scheduler", 0, CLI_ARG_NONE, O_USE_CKPT_SCHED, NULL,
     "on --load, take the schedule from the checkpoint, not these flags"},
    {"weight-decay", 0, CLI_ARG_ONE, O_WD, "X", "AdamW weight decay, not on biases and norms (default 0.01)"},
    {"clip-grad", 0, CLI_ARG_ONE, O_CLIP, "X", "clip the global gradient norm to X, 0 = off (default 1.0)"},
    {"adam-beta1", 0, CLI_ARG_ONE, O_BETA1, "X", "default 0.9"},
    {"adam-beta2", 0, CLI_ARG_ONE, O_BETA2, "X", "default 0.999"},
    {"adam-eps", 0, CLI_ARG_ONE, O_EPS, "X", "default 1e-8"},
    {"seed", 0, CLI_ARG_ONE, O_SEED, "N", "initialisation and data shuffling seed (default 1234)"},
    /* activation recomputation (Megatron's --recompute-*) */
    {"recompute-activations", 0, CLI_ARG_NONE, O_RECOMPUTE_ACT, NULL,
     "= --recompute-granularity selective (core attention: mds stores no T x T probabilities anyway)"},
    {"recompute-granularity", 0, CLI_ARG_ONE, O_RECOMPUTE_GRAN, "full|selective",
     "full: keep only chunk inputs, rerun the chunks in the backward; selective: core attention (as always)"},
    {"recompute-method", 0, CLI_ARG_ONE, O_RECOMPUTE_METHOD, "uniform|block",
     "with full: uniform = chunks of N layers; block = the first N layers of each pipeline stage"},
    {"recompute-num-layers", 0, CLI_ARG_ONE, O_RECOMPUTE_NUM, "N", "N of --recompute-method (required with full)"},
    /* tokenizer and samples */
    {"tokenizer-type", 0, CLI_ARG_ONE, O_TOKENIZER, "TYPE", "GPT2BPETokenizer (default), NullTokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer or Llama2Tokenizer"},
    {"tokenizer-model", 0, CLI_ARG_ONE, O_TOKENIZER_MODEL, "PATH", "HuggingFace directory or tokenizer.json, or SentencePiece .model (vocabulary size and EOD)"},
    {"vocab-file", 0, CLI_ARG_ONE, O_VOCAB_FILE, "PATH", "GPT-2 vocab JSON (default: the bundled one)"},
    {"merge-file", 0, CLI_ARG_ONE, O_MERGE_FILE, "PATH", "GPT-2 merges (default: the bundled one)"},
    {"vocab-size", 0, CLI_ARG_ONE, O_VOCAB_SIZE, "N", "NullTokenizer: N ids, the last (N - 1) being EOD"},
    {"null-tokenizer-eod-id", 0, CLI_ARG_ONE, O_NULL_EOD, "ID", "NullTokenizer: the EOD id (default N - 1)"},
    {"null-tokenizer-legacy", 0, CLI_ARG_NONE, O_NULL_LEGACY, NULL,
     "NullTokenizer as Megatron before 2026: N ids plus EOD = N (N + 1 ids)"},
    {"eod-mask-loss", 0, CLI_ARG_NONE, O_EOD_MASK, NULL, "no loss on targets after an EOD input"},
    /* logging and evaluation */
    {"log-interval", 0, CLI_ARG_ONE, O_LOG_INTERVAL, "N", "log line every N iterations (default 100)"},
    {"eval-interval", 0, CLI_ARG_ONE, O_EVAL_INTERVAL, "N", "validation every N iterations, 0 = never (default 1000)"},
    {"eval-iters", 0, CLI_ARG_ONE, O_EVAL_ITERS, "N", "global batches per validation, 0 = none (default 100)"},
    {"skip-train", 0, CLI_ARG_NONE, O_SKIP_TRAIN, NULL,
     "no training: the validation and test evaluations of the end only (at --load's iteration), nothing saved"},
    {"log-throughput", 0, CLI_ARG_NONE, O_LOG_THROUGHPUT, NULL, "accepted; throughput is always logged"},
    {"log-params-norm", 0, CLI_ARG_NONE, O_LOG_PARAMS_NORM, NULL,
     "'params norm:' in the log line and params-norm in TensorBoard: the weights' L2 norm after the step"},
    {"log-num-zeros-in-grad", 0, CLI_ARG_NONE, O_LOG_NUM_ZEROS, NULL,
     "'num zeros:' in the log line and num-zeros in TensorBoard: the zeros among the clipped main gradients"},
    {"timing-log-level", 0, CLI_ARG_ONE, O_TIMING_LEVEL, "0|1|2",
     "Megatron's timers: 0 (default) the setup, evaluate and checkpoint times; 1 also the gradients' reductions "
     "and the optimizer's phases each --log-interval; 2 also the micro-batches' forward, backward and pipeline "
     "transfers (levels 1 and 2 sync the device around each phase)"},
    {"timing-log-option", 0, CLI_ARG_ONE, O_TIMING_OPTION, "minmax|max|all",
     "the timers' figures over the ranks: min and max (default), max, or each rank's"},
    {"no-barrier-with-level-1-timing", 0, CLI_ARG_NONE, O_NO_L1_BARRIER, NULL,
     "no barrier over the ranks before the level-1 timers start"},
    {"logging-level", 0, CLI_ARG_ONE, O_LOGGING_LEVEL, "N",
     "Python's logging level for Megatron's logger lines (default $MEGATRON_LOGGING_LEVEL, else 20, INFO): "
     "above 20 the timers' blocks are not printed"},
    /* parallelism */
    {"tensor-model-parallel-size", 0, CLI_ARG_ONE, O_TP, "N", "tensor-parallel ranks (default 1); DP = world / (TP x PP)"},
    {"pipeline-model-parallel-size", 0, CLI_ARG_ONE, O_PP, "N", "pipeline stages, 1F1B schedule (default 1)"},
    {"use-distributed-optimizer", 0, CLI_ARG_NONE, O_DIST_OPT, NULL, "shard the AdamW state over data-parallel ranks (ZeRO-1)"},
    {"device", 0, CLI_ARG_ONE, O_DEVICE, "cpu|cuda",
     "where tensors live and kernels run (default: $MDS_DEVICE if set, else cuda when this build has CUDA and every rank "
     "has a GPU of its own, else cpu); each rank takes the GPU of its local rank"},
    {"device-comm", 0, CLI_ARG_ONE, O_DEVICE_COMM, "auto|nccl|host-staged",
     "collectives of GPU ranks: auto = NCCL when the job has several ranks (one GPU each; more ranks than GPUs on a "
     "host are refused), nccl = NCCL even for one process, host-staged = through host memory over MPI/TCP, so that "
     "ranks can share a GPU (slow; for testing layouts; with --device cpu it copies host memory)"},
    {"op-times", 0, CLI_ARG_NONE, O_OP_TIMES, NULL,
     "at the end, rank 0's time in each op (and matmul shape) per iteration, the first iteration left out: "
     "the device's own time on a GPU (events around each op), the host clock's on the CPU"},
    {"sequence-parallel", 0, CLI_ARG_NONE, O_SEQ_PAR, NULL,
     "with TP > 1: norms, dropout and residuals on 1/TP of the sequence (all-gather / reduce-scatter around the "
     "TP linears); bitwise the same results, less activation memory"},
    {"context-parallel-size", 0, CLI_ARG_ONE, O_CP, "1", "only 1 (context parallelism is not implemented)"},
    NOT_YET("num-layers-per-virtual-pipeline-stage", CLI_ARG_ONE),
    {"distributed-timeout-minutes", 0, CLI_ARG_ONE, O_DIST_TIMEOUT, "X",
     "a rank waiting longer than X minutes in a collective ends the job (default: no limit)"},
    {"quiet", 'q', CLI_ARG_NONE, O_QUIET, NULL, "no configuration table or notes; twice: errors only"},
    {"verbose", 'v', CLI_ARG_NONE, O_VERBOSE, NULL, "more output"},
    {"help", 'h', CLI_ARG_NONE, O_HELP, NULL, "show this help and exit"},
    {"version", 'V', CLI_ARG_NONE, O_VERSION, NULL, "show the version and exit"},
};

/* Flags whose meaning is what mds does anyway: accepted at the values
 * that mean it, refused at any other (docs/cli.md). */
static const struct cli_option compat_options[] = {
    {"distributed-backend", 0, CLI_ARG_ONE, O_DIST_BACKEND, "nccl|gloo",
     "accepted: mds picks its transport (MPI, TCP) itself"},
    {"data-impl", 0, CLI_ARG_ONE, O_DATA_IMPL, "mmap|infer", "accepted: the mmap format (MMIDIDX) is the one read"},
    {"dataset-impl", 0, CLI_ARG_ONE, O_DATA_IMPL, NULL, NULL},
    {"optimizer", 0, CLI_ARG_ONE, O_OPTIMIZER, "adam", "only adam (Megatron's AdamW)"},
    {"DDP-impl", 0, CLI_ARG_ONE, O_DDP_IMPL, "local|torch", "accepted: data-parallel gradients are averaged either way"},
    {"transformer-impl", 0, CLI_ARG_ONE, O_TRANSFORMER_IMPL, "local", "local or transformer_engine: the same model, on mds's own kernels"},
    {"use-mcore-models", 0, CLI_ARG_NONE, O_MCORE, NULL, "accepted: the model is Megatron-Core's GPT"},
    {"num-workers", 0, CLI_ARG_ONE, O_NUM_WORKERS, "N", "accepted: samples are read in the training process"},
    {"dataloader-type", 0, CLI_ARG_ONE, O_DATALOADER, "single", "only single (Megatron's default sampler)"},
    {"no-async-tensor-model-parallel-allreduce", 0, CLI_ARG_NONE, O_NO_ASYNC_TP, NULL,
     "accepted: the TP all-reduce is synchronous"},
    {"no-gradient-accumulation-fusion", 0, CLI_ARG_NONE, O_NO_GRAD_FUSION, NULL,
     "accepted: gradients accumulate in fp32 without a fused kernel"},
    {"attention-backend", 0, CLI_ARG_ONE, O_ATTN_BACKEND, "flash|fused|unfused|local|auto",
     "accepted: one exact attention computes the same softmax(QK^T/sqrt(d))V"},
    {"use-flash-attn", 0, CLI_ARG_NONE, O_FLASH_ATTN, NULL, "accepted: the same exact attention"},
    {"use-flash-attn-v1", 0, CLI_ARG_NONE, O_FLASH_ATTN, NULL, NULL},
    {"use-flash-attn-v2", 0, CLI_ARG_NONE, O_FLASH_ATTN, NULL, NULL},
    {"use-flash-attn-triton", 0, CLI_ARG_NONE, O_FLASH_ATTN, NULL, NULL},
    {"apply-query-key-layer-scaling", 0, CLI_ARG_NONE, O_QK_SCALING, NULL,
     "accepted: the 1/layer scaling is undone in the fp32 softmax"},
    {"no-query-key-layer-scaling", 0, CLI_ARG_NONE, O_NO_QK_SCALING, NULL, "accepted (the default)"},
    {"manual-gc", 0, CLI_ARG_NONE, O_MANUAL_GC, NULL, "accepted: mds has no garbage collector"},
    {"manual-gc-interval", 0, CLI_ARG_ONE, O_MANUAL_GC_INTERVAL, "N", "accepted with --manual-gc's reason"},
    {"no-manual-gc-eval", 0, CLI_ARG_NONE, O_MANUAL_GC, NULL, "accepted with --manual-gc's reason"},
    /* Megatron's kernel fusions: each selects among its own CUDA kernels for the
       same function; mds runs its own kernels either way */
    {"no-masked-softmax-fusion", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: Megatron's fusions pick among its kernels for the same function; mds has its own"},
    {"no-bias-gelu-fusion", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL, "accepted (as --no-masked-softmax-fusion)"},
    {"no-bias-swiglu-fusion", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL, "accepted (as --no-masked-softmax-fusion)"},
    {"no-bias-dropout-fusion", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL, "accepted (as --no-masked-softmax-fusion)"},
    {"no-rope-fusion", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL, "accepted (as --no-masked-softmax-fusion)"},
    {"no-persist-layer-norm", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL, "accepted (as --no-masked-softmax-fusion)"},
    {"no-overlap-p2p-communication", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: without a virtual pipeline Megatron turns the overlap off itself; mds's 1F1B has none"},
    /* checkpoint writing and reading strategies: the same files either way */
    {"no-save-optim", 0, CLI_ARG_NONE, O_NO_SAVE_OPTIM, NULL,
     "with --ckpt-format torch_dist: save the weights without AdamW's state and the scheduler's (its args say "
     "no_save_optim, so a load skips them)"},
    /* Weights & Biases: off with an empty project, as in Megatron */
    {"wandb-project", 0, CLI_ARG_ONE, O_WANDB, "''", "only empty (W&B off, Megatron's default); mds does not log to W&B"},
    {"wandb-exp-name", 0, CLI_ARG_ONE, O_WANDB, "NAME", "accepted with an empty --wandb-project (unused then, as in Megatron)"},
    {"wandb-save-dir", 0, CLI_ARG_ONE, O_WANDB, "DIR", "the same"},
    {"wandb-entity", 0, CLI_ARG_ONE, O_WANDB, "NAME", "the same"},
    {"no-save-rng", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: mds saves no RNG state (a torch_dist checkpoint's args say no_save_rng)"},
    {"async-save", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: the same files, written before training goes on"},
    {"use-persistent-ckpt-worker", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL, "accepted (as --async-save)"},
    {"ckpt-fully-parallel-save", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: deprecated in Megatron, without effect; each rank writes its own part"},
    {"ckpt-fully-parallel-load", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: how Megatron's ranks share the reading; the same tensors"},
    {"ckpt-assume-constant-structure", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: a caching of Megatron's save plans; the same files"},
    {"use-dist-ckpt", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: deprecated in Megatron, without effect (--ckpt-format chooses)"},
    {"auto-detect-ckpt-format", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: --load finds the format itself (torch_dist by its metadata.json)"},
    {"check-for-nan-in-loss-and-grad", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted (Megatron before 0.9): a non-finite loss or gradient norm ends the run, exit 1"},
    {"no-check-for-nan-in-loss-and-grad", 0, CLI_ARG_NONE, O_NO_CHECK_NAN, NULL,
     "refused: mds always ends the run at a non-finite loss or gradient norm"},
    {"overlap-grad-reduce", 0, CLI_ARG_NONE, O_OVERLAP_GRAD, NULL,
     "reduce the data-parallel gradients in buckets while the backward runs: all-reduce, or with the "
     "distributed optimizer reduce-scatter (the same sums)"},
    {"ddp-bucket-size", 0, CLI_ARG_ONE, O_DDP_BUCKET, "N",
     "elements per --overlap-grad-reduce bucket, at least (default max(40M, 1M x DP), Megatron's)"},
    {"overlap-param-gather", 0, CLI_ARG_NONE, O_OVERLAP_PARAM, NULL,
     "all-gather the distributed optimizer's updated parameters bucket by bucket while the next forward runs "
     "(with --use-distributed-optimizer and --overlap-grad-reduce, as Megatron's)"},
    {"empty-unused-memory-level", 0, CLI_ARG_ONE, O_EMPTY_CACHE, "0|1|2",
     "accepted: when PyTorch returns cached memory; mds allocates once and frees at the end"},
    {"no-create-attention-mask-in-dataloader", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: the causal mask is applied inside the attention kernel, never stored"},
    {"no-mmap-bin-files", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: the same tokens, read through mds's read-only mapping"},
    {"cross-entropy-loss-fusion", 0, CLI_ARG_NONE, O_SCHEDULING_ONLY, NULL,
     "accepted: mds's cross-entropy is already one fused kernel over the logits"},
    {"tiktoken-pattern", 0, CLI_ARG_ONE, O_TIKTOKEN_PATTERN, "v1|v2",
     "accepted: only TikTokenizer reads it (mds has none; Megatron ignores it for the others too)"},
    /* FP8 needs a GPU's FP8 tensor cores (Transformer Engine): this machine cannot run it */
    CANNOT("fp8-format", CLI_ARG_ONE),
    CANNOT("fp8-recipe", CLI_ARG_ONE),
    CANNOT("fp8-margin", CLI_ARG_ONE),
    CANNOT("fp8-interval", CLI_ARG_ONE),
    CANNOT("fp8-amax-history-len", CLI_ARG_ONE),
    CANNOT("fp8-amax-compute-algo", CLI_ARG_ONE),
    CANNOT("fp8-param-gather", CLI_ARG_NONE),
    /* --profile starts the CUDA profiler (nsys): it needs a GPU */
    {"profile", 0, CLI_ARG_NONE, CLI_REFUSED, NULL, "(it starts the CUDA profiler: needs a GPU and Nsight Systems)"},
    {"profile-step-start", 0, CLI_ARG_ONE, CLI_REFUSED, NULL, "(it goes with --profile, which needs a GPU)"},
    {"profile-step-end", 0, CLI_ARG_ONE, CLI_REFUSED, NULL, "(it goes with --profile, which needs a GPU)"},
};

/* Megatron-DeepSpeed's DeepSpeed flags, read for what they mean here. */
static const struct cli_option ds_options[] = {
    {"deepspeed", 0, CLI_ARG_NONE, O_DEEPSPEED, NULL, "read --deepspeed_config (DeepSpeed's engine settings)"},
    {"deepspeed_config", 0, CLI_ARG_ONE, O_DS_CONFIG, "FILE",
     "ds_config.json: batch sizes, clipping, ZeRO stage (1, 2: the distributed optimizer), fp16/bf16, scheduler"},
    {"zero-stage", 0, CLI_ARG_ONE, O_ZERO_STAGE, "N", "must agree with the JSON's zero_optimization.stage"},
    {"checkpoint-activations", 0, CLI_ARG_NONE, O_CKPT_ACT, NULL,
     "= --recompute-granularity full --recompute-method uniform, chunks of --checkpoint-num-layers"},
    {"checkpoint-num-layers", 0, CLI_ARG_ONE, O_CKPT_NUM, "N", "layers per checkpointed chunk (default 1)"},
    {"deepspeed-activation-checkpointing", 0, CLI_ARG_NONE, O_DS_ACT_CKPT, NULL,
     "accepted: which code recomputes (mds's model); alone it recomputes nothing"},
    {"partition-activations", 0, CLI_ARG_NONE, O_PARTITION_ACT, NULL,
     "accepted: DeepSpeed splits the checkpoints over TP ranks (memory only; mds keeps them whole)"},
    {"no-pipeline-parallel", 0, CLI_ARG_NONE, O_NO_PP, NULL, "the model without pipeline stages (PP must be 1)"},
    {"deepspeed_mpi", 0, CLI_ARG_NONE, O_DS_MPI, NULL, "accepted: mds finds an MPI launch itself"},
    {"cpu-optimizer", 0, CLI_ARG_NONE, O_CPU_OPT, NULL, "accepted: AdamW runs on the backend of --device"},
    {"ds-sequence-parallel-size", 0, CLI_ARG_ONE, O_DS_SP, "1", "only 1 (DeepSpeed-Ulysses is not implemented)"},
};

enum tokenizer_kind { TK_GPT2, TK_NULL, TK_OTHER };  /* TK_OTHER: tokenizer.h types */

struct config {
    int num_layers, hidden, heads, ffn, seq, maxpos;
    uint64_t mbs, gbs, exit_interval;
    train_schedule_args sched;        /* lr, warmup, decay, train length */
    double wd, clip, beta1, beta2, eps, init_std, norm_eps, hidden_dropout, attention_dropout;
    uint64_t seed;
    uint64_t log_interval, eval_interval, eval_iters;
    struct data_flags data;
    const char *vocab_file, *merge_file;
    const char *save, *load, *export_hf, *load_hf, *check_logits;
    uint64_t save_interval;
    int ckpt_torch_dist;             /* --ckpt-format torch_dist */
    int tokenizer, eod_mask, untie;
    int tok_type;                     /* enum tok_type with TK_OTHER */
    const char *tokenizer_model;
    int tp, pp, dist_opt;
    int device;                       /* -1 default, 0 cpu, 1 cuda */
    int op_times;                     /* --op-times */
    int timing_level, timing_option;  /* --timing-log-level, --timing-log-option (timers.h) */
    int l1_barrier;                   /* not --no-barrier-with-level-1-timing */
    int log_params_norm, log_num_zeros;   /* --log-params-norm, --log-num-zeros-in-grad */
    long logging_level;               /* --logging-level, else $MEGATRON_LOGGING_LEVEL, else 20 (INFO) */
    int device_comm;                  /* enum comm_want */
    uint64_t vocab_size_arg, vocab_div;
    int have_lr, have_layers, have_seq, have_maxpos, have_mbs;
    /* the Llama family (gpt_config's fields, Megatron's semantics) */
    int pos_type, use_rope, no_pos_emb, rotary_interleaved, use_rope_scaling, normalization, swiglu, gqa;
    int add_bias, kv_channels, ln1p, embed_ln;
    uint64_t rotary_base, query_groups;
    double rotary_percent, rope_scaling_factor;
    /* mixed precision */
    int bf16, fp16, grads_fp32, grads_bf16, per_token_loss, have_loss_scale;
    double loss_scale, initial_loss_scale, min_loss_scale;
    uint64_t loss_scale_window, hysteresis;
    double decoupled_lr, decoupled_min_lr;   /* Megatron's embedding/output learning-rate group */
    int have_decoupled_lr, have_decoupled_min_lr;
    unsigned scaler_given;            /* bits: initial, min, window, hysteresis given as flags */
    struct tb_flags tb;               /* --tensorboard-dir and its companions */
    int log_throughput;
    /* NullTokenizer */
    int null_legacy, have_null_eod;
    uint64_t null_eod;
    /* exits, resume, timeouts */
    double exit_duration, dist_timeout;         /* minutes; 0: none */
    int overlap_grad;                           /* --overlap-grad-reduce */
    int overlap_param;                          /* --overlap-param-gather */
    uint64_t ddp_bucket;                        /* --ddp-bucket-size; 0: Megatron's default */
    const char *kill_switch;
    int exit_signal_handler, exit_signal;   /* --exit-signal-handler, --exit-signal */
    int override_sched, use_ckpt_sched;
    int no_load_optim, no_load_rng, finetune;   /* Megatron's load_checkpoint flags */
    int no_save_optim;                /* --no-save-optim (torch_dist only) */
    uint64_t ckpt_step;               /* --ckpt-step (0: the latest) */
    int exit_on_missing;              /* --exit-on-missing-checkpoint */
    int skip_train;                   /* --skip-train */
    /* ramp-up and tokens */
    uint64_t rampup[3];                         /* START INCR SAMPLES; start 0: none */
    uint64_t train_tokens;                      /* 0: none */
    int have_clip;
    /* Megatron-DeepSpeed */
    int deepspeed, have_zero_stage, zero_stage, no_pp, have_gbs, ds_sp;
    const char *ds_config;
    train_ds_schedule ds_sched;       /* the config's "scheduler" (type TRAIN_DS_NONE: none) */
    uint64_t ds_train_batch;          /* DeepSpeed's train_batch_size */
    int seq_par;                      /* --sequence-parallel */
    /* activation recomputation */
    int recompute_act, ckpt_act, recompute_gran, recompute_method;   /* enum recompute_gran, enum gpt_recompute */
    uint64_t recompute_num, ckpt_num;                                 /* 0: not given */
};

enum recompute_gran { GRAN_NONE, GRAN_FULL, GRAN_SELECTIVE };

#define NTABLES 6
static struct cli_table tables[NTABLES];

/*
 * The backend of --device, else of $MDS_DEVICE (cpu or cuda; tests/run.sh
 * sets cpu so that the CPU's golden results hold on a GPU machine), else
 * cuda when this build has CUDA and every rank has a GPU of its own (one
 * process and a GPU, or NCCL's condition in comm_place), else cpu; then
 * the route of the collectives and this rank's GPU (comm_place, over the
 * host names of every rank: collective over the world).  A refusal is one
 * line from the lowest rank that has one (every rank learns of it), exit 2.
 */
static const char *device_how = "default";   /* how the backend was chosen, for the table */
static char placement_desc[256];             /* the GPU row of the table */
static comm_place_out placement;

static const mds_backend *choose_backend(const struct config *c, mds_comm *world)
{
    int want = c->device;
    const char *env = getenv("MDS_DEVICE");
    if (want < 0 && env && *env) {
        if (strcmp(env, "cpu") == 0) want = 0;
        else if (strcmp(env, "cuda") == 0) want = 1;
        else cli_usage("MDS_DEVICE='%s' is neither cpu nor cuda", env);
    }
    device_how = c->device >= 0 ? "--device" : want >= 0 ? "MDS_DEVICE" : "default";
    /* ask CUDA only when the GPU could be used: --device cpu starts no driver;
       MDS_TEST_GPU_COUNT (tests only, docs/cli.md) is the count comm_place
       sees, so its refusals can be checked end to end without a GPU */
    int ngpus = want != 0 ? mds_backend_devices("cuda") : 0;
    const char *fake = getenv("MDS_TEST_GPU_COUNT");
    if (want != 0 && fake && *fake) {
        char *end;
        long n = strtol(fake, &end, 10);
        if (*end || n < 0 || n > 1024) cli_usage("MDS_TEST_GPU_COUNT='%s' is not a GPU count", fake);
        ngpus = (int)n;
    }
    if (want == 1 && ngpus < 1) {
#ifdef MDS_HAVE_CUDA
        cli_usage("--device cuda: no CUDA device found (cudaGetDeviceCount found none or the driver is missing)");
#else
        cli_usage("--device cuda: this mdstrain was built without CUDA (make HAVE_CUDA=1 with nvcc installed)");
#endif
    }
    comm_place_in in = { .want = c->device_comm, .world_size = comm_size(world), .ngpus = ngpus,
                         .per_task = getenv("CUDA_VISIBLE_DEVICES") != NULL, .have_nccl = comm_have_nccl() };
    char host[64], why[512] = "";
    const char *source = "";
    if (comm_local(world, &in.local_rank, &in.local_size, &source, host, sizeof host) != 0)
        cli_die(1, "rank %d: gathering the host names: %s", comm_rank(world), comm_error());
    in.host = host;
    /* the default: the GPU when it fits as NCCL (or one process) wants it */
    in.gpu = want == 1 || (want < 0 && in.ngpus > 0);
    int rc = comm_place(&in, &placement, why, sizeof why);
    if (want < 0 && in.gpu && rc != 0) {
        in.gpu = 0;
        rc = comm_place(&in, &placement, why, sizeof why);
    }
    double first_bad = rc ? (double)(comm_size(world) - comm_rank(world)) : 0.0;
    if (comm_allreduce(world, &first_bad, 1, COMM_F64, COMM_MAX) < 0)
        cli_die(1, "rank %d: start-up all-reduce: %s", comm_rank(world), comm_error());
    if (first_bad > 0) {
        if (comm_size(world) - comm_rank(world) == (int)first_bad) {
            fprintf(stderr, "%s: rank %d: %s\n", cli.name, comm_rank(world), why);
            fprintf(stderr, "hint: %s --help, options --device and --device-comm\n", cli.name);
        }
        end_job(2);
    }
    if (!in.gpu) {
        snprintf(placement_desc, sizeof placement_desc, "none");
        return mds_backend_cpu();
    }
    const mds_backend *cu = mds_backend_find_device("cuda", placement.device);
    if (!cu && want < 0 && comm_size(world) == 1) {   /* a GPU seen but not usable: the CPU, as before */
        placement = (comm_place_out){COMM_ROUTE_HOST, -1, 0};
        snprintf(placement_desc, sizeof placement_desc, "none (GPU %d unusable)", in.local_rank);
        return mds_backend_cpu();
    }
    if (!cu) cli_die(1, "rank %d: cannot use GPU %d (cudaSetDevice or cuBLAS failed)", comm_rank(world), placement.device);
    snprintf(placement_desc, sizeof placement_desc, "GPU %d of %d = local rank %d (%s)%s", placement.device, in.ngpus,
             in.local_rank, source, placement.shared ? ", shared" : "");
    return cu;
}

/* comm.h's fatal line from a transport's own thread (an NCCL error or
 * timeout seen by its watcher): the same form as every error, then end. */
static void comm_fatal_line(const char *msg)
{
    fflush(stdout);
    fprintf(stderr, "%s: %s\n", cli.name, msg);
    _exit(1);
}

static void print_help(void)
{
    printf("usage: %s --num-layers N --hidden-size N --num-attention-heads N --seq-length N\n"
           "         --max-position-embeddings N --micro-batch-size N --lr X\n"
           "         (--train-iters N | --train-samples N) (--data-path PREFIX... | --mock-data) [options]\n"
           "   or: %s MODEL-FLAGS [--tensor/pipeline-model-parallel-size N] --load DIR --export-hf OUT\n\n"
           "Pretrain Megatron's GPT on the CPU reference kernels with Megatron-LM's flags, data\n"
           "samples, learning-rate schedule and log line (fp32).  In parallel: mpirun -np N %s ...\n"
           "or srun %s ... (Megatron's rank order: TP fastest, then DP, then PP).\n\n",
           cli.name, cli.name, cli.name, cli.name);
    cli_print_options(tables, NTABLES, 36);
    printf("\nExit status: 0 success, 1 runtime failure (data, NaN loss, memory), 2 bad usage.\n");
}

static void handle_option(void *ctx, const struct cli_option *o, const char *const *vals, size_t nvals)
{
    struct config *c = ctx;
    train_schedule_args *s = &c->sched;
    const char *v = nvals ? vals[0] : NULL;
    switch (o->id) {
    case O_NUM_LAYERS: c->num_layers = (int)cli_opt_u64(o, v, 1, 1 << 16); c->have_layers = 1; break;
    case O_HIDDEN: c->hidden = (int)cli_opt_u64(o, v, 1, 1 << 20); break;
    case O_HEADS: c->heads = (int)cli_opt_u64(o, v, 1, 1 << 16); break;
    case O_FFN: c->ffn = (int)cli_opt_u64(o, v, 1, 1 << 24); break;
    case O_SEQ: c->seq = (int)cli_opt_u64(o, v, 1, 1 << 24); c->have_seq = 1; break;
    case O_MAXPOS: c->maxpos = (int)cli_opt_u64(o, v, 1, 1 << 24); c->have_maxpos = 1; break;
    case O_MBS: c->mbs = cli_opt_u64(o, v, 1, 1 << 20); c->have_mbs = 1; break;
    case O_GBS: c->gbs = cli_opt_u64(o, v, 1, 1ull << 32); c->have_gbs = 1; break;
    case O_TRAIN_ITERS: s->train_iters = cli_opt_u64(o, v, 1, 1ull << 40); break;
    case O_TRAIN_SAMPLES: s->train_samples = cli_opt_u64(o, v, 1, 1ull << 50); break;
    case O_EXIT_INTERVAL: c->exit_interval = cli_opt_u64(o, v, 1, 1ull << 40); break;
    case O_LR: s->lr = cli_opt_double(o, v, 0, 1e6); c->have_lr = 1; break;
    case O_MIN_LR: s->min_lr = cli_opt_double(o, v, 0, 1e6); break;
    case O_DECOUPLED_LR: c->decoupled_lr = cli_opt_double(o, v, 0, 1e6); c->have_decoupled_lr = 1; break;
    case O_DECOUPLED_MIN_LR: c->decoupled_min_lr = cli_opt_double(o, v, 0, 1e6); c->have_decoupled_min_lr = 1; break;
    case O_LR_WARMUP_INIT: s->lr_warmup_init = cli_opt_double(o, v, 0, 1e6); break;
    case O_DECAY_STYLE:
        s->decay_style = cli_opt_choice(o, v, train_decay_names);
        break;
    case O_WARMUP_ITERS: s->lr_warmup_iters = cli_opt_u64(o, v, 0, 1ull << 40); break;
    case O_WARMUP_FRACTION: s->lr_warmup_fraction = cli_opt_double(o, v, 0, 1); s->have_warmup_fraction = 1; break;
    case O_WARMUP_SAMPLES: s->lr_warmup_samples = cli_opt_u64(o, v, 0, 1ull << 50); break;
    case O_WSD_STYLE: s->wsd_style = cli_opt_choice(o, v, train_wsd_names); break;
    case O_WSD_ITERS: s->lr_wsd_decay_iters = cli_opt_u64(o, v, 0, 1ull << 40); s->have_wsd_iters = 1; break;
    case O_WSD_SAMPLES: s->lr_wsd_decay_samples = cli_opt_u64(o, v, 0, 1ull << 50); s->have_wsd_samples = 1; break;
    case O_DECAY_ITERS: s->lr_decay_iters = cli_opt_u64(o, v, 1, 1ull << 40); s->have_decay_iters = 1; break;
    case O_DECAY_SAMPLES: s->lr_decay_samples = cli_opt_u64(o, v, 1, 1ull << 50); s->have_decay_samples = 1; break;
    case O_WD: c->wd = cli_opt_double(o, v, 0, 1e6); break;
    case O_CLIP: c->clip = cli_opt_double(o, v, 0, 1e30); c->have_clip = 1; break;
    case O_BETA1: c->beta1 = cli_opt_double(o, v, 0, 1); break;
    case O_BETA2: c->beta2 = cli_opt_double(o, v, 0, 1); break;
    case O_EPS: c->eps = cli_opt_double(o, v, 0, 1); break;
    case O_SEED: c->seed = cli_opt_u64(o, v, 0, UINT32_MAX); break;
    case O_LOG_INTERVAL: c->log_interval = cli_opt_u64(o, v, 1, 1ull << 40); break;
    case O_EVAL_INTERVAL: c->eval_interval = cli_opt_u64(o, v, 0, 1ull << 40); break;
    case O_EVAL_ITERS: c->eval_iters = cli_opt_u64(o, v, 0, 1ull << 32); break;
    case O_SAVE: c->save = v; break;
    case O_LOAD: c->load = v; break;
    case O_CKPT_STEP: c->ckpt_step = cli_opt_u64(o, v, 0, UINT64_MAX); break;
    case O_EXIT_ON_MISSING: c->exit_on_missing = 1; break;
    case O_SKIP_TRAIN: c->skip_train = 1; break;
    case O_WANDB:   /* Megatron: an empty project leaves W&B off */
        if (v[0] && !strcmp(o->lng, "wandb-project"))
            cli_usage("option '--wandb-project' %s is not supported (mds does not log to Weights & Biases; "
                      "--tensorboard-dir writes Megatron's scalars)", v);
        break;
    case O_EXPORT_HF: c->export_hf = v; break;
    case O_LOAD_HF: c->load_hf = v; break;
    case O_CHECK_LOGITS: c->check_logits = v; break;
    case O_SAVE_INTERVAL: c->save_interval = cli_opt_u64(o, v, 1, 1ull << 40); break;
    case O_CKPT_FORMAT:
        if (strcmp(v, "torch_dist"))
            cli_usage("option '--ckpt-format' %s is not supported (only torch_dist; without the flag mds saves its own "
                      "format in Megatron's legacy layout)", v);
        c->ckpt_torch_dist = 1;
        break;
    case O_VOCAB_FILE: c->vocab_file = v; break;
    case O_MERGE_FILE: c->merge_file = v; break;
    case O_TOKENIZER:
        if (strcmp(v, "GPT2BPETokenizer") == 0) c->tokenizer = TK_GPT2;
        else if (strcmp(v, "NullTokenizer") == 0) c->tokenizer = TK_NULL;
        else if ((c->tok_type = tok_type_from_name(v)) != 0) c->tokenizer = TK_OTHER;
        else cli_usage("tokenizer type '%s' is not supported (GPT2BPETokenizer, NullTokenizer, HuggingFaceTokenizer, "
                       "SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer)", v);
        break;
    case O_TOKENIZER_MODEL: c->tokenizer_model = v; break;
    case O_VOCAB_SIZE: c->vocab_size_arg = cli_opt_u64(o, v, 1, 1 << 30); break;
    case O_TP: c->tp = (int)cli_opt_u64(o, v, 1, 1 << 16); break;
    case O_DEVICE: c->device = cli_opt_choice(o, v, (const char *const[]){"cpu", "cuda", NULL}); break;
    case O_OP_TIMES: c->op_times = 1; break;
    case O_TIMING_LEVEL: c->timing_level = (int)cli_opt_u64(o, v, 0, 2); break;
    case O_TIMING_OPTION:
        c->timing_option = mds_timer_option(v);
        if (c->timing_option < 0) cli_usage("--timing-log-option: expected max, minmax or all, not '%s'", v);
        break;
    case O_NO_L1_BARRIER: c->l1_barrier = 0; break;
    case O_LOG_PARAMS_NORM: c->log_params_norm = 1; break;
    case O_LOG_NUM_ZEROS: c->log_num_zeros = 1; break;
    case O_LOGGING_LEVEL: c->logging_level = python_int(v, "--logging-level"); break;
    case O_DEVICE_COMM:
        c->device_comm = cli_opt_choice(o, v, (const char *const[]){"auto", "nccl", "host-staged", NULL});
        break;
    case O_PP: c->pp = (int)cli_opt_u64(o, v, 1, 1 << 16); break;
    case O_EOD_MASK: c->eod_mask = 1; break;
    case O_VOCAB_DIV: c->vocab_div = cli_opt_u64(o, v, 1, 1 << 20); break;
    case O_INIT_STD: c->init_std = cli_opt_double(o, v, 0, 1e3); break;
    case O_UNTIE: c->untie = 1; break;
    case O_NORM_EPS: c->norm_eps = cli_opt_double(o, v, 1e-30, 1); break;
    case O_HIDDEN_DROPOUT: c->hidden_dropout = cli_opt_double(o, v, 0, 0.999999); break;
    case O_ATTN_DROPOUT: c->attention_dropout = cli_opt_double(o, v, 0, 0.999999); break;
    case O_POS_TYPE:
        if (strcmp(v, "relative") == 0 || strcmp(v, "yarn") == 0 || strcmp(v, "mrope") == 0)
            cli_usage("option '--position-embedding-type' %s is not supported (learned_absolute, rope or none)", v);
        c->pos_type = cli_opt_choice(o, v, (const char *const[]){"learned_absolute", "rope", "none", NULL});
        break;
    case O_USE_ROPE: c->use_rope = 1; break;
    case O_NO_POS_EMB: c->no_pos_emb = 1; break;
    case O_ROTARY_BASE: c->rotary_base = cli_opt_u64(o, v, 1, 1ull << 40); break;
    case O_ROTARY_PERCENT: c->rotary_percent = cli_opt_double(o, v, 0, 1); break;
    case O_ROTARY_INTERLEAVED: c->rotary_interleaved = 1; break;
    case O_USE_ROPE_SCALING: c->use_rope_scaling = 1; break;
    case O_ROPE_SCALING_FACTOR: c->rope_scaling_factor = cli_opt_double(o, v, 1e-6, 1e6); break;
    case O_NORMALIZATION:
        /* Megatron-DeepSpeed spells them layernorm and rmsnorm */
        c->normalization = cli_opt_choice(o, v, (const char *const[]){"LayerNorm", "RMSNorm", "layernorm", "rmsnorm", NULL}) % 2;
        break;
    case O_SWIGLU: c->swiglu = 1; break;
    case O_GQA: c->gqa = 1; break;
    case O_QUERY_GROUPS: c->query_groups = cli_opt_u64(o, v, 1, 1 << 16); break;
    case O_LN1P: c->ln1p = 1; break;
    case O_EMBED_LN: c->embed_ln = 1; break;
    case O_KV_HEADS: c->query_groups = cli_opt_u64(o, v, 1, 1 << 16); c->gqa = 1; break;
    case O_DISABLE_BIAS: c->add_bias = 0; break;
    case O_KV_CHANNELS: c->kv_channels = (int)cli_opt_u64(o, v, 1, 1 << 20); break;
    case O_SOFTMAX_FP32: break;
    case O_BF16: c->bf16 = 1; break;
    case O_FP16: c->fp16 = 1; break;
    case O_LOSS_SCALE: c->loss_scale = cli_opt_double(o, v, 1e-30, 1e30); c->have_loss_scale = 1; break;
    case O_INITIAL_LOSS_SCALE: c->initial_loss_scale = cli_opt_double(o, v, 1e-30, 1e300); c->scaler_given |= 1; break;
    case O_MIN_LOSS_SCALE: c->min_loss_scale = cli_opt_double(o, v, 0, 1e300); c->scaler_given |= 2; break;
    case O_LOSS_SCALE_WINDOW: c->loss_scale_window = cli_opt_u64(o, v, 1, 1u << 30); c->scaler_given |= 4; break;
    case O_HYSTERESIS: c->hysteresis = cli_opt_u64(o, v, 1, 1u << 30); c->scaler_given |= 8; break;
    case O_GRADS_FP32: c->grads_fp32 = 1; break;
    case O_GRADS_BF16: c->grads_bf16 = 1; break;
    case O_PER_TOKEN_LOSS: c->per_token_loss = 1; break;
    case O_DIST_OPT: c->dist_opt = 1; break;
    case O_LOG_THROUGHPUT: c->log_throughput = 1; break;
    case O_CP:
        if (cli_opt_u64(o, v, 1, 1 << 16) != 1)
            cli_usage("option '--context-parallel-size' %s is not supported yet (only 1: no context parallelism)", v);
        break;
    case O_DS_SP:
        if (cli_opt_u64(o, v, 1, 1 << 16) != 1)
            cli_usage("option '--ds-sequence-parallel-size' %s is not supported (only 1: no DeepSpeed-Ulysses)", v);
        break;
    case O_DIST_BACKEND: cli_opt_choice(o, v, (const char *const[]){"nccl", "gloo", NULL}); break;
    case O_DATA_IMPL:
        if (cli_opt_choice(o, v, (const char *const[]){"mmap", "infer", "lazy", "cached", NULL}) >= 2)
            cli_usage("option '--%s' %s is not supported (only mmap, or infer, which finds mmap)", o->lng, v);
        break;
    case O_OPTIMIZER:
        if (strcmp(v, "adam") != 0)
            cli_usage("option '--optimizer' %s is not supported (only adam: Megatron's AdamW)", v);
        break;
    case O_DDP_IMPL: cli_opt_choice(o, v, (const char *const[]){"local", "torch", NULL}); break;
    case O_TRANSFORMER_IMPL:
        /* Megatron's default is transformer_engine; its layers compute the
           functions of the local spec (and save under the same torch_dist
           keys), which mds's kernels compute for either */
        if (strcmp(v, "local") != 0 && strcmp(v, "transformer_engine") != 0)
            cli_usage("option '--transformer-impl' %s is not supported (only local or transformer_engine: "
                      "the same model on mds's own kernels)", v);
        break;
    case O_NUM_WORKERS: cli_opt_u64(o, v, 0, 1 << 20); break;
    case O_DATALOADER:
        if (strcmp(v, "single") != 0)
            cli_usage("option '--dataloader-type' %s is not supported (only single: Megatron's sequential sampler; "
                      "cyclic reorders samples with PyTorch's randperm, external needs Python)", v);
        break;
    case O_ATTN_BACKEND:
        cli_opt_choice(o, v, (const char *const[]){"flash", "fused", "unfused", "local", "auto", NULL});
        break;
    case O_MCORE: case O_NO_ASYNC_TP: case O_NO_GRAD_FUSION: case O_FLASH_ATTN: case O_QK_SCALING:
    case O_SCHEDULING_ONLY:
    case O_NO_QK_SCALING: case O_MANUAL_GC: case O_DS_ACT_CKPT: case O_PARTITION_ACT: case O_DS_MPI: case O_CPU_OPT:
        break;
    case O_EMPTY_CACHE: cli_opt_u64(o, v, 0, 2); break;
    case O_TIKTOKEN_PATTERN: cli_opt_choice(o, v, (const char *const[]){"v1", "v2", NULL}); break;
    case O_OVERRIDE_SCHED: c->override_sched = 1; break;
    case O_USE_CKPT_SCHED: c->use_ckpt_sched = 1; break;
    case O_NO_LOAD_OPTIM: c->no_load_optim = 1; break;
    case O_NO_SAVE_OPTIM: c->no_save_optim = 1; break;
    case O_NO_LOAD_RNG: c->no_load_rng = 1; break;
    case O_FINETUNE: c->finetune = 1; break;
    case O_DIST_TIMEOUT: c->dist_timeout = cli_opt_double(o, v, 0, 1e9); break;
    case O_OVERLAP_GRAD: c->overlap_grad = 1; break;
    case O_OVERLAP_PARAM: c->overlap_param = 1; break;
    case O_DDP_BUCKET: c->ddp_bucket = cli_opt_u64(o, v, 1, UINT64_MAX / 8); break;
    case O_EXIT_DURATION: c->exit_duration = cli_opt_double(o, v, 0, 1e12); break;
    case O_KILL_SWITCH: c->kill_switch = v; break;
    case O_EXIT_SIGNAL_HANDLER: c->exit_signal_handler = 1; break;
    case O_EXIT_SIGNAL: c->exit_signal = signal_by_name(v); break;
    case O_MANUAL_GC_INTERVAL: cli_opt_u64(o, v, 0, UINT64_MAX); break;
    case O_NO_CHECK_NAN:
        cli_usage("option '--no-check-for-nan-in-loss-and-grad' is not supported (mds always ends the run at a "
                  "non-finite loss or gradient norm: training on would leave NaN weights)");
        break;
    case O_NULL_EOD: c->null_eod = cli_opt_u64(o, v, 0, 1 << 30); c->have_null_eod = 1; break;
    case O_NULL_LEGACY: c->null_legacy = 1; break;
    case O_RAMPUP:
        if (nvals != 3)
            cli_usage("expected the following format: --rampup-batch-size <start batch size> <batch size increment> "
                      "<ramp-up samples> (got %zu values)", nvals);
        for (int i = 0; i < 3; i++)
            c->rampup[i] = cli_opt_u64(o, vals[i], i < 2 ? 1 : 0, i < 2 ? 1ull << 32 : 1ull << 50);
        break;
    case O_TRAIN_TOKENS: c->train_tokens = cli_opt_u64(o, v, 1, 1ull << 62); break;
    case O_DECAY_TOKENS: s->lr_decay_tokens = cli_opt_u64(o, v, 1, 1ull << 62); s->have_decay_tokens = 1; break;
    case O_WARMUP_TOKENS: s->lr_warmup_tokens = cli_opt_u64(o, v, 0, 1ull << 62); s->have_warmup_tokens = 1; break;
    case O_DEEPSPEED: c->deepspeed = 1; break;
    case O_DS_CONFIG: c->ds_config = v; break;
    case O_RECOMPUTE_ACT: c->recompute_act = 1; break;
    case O_SEQ_PAR: c->seq_par = 1; break;
    case O_RECOMPUTE_GRAN:
        c->recompute_gran = 1 + cli_opt_choice(o, v, (const char *const[]){"full", "selective", NULL});
        break;
    case O_RECOMPUTE_METHOD:
        c->recompute_method = cli_opt_choice(o, v, (const char *const[]){"uniform", "block", NULL}) == 0
                                  ? GPT_RECOMPUTE_UNIFORM : GPT_RECOMPUTE_BLOCK;
        break;
    case O_RECOMPUTE_NUM: c->recompute_num = cli_opt_u64(o, v, 1, 1 << 20); break;
    case O_CKPT_ACT: c->ckpt_act = 1; break;
    case O_CKPT_NUM: c->ckpt_num = cli_opt_u64(o, v, 1, 1 << 20); break;
    case O_ZERO_STAGE: c->zero_stage = (int)cli_opt_u64(o, v, 0, 3); c->have_zero_stage = 1; break;
    case O_NO_PP: c->no_pp = 1; break;
    case O_QUIET: if (cli.verbosity > 0) cli.verbosity--; break;
    case O_VERBOSE: cli.verbosity++; break;
    case O_HELP:
        if (cli.speaks) print_help();
        cli_exit(0);
    case O_VERSION:
        if (cli.speaks)
            printf("%s %s (dataset library %s; %s)\n", cli.name, MDS_VERSION, ds_version_string(), comm_backend());
        cli_exit(0);
    }
}

/* Megatron's validate_args and TransformerConfig rules for recomputation,
 * after Megatron-DeepSpeed's --checkpoint-activations (full, uniform, chunks
 * of --checkpoint-num-layers, default 1) and --recompute-activations
 * (selective) set the granularity, in that order. */
static void check_recompute(struct config *c)
{
    int per_stage = c->pp > 0 ? c->num_layers / c->pp : c->num_layers;
    if (c->ckpt_act) {
        c->recompute_gran = GRAN_FULL;
        c->recompute_method = GPT_RECOMPUTE_UNIFORM;
        if (!c->recompute_num) c->recompute_num = c->ckpt_num ? c->ckpt_num : 1;
    }
    if (c->recompute_act) c->recompute_gran = GRAN_SELECTIVE;
    if (c->recompute_gran == GRAN_SELECTIVE && c->recompute_method)
        cli_usage("recompute method is not yet supported for selective recomputing granularity (--recompute-method)");
    if (c->recompute_gran == GRAN_SELECTIVE && c->recompute_num)
        cli_usage("when using recompute_granularity: selective recompute_num_layers must be None (--recompute-num-layers)");
    if (c->recompute_gran == GRAN_FULL && !c->recompute_method)
        cli_usage("using recompute_granularity: full so recompute_method must be \"block\" or \"uniform\" "
                  "(--recompute-method)");
    if (c->recompute_gran == GRAN_FULL && !c->recompute_num)
        cli_usage("when using recompute_granularity: full recompute_num_layers must be between 1 and "
                  "num_layers_per_pipeline_rank: %d (--recompute-num-layers)", per_stage);
    if (c->recompute_gran == GRAN_NONE && (c->recompute_method || c->recompute_num || c->ckpt_num))
        cli_note("note: --%s without --recompute-granularity full or --checkpoint-activations recomputes nothing "
                 "(as in Megatron)", c->recompute_method ? "recompute-method" : c->recompute_num ? "recompute-num-layers"
                                                                                         : "checkpoint-num-layers");
}

static void parse_args(int argc, char **argv, struct config *c)
{
    memset(c, 0, sizeof *c);
    c->sched.decay_style = TRAIN_DECAY_LINEAR;
    c->sched.wsd_style = -1;   /* (not given: exponential) */
    c->wd = 0.01;
    c->clip = 1.0;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->init_std = 0.02;
    c->norm_eps = 1e-5;
    c->hidden_dropout = c->attention_dropout = 0.1;   /* Megatron's defaults */
    c->seed = 1234;
    c->log_interval = 100;
    c->l1_barrier = 1;
    c->exit_signal = SIGTERM;
    /* Megatron's setup_logging: the flag, else the variable */
    const char *env_level = getenv("MEGATRON_LOGGING_LEVEL");
    c->logging_level = env_level ? python_int(env_level, "MEGATRON_LOGGING_LEVEL") : 20;   /* (INFO) */
    c->eval_interval = 1000;
    c->eval_iters = 100;
    c->vocab_div = 128;
    c->tokenizer = TK_GPT2;
    c->tp = c->pp = 1;
    c->device = -1;
    c->rotary_base = 10000;
    c->rotary_percent = 1.0;
    c->rope_scaling_factor = 8.0;
    c->query_groups = 1;
    c->add_bias = 1;
    c->initial_loss_scale = 4294967296.0;   /* Megatron's 2**32 */
    c->min_loss_scale = 1.0;
    c->loss_scale_window = 1000;
    c->hysteresis = 2;
    tables[0] = (struct cli_table){ "model", model_options, sizeof model_options / sizeof model_options[0],
                                    handle_option, c };
    tables[1] = data_flags_table(&c->data);
    tables[2] = (struct cli_table){ "training", train_options, sizeof train_options / sizeof train_options[0],
                                    handle_option, c };
    tables[3] = tb_flags_table(&c->tb);
    tables[4] = (struct cli_table){ "accepted for their meaning (values checked)", compat_options,
                                    sizeof compat_options / sizeof compat_options[0], handle_option, c };
    tables[5] = (struct cli_table){ "Megatron-DeepSpeed", ds_options, sizeof ds_options / sizeof ds_options[0],
                                    handle_option, c };
    cli_parse(tables, NTABLES, argc, argv, 1, NULL);

    /* Megatron's validate_args, for what exists here. */
    train_schedule_args *s = &c->sched;
    int infer = c->export_hf || c->check_logits;
    if (c->ln1p && (c->export_hf || c->load_hf))
        cli_usage("--apply-layernorm-1p with --%s is not supported yet (HuggingFace's norms store 1 + w)",
                  c->export_hf ? "export-hf" : "load-hf");
    if (c->no_save_optim && !c->ckpt_torch_dist)
        cli_usage("--no-save-optim needs --ckpt-format torch_dist (mds's own format always holds the optimizer's state)");
    if ((c->ckpt_step || c->exit_on_missing) && !c->load)
        cli_usage("--%s goes with --load", c->ckpt_step ? "ckpt-step" : "exit-on-missing-checkpoint");
    if ((c->no_load_optim || c->no_load_rng || c->finetune) && !c->load)
        cli_usage("--%s goes with --load", c->finetune ? "finetune" : c->no_load_optim ? "no-load-optim" : "no-load-rng");
    if (c->embed_ln && (c->export_hf || c->load_hf))
        cli_usage("--embed-layernorm with --%s is not supported (neither GPT2LMHeadModel nor LlamaForCausalLM has "
                  "an embedding LayerNorm)", c->export_hf ? "export-hf" : "load-hf");
    if (c->embed_ln && (c->ln1p || c->normalization == GPT_NORM_RMSNORM))
        cli_usage("--embed-layernorm with --%s is not defined by any reference (bigscience's is a plain LayerNorm)",
                  c->ln1p ? "apply-layernorm-1p" : "normalization RMSNorm");
    if (infer) {   /* no training: its flags may be left out */
        if (c->export_hf && (c->check_logits || c->load_hf))
            cli_usage("--export-hf goes alone (not with --%s)", c->check_logits ? "check-logits" : "load-hf");
        if (c->export_hf && !c->load) cli_usage("--export-hf needs --load (the checkpoint to export)");
        if (c->check_logits && !!c->load == !!c->load_hf) cli_usage("--check-logits needs one of --load and --load-hf");
        if (!c->have_seq) { c->seq = 1; c->have_seq = 1; }
        if (!c->have_mbs) { c->mbs = 1; c->have_mbs = 1; }
        c->have_lr = 1;
        if (!s->train_iters && !s->train_samples) s->train_iters = 1;
    }
    if (!c->have_layers) cli_usage("missing --num-layers");
    if (!c->hidden) cli_usage("missing --hidden-size");
    if (!c->heads) cli_usage("missing --num-attention-heads");
    if (!c->have_seq) cli_usage("missing --seq-length");
    if (!c->have_maxpos) cli_usage("missing --max-position-embeddings");
    if (!c->have_mbs) cli_usage("missing --micro-batch-size");
    if (!c->have_lr) cli_usage("missing --lr");
    if (c->hidden % c->heads) cli_usage("--hidden-size %d is not a multiple of --num-attention-heads %d", c->hidden, c->heads);
    if (c->maxpos < c->seq) cli_usage("--max-position-embeddings %d is less than --seq-length %d", c->maxpos, c->seq);
    /* Megatron's validate_args for the position embedding and attention */
    if (c->use_rope) c->pos_type = GPT_POS_ROPE;
    if (c->no_pos_emb && c->pos_type == GPT_POS_LEARNED) c->pos_type = GPT_POS_NONE;
    if (c->kv_channels && c->kv_channels != c->hidden / c->heads)
        cli_usage("option '--kv-channels' %d other than hidden size / heads (%d) is not supported", c->kv_channels,
                  c->hidden / c->heads);
    if (c->gqa && c->heads % (int)c->query_groups)
        cli_usage("--num-attention-heads %d is not a multiple of --num-query-groups %d", c->heads, (int)c->query_groups);
    if (c->fp16 && c->bf16) cli_usage("--fp16 and --bf16 are exclusive");
    if (c->have_decoupled_min_lr && !c->have_decoupled_lr)
        cli_usage("--decoupled-min-lr goes with --decoupled-lr (Megatron reads it only then)");
    if (c->have_loss_scale && !c->fp16) cli_usage("--loss-scale goes with --fp16");
    if (c->pos_type != GPT_POS_ROPE && (c->rotary_interleaved || c->use_rope_scaling))
        cli_usage("--rotary-interleaved and --use-rope-scaling need --position-embedding-type rope");
    if (c->gbs % c->mbs) cli_usage("--global-batch-size %" PRIu64 " is not a multiple of --micro-batch-size %" PRIu64, c->gbs, c->mbs);
    if (!!s->train_iters == !!s->train_samples) cli_usage("give exactly one of --train-iters and --train-samples");
    if (s->have_warmup_fraction && (s->lr_warmup_iters || s->lr_warmup_samples))
        cli_usage("--lr-warmup-fraction and --lr-warmup-iters/--lr-warmup-samples are exclusive");
    if (s->train_iters && (s->have_decay_samples || s->lr_warmup_samples))
        cli_usage("--lr-decay-samples and --lr-warmup-samples need --train-samples");
    if (s->train_samples && (s->have_decay_iters || s->lr_warmup_iters))
        cli_usage("--lr-decay-iters and --lr-warmup-iters need --train-iters");
    /* (Megatron reads only the one of the training's unit, and only for WSD) */
    if (s->train_iters && s->have_wsd_samples) cli_usage("--lr-wsd-decay-samples needs --train-samples");
    if (s->train_samples && s->have_wsd_iters) cli_usage("--lr-wsd-decay-iters needs --train-iters");
    if ((s->have_wsd_iters || s->have_wsd_samples || s->wsd_style >= 0) &&
        s->decay_style != TRAIN_DECAY_WSD)
        cli_usage("--lr-wsd-decay-%s goes with --lr-decay-style WSD",
                  s->have_wsd_iters ? "iters" : s->have_wsd_samples ? "samples" : "style");
    if (s->min_lr > s->lr) cli_usage("--min-lr %g is above --lr %g", s->min_lr, s->lr);
    if (!infer) data_flags_check(&c->data, 1);
    if (c->tokenizer == TK_NULL && !c->vocab_size_arg) cli_usage("NullTokenizer needs --vocab-size");
    if (c->tokenizer != TK_NULL && c->vocab_size_arg) cli_usage("--vocab-size goes with --tokenizer-type NullTokenizer");
    if (c->tokenizer == TK_OTHER && !c->tokenizer_model) cli_usage("%s needs --tokenizer-model", tok_type_name(c->tok_type));
    if (c->tokenizer != TK_NULL && (c->null_legacy || c->have_null_eod))
        cli_usage("--%s goes with --tokenizer-type NullTokenizer",
                  c->null_legacy ? "null-tokenizer-legacy" : "null-tokenizer-eod-id");
    if (c->null_legacy && c->have_null_eod)
        cli_usage("--null-tokenizer-legacy and --null-tokenizer-eod-id are exclusive (legacy: EOD = --vocab-size)");
    if (c->have_null_eod && c->null_eod >= c->vocab_size_arg)
        cli_usage("--null-tokenizer-eod-id %" PRIu64 " is not below --vocab-size %" PRIu64, c->null_eod,
                  c->vocab_size_arg);
    /* Megatron's OptimizerParamScheduler asserts this */
    if (c->override_sched && c->use_ckpt_sched)
        cli_usage("both --override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler are set");
    if ((c->ds_config || c->have_zero_stage) && !c->deepspeed)
        cli_usage("--%s goes with --deepspeed", c->ds_config ? "deepspeed_config" : "zero-stage");
    if (c->deepspeed && !c->ds_config)
        cli_usage("--deepspeed needs --deepspeed_config FILE (DeepSpeed requires a configuration)");
    if (c->deepspeed && (c->log_params_norm || c->log_num_zeros))
        cli_usage("--%s with --deepspeed: not implemented for Megatron-DeepSpeed's log line",
                  c->log_params_norm ? "log-params-norm" : "log-num-zeros-in-grad");
    if (c->deepspeed && c->timing_level > 0)
        cli_usage("--timing-log-level %d with --deepspeed: Megatron-DeepSpeed's timers are not implemented "
                  "(level 0 prints none of them)", c->timing_level);
    if (c->no_pp && c->pp != 1)
        cli_usage("--no-pipeline-parallel with --pipeline-model-parallel-size %d (it builds the model without stages)",
                  c->pp);
    if ((s->have_warmup_tokens || s->have_decay_tokens) && s->have_warmup_fraction)
        cli_usage("--lr-warmup-fraction does not combine with the token schedule (--lr-*-tokens)");
    check_recompute(c);
}

/* The global batch of every iteration and what it implies, now that the
 * data-parallel size is known: Megatron's update_train_iters (sample-based
 * training with a ramp-up), the divisibility Megatron asserts each
 * iteration (checked for every batch the ramp will reach), and
 * Megatron-DeepSpeed's warmup latch of a token decay. */
static void plan_batches(struct config *c, const train_rampup *r, int dp, train_schedule *sched)
{
    train_schedule_args *s = &c->sched;
    uint64_t unit = c->mbs * (uint64_t)dp;
    uint64_t consumed = 0;
    for (uint64_t k = 0; k < s->train_iters; k++) {
        uint64_t b = train_rampup_batch(r, consumed);
        if (b % unit)
            cli_usage("the ramp-up's global batch %" PRIu64 " (after %" PRIu64 " samples) is not divisible by "
                      "micro-batch size (%" PRIu64 ") times data parallel size (%d)", b, consumed, c->mbs, dp);
        if (b == c->gbs) break;   /* constant from here */
        consumed += b;
    }
    if (sched->decay_tokens >= 0 && sched->warmup_tokens < 0 &&
        train_rampup_warmup_tokens(r, sched->warmup_steps, (uint64_t)c->seq, &sched->latch_tokens) != 0)
        cli_usage("the warmup (%g samples) does not end with an iteration, so --lr-decay-tokens has no start "
                  "(Megatron-DeepSpeed fails there); give --lr-warmup-tokens", sched->warmup_steps);
}

/* One loss-scaler setting from the file against its flag: the file's value
 * (DeepSpeed's scaler runs under --deepspeed), a flag given as well must
 * agree. */
static double ds_scaler_value(const struct config *c, unsigned bit, const char *flag, double flag_value,
                              const char *key, double file_value, double deepspeed_default)
{
    double v = file_value >= 0 ? file_value : deepspeed_default;
    if ((c->scaler_given & bit) && flag_value != v)
        cli_usage("--%s %.17g but \"fp16\": \"%s\" %.17g%s in '%s' (DeepSpeed scales the loss, not Megatron)", flag,
                  flag_value, key, v, file_value >= 0 ? "" : " (DeepSpeed's default)", c->ds_config);
    return v;
}

/* The file's fp16 / bf16 sections: DeepSpeed's engine casts the model and
 * (fp16) runs its loss scaler, whose rule is Megatron's (halve after
 * `hysteresis` overflows, double after `loss_scale_window` clean steps,
 * never below `min_loss_scale`) with DeepSpeed's defaults: a start of 2^16,
 * not Megatron's 2^32.  A precision flag must agree with the file. */
static void ds_precision(struct config *c, const ds_config *d)
{
    if (d->fp16 && d->bf16)
        cli_usage("--deepspeed_config '%s': fp16 and bf16 are both enabled", c->ds_config);
    if ((c->fp16 && !d->fp16) || (c->bf16 && !d->bf16))
        cli_usage("--%s but \"%s\" is not enabled in '%s' (DeepSpeed's engine sets the precision)",
                  c->fp16 ? "fp16" : "bf16", c->fp16 ? "fp16" : "bf16", c->ds_config);
    if (d->fp16) c->fp16 = 1;
    if (d->bf16) c->bf16 = 1;
    if (!d->fp16) return;
    double ls = d->loss_scale >= 0 ? d->loss_scale : 0;   /* 0: dynamic */
    if (ls > 0) {
        if (c->have_loss_scale && c->loss_scale != ls)
            cli_usage("--loss-scale %.17g but \"fp16\": \"loss_scale\" %.17g in '%s'", c->loss_scale, ls, c->ds_config);
        c->loss_scale = ls;
        c->have_loss_scale = 1;
    } else if (c->have_loss_scale) {
        cli_usage("--loss-scale %.17g but a dynamic loss scale (\"fp16\": \"loss_scale\" 0) in '%s'", c->loss_scale,
                  c->ds_config);
    }
    double power = d->initial_scale_power >= 0 ? d->initial_scale_power : 16;
    if (power != floor(power) || power > 1000)
        cli_usage("--deepspeed_config '%s': \"fp16\": \"initial_scale_power\" %.17g is not an integer up to 1000",
                  c->ds_config, power);
    c->initial_loss_scale = ds_scaler_value(c, 1, "initial-loss-scale", c->initial_loss_scale, "initial_scale_power",
                                            d->initial_scale_power >= 0 ? ldexp(1.0, (int)power) : -1, 65536.0);
    c->min_loss_scale = ds_scaler_value(c, 2, "min-loss-scale", c->min_loss_scale, "min_loss_scale",
                                        d->min_loss_scale, 1.0);
    double window = ds_scaler_value(c, 4, "loss-scale-window", (double)c->loss_scale_window, "loss_scale_window",
                                    d->loss_scale_window, 1000.0);
    double hyst = ds_scaler_value(c, 8, "hysteresis", (double)c->hysteresis, "hysteresis", d->hysteresis, 2.0);
    if (!(window >= 1 && window <= (1u << 30) && window == floor(window)) ||
        !(hyst >= 1 && hyst <= (1u << 30) && hyst == floor(hyst)))
        cli_usage("--deepspeed_config '%s': \"fp16\": loss_scale_window and hysteresis must be positive integers",
                  c->ds_config);
    c->loss_scale_window = (uint64_t)window;
    c->hysteresis = (uint64_t)hyst;
}

/* Megatron-DeepSpeed's --deepspeed_config against the flags: DeepSpeed's
 * batch rule, then every value the flags also give must agree (a missing
 * flag takes the file's value); the ZeRO stage picks the optimizer. */
static void apply_ds_config(struct config *c, int dp, int speak)
{
    ds_config d;
    char err[600];
    int io;
    if (ds_config_read(c->ds_config, &d, &io, err, sizeof err) != 0) {
        if (io) cli_die(1, "--deepspeed_config: %s", err);
        cli_usage("--deepspeed_config %s", err);
    }
    if (d.refused[0])
        cli_usage("--deepspeed_config '%s': %s is not supported by mds", c->ds_config, d.refused);
    ds_precision(c, &d);
    uint64_t train, micro, gas;
    if (ds_config_batch(&d, (uint64_t)dp, &train, &micro, &gas, err, sizeof err) != 0)
        cli_usage("--deepspeed_config '%s': %s", c->ds_config, err);
    if (d.have_micro || d.have_train_batch) {
        if (c->mbs != micro)
            cli_usage("--micro-batch-size %" PRIu64 " but train_micro_batch_size_per_gpu %" PRIu64 " in '%s'", c->mbs,
                      micro, c->ds_config);
        if (c->have_gbs && c->gbs != train)
            cli_usage("--global-batch-size %" PRIu64 " but train_batch_size %" PRIu64 " in '%s'", c->gbs, train,
                      c->ds_config);
        c->gbs = train;
        c->have_gbs = 1;
    }
    (void)gas;   /* = G / (micro DP), as mds accumulates */
    double clip = d.have_clip ? d.clip : 0.0;   /* DeepSpeed clips only when gradient_clipping > 0 */
    /* Megatron-DeepSpeed hands the optimizer to DeepSpeed, which clips by
       the config alone: a different --clip-grad has no effect there, and
       none here, said once */
    if (c->have_clip && c->clip != clip && speak)
        cli_error("warning: --clip-grad %g has no effect under --deepspeed: DeepSpeed clips by gradient_clipping, "
                  "%g%s in '%s'", c->clip, clip, d.have_clip ? "" : " (absent: no clipping)", c->ds_config);
    c->clip = clip;
    int stage = d.have_stage ? d.stage : 0;
    if (c->have_zero_stage && c->zero_stage != stage)
        cli_usage("--zero-stage %d but zero_optimization.stage %d%s in '%s'", c->zero_stage, stage,
                  d.have_stage ? "" : " (absent)", c->ds_config);
    if (stage == 3)
        cli_usage("--deepspeed_config '%s': ZeRO stage 3 (sharded parameters) is not supported", c->ds_config);
    if (stage == 0 && c->dist_opt)
        cli_usage("--use-distributed-optimizer with ZeRO stage 0 in '%s'", c->ds_config);
    if (stage >= 1) c->dist_opt = 1;   /* 1: sharded AdamW state; 2: and gradients reduce-scattered into shards */
    c->zero_stage = stage;
    c->ds_sched = d.sched;
    c->ds_train_batch = train;
    if (d.sched_warning[0] && speak) cli_error("warning: --deepspeed_config '%s': %s", c->ds_config, d.sched_warning);
    if (d.sched.type && speak) {
        const char *name = d.sched.type == TRAIN_DS_WARMUP_LR ? "WarmupLR" : "WarmupDecayLR";
        if (c->no_pp)
            cli_error("warning: the \"scheduler\" %s of '%s' replaces the --lr schedule after the first step, as in "
                      "DeepSpeed before 0.14.5; stepped with train_batch_size %" PRIu64 " (DeepSpeed's fallback when "
                      "Megatron-DeepSpeed's lr_kwargs fail), it holds the learning rate at %.6g",
                      name, c->ds_config, train, train_ds_schedule_lr(&d.sched, (double)train));
        else
            cli_error("warning: the \"scheduler\" %s of '%s' replaces the --lr schedule after the first step, as in "
                      "DeepSpeed before 0.14.5 (its pipeline engine steps it once per step)", name, c->ds_config);
    }
}

/* The learning rates of the optimizer's parameter groups under the
 * config's scheduler, as Megatron-DeepSpeed ran it with DeepSpeed 0.10.3
 * to 0.14.4 (docs/cli.md, "Megatron-DeepSpeed's DeepSpeed flags"):
 * Megatron's OptimizerParamScheduler sets them once (its step(0) in
 * __init__), DeepSpeed's scheduler replaces it and sets them after each
 * successful step, and nothing else touches them. */
struct ds_lr {
    double lbi;              /* the scheduler's last_batch_iteration */
    double lr, lr_embed;     /* the groups' learning rates: the next step's */
};

static void ds_lr_start(struct ds_lr *d, const struct config *c, const train_schedule *s, const train_schedule *ds)
{
    d->lbi = c->ds_sched.last_batch_iteration;
    d->lr = train_schedule_lr_tokens(s, 0, 0);
    d->lr_embed = train_schedule_lr_tokens(ds, 0, 0);
}

/* engine._take_model_step: scheduler.step(**lr_kwargs).  With
 * --no-pipeline-parallel Megatron-DeepSpeed passes {'increment': n}, which
 * WarmupLR.step() does not take: the TypeError falls back to
 * step(train_batch_size), the same iteration every time.  DeepSpeed's
 * pipeline engine passes nothing: step() counts on by one. */
static void ds_lr_step(struct ds_lr *d, const struct config *c)
{
    d->lbi = c->no_pp ? (double)c->ds_train_batch : d->lbi + 1;
    d->lr = d->lr_embed = train_ds_schedule_lr(&c->ds_sched, d->lbi);
}

/* ---- output --------------------------------------------------------------- */

static void print_validation(const char *prefix, double loss)
{
    char s[512];
    double ppl = exp(loss < 20 ? loss : 20);   /* Megatron: math.exp(min(20, loss)) */
    int n = snprintf(s, sizeof s, " validation loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | ",
                     prefix, loss, ppl);
    char dash[520];
    int len = n + 1 < (int)sizeof dash ? n + 1 : (int)sizeof dash - 1;
    memset(dash, '-', (size_t)len);
    dash[len] = 0;
    printf("%s\n%s\n%s\n", dash, s, dash);
    fflush(stdout);
}

/* The end-of-training evaluation's prefix: Megatron-LM's, or under
   --deepspeed Megatron-DeepSpeed's (training.py at f4157bea, lines 254 and 261) */
static void valid_prefix(char *out, size_t cap, const struct config *c, uint64_t iteration, const char *set)
{
    if (c->deepspeed)
        snprintf(out, cap, "iteration %" PRIu64 " on %" PRIu64 "-sample draw from %s set", iteration,
                 c->eval_iters * c->gbs, set);
    else
        snprintf(out, cap, "iteration %" PRIu64 " on %s set", iteration, set);
}

static void timestamp(char *out, size_t cap)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(out + n, cap - n, ".%06ld", (long)tv.tv_usec);
}

static void format_eta(double sec, char *out, size_t cap)
{
    if (!(sec >= 0) || sec > 1e9) sec = 0;
    uint64_t s = (uint64_t)(sec + 0.5);
    snprintf(out, cap, "%" PRIu64 ":%02u:%02u", s / 3600, (unsigned)(s / 60 % 60), (unsigned)(s % 60));
}

/*
 * Megatron-DeepSpeed's training_log line, printed instead of Megatron-LM's
 * under --deepspeed (microsoft/Megatron-DeepSpeed megatron/training.py at
 * f4157bea, lines 1145-1187; argonne-lcf's at 4ab9532 prints the same
 * fields): no timestamp, no ETA, consumed tokens, actual seqlen, samples
 * per second, tgs and throughput_calculator's TFLOPs.  Which optional
 * fields appear follows DeepSpeed 0.14.4's engine (docs/cli.md).
 */
struct ds_log {
    int has_norm;     /* engine._global_grad_norm is not None */
    double norm;      /* the optimizer's last _global_grad_norm */
};

/* After a step: the optimizer wrapper DeepSpeed picked sets
   _global_grad_norm on a successful step only; ZeRO 1/2 holds 0. from its
   __init__, FP16_Optimizer and BF16_Optimizer nothing until their first
   step, a plain fp32 optimizer never (engine._take_model_step). */
static void ds_log_step(struct ds_log *d, const struct config *c, int skipped, double norm)
{
    int zero = c->zero_stage >= 1, wrapped = zero || c->fp16 || c->bf16;
    if (!wrapped) return;
    if (!skipped || c->bf16) {   /* BF16_Optimizer has no overflow check */
        d->norm = norm;
        d->has_norm = 1;
    } else if (zero && !d->has_norm) {
        d->norm = 0.0;
        d->has_norm = 1;
    }
}

/* utils.py throughput_calculator (f4157bea, lines 270-312) as written,
   integer divisions included: (2 // gqa) is 0 past 2 heads per group.
   The FLOPs of one iteration of batch samples; TFLOPs divides by seconds
   x world size x 10^12. */
static double ds_flops(const struct config *c, const gpt_model *m, uint64_t batch)
{
    double b = (double)batch, L = m->L, h = m->C, s = (double)c->seq, F = m->F, V = m->Vp;
    int heads = m->cfg.num_heads, gqa = heads / m->G;
    double head_dim = (double)(m->C / heads);
    double pre_post = b * L * (1 + 2 / gqa + 1) * h * h * s;
    double mha = b * L * 2 * head_dim * heads * s * s;
    double ffn = b * L * (m->cfg.swiglu ? 3 : 2) * F * h * s * 1;   /* num_experts_routed_to: topk 1 */
    double logit = b * V * h * s;
    double fwd = pre_post + mha + ffn + logit, total = fwd + 2 * fwd;
    if (c->ckpt_act || c->recompute_gran == GRAN_FULL) total += fwd;
    if (c->recompute_gran == GRAN_SELECTIVE) total += mha;
    return total * 2;   /* macs_per_flops */
}

static void print_ds_log(const struct config *c, const gpt_model *m, const struct ds_log *d, uint64_t iteration,
                         uint64_t train_iters, uint64_t consumed, uint64_t batch, double per_iter, double lr,
                         double avg, double scale, uint64_t skipped, int world_size)
{
    char opt[160] = "";
    size_t n = 0;
    /* loss scale: the optimizer has cur_scale (ZeRO 1/2: 1.0 unless fp16; FP16_Optimizer) */
    if (c->zero_stage >= 1 || c->fp16) n += (size_t)snprintf(opt + n, sizeof opt - n, " loss scale: %.1f |", scale);
    /* grad norm and num zeros: train_step's pipeline-engine branch only */
    if (!c->no_pp && d->has_norm) n += (size_t)snprintf(opt + n, sizeof opt - n, " grad norm: %.3f |", d->norm);
    if (!c->no_pp) snprintf(opt + n, sizeof opt - n, " num zeros: %.1f |", 0.0);
    char loss[48] = "";
    if (avg > 0.0) snprintf(loss, sizeof loss, " lm loss: %.6E |", avg);
    double samples_per_sec = (double)batch / per_iter;
    printf(" iteration %8" PRIu64 "/%8" PRIu64 " | consumed samples: %12" PRIu64 " | consumed tokens: %12" PRIu64
           " | elapsed time per iteration (ms): %.1f | learning rate: %.3E | global batch size: %5" PRIu64 " |%s%s"
           " actual seqlen: %5d | number of skipped iterations: %3d | number of nan iterations: %3d |"
           " samples per second: %.3f | tokens per gpu per second (tgs): %.3f | TFLOPs: %.2f |\n",
           iteration, train_iters, consumed, consumed * (uint64_t)c->seq, per_iter * 1000.0, lr, batch, loss, opt, c->seq,
           (int)skipped, 0, samples_per_sec, samples_per_sec * (double)c->seq / world_size,
           ds_flops(c, m, batch) / (per_iter * world_size * 1e12));
}


/* --ddp-bucket-size, or Megatron's default max(40M, 1M x DP) (DistributedDataParallel) */
static uint64_t bucket_size(const struct config *c, const train_layout *P)
{
    uint64_t d = 1000000u * (uint64_t)P->dp_size;
    return c->ddp_bucket ? c->ddp_bucket : d > 40000000u ? d : 40000000u;
}

static void print_config(const struct config *c, const gpt_model *m, const train_layout *P, int V, uint64_t nmicro,
                         const char *vocab)
{
    if (cli.verbosity < 2 || P->rank != 0) return;
    char data[256];
    data_flags_describe(&c->data, data, sizeof data);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    const char *sep = "+--------------------------------+----------------------------------------------------+";
    fprintf(stderr, "%s\n| %-30s | %-50s |\n%s\n", sep, "parameter", "value", sep);
#define ROW(k, ...) do { char v_[512]; snprintf(v_, sizeof v_, __VA_ARGS__); fprintf(stderr, "| %-30s | %-50.50s |\n", k, v_); } while (0)
    ROW("num layers", "%d", m->L);
    ROW("hidden size", "%d", m->C);
    ROW("attention heads", "%d (head size %d)", m->NH, m->C / m->NH);
    ROW("ffn hidden size", "%d", m->F);
    ROW("seq length / max positions", "%d / %d", m->T, m->maxT);
    ROW("vocab (padded)", "%d (%d)", V, m->Vp);
    ROW("output layer", "%s", c->untie ? "untied" : "tied to word embeddings");
    {
        const gpt_config *g = &m->cfg;
        char pos[96];
        if (g->position_embedding == GPT_POS_ROPE)
            snprintf(pos, sizeof pos, "rope (base %g, %d of %d channels%s%s)", g->rotary_base, m->rot, m->hs,
                     g->rotary_interleaved ? ", interleaved" : "", g->rope_scaling_factor > 0 ? ", llama3 scaling" : "");
        else
            snprintf(pos, sizeof pos, "%s", g->position_embedding == GPT_POS_NONE ? "none" : "learned absolute");
        ROW("position embedding", "%s", pos);
        ROW("norm / mlp / linear bias", "%s%s / %s / %s", g->normalization == GPT_NORM_RMSNORM ? "RMSNorm" : "LayerNorm",
            g->embed_layernorm ? " (+ embedding)" : "", g->swiglu ? "SwiGLU" : "GELU", g->add_bias_linear ? "yes" : "no");
        ROW("query groups", "%d%s", m->G, m->G == m->NH ? " (multi-head)" : " (grouped-query)");
    }
    ROW("parameters (rank 0)", "%zu", m->num_params);
    ROW("micro / global batch", "%" PRIu64 " / %" PRIu64 " (%" PRIu64 " micro-batches per DP rank)", c->mbs, c->gbs, nmicro);
    ROW("train iters", "%" PRIu64, c->sched.train_iters);
    if (c->rampup[0])
        ROW("batch ramp-up", "from %" PRIu64 " by %" PRIu64 " over %" PRIu64 " samples", c->rampup[0], c->rampup[1],
            c->rampup[2]);
    if (c->sched.have_warmup_tokens || c->sched.have_decay_tokens || c->train_tokens) {
        char w[24] = "-", d[24] = "-", tr[24] = "-";
        if (c->sched.have_warmup_tokens) snprintf(w, sizeof w, "%" PRIu64, c->sched.lr_warmup_tokens);
        if (c->sched.have_decay_tokens) snprintf(d, sizeof d, "%" PRIu64, c->sched.lr_decay_tokens);
        if (c->train_tokens) snprintf(tr, sizeof tr, "%" PRIu64, c->train_tokens);
        ROW("tokens: warmup / decay / train", "%s / %s / %s", w, d, tr);
    }
    if (c->deepspeed) {
        ROW("deepspeed config", "ZeRO stage %d, %s", c->zero_stage, c->ds_config);
        ROW("ds flops / iteration", "%.17g (throughput_calculator, at batch %" PRIu64 ")", ds_flops(c, m, c->gbs),
            c->gbs);
    }
    if (c->ds_sched.type) {
        const train_ds_schedule *d = &c->ds_sched;
        char total[40] = "";
        if (d->type == TRAIN_DS_WARMUP_DECAY_LR) snprintf(total, sizeof total, ", decay to %g", d->total_num_steps);
        if (c->no_pp)
            ROW("deepspeed scheduler", "%s, stepped with train_batch_size %" PRIu64,
                d->type == TRAIN_DS_WARMUP_LR ? "WarmupLR" : "WarmupDecayLR", c->ds_train_batch);
        else
            ROW("deepspeed scheduler", "%s, stepped by one", d->type == TRAIN_DS_WARMUP_LR ? "WarmupLR" : "WarmupDecayLR");
        ROW("ds warmup lr / steps", "%g to %g / %g (%s)%s", d->min_lr, d->max_lr, d->warmup_num_steps,
            d->linear ? "linear" : "log", total);
    }
    if (c->sched.decay_style == TRAIN_DECAY_WSD)
        ROW("lr / min lr / style", "%g / %g / WSD (%s, last %" PRIu64 " %s)", c->sched.lr, c->sched.min_lr,
            train_wsd_names[c->sched.wsd_style < 0 ? TRAIN_WSD_EXPONENTIAL : c->sched.wsd_style],
            c->sched.train_samples ? c->sched.lr_wsd_decay_samples : c->sched.lr_wsd_decay_iters,
            c->sched.train_samples ? "samples" : "iters");
    else
        ROW("lr / min lr / style", "%g / %g / %s", c->sched.lr, c->sched.min_lr, train_decay_names[c->sched.decay_style]);
    if (c->have_decoupled_lr)
        ROW("decoupled lr / min lr", "%g / %g (word embeddings, output layer)", c->decoupled_lr,
            c->have_decoupled_min_lr ? c->decoupled_min_lr : c->sched.min_lr);
    ROW("adam beta1 / beta2 / eps", "%g / %g / %g", c->beta1, c->beta2, c->eps);
    ROW("weight decay / clip grad", "%g / %g", c->wd, c->clip);
    ROW("init std / seed", "%g / %" PRIu64, c->init_std, c->seed);
    ROW("dropout hidden / attention", "%g / %g", c->hidden_dropout, c->attention_dropout);
    {
        char rc[96];
        if (c->recompute_gran != GRAN_FULL)
            snprintf(rc, sizeof rc, "%s (attention keeps no T x T probabilities)",
                     c->recompute_gran == GRAN_SELECTIVE ? "selective" : "none");
        else if (m->cfg.recompute_method == GPT_RECOMPUTE_UNIFORM)
            snprintf(rc, sizeof rc, "full, uniform: %d chunk(s) of %d layer(s) per stage", m->nck, m->rc_chunk);
        else
            snprintf(rc, sizeof rc, "full, block: %d of %d layers per stage", m->rc_layers, m->Ll);
        ROW("activation recomputation", "%s", rc);
    }
    ROW("activation memory (rank 0)", "%zu bytes (%.1f MiB, %d slot%s)", gpt_activation_bytes(m),
        (double)gpt_activation_bytes(m) / 1048576.0, m->slots, m->slots == 1 ? "" : "s");
    {
        size_t now, peak, fr, tot;
        m->be->mem_held(&now, &peak);
        ROW("memory held (rank 0)", "%zu bytes (%.1f MiB) on %s before training", now, (double)now / 1048576.0,
            m->be->name);
        if (strcmp(m->be->name, "cpu") != 0 && m->be->mem_info(&fr, &tot) == 0)   /* the host's is not ours */
            ROW("device memory in use", "%zu of %zu bytes (every process's)", tot - fr, tot);
    }
    ROW("model FLOPs per token", "%.0f (fwd + bwd, causal attention)", gpt_flops_per_token(m));
    ROW("data", "%s", data);
    ROW("split", "%s", c->data.mock ? "1,1,1 (mock)" : c->data.npath ? (c->data.split ? c->data.split : "969, 30, 1")
                                                                     : "none (a data path per split)");
    ROW("tokenizer", "%s", vocab);
    ROW("eod mask loss", "%s", c->eod_mask ? "yes" : "no");
    ROW("log, eval interval / iters", "%" PRIu64 " / %" PRIu64 ", %" PRIu64, c->log_interval, c->eval_interval, c->eval_iters);
    ROW("parallel (TP, PP, DP)", "%d, %d, %d%s%s; %d OpenMP threads", P->tp_size, P->pp_size, P->dp_size,
        m->sp ? ", sequence parallel" : "", c->dist_opt ? ", distributed optimizer" : "", threads);
    if (c->overlap_grad) {   /* --overlap-grad-reduce: what it does in this layout */
        char how[96];
        if (P->dp_size == 1) snprintf(how, sizeof how, "nothing to overlap (DP 1)");
        else snprintf(how, sizeof how, "overlapped: %s, buckets of %" PRIu64,
                      c->dist_opt ? "reduce-scatter" : "all-reduce", bucket_size(c, P));
        ROW("gradient reduce", "%s", how);
    }
    if (c->overlap_param)
        ROW("parameter gather", "%s", P->dp_size == 1 ? "nothing to overlap (DP 1)"
                                                       : "overlapped: all-gathers in the forward");
    ROW("backend", "%s (%s; %s)", m->be->name, m->be->device, device_how);
    ROW("GPU (rank 0)", "%s", placement_desc);
    ROW("precision", "%s, main grads %s", mds_dtype_name(m->cfg.dtype), mds_dtype_name(m->cfg.grad_dtype));
    if (c->fp16)
        ROW("loss scale", c->have_loss_scale ? "%g (constant)" : "dynamic from %g (min %g, window %" PRIu64
            ", hysteresis %" PRIu64 ")", c->have_loss_scale ? c->loss_scale : c->initial_loss_scale, c->min_loss_scale,
            c->loss_scale_window, c->hysteresis);
    if (placement.route == COMM_ROUTE_NCCL)
        ROW("communication", "%s + %s (host buffers)", comm_transport(P->world), comm_backend());
    else if (placement.route == COMM_ROUTE_STAGED)
        ROW("communication", "%s, host-staged", comm_backend());
    else
        ROW("communication", "%s", comm_backend());
#undef ROW
    fprintf(stderr, "%s\n", sep);
}

/* The end of the run: Megatron's report_memory line (training/utils,
 * printed by data-parallel rank 0 of every model-parallel rank), in MB of
 * 2^20 bytes.  mds has no caching allocator, so "reserved" is what it
 * holds; "max allocated" is the backend's high-water mark (mem_held), the
 * peak memory make bench-gpu reports.  A GPU adds the device-wide figure
 * of --log-device-memory-used (cudaMemGetInfo: every process's). */
static void report_memory(const mds_backend *be, int rank, uint64_t iteration)
{
    const double mb = 1048576.0;
    size_t now, peak, fr, tot;
    be->mem_held(&now, &peak);
    char dev[80] = "";
    if (strcmp(be->name, "cpu") != 0 && be->mem_info(&fr, &tot) == 0)
        snprintf(dev, sizeof dev, " | total device memory used: %.2f", (double)(tot - fr) / mb);
    fprintf(stderr, "[Rank %d] (after %" PRIu64 " iterations) memory (MB) | allocated: %.2f | max allocated: %.2f"
            " | reserved: %.2f | max reserved: %.2f%s\n", rank, iteration, (double)now / mb, (double)peak / mb,
            (double)now / mb, (double)peak / mb, dev);
}

/* -v -v: what each group's collectives moved per training iteration on
 * this rank (evaluation and checkpoints included when they ran). */
static void report_comm(const train_layout *P, uint64_t iters, double seconds)
{
    static const char *const kinds[COMM_K_NUM] = {"all-reduce", "reduce-scatter", "all-gather", "broadcast",
                                                  "send/recv"};
    const mds_comm *groups[] = {P->tp, P->dp, P->pp, P->mp, P->emb, P->world};
    static const char *const names[] = {"tp", "dp", "pp", "mp", "emb", "world"};
    char line[1024];
    int n = snprintf(line, sizeof line, "[rank %d] (t %d, d %d, p %d) %.1f ms/iter; per iteration:", P->rank,
                     P->tp_rank, P->dp_rank, P->pp_rank, seconds * 1000.0 / (double)iters);
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        comm_stats s;
        comm_get_stats(groups[g], &s);
        for (int k = 0; k < COMM_K_NUM; k++)
            if (s.calls[k] && n < (int)sizeof line)
                n += snprintf(line + n, sizeof line - (size_t)n, " %s %s %.1f calls %.0f bytes;", names[g], kinds[k],
                              (double)s.calls[k] / (double)iters, (double)s.bytes_sent[k] / (double)iters);
        if (s.bytes_staged && n < (int)sizeof line)
            n += snprintf(line + n, sizeof line - (size_t)n, " %s host-staged %.0f bytes;", names[g],
                          (double)s.bytes_staged / (double)iters);
    }
    fprintf(stderr, "%s\n", line);
}

/* ---- checkpoints: Megatron's save_checkpoint / load_checkpoint --------------- */

/* The last step's overlapped parameter all-gathers (--overlap-param-gather)
 * finished, before a collective on the world between two steps (trainer.h,
 * trainer_params_sync: a host transport carries one group's messages at a
 * time between two ranks). */
static void settle_gathers(trainer *t)
{
    if (trainer_params_sync(t) != 0) cli_die(1, "%s", t->err);
}

/* Megatron's timers (train/timers.h; tm NULL under --deepspeed): a failed
 * sync, barrier or gather ends the run. */
static void timer_start(mds_timers *tm, int id, int barrier)
{
    if (mds_timers_start(tm, id, barrier) != 0) cli_die(1, "rank %d: %s", comm_rank(tm->world), tm->err);
}

static void timer_stop(mds_timers *tm, int id, int barrier)
{
    if (mds_timers_stop(tm, id, barrier) != 0) cli_die(1, "rank %d: %s", comm_rank(tm->world), tm->err);
}

/* Python logging's effective level for Megatron's logger lines (main sets
 * it from the config's). */
static long logging_level = 20;

/* Timers.log(names, normalizer): collective; printed by the last rank
 * through logger.info (nothing above INFO) */
static void timers_log(mds_timers *tm, const char *const *names, size_t n, double normalizer)
{
    int printer = tm && logging_level <= 20 ? comm_size(tm->world) - 1 : -1;
    if (tm && mds_timers_log(tm, names, n, normalizer, 1, printer, stdout) != 0)
        cli_die(1, "rank %d: %s", comm_rank(tm->world), tm->err);
}

static void timer_log(mds_timers *tm, int id)
{
    const char *name = mds_timer_name(id);
    timers_log(tm, &name, 1, 1.0);
}

static void save_checkpoint(const struct config *c, trainer *t, const train_schedule *s, const struct ds_lr *dl,
                            uint64_t iteration, uint64_t consumed, uint64_t sched_steps, uint64_t valid_cursor)
{
    ckpt_state st = {0};
    st.iteration = iteration;
    st.consumed_train_samples = consumed;
    st.consumed_valid_samples = valid_cursor;
    st.max_lr = s->max_lr;
    st.min_lr = s->min_lr;
    st.init_lr = s->init_lr;
    st.warmup_steps = s->warmup_steps;
    st.decay_steps = s->decay_steps;
    st.num_steps = (double)sched_steps;
    st.decay_style = (uint32_t)s->style;
    st.loss_scale = t->scaler.scale;
    st.growth_tracker = (uint32_t)t->scaler.growth_tracker;
    st.hysteresis_tracker = (uint32_t)t->scaler.hysteresis_tracker;
    if (c->ds_sched.type) {   /* DeepSpeed saves the scheduler's state and the optimizer's groups */
        st.ds_scheduler = 1;
        st.ds_last_batch_iteration = dl->lbi;
        st.ds_lr = dl->lr;
        st.ds_lr_embed = dl->lr_embed;
    }
    double t0 = cli_now();
    timer_start(t->cfg.timers, TM_SAVE_CHECKPOINT, 0);
    if ((c->ckpt_torch_dist ? trainer_save_torch_dist(t, c->save, &st) : trainer_save(t, c->save, &st)) != 0)
        cli_die(1, "%s\nhint: check the space and permissions of --save", t->err);
    timer_stop(t->cfg.timers, TM_SAVE_CHECKPOINT, 0);
    const train_layout *P = t->P;
    cli_note("  successfully saved checkpoint from iteration %7" PRIu64 " to %s [ t %d/%d, p %d/%d ] (%.2f s)", iteration,
             c->save, P->tp_rank + 1, P->tp_size, P->pp_rank + 1, P->pp_size, cli_now() - t0);
    timer_log(t->cfg.timers, TM_SAVE_CHECKPOINT);
}

/* save_checkpoint with --save, unless this iteration was saved already */
static void save_once(const struct config *c, trainer *t, const train_schedule *s, const struct ds_lr *dl,
                      uint64_t iteration, uint64_t consumed, uint64_t sched_steps, uint64_t valid_cursor,
                      uint64_t *last_saved)
{
    if (!c->save || *last_saved == iteration) return;
    save_checkpoint(c, t, s, dl, iteration, consumed, sched_steps, valid_cursor);
    *last_saved = iteration;
}

/* Megatron's evaluate(): the loss of iters global batches of split from
 * *cursor, within its evaluate timer (logged before the caller prints the
 * loss). */
static double evaluate(trainer *t, int split, uint64_t *cursor, uint64_t iters)
{
    double loss;
    settle_gathers(t);   /* (before the timer's barrier) */
    timer_start(t->cfg.timers, TM_EVALUATE, 1);
    if (trainer_evaluate(t, split, cursor, iters, &loss) != 0)
        cli_die(1, "%s", t->err);
    timer_stop(t->cfg.timers, TM_EVALUATE, 0);
    timer_log(t->cfg.timers, TM_EVALUATE);
    return loss;
}

/* Megatron's _check_and_set: the schedule must be the checkpoint's. */
static void check_sched(const char *dir, const char *name, double ours, double theirs)
{
    if (ours != theirs)
        cli_die(1, "checkpoint in '%s': lr scheduler %s is %.17g in the checkpoint but %.17g in this run\n"
                   "hint: resume with the --lr, --min-lr, --lr-warmup-*, --lr-decay-* and --train-* values of the saved run,\n"
                   "or give --override-opt_param-scheduler (this run's) or --use-checkpoint-opt_param-scheduler (the saved one)",
                dir, name, theirs, ours);
}

/* The counters, the schedule (checked against this run's flags, or taken,
 * or overridden, as Megatron's _check_and_set) and the loss scale of a
 * checkpoint whose optimizer state was restored. */
static void resume_state(const struct config *c, trainer *t, train_schedule *s, struct ds_lr *dl, const ckpt_state *st,
                         uint64_t *iteration, uint64_t *consumed, uint64_t *sched_steps, uint64_t *valid_cursor)
{
    if (st->ds_scheduler != (c->ds_sched.type != 0))
        /* DeepSpeed hands the saved scheduler state to the other kind of
           scheduler, whose load_state_dict fails (KeyError) */
        cli_die(1, "checkpoint in '%s': saved %s a DeepSpeed config \"scheduler\" but this run has %s", c->load,
                st->ds_scheduler ? "with" : "without", st->ds_scheduler ? "none" : "one");
    if (c->ds_sched.type) {
        /* WarmupLR.load_state_dict takes last_batch_iteration; the optimizer's
           groups come back with their learning rates; Megatron's schedule
           flags are not compared (its scheduler is not DeepSpeed's) */
        dl->lbi = st->ds_last_batch_iteration;
        dl->lr = st->ds_lr;
        dl->lr_embed = st->ds_lr_embed;
        if (c->override_sched || c->use_ckpt_sched)
            cli_note(" > --%s-opt_param-scheduler has no effect: the DeepSpeed config's scheduler restores its own state",
                     c->override_sched ? "override" : "use-checkpoint");
    } else if (c->use_ckpt_sched) {
        /* Megatron's _check_and_set with use_checkpoint_opt_param_scheduler */
        if (st->decay_style >= TRAIN_DECAY_COUNT)
            cli_die(1, "checkpoint in '%s': unknown lr scheduler decay style %u", c->load, st->decay_style);
        s->style = (int)st->decay_style;
        s->max_lr = st->max_lr;
        s->min_lr = st->min_lr;
        s->init_lr = st->init_lr;
        s->warmup_steps = st->warmup_steps;
        s->decay_steps = st->decay_steps;
        cli_note(" > using the checkpoint's learning-rate schedule (--use-checkpoint-opt_param-scheduler)");
    } else if (c->override_sched) {
        cli_note(" > overriding the checkpoint's learning-rate schedule with this run's (--override-opt_param-scheduler)");
    } else {
        if (st->decay_style != (uint32_t)s->style)
            cli_die(1, "checkpoint in '%s': lr scheduler decay style is %s in the checkpoint but %s in this run", c->load,
                    st->decay_style < TRAIN_DECAY_COUNT ? train_decay_names[st->decay_style] : "unknown",
                    train_decay_names[s->style]);
        check_sched(c->load, "max lr", s->max_lr, st->max_lr);
        check_sched(c->load, "min lr", s->min_lr, st->min_lr);
        check_sched(c->load, "warmup init lr", s->init_lr, st->init_lr);
        check_sched(c->load, "warmup steps", s->warmup_steps, st->warmup_steps);
        check_sched(c->load, "decay steps", s->decay_steps, st->decay_steps);
    }
    /* the scheduler advances on successful steps only (skipped --fp16
       iterations consume samples but do not step it) */
    if (!(st->num_steps >= 0 && st->num_steps <= (double)st->consumed_train_samples && st->num_steps == floor(st->num_steps)))
        cli_die(1, "checkpoint in '%s': lr scheduler num steps %.17g is not a sample count within the consumed %" PRIu64,
                c->load, st->num_steps, st->consumed_train_samples);
    *iteration = st->iteration;
    *consumed = st->consumed_train_samples;
    *sched_steps = (uint64_t)st->num_steps;
    if (t->scaler.enabled) {   /* Megatron restores the grad scaler's state */
        t->scaler.scale = st->loss_scale;
        t->scaler.growth_tracker = (int)st->growth_tracker;
        t->scaler.hysteresis_tracker = (int)st->hysteresis_tracker;
    }
    *valid_cursor = st->consumed_valid_samples;
}

/* Whether --load's iteration directory is a torch_dist checkpoint; an
 * unfinished one (no metadata.json) ends the run. */
static int torch_dist_dir(const char *iter_dir)
{
    int k = td_is_checkpoint(iter_dir);
    if (k < 0)
        cli_die(1, "'%s': a .metadata without metadata.json: an unfinished torch_dist save (metadata.json is written last)\n"
                   "hint: load an earlier iteration", iter_dir);
    return k;
}

/* --no-load-optim / --finetune after a checkpoint restored everything:
 * AdamW's moments and step as a fresh optimizer has them (Megatron builds
 * its optimizer and scheduler afresh and skips their state). */
static void fresh_optimizer(trainer *t)
{
    gpt_model *m = t->m;
    if (gpt_state_write_pieces(m, GPT_STATE_ADAM_M, NULL) != 0 || gpt_state_write_pieces(m, GPT_STATE_ADAM_V, NULL) != 0)
        cli_die(1, "cannot reset the optimizer state");
    m->step = 0;
}

/* Megatron's check_checkpoint_args for a torch_dist checkpoint's saved
 * args: the model's sizes, and with a vocab file (GPT2BPETokenizer) the
 * positions, the padding multiple and the tokenizer; a field the args lack
 * is not compared (Megatron would stop on the missing attribute). */
static void check_checkpoint_args(const struct config *c, const char *iter_dir, const td_state *st)
{
    const struct { const char *name; int64_t ckpt, run; int vocab_file; } f[] = {
        { "num_layers", st->args_num_layers, c->num_layers, 0 },
        { "hidden_size", st->args_hidden_size, c->hidden, 0 },
        { "num_attention_heads", st->args_num_attention_heads, c->heads, 0 },
        { "max_position_embeddings", st->args_max_position_embeddings, c->maxpos, 1 },
        { "make_vocab_size_divisible_by", st->args_make_vocab_size_divisible_by, (int64_t)c->vocab_div, 1 },
    };
    int vocab_file = c->tokenizer == TK_GPT2;
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (f[i].ckpt >= 0 && (!f[i].vocab_file || vocab_file) && f[i].ckpt != f[i].run)
            cli_die(1, "'%s': %s is %" PRId64 " in the checkpoint's args but %" PRId64 " in this run", iter_dir, f[i].name,
                    f[i].ckpt, f[i].run);
    if (vocab_file && st->args_tokenizer_type[0] && strcmp(st->args_tokenizer_type, "GPT2BPETokenizer"))
        cli_die(1, "'%s': tokenizer_type is %s in the checkpoint's args but GPT2BPETokenizer in this run", iter_dir,
                st->args_tokenizer_type);
}

/* Megatron's load_checkpoint of a torch_dist directory (iter_dir): the
 * model from whatever TP/PP wrote it; the optimizer and the RNG state are
 * asked for unless --no-load-optim / --no-load-rng / --finetune (or the
 * saved args' --no-save-optim / --no-save-rng) say not to, and a
 * checkpoint without them then fails as Megatron's load does (missing
 * keys).  Iteration from the common state, consumed samples from
 * its args (0 without them, as Megatron leaves them); the schedule starts
 * afresh with the optimizer. */
static int load_torch_dist(const struct config *c, trainer *t, train_schedule *s, struct ds_lr *dl, const char *iter_dir,
                           uint64_t *iteration, uint64_t *consumed, uint64_t *sched_steps, uint64_t *valid_cursor)
{
    char err[4600];
    const train_layout *P = t->P;
    td_state st;
    if (c->embed_ln)
        cli_usage("--embed-layernorm with a torch_dist checkpoint is not supported (Megatron-Core has no key for it)");
    if (td_load(t->m, iter_dir, &st, err, sizeof err) != 0)
        cli_die(1, "rank %d: cannot load the checkpoint: %s\nhint: resume with the model flags of the saved run", P->rank, err);
    int optim = !c->no_load_optim && !c->finetune && !st.args_no_save_optim;
    if (optim && !st.has_optimizer)
        cli_die(1, "'%s': no optimizer state (optimizer.*) in the checkpoint\n"
                   "hint: give --no-load-optim (or --finetune) to start AdamW afresh, as Megatron needs too", iter_dir);
    /* Megatron asks for the RNG state when the checkpoint's args give this
       run's TP and PP (1 and 1 without args); mds has none to restore */
    if (!c->no_load_rng && !c->finetune && !st.has_rng && !st.args_no_save_rng && st.args_tp == P->tp_size &&
        st.args_pp == P->pp_size)
        cli_die(1, "'%s': no RNG state (rng_state) in the checkpoint\nhint: give --no-load-rng (or --finetune), as Megatron needs too",
                iter_dir);
    if (st.has_args && !c->finetune)
        check_checkpoint_args(c, iter_dir, &st);
    if (optim) {   /* AdamW, then the schedule as a legacy checkpoint's */
        if (td_load_optimizer(t->m, iter_dir, &st, err, sizeof err) != 0)
            cli_die(1, "rank %d: cannot load the optimizer state: %s\nhint: --no-load-optim starts AdamW afresh", P->rank, err);
        if (!st.has_scheduler)   /* Megatron: KeyError on state_dict['opt_param_scheduler'] */
            cli_die(1, "'%s': no opt_param_scheduler in the common state\nhint: --no-load-optim", iter_dir);
        ckpt_state cs = {0};
        cs.iteration = st.iteration;
        cs.consumed_train_samples = st.consumed_train_samples;
        cs.consumed_valid_samples = st.consumed_valid_samples;
        cs.max_lr = st.sched_max_lr;
        cs.min_lr = st.sched_min_lr;
        cs.init_lr = s->init_lr;   /* not in Megatron's scheduler state */
        cs.warmup_steps = st.sched_warmup_steps;
        cs.decay_steps = st.sched_decay_steps;
        cs.num_steps = st.sched_num_steps;
        cs.decay_style = TRAIN_DECAY_COUNT;
        for (uint32_t k = 0; k < TRAIN_DECAY_COUNT; k++)
            if (!strcmp(st.sched_decay_style, train_decay_names[k])) cs.decay_style = k;
        if (cs.decay_style == TRAIN_DECAY_COUNT)
            cli_die(1, "'%s': lr decay style '%s' in the checkpoint is not implemented (constant, linear, cosine, "
                    "inverse-square-root, WSD)", iter_dir, st.sched_decay_style);
        cs.loss_scale = t->scaler.scale;   /* the grad scaler (--fp16) is not read yet */
        cs.growth_tracker = (uint32_t)t->scaler.growth_tracker;
        cs.hysteresis_tracker = (uint32_t)t->scaler.hysteresis_tracker;
        if (t->scaler.enabled)
            cli_die(1, "'%s': reading --fp16's grad scaler from a torch_dist checkpoint is not implemented\n"
                       "hint: --no-load-optim", iter_dir);
        resume_state(c, t, s, dl, &cs, iteration, consumed, sched_steps, valid_cursor);
        cli_note("  successfully loaded torch_dist checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %" PRIu64
                 " (with the optimizer state)", c->load, P->tp_rank + 1, P->tp_size, P->pp_rank + 1, P->pp_size, *iteration);
        return 1;
    }
    *iteration = c->finetune ? 0 : st.iteration;
    *consumed = c->finetune ? 0 : st.consumed_train_samples;
    *valid_cursor = c->finetune ? 0 : st.consumed_valid_samples;
    *sched_steps = 0;
    if (!st.has_args) cli_note(" could not find arguments in the checkpoint: consumed samples start at 0");
    cli_note("  successfully loaded torch_dist checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %" PRIu64, c->load,
             P->tp_rank + 1, P->tp_size, P->pp_rank + 1, P->pp_size, *iteration);
    return 1;
}

/* Restores weights, AdamW state and the counters; no checkpoint in dir
 * means starting afresh, as Megatron does (with a warning).  Every rank
 * reads its (TP, PP) file; a rank that fails ends the job.  A torch_dist
 * directory (metadata.json in iter_N) goes to load_torch_dist. */
static int load_checkpoint(const struct config *c, trainer *t, train_schedule *s, struct ds_lr *dl,
                           uint64_t *iteration, uint64_t *consumed, uint64_t *sched_steps, uint64_t *valid_cursor)
{
    char err[4600];
    uint64_t it;
    const train_layout *P = t->P;
    int rc = ckpt_read_latest(c->load, &it, err, sizeof err);
    if (c->ckpt_step) {   /* Megatron: the step asked for, tracker or none */
        it = c->ckpt_step;
        rc = 0;
    }
    if (rc == CKPT_ERR_NOT_FOUND && c->exit_on_missing)
        cli_die(1, "--exit-on-missing-checkpoint: no checkpoint in '%s' (no '" CKPT_LATEST_NAME "')", c->load);
    if (rc == CKPT_ERR_NOT_FOUND) {
        if (P->rank == 0)
            cli_error("warning: no '" CKPT_LATEST_NAME "' in '%s'; starting from iteration 0", c->load);
        return 0;
    }
    if (rc != 0) cli_die(1, "rank %d: cannot load the checkpoint: %s", P->rank, err);
    cli_note(" loading checkpoint from %s at iteration %" PRIu64, c->load, it);
    char iter_dir[4200];
    snprintf(iter_dir, sizeof iter_dir, "%s/iter_%07" PRIu64, c->load, it);
    if (torch_dist_dir(iter_dir))
        return load_torch_dist(c, t, s, dl, iter_dir, iteration, consumed, sched_steps, valid_cursor);
    ckpt_state st;
    int code;
    if (trainer_load(t, c->load, it, &st, &code) != 0)
        cli_die(1, "%s\nhint: %s", t->err,
                code == CKPT_ERR_MISMATCH ? "resume with the model flags and parallel sizes of the saved run"
                : code == CKPT_ERR_CHECKSUM || code == CKPT_ERR_FORMAT ? "the file is damaged; load an earlier iteration"
                : "check --load");
    if (c->no_load_optim || c->finetune) {   /* the weights only, and the counters unless --finetune */
        fresh_optimizer(t);
        *iteration = c->finetune ? 0 : st.iteration;
        *consumed = c->finetune ? 0 : st.consumed_train_samples;
        *valid_cursor = c->finetune ? 0 : st.consumed_valid_samples;
        *sched_steps = 0;
        cli_note("  successfully loaded the weights from %s [ t %d/%d, p %d/%d ] at iteration %" PRIu64
                 " (--%s: optimizer and schedule afresh)", c->load, P->tp_rank + 1, P->tp_size, P->pp_rank + 1, P->pp_size,
                 it, c->finetune ? "finetune" : "no-load-optim");
        return 1;
    }
    resume_state(c, t, s, dl, &st, iteration, consumed, sched_steps, valid_cursor);
    cli_note("  successfully loaded checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %" PRIu64, c->load,
             P->tp_rank + 1, P->tp_size, P->pp_rank + 1, P->pp_size, it);
    return 1;
}

/* ---- the tokenizer: only its size and EOD matter to training --------------- */

struct tokenizer_info {
    int V;
    int64_t eod;
    char desc[300];
    char *vocab_path, *merge_path;   /* NULL for NullTokenizer */
    const char *tok_class;           /* the other types: Megatron's wrapper class */
};

static void open_tokenizer(const struct config *c, struct tokenizer_info *ti)
{
    memset(ti, 0, sizeof *ti);
    if (c->tokenizer == TK_NULL) {
        if (c->null_legacy) {   /* Megatron's _NullTokenizer until 2026: ids 0..N-1 plus EOD = N */
            ti->V = (int)c->vocab_size_arg + 1;
            ti->eod = (int64_t)c->vocab_size_arg;
        } else {                /* Megatron-Core's NullTokenizer: N ids, EOD = N - 1 unless given */
            ti->V = (int)c->vocab_size_arg;
            ti->eod = c->have_null_eod ? (int64_t)c->null_eod : (int64_t)c->vocab_size_arg - 1;
        }
        snprintf(ti->desc, sizeof ti->desc, "NullTokenizer (%d ids, EOD %" PRId64 "%s)", ti->V, ti->eod,
                 c->null_legacy ? ", legacy" : "");
        return;
    }
    tok *tk = NULL;
    char err[1024];
    if (c->tokenizer == TK_OTHER) {
        /* Megatron's wrapper: its vocab_size pads the model, its eod is the EOD */
        tok_options o = { c->tok_type, c->tokenizer_model, NULL, NULL, 0, 0, 0 };
        int rc = tok_open(&tk, &o, err, sizeof err);
        if (rc) cli_die(rc == TOK_ERR_UNSUPPORTED ? 2 : 1, "cannot load the tokenizer: %s", err);
        if (tok_vocab_size(tk) > INT32_MAX / 2) cli_die(1, "the tokenizer has too many ids (%zu)", tok_vocab_size(tk));
        ti->V = (int)tok_vocab_size(tk);
        ti->eod = tok_eod(tk);
        ti->tok_class = tok_type_class(c->tok_type);
        snprintf(ti->desc, sizeof ti->desc, "%s (%d)", tok_type_name(c->tok_type), ti->V);
        tok_free(tk);
        if (ti->eod < 0 && (c->eod_mask || c->data.mock))
            cli_die(1, "the tokenizer has no EOD (%s), which --eod-mask-loss and --mock-data need", c->tokenizer_model);
        return;
    }
    cli_gpt2_files(c->vocab_file, c->merge_file, 1, &ti->vocab_path, &ti->merge_path);
    tok_options o = { TOK_GPT2BPE, NULL, ti->vocab_path, ti->merge_path, 0, 0, 0 };
    if (tok_open(&tk, &o, err, sizeof err) != 0)
        cli_die(1, "cannot load the tokenizer: %s\nhint: check --vocab-file and --merge-file", err);
    ti->V = (int)tok_vocab_size(tk);
    tok_free(tk);
    ti->eod = 50256;
    snprintf(ti->desc, sizeof ti->desc, "GPT2BPETokenizer (%d)", ti->V);
}

/* ---- data: Megatron's builder sizes (training.py), then the pipeline ------- */

static ds_pipeline *open_data(const struct config *c, const train_layout *P, const struct tokenizer_info *ti)
{
    ds_gpt_config dc;
    ds_gpt_config_init(&dc);
    data_flags_apply(&c->data, &dc);
    dc.seq_length = (uint64_t)c->seq;
    dc.seed = (uint32_t)c->seed;
    if (ds_sample_counts(dc.num_samples, 0, c->sched.train_iters, c->gbs, c->eval_iters,
                         c->eval_interval ? c->eval_interval : UINT64_MAX, 0) < 0)
        cli_die(1, "bad sample counts\nhint: check --train-iters, --global-batch-size, --eval-interval");
    /* Megatron's get_train_valid_test_num_samples: --train-samples as given
       (the iterations, ramp-up included, only set the evaluation count) */
    if (c->sched.train_samples) dc.num_samples[0] = (int64_t)c->sched.train_samples;
    dc.vocab_file = ti->vocab_path;
    dc.merge_file = ti->merge_path;
    dc.tokenizer_class = ti->tok_class;
    dc.tokenizer_model = c->tokenizer_model;
    dc.eod = ti->eod;
    dc.eod_mask_loss = c->eod_mask;
    dc.vocab_size = ti->V;
    double t0 = cli_now();
    ds_pipeline *data = NULL;
    /* With a cache directory rank 0 builds (and writes) the index arrays
       first and the others then map them, as Megatron does. */
    for (int turn = 0; turn < 2; turn++) {
        if ((turn == 0) == (P->rank == 0)) {
            if (ds_pipeline_open(&dc, &data) < 0)
                cli_die(1, "cannot build the training data: %s\nhint: check --data-path and --split",
                        ds_pipeline_error(data));
        }
        if (c->data.cache && comm_barrier(P->world) < 0)
            cli_die(1, "rank %d: data barrier: %s", P->rank, comm_error());
    }
    cli_note("> built the data pipeline in %.2f s: train %" PRIu64 ", validation %" PRIu64 ", test %" PRIu64 " samples",
             cli_now() - t0, ds_pipeline_length(data, DS_SPLIT_TRAIN), ds_pipeline_length(data, DS_SPLIT_VALID),
             ds_pipeline_length(data, DS_SPLIT_TEST));
    return data;
}

/* Whether any rank says yes: the same verdict on every rank, so that no
 * rank leaves the others waiting (a MAX all-reduce over the world, between
 * two steps: the overlapped parameter gathers are settled first). */
static int any_rank(trainer *t, int mine, const char *what)
{
    settle_gathers(t);
    double v = mine;
    if (comm_allreduce(t->P->world, &v, 1, COMM_F64, COMM_MAX) < 0)
        cli_die(1, "rank %d: %s all-reduce: %s", t->P->rank, what, comm_error());
    return v != 0;
}

/* The model of the flags, as rank (tp_rank, pp_rank) of a TP x PP grid. */
static void model_config(const struct config *c, int V, int tp, int tp_rank, int pp, int pp_rank, gpt_config *mc)
{
    gpt_config_init(mc);
    mc->num_layers = c->num_layers;
    mc->hidden_size = c->hidden;
    mc->num_heads = c->heads;
    mc->ffn_hidden_size = c->ffn;
    mc->max_position_embeddings = c->maxpos;
    mc->vocab_size = V;
    mc->make_vocab_size_divisible_by = (int)c->vocab_div;
    mc->untie_embeddings = c->untie;
    mc->init_method_std = (float)c->init_std;
    mc->layernorm_eps = (float)c->norm_eps;
    mc->seed = c->seed;
    mc->tp_size = tp;
    mc->tp_rank = tp_rank;
    mc->pp_size = pp;
    mc->pp_rank = pp_rank;
    mc->position_embedding = c->pos_type;
    mc->rotary_base = (double)c->rotary_base;
    mc->rotary_percent = c->rotary_percent;
    mc->rotary_interleaved = c->rotary_interleaved;
    mc->rope_scaling_factor = c->use_rope_scaling ? c->rope_scaling_factor : 0.0;
    mc->normalization = c->normalization;
    mc->swiglu = c->swiglu;
    mc->num_query_groups = c->gqa ? (int)c->query_groups : 0;
    mc->add_bias_linear = c->add_bias;
    mc->dtype = c->bf16 ? MDS_BF16 : c->fp16 ? MDS_F16 : MDS_F32;
    /* Megatron: fp16 main grads unless --accumulate-allreduce-grads-in-fp32;
       fp32 for bf16 unless --grad-reduce-in-bf16 */
    mc->grad_dtype = c->fp16 && !c->grads_fp32 ? MDS_F16 : c->bf16 && c->grads_bf16 ? MDS_BF16 : MDS_F32;
    mc->hidden_dropout = (float)c->hidden_dropout;
    mc->attention_dropout = (float)c->attention_dropout;
    mc->apply_layernorm_1p = c->ln1p;
    mc->embed_layernorm = c->embed_ln;
    mc->sequence_parallel = c->seq_par;
    if (c->recompute_gran == GRAN_FULL) {
        mc->recompute_method = c->recompute_method;
        mc->recompute_num_layers = (int)c->recompute_num;
    }
}

/* ---- HuggingFace folders (train/hfckpt.h) ------------------------------------ */

static const char *hf_hint(int rc)
{
    return rc == HF_ERR_MISMATCH ? "give the model flags of the folder's model"
         : rc == HF_ERR_UNSUPPORTED ? "docs/formats.md (\"HuggingFace folders\") lists what converts"
         : rc == HF_ERR_FORMAT ? "the file is damaged or not what it should be"
         : "check the paths";
}

/* --export-hf: every (TP, PP) file of --load's latest checkpoint, read in
 * this one process, merged into one HuggingFace folder. */
static void export_hf(const struct config *c, int world_size)
{
    if (world_size != 1)
        cli_usage("--export-hf runs in one process (it reads every rank's file itself); run it without a launcher");
    struct tokenizer_info ti;
    open_tokenizer(c, &ti);
    gpt_config mc;
    model_config(c, ti.V, c->tp, 0, c->pp, 0, &mc);
    char err[4600];
    if (gpt_config_check(&mc, err, sizeof err) != 0) cli_usage("%s", err);
    if (hf_arch_of(&mc, err, sizeof err) < 0) cli_usage("cannot export: %s", err);
    uint64_t it;
    if (ckpt_read_latest(c->load, &it, err, sizeof err) != 0)
        cli_die(1, "cannot export: %s\nhint: --load names a directory written by --save", err);
    char iter_dir[4200];
    snprintf(iter_dir, sizeof iter_dir, "%s/iter_%07" PRIu64, c->load, it);
    if (torch_dist_dir(iter_dir))
        cli_die(1, "cannot export: '%s' is a torch_dist checkpoint; --export-hf reads mdstrain's own\n"
                   "hint: load it with --no-load-optim and --save it first", iter_dir);
    hf_tokenizer htok = { ti.vocab_path, ti.merge_path, ti.eod };
    int code;
    int rc = hf_export(c->load, it, &mc, &htok, c->export_hf, &code, err, sizeof err);
    if (rc)
        cli_die(1, "cannot export: %s\nhint: %s", err,
                code == CKPT_ERR_MISMATCH ? "give the model flags and parallel sizes of the saved run" : hf_hint(rc));
    cli_note("> exported iteration %" PRIu64 " of %s (TP %d, PP %d) to %s", it, c->load, c->tp, c->pp, c->export_hf);
    free(ti.vocab_path);
    free(ti.merge_path);
}

/* --load-hf on this rank's model. */
static void import_hf(const char *dir, gpt_model *m, int V, int rank)
{
    char err[4600];
    if (hf_arch_of(&m->cfg, err, sizeof err) < 0) cli_usage("cannot import: %s", err);   /* the flags' fault */
    int rc = hf_import(m, dir, V, err, sizeof err);
    if (rc) cli_die(1, "rank %d: cannot import: %s\nhint: %s", rank, err, hf_hint(rc));
}

/* --check-logits FILE: "MDSLGT01", int32 B, T, V, int32 tokens (B, T),
 * float32 logits (B, T, V) (tests/data/README.md); the model's logits over
 * the first V vocabulary rows must lie within 1e-4 of the file's, relative
 * to the largest |logit| of the file (a norm-wise relative error, so that
 * logits near zero do not decide). */
static int check_logits(const struct config *c, int world_size)
{
    if (world_size != 1 || c->tp != 1 || c->pp != 1) cli_usage("--check-logits runs in one process, TP 1, PP 1");
    struct tokenizer_info ti;
    open_tokenizer(c, &ti);
    FILE *f = fopen(c->check_logits, "rb");
    if (!f) cli_die(1, "cannot open '%s': %s", c->check_logits, strerror(errno));
    char magic[8];
    int32_t dims[3];
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "MDSLGT01", 8) != 0 || fread(dims, 4, 3, f) != 3 ||
        dims[0] <= 0 || dims[1] <= 0 || dims[2] <= 0 || dims[0] > 4096 || dims[1] > (1 << 20) || dims[2] > (1 << 24))
        cli_die(1, "'%s': not a logits file (MDSLGT01 header)", c->check_logits);
    int B = dims[0], T = dims[1], V = dims[2];
    size_t BT = (size_t)B * (size_t)T, n = BT * (size_t)V;
    int *ids = malloc(BT * sizeof(int));
    float *ref = malloc(n * sizeof(float));
    if (!ids || !ref) cli_die(1, "out of memory reading '%s'", c->check_logits);
    if (fread(ids, 4, BT, f) != BT || fread(ref, 4, n, f) != n || fgetc(f) != EOF)
        cli_die(1, "'%s': size does not match B %d, T %d, V %d", c->check_logits, B, T, V);
    fclose(f);
    gpt_config mc;
    model_config(c, ti.V, 1, 0, 1, 0, &mc);
    gpt_model model;
    char err[4600];
    int rc = gpt_model_init(&model, &mc, B, T, err, sizeof err);
    if (rc == GPT_ERR_ARG) cli_usage("%s", err);
    if (rc) cli_die(1, "cannot build the model: %s", err);
    if (V > model.Vp) cli_die(1, "'%s': %d logits per token, more than the padded vocabulary %d", c->check_logits, V, model.Vp);
    for (size_t i = 0; i < BT; i++)
        if (ids[i] < 0 || ids[i] >= ti.V) cli_die(1, "'%s': token %d is outside the vocabulary", c->check_logits, ids[i]);
    if (c->load) {
        uint64_t it;
        ckpt_state st;
        td_state tds;
        char iter_dir[4200];
        if (ckpt_read_latest(c->load, &it, err, sizeof err) != 0) cli_die(1, "cannot load the checkpoint: %s", err);
        snprintf(iter_dir, sizeof iter_dir, "%s/iter_%07" PRIu64, c->load, it);
        if (torch_dist_dir(iter_dir) ? td_load(&model, iter_dir, &tds, err, sizeof err) != 0
                                       : ckpt_load_rank(c->load, it, &model, NULL, NULL, &st, err, sizeof err) != 0)
            cli_die(1, "cannot load the checkpoint: %s", err);
    } else {
        import_hf(c->load_hf, &model, ti.V, 0);
    }
    double loss, ntok;
    if (gpt_forward(&model, ids, ids, NULL, &loss, &ntok) != 0) cli_die(1, "forward failed");
    size_t nl = BT * (size_t)model.Vl;   /* (stored as the model's act_dtype) */
    float *got = malloc(nl * sizeof(float));
    if (!got) cli_die(1, "out of memory");
    model.be->copy(got, model.acts.logits, nl * mds_dtype_size(model.act_dtype));
    for (size_t i = nl; model.act_dtype != MDS_F32 && i-- > 0;)   /* widened in place, from the end */
        got[i] = mds_load(model.act_dtype, got, i);
    double maxref = 0, maxdiff = 0;
    size_t worst = 0;
    for (size_t r = 0; r < BT; r++)
        for (int v = 0; v < V; v++) {
            double a = got[r * (size_t)model.Vl + (size_t)v], b = ref[r * (size_t)V + (size_t)v];
            if (fabs(b) > maxref) maxref = fabs(b);
            if (!(fabs(a - b) <= maxdiff)) { maxdiff = fabs(a - b); worst = r * (size_t)V + (size_t)v; }
        }
    double rel = maxref > 0 ? maxdiff / maxref : maxdiff;
    int good = rel <= 1e-4;
    printf("logits %s: B %d T %d V %d, max |diff| %.3g (at %zu: %.9g vs %.9g), max |ref| %.6g, relative %.3g %s 1e-4\n",
           good ? "match" : "differ", B, T, V, maxdiff, worst, got[(worst / (size_t)V) * (size_t)model.Vl + worst % (size_t)V],
           ref[worst], maxref, rel, good ? "<=" : ">");
    free(got);
    free(ids);
    free(ref);
    gpt_model_free(&model);
    free(ti.vocab_path);
    free(ti.merge_path);
    return good ? 0 : 1;
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    double start_time = cli_now();   /* Megatron's _TRAIN_START_TIME */
    cli.name = "mdstrain";
    cli.exit_fn = end_job;
    cli.errors_always = 1;
    mds_comm *world;
    if (comm_init(&argc, &argv, &world) != 0) {
        fprintf(stderr, "%s: cannot start the communication: %s\n", cli.name, comm_error());
        comm_abort(1);
    }
    int world_rank = comm_rank(world), world_size = comm_size(world);
    cli.speaks = world_rank == 0;   /* every rank parses the same arguments: rank 0 speaks for all */
    struct config c;
    parse_args(argc, argv, &c);
    if (c.export_hf || c.check_logits) {
        int code = c.export_hf ? (export_hf(&c, world_size), 0) : check_logits(&c, world_size);
        comm_free(world);
        comm_finalize();
        data_flags_release(&c.data);
        return code;
    }
    char err[1024];
    /* Megatron's validate_args (sequence parallelism), initialize_model_parallel */
    if (c.seq_par && c.tp == 1) {
        cli_note("note: disabling sequence parallelism because tensor model parallelism is disabled "
                 "(--sequence-parallel with --tensor-model-parallel-size 1)");
        c.seq_par = 0;
    }
    if (c.seq_par && c.seq % c.tp)   /* Megatron: mappings.py's _split_along_first_dim */
        cli_usage("--seq-length %d is not divisible by the tensor model parallel size %d with --sequence-parallel: "
                  "First dimension of the tensor should be divisible by tensor parallel size", c.seq, c.tp);
    if (world_size % (c.tp * c.pp))
        cli_usage("the world size %d is not divisible by tensor (%d) x pipeline (%d) model parallel sizes",
                  world_size, c.tp, c.pp);
    int dp = world_size / (c.tp * c.pp);
    const mds_backend *backend = choose_backend(&c, world);
    if (c.dist_timeout > 0) {
        timeout_rank = world_rank;
        timeout_minutes = c.dist_timeout;
        if (comm_set_timeout(c.dist_timeout * 60.0, collective_timeout) != 0)
            cli_die(1, "%s", comm_error());
    }
    /* the trainer's world: the host one, the NCCL one over it, or the host
       one staging through the backend's copies */
    mds_comm *nccl_world = NULL;
    comm_copy_ops staging = { backend->copy, backend->sync, backend->error, backend->host_alloc, backend->host_free };
    if (placement.route == COMM_ROUTE_NCCL) {
        comm_set_fatal(comm_fatal_line);
        int nrc = comm_nccl_init(world, &nccl_world);
        if (nrc == -2) end_job_quietly(1);   /* the rank that failed says why */
        if (nrc != 0) {
            fprintf(stderr, "%s: %s\n", cli.name, comm_error());
            end_job_quietly(1);
        }
    } else if (placement.route == COMM_ROUTE_STAGED) {
        comm_set_staging(world, &staging);
    }
    mds_comm *train_world = nccl_world ? nccl_world : world;
    if (c.deepspeed) apply_ds_config(&c, dp, world_rank == 0);
    if (c.grads_bf16 && !c.bf16) cli_usage("--grad-reduce-in-bf16 goes with --bf16");
    /* Megatron's validate_args, its words */
    if (c.overlap_param && !c.dist_opt) cli_usage("--overlap-param-gather only supported with distributed optimizer");
    if (c.overlap_param && !c.overlap_grad) cli_usage("Must use --overlap-param-gather with --overlap-grad-reduce");
    if (!c.have_gbs) c.gbs = c.mbs * (uint64_t)dp;   /* Megatron's default */
    if (c.gbs % (c.mbs * (uint64_t)dp))
        cli_usage("--global-batch-size %" PRIu64 " is not divisible by micro-batch size (%" PRIu64
                  ") times data parallel size (%d)", c.gbs, c.mbs, dp);
    c.sched.global_batch_size = c.gbs;
    train_rampup ramp;
    if (train_rampup_init(&ramp, c.rampup[0], c.rampup[1], c.rampup[2], c.gbs, err, sizeof err) != 0)
        cli_usage("--rampup-batch-size: %s", err);
    if (c.sched.train_samples && !c.rampup[0] && c.sched.train_samples < c.gbs)
        cli_usage("--train-samples %" PRIu64 " is less than one global batch", c.sched.train_samples);
    if (c.sched.train_samples) c.sched.train_iters = train_rampup_train_iters(&ramp, c.sched.train_samples);
    train_schedule sched;
    if (train_schedule_init(&sched, &c.sched, err, sizeof err) != 0)
        cli_usage("%s", err);
    plan_batches(&c, &ramp, dp, &sched);
    train_layout P;
    if (train_layout_init(&P, train_world, c.tp, c.pp, err, sizeof err) != 0)
        cli_die(1, "%s", err);
    /* the same verdict on every rank (one MPI library): exit 2 together */
    if (c.overlap_grad && P.dp_size > 1 && !comm_async_ok())
        cli_usage("--overlap-grad-reduce needs a second communication thread, and this MPI (%s) does not grant "
                  "MPI_THREAD_MULTIPLE", comm_backend());
    int user_verbosity = cli.verbosity;
    if (world_rank != 0 && cli.verbosity > 1) cli.verbosity = 1;   /* notes and the table from rank 0 */

    struct tokenizer_info ti;
    open_tokenizer(&c, &ti);

    gpt_config mc;
    model_config(&c, ti.V, P.tp_size, P.tp_rank, P.pp_size, P.pp_rank, &mc);
    uint64_t nmicro = trainer_micro_batches(c.gbs, (int)c.mbs, P.dp_size);
    mc.act_slots = trainer_act_slots(&P, nmicro);
    mc.backend = backend;
    if (c.op_times) {
        /* (the model's ops only: the staged collectives above keep the
           backend's own copy and sync, which a communication thread may
           call while the ops run) */
        mc.backend = mds_optime_wrap(backend);
        if (!mc.backend) cli_die(1, "--op-times: the %s backend takes no timing marks", backend->name);
    }
    /* Megatron's timers; none under --deepspeed (its fork's are not implemented) */
    mds_timers timers;
    mds_timers_init(&timers, c.timing_level, c.timing_option, c.l1_barrier, P.world, backend->sync, backend->error);
    mds_timers *tm = c.deepspeed ? NULL : &timers;
    logging_level = c.logging_level;
    timer_start(tm, TM_MODEL_SETUP, 1);
    gpt_model model;
    int rc = gpt_model_init(&model, &mc, (int)c.mbs, c.seq, err, sizeof err);
    if (rc == GPT_ERR_ARG) cli_usage("%s", err);
    if (rc) cli_die(1, "rank %d: cannot build the model: %s\nhint: use a smaller model or --micro-batch-size", world_rank, err);
    timer_stop(tm, TM_MODEL_SETUP, 0);

    timer_start(tm, TM_DATA_SETUP, 1);
    ds_pipeline *data = open_data(&c, &P, &ti);
    timer_stop(tm, TM_DATA_SETUP, 0);
    timer_start(tm, TM_MODEL_SETUP, 0);
    trainer t;
    trainer_config tc = { .global_batch_size = c.gbs, .vocab_size = ti.V, .dist_opt = c.dist_opt,
                          .per_token_loss = c.per_token_loss, .overlap_grad_reduce = c.overlap_grad,
                          .overlap_param_gather = c.overlap_param,
                          .bucket_size = (size_t)bucket_size(&c, &P),
                          .beta1 = (float)c.beta1, .beta2 = (float)c.beta2, .eps = (float)c.eps,
                          .weight_decay = (float)c.wd, .weight_decay_arg = c.wd, .clip_grad = (float)c.clip, .fatal = fatal,
                          .no_save_optim = c.no_save_optim, .timers = tm };
    train_loss_scaler_init(&tc.scaler, c.fp16, !c.have_loss_scale, c.have_loss_scale ? c.loss_scale : c.initial_loss_scale,
                           c.min_loss_scale, (int)c.loss_scale_window, (int)c.hysteresis);
    if (trainer_init(&t, &model, &P, data, &tc) != 0)
        cli_die(1, "%s", t.err);
    cli_note("> padded vocab (size: %d) with %d dummy tokens (new size: %d)", ti.V, model.Vp - ti.V, model.Vp);
    print_config(&c, &model, &P, ti.V, nmicro, ti.desc);
    /* Megatron prints this from data-parallel rank 0 of every (TP, PP) rank */
    if (user_verbosity >= 2 && P.dp_rank == 0)
        fprintf(stderr, " > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %zu\n",
                P.tp_rank, P.pp_rank, model.num_params);
    if (user_verbosity >= 2 && placement.device >= 0)   /* every rank's binding; the table shows rank 0's */
        fprintf(stderr, " > rank %d: %s\n", world_rank, placement_desc);
    int do_valid = c.eval_iters > 0 && ds_pipeline_has_split(data, DS_SPLIT_VALID) &&
                   ds_pipeline_length(data, DS_SPLIT_VALID) > 0;
    int do_test = c.eval_iters > 0 && ds_pipeline_has_split(data, DS_SPLIT_TEST) &&
                  ds_pipeline_length(data, DS_SPLIT_TEST) > 0;

    uint64_t train_iters = c.sched.train_iters;
    double flops_per_token = gpt_flops_per_token(&model);
    uint64_t consumed = 0, sched_steps = 0, valid_cursor = 0;
    double interval_time = 0, interval_loss = 0;
    uint64_t interval_iters = 0, interval_advanced = 0, interval_skipped = 0;
    struct ds_log dslog = {0};
    uint64_t iteration = 0;
    struct ds_lr dl = {0};
    int resumed = 0;
    if (c.load) {
        timer_start(tm, TM_LOAD_CHECKPOINT, 1);
        resumed = load_checkpoint(&c, &t, &sched, &dl, &iteration, &consumed, &sched_steps, &valid_cursor);
        timer_stop(tm, TM_LOAD_CHECKPOINT, 1);
        timer_log(tm, TM_LOAD_CHECKPOINT);
    }
    if (c.load_hf && !resumed) {
        import_hf(c.load_hf, &model, ti.V, world_rank);
        cli_note(" initialised the weights from the HuggingFace folder %s (optimizer state fresh)", c.load_hf);
    }
    timer_stop(tm, TM_MODEL_SETUP, 0);
    /* the samples consumed before the last iteration: Megatron-DeepSpeed's
       scheduler reads the tokens consumed before the iteration it steps for */
    uint64_t before, after;
    train_rampup_consumed(&ramp, iteration, &before, &after);
    uint64_t prev_consumed = after == consumed ? before : consumed >= c.gbs ? consumed - c.gbs : 0;
    uint64_t last_saved = c.load ? iteration : UINT64_MAX;
    int log_rank = world_rank == world_size - 1;   /* Megatron's print_rank_last */
    struct tblog tbl;
    tblog_open(&tbl, &c.tb, log_rank);             /* Megatron: the last rank writes */
    if (c.deepspeed) tblog_deepspeed(&tbl, (uint64_t)c.seq);
    /* Megatron's decoupled group: the same schedule with its own peak and
       floor, after any --load (OptimizerParamScheduler.get_lr with the group's max_lr/min_lr) */
    train_schedule dsched = sched;
    if (c.have_decoupled_lr) {
        dsched.max_lr = c.decoupled_lr;
        if (c.have_decoupled_min_lr) dsched.min_lr = c.decoupled_min_lr;
    }
    if (c.ds_sched.type && !resumed) ds_lr_start(&dl, &c, &sched, &dsched);
    /* Megatron: "done with setup ...", then these */
    const char *setup_names[2] = { mds_timer_name(TM_MODEL_SETUP), mds_timer_name(TM_DATA_SETUP) };
    timers_log(tm, setup_names, 2, 1.0);
    if (c.exit_signal_handler) {   /* (from here: a signal during setup still ends the process) */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_exit_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(c.exit_signal, &sa, NULL) != 0) cli_die(1, "--exit-signal: %s", strerror(errno));
    }
    if (c.skip_train) cli_note("skipping training (--skip-train is on) ...");
    else cli_note("> training for %" PRIu64 " iterations ...", train_iters);
    train_layout_reset_stats(&P);
    uint64_t iters_run = 0, op_iters = 0;
    double run_start = cli_now(), op_time = 0.0;
    uint64_t batch = train_rampup_batch(&ramp, consumed);
    const char *stop = NULL;   /* why the loop ended early: no evaluation at the end, as in Megatron */
    double tokens_per_sample = (double)c.seq;
    while (!c.skip_train && iteration < train_iters && (!c.train_tokens || (double)consumed * tokens_per_sample < (double)c.train_tokens)) {
        /* bigscience Megatron-DeepSpeed's found_kill_switch, decided by rank 0 */
        if (c.kill_switch && any_rank(&t, P.rank == 0 && access(c.kill_switch, F_OK) == 0, "kill-switch")) {
            save_once(&c, &t, &sched, &dl, iteration, consumed, sched_steps, valid_cursor, &last_saved);
            cli_note("Detected kill switch at %s. Exiting", c.kill_switch);
            stop = "kill switch";
            break;
        }
        /* Megatron's update_num_microbatches; a changed count saves first */
        uint64_t b = train_rampup_batch(&ramp, consumed);
        if (b != batch && iteration != 0)
            save_once(&c, &t, &sched, &dl, iteration, consumed, sched_steps, valid_cursor, &last_saved);
        batch = b;
        trainer_set_global_batch(&t, batch);
        /* --op-times: every iteration but the first (its kernels' first
           launches, cuBLASLt's plans), from here to the update's end */
        if (c.op_times && iters_run) mds_optime_count(1);
        double ts = cli_now();
        double lr = dl.lr, lr_embed = dl.lr_embed;
        if (!c.ds_sched.type) {
            double tokens = (double)prev_consumed * tokens_per_sample;
            lr = train_schedule_lr_tokens(&sched, (double)sched_steps, tokens);
            lr_embed = train_schedule_lr_tokens(&dsched, (double)sched_steps, tokens);
        }
        double loss, norm;
        if (trainer_backward_pass(&t, consumed, &loss, &norm) != 0)
            cli_die(1, "%s", t.err);
        /* an fp16 overflow is a skipped iteration; any other non-finite
           value ends the run (Megatron's --check-for-nan-in-loss-and-grad) */
        if (!isfinite(loss) || (!t.found_inf && !isfinite(norm)))
            cli_die(1, "loss or gradient norm is not finite at iteration %" PRIu64 " (loss %g, norm %g)\n"
                       "hint: lower --lr or raise --lr-warmup-iters", iteration + 1, loss, norm);
        int skipped = t.found_inf;
        if (trainer_update(&t, lr, lr_embed, norm) != 0)
            cli_die(1, "%s", t.err);
        iteration++;
        iters_run++;
        prev_consumed = consumed;
        consumed += batch;
        if (!skipped) sched_steps += batch;   /* Megatron steps its scheduler on successful updates only */
        if (!skipped && c.ds_sched.type) ds_lr_step(&dl, &c);   /* DeepSpeed too (no step on an overflow) */
        /* what Megatron logs: the first group's learning rate after the step */
        double lr_now = c.ds_sched.type ? dl.lr
                        : train_schedule_lr_tokens(&sched, (double)sched_steps, (double)prev_consumed * tokens_per_sample);
        if (c.op_times) {
            if (model.be->sync() != 0)
                cli_die(1, "iteration %" PRIu64 " on the %s backend: %s", iteration, model.be->name, model.be->error());
            if (iters_run > 1) {
                op_iters++;
                op_time += cli_now() - ts;
            }
            mds_optime_count(0);
        }
        interval_time += cli_now() - ts;
        if (!skipped) {
            interval_loss += loss;
            interval_advanced++;
        }
        interval_skipped += (uint64_t)skipped;
        interval_iters++;
        ds_log_step(&dslog, &c, skipped, norm);
        /* Megatron's --log-num-zeros-in-grad (none on a skipped iteration) and
           --log-params-norm, where a log line or TensorBoard reads them (the
           same iterations on every rank: both are collective) */
        double zeros = NAN, pnorm = NAN;
        int wanted = iteration % c.log_interval == 0 || (c.tb.dir && iteration % c.tb.log_interval == 0);
        if (wanted && c.log_num_zeros && !skipped && trainer_grad_zeros(&t, norm, &zeros) != 0)
            cli_die(1, "%s", t.err);
        if (wanted && c.log_params_norm && trainer_params_norm(&t, &pnorm) != 0)
            cli_die(1, "%s", t.err);
        if (c.tb.dir && c.tb.optimizer_states && iteration % c.tb.log_interval == 0) {
            double st[12];
            if (trainer_optimizer_stats(&t, st) != 0)
                cli_die(1, "%s", t.err);
            tblog_optimizer(&tbl, iteration, consumed * (uint64_t)c.seq, st);
        }
        if (c.deepspeed)   /* None where print_ds_log prints no field */
            tblog_ds_training(&tbl, iteration, consumed, loss, lr_now, batch, c.fp16 ? t.scaler.scale : NAN,
                              !c.no_pp && dslog.has_norm ? dslog.norm : NAN, c.no_pp ? NAN : 0.0, world_size);
        else
            tblog_training(&tbl, iteration, consumed, skipped ? NAN : loss, lr_now, batch, t.scaler.scale,
                           skipped ? NAN : norm, zeros, pnorm, world_size);

        if (iteration % c.log_interval == 0) {
            if (log_rank) {
                double per_iter = interval_time / (double)interval_iters;
                char ts_s[64], eta[32];
                timestamp(ts_s, sizeof ts_s);
                format_eta(per_iter * (double)(train_iters - iteration), eta, sizeof eta);
                /* Megatron's training_log: the loss averaged over the advanced
                   iterations, no grad norm on a skipped one */
                double avg = interval_loss / (double)(interval_advanced ? interval_advanced : 1);
                char gn[48] = "", nz[64] = "", pn[48] = "";
                if (!skipped) snprintf(gn, sizeof gn, " grad norm: %.3f |", norm);
                /* (Megatron: f'{x}' of the count as a float32's value, and {:.3f}) */
                if (!isnan(zeros)) snprintf(nz, sizeof nz, " num zeros: %.1f |", (double)(float)zeros);
                if (!isnan(pnorm)) snprintf(pn, sizeof pn, " params norm: %.3f |", pnorm);
                if (c.deepspeed)   /* Megatron-DeepSpeed's line instead */
                    print_ds_log(&c, &model, &dslog, iteration, train_iters, consumed, batch, per_iter, lr_now, avg,
                                 t.scaler.scale, interval_skipped, world_size);
                else printf(" [%s] iteration %8" PRIu64 "/%8" PRIu64 " | consumed samples: %12" PRIu64
                            " | elapsed time per iteration (ms): %.1f | throughput per GPU (TFLOP/s/GPU): %.1f"
                            " | learning rate: %.6E | global batch size: %5" PRIu64 " | lm loss: %.6E"
                            " | loss scale: %.1f |%s%s%s number of skipped iterations: %3d"
                            " | number of nan iterations: %3d | tokens per second: %.1f | ETA: %s |\n",
                            ts_s, iteration, train_iters, consumed, per_iter * 1000.0,
                            flops_per_token * (double)batch * (double)c.seq / per_iter / 1e12 / (double)world_size,
                            lr_now, batch, avg, t.scaler.scale, gn, nz, pn, (int)interval_skipped, 0,
                            (double)batch * c.seq / per_iter, eta);
                if (user_verbosity >= 3)   /* exact values, for tests (the log line rounds) */
                    printf(" [rank %d] lm loss %.17g grad norm %.17g\n [rank %d] learning rate %.17g\n",
                           world_rank, avg, norm, world_rank, lr_now);
                fflush(stdout);
                tblog_interval(&tbl, iteration, consumed, per_iter, c.log_throughput,
                               flops_per_token * (double)batch * (double)c.seq / per_iter / 1e12 / (double)world_size);
            }
            interval_time = interval_loss = 0;
            interval_iters = interval_advanced = interval_skipped = 0;
            /* Megatron's training_log: its timers of --timing-log-level, to
               TensorBoard (the max over the ranks, not reset) and stdout */
            size_t ntl;
            const char *const *tl = mds_timers_to_log(c.timing_level, &ntl);
            if (tm && ntl) {
                settle_gathers(&t);
                if (c.tb.timers) {
                    double tmax[32];
                    int have[32];
                    if (ntl > 32 || mds_timers_max(tm, tl, ntl, (double)c.log_interval, tmax, have) != 0)
                        cli_die(1, "rank %d: %s", world_rank, tm->err);
                    tblog_timers(&tbl, iteration, tl, ntl, tmax, have);
                }
                timers_log(tm, tl, ntl, (double)c.log_interval);
            }
        }
        if (do_valid && c.eval_interval && iteration % c.eval_interval == 0) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "iteration %" PRIu64, iteration);
            double vl = evaluate(&t, DS_SPLIT_VALID, &valid_cursor, c.eval_iters);
            if (log_rank) print_validation(prefix, vl);
            tblog_validation(&tbl, iteration, consumed, vl, 0);
        }
        /* Megatron's checkpoint_and_decide_exit: the signal first (its
           signals_received(), an all-gather of each rank's flag) */
        if (c.exit_signal_handler && any_rank(&t, exit_signal_got, "exit-signal")) {
            save_once(&c, &t, &sched, &dl, iteration, consumed, sched_steps, valid_cursor, &last_saved);
            cli_note("exiting program after receiving SIGTERM.");   /* (Megatron's words, whatever the signal) */
            stop = "exit signal";
            break;
        }
        if (c.save && c.save_interval && iteration % c.save_interval == 0) {
            save_checkpoint(&c, &t, &sched, &dl, iteration, consumed, sched_steps, valid_cursor);
            last_saved = iteration;
        }
        if (c.exit_interval && iteration % c.exit_interval == 0) {
            save_once(&c, &t, &sched, &dl, iteration, consumed, sched_steps, valid_cursor, &last_saved);
            cli_note("exiting program at iteration %" PRIu64, iteration);
            stop = "exit interval";
            break;
        }
        /* Megatron's checkpoint_and_decide_exit: the longest-running rank decides */
        if (c.exit_duration > 0) {
            double minutes = (cli_now() - start_time) / 60.0;
            if (any_rank(&t, minutes > c.exit_duration, "exit-duration")) {
                save_once(&c, &t, &sched, &dl, iteration, consumed, sched_steps, valid_cursor, &last_saved);
                cli_note("exiting program after %.17g minutes", minutes);
                stop = "exit duration";
                break;
            }
        }
    }
    double run_time = cli_now() - run_start;
    if (!c.skip_train)   /* (Megatron saves after training only) */
        save_once(&c, &t, &sched, &dl, iteration, consumed, sched_steps, valid_cursor, &last_saved);
    char prefix[96];
    if (stop) do_valid = do_test = 0;   /* Megatron exits before its end-of-training evaluation */
    if (do_valid) {
        valid_prefix(prefix, sizeof prefix, &c, iteration, "validation");
        double vl = evaluate(&t, DS_SPLIT_VALID, &valid_cursor, c.eval_iters);
        if (log_rank) print_validation(prefix, vl);
        if (!c.skip_train) tblog_validation(&tbl, iteration, consumed, vl, 0);   /* (Megatron: not then) */
    }
    if (do_test) {
        uint64_t test_cursor = 0;
        valid_prefix(prefix, sizeof prefix, &c, iteration, "test");
        double tl = evaluate(&t, DS_SPLIT_TEST, &test_cursor, c.eval_iters);
        if (log_rank) print_validation(prefix, tl);
        if (!c.skip_train) tblog_validation(&tbl, iteration, consumed, tl, 1);
    }
    if (trainer_params_sync(&t) != 0)   /* the last step's overlapped all-gathers */
        cli_die(1, "%s", t.err);
    tblog_close(&tbl);
    if (user_verbosity >= 2 && P.dp_rank == 0 && iters_run)
        report_memory(model.be, world_rank, iteration);
    if (user_verbosity >= 3 && iters_run)
        report_comm(&P, iters_run, run_time);
    if (c.op_times && world_rank == 0) {
        char title[160];
        snprintf(title, sizeof title, "[Rank 0] op times on %s (the first iteration left out)", model.be->device);
        mds_optime_report(stdout, title, op_iters, op_iters ? op_time * 1e3 / (double)op_iters : 0.0);
        fflush(stdout);
    }
    trainer_release(&t);
    ds_pipeline_close(data);
    gpt_model_free(&model);
    train_layout_release(&P);
    comm_free(nccl_world);
    comm_free(world);
    comm_finalize();
    data_flags_release(&c.data);
    free(ti.vocab_path);
    free(ti.merge_path);
    return 0;
}
