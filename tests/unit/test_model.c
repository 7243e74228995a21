/*
 * test_model.c - the GPT model of train/model.[ch] as a whole: configuration
 * rules, initialisation, a finite-difference check of the loss gradient for
 * a sample of elements of EVERY parameter tensor (tied and untied, with a
 * loss mask, GPT and the Llama block), the Llama block's TP shards, training
 * on a fixed batch, bitwise determinism, and full activation recomputation
 * bitwise equal to keeping every activation.
 * Checkpoints (train/checkpoint.[ch]): save, load, bitwise continuation,
 * Megatron's path names, and refusal of corrupt or mismatched files.
 * Seeded: prints the seed, takes -s SEED.  It does not test the kernels one
 * by one (test_kernels does) nor the trainer's flags (tests/cli/test_train.sh).
 */
#include "harness.h"
#include "model.h"
#include "checkpoint.h"
#include "kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

static uint64_t rng_state = 1;

static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static void tiny_config(gpt_config *c, int untie)
{
    gpt_config_init(c);
    c->num_layers = 2;
    c->hidden_size = 8;
    c->num_heads = 2;
    c->max_position_embeddings = 6;
    c->vocab_size = 21;
    c->make_vocab_size_divisible_by = 8;  /* padded to 24: three padding rows */
    c->untie_embeddings = untie;
    c->seed = 7;
}

static void test_config(void)
{
    gpt_config c;
    char err[200];
    gpt_config_init(&c);
    CHECK(c.make_vocab_size_divisible_by == 128 && c.seed == 1234 && fabsf(c.init_method_std - 0.02f) < 1e-9f);
    c.num_layers = 2; c.hidden_size = 64; c.num_heads = 4; c.max_position_embeddings = 64;
    c.vocab_size = 50257;
    CHECK(gpt_config_check(&c, err, sizeof err) == 0);
    CHECK(gpt_padded_vocab_size(&c) == 50304);
    c.num_heads = 5;
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "multiple"));
    c.num_heads = 4;
    c.tp_size = 2;
    c.tp_rank = 1;
    CHECK(gpt_config_check(&c, err, sizeof err) == 0);
    CHECK(gpt_padded_vocab_size(&c) == 50432);  /* multiple of 128 * 2 */
    c.tp_rank = 2;
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "out of range"));
    c.tp_size = 3;
    c.tp_rank = 0;
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "heads 4 is not divisible by the tensor"));
    c.tp_size = 1;
    c.pp_size = 2;
    CHECK(gpt_config_check(&c, err, sizeof err) == 0);
    c.pp_size = 3;
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "layers 2 is not divisible by the pipeline"));
    c.pp_size = 1;
    gpt_model m;
    CHECK(gpt_model_init(&m, &c, 1, 65, err, sizeof err) == GPT_ERR_ARG);  /* T > maxT */
    gpt_model_free(&m);
    gpt_model_free(NULL);
}

static void test_init(void)
{
    gpt_config c;
    gpt_model m;
    char err[200];
    gpt_config_init(&c);
    c.num_layers = 4; c.hidden_size = 64; c.num_heads = 4; c.max_position_embeddings = 32;
    c.vocab_size = 300;
    CHECK(gpt_model_init(&m, &c, 1, 8, err, sizeof err) == 0);
    /* sizes: Vp = 384 */
    size_t C = 64, L = 4, F = 256, V = 384;
    size_t want = V * C + 32 * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + F * C + F + C * F + C) + 2 * C;
    CHECK(m.num_params == want);
    CHECK(m.params.outw == NULL && m.param_sizes[GPT_OUTW] == 0);
    /* statistics: std 0.02 for wte and fc, 0.02/sqrt(8) for the projections */
    double s2 = 0, p2 = 0, mean = 0;
    for (size_t i = 0; i < m.param_sizes[GPT_WTE]; i++) { s2 += m.params.wte[i] * (double)m.params.wte[i]; mean += m.params.wte[i]; }
    for (size_t i = 0; i < m.param_sizes[GPT_FCPROJW]; i++) p2 += m.params.fcprojw[i] * (double)m.params.fcprojw[i];
    double sd = sqrt(s2 / (double)m.param_sizes[GPT_WTE]), psd = sqrt(p2 / (double)m.param_sizes[GPT_FCPROJW]);
    CHECK(fabs(sd - 0.02) < 0.0005);
    CHECK(fabs(psd - 0.02 / sqrt(8.0)) < 0.0003);
    CHECK(fabs(mean / (double)m.param_sizes[GPT_WTE]) < 0.0005);
    CHECK(m.params.ln1w[5] == 1.0f && m.params.ln1b[5] == 0.0f && m.params.qkvb[7] == 0.0f && m.params.lnfw[0] == 1.0f);
    /* the documented generator, element (row 3, col 5) of wte */
    CHECK(m.params.wte[3 * C + 5] == (float)(0.02 * gpt_init_normal(1234, GPT_WTE, 0, 3, 5, C)));
    /* different seed, different weights; decay groups */
    CHECK(gpt_param_decays(GPT_WTE) && gpt_param_decays(GPT_QKVW) && !gpt_param_decays(GPT_QKVB) &&
          !gpt_param_decays(GPT_LN1W) && !gpt_param_decays(GPT_LNFB));
    gpt_model_free(&m);
}

static void make_batch(int *inp, int *tgt, float *mask, int n, int V, int with_mask)
{
    for (int i = 0; i < n; i++) {
        inp[i] = (int)(rnd() % (uint32_t)V);
        tgt[i] = (int)(rnd() % (uint32_t)V);
        mask[i] = with_mask ? (float)(rnd() % 4 != 0) : 1.0f;
    }
    if (with_mask) mask[0] = 1.0f;
}

/* Training positions of the rows, for dropout (NULL: none). */
static const uint64_t *drop_rows;

static double loss_of(gpt_model *m, const int *inp, const int *tgt, const float *mask)
{
    double ls, nt;
    gpt_set_dropout_rows(m, drop_rows);
    gpt_forward(m, inp, tgt, mask, &ls, &nt);
    return ls / nt;
}

/*
 * Central differences of the whole loss in each sampled element, against the
 * analytic gradient.  fp32 forward, loss summed in double: with h = 3e-3 the
 * rounding noise is ~1e-4 of a typical gradient.  Tolerance per element
 * 2e-3 + 3e-2 |g|, and per tensor ||num - ana|| / ||ana|| < 1e-2; a 3 %
 * error in any one tensor's gradient fails the second.
 */
/* The Llama block on the tiny model: RoPE (base 500, so the rotation varies
 * over 6 positions), RMSNorm, SwiGLU, one key/value head for two query heads,
 * no linear biases. */
