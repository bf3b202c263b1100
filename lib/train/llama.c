/*
 * llama.c — one Llama 3 training step on a backend: forward through the
 * blocks, the fused classifier + cross-entropy, hand-written backward,
 * activation checkpointing by recomputation, gradient norm and AdamW.
 * Mirrors torchtitan's models/llama3/model.py (Transformer.forward) and
 * train.py's train_step; the ops are lib/titan/ops.h's.  The block's
 * forward math is block.c's, shared with generation.  It has no layout
 * branches: the layout comes in as small interfaces — the stage and
 * microbatch a call works on (stage.h, struct mb), the sequence/tensor-
 * parallel moves (tp.h, the identity on one rank), the attention (cp.h:
 * local or context-parallel), the activation-checkpointing policy (struct
 * ac_policy) and the weight-gradient sink of a backward pass (immediate,
 * or deferred for the zero-bubble W pass).
 */
#include "titan/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/dist.h"
#include "block.h"
#include "cp.h"
#include "stage.h"
#include "tp.h"

/* What a block's weight pass reads (split backward, titan/train.h): the
 * output gradients of w2 (dy), wo (dh), wq/wk/wv after RoPE (dq, dk, dv)
 * and of the two norms (dxn2, dxn1: their dy), and `x`, copies of the
 * layer inputs (xn1, att, h, xn2, rstd1, rstd2, and a, b holding the
 * SwiGLU gradients da, db, g; with QK-norm q0, k0, rstdq, rstdk) when
 * the block's activations are shared (checkpointed, or selective "op");
 * otherwise x is empty and the pass reads the microbatch's own acts.
 * With QK-norm also the dy of q_norm and k_norm (dqn, dkn; none without).
 * Multi-head latent attention (no dk, dv): dq is wq's or wq_b's output
 * gradient, and the output gradients of wkv_b (dkvb), kv_norm (dkvn),
 * wkv_a (dkv0), q_norm (dcq) and wq_a (dcq0); x also holds its latents.
 * A MoE block (moe.h's moe_keep): w2's output-gradient rows at this rank's
 * experts (dmrow) and the router logits' gradient (dmlogit); with the
 * block's activations shared (full AC) x.moe holds copies of what
 * titan_moe_wgrad reads (a selective "op" block keeps its MoE's own). */
enum wslot { WS_DY, WS_DH, WS_DQ, WS_DK, WS_DV, WS_DXN2, WS_DXN1, WS_DQN, WS_DKN,
	     WS_DKVB, WS_DKVN, WS_DKV0, WS_DCQ, WS_DCQ0, WS_DMROW, WS_DMLOGIT, WS_NSLOT,
	     WS_DXNF = WS_NSLOT /* the final norm's dy: struct mb's dxnf */ };
struct wstash {
	float *g[WS_NSLOT];
	struct acts x;
};

/* One microbatch's state (alloc_mb): the stage's block inputs x[l0..l1]
 * (x[L]: the final norm's input), the kept activations per block (NULL
 * pointers for checkpointed blocks), the final norm's output and 1/rms,
 * the token ids, under PP the loss's gradient of xnf, and with the split
 * backward the weight passes' stash. */
struct mb {
	float **x;
	struct acts *acts;
	float *xnf, *rstdf, *dxn_out;
	uint32_t *ids;
	struct wstash *w;  /* split backward: per block, or NULL */
	float *dxnf;       /* split backward, last stage: the final norm's dy */
	int32_t *doc;      /* block_causal, host: document ids [batch, seq], then
			      under CP every rank's local order (cp.h's doc, ldoc) */
	bool doc_malloc;   /* doc is malloc's, not m->alloc's (a device backend) */
	int32_t *cid;      /* chunked attention, host: the RoPE blocks' ids, as doc
			      (titan_cp_chunk_ids) */
};

/* Activation checkpointing (titan/train.h's titan_ac_mode): per block,
 * what its backward recomputes first.  Blocks with `whole` set (full AC,
 * selective every N) keep no activations and recompute every op into the
 * shared set; the others recompute the `redo` ops in place (selective
 * "op": what it does not keep) or nothing. */
struct ac_policy {
	bool *whole;
	const enum fwd_op *redo;
	int nredo;
	struct acts shared;
};

/* Selective "op" recomputes all but what torchtitan's policy keeps: q
 * (after RoPE), v, the attention output and its lse, w1·x and the block
 * output; with QK-norm also q's input and 1/rms (k's are redone). */
static const enum fwd_op fwd_unsaved[] = {
	F_NORM1, F_WK, F_KNORM, F_ROPE_K, F_WO, F_NORM2, F_W3, F_SWIGLU,
};

/* The pipeline bookkeeping: the rank's stages and one microbatch state
 * per microbatch in flight (n: 1 without PP). */
struct mbsets {
	struct titan_stages st;
	int n;
	struct mb *mb;
	float *ones;          /* split backward: [C] ones, the weight pass's norm weight */
};

struct titan_llama {
	struct titan_model_dims d;
	struct titan_llama_opts o;
	struct titan_backend *be;
	struct titan_allocator *alloc;
	struct titan_param_table table;
	struct titan_param_arena params, grads, m, v;
	/* host staging of the token ids (written into a microbatch's ids
	 * with buf_set), and of CP's labels */
	uint32_t *ids_host;
	float *freqs;         /* [T, D/2, 2] */
	int64_t n;            /* tokens per microbatch */
	struct ac_policy ac;
	struct mbsets pl;
	struct titan_comm *pp;
	/* backward scratch */
	float *dx, *dh, *dxn, *datt, *dq, *dk, *dv, *dg;
	void **blocks;        /* every allocation, for free */
	int nblocks, capblocks;
	/* the buffer plan (titan_llama_plan): an entry per allocation, the
	 * block and microbatch set being allocated */
	struct titan_buf_entry *plan;
	int nplan, at_layer, at_mb;
	int64_t plan_bytes;   /* their sum (a plan past 64 bits is refused) */
	bool plan_overflow;
	struct titan_llama_hooks hooks;
	/* parameter and gradient views (the arenas' by default; a data-
	 * parallel engine binds a group's views to its unsharded buffers) */
	float **pv, **gv;
	int *group_first;     /* [ngroups + 1]: first parameter of each group */
	int ngroups;
	struct titan_llama_group_hooks ghooks;
	/* this rank's heads, kv heads and FFN hidden size (tensor
	 * parallelism splits them) and tokens of the residual stream (n,
	 * or with sequence parallelism n / tp) */
	int64_t H, Hkv, F, nl;
	struct titan_sp sp;   /* sequence/tensor-parallel moves (tp.h) */
	struct titan_cp cp;   /* attention, tokens' places (cp.h) */
	/* Llama 4's chunked attention: the RoPE blocks attend within chunks
	 * of this many positions (fixed_attn_block_size, where a sequence is
	 * longer and there are NoPE blocks); 0: none */
	int64_t chunk;
	/* mixture of experts (moe.h): the blocks' shared geometry, backward
	 * scratch, and tokens per expert [n_layers][num_experts] counted by
	 * the training forwards since the last titan_llama_moe_balance */
	bool has_moe, moe_count;
	struct titan_moe moe;
	struct moe_scratch moe_s;
	int64_t *moe_tokens;
	struct titan_moe_ep moe_ep; /* expert parallelism (moe.ep points here), or unused */
	/* multi-head latent attention (deepseek_v3): the YaRN RoPE table of
	 * its rope part [tl, rope] (this rank's positions under CP), q's
	 * factor mscale² (block.h) and the backward scratch: wkv_b's,
	 * kv_norm's and wkv_a's output gradients, the q_lora path's */
	float *mla_freqs, mla_qscale;
	float *dkvb, *dkvn, *dkv0, *dcq, *dcq0;
	/* the parameters' spans for the multi-tensor ops, made at the first
	 * optimizer step (the table does not change): every parameter
	 * (grad norm), and those AdamW moves */
	struct titan_tensor_span *spans_all, *spans_adamw;
	int n_spans_all, n_spans_adamw;
};

void titan_llama_set_group_hooks(struct titan_llama *m, const struct titan_llama_group_hooks *h)
{
	if (h)
		m->ghooks = *h;
	else
		memset(&m->ghooks, 0, sizeof(m->ghooks));
}

int titan_llama_ngroups(const struct titan_llama *m)
{
	return m->ngroups;
}

bool titan_llama_group_active(const struct titan_llama *m, int g)
{
	return titan_stages_has_group(&m->pl.st, g, m->ngroups);
}

void titan_llama_group_params(const struct titan_llama *m, int g, int *first, int *end)
{
	TITAN_ASSERT(g >= 0 && g < m->ngroups);
	*first = m->group_first[g];
	*end = m->group_first[g + 1];
}

void titan_llama_bind_group(struct titan_llama *m, int g, float *params, float *grads)
{
	TITAN_ASSERT(g >= 0 && g < m->ngroups);
	for (int i = m->group_first[g]; i < m->group_first[g + 1]; i++) {
		const struct titan_param *p = &m->table.params[i];
		const int64_t base = m->table.params[m->group_first[g]].full_offset;

		m->pv[i] = params ? params + (p->full_offset - base) : titan_param_view(&m->params, p);
		m->gv[i] = grads ? grads + (p->full_offset - base) : titan_param_view(&m->grads, p);
	}
}

/* Group hooks: 0 or the hook's error. */
static int ghook(struct titan_llama *m, int (*fn)(void *, int), int g)
{
	return fn ? fn(m->ghooks.ctx, g) : 0;
}

void titan_llama_set_hooks(struct titan_llama *m, const struct titan_llama_hooks *h)
{
	if (h)
		m->hooks = *h;
	else
		memset(&m->hooks, 0, sizeof(m->hooks));
}

static void span_begin(struct titan_llama *m, const char *name, int layer)
{
	char buf[64];

	if (!m->hooks.begin)
		return;
	if (layer >= 0)
		snprintf(buf, sizeof(buf), "layer %d %s", layer, name);
	m->hooks.begin(m->hooks.ctx, layer >= 0 ? buf : name);
}

static void span_end(struct titan_llama *m, const char *name)
{
	if (m->hooks.end)
		m->hooks.end(m->hooks.ctx, name);
}

/* The plan's entry of a buffer of the run (the arenas) or of buf. */
static int plan_add(struct titan_llama *m, enum titan_buf_role role, enum titan_mem_tag tag,
		    int64_t bytes)
{
	if (m->plan_overflow ||
	    (m->plan_overflow = __builtin_add_overflow(m->plan_bytes, bytes, &m->plan_bytes)))
		return titan_error(TITAN_E_INVALID, "the model's buffers do not fit in 64-bit byte "
				   "counts (batch, sequence or model far too large)");
	if (m->nplan == m->capblocks) {
		int cap = m->capblocks ? 2 * m->capblocks : 64;
		void **n = realloc(m->blocks, (size_t)cap * sizeof(*n));
		struct titan_buf_entry *e = n ? realloc(m->plan, (size_t)cap * sizeof(*e)) : NULL;

		if (n)
			m->blocks = n;
		if (!e)
			return TITAN_E_NOMEM;
		m->plan = e;
		m->capblocks = cap;
	}
	m->plan[m->nplan++] = (struct titan_buf_entry){
		.role = role, .tag = tag, .bytes = bytes, .layer = m->at_layer, .mb = m->at_mb,
		.life = m->at_mb >= 0 ? TITAN_BUF_MICROBATCH : TITAN_BUF_RUN};
	return 0;
}

/* A buffer of the plan: its entry, then the block. */
static float *buf(struct titan_llama *m, int64_t nfloats, enum titan_mem_tag tag,
		  enum titan_buf_role role)
{
	const size_t bytes = (size_t)nfloats * sizeof(float);
	void *p;

	if (plan_add(m, role, tag, (int64_t)bytes) < 0)
		return NULL;
	if (!(p = titan_mem_alloc(m->alloc, bytes, tag))) {
		m->nplan--;
		return NULL;
	}
	m->blocks[m->nblocks++] = p;
	return p;
}

static const char *const role_name[TITAN_BUF_NROLES] = {
	[TITAN_BUF_WEIGHTS] = "weights (fp32 arena)",
	[TITAN_BUF_GRADS] = "gradients (fp32 arena)",
	[TITAN_BUF_MOMENTS] = "AdamW exp_avg + exp_avg_sq (2 arenas)",
	[TITAN_BUF_ROPE] = "RoPE table",
	[TITAN_BUF_CP_POSITIONS] = "CP: token positions",
	[TITAN_BUF_CP_LABELS] = "CP: this rank's labels",
	[TITAN_BUF_CP_GATHERED] = "CP: gathered K, V, dK, dV + gather buffer",
	[TITAN_BUF_BLOCK_INPUTS] = "block inputs",
	[TITAN_BUF_SAVED_OP] = "per-op saved tensors",
	[TITAN_BUF_RECOMPUTE_OP] = "per-op recompute set (one block)",
	[TITAN_BUF_SAVED] = "saved activations",
	[TITAN_BUF_RECOMPUTE] = "recompute set (one block)",
	[TITAN_BUF_FINAL_NORM] = "final norm output + 1/rms",
	[TITAN_BUF_LOSS_GRAD] = "PP: loss gradients of the final norm output",
	[TITAN_BUF_ZB_FINAL_GRAD] = "ZB: final norm's output gradients (weight pass)",
	[TITAN_BUF_ZB_STASH] = "ZB: weight-pass stash",
	[TITAN_BUF_ZB_INPUTS] = "ZB: stashed layer inputs (shared activations)",
	[TITAN_BUF_ZB_ONES] = "ZB: ones (weight pass of the norms)",
	[TITAN_BUF_TOKEN_IDS] = "token ids",
	[TITAN_BUF_DOC_IDS] = "block_causal: document ids",
	[TITAN_BUF_CHUNK_IDS] = "chunked attention: the RoPE blocks' chunk ids",
	[TITAN_BUF_SCRATCH] = "backward scratch",
	[TITAN_BUF_MOE_ROUTER] = "MoE router: scores, gate values, choices, slot order",
	[TITAN_BUF_MOE_EXPERTS] = "MoE experts: routed rows, hidden, outputs; shared experts",
	[TITAN_BUF_TP_SP] = "TP: sequence-parallel buffers",
	[TITAN_BUF_TP_LOSS] = "TP: loss chunk buffers",
	[TITAN_BUF_TP_LOGITS] = "TP: gathered logits (no loss parallel)",
};

