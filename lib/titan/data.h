/*
 * titan/data.h — training data on disk: the token shard format (*.tok), a
 * writer that cuts a token stream into shards, a reader (mmap) with checks,
 * and the listing of a shard directory in training order.
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

#ifdef __cplusplus
}
#endif
#endif
