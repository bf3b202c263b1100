/*
 * gguf_export.c — a titan Llama as the GGUF file llama.cpp loads
 * (architecture "llama"): what llama.cpp's convert_hf_to_gguf.py
 * (TextModel.set_gguf_parameters, LlamaModel.set_gguf_parameters,
 * modify_tensors, generate_extra_tensors, _set_vocab_gpt2) writes for a
 * LlamaForCausalLM, from titan's tensors directly.  Tokenizer: tiktoken
 * files get their merges recovered from the ranks as transformers'
 * TikTokenConverter does; tokenizer.json files give theirs.
 */
#include "ckpt_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "titan/tok.h"

/* gguf-py TokenType */
enum { TOK_NORMAL = 1, TOK_CONTROL = 3, TOK_USER_DEFINED = 4, TOK_UNUSED = 5 };

void titan_gguf_export_opts_default(struct titan_gguf_export_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->dtype = TITAN_CKPT_FLOAT32;
}

int titan_gguf_param_name(const struct titan_param *p, char *buf, size_t n)
{
	static const char *const block[] = {
		[TITAN_PARAM_WQ] = "attn_q",      [TITAN_PARAM_WK] = "attn_k",
		[TITAN_PARAM_WV] = "attn_v",      [TITAN_PARAM_WO] = "attn_output",
		[TITAN_PARAM_W1] = "ffn_gate",    [TITAN_PARAM_W2] = "ffn_down",
		[TITAN_PARAM_W3] = "ffn_up",      [TITAN_PARAM_ATTENTION_NORM] = "attn_norm",
		[TITAN_PARAM_FFN_NORM] = "ffn_norm",
	};
	int k;

	switch (p->role) {
	case TITAN_PARAM_TOK_EMBEDDINGS: k = snprintf(buf, n, "token_embd.weight"); break;
	case TITAN_PARAM_NORM: k = snprintf(buf, n, "output_norm.weight"); break;
	case TITAN_PARAM_OUTPUT: k = snprintf(buf, n, "output.weight"); break;
	default:
		if ((unsigned)p->role >= TITAN_PARAM_NROLES || !block[p->role])
			return titan_error(TITAN_E_INVALID, "%s: no GGUF name", p->name);
		k = snprintf(buf, n, "blk.%d.%s.weight", p->layer, block[p->role]);
	}
	if (k < 0 || (size_t)k >= n)
		return titan_error(TITAN_E_INVALID, "%s: GGUF name too long", p->name);
	return 0;
}

void titan_gguf_rope_freqs(const struct titan_model_dims *d, float *out)
{
	const double pi = 3.14159265358979323846;
	const double old = (double)d->rope_original_max_position, lo = d->rope_low_freq_factor,
		     hi = d->rope_high_freq_factor, factor = d->rope_scaling_factor;
	const int64_t hd = d->head_dim;

	for (int64_t i = 0; i < hd / 2; i++) {
		double freq = 1.0 / pow(d->rope_theta, (double)(2 * i) / (double)hd);
		double wavelen = 2 * pi / freq;

		if (wavelen < old / hi) {
			out[i] = 1.0f;
		} else if (wavelen > old / lo) {
			out[i] = (float)factor;
		} else if (hi == lo) {
			out[i] = 1.0f; /* both bounds equal: no band in between */
		} else {
			double smooth = (old / wavelen - lo) / (hi - lo);

			out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
		}
	}
}

/* --------------------------------------------------------------- vocab */

struct vocab {
	size_t n;               /* the model's vocab_size */
	char **tokens;
	size_t *lens;
	int32_t *types;
	struct titan_ckpt_merges merges;
	int64_t bos, eos;
	const char *pre;
};

static void vocab_release(struct vocab *v)
{
	for (size_t i = 0; v->tokens && i < v->n; i++)
		free(v->tokens[i]);
	titan_ckpt_merges_free_(&v->merges);
	free(v->tokens);
	free(v->lens);
	free(v->types);
	memset(v, 0, sizeof(*v));
}

/* A tiktoken file: tokens byte-level mapped, the specials as CONTROL, the
 * merges recovered from the ranks (tiktoken_bl.c). */
