/*
 * cli.c - the command-line layer of the three tools; see cli.h.
 */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct cli_program cli = { "mds", NULL, 2, 0, 1, NULL, NULL };

/* ---- errors and exit ------------------------------------------------------- */

void cli_exit(int code)
{
    if (cli.cleanup)
        cli.cleanup();
    if (cli.exit_fn)
        cli.exit_fn(code);
    exit(code);
}

static atomic_int ending;

int cli_claim_end(void) { return atomic_exchange(&ending, 1) == 0; }

void cli_wait_for_end(void)
{
    for (;;)
        pause();
}

/* One whole line per call (one fprintf of a formatted buffer), so lines from
 * several threads or ranks do not interleave inside a line. */
static void vline(const char *fmt, va_list ap)
{
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "%s: %s\n", cli.name, msg);
}

void cli_die(int code, const char *fmt, ...)
{
    if (!cli_claim_end())
        cli_wait_for_end();   /* another thread is ending the program with its own line */
    fflush(stdout);
    if (cli.verbosity >= 1 || cli.errors_always) {
        va_list ap;
        va_start(ap, fmt);
        vline(fmt, ap);
        va_end(ap);
    }
    cli_exit(code);
}

void cli_usage(const char *fmt, ...)
{
    const char *command = cli.command;
    fflush(stdout);
    if (cli.speaks) {
        va_list ap;
        va_start(ap, fmt);
        vline(fmt, ap);
        va_end(ap);
        if (command)
            fprintf(stderr, "hint: see '%s %s --help'\n", cli.name, command);
        else
            fprintf(stderr, "hint: see '%s --help'\n", cli.name);
    }
    cli_exit(2);
}

void cli_error(const char *fmt, ...)
{
    if (cli.verbosity < 1)
        return;
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    vline(fmt, ap);
    va_end(ap);
}

void cli_note(const char *fmt, ...)
{
    if (cli.verbosity < 2)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void cli_check_stdout(void)
{
    if (fflush(stdout) != 0 || ferror(stdout))
        cli_die(1, "cannot write to stdout: %s", strerror(errno));
}

/* ---- allocation ---------------------------------------------------------------- */

static void out_of_memory(size_t n, const char *file, int line)
{
    fflush(stdout);
    fprintf(stderr, "%s: out of memory (%zu bytes) at %s:%d\n", cli.name, n, file, line);
    cli_exit(1);
}

void *cli_malloc_check(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory(n, file, line);
    return p;
}

void *cli_realloc_check(void *p, size_t n, const char *file, int line)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        out_of_memory(n, file, line);
    return q;
}

char *cli_strdup_check(const char *s, const char *file, int line)
{
    size_t n = strlen(s) + 1;
    return memcpy(cli_malloc_check(n, file, line), s, n);
}

/* ---- the parser ------------------------------------------------------------------- */

int cli_looks_like_option(const char *s)
{
    return s[0] == '-' && s[1] && !(s[1] >= '0' && s[1] <= '9') && s[1] != '.';
}

struct hit {
    const struct cli_table *t;
    const struct cli_option *o;
};

/* argparse's matching over every table: an exact name wins, else the only
 * row the name is a prefix of; several is bad usage. */
static struct hit find_long(const struct cli_table *tables, size_t nt, const char *name, size_t len)
{
    struct hit h = {0}, none = {0};
    int nhits = 0;
    for (size_t k = 0; k < nt; k++)
        for (size_t i = 0; i < tables[k].n; i++) {
            const struct cli_option *o = &tables[k].opts[i];
            if (strncmp(o->lng, name, len) != 0)
                continue;
            if (o->lng[len] == 0)
                return (struct hit){ &tables[k], o };
            h = (struct hit){ &tables[k], o };
            nhits++;
        }
    if (nhits > 1)
        cli_usage("ambiguous option '--%.*s'", (int)len, name);
    return nhits == 1 ? h : none;
}

static struct hit find_short(const struct cli_table *tables, size_t nt, char c)
{
    for (size_t k = 0; k < nt; k++)
        for (size_t i = 0; i < tables[k].n; i++)
            if (tables[k].opts[i].shrt == c)
                return (struct hit){ &tables[k], &tables[k].opts[i] };
    return (struct hit){0};
}

static void unknown(const char *arg)
{
    if (cli.command)
        cli_usage("unknown option '%s' for '%s'", arg, cli.command);
    cli_usage("unknown option '%s'", arg);
}

