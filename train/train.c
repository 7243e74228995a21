/*
 * train.c - mdstrain: GPT pretraining with Megatron-LM's flags, data,
 * learning-rate schedule and log line, on the CPU reference kernels, in one
 * process or in parallel over MPI: Megatron's tensor, pipeline (1F1B) and
 * data parallelism, optionally with the distributed optimizer (ZeRO-1).
 * The parallel design (rank order, groups, schedule, what each rank holds)
 * is in docs/architecture.md ("mdstrain in parallel").
 *
 * One option table drives the parser and --help (STYLE 38).  The model is
 * train/model.[ch]; the data is the training-data pipeline of dataset.h
 * (Megatron's GPTDataset samples, same order); the schedule is Megatron's
 * OptimizerParamScheduler.get_lr (docs/cli.md gives the formula).
 *
 * Checkpoints (--save, --load, --save-interval) are train/checkpoint.[ch].
 * What it deliberately does not do yet: bf16/fp16, dropout, sequence or
 * context parallelism, interleaved pipeline stages, CUDA.
 * Log lines go to stdout (where Megatron prints them); the configuration
 * table, notes and errors go to stderr.  Exit status: 0 success, 1 runtime
 * failure, 2 bad usage.
 */
#include "bpe.h"
#include "checkpoint.h"
#include "cliutil.h"
#include "comm.h"
#include "dataset.h"
#include "kernels.h"
#include "model.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define PROG "mdstrain"
#define MDS_VERSION "0.1.0"

static int verbosity = 2;   /* 0 silent, 1 errors, 2 notes and the config table (default), 3 -v */

/* ---- errors (STYLE 13, 15, 40) -------------------------------------------- */

static void die(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    comm_abort(code);   /* ends every rank of a parallel job */
}

static int world_rank;      /* this process's rank (0 in one process) */

static void usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void usage_error(const char *fmt, ...)
{
    /* every rank parses the same arguments: rank 0 speaks for all */
    if (world_rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, PROG ": ");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        fprintf(stderr, "hint: see '" PROG " --help'\n");
    }
    comm_finalize();
    exit(2);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    if (verbosity < 2)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Wraps a library call returning a negative code: file, line, hint, exit 1. */
#define dsCheck(expr, handle_err, hint) do { \
        int rc_ = (expr); \
        if (rc_ < 0) { \
            fprintf(stderr, PROG ": %s (%s)\n  at %s:%d\nhint: %s\n", (handle_err), ds_strerror(rc_), \
                    __FILE__, __LINE__, (hint)); \
            comm_abort(1); \
        } \
    } while (0)

static void *mallocCheck_(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, PROG ": out of memory allocating %zu bytes\n  at %s:%d\nhint: use a smaller "
                "--micro-batch-size or model\n", n, file, line);
        comm_abort(1);
    }
    return p;
}
#define mallocCheck(n) mallocCheck_((n), __FILE__, __LINE__)

/* ---- the option table ----------------------------------------------------- */

enum {
    O_NUM_LAYERS, O_HIDDEN, O_HEADS, O_FFN, O_SEQ, O_MAXPOS, O_MBS, O_GBS, O_TRAIN_ITERS,
    O_TRAIN_SAMPLES, O_LR, O_MIN_LR, O_LR_WARMUP_INIT, O_DECAY_STYLE, O_WARMUP_ITERS,
    O_WARMUP_FRACTION, O_WARMUP_SAMPLES, O_DECAY_ITERS, O_DECAY_SAMPLES, O_WD, O_CLIP, O_BETA1,
    O_BETA2, O_EPS, O_SEED, O_LOG_INTERVAL, O_EVAL_INTERVAL, O_EVAL_ITERS, O_EXIT_INTERVAL,
    O_DATA_PATH, O_SPLIT, O_MOCK, O_CACHE, O_VOCAB_FILE, O_MERGE_FILE, O_TOKENIZER, O_VOCAB_SIZE,
    O_TP, O_PP, O_EOD_MASK, O_VOCAB_DIV, O_INIT_STD, O_UNTIE, O_NORM_EPS, O_HIDDEN_DROPOUT,
    O_ATTN_DROPOUT, O_DIST_OPT, O_LOG_THROUGHPUT, O_QUIET, O_VERBOSE, O_HELP, O_VERSION,
    O_NOT_YET, O_SAVE, O_SAVE_INTERVAL, O_LOAD,
    O_TRAIN_DATA_PATH, O_VALID_DATA_PATH, O_TEST_DATA_PATH   /* in split order */
};

static const struct cli_option options[] = {
    /* model */
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
    /* batch and length of training */
    {"micro-batch-size", 0, CLI_ARG_ONE, O_MBS, "N", "samples per micro-batch (required)"},
    {"global-batch-size", 0, CLI_ARG_ONE, O_GBS, "N", "samples per iteration, a multiple of the micro-batch (default: micro-batch)"},
    {"train-iters", 0, CLI_ARG_ONE, O_TRAIN_ITERS, "N", "iterations to train (or --train-samples)"},
    {"train-samples", 0, CLI_ARG_ONE, O_TRAIN_SAMPLES, "N", "samples to train (iterations = N / global batch)"},
    {"exit-interval", 0, CLI_ARG_ONE, O_EXIT_INTERVAL, "N", "stop after an iteration that is a multiple of N (saving first with --save)"},
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
    /* data */
    {"data-path", 0, CLI_ARG_MANY, O_DATA_PATH, "[W] PREFIX...", "Megatron dataset prefix(es), optionally weighted"},
    {"split", 0, CLI_ARG_ONE, O_SPLIT, "A,B,C", "train/valid/test split weights (default 969, 30, 1)"},
    {"mock-data", 0, CLI_ARG_NONE, O_MOCK, NULL, "Megatron's MockGPTDataset instead of --data-path"},
    {"data-cache-path", 0, CLI_ARG_ONE, O_CACHE, "DIR", "cache the index arrays in DIR (Megatron's file names)"},
    {"tokenizer-type", 0, CLI_ARG_ONE, O_TOKENIZER, "TYPE", "GPT2BPETokenizer (default) or NullTokenizer"},
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
    {"quiet", 'q', CLI_ARG_NONE, O_QUIET, NULL, "no configuration table or notes; twice: errors only"},
    {"verbose", 'v', CLI_ARG_NONE, O_VERBOSE, NULL, "more output"},
    {"help", 'h', CLI_ARG_NONE, O_HELP, NULL, "show this help and exit"},
    {"version", 'V', CLI_ARG_NONE, O_VERSION, NULL, "show the version and exit"},
    /* Megatron flags refused by name, never ignored. */
    {"bf16", 0, CLI_ARG_NONE, O_NOT_YET, NULL, NULL},
    {"fp16", 0, CLI_ARG_NONE, O_NOT_YET, NULL, NULL},
    {"sequence-parallel", 0, CLI_ARG_NONE, O_NOT_YET, NULL, NULL},
    {"context-parallel-size", 0, CLI_ARG_ONE, O_NOT_YET, NULL, NULL},
    {"num-layers-per-virtual-pipeline-stage", 0, CLI_ARG_ONE, O_NOT_YET, NULL, NULL},
    {"rampup-batch-size", 0, CLI_ARG_MANY, O_NOT_YET, NULL, NULL},
    {"swiglu", 0, CLI_ARG_NONE, O_NOT_YET, NULL, NULL},
    {"normalization", 0, CLI_ARG_ONE, O_NOT_YET, NULL, NULL},
    {"position-embedding-type", 0, CLI_ARG_ONE, O_NOT_YET, NULL, NULL},
    {"group-query-attention", 0, CLI_ARG_NONE, O_NOT_YET, NULL, NULL},
    {"train-data-path", 0, CLI_ARG_MANY, O_TRAIN_DATA_PATH, "[W] PREFIX...", "the train split's own blend, each prefix whole (replaces --data-path/--split)"},
    {"valid-data-path", 0, CLI_ARG_MANY, O_VALID_DATA_PATH, "[W] PREFIX...", "the validation split's own blend"},
    {"test-data-path", 0, CLI_ARG_MANY, O_TEST_DATA_PATH, "[W] PREFIX...", "the test split's own blend"},
};
#define NOPTIONS (sizeof options / sizeof options[0])

