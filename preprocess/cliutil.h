/*
 * cliutil.h - small helpers shared by the command-line programs (mdsprep,
 * mdsinspect): the default-vocabulary lookup, a checked number parser and a
 * monotonic clock.  Program-side code, not part of any library API: nothing
 * here prints or exits either, so each program keeps its own die().
 */
#ifndef MDS_CLIUTIL_H
#define MDS_CLIUTIL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Path of the bundled vocabulary file `name` (gpt2-vocab.json or
 * gpt2-merges.txt): the first readable of $MDS_VOCAB_DIR/name, then, relative
 * to the running binary's directory, ../share/mds/vocab/name (installed),
 * vocab/name, ../vocab/name, ../../vocab/name (build trees), then the
 * compile-time MDS_VOCAB_DIR (PREFIX/share/mds/vocab).
 * @return a malloc'ed path the caller frees, or NULL if none is readable. */
char *cli_find_vocab(const char *name);

/* Parses a decimal unsigned integer with an optional K, M or G suffix
 * (binary multiples); rejects signs, junk and overflow.  Never atoi.
 * @return 0 with *out set, or -1. */
int cli_parse_u64(const char *s, uint64_t *out);

/* Seconds from a monotonic clock. */
double cli_now(void);

#ifdef __cplusplus
}
#endif

#endif