const char *titan_buf_role_name(enum titan_buf_role r)
{
	return r >= 0 && r < TITAN_BUF_NROLES ? role_name[r] : "?";
}

const struct titan_buf_entry *titan_llama_plan(const struct titan_llama *m, int *n)
{
	*n = m->nplan;
	return m->plan;
}

/* The activation-checkpointing policy of opts (the shared set is
 * allocated by the caller). */
static int ac_policy_init(struct ac_policy *p, const struct titan_llama_opts *o, int L)
{
	if (!(p->whole = calloc((size_t)L, sizeof(*p->whole))))
		return TITAN_E_NOMEM;
	for (int i = 0; i < L; i++)
		p->whole[i] = o->ac == TITAN_AC_FULL ||
			      (o->ac == TITAN_AC_SELECTIVE && (i + 1) % o->ac_every == 0);
	if (o->ac == TITAN_AC_SELECTIVE_OP) {
		p->redo = fwd_unsaved;
		p->nredo = (int)(sizeof(fwd_unsaved) / sizeof(fwd_unsaved[0]));
	}
	return 0;
}

/* buf for the parallel parts (tp.h, cp.h) */
static float *model_buf(void *m, int64_t nfloats, enum titan_mem_tag tag,
			enum titan_buf_role role)
{
	return buf(m, nfloats, tag, role);
}

/* QK-norm's inputs and 1/rms of q (`qs`) and of k (`ks`): nothing
 * without it. */
static int alloc_qk(struct titan_llama *m, struct acts *a, enum titan_buf_role r, bool qs,
		    bool ks)
{
	const int64_t n = m->n, D = m->d.head_dim;
	const enum titan_mem_tag t = TITAN_MEM_ACTIVATIONS;

	if (!m->d.qk_norm)
		return 0;
	if (qs && (!(a->q0 = buf(m, n * m->H * D, t, r)) || !(a->rstdq = buf(m, n * m->H, t, r))))
		return TITAN_E_NOMEM;
	if (ks && (!(a->k0 = buf(m, n * m->Hkv * D, t, r)) ||
		   !(a->rstdk = buf(m, n * m->Hkv, t, r))))
		return TITAN_E_NOMEM;
	return 0;
}

/* A MoE block's activations (moe.h), in backend memory, under the plan's
 * router and experts roles (whichever set holds them: a block's own, or
 * the recompute set). */
static int alloc_moe_acts(struct titan_llama *m, struct moe_acts *a)
{
	const enum titan_buf_role r = TITAN_BUF_MOE_ROUTER, x = TITAN_BUF_MOE_EXPERTS;
	const struct titan_moe_dims *d = &m->d.moe;
	/* n: the tokens routed here (EP x TP: this TP rank's) */
	const int64_t n = titan_moe_routed(&m->moe), C = m->d.dim, E = d->num_experts;
	const int64_t K = d->top_k, R = n * K;
	/* TP: this rank's slice of the hidden dims (of the shared experts'
	 * only under EP) */
	const int64_t Fm = titan_moe_expert_hidden(&m->moe);
	const int64_t Fs = titan_moe_shared_hidden(&m->moe);
	const enum titan_mem_tag t = TITAN_MEM_ACTIVATIONS;
	/* rows at this rank's experts: R, or under EP up to R·ep */
	const int64_t Rx = titan_moe_expert_rows(&m->moe);

	a->scores = buf(m, n * E, t, r);
	a->topw = buf(m, n * K, t, r);
	a->topi = (int32_t *)buf(m, n * K, t, r);
	a->perm = (int32_t *)buf(m, R, t, r);
	a->pos = (int32_t *)buf(m, R, t, r);
	a->counts = (int32_t *)buf(m, E, t, r);
	a->xin = buf(m, Rx * C, t, x);
	a->a = buf(m, Rx * Fm, t, x);
	a->b = buf(m, Rx * Fm, t, x);
	a->g = buf(m, Rx * Fm, t, x);
	a->yout = buf(m, Rx * C, t, x);
	if (m->moe.ep) {
		const int64_t P = m->moe.ep->ep;

		a->ecounts = (int32_t *)buf(m, E / P, t, r);
		a->ep_n = (int64_t *)buf(m, 2 * E, t, r);
		a->ep_sc = (int64_t *)buf(m, 2 * P, t, r);
		a->ep_rc = (int64_t *)buf(m, 2 * P, t, r);
		a->yret = buf(m, R * C, t, x);
		if (!a->ecounts || !a->ep_n || !a->ep_sc || !a->ep_rc || !a->yret)
			return TITAN_E_NOMEM;
	}
	if (Fs > 0) { /* of every token */
		a->sa = buf(m, m->n * Fs, t, x);
		a->sb = buf(m, m->n * Fs, t, x);
		a->sg = buf(m, m->n * Fs, t, x);
		if (!a->sa || !a->sb || !a->sg)
			return TITAN_E_NOMEM;
	}
	if (!a->scores || !a->topw || !a->topi || !a->perm || !a->pos || !a->counts || !a->xin ||
	    !a->a || !a->b || !a->g || !a->yout)
		return TITAN_E_NOMEM;
	return 0;
}

/* Multi-head latent attention's own activations (block.h's mla_acts). */
static int alloc_mla_acts(struct titan_llama *m, struct mla_acts *ma, enum titan_buf_role r)
{
	const struct titan_mla_dims *x = &m->d.mla;
	const int64_t n = m->n, R = x->kv_lora_rank, Q = x->q_lora_rank;
	const enum titan_mem_tag t = TITAN_MEM_ACTIVATIONS;

	if (Q > 0 && (!(ma->cq0 = buf(m, n * Q, t, r)) || !(ma->rstdcq = buf(m, n, t, r)) ||
		      !(ma->cq = buf(m, n * Q, t, r))))
		return TITAN_E_NOMEM;
	ma->kv0 = buf(m, n * (R + x->qk_rope_head_dim), t, r);
	ma->kvl = buf(m, n * R, t, r);
	ma->rstdkv = buf(m, n, t, r);
	ma->kvn = buf(m, n * R, t, r);
	ma->kvb = buf(m, n * m->H * (x->qk_nope_head_dim + x->v_head_dim), t, r);
	ma->attv = buf(m, n * m->H * x->v_head_dim, t, r);
	if (!ma->kv0 || !ma->kvl || !ma->rstdkv || !ma->kvn || !ma->kvb || !ma->attv)
		return TITAN_E_NOMEM;
	return 0;
}

/* A block's activations; `l`: of block l (a MoE block keeps the MoE's in
 * place of the dense feed-forward's), -1: the shared recompute set, which
 * serves both kinds. */
static int alloc_acts(struct titan_llama *m, struct acts *a, enum titan_buf_role r, int l)
{
	const bool moe = l < 0 ? m->has_moe : titan_model_layer_is_moe(&m->d, l);
	const bool dense = l < 0 || !moe;
	int rc;

	const struct titan_model_dims *d = &m->d;
	const int64_t n = m->n, nl = m->nl, q = m->H * d->head_dim, kv = m->Hkv * d->head_dim;
	const enum titan_mem_tag t = TITAN_MEM_ACTIVATIONS;

	a->xn1 = buf(m, n * d->dim, t, r);
	a->rstd1 = buf(m, nl, t, r);
	a->q = buf(m, n * q, t, r);
	a->k = buf(m, n * kv, t, r);
	a->v = buf(m, n * kv, t, r);
	a->att = buf(m, n * q, t, r);
	a->lse = buf(m, n * m->H, t, r);
	a->h = buf(m, nl * d->dim, t, r);
	a->xn2 = buf(m, n * d->dim, t, r);
	a->rstd2 = buf(m, nl, t, r);
	if (dense) {
		a->a = buf(m, n * m->F, t, r);
		a->b = buf(m, n * m->F, t, r);
		a->g = buf(m, n * m->F, t, r);
		if (!a->a || !a->b || !a->g)
			return TITAN_E_NOMEM;
	}
	if (!a->xn1 || !a->rstd1 || !a->q || !a->k || !a->v || !a->att || !a->lse || !a->h ||
	    !a->xn2 || !a->rstd2)
		return TITAN_E_NOMEM;
	if (moe && (rc = alloc_moe_acts(m, &a->moe)) < 0)
		return rc;
	if (titan_model_mla(d) && (rc = alloc_mla_acts(m, &a->mla, r)) < 0)
		return rc;
	return alloc_qk(m, a, r, true, true);
}

/* Selective "op": the tensors a block keeps (q, v, att, lse, w1·x) of its
 * own; the ones backward recomputes live in the shared set `rc`.  A MoE
 * block keeps all of its MoE's (the router's choice is not recomputed). */
static int alloc_acts_op(struct titan_llama *m, struct acts *a, const struct acts *rc, int l)
{
	const struct titan_model_dims *d = &m->d;
	const int64_t n = m->n, q = m->H * d->head_dim, kv = m->Hkv * d->head_dim;
	const enum titan_mem_tag t = TITAN_MEM_ACTIVATIONS;
	int err;

	*a = *rc;
	a->q = buf(m, n * q, t, TITAN_BUF_SAVED_OP);
	a->v = buf(m, n * kv, t, TITAN_BUF_SAVED_OP);
	a->att = buf(m, n * q, t, TITAN_BUF_SAVED_OP);
	a->lse = buf(m, n * m->H, t, TITAN_BUF_SAVED_OP);
	/* MLA's whole attention is one op (F_WQ, block.c), not recomputed:
	 * the block keeps k and its latents too */
	if (titan_model_mla(d) && (!(a->k = buf(m, n * kv, t, TITAN_BUF_SAVED_OP)) ||
				   alloc_mla_acts(m, &a->mla, TITAN_BUF_SAVED_OP) < 0))
		return TITAN_E_NOMEM;
	if (titan_model_layer_is_moe(d, l)) {
		if (!a->q || !a->v || !a->att || !a->lse)
			return TITAN_E_NOMEM;
		if ((err = alloc_moe_acts(m, &a->moe)) < 0)
			return err;
	} else if (!(a->a = buf(m, n * m->F, t, TITAN_BUF_SAVED_OP)) || !a->q || !a->v ||
		   !a->att || !a->lse) {
		return TITAN_E_NOMEM;
	}
	/* QK-norm's q input and 1/rms, a MoE block's too */
	return alloc_qk(m, a, TITAN_BUF_SAVED_OP, true, false);
}

static bool cpu_kernels(const struct titan_backend *be);

/* One microbatch's state: the stage's block inputs (and x[l1]), kept
 * activations, final-norm output, ids, and under PP the loss gradient. */
static int alloc_mb(struct titan_llama *m, struct mb *b)
{
	const int64_t L = m->d.n_layers, C = m->d.dim;
	const enum titan_mem_tag act = TITAN_MEM_ACTIVATIONS;
	int rc;

	b->x = calloc((size_t)L + 1, sizeof(*b->x));
	b->acts = calloc((size_t)L, sizeof(*b->acts));
	if (!b->x || !b->acts)
		return TITAN_E_NOMEM;
	for (int v = 0; v < m->pl.st.n; v++) {
		const struct titan_pp_stage *s = &m->pl.st.v[v];

		for (int64_t i = s->l0; i <= s->l1; i++) /* ZBV: adjacent stages share one */
			if (!b->x[i] && !(b->x[i] = buf(m, m->nl * C, act, TITAN_BUF_BLOCK_INPUTS)))
				return TITAN_E_NOMEM;
		for (int64_t i = s->l0; i < s->l1; i++) {
			m->at_layer = (int)i;
			if (m->o.ac == TITAN_AC_SELECTIVE_OP)
				rc = alloc_acts_op(m, &b->acts[i], &m->ac.shared, (int)i);
			else
				rc = m->ac.whole[i] ? 0 : alloc_acts(m, &b->acts[i], TITAN_BUF_SAVED,
								     (int)i);
			if (rc < 0)
				return rc;
		}
		m->at_layer = -1;
	}
	if (!(b->ids = (uint32_t *)buf(m, m->n, TITAN_MEM_DATA, TITAN_BUF_TOKEN_IDS)))
		return TITAN_E_NOMEM;
	/* block_causal: document ids in sequence order and CP's local order,
	 * host memory (written by host code, read by the attention ops from
	 * the host: titan/ops.h), an int32 a token each; m->alloc is the
	 * host's on the CPU kernels' backends, a device's on CUDA, where they
	 * are malloc'd (titan_llama_free frees them) */
	if (m->o.block_causal) {
		const int64_t nd = 2 * m->o.batch * m->o.seq;

		b->doc_malloc = !cpu_kernels(m->be);
		b->doc = b->doc_malloc ? malloc((size_t)nd * sizeof(int32_t))
				       : (int32_t *)buf(m, nd, TITAN_MEM_DATA, TITAN_BUF_DOC_IDS);
		if (!b->doc)
			return titan_error(TITAN_E_NOMEM, "out of memory for the document ids");
	}
	/* chunked attention: the RoPE blocks' ids, alike (the CPU kernels
	 * only: other backends are refused) */
	if (m->chunk && !(b->cid = (int32_t *)buf(m, 2 * m->o.batch * m->o.seq, TITAN_MEM_DATA,
						  TITAN_BUF_CHUNK_IDS)))
		return TITAN_E_NOMEM;
	if (!m->pl.st.last)
		return 0;
	b->xnf = buf(m, m->n * C, act, TITAN_BUF_FINAL_NORM);
	b->rstdf = buf(m, m->nl, act, TITAN_BUF_FINAL_NORM);
	if (!b->xnf || !b->rstdf)
		return TITAN_E_NOMEM;
	if ((m->pl.n > 1 || m->o.pp_split_backward) && !(b->dxn_out = buf(m, m->n * C, act, TITAN_BUF_LOSS_GRAD)))
		return TITAN_E_NOMEM;
	if (m->o.pp_split_backward && !(b->dxnf = buf(m, m->nl * C, act, TITAN_BUF_ZB_FINAL_GRAD)))
		return TITAN_E_NOMEM;
	return 0;
}