enum decay_style { DECAY_CONSTANT, DECAY_LINEAR, DECAY_COSINE };
enum tokenizer { TOK_GPT2, TOK_NULL };

struct config {
    int num_layers, hidden, heads, ffn, seq, maxpos;
    uint64_t mbs, gbs, train_iters, train_samples, exit_interval;
    double lr, min_lr, lr_warmup_init, warmup_fraction;
    int have_lr, have_warmup_fraction, have_warmup_iters, have_warmup_samples;
    int have_decay_iters, have_decay_samples;
    int decay_style;
    uint64_t warmup_iters, warmup_samples, decay_iters, decay_samples;
    double wd, clip, beta1, beta2, eps, init_std, norm_eps;
    uint64_t seed;
    uint64_t log_interval, eval_interval, eval_iters;
    const char **data_path;
    size_t n_data_path;
    const char *const *split_data_path[3];   /* --train/valid/test-data-path: runs of argv */
    size_t n_split_data_path[3];
    const char *split_data_eq[3];           /* the one token of --train-data-path=P */
    int have_split;
    const char *split, *cache, *vocab_file, *merge_file;
    const char *save, *load;
    uint64_t save_interval;
    int mock, tokenizer, eod_mask, untie;
    int tp, pp, dist_opt;
    uint64_t vocab_size_arg, vocab_div;
};

static void print_help(void)
{
    printf("usage: " PROG " --num-layers N --hidden-size N --num-attention-heads N --seq-length N\n"
           "         --max-position-embeddings N --micro-batch-size N --lr X\n"
           "         (--train-iters N | --train-samples N) (--data-path PREFIX... | --mock-data) [options]\n\n"
           "Pretrain Megatron's GPT on the CPU reference kernels with Megatron-LM's flags, data\n"
           "samples, learning-rate schedule and log line (fp32).  In parallel: mpirun -np N " PROG " ...\n"
           "or srun " PROG " ... (Megatron's rank order: TP fastest, then DP, then PP).\n\n");
    cli_print_options(options, NOPTIONS, 36);
    printf("\nRefused with exit 2 until implemented: --bf16, --fp16, --sequence-parallel,\n"
           "--context-parallel-size, virtual pipeline stages.\n"
           "Exit status: 0 success, 1 runtime failure (data, NaN loss, memory), 2 bad usage.\n");
}

/* argparse-compatible matching (cliutil); ambiguity is bad usage. */
static const struct cli_option *find_long(const char *name, size_t len)
{
    int ambiguous;
    const struct cli_option *o = cli_find_long(options, NOPTIONS, name, len, &ambiguous);
    if (ambiguous) usage_error("ambiguous option '--%.*s'", (int)len, name);
    return o;
}

static uint64_t opt_u64(const char *name, const char *v, uint64_t lo, uint64_t hi)
{
    uint64_t x;
    if (cli_parse_u64(v, &x) != 0 || x < lo || x > hi)
        usage_error("option '--%s' needs an integer in [%" PRIu64 ", %" PRIu64 "], got '%s'", name, lo, hi, v);
    return x;
}

static double opt_double(const char *name, const char *v, double lo, double hi)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi)
        usage_error("option '--%s' needs a number in [%g, %g], got '%s'", name, lo, hi, v);
    return x;
}

