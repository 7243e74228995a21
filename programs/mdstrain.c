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
 * What it deliberately does not do yet: bf16/fp16, dropout, sequence or
 * context parallelism, interleaved pipeline stages, a GPU backend.
 * Log lines go to stdout (where Megatron prints them); the configuration
 * table, notes and errors go to stderr.  Exit status: 0 success, 1 runtime
 * failure, 2 bad usage.
 */
#include "cli.h"
#include "dataflags.h"
#include "tokenizer.h"
#include "checkpoint.h"
#include "comm.h"
#include "dataset.h"
#include "kernels.h"
#include "model.h"
#include "trainer.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

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

static void fatal(const char *msg)
{
    cli_die(1, "%s", msg);
}

/* ---- the option table ----------------------------------------------------- */

enum {
    O_NUM_LAYERS = 1, O_HIDDEN, O_HEADS, O_FFN, O_SEQ, O_MAXPOS, O_MBS, O_GBS, O_TRAIN_ITERS,
    O_TRAIN_SAMPLES, O_LR, O_MIN_LR, O_LR_WARMUP_INIT, O_DECAY_STYLE, O_WARMUP_ITERS,
    O_WARMUP_FRACTION, O_WARMUP_SAMPLES, O_DECAY_ITERS, O_DECAY_SAMPLES, O_WD, O_CLIP, O_BETA1,
    O_BETA2, O_EPS, O_SEED, O_LOG_INTERVAL, O_EVAL_INTERVAL, O_EVAL_ITERS, O_EXIT_INTERVAL,
    O_VOCAB_FILE, O_MERGE_FILE, O_TOKENIZER, O_VOCAB_SIZE, O_TOKENIZER_MODEL,
    O_TP, O_PP, O_EOD_MASK, O_VOCAB_DIV, O_INIT_STD, O_UNTIE, O_NORM_EPS, O_HIDDEN_DROPOUT,
    O_ATTN_DROPOUT, O_DIST_OPT, O_LOG_THROUGHPUT, O_QUIET, O_VERBOSE, O_HELP, O_VERSION,
    O_SAVE, O_SAVE_INTERVAL, O_LOAD
};

#define NOT_YET(name, arg) {name, 0, arg, CLI_REFUSED, NULL, "yet (CPU fp32)"}

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
    {"hidden-dropout", 0, CLI_ARG_ONE, O_HIDDEN_DROPOUT, "0", "only 0 (dropout is not implemented; default 0)"},
    {"attention-dropout", 0, CLI_ARG_ONE, O_ATTN_DROPOUT, "0", "only 0 (default 0)"},
    NOT_YET("swiglu", CLI_ARG_NONE),
    NOT_YET("normalization", CLI_ARG_ONE),
    NOT_YET("position-embedding-type", CLI_ARG_ONE),
    NOT_YET("group-query-attention", CLI_ARG_NONE),
    NOT_YET("bf16", CLI_ARG_NONE),
    NOT_YET("fp16", CLI_ARG_NONE),
};

