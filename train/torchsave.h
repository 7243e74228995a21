/*
 * torchsave.h - the archive torch.save writes (PyTorch's PyTorchStreamWriter,
 * caffe2/serialize/inline_container.cc, over miniz), as one item of a
 * Megatron torch_dist checkpoint's __R_T.distcp holds it: an uncompressed
 * zip whose records are named PREFIX/NAME ("archive/" when torch saves to a
 * buffer, as torch.distributed.checkpoint does):
 *     data.pkl  .format_version ("1")  .storage_alignment ("64")
 *     byteorder ("little")  data/0 (a tensor's storage, absent for objects)
 *     version ("3\n")  .data/serialization_id (40 digits)
 * Each record is a local header whose extra field ("FB", length, 'Z'
 * padding) puts the data on a multiple of 64 bytes from the archive's start,
 * the data, a data descriptor (CRC-32, sizes); then the central directory,
 * a zip64 end record and locator, and the end record.  The serialization id
 * is the hash_combine of the std::hash of every record name (in the
 * iteration order of libstdc++'s unordered_set) and of every record's CRC.
 *
 * Reading validates everything before the caller sees data: the end records,
 * the central directory, every local header, data descriptor and CRC-32,
 * records back to back from offset 0 and the directory right after them,
 * the record names (unknown ones refused by name), the small records'
 * contents and the serialization id; ts_tensor_parse then checks data.pkl
 * is exactly the pickle torch.save writes for one tensor
 * (torch._utils._rebuild_tensor_v2 over a cpu Float/BFloat16/Half storage
 * '0', offset 0, contiguous strides, requires_grad False, an empty
 * OrderedDict) and that data/0 holds exactly the tensor's elements.
 * Writing produces the same bytes torch.save does (tests/unit/
 * test_torchsave.c rewrites every item of the fixtures in tests/data/
 * torch_dist and compares byte for byte), into a memory buffer: placing it
 * in a file is the caller's business.
 *
 * What it deliberately does not do: compressed records, records of 4 GiB or
 * more (zip64 sizes), tensors that are views (storage offset, strides other
 * than contiguous, a storage larger than the tensor), more than one storage,
 * dtypes other than f32/bf16/f16, big-endian hosts.  The general pickle
 * (objects in data.pkl) is pickle.h's business.
 *
 * Errors: 0 or a negative enum ts_err; one line naming the archive (and the
 * record) and the cause is written into err.
 * Thread safety: no global state; a ts_archive is read-only once parsed.
 */
#ifndef MDS_TORCHSAVE_H
#define MDS_TORCHSAVE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ts_err {
    TS_OK = 0,
    TS_ERR_FORMAT = -1,  /* malformed, truncated or not what torch.save writes */
    TS_ERR_NOMEM = -2,
    TS_ERR_ARG = -3      /* a bad argument (a shape too large, a name too long) */
};

/* A short name for an error code; never NULL. */
const char *ts_strerror(int code);

#define TS_MAX_DIMS 8
#define TS_MAX_RECORDS 8
#define TS_MAX_NAME 64

/* One record: a view into the parsed bytes, or the caller's for writing. */
typedef struct ts_record {
    char name[TS_MAX_NAME];        /* without the archive prefix */
    const unsigned char *data;
    size_t size;
} ts_record;

/* A parsed archive; every pointer is a view into the caller's bytes. */
typedef struct ts_archive {
    char prefix[TS_MAX_NAME];      /* "archive" */
    ts_record rec[TS_MAX_RECORDS]; /* in file order, serialization id last */
    size_t n;
} ts_archive;

/*
 * ts_archive_parse() - validate size bytes at buf as one torch.save archive
 * and fill *out with views into buf (which must outlive them).  name is used
 * in messages (e.g. "__0_0.distcp@10088").
 * @return : 0, or TS_ERR_FORMAT.
 */
int ts_archive_parse(const unsigned char *buf, size_t size, const char *name, ts_archive *out, char *err, size_t errlen);

/* The record called name, or NULL. */
const ts_record *ts_archive_find(const ts_archive *a, const char *name);

/* A growable output buffer; ts_buf_release frees its bytes (NULL-safe). */
typedef struct ts_buf {
    unsigned char *data;
    size_t len, cap;
} ts_buf;

void ts_buf_release(ts_buf *b);

/*
 * ts_archive_write() - append to out the archive torch.save writes with the
 * n records rec (in that order; n < TS_MAX_RECORDS) under prefix, followed
 * by the .data/serialization_id record it derives from them.
 * @return : 0, TS_ERR_NOMEM, TS_ERR_ARG (a record of 4 GiB or more, a
 * duplicate or over-long name, too many records).
 */
int ts_archive_write(ts_buf *out, const char *prefix, const ts_record *rec, size_t n);

enum ts_dtype { TS_F32 = 0, TS_BF16 = 1, TS_F16 = 2 };   /* as kernels/dtype.h's mds_dtype */

/* One contiguous tensor; data is a view (read) or the caller's (write). */
typedef struct ts_tensor {
    int dtype;                     /* enum ts_dtype */
    int ndim;
    uint64_t shape[TS_MAX_DIMS];
    uint64_t numel;
    const unsigned char *data;     /* numel little-endian elements, unaligned */
    size_t nbytes;
} ts_tensor;

/*
 * ts_tensor_parse() - validate an archive holding one tensor (as
 * torch.save(tensor) writes it) and fill *t with a view of its data.
 * @return : 0, or TS_ERR_FORMAT.
 */
int ts_tensor_parse(const unsigned char *buf, size_t size, const char *name, ts_tensor *t, char *err, size_t errlen);

/*
 * ts_tensor_write() - append to out the archive torch.save(tensor) writes for
 * t (dtype, ndim, shape, data of numel elements; numel is recomputed).
 * @return : 0, TS_ERR_NOMEM, TS_ERR_ARG (ndim over TS_MAX_DIMS, a bad dtype,
 * a size of 4 GiB or more).
 */
int ts_tensor_write(ts_buf *out, const ts_tensor *t);

/*
 * ts_object_write() - append to out the archive torch.save(obj) writes for
 * an object without tensors, given its pickle (protocol 2, pickle.h's
 * pk_write): the records of a tensor's archive without data/0.
 * @return : 0, TS_ERR_NOMEM, TS_ERR_ARG (a pickle of 4 GiB or more).
 */
int ts_object_write(ts_buf *out, const unsigned char *pkl, size_t n);

/* torch's name of a dtype ("torch.float32", "torch.bfloat16", "torch.float16"). */
const char *ts_dtype_name(int dtype);

#ifdef __cplusplus
}
#endif

#endif /* MDS_TORCHSAVE_H */