static void llama_config(gpt_config *c, int untie)
{
    tiny_config(c, untie);
    c->position_embedding = GPT_POS_ROPE;
    c->rotary_base = 500.0;
    c->normalization = GPT_NORM_RMSNORM;
    c->swiglu = 1;
    c->ffn_hidden_size = 12;
    c->num_query_groups = 1;
    c->add_bias_linear = 0;
}

static void gradcheck_cfg(gpt_config c, int untie, int with_mask)
{
    gpt_model m;
    char err[200];
    c.init_method_std = 0.3f;   /* larger weights: gradients well above the fp32 noise */
    int B = 2, T = 5;
    CHECK(gpt_model_init(&m, &c, B, T, err, sizeof err) == 0);
    /* random LayerNorm weights and biases too, so their gradients are generic */
    for (int i = 0; i < GPT_NUM_PARAMS; i++) {
        if (gpt_param_decays(i)) continue;
        float *p = m.params_memory;
        for (int j = 0; j < i; j++) p += m.param_sizes[j];
        for (size_t k = 0; k < m.param_sizes[i]; k++)
            p[k] += 0.2f * ((float)(rnd() % 1000) / 1000.0f - 0.5f);
    }
    int inp[10], tgt[10];
    float mask[10];
    make_batch(inp, tgt, mask, B * T, c.vocab_size, with_mask);
    loss_of(&m, inp, tgt, mask);
    gpt_zero_grad(&m);
    gpt_backward(&m, 1.0f);
    float *pt = m.params_memory, *gt = m.grads_memory;
    const double h = 3e-3;
    for (int i = 0; i < GPT_NUM_PARAMS; i++) {
        size_t n = m.param_sizes[i];
        if (n) {
            double e2 = 0, a2 = 0;
            int nbad = 0;
            for (int s = 0; s < 12; s++) {
                size_t k = rnd() % n;
                float orig = pt[k];
                pt[k] = (float)(orig + h);
                double lp = loss_of(&m, inp, tgt, mask);
                pt[k] = (float)(orig - h);
                double lm = loss_of(&m, inp, tgt, mask);
                pt[k] = orig;
                double num = (lp - lm) / (2 * h), ana = gt[k];
                e2 += (num - ana) * (num - ana);
                a2 += ana * ana;
                if (fabs(num - ana) > 2e-3 + 3e-2 * fabs(ana)) {
                    if (nbad++ < 3)
                        fprintf(stderr, "  tensor %d elem %zu: numeric %.6g analytic %.6g\n", i, k, num, ana);
                }
            }
            double rel = sqrt(e2) / (sqrt(a2) + 1e-12);
            if (getenv("MDS_TEST_VERBOSE"))
                fprintf(stderr, "  untie %d mask %d tensor %2d: |g| %.3g rel %.2e\n", untie, with_mask, i, sqrt(a2), rel);
            CHECK(nbad == 0);
            CHECK(rel < 1e-2);
            CHECK(a2 > 1e-10 || i == GPT_WPE);  /* the sample must see some gradient */
        }
        pt += n;
        gt += n;
    }
    gpt_model_free(&m);
}

static void gradcheck(int untie, int with_mask)
{
    gpt_config c;
    tiny_config(&c, untie);
    gradcheck_cfg(c, untie, with_mask);
}

static void test_gradcheck_tied(void) { gradcheck(0, 0); }
static void test_gradcheck_untied_masked(void) { gradcheck(1, 1); }

static void test_gradcheck_llama(void)
{
    gpt_config c;
    llama_config(&c, 1);
    gradcheck_cfg(c, 1, 1);
    llama_config(&c, 0);
    c.rotary_interleaved = 1;
    c.rotary_percent = 0.5;
    c.num_query_groups = 2;
    c.add_bias_linear = 1;
    gradcheck_cfg(c, 0, 0);
}

/* bigscience's --embed-layernorm: the gradient of every tensor (its norm's
 * weight and bias included), tied and untied, with dropout and masks, and
 * with RoPE (no position embedding after the norm). */
static void test_gradcheck_embed_layernorm(void)
{
    static const uint64_t rows[2] = { 40, 41 };
    gpt_config c;
    tiny_config(&c, 0);
    c.embed_layernorm = 1;
    gradcheck_cfg(c, 0, 0);
    tiny_config(&c, 1);
    c.embed_layernorm = 1;
    c.hidden_dropout = 0.2f;
    drop_rows = rows;
    gradcheck_cfg(c, 1, 1);
    drop_rows = NULL;
    tiny_config(&c, 0);
    c.embed_layernorm = 1;
    c.position_embedding = GPT_POS_ROPE;
    gradcheck_cfg(c, 0, 1);
}

/* Its parameters: ones and zeros, C each, on the first pipeline stage only
 * (not the last stage's tied copy of wte), last in storage, no weight
 * decay, counted in the gradient norm on TP rank 0 only (replicated); the
 * combinations no reference defines are refused; the rest of the model is
 * initialised as without it. */
static void test_embed_layernorm_params(void)
{
    gpt_config c;
    gpt_model plain, m;
    char err[200];
    tiny_config(&c, 0);
    CHECK(gpt_model_init(&plain, &c, 1, 4, err, sizeof err) == 0);
    c.embed_layernorm = 1;
    CHECK(gpt_model_init(&m, &c, 1, 4, err, sizeof err) == 0);
    CHECK(m.param_sizes[GPT_EMBLNW] == 8 && m.param_sizes[GPT_EMBLNB] == 8 && m.num_params == plain.num_params + 16);
    CHECK(memcmp(m.params_memory, plain.params_memory, plain.num_params * sizeof(float)) == 0);
    CHECK(m.params.emblnw == m.params_memory + plain.num_params && m.params.emblnb == m.params.emblnw + 8);
    int init_ok = 1;
    for (int i = 0; i < 8; i++) init_ok &= m.params.emblnw[i] == 1.0f && m.params.emblnb[i] == 0.0f;
    CHECK(init_ok);
    CHECK(!gpt_param_decays(GPT_EMBLNW) && !gpt_param_decays(GPT_EMBLNB));
    CHECK(gpt_param_counts_in_norm(&m, GPT_EMBLNW) && strcmp(gpt_param_names[GPT_EMBLNB], "emblnb") == 0);
    gpt_model_free(&plain);
    gpt_model_free(&m);
    c.pp_size = 2;
    c.pp_rank = 1;
    CHECK(gpt_model_init(&m, &c, 1, 4, err, sizeof err) == 0);
    CHECK(m.param_sizes[GPT_WTE] > 0 && m.param_sizes[GPT_EMBLNW] == 0 && m.params.emblnw == NULL);
    gpt_model_free(&m);
    c.pp_size = 1;
    c.pp_rank = 0;
    c.tp_size = 2;
    c.tp_rank = 1;
    CHECK(gpt_model_init(&m, &c, 1, 4, err, sizeof err) == 0);
    CHECK(m.param_sizes[GPT_EMBLNW] == 8 && !gpt_param_counts_in_norm(&m, GPT_EMBLNW));
    gpt_model_free(&m);
    c.tp_size = 1;
    c.tp_rank = 0;
    c.normalization = GPT_NORM_RMSNORM;
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "RMSNorm"));
    c.normalization = GPT_NORM_LAYERNORM;
    c.apply_layernorm_1p = 1;
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "apply_layernorm_1p"));
}