static const struct cli_option train_options[] = {
    /* batch and length of training */
    {"micro-batch-size", 0, CLI_ARG_ONE, O_MBS, "N", "samples per micro-batch (required)"},
    {"global-batch-size", 0, CLI_ARG_ONE, O_GBS, "N", "samples per iteration, a multiple of the micro-batch (default: micro-batch)"},
    {"train-iters", 0, CLI_ARG_ONE, O_TRAIN_ITERS, "N", "iterations to train (or --train-samples)"},
    {"train-samples", 0, CLI_ARG_ONE, O_TRAIN_SAMPLES, "N", "samples to train (iterations = N / global batch)"},
    {"exit-interval", 0, CLI_ARG_ONE, O_EXIT_INTERVAL, "N", "stop after an iteration that is a multiple of N (saving first with --save)"},
    NOT_YET("rampup-batch-size", CLI_ARG_MANY),
    /* checkpoints */
    {"save", 0, CLI_ARG_ONE, O_SAVE, "DIR", "save checkpoints to DIR (at --save-interval and at the end)"},
    {"save-interval", 0, CLI_ARG_ONE, O_SAVE_INTERVAL, "N", "save every N iterations (with --save)"},
    {"load", 0, CLI_ARG_ONE, O_LOAD, "DIR", "resume from DIR's latest checkpoint (none there: start afresh)"},
    /* optimizer and schedule */
    {"lr", 0, CLI_ARG_ONE, O_LR, "X", "peak learning rate (required)"},
    {"min-lr", 0, CLI_ARG_ONE, O_MIN_LR, "X", "final learning rate (default 0)"},
    {"lr-warmup-init", 0, CLI_ARG_ONE, O_LR_WARMUP_INIT, "X", "learning rate at the start of the warmup (default 0)"},
    {"lr-decay-style", 0, CLI_ARG_ONE, O_DECAY_STYLE, "STYLE", "constant, linear (default) or cosine"},
    {"lr-warmup-iters", 0, CLI_ARG_ONE, O_WARMUP_ITERS, "N", "warmup iterations (default 0)"},
    {"lr-warmup-fraction", 0, CLI_ARG_ONE, O_WARMUP_FRACTION, "X", "warmup as a fraction of the decay length"},
    {"lr-warmup-samples", 0, CLI_ARG_ONE, O_WARMUP_SAMPLES, "N", "warmup samples (with --train-samples)"},
    {"lr-decay-iters", 0, CLI_ARG_ONE, O_DECAY_ITERS, "N", "decay iterations (default --train-iters)"},
    {"lr-decay-samples", 0, CLI_ARG_ONE, O_DECAY_SAMPLES, "N", "decay samples (default --train-samples)"},
    {"weight-decay", 0, CLI_ARG_ONE, O_WD, "X", "AdamW weight decay, not on biases and norms (default 0.01)"},
    {"clip-grad", 0, CLI_ARG_ONE, O_CLIP, "X", "clip the global gradient norm to X, 0 = off (default 1.0)"},
    {"adam-beta1", 0, CLI_ARG_ONE, O_BETA1, "X", "default 0.9"},
    {"adam-beta2", 0, CLI_ARG_ONE, O_BETA2, "X", "default 0.999"},
    {"adam-eps", 0, CLI_ARG_ONE, O_EPS, "X", "default 1e-8"},
    {"seed", 0, CLI_ARG_ONE, O_SEED, "N", "initialisation and data shuffling seed (default 1234)"},
    /* tokenizer and samples */
    {"tokenizer-type", 0, CLI_ARG_ONE, O_TOKENIZER, "TYPE", "GPT2BPETokenizer (default), NullTokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer or Llama2Tokenizer"},
    {"tokenizer-model", 0, CLI_ARG_ONE, O_TOKENIZER_MODEL, "PATH", "HuggingFace directory or tokenizer.json, or SentencePiece .model (vocabulary size and EOD)"},
    {"vocab-file", 0, CLI_ARG_ONE, O_VOCAB_FILE, "PATH", "GPT-2 vocab JSON (default: the bundled one)"},
    {"merge-file", 0, CLI_ARG_ONE, O_MERGE_FILE, "PATH", "GPT-2 merges (default: the bundled one)"},
    {"vocab-size", 0, CLI_ARG_ONE, O_VOCAB_SIZE, "N", "NullTokenizer: N ids plus EOD = N"},
    {"eod-mask-loss", 0, CLI_ARG_NONE, O_EOD_MASK, NULL, "no loss on targets after an EOD input"},
    /* logging and evaluation */
    {"log-interval", 0, CLI_ARG_ONE, O_LOG_INTERVAL, "N", "log line every N iterations (default 100)"},
    {"eval-interval", 0, CLI_ARG_ONE, O_EVAL_INTERVAL, "N", "validation every N iterations, 0 = never (default 1000)"},
    {"eval-iters", 0, CLI_ARG_ONE, O_EVAL_ITERS, "N", "global batches per validation, 0 = none (default 100)"},
    {"log-throughput", 0, CLI_ARG_NONE, O_LOG_THROUGHPUT, NULL, "accepted; throughput is always logged"},
    /* parallelism */
    {"tensor-model-parallel-size", 0, CLI_ARG_ONE, O_TP, "N", "tensor-parallel ranks (default 1); DP = world / (TP x PP)"},
    {"pipeline-model-parallel-size", 0, CLI_ARG_ONE, O_PP, "N", "pipeline stages, 1F1B schedule (default 1)"},
    {"use-distributed-optimizer", 0, CLI_ARG_NONE, O_DIST_OPT, NULL, "shard the AdamW state over data-parallel ranks (ZeRO-1)"},
    NOT_YET("sequence-parallel", CLI_ARG_NONE),
    NOT_YET("context-parallel-size", CLI_ARG_ONE),
    NOT_YET("num-layers-per-virtual-pipeline-stage", CLI_ARG_ONE),
    {"quiet", 'q', CLI_ARG_NONE, O_QUIET, NULL, "no configuration table or notes; twice: errors only"},
    {"verbose", 'v', CLI_ARG_NONE, O_VERBOSE, NULL, "more output"},
    {"help", 'h', CLI_ARG_NONE, O_HELP, NULL, "show this help and exit"},
    {"version", 'V', CLI_ARG_NONE, O_VERSION, NULL, "show the version and exit"},
};

