/*
 * cliutil.h - small helpers shared by the command-line programs (mdsprep,
 * mdsinspect): the default-vocabulary lookup, a checked number parser and a
 * monotonic clock.  Program-side code, not part of any library API: nothing
 * here prints or exits either, so each program keeps its own die().
 */
#ifndef MDS_CLIUTIL_H
#define MDS_CLIUTIL_H

#include <stddef.h>
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

/* One row of a program's option table (STYLE 38): the table drives both
 * the parser and --help.  help == NULL hides a row from --help (accepted
 * compatibility flags, or flags refused by name). */
enum cli_arg { CLI_ARG_NONE, CLI_ARG_ONE, CLI_ARG_MANY };
struct cli_option {
    const char *lng;    /* long name without "--" */
    char shrt;          /* short letter, 0 if none */
    int arg;            /* enum cli_arg */
    int id;             /* the program's own option id */
    const char *meta;   /* value placeholder in --help, NULL if none */
    const char *help;
};

/* argparse's long-option matching: the row whose name equals
 * name[0, len), else the only row it is a prefix of.  @return that row, or
 * NULL with *ambiguous set to 1 when several rows share the prefix (0 when
 * none matches). */
const struct cli_option *cli_find_long(const struct cli_option *opts, size_t n,
                                       const char *name, size_t len, int *ambiguous);

/* Prints the visible rows of an option table for --help on stdout, one per
 * line: "-x, --long META" padded to `width`, then the help text (on the next
 * line when the left part is wider). */
void cli_print_options(const struct cli_option *opts, size_t n, int width);

/* argparse's test for an option-like argument: "-x…", but not "-", a
 * negative number ("-5") or "-.5". */
int cli_looks_like_option(const char *s);

/* Seconds from a monotonic clock. */
double cli_now(void);

#ifdef __cplusplus
}
#endif

#endif
