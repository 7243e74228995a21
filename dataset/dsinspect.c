/*
 * dsinspect.c - mdsinspect: look inside, check, compare and merge Megatron
 * indexed datasets (PREFIX.bin + PREFIX.idx, the MMIDIDX format).
 *
 *   info PREFIX...      header counts and a sequence-length summary (reads
 *                       only the .idx)
 *   verify PREFIX...    ds_reader_open's checks plus ds_reader_verify's
 *   dump PREFIX ...     token ids or GPT-2 text of documents or sequences
 *   stats PREFIX        histogram, EOD count, most frequent tokens (OpenMP)
 *   merge ...           Megatron's tools/merge_datasets.py, same bytes
 *   diff A B            the first difference between two datasets
 *   samples ...         Megatron's GPT training-sample plan (GPTDataset /
 *                       BlendedDataset indices), one sample, the .npy cache
 *
 * This file is a thin CLI over dataset.h (every byte of the format is read
 * and written there) and bpe.h (token bytes for --text).  What it
 * deliberately does not do: parse or write the format itself, load whole
 * files into memory (everything goes through the reader's mappings), or
 * guess: a file the reader refuses is reported with the reader's message and
 * exit status 1.
 *
 * Exit status: 0 success, 1 runtime failure (for diff: also "different"),
 * 2 bad usage.  Primary output goes to stdout; errors, the merge summary and
 * the stats progress bar go to stderr.
 */
#include "cliutil.h"
#include "bpe.h"
#include "dataset.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#define OMP(x) _Pragma(#x)
#else
#define OMP(x)   /* no OpenMP: one thread, and no unknown-pragma warnings */
#endif

#define PROG "mdsinspect"
#define MDS_VERSION "0.1.0"
#define GPT2_EOD 50256

typedef unsigned long long ull;
typedef long long sll;

/* ---- errors and memory --------------------------------------------------- */

static void cleanup_temps(void);

static void die(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    cleanup_temps();
    exit(code);
}

static void error_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void error_line(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Allocation failures print where they happened, as llm.c's mallocCheck. */
static void *malloc_check(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, PROG ": out of memory (%zu bytes) at %s:%d\nhint: the dataset or --top may be too large\n",
                n, file, line);
        cleanup_temps();
        exit(1);
    }
    return p;
}
static void *realloc_check(void *p, size_t n, const char *file, int line)
{
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, PROG ": out of memory (%zu bytes) at %s:%d\nhint: the dataset may be too large\n",
                n, file, line);
        cleanup_temps();
        exit(1);
    }
    return p;
}
#define mallocCheck(n) malloc_check((n), __FILE__, __LINE__)
#define reallocCheck(p, n) realloc_check((p), (n), __FILE__, __LINE__)

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(mallocCheck(n), s, n);
}

/* Grows ptr (cap elements) to hold at least need elements. */
#define GROW(ptr, cap, need) do { \
        if ((need) > (cap)) { \
            size_t c_ = (cap) ? (cap) : 16; \
            while (c_ < (need)) c_ *= 2; \
            (ptr) = reallocCheck((ptr), c_ * sizeof *(ptr)); \
            (cap) = c_; \
        } \
    } while (0)


/* ---- temporary files of merge, removed on error and on signals ---------- */

#define MAX_TEMPS 8
static char temp_paths[MAX_TEMPS][PATH_MAX];
static volatile sig_atomic_t ntemps;

static void cleanup_temps(void)
{
    for (int i = 0; i < ntemps; i++)
        unlink(temp_paths[i]);
    ntemps = 0;
}

