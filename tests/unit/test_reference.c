/*
 * test_reference.c - agreement with PyTorch (llm.c's test_gpt2 pattern):
 * the C model of train/model.c against the reference files that
 * tests/reference/make_reference.py writes with torch (tests/data/reference/,
 * the format is in the script's header).  For a tiny Megatron GPT, tied and
 * untied, and the Llama block (RoPE, RMSNorm, SwiGLU, no biases, tied and
 * untied, multi-head, grouped-query and multi-query attention, a partial
 * rotary width, interleaved pairs, a biased variant) and GPT with
 * bigscience's embedding LayerNorm (its own eps 1e-5, the blocks' 1e-3;
 * tied and untied), with the script's
 * weights and batch (a loss mask with zeros, a padded vocabulary), it
 * checks the logits, the loss and every parameter
 * gradient of one forward/backward, then the losses and gradient norms of
 * 10 training steps run as mdstrain runs them (zero grad, forward,
 * backward, norm, clip, AdamW).  It also checks that the loader refuses
 * damaged files and that the comparison notices a weight moved by 1e-3.
 *
 * Tolerances, elementwise |got - ref| <= atol + rtol * |ref|:
 *   logits         atol 2e-5,  rtol 1e-5   (logits up to ~5)
 *   gradients      atol 2e-6,  rtol 1e-4   (largest ~0.7)
 *   loss, losses   rtol 2e-6;  grad norms rtol 1e-5
 * torch's own float32 run lies within 1.3e-6 (logits), 2e-7 (gradients)
 * and 1.2e-7 relative (losses) of float64 (the script prints this), so each
 * bound is ~10x the fp32 noise; the maxima seen are printed on stdout.
 * It does not test the kernels one by one (test_kernels) nor the
 * initialisation (test_model).  Needs no torch: the files are committed.
 */
#include "harness.h"
#include "model.h"
#include "kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#define REF_MAGIC 0x4652444d   /* "MDRF" */
#define REF_HEADER 128           /* version 1; version 2 (the Llama block) adds 64 bytes */
#define REF_HEADER2 192

#define TOL_LOGITS_ATOL 2e-5
#define TOL_LOGITS_RTOL 1e-5
#define TOL_GRAD_ATOL 2e-6
#define TOL_GRAD_RTOL 1e-4
#define TOL_LOSS_RTOL 2e-6
#define TOL_NORM_RTOL 1e-5

#define param_names gpt_param_names

typedef struct ref_file {
    int version;
    int L, C, NH, F, maxT, V, div, Vp, untie, B, T, steps, P;
    int rope, rmsnorm, swiglu, G, bias, interleaved, embedln;   /* version 2; GPT's values in version 1 */
    float rotary_base, rotary_percent, embedln_eps;
    float lr, beta1, beta2, eps, wd, clip, ln_eps;
    const int *inputs, *targets;                 /* (B, T) */
    const float *mask;                           /* (B, T) */
    const float *params, *grads;                 /* (P) in model.h order */
    const float *logits;                         /* (B, T, Vp) */
    float loss;
    const float *losses, *norms;                 /* (steps) */
    unsigned char *buf;                          /* owns everything above */
} ref_file;

static int32_t rd_i32(const unsigned char *p) { int32_t v; memcpy(&v, p, 4); return v; }
static float rd_f32(const unsigned char *p) { float v; memcpy(&v, p, 4); return v; }

/* Parse a reference file held in buf (len bytes; the host is little-endian,
 * as the Makefile's targets are).  Returns NULL on success, else why not.
 * On success r points into buf (not copied; r->buf is left to the caller). */
