/*
 * timers.c - Megatron's timers for mdstrain (timers.h).
 */
#include "timers.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"

static const struct {
    const char *name;
    int level;
} TIMERS[TM_COUNT] = {
    [TM_MODEL_SETUP] = {"model-and-optimizer-setup", 0},
    [TM_DATA_SETUP] = {"train/valid/test-data-iterators-setup", 0},
    [TM_LOAD_CHECKPOINT] = {"load-checkpoint", 0},
    [TM_SAVE_CHECKPOINT] = {"save-checkpoint", 0},
    [TM_EVALUATE] = {"evaluate", 0},
    [TM_FORWARD_BACKWARD] = {"forward-backward", 1},
    [TM_EMBEDDING_GRADS] = {"embedding-grads-all-reduce", 1},
    [TM_ALL_GRADS_SYNC] = {"all-grads-sync", 1},
    [TM_PARAMS_ALL_GATHER] = {"params-all-gather", 1},
    [TM_COPY_TO_MAIN_GRAD] = {"optimizer-copy-to-main-grad", 1},
    [TM_UNSCALE_CHECK_INF] = {"optimizer-unscale-and-check-inf", 1},
    [TM_INNER_STEP] = {"optimizer-inner-step", 1},
    [TM_OPTIMIZER] = {"optimizer", 1},
    [TM_BATCH_GENERATOR] = {"batch-generator", 2},
    [TM_FORWARD_COMPUTE] = {"forward-compute", 2},
    [TM_BACKWARD_COMPUTE] = {"backward-compute", 2},
    [TM_FORWARD_RECV] = {"forward-recv", 2},
    [TM_FORWARD_SEND] = {"forward-send", 2},
    [TM_BACKWARD_RECV] = {"backward-recv", 2},
    [TM_BACKWARD_SEND] = {"backward-send", 2},
    [TM_FORWARD_SEND_BACKWARD_RECV] = {"forward-send-backward-recv", 2},
    [TM_BACKWARD_SEND_FORWARD_RECV] = {"backward-send-forward-recv", 2},
};

/* training.py's training_log: timers_to_log at levels 1 and 2, in order */
static const char *const TO_LOG[] = {
    "forward-backward",
    "layernorm-grads-all-reduce",
    "embedding-grads-all-reduce",
    "all-grads-sync",
    "params-all-gather",
    "optimizer-copy-to-main-grad",
    "optimizer-unscale-and-check-inf",
    "optimizer-clip-main-grad",
    "optimizer-count-zeros",
    "optimizer-inner-step",
    "optimizer-copy-main-to-model-params",
    "optimizer",
    /* level 2 */
    "batch-generator",
    "forward-compute",
    "backward-compute",
    "forward-recv",
    "forward-send",
    "backward-recv",
    "backward-send",
    "forward-send-forward-recv",
    "forward-send-backward-recv",
    "backward-send-forward-recv",
    "backward-send-backward-recv",
    "forward-backward-send-forward-backward-recv",
};
#define TO_LOG_L1 12

const char *mds_timer_name(int id) { return id >= 0 && id < TM_COUNT ? TIMERS[id].name : "?"; }
int mds_timer_level(int id) { return id >= 0 && id < TM_COUNT ? TIMERS[id].level : 3; }

int mds_timer_option(const char *name)
{
    if (strcmp(name, "minmax") == 0) return TM_OPTION_MINMAX;
    if (strcmp(name, "max") == 0) return TM_OPTION_MAX;
    if (strcmp(name, "all") == 0) return TM_OPTION_ALL;
    return -1;
}

const char *const *mds_timers_to_log(int level, size_t *n)
{
    *n = level >= 2 ? sizeof TO_LOG / sizeof *TO_LOG : level == 1 ? TO_LOG_L1 : 0;
    return TO_LOG;
}

