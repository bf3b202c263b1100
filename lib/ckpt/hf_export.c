/*
 * hf_export.c — write a HuggingFace LlamaForCausalLM folder (Qwen3ForCausalLM,
 * Qwen3MoeForCausalLM with one tensor an expert, DeepseekV3ForCausalLM,
 * Llama4ForCausalLM with stacked experts): safetensors
 * shards (+ index), config.json, generation_config.json and the tokenizer
 * (torchtitan's scripts/checkpoint_conversion/convert_to_hf.py and the
 * HuggingFaceStorageWriter's consolidation; transformers' save_pretrained
 * file names and sharding rule).
 */
#include "ckpt_impl.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/tok.h"

#define HF_NAME_MAX 160

void titan_hf_export_opts_default(struct titan_hf_export_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->dtype = TITAN_CKPT_FLOAT32;
	o->bos_id = o->eos_id = -1;
}

static const char *torch_dtype(enum titan_ckpt_dtype dt)
{
	return dt == TITAN_CKPT_FLOAT32 ? "float32" : dt == TITAN_CKPT_BFLOAT16 ? "bfloat16" : "float16";
}

static enum titan_st_dtype st_dtype(enum titan_ckpt_dtype dt)
{
	return dt == TITAN_CKPT_FLOAT32 ? TITAN_ST_F32 : dt == TITAN_CKPT_BFLOAT16 ? TITAN_ST_BF16 :
									     TITAN_ST_F16;
}

/* Files written so far, removed when the export fails. */
struct written {
	char **paths;
	size_t n;
};

static int wrote(struct written *w, const char *path)
{
	char **p = realloc(w->paths, (w->n + 1) * sizeof(*p));

	if (!p || !(p[w->n] = strdup(path))) {
		if (p)
			w->paths = p;
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	w->paths = p;
	w->n++;
	return 0;
}

/* Compact JSON numbers with 16 digits (1e-05, not 1.0000000000000001e-05). */
static int write_json(struct written *w, const char *dir, const char *name, json_t *j)
{
	char path[4096], *text;
	int rc;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(16));
	if (!text)
		return titan_error(TITAN_E_NOMEM, "out of memory writing '%s'", path);
	{
		size_t n = strlen(text);
		char *t2 = realloc(text, n + 2);

		if (!t2) {
			free(text);
			return titan_error(TITAN_E_NOMEM, "out of memory");
		}
		text = t2;
		text[n] = '\n';
		text[n + 1] = 0;
	}
	rc = titan_write_file_atomic(path, text, strlen(text));
	free(text);
	return rc < 0 ? rc : wrote(w, path);
}

static int64_t max_positions(const struct titan_model_dims *d, const struct titan_hf_export_opts *o)
{
	return o->max_position_embeddings > 0 ? o->max_position_embeddings :
	       d->family == TITAN_MODEL_NAME_QWEN3 ? 40960 : /* Qwen3's config.json */
	       d->rope_scaling ? 131072 : d->rope_original_max_position;
}

/* The keys every exported config.json has alike: no biases, no dropout,
 * the special token ids when known. */
static void set_common(json_t *j, int64_t bos, int64_t eos)
{
	json_object_set_new(j, "attention_bias", json_false());
	json_object_set_new(j, "attention_dropout", json_real(0.0));
	if (bos >= 0)
		json_object_set_new(j, "bos_token_id", json_integer(bos));
	if (eos >= 0)
		json_object_set_new(j, "eos_token_id", json_integer(eos));
}

/* DeepseekV3Config's keys as DeepSeek-V3's config.json has them (titan's
 * mscale as both mscale and mscale_all_dim: HF then scales the softmax
 * by it and leaves cos/sin alone, as torchtitan; scoring_func, which
 * DeepSeek's own config carries, says softmax routing) */
