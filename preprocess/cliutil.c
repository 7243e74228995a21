/*
 * cliutil.c - helpers shared by mdsprep and mdsinspect; see cliutil.h.
 */
#include "cliutil.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
            return strdup(cand[i]);
    return NULL;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
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

const struct cli_option *cli_find_long(const struct cli_option *opts, size_t n,
                                       const char *name, size_t len, int *ambiguous)
{
    const struct cli_option *hit = NULL;
    int nhits = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(opts[i].lng, name, len) != 0)
            continue;
        if (opts[i].lng[len] == 0) {
            *ambiguous = 0;
            return &opts[i];
        }
        hit = &opts[i];
        nhits++;
    }
    *ambiguous = nhits > 1;
    return nhits == 1 ? hit : NULL;
}

void cli_print_options(const struct cli_option *opts, size_t n, int width)
{
    for (size_t i = 0; i < n; i++) {
        const struct cli_option *o = &opts[i];
        if (!o->help)
            continue;
        char left[128];
        int w = o->shrt ? snprintf(left, sizeof left, "-%c, ", o->shrt) : snprintf(left, sizeof left, "    ");
        snprintf(left + w, sizeof left - (size_t)w, "--%s%s%s", o->lng, o->meta ? " " : "", o->meta ? o->meta : "");
        if ((int)strlen(left) > width)
            printf("  %s\n  %-*s %s\n", left, width, "", o->help);
        else
            printf("  %-*s %s\n", width, left, o->help);
    }
}

int cli_looks_like_option(const char *s)
{
    return s[0] == '-' && s[1] && !(s[1] >= '0' && s[1] <= '9') && s[1] != '.';
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