static void on_signal(int sig)
{
    for (int i = 0; i < ntemps; i++)
        unlink(temp_paths[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- options: one table per command drives parsing and --help ----------- */

enum opt_id {
    O_HELP = 1, O_JSON, O_DOC, O_SEQ, O_RANGE, O_IDS, O_TEXT, O_VOCAB_FILE, O_MERGE_FILE,
    O_TOP, O_EOD, O_THREADS, O_QUIET, O_INPUT, O_OUTPUT_PREFIX, O_CONTEXT,
    O_DATA_PATH, O_SPLIT, O_SEQ_LENGTH, O_SEED, O_TRAIN_SAMPLES, O_TRAIN_ITERS, O_GBS,
    O_EVAL_ITERS, O_EVAL_INTERVAL, O_SKIP_TRAIN, O_VALID_SAMPLES, O_TEST_SAMPLES, O_SHOW,
    O_SHOW_SPLIT, O_CACHE, O_MEGATRON_VERSION, O_TOKENIZER_IDS, O_MOCK_DATA, O_VOCAB_SIZE,
    O_EOD_MASK_LOSS, O_RESET_POSITION_IDS, O_RESET_ATTENTION_MASK, O_SHOW_MASKS,
    O_TRAIN_DATA_PATH, O_VALID_DATA_PATH, O_TEST_DATA_PATH   /* in split order */
};

enum { ARG_NONE, ARG_ONE, ARG_MANY };

struct opt {
    const char *lng;
    char shrt;
    int arg;
    int id;
    const char *meta;
    const char *help;
};

struct args {
    const char **pos;          /* positional arguments, then --input values (merge) */
    size_t npos, poscap;
    int json, quiet, ids, text;
    int have_doc, have_seq, have_range, range_lo_set, range_hi_set;
    uint64_t doc, seq, range_lo, range_hi;
    const char *vocab_file, *merge_file, *output;
    uint64_t top, eod, threads, context;
    /* samples */
    const char *split, *cache, *show_split;
    uint64_t seq_length, seed, train_samples, train_iters, gbs, eval_iters, eval_interval;
    uint64_t valid_samples, test_samples, show;
    int have_valid, have_test, have_show, skip_train, megatron_version, tokenizer_ids;
    int mock, eod_mask_loss, reset_position_ids, reset_attention_mask, show_masks;
    uint64_t vocab_size;
    const char **split_path[3];   /* --train/valid/test-data-path tokens */
    size_t nsplit_path[3], split_path_cap[3];
};

struct command;
typedef int (*command_fn)(const struct command *cmd, struct args *a);

struct command {
    const char *name;
    const char *synopsis;      /* after "mdsinspect NAME " */
    const char *summary;       /* one line, for the command list */
    const char *details;       /* paragraph printed by --help */
    const struct opt *opts;
    size_t nopts;
    size_t min_pos, max_pos;   /* positional arguments allowed */
    command_fn run;
};

#define OPT_HELP {"help", 'h', ARG_NONE, O_HELP, NULL, "show this help and exit"}
#define OPT_VOCAB \
    {"vocab-file", 0, ARG_ONE, O_VOCAB_FILE, "PATH", "GPT-2 vocab JSON (default: the bundled gpt2-vocab.json)"}, \
    {"merge-file", 0, ARG_ONE, O_MERGE_FILE, "PATH", "GPT-2 merges (default: the bundled gpt2-merges.txt)"}

static const struct opt info_opts[] = {
    {"json", 0, ARG_NONE, O_JSON, NULL, "one JSON object per dataset, one per line"},
    OPT_HELP,
};
static const struct opt verify_opts[] = {
    {"json", 0, ARG_NONE, O_JSON, NULL, "one JSON object per dataset: {\"prefix\", \"ok\", \"error\"}"},
    {"quiet", 'q', ARG_NONE, O_QUIET, NULL, "print nothing for sound datasets"},
    OPT_HELP,
};
static const struct opt dump_opts[] = {
    {"doc", 'd', ARG_ONE, O_DOC, "N", "document N (0-based)"},
    {"seq", 's', ARG_ONE, O_SEQ, "N", "sequence N (0-based)"},
    {"range", 'r', ARG_ONE, O_RANGE, "A:B", "documents A to B-1, as a Python slice (A or B may be omitted)"},
    {"ids", 0, ARG_NONE, O_IDS, NULL, "token ids, one line per sequence (the default)"},
    {"text", 't', ARG_NONE, O_TEXT, NULL, "GPT-2 text, a newline after each sequence, invalid UTF-8 as U+FFFD (Python's errors='replace')"},
    {"json", 0, ARG_NONE, O_JSON, NULL, "one JSON object per document: {\"document\", \"first_sequence\", \"ids\" or \"text\"}"},
    OPT_VOCAB,
    OPT_HELP,
};
static const struct opt stats_opts[] = {
    {"top", 'n', ARG_ONE, O_TOP, "N", "list the N most frequent tokens (default 10)"},
    {"eod", 0, ARG_ONE, O_EOD, "ID", "end-of-document token id to count (default 50256, GPT-2's <|endoftext|>)"},
    {"threads", 'j', ARG_ONE, O_THREADS, "N", "counting threads (default: all CPUs)"},
    {"json", 0, ARG_NONE, O_JSON, NULL, "one JSON object"},
    {"quiet", 'q', ARG_NONE, O_QUIET, NULL, "no progress bar"},
    OPT_VOCAB,
    OPT_HELP,
};
static const struct opt merge_opts[] = {
    {"input", 'i', ARG_MANY, O_INPUT, "PATH...", "dataset prefixes, or a directory: all its .bin/.idx pairs in sorted order"},
    {"output-prefix", 'o', ARG_ONE, O_OUTPUT_PREFIX, "PREFIX", "write PREFIX.bin and PREFIX.idx"},
    {"quiet", 'q', ARG_NONE, O_QUIET, NULL, "no summary line"},
    OPT_HELP,
};
static const struct opt diff_opts[] = {
    {"context", 'C', ARG_ONE, O_CONTEXT, "N", "tokens of context shown on each side of a difference (default 8)"},
    {"json", 0, ARG_NONE, O_JSON, NULL, "one JSON object describing the first difference"},
    {"quiet", 'q', ARG_NONE, O_QUIET, NULL, "print nothing, exit status only"},
    OPT_HELP,
};
static const struct opt samples_opts[] = {
    {"data-path", 0, ARG_MANY, O_DATA_PATH, "P... | W1 P1 W2 P2...", "dataset prefixes, optionally weighted (Megatron's --data-path)"},
    {"split", 0, ARG_ONE, O_SPLIT, "S", "train,valid,test weights (default \"969, 30, 1\")"},
    {"train-data-path", 0, ARG_MANY, O_TRAIN_DATA_PATH, "[W1] P1 [W2 P2...]", "the train split's own blend, each prefix whole (instead of --data-path/--split)"},
    {"valid-data-path", 0, ARG_MANY, O_VALID_DATA_PATH, "[W1] P1 [W2 P2...]", "the valid split's own blend"},
    {"test-data-path", 0, ARG_MANY, O_TEST_DATA_PATH, "[W1] P1 [W2 P2...]", "the test split's own blend"},
    {"seq-length", 0, ARG_ONE, O_SEQ_LENGTH, "L", "sequence length (required)"},
    {"seed", 0, ARG_ONE, O_SEED, "N", "random seed (default 1234)"},
    {"train-samples", 0, ARG_ONE, O_TRAIN_SAMPLES, "N", "training samples"},
    {"train-iters", 0, ARG_ONE, O_TRAIN_ITERS, "N", "training iterations (× --global-batch-size)"},
    {"global-batch-size", 0, ARG_ONE, O_GBS, "N", "global batch size (default 1)"},
    {"eval-iters", 0, ARG_ONE, O_EVAL_ITERS, "N", "evaluation iterations (default 100)"},
    {"eval-interval", 0, ARG_ONE, O_EVAL_INTERVAL, "N", "iterations between evaluations (default 1000)"},
    {"skip-train", 0, ARG_NONE, O_SKIP_TRAIN, NULL, "valid samples = eval-iters × batch (Megatron's --skip-train)"},
    {"valid-samples", 0, ARG_ONE, O_VALID_SAMPLES, "N", "override the computed validation sample count"},
    {"test-samples", 0, ARG_ONE, O_TEST_SAMPLES, "N", "override the computed test sample count"},
    {"mock-data", 0, ARG_NONE, O_MOCK_DATA, NULL, "Megatron's MockGPTDataset instead of --data-path (split forced to 1,1,1)"},
    {"vocab-size", 0, ARG_ONE, O_VOCAB_SIZE, "N", "mock tokens are (k+1) % N (default 50257, GPT-2's)"},
    {"show", 0, ARG_ONE, O_SHOW, "K", "print sample K (its seq-length+1 token window)"},
    {"show-masks", 0, ARG_NONE, O_SHOW_MASKS, NULL, "--show prints tokens, labels, loss mask, position ids and attention starts"},
    {"eod", 0, ARG_ONE, O_EOD, "ID", "end-of-document id for the masks and mock data (default 50256)"},
    {"eod-mask-loss", 0, ARG_NONE, O_EOD_MASK_LOSS, NULL, "loss mask 0 on input EODs (Megatron's --eod-mask-loss)"},
    {"reset-position-ids", 0, ARG_NONE, O_RESET_POSITION_IDS, NULL, "position ids restart after each EOD"},
    {"reset-attention-mask", 0, ARG_NONE, O_RESET_ATTENTION_MASK, NULL, "no attention across an EOD"},
    {"show-split", 0, ARG_ONE, O_SHOW_SPLIT, "train|valid|test", "split of --show (default train)"},
    {"ids", 0, ARG_NONE, O_IDS, NULL, "--show prints token ids (the default)"},
    {"text", 't', ARG_NONE, O_TEXT, NULL, "--show prints GPT-2 text"},
    {"cache", 0, ARG_ONE, O_CACHE, "DIR", "read/write the .npy index cache in DIR (Megatron's --data-cache-path)"},
    {"data-cache-path", 0, ARG_ONE, O_CACHE, "DIR", "same as --cache"},
    {"megatron-version", 0, ARG_ONE, O_MEGATRON_VERSION, "main|0.8", "index flavour: main (default) or core 0.8-0.10 (int64 sample index, old blend sizes)"},
    {"tokenizer-identifiers", 0, ARG_ONE, O_TOKENIZER_IDS, "legacy|main", "tokenizer block of the cache descriptions (default legacy _GPT2BPETokenizer)"},
    {"quiet", 'q', ARG_NONE, O_QUIET, NULL, "with --show, print only the sample"},
    OPT_VOCAB,
    OPT_HELP,
};
#define NOPTS(t) (sizeof t / sizeof t[0])

static int cmd_info(const struct command *cmd, struct args *a);
static int cmd_verify(const struct command *cmd, struct args *a);
static int cmd_dump(const struct command *cmd, struct args *a);
static int cmd_stats(const struct command *cmd, struct args *a);
static int cmd_merge(const struct command *cmd, struct args *a);
static int cmd_diff(const struct command *cmd, struct args *a);
static int cmd_samples(const struct command *cmd, struct args *a);

static const struct command commands[] = {
    {"info", "[options] PREFIX...", "counts, dtype and sequence lengths of datasets",
     "Print dtype, documents, empty documents, sequences, tokens, file sizes and the\n"
     "min/mean/max sequence length.  Only the .idx is read.",
     info_opts, NOPTS(info_opts), 1, SIZE_MAX, cmd_info},
    {"verify", "[options] PREFIX...", "deep consistency check",
     "Check the header, sizes, document indices, lengths and every sequence pointer.\n"
     "Exit 0 when every dataset is sound, 1 (with the first problem) otherwise.",
     verify_opts, NOPTS(verify_opts), 1, SIZE_MAX, cmd_verify},
    {"dump", "PREFIX (--doc N | --seq N | --range A:B) [--ids | --text] [options]",
     "token ids or text of documents or sequences",
     "Print token ids (default) or GPT-2 text.  With --range each document starts\n"
     "with a line '# document K'.",
     dump_opts, NOPTS(dump_opts), 1, 1, cmd_dump},
    {"stats", "[options] PREFIX", "length histogram, EOD count, most frequent tokens",
     "Scan every token (in parallel) and print the sequence-length histogram, the\n"
     "number of EOD tokens and of documents ending with one, and the most frequent\n"
     "tokens with their GPT-2 text.  A progress bar shows on a terminal when the\n"
     "scan takes longer than a moment.",
     stats_opts, NOPTS(stats_opts), 1, 1, cmd_stats},
    {"merge", "--input A B... --output-prefix C  |  --input DIR --output-prefix C",
     "concatenate datasets like Megatron's tools/merge_datasets.py",
     "Append the inputs in the order given (a directory contributes every .bin/.idx\n"
     "pair in it, in Python sorted() order; every file there must have its pair).\n"
     "All inputs must have the same dtype.  Document boundaries are kept and the\n"
     "output is byte-identical to Megatron's merge of the same inputs in the same\n"
     "order.  Inputs may also be plain arguments: merge A B -o C.",
     merge_opts, NOPTS(merge_opts), 0, SIZE_MAX, cmd_merge},
    {"diff", "[options] A B", "first differing document between two datasets",
     "Compare dtype, documents, sequence boundaries, tokens and pointers.  Exit 0\n"
     "when identical, 1 when different (stdout says where), or on failure.",
     diff_opts, NOPTS(diff_opts), 2, 2, cmd_diff},
    {"samples", "--data-path P... --seq-length L (--train-samples N | --train-iters N --global-batch-size B) [options]",
     "Megatron's GPT training-sample plan, one sample, the index cache",
     "Build Megatron-Core's GPTDataset/BlendedDataset indices for these flags and\n"
     "print the plan: datasets, weights, and per split the sequence range, tokens\n"
     "per epoch, samples asked, epochs and length of each dataset.  Sample counts\n"
     "are Megatron's: train = --train-samples or iters × batch; valid =\n"
     "(train_iters // eval_interval + 1) × eval_iters × batch; test = eval_iters ×\n"
     "batch.  --show K prints sample K (what the trainer gets at that position).\n"
     "--cache DIR writes (or reuses) the .npy files Megatron itself would use.\n"
     "The descriptions name the vocab and merge files as given by --vocab-file\n"
     "and --merge-file, as Megatron names them.",
     samples_opts, NOPTS(samples_opts), 0, SIZE_MAX, cmd_samples},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage_error(const struct command *cmd, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
static void usage_error(const struct command *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "hint: see '" PROG " %s --help'\n", cmd->name);
    else
        fprintf(stderr, "hint: see '" PROG " --help'\n");
    exit(2);
}

static void print_main_help(void)
{
    printf("usage: " PROG " COMMAND [options] ARGS...\n\n"
           "Inspect, check, compare and merge Megatron indexed datasets (PREFIX.bin +\n"
           "PREFIX.idx).  A PREFIX may also be given as PREFIX.idx or PREFIX.bin.\n\n"
           "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        printf("  %-8s %s\n", commands[i].name, commands[i].summary);
    printf("\n'" PROG " COMMAND --help' lists a command's options.  " PROG " --version prints the version.\n"
           "Exit status: 0 success, 1 runtime failure (diff: also \"different\"), 2 bad usage.\n");
}

static void print_help(const struct command *cmd)
{
    printf("usage: " PROG " %s %s\n\n%s\n\noptions:\n", cmd->name, cmd->synopsis, cmd->details);
    for (size_t i = 0; i < cmd->nopts; i++) {
        const struct opt *o = &cmd->opts[i];
        char left[80];
        int w = o->shrt ? snprintf(left, sizeof left, "-%c, ", o->shrt) : snprintf(left, sizeof left, "    ");
        snprintf(left + w, sizeof left - (size_t)w, "--%s%s%s", o->lng, o->meta ? " " : "", o->meta ? o->meta : "");
        printf("  %-28s %s\n", left, o->help);
    }
}


static uint64_t opt_number(const struct command *cmd, const struct opt *o, const char *v, uint64_t lo, uint64_t hi)
{
    uint64_t x;
    if (cli_parse_u64(v, &x) != 0 || x < lo || x > hi)
        usage_error(cmd, "option '--%s' needs an integer in [%llu, %llu], got '%s'", o->lng, (ull)lo, (ull)hi, v);
    return x;
}

/* "A:B", "A:", ":B" or ":" (a Python slice without step or negatives). */
static void parse_range(const struct command *cmd, const char *v, struct args *a)
{
    const char *colon = strchr(v, ':');
    if (!colon)
        usage_error(cmd, "option '--range' needs A:B, got '%s'", v);
    char lo[32], hi[32];
    size_t nlo = (size_t)(colon - v), nhi = strlen(colon + 1);
    if (nlo >= sizeof lo || nhi >= sizeof hi)
        usage_error(cmd, "option '--range' needs A:B with integers, got '%s'", v);
    memcpy(lo, v, nlo);
    lo[nlo] = 0;
    memcpy(hi, colon + 1, nhi + 1);
    if ((nlo && cli_parse_u64(lo, &a->range_lo) != 0) || (nhi && cli_parse_u64(hi, &a->range_hi) != 0))
        usage_error(cmd, "option '--range' needs A:B with non-negative integers, got '%s'", v);
    a->range_lo_set = nlo > 0;
    a->range_hi_set = nhi > 0;
}

static int looks_like_option(const char *s)
{
    return s[0] == '-' && s[1] != 0;
}

static const struct opt *find_long(const struct command *cmd, const char *name, size_t len)
{
    const struct opt *hit = NULL;
    int nhits = 0;
    for (size_t i = 0; i < cmd->nopts; i++) {
        if (strncmp(cmd->opts[i].lng, name, len) != 0)
            continue;
        if (cmd->opts[i].lng[len] == 0)
            return &cmd->opts[i];
        hit = &cmd->opts[i];
        nhits++;
    }
    if (nhits > 1)
        usage_error(cmd, "ambiguous option '--%.*s'", (int)len, name);
    return nhits == 1 ? hit : NULL;
}

static void add_pos(struct args *a, const char *s)
{
    GROW(a->pos, a->poscap, a->npos + 1);
    a->pos[a->npos++] = s;
}

/* Long options may be abbreviated to a unique prefix and written --opt=value,
   as with argparse (merge keeps Megatron's flags); "--" ends the options. */
static void parse_args(const struct command *cmd, int argc, char **argv, struct args *a)
{
    int only_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (only_pos || !looks_like_option(s)) {
            add_pos(a, s);
            continue;
        }
        if (strcmp(s, "--") == 0) {
            only_pos = 1;
            continue;
        }
        const struct opt *o = NULL;
        const char *val = NULL;
        if (s[1] == '-') {
            const char *eq = strchr(s + 2, '=');
            size_t len = eq ? (size_t)(eq - s - 2) : strlen(s + 2);
            o = find_long(cmd, s + 2, len);
            if (o && eq)
                val = eq + 1;
        } else {
            for (size_t k = 0; k < cmd->nopts; k++)
                if (cmd->opts[k].shrt == s[1])
                    o = &cmd->opts[k];
            if (o && s[2]) {
                if (o->arg == ARG_NONE)
                    o = NULL;          /* no bundling of flags */
                else
                    val = s + 2;       /* -j4 */
            }
        }
        if (!o)
            usage_error(cmd, "unknown option '%s' for '%s'", s, cmd->name);
        if (o->arg == ARG_NONE && val)
            usage_error(cmd, "option '--%s' takes no value", o->lng);
        if (o->arg == ARG_ONE && !val) {
            if (i + 1 >= argc || looks_like_option(argv[i + 1]))
                usage_error(cmd, "option '--%s' needs a value", o->lng);
            val = argv[++i];
        }
        switch (o->id) {
        case O_HELP: print_help(cmd); exit(0);
        case O_JSON: a->json = 1; break;
        case O_QUIET: a->quiet = 1; break;
        case O_IDS: a->ids = 1; break;
        case O_TEXT: a->text = 1; break;
        case O_DOC: a->doc = opt_number(cmd, o, val, 0, UINT64_MAX); a->have_doc = 1; break;
        case O_SEQ: a->seq = opt_number(cmd, o, val, 0, UINT64_MAX); a->have_seq = 1; break;
        case O_RANGE: parse_range(cmd, val, a); a->have_range = 1; break;
        case O_VOCAB_FILE: a->vocab_file = val; break;
        case O_MERGE_FILE: a->merge_file = val; break;
        case O_TOP: a->top = opt_number(cmd, o, val, 0, 1u << 20); break;
        case O_EOD: a->eod = opt_number(cmd, o, val, 0, INT64_MAX); break;
        case O_THREADS: a->threads = opt_number(cmd, o, val, 1, 1024); break;
        case O_CONTEXT: a->context = opt_number(cmd, o, val, 0, 1u << 16); break;
        case O_OUTPUT_PREFIX: a->output = val; break;
        case O_SPLIT: a->split = val; break;
        case O_SEQ_LENGTH: a->seq_length = opt_number(cmd, o, val, 2, INT32_MAX / 2); break;
        case O_SEED: a->seed = opt_number(cmd, o, val, 0, UINT32_MAX); break;
        case O_TRAIN_SAMPLES: a->train_samples = opt_number(cmd, o, val, 1, INT64_MAX); break;
        case O_TRAIN_ITERS: a->train_iters = opt_number(cmd, o, val, 0, INT64_MAX); break;
        case O_GBS: a->gbs = opt_number(cmd, o, val, 1, INT64_MAX); break;
        case O_EVAL_ITERS: a->eval_iters = opt_number(cmd, o, val, 0, INT64_MAX); break;
        case O_EVAL_INTERVAL: a->eval_interval = opt_number(cmd, o, val, 1, INT64_MAX); break;
        case O_SKIP_TRAIN: a->skip_train = 1; break;
        case O_VALID_SAMPLES: a->valid_samples = opt_number(cmd, o, val, 0, INT64_MAX); a->have_valid = 1; break;
        case O_TEST_SAMPLES: a->test_samples = opt_number(cmd, o, val, 0, INT64_MAX); a->have_test = 1; break;
        case O_SHOW: a->show = opt_number(cmd, o, val, 0, UINT64_MAX); a->have_show = 1; break;
        case O_SHOW_SPLIT: a->show_split = val; break;
        case O_MOCK_DATA: a->mock = 1; break;
        case O_VOCAB_SIZE: a->vocab_size = opt_number(cmd, o, val, 1, INT64_MAX); break;
        case O_SHOW_MASKS: a->show_masks = 1; break;
        case O_EOD_MASK_LOSS: a->eod_mask_loss = 1; break;
        case O_RESET_POSITION_IDS: a->reset_position_ids = 1; break;
        case O_RESET_ATTENTION_MASK: a->reset_attention_mask = 1; break;
        case O_CACHE: a->cache = val; break;
        case O_MEGATRON_VERSION:
            if (strcmp(val, "main") == 0) a->megatron_version = DS_MEGATRON_MAIN;
            else if (strcmp(val, "0.8") == 0) a->megatron_version = DS_MEGATRON_0_8;
            else usage_error(cmd, "option '--megatron-version' needs 'main' or '0.8', got '%s'", val);
            break;
        case O_TOKENIZER_IDS:
            if (strcmp(val, "legacy") == 0) a->tokenizer_ids = DS_TOKENIZER_IDS_LEGACY;
            else if (strcmp(val, "main") == 0) a->tokenizer_ids = DS_TOKENIZER_IDS_MAIN;
            else usage_error(cmd, "option '--tokenizer-identifiers' needs 'legacy' or 'main', got '%s'", val);
            break;
        case O_TRAIN_DATA_PATH:
        case O_VALID_DATA_PATH:
        case O_TEST_DATA_PATH: {
            int sp = o->id - O_TRAIN_DATA_PATH;
            a->nsplit_path[sp] = 0;    /* argparse: the last occurrence wins */
            while (val || (i + 1 < argc && !looks_like_option(argv[i + 1]))) {
                GROW(a->split_path[sp], a->split_path_cap[sp], a->nsplit_path[sp] + 1);
                a->split_path[sp][a->nsplit_path[sp]++] = val ? val : argv[++i];
                val = NULL;
            }
            if (a->nsplit_path[sp] == 0)
                usage_error(cmd, "option '--%s' needs at least one path", o->lng);
            break;
        }
        case O_DATA_PATH:
        case O_INPUT: {
            size_t before = a->npos;
            if (val)
                add_pos(a, val);
            while (i + 1 < argc && !looks_like_option(argv[i + 1]))
                add_pos(a, argv[++i]);
            if (a->npos == before)
                usage_error(cmd, "option '--%s' needs at least one path", o->lng);
            break;
        }
        }
    }
    if (a->npos < cmd->min_pos || a->npos > cmd->max_pos) {
        if (cmd->min_pos == cmd->max_pos)
            usage_error(cmd, "'%s' takes %zu dataset%s, got %zu", cmd->name, cmd->min_pos,
                        cmd->min_pos == 1 ? "" : "s", a->npos);
        usage_error(cmd, "'%s' needs at least %zu dataset%s", cmd->name, cmd->min_pos, cmd->min_pos == 1 ? "" : "s");
    }
}

/* ---- shared helpers ------------------------------------------------------ */

/* "x.idx" or "x.bin" names the dataset x, unless "x.idx.idx" exists. */
static char *resolve_prefix(const char *arg)
{
    size_t n = strlen(arg);
    char *p = mallocCheck(n + 5);
    memcpy(p, arg, n + 1);
    if (n > 4 && (strcmp(arg + n - 4, ".idx") == 0 || strcmp(arg + n - 4, ".bin") == 0)) {
        memcpy(p + n, ".idx", 5);
        if (access(p, F_OK) != 0)
            n -= 4;
        p[n] = 0;
    }
    return p;
}

/* Opens a dataset; on failure prints the reader's message (it names the
   file) and returns NULL. */
static ds_reader *open_dataset(const char *prefix)
{
    ds_reader *r = NULL;
    int rc = ds_reader_open(prefix, &r);
    if (rc == 0)
        return r;
    error_line("%s", r ? ds_reader_error(r) : ds_strerror(rc));
    ds_reader_close(r);
    return NULL;
}

static ds_reader *open_or_die(const char *prefix)
{
    ds_reader *r = open_dataset(prefix);
    if (!r)
        exit(1);
    return r;
}

/* One token widened to int64, for every dtype the reader accepts (float64 is
   truncated toward zero, as ds_reader_token does; NaN gives INT64_MIN). */
static inline int64_t load_token(const uint8_t *p, int dtype)
{
    switch (dtype) {
    case DS_DTYPE_UINT8:  return p[0];
    case DS_DTYPE_INT8:   return (int64_t)p[0] - (p[0] & 0x80 ? 0x100 : 0);
    case DS_DTYPE_UINT16: return (int64_t)(p[0] | p[1] << 8);
    case DS_DTYPE_INT16: {
        int64_t v = p[0] | p[1] << 8;
        return v - (v & 0x8000 ? 0x10000 : 0);
    }
    case DS_DTYPE_INT32: {
        int64_t v = (int64_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        return v - (v & 0x80000000 ? ((int64_t)1 << 32) : 0);
    }
    default: {
        uint64_t u = 0;
        for (int i = 7; i >= 0; i--)
            u = u << 8 | p[i];
        if (dtype == DS_DTYPE_FLOAT64) {
            double d;
            memcpy(&d, &u, sizeof d);
            if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
                return INT64_MIN;
            return (int64_t)d;
        }
        int64_t v;
        memcpy(&v, &u, sizeof v);
        return v;
    }
    }
}

/* Sequence i, or exit 1 when its pointer lies outside the .bin (open does not
   check pointers; verify does). */
static const uint8_t *sequence_or_die(const ds_reader *r, const char *prefix, uint64_t i, uint64_t *len)
{
    const void *data;
    if (ds_reader_sequence(r, i, &data, len) != 0)
        die(1, "'%s.idx': sequence_pointers[%llu] lies outside the .bin (see '" PROG " verify')",
            prefix, (ull)i);
    return data;
}

/* JSON string: the bytes are first made valid UTF-8 (errors='replace'). */
static void json_string(FILE *f, const char *s, size_t n)
{
    char stackbuf[256];
    size_t cap = ds_utf8_replace_bound(n);
    char *buf = cap <= sizeof stackbuf ? stackbuf : mallocCheck(cap);
    size_t m = ds_utf8_replace(buf, cap, (const unsigned char *)s, n);
    fputc('"', f);
    size_t run = 0;   /* start of the pending run of plain bytes */
    for (size_t i = 0; i < m; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        fwrite(buf + run, 1, i - run, f);
        run = i + 1;
        switch (c) {
        case '"':  fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default:   fprintf(f, "\\u%04x", c); break;
        }
    }
    fwrite(buf + run, 1, m - run, f);
    fputc('"', f);
    if (buf != stackbuf)
        free(buf);
}

static void json_cstr(FILE *f, const char *s) { json_string(f, s, strlen(s)); }


/* Loads the GPT-2 tables.  required: a missing default vocabulary is an
   error; otherwise it only means "no token text" (NULL). */
static bpe *load_vocab(const struct args *a, int required)
{
    char *vocab = a->vocab_file ? xstrdup(a->vocab_file) : cli_find_vocab("gpt2-vocab.json");
    char *merges = a->merge_file ? xstrdup(a->merge_file) : cli_find_vocab("gpt2-merges.txt");
    bpe *b = NULL;
    if (!vocab || !merges) {
        if (required || a->vocab_file || a->merge_file)
            die(1, "cannot find the bundled '%s'; give --vocab-file and --merge-file (hint: set MDS_VOCAB_DIR)",
                vocab ? "gpt2-merges.txt" : "gpt2-vocab.json");
    } else {
        char err[512];
        if (bpe_load(&b, vocab, merges, err, sizeof err) != 0)
            die(1, "%s", err);
    }
    free(vocab);
    free(merges);
    return b;
}

static void check_stdout(void)
{
    if (fflush(stdout) != 0 || ferror(stdout))
        die(1, "cannot write to stdout: %s", strerror(errno));
}

/* ---- info ---------------------------------------------------------------- */

struct summary {
    uint64_t empty_docs, empty_seqs, min_len, max_len;
    double mean_len;
};

/* O(N + D) over the .idx only. */
static void summarize(const ds_reader *r, struct summary *s)
{
    uint64_t n = ds_reader_num_sequences(r), d = ds_reader_num_documents(r);
    memset(s, 0, sizeof *s);
    s->min_len = n ? UINT64_MAX : 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = ds_reader_seq_length(r, i);
        if (l < s->min_len) s->min_len = l;
        if (l > s->max_len) s->max_len = l;
        s->empty_seqs += l == 0;
    }
    for (uint64_t k = 0; k < d; k++)
        s->empty_docs += ds_reader_doc_index(r, k) == ds_reader_doc_index(r, k + 1);
    s->mean_len = n ? (double)ds_reader_num_tokens(r) / (double)n : 0.0;
}

static int cmd_info(const struct command *cmd, struct args *a)
{
    (void)cmd;
    int failed = 0;
    for (size_t i = 0; i < a->npos; i++) {
        char *prefix = resolve_prefix(a->pos[i]);
        ds_reader *r = open_dataset(prefix);
        if (!r) {
            failed = 1;
            free(prefix);
            continue;
        }
        struct summary s;
        summarize(r, &s);
        int dt = ds_reader_dtype(r);
        uint64_t n = ds_reader_num_sequences(r), d = ds_reader_num_documents(r), t = ds_reader_num_tokens(r);
        uint64_t bin = t * ds_dtype_size(dt), idx = 34 + 12 * n + 8 * (d + 1);
        if (a->json) {
            printf("{\"prefix\":");
            json_cstr(stdout, prefix);
            printf(",\"dtype\":\"%s\",\"dtype_code\":%d,\"itemsize\":%zu,\"documents\":%llu,"
                   "\"empty_documents\":%llu,\"sequences\":%llu,\"empty_sequences\":%llu,\"tokens\":%llu,"
                   "\"bin_bytes\":%llu,\"idx_bytes\":%llu,",
                   ds_dtype_name(dt), dt, ds_dtype_size(dt), (ull)d, (ull)s.empty_docs, (ull)n,
                   (ull)s.empty_seqs, (ull)t, (ull)bin, (ull)idx);
            if (n)
                printf("\"min_sequence_length\":%llu,\"mean_sequence_length\":%.4f,\"max_sequence_length\":%llu}\n",
                       (ull)s.min_len, s.mean_len, (ull)s.max_len);
            else
                printf("\"min_sequence_length\":null,\"mean_sequence_length\":null,\"max_sequence_length\":null}\n");
        } else {
            printf("%s\n", prefix);
            printf("  dtype            %s (code %d, %zu bytes per token)\n", ds_dtype_name(dt), dt, ds_dtype_size(dt));
            printf("  documents        %llu\n", (ull)d);
            printf("  empty documents  %llu\n", (ull)s.empty_docs);
            printf("  sequences        %llu\n", (ull)n);
            printf("  empty sequences  %llu\n", (ull)s.empty_seqs);
            printf("  tokens           %llu\n", (ull)t);
            printf("  bin bytes        %llu\n", (ull)bin);
            printf("  idx bytes        %llu\n", (ull)idx);
            if (n)
                printf("  sequence length  min %llu  mean %.2f  max %llu\n", (ull)s.min_len, s.mean_len, (ull)s.max_len);
            else
                printf("  sequence length  (no sequences)\n");
        }
        ds_reader_close(r);
        free(prefix);
    }
    check_stdout();
    return failed;
}

/* ---- verify -------------------------------------------------------------- */

static int cmd_verify(const struct command *cmd, struct args *a)
{
    (void)cmd;
    int failed = 0;
    for (size_t i = 0; i < a->npos; i++) {
        char *prefix = resolve_prefix(a->pos[i]);
        ds_reader *r = NULL;
        int rc = ds_reader_open(prefix, &r);
        if (rc == 0)
            rc = ds_reader_verify(r);
        const char *msg = rc == 0 ? "" : r ? ds_reader_error(r) : ds_strerror(rc);
        if (rc != 0) {
            failed = 1;
            error_line("%s", msg);
        }
        if (a->json) {
            printf("{\"prefix\":");
            json_cstr(stdout, prefix);
            if (rc == 0) {
                printf(",\"ok\":true}\n");
            } else {
                printf(",\"ok\":false,\"error\":");
                json_cstr(stdout, msg);
                printf("}\n");
            }
        } else if (rc == 0 && !a->quiet) {
            printf("%s: ok (%llu documents, %llu sequences, %llu tokens)\n", prefix,
                   (ull)ds_reader_num_documents(r), (ull)ds_reader_num_sequences(r),
                   (ull)ds_reader_num_tokens(r));
        }
        ds_reader_close(r);
        free(prefix);
    }
    check_stdout();
    return failed;
}

/* ---- dump ---------------------------------------------------------------- */

/* The document holding sequence i: the k with doc[k] <= i < doc[k+1]
   (binary search; empty documents, which repeat an index, never match). */
static uint64_t document_of(const ds_reader *r, uint64_t i)
{
    uint64_t lo = 0, hi = ds_reader_num_documents(r);   /* doc[lo] <= i < doc[hi] */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (ds_reader_doc_index(r, mid) <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

struct dumper {
    const struct args *a;
    const char *prefix;
    const ds_reader *r;
    bpe *tok;
    unsigned char *raw; size_t rawcap;
    char *text; size_t textcap;
};

/* Decodes one sequence into d->text; returns its length. */
static size_t decode_sequence(struct dumper *d, uint64_t s, const uint8_t *p, uint64_t len)
{
    int dt = ds_reader_dtype(d->r);
    size_t isz = ds_dtype_size(dt), n = 0;
    for (uint64_t k = 0; k < len; k++) {
        int64_t id = load_token(p + k * isz, dt);
        size_t tl = 0;
        const unsigned char *tb = id >= 0 && id <= UINT32_MAX ? bpe_token_bytes(d->tok, (uint32_t)id, &tl) : NULL;
        if (!tb)
            die(1, "'%s': sequence %llu: token %lld at position %llu is not in the vocabulary (%zu tokens)",
                d->prefix, (ull)s, (sll)id, (ull)k, bpe_vocab_size(d->tok));
        GROW(d->raw, d->rawcap, n + tl);
        memcpy(d->raw + n, tb, tl);
        n += tl;
    }
    size_t need = ds_utf8_replace_bound(n);
    GROW(d->text, d->textcap, need);
    return ds_utf8_replace(d->text, d->textcap, d->raw, n);
}

/* Sequences [s0, s1) of document doc. */
static void dump_sequences(struct dumper *d, uint64_t doc, uint64_t s0, uint64_t s1, int header)
{
    const struct args *a = d->a;
    int dt = ds_reader_dtype(d->r);
    size_t isz = ds_dtype_size(dt);
    if (a->json)
        printf("{\"document\":%llu,\"first_sequence\":%llu,\"%s\":[", (ull)doc, (ull)s0, a->text ? "text" : "ids");
    else if (header)
        printf("# document %llu\n", (ull)doc);
    for (uint64_t s = s0; s < s1; s++) {
        uint64_t len;
        const uint8_t *p = sequence_or_die(d->r, d->prefix, s, &len);
        if (a->json && s > s0)
            putchar(',');
        if (a->text) {
            size_t m = decode_sequence(d, s, p, len);
            if (a->json) {
                json_string(stdout, d->text, m);
            } else {
                fwrite(d->text, 1, m, stdout);
                putchar('\n');
            }
        } else {
            if (a->json)
                putchar('[');
            for (uint64_t k = 0; k < len; k++)
                printf(k ? (a->json ? ",%lld" : " %lld") : "%lld", (sll)load_token(p + k * isz, dt));
            putchar(a->json ? ']' : '\n');
        }
    }
    if (a->json)
        printf("]}\n");
}

static int cmd_dump(const struct command *cmd, struct args *a)
{
    if (a->have_doc + a->have_seq + a->have_range != 1)
        usage_error(cmd, "'dump' needs exactly one of --doc, --seq and --range");
    if (a->ids && a->text)
        usage_error(cmd, "options '--ids' and '--text' exclude each other");
    char *prefix = resolve_prefix(a->pos[0]);
    ds_reader *r = open_or_die(prefix);
    struct dumper d = { .a = a, .prefix = prefix, .r = r };
    if (a->text)
        d.tok = load_vocab(a, 1);
    uint64_t ndoc = ds_reader_num_documents(r), nseq = ds_reader_num_sequences(r);
    if (a->have_doc) {
        if (a->doc >= ndoc)
            die(1, "'%s': no document %llu (it has %llu)", prefix, (ull)a->doc, (ull)ndoc);
        dump_sequences(&d, a->doc, ds_reader_doc_index(r, a->doc), ds_reader_doc_index(r, a->doc + 1), 0);
    } else if (a->have_seq) {
        if (a->seq >= nseq)
            die(1, "'%s': no sequence %llu (it has %llu)", prefix, (ull)a->seq, (ull)nseq);
        dump_sequences(&d, document_of(r, a->seq), a->seq, a->seq + 1, 0);
    } else {
        uint64_t lo = a->range_lo_set ? a->range_lo : 0, hi = a->range_hi_set ? a->range_hi : ndoc;
        if (hi > ndoc) hi = ndoc;   /* Python slices clamp */
        for (uint64_t k = lo; k < hi; k++)
            dump_sequences(&d, k, ds_reader_doc_index(r, k), ds_reader_doc_index(r, k + 1), 1);
    }
    check_stdout();
    free(d.raw);
    free(d.text);
    bpe_free(d.tok);
    ds_reader_close(r);
    free(prefix);
    return 0;
}

/* ---- stats --------------------------------------------------------------- */

/*
 * Token counts: a dense array for the common range of ids plus an
 * open-addressing table for the rest (negative ids, ids >= 2^18 in 32/64-bit
 * datasets).  For 1- and 2-byte dtypes the dense index is the raw bits, so
 * every value is dense.  Each thread counts into its own counter; the
 * counters are summed at the end, so the hot loop takes no lock.
 */
#define DENSE_WIDE ((size_t)1 << 18)

struct counter {
    uint64_t *dense; size_t ndense;
    uint64_t *keys, *vals; size_t cap, used;   /* vals[i] == 0: empty slot */
};

static void counter_init(struct counter *c, size_t ndense)
{
    memset(c, 0, sizeof *c);
    c->ndense = ndense;
    c->dense = mallocCheck(ndense * sizeof *c->dense);
    memset(c->dense, 0, ndense * sizeof *c->dense);
}

static void counter_release(struct counter *c)
{
    free(c->dense);
    free(c->keys);
    free(c->vals);
}

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static void hash_add(struct counter *c, uint64_t key, uint64_t n)
{
    if (2 * (c->used + 1) > c->cap) {
        size_t ncap = c->cap ? 2 * c->cap : 1024;
        uint64_t *nk = mallocCheck(ncap * sizeof *nk), *nv = mallocCheck(ncap * sizeof *nv);
        memset(nv, 0, ncap * sizeof *nv);
        for (size_t i = 0; i < c->cap; i++) {
            if (!c->vals[i])
                continue;
            size_t j = mix64(c->keys[i]) & (ncap - 1);
            while (nv[j])
                j = (j + 1) & (ncap - 1);
            nk[j] = c->keys[i];
            nv[j] = c->vals[i];
        }
        free(c->keys);
        free(c->vals);
        c->keys = nk;
        c->vals = nv;
        c->cap = ncap;
    }
    size_t j = mix64(key) & (c->cap - 1);
    while (c->vals[j] && c->keys[j] != key)
        j = (j + 1) & (c->cap - 1);
    if (!c->vals[j]) {
        c->keys[j] = key;
        c->used++;
    }
    c->vals[j] += n;
}

/* Counts n tokens at p.  Specialised per dtype: this is the hot loop. */
static void count_tokens(struct counter *c, const uint8_t *p, uint64_t n, int dtype)
{
    uint64_t *dn = c->dense;
    switch (dtype) {
    case DS_DTYPE_UINT8:
    case DS_DTYPE_INT8:
        for (uint64_t k = 0; k < n; k++)
            dn[p[k]]++;
        break;
    case DS_DTYPE_UINT16:
    case DS_DTYPE_INT16:
        for (uint64_t k = 0; k < n; k++)
            dn[p[2 * k] | p[2 * k + 1] << 8]++;
        break;
    default: {
        size_t isz = ds_dtype_size(dtype);
        for (uint64_t k = 0; k < n; k++) {
            int64_t v = load_token(p + k * isz, dtype);
            if (v >= 0 && (uint64_t)v < c->ndense)
                dn[v]++;
            else
                hash_add(c, (uint64_t)v, 1);
        }
    }
    }
}

/* The token value of a dense index. */
static int64_t dense_value(size_t i, int dtype)
{
    if (dtype == DS_DTYPE_INT8) return (int64_t)i - (i & 0x80 ? 0x100 : 0);
    if (dtype == DS_DTYPE_INT16) return (int64_t)i - (i & 0x8000 ? 0x10000 : 0);
    return (int64_t)i;
}

struct tokcount { int64_t id; uint64_t count; };

static int by_count(const void *x, const void *y)
{
    const struct tokcount *a = x, *b = y;
    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* A unit of work: the tokens from (seq, off) up to the next unit's start. */
struct unit { uint64_t seq, off; };
#define UNIT_TOKENS ((uint64_t)1 << 20)

/* Progress on stderr: only on a terminal, only after the scan has run a
   quarter of a second, at most 6 times a second (STYLE 41). */
struct progress {
    int enabled, shown;
    double start, last;
    uint64_t total;
};

static void progress_draw(struct progress *pg, uint64_t done)
{
    double t = cli_now();
    if (!pg->enabled || t - pg->start < 0.25 || t - pg->last < 1.0 / 6)
        return;
    pg->last = t;
    pg->shown = 1;
    double f = pg->total ? (double)done / (double)pg->total : 1.0;
    int w = (int)(f * 30);
    char bar[31];
    for (int i = 0; i < 30; i++)
        bar[i] = i < w ? '#' : '.';
    bar[30] = 0;
    double rate = (double)done / (t - pg->start);
    double eta = rate > 0 ? (double)(pg->total - done) / rate : 0;
    fprintf(stderr, "\r" PROG " stats: [%s] %3.0f%%  %.1fM tokens/s  ETA %.0fs ", bar, 100 * f, rate / 1e6, eta);
    fflush(stderr);
}

static void progress_clear(struct progress *pg)
{
    if (pg->shown)
        fprintf(stderr, "\r%70s\r", "");
}

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Prints token bytes quoted: valid UTF-8 as is, otherwise \xNN escapes. */
static void show_token(FILE *f, const unsigned char *b, size_t n)
{
    char tmp[3 * 256];
    int valid = n <= 256 && ds_utf8_replace(tmp, sizeof tmp, b, n) == n && memcmp(tmp, b, n) == 0;
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned c = b[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !valid)) fprintf(f, "\\x%02x", c);
        else fputc((int)c, f);
    }
    fputc('"', f);
}

static int cmd_stats(const struct command *cmd, struct args *a)
{
    (void)cmd;
    char *prefix = resolve_prefix(a->pos[0]);
    ds_reader *r = open_or_die(prefix);
    bpe *tok = a->top ? load_vocab(a, 0) : NULL;
    int dt = ds_reader_dtype(r);
    size_t isz = ds_dtype_size(dt);
    uint64_t n = ds_reader_num_sequences(r), ndoc = ds_reader_num_documents(r), total = ds_reader_num_tokens(r);
    size_t ndense = isz == 1 ? 256 : isz == 2 ? 65536 : DENSE_WIDE;

    /* Cut the token stream into units of about UNIT_TOKENS, splitting long
       sequences, so that one huge sequence still spreads over the threads. */
    struct unit *units = NULL;
    size_t nunits = 0, ucap = 0;
    uint64_t acc = UNIT_TOKENS;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = ds_reader_seq_length(r, i);
        for (uint64_t off = 0; off == 0 || off < len; off += UNIT_TOKENS) {
            if (acc >= UNIT_TOKENS) {
                GROW(units, ucap, nunits + 1);
                units[nunits++] = (struct unit){ i, off };
                acc = 0;
            }
            acc += len - off < UNIT_TOKENS ? len - off : UNIT_TOKENS;
        }
    }
    GROW(units, ucap, nunits + 1);
    units[nunits] = (struct unit){ n, 0 };   /* sentinel */

    struct counter all;
    counter_init(&all, ndense);
    struct progress pg = { .enabled = !a->quiet && isatty(2), .start = cli_now(), .total = total };
    uint64_t done = 0;
    uint64_t bad_seq = UINT64_MAX;
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = a->threads ? (int)a->threads : omp_get_max_threads();
#endif
    (void)nthreads;

    OMP(omp parallel num_threads(nthreads))
    {
        struct counter c;
        counter_init(&c, ndense);
        OMP(omp for schedule(dynamic, 1))
        for (size_t u = 0; u < nunits; u++) {
            uint64_t counted = 0;
            for (uint64_t s = units[u].seq; s <= units[u + 1].seq && s < n; s++) {
                const void *data;
                uint64_t len;
                if (ds_reader_sequence(r, s, &data, &len) != 0) {
                    OMP(omp critical(stats_bad))
                    if (s < bad_seq) bad_seq = s;
                    continue;
                }
                uint64_t from = s == units[u].seq ? units[u].off : 0;
                uint64_t to = s == units[u + 1].seq ? units[u + 1].off : len;
                if (to > from) {
                    count_tokens(&c, (const uint8_t *)data + from * isz, to - from, dt);
                    counted += to - from;
                }
            }
            uint64_t now;
            OMP(omp atomic capture)
            now = done += counted;
            if (thread_id() == 0)
                progress_draw(&pg, now);
        }
        OMP(omp critical(stats_merge))
        {
            for (size_t i = 0; i < ndense; i++)
                all.dense[i] += c.dense[i];
            for (size_t i = 0; i < c.cap; i++)
                if (c.vals[i])
                    hash_add(&all, c.keys[i], c.vals[i]);
        }
        counter_release(&c);
    }
    progress_clear(&pg);
    free(units);
    if (bad_seq != UINT64_MAX)
        die(1, "'%s.idx': sequence_pointers[%llu] lies outside the .bin (see '" PROG " verify')",
            prefix, (ull)bad_seq);

    /* Every distinct token with its count, most frequent first. */
    size_t ndistinct = 0;
    for (size_t i = 0; i < ndense; i++)
        ndistinct += all.dense[i] != 0;
    ndistinct += all.used;
    struct tokcount *tc = mallocCheck(ndistinct * sizeof *tc);
    size_t m = 0;
    uint64_t eod_count = 0;
    for (size_t i = 0; i < ndense; i++)
        if (all.dense[i])
            tc[m++] = (struct tokcount){ dense_value(i, dt), all.dense[i] };
    for (size_t i = 0; i < all.cap; i++) {
        if (all.vals[i]) {
            int64_t v;
            memcpy(&v, &all.keys[i], sizeof v);
            tc[m++] = (struct tokcount){ v, all.vals[i] };
        }
    }
    for (size_t i = 0; i < m; i++)
        if (tc[i].id == (int64_t)a->eod)
            eod_count = tc[i].count;
    qsort(tc, m, sizeof *tc, by_count);
    size_t ntop = a->top < m ? (size_t)a->top : m;

    /* Documents whose last token (of their last non-empty sequence) is EOD. */
    uint64_t eod_docs = 0;
    for (uint64_t k = 0; k < ndoc; k++) {
        uint64_t s0 = ds_reader_doc_index(r, k), s = ds_reader_doc_index(r, k + 1);
        while (s > s0 && ds_reader_seq_length(r, s - 1) == 0)
            s--;
        if (s > s0 && ds_reader_token(r, s - 1, ds_reader_seq_length(r, s - 1) - 1) == (int64_t)a->eod)
            eod_docs++;
    }

    /* Sequence lengths in power-of-two buckets: [0], [1], [2,3], [4,7], ... */
    uint64_t hist[34] = {0};
    struct summary sm;
    summarize(r, &sm);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = ds_reader_seq_length(r, i);
        int b = 0;
        while (l) {
            b++;
            l >>= 1;
        }
        hist[b]++;
    }
    int hlo = 0, hhi = -1;
    for (int b = 0; b < 34; b++)
        if (hist[b]) {
            if (hhi < 0) hlo = b;
            hhi = b;
        }
    uint64_t hmax = 0;
    for (int b = hlo; b <= hhi; b++)
        if (hist[b] > hmax) hmax = hist[b];

    if (a->json) {
        printf("{\"prefix\":");
        json_cstr(stdout, prefix);
        printf(",\"dtype\":\"%s\",\"documents\":%llu,\"sequences\":%llu,\"tokens\":%llu,\"distinct_tokens\":%zu,"
               "\"eod_id\":%llu,\"eod_tokens\":%llu,\"documents_ending_with_eod\":%llu,",
               ds_dtype_name(dt), (ull)ndoc, (ull)n, (ull)total, m, (ull)a->eod, (ull)eod_count, (ull)eod_docs);
        if (n)
            printf("\"min_sequence_length\":%llu,\"mean_sequence_length\":%.4f,\"max_sequence_length\":%llu,",
                   (ull)sm.min_len, sm.mean_len, (ull)sm.max_len);
        printf("\"length_histogram\":[");
        for (int b = hlo; b <= hhi; b++)
            printf("%s{\"min\":%llu,\"max\":%llu,\"count\":%llu}", b > hlo ? "," : "",
                   b ? 1ULL << (b - 1) : 0ULL, b ? (1ULL << b) - 1 : 0ULL, (ull)hist[b]);
        printf("],\"top_tokens\":[");
        for (size_t i = 0; i < ntop; i++) {
            printf("%s{\"id\":%lld,\"count\":%llu", i ? "," : "", (sll)tc[i].id, (ull)tc[i].count);
            size_t tl = 0;
            const unsigned char *tb = tok && tc[i].id >= 0 && tc[i].id <= UINT32_MAX
                                          ? bpe_token_bytes(tok, (uint32_t)tc[i].id, &tl) : NULL;
            if (tb) {
                printf(",\"text\":");
                json_string(stdout, (const char *)tb, tl);
            }
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("%s\n", prefix);
        printf("  dtype            %s\n", ds_dtype_name(dt));
        printf("  tokens           %llu in %llu sequences, %llu documents\n", (ull)total, (ull)n, (ull)ndoc);
        printf("  distinct tokens  %zu\n", m);
        printf("  EOD tokens       %llu (id %llu); %llu of %llu documents end with one\n",
               (ull)eod_count, (ull)a->eod, (ull)eod_docs, (ull)ndoc);
        if (n)
            printf("  sequence length  min %llu  mean %.2f  max %llu\n", (ull)sm.min_len, sm.mean_len, (ull)sm.max_len);
        if (hhi >= 0) {
            printf("\nsequence length histogram\n");
            for (int b = hlo; b <= hhi; b++) {
                char range[48];
                if (b <= 1)
                    snprintf(range, sizeof range, "%d", b);
                else
                    snprintf(range, sizeof range, "%llu-%llu", 1ULL << (b - 1), (1ULL << b) - 1);
                int w = hmax ? (int)((hist[b] * 40 + hmax - 1) / hmax) : 0;
                printf("  %21s %12llu  %.*s\n", range, (ull)hist[b], w, "########################################");
            }
        }
        if (ntop) {
            printf("\nmost frequent tokens\n  %8s %12s %7s  %s\n", "id", "count", "share", tok ? "text" : "");
            for (size_t i = 0; i < ntop; i++) {
                printf("  %8lld %12llu %6.2f%%  ", (sll)tc[i].id, (ull)tc[i].count,
                       total ? 100.0 * (double)tc[i].count / (double)total : 0.0);
                size_t tl = 0;
                const unsigned char *tb = tok && tc[i].id >= 0 && tc[i].id <= UINT32_MAX
                                              ? bpe_token_bytes(tok, (uint32_t)tc[i].id, &tl) : NULL;
                if (tb)
                    show_token(stdout, tb, tl);
                putchar('\n');
            }
        }
    }
    check_stdout();
    free(tc);
    counter_release(&all);
    bpe_free(tok);
    ds_reader_close(r);
    free(prefix);
    return 0;
}

/* ---- merge --------------------------------------------------------------- */

static int by_strcmp(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Python's os.path.splitext on a base name: the extension starts at the last
   dot, unless everything before that dot is dots (".bashrc" has none). */
static size_t splitext_len(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return strlen(name);
    for (const char *p = name; p < dot; p++)
        if (*p != '.')
            return (size_t)(dot - name);
    return strlen(name);
}

/*
 * Megatron's merge_datasets.py directory scan: every regular file's prefix
 * (its name without extension) must have both PREFIX.bin and PREFIX.idx; the
 * prefixes are merged in sorted() order, which for UTF-8 names is strcmp's
 * byte order.  Appends "DIR/PREFIX" strings to out.
 */
static void expand_directory(const char *dir, char ***out, size_t *nout, size_t *cap)
{
    DIR *d = opendir(dir);
    if (!d)
        die(1, "cannot open directory '%s': %s", dir, strerror(errno));
    size_t first = *nout;
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;   /* "shards/" joins as "shards/x", not "shards//x" */
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        size_t nl = strlen(e->d_name), pl = splitext_len(e->d_name);
        char *path = mallocCheck(dl + nl + 6);
        snprintf(path, dl + nl + 6, "%.*s/%s", (int)dl, dir, e->d_name);
        if (!is_file(path)) {
            free(path);
            continue;
        }
        const char *ext = e->d_name + pl;
        path[dl + 1 + pl] = 0;   /* now DIR/PREFIX */
        int seen = 0;
        for (size_t i = first; i < *nout && !seen; i++)
            seen = strcmp((*out)[i], path) == 0;
        if (seen) {
            free(path);
            continue;
        }
        const char *pair = strcmp(ext, ".idx") == 0 ? ".bin" : ".idx";
        strcat(path, pair);
        if (!is_file(path))
            die(1, "cannot merge '%s': '%.*s/%s' has no '%s' beside it (every file there must belong to a .bin/.idx pair)",
                dir, (int)dl, dir, e->d_name, pair);
        path[dl + 1 + pl] = 0;
        GROW(*out, *cap, *nout + 1);
        (*out)[(*nout)++] = path;
    }
    closedir(d);
    if (*nout == first)
        die(1, "cannot merge '%s': the directory holds no .bin/.idx pair", dir);
    qsort(*out + first, *nout - first, sizeof **out, by_strcmp);
}

static int cmd_merge(const struct command *cmd, struct args *a)
{
    if (a->npos == 0)
        usage_error(cmd, "missing --input");
    if (!a->output)
        usage_error(cmd, "missing --output-prefix");
    char **prefixes = NULL;
    size_t np = 0, cap = 0;
    for (size_t i = 0; i < a->npos; i++) {
        struct stat st;
        if (stat(a->pos[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            expand_directory(a->pos[i], &prefixes, &np, &cap);
        } else {
            GROW(prefixes, cap, np + 1);
            prefixes[np++] = resolve_prefix(a->pos[i]);
        }
    }

    /* Everything is opened and checked before anything is written. */
    ds_reader **rs = mallocCheck(np * sizeof *rs);
    for (size_t i = 0; i < np; i++) {
        rs[i] = open_or_die(prefixes[i]);
        if (ds_reader_dtype(rs[i]) != ds_reader_dtype(rs[0]))
            die(1, "cannot merge '%s.idx' (dtype %s) after '%s.idx' (dtype %s): all inputs need the same dtype",
                prefixes[i], ds_dtype_name(ds_reader_dtype(rs[i])), prefixes[0], ds_dtype_name(ds_reader_dtype(rs[0])));
    }

    ds_writer *w = NULL;
    if (ds_writer_open(a->output, ds_reader_dtype(rs[0]), &w) != 0)
        die(1, "%s", ds_writer_error(w));
    size_t nt = 0;
    const char *const *tp = ds_writer_temp_paths(w, &nt);
    for (size_t i = 0; i < nt && i < MAX_TEMPS; i++) {
        snprintf(temp_paths[i], sizeof temp_paths[i], "%s", tp[i]);
        ntemps = (sig_atomic_t)(i + 1);
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);

    for (size_t i = 0; i < np; i++)
        if (ds_writer_add_dataset(w, rs[i]) != 0)
            die(1, "%s", ds_writer_error(w));
    if (ds_writer_finalize(w) != 0)
        die(1, "%s", ds_writer_error(w));
    ntemps = 0;
    if (!a->quiet)
        fprintf(stderr, PROG ": merged %zu dataset%s into '%s': %llu documents, %llu sequences, %llu tokens (%s)\n",
                np, np == 1 ? "" : "s", a->output, (ull)ds_writer_num_documents(w),
                (ull)ds_writer_num_sequences(w), (ull)ds_writer_num_tokens(w), ds_dtype_name(ds_reader_dtype(rs[0])));
    ds_writer_free(w);
    for (size_t i = 0; i < np; i++) {
        ds_reader_close(rs[i]);
        free(prefixes[i]);
    }
    free(rs);
    free(prefixes);
    return 0;
}

/* ---- diff ---------------------------------------------------------------- */

/* A position in the token stream of one document. */
struct cursor {
    const ds_reader *r;
    const char *prefix;
    uint64_t seq, end;         /* current sequence, end of the document */
    const uint8_t *p;
    uint64_t len, off;         /* tokens in the current sequence, position in it */
};

static void cursor_start(struct cursor *c, const ds_reader *r, const char *prefix, uint64_t doc)
{
    c->r = r;
    c->prefix = prefix;
    c->seq = ds_reader_doc_index(r, doc);
    c->end = ds_reader_doc_index(r, doc + 1);
    c->len = c->off = 0;
    c->p = NULL;
    if (c->seq < c->end)
        c->p = sequence_or_die(r, prefix, c->seq, &c->len);
}

/* Tokens left in the current sequence, moving past exhausted ones. */
static uint64_t cursor_fill(struct cursor *c)
{
    while (c->off == c->len && c->seq + 1 < c->end) {
        c->seq++;
        c->off = 0;
        c->p = sequence_or_die(c->r, c->prefix, c->seq, &c->len);
    }
    return c->len - c->off;
}

/* Token j of document doc, walking its sequences; 0 with *ok = 0 past its end. */
static int64_t doc_token(const ds_reader *r, const char *prefix, uint64_t doc, uint64_t j, int *ok)
{
    uint64_t s = ds_reader_doc_index(r, doc), e = ds_reader_doc_index(r, doc + 1);
    for (; s < e; s++) {
        uint64_t len;
        const uint8_t *p = sequence_or_die(r, prefix, s, &len);
        if (j < len) {
            *ok = 1;
            return load_token(p + j * ds_dtype_size(ds_reader_dtype(r)), ds_reader_dtype(r));
        }
        j -= len;
    }
    *ok = 0;
    return 0;
}

static uint64_t doc_tokens(const ds_reader *r, uint64_t doc)
{
    uint64_t t = 0;
    for (uint64_t s = ds_reader_doc_index(r, doc); s < ds_reader_doc_index(r, doc + 1); s++)
        t += ds_reader_seq_length(r, s);
    return t;
}

struct side { const ds_reader *r; const char *prefix; };

/* Context around document position pos: "... a b c | d e ..." */
static void print_context(const struct side *sd, uint64_t doc, uint64_t pos, uint64_t ctx, int json)
{
    uint64_t from = pos > ctx ? pos - ctx : 0, to = pos + ctx + 1;
    int first = 1;
    if (!json && from > 0)
        printf(" ...");
    for (uint64_t j = from; j < to; j++) {
        int ok;
        int64_t v = doc_token(sd->r, sd->prefix, doc, j, &ok);
        if (!ok) {
            if (!json)
                printf("%s (end)", j == pos ? " |" : "");
            break;
        }
        if (json)
            printf("%s%lld", first ? "" : ",", (sll)v);
        else
            printf("%s %lld", j == pos ? " |" : "", (sll)v);
        first = 0;
        if (j + 1 == to && !json) {
            int more;
            doc_token(sd->r, sd->prefix, doc, to, &more);
            if (more)
                printf(" ...");
        }
    }
}

/* The sequence that holds document position pos ("end" past the last). */
static void print_where(const ds_reader *r, uint64_t doc, uint64_t pos)
{
    uint64_t s = ds_reader_doc_index(r, doc), e = ds_reader_doc_index(r, doc + 1);
    for (; s < e; s++) {
        uint64_t len = ds_reader_seq_length(r, s);
        if (pos < len) {
            printf("sequence %llu, position %llu", (ull)s, (ull)pos);
            return;
        }
        pos -= len;
    }
    printf("end of document");
}

static void print_lengths(const ds_reader *r, uint64_t doc, int json)
{
    uint64_t s0 = ds_reader_doc_index(r, doc), s1 = ds_reader_doc_index(r, doc + 1);
    putchar('[');
    for (uint64_t s = s0; s < s1; s++) {
        if (!json && s - s0 == 16) {
            printf(", ... (%llu in all)", (ull)(s1 - s0));
            break;
        }
        printf("%s%u", s > s0 ? ", " : "", (unsigned)ds_reader_seq_length(r, s));
    }
    putchar(']');
}

static int cmd_diff(const struct command *cmd, struct args *a)
{
    (void)cmd;
    uint64_t ctx = a->context;
    char *pa = resolve_prefix(a->pos[0]), *pb = resolve_prefix(a->pos[1]);
    ds_reader *ra = open_or_die(pa), *rb = open_or_die(pb);
    struct side sa = { ra, pa }, sb = { rb, pb };
    int dta = ds_reader_dtype(ra), dtb = ds_reader_dtype(rb);
    size_t isa = ds_dtype_size(dta), isb = ds_dtype_size(dtb);
    uint64_t da = ds_reader_num_documents(ra), db = ds_reader_num_documents(rb);
    uint64_t nd = da < db ? da : db;

    /* Documents in order: tokens first, then sequence boundaries. */
    const char *what = NULL;
    uint64_t doc = 0, pos = 0;
    for (doc = 0; doc < nd; doc++) {
        struct cursor ca, cb;
        cursor_start(&ca, ra, pa, doc);
        cursor_start(&cb, rb, pb, doc);
        pos = 0;
        for (;;) {
            uint64_t na = cursor_fill(&ca), nb = cursor_fill(&cb);
            if (na == 0 || nb == 0) {
                if (na != nb)
                    what = "tokens";
                break;
            }
            uint64_t m = na < nb ? na : nb, j = 0;
            const uint8_t *xa = ca.p + ca.off * isa, *xb = cb.p + cb.off * isb;
            if (dta != dtb || memcmp(xa, xb, m * isa) != 0) {
                while (j < m && load_token(xa + j * isa, dta) == load_token(xb + j * isb, dtb))
                    j++;
            } else {
                j = m;
            }
            pos += j;
            if (j < m) {
                what = "tokens";
                break;
            }
            ca.off += m;
            cb.off += m;
        }
        if (what)
            break;
        uint64_t s0a = ds_reader_doc_index(ra, doc), s1a = ds_reader_doc_index(ra, doc + 1);
        uint64_t s0b = ds_reader_doc_index(rb, doc), s1b = ds_reader_doc_index(rb, doc + 1);
        int same = s1a - s0a == s1b - s0b;
        for (uint64_t k = 0; same && k < s1a - s0a; k++)
            same = ds_reader_seq_length(ra, s0a + k) == ds_reader_seq_length(rb, s0b + k);
        if (!same) {
            what = "sequence_lengths";
            break;
        }
    }
    if (!what && da != db)
        what = "documents";
    if (!what && dta != dtb)
        what = "dtype";
    uint64_t bad_ptr = UINT64_MAX;
    if (!what) {
        for (uint64_t i = 0; i < ds_reader_num_sequences(ra) && bad_ptr == UINT64_MAX; i++)
            if (ds_reader_seq_pointer(ra, i) != ds_reader_seq_pointer(rb, i))
                bad_ptr = i;
        if (bad_ptr != UINT64_MAX)
            what = "pointers";
    }

    if (a->quiet) {
        /* exit status only */
    } else if (a->json) {
        printf("{\"a\":");
        json_cstr(stdout, pa);
        printf(",\"b\":");
        json_cstr(stdout, pb);
        printf(",\"identical\":%s", what ? "false" : "true");
        if (what)
            printf(",\"difference\":\"%s\"", what);
        if (dta != dtb)
            printf(",\"dtype_a\":\"%s\",\"dtype_b\":\"%s\"", ds_dtype_name(dta), ds_dtype_name(dtb));
        if (what && strcmp(what, "tokens") == 0) {
            uint64_t from = pos > ctx ? pos - ctx : 0;
            printf(",\"document\":%llu,\"token\":%llu,\"context_start\":%llu,\"context_a\":[", (ull)doc, (ull)pos, (ull)from);
            print_context(&sa, doc, pos, ctx, 1);
            printf("],\"context_b\":[");
            print_context(&sb, doc, pos, ctx, 1);
            printf("]");
        } else if (what && strcmp(what, "sequence_lengths") == 0) {
            printf(",\"document\":%llu,\"sequence_lengths_a\":", (ull)doc);
            print_lengths(ra, doc, 1);
            printf(",\"sequence_lengths_b\":");
            print_lengths(rb, doc, 1);
        } else if (what && strcmp(what, "documents") == 0) {
            printf(",\"documents_a\":%llu,\"documents_b\":%llu,\"document\":%llu", (ull)da, (ull)db, (ull)nd);
        } else if (what && strcmp(what, "pointers") == 0) {
            printf(",\"sequence\":%llu,\"pointer_a\":%llu,\"pointer_b\":%llu", (ull)bad_ptr,
                   (ull)ds_reader_seq_pointer(ra, bad_ptr), (ull)ds_reader_seq_pointer(rb, bad_ptr));
        }
        printf("}\n");
    } else if (!what) {
        printf("'%s' and '%s' are identical: %llu documents, %llu sequences, %llu tokens\n", pa, pb,
               (ull)da, (ull)ds_reader_num_sequences(ra), (ull)ds_reader_num_tokens(ra));
    } else {
        if (dta != dtb)
            printf("dtype differs: '%s' is %s, '%s' is %s\n", pa, ds_dtype_name(dta), pb, ds_dtype_name(dtb));
        if (strcmp(what, "tokens") == 0) {
            printf("first difference: document %llu, token %llu of the document\n", (ull)doc, (ull)pos);
            const struct side *sides[2] = { &sa, &sb };
            for (int i = 0; i < 2; i++) {
                const ds_reader *r = sides[i]->r;
                uint64_t ns = ds_reader_doc_index(r, doc + 1) - ds_reader_doc_index(r, doc);
                printf("  %s: document %llu has %llu tokens in %llu sequence%s; at ", sides[i]->prefix, (ull)doc,
                       (ull)doc_tokens(r, doc), (ull)ns, ns == 1 ? "" : "s");
                print_where(r, doc, pos);
                printf(":\n   ");
                print_context(sides[i], doc, pos, ctx, 0);
                putchar('\n');
            }
        } else if (strcmp(what, "sequence_lengths") == 0) {
            printf("first difference: document %llu has the same tokens but different sequence boundaries\n",
                   (ull)doc);
            printf("  %s: sequence lengths ", pa);
            print_lengths(ra, doc, 0);
            printf("\n  %s: sequence lengths ", pb);
            print_lengths(rb, doc, 0);
            putchar('\n');
        } else if (strcmp(what, "documents") == 0) {
            printf("first difference: document %llu: '%s' has %llu documents, '%s' has %llu; the first %llu are identical\n",
                   (ull)nd, pa, (ull)da, pb, (ull)db, (ull)nd);
        } else if (strcmp(what, "pointers") == 0) {
            printf("same documents and tokens, but sequence_pointers[%llu] differ: %llu in '%s', %llu in '%s'\n",
                   (ull)bad_ptr, (ull)ds_reader_seq_pointer(ra, bad_ptr), pa,
                   (ull)ds_reader_seq_pointer(rb, bad_ptr), pb);
        } else {
            printf("same documents and token values; only the dtype differs\n");
        }
    }
    check_stdout();
    ds_reader_close(ra);
    ds_reader_close(rb);
    free(pa);
    free(pb);
    return what ? 1 : 0;
}

/* ---- samples ------------------------------------------------------------- */

static const char *const split_label[3] = {"train", "valid", "test"};

static void print_ids(const char *name, const int64_t *v, uint64_t n)
{
    fputs(name, stdout);
    for (uint64_t k = 0; k < n; k++)
        printf(" %lld", (sll)v[k]);
    putchar('\n');
}

/* GPTDataset.__getitem__'s outputs for sample k, one line each: tokens,
   labels, loss_mask, position_ids, and for the (L, L) attention mask the
   first column each row may see (row r sees [start, r]). */
static void print_masks(const ds_pipeline *p, int split, uint64_t k, uint64_t L)
{
    int64_t *tokens = mallocCheck(L * sizeof *tokens), *labels = mallocCheck(L * sizeof *labels);
    int64_t *pos = mallocCheck(L * sizeof *pos), *start = mallocCheck(L * sizeof *start);
    float *loss = mallocCheck(L * sizeof *loss);
    uint8_t *att = mallocCheck(L * L);
    int rc = ds_pipeline_sample(p, split, k, tokens, labels, loss, pos, att);
    if (rc != 0)
        die(1, "cannot read sample %llu: %s", (ull)k, ds_strerror(rc));
    print_ids("tokens:", tokens, L);
    print_ids("labels:", labels, L);
    fputs("loss_mask:", stdout);
    for (uint64_t i = 0; i < L; i++)
        printf(" %g", (double)loss[i]);
    putchar('\n');
    print_ids("position_ids:", pos, L);
    for (uint64_t r = 0; r < L; r++) {
        uint64_t c = 0;
        while (c < r && att[r * L + c])
            c++;
        start[r] = (int64_t)c;
    }
    print_ids("attention_start:", start, L);
    free(tokens);
    free(labels);
    free(pos);
    free(start);
    free(loss);
    free(att);
}

static int cmd_samples(const struct command *cmd, struct args *a)
{
    int per_split = a->nsplit_path[0] || a->nsplit_path[1] || a->nsplit_path[2];
    if (a->npos == 0 && !a->mock && !per_split)
        usage_error(cmd, "'samples' needs --data-path, --train-data-path/--valid-data-path/--test-data-path or --mock-data");
    if (a->npos != 0 && a->mock)
        usage_error(cmd, "'samples' takes --data-path or --mock-data, not both");
    if (per_split && (a->npos || a->mock))
        usage_error(cmd, "--train-data-path/--valid-data-path/--test-data-path replace %s", a->mock ? "--mock-data" : "--data-path");
    if (per_split && a->split)
        usage_error(cmd, "--split does not apply to --train-data-path/--valid-data-path/--test-data-path (each prefix is used whole)");
    if (!a->seq_length)
        usage_error(cmd, "'samples' needs --seq-length");
    if (!a->train_samples && !a->train_iters)
        usage_error(cmd, "'samples' needs --train-samples or --train-iters");
    int show_split = DS_SPLIT_TRAIN;
    if (a->show_split) {
        for (show_split = 0; show_split < 3 && strcmp(a->show_split, split_label[show_split]); show_split++)
            ;
        if (show_split == 3)
            usage_error(cmd, "option '--show-split' needs train, valid or test, got '%s'", a->show_split);
    }
    int64_t counts[3];
    if (ds_sample_counts(counts, a->train_samples, a->train_iters, a->gbs, a->eval_iters,
                         a->eval_interval, a->skip_train) != 0)
        usage_error(cmd, "cannot compute the sample counts from these flags");
    if (a->have_valid)
        counts[1] = (int64_t)a->valid_samples;
    if (a->have_test)
        counts[2] = (int64_t)a->test_samples;

    char *vocab = a->vocab_file ? xstrdup(a->vocab_file) : cli_find_vocab("gpt2-vocab.json");
    char *merges = a->merge_file ? xstrdup(a->merge_file) : cli_find_vocab("gpt2-merges.txt");
    ds_gpt_config c;
    ds_gpt_config_init(&c);
    c.data_path = a->pos;
    c.n_data_path = a->npos;
    for (int s = 0; s < 3; s++) {
        c.split_data_path[s] = a->split_path[s];
        c.n_split_data_path[s] = a->nsplit_path[s];
    }
    if (a->split)
        c.split = a->split;
    c.seq_length = a->seq_length;
    c.seed = (uint32_t)a->seed;
    memcpy(c.num_samples, counts, sizeof counts);
    c.megatron_version = a->megatron_version;
    c.tokenizer_ids = a->tokenizer_ids;
    c.cache_dir = a->cache;
    c.mock = a->mock;
    if (a->vocab_size)
        c.vocab_size = (int64_t)a->vocab_size;
    c.eod = (int64_t)a->eod;
    c.eod_mask_loss = a->eod_mask_loss;
    c.reset_position_ids = a->reset_position_ids;
    c.reset_attention_mask = a->reset_attention_mask;
    c.vocab_file = vocab ? vocab : "gpt2-vocab.json";
    c.merge_file = merges ? merges : "gpt2-merges.txt";
    double t0 = cli_now();
    ds_pipeline *p = NULL;
    int rc = ds_pipeline_open(&c, &p);
    double secs = cli_now() - t0;
    free(vocab);
    free(merges);
    if (rc != 0) {
        error_line("%s", ds_pipeline_error(p));
        ds_pipeline_close(p);
        return 1;
    }
    size_t nd = ds_pipeline_num_datasets(p);
    if (!(a->have_show && a->quiet)) {
        printf("datasets: %zu%s, seq_length %llu, seed %llu, split \"%s\", megatron %s\n", nd,
               ds_pipeline_is_mock(p) ? " (mock)" : ds_pipeline_is_blend(p) ? " (blended)" : "",
               (ull)a->seq_length, (ull)a->seed, a->mock ? "1,1,1" : per_split ? "none, a blend per split" : c.split,
               a->megatron_version == DS_MEGATRON_0_8 ? "0.8" : "main");
        for (size_t d = 0; d < nd; d++) {
            const char *path = "?";
            ds_gpt_info g;
            for (int s = 0; s < 3; s++)
                if (ds_pipeline_dataset(p, s, d, &g) == 0) {
                    path = g.path;
                    break;
                }
            int ds = ds_pipeline_dataset_split(p, d);
            printf("  [%zu] weight %.17g  %s  (%llu sequences)%s%s\n", d, ds_pipeline_weight(p, d), path,
                   (ull)ds_pipeline_num_sequences(p, d), ds >= 0 ? "  " : "", ds >= 0 ? split_label[ds] : "");
        }
        for (int s = 0; s < 3; s++) {
            if (!ds_pipeline_has_split(p, s)) {
                printf("%s: none (%s)\n", split_label[s], per_split ? "no data path" : "zero split weight");
                continue;
            }
            printf("%s: %lld samples asked, length %llu\n", split_label[s], (sll)counts[s],
                   (ull)ds_pipeline_length(p, s));
            for (size_t d = 0; d < nd; d++) {
                ds_gpt_info g;
                if (ds_pipeline_dataset(p, s, d, &g) != 0)
                    continue;
                char ns[32];
                if (g.num_samples == DS_NUM_SAMPLES_NONE)
                    snprintf(ns, sizeof ns, "None");
                else
                    snprintf(ns, sizeof ns, "%lld", (sll)g.num_samples);
                printf("  [%zu] sequences [%llu, %llu)  tokens/epoch %llu  num_samples %s  epochs %llu%s  length %llu  %s %s\n",
                       d, (ull)g.seq_begin, (ull)g.seq_end, (ull)g.tokens_per_epoch, ns, (ull)g.num_epochs,
                       g.separate_final_epoch ? " (separate final epoch)" : "", (ull)g.length, g.md5,
                       g.from_cache ? "cached" : a->cache ? "built+cached" : "built");
            }
            const char *md5;
            if (ds_pipeline_blend(p, s, NULL, NULL, NULL, &md5) == 0)
                printf("  blend %s\n", md5);
        }
        fprintf(stderr, PROG ": indices ready in %.3f s\n", secs);
    }
    if (a->have_show) {
        uint64_t L = ds_pipeline_seq_length(p), n = L + ds_pipeline_extra_token(p);
        if (!ds_pipeline_has_split(p, show_split) || a->show >= ds_pipeline_length(p, show_split)) {
            error_line("sample %llu is out of range: the %s split has %llu samples", (ull)a->show,
                       split_label[show_split], (ull)ds_pipeline_length(p, show_split));
            ds_pipeline_close(p);
            return 1;
        }
        int64_t *text = mallocCheck(n * sizeof *text);
        ds_sample_origin o;
        rc = ds_pipeline_text(p, show_split, a->show, text, &o);
        if (rc != 0) {
            error_line("cannot read sample %llu: %s", (ull)a->show, ds_strerror(rc));
            free(text);
            ds_pipeline_close(p);
            return 1;
        }
        if (!a->quiet)
            printf("sample %llu of %s: dataset %zu sample %llu, shuffle %llu, document index [%llu, %llu], "
                   "sequence %llu from token %llu\n", (ull)a->show, split_label[show_split], o.dataset,
                   (ull)o.dataset_sample, (ull)o.shuffle_value, (ull)o.doc_first, (ull)o.doc_last,
                   (ull)o.seq_first, (ull)o.offset);
        if (a->show_masks) {
            print_masks(p, show_split, a->show, L);
        } else if (a->text) {
            bpe *tok = load_vocab(a, 1);
            unsigned char *raw = NULL;
            size_t cap = 0, len = 0;
            for (uint64_t k = 0; k < n; k++) {
                size_t tl = 0;
                const unsigned char *tb = text[k] >= 0 && text[k] <= UINT32_MAX
                                              ? bpe_token_bytes(tok, (uint32_t)text[k], &tl) : NULL;
                if (!tb)
                    die(1, "token %lld of sample %llu is not in the vocabulary", (sll)text[k], (ull)a->show);
                GROW(raw, cap, len + tl);
                memcpy(raw + len, tb, tl);
                len += tl;
            }
            size_t need = ds_utf8_replace_bound(len);
            char *out = mallocCheck(need ? need : 1);
            size_t m = ds_utf8_replace(out, need, raw, len);
            fwrite(out, 1, m, stdout);
            putchar('\n');
            free(out);
            free(raw);
            bpe_free(tok);
        } else {
            for (uint64_t k = 0; k < n; k++)
                printf(k ? " %lld" : "%lld", (sll)text[k]);
            putchar('\n');
        }
        free(text);
    }
    check_stdout();
    ds_pipeline_close(p);
    return 0;
}

/* ---- main ---------------------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc < 2)
        usage_error(NULL, "missing command (info, verify, dump, stats, merge, diff or samples)");
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
        print_main_help();
        return 0;
    }
    if (strcmp(name, "-V") == 0 || strcmp(name, "--version") == 0) {
        printf(PROG " %s (dataset library %s)\n", MDS_VERSION, ds_version_string());
        return 0;
    }
    int help = strcmp(name, "help") == 0;
    if (help) {
        if (argc < 3) {
            print_main_help();
            return 0;
        }
        name = argv[2];
    }
    const struct command *cmd = NULL;
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            cmd = &commands[i];
    if (!cmd)
        usage_error(NULL, "unknown command '%s'", name);
    if (help) {
        print_help(cmd);
        return 0;
    }
    struct args a = { .top = 10, .eod = GPT2_EOD, .context = 8, .seed = 1234, .gbs = 1,
                      .eval_iters = 100, .eval_interval = 1000 };
    parse_args(cmd, argc - 2, argv + 2, &a);
    int rc = cmd->run(cmd, &a);
    free(a.pos);
    for (int s = 0; s < 3; s++)
        free(a.split_path[s]);
    return rc;
}
