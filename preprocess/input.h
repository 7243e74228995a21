/*
 * input.h - a byte source that opens a file (or stdin) and hands back its
 * decompressed bytes: plain, gzip, xz or zstd, chosen by the magic bytes.
 *
 * This is what mdsprep reads its --input through.  It deliberately knows
 * nothing about lines, UTF-8 or JSON (the caller splits lines, json.h parses
 * them), and it never seeks, so pipes and stdin work the same as files.
 *
 * Megatron's tools/preprocess_data.py reads only plain text (partitions > 1
 * adds .gz by name).  We accept more, detected by content rather than by file
 * name, and decode every member / stream / frame like `gzip -dc`, `xz -dc`
 * and `zstd -dc` do.  Anything that would lose data silently (a truncated
 * stream, corrupt data, bytes after the last member) is an error.
 *
 * Each decoder is built in only when its library (zlib, liblzma, libzstd) was
 * found at build time; mds_input_features() lists those that were.  A
 * compressed input whose decoder is missing is still recognised by its magic
 * and refused at open, never read as plain bytes.
 *
 * Libraries never print and never exit: functions return 0 or a negative
 * mds_input_error_code, and the handle keeps a one-line message of the last
 * error (mds_input_error()).
 *
 * Thread safety: a handle is used by one thread at a time.  Different handles
 * are independent.  The xz decoder may run its own worker threads inside
 * mds_input_read(); they never outlive the call that closes the handle.
 */
#ifndef MDS_INPUT_H
#define MDS_INPUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mds_input mds_input;

/* Content formats, as detected from the first bytes of the input:
 *   gzip  1f 8b
 *   xz    fd 37 7a 58 5a 00
 *   zstd  28 b5 2f fd  (or a skippable frame 5? 2a 4d 18)
 * Everything else, including an empty file, is plain.  None of the magics is
 * valid UTF-8 text, so a JSONL file is never mistaken for a compressed one. */
enum mds_input_format {
    MDS_INPUT_PLAIN = 0,
    MDS_INPUT_GZIP,
    MDS_INPUT_XZ,
    MDS_INPUT_ZSTD
};

/* Error codes (all negative). */
enum mds_input_error_code {
    MDS_INPUT_OK = 0,
    MDS_INPUT_ERR_NOMEM = -1,       /* out of memory */
    MDS_INPUT_ERR_OPEN = -2,        /* cannot open the path */
    MDS_INPUT_ERR_IO = -3,          /* read() failed */
    MDS_INPUT_ERR_TRUNCATED = -4,   /* compressed stream ends early */
    MDS_INPUT_ERR_CORRUPT = -5,     /* corrupt data, bad checksum, trailing garbage */
    MDS_INPUT_ERR_UNSUPPORTED = -6, /* valid container with options or memory needs we cannot decode */
    MDS_INPUT_ERR_ARG = -7          /* NULL or invalid argument */
};

/*! mds_input_open() :
 *  Opens `path` ("-" means stdin, which is not closed by mds_input_close())
 *  and reads its first bytes to detect the format.  Those bytes are kept and
 *  handed out again, so non-seekable inputs work.
 *  `threads` is the number of xz decoder threads.  With threads > 1 the xz
 *  input goes through lzma_stream_decoder_mt (memlimit_threading =
 *  lzma_physmem() / 4), which decodes the blocks of a multi-block .xz (as
 *  written by `xz -T`) in parallel.  A regular file whose index (read first,
 *  from the end) shows one stream of one block, which the threaded decoder
 *  would decode in one thread anyway, and threads <= 1 use the plain
 *  single-threaded decoder in the calling thread.
 *  Other formats ignore `threads`.
 *  @return : 0, or MDS_INPUT_ERR_NOMEM / _OPEN / _IO / _UNSUPPORTED / _ARG.
 *            _UNSUPPORTED also when the input is compressed in a format this
 *            build has no decoder for; the message then reads
 *            "'x.jsonl.xz': xz-compressed input, but this build has no
 *            liblzma (install liblzma-dev and rebuild)" ("stdin: ..." for
 *            "-"; zlib / zlib1g-dev for gzip, libzstd / libzstd-dev for zstd).
 *            On success *out is the new handle.  On failure *out is still a
 *            handle that holds only the error message (like sqlite3_open), or
 *            NULL when even that could not be allocated; either way the
 *            caller passes it to mds_input_close().
 *  Ownership : the caller owns *out and releases it with mds_input_close(). */
int mds_input_open(const char *path, int threads, mds_input **out);

/*! mds_input_read() :
 *  Decompresses up to `cap` bytes into `buf`.  It may return fewer than
 *  `cap` bytes before the end (plain input returns what one read() gave);
 *  keep calling until it returns 0.  Concatenated gzip members, xz streams
 *  (with stream padding) and zstd frames are all decoded.  Input is read from
 *  the file in blocks of MDS_INPUT_READ_SIZE bytes.
 *  @return : the number of bytes written (> 0), 0 at the clean end of the
 *            input, or a negative mds_input_error_code:
 *            MDS_INPUT_ERR_IO, _TRUNCATED ("truncated xz stream"),
 *            _CORRUPT ("corrupt zstd data: <zstd error>", "gzip: invalid
 *            compressed data", "gzip: trailing garbage after compressed
 *            data"), _UNSUPPORTED, _NOMEM, _ARG (in == NULL, or buf == NULL
 *            with cap > 0).
 *            Errors and the end are sticky: later calls return the same. */
long long mds_input_read(mds_input *in, void *buf, size_t cap);

/* Read size for the underlying file, in bytes. */
#define MDS_INPUT_READ_SIZE ((size_t)2 << 20)

/*! mds_input_error() :
 *  @return : the message of the last error ("" if none; "out of memory" for
 *            NULL).  The string belongs to the handle and stays valid until
 *            the next call on it or mds_input_close(). */
const char *mds_input_error(const mds_input *in);

/*! mds_input_strerror() :
 *  @return : a static description of an mds_input_error_code. */
const char *mds_input_strerror(int code);

/*! mds_input_format() :
 *  @return : the detected enum mds_input_format (MDS_INPUT_PLAIN for NULL). */
int mds_input_format(const mds_input *in);

/*! mds_input_features() :
 *  @return : the compressed formats this build decodes, as their
 *            mds_input_format_name()s in the order gzip, xz, zstd separated
 *            by single spaces: "gzip xz zstd" when every library was found,
 *            "" when none was (plain input is always read).  A static string;
 *            thread safe. */
const char *mds_input_features(void);

/*! mds_input_format_name() :
 *  @return : "plain", "gzip", "xz", "zstd", or "unknown" (static strings). */
const char *mds_input_format_name(int fmt);

/*! mds_input_compressed_pos() :
 *  @return : bytes of the file consumed by the decoder so far (for progress;
 *            equals mds_input_compressed_size() at the end of a regular file). */
uint64_t mds_input_compressed_pos(const mds_input *in);

/*! mds_input_compressed_size() :
 *  @return : the size of the file in bytes, or 0 when unknown (pipe, stdin
 *            that is not a regular file). */
uint64_t mds_input_compressed_size(const mds_input *in);

/*! mds_input_close() :
 *  Stops any decoder threads, closes the file (not stdin) and frees the
 *  handle.  Accepts NULL. */
void mds_input_close(mds_input *in);

#ifdef __cplusplus
}
#endif

#endif /* MDS_INPUT_H */
