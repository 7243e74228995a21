/*
 * tokenize.c - the pre-tokenize + BPE loop; see tokenize.h.
 *
 * (Batching pieces and prefetching their table slots ahead was measured and
 * gave nothing on the dev corpus, so the loop stays plain.)
 */
#include "tokenize.h"

size_t tokenize_text(const tokenize_ctx *t, const unsigned char *s, size_t n, uint32_t *out)
{
    size_t pos = 0, nout = 0;
    if (t->pcre) {
        while (pos < n) {
            size_t e = pretok_pcre2_next(t->pcre, s, n, pos);
            nout += bpe_encode_piece(t->b, t->cache, s + pos, e - pos, out + nout);
            pos = e;
        }
    } else {
        while (pos < n) {
            size_t e = pretok_next(s, n, pos);
            nout += bpe_encode_piece(t->b, t->cache, s + pos, e - pos, out + nout);
            pos = e;
        }
    }
    return nout;
}