static void parse_args(int argc, char **argv, struct config *c)
{
    memset(c, 0, sizeof *c);
    c->decay_style = DECAY_LINEAR;
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
    c->split = "969, 30, 1";
    c->vocab_div = 128;
    c->tokenizer = TOK_GPT2;
    c->tp = c->pp = 1;
    int have_layers = 0, have_seq = 0, have_maxpos = 0, have_mbs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const struct cli_option *o = NULL;
        const char *val = NULL;
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            o = find_long(a + 2, len);
            if (!o) usage_error("unknown option '%s'", a);
            if (eq) val = eq + 1;
        } else if (a[0] == '-' && a[1] && a[1] != '-' && !a[2]) {
            for (size_t k = 0; k < NOPTIONS; k++)
                if (options[k].shrt == a[1]) o = &options[k];
            if (!o) usage_error("unknown option '%s'", a);
        } else if (strcmp(a, "-qq") == 0) {
            verbosity = 0;
            continue;
        } else {
            usage_error("unexpected argument '%s'", a);
        }
        if (o->id == O_NOT_YET)
            usage_error("option '--%s' is not supported yet (CPU fp32)", o->lng);
        if (o->arg == CLI_ARG_NONE && val) usage_error("option '--%s' takes no value", o->lng);
        if (o->arg == CLI_ARG_ONE && !val) {
            if (i + 1 >= argc || cli_looks_like_option(argv[i + 1]))
                usage_error("option '--%s' needs a value", o->lng);
            val = argv[++i];
        }
        const char *n = o->lng;
        switch (o->id) {
        case O_NUM_LAYERS: c->num_layers = (int)opt_u64(n, val, 1, 1 << 16); have_layers = 1; break;
        case O_HIDDEN: c->hidden = (int)opt_u64(n, val, 1, 1 << 20); break;
        case O_HEADS: c->heads = (int)opt_u64(n, val, 1, 1 << 16); break;
        case O_FFN: c->ffn = (int)opt_u64(n, val, 1, 1 << 24); break;
        case O_SEQ: c->seq = (int)opt_u64(n, val, 1, 1 << 24); have_seq = 1; break;
        case O_MAXPOS: c->maxpos = (int)opt_u64(n, val, 1, 1 << 24); have_maxpos = 1; break;
        case O_MBS: c->mbs = opt_u64(n, val, 1, 1 << 20); have_mbs = 1; break;
        case O_GBS: c->gbs = opt_u64(n, val, 1, 1ull << 32); break;
        case O_TRAIN_ITERS: c->train_iters = opt_u64(n, val, 1, 1ull << 40); break;
        case O_TRAIN_SAMPLES: c->train_samples = opt_u64(n, val, 1, 1ull << 50); break;
        case O_EXIT_INTERVAL: c->exit_interval = opt_u64(n, val, 1, 1ull << 40); break;
        case O_LR: c->lr = opt_double(n, val, 0, 1e6); c->have_lr = 1; break;
        case O_MIN_LR: c->min_lr = opt_double(n, val, 0, 1e6); break;
        case O_LR_WARMUP_INIT: c->lr_warmup_init = opt_double(n, val, 0, 1e6); break;
        case O_DECAY_STYLE:
            if (strcmp(val, "constant") == 0) c->decay_style = DECAY_CONSTANT;
            else if (strcmp(val, "linear") == 0) c->decay_style = DECAY_LINEAR;
            else if (strcmp(val, "cosine") == 0) c->decay_style = DECAY_COSINE;
            else usage_error("option '--lr-decay-style' must be constant, linear or cosine, got '%s'", val);
            break;
        case O_WARMUP_ITERS: c->warmup_iters = opt_u64(n, val, 0, 1ull << 40); c->have_warmup_iters = 1; break;
        case O_WARMUP_FRACTION: c->warmup_fraction = opt_double(n, val, 0, 1); c->have_warmup_fraction = 1; break;
        case O_WARMUP_SAMPLES: c->warmup_samples = opt_u64(n, val, 0, 1ull << 50); c->have_warmup_samples = 1; break;
        case O_DECAY_ITERS: c->decay_iters = opt_u64(n, val, 1, 1ull << 40); c->have_decay_iters = 1; break;
        case O_DECAY_SAMPLES: c->decay_samples = opt_u64(n, val, 1, 1ull << 50); c->have_decay_samples = 1; break;
        case O_WD: c->wd = opt_double(n, val, 0, 1e6); break;
        case O_CLIP: c->clip = opt_double(n, val, 0, 1e30); break;
        case O_BETA1: c->beta1 = opt_double(n, val, 0, 1); break;
        case O_BETA2: c->beta2 = opt_double(n, val, 0, 1); break;
        case O_EPS: c->eps = opt_double(n, val, 0, 1); break;
        case O_SEED: c->seed = opt_u64(n, val, 0, UINT32_MAX); break;
        case O_LOG_INTERVAL: c->log_interval = opt_u64(n, val, 1, 1ull << 40); break;
        case O_EVAL_INTERVAL: c->eval_interval = opt_u64(n, val, 0, 1ull << 40); break;
        case O_EVAL_ITERS: c->eval_iters = opt_u64(n, val, 0, 1ull << 32); break;
        case O_DATA_PATH:
            /* argparse nargs='*': a repeated flag replaces the list */
            free(c->data_path);
            c->data_path = mallocCheck((size_t)argc * sizeof *c->data_path);
            c->n_data_path = 0;
            if (val) c->data_path[c->n_data_path++] = val;
            else
                while (i + 1 < argc && !cli_looks_like_option(argv[i + 1]))
                    c->data_path[c->n_data_path++] = argv[++i];
            break;
        case O_TRAIN_DATA_PATH: case O_VALID_DATA_PATH: case O_TEST_DATA_PATH: {
            /* nargs='*' too; the tokens are consecutive in argv */
            int sp = o->id - O_TRAIN_DATA_PATH;
            c->split_data_eq[sp] = val;
            c->split_data_path[sp] = val ? &c->split_data_eq[sp] : (const char *const *)&argv[i + 1];
            c->n_split_data_path[sp] = val ? 1 : 0;
            while (!val && i + 1 < argc && !cli_looks_like_option(argv[i + 1])) {
                c->n_split_data_path[sp]++;
                i++;
            }
            break;
        }
        case O_SPLIT: c->split = val; c->have_split = 1; break;
        case O_SAVE: c->save = val; break;
        case O_LOAD: c->load = val; break;
        case O_SAVE_INTERVAL: c->save_interval = opt_u64(n, val, 1, 1ull << 40); break;
        case O_MOCK: c->mock = 1; break;
        case O_CACHE: c->cache = val; break;
        case O_VOCAB_FILE: c->vocab_file = val; break;
        case O_MERGE_FILE: c->merge_file = val; break;
        case O_TOKENIZER:
            if (strcmp(val, "GPT2BPETokenizer") == 0) c->tokenizer = TOK_GPT2;
            else if (strcmp(val, "NullTokenizer") == 0) c->tokenizer = TOK_NULL;
            else usage_error("tokenizer type '%s' is not supported (GPT2BPETokenizer or NullTokenizer)", val);
            break;
        case O_VOCAB_SIZE: c->vocab_size_arg = opt_u64(n, val, 1, 1 << 30); break;
        case O_TP: c->tp = (int)opt_u64(n, val, 1, 1 << 16); break;
        case O_PP: c->pp = (int)opt_u64(n, val, 1, 1 << 16); break;
        case O_EOD_MASK: c->eod_mask = 1; break;
        case O_VOCAB_DIV: c->vocab_div = opt_u64(n, val, 1, 1 << 20); break;
        case O_INIT_STD: c->init_std = opt_double(n, val, 0, 1e3); break;
        case O_UNTIE: c->untie = 1; break;
        case O_NORM_EPS: c->norm_eps = opt_double(n, val, 1e-30, 1); break;
        case O_HIDDEN_DROPOUT: case O_ATTN_DROPOUT:
            if (opt_double(n, val, 0, 1) != 0.0)
                usage_error("option '--%s' other than 0 is not supported yet (no dropout)", n);
            break;
        case O_DIST_OPT: c->dist_opt = 1; break;
        case O_LOG_THROUGHPUT: break;
        case O_QUIET: verbosity = verbosity > 0 ? verbosity - 1 : 0; break;
        case O_VERBOSE: verbosity++; break;
        case O_HELP:
            if (world_rank == 0) print_help();
            comm_finalize();
            exit(0);
        case O_VERSION:
            if (world_rank == 0) printf(PROG " %s (dataset library %s; %s)\n", MDS_VERSION, ds_version_string(), comm_backend());
            comm_finalize();
            exit(0);
        }
    }
    /* Megatron's validate_args, for what exists here. */
    if (!have_layers) usage_error("missing --num-layers");
    if (!c->hidden) usage_error("missing --hidden-size");
    if (!c->heads) usage_error("missing --num-attention-heads");
    if (!have_seq) usage_error("missing --seq-length");
    if (!have_maxpos) usage_error("missing --max-position-embeddings");
    if (!have_mbs) usage_error("missing --micro-batch-size");
    if (!c->have_lr) usage_error("missing --lr");
    if (c->hidden % c->heads) usage_error("--hidden-size %d is not a multiple of --num-attention-heads %d", c->hidden, c->heads);
    if (c->maxpos < c->seq) usage_error("--max-position-embeddings %d is less than --seq-length %d", c->maxpos, c->seq);
    if (!c->gbs) c->gbs = c->mbs;
    if (c->gbs % c->mbs) usage_error("--global-batch-size %" PRIu64 " is not a multiple of --micro-batch-size %" PRIu64, c->gbs, c->mbs);
    if (!!c->train_iters == !!c->train_samples) usage_error("give exactly one of --train-iters and --train-samples");
    if (c->have_warmup_fraction && (c->warmup_iters || c->warmup_samples))
        usage_error("--lr-warmup-fraction and --lr-warmup-iters/--lr-warmup-samples are exclusive");
    if (c->train_iters && (c->have_decay_samples || c->have_warmup_samples))
        usage_error("--lr-decay-samples and --lr-warmup-samples need --train-samples");
    if (c->train_samples && (c->have_decay_iters || c->have_warmup_iters))
        usage_error("--lr-decay-iters and --lr-warmup-iters need --train-iters");
    if (c->min_lr > c->lr) usage_error("--min-lr %g is above --lr %g", c->min_lr, c->lr);
    int per_split = c->n_split_data_path[0] || c->n_split_data_path[1] || c->n_split_data_path[2];
    if (c->mock && c->n_data_path) usage_error("--mock-data and --data-path are exclusive");
    if (per_split && (c->mock || c->n_data_path))
        usage_error("--train-data-path/--valid-data-path/--test-data-path and %s are exclusive", c->mock ? "--mock-data" : "--data-path");
    if (per_split && c->have_split) usage_error("--split does not apply to --train-data-path/--valid-data-path/--test-data-path");
    if (per_split && !c->n_split_data_path[0]) usage_error("missing --train-data-path (the valid and test paths do not train)");
    if (!c->mock && !c->n_data_path && !per_split) usage_error("missing --data-path (or --mock-data, or --train-data-path)");
    if (c->tokenizer == TOK_NULL && !c->vocab_size_arg) usage_error("NullTokenizer needs --vocab-size");
    if (c->tokenizer == TOK_GPT2 && c->vocab_size_arg) usage_error("--vocab-size goes with --tokenizer-type NullTokenizer");
    if (c->train_samples) {
        c->train_iters = c->train_samples / c->gbs;   /* Megatron's update_train_iters */
        if (!c->train_iters) usage_error("--train-samples %" PRIu64 " is less than one global batch", c->train_samples);
    }
}

/* ---- Megatron's learning-rate schedule ------------------------------------ */

/*
 * OptimizerParamScheduler.get_lr (megatron/core/optimizer_param_scheduler.py),
 * in samples: the scheduler advances by the global batch after each
 * optimizer step, so iteration k (from 1) trains with sched_lr((k-1)·gbs)
 * and Megatron logs sched_lr(k·gbs) on iteration k's line.
 */
