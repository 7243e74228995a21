/*
 * gptcache.c - the index cache of the training-data pipeline, as Megatron-Core
 * keeps it under --data-cache-path: each dataset's description (its
 * unique_description, json.dumps(unique_identifiers, indent=4)) and the MD5
 * of that text, which names the files, then the lookup and the store of the
 * {md5}-{class}-{split}-*.npy sets and their description.txt
 * (docs/formats.md, "GPT index cache").  Both tools use the same files, so
 * either reuses the other's cache.
 *
 * What it deliberately does not do: build any array (gptdata.c does), parse
 * or write .npy bytes itself (npy.c does), lock the directory against
 * concurrent builders (every file goes to a temporary name and is renamed,
 * so a reader sees a whole file or none), or remove stale sets.  It never
 * prints.
 */
#include "dataset_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- descriptions ---- */

static void describe_tokenizer(ds_sbuf *b, const ds_pipeline *p, int lvl)
{
    ds_sb_printf(b, "{");
    if (p->tok_class) {
        /* MegatronTokenizer.__init__(*paths, **options): class, paths, str(options) */
        ds_sb_indent(b, lvl + 1);
        ds_sb_printf(b, "\"class\": ");
        ds_sb_json_string(b, p->tok_class);
        ds_sb_printf(b, ",");
        ds_sb_indent(b, lvl + 1);
        ds_sb_printf(b, "\"tokenizer_path\": [");
        ds_sb_indent(b, lvl + 2);
        ds_sb_json_string(b, p->tok_model);
        ds_sb_indent(b, lvl + 1);
        ds_sb_printf(b, "]");
        if (strstr(p->tok_class, "SentencePiece") || strcmp(p->tok_class, "_Llama2Tokenizer") == 0) {
            ds_sb_printf(b, ",");
            ds_sb_indent(b, lvl + 1);
            ds_sb_printf(b, "\"vocab_extra_ids\": \"0\"");
        }
    } else if (p->cfg.tokenizer_ids == DS_TOKENIZER_IDS_MAIN) {
        static const char *const keys[] = {"class", "tokenizer_path", "additional_special_tokens",
                                           "vocab_file", "merges_file", "use_fast",
                                           "trust_remote_code", "include_special_tokens",
                                           "use_gigatoken"};
        const char *vals[] = {"megatron.core.tokenizers.text.text_tokenizer.MegatronTokenizerText",
                              "GPT2BPETokenizer", "[]", p->vocab_file, p->merge_file, "True",
                              "False", "True", "False"};
        for (int i = 0; i < 9; i++) {
            ds_sb_indent(b, lvl + 1);
            ds_sb_printf(b, "\"%s\": ", keys[i]);
            ds_sb_json_string(b, vals[i]);
            if (i < 8)
                ds_sb_printf(b, ",");
        }
    } else {
        ds_sb_indent(b, lvl + 1);
        ds_sb_printf(b, "\"class\": \"_GPT2BPETokenizer\",");
        ds_sb_indent(b, lvl + 1);
        ds_sb_printf(b, "\"tokenizer_path\": [");
        ds_sb_indent(b, lvl + 2);
        ds_sb_json_string(b, p->vocab_file);
        ds_sb_printf(b, ",");
        ds_sb_indent(b, lvl + 2);
        ds_sb_json_string(b, p->merge_file);
        ds_sb_indent(b, lvl + 1);
        ds_sb_printf(b, "]");
    }
    ds_sb_indent(b, lvl);
    ds_sb_printf(b, "}");
}

/* GPTDataset.unique_identifiers as json.dumps(indent=4) writes them, the
   object's "{" at the current position and its keys at level lvl + 1. */