enum tokenizer_kind { TK_GPT2, TK_NULL, TK_OTHER };  /* TK_OTHER: tokenizer.h types */

struct config {
    int num_layers, hidden, heads, ffn, seq, maxpos;
    uint64_t mbs, gbs, exit_interval;
    train_schedule_args sched;        /* lr, warmup, decay, train length */
    double wd, clip, beta1, beta2, eps, init_std, norm_eps;
    uint64_t seed;
    uint64_t log_interval, eval_interval, eval_iters;
    struct data_flags data;
    const char *vocab_file, *merge_file;
    const char *save, *load;
    uint64_t save_interval;
    int tokenizer, eod_mask, untie;
    int tok_type;                     /* enum tok_type with TK_OTHER */
    const char *tokenizer_model;
    int tp, pp, dist_opt;
    uint64_t vocab_size_arg, vocab_div;
    int have_lr, have_layers, have_seq, have_maxpos, have_mbs;
};

static struct cli_table tables[3];

static void print_help(void)
{
    printf("usage: %s --num-layers N --hidden-size N --num-attention-heads N --seq-length N\n"
           "         --max-position-embeddings N --micro-batch-size N --lr X\n"
           "         (--train-iters N | --train-samples N) (--data-path PREFIX... | --mock-data) [options]\n\n"
           "Pretrain Megatron's GPT on the CPU reference kernels with Megatron-LM's flags, data\n"
           "samples, learning-rate schedule and log line (fp32).  In parallel: mpirun -np N %s ...\n"
           "or srun %s ... (Megatron's rank order: TP fastest, then DP, then PP).\n\n",
           cli.name, cli.name, cli.name);
    cli_print_options(tables, 3, 36);
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
    case O_GBS: c->gbs = cli_opt_u64(o, v, 1, 1ull << 32); break;
    case O_TRAIN_ITERS: s->train_iters = cli_opt_u64(o, v, 1, 1ull << 40); break;
    case O_TRAIN_SAMPLES: s->train_samples = cli_opt_u64(o, v, 1, 1ull << 50); break;
    case O_EXIT_INTERVAL: c->exit_interval = cli_opt_u64(o, v, 1, 1ull << 40); break;
    case O_LR: s->lr = cli_opt_double(o, v, 0, 1e6); c->have_lr = 1; break;
    case O_MIN_LR: s->min_lr = cli_opt_double(o, v, 0, 1e6); break;
    case O_LR_WARMUP_INIT: s->lr_warmup_init = cli_opt_double(o, v, 0, 1e6); break;
    case O_DECAY_STYLE:
        s->decay_style = cli_opt_choice(o, v, (const char *const[]){"constant", "linear", "cosine", NULL});
        break;
    case O_WARMUP_ITERS: s->lr_warmup_iters = cli_opt_u64(o, v, 0, 1ull << 40); break;
    case O_WARMUP_FRACTION: s->lr_warmup_fraction = cli_opt_double(o, v, 0, 1); s->have_warmup_fraction = 1; break;
    case O_WARMUP_SAMPLES: s->lr_warmup_samples = cli_opt_u64(o, v, 0, 1ull << 50); break;
    case O_DECAY_ITERS: s->lr_decay_iters = cli_opt_u64(o, v, 1, 1ull << 40); s->have_decay_iters = 1; break;
    case O_DECAY_SAMPLES: s->lr_decay_samples = cli_opt_u64(o, v, 1, 1ull << 50); s->have_decay_samples = 1; break;
    case O_WD: c->wd = cli_opt_double(o, v, 0, 1e6); break;
    case O_CLIP: c->clip = cli_opt_double(o, v, 0, 1e30); break;
    case O_BETA1: c->beta1 = cli_opt_double(o, v, 0, 1); break;
    case O_BETA2: c->beta2 = cli_opt_double(o, v, 0, 1); break;
    case O_EPS: c->eps = cli_opt_double(o, v, 0, 1); break;
    case O_SEED: c->seed = cli_opt_u64(o, v, 0, UINT32_MAX); break;
    case O_LOG_INTERVAL: c->log_interval = cli_opt_u64(o, v, 1, 1ull << 40); break;
    case O_EVAL_INTERVAL: c->eval_interval = cli_opt_u64(o, v, 0, 1ull << 40); break;
    case O_EVAL_ITERS: c->eval_iters = cli_opt_u64(o, v, 0, 1ull << 32); break;
    case O_SAVE: c->save = v; break;
    case O_LOAD: c->load = v; break;
    case O_SAVE_INTERVAL: c->save_interval = cli_opt_u64(o, v, 1, 1ull << 40); break;
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
    case O_PP: c->pp = (int)cli_opt_u64(o, v, 1, 1 << 16); break;
    case O_EOD_MASK: c->eod_mask = 1; break;
    case O_VOCAB_DIV: c->vocab_div = cli_opt_u64(o, v, 1, 1 << 20); break;
    case O_INIT_STD: c->init_std = cli_opt_double(o, v, 0, 1e3); break;
    case O_UNTIE: c->untie = 1; break;
    case O_NORM_EPS: c->norm_eps = cli_opt_double(o, v, 1e-30, 1); break;
    case O_HIDDEN_DROPOUT: case O_ATTN_DROPOUT:
        if (cli_opt_double(o, v, 0, 1) != 0.0)
            cli_usage("option '--%s' other than 0 is not supported yet (no dropout)", o->lng);
        break;
    case O_DIST_OPT: c->dist_opt = 1; break;
    case O_LOG_THROUGHPUT: break;
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

static void parse_args(int argc, char **argv, struct config *c)
{
    memset(c, 0, sizeof *c);
    c->sched.decay_style = TRAIN_DECAY_LINEAR;
    c->wd = 0.01;
    c->clip = 1.0;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->init_std = 0.02;
    c->norm_eps = 1e-5;
    c->seed = 1234;
    c->log_interval = 100;
    c->eval_interval = 1000;
    c->eval_iters = 100;
    c->vocab_div = 128;
    c->tokenizer = TK_GPT2;
    c->tp = c->pp = 1;
    tables[0] = (struct cli_table){ "model", model_options, sizeof model_options / sizeof model_options[0],
                                    handle_option, c };
    tables[1] = data_flags_table(&c->data);
    tables[2] = (struct cli_table){ "training", train_options, sizeof train_options / sizeof train_options[0],
                                    handle_option, c };
    cli_parse(tables, 3, argc, argv, 1, NULL);

    /* Megatron's validate_args, for what exists here. */
    train_schedule_args *s = &c->sched;
    if (!c->have_layers) cli_usage("missing --num-layers");
    if (!c->hidden) cli_usage("missing --hidden-size");
    if (!c->heads) cli_usage("missing --num-attention-heads");
    if (!c->have_seq) cli_usage("missing --seq-length");
    if (!c->have_maxpos) cli_usage("missing --max-position-embeddings");
    if (!c->have_mbs) cli_usage("missing --micro-batch-size");
    if (!c->have_lr) cli_usage("missing --lr");
    if (c->hidden % c->heads) cli_usage("--hidden-size %d is not a multiple of --num-attention-heads %d", c->hidden, c->heads);
    if (c->maxpos < c->seq) cli_usage("--max-position-embeddings %d is less than --seq-length %d", c->maxpos, c->seq);
    if (!c->gbs) c->gbs = c->mbs;
    if (c->gbs % c->mbs) cli_usage("--global-batch-size %" PRIu64 " is not a multiple of --micro-batch-size %" PRIu64, c->gbs, c->mbs);
    if (!!s->train_iters == !!s->train_samples) cli_usage("give exactly one of --train-iters and --train-samples");
    if (s->have_warmup_fraction && (s->lr_warmup_iters || s->lr_warmup_samples))
        cli_usage("--lr-warmup-fraction and --lr-warmup-iters/--lr-warmup-samples are exclusive");
    if (s->train_iters && (s->have_decay_samples || s->lr_warmup_samples))
        cli_usage("--lr-decay-samples and --lr-warmup-samples need --train-samples");
    if (s->train_samples && (s->have_decay_iters || s->lr_warmup_iters))
        cli_usage("--lr-decay-iters and --lr-warmup-iters need --train-iters");
    if (s->min_lr > s->lr) cli_usage("--min-lr %g is above --lr %g", s->min_lr, s->lr);
    data_flags_check(&c->data, 1);
    if (c->tokenizer == TK_NULL && !c->vocab_size_arg) cli_usage("NullTokenizer needs --vocab-size");
    if (c->tokenizer != TK_NULL && c->vocab_size_arg) cli_usage("--vocab-size goes with --tokenizer-type NullTokenizer");
    if (c->tokenizer == TK_OTHER && !c->tokenizer_model) cli_usage("%s needs --tokenizer-model", tok_type_name(c->tok_type));
    s->global_batch_size = c->gbs;
    if (s->train_samples) {
        s->train_iters = s->train_samples / c->gbs;   /* Megatron's update_train_iters */
        if (!s->train_iters) cli_usage("--train-samples %" PRIu64 " is less than one global batch", s->train_samples);
    }
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

static const char *const styles[] = {"constant", "linear", "cosine"};

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
    ROW("parameters (rank 0)", "%zu", m->num_params);
    ROW("micro / global batch", "%" PRIu64 " / %" PRIu64 " (%" PRIu64 " micro-batches per DP rank)", c->mbs, c->gbs, nmicro);
    ROW("train iters", "%" PRIu64, c->sched.train_iters);
    ROW("lr / min lr / style", "%g / %g / %s", c->sched.lr, c->sched.min_lr, styles[c->sched.decay_style]);
    ROW("adam beta1 / beta2 / eps", "%g / %g / %g", c->beta1, c->beta2, c->eps);
    ROW("weight decay / clip grad", "%g / %g", c->wd, c->clip);
    ROW("init std / seed", "%g / %" PRIu64, c->init_std, c->seed);
    ROW("data", "%s", data);
    ROW("split", "%s", c->data.mock ? "1,1,1 (mock)" : c->data.npath ? (c->data.split ? c->data.split : "969, 30, 1")
                                                                     : "none (a data path per split)");
    ROW("tokenizer", "%s", vocab);
    ROW("eod mask loss", "%s", c->eod_mask ? "yes" : "no");
    ROW("log, eval interval / iters", "%" PRIu64 " / %" PRIu64 ", %" PRIu64, c->log_interval, c->eval_interval, c->eval_iters);
    ROW("parallel (TP, PP, DP)", "%d, %d, %d%s; %d OpenMP threads", P->tp_size, P->pp_size, P->dp_size,
        c->dist_opt ? ", distributed optimizer" : "", threads);
    ROW("backend / precision", "%s (%s) / %s", m->be->name, m->be->device, mds_dtype_name(m->cfg.dtype));
    ROW("communication", "%s", comm_backend());
#undef ROW
    fprintf(stderr, "%s\n", sep);
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
    }
    fprintf(stderr, "%s\n", line);
}