struct schedule {
    double max_lr, min_lr, init_lr, warmup_steps, decay_steps;
    int style;
};

static double sched_lr(const struct schedule *s, double num_steps)
{
    if (s->warmup_steps > 0 && num_steps <= s->warmup_steps)
        return s->init_lr + (s->max_lr - s->init_lr) * num_steps / s->warmup_steps;
    if (s->style == DECAY_CONSTANT)
        return s->max_lr;
    if (num_steps > s->decay_steps)
        return s->min_lr;
    double ratio = (num_steps - s->warmup_steps) / (s->decay_steps - s->warmup_steps);
    double delta = s->max_lr - s->min_lr, coeff;
    if (s->style == DECAY_LINEAR)
        coeff = 1.0 - ratio;
    else
        coeff = 0.5 * (cos(M_PI * ratio) + 1.0);
    return s->min_lr + coeff * delta;
}

static void make_schedule(const struct config *c, struct schedule *s)
{
    s->max_lr = c->lr;
    s->min_lr = c->min_lr;
    s->init_lr = c->lr_warmup_init;
    s->style = c->decay_style;
    if (c->train_samples) {
        s->decay_steps = (double)(c->have_decay_samples ? c->decay_samples : c->train_samples);
        s->warmup_steps = c->have_warmup_fraction ? c->warmup_fraction * s->decay_steps : (double)c->warmup_samples;
    } else {
        s->decay_steps = (double)(c->have_decay_iters ? c->decay_iters : c->train_iters) * (double)c->gbs;
        s->warmup_steps = c->have_warmup_fraction ? c->warmup_fraction * s->decay_steps
                                                  : (double)c->warmup_iters * (double)c->gbs;
    }
    /* Megatron's asserts in OptimizerParamScheduler.__init__ */
    if (!(s->decay_steps > 0)) usage_error("the learning-rate decay length is 0");
    if (!(s->warmup_steps < s->decay_steps))
        usage_error("the warmup (%g samples) is not shorter than the decay (%g samples)", s->warmup_steps, s->decay_steps);
}

/* ---- data ------------------------------------------------------------------ */

struct batch {
    int *inputs, *targets;   /* (B, T) */
    float *mask;             /* (B, T) */
    int64_t *tok, *lab;      /* (T) scratch */
    float *lm;               /* (T) */
};

static void load_micro_batch(const ds_pipeline *p, int split, uint64_t first, int B, int T, int V,
                             struct batch *b)
{
    for (int i = 0; i < B; i++) {
        uint64_t k = first + (uint64_t)i;
        if (k >= ds_pipeline_length(p, split))
            die(1, "sample %" PRIu64 " is past the end of the %s split (%" PRIu64 " samples)", k,
                split == DS_SPLIT_TRAIN ? "train" : split == DS_SPLIT_VALID ? "validation" : "test",
                ds_pipeline_length(p, split));
        dsCheck(ds_pipeline_sample(p, split, k, b->tok, b->lab, b->lm, NULL, NULL), ds_pipeline_error(p),
                "the dataset or its cache is damaged; check it with 'mdsinspect verify'");
        for (int t = 0; t < T; t++) {
            if (b->tok[t] < 0 || b->tok[t] >= V || b->lab[t] < 0 || b->lab[t] >= V)
                die(1, "token id %" PRId64 " in sample %" PRIu64 " is outside the vocabulary (%d ids)\n"
                    "hint: train with the tokenizer the data was made with (--vocab-file, --tokenizer-type)",
                    b->tok[t] < 0 || b->tok[t] >= V ? b->tok[t] : b->lab[t], k, V);
            b->inputs[(size_t)i * T + t] = (int)b->tok[t];
            b->targets[(size_t)i * T + t] = (int)b->lab[t];
            b->mask[(size_t)i * T + t] = b->lm[t];
        }
    }
}

/* ---- the parallel layout (docs/architecture.md, "mdstrain in parallel") --- */

/*
 * Megatron's rank order tp-dp-pp: rank = tp_rank + TP (dp_rank + DP pp_rank),
 * so TP groups are adjacent ranks.  Groups: tp (same dp, pp), dp (same tp,
 * pp), pp (same tp, dp), mp = the model-parallel group TP x PP (same dp; the
 * gradient norm), emb = the first and last stage of a pipeline (the tied
 * word embedding's gradient; a one-rank group elsewhere or with PP = 1).
 */
struct par {
    mds_comm *world, *tp, *dp, *pp, *mp, *emb;
    int rank, size, tp_size, pp_size, dp_size, tp_rank, pp_rank, dp_rank;
    int dist_opt;
    /* distributed optimizer: this rank's shard [lo, hi) of the flat
       parameters, padded to dp_size * shard floats */
    size_t shard, lo, hi;
    float *pad, *gshard, *mshard, *vshard;
};

static void commCheck_(int rc, const char *what, const char *file, int line)
{
    if (rc < 0) {
        fprintf(stderr, PROG ": rank %d: %s: %s\n  at %s:%d\n", world_rank, what, comm_error(), file, line);
        comm_abort(1);
    }
}
#define commCheck(expr, what) commCheck_((expr), (what), __FILE__, __LINE__)

static void tp_allreduce_sum(void *ctx, float *buf, size_t n)
{
    commCheck(comm_allreduce(ctx, buf, n, COMM_F32, COMM_SUM), "tensor-parallel all-reduce");
}

static void tp_allreduce_max(void *ctx, float *buf, size_t n)
{
    commCheck(comm_allreduce(ctx, buf, n, COMM_F32, COMM_MAX), "tensor-parallel all-reduce (max)");
}

static void par_groups(struct par *P)
{
    int tp = P->tp_size, dp = P->dp_size, r = P->rank;
    P->tp_rank = r % tp;
    P->dp_rank = r / tp % dp;
    P->pp_rank = r / (tp * dp);
    commCheck(comm_split(P->world, r / tp, P->tp_rank, &P->tp), "splitting the tensor-parallel groups");
    commCheck(comm_split(P->world, P->tp_rank + tp * P->pp_rank, P->dp_rank, &P->dp), "splitting the data-parallel groups");
    commCheck(comm_split(P->world, P->tp_rank + tp * P->dp_rank, P->pp_rank, &P->pp), "splitting the pipeline groups");
    commCheck(comm_split(P->world, P->dp_rank, P->tp_rank + tp * P->pp_rank, &P->mp), "splitting the model-parallel groups");
    int ends = P->pp_rank == 0 || P->pp_rank == P->pp_size - 1;
    commCheck(comm_split(P->world, ends ? P->tp_rank + tp * P->dp_rank : tp * dp + r, P->pp_rank, &P->emb),
              "splitting the embedding groups");
}

static void par_free(struct par *P)
{
    comm_free(P->tp); comm_free(P->dp); comm_free(P->pp); comm_free(P->mp); comm_free(P->emb);
    free(P->pad); free(P->gshard); free(P->mshard); free(P->vshard);
}

/* ---- one step's micro-batches: Megatron's schedules ----------------------- */

/*
 * Micro-batch j of an iteration on data-parallel rank d holds the samples
 * base + j B DP + d B ... + B - 1 (Megatron's MegatronPretrainingSampler:
 * each micro-batch step takes B x DP consecutive samples, rank d the d-th
 * slice), so the ranks together consume the global batch in order.
 */
struct step {
    gpt_model *m;
    const struct par *P;
    const ds_pipeline *data;
    int split, V;
    uint64_t base;      /* the first sample of this global batch */
    uint64_t nmicro;    /* micro-batches per data-parallel rank */
    float scale;        /* backward scale: 1 / (nmicro * DP) */
    struct batch *b;
    double ls, nt;      /* sums over this rank's micro-batches (last stage) */
};

