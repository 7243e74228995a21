/*
 * dataset.h - the public API of the mds dataset library: Megatron's MMIDIDX
 * indexed dataset (a PREFIX.bin of raw token ids plus a PREFIX.idx index),
 * read through mmap and written byte-identically to Megatron-LM's
 * IndexedDatasetBuilder.  The byte layout is docs/formats.md.
 *
 * Its second half is the training-data pipeline: Megatron-Core's GPTDataset
 * and BlendedDataset index arrays (document, sample, shuffle, blending
 * indices) reproduced element for element, their .npy cache, and sample
 * reading (docs/architecture.md, "Training data pipeline").
 *
 * What it deliberately does not do: tokenize, read the legacy "lazy/cached" (TNTIDX) format or
 * multimodal datasets (sequence_modes), or write float dtypes.  It never
 * prints and never exits: every failure is a negative enum ds_error code plus
 * a one-line message on the handle.
 *
 * Conventions for the whole API:
 *  - Functions returning int return 0 on success or a negative enum ds_error.
 *  - N is the number of sequences, D the number of documents.  The .idx
 *    field document_count holds D + 1 (the leading 0 of document_indices);
 *    the functions here always speak of D unless they say otherwise.
 *  - Every _free/_close accepts NULL.
 *  - Thread safety: a handle may be used by one thread at a time.  Distinct
 *    handles are independent.  The const accessors of an open reader
 *    (everything taking `const ds_reader *`) may be called from any number of
 *    threads at once, because they only read the mapping.
 */
#ifndef MDS_DATASET_H
#define MDS_DATASET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Library version, also available at run time through ds_version(). */
#define DS_VERSION_MAJOR 0
#define DS_VERSION_MINOR 1
#define DS_VERSION_PATCH 0
#define DS_VERSION_NUMBER (DS_VERSION_MAJOR * 10000 + DS_VERSION_MINOR * 100 + DS_VERSION_PATCH)

/*
 * Error codes.  0 is success; every error is negative so that callers can
 * write `if (rc < 0)`.  The values are stable: new codes are only appended.
 */
enum ds_error {
    DS_OK              =   0,
    DS_ERR_IO          =  -1,  /* a system call failed (open, read, write, mmap, rename...) */
    DS_ERR_BAD_MAGIC   =  -2,  /* .idx does not start with "MMIDIDX\0\0" */
    DS_ERR_BAD_VERSION =  -3,  /* .idx version field is not 1 */
    DS_ERR_BAD_DTYPE   =  -4,  /* unknown dtype code */
    DS_ERR_SIZE        =  -5,  /* a file size disagrees with the counts, or a count overflows */
    DS_ERR_CORRUPT     =  -6,  /* index contents are inconsistent (document indices, lengths, pointers) */
    DS_ERR_NOMEM       =  -7,  /* out of memory */
    DS_ERR_ARG         =  -8,  /* invalid argument (NULL, lengths that do not sum, dtype mismatch) */
    DS_ERR_RANGE       =  -9,  /* a value does not fit (token id vs dtype, index out of range) */
    DS_ERR_UNSUPPORTED = -10,  /* valid but unsupported: dtype 7, legacy TNTIDX, multimodal, float writer */
    DS_ERR_STATE       = -11,  /* writer already finalized, or failed earlier */
    DS_ERR_EMPTY       = -12,  /* a split holds no tokens (Megatron would loop forever) */
    DS_ERR_OVERSAMPLE  = -13   /* a blend asks a dataset for more samples than it has */
};

/*
 * On-disk dtype codes (docs/formats.md, current Megatron main).  Code 7 means
 * float32 in current Megatron but float64 in NVIDIA <= May 2023 and
 * bigscience; it is never a token dtype, so the reader refuses it.
 */
enum ds_dtype {
    DS_DTYPE_UINT8   = 1,
    DS_DTYPE_INT8    = 2,
    DS_DTYPE_INT16   = 3,
    DS_DTYPE_INT32   = 4,
    DS_DTYPE_INT64   = 5,
    DS_DTYPE_FLOAT64 = 6,
    DS_DTYPE_FLOAT32 = 7,
    DS_DTYPE_UINT16  = 8
};

/*
 * ds_version() - the library version as DS_VERSION_NUMBER (major*10000 +
 * minor*100 + patch), for comparing with the header the caller compiled with.
 * ds_version_string() - the same as "MAJOR.MINOR.PATCH", a static string.
 * @return : never fails.  Thread safe.
 */
unsigned ds_version(void);
const char *ds_version_string(void);

/*
 * ds_strerror() - a short static description of a code returned by this
 * library ("success" for 0, "unknown error" for anything else).  The handle's
 * own message (ds_reader_error, ds_writer_error) says more: prefer it.
 * @return : a static string, never NULL.  Thread safe.
 */
const char *ds_strerror(int code);

/*
 * ds_dtype_size() - bytes per token of an on-disk dtype code.  Code 7 gives 4
 * (current Megatron's float32), knowing that older files meant 8.
 * @return : 1, 2, 4 or 8; 0 for an unknown code.  Thread safe.
 */
size_t ds_dtype_size(int dtype);

