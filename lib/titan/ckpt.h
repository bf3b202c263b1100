/*
 * titan/ckpt.h — tensors on disk: the safetensors format (read and write),
 * used for golden files, HuggingFace export/import and tests; the HDF5
 * training checkpoint (step-N.h5, further below); the HuggingFace
 * LlamaForCausalLM layout (names, q/k permutation, config.json; last).
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
#include "titan/data.h"
#include "titan/model.h"

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
	const void *map_;
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

/* ================================================================ dtypes */

/* Storage types of checkpoint tensors (checkpoint.export_dtype). */
enum titan_ckpt_dtype {
	TITAN_CKPT_FLOAT32 = 0,
	TITAN_CKPT_BFLOAT16,
	TITAN_CKPT_FLOAT16,
};
/* "float32", "bfloat16", "float16"; NULL for an out-of-range value. */
const char *titan_ckpt_dtype_name(enum titan_ckpt_dtype dt);
/* Those names, also fp32/f32, bf16, fp16/f16: 0, or TITAN_E_INVALID (no message). */
int titan_ckpt_dtype_parse(const char *name, enum titan_ckpt_dtype *out);
/* Bytes per element: 4 or 2. */
int titan_ckpt_dtype_size(enum titan_ckpt_dtype dt);

/* Conversions.  float -> bfloat16 / float16 round to nearest, ties to even
 * (torch's .to(torch.bfloat16) / .half()): values past the largest finite
 * one become ±inf, NaN stays a (quiet) NaN with its sign; float16 keeps
 * subnormals.  The widening ones are exact. */
uint16_t titan_f32_to_bf16(float x);
float titan_bf16_to_f32(uint16_t b);
uint16_t titan_f32_to_f16(float x);
float titan_f16_to_f32(uint16_t h);
/* n elements: float -> `dt` (out holds n·size bytes) and back. */
void titan_ckpt_cast(enum titan_ckpt_dtype dt, const float *in, void *out, size_t n);
void titan_ckpt_uncast(enum titan_ckpt_dtype dt, const void *in, float *out, size_t n);

/* ======================================================= HDF5 checkpoint */

/*
 * One file per checkpoint, FOLDER/step-N.h5 (N decimal, no padding), HDF5
 * (1.8 file format or newer; h5py and h5dump read it).  Layout:
 *
 *   /                   attrs: format = "titan-checkpoint" (string),
 *                       format_version = 1 (int), titan_version (string),
 *                       config (string: the resolved YAML, may be ""),
 *                       model dims: flavor (string), dim, n_layers, n_heads,
 *                       n_kv_heads, head_dim, ffn_hidden, vocab_size,
 *                       multiple_of, rope_original_max_position,
 *                       tie_word_embeddings, rope_scaling (int64, 0/1 for
 *                       the flags), ffn_dim_multiplier (NaN: none),
 *                       norm_eps, rope_theta, rope_scaling_factor,
 *                       rope_low_freq_factor, rope_high_freq_factor (double)
 *   /model/NAME         one dataset per parameter under torchtitan's name
 *                       (titan/model.h), its logical shape, C order,
 *                       contiguous; float32, float16 or bfloat16 (an HDF5
 *                       float type: 16 bits, sign bit 15, 8-bit exponent at
 *                       bit 7, 7-bit mantissa, bias 127: h5py 3.7 reads
 *                       it as float32 with the exact values, h5dump prints
 *                       the values, HDF5 widens it to float exactly)
 *   /optimizer          attr step (int64: AdamW steps taken)
 *   /optimizer/exp_avg/NAME, /optimizer/exp_avg_sq/NAME   float32 moments
 *   /train_state        attrs step, ntokens_seen (int64)
 *   /lr_scheduler       attr last_epoch (int64)
 *   /dataloader         attr world_size (int64: data-parallel ranks)
 *   /dataloader/dp_rank_R   attrs epoch, position, n_windows, seq_len,
 *                       shuffle, seed (uint64): struct titan_loader_state
 *                       (global: the same for every R)
 *   /rng                attrs seed, stream, offset (uint64): struct titan_rng
 *
 * Every dataset carries attribute crc32c (uint32): the CRC32C of its
 * elements' bytes as stored (C order, little-endian, the stored dtype:
 * h5py's ds[...].tobytes() for float32/float16), whichever ranks wrote
 * which rows and columns (each rank's term XOR-reduced, titan/core.h's
 * titan_crc32c_shift).  Files without it (older titan, h5py-made) are
 * read without a check: the attribute is optional, format_version stays 1.
 *
 * A model-only checkpoint (weights-only export, seed checkpoint step-0,
 * --from hf) has only / and /model.  Groups keep their creation order
 * (h5py: f["model"].keys() in torchtitan's order with track_order).
 *
 * Atomicity: the file is written as FOLDER/step-N.h5.tmp.XXXXXX, closed,
 * fsync'ed, renamed to step-N.h5 and the folder fsync'ed; a crash leaves
 * at most a temporary file, which titan_ckpt_list ignores and
 * titan_ckpt_prune removes.  The rename is the commit: a file named
 * step-N.h5 is complete.
 *
 * Versions: a reader refuses files whose format_version is newer than
 * TITAN_CKPT_VERSION ("written by a newer titan") and files without the
 * format attribute ("not a titan checkpoint").
 *
 * All functions exist without HDF5 support (build with HDF5=no): the ones
 * that touch HDF5 then return TITAN_E_UNSUPPORTED.  HDF5 is not
 * thread-safe in Debian's builds: one thread at a time may call these.
 */
#define TITAN_CKPT_FORMAT "titan-checkpoint"
#define TITAN_CKPT_VERSION 1
#define TITAN_CKPT_CRC_ATTR "crc32c" /* a dataset's checksum (above) */

/* Which part of the checkpoint a tensor belongs to. */
enum titan_ckpt_part {
	TITAN_CKPT_MODEL = 0,      /* /model */
	TITAN_CKPT_EXP_AVG,        /* /optimizer/exp_avg */
	TITAN_CKPT_EXP_AVG_SQ,     /* /optimizer/exp_avg_sq */
	TITAN_CKPT_NPARTS
};
/* "model", "optimizer/exp_avg", "optimizer/exp_avg_sq". */
const char *titan_ckpt_part_name(enum titan_ckpt_part part);

/* The trainer's RNG state (struct titan_rng). */
struct titan_ckpt_rng {
	uint64_t seed, stream, offset;
};

/* Everything that is not a tensor.  torchtitan's names: train_state.step is
 * the last completed step, lr_scheduler.last_epoch LambdaLR's counter (=
 * steps taken), optim_step AdamW's step count. */