static const char *ref_parse(ref_file *r, unsigned char *buf, size_t len)
{
    memset(r, 0, sizeof *r);
    if (len < REF_HEADER) return "shorter than the header";
    if ((uint32_t)rd_i32(buf) != REF_MAGIC) return "bad magic";
    r->version = rd_i32(buf + 4);
    if (r->version != 1 && r->version != 2) return "unsupported version";
    size_t header = r->version == 1 ? REF_HEADER : REF_HEADER2;
    if (len < header) return "shorter than the header";
    int *f[] = {&r->L, &r->C, &r->NH, &r->F, &r->maxT, &r->V, &r->div, &r->Vp, &r->untie,
                &r->B, &r->T, &r->steps, &r->P};
    for (int i = 0; i < 13; i++) {
        *f[i] = rd_i32(buf + 8 + 4 * i);
        if (*f[i] < 0 || *f[i] > (1 << 20)) return "header field out of range";
    }
    float *h[] = {&r->lr, &r->beta1, &r->beta2, &r->eps, &r->wd, &r->clip, &r->ln_eps};
    for (int i = 0; i < 7; i++)
        *h[i] = rd_f32(buf + 64 + 4 * i);
    r->G = r->NH;
    r->bias = 1;
    if (r->version == 2) {
        int *g[] = {&r->rope, &r->rmsnorm, &r->swiglu, &r->G, &r->bias, &r->interleaved, &r->embedln};
        for (int i = 0; i < 7; i++) {
            *g[i] = rd_i32(buf + 128 + 4 * i);
            if (*g[i] < 0 || *g[i] > (1 << 20)) return "header field out of range";
        }
        r->rotary_base = rd_f32(buf + 160);
        r->rotary_percent = rd_f32(buf + 164);
        r->embedln_eps = rd_f32(buf + 168);
    }
    if (!r->L || !r->C || !r->NH || !r->F || r->C % r->NH || !r->B || !r->T || r->T > r->maxT || !r->steps ||
        r->untie > 1 || !r->div || r->Vp != (r->V + r->div - 1) / r->div * r->div || !r->G || r->NH % r->G ||
        r->embedln > 1 || (r->embedln && r->embedln_eps != GPT_EMBED_LN_EPS))
        return "inconsistent configuration";
    size_t L = (size_t)r->L, C = (size_t)r->C, F = (size_t)r->F, Vp = (size_t)r->Vp;
    size_t QKV = C + 2 * (size_t)r->G * (C / (size_t)r->NH), FC1 = r->swiglu ? 2 * F : F;
    size_t lnb = r->rmsnorm ? 0 : 1, b = (size_t)r->bias;
    size_t P = Vp * C * (1 + (size_t)r->untie) + (r->rope ? 0 : (size_t)r->maxT * C) + C * (1 + lnb) +
               L * (C * (1 + lnb) * 2 + QKV * C + b * QKV + C * C + b * C + FC1 * C + b * FC1 + C * F + b * C) +
               2 * C * (size_t)r->embedln;
    if ((size_t)r->P != P) return "parameter count does not match the configuration";
    size_t BT = (size_t)r->B * (size_t)r->T;
    size_t want = header + 4 * (3 * BT + 2 * P + BT * Vp + 1 + 2 * (size_t)r->steps);
    if (len != want) return "file size does not match the header";
    unsigned char *p = buf + header;
    r->inputs = (const int *)(void *)p;   p += 4 * BT;
    r->targets = (const int *)(void *)p;  p += 4 * BT;
    r->mask = (const float *)(void *)p;   p += 4 * BT;
    r->params = (const float *)(void *)p; p += 4 * P;
    r->logits = (const float *)(void *)p; p += 4 * BT * Vp;
    r->loss = rd_f32(p);                  p += 4;
    r->grads = (const float *)(void *)p;  p += 4 * P;
    r->losses = (const float *)(void *)p; p += 4 * (size_t)r->steps;
    r->norms = (const float *)(void *)p;
    for (size_t i = 0; i < BT; i++)
        if (r->inputs[i] < 0 || r->inputs[i] >= r->V || r->targets[i] < 0 || r->targets[i] >= r->V)
            return "token id out of range";
    return NULL;
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Load tests/data/reference/NAME under $MDS_ROOT (tests/run.sh sets it) or
 * the current directory.  Returns 0 on success. */
static int ref_load(ref_file *r, const char *name)
{
    const char *root = getenv("MDS_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/reference/%s", root ? root : ".", name);
    size_t len = 0;
    unsigned char *buf = read_all(path, &len);
    if (!buf) {
        fprintf(stderr, "test_reference: cannot read '%s'\n", path);
        return -1;
    }
    const char *why = ref_parse(r, buf, len);
    if (why) {
        fprintf(stderr, "test_reference: '%s': %s\n", path, why);
        free(buf);
        return -1;
    }
    r->buf = buf;
    return 0;
}

/* A model with the file's configuration and weights. */
static int ref_model(gpt_model *m, const ref_file *r)
{
    gpt_config c;
    char err[200];
    gpt_config_init(&c);
    c.num_layers = r->L;
    c.hidden_size = r->C;
    c.num_heads = r->NH;
    c.ffn_hidden_size = r->F;
    c.max_position_embeddings = r->maxT;
    c.vocab_size = r->V;
    c.make_vocab_size_divisible_by = r->div;
    c.untie_embeddings = r->untie;
    c.layernorm_eps = r->ln_eps;
    c.position_embedding = r->rope ? GPT_POS_ROPE : GPT_POS_LEARNED;
    c.normalization = r->rmsnorm ? GPT_NORM_RMSNORM : GPT_NORM_LAYERNORM;
    c.swiglu = r->swiglu;
    c.num_query_groups = r->G;
    c.add_bias_linear = r->bias;
    c.rotary_interleaved = r->interleaved;
    c.embed_layernorm = r->embedln;
    if (r->rope) {
        c.rotary_base = r->rotary_base;
        c.rotary_percent = r->rotary_percent;
    }
    if (gpt_model_init(m, &c, r->B, r->T, err, sizeof err) != 0) {
        fprintf(stderr, "test_reference: gpt_model_init: %s\n", err);
        return -1;
    }
    if (m->Vp != r->Vp || m->num_params != (size_t)r->P) {
        fprintf(stderr, "test_reference: model has Vp %d, %zu parameters; file %d, %d\n",
                m->Vp, m->num_params, r->Vp, r->P);
        gpt_model_free(m);
        return -1;
    }
    memcpy(m->params_memory, r->params, (size_t)r->P * sizeof(float));
    return 0;
}

/* Elementwise |got - ref| <= atol + rtol |ref|; when verbose, prints the
 * first mismatches (stderr) and the largest error (stdout).  Returns the
 * number of mismatches; *ratio gets the largest error / its tolerance. */
static long compare(const char *what, const float *got, const float *ref, size_t n,
                    double atol, double rtol, int verbose, double *ratio)
{
    long bad = 0;
    double maxabs = 0, maxratio = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]), tol = atol + rtol * fabs((double)ref[i]);
        if (d > maxabs) maxabs = d;
        if (d / tol > maxratio) maxratio = d / tol;
        if (!(d <= tol)) {   /* NaN fails too */
            if (verbose && bad < 5)
                fprintf(stderr, "  %s[%zu]: got %.9g, reference %.9g (|diff| %.3g > %.3g)\n",
                        what, i, got[i], ref[i], d, tol);
            bad++;
        }
    }
    if (verbose)
        printf("  %-9s max |diff| %.2e  (%.2f of the tolerance)%s\n", what, maxabs, maxratio,
               bad ? "  MISMATCH" : "");
    if (ratio) *ratio = maxratio;
    return bad;
}

