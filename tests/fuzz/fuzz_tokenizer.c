/*
 * fuzz_tokenizer.c - fuzz target for the GPT-2 tokenizer.
 *
 * Invariants checked on every input:
 *   - valid UTF-8: the scanner and the PCRE2 reference split it into the same
 *     pieces, and the pieces cover the input;
 *   - any bytes: BPE-encoding them as one piece and decoding gives them back,
 *     and so does encoding piece by piece (for valid UTF-8).
 * A violation aborts.  Needs the GPT-2 files: $MDS_ROOT/vocab or ./vocab.
 */
#include "bpe.h"
#include "pretok.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bpe *tok;
static bpe_cache *cache;
static pretok_pcre2 *pc;

static void setup(void)
{
    if (tok) return;
    const char *root = getenv("MDS_ROOT");
    char v[4096], m[4096], err[512];
    snprintf(v, sizeof v, "%s/vocab/gpt2-vocab.json", root ? root : ".");
    snprintf(m, sizeof m, "%s/vocab/gpt2-merges.txt", root ? root : ".");
    if (bpe_load(&tok, v, m, err, sizeof err) != 0 || bpe_cache_new(&cache, 1024) != 0 ||
        pretok_pcre2_new(&pc, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
}

static int valid_utf8(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len; uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (i + len > n) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
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
    if (valid_utf8(data, size)) {
        size_t a = 0, b = 0, nids = 0;
        while (a < size) {
            size_t ea = pretok_next(data, size, a);
            size_t eb = pretok_pcre2_next(pc, data, size, b);
            if (ea != eb || ea <= a || ea > size) {
                fprintf(stderr, "fuzz_tokenizer: scanner piece ends at %zu, PCRE2 at %zu\n", ea, eb);
                abort();
            }
            nids += bpe_encode_piece(tok, cache, data + a, ea - a, ids + nids);
            a = b = ea;
        }
        roundtrip(ids, nids, data, size);
    }
    free(ids);
    return 0;
}
