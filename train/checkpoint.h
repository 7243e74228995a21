/*
 * checkpoint.h - mdstrain's checkpoints: Megatron's directory layout
 * (DIR/latest_checkpointed_iteration.txt, DIR/iter_%07d/mp_rank_XX[_YYY]/)
 * holding our own binary file, model_optim_rng.bin, specified byte for byte
 * in docs/formats.md ("mdstrain checkpoints").  One file per (TP, PP) rank:
 * a header with the model configuration and the training state, then the
 * rank's fp32 weights, AdamW m and AdamW v, each section with an FNV-1a 64
 * checksum.
 *
 * Crash safety: every file is written under a ".tmp" name, fsynced and
 * renamed over the final name, and its directory fsynced; the
 * latest_checkpointed_iteration.txt pointer is replaced the same way only
 * after the rank files are complete, so a crash mid-save leaves the last good
 * checkpoint intact.  Under model parallelism each rank calls
 * ckpt_save_rank() and rank 0 calls ckpt_write_latest() after a barrier.
 *
 * What it deliberately does not do: print, exit, resharding to another
 * TP/PP size, Megatron's .pt files, keeping or deleting old iterations.
 *
 * Error handling: functions return 0 or a negative enum ckpt_err and write a
 * one-line message naming the file (and the field) into err.
 * Thread safety: none needed; no global state.
 */
#ifndef MDS_CHECKPOINT_H
#define MDS_CHECKPOINT_H

#include "model.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_VERSION 2   /* writes 2; reads 1 (GPT-2 architecture implied) and 2 */
#define CKPT_FILE_NAME "model_optim_rng.bin"
#define CKPT_LATEST_NAME "latest_checkpointed_iteration.txt"

enum ckpt_err {
    CKPT_OK = 0,
    CKPT_ERR_IO = -1,        /* open, read, write, fsync, rename or mkdir failed */
    CKPT_ERR_FORMAT = -2,    /* bad magic, version, header or file size */
    CKPT_ERR_CHECKSUM = -3,  /* a section's or the header's checksum differs */
    CKPT_ERR_MISMATCH = -4,  /* the checkpoint's model differs from this model */
    CKPT_ERR_NOT_FOUND = -5, /* no latest_checkpointed_iteration.txt */
    CKPT_ERR_ARG = -6        /* a path too long, or a bad argument */
};

/*
 * ckpt_state - the training state besides the tensors.  There is no runtime
 * random state to keep: the data order and the dropout masks are functions
 * of the seed (stored in the model config) and the consumed samples.
 */
typedef struct ckpt_state {
    uint64_t iteration;              /* optimizer steps completed */
    uint64_t consumed_train_samples; /* Megatron's args.consumed_train_samples */
    uint64_t consumed_valid_samples; /* the validation iterator's position */
    /* Megatron's OptimizerParamScheduler, in samples */
    double max_lr, min_lr, init_lr, warmup_steps, decay_steps, num_steps;
    uint32_t decay_style;            /* 0 constant, 1 linear, 2 cosine */
    /* Megatron's grad scaler (--fp16); 1, 0, 0 without one */
    double loss_scale;
    uint32_t growth_tracker, hysteresis_tracker;
    /* DeepSpeed's config scheduler (1, else 0 and the rest unused): its
       last_batch_iteration and the optimizer's learning rates (the main and
       the decoupled group), which DeepSpeed restores with the optimizer */
    uint32_t ds_scheduler;
    double ds_last_batch_iteration, ds_lr, ds_lr_embed;
} ckpt_state;

/*
 * ckpt_rank_dir() - Megatron's per-rank directory of iteration `iteration`
 * into out: DIR/iter_%07d/mp_rank_%02d (tp_rank) when pp_size is 1, else
 * DIR/iter_%07d/mp_rank_%02d_%03d (tp_rank, pp_rank).
 * @return : 0, or CKPT_ERR_ARG when it does not fit in cap bytes.
 */
int ckpt_rank_dir(char *out, size_t cap, const char *dir, uint64_t iteration, const gpt_config *cfg);

/*
 * ckpt_save_rank() - write this rank's file of iteration st->iteration under
 * dir (created, with its parents, when missing), atomically.  The weights
 * are the model's fp32 masters, read through gpt_state_read; the AdamW
 * moments are adam_m and adam_v (host arrays of num_params floats, e.g. a
 * distributed optimizer's gathered shards) or, when NULL, the model's own
 * (which must then cover every element).  The AdamW step saved is m->step.
 * @return : 0, CKPT_ERR_IO, CKPT_ERR_ARG.
 */
int ckpt_save_rank(const char *dir, const gpt_model *m, const float *adam_m, const float *adam_v,
                   const ckpt_state *st, char *err, size_t errlen);

/* mkdir -p path.  @return : 0, CKPT_ERR_IO. */
int ckpt_make_dirs(const char *path, char *err, size_t errlen);

/*
 * ckpt_write_atomic() - write path + ".tmp" through emit(f, tmp name, ctx,
 * err, errlen) (which returns 0 or a CKPT_ERR code), fsync it, rename it over
 * path and fsync dirpath (the directory holding path); the .tmp file is
 * removed on failure.  The other formats' writers (torchdist.c) share it.
 * @return : 0, CKPT_ERR_IO, CKPT_ERR_ARG, or emit's code.
 */
int ckpt_write_atomic(const char *dirpath, const char *path,
                      int (*emit)(FILE *f, const char *tmp, void *ctx, char *err, size_t errlen), void *ctx,
                      char *err, size_t errlen);

/*
 * ckpt_write_latest() - replace dir/latest_checkpointed_iteration.txt with
 * the iteration as decimal text (no newline, as Megatron writes it),
 * atomically.  Call after every rank's file is complete.
 * @return : 0, CKPT_ERR_IO, CKPT_ERR_ARG.
 */
int ckpt_write_latest(const char *dir, uint64_t iteration, char *err, size_t errlen);

/*
 * ckpt_read_latest() - the iteration in dir/latest_checkpointed_iteration.txt.
 * @return : 0, CKPT_ERR_NOT_FOUND (no such file), CKPT_ERR_FORMAT (not a
 *           decimal iteration; Megatron's "release" is refused), CKPT_ERR_IO.
 */
int ckpt_read_latest(const char *dir, uint64_t *iteration, char *err, size_t errlen);

/*
 * ckpt_load_rank() - read this rank's file of `iteration` under dir into m
 * (weights through gpt_state_write, the AdamW step) and *st; the AdamW
 * moments go into adam_m and adam_v (host arrays of num_params floats) or,
 * when NULL, into the model (which must then cover every element).  m must
 * come from gpt_model_init() with the
 * same architecture: the layer count, hidden size, heads, FFN size,
 * positions, vocabulary (and its padding), tying and TP/PP grid are
 * checked field by field, then the sizes, then every checksum.  On failure
 * the contents of m's weights and optimizer state are unspecified (the
 * sections are read in place before their checksums are known).
 * @return : 0, CKPT_ERR_IO, CKPT_ERR_FORMAT, CKPT_ERR_CHECKSUM,
 *           CKPT_ERR_MISMATCH, CKPT_ERR_ARG.
 */
int ckpt_load_rank(const char *dir, uint64_t iteration, gpt_model *m, float *adam_m, float *adam_v,
                   ckpt_state *st, char *err, size_t errlen);

/* FNV-1a 64 of n bytes, continuing from h (start with CKPT_FNV_INIT). */
#define CKPT_FNV_INIT 0xcbf29ce484222325ull
uint64_t ckpt_fnv1a64(uint64_t h, const void *p, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* MDS_CHECKPOINT_H */
