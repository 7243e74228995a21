/*
 * gptdata.c - the training-data pipeline: Megatron-Core's GPTDataset and
 * BlendedDataset index arrays (document, sample, shuffle, dataset and
 * dataset-sample indices) reproduced element for element, the pipeline
 * handle, and sample reading (GPTDataset.__getitem__).  The algorithms are
 * outlined in docs/architecture.md ("Training data pipeline"); the golden
 * arrays in tests/data/indices, written by Megatron-Core, pin them.  The
 * numpy and Python behaviour they rest on is pyemu.c; the descriptions and
 * the .npy cache are gptcache.c.
 *
 * MockGPTDataset (--mock-data) stands on the same code: its 100000
 * sequence lengths come from numpy's default_rng(0) (pyemu.c: PCG64, SeedSequence,
 * Lemire bounded integers) and its tokens are computed, not read.
 *
 * Per-split data paths (--train-data-path ..., Megatron's blend_per_split)
 * put every split's prefixes in one list, each tagged with its split, so
 * that one GPTDataset table serves both ways of configuring.
 *
 * What it deliberately does not do: tokenize, --multiple-validation-sets,
 * distributed building (one process builds, the others would mmap the
 * cache), or the pre-core "indexmap" cache names.  It never prints and never exits.
 */
#include "dataset_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ------------------------------------------------------------------------ */
/* Split ranges and sample counts                                           */
/* ------------------------------------------------------------------------ */

/* The split matrix: bookends[0..3] as Python computes them (bookends[0] is
   the integer 0), present[i] when bookends[i+1] > bookends[i]. */
static int split_matrix(const char *split, double bookends[4], int present[3])
{
    double v[3] = {0, 0, 0};
    int nv = 0;
    const char *s = split;
    while (*s) {
        if (!((*s >= '0' && *s <= '9') || *s == '.')) {
            s++;
            continue;
        }
        size_t len = strspn(s, "0123456789.");
        char tok[64];
        if (len >= sizeof tok || nv >= 3)
            return DS_ERR_ARG;
        memcpy(tok, s, len);
        tok[len] = 0;
        char *end;
        double x = strtod(tok, &end);
        if (end != tok + len || !isfinite(x))
            return DS_ERR_ARG;
        v[nv++] = x;
        s += len;
    }
    if (nv == 0)
        return DS_ERR_ARG;
    double sum = ds_numpy_sum(v, 3);
    if (!(sum > 0))
        return DS_ERR_ARG;
    bookends[0] = 0;
    for (int i = 0; i < 3; i++) {
        bookends[i + 1] = bookends[i] + v[i] / sum;
        present[i] = bookends[i + 1] > bookends[i];
    }
    return 0;
}

int ds_split_ranges(const char *split, uint64_t num_sequences, uint64_t begin[3], uint64_t end[3],
                    int present[3])
{
    if (!split || !begin || !end || !present)
        return DS_ERR_ARG;
    double e[4];
    int rc = split_matrix(split, e, present);
    if (rc < 0)
        return rc;
    for (int i = 0; i < 3; i++) {
        begin[i] = end[i] = 0;
        if (present[i]) {
            begin[i] = (uint64_t)ds_round_half_even(e[i] * (double)num_sequences);
            end[i] = (uint64_t)ds_round_half_even(e[i + 1] * (double)num_sequences);
        }
    }
    return 0;
}

static int64_t sat_mul(uint64_t a, uint64_t b)
{
    if (a != 0 && b > (uint64_t)INT64_MAX / a)
        return INT64_MAX;
    return (int64_t)(a * b);
}

int ds_sample_counts(int64_t out[3], uint64_t train_samples, uint64_t train_iters,
                     uint64_t global_batch_size, uint64_t eval_iters, uint64_t eval_interval,
                     int skip_train)
{
    if (!out)
        return DS_ERR_ARG;
    if (train_samples) {
        out[0] = train_samples > INT64_MAX ? INT64_MAX : (int64_t)train_samples;
        if (global_batch_size)
            train_iters = train_samples / global_batch_size;
    } else {
        if (!global_batch_size)
            return DS_ERR_ARG;
        out[0] = sat_mul(train_iters, global_batch_size);
    }
    uint64_t eval_total;
    if (skip_train) {
        eval_total = eval_iters;
    } else {
        if (!eval_interval)
            return DS_ERR_ARG;
        int64_t t = sat_mul(train_iters / eval_interval + 1, eval_iters);
        eval_total = (uint64_t)t;
    }
    if ((eval_iters || eval_total) && !global_batch_size)
        return DS_ERR_ARG;
    out[1] = sat_mul(eval_total, global_batch_size);
    out[2] = sat_mul(eval_iters, global_batch_size);
    return 0;
}


/* ------------------------------------------------------------------------ */
/* The pipeline                                                             */
/* ------------------------------------------------------------------------ */

const char *const ds_split_names[3] = {"train", "valid", "test"};

void ds_gpt_config_init(ds_gpt_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->split = "969, 30, 1";
    cfg->seed = 1234;
    cfg->num_samples[0] = cfg->num_samples[1] = cfg->num_samples[2] = DS_NUM_SAMPLES_NONE;
    cfg->add_extra_token = 1;
    cfg->drop_last_partial_validation = 1;
    cfg->surplus = 0.005;
    cfg->megatron_version = DS_MEGATRON_MAIN;
    cfg->tokenizer_ids = DS_TOKENIZER_IDS_LEGACY;
    cfg->vocab_file = "gpt2-vocab.json";
    cfg->merge_file = "gpt2-merges.txt";
    cfg->eod = 50256;
    cfg->pad = -1;
    cfg->vocab_size = 50257;
}

void ds_arr_release(ds_arr *a)
{
    free(a->own);
    ds_npy_release(&a->npy);
    memset(a, 0, sizeof *a);
}

