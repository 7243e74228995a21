/*
 * test_schedule.c - the batch ramp-up and the token schedules of
 * train/trainer.h against their formulas, with values worked out by hand
 * from Megatron's RampupBatchsizeNumMicroBatchesCalculator and
 * update_train_iters (megatron/core/num_microbatches_calculator.py and
 * megatron/training/training.py at 0b9bc2088b6d) and Megatron-DeepSpeed's
 * OptimizerParamScheduler.get_lr (microsoft/Megatron-DeepSpeed at
 * f4157bea69f3, megatron/optimizer_param_scheduler.py); DeepSpeed's
 * WarmupLR and WarmupDecayLR against tests/data/dssched/warmup_lr.txt, the
 * output of the Python re-statement deepspeed_lr.py beside it, bit for bit.
 */
#include "harness.h"
#include "trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * (fabs(b) > 1 ? fabs(b) : 1); }

/* train_gpt3_175b_distributed.sh's ramp: 16 16 5859375 to 1536, i.e. 95
 * increments of 5859375 / 95 = 61677.63... samples each. */
static void rampup_gpt3_175b(void)
{
    train_rampup r;
    char err[256];
    CHECK(train_rampup_init(&r, 16, 16, 5859375, 1536, err, sizeof err) == 0);
    CHECK(train_rampup_batch(&r, 0) == 16);
    CHECK(train_rampup_batch(&r, 61677) == 16);        /* 61677 / 61677.63 < 1 */
    CHECK(train_rampup_batch(&r, 61678) == 32);
    CHECK(train_rampup_batch(&r, 123355) == 32);       /* 123355 / 61677.63 = 1.999996 */
    CHECK(train_rampup_batch(&r, 123356) == 48);
    CHECK(train_rampup_batch(&r, 5859375) == 1536);     /* int(95.0) increments, consumed == samples */
    CHECK(train_rampup_batch(&r, 5859376) == 1536);
}

/* start 2, incr 2 over 10 samples to G = 8: 3 increments of 3.33 samples.
 * Consumed 0 -> 2 (batch 2), 2 -> 4 (2), 4 -> 8 (int(1.2) = 1: 4),
 * 8 -> 14 (int(2.4) = 2: 6), then 14 > 10: 8 from there on. */
static void rampup_small(void)
{
    train_rampup r;
    char err[256];
    CHECK(train_rampup_init(&r, 2, 2, 10, 8, err, sizeof err) == 0);
    static const uint64_t want[] = {2, 2, 4, 6, 8, 8};
    uint64_t consumed = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK(train_rampup_batch(&r, consumed) == want[i]);
        consumed += want[i];
    }
    /* update_train_iters: 4 ramp iterations reach 14, then (40 - 14) // 8 = 3 */
    CHECK(train_rampup_train_iters(&r, 40) == 7);
    /* 22 samples: (22 - 14) // 8 = 1 more */
    CHECK(train_rampup_train_iters(&r, 22) == 5);
    uint64_t before, after;
    train_rampup_consumed(&r, 3, &before, &after);
    CHECK(before == 4 && after == 8);
    train_rampup_consumed(&r, 6, &before, &after);
    CHECK(before == 22 && after == 30);
    train_rampup_consumed(&r, 0, &before, &after);
    CHECK(before == 0 && after == 0);
}

/* Megatron's loop runs while consumed <= ramp samples and consumed <=
 * train samples, adding each batch: it may pass train_samples. Start 4,
 * incr 4 over 100 samples to 8: 0 -> 4 -> 8 -> 12 (> 10): 3 iterations. */
static void rampup_overshoot(void)
{
    train_rampup r;
    char err[256];
    CHECK(train_rampup_init(&r, 4, 4, 100, 8, err, sizeof err) == 0);
    CHECK(train_rampup_train_iters(&r, 10) == 3);
}