/* ---- checkpoints: Megatron's save_checkpoint / load_checkpoint --------------- */

static void save_checkpoint(const struct config *c, trainer *t, const train_schedule *s, uint64_t iteration,
                            uint64_t consumed, uint64_t valid_cursor)
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
    st.num_steps = (double)consumed;
    st.decay_style = (uint32_t)s->style;
    double t0 = cli_now();
    if (trainer_save(t, c->save, &st) != 0)
        cli_die(1, "%s\nhint: check the space and permissions of --save", t->err);
    const train_layout *P = t->P;
    cli_note("  successfully saved checkpoint from iteration %7" PRIu64 " to %s [ t %d/%d, p %d/%d ] (%.2f s)", iteration,
             c->save, P->tp_rank + 1, P->tp_size, P->pp_rank + 1, P->pp_size, cli_now() - t0);
}

/* Megatron's _check_and_set: the schedule must be the checkpoint's. */
static void check_sched(const char *dir, const char *name, double ours, double theirs)
{
    if (ours != theirs)
        cli_die(1, "checkpoint in '%s': lr scheduler %s is %.17g in the checkpoint but %.17g in this run\n"
                   "hint: resume with the --lr, --min-lr, --lr-warmup-*, --lr-decay-* and --train-* values of the saved run",
                dir, name, theirs, ours);
}

