/*
 * tokenizer.c - the tokenizer interface (tokenizer.h): Megatron's wrappers
 * around each engine.
 *
 *   GPT2BPETokenizer          bpe.c + pretok.c through tokenize.c, exactly the
 *                             loop mdsprep had before this interface (same
 *                             code, one switch in front);
 *   HuggingFaceTokenizer      hf.c; eod = eos_token_id;
 *   SentencePieceTokenizer    sp.c, plus Megatron's _SentencePieceTokenizer:
 *                             <CLS> <SEP> <EOD> <MASK> and the pad, bos and eos
 *                             pieces become special tokens (added after the
 *                             pieces when missing); text is cut at the first
 *                             occurrence of any of them, each part encoded
 *                             alone; eod = <EOD>;
 *   GPTSentencePieceTokenizer sp.c as is; eod = eos_id;
 *   Llama2Tokenizer           sp.c with bos_id before every text; eod = eos_id.
 *
 * It does not know about documents, JSON or the output format.
 */
#include "tokenizer_internal.h"
#include "bpe.h"
#include "pretok.h"
#include "tokenize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EOD_TEXT "<|endoftext|>"
#define MAX_SP_SPECIAL 7

struct tok {
    int type;
    char desc[400];
    /* GPT-2 */
    bpe *gpt2;
    int special, use_pcre2;
    int64_t gpt2_eod;
    /* HuggingFace */
    hf_tokenizer *hf;
    /* SentencePiece */
    sp_model *sp;
    size_t vocab;
    int64_t eod, bos;
    struct { char *s; size_t len; uint32_t id; } spec[MAX_SP_SPECIAL];   /* insertion order */
    size_t nspec;
    unsigned char *added_text[MAX_SP_SPECIAL];   /* decode bytes of the added special ids */
    size_t added_len[MAX_SP_SPECIAL];
    uint32_t added_id[MAX_SP_SPECIAL];
    size_t nadded;
};

struct tok_state {
    bpe_cache *cache;
    pretok_pcre2 *pcre;
    hf_state *hf;
    sp_state *sp;
};

/* Messages quote names and tokens from the files: control characters in them
 * become '?', so a message is always one line. */
int tok_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        for (char *p = err; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7F) *p = '?';
    }
    return code;
}

int tok_ids_reserve(tok_ids *o, size_t extra)
{
    if (o->cap - o->n >= extra) return 0;
    size_t c = o->cap ? o->cap : 1024;
    while (c - o->n < extra) {
        if (c > SIZE_MAX / 2 / sizeof *o->ids) return TOK_ERR_NOMEM;
        c *= 2;
    }
    uint32_t *p = realloc(o->ids, c * sizeof *p);
    if (!p) return TOK_ERR_NOMEM;
    o->ids = p;
    o->cap = c;
    return 0;
}

static const char *const type_names[] = {NULL, "GPT2BPETokenizer", "HuggingFaceTokenizer", "SentencePieceTokenizer",
                                         "GPTSentencePieceTokenizer", "Llama2Tokenizer"};

int tok_type_from_name(const char *name)
{
    for (int i = 1; i <= TOK_LLAMA2; i++)
        if (strcmp(name, type_names[i]) == 0) return i;
    return 0;
}

const char *tok_type_name(int type)
{
    return type >= 1 && type <= TOK_LLAMA2 ? type_names[type] : "?";
}

const char *tok_type_class(int type)
{
    static const char *const cls[] = {NULL, "_GPT2BPETokenizer", "_HuggingFaceTokenizer", "_SentencePieceTokenizer",
                                      "_GPTSentencePieceTokenizer", "_Llama2Tokenizer"};
    return type >= 1 && type <= TOK_LLAMA2 ? cls[type] : "?";
}

const char *tok_strerror(int code)
{
    switch (code) {
    case TOK_OK: return "success";
    case TOK_ERR_IO: return "cannot read a tokenizer file";
    case TOK_ERR_NOMEM: return "out of memory";
    case TOK_ERR_FORMAT: return "malformed tokenizer file";
    case TOK_ERR_UNSUPPORTED: return "tokenizer feature not supported";
    case TOK_ERR_ARG: return "invalid tokenizer options";
    case TOK_ERR_ENCODE: return "the text cannot be encoded (the regex engine's limits, or too long)";
    case TOK_ERR_BUILD: return "this build lacks a library the tokenizer needs";
    default: return "unknown error";
    }
}

