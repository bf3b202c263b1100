/*
 * cpu.c — the memory of titan-train's CPU path, to the byte: what
 * lib/train (trainer.c, llama.c, dp.c, pp.c, cp_ring.c) and the CPU ops of
 * lib/cpu allocate through the host tagged allocator, under the same tags,
 * at the same moments of a step, on one rank of any layout titan-train
 * runs: DDP/FSDP/HSDP x TP x PP (GPipe, 1F1B, Interleaved1F1B,
 * InterleavedZeroBubble, ZBVZeroBubble) x CP (allgather, alltoall); rank
 * 0 by default (the largest shard, the metrics.jsonl writer).  The
 * pipeline rank's stages are titan-train's own (titan_pp_split,
 * titan_pp_stages_per_rank, titan_pp_stage_of).  The sizes come from the
 * same macros the ops use (TITAN_ATTN_BLOCK, TITAN_SUMSQ_CHUNK in
 * titan/ops.h, TITAN_CE_CHUNK in titan/train.h); the buffer list mirrors
 * the code, and tests/bats/titan-estimate.bats, titan-estimate-pp-cp.bats
 * and titan-train-dist.bats run titan-train and compare, so a change there
 * that is not mirrored here fails `make test`.
 *
 * FSDP's buffers (tag comm) change at every hook of a step: they come from
 * a dry run of the engine itself (dry.c: lib/train/dp.c through the
 * pipeline schedule's actions on the measure backend), the most comm bytes
 * live at each moment.  DDP and the replicas' all-reduce of HSDP reduce in
 * place: no buffers.
 */
#include "est_impl.h"
#include "titan/ops.h"
#include "titan/train.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_N 1024           /* titan-train.c measure_peak: 3 n x n fp32 matrices */

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

/* One rank's model: the layout's sizes (TP: this rank's heads, hidden
 * units and vocabulary rows, the residual stream of nl = N / tp tokens;
 * PP: microbatches of pipeline_parallel_microbatch_size rows, each with its
 * own activations; CP: S / cp tokens of each row), the rank's stages and
 * blocks, and the moments of its step. */
struct cpu {
	const struct titan_est_opts *o;
	struct titan_estimate *e;
	struct titan_est_rank *r;
	struct est_num n;
	int64_t tp, cp, pp, S, C, H, Hkv, D, F, V, q, kv, vc, B, nmb, Sl, N, nl, threads;
	struct geo G;
	int64_t kept, nckpt, blocks, xin, arena, sumsq, top, wst, wsx;
	bool split;                /* zero-bubble: backward in input and weight passes */
	int64_t comm[EST_FSDP_NKINDS];
	int m_start, m_fwd, m_loss, m_rec, m_bwd, m_norm, m_log, m_fcomm, m_bcomm;
	uint32_t all;              /* every moment but start-up */
};

/* The rank's stages, blocks and parameters (its table, as titan-train
 * builds it); FSDP's buffers from the dry run. */
