/*
 * fuzz_tokenizer.c - fuzz target for the GPT-2 tokenizer and the
 * pre-tokenizer scanners of tokenizer.json.
 *
 * Invariants checked on every input:
 *   - valid UTF-8: the scanner and the PCRE2 reference split it into the same
 *     pieces, and the pieces cover the input; so do the HuggingFace scanners
 *     (GPT-2 with Unicode 16.0, Llama 3, Qwen2, Tekken) and the general
 *     regex engine running their patterns;
 *   - any bytes: BPE-encoding them as one piece and decoding gives them back,
 *     and so does encoding piece by piece (for valid UTF-8).
 * A violation aborts.  Needs the GPT-2 files: $MDS_ROOT/vocab or ./vocab.
 * In a build without PCRE2 the scanner is checked alone (the pieces still
 * cover the input) and a "skip" line says the comparison was left out.
 */
#include "bpe.h"
#include "pretok.h"

#include "utf8_valid.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bpe *tok;
static bpe_cache *cache;
static pretok_pcre2 *pc;
#define NSCAN 4   /* PRETOK_PAT_GPT2 .. PRETOK_PAT_TEKKEN */
static pretok_regex *re[NSCAN];
static pretok_match *rm[NSCAN];

static void setup(void)
{
    if (tok) return;
    const char *root = getenv("MDS_ROOT");
    char v[4096], m[4096], err[512];
    snprintf(v, sizeof v, "%s/vocab/gpt2-vocab.json", root ? root : ".");
    snprintf(m, sizeof m, "%s/vocab/gpt2-merges.txt", root ? root : ".");
    if (bpe_load(&tok, v, m, err, sizeof err) != 0 || bpe_cache_new(&cache, 1024) != 0 ||
        (pretok_have_pcre2() && pretok_pcre2_new(&pc, err, sizeof err) != 0)) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    for (int p = 0; p < NSCAN && pc; p++) {
        const char *pat = pretok_pattern_text(PRETOK_PAT_GPT2 + p);
        if (pretok_regex_new(&re[p], pat, strlen(pat), 0, err, sizeof err) != 0 || pretok_match_new(&rm[p], re[p]) != 0) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", err);
            abort();
        }
    }
    if (!pc) {
        printf("skip fuzz_tokenizer_vs_pcre2: PCRE2 not built in\n");
        fflush(stdout);
    }
}

/* Each tokenizer.json scanner against the general engine on valid UTF-8. */
static void hf_scanners(const uint8_t *data, size_t size)
{
    for (int p = 0; p < NSCAN && re[p]; p++) {
        pretok_next_fn next = pretok_scanner(PRETOK_PAT_GPT2 + p);
        for (size_t a = 0; a < size;) {
            size_t e = next(data, size, a), ms, me;
            if (pretok_regex_search(re[p], rm[p], data, size, a, &ms, &me) != 1 || ms != a || me != e || e <= a ||
                e > size) {
                fprintf(stderr, "fuzz_tokenizer: pattern %d: scanner piece [%zu, %zu), engine's differs\n", p, a, e);
                abort();
            }
            a = e;
        }
    }
}


static void roundtrip(const uint32_t *ids, size_t nids, const uint8_t *want, size_t n)
{
    size_t cap = bpe_decode_bound(tok, nids) + 1, got = 0;
    unsigned char *out = malloc(cap);
    if (!out || bpe_decode(tok, ids, nids, out, cap, &got) != 0 || got != n || memcmp(out, want, n) != 0) {
        fprintf(stderr, "fuzz_tokenizer: decode(encode(x)) != x\n");
        abort();
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size > (1u << 20)) return 0;
    uint32_t *ids = malloc((size + 1) * sizeof *ids);
    if (!ids) abort();
    size_t k = bpe_encode_piece(tok, cache, data, size, ids);
    roundtrip(ids, k, data, size);
    if (utf8_valid(data, size)) {
        size_t a = 0, b = 0, nids = 0;
        while (a < size) {
            size_t ea = pretok_next(data, size, a);
            size_t eb = pc ? pretok_pcre2_next(pc, data, size, b) : ea;
            if (ea != eb || ea <= a || ea > size) {
                fprintf(stderr, "fuzz_tokenizer: scanner piece ends at %zu, PCRE2 at %zu\n", ea, eb);
                abort();
            }
            nids += bpe_encode_piece(tok, cache, data + a, ea - a, ids + nids);
            a = b = ea;
        }
        roundtrip(ids, nids, data, size);
        hf_scanners(data, size);
    }
    free(ids);
    return 0;
}
