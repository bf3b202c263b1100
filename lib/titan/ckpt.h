/*
 * titan/ckpt.h — tensors on disk: the safetensors format (read and write),
 * used for golden files, HuggingFace export/import and tests.  (The HDF5
 * checkpoint of the checkpoint issue belongs to this module too.)
 *
 * safetensors (huggingface/safetensors), all integers little-endian:
 *
 *   offset  size  field
 *        0     8  u64 N: length of the JSON header in bytes (at most
 *                 TITAN_ST_MAX_HEADER = 100,000,000, the HF limit)
 *        8     N  UTF-8 JSON object:
 *                   {"__metadata__": {"key": "value", ...},        (optional)
 *                    "NAME": {"dtype": "F32", "shape": [2, 3],
 *                             "data_offsets": [BEGIN, END]}, ...}
 *                 padded at the end with spaces (the HF writer pads N to a
 *                 multiple of 8 so that the data buffer stays aligned)
 *    8 + N     -  data buffer: each tensor's elements, C order, little-endian,
 *                 at [BEGIN, END) relative to the buffer's start
 *
 * What the reader enforces is what the HF library enforces (Metadata::
 * validate and read_metadata in safetensors/src/tensor.rs), checked in this
 * order, each failure a TITAN_E_FORMAT error naming the file and the fix:
 *   - the file holds the 8-byte length; N <= 100,000,000; 8 + N <= size
 *   - the header is valid UTF-8 JSON (trailing whitespace allowed), an
 *     object, without duplicate keys
 *   - "__metadata__", when present (and not null), maps strings to strings
 *   - every other key is a tensor: "dtype" a known name, "shape" an array of
 *     integers >= 0, "data_offsets" two integers [BEGIN, END] (other fields
 *     are ignored, as serde does)
 *   - numel·bits fits in 64 bits and is a whole number of bytes; END − BEGIN
 *     equals that byte count
 *   - sorted by (BEGIN, END), the tensors tile the data buffer exactly: the
 *     first starts at 0, each starts where the previous ended (no overlap,
 *     no hole), and the last ends at the end of the file (size − 8 − N)
 * Zero-size tensors (a 0 in the shape, BEGIN == END) and scalars (shape [])
 * are allowed.
 *
 * Errors follow lib/titan/core.h: 0 / a pointer on success, a negative
 * enum titan_err (or NULL) with a message naming the file otherwise:
 * TITAN_E_IO (open, map, write), TITAN_E_FORMAT (a bad file),
 * TITAN_E_INVALID (bad arguments to the writer or a checked lookup that
 * does not match), TITAN_E_NOMEM.
 */
#ifndef TITAN_CKPT_H
#define TITAN_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "titan/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TITAN_ST_MAX_HEADER 100000000ULL

/* Element types, in the HF library's Dtype order (the writer sorts tensors
 * by this order, descending, then by name, as HF does). */
enum titan_st_dtype {
	TITAN_ST_BOOL = 0,
	TITAN_ST_F4,       /* 4 bits (MX FP4) */
	TITAN_ST_F6_E2M3,  /* 6 bits */
	TITAN_ST_F6_E3M2,  /* 6 bits */
	TITAN_ST_U8,
	TITAN_ST_I8,
	TITAN_ST_F8_E5M2,
	TITAN_ST_F8_E4M3,
	TITAN_ST_F8_E8M0,
	TITAN_ST_I16,
	TITAN_ST_U16,
	TITAN_ST_F16,
	TITAN_ST_BF16,
	TITAN_ST_I32,
	TITAN_ST_U32,
	TITAN_ST_F32,
	TITAN_ST_C64,      /* complex, two F32 */
	TITAN_ST_F64,
	TITAN_ST_I64,
	TITAN_ST_U64,
	TITAN_ST_NDTYPES
};

/* "F32", ...; NULL for an out-of-range value. */
const char *titan_st_dtype_name(enum titan_st_dtype dt);
/* Exact (case-sensitive) name -> dtype: 0, or TITAN_E_INVALID (no message). */
int titan_st_dtype_parse(const char *name, enum titan_st_dtype *out);
/* Bits per element (4, 6, 8, 16, 32 or 64); 0 for an out-of-range value. */
int titan_st_dtype_bits(enum titan_st_dtype dt);