/*
 * ds_dtype_name() - numpy's name for a dtype code ("uint16", "int32", ...).
 * @return : a static string; "unknown" for an unknown code.  Thread safe.
 */
const char *ds_dtype_name(int dtype);

/*
 * ds_dtype_for_vocab() - Megatron's writer choice (DType.optimal_dtype):
 * uint16 when vocab_size < 65500, otherwise int32.  The threshold really is
 * 65500, not 65536, for byte identity with Megatron.
 * @return : DS_DTYPE_UINT16 or DS_DTYPE_INT32.  Thread safe.
 */
int ds_dtype_for_vocab(size_t vocab_size);

/*
 * ds_utf8_replace() - the text of decoded token bytes as Python would show
 * it: bytes.decode('utf-8', errors='replace'), re-encoded as UTF-8.  Valid
 * UTF-8 is copied unchanged (NUL included); each maximal subpart of an
 * invalid sequence becomes one U+FFFD (EF BF BD), following Python and
 * Unicode's "best practice": a lead byte with as many valid continuation
 * bytes as follow it is one subpart, so E2 80 at the end of the input is ONE
 * U+FFFD, while ED A0 80 (a surrogate) and F0 80 80 are three each, since
 * their second byte is already out of range.  Bytes C0, C1 and F5..FF are
 * never valid.  GPT-2 example: the bytes of token 447 (E2 80) give "\ufffd",
 * those of 447 then 227 (E2 80 85) give "\u2005".
 *
 * The input is one complete text: a sequence cut at the end counts as
 * invalid, so decode a whole sequence at a time, not arbitrary chunks.
 * @out : receives the UTF-8 result, not NUL-terminated.  If cap is too small
 *        the output stops before the first character that does not fit, so
 *        out always holds a valid prefix; may be NULL when cap is 0.
 * @cap : size of out.  ds_utf8_replace_bound(n) is always enough.
 * @in  : n bytes, any content (may be NULL when n is 0).
 * @return : the size of the complete result, even when it did not fit (as
 *           snprintf does): the output is complete iff the result <= cap.
 *           Never fails; O(n); thread safe.
 */
size_t ds_utf8_replace(char *out, size_t cap, const unsigned char *in, size_t n);

/*
 * ds_utf8_replace_bound() - the largest result ds_utf8_replace() can give for
 * n input bytes: 3 * n (an invalid byte becomes 3 bytes), or SIZE_MAX when
 * that overflows.  Thread safe.
 */
size_t ds_utf8_replace_bound(size_t n);

/*
 * ds_py_float_repr() - Python's repr() of a float (and str(), the same since
 * Python 3.2), for programs that print what Megatron prints: the shortest
 * digits that read back as x, in fixed notation when the decimal exponent
 * is in [-4, 16), integral values keeping ".0" ("0.0001", "123.0",
 * "1000000000000000.0"), otherwise one digit, the rest after a point, and
 * an exponent of at least two digits ("1e-05", "1e+16",
 * "1.2345678901234568e+16"); "-0.0", "nan", "inf" and "-inf" as Python
 * spells them.  (json.dumps writes the last three NaN, Infinity and
 * -Infinity, and is otherwise the same.)
 * @out : receives the text and a NUL, cut to cap - 1 characters when cap is
 *        too small; may be NULL when cap is 0.
 * @cap : size of out; DS_PY_FLOAT_REPR_MAX is always enough.
 * @return : the length of the complete text without its NUL, even when it
 *           did not fit (as snprintf does): complete iff the result < cap.
 *           Never fails; thread safe; the locale's decimal point does not
 *           change the result.
 */
#define DS_PY_FLOAT_REPR_MAX 32
size_t ds_py_float_repr(char *out, size_t cap, double x);

/*
 * ds_decode_tokens() - n token ids stored in an on-disk dtype, widened to
 * int64: the values at src are little-endian whatever the host, at any
 * alignment (as ds_reader_sequence() gives them), and the signed dtypes are
 * sign-extended (int8 0xff gives -1).  A float64 id is truncated toward zero
 * (2.9 gives 2, -2.9 gives -2); one that is NaN or outside int64 (|x| >=
 * 2^63, the infinities included) gives INT64_MIN.  Every id of code 7 or of
 * an unknown code gives INT64_MIN too, and src is then not read.
 * @dst   : (n) receives the ids.
 * @src   : n × ds_dtype_size(dtype) bytes (may be NULL when n is 0).
 * @dtype : the dtype code (enum ds_dtype).
 * Never fails; O(n); thread safe.
 */
void ds_decode_tokens(int64_t *dst, const void *src, size_t n, int dtype);

