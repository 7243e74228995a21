/*
 * hfckpt.c - HuggingFace folders to and from mdstrain's model; see hfckpt.h
 * and docs/formats.md.  One table (build_specs) says which block of which
 * whole-model mds tensor each HuggingFace tensor is, and whether it is
 * transposed (GPT-2's Conv1D); export and import both walk it.  Between a
 * rank's flat weights and the whole model sits shard(), the one place that
 * knows how TP splits and PP stages lay the tensors out (as model.c's
 * initialisation does).
 *
 * It does not print or exit; it keeps no state between calls.
 */
#include "hfckpt.h"

#include "checkpoint.h"
#include "jsontree.h"
#include "safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAIL(code, ...) do { if (err && errlen) snprintf(err, errlen, __VA_ARGS__); rc = (code); goto cleanup; } while (0)

const char *hf_strerror(int code)
{
    switch (code) {
    case HF_OK: return "success";
    case HF_ERR_IO: return "input/output error";
    case HF_ERR_FORMAT: return "malformed file";
    case HF_ERR_MISMATCH: return "the folder's model is not this run's";
    case HF_ERR_UNSUPPORTED: return "unsupported architecture";
    case HF_ERR_NOMEM: return "out of memory";
    default: return "unknown error";
    }
}

/* ---- the architecture ---------------------------------------------------- */

int hf_arch_of(const gpt_config *c, char *err, size_t errlen)
{
    int rc = 0;
    int G = c->num_query_groups ? c->num_query_groups : c->num_heads;
    /* BloomForCausalLM has one (word_embeddings_layernorm), but also ALiBi
       positions, which mds does not implement */
    if (c->embed_layernorm)
        FAIL(HF_ERR_UNSUPPORTED, "neither GPT2LMHeadModel nor LlamaForCausalLM has an embedding LayerNorm (--embed-layernorm)");
    if (c->position_embedding == GPT_POS_LEARNED) {
        if (c->normalization != GPT_NORM_LAYERNORM) FAIL(HF_ERR_UNSUPPORTED, "GPT2LMHeadModel has LayerNorm, not RMSNorm (--normalization)");
        if (c->swiglu) FAIL(HF_ERR_UNSUPPORTED, "GPT2LMHeadModel has a GELU MLP, not SwiGLU (--swiglu)");
        if (G != c->num_heads) FAIL(HF_ERR_UNSUPPORTED, "GPT2LMHeadModel has no grouped-query attention (--num-query-groups)");
        if (!c->add_bias_linear) FAIL(HF_ERR_UNSUPPORTED, "GPT2LMHeadModel has biases in every linear (--disable-bias-linear)");
        if (c->untie_embeddings)
            FAIL(HF_ERR_UNSUPPORTED, "GPT2LMHeadModel ties its output layer to the word embeddings "
                 "(--untie-embeddings-and-output-weights has no GPT-2 form)");
        return HF_ARCH_GPT2;
    }
    if (c->position_embedding == GPT_POS_ROPE) {
        if (c->normalization != GPT_NORM_RMSNORM) FAIL(HF_ERR_UNSUPPORTED, "LlamaForCausalLM has RMSNorm, not LayerNorm (--normalization)");
        if (!c->swiglu) FAIL(HF_ERR_UNSUPPORTED, "LlamaForCausalLM has a SwiGLU MLP (--swiglu)");
        if (c->rotary_percent != 1.0) FAIL(HF_ERR_UNSUPPORTED, "LlamaForCausalLM rotates every channel (--rotary-percent %g)", c->rotary_percent);
        return HF_ARCH_LLAMA;
    }
    FAIL(HF_ERR_UNSUPPORTED, "neither GPT2LMHeadModel nor LlamaForCausalLM has --position-embedding-type none");
cleanup:
    return rc;
}

/* ---- the whole model in host memory (TP = PP = 1 layout) ------------------- */

struct full {
    int L, C, NH, G, hs, F, FC1, QKV, maxT, Vp;
    size_t size[GPT_NUM_PARAMS];
    float *t[GPT_NUM_PARAMS];
    float *mem;
};

static int full_init(struct full *f, const gpt_model *m)
{
    const gpt_config *c = &m->cfg;
    memset(f, 0, sizeof *f);
    f->L = m->L; f->C = m->C; f->NH = m->NH; f->G = m->G; f->hs = m->hs; f->F = m->F;
    f->FC1 = c->swiglu ? 2 * m->F : m->F;
    f->QKV = m->C + 2 * m->G * m->hs;
    f->maxT = m->maxT; f->Vp = m->Vp;
    size_t L = (size_t)f->L, C = (size_t)f->C, F = (size_t)f->F;
    int lnb = c->normalization == GPT_NORM_LAYERNORM, bias = c->add_bias_linear;
    size_t *s = f->size;
    s[GPT_WTE] = (size_t)f->Vp * C;
    s[GPT_WPE] = c->position_embedding == GPT_POS_LEARNED ? (size_t)f->maxT * C : 0;
    s[GPT_LN1W] = L * C;
    s[GPT_LN1B] = lnb ? L * C : 0;
    s[GPT_QKVW] = L * (size_t)f->QKV * C;
    s[GPT_QKVB] = bias ? L * (size_t)f->QKV : 0;
    s[GPT_ATTPROJW] = L * C * C;
    s[GPT_ATTPROJB] = bias ? L * C : 0;
    s[GPT_LN2W] = L * C;
    s[GPT_LN2B] = lnb ? L * C : 0;
    s[GPT_FCW] = L * (size_t)f->FC1 * C;
    s[GPT_FCB] = bias ? L * (size_t)f->FC1 : 0;
    s[GPT_FCPROJW] = L * C * F;
    s[GPT_FCPROJB] = bias ? L * C : 0;
    s[GPT_LNFW] = C;
    s[GPT_LNFB] = lnb ? C : 0;
    s[GPT_OUTW] = c->untie_embeddings ? (size_t)f->Vp * C : 0;
    s[GPT_EMBLNW] = s[GPT_EMBLNB] = 0;   /* hf_arch_of refuses embed_layernorm */
    size_t total = 0;
    for (int i = 0; i < GPT_NUM_PARAMS; i++) total += s[i];
    f->mem = calloc(total ? total : 1, sizeof(float));
    if (!f->mem) return HF_ERR_NOMEM;
    float *p = f->mem;
    for (int i = 0; i < GPT_NUM_PARAMS; i++) {
        f->t[i] = s[i] ? p : NULL;
        p += s[i];
    }
    return 0;
}

