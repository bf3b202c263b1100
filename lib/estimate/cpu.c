/*
 * cpu.c — the memory of titan-train's CPU path, to the byte: what
 * lib/train (trainer.c, llama.c, dp.c, pp.c, cp_ring.c) and the CPU ops of
 * lib/cpu allocate through the host tagged allocator, under the same tags,
 * at the same moments of a step, on one rank of any layout titan-train
 * runs: DDP/FSDP/HSDP x TP x PP (GPipe, 1F1B, Interleaved1F1B,
 * InterleavedZeroBubble, ZBVZeroBubble) x CP (allgather, alltoall); rank
 * 0 by default (the largest shard, the metrics.jsonl writer).  The
 * pipeline rank's stages are titan-train's own (titan_pp_split,
 * titan_pp_stages_per_rank, titan_pp_stage_of), and so is the order of a
 * step's actions (titan_pp_schedule_actions).  The sizes come from the
 * same macros the ops use (TITAN_ATTN_BLOCK, TITAN_SUMSQ_CHUNK in
 * titan/ops.h, TITAN_CE_CHUNK in titan/train.h); the buffer list mirrors
 * the code, and tests/bats/titan-estimate.bats, titan-estimate-pp-cp.bats
 * and titan-train-dist.bats run titan-train and compare, so a change there
 * that is not mirrored here fails `make test`.
 *
 * FSDP's buffers (tag comm) change at every hook of a step; fsdp_sim
 * replays lib/train/dp.c's schedule (the same units, the same order of
 * allocations and frees, through the pipeline schedule's actions) and
 * keeps, for each moment, the most comm bytes live when it happens.  DDP
 * and the replicas' all-reduce of HSDP reduce in place: no buffers.
 */
#include "est_impl.h"
#include "titan/ops.h"
#include "titan/train.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_N 1024           /* titan-train.c measure_peak: 3 n x n fp32 matrices */

/* ---------------------------------------------------------- FSDP replay */

enum { SIM_FWD_COMM, SIM_FWD_ATTN, SIM_LOSS, SIM_BWD_COMM, SIM_RECOMPUTE, SIM_BWD_ATTN,
       SIM_NKINDS };

struct sim_unit {
	int g0, g1, p0, p1;        /* groups [g0, g1], parameters [p0, p1) */
	int64_t full, shard;       /* bytes: unsharded slice, S (one rank's part) */
	bool gathered, gathering, grad, reducing;
};

struct fsdp_sim {
	struct sim_unit *u;
	int nunits, *unit_of, *pending, npending;
	int64_t nshard;
	bool tied, reshard;
	int64_t live;              /* comm bytes live */
	int kind;                  /* moment an allocation counts for */
	int64_t max[SIM_NKINDS];
};

static void sim_alloc(struct fsdp_sim *s, int64_t b)
{
	s->live += b;
	if (s->live > s->max[s->kind])
		s->max[s->kind] = s->live;
}

static void sim_at(struct fsdp_sim *s, int kind)
{
	if (s->live > s->max[kind])
		s->max[kind] = s->live;
}

/* dp.c gather_start / gather_finish / release_params / ensure_grad */
static void sim_gather_start(struct fsdp_sim *s, struct sim_unit *u)
{
	if (u->gathered || u->gathering)
		return;
	sim_alloc(s, u->shard);                   /* gsend */
	sim_alloc(s, u->shard * s->nshard);       /* grecv */
	u->gathering = true;
}

static void sim_gather_finish(struct fsdp_sim *s, struct sim_unit *u)
{
	if (u->gathered)
		return;
	sim_gather_start(s, u);
	s->live -= u->shard;                      /* gsend */
	sim_alloc(s, u->full);                    /* the gathered copy, grecv still live */
	s->live -= u->shard * s->nshard;
	u->gathering = false;
	u->gathered = true;
}

static void sim_release(struct fsdp_sim *s, struct sim_unit *u)
{
	if (u->gathered)
		s->live -= u->full;
	u->gathered = false;
}

static void sim_ensure_grad(struct fsdp_sim *s, struct sim_unit *u)
{
	if (!u->grad)
		sim_alloc(s, u->full);
	u->grad = true;
}

/* reduce_start, then reduce_advance(keep) as dp.c: the oldest reductions
 * complete (rsend freed, added, rrecv freed); the replicas' all-reduce of
 * HSDP is in place */
static void sim_reduce_start(struct fsdp_sim *s, struct sim_unit *u)
{
	sim_alloc(s, u->shard * s->nshard);       /* rsend */
	sim_alloc(s, u->shard);                   /* rrecv */
	s->live -= u->full;                       /* the unsharded gradients */
	u->grad = false;
	u->reducing = true;
	s->pending[s->npending++] = (int)(u - s->u);
}

