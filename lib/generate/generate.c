/*
 * generate.c — the inference forward of a Llama 3 with a KV cache, and the
 * generation loop (prefill, then sample / emit / feed one token at a
 * time).  The block is the training model's, lib/train/block.c, for the
 * tokens at positions pos .. pos+n−1 of one sequence, with the identity
 * sequence-parallel moves and the KV-cache attention (lib/train/attn_kv.c):
 * keys and values (after RoPE) go straight into a per-layer cache; a MoE
 * block's feed-forward is moe.c's with the local dispatch (every expert
 * here), over one set of activations sized for a chunk.  torchtitan
 * counterpart: scripts/generate/_generation.py (generate, generate_next_token)
 * with the KV cache of transformers' LlamaForCausalLM.
 */
#include "titan/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/block.h"
#include "train/cp.h"
#include "train/tp.h"

#define DEFAULT_BATCH 256

struct titan_generator {
	const struct titan_param_table *t;
	const float *params;
	struct titan_model_dims d;
	struct titan_backend *be;
	struct titan_allocator *alloc;
	int64_t capacity, batch, pos;
	int64_t q, kv;           /* H·D, Hkv·D */
	int nthreads;
	float *freqs;            /* [capacity, D/2, 2] */
	float **kc, **vc;        /* per layer [capacity, Hkv·D] */
	float *x, *xn, *qb, *att, *lse, *rstd, *a, *b, *xl; /* activations of one chunk */
	float *k0;               /* QK-norm: wk x of a chunk [batch, Hkv·D] (NULL without) */
	float *scores;           /* [nthreads, capacity + D] */
	uint32_t *ids;           /* [batch] */
	int32_t *doc;            /* block_causal: document id per position [capacity] */
	int64_t doc_eos;         /* ... ending at this id; -1: one document */
	/* Llama 4's chunked attention (a capacity past fixed_attn_block_size
	 * `chunk`; 0: none): the RoPE blocks' ids per position [capacity],
	 * doc + p / chunk (train/cp.h titan_cp_chunk_ids) */
	int32_t *cid;
	int64_t chunk;
	int32_t prev;            /* the token at pos - 1 */
	struct titan_sp sp;      /* the identity; n = a chunk's tokens */
	struct titan_attn_kv kva;
	struct titan_moe moe;    /* MoE blocks (moe.h): the local dispatch, n = a chunk's */
	struct moe_acts ma;      /* ... their activations of one chunk, shared by the blocks */
	/* multi-head latent attention (deepseek_v3): its activations of one
	 * chunk and its YaRN RoPE table [capacity, rope/2, 2]; the cache holds
	 * the expanded k (nope + rope) and v (padded) of every head */
	struct mla_acts mla;
	float *mla_freqs;
	void **blocks;           /* every allocation, for free */
	int nblocks;
};

static const float *W(const struct titan_generator *g, enum titan_param_role r, int layer)
{
	int i = titan_param_index(g->t, r, layer);

	if (i < 0 && r == TITAN_PARAM_OUTPUT) /* tied: the embedding */
		i = titan_param_index(g->t, TITAN_PARAM_TOK_EMBEDDINGS, -1);
	if (i < 0 && (r == TITAN_PARAM_Q_NORM || r == TITAN_PARAM_K_NORM))
		return NULL; /* no QK-norm */
	/* a MoE block has the moe.* roles in place of W1..W3, a dense one the
	 * reverse; the shared experts and expert_bias may be absent */
	if (i < 0 && layer >= 0 &&
	    (titan_model_layer_is_moe(&g->d, layer) ? r == TITAN_PARAM_W1 || r == TITAN_PARAM_W2 ||
	     r == TITAN_PARAM_W3 || r >= TITAN_PARAM_MOE_SHARED_W1 : r >= TITAN_PARAM_MOE_W1))
		return NULL;
	if (i < 0 && layer >= 0 && r != TITAN_PARAM_WO && r != TITAN_PARAM_ATTENTION_NORM &&
	    r != TITAN_PARAM_FFN_NORM && r < TITAN_PARAM_MOE_W1)
		return NULL; /* MLA: no wk, wv (nor wq with q_lora_rank); others: no MLA roles */
	if (i < 0 && r >= TITAN_PARAM_MLA_WQ_A)
		return NULL;
	TITAN_ASSERT(i >= 0);
	return g->params + g->t->params[i].offset;
}