/* The first forward and backward: logits, loss and every gradient tensor.
 * Returns the number of mismatching values. */
static long check_grads(const ref_file *r, gpt_model *m, int verbose)
{
    double ls, nt;
    long bad = 0;
    CHECK(gpt_forward(m, r->inputs, r->targets, r->mask, &ls, &nt) == 0);
    size_t BT = (size_t)r->B * r->T;
    bad += compare("logits", m->acts.logits, r->logits, BT * (size_t)r->Vp,
                   TOL_LOGITS_ATOL, TOL_LOGITS_RTOL, verbose, NULL);
    float loss = (float)(ls / nt);
    bad += compare("loss", &loss, &r->loss, 1, 0.0, TOL_LOSS_RTOL, verbose, NULL);
    gpt_zero_grad(m);
    gpt_backward(m, 1.0f);
    size_t off = 0;
    for (int i = 0; i < GPT_NUM_PARAMS; i++) {
        size_t n = m->param_sizes[i];
        if (n)
            bad += compare(param_names[i], m->grads_memory + off, r->grads + off, n,
                           TOL_GRAD_ATOL, TOL_GRAD_RTOL, verbose, NULL);
        off += n;
    }
    return bad;
}

/* The training steps exactly as train/train.c runs one micro-batch per step
 * at a constant learning rate. */
