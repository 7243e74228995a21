/*
 * tokenize.c - the pre-tokenize + BPE loop; see tokenize.h.
 *
 * The scanner hands over its pieces in batches (pretok_split): a call per
 * piece was about a fifth of the scanner's instructions.  Prefetching the
 * batch's table slots ahead was measured and gave nothing on the dev
 * corpus, so each piece is then encoded plainly, in order.
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
        size_t ends[256];
        while (pos < n) {
            size_t k = pretok_split(s, n, pos, ends, sizeof ends / sizeof ends[0]);
            for (size_t j = 0; j < k; j++) {
                nout += bpe_encode_piece(t->b, t->cache, s + pos, ends[j] - pos, out + nout);
                pos = ends[j];
            }
        }
    }
    return nout;
}
