/*
 * hf.c - HuggingFace tokenizer.json (byte-level BPE) as transformers'
 * AutoTokenizer.from_pretrained(path)(text).input_ids computes it: what
 * Megatron's HuggingFaceTokenizer.tokenize returns.
 *
 * Loading follows tokenizers 0.22.2 (the Rust library) and transformers
 * 4.57: the model's vocabulary and merges become a bpe.c handle built with
 * HuggingFace semantics (BPE_BUILD_HF); added tokens get their ids the way
 * AddedVocabulary::add_tokens gives them; tokenizer_config.json's special
 * tokens that tokenizer.json lacks are added as transformers adds them; the
 * classes whose __init__ rewrites the pipeline (GPTNeoXTokenizerFast and
 * LlamaTokenizerFast rebuild the post-processor from add_bos_token and
 * add_eos_token; a top-level ByteLevel pre-tokenizer takes the config's
 * add_prefix_space) are mirrored.
 *
 * Encoding one text, as TokenizerImpl::encode does:
 *   1. split out the added tokens matched on the raw text (non-normalized
 *      ones; leftmost-longest, with lstrip and rstrip);
 *   2. normalize each remaining part (NFC, nfc.c) and split out the
 *      normalized added tokens in it;
 *   3. pre-tokenize each remaining part: the fast paths run a scanner of
 *      pretok.c straight into BPE (ByteLevel with the GPT-2 pattern, or
 *      Split with the Llama 3 / Qwen2 / Tekken pattern then ByteLevel); anything else
 *      goes through the general pipeline, one step at a time, with the
 *      regex engine of pretok.h;
 *   4. BPE each piece (bpe.c: whole-piece lookup, per-thread cache, merges);
 *   5. the post-processor's special tokens (TemplateProcessing, Roberta or
 *      Bert processing) around the result.
 *
 * Not implemented, and refused by name (TOK_ERR_UNSUPPORTED): models other
 * than BPE, non-byte-level pipelines (no ByteLevel pre-tokenizer, Metaspace,
 * ...), normalizers other than NFC, BPE dropout, subword prefixes and
 * suffixes, single_word added tokens, split_special_tokens, tokenizer
 * classes whose behaviour is not mirrored here, and regex constructs
 * pretok.h does not run.  Truncation and padding are ignored, as transformers
 * disables both for tokenizer(text).
 */
#include "tokenizer_internal.h"
#include "bpe.h"
#include "jsontree.h"
#include "nfc.h"
#include "pretok.h"
#include "unitab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_STEPS 16
#define MAX_SPECIAL_IDS 16

enum { BEH_REMOVED, BEH_ISOLATED, BEH_MERGED_PREV, BEH_MERGED_NEXT, BEH_CONTIGUOUS };
enum { STEP_SPLIT, STEP_BYTELEVEL };
enum { FAST_NONE, FAST_GPT2, FAST_SCAN };

struct step {
    int kind;
    pretok_regex *re;  /* STEP_SPLIT with no scanner (or PCRE2 forced) */
    int scan;          /* PRETOK_PAT_* the scanner can run, or PRETOK_PAT_NONE */
    int behavior, invert;
    int prefix, use_regex; /* STEP_BYTELEVEL */
};

struct added {
    char *content;     /* raw content */
    size_t len;
    char *norm;        /* content as the normalizer writes it (== content without one) */
    size_t nlen;
    uint32_t id;
    uint8_t special, normalized, lstrip, rstrip, single_word;
};

/* A byte trie for leftmost-longest matching of added tokens. */
struct trie {
    int32_t *tok;        /* (nn) added index ending at the node, or -1 */
    uint32_t *first;     /* (nn + 1) edges of node i: [first[i], first[i+1]) */
    uint8_t *label;      /* (ne) sorted per node */
    uint32_t *child;     /* (ne) */
    size_t nn, ne;
    uint64_t start[4];   /* first bytes of the patterns */
};

struct hf_tokenizer {
    char *file;                  /* tokenizer.json */
    char desc[320];
    bpe *model;
    size_t model_ids;            /* the model's id space (max id + 1) */
    size_t model_count;          /* entries of its vocabulary (tokenizers' get_vocab_size) */
    struct added *added;
    size_t nadded;
    int32_t *added_of_id;        /* (nids) index into added, or -1 */
    size_t nids;                 /* every id is below this */
    struct trie raw, norm;
    int has_raw, has_norm;
    int nfc;
    struct step steps[MAX_STEPS];
    int nsteps;
    int fast, fast_scan, prefix_segment, prefix_piece;
    pretok_next_fn scan_next;   /* FAST_SCAN: the scanner of fast_scan */
    pretok_regex *gpt2re;        /* the GPT-2 pattern when PCRE2 is forced */
    uint32_t pre[MAX_SPECIAL_IDS], post[MAX_SPECIAL_IDS];
    size_t npre, npost;
    size_t vocab_size;
    int64_t eos;
    unsigned char **dec;         /* (nids) decode bytes of added ids */
    uint32_t *declen;
};

struct piece { size_t off, len; };

struct hf_state {
    bpe_cache *cache;
    pretok_match *m[MAX_STEPS];
    pretok_match *gpt2m;
    nfc_scratch nfcs;
    unsigned char *nbuf;         /* normalized text of one part */
    size_t ncap;
    unsigned char *arena;        /* the general pipeline's text */
    size_t alen, acap;
    struct piece *pa, *pb;       /* piece lists */
    size_t pacap, pbcap;
    struct { size_t s, e; int m; } *ms;  /* matches of one Split */
    size_t mscap;
};

/* ------------------------------------------------------------------------ */
/* errors                                                                     */

struct ctx {
    const char *file;
    char *err;
    size_t errlen;
};