static json_t *deepseek_json(const struct titan_model_dims *d, const struct titan_hf_export_opts *o,
			     int64_t bos, int64_t eos)
{
	const struct titan_mla_dims *a = &d->mla;
	const struct titan_moe_dims *m = &d->moe;
	const bool moe = m->num_experts > 0;
	json_t *j = json_object();

	json_object_set_new(j, "architectures", json_pack("[s]", "DeepseekV3ForCausalLM"));
	set_common(j, bos, eos);
	json_object_set_new(j, "first_k_dense_replace",
			    json_integer(moe ? m->n_dense_layers : d->n_layers));
	json_object_set_new(j, "hidden_act", json_string("silu"));
	json_object_set_new(j, "hidden_size", json_integer(d->dim));
	json_object_set_new(j, "initializer_range", json_real(0.02));
	json_object_set_new(j, "intermediate_size", json_integer(d->ffn_hidden));
	json_object_set_new(j, "kv_lora_rank", json_integer(a->kv_lora_rank));
	json_object_set_new(j, "max_position_embeddings",
			    json_integer(o->max_position_embeddings > 0 ? o->max_position_embeddings
					 : a->rope_factor > 1.0 ?
					   (json_int_t)(a->rope_factor * (double)a->original_seq_len)
					 : a->original_seq_len));
	json_object_set_new(j, "model_type", json_string("deepseek_v3"));
	json_object_set_new(j, "moe_intermediate_size", json_integer(moe ? m->inter_dim : 0));
	json_object_set_new(j, "n_group", json_integer(1));
	json_object_set_new(j, "n_routed_experts", json_integer(m->num_experts));
	json_object_set_new(j, "n_shared_experts", json_integer(moe ? m->num_shared_experts : 0));
	json_object_set_new(j, "norm_topk_prob", json_boolean(moe && m->route_norm));
	json_object_set_new(j, "num_attention_heads", json_integer(d->n_heads));
	json_object_set_new(j, "num_experts_per_tok", json_integer(moe ? m->top_k : 1));
	json_object_set_new(j, "num_hidden_layers", json_integer(d->n_layers));
	json_object_set_new(j, "num_key_value_heads", json_integer(d->n_kv_heads));
	json_object_set_new(j, "pretraining_tp", json_integer(1));
	json_object_set_new(j, "q_lora_rank", a->q_lora_rank > 0 ? json_integer(a->q_lora_rank)
								 : json_null());
	json_object_set_new(j, "qk_nope_head_dim", json_integer(a->qk_nope_head_dim));
	json_object_set_new(j, "qk_rope_head_dim", json_integer(a->qk_rope_head_dim));
	json_object_set_new(j, "rms_norm_eps", json_real(d->norm_eps));
	json_object_set_new(j, "rope_interleave", json_true());
	if (a->rope_factor > 1.0)
		json_object_set_new(j, "rope_scaling",
				    json_pack("{s:f, s:f, s:f, s:f, s:f, s:I, s:s, s:s}", "beta_fast",
					      a->beta_fast, "beta_slow", a->beta_slow, "factor",
					      a->rope_factor, "mscale", a->mscale, "mscale_all_dim",
					      a->mscale, "original_max_position_embeddings",
					      (json_int_t)a->original_seq_len, "rope_type", "yarn",
					      "type", "yarn"));
	else
		json_object_set_new(j, "rope_scaling", json_null());
	json_object_set_new(j, "rope_theta", json_real(d->rope_theta));
	json_object_set_new(j, "routed_scaling_factor", json_real(moe ? m->route_scale : 1.0));
	json_object_set_new(j, "scoring_func", json_string(moe && m->softmax ? "softmax"
									     : "sigmoid"));
	json_object_set_new(j, "tie_word_embeddings", json_boolean(d->tied));
	json_object_set_new(j, "topk_group", json_integer(1));
	json_object_set_new(j, "topk_method", json_string("noaux_tc"));
	json_object_set_new(j, "torch_dtype", json_string(torch_dtype(o->dtype)));
	json_object_set_new(j, "use_cache", json_true());
	json_object_set_new(j, "v_head_dim", json_integer(a->v_head_dim));
	json_object_set_new(j, "vocab_size", json_integer(d->vocab_size));
	return j;
}

/* Llama 3.1's rope_scaling (Llama 4's too), or null */
static json_t *llama3_rope_scaling(const struct titan_model_dims *d)
{
	if (!d->rope_scaling)
		return json_null();
	return json_pack("{s:f, s:f, s:f, s:I, s:s}", "factor", d->rope_scaling_factor,
			 "low_freq_factor", d->rope_low_freq_factor, "high_freq_factor",
			 d->rope_high_freq_factor, "original_max_position_embeddings",
			 (json_int_t)d->rope_original_max_position, "rope_type", "llama3");
}

/* Llama4TextConfig's keys (Llama4ForCausalLM, model_type llama4_text):
 * the MoE and NoPE blocks as explicit lists (titan's NoPE blocks 0, n,
 * 2n, .. are not HF's no_rope_layer_interval pattern), no QK L2 norm and
 * no attention temperature (torchtitan's Llama 4 has neither). */