/* Split backward, a checkpointed MoE block: copies of what
 * titan_moe_wgrad reads of the shared MoE activations (the counts, the
 * expert rows' inputs and SwiGLU gradients, the shared experts'). */
static int alloc_moe_stash(struct titan_llama *m, struct moe_acts *a)
{
	const enum titan_buf_role r = TITAN_BUF_ZB_INPUTS;
	const enum titan_mem_tag t = TITAN_MEM_ACTIVATIONS;
	const int64_t C = m->d.dim, E = m->d.moe.num_experts;
	const int64_t Rx = titan_moe_expert_rows(&m->moe), Fm = titan_moe_expert_hidden(&m->moe);
	const int64_t Fs = titan_moe_shared_hidden(&m->moe);

	a->counts = (int32_t *)buf(m, E, t, r);
	a->xin = buf(m, Rx * C, t, r);
	a->a = buf(m, Rx * Fm, t, r);
	a->b = buf(m, Rx * Fm, t, r);
	a->g = buf(m, Rx * Fm, t, r);
	if (!a->counts || !a->xin || !a->a || !a->b || !a->g)
		return TITAN_E_NOMEM;
	if (m->moe.ep && !(a->ecounts = (int32_t *)buf(m, E / m->moe.ep->ep, t, r)))
		return TITAN_E_NOMEM;
	if (Fs > 0 && (!(a->sa = buf(m, m->n * Fs, t, r)) || !(a->sb = buf(m, m->n * Fs, t, r)) ||
		       !(a->sg = buf(m, m->n * Fs, t, r))))
		return TITAN_E_NOMEM;
	return 0;
}

/* Split backward: the weight pass's stash of every block of the rank's
 * stages but the first global stage (whose weight pass is the whole
 * backward). */
static int alloc_wstash(struct titan_llama *m, struct mb *b)
{
	const struct titan_model_dims *d = &m->d;
	const int64_t n = m->n, nl = m->nl, C = d->dim, F = m->F;
	const int64_t q = m->H * d->head_dim, kv = m->Hkv * d->head_dim;
	const enum titan_mem_tag t = TITAN_MEM_ACTIVATIONS;

	if (!(b->w = calloc((size_t)d->n_layers, sizeof(*b->w))))
		return TITAN_E_NOMEM;
	for (int v = 0; v < m->pl.st.n; v++) {
		if (m->pl.st.v[v].first)
			continue;
		for (int64_t l = m->pl.st.v[v].l0; l < m->pl.st.v[v].l1; l++) {
			struct wstash *w = &b->w[l];
			struct acts *x = &w->x;

			const int64_t qk = d->qk_norm, mla = titan_model_mla(d), dkv = !mla;
			const bool moe = titan_model_layer_is_moe(d, l);
			const struct titan_mla_dims *ml = &d->mla;
			const int64_t R = ml->kv_lora_rank, Q = ml->q_lora_rank;
			const int64_t size[WS_NSLOT] = {
				[WS_DY] = n * C, [WS_DH] = n * C, [WS_DQ] = n * q,
				[WS_DK] = dkv * n * kv, [WS_DV] = dkv * n * kv, [WS_DXN2] = nl * C,
				[WS_DXN1] = nl * C, [WS_DQN] = qk * n * q, [WS_DKN] = qk * n * kv,
				[WS_DKVB] = mla * n * m->H * (ml->qk_nope_head_dim + ml->v_head_dim),
				[WS_DKVN] = mla * n * R, [WS_DKV0] = mla * n * (R + ml->qk_rope_head_dim),
				[WS_DCQ] = mla * n * Q, [WS_DCQ0] = mla * n * Q,
				[WS_DMROW] = moe ? titan_moe_expert_rows(&m->moe) * C : 0,
				[WS_DMLOGIT] = moe ? titan_moe_routed(&m->moe) * d->moe.num_experts : 0};

			m->at_layer = (int)l;
			for (int i = 0; i < WS_NSLOT; i++)
				if (size[i] && !(w->g[i] = buf(m, size[i], t, TITAN_BUF_ZB_STASH)))
					return TITAN_E_NOMEM;
			if (!m->ac.whole[l] && m->o.ac != TITAN_AC_SELECTIVE_OP)
				continue;
			x->xn1 = buf(m, n * C, t, TITAN_BUF_ZB_INPUTS);
			x->att = buf(m, n * q, t, TITAN_BUF_ZB_INPUTS);
			x->h = buf(m, nl * C, t, TITAN_BUF_ZB_INPUTS);
			x->xn2 = buf(m, n * C, t, TITAN_BUF_ZB_INPUTS);
			x->rstd1 = buf(m, nl, t, TITAN_BUF_ZB_INPUTS);
			x->rstd2 = buf(m, nl, t, TITAN_BUF_ZB_INPUTS);
			if (!moe) {
				x->a = buf(m, n * F, t, TITAN_BUF_ZB_INPUTS);
				x->b = buf(m, n * F, t, TITAN_BUF_ZB_INPUTS);
				x->g = buf(m, n * F, t, TITAN_BUF_ZB_INPUTS);
			}
			if (!x->xn1 || !x->att || !x->h || !x->xn2 || !x->rstd1 || !x->rstd2 ||
			    (!moe && (!x->a || !x->b || !x->g)) ||
			    alloc_qk(m, x, TITAN_BUF_ZB_INPUTS, true, true) < 0 ||
			    (mla && alloc_mla_acts(m, &x->mla, TITAN_BUF_ZB_INPUTS) < 0) ||
			    (moe && m->ac.whole[l] && alloc_moe_stash(m, &x->moe) < 0))
				return TITAN_E_NOMEM;
		}
	}
	m->at_layer = -1;
	return 0;
}

/* The RoPE table: of this rank's positions under CP; computed on the host
 * and set into the backend's buffer. */
static int init_rope(struct titan_llama *m)
{
	const struct titan_model_dims *d = &m->d;
	const struct titan_rope_scaling sc = {d->rope_scaling_factor, d->rope_low_freq_factor,
					      d->rope_high_freq_factor,
					      (double)d->rope_original_max_position};
	const struct titan_rope_scaling *scp = d->rope_scaling ? &sc : NULL;
	const int64_t T = m->o.seq, D = d->head_dim;
	float *f;
	int rc;

	if (!(m->freqs = buf(m, m->cp.tl * D, TITAN_MEM_OTHER, TITAN_BUF_ROPE)))
		return TITAN_E_NOMEM;
	if (titan_model_mla(d)) { /* host memory: MLA runs on the CPU backend only */
		const struct titan_mla_dims *x = &d->mla;
		const int64_t R = x->qk_rope_head_dim, tl = m->cp.tl;

		m->mla_qscale = (float)(titan_model_mla_softmax_scale(d) * sqrt((double)D));
		if (!(m->mla_freqs = buf(m, tl * R, TITAN_MEM_OTHER, TITAN_BUF_ROPE)))
			return TITAN_E_NOMEM;
		/* under CP the rows of this rank's positions, as cp.c's table */
		f = tl < T ? malloc((size_t)(T * R) * sizeof(float)) : m->mla_freqs;
		rc = f ? titan_rope_freqs_yarn(f, T, R, d->rope_theta, x->rope_factor,
					       x->beta_fast, x->beta_slow, x->original_seq_len)
		       : titan_error(TITAN_E_NOMEM, "out of memory");
		for (int64_t t = 0; rc == 0 && f != m->mla_freqs && t < tl; t++)
			memcpy(m->mla_freqs + t * R, f + titan_cp_token(&m->cp, t) * R,
			       (size_t)R * sizeof(float));
		if (f != m->mla_freqs)
			free(f);
		if (rc < 0)
			return rc;
	}
	if (m->cp.comm)
		return titan_cp_alloc(&m->cp, model_buf, m, m->freqs, d->rope_theta, scp);
	f = malloc((size_t)(T * D) * sizeof(float));
	rc = f ? titan_rope_freqs(f, T, D, d->rope_theta, scp)
	       : titan_error(TITAN_E_NOMEM, "out of memory");
	if (rc == 0)
		rc = m->be->ops->buf_set(m->be, m->freqs, f, (size_t)(T * D) * sizeof(float));
	free(f);
	return rc;
}

/* The activation-checkpointing policy's shared set: a whole one, or
 * under selective "op" only what every block recomputes. */
static int alloc_shared_acts(struct titan_llama *m)
{
	struct acts *r = &m->ac.shared;
	const enum titan_mem_tag t = TITAN_MEM_ACTIVATIONS;
	const int64_t C = m->d.dim, kv = m->Hkv * m->d.head_dim;

	if (m->o.ac == TITAN_AC_NONE)
		return 0;
	if (m->o.ac != TITAN_AC_SELECTIVE_OP)
		return alloc_acts(m, r, TITAN_BUF_RECOMPUTE, -1);
	r->xn1 = buf(m, m->n * C, t, TITAN_BUF_RECOMPUTE_OP);
	r->rstd1 = buf(m, m->nl, t, TITAN_BUF_RECOMPUTE_OP);
	r->k = buf(m, m->n * kv, t, TITAN_BUF_RECOMPUTE_OP);
	r->h = buf(m, m->nl * C, t, TITAN_BUF_RECOMPUTE_OP);
	r->xn2 = buf(m, m->n * C, t, TITAN_BUF_RECOMPUTE_OP);
	r->rstd2 = buf(m, m->nl, t, TITAN_BUF_RECOMPUTE_OP);
	r->b = buf(m, m->n * m->F, t, TITAN_BUF_RECOMPUTE_OP);
	r->g = buf(m, m->n * m->F, t, TITAN_BUF_RECOMPUTE_OP);
	if (!r->xn1 || !r->rstd1 || !r->k || !r->h || !r->xn2 || !r->rstd2 || !r->b || !r->g)
		return TITAN_E_NOMEM;
	return alloc_qk(m, r, TITAN_BUF_RECOMPUTE_OP, false, true);
}

/* The backward scratch. */
static int alloc_scratch(struct titan_llama *m)
{
	const enum titan_mem_tag ws = TITAN_MEM_WORKSPACE;
	const int64_t C = m->d.dim, q = m->H * m->d.head_dim, kv = m->Hkv * m->d.head_dim;

	m->dx = buf(m, m->nl * C, ws, TITAN_BUF_SCRATCH);
	m->dh = buf(m, m->nl * C, ws, TITAN_BUF_SCRATCH);
	m->dxn = buf(m, m->n * C, ws, TITAN_BUF_SCRATCH);
	m->datt = buf(m, m->n * q, ws, TITAN_BUF_SCRATCH);
	m->dq = buf(m, m->n * q, ws, TITAN_BUF_SCRATCH);
	m->dk = buf(m, m->n * kv, ws, TITAN_BUF_SCRATCH);
	m->dv = buf(m, m->n * kv, ws, TITAN_BUF_SCRATCH);
	m->dg = buf(m, m->n * m->F, ws, TITAN_BUF_SCRATCH);
	if (!m->dx || !m->dh || !m->dxn || !m->datt || !m->dq || !m->dk || !m->dv || !m->dg)
		return TITAN_E_NOMEM;
	if (titan_model_mla(&m->d)) {
		const struct titan_mla_dims *x = &m->d.mla;
		const int64_t R = x->kv_lora_rank, Q = x->q_lora_rank;

		m->dkvb = buf(m, m->n * m->H * (x->qk_nope_head_dim + x->v_head_dim), ws,
			      TITAN_BUF_SCRATCH);
		m->dkvn = buf(m, m->n * R, ws, TITAN_BUF_SCRATCH);
		m->dkv0 = buf(m, m->n * (R + x->qk_rope_head_dim), ws, TITAN_BUF_SCRATCH);
		if (!m->dkvb || !m->dkvn || !m->dkv0)
			return TITAN_E_NOMEM;
		if (Q > 0 && (!(m->dcq = buf(m, m->n * Q, ws, TITAN_BUF_SCRATCH)) ||
			      !(m->dcq0 = buf(m, m->n * Q, ws, TITAN_BUF_SCRATCH))))
			return TITAN_E_NOMEM;
	}
	if (m->has_moe) {
		const struct titan_moe_dims *d = &m->d.moe;
		const int64_t R = titan_moe_expert_rows(&m->moe), nr = titan_moe_routed(&m->moe);
		const int64_t Fm = titan_moe_expert_hidden(&m->moe); /* TP: a slice */
		const int64_t Fs = titan_moe_shared_hidden(&m->moe);
		struct moe_scratch *s = &m->moe_s;

		s->drow = buf(m, R * C, ws, TITAN_BUF_SCRATCH);
		s->dg = buf(m, R * Fm > m->n * Fs ? R * Fm : m->n * Fs, ws, TITAN_BUF_SCRATCH);
		if (m->moe.ep) { /* the rows of this rank's slots, and those at its experts */
			m->moe_ep.sbuf = buf(m, nr * d->top_k * C, ws, TITAN_BUF_SCRATCH);
			m->moe_ep.rbuf = buf(m, R * C, ws, TITAN_BUF_SCRATCH);
			if (!m->moe_ep.sbuf || !m->moe_ep.rbuf)
				return TITAN_E_NOMEM;
		}
		s->dlogit = buf(m, nr * d->num_experts, ws, TITAN_BUF_SCRATCH);
		s->dtopw = buf(m, R, ws, TITAN_BUF_SCRATCH);
		if (!s->drow || !s->dg || !s->dlogit || !s->dtopw)
			return TITAN_E_NOMEM;
	}
	return 0;
}