static char *xstrdup0(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void ds_pipeline_close(ds_pipeline *p)
{
    if (!p)
        return;
    if (p->gpt) {
        for (size_t i = 0; i < 3 * p->nd; i++) {
            ds_arr_release(&p->gpt[i].doc);
            ds_arr_release(&p->gpt[i].sample);
            ds_arr_release(&p->gpt[i].shuffle);
            free(p->gpt[i].description);
        }
    }
    for (int s = 0; s < 3; s++) {
        ds_arr_release(&p->blends[s].dataset_index);
        ds_arr_release(&p->blends[s].dataset_sample_index);
        free(p->blends[s].description);
        free(p->blends[s].count);
    }
    for (size_t d = 0; d < p->nd; d++) {
        if (p->readers)
            ds_reader_close(p->readers[d]);
        if (p->paths)
            free(p->paths[d]);
    }
    free(p->readers);
    free(p->owner);
    free(p->mock_lengths);
    free(p->paths);
    free(p->weights);
    free(p->gpt);
    free(p->split_str);
    free(p->vocab_file);
    free(p->merge_file);
    free(p->tok_class);
    free(p->tok_model);
    free(p);
}

const char *ds_pipeline_error(const ds_pipeline *p)
{
    return p ? p->err : "out of memory";
}

/* The low-level dataset under prefix d: an MMIDIDX reader, or the mock. */
static uint64_t src_num_sequences(const ds_pipeline *p, size_t d)
{
    return p->mock_lengths ? DS_MOCK_SEQUENCES : ds_reader_num_sequences(p->readers[d]);
}

static uint64_t src_seq_length(const ds_pipeline *p, size_t d, uint64_t i)
{
    return p->mock_lengths ? (uint64_t)p->mock_lengths[i] : ds_reader_seq_length(p->readers[d], i);
}

/* An array built in memory: a owns data from here on. */
static void arr_own(ds_arr *a, void *data, uint64_t n, unsigned cols, const char *descr)
{
    a->own = data;
    a->view.data = data;
    a->view.n = n;
    a->view.cols = cols;
    a->view.descr = descr;
}

/* Element i of a 1-D integer array view, or column c of row i. */
static int64_t arr_get(const ds_array *a, uint64_t i, unsigned c)
{
    uint64_t k = i * a->cols + c;
    switch (a->descr[1] == 'u' ? 5 : a->descr[2] - '0') {
    case 2: return ((const int16_t *)a->data)[k];
    case 4: return ((const int32_t *)a->data)[k];
    case 5: return ((const uint32_t *)a->data)[k];
    default: return ((const int64_t *)a->data)[k];
    }
}

/* ---- GPTDataset ---- */

#if defined(__GNUC__)
#define PREFETCH(addr) __builtin_prefetch(addr)
#else
#define PREFETCH(addr) ((void)0)
#endif

/* The sample index (Megatron's helpers.cpp
   build_sample_idx): row s is (position in doc, token offset) where sample s
   starts; samples are L + E1 tokens long and overlap by E1.  Written
   directly in the output type (int32 when every value fits, as main does);
   the lengths of documents a little ahead are prefetched, since doc is a
   permutation and sizes[doc[d]] would otherwise miss the cache each time. */
#define DEFINE_BUILD_SAMPLE_INDEX(NAME, T)                                              \
    static void NAME(T *out, uint64_t M, const int32_t *doc, uint64_t ndoc,             \
                     const int32_t *sizes, int64_t L, int64_t E1)                       \
    {                                                                                   \
        uint64_t d = 0;                                                                 \
        int64_t off = 0;                                                                \
        out[0] = 0;                                                                     \
        out[1] = 0;                                                                     \
        for (uint64_t k = 0; k < 16 && k < ndoc; k++)                                   \
            PREFETCH(&sizes[doc[k]]);                                                   \
        for (uint64_t s = 1; s <= M; s++) {                                             \
            int64_t need = L + E1;                                                      \
            while (need != 0) {                                                         \
                int64_t len = (int64_t)sizes[doc[d]] - off;                             \
                need -= len;                                                            \
                if (need <= 0) {                                                        \
                    off += need + len - E1;                                             \
                    need = 0;                                                           \
                } else if (d == ndoc - 1) {                                             \
                    off = (int64_t)sizes[doc[d]] - E1;                                  \
                    break;                                                              \
                } else {                                                                \
                    d++;                                                                \
                    off = 0;                                                            \
                    if (d + 16 < ndoc)                                                  \
                        PREFETCH(&sizes[doc[d + 16]]);                                  \
                }                                                                       \
            }                                                                           \
            out[2 * s] = (T)d;                                                          \
            out[2 * s + 1] = (T)off;                                                    \
        }                                                                               \
    }
DEFINE_BUILD_SAMPLE_INDEX(build_sample_index32, int32_t)
DEFINE_BUILD_SAMPLE_INDEX(build_sample_index64, int64_t)

/* The lengths of prefix d's sequences as int32, and their maximum; the
   caller checked that they fit (every sequence length does, by format). */
static int load_sizes(const ds_pipeline *p, size_t prefix, int32_t **sizes, int64_t *max_size,
                      char *errbuf)
{
    if (sizes[prefix])
        return 0;
    uint64_t n = src_num_sequences(p, prefix);
    int32_t *s = malloc((n ? n : 1) * sizeof *s);
    RETURN_ERROR_IF(!s, DS_ERR_NOMEM, "out of memory for the %llu sequence lengths of '%s'",
                    (unsigned long long)n, p->paths[prefix]);
    int64_t mx = 0;
    for (uint64_t i = 0; i < n; i++) {
        s[i] = (int32_t)src_seq_length(p, prefix, i);
        if (s[i] > mx)
            mx = s[i];
    }
    sizes[prefix] = s;
    max_size[prefix] = mx;
    return 0;
}

/*
 * First half of a GPTDataset: its token count, epochs, description and the
 * cache lookup, all cheap and sequential.  Returns 1 when the arrays must
 * be built (gpt_compute), 0 when they came from the cache, or an error.
 */
static int gpt_prepare(ds_pipeline *p, ds_gpt *g)
{
    char *errbuf = p->err;
    const char *path = p->paths[g->prefix];
    const char *sname = ds_split_names[g->split];
    uint64_t nseq = g->seq_end - g->seq_begin;
    int64_t L = (int64_t)p->cfg.seq_length, E1 = p->cfg.add_extra_token ? 1 : 0;
    uint64_t T = 0;
    for (uint64_t i = g->seq_begin; i < g->seq_end; i++)
        T += src_seq_length(p, g->prefix, i);
    g->tokens = T;
    RETURN_ERROR_IF(T == 0, DS_ERR_EMPTY,
                    "the %s split of '%s' holds no tokens (sequences [%llu, %llu) of %llu) but a "
                    "dataset is built on it; Megatron would loop forever here%s",
                    sname, path, (unsigned long long)g->seq_begin, (unsigned long long)g->seq_end,
                    (unsigned long long)src_num_sequences(p, g->prefix),
                    p->per_split ? "" : ": change --split");
    RETURN_ERROR_IF(T > (uint64_t)INT64_MAX / 2, DS_ERR_RANGE, "'%s' holds too many tokens", path);

    /* Epochs: the smallest e >= 1 with e·T >= num_samples·L + E1, which is
       what Megatron's loop finds one epoch at a time. */
    int64_t ns = g->num_samples;
    uint64_t e = 1;
    if (ns != DS_NUM_SAMPLES_NONE) {
        RETURN_ERROR_IF(ns < 0 || (uint64_t)ns > ((uint64_t)INT64_MAX - 1) / (uint64_t)L,
                        DS_ERR_RANGE, "%lld samples of length %lld do not fit 64 bits",
                        (long long)ns, (long long)L);
        uint64_t need = (uint64_t)ns * (uint64_t)L + (uint64_t)E1;
        e = (need + T - 1) / T;
        if (e < 1)
            e = 1;
    }
    g->epochs = e;
    RETURN_ERROR_IF(nseq != 0 && e > (uint64_t)INT64_MAX / nseq, DS_ERR_RANGE,
                    "%llu epochs of the %s split of '%s' do not fit 64 bits", (unsigned long long)e,
                    sname, path);
    RETURN_ERROR_IF(e > (uint64_t)INT64_MAX / T, DS_ERR_RANGE, "too many epochs");
    g->sans = 0;
    g->separate = 0;
    if (e > 1) {
        g->sans = (uint64_t)(((int64_t)((e - 1) * T) - E1) / L);
        int64_t final = ns - (int64_t)g->sans;
        int64_t per = ((int64_t)T - E1) / L;
        g->separate = final < (int64_t)(0.80 * (double)per);
    }

    FORWARD_IF_ERROR(ds_gpt_describe(p, g));
    if (p->cfg.cache_dir) {
        int hit = ds_gpt_cache_load(p, g);
        if (hit < 0)
            return hit;
        if (hit) {
            g->from_cache = 1;
            return 0;
        }
    }
    RETURN_ERROR_IF(g->seq_end > (uint64_t)INT32_MAX + 1, DS_ERR_RANGE,
                    "'%s' has more sequences than an int32 document index holds", path);
    return 1;
}

/*
 * Second half: the three arrays, from the prefix's lengths.  It touches
 * only g, its own RandomState and errbuf, so distinct datasets may be
 * computed in parallel threads; the draws, and so the arrays, are those of
 * a sequential build.
 */
static int gpt_compute(const ds_pipeline *p, ds_gpt *g, const int32_t *sizes, int64_t max_size,
                       char *errbuf)
{
    uint64_t nseq = g->seq_end - g->seq_begin, e = g->epochs, T = g->tokens;
    int64_t L = (int64_t)p->cfg.seq_length, E1 = p->cfg.add_extra_token ? 1 : 0;
    uint64_t ndoc = nseq * e;
    int32_t *doc = malloc((ndoc ? ndoc : 1) * sizeof *doc);
    RETURN_ERROR_IF(!doc, DS_ERR_NOMEM, "out of memory for a document index of %llu entries",
                    (unsigned long long)ndoc);
    /* every epoch is the same run of sequence numbers: write one, copy it */
    for (uint64_t i = 0; i < nseq; i++)
        doc[i] = (int32_t)(g->seq_begin + i);
    for (uint64_t k = 1; k < e; k++)
        memcpy(doc + k * nseq, doc, nseq * sizeof *doc);
    arr_own(&g->doc, doc, ndoc, 1, "<i4");
    ds_random_state *rs = malloc(sizeof *rs);
    RETURN_ERROR_IF(!rs, DS_ERR_NOMEM, "out of memory");
    ds_random_seed(rs, p->cfg.seed);
    if (g->separate) {
        ds_random_shuffle(rs, doc, (e - 1) * nseq, 4);
        ds_random_shuffle(rs, doc + (e - 1) * nseq, nseq, 4);
    } else {
        ds_random_shuffle(rs, doc, ndoc, 4);
    }

    int drop_last = g->split != DS_SPLIT_VALID || p->cfg.drop_last_partial_validation;
    int64_t tot = (int64_t)(e * T) - E1;
    uint64_t M = drop_last ? (uint64_t)(tot / L) : (uint64_t)(int64_t)ceilf((float)tot / (float)L);
    /* every value is below max(len(doc), max(sizes)) */
    int narrow = p->cfg.megatron_version == DS_MEGATRON_MAIN &&
                 (ndoc > (uint64_t)max_size ? ndoc : (uint64_t)max_size) <= (uint64_t)INT32_MAX;
    void *si = malloc((M + 1) * 2 * (narrow ? 4 : 8));
    if (!si) {
        free(rs);
        RETURN_ERROR(DS_ERR_NOMEM, "out of memory for a sample index of %llu rows",
                     (unsigned long long)(M + 1));
    }
    if (narrow)
        build_sample_index32(si, M, doc, ndoc, sizes, L, E1);
    else
        build_sample_index64(si, M, doc, ndoc, sizes, L, E1);
    arr_own(&g->sample, si, M + 1, 2, narrow ? "<i4" : "<i8");

    int wide = M >= 0xffffffffu - 1;
    void *sh = malloc((M ? M : 1) * (wide ? 8 : 4));
    if (!sh) {
        free(rs);
        RETURN_ERROR(DS_ERR_NOMEM, "out of memory for a shuffle index of %llu entries",
                     (unsigned long long)M);
    }
    if (wide) {
        int64_t *w = sh;
        for (uint64_t k = 0; k < M; k++)
            w[k] = (int64_t)k;
    } else {
        uint32_t *w = sh;
        for (uint64_t k = 0; k < M; k++)
            w[k] = (uint32_t)k;
    }
    uint64_t first = g->separate ? g->sans : M;
    ds_random_shuffle(rs, sh, first, wide ? 8 : 4);
    ds_random_shuffle(rs, (char *)sh + first * (wide ? 8 : 4), M - first, wide ? 8 : 4);
    free(rs);
    arr_own(&g->shuffle, sh, M, 1, wide ? "<i8" : "<u4");
    return 0;
}

/* ---- BlendedDataset ---- */

/* build_blending_indices (size given) and build_exhaustive_blending_indices
   (size None, weights = integer lengths), Megatron's helpers.cpp: each
   sample goes to the dataset furthest behind its target share, the lowest
   index winning ties. */
/* Up to BLEND_SMALL datasets, the counts are also kept as doubles (exact
   below 2^53) so that no integer conversion sits in the chain from one
   sample's choice to the next; same arithmetic, same choices. */
#define BLEND_SMALL 16

void ds_build_blending_indices(int16_t *di, int64_t *dsi, uint64_t size, const double *w,
                                size_t K, int64_t *count)
{
    for (size_t d = 0; d < K; d++)
        count[d] = 0;
    if (K <= BLEND_SMALL) {
        double c[BLEND_SMALL];
        for (size_t d = 0; d < K; d++)
            c[d] = 0.0;
        for (uint64_t s = 0; s < size; s++) {
            double x = (double)s > 1.0 ? (double)s : 1.0;
            size_t best = 0;
            double best_err = w[0] * x - c[0];
            for (size_t d = 1; d < K; d++) {
                double err = w[d] * x - c[d];
                if (err > best_err) {
                    best_err = err;
                    best = d;
                }
            }
            di[s] = (int16_t)best;
            dsi[s] = (int64_t)c[best];
            c[best] += 1.0;
        }
        for (size_t d = 0; d < K; d++)
            count[d] = (int64_t)c[d];
        return;
    }
    for (uint64_t s = 0; s < size; s++) {
        double x = (double)s > 1.0 ? (double)s : 1.0;
        size_t best = 0;
        double best_err = w[0] * x - (double)count[0];
        for (size_t d = 1; d < K; d++) {
            double err = w[d] * x - (double)count[d];
            if (err > best_err) {
                best_err = err;
                best = d;
            }
        }
        di[s] = (int16_t)best;
        dsi[s] = count[best]++;
    }
}

void ds_build_exhaustive_blending_indices(int16_t *di, int64_t *dsi, const uint64_t *lens, size_t K,
                                     int64_t *count)
{
    uint64_t total = 0;
    for (size_t d = 0; d < K; d++) {
        total += lens[d];
        count[d] = 0;
    }
    for (uint64_t s = 0; s < total; s++) {
        double x = (double)s > 1.0 ? (double)s : 1.0;
        size_t best = K;
        double best_err = -HUGE_VAL;
        for (size_t d = 0; d < K; d++) {
            if ((uint64_t)count[d] >= lens[d])
                continue;
            double err = (double)lens[d] / (double)total * x - (double)count[d];
            if (best == K || err > best_err) {
                best_err = err;
                best = d;
            }
        }
        di[s] = (int16_t)best;
        dsi[s] = count[best]++;
    }
}

/* First half of a BlendedDataset: description and cache lookup.  w and
   lens are the split's (count[split]).  Returns 1 when the arrays must be
   built (blend_compute), 0 on a cache hit. */
static int blend_prepare(ds_pipeline *p, int split, int64_t size, const double *w, const uint64_t *lens)
{
    ds_blend *bl = &p->blends[split];
    size_t K = p->count[split];
    bl->first = p->first[split];
    bl->K = K;
    bl->size = size;
    bl->w = w;
    uint64_t n = 0;
    if (size == DS_NUM_SAMPLES_NONE)
        for (size_t d = 0; d < K; d++)
            n += lens[d];
    else
        n = (uint64_t)size;
    bl->n = n;

    FORWARD_IF_ERROR(ds_blend_describe(p, split, bl, lens));
    if (p->cfg.cache_dir) {
        int hit = ds_blend_cache_load(p, split, bl);
        if (hit < 0)
            return hit;
        if (hit) {
            bl->built = 1;
            return 0;
        }
    }
    return 1;
}

/* Second half: the arrays and the per-dataset counts (bl->count).  Needs
   the mid-level lengths only for an exhaustive blend, so a weighted blend
   may run in parallel with the GPTDatasets. */
static int blend_compute(const ds_pipeline *p, ds_blend *bl, const uint64_t *lens, char *errbuf)
{
    size_t K = bl->K;
    (void)p;
    uint64_t n = bl->n;
    int16_t *di = malloc((n ? n : 1) * sizeof *di);
    int64_t *dsi = malloc((n ? n : 1) * sizeof *dsi);
    bl->count = malloc(K * sizeof *bl->count);
    if (!di || !dsi || !bl->count) {
        free(di);
        free(dsi);
        RETURN_ERROR(DS_ERR_NOMEM, "out of memory for a blend of %llu samples", (unsigned long long)n);
    }
    if (bl->size == DS_NUM_SAMPLES_NONE)
        ds_build_exhaustive_blending_indices(di, dsi, lens, K, bl->count);
    else
        ds_build_blending_indices(di, dsi, n, bl->w, K, bl->count);
    arr_own(&bl->dataset_index, di, n, 1, "<i2");
    arr_own(&bl->dataset_sample_index, dsi, n, 1, "<i8");
    bl->built = 1;
    return 0;
}

/* Last step of a built blend: no dataset is asked for more samples than it
   has, then the cache. */
static int blend_finish(ds_pipeline *p, int split, const uint64_t *lens)
{
    char *errbuf = p->err;
    ds_blend *bl = &p->blends[split];
    for (size_t d = 0; d < bl->K; d++) {
        if ((uint64_t)bl->count[d] > lens[d]) {
            RETURN_ERROR(DS_ERR_OVERSAMPLE, "the %s blend asks '%s' for %lld samples but it has "
                         "%llu; raise --mid-level-dataset-surplus", ds_split_names[split], p->paths[bl->first + d],
                         (long long)bl->count[d], (unsigned long long)lens[d]);
        }
    }
    if (p->cfg.cache_dir) {
        FORWARD_IF_ERROR(ds_blend_cache_store(p, split, bl));
    }
    return 0;
}

static int build_blend(ds_pipeline *p, int split, int64_t size, const double *w, const uint64_t *lens)
{
    int rc = blend_prepare(p, split, size, w, lens);
    if (rc <= 0)
        return rc;
    FORWARD_IF_ERROR(blend_compute(p, &p->blends[split], lens, p->err));
    return blend_finish(p, split, lens);
}

/* ---- building in parallel ---- */

/* One dataset to compute: a GPTDataset, or a weighted blend. */
typedef struct build_job {
    ds_gpt *g;
    ds_blend *bl;
    uint64_t cost;                  /* rough element count, to start the largest first */
    int rc;
    char err[DS_ERRMSG_SIZE];
} build_job;

/*
 * Computes the jobs, largest first, on cfg.num_threads threads (OpenMP's
 * default for 0).  Each job writes only its own dataset and message, and
 * owns its RandomState, so the arrays do not depend on the thread count or
 * on which thread runs what.  The first failing job in the builder's order
 * gives the error.
 */
static int run_jobs(ds_pipeline *p, build_job *jobs, size_t nj, const int32_t *const *sizes,
                    const int64_t *max_size)
{
    size_t *ord = malloc((nj ? nj : 1) * sizeof *ord);
    if (!ord) {
        char *errbuf = p->err;
        RETURN_ERROR(DS_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < nj; i++) {   /* insertion sort: largest cost first, stable */
        size_t k = i;
        for (; k > 0 && jobs[ord[k - 1]].cost < jobs[i].cost; k--)
            ord[k] = ord[k - 1];
        ord[k] = i;
    }
    int nt = 1;
#ifdef _OPENMP
    nt = p->cfg.num_threads > 0 ? p->cfg.num_threads : omp_get_max_threads();
    if ((size_t)nt > nj)
        nt = nj ? (int)nj : 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
#endif
    for (size_t i = 0; i < nj; i++) {
        build_job *j = &jobs[ord[i]];
        if (j->g)
            j->rc = gpt_compute(p, j->g, sizes[j->g->prefix], max_size[j->g->prefix], j->err);
        else
            j->rc = blend_compute(p, j->bl, NULL, j->err);
    }
    (void)nt;
    free(ord);
    for (size_t i = 0; i < nj; i++) {
        if (jobs[i].rc < 0) {
            memcpy(p->err, jobs[i].err, sizeof p->err);
            return jobs[i].rc;
        }
    }
    return 0;
}

/* ---- the builder ---- */

static char *strip_dup(const char *s)
{
    while (*s == ' ' || (*s >= '\t' && *s <= '\r'))
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || (s[n - 1] >= '\t' && s[n - 1] <= '\r')))
        n--;
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Python's float(): surrounding whitespace allowed, the whole token must
   parse. */
static int parse_weight(const char *s, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s)
        return -1;
    while (*end == ' ' || (*end >= '\t' && *end <= '\r'))
        end++;
    if (*end)
        return -1;
    *out = x;
    return 0;
}