static int vocab_tiktoken(struct vocab *v, const struct titan_tokenizer *tok)
{
	struct titan_ckpt_bl_vocab bl;
	char text[32];
	int rc;

	if ((rc = titan_ckpt_bl_tiktoken_(tok, &bl)) < 0)
		return rc;
	for (size_t id = 0; id < v->n && rc == 0; id++) {
		if (id < bl.n && bl.tokens[id]) {
			v->tokens[id] = bl.tokens[id];
			v->lens[id] = bl.lens[id];
			v->types[id] = bl.special[id] ? TOK_CONTROL : TOK_NORMAL;
			bl.tokens[id] = NULL;
		} else {
			snprintf(text, sizeof(text), "[PAD%zu]", id);
			v->tokens[id] = strdup(text);
			v->lens[id] = strlen(text);
			v->types[id] = TOK_UNUSED;
			if (!v->tokens[id])
				rc = titan_error(TITAN_E_NOMEM, "out of memory");
		}
	}
	v->merges = bl.merges;
	memset(&bl.merges, 0, sizeof(bl.merges));
	titan_ckpt_bl_free_(&bl);
	return rc;
}

/* convert_hf_to_gguf.py's does_token_look_special */
static bool looks_special(const char *s)
{
	size_t n = strlen(s);

	if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") ||
	    !strcmp(s, "[@BOS@]"))
		return true;
	if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>"))
		return true;
	if (n >= 8 && !strncmp(s, "<\xef\xbd\x9c", 4) && !strcmp(s + n - 4, "\xef\xbd\x9c>"))
		return true;
	return n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>';
}

static int set_token(struct vocab *v, const char *path, json_int_t id, const char *text,
		     int32_t type)
{
	if (id < 0 || (uint64_t)id >= v->n)
		return titan_error(TITAN_E_INVALID, "'%s': token id %lld is outside the model's "
				   "vocab_size %zu", path, (long long)id, v->n);
	free(v->tokens[id]);
	if (!(v->tokens[id] = strdup(text)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	v->lens[id] = strlen(text);
	v->types[id] = type;
	return 0;
}

/* A tokenizer.json: model.vocab's strings (already byte-level), added
 * tokens as CONTROL (special, or looking special) or USER_DEFINED, and
 * model.merges as written ("a b" or ["a", "b"]), as the converter's
 * get_vocab_base and SpecialVocab do. */
static int vocab_json(struct vocab *v, const char *path)
{
	json_error_t err;
	json_t *root = json_load_file(path, 0, &err), *model, *vocab, *merges, *added, *e;
	const char *key;
	size_t i;
	int rc = 0;

	if (!root)
		return titan_error(TITAN_E_FORMAT, "%s:%d:%d: %s", path, err.line, err.column, err.text);
	model = json_object_get(root, "model");
	vocab = json_object_get(model, "vocab");
	merges = json_object_get(model, "merges");
	added = json_object_get(root, "added_tokens");
	if (!json_is_object(vocab) || !json_is_array(merges)) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': no model.vocab object and model.merges array",
				 path);
		goto done;
	}
	json_object_foreach(vocab, key, e) {
		if (!json_is_integer(e) ||
		    (rc = set_token(v, path, json_integer_value(e), key, TOK_NORMAL)) < 0) {
			if (rc == 0)
				rc = titan_error(TITAN_E_FORMAT, "'%s': model.vocab[\"%s\"] is not an id",
						 path, key);
			goto done;
		}
	}
	json_array_foreach(added, i, e) {
		json_t *id = json_object_get(e, "id"), *content = json_object_get(e, "content");
		const char *s;

		if (!json_is_integer(id) || !json_is_string(content)) {
			rc = titan_error(TITAN_E_FORMAT, "'%s': added_tokens[%zu] has no id and content",
					 path, i);
			goto done;
		}
		s = json_string_value(content);
		if (json_is_true(json_object_get(e, "special")) || looks_special(s)) {
			rc = set_token(v, path, json_integer_value(id), s, TOK_CONTROL);
		} else {
			/* pre-normalize user-defined spaces (U+2581) as the converter does */
			size_t n = strlen(s), k = 0;
			char *t = malloc(n + 1);

			if (!t) {
				rc = titan_error(TITAN_E_NOMEM, "out of memory");
				goto done;
			}
			for (size_t j = 0; j < n; j++) {
				if (j + 3 <= n && !memcmp(s + j, "\xe2\x96\x81", 3)) {
					t[k++] = ' ';
					j += 2;
				} else {
					t[k++] = s[j];
				}
			}
			t[k] = 0;
			rc = set_token(v, path, json_integer_value(id), t, TOK_USER_DEFINED);
			free(t);
		}
		if (rc < 0)
			goto done;
	}
	json_array_foreach(merges, i, e) {
		const char *a, *b, *sp;

		if (json_is_string(e) && (sp = strchr(json_string_value(e), ' ')) &&
		    sp != json_string_value(e)) {
			a = json_string_value(e);
			rc = titan_ckpt_merge_add_(&v->merges, a, (size_t)(sp - a), sp + 1,
						   strlen(sp + 1));
		} else if (json_is_array(e) && json_array_size(e) == 2 &&
			   json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1))) {
			a = json_string_value(json_array_get(e, 0));
			b = json_string_value(json_array_get(e, 1));
			rc = titan_ckpt_merge_add_(&v->merges, a, strlen(a), b, strlen(b));
		} else {
			rc = titan_error(TITAN_E_FORMAT, "'%s': model.merges[%zu] is neither \"a b\" "
					 "nor [\"a\", \"b\"]", path, i);
		}
		if (rc < 0)
			goto done;
	}