/* x[0..n) = 1 (the split backward's norm weight). */
static int set_ones(struct titan_llama *m, float *x, int64_t n)
{
	float *h = malloc((size_t)n * sizeof(*h));
	int rc;

	if (!h)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	for (int64_t i = 0; i < n; i++)
		h[i] = 1.0f;
	rc = m->be->ops->buf_set(m->be, x, h, (size_t)n * sizeof(*h));
	free(h);
	return rc;
}

/* An arena of the parameters' layout, in the plan. */
static int arena(struct titan_llama *m, struct titan_param_arena *a, enum titan_mem_tag tag,
		 enum titan_buf_role role)
{
	int rc;

	if ((rc = plan_add(m, role, tag, m->table.arena_floats * (int64_t)sizeof(float))) < 0)
		return rc == TITAN_E_NOMEM ? titan_error(rc, "out of memory") : rc;
	if ((rc = titan_param_arena_init(a, &m->table, m->alloc, tag)) < 0)
		m->nplan--;
	return rc;
}

/* The backend runs the CPU kernels (lib/cpu), or titan-estimate's dry run
 * of them (its measure backend): what the features only those kernels
 * have (the document mask, MLA, MoE routing on host memory) need. */
static bool cpu_kernels(const struct titan_backend *be)
{
	const char *name = be->ops->name;

	return name && (!strcmp(name, "cpu") || !strcmp(name, "measure"));
}

int titan_llama_new(const struct titan_model_dims *d, const struct titan_llama_opts *o,
		    struct titan_backend *be, struct titan_allocator *alloc,
		    struct titan_llama **out)
{
	struct titan_llama *m = calloc(1, sizeof(*m));
	const int64_t L = d->n_layers, C = d->dim;
	struct titan_param_table_opts to;
	int tpn, rc;

	*out = NULL;
	if (!m)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	m->d = *d;
	m->o = *o;
	m->at_layer = m->at_mb = -1;
	if (m->o.ce_chunk <= 0)
		m->o.ce_chunk = TITAN_CE_CHUNK;
	m->be = be;
	m->alloc = alloc ? alloc : titan_host_allocator();
	if (o->pp_split_backward && o->stages.n <= 0) {
		rc = titan_error(TITAN_E_INVALID, "the split backward (zero-bubble schedules) needs "
				 "a pipeline stage (opts.stages)");
		goto fail;
	}
	if (o->block_causal && o->doc_eos < 0 && o->doc_bos < 0) {
		rc = titan_error(TITAN_E_INVALID, "training.attn_mask_type: block_causal needs "
				 "document boundaries (an EOS or BOS id; opts.doc_eos/doc_bos)");
		goto fail;
	}
	/* the document mask: the CPU kernels' and the CUDA backend's attention
	 * take document ids (titan/ops.h) */
	if (o->block_causal && !cpu_kernels(be) && strcmp(be->ops->name, "cuda") != 0) {
		rc = titan_error(TITAN_E_INVALID, "training.attn_mask_type: block_causal is not "
				 "in the %s backend's attention; use training.device: cpu",
				 be->ops->name);
		goto fail;
	}
	/* multi-head latent attention (deepseek_v3) moves its tensors with
	 * host loops (block.c) */
	if (titan_model_mla(d) && !cpu_kernels(be)) {
		rc = titan_error(TITAN_E_INVALID, "model.name: deepseek_v3's multi-head latent "
				 "attention runs on the cpu backend only (training.device)");
		goto fail;
	}
	/* torchtitan's Llama 4 (flex attention): the RoPE blocks and-ed with
	 * get_fixed_block_mask_mod; a sequence no longer than the block is
	 * causal there.  As document ids: the CPU kernels' */
	if (d->nope_every > 1 && o->seq > d->attn_chunk) {
		m->chunk = d->attn_chunk;
		if (!cpu_kernels(be)) {
			rc = titan_error(TITAN_E_INVALID, "model.fixed_attn_block_size: %lld below "
					 "training.seq_len %lld (chunked attention on the RoPE "
					 "blocks) is not in the %s backend's attention; use "
					 "training.device: cpu", (long long)d->attn_chunk,
					 (long long)o->seq, be->ops->name);
			goto fail;
		}
	}
	tpn = o->tp && titan_comm_size(o->tp) > 1 ? titan_comm_size(o->tp) : 1;
	m->H = d->n_heads / tpn;
	m->Hkv = d->n_kv_heads / tpn;
	m->F = d->ffn_hidden / tpn;
	for (int64_t l = 0; l < L; l++)
		m->has_moe = m->has_moe || titan_model_layer_is_moe(d, l);
	if (m->has_moe) {
		if (!cpu_kernels(be)) {
			rc = titan_error(TITAN_E_INVALID, "model.moe_num_experts %lld: the MoE "
					 "feed-forward runs on the cpu backend only (training.device)",
					 (long long)d->moe.num_experts);
			goto fail;
		}
		if (o->batch * o->seq > INT32_MAX / d->moe.top_k) { /* moe.h's int32 slot ids */
			rc = titan_error(TITAN_E_INVALID, "model.moe_top_k %lld: %lld x %lld tokens "
					 "of a microbatch make more than 2^31 routed rows",
					 (long long)d->moe.top_k, (long long)o->batch,
					 (long long)o->seq);
			goto fail;
		}
		m->moe = (struct titan_moe){be, &titan_moe_dispatch_local, &m->d.moe, 0, C, NULL,
					    tpn, 0, 0};
		if (tpn > 1 && d->moe.inter_dim % tpn) {
			rc = titan_error(TITAN_E_INVALID, "parallelism.tensor_parallel_degree %lld "
					 "does not divide model.moe_inter_dim %lld",
					 (long long)tpn, (long long)d->moe.inter_dim);
			goto fail;
		}
		if (o->ep && titan_comm_size(o->ep) > 1) {
			const int P = titan_comm_size(o->ep);

			if (d->moe.num_experts % P) {
				rc = titan_error(TITAN_E_INVALID, "parallelism.expert_parallel_degree "
						 "%d does not divide model.moe_num_experts %lld", P,
						 (long long)d->moe.num_experts);
				goto fail;
			}
			/* the table holds this rank's experts only (titan/model.h
			 * titan_param_table_opts ep_*): row 0 is its first */
			m->moe_ep = (struct titan_moe_ep){o->ep, P, titan_comm_rank(o->ep), NULL,
							  NULL, titan_comm_rank(o->ep) *
							  (d->moe.num_experts / P)};
			m->moe.ep = &m->moe_ep;
			m->moe.dispatch = &titan_moe_dispatch_ep;
		}
		if (!(m->moe_tokens = calloc((size_t)(L * d->moe.num_experts),
					     sizeof(*m->moe_tokens)))) {
			rc = titan_error(TITAN_E_NOMEM, "out of memory");
			goto fail;
		}
	}
	if ((rc = titan_cp_init(&m->cp, be, m->alloc, o->cp, o->cp_ring, o->batch, o->seq, m->H,
				m->Hkv, d->head_dim)) < 0)
		goto fail;
	m->n = m->cp.n;
	m->moe.n = m->n;
	if (o->table) { /* the layout's */
		to = *o->table;
	} else { /* the groups' */
		titan_param_table_opts_default(&to);
		if (o->shard_degree > 1) {
			to.shard_rank = o->shard_rank;
			to.shard_degree = o->shard_degree;
		}
		to.tp_rank = tpn > 1 ? titan_comm_rank(o->tp) : 0;
		to.tp_degree = tpn;
		if (m->moe.ep) {
			to.ep_rank = (int)m->moe_ep.rank;
			to.ep_degree = (int)m->moe_ep.ep;
			to.ep_shard_rank = o->ep_shard_rank;
			to.ep_shard_degree = o->ep_shard_degree;
		}
		to.stages = o->stages;
	}
	if (m->n % tpn) {
		rc = titan_error(TITAN_E_INVALID, "sequence parallelism: the %lld tokens of a "
				 "microbatch (batch %lld x seq %lld) do not split over "
				 "tensor_parallel_degree %d", (long long)m->n, (long long)o->batch,
				 (long long)o->seq, tpn);
		goto fail;
	}
	m->nl = m->n / tpn;
	if (m->moe.ep && tpn > 1) { /* EP x TP: this TP rank's sequence shard routed */
		m->moe.r0 = to.tp_rank * m->nl;
		m->moe.nr = m->nl;
	}
	m->pp = o->pp;
	m->pl.n = o->pp_microbatches > 1 ? (int)o->pp_microbatches : 1;
	titan_stages_init(&m->pl.st, &o->stages, (int)L);
	if ((rc = titan_param_table_init(&m->table, d, &to)) < 0 ||
	    (rc = arena(m, &m->params, TITAN_MEM_PARAMS, TITAN_BUF_WEIGHTS)) < 0 ||
	    (rc = arena(m, &m->grads, TITAN_MEM_GRADS, TITAN_BUF_GRADS)) < 0 ||
	    (rc = arena(m, &m->m, TITAN_MEM_OPTIM, TITAN_BUF_MOMENTS)) < 0 ||
	    (rc = arena(m, &m->v, TITAN_MEM_OPTIM, TITAN_BUF_MOMENTS)) < 0)
		goto fail;
	rc = TITAN_E_NOMEM;
	/* groups: embeddings, each block, norm + output (FSDP's units) */
	m->ngroups = (int)L + 2;
	m->pv = calloc((size_t)m->table.n, sizeof(*m->pv));
	m->gv = calloc((size_t)m->table.n, sizeof(*m->gv));
	m->group_first = calloc((size_t)m->ngroups + 1, sizeof(*m->group_first));
	if (!m->pv || !m->gv || !m->group_first)
		goto fail;
	m->group_first[0] = 0;
	/* a block's first parameter: q_norm (QK-norm), wq, or MLA's wq_a */
	for (int g = 1, i = 0; g <= (int)L; g++) {
		while (i < m->table.n && m->table.params[i].layer != g - 1)
			i++;
		m->group_first[g] = i;
	}
	m->group_first[L + 1] = titan_param_index(&m->table, TITAN_PARAM_NORM, -1);
	m->group_first[L + 2] = m->table.n;
	for (int g = 0; g < m->ngroups; g++)
		titan_llama_bind_group(m, g, NULL, NULL);
	if ((rc = init_rope(m)) < 0)
		goto fail;
	rc = TITAN_E_NOMEM;
	m->pl.mb = calloc((size_t)m->pl.n, sizeof(*m->pl.mb));
	if (!m->pl.mb || (rc = ac_policy_init(&m->ac, o, (int)L)) < 0 ||
	    (rc = alloc_shared_acts(m)) < 0)
		goto fail;
	for (int k = 0; k < m->pl.n; k++) {
		m->at_mb = k;
		if ((rc = alloc_mb(m, &m->pl.mb[k])) < 0 ||
		    (o->pp_split_backward && (rc = alloc_wstash(m, &m->pl.mb[k])) < 0))
			goto fail;
	}
	m->at_mb = -1;
	if (o->pp_split_backward) {
		rc = TITAN_E_NOMEM;
		/* QK-norm's too, and MLA's q_norm and kv_norm */
		int64_t nones = C > d->head_dim ? C : d->head_dim;

		if (titan_model_mla(d) && d->mla.kv_lora_rank > nones)
			nones = d->mla.kv_lora_rank;
		if (titan_model_mla(d) && d->mla.q_lora_rank > nones)
			nones = d->mla.q_lora_rank;

		if (!(m->pl.ones = buf(m, nones, TITAN_MEM_WORKSPACE, TITAN_BUF_ZB_ONES)))
			goto fail;
		if ((rc = set_ones(m, m->pl.ones, nones)) < 0)
			goto fail;
	}
	if ((rc = alloc_scratch(m)) < 0 ||
	    (rc = titan_sp_init(&m->sp, be, o->tp, m->n, C, d->vocab_size,
				m->table.params[0].tp_off, m->table.params[0].shape[0],
				m->o.ce_chunk, o->loss_parallel, model_buf, m)) < 0)
		goto fail;
	/* host memory, after the plan (which refuses sizes past 64 bits) */
	rc = TITAN_E_NOMEM;
	if (!(m->ids_host = malloc((size_t)m->n * sizeof(*m->ids_host))))
		goto fail;
	*out = m;
	return 0;
fail:
	if (m->plan_overflow)
		rc = TITAN_E_INVALID; /* the plan past 64 bits, not the allocator */
	if (rc == TITAN_E_NOMEM && !titan_error_last()->code)
		titan_error(rc, "out of memory for the model");
	titan_llama_free(m);
	return rc;
}

