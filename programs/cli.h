/*
 * cli.h - the command-line layer shared by mdsprep, mdsinspect and mdstrain:
 * the version, the program's identity and exit path, errors and notes, checked
 * allocation, one option-table type with ONE argv parser and --help printer,
 * checked number parsing, the bundled-vocabulary lookup, a clock and a
 * terminal progress line.
 *
 * Program-side code (programs/): it prints and exits on behalf of the three
 * mains, which the libraries (dataset/, preprocess/, kernels/, train/) never
 * do, and no library includes it.
 *
 * The parser follows Python's argparse, because mdsprep and mdstrain accept
 * Megatron's command lines unchanged (docs/cli.md):
 *  - long options may be abbreviated to a unique prefix (an exact name always
 *    wins) and written --opt=value; several tables are searched together;
 *  - an option with one value takes the next argument even when it starts
 *    with '-' only if it looks like a negative number ("-5", "-.5") or is
 *    "-" itself; anything else option-like is "needs a value";
 *  - a list option (CLI_ARG_MANY, argparse's nargs='+' / '*') takes the
 *    arguments up to the next option-like one; --opt=value gives a list of
 *    one; the handler sees the whole list on each occurrence, so "a repeated
 *    flag replaces the list" is the handler's plain assignment;
 *  - short options: -x, -xVALUE, -x VALUE, and a flag repeated in one word
 *    (-vv, -qq) counts as that many occurrences;
 *  - "--" ends the options (what follows is positional);
 *  - a row whose id is CLI_REFUSED is a flag mds knows and does not
 *    implement: using it is bad usage naming the flag (never ignored), and
 *    --help lists it with its reason.
 *
 * Exit status of every tool: 0 success, 1 runtime failure, 2 bad usage.
 * Thread safety: the error functions may be called from any thread (each
 * prints one whole line); the rest is for the main thread.
 */
#ifndef MDS_CLI_H
#define MDS_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The one version of the three tools. */
#define MDS_VERSION "0.2.0"

/* ---- the program ----------------------------------------------------------- */

/*
 * cli_program - who is speaking and how the program ends.  Each main sets
 * cli.name first.  command: a subcommand (mdsinspect), named in the hints
 * of usage errors and in "unknown option" messages.  verbosity: 0 nothing, 1 errors, 2 notes and progress (the
 * default), 3 -v, 4 -vv.  errors_always: fatal errors print even at
 * verbosity 0.  speaks: 0 suppresses usage messages (mdstrain's
 * ranks other than 0, which parse the same arguments).  cleanup runs before
 * every exit through cli_die/cli_usage (temporary files).  exit_fn, when
 * set, ends the program instead of exit() (mdstrain: end every rank).
 */
struct cli_program {
    const char *name;
    const char *command;   /* mdsinspect's subcommand once chosen, for hints */
    int verbosity;
    int errors_always;     /* cli_die prints even at verbosity 0 (mdstrain's -qq) */
    int speaks;
    void (*cleanup)(void);
    void (*exit_fn)(int code);
};
extern struct cli_program cli;

/* "PROG: message" on stderr (stdout flushed first), cleanup, exit with code.
 * Printed when verbosity >= 1 or errors_always. */
void cli_die(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));