#define FORMAT(x, node, ...) format_err((x), (node), __VA_ARGS__)
static int format_err(struct ctx *x, const jt_node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int format_err(struct ctx *x, const jt_node *n, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (n && n->line)
        return tok_fail(x->err, x->errlen, TOK_ERR_FORMAT, "invalid tokenizer file '%s': line %u: %s", x->file,
                        (unsigned)n->line, why);
    return tok_fail(x->err, x->errlen, TOK_ERR_FORMAT, "invalid tokenizer file '%s': %s", x->file, why);
}

static int unsupported(struct ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int unsupported(struct ctx *x, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return tok_fail(x->err, x->errlen, TOK_ERR_UNSUPPORTED, "'%s': %s is not supported by mds", x->file, why);
}

static int nomem(struct ctx *x)
{
    return tok_fail(x->err, x->errlen, TOK_ERR_NOMEM, "out of memory loading '%s'", x->file);
}

/* Typed members: absent -> dflt (or an error when required). */
static int get_bool(struct ctx *x, const jt_node *obj, const char *key, int dflt, int *out)
{
    const jt_node *v = jt_get(obj, key);
    if (!v || v->type == JT_NULL) { *out = dflt; return 0; }
    if (v->type != JT_TRUE && v->type != JT_FALSE) return FORMAT(x, v, "'%s' must be a boolean, not %s", key, jt_type_name(v->type));
    *out = v->type == JT_TRUE;
    return 0;
}

static const jt_node *get_str(struct ctx *x, const jt_node *obj, const char *key, int required, int *rc)
{
    const jt_node *v = jt_get(obj, key);
    *rc = 0;
    if (!v || v->type == JT_NULL) {
        if (required) *rc = FORMAT(x, obj, "missing '%s'", key);
        return NULL;
    }
    if (v->type != JT_STRING) { *rc = FORMAT(x, v, "'%s' must be a string, not %s", key, jt_type_name(v->type)); return NULL; }
    return v;
}

static int is_u32(const jt_node *v)
{
    return v && v->type == JT_NUMBER && v->is_int && v->i >= 0 && v->i <= (int64_t)UINT32_MAX;
}

/* ------------------------------------------------------------------------ */
/* the byte-level alphabet                                                    */

/* Raw bytes of a vocabulary string: each character must be one of the 256 of
 * bytes_to_unicode; otherwise the token is unreachable and its "bytes" are
 * its UTF-8 (tokenizers' ByteLevel decoder does the same). */
static int alphabet_bytes(const char *s, size_t n, unsigned char *out, size_t *outlen)
{
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = (unsigned char)s[i];
        uint32_t cp;
        size_t l;
        if (c < 0x80) { cp = c; l = 1; }
        else if (c < 0xE0) { cp = (c & 0x1Fu) << 6 | ((unsigned char)s[i + 1] & 0x3Fu); l = 2; }
        else { cp = 0x110000; l = c < 0xF0 ? 3 : 4; }   /* outside U+0000..U+07FF: never in the alphabet */
        int b = cp < 0x110000 ? bpe_unicode_to_byte(cp) : -1;
        if (b < 0) {
            memcpy(out, s, n);
            *outlen = n;
            return 0;
        }
        out[w++] = (unsigned char)b;
        i += l;
    }
    *outlen = w;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* the trie of added tokens                                                   */

struct tnode { int32_t tok; uint32_t nkids, cap; uint8_t *lab; uint32_t *kid; };

static void trie_free(struct trie *t)
{
    free(t->tok);
    free(t->first);
    free(t->label);
    free(t->child);
    memset(t, 0, sizeof *t);
}

/* Builds t from the patterns pat[i] (len[i] bytes; skipped when len 0); the
 * first of equal patterns wins (Aho-Corasick reports the lowest pattern). */
static int trie_build(struct trie *t, char *const *pat, const size_t *len, const int32_t *val, size_t np)
{
    size_t cap = 16, nn = 1;
    struct tnode *tn = calloc(cap, sizeof *tn);
    if (!tn) return -1;
    tn[0].tok = -1;
    int rc = 0;
    for (size_t p = 0; p < np && !rc; p++) {
        uint32_t node = 0;
        for (size_t j = 0; j < len[p]; j++) {
            uint8_t c = (uint8_t)pat[p][j];
            uint32_t k, nxt = UINT32_MAX;
            for (k = 0; k < tn[node].nkids; k++)
                if (tn[node].lab[k] == c) { nxt = tn[node].kid[k]; break; }
            if (nxt == UINT32_MAX) {
                if (nn == cap) {
                    struct tnode *q = realloc(tn, 2 * cap * sizeof *q);
                    if (!q) { rc = -1; break; }
                    memset(q + cap, 0, cap * sizeof *q);
                    tn = q;
                    cap *= 2;
                }
                tn[nn].tok = -1;
                if (tn[node].nkids == tn[node].cap) {
                    uint32_t c2 = tn[node].cap ? tn[node].cap * 2 : 4;
                    uint8_t *l2 = realloc(tn[node].lab, c2);
                    if (l2) tn[node].lab = l2;
                    uint32_t *k2 = l2 ? realloc(tn[node].kid, c2 * sizeof *k2) : NULL;
                    if (!k2) { rc = -1; break; }
                    tn[node].kid = k2;
                    tn[node].cap = c2;
                }
                tn[node].lab[tn[node].nkids] = c;
                tn[node].kid[tn[node].nkids++] = (uint32_t)nn;
                nxt = (uint32_t)nn++;
            }
            node = nxt;
        }
        if (!rc && len[p] && tn[node].tok < 0) {
            tn[node].tok = val[p];
            t->start[(uint8_t)pat[p][0] >> 6] |= (uint64_t)1 << ((uint8_t)pat[p][0] & 63);
        }
    }
    size_t ne = 0;
    for (size_t i = 0; i < nn; i++) ne += tn[i].nkids;
    if (!rc) {
        t->tok = malloc(nn * sizeof *t->tok);
        t->first = malloc((nn + 1) * sizeof *t->first);
        t->label = malloc(ne ? ne : 1);
        t->child = malloc((ne ? ne : 1) * sizeof *t->child);
        if (!t->tok || !t->first || !t->label || !t->child) rc = -1;
    }
    if (!rc) {
        size_t e = 0;
        for (size_t i = 0; i < nn; i++) {
            t->tok[i] = tn[i].tok;
            t->first[i] = (uint32_t)e;
            for (uint32_t k = 0; k < tn[i].nkids; k++, e++) {
                t->label[e] = tn[i].lab[k];
                t->child[e] = tn[i].kid[k];
            }
        }
        t->first[nn] = (uint32_t)e;
        t->nn = nn;
        t->ne = ne;
    }
    for (size_t i = 0; i < nn; i++) {
        free(tn[i].lab);
        free(tn[i].kid);
    }
    free(tn);
    return rc;
}

/* The leftmost-longest match at or after from: 1 with [*ms, *me) and the
 * value in *tok, or 0. */
static int trie_find(const struct trie *t, const unsigned char *s, size_t n, size_t from, size_t *ms, size_t *me,
                     int32_t *value)
{
    for (size_t i = from; i < n; i++) {
        if (!(t->start[s[i] >> 6] >> (s[i] & 63) & 1))
            continue;
        uint32_t node = 0;
        int32_t best = -1;
        size_t bend = 0;
        for (size_t j = i; j < n; j++) {
            uint32_t e = t->first[node], end = t->first[node + 1];
            while (e < end && t->label[e] != s[j]) e++;
            if (e == end) break;
            node = t->child[e];
            if (t->tok[node] >= 0) {
                best = t->tok[node];
                bend = j + 1;
            }
        }
        if (best >= 0) {
            *ms = i;
            *me = bend;
            *value = best;
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* loading                                                                    */

static char *xstrndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static char *path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

/* A token as tokenizer_config.json writes one: a string, or an AddedToken
 * object {"content": ..., "lstrip": ..., ...}; NULL when null or absent. */
struct cfg_token {
    const char *s;
    size_t len;
    int set;          /* the key is present (even as null) */
    int lstrip, rstrip, normalized, special, single_word, has_flags;
};

static int cfg_token(struct ctx *x, const jt_node *v, int special_default, struct cfg_token *t)
{
    memset(t, 0, sizeof *t);
    if (!v) return 0;
    t->set = 1;
    if (v->type == JT_NULL) return 0;
    if (v->type == JT_STRING) {
        t->s = v->str;
        t->len = v->len;
        return 0;
    }
    if (v->type != JT_OBJECT) return FORMAT(x, v, "a special token must be a string or an object, not %s", jt_type_name(v->type));
    int rc;
    const jt_node *c = get_str(x, v, "content", 1, &rc);
    if (rc) return rc;
    t->s = c->str;
    t->len = c->len;
    t->has_flags = 1;
    if ((rc = get_bool(x, v, "lstrip", 0, &t->lstrip)) || (rc = get_bool(x, v, "rstrip", 0, &t->rstrip)) ||
        (rc = get_bool(x, v, "single_word", 0, &t->single_word)) ||
        (rc = get_bool(x, v, "special", special_default, &t->special)) ||
        (rc = get_bool(x, v, "normalized", !t->special, &t->normalized)))
        return rc;
    return 0;
}

/* Adds tokens the way AddedVocabulary::add_tokens does (one call). */
struct vocab_index { const char *s; size_t len; uint32_t id; };

static int cmp_vi(const void *a, const void *b)
{
    const struct vocab_index *x = a, *y = b;
    size_t l = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, l);
    if (c) return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

struct loader {
    struct ctx x;
    hf_tokenizer *h;
    struct vocab_index *vi;   /* the model vocabulary, sorted by string */
    size_t nvi;
    size_t nspecial_order;    /* (added indices in tokenizers' special_tokens order) */
    size_t *special_order;
    size_t *plain_order;      /* non-special added tokens in order */
    size_t nplain;
};

static int64_t vocab_lookup(const struct loader *L, const char *s, size_t len)
{
    struct vocab_index key = { s, len, 0 };
    const struct vocab_index *f = bsearch(&key, L->vi, L->nvi, sizeof key, cmp_vi);
    return f ? (int64_t)f->id : -1;
}

static int64_t added_lookup(const hf_tokenizer *h, const char *s, size_t len)
{
    for (size_t i = 0; i < h->nadded; i++)
        if (h->added[i].len == len && memcmp(h->added[i].content, s, len) == 0)
            return (int64_t)i;
    return -1;
}

/* token_to_id: added tokens first, then the model. */
static int64_t token_to_id(const struct loader *L, const char *s, size_t len)
{
    int64_t a = added_lookup(L->h, s, len);
    if (a >= 0) return L->h->added[a].id;
    return vocab_lookup(L, s, len);
}

struct new_token { const char *s; size_t len; int special, normalized, lstrip, rstrip, single_word; };

static int add_tokens(struct loader *L, const struct new_token *t, size_t nt)
{
    hf_tokenizer *h = L->h;
    uint32_t next;
    int any = 0;
    uint32_t maxid = 0;
    for (size_t i = 0; i < h->nadded; i++) {
        if (!any || h->added[i].id > maxid) maxid = h->added[i].id;
        any = 1;
    }
    next = !any ? (uint32_t)L->h->model_count
         : (maxid >= L->h->model_count || L->h->model_count == 0) ? maxid + 1 : (uint32_t)L->h->model_count;
    for (size_t k = 0; k < nt; k++) {
        if (t[k].len == 0) continue;
        int64_t a = added_lookup(h, t[k].s, t[k].len);
        if (a >= 0) {
            struct added *e = &h->added[a];
            if (e->special == t[k].special && e->normalized == t[k].normalized && e->lstrip == t[k].lstrip &&
                e->rstrip == t[k].rstrip && e->single_word == t[k].single_word)
                continue;   /* the same token: ignored */
            /* the same content with other flags: tokenizers keeps the id and
               takes the new flags (and lists it again, which does not change
               what matches); mirrored by updating the flags */
            if (t[k].special && !e->special) {
                L->special_order[L->nspecial_order++] = (size_t)a;
            }
            e->special |= (uint8_t)t[k].special;
            e->normalized = (uint8_t)t[k].normalized;
            e->lstrip = (uint8_t)t[k].lstrip;
            e->rstrip = (uint8_t)t[k].rstrip;
            e->single_word = (uint8_t)t[k].single_word;
            continue;
        }
        int64_t v = vocab_lookup(L, t[k].s, t[k].len);
        uint32_t id = v >= 0 ? (uint32_t)v : next++;
        struct added *na = realloc(h->added, (h->nadded + 1) * sizeof *na);
        if (!na) return nomem(&L->x);
        h->added = na;
        struct added *e = &h->added[h->nadded];
        memset(e, 0, sizeof *e);
        e->content = xstrndup(t[k].s, t[k].len);
        if (!e->content) return nomem(&L->x);
        e->len = t[k].len;
        e->id = id;
        e->special = (uint8_t)t[k].special;
        e->normalized = (uint8_t)t[k].normalized;
        e->lstrip = (uint8_t)t[k].lstrip;
        e->rstrip = (uint8_t)t[k].rstrip;
        e->single_word = (uint8_t)t[k].single_word;
        if (e->special) L->special_order[L->nspecial_order++] = h->nadded;
        else L->plain_order[L->nplain++] = h->nadded;
        h->nadded++;
    }
    return 0;
}

static int load_model(struct loader *L, const jt_node *model)
{
    struct ctx *x = &L->x;
    hf_tokenizer *h = L->h;
    int rc;
    if (!model || model->type != JT_OBJECT) return FORMAT(x, model, "'model' must be an object");
    const jt_node *type = get_str(x, model, "type", 0, &rc);
    if (rc) return rc;
    if (!type) return unsupported(x, "a model without \"type\"");
    if (strcmp(type->str, "BPE") != 0) return unsupported(x, "the model type '%s' (only BPE)", type->str);
    const jt_node *d = jt_get(model, "dropout");
    if (d && d->type != JT_NULL) {
        if (d->type != JT_NUMBER) return FORMAT(x, d, "'dropout' must be a number");
        if (d->num != 0) return unsupported(x, "BPE dropout (%g)", d->num);
    }
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const jt_node *a = get_str(x, model, affix[i], 0, &rc);
        if (rc) return rc;
        if (a && a->len) return unsupported(x, "'%s' (\"%s\")", affix[i], a->str);
    }
    int ignore_merges, fuse, fallback;
    if ((rc = get_bool(x, model, "ignore_merges", 0, &ignore_merges)) || (rc = get_bool(x, model, "fuse_unk", 0, &fuse)) ||
        (rc = get_bool(x, model, "byte_fallback", 0, &fallback)))
        return rc;
    const jt_node *vocab = jt_get(model, "vocab"), *merges = jt_get(model, "merges");
    if (!vocab || vocab->type != JT_OBJECT) return FORMAT(x, vocab ? vocab : model, "model 'vocab' must be an object of token: id");
    if (!merges || merges->type != JT_ARRAY) return FORMAT(x, merges ? merges : model, "model 'merges' must be an array");
    const jt_node *dup;
    int twice = jt_has_duplicate_key(vocab, &dup);
    if (twice < 0) return nomem(x);
    if (twice) return FORMAT(x, dup, "the vocabulary has the token \"%s\" twice", dup->key);

    /* ids */
    size_t nids = 0;
    for (size_t i = 0; i < vocab->len; i++) {
        const jt_node *v = &vocab->kids[i];
        if (!is_u32(v) || v->i >= (1 << 21) - 1)
            return FORMAT(x, v, "the id of token \"%s\" must be an integer in [0, %d)", v->key, (1 << 21) - 1);
        if ((size_t)v->i + 1 > nids) nids = (size_t)v->i + 1;
    }
    h->model_ids = nids;
    h->model_count = vocab->len;
    L->vi = malloc((vocab->len ? vocab->len : 1) * sizeof *L->vi);
    const unsigned char **bytes = calloc(nids ? nids : 1, sizeof *bytes);
    uint32_t *len = calloc(nids ? nids : 1, sizeof *len);
    uint8_t *reach = calloc(nids ? nids : 1, 1);
    size_t total = 0;
    for (size_t i = 0; i < vocab->len; i++) total += vocab->kids[i].keylen;
    unsigned char *blob = malloc(total ? total : 1);
    char *cat = NULL;
    size_t catcap = 0;
    uint32_t (*mg)[3] = malloc((merges->len ? merges->len : 1) * sizeof *mg);
    rc = 0;
    if (!L->vi || !bytes || !len || !reach || !blob || !mg) { rc = nomem(x); goto done; }
    size_t boff = 0;
    for (size_t i = 0; i < vocab->len; i++) {
        const jt_node *v = &vocab->kids[i];
        uint32_t id = (uint32_t)v->i;
        if (bytes[id]) { rc = FORMAT(x, v, "id %u is given to two tokens (\"%s\" and another)", id, v->key); goto done; }
        size_t bl;
        reach[id] = (uint8_t)alphabet_bytes(v->key, v->keylen, blob + boff, &bl);
        bytes[id] = blob + boff;
        len[id] = (uint32_t)bl;
        if (bl == 0) { rc = FORMAT(x, v, "the vocabulary has an empty token"); goto done; }
        boff += bl;
        L->vi[i] = (struct vocab_index){ v->key, v->keylen, id };
    }
    L->nvi = vocab->len;
    qsort(L->vi, L->nvi, sizeof *L->vi, cmp_vi);

    /* merges: [a, b] pairs or "a b" strings (lines starting with #version skipped) */
    size_t nm = 0;
    for (size_t i = 0; i < merges->len; i++) {
        const jt_node *m = &merges->kids[i];
        const char *a, *b;
        size_t al, bl;
        if (m->type == JT_ARRAY) {
            if (m->len != 2 || m->kids[0].type != JT_STRING || m->kids[1].type != JT_STRING) {
                rc = FORMAT(x, m, "merge %zu must be a pair of strings", i + 1);
                goto done;
            }
            a = m->kids[0].str; al = m->kids[0].len;
            b = m->kids[1].str; bl = m->kids[1].len;
        } else if (m->type == JT_STRING) {
            if (m->len >= 8 && memcmp(m->str, "#version", 8) == 0) continue;
            const char *sp = memchr(m->str, ' ', m->len);
            if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str))) {
                rc = FORMAT(x, m, "merge %zu (\"%s\") is not two tokens separated by one space", nm + 1, m->str);
                goto done;
            }
            a = m->str; al = (size_t)(sp - m->str);
            b = sp + 1; bl = m->len - al - 1;
        } else {
            rc = FORMAT(x, m, "merge %zu must be a string or a pair of strings, not %s", i + 1, jt_type_name(m->type));
            goto done;
        }
        int64_t ia = vocab_lookup(L, a, al), ib = vocab_lookup(L, b, bl);
        if (al + bl > catcap) {
            catcap = (al + bl) * 2;
            char *q = realloc(cat, catcap);
            if (!q) { rc = nomem(x); goto done; }
            cat = q;
        }
        memcpy(cat, a, al);
        memcpy(cat + al, b, bl);
        int64_t im = vocab_lookup(L, cat, al + bl);
        if (ia < 0 || ib < 0 || im < 0) {
            rc = FORMAT(x, m, "merge %zu (\"%.*s\" \"%.*s\") uses or makes a token that is not in the vocabulary",
                        nm + 1, (int)(al > 60 ? 60 : al), a, (int)(bl > 60 ? 60 : bl), b);
            goto done;
        }
        mg[nm][0] = (uint32_t)ia;
        mg[nm][1] = (uint32_t)ib;
        mg[nm][2] = (uint32_t)im;
        nm++;
    }
    bpe_spec spec = { nids, (const unsigned char *const *)bytes, len, reach, (const uint32_t (*)[3])mg, nm,
                      BPE_BUILD_HF | (ignore_merges ? BPE_BUILD_IGNORE_MERGES : 0) };
    char berr[256];
    int brc = bpe_build(&h->model, &spec, berr, sizeof berr);
    if (brc == BPE_ERR_NOMEM) rc = nomem(x);
    else if (brc) rc = tok_fail(x->err, x->errlen, TOK_ERR_FORMAT, "invalid tokenizer file '%s': %s%s", x->file, berr,
                                brc == BPE_ERR_VOCAB && strstr(berr, "no token for byte") ?
                                " (not a byte-level vocabulary)" : "");
done:
    free(bytes);
    free(len);
    free(reach);
    free(blob);
    free(mg);
    free(cat);
    return rc;
}

static int parse_pretokenizer(struct loader *L, const jt_node *p)
{
    struct ctx *x = &L->x;
    hf_tokenizer *h = L->h;
    int rc;
    if (!p || p->type == JT_NULL) return 0;
    if (p->type != JT_OBJECT) return FORMAT(x, p, "a pre-tokenizer must be an object");
    const jt_node *type = get_str(x, p, "type", 1, &rc);
    if (rc) return rc;
    if (strcmp(type->str, "Sequence") == 0) {
        const jt_node *l = jt_get(p, "pretokenizers");
        if (!l || l->type != JT_ARRAY) return FORMAT(x, p, "a Sequence pre-tokenizer needs a 'pretokenizers' array");
        for (size_t i = 0; i < l->len; i++)
            if ((rc = parse_pretokenizer(L, &l->kids[i]))) return rc;
        return 0;
    }
    if (h->nsteps == MAX_STEPS) return unsupported(x, "more than %d pre-tokenizers", MAX_STEPS);
    struct step *s = &h->steps[h->nsteps];
    memset(s, 0, sizeof *s);
    if (strcmp(type->str, "ByteLevel") == 0) {
        s->kind = STEP_BYTELEVEL;
        int trim;
        if (!jt_get(p, "add_prefix_space") || !jt_get(p, "trim_offsets"))
            return FORMAT(x, p, "a ByteLevel pre-tokenizer needs 'add_prefix_space' and 'trim_offsets'");
        if ((rc = get_bool(x, p, "add_prefix_space", 0, &s->prefix)) || (rc = get_bool(x, p, "trim_offsets", 1, &trim)) ||
            (rc = get_bool(x, p, "use_regex", 1, &s->use_regex)))
            return rc;
        h->nsteps++;
        return 0;
    }
    if (strcmp(type->str, "Split") == 0) {
        s->kind = STEP_SPLIT;
        const jt_node *pat = jt_get(p, "pattern"), *beh = get_str(x, p, "behavior", 1, &rc);
        if (rc) return rc;
        if ((rc = get_bool(x, p, "invert", 0, &s->invert))) return rc;
        if (!jt_get(p, "invert")) return FORMAT(x, p, "a Split pre-tokenizer needs 'invert'");
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        s->behavior = -1;
        for (int i = 0; i < 5; i++)
            if (strcmp(beh->str, names[i]) == 0) s->behavior = i;
        if (s->behavior < 0) return FORMAT(x, beh, "unknown Split behavior '%s'", beh->str);
        if (!pat || pat->type != JT_OBJECT || pat->len != 1 || pat->kids[0].type != JT_STRING ||
            (strcmp(pat->kids[0].key, "Regex") != 0 && strcmp(pat->kids[0].key, "String") != 0))
            return FORMAT(x, pat ? pat : p, "a Split 'pattern' must be {\"Regex\": ...} or {\"String\": ...}");
        const jt_node *ps = &pat->kids[0];
        int literal = strcmp(ps->key, "String") == 0;
        s->scan = literal ? PRETOK_PAT_NONE : pretok_known_pattern(ps->str, ps->len);
        if (literal && ps->len == 0) return unsupported(x, "a Split with an empty String pattern");
        char rerr[256];
        int r = pretok_regex_new(&s->re, ps->str, ps->len, literal, rerr, sizeof rerr);
        if (r == PRETOK_ERR_NOMEM) return nomem(x);
        if (r == PRETOK_ERR_NOPCRE2 && s->scan != PRETOK_PAT_NONE)
            s->re = NULL;   /* the scanner runs it; only --pretokenizer pcre2 would need PCRE2 */
        else if (r)
            return tok_fail(x->err, x->errlen, r == PRETOK_ERR_NOPCRE2 ? TOK_ERR_BUILD : TOK_ERR_UNSUPPORTED,
                            "'%s': line %u: the Split pattern cannot be run: %s", x->file, (unsigned)ps->line, rerr);
        h->nsteps++;
        return 0;
    }
    return unsupported(x, "the pre-tokenizer '%s' (ByteLevel, Split and Sequence are)", type->str);
}

static int parse_normalizer(struct loader *L, const jt_node *n)
{
    struct ctx *x = &L->x;
    int rc;
    if (!n || n->type == JT_NULL) return 0;
    if (n->type != JT_OBJECT) return FORMAT(x, n, "a normalizer must be an object");
    const jt_node *type = get_str(x, n, "type", 1, &rc);
    if (rc) return rc;
    if (strcmp(type->str, "NFC") == 0) {
        L->h->nfc = 1;   /* NFC twice is NFC once */
        return 0;
    }
    if (strcmp(type->str, "Sequence") == 0) {
        const jt_node *l = jt_get(n, "normalizers");
        if (!l || l->type != JT_ARRAY) return FORMAT(x, n, "a Sequence normalizer needs a 'normalizers' array");
        for (size_t i = 0; i < l->len; i++)
            if ((rc = parse_normalizer(L, &l->kids[i]))) return rc;
        return 0;
    }
    return unsupported(x, "the normalizer '%s' (only NFC)", type->str);
}

static int add_ids(struct ctx *x, const jt_node *at, uint32_t *dst, size_t *n, const uint32_t *ids, size_t k)
{
    if (*n + k > MAX_SPECIAL_IDS) return unsupported(x, "a post-processor adding more than %d tokens", MAX_SPECIAL_IDS);
    (void)at;
    memcpy(dst + *n, ids, k * sizeof *ids);
    *n += k;
    return 0;
}

static int parse_postprocessor(struct loader *L, const jt_node *p)
{
    struct ctx *x = &L->x;
    hf_tokenizer *h = L->h;
    int rc;
    if (!p || p->type == JT_NULL) return 0;
    if (p->type != JT_OBJECT) return FORMAT(x, p, "a post-processor must be an object");
    const jt_node *type = get_str(x, p, "type", 1, &rc);
    if (rc) return rc;
    if (strcmp(type->str, "ByteLevel") == 0) return 0;   /* offsets only */
    if (strcmp(type->str, "Sequence") == 0) {
        const jt_node *l = jt_get(p, "processors");
        if (!l || l->type != JT_ARRAY) return FORMAT(x, p, "a Sequence post-processor needs a 'processors' array");
        for (size_t i = 0; i < l->len; i++)
            if ((rc = parse_postprocessor(L, &l->kids[i]))) return rc;
        return 0;
    }
    uint32_t pre[MAX_SPECIAL_IDS], post[MAX_SPECIAL_IDS];
    size_t npre = 0, npost = 0;
    if (strcmp(type->str, "RobertaProcessing") == 0 || strcmp(type->str, "BertProcessing") == 0) {
        const jt_node *cls = jt_get(p, "cls"), *sep = jt_get(p, "sep");
        if (!cls || cls->type != JT_ARRAY || cls->len != 2 || !is_u32(&cls->kids[1]) || !sep || sep->type != JT_ARRAY ||
            sep->len != 2 || !is_u32(&sep->kids[1]))
            return FORMAT(x, p, "%s needs 'cls' and 'sep' as [token, id]", type->str);
        pre[npre++] = (uint32_t)cls->kids[1].i;
        post[npost++] = (uint32_t)sep->kids[1].i;
    } else if (strcmp(type->str, "TemplateProcessing") == 0) {
        const jt_node *single = jt_get(p, "single"), *sp = jt_get(p, "special_tokens");
        if (!single || single->type != JT_ARRAY) return FORMAT(x, p, "TemplateProcessing needs a 'single' array");
        int seen = 0;
        for (size_t i = 0; i < single->len; i++) {
            const jt_node *it = &single->kids[i];
            if (it->type != JT_OBJECT || it->len != 1 || it->kids[0].type != JT_OBJECT)
                return FORMAT(x, it, "a template piece must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
            const jt_node *body = &it->kids[0];
            const jt_node *id = get_str(x, body, "id", 1, &rc);
            if (rc) return rc;
            if (strcmp(body->key, "Sequence") == 0) {
                if (strcmp(id->str, "A") != 0 || seen)
                    return FORMAT(x, it, "the single template must hold the sequence A exactly once");
                seen = 1;
            } else if (strcmp(body->key, "SpecialToken") == 0) {
                const jt_node *st = jt_get(sp, id->str), *ids = st ? jt_get(st, "ids") : NULL;
                if (!ids || ids->type != JT_ARRAY)
                    return FORMAT(x, it, "the template names the special token \"%s\", which 'special_tokens' lacks", id->str);
                for (size_t k = 0; k < ids->len; k++) {
                    if (!is_u32(&ids->kids[k])) return FORMAT(x, &ids->kids[k], "special token ids must be integers");
                    uint32_t v = (uint32_t)ids->kids[k].i;
                    if ((rc = add_ids(x, it, seen ? post : pre, seen ? &npost : &npre, &v, 1))) return rc;
                }
            } else {
                return FORMAT(x, it, "unknown template piece '%s'", body->key);
            }
        }
        if (!seen) return FORMAT(x, single, "the single template has no sequence A");
    } else {
        return unsupported(x, "the post-processor '%s'", type->str);
    }
    /* a later processor wraps what the earlier ones made */
    uint32_t npre_all[MAX_SPECIAL_IDS];
    size_t k = 0;
    if ((rc = add_ids(x, p, npre_all, &k, pre, npre)) || (rc = add_ids(x, p, npre_all, &k, h->pre, h->npre))) return rc;
    memcpy(h->pre, npre_all, k * sizeof *h->pre);
    h->npre = k;
    if ((rc = add_ids(x, p, h->post, &h->npost, post, npost))) return rc;
    return 0;
}

/* The tokenizer classes transformers' AutoTokenizer may pick, and what their
 * __init__ does to the pipeline. */
struct tclass {
    const char *name, *fast;
    const char *unk, *bos, *eos, *pad;   /* class defaults of the special tokens */
    int rebuild_post;                    /* update_post_processor() from add_bos/eos_token */
    int add_bos, add_eos;                /* their defaults */
    int prefix_space_ok;
};

static const struct tclass classes[] = {
    { "PreTrainedTokenizerFast", NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 1 },
    { "GPT2Tokenizer", "GPT2TokenizerFast", "<|endoftext|>", "<|endoftext|>", "<|endoftext|>", NULL, 0, 0, 0, 1 },
    { "Qwen2Tokenizer", "Qwen2TokenizerFast", "<|endoftext|>", NULL, "<|endoftext|>", "<|endoftext|>", 0, 0, 0, 1 },
    { "GPTNeoXTokenizer", "GPTNeoXTokenizerFast", "<|endoftext|>", "<|endoftext|>", "<|endoftext|>", NULL, 1, 0, 0, 1 },
    { "LlamaTokenizer", "LlamaTokenizerFast", "<unk>", "<s>", "</s>", NULL, 1, 1, 0, 0 },
};

static int load_config(struct loader *L, const char *dir, const struct tclass **cls, const jt_node **cfg_out,
                       jt_doc **doc_out, jt_doc **map_out)
{
    struct ctx *x = &L->x;
    *cls = &classes[0];
    *cfg_out = NULL;
    *doc_out = *map_out = NULL;
    char *path = path_join(dir, "tokenizer_config.json");
    if (!path) return nomem(x);
    int rc = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        free(path);
        return 0;   /* no config: no special tokens (transformers would refuse; mds documents it) */
    }
    fclose(f);
    struct ctx cx = { path, x->err, x->errlen };
    rc = jt_parse_file(doc_out, path, x->err, x->errlen);
    if (rc == JT_ERR_NOMEM) { rc = tok_fail(x->err, x->errlen, TOK_ERR_NOMEM, "out of memory loading '%s'", path); goto out; }
    if (rc) {
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s", x->err ? x->err : "");
        rc = tok_fail(x->err, x->errlen, TOK_ERR_FORMAT, "invalid tokenizer config %s", tmp);
        goto out;
    }
    const jt_node *cfg = jt_root(*doc_out);
    if (cfg->type != JT_OBJECT) { rc = format_err(&cx, cfg, "the config must be a JSON object"); goto out; }
    *cfg_out = cfg;
    const jt_node *tc = get_str(&cx, cfg, "tokenizer_class", 0, &rc);
    if (rc) goto out;
    if (tc) {
        *cls = NULL;
        for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
            if (strcmp(tc->str, classes[i].name) == 0 || (classes[i].fast && strcmp(tc->str, classes[i].fast) == 0))
                *cls = &classes[i];
        if (!*cls) {
            rc = tok_fail(x->err, x->errlen, TOK_ERR_UNSUPPORTED,
                          "'%s': tokenizer_class '%s' is not supported by mds (PreTrainedTokenizerFast, GPT2, Qwen2, "
                          "GPTNeoX and Llama tokenizers are)", path, tc->str);
            goto out;
        }
    }
    int sst;
    if ((rc = get_bool(&cx, cfg, "split_special_tokens", 0, &sst))) goto out;
    if (sst) { rc = tok_fail(x->err, x->errlen, TOK_ERR_UNSUPPORTED, "'%s': split_special_tokens is not supported by mds", path); goto out; }
    if (!jt_get(cfg, "added_tokens_decoder")) {
        /* legacy: special_tokens_map.json overrides the config's special tokens */
        char *mp = path_join(dir, "special_tokens_map.json");
        if (!mp) { rc = nomem(x); goto out; }
        FILE *g = fopen(mp, "rb");
        if (g) {
            fclose(g);
            rc = jt_parse_file(map_out, mp, x->err, x->errlen);
            if (rc) {
                char tmp[600];
                snprintf(tmp, sizeof tmp, "%s", x->err ? x->err : "");
                rc = tok_fail(x->err, x->errlen, rc == JT_ERR_NOMEM ? TOK_ERR_NOMEM : TOK_ERR_FORMAT, "invalid special tokens map %s", tmp);
            }
        }
        free(mp);
    }
out:
    free(path);
    return rc;
}

static const jt_node *cfg_value(const jt_node *cfg, const jt_doc *map, const char *key)
{
    const jt_node *v = map ? jt_get(jt_root(map), key) : NULL;
    return v ? v : jt_get(cfg, key);
}

static const char *const SPECIAL_KEYS[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                                           "cls_token", "mask_token"};

/* transformers' PreTrainedTokenizerFast.__init__ additions and the class
 * behaviour; also resolves the eos and bos ids. */
static int apply_config(struct loader *L, const struct tclass *cls, const jt_node *cfg, const jt_doc *map,
                        const char *cfgpath)
{
    struct ctx cx = { cfgpath ? cfgpath : L->x.file, L->x.err, L->x.errlen };
    struct ctx *x = &cx;
    hf_tokenizer *h = L->h;
    int rc;
    struct cfg_token tk[7];
    struct new_token nt[64];
    size_t nnt = 0;
    for (int i = 0; i < 7; i++) {
        if ((rc = cfg_token(x, cfg ? cfg_value(cfg, map, SPECIAL_KEYS[i]) : NULL, 1, &tk[i]))) return rc;
        if (!tk[i].set) {   /* class default */
            const char *d = i == 0 ? cls->bos : i == 1 ? cls->eos : i == 2 ? cls->unk : i == 4 ? cls->pad : NULL;
            if (d) { tk[i].s = d; tk[i].len = strlen(d); }
        }
    }
    /* added_tokens_decoder: must agree with tokenizer.json, or be new tokens */
    const jt_node *atd = cfg ? jt_get(cfg, "added_tokens_decoder") : NULL;
    if (atd && atd->type == JT_OBJECT) {
        for (size_t i = 0; i < atd->len; i++) {
            struct cfg_token t;
            if ((rc = cfg_token(x, &atd->kids[i], 0, &t))) return rc;
            if (!t.s) continue;
            int64_t a = added_lookup(h, t.s, t.len);
            if (a >= 0) {
                const struct added *e = &h->added[a];
                if (t.has_flags && (e->special != t.special || e->normalized != t.normalized || e->lstrip != t.lstrip ||
                                    e->rstrip != t.rstrip || e->single_word != t.single_word))
                    return tok_fail(x->err, x->errlen, TOK_ERR_UNSUPPORTED,
                                    "'%s': added_tokens_decoder gives \"%s\" other flags than tokenizer.json (transformers "
                                    "re-adds it): not supported by mds", x->file, t.s);
                continue;
            }
            if (nnt == 64) return unsupported(x, "more than 64 added tokens in tokenizer_config.json");
            nt[nnt++] = (struct new_token){ t.s, t.len, t.special, t.has_flags ? t.normalized : !t.special, t.lstrip,
                                            t.rstrip, t.single_word };
        }
    }
    /* all_special_tokens_extended not yet added: AddedToken(token, special=True) */
    for (int i = 0; i < 7; i++) {
        if (!tk[i].s || added_lookup(h, tk[i].s, tk[i].len) >= 0) continue;
        int dup = 0;
        for (size_t k = 0; k < nnt; k++) dup |= nt[k].len == tk[i].len && memcmp(nt[k].s, tk[i].s, tk[i].len) == 0;
        if (dup) continue;
        if (nnt == 64) return unsupported(x, "more than 64 added tokens in tokenizer_config.json");
        nt[nnt++] = (struct new_token){ tk[i].s, tk[i].len, 1, tk[i].has_flags ? tk[i].normalized : 0,
                                        tk[i].lstrip, tk[i].rstrip, tk[i].single_word };
    }
    const jt_node *ast = cfg ? cfg_value(cfg, map, "additional_special_tokens") : NULL;
    if (ast && ast->type == JT_ARRAY) {
        for (size_t i = 0; i < ast->len; i++) {
            struct cfg_token t;
            if ((rc = cfg_token(x, &ast->kids[i], 1, &t))) return rc;
            if (!t.s || added_lookup(h, t.s, t.len) >= 0) continue;
            int dup = 0;
            for (size_t k = 0; k < nnt; k++) dup |= nt[k].len == t.len && memcmp(nt[k].s, t.s, t.len) == 0;
            if (dup) continue;
            if (nnt == 64) return unsupported(x, "more than 64 added tokens in tokenizer_config.json");
            nt[nnt++] = (struct new_token){ t.s, t.len, 1, t.has_flags ? t.normalized : 0, t.lstrip, t.rstrip, t.single_word };
        }
    } else if (ast && ast->type != JT_NULL) {
        return format_err(x, ast, "'additional_special_tokens' must be an array");
    }
    if (nnt && (rc = add_tokens(L, nt, nnt))) return rc;

    /* eos_token_id: convert_tokens_to_ids, unk_token_id when unknown */
    h->eos = -1;
    if (tk[1].s) {
        int64_t id = token_to_id(L, tk[1].s, tk[1].len);
        if (id < 0 && tk[2].s) id = token_to_id(L, tk[2].s, tk[2].len);
        h->eos = id;
    }
    /* the class's own pipeline changes */
    int prefix;
    if ((rc = get_bool(x, cfg, "add_prefix_space", 0, &prefix))) return rc;
    if (cfg && jt_get(cfg, "add_prefix_space") && jt_get(cfg, "add_prefix_space")->type != JT_NULL && !cls->prefix_space_ok)
        return tok_fail(x->err, x->errlen, TOK_ERR_UNSUPPORTED,
                        "'%s': add_prefix_space with %s (transformers converts from the slow tokenizer) is not supported by mds",
                        x->file, cls->fast);
    /* PreTrainedTokenizerFast.__init__ rewrites a top-level ByteLevel with the
       config's add_prefix_space (default False); LlamaTokenizerFast passes
       None there, the rewrite fails and is skipped */
    if (h->nsteps == 1 && h->steps[0].kind == STEP_BYTELEVEL && cls->prefix_space_ok)
        h->steps[0].prefix = prefix;
    if (cls->rebuild_post) {
        int ab, ae;
        if ((rc = get_bool(x, cfg, "add_bos_token", cls->add_bos, &ab)) || (rc = get_bool(x, cfg, "add_eos_token", cls->add_eos, &ae)))
            return rc;
        h->npre = h->npost = 0;
        if (ab) {
            if (!tk[0].s) return tok_fail(x->err, x->errlen, TOK_ERR_FORMAT, "'%s': add_bos_token without a bos_token", x->file);
            int64_t id = token_to_id(L, tk[0].s, tk[0].len);
            if (id < 0 && tk[2].s) id = token_to_id(L, tk[2].s, tk[2].len);
            if (id < 0) return tok_fail(x->err, x->errlen, TOK_ERR_FORMAT, "'%s': the bos_token is not a token", x->file);
            h->pre[h->npre++] = (uint32_t)id;
        }
        if (ae) {
            if (h->eos < 0) return tok_fail(x->err, x->errlen, TOK_ERR_FORMAT, "'%s': add_eos_token without an eos_token", x->file);
            h->post[h->npost++] = (uint32_t)h->eos;
        }
    }
    return 0;
}

static int build_tries(struct loader *L)
{
    hf_tokenizer *h = L->h;
    size_t n = h->nadded;
    char **pat = malloc((n ? n : 1) * sizeof *pat);
    size_t *len = malloc((n ? n : 1) * sizeof *len);
    int32_t *val = malloc((n ? n : 1) * sizeof *val);
    int rc = 0;
    if (!pat || !len || !val) { rc = nomem(&L->x); goto out; }
    nfc_scratch sc = {0};
    for (int which = 0; which < 2 && !rc; which++) {
        size_t np = 0;
        /* special tokens first, then the others, as refresh_added_tokens orders them */
        for (int pass = 0; pass < 2; pass++) {
            size_t cnt = pass == 0 ? L->nspecial_order : L->nplain;
            const size_t *ord = pass == 0 ? L->special_order : L->plain_order;
            for (size_t k = 0; k < cnt; k++) {
                struct added *e = &h->added[ord[k]];
                if (e->normalized != which) continue;
                if (e->single_word) { rc = unsupported(&L->x, "the single_word added token \"%s\"", e->content); goto out; }
                if (which && h->nfc && !e->norm) {
                    e->norm = malloc(nfc_bound(e->len));
                    if (!e->norm) { rc = nomem(&L->x); goto out; }
                    e->nlen = nfc_normalize((const unsigned char *)e->content, e->len, (unsigned char *)e->norm, &sc);
                    if (e->nlen == SIZE_MAX) { rc = nomem(&L->x); goto out; }
                }
                pat[np] = which && e->norm ? e->norm : e->content;
                len[np] = which && e->norm ? e->nlen : e->len;
                val[np] = (int32_t)ord[k];
                np++;
            }
        }
        if (np && trie_build(which ? &h->norm : &h->raw, pat, len, val, np)) { rc = nomem(&L->x); goto out; }
        if (which) h->has_norm = np > 0;
        else h->has_raw = np > 0;
    }
    nfc_scratch_release(&sc);
out:
    free(pat);
    free(len);
    free(val);
    return rc;
}

static int finish(struct loader *L, int use_pcre2)
{
    struct ctx *x = &L->x;
    hf_tokenizer *h = L->h;
    /* the pipeline must end in exactly one ByteLevel (a byte-level BPE) */
    int nbl = 0;
    for (int i = 0; i < h->nsteps; i++) nbl += h->steps[i].kind == STEP_BYTELEVEL;
    if (nbl == 0) return unsupported(x, "a pre-tokenizer without ByteLevel (not a byte-level BPE)");
    if (nbl > 1 || h->steps[h->nsteps - 1].kind != STEP_BYTELEVEL)
        return unsupported(x, "a pre-tokenizer with steps after ByteLevel");
    struct step *bl = &h->steps[h->nsteps - 1];
    if (h->nsteps == 1 && bl->use_regex && !use_pcre2) {
        h->fast = FAST_GPT2;
        h->prefix_segment = bl->prefix;
    } else if (h->nsteps == 2 && !bl->use_regex && h->steps[0].scan != PRETOK_PAT_NONE && h->steps[0].behavior == BEH_ISOLATED &&
               !h->steps[0].invert && !use_pcre2) {
        h->fast = FAST_SCAN;
        h->fast_scan = h->steps[0].scan;
        h->scan_next = pretok_scanner(h->fast_scan);
        h->prefix_piece = bl->prefix;
    }
    if (!use_pcre2) {
        /* a scanner runs a known pattern everywhere (its matches cover the
           text, which is all Pattern::find_matches needs), PCRE2 only the rest */
        for (int i = 0; i < h->nsteps; i++)
            if (h->steps[i].kind == STEP_SPLIT && h->steps[i].scan != PRETOK_PAT_NONE) {
                pretok_regex_free(h->steps[i].re);
                h->steps[i].re = NULL;
            }
    }
    if (use_pcre2 || h->fast == FAST_NONE) {
        for (int i = 0; i < h->nsteps; i++)
            if (h->steps[i].kind == STEP_SPLIT && !h->steps[i].re && (use_pcre2 || h->steps[i].scan == PRETOK_PAT_NONE))
                return tok_fail(x->err, x->errlen, TOK_ERR_BUILD, "'%s': %s", x->file,
                                "this build has no PCRE2, which the pre-tokenizer needs (install libpcre2-dev and rebuild)");
        if (use_pcre2 && bl->use_regex) {
            const char *g = pretok_pattern_text(PRETOK_PAT_GPT2);
            char rerr[256];
            int r = pretok_regex_new(&h->gpt2re, g, strlen(g), 0, rerr, sizeof rerr);
            if (r == PRETOK_ERR_NOMEM) return nomem(x);
            if (r) return tok_fail(x->err, x->errlen, r == PRETOK_ERR_NOPCRE2 ? TOK_ERR_BUILD : TOK_ERR_UNSUPPORTED, "'%s': %s",
                                   x->file, rerr);
        }
    }
    /* ids: every model id and added id */
    size_t nids = h->model_ids;
    for (size_t i = 0; i < h->nadded; i++)
        if (h->added[i].id + (size_t)1 > nids) nids = h->added[i].id + (size_t)1;
    for (size_t i = 0; i < h->npre; i++) if (h->pre[i] >= nids) return FORMAT(x, NULL, "the post-processor adds id %u, which no token has", h->pre[i]);
    for (size_t i = 0; i < h->npost; i++) if (h->post[i] >= nids) return FORMAT(x, NULL, "the post-processor adds id %u, which no token has", h->post[i]);
    h->nids = nids;
    h->added_of_id = malloc(nids * sizeof *h->added_of_id);
    h->dec = calloc(nids, sizeof *h->dec);
    h->declen = calloc(nids, sizeof *h->declen);
    if (!h->added_of_id || !h->dec || !h->declen) return nomem(x);
    for (size_t i = 0; i < nids; i++) h->added_of_id[i] = -1;
    size_t extra = 0;
    for (size_t i = 0; i < h->nadded; i++) {
        struct added *e = &h->added[i];
        h->added_of_id[e->id] = (int32_t)i;
        if (vocab_lookup(L, e->content, e->len) < 0) extra++;
        unsigned char *d = malloc(e->len ? e->len : 1);
        if (!d) return nomem(x);
        size_t dl;
        alphabet_bytes(e->content, e->len, d, &dl);
        h->dec[e->id] = d;
        h->declen[e->id] = (uint32_t)dl;
    }
    h->vocab_size = h->model_count + extra;
    size_t l;
    for (size_t i = 0; i < h->npre; i++)
        if (!hf_token_bytes(h, h->pre[i], &l)) return FORMAT(x, NULL, "the post-processor adds id %u, which no token has", h->pre[i]);
    for (size_t i = 0; i < h->npost; i++)
        if (!hf_token_bytes(h, h->post[i], &l)) return FORMAT(x, NULL, "the post-processor adds id %u, which no token has", h->post[i]);
    return build_tries(L);
}

static void describe(hf_tokenizer *h)
{
    static const char *const scanner[] = {"", "GPT-2 scanner", "Llama 3 scanner", "Qwen2 scanner", "Tekken scanner"};
    const char *pt = h->fast == FAST_GPT2 ? scanner[PRETOK_PAT_GPT2] :
                     h->fast == FAST_SCAN ? scanner[h->fast_scan] : "PCRE2 pipeline";
    int w = snprintf(h->desc, sizeof h->desc, "HuggingFaceTokenizer '%s': byte-level BPE, %zu ids, %s%s", h->file,
                     h->vocab_size, pt, h->nfc ? ", NFC" : "");
    for (size_t i = 0; i < h->npre && w > 0 && (size_t)w < sizeof h->desc; i++)
        w += snprintf(h->desc + w, sizeof h->desc - (size_t)w, ", adds %u first", h->pre[i]);
    for (size_t i = 0; i < h->npost && w > 0 && (size_t)w < sizeof h->desc; i++)
        w += snprintf(h->desc + w, sizeof h->desc - (size_t)w, ", adds %u last", h->post[i]);
    if (w > 0 && (size_t)w < sizeof h->desc) {
        if (h->eos >= 0) snprintf(h->desc + w, sizeof h->desc - (size_t)w, ", eos %lld", (long long)h->eos);
        else snprintf(h->desc + w, sizeof h->desc - (size_t)w, ", no eos");
    }
}

int hf_open(hf_tokenizer **out, const char *path, int use_pcre2, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen) err[0] = 0;
    hf_tokenizer *h = calloc(1, sizeof *h);
    if (!h) return tok_fail(err, errlen, TOK_ERR_NOMEM, "out of memory");
    char *dir = NULL;
    if (is_dir(path)) {
        dir = xstrndup(path, strlen(path));
        h->file = path_join(path, "tokenizer.json");
    } else {
        h->file = xstrndup(path, strlen(path));
        const char *sl = strrchr(path, '/');
        dir = sl ? xstrndup(path, (size_t)(sl - path)) : xstrndup(".", 1);
    }
    struct loader L;
    memset(&L, 0, sizeof L);
    L.h = h;
    L.x = (struct ctx){ h->file ? h->file : path, err, errlen };
    jt_doc *doc = NULL, *cdoc = NULL, *mdoc = NULL;
    char *cfgpath = NULL;
    int rc = 0;
    if (!dir || !h->file) { rc = tok_fail(err, errlen, TOK_ERR_NOMEM, "out of memory"); goto done; }
    rc = jt_parse_file(&doc, h->file, err, errlen);
    if (rc == JT_ERR_IO) { rc = TOK_ERR_IO; goto done; }
    if (rc == JT_ERR_NOMEM) { rc = TOK_ERR_NOMEM; goto done; }
    if (rc) {
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s", err ? err : "");
        rc = tok_fail(err, errlen, TOK_ERR_FORMAT, "invalid tokenizer file %s", tmp);
        goto done;
    }
    const jt_node *root = jt_root(doc);
    if (root->type != JT_OBJECT) { rc = FORMAT(&L.x, root, "the file must hold a JSON object"); goto done; }
    const jt_node *ver = get_str(&L.x, root, "version", 0, &rc);
    if (rc) goto done;
    if (ver && strcmp(ver->str, "1.0") != 0) { rc = FORMAT(&L.x, ver, "unknown tokenizer version '%s'", ver->str); goto done; }
    const jt_node *model = jt_get(root, "model");
    if (!model) { rc = FORMAT(&L.x, root, "no 'model'"); goto done; }
    if ((rc = load_model(&L, model))) goto done;
    if ((rc = parse_normalizer(&L, jt_get(root, "normalizer")))) goto done;
    if ((rc = parse_pretokenizer(&L, jt_get(root, "pre_tokenizer")))) goto done;
    if ((rc = parse_postprocessor(&L, jt_get(root, "post_processor")))) goto done;
    if (h->nfc && nfc_init() != 0) { rc = nomem(&L.x); goto done; }

    /* added tokens: one add_tokens call with every entry, ids as it gives them */
    const jt_node *at = jt_get(root, "added_tokens");
    size_t nat = at && at->type == JT_ARRAY ? at->len : 0;
    if (at && at->type != JT_ARRAY && at->type != JT_NULL) { rc = FORMAT(&L.x, at, "'added_tokens' must be an array"); goto done; }
    L.special_order = malloc((nat + 128) * sizeof *L.special_order);
    L.plain_order = malloc((nat + 128) * sizeof *L.plain_order);
    struct new_token *nt = malloc((nat ? nat : 1) * sizeof *nt);
    if (!L.special_order || !L.plain_order || !nt) { free(nt); rc = nomem(&L.x); goto done; }
    for (size_t i = 0; i < nat && !rc; i++) {
        const jt_node *t = &at->kids[i];
        if (t->type != JT_OBJECT) { rc = FORMAT(&L.x, t, "an added token must be an object"); break; }
        const jt_node *c = get_str(&L.x, t, "content", 1, &rc);
        if (rc) break;
        const jt_node *id = jt_get(t, "id");
        if (id && !is_u32(id)) { rc = FORMAT(&L.x, id, "an added token's id must be a non-negative integer"); break; }
        nt[i] = (struct new_token){ c->str, c->len, 0, 1, 0, 0, 0 };
        if ((rc = get_bool(&L.x, t, "special", 0, &nt[i].special)) || (rc = get_bool(&L.x, t, "normalized", !nt[i].special, &nt[i].normalized)) ||
            (rc = get_bool(&L.x, t, "lstrip", 0, &nt[i].lstrip)) || (rc = get_bool(&L.x, t, "rstrip", 0, &nt[i].rstrip)) ||
            (rc = get_bool(&L.x, t, "single_word", 0, &nt[i].single_word)))
            break;
    }
    if (!rc && nat) rc = add_tokens(&L, nt, nat);
    free(nt);
    if (rc) goto done;

    const struct tclass *cls;
    const jt_node *cfg;
    if ((rc = load_config(&L, dir, &cls, &cfg, &cdoc, &mdoc))) goto done;
    cfgpath = cfg ? path_join(dir, "tokenizer_config.json") : NULL;
    if ((rc = apply_config(&L, cls, cfg, mdoc, cfgpath))) goto done;
    if ((rc = finish(&L, use_pcre2))) goto done;
    describe(h);
done:
    jt_free(doc);
    jt_free(cdoc);
    jt_free(mdoc);
    free(cfgpath);
    free(dir);
    free(L.vi);
    free(L.special_order);
    free(L.plain_order);
    if (rc) {
        hf_free(h);
        return rc;
    }
    *out = h;
    return 0;
}

