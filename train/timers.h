/*
 * timers.h - Megatron's timers (megatron/core/timers.py, Megatron-LM HEAD
 * d98e8a6) for mdstrain's --timing-log-level, --timing-log-option and
 * --no-barrier-with-level-1-timing.
 *
 * Each timer has Megatron's name and log level.  A timer whose level is
 * above the run's --timing-log-level is a dummy (starting and stopping it
 * does nothing, not even a sync); a live one syncs the backend when it
 * starts and when it stops (Megatron's torch.cuda.synchronize), after a
 * barrier over the world when asked (the level-1 timers with
 * barrier_with_L1_time, Megatron's default), and adds the wall time between
 * to its total.  mds_timers_log() gathers the totals of every rank (a
 * collective: every rank calls it with the same names), prints Megatron's
 * block on one rank, and resets them:
 *
 *   INFO:megatron.core.timers:(min, max) time across ranks (ms):
 *       forward-backward ...............................: (512.31, 512.40)
 *
 * (The prefix is Python logging's, as Megatron's training.py configures
 * it: logging.basicConfig with its stdout handler and the default format.)
 * The names a rank never timed are left out; names mds has no timer for
 * are left out everywhere, as Megatron leaves out timers never started.
 */
#ifndef MDS_TIMERS_H
#define MDS_TIMERS_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct mds_comm;

/* The timers mds runs, with Megatron's names (mds_timer_name) and levels. */
enum mds_timer {
    /* level 0: printed whatever the level */
    TM_MODEL_SETUP,          /* model-and-optimizer-setup (with the checkpoint's load) */
    TM_DATA_SETUP,           /* train/valid/test-data-iterators-setup */
    TM_LOAD_CHECKPOINT,      /* load-checkpoint */
    TM_SAVE_CHECKPOINT,      /* save-checkpoint */
    TM_EVALUATE,             /* evaluate */
    /* level 1 */
    TM_FORWARD_BACKWARD,     /* forward-backward: the schedule and the gradients' reduction */
    TM_EMBEDDING_GRADS,      /* embedding-grads-all-reduce */
    TM_ALL_GRADS_SYNC,       /* all-grads-sync: the data-parallel reduction */
    TM_PARAMS_ALL_GATHER,    /* params-all-gather (distributed optimizer, not overlapped) */
    TM_COPY_TO_MAIN_GRAD,    /* optimizer-copy-to-main-grad */
    TM_UNSCALE_CHECK_INF,    /* optimizer-unscale-and-check-inf (--fp16) */
    TM_INNER_STEP,           /* optimizer-inner-step */
    TM_OPTIMIZER,            /* optimizer */
    /* level 2 */
    TM_BATCH_GENERATOR,      /* batch-generator */
    TM_FORWARD_COMPUTE,      /* forward-compute */
    TM_BACKWARD_COMPUTE,     /* backward-compute */
    TM_FORWARD_RECV,         /* forward-recv */
    TM_FORWARD_SEND,         /* forward-send */
    TM_BACKWARD_RECV,        /* backward-recv */
    TM_BACKWARD_SEND,        /* backward-send */
    TM_FORWARD_SEND_BACKWARD_RECV,   /* forward-send-backward-recv */
    TM_BACKWARD_SEND_FORWARD_RECV,   /* backward-send-forward-recv */
    TM_COUNT
};

enum mds_timer_option { TM_OPTION_MINMAX, TM_OPTION_MAX, TM_OPTION_ALL };

/* Pass as a start's or stop's barrier: the run's barrier_l1. */
#define TM_BARRIER_L1 2

typedef struct mds_timers {
    int level;               /* --timing-log-level: 0, 1 or 2 */
    int option;              /* --timing-log-option */
    int barrier_l1;          /* not --no-barrier-with-level-1-timing */
    struct mds_comm *world;  /* the barriers and the gathers */
    int (*sync)(void);       /* the backend's: 0, or -1 with error() */
    const char *(*error)(void);
    double total[TM_COUNT], since[TM_COUNT];
    unsigned char started[TM_COUNT];
    char err[256];           /* a failed sync, barrier or gather */
} mds_timers;

/* Megatron's name of timer id; its level. */
const char *mds_timer_name(int id);
int mds_timer_level(int id);

/* "max", "minmax", "all": the option, or -1. */
int mds_timer_option(const char *name);

/* Megatron's training_log timers_to_log at level (1 or 2; 0: none), in
 * its order, names mds never times included (they print nothing). */
const char *const *mds_timers_to_log(int level, size_t *n);

void mds_timers_init(mds_timers *tm, int level, int option, int barrier_l1, struct mds_comm *world,
                     int (*sync)(void), const char *(*error)(void));

/* Start or stop timer id (tm may be NULL: nothing); barrier: 0, 1 or
 * TM_BARRIER_L1.  Starting a started timer or stopping a stopped one is a
 * programming error (abort), as Megatron asserts.  0, or -1 with tm->err. */
int mds_timers_start(mds_timers *tm, int id, int barrier);
int mds_timers_stop(mds_timers *tm, int id, int barrier);

/*
 * mds_timers_log() - Megatron's Timers.log(names, normalizer=normalizer,
 * reset=reset): every rank's totals of names gathered (collective over
 * tm->world), the block for tm->option written to out on rank print_rank
 * (Megatron: the last), nothing when no rank timed any of them.  Totals
 * are in seconds; the block shows milliseconds / normalizer.
 * @return : 0, or -1 with tm->err.
 */
int mds_timers_log(mds_timers *tm, const char *const *names, size_t n, double normalizer, int reset, int print_rank,
                   FILE *out);

/*
 * mds_timers_max() - what Megatron's Timers.write() gives TensorBoard: for
 * each name, the largest total over the ranks that timed it, in seconds /
 * normalizer (have[i] = 0 where none did).  Collective; resets nothing.
 */
int mds_timers_max(mds_timers *tm, const char *const *names, size_t n, double normalizer, double *max, int *have);

/*
 * mds_timers_format() - the block itself, pure: t holds the totals in
 * seconds as float32 (Megatron gathers a float tensor), world rows of n.
 * Writes at most cap bytes (NUL included) to buf and returns the length
 * the whole block needs (0: Megatron's None, nothing to print).  The
 * "INFO:megatron.core.timers:" prefix is not included.
 */
size_t mds_timers_format(char *buf, size_t cap, const float *t, int world, const char *const *names, size_t n,
                         double normalizer, int option);

#ifdef __cplusplus
}
#endif

#endif