void mds_timers_init(mds_timers *tm, int level, int option, int barrier_l1, struct mds_comm *world,
                     int (*sync)(void), const char *(*error)(void))
{
    memset(tm, 0, sizeof *tm);
    tm->level = level;
    tm->option = option;
    tm->barrier_l1 = barrier_l1;
    tm->world = world;
    tm->sync = sync;
    tm->error = error;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int failed(mds_timers *tm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failed(mds_timers *tm, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tm->err, sizeof tm->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Timer.start / Timer.stop's barrier and torch.cuda.synchronize() */
static int settle(mds_timers *tm, int id, int barrier)
{
    if (barrier == TM_BARRIER_L1) barrier = tm->barrier_l1;
    if (barrier && tm->world && comm_barrier(tm->world) < 0)
        return failed(tm, "the %s timer's barrier: %s", TIMERS[id].name, comm_error());
    if (tm->sync && tm->sync() != 0)
        return failed(tm, "the %s timer's sync: %s", TIMERS[id].name, tm->error ? tm->error() : "failed");
    return 0;
}

static int live(const mds_timers *tm, int id)
{
    if (id < 0 || id >= TM_COUNT) {
        fprintf(stderr, "mds: timer %d does not exist\n", id);
        abort();
    }
    return tm && TIMERS[id].level <= tm->level;
}

int mds_timers_start(mds_timers *tm, int id, int barrier)
{
    if (!live(tm, id)) return 0;
    if (tm->started[id]) {
        fprintf(stderr, "mds: the %s timer has already been started\n", TIMERS[id].name);
        abort();
    }
    if (settle(tm, id, barrier)) return -1;
    tm->since[id] = now();
    tm->started[id] = 1;
    return 0;
}

int mds_timers_stop(mds_timers *tm, int id, int barrier)
{
    if (!live(tm, id)) return 0;
    if (!tm->started[id]) {
        fprintf(stderr, "mds: the %s timer is not started\n", TIMERS[id].name);
        abort();
    }
    if (settle(tm, id, barrier)) return -1;
    tm->total[id] += now() - tm->since[id];
    tm->started[id] = 0;
    return 0;
}

static int find(const char *name)
{
    for (int i = 0; i < TM_COUNT; i++)
        if (strcmp(TIMERS[i].name, name) == 0) return i;
    return -1;
}

/* _get_elapsed_time_all_ranks: a (world, n) float32 table (its row for each
 * rank, summed over the world), the totals reset when asked (a running
 * timer keeps running, from now). */
static float *gather(mds_timers *tm, const char *const *names, size_t n, int reset, int *world)
{
    int w = tm->world ? comm_size(tm->world) : 1, r = tm->world ? comm_rank(tm->world) : 0;
    float *t = calloc((size_t)w * (n ? n : 1), sizeof *t);
    if (!t) {
        failed(tm, "the timers' gather: out of memory");
        return NULL;
    }
    double at = now();
    for (size_t i = 0; i < n; i++) {
        int id = find(names[i]);
        if (id < 0 || !live(tm, id)) continue;
        double total = tm->total[id] + (tm->started[id] ? at - tm->since[id] : 0.0);
        t[(size_t)r * n + i] = (float)total;
        if (reset) {
            tm->total[id] = 0.0;
            tm->since[id] = at;
        }
    }
    if (w > 1 && comm_allreduce(tm->world, t, (size_t)w * n, COMM_F32, COMM_SUM) < 0) {
        failed(tm, "the timers' gather: %s", comm_error());
        free(t);
        return NULL;
    }
    *world = w;
    return t;
}

/* _get_global_min_max_time for name i of the (world, n) table: the min and
 * max over the ranks with a time above 0; 0 when there is none. */
static int min_max(const float *t, int world, size_t n, size_t i, double *lo, double *hi)
{
    int have = 0;
    for (int r = 0; r < world; r++) {
        float v = t[(size_t)r * n + i];
        if (!(v > 0.0f)) continue;
        if (!have || v < *lo) *lo = v;
        if (!have || v > *hi) *hi = v;
        have = 1;
    }
    return have;
}

/* appends to buf (cap bytes) at *len, which counts what would be written */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(*len < cap ? buf + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
    va_end(ap);
    if (k > 0) *len += (size_t)k;
}

/* (name + ' ').ljust(48, '.') */
static void padded(char *buf, size_t cap, size_t *len, const char *name)
{
    size_t l = strlen(name) + 1;
    put(buf, cap, len, "%s ", name);
    for (; l < 48; l++) put(buf, cap, len, ".");
}

size_t mds_timers_format(char *buf, size_t cap, const float *t, int world, const char *const *names, size_t n,
                         double normalizer, int option)
{
    size_t len = 0;
    if (cap) buf[0] = '\0';
    /* get_all_timers_string passes normalizer / 1000.0: milliseconds */
    double norm = normalizer / 1000.0;
    if (option == TM_OPTION_ALL) {
        /* _get_all_ranks_time_string: float32 tensor elements over a Python
           float, which PyTorch's CUDA division takes as a product with the
           float reciprocal */
        float inv = 1.0f / (float)norm;
        int any = 0;
        put(buf, cap, &len, "times across ranks (ms):");
        for (size_t i = 0; i < n; i++) {
            int first = 1;
            for (int r = 0; r < world; r++) {
                float v = t[(size_t)r * n + i];
                if (!(v > 0.0f)) continue;
                any = 1;
                if (first) put(buf, cap, &len, "\n  %s:", names[i]);
                first = 0;
                float ms = v * inv;
                put(buf, cap, &len, "\n     rank %2d: %.2f", r, (double)ms);
            }
        }
        if (!any) {
            if (cap) buf[0] = '\0';
            return 0;
        }
        return len;
    }
    /* _get_global_min_max_time_string: the min and max as Python floats over
       the normalizer */
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        double lo = 0.0, hi = 0.0;
        if (!min_max(t, world, n, i, &lo, &hi)) continue;
        if (!any) put(buf, cap, &len, option == TM_OPTION_MAX ? "max time across ranks (ms):" : "(min, max) time across ranks (ms):");
        any = 1;
        put(buf, cap, &len, "\n    ");
        padded(buf, cap, &len, names[i]);
        if (option == TM_OPTION_MAX) put(buf, cap, &len, ": %.2f", hi / norm);
        else put(buf, cap, &len, ": (%.2f, %.2f)", lo / norm, hi / norm);
    }
    return any ? len : 0;
}

int mds_timers_log(mds_timers *tm, const char *const *names, size_t n, double normalizer, int reset, int print_rank,
                   FILE *out)
{
    int world;
    float *t = gather(tm, names, n, reset, &world);
    if (!t) return -1;
    int rank = tm->world ? comm_rank(tm->world) : 0;
    if (rank == print_rank) {
        size_t need = mds_timers_format(NULL, 0, t, world, names, n, normalizer, tm->option);
        char *s = need ? malloc(need + 1) : NULL;
        if (need && !s) {
            free(t);
            return failed(tm, "the timers' log: out of memory");
        }
        if (s) {
            mds_timers_format(s, need + 1, t, world, names, n, normalizer, tm->option);
            fprintf(out, "INFO:megatron.core.timers:%s\n", s);
            fflush(out);
            free(s);
        }
    }
    free(t);
    return 0;
}

int mds_timers_max(mds_timers *tm, const char *const *names, size_t n, double normalizer, double *max, int *have)
{
    int world;
    float *t = gather(tm, names, n, 0, &world);
    if (!t) return -1;
    for (size_t i = 0; i < n; i++) {
        double lo = 0.0;
        max[i] = 0.0;
        have[i] = min_max(t, world, n, i, &lo, &max[i]);
        if (have[i]) max[i] /= normalizer;
    }
    free(t);
    return 0;
}