void titan_llama_free(struct titan_llama *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->nblocks; i++)
		titan_mem_free(m->alloc, m->blocks[i]);
	free(m->blocks);
	free(m->plan);
	free(m->pv);
	free(m->gv);
	free(m->group_first);
	for (int k = 0; m->pl.mb && k < m->pl.n; k++) {
		free(m->pl.mb[k].x);
		free(m->pl.mb[k].acts);
		free(m->pl.mb[k].w);
		if (m->pl.mb[k].doc_malloc)
			free(m->pl.mb[k].doc);
	}
	free(m->pl.mb);
	free(m->ac.whole);
	titan_param_arena_release(&m->params);
	titan_param_arena_release(&m->grads);
	titan_param_arena_release(&m->m);
	titan_param_arena_release(&m->v);
	free(m->ids_host);
	free(m->moe_tokens);
	free(m->spans_all);
	free(m->spans_adamw);
	titan_param_table_release(&m->table);
	free(m);
}

const struct titan_param_table *titan_llama_table(const struct titan_llama *m)
{
	return &m->table;
}

struct titan_param_arena *titan_llama_params(struct titan_llama *m)
{
	return &m->params;
}

struct titan_param_arena *titan_llama_grads(struct titan_llama *m)
{
	return &m->grads;
}

void titan_llama_moments(struct titan_llama *m, float **exp_avg, float **exp_avg_sq)
{
	*exp_avg = m->m.data;
	*exp_avg_sq = m->v.data;
}

int titan_llama_state_get(struct titan_llama *m, float *params, float *exp_avg,
			  float *exp_avg_sq)
{
	const size_t bytes = (size_t)m->table.arena_floats * sizeof(float);
	const struct titan_param_arena *a[3] = {&m->params, &m->m, &m->v};
	float *h[3] = {params, exp_avg, exp_avg_sq};

	for (int i = 0; i < 3; i++)
		if (h[i] && m->be->ops->buf_get(m->be, h[i], a[i]->data, bytes) < 0)
			return titan_error_prefix("copying the model state from the backend");
	return 0;
}

int titan_llama_state_set(struct titan_llama *m, const float *params, const float *exp_avg,
			  const float *exp_avg_sq)
{
	const size_t bytes = (size_t)m->table.arena_floats * sizeof(float);
	struct titan_param_arena *a[3] = {&m->params, &m->m, &m->v};
	const float *h[3] = {params, exp_avg, exp_avg_sq};

	for (int i = 0; i < 3; i++)
		if (h[i] && m->be->ops->buf_set(m->be, a[i]->data, h[i], bytes) < 0)
			return titan_error_prefix("copying the model state to the backend");
	return 0;
}

/* torchtitan's init on the host (lib/model), a parameter at a time (a
 * small uncounted staging buffer: the memory peak stays the model's), set
 * into the backend's parameter arena. */
int titan_llama_init_weights(struct titan_llama *m, uint64_t seed)
{
	int64_t most = 0;
	float *h;
	int rc = 0;

	for (int i = 0; i < m->table.n; i++)
		if (m->table.params[i].local_numel > most)
			most = m->table.params[i].local_numel;
	if (!(h = malloc((size_t)(most ? most : 1) * sizeof(*h))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	for (int i = 0; i < m->table.n && rc == 0; i++) {
		const struct titan_param *p = &m->table.params[i];

		titan_model_init_param_rows(p, seed, p->row0, p->rows, h);
		rc = m->be->ops->buf_set(m->be, titan_param_view(&m->params, p), h,
					 (size_t)p->local_numel * sizeof(*h));
	}
	free(h);
	return rc;
}

int titan_llama_zero_grads(struct titan_llama *m)
{
	return m->be->ops->zero(m->be, m->grads.data, m->table.arena_floats);
}

/* Parameter and gradient views by role (the output of a tied model is the
 * embedding). */
static int pindex(struct titan_llama *m, enum titan_param_role r, int layer)
{
	int i = titan_param_index(&m->table, r, layer);

	if (i < 0 && r == TITAN_PARAM_OUTPUT) /* tied */
		i = titan_param_index(&m->table, TITAN_PARAM_TOK_EMBEDDINGS, -1);
	return i;
}

/* NULL for a role the model lacks (q_norm, k_norm without QK-norm) */
static float *P(struct titan_llama *m, enum titan_param_role r, int layer)
{
	int i = pindex(m, r, layer);

	return i < 0 ? NULL : m->pv[i];
}

static float *G(struct titan_llama *m, enum titan_param_role r, int layer)
{
	int i = pindex(m, r, layer);

	return i < 0 ? NULL : m->gv[i];
}

#define CK(call) do { if ((rc = (call)) < 0) return rc; } while (0)

/* Block `l` forward (block.c, which titan-generate runs too): the ops
 * `ops` in order (titan_block_fwd_all: the whole block; a recomputation's:
 * what the block did not keep, by the same calls on the same inputs, so
 * with the same bits), reading x[l], writing x[l + 1] and keeping its
 * activations in `a`, with this model's sequence/tensor-parallel moves and
 * attention (tp.h, cp.h). */
/* block_causal: block l's attention reads microbatch b's document ids;
 * with chunked attention a RoPE block its chunk ids */
static void use_docs(struct titan_llama *m, const struct mb *b, int l)
{
	const int32_t *d = m->chunk && !titan_model_layer_nope(&m->d, l) ? b->cid : b->doc;

	m->cp.doc = d;
	m->cp.ldoc = d ? d + m->o.batch * m->o.seq : NULL;
}

static int block_fwd(struct titan_llama *m, const struct mb *b, int l, struct acts *a,
		     const enum fwd_op *ops, int nops, bool count)
{
	const struct titan_block k = {
		.be = m->be, .sp = &m->sp, .attn = &m->cp, .freqs = m->freqs, .n = m->n,
		.B = m->o.batch, .T = m->cp.tl, .C = m->d.dim, .F = m->F, .H = m->H,
		.Hkv = m->Hkv, .D = m->d.head_dim, .eps = (float)m->d.norm_eps,
		.moe = titan_model_layer_is_moe(&m->d, l) ? &m->moe : NULL,
		.nope = titan_model_layer_nope(&m->d, l),
		.moe_tokens = count && m->moe_count ? m->moe_tokens + l * m->d.moe.num_experts
						    : NULL,
		.mla = titan_model_mla(&m->d) ? &m->d.mla : NULL, .mla_freqs = m->mla_freqs,
		.mla_qscale = m->mla_qscale,
	};
	struct block_w w = {0};

	for (int r = 0; r < TITAN_PARAM_NROLES; r++) {
		int i = titan_param_index(&m->table, (enum titan_param_role)r, l);

		w.w[r] = i < 0 ? NULL : m->pv[i];
	}
	use_docs(m, b, l);
	return titan_block_fwd(&k, &w, b->x[l], b->x[l + 1], a, ops, nops);
}

/* Where block l's forward keeps its activations: the shared set when its
 * backward recomputes it whole. */
static struct acts *fwd_acts(struct titan_llama *m, const struct mb *b, int l)
{
	return m->ac.whole[l] ? &m->ac.shared : &b->acts[l];
}

/* Before block `l`'s backward, what the activation-checkpointing policy
 * recomputes: the whole block (into the shared set, which *a then points
 * at), the ops selective "op" did not keep, or nothing. */
static int block_recompute(struct titan_llama *m, const struct mb *b, int l, struct acts **a)
{
	const bool whole = m->ac.whole[l];
	int rc;

	if (!whole && m->ac.nredo == 0)
		return 0;
	*a = fwd_acts(m, b, l);
	span_begin(m, "recompute", l);
	rc = whole ? block_fwd(m, b, l, *a, titan_block_fwd_all, F_NOPS, false)
		   : block_fwd(m, b, l, *a, m->ac.redo, m->ac.nredo, false);
	span_end(m, "recompute");
	return rc;
}

/* The weight-gradient sink of a backward pass: where the weight gradients
 * of the ops go.  Immediate (the fused backward): added to the gradient
 * views now.  Deferred (the zero-bubble input pass): not computed; what
 * the weight pass reads is kept instead, the output gradients in the
 * microbatch's stash slots (keep) and the layer inputs when they live in
 * shared recompute buffers (keep_acts). */
struct wsink;
struct wsink_ops {
	/* the view weight r's gradient is added to; NULL: not now */
	float *(*dw)(const struct wsink *k, enum titan_param_role r, int layer);
	int (*keep)(const struct wsink *k, int l, enum wslot slot, const float *src, int64_t n);
	int (*keep_acts)(const struct wsink *k, int l, const struct acts *a);
};
struct wsink {
	const struct wsink_ops *ops;
	struct titan_llama *m;
	const struct mb *b;
};

static float *dw_now(const struct wsink *k, enum titan_param_role r, int layer)
{
	return G(k->m, r, layer);
}

static int keep_nothing(const struct wsink *k, int l, enum wslot slot, const float *src,
			int64_t n)
{
	(void)k, (void)l, (void)slot, (void)src, (void)n;
	return 0;
}

static int keep_no_acts(const struct wsink *k, int l, const struct acts *a)
{
	(void)k, (void)l, (void)a;
	return 0;
}

static float *dw_later(const struct wsink *k, enum titan_param_role r, int layer)
{
	(void)k, (void)r, (void)layer;
	return NULL;
}

static int keep_stash(const struct wsink *k, int l, enum wslot slot, const float *src,
		      int64_t n)
{
	float *dst = slot == WS_DXNF ? k->b->dxnf : k->b->w[l].g[slot];

	return k->m->be->ops->copy(k->m->be, dst, src, n);
}

/* A checkpointed MoE block's shared activations into the stash `x`
 * (alloc_moe_stash's members): the rows at this rank's experts only. */
static int keep_moe_acts(struct titan_llama *m, struct moe_acts *x, const struct moe_acts *a)
{
	const struct titan_backend_ops *op = m->be->ops;
	struct titan_backend *be = m->be;
	const int64_t C = m->d.dim, E = m->d.moe.num_experts;
	const int64_t Fm = titan_moe_expert_hidden(&m->moe), Fs = titan_moe_shared_hidden(&m->moe);
	const int64_t R = m->moe.ep ? a->erows : titan_moe_routed(&m->moe) * m->d.moe.top_k;
	int rc;

	memcpy(x->counts, a->counts, (size_t)E * sizeof(*x->counts));
	if (m->moe.ep) {
		memcpy(x->ecounts, a->ecounts, (size_t)(E / m->moe.ep->ep) * sizeof(*x->ecounts));
		x->erows = a->erows;
	}
	CK(op->copy(be, x->xin, a->xin, R * C));
	CK(op->copy(be, x->a, a->a, R * Fm));
	CK(op->copy(be, x->b, a->b, R * Fm));
	CK(op->copy(be, x->g, a->g, R * Fm));
	if (Fs > 0) {
		CK(op->copy(be, x->sa, a->sa, m->n * Fs));
		CK(op->copy(be, x->sb, a->sb, m->n * Fs));
		CK(op->copy(be, x->sg, a->sg, m->n * Fs));
	}
	return 0;
}

/* shared buffers (checkpointed blocks, selective "op"): keep what the
 * weight pass reads */
static int keep_stash_acts(const struct wsink *k, int l, const struct acts *a)
{
	const struct titan_backend_ops *op = k->m->be->ops;
	struct titan_backend *be = k->m->be;
	const struct acts *x = &k->b->w[l].x;
	const int64_t n = k->m->n, nl = k->m->nl, C = k->m->d.dim, F = k->m->F;
	const int64_t q = k->m->H * k->m->d.head_dim;
	int rc;

	if (!x->xn1)
		return 0;
	CK(op->copy(be, x->xn1, a->xn1, n * C));
	CK(op->copy(be, x->att, a->att, n * q));
	CK(op->copy(be, x->h, a->h, nl * C));
	CK(op->copy(be, x->xn2, a->xn2, n * C));
	CK(op->copy(be, x->rstd1, a->rstd1, nl));
	CK(op->copy(be, x->rstd2, a->rstd2, nl));
	if (x->a) { /* a dense feed-forward's */
		CK(op->copy(be, x->a, a->a, n * F));
		CK(op->copy(be, x->b, a->b, n * F));
		CK(op->copy(be, x->g, a->g, n * F));
	}
	if (x->moe.xin) /* a checkpointed MoE block's */
		CK(keep_moe_acts(k->m, &k->b->w[l].x.moe, &a->moe));
	if (x->q0) { /* QK-norm's inputs and 1/rms */
		const int64_t kv = k->m->Hkv * k->m->d.head_dim;

		CK(op->copy(be, x->q0, a->q0, n * q));
		CK(op->copy(be, x->k0, a->k0, n * kv));
		CK(op->copy(be, x->rstdq, a->rstdq, n * k->m->H));
		CK(op->copy(be, x->rstdk, a->rstdk, n * k->m->Hkv));
	}
	if (titan_model_mla(&k->m->d)) { /* what MLA's weight gradients read */
		const struct titan_mla_dims *ml = &k->m->d.mla;
		const int64_t R = ml->kv_lora_rank, Q = ml->q_lora_rank;

		CK(op->copy(be, x->mla.attv, a->mla.attv, n * k->m->H * ml->v_head_dim));
		CK(op->copy(be, x->mla.kvn, a->mla.kvn, n * R));
		CK(op->copy(be, x->mla.kvl, a->mla.kvl, n * R));
		CK(op->copy(be, x->mla.rstdkv, a->mla.rstdkv, n));
		if (Q > 0) {
			CK(op->copy(be, x->mla.cq, a->mla.cq, n * Q));
			CK(op->copy(be, x->mla.cq0, a->mla.cq0, n * Q));
			CK(op->copy(be, x->mla.rstdcq, a->mla.rstdcq, n));
		}
	}
	return 0;
}

static const struct wsink_ops sink_immediate = {dw_now, keep_nothing, keep_no_acts};
static const struct wsink_ops sink_deferred = {dw_later, keep_stash, keep_stash_acts};

/* A MoE block's feed-forward backward: m->dxn = dL/dxn2 from dy. */
static int moe_bwd(const struct wsink *k, int l, struct acts *a, const float *dy)
{
	struct titan_llama *m = k->m;
	const struct wsink_ops *g = k->ops;
	const float *W[TITAN_PARAM_NROLES] = {0};
	float *dW[TITAN_PARAM_NROLES] = {0};

	for (int r = TITAN_PARAM_MOE_W1; r <= TITAN_PARAM_MOE_EXPERT_BIAS; r++) {
		int i = titan_param_index(&m->table, (enum titan_param_role)r, l);

		W[r] = i < 0 ? NULL : m->pv[i];
		dW[r] = i < 0 || r == TITAN_PARAM_MOE_EXPERT_BIAS ? NULL :
			g->dw(k, (enum titan_param_role)r, l);
	}
	return titan_moe_bwd(&m->moe, &(struct moe_w){
		W[TITAN_PARAM_MOE_W1], W[TITAN_PARAM_MOE_W2], W[TITAN_PARAM_MOE_W3],
		W[TITAN_PARAM_MOE_GATE], W[TITAN_PARAM_MOE_SHARED_W1],
		W[TITAN_PARAM_MOE_SHARED_W2], W[TITAN_PARAM_MOE_SHARED_W3],
		W[TITAN_PARAM_MOE_EXPERT_BIAS]}, &(struct moe_dw){
		dW[TITAN_PARAM_MOE_W1], dW[TITAN_PARAM_MOE_W2], dW[TITAN_PARAM_MOE_W3],
		dW[TITAN_PARAM_MOE_GATE], dW[TITAN_PARAM_MOE_SHARED_W1],
		dW[TITAN_PARAM_MOE_SHARED_W2], dW[TITAN_PARAM_MOE_SHARED_W3]},
		a->xn2, dy, m->dxn, &a->moe, &m->moe_s, k->ops == &sink_deferred ?
		&(struct moe_keep){k->b->w[l].g[WS_DMROW], k->b->w[l].g[WS_DMLOGIT]} : NULL);
}

/* A MoE block's weight pass (block_wgrad): moe_bwd's weight gradients
 * from the stash `w`, the block's inputs `a` and the MoE's activations
 * `ma` (the stash's copies under full AC, else the block's own). */
static int moe_wgrad(struct titan_llama *m, float *const *w, const struct acts *a,
		     const struct moe_acts *ma, int l)
{
	return titan_moe_wgrad(&m->moe, &(struct moe_dw){
		G(m, TITAN_PARAM_MOE_W1, l), G(m, TITAN_PARAM_MOE_W2, l),
		G(m, TITAN_PARAM_MOE_W3, l), G(m, TITAN_PARAM_MOE_GATE, l),
		G(m, TITAN_PARAM_MOE_SHARED_W1, l), G(m, TITAN_PARAM_MOE_SHARED_W2, l),
		G(m, TITAN_PARAM_MOE_SHARED_W3, l)}, a->xn2, w[WS_DY], ma,
		&(struct moe_keep){w[WS_DMROW], w[WS_DMLOGIT]});
}

/* Multi-head latent attention's backward (block.c's mla_fwd in reverse,
 * host loops for its moves: the CPU backend only): m->dxn = dL/dxn1 from
 * dh, the gradient of wo's output. */
static int mla_bwd(const struct wsink *k, int l, struct acts *a, const float *dh)
{
	struct titan_llama *m = k->m;
	const struct wsink_ops *g = k->ops;
	const struct titan_backend_ops *op = m->be->ops;
	struct titan_backend *be = m->be;
	const struct titan_mla_dims *x = &m->d.mla;
	const int64_t n = m->n, C = m->d.dim, H = m->H, D = m->d.head_dim, T = m->cp.tl;
	const int64_t R = x->kv_lora_rank, Q = x->q_lora_rank, nope = x->qk_nope_head_dim;
	const int64_t rope = x->qk_rope_head_dim, V = x->v_head_dim, KA = R + rope, KB = nope + V;
	struct mla_acts *ma = &a->mla;
	int rc;

	/* wo: its input gradient [n, H·v] into dq, then padded to [n, H, D] */
	CK(op->matmul_bwd(be, m->dq, g->dw(k, TITAN_PARAM_WO, l), dh, ma->attv,
			  P(m, TITAN_PARAM_WO, l), n, H * V, C, false));
	for (int64_t i = 0; i < n * H; i++) {
		memcpy(m->datt + i * D, m->dq + i * V, (size_t)V * sizeof(float));
		memset(m->datt + i * D + V, 0, (size_t)(D - V) * sizeof(float));
	}
	use_docs(m, k->b, l);
	CK(m->cp.attn->bwd(&m->cp, m->dq, m->dk, m->dv, m->datt, a->q, a->k, a->v, a->att,
			   a->lse));
	/* k = [k_nope, k_pe] and v per head: wkv_b's output gradient, and
	 * k_pe's summed over the heads (in head order) */
	for (int64_t i = 0; i < n; i++) {
		float *pe = m->dkv0 + i * KA + R;

		memset(pe, 0, (size_t)rope * sizeof(float));
		for (int64_t h = 0; h < H; h++) {
			const float *dk = m->dk + (i * H + h) * D, *dv = m->dv + (i * H + h) * D;
			float *dst = m->dkvb + (i * H + h) * KB;

			memcpy(dst, dk, (size_t)nope * sizeof(float));
			memcpy(dst + nope, dv, (size_t)V * sizeof(float));
			for (int64_t j = 0; j < rope; j++)
				pe[j] += dk[nope + j];
		}
	}
	titan_mla_rope(m->dkv0, m->mla_freqs, n, T, 1, KA, R, rope, 1.0f, true);
	CK(g->keep(k, l, WS_DKVB, m->dkvb, n * H * KB));
	CK(op->matmul_bwd(be, m->dkvn, g->dw(k, TITAN_PARAM_MLA_WKV_B, l), m->dkvb, ma->kvn,
			  P(m, TITAN_PARAM_MLA_WKV_B, l), n, R, H * KB, false));
	CK(g->keep(k, l, WS_DKVN, m->dkvn, n * R));
	CK(op->rmsnorm_bwd(be, m->dkvn, g->dw(k, TITAN_PARAM_MLA_KV_NORM, l), m->dkvn, ma->kvl,
			   P(m, TITAN_PARAM_MLA_KV_NORM, l), ma->rstdkv, n, R, false));
	for (int64_t i = 0; i < n; i++)
		memcpy(m->dkv0 + i * KA, m->dkvn + i * R, (size_t)R * sizeof(float));
	CK(g->keep(k, l, WS_DKV0, m->dkv0, n * KA));
	CK(op->matmul_bwd(be, m->dxn, g->dw(k, TITAN_PARAM_MLA_WKV_A, l), m->dkv0, a->xn1,
			  P(m, TITAN_PARAM_MLA_WKV_A, l), n, C, KA, false));
	/* q: the rope part rotated back, both parts times mscale² */
	titan_mla_rope(m->dq, m->mla_freqs, n, T, H, D, nope, rope, m->mla_qscale, true);
	CK(g->keep(k, l, WS_DQ, m->dq, n * H * D));
	if (Q > 0) {
		CK(op->matmul_bwd(be, m->dcq, g->dw(k, TITAN_PARAM_MLA_WQ_B, l), m->dq, ma->cq,
				  P(m, TITAN_PARAM_MLA_WQ_B, l), n, Q, H * D, false));
		CK(g->keep(k, l, WS_DCQ, m->dcq, n * Q));
		CK(op->rmsnorm_bwd(be, m->dcq0, g->dw(k, TITAN_PARAM_MLA_Q_NORM, l), m->dcq,
				   ma->cq0, P(m, TITAN_PARAM_MLA_Q_NORM, l), ma->rstdcq, n, Q,
				   false));
		CK(g->keep(k, l, WS_DCQ0, m->dcq0, n * Q));
		return op->matmul_bwd(be, m->dxn, g->dw(k, TITAN_PARAM_MLA_WQ_A, l), m->dcq0,
				      a->xn1, P(m, TITAN_PARAM_MLA_WQ_A, l), n, C, Q, true);
	}
	return op->matmul_bwd(be, m->dxn, g->dw(k, TITAN_PARAM_WQ, l), m->dq, a->xn1,
			      P(m, TITAN_PARAM_WQ, l), n, C, H * D, true);
}

/* MLA's weight pass (block_wgrad): mla_bwd's weight gradients from the
 * stash `w` and the inputs `a`; the norms' input gradients to scratch. */
static int mla_wgrad(struct titan_llama *m, float *const *w, const struct acts *a, int l)
{
	const struct titan_backend_ops *op = m->be->ops;
	struct titan_backend *be = m->be;
	const struct titan_mla_dims *x = &m->d.mla;
	const struct mla_acts *ma = &a->mla;
	const int64_t n = m->n, C = m->d.dim, H = m->H, D = m->d.head_dim;
	const int64_t R = x->kv_lora_rank, Q = x->q_lora_rank, V = x->v_head_dim;
	const int64_t KA = R + x->qk_rope_head_dim, KB = x->qk_nope_head_dim + V;
	int rc;

	CK(op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_WO, l), w[WS_DH], ma->attv, NULL, n, H * V,
			  C, false));
	CK(op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_MLA_WKV_B, l), w[WS_DKVB], ma->kvn, NULL, n,
			  R, H * KB, false));
	CK(op->rmsnorm_bwd(be, m->dkvn, G(m, TITAN_PARAM_MLA_KV_NORM, l), w[WS_DKVN], ma->kvl,
			   m->pl.ones, ma->rstdkv, n, R, false));
	CK(op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_MLA_WKV_A, l), w[WS_DKV0], a->xn1, NULL, n,
			  C, KA, false));
	if (Q <= 0)
		return op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_WQ, l), w[WS_DQ], a->xn1, NULL, n,
				      C, H * D, false);
	CK(op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_MLA_WQ_B, l), w[WS_DQ], ma->cq, NULL, n, Q,
			  H * D, false));
	CK(op->rmsnorm_bwd(be, m->dcq0, G(m, TITAN_PARAM_MLA_Q_NORM, l), w[WS_DCQ], ma->cq0,
			   m->pl.ones, ma->rstdcq, n, Q, false));
	return op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_MLA_WQ_A, l), w[WS_DCQ0], a->xn1, NULL,
			      n, C, Q, false);
}