/* Megatron's _SentencePieceTokenizer._initalize: the special tokens. */
static int sp_specials(tok *t, char *err, size_t errlen)
{
    const sp_model *m = t->sp;
    size_t n = sp_piece_size(m);
    t->vocab = n;
    char pad[256], bos[256], eos[256];
    const char *names[MAX_SP_SPECIAL] = {"<CLS>", "<SEP>", "<EOD>", "<MASK>", pad, bos, eos};
    int64_t ids[3] = {sp_pad_id(m), sp_bos_id(m), sp_eos_id(m)};
    const char *dflt[3] = {"<PAD>", "<BOS>", "<EOS>"};
    char *bufs[3] = {pad, bos, eos};
    for (int k = 0; k < 3; k++) {
        size_t l;
        const char *p = sp_id_to_piece(m, ids[k], &l);   /* IndexError for -1: the default name */
        if (!p) { p = dflt[k]; l = strlen(p); }
        if (l >= 256) return tok_fail(err, errlen, TOK_ERR_UNSUPPORTED, "a special piece longer than 255 bytes");
        memcpy(bufs[k], p, l);
        bufs[k][l] = 0;
    }
    for (int k = 0; k < MAX_SP_SPECIAL; k++) {
        const char *s = names[k];
        size_t l = strlen(s);
        /* in the vocabulary (a piece with that text)? Python's dict keeps the
           id of the last piece with that text, and pieces are unique */
        int64_t id = -1;
        for (size_t i = 0; i < n && id < 0; i++) {
            size_t pl;
            const char *p = sp_id_to_piece(m, (int64_t)i, &pl);
            if (pl == l && memcmp(p, s, l) == 0) id = (int64_t)i;
        }
        for (size_t j = 0; j < t->nadded && id < 0; j++)
            if (t->added_len[j] == l && memcmp(t->added_text[j], s, l) == 0) id = t->added_id[j];
        if (id < 0) {
            id = (int64_t)t->vocab++;
            t->added_text[t->nadded] = (unsigned char *)strdup(s);
            if (!t->added_text[t->nadded]) return tok_fail(err, errlen, TOK_ERR_NOMEM, "out of memory");
            t->added_len[t->nadded] = l;
            t->added_id[t->nadded++] = (uint32_t)id;
        }
        int dup = 0;
        for (size_t j = 0; j < t->nspec; j++) dup |= t->spec[j].len == l && memcmp(t->spec[j].s, s, l) == 0;
        if (!dup) {
            t->spec[t->nspec].s = strdup(s);
            if (!t->spec[t->nspec].s) return tok_fail(err, errlen, TOK_ERR_NOMEM, "out of memory");
            t->spec[t->nspec].len = l;
            t->spec[t->nspec].id = (uint32_t)id;
            t->nspec++;
        }
        if (k == 2) t->eod = id;
    }
    return 0;
}