void cli_parse(const struct cli_table *tables, size_t nt, int argc, char **argv, int first,
               const struct cli_parse_opts *po)
{
    int only_pos = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || !cli_looks_like_option(a)) {
            if (po && po->positional) {
                po->positional(po->ctx, a);
                continue;
            }
            cli_usage("unexpected argument '%s'%s", a, po && po->positional_hint ? po->positional_hint : "");
        }
        if (strcmp(a, "--") == 0) {
            only_pos = 1;
            continue;
        }
        struct hit h;
        const char *val = NULL;
        int repeat = 1;
        if (a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            h = find_long(tables, nt, a + 2, len);
            if (!h.o)
                unknown(a);
            if (eq)
                val = eq + 1;
        } else {
            h = find_short(tables, nt, a[1]);
            if (!h.o)
                unknown(a);
            if (a[2] && h.o->arg != CLI_ARG_NONE) {
                val = a + 2;                       /* -j4 */
            } else if (a[2]) {
                for (const char *q = a + 2; *q; q++)   /* -vv, -qq */
                    if (*q != a[1])
                        unknown(a);
                repeat = (int)strlen(a + 1);
            }
        }
        const struct cli_option *o = h.o;
        if (o->id == CLI_REFUSED)
            cli_usage("option '--%s' is not supported %s", o->lng, o->help ? o->help : "by mds");
        if (o->arg == CLI_ARG_NONE && val)
            cli_usage("option '--%s' takes no value", o->lng);
        if (o->arg == CLI_ARG_NONE) {
            for (int r = 0; r < repeat; r++)
                h.t->handle(h.t->ctx, o, NULL, 0);
            continue;
        }
        if (o->arg == CLI_ARG_ONE) {
            if (!val) {
                if (i + 1 >= argc || cli_looks_like_option(argv[i + 1]))
                    cli_usage("option '--%s' needs a value", o->lng);
                val = argv[++i];
            }
            h.t->handle(h.t->ctx, o, &val, 1);
            continue;
        }
        /* CLI_ARG_MANY */
        if (val) {
            h.t->handle(h.t->ctx, o, &val, 1);
            continue;
        }
        int j = i + 1;
        while (j < argc && !cli_looks_like_option(argv[j]))
            j++;
        h.t->handle(h.t->ctx, o, (const char *const *)argv + i + 1, (size_t)(j - i - 1));
        i = j - 1;
    }
}

void cli_print_options(const struct cli_table *tables, size_t nt, int width)
{
    size_t nrefused = 0;
    for (size_t k = 0; k < nt; k++) {
        if (tables[k].title)
            printf("%s%s:\n", k ? "\n" : "", tables[k].title);
        for (size_t i = 0; i < tables[k].n; i++) {
            const struct cli_option *o = &tables[k].opts[i];
            if (o->id == CLI_REFUSED) {
                nrefused++;
                continue;
            }
            if (!o->help)
                continue;
            char left[160];
            int w = o->shrt ? snprintf(left, sizeof left, "-%c, ", o->shrt) : snprintf(left, sizeof left, "    ");
            snprintf(left + w, sizeof left - (size_t)w, "--%s%s%s", o->lng, o->meta ? " " : "", o->meta ? o->meta : "");
            if ((int)strlen(left) > width)
                printf("  %s\n  %-*s %s\n", left, width, "", o->help);
            else
                printf("  %-*s %s\n", width, left, o->help);
        }
    }
    if (!nrefused)
        return;
    /* One paragraph, wrapped at 78 columns. */
    printf("\nRefused by name with exit 2 (not implemented in mds):\n ");
    int col = 1;
    for (size_t k = 0; k < nt; k++)
        for (size_t i = 0; i < tables[k].n; i++) {
            const struct cli_option *o = &tables[k].opts[i];
            if (o->id != CLI_REFUSED)
                continue;
            int len = (int)strlen(o->lng) + 4;
            if (col + len > 78) {
                printf("\n ");
                col = 1;
            }
            printf(" --%s%s", o->lng, --nrefused ? "," : "");
            col += len;
        }
    putchar('\n');
}

/* ---- numbers ---------------------------------------------------------------------- */

/*
 * Python's int() and float() accept single underscores between digits
 * ("10_000", "1e1_0"), and Megatron's flags go through them: copies s into
 * buf without those underscores.  Any other underscore (leading, trailing,
 * doubled, next to a sign, point or exponent) is an error.
 * @return 0, or -1 (a misplaced underscore, or s longer than cap - 1).
 */