/* ------------------------------------------------------------------------ */
/* Reader                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct ds_reader ds_reader;

/*
 * ds_reader_open() - open PREFIX.idx and PREFIX.bin read-only through mmap,
 * and validate them before touching any array (a file of any content never
 * causes an out-of-bounds read):
 *   - the .idx starts with the 9-byte magic "MMIDIDX\0\0" (a legacy
 *     "TNTIDX\0\0" file is recognised and refused), version == 1, the dtype
 *     code is known and is not 7, the header is complete (34 bytes);
 *   - the .idx size is exactly 34 + 12*N + 8*(D+1), computed without
 *     overflow (an extra N bytes is recognised as a multimodal dataset and
 *     refused);
 *   - document_indices[0] == 0, non-decreasing, and the last equals N;
 *   - every sequence length is >= 0 and the .bin size is exactly
 *     Σ lengths × itemsize.
 * It is O(N + D) in time.  The sequence pointers are not checked here (Megatron
 * does not either); ds_reader_verify() does that, and ds_reader_sequence()
 * bounds-checks each pointer it follows.  Empty files (a dataset of no
 * sequences has a 0-byte .bin) are fine.
 *
 * @prefix : path without the .idx/.bin suffix.  Copied; the caller keeps it.
 * @out    : receives the handle.  As with sqlite3_open, on failure *out is
 *           still set, to a handle usable only with ds_reader_error() and
 *           ds_reader_close(), so the message can be read; it is NULL only
 *           when even that allocation failed (DS_ERR_NOMEM) or out is NULL.
 * @return : 0, or
 *           DS_ERR_ARG         prefix or out is NULL;
 *           DS_ERR_IO          a file cannot be opened, stat'ed or mapped;
 *           DS_ERR_BAD_MAGIC   wrong magic;
 *           DS_ERR_BAD_VERSION version is not 1;
 *           DS_ERR_BAD_DTYPE   unknown dtype code;
 *           DS_ERR_UNSUPPORTED dtype 7 (float32/float64 ambiguity), legacy
 *                              TNTIDX format, or a multimodal .idx;
 *           DS_ERR_SIZE        .idx shorter than its header, counts that
 *                              overflow, .idx or .bin size not as implied;
 *           DS_ERR_CORRUPT     document_count 0, bad document indices, or a
 *                              negative sequence length;
 *           DS_ERR_NOMEM       out of memory.
 * The message names the file, the field and the offending values.
 * Ownership: the caller closes the handle with ds_reader_close().
 */
int ds_reader_open(const char *prefix, ds_reader **out);

/*
 * ds_reader_close() - unmap the files and free the handle.  Every pointer
 * obtained from ds_reader_sequence() becomes invalid.  Accepts NULL.
 */
void ds_reader_close(ds_reader *r);

/*
 * ds_reader_error() - the message of the last failure on this handle (empty
 * string when there was none).  Owned by the handle, valid until the next
 * call on it or until close.
 * @return : never NULL; "out of memory" for a NULL handle.
 */
const char *ds_reader_error(const ds_reader *r);

/*
 * Header and index accessors of an open reader.  Index arguments must be in
 * range (i < N, k <= D); out of range they return 0 rather than reading
 * outside the index.  All O(1) and thread safe.
 *   ds_reader_dtype()          the dtype code (enum ds_dtype)
 *   ds_reader_num_sequences()  N, the sequence_count field
 *   ds_reader_num_documents()  D = document_count field - 1
 *   ds_reader_num_tokens()     Σ sequence lengths (computed at open)
 *   ds_reader_seq_length(i)    sequence_lengths[i], in tokens
 *   ds_reader_seq_pointer(i)   sequence_pointers[i], a byte offset in .bin
 *                              as stored (ds_reader_verify checks it)
 *   ds_reader_doc_index(k)     document_indices[k], k in [0, D]; document k
 *                              is sequences [doc_index(k), doc_index(k+1))
 */
int      ds_reader_dtype(const ds_reader *r);
uint64_t ds_reader_num_sequences(const ds_reader *r);
uint64_t ds_reader_num_documents(const ds_reader *r);
uint64_t ds_reader_num_tokens(const ds_reader *r);
uint32_t ds_reader_seq_length(const ds_reader *r, uint64_t i);
uint64_t ds_reader_seq_pointer(const ds_reader *r, uint64_t i);
uint64_t ds_reader_doc_index(const ds_reader *r, uint64_t k);

/*
 * ds_reader_sequence() - a view of sequence i inside the mapped .bin.
 * @data : receives a pointer to the first token: little-endian values of the
 *         dataset dtype, possibly unaligned if the file's pointers are odd.
 *         Points into the mapping: valid until ds_reader_close(), never to be
 *         written or freed.  A 0-length sequence gets a valid non-NULL pointer.
 * @len  : receives the length in tokens.
 * @return : 0, or DS_ERR_ARG (NULL argument), DS_ERR_RANGE (i >= N), or
 *           DS_ERR_CORRUPT when the stored pointer puts the sequence outside
 *           the .bin.  No message is set (the handle is const); thread safe.
 */
int ds_reader_sequence(const ds_reader *r, uint64_t i, const void **data, uint64_t *len);

/*
 * ds_reader_token() - token k of sequence i widened to int64 as
 * ds_decode_tokens() does (float64 truncated toward zero).  A convenience
 * for tests and tools, not a fast path: use ds_reader_sequence() and
 * ds_decode_tokens() for bulk access.
 * @return : the token; INT64_MIN when i or k is out of range, the sequence
 *           lies outside the .bin, or a float64 value is NaN or does not fit.
 *           Thread safe.
 */
int64_t ds_reader_token(const ds_reader *r, uint64_t i, uint64_t k);

