/*
 * test_torchdist.c - train/torchdist against Megatron's torch_dist fixtures
 * (tests/data/torch_dist):
 *  - the mapping: the chunks that td_items lists as written (not replica)
 *    by the ranks of each fixture's TP x PP grid are exactly the chunks of
 *    its metadata.txt (key, global shape, offsets, sizes), each in the file
 *    of the rank that lists it (__R_0.distcp, R = tp_rank + TP pp_rank);
 *  - resharding: every fixture (and llama_bf16, bf16 storage) loaded at TP/PP 1/1, 2/1, 1/2 and 2/2 gives
 *    every rank exactly the slice of the TP 1 PP 1 load (which
 *    tests/cli/test_torchdist.sh compares with Megatron's logits);
 *  - the AdamW state of llama_optim (model-space layout) at every grid;
 *  - corrupt copies (a truncated .distcp, a global shape changed in
 *    .metadata, an archive whose shape is not its chunk's, no
 *    metadata.json, another backend) fail with one line naming the file
 *    and the key.
 */
#include "harness.h"
#include "torchdist_fixtures.h"

#include "model.h"
#include "torchdist.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

static void config(gpt_config *c, int llama, int tp, int tr, int pp, int pr)
{
    gpt_config_init(c);
    c->num_layers = 2;
    c->hidden_size = 16;
    c->num_heads = 4;
    c->max_position_embeddings = 8;
    c->vocab_size = 64;
    c->make_vocab_size_divisible_by = 1;
    c->tp_size = tp;
    c->tp_rank = tr;
    c->pp_size = pp;
    c->pp_rank = pr;
    if (!llama) return;
    c->position_embedding = GPT_POS_ROPE;
    c->normalization = GPT_NORM_RMSNORM;
    c->swiglu = 1;
    c->ffn_hidden_size = 32;
    c->num_query_groups = 2;
    c->untie_embeddings = 1;
    c->add_bias_linear = 0;
}

static int model(gpt_model *m, int llama, int tp, int tr, int pp, int pr)
{
    gpt_config c;
    char err[512];
    config(&c, llama, tp, tr, pp, pr);
    int rc = gpt_model_init(m, &c, 1, 8, err, sizeof err);
    if (rc) fprintf(stderr, "gpt_model_init: %s\n", err);
    return rc;
}

static void tuple(char *out, size_t cap, const uint64_t *v, int n)
{
    size_t k = (size_t)snprintf(out, cap, "(");
    for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(out + k, cap - k, i ? ", %llu" : "%llu", (unsigned long long)v[i]);
    if (k < cap) snprintf(out + k, cap - k, n == 1 ? ",)" : ")");
}

static void grid_of(const char *fx, int *tp, int *pp)
{
    *tp = strstr(fx, "tp2") ? 2 : 1;
    *pp = strstr(fx, "pp2") ? 2 : 1;
}