struct titan_ckpt_train_state {
	int64_t step, ntokens_seen;
	int64_t lr_last_epoch;
	int64_t optim_step;
	int64_t dp_world_size;          /* entries of `loader` (>= 1) */
	struct titan_loader_state *loader; /* [dp_world_size], loader of dp rank R at R */
	struct titan_ckpt_rng rng;
};

/* What titan_ckpt_save writes and titan_ckpt_load fills.  The arenas are
 * host memory in the table's layout (titan_param_view offsets), owned by
 * the caller; a trainer whose arenas live on a device copies them to host
 * buffers first (that snapshot is also what an async save writes). */
struct titan_ckpt_state {
	const struct titan_param_table *table;
	float *params;                  /* table->arena_floats */
	float *exp_avg, *exp_avg_sq;    /* the AdamW moments; NULL: none */
	struct titan_ckpt_train_state train;
	const char *config_yaml;        /* save: the resolved config (NULL: ""); load: unused */
};

/* Flags of titan_ckpt_save / titan_ckpt_load. */
enum {
	TITAN_CKPT_MODEL_ONLY = 1u << 0,         /* save/load /model only */
	TITAN_CKPT_EXCLUDE_OPTIMIZER = 1u << 1,  /* load: skip /optimizer (moments, step) */
	TITAN_CKPT_EXCLUDE_LR_SCHEDULER = 1u << 2,
	TITAN_CKPT_EXCLUDE_DATALOADER = 1u << 3,
	TITAN_CKPT_EXCLUDE_TRAIN_STATE = 1u << 4,
	TITAN_CKPT_EXCLUDE_RNG = 1u << 5,
};
/* checkpoint.exclude_from_loading names (optimizer, lr_scheduler,
 * dataloader, train_state, rng) -> flags, OR-ed into *flags.
 * TITAN_E_INVALID naming the unknown entry. */
int titan_ckpt_exclude_parse(const struct titan_strlist *names, unsigned *flags);

/* Save `st` as FOLDER/step-STEP.h5 (the folder is created when missing),
 * atomically (above).  `dtype` is the storage type of /model;
 * anything but TITAN_CKPT_FLOAT32 needs TITAN_CKPT_MODEL_ONLY (a full
 * checkpoint keeps float32 for exact resume).  Without MODEL_ONLY,
 * st->exp_avg and exp_avg_sq must be set and train.loader hold
 * train.dp_world_size entries.  The table must be unsharded
 * (TITAN_E_UNSUPPORTED otherwise: a sharded table is saved by all ranks
 * together, titan_ckpt_save_dist).  `path_out` (may be NULL) receives the final path
 * (malloc'd, the caller frees it).  Errors name the file and the object. */
int titan_ckpt_save(const char *folder, int64_t step, const struct titan_ckpt_state *st,
		    unsigned flags, enum titan_ckpt_dtype dtype, char **path_out);
/* Same to an explicit path (PATH.tmp.XXXXXX, renamed to PATH). */
int titan_ckpt_write(const char *path, const struct titan_ckpt_state *st, unsigned flags,
		     enum titan_ckpt_dtype dtype);

/* The multi-rank save: every rank of the communicator calls it with the
 * same arguments but its own table and arenas, and together they write ONE
 * FOLDER/step-STEP.h5, the file titan_ckpt_save writes for the unsharded
 * state (same layout, attributes, dataset order; readers cannot tell).
 *   mpi_comm    a pointer to the MPI_Comm of ALL ranks of the job (as
 *               void *); NULL: a single process, exactly titan_ckpt_save
 *               (write_rows ignored)
 *   write_rows  this rank writes rows [row0, row0 + rows) of every tensor
 *               of its table (params and, unless MODEL_ONLY, both moments);
 *               the ranks with true must cover every row exactly once:
 *               FSDP every rank (a sharded table each), DDP rank 0 only,
 *               HSDP the ranks of replica 0.  The row counts are checked
 *               (TITAN_E_INVALID when a tensor's do not add up).
 * The metadata (/ attributes, /train_state, /dataloader, /rng, ...) comes
 * from every rank's `st` with the same values.  With parallel HDF5
 * (hdf5-mpich) the file is written through MPI-IO, each tensor by
 * collective hyperslab writes; with a serial HDF5 each tensor is gathered
 * to rank 0 (a buffer of the largest tensor there), which writes the file.
 * Atomic across ranks: rank 0 makes the temporary file, every rank's
 * result is agreed after the collective close, and only then rank 0
 * renames it into place; on any error the temporary file is removed and
 * every rank returns the same code with the failing rank's message
 * ("rank 1: ...").  `path_out` as titan_ckpt_save, on every rank.  MPI is
 * called on a duplicate of the communicator made at the first call
 * (collective) and kept until the caller frees its communicator.
 * TITAN_E_UNSUPPORTED with a communicator in a build without MPI;
 * TITAN_E_COMM when MPI fails. */
int titan_ckpt_save_dist(const char *folder, int64_t step, const struct titan_ckpt_state *st,
			 unsigned flags, enum titan_ckpt_dtype dtype, void *mpi_comm,
			 bool write_rows, char **path_out);

/* Asynchronous saves (checkpoint.async_mode: async).  titan_ckpt_async_save
 * waits for the save in flight (if any), copies st's arenas, loader states
 * and config into staging buffers the saver owns (allocated once, tag
 * TITAN_MEM_OTHER, one arena each for the weights and the two moments),
 * and starts a thread that runs titan_ckpt_save and then, when
 * keep_latest_k > 0, titan_ckpt_prune.  It returns when the copy is done:
 * the caller may change its arenas right away.  The time it took is the
 * time training was blocked.  The write's own errors come back from the
 * next titan_ckpt_async_save or titan_ckpt_async_wait (which also fills
 * `res`: the step, the write time, files pruned, the final path, which the
 * caller frees; res->step = -1 when nothing was in flight).  While a save
 * is in flight the caller must not call HDF5 (titan_ckpt_*): wait first. */
struct titan_ckpt_async;
struct titan_ckpt_async_result {
	int64_t step;
	double write_s;
	int removed;
	char *path;
};
int titan_ckpt_async_new(struct titan_allocator *alloc, struct titan_ckpt_async **out);
/* Allocate (and touch) the staging buffers now, for arenas of
 * `arena_floats` (and the moments too when `moments`), so that the first
 * save does not pay for the page faults. */
