/*
 * inspect_stats.c - `mdsinspect stats`: every token counted (OpenMP), the
 * sequence-length histogram, the EOD count and the most frequent tokens.
 */
#include "inspect.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#define OMP(x) _Pragma(#x)
#else
#define OMP(x)   /* no OpenMP: one thread, and no unknown-pragma warnings */
#endif

static const struct cli_option stats_opts[] = {
    {"top", 'n', CLI_ARG_ONE, O_TOP, "N", "list the N most frequent tokens (default 10)"},
    {"eod", 0, CLI_ARG_ONE, O_EOD, "ID", "end-of-document token id to count (default: the EOD of --tokenizer-type, else 50256, GPT-2's)"},
    {"threads", 'j', CLI_ARG_ONE, O_THREADS, "N", "counting threads (default: all CPUs)"},
    {"json", 0, CLI_ARG_NONE, O_JSON, NULL, "one JSON object"},
    {"quiet", 'q', CLI_ARG_NONE, O_QUIET, NULL, "no progress bar"},
    OPT_VOCAB,
    OPT_HELP,
};

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
            int64_t v = inspect_token(p + k * isz, dtype);
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

/* Cuts the token stream into units of about UNIT_TOKENS, splitting long
 * sequences, so that one huge sequence still spreads over the threads.
 * Returns nunits units plus a sentinel {n, 0}. */
static struct unit *make_units(const ds_reader *r, size_t *nunits)
{
    uint64_t n = ds_reader_num_sequences(r);
    struct unit *units = NULL;
    size_t nu = 0, ucap = 0;
    uint64_t acc = UNIT_TOKENS;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = ds_reader_seq_length(r, i);
        for (uint64_t off = 0; off == 0 || off < len; off += UNIT_TOKENS) {
            if (acc >= UNIT_TOKENS) {
                GROW(units, ucap, nu + 1);
                units[nu++] = (struct unit){ i, off };
                acc = 0;
            }
            acc += len - off < UNIT_TOKENS ? len - off : UNIT_TOKENS;
        }
    }
    GROW(units, ucap, nu + 1);
    units[nu] = (struct unit){ n, 0 };   /* sentinel */
    *nunits = nu;
    return units;
}

/* Counts every token into all (initialised with ndense dense slots): each
 * thread counts its units into its own counter, merged at the end.  A
 * sequence pointer outside the .bin is fatal.  The progress line shows
 * (docs/cli.md) from the first thread only. */
static void count_all(const ds_reader *r, const char *prefix, struct counter *all, size_t ndense, int nthreads,
                      int progress)
{
    int dt = ds_reader_dtype(r);
    size_t isz = ds_dtype_size(dt);
    uint64_t n = ds_reader_num_sequences(r), total = ds_reader_num_tokens(r);
    size_t nunits;
    struct unit *units = make_units(r, &nunits);
    struct cli_bar bar;
    cli_bar_init(&bar, progress, 0.25);
    uint64_t done = 0, bad_seq = UINT64_MAX;
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
            if (thread_id() == 0 && cli_bar_due(&bar)) {
                double f = total ? (double)now / (double)total : 1.0, el = cli_now() - bar.start;
                double rate = el > 0 ? (double)now / el : 0, eta = rate > 0 ? (double)(total - now) / rate : 0;
                char b[31];
                for (int i = 0; i < 30; i++)
                    b[i] = i < (int)(f * 30) ? '#' : '.';
                b[30] = 0;
                cli_bar_draw(&bar, "%s stats: [%s] %3.0f%%  %.1fM tokens/s  ETA %.0fs", cli.name, b, 100 * f,
                             rate / 1e6, eta);
            }
        }
        OMP(omp critical(stats_merge))
        {
            for (size_t i = 0; i < ndense; i++)
                all->dense[i] += c.dense[i];
            for (size_t i = 0; i < c.cap; i++)
                if (c.vals[i])
                    hash_add(all, c.keys[i], c.vals[i]);
        }
        counter_release(&c);
    }
    cli_bar_clear(&bar);
    free(units);
    if (bad_seq != UINT64_MAX)
        cli_die(1, "'%s.idx': sequence_pointers[%llu] lies outside the .bin (see 'mdsinspect verify')",
                prefix, (ull)bad_seq);
}