/* metadata.txt's chunk line of an item, without the file offsets: "KEY | tensor | SHAPE | OFF/SIZE | FILE" */
static void item_line(char *out, size_t cap, const td_item *it, const char *file)
{
    char a[96], b[96], c[96];
    tuple(a, sizeof a, it->shape, it->ndim);
    tuple(b, sizeof b, it->off, it->ndim);
    tuple(c, sizeof c, it->size, it->ndim);
    snprintf(out, cap, "%s | tensor | %s | %s/%s | %s", it->key, a, b, c, file);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void check_mapping(const char *fx)
{
    int tp, pp;
    grid_of(fx, &tp, &pp);
    int llama = !strncmp(fx, "llama", 5);
    char path[256], line[1024];
    snprintf(path, sizeof path, DIR "%s/metadata.txt", fx);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    char *want[512], *got[512];
    int nw = 0, ng = 0;
    while (fgets(line, sizeof line, f) && nw < 512) {
        char key[128], kind[16], shape[64], dtype[32], chunk[128], file[64];
        if (line[0] == '#' || sscanf(line, "%127s | %15s | %63[^|]| %31s | %127[^|]| %63s", key, kind, shape, dtype, chunk, file) != 6 ||
            strcmp(kind, "tensor"))
            continue;
        shape[strlen(shape) - 1] = 0;   /* the spaces before '|' */
        chunk[strlen(chunk) - 1] = 0;
        snprintf(line, sizeof line, "%s | tensor | %s | %s | %s", key, shape, chunk, file);
        want[nw++] = strdup(line);
    }
    fclose(f);
    for (int pr = 0; pr < pp; pr++)
        for (int tr = 0; tr < tp; tr++) {
            gpt_model m;
            if (model(&m, llama, tp, tr, pp, pr) != 0) { CHECK(0); continue; }
            td_item *it = NULL;
            size_t n = 0;
            char err[256], file[32];
            CHECK(td_items(&m, &it, &n, err, sizeof err) == 0);
            snprintf(file, sizeof file, "__%d_0.distcp", tr + tp * pr);
            for (size_t i = 0; i < n && ng < 512; i++) {
                if (it[i].replica) continue;
                item_line(line, sizeof line, &it[i], file);
                got[ng++] = strdup(line);
            }
            free(it);
            gpt_model_free(&m);
        }
    qsort(want, (size_t)nw, sizeof *want, cmp_str);
    qsort(got, (size_t)ng, sizeof *got, cmp_str);
    CHECK(nw == ng && nw > 0);
    for (int i = 0; i < nw && i < ng; i++) {
        if (strcmp(want[i], got[i])) fprintf(stderr, "%s:\n want %s\n got  %s\n", fx, want[i], got[i]);
        CHECK(!strcmp(want[i], got[i]));
    }
    for (int i = 0; i < nw; i++) free(want[i]);
    for (int i = 0; i < ng; i++) free(got[i]);
}

static void test_mapping(void)
{
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) check_mapping(fixtures[i]);
}

/* The global tensors of a TP 1 PP 1 model, key by key, dense. */
struct dense {
    td_item *it;
    size_t n;
    float *v[64];
};

static float *dense_get(struct dense *d, const char *key)
{
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->it[i].key, key)) return d->v[i];
    return NULL;
}

/* The element index in the global tensor of element j of an item's chunk. */
static size_t global_index(const td_item *it, size_t j)
{
    size_t idx = 0, rest = j, stride[TD_MAX_DIMS], s = 1;
    for (int d = it->ndim - 1; d >= 0; d--) { stride[d] = s; s *= (size_t)it->size[d]; }
    for (int d = 0; d < it->ndim; d++) {
        size_t c = rest / stride[d];
        rest %= stride[d];
        idx = idx * (size_t)it->shape[d] + (size_t)it->off[d] + c;
    }
    return idx;
}

static void dense_build(struct dense *d, gpt_model *ref)
{
    char err[256];
    memset(d, 0, sizeof *d);
    td_item *it = NULL;
    size_t n = 0;
    CHECK(td_items(ref, &it, &n, err, sizeof err) == 0);
    d->it = calloc(64, sizeof *d->it);
    float *chunk = malloc(ref->num_params * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float *g = dense_get(d, it[i].key);
        if (!g && d->n < 64) {
            size_t tot = 1;
            for (int k = 0; k < it[i].ndim; k++) tot *= (size_t)it[i].shape[k];
            d->it[d->n] = it[i];
            g = d->v[d->n++] = calloc(tot, sizeof(float));
        }
        td_item_gather(ref, &it[i], ref->master_memory, chunk);
        for (size_t j = 0; j < td_item_numel(&it[i]); j++) g[global_index(&it[i], j)] = chunk[j];
    }
    free(chunk);
    free(it);
}

static void dense_free(struct dense *d)
{
    for (size_t i = 0; i < d->n; i++) free(d->v[i]);
    free(d->it);
}

