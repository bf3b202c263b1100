/*
 * mkseeds.c — seed inputs for the fuzz harnesses, made with titan's own
 * writers (so they are valid files the mutations start from):
 *   mkseeds OUT    writes OUT/<harness>/<seed> for docs, shard, ckpt,
 *                  safetensors, gguf, hf, memtrace, chrome and memprof,
 *                  and OUT/config.dict (the config schema's names)
 * (tests/fuzz/seeds.sh adds the small fixtures of tests/fixtures/).
 * Nothing large is made: seeds of a few kilobytes fuzz best.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_ops.h"
#include "fuzz.h"
#include "titan/ckpt.h"
#include "titan/config.h"
#include "titan/core.h"
#include "titan/data.h"
#include "titan/memprof.h"
#include "titan/trace.h"

static const char *out_dir;

static void die(const char *what)
{
	fprintf(stderr, "mkseeds: %s: %s\n", what, *titan_errmsg() ? titan_errmsg() : strerror(errno));
	exit(1);
}

/* A growing byte buffer. */
struct buf {
	uint8_t *p;
	size_t n, cap;
};

static void put(struct buf *b, const void *data, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2;
		if (!(b->p = realloc(b->p, b->cap)))
			die("out of memory");
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
}

static void putf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct buf *b, const char *fmt, ...)
{
	char tmp[4096];
	va_list ap;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	put(b, tmp, (size_t)k);
}

static void put8(struct buf *b, unsigned v) { uint8_t c = (uint8_t)v; put(b, &c, 1); }
static void put64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void sep(struct buf *b) { put(b, FUZZ_SEPARATOR, sizeof(FUZZ_SEPARATOR) - 1); }

static void append_file(struct buf *b, const char *path)
{
	FILE *fp = fopen(path, "rb");
	char tmp[65536];
	size_t k;

	if (!fp)
		die(path);
	while ((k = fread(tmp, 1, sizeof(tmp), fp)) > 0)
		put(b, tmp, k);
	fclose(fp);
}

static void seed(const char *harness, const char *name, const struct buf *b)
{
	char path[1024];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", out_dir, harness);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", out_dir, harness, name);
	if (!(fp = fopen(path, "wb")) || fwrite(b->p, 1, b->n, fp) != b->n || fclose(fp) != 0)
		die(path);
}