void hf_free(hf_tokenizer *h)
{
    if (!h) return;
    bpe_free(h->model);
    for (size_t i = 0; i < h->nadded; i++) {
        free(h->added[i].content);
        free(h->added[i].norm);
    }
    free(h->added);
    if (h->dec)
        for (size_t i = 0; i < h->nids; i++) free(h->dec[i]);
    free(h->dec);
    free(h->declen);
    free(h->added_of_id);
    trie_free(&h->raw);
    trie_free(&h->norm);
    for (int i = 0; i < h->nsteps; i++) pretok_regex_free(h->steps[i].re);
    pretok_regex_free(h->gpt2re);
    free(h->file);
    free(h);
}

size_t hf_vocab_size(const hf_tokenizer *h) { return h->vocab_size; }
int64_t hf_eos_id(const hf_tokenizer *h) { return h->eos; }
const char *hf_describe(const hf_tokenizer *h) { return h->desc; }

const unsigned char *hf_token_bytes(const hf_tokenizer *h, uint32_t id, size_t *len)
{
    if (id < h->nids && h->added_of_id[id] >= 0) {
        *len = h->declen[id];
        return h->dec[id];
    }
    return bpe_token_bytes(h->model, id, len);
}

/* ------------------------------------------------------------------------ */
/* encoding                                                                   */