static void step_forward(struct step *st, uint64_t j)
{
    gpt_model *m = st->m;
    gpt_set_slot(m, (int)(j % (uint64_t)m->slots));
    uint64_t first = st->base + j * (uint64_t)m->B * (uint64_t)st->P->dp_size + (uint64_t)st->P->dp_rank * (uint64_t)m->B;
    load_micro_batch(st->data, st->split, first, m->B, m->T, st->V, st->b);
    double ls, nt;
    if (gpt_forward(m, st->b->inputs, st->b->targets, st->b->mask, &ls, &nt) != GPT_OK)
        die(1, "rank %d: the model refused micro-batch %" PRIu64, world_rank, j);
    st->ls += ls;
    st->nt += nt;
}

static void step_backward(struct step *st, uint64_t j)
{
    gpt_set_slot(st->m, (int)(j % (uint64_t)st->m->slots));
    gpt_backward(st->m, st->scale);
}

/* Point-to-point between neighbouring stages; the buffers are slot j's. */
static size_t stage_bytes(const gpt_model *m) { return (size_t)m->B * (size_t)m->T * (size_t)m->C * sizeof(float); }

static float *slot_input(gpt_model *m, uint64_t j) { gpt_set_slot(m, (int)(j % (uint64_t)m->slots)); return gpt_stage_input(m); }
static const float *slot_output(gpt_model *m, uint64_t j) { gpt_set_slot(m, (int)(j % (uint64_t)m->slots)); return gpt_stage_output(m); }
static float *slot_dgrad(gpt_model *m, uint64_t j) { gpt_set_slot(m, (int)(j % (uint64_t)m->slots)); return gpt_stage_dgrad(m); }

static void p2p(const struct step *st, const void *sbuf, int to_next, void *rbuf, int from_next)
{
    const struct par *P = st->P;
    int prev = P->pp_rank - 1, next = P->pp_rank + 1 < P->pp_size ? P->pp_rank + 1 : -1;
    size_t n = stage_bytes(st->m);
    int speer = sbuf ? (to_next ? next : prev) : -1, rpeer = rbuf ? (from_next ? next : prev) : -1;
    commCheck(comm_sendrecv(P->pp, sbuf, n, speer, rbuf, n, rpeer), "pipeline send/receive");
}

/* Receive micro-batch j's input from the previous stage (unless first),
 * forward it, send its output to the next stage (unless last): a warm-up
 * step of 1F1B and each step of evaluation. */
static void forward_in_chain(struct step *st, uint64_t j)
{
    const struct par *P = st->P;
    if (P->pp_rank > 0) p2p(st, NULL, 0, slot_input(st->m, j), 0);
    step_forward(st, j);
    if (P->pp_rank < P->pp_size - 1) p2p(st, slot_output(st->m, j), 1, NULL, 0);
}

/*
 * Forward and backward of every micro-batch of one global batch.  PP = 1:
 * Megatron's forward_backward_no_pipelining (forward j, backward j).  PP > 1:
 * forward_backward_pipelining_without_interleaving, the 1F1B schedule:
 * PP - stage - 1 warm-up forwards, then one forward and one backward in
 * turn, then the remaining backwards; neighbours exchange activations and
 * gradients with paired send/receive calls in Megatron's order
 * (send_forward_recv_backward, send_backward_recv_forward), which cannot
 * deadlock.  Activations of up to PP - stage micro-batches are alive.
 */
static void run_schedule(struct step *st)
{
    gpt_model *m = st->m;
    const struct par *P = st->P;
    int first = P->pp_rank == 0, last = P->pp_rank == P->pp_size - 1;
    uint64_t n = st->nmicro;
    uint64_t warmup = (uint64_t)(P->pp_size - P->pp_rank - 1);
    if (warmup > n) warmup = n;
    uint64_t steady = n - warmup;
    for (uint64_t i = 0; i < warmup; i++)
        forward_in_chain(st, i);
    if (steady && !first) p2p(st, NULL, 0, slot_input(m, warmup), 0);
    for (uint64_t i = 0; i < steady; i++) {
        uint64_t jf = warmup + i, jb = i;
        step_forward(st, jf);
        if (!last) {   /* send_forward_recv_backward */
            const float *out = slot_output(m, jf);
            p2p(st, out, 1, slot_dgrad(m, jb), 1);
        }
        step_backward(st, jb);
        if (!first) {
            const float *dgrad = slot_dgrad(m, jb);
            if (i + 1 == steady) p2p(st, dgrad, 0, NULL, 0);   /* send_backward */
            else p2p(st, dgrad, 0, slot_input(m, jf + 1), 0);  /* send_backward_recv_forward */
        }
    }
    for (uint64_t i = 0; i < warmup; i++) {
        uint64_t jb = steady + i;
        if (!last) p2p(st, NULL, 0, slot_dgrad(m, jb), 1);
        step_backward(st, jb);
        if (!first) p2p(st, slot_dgrad(m, jb), 0, NULL, 0);
    }
}

/* Forward only (evaluation): the stages in a chain. */
static void run_forward_only(struct step *st)
{
    for (uint64_t j = 0; j < st->nmicro; j++)
        forward_in_chain(st, j);
}

/* Σ loss / Σ mask of a schedule over the data-parallel ranks; meaningful on
 * the last stage (where the losses are). */
static double dp_mean_loss(const struct par *P, double ls, double nt)
{
    double v[2] = {ls, nt};
    commCheck(comm_allreduce(P->dp, v, 2, COMM_F64, COMM_SUM), "data-parallel loss all-reduce");
    return v[1] > 0 ? v[0] / v[1] : 0.0;
}

/* Mean loss (Σ loss / Σ mask over every micro-batch) of `iters` global
 * batches of `split` starting at sample *cursor, which advances by the
 * global batch each. */
static double evaluate(gpt_model *m, const struct par *P, const ds_pipeline *p, int split, uint64_t *cursor,
                       uint64_t iters, uint64_t nmicro, int V, struct batch *b)
{
    struct step st = {.m = m, .P = P, .data = p, .split = split, .V = V, .nmicro = nmicro, .b = b};
    for (uint64_t it = 0; it < iters; it++) {
        st.base = *cursor;
        run_forward_only(&st);
        *cursor += nmicro * (uint64_t)m->B * (uint64_t)P->dp_size;
    }
    return dp_mean_loss(P, st.ls, st.nt);
}

/*
 * After the backward of every micro-batch: the tied embedding's gradients
 * of the first and last stage are summed (Megatron's
 * _allreduce_word_embedding_grads), the data-parallel gradients are summed
 * (all-reduce, or reduce-scatter into this rank's shard with the
 * distributed optimizer), and the global norm's square is summed over the
 * ranks that hold distinct gradients.  Returns the norm.
 */
static double reduce_grads(gpt_model *m, struct par *P)
{
    if (P->pp_size > 1 && !m->cfg.untie_embeddings && comm_size(P->emb) > 1)
        commCheck(comm_allreduce(P->emb, m->grads.wte, m->param_sizes[GPT_WTE], COMM_F32, COMM_SUM),
                  "embedding gradient all-reduce");
    double sq;
    if (!P->dist_opt) {
        commCheck(comm_allreduce(P->dp, m->grads_memory, m->num_params, COMM_F32, COMM_SUM),
                  "data-parallel gradient all-reduce");
        sq = gpt_grad_sq_range(m, m->grads_memory, 0, m->num_params);
        commCheck(comm_allreduce(P->mp, &sq, 1, COMM_F64, COMM_SUM), "gradient norm all-reduce");
    } else {
        memcpy(P->pad, m->grads_memory, m->num_params * sizeof(float));
        commCheck(comm_reduce_scatter(P->dp, P->gshard, P->pad, P->shard), "data-parallel gradient reduce-scatter");
        sq = gpt_grad_sq_range(m, P->gshard, P->lo, P->hi);
        commCheck(comm_allreduce(P->world, &sq, 1, COMM_F64, COMM_SUM), "gradient norm all-reduce");
    }
    return sqrt(sq);
}