/* Restores weights, AdamW state and the counters; no checkpoint in dir
 * means starting afresh, as Megatron does (with a warning).  Every rank
 * reads its (TP, PP) file; a rank that fails ends the job. */
static void load_checkpoint(const struct config *c, trainer *t, const train_schedule *s, uint64_t *iteration,
                            uint64_t *consumed, uint64_t *valid_cursor)
{
    char err[4600];
    uint64_t it;
    const train_layout *P = t->P;
    int rc = ckpt_read_latest(c->load, &it, err, sizeof err);
    if (rc == CKPT_ERR_NOT_FOUND) {
        if (P->rank == 0)
            cli_error("warning: no '" CKPT_LATEST_NAME "' in '%s'; starting from iteration 0", c->load);
        return;
    }
    if (rc != 0) cli_die(1, "rank %d: cannot load the checkpoint: %s", P->rank, err);
    cli_note(" loading checkpoint from %s at iteration %" PRIu64, c->load, it);
    ckpt_state st;
    int code;
    if (trainer_load(t, c->load, it, &st, &code) != 0)
        cli_die(1, "%s\nhint: %s", t->err,
                code == CKPT_ERR_MISMATCH ? "resume with the model flags and parallel sizes of the saved run"
                : code == CKPT_ERR_CHECKSUM || code == CKPT_ERR_FORMAT ? "the file is damaged; load an earlier iteration"
                : "check --load");
    if (st.decay_style != (uint32_t)s->style)
        cli_die(1, "checkpoint in '%s': lr scheduler decay style is %s in the checkpoint but %s in this run", c->load,
                st.decay_style < 3 ? styles[st.decay_style] : "unknown", styles[s->style]);
    check_sched(c->load, "max lr", s->max_lr, st.max_lr);
    check_sched(c->load, "min lr", s->min_lr, st.min_lr);
    check_sched(c->load, "warmup init lr", s->init_lr, st.init_lr);
    check_sched(c->load, "warmup steps", s->warmup_steps, st.warmup_steps);
    check_sched(c->load, "decay steps", s->decay_steps, st.decay_steps);
    if (st.num_steps != (double)st.consumed_train_samples)
        cli_die(1, "checkpoint in '%s': lr scheduler num steps %.17g differs from consumed samples %" PRIu64, c->load,
                st.num_steps, st.consumed_train_samples);
    *iteration = st.iteration;
    *consumed = st.consumed_train_samples;
    *valid_cursor = st.consumed_valid_samples;
    cli_note("  successfully loaded checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %" PRIu64, c->load,
             P->tp_rank + 1, P->tp_size, P->pp_rank + 1, P->pp_size, it);
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
        ti->V = (int)c->vocab_size_arg + 1;   /* Megatron's _NullTokenizer: ids 0..N-1 plus EOD = N */
        ti->eod = (int64_t)c->vocab_size_arg;
        snprintf(ti->desc, sizeof ti->desc, "NullTokenizer (%d ids with EOD)", ti->V);
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

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
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
    train_schedule sched;
    char err[1024];
    if (train_schedule_init(&sched, &c.sched, err, sizeof err) != 0)
        cli_usage("%s", err);
    /* Megatron's initialize_model_parallel and validate_args */
    if (world_size % (c.tp * c.pp))
        cli_usage("the world size %d is not divisible by tensor (%d) x pipeline (%d) model parallel sizes",
                  world_size, c.tp, c.pp);
    int dp = world_size / (c.tp * c.pp);
    if (c.gbs % (c.mbs * (uint64_t)dp))
        cli_usage("--global-batch-size %" PRIu64 " is not divisible by micro-batch size (%" PRIu64
                  ") times data parallel size (%d)", c.gbs, c.mbs, dp);
    train_layout P;
    if (train_layout_init(&P, world, c.tp, c.pp, err, sizeof err) != 0)
        cli_die(1, "%s", err);
    int user_verbosity = cli.verbosity;
    if (world_rank != 0 && cli.verbosity > 1) cli.verbosity = 1;   /* notes and the table from rank 0 */

    struct tokenizer_info ti;
    open_tokenizer(&c, &ti);

    gpt_config mc;
    gpt_config_init(&mc);
    mc.num_layers = c.num_layers;
    mc.hidden_size = c.hidden;
    mc.num_heads = c.heads;
    mc.ffn_hidden_size = c.ffn;
    mc.max_position_embeddings = c.maxpos;
    mc.vocab_size = ti.V;
    mc.make_vocab_size_divisible_by = (int)c.vocab_div;
    mc.untie_embeddings = c.untie;
    mc.init_method_std = (float)c.init_std;
    mc.layernorm_eps = (float)c.norm_eps;
    mc.seed = c.seed;
    mc.tp_size = P.tp_size;
    mc.tp_rank = P.tp_rank;
    mc.pp_size = P.pp_size;
    mc.pp_rank = P.pp_rank;
    uint64_t nmicro = trainer_micro_batches(c.gbs, (int)c.mbs, P.dp_size);
    mc.act_slots = trainer_act_slots(&P, nmicro);
    gpt_model model;
    int rc = gpt_model_init(&model, &mc, (int)c.mbs, c.seq, err, sizeof err);
    if (rc == GPT_ERR_ARG) cli_usage("%s", err);
    if (rc) cli_die(1, "rank %d: cannot build the model: %s\nhint: use a smaller model or --micro-batch-size", world_rank, err);

    ds_pipeline *data = open_data(&c, &P, &ti);
    trainer t;
    trainer_config tc = { .global_batch_size = c.gbs, .vocab_size = ti.V, .dist_opt = c.dist_opt,
                          .beta1 = (float)c.beta1, .beta2 = (float)c.beta2, .eps = (float)c.eps,
                          .weight_decay = (float)c.wd, .clip_grad = (float)c.clip, .fatal = fatal };
    if (trainer_init(&t, &model, &P, data, &tc) != 0)
        cli_die(1, "%s", t.err);
    cli_note("> padded vocab (size: %d) with %d dummy tokens (new size: %d)", ti.V, model.Vp - ti.V, model.Vp);
    print_config(&c, &model, &P, ti.V, nmicro, ti.desc);
    /* Megatron prints this from data-parallel rank 0 of every (TP, PP) rank */
    if (user_verbosity >= 2 && P.dp_rank == 0)
        fprintf(stderr, " > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %zu\n",
                P.tp_rank, P.pp_rank, model.num_params);
    int do_valid = c.eval_iters > 0 && ds_pipeline_has_split(data, DS_SPLIT_VALID) &&
                   ds_pipeline_length(data, DS_SPLIT_VALID) > 0;
    int do_test = c.eval_iters > 0 && ds_pipeline_has_split(data, DS_SPLIT_TEST) &&
                  ds_pipeline_length(data, DS_SPLIT_TEST) > 0;

    uint64_t train_iters = c.sched.train_iters;
    double flops_per_iter = gpt_flops_per_token(&model) * (double)c.gbs * (double)c.seq;
    uint64_t consumed = 0, valid_cursor = 0;
    double interval_time = 0, interval_loss = 0;
    uint64_t interval_iters = 0;
    uint64_t iteration = 0;
    if (c.load) load_checkpoint(&c, &t, &sched, &iteration, &consumed, &valid_cursor);
    uint64_t last_saved = c.load ? iteration : UINT64_MAX;
    int log_rank = world_rank == world_size - 1;   /* Megatron's print_rank_last */
    cli_note("> training for %" PRIu64 " iterations ...", train_iters);
    train_layout_reset_stats(&P);
    uint64_t iters_run = 0;
    double run_start = cli_now();
    while (iteration < train_iters) {
        double ts = cli_now();
        double lr = train_schedule_lr(&sched, (double)consumed);
        double loss, norm;
        if (trainer_backward_pass(&t, consumed, &loss, &norm) != 0)
            cli_die(1, "%s", t.err);
        if (!isfinite(loss) || !isfinite(norm))
            cli_die(1, "loss or gradient norm is not finite at iteration %" PRIu64 " (loss %g, norm %g)\n"
                       "hint: lower --lr or raise --lr-warmup-iters", iteration + 1, loss, norm);
        if (trainer_update(&t, lr, norm) != 0)
            cli_die(1, "%s", t.err);
        iteration++;
        iters_run++;
        consumed += c.gbs;
        interval_time += cli_now() - ts;
        interval_loss += loss;
        interval_iters++;

        if (iteration % c.log_interval == 0) {
            if (log_rank) {
                double per_iter = interval_time / (double)interval_iters;
                char ts_s[64], eta[32];
                timestamp(ts_s, sizeof ts_s);
                format_eta(per_iter * (double)(train_iters - iteration), eta, sizeof eta);
                printf(" [%s] iteration %8" PRIu64 "/%8" PRIu64 " | consumed samples: %12" PRIu64
                       " | elapsed time per iteration (ms): %.1f | throughput per GPU (TFLOP/s/GPU): %.1f"
                       " | learning rate: %.6E | global batch size: %5" PRIu64 " | lm loss: %.6E"
                       " | loss scale: %.1f | grad norm: %.3f | number of skipped iterations: %3d"
                       " | number of nan iterations: %3d | tokens per second: %.1f | ETA: %s |\n",
                       ts_s, iteration, train_iters, consumed, per_iter * 1000.0,
                       flops_per_iter / per_iter / 1e12 / (double)world_size, train_schedule_lr(&sched, (double)consumed),
                       c.gbs, interval_loss / (double)interval_iters, 1.0, norm, 0, 0,
                       (double)c.gbs * c.seq / per_iter, eta);
                if (user_verbosity >= 3)
                    printf(" [rank %d] lm loss %.17g grad norm %.17g\n", world_rank, interval_loss / (double)interval_iters,
                           norm);
                fflush(stdout);
            }
            interval_time = interval_loss = 0;
            interval_iters = 0;
        }
        if (do_valid && c.eval_interval && iteration % c.eval_interval == 0) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "iteration %" PRIu64, iteration);
            double vl;
            if (trainer_evaluate(&t, DS_SPLIT_VALID, &valid_cursor, c.eval_iters, &vl) != 0)
                cli_die(1, "%s", t.err);
            if (log_rank) print_validation(prefix, vl);
        }
        if (c.save && c.save_interval && iteration % c.save_interval == 0) {
            save_checkpoint(&c, &t, &sched, iteration, consumed, valid_cursor);
            last_saved = iteration;
        }
        if (c.exit_interval && iteration % c.exit_interval == 0) {
            if (c.save && last_saved != iteration) {
                save_checkpoint(&c, &t, &sched, iteration, consumed, valid_cursor);
                last_saved = iteration;
            }
            cli_note("exiting program at iteration %" PRIu64, iteration);
            break;
        }
    }
    double run_time = cli_now() - run_start;
    if (c.save && last_saved != iteration)
        save_checkpoint(&c, &t, &sched, iteration, consumed, valid_cursor);
    char prefix[96];
    if (do_valid) {
        snprintf(prefix, sizeof prefix, "iteration %" PRIu64 " on validation set", iteration);
        double vl;
        if (trainer_evaluate(&t, DS_SPLIT_VALID, &valid_cursor, c.eval_iters, &vl) != 0)
            cli_die(1, "%s", t.err);
        if (log_rank) print_validation(prefix, vl);
    }
    if (do_test) {
        uint64_t test_cursor = 0;
        snprintf(prefix, sizeof prefix, "iteration %" PRIu64 " on test set", iteration);
        double tl;
        if (trainer_evaluate(&t, DS_SPLIT_TEST, &test_cursor, c.eval_iters, &tl) != 0)
            cli_die(1, "%s", t.err);
        if (log_rank) print_validation(prefix, tl);
    }
    if (user_verbosity >= 3 && iters_run)
        report_comm(&P, iters_run, run_time);
    trainer_release(&t);
    ds_pipeline_close(data);
    gpt_model_free(&model);
    train_layout_release(&P);
    comm_free(world);
    comm_finalize();
    data_flags_release(&c.data);
    free(ti.vocab_path);
    free(ti.merge_path);
    return 0;
}
