/*
 * mdsprep.c - mdsprep: JSON lines in, Megatron MMIDIDX datasets out.
 *
 * A drop-in for Megatron-LM's tools/preprocess_data.py with its GPT-2 BPE,
 * HuggingFace (tokenizer.json) and SentencePiece tokenizers (tokenizer.h):
 * the same flags, the same output bytes, many times faster.
 *
 * Pipeline (docs/architecture.md):
 *   reader thread   decompresses the inputs in order and cuts them into chunks
 *                   of whole lines (about 1 MiB each); it starts before the
 *                   tokenizer is loaded;
 *   N workers       parse the JSON of each line, pull the --json-keys fields,
 *                   tokenize them (tok_encode) into per-chunk buffers; they
 *                   run at nice +3, below the reader and the decoder;
 *   main thread     takes the finished chunks in input order and appends
 *                   every document to one ds_writer per key, prints
 *                   progress, and reports the first bad line in file order.
 * A fixed ring of chunk slots bounds memory: the reader blocks when the
 * writer falls behind, so peak RSS does not grow with the corpus.
 *
 * Not done here: sentence splitting (--split-sentences is refused), the
 * tokenizer types tokenizer.h does not implement (refused), the partition
 * files of Megatron's --partitions mode (we keep input order with any
 * --partitions value; docs/cli.md says so).
 */
#include "cli.h"
#include "dataset.h"
#include "input.h"
#include "json.h"
#include "pretok.h"
#include "tokenizer.h"
#include "utf8.h"

#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_KEYS 16
#define CHUNK_BYTES (1u << 20)
#define MAX_SKIP_NOTES 8

/* ---- temporary files and signals --------------------------------------- */

/* Paths of every temporary file the writers may create, copied into static
 * storage so the signal handler can unlink them without allocating. */
#define MAX_TEMPS (MAX_KEYS * 8)
static char temp_paths[MAX_TEMPS][PATH_MAX];
static volatile sig_atomic_t ntemps;

static void cleanup_temps(void)
{
    for (int i = 0; i < ntemps; i++) unlink(temp_paths[i]);
    ntemps = 0;
}