int titan_ckpt_async_reserve(struct titan_ckpt_async *a, int64_t arena_floats, bool moments);
int titan_ckpt_async_save(struct titan_ckpt_async *a, const char *folder, int64_t step,
			  const struct titan_ckpt_state *st, unsigned flags,
			  enum titan_ckpt_dtype dtype, int64_t keep_latest_k);
/* The same as a multi-rank save (titan_ckpt_save_dist's mpi_comm and
 * write_rows; NULL: titan_ckpt_async_save).  Every rank calls it for the
 * same steps; the staging buffers hold this rank's (sharded) arenas, and
 * the writer threads of all ranks write collectively on a communicator
 * the saver duplicates at its first such call (collective; the process
 * must run MPI_THREAD_MULTIPLE, else TITAN_E_UNSUPPORTED).  Rank 0 prunes
 * (res->removed counts there).  Every rank's wait returns the same
 * result. */
int titan_ckpt_async_save_dist(struct titan_ckpt_async *a, const char *folder, int64_t step,
			       const struct titan_ckpt_state *st, unsigned flags,
			       enum titan_ckpt_dtype dtype, int64_t keep_latest_k, void *mpi_comm,
			       bool write_rows);
/* A save was started and not yet waited for / has finished writing
 * (titan_ckpt_async_wait then returns without blocking). */
bool titan_ckpt_async_busy(const struct titan_ckpt_async *a);
bool titan_ckpt_async_done(struct titan_ckpt_async *a);
int titan_ckpt_async_wait(struct titan_ckpt_async *a, struct titan_ckpt_async_result *res);
/* Waits for a save in flight (its error is dropped: wait first to see it),
 * frees the buffers.  NULL is a no-op. */
void titan_ckpt_async_free(struct titan_ckpt_async *a);

/* Load `path` into `st`: st->table and st->params must be set (and the
 * moments unless MODEL_ONLY / EXCLUDE_OPTIMIZER, and train.loader with
 * train.dp_world_size entries unless MODEL_ONLY / EXCLUDE_DATALOADER).
 * Every parameter of the table must be in /model with the table's logical
 * shape, and /model must hold nothing else; a sharded table reads its rows
 * only.  Stored float16/bfloat16 widen exactly.  Errors (nothing is
 * guaranteed about st's contents after one):
 *   TITAN_E_IO       cannot open / read (the file and the HDF5 message)
 *   TITAN_E_FORMAT   not HDF5, not a titan checkpoint, newer format_version,
 *                    damaged objects, a parameter with an unknown dtype, a
 *                    tensor read whole whose bytes do not match its crc32c
 *                    ("'f.h5': model/norm.weight: checksum mismatch ...")
 *   TITAN_E_INVALID  a missing tensor, an extra tensor, a shape that
 *                    differs ("'f.h5': model/layers.0.attention.wq.weight:
 *                    shape [64, 32], the model has [32, 32]"), a part that
 *                    is asked for but absent (a model-only checkpoint
 *                    loaded without MODEL_ONLY).
 * The data-loader state is global (positions count global rows; every DP
 * rank holds the same), so a checkpoint saved by any number of
 * data-parallel ranks loads into any other: dp_rank_0's state fills all
 * train.dp_world_size entries (saved entries that differ from each other
 * are TITAN_E_FORMAT naming the file). */
int titan_ckpt_load(const char *path, struct titan_ckpt_state *st, unsigned flags);
/* The same on every rank of a communicator (as titan_ckpt_save_dist:
 * mpi_comm a pointer to the MPI_Comm of all ranks; NULL: titan_ckpt_load),
 * each rank with its own (sharded) table, also checking the checksums of
 * the tensors no rank reads whole: the ranks with `verify_rows` must
 * together read every element of every tensor exactly once (those that
 * would write it: FSDP every shard of one replica, DDP one rank, with TP
 * each TP rank its slice, the replicated norms TP rank 0's); their CRC
 * terms are XOR-reduced (one MPI_Allreduce) and compared with the
 * crc32c attributes.  Collective; every rank returns the same result
 * (a rank's own failure as "rank R: ..."), a mismatch naming the file
 * and the dataset.  The training state is set only when everything
 * matched. */
int titan_ckpt_load_dist(const char *path, struct titan_ckpt_state *st, unsigned flags,
			 void *mpi_comm, bool verify_rows);

/* The architecture fields of dims that a model can be built from, as a
 * file gave them (`src` names it, quoted, in the message; `hf`: call the
 * fields by their config.json names): sizes in [1, 2^31), heads that
 * divide dim into even head dims, kv heads that divide the heads,
 * norm_eps, rope_theta and (with rope_scaling) its factors finite and
 * above 0, high_freq_factor above low_freq_factor, a MoE's top_k in
 * [1, num_experts] and sizes in range, and a model whose bytes fit in
 * int64.  TITAN_E_FORMAT naming the field and its value. */
int titan_ckpt_dims_check(const char *src, const struct titan_model_dims *d, bool hf);
/* Does the model of a file (`have`: a checkpoint's or an HF config.json's
 * dims) have the architecture of the config's (`want`)?  Every field that
 * changes what the weights mean: dim, n_layers, n_heads, n_kv_heads,
 * ffn_hidden, vocab_size, tie_word_embeddings, norm_eps, rope_theta,
 * rope_scaling and, when both scale, its factors and original max
 * position (reals bit for bit), and the MoE's routing when the file
 * stores one (moe_* attributes).  TITAN_E_INVALID naming each field that
 * differs with both values and its config key: a setting that does not
 * fit the data.  titan_ckpt_load checks this before the shapes. */
int titan_ckpt_dims_match(const char *src, const struct titan_model_dims *have,
			  const struct titan_model_dims *want);
struct titan_ckpt_file;
/* The dims of an open checkpoint (titan_ckpt_dims_check) and its number of
 * model tensors against them (a MoE block's included), so that a table
 * built from those dims is no larger than the file: TITAN_E_FORMAT naming
 * the file; TITAN_E_INVALID naming the first MoE tensor of a MoE written
 * without the moe_* attributes. */
int titan_ckpt_check_dims(struct titan_ckpt_file *f);
/* Every parameter of t among the file's model tensors with its shape, and
 * nothing else (as titan_ckpt_load checks): the tensors' sizes are known
 * to fit in the file, so a caller can check before it allocates.
 * TITAN_E_INVALID naming the file and the tensor. */
int titan_ckpt_check_model(struct titan_ckpt_file *f, const struct titan_param_table *t);

/* ---- checkpoint folders *//* ---- checkpoint folders */