static void rampup_constant_and_refusals(void)
{
    train_rampup r;
    char err[256];
    CHECK(train_rampup_init(&r, 0, 0, 0, 8, err, sizeof err) == 0);   /* no ramp */
    CHECK(train_rampup_batch(&r, 12345) == 8);
    CHECK(train_rampup_train_iters(&r, 41) == 5);
    uint64_t before, after;
    train_rampup_consumed(&r, 5, &before, &after);
    CHECK(before == 32 && after == 40);
    CHECK(train_rampup_init(&r, 3, 2, 10, 8, err, sizeof err) != 0);   /* 5 not divisible by 2 */
    CHECK(strstr(err, "divisible") != NULL);
    CHECK(train_rampup_init(&r, 16, 2, 10, 8, err, sizeof err) != 0);  /* start above G */
    CHECK(train_rampup_init(&r, 8, 2, 10, 8, err, sizeof err) != 0);   /* no increments */
    CHECK(train_rampup_init(&r, 2, 2, 0, 8, err, sizeof err) != 0);    /* 0 samples */
    CHECK(train_rampup_init(&r, 2, 0, 10, 8, err, sizeof err) != 0);   /* increment 0 */
}

/* lr 1e-3 to 0 in style over iters iterations of G samples, no warmup */
static train_schedule_args iteration_args(int style, uint64_t G, uint64_t iters)
{
    train_schedule_args a;
    memset(&a, 0, sizeof a);
    a.lr = 1e-3;
    a.decay_style = style;
    a.global_batch_size = G;
    a.train_iters = iters;
    return a;
}

static train_schedule token_schedule(int style, int warmup_tokens, int decay_tokens, uint64_t warmup_iters)
{
    train_schedule_args a;
    memset(&a, 0, sizeof a);
    a.lr = 6e-4;
    a.min_lr = 1e-6;
    a.decay_style = style;
    a.global_batch_size = 2;
    a.train_iters = 1000;
    a.lr_warmup_iters = warmup_iters;
    if (warmup_tokens >= 0) a.have_warmup_tokens = 1, a.lr_warmup_tokens = (uint64_t)warmup_tokens;
    if (decay_tokens >= 0) a.have_decay_tokens = 1, a.lr_decay_tokens = (uint64_t)decay_tokens;
    train_schedule s;
    char err[256];
    CHECK(train_schedule_init(&s, &a, err, sizeof err) == 0);
    return s;
}

/* ds_pretrain_gpt_125M_flashattn.sh's schedule (token warmup and cosine
 * token decay), scaled: warmup 3000 tokens, decay 30000 tokens. */
static void token_warmup_and_decay(void)
{
    train_schedule s = token_schedule(TRAIN_DECAY_COSINE, 3000, 30000, 0);
    CHECK(near(train_schedule_lr_tokens(&s, 0, 0), 0));
    CHECK(near(train_schedule_lr_tokens(&s, 10, 1500), 3e-4));       /* 6e-4 * 1500 / 3000 */
    CHECK(near(train_schedule_lr_tokens(&s, 10, 3000), 6e-4));       /* the end of the warmup */
    /* halfway through the decay: min + (max - min) (cos(pi / 2) + 1) / 2 */
    CHECK(near(train_schedule_lr_tokens(&s, 10, 16500), 1e-6 + (6e-4 - 1e-6) * 0.5));
    CHECK(near(train_schedule_lr_tokens(&s, 10, 30000), 1e-6));
    CHECK(near(train_schedule_lr_tokens(&s, 10, 30001), 1e-6));
    /* the steps do not matter once both are in tokens */
    CHECK(near(train_schedule_lr_tokens(&s, 999, 1500), 3e-4));
    /* linear: ratio (9750 - 3000) / 27000 = 0.25 */
    train_schedule l = token_schedule(TRAIN_DECAY_LINEAR, 3000, 30000, 0);
    CHECK(near(train_schedule_lr_tokens(&l, 0, 9750), 1e-6 + (6e-4 - 1e-6) * 0.75));
}

