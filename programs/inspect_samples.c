/*
 * inspect_samples.c - `mdsinspect samples`: Megatron-Core's GPT training-sample
 * plan (GPTDataset / BlendedDataset indices) for Megatron's flags, one sample
 * with its masks, and the .npy index cache.
 */
#include "inspect.h"

#include <stdlib.h>
#include <string.h>

static const struct cli_option samples_opts[] = {
    {"seq-length", 0, CLI_ARG_ONE, O_SEQ_LENGTH, "L", "sequence length (required)"},
    {"seed", 0, CLI_ARG_ONE, O_SEED, "N", "random seed (default 1234)"},
    {"train-samples", 0, CLI_ARG_ONE, O_TRAIN_SAMPLES, "N", "training samples"},
    {"train-iters", 0, CLI_ARG_ONE, O_TRAIN_ITERS, "N", "training iterations (x --global-batch-size)"},
    {"global-batch-size", 0, CLI_ARG_ONE, O_GBS, "N", "global batch size (default 1)"},
    {"eval-iters", 0, CLI_ARG_ONE, O_EVAL_ITERS, "N", "evaluation iterations (default 100)"},
    {"eval-interval", 0, CLI_ARG_ONE, O_EVAL_INTERVAL, "N", "iterations between evaluations (default 1000)"},
    {"skip-train", 0, CLI_ARG_NONE, O_SKIP_TRAIN, NULL, "valid samples = eval-iters x batch (Megatron's --skip-train)"},
    {"valid-samples", 0, CLI_ARG_ONE, O_VALID_SAMPLES, "N", "override the computed validation sample count"},
    {"test-samples", 0, CLI_ARG_ONE, O_TEST_SAMPLES, "N", "override the computed test sample count"},
    {"vocab-size", 0, CLI_ARG_ONE, O_VOCAB_SIZE, "N", "mock tokens are (k+1) % N (default 50257, GPT-2's)"},
    {"show", 0, CLI_ARG_ONE, O_SHOW, "K", "print sample K (its seq-length+1 token window)"},
    {"show-masks", 0, CLI_ARG_NONE, O_SHOW_MASKS, NULL, "--show prints tokens, labels, loss mask, position ids and attention starts"},
    {"eod", 0, CLI_ARG_ONE, O_EOD, "ID", "end-of-document id for the masks and mock data (default: the EOD of --tokenizer-type, else 50256)"},
    {"eod-mask-loss", 0, CLI_ARG_NONE, O_EOD_MASK_LOSS, NULL, "loss mask 0 on input EODs (Megatron's --eod-mask-loss)"},
    {"reset-position-ids", 0, CLI_ARG_NONE, O_RESET_POSITION_IDS, NULL, "position ids restart after each EOD"},
    {"reset-attention-mask", 0, CLI_ARG_NONE, O_RESET_ATTENTION_MASK, NULL, "no attention across an EOD"},
    {"show-split", 0, CLI_ARG_ONE, O_SHOW_SPLIT, "train|valid|test", "split of --show (default train)"},
    {"ids", 0, CLI_ARG_NONE, O_IDS, NULL, "--show prints token ids (the default)"},
    {"text", 't', CLI_ARG_NONE, O_TEXT, NULL, "--show prints GPT-2 text"},
    {"cache", 0, CLI_ARG_ONE, O_CACHE, "DIR", "same as --data-cache-path"},
    {"megatron-version", 0, CLI_ARG_ONE, O_MEGATRON_VERSION, "main|0.8", "index flavour: main (default) or core 0.8-0.10 (int64 sample index, old blend sizes)"},
    {"tokenizer-identifiers", 0, CLI_ARG_ONE, O_TOKENIZER_IDS, "legacy|main", "tokenizer block of the cache descriptions (default legacy _GPT2BPETokenizer)"},
    {"quiet", 'q', CLI_ARG_NONE, O_QUIET, NULL, "with --show, print only the sample"},
    OPT_VOCAB,
    OPT_HELP,
};

static const char *const split_label[3] = {"train", "valid", "test"};

static void print_ids(const char *name, const int64_t *v, uint64_t n)
{
    fputs(name, stdout);
    for (uint64_t k = 0; k < n; k++)
        printf(" %lld", (sll)v[k]);
    putchar('\n');
}

/* GPTDataset.__getitem__'s outputs for sample k, one line each: tokens,
   labels, loss_mask, position_ids, and for the (L, L) attention mask the
   first column each row may see (row r sees [start, r]). */