static int strip_underscores(const char *s, char *buf, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; s[i]; i++) {
        if (s[i] == '_') {
            if (i == 0 || !(s[i - 1] >= '0' && s[i - 1] <= '9') || !(s[i + 1] >= '0' && s[i + 1] <= '9'))
                return -1;
            continue;
        }
        if (n + 1 >= cap)
            return -1;
        buf[n++] = s[i];
    }
    buf[n] = 0;
    return 0;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    char buf[128];
    if (!s || *s < '0' || *s > '9' || strip_underscores(s, buf, sizeof buf) != 0)
        return -1;
    s = buf;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10, end++;
    else if (*end == 'M' || *end == 'm') shift = 20, end++;
    else if (*end == 'G' || *end == 'g') shift = 30, end++;
    if (*end)
        return -1;
    if (shift && v > (ULLONG_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

int cli_parse_int(const char *s, long *out)
{
    char trimmed[128], buf[128];
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n')) n--;
    if (n >= sizeof trimmed)
        return -1;
    memcpy(trimmed, s, n);
    trimmed[n] = 0;
    const char *d = trimmed + (trimmed[0] == '+' || trimmed[0] == '-');
    if (*d < '0' || *d > '9' || strip_underscores(trimmed, buf, sizeof buf) != 0)
        return -1;
    char *end;
    long v = strtol(buf, &end, 10);
    if (*end)
        return -1;
    *out = v;
    return 0;
}

uint64_t cli_opt_u64(const struct cli_option *o, const char *v, uint64_t lo, uint64_t hi)
{
    uint64_t x;
    if (cli_parse_u64(v, &x) != 0 || x < lo || x > hi)
        cli_usage("option '--%s' needs an integer in [%llu, %llu], got '%s'", o->lng,
                  (unsigned long long)lo, (unsigned long long)hi, v);
    return x;
}

double cli_opt_double(const struct cli_option *o, const char *v, double lo, double hi)
{
    char *end, buf[128];
    errno = 0;
    int bad = strip_underscores(v, buf, sizeof buf) != 0;
    double x = bad ? 0 : strtod(buf, &end);
    if (bad || errno || end == buf || *end || !isfinite(x) || x < lo || x > hi)
        cli_usage("option '--%s' needs a number in [%g, %g], got '%s'", o->lng, lo, hi, v);
    return x;
}

int cli_opt_choice(const struct cli_option *o, const char *v, const char *const *choices)
{
    size_t n = 0;
    for (; choices[n]; n++)
        if (strcmp(v, choices[n]) == 0)
            return (int)n;
    char list[512] = "";
    size_t len = 0;
    for (size_t i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ",
                                choices[i]);
    cli_usage("option '--%s' must be %s, got '%s'", o->lng, list, v);
}

/* ---- the bundled vocabulary ---------------------------------------------------------- */

char *cli_find_vocab(const char *name)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *env = getenv("MDS_VOCAB_DIR");
    char cand[6][PATH_MAX + 64];
    int nc = 0;
    if (env && *env)
        snprintf(cand[nc++], sizeof cand[0], "%s/%s", env, name);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        snprintf(cand[nc++], sizeof cand[0], "%s/../share/mds/vocab/%s", exe, name);
        snprintf(cand[nc++], sizeof cand[0], "%s/vocab/%s", exe, name);
        snprintf(cand[nc++], sizeof cand[0], "%s/../vocab/%s", exe, name);
        snprintf(cand[nc++], sizeof cand[0], "%s/../../vocab/%s", exe, name);
    }
#ifdef MDS_VOCAB_DIR
    snprintf(cand[nc++], sizeof cand[0], "%s/%s", MDS_VOCAB_DIR, name);
#endif
    for (int i = 0; i < nc; i++)
        if (access(cand[i], R_OK) == 0)
            return xstrdup(cand[i]);
    return NULL;
}

void cli_gpt2_files(const char *vocab_file, const char *merge_file, int required, char **vocab, char **merges)
{
    *vocab = vocab_file ? xstrdup(vocab_file) : cli_find_vocab("gpt2-vocab.json");
    *merges = merge_file ? xstrdup(merge_file) : cli_find_vocab("gpt2-merges.txt");
    if (*vocab && *merges)
        return;
    if (required || vocab_file || merge_file)
        cli_die(1, "cannot find the bundled '%s'; give --vocab-file and --merge-file (hint: set MDS_VOCAB_DIR)",
                *vocab ? "gpt2-merges.txt" : "gpt2-vocab.json");
    free(*vocab);
    free(*merges);
    *vocab = *merges = NULL;
}

/* ---- time and progress -------------------------------------------------------------- */

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_bar_init(struct cli_bar *b, int enabled, double delay)
{
    memset(b, 0, sizeof *b);
    b->enabled = enabled && isatty(2);
    b->start = cli_now();
    b->delay = delay;
}

int cli_bar_due(struct cli_bar *b)
{
    if (!b->enabled || cli.verbosity < 2)
        return 0;
    double t = cli_now();
    if (t - b->start < b->delay || t - b->last < 1.0 / 6)
        return 0;
    b->last = t;
    return 1;
}

void cli_bar_draw(struct cli_bar *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    b->shown = 1;
}

void cli_bar_clear(struct cli_bar *b)
{
    if (b->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        b->shown = 0;
    }
}
