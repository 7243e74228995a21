/*
 * inspect_diff.c - `mdsinspect diff`: the first difference between two
 * datasets (tokens, sequence boundaries, document count, pointers, dtype).
 */
#include "inspect.h"

#include <stdlib.h>
#include <string.h>

static const struct cli_option diff_opts[] = {
    {"context", 'C', CLI_ARG_ONE, O_CONTEXT, "N", "tokens of context shown on each side of a difference (default 8)"},
    {"json", 0, CLI_ARG_NONE, O_JSON, NULL, "one JSON object describing the first difference"},
    {"quiet", 'q', CLI_ARG_NONE, O_QUIET, NULL, "print nothing, exit status only"},
    OPT_HELP,
};

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
        c->p = inspect_sequence(r, prefix, c->seq, &c->len);
}

/* Tokens left in the current sequence, moving past exhausted ones. */
static uint64_t cursor_fill(struct cursor *c)
{
    while (c->off == c->len && c->seq + 1 < c->end) {
        c->seq++;
        c->off = 0;
        c->p = inspect_sequence(c->r, c->prefix, c->seq, &c->len);
    }
    return c->len - c->off;
}

/* Token j of document doc, walking its sequences; 0 with *ok = 0 past its end. */
static int64_t doc_token(const ds_reader *r, const char *prefix, uint64_t doc, uint64_t j, int *ok)
{
    uint64_t s = ds_reader_doc_index(r, doc), e = ds_reader_doc_index(r, doc + 1);
    for (; s < e; s++) {
        uint64_t len;
        const uint8_t *p = inspect_sequence(r, prefix, s, &len);
        if (j < len) {
            *ok = 1;
            return inspect_token(p + j * ds_dtype_size(ds_reader_dtype(r)), ds_reader_dtype(r));
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

static int run_diff(struct args *a)
{
    uint64_t ctx = a->context;
    char *pa = inspect_prefix(a->pos[0]), *pb = inspect_prefix(a->pos[1]);
    ds_reader *ra = inspect_open_or_die(pa), *rb = inspect_open_or_die(pb);
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
                while (j < m && inspect_token(xa + j * isa, dta) == inspect_token(xb + j * isb, dtb))
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
    cli_check_stdout();
    ds_reader_close(ra);
    ds_reader_close(rb);
    free(pa);
    free(pb);
    return what ? 1 : 0;
}

const struct command inspect_diff = {
    "diff", "[options] A B", "first differing document between two datasets",
    "Compare dtype, documents, sequence boundaries, tokens and pointers.  Exit 0\n"
    "when identical, 1 when different (stdout says where), or on failure.",
    diff_opts, NOPTS(diff_opts), 0, 2, 2, run_diff};