static void *galloc(struct titan_generator *g, int64_t bytes, enum titan_mem_tag tag)
{
	void *p = titan_mem_alloc(g->alloc, (size_t)bytes, tag);

	if (p)
		g->blocks[g->nblocks++] = p;
	return p;
}

/* MLA's activations of a chunk and its RoPE table (block.h), when the
 * model has it. */
static int mla_init(struct titan_generator *g)
{
	const struct titan_model_dims *d = &g->d;
	const struct titan_mla_dims *m = &d->mla;
	const enum titan_mem_tag ws = TITAN_MEM_WORKSPACE;
	const int64_t B = g->batch, R = m->kv_lora_rank, Q = m->q_lora_rank, H = d->n_heads;
	struct mla_acts *a = &g->mla;

	if (!titan_model_mla(d))
		return 0;
	if ((Q > 0 && (!(a->cq0 = galloc(g, B * Q * 4, ws)) || !(a->rstdcq = galloc(g, B * 4, ws)) ||
		       !(a->cq = galloc(g, B * Q * 4, ws)))) ||
	    !(a->kv0 = galloc(g, B * (R + m->qk_rope_head_dim) * 4, ws)) ||
	    !(a->kvl = galloc(g, B * R * 4, ws)) || !(a->rstdkv = galloc(g, B * 4, ws)) ||
	    !(a->kvn = galloc(g, B * R * 4, ws)) ||
	    !(a->kvb = galloc(g, B * H * (m->qk_nope_head_dim + m->v_head_dim) * 4, ws)) ||
	    !(a->attv = galloc(g, B * H * m->v_head_dim * 4, ws)) ||
	    !(g->mla_freqs = galloc(g, g->capacity * m->qk_rope_head_dim * 4, TITAN_MEM_OTHER)))
		return TITAN_E_NOMEM;
	return titan_rope_freqs_yarn(g->mla_freqs, g->capacity, m->qk_rope_head_dim,
				     d->rope_theta, m->rope_factor, m->beta_fast, m->beta_slow,
				     m->original_seq_len);
}

/* The MoE blocks' activations for a chunk of `batch` tokens (moe.h;
 * llama.c's alloc_moe_acts without the recompute sets), when the model
 * has MoE blocks: every expert on this process, the local dispatch. */
static int moe_init(struct titan_generator *g)
{
	const struct titan_model_dims *d = &g->d;
	const struct titan_moe_dims *md = &d->moe;
	const int64_t B = g->batch, C = d->dim, E = md->num_experts, R = B * md->top_k;
	const int64_t Fm = md->inter_dim, Fs = Fm * md->num_shared_experts;
	const enum titan_mem_tag t = TITAN_MEM_ACTIVATIONS;
	struct moe_acts *a = &g->ma;
	bool any = false;

	for (int64_t l = 0; l < d->n_layers; l++)
		any = any || titan_model_layer_is_moe(d, l);
	if (!any)
		return 0;
	if (R > INT32_MAX) /* moe.h's int32 slot ids */
		return titan_error(TITAN_E_INVALID, "generator: a chunk of %lld tokens x top_k "
				   "%lld routed rows exceeds %d", (long long)B,
				   (long long)md->top_k, INT32_MAX);
	g->moe = (struct titan_moe){.be = g->be, .dispatch = &titan_moe_dispatch_local,
				    .d = &g->d.moe, .n = B, .C = C, .ep = NULL};
	if (!(a->scores = galloc(g, B * E * 4, t)) || !(a->topw = galloc(g, B * md->top_k * 4, t)) ||
	    !(a->topi = galloc(g, B * md->top_k * 4, t)) || !(a->perm = galloc(g, R * 4, t)) ||
	    !(a->pos = galloc(g, R * 4, t)) || !(a->counts = galloc(g, E * 4, t)) ||
	    !(a->xin = galloc(g, R * C * 4, t)) || !(a->a = galloc(g, R * Fm * 4, t)) ||
	    !(a->b = galloc(g, R * Fm * 4, t)) || !(a->g = galloc(g, R * Fm * 4, t)) ||
	    !(a->yout = galloc(g, R * C * 4, t)) ||
	    (Fs > 0 && (!(a->sa = galloc(g, B * Fs * 4, t)) || !(a->sb = galloc(g, B * Fs * 4, t)) ||
			!(a->sg = galloc(g, B * Fs * 4, t)))))
		return TITAN_E_NOMEM;
	return 0;
}