/*
 * ds_reader_verify() - deep check on top of ds_reader_open's: every
 * sequence_pointers[i] equals the exclusive prefix sum of lengths × itemsize
 * (so the sequences tile the .bin exactly, in order).  O(N).
 * @return : 0, DS_ERR_ARG (NULL), or DS_ERR_CORRUPT with a message naming the
 *           first bad pointer, its value and the expected one.
 * Sets the handle's message, so not concurrently with other calls on r.
 */
int ds_reader_verify(ds_reader *r);

/* ------------------------------------------------------------------------ */
/* Writer                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct ds_writer ds_writer;

/*
 * ds_writer_open() - start writing the dataset PREFIX.bin / PREFIX.idx.
 * Nothing named PREFIX.bin or PREFIX.idx is touched until ds_writer_finalize:
 * tokens go to "PREFIX.bin.tmp.<pid>", and when the in-memory buffers of
 * sequence lengths and document indices (about 1 MB each) fill up they spill
 * to the scratch files "PREFIX.len.tmp.<pid>" and "PREFIX.doc.tmp.<pid>".
 * Memory use is therefore a few MB whatever the corpus size.  The .idx is
 * written to "PREFIX.idx.tmp.<pid>" by finalize.
 *
 * @prefix : output path without suffix.  Copied.
 * @dtype  : DS_DTYPE_UINT8, INT8, INT16, UINT16, INT32 or INT64.
 * @out    : receives the handle.  On failure *out is still set, to a handle
 *           usable only with ds_writer_error() and ds_writer_free() (NULL only
 *           on DS_ERR_NOMEM or when out is NULL).
 * @return : 0, or DS_ERR_ARG (NULL argument), DS_ERR_BAD_DTYPE (unknown
 *           code), DS_ERR_UNSUPPORTED (a float dtype), DS_ERR_IO (cannot
 *           create the temporary .bin), DS_ERR_NOMEM.
 * Ownership: the caller frees the handle with ds_writer_free().
 */
int ds_writer_open(const char *prefix, int dtype, ds_writer **out);

/*
 * ds_writer_temp_paths() - the paths of every temporary file this writer may
 * create (the .bin, the .idx and the two scratch files), whether or not they
 * exist yet.  Meant for a signal handler, which may unlink() them without
 * allocating.  The array and strings are owned by the writer and stay valid
 * and unchanged until ds_writer_free().
 * @n : receives the count (may be NULL).
 * @return : the array, or NULL (and *n = 0) for a NULL writer.
 */
const char *const *ds_writer_temp_paths(const ds_writer *w, size_t *n);

/*
 * ds_writer_add_document() - append one document made of nseq sequences whose
 * lengths (seq_lengths) sum to ntokens.  Megatron's add_document, except that
 * the sum is checked and out-of-range ids are refused instead of wrapping.
 * ntokens == 0 && nseq == 0 records an empty document (the document index
 * repeats, as Megatron does for an empty text).  Sequences of length 0 inside
 * a document are allowed.  The cost per call is one pass over the tokens,
 * converted straight into a 1 MB output buffer.
 *
 * @tokens      : ntokens ids (may be NULL when ntokens == 0), stored in the
 *                dataset dtype, little-endian.
 * @seq_lengths : nseq lengths (may be NULL when nseq == 0), each <= INT32_MAX.
 * @return : 0, or
 *           DS_ERR_ARG   NULL writer, NULL array with a non-zero count, or the
 *                        lengths do not sum to ntokens;
 *           DS_ERR_RANGE a token id does not fit the dtype, or a length does
 *                        not fit int32 (the message names the first one);
 *           DS_ERR_STATE the writer is finalized or failed earlier;
 *           DS_ERR_IO / DS_ERR_NOMEM while spilling buffers.
 * ARG and RANGE errors write nothing: the writer stays usable.  IO and NOMEM
 * errors are sticky: every later call returns DS_ERR_STATE.
 */
int ds_writer_add_document(ds_writer *w, const uint32_t *tokens, size_t ntokens,
                           const uint32_t *seq_lengths, size_t nseq);

/*
 * ds_writer_add_dataset() - Megatron's add_index (merge): append every
 * sequence and document of an open reader.  Its .bin bytes are copied as
 * they are, its document indices are shifted by the current sequence count
 * (its leading 0 dropped), and pointers are recomputed at finalize from the
 * lengths with a 64-bit sum, never copied.  Adding the same reader twice is
 * fine.  Memory stays bounded: the index is streamed through the buffers.
 * @return : 0, or DS_ERR_ARG (NULL, or r's dtype differs from the writer's),
 *           DS_ERR_STATE, DS_ERR_IO, DS_ERR_NOMEM.  IO errors are sticky.
 */
int ds_writer_add_dataset(ds_writer *w, const ds_reader *r);