/* get_blend_from_list on tok[0..n): an even token count whose even
   positions all parse as floats is "w1 P1 w2 P2 ...", anything else is a
   list of prefixes.  Appends the prefixes to p->paths and their weights as
   given (1.0 without) to p->weights; opt names the flag in messages. */
static int parse_blend(ds_pipeline *p, const char *const *tok, size_t n, const char *opt,
                       int *weighted_out)
{
    char *errbuf = p->err;
    int weighted = n % 2 == 0;
    double *w = calloc(n ? n : 1, sizeof *w);
    RETURN_ERROR_IF(!w, DS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; weighted && i < n; i += 2)
        if (!tok[i] || parse_weight(tok[i], &w[i / 2]) != 0)
            weighted = 0;
    *weighted_out = weighted;
    size_t k = weighted ? n / 2 : n;
    for (size_t j = 0; j < k; j++) {
        const char *t = tok[weighted ? 2 * j + 1 : j];
        size_t d = p->nd;
        if (!t) {
            free(w);
            RETURN_ERROR(DS_ERR_ARG, "%s token %zu is NULL", opt, weighted ? 2 * j + 1 : j);
        }
        p->paths[d] = strip_dup(t);
        p->weights[d] = weighted ? w[j] : 1.0;
        if (!p->paths[d]) {
            free(w);
            RETURN_ERROR(DS_ERR_NOMEM, "out of memory");
        }
        p->nd++;
        if (weighted && !(w[j] > 0 && isfinite(w[j]))) {
            DS_SET_ERROR("blend weight '%s' of '%s' is not a positive number", tok[2 * j],
                         p->paths[d]);
            free(w);
            return DS_ERR_ARG;
        }
    }
    free(w);
    RETURN_ERROR_IF(k >= 32767, DS_ERR_ARG, "%zu datasets in %s: a blend holds at most 32766", k, opt);
    return 0;
}