static int cpu_rank(const struct titan_model_dims *d, struct cpu *c)
{
	const struct titan_est_opts *o = c->o;
	const struct titan_est_layout *l = &o->layout;
	const int64_t fsdp = l->dp_shard * c->cp, L = d->n_layers;
	struct titan_param_table_opts po;
	struct titan_param_table t;
	struct titan_est_rank *r;
	struct geo *G = &c->G;
	int64_t ppr, nstages = 1;
	bool *hasx;
	int rc;

	if (c->pp > 1 && o->schedule == TITAN_EST_LOOPED_BFS)
		return titan_error(TITAN_E_INVALID, "--device cpu replays titan-train's pipeline "
				   "schedules (GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble, "
				   "ZBVZeroBubble), not %s", titan_est_schedule_name(o->schedule));
	/* mesh (pp, dp_replicate, dp_shard, cp, tp), tp innermost
	 * (lib/dist/dims.c); FSDP shards over dp_shard x cp */
	ppr = o->rank / (l->dp_replicate * l->dp_shard * c->cp * c->tp);
	if ((rc = rank_geo(d, o, ppr, G, &nstages)) < 0)
		return rc;
	if (c->pp > 1 && (rc = titan_pp_check_microbatches(est_train_schedule(o->schedule),
							   (int)c->pp, (int)c->nmb)) < 0)
		return rc;
	titan_param_table_opts_default(&po);
	if (fsdp > 1) {
		po.shard_degree = (int)fsdp;
		po.shard_rank = (int)((o->rank / c->tp) % fsdp);
	}
	po.tp_degree = (int)c->tp;
	po.tp_rank = (int)(o->rank % c->tp);
	if (c->pp > 1) {
		po.staged = true;
		po.stage_l0 = G->l0[0];
		po.stage_l1 = G->l1[0];
		po.stage_first = G->sfirst;
		po.stage_last = G->slast;
		po.nmore = G->nst - 1;
		for (int v = 1; v < G->nst; v++) {
			po.more_l0[v - 1] = G->l0[v];
			po.more_l1[v - 1] = G->l1[v];
		}
	}
	if ((rc = titan_param_table_init(&t, d, &po)) < 0)
		return rc;
	if (fsdp > 1 && (rc = est_dry_fsdp(d, o, c->comm)) < 0) {
		titan_param_table_release(&t);
		return rc;
	}
	if (!(c->e->ranks = calloc(1, sizeof(*c->e->ranks))) ||
	    !(hasx = calloc((size_t)L + 1, sizeof(*hasx)))) {
		titan_param_table_release(&t);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	c->e->nranks = 1;
	c->e->stages_per_rank = G->nst;
	c->e->nstages = nstages;
	c->e->pp_microbatches = c->nmb;
	r = c->r = &c->e->ranks[0];
	r->pp_rank = (int)ppr;
	r->nstages = G->nst;
	c->top = -1;
	for (int v = 0; v < G->nst; v++) {
		r->stages[v] = (int)est_stage_of(o, ppr, v, G->nst);
		r->stage_l0[v] = G->l0[v];
		r->stage_l1[v] = G->l1[v];
		r->layers += G->l1[v] - G->l0[v];
		for (int64_t b = G->l0[v]; b < G->l1[v]; b++) {
			const bool ck = est_block_ckpt(o, b);

			if (ck)
				c->nckpt++;
			else
				c->kept++;
			c->top = b > c->top ? b : c->top;
			/* the weight pass's stash, but on the first global stage */
			if (c->split && !(G->sfirst && v == 0)) {
				c->wst++;
				if (ck || o->ac == TITAN_EST_AC_OP)
					c->wsx++;
			}
		}
		/* block inputs x[l0 .. l1] of each stage (ZBV's adjacent
		 * stages on the last rank share their boundary) */
		for (int64_t i = G->l0[v]; i <= G->l1[v]; i++) {
			c->xin += !hasx[i];
			hasx[i] = true;
		}
	}
	free(hasx);
	c->blocks = r->layers;
	r->first = G->sfirst;
	r->last = G->slast;
	/* the stages' parameter elements (after TP, before FSDP) */
	for (int i = 0; i < t.n; i++) {
		const struct titan_param *p = &t.params[i];
		const int64_t parts = (p->local_numel + TITAN_SUMSQ_CHUNK - 1) / TITAN_SUMSQ_CHUNK;

		if (p->layer >= 0 ? geo_active(G, 1 + p->layer, (int)L + 2) :
		    p->role == TITAN_PARAM_TOK_EMBEDDINGS ? G->sfirst : G->slast)
			r->params_local += p->numel;
		if (parts > c->sumsq)
			c->sumsq = parts;
	}
	r->params_shard = t.local_numel;
	c->arena = est_mul(&c->n, t.arena_floats, 4);
	titan_param_table_release(&t);
	return 0;
}

/* The moments, in the order a step meets them. */
static void cpu_moments(struct cpu *c)
{
	const struct titan_est_opts *o = c->o;
	struct titan_est_rank *r = c->r;

	c->m_start = c->m_loss = c->m_rec = c->m_log = c->m_fcomm = c->m_bcomm = -1;
	if (o->cpu_peak_probe)
		c->m_start = est_moment(r, TITAN_EST_PHASE_STARTUP, "startup",
					"sgemm peak probe (setup)");
	if (c->comm[EST_FSDP_FWD_COMM])
		c->m_fcomm = est_moment(r, TITAN_EST_PHASE_FORWARD, "fsdp fwd",
					"FSDP all-gather (forward)");
	c->m_fwd = est_moment(r, TITAN_EST_PHASE_FORWARD, "forward", "attention forward");
	if (r->last)
		c->m_loss = est_moment(r, TITAN_EST_PHASE_LOSS, "loss", "classifier + cross-entropy");
	if (c->nckpt && est_block_ckpt(o, c->top))
		c->m_rec = est_moment(r, TITAN_EST_PHASE_BACKWARD, "recompute",
				      "recompute: attention forward");
	c->m_bwd = est_moment(r, TITAN_EST_PHASE_BACKWARD, "backward", "attention backward");
	if (c->nckpt && c->m_rec < 0)
		c->m_rec = est_moment(r, TITAN_EST_PHASE_BACKWARD, "recompute",
				      "recompute: attention forward");
	if (c->comm[EST_FSDP_BWD_COMM])
		c->m_bcomm = est_moment(r, TITAN_EST_PHASE_BACKWARD, "fsdp bwd",
					"FSDP gather/reduce-scatter (backward)");
	c->m_norm = est_moment(r, TITAN_EST_PHASE_BACKWARD, "gradnorm", "gradient norm");
	est_moment(r, TITAN_EST_PHASE_OPTIMIZER, "optim", "AdamW step");
	if (o->cpu_metrics_jsonl && (o->rank == 0 || o->cpu_metrics_all_ranks))
		c->m_log = est_moment(r, TITAN_EST_PHASE_OPTIMIZER, "log", "metrics.jsonl row");
	/* titan-train runs the probe before it builds the model: only the
	 * probe is live at start-up */
	c->all = EST_ALL & ~(c->m_start >= 0 ? EST_AT(c->m_start) : 0u);
}

/* The activations: per microbatch (PP: a schedule's microbatches in
 * flight each have their own) block inputs, saved activations, final
 * norm, the zero-bubble stash; the recompute set. */
static void cpu_activations(struct cpu *c)
{
	const struct titan_est_opts *o = c->o;
	struct titan_est_rank *r = c->r;
	struct est_num *n = &c->n;
	const int64_t N = c->N, nl = c->nl, C = c->C, q = c->q, kv = c->kv, H = c->H, F = c->F;
	const int64_t nmb = c->nmb;
	const uint32_t all = c->all;
	char what[80];
	int64_t set;

	snprintf(what, sizeof(what), "block inputs (%lld x %lld microbatch(es))",
		 (long long)c->xin, (long long)nmb);
	est_item(r, what, TITAN_MEM_ACTIVATIONS,
		 est_mul(n, est_mul(n, est_mul(n, c->xin * nmb, nl), C), 4), all);
	/* struct acts: xn1 rstd1 q k v att lse h xn2 rstd2 a b g (h and the
	 * norms' 1/rms of nl tokens, the rest of all N) */
	set = est_add(n, est_mul(n, N, 2 * C + 2 * q + 2 * kv + H + 3 * F), est_mul(n, nl, C + 2));
	set = est_mul(n, set, 4);
	if (o->ac == TITAN_EST_AC_OP) {
		/* selective 'op': each block keeps q v att lse a; one shared set
		 * of what backward recomputes: xn1 rstd1 k h xn2 rstd2 b g */
		int64_t keep = est_mul(n, est_mul(n, N, 2 * q + kv + H + F), 4);

		snprintf(what, sizeof(what), "per-op saved tensors of %lld block(s) x %lld",
			 (long long)c->blocks, (long long)nmb);
		est_item(r, what, TITAN_MEM_ACTIVATIONS, est_mul(n, keep, c->blocks * nmb), all);
		est_item(r, "per-op recompute set (one block)", TITAN_MEM_ACTIVATIONS,
			 est_mul(n, est_add(n, est_mul(n, N, 2 * C + kv + 2 * F),
					    est_mul(n, nl, C + 2)), 4), all);
	} else {
		if (c->kept) {
			snprintf(what, sizeof(what), "saved activations of %lld block(s) x %lld",
				 (long long)c->kept, (long long)nmb);
			est_item(r, what, TITAN_MEM_ACTIVATIONS, est_mul(n, set, c->kept * nmb), all);
		}
		if (o->ac != TITAN_EST_AC_NONE)
			est_item(r, "recompute set (one block)", TITAN_MEM_ACTIVATIONS, set, all);
	}
	if (r->last) {
		est_item(r, "final norm output + 1/rms", TITAN_MEM_ACTIVATIONS,
			 est_mul(n, est_mul(n, est_add(n, est_mul(n, N, C), nl), nmb), 4), all);
		if (nmb > 1 || c->split)
			est_item(r, "PP: loss gradients of the final norm output",
				 TITAN_MEM_ACTIVATIONS, est_mul(n, est_mul(n, N * nmb, C), 4), all);
		if (c->split)
			est_item(r, "ZB: final norm's output gradients (weight pass)",
				 TITAN_MEM_ACTIVATIONS, est_mul(n, est_mul(n, nl * nmb, C), 4), all);
	}
	if (c->split) {
		/* llama.c alloc_wstash: per block and microbatch the output
		 * gradients of w2, wo, wq/wk/wv and both norms; copies of the
		 * layer inputs of blocks whose activations are shared
		 * (checkpointed, selective 'op') */
		snprintf(what, sizeof(what), "ZB: weight-pass stash of %lld block(s) x %lld",
			 (long long)c->wst, (long long)nmb);
		est_item(r, what, TITAN_MEM_ACTIVATIONS,
			 est_mul(n, est_mul(n, est_add(n, est_mul(n, N, 2 * C + q + 2 * kv),
						       est_mul(n, nl, 2 * C)), c->wst * nmb), 4),
			 all);
		est_item(r, "ZB: stashed layer inputs (shared activations)", TITAN_MEM_ACTIVATIONS,
			 est_mul(n, est_mul(n, est_add(n, est_mul(n, N, 2 * C + q + 3 * F),
						       est_mul(n, nl, C + 2)), c->wsx * nmb), 4),
			 all);
		est_item(r, "ZB: ones (weight pass of the norms)", TITAN_MEM_WORKSPACE, C * 4, all);
	}
}

/* What stays for the run: the arenas, the RoPE table, CP's, TP's and PP's
 * buffers, ids and scratch, the trainer's inputs and labels. */
static void cpu_static(struct cpu *c)
{
	const struct titan_est_opts *o = c->o;
	struct titan_est_rank *r = c->r;
	struct est_num *n = &c->n;
	const int64_t N = c->N, nl = c->nl, C = c->C, q = c->q, kv = c->kv, F = c->F;
	const int64_t tp = c->tp, vc = c->vc, Sl = c->Sl, nmb = c->nmb;
	const uint32_t all = c->all;
	const int64_t chunk = N < TITAN_CE_CHUNK ? N : TITAN_CE_CHUNK;

	/* titan_llama_new: arenas of lib/model (params, grads, 2 moments) */
	est_item(r, "weights (fp32 arena)", TITAN_MEM_PARAMS, c->arena, all);
	est_item(r, "gradients (fp32 arena)", TITAN_MEM_GRADS, c->arena, all);
	est_item(r, "AdamW exp_avg + exp_avg_sq (2 arenas)", TITAN_MEM_OPTIM,
		 est_mul(n, c->arena, 2), all);
	est_item(r, "RoPE table", TITAN_MEM_OTHER, est_mul(n, est_mul(n, Sl, c->D), 4), all);
	if (c->cp > 1) {
		/* CP: this rank's positions and labels; allgather holds the
		 * whole sequence's keys and values, their gradients and the
		 * all-gather / reduce-scatter buffer of one microbatch for the
		 * run (the ring, lib/train/cp_ring.c, allocates per call) */
		est_item(r, "CP: token positions", TITAN_MEM_OTHER, est_mul(n, 2 * Sl, 4), all);
		est_item(r, "CP: this rank's labels", TITAN_MEM_DATA, est_mul(n, N, 4), all);
		if (!o->cp_alltoall)
			est_item(r, "CP: gathered K, V, dK, dV + gather buffer", TITAN_MEM_WORKSPACE,
				 est_mul(n, est_mul(n, est_mul(n, c->B, c->S), kv), 5 * 4), all);
	}
	cpu_activations(c);
	est_item(r, "token ids", TITAN_MEM_DATA, est_mul(n, N * nmb, 4), all);
	est_item(r, "backward scratch", TITAN_MEM_WORKSPACE,
		 est_mul(n, est_add(n, est_mul(n, N, C + 2 * q + 2 * kv + F),
				    est_mul(n, nl, 2 * C)), 4), all);
	if (tp > 1) {
		/* norm outputs before the gather, partial sums before the
		 * reduce-scatter, gathered gradients, their scattered sums; the
		 * loss's chunk logits, row maxima and sums (and without loss
		 * parallel every rank's logits and the whole rows) */
		est_item(r, "TP: sequence-parallel buffers", TITAN_MEM_WORKSPACE,
			 est_mul(n, est_add(n, est_mul(n, N, 2 * C), est_mul(n, nl, 2 * C)), 4),
			 all);
		est_item(r, "TP: loss chunk buffers", TITAN_MEM_WORKSPACE,
			 est_mul(n, est_add(n, est_mul(n, chunk, vc), est_mul(n, chunk, 5)), 4),
			 all);
		if (!o->loss_parallel)
			est_item(r, "TP: gathered logits (no loss parallel)", TITAN_MEM_WORKSPACE,
				 est_mul(n, est_add(n, est_mul(n, est_mul(n, tp, chunk), vc),
						    est_mul(n, chunk, c->V)), 4), all);
	}
	/* lib/train/pp.c: a gradient received and one sent per stage and
	 * microbatch */
	if (c->pp > 1)
		est_item(r, "PP: gradient receive + send buffers", TITAN_MEM_COMM,
			 est_mul(n, est_mul(n, 2 * c->G.nst * nmb, est_mul(n, nl, C)), 4), all);
	/* titan-train: inputs and labels of every microbatch of a step */
	est_item(r, "inputs + labels (all microbatches)", TITAN_MEM_DATA,
		 est_mul(n, est_mul(n, c->e->tokens_per_step, 2), 4), all);
}

/* What lives for a moment: the ops' workspace (lib/cpu), CP's ring, the
 * metrics row, FSDP's buffers. */
static void cpu_transient(struct cpu *c)
{
	const struct titan_est_opts *o = c->o;
	struct titan_est_rank *r = c->r;
	struct est_num *n = &c->n;
	const int64_t B = c->B, Sl = c->Sl, D = c->D, cp = c->cp, bq = TITAN_ATTN_BLOCK;
	const int64_t chunk = c->N < TITAN_CE_CHUNK ? c->N : TITAN_CE_CHUNK;
	const int64_t *comm = c->comm;
	const uint32_t bwd = EST_AT(c->m_bwd);
	const uint32_t rc_at = EST_AT(c->m_fwd) | (c->m_rec >= 0 ? EST_AT(c->m_rec) : 0);
	const int64_t tq = cp == 1 ? c->S : o->cp_alltoall ? Sl : Sl / 2;
	int64_t x;

	/* the attention kernel's tiles for tq query rows (tasks: rows x heads
	 * x query blocks forward, rows x kv heads backward, one thread each
	 * at most).  CP allgather runs each of the two query chunks (S/cp/2
	 * rows) against the gathered sequence; the ring's largest part is the
	 * rank's own S/cp rows (its first step), with its buffers live
	 * (forward: a receive buffer of keys and values per step in flight,
	 * min(cp - 1, 2); backward: those, two travelling dK/dV sums, the
	 * block's own dK/dV) */
	if (c->m_start >= 0)
		est_item(r, "sgemm peak probe (3 x 1024 x 1024 fp32)", TITAN_MEM_WORKSPACE,
			 3 * (int64_t)PROBE_N * PROBE_N * 4, EST_AT(c->m_start));
	x = est_mul(n, B, c->H * ((tq + bq - 1) / bq));       /* attention forward tasks */
	x = x < c->threads ? x : c->threads;
	est_item(r, "attention forward tiles (per thread)", TITAN_MEM_WORKSPACE,
		 est_mul(n, est_mul(n, x, bq * bq + D * bq + 2 * bq), 4), rc_at);
	if (c->tp == 1 && c->m_loss >= 0)
		est_item(r, "classifier/CE chunk logits + row losses", TITAN_MEM_WORKSPACE,
			 est_add(n, est_mul(n, est_mul(n, chunk, c->V), 4), est_mul(n, chunk, 8)),
			 EST_AT(c->m_loss));
	x = est_mul(n, B, c->Hkv);                             /* attention backward tasks */
	x = x < c->threads ? x : c->threads;
	est_item(r, "attention backward tiles (per thread)", TITAN_MEM_WORKSPACE,
		 est_mul(n, est_mul(n, x, est_add(n, tq, 2 * bq * bq + 2 * D * bq)), 4), bwd);
	if (cp > 1 && o->cp_alltoall) {
		const int64_t nkv = est_mul(n, est_mul(n, B, Sl), c->kv);
		const int64_t nbuf = cp - 1 < 2 ? cp - 1 : 2;

		est_item(r, "CP ring: key/value receive buffers", TITAN_MEM_COMM,
			 est_mul(n, nkv, 2 * nbuf * 4), rc_at | bwd);
		est_item(r, "CP ring: travelling dK/dV sums", TITAN_MEM_COMM,
			 est_mul(n, nkv, 4 * 4), bwd);
		est_item(r, "CP ring: the block's own dK/dV", TITAN_MEM_WORKSPACE,
			 est_mul(n, nkv, 2 * 4), bwd);
	}
	est_item(r, "gradient norm partial sums", TITAN_MEM_WORKSPACE, c->sumsq * 8,
		 EST_AT(c->m_norm));
	/* the metrics row (300-500 characters) in lib/core's JSON writer: its
	 * buffer grows 256 -> 512 bytes with both live while copying */
	if (c->m_log >= 0)
		est_item(r, "metrics.jsonl row (JSON writer buffers)", TITAN_MEM_OTHER, 256 + 512,
			 EST_AT(c->m_log));
	/* FSDP (lib/train/dp.c, measured by the dry run): gathered copies,
	 * all-gather and reduce-scatter buffers, unsharded gradients, the most
	 * live at each moment */
	if (c->m_fcomm >= 0)
		est_item(r, "FSDP: all-gather copy-out (forward)", TITAN_MEM_COMM,
			 comm[EST_FSDP_FWD_COMM], EST_AT(c->m_fcomm));
	est_item(r, "FSDP: gathered units + prefetch (forward)", TITAN_MEM_COMM,
		 comm[EST_FSDP_FWD_ATTN], EST_AT(c->m_fwd));
	if (c->m_loss >= 0)
		est_item(r, "FSDP: gathered + grads + prefetch (loss)", TITAN_MEM_COMM,
			 comm[EST_FSDP_LOSS], EST_AT(c->m_loss));
	if (c->m_rec >= 0)
		est_item(r, "FSDP: gathered + grads + prefetch (recompute)", TITAN_MEM_COMM,
			 comm[EST_FSDP_RECOMPUTE], EST_AT(c->m_rec));
	est_item(r, "FSDP: gathered + grads + prefetch (backward)", TITAN_MEM_COMM,
		 comm[EST_FSDP_BWD_ATTN], bwd);
	if (c->m_bcomm >= 0)
		est_item(r, "FSDP: copy-out / reduce-scatter (backward)", TITAN_MEM_COMM,
			 comm[EST_FSDP_BWD_COMM], EST_AT(c->m_bcomm));
}

int est_cpu_model(const struct titan_model_dims *d, const struct titan_est_opts *o,
		  struct titan_estimate *e)
{
	const struct titan_est_layout *l = &o->layout;
	struct cpu c = {
		.o = o, .e = e, .tp = l->tp, .cp = l->cp, .pp = l->pp, .S = o->seq_len,
		.C = d->dim, .H = d->n_heads / l->tp, .Hkv = d->n_kv_heads / l->tp,
		.D = d->head_dim, .F = d->ffn_hidden / l->tp, .V = d->vocab_size,
		.vc = (d->vocab_size + l->tp - 1) / l->tp,
		.B = l->pp > 1 ? o->pp_microbatch : o->local_batch,
		.nmb = l->pp > 1 ? o->local_batch / o->pp_microbatch : 1,
		.Sl = o->seq_len / l->cp,
		.split = l->pp > 1 && (o->schedule == TITAN_EST_INTERLEAVED_ZB ||
				       o->schedule == TITAN_EST_ZBV),
	};
	int rc;

	c.q = c.H * c.D;
	c.kv = c.Hkv * c.D;
	if ((rc = cpu_rank(d, &c)) < 0)
		return rc;
	c.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
	if (c.threads < 1)
		c.threads = 1;
	c.N = est_mul(&c.n, c.B, c.Sl);
	c.nl = c.N / c.tp;
	e->tokens_per_step = est_mul(&c.n, est_mul(&c.n, o->local_batch, c.S), o->accum);
	cpu_moments(&c);
	cpu_static(&c);
	cpu_transient(&c);
	est_rank_finish(c.r, o->dev.alloc_overhead, &c.n);
	if (c.n.overflow)
		return titan_error(TITAN_E_INVALID, "the estimate does not fit in 64-bit byte counts "
				   "(batch, sequence or model far too large)");
	return 0;
}
