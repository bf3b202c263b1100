/*
 * titan/data.h — training data on disk: the token shard format (*.tok), a
 * writer that cuts a token stream into shards, a reader (mmap) with checks,
 * the listing of a shard directory in training order, and the data
 * loader that packs a split into training windows (torchtitan's packing).
 *
 * Token stream (titan-tokenize -> titan-shard): raw little-endian uint32
 * ids, no header, so streams concatenate.  A document is BOS? tokens EOS.
 *
 * Shard file, little-endian, format version 1:
 *
 *   offset size field
 *        0    8 magic "TITANTOK"
 *        8    4 u32 format version (1)
 *       12    4 u32 token_bytes: 2 (u16 ids) or 4 (u32 ids)
 *       16    4 u32 vocab_size: every id is < vocab_size
 *       20    4 u32 header_bytes (4096)
 *       24    8 u64 n_tokens in the payload
 *       32    8 u64 n_docs: EOS ids in the payload (BOS ids when the shard
 *                   has no EOS id, 0 when it has neither)
 *       40    8 i64 bos_id (-1 = none)
 *       48    8 i64 eos_id (-1 = none)
 *       56    8 u64 tokenizer fingerprint (titan_tokenizer_fingerprint; 0 unknown)
 *       64    4 u32 payload CRC32C (titan_crc32c over the payload as stored)
 *       68    4 u32 header CRC32C (over bytes 0..4095 with this field zero)
 *       72    8 u64 shard_index (0, 1, ... within the split)
 *       80   16 char split[16] ("train", "val"), NUL padded
 *       96    8 u64 first_token_offset: position of the shard's first token
 *                   in the whole split's token sequence
 *      104 3992 zero
 *     4096    - payload: n_tokens ids of token_bytes each (page aligned)
 *
 * The file size is exactly 4096 + n_tokens * token_bytes.  Shards are named
 * DIR/<split>-<index, 5+ digits>.tok ("train-00000.tok"); a split is read in
 * index order, and first_token_offset of shard i+1 is first_token_offset +
 * n_tokens of shard i.  token_bytes is 2 when vocab_size <= 65536.
 *
 * Errors follow lib/titan/core.h: 0 / pointer on success, a negative
 * enum titan_err (or NULL) with a message naming the file otherwise.  Bad
 * or corrupt files are TITAN_E_FORMAT, bad arguments TITAN_E_INVALID.
 */
#ifndef TITAN_DATA_H
#define TITAN_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TITAN_SHARD_MAGIC "TITANTOK"
#define TITAN_SHARD_VERSION 1
#define TITAN_SHARD_HEADER_BYTES 4096
#define TITAN_SHARD_SPLIT_MAX 15 /* characters of a split name */

/* The header fields (decoded; the CRCs as stored). */
struct titan_shard_header {
	uint32_t version;
	uint32_t token_bytes;
	uint32_t vocab_size;
	uint32_t header_bytes;
	uint64_t n_tokens;
	uint64_t n_docs;
	int64_t bos_id;
	int64_t eos_id;
	uint64_t fingerprint;
	uint32_t payload_crc32c;
	uint32_t header_crc32c;
	uint64_t shard_index;
	char split[TITAN_SHARD_SPLIT_MAX + 1];
	uint64_t first_token_offset;
};

/* Serialise `h` into 4096 bytes, computing the header CRC (h->header_crc32c
 * is ignored; the other fields are written as given). */
void titan_shard_header_encode(const struct titan_shard_header *h,
			       uint8_t out[TITAN_SHARD_HEADER_BYTES]);
/* Parse and check a header read from `path` (for messages): magic, version,
 * header CRC, header_bytes, token_bytes, split name.  `n` is how many bytes
 * of the file `buf` holds (fewer than 4096 means the file is that short). */
int titan_shard_header_decode(const uint8_t *buf, size_t n, const char *path,
			      struct titan_shard_header *h);
/* Payload bytes per id for a vocabulary: 2 when vocab_size <= 65536, else 4. */
uint32_t titan_shard_token_bytes_for(uint32_t vocab_size);
/* "DIR/SPLIT-00042.tok" into buf; returns buf, or NULL when it does not fit. */
char *titan_shard_name(char *buf, size_t n, const char *dir, const char *split,
		       uint64_t index);
