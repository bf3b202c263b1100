/*
 * ckpt_impl.h — private to lib/ckpt: the HDF5 helpers shared by the
 * checkpoint writer (h5.c), the multi-rank writer (dist.c) and the reader
 * (h5read.c), the flavor match shared by checkpoint.c and hf.c, and the
 * multi-rank save used by the asynchronous saver (async.c).
 */
#ifndef TITAN_CKPT_IMPL_H
#define TITAN_CKPT_IMPL_H

#include "config.h"
#include "titan/ckpt.h"

#if TITAN_HAVE_HDF5
#include <hdf5.h>

/* Elements per conversion block for 16-bit tensors (1 Mi); bytes per
 * write or read call for float32 ones (64 MiB).  Variables so that tests
 * can make them small and cross block boundaries. */
extern int64_t titan_ckpt_block_elems_, titan_ckpt_block_bytes_;
#define BLOCK_ELEMS titan_ckpt_block_elems_
#define BLOCK_BYTES titan_ckpt_block_bytes_

/* Turn off HDF5's own error printing (once per process): errors are
 * reported through titan_error with the library's message appended. */
void titan_h5_quiet_(void);
/* Record an error, appending HDF5's innermost message, and clear the
 * HDF5 error stack.  Returns `code`. */
int titan_h5_fail_(int code, const char *fmt, ...) TITAN_PRINTF(2, 3);
/* The file (and memory) type of a storage dtype: float32 LE, IEEE half LE,
 * or bfloat16 as an HDF5 float (PLATFORM.md).  A new id to H5Tclose, or -1. */
hid_t titan_h5_type_(enum titan_ckpt_dtype dt);

#define quiet titan_h5_quiet_
#define h5fail titan_h5_fail_
#define file_type titan_h5_type_

/* How titan_ckpt_writer_open_ opens the file. */
struct titan_ckpt_writer_opts_ {
	const char *tmp;  /* the temporary file, already made (dist.c: by rank 0),
			     or NULL: PATH.tmp.XXXXXX is made here */
	hid_t fapl;       /* file access list to copy (the MPI-IO driver), or -1 */
	hid_t dxpl;       /* transfer list of the tensor writes (H5P_DEFAULT, or
			     collective MPI-IO) */
	bool owner;       /* titan_ckpt_writer_close commits (or removes) tmp;
			     false: it only closes (the caller commits) */
};
/* titan_ckpt_writer_open with options.  *out is set whenever the writer
 * was allocated, also on failure: titan_ckpt_writer_close it. */
int titan_ckpt_writer_open_(const char *path, const struct titan_ckpt_writer_opts_ *o,
			    const struct titan_model_dims *dims, const char *config_yaml,
			    struct titan_ckpt_writer **out);
/* Create dataset PART/NAME of the logical `shape` and write its rows
 * [row0, row0 + rows) from `data` (rows · shape[1..] floats) in blocks of
 * titan_ckpt_rows_per_block_ rows.  calls 0: as many writes as the rows
 * need, stopping at the first error; calls > 0 (a collective write): exactly
 * `calls` H5Dwrite calls (at least the blocks of `rows`), the extra ones and
 * those after an error selecting nothing, so that every rank makes the same
 * calls. */
int titan_ckpt_writer_rows_(struct titan_ckpt_writer *w, enum titan_ckpt_part part,
			    const char *name, int ndim, const int64_t *shape, int64_t row0,
			    int64_t rows, const float *data, enum titan_ckpt_dtype dtype,
			    int64_t calls);
/* The same for a window: rows [row0, row0 + rows) x [col0, col0 + cols)
 * of dim `wdim` (0: whole rows), every other dim whole, from `data`
 * packed in C order: a tensor-parallel slice (the columns of a 2-d
 * tensor, dim 1 or 2 of a 3-d expert tensor). */
int titan_ckpt_writer_window_(struct titan_ckpt_writer *w, enum titan_ckpt_part part,
			      const char *name, int ndim, const int64_t *shape, int64_t row0,
			      int64_t rows, int wdim, int64_t col0, int64_t cols,
			      const float *data, enum titan_ckpt_dtype dtype, int64_t calls);
