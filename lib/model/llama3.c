/*
 * llama3.c — Llama 3 flavor table and parameter / FLOP arithmetic, as
 * torchtitan's models/llama3/__init__.py (llama3_configs) and
 * models/utils.py (get_dense_model_nparams_and_flops); and the model
 * families (model.name): Qwen3 is Llama 3's table with its flavors,
 * QK-norm and a head_dim of its own (models/qwen3/__init__.py), its MoE
 * flavors with torchtitan's MoE in every block (the routing reaches the
 * config's model.moe_* keys through lib/config/value.c).
 */
#include "titan/model.h"

#include <math.h>
#include <string.h>

#include "titan/core.h"

struct flavor {
	const char *name;
	int64_t dim, n_layers, n_heads, n_kv_heads, vocab_size, multiple_of;
	double ffn_dim_multiplier;
	bool tied;
	int64_t head_dim, hidden; /* 0: dim / n_heads, the SwiGLU formula */
	/* Qwen3 MoE: routed experts, top_k, an expert's hidden size (0: dense),
	 * and a RoPE base of its own (0: the family's) */
	int64_t moe_experts, moe_top_k, moe_inter;
	double rope_theta;
	const struct titan_mla_dims *mla; /* deepseek_v3's attention (NULL: none) */
};

/* torchtitan's llama3_configs (1B/3B from HEAD, tied embeddings). */
static const struct flavor flavors[] = {
	{"debugmodel", 256, 6, 16, 16, 2048, 256, NAN, false, 0, 0, 0, 0, 0, 0, NULL},
	{"1B", 2048, 16, 32, 8, 128256, 1024, 1.5, true, 0, 0, 0, 0, 0, 0, NULL},
	{"3B", 3072, 28, 24, 8, 128256, 1024, 1.0, true, 0, 0, 0, 0, 0, 0, NULL},
	{"8B", 4096, 32, 32, 8, 128256, 1024, 1.3, false, 0, 0, 0, 0, 0, 0, NULL},
	{"70B", 8192, 80, 64, 8, 128256, 4096, 1.3, false, 0, 0, 0, 0, 0, 0, NULL},
	{"405B", 16384, 126, 128, 8, 128256, 4096, 1.2, false, 0, 0, 0, 0, 0, 0, NULL},
};
#define NFLAVORS ((int)(sizeof(flavors) / sizeof(flavors[0])))

/* torchtitan's qwen3_args (models/qwen3/__init__.py before the config
 * refactor), the dense ones: head_dim 128 whatever dim / n_heads, the FFN
 * hidden size given (hidden_dim), tied embeddings up to 4B. */
static const struct flavor qwen3_flavors[] = {
	{"debugmodel", 256, 8, 16, 8, 2048, 0, NAN, true, 128, 3072, 0, 0, 0, 0, NULL},
	{"0.6B", 1024, 28, 16, 8, 151936, 0, NAN, true, 128, 3072, 0, 0, 0, 0, NULL},
	{"1.7B", 2048, 28, 16, 8, 151936, 0, NAN, true, 128, 6144, 0, 0, 0, 0, NULL},
	{"4B", 2560, 36, 32, 8, 151936, 0, NAN, true, 128, 9728, 0, 0, 0, 0, NULL},
	{"8B", 4096, 36, 32, 8, 151936, 0, NAN, false, 128, 12288, 0, 0, 0, 0, NULL},
	{"14B", 5120, 40, 40, 8, 151936, 0, NAN, false, 128, 17408, 0, 0, 0, 0, NULL},
	{"32B", 5120, 64, 64, 8, 151936, 0, NAN, false, 128, 25600, 0, 0, 0, 0, NULL},
	/* the MoE ones (every block MoE: softmax scores, route_norm, no shared
	 * experts, the scores on the experts' outputs; hidden: HF's
	 * intermediate_size, which no block uses) */
	{"debugmodel_moe", 256, 8, 16, 8, 2048, 0, NAN, false, 128, 3072, 64, 8, 768, 0, NULL},
	{"30B-A3B", 2048, 48, 32, 4, 151936, 0, NAN, false, 128, 6144, 128, 8, 768, 0, NULL},
	{"235B-A22B", 4096, 94, 64, 4, 151936, 0, NAN, false, 128, 12288, 128, 8, 1536, 5000000.0, NULL},
};

