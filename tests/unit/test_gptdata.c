/*
 * test_gptdata.c - unit tests of the training-data pipeline (dataset/gptdata.c,
 * gptcache.c, pyemu.c, npy.c): numpy RandomState, MD5, .npy headers, split rounding,
 * weight normalization, blending, the spec's worked GPTDataset example, and
 * the golden index arrays Megatron-Core itself wrote (tests/data/indices/,
 * configs A, C, D in both v0.8.0 and main flavours, and the per-split
 * config E that Megatron-Core 0.16.1 wrote) reproduced element for element,
 * per-split data paths against --split builds and their errors, plus the cache (Megatron's names, mmap reuse, rebuild on a
 * mismatching description) and property tests (coverage, split boundaries,
 * blend ratios), and MockGPTDataset: numpy's PCG64/SeedSequence/Lemire
 * integers, and the mock pipeline against tests/data/mock/reference.txt.
 *
 * Run from the repository root.  The dev dataset's .bin is not in
 * tests/data: a sparse file of the right size stands in for it (building
 * indices reads only the .idx), unless ../shared/data/golden holds the real
 * one, in which case its first-5 samples are checked too.  Everything goes
 * under a mkdtemp directory, removed at the end.  B1/B2 are checked by
 * tests/cli/test_samples.sh against their sha256 sums.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "dataset_internal.h"
#include "harness.h"
#include "readfile.h"

static char g_root[PATH_MAX];
static char g_dir[PATH_MAX];
static int g_have_dev_bin;

/* ---- RandomState, md5, npy, split, weights ---- */

static void test_random_state(void)
{
    ds_random_state rs;
    ds_random_seed(&rs, 1234);
    static const uint32_t want[5] = {822569775u, 2137449171u, 2671936806u, 3512589365u, 1880026316u};
    for (int i = 0; i < 5; i++)
        CHECK(ds_random_next32(&rs) == want[i]);
    ds_random_seed(&rs, 5489);
    CHECK(ds_random_next32(&rs) == 3499211612u);
    int32_t a[10];
    for (int i = 0; i < 10; i++)
        a[i] = i;
    ds_random_seed(&rs, 1234);
    ds_random_shuffle(&rs, a, 10, 4);
    static const int32_t perm[10] = {7, 2, 9, 1, 0, 8, 4, 5, 6, 3};
    CHECK(memcmp(a, perm, sizeof a) == 0);
    /* the element size does not change the permutation */
    int64_t b[10];
    for (int i = 0; i < 10; i++)
        b[i] = i;
    ds_random_seed(&rs, 1234);
    ds_random_shuffle(&rs, b, 10, 8);
    for (int i = 0; i < 10; i++)
        CHECK(b[i] == perm[i]);
    ds_random_seed(&rs, 7);
    for (int i = 0; i < 1000; i++)
        CHECK(ds_random_interval(&rs, 5) <= 5);
    CHECK(ds_random_interval(&rs, 0) == 0);
}

static void test_md5(void)
{
    char h[33];
    ds_md5_hex(h, "", 0);
    CHECK(strcmp(h, "d41d8cd98f00b204e9800998ecf8427e") == 0);
    ds_md5_hex(h, "abc", 3);
    CHECK(strcmp(h, "900150983cd24fb0d6963f7d28e17f72") == 0);
    ds_md5_hex(h, "message digest", 14);
    CHECK(strcmp(h, "f96b697d7cb7938d525a2f31aaf161d0") == 0);
    const char *s = "12345678901234567890123456789012345678901234567890123456789012345678901234567890";
    ds_md5_hex(h, s, strlen(s));
    CHECK(strcmp(h, "57edf4a22be3c955ac49da2e2107b67a") == 0);
    s = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    ds_md5_hex(h, s, strlen(s));
    CHECK(strcmp(h, "d174ab98d277d9f5a5611c2c9f419d9f") == 0);
}

static void test_npy_header(void)
{
    char buf[256];
    uint64_t shape[2] = {27948, 2};
    size_t n = ds_npy_header(buf, sizeof buf, "<i4", shape, 1);
    CHECK(n == 128);
    CHECK(buf[8] == 118 && buf[9] == 0);
    CHECK(memcmp(buf + 10, "{'descr': '<i4', 'fortran_order': False, 'shape': (27948,), }", 61) == 0);
    CHECK(buf[127] == '\n' && buf[126] == ' ');
    n = ds_npy_header(buf, sizeof buf, "<i8", shape, 2);
    CHECK(n == 128);
    CHECK(memcmp(buf + 10, "{'descr': '<i8', 'fortran_order': False, 'shape': (27948, 2), }", 63) == 0);
}

static void test_split_ranges(void)
{
    uint64_t b[3], e[3];
    int pr[3];
    CHECK(ds_split_ranges("969,30,1", 12345, b, e, pr) == 0);
    CHECK(b[0] == 0 && e[0] == 11962 && b[1] == 11962 && e[1] == 12333 && b[2] == 12333 && e[2] == 12345);
    CHECK(ds_split_ranges("969, 30, 1", 7, b, e, pr) == 0);
    CHECK(e[0] == 7 && b[1] == 7 && e[1] == 7 && b[2] == 7 && e[2] == 7);
    CHECK(ds_split_ranges("1,1,1", 7, b, e, pr) == 0);
    CHECK(e[0] == 2 && e[1] == 5 && e[2] == 7);
    CHECK(ds_split_ranges("90,5,5", 65, b, e, pr) == 0);   /* 58.5 -> 58 (half to even) */
    CHECK(e[0] == 58 && e[1] == 62 && e[2] == 65);
    CHECK(ds_split_ranges("90,5,5", 210, b, e, pr) == 0);  /* 199.5 -> 200 */
    CHECK(e[0] == 189 && e[1] == 200);
    CHECK(ds_split_ranges("98,2,0", 100, b, e, pr) == 0);
    CHECK(pr[0] && pr[1] && !pr[2]);
    CHECK(ds_split_ranges("98", 100, b, e, pr) == 0);
    CHECK(pr[0] && !pr[1] && !pr[2] && e[0] == 100);
    CHECK(ds_split_ranges("0,0,0", 100, b, e, pr) == DS_ERR_ARG);
    CHECK(ds_split_ranges("1,1,1,1", 100, b, e, pr) == DS_ERR_ARG);
    CHECK(ds_split_ranges("1..2", 100, b, e, pr) == DS_ERR_ARG);
}

