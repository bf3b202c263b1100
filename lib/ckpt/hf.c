/*
 * hf.c — HuggingFace LlamaForCausalLM <-> torchtitan: parameter names, the
 * q/k row permutation between interleaved and rotate-half RoPE, reading
 * config.json, and importing an HF folder (model.safetensors or shards
 * with model.safetensors.index.json).  torchtitan counterpart:
 * models/llama3/model/state_dict_adapter.py (Llama3StateDictAdapter) and
 * scripts/checkpoint_conversion/convert_from_hf.py.  Export is hf_export.c.
 * tie_word_embeddings: a tied titan model; an lm_head.weight beside it must
 * equal the embedding (transformers' tie_weights), else it is refused.
 * Qwen3ForCausalLM (model_type qwen3, torchtitan's Qwen3StateDictAdapter):
 * the same names plus self_attn.q_norm / k_norm, head_dim of its own; its
 * q/k rows are rotate-half too, and titan's q_norm/k_norm [head_dim] take
 * the same permutation (one head).
 */
#include "ckpt_impl.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int titan_hf_param_name(const struct titan_param *p, char *buf, size_t n)
{
	static const char *const block[] = {
		[TITAN_PARAM_WQ] = "self_attn.q_proj", [TITAN_PARAM_WK] = "self_attn.k_proj",
		[TITAN_PARAM_WV] = "self_attn.v_proj", [TITAN_PARAM_WO] = "self_attn.o_proj",
		[TITAN_PARAM_W1] = "mlp.gate_proj",    [TITAN_PARAM_W2] = "mlp.down_proj",
		[TITAN_PARAM_W3] = "mlp.up_proj",
		[TITAN_PARAM_ATTENTION_NORM] = "input_layernorm",
		[TITAN_PARAM_FFN_NORM] = "post_attention_layernorm",
		[TITAN_PARAM_Q_NORM] = "self_attn.q_norm", [TITAN_PARAM_K_NORM] = "self_attn.k_norm",
		[TITAN_PARAM_MOE_GATE] = "mlp.gate",
		/* DeepseekV3ForCausalLM: MLA and the shared experts */
		[TITAN_PARAM_MLA_WQ_A] = "self_attn.q_a_proj",
		[TITAN_PARAM_MLA_Q_NORM] = "self_attn.q_a_layernorm",
		[TITAN_PARAM_MLA_WQ_B] = "self_attn.q_b_proj",
		[TITAN_PARAM_MLA_WKV_A] = "self_attn.kv_a_proj_with_mqa",
		[TITAN_PARAM_MLA_KV_NORM] = "self_attn.kv_a_layernorm",
		[TITAN_PARAM_MLA_WKV_B] = "self_attn.kv_b_proj",
		[TITAN_PARAM_MOE_SHARED_W1] = "mlp.shared_experts.gate_proj",
		[TITAN_PARAM_MOE_SHARED_W2] = "mlp.shared_experts.down_proj",
		[TITAN_PARAM_MOE_SHARED_W3] = "mlp.shared_experts.up_proj",
	};
	int k;

	switch (p->role) {
	case TITAN_PARAM_TOK_EMBEDDINGS: k = snprintf(buf, n, "model.embed_tokens.weight"); break;
	case TITAN_PARAM_NORM: k = snprintf(buf, n, "model.norm.weight"); break;
	case TITAN_PARAM_OUTPUT: k = snprintf(buf, n, "lm_head.weight"); break;
	case TITAN_PARAM_MOE_EXPERT_BIAS: /* DeepSeek-V3's; Qwen3 MoE has none */
		k = snprintf(buf, n, "model.layers.%d.mlp.gate.e_score_correction_bias", p->layer);
		break;
	default:
		if ((unsigned)p->role >= TITAN_PARAM_NROLES || !block[p->role])
			return titan_error(TITAN_E_INVALID, "%s: no HF name", p->name);
		k = snprintf(buf, n, "model.layers.%d.%s.weight", p->layer, block[p->role]);
	}
	if (k < 0 || (size_t)k >= n)
		return titan_error(TITAN_E_INVALID, "%s: HF name too long", p->name);
	return 0;
}

static bool is_expert(const struct titan_param *p)
{
	return p->role == TITAN_PARAM_MOE_W1 || p->role == TITAN_PARAM_MOE_W2 ||
	       p->role == TITAN_PARAM_MOE_W3;
}

static bool is_llama4(const struct titan_model_dims *d)
{
	return d->family == TITAN_MODEL_NAME_LLAMA4;
}

int64_t titan_hf_parts(const struct titan_model_dims *d, const struct titan_param *p)
{
	if (is_expert(p))
		return is_llama4(d) ? 1 : p->shape[0]; /* Llama 4's stacked, else one an expert */
	return p->role == TITAN_PARAM_MOE_EXPERT_BIAS && d->family != TITAN_MODEL_NAME_DEEPSEEK_V3 ?
	       0 : 1;
}

/* Llama4ForCausalLM's names: the feed-forward under feed_forward., the
 * stacked experts without .weight (nn.Parameter, not nn.Linear) */
static int llama4_name(const struct titan_param *p, char *buf, size_t n)
{
	static const char *const ff[] = {
		[TITAN_PARAM_W1] = "gate_proj.weight", [TITAN_PARAM_W2] = "down_proj.weight",
		[TITAN_PARAM_W3] = "up_proj.weight", [TITAN_PARAM_MOE_GATE] = "router.weight",
		[TITAN_PARAM_MOE_W1] = "experts.gate_up_proj",
		[TITAN_PARAM_MOE_W3] = "experts.gate_up_proj",
		[TITAN_PARAM_MOE_W2] = "experts.down_proj",
		[TITAN_PARAM_MOE_SHARED_W1] = "shared_expert.gate_proj.weight",
		[TITAN_PARAM_MOE_SHARED_W2] = "shared_expert.down_proj.weight",
		[TITAN_PARAM_MOE_SHARED_W3] = "shared_expert.up_proj.weight",
	};
	int k;

	if ((unsigned)p->role >= sizeof(ff) / sizeof(ff[0]) || !ff[p->role])
		return titan_hf_param_name(p, buf, n);
	k = snprintf(buf, n, "model.layers.%d.feed_forward.%s", p->layer, ff[p->role]);
	if (k < 0 || (size_t)k >= n)
		return titan_error(TITAN_E_INVALID, "%s: HF name too long", p->name);
	return 0;
}