int hf_state_new(const hf_tokenizer *h, hf_state **out)
{
    *out = NULL;
    hf_state *s = calloc(1, sizeof *s);
    if (!s || bpe_cache_new(&s->cache, 1u << 14) != 0) goto fail;
    for (int i = 0; i < h->nsteps; i++)
        if (h->steps[i].re && pretok_match_new(&s->m[i], h->steps[i].re) != 0) goto fail;
    if (h->gpt2re && pretok_match_new(&s->gpt2m, h->gpt2re) != 0) goto fail;
    *out = s;
    return 0;
fail:
    hf_state_free(s);
    return TOK_ERR_NOMEM;
}

void hf_state_free(hf_state *s)
{
    if (!s) return;
    bpe_cache_free(s->cache);
    for (int i = 0; i < MAX_STEPS; i++) pretok_match_free(s->m[i]);
    pretok_match_free(s->gpt2m);
    nfc_scratch_release(&s->nfcs);
    free(s->nbuf);
    free(s->arena);
    free(s->pa);
    free(s->pb);
    free(s->ms);
    free(s);
}

static int grow_bytes(unsigned char **p, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    unsigned char *q = realloc(*p, c);
    if (!q) return TOK_ERR_NOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static int bpe_out(const hf_tokenizer *h, hf_state *st, const unsigned char *p, size_t n, tok_ids *out)
{
    if (tok_ids_reserve(out, n)) return TOK_ERR_NOMEM;
    out->n += bpe_encode_piece(h->model, st->cache, p, n, out->ids + out->n);
    return 0;
}

/* A piece with ByteLevel's prefix space when it lacks one. */
static int bpe_prefixed(const hf_tokenizer *h, hf_state *st, const unsigned char *p, size_t n, tok_ids *out)
{
    if (n && p[0] == ' ') return bpe_out(h, st, p, n, out);
    if (grow_bytes(&st->arena, &st->acap, n + 1)) return TOK_ERR_NOMEM;
    st->arena[0] = ' ';
    memcpy(st->arena + 1, p, n);
    return bpe_out(h, st, st->arena, n + 1, out);
}

static int push_piece(struct piece **v, size_t *n, size_t *cap, size_t off, size_t len)
{
    if (len == 0) return 0;   /* tokenizers drops empty splits */
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        struct piece *q = realloc(*v, c * sizeof *q);
        if (!q) return TOK_ERR_NOMEM;
        *v = q;
        *cap = c;
    }
    (*v)[(*n)++] = (struct piece){ off, len };
    return 0;
}