static json_t *llama4_json(const struct titan_model_dims *d, const struct titan_hf_export_opts *o,
			   int64_t bos, int64_t eos)
{
	const struct titan_moe_dims *m = &d->moe;
	const bool moe = m->num_experts > 0;
	json_t *j = json_object(), *moe_layers = json_array(), *rope = json_array();

	for (int64_t i = 0; i < d->n_layers; i++) {
		if (titan_model_layer_is_moe(d, i))
			json_array_append_new(moe_layers, json_integer(i));
		json_array_append_new(rope, json_integer(!titan_model_layer_nope(d, i)));
	}
	json_object_set_new(j, "architectures", json_pack("[s]", "Llama4ForCausalLM"));
	set_common(j, bos, eos);
	json_object_set_new(j, "attention_chunk_size", json_integer(d->attn_chunk));
	json_object_set_new(j, "attn_scale", json_real(0.1));
	json_object_set_new(j, "attn_temperature_tuning", json_false());
	json_object_set_new(j, "floor_scale", json_integer(8192));
	json_object_set_new(j, "head_dim", json_integer(d->head_dim));
	json_object_set_new(j, "hidden_act", json_string("silu"));
	json_object_set_new(j, "hidden_size", json_integer(d->dim));
	json_object_set_new(j, "initializer_range", json_real(0.02));
	json_object_set_new(j, "interleave_moe_layer_step",
			    json_integer(moe && m->interleave_step > 0 ? m->interleave_step : 1));
	json_object_set_new(j, "intermediate_size", json_integer(moe ? m->inter_dim : d->ffn_hidden));
	json_object_set_new(j, "intermediate_size_mlp", json_integer(d->ffn_hidden));
	json_object_set_new(j, "max_position_embeddings", json_integer(max_positions(d, o)));
	json_object_set_new(j, "model_type", json_string("llama4_text"));
	json_object_set_new(j, "moe_layers", moe_layers);
	json_object_set_new(j, "no_rope_layers", rope);
	json_object_set_new(j, "num_attention_heads", json_integer(d->n_heads));
	json_object_set_new(j, "num_experts_per_tok", json_integer(moe ? m->top_k : 1));
	json_object_set_new(j, "num_hidden_layers", json_integer(d->n_layers));
	json_object_set_new(j, "num_key_value_heads", json_integer(d->n_kv_heads));
	json_object_set_new(j, "num_local_experts", json_integer(moe ? m->num_experts : 0));
	json_object_set_new(j, "output_router_logits", json_false());
	json_object_set_new(j, "rms_norm_eps", json_real(d->norm_eps));
	json_object_set_new(j, "rope_scaling", llama3_rope_scaling(d));
	json_object_set_new(j, "rope_theta", json_real(d->rope_theta));
	json_object_set_new(j, "router_aux_loss_coef", json_real(0.001));
	json_object_set_new(j, "router_jitter_noise", json_real(0.0));
	json_object_set_new(j, "tie_word_embeddings", json_boolean(d->tied));
	json_object_set_new(j, "torch_dtype", json_string(torch_dtype(o->dtype)));
	json_object_set_new(j, "use_cache", json_true());
	json_object_set_new(j, "use_qk_norm", json_false());
	json_object_set_new(j, "vocab_size", json_integer(d->vocab_size));
	return j;
}