static void apply_update(gpt_model *m, struct par *P, const struct config *c, double lr, double norm)
{
    float scale = global_norm_clip_scale((float)norm, (float)c->clip);
    if (!P->dist_opt) {
        gpt_update(m, (float)lr, (float)c->beta1, (float)c->beta2, (float)c->eps, (float)c->wd, scale);
        return;
    }
    gpt_update_range(m, P->lo, P->hi, P->gshard, P->mshard, P->vshard, (float)lr, (float)c->beta1,
                     (float)c->beta2, (float)c->eps, (float)c->wd, scale);
    /* all-gather the updated parameters */
    float *mine = P->pad + (size_t)P->dp_rank * P->shard;
    memcpy(mine, m->params_memory + P->lo, (P->hi - P->lo) * sizeof(float));
    commCheck(comm_allgather(P->dp, P->pad, mine, P->shard), "data-parallel parameter all-gather");
    memcpy(m->params_memory, P->pad, m->num_params * sizeof(float));
}

/* Distributed optimizer: shard the flat parameters over DP and keep only
 * this rank's AdamW state. */
static void setup_dist_opt(gpt_model *m, struct par *P)
{
    size_t dp = (size_t)P->dp_size;
    P->shard = (m->num_params + dp - 1) / dp;
    P->lo = P->shard * (size_t)P->dp_rank;
    P->hi = P->lo + P->shard < m->num_params ? P->lo + P->shard : m->num_params;
    if (P->lo > P->hi) P->lo = P->hi;
    P->pad = calloc(P->shard * dp, sizeof(float));
    P->gshard = calloc(P->shard, sizeof(float));
    P->mshard = calloc(P->shard, sizeof(float));
    P->vshard = calloc(P->shard, sizeof(float));
    if (!P->pad || !P->gshard || !P->mshard || !P->vshard)
        die(1, "out of memory for the distributed optimizer (%zu parameters per shard)", P->shard);
    free(m->opt_memory);   /* the full AdamW state is not kept */
    m->opt_memory = m->m = m->v = NULL;
}

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

/* ---- logging ---------------------------------------------------------------- */

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

static void print_config(const struct config *c, const gpt_model *m, const struct par *P, int V, uint64_t nmicro,
                         const char *vocab)
{
    if (verbosity < 2 || world_rank != 0) return;
    char data[256] = "";
    if (c->mock) snprintf(data, sizeof data, "mock (MockGPTDataset)");
    else for (size_t i = 0; i < c->n_data_path; i++) {
        size_t l = strlen(data);
        snprintf(data + l, sizeof data - l, "%s%s", i ? " " : "", c->data_path[i]);
    }
    for (int s = 0; s < 3; s++) {
        size_t l = strlen(data);
        if (c->n_split_data_path[s])
            snprintf(data + l, sizeof data - l, "%s%s:", l ? "; " : "", s == 0 ? "train" : s == 1 ? "valid" : "test");
        for (size_t i = 0; i < c->n_split_data_path[s]; i++) {
            l = strlen(data);
            snprintf(data + l, sizeof data - l, " %s", c->split_data_path[s][i]);
        }
    }
    static const char *styles[] = {"constant", "linear", "cosine"};
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
    ROW("train iters", "%" PRIu64, c->train_iters);
    ROW("lr / min lr / style", "%g / %g / %s", c->lr, c->min_lr, styles[c->decay_style]);
    ROW("adam beta1 / beta2 / eps", "%g / %g / %g", c->beta1, c->beta2, c->eps);
    ROW("weight decay / clip grad", "%g / %g", c->wd, c->clip);
    ROW("init std / seed", "%g / %" PRIu64, c->init_std, c->seed);
    ROW("data", "%s", data);
    ROW("split", "%s", c->mock ? "1,1,1 (mock)" : c->n_data_path ? c->split : "none (a data path per split)");
    ROW("tokenizer", "%s", vocab);
    ROW("eod mask loss", "%s", c->eod_mask ? "yes" : "no");
    ROW("log, eval interval / iters", "%" PRIu64 " / %" PRIu64 ", %" PRIu64, c->log_interval, c->eval_interval, c->eval_iters);
    ROW("parallel (TP, PP, DP)", "%d, %d, %d%s; %d OpenMP threads", P->tp_size, P->pp_size, P->dp_size,
        P->dist_opt ? ", distributed optimizer" : "", threads);
    ROW("communication", "%s", comm_backend());
#undef ROW
    fprintf(stderr, "%s\n", sep);
}

/* ---- checkpoints (train/checkpoint.h; Megatron's save_checkpoint) -------- */

static void save_checkpoint(const struct config *c, const gpt_model *m, const struct par *P, const struct schedule *s,
                            uint64_t iteration, uint64_t consumed, uint64_t valid_cursor)
{
    ckpt_state st;
    memset(&st, 0, sizeof st);
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
    char err[4600];
    double t0 = cli_now();
    /* One file per (TP, PP) rank, written by data-parallel rank 0.  With the
       distributed optimizer the AdamW shards are gathered first, so the file
       is the same as without it (and loads under either). */
    gpt_model view = *m;
    float *full = NULL;
    if (P->dist_opt) {
        size_t n = P->shard * (size_t)P->dp_size;
        full = mallocCheck(2 * n * sizeof(float));
        commCheck(comm_allgather(P->dp, full, P->mshard, P->shard), "optimizer state all-gather");
        commCheck(comm_allgather(P->dp, full + n, P->vshard, P->shard), "optimizer state all-gather");
        view.m = full;
        view.v = full + n;
    }
    int rc = 0;
    if (P->dp_rank == 0) rc = ckpt_save_rank(c->save, &view, &st, err, sizeof err);
    free(full);
    if (rc != 0) die(1, "rank %d: cannot save the checkpoint: %s\nhint: check the space and permissions of --save", world_rank, err);
    commCheck(comm_barrier(P->world), "checkpoint barrier");
    if (world_rank == 0 && ckpt_write_latest(c->save, iteration, err, sizeof err) != 0)
        die(1, "cannot save the checkpoint: %s\nhint: check the space and permissions of --save", err);
    note("  successfully saved checkpoint from iteration %7" PRIu64 " to %s [ t %d/%d, p %d/%d ] (%.2f s)", iteration,
         c->save, P->tp_rank + 1, P->tp_size, P->pp_rank + 1, P->pp_size, cli_now() - t0);
}

/* Megatron's _check_and_set: the schedule must be the checkpoint's. */
static void check_sched(const char *dir, const char *name, double ours, double theirs)
{
    if (ours != theirs)
        die(1, "checkpoint in '%s': lr scheduler %s is %.17g in the checkpoint but %.17g in this run\n"
               "hint: resume with the --lr, --min-lr, --lr-warmup-*, --lr-decay-* and --train-* values of the saved run",
            dir, name, theirs, ours);
}

/* Restores weights, AdamW state and the counters; no checkpoint in dir
 * means starting afresh, as Megatron does (with a warning).  Every rank
 * reads its (TP, PP) file; a rank that fails ends the job. */