/* tokenizers' Pattern::find_matches for one piece: gaps and matches, the way
 * onig's find_iter walks (an empty match right after the previous match is
 * skipped by one character). */
static int find_matches(const struct step *sp, pretok_match *m, hf_state *st, const unsigned char *s, size_t n, size_t *nm)
{
    size_t k = 0, prev = 0, at = 0, last_end = 0;
    int have_last = 0;
#define ADD(a, b, mt) do { \
        if (k == st->mscap) { \
            size_t c_ = st->mscap ? st->mscap * 2 : 256; \
            void *q_ = realloc(st->ms, c_ * sizeof *st->ms); \
            if (!q_) return TOK_ERR_NOMEM; \
            st->ms = q_; \
            st->mscap = c_; \
        } \
        st->ms[k].s = (a); st->ms[k].e = (b); st->ms[k].m = (mt); k++; \
    } while (0)
    if (sp->scan != PRETOK_PAT_NONE && !sp->re) {
        /* a scanner: every piece is a match */
        pretok_next_fn next = pretok_scanner(sp->scan);
        for (size_t pos = 0; pos < n;) {
            size_t e = next(s, n, pos);
            ADD(pos, e, 1);
            pos = e;
        }
        *nm = k;
        return 0;
    }
    while (at <= n) {
        size_t ms, me;
        int r = pretok_regex_search(sp->re, m, s, n, at, &ms, &me);
        if (r < 0) return TOK_ERR_ENCODE;
        if (r == 0) break;
        if (me == ms && have_last && last_end == me) {
            if (at >= n) break;
            unsigned c = s[at];
            at += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            continue;
        }
        if (prev != ms) ADD(prev, ms, 0);
        ADD(ms, me, 1);
        prev = me;
        last_end = me;
        have_last = 1;
        at = me;
    }
    if (prev != n) ADD(prev, n, 0);