/* Complete steps in `folder` (files named exactly step-N.h5, N a decimal
 * integer without sign), ascending, in *steps (malloc'd; free() it) and
 * *n.  A missing folder is an empty list (0); other errors TITAN_E_IO. */
int titan_ckpt_list(const char *folder, int64_t **steps, size_t *n);
/* Newest complete step in *step, or -1 when there is none; 0 / TITAN_E_IO. */
int titan_ckpt_latest(const char *folder, int64_t *step);
/* FOLDER/step-N.h5 into buf; TITAN_E_INVALID when it does not fit. */
int titan_ckpt_path(char *buf, size_t n, const char *folder, int64_t step);
/* Delete complete steps older than the newest `keep_latest_k` (0 keeps
 * all; the newest complete step is never deleted) and temporary files of
 * steps not newer than the newest complete one (a crashed write; a write
 * in progress is always for a newer step).  *removed (may be NULL) counts
 * deleted files.  TITAN_E_INVALID for k < 0; TITAN_E_IO naming the file. */
int titan_ckpt_prune(const char *folder, int64_t keep_latest_k, int *removed);

/* Delete the temporary files of `folder` (step-N.h5.tmp.XXXXXX, what a
 * killed write leaves) last modified before `before_ns` (CLOCK_REALTIME
 * nanoseconds), whatever the steps.  For a caller that owns the folder
 * (no live writer): titan-train at start, under its dump folder's lock.
 * *removed (may be NULL) counts them.  TITAN_E_IO naming the file. */
int titan_ckpt_clean_tmp(const char *folder, int64_t before_ns, int *removed);
/* Move the complete steps of `folder` newer than `step` into a new
 * subfolder FOLDER/superseded-YYYYmmdd-HHMMSS (a run resumed from `step`
 * starts a new lineage: the newer files are of the run that went on from
 * there before, and would be taken for this run's by keep_latest_k and
 * the next resume).  Nothing is deleted.  *subfolder (malloc'd, NULL when
 * nothing moved) and the moved steps *moved (malloc'd; free both) / *n,
 * also on failure (what was moved before it).  TITAN_E_IO naming the file. */
int titan_ckpt_supersede(const char *folder, int64_t step, char **subfolder, int64_t **moved,
			 size_t *n);

/* ---- streaming writer (what titan_ckpt_write uses; converters too) */

struct titan_ckpt_writer;
/* Create PATH.tmp.XXXXXX with the root attributes (dims, config, format). */
int titan_ckpt_writer_open(const char *path, const struct titan_model_dims *dims,
			   const char *config_yaml, struct titan_ckpt_writer **out);
/* One tensor (ndim 1..4, data = numel floats in C order) stored as `dtype`. */
int titan_ckpt_writer_tensor(struct titan_ckpt_writer *w, enum titan_ckpt_part part,
			     const char *name, int ndim, const int64_t *shape,
			     const float *data, enum titan_ckpt_dtype dtype);
/* /train_state, /lr_scheduler, /optimizer step, /dataloader, /rng. */
int titan_ckpt_writer_train_state(struct titan_ckpt_writer *w,
				  const struct titan_ckpt_train_state *ts);
/* rc == 0: close, fsync, rename into place, fsync the folder; otherwise (or
 * when committing fails) remove the temporary file.  Frees w (NULL: returns
 * rc).  Returns rc or the commit's error. */
int titan_ckpt_writer_close(struct titan_ckpt_writer *w, int rc);

/* ---- reading any checkpoint (titan-ckpt-convert, inspection) */

struct titan_ckpt_tensor_info {
	enum titan_ckpt_part part;
	char name[TITAN_PARAM_NAME_MAX + 32]; /* name inside the part's group */
	enum titan_ckpt_dtype dtype;          /* storage type */
	int ndim;                             /* 0..4 */
	int64_t shape[4];
	int64_t numel;
	uint64_t storage_bytes;               /* bytes in the file */
	bool has_crc32c;                      /* the crc32c attribute is there */
	uint32_t crc32c;                      /* its value */
};

struct titan_ckpt_info {
	char *path;
	uint64_t file_size;
	int64_t format_version;
	char *titan_version;                  /* writer's version, "" when absent */
	char *config_yaml;                    /* "" when absent */
	struct titan_model_dims dims;
	bool has_optimizer, has_train_state, has_lr_scheduler, has_dataloader, has_rng;
	struct titan_ckpt_train_state train;  /* what is present; loader owned here */
	size_t n_tensors;
	struct titan_ckpt_tensor_info *tensors; /* model, exp_avg, exp_avg_sq; each
						   in stored (creation) order */
};

struct titan_ckpt_file;
/* Open and check (format, version, dims, every tensor's type and rank).
 * Errors as titan_ckpt_load.  titan_ckpt_file_info stays valid until close. */
int titan_ckpt_open(const char *path, struct titan_ckpt_file **out);
const struct titan_ckpt_info *titan_ckpt_file_info(const struct titan_ckpt_file *f);
void titan_ckpt_close(struct titan_ckpt_file *f); /* NULL-safe */
/* A tensor by part and name, or NULL (no error). */
const struct titan_ckpt_tensor_info *titan_ckpt_find(const struct titan_ckpt_file *f,
						     enum titan_ckpt_part part, const char *name);
/* Rows [row0, row0 + rows) of dim 0 (all: 0, shape[0]; a 0-d tensor: 0, 1)
 * as float32 into out (rows · numel / shape[0] floats).  A read of the
 * whole tensor checks its crc32c attribute when it has one: a mismatch is
 * TITAN_E_FORMAT "'FILE': model/NAME: checksum mismatch (...): the file
 * is damaged" (out then holds the damaged values).  Partial reads are
 * checked together by titan_ckpt_load_dist. */
int titan_ckpt_read(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
		    int64_t row0, int64_t rows, float *out);
/* Of a 2-d tensor, rows [row0, row0 + rows) x columns [col0, col0 + cols)
 * into out (rows · cols floats): a tensor-parallel slice. */
int titan_ckpt_read_window(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
			   int64_t row0, int64_t rows, int64_t col0, int64_t cols, float *out);
/* The same for a window [col0, col0 + cols) of dim `wdim` (1 .. ndim - 1;
 * 0: whole rows) of rows [row0, row0 + rows), every other dim whole, into
 * out packed in C order: a tensor-parallel slice of a 3-d expert tensor
 * (w1/w3 [E, F, C] on dim 1, w2 [E, C, F] on dim 2). */
int titan_ckpt_read_window_dim(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
			       int64_t row0, int64_t rows, int wdim, int64_t col0, int64_t cols,
			       float *out);