static void seed_done(const char *harness, const char *name, struct buf *b)
{
	seed(harness, name, b);
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* A scratch file for the writers that take a path. */
static const char *scratch(const char *name)
{
	static char path[1024];

	snprintf(path, sizeof(path), "%s/.scratch-%s", out_dir, name);
	return path;
}

/* ---------------------------------------------------------------- config */

/* OUT/config.dict: the schema's sections, keys and choices (libFuzzer's
 * dictionary format), so that mutations write known keys. */
static void config_dict(void)
{
	char path[1024];
	const char *last = "";
	FILE *fp;

	snprintf(path, sizeof(path), "%s/config.dict", out_dir);
	if (!(fp = fopen(path, "w")))
		die(path);
	fprintf(fp, "# made by tests/fuzz/mkseeds.c from the config schema\n");
	for (size_t i = 0; i < titan_config_nkeys(); i++) {
		const struct titan_config_key *k = titan_config_key_at(i);

		if (strcmp(k->section, last))
			fprintf(fp, "\"%s:\"\n", k->section);
		last = k->section;
		fprintf(fp, "\"%s:\"\n", k->key);
		for (const char *const *c = k->choices; c && *c; c++)
			fprintf(fp, "\"%s\"\n", *c);
	}
	if (fclose(fp) != 0)
		die(path);
}

/* ------------------------------------------------------------------ docs */

static void docs(void)
{
	static const char *const jsonl =
		"{\"text\": \"The first document.\\nIt has lines.\\nAnd More lines\\n\"}\n"
		"{\"text\": \"caf\\u00e9 \\ud83d\\ude42 and a lone \\ud800 surrogate\", \"id\": 2}\n"
		"\n"
		"{\"content\": \"other field\", \"text\": \"x\"}\n";
	struct buf b = {0};

	put8(&b, 0); /* jsonl, segments of 16 bytes, cut */
	put8(&b, 15);
	put8(&b, 0);
	put8(&b, 1);
	putf(&b, "%s", jsonl);
	seed_done("docs", "jsonl", &b);
	put8(&b, 1); /* text */
	put8(&b, 20);
	put8(&b, 0);
	put8(&b, 1);
	putf(&b, "Chapter 1\n\nIn the beginning.\nAnd then the end.\n  Indented\nX\n");
	seed_done("docs", "text", &b);
	put8(&b, 2); /* lines */
	put8(&b, 8);
	put8(&b, 0);
	put8(&b, 1);
	putf(&b, "one line\r\nanother line\n\nlast line without newline");
	seed_done("docs", "lines", &b);
}

/* ----------------------------------------------------------------- shard */

static void shard_part(struct buf *b, uint32_t tb, uint64_t index, uint64_t first,
		       const uint32_t *ids, size_t n)
{
	struct titan_shard_header h = {
		.version = 1, .token_bytes = tb, .vocab_size = 300, .header_bytes = 4096,
		.n_tokens = n, .bos_id = 256, .eos_id = 257, .fingerprint = 42, .shard_index = index,
		.first_token_offset = first,
	};
	uint8_t hdr[TITAN_SHARD_HEADER_BYTES];

	for (size_t i = 0; i < n; i++)
		h.n_docs += ids[i] == 257;
	strcpy(h.split, "train");
	for (size_t i = 0; i < n; i++) {
		uint8_t v[4];

		memcpy(v, &ids[i], 4);
		h.payload_crc32c = titan_crc32c(h.payload_crc32c, v, tb);
	}
	titan_shard_header_encode(&h, hdr);
	put(b, hdr, 128); /* the compact form: the rest of the header is zero */
	for (size_t i = 0; i < n; i++)
		put(b, &ids[i], tb);
}

static void shard(void)
{
	uint32_t ids[40];
	struct buf b = {0};

	for (size_t i = 0; i < 40; i++)
		ids[i] = i % 7 == 6 ? 257 : i % 7 == 0 ? 256 : (uint32_t)(i * 37 % 256);
	put8(&b, 0x01 | 0x40); /* compact, infinite; the CRCs are right */
	put8(&b, 3 | 1 << 4);
	put8(&b, 0); /* a loader state: epoch, position */
	put64(&b, 2);
	shard_part(&b, 2, 0, 0, ids, 40);
	seed_done("shard", "one", &b);
	put8(&b, 0x01 | 0x20); /* two shards, u32 ids, shuffled validation */
	put8(&b, 5 | 2 << 4 | 1 << 6);
	put8(&b, 1);
	put64(&b, 1);
	shard_part(&b, 4, 0, 0, ids, 25);
	sep(&b);
	shard_part(&b, 4, 1, 25, ids + 25, 15);
	seed_done("shard", "two", &b);
}

/* ------------------------------------------------------------------ ckpt */

static const struct titan_model_dims tiny = {
	.flavor = "custom", .dim = 8, .n_layers = 2, .n_heads = 2, .n_kv_heads = 1,
	.head_dim = 4, .ffn_hidden = 16, .multiple_of = 16, .vocab_size = 16,
	.ffn_dim_multiplier = 0.0 / 0.0, .norm_eps = 1e-5, .rope_theta = 500000.0,
	.rope_scaling_factor = 8.0, .rope_low_freq_factor = 1.0, .rope_high_freq_factor = 4.0,
	.rope_original_max_position = 8192,
};

static void op_attr_i(struct buf *b, unsigned path, unsigned name, unsigned type, uint64_t v)
{
	put8(b, OP_ATTR);
	put8(b, path);
	put8(b, name);
	put8(b, type);
	put64(b, v);
}

static void op_attr_s(struct buf *b, unsigned path, unsigned name, const char *s)
{
	put8(b, OP_ATTR);
	put8(b, path);
	put8(b, name);
	put8(b, T_STR);
	put8(b, (unsigned)strlen(s));
	put(b, s, strlen(s));
}

static unsigned name_index(const char *n)
{
	for (unsigned i = 0; i < N_NAMES; i++)
		if (!strcmp(NAMES[i], n))
			return i;
	die(n);
	return 0;
}

static unsigned path_index(const char *p)
{
	for (unsigned i = 0; i < N_PATHS; i++)
		if (!strcmp(PATHS[i], p))
			return i;
	die(p);
	return 0;
}

/* The parameter datasets of `tiny` in one part of the checkpoint. */
static void ckpt_params(struct buf *b, const char *part, unsigned type)
{
	struct titan_param_table t;

	if (titan_param_table_init(&t, &tiny, NULL) < 0)
		die("parameter table");
	for (int i = 0; i < t.n; i++) {
		const struct titan_param *p = &t.params[i];
		unsigned k;
		char name[96];

		for (k = 0; k < 39; k++) {
			ckpt_param_name(k, name, sizeof(name));
			if (!strcmp(name, p->name))
				break;
		}
		put8(b, OP_DATASET);
		put8(b, path_index(part));
		put8(b, k);
		put8(b, type);
		put8(b, L_CONTIGUOUS);
		put8(b, (unsigned)p->ndim);
		for (int d = 0; d < p->ndim; d++)
			put8(b, (unsigned)p->shape[d]);
		put8(b, FILL_PATTERN);
		put8(b, CRC_RIGHT);
	}
	titan_param_table_release(&t);
}

static void ckpt_header(struct buf *b, unsigned flags)
{
	const struct { const char *n; int64_t v; } ints[] = {
		{"dim", tiny.dim}, {"n_layers", tiny.n_layers}, {"n_heads", tiny.n_heads},
		{"n_kv_heads", tiny.n_kv_heads}, {"head_dim", tiny.head_dim},
		{"ffn_hidden", tiny.ffn_hidden}, {"vocab_size", tiny.vocab_size},
		{"multiple_of", tiny.multiple_of},
		{"rope_original_max_position", tiny.rope_original_max_position},
		{"tie_word_embeddings", 0}, {"rope_scaling", 0}, {"format_version", 1},
	};
	const struct { const char *n; double v; } dbls[] = {
		{"ffn_dim_multiplier", tiny.ffn_dim_multiplier}, {"norm_eps", tiny.norm_eps},
		{"rope_theta", tiny.rope_theta}, {"rope_scaling_factor", 8.0},
		{"rope_low_freq_factor", 1.0}, {"rope_high_freq_factor", 4.0},
	};

	put8(b, flags);
	op_attr_s(b, 0, name_index("format"), TITAN_CKPT_FORMAT);
	op_attr_s(b, 0, name_index("titan_version"), "0.0.0");
	op_attr_s(b, 0, name_index("config"), "training:\n  steps: 3\n");
	op_attr_s(b, 0, name_index("flavor"), "custom");
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		op_attr_i(b, 0, name_index(ints[i].n), T_I64, (uint64_t)ints[i].v);
	for (size_t i = 0; i < sizeof(dbls) / sizeof(dbls[0]); i++) {
		uint64_t v;

		memcpy(&v, &dbls[i].v, 8);
		op_attr_i(b, 0, name_index(dbls[i].n), T_F64, v);
	}
}

static void ckpt_group(struct buf *b, const char *p)
{
	put8(b, OP_GROUP);
	put8(b, path_index(p));
}

static void ckpt(void)
{
	struct buf b = {0};

	/* model-only, bfloat16 (a weights-only export) */
	ckpt_header(&b, 0);
	ckpt_group(&b, "model");
	ckpt_params(&b, "model", T_BF16);
	put8(&b, OP_LOAD);
	put8(&b, TITAN_CKPT_MODEL_ONLY);
	put8(&b, 0);
	put8(&b, 1);
	seed_done("ckpt", "model-only", &b);

	/* a full training checkpoint of 2 data-parallel ranks */
	ckpt_header(&b, 0);
	ckpt_group(&b, "model");
	ckpt_params(&b, "model", T_F32);
	ckpt_group(&b, "optimizer/exp_avg");
	ckpt_group(&b, "optimizer/exp_avg_sq");
	op_attr_i(&b, path_index("optimizer"), name_index("step"), T_I64, 3);
	ckpt_params(&b, "optimizer/exp_avg", T_F32);
	ckpt_params(&b, "optimizer/exp_avg_sq", T_F32);
	ckpt_group(&b, "train_state");
	op_attr_i(&b, path_index("train_state"), name_index("step"), T_I64, 3);
	op_attr_i(&b, path_index("train_state"), name_index("ntokens_seen"), T_I64, 96);
	ckpt_group(&b, "lr_scheduler");
	op_attr_i(&b, path_index("lr_scheduler"), name_index("last_epoch"), T_I64, 3);
	ckpt_group(&b, "dataloader");
	op_attr_i(&b, path_index("dataloader"), name_index("world_size"), T_I64, 2);
	for (int r = 0; r < 2; r++) {
		static const char *const ls[] = {"epoch", "position", "n_windows", "seq_len",
						 "shuffle", "seed"};
		const char *g = r ? "dataloader/dp_rank_1" : "dataloader/dp_rank_0";

		ckpt_group(&b, g);
		for (int i = 0; i < 6; i++)
			op_attr_i(&b, path_index(g), name_index(ls[i]), T_U64, (uint64_t)i + 1);
	}
	ckpt_group(&b, "rng");
	op_attr_i(&b, path_index("rng"), name_index("seed"), T_U64, 7);
	op_attr_i(&b, path_index("rng"), name_index("stream"), T_U64, 1);
	op_attr_i(&b, path_index("rng"), name_index("offset"), T_U64, 12);
	put8(&b, OP_LOAD);
	put8(&b, 0 | 1 << 6); /* everything, as shard 1 */
	put8(&b, 2);
	put8(&b, 2);
	seed_done("ckpt", "full", &b);

	/* the model-only file with one thing titan must refuse (issue 21): a
	 * dataset [8, 8] with its data elsewhere or filtered, or a link */
	for (unsigned l = L_EXTERNAL; l <= L_N + 2; l++) {
		static const char *const names[] = {
			"external", "virtual", "gzip", "shuffle", "fletcher32", "scaleoffset",
			"unknown-filter", "gzip-bomb", "soft-link", "external-link",
			"external-link-h5",
		};

		ckpt_header(&b, 0);
		ckpt_group(&b, "model");
		ckpt_params(&b, "model", T_F32);
		if (l < L_N) {
			put8(&b, OP_DATASET);
			put8(&b, path_index("model"));
			put8(&b, NAME_LITERAL);
			put8(&b, 5);
			put(&b, "extra", 5);
			put8(&b, T_F32);
			put8(&b, l);
			put8(&b, 2);
			put8(&b, 8);
			put8(&b, 8);
			put8(&b, FILL_PATTERN);
			put8(&b, CRC_NONE);
		} else if (l == L_N) {
			put8(&b, OP_LINK);
			put8(&b, path_index("model"));
			put8(&b, NAME_LITERAL);
			put8(&b, 5);
			put(&b, "extra", 5);
			put8(&b, path_index("model"));
			put8(&b, 37); /* norm.weight */
		} else {
			put8(&b, OP_ELINK);
			put8(&b, path_index("model"));
			put8(&b, NAME_LITERAL);
			put8(&b, 5);
			put(&b, "extra", 5);
			put8(&b, l == L_N + 1 ? ELINK_SELF : ELINK_SECRET_H5);
			put8(&b, l == L_N + 1 ? 37 : 0xff);
			if (l != L_N + 1)
				put8(&b, 0); /* "" : /x */
		}
		seed_done("ckpt", names[l - L_EXTERNAL], &b);
	}
}

/* ----------------------------------------------------------- safetensors */

static void write_st(const char *path, const struct titan_model_dims *d, bool meta)
{
	struct titan_param_table t;
	struct titan_st_write_tensor *w;
	char (*names)[96];
	float *x;
	struct titan_st_meta m = {"format", "pt"};

	if (titan_param_table_init(&t, d, NULL) < 0)
		die("parameter table");
	w = calloc((size_t)t.n, sizeof(*w));
	names = calloc((size_t)t.n, sizeof(*names));
	x = calloc((size_t)t.numel, sizeof(*x));
	if (!w || !names || !x)
		die("out of memory");
	for (int64_t i = 0; i < t.numel; i++)
		x[i] = (float)(i % 11) * 0.25f;
	for (int i = 0; i < t.n; i++) {
		const struct titan_param *p = &t.params[i];

		if (titan_hf_param_name(p, names[i], sizeof(names[i])) < 0)
			die("HF name");
		w[i] = (struct titan_st_write_tensor){names[i], i % 3 ? TITAN_ST_F32 : TITAN_ST_BF16,
						      p->ndim, p->shape, x};
	}
	if (titan_safetensors_write(path, w, (size_t)t.n, meta ? &m : NULL, meta ? 1 : 0) < 0)
		die(path);
	free(w);
	free(names);
	free(x);
	titan_param_table_release(&t);
}

static void safetensors(void)
{
	static const int64_t s23[] = {2, 3}, s0[] = {0, 4}, s4[] = {4};
	static const uint8_t bytes[64] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0x3c, 0x80, 0x7f, 0xff};
	const struct titan_st_write_tensor ts[] = {
		{"a", TITAN_ST_F32, 2, s23, bytes}, {"scalar", TITAN_ST_F64, 0, NULL, bytes},
		{"empty", TITAN_ST_I32, 2, s0, bytes}, {"half", TITAN_ST_F16, 1, s4, bytes},
		{"bf", TITAN_ST_BF16, 1, s4, bytes}, {"i8", TITAN_ST_I8, 1, s4, bytes},
		{"u64", TITAN_ST_U64, 1, s4, bytes}, {"flag", TITAN_ST_BOOL, 1, s4, bytes},
		{"f8", TITAN_ST_F8_E4M3, 1, s4, bytes},
	};
	const struct titan_st_meta meta[] = {{"format", "pt"}, {"note", "fuzz seed"}};
	struct buf b = {0};

	if (titan_safetensors_write(scratch("st"), ts, sizeof(ts) / sizeof(ts[0]), meta, 2) < 0)
		die("safetensors");
	append_file(&b, scratch("st"));
	seed_done("safetensors", "dtypes", &b);
	unlink(scratch("st"));
}