static json_t *config_json(const struct titan_model_dims *d, const struct titan_hf_export_opts *o,
			   int64_t bos, int64_t eos)
{
	if (titan_model_mla(d))
		return deepseek_json(d, o, bos, eos);
	if (d->family == TITAN_MODEL_NAME_LLAMA4)
		return llama4_json(d, o, bos, eos);

	json_t *j = json_object();
	int64_t maxpos = max_positions(d, o);

	/* a QK-norm model is HF's Qwen3 whatever model.name says */
	const bool qwen3 = d->family == TITAN_MODEL_NAME_QWEN3 || d->qk_norm;
	const bool moe = d->moe.num_experts > 0; /* check_moe: a Qwen3 */

	/* Qwen3ForCausalLM's keys as Qwen3-0.6B's config.json has them, and
	 * Qwen3MoeForCausalLM's as Qwen3-30B-A3B's */
	json_object_set_new(j, "architectures",
			    json_pack("[s]", moe ? "Qwen3MoeForCausalLM" : qwen3 ? "Qwen3ForCausalLM"
									  : "LlamaForCausalLM"));
	if (moe) {
		json_t *dense = json_array();

		for (int64_t i = 0; i < d->moe.n_dense_layers && i < d->n_layers; i++)
			json_array_append_new(dense, json_integer(i));
		json_object_set_new(j, "decoder_sparse_step",
				    json_integer(d->moe.interleave_step > 0 ? d->moe.interleave_step
									    : 1));
		json_object_set_new(j, "mlp_only_layers", dense);
		json_object_set_new(j, "moe_intermediate_size", json_integer(d->moe.inter_dim));
		json_object_set_new(j, "norm_topk_prob", json_boolean(d->moe.route_norm));
		json_object_set_new(j, "num_experts", json_integer(d->moe.num_experts));
		json_object_set_new(j, "num_experts_per_tok", json_integer(d->moe.top_k));
		json_object_set_new(j, "output_router_logits", json_false());
		json_object_set_new(j, "router_aux_loss_coef", json_real(0.001));
	}
	set_common(j, bos, eos);
	json_object_set_new(j, "head_dim", json_integer(d->head_dim));
	json_object_set_new(j, "hidden_act", json_string("silu"));
	json_object_set_new(j, "hidden_size", json_integer(d->dim));
	json_object_set_new(j, "initializer_range", json_real(0.02));
	json_object_set_new(j, "intermediate_size", json_integer(d->ffn_hidden));
	json_object_set_new(j, "max_position_embeddings", json_integer(maxpos));
	if (qwen3)
		json_object_set_new(j, "max_window_layers", json_integer(d->n_layers));
	else
		json_object_set_new(j, "mlp_bias", json_false());
	json_object_set_new(j, "model_type",
			    json_string(moe ? "qwen3_moe" : qwen3 ? "qwen3" : "llama"));
	json_object_set_new(j, "num_attention_heads", json_integer(d->n_heads));
	json_object_set_new(j, "num_hidden_layers", json_integer(d->n_layers));
	json_object_set_new(j, "num_key_value_heads", json_integer(d->n_kv_heads));
	if (!qwen3)
		json_object_set_new(j, "pretraining_tp", json_integer(1));
	json_object_set_new(j, "rms_norm_eps", json_real(d->norm_eps));
	json_object_set_new(j, "rope_scaling", llama3_rope_scaling(d));
	json_object_set_new(j, "rope_theta", json_real(d->rope_theta));
	if (qwen3)
		json_object_set_new(j, "sliding_window", json_null());
	json_object_set_new(j, "tie_word_embeddings", json_boolean(d->tied));
	json_object_set_new(j, "torch_dtype", json_string(torch_dtype(o->dtype)));
	json_object_set_new(j, "use_cache", json_true());
	if (qwen3)
		json_object_set_new(j, "use_sliding_window", json_false());
	json_object_set_new(j, "vocab_size", json_integer(d->vocab_size));
	return j;
}

/* {"type": "ByteLevel", ...} as Meta Llama 3's tokenizer.json has them */
static json_t *byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex)
{
	return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space",
			 add_prefix_space, "trim_offsets", trim_offsets, "use_regex", use_regex);
}

static json_t *special_piece(const char *text, int type_id)
{
	return json_pack("{s:{s:s, s:i}}", "SpecialToken", "id", text, "type_id", type_id);
}

static json_t *sequence_piece(const char *seq, int type_id)
{
	return json_pack("{s:{s:s, s:i}}", "Sequence", "id", seq, "type_id", type_id);
}

/* The post-processor: the ByteLevel one, then, when the tokenizer has a BOS,
 * TemplateProcessing putting it before each sequence (Llama 3's: BOS, no
 * EOS, as titan's documents start). */
static json_t *post_processor(const char *bos)
{
	json_t *seq = json_array(), *tp;

	json_array_append_new(seq, byte_level(true, false, true));
	if (bos) {
		tp = json_pack("{s:s, s:[o,o], s:[o,o,o,o], s:{s:{s:s, s:[I], s:[s]}}}",
			       "type", "TemplateProcessing",
			       "single", special_piece(bos, 0), sequence_piece("A", 0),
			       "pair", special_piece(bos, 0), sequence_piece("A", 0),
			       special_piece(bos, 1), sequence_piece("B", 1),
			       "special_tokens", bos, "id", bos, "ids", (json_int_t)0, "tokens", bos);
		json_array_append_new(seq, tp);
	}
	return json_pack("{s:s, s:o}", "type", "Sequence", "processors", seq);
}

/* tokenizer.json and tokenizer_config.json for a tiktoken tokenizer, as
 * transformers' TikTokenConverter (and Meta's Llama 3 release) has them:
 * byte-level BPE with the merges recovered from the ranks, the tiktoken
 * pattern as a Split pre-tokenizer followed by ByteLevel without its own
 * regex, the special tokens as added tokens. */
