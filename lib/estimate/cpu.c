/*
 * cpu.c — the memory of titan-train's CPU path, to the byte: what
 * lib/train (trainer.c, llama.c, dp.c, pp.c, cp_ring.c) and the CPU ops of
 * lib/cpu allocate through the host tagged allocator, under the same tags,
 * at the same moments of a step, on one rank of any layout titan-train
 * runs: DDP/FSDP/HSDP x TP x PP (GPipe, 1F1B, Interleaved1F1B,
 * InterleavedZeroBubble, ZBVZeroBubble) x CP (allgather, alltoall); rank
 * 0 by default (the largest shard, the metrics.jsonl writer).  The
 * pipeline rank's stages are titan-train's own (titan_pp_split,
 * titan_pp_stages_per_rank, titan_pp_stage_of).
 *
 * What stays for the run is the engine's own statement: the model's
 * buffer plan (titan_llama_plan: the arenas, activations, stash, TP's and
 * CP's buffers, each entry with the report row it belongs to) and the
 * pipeline's buffers, read from the engine built on the dry run's
 * allocator (dry.c, est_dry_plan); only the trainer's inputs and labels
 * are counted here.  What lives for a moment — the ops' workspace
 * (attention tiles, the loss's chunk logits, the norm's partial sums:
 * lib/cpu's own size functions, titan_cpu_*_ws in titan/ops.h, which the
 * measure backend's ops take too), CP's ring (titan_cp_ring_mem), the
 * metrics row (titan_metrics_row_bytes), the sgemm peak probe
 * (titan_trainer_peak_probe_bytes) — is the allocating code's own size
 * functions too.  tests/bats/titan-estimate.bats,
 * titan-estimate-pp-cp.bats and titan-train-dist.bats run titan-train and
 * compare.
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
#include "train/stage.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* One rank's model: the layout's sizes the ops' workspace depends on (TP:
 * this rank's heads; PP: microbatches of pipeline_parallel_microbatch_size
 * rows; CP: S / cp tokens of each row), the rank's stages and blocks, the
 * model's buffer plan, and the moments of its step. */
struct cpu {
	const struct titan_est_opts *o;
	struct titan_estimate *e;
	struct titan_est_rank *r;
	struct est_num n;
	int64_t tp, cp, pp, S, H, Hkv, D, V, kv, B, nmb, Sl, N, threads;
	struct titan_stages G;     /* the rank's stages (its layout's) */
	int64_t nckpt, sumsq, top;  /* sumsq: the largest parameter shard's elements */
	int64_t moe_layers;        /* the model's MoE blocks (the metrics row's load) */
	int64_t comm[EST_FSDP_NKINDS];
	struct est_dry plan;       /* the engine built: the model's buffer plan */
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
	struct titan_stages *G = &c->G;
	struct titan_layout lay;
	int64_t ppr;
	int rc;