int tok_open(tok **out, const tok_options *o, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen) err[0] = 0;
    if (!o || o->type < 1 || o->type > TOK_LLAMA2) return tok_fail(err, errlen, TOK_ERR_ARG, "unknown tokenizer type");
    tok *t = calloc(1, sizeof *t);
    if (!t) return tok_fail(err, errlen, TOK_ERR_NOMEM, "out of memory");
    t->type = o->type;
    t->eod = -1;
    t->bos = -1;
    int rc = 0;
    switch (o->type) {
    case TOK_GPT2BPE: {
        if (!o->vocab_file || !o->merge_file) { rc = tok_fail(err, errlen, TOK_ERR_ARG, "GPT2BPETokenizer needs a vocab and a merges file"); break; }
        int b = bpe_load(&t->gpt2, o->vocab_file, o->merge_file, err, errlen);
        if (b) { rc = b == BPE_ERR_IO ? TOK_ERR_IO : b == BPE_ERR_NOMEM ? TOK_ERR_NOMEM : TOK_ERR_FORMAT; break; }
        t->special = o->gpt2_special_tokens;
        t->use_pcre2 = o->use_pcre2;
        t->gpt2_eod = bpe_token_id(t->gpt2, EOD_TEXT, sizeof EOD_TEXT - 1);
        t->eod = t->gpt2_eod;
        t->vocab = bpe_vocab_size(t->gpt2);
        pretok_init();
        if (o->use_pcre2) {
            pretok_pcre2 *p;
            if (pretok_pcre2_new(&p, err, errlen) != 0) { rc = pretok_have_pcre2() ? TOK_ERR_NOMEM : TOK_ERR_BUILD; break; }
            pretok_pcre2_free(p);
        }
        if (t->special && t->gpt2_eod < 0) {
            rc = tok_fail(err, errlen, TOK_ERR_FORMAT, "vocabulary '%s' has no '" EOD_TEXT "' token", o->vocab_file);
            break;
        }
        snprintf(t->desc, sizeof t->desc, "GPT2BPETokenizer '%s' + '%s': %zu ids, eod %lld%s", o->vocab_file, o->merge_file,
                 t->vocab, (long long)t->eod, t->special ? ", <|endoftext|> in text is special" : "");
        break;
    }
    case TOK_HUGGINGFACE:
        if (!o->model) { rc = tok_fail(err, errlen, TOK_ERR_ARG, "HuggingFaceTokenizer needs --tokenizer-model"); break; }
        rc = hf_open(&t->hf, o->model, o->use_pcre2, err, errlen);
        if (rc) break;
        pretok_init_hf();
        t->vocab = hf_vocab_size(t->hf);
        t->eod = hf_eos_id(t->hf);
        snprintf(t->desc, sizeof t->desc, "%s", hf_describe(t->hf));
        break;
    default:
        if (!o->model) { rc = tok_fail(err, errlen, TOK_ERR_ARG, "%s needs --tokenizer-model", tok_type_name(o->type)); break; }
        rc = sp_open(&t->sp, o->model, o->sp_whole_text, err, errlen);
        if (rc) break;
        t->vocab = sp_piece_size(t->sp);
        if (o->type == TOK_SENTENCEPIECE) {
            rc = sp_specials(t, err, errlen);
        } else {
            t->eod = sp_eos_id(t->sp);
            if (o->type == TOK_LLAMA2) {
                t->bos = sp_bos_id(t->sp);
                if (t->bos < 0)
                    rc = tok_fail(err, errlen, TOK_ERR_UNSUPPORTED,
                                  "'%s': Llama2Tokenizer needs a bos piece (bos_id() is -1; Megatron would prepend -1)", o->model);
            }
        }
        if (!rc)
            snprintf(t->desc, sizeof t->desc, "%s: %s, %zu ids, eod %lld%s", tok_type_name(o->type), sp_describe(t->sp), t->vocab,
                     (long long)t->eod, t->bos >= 0 ? ", BOS before every text" : "");
        break;
    }
    if (rc) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void tok_free(tok *t)
{
    if (!t) return;
    bpe_free(t->gpt2);
    hf_free(t->hf);
    sp_free(t->sp);
    for (size_t i = 0; i < t->nspec; i++) free(t->spec[i].s);
    for (size_t i = 0; i < t->nadded; i++) free(t->added_text[i]);
    free(t);
}

int tok_type(const tok *t) { return t->type; }
size_t tok_vocab_size(const tok *t) { return t->vocab; }
int64_t tok_eod(const tok *t) { return t->eod; }
const char *tok_describe(const tok *t) { return t->desc; }

