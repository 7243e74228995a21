/*
 * bpe.h - exact GPT-2 byte-level BPE: load, encode one pre-token piece, decode.
 *
 * This is the tokenizer core of mdsprep.  It reproduces the token ids of
 * Megatron-LM's legacy GPT2Tokenizer (OpenAI encoder.py semantics, see
 * docs/architecture.md, "Tokenizer") byte for byte.  It works on raw bytes:
 * the byte->unicode alphabet of encoder.py only matters when the vocab and
 * merges files are loaded, and is exposed below for tools that print tokens.
 *
 * What it deliberately does not do:
 *   - pre-tokenization (the GPT-2 regex split of text into pieces): pretok.c;
 *   - UTF-8 validation or errors='replace' on decoded text: the caller's job;
 *   - special tokens: "<|endoftext|>" inside text is ordinary text, exactly as
 *     in the legacy tokenizer; ask bpe_token_id() for its id when appending EOD;
 *   - printing or exiting: errors are codes plus a message in a caller buffer.
 *
 * Threads: a loaded `bpe` is immutable and may be shared by any number of
 * threads.  Each thread needs its own `bpe_cache` (scratch memory plus a
 * bounded piece cache); a cache must never be used by two threads at once.
 */
#ifndef MDS_BPE_H
#define MDS_BPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bpe bpe;             /* immutable after load; shared by all threads */
typedef struct bpe_cache bpe_cache; /* per-thread scratch + bounded cache; one per thread */

/* Error codes: every failing function returns one of these (all negative). */
enum bpe_error {
    BPE_OK = 0,
    BPE_ERR_IO = -1,      /* a file cannot be opened or read */
    BPE_ERR_NOMEM = -2,   /* out of memory */
    BPE_ERR_VOCAB = -3,   /* the vocab file is not a valid vocab (see bpe_load) */
    BPE_ERR_MERGES = -4,  /* the merges file is not valid with this vocab */
    BPE_ERR_BAD_ID = -5,  /* bpe_decode: an id is not in the vocab */
    BPE_ERR_BUFFER = -6,  /* bpe_decode: the output buffer is too small */
    BPE_ERR_ARG = -7      /* a NULL pointer or impossible argument */
};

/* Returns a static lowercase description of an error code ("unknown error" otherwise). */
const char *bpe_strerror(int code);

/*
 * bpe_load() - load an encoder.json-style vocab and a vocab.bpe-style merges file.
 *
 * vocab_path: a JSON object mapping token strings to ids.  The strings are in
 *   encoder.py's byte->unicode alphabet (\uXXXX escapes and surrogate pairs are
 *   decoded) and are mapped back to raw bytes.  Ids must be the integers
 *   0..count-1, each used once (count < 2^21), and every single byte must be
 *   a token.  Also refused, where Python would silently keep the last value or
 *   fail later: duplicate keys, duplicate ids, empty tokens, and tokens with
 *   characters outside the alphabet.
 * merges_path: parsed like Megatron's gpt2_tokenization.py: the whole file is
 *   decoded as UTF-8 with universal newlines, split on '\n', the first line and
 *   the LAST element are dropped (a file without a final newline loses its last
 *   merge, as in Python), and each line is split on Unicode whitespace.  The
 *   rank of a pair is its 0-based line index after the header; a pair listed
 *   twice keeps its last rank.  Lines that are not exactly two fields, and
 *   merges that can never apply (a part with a character outside the alphabet,
 *   or a part that no sequence of merges can produce), use up their rank and are
 *   otherwise ignored, which is what Python's dict lookup does with them.
 *   Refused: a merge that can apply but whose result is not a vocab token
 *   (encoder.py would raise KeyError when it meets it), and files with 2^22 - 1
 *   or more line breaks (a CR LF counts twice).
 *
 * At load the library checks two properties that make the fast paths exact:
 *   - "trained order": every part of every applicable merge is a single byte or
 *     is produced only by merges of lower rank.  Then merging the leftmost
 *     lowest-ranked pair one at a time (array scan or heap) gives encoder.py's
 *     result.  True for every trained merges file; if false, all pieces go
 *     through a literal (quadratic) encoder.py loop instead.  See bpe_flags().
 *   - per token, whether its own bytes BPE-encode to exactly that token.  A piece
 *     equal to such a token is answered by one hash lookup.  In GPT-2 this holds
 *     for every token but "<|endoftext|>".
 *
 * out:    receives the handle on success, NULL on failure.  Free it with bpe_free().
 * errbuf: if not NULL, receives a one-line message naming the file and the line
 *         or cause on failure (truncated to errlen bytes, always terminated).
 * @return 0, or BPE_ERR_ARG, BPE_ERR_IO, BPE_ERR_NOMEM, BPE_ERR_VOCAB, BPE_ERR_MERGES.
 */
