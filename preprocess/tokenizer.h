/*
 * tokenizer.h - the tokenizer interface of mdsprep, mdsinspect and mdstrain:
 * one handle for every --tokenizer-type Megatron's preprocess_data.py takes
 * that mds implements, with Megatron's wrapper semantics (what `tokenize`
 * returns, `vocab_size`, `eod`).
 *
 *   GPT2BPETokenizer           GPT-2 vocab + merges (bpe.h), Megatron's legacy
 *                              tokenizer; optionally HF-style <|endoftext|>
 *   HuggingFaceTokenizer       a tokenizer.json (byte-level BPE) and its
 *                              tokenizer_config.json, as transformers'
 *                              AutoTokenizer(...)(text).input_ids (preprocess/hf.c)
 *   SentencePieceTokenizer     a SentencePiece .model (preprocess/sp.c) with
 *   GPTSentencePieceTokenizer  Megatron's three wrappers: special-token
 *   Llama2Tokenizer            splitting and 4-7 added ids; plain encode; BOS
 *                              before every text
 *
 * The byte-level BPE types share one engine (bpe.c: whole-piece lookup, the
 * per-thread cache, the merge loops) and the pre-tokenizers of pretok.h: a
 * hand-written scanner wherever the pattern is GPT-2's, Llama 3's or Qwen2's,
 * PCRE2 JIT otherwise.  docs/architecture.md, "Tokenizers", has the details.
 *
 * What it deliberately does not do: read JSON lines, handle documents and
 * EOD (the caller appends tok_eod(): that is Megatron's loop, not the
 * tokenizer's), train, sample (BPE dropout, subword regularization), print or
 * exit.  Anything in a tokenizer file that mds does not implement is refused
 * with TOK_ERR_UNSUPPORTED and a message naming it, never approximated.
 *
 * Threads: a tok is immutable after tok_open and shared by all threads; each
 * thread encodes with its own tok_state.
 */
#ifndef MDS_TOKENIZER_H
#define MDS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Megatron's --tokenizer-type values that mds implements. */
enum tok_type {
    TOK_GPT2BPE = 1,           /* GPT2BPETokenizer */
    TOK_HUGGINGFACE = 2,       /* HuggingFaceTokenizer */
    TOK_SENTENCEPIECE = 3,     /* SentencePieceTokenizer */
    TOK_GPT_SENTENCEPIECE = 4, /* GPTSentencePieceTokenizer */
    TOK_LLAMA2 = 5             /* Llama2Tokenizer */
};

/* The type named name (Megatron's spelling), or 0. */
int tok_type_from_name(const char *name);
/* Megatron's spelling of a type ("GPT2BPETokenizer", ...), or "?". */
const char *tok_type_name(int type);
/* The class of Megatron's legacy wrapper for a type ("_GPT2BPETokenizer",
 * "_HuggingFaceTokenizer", ...): what its cache descriptions record. */
const char *tok_type_class(int type);

enum tok_error {
    TOK_OK = 0,
    TOK_ERR_IO = -1,          /* a file cannot be opened or read */
    TOK_ERR_NOMEM = -2,       /* out of memory */
    TOK_ERR_FORMAT = -3,      /* a tokenizer file is malformed (the message names file and cause) */
    TOK_ERR_UNSUPPORTED = -4, /* a valid file uses a feature mds does not implement (named) */
    TOK_ERR_ARG = -5,         /* bad options (a missing path, an unknown type) */
    TOK_ERR_ENCODE = -6,      /* a text that cannot be encoded: the regex engine gave up (PCRE2's
                                 limits), or a SentencePiece text of over 1.4 GB */
    TOK_ERR_BUILD = -7        /* this build lacks a library the tokenizer needs (PCRE2) */
};

/* A static lowercase description of an error code. */
const char *tok_strerror(int code);