static void on_signal(int sig)
{
    for (int i = 0; i < ntemps; i++) unlink(temp_paths[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void register_temps(ds_writer *w)
{
    size_t n = 0;
    const char *const *p = ds_writer_temp_paths(w, &n);
    for (size_t i = 0; i < n && ntemps < MAX_TEMPS; i++) {
        snprintf(temp_paths[ntemps], PATH_MAX, "%s", p[i]);
        ntemps++;
    }
}

/* ---- options ------------------------------------------------------------ */

enum opt_id {
    O_INPUT = 1, O_OUTPUT_PREFIX, O_JSON_KEYS, O_APPEND_EOD, O_TOKENIZER_TYPE, O_VOCAB_FILE,
    O_MERGE_FILE, O_WORKERS, O_PARTITIONS, O_LOG_INTERVAL, O_DATASET_IMPL, O_KEEP_SEQUENTIAL,
    O_KEEP_NEWLINES, O_LANG, O_VOCAB_EXTRA_IDS, O_MAKE_VOCAB_DIV, O_LEGACY_TOKENIZER,
    O_SKIP_INVALID, O_SPECIAL_TOKENS, O_PRETOKENIZER, O_SKIP_EMPTY, O_QUIET, O_VERBOSE,
    O_HELP, O_VERSION, O_TOKENIZER_MODEL
};

#define REFUSED(name, arg) {name, 0, arg, CLI_REFUSED, NULL, "by mds (not implemented; one sequence per document)"}

/* One table drives both the parser and --help (docs/cli.md lists it). */
static const struct cli_option options[] = {
    {"input", 'i', CLI_ARG_ONE, O_INPUT, "PATH", "input JSON lines: plain, .gz, .xz or .zst (by content); '-' is stdin; repeat for several files; a glob pattern is expanded (sorted)"},
    {"output-prefix", 'o', CLI_ARG_ONE, O_OUTPUT_PREFIX, "PREFIX", "write PREFIX_{key}_document.bin/.idx"},
    {"json-keys", 0, CLI_ARG_MANY, O_JSON_KEYS, "KEY...", "keys to extract, one dataset per key (default: text)"},
    {"append-eod", 0, CLI_ARG_NONE, O_APPEND_EOD, NULL, "append the tokenizer's EOD to every non-empty document (GPT-2: <|endoftext|>, 50256)"},
    {"tokenizer-type", 0, CLI_ARG_ONE, O_TOKENIZER_TYPE, "TYPE", "GPT2BPETokenizer (default), HuggingFaceTokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer or Llama2Tokenizer"},
    {"tokenizer-model", 0, CLI_ARG_ONE, O_TOKENIZER_MODEL, "PATH", "HuggingFaceTokenizer: a directory with tokenizer.json (+ tokenizer_config.json) or the tokenizer.json; SentencePiece types: the .model file"},
    {"vocab-file", 0, CLI_ARG_ONE, O_VOCAB_FILE, "PATH", "GPT-2 vocab JSON (default: the bundled gpt2-vocab.json)"},
    {"merge-file", 0, CLI_ARG_ONE, O_MERGE_FILE, "PATH", "GPT-2 merges (default: the bundled gpt2-merges.txt)"},
    {"workers", 'j', CLI_ARG_ONE, O_WORKERS, "N", "tokenizer threads (default: the CPUs this process may use: its affinity mask, at most SLURM_CPUS_PER_TASK)"},
    {"partitions", 0, CLI_ARG_ONE, O_PARTITIONS, "N", "accepted for Megatron compatibility; output keeps input order"},
    {"log-interval", 0, CLI_ARG_ONE, O_LOG_INTERVAL, "N", "print Megatron's progress line every N documents (default 1000)"},
    {"dataset-impl", 0, CLI_ARG_ONE, O_DATASET_IMPL, "mmap", "only mmap (Megatron's MMIDIDX) is written"},
    {"keep-sequential-samples", 0, CLI_ARG_NONE, O_KEEP_SEQUENTIAL, NULL, "accepted; order is always kept"},
    {"skip-invalid", 0, CLI_ARG_NONE, O_SKIP_INVALID, NULL, "skip and count bad lines instead of stopping at the first"},
    {"special-tokens", 0, CLI_ARG_NONE, O_SPECIAL_TOKENS, NULL, "GPT-2: map a literal <|endoftext|> in text to 50256 (Megatron's HF tokenizer)"},
    {"pretokenizer", 0, CLI_ARG_ONE, O_PRETOKENIZER, "scan|pcre2", "GPT-2 and HuggingFace: the fast scanners (default) or PCRE2 JIT (the reference)"},
    {"skip-empty-documents", 0, CLI_ARG_NONE, O_SKIP_EMPTY, NULL, "do not record empty documents (old Megatron/DeepSpeed behaviour)"},
    {"quiet", 'q', CLI_ARG_NONE, O_QUIET, NULL, "less output (errors only); twice: nothing"},
    {"verbose", 'v', CLI_ARG_NONE, O_VERBOSE, NULL, "more output (each skipped line, timings)"},
    {"help", 'h', CLI_ARG_NONE, O_HELP, NULL, "show this help and exit"},
    {"version", 'V', CLI_ARG_NONE, O_VERSION, NULL, "show the version and exit"},
    /* Megatron flags that change nothing for GPT-2 BPE output: accepted. */
    {"keep-newlines", 0, CLI_ARG_NONE, O_KEEP_NEWLINES, NULL, NULL},
    {"lang", 0, CLI_ARG_ONE, O_LANG, NULL, NULL},
    {"vocab-extra-ids", 0, CLI_ARG_ONE, O_VOCAB_EXTRA_IDS, NULL, NULL},
    {"make-vocab-size-divisible-by", 0, CLI_ARG_ONE, O_MAKE_VOCAB_DIV, NULL, NULL},
    {"legacy-tokenizer", 0, CLI_ARG_NONE, O_LEGACY_TOKENIZER, NULL, NULL},
    /* Megatron-DeepSpeed's users write --vocab: its argparse took the prefix
       as --vocab-file, the only flag starting so; here it is an exact name,
       so it never meets --vocab-extra-ids or --vocab-size. */
    {"vocab", 0, CLI_ARG_ONE, O_VOCAB_FILE, NULL, NULL},
    /* Megatron flags mds does not implement: refused by name, never ignored. */
    REFUSED("split-sentences", CLI_ARG_NONE),
    REFUSED("tokenizer-metadata", CLI_ARG_ONE),
    REFUSED("tokenizer-special-tokens", CLI_ARG_MANY),
    REFUSED("tiktoken-pattern", CLI_ARG_ONE),
    REFUSED("tiktoken-num-special-tokens", CLI_ARG_ONE),
    REFUSED("tiktoken-special-tokens", CLI_ARG_MANY),
    REFUSED("vocab-size", CLI_ARG_ONE),
    REFUSED("padded-vocab-size", CLI_ARG_ONE),
    REFUSED("no-pad-vocab-size", CLI_ARG_NONE),
    REFUSED("tokenizer-sentencepiece-legacy", CLI_ARG_NONE),
    REFUSED("no-tokenizer-sentencepiece-ignore-extra-whitespaces", CLI_ARG_NONE),
    REFUSED("tokenizer-hf-no-use-fast", CLI_ARG_NONE),
    REFUSED("tokenizer-hf-no-include-special-tokens", CLI_ARG_NONE),
    REFUSED("trust-remote-code", CLI_ARG_NONE),
    REFUSED("null-tokenizer-eod-id", CLI_ARG_ONE),
    REFUSED("null-tokenizer-pad-id", CLI_ARG_ONE),
    REFUSED("chat-template", CLI_ARG_ONE),
    REFUSED("use-gigatoken", CLI_ARG_NONE),
    REFUSED("find-optimal-num-workers", CLI_ARG_NONE),
    REFUSED("workers-to-check", CLI_ARG_MANY),
    REFUSED("max-documents", CLI_ARG_ONE),
    REFUSED("seq-length", CLI_ARG_ONE),
    REFUSED("tokenizer-name-or-path", CLI_ARG_ONE),
    REFUSED("pad-vocab-size-to", CLI_ARG_ONE),
};
#define NOPTIONS (sizeof options / sizeof options[0])

struct config {
    const char **inputs; size_t ninputs, incap;
    const char *output_prefix;
    const char *keys[MAX_KEYS]; size_t nkeys;
    int keys_given;
    int append_eod;
    int tokenizer_type;
    const char *tokenizer_model;
    const char *vocab_file, *merge_file;
    int workers, workers_given;
    uint64_t log_interval;
    int skip_invalid, special_tokens, use_pcre2, skip_empty;
};

static const struct cli_table table = { NULL, options, NOPTIONS, NULL, NULL };

static void print_help(void)
{
    printf("usage: %s --input PATH [--input PATH...] --output-prefix PREFIX [options]\n\n"
           "Tokenize JSON lines (GPT-2 BPE, a HuggingFace tokenizer.json or a SentencePiece\n"
           "model) into Megatron's indexed dataset (.bin/.idx), byte-identical to\n"
           "Megatron-LM's tools/preprocess_data.py.\n\n", cli.name);
    cli_print_options(&table, 1, 34);
    printf("\nExit status: 0 success, 1 runtime failure (bad input, I/O), 2 bad usage.\n");
}

static void free_inputs(struct config *c)
{
    for (size_t i = 0; i < c->ninputs; i++) free((char *)c->inputs[i]);
    free(c->inputs);
    c->inputs = NULL;
    c->ninputs = 0;
}

static void handle_option(void *ctx, const struct cli_option *o, const char *const *vals, size_t nvals)
{
    struct config *c = ctx;
    const char *val = nvals ? vals[0] : NULL;
    switch (o->id) {
    case O_INPUT:
        GROW(c->inputs, c->incap, c->ninputs + 1);
        c->inputs[c->ninputs++] = val;
        break;
    case O_OUTPUT_PREFIX: c->output_prefix = val; break;
    case O_JSON_KEYS:
        /* argparse nargs='+': a repeated flag replaces the list */
        if (nvals == 0) cli_usage("option '--json-keys' needs at least one key");
        if (nvals > MAX_KEYS) cli_usage("too many --json-keys (at most %d)", MAX_KEYS);
        c->keys_given = 1;
        for (size_t k = 0; k < nvals; k++) c->keys[k] = vals[k];
        c->nkeys = nvals;
        break;
    case O_APPEND_EOD: c->append_eod = 1; break;
    case O_TOKENIZER_TYPE:
        c->tokenizer_type = tok_type_from_name(val);
        if (!c->tokenizer_type)
            cli_usage("tokenizer type '%s' is not supported (GPT2BPETokenizer, HuggingFaceTokenizer, "
                      "SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer)", val);
        break;
    case O_TOKENIZER_MODEL: c->tokenizer_model = val; break;
    case O_VOCAB_FILE: c->vocab_file = val; break;
    case O_MERGE_FILE: c->merge_file = val; break;
    case O_WORKERS: c->workers = (int)cli_opt_u64(o, val, 1, 1024); c->workers_given = 1; break;
    case O_PARTITIONS: (void)cli_opt_u64(o, val, 1, 1 << 20); break;
    case O_LOG_INTERVAL: c->log_interval = cli_opt_u64(o, val, 1, UINT64_MAX >> 1); break;
    case O_DATASET_IMPL:
        if (strcmp(val, "mmap") != 0)
            cli_usage("dataset implementation '%s' is not supported (only mmap)", val);
        break;
    case O_VOCAB_EXTRA_IDS:
        if (cli_opt_u64(o, val, 0, 1 << 20) != 0)
            cli_usage("option '--vocab-extra-ids' other than 0 is not supported");
        break;
    case O_MAKE_VOCAB_DIV: (void)cli_opt_u64(o, val, 1, 1 << 20); break;
    case O_KEEP_SEQUENTIAL: case O_KEEP_NEWLINES: case O_LANG: case O_LEGACY_TOKENIZER: break;
    case O_SKIP_INVALID: c->skip_invalid = 1; break;
    case O_SPECIAL_TOKENS: c->special_tokens = 1; break;
    case O_PRETOKENIZER: c->use_pcre2 = cli_opt_choice(o, val, (const char *const[]){"scan", "pcre2", NULL}); break;
    case O_SKIP_EMPTY: c->skip_empty = 1; break;
    case O_QUIET: if (cli.verbosity > 0) cli.verbosity--; break;
    case O_VERBOSE: cli.verbosity++; break;
    case O_HELP: print_help(); exit(0);
    case O_VERSION: {
        const char *f = mds_input_features();
        printf("%s %s (dataset library %s; compressed inputs: %s; PCRE2 pre-tokenizer: %s; tokenizers: GPT2BPETokenizer, "
               "HuggingFaceTokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer)\n", cli.name,
               MDS_VERSION, ds_version_string(), *f ? f : "none", pretok_have_pcre2() ? "yes" : "no (built without PCRE2)");
        exit(0);
    }
    }
}

/* The CPUs this process may use: its affinity mask (what a launcher or
 * taskset gave it), no more than a Slurm job step's SLURM_CPUS_PER_TASK
 * (which a mask does not show under TaskPlugin=task/none), else the online
 * CPUs.  In [1, 1024]. */
static int default_workers(void)
{
    long n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
    const char *v = getenv("SLURM_CPUS_PER_TASK");
    uint64_t k;
    if (v && cli_parse_u64(v, &k) == 0 && k > 0 && (n <= 0 || k < (uint64_t)n)) n = (long)k;
    return n > 0 ? (int)(n > 1024 ? 1024 : n) : 1;
}

static void parse_args(int argc, char **argv, struct config *c)
{
    c->workers = 0;
    c->log_interval = 1000;
    struct cli_table t = table;
    t.handle = handle_option;
    t.ctx = c;
    struct cli_parse_opts po = { .positional_hint = " (inputs are given with --input)" };
    cli_parse(&t, 1, argc, argv, 1, &po);
    if (!c->ninputs) cli_usage("missing --input");
    if (!c->output_prefix) cli_usage("missing --output-prefix");
    if (!c->tokenizer_type) c->tokenizer_type = TOK_GPT2BPE;
    const char *tname = tok_type_name(c->tokenizer_type);
    if (c->tokenizer_type == TOK_GPT2BPE) {
        if (c->tokenizer_model)
            cli_note("%s: note: --tokenizer-model is not used by GPT2BPETokenizer (nor by Megatron)", cli.name);
    } else {
        if (!c->tokenizer_model) cli_usage("%s needs --tokenizer-model", tname);
        if (c->vocab_file || c->merge_file)
            cli_note("%s: note: --vocab-file and --merge-file are not used by %s (nor by Megatron)", cli.name, tname);
        if (c->special_tokens) cli_usage("option '--special-tokens' is for GPT2BPETokenizer (%s decides its special tokens itself)", tname);
        if (c->use_pcre2 && c->tokenizer_type != TOK_HUGGINGFACE)
            cli_usage("option '--pretokenizer' is for GPT2BPETokenizer and HuggingFaceTokenizer (%s has no pre-tokenizer)", tname);
    }
    if (!c->keys_given) { c->keys[0] = "text"; c->nkeys = 1; }
    for (size_t k = 0; k < c->nkeys; k++)
        for (size_t j = 0; j < k; j++)
            if (strcmp(c->keys[j], c->keys[k]) == 0) cli_usage("key '%s' given twice in --json-keys", c->keys[k]);
    if (c->workers == 0) c->workers = default_workers();
}

/* Megatron's --partitions mode takes --input as a glob pattern; we expand a
 * pattern that names no existing file, sorted (Megatron's glob order is the
 * file system's, which is why docs/cli.md recommends explicit inputs). */
static void expand_inputs(struct config *c)
{
    const char **out = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < c->ninputs; i++) {
        const char *p = c->inputs[i];
        struct stat st;
        if (strcmp(p, "-") != 0 && stat(p, &st) != 0 && strpbrk(p, "*?[")) {
            glob_t g;
            if (glob(p, 0, NULL, &g) == 0) {
                for (size_t k = 0; k < g.gl_pathc; k++) {
                    GROW(out, cap, n + 1);
                    out[n++] = strdup(g.gl_pathv[k]);
                }
                globfree(&g);
                continue;
            }
            cli_die(1, "no input matches '%s'", p);
        }
        GROW(out, cap, n + 1);
        out[n++] = strdup(p);
    }
    for (size_t i = 0; i < n; i++) if (!out[i]) cli_die(1, "out of memory");
    free(c->inputs);
    c->inputs = out;
    c->ninputs = n;
    /* Checked before any output is made, without opening: the reader opens
       each input exactly once, so a named pipe's writer (mkfifo) or a
       process substitution is read once and not cut off by an early close. */
    size_t stdin_count = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(out[i], "-") == 0) { stdin_count++; continue; }
        struct stat st;
        if (stat(out[i], &st) != 0 || access(out[i], R_OK) != 0)
            cli_die(1, "cannot open '%s': %s", out[i], strerror(errno));
        if (S_ISDIR(st.st_mode)) cli_die(1, "cannot open '%s': %s", out[i], strerror(EISDIR));
    }
    if (stdin_count > 1) cli_usage("stdin ('-') given more than once");
}