int titan_hf_part_name(const struct titan_model_dims *d, const struct titan_param *p, int64_t e,
		       char *buf, size_t n)
{
	const char *proj = p->role == TITAN_PARAM_MOE_W1 ? "gate_proj" :
			   p->role == TITAN_PARAM_MOE_W3 ? "up_proj" : "down_proj";
	int k;

	if (is_llama4(d))
		return llama4_name(p, buf, n);
	if (!is_expert(p))
		return titan_hf_param_name(p, buf, n);
	k = snprintf(buf, n, "model.layers.%d.mlp.experts.%lld.%s.weight", p->layer, (long long)e,
		     proj);
	if (k < 0 || (size_t)k >= n)
		return titan_error(TITAN_E_INVALID, "%s: HF name too long", p->name);
	return 0;
}

void titan_hf_part_shape(const struct titan_model_dims *d, const struct titan_param *p, int *ndim,
			 int64_t shape[3])
{
	if (is_expert(p) && is_llama4(d)) { /* [E, C, 2F] gate_up, [E, F, C] down */
		*ndim = 3;
		shape[0] = p->fshape[0];
		shape[1] = p->fshape[2];
		shape[2] = p->role == TITAN_PARAM_MOE_W2 ? p->fshape[1] : 2 * p->fshape[1];
		return;
	}
	if (is_expert(p)) { /* [E, a·b] held, [a, b] each expert */
		*ndim = 2;
		shape[0] = p->fshape[1];
		shape[1] = p->fshape[2];
		return;
	}
	*ndim = p->ndim;
	shape[0] = p->shape[0];
	shape[1] = p->shape[1];
}

/* Llama 4's experts from HF's layout: gate_up_proj [E, C, 2F] to w1 (the
 * first F columns) or w3 (the last), transposed to [E, F, C];
 * down_proj [E, F, C] to w2 [E, C, F].  to_hf: the reverse, into the
 * fused tensor's half for w1 / w3. */
void titan_hf_llama4_experts_(const struct titan_param *p, const float *in, float *out, bool to_hf)
{
	const int64_t E = p->fshape[0], a = p->fshape[1], b = p->fshape[2];

	for (int64_t e = 0; e < E; e++)
		for (int64_t i = 0; i < a; i++)
			for (int64_t j = 0; j < b; j++) {
				/* titan [e][i][j]; HF down [e][j][i], gate_up [e][j][off + i] */
				const int64_t tt = (e * a + i) * b + j;
				const int64_t hf = p->role == TITAN_PARAM_MOE_W2 ?
						   (e * b + j) * a + i :
						   (e * b + j) * 2 * a +
						   (p->role == TITAN_PARAM_MOE_W3 ? a : 0) + i;

				if (to_hf)
					out[hf] = in[tt];
				else
					out[tt] = in[hf];
			}
}

void titan_hf_permute_qk(const float *in, float *out, int64_t n_heads, int64_t rows,
			 int64_t cols, bool to_hf)
{
	const int64_t hd = rows / n_heads, half = hd / 2;
	const size_t row_bytes = (size_t)cols * sizeof(float);

	TITAN_ASSERT(n_heads > 0 && rows % n_heads == 0 && hd % 2 == 0 && in != out);
	for (int64_t h = 0; h < n_heads; h++) {
		for (int64_t i = 0; i < 2; i++) {
			for (int64_t j = 0; j < half; j++) {
				int64_t hf = h * hd + i * half + j, tt = h * hd + 2 * j + i;

				if (to_hf)
					memcpy(out + hf * cols, in + tt * cols, row_bytes);
				else
					memcpy(out + tt * cols, in + hf * cols, row_bytes);
			}
		}
	}
}

int64_t titan_hf_qk_heads(const struct titan_model_dims *d, const struct titan_param *p)
{
	if (titan_model_mla(d) || is_llama4(d)) /* their HF weights keep the adjacent pairs */
		return 0;
	switch (p->role) {
	case TITAN_PARAM_WQ: return d->n_heads;
	case TITAN_PARAM_WK: return d->n_kv_heads;
	case TITAN_PARAM_Q_NORM: case TITAN_PARAM_K_NORM: return 1; /* [head_dim]: one head */
	default: return 0;
	}
}

/* ------------------------------------------------------------ config.json */

static int cfg_int(const char *path, json_t *root, const char *key, bool required, int64_t def,
		   int64_t *out)
{
	json_t *v = json_object_get(root, key);

	if (!v || json_is_null(v)) {
		if (required)
			return titan_error(TITAN_E_FORMAT, "'%s': '%s' is missing", path, key);
		*out = def;
		return 0;
	}
	if (!json_is_integer(v))
		return titan_error(TITAN_E_FORMAT, "'%s': '%s' is not an integer", path, key);
	*out = json_integer_value(v);
	return 0;
}

static int cfg_real(const char *path, json_t *root, const char *key, bool required, double def,
		    double *out)
{
	json_t *v = json_object_get(root, key);

	if (!v || json_is_null(v)) {
		if (required)
			return titan_error(TITAN_E_FORMAT, "'%s': '%s' is missing", path, key);
		*out = def;
		return 0;
	}
	if (!json_is_number(v))
		return titan_error(TITAN_E_FORMAT, "'%s': '%s' is not a number", path, key);
	*out = json_number_value(v);
	return 0;
}

/* An id or the first of a list of ids (eos of instruct models), else -1. */
static int64_t token_id(json_t *v)
{
	if (json_is_array(v) && json_array_size(v) > 0)
		v = json_array_get(v, 0);
	return json_is_integer(v) ? json_integer_value(v) : -1;
}

/* Qwen3MoeConfig's MoE: softmax routing (norm_topk_prob: route_norm), the
 * weights on the experts' outputs, no shared experts; block i sparse when
 * not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0, which
 * titan says with n_dense_layers when mlp_only_layers is 0 .. k-1.
 * expert_bias has no HF counterpart: balancing on (titan's default
 * coefficient), the bias from zero. */
