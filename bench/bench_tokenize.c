/*
 * bench_tokenize.c - single-thread tokenizer throughput on the texts of a
 * JSON-lines file, for `make bench`.
 *
 *   bench_tokenize FILE.jsonl VOCAB MERGES [REPEAT]      GPT-2 (below)
 *   bench_tokenize FILE.jsonl TYPE MODEL [REPEAT]        any tokenizer.h type
 *     (HuggingFaceTokenizer, SentencePieceTokenizer, ...): tok_encode on every
 *     text, MB/s and tokens/s, and the FNV-1a checksum of all ids that
 *     bench/tok_reference.py prints for the reference library.
 *
 * Loads every document's "text" into memory first (JSON parsing is not
 * timed), then times, on one thread: the scanner alone, PCRE2 alone, and the
 * whole tokenizer (scanner + BPE, and PCRE2 + BPE).  Prints MB/s of UTF-8
 * text, and a checksum of all token ids (FNV-1a over the ids as u32) that
 * bench/tiktoken_bench.py prints too, so the peer's ids are checked equal.
 * The ids are kept and summed after the clock stops, as the peers time
 * their encode and not their checksum.
 * Not a test: it asserts nothing beyond the two tokenizers agreeing.
 */
#include "bpe.h"
#include "json.h"
#include "pretok.h"
#include "tokenize.h"
#include "tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct text { char *s; size_t n; };

