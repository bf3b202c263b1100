/*
 * ckpt_ops.h — the little language fuzz_ckpt.c builds HDF5 checkpoints
 * from (and mkseeds.c writes its seeds in).  Mutating the bytes of an HDF5
 * file mostly exercises libhdf5's own decoder, which is not titan's code;
 * building a file from operations lets the mutations reach titan's checks:
 * which attributes and groups exist, their types and values, the datasets'
 * names, element types, shapes, layouts and how much of them is written.
 *
 * Input: a flags byte (FLAG_*), then operations until the input ends:
 *   OP_GROUP   u8 path                     create PATHS[path] (and parents)
 *   OP_ATTR    u8 path, NAME, u8 type, VALUE
 *   OP_DATASET u8 path, NAME, u8 type, u8 layout, u8 ndim, ndim x DIM,
 *              u8 fill, u8 crc (CRC_*; CRC_VALUE is followed by a u64)
 *   OP_LINK    u8 path, NAME, u8 target path, NAME (a soft link)
 *   OP_ELINK   u8 path, NAME, u8 target file (ELINK_*), NAME: an external
 *              link to another file's object
 *   OP_TRUNC   u32 bytes cut off the end of the finished file
 *   OP_LOAD    u8 flags, u8 dp_world_size, u8 shard degree: how
 *              titan_ckpt_load is called (default: 0, 1, 1)
 * NAME: u8 k; k < 0xf0 picks NAMES[k] (attribute names) or the k-th
 * parameter name (datasets, see ckpt_param_name); k >= 0xf0 is followed by
 * u8 length and that many bytes.  DIM: u8 d (d < 0xff), or 0xff and a u64.
 * VALUE: 8 bytes for numbers; u8 length and bytes for strings.  Operations
 * that HDF5 refuses (a second attribute of one name) are skipped.
 *
 * What would make titan read outside the file or inflate data (issue 21):
 * soft and external links, the layouts L_EXTERNAL (the dataset's bytes in
 * the secret file beside the checkpoint), L_VIRTUAL (a VDS mapping another
 * file) and the filters (L_GZIP ... L_BOMB, a gzip chunk that inflates to
 * far more than the dataset).  The harness's oracle: a file holding any of
 * them is refused by titan_ckpt_open, so none of it is ever read.
 */
#ifndef TITAN_FUZZ_CKPT_OPS_H
#define TITAN_FUZZ_CKPT_OPS_H

#include <stdio.h>
#include <string.h>

enum { OP_GROUP, OP_ATTR, OP_DATASET, OP_LINK, OP_TRUNC, OP_LOAD, OP_ELINK, OP_N };

/* the files an external link (or a VDS) points at: the secret bytes, an
 * HDF5 file holding them as dataset /x, the checkpoint itself */
enum { ELINK_SECRET, ELINK_SECRET_H5, ELINK_SELF, ELINK_N };

enum {
	FLAG_NO_ORDER = 1,   /* groups without creation order (read by name) */
	FLAG_EARLIEST = 2,   /* the earliest file format */
};

static const char *const PATHS[] = {
	"/", "model", "optimizer", "optimizer/exp_avg", "optimizer/exp_avg_sq", "train_state",
	"lr_scheduler", "dataloader", "dataloader/dp_rank_0", "dataloader/dp_rank_1",
	"dataloader/dp_rank_2", "rng",
};
#define N_PATHS (sizeof(PATHS) / sizeof(PATHS[0]))

static const char *const NAMES[] = {
	"format", "format_version", "titan_version", "config", "flavor", "dim", "n_layers",
	"n_heads", "n_kv_heads", "head_dim", "ffn_hidden", "vocab_size", "multiple_of",
	"rope_original_max_position", "tie_word_embeddings", "rope_scaling",
	"ffn_dim_multiplier", "norm_eps", "rope_theta", "rope_scaling_factor",
	"rope_low_freq_factor", "rope_high_freq_factor", "step", "ntokens_seen", "last_epoch",
	"world_size", "epoch", "position", "n_windows", "seq_len", "shuffle", "seed", "stream",
	"offset",
};
#define N_NAMES (sizeof(NAMES) / sizeof(NAMES[0]))
#define NAME_LITERAL 0xf0

/* attribute and dataset element types */
enum {
	T_I64, T_U64, T_F64, T_I32, T_F32, T_U8, T_STR, T_STR_FIXED, T_I64_PAIR, /* attributes */
	T_BF16, T_F16, T_HALF_ODD, T_I16, /* datasets also take T_F32, T_F64, T_I32, T_U8 */
	T_N
};

/* dataset layouts and fills */
enum {
	L_CONTIGUOUS, L_CHUNKED, L_COMPACT,
	/* never accepted: data outside the file, filters (titan writes none) */
	L_EXTERNAL, L_VIRTUAL, L_GZIP, L_SHUFFLE, L_FLETCHER32, L_SCALEOFFSET,
	L_UNKNOWN_FILTER, L_BOMB,
	L_N
};
enum { FILL_NONE, FILL_PATTERN, FILL_HALF, FILL_N };
/* the dataset's crc32c attribute: none, the CRC32C of the stored bytes, a
 * value given (as u64), a string */
enum { CRC_NONE, CRC_RIGHT, CRC_VALUE, CRC_STRING, CRC_N };

/* The k-th parameter name of a model of up to 4 layers, torchtitan's
 * order (lib/titan/model.h); "" past the end. */
static inline void ckpt_param_name(unsigned k, char *buf, size_t n)
{
	static const char *const block[] = {
		"attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
		"attention.wo.weight", "feed_forward.w1.weight", "feed_forward.w2.weight",
		"feed_forward.w3.weight", "attention_norm.weight", "ffn_norm.weight",
	};

	if (k == 0)
		snprintf(buf, n, "tok_embeddings.weight");
	else if (k <= 36)
		snprintf(buf, n, "layers.%u.%s", (k - 1) / 9, block[(k - 1) % 9]);
	else if (k == 37)
		snprintf(buf, n, "norm.weight");
	else if (k == 38)
		snprintf(buf, n, "output.weight");
	else
		snprintf(buf, n, "%s", "");
}

#endif