static void check_reshard(const char *fx)
{
    int llama = !strncmp(fx, "llama", 5);
    char dir[256], err[1024];
    snprintf(dir, sizeof dir, DIR "%s/iter_0000001", fx);
    gpt_model ref;
    td_state st;
    if (model(&ref, llama, 1, 0, 1, 0) != 0) { CHECK(0); return; }
    int rc = td_load(&ref, dir, &st, err, sizeof err);
    if (rc) fprintf(stderr, "%s: %s\n", fx, err);
    CHECK(rc == 0 && st.iteration == 1 && !st.has_args && !st.has_optimizer && !st.has_rng && !st.has_scheduler);
    struct dense d;
    dense_build(&d, &ref);
    static const int grids[4][2] = { {1, 1}, {2, 1}, {1, 2}, {2, 2} };
    for (int g = 0; g < 4; g++) {
        int tp = grids[g][0], pp = grids[g][1];
        for (int pr = 0; pr < pp; pr++)
            for (int tr = 0; tr < tp; tr++) {
                gpt_model m;
                if (model(&m, llama, tp, tr, pp, pr) != 0) { CHECK(0); continue; }
                rc = td_load(&m, dir, &st, err, sizeof err);
                if (rc) fprintf(stderr, "%s at TP %d PP %d: %s\n", fx, tp, pp, err);
                CHECK(rc == 0);
                td_item *it = NULL;
                size_t n = 0, bad = 0, covered = 0;
                CHECK(td_items(&m, &it, &n, err, sizeof err) == 0);
                float *chunk = malloc(m.num_params * sizeof(float));
                for (size_t i = 0; i < n; i++) {
                    const float *gl = dense_get(&d, it[i].key);
                    td_item_gather(&m, &it[i], m.master_memory, chunk);
                    for (size_t j = 0; gl && j < td_item_numel(&it[i]); j++) bad += chunk[j] != gl[global_index(&it[i], j)];
                    bad += !gl;
                    covered += td_item_numel(&it[i]);
                }
                if (bad) fprintf(stderr, "%s at TP %d PP %d rank (%d, %d): %zu values differ\n", fx, tp, pp, tr, pr, bad);
                CHECK(bad == 0 && covered == m.num_params);
                free(chunk);
                free(it);
                gpt_model_free(&m);
            }
    }
    dense_free(&d);
    gpt_model_free(&ref);
}

static void test_reshard(void)
{
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) check_reshard(fixtures[i]);
    check_reshard("llama_bf16");   /* bf16 storage (make_golden.py) */
}

/* ---- corrupt copies ---- */

static char tmpdir[64];

