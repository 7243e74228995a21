/*
 * tokenize.h - GPT-2 text -> token ids: the pre-tokenizer and BPE together.
 *
 * The one loop that mdsprep and the benchmark share: each piece from the
 * pre-tokenizer (scanner or PCRE2) goes through bpe_encode_piece.  Special
 * tokens are the caller's business.  Thread safety: one tokenize_ctx per
 * thread.
 */
#ifndef MDS_TOKENIZE_H
#define MDS_TOKENIZE_H

#include "bpe.h"
#include "pretok.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tokenize_ctx {
    const bpe *b;
    bpe_cache *cache;      /* per thread; may be NULL */
    pretok_pcre2 *pcre;    /* NULL: the hand-written scanner */
} tokenize_ctx;

/* Encodes s[0..n) (valid UTF-8) into out, which must hold n ids
 * (bpe_encode_bound(n)); returns the number of ids. */
size_t tokenize_text(const tokenize_ctx *t, const unsigned char *s, size_t n, uint32_t *out);

#ifdef __cplusplus
}
#endif

#endif