/*
 * ds_writer_finalize() - finish the dataset: flush and fsync the .bin, write
 * the .idx (header with the final counts, then the lengths, then the pointers
 * as a running 64-bit sum, then the document indices, streamed from the
 * scratch files), fsync it, then unlink any existing PREFIX.idx, rename the
 * .bin into place and rename the .idx last.  An interrupted run can thus
 * leave a new .bin without an .idx, but never a mismatched pair.  Scratch
 * files are removed.
 * @return : 0, or DS_ERR_ARG (NULL), DS_ERR_STATE (already finalized or
 *           failed), DS_ERR_IO.  After an error the writer is failed; free it
 *           to remove the temporaries.
 */
int ds_writer_finalize(ds_writer *w);

/*
 * ds_writer_prepare() / ds_writer_commit() - ds_writer_finalize in two
 * steps, for a program that writes several datasets and wants all of them or
 * none: prepare every writer (the slow part: the .bin is fsynced and the
 * complete .idx written to its temporary name), and only when all succeeded
 * commit each (the renames).  After prepare no more documents are accepted.
 * @return : as ds_writer_finalize; commit without a successful prepare is
 *           DS_ERR_STATE.
 */
int ds_writer_prepare(ds_writer *w);
int ds_writer_commit(ds_writer *w);

/*
 * ds_writer_free() - release the writer.  If it was not finalized, every
 * temporary file is closed and unlinked, so nothing is left behind.
 * Accepts NULL.
 */
void ds_writer_free(ds_writer *w);

/*
 * ds_writer_error() - the message of the last failure (empty when none).
 * Owned by the handle, valid until the next call on it or until free.
 * @return : never NULL; "out of memory" for a NULL handle.
 */
const char *ds_writer_error(const ds_writer *w);

/*
 * Counts so far: sequences (N), documents (D, not D+1) and tokens.  They stay
 * readable after finalize.  0 for NULL.
 */
uint64_t ds_writer_num_sequences(const ds_writer *w);
uint64_t ds_writer_num_documents(const ds_writer *w);
uint64_t ds_writer_num_tokens(const ds_writer *w);

/* ------------------------------------------------------------------------ */
/* Training-data pipeline: numpy RandomState, GPTDataset, BlendedDataset    */
/* ------------------------------------------------------------------------ */

/*
 * ds_random_state - numpy's legacy RandomState (MT19937 seeded with
 * init_genrand), the generator Megatron's GPTDataset shuffles with.
 * A plain value the caller owns (on the stack is fine); the fields are
 * private.  One state per thread.
 *
 * ds_random_seed()     RandomState(seed): key[0] = seed, the reference
 *                      init_genrand recurrence, next draw regenerates.
 * ds_random_next32()   the next tempered 32-bit output (seed 1234 gives
 *                      822569775, 2137449171, ...).
 * ds_random_interval() numpy's random_interval: uniform in [0, max] by
 *                      mask-and-reject on 32-bit draws (64-bit draws, high
 *                      word first, when max >= 2^32).
 * ds_random_shuffle()  RandomState.shuffle of a 1-D array of n elements of
 *                      elsize bytes (4 or 8; the values are not looked at):
 *                      for i = n-1 down to 1 swap x[i] and x[random_interval(i)].
 *                      RandomState(1234).shuffle(arange(10)) gives
 *                      [7,2,9,1,0,8,4,5,6,3].
 * None of them fail.  Thread safe on distinct states.
 */
typedef struct ds_random_state {
    uint32_t key[624];
    int pos;
} ds_random_state;

void     ds_random_seed(ds_random_state *rs, uint32_t seed);
uint32_t ds_random_next32(ds_random_state *rs);
uint64_t ds_random_interval(ds_random_state *rs, uint64_t max);
void     ds_random_shuffle(ds_random_state *rs, void *x, size_t n, size_t elsize);

/*
 * ds_normalize_weights() - Megatron's normalize(): w[i] / numpy.sum(w), with
 * numpy's pairwise summation order (so the sum is numpy's to the last bit),
 * in place.  Megatron applies it twice to blend weights (builder, then
 * BlendedDataset); callers that want its bit-exact weights do the same.
 * @return : 0, or DS_ERR_ARG (NULL, n == 0, a weight <= 0 or not finite).
 */
int ds_normalize_weights(double *w, size_t n);

/*
 * ds_split_ranges() - Megatron's --split string to sequence ranges
 * (parse_and_normalize_split, then the builder's split indices): the
 * numbers found in `split` (regex [.0-9]+, padded to three with
 * 0), normalized, cumulated into bookends, and each bookend times
 * num_sequences rounded half-to-even.  Split i is the sequences
 * [begin[i], end[i]); present[i] is 0 where Megatron's split matrix holds
 * None (a zero weight), and then begin = end = 0.  "969,30,1" with N = 12345
 * gives [0,11962) [11962,12333) [12333,12345).
 * @return : 0, or DS_ERR_ARG (NULL, more than three numbers, a number that
 *           does not parse, all zero).
 */
int ds_split_ranges(const char *split, uint64_t num_sequences,
                    uint64_t begin[3], uint64_t end[3], int present[3]);