/* -------------------------------------------------------------------- hf */

static void hf_config(struct buf *b, const struct titan_model_dims *d)
{
	putf(b, "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
	     "\"hidden_size\": %lld, \"intermediate_size\": %lld, \"num_hidden_layers\": %lld, "
	     "\"num_attention_heads\": %lld, \"num_key_value_heads\": %lld, \"vocab_size\": %lld, "
	     "\"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"hidden_act\": \"silu\", "
	     "\"tie_word_embeddings\": false, \"rope_scaling\": {\"rope_type\": \"llama3\", "
	     "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
	     "\"original_max_position_embeddings\": 8192}, \"bos_token_id\": 1, "
	     "\"eos_token_id\": [2, 3], \"torch_dtype\": \"float32\"}",
	     (long long)d->dim, (long long)d->ffn_hidden, (long long)d->n_layers,
	     (long long)d->n_heads, (long long)d->n_kv_heads, (long long)d->vocab_size);
}

static void hf(void)
{
	struct titan_model_dims d = tiny;
	struct buf b = {0};

	d.n_layers = 1;
	hf_config(&b, &d);
	sep(&b);
	write_st(scratch("hf"), &d, true);
	append_file(&b, scratch("hf"));
	seed_done("hf", "single", &b);

	/* sharded: an index naming one file for every tensor */
	hf_config(&b, &d);
	sep(&b);
	{
		struct titan_param_table t;
		char name[96];

		if (titan_param_table_init(&t, &d, NULL) < 0)
			die("parameter table");
		putf(&b, "{\"metadata\": {}, \"weight_map\": {");
		for (int i = 0; i < t.n; i++) {
			titan_hf_param_name(&t.params[i], name, sizeof(name));
			putf(&b, "%s\"%s\": \"model-00001-of-00001.safetensors\"", i ? ", " : "", name);
		}
		putf(&b, "}}");
		titan_param_table_release(&t);
	}
	sep(&b);
	append_file(&b, scratch("hf"));
	seed_done("hf", "sharded", &b);
	unlink(scratch("hf"));
}