#undef ADD
    *nm = k;
    return 0;
}

/* NormalizedString::split with a behavior, appending the kept pieces. */
static int split_piece(const struct step *sp, hf_state *st, size_t nm, size_t base, struct piece **v, size_t *nv, size_t *cap)
{
    int inv = sp->invert;
    for (size_t i = 0; i < nm; i++) st->ms[i].m ^= inv;
    int rc = 0;
    switch (sp->behavior) {
    case BEH_ISOLATED:
        for (size_t i = 0; i < nm && !rc; i++) rc = push_piece(v, nv, cap, base + st->ms[i].s, st->ms[i].e - st->ms[i].s);
        break;
    case BEH_REMOVED:
        for (size_t i = 0; i < nm && !rc; i++)
            if (!st->ms[i].m) rc = push_piece(v, nv, cap, base + st->ms[i].s, st->ms[i].e - st->ms[i].s);
        break;
    case BEH_CONTIGUOUS: case BEH_MERGED_PREV: {
        /* fold left: equal neighbours merge (contiguous), or a match joins the piece before it */
        size_t s0 = 0, e0 = 0;
        int have = 0, prevm = 0;
        for (size_t i = 0; i < nm && !rc; i++) {
            int m = st->ms[i].m;
            int join = have && (sp->behavior == BEH_CONTIGUOUS ? m == prevm : (m && !prevm));
            if (join) {
                e0 = st->ms[i].e;
            } else {
                if (have) rc = push_piece(v, nv, cap, base + s0, e0 - s0);
                s0 = st->ms[i].s;
                e0 = st->ms[i].e;
                have = 1;
            }
            prevm = m;
        }
        if (have && !rc) rc = push_piece(v, nv, cap, base + s0, e0 - s0);
        break;
    }
    case BEH_MERGED_NEXT: {
        /* fold from the right: a match joins the piece after it */
        size_t first = *nv;
        size_t s0 = 0, e0 = 0;
        int have = 0, prevm = 0;
        for (size_t i = nm; i-- > 0 && !rc;) {
            int m = st->ms[i].m;
            if (have && m && !prevm) {
                s0 = st->ms[i].s;
            } else {
                if (have) rc = push_piece(v, nv, cap, base + s0, e0 - s0);
                s0 = st->ms[i].s;
                e0 = st->ms[i].e;
                have = 1;
            }
            prevm = m;
        }
        if (have && !rc) rc = push_piece(v, nv, cap, base + s0, e0 - s0);
        /* pieces were pushed right to left */
        for (size_t a = first, b = *nv; a + 1 < b; a++, b--) {
            struct piece t = (*v)[a];
            (*v)[a] = (*v)[b - 1];
            (*v)[b - 1] = t;
        }
        break;
    }
    }
    return rc;
}

