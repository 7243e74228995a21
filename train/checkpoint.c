/*
 * checkpoint.c - mdstrain's checkpoint files; see checkpoint.h and the byte
 * layout in docs/formats.md.  Integers and floats are little-endian; the
 * header is packed field by field, the tensor sections are fp32 arrays moved
 * in chunks through the model's state interface (gpt_state_read/write), so
 * the tensors may live on any backend (a big-endian host is refused at
 * compile time).
 *
 * It does not print, exit, or keep anything between calls.
 */
#include "checkpoint.h"
#include "le.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes the fp32 sections as stored: little-endian hosts only"
#endif

#define CKPT_MAGIC "MDSCKPT\0"
#define HEADER_BYTES 512
#define HEADER_SUM_AT (HEADER_BYTES - 8)
#define SECTIONS_AT 320
#define NSECTIONS 3

static const char *const section_names[NSECTIONS] = {"weights", "adam m", "adam v"};

#define FAIL(code, ...) do { if (err && errlen) snprintf(err, errlen, __VA_ARGS__); rc = (code); goto cleanup; } while (0)

uint64_t ckpt_fnv1a64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* ---- little-endian packing ------------------------------------------------ */

static void putf32(unsigned char *p, float f) { uint32_t x; memcpy(&x, &f, 4); le_put32(p, x); }
static void putf64(unsigned char *p, double f) { uint64_t x; memcpy(&x, &f, 8); le_put64(p, x); }
static double getf64(const unsigned char *p) { uint64_t x = le_get64(p); double f; memcpy(&f, &x, 8); return f; }

/* The architecture fields of the header, in order from offset 16 (int32). */
enum { H_LAYERS, H_HIDDEN, H_HEADS, H_FFN, H_MAXPOS, H_VOCAB, H_PADDED, H_VOCAB_DIV, H_UNTIE,
       H_INIT_STD, H_EPS, H_TP_SIZE, H_TP_RANK, H_PP_SIZE, H_PP_RANK, H_NTENSORS, H_NFIELDS };
static const char *const field_names[H_NFIELDS] = {
    "num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "max_position_embeddings",
    "vocab_size", "padded_vocab_size", "make_vocab_size_divisible_by", "untie_embeddings",
    "init_method_std", "norm_epsilon", "tensor_model_parallel_size", "tensor_model_parallel_rank",
    "pipeline_model_parallel_size", "pipeline_model_parallel_rank", "num_tensors"};

/* The header's table of tensor sizes holds the tensors up to the untied
 * output layer (17, at offset 96, up to the iteration at 232); the
 * embedding LayerNorm's two come after them in the sections, their sizes
 * implied by the architecture block's embed_layernorm (C each on the first
 * stage) and counted in num_params. */
#define SIZE_TABLE (GPT_OUTW + 1)

static void model_fields(const gpt_model *m, int32_t f[H_NFIELDS])
{
    f[H_LAYERS] = m->L;
    f[H_HIDDEN] = m->C;
    f[H_HEADS] = m->NH;
    f[H_FFN] = m->F;
    f[H_MAXPOS] = m->maxT;
    f[H_VOCAB] = m->cfg.vocab_size;
    f[H_PADDED] = m->Vp;
    f[H_VOCAB_DIV] = m->cfg.make_vocab_size_divisible_by;
    f[H_UNTIE] = m->cfg.untie_embeddings;
    f[H_INIT_STD] = 0;   /* floats: packed separately */
    f[H_EPS] = 0;
    f[H_TP_SIZE] = m->cfg.tp_size;
    f[H_TP_RANK] = m->cfg.tp_rank;
    f[H_PP_SIZE] = m->cfg.pp_size;
    f[H_PP_RANK] = m->cfg.pp_rank;
    f[H_NTENSORS] = SIZE_TABLE;
}

/* The architecture fields of version 2, at ARCH_AT: i32 x 8 then f64 x 3
 * (version 1 files hold none: GPT's values are implied; fields added later
 * read 0 in files written before them). */
#define ARCH_AT 392
enum { A_POSITION, A_NORM, A_SWIGLU, A_GROUPS, A_BIAS, A_INTERLEAVED, A_LN1P, A_EMBLN, A_NINTS };
static const char *const arch_names[A_NINTS] = {
    "position_embedding_type", "normalization", "swiglu", "num_query_groups", "add_bias_linear",
    "rotary_interleaved", "apply_layernorm_1p", "embed_layernorm"};