static void describe_gpt(ds_sbuf *b, const ds_pipeline *p, const ds_gpt *g, int lvl)
{
    ds_sb_printf(b, "{");
    ds_sb_indent(b, lvl + 1);
    ds_sb_printf(b, "\"class\": \"%s\",", ds_gpt_class(p));
    ds_sb_indent(b, lvl + 1);
    ds_sb_printf(b, "\"dataset_path\": ");
    if (p->mock_lengths)
        ds_sb_printf(b, "null");
    else
        ds_sb_json_string(b, p->paths[g->prefix]);
    ds_sb_printf(b, ",");
    ds_sb_indent(b, lvl + 1);
    if (g->num_samples == DS_NUM_SAMPLES_NONE)
        ds_sb_printf(b, "\"num_samples\": null,");
    else
        ds_sb_printf(b, "\"num_samples\": %lld,", (long long)g->num_samples);
    ds_sb_indent(b, lvl + 1);
    ds_sb_printf(b, "\"index_split\": \"%s\",", ds_split_names[g->split]);
    ds_sb_indent(b, lvl + 1);
    ds_sb_printf(b, "\"random_seed\": %lu,", (unsigned long)p->cfg.seed);
    ds_sb_indent(b, lvl + 1);
    ds_sb_printf(b, "\"sequence_length\": %llu,", (unsigned long long)p->cfg.seq_length);
    ds_sb_indent(b, lvl + 1);
    ds_sb_printf(b, "\"split\": ");
    if (p->per_split) {
        /* blend_per_split: the config has neither split nor split_matrix */
        ds_sb_printf(b, "null,");
        ds_sb_indent(b, lvl + 1);
        ds_sb_printf(b, "\"split_matrix\": null,");
        goto tokenizer;
    }
    ds_sb_json_string(b, p->split_str);
    ds_sb_printf(b, ",");
    ds_sb_indent(b, lvl + 1);
    ds_sb_printf(b, "\"split_matrix\": [");
    for (int i = 0; i < 3; i++) {
        ds_sb_indent(b, lvl + 2);
        if (!p->present[i]) {
            ds_sb_printf(b, "null");
        } else {
            ds_sb_printf(b, "[");
            ds_sb_indent(b, lvl + 3);
            if (i == 0)
                ds_sb_printf(b, "0");
            else
                ds_sb_py_float(b, p->bookends[i]);
            ds_sb_printf(b, ",");
            ds_sb_indent(b, lvl + 3);
            ds_sb_py_float(b, p->bookends[i + 1]);
            ds_sb_indent(b, lvl + 2);
            ds_sb_printf(b, "]");
        }
        if (i < 2)
            ds_sb_printf(b, ",");
    }
    ds_sb_indent(b, lvl + 1);
    ds_sb_printf(b, "],");
tokenizer:
    ds_sb_indent(b, lvl + 1);
    ds_sb_printf(b, "\"tokenizer\": ");
    describe_tokenizer(b, p, lvl + 1);
    ds_sb_indent(b, lvl);
    ds_sb_printf(b, "}");
}

static void describe_blend(ds_sbuf *b, const ds_pipeline *p, int split, const ds_blend *bl,
                           const uint64_t *lengths, const double *weights)
{
    ds_sb_printf(b, "{");
    ds_sb_indent(b, 1);
    ds_sb_printf(b, "\"class\": \"BlendedDataset\",");
    ds_sb_indent(b, 1);
    ds_sb_printf(b, "\"datasets\": [");
    for (size_t d = 0; d < bl->K; d++) {
        ds_sb_indent(b, 2);
        describe_gpt(b, p, &p->gpt[(size_t)split * p->nd + bl->first + d], 2);
        if (d + 1 < bl->K)
            ds_sb_printf(b, ",");
    }
    ds_sb_indent(b, 1);
    ds_sb_printf(b, "],");
    ds_sb_indent(b, 1);
    ds_sb_printf(b, "\"split\": \"%s\",", ds_split_names[split]);
    ds_sb_indent(b, 1);
    ds_sb_printf(b, "\"weights\": [");
    for (size_t d = 0; d < bl->K; d++) {
        ds_sb_indent(b, 2);
        if (lengths)
            ds_sb_printf(b, "%llu", (unsigned long long)lengths[d]);
        else
            ds_sb_py_float(b, weights[d]);
        if (d + 1 < bl->K)
            ds_sb_printf(b, ",");
    }
    ds_sb_indent(b, 1);
    ds_sb_printf(b, "],");
    ds_sb_indent(b, 1);
    if (bl->size == DS_NUM_SAMPLES_NONE)
        ds_sb_printf(b, "\"size\": null");
    else
        ds_sb_printf(b, "\"size\": %lld", (long long)bl->size);
    ds_sb_indent(b, 0);
    ds_sb_printf(b, "}");
}

/* ---- the cache directory ---- */