/* A step warmup of 4 iterations (8 samples) with a token decay: the warmup
 * ends at the step whose sample count is 8, when the scheduler has seen the
 * tokens before that iteration, 6 samples x 16 = 96; the decay then runs
 * from 96 to 1096 tokens. */
static void step_warmup_token_decay(void)
{
    train_schedule s = token_schedule(TRAIN_DECAY_LINEAR, -1, 1096, 4);
    train_rampup r;
    char err[256];
    CHECK(train_rampup_init(&r, 0, 0, 0, 2, err, sizeof err) == 0);
    CHECK(train_rampup_warmup_tokens(&r, s.warmup_steps, 16, &s.latch_tokens) == 0);
    CHECK(s.latch_tokens == 96);
    CHECK(near(train_schedule_lr_tokens(&s, 4, 48), 3e-4));          /* step warmup: 6e-4 * 4 / 8 */
    CHECK(near(train_schedule_lr_tokens(&s, 8, 96), 6e-4));          /* the warmup's last step */
    CHECK(near(train_schedule_lr_tokens(&s, 10, 128), 1e-6 + (6e-4 - 1e-6) * (1 - 32.0 / 1000)));
    CHECK(near(train_schedule_lr_tokens(&s, 10, 2000), 1e-6));
    /* a warmup that ends inside an iteration has no token start (Megatron-DeepSpeed: TypeError) */
    CHECK(train_rampup_warmup_tokens(&r, 7, 16, &s.latch_tokens) != 0);
    /* a token decay with no warmup at all: refused, as Megatron-DeepSpeed fails */
    train_schedule_args a = iteration_args(TRAIN_DECAY_LINEAR, 2, 10);
    a.have_decay_tokens = 1;
    a.lr_decay_tokens = 100;
    train_schedule t;
    CHECK(train_schedule_init(&t, &a, err, sizeof err) != 0);
    a.have_warmup_tokens = 1;   /* --lr-warmup-tokens 0: none, and the decay starts at 0 */
    CHECK(train_schedule_init(&t, &a, err, sizeof err) == 0);
    CHECK(near(train_schedule_lr_tokens(&t, 0, 25), 1e-3 * 0.75));
    a.lr_warmup_tokens = 100;   /* not below the decay */
    CHECK(train_schedule_init(&t, &a, err, sizeof err) != 0);
}

/* Without token settings the token schedule is Megatron's sample one. */
static void tokens_absent_is_samples(void)
{
    train_schedule s = token_schedule(TRAIN_DECAY_COSINE, -1, -1, 10);
    for (double n = 0; n < 2100; n += 7)
        CHECK(train_schedule_lr_tokens(&s, n, 12345) == train_schedule_lr(&s, n));
}

/* Every row of the golden table: the same double as Python's. */
static void deepspeed_warmup_golden(void)
{
    FILE *f = fopen("tests/data/dssched/warmup_lr.txt", "r");
    CHECK(f != NULL);
    if (!f) return;
    char line[512], type[32], kind[16], lo[40], hi[40], w[40], tot[40], want[40];
    long n;
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        if (sscanf(line, "%31s %15s %39s %39s %39s %39s %ld %39s", type, kind, lo, hi, w, tot, &n, want) != 8) {
            CHECK(!"a row of 8 fields");
            continue;
        }
        train_ds_schedule s = {0};
        s.type = strcmp(type, "WarmupDecayLR") == 0 ? TRAIN_DS_WARMUP_DECAY_LR : TRAIN_DS_WARMUP_LR;
        s.linear = strcmp(kind, "linear") == 0;
        s.min_lr = strtod(lo, NULL);
        s.max_lr = strtod(hi, NULL);
        s.warmup_num_steps = fmax(2, strtod(w, NULL));   /* as dsconfig.c stores it */
        s.total_num_steps = strtod(tot, NULL);
        double got = train_ds_schedule_lr(&s, (double)n), exp = strtod(want, NULL);
        if (got != exp) fprintf(stderr, "  %s got %.17g\n", strtok(line, "\n"), got);
        CHECK(got == exp);
        rows++;
    }
    fclose(f);
    CHECK(rows == 66);
}