static void test_weights_and_counts(void)
{
    double w[3] = {0.5, 0.25, 0.25};
    CHECK(ds_normalize_weights(w, 3) == 0);
    CHECK(w[0] == 0.5 && w[1] == 0.25);
    double z[2] = {1, 0};
    CHECK(ds_normalize_weights(z, 2) == DS_ERR_ARG);
    /* numpy's order for 17 values: eight lanes (lane 0 = 1e16 + 1, lanes
       1-7 = 1 + 1), combined as a tree, then the 17th value; a left-to-right
       sum would lose every 1.0 against 1e16 */
    double v[17];
    v[0] = 1e16;
    for (int i = 1; i < 17; i++)
        v[i] = 1.0;
    double vs[17];
    memcpy(vs, v, sizeof v);
    CHECK(ds_normalize_weights(vs, 17) == 0);
    volatile double lane0 = 1e16 + 1.0;
    double tree = ((lane0 + 2.0) + (2.0 + 2.0)) + ((2.0 + 2.0) + (2.0 + 2.0));
    CHECK(tree + 1.0 != 1e16);
    CHECK(vs[1] == 1.0 / (tree + 1.0));
    int64_t c[3];
    CHECK(ds_sample_counts(c, 0, 1000, 8, 10, 100, 0) == 0);
    CHECK(c[0] == 8000 && c[1] == 11 * 10 * 8 && c[2] == 80);
    CHECK(ds_sample_counts(c, 20000, 0, 16, 10, 500, 0) == 0);
    CHECK(c[0] == 20000 && c[1] == (1250 / 500 + 1) * 10 * 16 && c[2] == 160);
}

static void test_blending_spec(void)
{
    double w[2] = {0.3, 0.7};
    int16_t di[12];
    int64_t dsi[12], count[3];
    ds_build_blending_indices(di, dsi, 12, w, 2, count);
    static const int16_t wdi[12] = {1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1};
    static const int64_t wdsi[12] = {0, 0, 1, 2, 1, 3, 4, 2, 5, 6, 3, 7};
    CHECK(memcmp(di, wdi, sizeof di) == 0);
    CHECK(memcmp(dsi, wdsi, sizeof dsi) == 0);
    uint64_t lens[3] = {3, 5, 2};
    ds_build_exhaustive_blending_indices(di, dsi, lens, 3, count);
    static const int16_t edi[10] = {1, 0, 2, 1, 0, 1, 2, 1, 0, 1};
    static const int64_t edsi[10] = {0, 0, 0, 1, 1, 2, 1, 3, 2, 4};
    CHECK(memcmp(di, edi, sizeof edi) == 0);
    CHECK(memcmp(dsi, edsi, sizeof edsi) == 0);
}

/* Property: blend counts track the weights within one sample at every prefix. */
static void test_blend_ratios(void)
{
    double w[3] = {0.2, 0.5, 0.3};
    enum { N = 100000 };
    int16_t *di = malloc(N * sizeof *di);
    int64_t *dsi = malloc(N * sizeof *dsi), count[3] = {0, 0, 0}, seen[3] = {0, 0, 0};
    ds_build_blending_indices(di, dsi, N, w, 3, count);
    double worst = 0;
    for (int s = 0; s < N; s++) {
        CHECK(dsi[s] == seen[di[s]]);
        seen[di[s]]++;
        for (int d = 0; d < 3; d++) {
            double dev = fabs((double)seen[d] - w[d] * (s + 1));
            if (dev > worst)
                worst = dev;
        }
    }
    CHECK(worst <= 1.5);
    for (int d = 0; d < 3; d++)
        CHECK(fabs((double)count[d] / N - w[d]) < 1e-4);
    free(di);
    free(dsi);
}

/* ---- the spec's worked example (§4.6) on a dataset written here ---- */

static void write_dataset(const char *prefix, const uint32_t *lens, size_t n, uint32_t eod)
{
    ds_writer *w = NULL;
    CHECK(ds_writer_open(prefix, DS_DTYPE_UINT16, &w) == 0);
    uint32_t tok[64];
    for (size_t i = 0; i < n; i++) {
        for (uint32_t k = 0; k < lens[i]; k++)
            tok[k] = k + 1 == lens[i] ? eod : (uint32_t)(100 * i + k);
        CHECK(ds_writer_add_document(w, tok, lens[i], &lens[i], 1) == 0);
    }
    CHECK(ds_writer_finalize(w) == 0);
    ds_writer_free(w);
}

static ds_pipeline *open_single(const char *prefix, const char *split, uint64_t L, int64_t ns,
                                const char *cache)
{
    const char *dp[1] = {prefix};
    ds_gpt_config c;
    ds_gpt_config_init(&c);
    c.data_path = dp;
    c.n_data_path = 1;
    c.split = split;
    c.seq_length = L;
    c.num_samples[0] = ns;
    c.num_samples[1] = c.num_samples[2] = 0;
    c.cache_dir = cache;
    ds_pipeline *p = NULL;
    int rc = ds_pipeline_open(&c, &p);
    if (rc != 0) {
        fprintf(stderr, "ds_pipeline_open: %s\n", ds_pipeline_error(p));
        ds_pipeline_close(p);
        return NULL;
    }
    return p;
}