/* Every distinct token with its count, most frequent first (ties by id). */
static struct tokcount *sorted_counts(const struct counter *all, int dt, size_t *m_out)
{
    size_t ndistinct = all->used;
    for (size_t i = 0; i < all->ndense; i++)
        ndistinct += all->dense[i] != 0;
    struct tokcount *tc = mallocCheck(ndistinct * sizeof *tc);
    size_t m = 0;
    for (size_t i = 0; i < all->ndense; i++)
        if (all->dense[i])
            tc[m++] = (struct tokcount){ dense_value(i, dt), all->dense[i] };
    for (size_t i = 0; i < all->cap; i++) {
        if (all->vals[i]) {
            int64_t v;
            memcpy(&v, &all->keys[i], sizeof v);
            tc[m++] = (struct tokcount){ v, all->vals[i] };
        }
    }
    qsort(tc, m, sizeof *tc, by_count);
    *m_out = m;
    return tc;
}

/* Documents whose last token (of their last non-empty sequence) is eod. */
static uint64_t documents_ending_with(const ds_reader *r, int64_t eod)
{
    uint64_t ndoc = ds_reader_num_documents(r), count = 0;
    for (uint64_t k = 0; k < ndoc; k++) {
        uint64_t s0 = ds_reader_doc_index(r, k), s = ds_reader_doc_index(r, k + 1);
        while (s > s0 && ds_reader_seq_length(r, s - 1) == 0)
            s--;
        if (s > s0 && ds_reader_token(r, s - 1, ds_reader_seq_length(r, s - 1) - 1) == eod)
            count++;
    }
    return count;
}

/* Sequence lengths in power-of-two buckets: [0], [1], [2,3], [4,7], ...;
 * [*lo, *hi] the non-empty range (hi < 0: no sequences). */
struct histogram {
    uint64_t count[34], max;
    int lo, hi;
};

static void length_histogram(const ds_reader *r, struct histogram *h)
{
    memset(h, 0, sizeof *h);
    h->hi = -1;
    uint64_t n = ds_reader_num_sequences(r);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = ds_reader_seq_length(r, i);
        int b = 0;
        while (l) {
            b++;
            l >>= 1;
        }
        h->count[b]++;
    }
    for (int b = 0; b < 34; b++)
        if (h->count[b]) {
            if (h->hi < 0) h->lo = b;
            h->hi = b;
        }
    for (int b = h->lo; b <= h->hi; b++)
        if (h->count[b] > h->max) h->max = h->count[b];
}

/* What stats prints, gathered. */
struct stats {
    const char *prefix;
    int dt;
    uint64_t n, ndoc, total, eod, eod_count, eod_docs;
    struct summary sm;
    struct histogram h;
    const struct tokcount *tc;
    size_t m, ntop;
    const tok *tok;
};

static const unsigned char *token_text(const tok *t, int64_t id, size_t *len)
{
    *len = 0;
    return t && id >= 0 && id <= UINT32_MAX ? tok_token_bytes(t, (uint32_t)id, len) : NULL;
}

static void print_json(const struct stats *st)
{
    printf("{\"prefix\":");
    json_cstr(stdout, st->prefix);
    printf(",\"dtype\":\"%s\",\"documents\":%llu,\"sequences\":%llu,\"tokens\":%llu,\"distinct_tokens\":%zu,"
           "\"eod_id\":%llu,\"eod_tokens\":%llu,\"documents_ending_with_eod\":%llu,",
           ds_dtype_name(st->dt), (ull)st->ndoc, (ull)st->n, (ull)st->total, st->m, (ull)st->eod,
           (ull)st->eod_count, (ull)st->eod_docs);
    if (st->n)
        printf("\"min_sequence_length\":%llu,\"mean_sequence_length\":%.4f,\"max_sequence_length\":%llu,",
               (ull)st->sm.min_len, st->sm.mean_len, (ull)st->sm.max_len);
    printf("\"length_histogram\":[");
    for (int b = st->h.lo; b <= st->h.hi; b++)
        printf("%s{\"min\":%llu,\"max\":%llu,\"count\":%llu}", b > st->h.lo ? "," : "",
               b ? 1ULL << (b - 1) : 0ULL, b ? (1ULL << b) - 1 : 0ULL, (ull)st->h.count[b]);
    printf("],\"top_tokens\":[");
    for (size_t i = 0; i < st->ntop; i++) {
        printf("%s{\"id\":%lld,\"count\":%llu", i ? "," : "", (sll)st->tc[i].id, (ull)st->tc[i].count);
        size_t tl;
        const unsigned char *tb = token_text(st->tok, st->tc[i].id, &tl);
        if (tb) {
            printf(",\"text\":");
            json_string(stdout, (const char *)tb, tl);
        }
        printf("}");
    }
    printf("]}\n");
}

