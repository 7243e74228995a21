/*
 * nfc.h - Unicode NFC exactly as HuggingFace tokenizers 0.22.2 computes it
 * (its NFC normalizer), which carries Unicode 9.0 data: combining marks and
 * compositions added after 9.0 are left alone (hftab.c says how that was
 * measured).  For tokenizer.json files that declare an NFC normalizer.
 *
 * Input must be valid UTF-8 (the JSON layer guarantees it).  Text is cut at
 * stable boundaries (a character with canonical class 0 that NFC leaves
 * alone and that composes with nothing before it); only the segments holding
 * a character NFC may change are decomposed, reordered and recomposed, the
 * rest is copied.  Not done here: NFD, NFKC, NFKD (tokenizer.json files that
 * ask for them are refused by preprocess/hf.c).
 *
 * Thread safety: the tables are built once (nfc_init, idempotent and thread
 * safe, also called lazily); each thread passes its own scratch.
 */
#ifndef MDS_NFC_H
#define MDS_NFC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Builds the lookup tables; returns 0, or -1 when memory runs out. */
int nfc_init(void);

/* The offset of the first character of s[0..n) that NFC might change, or n
 * when NFC(s) == s for certain. */
size_t nfc_quick_check(const unsigned char *s, size_t n);

/* Bytes that nfc_normalize may write for n input bytes. */
size_t nfc_bound(size_t n);

/* Per-thread scratch (code points of one segment); zero-initialise, release
 * with nfc_scratch_release. */
typedef struct nfc_scratch { uint32_t *cp; size_t cap; } nfc_scratch;
void nfc_scratch_release(nfc_scratch *s);

/*
 * nfc_normalize() - writes NFC(s[0..n)) to out (capacity nfc_bound(n)).
 * @return the number of bytes written, or SIZE_MAX when scratch memory runs
 *   out (out is then undefined).
 */
size_t nfc_normalize(const unsigned char *s, size_t n, unsigned char *out, nfc_scratch *scratch);

#ifdef __cplusplus
}
#endif

#endif