/* Checksums.  The CRC32C term of a window of a C-order tensor of `nrows`
 * rows of `ncols` elements of `esz` bytes: rows [row0, row0 + rows) x
 * columns [col0, col0 + cols), whose stored bytes `data` holds packed
 * (rows · cols · esz), moved to the end of the tensor: the XOR over its
 * rows of titan_crc32c_shift(crc32c(row piece), bytes after the piece).
 * The terms of windows that tile a tensor XOR to its CRC32C (cols ==
 * ncols: one contiguous piece). */
uint32_t titan_ckpt_crc_window_(const void *data, int64_t row0, int64_t rows, int64_t col0,
				int64_t cols, int64_t ncols, int64_t nrows, int esz);
/* The writer's datasets so far, in creation order: *n CRC terms of what
 * this process wrote into each, writable.  titan_ckpt_writer_finish_
 * stores them as the crc32c attributes; a multi-rank writer XOR-reduces
 * them over the ranks first. */
uint32_t *titan_ckpt_writer_sums_(struct titan_ckpt_writer *w, size_t *n);
/* The XOR of the CRC terms of every read of t since the file was opened
 * (titan_ckpt_read_window); the tensor's CRC32C when it was read once
 * whole, or one rank's share of it. */
uint32_t titan_ckpt_file_sum_(const struct titan_ckpt_file *f,
			      const struct titan_ckpt_tensor_info *t);

/* Rows of `row` elements per write call for `dtype` (>= 1). */
int64_t titan_ckpt_rows_per_block_(int64_t row, enum titan_ckpt_dtype dtype);
/* Close w's file (collective with MPI-IO) and property lists; w keeps its
 * names for titan_ckpt_writer_close (which then only frees).  Returns rc or
 * the close's error. */
int titan_ckpt_writer_finish_(struct titan_ckpt_writer *w, int rc);
/* An upper bound of the bytes of a checkpoint of table t (whole tensors,
 * the moments when `full`, a config attribute of config_yaml, the loader
 * state of dp_world_size ranks). */
int64_t titan_ckpt_size_bound_(const struct titan_param_table *t, bool full,
			       enum titan_ckpt_dtype dtype, const char *config_yaml,
			       int64_t dp_world_size);
/* Reserve `bytes` for temporary file `tmp` of checkpoint `path` before it
 * is written (fallocate, the file's size unchanged), so that a full disk
 * fails here, at once, rather than in the middle of a collective write of
 * some ranks only.  TITAN_E_IO naming path and the reason (No space left
 * on device) when there is no room; 0 where the file system cannot
 * reserve. */
int titan_ckpt_reserve_(const char *tmp, const char *path, int64_t bytes);
/* Make PATH.tmp.XXXXXX (mkstemp) into *tmp (malloc'd). */
int titan_ckpt_mktemp_(const char *path, char **tmp);
/* rc == 0: fsync `tmp`, rename it to `path`, fsync the folder; otherwise
 * (or when that fails) remove `tmp`.  Returns rc or the commit's error. */
int titan_ckpt_commit_(const char *tmp, const char *path, int rc);
#endif

/* What titan_ckpt_write checks of a state before it writes (a model; 16-bit
 * storage only model-only; a full checkpoint's moments and loader state):
 * 0 or TITAN_E_INVALID naming `path`. */
int titan_ckpt_check_state_(const char *path, const struct titan_ckpt_state *st, unsigned flags,
			    enum titan_ckpt_dtype dtype);

/* ---- dist.c */

/* A private duplicate of a caller's MPI communicator. */
struct titan_ckpt_comm;
/* *c = a duplicate of *(MPI_Comm *)mpi_comm (collective over it), kept
 * when *c already duplicates that communicator.  `threaded`: the duplicate
 * is used by a background thread (needs MPI_THREAD_MULTIPLE, else
 * TITAN_E_UNSUPPORTED).  TITAN_E_UNSUPPORTED without MPI, TITAN_E_INVALID
 * when MPI is not initialized. */