/* ------------------------------------------------------------------ gguf */

static void gguf(void)
{
	static const float f[64] = {1, -2, 3.5f, 0.25f};
	static const int32_t ints[] = {1, -2, 3};
	static const char *const strs[] = {"a", "", "<|end_of_text|>"};
	static const int64_t s2[] = {2, 32}, s1[] = {32}, s3[] = {1, 2, 32};
	struct titan_gguf_writer *w = titan_gguf_writer_new();
	struct buf b = {0};

	if (!w || titan_gguf_set_str(w, "general.architecture", "llama") < 0 ||
	    titan_gguf_set_u32(w, "general.alignment", 32) < 0 ||
	    titan_gguf_set_u32(w, "llama.block_count", 2) < 0 ||
	    titan_gguf_set_i32(w, "i32", -5) < 0 || titan_gguf_set_u64(w, "u64", 1ull << 40) < 0 ||
	    titan_gguf_set_f32(w, "f32", 0.5f) < 0 || titan_gguf_set_f64(w, "f64", 1e300) < 0 ||
	    titan_gguf_set_bool(w, "bool", true) < 0 ||
	    titan_gguf_set_array(w, "ints", TITAN_GGUF_INT32, ints, 3) < 0 ||
	    titan_gguf_set_array_str(w, "tokenizer.ggml.tokens", strs, NULL, 3) < 0 ||
	    titan_gguf_add_tensor(w, "f32", TITAN_GGML_F32, 2, s2, f) < 0 ||
	    titan_gguf_add_tensor(w, "f16", TITAN_GGML_F16, 1, s1, f) < 0 ||
	    titan_gguf_add_tensor(w, "bf16", TITAN_GGML_BF16, 3, s3, f) < 0 ||
	    titan_gguf_add_tensor(w, "q8_0", 8, 1, s1, f) < 0 ||
	    titan_gguf_write(w, scratch("gguf"), NULL, NULL) < 0)
		die("gguf");
	titan_gguf_writer_free(w);
	append_file(&b, scratch("gguf"));
	seed_done("gguf", "types", &b);
	unlink(scratch("gguf"));
}