static int mkdir_p(const char *dir, char *errbuf)
{
    char *d = strdup(dir);
    RETURN_ERROR_IF(!d, DS_ERR_NOMEM, "out of memory");
    for (char *s = d + 1;; s++) {
        if (*s == '/' || *s == 0) {
            char c = *s;
            *s = 0;
            if (mkdir(d, 0755) != 0 && errno != EEXIST) {
                DS_SET_ERROR("cannot create the cache directory '%s': %s", d, strerror(errno));
                free(d);
                return DS_ERR_IO;
            }
            *s = c;
            if (!c)
                break;
        }
    }
    free(d);
    return 0;
}

static char *cache_path(const ds_pipeline *p, const char *md5, const char *cls, int split,
                        const char *suffix)
{
    size_t n = strlen(p->cfg.cache_dir) + strlen(cls) + strlen(suffix) + 64;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s-%s-%s-%s", p->cfg.cache_dir, md5, cls, ds_split_names[split], suffix);
    return s;
}

/* 1 when the file holds exactly `want`. */
static int file_equals(const char *path, const char *want)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = strlen(want), i = 0;
    int c, same = 1;
    while ((c = getc(f)) != EOF) {
        if (i >= n || (char)c != want[i]) {
            same = 0;
            break;
        }
        i++;
    }
    fclose(f);
    return same && i == n;
}

/*
 * Looks up a set of cache files: {md5}-{cls}-{split}-description.txt and
 * one .npy per name.  A hit needs the description to be byte-identical to
 * ours and every .npy to map; the caller checks shapes.  Returns 1 on a
 * hit, 0 on a miss (nothing kept), or an error for out of memory.
 */
static int cache_load(ds_pipeline *p, const char *desc, const char *md5, const char *cls, int split,
                      const char *const *names, ds_arr *arrs, int n)
{
    char *dpath = cache_path(p, md5, cls, split, "description.txt");
    if (!dpath)
        return DS_ERR_NOMEM;
    int hit = file_equals(dpath, desc);
    free(dpath);
    for (int i = 0; hit && i < n; i++) {
        char suffix[64];
        snprintf(suffix, sizeof suffix, "%s.npy", names[i]);
        char *path = cache_path(p, md5, cls, split, suffix);
        if (!path)
            return DS_ERR_NOMEM;
        char scratch[DS_ERRMSG_SIZE];
        hit = ds_npy_load(&arrs[i].npy, path, scratch) == 0;
        free(path);
        if (hit) {
            arrs[i].view.data = arrs[i].npy.data;
            arrs[i].view.n = arrs[i].npy.shape[0];
            arrs[i].view.cols = arrs[i].npy.ndim == 2 ? (unsigned)arrs[i].npy.shape[1] : 1;
            arrs[i].view.descr = arrs[i].npy.descr;
        }
    }
    if (!hit)
        for (int i = 0; i < n; i++)
            ds_arr_release(&arrs[i]);
    return hit;
}

/* Writes the arrays, then the description: a crash in between leaves a set
   without its description, which is a miss. */
static int cache_store(ds_pipeline *p, const char *desc, const char *md5, const char *cls, int split,
                       const char *const *names, const ds_arr *arrs, int n)
{
    char *errbuf = p->err;
    FORWARD_IF_ERROR(mkdir_p(p->cfg.cache_dir, errbuf));
    for (int i = 0; i < n; i++) {
        char suffix[64];
        snprintf(suffix, sizeof suffix, "%s.npy", names[i]);
        char *path = cache_path(p, md5, cls, split, suffix);
        RETURN_ERROR_IF(!path, DS_ERR_NOMEM, "out of memory");
        uint64_t shape[2] = {arrs[i].view.n, arrs[i].view.cols};
        int rc = ds_npy_write(path, arrs[i].view.descr, shape, arrs[i].view.cols == 2 ? 2 : 1,
                              arrs[i].view.data, errbuf);
        free(path);
        FORWARD_IF_ERROR(rc);
    }
    char *path = cache_path(p, md5, cls, split, "description.txt");
    RETURN_ERROR_IF(!path, DS_ERR_NOMEM, "out of memory");
    int rc = ds_write_file_atomic(path, desc, strlen(desc), NULL, 0, errbuf);
    free(path);
    return rc;
}

/* Moves a mapped array out of a cache_load() slot: its view's descr points
   into the struct's own npy.descr, so a plain copy would leave it pointing
   at the slot. */
static void arr_take(ds_arr *dst, const ds_arr *src)
{
    *dst = *src;
    if (src->view.descr == src->npy.descr)
        dst->view.descr = dst->npy.descr;
}