/*
 * ds_sample_counts() - the [train, valid, test] sample counts Megatron's
 * training.py hands to the dataset builder (core >= 0.13):
 * train = train_samples if non-zero, else train_iters × global_batch_size;
 * eval_iters_total = eval_iters if skip_train, else
 * (train_iters // eval_interval + 1) × eval_iters, where train_iters is
 * train_samples // global_batch_size when train_samples is given;
 * valid = eval_iters_total × global_batch_size; test = eval_iters ×
 * global_batch_size.  Overflow saturates at INT64_MAX.
 * @return : 0, or DS_ERR_ARG (NULL out, global_batch_size or eval_interval 0
 *           while needed).
 */
int ds_sample_counts(int64_t out[3], uint64_t train_samples, uint64_t train_iters,
                     uint64_t global_batch_size, uint64_t eval_iters,
                     uint64_t eval_interval, int skip_train);

/*
 * ds_md5_hex() - the MD5 digest of n bytes as 32 lowercase hex digits and a
 * NUL, the hash Megatron names its cache files with.  Never fails (data may
 * be NULL when n is 0).  Thread safe.
 */
void ds_md5_hex(char out[33], const void *data, size_t n);

/* The three splits, in Megatron's order. */
enum ds_split { DS_SPLIT_TRAIN = 0, DS_SPLIT_VALID = 1, DS_SPLIT_TEST = 2 };

/* Which Megatron-Core the index arrays follow.  They differ in two places
   (tests/data/indices holds golden arrays of both): the sample-index dtype
   (main: int32 when every value fits, 0.8: always int64) and the blend
   sizes (main: mid-level num_samples = ceil(ceil(S·w)·(1+surplus)) and
   blend size Σ ceil(S·w); 0.8: ceil(S·w·1.005) for both). */
enum ds_megatron_version { DS_MEGATRON_MAIN = 0, DS_MEGATRON_0_8 = 1 };

/* The tokenizer identifiers that enter every description (and so every cache
   hash): LEGACY is {"class": "_GPT2BPETokenizer", "tokenizer_path": [vocab,
   merges]}; MAIN is current main's MegatronTokenizerText block
   (docs/formats.md, "GPT index cache"). */
enum ds_tokenizer_ids { DS_TOKENIZER_IDS_LEGACY = 0, DS_TOKENIZER_IDS_MAIN = 1 };

#define DS_NUM_SAMPLES_NONE (-1)

/*
 * ds_gpt_config - everything Megatron's GPTDatasetConfig and the builder's
 * sizes say about the index arrays and the samples.  Start from
 * ds_gpt_config_init(), which sets Megatron's defaults; the strings are
 * borrowed for the duration of ds_pipeline_open() only.
 */
typedef struct ds_gpt_config {
    const char *const *data_path;  /* (n_data_path) --data-path tokens: "P..." or "w1 P1 w2 P2..." */
    size_t n_data_path;
    const char *split;             /* default "969, 30, 1" (Megatron's legacy default, spaces kept);
                                      not looked at with split_data_path */
    const char *const *split_data_path[3]; /* (n_split_data_path[s]) --train-data-path,
                                      --valid-data-path, --test-data-path tokens, each "P..." or
                                      "w1 P1 ...": a blend per split (Megatron's blend_per_split),
                                      each prefix used whole; exclusive with data_path; a split
                                      without tokens is not built */
    size_t n_split_data_path[3];
    uint64_t seq_length;           /* L, > 1 */
    uint32_t seed;                 /* default 1234 */
    int64_t num_samples[3];        /* [train, valid, test]; DS_NUM_SAMPLES_NONE = None */
    int add_extra_token;           /* E1, default 1 (add_extra_token_to_sequence) */
    int drop_last_partial_validation; /* default 1 */
    double surplus;                /* --mid-level-dataset-surplus, default 0.005 (main only) */
    int megatron_version;          /* enum ds_megatron_version, default MAIN */
    const char *cache_dir;         /* --data-cache-path; NULL: build in memory, write nothing */
    int tokenizer_ids;             /* enum ds_tokenizer_ids, default LEGACY */
    const char *vocab_file;        /* as typed on Megatron's command line (identifiers only) */
    const char *merge_file;
    const char *tokenizer_class;   /* NULL: GPT-2 (tokenizer_ids above).  Otherwise the legacy
                                      wrapper class of another tokenizer ("_HuggingFaceTokenizer",
                                      "_SentencePieceTokenizer", "_GPTSentencePieceTokenizer",
                                      "_Llama2Tokenizer"): the identifiers are then {"class": CLASS,
                                      "tokenizer_path": [tokenizer_model]}, plus "vocab_extra_ids":
                                      "0" for the SentencePiece classes, as MegatronTokenizer
                                      records them; tokenizer_ids is not looked at */
    const char *tokenizer_model;   /* --tokenizer-model as typed (with tokenizer_class) */
    int64_t eod;                   /* default 50256 */
    int64_t pad;                   /* default -1: GPT-2 has no pad token */
    int reset_position_ids, reset_attention_mask, eod_mask_loss;
    int mock;                      /* --mock-data: MockGPTDataset; data_path and split are ignored */
    int64_t vocab_size;            /* mock tokens are (k + 1) % vocab_size; default 50257 */
    int num_threads;               /* threads building the independent datasets; 0 (default):
                                      OpenMP's default, 1 without OpenMP.  The arrays are the
                                      same for every count. */
} ds_gpt_config;