static const char *const arch_f_names[3] = {"rotary_base", "rotary_percent", "rope_scaling_factor"};

static void arch_fields(const gpt_model *m, int32_t a[A_NINTS], double d[3])
{
    const gpt_config *c = &m->cfg;
    a[A_POSITION] = c->position_embedding;
    a[A_NORM] = c->normalization;
    a[A_SWIGLU] = c->swiglu;
    a[A_GROUPS] = m->G;
    a[A_BIAS] = c->add_bias_linear;
    a[A_INTERLEAVED] = c->position_embedding == GPT_POS_ROPE ? c->rotary_interleaved : 0;
    a[A_LN1P] = c->apply_layernorm_1p;
    a[A_EMBLN] = c->embed_layernorm;
    int rope = c->position_embedding == GPT_POS_ROPE;
    d[0] = rope ? c->rotary_base : 10000.0;
    d[1] = rope ? c->rotary_percent : 1.0;
    d[2] = rope ? c->rope_scaling_factor : 0.0;
}

/* A field's value in words for the mismatch message. */
static void arch_value(char *out, size_t cap, int field, int32_t v)
{
    static const char *const pos[] = {"learned_absolute", "rope", "none"};
    static const char *const norm[] = {"LayerNorm", "RMSNorm"};
    if (field == A_POSITION && v >= 0 && v < 3) snprintf(out, cap, "%s", pos[v]);
    else if (field == A_NORM && v >= 0 && v < 2) snprintf(out, cap, "%s", norm[v]);
    else snprintf(out, cap, "%d", (int)v);
}

static void pack_header(unsigned char *h, const gpt_model *m, const ckpt_state *st, const uint64_t sums[NSECTIONS])
{
    memset(h, 0, HEADER_BYTES);
    memcpy(h, CKPT_MAGIC, 8);
    le_put32(h + 8, CKPT_VERSION);
    le_put32(h + 12, HEADER_BYTES);
    int32_t f[H_NFIELDS];
    model_fields(m, f);
    for (int i = 0; i < H_NFIELDS; i++) le_put32(h + 16 + 4 * i, (uint32_t)f[i]);
    putf32(h + 16 + 4 * H_INIT_STD, m->cfg.init_method_std);
    putf32(h + 16 + 4 * H_EPS, m->cfg.layernorm_eps);
    le_put64(h + 80, m->cfg.seed);
    le_put64(h + 88, (uint64_t)m->num_params);
    for (int i = 0; i < SIZE_TABLE; i++) le_put64(h + 96 + 8 * i, (uint64_t)m->param_sizes[i]);
    le_put64(h + 232, st->iteration);
    le_put64(h + 240, (uint64_t)m->step);
    le_put64(h + 248, st->consumed_train_samples);
    le_put64(h + 256, st->consumed_valid_samples);
    putf64(h + 264, st->max_lr);
    putf64(h + 272, st->min_lr);
    putf64(h + 280, st->init_lr);
    putf64(h + 288, st->warmup_steps);
    putf64(h + 296, st->decay_steps);
    putf64(h + 304, st->num_steps);
    le_put32(h + 312, st->decay_style);
    uint64_t bytes = (uint64_t)m->num_params * sizeof(float);
    for (int s = 0; s < NSECTIONS; s++) {
        unsigned char *e = h + SECTIONS_AT + 24 * s;
        le_put64(e, HEADER_BYTES + (uint64_t)s * bytes);
        le_put64(e + 8, bytes);
        le_put64(e + 16, sums[s]);
    }
    int32_t a[A_NINTS];
    double d[3];
    arch_fields(m, a, d);
    for (int i = 0; i < A_NINTS; i++) le_put32(h + ARCH_AT + 4 * i, (uint32_t)a[i]);
    for (int i = 0; i < 3; i++) putf64(h + ARCH_AT + 32 + 8 * i, d[i]);
    putf64(h + 448, st->loss_scale);
    le_put32(h + 456, st->growth_tracker);
    le_put32(h + 460, st->hysteresis_tracker);
    le_put32(h + 464, st->ds_scheduler);
    putf64(h + 472, st->ds_last_batch_iteration);
    putf64(h + 480, st->ds_lr);
    putf64(h + 488, st->ds_lr_embed);
    le_put64(h + HEADER_SUM_AT, ckpt_fnv1a64(CKPT_FNV_INIT, h, HEADER_SUM_AT));
}