/* Is `split` a valid split name: 1..15 characters of [A-Za-z0-9_]. */
bool titan_shard_split_valid(const char *split);

/* ------------------------------------------------------------- writer */

struct titan_shard_writer_opts {
	uint64_t shard_tokens;  /* tokens per shard (> 0); the last one holds the rest */
	uint32_t token_bytes;   /* 2, 4, or 0 = titan_shard_token_bytes_for(vocab_size) */
	uint32_t vocab_size;    /* > 0; ids >= vocab_size are rejected */
	int64_t bos_id;         /* -1 = none */
	int64_t eos_id;         /* -1 = none */
	uint64_t fingerprint;   /* tokenizer fingerprint, 0 = unknown */
};

/* Cuts the ids it is given into shards of exactly opts.shard_tokens ids
 * (the last shard of the split holds the remainder; an empty split writes
 * no shard).  Each shard goes to a hidden temporary file in `dir`
 * (".SPLIT-00000.tok.tmp-XXXXXX"): header placeholder, payload through a
 * 4 MiB buffer (memory does not grow with the shard size), header with both
 * CRCs written last, fsync.  Shards reach their final names only in
 * titan_shard_writer_commit, by rename (replacing files of the same name),
 * so a failed or killed run never leaves a partial shard under a final
 * name.  `dir` must exist.  Not thread-safe (one writer, one thread). */
struct titan_shard_writer;

int titan_shard_writer_open(const char *dir, const char *split,
			    const struct titan_shard_writer_opts *opts,
			    struct titan_shard_writer **out);
/* Append ids.  TITAN_E_INVALID names the first id >= vocab_size and its
 * position in the split; TITAN_E_IO names the shard and errno (ENOSPC:
 * the temporary files are kept until discard/close, which removes them). */
int titan_shard_writer_write(struct titan_shard_writer *w, const uint32_t *ids, size_t n);
/* Complete the last shard under its temporary name (idempotent). */
int titan_shard_writer_finish(struct titan_shard_writer *w);
/* Finish, then rename every shard into place in index order and fsync the
 * directory.  Several writers (val and train) can all finish before any
 * commits, so the output appears only once every split is complete. */
int titan_shard_writer_commit(struct titan_shard_writer *w);
/* Commit (unless done) and free.  On any failure the temporary files are
 * removed; returns 0 or the error. */
int titan_shard_writer_close(struct titan_shard_writer *w);
/* Abandon: remove every temporary file of this writer, free.  NULL-safe. */
void titan_shard_writer_discard(struct titan_shard_writer *w);

struct titan_shard_writer_stats {
	uint64_t n_shards;  /* shards started so far (complete after finish) */
	uint64_t n_tokens;
	uint64_t n_docs;
	uint64_t bytes;     /* file bytes, headers included */
};
void titan_shard_writer_get_stats(const struct titan_shard_writer *w,
				  struct titan_shard_writer_stats *out);

/* ------------------------------------------------------------- reader */

/* An open shard: the whole file mapped read-only. */
struct titan_shard {
	char *path;
	struct titan_shard_header h;
	const uint8_t *map;       /* the file (header + payload) */
	size_t file_bytes;
};

/* Open and check a shard: magic ("not a titan shard"), version (newer:
 * "upgrade titan"), header CRC, and the file size against the header
 * ("expected N bytes, found M: truncated?").  The payload CRC and the ids
 * are checked only by titan_shard_verify. */
int titan_shard_open(const char *path, struct titan_shard **out);
void titan_shard_close(struct titan_shard *s); /* NULL-safe */

/* The payload: n_tokens ids of *token_bytes (2: uint16_t, 4: uint32_t),
 * page aligned, valid until titan_shard_close. */
const void *titan_shard_tokens(const struct titan_shard *s, uint32_t *token_bytes,
			       uint64_t *n_tokens);
/* Id number i (i < n_tokens) widened to uint32. */
uint32_t titan_shard_token(const struct titan_shard *s, uint64_t i);

/* Full check: payload CRC32C and every id < vocab_size.  TITAN_E_FORMAT
 * with the file named (and the first bad id and its position).  `max_id`
 * (may be NULL) receives the largest id (0 for an empty shard). */
