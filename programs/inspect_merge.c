/*
 * inspect_merge.c - `mdsinspect merge`: Megatron's tools/merge_datasets.py,
 * the same bytes, through the dataset library's writer (temporary names,
 * removed on error and on signals, renamed when complete).
 */
#include "inspect.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct cli_option merge_opts[] = {
    {"input", 'i', CLI_ARG_MANY, O_INPUT, "PATH...", "dataset prefixes, or a directory: all its .bin/.idx pairs in sorted order"},
    {"output-prefix", 'o', CLI_ARG_ONE, O_OUTPUT_PREFIX, "PREFIX", "write PREFIX.bin and PREFIX.idx"},
    {"quiet", 'q', CLI_ARG_NONE, O_QUIET, NULL, "no summary line"},
    OPT_HELP,
};

static int by_strcmp(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Python's os.path.splitext on a base name: the extension starts at the last
   dot, unless everything before that dot is dots (".bashrc" has none). */
static size_t splitext_len(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return strlen(name);
    for (const char *p = name; p < dot; p++)
        if (*p != '.')
            return (size_t)(dot - name);
    return strlen(name);
}

/*
 * Megatron's merge_datasets.py directory scan: every regular file's prefix
 * (its name without extension) must have both PREFIX.bin and PREFIX.idx; the
 * prefixes are merged in sorted() order, which for UTF-8 names is strcmp's
 * byte order.  Appends "DIR/PREFIX" strings to out.
 */
static void expand_directory(const char *dir, char ***out, size_t *nout, size_t *cap)
{
    DIR *d = opendir(dir);
    if (!d)
        cli_die(1, "cannot open directory '%s': %s", dir, strerror(errno));
    size_t first = *nout;
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;   /* "shards/" joins as "shards/x", not "shards//x" */
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        size_t nl = strlen(e->d_name), pl = splitext_len(e->d_name);
        char *path = mallocCheck(dl + nl + 6);
        snprintf(path, dl + nl + 6, "%.*s/%s", (int)dl, dir, e->d_name);
        if (!is_file(path)) {
            free(path);
            continue;
        }
        const char *ext = e->d_name + pl;
        path[dl + 1 + pl] = 0;   /* now DIR/PREFIX */
        int seen = 0;
        for (size_t i = first; i < *nout && !seen; i++)
            seen = strcmp((*out)[i], path) == 0;
        if (seen) {
            free(path);
            continue;
        }
        const char *pair = strcmp(ext, ".idx") == 0 ? ".bin" : ".idx";
        strcat(path, pair);
        if (!is_file(path))
            cli_die(1, "cannot merge '%s': '%.*s/%s' has no '%s' beside it (every file there must belong to a .bin/.idx pair)",
                dir, (int)dl, dir, e->d_name, pair);
        path[dl + 1 + pl] = 0;
        GROW(*out, *cap, *nout + 1);
        (*out)[(*nout)++] = path;
    }
    closedir(d);
    if (*nout == first)
        cli_die(1, "cannot merge '%s': the directory holds no .bin/.idx pair", dir);
    qsort(*out + first, *nout - first, sizeof **out, by_strcmp);
}

static int run_merge(struct args *a)
{
    if (a->npos == 0)
        cli_usage("missing --input");
    if (!a->output)
        cli_usage("missing --output-prefix");
    char **prefixes = NULL;
    size_t np = 0, cap = 0;
    for (size_t i = 0; i < a->npos; i++) {
        struct stat st;
        if (stat(a->pos[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            expand_directory(a->pos[i], &prefixes, &np, &cap);
        } else {
            GROW(prefixes, cap, np + 1);
            prefixes[np++] = inspect_prefix(a->pos[i]);
        }
    }

    /* Everything is opened and checked before anything is written. */
    ds_reader **rs = mallocCheck(np * sizeof *rs);
    for (size_t i = 0; i < np; i++) {
        rs[i] = inspect_open_or_die(prefixes[i]);
        if (ds_reader_dtype(rs[i]) != ds_reader_dtype(rs[0]))
            cli_die(1, "cannot merge '%s.idx' (dtype %s) after '%s.idx' (dtype %s): all inputs need the same dtype",
                prefixes[i], ds_dtype_name(ds_reader_dtype(rs[i])), prefixes[0], ds_dtype_name(ds_reader_dtype(rs[0])));
    }

    ds_writer *w = NULL;
    if (ds_writer_open(a->output, ds_reader_dtype(rs[0]), &w) != 0)
        cli_die(1, "%s", ds_writer_error(w));
    inspect_register_temps(w);

    for (size_t i = 0; i < np; i++)
        if (ds_writer_add_dataset(w, rs[i]) != 0)
            cli_die(1, "%s", ds_writer_error(w));
    if (ds_writer_finalize(w) != 0)
        cli_die(1, "%s", ds_writer_error(w));
    inspect_forget_temps();
    if (!a->quiet)
        fprintf(stderr, "%s: merged %zu dataset%s into '%s': %llu documents, %llu sequences, %llu tokens (%s)\n",
                cli.name, np, np == 1 ? "" : "s", a->output, (ull)ds_writer_num_documents(w),
                (ull)ds_writer_num_sequences(w), (ull)ds_writer_num_tokens(w), ds_dtype_name(ds_reader_dtype(rs[0])));
    ds_writer_free(w);
    for (size_t i = 0; i < np; i++) {
        ds_reader_close(rs[i]);
        free(prefixes[i]);
    }
    free(rs);
    free(prefixes);
    return 0;
}

const struct command inspect_merge = {
    "merge", "--input A B... --output-prefix C  |  --input DIR --output-prefix C",
    "concatenate datasets like Megatron's tools/merge_datasets.py",
    "Append the inputs in the order given (a directory contributes every .bin/.idx\n"
    "pair in it, in Python sorted() order; every file there must have its pair).\n"
    "All inputs must have the same dtype.  Document boundaries are kept and the\n"
    "output is byte-identical to Megatron's merge of the same inputs in the same\n"
    "order.  Inputs may also be plain arguments: merge A B -o C.",
    merge_opts, NOPTS(merge_opts), 0, 0, SIZE_MAX, run_merge};
