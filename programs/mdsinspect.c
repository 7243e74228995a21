/*
 * mdsinspect.c - mdsinspect: look inside, check, compare and merge Megatron
 * indexed datasets (PREFIX.bin + PREFIX.idx, the MMIDIDX format), and show
 * Megatron's GPT training samples.  One command per file:
 *
 *   info PREFIX...      header counts and a sequence-length summary (reads
 *                       only the .idx)                      inspect_info.c
 *   verify PREFIX...    ds_reader_open's checks plus ds_reader_verify's
 *   dump PREFIX ...     token ids or GPT-2 text of documents or sequences
 *                                                          inspect_dump.c
 *   stats PREFIX        histogram, EOD count, most frequent tokens (OpenMP)
 *                                                          inspect_stats.c
 *   merge ...           Megatron's tools/merge_datasets.py, same bytes
 *                                                          inspect_merge.c
 *   diff A B            the first difference between two datasets
 *                                                          inspect_diff.c
 *   samples ...         Megatron's GPT training-sample plan (GPTDataset /
 *                       BlendedDataset indices), one sample, the .npy cache
 *                                                          inspect_samples.c
 *
 * This file holds main, the option handler every command shares and the
 * helpers of inspect.h.  The commands are thin CLIs over dataset.h (every
 * byte of the format is read and written there) and bpe.h (token bytes for
 * --text).  What they deliberately do not do: parse or write the format
 * themselves, load whole files into memory (everything goes through the
 * reader's mappings), or guess: a file the reader refuses is reported with
 * the reader's message and exit status 1.
 *
 * Exit status: 0 success, 1 runtime failure (for diff: also "different"),
 * 2 bad usage.  Primary output goes to stdout; errors, the merge summary and
 * the stats progress bar go to stderr.
 */
#include "inspect.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct command *const commands[] = {
    &inspect_info, &inspect_verify, &inspect_dump, &inspect_stats, &inspect_merge, &inspect_diff, &inspect_samples,
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

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