static int tokenizer_json(struct written *w, const char *dir, const char *src,
			  const struct titan_tokenizer *tok, int64_t bos, int64_t eos,
			  int64_t max_len)
{
	const char *pat = titan_pretok_pattern(titan_tokenizer_pretok_kind(tok));
	struct titan_ckpt_bl_vocab bl;
	json_t *vocab = NULL, *merges = NULL, *added = NULL, *j = NULL, *c = NULL, *pp, *bt;
	const char *bos_text = NULL, *eos_text = NULL;
	int rc;

	if (!pat)
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': its pre-tokenizer has no known "
				   "pattern for tokenizer.json", src);
	if ((rc = titan_ckpt_bl_tiktoken_(tok, &bl)) < 0)
		return rc;
	vocab = json_object();
	merges = json_array();
	added = json_array();
	if (!vocab || !merges || !added)
		goto nomem;
	for (uint32_t id = 0; id < bl.n; id++) {
		json_t *s;

		if (!bl.tokens[id])
			continue;
		if (bl.special[id]) {
			s = json_pack("{s:I, s:s%, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)id,
				      "content", bl.tokens[id], bl.lens[id], "single_word", false,
				      "lstrip", false, "rstrip", false, "normalized", false,
				      "special", true);
			if (!s || json_array_append_new(added, s) < 0)
				goto nomem;
			if ((int64_t)id == bos)
				bos_text = bl.tokens[id];
			if ((int64_t)id == eos)
				eos_text = bl.tokens[id];
		} else if (json_object_setn_new(vocab, bl.tokens[id], bl.lens[id],
						json_integer(id)) < 0) {
			goto nomem;
		}
	}
	for (size_t i = 0; i < bl.merges.n; i++)
		if (json_array_append_new(merges, json_string(bl.merges.v[i])) < 0)
			goto nomem;
	pp = post_processor(bos_text);
	if (pp && bos_text) { /* the BOS id the template adds */
		bt = json_object_get(json_array_get(json_object_get(pp, "processors"), 1),
				     "special_tokens");
		json_array_set_new(json_object_get(json_object_get(bt, bos_text), "ids"), 0,
				   json_integer(bos));
	}
	j = json_pack("{s:s, s:n, s:n, s:o, s:n, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, o]}, "
		      "s:o*, s:o, s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}}",
		      "version", "1.0", "truncation", "padding", "added_tokens", added,
		      "normalizer",
		      "pre_tokenizer", "type", "Sequence", "pretokenizers", "type", "Split",
		      "pattern", "Regex", pat, "behavior", "Isolated", "invert", false,
		      byte_level(false, true, false),
		      "post_processor", pp, "decoder", byte_level(true, true, true),
		      "model", "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix",
		      "end_of_word_suffix", "fuse_unk", false, "byte_fallback", false,
		      "ignore_merges", true, "vocab", vocab, "merges", merges);
	added = vocab = merges = NULL; /* stolen by json_pack, even on failure */
	if (!j)
		goto nomem;
	/* transformers' PreTrainedTokenizerFast reads the tokenizer.json; no
	 * chat_template: titan trains base models */
	c = json_pack("{s:s, s:b, s:b, s:b, s:I, s:[s,s], s:s}",
		      "tokenizer_class", "PreTrainedTokenizerFast",
		      "clean_up_tokenization_spaces", false, "add_bos_token", bos_text != NULL,
		      "add_eos_token", false, "model_max_length", (json_int_t)max_len,
		      "model_input_names", "input_ids", "attention_mask",
		      "padding_side", "right");
	if (!c)
		goto nomem;
	if (bos_text)
		json_object_set_new(c, "bos_token", json_string(bos_text));
	if (eos_text)
		json_object_set_new(c, "eos_token", json_string(eos_text));
	if ((rc = write_json(w, dir, "tokenizer.json", j)) == 0)
		rc = write_json(w, dir, "tokenizer_config.json", c);
	goto done;
nomem:
	rc = titan_error(TITAN_E_NOMEM, "out of memory writing '%s/tokenizer.json'", dir);
done:
	json_decref(vocab);
	json_decref(merges);
	json_decref(added);
	json_decref(j);
	json_decref(c);
	titan_ckpt_bl_free_(&bl);
	return rc;
}

/* Copy the tokenizer file under its base name; read bos/eos from it.  A
 * tiktoken file also gets its tokenizer.json and tokenizer_config.json (the
 * bos/eos ids of config.json: the tokenizer's unless o overrides them). */
