/*
 * params.c — the parameter table of torchtitan's Llama 3 (names, shapes and
 * order of Transformer.state_dict()), arenas of one layout for parameters,
 * gradients and optimizer moments, and init_weights (torchtitan
 * models/llama3/model/model.py: Transformer / Attention / FeedForward
 * .init_weights; HEAD's tied 1B/3B give the shared matrix the output init).
 */
#include "titan/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"

void titan_param_table_opts_default(struct titan_param_table_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->depth_init = true;
	o->shard_rank = 0;
	o->shard_degree = 1;
	o->tp_rank = 0;
	o->tp_degree = 1;
	o->ep_degree = 1;
}

static struct titan_param_init trunc_init(double std, double a, double b)
{
	return (struct titan_param_init){ TITAN_INIT_TRUNC_NORMAL, 0.0f, (float)std,
					  (float)a, (float)b };
}

/* Append one parameter; shapes are logical, sharding is applied later. */
static void add(struct titan_param_table *t, enum titan_param_role role, int layer,
		const char *suffix, int64_t d0, int64_t d1, struct titan_param_init init)
{
	struct titan_param *p = &t->params[t->n++];

	memset(p, 0, sizeof(*p));
	if (layer >= 0)
		snprintf(p->name, sizeof(p->name), "layers.%d.%s", layer, suffix);
	else
		snprintf(p->name, sizeof(p->name), "%s", suffix);
	p->role = role;
	p->layer = layer;
	p->ndim = d1 > 0 ? 2 : 1;
	p->shape[0] = d0;
	p->shape[1] = d1 > 0 ? d1 : 1;
	p->numel = p->shape[0] * p->shape[1];
	p->tp_dim = -1;
	p->gshape[0] = p->shape[0];
	p->gshape[1] = p->shape[1];
	p->init = init;
	p->is_norm = role == TITAN_PARAM_ATTENTION_NORM || role == TITAN_PARAM_FFN_NORM ||
		     role == TITAN_PARAM_NORM || role == TITAN_PARAM_Q_NORM ||
		     role == TITAN_PARAM_K_NORM || role == TITAN_PARAM_MLA_Q_NORM ||
		     role == TITAN_PARAM_MLA_KV_NORM;
	p->is_embedding = role == TITAN_PARAM_TOK_EMBEDDINGS;
	p->is_buffer = role == TITAN_PARAM_MOE_EXPERT_BIAS;
	p->fndim = p->ndim;
	p->fshape[0] = d0;
	p->fshape[1] = d1;
	if (layer >= 0)
		t->index[layer * TITAN_PARAM_NROLES + role] = t->n - 1;
}

/* The stacked experts [E, a, b]: held as E rows of a·b (FSDP's dim-0
 * shard keeps whole experts, as torchtitan's Shard(0) of dim E), stored in
 * checkpoints as the 3-d tensor. */
static void add3(struct titan_param_table *t, enum titan_param_role role, int layer,
		 const char *suffix, int64_t E, int64_t a, int64_t b, struct titan_param_init init)
{
	struct titan_param *p;

	add(t, role, layer, suffix, E, a * b, init);
	p = &t->params[t->n - 1];
	p->fndim = 3;
	p->fshape[0] = E;
	p->fshape[1] = a;
	p->fshape[2] = b;
}

/* *acc += a·b; false when that overflows int64. */
static bool mul_add(int64_t *acc, int64_t a, int64_t b)
{
	int64_t p;

	return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(*acc, p, acc);
}

/* q and kv rows and the model's element count, all in int64 with room for
 * the arena's alignment padding (dims from a file can be anything). */