int titan_ckpt_comm_get_(struct titan_ckpt_comm **c, void *mpi_comm, bool threaded);
void titan_ckpt_comm_free_(struct titan_ckpt_comm *c); /* NULL-safe */
/* Every rank's rc -> one result on every rank: the lowest code, with the
 * message of the (lowest) rank that had it ("rank R: ..."); TITAN_E_COMM
 * when MPI fails. */
int titan_ckpt_comm_agree_(const struct titan_ckpt_comm *c, int rc);
/* titan_ckpt_save_dist on `c`, then (keep_latest_k > 0) rank 0 prunes the
 * folder (*removed: its count on rank 0, 0 elsewhere); every rank returns
 * the same result. */
int titan_ckpt_save_dist_(const char *folder, int64_t step, const struct titan_ckpt_state *st,
			  unsigned flags, enum titan_ckpt_dtype dtype, struct titan_ckpt_comm *c,
			  bool write_rows, int64_t keep_latest_k, int *removed, char **path_out);
/* titan_ckpt_load, and with a communicator titan_ckpt_load_dist's: every
 * rank reaches titan_ckpt_load_sums_ before it returns. */
int titan_ckpt_load_(const char *path, struct titan_ckpt_state *st, unsigned flags,
		     struct titan_ckpt_comm *c, bool verify_rows);
/* The multi-rank checksum check of a load: rc agreed; then, when every rank
 * read its part, the CRC terms of the tensors of `parts` read by the ranks
 * with verify_rows (TP-replicated tensors: TP rank 0's) XOR-reduced and
 * compared with the crc32c attributes.  f may be NULL when rc < 0.  The
 * same result on every rank. */
int titan_ckpt_load_sums_(const struct titan_ckpt_comm *c, struct titan_ckpt_file *f,
			  const struct titan_param_table *t, const bool *parts, bool verify_rows,
			  int rc);
/* Test hooks: the rank whose write of the second model tensor fails (-1:
 * none), and forcing the gather-to-rank-0 path of serial HDF5 builds. */
extern int titan_ckpt_dist_fail_rank_;
extern bool titan_ckpt_dist_gather_;

/* The titan flavor whose dims equal d's (dim, layers, heads, kv heads,
 * vocab, ffn hidden, tied) into name; "custom" when none does. */
void titan_ckpt_match_flavor_(const struct titan_model_dims *d, char name[32]);

/* Llama 4's stacked experts between titan's w1/w3/w2 and HF's
 * gate_up_proj [E, C, 2F] / down_proj [E, F, C] (hf.c): to_hf writes p's
 * half of gate_up_proj (or down_proj) from p's values, else reads them. */
void titan_hf_llama4_experts_(const struct titan_param *p, const float *in, float *out, bool to_hf);

/* mkdir -p: 0 or TITAN_E_IO naming the folder that cannot be made. */
int titan_ckpt_mkdirs_(const char *folder);

/* tiktoken_bl.c: "a b" merge strings (malloc'd) */
struct titan_ckpt_merges {
	char **v;
	size_t n, cap;
};
int titan_ckpt_merge_add_(struct titan_ckpt_merges *m, const char *a, size_t na, const char *b,
			  size_t nb);
void titan_ckpt_merges_free_(struct titan_ckpt_merges *m);

/* A tiktoken tokenizer as HF byte-level BPE: n = its ids; tokens[id] the
 * GPT-2 byte-level string (a special token: its text, special[id] set;
 * NULL: an unused id), lens their byte lengths; the merges TikTokenConverter
 * recovers from the ranks. */
struct titan_ckpt_bl_vocab {
	uint32_t n;
	char **tokens;
	size_t *lens;
	bool *special;
	struct titan_ckpt_merges merges;
};
struct titan_tokenizer;
int titan_ckpt_bl_tiktoken_(const struct titan_tokenizer *tok, struct titan_ckpt_bl_vocab *v);
void titan_ckpt_bl_free_(struct titan_ckpt_bl_vocab *v);

#define NO_HDF5 titan_error(TITAN_E_UNSUPPORTED, "titan was built without HDF5: checkpoints " \
			    "need it (install libhdf5-mpich-dev and rebuild)")
#endif