/* Check t's stored bytes against its crc32c attribute, reading them in
 * blocks (no copy for the caller).  0 when they match or when t has no
 * checksum (t->has_crc32c says which); TITAN_E_FORMAT naming the file and
 * the dataset on a mismatch; TITAN_E_IO when reading fails.  *crc (may be
 * NULL): the CRC32C of the bytes read. */
int titan_ckpt_verify(struct titan_ckpt_file *f, const struct titan_ckpt_tensor_info *t,
		      uint32_t *crc);

/* ================================================ HuggingFace Llama layout */

/*
 * LlamaForCausalLM (transformers) as torchtitan's Llama3StateDictAdapter
 * maps it (docs/torchtitan-notes.md §6):
 *
 *   tok_embeddings.weight             model.embed_tokens.weight
 *   layers.I.attention.wq.weight      model.layers.I.self_attn.q_proj.weight  (permuted)
 *   layers.I.attention.wk.weight      model.layers.I.self_attn.k_proj.weight  (permuted)
 *   layers.I.attention.wv.weight      model.layers.I.self_attn.v_proj.weight
 *   layers.I.attention.wo.weight      model.layers.I.self_attn.o_proj.weight
 *   layers.I.feed_forward.w1.weight   model.layers.I.mlp.gate_proj.weight
 *   layers.I.feed_forward.w2.weight   model.layers.I.mlp.down_proj.weight
 *   layers.I.feed_forward.w3.weight   model.layers.I.mlp.up_proj.weight
 *   layers.I.attention_norm.weight    model.layers.I.input_layernorm.weight
 *   layers.I.ffn_norm.weight          model.layers.I.post_attention_layernorm.weight
 *   norm.weight                       model.norm.weight
 *   output.weight                     lm_head.weight (absent when tied)
 *
 * Qwen3ForCausalLM (model_type qwen3, torchtitan's Qwen3StateDictAdapter):
 * the same, plus
 *   layers.I.attention.q_norm.weight  model.layers.I.self_attn.q_norm.weight (permuted)
 *   layers.I.attention.k_norm.weight  model.layers.I.self_attn.k_norm.weight (permuted)
 * and config.json's head_dim apart from hidden_size / heads.
 *
 * q/k permutation: torchtitan's RoPE rotates interleaved pairs (2j, 2j+1)
 * of each head, HF's rotate_half pairs (j, j + hd/2).  With nh heads (n_heads
 * for wq, n_kv_heads for wk), rows = nh·hd:
 *   tt -> HF: w.view(nh, hd/2, 2, dim).transpose(1, 2).reshape(rows, dim)
 *   HF -> tt: w.view(nh, 2, hd/2, dim).transpose(1, 2).reshape(rows, dim)
 * i.e. HF row h·hd + i·hd/2 + j is tt row h·hd + 2j + i (i in {0, 1}).
 */

/* HF name of a parameter into buf; TITAN_E_INVALID when it does not fit. */
int titan_hf_param_name(const struct titan_param *p, char *buf, size_t n);
/* A Qwen3 MoE (Qwen3MoeForCausalLM) block's feed-forward:
 *   layers.I.moe.router.gate.weight [E, C]  model.layers.I.mlp.gate.weight
 *   layers.I.moe.experts.w1 [E, F, C]       model.layers.I.mlp.experts.e.gate_proj.weight [F, C]
 *   layers.I.moe.experts.w3 [E, F, C]       ... .experts.e.up_proj.weight [F, C]
 *   layers.I.moe.experts.w2 [E, C, F]       ... .experts.e.down_proj.weight [C, F]
 *   layers.I.moe.expert_bias [E]            none: dropped on export, zero on import
 * (shared experts have no Qwen3 MoE name).  DeepseekV3ForCausalLM (model.name
 * deepseek_v3): the same experts and gate, and
 *   layers.I.moe.expert_bias [E]            model.layers.I.mlp.gate.e_score_correction_bias
 *   layers.I.moe.shared_experts.w1/w3/w2    ... .mlp.shared_experts.gate_proj/up_proj/down_proj
 *   layers.I.attention.wq / wq_a / q_norm / wq_b
 *                                           ... .self_attn.q_proj / q_a_proj / q_a_layernorm / q_b_proj
 *   layers.I.attention.wkv_a / kv_norm / wkv_b
 *                                           ... .self_attn.kv_a_proj_with_mqa / kv_a_layernorm / kv_b_proj
 * (no RoPE permutation: HF's DeepSeek-V3 keeps the adjacent pairs,
 * rope_interleave).  titan_hf_parts: the HF tensors of a parameter (E for
 * the stacked experts, 0 for a Qwen3 MoE's expert_bias, else 1);
 * titan_hf_part_name / _shape: part e's name and 2-d (or 1-d) shape.
 * Llama4ForCausalLM (model.name llama4, model_type llama4_text):
 *   layers.I.feed_forward.w1/w3/w2          model.layers.I.feed_forward.gate_proj/up_proj/down_proj
 *   layers.I.moe.router.gate.weight [E, C]  ... .feed_forward.router.weight
 *   layers.I.moe.experts.w1 and w3          ... .feed_forward.experts.gate_up_proj [E, C, 2F]
 *                                           (one tensor, transposed: [:, :, :F] is w1[e]ᵀ,
 *                                           [:, :, F:] is w3[e]ᵀ; both parameters name it)
 *   layers.I.moe.experts.w2 [E, C, F]       ... .feed_forward.experts.down_proj [E, F, C] (w2[e]ᵀ)
 *   layers.I.moe.shared_experts.w1/w3/w2    ... .feed_forward.shared_expert.gate_proj/up_proj/down_proj
 *   layers.I.moe.expert_bias [E]            none: dropped on export, zero on import
 * (no RoPE permutation: HF's Llama 4 rotates the adjacent pairs as
 * complex numbers, apply_rotary_emb; shapes up to 3-d). */
int64_t titan_hf_parts(const struct titan_model_dims *d, const struct titan_param *p);
int titan_hf_part_name(const struct titan_model_dims *d, const struct titan_param *p, int64_t e,
		       char *buf, size_t n);
void titan_hf_part_shape(const struct titan_model_dims *d, const struct titan_param *p, int *ndim,
			 int64_t shape[3]);
/* Permute a q/k weight [rows, cols] (rows = n_heads · head_dim, head_dim
 * even) out of place: to_hf true = tt -> HF, false = HF -> tt. */
void titan_hf_permute_qk(const float *in, float *out, int64_t n_heads, int64_t rows,
			 int64_t cols, bool to_hf);