static void check_steps(const ref_file *r, gpt_model *m)
{
    float losses[64], norms[64];
    int S = r->steps < 64 ? r->steps : 64;
    CHECK(r->steps <= 64);
    for (int s = 0; s < S; s++) {
        double ls, nt;
        gpt_zero_grad(m);
        CHECK(gpt_forward(m, r->inputs, r->targets, r->mask, &ls, &nt) == 0);
        gpt_backward(m, 1.0f);
        double norm = gpt_grad_norm(m);
        gpt_update(m, r->lr, r->lr, r->beta1, r->beta2, r->eps, r->wd, global_norm_clip_scale((float)norm, r->clip));
        losses[s] = (float)(ls / nt);
        norms[s] = (float)norm;
    }
    printf("  losses    %.6f -> %.6f over %d steps (reference %.6f -> %.6f)\n",
           losses[0], losses[S - 1], S, r->losses[0], r->losses[S - 1]);
    CHECK(compare("losses", losses, r->losses, (size_t)S, 0.0, TOL_LOSS_RTOL, 1, NULL) == 0);
    CHECK(compare("norms", norms, r->norms, (size_t)S, 0.0, TOL_NORM_RTOL, 1, NULL) == 0);
    CHECK(r->losses[S - 1] < 0.8f * r->losses[0]);   /* the steps do train */
    CHECK(r->norms[0] > r->clip);                    /* and clipping is exercised */
}

static void run_file(const char *name, int steps)
{
    ref_file r;
    gpt_model m;
    if (ref_load(&r, name) != 0) {
        CHECK(!"reference file loads");
        return;
    }
    printf("  %s: L %d C %d NH %d G %d F %d T %d B %d V %d (padded %d) %s%s%s%s%s, %d parameters\n", name, r.L, r.C,
           r.NH, r.G, r.F, r.T, r.B, r.V, r.Vp, r.untie ? "untied" : "tied", r.rope ? ", rope" : "",
           r.rmsnorm ? ", rmsnorm" : "", r.swiglu ? ", swiglu" : "", r.embedln ? ", embedding LayerNorm" : "", r.P);
    if (ref_model(&m, &r) == 0) {
        if (steps)
            check_steps(&r, &m);
        else
            CHECK(check_grads(&r, &m, 1) == 0);
        gpt_model_free(&m);
    } else {
        CHECK(!"model matches the file");
    }
    free(r.buf);
}

static void test_tied_forward_backward(void) { run_file("gpt_tiny.bin", 0); }
static void test_tied_training_steps(void) { run_file("gpt_tiny.bin", 1); }
static void test_untied_forward_backward(void) { run_file("gpt_tiny_untied.bin", 0); }
static void test_untied_training_steps(void) { run_file("gpt_tiny_untied.bin", 1); }

static const char *const embedln_files[] = {"gpt_tiny_embedln.bin", "gpt_tiny_embedln_untied.bin"};

static void test_embedln_forward_backward(void)
{
    for (size_t i = 0; i < 2; i++)
        run_file(embedln_files[i], 0);
}

static void test_embedln_training_steps(void)
{
    for (size_t i = 0; i < 2; i++)
        run_file(embedln_files[i], 1);
}

static const char *const llama_files[] = {"llama_tiny_gqa_untied.bin", "llama_tiny_mha_tied.bin",
                                          "llama_tiny_mqa_tied_bias.bin", "llama_tiny_mha_untied.bin"};