/* The Llama configuration's rules and sizes, and a TP = 2 shard that holds
 * exactly its slice of the TP = 1 weights: qkv rows [q | k | v] per query
 * group, fc1 rows [gate | up]. */
/* With dropout (hidden and attention, the masks fixed by the rows'
 * positions) the gradient is still the loss's: GPT and the Llama block. */
static void test_gradcheck_dropout(void)
{
    static const uint64_t rows[2] = { 40, 41 };
    gpt_config c;
    drop_rows = rows;
    tiny_config(&c, 0);
    c.hidden_dropout = 0.2f;
    c.attention_dropout = 0.3f;
    gradcheck_cfg(c, 0, 1);
    llama_config(&c, 1);
    c.hidden_dropout = 0.2f;
    c.attention_dropout = 0.3f;
    gradcheck_cfg(c, 1, 0);
    drop_rows = NULL;
    /* and it is on: the loss differs from the same model without it */
    gpt_model m;
    char err[200];
    tiny_config(&c, 0);
    c.hidden_dropout = 0.2f;
    CHECK(gpt_model_init(&m, &c, 2, 5, err, sizeof err) == 0);
    int inp[10], tgt[10];
    float mask[10];
    make_batch(inp, tgt, mask, 10, c.vocab_size, 0);
    double plain = loss_of(&m, inp, tgt, mask);
    drop_rows = rows;
    double dropped = loss_of(&m, inp, tgt, mask), again = loss_of(&m, inp, tgt, mask);
    drop_rows = NULL;
    CHECK(plain != dropped && dropped == again);
    gpt_model_free(&m);
}

/* --bf16 / --fp16 on the CPU: the working weights are the fp32 masters
 * rounded (before and after an update), the forward and gradients stay
 * within the 16-bit formats' precision of fp32's, and an fp16 gradient
 * buffer holds fp16 values. */
