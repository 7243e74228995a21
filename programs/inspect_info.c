/*
 * inspect_info.c - `mdsinspect info` (counts, dtype and sequence lengths from
 * the .idx alone) and `mdsinspect verify` (the reader's checks plus every
 * sequence pointer).
 */
#include "inspect.h"

#include <stdlib.h>
#include <string.h>

static const struct cli_option info_opts[] = {
    {"json", 0, CLI_ARG_NONE, O_JSON, NULL, "one JSON object per dataset, one per line"},
    OPT_HELP,
};
static const struct cli_option verify_opts[] = {
    {"json", 0, CLI_ARG_NONE, O_JSON, NULL, "one JSON object per dataset: {\"prefix\", \"ok\", \"error\"}"},
    {"quiet", 'q', CLI_ARG_NONE, O_QUIET, NULL, "print nothing for sound datasets"},
    OPT_HELP,
};

static int run_info(struct args *a)
{
    int failed = 0;
    for (size_t i = 0; i < a->npos; i++) {
        char *prefix = inspect_prefix(a->pos[i]);
        ds_reader *r = inspect_open(prefix);
        if (!r) {
            failed = 1;
            free(prefix);
            continue;
        }
        struct summary s;
        inspect_summarize(r, &s);
        int dt = ds_reader_dtype(r);
        uint64_t n = ds_reader_num_sequences(r), d = ds_reader_num_documents(r), t = ds_reader_num_tokens(r);
        uint64_t bin = t * ds_dtype_size(dt), idx = 34 + 12 * n + 8 * (d + 1);
        if (a->json) {
            printf("{\"prefix\":");
            json_cstr(stdout, prefix);
            printf(",\"dtype\":\"%s\",\"dtype_code\":%d,\"itemsize\":%zu,\"documents\":%llu,"
                   "\"empty_documents\":%llu,\"sequences\":%llu,\"empty_sequences\":%llu,\"tokens\":%llu,"
                   "\"bin_bytes\":%llu,\"idx_bytes\":%llu,",
                   ds_dtype_name(dt), dt, ds_dtype_size(dt), (ull)d, (ull)s.empty_docs, (ull)n,
                   (ull)s.empty_seqs, (ull)t, (ull)bin, (ull)idx);
            if (n)
                printf("\"min_sequence_length\":%llu,\"mean_sequence_length\":%.4f,\"max_sequence_length\":%llu}\n",
                       (ull)s.min_len, s.mean_len, (ull)s.max_len);
            else
                printf("\"min_sequence_length\":null,\"mean_sequence_length\":null,\"max_sequence_length\":null}\n");
        } else {
            printf("%s\n", prefix);
            printf("  dtype            %s (code %d, %zu bytes per token)\n", ds_dtype_name(dt), dt, ds_dtype_size(dt));
            printf("  documents        %llu\n", (ull)d);
            printf("  empty documents  %llu\n", (ull)s.empty_docs);
            printf("  sequences        %llu\n", (ull)n);
            printf("  empty sequences  %llu\n", (ull)s.empty_seqs);
            printf("  tokens           %llu\n", (ull)t);
            printf("  bin bytes        %llu\n", (ull)bin);
            printf("  idx bytes        %llu\n", (ull)idx);
            if (n)
                printf("  sequence length  min %llu  mean %.2f  max %llu\n", (ull)s.min_len, s.mean_len, (ull)s.max_len);
            else
                printf("  sequence length  (no sequences)\n");
        }
        ds_reader_close(r);
        free(prefix);
    }
    cli_check_stdout();
    return failed;
}

static int run_verify(struct args *a)
{
    int failed = 0;
    for (size_t i = 0; i < a->npos; i++) {
        char *prefix = inspect_prefix(a->pos[i]);
        ds_reader *r = NULL;
        int rc = ds_reader_open(prefix, &r);
        if (rc == 0)
            rc = ds_reader_verify(r);
        const char *msg = rc == 0 ? "" : r ? ds_reader_error(r) : ds_strerror(rc);
        if (rc != 0) {
            failed = 1;
            cli_error("%s", msg);
        }
        if (a->json) {
            printf("{\"prefix\":");
            json_cstr(stdout, prefix);
            if (rc == 0) {
                printf(",\"ok\":true}\n");
            } else {
                printf(",\"ok\":false,\"error\":");
                json_cstr(stdout, msg);
                printf("}\n");
            }
        } else if (rc == 0 && !a->quiet) {
            printf("%s: ok (%llu documents, %llu sequences, %llu tokens)\n", prefix,
                   (ull)ds_reader_num_documents(r), (ull)ds_reader_num_sequences(r),
                   (ull)ds_reader_num_tokens(r));
        }
        ds_reader_close(r);
        free(prefix);
    }
    cli_check_stdout();
    return failed;
}

const struct command inspect_info = {
    "info", "[options] PREFIX...", "counts, dtype and sequence lengths of datasets",
    "Print dtype, documents, empty documents, sequences, tokens, file sizes and the\n"
    "min/mean/max sequence length.  Only the .idx is read.",
    info_opts, NOPTS(info_opts), 0, 1, SIZE_MAX, run_info};

const struct command inspect_verify = {
    "verify", "[options] PREFIX...", "deep consistency check",
    "Check the header, sizes, document indices, lengths and every sequence pointer.\n"
    "Exit 0 when every dataset is sound, 1 (with the first problem) otherwise.",
    verify_opts, NOPTS(verify_opts), 0, 1, SIZE_MAX, run_verify};