/* ---- chunks and the pipeline -------------------------------------------- */

struct keyout {
    tok_ids ids;                              /* token ids of all documents */
    uint32_t *seqlen; size_t nseq, seqcap;    /* sequence lengths */
    uint32_t *docseq; size_t docseqcap;       /* per document: sequence count */
};

struct skip_note { uint64_t line; char msg[256]; };

enum chunk_state { CH_EMPTY, CH_FILLED, CH_WORKING, CH_DONE };

struct chunk {
    int state;
    uint64_t seq;                 /* position in the stream of chunks */
    size_t file;                  /* index into config.inputs */
    char *data; size_t len, cap;  /* whole lines */
    int eof_error;                /* the reader failed after this chunk's data */
    int open_error;               /* ... at opening the file (its message names the file) */
    char reader_msg[256];
    uint64_t in_pos, in_size;     /* compressed bytes consumed when cut, file size */
    /* results */
    uint64_t lines, ndocs, blank, skipped;
    uint64_t *doc_chars; size_t doc_chars_cap;   /* cumulative characters per document */
    struct keyout key[MAX_KEYS];
    int error;                    /* a bad line stops the run (no --skip-invalid) */
    uint64_t error_line;          /* line number within the chunk, 1-based */
    char error_msg[256];
    struct skip_note notes[MAX_SKIP_NOTES];
    int nnotes;
};