/* The prefixes: data_path's, serving every split, or with per-split paths
   the train list, then valid's, then test's, each serving its own split. */
static int parse_data_paths(ds_pipeline *p, const ds_gpt_config *cfg)
{
    static const char *const opts[3] = {"--train-data-path", "--valid-data-path", "--test-data-path"};
    char *errbuf = p->err;
    size_t ntok = p->per_split ? 0 : cfg->n_data_path;
    for (int s = 0; s < 3 && p->per_split; s++) {
        RETURN_ERROR_IF(!cfg->split_data_path[s] && cfg->n_split_data_path[s], DS_ERR_ARG,
                        "%s tokens are NULL", opts[s]);
        ntok += cfg->n_split_data_path[s];
    }
    RETURN_ERROR_IF(ntok == 0 || (!p->per_split && !cfg->data_path), DS_ERR_ARG, "no --data-path given");
    p->paths = calloc(ntok, sizeof *p->paths);
    p->readers = calloc(ntok, sizeof *p->readers);
    p->weights = calloc(ntok, sizeof *p->weights);
    p->owner = calloc(ntok, sizeof *p->owner);
    RETURN_ERROR_IF(!p->paths || !p->readers || !p->weights || !p->owner, DS_ERR_NOMEM, "out of memory");
    if (!p->per_split)
        return parse_blend(p, cfg->data_path, cfg->n_data_path, "--data-path", &p->weighted);
    for (int s = 0; s < 3; s++) {
        p->first[s] = p->nd;
        FORWARD_IF_ERROR(parse_blend(p, cfg->split_data_path[s], cfg->n_split_data_path[s], opts[s],
                                     &p->weighted_s[s]));
        p->count[s] = p->nd - p->first[s];
        for (size_t d = p->first[s]; d < p->nd; d++)
            p->owner[d] = s;
    }
    return 0;
}