static int tokenizer(struct written *w, const char *dir, const char *src,
		     const struct titan_model_dims *d, const struct titan_hf_export_opts *o,
		     int64_t *bos, int64_t *eos)
{
	struct titan_tokenizer *tok;
	const char *base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
	char path[4096], *buf = NULL;
	size_t len = 0, n;
	FILE *in, *mem;
	char chunk[65536];
	int rc;

	if ((rc = titan_tokenizer_load(src, TITAN_ENC_AUTO, &tok)) < 0)
		return rc;
	*bos = o->bos_id >= 0 ? o->bos_id : titan_tokenizer_bos(tok);
	*eos = o->eos_id >= 0 ? o->eos_id : titan_tokenizer_eos(tok);
	n = titan_tokenizer_vocab_size(tok);
	if ((int64_t)n > d->vocab_size)
		rc = titan_error(TITAN_E_INVALID, "'%s' has %zu token ids, more than the model's "
				 "vocab_size %lld", src, n, (long long)d->vocab_size);
	else if (titan_tokenizer_format(tok) == TITAN_TOK_TIKTOKEN)
		rc = tokenizer_json(w, dir, src, tok, *bos, *eos, max_positions(d, o));
	titan_tokenizer_free(tok);
	if (rc < 0)
		return rc;
	if (!(in = fopen(src, "rb")))
		return titan_error(TITAN_E_IO, "cannot open '%s': %s", src, strerror(errno));
	if (!(mem = open_memstream(&buf, &len))) {
		fclose(in);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	while ((n = fread(chunk, 1, sizeof(chunk), in)) > 0)
		fwrite(chunk, 1, n, mem);
	rc = ferror(in) ? titan_error(TITAN_E_IO, "cannot read '%s'", src) : 0;
	fclose(in);
	if (fclose(mem) != 0 && rc == 0)
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
	snprintf(path, sizeof(path), "%s/%s", dir, base);
	if (rc == 0 && (rc = titan_write_file_atomic(path, buf, len)) == 0)
		rc = wrote(w, path);
	free(buf);
	return rc;
}

/* The HF tensors p is written as: Llama 4's w3 none (w1 writes the fused
 * gate_up_proj), else titan_hf_parts. */
static int64_t out_parts(const struct titan_model_dims *d, const struct titan_param *p)
{
	return d->family == TITAN_MODEL_NAME_LLAMA4 && p->role == TITAN_PARAM_MOE_W3 ? 0 :
	       titan_hf_parts(d, p);
}

/* Whether p is one of Llama 4's stacked experts (w1 with w3, or w2). */
static bool llama4_experts(const struct titan_model_dims *d, const struct titan_param *p)
{
	return d->family == TITAN_MODEL_NAME_LLAMA4 &&
	       (p->role == TITAN_PARAM_MOE_W1 || p->role == TITAN_PARAM_MOE_W2);
}

/* One shard: params [first, last) converted and written, a stacked
 * experts parameter as one tensor an expert (titan_hf_parts). */
static int write_shard(struct written *w, const char *path, const struct titan_param_table *t,
		       int first, int last, titan_hf_get_fn get, void *ctx,
		       const struct titan_hf_export_opts *o, float *f32, float *perm)
{
	const int esz = titan_ckpt_dtype_size(o->dtype);
	const struct titan_st_meta meta = {"format", "pt"}; /* transformers checks it */
	struct titan_st_write_tensor *ts = NULL;
	char (*names)[HF_NAME_MAX] = NULL;
	int64_t (*shapes)[3] = NULL;
	void **data = NULL;
	size_t n = 0, k = 0;
	int rc = 0;

	for (int i = first; i < last; i++)
		n += (size_t)out_parts(&t->dims, &t->params[i]);
	if (!(ts = calloc(n + 1, sizeof(*ts))) || !(names = calloc(n + 1, HF_NAME_MAX)) ||
	    !(shapes = calloc(n + 1, sizeof(*shapes))) || !(data = calloc(n + 1, sizeof(*data))))
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
	for (int i = first; i < last && rc == 0; i++) {
		const struct titan_param *p = &t->params[i];
		const int64_t parts = out_parts(&t->dims, p);
		int64_t numel = parts ? p->numel / parts : 0;
		const float *src = f32;

		if (!parts)
			continue;
		if ((rc = get(ctx, p, f32)) < 0)
			break;
		if (llama4_experts(&t->dims, p)) {
			/* w2 transposed; w1 and its w3 (the next parameter of the
			 * block, params.c's order) as one gate_up_proj */
			titan_hf_llama4_experts_(p, f32, perm, true);
			if (p->role == TITAN_PARAM_MOE_W1) {
				const struct titan_param *w3 = p;

				while (w3 < t->params + t->n - 1 && w3->role != TITAN_PARAM_MOE_W3)
					w3++;
				TITAN_ASSERT(w3->role == TITAN_PARAM_MOE_W3 && w3->layer == p->layer);
				if ((rc = get(ctx, w3, f32)) < 0)
					break;
				titan_hf_llama4_experts_(w3, f32, perm, true);
				numel *= 2;
			}
			src = perm;
		} else if (titan_hf_qk_heads(&t->dims, p) > 0) {
			titan_hf_permute_qk(f32, perm, titan_hf_qk_heads(&t->dims, p), p->shape[0],
					    p->shape[1], true);
			src = perm;
		}
		for (int64_t e = 0; e < parts && rc == 0; e++, k++) {
			int nd;

			titan_hf_part_shape(&t->dims, p, &nd, shapes[k]);
			if ((rc = titan_hf_part_name(&t->dims, p, e, names[k], HF_NAME_MAX)) < 0)
				break;
			if (!(data[k] = malloc((size_t)numel * (size_t)esz))) {
				rc = titan_error(TITAN_E_NOMEM, "out of memory converting %s", p->name);
				break;
			}
			titan_ckpt_cast(o->dtype, src + e * numel, data[k], (size_t)numel);
			ts[k] = (struct titan_st_write_tensor){names[k], st_dtype(o->dtype), nd,
							       shapes[k], data[k]};
		}
	}
	if (rc == 0 && (rc = titan_safetensors_write(path, ts, n, &meta, 1)) == 0)
		rc = wrote(w, path);
	for (size_t i = 0; data && i < n; i++)
		free(data[i]);
	free(data);
	free(shapes);
	free(names);
	free(ts);
	return rc;
}

/* A MoE exports as Qwen3MoeForCausalLM only: a Qwen3 with its routing
 * (softmax, the weights on the experts' outputs, no shared experts, no
 * route_scale).  TITAN_E_UNSUPPORTED naming the first MoE tensor and
 * the key that differs.  expert_bias is dropped (no HF counterpart). */
static int check_moe(const struct titan_param_table *t)
{
	const struct titan_moe_dims *m = &t->dims.moe;

	if (t->dims.family == TITAN_MODEL_NAME_LLAMA4) { /* Llama4TextMoe's routing only */
		const char *why = m->softmax ? "model.moe_score_func softmax" :
				  m->num_shared_experts != 1 ? "model.moe_num_shared_experts not 1" :
				  !m->score_before_experts ? "model.moe_score_before_experts false" :
				  m->route_norm ? "model.moe_route_norm true" :
				  m->route_scale != 1.0 ? "model.moe_route_scale not 1" :
				  m->n_dense_layers > 0 ? "model.n_dense_layers above 0" : NULL;

		return m->num_experts > 0 && why ?
		       titan_error(TITAN_E_UNSUPPORTED, "model.name llama4 with %s, which HF's "
				   "Llama4ForCausalLM (top-k sigmoid scores on the experts' inputs, "
				   "one shared expert) cannot hold", why) : 0;
	}
	if (titan_model_mla(&t->dims)) /* DeepseekV3ForCausalLM holds its routing */
		return m->score_before_experts && m->num_experts > 0 ?
		       titan_error(TITAN_E_UNSUPPORTED, "model.moe_score_before_experts true: "
				   "DeepSeek-V3 weighs the experts' outputs") : 0;
	const char *why = t->dims.family != TITAN_MODEL_NAME_QWEN3 || !t->dims.qk_norm ?
			  "model.name llama3 (HF has Qwen3 MoE only)" :
			  !m->softmax ? "model.moe_score_func sigmoid" :
			  m->num_shared_experts > 0 ? "model.moe_num_shared_experts above 0" :
			  m->score_before_experts ? "model.moe_score_before_experts true" :
			  m->route_scale != 1.0 ? "model.moe_route_scale not 1" : NULL;

	for (int i = 0; m->num_experts > 0 && why && i < t->n; i++)
		if (t->params[i].role >= TITAN_PARAM_MOE_W1)
			return titan_error(TITAN_E_UNSUPPORTED, "model/%s: a mixture-of-experts "
					   "checkpoint with %s, which HF's Qwen3MoeForCausalLM "
					   "cannot hold", t->params[i].name, why);
	return 0;
}

int titan_hf_export(const char *outdir, const struct titan_param_table *t, titan_hf_get_fn get,
		    void *ctx, const struct titan_hf_export_opts *o)
{
	struct titan_hf_export_opts def;
	struct written w = {0};
	const uint64_t max = o && o->max_shard_size ? o->max_shard_size : 5000000000ULL;
	int *shard_of = NULL, nshards = 0, esz;
	int64_t bos, eos, biggest = 0;
	uint64_t cur = 0, total = 0;
	float *f32 = NULL, *perm = NULL;
	json_t *j = NULL;
	char path[4096], name[64];
	int rc = 0;

	if (!o) {
		titan_hf_export_opts_default(&def);
		o = &def;
	}
	esz = titan_ckpt_dtype_size(o->dtype);
	if (t->opts.shard_degree > 1)
		return titan_error(TITAN_E_UNSUPPORTED, "HF export of a sharded parameter table");
	if ((rc = check_moe(t)) < 0)
		return rc;
	if ((rc = titan_ckpt_mkdirs_(outdir)) < 0)
		return rc;
	/* transformers' rule: a tensor opens a new shard when it would push
	 * the current one past the limit (a lone tensor may exceed it) */
	if (!(shard_of = calloc((size_t)t->n, sizeof(*shard_of))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	for (int i = 0; i < t->n; i++) {
		const struct titan_param *p = &t->params[i];
		uint64_t b = out_parts(&t->dims, p) ? (uint64_t)p->numel * (uint64_t)esz : 0;

		if (llama4_experts(&t->dims, p) && p->role == TITAN_PARAM_MOE_W1)
			b *= 2; /* with its w3 */

		if (nshards == 0 || (cur > 0 && cur + b > max)) {
			nshards++;
			cur = 0;
		}
		cur += b;
		total += b;
		shard_of[i] = nshards - 1;
		if (t->params[i].numel > biggest)
			biggest = t->params[i].numel;
	}
	if (!(f32 = malloc((size_t)biggest * sizeof(float))) ||
	    !(perm = malloc(2 * (size_t)biggest * sizeof(float)))) { /* Llama 4's gate_up_proj */
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto done;
	}
	/* the tokenizer first: a bad one fails before the big writes */
	bos = o->bos_id;
	eos = o->eos_id;
	if (o->tokenizer) {
		int64_t tb, te;

		if ((rc = tokenizer(&w, outdir, o->tokenizer, &t->dims, o, &tb, &te)) < 0)
			goto done;
		bos = tb;
		eos = te;
	}
	if (nshards > 1)
		j = json_object();
	for (int s = 0, first = 0; s < nshards && rc == 0; s++) {
		int last = first;

		while (last < t->n && shard_of[last] == s)
			last++;
		if (nshards == 1)
			snprintf(name, sizeof(name), "model.safetensors");
		else
			snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, nshards);
		snprintf(path, sizeof(path), "%s/%s", outdir, name);
		rc = write_shard(&w, path, t, first, last, get, ctx, o, f32, perm);
		for (int i = first; i < last && rc == 0 && j; i++) {
			char hf[HF_NAME_MAX];

			for (int64_t e = 0; e < out_parts(&t->dims, &t->params[i]); e++) {
				titan_hf_part_name(&t->dims, &t->params[i], e, hf, sizeof(hf));
				json_object_set_new(j, hf, json_string(name));
			}
		}
		first = last;
	}
	if (rc == 0 && j) {
		json_t *idx = json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)total,
					"weight_map", j);

		rc = idx ? write_json(&w, outdir, "model.safetensors.index.json", idx) :
			   titan_error(TITAN_E_NOMEM, "out of memory");
		json_decref(idx);
	}
	if (t->dims.vocab_size == 128256 && !o->tokenizer) { /* Llama 3's */
		if (bos < 0)
			bos = 128000;
		if (eos < 0)
			eos = 128001;
	}
	if (rc == 0) {
		json_t *c = config_json(&t->dims, o, bos, eos), *g = json_object();

		if (!c || !g)
			rc = titan_error(TITAN_E_NOMEM, "out of memory");
		if (rc == 0 && bos >= 0)
			json_object_set_new(g, "bos_token_id", json_integer(bos));
		if (rc == 0 && eos >= 0)
			json_object_set_new(g, "eos_token_id", json_integer(eos));
		if (rc == 0 && (rc = write_json(&w, outdir, "config.json", c)) == 0)
			rc = write_json(&w, outdir, "generation_config.json", g);
		json_decref(c);
		json_decref(g);
	}
done:
	json_decref(j);
	for (size_t i = 0; i < w.n; i++) {
		if (rc < 0)
			unlink(w.paths[i]);
		free(w.paths[i]);
	}
	free(w.paths);
	free(f32);
	free(perm);
	free(shard_of);
	return rc;
}