void ds_gpt_config_init(ds_gpt_config *cfg);

typedef struct ds_pipeline ds_pipeline;

/*
 * ds_pipeline_open() - Megatron's BlendedMegatronDatasetBuilder(GPTDataset,
 * sizes, config).build(): open every prefix, cut each into the three splits,
 * build each mid-level GPTDataset's document/sample/shuffle indices, and for a
 * blend each split's BlendedDataset indices (docs/architecture.md,
 * "Training data pipeline"):
 *   - one prefix without weight: one GPTDataset per split, num_samples as
 *     given, no blend;
 *   - "w1 P1 w2 P2 ...": weights normalized (twice), blend sizes and
 *     mid-level counts per cfg->megatron_version, build_blending_indices;
 *   - several prefixes without weights: one epoch each, weights = lengths,
 *     blend size min(S, Σ lengths), or the exhaustive blend when S is None;
 *   - cfg->mock (--mock-data): one MockGPTDataset over 100000 computed
 *     sequences (lengths numpy.random.default_rng(0).integers(1, 4096,
 *     dtype=int32), sequence i = 1, 2, ..., len-1 mod vocab_size, then EOD),
 *     split forced to "1,1,1", class "MockGPTDataset" and dataset_path null
 *     in the descriptions; data_path is not looked at.
 *   - cfg->split_data_path (blend_per_split): split s alone is built from
 *     its own list, every prefix of it whole (Megatron's spoofed split
 *     matrix: sequences [0, N), "split" and "split_matrix" null in the
 *     descriptions); one prefix, weighted or not, is a plain GPTDataset
 *     with num_samples = S; several follow the rules above with that
 *     split's size alone; a split without a list is absent.
 * With cfg->cache_dir, each array set is looked up as
 * {md5}-GPTDataset-{split}-*.npy / {md5}-BlendedDataset-{split}-*.npy, named
 * and described exactly as Megatron names them, so either tool reuses the
 * other's cache.  A hit is mmapped (no array is read or built); a set whose
 * description file differs from the expected one, or whose .npy headers do
 * not fit, is rebuilt and replaced (written to temporaries, then renamed).
 * Builds are O(total samples + document index length).
 *
 * @out : receives the handle; on failure it is still set (usable only with
 *        ds_pipeline_error() and ds_pipeline_close()), NULL only on
 *        DS_ERR_NOMEM or a NULL out.
 * @return : 0, or
 *   DS_ERR_ARG        bad config (no data path, data_path together with
 *                     split_data_path, mock with either, L < 2, bad split,
 *                     negative or non-finite weight, weights with a None size);
 *   DS_ERR_EMPTY      a split of some prefix holds no tokens while samples
 *                     are asked of it (Megatron loops forever there);
 *   DS_ERR_OVERSAMPLE a blend needs more samples of a dataset than it has;
 *   DS_ERR_RANGE      a count overflows what the arrays can index;
 *   DS_ERR_IO         a cache file cannot be written or read;
 *   DS_ERR_NOMEM, and any ds_reader_open() error for a prefix.
 * Ownership: the caller closes the handle.  Thread safety: after open, every
 * function taking `const ds_pipeline *` may be called from any thread.
 */
int ds_pipeline_open(const ds_gpt_config *cfg, ds_pipeline **out);
void ds_pipeline_close(ds_pipeline *p);
const char *ds_pipeline_error(const ds_pipeline *p);

/*
 * Plan accessors.  A split is absent when Megatron builds None for it (a zero
 * split weight, or no list for it with split_data_path); then its length is
 * 0 and ds_pipeline_dataset() fails.
 *   ds_pipeline_num_datasets()  number of prefixes (with split_data_path,
 *                               the train list, then valid's, then test's;
 *                               a prefix in two lists counts twice)
 *   ds_pipeline_dataset_split(d) the split prefix d belongs to with
 *                               split_data_path, -1 when it serves every
 *                               split (data_path, mock) or d is out of range
 *   ds_pipeline_weight(d)       normalized weight of prefix d in its blend
 *                               (1.0 unblended; for an unweighted blend, its
 *                               share of the train split, or of its own)
 *   ds_pipeline_is_blend()      1 when the top level of some split is a
 *                               BlendedDataset (ds_pipeline_blend() says
 *                               which)
 *   ds_pipeline_has_split(s)    1 when split s was built
 *   ds_pipeline_length(s)       len() of the top-level dataset of split s
 */
size_t   ds_pipeline_num_datasets(const ds_pipeline *p);
int      ds_pipeline_dataset_split(const ds_pipeline *p, size_t d);
double   ds_pipeline_weight(const ds_pipeline *p, size_t d);
int      ds_pipeline_is_blend(const ds_pipeline *p);
int      ds_pipeline_has_split(const ds_pipeline *p, int split);
uint64_t ds_pipeline_length(const ds_pipeline *p, int split);

/*
 * ds_array - a view of one index array: `n` rows of `cols` elements (1, or 2
 * for the sample index) of numpy dtype `descr` ("<i2", "<i4", "<u4", "<i8").
 * Points into a cache mapping or the handle's memory: valid until close.
 */