/* torchtitan's deepseekv3_configs (models/deepseek_v3/__init__.py):
 * multi-head latent attention with YaRN RoPE (theta 1e4, factor 40 over
 * an original 4096 tokens); hidden = the dense blocks' FFN size; the MoE
 * blocks' routing reaches the config's model.moe_* keys (lib/config/
 * value.c).  debugmodel_mla is titan's own: tiny, with q_lora_rank > 0. */
static const struct titan_mla_dims mla_debug = {0, 512, 128, 64, 128, 40.0, 32.0, 1.0, 0.70, 4096},
				    mla_tiny = {32, 32, 16, 8, 16, 40.0, 32.0, 1.0, 0.70, 4096},
				    mla_16b = {0, 512, 128, 64, 128, 40.0, 32.0, 1.0, 0.70, 4096},
				    mla_big = {1536, 512, 128, 64, 128, 40.0, 32.0, 1.0, 1.0, 4096};
static const struct flavor dsv3_flavors[] = {
	{"debugmodel", 256, 6, 16, 16, 2048, 0, NAN, false, 192, 1024, 0, 0, 0, 0, &mla_debug},
	{"debugmodel_mla", 64, 3, 4, 4, 2048, 0, NAN, false, 24, 192, 0, 0, 0, 0, &mla_tiny},
	{"16B", 2048, 27, 16, 16, 102400, 0, NAN, false, 192, 10944, 0, 0, 0, 0, &mla_16b},
	{"236B", 5120, 60, 128, 128, 102400, 0, NAN, false, 192, 12288, 0, 0, 0, 0, &mla_big},
	{"671B", 7168, 61, 128, 128, 129280, 0, NAN, false, 192, 18432, 0, 0, 0, 0, &mla_big},
};

/* torchtitan's llama4_args (models/llama4/__init__.py): Llama 3's dense
 * arithmetic for the dense blocks; the MoE (interleaved, top-1 sigmoid,
 * one shared expert) reaches the config's model.moe_* keys (lib/config/
 * value.c), the experts' hidden size auto-scaled (titan_model_dims_from_config). */
static const struct flavor llama4_flavors[] = {
	{"debugmodel", 256, 6, 16, 16, 2048, 256, NAN, false, 0, 0, 0, 0, 0, 0, NULL},
	{"17bx16e", 5120, 48, 40, 8, 202048, 2048, 1.2, false, 0, 0, 0, 0, 0, 0, NULL},
	{"17bx128e", 5120, 48, 40, 8, 202048, 2048, 1.2, false, 0, 0, 0, 0, 0, 0, NULL},
};

/* The model families (model.name): their flavors and what a family sets
 * besides the dims (the config's model.name sets norm_eps, rope_theta and
 * rope_scaling, lib/config/value.c). */
static const struct family {
	const char *name;
	const struct flavor *flavors;
	int n;
	bool qk_norm;
	double norm_eps, rope_theta;
	bool rope_scaling;
} families[] = {
	[TITAN_MODEL_NAME_LLAMA3] = {"llama3", flavors, NFLAVORS, false, 1e-5, 500000.0, true},
	[TITAN_MODEL_NAME_QWEN3] = {"qwen3", qwen3_flavors,
				    (int)(sizeof(qwen3_flavors) / sizeof(qwen3_flavors[0])), true,
				    1e-6, 1000000.0, false},
	[TITAN_MODEL_NAME_DEEPSEEK_V3] = {"deepseek_v3", dsv3_flavors,
					  (int)(sizeof(dsv3_flavors) / sizeof(dsv3_flavors[0])), false,
					  1e-5, 10000.0, false},
	[TITAN_MODEL_NAME_LLAMA4] = {"llama4", llama4_flavors,
				     (int)(sizeof(llama4_flavors) / sizeof(llama4_flavors[0])), false,
				     1e-5, 500000.0, true},
};
#define NFAMILIES ((int)(sizeof(families) / sizeof(families[0])))