static bool model_fits(const struct titan_model_dims *d, int64_t *q, int64_t *kv)
{
	const int64_t C = d->dim, F = d->ffn_hidden;
	int64_t block = 0, n = 0;

	*q = *kv = 0;
	if (d->moe.num_experts > 0) { /* a MoE block's feed-forward on top of a dense one */
		const int64_t E = d->moe.num_experts, Fm = d->moe.inter_dim;
		const int64_t Fs = Fm * d->moe.num_shared_experts;

		int64_t ef = 0, fs = 0;

		/* 3 E Fm C + 3 Fs C + E C + E */
		if (!mul_add(&ef, E, Fm) || !mul_add(&fs, Fs, 1) || !mul_add(&ef, fs, 1) ||
		    !mul_add(&block, ef, C) || !mul_add(&block, ef, C) || !mul_add(&block, ef, C) ||
		    !mul_add(&block, E, C) || !mul_add(&block, E, 1))
			return false;
	}
	if (titan_model_mla(d)) { /* MLA's projections on top of wq, wk, wv */
		const struct titan_mla_dims *m = &d->mla;
		int64_t r = 0, hv = 0;

		if (m->q_lora_rank < 0 || m->qk_rope_head_dim < 0 || m->qk_nope_head_dim < 0 ||
		    m->v_head_dim < 0 || !mul_add(&r, m->q_lora_rank, 1) ||
		    !mul_add(&r, m->kv_lora_rank, 1) || !mul_add(&r, m->qk_rope_head_dim, 1) ||
		    !mul_add(&hv, d->n_heads, m->qk_nope_head_dim + m->v_head_dim) ||
		    !mul_add(&block, r, C) || !mul_add(&block, r, 2) ||
		    !mul_add(&block, d->n_heads * d->head_dim, m->q_lora_rank) ||
		    !mul_add(&block, hv, m->kv_lora_rank) || !mul_add(&block, hv, C))
			return false;
	}
	return mul_add(q, d->n_heads, d->head_dim) && mul_add(kv, d->n_kv_heads, d->head_dim) &&
	       mul_add(&block, *q, C) && mul_add(&block, *q, C) &&           /* wq, wo */
	       mul_add(&block, *kv, C) && mul_add(&block, *kv, C) &&         /* wk, wv */
	       mul_add(&block, F, C) && mul_add(&block, F, C) && mul_add(&block, F, C) &&
	       mul_add(&block, 2, C) && mul_add(&block, 2, d->head_dim) &&   /* norms */
	       mul_add(&n, d->n_layers, block) &&
	       mul_add(&n, d->vocab_size, C) && mul_add(&n, d->vocab_size, C) &&
	       mul_add(&n, 1, C) && n < INT64_MAX / 2;
}