	if (c->pp > 1 && o->schedule == TITAN_EST_LOOPED_BFS)
		return titan_error(TITAN_E_INVALID, "--device cpu replays titan-train's pipeline "
				   "schedules (GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble, "
				   "ZBVZeroBubble), not %s", titan_est_schedule_name(o->schedule));
	/* titan-train's layout of the rank: its mesh coordinates, stages,
	 * shards */
	if ((rc = est_dry_layout(d, o, &lay)) < 0)
		return rc;
	ppr = lay.coord[TITAN_DIM_PP];
	titan_stages_init(G, &lay.stages, (int)L);
	if (c->pp > 1 && (rc = titan_pp_check_microbatches(lay.schedule, (int)c->pp,
							   (int)c->nmb)) < 0)
		return rc;
	titan_layout_table_opts(&lay, &po);
	if ((rc = titan_param_table_init(&t, d, &po)) < 0)
		return rc;
	if ((fsdp > 1 && (rc = est_dry_fsdp(d, o, c->comm)) < 0) ||
	    (rc = est_dry_plan(d, o, &c->plan)) < 0) {
		titan_param_table_release(&t);
		return rc;
	}
	if (!(c->e->ranks = calloc(1, sizeof(*c->e->ranks)))) {
		titan_param_table_release(&t);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	c->e->nranks = 1;
	c->e->stages_per_rank = G->n;
	c->e->nstages = lay.nstages > 0 ? lay.nstages : 1;
	c->e->pp_microbatches = c->nmb;
	r = c->r = &c->e->ranks[0];
	r->pp_rank = (int)ppr;
	r->nstages = G->n;
	c->top = -1;
	for (int v = 0; v < G->n; v++) {
		const struct titan_pp_stage *sg = &G->v[v];

		r->stages[v] = sg->index;
		r->stage_l0[v] = sg->l0;
		r->stage_l1[v] = sg->l1;
		r->layers += sg->l1 - sg->l0;
		for (int64_t b = sg->l0; b < sg->l1; b++) {
			c->nckpt += est_block_ckpt(o, b);
			c->top = b > c->top ? b : c->top;
		}
	}
	r->first = G->first;
	r->last = G->last;
	/* the stages' parameter elements (after TP, before FSDP) */
	for (int i = 0; i < t.n; i++) {
		const struct titan_param *p = &t.params[i];

		if (titan_stages_has_group(G, p->layer >= 0 ? 1 + p->layer :
					   p->role == TITAN_PARAM_TOK_EMBEDDINGS ? 0 : (int)L + 1,
					   (int)L + 2))
			r->params_local += p->ep_sharded ? p->full_rows * p->shape[1] : p->numel;
		if (p->local_numel > c->sumsq)
			c->sumsq = p->local_numel;
	}
	r->params_shard = t.local_numel;
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

/* A row of the plan: the microbatch sets' entries of the role counted
 * as the report names them (the block inputs of one set; the blocks
 * whose tensors one set keeps). */
static void plan_row(struct titan_est_rank *r, const struct est_dry *p, int64_t nmb,
		     enum titan_buf_role role, uint32_t moments, struct est_num *n)
{
	int64_t bytes = 0, inputs = 0, blocks = 0;
	enum titan_mem_tag tag = TITAN_MEM_OTHER;
	int last = -1;
	char what[80];

	for (int i = 0; i < p->nplan; i++) {
		const struct titan_buf_entry *b = &p->plan[i];

		if (b->role != role)
			continue;
		bytes = est_add(n, bytes, b->bytes);
		tag = b->tag;
		if (b->mb == 0) {
			inputs++;
			blocks += b->layer != last;
			last = b->layer;
		}
	}
	if (role == TITAN_BUF_BLOCK_INPUTS)
		snprintf(what, sizeof(what), "%s (%lld x %lld microbatch(es))",
			 titan_buf_role_name(role), (long long)inputs, (long long)nmb);
	else if (role == TITAN_BUF_SAVED || role == TITAN_BUF_SAVED_OP ||
		 role == TITAN_BUF_ZB_STASH)
		snprintf(what, sizeof(what), "%s of %lld block(s) x %lld",
			 titan_buf_role_name(role), (long long)blocks, (long long)nmb);
	else if (role == TITAN_BUF_MOE_EXPERTS) /* the role's name, to the report's width */
		snprintf(what, sizeof(what), "MoE experts: routed rows, hidden, outputs, shared");
	else
		snprintf(what, sizeof(what), "%s", titan_buf_role_name(role));
	est_item(r, what, tag, bytes, moments);
}

void est_plan_rows(struct titan_est_rank *r, const struct est_dry *p, int64_t nmb,
		   uint32_t moments, struct est_num *n)
{
	for (int role = 0; role < TITAN_BUF_NROLES; role++)
		plan_row(r, p, nmb, (enum titan_buf_role)role, moments, n);
}

/* What stays for the run: the model's buffer plan (titan_llama_plan:
 * arenas, RoPE table, CP's and TP's buffers, the microbatches'
 * activations, the zero-bubble stash, ids and scratch), the pipeline's
 * buffers (the comm bytes of the engine built: lib/train/pp.c's gradient
 * receive and send buffers), the trainer's inputs and labels. */
static void cpu_static(struct cpu *c)
{
	struct titan_est_rank *r = c->r;

	est_plan_rows(r, &c->plan, c->nmb, c->all, &c->n);
	if (c->pp > 1)
		est_item(r, "PP: gradient receive + send buffers", TITAN_MEM_COMM,
			 c->plan.built.cur[TITAN_MEM_COMM], c->all);
	/* titan-train: inputs and labels of every microbatch of a step */
	est_item(r, "inputs + labels (all microbatches)", TITAN_MEM_DATA,
		 est_mul(&c->n, est_stated(&c->n, titan_trainer_token_bytes(c->e->tokens_per_step)),
			 2), c->all);
}

/* What lives for a moment: the ops' workspace (lib/cpu), CP's ring, the
 * metrics row, FSDP's buffers. */
static void cpu_transient(struct cpu *c)
{
	const struct titan_est_opts *o = c->o;
	struct titan_est_rank *r = c->r;
	struct est_num *n = &c->n;
	const int64_t B = c->B, Sl = c->Sl, D = c->D, cp = c->cp, bq = TITAN_ATTN_BLOCK;
	const int64_t *comm = c->comm;
	const uint32_t bwd = EST_AT(c->m_bwd);
	const uint32_t rc_at = EST_AT(c->m_fwd) | (c->m_rec >= 0 ? EST_AT(c->m_rec) : 0);
	const int64_t tq = cp == 1 ? c->S : o->cp_alltoall ? Sl : Sl / 2;

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
			 est_stated(n, titan_trainer_peak_probe_bytes()), EST_AT(c->m_start));
	est_item(r, "attention forward tiles (per thread)", TITAN_MEM_WORKSPACE,
		 est_stated(n, titan_cpu_attn_fwd_ws(c->threads, bq, bq, B, tq, c->H, D)), rc_at);
	if (c->tp == 1 && c->m_loss >= 0) {
		int64_t zb, rb;

		titan_cpu_classifier_ce_ws(c->N, c->V, TITAN_CE_CHUNK, &zb, &rb);
		est_item(r, "classifier/CE chunk logits + row losses", TITAN_MEM_WORKSPACE,
			 est_add(n, est_stated(n, zb), est_stated(n, rb)), EST_AT(c->m_loss));
	}
	est_item(r, "attention backward tiles (per thread)", TITAN_MEM_WORKSPACE,
		 est_stated(n, titan_cpu_attn_bwd_ws(c->threads, bq, bq, B, tq, tq, c->Hkv, D)), bwd);
	if (cp > 1 && o->cp_alltoall) {
		struct titan_cp_ring_mem m;

		titan_cp_ring_mem(est_mul(n, est_mul(n, B, Sl), c->kv), cp, &m);
		est_item(r, "CP ring: key/value receive buffers", TITAN_MEM_COMM,
			 est_stated(n, m.recv), rc_at | bwd);
		est_item(r, "CP ring: travelling dK/dV sums", TITAN_MEM_COMM,
			 est_stated(n, m.sums), bwd);
		est_item(r, "CP ring: the block's own dK/dV", TITAN_MEM_WORKSPACE,
			 est_stated(n, m.own), bwd);
	}
	est_item(r, "gradient norm partial sums", TITAN_MEM_WORKSPACE,
		 est_stated(n, titan_cpu_sumsq_ws(c->sumsq)), EST_AT(c->m_norm));
	if (c->m_log >= 0)
		est_item(r, "metrics.jsonl row (JSON writer buffer)", TITAN_MEM_OTHER,
			 est_stated(n, titan_metrics_row_bytes(c->moe_layers)), EST_AT(c->m_log));
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
		.H = d->n_heads / l->tp, .Hkv = d->n_kv_heads / l->tp, .D = d->head_dim,
		.V = d->vocab_size,
		.B = l->pp > 1 ? o->pp_microbatch : o->local_batch,
		.nmb = l->pp > 1 ? o->local_batch / o->pp_microbatch : 1,
		.Sl = o->seq_len / l->cp,
	};
	int rc;

	c.kv = c.Hkv * c.D;
	c.moe_layers = e->params.n_moe_layers;
	if ((rc = cpu_rank(d, &c)) < 0) {
		est_dry_release(&c.plan);
		return rc;
	}
	c.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
	if (c.threads < 1)
		c.threads = 1;
	c.N = est_mul(&c.n, c.B, c.Sl);
	e->tokens_per_step = est_mul(&c.n, est_mul(&c.n, o->local_batch, c.S), o->accum);
	cpu_moments(&c);
	cpu_static(&c);
	est_dry_release(&c.plan);
	cpu_transient(&c);
	est_rank_finish(c.r, o->dev.alloc_overhead, &c.n);
	if (c.n.overflow)
		return titan_error(TITAN_E_INVALID, "the estimate does not fit in 64-bit byte counts "
				   "(batch, sequence or model far too large)");
	return 0;
}
