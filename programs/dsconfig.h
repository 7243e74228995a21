/*
 * dsconfig.h - Megatron-DeepSpeed's --deepspeed_config file read for what it
 * means to mdstrain: the batch sizes (DeepSpeed's rule train_batch_size =
 * micro x gradient accumulation x data-parallel size), gradient clipping,
 * the ZeRO stage (1 and 2 become the distributed optimizer, 3 is refused),
 * fp16/bf16 and their loss-scaler settings.  docs/cli.md lists every key
 * and what becomes of it.
 *
 * The JSON is read by jsontree.h as Python's json.load reads it, with
 * DeepSpeed's duplicate-key check (a repeated key in any object is an
 * error): RFC 8259 values, UTF-8 strings, NaN/Infinity accepted as Python
 * does; a lone surrogate or a \u0000 (which Python accepts) is refused.  A key this file does not
 * know is an error naming it (DeepSpeed would ignore it silently); keys
 * that only steer logging, profiling or performance are accepted.
 *
 * The "scheduler" section is read for DeepSpeed's WarmupLR and
 * WarmupDecayLR (what the caller does with it: docs/cli.md).
 *
 * What it deliberately does not do: DeepSpeed's "optimizer" section and its
 * other schedulers (OneCycle, LRRangeTest, WarmupCosineLR, torch's; refused
 * by name), ZeRO-3, NVMe offload, elasticity.
 *
 * Program-side code: errors are returned as one line in err, never printed.
 */
#ifndef MDS_DSCONFIG_H
#define MDS_DSCONFIG_H

#include "trainer.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the file says; have_* is 0 where a key is absent. */
typedef struct ds_config {
    int have_train_batch, have_micro, have_gas, have_clip, have_stage;
    uint64_t train_batch_size, micro_batch, gas;
    double clip;                  /* gradient_clipping (DeepSpeed's default 0: no clipping) */
    int stage;                    /* zero_optimization.stage (default 0) */
    int fp16, bf16;               /* "enabled" of the fp16 / bf16 sections */
    /* fp16's loss scaler, as written (-1 where absent): DeepSpeed's
       loss_scale (0 = dynamic), initial_scale_power, loss_scale_window,
       hysteresis, min_loss_scale */
    double loss_scale, initial_scale_power, loss_scale_window, hysteresis, min_loss_scale;
    /* "scheduler": WarmupLR or WarmupDecayLR (type TRAIN_DS_NONE when absent
       or without a "type", as DeepSpeed then takes Megatron's scheduler) */
    train_ds_schedule sched;
    char sched_warning[160];      /* DeepSpeed's warning for an unknown warmup_type, or "" */
    char refused[160];            /* the first key refused by name ("optimizer", ...), or "" */
} ds_config;

/*
 * ds_config_read() - parse path into *c.  A key that mds refuses is not an
 * error here: c->refused names it, so the caller words the refusal.
 * @return : 0; -1 with a message in err (unreadable file: *io set; bad JSON
 *           or a bad value: *io clear).
 */
int ds_config_read(const char *path, ds_config *c, int *io, char *err, size_t errlen);

/*
 * ds_config_batch() - DeepSpeed's _configure_train_batch_size with
 * data-parallel size dp: whichever two of train batch, micro batch and
 * gradient accumulation are given yield the third (one alone: accumulation
 * 1), then train = micro x gas x dp must hold.
 * @return : 0 with *train, *micro, *gas; -1 with DeepSpeed's message in err.
 */
int ds_config_batch(const ds_config *c, uint64_t dp, uint64_t *train, uint64_t *micro, uint64_t *gas, char *err,
                    size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* MDS_DSCONFIG_H */