int bpe_load(bpe **out, const char *vocab_path, const char *merges_path, char *errbuf, size_t errlen);

/* Flags of bpe_build(). */
#define BPE_BUILD_HF 1u            /* HuggingFace tokenizers' BPE: the leftmost lowest-ranked
                                      pair is merged, one at a time (its binary heap), whatever
                                      the order of the merges; never encoder.py's loop */
#define BPE_BUILD_IGNORE_MERGES 2u /* tokenizers' ignore_merges: a piece that is a token
                                      encodes to that token, without merging */

/*
 * The vocabulary and merges of bpe_build(), in raw bytes.
 * bytes/len: (n) the raw bytes of each id; bytes[id] NULL or len[id] 0 marks an
 *   id that no token has (a hole: decoding it is BPE_ERR_BAD_ID).
 * reachable: (n) or NULL (all reachable): 0 marks a token that no piece can ever
 *   become (in tokenizer.json, a token with a character outside the byte-level
 *   alphabet); it is kept for decoding only.  Reachable tokens must differ.
 * merges: (nmerges) left id, right id and the id of their concatenation, by
 *   rank (rank = index).  A pair listed twice keeps its last rank.  A merge
 *   with an unreachable or missing part is skipped; one whose result is no
 *   reachable token is an error.
 */
typedef struct bpe_spec {
    size_t n;
    const unsigned char *const *bytes;
    const uint32_t *len;
    const uint8_t *reachable;
    const uint32_t (*merges)[3];
    size_t nmerges;
    unsigned flags;                /* BPE_BUILD_* */
} bpe_spec;

/*
 * bpe_build() - the same tables as bpe_load(), from memory: for vocabularies
 * read by another loader (tokenizer.json, preprocess/hf.c).  Every single byte
 * must be a reachable token.  The encoder then runs with the flags' semantics;
 * bpe_flags() never reports BPE_FLAG_TRAINED_ORDER for a built handle.
 * errbuf: a one-line cause on failure (no file name: the caller adds it).
 * @return 0, BPE_ERR_ARG, BPE_ERR_NOMEM, BPE_ERR_VOCAB (ids, duplicate or
 *   missing bytes) or BPE_ERR_MERGES (a merge names an unknown id or makes no
 *   token).  *out is NULL on failure.
 */
int bpe_build(bpe **out, const bpe_spec *spec, char *errbuf, size_t errlen);

/* Frees a handle from bpe_load() or bpe_build(); accepts NULL.  No cache may be in use with it. */
void bpe_free(bpe *b);

/* Number of tokens in the vocab (len(encoder) in Python): 50257 for GPT-2. */
size_t bpe_vocab_size(const bpe *b);

/* Length in bytes of the longest token (128 for GPT-2). */
size_t bpe_max_token_len(const bpe *b);

/* Flags describing the loaded tables. */
#define BPE_FLAG_TRAINED_ORDER 1u /* fast leftmost-lowest-rank paths are in use */
unsigned bpe_flags(const bpe *b);

/* The id of the token whose raw bytes are exactly bytes[0..len), or -1.  Thread safe. */
int32_t bpe_token_id(const bpe *b, const char *bytes, size_t len);

/* The raw bytes of token `id` (not terminated) and their count in *len, or NULL
 * (and *len = 0) if id >= bpe_vocab_size() or is a hole (bpe_build).  The memory belongs to b and lives
 * until bpe_free(). */
const unsigned char *bpe_token_bytes(const bpe *b, uint32_t id, size_t *len);