static const char *const gpt_names[3] = {"document_index", "sample_index", "shuffle_index"};
static const char *const blend_names[2] = {"dataset_index", "dataset_sample_index"};

static int set_description(ds_pipeline *p, ds_sbuf *b, char **desc, char md5[33])
{
    char *errbuf = p->err;
    if (b->oom || !b->s) {
        free(b->s);
        RETURN_ERROR(DS_ERR_NOMEM, "out of memory");
    }
    *desc = b->s;
    ds_md5_hex(md5, b->s, b->n);
    return 0;
}

/* A cached GPTDataset set is usable when its shapes agree with each other
   and its dtypes are ones some Megatron version writes. */
static int gpt_cache_consistent(const ds_gpt *g)
{
    const ds_array *d = &g->doc.view, *s = &g->sample.view, *h = &g->shuffle.view;
    return g->doc.npy.ndim == 1 && !strcmp(d->descr, "<i4") && g->sample.npy.ndim == 2 &&
           s->cols == 2 && s->n >= 1 && (!strcmp(s->descr, "<i4") || !strcmp(s->descr, "<i8")) &&
           g->shuffle.npy.ndim == 1 && (!strcmp(h->descr, "<u4") || !strcmp(h->descr, "<i8")) &&
           h->n == s->n - 1;
}

/* ---- the internal interface (dataset_internal.h) ---- */

int ds_gpt_describe(ds_pipeline *p, ds_gpt *g)
{
    ds_sbuf b = {0};
    describe_gpt(&b, p, g, 0);
    return set_description(p, &b, &g->description, g->md5);
}

int ds_blend_describe(ds_pipeline *p, int split, ds_blend *bl, const uint64_t *lens)
{
    ds_sbuf b = {0};
    describe_blend(&b, p, split, bl, bl->size == DS_NUM_SAMPLES_NONE ? lens : NULL, bl->w);
    return set_description(p, &b, &bl->description, bl->md5);
}

int ds_gpt_cache_load(ds_pipeline *p, ds_gpt *g)
{
    char *errbuf = p->err;
    ds_arr arrs[3] = {{0}};
    int hit = cache_load(p, g->description, g->md5, ds_gpt_class(p), g->split, gpt_names, arrs, 3);
    RETURN_ERROR_IF(hit < 0, hit, "out of memory");
    if (!hit)
        return 0;
    arr_take(&g->doc, &arrs[0]);
    arr_take(&g->sample, &arrs[1]);
    arr_take(&g->shuffle, &arrs[2]);
    if (gpt_cache_consistent(g))
        return 1;
    ds_arr_release(&g->doc);
    ds_arr_release(&g->sample);
    ds_arr_release(&g->shuffle);
    return 0;
}

int ds_blend_cache_load(ds_pipeline *p, int split, ds_blend *bl)
{
    char *errbuf = p->err;
    ds_arr arrs[2] = {{0}};
    int hit = cache_load(p, bl->description, bl->md5, "BlendedDataset", split, blend_names, arrs, 2);
    RETURN_ERROR_IF(hit < 0, hit, "out of memory");
    if (!hit)
        return 0;
    if (arrs[0].npy.ndim == 1 && !strcmp(arrs[0].view.descr, "<i2") &&
        arrs[1].npy.ndim == 1 && !strcmp(arrs[1].view.descr, "<i8") &&
        arrs[0].view.n == bl->n && arrs[1].view.n == bl->n) {
        arr_take(&bl->dataset_index, &arrs[0]);
        arr_take(&bl->dataset_sample_index, &arrs[1]);
        return 1;
    }
    ds_arr_release(&arrs[0]);
    ds_arr_release(&arrs[1]);
    return 0;
}

int ds_gpt_cache_store(ds_pipeline *p, const ds_gpt *g)
{
    ds_arr arrs[3] = {g->doc, g->sample, g->shuffle};
    return cache_store(p, g->description, g->md5, ds_gpt_class(p), g->split, gpt_names, arrs, 3);
}

int ds_blend_cache_store(ds_pipeline *p, int split, const ds_blend *bl)
{
    ds_arr arrs[2] = {bl->dataset_index, bl->dataset_sample_index};
    return cache_store(p, bl->description, bl->md5, "BlendedDataset", split, blend_names, arrs, 2);
}