done:
	json_decref(root);
	return rc;
}

static int vocab_load(struct vocab *v, const char *path, int64_t model_vocab)
{
	struct titan_tokenizer *tok;
	uint32_t nt;
	int rc;

	if ((rc = titan_tokenizer_load(path, TITAN_ENC_AUTO, &tok)) < 0)
		return rc;
	nt = titan_tokenizer_vocab_size(tok);
	if ((int64_t)nt > model_vocab) {
		rc = titan_error(TITAN_E_INVALID, "'%s' has %u token ids, more than the model's "
				 "vocab_size %lld", path, nt, (long long)model_vocab);
		goto done;
	}
	v->n = (size_t)model_vocab;
	v->bos = titan_tokenizer_bos(tok);
	v->eos = titan_tokenizer_eos(tok);
	switch (titan_tokenizer_pretok_kind(tok)) {
	case TITAN_PRETOK_CL100K: v->pre = "llama-bpe"; break;
	case TITAN_PRETOK_O200K: v->pre = "gpt-4o"; break;
	case TITAN_PRETOK_GPT2: v->pre = "gpt-2"; break;
	default:
		v->pre = "default";
		titan_log_warn("'%s': the pre-tokenizer is not Llama 3's, GPT-2's or o200k's: "
			       "tokenizer.ggml.pre is \"default\", and llama.cpp will split text "
			       "with its own default pattern", path);
	}
	v->tokens = calloc(v->n + 1, sizeof(*v->tokens));
	v->lens = calloc(v->n + 1, sizeof(*v->lens));
	v->types = calloc(v->n + 1, sizeof(*v->types));
	if (!v->tokens || !v->lens || !v->types) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto done;
	}
	if (titan_tokenizer_format(tok) == TITAN_TOK_TIKTOKEN) {
		rc = vocab_tiktoken(v, tok);
	} else {
		rc = vocab_json(v, path);
		for (size_t id = 0; id < v->n && rc == 0; id++) {
			if (!v->tokens[id]) {
				char text[32];

				snprintf(text, sizeof(text), "[PAD%zu]", id);
				rc = set_token(v, path, (json_int_t)id, text, TOK_UNUSED);
			}
		}
	}
done:
	titan_tokenizer_free(tok);
	return rc;
}

