/*
 * unitab.h - generated Unicode range tables (see unitab.c and gen_unitab.sh).
 * Each table is a sorted list of inclusive [lo, hi] code point ranges.
 */
#ifndef MDS_UNITAB_H
#define MDS_UNITAB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

extern const char unitab_version[];          /* e.g. "15.0.0" */
extern const uint32_t unitab_letter[][2];    /* \p{L}: Lu Ll Lt Lm Lo */
extern const size_t unitab_letter_len;
extern const uint32_t unitab_number[][2];    /* \p{N}: Nd Nl No */
extern const size_t unitab_number_len;
extern const uint32_t unitab_space[][2];     /* \s: White_Space */
extern const size_t unitab_space_len;

#ifdef __cplusplus
}
#endif

#endif
