/*
 * pretok.h - the GPT-2 pre-tokenizer: split UTF-8 text into BPE pieces.
 *
 * Reproduces `regex.findall` of OpenAI's GPT-2 pattern as the Python `regex`
 * module runs it (Megatron's legacy GPT2Tokenizer):
 *
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * with \p{L}, \p{N} and \s (White_Space) taken from the Unicode tables of
 * unitab.c (Unicode 15.0, the version the goldens were made with).
 *
 * Two implementations with one contract:
 *   - pretok_next(): a hand-written scanner, the default and the fast one;
 *   - pretok_pcre2_next(): the same pattern run by PCRE2 JIT, with the
 *     classes spelled out as explicit ranges from the same tables (so PCRE2's
 *     own, older Unicode data never matters).  It is the reference that
 *     tests/unit/test_pretok.c holds the scanner to, and exists only in
 *     builds that found PCRE2 (pretok_have_pcre2()).
 *
 * Both take text that is valid UTF-8 (the JSON layer guarantees it) and never
 * read outside [s, s+n).  They do not allocate per call.  Not done here:
 * special tokens such as <|endoftext|> (the caller handles those).
 */
#ifndef MDS_PRETOK_H
#define MDS_PRETOK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum pretok_class { PRETOK_OTHER = 0, PRETOK_LETTER = 1, PRETOK_NUMBER = 2, PRETOK_SPACE = 3 };

/* Builds the code point class tables.  Idempotent and thread safe (runs once);
 * pretok_next() calls it lazily, but calling it up front keeps that cost out
 * of the first document. */
void pretok_init(void);

/* The class of code point cp (any value; those above U+10FFFF are OTHER). */
int pretok_class(uint32_t cp);

/* Returns the end offset of the piece that starts at pos (pos < n): the next
 * piece is s[pos, return).  Always > pos. */
size_t pretok_next(const unsigned char *s, size_t n, size_t pos);

/* PCRE2 reference.  pretok_pcre2_new compiles the pattern (with JIT when
 * available); one handle per thread, since it owns its match data.
 * @return 0, or -1 with a message in err (at most errlen bytes)
 *   when PCRE2 rejects the pattern, memory runs out, or this build has no
 *   PCRE2 ("pcre2: this build has no PCRE2 (install libpcre2-dev and
 *   rebuild)"; see pretok_have_pcre2).  *out is NULL on failure. */
typedef struct pretok_pcre2 pretok_pcre2;
int    pretok_pcre2_new(pretok_pcre2 **out, char *err, size_t errlen);
size_t pretok_pcre2_next(pretok_pcre2 *p, const unsigned char *s, size_t n, size_t pos);
void   pretok_pcre2_free(pretok_pcre2 *p);      /* accepts NULL */

/* 1 if PCRE2 was found at build time (the reference is usable), else 0.
 * Thread safe.  pretok_next() never needs PCRE2. */
int    pretok_have_pcre2(void);

/* The pattern string given to PCRE2 (static storage, valid after the first
 * pretok_pcre2_new). */
const char *pretok_pcre2_pattern(void);

#ifdef __cplusplus
}
#endif

#endif