static void print_text(const struct stats *st)
{
    printf("%s\n", st->prefix);
    printf("  dtype            %s\n", ds_dtype_name(st->dt));
    printf("  tokens           %llu in %llu sequences, %llu documents\n", (ull)st->total, (ull)st->n, (ull)st->ndoc);
    printf("  distinct tokens  %zu\n", st->m);
    printf("  EOD tokens       %llu (id %llu); %llu of %llu documents end with one\n",
           (ull)st->eod_count, (ull)st->eod, (ull)st->eod_docs, (ull)st->ndoc);
    if (st->n)
        printf("  sequence length  min %llu  mean %.2f  max %llu\n", (ull)st->sm.min_len, st->sm.mean_len,
               (ull)st->sm.max_len);
    const struct histogram *h = &st->h;
    if (h->hi >= 0) {
        printf("\nsequence length histogram\n");
        for (int b = h->lo; b <= h->hi; b++) {
            char range[48];
            if (b <= 1)
                snprintf(range, sizeof range, "%d", b);
            else
                snprintf(range, sizeof range, "%llu-%llu", 1ULL << (b - 1), (1ULL << b) - 1);
            int w = h->max ? (int)((h->count[b] * 40 + h->max - 1) / h->max) : 0;
            printf("  %21s %12llu  %.*s\n", range, (ull)h->count[b], w, "########################################");
        }
    }
    if (st->ntop) {
        printf("\nmost frequent tokens\n  %8s %12s %7s  %s\n", "id", "count", "share", st->tok ? "text" : "");
        for (size_t i = 0; i < st->ntop; i++) {
            printf("  %8lld %12llu %6.2f%%  ", (sll)st->tc[i].id, (ull)st->tc[i].count,
                   st->total ? 100.0 * (double)st->tc[i].count / (double)st->total : 0.0);
            size_t tl;
            const unsigned char *tb = token_text(st->tok, st->tc[i].id, &tl);
            if (tb)
                show_token(stdout, tb, tl);
            putchar('\n');
        }
    }
}

static int run_stats(struct args *a)
{
    char *prefix = inspect_prefix(a->pos[0]);
    ds_reader *r = inspect_open_or_die(prefix);
    tok *tk = a->top || (a->tokenizer_type && !a->eod_given) ? inspect_vocab(a, 0) : NULL;
    if (tk && a->tokenizer_type && !a->eod_given && tok_eod(tk) >= 0)
        a->eod = (uint64_t)tok_eod(tk);   /* the named tokenizer's EOD */
    struct stats st = { .prefix = prefix, .dt = ds_reader_dtype(r), .n = ds_reader_num_sequences(r),
                        .ndoc = ds_reader_num_documents(r), .total = ds_reader_num_tokens(r), .eod = a->eod,
                        .tok = tk };
    size_t isz = ds_dtype_size(st.dt);
    size_t ndense = isz == 1 ? 256 : isz == 2 ? 65536 : DENSE_WIDE;
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = a->threads ? (int)a->threads : omp_get_max_threads();
#endif
    struct counter all;
    counter_init(&all, ndense);
    count_all(r, prefix, &all, ndense, nthreads, !a->quiet);
    struct tokcount *tc = sorted_counts(&all, st.dt, &st.m);
    st.tc = tc;
    for (size_t i = 0; i < st.m; i++)
        if (tc[i].id == (int64_t)a->eod)
            st.eod_count = tc[i].count;
    st.ntop = a->top < st.m ? (size_t)a->top : st.m;
    st.eod_docs = documents_ending_with(r, (int64_t)a->eod);
    inspect_summarize(r, &st.sm);
    length_histogram(r, &st.h);
    if (a->json)
        print_json(&st);
    else
        print_text(&st);
    cli_check_stdout();
    free(tc);
    counter_release(&all);
    tok_free(tk);
    ds_reader_close(r);
    free(prefix);
    return 0;
}

const struct command inspect_stats = {
    "stats", "[options] PREFIX", "length histogram, EOD count, most frequent tokens",
    "Scan every token (in parallel) and print the sequence-length histogram, the\n"
    "number of EOD tokens and of documents ending with one, and the most frequent\n"
    "tokens with their text (GPT-2's, or --tokenizer-type's).  A progress bar\n"
    "shows on a terminal when the scan takes longer than a moment.",
    stats_opts, NOPTS(stats_opts), 0, 1, 1, run_stats};