static int read_moe(const char *path, json_t *root, struct titan_model_dims *d)
{
	struct titan_moe_dims *m = &d->moe;
	json_t *v = json_object_get(root, "mlp_only_layers");
	int rc;

	if ((rc = cfg_int(path, root, "num_experts", true, 0, &m->num_experts)) < 0 ||
	    (rc = cfg_int(path, root, "num_experts_per_tok", true, 0, &m->top_k)) < 0 ||
	    (rc = cfg_int(path, root, "moe_intermediate_size", true, 0, &m->inter_dim)) < 0 ||
	    (rc = cfg_int(path, root, "decoder_sparse_step", false, 1, &m->interleave_step)) < 0)
		return rc;
	if (m->num_experts < 1 || m->interleave_step < 1)
		return titan_error(TITAN_E_FORMAT, "'%s': num_experts %lld, decoder_sparse_step "
				   "%lld: must be at least 1", path, (long long)m->num_experts,
				   (long long)m->interleave_step);
	if (v && !json_is_null(v) && !json_is_array(v))
		return titan_error(TITAN_E_FORMAT, "'%s': mlp_only_layers is not a list", path);
	for (size_t i = 0; v && json_is_array(v) && i < json_array_size(v); i++)
		if (!json_is_integer(json_array_get(v, i)) ||
		    json_integer_value(json_array_get(v, i)) != (json_int_t)i)
			return titan_error(TITAN_E_UNSUPPORTED, "'%s': mlp_only_layers: titan keeps "
					   "the first n blocks dense (n_dense_layers) only, a list "
					   "0, 1, .. n-1", path);
	m->n_dense_layers = v && json_is_array(v) ? (int64_t)json_array_size(v) : 0;
	if ((v = json_object_get(root, "norm_topk_prob")) && !json_is_boolean(v))
		return titan_error(TITAN_E_FORMAT, "'%s': norm_topk_prob is not a boolean", path);
	m->route_norm = json_is_true(v);
	if ((v = json_object_get(root, "shared_expert_intermediate_size")) && !json_is_null(v) &&
	    !(json_is_integer(v) && json_integer_value(v) == 0))
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': shared_expert_intermediate_size: "
				   "Qwen3 MoE has no shared experts (Qwen2 MoE's are not converted)",
				   path);
	m->softmax = true;
	m->route_scale = 1.0;
	m->load_balance_coeff = 1e-3;
	return 0;
}

/* DeepseekV3Config: MLA (q_lora_rank null or 0: a plain q_proj), YaRN
 * rope_scaling (titan's mscale is HF's mscale_all_dim; mscale, which
 * scales cos/sin by mscale/mscale_all dim's ratio, must equal it), the
 * first first_k_dense_replace blocks dense, n_routed_experts with
 * n_shared_experts, scoring_func (sigmoid when absent, as HF's model has
 * it), routed_scaling_factor, norm_topk_prob; group-limited routing
 * (n_group > 1 with topk_group < n_group) is not titan's. */
static int read_deepseek(const char *path, json_t *root, struct titan_model_dims *d)
{
	struct titan_mla_dims *a = &d->mla;
	struct titan_moe_dims *m = &d->moe;
	json_t *v, *rs;
	int64_t ng = 1, tg = 1;
	double ms = 0, msa = 0;
	int rc;

	d->family = TITAN_MODEL_NAME_DEEPSEEK_V3;
	if ((rc = cfg_int(path, root, "q_lora_rank", false, 0, &a->q_lora_rank)) < 0 ||
	    (rc = cfg_int(path, root, "kv_lora_rank", true, 0, &a->kv_lora_rank)) < 0 ||
	    (rc = cfg_int(path, root, "qk_nope_head_dim", true, 0, &a->qk_nope_head_dim)) < 0 ||
	    (rc = cfg_int(path, root, "qk_rope_head_dim", true, 0, &a->qk_rope_head_dim)) < 0 ||
	    (rc = cfg_int(path, root, "v_head_dim", true, 0, &a->v_head_dim)) < 0 ||
	    (rc = cfg_int(path, root, "n_routed_experts", false, 0, &m->num_experts)) < 0 ||
	    (rc = cfg_int(path, root, "n_shared_experts", false, 0, &m->num_shared_experts)) < 0 ||
	    (rc = cfg_int(path, root, "num_experts_per_tok", false, 1, &m->top_k)) < 0 ||
	    (rc = cfg_int(path, root, "moe_intermediate_size", false, 0, &m->inter_dim)) < 0 ||
	    (rc = cfg_int(path, root, "first_k_dense_replace", false, 0, &m->n_dense_layers)) < 0 ||
	    (rc = cfg_int(path, root, "n_group", false, 1, &ng)) < 0 ||
	    (rc = cfg_int(path, root, "topk_group", false, 1, &tg)) < 0 ||
	    (rc = cfg_real(path, root, "routed_scaling_factor", false, 1.0, &m->route_scale)) < 0)
		return rc;
	if (a->kv_lora_rank <= 0 || a->q_lora_rank < 0)
		return titan_error(TITAN_E_FORMAT, "'%s': kv_lora_rank %lld, q_lora_rank %lld: "
				   "kv_lora_rank must be positive", path,
				   (long long)a->kv_lora_rank, (long long)a->q_lora_rank);
	if (ng > 1 && tg < ng)
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': n_group %lld, topk_group %lld: "
				   "group-limited routing is not titan's", path, (long long)ng,
				   (long long)tg);
	if ((v = json_object_get(root, "norm_topk_prob")) && !json_is_boolean(v))
		return titan_error(TITAN_E_FORMAT, "'%s': norm_topk_prob is not a boolean", path);
	m->route_norm = json_is_true(v);
	v = json_object_get(root, "scoring_func");
	if (v && !(json_is_string(v) && (!strcmp(json_string_value(v), "sigmoid") ||
					 !strcmp(json_string_value(v), "softmax"))))
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': scoring_func: titan routes by "
				   "sigmoid or softmax", path);
	m->softmax = v && !strcmp(json_string_value(v), "softmax");
	m->interleave_step = 1;
	m->score_before_experts = false;
	m->load_balance_coeff = 1e-3;
	if (m->num_experts > 0 && m->n_dense_layers >= d->n_layers)
		m->num_experts = 0; /* every block dense */
	d->n_kv_heads = d->n_heads;
	d->head_dim = a->qk_nope_head_dim + a->qk_rope_head_dim;
	d->rope_scaling = false;
	d->rope_scaling_factor = 8.0;
	d->rope_low_freq_factor = 1.0;
	d->rope_high_freq_factor = 4.0;
	d->rope_original_max_position = 8192;
	a->rope_factor = 1.0;
	a->beta_fast = 32.0;
	a->beta_slow = 1.0;
	a->original_seq_len = 4096;
	rs = json_object_get(root, "rope_scaling");
	if (rs && !json_is_null(rs)) {
		json_t *ty = json_object_get(rs, "rope_type");

		if (!ty)
			ty = json_object_get(rs, "type");
		if (!json_is_object(rs) || !json_is_string(ty) || strcmp(json_string_value(ty), "yarn"))
			return titan_error(TITAN_E_UNSUPPORTED, "'%s': rope_scaling: titan's "
					   "DeepSeek-V3 has YaRN (rope_type \"yarn\") only", path);
		if ((rc = cfg_real(path, rs, "factor", true, 0, &a->rope_factor)) < 0 ||
		    (rc = cfg_real(path, rs, "beta_fast", false, 32.0, &a->beta_fast)) < 0 ||
		    (rc = cfg_real(path, rs, "beta_slow", false, 1.0, &a->beta_slow)) < 0 ||
		    (rc = cfg_real(path, rs, "mscale", false, 1.0, &ms)) < 0 ||
		    (rc = cfg_real(path, rs, "mscale_all_dim", false, 0.0, &msa)) < 0 ||
		    (rc = cfg_int(path, rs, "original_max_position_embeddings", true, 0,
				  &a->original_seq_len)) < 0)
			return titan_error_prefix("rope_scaling");
		if (msa != 0 && ms != msa)
			return titan_error(TITAN_E_UNSUPPORTED, "'%s': rope_scaling: mscale %g is "
					   "not mscale_all_dim %g (titan's YaRN leaves cos/sin "
					   "unscaled)", path, ms, msa);
	}
	a->mscale = msa;
	return 0;
}