static void test_llama_forward_backward(void)
{
    for (size_t i = 0; i < sizeof llama_files / sizeof llama_files[0]; i++)
        run_file(llama_files[i], 0);
}

static void test_llama_training_steps(void)
{
    for (size_t i = 0; i < sizeof llama_files / sizeof llama_files[0]; i++)
        run_file(llama_files[i], 1);
}

/* The tolerances must be tight enough to matter: element k of parameter
 * tensor id of NAME's model moved by 1e-3 has to show as mismatches. */
static void check_perturbation(const char *name, int id, size_t k, const char *what)
{
    ref_file r;
    gpt_model m;
    memset(&r, 0, sizeof r);
    if (ref_load(&r, name) != 0 || ref_model(&m, &r) != 0) {
        CHECK(!"reference file loads");
        free(r.buf);
        return;
    }
    float *p = m.params_memory;
    for (int i = 0; i < id; i++)
        p += m.param_sizes[i];
    p[k] += 1e-3f;
    long bad = check_grads(&r, &m, 0);
    printf("  %s + 1e-3: %ld values out of tolerance\n", what, bad);
    CHECK(bad > 0);
    gpt_model_free(&m);
    free(r.buf);
}

/* a q weight of head 0 in the first layer */
static void test_detects_perturbation(void) { check_perturbation("gpt_tiny.bin", GPT_QKVW, 20 + 3, "one qkvw weight"); }

/* a k weight of the only group (C = 32) */
static void test_llama_detects_perturbation(void)
{
    check_perturbation("llama_tiny_mqa_tied_bias.bin", GPT_QKVW, 33 * 32 + 5, "one k weight");
}

/* (the embedding norm's eps is held by the files themselves: the blocks'
 * 1e-3 in its place, against word-embedding variances ~0.09, moves the
 * logits ~100x their tolerance) */
static void test_embedln_detects_perturbation(void)
{
    check_perturbation("gpt_tiny_embedln.bin", GPT_EMBLNW, 3, "one embedding-norm weight");
}

/* Damaged files are refused with a reason, never read past their end. */
static void test_refuses_damaged(void)
{
    ref_file r;
    if (ref_load(&r, "gpt_tiny.bin") != 0) {
        CHECK(!"reference file loads");
        return;
    }
    size_t len = REF_HEADER + 4 * ((size_t)3 * r.B * r.T + 2 * (size_t)r.P +
                                   (size_t)r.B * r.T * r.Vp + 1 + 2 * (size_t)r.steps);
    unsigned char *copy = malloc(len);
    memcpy(copy, r.buf, len);
    ref_file s;
    CHECK(ref_parse(&s, copy, len) == NULL);
    const char *why = ref_parse(&s, copy, len - 4);
    CHECK(why && strstr(why, "size"));
    CHECK(ref_parse(&s, copy, 100) != NULL);
    copy[0] ^= 1;
    CHECK((why = ref_parse(&s, copy, len)) && strstr(why, "magic"));
    copy[0] ^= 1;
    copy[12] ^= 1;   /* hidden size 20 -> 21: counts disagree */
    CHECK(ref_parse(&s, copy, len) != NULL);
    copy[12] ^= 1;
    memcpy(copy + REF_HEADER, &(int){r.V}, 4);   /* first input = vocab size */
    CHECK((why = ref_parse(&s, copy, len)) && strstr(why, "token"));
    free(copy);
    free(r.buf);
}

int main(void)
{
    RUN(test_refuses_damaged);
    RUN(test_tied_forward_backward);
    RUN(test_tied_training_steps);
    RUN(test_untied_forward_backward);
    RUN(test_untied_training_steps);
    RUN(test_detects_perturbation);
    RUN(test_llama_forward_backward);
    RUN(test_llama_training_steps);
    RUN(test_llama_detects_perturbation);
    RUN(test_embedln_forward_backward);
    RUN(test_embedln_training_steps);
    RUN(test_embedln_detects_perturbation);
    return harness_report();
}