static void test_spec_example(void)
{
    static const uint32_t lens[10] = {5, 3, 8, 2, 7, 4, 6, 1, 9, 3};
    char prefix[PATH_MAX + 16];
    snprintf(prefix, sizeof prefix, "%s/spec", g_dir);
    write_dataset(prefix, lens, 10, 50256);
    ds_pipeline *p = open_single(prefix, "1", 4, 5, NULL);
    CHECK(p != NULL);
    if (!p)
        return;
    ds_gpt_info g;
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_TRAIN, 0, &g) == 0);
    CHECK(g.tokens_per_epoch == 48 && g.num_epochs == 1 && !g.separate_final_epoch);
    static const int32_t doc[10] = {7, 2, 9, 1, 0, 8, 4, 5, 6, 3};
    static const int32_t sample[24] = {0, 0, 1, 3, 1, 7, 3, 0, 4, 1, 5, 0, 5, 4, 5, 8, 6, 3, 7, 0, 8, 0, 8, 4};
    static const uint32_t shuf[11] = {3, 10, 2, 1, 7, 5, 4, 0, 8, 6, 9};
    CHECK(g.document_index.n == 10 && memcmp(g.document_index.data, doc, sizeof doc) == 0);
    CHECK(g.sample_index.n == 12 && !strcmp(g.sample_index.descr, "<i4") &&
          memcmp(g.sample_index.data, sample, sizeof sample) == 0);
    CHECK(g.shuffle_index.n == 11 && memcmp(g.shuffle_index.data, shuf, sizeof shuf) == 0);
    CHECK(ds_pipeline_length(p, DS_SPLIT_TRAIN) == 11);
    CHECK(!ds_pipeline_has_split(p, DS_SPLIT_VALID));
    /* sample 0 = shuffle 3 = rows (3,0)..(4,1): doc 1 (3 tokens) + 2 of doc 0 */
    int64_t text[5], tokens[4], labels[4], pos[4];
    float mask[4];
    uint8_t att[16];
    CHECK(ds_pipeline_text(p, DS_SPLIT_TRAIN, 0, text, NULL) == 0);
    CHECK(text[0] == 100 && text[1] == 101 && text[2] == 50256 && text[3] == 0 && text[4] == 1);
    ds_pipeline_close(p);

    p = open_single(prefix, "1", 4, 30, NULL);
    CHECK(p != NULL);
    if (!p)
        return;
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_TRAIN, 0, &g) == 0);
    CHECK(g.num_epochs == 3 && g.separate_final_epoch);
    static const int32_t doc30[30] = {3, 3, 2, 6, 4, 5, 4, 0, 8, 8, 7, 1, 0, 9, 7, 1, 9, 2, 6, 5,
                                      8, 1, 7, 6, 9, 5, 4, 3, 0, 2};
    static const int32_t sample30[72] = {0, 0, 2, 0, 2, 4, 3, 0, 3, 4, 4, 2, 4, 6, 5, 3, 6, 3, 7, 0, 7, 4, 8, 3,
                                         8, 7, 9, 2, 9, 6, 11, 0, 12, 1, 13, 0, 15, 0, 16, 1, 17, 2, 17, 6,
                                         18, 2, 19, 0, 20, 0, 20, 4, 20, 8, 22, 0, 23, 3, 24, 1, 25, 2, 26, 2,
                                         26, 6, 28, 1, 29, 0, 29, 4};
    static const uint32_t shuf30[35] = {6, 19, 20, 5, 8, 15, 4, 22, 10, 13, 14, 18, 1, 12, 17, 2, 3, 16, 21, 9,
                                        0, 11, 7, 25, 26, 33, 32, 29, 34, 24, 31, 28, 23, 27, 30};
    CHECK(g.document_index.n == 30 && memcmp(g.document_index.data, doc30, sizeof doc30) == 0);
    CHECK(g.sample_index.n == 36 && memcmp(g.sample_index.data, sample30, sizeof sample30) == 0);
    CHECK(g.shuffle_index.n == 35 && memcmp(g.shuffle_index.data, shuf30, sizeof shuf30) == 0);
    ds_pipeline_close(p);

    /* masks: a sample with an EOD inside */
    const char *dp[1] = {prefix};
    ds_gpt_config c;
    ds_gpt_config_init(&c);
    c.data_path = dp;
    c.n_data_path = 1;
    c.split = "1";
    c.seq_length = 4;
    c.num_samples[0] = 5;
    c.eod_mask_loss = c.reset_position_ids = c.reset_attention_mask = 1;
    CHECK(ds_pipeline_open(&c, &p) == 0);
    /* sample 0: text 100 101 EOD 0 1 */
    CHECK(ds_pipeline_sample(p, DS_SPLIT_TRAIN, 0, tokens, labels, mask, pos, att) == 0);
    CHECK(tokens[0] == 100 && tokens[2] == 50256 && labels[0] == 101 && labels[3] == 1);
    CHECK(mask[0] == 1 && mask[1] == 1 && mask[2] == 0 && mask[3] == 1);
    CHECK(pos[0] == 0 && pos[1] == 1 && pos[2] == 2 && pos[3] == 0);
    static const uint8_t watt[16] = {0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0};
    CHECK(memcmp(att, watt, sizeof watt) == 0);
    CHECK(ds_pipeline_sample(p, DS_SPLIT_TRAIN, 11, tokens, NULL, NULL, NULL, NULL) == DS_ERR_RANGE);
    ds_pipeline_close(p);
}

/* An empty split is an error, not Megatron's endless loop. */
static void test_empty_split(void)
{
    static const uint32_t lens[7] = {5, 3, 8, 2, 7, 4, 6};
    char prefix[PATH_MAX + 16];
    snprintf(prefix, sizeof prefix, "%s/seven", g_dir);
    write_dataset(prefix, lens, 7, 50256);
    const char *dp[1] = {prefix};
    ds_gpt_config c;
    ds_gpt_config_init(&c);
    c.data_path = dp;
    c.n_data_path = 1;
    c.seq_length = 4;
    c.num_samples[0] = 10;
    c.num_samples[1] = c.num_samples[2] = 8;
    ds_pipeline *p = NULL;
    CHECK(ds_pipeline_open(&c, &p) == DS_ERR_EMPTY);
    CHECK(strstr(ds_pipeline_error(p), "valid split") != NULL);
    CHECK(strstr(ds_pipeline_error(p), "loop forever") != NULL);
    ds_pipeline_close(p);
    c.seq_length = 1;
    CHECK(ds_pipeline_open(&c, &p) == DS_ERR_ARG);
    ds_pipeline_close(p);
    CHECK(ds_pipeline_open(NULL, &p) == DS_ERR_ARG);
    ds_pipeline_close(p);
    ds_pipeline_close(NULL);
}

/* ---- golden arrays from Megatron-Core (tests/data/indices) ---- */

/* The run directory mirrors Megatron's: golden/<name>_text_document.{idx,bin}
   (links to tests/data/golden; dev gets a sparse .bin of the right size
   unless ../shared holds the real one), so descriptions carry the same
   relative "golden/..." paths. */