static void test_mixed_precision(void)
{
    for (int dt = MDS_BF16; dt <= MDS_F16; dt++) {
        gpt_config c;
        gpt_model m, r;
        char err[200];
        tiny_config(&c, 0);
        CHECK(gpt_model_init(&r, &c, 2, 5, err, sizeof err) == 0);
        c.dtype = dt;
        c.grad_dtype = dt == MDS_F16 ? MDS_F16 : MDS_F32;
        CHECK(gpt_model_init(&m, &c, 2, 5, err, sizeof err) == 0);
        CHECK(m.master_memory != m.params_memory);
        CHECK(memcmp(m.master_memory, r.params_memory, m.num_params * sizeof(float)) == 0);   /* same init */
        int rounded = 1;
        for (size_t i = 0; i < m.num_params; i++)
            rounded &= m.params_memory[i] == mds_round_to(dt, m.master_memory[i]);
        CHECK(rounded);
        int inp[10], tgt[10];
        float mask[10];
        make_batch(inp, tgt, mask, 10, c.vocab_size, 0);
        double l16 = loss_of(&m, inp, tgt, mask), l32 = loss_of(&r, inp, tgt, mask);
        CHECK(fabs(l16 - l32) < (dt == MDS_BF16 ? 2e-2 : 3e-3) * l32 && l16 != l32);
        gpt_zero_grad(&m);
        gpt_backward(&m, 1.0f);
        gpt_zero_grad(&r);
        gpt_backward(&r, 1.0f);
        double e2 = 0, a2 = 0;
        int fp16_grads = 1;
        for (size_t i = 0; i < m.num_params; i++) {
            double d = (double)m.grads_memory[i] - r.grads_memory[i];
            e2 += d * d;
            a2 += (double)r.grads_memory[i] * r.grads_memory[i];
            if (dt == MDS_F16) fp16_grads &= m.grads_memory[i] == mds_round_to(MDS_F16, m.grads_memory[i]);
        }
        CHECK(sqrt(e2 / a2) < (dt == MDS_BF16 ? 5e-2 : 1e-2));
        CHECK(fp16_grads);
        gpt_update(&m, 1e-2f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
        rounded = 1;
        int moved = 0;
        for (size_t i = 0; i < m.num_params; i++) {
            rounded &= m.params_memory[i] == mds_round_to(dt, m.master_memory[i]);
            moved |= m.master_memory[i] != r.params_memory[i];
        }
        CHECK(rounded && moved);
        /* the state interface: weights are the masters; writing them rounds the working copy */
        float w0;
        CHECK(gpt_state_read(&m, GPT_STATE_WEIGHTS, 3, &w0, 1) == 0 && w0 == m.master_memory[3]);
        float w1 = 0.123456789f;
        CHECK(gpt_state_write(&m, GPT_STATE_WEIGHTS, 3, &w1, 1) == 0);
        CHECK(m.master_memory[3] == w1 && m.params_memory[3] == mds_round_to(dt, w1));
        gpt_model_free(&m);
        gpt_model_free(&r);
    }
}

/* --bf16 --grad-reduce-in-bf16: the gradient buffer holds bf16 values
 * after a backward, within bf16 precision of the fp32-gradient run's. */
static void test_bf16_main_grads(void)
{
    gpt_config c;
    gpt_model m, r;
    char err[200];
    tiny_config(&c, 0);
    c.dtype = MDS_BF16;
    CHECK(gpt_model_init(&r, &c, 2, 5, err, sizeof err) == 0);
    c.grad_dtype = MDS_BF16;
    CHECK(gpt_model_init(&m, &c, 2, 5, err, sizeof err) == 0);
    int inp[10], tgt[10];
    float mask[10];
    make_batch(inp, tgt, mask, 10, c.vocab_size, 0);
    CHECK(loss_of(&m, inp, tgt, mask) == loss_of(&r, inp, tgt, mask));   /* the forward does not change */
    gpt_zero_grad(&m);
    gpt_backward(&m, 1.0f);
    gpt_zero_grad(&r);
    gpt_backward(&r, 1.0f);
    int bf16 = 1, differ = 0;
    double e2 = 0, a2 = 0;
    for (size_t i = 0; i < m.num_params; i++) {
        bf16 &= m.grads_memory[i] == mds_round_to(MDS_BF16, m.grads_memory[i]);
        differ |= m.grads_memory[i] != r.grads_memory[i];
        double d = (double)m.grads_memory[i] - r.grads_memory[i];
        e2 += d * d;
        a2 += (double)r.grads_memory[i] * r.grads_memory[i];
    }
    CHECK(bf16 && differ);
    CHECK(sqrt(e2 / a2) < 4e-3);   /* one bf16 rounding: 2^-9 relative at most */
    gpt_model_free(&m);
    gpt_model_free(&r);
    /* a 16-bit gradient buffer of another format than the weights is refused */
    c.dtype = MDS_F16;
    c.grad_dtype = MDS_BF16;
    CHECK(gpt_model_init(&m, &c, 2, 5, err, sizeof err) != 0);
}

/* Megatron's --decoupled-lr group: lr_embed moves the word embeddings and
 * the untied output layer and nothing else; lr_embed = lr is the one-group
 * step. */
static void test_decoupled_lr(void)
{
    gpt_config c;
    gpt_model a, b;
    char err[200];
    tiny_config(&c, 1);   /* untied: an output layer of its own */
    CHECK(gpt_model_init(&a, &c, 2, 5, err, sizeof err) == 0);
    CHECK(gpt_model_init(&b, &c, 2, 5, err, sizeof err) == 0);
    int inp[10], tgt[10];
    float mask[10];
    make_batch(inp, tgt, mask, 10, c.vocab_size, 0);
    gpt_model *ms[2] = {&a, &b};
    for (int k = 0; k < 2; k++) {
        loss_of(ms[k], inp, tgt, mask);
        gpt_zero_grad(ms[k]);
        gpt_backward(ms[k], 1.0f);
    }
    float *before = malloc(a.num_params * sizeof(float));
    CHECK(before != NULL);
    memcpy(before, a.params_memory, a.num_params * sizeof(float));
    gpt_update(&a, 0.0f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);   /* only the decoupled group moves */
    int only_group = 1, group_moved = 1;
    size_t off = 0;
    for (int i = 0; i < GPT_NUM_PARAMS; off += a.param_sizes[i], i++) {
        int moved = 0;
        for (size_t j = off; j < off + a.param_sizes[i]; j++)
            moved |= a.params_memory[j] != before[j];
        if (i == GPT_WTE || i == GPT_OUTW) group_moved &= moved;
        else only_group &= !moved;
    }
    CHECK(only_group && group_moved);
    gpt_update(&b, 1e-2f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    gpt_model r;
    CHECK(gpt_model_init(&r, &c, 2, 5, err, sizeof err) == 0);
    loss_of(&r, inp, tgt, mask);
    gpt_zero_grad(&r);
    gpt_backward(&r, 1.0f);
    gpt_update_shard(&r, r.grads_memory, 1e-2f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    CHECK(memcmp(b.params_memory, r.params_memory, b.num_params * sizeof(float)) == 0);
    free(before);
    gpt_model_free(&a);
    gpt_model_free(&b);
    gpt_model_free(&r);
}

static void test_llama_config_and_shards(void)
{
    gpt_config c;
    char err[200];
    llama_config(&c, 1);
    c.num_heads = 4;
    c.num_query_groups = 2;
    c.hidden_size = 16;
    c.ffn_hidden_size = 8;
    CHECK(gpt_config_check(&c, err, sizeof err) == 0);
    c.num_query_groups = 3;
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "not a multiple of the number of query groups"));
    c.num_query_groups = 2;
    c.tp_size = 4;
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "query groups 2 is not divisible"));
    c.tp_size = 1;
    c.rotary_percent = 0.25;   /* int(4 * 0.25) = 1: odd */
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "rotary dimension"));
    c.rotary_percent = 1.0;
    CHECK(gpt_default_ffn(4096, 1) == 10880 && gpt_default_ffn(4096, 0) == 16384 && gpt_default_ffn(16, 1) == 0);
    c.ffn_hidden_size = 0;
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "ffn hidden size is 0"));
    c.ffn_hidden_size = 8;
    gpt_model full, half;
    CHECK(gpt_model_init(&full, &c, 1, 4, err, sizeof err) == 0);
    /* sizes: no wpe, no biases, RMSNorm without bias, qkv 16 + 2 * 2 * 4 rows, fc1 2 * 8 rows */
    CHECK(full.param_sizes[GPT_WPE] == 0 && full.param_sizes[GPT_LN1B] == 0 && full.param_sizes[GPT_QKVB] == 0 &&
          full.param_sizes[GPT_FCB] == 0 && full.param_sizes[GPT_LNFB] == 0);
    CHECK(full.param_sizes[GPT_QKVW] == (size_t)2 * 32 * 16 && full.param_sizes[GPT_FCW] == (size_t)2 * 16 * 16);
    CHECK(full.params.ln1w[3] == 1.0f && full.params.lnfw[0] == 1.0f);
    c.tp_size = 2;
    c.tp_rank = 1;
    CHECK(gpt_model_init(&half, &c, 1, 4, err, sizeof err) == 0);
    int C = 16, hs = 4, Cl = 8, KVl = 4, Fl = 4, QKV = 32, QKVl = 16;
    int same = 1;
    for (int l = 0; l < 2; l++) {
        const float *q = full.params.qkvw + (size_t)l * QKV * C, *qh = half.params.qkvw + (size_t)l * QKVl * C;
        for (int r = 0; r < QKVl; r++) {
            /* local row r: q rows 8.., then k rows C + 4.., then v rows C + 8 + 4.. */
            int g = r < Cl ? Cl + r : r < Cl + KVl ? C + KVl + (r - Cl) : C + 2 * hs + KVl + (r - Cl - KVl);
            same &= memcmp(qh + (size_t)r * C, q + (size_t)g * C, (size_t)C * sizeof(float)) == 0;
        }
        const float *f = full.params.fcw + (size_t)l * 16 * C, *fh = half.params.fcw + (size_t)l * 8 * C;
        for (int r = 0; r < 2 * Fl; r++) {
            int g = r < Fl ? Fl + r : 8 + Fl + (r - Fl);   /* gate rows 4..7, up rows 12..15 */
            same &= memcmp(fh + (size_t)r * C, f + (size_t)g * C, (size_t)C * sizeof(float)) == 0;
        }
    }
    CHECK(same);
    gpt_model_free(&full);
    gpt_model_free(&half);
}

