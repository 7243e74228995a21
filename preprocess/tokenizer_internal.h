/*
 * tokenizer_internal.h - private to the tokenizer module (tokenizer.c, hf.c,
 * sp.c): the two loaders behind tokenizer.h and what they share.  Not a
 * public header and not a stable interface.
 */
#ifndef MDS_TOKENIZER_INTERNAL_H
#define MDS_TOKENIZER_INTERNAL_H

#include "tokenizer.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Makes room for extra more ids; 0 or TOK_ERR_NOMEM. */
int tok_ids_reserve(tok_ids *o, size_t extra);

/* snprintf into err (when not NULL) and return code. */
int tok_fail(char *err, size_t errlen, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- tokenizer.json (hf.c) ---- */

typedef struct hf_tokenizer hf_tokenizer;
typedef struct hf_state hf_state;

/* path: a directory holding tokenizer.json (and tokenizer_config.json, and
 * maybe special_tokens_map.json), or a tokenizer.json file (its directory is
 * searched for the others). */
int hf_open(hf_tokenizer **out, const char *path, int use_pcre2, char *err, size_t errlen);
void hf_free(hf_tokenizer *h);
size_t hf_vocab_size(const hf_tokenizer *h);      /* len(tokenizer) */
int64_t hf_eos_id(const hf_tokenizer *h);         /* tokenizer.eos_token_id, or -1 */
const char *hf_describe(const hf_tokenizer *h);
int hf_state_new(const hf_tokenizer *h, hf_state **out);
void hf_state_free(hf_state *s);
/* tokenizer(text).input_ids, appended to out */
int hf_encode(const hf_tokenizer *h, hf_state *st, const unsigned char *s, size_t n, tok_ids *out);
/* the bytes tokenizers' decode gives for id alone (its ByteLevel decoder) */
const unsigned char *hf_token_bytes(const hf_tokenizer *h, uint32_t id, size_t *len);

/* ---- SentencePiece (sp.c) ---- */

typedef struct sp_model sp_model;
typedef struct sp_state sp_state;

int sp_open(sp_model **out, const char *path, int whole_text, char *err, size_t errlen);
void sp_free(sp_model *m);
size_t sp_piece_size(const sp_model *m);
/* SentencePieceProcessor's id_to_piece(id), or NULL when id is out of range */
const char *sp_id_to_piece(const sp_model *m, int64_t id, size_t *len);
/* bos_id(), eos_id(), pad_id(), unk_id(): the id of the piece named in the
 * trainer spec if it has the right type, else -1 */
int64_t sp_bos_id(const sp_model *m);
int64_t sp_eos_id(const sp_model *m);
int64_t sp_pad_id(const sp_model *m);
const char *sp_describe(const sp_model *m);
int sp_state_new(const sp_model *m, sp_state **out);
void sp_state_free(sp_state *s);
/* EncodeAsIds(text), appended to out */
int sp_encode(const sp_model *m, sp_state *st, const unsigned char *s, size_t n, tok_ids *out);
/* the bytes of id as DecodeIds shows it (U+2581 as a space, <0xNN> as its
 * byte, control pieces empty, unknown as the unk surface); NULL if out of range */
const unsigned char *sp_token_bytes(const sp_model *m, uint32_t id, size_t *len);
/* 1 when decoding drops the space of the first piece (add_dummy_prefix) */
int sp_decode_strips_first_space(const sp_model *m);

#endif
