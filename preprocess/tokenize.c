/*
 * tokenize.c - the pre-tokenize + BPE loop; see tokenize.h.
 *
 * (Batching pieces and prefetching their table slots ahead was measured and
 * gave nothing on the dev corpus, so the loop stays plain; so did taking the
 * scanner's pieces 64 at a time.)  The scanner (pretok_gpt2.h) and the first
 * two paths of the BPE, a byte and a piece that is a self-encoding token, are
 * inline here: a call for each piece, with the register saves of a large
 * function, had cost a tenth of the loop's instructions for the BPE (scan+bpe
 * 88.9 -> 92.6 MB/s on dev, mean of five alternating rounds) and 4.5 % more
 * for the scanner (97.5 -> 102.5 MB/s, six rounds).
 */
#include "tokenize.h"
#include "bpe_internal.h"
#include "pretok_gpt2.h"

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
        pretok_init();   /* (once; then a flag's check a text) */
        while (pos < n) {
            size_t e = gpt2_next(&pretok_c15, s, n, pos);
            nout += bpe_encode_piece_inline(t->b, t->cache, s + pos, e - pos, out + nout);
            pos = e;
        }
    }
    return nout;
}