static void load_checkpoint(const struct config *c, gpt_model *m, struct par *P, const struct schedule *s,
                            uint64_t *iteration, uint64_t *consumed, uint64_t *valid_cursor)
{
    char err[4600];
    uint64_t it;
    int rc = ckpt_read_latest(c->load, &it, err, sizeof err);
    if (rc == CKPT_ERR_NOT_FOUND) {
        if (verbosity >= 1 && world_rank == 0)
            fprintf(stderr, PROG ": warning: no '" CKPT_LATEST_NAME "' in '%s'; starting from iteration 0\n", c->load);
        return;
    }
    if (rc != 0) die(1, "rank %d: cannot load the checkpoint: %s", world_rank, err);
    note(" loading checkpoint from %s at iteration %" PRIu64, c->load, it);
    ckpt_state st;
    gpt_model view = *m;
    float *full = NULL;
    if (P->dist_opt) {
        full = mallocCheck(2 * m->num_params * sizeof(float));
        view.m = full;
        view.v = full + m->num_params;
    }
    rc = ckpt_load_rank(c->load, it, &view, &st, err, sizeof err);
    if (rc != 0)
        die(1, "rank %d: cannot load the checkpoint: %s\nhint: %s", world_rank, err,
            rc == CKPT_ERR_MISMATCH ? "resume with the model flags and parallel sizes of the saved run"
            : rc == CKPT_ERR_CHECKSUM || rc == CKPT_ERR_FORMAT ? "the file is damaged; load an earlier iteration"
            : "check --load");
    m->step = view.step;
    if (P->dist_opt) {
        memcpy(P->mshard, full + P->lo, (P->hi - P->lo) * sizeof(float));
        memcpy(P->vshard, full + m->num_params + P->lo, (P->hi - P->lo) * sizeof(float));
        free(full);
    }
    static const char *styles[] = {"constant", "linear", "cosine"};
    if (st.decay_style != (uint32_t)s->style)
        die(1, "checkpoint in '%s': lr scheduler decay style is %s in the checkpoint but %s in this run", c->load,
            st.decay_style < 3 ? styles[st.decay_style] : "unknown", styles[s->style]);
    check_sched(c->load, "max lr", s->max_lr, st.max_lr);
    check_sched(c->load, "min lr", s->min_lr, st.min_lr);
    check_sched(c->load, "warmup init lr", s->init_lr, st.init_lr);
    check_sched(c->load, "warmup steps", s->warmup_steps, st.warmup_steps);
    check_sched(c->load, "decay steps", s->decay_steps, st.decay_steps);
    if (st.num_steps != (double)st.consumed_train_samples)
        die(1, "checkpoint in '%s': lr scheduler num steps %.17g differs from consumed samples %" PRIu64, c->load,
            st.num_steps, st.consumed_train_samples);
    *iteration = st.iteration;
    *consumed = st.consumed_train_samples;
    *valid_cursor = st.consumed_valid_samples;
    commCheck(comm_barrier(P->world), "checkpoint barrier");
    note("  successfully loaded checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %" PRIu64, c->load,
         P->tp_rank + 1, P->tp_size, P->pp_rank + 1, P->pp_size, it);
}

/* -v -v: what each group's collectives moved per training iteration on
 * this rank (evaluation and checkpoints included when they ran). */
static void report_comm(const struct par *P, uint64_t iters, double seconds)
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