/* Block `l` backward: m->dx holds dL/dx[l+1] on entry and dL/dx[l] on exit
 * (this rank's nl tokens with sequence parallelism: gathered before the
 * matmuls whose forward outputs were scattered, the input gradients of
 * the gathered norms' outputs reduce-scattered).  The weight gradients go
 * to the sink `k` (skipped and their operands stashed for block_wgrad
 * when it is deferred). */
static int block_bwd(const struct wsink *k, int l, struct acts *a)
{
	struct titan_llama *m = k->m;
	const struct wsink_ops *g = k->ops;
	const struct titan_backend_ops *op = m->be->ops;
	struct titan_backend *be = m->be;
	struct titan_sp *sp = &m->sp;
	const struct titan_model_dims *d = &m->d;
	const int64_t n = m->n, nl = m->nl, C = d->dim, F = m->F, B = m->o.batch, T = m->cp.tl;
	const int64_t D = d->head_dim, q = m->H * D, kv = m->Hkv * D;
	const float *dy, *dh, *dxn;
	int rc;

	/* feed-forward: y = h + w2(silu(w1 xn2) * w3 xn2), xn2 = norm(h) */
	CK(sp->ops->gather_grad(sp, &dy, m->dx, "tp ffn output grad"));
	CK(g->keep(k, l, WS_DY, dy, n * C));
	if (titan_model_layer_is_moe(d, l)) { /* or y = h + moe(xn2) */
		CK(moe_bwd(k, l, a, dy));
	} else {
		CK(op->matmul_bwd(be, m->dg, g->dw(k, TITAN_PARAM_W2, l), dy, a->g,
				  P(m, TITAN_PARAM_W2, l), n, F, C, false));
		CK(op->swiglu_bwd(be, a->a, a->b, m->dg, a->a, a->b, n * F)); /* da, db in place */
		CK(op->matmul_bwd(be, m->dxn, g->dw(k, TITAN_PARAM_W1, l), a->a, a->xn2,
				  P(m, TITAN_PARAM_W1, l), n, C, F, false));
		CK(op->matmul_bwd(be, m->dxn, g->dw(k, TITAN_PARAM_W3, l), a->b, a->xn2,
				  P(m, TITAN_PARAM_W3, l), n, C, F, true));
	}
	CK(sp->ops->scatter_grad(sp, &dxn, m->dxn, "tp ffn input grad"));
	CK(g->keep(k, l, WS_DXN2, dxn, nl * C));
	CK(op->copy(be, m->dh, m->dx, nl * C));
	CK(op->rmsnorm_bwd(be, m->dh, g->dw(k, TITAN_PARAM_FFN_NORM, l), dxn, a->h,
			   P(m, TITAN_PARAM_FFN_NORM, l), a->rstd2, nl, C, true));
	/* attention: h = x + wo(attn(rope(wq xn1), rope(wk xn1), wv xn1)), xn1 = norm(x) */
	CK(sp->ops->gather_grad(sp, &dh, m->dh, "tp attention output grad"));
	CK(g->keep(k, l, WS_DH, dh, n * C));
	if (titan_model_mla(d)) {
		CK(mla_bwd(k, l, a, dh));
		goto attention_input;
	}
	CK(op->matmul_bwd(be, m->datt, g->dw(k, TITAN_PARAM_WO, l), dh, a->att,
			  P(m, TITAN_PARAM_WO, l), n, q, C, false));
	use_docs(m, k->b, l);
	CK(m->cp.attn->bwd(&m->cp, m->dq, m->dk, m->dv, m->datt, a->q, a->k, a->v, a->att,
			   a->lse));
	if (!titan_model_layer_nope(d, l)) {
		CK(op->rope_bwd(be, m->dq, m->freqs, B, T, m->H, D));
		CK(op->rope_bwd(be, m->dk, m->freqs, B, T, m->Hkv, D));
	}
	if (d->qk_norm) { /* QK-norm, in place: the gradients of wq x, wk x */
		CK(g->keep(k, l, WS_DQN, m->dq, n * q));
		CK(g->keep(k, l, WS_DKN, m->dk, n * kv));
		CK(op->rmsnorm_bwd(be, m->dq, g->dw(k, TITAN_PARAM_Q_NORM, l), m->dq, a->q0,
				   P(m, TITAN_PARAM_Q_NORM, l), a->rstdq, n * m->H, D, false));
		CK(op->rmsnorm_bwd(be, m->dk, g->dw(k, TITAN_PARAM_K_NORM, l), m->dk, a->k0,
				   P(m, TITAN_PARAM_K_NORM, l), a->rstdk, n * m->Hkv, D, false));
	}
	CK(g->keep(k, l, WS_DQ, m->dq, n * q));
	CK(g->keep(k, l, WS_DK, m->dk, n * kv));
	CK(g->keep(k, l, WS_DV, m->dv, n * kv));
	CK(op->matmul_bwd(be, m->dxn, g->dw(k, TITAN_PARAM_WQ, l), m->dq, a->xn1,
			  P(m, TITAN_PARAM_WQ, l), n, C, q, false));
	CK(op->matmul_bwd(be, m->dxn, g->dw(k, TITAN_PARAM_WK, l), m->dk, a->xn1,
			  P(m, TITAN_PARAM_WK, l), n, C, kv, true));
	CK(op->matmul_bwd(be, m->dxn, g->dw(k, TITAN_PARAM_WV, l), m->dv, a->xn1,
			  P(m, TITAN_PARAM_WV, l), n, C, kv, true));
attention_input:
	CK(sp->ops->scatter_grad(sp, &dxn, m->dxn, "tp attention input grad"));
	CK(g->keep(k, l, WS_DXN1, dxn, nl * C));
	CK(op->copy(be, m->dx, m->dh, nl * C));
	CK(op->rmsnorm_bwd(be, m->dx, g->dw(k, TITAN_PARAM_ATTENTION_NORM, l), dxn, k->b->x[l],
			   P(m, TITAN_PARAM_ATTENTION_NORM, l), a->rstd1, nl, C, true));
	return g->keep_acts(k, l, a);
}

