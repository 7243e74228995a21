/*
 * tensorboard.h - TensorBoard event files: a writer of scalar summaries (what
 * mdstrain's --tensorboard-dir writes, with Megatron's tags) and a strict
 * reader (for the tests and the fuzz target).  docs/formats.md ("TensorBoard
 * event files") specifies the bytes.
 *
 * An event file is a sequence of TFRecords, each
 *     uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
 * (little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), whose
 * data is a serialized tensorflow.Event protobuf: the first holds
 * file_version "brain.Event:2", the others a Summary with one
 * Value {tag, simple_value}, as PyTorch's SummaryWriter.add_scalar writes.
 * The encoding is proto3's (fields in number order, a zero step omitted), so
 * our bytes are the bytes protobuf itself would write for the same event.
 *
 * Writing.  Events are queued in memory and handed to the kernel (one
 * write(2) of whole records) when queue_size events are pending, at
 * tb_writer_flush() and at tb_writer_close(): a process killed at any time
 * leaves a file of whole records up to its last flush, which TensorBoard
 * reads.  (A failed write is cut back to the last whole record.)  No fsync:
 * what was flushed survives the process, not a crash of the machine.
 *
 * What it deliberately does not do: histograms, images, text, graphs, tensor
 * summaries, the writer thread and flush_secs timer of TensorFlow's writer
 * (the caller flushes), printing, exiting.
 *
 * Errors: functions return 0 or a negative enum tb_err; the writer keeps a
 * one-line message (tb_writer_error), the reader writes one into err.
 * Thread safety: a writer is used by one thread at a time; the reader has
 * no global state.
 */
#ifndef MDS_TENSORBOARD_H
#define MDS_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TB_FILE_VERSION "brain.Event:2"

enum tb_err {
    TB_OK = 0,
    TB_ERR_NOMEM = -1,      /* out of memory */
    TB_ERR_IO = -2,         /* mkdir, open, write or read failed */
    TB_ERR_ARG = -3,        /* a NULL or invalid argument, a path too long */
    TB_ERR_TRUNCATED = -4,  /* reader: the data ends inside a record */
    TB_ERR_CRC = -5,        /* reader: a length or data checksum differs */
    TB_ERR_FORMAT = -6      /* reader: the record is not an Event protobuf */
};

/* A static description of an enum tb_err. */
const char *tb_strerror(int code);

/* CRC-32C (Castagnoli) of n bytes, continuing from crc (start with 0). */
uint32_t tb_crc32c(uint32_t crc, const void *p, size_t n);

/* TFRecord's masked CRC-32C of n bytes. */
uint32_t tb_masked_crc32c(const void *p, size_t n);

/* ---- writing ------------------------------------------------------------------ */

typedef struct tb_writer tb_writer;

/*
 * tb_writer_open() - a new event file in dir (created with its parents when
 * missing), named as TensorFlow's writer names them:
 * events.out.tfevents.<seconds, 10 digits>.<host name>.<pid>.<n>, n the
 * first of 0, 1, ... that names no existing file.  The file_version event
 * is written and flushed at once (TensorBoard then lists the run).
 * queue_size: events kept in memory before they are written (Megatron's
 * --tensorboard-queue-size); 0 or 1 writes each event at once.
 * @return : 0, TB_ERR_IO (the message names the path and the cause),
 *           TB_ERR_NOMEM, TB_ERR_ARG.  *out is a handle even on failure
 *           (holding the message) unless out of memory; pass it to
 *           tb_writer_close.
 */
int tb_writer_open(const char *dir, size_t queue_size, tb_writer **out);

/*
 * tb_writer_open_path() - the same with the file's path given and the
 * file_version event's wall time (seconds since the epoch) fixed: for the
 * tests' byte-exact fixtures.  An existing file is an error (TB_ERR_IO).
 */
int tb_writer_open_path(const char *path, size_t queue_size, double wall_time, tb_writer **out);

/*
 * tb_writer_add_scalar() - queue the event {wall_time, step, summary {tag,
 * simple_value = (float)value}}; PyTorch's add_scalar(tag, value, step).
 * wall_time < 0 means now.  Flushes when queue_size events are pending.
 * @return : 0, TB_ERR_NOMEM, TB_ERR_ARG (tag NULL or over 4096 bytes),
 *           TB_ERR_IO (from the flush).
 */
int tb_writer_add_scalar(tb_writer *w, const char *tag, double value, int64_t step, double wall_time);

/* tb_writer_flush() - write every queued event.  @return : 0, TB_ERR_IO. */
int tb_writer_flush(tb_writer *w);

/* The file's path ("" before it was chosen). */
const char *tb_writer_path(const tb_writer *w);

/* The last failure's message ("" if none; "out of memory" for NULL). */
const char *tb_writer_error(const tb_writer *w);

/* tb_writer_close() - flush, close and free.  Accepts NULL (returns 0).
 * @return : 0, or the flush's or close's TB_ERR_IO (the handle is freed
 *           either way, so the message is lost: flush first to read it). */
int tb_writer_close(tb_writer *w);

/* Seconds since the epoch, as Python's time.time(). */
double tb_now(void);

/* ---- reading ------------------------------------------------------------------ */

/* One Summary.Value.  tag points into the caller's buffer (not terminated). */
typedef struct tb_value {
    const char *tag;
    size_t tag_len;
    int has_simple_value;   /* 0: another kind of value (image, tensor, ...) */
    float simple_value;
} tb_value;

/* One Event.  Pointers are views into the caller's buffer or the reader's
 * scratch, valid during the callback only. */
typedef struct tb_event {
    uint64_t offset;            /* of its record in the buffer */
    double wall_time;
    int64_t step;
    const char *file_version;   /* NULL when the event has none */
    size_t file_version_len;
    int has_summary;
    size_t nvalues;
    const tb_value *values;
} tb_event;

/* Called for each event in file order; a non-zero return stops the reading
 * and is returned by tb_read_events. */
typedef int (*tb_event_fn)(void *ctx, const tb_event *ev);

/*
 * tb_read_events() - check and decode every record of buf[0, len): the
 * framing, both checksums of every record, and the Event and Summary
 * protobufs (unknown fields skipped, as protobuf does; groups and
 * malformed varints refused).  Nothing is read outside buf.
 * @return : 0 after the last record, fn's non-zero value, or TB_ERR_TRUNCATED,
 *           TB_ERR_CRC, TB_ERR_FORMAT (err names the record's offset),
 *           TB_ERR_NOMEM, TB_ERR_ARG.
 */
int tb_read_events(const void *buf, size_t len, tb_event_fn fn, void *ctx, char *err, size_t errlen);

/* tb_read_file() - tb_read_events on the whole file at path.
 * @return : as tb_read_events, or TB_ERR_IO. */
int tb_read_file(const char *path, tb_event_fn fn, void *ctx, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* MDS_TENSORBOARD_H */