/* The heads titan_hf_permute_qk takes for p: n_heads for wq, n_kv_heads
 * for wk, 1 for Qwen3's q_norm / k_norm ([head_dim], one head's layout);
 * 0 for a parameter kept as it is. */
int64_t titan_hf_qk_heads(const struct titan_model_dims *d, const struct titan_param *p);

/* Reads config.json of a LlamaForCausalLM into dims (flavor: the matching
 * titan flavor's name, else "custom"); *bos, *eos (may be NULL) get the ids
 * or -1.  TITAN_E_UNSUPPORTED naming the key for what titan's Llama cannot
 * be (attention_bias, another rope_type, head_dim != hidden/heads, another
 * hidden_act); TITAN_E_FORMAT for a file that is not such a config. */
int titan_hf_read_config(const char *path, struct titan_model_dims *dims, int64_t *bos,
			 int64_t *eos);

struct titan_hf_export_opts {
	enum titan_ckpt_dtype dtype;   /* of the weights (config torch_dtype) */
	uint64_t max_shard_size;       /* bytes per shard; 0: 5 GB (5·10^9, HF's "5GB") */
	const char *tokenizer;         /* copied into the folder under its base name
					  and read for bos/eos ids; a .tiktoken file
					  also gives tokenizer.json (byte-level BPE,
					  merges recovered) and tokenizer_config.json;
					  NULL: none */
	int64_t bos_id, eos_id;        /* -1: the tokenizer's, else Llama 3's
					  128000/128001 when vocab_size is 128256,
					  else omitted */
	int64_t max_position_embeddings; /* 0: 131072 with Llama 3.1 rope scaling
					  (8192·16, Llama 3.1's), else
					  rope_original_max_position */
};
void titan_hf_export_opts_default(struct titan_hf_export_opts *o);

/* Where the exporter gets fp32 tensors: fill `out` (p->numel floats, logical
 * torchtitan layout) with parameter p; 0 or a negative titan_err. */
typedef int (*titan_hf_get_fn)(void *ctx, const struct titan_param *p, float *out);

/* Write the HF folder `outdir` (created when missing): model.safetensors,
 * or model-0000K-of-0000N.safetensors + model.safetensors.index.json when
 * the weights exceed max_shard_size; config.json; generation_config.json;
 * the tokenizer.  Each file is written atomically; on failure the files
 * written so far are removed.  `t` must be unsharded. */
int titan_hf_export(const char *outdir, const struct titan_param_table *t, titan_hf_get_fn get,
		    void *ctx, const struct titan_hf_export_opts *o);

/* An HF folder opened for import: config.json plus model.safetensors or
 * the shards of model.safetensors.index.json. */
struct titan_hf_model;
/* Checks config.json, every tensor's presence and shape against the table
 * built from it, and that no unknown tensor is present (rotary_emb.inv_freq
 * and a tied model's lm_head.weight are ignored).  Errors name the file. */
int titan_hf_open(const char *dir, struct titan_hf_model **out);
void titan_hf_close(struct titan_hf_model *m); /* NULL-safe */
/* The parameter table of the model (unsharded, owned by m). */
const struct titan_param_table *titan_hf_table(const struct titan_hf_model *m);
/* Parameter p of the table in torchtitan layout (q/k un-permuted) as fp32
 * (F32, F16, BF16, F64 sources): p->numel floats. */
int titan_hf_read(const struct titan_hf_model *m, const struct titan_param *p, float *out);

/* A config YAML for dims (defaults elsewhere): the flavor when dims are a
 * known flavor's, else flavor custom with dim, n_layers, ... set.  malloc'd
 * text, or NULL with an error.  Used for checkpoints made from HF weights. */
char *titan_ckpt_config_for_dims(const struct titan_model_dims *dims);

/* Conversions between a checkpoint file and an HF folder, shared by
 * titan-ckpt-convert (--to hf, --to gguf, --from hf) and titan-train
 * (checkpoint.last_save_in_hf, checkpoint.initial_load_in_hf).  `on_tensor`
 * (may be NULL) is called with the bytes of each tensor before it is read
 * (a progress meter). */
typedef void (*titan_ckpt_tensor_fn)(void *ctx, uint64_t bytes);

/* The model of a checkpoint file as a titan_hf_get_fn source. */
struct titan_ckpt_model_src {
	struct titan_ckpt_file *f;
	struct titan_param_table table; /* of the file's dims, unsharded */
	titan_ckpt_tensor_fn on_tensor;
	void *ctx;
};
/* Open `path`, check its dims and every model tensor's shape against the
 * table built from them before anything is read.  Close s even on error. */
int titan_ckpt_model_open(const char *path, struct titan_ckpt_model_src *s);
void titan_ckpt_model_close(struct titan_ckpt_model_src *s);
/* A titan_hf_get_fn: ctx is a struct titan_ckpt_model_src. */
int titan_ckpt_model_get(void *ctx, const struct titan_param *p, float *out);

/* The model of checkpoint `path` as the HF folder `outdir` (titan_hf_export). */
int titan_hf_export_ckpt(const char *path, const char *outdir,
			 const struct titan_hf_export_opts *o);
/* The HF model m as the model-only checkpoint `out` (every tensor in
 * dtype, the config YAML of titan_ckpt_config_for_dims), written
 * atomically.  A MoE's expert_bias (DeepSeek-V3's e_score_correction_bias,
 * zeros for the families whose HF model has none) only with
 * `expert_bias`; without, the file's model has no load balancing
 * (moe_load_balance_coeff null). */
int titan_hf_write_ckpt(const struct titan_hf_model *m, const char *out,
			enum titan_ckpt_dtype dtype, bool expert_bias,
			titan_ckpt_tensor_fn on_tensor, void *ctx);

/* ===================================================================== GGUF */