int titan_shard_verify(const struct titan_shard *s, uint32_t *max_id);

/* Does `next` continue `prev` in one split: same split, vocab, dtype,
 * BOS/EOS and fingerprint, index + 1 and first_token_offset contiguous.
 * TITAN_E_FORMAT naming both files otherwise. */
int titan_shard_check_next(const struct titan_shard_header *prev, const char *prev_path,
			   const struct titan_shard_header *next, const char *next_path);

/* ------------------------------------------------------------- listing */

/* The shard files of `dir` ("SPLIT-DIGITS.tok", hidden files ignored) for
 * one split, or for every split when `split` is NULL, sorted by split name
 * then numeric index: the order a trainer reads them.  The indices of each
 * split must be 0, 1, 2, ... (a gap or a duplicate index is TITAN_E_FORMAT
 * naming the missing shard).  *paths is a malloc'd array of malloc'd
 * "dir/name" strings (free with titan_shard_list_free); an empty directory
 * gives *n = 0. */
int titan_shard_list(const char *dir, const char *split, char ***paths, size_t *n);
void titan_shard_list_free(char **paths, size_t n);

/* ------------------------------------------------------------- loader */

/* The training/validation data loader: torchtitan's packing over a split's
 * shards (notes §8; torchtitan's HuggingFaceDataset with infinite=True for
 * training, False for validation).
 *
 * Windows.  The split's shards, in titan_shard_list order, are one token
 * sequence of N tokens.  It is cut into W = floor(N / (seq_len+1))
 * consecutive non-overlapping windows: window i is tokens
 * [i·(seq_len+1), (i+1)·(seq_len+1)); its input row is the first seq_len
 * tokens and its label row the last seq_len (int32).  The last
 * N mod (seq_len+1) tokens of each pass are not used.  (torchtitan keeps
 * that remainder in its buffer and prepends it to the next pass; titan
 * drops it so that every epoch has the same windows, which shuffling
 * and positions-as-state need.  The first epoch is identical.)
 *
 * Order.  Epoch e visits the windows in order perm_e(0), perm_e(1), ...,
 * perm_e(W-1): the identity without shuffle; with shuffle a seeded
 * pseudo-random permutation (a Feistel network keyed by Philox with
 * (seed, titan_rng_stream_id("loader.shuffle", e)), cycle-walked to [0, W)):
 * deterministic, different per epoch, computed per position in O(1) with
 * no table, so any position can be resumed.
 *
 * Batches and data parallelism.  One titan_loader_next call on every DP
 * rank consumes one global batch of G = local_batch_size·dp_degree
 * consecutive positions of that order; rank r receives global rows
 * [r·local_batch_size, (r+1)·local_batch_size).  So after k calls the
 * global rows consumed are positions 0 .. k·G-1 whatever the DP layout:
 * one rank with local batch G and R ranks with local batch G/R see exactly
 * the same windows per call (and per optimizer step when
 * accumulation·local·dp is the same).  A training batch that reaches the
 * end of an epoch continues with the start of the next (epoch + 1, a
 * warning is logged): every batch is full.  A validation loader
 * (infinite = false) stops: the last batch may be partial (rows that do
 * not exist are padding: input 0, label TITAN_LABEL_IGNORE), and the call
 * after it returns 0.
 *
 * State.  (epoch, position): the epoch and the position in its order of
 * the next global row to read.  It is the same on every DP rank and does
 * not depend on the DP layout; save it with titan_loader_get_state and
 * resume with titan_loader_set_state (which checks seq_len, the window
 * count and the shuffle seed against the loader).
 *
 * Shards are mapped (titan_shard_open), never copied; u16 and u32
 * payloads are widened while a row is read.  All shards of the split must
 * continue each other (titan_shard_check_next: same vocab, token width,
 * BOS/EOS, tokenizer fingerprint, contiguous offsets).  Not thread-safe:
 * one loader per thread. */

#define TITAN_LABEL_IGNORE (-100) /* torchtitan's ignore_index */