/* One tensor of an open file.  Everything points into the file object and
 * lives until titan_safetensors_close. */
struct titan_st_tensor {
	const char *name;      /* UTF-8, NUL-terminated */
	enum titan_st_dtype dtype;
	int ndim;              /* 0 for a scalar */
	const int64_t *shape;  /* ndim entries */
	int64_t numel;         /* product of the shape (1 for a scalar) */
	uint64_t begin, end;   /* data_offsets, relative to the data buffer */
	const void *data;      /* the bytes (read-only mapping); end − begin of them */
	size_t nbytes;
};

/* An open safetensors file (read-only memory mapping).  The fields are
 * read-only for callers. */
struct titan_safetensors {
	char *path;
	size_t file_size;
	uint64_t header_len;            /* N */
	const uint8_t *buffer;          /* the data buffer (8 + N into the file) */
	uint64_t buffer_len;            /* file_size − 8 − N */
	size_t n_tensors;
	struct titan_st_tensor *tensors; /* sorted by data offsets (file order) */
	size_t n_meta;
	const char **meta_keys;         /* __metadata__ in header order */
	const char **meta_values;
	/* private */
	void *map_;
	void *json_;
	size_t *by_name_;
	int64_t *shapes_;
};

/* Map and check `path` (see the top of this file).  NULL + error on failure. */
struct titan_safetensors *titan_safetensors_open(const char *path);
/* Unmap and free; NULL is a no-op.  Tensor pointers become invalid. */
void titan_safetensors_close(struct titan_safetensors *f);

/* The tensor called `name`, or NULL (no error recorded) when absent. */
const struct titan_st_tensor *titan_safetensors_find(const struct titan_safetensors *f,
						     const char *name);
/* A checked lookup: the tensor must exist, have `dtype` and, when ndim >= 0,
 * that shape.  0 and *out set, or TITAN_E_INVALID naming the file, the
 * tensor and what differs ("has shape [3, 4], expected [4, 3]"). */
int titan_safetensors_get(const struct titan_safetensors *f, const char *name,
			  enum titan_st_dtype dtype, int ndim, const int64_t *shape,
			  const struct titan_st_tensor **out);
/* A __metadata__ value, or NULL (no error recorded) when absent. */
const char *titan_safetensors_meta(const struct titan_safetensors *f, const char *key);

/* Copy a tensor's elements to `out` (numel floats), converting F32, F16,
 * BF16 and F64 (rounded to nearest) and the integer types I8..U64 and BOOL
 * (exactly when representable).  TITAN_E_INVALID naming the tensor for
 * other dtypes (complex, FP8, FP4/6).  Unaligned data is fine. */
int titan_st_tensor_to_f32(const struct titan_st_tensor *t, float *out);
/* Same for integer tensors to int64 (BOOL, U8..U64 with U64 > INT64_MAX
 * an error); TITAN_E_INVALID for floating dtypes. */
int titan_st_tensor_to_i64(const struct titan_st_tensor *t, int64_t *out);

/* ------------------------------------------------------------------ writer */

/* A tensor to write: `data` holds numel · bits / 8 bytes in little-endian
 * C order (host order on the machines titan runs on). */
struct titan_st_write_tensor {
	const char *name;
	enum titan_st_dtype dtype;
	int ndim;
	const int64_t *shape;
	const void *data;
};

struct titan_st_meta {
	const char *key;
	const char *value;
};

/* Write a safetensors file atomically (titan_afile: a temporary name in the
 * same folder, fsync, rename; "-" = standard output).  Tensors are laid out
 * as the HF writer lays them out — sorted by dtype (descending, HF order)
 * then name, so every tensor is aligned to its element size — and the
 * header is compact JSON padded with spaces to a multiple of 8; without
 * metadata the bytes equal those of HF's safetensors.serialize.  Metadata
 * (may be NULL with n_meta 0) keeps the given order.
 * TITAN_E_INVALID for duplicate or reserved ("__metadata__") names, names or
 * metadata that are not valid UTF-8, negative dims or a sub-byte tensor
 * that is not a whole number of bytes; TITAN_E_IO when writing fails. */
int titan_safetensors_write(const char *path, const struct titan_st_write_tensor *tensors,
			    size_t n, const struct titan_st_meta *meta, size_t n_meta);

#ifdef __cplusplus
}
#endif
#endif