struct pipeline {
    const struct config *cfg;
    const tok *tok;
    uint32_t eod;
    pthread_mutex_t mu;
    pthread_cond_t cv_reader, cv_worker, cv_writer;
    struct chunk *slots; size_t nslots;
    uint64_t next_fill, next_work, next_write;
    int reader_done;              /* no more chunks after next_fill */
    int stop;                     /* writer gave up: everyone exits */
    /* for the progress bar (reader side, read under mu) */
    uint64_t in_size;             /* size of the file being read, for the first bar */
};

static void chunk_reset(struct chunk *c, size_t nkeys)
{
    c->len = 0;
    c->eof_error = c->open_error = 0;
    c->reader_msg[0] = 0;
    c->lines = c->ndocs = c->blank = c->skipped = 0;
    c->error = 0;
    c->error_line = 0;
    c->error_msg[0] = 0;
    c->nnotes = 0;
    for (size_t k = 0; k < nkeys; k++) c->key[k].ids.n = c->key[k].nseq = 0;
}

/* Offset just past the last line break in buf[from, len), 0 if none.  A
 * line break is '\n', or a '\r' whose next byte is known (a final '\r' may
 * be the first half of "\r\n"), so a chunk never splits a CRLF pair. */
static size_t last_break(const char *buf, size_t len, size_t from)
{
    for (size_t i = len; i > from; i--) {
        char ch = buf[i - 1];
        if (ch == '\n' || (ch == '\r' && i < len)) return i;
    }
    return 0;
}