static int make_run_dir(void)
{
    char path[PATH_MAX * 2], target[PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/golden", g_dir);
    if (mkdir(path, 0755) != 0)
        return -1;
    static const char *const names[3] = {"dev", "tiny", "edge"};
    for (int i = 0; i < 3; i++) {
        for (int b = 0; b < 2; b++) {
            const char *ext = b ? "bin" : "idx";
            snprintf(path, sizeof path, "%s/golden/%s_text_document.%s", g_dir, names[i], ext);
            snprintf(target, sizeof target, "%s/tests/data/golden/%s_text_document.%s", g_root, names[i], ext);
            if (i == 0 && b) {
                char shared[PATH_MAX * 2];
                snprintf(shared, sizeof shared, "%s/../shared/data/golden/dev_text_document.bin", g_root);
                if (access(shared, R_OK) == 0) {
                    g_have_dev_bin = 1;
                    if (symlink(shared, path) != 0)
                        return -1;
                    continue;
                }
                /* sparse stand-in: Σ lengths × 2 bytes (uint16) */
                size_t n;
                char idxpath[PATH_MAX * 2];
                snprintf(idxpath, sizeof idxpath, "%s/tests/data/golden/dev_text_document.idx", g_root);
                uint8_t *m = (uint8_t *)read_file_or_null(idxpath, &n);
                if (!m || n < 34)
                    return -1;
                uint64_t N = ds_load_le64(m + 18), tok = 0;
                for (uint64_t k = 0; k < N && 34 + 4 * k + 4 <= n; k++)
                    tok += ds_load_le32(m + 34 + 4 * k);
                size_t item = m[17] == DS_DTYPE_UINT16 ? 2 : 4;
                free(m);
                int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
                if (fd < 0 || ftruncate(fd, (off_t)(tok * item)) != 0)
                    return -1;
                close(fd);
                continue;
            }
            if (symlink(target, path) != 0)
                return -1;
        }
    }
    return chdir(g_dir);
}

static const char *ds_name(const char *path)
{
    return strstr(path, "dev_") ? "dev" : strstr(path, "tiny_") ? "tiny" : "edge";
}

/* Compares a view with tests/data/indices/<cfg>[/main]/<file>: dtype,
   shape and every element. */
static int same_as_golden(const char *cfg, int main_flavour, const char *file, const ds_array *a)
{
    char path[PATH_MAX * 2];
    ds_npy g;
    char err[DS_ERRMSG_SIZE];
    int rc = -1;
    if (main_flavour) {
        snprintf(path, sizeof path, "%s/tests/data/indices/%s/main/%s", g_root, cfg, file);
        rc = ds_npy_load(&g, path, err);
    }
    if (rc != 0) {
        snprintf(path, sizeof path, "%s/tests/data/indices/%s/%s", g_root, cfg, file);
        if (ds_npy_load(&g, path, err) != 0) {
            fprintf(stderr, "%s\n", err);
            return 0;
        }
    }
    size_t item = (size_t)(g.descr[2] - '0');
    uint64_t count = g.shape[0] * (g.ndim == 2 ? g.shape[1] : 1);
    int ok = !strcmp(g.descr, a->descr) && g.shape[0] == a->n && (g.ndim == 2 ? g.shape[1] : 1) == a->cols &&
             memcmp(g.data, a->data, (size_t)count * item) == 0;
    if (!ok)
        fprintf(stderr, "  %s%s/%s: golden %s (%llu, %d), ours %s (%llu, %u)\n", cfg,
                main_flavour ? "/main" : "", file, g.descr, (unsigned long long)g.shape[0], g.ndim,
                a->descr, (unsigned long long)a->n, a->cols);
    ds_npy_release(&g);
    return ok;
}

static int same_text(const char *cfg, int main_flavour, const char *file, const char *text)
{
    char path[PATH_MAX * 2];
    size_t n;
    char *want = NULL;
    if (main_flavour) {
        snprintf(path, sizeof path, "%s/tests/data/indices/%s/main/%s", g_root, cfg, file);
        want = (char *)read_file_or_null(path, &n);
    }
    if (!want) {
        snprintf(path, sizeof path, "%s/tests/data/indices/%s/%s", g_root, cfg, file);
        want = (char *)read_file_or_null(path, &n);
    }
    int ok = want && strcmp(want, text) == 0;
    if (!ok)
        fprintf(stderr, "  %s: description differs\n", file);
    free(want);
    return ok;
}

/* The first-5 samples JSON: for each sample whose data is here (tiny,
   edge; dev only with ../shared), the seq_length+1 ids must match. */
static void check_first5(const char *cfg, const ds_pipeline *p)
{
    char path[PATH_MAX * 2];
    size_t n;
    snprintf(path, sizeof path, "%s/tests/data/indices/%s/train-first5-samples.json", g_root, cfg);
    char *js = (char *)read_file_or_null(path, &n);
    CHECK(js != NULL);
    if (!js)
        return;
    uint64_t L = ds_pipeline_seq_length(p);
    int64_t *text = malloc((L + 1) * sizeof *text);
    char *s = strstr(js, "\"samples\"");
    int checked = 0;
    for (uint64_t k = 0; s && k < 5; k++) {
        char *obj = strstr(s, "{\"index\"");
        if (!obj)
            break;
        char *next = strstr(obj + 1, "{\"index\"");
        long long d = 0;
        char *did = strstr(obj, "\"dataset_id\": ");
        if (did && (!next || did < next))
            d = atoll(did + 14);
        char *t = strstr(obj, "\"text\": [");
        CHECK(t != NULL);
        if (!t)
            break;
        ds_sample_origin o;
        CHECK(ds_pipeline_text(p, DS_SPLIT_TRAIN, k, text, &o) == 0);
        CHECK((long long)o.dataset == d);
        ds_gpt_info g;
        CHECK(ds_pipeline_dataset(p, DS_SPLIT_TRAIN, o.dataset, &g) == 0);
        if (strcmp(ds_name(g.path), "dev") != 0 || g_have_dev_bin) {
            char *q = t + 9;
            int same = 1;
            for (uint64_t i = 0; i <= L; i++) {
                long long v = strtoll(q, &q, 10);
                if (v != text[i])
                    same = 0;
                while (*q == ',' || *q == ' ')
                    q++;
            }
            CHECK(same && *q == ']');
            checked++;
        }
        s = obj + 1;
    }
    CHECK(checked > 0 || !strcmp(cfg, "A"));
    free(text);
    free(js);
}

/* Every golden config is built on 1, 2 and the default number of threads:
   the datasets are built in parallel and must not depend on it. */
static int g_threads;

static void check_golden(const char *cfg, const ds_gpt_config *c);

static void run_golden(const char *cfg, int version, const char *const *dp, size_t ndp, uint64_t L,
                       uint32_t seed, const char *split, int64_t s0, int64_t s1, int64_t s2)
{
    ds_gpt_config c;
    ds_gpt_config_init(&c);
    c.num_threads = g_threads;
    c.data_path = dp;
    c.n_data_path = ndp;
    c.seq_length = L;
    c.seed = seed;
    c.split = split;
    c.num_samples[0] = s0;
    c.num_samples[1] = s1;
    c.num_samples[2] = s2;
    c.megatron_version = version;
    c.vocab_file = "vocab/gpt2-vocab.json";
    c.merge_file = "vocab/gpt2-merges.txt";
    check_golden(cfg, &c);
}

/* Builds c and compares every dataset of every split with the golden files
   of cfg; a split has a blend exactly when the golden set has one. */
static void check_golden(const char *cfg, const ds_gpt_config *c)
{
    ds_pipeline *p = NULL;
    int rc = ds_pipeline_open(c, &p);
    CHECK(rc == 0);
    if (rc != 0) {
        fprintf(stderr, "  %s: %s\n", cfg, ds_pipeline_error(p));
        ds_pipeline_close(p);
        return;
    }
    int mainf = c->megatron_version == DS_MEGATRON_MAIN;
    for (int s = 0; s < 3; s++) {
        static const char *const sn[3] = {"train", "valid", "test"};
        for (size_t d = 0; d < ds_pipeline_num_datasets(p); d++) {
            int owner = ds_pipeline_dataset_split(p, d);
            if (owner >= 0 && owner != s)
                continue;
            ds_gpt_info g;
            CHECK(ds_pipeline_dataset(p, s, d, &g) == 0);
            char f[128];
            const char *nm = ds_name(g.path);
            snprintf(f, sizeof f, "%s-%s-document_index.npy", nm, sn[s]);
            CHECK(same_as_golden(cfg, mainf, f, &g.document_index));
            snprintf(f, sizeof f, "%s-%s-sample_index.npy", nm, sn[s]);
            CHECK(same_as_golden(cfg, mainf, f, &g.sample_index));
            snprintf(f, sizeof f, "%s-%s-shuffle_index.npy", nm, sn[s]);
            CHECK(same_as_golden(cfg, mainf, f, &g.shuffle_index));
            snprintf(f, sizeof f, "%s-%s-description.txt", nm, sn[s]);
            CHECK(same_text(cfg, mainf, f, g.description));
        }
        char gold[PATH_MAX * 2];
        snprintf(gold, sizeof gold, "%s/tests/data/indices/%s/blend-%s-dataset_index.npy", g_root, cfg, sn[s]);
        int want_blend = access(gold, R_OK) == 0;
        ds_array di, dsi;
        const char *desc;
        CHECK((ds_pipeline_blend(p, s, &di, &dsi, &desc, NULL) == 0) == want_blend);
        if (want_blend) {
            char f[128];
            snprintf(f, sizeof f, "blend-%s-dataset_index.npy", sn[s]);
            CHECK(same_as_golden(cfg, mainf, f, &di));
            snprintf(f, sizeof f, "blend-%s-dataset_sample_index.npy", sn[s]);
            CHECK(same_as_golden(cfg, mainf, f, &dsi));
            snprintf(f, sizeof f, "blend-%s-description.txt", sn[s]);
            CHECK(same_text(cfg, mainf, f, desc));
        }
    }
    check_first5(cfg, p);
    ds_pipeline_close(p);
}

static const char *const dp_a[] = {"golden/dev_text_document"};
static const char *const dp_c[] = {"0.3", "golden/dev_text_document", "0.7", "golden/tiny_text_document"};
static const char *const dp_d[] = {"0.5", "golden/dev_text_document", "0.25", "golden/edge_text_document",
                                   "0.25", "golden/tiny_text_document"};

static void test_golden_a(void)
{
    for (g_threads = 0; g_threads <= 2; g_threads++) {
        run_golden("A", DS_MEGATRON_0_8, dp_a, 1, 1024, 1234, "969,30,1", 20000, 640, 64);
        run_golden("A", DS_MEGATRON_MAIN, dp_a, 1, 1024, 1234, "969,30,1", 20000, 640, 64);
    }
    g_threads = 0;
}

static void test_golden_c(void)
{
    for (g_threads = 0; g_threads <= 2; g_threads++) {
        run_golden("C", DS_MEGATRON_0_8, dp_c, 4, 256, 1234, "98,1,1", 5000, 100, 10);
        run_golden("C", DS_MEGATRON_MAIN, dp_c, 4, 256, 1234, "98,1,1", 5000, 100, 10);
    }
    g_threads = 0;
}

static void test_golden_d(void)
{
    for (g_threads = 0; g_threads <= 2; g_threads++) {
        run_golden("D", DS_MEGATRON_0_8, dp_d, 6, 2048, 1234, "90,5,5", 5000, 100, 10);
        run_golden("D", DS_MEGATRON_MAIN, dp_d, 6, 2048, 1234, "90,5,5", 5000, 100, 10);
    }
    g_threads = 0;
}

/* ---- per-split data paths (--train-data-path ...) ---- */

static const char *const sp_e_train[] = {"0.7", "golden/tiny_text_document", "0.3", "golden/edge_text_document"};
static const char *const sp_e_valid[] = {"golden/edge_text_document"};
static const char *const sp_e_test[] = {"golden/tiny_text_document", "golden/edge_text_document"};

static void config_e(ds_gpt_config *c)
{
    ds_gpt_config_init(c);
    c->split_data_path[0] = sp_e_train;
    c->n_split_data_path[0] = 4;
    c->split_data_path[1] = sp_e_valid;
    c->n_split_data_path[1] = 1;
    c->split_data_path[2] = sp_e_test;
    c->n_split_data_path[2] = 2;
    c->seq_length = 256;
    c->num_samples[0] = 3000;
    c->num_samples[1] = 200;
    c->num_samples[2] = 50;
    c->vocab_file = "vocab/gpt2-vocab.json";
    c->merge_file = "vocab/gpt2-merges.txt";
}

/* Config E, written by Megatron-Core 0.16.1 itself (tests/data/README.md):
   a weighted train blend, a lone valid prefix (a plain GPTDataset), an
   unweighted test blend, each prefix whole, "split" null. */
static void test_golden_per_split(void)
{
    for (g_threads = 0; g_threads <= 2; g_threads++) {
        ds_gpt_config c;
        config_e(&c);
        c.num_threads = g_threads;
        check_golden("E", &c);
    }
    g_threads = 0;
    ds_gpt_config c;
    config_e(&c);
    ds_pipeline *p = NULL;
    CHECK(ds_pipeline_open(&c, &p) == 0);
    CHECK(ds_pipeline_num_datasets(p) == 5 && ds_pipeline_is_blend(p));
    static const int owner[5] = {0, 0, 1, 2, 2};
    for (size_t d = 0; d < 5; d++)
        CHECK(ds_pipeline_dataset_split(p, d) == owner[d]);
    CHECK(ds_pipeline_dataset_split(p, 5) == -1);
    ds_gpt_info g;
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_VALID, 0, &g) == DS_ERR_RANGE);   /* a train prefix */
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_VALID, 2, &g) == 0);
    CHECK(g.seq_begin == 0 && g.seq_end == ds_pipeline_num_sequences(p, 2) && g.num_samples == 200);
    CHECK(ds_pipeline_length(p, DS_SPLIT_VALID) == g.length);
    CHECK(ds_pipeline_weight(p, 2) == 1.0 && ds_pipeline_weight(p, 0) == 0.7);
    /* a sample of the lone valid prefix and of the test blend read fine */
    int64_t text[257];
    ds_sample_origin o;
    CHECK(ds_pipeline_text(p, DS_SPLIT_VALID, 7, text, &o) == 0 && o.dataset == 2);
    for (uint64_t k = 0; k < ds_pipeline_length(p, DS_SPLIT_TEST); k++) {
        CHECK(ds_pipeline_text(p, DS_SPLIT_TEST, k, text, &o) == 0);
        CHECK(o.dataset == 3 || o.dataset == 4);
    }
    ds_pipeline_close(p);
}