/* Bad usage: "PROG: message" and "hint: see 'PROG[ COMMAND] --help'", exit 2. */
void cli_usage(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* "PROG: message" on stderr when verbosity >= 1; the program goes on. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A plain line on stderr when verbosity >= 2 (notes, Megatron's info lines). */
void cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Ends the program with code through cleanup and exit_fn, printing nothing. */
void cli_exit(int code) __attribute__((noreturn));

/* A thread about to print the program's last line and end it claims that:
 * 1 for the first caller, 0 for any later one, which must then print
 * nothing and wait for the end (cli_die does; so does mdstrain's collective
 * watchdog, so that a rank never ends with two lines). */
int cli_claim_end(void);

/* Never returns: for a thread that lost cli_claim_end while another ends
 * the process. */
void cli_wait_for_end(void) __attribute__((noreturn));

/* Flushes stdout; a write error there (a full disk, a closed pipe) is
 * "cannot write to stdout", exit 1. */
void cli_check_stdout(void);

/* ---- allocation ---------------------------------------------------------------- */

/* malloc/realloc that never return NULL: out of memory is one line naming the
 * size and the call site, exit 1 (llm.c's mallocCheck).  n == 0 is fine. */
void *cli_malloc_check(size_t n, const char *file, int line);
void *cli_realloc_check(void *p, size_t n, const char *file, int line);
char *cli_strdup_check(const char *s, const char *file, int line);
#define mallocCheck(n) cli_malloc_check((n), __FILE__, __LINE__)
#define reallocCheck(p, n) cli_realloc_check((p), (n), __FILE__, __LINE__)
#define xstrdup(s) cli_strdup_check((s), __FILE__, __LINE__)

/* Grows ptr (cap elements) to hold at least need elements, doubling. */
#define GROW(ptr, cap, need) do { \
        if ((need) > (cap)) { \
            size_t c_ = (cap) ? (cap) : 16; \
            while (c_ < (need)) c_ *= 2; \
            (ptr) = reallocCheck((ptr), c_ * sizeof *(ptr)); \
            (cap) = c_; \
        } \
    } while (0)

/* ---- option tables and the parser ------------------------------------------------ */

enum cli_arg {
    CLI_ARG_NONE,   /* a flag */
    CLI_ARG_ONE,    /* one value */
    CLI_ARG_MANY    /* a list of values (argparse nargs='+' / '*') */
};

/* The id of a row that is refused by name; its help text is the reason,
 * completing "option '--X' is not supported ...". */
#define CLI_REFUSED (-1)

/*
 * One row of an option table.  The table drives both the parser and --help.
 * help == NULL hides an accepted row from --help (compatibility flags that
 * change nothing).
 */
struct cli_option {
    const char *lng;    /* long name without "--" */
    char shrt;          /* short letter, 0 if none */
    int arg;            /* enum cli_arg */
    int id;             /* the program's own option id, or CLI_REFUSED */
    const char *meta;   /* value placeholder in --help, NULL if none */
    const char *help;
};

/*
 * A table and what handles its rows.  handle() gets the row and its values:
 * nvals 0 for a flag, 1 for a one-value option, >= 0 for a list (vals valid
 * only during the call: copy what you keep).  It reports bad values through
 * cli_usage itself.
 */
struct cli_table {
    const char *title;  /* a heading in --help, or NULL */
    const struct cli_option *opts;
    size_t n;
    void (*handle)(void *ctx, const struct cli_option *o, const char *const *vals, size_t nvals);
    void *ctx;
};

/*
 * How a command line is parsed.  positional: called for each positional
 * argument (NULL: a positional argument is bad usage, "unexpected argument
 * 'X'" followed by positional_hint when set).
 */
struct cli_parse_opts {
    void (*positional)(void *ctx, const char *arg);
    void *ctx;
    const char *positional_hint;
};

/* Parses argv[first, argc) against the tables (searched together, in order). */
void cli_parse(const struct cli_table *tables, size_t ntables, int argc, char **argv, int first,
               const struct cli_parse_opts *po);

/* --help: the visible rows of each table under its title ("-x, --long META"
 * padded to width, then the help text, on the next line when the left part
 * is wider), then one paragraph naming every refused flag. */
void cli_print_options(const struct cli_table *tables, size_t ntables, int width);

/* argparse's test for an option-like argument: "-x...", but not "-", a
 * negative number ("-5") or "-.5". */
int cli_looks_like_option(const char *s);

/* ---- numbers ---------------------------------------------------------------------- */

/* A decimal unsigned integer with an optional K, M or G suffix (binary
 * multiples); signs, junk and overflow rejected.  Single underscores
 * between digits are allowed, as Python's int() reads them ("10_000"; not
 * "_1", "1__0", "1_").  Never atoi.
 * @return 0 with *out set, or -1. */
int cli_parse_u64(const char *s, uint64_t *out);

/* Python's int() of s in base 10: spaces or tabs before it, spaces, tabs or
 * a newline after it, a sign, digits with single underscores between them
 * (as cli_parse_u64).  0 with *out set, or -1. */
int cli_parse_int(const char *s, long *out);

/* The value of option o as an integer in [lo, hi] (cli_parse_u64), or bad
 * usage: "option '--NAME' needs an integer in [lo, hi], got 'V'". */
uint64_t cli_opt_u64(const struct cli_option *o, const char *v, uint64_t lo, uint64_t hi);

/* The value of option o as a finite number in [lo, hi] (strtod, with
 * underscores between digits as Python's float() reads them), or bad
 * usage: "option '--NAME' needs a number in [lo, hi], got 'V'". */
double cli_opt_double(const struct cli_option *o, const char *v, double lo, double hi);

/* The index of v in the NULL-terminated list choices, or bad usage:
 * "option '--NAME' must be A, B or C, got 'V'". */
int cli_opt_choice(const struct cli_option *o, const char *v, const char *const *choices);

/* ---- the bundled vocabulary ---------------------------------------------------------- */

/* Path of the bundled vocabulary file `name` (gpt2-vocab.json or
 * gpt2-merges.txt): the first readable of $MDS_VOCAB_DIR/name, then, relative
 * to the running binary's directory, ../share/mds/vocab/name (installed),
 * vocab/name, ../vocab/name, ../../vocab/name (build trees), then the
 * compile-time MDS_VOCAB_DIR (PREFIX/share/mds/vocab).
 * @return a malloc'ed path the caller frees, or NULL if none is readable. */
char *cli_find_vocab(const char *name);

/* The GPT-2 files to use: the given paths (strdup'ed), or the bundled ones.
 * A missing bundled file is fatal (exit 1 with a hint) when required, else
 * both outputs are NULL.  The caller frees both. */
void cli_gpt2_files(const char *vocab_file, const char *merge_file, int required, char **vocab,
                    char **merges);

/* ---- time and progress -------------------------------------------------------------- */

/* Seconds from a monotonic clock. */
double cli_now(void);

/*
 * A one-line progress display on stderr (docs/cli.md): only on a terminal,
 * only once the work has run `delay` seconds, redrawn at most 6 times a
 * second, erased by cli_bar_clear (call it before printing other lines).
 */
struct cli_bar {
    int enabled, shown;
    double start, last, delay;
};
/* enabled: the caller's wish (e.g. not -q); the bar also needs a terminal. */
void cli_bar_init(struct cli_bar *b, int enabled, double delay);
/* Nonzero when a redraw is due now (then call cli_bar_draw). */
int cli_bar_due(struct cli_bar *b);
void cli_bar_draw(struct cli_bar *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_bar_clear(struct cli_bar *b);

#ifdef __cplusplus
}
#endif

#endif /* MDS_CLI_H */
