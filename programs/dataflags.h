/*
 * dataflags.h - Megatron's data-source flags, declared once for the two
 * tools that build training samples (mdstrain and `mdsinspect samples`):
 * --data-path, --split, --train-data-path / --valid-data-path /
 * --test-data-path, --data-cache-path and --mock-data, with Megatron's
 * semantics (docs/cli.md) and one set of rules about which go together.
 *
 * Program-side code: errors are cli_usage (exit 2).  The values point into
 * argv; the lists are the caller's to release with data_flags_release.
 */
#ifndef MDS_DATAFLAGS_H
#define MDS_DATAFLAGS_H

#include "cli.h"
#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

struct data_flags {
    const char **path;             /* --data-path tokens: "P..." or "W1 P1 W2 P2..." */
    size_t npath;
    const char **split_path[3];    /* --train/valid/test-data-path tokens */
    size_t nsplit_path[3];
    const char *split;             /* --split, NULL: the library's default "969, 30, 1" */
    const char *cache;             /* --data-cache-path */
    int mock;                      /* --mock-data */
};

/* A table (its rows are static) whose handler fills df (zeroed first). */
struct cli_table data_flags_table(struct data_flags *df);

/* The handler itself, for a program that adds an alias row of its own
 * (mdsinspect's --cache): o->id must be one of the table's ids. */
void data_flags_handle(void *df, const struct cli_option *o, const char *const *vals, size_t nvals);

/* The id of --data-cache-path's row (for such an alias). */
int data_flags_cache_id(void);

/* Megatron's rules: --mock-data, --data-path and the per-split paths exclude
 * one another, --split goes only with --data-path, one source is required
 * and, when need_train, the per-split form names a train path.  Bad usage
 * otherwise. */
void data_flags_check(const struct data_flags *df, int need_train);

/* Copies the source into the pipeline configuration (data_path, split,
 * per-split paths, cache_dir, mock); df must outlive c's use. */
void data_flags_apply(const struct data_flags *df, ds_gpt_config *c);

/* "mock (MockGPTDataset)", the prefixes, or "train: A B; valid: C", for
 * configuration tables; truncated to cap. */
void data_flags_describe(const struct data_flags *df, char *out, size_t cap);

/* Nonzero when the per-split form is used. */
int data_flags_per_split(const struct data_flags *df);

void data_flags_release(struct data_flags *df);

#ifdef __cplusplus
}
#endif

#endif /* MDS_DATAFLAGS_H */