/* The valid split built from a prefix alone is, array for array, the
   valid split of --data-path P --split 0,1,0 (Megatron's spoofed matrix
   (0.0, 1.0) is that split's entry; checked with Megatron-Core 0.16.1);
   only the descriptions differ ("split" and "split_matrix" null), and so
   the cache names.  Likewise train with --split 1,0,0. */
static void test_per_split_equivalence(void)
{
    static const char *const one[] = {"golden/tiny_text_document"};
    for (int s = 0; s < 2; s++) {
        ds_gpt_config a, b;
        ds_gpt_config_init(&a);
        a.split_data_path[s] = one;
        a.n_split_data_path[s] = 1;
        a.seq_length = 128;
        a.num_samples[0] = 4000;
        a.num_samples[1] = 300;
        a.num_samples[2] = 10;
        b = a;
        b.n_split_data_path[s] = 0;
        b.split_data_path[s] = NULL;
        b.data_path = one;
        b.n_data_path = 1;
        b.split = s == 0 ? "1,0,0" : "0,1,0";
        ds_pipeline *pa = NULL, *pb = NULL;
        CHECK(ds_pipeline_open(&a, &pa) == 0 && ds_pipeline_open(&b, &pb) == 0);
        for (int t = 0; t < 3; t++) {
            CHECK(ds_pipeline_has_split(pa, t) == (t == s));
            CHECK(ds_pipeline_has_split(pb, t) == (t == s));
        }
        ds_gpt_info ga, gb;
        CHECK(ds_pipeline_dataset(pa, s, 0, &ga) == 0 && ds_pipeline_dataset(pb, s, 0, &gb) == 0);
        CHECK(ga.seq_begin == gb.seq_begin && ga.seq_end == gb.seq_end && ga.num_epochs == gb.num_epochs);
        const ds_array *xa[3] = {&ga.document_index, &ga.sample_index, &ga.shuffle_index};
        const ds_array *xb[3] = {&gb.document_index, &gb.sample_index, &gb.shuffle_index};
        for (int k = 0; k < 3; k++) {
            size_t item = (size_t)(xa[k]->descr[2] - '0');
            CHECK(xa[k]->n == xb[k]->n && !strcmp(xa[k]->descr, xb[k]->descr) &&
                  memcmp(xa[k]->data, xb[k]->data, xa[k]->n * xa[k]->cols * item) == 0);
        }
        CHECK(strcmp(ga.md5, gb.md5) != 0);
        CHECK(strstr(ga.description, "\"split\": null,\n    \"split_matrix\": null,") != NULL);
        ds_pipeline_close(pa);
        ds_pipeline_close(pb);
    }
}