int titan_model_nflavors(void)
{
	return NFLAVORS;
}

const char *titan_model_flavor_name(int i)
{
	return i >= 0 && i < NFLAVORS ? flavors[i].name : NULL;
}

int64_t titan_ffn_hidden_dim(int64_t dim, int64_t multiple_of, double mult)
{
	int64_t hidden = (int64_t)(2.0 * (double)(4 * dim) / 3.0);

	if (!isnan(mult))
		hidden = (int64_t)(mult * (double)hidden);
	return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

static void set_defaults(struct titan_model_dims *d)
{
	memset(d, 0, sizeof(*d));
	d->ffn_dim_multiplier = NAN;
	d->norm_eps = 1e-5;
	d->rope_theta = 500000.0;
	d->rope_scaling = true;
	d->rope_scaling_factor = 8.0;
	d->rope_low_freq_factor = 1.0;
	d->rope_high_freq_factor = 4.0;
	d->rope_original_max_position = 8192;
}

static void finish(struct titan_model_dims *d, int64_t head_dim, int64_t hidden)
{
	if (d->n_kv_heads <= 0)
		d->n_kv_heads = d->n_heads;
	d->head_dim = head_dim > 0 ? head_dim : d->n_heads > 0 ? d->dim / d->n_heads : 0;
	d->ffn_hidden = hidden > 0 ? hidden
				   : titan_ffn_hidden_dim(d->dim, d->multiple_of, d->ffn_dim_multiplier);
}

const char *titan_model_family_name(enum titan_model_name fam)
{
	return (int)fam >= 0 && (int)fam < NFAMILIES ? families[fam].name : "?";
}

bool titan_model_family_has_flavor(enum titan_model_name fam, const char *name)
{
	for (int i = 0; (int)fam >= 0 && (int)fam < NFAMILIES && i < families[fam].n; i++)
		if (!strcmp(name, families[fam].flavors[i].name))
			return true;
	return false;
}

int titan_model_family_flavor(enum titan_model_name fam, const char *name,
			      struct titan_model_dims *out)
{
	const struct family *F;

	if ((int)fam < 0 || (int)fam >= NFAMILIES)
		return titan_error(TITAN_E_INVALID, "model.name: unknown model family %d", (int)fam);
	F = &families[fam];
	for (int i = 0; i < F->n; i++) {
		const struct flavor *f = &F->flavors[i];

		if (strcmp(name, f->name) != 0)
			continue;
		set_defaults(out);
		snprintf(out->flavor, sizeof(out->flavor), "%s", f->name);
		out->family = fam;
		out->qk_norm = F->qk_norm;
		out->norm_eps = F->norm_eps;
		out->rope_theta = F->rope_theta;
		out->rope_scaling = F->rope_scaling;
		if (fam == TITAN_MODEL_NAME_LLAMA4) {
			out->rope_scaling_factor = 16.0;
			out->rope_high_freq_factor = 1.0;
			out->rope_scaling = strcmp(f->name, "17bx128e") != 0;
		}
		out->dim = f->dim;
		out->n_layers = f->n_layers;
		out->n_heads = f->n_heads;
		out->n_kv_heads = f->n_kv_heads;
		out->vocab_size = f->vocab_size;
		out->multiple_of = f->multiple_of;
		out->ffn_dim_multiplier = f->ffn_dim_multiplier;
		out->tied = f->tied;
		if (f->rope_theta > 0)
			out->rope_theta = f->rope_theta;
		finish(out, f->head_dim, f->hidden);
		if (f->mla)
			out->mla = *f->mla;
		if (f->moe_experts)
			out->moe = (struct titan_moe_dims){
				.num_experts = f->moe_experts, .top_k = f->moe_top_k,
				.inter_dim = f->moe_inter, .interleave_step = 1, .softmax = true,
				.route_norm = true, .route_scale = 1.0, .load_balance_coeff = 1e-3};
		return 0;
	}
	return titan_error(TITAN_E_INVALID, "model.flavor: unknown flavor '%s' for model.name %s",
			   name, F->name);
}

int titan_model_flavor(const char *name, struct titan_model_dims *out)
{
	for (int i = 0; i < NFLAVORS; i++)
		if (!strcmp(name, flavors[i].name))
			return titan_model_family_flavor(TITAN_MODEL_NAME_LLAMA3, name, out);
	return titan_error(TITAN_E_INVALID, "model.flavor: unknown flavor '%s'", name);
}

/* deepseek_v3: the flavor's MLA and YaRN dims (custom: debugmodel's) with
 * the config's model.* ones that are set; every head has its kv head
 * (n_kv_heads = n_heads) and q, k heads of nope + rope dims. */
static int mla_from_config(const struct titan_config *cfg, struct titan_model_dims *d,
			   bool custom, int64_t *head_dim)
{
	struct titan_mla_dims *m = &d->mla;

	if (custom)
		*m = mla_debug;
#define MLA_INT(f) if (cfg->model.f >= 0) m->f = cfg->model.f
#define MLA_FLT(f) if (!isnan(cfg->model.f)) m->f = cfg->model.f
	MLA_INT(q_lora_rank);
	MLA_INT(kv_lora_rank);
	MLA_INT(qk_nope_head_dim);
	MLA_INT(qk_rope_head_dim);
	MLA_INT(v_head_dim);
	MLA_INT(original_seq_len);
	MLA_FLT(rope_factor);
	MLA_FLT(beta_fast);
	MLA_FLT(beta_slow);
	MLA_FLT(mscale);
#undef MLA_INT
#undef MLA_FLT
	if (m->kv_lora_rank <= 0 || m->qk_rope_head_dim <= 0 || m->qk_rope_head_dim % 2 ||
	    m->qk_nope_head_dim < 0 || m->v_head_dim <= 0)
		return titan_error(TITAN_E_INVALID, "model.qk_rope_head_dim: deepseek_v3 needs "
				   "kv_lora_rank %lld > 0, an even qk_rope_head_dim %lld > 0, "
				   "qk_nope_head_dim %lld >= 0 and v_head_dim %lld > 0",
				   (long long)m->kv_lora_rank, (long long)m->qk_rope_head_dim,
				   (long long)m->qk_nope_head_dim, (long long)m->v_head_dim);
	if (m->v_head_dim > m->qk_nope_head_dim + m->qk_rope_head_dim)
		return titan_error(TITAN_E_INVALID, "model.v_head_dim: %lld above the q/k head "
				   "size %lld (qk_nope_head_dim + qk_rope_head_dim) is not supported",
				   (long long)m->v_head_dim,
				   (long long)(m->qk_nope_head_dim + m->qk_rope_head_dim));
	if (cfg->model.head_dim > 0 && cfg->model.head_dim != m->qk_nope_head_dim + m->qk_rope_head_dim)
		return titan_error(TITAN_E_INVALID, "model.head_dim: deepseek_v3's is "
				   "qk_nope_head_dim + qk_rope_head_dim (%lld), not %lld",
				   (long long)(m->qk_nope_head_dim + m->qk_rope_head_dim),
				   (long long)cfg->model.head_dim);
	if (cfg->model.n_kv_heads > 0 && cfg->model.n_kv_heads != cfg->model.n_heads &&
	    cfg->model.n_heads > 0)
		return titan_error(TITAN_E_INVALID, "model.n_kv_heads: multi-head latent attention "
				   "has a key/value head per head (n_heads)");
	if (!(m->rope_factor > 0) || m->original_seq_len <= 0 || !(m->beta_fast > 0) ||
	    !(m->beta_slow > 0))
		return titan_error(TITAN_E_INVALID, "model.rope_factor: YaRN needs rope_factor, "
				   "beta_fast, beta_slow and original_seq_len positive");
	*head_dim = m->qk_nope_head_dim + m->qk_rope_head_dim;
	return 0;
}

double titan_model_mla_softmax_scale(const struct titan_model_dims *d)
{
	const struct titan_mla_dims *m = &d->mla;
	double s = pow((double)(m->qk_nope_head_dim + m->qk_rope_head_dim), -0.5);

	if (m->rope_factor > 1.0) {
		double ms = 0.1 * m->mscale * log(m->rope_factor) + 1.0;

		s = s * ms * ms;
	}
	return s;
}

/* torchtitan's llama4 TransformerBlock with auto_scale_hidden_dim: the
 * dense SwiGLU size before rounding, int(·/(top_k + shared)), rounded up to
 * a multiple of multiple_of. */
static int64_t llama4_expert_hidden(const struct titan_model_dims *d, int64_t top_k,
				    int64_t shared)
{
	int64_t h = (int64_t)(2.0 * (double)(4 * d->dim) / 3.0);

	if (!isnan(d->ffn_dim_multiplier))
		h = (int64_t)(d->ffn_dim_multiplier * (double)h);
	h = (int64_t)((double)h / (double)(top_k + shared));
	return h + (d->multiple_of - h % d->multiple_of) % d->multiple_of;
}

/* Llama 4's iRoPE keys, and what the family does not take. */
static int irope_from_config(const struct titan_config *cfg, struct titan_model_dims *d)
{
	const int64_t n = cfg->model.every_n_layers_nope;

	d->nope_every = n;
	d->attn_chunk = cfg->model.fixed_attn_block_size;
	if (n > 0 && d->family != TITAN_MODEL_NAME_LLAMA4)
		return titan_error(TITAN_E_INVALID, "model.every_n_layers_nope: %lld: NoPE layers "
				   "are Llama 4's (model.name llama4), not %s's", (long long)n,
				   titan_model_family_name(d->family));
	if (n == 1)
		return titan_error(TITAN_E_INVALID, "model.every_n_layers_nope: must be greater "
				   "than 1 (0: RoPE in every block)");
	if (d->family == TITAN_MODEL_NAME_LLAMA4 && d->qk_norm)
		return titan_error(TITAN_E_INVALID, "model.qk_norm: torchtitan's Llama 4 has no "
				   "QK-norm (HF's use_qk_norm, a weightless L2 norm, is not "
				   "supported)");
	return 0;
}

int titan_model_dims_from_config(const struct titan_config *cfg, struct titan_model_dims *d)
{
	const char *fl = cfg->model.flavor;
	bool custom = cfg->model.flavor_e == TITAN_FLAVOR_CUSTOM;
	int64_t head_dim = 0, hidden = 0; /* the flavor's when it gives them */

	if (custom) {
		set_defaults(d);
		snprintf(d->flavor, sizeof(d->flavor), "custom");
		d->family = cfg->model.name_e;
		d->qk_norm = (int)d->family < NFAMILIES && families[d->family].qk_norm;
		d->multiple_of = 256;
		static const char *const need[] = {"dim", "n_layers", "n_heads", "vocab_size"};
		const int64_t have[] = {cfg->model.dim, cfg->model.n_layers, cfg->model.n_heads,
					cfg->model.vocab_size};
		for (int i = 0; i < 4; i++)
			if (have[i] <= 0)
				return titan_error(TITAN_E_INVALID,
						   "model.%s: must be set when model.flavor is 'custom'",
						   need[i]);
	} else if (titan_model_family_flavor(cfg->model.name_e, fl, d) < 0) {
		return TITAN_E_INVALID;
	} else {
		const struct family *F = &families[cfg->model.name_e];

		for (int i = 0; i < F->n; i++)
			if (!strcmp(F->flavors[i].name, fl)) {
				head_dim = F->flavors[i].head_dim;
				hidden = F->flavors[i].hidden;
			}
	}
	if (d->family == TITAN_MODEL_NAME_DEEPSEEK_V3) {
		int rc = mla_from_config(cfg, d, custom, &head_dim);

		if (rc < 0)
			return rc;
	}
#define OVERRIDE(f) if (cfg->model.f > 0) d->f = cfg->model.f
	OVERRIDE(dim);
	OVERRIDE(n_layers);
	OVERRIDE(n_heads);
	OVERRIDE(n_kv_heads);
	OVERRIDE(vocab_size);
	OVERRIDE(multiple_of);
#undef OVERRIDE
	if (cfg->model.head_dim > 0)
		head_dim = cfg->model.head_dim;
	if (cfg->model.hidden_dim > 0)
		hidden = cfg->model.hidden_dim;
	if (!isnan(cfg->model.ffn_dim_multiplier))
		d->ffn_dim_multiplier = cfg->model.ffn_dim_multiplier;
	d->norm_eps = cfg->model.norm_eps;
	d->rope_theta = cfg->model.rope_theta;
	d->rope_scaling = cfg->model.rope_scaling;
	d->rope_scaling_factor = cfg->model.rope_scaling_factor;
	d->rope_low_freq_factor = cfg->model.rope_low_freq_factor;
	d->rope_high_freq_factor = cfg->model.rope_high_freq_factor;
	d->rope_original_max_position = cfg->model.rope_original_max_position;
	if (cfg->model.tie_word_embeddings_e != TITAN_TIE_AUTO)
		d->tied = cfg->model.tie_word_embeddings_e == TITAN_TIE_TRUE;
	if (cfg->model.qk_norm_e != TITAN_TIE_AUTO)
		d->qk_norm = cfg->model.qk_norm_e == TITAN_TIE_TRUE;
	if ((custom && cfg->model.n_kv_heads <= 0) || titan_model_mla(d))
		d->n_kv_heads = d->n_heads;
	finish(d, head_dim, hidden);
	/* a head_dim of its own goes with QK-norm (Qwen3), as checkpoints and
	 * HF's Llama have it */
	if (head_dim > 0 && !d->qk_norm && !titan_model_mla(d) && head_dim * d->n_heads != d->dim)
		return titan_error(TITAN_E_INVALID, "model.head_dim: %lld x %lld heads is not model.dim "
				   "%lld, which a model without model.qk_norm (llama3) needs",
				   (long long)head_dim, (long long)d->n_heads, (long long)d->dim);
	/* the MoE keys: a MoE flavor's routing arrived in them when model.flavor
	 * was set (lib/config/value.c), moe_num_experts 0 makes it dense */
	memset(&d->moe, 0, sizeof(d->moe));
	if (cfg->model.moe_num_experts > 0) {
		struct titan_moe_dims *m = &d->moe;

		m->num_experts = cfg->model.moe_num_experts;
		m->num_shared_experts = cfg->model.moe_num_shared_experts;
		m->top_k = cfg->model.moe_top_k;
		m->inter_dim = cfg->model.moe_inter_dim > 0 ? cfg->model.moe_inter_dim
							     : d->ffn_hidden;
		if (d->family == TITAN_MODEL_NAME_LLAMA4 && cfg->model.moe_inter_dim <= 0)
			m->inter_dim = llama4_expert_hidden(d, cfg->model.moe_top_k,
							    cfg->model.moe_num_shared_experts);
		m->n_dense_layers = cfg->model.n_dense_layers;
		m->interleave_step = cfg->model.interleave_moe_layer_step;
		m->softmax = cfg->model.moe_score_func_e == TITAN_MOE_SOFTMAX;
		m->route_norm = cfg->model.moe_route_norm;
		m->score_before_experts = cfg->model.moe_score_before_experts;
		m->route_scale = cfg->model.moe_route_scale;
		m->load_balance_coeff = cfg->model.moe_load_balance_coeff;
		if (m->top_k > m->num_experts)
			return titan_error(TITAN_E_INVALID, "model.moe_top_k: %lld exceeds "
					   "model.moe_num_experts %lld", (long long)m->top_k,
					   (long long)m->num_experts);
		if (!cfg->model.moe_use_grouped_mm)
			return titan_error(TITAN_E_INVALID, "model.moe_use_grouped_mm: false (the "
					   "per-expert for-loop) is not supported; titan computes "
					   "the experts as grouped GEMMs only");
	}
	if (irope_from_config(cfg, d) < 0)
		return TITAN_E_INVALID;
	if (head_dim <= 0 && d->dim % d->n_heads != 0)
		return titan_error(TITAN_E_INVALID,
				   "model.n_heads: %lld heads do not divide model.dim %lld",
				   (long long)d->n_heads, (long long)d->dim);
	if (d->n_heads % d->n_kv_heads != 0)
		return titan_error(TITAN_E_INVALID,
				   "model.n_kv_heads: %lld kv heads do not divide model.n_heads %lld",
				   (long long)d->n_kv_heads, (long long)d->n_heads);
	if (d->head_dim % 2 != 0)
		return head_dim > 0 ? titan_error(TITAN_E_INVALID, "model.head_dim: %lld must be even "
						  "for RoPE", (long long)d->head_dim)
				    : titan_error(TITAN_E_INVALID, "model.n_heads: head_dim %lld "
						  "(dim / n_heads) must be even for RoPE",
						  (long long)d->head_dim);
	return 0;
}

void titan_model_count_params(const struct titan_model_dims *d, struct titan_model_params *p)
{
	int64_t kv = d->n_kv_heads * d->head_dim, q = d->n_heads * d->head_dim;

	memset(p, 0, sizeof(*p));
	p->embedding = d->vocab_size * d->dim;
	p->output = d->tied ? 0 : d->vocab_size * d->dim;
	p->attention = d->dim * q + 2 * d->dim * kv + q * d->dim;
	if (titan_model_mla(d)) { /* the MLA projections; its norms go to `norms` */
		const struct titan_mla_dims *m = &d->mla;
		const int64_t Q = m->q_lora_rank, R = m->kv_lora_rank;

		p->attention = (Q > 0 ? Q * d->dim + q * Q : q * d->dim) +
			       (R + m->qk_rope_head_dim) * d->dim +
			       d->n_heads * (m->qk_nope_head_dim + m->v_head_dim) * R +
			       d->dim * d->n_heads * m->v_head_dim;
	}
	p->feed_forward = 3 * d->dim * d->ffn_hidden;
	p->per_layer = p->attention + p->feed_forward + 2 * d->dim +
		       (d->qk_norm ? 2 * d->head_dim : 0);
	p->norms = (2 * d->n_layers + 1) * d->dim + (d->qk_norm ? 2 * d->n_layers * d->head_dim : 0);
	if (titan_model_mla(d)) { /* q_norm (with q_lora_rank), kv_norm */
		const int64_t mn = d->mla.q_lora_rank + d->mla.kv_lora_rank;

		p->per_layer += mn;
		p->norms += d->n_layers * mn;
	}
	p->total = p->embedding + p->output + d->n_layers * p->per_layer + d->dim;
	p->active = p->total;
	for (int64_t l = 0; l < d->n_layers; l++) {
		if (!titan_model_layer_is_moe(d, l))
			continue;
		p->moe = titan_model_ffn_params(d, l, false);
		p->n_moe_layers++;
		p->total += p->moe - p->feed_forward;
		p->active += titan_model_ffn_params(d, l, true) - p->feed_forward;
	}
}

int64_t titan_model_ffn_params(const struct titan_model_dims *d, int64_t layer, bool active)
{
	const int64_t E = d->moe.num_experts, C = d->dim, Fm = d->moe.inter_dim;

	if (!titan_model_layer_is_moe(d, layer))
		return 3 * C * d->ffn_hidden;
	/* torchtitan's get_moe_model_nparams_and_flops: the gate, all
	 * experts and the shared experts; a token uses top_k experts */
	return E * C + 3 * (active ? d->moe.top_k : E) * Fm * C +
	       3 * C * Fm * d->moe.num_shared_experts;
}

double titan_model_flops_per_token(const struct titan_model_dims *d, int64_t seq_len)
{
	struct titan_model_params p;
	double n;

	titan_model_count_params(d, &p);
	/* MoE: the active parameters (torchtitan counts the experts' share
	 * times top_k / num_experts); Llama 3 keeps a tied matrix, Qwen3's
	 * get_moe_model_nparams_and_flops subtracts the embedding in any case */
	n = (double)p.active - (d->tied && d->family == TITAN_MODEL_NAME_LLAMA3 ? 0.0
										: (double)p.embedding);
	/* deepseek_v3: torchtitan passes qk_nope + qk_rope + v_head_dim as the
	 * head size of the attention term */
	return 6.0 * n + 12.0 * (double)d->n_layers * (double)d->n_heads *
			 (double)(titan_model_mla(d) ? d->head_dim + d->mla.v_head_dim : d->head_dim) *
			 (double)seq_len;
}