/* 0/1 entry i of Llama4TextConfig's no_rope_layers (1: RoPE used), -1
 * when it is neither. */
static int rope_entry(json_t *list, size_t i)
{
	json_t *v = json_array_get(list, i);

	if (json_is_boolean(v))
		return json_is_true(v);
	return json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1) ?
	       (int)json_integer_value(v) : -1;
}

/* Llama4TextConfig (model_type llama4_text, or a llama4 config's
 * text_config): intermediate_size is one expert's, intermediate_size_mlp
 * the dense blocks'; MoE blocks moe_layers (by default every
 * interleave_moe_layer_step-th, titan's interleave_step), top-k sigmoid
 * routing on the experts' inputs with one shared expert; NoPE blocks where
 * no_rope_layers has 0 (by default (i + 1) % no_rope_layer_interval == 0),
 * which titan has as every_n_layers_nope: blocks 0, n, 2n, .. only. */
static int read_llama4(const char *path, json_t *root, struct titan_model_dims *d)
{
	struct titan_moe_dims *m = &d->moe;
	const int64_t n = d->n_layers;
	int64_t step, interval, chunk, floor_scale;
	json_t *v;
	int rc;

	d->family = TITAN_MODEL_NAME_LLAMA4;
	m->inter_dim = d->ffn_hidden;
	if ((rc = cfg_int(path, root, "intermediate_size_mlp", false, 16384, &d->ffn_hidden)) < 0 ||
	    (rc = cfg_int(path, root, "num_local_experts", false, 16, &m->num_experts)) < 0 ||
	    (rc = cfg_int(path, root, "num_experts_per_tok", false, 1, &m->top_k)) < 0 ||
	    (rc = cfg_int(path, root, "interleave_moe_layer_step", false, 1, &step)) < 0 ||
	    (rc = cfg_int(path, root, "no_rope_layer_interval", false, 4, &interval)) < 0 ||
	    (rc = cfg_int(path, root, "attention_chunk_size", false, 8192, &chunk)) < 0 ||
	    (rc = cfg_int(path, root, "floor_scale", false, 8192, &floor_scale)) < 0)
		return rc;
	if (step < 1 || interval < 1 || chunk < 1 || n < 1)
		return titan_error(TITAN_E_FORMAT, "'%s': interleave_moe_layer_step %lld, "
				   "no_rope_layer_interval %lld, attention_chunk_size %lld, "
				   "num_hidden_layers %lld: must be at least 1", path, (long long)step,
				   (long long)interval, (long long)chunk, (long long)n);
	/* HF's default use_qk_norm is true (Scout's weightless L2 norm) */
	if (!(v = json_object_get(root, "use_qk_norm")) || !json_is_false(v))
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': use_qk_norm is not false: titan's "
				   "Llama 4 (torchtitan's) has no QK L2 norm", path);
	v = json_object_get(root, "moe_layers");
	if (v && !json_is_null(v)) {
		size_t k = 0;

		if (!json_is_array(v))
			return titan_error(TITAN_E_FORMAT, "'%s': moe_layers is not a list", path);
		for (int64_t i = step - 1; i < n && k <= json_array_size(v); i += step, k++)
			if (k == json_array_size(v) || !json_is_integer(json_array_get(v, k)) ||
			    json_integer_value(json_array_get(v, k)) != i)
				break;
		if (json_array_size(v) == 0)
			m->num_experts = 0; /* every block dense */
		else if (k != json_array_size(v) || (step - 1 + (int64_t)k * step) < n)
			return titan_error(TITAN_E_UNSUPPORTED, "'%s': moe_layers: titan's MoE "
					   "blocks are every interleave_moe_layer_step-th (%lld, "
					   "%lld, ..), or none", path, (long long)(step - 1),
					   (long long)(2 * step - 1));
	}
	d->nope_every = 0;
	v = json_object_get(root, "no_rope_layers");
	if (v && !json_is_null(v) && !json_is_array(v))
		return titan_error(TITAN_E_FORMAT, "'%s': no_rope_layers is not a list", path);
	if (json_is_array(v) && json_array_size(v) > 0) {
		int64_t every = 0;

		if ((int64_t)json_array_size(v) != n)
			return titan_error(TITAN_E_FORMAT, "'%s': no_rope_layers has %zu entries, "
					   "num_hidden_layers is %lld", path, json_array_size(v),
					   (long long)n);
		for (size_t i = 0; i < json_array_size(v); i++)
			if (rope_entry(v, i) < 0)
				return titan_error(TITAN_E_FORMAT, "'%s': no_rope_layers[%zu] is not 0 "
						   "or 1", path, i);
		for (size_t i = 1; i < json_array_size(v) && !every; i++)
			if (rope_entry(v, i) == 0)
				every = (int64_t)i;
		if (rope_entry(v, 0) == 0 && !every)
			every = n > 1 ? n : 2; /* block 0 alone */
		for (int64_t i = 0; i < n; i++)
			if ((rope_entry(v, (size_t)i) == 0) != (every > 0 && i % every == 0))
				return titan_error(TITAN_E_UNSUPPORTED, "'%s': no_rope_layers: titan's "
						   "NoPE blocks (model.every_n_layers_nope n) are "
						   "0, n, 2n, ..; block %lld is not", path, (long long)i);
		d->nope_every = every;
	} else if (interval <= n) {
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': no_rope_layer_interval %lld: HF's "
				   "NoPE blocks %lld, %lld, .. are not titan's 0, n, 2n, .. "
				   "(model.every_n_layers_nope); give no_rope_layers", path,
				   (long long)interval, (long long)(interval - 1),
				   (long long)(2 * interval - 1));
	}
	/* HF scales the NoPE blocks' queries from position floor_scale - 1 on;
	 * titan attends within attention_chunk_size tokens and scales none */
	v = json_object_get(root, "attn_temperature_tuning");
	if (d->nope_every > 0 && (!v || json_is_true(v)) && floor_scale <= chunk)
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': attn_temperature_tuning with "
				   "floor_scale %lld within attention_chunk_size %lld: titan's NoPE "
				   "blocks do not scale queries by position; set it to false", path,
				   (long long)floor_scale, (long long)chunk);
	d->attn_chunk = chunk;
	if (m->num_experts > 0) {
		m->num_shared_experts = 1;
		m->interleave_step = step;
		m->n_dense_layers = 0;
		m->softmax = false;
		m->route_norm = false;
		m->score_before_experts = true; /* routed_in = hidden_states · router_scores */
		m->route_scale = 1.0;
		m->load_balance_coeff = 1e-3;
		if (m->top_k < 1 || m->top_k > m->num_experts)
			return titan_error(TITAN_E_FORMAT, "'%s': num_experts_per_tok %lld with "
					   "num_local_experts %lld", path, (long long)m->top_k,
					   (long long)m->num_experts);
	} else {
		memset(m, 0, sizeof(*m));
	}
	return 0;
}

