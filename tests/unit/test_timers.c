/*
 * test_timers.c - train/timers.c, Megatron's timers for mdstrain's
 * --timing-log-level: the block of every case of tests/data/timers/cases.txt
 * against golden.txt, which Megatron-LM's own timers.py printed through
 * Python logging (make_golden.py; README.md there); and the live timers on
 * one process: levels (a timer above the run's level neither syncs nor
 * counts), the syncs and totals of start and stop, reset, the log's
 * "INFO:megatron.core.timers:" line and nothing when no timer ran, and
 * TensorBoard's max.  (Across ranks and in mdstrain's output:
 * tests/cli/test_train.sh.)
 */
#include "harness.h"
#include "timers.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = '\0';
    fclose(f);
    return s;
}

/* golden.txt's block of case k (1-based), without its "== case k" line */
static char *golden_case(const char *golden, int k)
{
    char head[32];
    snprintf(head, sizeof head, "== case %d\n", k);
    const char *a = strstr(golden, head);
    if (!a) return NULL;
    a += strlen(head);
    const char *b = strstr(a, "== case ");
    size_t n = b ? (size_t)(b - a) : strlen(a);
    char *s = malloc(n + 1);
    memcpy(s, a, n);
    s[n] = '\0';
    return s;
}

static void test_golden_cases(void)
{
    char *cases = slurp("tests/data/timers/cases.txt"), *golden = slurp("tests/data/timers/golden.txt");
    CHECK(cases && golden);
    if (!cases || !golden) return;
    int k = 0, checked = 0;
    char *save = NULL;
    char *names[64];
    size_t n = 0;
    float t[8 * 64];
    int world = 0, rows = 0, option = 0;
    double normalizer = 1;
    /* each case runs when its last row is read */
    for (char *line = strtok_r(cases, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#' || !line[0]) continue;
        if (strncmp(line, "case ", 5) == 0) {
            char opt[16];
            CHECK(sscanf(line, "case %15s %lf %d", opt, &normalizer, &world) == 3);
            option = mds_timer_option(opt);
            CHECK(option >= 0 && world >= 1 && world <= 8);
            n = 0;
            rows = -1;
            k++;
            continue;
        }
        if (rows < 0) {
            char *s2 = NULL;
            for (char *w = strtok_r(line, " ", &s2); w && n < 64; w = strtok_r(NULL, " ", &s2)) names[n++] = w;
            rows = 0;
            continue;
        }
        char *p = line;
        for (size_t i = 0; i < n; i++) t[(size_t)rows * n + i] = (float)strtod(p, &p);
        if (++rows < world) continue;
        /* the whole block, then the log's line as Megatron's logger writes it */
        char want_line[8192] = "", got[4096];
        char *want = golden_case(golden, k);
        CHECK(want != NULL);
        size_t need = mds_timers_format(got, sizeof got, t, world, (const char *const *)names, n, normalizer, option);
        CHECK(need < sizeof got);
        if (need) snprintf(want_line, sizeof want_line, "INFO:megatron.core.timers:%s\n", got);
        if (want && strcmp(want, want_line) != 0)
            fprintf(stderr, "case %d:\nwant:\n%s\ngot:\n%s\n", k, want, want_line);
        CHECK(want && strcmp(want, want_line) == 0);
        /* a short buffer still gets the length and a terminated prefix */
        if (need) {
            char small[8];
            CHECK(mds_timers_format(small, sizeof small, t, world, (const char *const *)names, n, normalizer,
                                    option) == need);
            CHECK(strlen(small) == sizeof small - 1 && memcmp(small, got, sizeof small - 1) == 0);
        }
        free(want);
        checked++;
    }
    CHECK(checked == 7);
    free(cases);
    free(golden);
}

static int syncs, fail_sync;
static int fake_sync(void)
{
    syncs++;
    return fail_sync ? -1 : 0;
}
static const char *fake_error(void) { return "device lost"; }

static void spin(double seconds)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9 < seconds);
}