/* Bad per-split configurations fail with DS_ERR_ARG; a weighted lone prefix
   is a plain GPTDataset (unlike --data-path 1 P, a one-dataset blend). */
static void test_per_split_errors(void)
{
    static const char *const one[] = {"golden/tiny_text_document"};
    static const char *const w1[] = {"1", "golden/tiny_text_document"};
    ds_gpt_config c;
    ds_pipeline *p = NULL;
    config_e(&c);
    c.data_path = one;
    c.n_data_path = 1;
    CHECK(ds_pipeline_open(&c, &p) == DS_ERR_ARG && strstr(ds_pipeline_error(p), "exclusive"));
    ds_pipeline_close(p);
    config_e(&c);
    c.mock = 1;
    CHECK(ds_pipeline_open(&c, &p) == DS_ERR_ARG);
    ds_pipeline_close(p);
    config_e(&c);
    c.num_samples[0] = DS_NUM_SAMPLES_NONE;   /* weights need a size */
    CHECK(ds_pipeline_open(&c, &p) == DS_ERR_ARG);
    ds_pipeline_close(p);
    config_e(&c);
    c.split_data_path[1] = NULL;
    CHECK(ds_pipeline_open(&c, &p) == DS_ERR_ARG);
    ds_pipeline_close(p);
    /* valid alone; the unweighted test blend without a size is exhaustive */
    config_e(&c);
    c.n_split_data_path[0] = 0;
    c.split_data_path[0] = NULL;
    c.num_samples[2] = DS_NUM_SAMPLES_NONE;
    CHECK(ds_pipeline_open(&c, &p) == 0);
    CHECK(!ds_pipeline_has_split(p, DS_SPLIT_TRAIN) && ds_pipeline_length(p, DS_SPLIT_TRAIN) == 0);
    ds_gpt_info a, b;
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_TEST, 1, &a) == 0 && ds_pipeline_dataset(p, DS_SPLIT_TEST, 2, &b) == 0);
    CHECK(ds_pipeline_length(p, DS_SPLIT_TEST) == a.length + b.length);
    ds_pipeline_close(p);
    ds_gpt_config_init(&c);
    c.split_data_path[0] = w1;
    c.n_split_data_path[0] = 2;
    c.seq_length = 128;
    c.num_samples[0] = 100;
    CHECK(ds_pipeline_open(&c, &p) == 0);
    CHECK(!ds_pipeline_is_blend(p) && ds_pipeline_length(p, DS_SPLIT_TRAIN) >= 100);
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_TRAIN, 0, &a) == 0 && a.num_samples == 100);
    ds_pipeline_close(p);
}

/* ---- cache ---- */