void inspect_register_temps(ds_writer *w)
{
    size_t nt = 0;
    const char *const *tp = ds_writer_temp_paths(w, &nt);
    for (size_t i = 0; i < nt && i < MAX_TEMPS; i++) {
        snprintf(temp_paths[i], sizeof temp_paths[i], "%s", tp[i]);
        ntemps = (sig_atomic_t)(i + 1);
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
}

void inspect_forget_temps(void) { ntemps = 0; }

/* ---- options: one handler for every command's table ---------------------- */

static void print_main_help(void)
{
    printf("usage: %s COMMAND [options] ARGS...\n\n"
           "Inspect, check, compare and merge Megatron indexed datasets (PREFIX.bin +\n"
           "PREFIX.idx).  A PREFIX may also be given as PREFIX.idx or PREFIX.bin.\n\n"
           "commands:\n", cli.name);
    for (size_t i = 0; i < NCOMMANDS; i++)
        printf("  %-8s %s\n", commands[i]->name, commands[i]->summary);
    printf("\n'%s COMMAND --help' lists a command's options.  %s --version prints the version.\n"
           "Exit status: 0 success, 1 runtime failure (diff: also \"different\"), 2 bad usage.\n", cli.name, cli.name);
}

static size_t command_tables(const struct command *cmd, struct args *a, struct cli_table *t);

static void print_help(const struct command *cmd)
{
    struct args dummy;
    struct cli_table t[2];
    size_t nt = command_tables(cmd, &dummy, t);
    printf("usage: %s %s %s\n\n%s\n\n", cli.name, cmd->name, cmd->synopsis, cmd->details);
    if (nt == 1)
        printf("options:\n");
    else
        t[0].title = "options";
    cli_print_options(t, nt, 28);
    data_flags_release(&dummy.data);
}

/* "A:B", "A:", ":B" or ":" (a Python slice without step or negatives). */
static void parse_range(const char *v, struct args *a)
{
    const char *colon = strchr(v, ':');
    if (!colon)
        cli_usage("option '--range' needs A:B, got '%s'", v);
    char lo[32], hi[32];
    size_t nlo = (size_t)(colon - v), nhi = strlen(colon + 1);
    if (nlo >= sizeof lo || nhi >= sizeof hi)
        cli_usage("option '--range' needs A:B with integers, got '%s'", v);
    memcpy(lo, v, nlo);
    lo[nlo] = 0;
    memcpy(hi, colon + 1, nhi + 1);
    if ((nlo && cli_parse_u64(lo, &a->range_lo) != 0) || (nhi && cli_parse_u64(hi, &a->range_hi) != 0))
        cli_usage("option '--range' needs A:B with non-negative integers, got '%s'", v);
    a->range_lo_set = nlo > 0;
    a->range_hi_set = nhi > 0;
}

static const struct command *current;

static void add_pos(void *ctx, const char *s)
{
    struct args *a = ctx;
    GROW(a->pos, a->poscap, a->npos + 1);
    a->pos[a->npos++] = s;
}

static void handle_option(void *ctx, const struct cli_option *o, const char *const *vals, size_t nvals)
{
    struct args *a = ctx;
    const char *val = nvals ? vals[0] : NULL;
    switch (o->id) {
    case O_HELP: print_help(current); exit(0);
    case O_JSON: a->json = 1; break;
    case O_QUIET: a->quiet = 1; break;
    case O_IDS: a->ids = 1; break;
    case O_TEXT: a->text = 1; break;
    case O_DOC: a->doc = cli_opt_u64(o, val, 0, UINT64_MAX); a->have_doc = 1; break;
    case O_SEQ: a->seq = cli_opt_u64(o, val, 0, UINT64_MAX); a->have_seq = 1; break;
    case O_RANGE: parse_range(val, a); a->have_range = 1; break;
    case O_VOCAB_FILE: a->vocab_file = val; break;
    case O_TOKENIZER_TYPE:
        a->tokenizer_type = tok_type_from_name(val);
        if (!a->tokenizer_type)
            cli_usage("tokenizer type '%s' is not supported (GPT2BPETokenizer, HuggingFaceTokenizer, "
                      "SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer)", val);
        break;
    case O_TOKENIZER_MODEL: a->tokenizer_model = val; break;
    case O_MERGE_FILE: a->merge_file = val; break;
    case O_TOP: a->top = cli_opt_u64(o, val, 0, 1u << 20); break;
    case O_EOD: a->eod = cli_opt_u64(o, val, 0, INT64_MAX); a->eod_given = 1; break;
    case O_THREADS: a->threads = cli_opt_u64(o, val, 1, 1024); break;
    case O_CONTEXT: a->context = cli_opt_u64(o, val, 0, 1u << 16); break;
    case O_OUTPUT_PREFIX: a->output = val; break;
    case O_SEQ_LENGTH: a->seq_length = cli_opt_u64(o, val, 2, INT32_MAX / 2); break;
    case O_SEED: a->seed = cli_opt_u64(o, val, 0, UINT32_MAX); break;
    case O_TRAIN_SAMPLES: a->train_samples = cli_opt_u64(o, val, 1, INT64_MAX); break;
    case O_TRAIN_ITERS: a->train_iters = cli_opt_u64(o, val, 0, INT64_MAX); break;
    case O_GBS: a->gbs = cli_opt_u64(o, val, 1, INT64_MAX); break;
    case O_EVAL_ITERS: a->eval_iters = cli_opt_u64(o, val, 0, INT64_MAX); break;
    case O_EVAL_INTERVAL: a->eval_interval = cli_opt_u64(o, val, 1, INT64_MAX); break;
    case O_SKIP_TRAIN: a->skip_train = 1; break;
    case O_VALID_SAMPLES: a->valid_samples = cli_opt_u64(o, val, 0, INT64_MAX); a->have_valid = 1; break;
    case O_TEST_SAMPLES: a->test_samples = cli_opt_u64(o, val, 0, INT64_MAX); a->have_test = 1; break;
    case O_SHOW: a->show = cli_opt_u64(o, val, 0, UINT64_MAX); a->have_show = 1; break;
    case O_SHOW_SPLIT: a->show_split = val; break;
    case O_VOCAB_SIZE: a->vocab_size = cli_opt_u64(o, val, 1, INT64_MAX); break;
    case O_SHOW_MASKS: a->show_masks = 1; break;
    case O_EOD_MASK_LOSS: a->eod_mask_loss = 1; break;
    case O_RESET_POSITION_IDS: a->reset_position_ids = 1; break;
    case O_RESET_ATTENTION_MASK: a->reset_attention_mask = 1; break;
    case O_CACHE: a->data.cache = val; break;
    case O_MEGATRON_VERSION:
        a->megatron_version = cli_opt_choice(o, val, (const char *const[]){"main", "0.8", NULL}) ? DS_MEGATRON_0_8
                                                                                                 : DS_MEGATRON_MAIN;
        break;
    case O_TOKENIZER_IDS:
        a->tokenizer_ids = cli_opt_choice(o, val, (const char *const[]){"legacy", "main", NULL})
                               ? DS_TOKENIZER_IDS_MAIN : DS_TOKENIZER_IDS_LEGACY;
        break;
    case O_INPUT:   /* merge: --input A B... are positional datasets */
        if (nvals == 0)
            cli_usage("option '--%s' needs at least one path", o->lng);
        for (size_t i = 0; i < nvals; i++)
            add_pos(a, vals[i]);
        break;
    }
}

/* The command's own table, then Megatron's data flags when it takes them. */
static size_t command_tables(const struct command *cmd, struct args *a, struct cli_table *t)
{
    t[0] = (struct cli_table){ NULL, cmd->opts, cmd->nopts, handle_option, a };
    if (!cmd->data_flags) {
        memset(&a->data, 0, sizeof a->data);
        return 1;
    }
    t[1] = data_flags_table(&a->data);
    return 2;
}

/* ---- helpers shared by the commands (inspect.h) ---------------------------- */

/* "x.idx" or "x.bin" names the dataset x, unless "x.idx.idx" exists. */
char *inspect_prefix(const char *arg)
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
ds_reader *inspect_open(const char *prefix)
{
    ds_reader *r = NULL;
    int rc = ds_reader_open(prefix, &r);
    if (rc == 0)
        return r;
    cli_error("%s", r ? ds_reader_error(r) : ds_strerror(rc));
    ds_reader_close(r);
    return NULL;
}

ds_reader *inspect_open_or_die(const char *prefix)
{
    ds_reader *r = inspect_open(prefix);
    if (!r)
        exit(1);
    return r;
}

/* One token widened to int64 (ds_decode_tokens: float64 truncated toward
   zero, NaN or out of range INT64_MIN). */
int64_t inspect_token(const uint8_t *p, int dtype)
{
    int64_t v;
    ds_decode_tokens(&v, p, 1, dtype);
    return v;
}

/* Sequence i, or exit 1 when its pointer lies outside the .bin (open does not
   check pointers; verify does). */
const uint8_t *inspect_sequence(const ds_reader *r, const char *prefix, uint64_t i, uint64_t *len)
{
    const void *data;
    if (ds_reader_sequence(r, i, &data, len) != 0)
        cli_die(1, "'%s.idx': sequence_pointers[%llu] lies outside the .bin (see 'mdsinspect verify')",
            prefix, (ull)i);
    return data;
}

/* JSON string: the bytes are first made valid UTF-8 (errors='replace'). */
void json_string(FILE *f, const char *s, size_t n)
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

void json_cstr(FILE *f, const char *s) { json_string(f, s, strlen(s)); }


tok *inspect_vocab(const struct args *a, int required)
{
    int type = a->tokenizer_type ? a->tokenizer_type : TOK_GPT2BPE;
    char *vocab = NULL, *merges = NULL;
    if (type == TOK_GPT2BPE) {
        cli_gpt2_files(a->vocab_file, a->merge_file, required, &vocab, &merges);
        if (!vocab) return NULL;
    } else if (!a->tokenizer_model) {
        cli_usage("%s needs --tokenizer-model", tok_type_name(type));
    }
    tok *t = NULL;
    char err[1024];
    tok_options o = { type, a->tokenizer_model, vocab, merges, 0, 0, 0 };
    int rc = tok_open(&t, &o, err, sizeof err);
    free(vocab);
    free(merges);
    if (rc) cli_die(rc == TOK_ERR_UNSUPPORTED ? 2 : 1, "%s", err);
    return t;
}

size_t inspect_decode(const tok *t, const int64_t *ids, size_t n, char **out, size_t *outcap, const char *what)
{
    uint32_t *u = mallocCheck((n ? n : 1) * sizeof *u);
    for (size_t k = 0; k < n; k++) {
        size_t tl;
        if (ids[k] < 0 || ids[k] > UINT32_MAX || !tok_token_bytes(t, (uint32_t)ids[k], &tl))
            cli_die(1, "%s: token %lld at position %zu is not in the vocabulary (%zu tokens)", what, (long long)ids[k], k,
                    tok_vocab_size(t));
        u[k] = (uint32_t)ids[k];
    }
    unsigned char *raw = NULL;
    size_t len = 0, cap = 0, bad = 0;
    int rc = tok_decode(t, u, n, &raw, &len, &cap, &bad);
    if (rc == TOK_ERR_NOMEM) cli_die(1, "out of memory decoding %s", what);
    if (rc)
        cli_die(1, "%s: token %lld at position %zu is not in the vocabulary (%zu tokens)", what, (long long)ids[bad], bad,
                tok_vocab_size(t));
    size_t need = ds_utf8_replace_bound(len);
    GROW(*out, *outcap, need ? need : 1);
    size_t m = ds_utf8_replace(*out, *outcap, raw, len);
    free(raw);
    free(u);
    return m;
}

/* O(N + D) over the .idx only. */
void inspect_summarize(const ds_reader *r, struct summary *s)
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

/* ---- main ---------------------------------------------------------------- */

int main(int argc, char **argv)
{
    cli.name = "mdsinspect";
    cli.cleanup = cleanup_temps;
    if (argc < 2)
        cli_usage("missing command (info, verify, dump, stats, merge, diff or samples)");
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
        print_main_help();
        return 0;
    }
    if (strcmp(name, "-V") == 0 || strcmp(name, "--version") == 0) {
        printf("%s %s (dataset library %s)\n", cli.name, MDS_VERSION, ds_version_string());
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
        if (strcmp(commands[i]->name, name) == 0)
            cmd = commands[i];
    if (!cmd)
        cli_usage("unknown command '%s'", name);
    current = cmd;
    cli.command = cmd->name;
    if (help) {
        print_help(cmd);
        return 0;
    }
    struct args a = { .top = 10, .eod = GPT2_EOD, .context = 8, .seed = 1234, .gbs = 1,
                      .eval_iters = 100, .eval_interval = 1000 };
    struct cli_table t[2];
    size_t nt = command_tables(cmd, &a, t);
    struct cli_parse_opts po = { .positional = add_pos, .ctx = &a };
    cli_parse(t, nt, argc, argv, 2, &po);
    if (a.npos < cmd->min_pos || a.npos > cmd->max_pos) {
        if (cmd->max_pos == 0)
            cli_usage("'%s' takes no positional arguments, got '%s'", cmd->name, a.pos[0]);
        if (cmd->min_pos == cmd->max_pos)
            cli_usage("'%s' takes %zu dataset%s, got %zu", cmd->name, cmd->min_pos,
                      cmd->min_pos == 1 ? "" : "s", a.npos);
        cli_usage("'%s' needs at least %zu dataset%s", cmd->name, cmd->min_pos, cmd->min_pos == 1 ? "" : "s");
    }
    int rc = cmd->run(&a);
    free(a.pos);
    data_flags_release(&a.data);
    return rc;
}