int titan_generator_new(const struct titan_param_table *t, const float *params,
			const struct titan_generator_opts *o, struct titan_backend *be,
			struct titan_allocator *alloc, struct titan_generator **out)
{
	struct titan_generator *g;
	const struct titan_model_dims *d = &t->dims;
	struct titan_rope_scaling sc = {d->rope_scaling_factor, d->rope_low_freq_factor,
					d->rope_high_freq_factor,
					(double)d->rope_original_max_position};
	const enum titan_mem_tag ws = TITAN_MEM_WORKSPACE, act = TITAN_MEM_ACTIVATIONS;
	int64_t B, C, F, L;
	bool whole = true;
	int rc = TITAN_E_NOMEM;

	*out = NULL;
	if (strcmp(be->ops->name, "cpu") != 0)
		return titan_error(TITAN_E_UNSUPPORTED, "generation runs on the cpu backend, not %s",
				   be->ops->name);
	for (int i = 0; i < t->n; i++) /* (t->numel leaves out expert_bias, a buffer) */
		whole = whole && t->params[i].local_numel == t->params[i].numel;
	if (t->opts.shard_degree > 1 || t->opts.tp_degree > 1 || !whole)
		return titan_error(TITAN_E_INVALID, "generation needs the whole model: the "
				   "parameter table is a shard");
	if (o->capacity < 1 || o->batch < 0)
		return titan_error(TITAN_E_INVALID, "generator: capacity %lld must be >= 1 and "
				   "batch %lld >= 0", (long long)o->capacity, (long long)o->batch);
	if (!(g = calloc(1, sizeof(*g))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	g->t = t;
	g->params = params;
	g->d = *d;
	g->be = be;
	g->alloc = alloc ? alloc : titan_host_allocator();
	g->capacity = o->capacity;
	g->batch = o->batch ? o->batch : DEFAULT_BATCH;
	if (g->batch > g->capacity)
		g->batch = g->capacity;
	g->nthreads = be->nthreads > 0 ? be->nthreads : 1;
	B = g->batch;
	C = d->dim;
	F = d->ffn_hidden;
	L = d->n_layers;
	g->q = d->n_heads * d->head_dim;
	g->kv = d->n_kv_heads * d->head_dim;
	if (!(g->blocks = calloc((size_t)(2 * L + 48), sizeof(*g->blocks))) ||
	    !(g->kc = calloc((size_t)L, sizeof(*g->kc))) ||
	    !(g->vc = calloc((size_t)L, sizeof(*g->vc))))
		goto fail;
	for (int64_t l = 0; l < L; l++)
		if (!(g->kc[l] = galloc(g, g->capacity * g->kv * 4, act)) ||
		    !(g->vc[l] = galloc(g, g->capacity * g->kv * 4, act)))
			goto fail;
	if (!(g->freqs = galloc(g, g->capacity * d->head_dim * 4, TITAN_MEM_OTHER)) ||
	    !(g->x = galloc(g, B * C * 4, ws)) || !(g->xn = galloc(g, B * C * 4, ws)) ||
	    !(g->qb = galloc(g, B * g->q * 4, ws)) || !(g->att = galloc(g, B * g->q * 4, ws)) ||
	    !(g->lse = galloc(g, B * d->n_heads * 4, ws)) || !(g->rstd = galloc(g, B * 4, ws)) ||
	    !(g->a = galloc(g, B * F * 4, ws)) ||
	    !(g->b = galloc(g, B * F * 4, ws)) || !(g->xl = galloc(g, C * 4, ws)) ||
	    !(g->scores = galloc(g, (int64_t)g->nthreads * (g->capacity + d->head_dim) * 4, ws)) ||
	    !(g->ids = galloc(g, B * 4, TITAN_MEM_DATA)) ||
	    (o->block_causal && !(g->doc = galloc(g, g->capacity * 4, TITAN_MEM_DATA))) ||
	    (d->nope_every > 1 && g->capacity > d->attn_chunk &&
	     !(g->cid = galloc(g, g->capacity * 4, TITAN_MEM_DATA))) ||
	    (d->qk_norm && !(g->k0 = galloc(g, B * g->kv * 4, ws))))
		goto fail;
	if ((rc = moe_init(g)) < 0 || (rc = mla_init(g)) < 0)
		goto fail;
	g->doc_eos = o->doc_eos;
	g->chunk = g->cid ? d->attn_chunk : 0;
	if ((rc = titan_rope_freqs(g->freqs, g->capacity, d->head_dim, d->rope_theta,
				   d->rope_scaling ? &sc : NULL)) < 0 ||
	    (rc = titan_sp_init(&g->sp, be, NULL, B, C, d->vocab_size, 0, d->vocab_size, 0, false,
				NULL, NULL)) < 0)
		goto fail;
	titan_attn_kv_init(&g->kva, be, d->n_heads, d->n_kv_heads, d->head_dim, g->capacity,
			   g->scores, g->nthreads);
	g->kva.doc = g->doc;
	*out = g;
	return 0;
fail:
	if (rc == TITAN_E_NOMEM && !titan_error_last()->code)
		titan_error(rc, "out of memory for the generator (KV cache of %lld positions)",
			    (long long)o->capacity);
	titan_generator_free(g);
	return rc;
}

void titan_generator_free(struct titan_generator *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->nblocks; i++)
		titan_mem_free(g->alloc, g->blocks[i]);
	free(g->blocks);
	free(g->kc);
	free(g->vc);
	free(g);
}

void titan_generator_reset(struct titan_generator *g)
{
	g->pos = 0;
}

int64_t titan_generator_pos(const struct titan_generator *g)
{
	return g->pos;
}

int64_t titan_generator_capacity(const struct titan_generator *g)
{
	return g->capacity;
}

int64_t titan_generator_vocab(const struct titan_generator *g)
{
	return g->d.vocab_size;
}

#define CK(call) do { if ((rc = (call)) < 0) return rc; } while (0)

/* Tokens ids[0..n) at positions pos .. pos+n−1 through every block (the
 * training model's, block.h); the residual stream of the chunk ends in
 * g->x, which each block updates in place (its h and output are x), and
 * the chunk's keys and values in the cache's rows pos.. . */
static int chunk_fwd(struct titan_generator *g, int64_t n)
{
	const struct titan_model_dims *d = &g->d;
	const int64_t D = d->head_dim, p0 = g->pos;
	struct titan_block k = {
		.be = g->be, .sp = &g->sp, .attn = &g->kva.cp, .freqs = g->freqs + p0 * D,
		.n = n, .B = 1, .T = n, .C = d->dim, .F = d->ffn_hidden, .H = d->n_heads,
		.Hkv = d->n_kv_heads, .D = D, .eps = (float)d->norm_eps,
		.mla = titan_model_mla(d) ? &d->mla : NULL,
		.mla_freqs = g->mla_freqs ? g->mla_freqs + p0 * d->mla.qk_rope_head_dim : NULL,
		.mla_qscale = titan_model_mla(d) ?
			      (float)(titan_model_mla_softmax_scale(d) * sqrt((double)D)) : 1.0f,
	};
	struct acts a = {
		.moe = g->ma, .xn1 = g->xn, .rstd1 = g->rstd, .q = g->qb, .att = g->att, .lse = g->lse,
		.h = g->x, .xn2 = g->xn, .rstd2 = g->rstd, .a = g->a, .b = g->b, .g = g->a,
		/* QK-norm's inputs: q's in att, k's in k0, then into the cache;
		 * the 1/rms in lse (written by the attention after them) */
		.q0 = g->att, .k0 = g->k0, .rstdq = g->lse, .rstdk = g->lse, .mla = g->mla,
	};
	int rc;

	g->sp.n = g->sp.nl = n;
	g->kva.p0 = p0;
	g->kva.cp.tl = g->kva.cp.seq = g->kva.cp.n = n;
	g->moe.n = n;
	CK(g->sp.ops->embedding_fwd(&g->sp, g->x, g->ids, W(g, TITAN_PARAM_TOK_EMBEDDINGS, -1)));
	for (int l = 0; l < (int)d->n_layers; l++) {
		struct block_w w = {0};

		for (int r = TITAN_PARAM_WQ; r < TITAN_PARAM_NROLES; r++)
			if (r != TITAN_PARAM_NORM && r != TITAN_PARAM_OUTPUT)
				w.w[r] = W(g, (enum titan_param_role)r, l);
		k.moe = titan_model_layer_is_moe(d, l) ? &g->moe : NULL;
		k.nope = titan_model_layer_nope(d, l); /* its cache holds k unrotated */
		/* Llama 4's RoPE blocks see their chunk only: keys before it are
		 * another document's */
		g->kva.doc = g->cid && !k.nope ? g->cid : g->doc;
		a.k = g->kc[l] + p0 * g->kv;
		a.v = g->vc[l] + p0 * g->kv;
		g->kva.kc = g->kc[l];
		g->kva.vc = g->vc[l];
		CK(titan_block_fwd(&k, &w, g->x, g->x, &a, titan_block_fwd_all, F_NOPS));
	}
	return 0;
}

int titan_generator_forward(struct titan_generator *g, const int32_t *tokens, int64_t n,
			    float *logits, bool all)
{
	const struct titan_backend_ops *op = g->be->ops;
	const int64_t C = g->d.dim, V = g->d.vocab_size;
	const float eps = (float)g->d.norm_eps;
	int rc;

	if (n < 0 || g->pos + n > g->capacity)
		return titan_error(TITAN_E_INVALID, "%lld more tokens at position %lld exceed the "
				   "generator's capacity of %lld positions", (long long)n,
				   (long long)g->pos, (long long)g->capacity);
	for (int64_t c0 = 0; c0 < n; c0 += g->batch) {
		const int64_t m = n - c0 < g->batch ? n - c0 : g->batch;
		const bool last = c0 + m == n;

		for (int64_t i = 0; i < m; i++) {
			if (tokens[c0 + i] < 0 || tokens[c0 + i] >= V)
				return titan_error(TITAN_E_INVALID, "token %lld is id %d, outside the "
						   "vocabulary (size %lld)", (long long)(c0 + i),
						   tokens[c0 + i], (long long)V);
			g->ids[i] = (uint32_t)tokens[c0 + i];
			if (g->doc) { /* the token after an EOS starts a document */
				const int64_t p = g->pos + i;

				g->doc[p] = p ? g->doc[p - 1] + (g->prev == g->doc_eos) : 0;
				g->prev = tokens[c0 + i];
			}
			if (g->cid) {
				const int64_t p = g->pos + i;

				g->cid[p] = (int32_t)((g->doc ? g->doc[p] : 0) + p / g->chunk);
			}
		}
		CK(chunk_fwd(g, m));
		g->pos += m;
		if (!logits)
			continue;
		if (all) {
			CK(op->rmsnorm_fwd(g->be, g->xn, g->rstd, g->x, W(g, TITAN_PARAM_NORM, -1), m,
					   C, eps));
			CK(op->matmul_fwd(g->be, logits + c0 * V, g->xn, W(g, TITAN_PARAM_OUTPUT, -1),
					  m, C, V, false));
		} else if (last) {
			CK(op->rmsnorm_fwd(g->be, g->xl, g->rstd, g->x + (m - 1) * C,
					   W(g, TITAN_PARAM_NORM, -1), 1, C, eps));
			CK(op->matmul_fwd(g->be, logits, g->xl, W(g, TITAN_PARAM_OUTPUT, -1), 1, C, V,
					  false));
		}
	}
	return 0;
}

/* ------------------------------------------------------------- the loop */

const char *titan_gen_stop_name(enum titan_gen_stop s)
{
	switch (s) {
	case TITAN_GEN_STOP_EOS: return "eos";
	case TITAN_GEN_STOP_LENGTH: return "max_new_tokens";
	case TITAN_GEN_STOP_CONTEXT: return "context";
	case TITAN_GEN_STOP_CALLBACK: return "callback";
	}
	return "?";
}

/* log softmax(logits)[id], max-shifted, the sum in double */
static double log_softmax_at(const float *logits, int64_t V, int32_t id)
{
	double mx = logits[0], sum = 0;

	for (int64_t i = 1; i < V; i++)
		if (logits[i] > mx)
			mx = logits[i];
	for (int64_t i = 0; i < V; i++)
		sum += exp((double)logits[i] - mx);
	return (double)logits[id] - mx - log(sum);
}

int titan_generate(struct titan_generator *g, const int32_t *prompt, int64_t n,
		   const struct titan_gen_opts *o, titan_gen_token_fn fn, void *ctx,
		   struct titan_gen_result *res)
{
	struct titan_gen_result r = {.n_prompt = n, .stop = TITAN_GEN_STOP_LENGTH};
	struct titan_sampler s = {0};
	float *logits = NULL;
	uint64_t t0 = titan_time_ns(), t1 = t0;
	int rc;