/* FNV-1a over the ids, from h. */
static uint64_t fnv_ids(const uint32_t *ids, size_t n, uint64_t h)
{
    for (size_t j = 0; j < n; j++) { h ^= ids[j]; h *= 1099511628211ULL; }
    return h;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_tokenize FILE.jsonl (VOCAB MERGES | TYPE MODEL) [REPEAT [pcre2 | whole]]\n");
        return 2;
    }
    int repeat = argc > 4 ? atoi(argv[4]) : 3;
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 1; }
    json_doc d;
    json_doc_init(&d);
    const char *keys[] = {"text"};
    struct text *texts = NULL;
    size_t ntexts = 0, cap = 0, total = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        if (line[len - 1] == '\n') len--;
        if (json_extract(&d, line, (size_t)len, keys, 1) != 0 || json_doc_kind(&d, 0) != JSON_STRING) continue;
        size_t n;
        const char *s = json_doc_string(&d, 0, 0, &n);
        if (ntexts == cap) { cap = cap ? cap * 2 : 1024; texts = realloc(texts, cap * sizeof *texts); }
        texts[ntexts].s = malloc(n + 1);
        memcpy(texts[ntexts].s, s, n);
        texts[ntexts].n = n;
        total += n;
        ntexts++;
    }
    fclose(f);
    free(line);
    json_doc_release(&d);

    char err[1024];
    int ttype = tok_type_from_name(argv[2]);
    if (ttype && ttype != TOK_GPT2BPE) {
        tok *t;
        tok_options o = { ttype, argv[3], NULL, NULL, 0, argc > 5 && strcmp(argv[5], "pcre2") == 0,
                          argc > 5 && strcmp(argv[5], "whole") == 0 };
        if (tok_open(&t, &o, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); return 1; }
        double mb = (double)total / 1e6, best = 1e9;
        uint64_t h = 0, nt = 0;
        tok_ids out = { NULL, 0, 0 };
        printf("texts: %zu documents, %.1f MB of UTF-8 text; %s\n", ntexts, mb, tok_describe(t));
        for (int r = 0; r < repeat; r++) {
            tok_state *st;
            tok_state_new(t, &st);          /* fresh state: what a worker starts with */
            double t0 = now();
            out.n = 0;   /* every text's ids one after the other, summed after the clock stops */
            for (size_t i = 0; i < ntexts; i++)
                if (tok_encode(t, st, (const unsigned char *)texts[i].s, texts[i].n, &out) != 0) { fprintf(stderr, "encode failed\n"); return 1; }
            t0 = now() - t0;
            if (t0 < best) best = t0;
            h = fnv_ids(out.ids, out.n, 1469598103934665603ULL);
            nt = out.n;
            tok_state_free(st);
        }
        printf("tokens: %llu, ids checksum %016llx\n", (unsigned long long)nt, (unsigned long long)h);
        printf("tokenize              %8.1f MB/s  %10.0f tokens/s  (1 thread)\n", mb / best, (double)nt / best);
        free(out.ids);
        tok_free(t);
        for (size_t i = 0; i < ntexts; i++) free(texts[i].s);
        free(texts);
        return 0;
    }
    bpe *b;
    if (bpe_load(&b, argv[2], argv[3], err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); return 1; }
    pretok_init();
    pretok_pcre2 *pc = NULL;   /* the PCRE2 rows only when the build has it */
    if (pretok_pcre2_new(&pc, err, sizeof err) != 0) fprintf(stderr, "%s: the PCRE2 rows are left out\n", err);
    uint32_t *ids = malloc((total + 1) * sizeof *ids);
    double mb = (double)total / 1e6;
    printf("texts: %zu documents, %.1f MB of UTF-8 text\n", ntexts, mb);

    double best[4] = {1e9, 1e9, 1e9, 1e9};
    uint64_t hash[2] = {0, 0}, ntok[2] = {0, 0}, pieces = 0;
    for (int r = 0; r < repeat; r++) {
        double t = now();
        size_t np = 0;
        for (size_t i = 0; i < ntexts; i++) {
            const unsigned char *s = (const unsigned char *)texts[i].s;
            for (size_t p = 0; p < texts[i].n; p = pretok_next(s, texts[i].n, p)) np++;
        }
        t = now() - t; if (t < best[0]) best[0] = t;
        pieces = np;
        t = now();
        for (size_t i = 0; pc && i < ntexts; i++) {
            const unsigned char *s = (const unsigned char *)texts[i].s;
            for (size_t p = 0; p < texts[i].n; p = pretok_pcre2_next(pc, s, texts[i].n, p)) np++;
        }
        t = now() - t; if (t < best[1]) best[1] = t;
        for (int mode = 0; mode < (pc ? 2 : 1); mode++) {
            bpe_cache *c;
            bpe_cache_new(&c, 1u << 14);     /* fresh cache: what a worker starts with */
            t = now();
            size_t nt = 0;   /* (ids has room for one id per byte of all the texts) */
            for (size_t i = 0; i < ntexts; i++) {
                tokenize_ctx tc = { b, c, mode ? pc : NULL };
                nt += tokenize_text(&tc, (const unsigned char *)texts[i].s, texts[i].n, ids + nt);
            }
            t = now() - t;
            if (t < best[2 + mode]) best[2 + mode] = t;
            hash[mode] = fnv_ids(ids, nt, 1469598103934665603ULL);
            ntok[mode] = nt;
            bpe_cache_free(c);
        }
    }
    /* the same GPT-2 tokenizer through tokenizer.h, as mdsprep now calls it */
    double best_if = 1e9;
    uint64_t hash_if = 0;
    {
        tok *t;
        tok_options o = { TOK_GPT2BPE, NULL, argv[2], argv[3], 0, 0, 0 };
        if (tok_open(&t, &o, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); return 1; }
        tok_ids out = { NULL, 0, 0 };
        for (int r = 0; r < repeat; r++) {
            tok_state *st;
            tok_state_new(t, &st);
            double t0 = now();
            out.n = 0;
            for (size_t i = 0; i < ntexts; i++)
                tok_encode(t, st, (const unsigned char *)texts[i].s, texts[i].n, &out);
            t0 = now() - t0;
            if (t0 < best_if) best_if = t0;
            hash_if = fnv_ids(out.ids, out.n, 1469598103934665603ULL);
            tok_state_free(st);
        }
        free(out.ids);
        tok_free(t);
    }
    printf("pieces: %llu, tokens: %llu, ids checksum %016llx\n", (unsigned long long)pieces,
           (unsigned long long)ntok[0], (unsigned long long)hash[0]);
    printf("pretokenize scan      %8.1f MB/s\n", mb / best[0]);
    if (pc) printf("pretokenize pcre2     %8.1f MB/s\n", mb / best[1]);
    printf("tokenize scan+bpe     %8.1f MB/s  (1 thread)\n", mb / best[2]);
    if (pc) printf("tokenize pcre2+bpe    %8.1f MB/s  (1 thread)\n", mb / best[3]);
    printf("tokenize tok_encode   %8.1f MB/s  (1 thread; the same through tokenizer.h)\n", mb / best_if);
    int same = (!pc || (hash[0] == hash[1] && ntok[0] == ntok[1])) && hash_if == hash[0];
    if (!same) printf("MISMATCH between the scanner, PCRE2 and tokenizer.h tokenizations\n");
    pretok_pcre2_free(pc);
    bpe_free(b);
    for (size_t i = 0; i < ntexts; i++) free(texts[i].s);
    free(texts);
    free(ids);
    return same ? 0 : 1;
}