static int same_file_bytes(const char *a, const char *b)
{
    size_t na, nb;
    char *x = (char *)read_file_or_null(a, &na), *y = (char *)read_file_or_null(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* Config A through a cache directory: the files carry Megatron's names and
   bytes, a second open maps them, and a description that does not match
   makes the set be rebuilt, not reused. */
static void test_cache(void)
{
    ds_gpt_config c;
    ds_gpt_config_init(&c);
    c.data_path = dp_a;
    c.n_data_path = 1;
    c.seq_length = 1024;
    c.split = "969,30,1";
    c.num_samples[0] = 20000;
    c.num_samples[1] = 640;
    c.num_samples[2] = 64;
    c.megatron_version = DS_MEGATRON_0_8;
    c.vocab_file = "vocab/gpt2-vocab.json";
    c.merge_file = "vocab/gpt2-merges.txt";
    c.cache_dir = "cache/a";
    ds_pipeline *p = NULL;
    CHECK(ds_pipeline_open(&c, &p) == 0);
    ds_gpt_info g;
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_TRAIN, 0, &g) == 0);
    CHECK(!g.from_cache);
    CHECK(strcmp(g.md5, "3596682102eaabdb4d1e15db52756779") == 0);
    ds_pipeline_close(p);
    static const char *const arrs[3] = {"document_index", "sample_index", "shuffle_index"};
    static const char *const sn[3] = {"train", "valid", "test"};
    static const char *const md5[3] = {"3596682102eaabdb4d1e15db52756779", "8c864c1b99fcedab777e37b492885f36",
                                       "5dd7d80b1439d8cc8c69ca8f2e254084"};
    char ours[PATH_MAX * 2], gold[PATH_MAX * 2];
    for (int s = 0; s < 3; s++) {
        for (int a = 0; a < 3; a++) {
            snprintf(ours, sizeof ours, "cache/a/%s-GPTDataset-%s-%s.npy", md5[s], sn[s], arrs[a]);
            snprintf(gold, sizeof gold, "%s/tests/data/indices/A/dev-%s-%s.npy", g_root, sn[s], arrs[a]);
            CHECK(same_file_bytes(ours, gold));
        }
        snprintf(ours, sizeof ours, "cache/a/%s-GPTDataset-%s-description.txt", md5[s], sn[s]);
        snprintf(gold, sizeof gold, "%s/tests/data/indices/A/dev-%s-description.txt", g_root, sn[s]);
        CHECK(same_file_bytes(ours, gold));
    }
    /* the same config in main flavour reuses the 0.8 cache (same descriptions), as Megatron does */
    c.megatron_version = DS_MEGATRON_MAIN;
    CHECK(ds_pipeline_open(&c, &p) == 0);
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_TRAIN, 0, &g) == 0);
    CHECK(g.from_cache && !strcmp(g.sample_index.descr, "<i8"));
    CHECK(same_as_golden("A", 0, "dev-train-shuffle_index.npy", &g.shuffle_index));
    int64_t t1[1025], t2[1025];
    CHECK(ds_pipeline_text(p, DS_SPLIT_TRAIN, 7, t1, NULL) == 0);
    ds_pipeline_close(p);

    /* tamper with the train description: rebuilt, and the file is rewritten */
    snprintf(ours, sizeof ours, "cache/a/%s-GPTDataset-train-description.txt", md5[0]);
    FILE *f = fopen(ours, "w");
    fputs("{}", f);
    fclose(f);
    CHECK(ds_pipeline_open(&c, &p) == 0);
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_TRAIN, 0, &g) == 0);
    CHECK(!g.from_cache && !strcmp(g.sample_index.descr, "<i4"));
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_VALID, 0, &g) == 0);
    CHECK(g.from_cache);
    CHECK(ds_pipeline_text(p, DS_SPLIT_TRAIN, 7, t2, NULL) == 0);
    CHECK(memcmp(t1, t2, sizeof t1) == 0);
    ds_pipeline_close(p);
    snprintf(gold, sizeof gold, "%s/tests/data/indices/A/dev-train-description.txt", g_root);
    CHECK(same_file_bytes(ours, gold));
    snprintf(ours, sizeof ours, "cache/a/%s-GPTDataset-train-sample_index.npy", md5[0]);
    snprintf(gold, sizeof gold, "%s/tests/data/indices/A/main/dev-train-sample_index.npy", g_root);
    CHECK(same_file_bytes(ours, gold));
    /* a truncated array is not reused either */
    CHECK(truncate(ours, 200) == 0);
    CHECK(ds_pipeline_open(&c, &p) == 0);
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_TRAIN, 0, &g) == 0);
    CHECK(!g.from_cache);
    ds_pipeline_close(p);
    CHECK(same_file_bytes(ours, gold));
}

/* ---- properties on tiny (real tokens) ---- */

/* One epoch of tiny's train split: samples tile the shuffled token stream
   with an overlap of exactly one token, every token up to the last full
   sample is covered, and no sample uses a sequence outside the split. */
static void test_coverage(void)
{
    static const char *const dp[1] = {"golden/tiny_text_document"};
    for (int L = 16; L <= 512; L *= 4) {
        ds_gpt_config c;
        ds_gpt_config_init(&c);
        c.data_path = dp;
        c.n_data_path = 1;
        c.seq_length = (uint64_t)L;
        c.split = "90,5,5";
        c.num_samples[0] = c.num_samples[1] = c.num_samples[2] = DS_NUM_SAMPLES_NONE;
        ds_pipeline *p = NULL;
        CHECK(ds_pipeline_open(&c, &p) == 0);
        if (!p)
            return;
        for (int s = 0; s < 3; s++) {
            ds_gpt_info g;
            CHECK(ds_pipeline_dataset(p, s, 0, &g) == 0);
            const int32_t *doc = g.document_index.data;
            const int32_t *si = g.sample_index.data;
            const ds_reader *r = ds_pipeline_reader(p, 0);
            for (uint64_t i = 0; i < g.document_index.n; i++)
                CHECK((uint64_t)doc[i] >= g.seq_begin && (uint64_t)doc[i] < g.seq_end);
            /* stream position of each sample-index row */
            uint64_t *start = calloc(g.document_index.n + 1, sizeof *start);
            for (uint64_t i = 0; i < g.document_index.n; i++)
                start[i + 1] = start[i] + ds_reader_seq_length(r, (uint64_t)doc[i]);
            CHECK(start[g.document_index.n] == g.tokens_per_epoch);
            for (uint64_t j = 0; j + 1 < g.sample_index.n; j++) {
                uint64_t a = start[si[2 * j]] + (uint64_t)si[2 * j + 1];
                uint64_t b = start[si[2 * j + 2]] + (uint64_t)si[2 * j + 3];
                CHECK(a == (uint64_t)L * j);
                CHECK(b - a == (uint64_t)L);   /* L + 1 tokens: [a, b + 1) */
            }
            uint64_t M = g.sample_index.n - 1;
            CHECK(M == (g.tokens_per_epoch - 1) / (uint64_t)L);
            /* the shuffle index is a permutation */
            uint8_t *seen = calloc(M + 1, 1);
            const uint32_t *sh = g.shuffle_index.data;
            for (uint64_t k = 0; k < M; k++) {
                CHECK(sh[k] < M && !seen[sh[k]]);
                if (sh[k] < M)
                    seen[sh[k]] = 1;
            }
            free(seen);
            free(start);
        }
        ds_pipeline_close(p);
    }
}

/* ---- MockGPTDataset (--mock-data) ---- */

static void test_pcg64(void)
{
    /* numpy 1.24: default_rng(0).bit_generator.state and random_raw(3) */
    ds_pcg64 g;
    ds_pcg64_seed(&g, 0);
    CHECK(g.state[0] == 0x1aa1b5345996452dull && g.state[1] == 0x09585eb7a69561e3ull);
    CHECK(g.inc[0] == 0x418ddadb3af71a82ull && g.inc[1] == 0x588133bc447873a9ull);
    CHECK(ds_pcg64_next64(&g) == 11749869230777074271ull);
    CHECK(ds_pcg64_next64(&g) == 4976686463289251617ull);
    CHECK(ds_pcg64_next64(&g) == 755828109848996024ull);
    /* next32 halves a 64-bit draw, low half first */
    ds_pcg64_seed(&g, 0);
    CHECK(ds_pcg64_next32(&g) == (uint32_t)11749869230777074271ull);
    CHECK(ds_pcg64_next32(&g) == (uint32_t)(11749869230777074271ull >> 32));
    /* MockGPTDataset's lengths: numpy default_rng(0).integers(1, 4096, 100000, dtype=int32) */
    int32_t *len = malloc(DS_MOCK_SEQUENCES * sizeof *len);
    CHECK(len != NULL);
    if (!len)
        return;
    ds_pcg64_seed(&g, 0);
    ds_pcg64_integers_i32(&g, len, DS_MOCK_SEQUENCES, 1, DS_MOCK_MAX_LENGTH);
    static const int32_t first[10] = {3484, 2609, 2094, 1105, 1261, 168, 309, 68, 718, 3331};
    CHECK(memcmp(len, first, sizeof first) == 0);
    int64_t sum = 0;
    int32_t lo = INT32_MAX, hi = 0;
    for (size_t i = 0; i < DS_MOCK_SEQUENCES; i++) {
        sum += len[i];
        lo = len[i] < lo ? len[i] : lo;
        hi = len[i] > hi ? len[i] : hi;
    }
    CHECK(sum == 204637097);
    CHECK(lo == 1 && hi == 4095);
    free(len);
}