static void sim_reduce_advance(struct fsdp_sim *s, int keep)
{
	int n = s->npending - keep, w = 0;

	for (int i = 0; i < s->npending; i++) {
		struct sim_unit *u = &s->u[s->pending[i]];

		if (i >= n) {
			s->pending[w++] = s->pending[i];
			continue;
		}
		s->live -= u->shard * s->nshard + u->shard;
		u->reducing = false;
	}
	s->npending = w;
}

static void sim_pre_forward(struct fsdp_sim *s, int g)
{
	const int k = s->unit_of[g];

	if (g != s->u[k].g0)
		return;
	sim_gather_finish(s, &s->u[k]);
	if (k + 1 < s->nunits)
		sim_gather_start(s, &s->u[k + 1]);
}

static void sim_post_forward(struct fsdp_sim *s, int g)
{
	const int k = s->unit_of[g];

	if (g != s->u[k].g1 || k == s->nunits - 1 || (s->tied && k == 0) || !s->reshard)
		return;
	sim_release(s, &s->u[k]);
}

static void sim_pre_backward(struct fsdp_sim *s, int g)
{
	const int k = s->unit_of[g];

	if (g != s->u[k].g1)
		return;
	sim_gather_finish(s, &s->u[k]);
	sim_ensure_grad(s, &s->u[k]);
	if (s->tied && k == s->nunits - 1)
		sim_ensure_grad(s, &s->u[0]);
	if (k > 0)
		sim_gather_start(s, &s->u[k - 1]);
}

/* dp.c pre_weight: the unit's unsharded gradients again */
static void sim_pre_weight(struct fsdp_sim *s, int g)
{
	const int k = s->unit_of[g];

	if (g == s->u[k].g1)
		sim_ensure_grad(s, &s->u[k]);
}

static void sim_post_backward(struct fsdp_sim *s, int g)
{
	const int k = s->unit_of[g];

	if (g != s->u[k].g0)
		return;
	sim_release(s, &s->u[k]);
	sim_reduce_start(s, &s->u[k]);
	sim_reduce_advance(s, 1);
}

/* The stages a pipeline rank holds (lib/train/trainer.c: the rank's v-th
 * stage is global stage rank + v·pp, split by titan_pp_split); without PP
 * one stage of every block, the embedding and the output. */
struct geo {
	int nst, l0[TITAN_PP_MAX_STAGES_PER_RANK], l1[TITAN_PP_MAX_STAGES_PER_RANK];
	bool sfirst, slast;
};

static bool geo_active(const struct geo *G, int g, int ng)
{
	if (g == 0)
		return G->sfirst;
	if (g == ng - 1)
		return G->slast;
	for (int v = 0; v < G->nst; v++)
		if (g - 1 >= G->l0[v] && g - 1 < G->l1[v])
			return true;
	return false;
}

/* One action of a step on the rank's stage v: a microbatch's forward
 * (with the loss on the last stage), backward, or with the zero-bubble
 * schedules' split backward its input pass (B) and weight pass (W). */
enum { ACT_F, ACT_B, ACT_W };
struct act {
	int op, v;
	bool split;
};

/* The units of dp.c's build_units over the rank's groups of
 * lib/train/llama.c (0: the embeddings; 1 + l: block l; last: the final
 * norm and the output), then the step's actions with the hooks of
 * titan_llama_step / titan_llama_pp_forward / _backward in their order;
 * titan_dp_begin_microbatch completes the reductions in flight before
 * each action (before each microbatch without PP), titan_dp_finish_grads
 * after the last. */