int titan_param_table_init(struct titan_param_table *t, const struct titan_model_dims *d,
			   const struct titan_param_table_opts *o)
{
	struct titan_param_table_opts def;
	const int64_t C = d->dim, F = d->ffn_hidden, V = d->vocab_size;
	int64_t q = 0, kv = 0;

	memset(t, 0, sizeof(*t));
	if (!o) {
		titan_param_table_opts_default(&def);
		o = &def;
	}
	if (C <= 0 || d->n_layers <= 0 || d->n_heads <= 0 || d->n_kv_heads <= 0 ||
	    d->head_dim <= 0 || F <= 0 || V <= 0 || d->n_layers > (1 << 20))
		return titan_error(TITAN_E_INVALID,
				   "model dims: dim %lld, n_layers %lld, heads %lld x %lld, "
				   "kv heads %lld, ffn %lld, vocab %lld: every size must be positive",
				   (long long)C, (long long)d->n_layers, (long long)d->n_heads,
				   (long long)d->head_dim, (long long)d->n_kv_heads,
				   (long long)F, (long long)V);
	if (!model_fits(d, &q, &kv))
		return titan_error(TITAN_E_INVALID,
				   "model dims: dim %lld, n_layers %lld, heads %lld x %lld, "
				   "kv heads %lld, ffn %lld, vocab %lld: too many parameters to "
				   "count in 64 bits", (long long)C, (long long)d->n_layers,
				   (long long)d->n_heads, (long long)d->head_dim,
				   (long long)d->n_kv_heads, (long long)F, (long long)V);
	if (o->shard_degree < 1 || o->shard_rank < 0 || o->shard_rank >= o->shard_degree)
		return titan_error(TITAN_E_INVALID, "parameter shard %d of %d is not a shard",
				   o->shard_rank, o->shard_degree);
	const bool ep = o->ep_degree > 1;
	/* EP's region is dp_shard x cp x tp (torchtitan's sparse mesh), the
	 * EP ranks innermost: by default this rank's place in it, f =
	 * shard_rank·tp + tp_rank, is EP rank f mod ep of efsdp rank f / ep */
	const int tpd = o->tp_degree > 1 ? o->tp_degree : 1;
	const int ep_sdeg = !ep ? 1 : o->ep_shard_degree > 0 ? o->ep_shard_degree :
			    o->shard_degree * tpd / o->ep_degree;
	const int ep_srank = !ep ? 0 : o->ep_shard_degree > 0 ? o->ep_shard_rank :
			     (o->shard_rank * tpd + o->tp_rank) / o->ep_degree;

	if (ep && (d->moe.num_experts % o->ep_degree || o->ep_rank < 0 ||
		   o->ep_rank >= o->ep_degree || ep_sdeg * o->ep_degree != o->shard_degree * tpd ||
		   ep_srank < 0 || ep_srank >= ep_sdeg))
		return titan_error(TITAN_E_INVALID, "expert-parallel rank %d of %d (experts "
				   "sharded %d of %d) does not split model.moe_num_experts %lld over "
				   "parameter shards %d x TP %d", o->ep_rank, o->ep_degree, ep_srank,
				   ep_sdeg, (long long)d->moe.num_experts, o->shard_degree, tpd);
	if (o->tp_degree < 1 || o->tp_rank < 0 || o->tp_rank >= o->tp_degree)
		return titan_error(TITAN_E_INVALID, "tensor-parallel rank %d of %d is not a rank",
				   o->tp_rank, o->tp_degree);
	if (d->n_heads % o->tp_degree || d->n_kv_heads % o->tp_degree || F % o->tp_degree ||
	    V < o->tp_degree)
		return titan_error(TITAN_E_INVALID,
				   "parallelism.tensor_parallel_degree %d must divide n_heads %lld, "
				   "n_kv_heads %lld and the FFN hidden size %lld (and not exceed "
				   "the vocabulary, %lld)", o->tp_degree, (long long)d->n_heads,
				   (long long)d->n_kv_heads, (long long)F, (long long)V);

	if (d->moe.num_experts > 0 &&
	    (d->moe.top_k < 1 || d->moe.top_k > d->moe.num_experts || d->moe.inter_dim <= 0 ||
	     d->moe.num_shared_experts < 0))
		return titan_error(TITAN_E_INVALID,
				   "model.moe_top_k %lld must be in [1, moe_num_experts %lld] and "
				   "model.moe_inter_dim %lld positive", (long long)d->moe.top_k,
				   (long long)d->moe.num_experts, (long long)d->moe.inter_dim);
	/* TP of the experts without EP: each rank holds inter_dim / tp of
	 * every one (torchtitan's TP of GroupedExperts); under EP x TP the
	 * experts are whole (ETP 1) and the shared experts split so */
	if (d->moe.num_experts > 0 && o->tp_degree > 1 && d->moe.inter_dim % o->tp_degree)
		return titan_error(TITAN_E_INVALID, "parallelism.tensor_parallel_degree %d: does "
				   "not divide the experts' hidden size (model.moe_inter_dim %lld)",
				   o->tp_degree, (long long)d->moe.inter_dim);

	const int L = (int)d->n_layers;
	const int nmax = 3 + (TITAN_PARAMS_PER_LAYER_MAX + 6) * L;

	if (!(t->params = calloc((size_t)nmax, sizeof(*t->params))) ||
	    !(t->index = malloc((size_t)L * TITAN_PARAM_NROLES * sizeof(*t->index)))) {
		free(t->params);
		t->params = NULL;
		return titan_error(TITAN_E_NOMEM, "out of memory for %d parameters", nmax);
	}
	for (int i = 0; i < L * TITAN_PARAM_NROLES; i++)
		t->index[i] = -1;
	t->dims = *d;
	t->opts = *o;
	t->opts.ep_shard_rank = ep_srank;
	t->opts.ep_shard_degree = ep_sdeg;

	const double out_std = 1.0 / sqrt((double)C);
	const struct titan_param_init ones = { TITAN_INIT_ONES, 0, 0, 0, 0 };
	const struct titan_param_init linear = trunc_init(0.02, -2.0, 2.0);
	const struct titan_param_init output = trunc_init(out_std, -3.0 * out_std, 3.0 * out_std);
	const struct titan_param_init embed = { TITAN_INIT_NORMAL, 0.0f, 1.0f, 0, 0 };

	add(t, TITAN_PARAM_TOK_EMBEDDINGS, -1, "tok_embeddings.weight", V, C,
	    d->tied ? output : embed);
	for (int i = 0; i < L; i++) {
		double s = o->depth_init ? 0.02 / sqrt(2.0 * (i + 1)) : 0.02 / sqrt(2.0 * L);
		struct titan_param_init depth = trunc_init(s, -2.0, 2.0);

		/* named_parameters() order: attention (Qwen3's registers q_norm
		 * and k_norm before wq), feed_forward, then the norms */
		if (d->qk_norm) {
			add(t, TITAN_PARAM_Q_NORM, i, "attention.q_norm.weight", d->head_dim, 0, ones);
			add(t, TITAN_PARAM_K_NORM, i, "attention.k_norm.weight", d->head_dim, 0, ones);
		}
		if (titan_model_mla(d)) {
			/* DeepSeek-V3's Attention: wq (or wq_a, q_norm, wq_b),
			 * wkv_a, kv_norm, wkv_b, wo */
			const struct titan_mla_dims *m = &d->mla;
			const int64_t R = m->kv_lora_rank, Q = m->q_lora_rank;

			if (Q > 0) {
				add(t, TITAN_PARAM_MLA_WQ_A, i, "attention.wq_a.weight", Q, C, linear);
				add(t, TITAN_PARAM_MLA_Q_NORM, i, "attention.q_norm.weight", Q, 0, ones);
				add(t, TITAN_PARAM_MLA_WQ_B, i, "attention.wq_b.weight", q, Q, linear);
			} else {
				add(t, TITAN_PARAM_WQ, i, "attention.wq.weight", q, C, linear);
			}
			add(t, TITAN_PARAM_MLA_WKV_A, i, "attention.wkv_a.weight",
			    R + m->qk_rope_head_dim, C, linear);
			add(t, TITAN_PARAM_MLA_KV_NORM, i, "attention.kv_norm.weight", R, 0, ones);
			add(t, TITAN_PARAM_MLA_WKV_B, i, "attention.wkv_b.weight",
			    d->n_heads * (m->qk_nope_head_dim + m->v_head_dim), R, linear);
			add(t, TITAN_PARAM_WO, i, "attention.wo.weight", C,
			    d->n_heads * m->v_head_dim, depth);
		} else {
			add(t, TITAN_PARAM_WQ, i, "attention.wq.weight", q, C, linear);
			add(t, TITAN_PARAM_WK, i, "attention.wk.weight", kv, C, linear);
			add(t, TITAN_PARAM_WV, i, "attention.wv.weight", kv, C, linear);
			add(t, TITAN_PARAM_WO, i, "attention.wo.weight", C, q, depth);
		}
		/* DeepSeek-V3's block registers its norms before moe /
		 * feed_forward */
		const bool norms_first = d->family == TITAN_MODEL_NAME_DEEPSEEK_V3;

		if (norms_first) {
			add(t, TITAN_PARAM_ATTENTION_NORM, i, "attention_norm.weight", C, 0, ones);
			add(t, TITAN_PARAM_FFN_NORM, i, "ffn_norm.weight", C, 0, ones);
		}
		if (titan_model_layer_is_moe(d, i)) {
			/* torchtitan's MoE: experts, router, shared_experts, then
			 * the expert_bias buffer (state_dict order); init_weights
			 * as FeedForward's: w1 0.02, the others the depth std */
			const int64_t E = d->moe.num_experts, Fm = d->moe.inter_dim;
			const int64_t Fs = Fm * d->moe.num_shared_experts;

			add3(t, TITAN_PARAM_MOE_W1, i, "moe.experts.w1", E, Fm, C, linear);
			add3(t, TITAN_PARAM_MOE_W2, i, "moe.experts.w2", E, C, Fm, depth);
			add3(t, TITAN_PARAM_MOE_W3, i, "moe.experts.w3", E, Fm, C, depth);
			add(t, TITAN_PARAM_MOE_GATE, i, "moe.router.gate.weight", E, C, depth);
			if (Fs > 0) {
				add(t, TITAN_PARAM_MOE_SHARED_W1, i, "moe.shared_experts.w1.weight",
				    Fs, C, linear);
				add(t, TITAN_PARAM_MOE_SHARED_W2, i, "moe.shared_experts.w2.weight",
				    C, Fs, depth);
				add(t, TITAN_PARAM_MOE_SHARED_W3, i, "moe.shared_experts.w3.weight",
				    Fs, C, depth);
			}
		} else {
			add(t, TITAN_PARAM_W1, i, "feed_forward.w1.weight", F, C, linear);
			add(t, TITAN_PARAM_W2, i, "feed_forward.w2.weight", C, F, depth);
			add(t, TITAN_PARAM_W3, i, "feed_forward.w3.weight", F, C, depth);
		}
		if (!norms_first) {
			add(t, TITAN_PARAM_ATTENTION_NORM, i, "attention_norm.weight", C, 0, ones);
			add(t, TITAN_PARAM_FFN_NORM, i, "ffn_norm.weight", C, 0, ones);
		}
		/* buffers follow the parameters in state_dict() */
		if (titan_model_layer_is_moe(d, i) && titan_model_moe_balanced(d))
			add(t, TITAN_PARAM_MOE_EXPERT_BIAS, i, "moe.expert_bias", d->moe.num_experts,
			    0, (struct titan_param_init){ TITAN_INIT_ZEROS, 0, 0, 0, 0 });
	}
	add(t, TITAN_PARAM_NORM, -1, "norm.weight", C, 0, ones);
	if (!d->tied)
		add(t, TITAN_PARAM_OUTPUT, -1, "output.weight", V, C, output);

	/* TP slices (torchtitan's Llama plan; the vocabulary with torch.chunk's
	 * split, the head and hidden dims evenly), then local rows (torch.chunk
	 * split) and aligned offsets. */
	for (int i = 0; o->tp_degree > 1 && i < t->n; i++) {
		struct titan_param *p = &t->params[i];
		const int64_t tp = o->tp_degree;

		switch (p->role) {
		case TITAN_PARAM_TOK_EMBEDDINGS: case TITAN_PARAM_OUTPUT: {
			int64_t chunk = (V + tp - 1) / tp, r0 = chunk * o->tp_rank;

			r0 = r0 < V ? r0 : V;
			p->tp_dim = 0;
			p->tp_off = r0;
			p->shape[0] = (r0 + chunk < V ? r0 + chunk : V) - r0;
			break;
		}
		/* MLA (torchtitan's deepseek_v3 plan): wq_b and wkv_b are
		 * colwise, rows head-major, so each rank holds H/tp heads; wq_a,
		 * wkv_a and the norms of the latents stay whole (replicated) */
		case TITAN_PARAM_WQ: case TITAN_PARAM_WK: case TITAN_PARAM_WV:
		case TITAN_PARAM_W1: case TITAN_PARAM_W3:
		case TITAN_PARAM_MLA_WQ_B: case TITAN_PARAM_MLA_WKV_B:
			p->tp_dim = 0;
			p->shape[0] = p->gshape[0] / tp;
			p->tp_off = p->shape[0] * o->tp_rank;
			break;
		case TITAN_PARAM_WO: case TITAN_PARAM_W2:
		case TITAN_PARAM_MOE_SHARED_W2:
			p->tp_dim = 1;
			p->shape[1] = p->gshape[1] / tp;
			p->tp_off = p->shape[1] * o->tp_rank;
			break;
		case TITAN_PARAM_MOE_SHARED_W1: case TITAN_PARAM_MOE_SHARED_W3:
			p->tp_dim = 0;
			p->shape[0] = p->gshape[0] / tp;
			p->tp_off = p->shape[0] * o->tp_rank;
			break;
		/* the experts' hidden dim: w1/w3 [E, F, C] on dim 1, w2
		 * [E, C, F] on dim 2; each rank holds F/tp of every expert
		 * (under EP: whole experts, the EP rank's, below) */
		case TITAN_PARAM_MOE_W1: case TITAN_PARAM_MOE_W3: case TITAN_PARAM_MOE_W2: {
			const int dim = p->role == TITAN_PARAM_MOE_W2 ? 2 : 1;

			if (ep)
				break;

			p->tp_dim = dim;
			p->tp_off = p->fshape[dim] / tp * o->tp_rank;
			p->shape[1] = p->gshape[1] / tp;
			break;
		}
		default:
			break;
		}
		p->numel = p->shape[0] * p->shape[1];
	}
	int64_t off = 0, full = 0;
	for (int i = 0; i < t->n; i++) {
		struct titan_param *p = &t->params[i];
		/* EP: the stacked experts' view is this EP rank's experts,
		 * sharded over its efsdp peers; every other view is the whole
		 * tensor, sharded over all shard ranks */
		const bool eps = ep && (p->role == TITAN_PARAM_MOE_W1 ||
					p->role == TITAN_PARAM_MOE_W2 ||
					p->role == TITAN_PARAM_MOE_W3);
		const int deg = eps ? ep_sdeg : o->shard_degree, rank = eps ? ep_srank : o->shard_rank;

		p->ep_sharded = eps;
		p->full_rows = eps ? p->shape[0] / o->ep_degree : p->shape[0];
		p->full_row0 = eps ? p->full_rows * o->ep_rank : 0;

		const int64_t end = p->full_row0 + p->full_rows;
		int64_t chunk = (p->full_rows + deg - 1) / deg;
		int64_t r0 = p->full_row0 + chunk * rank, r1 = r0 + chunk;

		p->chunk_rows = chunk;
		p->full_offset = full;
		full += (p->full_rows * p->shape[1] + TITAN_PARAM_ALIGN - 1) / TITAN_PARAM_ALIGN *
			TITAN_PARAM_ALIGN;

		if (r0 > end)
			r0 = end;
		if (r1 > end)
			r1 = end;
		if (o->stages.n > 0) {
			bool mine = false;

			for (int k = 0; k < o->stages.n; k++) {
				const struct titan_pp_stage *s = &o->stages.v[k];

				mine = mine || (p->layer >= 0 ? p->layer >= s->l0 && p->layer < s->l1 :
						p->role == TITAN_PARAM_TOK_EMBEDDINGS ? s->first
										      : s->last);
			}
			if (!mine)
				r0 = r1 = 0; /* another pipeline stage's */
		}
		p->row0 = r0;
		p->rows = r1 - r0;
		p->local_numel = p->rows * p->shape[1];
		p->offset = off;
		off += (p->local_numel + TITAN_PARAM_ALIGN - 1) / TITAN_PARAM_ALIGN *
		       TITAN_PARAM_ALIGN;
		t->numel += p->is_buffer ? 0 : p->numel;
		t->local_numel += p->local_numel;
	}
	t->arena_floats = off;
	t->full_arena_floats = full;
	return 0;
}