static void test_levels_and_totals(void)
{
    mds_timers tm;
    mds_timers_init(&tm, 1, TM_OPTION_MINMAX, 1, NULL, fake_sync, fake_error);
    syncs = 0;
    /* level 2 above the run's 1: a dummy */
    CHECK(mds_timers_start(&tm, TM_FORWARD_COMPUTE, 0) == 0);
    CHECK(mds_timers_stop(&tm, TM_FORWARD_COMPUTE, 0) == 0);
    CHECK(syncs == 0 && tm.total[TM_FORWARD_COMPUTE] == 0.0);
    /* a live one syncs twice and counts the time between, over calls */
    CHECK(mds_timers_start(&tm, TM_FORWARD_BACKWARD, TM_BARRIER_L1) == 0);
    spin(0.002);
    CHECK(mds_timers_stop(&tm, TM_FORWARD_BACKWARD, 0) == 0);
    CHECK(syncs == 2);
    double one = tm.total[TM_FORWARD_BACKWARD];
    CHECK(one >= 0.002 && one < 1.0);
    CHECK(mds_timers_start(&tm, TM_FORWARD_BACKWARD, 0) == 0);
    spin(0.001);
    CHECK(mds_timers_stop(&tm, TM_FORWARD_BACKWARD, 0) == 0);
    CHECK(tm.total[TM_FORWARD_BACKWARD] >= one + 0.001);
    /* NULL timers: nothing */
    CHECK(mds_timers_start(NULL, TM_EVALUATE, 1) == 0 && mds_timers_stop(NULL, TM_EVALUATE, 1) == 0);
    /* a failed sync is the timer's error */
    fail_sync = 1;
    CHECK(mds_timers_start(&tm, TM_OPTIMIZER, 0) == -1);
    CHECK(strstr(tm.err, "optimizer") && strstr(tm.err, "device lost"));
    CHECK(!tm.started[TM_OPTIMIZER]);
    fail_sync = 0;
}

static void test_log_and_reset(void)
{
    mds_timers tm;
    mds_timers_init(&tm, 2, TM_OPTION_MINMAX, 1, NULL, fake_sync, fake_error);
    size_t n;
    const char *const *names = mds_timers_to_log(2, &n);
    CHECK(n == 24 && strcmp(names[0], "forward-backward") == 0 && strcmp(names[11], "optimizer") == 0);
    CHECK(mds_timers_to_log(1, &n) == names && n == 12);
    CHECK(mds_timers_to_log(0, &n) && n == 0);
    /* every name mds times is on Megatron's list of its level, or a level-0 one */
    for (int id = 0; id < TM_COUNT; id++) {
        int found = mds_timer_level(id) == 0;
        names = mds_timers_to_log(2, &n);
        for (size_t i = 0; i < n; i++) found |= strcmp(names[i], mds_timer_name(id)) == 0;
        CHECK(found);
    }
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    names = mds_timers_to_log(2, &n);
    /* nothing ran: no line */
    CHECK(mds_timers_log(&tm, names, n, 1.0, 1, 0, f) == 0);
    CHECK(ftell(f) == 0);
    CHECK(mds_timers_start(&tm, TM_BACKWARD_COMPUTE, 0) == 0);
    spin(0.001);
    CHECK(mds_timers_stop(&tm, TM_BACKWARD_COMPUTE, 0) == 0);
    double max[24];
    int have[24];
    CHECK(mds_timers_max(&tm, names, n, 2.0, max, have) == 0);
    for (size_t i = 0; i < n; i++) {
        int bc = strcmp(names[i], "backward-compute") == 0;
        CHECK(have[i] == bc);
        /* seconds over the normalizer, as a float32 total */
        if (bc) CHECK(max[i] == (double)(float)tm.total[TM_BACKWARD_COMPUTE] / 2.0);
    }
    CHECK(mds_timers_log(&tm, names, n, 1.0, 1, 0, f) == 0);
    /* print_rank elsewhere: nothing printed, and the reset happened anyway */
    CHECK(mds_timers_log(&tm, names, n, 1.0, 1, 5, f) == 0);
    CHECK(tm.total[TM_BACKWARD_COMPUTE] == 0.0);
    char buf[512] = "";
    rewind(f);
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    buf[got] = '\0';
    CHECK(strncmp(buf, "INFO:megatron.core.timers:(min, max) time across ranks (ms):\n"
                       "    backward-compute ...............................: (", 114) == 0);
    CHECK(strchr(buf, '\n') && strchr(strchr(buf, '\n') + 1, '\n') == buf + got - 1);
    fclose(f);
}

int main(void)
{
    RUN(test_golden_cases);
    RUN(test_levels_and_totals);
    RUN(test_log_and_reset);
    return harness_report();
}