/* Block `l`'s weight pass (split backward): the weight gradients block_bwd
 * skipped, by the same calls on the same operands (the norms' input
 * gradients, which the calls also compute, go to scratch: ones stand in
 * for the weight, which they alone read). */
static int block_wgrad(struct titan_llama *m, const struct mb *b, int l)
{
	const struct titan_backend_ops *op = m->be->ops;
	struct titan_backend *be = m->be;
	const struct titan_model_dims *d = &m->d;
	const int64_t n = m->n, nl = m->nl, C = d->dim, F = m->F;
	const int64_t q = m->H * d->head_dim, kv = m->Hkv * d->head_dim;
	float *const *w = b->w[l].g;
	const struct acts *a = b->w[l].x.xn1 ? &b->w[l].x : &b->acts[l];
	int rc;

	if (titan_model_layer_is_moe(d, l)) {
		CK(moe_wgrad(m, w, a, b->w[l].x.moe.xin ? &b->w[l].x.moe : &b->acts[l].moe, l));
	} else {
		CK(op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_W2, l), w[WS_DY], a->g, NULL, n, F, C,
				  false));
		CK(op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_W1, l), a->a, a->xn2, NULL, n, C, F,
				  false));
		CK(op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_W3, l), a->b, a->xn2, NULL, n, C, F,
				  false));
	}
	CK(op->rmsnorm_bwd(be, m->dh, G(m, TITAN_PARAM_FFN_NORM, l), w[WS_DXN2], a->h,
			   m->pl.ones, a->rstd2, nl, C, false));
	if (titan_model_mla(d)) {
		CK(mla_wgrad(m, w, a, l));
		goto attention_norm;
	}
	CK(op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_WO, l), w[WS_DH], a->att, NULL, n, q, C,
			  false));
	CK(op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_WQ, l), w[WS_DQ], a->xn1, NULL, n, C, q,
			  false));
	CK(op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_WK, l), w[WS_DK], a->xn1, NULL, n, C, kv,
			  false));
	CK(op->matmul_bwd(be, NULL, G(m, TITAN_PARAM_WV, l), w[WS_DV], a->xn1, NULL, n, C, kv,
			  false));
	if (d->qk_norm) { /* the input gradients go to the q, k scratch */
		CK(op->rmsnorm_bwd(be, m->dq, G(m, TITAN_PARAM_Q_NORM, l), w[WS_DQN], a->q0,
				   m->pl.ones, a->rstdq, n * m->H, d->head_dim, false));
		CK(op->rmsnorm_bwd(be, m->dk, G(m, TITAN_PARAM_K_NORM, l), w[WS_DKN], a->k0,
				   m->pl.ones, a->rstdk, n * m->Hkv, d->head_dim, false));
	}
attention_norm:
	return op->rmsnorm_bwd(be, m->dh, G(m, TITAN_PARAM_ATTENTION_NORM, l), w[WS_DXN1],
			       b->x[l], m->pl.ones, a->rstd1, nl, C, false);
}

/* The microbatch's token ids (with CP, this rank's tokens of each row). */
static int load_ids(struct titan_llama *m, struct mb *b, const int32_t *inputs)
{
	for (int64_t i = 0; i < m->n; i++) {
		const int64_t at = titan_cp_token(&m->cp, i);

		if (inputs[at] < 0 || inputs[at] >= m->d.vocab_size)
			return titan_error(TITAN_E_INVALID, "input token %lld is id %d, outside the "
					   "vocabulary (size %lld)", (long long)at, inputs[at],
					   (long long)m->d.vocab_size);
		m->ids_host[i] = (uint32_t)inputs[at];
	}
	return m->be->ops->buf_set(m->be, b->ids, m->ids_host, (size_t)m->n * sizeof(*b->ids));
}

/* The microbatch's labels (with CP, this rank's tokens'), range-checked
 * on the host (the message of the backends' classifier_ce) and set into a
 * backend buffer: CP's labels buffer, or else the SwiGLU gradient scratch
 * dg (n·F floats, unused until the blocks' backward, which runs after the
 * loss in stream order). */
static int load_labels(struct titan_llama *m, const int32_t **labels)
{
	const int32_t *l = titan_cp_labels(&m->cp, *labels, (int32_t *)m->ids_host);
	int32_t *dst = m->cp.comm ? m->cp.lab : (int32_t *)m->dg;

	for (int64_t i = 0; i < m->n; i++)
		if (l[i] >= m->d.vocab_size)
			return titan_error(TITAN_E_INVALID, "label %d at position %lld is outside "
					   "the vocabulary (size %lld)", (int)l[i], (long long)i,
					   (long long)m->d.vocab_size);
	*labels = dst;
	return m->be->ops->buf_set(m->be, dst, l, (size_t)m->n * sizeof(*l));
}

static int forward(struct titan_llama *m, const struct titan_pp_stage *s, struct mb *b,
		   const int32_t *inputs)
{
	const struct titan_llama_group_hooks *h = &m->ghooks;
	const int L = (int)m->d.n_layers;
	struct titan_sp *sp = &m->sp;
	int rc = 0;

	if (s->first)
		CK(load_ids(m, b, inputs));
	if (b->doc) /* every stage: its blocks' attention needs them */
		titan_cp_docs(&m->cp, inputs, m->o.doc_eos, m->o.doc_bos, b->doc,
			      b->doc + m->o.batch * m->o.seq);
	if (b->cid)
		titan_cp_chunk_ids(&m->cp, b->doc, m->chunk, b->cid,
				   b->cid + m->o.batch * m->o.seq);
	span_begin(m, "forward", -1);
	if (s->first) {
		span_begin(m, "embedding", -1);
		if ((rc = ghook(m, h->pre_forward, 0)) == 0)
			rc = sp->ops->embedding_fwd(sp, b->x[0], b->ids,
						    P(m, TITAN_PARAM_TOK_EMBEDDINGS, -1));
		if (rc == 0)
			rc = ghook(m, h->post_forward, 0);
		span_end(m, "embedding");
		if (rc < 0) {
			span_end(m, "forward");
			return rc;
		}
	}
	for (int l = s->l0; l < s->l1 && rc == 0; l++) {
		span_begin(m, "forward", l);
		if ((rc = ghook(m, h->pre_forward, 1 + l)) == 0)
			rc = block_fwd(m, b, l, fwd_acts(m, b, l), titan_block_fwd_all, F_NOPS, true);
		if (rc == 0)
			rc = ghook(m, h->post_forward, 1 + l);
		span_end(m, "forward");
	}
	if (!s->last) {
		span_end(m, "forward");
		return rc;
	}
	if (rc == 0)
		rc = ghook(m, h->pre_forward, L + 1);
	if (rc == 0)
		rc = sp->ops->norm(sp, b->xnf, b->rstdf, b->x[L], P(m, TITAN_PARAM_NORM, -1),
				   (float)m->d.norm_eps, "tp output input");
	span_end(m, "forward");
	return rc;
}

/* The loss on the last stage's xnf; with `dxn`, its gradient goes there
 * (and the classifier's into the gradient arena). */
static int loss_fwd(struct titan_llama *m, const struct mb *b, const int32_t *labels,
		    float grad_scale, float *dxn, double *loss_sum, int64_t *n_valid)
{
	const struct titan_llama_group_hooks *h = &m->ghooks;
	const int last = (int)m->d.n_layers + 1;
	struct titan_sp *sp = &m->sp;
	int rc;

	CK(load_labels(m, &labels));
	span_begin(m, "loss", -1);
	rc = dxn ? ghook(m, h->pre_backward, last) : 0;
	if (rc == 0)
		rc = sp->ops->classifier_ce(sp, loss_sum, n_valid, dxn,
					    dxn ? G(m, TITAN_PARAM_OUTPUT, -1) : NULL, b->xnf,
					    P(m, TITAN_PARAM_OUTPUT, -1), labels, grad_scale);
	if (rc == 0)
		rc = ghook(m, h->post_forward, last);
	span_end(m, "loss");
	return rc;
}

/* A backward pass over a stage: the fused backward (weight gradients to
 * the immediate sink), the zero-bubble input pass (to the deferred sink)
 * or its weight pass (the deferred gradients from the stash); one walk,
 * backward_walk, with the pass's step for the final norm and for a block
 * (the embedding's backward only comes with the fused one). */
struct bwd_pass {
	struct wsink sink;
	const struct titan_pp_stage *s;
	int (*norm)(const struct bwd_pass *p, const float *dxn);
	int (*block)(const struct bwd_pass *p, int l);
	int (*post)(void *ctx, int group); /* post_backward, NULL: no hook (input pass) */
	const char *span;                  /* a block's span */
};

/* The final norm's backward from `dxn`, the loss's gradient of its output:
 * its input gradient into m->dx. */
static int norm_bwd(const struct bwd_pass *p, const float *dxn)
{
	struct titan_llama *m = p->sink.m;
	const struct mb *b = p->sink.b;
	const struct wsink_ops *g = p->sink.ops;
	const int L = (int)m->d.n_layers;
	int rc = 0;

	/* a pipeline schedule may have run other microbatches' backward
	 * since this one's loss: the last group is gathered again (a no-op
	 * right after the loss) */
	if (m->pl.st.staged)
		rc = ghook(m, m->ghooks.pre_backward, L + 1);
	if (rc == 0)
		rc = m->sp.ops->scatter_grad(&m->sp, &dxn, dxn, "tp output input grad");
	if (rc == 0)
		rc = g->keep(&p->sink, -1, WS_DXNF, dxn, m->nl * m->d.dim);
	if (rc == 0)
		rc = m->be->ops->rmsnorm_bwd(m->be, m->dx, g->dw(&p->sink, TITAN_PARAM_NORM, -1),
					     dxn, b->x[L], P(m, TITAN_PARAM_NORM, -1), b->rstdf,
					     m->nl, m->d.dim, false);
	return rc == 0 ? ghook(m, p->post, L + 1) : rc;
}

/* Block l's backward (recomputing it first under activation
 * checkpointing). */
static int block_backward(const struct bwd_pass *p, int l)
{
	struct titan_llama *m = p->sink.m;
	struct acts *a = &p->sink.b->acts[l];
	int rc;

	CK(ghook(m, m->ghooks.pre_backward, 1 + l));
	CK(block_recompute(m, p->sink.b, l, &a));
	span_begin(m, p->span, l);
	rc = block_bwd(&p->sink, l, a);
	if (rc == 0)
		rc = ghook(m, p->post, 1 + l);
	span_end(m, p->span);
	return rc;
}

/* The weight pass of the final norm, from the stashed dy (dxn unused). */
static int norm_wgrad(const struct bwd_pass *p, const float *dxn)
{
	struct titan_llama *m = p->sink.m;
	const struct mb *b = p->sink.b;
	const int L = (int)m->d.n_layers;
	int rc;

	(void)dxn;
	CK(ghook(m, m->ghooks.pre_weight, L + 1));
	CK(m->be->ops->rmsnorm_bwd(m->be, m->dh, G(m, TITAN_PARAM_NORM, -1), b->dxnf, b->x[L],
				   m->pl.ones, b->rstdf, m->nl, m->d.dim, false));
	return ghook(m, p->post, L + 1);
}