int main(int argc, char **argv)
{
    struct par P;
    memset(&P, 0, sizeof P);
    if (comm_init(&argc, &argv, &P.world) != 0) {
        fprintf(stderr, PROG ": cannot start the communication: %s\n", comm_error());
        comm_abort(1);
    }
    world_rank = comm_rank(P.world);
    P.rank = world_rank;
    P.size = comm_size(P.world);
    struct config c;
    parse_args(argc, argv, &c);
    struct schedule sched;
    make_schedule(&c, &sched);
    /* Megatron's initialize_model_parallel and validate_args */
    if (P.size % (c.tp * c.pp))
        usage_error("the world size %d is not divisible by tensor (%d) x pipeline (%d) model parallel sizes",
                    P.size, c.tp, c.pp);
    P.tp_size = c.tp;
    P.pp_size = c.pp;
    P.dp_size = P.size / (c.tp * c.pp);
    P.dist_opt = c.dist_opt;
    if (c.gbs % (c.mbs * (uint64_t)P.dp_size))
        usage_error("--global-batch-size %" PRIu64 " is not divisible by micro-batch size (%" PRIu64
                    ") times data parallel size (%d)", c.gbs, c.mbs, P.dp_size);
    par_groups(&P);
    int user_verbosity = verbosity;
    if (world_rank != 0 && verbosity > 1) verbosity = 1;   /* notes and the table from rank 0 */

    /* tokenizer: only its size and EOD matter to training */
    int V;
    int64_t eod;
    char vocab_desc[300];
    char *vocab_path = NULL, *merge_path = NULL;
    if (c.tokenizer == TOK_NULL) {
        V = (int)c.vocab_size_arg + 1;   /* Megatron's _NullTokenizer: ids 0..N-1 plus EOD = N */
        eod = (int64_t)c.vocab_size_arg;
        snprintf(vocab_desc, sizeof vocab_desc, "NullTokenizer (%d ids with EOD)", V);
    } else {
        vocab_path = c.vocab_file ? strdup(c.vocab_file) : cli_find_vocab("gpt2-vocab.json");
        merge_path = c.merge_file ? strdup(c.merge_file) : cli_find_vocab("gpt2-merges.txt");
        if (!vocab_path || !merge_path)
            die(1, "cannot find the bundled GPT-2 vocabulary\nhint: give --vocab-file and --merge-file "
                   "(or set MDS_VOCAB_DIR)");
        bpe *tok = NULL;
        char err[512];
        if (bpe_load(&tok, vocab_path, merge_path, err, sizeof err) != 0)
            die(1, "cannot load the tokenizer: %s\nhint: check --vocab-file and --merge-file", err);
        V = (int)bpe_vocab_size(tok);
        bpe_free(tok);
        eod = 50256;
        snprintf(vocab_desc, sizeof vocab_desc, "GPT2BPETokenizer (%d)", V);
    }

    gpt_config mc;
    gpt_config_init(&mc);
    mc.num_layers = c.num_layers;
    mc.hidden_size = c.hidden;
    mc.num_heads = c.heads;
    mc.ffn_hidden_size = c.ffn;
    mc.max_position_embeddings = c.maxpos;
    mc.vocab_size = V;
    mc.make_vocab_size_divisible_by = (int)c.vocab_div;
    mc.untie_embeddings = c.untie;
    mc.init_method_std = (float)c.init_std;
    mc.layernorm_eps = (float)c.norm_eps;
    mc.seed = c.seed;
    mc.tp_size = P.tp_size;
    mc.tp_rank = P.tp_rank;
    mc.pp_size = P.pp_size;
    mc.pp_rank = P.pp_rank;
    uint64_t nmicro = c.gbs / (c.mbs * (uint64_t)P.dp_size);
    /* 1F1B keeps up to PP - stage micro-batches in flight */
    uint64_t slots = (uint64_t)(P.pp_size - P.pp_rank);
    mc.act_slots = (int)(slots < nmicro ? slots : nmicro);
    gpt_model model;
    char err[512];
    int rc = gpt_model_init(&model, &mc, (int)c.mbs, c.seq, err, sizeof err);
    if (rc == GPT_ERR_ARG) usage_error("%s", err);
    if (rc) die(1, "rank %d: cannot build the model: %s\nhint: use a smaller model or --micro-batch-size", world_rank,
                gpt_strerror(rc));
    gpt_tp_ops tp_ops = {P.tp, tp_allreduce_sum, tp_allreduce_max};
    model.tp = &tp_ops;
    if (P.dist_opt) setup_dist_opt(&model, &P);
    note("> padded vocab (size: %d) with %d dummy tokens (new size: %d)", V, model.Vp - V, model.Vp);
    print_config(&c, &model, &P, V, nmicro, vocab_desc);
    /* Megatron prints this from data-parallel rank 0 of every (TP, PP) rank */
    if (user_verbosity >= 2 && P.dp_rank == 0)
        fprintf(stderr, " > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %zu\n",
                P.tp_rank, P.pp_rank, model.num_params);

    /* data: Megatron's builder sizes (training.py), then the pipeline */
    ds_gpt_config dc;
    ds_gpt_config_init(&dc);
    dc.data_path = c.data_path;
    dc.n_data_path = c.n_data_path;
    for (int s = 0; s < 3; s++) {
        dc.split_data_path[s] = c.split_data_path[s];
        dc.n_split_data_path[s] = c.n_split_data_path[s];
    }
    dc.split = c.split;
    dc.seq_length = (uint64_t)c.seq;
    dc.seed = (uint32_t)c.seed;
    dsCheck(ds_sample_counts(dc.num_samples, 0, c.train_iters, c.gbs, c.eval_iters,
                             c.eval_interval ? c.eval_interval : UINT64_MAX, 0),
            "bad sample counts", "check --train-iters, --global-batch-size, --eval-interval");
    dc.cache_dir = c.cache;
    dc.vocab_file = vocab_path;
    dc.merge_file = merge_path;
    dc.eod = eod;
    dc.eod_mask_loss = c.eod_mask;
    dc.mock = c.mock;
    dc.vocab_size = V;
    if (c.tokenizer == TOK_NULL) dc.vocab_file = dc.merge_file = NULL;
    double t0 = cli_now();
    ds_pipeline *data = NULL;
    /* With a cache directory rank 0 builds (and writes) the index arrays
       first and the others then map them, as Megatron does. */
    for (int turn = 0; turn < 2; turn++) {
        if ((turn == 0) == (world_rank == 0)) {
            rc = ds_pipeline_open(&dc, &data);
            if (rc < 0) {
                fprintf(stderr, PROG ": cannot build the training data: %s\nhint: check --data-path and --split\n",
                        data ? ds_pipeline_error(data) : ds_strerror(rc));
                ds_pipeline_close(data);
                comm_abort(1);
            }
        }
        if (c.cache) commCheck(comm_barrier(P.world), "data barrier");
    }
    note("> built the data pipeline in %.2f s: train %" PRIu64 ", validation %" PRIu64 ", test %" PRIu64 " samples",
         cli_now() - t0, ds_pipeline_length(data, DS_SPLIT_TRAIN), ds_pipeline_length(data, DS_SPLIT_VALID),
         ds_pipeline_length(data, DS_SPLIT_TEST));
    int do_valid = c.eval_iters > 0 && ds_pipeline_has_split(data, DS_SPLIT_VALID) &&
                   ds_pipeline_length(data, DS_SPLIT_VALID) > 0;
    int do_test = c.eval_iters > 0 && ds_pipeline_has_split(data, DS_SPLIT_TEST) &&
                  ds_pipeline_length(data, DS_SPLIT_TEST) > 0;

    size_t BT = (size_t)c.mbs * (size_t)c.seq;
    struct batch b;
    b.inputs = mallocCheck(BT * sizeof(int));
    b.targets = mallocCheck(BT * sizeof(int));
    b.mask = mallocCheck(BT * sizeof(float));
    b.tok = mallocCheck((size_t)c.seq * sizeof(int64_t));
    b.lab = mallocCheck((size_t)c.seq * sizeof(int64_t));
    b.lm = mallocCheck((size_t)c.seq * sizeof(float));

    double flops_per_iter = gpt_flops_per_token(&model) * (double)c.gbs * (double)c.seq;
    uint64_t consumed = 0, valid_cursor = 0;
    double interval_time = 0, interval_loss = 0;
    uint64_t interval_iters = 0;
    uint64_t iteration = 0;
    if (c.load) load_checkpoint(&c, &model, &P, &sched, &iteration, &consumed, &valid_cursor);
    uint64_t last_saved = c.load ? iteration : UINT64_MAX;
    int log_rank = world_rank == P.size - 1;   /* Megatron's print_rank_last */
    int last_stage = P.pp_rank == P.pp_size - 1;
    note("> training for %" PRIu64 " iterations ...", c.train_iters);
    comm_reset_stats(P.world); comm_reset_stats(P.tp); comm_reset_stats(P.dp); comm_reset_stats(P.pp);
    comm_reset_stats(P.mp); comm_reset_stats(P.emb);
    uint64_t iters_run = 0;
    double run_start = cli_now();
    while (iteration < c.train_iters) {
        double ts = cli_now();
        double lr = sched_lr(&sched, (double)consumed);
        gpt_zero_grad(&model);
        struct step st = {.m = &model, .P = &P, .data = data, .split = DS_SPLIT_TRAIN, .V = V, .base = consumed,
                          .nmicro = nmicro, .scale = 1.0f / (float)(nmicro * (uint64_t)P.dp_size), .b = &b};
        run_schedule(&st);
        double norm = reduce_grads(&model, &P);
        double loss = last_stage ? dp_mean_loss(&P, st.ls, st.nt) : 0.0;
        if (!isfinite(loss) || !isfinite(norm))
            die(1, "loss or gradient norm is not finite at iteration %" PRIu64 " (loss %g, norm %g)\n"
                   "hint: lower --lr or raise --lr-warmup-iters", iteration + 1, loss, norm);
        apply_update(&model, &P, &c, lr, norm);
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
                format_eta(per_iter * (double)(c.train_iters - iteration), eta, sizeof eta);
                printf(" [%s] iteration %8" PRIu64 "/%8" PRIu64 " | consumed samples: %12" PRIu64
                       " | elapsed time per iteration (ms): %.1f | throughput per GPU (TFLOP/s/GPU): %.1f"
                       " | learning rate: %.6E | global batch size: %5" PRIu64 " | lm loss: %.6E"
                       " | loss scale: %.1f | grad norm: %.3f | number of skipped iterations: %3d"
                       " | number of nan iterations: %3d | tokens per second: %.1f | ETA: %s |\n",
                       ts_s, iteration, c.train_iters, consumed, per_iter * 1000.0,
                       flops_per_iter / per_iter / 1e12 / (double)P.size, sched_lr(&sched, (double)consumed), c.gbs,
                       interval_loss / (double)interval_iters, 1.0, norm, 0, 0,
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
            double vl = evaluate(&model, &P, data, DS_SPLIT_VALID, &valid_cursor, c.eval_iters, nmicro, V, &b);
            if (log_rank) print_validation(prefix, vl);
        }
        if (c.save && c.save_interval && iteration % c.save_interval == 0) {
            save_checkpoint(&c, &model, &P, &sched, iteration, consumed, valid_cursor);
            last_saved = iteration;
        }
        if (c.exit_interval && iteration % c.exit_interval == 0) {
            if (c.save && last_saved != iteration) {
                save_checkpoint(&c, &model, &P, &sched, iteration, consumed, valid_cursor);
                last_saved = iteration;
            }
            note("exiting program at iteration %" PRIu64, iteration);
            break;
        }
    }
    double run_time = cli_now() - run_start;
    if (c.save && last_saved != iteration)
        save_checkpoint(&c, &model, &P, &sched, iteration, consumed, valid_cursor);
    char prefix[96];
    if (do_valid) {
        snprintf(prefix, sizeof prefix, "iteration %" PRIu64 " on validation set", iteration);
        double vl = evaluate(&model, &P, data, DS_SPLIT_VALID, &valid_cursor, c.eval_iters, nmicro, V, &b);
        if (log_rank) print_validation(prefix, vl);
    }
    if (do_test) {
        uint64_t test_cursor = 0;
        snprintf(prefix, sizeof prefix, "iteration %" PRIu64 " on test set", iteration);
        double tl = evaluate(&model, &P, data, DS_SPLIT_TEST, &test_cursor, c.eval_iters, nmicro, V, &b);
        if (log_rank) print_validation(prefix, tl);
    }
    if (user_verbosity >= 3 && iters_run)
        report_comm(&P, iters_run, run_time);
    free(b.inputs); free(b.targets); free(b.mask); free(b.tok); free(b.lab); free(b.lm);
    ds_pipeline_close(data);
    gpt_model_free(&model);
    par_free(&P);
    comm_free(P.world);
    comm_finalize();
    free(c.data_path);
    free(vocab_path);
    free(merge_path);
    return 0;
}