void titan_param_table_release(struct titan_param_table *t)
{
	if (!t)
		return;
	free(t->params);
	free(t->index);
	memset(t, 0, sizeof(*t));
}

const struct titan_param *titan_param_find(const struct titan_param_table *t, const char *name)
{
	for (int i = 0; i < t->n; i++)
		if (strcmp(t->params[i].name, name) == 0)
			return &t->params[i];
	return NULL;
}

int titan_param_index(const struct titan_param_table *t, enum titan_param_role role, int layer)
{
	bool in_block = role != TITAN_PARAM_TOK_EMBEDDINGS && role != TITAN_PARAM_NORM &&
			role != TITAN_PARAM_OUTPUT;

	if ((unsigned)role >= TITAN_PARAM_NROLES)
		return -1;
	if (in_block) {
		if (layer < 0 || layer >= t->dims.n_layers)
			return -1;
		return t->index[layer * TITAN_PARAM_NROLES + role];
	}
	if (layer != -1)
		return -1;
	if (role == TITAN_PARAM_TOK_EMBEDDINGS)
		return 0;
	if (role == TITAN_PARAM_NORM)
		return t->n - (t->dims.tied ? 1 : 2);
	if (role == TITAN_PARAM_OUTPUT && !t->dims.tied)
		return t->n - 1;
	return -1;
}