/*
 * bpe_cache_new() - per-thread scratch and a bounded cache of piece encodings.
 *
 * max_entries: small slots, rounded up to a power of two (at most 1<<24); 0
 *   disables caching.  A small slot (64 bytes) keeps a piece of up to 24 bytes
 *   that encodes to at most 8 tokens; there is also one big slot (256 bytes,
 *   pieces of 25..120 bytes, at most 32 tokens) per 8 small ones, at least 16.
 *   So memory is about 96 bytes per entry: 16384 entries = 1.5 MB, which is
 *   a good default; 4096..65536 all work.  Direct mapped: a colliding piece
 *   replaces the older one.  Output never depends on the cache, and a cache
 *   used with another bpe handle is cleared first.  Scratch for pieces over
 *   64 bytes grows on demand (32 bytes per piece byte); above 4 MB it is
 *   released after the call.
 * @return 0, BPE_ERR_ARG or BPE_ERR_NOMEM.  *out is NULL on failure.
 */
int bpe_cache_new(bpe_cache **out, size_t max_entries);

/* Frees a cache; accepts NULL. */
void bpe_cache_free(bpe_cache *c);

/* Upper bound on the tokens produced for a piece of n bytes (= n). */
static inline size_t bpe_encode_bound(size_t n) { return n; }

/*
 * bpe_encode_piece() - BPE-encode ONE pre-token piece of raw bytes.
 *
 * Writes the ids to out (capacity >= bpe_encode_bound(n)) and returns how many
 * were written (0 only for n == 0).  It cannot fail: if scratch memory for a
 * long piece cannot be allocated it falls back to an in-place quadratic loop
 * with the same result.  c may be NULL: no caching, and long pieces then
 * allocate their scratch for the call.  Cost is O(n log n) for long pieces
 * (O(n^2) when the merges are not in trained order, see bpe_load).
 * Thread safe for distinct caches.
 */
size_t bpe_encode_piece(const bpe *b, bpe_cache *c, const unsigned char *piece, size_t n, uint32_t *out);

/* Methods for bpe_encode_piece_with(). */
enum bpe_method {
    BPE_METHOD_LITERAL = 1, /* encoder.py's own loop on the whole piece: O(n^2), exact for any merges */
    BPE_METHOD_MERGE = 2,   /* leftmost lowest rank, one merge at a time (array scan, or heap past
                               64 bytes) on the whole piece; needs BPE_FLAG_TRAINED_ORDER */
    BPE_METHOD_SPLIT = 3    /* what bpe_encode_piece() runs after its shortcut and cache: the piece
                               is cut where no merge can cross, parts that are tokens are looked up,
                               the rest merged (by MERGE, or LITERAL without trained order) */
};

/*
 * bpe_encode_piece_with() - encode one piece with a chosen method, for tests
 * and benchmarks: no whole-piece shortcut, no cache, scratch memory from
 * malloc.  All methods give the same ids where they apply.
 * @return the number of ids written to out (capacity >= bpe_encode_bound(n)),
 *   or 0 if n == 0, an argument is NULL, the method is unknown or does not
 *   apply to b, or memory for it cannot be allocated.  Thread safe.
 */
size_t bpe_encode_piece_with(const bpe *b, int method, const unsigned char *piece, size_t n, uint32_t *out);

/* Bytes needed to decode nids ids: nids * bpe_max_token_len() (SIZE_MAX on overflow). */
size_t bpe_decode_bound(const bpe *b, size_t nids);

/*
 * bpe_decode() - concatenate the raw bytes of n ids into out[0..cap).
 *
 * The result is raw bytes, possibly not valid UTF-8 (decode([447]) is E2 80);
 * applying errors='replace' is the caller's job.
 * outlen: receives the number of bytes written; with BPE_ERR_BUFFER, the number
 *   needed; with BPE_ERR_BAD_ID, 0 (and nothing useful is in out).
 * @return 0, BPE_ERR_ARG, BPE_ERR_BAD_ID (an id >= bpe_vocab_size()) or BPE_ERR_BUFFER.
 */
int bpe_decode(const bpe *b, const uint32_t *ids, size_t n, unsigned char *out, size_t cap, size_t *outlen);

/*
 * The byte <-> unicode alphabet of encoder.py's bytes_to_unicode():
 * bytes 33..126, 161..172 and 174..255 map to the same code point, the other 68
 * to U+0100..U+0143 in increasing byte order (space -> U+0120).
 * bpe_byte_to_unicode() returns the code point of a byte; bpe_unicode_to_byte()
 * returns the byte of a code point, or -1 if it is not in the alphabet.
 */
uint32_t bpe_byte_to_unicode(uint8_t byte);
int bpe_unicode_to_byte(uint32_t cp);

#ifdef __cplusplus
}
#endif

#endif /* MDS_BPE_H */