/* ---------------------------------------------------- memtrace and chrome */

static void memtrace_file(struct buf *b, int rank, int steps)
{
	struct titan_memtrace_header h = {.version = 1, .rank = rank, .start_unix_ns = 1700000000000000000ull};
	unsigned char out[TITAN_MEMTRACE_HEADER_BYTES];
	uint64_t t = 0;

	strcpy(h.device, "host");
	titan_memtrace_encode_header(out, &h);
	put(b, out, sizeof(out));
	for (int s = 0; s <= steps; s++) {
		for (unsigned ph = 1; ph <= 5; ph++) {
			struct titan_memtrace_record r = {TITAN_MEMTRACE_ALLOC, (uint8_t)(ph % 8),
							  (uint16_t)ph, (uint32_t)s, t += 1000,
							  (uint64_t)100 * ph, 0x1000 + ph};
			unsigned char rec[TITAN_MEMTRACE_RECORD_BYTES];

			titan_memtrace_encode_record(rec, &r);
			put(b, rec, sizeof(rec));
			if (ph != 1 || s == steps) {
				r.kind = TITAN_MEMTRACE_FREE;
				r.t_ns = t += 500;
				titan_memtrace_encode_record(rec, &r);
				put(b, rec, sizeof(rec));
			}
		}
	}
}