/* Reader: fill slots in order with whole lines of one file. */
static void *reader_main(void *arg)
{
    struct pipeline *p = arg;
    const struct config *cfg = p->cfg;
    char *carry = NULL;
    size_t carry_len = 0, carry_cap = 0;
    int stop = 0;
    for (size_t f = 0; f < cfg->ninputs && !stop; f++) {
        mds_input *in = NULL;
        char openmsg[256] = "";
        if (mds_input_open(cfg->inputs[f], cfg->workers, &in) != 0) {
            snprintf(openmsg, sizeof openmsg, "%s", in ? mds_input_error(in) : "out of memory");
            mds_input_close(in);
            in = NULL;
        }
        pthread_mutex_lock(&p->mu);
        uint64_t in_size = in ? mds_input_compressed_size(in) : 0;
        p->in_size = in_size;
        pthread_mutex_unlock(&p->mu);
        carry_len = 0;
        int eof = 0;
        while (!eof) {
            pthread_mutex_lock(&p->mu);
            struct chunk *c = &p->slots[p->next_fill % p->nslots];
            while (c->state != CH_EMPTY && !p->stop) pthread_cond_wait(&p->cv_reader, &p->mu);
            if (p->stop) { pthread_mutex_unlock(&p->mu); stop = 1; break; }
            pthread_mutex_unlock(&p->mu);

            chunk_reset(c, cfg->nkeys);
            c->file = f;
            GROW(c->data, c->cap, carry_len + CHUNK_BYTES);
            if (carry_len) memcpy(c->data, carry, carry_len);
            c->len = carry_len;
            carry_len = 0;
            if (!in) {
                c->eof_error = c->open_error = 1;
                snprintf(c->reader_msg, sizeof c->reader_msg, "%s", openmsg);
                eof = 1;
            }
            /* Read until the chunk holds a line break and is half full, or
             * a short read says the source has nothing more for now (a slow
             * pipe), or the input ends.  A line longer than the chunk grows
             * it.  brk is the offset just past the last line break seen; only
             * the new bytes are searched each time, so a long line costs
             * linear time. */
            size_t brk = last_break(c->data, c->len, 0);
            while (in && !eof) {
                if (c->cap - c->len < CHUNK_BYTES / 4) GROW(c->data, c->cap, c->len + CHUNK_BYTES);
                size_t want = c->cap - c->len, before = c->len;
                long long r = mds_input_read(in, c->data + c->len, want);
                if (r < 0) {
                    c->eof_error = 1;
                    snprintf(c->reader_msg, sizeof c->reader_msg, "%s", mds_input_error(in));
                    eof = 1;
                    break;
                }
                if (r == 0) { eof = 1; break; }
                c->len += (size_t)r;
                size_t b = last_break(c->data, c->len, before ? before - 1 : 0);
                if (b) brk = b;
                if (brk && (c->len >= CHUNK_BYTES / 2 || (size_t)r < want)) break;
            }
            /* At a clean end the rest is the last line, even without a line
             * break.  After a read error the unfinished tail is dropped: the
             * error is reported at its line instead. */
            size_t cut = !eof ? brk : c->eof_error ? brk : c->len;
            if (!eof) {
                carry_len = c->len - cut;
                GROW(carry, carry_cap, carry_len);
                if (carry_len) memcpy(carry, c->data + cut, carry_len);
            }
            c->len = cut;
            pthread_mutex_lock(&p->mu);
            c->in_pos = in ? mds_input_compressed_pos(in) : 0;
            c->in_size = in_size;
            c->seq = p->next_fill++;
            c->state = CH_FILLED;
            pthread_cond_broadcast(&p->cv_worker);
            pthread_mutex_unlock(&p->mu);
            if (c->eof_error) {
                /* a broken input ends its file; with --skip-invalid the
                 * writer reports it and the next file follows */
                if (!cfg->skip_invalid) stop = 1;
            }
        }
        mds_input_close(in);
    }
    free(carry);
    pthread_mutex_lock(&p->mu);
    p->reader_done = 1;
    pthread_cond_broadcast(&p->cv_worker);
    pthread_cond_broadcast(&p->cv_writer);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Per-thread tokenizer state. */
struct worker {
    struct pipeline *p;
    tok_state *ts;
    json_doc doc;
};

/* Processes one line; returns 0 or -1 with msg set (the line is then not
 * recorded and every key's buffers are rolled back). */
static int process_line(struct worker *w, struct chunk *c, const char *line, size_t len, char *msg, size_t msgcap)
{
    const struct config *cfg = w->p->cfg;
    size_t mark_tok[MAX_KEYS], mark_seq[MAX_KEYS];
    for (size_t k = 0; k < cfg->nkeys; k++) {
        mark_tok[k] = c->key[k].ids.n;
        mark_seq[k] = c->key[k].nseq;
    }
    int jrc = json_extract(&w->doc, line, len, cfg->keys, cfg->nkeys);
    if (jrc == JSON_ERR_NOMEM) cli_die(1, "out of memory parsing JSON");
    if (jrc != 0) {
        snprintf(msg, msgcap, "%s", w->doc.err);
        return -1;
    }
    for (size_t k = 0; k < cfg->nkeys; k++) {
        struct keyout *ko = &c->key[k];
        int kind = json_doc_kind(&w->doc, k);
        if (kind == JSON_MISSING) { snprintf(msg, msgcap, "missing key '%s'", cfg->keys[k]); goto rollback; }
        if (kind != JSON_STRING && kind != JSON_STRING_ARRAY) {
            snprintf(msg, msgcap, "key '%s' is not a string or a list of strings", cfg->keys[k]);
            goto rollback;
        }
        size_t ns = json_doc_count(&w->doc, k);
        size_t nseq = 0, doc_tokens = 0;
        for (size_t j = 0; j < ns; j++) {
            size_t slen;
            const char *s = json_doc_string(&w->doc, k, j, &slen);
            size_t before = ko->ids.n;
            int trc = tok_encode(w->p->tok, w->ts, (const unsigned char *)s, slen, &ko->ids);
            if (trc == TOK_ERR_NOMEM) cli_die(1, "out of memory tokenizing");
            if (trc) {
                snprintf(msg, msgcap, "key '%s': %s", cfg->keys[k], tok_strerror(trc));
                goto rollback;
            }
            size_t t = ko->ids.n - before;
            if (t == 0) continue;           /* empty sentences are dropped */
            if (t >= INT32_MAX) {
                /* .idx lengths are int32 (and the EOD may add one) */
                snprintf(msg, msgcap, "key '%s': a sequence of %zu tokens does not fit the int32 lengths of .idx", cfg->keys[k], t);
                goto rollback;
            }
            GROW(ko->seqlen, ko->seqcap, ko->nseq + 1);
            ko->seqlen[ko->nseq++] = (uint32_t)t;
            nseq++;
            doc_tokens += t;
        }
        if (nseq > 0 && cfg->append_eod) {
            GROW(ko->ids.ids, ko->ids.cap, ko->ids.n + 1);
            ko->ids.ids[ko->ids.n++] = w->p->eod;
            ko->seqlen[ko->nseq - 1]++;
        }
        GROW(ko->docseq, ko->docseqcap, c->ndocs + 1);
        ko->docseq[c->ndocs] = (uint32_t)nseq;
    }
    return 0;
rollback:
    for (size_t k = 0; k < cfg->nkeys; k++) {
        c->key[k].ids.n = mark_tok[k];
        c->key[k].nseq = mark_seq[k];
    }
    return -1;
}

static void process_chunk(struct worker *w, struct chunk *c)
{
    const struct config *cfg = w->p->cfg;
    const char *s = c->data, *end = c->data + c->len;
    uint64_t chars = 0;
    char msg[256];
    const char *nl = NULL;    /* the next '\n' at or after s, kept across lines */
    int nl_known = 0;
    while (s < end) {
        /* Python universal newlines: \n, \r\n and a lone \r end a line.
         * The '\n' search is remembered, so a chunk of lone-CR lines is
         * still split in linear time. */
        if (!nl_known || (nl && nl < s)) {
            nl = memchr(s, '\n', (size_t)(end - s));
            nl_known = 1;
        }
        const char *stop = nl ? nl : end;
        const char *cr = memchr(s, '\r', (size_t)(stop - s));
        const char *eol, *next;
        if (cr && cr + 1 < stop) { eol = cr; next = cr + 1; }              /* lone CR */
        else if (cr) { eol = cr; next = nl ? nl + 1 : (cr + 1 == end ? end : cr + 1); }   /* CRLF, or CR at the very end */
        else { eol = stop; next = nl ? nl + 1 : end; }
        size_t len = (size_t)(eol - s);
        int terminated = next > eol;
        c->lines++;
        size_t i = 0;
        while (i < len && (s[i] == ' ' || s[i] == '\t')) i++;
        if (i == len) {
            c->blank++;
        } else {
            int bad = 0;
            if (process_line(w, c, s, len, msg, sizeof msg) != 0) bad = 1;
            if (bad) {
                if (!cfg->skip_invalid) {
                    c->error = 1;
                    c->error_line = c->lines;
                    snprintf(c->error_msg, sizeof c->error_msg, "%s", msg);
                    return;
                }
                c->skipped++;
                if (c->nnotes < MAX_SKIP_NOTES) {
                    c->notes[c->nnotes].line = c->lines;
                    snprintf(c->notes[c->nnotes].msg, sizeof c->notes[0].msg, "%s", msg);
                    c->nnotes++;
                }
            } else {
                chars += utf8_count((const unsigned char *)s, len) + (uint64_t)terminated;   /* Python's len(line) */
                GROW(c->doc_chars, c->doc_chars_cap, c->ndocs + 1);
                c->doc_chars[c->ndocs] = chars;
                c->ndocs++;
            }
        }
        s = next;
    }
}

/* The workers run at a lower priority (nice +3 over the process) than the
 * reader (which decodes a single-block .xz itself), the writer and
 * liblzma's decoder threads (a multi-block .xz with --workers > 1).  Those
 * are one thread each; a single-block .xz is one thread's serial decoding,
 * and with as many workers as CPUs the scheduler shared the CPUs equally:
 * the decoder, the critical path, sat runnable but preempted by the workers
 * for 120-160 ms of a 0.8 s run (perf sched, docs/benchmarks.md).  Nice +3 weighs about half a nice-0 thread, so two
 * workers together weigh as much as the decoder and the balancer leaves it
 * a CPU of its own; when the decoder waits or is done, the workers have
 * the CPUs to themselves as before.  Linux keeps the nice value per thread
 * (PRIO_PROCESS 0 is the calling thread there; elsewhere it would be the
 * process, so it is left alone).  A failure is harmless: it only leaves
 * the equal shares. */
#define WORKER_NICE 3

static void worker_yield_to_input(void)
{
#ifdef __linux__
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, 0);
    if (cur == -1 && errno != 0) return;
    (void)setpriority(PRIO_PROCESS, 0, cur + WORKER_NICE);
#endif
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct pipeline *p = w->p;
    worker_yield_to_input();
    for (;;) {
        pthread_mutex_lock(&p->mu);
        struct chunk *c;
        for (;;) {
            if (p->stop) { pthread_mutex_unlock(&p->mu); return NULL; }
            c = &p->slots[p->next_work % p->nslots];
            if (c->state == CH_FILLED && c->seq == p->next_work) break;
            if (p->reader_done && p->next_work == p->next_fill) { pthread_mutex_unlock(&p->mu); return NULL; }
            pthread_cond_wait(&p->cv_worker, &p->mu);
        }
        c->state = CH_WORKING;
        p->next_work++;
        pthread_mutex_unlock(&p->mu);

        process_chunk(w, c);

        pthread_mutex_lock(&p->mu);
        c->state = CH_DONE;
        pthread_cond_broadcast(&p->cv_writer);
        pthread_mutex_unlock(&p->mu);
    }
}