static int read_config(const char *path, json_t *root, struct titan_model_dims *d)
{
	json_t *v, *rs;
	int64_t tied = 0, hd = -1;
	int rc;

	json_t *outer = root;
	const char *mt = (v = json_object_get(root, "model_type")) && json_is_string(v) ?
			 json_string_value(v) : "";
	/* Llama4ForConditionalGeneration: the text model's keys in text_config */
	const bool l4mm = !strcmp(mt, "llama4");

	if (l4mm && !json_is_object(root = json_object_get(outer, "text_config")))
		return titan_error(TITAN_E_FORMAT, "'%s': model_type \"llama4\" without a "
				   "text_config object", path);
	const bool llama4 = l4mm || !strcmp(mt, "llama4_text");
	const bool moe = !strcmp(mt, "qwen3_moe");
	const bool qwen3 = moe || !strcmp(mt, "qwen3");
	const bool dsv3 = !strcmp(mt, "deepseek_v3");
	const char *arch = moe ? "Qwen3MoeForCausalLM" : qwen3 ? "Qwen3ForCausalLM" :
			   dsv3 ? "DeepseekV3ForCausalLM" :
			   l4mm ? "Llama4ForConditionalGeneration" :
			   llama4 ? "Llama4ForCausalLM" : "LlamaForCausalLM";

	if ((v = json_object_get(outer, "architectures"))) {
		bool llama = false;

		for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++)
			llama |= json_is_string(json_array_get(v, i)) &&
				 !strcmp(json_string_value(json_array_get(v, i)), arch);
		if (!llama)
			return titan_error(TITAN_E_UNSUPPORTED, "'%s': architectures is not "
					   "[\"%s\"]: titan converts Llama, Qwen3, Qwen3 MoE, "
					   "DeepSeek-V3 and Llama 4 models only", path, arch);
	}
	if ((v = json_object_get(root, "model_type")) &&
	    !(json_is_string(v) && (!strcmp(json_string_value(v), "llama") || qwen3 || dsv3 ||
				    llama4)))
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': model_type is not \"llama\", "
				   "\"qwen3\", \"qwen3_moe\", \"deepseek_v3\", \"llama4\" or "
				   "\"llama4_text\"", path);
	if (qwen3 && json_is_true(json_object_get(root, "use_sliding_window")))
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': use_sliding_window: titan's Qwen3 "
				   "attends to the whole causal context", path);
	if ((v = json_object_get(root, "hidden_act")) &&
	    !(json_is_string(v) && !strcmp(json_string_value(v), "silu")))
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': hidden_act: titan's Llama uses silu", path);
	if (json_is_true(json_object_get(root, "attention_bias")) ||
	    json_is_true(json_object_get(root, "mlp_bias")))
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': attention_bias / mlp_bias: titan's "
				   "Llama has no biases", path);
	memset(d, 0, sizeof(*d));
	if ((rc = cfg_int(path, root, "hidden_size", true, 0, &d->dim)) < 0 ||
	    (rc = cfg_int(path, root, "intermediate_size", true, 0, &d->ffn_hidden)) < 0 ||
	    (rc = cfg_int(path, root, "num_hidden_layers", true, 0, &d->n_layers)) < 0 ||
	    (rc = cfg_int(path, root, "num_attention_heads", true, 0, &d->n_heads)) < 0 ||
	    (rc = cfg_int(path, root, "num_key_value_heads", false, d->n_heads, &d->n_kv_heads)) < 0 ||
	    (rc = cfg_int(path, root, "vocab_size", true, 0, &d->vocab_size)) < 0 ||
	    (rc = cfg_int(path, root, "head_dim", false, -1, &hd)) < 0 ||
	    (rc = cfg_real(path, root, "rms_norm_eps", false, 1e-6, &d->norm_eps)) < 0 ||
	    (rc = cfg_real(path, root, "rope_theta", false, 10000.0, &d->rope_theta)) < 0)
		return rc;
	if ((v = json_object_get(root, "tie_word_embeddings")) && !json_is_boolean(v))
		return titan_error(TITAN_E_FORMAT, "'%s': tie_word_embeddings is not a boolean", path);
	tied = json_is_true(v);
	d->tied = tied;
	if (dsv3) {
		if ((rc = read_deepseek(path, root, d)) < 0)
			return rc;
		goto check;
	}
	if (qwen3) { /* head_dim its own (dim / heads when absent), QK-norm */
		d->family = TITAN_MODEL_NAME_QWEN3;
		d->qk_norm = true;
		d->head_dim = hd > 0 ? hd : d->n_heads > 0 ? d->dim / d->n_heads : 0;
	}
	if (moe && (rc = read_moe(path, root, d)) < 0)
		return rc;
	if (llama4 && (rc = read_llama4(path, root, d)) < 0)
		return rc;
	if (qwen3 && (d->dim <= 0 || d->n_layers <= 0 || d->n_heads <= 0 || d->n_kv_heads <= 0 ||
		      d->vocab_size <= 0 || d->ffn_hidden <= 0 || d->head_dim <= 0 ||
		      d->head_dim % 2 || d->n_heads % d->n_kv_heads))
		return titan_error(TITAN_E_FORMAT, "'%s': bad dims (hidden_size %lld, heads %lld, "
				   "kv heads %lld, head_dim %lld): head_dim must be even and kv "
				   "heads divide heads", path, (long long)d->dim,
				   (long long)d->n_heads, (long long)d->n_kv_heads,
				   (long long)d->head_dim);
	if (!qwen3 && (d->dim <= 0 || d->n_layers <= 0 || d->n_heads <= 0 || d->n_kv_heads <= 0 ||
	    d->vocab_size <= 0 || d->ffn_hidden <= 0 || d->dim % d->n_heads ||
	    d->n_heads % d->n_kv_heads || (d->dim / d->n_heads) % 2))
		return titan_error(TITAN_E_FORMAT, "'%s': bad dims (hidden_size %lld, heads %lld, "
				   "kv heads %lld): heads must divide hidden_size into even head "
				   "dims and kv heads divide heads", path, (long long)d->dim,
				   (long long)d->n_heads, (long long)d->n_kv_heads);
	if (!qwen3)
		d->head_dim = d->dim / d->n_heads;
	if (!qwen3 && hd >= 0 && hd != d->head_dim)
		return titan_error(TITAN_E_UNSUPPORTED, "'%s': head_dim %lld is not hidden_size / "
				   "num_attention_heads (%lld), which titan's Llama needs", path,
				   (long long)hd, (long long)d->head_dim);
	rs = json_object_get(root, "rope_scaling");
	d->rope_scaling = rs && !json_is_null(rs);
	d->rope_scaling_factor = 8.0;
	d->rope_low_freq_factor = 1.0;
	d->rope_high_freq_factor = 4.0;
	d->rope_original_max_position = 8192;
	if (d->rope_scaling) {
		json_t *ty = json_object_get(rs, "rope_type");

		if (!ty)
			ty = json_object_get(rs, "type");
		if (!json_is_object(rs) || !json_is_string(ty) || strcmp(json_string_value(ty), "llama3"))
			return titan_error(TITAN_E_UNSUPPORTED, "'%s': rope_scaling: titan has Llama "
					   "3.1's (rope_type \"llama3\") only", path);
		if ((rc = cfg_real(path, rs, "factor", true, 0, &d->rope_scaling_factor)) < 0 ||
		    (rc = cfg_real(path, rs, "low_freq_factor", true, 0, &d->rope_low_freq_factor)) < 0 ||
		    (rc = cfg_real(path, rs, "high_freq_factor", true, 0, &d->rope_high_freq_factor)) < 0 ||
		    (rc = cfg_int(path, rs, "original_max_position_embeddings", true, 0,
				  &d->rope_original_max_position)) < 0)
			return titan_error_prefix("rope_scaling");
	} else if (llama4) { /* torchtitan's llama4 RoPEScalingArgs, unused */
		d->rope_scaling_factor = 16.0;
		d->rope_high_freq_factor = 1.0;
	}
	/* rms_norm_eps 0 or -1, an infinite rope_theta, sizes no table can
	 * hold: the same checks as a checkpoint's dims, in config.json's words */