static int block_weight(const struct bwd_pass *p, int l)
{
	struct titan_llama *m = p->sink.m;
	int rc;

	span_begin(m, p->span, l);
	if ((rc = ghook(m, m->ghooks.pre_weight, 1 + l)) == 0)
		rc = block_wgrad(m, p->sink.b, l);
	if (rc == 0)
		rc = ghook(m, p->post, 1 + l);
	span_end(m, p->span);
	return rc;
}

static int embedding_bwd(struct titan_llama *m, const struct mb *b)
{
	const struct titan_llama_group_hooks *h = &m->ghooks;
	int rc;

	span_begin(m, "embedding backward", -1);
	if ((rc = ghook(m, h->pre_backward, 0)) == 0)
		rc = m->sp.ops->embedding_bwd(&m->sp, G(m, TITAN_PARAM_TOK_EMBEDDINGS, -1), b->ids,
					      m->dx);
	if (rc == 0)
		rc = ghook(m, h->post_backward, 0);
	span_end(m, "embedding backward");
	return rc;
}

/* Backward through the stage: from `dxn` (the loss's gradient of the
 * final norm output) on the last stage, otherwise from m->dx (the next
 * stage's gradient of this stage's output); leaves the gradient of the
 * stage's input in m->dx (unused on the first stage). */
static int backward_walk(const struct bwd_pass *p, const float *dxn)
{
	const struct titan_pp_stage *s = p->s;
	struct titan_llama *m = p->sink.m;
	int rc = 0;

	span_begin(m, "backward", -1);
	if (s->last) {
		span_begin(m, "norm backward", -1);
		rc = p->norm(p, dxn);
		span_end(m, "norm backward");
	}
	for (int l = s->l1 - 1; l >= s->l0 && rc == 0; l--)
		rc = p->block(p, l);
	if (rc == 0 && s->first)
		rc = embedding_bwd(m, p->sink.b);
	span_end(m, "backward");
	return rc;
}

/* The fused backward: weight gradients now, post_backward hooks. */
static int backward_pass(struct titan_llama *m, const struct titan_pp_stage *s, const struct mb *b,
			 const float *dxn)
{
	const struct bwd_pass p = {{&sink_immediate, m, b}, s, norm_bwd, block_backward,
				   m->ghooks.post_backward, "backward"};

	return backward_walk(&p, dxn);
}

/* Group hooks around one step (titan/train.h): forward runs pre/post_forward
 * of groups 0 .. L and pre_forward of the last group (norm + output), which
 * stays in use through the loss; with backward its pre_backward comes before
 * the loss (the classifier's gradient is computed there), then its
 * post_forward, and post_backward after the final norm's backward. */
int titan_llama_step(struct titan_llama *m, const int32_t *inputs, const int32_t *labels,
		     float grad_scale, bool backward, double *loss_sum, int64_t *n_valid)
{
	const struct titan_pp_stage *s = &m->pl.st.v[0];
	struct mb *b = &m->pl.mb[0];
	int rc;

	TITAN_ASSERT(m->pl.st.n == 1 && s->first && s->last);
	m->moe_count = backward; /* torchtitan counts training tokens only */
	CK(forward(m, s, b, inputs));
	CK(loss_fwd(m, b, labels, grad_scale, backward ? m->dxn : NULL, loss_sum, n_valid));
	return backward ? backward_pass(m, s, b, m->dxn) : 0;
}

int titan_llama_pp_nstages(const struct titan_llama *m)
{
	return m->pl.st.n;
}

/* Stage v, microbatch k of a pipeline call. */
static const struct titan_pp_stage *pp_stage(const struct titan_llama *m, int v, int k)
{
	TITAN_ASSERT(k >= 0 && k < m->pl.n && v >= 0 && v < m->pl.st.n);
	return &m->pl.st.v[v];
}

/* The last stage's loss gradient of microbatch b: its own with several
 * microbatches or the split backward, else the scratch. */
static float *loss_grad(struct titan_llama *m, const struct mb *b)
{
	return b->dxn_out ? b->dxn_out : m->dxn;
}

int titan_llama_pp_forward(struct titan_llama *m, int v, int k, const int32_t *inputs,
			   const int32_t *labels, float grad_scale, bool backward,
			   double *loss_sum, int64_t *n_valid)
{
	const struct titan_pp_stage *s = pp_stage(m, v, k);
	struct mb *b = &m->pl.mb[k];
	int rc;

	*loss_sum = 0;
	*n_valid = 0;
	m->moe_count = backward; /* as titan_llama_step: training tokens only */
	CK(forward(m, s, b, inputs));
	if (!s->last)
		return 0;
	return loss_fwd(m, b, labels, grad_scale, backward ? loss_grad(m, b) : NULL, loss_sum,
			n_valid);
}

int titan_llama_pp_backward(struct titan_llama *m, int v, int k)
{
	const struct titan_pp_stage *s = pp_stage(m, v, k);
	struct mb *b = &m->pl.mb[k];

	return backward_pass(m, s, b, s->last ? loss_grad(m, b) : NULL);
}

/* The input pass of a stage that is not the first global stage: the
 * gradient of its input into m->dx, the weight pass's operands into the
 * microbatch's stash; group hooks pre_backward only (the gradients of
 * the classifier were added by the loss). */
int titan_llama_pp_backward_input(struct titan_llama *m, int v, int k)
{
	const struct titan_pp_stage *s = pp_stage(m, v, k);
	struct mb *b = &m->pl.mb[k];
	const struct bwd_pass p = {{&sink_deferred, m, b}, s, norm_bwd, block_backward, NULL,
				   "backward input"};

	TITAN_ASSERT(m->o.pp_split_backward);
	if (s->first) /* torch's stage 0: the whole backward is the weight pass */
		return 0;
	return backward_walk(&p, b->dxn_out);
}

/* The weight pass: on the first global stage the whole backward (from
 * m->dx, which the caller filled), elsewhere the stashed weight gradients
 * of the final norm and the blocks, with pre_weight / post_backward group
 * hooks. */
int titan_llama_pp_backward_weight(struct titan_llama *m, int v, int k)
{
	const struct titan_pp_stage *s = pp_stage(m, v, k);
	struct mb *b = &m->pl.mb[k];
	const struct bwd_pass p = {{&sink_immediate, m, b}, s, norm_wgrad, block_weight,
				   m->ghooks.post_backward, "backward weight"};

	TITAN_ASSERT(m->o.pp_split_backward);
	if (s->first)
		return backward_pass(m, s, b, s->last ? b->dxn_out : NULL);
	return backward_walk(&p, NULL);
}

float *titan_llama_pp_input(struct titan_llama *m, int v, int k)
{
	return m->pl.mb[k].x[pp_stage(m, v, k)->l0];
}

float *titan_llama_pp_output(struct titan_llama *m, int v, int k)
{
	return m->pl.mb[k].x[pp_stage(m, v, k)->l1];
}

float *titan_llama_pp_grad(struct titan_llama *m)
{
	return m->dx;
}

int64_t titan_llama_pp_boundary_floats(const struct titan_llama *m)
{
	return m->nl * m->d.dim;
}

int titan_llama_logits(struct titan_llama *m, const int32_t *inputs, float *logits)
{
	int rc;

	if (m->sp.comm || m->cp.comm)
		return titan_error(TITAN_E_UNSUPPORTED, "logits of a tensor- or context-parallel "
				   "model: load the checkpoint on one rank");
	m->moe_count = false;
	CK(forward(m, &m->pl.st.v[0], &m->pl.mb[0], inputs));
	CK(m->be->ops->matmul_fwd(m->be, logits, m->pl.mb[0].xnf, P(m, TITAN_PARAM_OUTPUT, -1), m->n,
				  m->d.dim, m->d.vocab_size, false));
	return ghook(m, m->ghooks.post_forward, (int)m->d.n_layers + 1);
}

/* The parameters' spans in the arenas (every one, or those AdamW moves),
 * for the multi-tensor ops: one call each for the whole model (the CUDA
 * backend keeps the table on the device, uploaded once).  Made once and
 * kept on the model; NULL with TITAN_E_NOMEM recorded. */
static const struct titan_tensor_span *param_spans(struct titan_llama *m, bool adamw, int *n)
{
	struct titan_tensor_span **cache = adamw ? &m->spans_adamw : &m->spans_all;
	int *count = adamw ? &m->n_spans_adamw : &m->n_spans_all;
	struct titan_tensor_span *s;

	if (*cache) {
		*n = *count;
		return *cache;
	}
	*n = 0;
	if (!(s = malloc(((size_t)m->table.n + 1) * sizeof(*s)))) {
		titan_error(TITAN_E_NOMEM, "out of memory");
		return NULL;
	}
	for (int i = 0; i < m->table.n; i++) {
		const struct titan_param *p = &m->table.params[i];

		if (adamw && p->is_buffer) /* expert_bias: moved by titan_llama_moe_balance only */
			continue;
		s[(*n)++] = (struct titan_tensor_span){
			.offset = p->offset,
			.numel = p->local_numel,
			.no_decay = adamw && m->o.exclude_norms_embeddings_from_wd &&
				    (p->is_norm || p->is_embedding),
		};
	}
	*cache = s;
	*count = *n;
	return s;
}

int titan_llama_grad_sumsq(struct titan_llama *m, double *sumsq)
{
	int n, rc;
	const struct titan_tensor_span *s = param_spans(m, false, &n);

	if (!s)
		return TITAN_E_NOMEM;
	/* sumsq[i] of every parameter i, one call (cuda: one read-back) */
	CK(m->be->ops->sumsq_multi(m->be, sumsq, m->grads.data, s, n));
	CK(m->sp.ops->reduce_sumsq(&m->sp, &m->table, sumsq));
	/* pipeline stages: every parameter on one stage, zero elsewhere */
	if (m->pp && titan_comm_size(m->pp) > 1)
		return titan_comm_all_reduce(m->pp, TITAN_IN_PLACE, sumsq, (size_t)m->table.n,
					     TITAN_DTYPE_F64, TITAN_REDOP_SUM, "pp grad norm");
	return 0;
}

int titan_llama_tp_reduce_grads(struct titan_llama *m)
{
	return m->sp.ops->reduce_grads(&m->sp, &m->table, &m->grads);
}

void titan_grad_norm_from_sumsq(const double *sumsq, int n, double max_norm, double *norm,
				float *coef)
{
	double total = 0;

	/* torch: per-tensor fp32 norms, then the norm of the stacked norms */
	for (int i = 0; i < n; i++) {
		float ni = (float)sqrt(sumsq[i]);

		total += (double)ni * (double)ni;
	}
	float tn = (float)sqrt(total);
	float c = (float)max_norm / (tn + 1e-6f);

	*norm = tn;
	*coef = c < 1.0f ? c : 1.0f;
}

int titan_llama_grad_norm(struct titan_llama *m, double max_norm, double *norm, float *coef)
{
	double *ss = malloc((size_t)m->table.n * sizeof(*ss));
	int rc;

	if (!ss)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if ((rc = titan_llama_grad_sumsq(m, ss)) == 0)
		titan_grad_norm_from_sumsq(ss, m->table.n, max_norm, norm, coef);
	free(ss);
	return rc;
}

int titan_llama_adamw(struct titan_llama *m, const struct titan_adamw_hparams *hp, int64_t step,
		      float grad_mul)
{
	int n;
	const struct titan_tensor_span *s = param_spans(m, true, &n);

	if (!s)
		return TITAN_E_NOMEM;
	return m->be->ops->adamw_multi(m->be, m->params.data, m->m.data, m->v.data, m->grads.data,
				       s, n, hp, step, grad_mul);
}

/* ------------------------------------------------- MoE load balancing */

int64_t *titan_llama_moe_tokens(struct titan_llama *m)
{
	return m->moe_tokens;
}

/* torchtitan's _update_expert_bias (its optimizer pre-step hook): each MoE
 * layer's expert_bias rows held here moved by the step's tokens per expert
 * `tokens` (summed over microbatches and data-parallel ranks), then the
 * counts zeroed.  The bias is a host view (the MoE runs on the cpu
 * backend); under FSDP each rank moves its own rows, gathered next step. */
int titan_llama_moe_balance(struct titan_llama *m, const int64_t *tokens)
{
	const int64_t E = m->d.moe.num_experts;

	if (!m->has_moe)
		return 0;
	for (int l = 0; titan_model_moe_balanced(&m->d) && l < (int)m->d.n_layers; l++) {
		int i = titan_param_index(&m->table, TITAN_PARAM_MOE_EXPERT_BIAS, l);
		const struct titan_param *p = i < 0 ? NULL : &m->table.params[i];
		float full[4096], *bias = titan_param_view(&m->params, p ? p : m->table.params);

		if (!p || !p->rows)
			continue;
		if (E > 4096)
			return titan_error(TITAN_E_UNSUPPORTED, "model.moe_num_experts %lld: load "
					   "balancing supports 4096 experts at most", (long long)E);
		/* the whole update (its mean is over all experts), then our rows */
		memset(full, 0, (size_t)E * sizeof(*full));
		titan_moe_update_bias(full, tokens + l * E, E, m->d.moe.load_balance_coeff);
		for (int64_t r = 0; r < p->rows; r++)
			bias[r] += full[p->row0 + r];
	}
	memset(m->moe_tokens, 0, (size_t)(m->d.n_layers * E) * sizeof(*m->moe_tokens));
	return 0;
}