/* ---- progress ----------------------------------------------------------- */

struct progress {
    struct cli_bar bar;
    double start;
    uint64_t docs;
    uint64_t pos, size; /* compressed position of the last chunk written, file size */
    size_t file;        /* its input */
};

static void human_bytes(double b, char *out, size_t cap)
{
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int i = 0;
    while (b >= 1000 && i < 4) b /= 1000, i++;
    snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

/* The live bar: input position, rate and ETA from the compressed position. */
static void bar_draw(struct progress *pg, struct pipeline *p)
{
    if (!cli_bar_due(&pg->bar)) return;
    pthread_mutex_lock(&p->mu);
    uint64_t pos = pg->pos, size = pg->size;
    size_t file = pg->file;
    if (pg->docs == 0 && size == 0) size = p->in_size;   /* nothing written yet */
    pthread_mutex_unlock(&p->mu);
    double el = cli_now() - pg->start;
    char done[32], rate[32], line[256];
    human_bytes((double)pos, done, sizeof done);
    human_bytes(el > 0 ? (double)pos / el : 0, rate, sizeof rate);
    int w = snprintf(line, sizeof line, "[%zu/%zu] %" PRIu64 " docs  %s", file + 1, p->cfg->ninputs, pg->docs, done);
    if (size > 0 && pos <= size) {
        double frac = (double)pos / (double)size;
        int width = 24, fill = (int)(frac * width);
        char b[32];
        for (int i = 0; i < width; i++) b[i] = i < fill ? '#' : '.';
        b[width] = 0;
        double eta = frac > 0 ? el * (1 - frac) / frac : 0;
        snprintf(line + w, sizeof line - (size_t)w, " [%s] %3.0f%%  %s/s  ETA %02d:%02d", b, frac * 100, rate,
                 (int)(eta / 60), (int)fmod(eta, 60));
    } else {
        snprintf(line + w, sizeof line - (size_t)w, "  %s/s", rate);
    }
    cli_bar_draw(&pg->bar, "%s", line);
}

/* Megatron's line: Processed {i} documents ({i/elapsed} docs/s, {mbs} MB/s). */
static void megatron_line(struct progress *pg, uint64_t docs, uint64_t chars)
{
    if (cli.verbosity < 2) return;
    double el = cli_now() - pg->start;
    if (el <= 0) el = 1e-9;
    /* Megatron prints raw floats: Python's repr */
    char a[DS_PY_FLOAT_REPR_MAX], b[DS_PY_FLOAT_REPR_MAX];
    ds_py_float_repr(a, sizeof a, (double)docs / el);
    ds_py_float_repr(b, sizeof b, (double)chars / el / 1024 / 1024);
    cli_bar_clear(&pg->bar);
    fprintf(stderr, "Processed %" PRIu64 " documents (%s docs/s, %s MB/s).\n", docs, a, b);
}

/* ---- main ----------------------------------------------------------------- */

int main(int argc, char **argv)
{
    cli.name = "mdsprep";
    cli.cleanup = cleanup_temps;
    static struct config cfg;
    parse_args(argc, argv, &cfg);
    expand_inputs(&cfg);

    double t0 = cli_now();
    /* The reader starts first: decoding the input (a single-block .xz is
     * one thread's serial work, the critical path) overlaps the loading of
     * the tokenizer instead of waiting for it.  The workers start once the
     * tokenizer is there; until then the reader fills at most the ring. */
    static struct pipeline p;     /* static: a detached reader may outlive main's frame */
    p.cfg = &cfg;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv_reader, NULL);
    pthread_cond_init(&p.cv_worker, NULL);
    pthread_cond_init(&p.cv_writer, NULL);
    p.nslots = (size_t)cfg.workers * 2 + 2;
    p.slots = calloc(p.nslots, sizeof *p.slots);
    if (!p.slots) cli_die(1, "out of memory");
    pthread_t rt;
    if (pthread_create(&rt, NULL, reader_main, &p) != 0) cli_die(1, "cannot start the reader thread");

    char *vocab = NULL, *merges = NULL;
    if (cfg.tokenizer_type == TOK_GPT2BPE) cli_gpt2_files(cfg.vocab_file, cfg.merge_file, 1, &vocab, &merges);
    tok *tk = NULL;
    char err[1024];
    tok_options to = { cfg.tokenizer_type, cfg.tokenizer_model, vocab, merges, cfg.special_tokens, cfg.use_pcre2, 0 };
    int orc = tok_open(&tk, &to, err, sizeof err);
    if (orc) cli_die(orc == TOK_ERR_UNSUPPORTED ? 2 : 1, "%s", err);
    int64_t eod = tok_eod(tk);
    if (eod < 0 && cfg.append_eod)
        cli_die(1, "the tokenizer has no EOD (%s), so --append-eod cannot be used", tok_describe(tk));
    if (cli.verbosity >= 3) cli_note("%s", tok_describe(tk));

    /* One writer per key: PREFIX_{key}_document, Megatron's names. */
    int dtype = ds_dtype_for_vocab(tok_vocab_size(tk));
    ds_writer *writers[MAX_KEYS] = {0};
    char names[MAX_KEYS][PATH_MAX];
    /* Clean up on the usual termination signals, but leave a signal that was
     * ignored when we started (nohup, background jobs) ignored. */
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
    signal(SIGPIPE, SIG_IGN);
    for (size_t k = 0; k < cfg.nkeys; k++) {
        int n = snprintf(names[k], PATH_MAX, "%s_%s_document", cfg.output_prefix, cfg.keys[k]);
        if (n < 0 || n >= PATH_MAX) cli_die(1, "output prefix too long");
        if (ds_writer_open(names[k], dtype, &writers[k]) != 0)
            cli_die(1, "%s", writers[k] ? ds_writer_error(writers[k]) : "out of memory");
        register_temps(writers[k]);
    }
    if (cli.verbosity >= 3) {
        for (size_t i = 0; i < cfg.ninputs; i++) fprintf(stderr, "Opening %s\n", cfg.inputs[i]);
        fprintf(stderr, "Time to startup: %.3f\n", cli_now() - t0);
        fprintf(stderr, "%s: %d worker%s%s\n", cli.name, cfg.workers, cfg.workers == 1 ? "" : "s",
                cfg.workers_given ? "" : " (the CPUs this process may use; --workers N sets them)");
    }

    p.tok = tk;
    p.eod = eod < 0 ? 0 : (uint32_t)eod;

    int nw = cfg.workers;
    struct worker *ws = calloc((size_t)nw, sizeof *ws);
    pthread_t *tids = calloc((size_t)nw, sizeof *tids);
    if (!ws || !tids) cli_die(1, "out of memory");
    for (int i = 0; i < nw; i++) {
        ws[i].p = &p;
        json_doc_init(&ws[i].doc);
        if (tok_state_new(tk, &ws[i].ts) != 0) cli_die(1, "out of memory");
    }
    struct progress pg = {0};
    pg.start = cli_now();
    cli_bar_init(&pg.bar, 1, 0.0);

    for (int i = 0; i < nw; i++)
        if (pthread_create(&tids[i], NULL, worker_main, &ws[i]) != 0) cli_die(1, "cannot start worker threads");

    /* The writer: chunks in order. */
    uint64_t total_docs = 0, total_chars = 0, total_bytes = 0, blank = 0, skipped = 0, lines_before = 0;
    uint64_t bytes_in = 0, file_in = 0;   /* input bytes read: earlier files, this file so far */
    uint64_t next_log = cfg.log_interval;
    size_t cur_file = 0;
    int failed = 0;
    char fail_msg[1024] = "";
    for (;;) {
        pthread_mutex_lock(&p.mu);
        struct chunk *c = &p.slots[p.next_write % p.nslots];
        while (!(c->state == CH_DONE && c->seq == p.next_write) &&
               !(p.reader_done && p.next_write == p.next_fill)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 150000000;
            if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
            pthread_cond_timedwait(&p.cv_writer, &p.mu, &ts);
            if (pg.bar.enabled) { pthread_mutex_unlock(&p.mu); bar_draw(&pg, &p); pthread_mutex_lock(&p.mu); }
        }
        if (!(c->state == CH_DONE && c->seq == p.next_write)) { pthread_mutex_unlock(&p.mu); break; }
        pthread_mutex_unlock(&p.mu);

        if (c->file != cur_file) { cur_file = c->file; lines_before = 0; bytes_in += file_in; }
        file_in = c->in_pos;
        const char *fname = strcmp(cfg.inputs[c->file], "-") == 0 ? "<stdin>" : cfg.inputs[c->file];
        for (int i = 0; i < c->nnotes && cli.verbosity >= 3; i++) {
            cli_bar_clear(&pg.bar);
            cli_error("%s:%" PRIu64 ": skipped: %s", fname, lines_before + c->notes[i].line, c->notes[i].msg);
        }
        if (cli.verbosity >= 3 && c->skipped > (uint64_t)c->nnotes)
            cli_error("%s: %" PRIu64 " more skipped lines up to line %" PRIu64 " not shown", fname,
                   c->skipped - (uint64_t)c->nnotes, lines_before + c->lines);
        /* documents of this chunk, in order */
        size_t toff[MAX_KEYS] = {0}, soff[MAX_KEYS] = {0};
        for (uint64_t d = 0; d < c->ndocs && !failed; d++) {
            for (size_t k = 0; k < cfg.nkeys; k++) {
                struct keyout *ko = &c->key[k];
                uint32_t ns = ko->docseq[d];
                size_t ntok = 0;
                for (uint32_t j = 0; j < ns; j++) ntok += ko->seqlen[soff[k] + j];
                if (!(ns == 0 && cfg.skip_empty)) {
                    if (ds_writer_add_document(writers[k], ko->ids.ids + toff[k], ntok, ko->seqlen + soff[k], ns) != 0) {
                        snprintf(fail_msg, sizeof fail_msg, "%s", ds_writer_error(writers[k]));
                        failed = 1;
                        break;
                    }
                }
                toff[k] += ntok;
                soff[k] += ns;
            }
            total_docs++;
            if (total_docs == next_log) {
                megatron_line(&pg, total_docs, total_chars + c->doc_chars[d]);
                next_log += cfg.log_interval;
            }
        }
        if (c->ndocs) total_chars += c->doc_chars[c->ndocs - 1];
        blank += c->blank;
        total_bytes += c->len;
        skipped += c->skipped;
        if (!failed && c->error) {
            snprintf(fail_msg, sizeof fail_msg, "%s:%" PRIu64 ": %s", fname, lines_before + c->error_line, c->error_msg);
            failed = 1;
        }
        lines_before += c->lines;
        if (!failed && c->eof_error) {
            /* where: the line after the last complete one, unless the file
               could not be opened at all (the message names it) */
            char where[PATH_MAX + 32] = "";
            if (!c->open_error)
                snprintf(where, sizeof where, "%s:%" PRIu64 ": ", fname, lines_before + 1);
            if (cfg.skip_invalid) {
                skipped++;
                cli_bar_clear(&pg.bar);
                cli_error("%s%s; the rest of this input is skipped", where, c->reader_msg);
            } else {
                snprintf(fail_msg, sizeof fail_msg, "%s%s", where, c->reader_msg);
                failed = 1;
            }
        }
        pthread_mutex_lock(&p.mu);
        pg.pos = c->in_pos;
        pg.size = c->in_size;
        pg.file = c->file;
        c->state = CH_EMPTY;
        p.next_write++;
        if (failed) {
            p.stop = 1;
            pthread_cond_broadcast(&p.cv_worker);
        }
        pthread_cond_broadcast(&p.cv_reader);
        pthread_mutex_unlock(&p.mu);
        pg.docs = total_docs;
        bar_draw(&pg, &p);
        if (failed) break;
    }
    /* After a failure the reader may be blocked reading a pipe that never
     * ends; it is not waited for (nor its slots freed): the process exits. */
    if (!failed) pthread_join(rt, NULL);
    else pthread_detach(rt);
    for (int i = 0; i < nw; i++) pthread_join(tids[i], NULL);
    cli_bar_clear(&pg.bar);

    /* All keys or none: every dataset is completed under its temporary name
     * before the first is renamed into place. */
    for (size_t k = 0; k < cfg.nkeys && !failed; k++) {
        if (ds_writer_prepare(writers[k]) != 0) {
            snprintf(fail_msg, sizeof fail_msg, "%s", ds_writer_error(writers[k]));
            failed = 1;
        }
    }
    for (size_t k = 0; k < cfg.nkeys && !failed; k++) {
        if (ds_writer_commit(writers[k]) != 0) {
            snprintf(fail_msg, sizeof fail_msg, "%s", ds_writer_error(writers[k]));
            failed = 1;
        }
    }
    double el = cli_now() - pg.start;
    if (failed) {
        cli_error("%s", fail_msg);
    } else if (cli.verbosity >= 2) {
        bytes_in += file_in;   /* the bytes read, so pipes and stdin count too */
        for (size_t k = 0; k < cfg.nkeys; k++) {
            fprintf(stderr, "%s: %s_%s_document: %" PRIu64 " documents, %" PRIu64 " sequences, %" PRIu64 " tokens (%s)\n",
                    cli.name, cfg.output_prefix, cfg.keys[k], ds_writer_num_documents(writers[k]),
                    ds_writer_num_sequences(writers[k]), ds_writer_num_tokens(writers[k]), ds_dtype_name(dtype));
        }
        char inb[32], jb[32];
        human_bytes((double)bytes_in, inb, sizeof inb);
        human_bytes((double)total_bytes, jb, sizeof jb);
        fprintf(stderr, "%s: %" PRIu64 " documents, %s in (%s of JSON), %.2f s, %.1f MB/s, %" PRIu64 " blank lines, %" PRIu64 " skipped\n",
                cli.name, total_docs, inb, jb, el, el > 0 ? (double)total_bytes / el / 1e6 : 0.0, blank, skipped);
    }
    /* Unfinalized writers (on failure) remove their temporaries here. */
    for (size_t k = 0; k < cfg.nkeys; k++) ds_writer_free(writers[k]);
    ntemps = 0;
    for (int i = 0; i < nw; i++) {
        json_doc_release(&ws[i].doc);
        tok_state_free(ws[i].ts);
    }
    for (size_t i = 0; i < p.nslots && !failed; i++) {
        free(p.slots[i].data);
        free(p.slots[i].doc_chars);
        for (size_t k = 0; k < MAX_KEYS; k++) {
            free(p.slots[i].key[k].ids.ids);
            free(p.slots[i].key[k].seqlen);
            free(p.slots[i].key[k].docseq);
        }
    }
    if (!failed) free(p.slots);
    free(ws);
    free(tids);
    tok_free(tk);
    free(vocab);
    free(merges);
    free_inputs(&cfg);
    return failed ? 1 : 0;
}