static int vocab_write(struct titan_gguf_writer *w, const struct vocab *v)
{
	int rc;

	if ((rc = titan_gguf_set_str(w, "tokenizer.ggml.model", "gpt2")) < 0 ||
	    (rc = titan_gguf_set_str(w, "tokenizer.ggml.pre", v->pre)) < 0 ||
	    (rc = titan_gguf_set_array_str(w, "tokenizer.ggml.tokens",
					   (const char *const *)v->tokens, v->lens, v->n)) < 0 ||
	    (rc = titan_gguf_set_array(w, "tokenizer.ggml.token_type", TITAN_GGUF_INT32, v->types,
				       v->n)) < 0 ||
	    (rc = titan_gguf_set_array_str(w, "tokenizer.ggml.merges",
					   (const char *const *)v->merges.v, NULL, v->merges.n)) < 0)
		return rc;
	if (v->bos >= 0 && ((rc = titan_gguf_set_u32(w, "tokenizer.ggml.bos_token_id",
						     (uint32_t)v->bos)) < 0 ||
			    (rc = titan_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", true)) < 0))
		return rc;
	if (v->eos >= 0 && (rc = titan_gguf_set_u32(w, "tokenizer.ggml.eos_token_id",
						    (uint32_t)v->eos)) < 0)
		return rc;
	return titan_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", false);
}

/* -------------------------------------------------------------- export */

struct fill_ctx {
	const struct titan_param_table *t;
	const int *param_of;        /* tensor index -> parameter (-1: has data) */
	titan_hf_get_fn get;
	void *ctx;
	float *f32;
	enum titan_ckpt_dtype dtype;
};

static int fill(void *arg, size_t index, void *out, uint64_t nbytes)
{
	struct fill_ctx *c = arg;
	const struct titan_param *p = &c->t->params[c->param_of[index]];
	enum titan_ckpt_dtype dt = p->ndim == 2 ? c->dtype : TITAN_CKPT_FLOAT32;
	int rc;

	TITAN_ASSERT(nbytes == (uint64_t)p->numel * (uint64_t)titan_ckpt_dtype_size(dt));
	if ((rc = c->get(c->ctx, p, c->f32)) < 0)
		return rc;
	titan_ckpt_cast(dt, c->f32, out, (size_t)p->numel);
	return 0;
}

static uint32_t ggml_type_of(enum titan_ckpt_dtype dt)
{
	return dt == TITAN_CKPT_FLOAT32 ? TITAN_GGML_F32 : dt == TITAN_CKPT_FLOAT16 ? TITAN_GGML_F16 :
										   TITAN_GGML_BF16;
}

static int hparams(struct titan_gguf_writer *w, const struct titan_model_dims *d,
		   const struct titan_gguf_export_opts *o)
{
	/* gguf-py LlamaFileType: ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32 */
	uint32_t ftype = o->dtype == TITAN_CKPT_FLOAT32 ? 0 : o->dtype == TITAN_CKPT_FLOAT16 ? 1 : 32;
	int64_t ctx = o->context_length > 0 ? o->context_length :
		      d->rope_scaling ? 131072 : d->rope_original_max_position;
	char name[64];
	int rc;

	snprintf(name, sizeof(name), "titan %s", d->flavor);
	if ((rc = titan_gguf_set_str(w, "general.architecture", "llama")) < 0 ||
	    (rc = titan_gguf_set_str(w, "general.type", "model")) < 0 ||
	    (rc = titan_gguf_set_str(w, "general.name", o->name ? o->name : name)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "general.alignment", TITAN_GGUF_DEFAULT_ALIGNMENT)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "llama.block_count", (uint32_t)d->n_layers)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "llama.context_length", (uint32_t)ctx)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "llama.embedding_length", (uint32_t)d->dim)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "llama.feed_forward_length", (uint32_t)d->ffn_hidden)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "llama.attention.head_count", (uint32_t)d->n_heads)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "llama.attention.head_count_kv",
				     (uint32_t)d->n_kv_heads)) < 0 ||
	    (rc = titan_gguf_set_f32(w, "llama.rope.freq_base", (float)d->rope_theta)) < 0 ||
	    (rc = titan_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon",
				     (float)d->norm_eps)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "llama.attention.key_length", (uint32_t)d->head_dim)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "llama.attention.value_length", (uint32_t)d->head_dim)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "general.file_type", ftype)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "llama.vocab_size", (uint32_t)d->vocab_size)) < 0 ||
	    (rc = titan_gguf_set_u32(w, "llama.rope.dimension_count", (uint32_t)d->head_dim)) < 0)
		return rc;
	return 0;
}