/* The general pipeline on one part of normalized text. */
static int pipeline(const hf_tokenizer *h, hf_state *st, const unsigned char *s, size_t n, tok_ids *out)
{
    if (grow_bytes(&st->arena, &st->acap, n)) return TOK_ERR_NOMEM;
    memcpy(st->arena, s, n);
    st->alen = n;
    size_t na = 0, nb = 0;
    int rc = push_piece(&st->pa, &na, &st->pacap, 0, n);
    for (int k = 0; k < h->nsteps && !rc; k++) {
        const struct step *sp = &h->steps[k];
        nb = 0;
        for (size_t i = 0; i < na && !rc; i++) {
            struct piece p = st->pa[i];
            if (sp->kind == STEP_BYTELEVEL) {
                if (sp->prefix && st->arena[p.off] != ' ') {
                    if (grow_bytes(&st->arena, &st->acap, st->alen + p.len + 1)) return TOK_ERR_NOMEM;
                    st->arena[st->alen] = ' ';
                    memmove(st->arena + st->alen + 1, st->arena + p.off, p.len);
                    p.off = st->alen;
                    p.len += 1;
                    st->alen += p.len;
                }
                if (!sp->use_regex) {
                    rc = push_piece(&st->pb, &nb, &st->pbcap, p.off, p.len);
                    continue;
                }
                struct step g = { STEP_SPLIT, h->gpt2re, h->gpt2re ? PRETOK_PAT_NONE : PRETOK_PAT_GPT2, BEH_ISOLATED, 0, 0, 0 };
                size_t nm;
                rc = find_matches(&g, st->gpt2m, st, st->arena + p.off, p.len, &nm);
                if (!rc) rc = split_piece(&g, st, nm, p.off, &st->pb, &nb, &st->pbcap);
            } else {
                size_t nm;
                rc = find_matches(sp, st->m[k], st, st->arena + p.off, p.len, &nm);
                if (!rc) rc = split_piece(sp, st, nm, p.off, &st->pb, &nb, &st->pbcap);
            }
        }
        struct piece *t = st->pa;
        st->pa = st->pb;
        st->pb = t;
        size_t tc = st->pacap;
        st->pacap = st->pbcap;
        st->pbcap = tc;
        na = nb;
    }
    for (size_t i = 0; i < na && !rc; i++) rc = bpe_out(h, st, st->arena + st->pa[i].off, st->pa[i].len, out);
    return rc;
}