static void xfer(float *g, float *l, size_t n, int to_local)
{
    if (to_local) memcpy(l, g, n * sizeof(float));
    else memcpy(g, l, n * sizeof(float));
}

/* Rows of a column-parallel tensor: local rows [lr, lr + n) of width w are
 * global rows [gr, gr + n). */
static void rows(float *g, float *l, size_t gr, size_t lr, size_t n, size_t w, int to_local)
{
    xfer(g + gr * w, l + lr * w, n * w, to_local);
}

/* Between this rank's flat weights loc (param_sizes order) and the whole
 * model: to_local 1 slices f into loc, 0 puts loc's slice into f.  The
 * copy of a tied word embedding on the last stage is skipped when
 * gathering (the first stage's is the same). */
static void shard(const gpt_model *m, float *loc, struct full *f, int to_local)
{
    size_t C = (size_t)m->C, Cl = (size_t)m->Cl, KVl = (size_t)m->KVl, QKVl = (size_t)m->QKVl;
    size_t Fl = (size_t)m->Fl, FC1l = (size_t)m->FC1l, Gh = (size_t)m->G * (size_t)m->hs;
    size_t tr = (size_t)m->cfg.tp_rank, Fg = (size_t)f->F, QKV = (size_t)f->QKV, FC1 = (size_t)f->FC1;
    size_t off = 0;
    for (int id = 0; id < GPT_NUM_PARAMS; id++) {
        size_t n = m->param_sizes[id];
        float *l = loc + off, *g = f->t[id];
        off += n;
        if (!n) continue;
        for (int ll = 0; ll < m->Ll; ll++) {
            size_t gl = (size_t)(m->layer_begin + ll);
            switch (id) {
            case GPT_LN1W: case GPT_LN1B: case GPT_LN2W: case GPT_LN2B: case GPT_ATTPROJB: case GPT_FCPROJB:
                xfer(g + gl * C, l + (size_t)ll * C, C, to_local);
                break;
            case GPT_QKVW: case GPT_QKVB: {
                size_t w = id == GPT_QKVW ? C : 1;
                float *gb = g + gl * QKV * w, *lb = l + (size_t)ll * QKVl * w;
                rows(gb, lb, tr * Cl, 0, Cl, w, to_local);
                rows(gb, lb, C + tr * KVl, Cl, KVl, w, to_local);
                rows(gb, lb, C + Gh + tr * KVl, Cl + KVl, KVl, w, to_local);
                break;
            }
            case GPT_FCW: case GPT_FCB: {
                size_t w = id == GPT_FCW ? C : 1;
                float *gb = g + gl * FC1 * w, *lb = l + (size_t)ll * FC1l * w;
                rows(gb, lb, tr * Fl, 0, Fl, w, to_local);
                if (m->cfg.swiglu) rows(gb, lb, Fg + tr * Fl, Fl, Fl, w, to_local);
                break;
            }
            case GPT_ATTPROJW:
                for (size_t r = 0; r < C; r++)
                    xfer(g + gl * C * C + r * C + tr * Cl, l + (size_t)ll * C * Cl + r * Cl, Cl, to_local);
                break;
            case GPT_FCPROJW:
                for (size_t r = 0; r < C; r++)
                    xfer(g + gl * C * Fg + r * Fg + tr * Fl, l + (size_t)ll * C * Fl + r * Fl, Fl, to_local);
                break;
            default:
                break;
            }
        }
        switch (id) {
        case GPT_WTE:
            if (!to_local && !m->first_stage) break;
            /* fallthrough */
        case GPT_OUTW:
            xfer(g + (size_t)m->v_start * C, l, n, to_local);
            break;
        case GPT_WPE: case GPT_LNFW: case GPT_LNFB:
            xfer(g, l, n, to_local);
            break;
        default:
            break;
        }
    }
}

/* ---- the name table ---------------------------------------------------------- */

/* One HuggingFace tensor: rows [r0, r0 + nrows) of the (rows, cols) block
 * of mds tensor id in layer `layer` (-1: a tensor without layers), stored
 * transposed (cols, nrows) when tr; cols 1 is a vector.  vocab marks the
 * word embedding and the output layer (rows may be fewer on import). */
struct spec {
    char name[96];
    int id, layer, tr, vocab;
    int perm;     /* head size: q/k rows of interleaved RoPE, permuted to rotate_half (0: none) */
    size_t r0, nrows, cols;
};

#define MAX_SPECS(L) (8 + 16 * (size_t)(L))