static int fsdp_replay(const struct titan_param_table *t, const struct titan_est_opts *o,
		       int64_t nshard, const struct geo *G, const struct act *acts, int nacts,
		       int64_t max[SIM_NKINDS])
{
	const int L = (int)t->dims.n_layers, ng = L + 2;
	const bool staged = o->layout.pp > 1;
	struct fsdp_sim s = {0};
	struct sim_unit *u = NULL;

	s.u = calloc((size_t)ng, sizeof(*s.u));
	s.unit_of = calloc((size_t)ng, sizeof(*s.unit_of));
	s.pending = calloc((size_t)ng, sizeof(*s.pending));
	if (!s.u || !s.unit_of || !s.pending) {
		free(s.u);
		free(s.unit_of);
		free(s.pending);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	s.nshard = nshard;
	s.tied = t->dims.tied;
	s.reshard = o->reshard != TITAN_EST_RESHARD_NEVER;
	for (int g = 0; g < ng; g++) {
		const int p0 = g == 0 ? 0 : 1 + TITAN_PARAMS_PER_LAYER * (g - 1);
		const int p1 = g == 0 ? 1 : g == ng - 1 ? t->n : p0 + TITAN_PARAMS_PER_LAYER;

		s.unit_of[g] = -1;
		if (!geo_active(G, g, ng))
			continue; /* another pipeline stage's */
		if (!u || g == 1 || g == ng - 1 || u->g1 == ng - 1 || u->full >= o->cpu_bucket_bytes) {
			u = &s.u[s.nunits++];
			u->g0 = g;
			u->p0 = p0;
		}
		u->g1 = g;
		u->p1 = p1;
		/* dp.c: full_floats spans the unit's first to last parameter */
		u->full = ((p1 < t->n ? t->params[p1].full_offset : t->full_arena_floats) -
			   t->params[u->p0].full_offset) * 4;
		s.unit_of[g] = s.nunits - 1;
	}
	for (int k = 0; k < s.nunits; k++)
		for (int p = s.u[k].p0; p < s.u[k].p1; p++)
			s.u[k].shard += t->params[p].chunk_rows * t->params[p].shape[1] * 4;

	for (int i = 0; i < nacts; i++) {
		const int v = acts[i].v, l0 = G->l0[v], l1 = G->l1[v];
		const bool first = G->sfirst && v == 0, last = G->slast && v == G->nst - 1;

		sim_reduce_advance(&s, 0);              /* titan_dp_begin_microbatch */
		if (acts[i].op == ACT_F) {
			s.kind = SIM_FWD_COMM;
			if (first) {
				sim_pre_forward(&s, 0);
				sim_post_forward(&s, 0);
			}
			for (int l = l0; l < l1; l++) {
				sim_pre_forward(&s, 1 + l);
				sim_at(&s, SIM_FWD_ATTN);
				sim_post_forward(&s, 1 + l);
			}
			if (!last)
				continue;
			sim_pre_forward(&s, L + 1);
			s.kind = SIM_LOSS; /* only allocations before the loss: its peak is later */
			sim_pre_backward(&s, L + 1);
			sim_at(&s, SIM_LOSS);
			sim_post_forward(&s, L + 1);
			continue;
		}
		s.kind = SIM_BWD_COMM;
		if (acts[i].split && !first) {
			/* titan_llama_pp_backward_input: pre_backward hooks only;
			 * _weight: pre_weight and post_backward (the first
			 * global stage's input pass is empty, its weight pass the
			 * whole backward, below) */
			const bool w = acts[i].op == ACT_W;

			if (last) {
				(w ? sim_pre_weight : sim_pre_backward)(&s, L + 1);
				if (w)
					sim_post_backward(&s, L + 1);
			}
			for (int l = l1 - 1; l >= l0; l--) {
				if (w) {
					sim_pre_weight(&s, 1 + l);
					sim_post_backward(&s, 1 + l);
					continue;
				}
				sim_pre_backward(&s, 1 + l);
				if (est_block_ckpt(o, l))
					sim_at(&s, SIM_RECOMPUTE);
				sim_at(&s, SIM_BWD_ATTN);
			}
			continue;
		}
		if (acts[i].split && acts[i].op == ACT_B)
			continue;
		if (last) {
			if (staged) /* llama.c backward_pass: gathered again under PP */
				sim_pre_backward(&s, L + 1);
			sim_post_backward(&s, L + 1);
		}
		for (int l = l1 - 1; l >= l0; l--) {
			sim_pre_backward(&s, 1 + l);
			if (est_block_ckpt(o, l))
				sim_at(&s, SIM_RECOMPUTE);
			sim_at(&s, SIM_BWD_ATTN);
			sim_post_backward(&s, 1 + l);
		}
		if (first) {
			sim_pre_backward(&s, 0);
			sim_post_backward(&s, 0);
		}
	}
	sim_reduce_advance(&s, 0);                      /* titan_dp_finish_grads */
	for (int k = 0; k < s.nunits; k++)
		sim_release(&s, &s.u[k]);
	TITAN_ASSERT(s.live == 0);
	memcpy(max, s.max, sizeof(s.max));
	free(s.u);
	free(s.unit_of);
	free(s.pending);
	return 0;
}

/* The rank's stages, as titan-train sets them up (lib/train/trainer.c). */
static int rank_geo(const struct titan_model_dims *d, const struct titan_est_opts *o,
		    int64_t ppr, struct geo *G, int64_t *nstages)
{
	struct est_stage *st;
	int64_t v;
	int rc;

	if ((rc = est_pipeline(o, d, &v, &st)) < 0)
		return rc;
	if (v > TITAN_PP_MAX_STAGES_PER_RANK) {
		free(st);
		return titan_error(TITAN_E_INVALID, "%lld stages per rank: titan-train holds at "
				   "most %d", (long long)v, TITAN_PP_MAX_STAGES_PER_RANK);
	}
	memset(G, 0, sizeof(*G));
	G->nst = (int)v;
	for (int64_t k = 0; k < v; k++) {
		const struct est_stage *sg = &st[est_stage_of(o, ppr, k, v)];

		G->l0[k] = (int)sg->first_layer;
		G->l1[k] = (int)(sg->first_layer + sg->nlayers);
		if (k == 0)
			G->sfirst = sg->embed;
		G->slast = sg->output;
	}
	*nstages = o->layout.pp * v;
	free(st);
	return 0;
}

/* The step's actions on pipeline rank ppr: lib/train/pp.c's own order
 * (titan_pp_schedule_actions); without PP one forward and its backward. */
static int step_actions(const struct titan_est_opts *o, int64_t ppr, int nst, int nmb,
			struct act **out, int *n)
{
	const enum titan_pp_schedule sched = est_train_schedule(o->schedule);
	const bool split = sched == TITAN_PP_INTERLEAVED_ZB || sched == TITAN_PP_ZBV;
	struct titan_pp_action *pa = NULL;
	struct act *a = calloc(3 * (size_t)nst * (size_t)nmb, sizeof(*a));
	int k;

	*out = a;
	if (!a)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if (o->layout.pp == 1) {
		a[0] = (struct act){ACT_F, 0, false};
		a[1] = (struct act){ACT_B, 0, false};
		*n = 2;
		return 0;
	}
	if (!(pa = calloc(3 * (size_t)nst * (size_t)nmb, sizeof(*pa))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	k = titan_pp_schedule_actions(sched, (int)o->layout.pp, (int)ppr, nst, nmb, true, pa);
	for (int i = 0; i < k; i++)
		a[i] = (struct act){pa[i].op == TITAN_PP_F ? ACT_F : pa[i].op == TITAN_PP_B ? ACT_B : ACT_W,
				    pa[i].stage, split};
	free(pa);
	if (k < 0)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	*n = k;
	return 0;
}

int est_cpu_model(const struct titan_model_dims *d, const struct titan_est_opts *o,
		  struct titan_estimate *e)
{
	struct titan_param_table t;
	struct titan_est_rank *r;
	struct est_num n = {false};
	const struct titan_est_layout *l = &o->layout;
	/* TP (lib/train/llama.c): this rank's heads, hidden units and
	 * vocabulary rows; the residual stream holds nl = N / tp tokens */
	const int64_t tp = l->tp, cp = l->cp, pp = l->pp, S = o->seq_len, L = d->n_layers;
	const int64_t C = d->dim, H = d->n_heads / tp, Hkv = d->n_kv_heads / tp, D = d->head_dim;
	const int64_t F = d->ffn_hidden / tp, V = d->vocab_size, q = H * D, kv = Hkv * D;
	const int64_t bq = TITAN_ATTN_BLOCK, vc = (V + tp - 1) / tp;
	/* PP: microbatches of pipeline_parallel_microbatch_size rows, each
	 * with its own activations; CP: S / cp tokens of each row */
	const int64_t B = pp > 1 ? o->pp_microbatch : o->local_batch;
	const int64_t nmb = pp > 1 ? o->local_batch / o->pp_microbatch : 1, Sl = S / cp;
	const int64_t fsdp = l->dp_shard * cp;
	struct titan_param_table_opts po;
	struct geo G;
	struct act *acts = NULL;
	int64_t N, nl, threads, kept = 0, nckpt = 0, blocks, xin = 0, set, arena, chunk;
	int64_t sumsq = 0, x, tq, ppr, nstages = 1, top = -1, wst = 0, wsx = 0;
	/* zero-bubble schedules: backward split into input and weight passes */
	const bool split = pp > 1 && (o->schedule == TITAN_EST_INTERLEAVED_ZB ||
				      o->schedule == TITAN_EST_ZBV);
	bool *hasx;
	int64_t comm[SIM_NKINDS] = {0};
	int m_start = -1, m_fwd, m_loss = -1, m_rec = -1, m_bwd, m_norm, m_opt, m_log = -1;
	int m_fcomm = -1, m_bcomm = -1, nacts = 0;
	uint32_t all, rc_at;
	int rc;

	if (pp > 1 && o->schedule == TITAN_EST_LOOPED_BFS)
		return titan_error(TITAN_E_INVALID, "--device cpu replays titan-train's pipeline "
				   "schedules (GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble, "
				   "ZBVZeroBubble), not %s", titan_est_schedule_name(o->schedule));
	/* mesh (pp, dp_replicate, dp_shard, cp, tp), tp innermost
	 * (lib/dist/dims.c); FSDP shards over dp_shard x cp */
	ppr = o->rank / (l->dp_replicate * l->dp_shard * cp * tp);
	if ((rc = rank_geo(d, o, ppr, &G, &nstages)) < 0)
		return rc;
	if (pp > 1 && (rc = titan_pp_check_microbatches(est_train_schedule(o->schedule), (int)pp,
							(int)nmb)) < 0)
		return rc;
	titan_param_table_opts_default(&po);
	if (fsdp > 1) {
		po.shard_degree = (int)fsdp;
		po.shard_rank = (int)((o->rank / tp) % fsdp);
	}
	po.tp_degree = (int)tp;
	po.tp_rank = (int)(o->rank % tp);
	if (pp > 1) {
		po.staged = true;
		po.stage_l0 = G.l0[0];
		po.stage_l1 = G.l1[0];
		po.stage_first = G.sfirst;
		po.stage_last = G.slast;
		po.nmore = G.nst - 1;
		for (int v = 1; v < G.nst; v++) {
			po.more_l0[v - 1] = G.l0[v];
			po.more_l1[v - 1] = G.l1[v];
		}
	}
	if ((rc = titan_param_table_init(&t, d, &po)) < 0)
		return rc;
	if (fsdp > 1) {
		if ((rc = step_actions(o, ppr, G.nst, (int)nmb, &acts, &nacts)) == 0)
			rc = fsdp_replay(&t, o, fsdp, &G, acts, nacts, comm);
		free(acts);
		if (rc < 0) {
			titan_param_table_release(&t);
			return rc;
		}
	}
	if (!(e->ranks = calloc(1, sizeof(*e->ranks)))) {
		titan_param_table_release(&t);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	e->nranks = 1;
	e->stages_per_rank = G.nst;
	e->nstages = nstages;
	e->pp_microbatches = nmb;
	r = &e->ranks[0];
	r->pp_rank = (int)ppr;
	r->nstages = G.nst;
	for (int v = 0; v < G.nst; v++) {
		r->stages[v] = (int)est_stage_of(o, ppr, v, G.nst);
		r->stage_l0[v] = G.l0[v];
		r->stage_l1[v] = G.l1[v];
		r->layers += G.l1[v] - G.l0[v];
		for (int64_t b = G.l0[v]; b < G.l1[v]; b++) {
			const bool ck = est_block_ckpt(o, b);

			if (ck)
				nckpt++;
			else
				kept++;
			top = b > top ? b : top;
			/* the weight pass's stash, but on the first global stage */
			if (split && !(G.sfirst && v == 0)) {
				wst++;
				if (ck || o->ac == TITAN_EST_AC_OP)
					wsx++;
			}
		}
	}
	/* block inputs x[l0 .. l1] of each stage (ZBV's adjacent stages on the
	 * last rank share their boundary) */
	if (!(hasx = calloc((size_t)L + 1, sizeof(*hasx)))) {
		titan_param_table_release(&t);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	for (int v = 0; v < G.nst; v++)
		for (int64_t i = G.l0[v]; i <= G.l1[v]; i++) {
			xin += !hasx[i];
			hasx[i] = true;
		}
	free(hasx);
	blocks = r->layers;
	r->first = G.sfirst;
	r->last = G.slast;
	/* the stages' parameter elements (after TP, before FSDP) */
	for (int i = 0; i < t.n; i++) {
		const struct titan_param *p = &t.params[i];

		if (p->layer >= 0 ? geo_active(&G, 1 + p->layer, (int)L + 2) :
		    p->role == TITAN_PARAM_TOK_EMBEDDINGS ? G.sfirst : G.slast)
			r->params_local += p->numel;
	}
	r->params_shard = t.local_numel;
	arena = est_mul(&n, t.arena_floats, 4);
	for (int i = 0; i < t.n; i++) {
		int64_t parts = (t.params[i].local_numel + TITAN_SUMSQ_CHUNK - 1) / TITAN_SUMSQ_CHUNK;

		if (parts > sumsq)
			sumsq = parts;
	}
	titan_param_table_release(&t);
	threads = o->threads > 0 ? o->threads : omp_get_max_threads();
	if (threads < 1)
		threads = 1;
	N = est_mul(&n, B, Sl);
	nl = N / tp;
	e->tokens_per_step = est_mul(&n, est_mul(&n, o->local_batch, S), o->accum);

	/* moments in the order a step meets them */
	if (o->cpu_peak_probe)
		m_start = est_moment(r, TITAN_EST_PHASE_STARTUP, "startup", "sgemm peak probe (setup)");
	if (comm[SIM_FWD_COMM])
		m_fcomm = est_moment(r, TITAN_EST_PHASE_FORWARD, "fsdp fwd",
				     "FSDP all-gather (forward)");
	m_fwd = est_moment(r, TITAN_EST_PHASE_FORWARD, "forward", "attention forward");
	if (r->last)
		m_loss = est_moment(r, TITAN_EST_PHASE_LOSS, "loss", "classifier + cross-entropy");
	if (nckpt && est_block_ckpt(o, top))
		m_rec = est_moment(r, TITAN_EST_PHASE_BACKWARD, "recompute",
				   "recompute: attention forward");
	m_bwd = est_moment(r, TITAN_EST_PHASE_BACKWARD, "backward", "attention backward");
	if (nckpt && m_rec < 0)
		m_rec = est_moment(r, TITAN_EST_PHASE_BACKWARD, "recompute",
				   "recompute: attention forward");
	if (comm[SIM_BWD_COMM])
		m_bcomm = est_moment(r, TITAN_EST_PHASE_BACKWARD, "fsdp bwd",
				     "FSDP gather/reduce-scatter (backward)");
	m_norm = est_moment(r, TITAN_EST_PHASE_BACKWARD, "gradnorm", "gradient norm");
	m_opt = est_moment(r, TITAN_EST_PHASE_OPTIMIZER, "optim", "AdamW step");
	(void)m_opt;
	if (o->cpu_metrics_jsonl && (o->rank == 0 || o->cpu_metrics_all_ranks))
		m_log = est_moment(r, TITAN_EST_PHASE_OPTIMIZER, "log", "metrics.jsonl row");
	/* titan-train runs the probe before it builds the model: only the
	 * probe is live at start-up */
	all = EST_ALL & ~(m_start >= 0 ? EST_AT(m_start) : 0u);

	/* titan_llama_new: arenas of lib/model (params, grads, 2 moments) */
	est_item(r, "weights (fp32 arena)", TITAN_MEM_PARAMS, arena, all);
	est_item(r, "gradients (fp32 arena)", TITAN_MEM_GRADS, arena, all);
	est_item(r, "AdamW exp_avg + exp_avg_sq (2 arenas)", TITAN_MEM_OPTIM,
		 est_mul(&n, arena, 2), all);
	est_item(r, "RoPE table", TITAN_MEM_OTHER, est_mul(&n, est_mul(&n, Sl, D), 4), all);
	if (cp > 1) {
		/* CP: this rank's positions and labels; allgather holds the
		 * whole sequence's keys and values, their gradients and the
		 * all-gather / reduce-scatter buffer of one microbatch for the
		 * run (the ring, lib/train/cp_ring.c, allocates per call) */
		est_item(r, "CP: token positions", TITAN_MEM_OTHER, est_mul(&n, 2 * Sl, 4), all);
		est_item(r, "CP: this rank's labels", TITAN_MEM_DATA, est_mul(&n, N, 4), all);
		if (!o->cp_alltoall)
			est_item(r, "CP: gathered K, V, dK, dV + gather buffer", TITAN_MEM_WORKSPACE,
				 est_mul(&n, est_mul(&n, est_mul(&n, B, S), kv), 5 * 4), all);
	}
	/* per microbatch (PP: a schedule's microbatches in flight each have
	 * their own): block inputs, saved activations, ids, final norm */
	{
		char what[80];

		snprintf(what, sizeof(what), "block inputs (%lld x %lld microbatch(es))",
			 (long long)xin, (long long)nmb);
		est_item(r, what, TITAN_MEM_ACTIVATIONS,
			 est_mul(&n, est_mul(&n, est_mul(&n, xin * nmb, nl), C), 4), all);
	}
	/* struct acts: xn1 rstd1 q k v att lse h xn2 rstd2 a b g (h and the
	 * norms' 1/rms of nl tokens, the rest of all N) */
	set = est_add(&n, est_mul(&n, N, 2 * C + 2 * q + 2 * kv + H + 3 * F),
		      est_mul(&n, nl, C + 2));
	set = est_mul(&n, set, 4);
	if (o->ac == TITAN_EST_AC_OP) {
		/* selective 'op': each block keeps q v att lse a; one shared set
		 * of what backward recomputes: xn1 rstd1 k h xn2 rstd2 b g */
		char what[80];
		int64_t keep = est_mul(&n, est_mul(&n, N, 2 * q + kv + H + F), 4);

		snprintf(what, sizeof(what), "per-op saved tensors of %lld block(s) x %lld",
			 (long long)blocks, (long long)nmb);
		est_item(r, what, TITAN_MEM_ACTIVATIONS, est_mul(&n, keep, blocks * nmb), all);
		est_item(r, "per-op recompute set (one block)", TITAN_MEM_ACTIVATIONS,
			 est_mul(&n, est_add(&n, est_mul(&n, N, 2 * C + kv + 2 * F),
					     est_mul(&n, nl, C + 2)), 4), all);
	} else {
		if (kept) {
			char what[72];

			snprintf(what, sizeof(what), "saved activations of %lld block(s) x %lld",
				 (long long)kept, (long long)nmb);
			est_item(r, what, TITAN_MEM_ACTIVATIONS, est_mul(&n, set, kept * nmb), all);
		}
		if (o->ac != TITAN_EST_AC_NONE)
			est_item(r, "recompute set (one block)", TITAN_MEM_ACTIVATIONS, set, all);
	}
	if (r->last) {
		est_item(r, "final norm output + 1/rms", TITAN_MEM_ACTIVATIONS,
			 est_mul(&n, est_mul(&n, est_add(&n, est_mul(&n, N, C), nl), nmb), 4), all);
		if (nmb > 1 || split)
			est_item(r, "PP: loss gradients of the final norm output",
				 TITAN_MEM_ACTIVATIONS, est_mul(&n, est_mul(&n, N * nmb, C), 4), all);
		if (split)
			est_item(r, "ZB: final norm's output gradients (weight pass)",
				 TITAN_MEM_ACTIVATIONS, est_mul(&n, est_mul(&n, nl * nmb, C), 4), all);
	}
	if (split) {
		/* llama.c alloc_wstash: per block and microbatch the output
		 * gradients of w2, wo, wq/wk/wv and both norms; copies of the
		 * layer inputs of blocks whose activations are shared
		 * (checkpointed, selective 'op') */
		char what[80];

		snprintf(what, sizeof(what), "ZB: weight-pass stash of %lld block(s) x %lld",
			 (long long)wst, (long long)nmb);
		est_item(r, what, TITAN_MEM_ACTIVATIONS,
			 est_mul(&n, est_mul(&n, est_add(&n, est_mul(&n, N, 2 * C + q + 2 * kv),
							 est_mul(&n, nl, 2 * C)), wst * nmb), 4),
			 all);
		est_item(r, "ZB: stashed layer inputs (shared activations)", TITAN_MEM_ACTIVATIONS,
			 est_mul(&n, est_mul(&n, est_add(&n, est_mul(&n, N, 2 * C + q + 3 * F),
							 est_mul(&n, nl, C + 2)), wsx * nmb), 4),
			 all);
		est_item(r, "ZB: ones (weight pass of the norms)", TITAN_MEM_WORKSPACE, C * 4, all);
	}
	est_item(r, "token ids", TITAN_MEM_DATA, est_mul(&n, N * nmb, 4), all);
	est_item(r, "backward scratch", TITAN_MEM_WORKSPACE,
		 est_mul(&n, est_add(&n, est_mul(&n, N, C + 2 * q + 2 * kv + F),
				     est_mul(&n, nl, 2 * C)), 4), all);
	chunk = N < TITAN_CE_CHUNK ? N : TITAN_CE_CHUNK;
	if (tp > 1) {
		/* norm outputs before the gather, partial sums before the
		 * reduce-scatter, gathered gradients, their scattered sums; the
		 * loss's chunk logits, row maxima and sums (and without loss
		 * parallel every rank's logits and the whole rows) */
		est_item(r, "TP: sequence-parallel buffers", TITAN_MEM_WORKSPACE,
			 est_mul(&n, est_add(&n, est_mul(&n, N, 2 * C), est_mul(&n, nl, 2 * C)), 4),
			 all);
		est_item(r, "TP: loss chunk buffers", TITAN_MEM_WORKSPACE,
			 est_mul(&n, est_add(&n, est_mul(&n, chunk, vc), est_mul(&n, chunk, 5)), 4),
			 all);
		if (!o->loss_parallel)
			est_item(r, "TP: gathered logits (no loss parallel)", TITAN_MEM_WORKSPACE,
				 est_mul(&n, est_add(&n, est_mul(&n, est_mul(&n, tp, chunk), vc),
						     est_mul(&n, chunk, V)), 4), all);
	}
	/* lib/train/pp.c: a gradient received and one sent per stage and
	 * microbatch */
	if (pp > 1)
		est_item(r, "PP: gradient receive + send buffers", TITAN_MEM_COMM,
			 est_mul(&n, est_mul(&n, 2 * G.nst * nmb, est_mul(&n, nl, C)), 4), all);
	/* titan-train: inputs and labels of every microbatch of a step */
	est_item(r, "inputs + labels (all microbatches)", TITAN_MEM_DATA,
		 est_mul(&n, est_mul(&n, e->tokens_per_step, 2), 4), all);

	/* transient workspace of the ops (lib/cpu): the attention kernel's
	 * tiles for tq query rows (tasks: rows x heads x query blocks
	 * forward, rows x kv heads backward, one thread each at most).  CP
	 * allgather runs each of the two query chunks (S/cp/2 rows) against
	 * the gathered sequence; the ring's largest part is the rank's own
	 * S/cp rows (its first step), with its buffers live (forward: a
	 * receive buffer of keys and values per step in flight, min(cp - 1,
	 * 2); backward: those, two travelling dK/dV sums, the block's own
	 * dK/dV) */
	if (m_start >= 0)
		est_item(r, "sgemm peak probe (3 x 1024 x 1024 fp32)", TITAN_MEM_WORKSPACE,
			 3 * (int64_t)PROBE_N * PROBE_N * 4, EST_AT(m_start));
	tq = cp == 1 ? S : o->cp_alltoall ? Sl : Sl / 2;
	x = est_mul(&n, B, H * ((tq + bq - 1) / bq));       /* attention forward tasks */
	x = x < threads ? x : threads;
	rc_at = EST_AT(m_fwd) | (m_rec >= 0 ? EST_AT(m_rec) : 0);
	est_item(r, "attention forward tiles (per thread)", TITAN_MEM_WORKSPACE,
		 est_mul(&n, est_mul(&n, x, bq * bq + D * bq + 2 * bq), 4), rc_at);
	if (tp == 1 && m_loss >= 0)
		est_item(r, "classifier/CE chunk logits + row losses", TITAN_MEM_WORKSPACE,
			 est_add(&n, est_mul(&n, est_mul(&n, chunk, V), 4), est_mul(&n, chunk, 8)),
			 EST_AT(m_loss));
	x = est_mul(&n, B, Hkv);                             /* attention backward tasks */
	x = x < threads ? x : threads;
	est_item(r, "attention backward tiles (per thread)", TITAN_MEM_WORKSPACE,
		 est_mul(&n, est_mul(&n, x, est_add(&n, tq, 2 * bq * bq + 2 * D * bq)), 4),
		 EST_AT(m_bwd));
	if (cp > 1 && o->cp_alltoall) {
		const int64_t nkv = est_mul(&n, est_mul(&n, B, Sl), kv);
		const int64_t nbuf = cp - 1 < 2 ? cp - 1 : 2;

		est_item(r, "CP ring: key/value receive buffers", TITAN_MEM_COMM,
			 est_mul(&n, nkv, 2 * nbuf * 4), rc_at | EST_AT(m_bwd));
		est_item(r, "CP ring: travelling dK/dV sums", TITAN_MEM_COMM,
			 est_mul(&n, nkv, 4 * 4), EST_AT(m_bwd));
		est_item(r, "CP ring: the block's own dK/dV", TITAN_MEM_WORKSPACE,
			 est_mul(&n, nkv, 2 * 4), EST_AT(m_bwd));
	}
	est_item(r, "gradient norm partial sums", TITAN_MEM_WORKSPACE, sumsq * 8,
		 EST_AT(m_norm));
	/* the metrics row (300-500 characters) in lib/core's JSON writer: its
	 * buffer grows 256 -> 512 bytes with both live while copying */
	if (m_log >= 0)
		est_item(r, "metrics.jsonl row (JSON writer buffers)", TITAN_MEM_OTHER, 256 + 512,
			 EST_AT(m_log));
	/* FSDP (lib/train/dp.c): gathered copies, all-gather and
	 * reduce-scatter buffers, unsharded gradients, the most live at each
	 * moment */
	if (m_fcomm >= 0)
		est_item(r, "FSDP: all-gather copy-out (forward)", TITAN_MEM_COMM,
			 comm[SIM_FWD_COMM], EST_AT(m_fcomm));
	est_item(r, "FSDP: gathered units + prefetch (forward)", TITAN_MEM_COMM,
		 comm[SIM_FWD_ATTN], EST_AT(m_fwd));
	if (m_loss >= 0)
		est_item(r, "FSDP: gathered + grads + prefetch (loss)", TITAN_MEM_COMM,
			 comm[SIM_LOSS], EST_AT(m_loss));
	if (m_rec >= 0)
		est_item(r, "FSDP: gathered + grads + prefetch (recompute)", TITAN_MEM_COMM,
			 comm[SIM_RECOMPUTE], EST_AT(m_rec));
	est_item(r, "FSDP: gathered + grads + prefetch (backward)", TITAN_MEM_COMM,
		 comm[SIM_BWD_ATTN], EST_AT(m_bwd));
	if (m_bcomm >= 0)
		est_item(r, "FSDP: copy-out / reduce-scatter (backward)", TITAN_MEM_COMM,
			 comm[SIM_BWD_COMM], EST_AT(m_bcomm));
	est_rank_finish(r, o->dev.alloc_overhead, &n);
	if (n.overflow)
		return titan_error(TITAN_E_INVALID, "the estimate does not fit in 64-bit byte counts "
				   "(batch, sequence or model far too large)");
	return 0;
}