/*
 * GGUF, ggml's file format (ggml-org/ggml docs/gguf.md) as llama.cpp reads
 * it: version 3, little-endian, every integer unaligned.
 *
 *   offset  size  field
 *        0     4  magic "GGUF"
 *        4     4  u32 version: 3 (2 has the same layout and is read too)
 *        8     8  u64 T: tensor count
 *       16     8  u64 K: metadata key/value count
 *       24     -  K pairs: string key, u32 value type, value
 *              -  T tensor infos: string name, u32 n_dims (1..4), n_dims u64
 *                 dims ne[0..n_dims) innermost first (ne[0] is the length of
 *                 a row: a row-major [rows, cols] matrix has ne = {cols,
 *                 rows}), u32 ggml type, u64 offset into the data section
 *              -  zero padding up to a multiple of the alignment
 *              -  the data section: each tensor's bytes at its offset (a
 *                 multiple of the alignment); ggml writers pad every tensor,
 *                 the last included, to the alignment
 *   string:  u64 byte length, then the bytes (UTF-8, no terminating NUL)
 *   value:   by type (enum titan_gguf_type); bool is one byte 0 or 1; an
 *            array is u32 element type, u64 count, the elements (arrays of
 *            arrays are refused, as ggml refuses them)
 *   general.alignment (u32, a power of two) sets the alignment; default 32.
 *
 * The reader maps the file read-only and checks, each failure a
 * TITAN_E_FORMAT error naming the file, the field and its byte offset:
 *   - magic "GGUF" (a byte-swapped version says big-endian: refused),
 *     version 2 or 3
 *   - every length against the bytes left in the file before anything is
 *     allocated: T and K, string lengths, array counts (times the smallest
 *     element size)
 *   - keys non-empty, valid UTF-8 without NUL; no key twice; known value
 *     and element types; bools 0 or 1; general.alignment a u32 power of two
 *   - tensor names 1..63 bytes of UTF-8 without NUL (ggml's GGML_MAX_NAME),
 *     none twice; n_dims 1..4; dims < 2^63 with a product that does not
 *     overflow; a known ggml type whose block divides ne[0]
 *   - offsets multiples of the alignment; each tensor's bytes (product of
 *     the dims / block size × block bytes) inside the file; no two tensors
 *     overlapping (holes between tensors are allowed, as the spec allows)
 *
 * The writer builds the file in memory (metadata, tensor infos) and
 * streams the tensor data at write time, atomically (titan_afile).
 */

enum titan_gguf_type {
	TITAN_GGUF_UINT8 = 0,
	TITAN_GGUF_INT8,
	TITAN_GGUF_UINT16,
	TITAN_GGUF_INT16,
	TITAN_GGUF_UINT32,
	TITAN_GGUF_INT32,
	TITAN_GGUF_FLOAT32,
	TITAN_GGUF_BOOL,
	TITAN_GGUF_STRING,
	TITAN_GGUF_ARRAY,
	TITAN_GGUF_UINT64,
	TITAN_GGUF_INT64,
	TITAN_GGUF_FLOAT64,
	TITAN_GGUF_NTYPES
};
/* "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
 * "array", "u64", "i64", "f64"; NULL out of range. */
const char *titan_gguf_type_name(enum titan_gguf_type t);

/* ggml tensor types (ggml.h enum ggml_type; ids 4, 5, 31-33, 36-38 are
 * retired and unknown here). */
enum {
	TITAN_GGML_F32 = 0,
	TITAN_GGML_F16 = 1,
	TITAN_GGML_BF16 = 30,
	TITAN_GGML_NTYPES = 43
};
/* "F32", "Q4_K", ...; NULL for an unknown type. */
const char *titan_ggml_type_name(uint32_t type);
/* Elements per block and bytes per block (1 and the element size for
 * plain types): 0, or TITAN_E_INVALID (no message) for an unknown type. */
int titan_ggml_type_block(uint32_t type, uint32_t *block, uint32_t *block_bytes);

#define TITAN_GGUF_DEFAULT_ALIGNMENT 32
#define TITAN_GGUF_MAX_NAME 63   /* bytes of a tensor name */

/* One metadata pair of an open file.  Pointers live until close. */
struct titan_gguf_kv {
	const char *key;             /* NUL-terminated */
	enum titan_gguf_type type;
	enum titan_gguf_type elem;   /* ARRAY: element type */
	uint64_t n;                  /* ARRAY: element count; 1 otherwise */
	uint64_t offset;             /* byte offset of the pair in the file */
	const uint8_t *data;         /* the value in the mapping: a scalar's bytes,
					a string's u64 length, an array's first element */
	const uint64_t *str_at_;     /* private: string arrays' element offsets from data */
	size_t str0_;                /* private */
};

/* One tensor of an open file. */
struct titan_gguf_tensor {
	const char *name;            /* NUL-terminated */
	uint32_t type;               /* ggml type */
	int n_dims;                  /* 1..4 */
	int64_t ne[4];               /* GGUF order, innermost first; 1 past n_dims */
	int64_t shape[4];            /* row-major: shape[i] = ne[n_dims - 1 - i] */
	int64_t numel;
	uint64_t offset;             /* in the data section */
	uint64_t nbytes;
	uint64_t info_offset;        /* byte offset of the tensor info in the file */
	const void *data;            /* nbytes in the read-only mapping */
};

struct titan_gguf {
	char *path;
	size_t file_size;
	uint32_t version;
	uint32_t alignment;
	uint64_t data_offset;        /* the data section's byte offset */
	size_t n_kv;
	struct titan_gguf_kv *kv;    /* file order */
	size_t n_tensors;
	struct titan_gguf_tensor *tensors; /* file order */
	/* private */
	const void *map_;
	char *pool_;
	uint64_t *str_at_;
	size_t *by_name_;
};

/* Map and check `path` (above).  NULL + error (TITAN_E_IO, TITAN_E_FORMAT,
 * TITAN_E_NOMEM) on failure. */
struct titan_gguf *titan_gguf_open(const char *path);
void titan_gguf_close(struct titan_gguf *f); /* NULL-safe */
/* By name, or NULL (no error recorded). */
const struct titan_gguf_kv *titan_gguf_find_kv(const struct titan_gguf *f, const char *key);
const struct titan_gguf_tensor *titan_gguf_find(const struct titan_gguf *f, const char *name);

/* Scalar values: an integer or bool type widened to int64 (a u64 above
 * INT64_MAX is an error); a float type (or an integer) as double; a string
 * (pointer into the mapping, *len bytes, not NUL-terminated).
 * TITAN_E_INVALID naming the key when the type does not fit; the string
 * getter returns NULL then (no error recorded). */
int titan_gguf_kv_int(const struct titan_gguf_kv *kv, int64_t *out);
int titan_gguf_kv_float(const struct titan_gguf_kv *kv, double *out);
const char *titan_gguf_kv_str(const struct titan_gguf_kv *kv, size_t *len);
/* Element i of an array, as the scalar getters; out of range or another
 * type: TITAN_E_INVALID (NULL for strings). */
int titan_gguf_arr_int(const struct titan_gguf_kv *kv, uint64_t i, int64_t *out);
int titan_gguf_arr_float(const struct titan_gguf_kv *kv, uint64_t i, double *out);
const char *titan_gguf_arr_str(const struct titan_gguf_kv *kv, uint64_t i, size_t *len);

