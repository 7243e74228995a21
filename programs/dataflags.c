/*
 * dataflags.c - Megatron's data-source flags for mdstrain and mdsinspect;
 * see dataflags.h.
 */
#include "dataflags.h"

#include <stdlib.h>
#include <string.h>

enum { DF_DATA_PATH = 1, DF_SPLIT, DF_CACHE, DF_MOCK, DF_TRAIN_PATH, DF_VALID_PATH, DF_TEST_PATH };

static const struct cli_option rows[] = {
    {"data-path", 0, CLI_ARG_MANY, DF_DATA_PATH, "[W1] P1 [W2 P2...]",
     "Megatron dataset prefixes, optionally weighted; split by --split"},
    {"split", 0, CLI_ARG_ONE, DF_SPLIT, "A,B,C", "train,valid,test weights of --data-path (default \"969, 30, 1\")"},
    {"train-data-path", 0, CLI_ARG_MANY, DF_TRAIN_PATH, "[W1] P1 [W2 P2...]",
     "the train split's own blend, each prefix used whole (instead of --data-path and --split)"},
    {"valid-data-path", 0, CLI_ARG_MANY, DF_VALID_PATH, "[W1] P1 [W2 P2...]", "the validation split's own blend"},
    {"test-data-path", 0, CLI_ARG_MANY, DF_TEST_PATH, "[W1] P1 [W2 P2...]", "the test split's own blend"},
    {"mock-data", 0, CLI_ARG_NONE, DF_MOCK, NULL, "Megatron's MockGPTDataset instead of a data path (split 1,1,1)"},
    {"data-cache-path", 0, CLI_ARG_ONE, DF_CACHE, "DIR",
     "read or write the sample-index cache (.npy files, Megatron's names) in DIR"},
};

int data_flags_cache_id(void) { return DF_CACHE; }

/* argparse nargs='*' on Megatron's side, but a list flag with nothing after
 * it names nothing: refused here rather than silently empty. */
static void set_list(const struct cli_option *o, const char ***dst, size_t *n, const char *const *vals, size_t nvals)
{
    if (nvals == 0)
        cli_usage("option '--%s' needs at least one path", o->lng);
    free(*dst);   /* a repeated flag replaces the list, as argparse does */
    *dst = mallocCheck(nvals * sizeof **dst);
    memcpy(*dst, vals, nvals * sizeof **dst);
    *n = nvals;
}

void data_flags_handle(void *ctx, const struct cli_option *o, const char *const *vals, size_t nvals)
{
    struct data_flags *df = ctx;
    switch (o->id) {
    case DF_DATA_PATH: set_list(o, &df->path, &df->npath, vals, nvals); break;
    case DF_TRAIN_PATH: case DF_VALID_PATH: case DF_TEST_PATH: {
        int s = o->id - DF_TRAIN_PATH;
        set_list(o, &df->split_path[s], &df->nsplit_path[s], vals, nvals);
        break;
    }
    case DF_SPLIT: df->split = vals[0]; break;
    case DF_CACHE: df->cache = vals[0]; break;
    case DF_MOCK: df->mock = 1; break;
    }
}

struct cli_table data_flags_table(struct data_flags *df)
{
    memset(df, 0, sizeof *df);
    return (struct cli_table){ "data", rows, sizeof rows / sizeof rows[0], data_flags_handle, df };
}

int data_flags_per_split(const struct data_flags *df)
{
    return df->nsplit_path[0] || df->nsplit_path[1] || df->nsplit_path[2];
}

void data_flags_check(const struct data_flags *df, int need_train)
{
    static const char per[] = "--train-data-path/--valid-data-path/--test-data-path";
    int ps = data_flags_per_split(df);
    if (df->mock && df->npath)
        cli_usage("--mock-data and --data-path are exclusive");
    if (ps && (df->mock || df->npath))
        cli_usage("%s and %s are exclusive", per, df->mock ? "--mock-data" : "--data-path");
    if (ps && df->split)
        cli_usage("--split does not apply to %s (each prefix is used whole)", per);
    if (!df->mock && !df->npath && !ps)
        cli_usage("missing --data-path (or --mock-data, or %s)", per);
    if (need_train && ps && !df->nsplit_path[0])
        cli_usage("missing --train-data-path (the valid and test paths do not train)");
}

void data_flags_apply(const struct data_flags *df, ds_gpt_config *c)
{
    c->data_path = df->path;
    c->n_data_path = df->npath;
    for (int s = 0; s < 3; s++) {
        c->split_data_path[s] = df->split_path[s];
        c->n_split_data_path[s] = df->nsplit_path[s];
    }
    if (df->split)
        c->split = df->split;
    c->cache_dir = df->cache;
    c->mock = df->mock;
}

void data_flags_describe(const struct data_flags *df, char *out, size_t cap)
{
    size_t l = 0;
#define PUT(...) do { if (l < cap) l += (size_t)snprintf(out + l, cap - l, __VA_ARGS__); } while (0)
    out[0] = 0;
    if (df->mock)
        PUT("mock (MockGPTDataset)");
    for (size_t i = 0; i < df->npath; i++)
        PUT("%s%s", i ? " " : "", df->path[i]);
    static const char *const names[3] = {"train", "valid", "test"};
    for (int s = 0; s < 3; s++) {
        if (df->nsplit_path[s])
            PUT("%s%s:", l ? "; " : "", names[s]);
        for (size_t i = 0; i < df->nsplit_path[s]; i++)
            PUT(" %s", df->split_path[s][i]);
    }
#undef PUT
}

void data_flags_release(struct data_flags *df)
{
    free(df->path);
    for (int s = 0; s < 3; s++)
        free(df->split_path[s]);
    memset(df, 0, sizeof *df);
}