	if (n < 1 || n > g->capacity) {
		rc = titan_error(TITAN_E_INVALID, "the prompt is %lld tokens: expected 1 to %lld "
				 "(the generator's capacity)", (long long)n, (long long)g->capacity);
		goto done;
	}
	if (o->max_new_tokens < 0) {
		rc = titan_error(TITAN_E_INVALID, "max_new_tokens %lld must be >= 0",
				 (long long)o->max_new_tokens);
		goto done;
	}
	if ((rc = titan_sampler_init(&s, &o->sampling, g->d.vocab_size)) < 0)
		goto done;
	if (!(logits = titan_mem_alloc(g->alloc, (size_t)g->d.vocab_size * sizeof(float),
				       TITAN_MEM_WORKSPACE))) {
		rc = TITAN_E_NOMEM;
		goto done;
	}
	titan_generator_reset(g);
	if ((rc = titan_generator_forward(g, prompt, n, logits, false)) < 0)
		goto done;
	t1 = titan_time_ns();
	for (;;) {
		int32_t id;

		if (r.n_new == o->max_new_tokens) {
			r.stop = TITAN_GEN_STOP_LENGTH;
			break;
		}
		if (n + r.n_new == g->capacity) {
			r.stop = TITAN_GEN_STOP_CONTEXT;
			break;
		}
		if ((rc = titan_sampler_sample(&s, logits, &id)) < 0)
			break;
		if (id == o->eos_id) {
			r.stop = TITAN_GEN_STOP_EOS;
			break;
		}
		r.n_new++;
		r.logprob += log_softmax_at(logits, g->d.vocab_size, id);
		if (fn && (rc = fn(ctx, id)) != 0) {
			if (rc > 0) {
				r.stop = TITAN_GEN_STOP_CALLBACK;
				rc = 0;
			}
			break;
		}
		/* the token's successor is only needed when there is room for it */
		if (r.n_new == o->max_new_tokens || n + r.n_new == g->capacity)
			continue;
		if ((rc = titan_generator_forward(g, &id, 1, logits, false)) < 0)
			break;
	}
done:
	r.prefill_s = (double)(t1 - t0) * 1e-9;
	r.decode_s = (double)(titan_time_ns() - t1) * 1e-9;
	if (res)
		*res = r;
	titan_mem_free(g->alloc, logits);
	titan_sampler_release(&s);
	return rc;
}