int titan_gguf_export(const char *path, const struct titan_param_table *t, titan_hf_get_fn get,
		      void *ctx, const struct titan_gguf_export_opts *o)
{
	struct titan_gguf_export_opts def;
	struct titan_gguf_writer *w = NULL;
	struct vocab v = {0};
	struct fill_ctx fc = {.t = t, .get = get, .ctx = ctx};
	float *rope = NULL;
	int *param_of = NULL, nt = 0, rc = 0;
	int64_t biggest = 1;

	if (!o) {
		titan_gguf_export_opts_default(&def);
		o = &def;
	}
	if (t->opts.shard_degree > 1)
		return titan_error(TITAN_E_UNSUPPORTED, "GGUF export of a sharded parameter table");
	/* llama.cpp's qwen3 architecture (attn_q_norm, attn_k_norm, its own
	 * head_dim) is not written: refused rather than a wrong "llama" file */
	if (t->dims.family == TITAN_MODEL_NAME_LLAMA4)
		return titan_error(TITAN_E_UNSUPPORTED, "GGUF export: model.name llama4 (NoPE "
				   "layers, interleaved MoE) is not written as GGUF yet");
	if (t->dims.qk_norm)
		return titan_error(TITAN_E_UNSUPPORTED, "GGUF export: model %s (QK-norm) is not "
				   "written as GGUF yet (titan writes llama.cpp's architecture "
				   "llama only); use --to hf", titan_model_family_name(t->dims.family));
	if (t->dims.moe.num_experts > 0)
		return titan_error(TITAN_E_UNSUPPORTED, "GGUF export: a mixture-of-experts model "
				   "(moe_num_experts %lld) is not written as GGUF yet",
				   (long long)t->dims.moe.num_experts);
	if (t->dims.head_dim % 2)
		return titan_error(TITAN_E_INVALID, "GGUF export: head_dim %lld is odd",
				   (long long)t->dims.head_dim);
	/* the tokenizer first: a bad one fails before the big writes */
	if (o->tokenizer && (rc = vocab_load(&v, o->tokenizer, t->dims.vocab_size)) < 0)
		goto done;
	if (!(w = titan_gguf_writer_new()) || !(param_of = calloc((size_t)t->n + 1, sizeof(int)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto done;
	}
	if ((rc = hparams(w, &t->dims, o)) < 0 || (o->tokenizer && (rc = vocab_write(w, &v)) < 0) ||
	    (rc = titan_gguf_set_u32(w, "general.quantization_version", 2)) < 0)
		goto done;
	vocab_release(&v); /* the writer holds copies */
	if (t->dims.rope_scaling) {
		int64_t half = t->dims.head_dim / 2;

		if (!(rope = malloc((size_t)half * sizeof(float)))) {
			rc = titan_error(TITAN_E_NOMEM, "out of memory");
			goto done;
		}
		titan_gguf_rope_freqs(&t->dims, rope);
		if ((rc = titan_gguf_add_tensor(w, "rope_freqs.weight", TITAN_GGML_F32, 1, &half,
						rope)) < 0)
			goto done;
		param_of[nt++] = -1;
	}
	for (int i = 0; i < t->n; i++) {
		const struct titan_param *p = &t->params[i];
		char name[TITAN_GGUF_MAX_NAME + 1];

		if ((rc = titan_gguf_param_name(p, name, sizeof(name))) < 0 ||
		    (rc = titan_gguf_add_tensor(w, name, p->ndim == 2 ? ggml_type_of(o->dtype) :
						TITAN_GGML_F32, p->ndim, p->shape, NULL)) < 0)
			goto done;
		param_of[nt++] = i;
		if (p->numel > biggest)
			biggest = p->numel;
	}
	if (!(fc.f32 = malloc((size_t)biggest * sizeof(float)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto done;
	}
	fc.param_of = param_of;
	fc.dtype = o->dtype;
	rc = titan_gguf_write(w, path, fill, &fc);
done:
	vocab_release(&v);
	titan_gguf_writer_free(w);
	free(fc.f32);
	free(rope);
	free(param_of);
	return rc;
}