/* MockGPTLowLevelDataset: one unweighted "prefix" whose sequence lengths
   are default_rng(0).integers(1, 4096, 100000, dtype=int32); the data path
   is ignored (Megatron's is None). */
static int mock_open(ds_pipeline *p)
{
    char *errbuf = p->err;
    p->nd = 1;
    p->paths = calloc(1, sizeof *p->paths);
    p->readers = calloc(1, sizeof *p->readers);
    p->weights = calloc(1, sizeof *p->weights);
    p->owner = calloc(1, sizeof *p->owner);
    p->mock_lengths = malloc(DS_MOCK_SEQUENCES * sizeof *p->mock_lengths);
    RETURN_ERROR_IF(!p->paths || !p->readers || !p->weights || !p->owner || !p->mock_lengths, DS_ERR_NOMEM,
                    "out of memory");
    p->paths[0] = xstrdup0("(mock data)");
    RETURN_ERROR_IF(!p->paths[0], DS_ERR_NOMEM, "out of memory");
    p->weights[0] = 1.0;
    ds_pcg64 g;
    ds_pcg64_seed(&g, 0);
    ds_pcg64_integers_i32(&g, p->mock_lengths, DS_MOCK_SEQUENCES, 1, DS_MOCK_MAX_LENGTH);
    return 0;
}

/* 1 when split s is built and prefix d is one of its datasets. */
static int uses(const ds_pipeline *p, int s, size_t d)
{
    return p->present[s] && d >= p->first[s] && d < p->first[s] + p->count[s];
}

/* Scratch state of one ds_pipeline_open(), freed when it returns. */
typedef struct build_state {
    int32_t **sizes;                /* (nd) each prefix's sequence lengths, loaded when needed */
    int64_t *max_size;              /* (nd) the largest of them */
    uint64_t *lens;                 /* (nd) lengths of the mid-level datasets a blend draws from */
    double *w;                      /* (nd) the builder's normalized weights, then the blend's */
    build_job *jobs;                /* (3 * nd + 3) datasets to compute */
    size_t nj;
} build_state;

/*
 * BlendedMegatronDatasetConfig.__post_init__: the scalars are checked and
 * kept (the strings are copied, never borrowed past open), and --split goes
 * through parse_and_normalize_split and convert_split_vector_to_split_matrix
 * into the bookends of each split.  MockGPTDataset forces the split
 * "1,1,1"; with blend_per_split there is no split, and a split exists
 * exactly when it has a list of prefixes.  The cache directory is held in
 * p->cfg.cache_dir until ds_pipeline_open returns.
 */
static int configure(ds_pipeline *p, const ds_gpt_config *cfg)
{
    char *errbuf = p->err;
    p->cfg = *cfg;
    p->cfg.data_path = NULL;
    p->cfg.split = p->cfg.vocab_file = p->cfg.merge_file = NULL;
    p->cfg.tokenizer_class = p->cfg.tokenizer_model = NULL;
    p->cfg.cache_dir = NULL;
    for (int s = 0; s < 3; s++) {
        p->cfg.split_data_path[s] = NULL;
        p->per_split |= cfg->n_split_data_path[s] != 0;
    }
    RETURN_ERROR_IF(cfg->seq_length < 2 || cfg->seq_length > INT32_MAX / 2, DS_ERR_ARG,
                    "sequence length %llu is out of range [2, %d]", (unsigned long long)cfg->seq_length,
                    INT32_MAX / 2);
    RETURN_ERROR_IF(p->per_split && cfg->n_data_path, DS_ERR_ARG,
                    "--data-path and --train-data-path/--valid-data-path/--test-data-path are exclusive");
    RETURN_ERROR_IF(p->per_split && cfg->mock, DS_ERR_ARG, "--mock-data takes no data path");
    const char *split = cfg->mock ? DS_MOCK_SPLIT : p->per_split ? NULL : cfg->split;
    RETURN_ERROR_IF(!split && !p->per_split, DS_ERR_ARG, "no split given");
    RETURN_ERROR_IF(cfg->mock && cfg->vocab_size <= 0, DS_ERR_ARG,
                    "mock data needs a positive vocabulary size, not %lld", (long long)cfg->vocab_size);
    p->split_str = xstrdup0(split ? split : "");
    p->vocab_file = xstrdup0(cfg->vocab_file ? cfg->vocab_file : "");
    p->merge_file = xstrdup0(cfg->merge_file ? cfg->merge_file : "");
    p->cfg.cache_dir = cfg->cache_dir ? xstrdup0(cfg->cache_dir) : NULL;
    if (cfg->tokenizer_class) {
        p->tok_class = xstrdup0(cfg->tokenizer_class);
        p->tok_model = xstrdup0(cfg->tokenizer_model ? cfg->tokenizer_model : "");
        RETURN_ERROR_IF(!p->tok_class || !p->tok_model, DS_ERR_NOMEM, "out of memory");
    }
    RETURN_ERROR_IF(!p->split_str || !p->vocab_file || !p->merge_file || (cfg->cache_dir && !p->cfg.cache_dir),
                    DS_ERR_NOMEM, "out of memory");
    if (p->per_split) {
        for (int s = 0; s < 3; s++)
            p->present[s] = cfg->n_split_data_path[s] != 0;
        return 0;
    }
    int rc = split_matrix(split, p->bookends, p->present);
    RETURN_ERROR_IF(rc < 0, rc, "bad split '%s': expected up to three non-negative numbers, not all zero",
                    split);
    return 0;
}

/*
 * The blend of the config: get_blend_from_list on --data-path (or on each
 * of --train/valid/test-data-path for blend_per_split), or the one mock
 * "prefix" of MockGPTLowLevelDataset.  Then what the builder decides from
 * it per split: which prefixes the split draws from, whether its top level
 * is a BlendedDataset (several prefixes, or weights given) and whether that
 * blend is weighted.
 */
