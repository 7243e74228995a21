/*
 * hftab.h - generated Unicode tables for the HuggingFace tokenizer (see
 * hftab.c and gen_hftab.py): Unicode 16.0 general categories, as the regular
 * expressions of tokenizers 0.22.2 see them, and the Unicode 9.0 NFC data of
 * its normalizer.  Every table is sorted by its first column.
 */
#ifndef MDS_HFTAB_H
#define MDS_HFTAB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HFTAB_GC_COUNT 30
extern const char hftab_gc_version[];                    /* "16.0.0" */
extern const char *const hftab_gc_names[HFTAB_GC_COUNT]; /* "Lu", "Ll", ... "Cn" (last) */
extern const uint32_t hftab_gc[][3];                     /* lo, hi, index into hftab_gc_names */
extern const size_t hftab_gc_len;

extern const char hftab_nfc_version[];                   /* "9.0.0" */
extern const unsigned hftab_nfc_max_ratio;
extern const uint32_t hftab_ccc[][3];                    /* lo, hi, canonical combining class */
extern const size_t hftab_ccc_len;
extern const uint32_t hftab_decomp[][3];                 /* cp, first, second (0: singleton) */
extern const size_t hftab_decomp_len;
extern const uint32_t hftab_comp[][3];                   /* first, second, primary composite */
extern const size_t hftab_comp_len;
extern const uint32_t hftab_nfc_maybe[][2];              /* lo, hi: NFC may change these */
extern const size_t hftab_nfc_maybe_len;

#ifdef __cplusplus
}
#endif

#endif