/* ---- paths and atomic files ---------------------------------------------- */

int ckpt_rank_dir(char *out, size_t cap, const char *dir, uint64_t iteration, const gpt_config *cfg)
{
    int n = cfg->pp_size > 1
        ? snprintf(out, cap, "%s/iter_%07" PRIu64 "/mp_rank_%02d_%03d", dir, iteration, cfg->tp_rank, cfg->pp_rank)
        : snprintf(out, cap, "%s/iter_%07" PRIu64 "/mp_rank_%02d", dir, iteration, cfg->tp_rank);
    return n < 0 || (size_t)n >= cap ? CKPT_ERR_ARG : 0;
}

int ckpt_make_dirs(const char *path, char *err, size_t errlen)
{
    int rc = 0;
    char *p = strdup(path);
    if (!p) FAIL(CKPT_ERR_IO, "cannot create '%s': out of memory", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            FAIL(CKPT_ERR_IO, "cannot create directory '%s': %s", p, strerror(errno));
        *s = c;
        if (!c) break;
    }
cleanup:
    free(p);
    return rc;
}

static void fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);   /* best effort: some file systems refuse directory fsync */
        close(fd);
    }
}

int ckpt_write_atomic(const char *dirpath, const char *path,
                        int (*emit)(FILE *f, const char *tmp, void *ctx, char *err, size_t errlen), void *ctx,
                        char *err, size_t errlen)
{
    int rc = 0;
    char tmp[4200];
    FILE *f = NULL;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) FAIL(CKPT_ERR_ARG, "path too long: '%s'", path);
    f = fopen(tmp, "wb");
    if (!f) FAIL(CKPT_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
    if ((rc = emit(f, tmp, ctx, err, errlen)) != 0) goto cleanup;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        FAIL(CKPT_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    int cr = fclose(f);
    f = NULL;
    if (cr != 0) FAIL(CKPT_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0) FAIL(CKPT_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    fsync_dir(dirpath);
cleanup:
    if (f) {
        fclose(f);
        remove(tmp);
    }
    return rc;
}

/* The tensor sections move through a host buffer of this many floats. */
#define CHUNK_FLOATS ((size_t)1 << 20)

struct rank_file {
    const gpt_model *m;
    const ckpt_state *st;
    const float *adam[2];   /* the caller's full AdamW state, or NULL: the model's */
};

/* Elements [off, off + n) of section s as host floats: the caller's array,
 * or read from the model into buf. */
static const float *section_chunk(const struct rank_file *rf, int s, size_t off, size_t n, float *buf)
{
    if (s > 0 && rf->adam[s - 1])
        return rf->adam[s - 1] + off;
    return gpt_state_read(rf->m, s == 0 ? GPT_STATE_WEIGHTS : s == 1 ? GPT_STATE_ADAM_M : GPT_STATE_ADAM_V,
                          off, buf, n) == 0 ? buf : NULL;
}

/* Header placeholder, the three sections streamed with their checksums,
 * then the real header over the placeholder. */
static int emit_rank_file(FILE *f, const char *tmp, void *ctx, char *err, size_t errlen)
{
    const struct rank_file *rf = ctx;
    int rc = 0;
    unsigned char header[HEADER_BYTES] = {0};
    float *buf = malloc(CHUNK_FLOATS * sizeof(float));
    uint64_t sums[NSECTIONS];
    if (!buf) FAIL(CKPT_ERR_IO, "cannot write '%s': out of memory", tmp);
    if (fwrite(header, 1, HEADER_BYTES, f) != HEADER_BYTES)
        FAIL(CKPT_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    for (int s = 0; s < NSECTIONS; s++) {
        sums[s] = CKPT_FNV_INIT;
        for (size_t off = 0; off < rf->m->num_params; off += CHUNK_FLOATS) {
            size_t n = rf->m->num_params - off < CHUNK_FLOATS ? rf->m->num_params - off : CHUNK_FLOATS;
            const float *x = section_chunk(rf, s, off, n, buf);
            if (!x)
                FAIL(CKPT_ERR_ARG, "cannot write '%s': the model does not hold the whole %s section", tmp,
                     section_names[s]);
            sums[s] = ckpt_fnv1a64(sums[s], x, n * sizeof(float));
            if (fwrite(x, sizeof(float), n, f) != n)
                FAIL(CKPT_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
        }
    }
    pack_header(header, rf->m, rf->st, sums);
    if (fseek(f, 0, SEEK_SET) != 0 || fwrite(header, 1, HEADER_BYTES, f) != HEADER_BYTES)
        FAIL(CKPT_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
cleanup:
    free(buf);
    return rc;
}

int ckpt_save_rank(const char *dir, const gpt_model *m, const float *adam_m, const float *adam_v,
                   const ckpt_state *st, char *err, size_t errlen)
{
    int rc = 0;
    char rdir[4096], path[4160];
    if (ckpt_rank_dir(rdir, sizeof rdir, dir, st->iteration, &m->cfg) != 0)
        FAIL(CKPT_ERR_ARG, "checkpoint directory name too long: '%s'", dir);
    snprintf(path, sizeof path, "%s/" CKPT_FILE_NAME, rdir);
    if ((rc = ckpt_make_dirs(rdir, err, errlen)) != 0) goto cleanup;
    struct rank_file rf = { m, st, { adam_m, adam_v } };
    rc = ckpt_write_atomic(rdir, path, emit_rank_file, &rf, err, errlen);
cleanup:
    return rc;
}

struct text_file { const char *text; };

static int emit_text(FILE *f, const char *tmp, void *ctx, char *err, size_t errlen)
{
    int rc = 0;
    const char *text = ((const struct text_file *)ctx)->text;
    if (fwrite(text, 1, strlen(text), f) != strlen(text))
        FAIL(CKPT_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
cleanup:
    return rc;
}

int ckpt_write_latest(const char *dir, uint64_t iteration, char *err, size_t errlen)
{
    int rc = 0;
    char path[4096], text[32];
    if (snprintf(path, sizeof path, "%s/" CKPT_LATEST_NAME, dir) >= (int)sizeof path)
        FAIL(CKPT_ERR_ARG, "checkpoint directory name too long: '%s'", dir);
    if ((rc = ckpt_make_dirs(dir, err, errlen)) != 0) goto cleanup;
    snprintf(text, sizeof text, "%" PRIu64, iteration);
    struct text_file tf = { text };
    rc = ckpt_write_atomic(dir, path, emit_text, &tf, err, errlen);
cleanup:
    return rc;
}

int ckpt_read_latest(const char *dir, uint64_t *iteration, char *err, size_t errlen)
{
    int rc = 0;
    char path[4096], text[64];
    FILE *f = NULL;
    if (snprintf(path, sizeof path, "%s/" CKPT_LATEST_NAME, dir) >= (int)sizeof path)
        FAIL(CKPT_ERR_ARG, "checkpoint directory name too long: '%s'", dir);
    f = fopen(path, "rb");
    if (!f) FAIL(errno == ENOENT ? CKPT_ERR_NOT_FOUND : CKPT_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t n = fread(text, 1, sizeof text - 1, f);
    if (ferror(f)) FAIL(CKPT_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    text[n] = 0;
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ')) text[--n] = 0;
    if (strcmp(text, "release") == 0) FAIL(CKPT_ERR_FORMAT, "'%s': release checkpoints are not supported", path);
    uint64_t it = 0;
    if (n == 0 || n > 19) FAIL(CKPT_ERR_FORMAT, "'%s': not an iteration number", path);
    for (size_t i = 0; i < n; i++) {
        if (text[i] < '0' || text[i] > '9') FAIL(CKPT_ERR_FORMAT, "'%s': not an iteration number", path);
        it = it * 10 + (uint64_t)(text[i] - '0');
    }
    *iteration = it;
cleanup:
    if (f) fclose(f);
    return rc;
}

/* ---- load ------------------------------------------------------------------ */

int ckpt_load_rank(const char *dir, uint64_t iteration, gpt_model *m, float *adam_m, float *adam_v,
                   ckpt_state *st, char *err, size_t errlen)
{
    int rc = 0;
    char rdir[4096], path[4160];
    FILE *f = NULL;
    float *buf = NULL;
    unsigned char h[HEADER_BYTES];
    if (ckpt_rank_dir(rdir, sizeof rdir, dir, iteration, &m->cfg) != 0)
        FAIL(CKPT_ERR_ARG, "checkpoint directory name too long: '%s'", dir);
    snprintf(path, sizeof path, "%s/" CKPT_FILE_NAME, rdir);
    f = fopen(path, "rb");
    if (!f) FAIL(CKPT_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) FAIL(CKPT_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    if (fread(h, 1, HEADER_BYTES, f) != HEADER_BYTES)
        FAIL(CKPT_ERR_FORMAT, "'%s': truncated header (%lld bytes)", path, (long long)sb.st_size);
    if (memcmp(h, CKPT_MAGIC, 8) != 0) FAIL(CKPT_ERR_FORMAT, "'%s': bad magic (not an mdstrain checkpoint)", path);
    uint32_t version = le_get32(h + 8);
    if (version < 1 || version > CKPT_VERSION)
        FAIL(CKPT_ERR_FORMAT, "'%s': unsupported version %u (this build reads 1 to %d)", path, version, CKPT_VERSION);
    if (le_get32(h + 12) != HEADER_BYTES)
        FAIL(CKPT_ERR_FORMAT, "'%s': header_bytes is %u, expected %d", path, le_get32(h + 12), HEADER_BYTES);
    uint64_t hsum = ckpt_fnv1a64(CKPT_FNV_INIT, h, HEADER_SUM_AT);
    if (le_get64(h + HEADER_SUM_AT) != hsum)
        FAIL(CKPT_ERR_CHECKSUM, "'%s': header checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64 ")",
             path, le_get64(h + HEADER_SUM_AT), hsum);

    /* the architecture of version 2 (version 1 files are GPT-2's) */
    {
        int32_t want_a[A_NINTS], got_a[A_NINTS] = {GPT_POS_LEARNED, GPT_NORM_LAYERNORM, 0, m->NH, 1, 0, 0, 0};
        double want_d[3], got_d[3] = {10000.0, 1.0, 0.0};
        arch_fields(m, want_a, want_d);
        if (version >= 2) {
            for (int i = 0; i < A_NINTS; i++) got_a[i] = (int32_t)le_get32(h + ARCH_AT + 4 * i);
            for (int i = 0; i < 3; i++) got_d[i] = getf64(h + ARCH_AT + 32 + 8 * i);
        }
        for (int i = 0; i < A_NINTS; i++)
            if (got_a[i] != want_a[i]) {
                char g[32], w[32];
                arch_value(g, sizeof g, i, got_a[i]);
                arch_value(w, sizeof w, i, want_a[i]);
                FAIL(CKPT_ERR_MISMATCH, "'%s': %s is %s in the checkpoint but %s in this run", path, arch_names[i], g, w);
            }
        for (int i = 0; i < 3; i++)
            if (got_d[i] != want_d[i])
                FAIL(CKPT_ERR_MISMATCH, "'%s': %s is %.17g in the checkpoint but %.17g in this run", path,
                     arch_f_names[i], got_d[i], want_d[i]);
    }
    /* architecture, field by field (init std, epsilon: informative only) */
    int32_t want[H_NFIELDS];
    model_fields(m, want);
    for (int i = 0; i < H_NFIELDS; i++) {
        if (i == H_INIT_STD || i == H_EPS) continue;
        int32_t got = (int32_t)le_get32(h + 16 + 4 * i);
        if (got != want[i])
            FAIL(CKPT_ERR_MISMATCH, "'%s': %s is %d in the checkpoint but %d in this run", path, field_names[i],
                 (int)got, (int)want[i]);
    }
    if (le_get64(h + 88) != (uint64_t)m->num_params)
        FAIL(CKPT_ERR_MISMATCH, "'%s': num_params is %" PRIu64 " in the checkpoint but %zu in this run", path,
             le_get64(h + 88), m->num_params);
    for (int i = 0; i < SIZE_TABLE; i++)
        if (le_get64(h + 96 + 8 * i) != (uint64_t)m->param_sizes[i])
            FAIL(CKPT_ERR_MISMATCH, "'%s': size of tensor %d is %" PRIu64 " in the checkpoint but %zu in this run",
                 path, i, le_get64(h + 96 + 8 * i), m->param_sizes[i]);

    uint64_t bytes = (uint64_t)m->num_params * sizeof(float);
    if ((uint64_t)sb.st_size != HEADER_BYTES + NSECTIONS * bytes)
        FAIL(CKPT_ERR_FORMAT, "'%s': file size is %lld bytes, expected %" PRIu64, path, (long long)sb.st_size,
             HEADER_BYTES + NSECTIONS * bytes);
    buf = malloc(CHUNK_FLOATS * sizeof(float));
    if (!buf) FAIL(CKPT_ERR_IO, "cannot read '%s': out of memory", path);
    float *host[NSECTIONS] = {NULL, adam_m, adam_v};
    static const int which[NSECTIONS] = {GPT_STATE_WEIGHTS, GPT_STATE_ADAM_M, GPT_STATE_ADAM_V};
    for (int s = 0; s < NSECTIONS; s++) {
        const unsigned char *e = h + SECTIONS_AT + 24 * s;
        if (le_get64(e) != HEADER_BYTES + (uint64_t)s * bytes || le_get64(e + 8) != bytes)
            FAIL(CKPT_ERR_FORMAT, "'%s': %s section at offset %" PRIu64 " size %" PRIu64 ", expected %" PRIu64
                 " and %" PRIu64, path, section_names[s], le_get64(e), le_get64(e + 8),
                 HEADER_BYTES + (uint64_t)s * bytes, bytes);
        uint64_t sum = CKPT_FNV_INIT;
        for (size_t off = 0; off < m->num_params; off += CHUNK_FLOATS) {
            size_t n = m->num_params - off < CHUNK_FLOATS ? m->num_params - off : CHUNK_FLOATS;
            float *x = host[s] ? host[s] + off : buf;
            if (fread(x, sizeof(float), n, f) != n)
                FAIL(CKPT_ERR_IO, "cannot read the %s section of '%s'", section_names[s], path);
            sum = ckpt_fnv1a64(sum, x, n * sizeof(float));
            if (!host[s] && gpt_state_write(m, which[s], off, x, n) != 0)
                FAIL(CKPT_ERR_ARG, "cannot load '%s': the model does not hold the whole %s section", path,
                     section_names[s]);
        }
        if (sum != le_get64(e + 16))
            FAIL(CKPT_ERR_CHECKSUM, "'%s': %s checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64 ")",
                 path, section_names[s], le_get64(e + 16), sum);
    }
    uint64_t step = le_get64(h + 240);
    if (step > (uint64_t)INT32_MAX) FAIL(CKPT_ERR_FORMAT, "'%s': adam_step %" PRIu64 " is out of range", path, step);
    memset(st, 0, sizeof *st);
    st->iteration = le_get64(h + 232);
    if (st->iteration != iteration)
        FAIL(CKPT_ERR_FORMAT, "'%s': iteration is %" PRIu64 " but the directory says %" PRIu64, path,
             st->iteration, iteration);
    m->step = (int)step;
    st->consumed_train_samples = le_get64(h + 248);
    st->consumed_valid_samples = le_get64(h + 256);
    st->max_lr = getf64(h + 264);
    st->min_lr = getf64(h + 272);
    st->init_lr = getf64(h + 280);
    st->warmup_steps = getf64(h + 288);
    st->decay_steps = getf64(h + 296);
    st->num_steps = getf64(h + 304);
    st->decay_style = le_get32(h + 312);
    st->loss_scale = version >= 2 ? getf64(h + 448) : 1.0;
    st->growth_tracker = version >= 2 ? le_get32(h + 456) : 0;
    st->hysteresis_tracker = version >= 2 ? le_get32(h + 460) : 0;
    st->ds_scheduler = version >= 2 ? le_get32(h + 464) : 0;   /* 0 in files written before it existed */
    st->ds_last_batch_iteration = version >= 2 ? getf64(h + 472) : 0;
    st->ds_lr = version >= 2 ? getf64(h + 480) : 0;
    st->ds_lr_embed = version >= 2 ? getf64(h + 488) : 0;
cleanup:
    free(buf);
    if (f) fclose(f);
    return rc;
}