static int parse_paths(ds_pipeline *p, const ds_gpt_config *cfg)
{
    FORWARD_IF_ERROR(cfg->mock ? mock_open(p) : parse_data_paths(p, cfg));
    for (int s = 0; s < 3; s++) {
        if (!p->per_split) {
            p->first[s] = 0;
            p->count[s] = p->nd;
            p->weighted_s[s] = p->weighted;
            p->blend_s[s] = p->weighted || p->nd > 1;
        } else {
            /* one prefix is a plain GPTDataset, weighted or not */
            p->blend_s[s] = p->count[s] > 1;
        }
    }
    for (size_t d = 0; d < p->nd && !p->per_split; d++)
        p->owner[d] = -1;
    return 0;
}

/*
 * GPTDataset.build_low_level_dataset: an IndexedDataset (a ds_reader) per
 * prefix, in the order of the list; none for mock data.  The reader's own
 * message, naming the file, becomes the pipeline's.
 */
static int open_readers(ds_pipeline *p)
{
    for (size_t d = 0; d < p->nd && !p->mock_lengths; d++) {
        ds_reader *r = NULL;
        int rc = ds_reader_open(p->paths[d], &r);
        if (rc < 0) {
            snprintf(p->err, sizeof p->err, "%s", r ? ds_reader_error(r) : ds_strerror(rc));
            ds_reader_close(r);
            return rc;
        }
        p->readers[d] = r;
    }
    return 0;
}

/*
 * The start of BlendedMegatronDatasetBuilder._build_blended_dataset_splits:
 * each weighted list is normalize()d once (the shared list once, for the
 * train split's sizes; each per-split list on its own), and a weighted blend
 * needs a sample count for every split it serves.  Also allocates the
 * scratch of the whole build.
 */
static int builder_weights(ds_pipeline *p, build_state *b)
{
    char *errbuf = p->err;
    p->gpt = calloc(3 * p->nd, sizeof *p->gpt);
    b->sizes = calloc(p->nd, sizeof *b->sizes);
    b->max_size = calloc(p->nd, sizeof *b->max_size);
    b->lens = calloc(p->nd, sizeof *b->lens);
    b->w = calloc(p->nd, sizeof *b->w);
    b->jobs = calloc(3 * p->nd + 3, sizeof *b->jobs);
    RETURN_ERROR_IF(!p->gpt || !b->sizes || !b->max_size || !b->lens || !b->w || !b->jobs, DS_ERR_NOMEM,
                    "out of memory");
    /* BlendedDataset normalizes the weights again (prepare_weighted_blends) */
    memcpy(b->w, p->weights, p->nd * sizeof *b->w);
    for (int s = 0; s < 3; s++) {
        if (!p->weighted_s[s] || !p->count[s])
            continue;
        if (p->per_split || s == 0)
            ds_normalize_weights(b->w + p->first[s], p->count[s]);
        RETURN_ERROR_IF(p->present[s] && p->cfg.num_samples[s] == DS_NUM_SAMPLES_NONE, DS_ERR_ARG,
                        "a weighted blend needs a sample count for the %s split", ds_split_names[s]);
    }
    return 0;
}

/*
 * _build_megatron_dataset_splits for every prefix, in the builder's order:
 * each split's sequence range from the split matrix (the whole prefix with
 * blend_per_split), its num_samples (S for a lone dataset, None in an
 * unweighted blend, the surplus-padded share of a weighted one, per
 * Megatron version), then GPTDataset.__init__ up to the cache lookup.  A
 * dataset the cache does not hold becomes a job for run_jobs.
 */
static int prepare_gpt_datasets(ds_pipeline *p, build_state *b)
{
    const ds_gpt_config *cfg = &p->cfg;
    for (size_t d = 0; d < p->nd; d++) {
        uint64_t N = src_num_sequences(p, d);
        for (int s = 0; s < 3; s++) {
            ds_gpt *g = &p->gpt[(size_t)s * p->nd + d];
            g->prefix = d;
            g->split = s;
            if (!uses(p, s, d))
                continue;
            if (p->per_split) {
                /* the spoofed split matrix (0.0, 1.0): the whole prefix */
                g->seq_begin = 0;
                g->seq_end = N;
            } else {
                g->seq_begin = (uint64_t)ds_round_half_even(p->bookends[s] * (double)N);
                g->seq_end = (uint64_t)ds_round_half_even(p->bookends[s + 1] * (double)N);
            }
            int64_t S = cfg->num_samples[s];
            if (!p->blend_s[s]) {
                g->num_samples = S;
            } else if (!p->weighted_s[s]) {
                g->num_samples = DS_NUM_SAMPLES_NONE;
            } else if (cfg->megatron_version == DS_MEGATRON_0_8) {
                g->num_samples = (int64_t)ceil((double)S * b->w[d] * 1.005);
            } else {
                g->num_samples = (int64_t)ceil(ceil((double)S * b->w[d]) * (1.0 + cfg->surplus));
            }
            int rc = gpt_prepare(p, g);
            if (rc < 0)
                return rc;
            if (rc == 0) {
                g->built = 1;
                continue;
            }
            FORWARD_IF_ERROR(load_sizes(p, d, b->sizes, b->max_size, p->err));
            b->jobs[b->nj].g = g;
            b->jobs[b->nj].cost = (g->seq_end - g->seq_begin) * g->epochs +
                                  g->epochs * g->tokens / cfg->seq_length;
            b->nj++;
        }
    }
    return 0;
}

/*
 * The weighted BlendedDatasets: the builder's blend size (Σ ceil(S·w), or
 * Σ ceil(S·w·1.005) for 0.8), then BlendedDataset.__init__, which
 * normalizes the weights a second time, up to the cache lookup.  A weighted
 * blend needs nothing of its datasets but their descriptions until its
 * final check, so it is computed alongside them.
 */
static int prepare_weighted_blends(ds_pipeline *p, build_state *b)
{
    const ds_gpt_config *cfg = &p->cfg;
    for (int s = 0; s < 3; s++) {
        if (!p->present[s] || !p->blend_s[s] || !p->weighted_s[s])
            continue;
        size_t f = p->first[s], K = p->count[s];
        int64_t S = cfg->num_samples[s], size = 0;
        for (size_t d = f; d < f + K; d++)
            size += cfg->megatron_version == DS_MEGATRON_0_8
                        ? (int64_t)ceil((double)S * b->w[d] * 1.005)
                        : (int64_t)ceil((double)S * b->w[d]);
        memcpy(p->weights + f, b->w + f, K * sizeof *p->weights);
        ds_normalize_weights(p->weights + f, K);
        int rc = blend_prepare(p, s, size, p->weights + f, b->lens + f);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            b->jobs[b->nj].bl = &p->blends[s];
            b->jobs[b->nj].cost = p->blends[s].n;
            b->nj++;
        }
    }
    return 0;
}

/*
 * The end of each GPTDataset.__init__: the lengths of the splits served by
 * a lone GPTDataset, and the cache files of every built dataset, written
 * in the builder's order (prefix by prefix, split by split).
 */
