/*
 * dataset.h - the public API of the mds dataset library: Megatron's MMIDIDX
 * indexed dataset (a PREFIX.bin of raw token ids plus a PREFIX.idx index),
 * read through mmap and written byte-identically to Megatron-LM's
 * IndexedDatasetBuilder.  The byte layout is docs/megatron-data-spec.md §1.
 *
 * What it deliberately does not do: tokenize, build GPT sample/shuffle
 * indices, blend datasets, read the legacy "lazy/cached" (TNTIDX) format or
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
    DS_ERR_STATE       = -11   /* writer already finalized, or failed earlier */
};

/*
 * On-disk dtype codes (spec §1.3, current Megatron main).  Code 7 means
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
 * ds_dtype_for_vocab() - Megatron's writer choice (spec §1.5): uint16 when
 * vocab_size < 65500, otherwise int32.  The threshold really is 65500, not
 * 65536, for byte identity with Megatron.
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
 * ds_reader_token() - token k of sequence i widened to int64.  For float64
 * datasets the value is truncated toward zero.  A convenience for tests and
 * tools, not a fast path: use ds_reader_sequence() for bulk access.
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

#ifdef __cplusplus
}
#endif

#endif /* MDS_DATASET_H */
