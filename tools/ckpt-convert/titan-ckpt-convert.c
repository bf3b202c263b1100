/*
 * titan-ckpt-convert — inspect titan checkpoints (and GGUF files) and
 * convert them: to and from the HuggingFace LlamaForCausalLM layout
 * (torchtitan's scripts/checkpoint_conversion/convert_{to,from}_hf.py), to
 * GGUF for llama.cpp (what its convert_hf_to_gguf.py writes), and h5 -> h5
 * with a dtype cast or without optimizer state (weights-only export).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "titan/ckpt.h"
#include "titan/cli.h"
#include "titan/core.h"
#include "titan/model.h"

enum {
	OPT_TO = TITAN_OPT_TOOL_BASE,
	OPT_FROM,
	OPT_DTYPE,
	OPT_TOKENIZER,
	OPT_MAX_SHARD,
	OPT_WEIGHTS_ONLY,
	OPT_JSON,
	OPT_NO_CHECKSUMS,
	OPT_MAX_POS,
	OPT_VERIFY,
};

struct opts {
	const char *to, *from, *tokenizer;
	bool dtype_set, weights_only, json, checksums, verify;
	enum titan_ckpt_dtype dtype;
	uint64_t max_shard;
	int64_t max_pos;
	bool progress;          /* --progress, or stderr is a terminal */
};

/* ----------------------------------------------------------- progress */

/* Tensor data read (or, --from hf, written) of the command's total, on
 * stderr; one reporter per run. */
static struct titan_progress progress;
static size_t progress_i, progress_n;
static uint64_t progress_begun; /* bytes of the tensors begun */

static void progress_begin(const struct opts *o, uint64_t bytes, size_t ntensors)
{
	titan_progress_init(&progress, o->progress, "titan-ckpt-convert", "bytes", bytes);
	progress_i = 0;
	progress_n = ntensors;
	progress_begun = 0;
}

/* Before each tensor (its stored bytes): the ones before it are done.
 * final: after the last. */
static void progress_tensor(uint64_t bytes, bool final)
{
	char extra[64];

	if (final) {
		snprintf(extra, sizeof(extra), "%zu tensors", progress_i);
		titan_progress_finish(&progress, progress_begun, extra);
		return;
	}
	snprintf(extra, sizeof(extra), "tensor %zu/%zu", ++progress_i, progress_n);
	titan_progress_update(&progress, progress_begun, extra);
	progress_begun += bytes;
}

/* Stored bytes of a checkpoint's tensors (those of `part`, or all: -1). */
static uint64_t ckpt_bytes(const struct titan_ckpt_info *in, int part, size_t *n)
{
	uint64_t b = 0;

	*n = 0;
	for (size_t i = 0; i < in->n_tensors; i++)
		if (part < 0 || (int)in->tensors[i].part == part) {
			b += (uint64_t)in->tensors[i].numel *
			     (uint64_t)titan_ckpt_dtype_size(in->tensors[i].dtype);
			(*n)++;
		}
	return b;
}

static void usage(FILE *fp)
{
	fprintf(fp,
"Usage: titan-ckpt-convert info [--json] [--no-checksums] [--verify] CKPT|FILE.gguf\n"
"       titan-ckpt-convert --to hf [OPTIONS] CKPT OUTDIR\n"
"       titan-ckpt-convert --to gguf [OPTIONS] CKPT OUT.gguf\n"
"       titan-ckpt-convert --from hf [--dtype D] HFDIR OUT.h5\n"
"       titan-ckpt-convert [--weights-only] [--dtype D] IN.h5 OUT.h5\n"
"Inspect a titan checkpoint (step-N.h5) or a GGUF file, convert a checkpoint\n"
"to and from the HuggingFace LlamaForCausalLM layout, or to GGUF for\n"
"llama.cpp.  CKPT may be a checkpoint folder: its newest complete step is\n"
"used.  Outputs are written atomically.\n"
"\n"
"Modes:\n"
"  info CKPT               tensors (dtype, shape, bytes, CRC32C of the float32\n"
"                          values), dims, training state and the config; a\n"
"                          tensor whose stored checksum differs is an error\n"
"  info FILE.gguf          GGUF metadata and tensors (type, shape, CRC32C)\n"
"  --to hf CKPT OUTDIR     model.safetensors (or shards + index), config.json,\n"
"                          generation_config.json [, the tokenizer]; q/k rows\n"
"                          permuted to HF's rotate-half RoPE layout\n"
"  --to gguf CKPT OUT.gguf GGUF v3, architecture llama: llama.cpp's tensor names\n"
"                          and hyper-parameters [, tokenizer.ggml.* metadata]\n"
"  --from hf HFDIR OUT.h5  a model-only checkpoint (checkpoint.initial_load_path)\n"
"  IN.h5 OUT.h5            copy, casting (--dtype) or dropping optimizer state\n"
"\n"
"Options:\n"
"      --dtype D            float32 (default), bfloat16 or float16\n"
"      --tokenizer FILE     --to hf: copied into OUTDIR, gives bos/eos ids; a\n"
"                           tiktoken file also gets tokenizer.json and\n"
"                           tokenizer_config.json (transformers, vLLM);\n"
"                           --to gguf: the tokenizer metadata (tiktoken or\n"
"                           tokenizer.json; llama.cpp needs it)\n"
"      --max-shard-size S   --to hf: bytes per shard (5GB default; B, KB, MB, GB,\n"
"                           KiB, MiB, GiB suffixes)\n"
"      --max-position-embeddings N  --to hf: config.json value, --to gguf:\n"
"                           llama.context_length (default: 131072 with Llama 3.1\n"
"                           RoPE scaling, else the original 8192)\n"
"      --weights-only       IN.h5 OUT.h5: model tensors only (needed for --dtype)\n"
"      --json               info: one JSON object\n"
"      --no-checksums       info: do not read the tensors\n"
"      --verify             info: check every dataset against its stored crc32c,\n"
"                           report each (ok, MISMATCH, no checksum); exit 1 on\n"
"                           a mismatch, naming the datasets\n"
"      --progress           tensor bytes done of the total (%%, MB/s, ETA) on stderr\n"
"                           even when it is not a terminal\n"
"  -v, --verbose; -q, --quiet; -h, --help; --version\n"
"\n"
"Exit status: 0 ok, 1 a bad or missing input or a failed write, 2 usage.\n"
"\n"
"Example:\n"
"  titan-ckpt-convert --to hf --dtype bfloat16 --tokenizer tokenizer.json \\\n"
"      outputs/checkpoint exported/\n"
"  titan-ckpt-convert --to gguf --dtype bf16 --tokenizer tokenizer.model \\\n"
"      outputs/checkpoint model.gguf\n"
"\n"
"See also: titan-train(1), docs/formats.md\n");
}