/* Accumulation: two micro-batches with scale 1/2 give the mean of their
 * gradients, and a fully masked micro-batch contributes nothing. */
static void test_accumulation(void)
{
    gpt_config c;
    gpt_model m;
    char err[200];
    tiny_config(&c, 0);
    CHECK(gpt_model_init(&m, &c, 1, 4, err, sizeof err) == 0);
    int i1[4] = {1, 2, 3, 4}, t1[4] = {2, 3, 4, 5}, i2[4] = {5, 6, 7, 8}, t2[4] = {6, 7, 8, 9};
    float zero[4] = {0, 0, 0, 0};
    double ls, nt;
    size_t P = m.num_params;
    float *g1 = malloc(P * sizeof *g1), *g2 = malloc(P * sizeof *g2);
    gpt_zero_grad(&m);
    gpt_forward(&m, i1, t1, NULL, &ls, &nt);
    gpt_backward(&m, 1.0f);
    memcpy(g1, m.grads_memory, P * sizeof *g1);
    gpt_zero_grad(&m);
    gpt_forward(&m, i2, t2, NULL, &ls, &nt);
    gpt_backward(&m, 1.0f);
    memcpy(g2, m.grads_memory, P * sizeof *g2);
    gpt_zero_grad(&m);
    gpt_forward(&m, i1, t1, NULL, &ls, &nt);
    gpt_backward(&m, 0.5f);
    gpt_forward(&m, i2, t2, NULL, &ls, &nt);
    gpt_backward(&m, 0.5f);
    gpt_forward(&m, i2, t2, zero, &ls, &nt);
    CHECK(ls == 0.0 && nt == 0.0);
    gpt_backward(&m, 0.5f);
    double maxerr = 0;
    for (size_t k = 0; k < P; k++) {
        double e = fabs(m.grads_memory[k] - 0.5 * ((double)g1[k] + g2[k]));
        if (e > maxerr) maxerr = e;
    }
    CHECK(maxerr < 1e-6);
    int bad[4] = {1, 2, 21, 0};   /* 21 >= vocab_size */
    CHECK(gpt_forward(&m, bad, t1, NULL, &ls, &nt) == GPT_ERR_ARG);
    free(g1);
    free(g2);
    gpt_model_free(&m);
}

/* Train on one repeated batch; returns the losses of `steps` steps. */
static void train_fixed(float *losses, int steps, float **params_out, size_t *np)
{
    gpt_config c;
    gpt_model m;
    char err[200];
    tiny_config(&c, 0);
    c.vocab_size = 40;
    c.hidden_size = 16;
    c.max_position_embeddings = 8;
    CHECK(gpt_model_init(&m, &c, 2, 8, err, sizeof err) == 0);
    int inp[16], tgt[16];
    uint64_t save = rng_state;
    rng_state = 99;
    for (int i = 0; i < 16; i++) {
        inp[i] = (int)(rnd() % 40);
        tgt[i] = (int)(rnd() % 40);
    }
    rng_state = save;
    for (int s = 0; s < steps; s++) {
        double ls, nt;
        gpt_zero_grad(&m);
        gpt_forward(&m, inp, tgt, NULL, &ls, &nt);
        gpt_backward(&m, 1.0f);
        float scale = global_norm_clip_scale((float)gpt_grad_norm(&m), 1.0f);
        gpt_update(&m, 1e-2f, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, scale);
        losses[s] = (float)(ls / nt);
    }
    if (params_out) {
        *params_out = malloc(m.num_params * sizeof(float));
        memcpy(*params_out, m.params_memory, m.num_params * sizeof(float));
        *np = m.num_params;
    }
    gpt_model_free(&m);
}

static void test_training_and_determinism(void)
{
    float l1[30], l2[30];
    float *p1 = NULL, *p2 = NULL;
    size_t n1 = 0, n2 = 0;
    train_fixed(l1, 30, &p1, &n1);
    train_fixed(l2, 30, &p2, &n2);
    if (getenv("MDS_TEST_VERBOSE"))
        fprintf(stderr, "  loss %.4f -> %.4f\n", l1[0], l1[29]);
    CHECK(fabsf(l1[0] - logf(40.0f)) < 0.3f);   /* near-uniform prediction at init */
    CHECK(l1[29] < 0.25f * l1[0]);
    CHECK(memcmp(l1, l2, sizeof l1) == 0);
    CHECK(n1 == n2 && p1 && p2 && memcmp(p1, p2, n1 * sizeof(float)) == 0);
    free(p1);
    free(p2);
}

/* One AdamW step of m on a fixed random batch (B = 2, T = 8, vocab 40). */
static double ckpt_step(gpt_model *m)
{
    int inp[16], tgt[16];
    for (int i = 0; i < 16; i++) {
        inp[i] = (int)((unsigned)(i * 7 + m->step * 3) % 40u);
        tgt[i] = (int)((unsigned)(i * 5 + 1 + m->step) % 40u);
    }
    double ls, nt;
    gpt_zero_grad(m);
    gpt_forward(m, inp, tgt, NULL, &ls, &nt);
    gpt_backward(m, 1.0f);
    gpt_update(m, 1e-2f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, global_norm_clip_scale((float)gpt_grad_norm(m), 1.0f));
    return ls / nt;
}

static void ckpt_model(gpt_model *m, int hidden)
{
    gpt_config c;
    char err[200];
    tiny_config(&c, 1);
    c.vocab_size = 40;
    c.hidden_size = hidden;
    c.max_position_embeddings = 8;
    CHECK(gpt_model_init(m, &c, 2, 8, err, sizeof err) == 0);
}

static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f) return;
    fseek(f, off, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(ch ^ 0x40, f);
    fclose(f);
}