/* Pre-tokenizes and encodes one part (no added tokens in it). */
static int encode_part(const hf_tokenizer *h, hf_state *st, const unsigned char *s, size_t n, tok_ids *out)
{
    if (n == 0) return 0;
    if (h->fast == FAST_GPT2) {
        if (h->prefix_segment && s[0] != ' ') {
            if (grow_bytes(&st->arena, &st->acap, n + 1)) return TOK_ERR_NOMEM;
            st->arena[0] = ' ';
            memcpy(st->arena + 1, s, n);
            s = st->arena;
            n++;
        }
        if (tok_ids_reserve(out, n)) return TOK_ERR_NOMEM;
        for (size_t pos = 0; pos < n;) {
            size_t e = pretok_gpt2_hf_next(s, n, pos);
            out->n += bpe_encode_piece(h->model, st->cache, s + pos, e - pos, out->ids + out->n);
            pos = e;
        }
        return 0;
    }
    if (h->fast == FAST_SCAN) {
        if (!h->prefix_piece) {
            if (tok_ids_reserve(out, n)) return TOK_ERR_NOMEM;
            for (size_t pos = 0; pos < n;) {
                size_t e = h->scan_next(s, n, pos);
                out->n += bpe_encode_piece(h->model, st->cache, s + pos, e - pos, out->ids + out->n);
                pos = e;
            }
            return 0;
        }
        for (size_t pos = 0; pos < n;) {
            size_t e = h->scan_next(s, n, pos);
            int rc = bpe_prefixed(h, st, s + pos, e - pos, out);
            if (rc) return rc;
            pos = e;
        }
        return 0;
    }
    return pipeline(h, st, s, n, out);
}

static int emit_added(tok_ids *out, uint32_t id)
{
    if (tok_ids_reserve(out, 1)) return TOK_ERR_NOMEM;
    out->ids[out->n++] = id;
    return 0;
}

static inline int is_ws_at(const unsigned char *s, size_t n, size_t i, size_t *len)
{
    unsigned c = s[i];
    if (c < 0x80) {
        *len = 1;
        return c == ' ' || (c >= 0x09 && c <= 0x0D);
    }
    uint32_t cp;
    if (c < 0xE0 && i + 1 < n) { cp = (c & 0x1Fu) << 6 | (s[i + 1] & 0x3Fu); *len = 2; }
    else if (c < 0xF0 && i + 2 < n) { cp = (c & 0x0Fu) << 12 | (s[i + 1] & 0x3Fu) << 6 | (s[i + 2] & 0x3Fu); *len = 3; }
    else { *len = c < 0xF0 ? 1 : 4; if (*len > n - i) *len = 1; return 0; }
    for (size_t k = 0; k < unitab_space_len; k++)
        if (cp >= unitab_space[k][0] && cp <= unitab_space[k][1]) return 1;
    return 0;
}

/* Start of the whitespace run that ends at `end` (regex \s*$ on s[0..end)). */
static size_t ws_before(const unsigned char *s, size_t end)
{
    size_t i = end;
    while (i > 0) {
        size_t p = i - 1;
        while (p > 0 && (s[p] & 0xC0) == 0x80) p--;
        size_t l;
        if (!is_ws_at(s, end, p, &l)) break;
        i = p;
    }
    return i;
}

/* End of the whitespace run starting at `from` (regex ^\s* on s[from..n)). */
static size_t ws_after(const unsigned char *s, size_t n, size_t from)
{
    size_t i = from, l;
    while (i < n && is_ws_at(s, n, i, &l)) i += l;
    return i;
}

/*
 * AddedVocabulary::find_matches + split on one text with a trie, then `part`
 * on each gap.  normalized_stage: the trie of normalized tokens (its gaps are
 * pre-tokenized); otherwise each gap is normalized and searched again.
 */
static int encode_normalized(const hf_tokenizer *h, hf_state *st, const unsigned char *s, size_t n, tok_ids *out);

static int split_added(const hf_tokenizer *h, hf_state *st, const struct trie *t, int have, const unsigned char *s, size_t n,
                       int normalized_stage, tok_ids *out)
{
    size_t start_offset = 0, from = 0;
    int rc = 0;
    while (have && from < n) {
        size_t ms, me;
        int32_t a;
        if (!trie_find(t, s, n, from, &ms, &me, &a)) break;
        const struct added *e = &h->added[a];
        size_t start = ms, stop = me;
        if (e->lstrip) {
            size_t ns = ws_before(s, ms);
            start = ns > start_offset ? ns : start_offset;
        }
        if (e->rstrip) stop = ws_after(s, n, me);
        if (start < start_offset) start = start_offset;   /* rstrip overlap (see docs) */
        if (start_offset < start) {
            rc = normalized_stage ? encode_part(h, st, s + start_offset, start - start_offset, out)
                                  : encode_normalized(h, st, s + start_offset, start - start_offset, out);
            if (rc) return rc;
        }
        if ((rc = emit_added(out, e->id))) return rc;
        start_offset = stop > start_offset ? stop : start_offset;
        from = me;
    }
    if (start_offset < n)
        rc = normalized_stage ? encode_part(h, st, s + start_offset, n - start_offset, out)
                              : encode_normalized(h, st, s + start_offset, n - start_offset, out);
    return rc;
}

static int encode_normalized(const hf_tokenizer *h, hf_state *st, const unsigned char *s, size_t n, tok_ids *out)
{
    if (n == 0) return 0;
    if (h->nfc && nfc_quick_check(s, n) < n) {
        /* the normalized text lives in st->nbuf while its pieces are encoded;
           a nested call cannot happen (normalized parts hold no raw tokens) */
        if (grow_bytes(&st->nbuf, &st->ncap, nfc_bound(n))) return TOK_ERR_NOMEM;
        size_t m = nfc_normalize(s, n, st->nbuf, &st->nfcs);
        if (m == SIZE_MAX) return TOK_ERR_NOMEM;
        return split_added(h, st, &h->norm, h->has_norm, st->nbuf, m, 1, out);
    }
    return split_added(h, st, &h->norm, h->has_norm, s, n, 1, out);
}

int hf_encode(const hf_tokenizer *h, hf_state *st, const unsigned char *s, size_t n, tok_ids *out)
{
    size_t mark = out->n;
    int rc = tok_ids_reserve(out, h->npre + h->npost);
    for (size_t i = 0; i < h->npre && !rc; i++) out->ids[out->n++] = h->pre[i];
    if (!rc) rc = split_added(h, st, &h->raw, h->has_raw, s, n, 0, out);
    if (!rc) rc = tok_ids_reserve(out, h->npost);
    for (size_t i = 0; i < h->npost && !rc; i++) out->ids[out->n++] = h->post[i];
    if (rc) out->n = mark;
    return rc;
}