check:
	{
		char src[4200];

		snprintf(src, sizeof(src), "'%s'", path);
		if ((rc = titan_ckpt_dims_check(src, d, true)) < 0)
			return rc;
	}
	/* multiple_of / multiplier: the flavor's when the dims are a flavor's,
	 * else the ones titan_ckpt_config_for_dims writes */
	titan_ckpt_match_flavor_(d, d->flavor);
	if (strcmp(d->flavor, "custom") != 0) {
		struct titan_model_dims f;

		titan_model_family_flavor(d->family, d->flavor, &f);
		d->multiple_of = f.multiple_of;
		d->ffn_dim_multiplier = f.ffn_dim_multiplier;
	} else {
		/* int(2·4·dim/3) in double: the file's dim can be any int64 */
		double h = trunc(2.0 * (4.0 * (double)d->dim) / 3.0);

		d->multiple_of = d->ffn_hidden;
		d->ffn_dim_multiplier = h > (double)d->ffn_hidden ? (double)d->ffn_hidden / h : NAN;
	}
	return 0;
}

int titan_hf_read_config(const char *path, struct titan_model_dims *dims, int64_t *bos,
			 int64_t *eos)
{
	if (titan_check_regular(path) < 0) /* a FIFO would block jansson (issue 21) */
		return TITAN_E_IO;
	json_error_t je;
	json_t *root = json_load_file(path, 0, &je);
	int rc;

	if (!root) {
		struct stat st;

		if (stat(path, &st) != 0)
			return titan_error(TITAN_E_IO, "cannot open '%s': %s", path, strerror(errno));
		return titan_error(TITAN_E_FORMAT, "'%s':%d:%d: %s", path, je.line, je.column, je.text);
	}
	if (!json_is_object(root))
		rc = titan_error(TITAN_E_FORMAT, "'%s': not a JSON object", path);
	else
		rc = read_config(path, root, dims);
	if (bos)
		*bos = token_id(json_object_get(root, "bos_token_id"));
	if (eos)
		*eos = token_id(json_object_get(root, "eos_token_id"));
	json_decref(root);
	return rc;
}

/* ------------------------------------------------------------------ import */

struct titan_hf_model {
	char *dir;
	struct titan_param_table table;
	size_t nfiles;
	struct titan_safetensors **files;
	const struct titan_st_tensor **src;  /* per HF tensor (titan_hf_parts a parameter) */
	size_t *src_file;                    /* per HF tensor: index into files */
	int64_t *slot;                       /* per parameter: its first HF tensor */
	int64_t nsrc;
};

void titan_hf_close(struct titan_hf_model *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nfiles; i++)
		titan_safetensors_close(m->files[i]);
	free(m->files);
	free(m->src);
	free(m->src_file);
	free(m->slot);
	titan_param_table_release(&m->table);
	free(m->dir);
	free(m);
}

const struct titan_param_table *titan_hf_table(const struct titan_hf_model *m)
{
	return &m->table;
}