static void chrome_file(struct buf *b, int pid)
{
	static const char *const phases[] = {"data", "forward", "loss", "backward", "optimizer"};
	double ts = 0;

	putf(b, "{\"traceEvents\": [\n");
	for (int s = 1; s <= 2; s++) {
		putf(b, "{\"name\": \"step\", \"cat\": \"train\", \"ph\": \"X\", \"ts\": %.3f, "
		     "\"dur\": 500.0, \"pid\": %d, \"tid\": 0, \"args\": {\"step\": %d}},\n", ts, pid, s);
		for (int k = 0; k < 5; k++)
			putf(b, "{\"name\": \"%s\", \"cat\": \"train\", \"ph\": \"X\", \"ts\": %.3f, "
			     "\"dur\": 90.5, \"pid\": %d, \"tid\": 0, \"args\": {\"step\": %d}},\n",
			     phases[k], ts + 100.0 * k, pid, s);
		putf(b, "{\"name\": \"all_reduce\", \"cat\": \"comm\", \"ph\": \"B\", \"ts\": %.3f, "
		     "\"pid\": %d, \"tid\": 1},\n{\"ph\": \"E\", \"ts\": %.3f, \"pid\": %d, \"tid\": 1},\n",
		     ts + 310, pid, ts + 380, pid);
		putf(b, "{\"name\": \"memory\", \"ph\": \"C\", \"ts\": %.3f, \"pid\": %d, "
		     "\"args\": {\"value\": %d, \"reserved\": 1e6}},\n", ts, pid, 1000 * s);
		ts += 600;
	}
	putf(b, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": "
	     "\"rank %d\"}}\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"step\": 2}}\n", pid, pid);
}

