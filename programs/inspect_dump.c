/*
 * inspect_dump.c - `mdsinspect dump`: the token ids or GPT-2 text of
 * documents, sequences or a range of documents.
 */
#include "inspect.h"

#include <stdlib.h>
#include <string.h>

static const struct cli_option dump_opts[] = {
    {"doc", 'd', CLI_ARG_ONE, O_DOC, "N", "document N (0-based)"},
    {"seq", 's', CLI_ARG_ONE, O_SEQ, "N", "sequence N (0-based)"},
    {"range", 'r', CLI_ARG_ONE, O_RANGE, "A:B", "documents A to B-1, as a Python slice (A or B may be omitted)"},
    {"ids", 0, CLI_ARG_NONE, O_IDS, NULL, "token ids, one line per sequence (the default)"},
    {"text", 't', CLI_ARG_NONE, O_TEXT, NULL, "the tokenizer's text (GPT-2 by default), a newline after each sequence, invalid UTF-8 as U+FFFD (Python's errors='replace')"},
    {"json", 0, CLI_ARG_NONE, O_JSON, NULL, "one JSON object per document: {\"document\", \"first_sequence\", \"ids\" or \"text\"}"},
    OPT_VOCAB,
    OPT_HELP,
};

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
    tok *tok;
    int64_t *ids; size_t idcap;
    char *text; size_t textcap;
};

/* Decodes one sequence into d->text; returns its length. */
static size_t decode_sequence(struct dumper *d, uint64_t s, const uint8_t *p, uint64_t len)
{
    int dt = ds_reader_dtype(d->r);
    size_t isz = ds_dtype_size(dt);
    GROW(d->ids, d->idcap, len + 1);
    for (uint64_t k = 0; k < len; k++)
        d->ids[k] = inspect_token(p + k * isz, dt);
    char what[600];
    snprintf(what, sizeof what, "'%s': sequence %llu", d->prefix, (ull)s);
    return inspect_decode(d->tok, d->ids, (size_t)len, &d->text, &d->textcap, what);
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
        const uint8_t *p = inspect_sequence(d->r, d->prefix, s, &len);
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
                printf(k ? (a->json ? ",%lld" : " %lld") : "%lld", (sll)inspect_token(p + k * isz, dt));
            putchar(a->json ? ']' : '\n');
        }
    }
    if (a->json)
        printf("]}\n");
}

static int run_dump(struct args *a)
{
    if (a->have_doc + a->have_seq + a->have_range != 1)
        cli_usage("'dump' needs exactly one of --doc, --seq and --range");
    if (a->ids && a->text)
        cli_usage("options '--ids' and '--text' exclude each other");
    char *prefix = inspect_prefix(a->pos[0]);
    ds_reader *r = inspect_open_or_die(prefix);
    struct dumper d = { .a = a, .prefix = prefix, .r = r };
    if (a->text)
        d.tok = inspect_vocab(a, 1);
    uint64_t ndoc = ds_reader_num_documents(r), nseq = ds_reader_num_sequences(r);
    if (a->have_doc) {
        if (a->doc >= ndoc)
            cli_die(1, "'%s': no document %llu (it has %llu)", prefix, (ull)a->doc, (ull)ndoc);
        dump_sequences(&d, a->doc, ds_reader_doc_index(r, a->doc), ds_reader_doc_index(r, a->doc + 1), 0);
    } else if (a->have_seq) {
        if (a->seq >= nseq)
            cli_die(1, "'%s': no sequence %llu (it has %llu)", prefix, (ull)a->seq, (ull)nseq);
        dump_sequences(&d, document_of(r, a->seq), a->seq, a->seq + 1, 0);
    } else {
        uint64_t lo = a->range_lo_set ? a->range_lo : 0, hi = a->range_hi_set ? a->range_hi : ndoc;
        if (hi > ndoc) hi = ndoc;   /* Python slices clamp */
        for (uint64_t k = lo; k < hi; k++)
            dump_sequences(&d, k, ds_reader_doc_index(r, k), ds_reader_doc_index(r, k + 1), 1);
    }
    cli_check_stdout();
    free(d.ids);
    free(d.text);
    tok_free(d.tok);
    ds_reader_close(r);
    free(prefix);
    return 0;
}

const struct command inspect_dump = {
    "dump", "PREFIX (--doc N | --seq N | --range A:B) [--ids | --text] [options]",
    "token ids or text of documents or sequences",
    "Print token ids (default) or their text (GPT-2's, or --tokenizer-type's).\n"
    "With --range each document starts with a line '# document K'.",
    dump_opts, NOPTS(dump_opts), 0, 1, 1, run_dump};