/* A tensor's elements as numel floats: F32, F16, BF16, F64 and I8..I64.
 * TITAN_E_UNSUPPORTED naming the tensor for quantized types. */
int titan_gguf_tensor_to_f32(const struct titan_gguf_tensor *t, float *out);

/* ---- writer */

struct titan_gguf_writer;
struct titan_gguf_writer *titan_gguf_writer_new(void); /* NULL + TITAN_E_NOMEM */
void titan_gguf_writer_free(struct titan_gguf_writer *w); /* NULL-safe */

/* Metadata in call order; values are copied.  TITAN_E_INVALID for a key
 * that repeats, is empty, not UTF-8 or contains NUL; general.alignment must
 * be a u32 power of two (it sets the writer's alignment). */
int titan_gguf_set_u32(struct titan_gguf_writer *w, const char *key, uint32_t v);
int titan_gguf_set_i32(struct titan_gguf_writer *w, const char *key, int32_t v);
int titan_gguf_set_u64(struct titan_gguf_writer *w, const char *key, uint64_t v);
int titan_gguf_set_f32(struct titan_gguf_writer *w, const char *key, float v);
int titan_gguf_set_f64(struct titan_gguf_writer *w, const char *key, double v);
int titan_gguf_set_bool(struct titan_gguf_writer *w, const char *key, bool v);
int titan_gguf_set_str(struct titan_gguf_writer *w, const char *key, const char *v);
/* Any scalar type: `v` points to the value in host layout (bool: one byte,
 * string: a const char * NUL-terminated). */
int titan_gguf_set(struct titan_gguf_writer *w, const char *key, enum titan_gguf_type type,
		   const void *v);
/* An array of n numbers or bools of type `elem` (host layout, packed). */
int titan_gguf_set_array(struct titan_gguf_writer *w, const char *key,
			 enum titan_gguf_type elem, const void *values, uint64_t n);
/* An array of n strings; lens may be NULL (strlen of each). */
int titan_gguf_set_array_str(struct titan_gguf_writer *w, const char *key,
			     const char *const *strs, const size_t *lens, uint64_t n);

/* A tensor: ggml `type`, `ndim` (1..4) dims in row-major order (the writer
 * reverses them into GGUF's order), `data` (numel / block · block bytes,
 * host layout) kept by pointer until the write, or NULL to be produced at
 * write time by the fill function.  TITAN_E_INVALID for a repeated, empty,
 * too long (> 63 bytes) or non-UTF-8 name, an unknown type, a negative dim
 * or a row length that is not a multiple of the type's block. */
int titan_gguf_add_tensor(struct titan_gguf_writer *w, const char *name, uint32_t type,
			  int ndim, const int64_t *shape, const void *data);
/* Produce tensor `index` (add order): nbytes into out.  0 or a titan_err. */
typedef int (*titan_gguf_fill_fn)(void *ctx, size_t index, void *out, uint64_t nbytes);

/* Write the file atomically (titan_afile: a temporary name in the same
 * folder, fsync, rename; "-" = standard output): header, metadata, tensor
 * infos in add order with offsets aligned, the data, each tensor padded to
 * the alignment.  `fill` (may be NULL when every tensor has data) is
 * called once per tensor without data, in order.  A missing folder, a
 * failed write or a failing fill leaves nothing under `path`. */
int titan_gguf_write(struct titan_gguf_writer *w, const char *path, titan_gguf_fill_fn fill,
		     void *ctx);

/* ---- export of a titan Llama for llama.cpp (architecture "llama") */

/*
 * What llama.cpp's convert_hf_to_gguf.py (LlamaModel) writes for a
 * LlamaForCausalLM, from titan's tensors:
 *   tok_embeddings.weight            token_embd.weight
 *   layers.I.attention.wq|wk|wv|wo   blk.I.attn_q|attn_k|attn_v|attn_output.weight
 *   layers.I.feed_forward.w1|w2|w3   blk.I.ffn_gate|ffn_down|ffn_up.weight
 *   layers.I.attention_norm|ffn_norm blk.I.attn_norm|ffn_norm.weight
 *   norm.weight                      output_norm.weight
 *   output.weight                    output.weight (absent when tied: llama.cpp
 *                                    then uses token_embd)
 *   (Llama 3.1 rope scaling)         rope_freqs.weight, F32 [head_dim/2]: the
 *                                    factor each RoPE frequency is divided by
 * q/k rows need no permutation: the converter applies LlamaModel.permute to
 * HF's rotate-half rows, which restores Meta's interleaved pairs, torchtitan's
 * layout, and llama.cpp rotates adjacent pairs (LLAMA_ROPE_TYPE_NORM).
 * 2-D weights take the export dtype; 1-D tensors stay F32 (as the converter
 * keeps norms F32).  Metadata: general.*, llama.* hyper-parameters and,
 * with a tokenizer, tokenizer.ggml.* (docs/formats.md, "GGUF export").
 */
struct titan_gguf_export_opts {
	enum titan_ckpt_dtype dtype;  /* of the 2-D weights */
	const char *tokenizer;        /* tiktoken or tokenizer.json; NULL: no
					 tokenizer.ggml.* keys (llama.cpp needs them) */
	const char *name;             /* general.name; NULL: "titan <flavor>" */
	int64_t context_length;       /* 0: 131072 with Llama 3.1 rope scaling, else
					 rope_original_max_position (as --to hf) */
};
void titan_gguf_export_opts_default(struct titan_gguf_export_opts *o);

/* llama.cpp's name of parameter p ("blk.3.attn_q.weight"). */
int titan_gguf_param_name(const struct titan_param *p, char *buf, size_t n);
/* The rope_freqs.weight values (head_dim/2 floats) of dims with Llama 3.1
 * rope scaling: 1 for high frequencies, the scaling factor for low ones,
 * 1 / ((1 − s)/factor + s) between (convert_hf_to_gguf.py's
 * generate_extra_tensors, the inverse of torchtitan's scaling). */
void titan_gguf_rope_freqs(const struct titan_model_dims *d, float *out);

/* Write `path` from an unsharded table whose tensors `get` produces (the
 * HF exporter's callback: torchtitan layout, fp32).  The tokenizer is read
 * first, so a bad one fails before any weight is converted; a tokenizer
 * with more ids than vocab_size is TITAN_E_INVALID. */
int titan_gguf_export(const char *path, const struct titan_param_table *t, titan_hf_get_fn get,
		      void *ctx, const struct titan_gguf_export_opts *o);

#ifdef __cplusplus
}
#endif
#endif