static void traces(void)
{
	struct titan_trace *t;
	struct buf b = {0};

	memtrace_file(&b, 0, 3);
	seed_done("memtrace", "steps", &b);
	chrome_file(&b, 0);
	seed_done("chrome", "steps", &b);
	putf(&b, "[{\"name\": \"x\", \"ph\": \"X\", \"ts\": 1, \"dur\": 2, \"pid\": 3, \"tid\": 4,");
	seed_done("chrome", "cut", &b);
	/* what lib/trace writes (times from the clock: the values vary) */
	if (titan_trace_open(&t, scratch("trace.json"), 1, "{\"step\": 4}") < 0)
		die("trace");
	titan_trace_begin(t, "step", "train", 4);
	titan_trace_begin(t, "forward", "train", 4);
	titan_trace_end(t);
	titan_trace_counter(t, "memory", 12345);
	titan_trace_complete(t, "all_gather", "comm", 1, 10, 20, 4);
	titan_trace_end(t);
	if (titan_trace_close(t) < 0)
		die("trace");
	append_file(&b, scratch("trace.json"));
	seed_done("chrome", "written", &b);
	unlink(scratch("trace.json"));
	/* memprof: a memory trace and timing traces of rank 0, a rank 1 trace,
	 * metrics.jsonl, an estimate; each subcommand once */
	for (unsigned cmd = 0; cmd < 5; cmd++) {
		static const char *const names[] = {"summary", "timeline", "time", "export", "compare"};

		put8(&b, cmd | (cmd == 4 ? 0x08 : 0));
		memtrace_file(&b, 0, 2);
		sep(&b);
		chrome_file(&b, 0);
		sep(&b);
		chrome_file(&b, 0);
		sep(&b);
		memtrace_file(&b, 1, 1);
		sep(&b);
		for (int s = 1; s <= 2; s++)
			putf(&b, "{\"step\": %d, \"loss\": 5.5, \"memory_peak_bytes\": %d, \"tflops\": "
			     "1.5, \"step_time_s\": 0.25, \"mfu_pct\": 3.0}\n", s, 1500 + s);
		sep(&b);
		putf(&b, "{\"format\": \"titan-estimate\", \"version\": 1, \"ranks\": [{\"stage\": 0, "
		     "\"peak_bytes\": 5000, \"step_peak_bytes\": 4500, \"peak_phase\": \"backward\", "
		     "\"at_peak\": {\"params\": 1000, \"optim\": 2000, \"activations\": 1000}, "
		     "\"tag_peak\": {\"params\": 1000, \"workspace\": 1200}}]}");
		seed_done("memprof", names[cmd], &b);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: mkseeds OUT\n");
		return 2;
	}
	out_dir = argv[1];
	if (mkdir(out_dir, 0755) < 0 && errno != EEXIST)
		die(out_dir);
	titan_log_set_level(TITAN_LOG_ERROR);
	config_dict();
	docs();
	shard();
	ckpt();
	safetensors();
	hf();
	gguf();
	traces();
	return 0;
}