static int finish_gpt_datasets(ds_pipeline *p)
{
    for (size_t i = 0; i < 3 * p->nd; i++) {
        ds_gpt *g = &p->gpt[i];
        if (!uses(p, g->split, g->prefix))
            continue;
        g->built = 1;
        if (!p->blend_s[g->split])
            p->length[g->split] = g->shuffle.view.n;
    }
    for (size_t d = 0; d < p->nd && p->cfg.cache_dir; d++) {
        for (int s = 0; s < 3; s++) {
            ds_gpt *g = &p->gpt[(size_t)s * p->nd + d];
            if (!uses(p, s, d) || g->from_cache)
                continue;
            FORWARD_IF_ERROR(ds_gpt_cache_store(p, g));
        }
    }
    return 0;
}

/*
 * The end of each weighted BlendedDataset.__init__: now that the
 * mid-level lengths are known, the builder's check that no dataset is
 * asked for more samples than it has, then the cache files.
 */
static int finish_weighted_blends(ds_pipeline *p, build_state *b)
{
    for (int s = 0; s < 3; s++) {
        if (!p->present[s] || !p->blend_s[s] || !p->weighted_s[s])
            continue;
        size_t f = p->first[s];
        for (size_t d = f; d < f + p->count[s]; d++)
            b->lens[d] = p->gpt[(size_t)s * p->nd + d].shuffle.view.n;
        if (p->blends[s].count)
            FORWARD_IF_ERROR(blend_finish(p, s, b->lens + f));
        p->length[s] = p->blends[s].dataset_index.view.n;
    }
    return 0;
}

/*
 * _build_blended_dataset_splits without weights: every dataset was built
 * for one epoch, the weights are their lengths (normalized), and the size
 * is min(S, Σ lengths), or None for build_exhaustive_blending_indices.  A
 * dataset of no sample would get weight 0, which Megatron does not guard;
 * it is an error here.
 */
static int build_unweighted_blends(ds_pipeline *p, build_state *b)
{
    char *errbuf = p->err;
    const ds_gpt_config *cfg = &p->cfg;
    for (int s = 0; s < 3; s++) {
        if (!p->present[s] || !p->blend_s[s] || p->weighted_s[s])
            continue;
        size_t f = p->first[s], K = p->count[s];
        int64_t S = cfg->num_samples[s], size;
        uint64_t tot = 0;
        for (size_t d = f; d < f + K; d++) {
            b->lens[d] = p->gpt[(size_t)s * p->nd + d].shuffle.view.n;
            tot += b->lens[d];
        }
        size = S == DS_NUM_SAMPLES_NONE ? DS_NUM_SAMPLES_NONE
               : (uint64_t)S < tot      ? S
                                        : (int64_t)tot;
        for (size_t d = f; d < f + K; d++) {
            RETURN_ERROR_IF(b->lens[d] == 0, DS_ERR_EMPTY,
                            "the %s split of '%s' holds no sample of %llu tokens, and an "
                            "unweighted blend would give it weight 0", ds_split_names[s],
                            p->paths[d], (unsigned long long)cfg->seq_length + (cfg->add_extra_token != 0));
            b->w[d] = (double)b->lens[d];
        }
        ds_normalize_weights(b->w + f, K);
        /* the weights shown are the train split's shares (each split's own
           with per-split lists) */
        if (p->per_split || s == DS_SPLIT_TRAIN || !p->present[DS_SPLIT_TRAIN])
            memcpy(p->weights + f, b->w + f, K * sizeof *p->weights);
        int rc = build_blend(p, s, size, b->w + f, b->lens + f);
        p->blends[s].w = NULL;
        if (rc < 0)
            return rc;
        p->length[s] = p->blends[s].dataset_index.view.n;
    }
    return 0;
}