int tok_state_new(const tok *t, tok_state **out)
{
    *out = NULL;
    tok_state *s = calloc(1, sizeof *s);
    if (!s) return TOK_ERR_NOMEM;
    int rc = 0;
    if (t->gpt2) {
        char err[256];
        if (bpe_cache_new(&s->cache, 1u << 14) != 0) rc = TOK_ERR_NOMEM;
        else if (t->use_pcre2 && pretok_pcre2_new(&s->pcre, err, sizeof err) != 0) rc = TOK_ERR_NOMEM;
    } else if (t->hf) {
        rc = hf_state_new(t->hf, &s->hf);
    } else {
        rc = sp_state_new(t->sp, &s->sp);
    }
    if (rc) {
        tok_state_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void tok_state_free(tok_state *s)
{
    if (!s) return;
    bpe_cache_free(s->cache);
    pretok_pcre2_free(s->pcre);
    hf_state_free(s->hf);
    sp_state_free(s->sp);
    free(s);
}

static int gpt2_plain(const tok *t, tok_state *st, const unsigned char *s, size_t n, tok_ids *out)
{
    if (tok_ids_reserve(out, bpe_encode_bound(n))) return TOK_ERR_NOMEM;
    tokenize_ctx c = { t->gpt2, st->cache, st->pcre };
    out->n += tokenize_text(&c, s, n, out->ids + out->n);
    return 0;
}

/* Megatron's _SentencePieceTokenizer.tokenize: cut at the earliest special
 * token (the first in insertion order among those starting there). */
static int sp_split_specials(const tok *t, tok_state *st, const unsigned char *s, size_t n, tok_ids *out)
{
    for (;;) {
        size_t best = SIZE_MAX, bi = 0;
        for (size_t k = 0; k < t->nspec; k++) {
            const unsigned char *m = memmem(s, n, t->spec[k].s, t->spec[k].len);
            if (m && (size_t)(m - s) < best) {
                best = (size_t)(m - s);
                bi = k;
            }
        }
        if (best == SIZE_MAX) break;
        int rc = sp_encode(t->sp, st->sp, s, best, out);
        if (rc) return rc;
        if (tok_ids_reserve(out, 1)) return TOK_ERR_NOMEM;
        out->ids[out->n++] = t->spec[bi].id;
        s += best + t->spec[bi].len;
        n -= best + t->spec[bi].len;
    }
    return sp_encode(t->sp, st->sp, s, n, out);
}

int tok_encode(const tok *t, tok_state *st, const unsigned char *s, size_t n, tok_ids *out)
{
    size_t mark = out->n;
    int rc = 0;
    switch (t->type) {
    case TOK_GPT2BPE:
        if (!t->special) return gpt2_plain(t, st, s, n, out);
        /* an added token like HF's: every literal <|endoftext|> is id 50256 */
        for (;;) {
            const unsigned char *m = memmem(s, n, EOD_TEXT, sizeof EOD_TEXT - 1);
            size_t part = m ? (size_t)(m - s) : n;
            if ((rc = gpt2_plain(t, st, s, part, out))) break;
            if (!m) break;
            if ((rc = tok_ids_reserve(out, 1))) break;
            out->ids[out->n++] = (uint32_t)t->gpt2_eod;
            s += part + sizeof EOD_TEXT - 1;
            n -= part + sizeof EOD_TEXT - 1;
        }
        break;
    case TOK_HUGGINGFACE:
        rc = hf_encode(t->hf, st->hf, s, n, out);
        break;
    case TOK_SENTENCEPIECE:
        rc = sp_split_specials(t, st, s, n, out);
        break;
    case TOK_LLAMA2:
        if ((rc = tok_ids_reserve(out, 1))) break;
        out->ids[out->n++] = (uint32_t)t->bos;
        rc = sp_encode(t->sp, st->sp, s, n, out);
        break;
    default:
        rc = sp_encode(t->sp, st->sp, s, n, out);
        break;
    }
    if (rc) out->n = mark;
    return rc;
}

const unsigned char *tok_token_bytes(const tok *t, uint32_t id, size_t *len)
{
    *len = 0;
    switch (t->type) {
    case TOK_GPT2BPE: return bpe_token_bytes(t->gpt2, id, len);
    case TOK_HUGGINGFACE: return hf_token_bytes(t->hf, id, len);
    default:
        for (size_t j = 0; j < t->nadded; j++)
            if (t->added_id[j] == id) {
                *len = t->added_len[j];
                return t->added_text[j];
            }
        return sp_token_bytes(t->sp, id, len);
    }
}

int tok_decode(const tok *t, const uint32_t *ids, size_t n, unsigned char **buf, size_t *len, size_t *cap, size_t *bad_index)
{
    int strip = t->sp && sp_decode_strips_first_space(t->sp);
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const unsigned char *b = tok_token_bytes(t, ids[i], &l);
        if (!b) {
            if (bad_index) *bad_index = i;
            return TOK_ERR_ARG;
        }
        if (strip && l && b[0] == ' ') {   /* sentencepiece drops the dummy prefix's space */
            b++;
            l--;
        }
        if (l) strip = 0;
        if (*len + l > *cap) {
            size_t c = *cap ? *cap : 256;
            while (c < *len + l) c *= 2;
            unsigned char *q = realloc(*buf, c);
            if (!q) return TOK_ERR_NOMEM;
            *buf = q;
            *cap = c;
        }
        memcpy(*buf + *len, b, l);
        *len += l;
    }
    return 0;
}
