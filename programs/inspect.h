/*
 * inspect.h - what the mdsinspect commands share (program-side, private to
 * programs/mdsinspect.c and programs/inspect_*.c): the parsed arguments, the
 * command descriptor and the helpers every command uses.  Each command
 * lives in its own file with its option table.
 */
#ifndef MDS_INSPECT_H
#define MDS_INSPECT_H

#include "cli.h"
#include "dataflags.h"
#include "tokenizer.h"
#include "dataset.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef unsigned long long ull;
typedef long long sll;

#define GPT2_EOD 50256

/* Option ids of every command (one handler fills struct args). */
enum opt_id {
    O_HELP = 1, O_JSON, O_DOC, O_SEQ, O_RANGE, O_IDS, O_TEXT, O_VOCAB_FILE, O_MERGE_FILE,
    O_TOP, O_EOD, O_THREADS, O_QUIET, O_INPUT, O_OUTPUT_PREFIX, O_CONTEXT,
    O_SEQ_LENGTH, O_SEED, O_TRAIN_SAMPLES, O_TRAIN_ITERS, O_GBS,
    O_EVAL_ITERS, O_EVAL_INTERVAL, O_SKIP_TRAIN, O_VALID_SAMPLES, O_TEST_SAMPLES, O_SHOW,
    O_SHOW_SPLIT, O_CACHE, O_MEGATRON_VERSION, O_TOKENIZER_IDS, O_VOCAB_SIZE,
    O_EOD_MASK_LOSS, O_RESET_POSITION_IDS, O_RESET_ATTENTION_MASK, O_SHOW_MASKS,
    O_TOKENIZER_TYPE, O_TOKENIZER_MODEL
};

/* Rows several commands share. */
#define OPT_HELP {"help", 'h', CLI_ARG_NONE, O_HELP, NULL, "show this help and exit"}
#define OPT_VOCAB \
    {"tokenizer-type", 0, CLI_ARG_ONE, O_TOKENIZER_TYPE, "TYPE", "the tokenizer of the token text: GPT2BPETokenizer (default), HuggingFaceTokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer"}, \
    {"tokenizer-model", 0, CLI_ARG_ONE, O_TOKENIZER_MODEL, "PATH", "HuggingFace directory or tokenizer.json, or SentencePiece .model (the non-GPT-2 types)"}, \
    {"vocab-file", 0, CLI_ARG_ONE, O_VOCAB_FILE, "PATH", "GPT-2 vocab JSON (default: the bundled gpt2-vocab.json)"}, \
    {"merge-file", 0, CLI_ARG_ONE, O_MERGE_FILE, "PATH", "GPT-2 merges (default: the bundled gpt2-merges.txt)"}
#define NOPTS(t) (sizeof t / sizeof t[0])

struct args {
    const char **pos;          /* positional arguments, then --input values (merge) */
    size_t npos, poscap;
    int json, quiet, ids, text;
    int have_doc, have_seq, have_range, range_lo_set, range_hi_set;
    uint64_t doc, seq, range_lo, range_hi;
    const char *vocab_file, *merge_file, *output;
    int tokenizer_type;        /* enum tok_type, 0: GPT-2 */
    const char *tokenizer_model;
    int eod_given;             /* --eod was given (else: the tokenizer's EOD when one is named) */
    uint64_t top, eod, threads, context;
    /* samples */
    struct data_flags data;    /* --data-path, --split, per-split paths, cache, mock */
    const char *show_split;
    uint64_t seq_length, seed, train_samples, train_iters, gbs, eval_iters, eval_interval;
    uint64_t valid_samples, test_samples, show;
    int have_valid, have_test, have_show, skip_train, megatron_version, tokenizer_ids;
    int eod_mask_loss, reset_position_ids, reset_attention_mask, show_masks;
    uint64_t vocab_size;
};

struct command {
    const char *name;
    const char *synopsis;      /* after "mdsinspect NAME " */
    const char *summary;       /* one line, for the command list */
    const char *details;       /* paragraph printed by --help */
    const struct cli_option *opts;
    size_t nopts;
    int data_flags;            /* also takes Megatron's data flags (dataflags.h) */
    size_t min_pos, max_pos;   /* positional arguments allowed */
    int (*run)(struct args *a);   /* the exit status */
};

extern const struct command inspect_info, inspect_verify, inspect_dump, inspect_stats, inspect_merge,
    inspect_diff, inspect_samples;

/* ---- helpers (mdsinspect.c) ---- */

/* "x.idx" or "x.bin" names the dataset x, unless "x.idx.idx" exists.
 * Returns a malloc'ed prefix. */
char *inspect_prefix(const char *arg);
/* Opens a dataset; on failure prints the reader's message (it names the
 * file) and returns NULL. */
ds_reader *inspect_open(const char *prefix);
/* The same, exit 1 on failure. */
ds_reader *inspect_open_or_die(const char *prefix);
/* Sequence i, or exit 1 when its pointer lies outside the .bin (open does
 * not check pointers; verify does). */
const uint8_t *inspect_sequence(const ds_reader *r, const char *prefix, uint64_t i, uint64_t *len);
/* One token of any reader dtype widened to int64. */
int64_t inspect_token(const uint8_t *p, int dtype);
/* A JSON string of n bytes, made valid UTF-8 first (errors='replace'). */
void json_string(FILE *f, const char *s, size_t n);
void json_cstr(FILE *f, const char *s);
/* The tokenizer named by --tokenizer-type/--tokenizer-model (default: GPT-2
 * with --vocab-file/--merge-file or the bundled files); required: a missing
 * default vocabulary is an error, otherwise it means "no token text" (NULL).
 * A tokenizer file that cannot be loaded is exit 1 (2 for an unsupported feature). */
tok *inspect_vocab(const struct args *a, int required);
/* The text of ids[0..n) as the tokenizer decodes it, made valid UTF-8
 * (errors='replace') into *out (*outcap grows); returns its length, or
 * exit 1 naming `what` and the position of an id outside the vocabulary. */
size_t inspect_decode(const tok *t, const int64_t *ids, size_t n, char **out, size_t *outcap, const char *what);
/* Registers the writer's temporary files for removal on error and signals. */
void inspect_register_temps(ds_writer *w);
/* Forgets them (the writer renamed or removed them). */
void inspect_forget_temps(void);

/* Counts and sequence-length summary of a dataset (reads the .idx only). */
struct summary {
    uint64_t empty_docs, empty_seqs, min_len, max_len;
    double mean_len;
};
void inspect_summarize(const ds_reader *r, struct summary *s);

#endif /* MDS_INSPECT_H */