struct titan_loader_opts {
	const char *dir;          /* folder of shards */
	const char *split;        /* "train", "val", ... */
	int64_t seq_len;          /* >= 1 */
	int64_t local_batch_size; /* rows per call on this rank, >= 1 */
	int dp_rank, dp_degree;   /* 0 <= dp_rank < dp_degree */
	bool infinite;            /* training: re-loop; validation: stop */
	bool shuffle;             /* seeded window permutation per epoch */
	uint64_t seed;
	uint32_t vocab_size;      /* model vocab: shards with a larger vocab are
				     refused; 0 = no check */
	bool verify;              /* titan_shard_verify each shard the first time a
				     batch reads from it (CRC and ids; a corrupt
				     shard fails titan_loader_next naming it) */
};

/* Defaults: split "train", seq_len 2048, local batch 8, dp 0 of 1,
 * infinite, no shuffle, seed 0, no vocab check, no verify. */
void titan_loader_opts_default(struct titan_loader_opts *o);

/* Plain integers, for the checkpoint. */
struct titan_loader_state {
	uint64_t epoch;           /* passes started before the current one */
	uint64_t position;        /* next global row in the epoch's order, <= n_windows
				     (== n_windows: the epoch is used up; a training
				     loader moves to the next at its next call) */
	/* identity of the stream the state belongs to (checked on restore) */
	uint64_t n_windows;
	uint64_t seq_len;
	uint64_t shuffle;         /* 0 / 1 */
	uint64_t seed;
};

/* What one call delivered. */
struct titan_batch_info {
	int64_t rows;             /* rows of this rank holding data (< local only in
				     a validation loader's last batch, may be 0) */
	int64_t global_rows;      /* rows of the global batch holding data */
	int64_t valid_tokens;     /* labels != TITAN_LABEL_IGNORE in this rank's batch */
	int64_t global_valid_tokens; /* the same over the global batch (no
				     communication needed: all ranks know it) */
	uint64_t epoch;           /* epoch of the batch's first row */
	uint64_t position;        /* position of the batch's first global row */
};

struct titan_loader;

/* Open every shard of `split` in `dir` and check them.  Errors name the
 * folder or file: no shards (TITAN_E_INVALID, "no 'train' shards in
 * 'dir'"), shards that do not continue each other or are bad
 * (TITAN_E_FORMAT), fewer than seq_len+1 tokens, a shard vocab larger than
 * opts->vocab_size, bad options (TITAN_E_INVALID). */
int titan_loader_open(const struct titan_loader_opts *opts, struct titan_loader **out);
void titan_loader_close(struct titan_loader *l); /* NULL-safe */

/* Fill local_batch_size rows of seq_len int32 each: inputs[b·seq_len + t],
 * labels[b·seq_len + t].  Returns 1 when a batch was produced, 0 at the
 * end of a validation loader (nothing written), negative on error.
 * `info` may be NULL. */
int titan_loader_next(struct titan_loader *l, int32_t *inputs, int32_t *labels,
		      struct titan_batch_info *info);

/* Window w (0 <= w < n_windows) in the natural order into seq_len inputs
 * and labels: for tests and tools. */
void titan_loader_window(const struct titan_loader *l, uint64_t w, int32_t *inputs,
			 int32_t *labels);
/* The window at `position` of `epoch`'s order (perm_e(position)). */
uint64_t titan_loader_window_at(const struct titan_loader *l, uint64_t epoch,
				uint64_t position);

void titan_loader_get_state(const struct titan_loader *l, struct titan_loader_state *st);
/* TITAN_E_INVALID naming the field when `st` comes from another stream
 * (different seq_len, window count, shuffle or seed) or is out of range. */
int titan_loader_set_state(struct titan_loader *l, const struct titan_loader_state *st);
/* Back to epoch 0, position 0 (a validation run starts over). */
void titan_loader_reset(struct titan_loader *l);

struct titan_loader_info {
	uint64_t n_shards;
	uint64_t n_tokens;        /* in the split */
	uint64_t n_windows;       /* windows per epoch */
	uint32_t vocab_size, token_bytes;
	int64_t bos_id, eos_id;
	uint64_t fingerprint;
};
void titan_loader_get_info(const struct titan_loader *l, struct titan_loader_info *out);

#ifdef __cplusplus
}
#endif
#endif