typedef struct ds_array {
    const void *data;
    uint64_t n;
    unsigned cols;
    const char *descr;
} ds_array;

/*
 * ds_gpt_info - what one mid-level GPTDataset (prefix d, split s) is.
 */
typedef struct ds_gpt_info {
    const char *path;              /* the prefix as given */
    uint64_t seq_begin, seq_end;   /* its sequences [begin, end) */
    uint64_t tokens_per_epoch;     /* T */
    int64_t num_samples;           /* as asked (DS_NUM_SAMPLES_NONE: one epoch) */
    uint64_t num_epochs;
    int separate_final_epoch;
    uint64_t length;               /* len(dataset) = sample index rows - 1 */
    int from_cache;                /* 1 when the arrays were mmapped from the cache */
    char md5[33];                  /* md5 of description = the cache file hash */
    const char *description;       /* Megatron's unique_description (JSON, indent 4) */
    ds_array document_index, sample_index, shuffle_index;
} ds_gpt_info;

/*
 * ds_pipeline_dataset() - fill *info for prefix d in split s.  The strings and
 * arrays belong to the handle (valid until close).
 * @return : 0, or DS_ERR_ARG (NULL), DS_ERR_RANGE (d or s out of range,
 *           split absent, or prefix d not part of split s).  Thread safe.
 */
int ds_pipeline_dataset(const ds_pipeline *p, int split, size_t d, ds_gpt_info *info);

/*
 * ds_pipeline_blend() - the BlendedDataset of split s: its dataset_index
 * (<i2), dataset_sample_index (<i8), description and md5 (both NULL/"" for
 * an unblended pipeline).
 * @return : 0, DS_ERR_ARG, or DS_ERR_RANGE (no blend, or split absent).
 */
int ds_pipeline_blend(const ds_pipeline *p, int split, ds_array *dataset_index,
                      ds_array *dataset_sample_index, const char **description, const char **md5);

/*
 * ds_sample_origin - where sample k of a split comes from.
 */
typedef struct ds_sample_origin {
    size_t dataset;                /* prefix index */
    uint64_t dataset_sample;       /* index k' inside that GPTDataset */
    uint64_t shuffle_value;        /* shuffle_index[k'] */
    uint64_t doc_first, doc_last;  /* positions in the document index it spans */
    uint64_t seq_first;            /* the sequence (document_index[doc_first]) it starts in */
    uint64_t offset;               /* token offset in seq_first */
} ds_sample_origin;

/*
 * ds_pipeline_text() - the seq_length + E1 token ids of sample k of split s
 * (GPTDataset.__getitem__'s `text`, before tokens/labels are cut from it),
 * padded with cfg->pad when the last partial validation sample is short.
 * @text   : (seq_length + E1) caller buffer.
 * @origin : may be NULL.
 * @return : 0, or DS_ERR_ARG, DS_ERR_RANGE (k >= length, split absent),
 *           DS_ERR_CORRUPT (an index array points outside the data, which
 *           only a tampered cache can do).  Thread safe.
 */
int ds_pipeline_text(const ds_pipeline *p, int split, uint64_t k, int64_t *text,
                     ds_sample_origin *origin);

/*
 * ds_pipeline_sample() - GPTDataset.__getitem__ for sample k of split s:
 * tokens = text[:-1], labels = text[1:] (with E1; without it labels =
 * roll(text, -1) and a pad last label); loss_mask 1, 0 on input EODs with
 * eod_mask_loss and where the label is pad; position_ids 0..L-1,
 * restarting after each input EOD with reset_position_ids; attention_mask
 * lower-triangular (L, L) as 1 = masked (Megatron's bool True), and with
 * reset_attention_mask rows after an EOD at i masked for columns <= i.  Pad
 * ids are then replaced by 0.  Any output pointer may be NULL to skip it.
 * @tokens (L), @labels (L), @loss_mask (L), @position_ids (L),
 * @attention_mask (L, L).
 * @return : as ds_pipeline_text(), plus DS_ERR_NOMEM.  Thread safe.
 */
int ds_pipeline_sample(const ds_pipeline *p, int split, uint64_t k, int64_t *tokens,
                       int64_t *labels, float *loss_mask, int64_t *position_ids,
                       uint8_t *attention_mask);

/*
 * ds_pipeline_num_sequences() - sequences of prefix d's low-level dataset
 * (100000 for mock data), 0 for d out of range.
 * ds_pipeline_is_mock() - 1 when opened with cfg->mock.
 */
uint64_t ds_pipeline_num_sequences(const ds_pipeline *p, size_t d);
int ds_pipeline_is_mock(const ds_pipeline *p);

/* The sequence length L and E1 the handle was opened with. */
uint64_t ds_pipeline_seq_length(const ds_pipeline *p);
unsigned ds_pipeline_extra_token(const ds_pipeline *p);

/*
 * ds_pipeline_reader() - the open reader of prefix d (NULL for d out of
 * range, and for mock data, which has no files), for decoding or raw
 * access.  Owned by the pipeline.
 */
const ds_reader *ds_pipeline_reader(const ds_pipeline *p, size_t d);

#ifdef __cplusplus
}
#endif

#endif /* MDS_DATASET_H */