static void print_masks(const ds_pipeline *p, int split, uint64_t k, uint64_t L)
{
    int64_t *tokens = mallocCheck(L * sizeof *tokens), *labels = mallocCheck(L * sizeof *labels);
    int64_t *pos = mallocCheck(L * sizeof *pos), *start = mallocCheck(L * sizeof *start);
    float *loss = mallocCheck(L * sizeof *loss);
    uint8_t *att = mallocCheck(L * L);
    int rc = ds_pipeline_sample(p, split, k, tokens, labels, loss, pos, att);
    if (rc != 0)
        cli_die(1, "cannot read sample %llu: %s", (ull)k, ds_strerror(rc));
    print_ids("tokens:", tokens, L);
    print_ids("labels:", labels, L);
    fputs("loss_mask:", stdout);
    for (uint64_t i = 0; i < L; i++)
        printf(" %g", (double)loss[i]);
    putchar('\n');
    print_ids("position_ids:", pos, L);
    for (uint64_t r = 0; r < L; r++) {
        uint64_t c = 0;
        while (c < r && att[r * L + c])
            c++;
        start[r] = (int64_t)c;
    }
    print_ids("attention_start:", start, L);
    free(tokens);
    free(labels);
    free(pos);
    free(start);
    free(loss);
    free(att);
}