static ds_pipeline *open_mock(uint64_t L, uint32_t seed, int64_t train, int64_t valid, int64_t vocab)
{
    ds_gpt_config c;
    ds_gpt_config_init(&c);
    c.mock = 1;
    c.split = "98,2,0";            /* ignored: mock data forces 1,1,1 */
    c.seq_length = L;
    c.seed = seed;
    c.num_samples[0] = train;
    c.num_samples[1] = valid;
    c.num_samples[2] = 0;
    if (vocab)
        c.vocab_size = vocab;
    ds_pipeline *p = NULL;
    if (ds_pipeline_open(&c, &p) != 0) {
        fprintf(stderr, "ds_pipeline_open: %s\n", ds_pipeline_error(p));
        ds_pipeline_close(p);
        return NULL;
    }
    return p;
}

/* Every window must read 1, 2, 3, ... along a sequence, EOD at its end and
   1 again after it (or 0 again, modulo the vocabulary). */
static int mock_window_ok(const int64_t *t, uint64_t n, int64_t vocab)
{
    for (uint64_t i = 1; i < n; i++) {
        if (t[i - 1] == 50256) {
            if (t[i] != 1 % vocab && t[i] != 50256)
                return 0;
        } else if (t[i] != (t[i - 1] + 1) % vocab && t[i] != 50256) {
            return 0;
        }
    }
    return 1;
}

static void test_mock(void)
{
    /* tests/data/mock/reference.txt (numpy port of Megatron's index
       building, tests/data/mock/make_reference.py): config t1024 */
    ds_pipeline *p = open_mock(1024, 1234, 100000, 0, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    CHECK(ds_pipeline_is_mock(p) && !ds_pipeline_is_blend(p));
    CHECK(ds_pipeline_reader(p, 0) == NULL && ds_pipeline_num_sequences(p, 0) == 100000);
    ds_gpt_info g;
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_TRAIN, 0, &g) == 0);
    CHECK(g.seq_begin == 0 && g.seq_end == 33333 && g.num_epochs == 2 && g.separate_final_epoch);
    CHECK(g.length == 133184 && g.tokens_per_epoch == 68190290);
    CHECK(strstr(g.description, "\"class\": \"MockGPTDataset\"") &&
          strstr(g.description, "\"dataset_path\": null") && strstr(g.description, "\"split\": \"1,1,1\""));
    CHECK(strcmp(g.md5, "f59ed1e83dcad0333e34be4cd0f6c267") == 0);
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_VALID, 0, &g) == 0 && g.seq_begin == 33333 && g.seq_end == 66667);
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_TEST, 0, &g) == 0 && g.seq_begin == 66667 && g.seq_end == 100000);
    static const int64_t sums[5] = {1412542, 1236937, 1497256, 1093675, 1187342};
    static const int64_t first[5] = {3060, 1401, 3607, 555, 1016};
    int64_t text[1025];
    for (uint64_t k = 0; k < 5; k++) {
        CHECK(ds_pipeline_text(p, DS_SPLIT_TRAIN, k, text, NULL) == 0);
        int64_t s = 0;
        for (int i = 0; i < 1025; i++)
            s += text[i];
        CHECK(s == sums[k] && text[0] == first[k]);
    }
    for (uint64_t k = 0; k < 133184; k += 997) {
        CHECK(ds_pipeline_text(p, DS_SPLIT_TRAIN, k, text, NULL) == 0);
        CHECK(mock_window_ok(text, 1025, 50257));
    }
    ds_pipeline_close(p);

    /* config v512 (seed 7, 1000 validation samples): one epoch */
    p = open_mock(512, 7, 10, 1000, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    CHECK(ds_pipeline_dataset(p, DS_SPLIT_VALID, 0, &g) == 0);
    CHECK(g.num_epochs == 1 && g.length == 133124);
    CHECK(strcmp(g.md5, "112bc37fedd78aec158531c8ab78b842") == 0);
    static const int64_t vsums[5] = {1010610, 157491, 614574, 1303020, 1355859};
    for (uint64_t k = 0; k < 5; k++) {
        CHECK(ds_pipeline_text(p, DS_SPLIT_VALID, k, text, NULL) == 0);
        int64_t s = 0;
        for (int i = 0; i < 513; i++)
            s += text[i];
        CHECK(s == vsums[k]);
    }
    ds_pipeline_close(p);

    /* a small vocabulary wraps the ids: (k + 1) % 7 */
    p = open_mock(64, 1234, 100, 0, 7);
    CHECK(p != NULL);
    if (!p)
        return;
    for (uint64_t k = 0; k < 50; k++) {
        CHECK(ds_pipeline_text(p, DS_SPLIT_TRAIN, k, text, NULL) == 0);
        int small = 1;
        for (int i = 0; i < 65; i++)
            small &= text[i] == 50256 || (text[i] >= 0 && text[i] < 7);
        CHECK(small && mock_window_ok(text, 65, 7));
    }
    ds_pipeline_close(p);

    ds_gpt_config c;
    ds_gpt_config_init(&c);
    c.mock = 1;
    c.seq_length = 64;
    c.vocab_size = 0;
    p = NULL;
    CHECK(ds_pipeline_open(&c, &p) == DS_ERR_ARG && strstr(ds_pipeline_error(p), "vocabulary size"));
    ds_pipeline_close(p);
}

int main(void)
{
    if (!getcwd(g_root, sizeof g_root))
        return 1;
    snprintf(g_dir, sizeof g_dir, "/tmp/mds-gptdata.XXXXXX");
    if (!mkdtemp(g_dir) || make_run_dir() != 0) {
        perror("test_gptdata: cannot set up the run directory");
        return 1;
    }
    RUN(test_random_state);
    RUN(test_md5);
    RUN(test_npy_header);
    RUN(test_split_ranges);
    RUN(test_weights_and_counts);
    RUN(test_blending_spec);
    RUN(test_blend_ratios);
    RUN(test_spec_example);
    RUN(test_empty_split);
    RUN(test_golden_a);
    RUN(test_golden_c);
    RUN(test_golden_d);
    RUN(test_golden_per_split);
    RUN(test_per_split_equivalence);
    RUN(test_per_split_errors);
    RUN(test_cache);
    RUN(test_coverage);
    RUN(test_pcg64);
    RUN(test_mock);
    if (chdir(g_root) == 0) {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "test_gptdata: cannot remove %s\n", g_dir);
    }
    return harness_report();
}