int ds_pipeline_open(const ds_gpt_config *cfg, ds_pipeline **out)
{
    if (!out)
        return DS_ERR_ARG;
    ds_pipeline *p = calloc(1, sizeof *p);
    *out = p;
    if (!p)
        return DS_ERR_NOMEM;
    char *errbuf = p->err;
    RETURN_ERROR_IF(!cfg, DS_ERR_ARG, "no configuration");
    build_state b = {0};
    int rc;
#define STEP(expr) do { rc = (expr); if (rc < 0) goto cleanup; } while (0)
    STEP(configure(p, cfg));
    STEP(parse_paths(p, cfg));
    STEP(open_readers(p));
    STEP(builder_weights(p, &b));
    STEP(prepare_gpt_datasets(p, &b));
    STEP(prepare_weighted_blends(p, &b));
    STEP(run_jobs(p, b.jobs, b.nj, (const int32_t *const *)b.sizes, b.max_size));
    STEP(finish_gpt_datasets(p));
    STEP(finish_weighted_blends(p, &b));
    STEP(build_unweighted_blends(p, &b));
#undef STEP
    rc = 0;
cleanup:
    if (b.sizes)
        for (size_t d = 0; d < p->nd; d++)
            free(b.sizes[d]);
    free(b.sizes);
    free(b.max_size);
    free(b.lens);
    free(b.w);
    free(b.jobs);
    free((char *)p->cfg.cache_dir);
    p->cfg.cache_dir = NULL;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Accessors and samples                                                    */
/* ------------------------------------------------------------------------ */

size_t ds_pipeline_num_datasets(const ds_pipeline *p) { return p ? p->nd : 0; }
int ds_pipeline_is_blend(const ds_pipeline *p)
{
    return p && (p->blend_s[0] || p->blend_s[1] || p->blend_s[2]);
}

int ds_pipeline_dataset_split(const ds_pipeline *p, size_t d)
{
    return p && d < p->nd && p->owner ? p->owner[d] : -1;
}
uint64_t ds_pipeline_seq_length(const ds_pipeline *p) { return p ? p->cfg.seq_length : 0; }
unsigned ds_pipeline_extra_token(const ds_pipeline *p) { return p && p->cfg.add_extra_token ? 1 : 0; }

double ds_pipeline_weight(const ds_pipeline *p, size_t d)
{
    if (!p || d >= p->nd || !p->weights || !p->owner)
        return 0.0;
    return p->blend_s[p->owner[d] >= 0 ? p->owner[d] : 0] ? p->weights[d] : 1.0;
}

int ds_pipeline_has_split(const ds_pipeline *p, int split)
{
    return p && split >= 0 && split < 3 && p->gpt && p->present[split];
}

uint64_t ds_pipeline_length(const ds_pipeline *p, int split)
{
    return ds_pipeline_has_split(p, split) ? p->length[split] : 0;
}

uint64_t ds_pipeline_num_sequences(const ds_pipeline *p, size_t d)
{
    return p && d < p->nd && p->gpt ? src_num_sequences(p, d) : 0;
}

int ds_pipeline_is_mock(const ds_pipeline *p) { return p && p->mock_lengths; }

const ds_reader *ds_pipeline_reader(const ds_pipeline *p, size_t d)
{
    return p && d < p->nd && p->readers ? p->readers[d] : NULL;
}

int ds_pipeline_dataset(const ds_pipeline *p, int split, size_t d, ds_gpt_info *info)
{
    if (!p || !info)
        return DS_ERR_ARG;
    if (!ds_pipeline_has_split(p, split) || !uses(p, split, d) ||
        !p->gpt[(size_t)split * p->nd + d].built)
        return DS_ERR_RANGE;
    const ds_gpt *g = &p->gpt[(size_t)split * p->nd + d];
    info->path = p->paths[d];
    info->seq_begin = g->seq_begin;
    info->seq_end = g->seq_end;
    info->tokens_per_epoch = g->tokens;
    info->num_samples = g->num_samples;
    info->num_epochs = g->epochs;
    info->separate_final_epoch = g->separate;
    info->length = g->shuffle.view.n;
    info->from_cache = g->from_cache;
    memcpy(info->md5, g->md5, sizeof info->md5);
    info->description = g->description;
    info->document_index = g->doc.view;
    info->sample_index = g->sample.view;
    info->shuffle_index = g->shuffle.view;
    return 0;
}

int ds_pipeline_blend(const ds_pipeline *p, int split, ds_array *dataset_index,
                      ds_array *dataset_sample_index, const char **description, const char **md5)
{
    if (!p)
        return DS_ERR_ARG;
    if (!ds_pipeline_has_split(p, split) || !p->blend_s[split] || !p->blends[split].built)
        return DS_ERR_RANGE;
    const ds_blend *bl = &p->blends[split];
    if (dataset_index)
        *dataset_index = bl->dataset_index.view;
    if (dataset_sample_index)
        *dataset_sample_index = bl->dataset_sample_index.view;
    if (description)
        *description = bl->description;
    if (md5)
        *md5 = bl->md5;
    return 0;
}

/* Appends `count` tokens of sequence seq from offset off; every index was
   checked by the caller except against the data itself. */
static int append_tokens(const ds_reader *r, uint64_t seq, uint64_t off, uint64_t count,
                         int64_t *text, uint64_t *n, uint64_t cap)
{
    const void *data;
    uint64_t len;
    if (ds_reader_sequence(r, seq, &data, &len) != 0 || off > len || count > len - off)
        return DS_ERR_CORRUPT;
    if (count > cap - *n)
        count = cap - *n;
    size_t item = ds_dtype_size(ds_reader_dtype(r));
    ds_decode_tokens(text + *n, (const uint8_t *)data + off * item, (size_t)count, ds_reader_dtype(r));
    *n += count;
    return 0;
}

int ds_pipeline_text(const ds_pipeline *p, int split, uint64_t k, int64_t *text,
                     ds_sample_origin *origin)
{
    if (!p || !text)
        return DS_ERR_ARG;
    if (!ds_pipeline_has_split(p, split) || k >= p->length[split])
        return DS_ERR_RANGE;
    size_t d = p->first[split];
    uint64_t kk = k;
    if (p->blend_s[split]) {
        const ds_blend *bl = &p->blends[split];
        int64_t di = arr_get(&bl->dataset_index.view, k, 0);
        int64_t dsi = arr_get(&bl->dataset_sample_index.view, k, 0);
        if (di < 0 || (uint64_t)di >= p->count[split] || dsi < 0)
            return DS_ERR_CORRUPT;
        d += (size_t)di;
        kk = (uint64_t)dsi;
    }
    const ds_gpt *g = &p->gpt[(size_t)split * p->nd + d];
    const ds_reader *r = p->readers[d];
    const int32_t *mock = p->mock_lengths;
    if (kk >= g->shuffle.view.n)
        return DS_ERR_CORRUPT;
    int64_t j = arr_get(&g->shuffle.view, kk, 0);
    if (j < 0 || (uint64_t)j + 1 >= g->sample.view.n)
        return DS_ERR_CORRUPT;
    int64_t d0 = arr_get(&g->sample.view, (uint64_t)j, 0), o0 = arr_get(&g->sample.view, (uint64_t)j, 1);
    int64_t d1 = arr_get(&g->sample.view, (uint64_t)j + 1, 0), o1 = arr_get(&g->sample.view, (uint64_t)j + 1, 1);
    uint64_t ndoc = g->doc.view.n, N = src_num_sequences(p, d);
    if (d0 < 0 || d1 < d0 || (uint64_t)d1 >= ndoc || o0 < 0 || o1 < 0)
        return DS_ERR_CORRUPT;
    uint64_t E1 = p->cfg.add_extra_token ? 1 : 0, want = p->cfg.seq_length + E1, n = 0;
    for (int64_t pos = d0; pos <= d1; pos++) {
        int64_t seq = arr_get(&g->doc.view, (uint64_t)pos, 0);
        if (seq < 0 || (uint64_t)seq >= N)
            return DS_ERR_CORRUPT;
        uint64_t len = src_seq_length(p, d, (uint64_t)seq);
        uint64_t from = pos == d0 ? (uint64_t)o0 : 0;
        uint64_t to = pos == d1 ? (uint64_t)o1 + E1 : len;
        if (to > len || from > to)
            return DS_ERR_CORRUPT;
        if (mock) {
            /* MockGPTLowLevelDataset.__getitem__: (k + 1) % vocab_size for
               k < len - 1, then the EOD */
            for (uint64_t t = from; t < to && n < want; t++)
                text[n++] = t + 1 < len ? (int64_t)((t + 1) % (uint64_t)p->cfg.vocab_size) : p->cfg.eod;
            continue;
        }
        int rc = append_tokens(r, (uint64_t)seq, from, to - from, text, &n, want);
        if (rc < 0)
            return rc;
    }
    for (; n < want; n++)
        text[n] = p->cfg.pad;
    if (origin) {
        origin->dataset = d;
        origin->dataset_sample = kk;
        origin->shuffle_value = (uint64_t)j;
        origin->doc_first = (uint64_t)d0;
        origin->doc_last = (uint64_t)d1;
        origin->seq_first = (uint64_t)arr_get(&g->doc.view, (uint64_t)d0, 0);
        origin->offset = (uint64_t)o0;
    }
    return 0;
}

int ds_pipeline_sample(const ds_pipeline *p, int split, uint64_t k, int64_t *tokens,
                       int64_t *labels, float *loss_mask, int64_t *position_ids,
                       uint8_t *attention_mask)
{
    if (!p)
        return DS_ERR_ARG;
    uint64_t L = p->cfg.seq_length, E1 = p->cfg.add_extra_token ? 1 : 0;
    int64_t eod = p->cfg.eod, pad = p->cfg.pad;
    int64_t *text = malloc((L + 1) * sizeof *text);
    if (!text)
        return DS_ERR_NOMEM;
    int rc = ds_pipeline_text(p, split, k, text, NULL);
    if (rc < 0) {
        free(text);
        return rc;
    }
    /* tokens = text[:L]; labels = text[1:L+1], or roll(text, -1) with a pad
       last label when there is no extra token */
    if (!E1)
        text[L] = pad;
    for (uint64_t i = 0; i < L; i++) {
        int64_t tok = text[i], lab = text[i + 1];
        if (loss_mask)
            loss_mask[i] = (p->cfg.eod_mask_loss && tok == eod) || lab == pad ? 0.0f : 1.0f;
        if (tokens)
            tokens[i] = tok == pad ? 0 : tok;
        if (labels)
            labels[i] = lab == pad ? 0 : lab;
    }
    if (position_ids) {
        int64_t start = 0;
        for (uint64_t i = 0; i < L; i++) {
            position_ids[i] = (int64_t)i - start;
            if (p->cfg.reset_position_ids && text[i] == eod)
                start = (int64_t)i + 1;
        }
    }
    if (attention_mask) {
        /* row r sees columns c <= r, and with reset_attention_mask only
           those after the last EOD at a position < r */
        uint64_t first = 0;
        for (uint64_t r = 0; r < L; r++) {
            if (r > 0 && p->cfg.reset_attention_mask && text[r - 1] == eod)
                first = r;
            uint8_t *row = attention_mask + r * L;
            for (uint64_t c = 0; c < L; c++)
                row[c] = !(c <= r && c >= first);
        }
    }
    free(text);
    return 0;
}
