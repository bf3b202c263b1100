/*
 * titan/model.h — the Llama 3 model description shared by titan-train and
 * titan-estimate: flavor table, derived dims, parameter counts and the
 * FLOP arithmetic behind MFU (torchtitan's models/llama3/__init__.py and
 * get_dense_model_nparams_and_flops; see docs/torchtitan-notes.md §1, §3),
 * and the parameter table: names, shapes, arena layout and init_weights.
 */
#ifndef TITAN_MODEL_H
#define TITAN_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "titan/config.h"
#include "titan/core.h"

#ifdef __cplusplus
extern "C" {
#endif

struct titan_model_dims {
	char flavor[32];
	int64_t dim, n_layers, n_heads, n_kv_heads, head_dim;
	int64_t ffn_hidden, multiple_of, vocab_size;
	double ffn_dim_multiplier;   /* NAN: none */
	double norm_eps, rope_theta;
	bool rope_scaling;           /* Llama 3.1 frequency scaling */
	double rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor;
	int64_t rope_original_max_position;
	bool tied;                   /* output shares tok_embeddings (1B, 3B) */
	enum titan_model_name family;/* model.name: llama3, qwen3, deepseek_v3, llama4 */
	bool qk_norm;                /* RMSNorm of q, k per head before RoPE (qwen3) */
	/* DeepSeek-V3's multi-head latent attention (torchtitan's
	 * models/deepseek_v3 Attention); kv_lora_rank 0 = none.  With it
	 * n_kv_heads = n_heads and head_dim = qk_nope + qk_rope (q and k);
	 * v has v_head_dim <= head_dim. */
	struct titan_mla_dims {
		int64_t q_lora_rank;         /* 0: plain wq */
		int64_t kv_lora_rank;
		int64_t qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
		/* YaRN RoPE on the rope part (scaling when rope_factor > 1) and
		 * its softmax-scale correction (0.1·mscale·ln(factor) + 1)² */
		double rope_factor, beta_fast, beta_slow, mscale;
		int64_t original_seq_len;
	} mla;
	struct titan_moe_dims {      /* mixture of experts; num_experts 0 = dense */
		int64_t num_experts, num_shared_experts, top_k;
		int64_t inter_dim;           /* one expert's hidden size */
		int64_t n_dense_layers;      /* DeepSeek-V3: the first n blocks dense */
		int64_t interleave_step;     /* Llama 4: block i MoE when (i+1) % step == 0 */
		bool softmax;                /* score_func softmax (else sigmoid) */
		bool route_norm, score_before_experts;
		double route_scale;
		double load_balance_coeff;   /* NAN: no expert_bias (torchtitan's None) */
	} moe;
	/* Llama 4's iRoPE (torchtitan's every_n_layers_nope, 0: none): block i
	 * has no RoPE when i % nope_every == 0; the RoPE blocks attend within
	 * chunks of attn_chunk positions (fixed_attn_block_size, torchtitan's
	 * flex attention's get_fixed_block_mask_mod), the NoPE blocks over
	 * the whole sequence */
	int64_t nope_every, attn_chunk;
};

/* Whether block `layer` has no RoPE (Llama 4's NoPE layers). */
static inline bool titan_model_layer_nope(const struct titan_model_dims *d, int64_t layer)
{
	return d->nope_every > 1 && layer % d->nope_every == 0;
}

/* Whether block `layer` has torchtitan's MoE in place of its feed-forward. */
static inline bool titan_model_layer_is_moe(const struct titan_model_dims *d, int64_t layer)
{
	return d->moe.num_experts > 0 && layer >= d->moe.n_dense_layers &&
	       (layer + 1) % (d->moe.interleave_step > 0 ? d->moe.interleave_step : 1) == 0;
}

/* Whether the model has multi-head latent attention (deepseek_v3). */
static inline bool titan_model_mla(const struct titan_model_dims *d)
{
	return d->mla.kv_lora_rank > 0;
}

/* MLA's softmax scale: head_dim^-0.5, times mscale² under YaRN. */
double titan_model_mla_softmax_scale(const struct titan_model_dims *d);

/* Whether the MoE layers keep an expert_bias (load balancing on). */
static inline bool titan_model_moe_balanced(const struct titan_model_dims *d)
{
	return d->moe.load_balance_coeff == d->moe.load_balance_coeff; /* not NAN */
}

struct titan_model_params {
	int64_t total;       /* unique parameters (a tied matrix counts once) */
	int64_t embedding;   /* tok_embeddings */
	int64_t output;      /* output (0 when tied) */
	int64_t per_layer;   /* one TransformerBlock */
	int64_t attention;   /* wq + wk + wv + wo of one block */
	int64_t feed_forward;/* w1 + w2 + w3 of one block */
	int64_t norms;       /* all RMSNorm weights */
	int64_t moe;         /* router gate + experts + shared experts of one MoE block */
	int64_t n_moe_layers;
	int64_t active;      /* parameters one token uses (top_k of the experts) */
};

/* SwiGLU hidden size: int(2·4·dim/3), times the multiplier when given (not
 * NAN), rounded up to a multiple of `multiple_of`. */
int64_t titan_ffn_hidden_dim(int64_t dim, int64_t multiple_of, double ffn_dim_multiplier);

/* Dims of a named flavor (debugmodel, 1B, 3B, 8B, 70B, 405B).
 * TITAN_E_INVALID naming the flavor when unknown. */
int titan_model_flavor(const char *flavor, struct titan_model_dims *out);
/* Dims of flavor `flavor` of model family `fam` (model.name): Llama 3's
 * above, or Qwen3's (debugmodel, 0.6B, 1.7B, 4B, 8B, 14B, 32B: QK-norm,
 * head_dim 128, norm_eps 1e-6, rope_theta 1e6 without scaling), or
 * DeepSeek-V3's (debugmodel, debugmodel_mla, 16B, 236B, 671B: `mla`, the
 * dense blocks' FFN; their MoE routing lives in the config's keys), or
 * Llama 4's (debugmodel, 17bx16e, 17bx128e: Llama 3's dims, RoPE scaling
 * factor 16 with low = high = 1; MoE in the config's keys too).
 * TITAN_E_INVALID naming the flavor and family when unknown. */
int titan_model_family_flavor(enum titan_model_name fam, const char *flavor,
			      struct titan_model_dims *out);
const char *titan_model_family_name(enum titan_model_name fam);
/* Whether family `fam` has a flavor `flavor` (no error set). */
bool titan_model_family_has_flavor(enum titan_model_name fam, const char *flavor);
/* Number of Llama 3 flavors and their names, for listings. */
int titan_model_nflavors(void);
const char *titan_model_flavor_name(int i);

/* Dims from the config: the flavor's, with model.* dims that are set (not
 * -1 / NAN) overriding them; flavor "custom" needs dim, n_layers, n_heads
 * and vocab_size.  Checks divisibility (heads | dim, kv_heads | heads,
 * even head_dim) and returns TITAN_E_INVALID naming the key otherwise. */
int titan_model_dims_from_config(const struct titan_config *cfg, struct titan_model_dims *out);

void titan_model_count_params(const struct titan_model_dims *d, struct titan_model_params *out);

/* The feed-forward parameters of block `layer` (w1 + w2 + w3 of a dense
 * block; a MoE block's router gate, experts and shared experts: all of
 * them, or with `active` the top_k experts a token uses) — the counts
 * behind titan_model_count_params and the FLOPs of MFU. */
int64_t titan_model_ffn_params(const struct titan_model_dims *d, int64_t layer, bool active);

/* torchtitan's FLOPs per token for MFU: 6·(N − N_embedding) + 12·L·H·hd·S.
 * With tied weights the shared matrix is not subtracted (torchtitan HEAD). */
double titan_model_flops_per_token(const struct titan_model_dims *d, int64_t seq_len);

/* ------------------------------------------------------ parameter table */

/* Every parameter of the model in torchtitan's order and under its names
 * (state_dict FQNs), with its shape, its place in an arena and its init:
 *
 *   tok_embeddings.weight            [V, C]
 *   layers.I.attention.wq.weight     [H·D, C]
 *   layers.I.attention.wk.weight     [Hkv·D, C]
 *   layers.I.attention.wv.weight     [Hkv·D, C]
 *   layers.I.attention.wo.weight     [C, H·D]
 *   layers.I.feed_forward.w1.weight  [F, C]
 *   layers.I.feed_forward.w2.weight  [C, F]
 *   layers.I.feed_forward.w3.weight  [F, C]
 *   layers.I.attention_norm.weight   [C]
 *   layers.I.ffn_norm.weight         [C]
 *   norm.weight                      [C]
 *   output.weight                    [V, C]   (absent when tied: the output
 *                                             layer uses tok_embeddings)
 *
 * with I = 0 .. L-1, C = dim, D = head_dim, F = ffn_hidden, V = vocab_size.
 * This is the order of torchtitan's Transformer.named_parameters(): module
 * registration order (TransformerBlock registers attention, feed_forward,
 * attention_norm, ffn_norm), not the order of use in forward.
 * Linear weights are [out, in] row-major as nn.Linear stores them (y = x·Wᵀ).
 *
 * Arena layout: tensors one after another in the order above, each starting
 * at a multiple of TITAN_PARAM_ALIGN floats (64 bytes) from the arena start;
 * padding floats are zero.  Parameters, gradients and the two AdamW moments
 * use arenas of the same layout, so one offset addresses all four.
 *
 * Sharding (slot for FSDP): a table built for shard `rank` of `degree`
 * holds, for every parameter, only rows [row0, row0 + rows) of dim 0 in the
 * arena, with torch.chunk's split (FSDP2's): chunk = ceil(shape[0] / degree),
 * rank r owns rows [r·chunk, min((r+1)·chunk, shape[0])), possibly none.
 * Shapes and numel stay the logical (whole) ones. */

#define TITAN_PARAM_NAME_MAX 64
#define TITAN_PARAM_ALIGN 16 /* floats: 64 bytes */

/* What a parameter is, for code that treats kinds differently (forward,
 * weight-decay exclusion, TP splits). */
enum titan_param_role {
	TITAN_PARAM_TOK_EMBEDDINGS = 0,
	TITAN_PARAM_WQ,              /* block roles WQ .. FFN_NORM in table order */
	TITAN_PARAM_WK,
	TITAN_PARAM_WV,
	TITAN_PARAM_WO,
	TITAN_PARAM_W1,
	TITAN_PARAM_W2,
	TITAN_PARAM_W3,
	TITAN_PARAM_ATTENTION_NORM,
	TITAN_PARAM_FFN_NORM,
	TITAN_PARAM_Q_NORM,          /* qk_norm models only: [head_dim] */
	TITAN_PARAM_K_NORM,
	TITAN_PARAM_NORM,
	TITAN_PARAM_OUTPUT,
	/* a MoE block's feed-forward (torchtitan's moe.*), in place of W1..W3 */
	TITAN_PARAM_MOE_W1,          /* experts.w1 [E, F, C] */
	TITAN_PARAM_MOE_W2,          /* experts.w2 [E, C, F] */
	TITAN_PARAM_MOE_W3,          /* experts.w3 [E, F, C] */
	TITAN_PARAM_MOE_GATE,        /* router.gate.weight [E, C] */
	TITAN_PARAM_MOE_SHARED_W1,   /* shared_experts.w1.weight [F·S, C] */
	TITAN_PARAM_MOE_SHARED_W2,
	TITAN_PARAM_MOE_SHARED_W3,
	TITAN_PARAM_MOE_EXPERT_BIAS, /* the expert_bias buffer [E] */
	/* multi-head latent attention (deepseek_v3), in place of WK, WV (and
	 * of WQ when q_lora_rank > 0) */
	TITAN_PARAM_MLA_WQ_A,        /* attention.wq_a [q_lora_rank, C] */
	TITAN_PARAM_MLA_Q_NORM,      /* attention.q_norm [q_lora_rank] */
	TITAN_PARAM_MLA_WQ_B,        /* attention.wq_b [H·D, q_lora_rank] */
	TITAN_PARAM_MLA_WKV_A,       /* attention.wkv_a [kv_lora_rank + rope, C] */
	TITAN_PARAM_MLA_KV_NORM,     /* attention.kv_norm [kv_lora_rank] */
	TITAN_PARAM_MLA_WKV_B,       /* attention.wkv_b [H·(nope + v), kv_lora_rank] */
	TITAN_PARAM_NROLES
};
/* Parameters per dense transformer block (wq .. ffn_norm), and with
 * qk_norm (q_norm, k_norm besides). */
#define TITAN_PARAMS_PER_LAYER 9
#define TITAN_PARAMS_PER_LAYER_MAX 11
static inline int titan_params_per_layer(const struct titan_model_dims *d)
{
	return d->qk_norm ? TITAN_PARAMS_PER_LAYER_MAX : TITAN_PARAMS_PER_LAYER;
}

/* Pipeline stages one rank holds at most (interleaved schedules' virtual
 * stages): titan-train's model, schedules and titan-estimate. */
#define TITAN_PP_MAX_STAGES_PER_RANK 8

/* One pipeline stage's part of the model: blocks [l0, l1), the embedding
 * on the first stage, norm + output on the last; `index` is its place in
 * the pipeline (0 .. stages - 1). */
struct titan_pp_stage {
	int l0, l1;
	bool first, last;
	int index;
};
/* A rank's pipeline stages in its order (interleaved schedules' virtual
 * stages); n = 0: no pipeline, the whole model. */
struct titan_pp_stages {
	int n;
	struct titan_pp_stage v[TITAN_PP_MAX_STAGES_PER_RANK];
};

enum titan_init_kind {
	TITAN_INIT_NORMAL = 0,    /* N(mean, std²) */
	TITAN_INIT_TRUNC_NORMAL,  /* N(mean, std²) truncated to [a, b] (absolute) */
	TITAN_INIT_ONES,
	TITAN_INIT_ZEROS,
};

struct titan_param_init {
	enum titan_init_kind kind;
	float mean, std, a, b;    /* a, b: trunc_normal bounds, absolute values */
};

struct titan_param {
	char name[TITAN_PARAM_NAME_MAX]; /* "layers.3.attention.wq.weight" */
	enum titan_param_role role;
	int layer;                /* block index, -1 outside the blocks */
	int ndim;                 /* 1 or 2 */
	int64_t shape[2];         /* logical shape; shape[1] = 1 when ndim == 1 */
	int64_t numel;            /* logical elements: shape[0]·shape[1] */
	int64_t row0, rows;       /* rows of dim 0 held here (all when unsharded) */
	int64_t local_numel;      /* rows·shape[1]: floats held in the arena */
	int64_t offset;           /* floats from the arena start, multiple of 16 */
	int64_t chunk_rows;       /* torch.chunk's rows per shard: ceil(shape[0] / degree) */
	int64_t full_offset;      /* offset in an unsharded table's arena */
	/* The rows of the unsharded view (what FSDP gathers; full_offset's
	 * arena holds full_rows·shape[1] floats of p): [full_row0, full_row0 +
	 * full_rows) of dim 0, all of them (0, shape[0]) but for the stacked
	 * experts under expert parallelism (`ep_sharded`), where they are the
	 * EP rank's E/ep experts and FSDP shards those over the rank's efsdp
	 * peers (chunk_rows = ceil(full_rows / ep_shard_degree)). */
	int64_t full_row0, full_rows;
	bool ep_sharded;
	/* Tensor parallelism (torchtitan's Llama plan): `shape` above is the
	 * TP-local tensor, a slice of the global (checkpoint) tensor `gshape`
	 * on dim `tp_dim` (-1: replicated, the norms), starting at `tp_off`:
	 * rows of tok_embeddings/output (vocabulary, torch.chunk split),
	 * wq/wk/wv/w1/w3 (column-parallel: output features), columns of
	 * wo/w2 (row-parallel: input features).  Without TP, gshape = shape.
	 * The stacked experts (torchtitan's TP of GroupedExperts: every
	 * expert's hidden dim split) name a dim of their checkpoint shape
	 * fshape: 1 for w1/w3 [E, F, C], 2 for w2 [E, C, F], tp_off in units
	 * of that dim; `shape` stays the 2-d [E, local F·C] of the rows
	 * (titan_param_tp_window). */
	int tp_dim;
	int64_t tp_off;
	int64_t gshape[2];
	struct titan_param_init init;
	bool is_norm;             /* RMSNorm weight */
	bool is_embedding;        /* tok_embeddings (also the output when tied) */
	/* A buffer, not a parameter (a MoE block's expert_bias): checkpointed
	 * with the model, no gradient, never stepped by the optimizer. */
	bool is_buffer;
	/* Its shape in checkpoints: `ndim`/`gshape` but for the stacked
	 * experts, held as [E, F·C] rows (FSDP shards whole experts) and
	 * stored as torchtitan's 3-d [E, F, C]. */
	int fndim;
	int64_t fshape[3];
};

/* The TP window of p in its checkpoint tensor (fndim, fshape): the dim it
 * is split on beyond dim 0 (0: none, whole rows), from *w0 for *wn. */
static inline int titan_param_tp_window(const struct titan_param *p, int64_t *w0, int64_t *wn)
{
	if (p->tp_dim < 1) {
		*w0 = *wn = 0;
		return 0;
	}
	*w0 = p->tp_off;
	*wn = p->shape[1] / (p->gshape[1] / p->fshape[p->tp_dim]);
	return p->tp_dim;
}

/* The same on every TP rank: what TP does not split (the norms, the
 * router), but for an EP rank's experts (whole under EP x TP, and each
 * TP rank's its own).  Their gradients are summed over the TP group and
 * TP rank 0's copy is the one saved. */
static inline bool titan_param_tp_replicated(const struct titan_param *p)
{
	return p->tp_dim < 0 && !p->ep_sharded;
}

struct titan_param_table_opts {
	bool depth_init;          /* wo/w2/w3 std 0.02/sqrt(2(layer+1)) (torchtitan's
				     default); false: 0.02/sqrt(2·n_layers) */
	int shard_rank, shard_degree; /* dim-0 shard held by this table (0, 1: all) */
	/* Expert parallelism (torchtitan's): EP rank `ep_rank` of `ep_degree`
	 * holds experts [ep_rank·E/ep, (ep_rank + 1)·E/ep) of the stacked
	 * w1/w2/w3 only, dim-0 shard `ep_shard_rank` of `ep_shard_degree` of
	 * them (the efsdp mesh: shard_degree x tp_degree / ep_degree ranks;
	 * 0, 0: from shard_rank, tp_rank with the EP ranks innermost of
	 * dp_shard x cp x tp).  ep_degree 1: the experts are sharded as every
	 * other parameter.  Under EP the experts are never TP-split. */
	int ep_rank, ep_degree, ep_shard_rank, ep_shard_degree;
	int tp_rank, tp_degree;   /* tensor-parallel slice (0, 1: none), see above;
				     FSDP's dim-0 shard is taken of the TP slice */
	/* Pipeline stages (stages.n > 0): only the parameters of their
	 * blocks, tok_embeddings on a `first` stage and norm + output on a
	 * `last` one are held; the others stay in the table (names, shapes,
	 * full_offset) with no rows (local_numel 0), so every stage's table
	 * lists the same parameters (checkpoints, grad norm). */
	struct titan_pp_stages stages;
};

struct titan_param_table {
	struct titan_model_dims dims;
	struct titan_param_table_opts opts;
	int n;                    /* parameters */
	struct titan_param *params; /* owned, torchtitan order */
	int64_t numel;            /* logical unique elements (= titan_model_count_params total) */
	int64_t local_numel;      /* elements held by this shard */
	int64_t arena_floats;     /* arena size in floats, padding included */
	int64_t full_arena_floats;/* the same for the unsharded table */
	int *index;               /* [n_layers][TITAN_PARAM_NROLES]: table index or -1 */
};

/* Defaults: depth_init true, unsharded, no TP. */
void titan_param_table_opts_default(struct titan_param_table_opts *o);
/* Build the table for `d`; `o` may be NULL (defaults).  TITAN_E_INVALID for
 * non-positive dims or a bad shard rank/degree, TITAN_E_NOMEM.  On failure
 * the table is left empty (releasing it is still fine). */
int titan_param_table_init(struct titan_param_table *t, const struct titan_model_dims *d,
			   const struct titan_param_table_opts *o);
void titan_param_table_release(struct titan_param_table *t); /* NULL-safe */
/* Lookup by name; NULL when absent (e.g. "output.weight" of a tied model). */
const struct titan_param *titan_param_find(const struct titan_param_table *t, const char *name);
/* Index of the parameter of `role` in block `layer` (-1 for non-block
 * roles), or -1 when absent (TITAN_PARAM_OUTPUT of a tied model). */
int titan_param_index(const struct titan_param_table *t, enum titan_param_role role, int layer);

/* One allocation of table->arena_floats floats (zeroed) through the tagged
 * allocator under `tag`: TITAN_MEM_PARAMS for weights, TITAN_MEM_GRADS for
 * gradients, TITAN_MEM_OPTIM for each AdamW moment.  The data pointer is
 * whatever the allocator's backend returns (64-byte aligned for the host
 * backend), so every tensor view is 64-byte aligned.  The arena keeps a
 * pointer to the table (which must outlive it). */
struct titan_param_arena {
	const struct titan_param_table *table;
	struct titan_allocator *alloc;
	enum titan_mem_tag tag;
	float *data;
};
/* `alloc` NULL = the host allocator.  TITAN_E_NOMEM naming the tag. */
int titan_param_arena_init(struct titan_param_arena *a, const struct titan_param_table *t,
			   struct titan_allocator *alloc, enum titan_mem_tag tag);
void titan_param_arena_release(struct titan_param_arena *a); /* NULL-safe, idempotent */
/* The tensor of `p` (local rows) in the arena. */
static inline float *titan_param_view(const struct titan_param_arena *a,
				      const struct titan_param *p)
{
	return a->data + p->offset;
}

/* torchtitan's init_weights (notes §1), from counter-based random numbers:
 * parameter p takes the stream titan_rng_stream_id(p->name, 0) under `seed`,
 * element e (row-major over the logical shape) is value number e of that
 * stream.  So any row range initialised alone equals the same rows of the
 * whole tensor, whatever the sharding or thread count.
 *
 * titan_model_init_param_rows fills `out` with rows [row0, row0 + nrows)
 * of p's logical tensor (nrows·shape[1] floats; with TP the rows of its
 * TP slice, taking the global tensor's elements); the range must lie inside
 * shape[0] (an assert: callers compute it).  titan_model_init_params
 * fills every parameter's local rows of a TITAN_MEM_PARAMS arena (OpenMP
 * over chunks; the result does not depend on the thread count).  Host
 * memory only. */
void titan_model_init_param_rows(const struct titan_param *p, uint64_t seed, int64_t row0,
				 int64_t nrows, float *out);
void titan_model_init_params(const struct titan_param_arena *a, uint64_t seed);

/* ------------------------------------------------ layouts (layout.c) */

/* Stage `stage` of `nstages` by torchtitan's split:
 * parallelism.pipeline_parallel_split_points ("layers.N" starts a stage),
 * or layers_per_stage, or automatic (generate_llm_fqn_per_model_part:
 * n_layers + 2 units — the embedding and norm + output weigh one block
 * each — evenly, the first stages one more).  titan-train and
 * titan-estimate both split with it.  TITAN_E_INVALID naming the key and
 * the numbers when it cannot. */
int titan_pp_split(const struct titan_config *c, int64_t n_layers, int nstages, int stage,
		   struct titan_pp_stage *out);
/* What tensor and context parallelism need of the model and the batch:
 * tp divides n_heads, n_kv_heads and the FFN hidden size; seq_len is
 * divisible by tp x 2 x cp (2·cp load-balanced chunks per sequence, each
 * rank's tokens sharded by tp for sequence parallelism), and a
 * microbatch's `rows` x seq_len / cp tokens by tp.  TITAN_E_INVALID naming
 * the keys and the numbers. */
int titan_model_check_tp_cp(const struct titan_model_dims *d, int64_t tp, int64_t cp,
			    int64_t seq_len, int64_t rows);

#ifdef __cplusplus
}
#endif
#endif