/* Megatron's get_lr, every style, against tests/data/lrsched/golden.txt
 * (Megatron-LM's own optimizer_param_scheduler.py at d98e8a64 printed it:
 * make_golden.py), bit for bit; and init's refusals for the new styles. */
static void megatron_lr_golden(void)
{
    FILE *f = fopen("tests/data/lrsched/golden.txt", "r");
    CHECK(f != NULL);
    if (!f) return;
    char line[256];
    train_schedule s;
    int cases = 0, points = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        char style[32], wsd[32];
        double mx, mn, init, warm, decay, wsd_steps;
        if (sscanf(line, "case %*d %31s %31s %lf %lf %lf %lf %lf %lf", style, wsd, &mx, &mn, &init, &warm, &decay,
                   &wsd_steps) == 8) {
            memset(&s, 0, sizeof s);
            s.style = -1;
            for (int k = 0; train_decay_names[k]; k++)
                if (!strcmp(style, train_decay_names[k])) s.style = k;
            s.wsd_style = TRAIN_WSD_EXPONENTIAL;
            for (int k = 0; train_wsd_names[k]; k++)
                if (!strcmp(wsd, train_wsd_names[k])) s.wsd_style = k;
            CHECK(s.style >= 0);
            s.max_lr = mx, s.min_lr = mn, s.init_lr = init, s.warmup_steps = warm, s.decay_steps = decay;
            s.wsd_decay_steps = wsd_steps;
            s.warmup_tokens = s.decay_tokens = s.latch_tokens = -1;
            cases++;
            continue;
        }
        double n, want;
        if (sscanf(line, "%lf %lf", &n, &want) != 2) continue;
        double got = train_schedule_lr(&s, n);
        if (got != want) {
            fprintf(stderr, "  %s at %g: %.17g, Megatron %.17g\n", train_decay_names[s.style], n, got, want);
            bad++;
        }
        CHECK(train_schedule_lr_tokens(&s, n, 12345.0) == got);   /* (no tokens: the same) */
        points++;
    }
    fclose(f);
    CHECK(cases == 11 && points == 104 && bad == 0);
    /* WSD needs its annealing length in the training's unit; not with tokens */
    train_schedule_args a = iteration_args(TRAIN_DECAY_WSD, 4, 100);
    char err[256];
    CHECK(train_schedule_init(&s, &a, err, sizeof err) != 0 && strstr(err, "--lr-wsd-decay-iters"));
    a.have_wsd_samples = 1, a.lr_wsd_decay_samples = 40;   /* (samples are read with --train-samples only) */
    CHECK(train_schedule_init(&s, &a, err, sizeof err) != 0);
    a.have_wsd_iters = 1, a.lr_wsd_decay_iters = 10, a.wsd_style = TRAIN_WSD_COSINE;
    CHECK(train_schedule_init(&s, &a, err, sizeof err) == 0 && s.wsd_decay_steps == 40 && s.wsd_style == TRAIN_WSD_COSINE);
    a.wsd_style = -1;
    CHECK(train_schedule_init(&s, &a, err, sizeof err) == 0 && s.wsd_style == TRAIN_WSD_EXPONENTIAL);
    a.have_decay_tokens = 1, a.lr_decay_tokens = 1000, a.have_warmup_tokens = 1;
    CHECK(train_schedule_init(&s, &a, err, sizeof err) != 0 && strstr(err, "token schedule"));
}

int main(void)
{
    RUN(rampup_gpt3_175b);
    RUN(rampup_small);
    RUN(rampup_overshoot);
    RUN(rampup_constant_and_refusals);
    RUN(token_warmup_and_decay);
    RUN(step_warmup_token_decay);
    RUN(tokens_absent_is_samples);
    RUN(deepspeed_warmup_golden);
    RUN(megatron_lr_golden);
    return harness_report();
}