int titan_param_arena_init(struct titan_param_arena *a, const struct titan_param_table *t,
			   struct titan_allocator *alloc, enum titan_mem_tag tag)
{
	memset(a, 0, sizeof(*a));
	if (!alloc)
		alloc = titan_host_allocator();
	if ((uint64_t)t->arena_floats > SIZE_MAX / sizeof(float))
		return titan_error(TITAN_E_NOMEM, "%s arena of %lld floats does not fit in memory",
				   titan_mem_tag_name(tag), (long long)t->arena_floats);
	a->data = titan_mem_calloc(alloc, (size_t)t->arena_floats * sizeof(float), tag);
	if (!a->data)
		return titan_error_prefix("%s arena", titan_mem_tag_name(tag));
	a->table = t;
	a->alloc = alloc;
	a->tag = tag;
	return 0;
}

void titan_param_arena_release(struct titan_param_arena *a)
{
	if (!a)
		return;
	if (a->data)
		titan_mem_free(a->alloc, a->data);
	memset(a, 0, sizeof(*a));
}

/* ------------------------------------------------------------------ init */

/* Elements [first, first + n) of p's logical tensor, row-major. */
static void init_range(const struct titan_param *p, uint64_t seed, uint64_t first,
		       float *out, size_t n)
{
	const struct titan_param_init *in = &p->init;
	struct titan_rng r;

	switch (in->kind) {
	case TITAN_INIT_ONES:
		for (size_t j = 0; j < n; j++)
			out[j] = 1.0f;
		return;
	case TITAN_INIT_ZEROS:
		memset(out, 0, n * sizeof(float));
		return;
	case TITAN_INIT_NORMAL:
		titan_rng_init(&r, seed, titan_rng_stream_id(p->name, 0));
		titan_rng_fill_normal(&r, first, out, n, in->mean, in->std);
		return;
	case TITAN_INIT_TRUNC_NORMAL:
		titan_rng_init(&r, seed, titan_rng_stream_id(p->name, 0));
		titan_rng_fill_trunc_normal(&r, first, out, n, in->mean, in->std, in->a, in->b);
		return;
	}
	TITAN_ASSERT(!"unknown init kind");
}