static void test_checkpoint(void)
{
    char dir[] = "/tmp/mds-test-ckpt.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char err[4600], path[4300], rdir[4200];
    gpt_model a, b, c;
    ckpt_model(&a, 16);
    ckpt_model(&b, 16);
    for (int s = 0; s < 3; s++) ckpt_step(&a);
    ckpt_state st, got;
    memset(&st, 0, sizeof st);
    st.iteration = 3;
    st.consumed_train_samples = 6;
    st.consumed_valid_samples = 2;
    st.max_lr = 1e-2; st.min_lr = 1e-3; st.warmup_steps = 2; st.decay_steps = 20; st.num_steps = 6;
    st.decay_style = 2;
    st.ds_scheduler = 1; st.ds_last_batch_iteration = 8; st.ds_lr = 1.0034e-4; st.ds_lr_embed = 3e-4;
    uint64_t it = 0;
    CHECK(ckpt_read_latest(dir, &it, err, sizeof err) == CKPT_ERR_NOT_FOUND);
    CHECK(ckpt_save_rank(dir, &a, NULL, NULL, &st, err, sizeof err) == 0);
    CHECK(ckpt_write_latest(dir, 3, err, sizeof err) == 0);
    CHECK(ckpt_read_latest(dir, &it, err, sizeof err) == 0 && it == 3);
    CHECK(ckpt_rank_dir(rdir, sizeof rdir, dir, 3, &a.cfg) == 0);
    CHECK(strstr(rdir, "/iter_0000003/mp_rank_00") && !strstr(rdir, "mp_rank_00_"));
    snprintf(path, sizeof path, "%s/" CKPT_FILE_NAME, rdir);
    CHECK(access(path, R_OK) == 0);
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);   /* renamed, nothing left behind */
    gpt_config pc = a.cfg;
    pc.pp_size = 4; pc.pp_rank = 2; pc.tp_rank = 1;
    CHECK(ckpt_rank_dir(rdir, sizeof rdir, "d", 100, &pc) == 0 && strcmp(rdir, "d/iter_0000100/mp_rank_01_002") == 0);

    /* round trip, then both continue bitwise alike */
    CHECK(ckpt_load_rank(dir, 3, &b, NULL, NULL, &got, err, sizeof err) == 0);
    CHECK(got.iteration == 3 && got.consumed_train_samples == 6 && got.consumed_valid_samples == 2);
    CHECK(got.max_lr == 1e-2 && got.min_lr == 1e-3 && got.decay_steps == 20 && got.num_steps == 6 && got.decay_style == 2);
    CHECK(got.ds_scheduler == 1 && got.ds_last_batch_iteration == 8 && got.ds_lr == 1.0034e-4 && got.ds_lr_embed == 3e-4);
    CHECK(b.step == 3);
    size_t bytes = a.num_params * sizeof(float);
    CHECK(memcmp(a.params_memory, b.params_memory, bytes) == 0);
    CHECK(memcmp(a.opt_memory, b.opt_memory, 2 * bytes) == 0);
    for (int s = 0; s < 3; s++) {
        double la = ckpt_step(&a), lb = ckpt_step(&b);
        CHECK(memcmp(&la, &lb, sizeof la) == 0);
    }
    CHECK(memcmp(a.params_memory, b.params_memory, bytes) == 0);

    /* a different hidden size is refused by name */
    ckpt_model(&c, 8);
    CHECK(ckpt_load_rank(dir, 3, &c, NULL, NULL, &got, err, sizeof err) == CKPT_ERR_MISMATCH && strstr(err, "hidden_size"));
    gpt_model_free(&c);
    /* and so is another architecture of the same sizes */
    {
        gpt_config lc;
        tiny_config(&lc, 1);
        lc.vocab_size = 40;
        lc.hidden_size = 16;
        lc.max_position_embeddings = 8;
        lc.normalization = GPT_NORM_RMSNORM;
        gpt_model d;
        CHECK(gpt_model_init(&d, &lc, 2, 8, err, sizeof err) == 0);
        CHECK(ckpt_load_rank(dir, 3, &d, NULL, NULL, &got, err, sizeof err) == CKPT_ERR_MISMATCH &&
              strstr(err, "normalization is LayerNorm in the checkpoint but RMSNorm in this run"));
        gpt_model_free(&d);
        lc.normalization = GPT_NORM_LAYERNORM;
        lc.position_embedding = GPT_POS_ROPE;
        CHECK(gpt_model_init(&d, &lc, 2, 8, err, sizeof err) == 0);
        CHECK(ckpt_load_rank(dir, 3, &d, NULL, NULL, &got, err, sizeof err) == CKPT_ERR_MISMATCH &&
              strstr(err, "position_embedding_type is learned_absolute in the checkpoint but rope"));
        gpt_model_free(&d);
    }
    /* a flipped byte in the adam v section, then in the header */
    flip_byte(path, (long)(512 + 2 * bytes + 5));
    CHECK(ckpt_load_rank(dir, 3, &b, NULL, NULL, &got, err, sizeof err) == CKPT_ERR_CHECKSUM && strstr(err, "adam v checksum"));
    flip_byte(path, (long)(512 + 2 * bytes + 5));
    CHECK(ckpt_load_rank(dir, 3, &b, NULL, NULL, &got, err, sizeof err) == 0);
    flip_byte(path, 20);
    CHECK(ckpt_load_rank(dir, 3, &b, NULL, NULL, &got, err, sizeof err) == CKPT_ERR_CHECKSUM && strstr(err, "header"));
    flip_byte(path, 0);
    CHECK(ckpt_load_rank(dir, 3, &b, NULL, NULL, &got, err, sizeof err) == CKPT_ERR_FORMAT && strstr(err, "magic"));
    CHECK(ckpt_load_rank(dir, 4, &b, NULL, NULL, &got, err, sizeof err) == CKPT_ERR_IO);   /* no such iteration */
    /* a truncated file */
    CHECK(truncate(path, 600) == 0);
    flip_byte(path, 0);   /* magic back; header checksum still broken by the byte at 20 */
    flip_byte(path, 20);
    CHECK(ckpt_load_rank(dir, 3, &b, NULL, NULL, &got, err, sizeof err) == CKPT_ERR_FORMAT && strstr(err, "file size"));
    /* a latest file that is not a number */
    snprintf(tmp, sizeof tmp, "%s/" CKPT_LATEST_NAME, dir);
    FILE *f = fopen(tmp, "wb");
    if (f) { fputs("release", f); fclose(f); }
    CHECK(ckpt_read_latest(dir, &it, err, sizeof err) == CKPT_ERR_FORMAT);
    remove(tmp);
    remove(path);
    snprintf(tmp, sizeof tmp, "%s/iter_0000003/mp_rank_00", dir);
    rmdir(tmp);
    snprintf(tmp, sizeof tmp, "%s/iter_0000003", dir);
    rmdir(tmp);
    rmdir(dir);
    gpt_model_free(&a);
    gpt_model_free(&b);
}

/* Full activation recomputation (uniform and block, several chunkings):
 * with dropout on, in fp32, bf16 and fp16, GPT and the Llama block, two
 * micro-batches in flight in two slots (their recomputed chunks share one
 * working set), accumulation and an AdamW step: losses, gradients, weights
 * and stage outputs bitwise those of the model that keeps every activation,
 * and the activation allocation smaller whenever a layer's activations are
 * dropped. */