static int run_samples(struct args *a)
{
    const struct data_flags *df = &a->data;
    int per_split = data_flags_per_split(df);
    data_flags_check(df, 0);
    if (!a->seq_length)
        cli_usage("'samples' needs --seq-length");
    if (!a->train_samples && !a->train_iters)
        cli_usage("'samples' needs --train-samples or --train-iters");
    int show_split = DS_SPLIT_TRAIN;
    if (a->show_split) {
        for (show_split = 0; show_split < 3 && strcmp(a->show_split, split_label[show_split]); show_split++)
            ;
        if (show_split == 3)
            cli_usage("option '--show-split' needs train, valid or test, got '%s'", a->show_split);
    }
    int64_t counts[3];
    if (ds_sample_counts(counts, a->train_samples, a->train_iters, a->gbs, a->eval_iters,
                         a->eval_interval, a->skip_train) != 0)
        cli_usage("cannot compute the sample counts from these flags");
    if (a->have_valid)
        counts[1] = (int64_t)a->valid_samples;
    if (a->have_test)
        counts[2] = (int64_t)a->test_samples;

    char *vocab, *merges;
    cli_gpt2_files(a->vocab_file, a->merge_file, 0, &vocab, &merges);
    ds_gpt_config c;
    ds_gpt_config_init(&c);
    data_flags_apply(df, &c);
    c.seq_length = a->seq_length;
    c.seed = (uint32_t)a->seed;
    memcpy(c.num_samples, counts, sizeof counts);
    c.megatron_version = a->megatron_version;
    c.tokenizer_ids = a->tokenizer_ids;
    if (a->vocab_size)
        c.vocab_size = (int64_t)a->vocab_size;
    c.eod = (int64_t)a->eod;
    c.eod_mask_loss = a->eod_mask_loss;
    c.reset_position_ids = a->reset_position_ids;
    c.reset_attention_mask = a->reset_attention_mask;
    c.vocab_file = vocab ? vocab : "gpt2-vocab.json";
    c.merge_file = merges ? merges : "gpt2-merges.txt";
    if (a->tokenizer_type && a->tokenizer_type != TOK_GPT2BPE) {
        /* another tokenizer: its Megatron identifiers, EOD and (mock) vocabulary size */
        tok *tk = inspect_vocab(a, 1);
        c.tokenizer_class = tok_type_class(a->tokenizer_type);
        c.tokenizer_model = a->tokenizer_model;
        if (!a->eod_given) c.eod = tok_eod(tk);
        if (!a->vocab_size) c.vocab_size = (int64_t)tok_vocab_size(tk);
        tok_free(tk);
    }
    double t0 = cli_now();
    ds_pipeline *p = NULL;
    int rc = ds_pipeline_open(&c, &p);
    double secs = cli_now() - t0;
    free(vocab);
    free(merges);
    if (rc != 0) {
        cli_error("%s", ds_pipeline_error(p));
        ds_pipeline_close(p);
        return 1;
    }
    size_t nd = ds_pipeline_num_datasets(p);
    if (!(a->have_show && a->quiet)) {
        printf("datasets: %zu%s, seq_length %llu, seed %llu, split \"%s\", megatron %s\n", nd,
               ds_pipeline_is_mock(p) ? " (mock)" : ds_pipeline_is_blend(p) ? " (blended)" : "",
               (ull)a->seq_length, (ull)a->seed, df->mock ? "1,1,1" : per_split ? "none, a blend per split" : c.split,
               a->megatron_version == DS_MEGATRON_0_8 ? "0.8" : "main");
        for (size_t d = 0; d < nd; d++) {
            const char *path = "?";
            ds_gpt_info g;
            for (int s = 0; s < 3; s++)
                if (ds_pipeline_dataset(p, s, d, &g) == 0) {
                    path = g.path;
                    break;
                }
            int ds = ds_pipeline_dataset_split(p, d);
            printf("  [%zu] weight %.17g  %s  (%llu sequences)%s%s\n", d, ds_pipeline_weight(p, d), path,
                   (ull)ds_pipeline_num_sequences(p, d), ds >= 0 ? "  " : "", ds >= 0 ? split_label[ds] : "");
        }
        for (int s = 0; s < 3; s++) {
            if (!ds_pipeline_has_split(p, s)) {
                printf("%s: none (%s)\n", split_label[s], per_split ? "no data path" : "zero split weight");
                continue;
            }
            printf("%s: %lld samples asked, length %llu\n", split_label[s], (sll)counts[s],
                   (ull)ds_pipeline_length(p, s));
            for (size_t d = 0; d < nd; d++) {
                ds_gpt_info g;
                if (ds_pipeline_dataset(p, s, d, &g) != 0)
                    continue;
                char ns[32];
                if (g.num_samples == DS_NUM_SAMPLES_NONE)
                    snprintf(ns, sizeof ns, "None");
                else
                    snprintf(ns, sizeof ns, "%lld", (sll)g.num_samples);
                printf("  [%zu] sequences [%llu, %llu)  tokens/epoch %llu  num_samples %s  epochs %llu%s  length %llu  %s %s\n",
                       d, (ull)g.seq_begin, (ull)g.seq_end, (ull)g.tokens_per_epoch, ns, (ull)g.num_epochs,
                       g.separate_final_epoch ? " (separate final epoch)" : "", (ull)g.length, g.md5,
                       g.from_cache ? "cached" : df->cache ? "built+cached" : "built");
            }
            const char *md5;
            if (ds_pipeline_blend(p, s, NULL, NULL, NULL, &md5) == 0)
                printf("  blend %s\n", md5);
        }
        fprintf(stderr, "%s: indices ready in %.3f s\n", cli.name, secs);
    }
    if (a->have_show) {
        uint64_t L = ds_pipeline_seq_length(p), n = L + ds_pipeline_extra_token(p);
        if (!ds_pipeline_has_split(p, show_split) || a->show >= ds_pipeline_length(p, show_split)) {
            cli_error("sample %llu is out of range: the %s split has %llu samples", (ull)a->show,
                       split_label[show_split], (ull)ds_pipeline_length(p, show_split));
            ds_pipeline_close(p);
            return 1;
        }
        int64_t *text = mallocCheck(n * sizeof *text);
        ds_sample_origin o;
        rc = ds_pipeline_text(p, show_split, a->show, text, &o);
        if (rc != 0) {
            cli_error("cannot read sample %llu: %s", (ull)a->show, ds_strerror(rc));
            free(text);
            ds_pipeline_close(p);
            return 1;
        }
        if (!a->quiet)
            printf("sample %llu of %s: dataset %zu sample %llu, shuffle %llu, document index [%llu, %llu], "
                   "sequence %llu from token %llu\n", (ull)a->show, split_label[show_split], o.dataset,
                   (ull)o.dataset_sample, (ull)o.shuffle_value, (ull)o.doc_first, (ull)o.doc_last,
                   (ull)o.seq_first, (ull)o.offset);
        if (a->show_masks) {
            print_masks(p, show_split, a->show, L);
        } else if (a->text) {
            tok *tk = inspect_vocab(a, 1);
            char *out = NULL, what[64];
            size_t cap = 0;
            snprintf(what, sizeof what, "sample %llu", (ull)a->show);
            size_t m = inspect_decode(tk, text, (size_t)n, &out, &cap, what);
            fwrite(out, 1, m, stdout);
            putchar('\n');
            free(out);
            tok_free(tk);
        } else {
            for (uint64_t k = 0; k < n; k++)
                printf(k ? " %lld" : "%lld", (sll)text[k]);
            putchar('\n');
        }
        free(text);
    }
    cli_check_stdout();
    ds_pipeline_close(p);
    return 0;
}

const struct command inspect_samples = {
    "samples", "--data-path P... --seq-length L (--train-samples N | --train-iters N --global-batch-size B) [options]",
    "Megatron's GPT training-sample plan, one sample, the index cache",
    "Build Megatron-Core's GPTDataset/BlendedDataset indices for these flags and\n"
    "print the plan: datasets, weights, and per split the sequence range, tokens\n"
    "per epoch, samples asked, epochs and length of each dataset.  Sample counts\n"
    "are Megatron's: train = --train-samples or iters x batch; valid =\n"
    "(train_iters // eval_interval + 1) x eval_iters x batch; test = eval_iters x\n"
    "batch.  --show K prints sample K (what the trainer gets at that position).\n"
    "--data-cache-path DIR writes (or reuses) the .npy files Megatron itself would\n"
    "use.  The descriptions name the vocab and merge files as given by --vocab-file\n"
    "and --merge-file, as Megatron names them.",
    samples_opts, NOPTS(samples_opts), 1, 0, 0, run_samples};