#define INIT_CHUNK ((int64_t)1 << 16) /* elements per OpenMP task */

static void init_elems(const struct titan_param *p, uint64_t seed, int64_t first,
		       int64_t n, float *out)
{
	int64_t nchunks = (n + INIT_CHUNK - 1) / INIT_CHUNK;

	if (nchunks <= 1) {
		init_range(p, seed, (uint64_t)first, out, (size_t)n);
		return;
	}
#pragma omp parallel for schedule(dynamic, 1)
	for (int64_t c = 0; c < nchunks; c++) {
		int64_t s = c * INIT_CHUNK, k = n - s < INIT_CHUNK ? n - s : INIT_CHUNK;

		init_range(p, seed, (uint64_t)(first + s), out + s, (size_t)k);
	}
}

void titan_model_init_param_rows(const struct titan_param *p, uint64_t seed, int64_t row0,
				 int64_t nrows, float *out)
{
	TITAN_ASSERT(row0 >= 0 && nrows >= 0 && row0 + nrows <= p->shape[0]);
	int64_t w0, wn;
	const int wdim = titan_param_tp_window(p, &w0, &wn);

	if (wdim) { /* a window of each global row: mid pieces of wn·inner */
		int64_t mid = 1, inner = 1;

		for (int i = 1; i < wdim; i++)
			mid *= p->fshape[i];
		for (int i = wdim + 1; i < p->fndim; i++)
			inner *= p->fshape[i];
		for (int64_t r = 0; r < nrows; r++)
			for (int64_t m = 0; m < mid; m++)
				init_elems(p, seed, (row0 + r) * p->gshape[1] +
					   (m * p->fshape[wdim] + w0) * inner, wn * inner,
					   out + r * p->shape[1] + m * wn * inner);
		return;
	}
	if (p->tp_dim == 0)
		row0 += p->tp_off;
	init_elems(p, seed, row0 * p->shape[1], nrows * p->shape[1], out);
}

void titan_model_init_params(const struct titan_param_arena *a, uint64_t seed)
{
	const struct titan_param_table *t = a->table;

	for (int i = 0; i < t->n; i++) {
		const struct titan_param *p = &t->params[i];

		titan_model_init_param_rows(p, seed, p->row0, p->rows, titan_param_view(a, p));
	}
}