static int open_file(struct titan_hf_model *m, const char *name, size_t *idx)
{
	char path[4096];
	struct titan_safetensors *f;
	void *p;

	if (strchr(name, '/') || !strcmp(name, "..") || !name[0])
		return titan_error(TITAN_E_FORMAT, "'%s/model.safetensors.index.json': bad file "
				   "name '%s'", m->dir, name);
	snprintf(path, sizeof(path), "%s/%s", m->dir, name);
	for (size_t i = 0; i < m->nfiles; i++) {
		if (!strcmp(m->files[i]->path, path)) {
			*idx = i;
			return 0;
		}
	}
	if (!(f = titan_safetensors_open(path)))
		return titan_error_last()->code;
	if (!(p = realloc(m->files, (m->nfiles + 1) * sizeof(*m->files)))) {
		titan_safetensors_close(f);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	m->files = p;
	m->files[m->nfiles] = f;
	*idx = m->nfiles++;
	return 0;
}

/* Open the files and find each parameter's tensor. */
static int locate(struct titan_hf_model *m)
{
	char path[4096], name[176]; /* room for the language_model. prefix */
	json_t *idx = NULL, *map = NULL;
	json_error_t je;
	struct stat st;
	int rc = 0;

	snprintf(path, sizeof(path), "%s/model.safetensors.index.json", m->dir);
	if (stat(path, &st) == 0) {
		if ((rc = titan_check_regular(path)) < 0) /* a FIFO (issue 21) */
			return rc;
		if (!(idx = json_load_file(path, 0, &je)))
			return titan_error(TITAN_E_FORMAT, "'%s':%d:%d: %s", path, je.line, je.column,
					   je.text);
		if (!json_is_object(map = json_object_get(idx, "weight_map"))) {
			json_decref(idx);
			return titan_error(TITAN_E_FORMAT, "'%s': no \"weight_map\" object", path);
		}
	} else {
		size_t k;

		snprintf(path, sizeof(path), "%s/model.safetensors", m->dir);
		if (stat(path, &st) != 0)
			return titan_error(TITAN_E_IO, "'%s' has no model.safetensors nor "
					   "model.safetensors.index.json", m->dir);
		if ((rc = open_file(m, "model.safetensors", &k)) < 0)
			return rc;
	}
	for (int64_t i = 0, e = 0; i < m->table.n && rc == 0; e++) {
		const struct titan_param *p = &m->table.params[i];
		const struct titan_st_tensor *t;
		const int64_t sl = m->slot[i] + e;
		int64_t shape[3];
		int nd;
		size_t k = 0;

		if (e >= titan_hf_parts(&m->table.dims, p)) { /* the parameter's last part: the next one */
			i++;
			e = -1;
			continue;
		}
		titan_hf_part_shape(&m->table.dims, p, &nd, shape);
		if ((rc = titan_hf_part_name(&m->table.dims, p, e, name, sizeof(name) - 16)) < 0)
			break;
		/* Llama4ForConditionalGeneration's text model: language_model. */
		if (m->table.dims.family == TITAN_MODEL_NAME_LLAMA4 &&
		    !(map ? json_is_string(json_object_get(map, name)) :
			    titan_safetensors_find(m->files[0], name) != NULL)) {
			char pre[sizeof(name)];

			memcpy(pre, "language_model.", 15); /* name has room: sizeof - 16 */
			memcpy(pre + 15, name, strlen(name) + 1);
			if (map ? json_is_string(json_object_get(map, pre)) :
				  titan_safetensors_find(m->files[0], pre) != NULL)
				memcpy(name, pre, sizeof(name));
		}
		if (map) {
			json_t *fn = json_object_get(map, name);

			if (!json_is_string(fn)) {
				rc = titan_error(TITAN_E_INVALID, "'%s': tensor '%s' is not in the "
						 "weight_map", path, name);
				break;
			}
			if ((rc = open_file(m, json_string_value(fn), &k)) < 0)
				break;
		}
		if (!(t = titan_safetensors_find(m->files[k], name))) {
			rc = titan_error(TITAN_E_INVALID, "'%s': tensor '%s' is missing",
					 m->files[k]->path, name);
			break;
		}
		if (t->ndim != nd || t->shape[0] != shape[0] || (nd >= 2 && t->shape[1] != shape[1]) ||
		    (nd == 3 && t->shape[2] != shape[2])) {
			rc = titan_error(TITAN_E_INVALID, "'%s': tensor '%s' has shape [%lld%s%lld%s], "
					 "config.json makes it [%lld, %lld%s]", m->files[k]->path, name,
					 (long long)t->shape[0], t->ndim > 1 ? ", " : "",
					 (long long)(t->ndim > 1 ? t->shape[1] : 1),
					 t->ndim > 2 ? ", .." : "", (long long)shape[0],
					 (long long)shape[1], nd > 2 ? ", .." : "");
			break;
		}
		if (t->dtype != TITAN_ST_F32 && t->dtype != TITAN_ST_BF16 &&
		    t->dtype != TITAN_ST_F16 && t->dtype != TITAN_ST_F64) {
			rc = titan_error(TITAN_E_UNSUPPORTED, "'%s': tensor '%s' has dtype %s (titan "
					 "reads F32, BF16, F16, F64)", m->files[k]->path, name,
					 titan_st_dtype_name(t->dtype));
			break;
		}
		m->src[sl] = t;
		m->src_file[sl] = k;
	}
	/* with an index, also open files it names for parameters titan lacks,
	 * so that the unknown-tensor check below sees them */
	if (rc == 0 && map) {
		const char *key;
		json_t *fn;

		json_object_foreach(map, key, fn) {
			size_t k;

			if (!json_is_string(fn)) {
				rc = titan_error(TITAN_E_FORMAT, "'%s': weight_map['%s'] is not a file "
						 "name", path, key);
				break;
			}
			if ((rc = open_file(m, json_string_value(fn), &k)) < 0)
				break;
		}
	}
	json_decref(idx);
	return rc;
}

/* tie_word_embeddings true and an lm_head.weight in the folder: titan's
 * tied model has one matrix, so the file's lm_head must be that matrix (as
 * transformers' tie_weights() makes it on load); one that differs is a
 * contradiction the user has to settle, never a silent drop. */
static int check_tied_head(const struct titan_hf_model *m, const struct titan_st_tensor *head,
			   const char *path)
{
	const struct titan_st_tensor *emb = NULL;
	float *a = NULL, *b = NULL;
	int rc = 0;

	for (int i = 0; i < m->table.n && !emb; i++)
		if (m->table.params[i].role == TITAN_PARAM_TOK_EMBEDDINGS)
			emb = m->src[m->slot[i]];
	if (!emb)
		return 0; /* locate() reports the missing embedding */
	if (head->ndim != 2 || emb->ndim != 2 || head->shape[0] != emb->shape[0] ||
	    head->shape[1] != emb->shape[1])
		return titan_error(TITAN_E_FORMAT, "'%s': tie_word_embeddings is true but "
				   "lm_head.weight is not shaped as model.embed_tokens.weight: "
				   "set it to false in config.json to convert an untied model", path);
	if (head->dtype == emb->dtype && head->nbytes == emb->nbytes &&
	    !memcmp(head->data, emb->data, head->nbytes))
		goto same;
	if (!(a = malloc((size_t)emb->numel * sizeof(float))) ||
	    !(b = malloc((size_t)emb->numel * sizeof(float)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory comparing lm_head.weight");
		goto out;
	}
	if ((rc = titan_st_tensor_to_f32(emb, a)) < 0 || (rc = titan_st_tensor_to_f32(head, b)) < 0)
		goto out;
	for (int64_t k = 0; k < emb->numel; k++)
		if (memcmp(&a[k], &b[k], sizeof(float))) {
			rc = titan_error(TITAN_E_FORMAT, "'%s': tie_word_embeddings is true but "
					 "lm_head.weight differs from model.embed_tokens.weight (first "
					 "at [%lld, %lld]: %.9g vs %.9g): titan would drop it; set "
					 "tie_word_embeddings to false in config.json to keep both "
					 "matrices (an untied model)", path,
					 (long long)(k / emb->shape[1]), (long long)(k % emb->shape[1]),
					 (double)b[k], (double)a[k]);
			goto out;
		}
same:
	titan_log_info("%s: lm_head.weight equals model.embed_tokens.weight: one tied matrix "
		       "(tie_word_embeddings)", m->dir);
out:
	free(a);
	free(b);
	return rc;
}

/* Every tensor of every file is a parameter, or one HF keeps for nothing. */
static int check_unknown(struct titan_hf_model *m)
{
	for (size_t k = 0; k < m->nfiles; k++) {
		const struct titan_safetensors *f = m->files[k];

		for (size_t j = 0; j < f->n_tensors; j++) {
			const char *n = f->tensors[j].name;
			size_t len = strlen(n);
			bool known = len > 20 && !strcmp(n + len - 20, ".rotary_emb.inv_freq");
			/* Llama4ForConditionalGeneration's image side: not titan's */
			const bool l4 = m->table.dims.family == TITAN_MODEL_NAME_LLAMA4;

			known |= l4 && (!strncmp(n, "vision_model.", 13) ||
					!strncmp(n, "multi_modal_projector.", 22));
			int rc;

			if (m->table.dims.tied && (!strcmp(n, "lm_head.weight") ||
						   (l4 && !strcmp(n, "language_model.lm_head.weight")))) {
				if ((rc = check_tied_head(m, &f->tensors[j], f->path)) < 0)
					return rc;
				known = true;
			}

			for (int64_t i = 0; i < m->nsrc && !known; i++)
				known = m->src[i] == &f->tensors[j];
			if (!known)
				return titan_error(TITAN_E_INVALID, "'%s': tensor '%s' is not a weight "
						   "of titan's %s", f->path, n,
						   l4 ? "Llama 4" :
						   m->table.dims.moe.num_experts ? "Qwen3 MoE" :
						   m->table.dims.qk_norm ? "Qwen3" : "Llama");
		}
	}
	return 0;
}

/* num_hidden_layers is any number config.json says, and the parameter
 * table holds 9 entries a block: a million blocks over a folder of a few
 * tensors took 1.8 GB and 18 s before the first missing tensor was
 * named.  Bound the blocks by the folder's tensor count first (twice it,
 * plus slack: a folder short of a tensor or two still gets locate's
 * message naming the missing one). */
static int bound_layers(struct titan_hf_model *m)
{
	const struct titan_model_dims *d = &m->table.dims;
	char path[4096];
	json_error_t je;
	struct stat st;
	size_t n;
	int rc;

	snprintf(path, sizeof(path), "%s/model.safetensors.index.json", m->dir);
	if (stat(path, &st) == 0) {
		json_t *idx = json_load_file(path, 0, &je), *map = json_object_get(idx, "weight_map");

		if (!json_is_object(map)) {
			json_decref(idx);
			return 0; /* locate says what is wrong */
		}
		n = json_object_size(map);
		json_decref(idx);
	} else {
		size_t k;

		snprintf(path, sizeof(path), "%s/model.safetensors", m->dir);
		if (stat(path, &st) != 0)
			return 0;
		if ((rc = open_file(m, "model.safetensors", &k)) < 0)
			return rc;
		n = m->files[k]->n_tensors;
	}
	const double per = titan_params_per_layer(d);

	if (per * (double)d->n_layers + 3.0 > 2.0 * (double)n + 16.0)
		return titan_error(TITAN_E_FORMAT, "'%s/config.json': num_hidden_layers %lld makes "
				   "%.0f tensors, '%s' has %zu", m->dir, (long long)d->n_layers,
				   per * (double)d->n_layers + (d->tied ? 2.0 : 3.0), path, n);
	return 0;
}

int titan_hf_open(const char *dir, struct titan_hf_model **out)
{
	struct titan_hf_model *m;
	char path[4096];
	int rc;

	*out = NULL;
	if (!(m = calloc(1, sizeof(*m))) || !(m->dir = strdup(dir))) {
		free(m);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	snprintf(path, sizeof(path), "%s/config.json", dir);
	if ((rc = titan_hf_read_config(path, &m->table.dims, NULL, NULL)) < 0 ||
	    (rc = bound_layers(m)) < 0)
		goto fail;
	{
		struct titan_model_dims d = m->table.dims;

		if ((rc = titan_param_table_init(&m->table, &d, NULL)) < 0)
			goto fail;
	}
	if (!(m->slot = calloc((size_t)m->table.n, sizeof(*m->slot)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto fail;
	}
	for (int i = 0; i < m->table.n; i++) {
		m->slot[i] = m->nsrc;
		m->nsrc += titan_hf_parts(&m->table.dims, &m->table.params[i]);
	}
	if (!(m->src = calloc((size_t)m->nsrc + 1, sizeof(*m->src))) ||
	    !(m->src_file = calloc((size_t)m->nsrc + 1, sizeof(*m->src_file)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto fail;
	}
	if ((rc = locate(m)) < 0 || (rc = check_unknown(m)) < 0)
		goto fail;
	*out = m;
	return 0;
fail:
	titan_hf_close(m);
	return rc;
}

int titan_hf_read(const struct titan_hf_model *m, const struct titan_param *p, float *out)
{
	const int idx = (int)(p - m->table.params);
	const struct titan_st_tensor *t;
	const struct titan_model_dims *d = &m->table.dims;
	float *tmp;
	int rc;

	TITAN_ASSERT(idx >= 0 && idx < m->table.n);
	if (d->family == TITAN_MODEL_NAME_LLAMA4 && (p->role == TITAN_PARAM_MOE_W1 ||
	    p->role == TITAN_PARAM_MOE_W2 || p->role == TITAN_PARAM_MOE_W3)) {
		t = m->src[m->slot[idx]];
		if (!(tmp = malloc((size_t)t->numel * sizeof(float))))
			return titan_error(TITAN_E_NOMEM, "out of memory reading %s", t->name);
		if ((rc = titan_st_tensor_to_f32(t, tmp)) == 0)
			titan_hf_llama4_experts_(p, tmp, out, false);
		free(tmp);
		return rc;
	}
	if (titan_hf_parts(d, p) != 1) { /* the experts one by one; Qwen3's expert_bias zero */
		memset(out, 0, (size_t)p->numel * sizeof(float));
		for (int64_t e = 0; e < titan_hf_parts(d, p); e++)
			if ((rc = titan_st_tensor_to_f32(m->src[m->slot[idx] + e],
							 out + e * p->shape[1])) < 0)
				return rc;
		return 0;
	}
	t = m->src[m->slot[idx]];
	if (titan_hf_qk_heads(d, p) == 0)
		return titan_st_tensor_to_f32(t, out);
	if (!(tmp = malloc((size_t)p->numel * sizeof(float))))
		return titan_error(TITAN_E_NOMEM, "out of memory reading %s", t->name);
	if ((rc = titan_st_tensor_to_f32(t, tmp)) == 0)
		titan_hf_permute_qk(tmp, out, titan_hf_qk_heads(d, p), p->shape[0], p->shape[1], false);
	free(tmp);
	return rc;
}