typedef struct tok_options {
    int type;                      /* enum tok_type */
    const char *model;             /* --tokenizer-model: a directory holding tokenizer.json (and
                                      tokenizer_config.json), or the tokenizer.json itself; a
                                      SentencePiece .model file */
    const char *vocab_file;        /* GPT2BPETokenizer: gpt2-vocab.json */
    const char *merge_file;        /* GPT2BPETokenizer: gpt2-merges.txt */
    int gpt2_special_tokens;       /* GPT2BPETokenizer: a literal <|endoftext|> in the text is
                                      id 50256 (Megatron's current HF-backed GPT-2) */
    int use_pcre2;                 /* GPT2BPETokenizer, HuggingFaceTokenizer: pre-tokenize with
                                      PCRE2 JIT instead of the scanners (same output; the reference) */
    int sp_whole_text;             /* SentencePiece: run the model over each text at once, without
                                      the word split and cache (same output; the reference) */
} tok_options;

typedef struct tok tok;
typedef struct tok_state tok_state;

/*
 * tok_open() - loads a tokenizer.
 * err: a one-line message naming the file and the cause on failure.
 * @return 0, or TOK_ERR_ARG, TOK_ERR_IO, TOK_ERR_NOMEM, TOK_ERR_FORMAT,
 *   TOK_ERR_UNSUPPORTED.  *out is NULL on failure; free with tok_free.
 */
int tok_open(tok **out, const tok_options *opt, char *err, size_t errlen);
void tok_free(tok *t);   /* accepts NULL; no state may be in use */

int tok_type(const tok *t);

/* Megatron's tokenizer.vocab_size: the number of distinct tokens (GPT-2:
 * len(encoder); HuggingFace: len(tokenizer), added tokens included;
 * SentencePiece: the pieces, plus the ids Megatron's SentencePieceTokenizer
 * adds).  It picks the .bin dtype (ds_dtype_for_vocab) and the model size. */
size_t tok_vocab_size(const tok *t);

/* Megatron's tokenizer.eod: the id --append-eod appends, or -1 when the
 * tokenizer has none (a tokenizer_config.json without eos_token, a
 * SentencePiece model without </s> for Llama2Tokenizer). */
int64_t tok_eod(const tok *t);

/* One line describing the tokenizer, for logs ("HuggingFaceTokenizer 'x/tokenizer.json':
 * byte-level BPE, 65536 ids, Llama 3 scanner, NFC, BOS 65280"); static in t. */
const char *tok_describe(const tok *t);

/* Per-thread state: the BPE cache, regex match data, scratch buffers. */
int tok_state_new(const tok *t, tok_state **out);   /* 0 or TOK_ERR_NOMEM */
void tok_state_free(tok_state *s);                  /* accepts NULL */

/* A growable array of ids that tok_encode appends to (realloc'ed by it; the
 * caller owns and frees ids).  Zero-initialise before first use. */
typedef struct tok_ids {
    uint32_t *ids;
    size_t n, cap;
} tok_ids;

/*
 * tok_encode() - Megatron's tokenizer.tokenize(text) for one string: text is
 * s[0..n), valid UTF-8.  The ids are appended to out (out->n grows); they
 * include what the wrapper adds (HuggingFace's post-processor BOS/EOS,
 * Llama2Tokenizer's BOS) but never the EOD.
 * @return 0, TOK_ERR_NOMEM or TOK_ERR_ENCODE (out->n is then unchanged).
 */
int tok_encode(const tok *t, tok_state *st, const unsigned char *s, size_t n, tok_ids *out);

/*
 * tok_decode() - the text of ids[0..n) as the tokenizer's own decode would
 * give it, in raw bytes (possibly invalid UTF-8: apply errors='replace').
 * GPT-2 and HuggingFace byte-level tokens are their bytes, added tokens their
 * content; SentencePiece pieces with U+2581 as a space, byte pieces as their
 * byte, control pieces as nothing, the first space of a text dropped as
 * sentencepiece does.  Appends to *buf (realloc'ed, *len and *cap updated).
 * @return 0, TOK_ERR_NOMEM or TOK_ERR_ARG (an id is not in the vocabulary;
 *   *bad_index, when not NULL, receives its index).
 */
int tok_decode(const tok *t, const uint32_t *ids, size_t n, unsigned char **buf, size_t *len, size_t *cap,
               size_t *bad_index);

/* The bytes of one token as tok_decode shows it alone (no space dropped), or
 * NULL when id is not in the vocabulary.  Valid until tok_free. */
const unsigned char *tok_token_bytes(const tok *t, uint32_t id, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* MDS_TOKENIZER_H */