static void add(struct spec *s, size_t *n, const char *name, int id, int layer, size_t r0, size_t nrows, size_t cols,
                int tr)
{
    struct spec *x = &s[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->id = id; x->layer = layer; x->r0 = r0; x->nrows = nrows; x->cols = cols; x->tr = tr;
    x->vocab = id == GPT_WTE || id == GPT_OUTW;
    x->perm = 0;
}

static size_t build_specs(struct spec *s, int arch, const struct full *f, const gpt_config *c)
{
    size_t n = 0, C = (size_t)f->C, F = (size_t)f->F, Gh = (size_t)f->G * (size_t)f->hs, QKV = (size_t)f->QKV;
    int bias = c->add_bias_linear;
    char nm[96];
    if (arch == HF_ARCH_GPT2) {
        add(s, &n, "transformer.wte.weight", GPT_WTE, -1, 0, (size_t)f->Vp, C, 0);
        add(s, &n, "transformer.wpe.weight", GPT_WPE, -1, 0, (size_t)f->maxT, C, 0);
        for (int l = 0; l < f->L; l++) {
#define NAME(x) (snprintf(nm, sizeof nm, "transformer.h.%d.%s", l, x), nm)
            add(s, &n, NAME("ln_1.weight"), GPT_LN1W, l, 0, C, 1, 0);
            add(s, &n, NAME("ln_1.bias"), GPT_LN1B, l, 0, C, 1, 0);
            add(s, &n, NAME("attn.c_attn.weight"), GPT_QKVW, l, 0, QKV, C, 1);
            add(s, &n, NAME("attn.c_attn.bias"), GPT_QKVB, l, 0, QKV, 1, 0);
            add(s, &n, NAME("attn.c_proj.weight"), GPT_ATTPROJW, l, 0, C, C, 1);
            add(s, &n, NAME("attn.c_proj.bias"), GPT_ATTPROJB, l, 0, C, 1, 0);
            add(s, &n, NAME("ln_2.weight"), GPT_LN2W, l, 0, C, 1, 0);
            add(s, &n, NAME("ln_2.bias"), GPT_LN2B, l, 0, C, 1, 0);
            add(s, &n, NAME("mlp.c_fc.weight"), GPT_FCW, l, 0, F, C, 1);
            add(s, &n, NAME("mlp.c_fc.bias"), GPT_FCB, l, 0, F, 1, 0);
            add(s, &n, NAME("mlp.c_proj.weight"), GPT_FCPROJW, l, 0, C, F, 1);
            add(s, &n, NAME("mlp.c_proj.bias"), GPT_FCPROJB, l, 0, C, 1, 0);
#undef NAME
        }
        add(s, &n, "transformer.ln_f.weight", GPT_LNFW, -1, 0, C, 1, 0);
        add(s, &n, "transformer.ln_f.bias", GPT_LNFB, -1, 0, C, 1, 0);
        return n;
    }
    add(s, &n, "model.embed_tokens.weight", GPT_WTE, -1, 0, (size_t)f->Vp, C, 0);
    for (int l = 0; l < f->L; l++) {
#define NAME(x) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, x), nm)
        add(s, &n, NAME("input_layernorm.weight"), GPT_LN1W, l, 0, C, 1, 0);
        add(s, &n, NAME("self_attn.q_proj.weight"), GPT_QKVW, l, 0, C, C, 0);
        add(s, &n, NAME("self_attn.k_proj.weight"), GPT_QKVW, l, C, Gh, C, 0);
        add(s, &n, NAME("self_attn.v_proj.weight"), GPT_QKVW, l, C + Gh, Gh, C, 0);
        if (c->rotary_interleaved) s[n - 3].perm = s[n - 2].perm = f->hs;   /* q_proj, k_proj */
        add(s, &n, NAME("self_attn.o_proj.weight"), GPT_ATTPROJW, l, 0, C, C, 0);
        if (bias) {
            add(s, &n, NAME("self_attn.q_proj.bias"), GPT_QKVB, l, 0, C, 1, 0);
            add(s, &n, NAME("self_attn.k_proj.bias"), GPT_QKVB, l, C, Gh, 1, 0);
            if (c->rotary_interleaved) s[n - 2].perm = s[n - 1].perm = f->hs;
            add(s, &n, NAME("self_attn.v_proj.bias"), GPT_QKVB, l, C + Gh, Gh, 1, 0);
            add(s, &n, NAME("self_attn.o_proj.bias"), GPT_ATTPROJB, l, 0, C, 1, 0);
        }
        add(s, &n, NAME("post_attention_layernorm.weight"), GPT_LN2W, l, 0, C, 1, 0);
        add(s, &n, NAME("mlp.gate_proj.weight"), GPT_FCW, l, 0, F, C, 0);
        add(s, &n, NAME("mlp.up_proj.weight"), GPT_FCW, l, F, F, C, 0);
        add(s, &n, NAME("mlp.down_proj.weight"), GPT_FCPROJW, l, 0, C, F, 0);
        if (bias) {
            add(s, &n, NAME("mlp.gate_proj.bias"), GPT_FCB, l, 0, F, 1, 0);
            add(s, &n, NAME("mlp.up_proj.bias"), GPT_FCB, l, F, F, 1, 0);
            add(s, &n, NAME("mlp.down_proj.bias"), GPT_FCPROJB, l, 0, C, 1, 0);
        }
#undef NAME
    }
    add(s, &n, "model.norm.weight", GPT_LNFW, -1, 0, C, 1, 0);
    if (c->untie_embeddings) add(s, &n, "lm_head.weight", GPT_OUTW, -1, 0, (size_t)f->Vp, C, 0);
    return n;
}

/* The first element of spec x's block in the whole model. */
static float *spec_base(const struct full *f, const struct spec *x)
{
    size_t stride = x->layer >= 0 ? f->size[x->id] / (size_t)f->L : 0;
    size_t lay = x->layer >= 0 ? (size_t)x->layer : 0;
    return f->t[x->id] + lay * stride + x->r0 * x->cols;
}

/* HF tensor (nrows of the spec, or fewer for a vocabulary) from / to the whole model. */
static void spec_copy(const struct full *f, const struct spec *x, float *hf, size_t nrows, int to_model)
{
    float *b = spec_base(f, x);
    size_t R = nrows, K = x->cols;
    if (x->perm) {
        /* interleaved RoPE pairs channels (2i, 2i+1) of a head, transformers'
           rotate_half pairs (i, i + hs/2): HF row i is mds row 2i, HF row
           i + hs/2 is mds row 2i + 1 (the permutation of Meta's converter) */
        size_t hs = (size_t)x->perm, half = hs / 2;
        for (size_t r = 0; r < R; r++) {
            size_t j = r % hs, mr = r - j + (j < half ? 2 * j : 2 * (j - half) + 1);
            if (to_model) memcpy(b + mr * K, hf + r * K, K * sizeof(float));
            else memcpy(hf + r * K, b + mr * K, K * sizeof(float));
        }
        return;
    }
    if (!x->tr) {
        if (to_model) memcpy(b, hf, R * K * sizeof(float));
        else memcpy(hf, b, R * K * sizeof(float));
        return;
    }
    for (size_t r = 0; r < R; r++)   /* mds (R, K) <-> HF (K, R) */
        for (size_t k = 0; k < K; k++) {
            if (to_model) b[r * K + k] = hf[k * R + r];
            else hf[k * R + r] = b[r * K + k];
        }
}

/* ---- files ------------------------------------------------------------------------ */

static int mkdir_p(const char *path, char *err, size_t errlen)
{
    int rc = 0;
    char *p = strdup(path);
    if (!p) FAIL(HF_ERR_NOMEM, "cannot create '%s': out of memory", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char ch = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) FAIL(HF_ERR_IO, "cannot create directory '%s': %s", p, strerror(errno));
        *s = ch;
        if (!ch) break;
    }
cleanup:
    free(p);
    return rc;
}