static int run_plan(gpt_model *m, const int *inp, const int *tgt, const float *mask, double *loss)
{
    static const uint64_t rows0[2] = { 7, 8 }, rows1[2] = { 9, 10 };
    double ls, nt;
    int ok = 1;
    gpt_zero_grad(m);
    gpt_set_slot(m, 0);
    gpt_set_dropout_rows(m, rows0);
    ok &= gpt_forward(m, inp, tgt, mask, &ls, &nt) == GPT_OK;
    loss[0] = ls;
    gpt_set_slot(m, 1);
    gpt_set_dropout_rows(m, rows1);
    ok &= gpt_forward(m, inp + 10, tgt + 10, mask + 10, &ls, &nt) == GPT_OK;
    loss[1] = ls;
    gpt_backward(m, 0.5f);   /* slot 1 first: slot 0's chunks are recomputed after slot 1 used the working set */
    gpt_set_slot(m, 0);
    gpt_backward(m, 0.5f);
    gpt_update(m, 1e-2f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    gpt_set_dropout_rows(m, rows1);
    ok &= gpt_forward(m, inp, tgt, mask, &ls, &nt) == GPT_OK;
    loss[2] = ls;
    return ok;
}

static void test_recompute(void)
{
    static const int plans[][2] = {
        { GPT_RECOMPUTE_UNIFORM, 1 }, { GPT_RECOMPUTE_UNIFORM, 2 }, { GPT_RECOMPUTE_UNIFORM, 3 },
        { GPT_RECOMPUTE_UNIFORM, 5 }, { GPT_RECOMPUTE_UNIFORM, 9 }, { GPT_RECOMPUTE_BLOCK, 1 },
        { GPT_RECOMPUTE_BLOCK, 2 }, { GPT_RECOMPUTE_BLOCK, 4 }, { GPT_RECOMPUTE_BLOCK, 5 }, { GPT_RECOMPUTE_BLOCK, 8 }};
    char err[200];
    int inp[20], tgt[20];
    float mask[20];
    make_batch(inp, tgt, mask, 20, 21, 1);
    for (int arch = 0; arch < 2; arch++)
        for (int dt = MDS_F32; dt <= MDS_F16; dt++)
            for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
                gpt_config c;
                if (arch) llama_config(&c, 1); else tiny_config(&c, 0);
                c.num_layers = 5;
                c.hidden_dropout = 0.2f;
                c.attention_dropout = 0.3f;
                c.act_slots = 2;
                c.dtype = dt;
                gpt_model r, m;
                CHECK(gpt_model_init(&r, &c, 2, 5, err, sizeof err) == 0);
                c.recompute_method = plans[k][0];
                c.recompute_num_layers = plans[k][1];
                CHECK(gpt_model_init(&m, &c, 2, 5, err, sizeof err) == 0);
                int N = plans[k][1], uniform = plans[k][0] == GPT_RECOMPUTE_UNIFORM;
                CHECK(m.rc_layers == (uniform ? 5 : N < 5 ? N : 5) && m.rc_chunk == (uniform ? (N < 5 ? N : 5) : 1));
                /* smaller even with one chunk of every layer: the two slots share its working set */
                CHECK(gpt_activation_bytes(&m) < gpt_activation_bytes(&r));
                double lr[3], lm[3];
                CHECK(run_plan(&r, inp, tgt, mask, lr) && run_plan(&m, inp, tgt, mask, lm));
                CHECK(memcmp(lr, lm, sizeof lr) == 0);
                CHECK(memcmp(r.grads_memory, m.grads_memory, r.num_params * sizeof(float)) == 0);
                CHECK(memcmp(r.master_memory, m.master_memory, r.num_params * sizeof(float)) == 0);
                CHECK(memcmp(gpt_stage_output(&r), gpt_stage_output(&m), 2 * 5 * 8 * sizeof(float)) == 0);
                gpt_model_free(&r);
                gpt_model_free(&m);
            }
    /* the configuration rules */
    gpt_config c;
    tiny_config(&c, 0);
    c.recompute_method = GPT_RECOMPUTE_UNIFORM;
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "recompute num layers"));
    c.recompute_method = 3;
    c.recompute_num_layers = 1;
    CHECK(gpt_config_check(&c, err, sizeof err) == GPT_ERR_ARG && strstr(err, "unknown recompute method"));
}

/* ---- tensor parallelism in one process: two threads as the TP ranks ------- */

/* A fake TP group of two ranks over shared memory: each collective publishes
 * the rank's buffer, meets the other rank at a barrier, and sums in rank
 * order as train/comm.c does (all-reduce and reduce-scatter alike). */
typedef struct fake_group {
    pthread_barrier_t bar;
    const float *buf[2];
} fake_group;

typedef struct fake_rank {
    fake_group *g;
    int rank;
    gpt_model m;
    gpt_config cfg;
    int ok;
    double loss[3], norm;
} fake_rank;

static void fake_reduce(void *ctx, float *buf, size_t n, int max)
{
    fake_rank *r = ctx;
    float *tmp = malloc(n * sizeof *tmp);
    r->g->buf[r->rank] = buf;
    pthread_barrier_wait(&r->g->bar);
    for (size_t i = 0; i < n; i++) {
        float a = r->g->buf[0][i], b = r->g->buf[1][i];
        tmp[i] = max ? (a > b ? a : b) : a + b;
    }
    pthread_barrier_wait(&r->g->bar);
    memcpy(buf, tmp, n * sizeof *tmp);
    free(tmp);
}
static void fake_sum(void *ctx, float *buf, size_t n) { fake_reduce(ctx, buf, n, 0); }
static void fake_max(void *ctx, float *buf, size_t n) { fake_reduce(ctx, buf, n, 1); }
static void fake_reduce_scatter(void *ctx, float *out, const float *in, size_t chunk)
{
    fake_rank *r = ctx;
    r->g->buf[r->rank] = in;
    pthread_barrier_wait(&r->g->bar);
    for (size_t i = 0; i < chunk; i++)
        out[i] = r->g->buf[0][(size_t)r->rank * chunk + i] + r->g->buf[1][(size_t)r->rank * chunk + i];
    pthread_barrier_wait(&r->g->bar);
}
static void fake_allgather(void *ctx, float *out, const float *in, size_t chunk)
{
    fake_rank *r = ctx;
    r->g->buf[r->rank] = in;
    pthread_barrier_wait(&r->g->bar);
    for (int k = 0; k < 2; k++)
        memcpy(out + (size_t)k * chunk, r->g->buf[k], chunk * sizeof *out);
    pthread_barrier_wait(&r->g->bar);
}

/* Micro-batches of B = 2, T = 4 in two slots with dropout, accumulation,
 * an update and a forward after it. */
