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
 *
 * The second half serves tokenizer.json (HuggingFace): scanners for the
 * GPT-2, Llama 3 and Qwen2 patterns with Unicode 16.0 classes, and a general
 * engine for any other pattern (PCRE2 JIT over a rewritten pattern).
 */
#ifndef MDS_PRETOK_H
#define MDS_PRETOK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum pretok_class { PRETOK_OTHER = 0, PRETOK_LETTER = 1, PRETOK_NUMBER = 2, PRETOK_SPACE = 3 };

/* Builds the code point class tables (Unicode 15.0) of GPT-2's scanner.
 * Idempotent and thread safe (runs once); pretok_next() calls it lazily, but
 * calling it up front keeps that cost out of the first document. */
void pretok_init(void);

/* The same for the Unicode 16.0 tables of the HuggingFace scanners
 * (pretok_gpt2_hf_next, pretok_cl100k_next, pretok_class16); separate so
 * that GPT-2 runs do not build them. */
void pretok_init_hf(void);

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

/* ---- HuggingFace tokenizers (tokenizer.json) ------------------------------
 *
 * HuggingFace's tokenizers 0.22.2 run their patterns with Oniguruma, whose
 * classes follow Unicode 16.0 (hftab.c); the scanners below use those
 * classes, not unitab.c's 15.0.  Same contract as pretok_next(): valid UTF-8,
 * pos < n, returns the end of the piece starting at pos (> pos), and every
 * position starts a piece (these patterns match everywhere, so the split of
 * tokenizers' Split(Isolated) is exactly the sequence of matches).
 */

/* The GPT-2 pattern above (tokenizers' ByteLevel with use_regex), Unicode 16.0. */
size_t pretok_gpt2_hf_next(const unsigned char *s, size_t n, size_t pos);

/* The Llama 3 pattern (maxdigits 3):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * and Qwen2's, the same with \p{N} alone (maxdigits 1).  Any maxdigits >= 1. */
size_t pretok_cl100k_next(const unsigned char *s, size_t n, size_t pos, unsigned maxdigits);

/* The class of cp in the Unicode 16.0 tables. */
int pretok_class16(uint32_t cp);

/* Which scanner can run a tokenizer.json pattern: the exact pattern string
 * (as stored in the file, after JSON unescaping) of GPT-2, Llama 3 or Qwen2,
 * else PRETOK_PAT_NONE (then the general engine below runs it). */
enum pretok_pattern { PRETOK_PAT_NONE = 0, PRETOK_PAT_GPT2, PRETOK_PAT_LLAMA3, PRETOK_PAT_QWEN2 };
int pretok_known_pattern(const char *pattern, size_t len);

/*
 * The general engine: any Oniguruma pattern of a tokenizer.json Split, run by
 * PCRE2 JIT.  Character classes are rewritten into explicit Unicode 16.0
 * ranges first (\p{..} of general categories, \s, \d and their negations;
 * Oniguruma's own \h, \v, \e, \a, \uHHHH; ^ and $ at line breaks, the
 * option m as PCRE2's s), so PCRE2's older tables never matter.  Anything
 * else whose meaning could differ (\w, \b, scripts and other properties,
 * POSIX brackets, nested classes and intersections, other options) is refused
 * with PRETOK_ERR_UNSUPPORTED and a message naming it.  Case-insensitive
 * matching uses PCRE2's case folding (Unicode 14.0).
 *
 * pretok_regex_new: literal != 0 matches pattern as plain text (tokenizers'
 *   String patterns).  A compiled regex is immutable and shared by threads;
 *   each thread needs its own pretok_match.
 * pretok_regex_search: the leftmost match at or after `from` in s[0..n)
 *   (the text before `from` is visible to lookbehinds): 1 with [*ms, *me),
 *   0 when there is none, or PRETOK_ERR_MATCH (PCRE2 failed, e.g. its match
 *   limit) / PRETOK_ERR_NOPCRE2.
 */
enum pretok_error {
    PRETOK_ERR_NOMEM = -1,
    PRETOK_ERR_UNSUPPORTED = -2,  /* a construct the engine does not run (message names it) */
    PRETOK_ERR_NOPCRE2 = -3,      /* the build has no PCRE2 */
    PRETOK_ERR_MATCH = -4         /* PCRE2 gave up on a subject */
};
typedef struct pretok_regex pretok_regex;
typedef struct pretok_match pretok_match;
int  pretok_regex_new(pretok_regex **out, const char *pattern, size_t len, int literal, char *err, size_t errlen);
void pretok_regex_free(pretok_regex *re);              /* accepts NULL */
const char *pretok_regex_pcre2_pattern(const pretok_regex *re);  /* the rewritten pattern */
int  pretok_match_new(pretok_match **out, const pretok_regex *re);
void pretok_match_free(pretok_match *m);               /* accepts NULL */
int  pretok_regex_search(const pretok_regex *re, pretok_match *m, const unsigned char *s, size_t n, size_t from,
                         size_t *ms, size_t *me);

#ifdef __cplusplus
}
#endif

#endif