static int write_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen)
{
    int rc = 0;
    char tmp[4200];
    FILE *fp = NULL;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) FAIL(HF_ERR_IO, "path too long: '%s'", path);
    fp = fopen(tmp, "wb");
    if (!fp) FAIL(HF_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
    if (fwrite(data, 1, n, fp) != n || fflush(fp) != 0 || fsync(fileno(fp)) != 0)
        FAIL(HF_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    int cr = fclose(fp);
    fp = NULL;
    if (cr != 0) FAIL(HF_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0) FAIL(HF_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
cleanup:
    if (fp) {
        fclose(fp);
        remove(tmp);
    }
    return rc;
}

/* The whole file, NUL-terminated; *n its length. */
static int slurp(const char *path, char **out, size_t *n, size_t limit, char *err, size_t errlen)
{
    int rc = 0;
    char *buf = NULL;
    struct stat sb;
    FILE *fp = fopen(path, "rb");
    if (!fp) FAIL(HF_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fileno(fp), &sb) != 0) FAIL(HF_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    if ((uint64_t)sb.st_size > limit) FAIL(HF_ERR_FORMAT, "'%s': %lld bytes, more than %zu", path, (long long)sb.st_size, limit);
    buf = malloc((size_t)sb.st_size + 1);
    if (!buf) FAIL(HF_ERR_NOMEM, "cannot read '%s': out of memory", path);
    if (fread(buf, 1, (size_t)sb.st_size, fp) != (size_t)sb.st_size) FAIL(HF_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    buf[sb.st_size] = 0;
    *n = (size_t)sb.st_size;
    *out = buf;
    buf = NULL;
cleanup:
    free(buf);
    if (fp) fclose(fp);
    return rc;
}

static int copy_file(const char *src, const char *dst, char *err, size_t errlen)
{
    char *buf = NULL;
    size_t n = 0;
    int rc = slurp(src, &buf, &n, (size_t)1 << 30, err, errlen);
    if (rc == 0) rc = write_atomic(dst, buf, n, err, errlen);
    free(buf);
    return rc;
}

/* The shortest decimal that reads back as the float x (config.json's
 * epsilons: 1e-05, not 9.99999974737875e-06). */
static void float_text(char *out, size_t cap, float x)
{
    for (int p = 1; p <= 9; p++) {
        snprintf(out, cap, "%.*g", p, (double)x);
        if (strtof(out, NULL) == x) break;
    }
    if (!strpbrk(out, ".en")) strncat(out, ".0", cap - strlen(out) - 1);
}

static int write_config(const char *path, int arch, const gpt_config *c, const struct full *f, const hf_tokenizer *tok,
                        char *err, size_t errlen)
{
    char buf[4096], eps[32], std[32], hd[32], ad[32];
    float_text(eps, sizeof eps, c->layernorm_eps);
    float_text(std, sizeof std, c->init_method_std);
    float_text(hd, sizeof hd, c->hidden_dropout);
    float_text(ad, sizeof ad, c->attention_dropout);
    long long eod = (long long)tok->eod;
    /* Llama 3.1's scaling as Megatron (and kernels/cpu/rope.c) applies it */
    char scaling[256] = "null", factor[40];
    snprintf(factor, sizeof factor, "%.17g", c->rope_scaling_factor);
    if (!strpbrk(factor, ".en")) strcat(factor, ".0");   /* transformers wants a float */
    if (c->rope_scaling_factor > 0)
        snprintf(scaling, sizeof scaling, "{\"rope_type\": \"llama3\", \"factor\": %s, \"low_freq_factor\": 1.0, "
                 "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", factor);
    int n;
    if (arch == HF_ARCH_GPT2)
        n = snprintf(buf, sizeof buf,
                     "{\n"
                     "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                     "  \"model_type\": \"gpt2\",\n"
                     "  \"vocab_size\": %d,\n"
                     "  \"n_positions\": %d,\n"
                     "  \"n_ctx\": %d,\n"
                     "  \"n_embd\": %d,\n"
                     "  \"n_layer\": %d,\n"
                     "  \"n_head\": %d,\n"
                     "  \"n_inner\": %d,\n"
                     "  \"activation_function\": \"gelu_new\",\n"
                     "  \"layer_norm_epsilon\": %s,\n"
                     "  \"initializer_range\": %s,\n"
                     "  \"resid_pdrop\": %s,\n"
                     "  \"embd_pdrop\": %s,\n"
                     "  \"attn_pdrop\": %s,\n"
                     "  \"scale_attn_weights\": true,\n"
                     "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                     "  \"reorder_and_upcast_attn\": false,\n"
                     "  \"tie_word_embeddings\": true,\n"
                     "  \"bos_token_id\": %lld,\n"
                     "  \"eos_token_id\": %lld,\n"
                     "  \"torch_dtype\": \"float32\",\n"
                     "  \"use_cache\": true\n"
                     "}\n",
                     f->Vp, f->maxT, f->maxT, f->C, f->L, f->NH, f->F, eps, std, hd, hd, ad, eod, eod);
    else
        n = snprintf(buf, sizeof buf,
                     "{\n"
                     "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                     "  \"model_type\": \"llama\",\n"
                     "  \"vocab_size\": %d,\n"
                     "  \"hidden_size\": %d,\n"
                     "  \"intermediate_size\": %d,\n"
                     "  \"num_hidden_layers\": %d,\n"
                     "  \"num_attention_heads\": %d,\n"
                     "  \"num_key_value_heads\": %d,\n"
                     "  \"head_dim\": %d,\n"
                     "  \"max_position_embeddings\": %d,\n"
                     "  \"rms_norm_eps\": %s,\n"
                     "  \"rope_theta\": %.17g,\n"
                     "  \"rope_scaling\": %s,\n"
                     "  \"hidden_act\": \"silu\",\n"
                     "  \"attention_bias\": %s,\n"
                     "  \"mlp_bias\": %s,\n"
                     "  \"attention_dropout\": %s,\n"
                     "  \"initializer_range\": %s,\n"
                     "  \"pretraining_tp\": 1,\n"
                     "  \"tie_word_embeddings\": %s,\n"
                     "  \"bos_token_id\": %lld,\n"
                     "  \"eos_token_id\": %lld,\n"
                     "  \"torch_dtype\": \"float32\",\n"
                     "  \"use_cache\": true\n"
                     "}\n",
                     f->Vp, f->C, f->F, f->L, f->NH, f->G, f->hs, f->maxT, eps, c->rotary_base, scaling,
                     c->add_bias_linear ? "true" : "false", c->add_bias_linear ? "true" : "false", ad, std,
                     c->untie_embeddings ? "false" : "true", eod, eod);
    if (n < 0 || (size_t)n >= sizeof buf) {
        if (err && errlen) snprintf(err, errlen, "cannot write '%s': config too long", path);
        return HF_ERR_IO;
    }
    return write_atomic(path, buf, (size_t)n, err, errlen);
}

static int write_tokenizer(const char *dir, const hf_tokenizer *tok, int maxT, char *err, size_t errlen)
{
    char path[4200], buf[1024];
    int rc;
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    if ((rc = copy_file(tok->vocab_json, path, err, errlen)) != 0) return rc;
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    if ((rc = copy_file(tok->merges_txt, path, err, errlen)) != 0) return rc;
    int n = snprintf(buf, sizeof buf,
                     "{\n"
                     "  \"tokenizer_class\": \"GPT2Tokenizer\",\n"
                     "  \"model_max_length\": %d,\n"
                     "  \"bos_token\": \"<|endoftext|>\",\n"
                     "  \"eos_token\": \"<|endoftext|>\",\n"
                     "  \"unk_token\": \"<|endoftext|>\",\n"
                     "  \"add_prefix_space\": false,\n"
                     "  \"errors\": \"replace\"\n"
                     "}\n", maxT);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    return write_atomic(path, buf, (size_t)n, err, errlen);
}

/* ---- export ------------------------------------------------------------------------ */

int hf_export(const char *ckpt_dir, uint64_t iteration, const gpt_config *cfg, const hf_tokenizer *tok,
              const char *out_dir, int *ckpt_code, char *err, size_t errlen)
{
    int rc = 0, have_full = 0;
    struct full f;
    struct spec *specs = NULL;
    st_entry *ents = NULL;
    float **bufs = NULL;
    float *loc = NULL;
    size_t nspec = 0;
    gpt_model m;
    memset(&m, 0, sizeof m);
    memset(&f, 0, sizeof f);
    *ckpt_code = 0;
    int arch = hf_arch_of(cfg, err, errlen);
    if (arch < 0) return arch;
    for (int pp = 0; pp < cfg->pp_size; pp++)
        for (int tp = 0; tp < cfg->tp_size; tp++) {
            gpt_config rcfg = *cfg;
            rcfg.tp_rank = tp;
            rcfg.pp_rank = pp;
            rcfg.backend = NULL;
            rcfg.dtype = rcfg.grad_dtype = MDS_F32;
            rcfg.act_slots = 0;
            rcfg.sequence_parallel = 0;   /* a parameter layout, built for 1 token: no activations to split */
            char e2[4600];
            int r = gpt_model_init(&m, &rcfg, 1, 1, e2, sizeof e2);
            if (r) FAIL(r == GPT_ERR_NOMEM ? HF_ERR_NOMEM : HF_ERR_FORMAT, "cannot build rank (t %d, p %d): %s", tp, pp, e2);
            if (!have_full) {
                if (full_init(&f, &m) != 0) FAIL(HF_ERR_NOMEM, "out of memory for the whole model");
                have_full = 1;
            }
            ckpt_state st;
            r = ckpt_load_rank(ckpt_dir, iteration, &m, NULL, NULL, &st, e2, sizeof e2);
            if (r) {
                *ckpt_code = r;
                FAIL(r == CKPT_ERR_IO ? HF_ERR_IO : HF_ERR_FORMAT, "%s", e2);
            }
            loc = malloc((m.num_params ? m.num_params : 1) * sizeof(float));
            if (!loc) FAIL(HF_ERR_NOMEM, "out of memory reading rank (t %d, p %d)", tp, pp);
            gpt_state_read(&m, GPT_STATE_WEIGHTS, 0, loc, m.num_params);
            shard(&m, loc, &f, 0);
            free(loc);
            loc = NULL;
            gpt_model_free(&m);
        }
    specs = malloc(MAX_SPECS(f.L) * sizeof *specs);
    if (!specs) FAIL(HF_ERR_NOMEM, "out of memory");
    nspec = build_specs(specs, arch, &f, cfg);
    ents = calloc(nspec, sizeof *ents);
    bufs = calloc(nspec, sizeof *bufs);
    if (!ents || !bufs) FAIL(HF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nspec; i++) {
        const struct spec *x = &specs[i];
        st_entry *e = &ents[i];
        e->name = x->name;
        if (x->tr || x->perm) {   /* a copy: transposed, or its rows permuted */
            bufs[i] = malloc(x->nrows * x->cols * sizeof(float));
            if (!bufs[i]) FAIL(HF_ERR_NOMEM, "out of memory copying '%s'", x->name);
            spec_copy(&f, x, bufs[i], x->nrows, 0);
            e->data = bufs[i];
            e->ndim = x->cols == 1 ? 1 : 2;
            e->shape[0] = x->tr ? x->cols : x->nrows;
            e->shape[1] = x->tr ? x->nrows : x->cols;
        } else {
            e->data = spec_base(&f, x);
            e->ndim = x->cols == 1 ? 1 : 2;
            e->shape[0] = x->nrows;
            e->shape[1] = x->cols;
        }
    }
    char path[4200];
    if ((rc = mkdir_p(out_dir, err, errlen)) != 0) goto cleanup;
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if ((rc = st_write(path, ents, nspec, err, errlen)) != 0) {
        rc = rc == ST_ERR_NOMEM ? HF_ERR_NOMEM : HF_ERR_IO;
        goto cleanup;
    }
    if (tok->vocab_json && (rc = write_tokenizer(out_dir, tok, f.maxT, err, errlen)) != 0) goto cleanup;
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    rc = write_config(path, arch, cfg, &f, tok, err, errlen);
cleanup:
    if (bufs)
        for (size_t i = 0; i < nspec; i++) free(bufs[i]);
    free(bufs);
    free(ents);
    free(specs);
    free(loc);
    gpt_model_free(&m);
    free(f.mem);
    return rc;
}

/* ---- import ------------------------------------------------------------------------ */

#define CONFIG_DEPTH 64   /* mds's bound on config.json's nesting (it has 2 levels) */

struct config_json {
    const char *path;
    const jt_node *root;   /* an object */
};

/* The last member named key, as Python's json.load keeps the last of duplicates. */
static const jt_node *cj_get(const struct config_json *j, const char *key)
{
    return jt_get(j->root, key);
}

/* An integer field: absent or null takes dflt (-1: required). */
static int cj_int(const struct config_json *j, const char *key, long long dflt, long long *out, char *err, size_t errlen)
{
    const jt_node *v = cj_get(j, key);
    if (!v || v->type == JT_NULL) {
        if (dflt < 0) {
            if (err && errlen) snprintf(err, errlen, "'%s': missing %s", j->path, key);
            return HF_ERR_FORMAT;
        }
        *out = dflt;
        return 0;
    }
    if (v->type != JT_NUMBER || v->num != floor(v->num) || fabs(v->num) > 2147483647.0) {
        if (err && errlen) snprintf(err, errlen, "'%s': %s is not an integer", j->path, key);
        return HF_ERR_FORMAT;
    }
    *out = (long long)v->num;
    return 0;
}

static int cj_num(const struct config_json *j, const char *key, double dflt, double *out, char *err, size_t errlen)
{
    const jt_node *v = cj_get(j, key);
    if (!v || v->type == JT_NULL) { *out = dflt; return 0; }
    if (v->type != JT_NUMBER) {
        if (err && errlen) snprintf(err, errlen, "'%s': %s is not a number", j->path, key);
        return HF_ERR_FORMAT;
    }
    *out = v->num;
    return 0;
}

static int cj_bool(const struct config_json *j, const char *key, int dflt, int *out, char *err, size_t errlen)
{
    const jt_node *v = cj_get(j, key);
    if (!v || v->type == JT_NULL) { *out = dflt; return 0; }
    if (v->type != JT_TRUE && v->type != JT_FALSE) {
        if (err && errlen) snprintf(err, errlen, "'%s': %s is not true or false", j->path, key);
        return HF_ERR_FORMAT;
    }
    *out = v->type == JT_TRUE;
    return 0;
}

static int cj_str(const struct config_json *j, const char *key, char *out, size_t cap)
{
    const jt_node *v = cj_get(j, key);
    const char *s = jt_str(v);
    out[0] = 0;
    if (!s || strlen(s) >= cap) return -1;
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

#define WANT_INT(key, dflt, want, flag) do { \
        long long v_; \
        if ((rc = cj_int(&j, key, dflt, &v_, err, errlen)) != 0) goto cleanup; \
        if (v_ != (long long)(want)) \
            FAIL(HF_ERR_MISMATCH, "'%s': %s is %lld in the folder but %lld in this run (%s)", j.path, key, v_, \
                 (long long)(want), flag); \
    } while (0)

#define WANT_BOOL(key, dflt, want, flag) do { \
        int v_; \
        if ((rc = cj_bool(&j, key, dflt, &v_, err, errlen)) != 0) goto cleanup; \
        if (v_ != (want)) \
            FAIL(HF_ERR_MISMATCH, "'%s': %s is %s in the folder but %s in this run (%s)", j.path, key, \
                 v_ ? "true" : "false", (want) ? "true" : "false", flag); \
    } while (0)

/* A float field compared as the float mds keeps. */
#define WANT_FLOAT(key, dflt, want, flag) do { \
        double v_; \
        if ((rc = cj_num(&j, key, dflt, &v_, err, errlen)) != 0) goto cleanup; \
        if ((float)v_ != (float)(want)) { \
            char a_[32], b_[32]; \
            float_text(a_, sizeof a_, (float)v_); \
            float_text(b_, sizeof b_, (float)(want)); \
            FAIL(HF_ERR_MISMATCH, "'%s': %s is %s in the folder but %s in this run (%s)", j.path, key, a_, b_, flag); \
        } \
    } while (0)

/* rope_scaling: null without --use-rope-scaling, else Llama 3.1's
 * {"rope_type": "llama3", factor, low_freq_factor 1, high_freq_factor 4,
 * original_max_position_embeddings 8192} (the constants mds implements). */
static int check_rope_scaling(const struct config_json *j, double factor, char *err, size_t errlen)
{
    int rc = 0;
    const jt_node *rs = cj_get(j, "rope_scaling");
    if (!rs || rs->type == JT_NULL) {
        if (factor > 0)
            FAIL(HF_ERR_MISMATCH, "'%s': rope_scaling is null in the folder but this run scales RoPE by %g "
                 "(--use-rope-scaling)", j->path, factor);
        return 0;
    }
    if (rs->type != JT_OBJECT) FAIL(HF_ERR_FORMAT, "'%s': rope_scaling is not an object", j->path);
    char type[32] = "";
    double f = -1, lo = -1, hi = -1, orig = -1;
    for (size_t i = 0; i < rs->len; i++) {
        const jt_node *v = &rs->kids[i];
        const char *key = v->key;
        if ((strcmp(key, "rope_type") == 0 || strcmp(key, "type") == 0) && jt_str(v) && v->len < sizeof type)
            memcpy(type, v->str, v->len + 1);
        else if (v->type == JT_NUMBER && strcmp(key, "factor") == 0) f = v->num;
        else if (v->type == JT_NUMBER && strcmp(key, "low_freq_factor") == 0) lo = v->num;
        else if (v->type == JT_NUMBER && strcmp(key, "high_freq_factor") == 0) hi = v->num;
        else if (v->type == JT_NUMBER && strcmp(key, "original_max_position_embeddings") == 0) orig = v->num;
    }
    if (strcmp(type, "llama3") != 0)
        FAIL(HF_ERR_UNSUPPORTED, "'%s': rope_scaling type \"%s\" is not supported (only llama3)", j->path, type);
    if (lo != 1 || hi != 4 || orig != 8192)
        FAIL(HF_ERR_UNSUPPORTED, "'%s': rope_scaling llama3 with low_freq_factor %g, high_freq_factor %g, "
             "original_max_position_embeddings %g (mds implements 1, 4, 8192)", j->path, lo, hi, orig);
    if (f != factor)
        FAIL(HF_ERR_MISMATCH, "'%s': rope_scaling factor is %g in the folder but %g in this run (--rope-scaling-factor%s)",
             j->path, f, factor, factor > 0 ? "" : "; --use-rope-scaling is off");
cleanup:
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* GPT-2's causal-mask buffers (saved by old transformers versions, and in
 * the hub's gpt2) and a tied output layer carry no weights of their own. */
static int ignorable(int arch, const char *name, int tied)
{
    if (arch == HF_ARCH_GPT2)
        return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
               strcmp(name, "lm_head.weight") == 0;
    return tied && strcmp(name, "lm_head.weight") == 0;
}

/* The file's tensor for spec x: the name as is, or (GPT-2) without
 * "transformer." (GPT2Model's names, as the hub's gpt2 stores them). */
static const st_tensor *find_tensor(const st_file *sf, int arch, const char *name)
{
    const st_tensor *t = st_find(sf, name);
    if (!t && arch == HF_ARCH_GPT2 && strncmp(name, "transformer.", 12) == 0) t = st_find(sf, name + 12);
    return t;
}

static void shape_text(char *out, size_t cap, int ndim, const uint64_t *shape)
{
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(out + k, cap - k, "%s%llu", d ? ", " : "", (unsigned long long)shape[d]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

int hf_import(gpt_model *m, const char *dir, int tokenizer_vocab, char *err, size_t errlen)
{
    int rc = 0;
    char cpath[4200], spath[4200], *text = NULL;
    jt_doc *doc = NULL;
    size_t tn = 0, nspec = 0;
    struct config_json j;
    struct full f;
    struct spec *specs = NULL;
    st_file *sf = NULL;
    float *buf = NULL, *loc = NULL;
    char *used = NULL;
    const gpt_config *c = &m->cfg;
    memset(&f, 0, sizeof f);
    int arch = hf_arch_of(c, err, errlen);
    if (arch < 0) return arch;
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    snprintf(spath, sizeof spath, "%s/model.safetensors", dir);
    j.path = cpath;
    j.root = NULL;
    if ((rc = slurp(cpath, &text, &tn, (size_t)16 << 20, err, errlen)) != 0) goto cleanup;
    {
        jt_options opt = { CONFIG_DEPTH, 0 };
        jt_err je;
        int r = jt_parse_opts(&doc, text, tn, &opt, &je);
        if (r == JT_ERR_NOMEM) FAIL(HF_ERR_NOMEM, "cannot read '%s': out of memory", cpath);
        if (r) FAIL(HF_ERR_FORMAT, "'%s': not valid JSON (line %u, column %u: %s)", cpath, (unsigned)je.line,
                    (unsigned)je.col, je.why);
        j.root = jt_root(doc);
        if (j.root->type != JT_OBJECT) FAIL(HF_ERR_FORMAT, "'%s': not a JSON object", cpath);
    }
    char mt[64];
    cj_str(&j, "model_type", mt, sizeof mt);
    const char *want_mt = arch == HF_ARCH_GPT2 ? "gpt2" : "llama";
    if (strcmp(mt, want_mt) != 0)
        FAIL(HF_ERR_MISMATCH, "'%s': model_type is \"%s\" in the folder but \"%s\" for this run's model flags", cpath,
             mt[0] ? mt : "(none)", want_mt);
    if (arch == HF_ARCH_GPT2) {
        WANT_INT("n_layer", -1, m->L, "--num-layers");
        WANT_INT("n_embd", -1, m->C, "--hidden-size");
        WANT_INT("n_head", -1, m->NH, "--num-attention-heads");
        WANT_INT("n_inner", 4LL * m->C, m->F, "--ffn-hidden-size");
        WANT_INT("n_positions", -1, m->maxT, "--max-position-embeddings");
        WANT_FLOAT("layer_norm_epsilon", 1e-5, c->layernorm_eps, "--norm-epsilon");
        WANT_BOOL("tie_word_embeddings", 1, 1, "GPT-2 is tied");
        WANT_BOOL("scale_attn_weights", 1, 1, "mds scales by 1/sqrt(head size)");
        WANT_BOOL("scale_attn_by_inverse_layer_idx", 0, 0, "mds does not scale by layer");
        char act[32];
        if (cj_str(&j, "activation_function", act, sizeof act) != 0) snprintf(act, sizeof act, "gelu_new");
        if (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
            FAIL(HF_ERR_MISMATCH, "'%s': activation_function is \"%s\" but mds's GELU is the tanh approximation "
                 "(gelu_new)", cpath, act);
    } else {
        long long G = 0;
        WANT_INT("num_hidden_layers", -1, m->L, "--num-layers");
        WANT_INT("hidden_size", -1, m->C, "--hidden-size");
        WANT_INT("num_attention_heads", -1, m->NH, "--num-attention-heads");
        if ((rc = cj_int(&j, "num_key_value_heads", m->NH, &G, err, errlen)) != 0) goto cleanup;
        if (G != m->G)
            FAIL(HF_ERR_MISMATCH, "'%s': num_key_value_heads is %lld in the folder but %d in this run (--num-query-groups)",
                 cpath, G, m->G);
        WANT_INT("head_dim", m->hs, m->hs, "--hidden-size / --num-attention-heads");
        WANT_INT("intermediate_size", -1, m->F, "--ffn-hidden-size");
        WANT_INT("max_position_embeddings", -1, m->maxT, "--max-position-embeddings");
        WANT_FLOAT("rms_norm_eps", 1e-6, c->layernorm_eps, "--norm-epsilon");
        {
            double th;
            if ((rc = cj_num(&j, "rope_theta", 10000.0, &th, err, errlen)) != 0) goto cleanup;
            if (th != c->rotary_base)
                FAIL(HF_ERR_MISMATCH, "'%s': rope_theta is %.17g in the folder but %.17g in this run (--rotary-base)",
                     cpath, th, c->rotary_base);
        }
        WANT_BOOL("attention_bias", 0, c->add_bias_linear, "--disable-bias-linear");
        WANT_BOOL("mlp_bias", 0, c->add_bias_linear, "--disable-bias-linear");
        WANT_BOOL("tie_word_embeddings", 0, !c->untie_embeddings, "--untie-embeddings-and-output-weights");
        if ((rc = check_rope_scaling(&j, c->rope_scaling_factor, err, errlen)) != 0) goto cleanup;
        char act[32];
        if (cj_str(&j, "hidden_act", act, sizeof act) != 0) snprintf(act, sizeof act, "silu");
        if (strcmp(act, "silu") != 0)
            FAIL(HF_ERR_MISMATCH, "'%s': hidden_act is \"%s\" but mds's SwiGLU uses silu", cpath, act);
    }
    long long V = 0;
    if ((rc = cj_int(&j, "vocab_size", -1, &V, err, errlen)) != 0) goto cleanup;
    if (V < tokenizer_vocab || V > m->Vp)
        FAIL(HF_ERR_MISMATCH, "'%s': vocab_size is %lld in the folder but this run needs %d to %d (the tokenizer's "
             "size to the padded size)", cpath, V, tokenizer_vocab, m->Vp);

    {
        char other[4300];
        struct stat sb;
        snprintf(other, sizeof other, "%s/model.safetensors.index.json", dir);
        if (stat(spath, &sb) != 0 && stat(other, &sb) == 0)
            FAIL(HF_ERR_UNSUPPORTED, "'%s': sharded safetensors (model.safetensors.index.json) are not read yet; "
                 "save the model as one file (save_pretrained(max_shard_size=...) large enough)", dir);
        snprintf(other, sizeof other, "%s/pytorch_model.bin", dir);
        if (stat(spath, &sb) != 0 && stat(other, &sb) == 0)
            FAIL(HF_ERR_UNSUPPORTED, "'%s': only pytorch_model.bin, no model.safetensors; save it with "
                 "save_pretrained(safe_serialization=True)", dir);
        int r = st_open(spath, &sf, err, errlen);
        if (r) { rc = r == ST_ERR_IO ? HF_ERR_IO : r == ST_ERR_NOMEM ? HF_ERR_NOMEM : HF_ERR_FORMAT; goto cleanup; }
    }
    if (full_init(&f, m) != 0) FAIL(HF_ERR_NOMEM, "out of memory for the whole model");
    specs = malloc(MAX_SPECS(f.L) * sizeof *specs);
    used = calloc(st_count(sf) + 1, 1);
    if (!specs || !used) FAIL(HF_ERR_NOMEM, "out of memory");
    nspec = build_specs(specs, arch, &f, c);
    size_t biggest = 1;
    for (size_t i = 0; i < nspec; i++)
        if (specs[i].nrows * specs[i].cols > biggest) biggest = specs[i].nrows * specs[i].cols;
    buf = malloc(biggest * sizeof(float));
    if (!buf) FAIL(HF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nspec; i++) {
        const struct spec *x = &specs[i];
        const st_tensor *t = find_tensor(sf, arch, x->name);
        if (!t) FAIL(HF_ERR_MISMATCH, "'%s': missing tensor '%s'", spath, x->name);
        used[t - st_at(sf, 0)] = 1;
        size_t R = x->vocab ? (size_t)V : x->nrows;
        uint64_t want[2];
        int nd = x->cols == 1 ? 1 : 2;
        if (x->tr) { want[0] = x->cols; want[1] = R; }
        else { want[0] = R; want[1] = x->cols; }
        if (t->ndim != nd || t->shape[0] != want[0] || (nd == 2 && t->shape[1] != want[1])) {
            char got_s[128], want_s[128];
            shape_text(got_s, sizeof got_s, t->ndim, t->shape);
            shape_text(want_s, sizeof want_s, nd, want);
            FAIL(HF_ERR_MISMATCH, "'%s': tensor '%s' has shape %s, expected %s", spath, t->name, got_s, want_s);
        }
        st_read_f32(sf, t, buf);
        for (uint64_t k = 0; k < t->numel; k++)
            if (!isfinite(buf[k])) FAIL(HF_ERR_FORMAT, "'%s': tensor '%s' holds a non-finite value", spath, t->name);
        spec_copy(&f, x, buf, R, 1);
    }
    for (size_t i = 0; i < st_count(sf); i++)
        if (!used[i] && !ignorable(arch, st_at(sf, i)->name, !c->untie_embeddings))
            FAIL(HF_ERR_MISMATCH, "'%s': unexpected tensor '%s' (not part of %s with these flags)", spath,
                 st_at(sf, i)->name, arch == HF_ARCH_GPT2 ? "GPT2LMHeadModel" : "LlamaForCausalLM");
    loc = malloc((m->num_params ? m->num_params : 1) * sizeof(float));
    if (!loc) FAIL(HF_ERR_NOMEM, "out of memory");
    shard(m, loc, &f, 1);
    if (gpt_state_write(m, GPT_STATE_WEIGHTS, 0, loc, m->num_params) != 0)
        FAIL(HF_ERR_FORMAT, "cannot write the weights into the model");
cleanup:
    free(text);
    jt_free(doc);
    free(specs);
    free(used);
    free(buf);
    free(loc);
    free(f.mem);
    st_close(sf);
    return rc;
}