static int sp_inp[16], sp_tgt[16];
static float sp_mask[16];

static void *tp_rank_main(void *arg)
{
    fake_rank *r = arg;
    static const uint64_t rows0[2] = { 7, 8 }, rows1[2] = { 9, 10 };
    gpt_tp_ops ops = { r, fake_sum, fake_max, fake_reduce_scatter, fake_allgather };
    char err[200];
    r->ok = gpt_model_init(&r->m, &r->cfg, 2, 4, err, sizeof err) == 0;
    if (!r->ok) return NULL;   /* both ranks fail alike: the configuration is the same */
    r->m.tp = &ops;
    double ls, nt;
    gpt_zero_grad(&r->m);
    gpt_set_slot(&r->m, 0);
    gpt_set_dropout_rows(&r->m, rows0);
    r->ok &= gpt_forward(&r->m, sp_inp, sp_tgt, sp_mask, &ls, &nt) == GPT_OK;
    r->loss[0] = ls;
    gpt_set_slot(&r->m, 1);
    gpt_set_dropout_rows(&r->m, rows1);
    r->ok &= gpt_forward(&r->m, sp_inp + 8, sp_tgt + 8, sp_mask + 8, &ls, &nt) == GPT_OK;
    r->loss[1] = ls;
    gpt_backward(&r->m, 0.5f);
    gpt_set_slot(&r->m, 0);
    gpt_backward(&r->m, 0.5f);
    r->norm = gpt_grad_norm(&r->m);
    gpt_update(&r->m, 1e-2f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    gpt_set_dropout_rows(&r->m, rows1);
    r->ok &= gpt_forward(&r->m, sp_inp, sp_tgt, sp_mask, &ls, &nt) == GPT_OK;
    r->loss[2] = ls;
    r->m.tp = NULL;
    return NULL;
}

/* Run c as TP rank 0 and 1 on two threads. */
static int run_tp2(fake_rank rk[2], const gpt_config *c)
{
    fake_group g;
    pthread_barrier_init(&g.bar, NULL, 2);
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        memset(&rk[k], 0, sizeof rk[k]);
        rk[k].g = &g;
        rk[k].rank = k;
        rk[k].cfg = *c;
        rk[k].cfg.tp_size = 2;
        rk[k].cfg.tp_rank = k;
        pthread_create(&th[k], NULL, tp_rank_main, &rk[k]);
    }
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    pthread_barrier_destroy(&g.bar);
    return rk[0].ok && rk[1].ok;
}

/* Sequence parallelism: every tensor, loss and gradient bitwise the TP run
 * without it (GPT and Llama, fp32 and bf16, with and without recomputation),
 * with less activation memory; the stage output is the rank's slice. */
static void test_sequence_parallel(void)
{
    make_batch(sp_inp, sp_tgt, sp_mask, 16, 21, 1);
    for (int arch = 0; arch < 3; arch++)   /* GPT, Llama, GPT with the embedding LayerNorm */
        for (int dt = MDS_F32; dt <= MDS_BF16; dt++)
            for (int rc = 0; rc < 3; rc++) {
                gpt_config c;
                if (arch == 1) { llama_config(&c, 1); c.num_query_groups = 2; } else tiny_config(&c, 0);
                c.embed_layernorm = arch == 2;
                c.num_layers = 3;
                c.hidden_dropout = 0.2f;
                c.attention_dropout = 0.3f;
                c.act_slots = 2;
                c.dtype = dt;
                c.recompute_method = rc;
                c.recompute_num_layers = rc ? 2 : 0;
                fake_rank ref[2], sp[2];
                CHECK(run_tp2(ref, &c));
                c.sequence_parallel = 1;
                CHECK(run_tp2(sp, &c));
                for (int k = 0; k < 2; k++) {
                    CHECK(ref[k].m.sp == 0 && sp[k].m.sp == 1 && sp[k].m.Ts == 2 && sp[k].m.t0 == 2 * k);
                    CHECK(memcmp(ref[k].loss, sp[k].loss, sizeof ref[k].loss) == 0);
                    CHECK(ref[k].norm == sp[k].norm);
                    CHECK(memcmp(ref[k].m.grads_memory, sp[k].m.grads_memory, ref[k].m.num_params * sizeof(float)) == 0);
                    CHECK(memcmp(ref[k].m.master_memory, sp[k].m.master_memory,
                                 ref[k].m.num_params * sizeof(float)) == 0);
                    CHECK(gpt_activation_bytes(&sp[k].m) < gpt_activation_bytes(&ref[k].m));
                    /* the stage output: rows [2k, 2k + 2) of each sequence */
                    CHECK(gpt_stage_elems(&sp[k].m) == 2 * 2 * 8 && gpt_stage_elems(&ref[k].m) == 2 * 4 * 8);
                    for (int b = 0; b < 2; b++)
                        CHECK(memcmp(gpt_stage_output(&sp[k].m) + b * 2 * 8,
                                     gpt_stage_output(&ref[k].m) + (b * 4 + 2 * k) * 8, 2 * 8 * sizeof(float)) == 0);
                    gpt_model_free(&ref[k].m);
                    gpt_model_free(&sp[k].m);
                }
            }
    /* T must split evenly; with one TP rank the flag changes nothing */
    gpt_config c;
    gpt_model m;
    char err[200];
    tiny_config(&c, 0);
    c.sequence_parallel = 1;
    CHECK(gpt_model_init(&m, &c, 2, 3, err, sizeof err) == 0 && m.sp == 0 && m.Ts == 3);
    gpt_model_free(&m);
    c.tp_size = 2;
    CHECK(gpt_model_init(&m, &c, 2, 3, err, sizeof err) == GPT_ERR_ARG && strstr(err, "not divisible"));
}

int main(int argc, char **argv)
{
    uint64_t seed = 20240601;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "-s") == 0) seed = strtoull(argv[++i], NULL, 10);
    printf("test_model: seed = %llu\n", (unsigned long long)seed);
    rng_state = seed;
    RUN(test_config);
    RUN(test_init);
    RUN(test_gradcheck_tied);
    RUN(test_gradcheck_untied_masked);
    RUN(test_gradcheck_llama);
    RUN(test_gradcheck_embed_layernorm);
    RUN(test_embed_layernorm_params);
    RUN(test_llama_config_and_shards);
    RUN(test_gradcheck_dropout);
    RUN(test_mixed_precision);
    RUN(test_bf16_main_grads);
    RUN(test_decoupled_lr);
    RUN(test_accumulation);
    RUN(test_training_and_determinism);
    RUN(test_checkpoint);
    RUN(test_recompute);
    RUN(test_sequence_parallel);
    return harness_report();
}