static int put(const char *name, const unsigned char *b, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(b, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* A copy of gpt/iter_0000001 in tmpdir with file `name` replaced by
 * (b, n) (NULL: removed), loaded at TP 1: the error must be one line
 * holding `want`. */
static void refused(const char *name, const unsigned char *b, size_t n, int code, const char *want)
{
    static const char *files[] = { ".metadata", "__0_0.distcp", "metadata.json" };
    for (int i = 0; i < 3; i++) {
        char src[256];
        size_t len;
        snprintf(src, sizeof src, DIR "gpt/iter_0000001/%s", files[i]);
        unsigned char *all = read_file_or_null(src, &len);
        CHECK(all && put(files[i], all, len) == 0);
        free(all);
    }
    char path[256], err[1024] = "";
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    if (b) CHECK(put(name, b, n) == 0);
    else CHECK(unlink(path) == 0);
    gpt_model m;
    td_state st;
    if (model(&m, 0, 1, 0, 1, 0) != 0) { CHECK(0); return; }
    int rc = td_load(&m, tmpdir, &st, err, sizeof err);
    if (rc != code || !strstr(err, want) || strchr(err, '\n'))
        fprintf(stderr, "%s: rc %d, want %d; message '%s', want '%s'\n", name, rc, code, err, want);
    CHECK(rc == code && strstr(err, want) && !strchr(err, '\n'));
    gpt_model_free(&m);
}

static void test_corrupt(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_torchdist.XXXXXX");
    CHECK(mkdtemp(tmpdir) != NULL);
    size_t n, nm;
    unsigned char *d = read_file_or_null(DIR "gpt/iter_0000001/__0_0.distcp", &n);
    unsigned char *md = read_file_or_null(DIR "gpt/iter_0000001/.metadata", &nm);
    CHECK(d && md);
    if (!d || !md) return;
    /* the last item (the final norm's bias) cut short */
    refused("__0_0.distcp", d, n - 100, TD_ERR_FORMAT, "key 'decoder.final_layernorm.bias': truncated");
    /* linear_qkv.weight's global shape (2, 48, 16) as (2, 47, 16): its chunks no longer fit */
    size_t at = find(md, nm, "K\x02K0K\x10\x87", 7);
    CHECK(at < nm);
    if (at < nm) {
        md[at + 3] = 47;
        refused(".metadata", md, nm, TD_ERR_FORMAT, "key 'decoder.layers.self_attention.linear_qkv.weight': a chunk lies outside");
        md[at + 3] = 48;
    }
    /* an archive whose tensor shape is not its chunk's: the position embedding's (8, 16) as (8, 15) */
    size_t pos = find(d, n, "K\x08K\x10\x86", 5);   /* the first tensor archive with an (8, 16) shape */
    CHECK(pos < n);
    if (pos < n) {
        d[pos + 3] = 15;
        refused("__0_0.distcp", d, n, TD_ERR_FORMAT, "'embedding.position_embeddings.weight'");
        d[pos + 3] = 16;
    }
    refused("metadata.json", NULL, 0, TD_ERR_IO, "metadata.json");
    static const char other[] = "{\"sharded_backend\": \"zarr\", \"sharded_backend_version\": 1}";
    refused("metadata.json", (const unsigned char *)other, sizeof other - 1, TD_ERR_UNSUPPORTED, "sharded_backend is \"zarr\"");
    /* a model key this run lacks: the GPT checkpoint under --disable-bias-linear */
    gpt_config c;
    gpt_model m;
    td_state st;
    char err[1024];
    config(&c, 0, 1, 0, 1, 0);
    c.add_bias_linear = 0;
    CHECK(gpt_model_init(&m, &c, 1, 8, err, sizeof err) == 0);
    int rc = td_load(&m, DIR "gpt/iter_0000001", &st, err, sizeof err);
    if (rc != TD_ERR_MISMATCH) fprintf(stderr, "no bias: %d %s\n", rc, err);
    CHECK(rc == TD_ERR_MISMATCH &&
          strstr(err, "bias', which this model does not have"));
    gpt_model_free(&m);
    /* another model: 3 layers */
    config(&c, 0, 1, 0, 1, 0);
    c.num_layers = 3;
    CHECK(gpt_model_init(&m, &c, 1, 8, err, sizeof err) == 0);
    CHECK(td_load(&m, DIR "gpt/iter_0000001", &st, err, sizeof err) == TD_ERR_MISMATCH &&
          strstr(err, "key 'decoder.layers.self_attention.linear_qkv.layer_norm_weight' has 2 on axis 0 in the checkpoint but 3"));
    gpt_model_free(&m);
    const char *names[] = { ".metadata", "__0_0.distcp", "metadata.json" };
    for (int i = 0; i < 3; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", tmpdir, names[i]);
        unlink(p);
    }
    rmdir(tmpdir);
    free(d);
    free(md);
}

/* A larger padded vocabulary than the checkpoint's: its rows, then zeros. */
static void test_padding(void)
{
    gpt_config c;
    gpt_model m, ref;
    td_state st;
    char err[1024];
    config(&c, 1, 1, 0, 1, 0);
    c.make_vocab_size_divisible_by = 48;   /* 64 -> 96 */
    CHECK(gpt_model_init(&m, &c, 1, 8, err, sizeof err) == 0 && m.Vp == 96);
    CHECK(model(&ref, 1, 1, 0, 1, 0) == 0);
    CHECK(td_load(&m, DIR "llama/iter_0000001", &st, err, sizeof err) == 0);
    CHECK(td_load(&ref, DIR "llama/iter_0000001", &st, err, sizeof err) == 0);
    const float *a = m.master_memory, *b = ref.master_memory;
    size_t C = 16;
    CHECK(!memcmp(a, b, 64 * C * sizeof(float)));
    int zero = 1;
    for (size_t i = 64 * C; i < 96 * C; i++) zero &= a[i] == 0;
    CHECK(zero);
    gpt_model_free(&m);
    gpt_model_free(&ref);
}

/* llama_optim (make_optim.py): at every grid, each rank's AdamW state and
 * masters are the functions of its weights the fixture stores (param = w +
 * 1, exp_avg = 2 w, exp_avg_sq = w w), and the step is 4; another sharding
 * type is refused by name. */
static void test_optimizer(void)
{
    static const int grids[4][2] = { {1, 1}, {2, 1}, {1, 2}, {2, 2} };
    const char *dir = DIR "llama_optim/iter_0000004";
    char err[1024];
    for (int g = 0; g < 4; g++) {
        int tp = grids[g][0], pp = grids[g][1];
        for (int pr = 0; pr < pp; pr++)
            for (int tr = 0; tr < tp; tr++) {
                gpt_model m;
                td_state st;
                if (model(&m, 1, tp, tr, pp, pr) != 0) { CHECK(0); continue; }
                int rc = td_load(&m, dir, &st, err, sizeof err);
                CHECK(rc == 0 && st.has_optimizer && st.has_step && st.step == 4 && st.has_scheduler &&
                      st.sched_num_steps == 8 && st.sched_decay_steps == 12 && !strcmp(st.sched_decay_style, "linear") &&
                      st.consumed_train_samples == 8 && !strcmp(st.optim_sharding, "fully_reshardable"));
                float *w = malloc(m.num_params * sizeof(float));
                memcpy(w, m.master_memory, m.num_params * sizeof(float));
                rc = td_load_optimizer(&m, dir, &st, err, sizeof err);
                if (rc) fprintf(stderr, "TP %d PP %d: %s\n", tp, pp, err);
                CHECK(rc == 0 && m.step == 4 && m.opt_npieces == 1 && m.opt_pieces[0].lo == 0 &&
                      m.opt_pieces[0].hi == m.num_params);
                size_t bad = 0;
                for (size_t i = 0; rc == 0 && i < m.num_params; i++)
                    bad += m.master_memory[i] != w[i] + 1.0f || m.m[i] != w[i] * 2.0f || m.v[i] != w[i] * w[i];
                if (bad) fprintf(stderr, "TP %d PP %d rank (%d, %d): %zu values differ\n", tp, pp, tr, pr, bad);
                CHECK(bad == 0);
                strcpy(st.optim_sharding, "dp_reshardable");
                CHECK(td_load_optimizer(&m, dir, &st, err, sizeof err) == TD_ERR_UNSUPPORTED &&
                      strstr(err, "optimizer sharding type 'dp_reshardable' is not read"));
                free(w);
                gpt_model_free(&m);
            }
    }
    /* a checkpoint without optimizer state: its exp_avg keys are missing */
    gpt_model m;
    td_state st;
    CHECK(model(&m, 1, 1, 0, 1, 0) == 0);
    CHECK(td_load(&m, DIR "llama/iter_0000001", &st, err, sizeof err) == 0 && !st.has_step);
    CHECK(td_load_optimizer(&m, DIR "llama/iter_0000001", &st, err, sizeof err) == TD_ERR_FORMAT &&
          strstr(err, "no Adam step"));
    st.has_step = 1;
    CHECK(td_load_optimizer(&m, DIR "llama/iter_0000001", &st, err, sizeof err) == TD_ERR_MISMATCH &&
          strstr(err, "no tensor 'optimizer.state.exp_avg.embedding.word_embeddings.weight'"));
    gpt_model_free(&m);
}

int main(void)
{
    RUN(test_mapping);
    RUN(test_reshard);
    RUN(test_corrupt);
    RUN(test_padding);
    RUN(test_optimizer);
    return harness_report();
}