/* 5GB, 4GiB, 100MB, 123 (HF's units: KB = 1000, KiB = 1024). */
static int parse_shard_size(const char *s, uint64_t *out)
{
	static const struct { const char *u; uint64_t m; } units[] = {
		{"", 1}, {"B", 1}, {"KB", 1000ULL}, {"MB", 1000000ULL}, {"GB", 1000000000ULL},
		{"TB", 1000000000000ULL}, {"KiB", 1ULL << 10}, {"MiB", 1ULL << 20},
		{"GiB", 1ULL << 30}, {"TiB", 1ULL << 40},
	};
	char num[32];
	size_t k = strspn(s, "0123456789");
	uint64_t v;

	if (k == 0 || k >= sizeof(num))
		return -1;
	memcpy(num, s, k);
	num[k] = 0;
	if (titan_parse_u64(num, &v) < 0)
		return -1;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (!strcmp(s + k, units[i].u)) {
			if (v == 0 || v > UINT64_MAX / units[i].m)
				return -1;
			*out = v * units[i].m;
			return 0;
		}
	}
	return -1;
}

/* A checkpoint folder means its newest complete step. */
static int resolve_ckpt(const char *arg, char *path, size_t n)
{
	struct stat st;
	int64_t step;
	int rc;

	if (stat(arg, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(path, n, "%s", arg);
		return 0;
	}
	if ((rc = titan_ckpt_latest(arg, &step)) < 0)
		return rc;
	if (step < 0)
		return titan_error(TITAN_E_IO, "'%s' holds no complete checkpoint (step-N.h5)", arg);
	titan_log_info("using %s/step-%lld.h5, the newest complete step", arg, (long long)step);
	return titan_ckpt_path(path, n, arg, step);
}

/* ------------------------------------------------------------- info gguf */

static bool is_gguf(const char *path)
{
	/* not a regular file (a FIFO would block): the reader says why */
	FILE *fp = titan_check_regular(path) == 0 ? fopen(path, "rb") : NULL;
	char m[4];
	bool yes = fp && fread(m, 1, 4, fp) == 4 && !memcmp(m, "GGUF", 4);

	if (fp)
		fclose(fp);
	return yes;
}

/* Shortest %g text that reads back as the same float. */
static const char *f32_str(char *buf, size_t n, double v)
{
	for (int p = 6; p <= 9; p++) {
		snprintf(buf, n, "%.*g", p, v);
		if (strtof(buf, NULL) == (float)v)
			break;
	}
	return buf;
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Element i of a kv (i = 0 for a scalar) as text, or into JSON when j. */
static void gguf_elem(const struct titan_gguf_kv *kv, uint64_t i, struct titan_json *j,
		      size_t max_str)
{
	bool arr = kv->type == TITAN_GGUF_ARRAY;
	enum titan_gguf_type t = arr ? kv->elem : kv->type;
	char buf[64];
	int64_t v;
	double d;

	if (t == TITAN_GGUF_STRING) {
		size_t n;
		const char *s = arr ? titan_gguf_arr_str(kv, i, &n) : titan_gguf_kv_str(kv, &n);

		if (j) {
			titan_json_stringn(j, s, n);
			return;
		}
		char q[1024]; /* max_str bytes, 4 per escaped byte */

		TITAN_ASSERT(max_str * 4 < sizeof(q));
		printf("\"%s", titan_str_escapen(q, sizeof(q), s, n < max_str ? n : max_str,
						 TITAN_ESC_QUOTE));
		printf(n > max_str ? "\"..." : "\"");
		return;
	}
	if (t == TITAN_GGUF_UINT64) {
		const uint8_t *p = kv->data + (arr ? 8 * i : 0);

		if (j)
			titan_json_uint(j, le64(p));
		else
			printf("%" PRIu64, le64(p));
		return;
	}
	if (t == TITAN_GGUF_FLOAT32 || t == TITAN_GGUF_FLOAT64) {
		if (arr)
			titan_gguf_arr_float(kv, i, &d);
		else
			titan_gguf_kv_float(kv, &d);
		if (j)
			titan_json_double(j, d);
		else
			printf("%s", t == TITAN_GGUF_FLOAT32 ? f32_str(buf, sizeof(buf), d) :
			       titan_format_double(buf, sizeof(buf), d));
		return;
	}
	if (arr)
		titan_gguf_arr_int(kv, i, &v);
	else
		titan_gguf_kv_int(kv, &v);
	if (t == TITAN_GGUF_BOOL) {
		if (j)
			titan_json_bool(j, v != 0);
		else
			printf("%s", v ? "true" : "false");
	} else if (j) {
		titan_json_int(j, v);
	} else {
		printf("%" PRId64, v);
	}
}

static const char *ne_str(char *buf, size_t n, const int64_t *dims, int nd)
{
	size_t k = (size_t)snprintf(buf, n, "[");

	for (int i = 0; i < nd && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

static int cmd_info_gguf(const struct opts *o, const char *path)
{
	struct titan_gguf *f = titan_gguf_open(path);
	struct titan_json j;
	char b1[64], b2[96], e1[1024];
	uint32_t *crc = NULL;
	bool *have = NULL;
	float *buf = NULL;
	int64_t biggest = 1;
	int rc = 0, w = 0, wk = 0;

	titan_json_init(&j);
	if (!f)
		return titan_error_last()->code;
	/* names and keys are the file's: printed escaped (titan_str_escape) */
	for (size_t i = 0; i < f->n_tensors; i++) {
		if (f->tensors[i].numel > biggest)
			biggest = f->tensors[i].numel;
		if ((int)strlen(titan_str_escape(e1, sizeof(e1), f->tensors[i].name)) > w)
			w = (int)strlen(e1);
	}
	for (size_t i = 0; i < f->n_kv; i++)
		if ((int)strlen(titan_str_escape(e1, sizeof(e1), f->kv[i].key)) > wk)
			wk = (int)strlen(e1);
	if (o->checksums) {
		if (!(crc = calloc(f->n_tensors + 1, sizeof(*crc))) ||
		    !(have = calloc(f->n_tensors + 1, sizeof(*have))) ||
		    !(buf = malloc((size_t)biggest * sizeof(float)))) {
			rc = titan_error(TITAN_E_NOMEM, "out of memory");
			goto done;
		}
		for (size_t i = 0; i < f->n_tensors; i++) {
			const struct titan_gguf_tensor *t = &f->tensors[i];

			if (titan_gguf_tensor_to_f32(t, buf) < 0)
				continue; /* quantized: no checksum */
			crc[i] = titan_crc32c(0, buf, (size_t)t->numel * sizeof(float));
			have[i] = true;
		}
	}
	if (o->json) {
		titan_json_object_begin(&j);
		titan_json_key(&j, "file"); titan_json_string(&j, f->path);
		titan_json_key(&j, "file_size"); titan_json_uint(&j, f->file_size);
		titan_json_key(&j, "format"); titan_json_string(&j, "gguf");
		titan_json_key(&j, "version"); titan_json_uint(&j, f->version);
		titan_json_key(&j, "alignment"); titan_json_uint(&j, f->alignment);
		titan_json_key(&j, "data_offset"); titan_json_uint(&j, f->data_offset);
		titan_json_key(&j, "metadata");
		titan_json_array_begin(&j);
		for (size_t i = 0; i < f->n_kv; i++) {
			const struct titan_gguf_kv *kv = &f->kv[i];

			titan_json_object_begin(&j);
			titan_json_key(&j, "key"); titan_json_string(&j, kv->key);
			titan_json_key(&j, "type");
			if (kv->type == TITAN_GGUF_ARRAY) {
				snprintf(b1, sizeof(b1), "array[%s]", titan_gguf_type_name(kv->elem));
				titan_json_string(&j, b1);
			} else {
				titan_json_string(&j, titan_gguf_type_name(kv->type));
			}
			titan_json_key(&j, "value");
			if (kv->type == TITAN_GGUF_ARRAY) {
				titan_json_array_begin(&j);
				for (uint64_t k = 0; k < kv->n; k++)
					gguf_elem(kv, k, &j, SIZE_MAX);
				titan_json_array_end(&j);
			} else {
				gguf_elem(kv, 0, &j, SIZE_MAX);
			}
			titan_json_object_end(&j);
		}
		titan_json_array_end(&j);
		titan_json_key(&j, "tensors");
		titan_json_array_begin(&j);
		for (size_t i = 0; i < f->n_tensors; i++) {
			const struct titan_gguf_tensor *t = &f->tensors[i];

			titan_json_object_begin(&j);
			titan_json_key(&j, "name"); titan_json_string(&j, t->name);
			titan_json_key(&j, "type"); titan_json_string(&j, titan_ggml_type_name(t->type));
			titan_json_key(&j, "shape");
			titan_json_array_begin(&j);
			for (int k = 0; k < t->n_dims; k++)
				titan_json_int(&j, t->shape[k]);
			titan_json_array_end(&j);
			titan_json_key(&j, "ne");
			titan_json_array_begin(&j);
			for (int k = 0; k < t->n_dims; k++)
				titan_json_int(&j, t->ne[k]);
			titan_json_array_end(&j);
			titan_json_key(&j, "offset"); titan_json_uint(&j, t->offset);
			titan_json_key(&j, "bytes"); titan_json_uint(&j, t->nbytes);
			if (crc && have[i]) {
				snprintf(b1, sizeof(b1), "%08" PRIx32, crc[i]);
				titan_json_key(&j, "crc32c"); titan_json_string(&j, b1);
			}
			titan_json_object_end(&j);
		}
		titan_json_array_end(&j);
		titan_json_object_end(&j);
		rc = titan_json_write_line(&j, stdout);
		goto done;
	}
	printf("file:          %s (%s)\n", titan_str_escape(e1, sizeof(e1), f->path),
	       titan_format_bytes(b1, sizeof(b1), (double)f->file_size));
	printf("format:        GGUF version %" PRIu32 ", alignment %" PRIu32 ", data at byte %" PRIu64
	       "\n", f->version, f->alignment, f->data_offset);
	printf("metadata:      %zu keys\n", f->n_kv);
	for (size_t i = 0; i < f->n_kv; i++) {
		const struct titan_gguf_kv *kv = &f->kv[i];

		if (kv->type == TITAN_GGUF_ARRAY) {
			snprintf(b1, sizeof(b1), "[%s]", titan_gguf_type_name(kv->elem));
			printf("  %-*s  %-8s  %" PRIu64 " element%s%s", wk,
			       titan_str_escape(e1, sizeof(e1), kv->key), b1, kv->n,
			       kv->n == 1 ? "" : "s", kv->n ? ": " : "");
			for (uint64_t k = 0; k < kv->n && k < 8; k++) {
				printf("%s", k ? ", " : "");
				gguf_elem(kv, k, NULL, 40);
			}
			printf("%s\n", kv->n > 8 ? ", ..." : "");
		} else {
			printf("  %-*s  %-8s  ", wk, titan_str_escape(e1, sizeof(e1), kv->key),
			       titan_gguf_type_name(kv->type));
			gguf_elem(kv, 0, NULL, 200);
			printf("\n");
		}
	}
	printf("tensors:       %zu (shapes row-major: the reverse of GGUF's dims)\n", f->n_tensors);
	for (size_t i = 0; i < f->n_tensors; i++) {
		const struct titan_gguf_tensor *t = &f->tensors[i];

		printf("  %-*s  %-7s  %-14s  %10s", w, titan_str_escape(e1, sizeof(e1), t->name),
		       titan_ggml_type_name(t->type),
		       ne_str(b2, sizeof(b2), t->shape, t->n_dims),
		       titan_format_bytes(b1, sizeof(b1), (double)t->nbytes));
		if (crc && have[i])
			printf("  crc32c %08" PRIx32, crc[i]);
		printf("\n");
	}
done:
	titan_json_release(&j);
	free(crc);
	free(have);
	free(buf);
	titan_gguf_close(f);
	return rc;
}

/* ------------------------------------------------------------------ info */

static void dims_json(struct titan_json *j, const struct titan_model_dims *d)
{
	titan_json_object_begin(j);
	titan_json_key(j, "flavor"); titan_json_string(j, d->flavor);
	titan_json_key(j, "dim"); titan_json_int(j, d->dim);
	titan_json_key(j, "n_layers"); titan_json_int(j, d->n_layers);
	titan_json_key(j, "n_heads"); titan_json_int(j, d->n_heads);
	titan_json_key(j, "n_kv_heads"); titan_json_int(j, d->n_kv_heads);
	titan_json_key(j, "head_dim"); titan_json_int(j, d->head_dim);
	titan_json_key(j, "ffn_hidden"); titan_json_int(j, d->ffn_hidden);
	titan_json_key(j, "vocab_size"); titan_json_int(j, d->vocab_size);
	titan_json_key(j, "norm_eps"); titan_json_double(j, d->norm_eps);
	titan_json_key(j, "rope_theta"); titan_json_double(j, d->rope_theta);
	titan_json_key(j, "rope_scaling"); titan_json_bool(j, d->rope_scaling);
	titan_json_key(j, "tie_word_embeddings"); titan_json_bool(j, d->tied);
	titan_json_object_end(j);
}

static void state_json(struct titan_json *j, const struct titan_ckpt_info *in)
{
	const struct titan_ckpt_train_state *t = &in->train;

	if (in->has_train_state) {
		titan_json_key(j, "train_state");
		titan_json_object_begin(j);
		titan_json_key(j, "step"); titan_json_int(j, t->step);
		titan_json_key(j, "ntokens_seen"); titan_json_int(j, t->ntokens_seen);
		titan_json_object_end(j);
	}
	if (in->has_lr_scheduler) {
		titan_json_key(j, "lr_scheduler");
		titan_json_object_begin(j);
		titan_json_key(j, "last_epoch"); titan_json_int(j, t->lr_last_epoch);
		titan_json_object_end(j);
	}
	if (in->has_optimizer) {
		titan_json_key(j, "optimizer");
		titan_json_object_begin(j);
		titan_json_key(j, "step"); titan_json_int(j, t->optim_step);
		titan_json_object_end(j);
	}
	if (in->has_dataloader) {
		titan_json_key(j, "dataloader");
		titan_json_object_begin(j);
		titan_json_key(j, "world_size"); titan_json_int(j, t->dp_world_size);
		for (int64_t r = 0; r < t->dp_world_size; r++) {
			const struct titan_loader_state *l = &t->loader[r];
			char k[48];

			snprintf(k, sizeof(k), "dp_rank_%lld", (long long)r);
			titan_json_key(j, k);
			titan_json_object_begin(j);
			titan_json_key(j, "epoch"); titan_json_uint(j, l->epoch);
			titan_json_key(j, "position"); titan_json_uint(j, l->position);
			titan_json_key(j, "n_windows"); titan_json_uint(j, l->n_windows);
			titan_json_key(j, "seq_len"); titan_json_uint(j, l->seq_len);
			titan_json_key(j, "shuffle"); titan_json_uint(j, l->shuffle);
			titan_json_key(j, "seed"); titan_json_uint(j, l->seed);
			titan_json_object_end(j);
		}
		titan_json_object_end(j);
	}
	if (in->has_rng) {
		titan_json_key(j, "rng");
		titan_json_object_begin(j);
		titan_json_key(j, "seed"); titan_json_uint(j, t->rng.seed);
		titan_json_key(j, "stream"); titan_json_uint(j, t->rng.stream);
		titan_json_key(j, "offset"); titan_json_uint(j, t->rng.offset);
		titan_json_object_end(j);
	}
}

static const char *shape_str(char *buf, size_t n, const struct titan_ckpt_tensor_info *t)
{
	size_t k = (size_t)snprintf(buf, n, "[");

	for (int i = 0; i < t->ndim && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

static int cmd_info(const struct opts *o, const char *arg)
{
	struct titan_ckpt_file *f = NULL;
	const struct titan_ckpt_info *in;
	struct titan_json j;
	char path[4096], b1[64], b2[64], e1[1024];
	uint32_t *crc = NULL;
	float *buf = NULL;
	int64_t biggest = 0, nparams = 0;
	size_t count[3] = {0, 0, 0}; /* --verify: ok, mismatch, no checksum */
	enum { V_OK, V_BAD, V_NONE } *ver = NULL;
	int rc, w = 0;

	titan_json_init(&j);
	if (is_gguf(arg)) {
		if (o->verify)
			return titan_error(TITAN_E_INVALID, "'%s': --verify checks titan checkpoints; "
					   "a GGUF file stores no checksums", arg);
		return cmd_info_gguf(o, arg);
	}
	if ((rc = resolve_ckpt(arg, path, sizeof(path))) < 0 || (rc = titan_ckpt_open(path, &f)) < 0)
		goto done;
	in = titan_ckpt_file_info(f);
	for (size_t i = 0; i < in->n_tensors; i++) {
		const struct titan_ckpt_tensor_info *t = &in->tensors[i];
		int len = (int)(strlen(titan_ckpt_part_name(t->part)) + 1 +
				strlen(titan_str_escape(e1, sizeof(e1), t->name)));

		if (t->numel > biggest)
			biggest = t->numel;
		if (len > w)
			w = len;
		if (t->part == TITAN_CKPT_MODEL)
			nparams += t->numel;
	}
	/* --verify: every dataset's stored bytes against its crc32c, all of
	 * them (a damaged one is reported, not the end) */
	if (o->verify || o->checksums) {
		size_t n;
		uint64_t b = ckpt_bytes(in, -1, &n);

		progress_begin(o, b * (o->verify + o->checksums), n * (o->verify + o->checksums));
	}
	if (o->verify) {
		if (!(ver = calloc(in->n_tensors + 1, sizeof(*ver)))) {
			rc = titan_error(TITAN_E_NOMEM, "out of memory");
			goto done;
		}
		for (size_t i = 0; i < in->n_tensors; i++) {
			const struct titan_ckpt_tensor_info *t = &in->tensors[i];

			progress_tensor((uint64_t)t->numel * (uint64_t)titan_ckpt_dtype_size(t->dtype),
					false);
			rc = titan_ckpt_verify(f, t, NULL);
			if (rc == TITAN_E_FORMAT && t->has_crc32c) {
				titan_log_debug("%s", titan_errmsg());
				titan_error_clear();
				ver[i] = V_BAD;
			} else if (rc < 0) {
				goto done;
			} else {
				ver[i] = t->has_crc32c ? V_OK : V_NONE;
			}
			count[ver[i]]++;
		}
	}
	if (o->checksums) {
		if (!(crc = calloc(in->n_tensors + 1, sizeof(*crc))) ||
		    !(buf = malloc((size_t)(biggest ? biggest : 1) * sizeof(float)))) {
			rc = titan_error(TITAN_E_NOMEM, "out of memory");
			goto done;
		}
		for (size_t i = 0; i < in->n_tensors; i++) {
			const struct titan_ckpt_tensor_info *t = &in->tensors[i];

			if (ver && ver[i] == V_BAD) /* reading it whole is that error */
				continue;
			progress_tensor((uint64_t)t->numel * (uint64_t)titan_ckpt_dtype_size(t->dtype),
					false);
			if ((rc = titan_ckpt_read(f, t, 0, t->ndim ? t->shape[0] : 1, buf)) < 0)
				goto done;
			crc[i] = titan_crc32c(0, buf, (size_t)t->numel * sizeof(float));
		}
	}
	if (o->verify || o->checksums)
		progress_tensor(0, true);
	if (o->json) {
		titan_json_object_begin(&j);
		titan_json_key(&j, "file"); titan_json_string(&j, in->path);
		titan_json_key(&j, "file_size"); titan_json_uint(&j, in->file_size);
		titan_json_key(&j, "format"); titan_json_string(&j, TITAN_CKPT_FORMAT);
		titan_json_key(&j, "format_version"); titan_json_int(&j, in->format_version);
		titan_json_key(&j, "titan_version"); titan_json_string(&j, in->titan_version);
		titan_json_key(&j, "model_only"); titan_json_bool(&j, !in->has_optimizer);
		titan_json_key(&j, "parameters"); titan_json_int(&j, nparams);
		titan_json_key(&j, "model"); dims_json(&j, &in->dims);
		state_json(&j, in);
		titan_json_key(&j, "tensors");
		titan_json_array_begin(&j);
		for (size_t i = 0; i < in->n_tensors; i++) {
			const struct titan_ckpt_tensor_info *t = &in->tensors[i];

			titan_json_object_begin(&j);
			snprintf(path, sizeof(path), "%s/%s", titan_ckpt_part_name(t->part), t->name);
			titan_json_key(&j, "name"); titan_json_string(&j, path);
			titan_json_key(&j, "dtype"); titan_json_string(&j, titan_ckpt_dtype_name(t->dtype));
			titan_json_key(&j, "shape");
			titan_json_array_begin(&j);
			for (int k = 0; k < t->ndim; k++)
				titan_json_int(&j, t->shape[k]);
			titan_json_array_end(&j);
			titan_json_key(&j, "bytes"); titan_json_uint(&j, t->storage_bytes);
			if (crc) {
				snprintf(b1, sizeof(b1), "%08" PRIx32, crc[i]);
				titan_json_key(&j, "crc32c");
				if (ver && ver[i] == V_BAD)
					titan_json_null(&j);
				else
					titan_json_string(&j, b1);
			}
			snprintf(b1, sizeof(b1), "%08" PRIx32, t->crc32c);
			titan_json_key(&j, "stored_crc32c");
			if (t->has_crc32c)
				titan_json_string(&j, b1);
			else
				titan_json_null(&j);
			if (ver) {
				titan_json_key(&j, "verify");
				titan_json_string(&j, ver[i] == V_OK ? "ok" : ver[i] == V_BAD ?
						  "mismatch" : "no checksum");
			}
			titan_json_object_end(&j);
		}
		titan_json_array_end(&j);
		if (ver) {
			titan_json_key(&j, "verify");
			titan_json_object_begin(&j);
			titan_json_key(&j, "ok"); titan_json_uint(&j, count[V_OK]);
			titan_json_key(&j, "mismatch"); titan_json_uint(&j, count[V_BAD]);
			titan_json_key(&j, "no_checksum"); titan_json_uint(&j, count[V_NONE]);
			titan_json_object_end(&j);
		}
		titan_json_key(&j, "config"); titan_json_string(&j, in->config_yaml);
		titan_json_object_end(&j);
		rc = titan_json_write_line(&j, stdout);
		goto verdict;
	}
	{
		const struct titan_model_dims *d = &in->dims;
		const struct titan_ckpt_train_state *t = &in->train;

		/* strings of the file printed escaped (titan_str_escape) */
		printf("file:          %s (%s)\n", titan_str_escape(e1, sizeof(e1), in->path),
		       titan_format_bytes(b1, sizeof(b1), (double)in->file_size));
		printf("format:        %s version %lld (titan %s)\n", TITAN_CKPT_FORMAT,
		       (long long)in->format_version,
		       titan_str_escape(e1, sizeof(e1), in->titan_version));
		printf("contents:      %s\n", in->has_optimizer ? "full (model, optimizer, state)" :
		       "model only");
		printf("model:         %s: dim %lld, layers %lld, heads %lld, kv heads %lld, "
		       "head_dim %lld, ffn hidden %lld, vocab %lld%s\n",
		       titan_str_escape(e1, sizeof(e1), d->flavor), (long long)d->dim,
		       (long long)d->n_layers, (long long)d->n_heads, (long long)d->n_kv_heads,
		       (long long)d->head_dim, (long long)d->ffn_hidden, (long long)d->vocab_size,
		       d->tied ? ", tied embeddings" : "");
		printf("               norm_eps %g, rope_theta %g%s; %lld parameters\n", d->norm_eps,
		       d->rope_theta, d->rope_scaling ? ", Llama 3.1 rope scaling" : "",
		       (long long)nparams);
		if (in->has_train_state)
			printf("train_state:   step %lld, ntokens_seen %lld\n", (long long)t->step,
			       (long long)t->ntokens_seen);
		if (in->has_lr_scheduler)
			printf("lr_scheduler:  last_epoch %lld\n", (long long)t->lr_last_epoch);
		if (in->has_optimizer)
			printf("optimizer:     AdamW step %lld\n", (long long)t->optim_step);
		if (in->has_dataloader) {
			printf("dataloader:    world_size %lld\n", (long long)t->dp_world_size);
			for (int64_t r = 0; r < t->dp_world_size; r++) {
				const struct titan_loader_state *l = &t->loader[r];

				printf("  dp_rank_%lld:   epoch %" PRIu64 ", position %" PRIu64
				       ", n_windows %" PRIu64 ", seq_len %" PRIu64 ", shuffle %" PRIu64
				       ", seed %" PRIu64 "\n", (long long)r, l->epoch, l->position,
				       l->n_windows, l->seq_len, l->shuffle, l->seed);
			}
		}
		if (in->has_rng)
			printf("rng:           seed %" PRIu64 ", stream %" PRIu64 ", offset %" PRIu64 "\n",
			       t->rng.seed, t->rng.stream, t->rng.offset);
		printf("tensors:       %zu\n", in->n_tensors);
		for (size_t i = 0; i < in->n_tensors; i++) {
			const struct titan_ckpt_tensor_info *ti = &in->tensors[i];

			snprintf(path, sizeof(path), "%s/%s", titan_ckpt_part_name(ti->part),
				 titan_str_escape(e1, sizeof(e1), ti->name));
			printf("  %-*s  %-8s  %-14s  %10s", w, path, titan_ckpt_dtype_name(ti->dtype),
			       shape_str(b2, sizeof(b2), ti),
			       titan_format_bytes(b1, sizeof(b1), (double)ti->storage_bytes));
			if (crc && ver && ver[i] == V_BAD)
				printf("  crc32c --------");
			else if (crc)
				printf("  crc32c %08" PRIx32, crc[i]);
			if (ver)
				printf("  %s", ver[i] == V_OK ? "ok" : ver[i] == V_BAD ? "MISMATCH" :
				       "no checksum");
			printf("\n");
		}
		if (ver)
			printf("verify:        %zu ok, %zu mismatched, %zu without a checksum\n",
			       count[V_OK], count[V_BAD], count[V_NONE]);
		printf("config:%s\n", in->config_yaml[0] ? "" : " (none)");
		for (const char *p = in->config_yaml; *p;) {
			const char *e = strchr(p, '\n');
			int n = e ? (int)(e - p) : (int)strlen(p);

			printf("  %.*s\n", n, p);
			p += n + (e != NULL);
		}
	}
verdict:
	if (rc == 0 && count[V_BAD]) { /* the listing is out; now the error */
		char names[700] = "";
		size_t k = 0;

		for (size_t i = 0; i < in->n_tensors && k < sizeof(names) - 1; i++)
			if (ver[i] == V_BAD)
				k += (size_t)snprintf(names + k, sizeof(names) - k, "%s%s/%s",
						      k ? ", " : "", titan_ckpt_part_name(in->tensors[i].part),
						      in->tensors[i].name);
		rc = titan_error(TITAN_E_FORMAT, "'%s': checksum mismatch in %zu dataset%s: %s (the "
				 "file is damaged)", in->path, count[V_BAD],
				 count[V_BAD] == 1 ? "" : "s", names);
	}
done:
	titan_json_release(&j);
	free(crc);
	free(buf);
	free(ver);
	titan_ckpt_close(f);
	return rc;
}

/* ------------------------------------------------------------- to hf */

/* the library's conversions (lib/ckpt/hf_ckpt.c, titan-train's too) call
 * this before each tensor */
static void on_tensor(void *ctx, uint64_t bytes)
{
	(void)ctx;
	progress_tensor(bytes, false);
}

static void progress_begin_model(const struct opts *o, const struct titan_ckpt_model_src *s)
{
	size_t n;
	uint64_t b = ckpt_bytes(titan_ckpt_file_info(s->f), TITAN_CKPT_MODEL, &n);

	progress_begin(o, b, n);
}

/* Open the checkpoint CKPT names (a file, or a folder's newest step). */
static int open_source(const char *arg, struct titan_ckpt_model_src *s)
{
	char path[4096];
	int rc;

	memset(s, 0, sizeof(*s));
	s->on_tensor = on_tensor;
	if ((rc = resolve_ckpt(arg, path, sizeof(path))) < 0)
		return rc;
	return titan_ckpt_model_open(path, s);
}

static int cmd_to_hf(const struct opts *o, const char *arg, const char *outdir)
{
	struct titan_hf_export_opts eo;
	struct titan_ckpt_model_src s;
	int rc = open_source(arg, &s);

	if (rc == 0) {
		titan_hf_export_opts_default(&eo);
		eo.dtype = o->dtype;
		eo.max_shard_size = o->max_shard;
		eo.tokenizer = o->tokenizer;
		eo.max_position_embeddings = o->max_pos;
		progress_begin_model(o, &s);
		rc = titan_hf_export(outdir, &s.table, titan_ckpt_model_get, &s, &eo);
		if (rc == 0)
			progress_tensor(0, true);
	}
	titan_ckpt_model_close(&s);
	return rc;
}

/* ------------------------------------------------------------- to gguf */

static int cmd_to_gguf(const struct opts *o, const char *arg, const char *out)
{
	struct titan_gguf_export_opts eo;
	struct titan_ckpt_model_src s;
	int rc = open_source(arg, &s);

	if (rc == 0) {
		titan_gguf_export_opts_default(&eo);
		eo.dtype = o->dtype;
		eo.tokenizer = o->tokenizer;
		eo.context_length = o->max_pos;
		if (!o->tokenizer)
			titan_log_warn("no --tokenizer: '%s' gets no tokenizer.ggml.* metadata, and "
				       "llama.cpp needs it to load the model (give the tiktoken or "
				       "tokenizer.json file the model was trained with)", out);
		progress_begin_model(o, &s);
		rc = titan_gguf_export(out, &s.table, titan_ckpt_model_get, &s, &eo);
		if (rc == 0)
			progress_tensor(0, true);
	}
	titan_ckpt_model_close(&s);
	return rc;
}

/* ------------------------------------------------------------ from hf */

static int cmd_from_hf(const struct opts *o, const char *dir, const char *out)
{
	struct titan_hf_model *m = NULL;
	const struct titan_param_table *t;
	uint64_t b = 0;
	int rc;

	if ((rc = titan_hf_open(dir, &m)) < 0)
		return rc;
	t = titan_hf_table(m);
	for (int i = 0; i < t->n; i++)
		b += (uint64_t)t->params[i].numel * (uint64_t)titan_ckpt_dtype_size(o->dtype);
	progress_begin(o, b, (size_t)t->n);
	rc = titan_hf_write_ckpt(m, out, o->dtype, true, on_tensor, NULL);
	if (rc == 0)
		progress_tensor(0, true);
	titan_hf_close(m);
	return rc;
}

/* ------------------------------------------------------------- h5 -> h5 */

static int cmd_copy(const struct opts *o, const char *arg, const char *out)
{
	struct titan_ckpt_file *f = NULL;
	struct titan_ckpt_writer *w = NULL;
	const struct titan_ckpt_info *in;
	char path[4096];
	float *buf = NULL;
	int64_t biggest = 1;
	bool full;
	int rc;

	if ((rc = resolve_ckpt(arg, path, sizeof(path))) < 0 || (rc = titan_ckpt_open(path, &f)) < 0)
		return rc;
	in = titan_ckpt_file_info(f);
	full = !o->weights_only && in->has_optimizer;
	if (full && o->dtype != TITAN_CKPT_FLOAT32) {
		rc = titan_error(TITAN_E_INVALID, "--dtype %s: '%s' has optimizer state; add "
				 "--weights-only (a full checkpoint keeps float32)",
				 titan_ckpt_dtype_name(o->dtype), path);
		goto done;
	}
	if (full && !(in->has_train_state && in->has_lr_scheduler && in->has_dataloader &&
		      in->has_rng)) {
		rc = titan_error(TITAN_E_INVALID, "'%s' has optimizer state but not all of the "
				 "training state: copy it with --weights-only", path);
		goto done;
	}
	for (size_t i = 0; i < in->n_tensors; i++)
		if (in->tensors[i].numel > biggest)
			biggest = in->tensors[i].numel;
	if (!(buf = malloc((size_t)biggest * sizeof(float)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto done;
	}
	if ((rc = titan_ckpt_writer_open(out, &in->dims, in->config_yaml, &w)) < 0)
		goto done;
	{
		size_t n;
		uint64_t b = ckpt_bytes(in, full ? -1 : TITAN_CKPT_MODEL, &n);

		progress_begin(o, b, n);
	}
	for (size_t i = 0; i < in->n_tensors && rc == 0; i++) {
		const struct titan_ckpt_tensor_info *t = &in->tensors[i];

		if (t->part != TITAN_CKPT_MODEL && !full)
			continue;
		progress_tensor((uint64_t)t->numel * (uint64_t)titan_ckpt_dtype_size(t->dtype), false);
		if ((rc = titan_ckpt_read(f, t, 0, t->ndim ? t->shape[0] : 1, buf)) == 0)
			rc = titan_ckpt_writer_tensor(w, t->part, t->name, t->ndim, t->shape, buf,
						      t->part == TITAN_CKPT_MODEL ? o->dtype :
						      TITAN_CKPT_FLOAT32);
	}
	if (rc == 0 && full)
		rc = titan_ckpt_writer_train_state(w, &in->train);
	rc = titan_ckpt_writer_close(w, rc);
	if (rc == 0)
		progress_tensor(0, true);
done:
	free(buf);
	titan_ckpt_close(f);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		TITAN_CLI_GLOBAL_OPTIONS,
		{"to", required_argument, NULL, OPT_TO},
		{"from", required_argument, NULL, OPT_FROM},
		{"dtype", required_argument, NULL, OPT_DTYPE},
		{"tokenizer", required_argument, NULL, OPT_TOKENIZER},
		{"max-shard-size", required_argument, NULL, OPT_MAX_SHARD},
		{"max-position-embeddings", required_argument, NULL, OPT_MAX_POS},
		{"weights-only", no_argument, NULL, OPT_WEIGHTS_ONLY},
		{"json", no_argument, NULL, OPT_JSON},
		{"no-checksums", no_argument, NULL, OPT_NO_CHECKSUMS},
		{"verify", no_argument, NULL, OPT_VERIFY},
		{0},
	};
	struct titan_cli cli;
	struct opts o = {.checksums = true, .dtype = TITAN_CKPT_FLOAT32};
	char **pos;
	int opt, rc, npos;
	bool info;

	if ((rc = titan_cli_init(&cli, "titan-ckpt-convert", &argc, argv, false)) != 0)
		return rc;
	while ((opt = getopt_long(argc, argv, TITAN_CLI_GLOBAL_SHORT, longopts, NULL)) != -1) {
		switch (opt) {
		case 'h':
			usage(stdout);
			rc = titan_cli_finish(&cli, 0);
			goto out;
		case OPT_TO: o.to = optarg; break;
		case OPT_FROM: o.from = optarg; break;
		case OPT_DTYPE:
			if (titan_ckpt_dtype_parse(optarg, &o.dtype) < 0) {
				rc = titan_cli_usage_error(&cli, "--dtype: '%s' is not float32, bfloat16 "
							   "or float16", optarg);
				goto out;
			}
			o.dtype_set = true;
			break;
		case OPT_TOKENIZER: o.tokenizer = optarg; break;
		case OPT_MAX_SHARD:
			if (parse_shard_size(optarg, &o.max_shard) < 0) {
				rc = titan_cli_usage_error(&cli, "--max-shard-size: bad size '%s' "
							   "(e.g. 5GB, 500MB, 2GiB)", optarg);
				goto out;
			}
			break;
		case OPT_MAX_POS:
			if (titan_parse_i64(optarg, &o.max_pos) < 0 || o.max_pos < 1) {
				rc = titan_cli_usage_error(&cli, "--max-position-embeddings: bad "
							   "number '%s'", optarg);
				goto out;
			}
			break;
		case OPT_WEIGHTS_ONLY: o.weights_only = true; break;
		case OPT_JSON: o.json = true; break;
		case OPT_NO_CHECKSUMS: o.checksums = false; break;
		case OPT_VERIFY: o.verify = true; break;
		default:
			rc = titan_cli_option(&cli, opt, optarg);
			if (rc == TITAN_CLI_HANDLED)
				break;
			if (rc == TITAN_CLI_UNKNOWN)
				rc = titan_cli_usage_error(&cli, "unhandled option");
			goto out;
		}
	}
	pos = argv + optind;
	npos = argc - optind;
	info = npos > 0 && !strcmp(pos[0], "info");
	if (info) {
		pos++;
		npos--;
	}
	if (info + (o.to != NULL) + (o.from != NULL) > 1) {
		rc = titan_cli_usage_error(&cli, "info, --to and --from are exclusive");
		goto out;
	}
	if (o.to && strcmp(o.to, "hf") && strcmp(o.to, "gguf")) {
		rc = titan_cli_usage_error(&cli, "--to: unknown format '%s' (hf, gguf)", o.to);
		goto out;
	}
	if (o.from && strcmp(o.from, "hf")) {
		rc = titan_cli_usage_error(&cli, "--from: unknown format '%s' (hf)", o.from);
		goto out;
	}
	if (npos != (info ? 1 : 2)) {
		if (npos == 0 && !info)
			rc = titan_cli_usage_error(&cli, "nothing to do: give info CKPT, --to hf, "
						   "--to gguf, --from hf or IN.h5 OUT.h5");
		else
			rc = titan_cli_usage_error(&cli, "expected %s, got %d argument%s",
						   info ? "one checkpoint" : "an input and an output",
						   npos, npos == 1 ? "" : "s");
		goto out;
	}
	if ((o.json || !o.checksums || o.verify) && !info) {
		rc = titan_cli_usage_error(&cli, "--json, --no-checksums and --verify go with info");
		goto out;
	}
	if ((o.tokenizer || o.max_shard || o.max_pos) && !o.to) {
		rc = titan_cli_usage_error(&cli, "--tokenizer, --max-shard-size and "
					   "--max-position-embeddings go with --to hf or gguf");
		goto out;
	}
	if (o.max_shard && o.to && strcmp(o.to, "hf")) {
		rc = titan_cli_usage_error(&cli, "--max-shard-size goes with --to hf (a GGUF export "
					   "is one file)");
		goto out;
	}
	if (o.weights_only && (info || o.to || o.from)) {
		rc = titan_cli_usage_error(&cli, "--weights-only goes with IN.h5 OUT.h5 (--to and "
					   "--from write weights only anyway)");
		goto out;
	}
	if (o.dtype_set && info) {
		rc = titan_cli_usage_error(&cli, "--dtype does not go with info");
		goto out;
	}
	/* '-': only a GGUF output is a stream (docs/conventions.md) */
	{
		const char *h5 = "an HDF5 checkpoint is read and written with seeks, not as a stream";
		const char *dir = "it is a folder";
		bool gguf = o.to && !strcmp(o.to, "gguf");

		if ((rc = titan_cli_no_dash(&cli, info ? "info" : o.from ? "HFDIR" : "the input",
					    pos[0], o.from ? dir : info ? "a checkpoint (HDF5) or "
					    "GGUF file is read with seeks, not as a stream" : h5)) ||
		    (!info && (rc = titan_cli_no_dash(&cli, o.to && !gguf ? "OUTDIR" : "the output",
						      gguf ? NULL : pos[1], o.to && !gguf ? dir : h5))) ||
		    (o.to && !gguf && (rc = titan_cli_no_dash(&cli, "--tokenizer", o.tokenizer,
							      "--to hf copies the file by its name"))))
			goto out;
		if (gguf && o.tokenizer && (rc = titan_cli_stdin_file(&cli, "--tokenizer", &o.tokenizer)))
			goto out;
	}
	o.progress = cli.progress;
	if (info)
		rc = cmd_info(&o, pos[0]);
	else if (o.to && !strcmp(o.to, "gguf"))
		rc = cmd_to_gguf(&o, pos[0], pos[1]);
	else if (o.to)
		rc = cmd_to_hf(&o, pos[0], pos[1]);
	else if (o.from)
		rc = cmd_from_hf(&o, pos[0], pos[1]);
	else
		rc = cmd_copy(&o, pos[0], pos[1]);
	if (rc < 0) /* a bad input file is a failure, not a usage error */
		rc = titan_cli_fail_work(&cli, rc);
	rc = titan_cli_finish(&cli, rc);
out:
	titan_cli_release(&cli);
	return rc;
}
