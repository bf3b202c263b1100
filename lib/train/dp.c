/*
 * dp.c — data parallelism over a titan_llama's parameter groups: DDP
 * (torch's DistributedDataParallel / torchtitan's replicate: gradients
 * all-reduced in buckets while backward still runs), FSDP (FSDP2's
 * fully_shard per unit: dim-0 shards, all-gather before use with the next
 * unit prefetched, reduce-scatter after backward) and HSDP (FSDP over the
 * shard dimension, the sharded gradients all-reduced over the replicas).
 *
 * A unit is a run of consecutive parameter groups (titan/train.h) whose
 * collectives go as one bucket: one group each by default (torchtitan's
 * fully_shard per block), or merged until a unit holds comm.bucket_size_mb.
 * Every rank issues the same collectives in the same order: the schedule
 * depends only on the model, the options and the microbatch, never on
 * timing (completion is polled at the hooks, in issue order).
 *
 * FSDP packing.  Parameter p of a unit holds rows [r·chunk, ...) on shard
 * r (chunk = ceil(shape[0] / N), torch.chunk's split, so the last shards
 * may be short or empty).  On the wire each rank's part of a unit is the
 * unit's parameters one after another, each as chunk·cols floats (the rows
 * a shard lacks are zeros): S floats per rank.  An all-gather then gives
 * N·S floats, rank-major, copied out into the unsharded layout (the
 * unsharded table's arena slice, which the model's views bind to); a
 * reduce-scatter takes the gradients copied in rank-major and leaves this
 * rank's S, which are added to its sharded gradients.  The buffers are the
 * model backend's and every copy, fill and addition is one of its ops
 * (titan/ops.h buf_*, add): no host code touches them, so they may be
 * device memory (the communicator then stages them, titan/dist.h).
 *
 * Expert parallelism.  The stacked experts of an EP rank hold its E/ep
 * experts only (titan/model.h: the unsharded view is rows [full_row0,
 * + full_rows), sharded over the efsdp mesh `eshard`).  A unit's
 * parameters then go in two parts, each packed as above: the stacked
 * experts over eshard (no collective when it is one rank: the rows are
 * copied, the gradients added, directly), the others over the shard mesh.
 * Each expert's gradient is so summed over exactly the ranks that hold it
 * (HSDP's all-reduce then adds the replicas).
 *
 * Memory (tag comm): the gathered copy of a unit (its unsharded size), the
 * all-gather buffers (S + N·S) while it is in flight, an unsharded
 * gradient buffer from the unit's backward to its reduce-scatter, and the
 * reduce-scatter buffers (N·S + S) until it completes.  titan-estimate
 * models the same schedule.
 */
#include "titan/train.h"

#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/dist.h"

/* The parameters of a unit that share one FSDP mesh: part 0 on the shard
 * mesh, part 1 the stacked experts on the efsdp mesh (EP). */
enum { PART_SHARD, PART_EXPERTS, NPARTS };

struct part {
	int64_t shard_floats;    /* S: chunk·cols summed over the part's parameters */
	float *gsend, *grecv;    /* all-gather in flight */
	struct titan_comm_req *greq;
	float *rsend, *rrecv;    /* reduce-scatter in flight */
	struct titan_comm_req *rreq;
};

struct unit {
	int g0, g1;              /* groups [g0, g1] */
	int p0, p1;              /* parameters [p0, p1) */
	int64_t full_floats;     /* unsharded slice: full_offset(p1) - full_offset(p0) */
	char name[48];
	/* FSDP state */
	struct part pt[NPARTS];
	bool gathering;          /* all-gathers in flight */
	float *full;             /* gathered parameters, or NULL */
	float *grad;             /* unsharded gradients, or NULL */
	/* reduction in flight (FSDP reduce-scatter, or DDP/HSDP all-reduce) */
	bool rs_pending;         /* rrecv holds a reduce-scatter to add */
	bool rs_last;            /* ... of the step's last microbatch */
	struct titan_comm_req *areq; /* replicate all-reduce */
};

struct titan_dp {
	struct titan_llama *m;
	const struct titan_param_table *t;
	struct titan_backend *be;  /* the model's: buffers and their copies */
	struct titan_dp_opts o;
	int nshard, shard_rank;  /* fsdp comm */
	struct titan_comm *pcomm[NPARTS]; /* each part's mesh (PART_EXPERTS: efsdp, or NULL) */
	int pranks[NPARTS];      /* its size */
	int nrep;                /* replicate comm */
	bool fsdp;
	int nunits;
	struct unit *u;
	int *unit_of;            /* group -> unit */
	bool tied;
	/* this microbatch */
	bool backward, last;
	/* units with a reduction in flight, in issue order */
	int *pending;
	int npending;
	double *sumsq;
};

static float *mem(struct titan_dp *dp, int64_t floats)
{
	return dp->be->ops->buf_alloc(dp->be, (size_t)floats * sizeof(float), TITAN_MEM_COMM);
}

static void unmem(struct titan_dp *dp, float **p)
{
	dp->be->ops->buf_free(dp->be, *p);
	*p = NULL;
}

/* The rows [r·chunk, r·chunk + chunk) of parameter p's unsharded view
 * that rank r of its part's mesh holds (torch.chunk: the last shards may
 * be short or empty): first row of the view, count. */
static int64_t shard_rows(const struct titan_param *p, int r, int64_t *r0)
{
	const int64_t n = p->full_rows;
	int64_t rows = p->chunk_rows;

	*r0 = r * p->chunk_rows;
	if (*r0 > n)
		*r0 = n;
	if (*r0 + rows > n)
		rows = n - *r0;
	return rows;
}

static int part_of(const struct titan_param *p)
{
	return p->ep_sharded ? PART_EXPERTS : PART_SHARD;
}

/* Part k goes through a collective (else: one rank, copied directly). */
static bool collective(const struct titan_dp *dp, const struct unit *u, int k)
{
	return u->pt[k].shard_floats > 0 && (k == PART_SHARD || dp->pranks[k] > 1);
}

static int64_t full_end(const struct titan_param_table *t, int p1)
{
	return p1 < t->n ? t->params[p1].full_offset : t->full_arena_floats;
}

static int build_units(struct titan_dp *dp)
{
	const int ng = titan_llama_ngroups(dp->m);
	int first, end;

	dp->u = calloc((size_t)ng, sizeof(*dp->u));
	dp->unit_of = calloc((size_t)ng, sizeof(*dp->unit_of));
	dp->pending = calloc((size_t)ng, sizeof(*dp->pending));
	dp->sumsq = calloc((size_t)dp->t->n, sizeof(*dp->sumsq));
	if (!dp->u || !dp->unit_of || !dp->pending || !dp->sumsq)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	for (int g = 0; g < ng; g++) {
		struct unit *u = dp->nunits ? &dp->u[dp->nunits - 1] : NULL;

		dp->unit_of[g] = -1;
		if (!titan_llama_group_active(dp->m, g))
			continue; /* another pipeline stage's */
		titan_llama_group_params(dp->m, g, &first, &end);
		/* a new unit unless the open one is below the bucket size
		 * (the embeddings and the last group stay alone: they are used
		 * out of order with tied weights and around the loss) */
		if (!u || g == 1 || g == ng - 1 ||
		    (u->g1 == ng - 1) ||
		    (int64_t)(u->full_floats * (int64_t)sizeof(float)) >= dp->o.bucket_bytes) {
			u = &dp->u[dp->nunits++];
			u->g0 = g;
			u->p0 = first;
		}
		u->g1 = g;
		u->p1 = end;
		u->full_floats = full_end(dp->t, end) - dp->t->params[u->p0].full_offset;
		dp->unit_of[g] = dp->nunits - 1;
	}
	for (int i = 0; i < dp->nunits; i++) {
		struct unit *u = &dp->u[i];

		for (int p = u->p0; p < u->p1; p++)
			u->pt[part_of(&dp->t->params[p])].shard_floats +=
				dp->t->params[p].chunk_rows * dp->t->params[p].shape[1];
		if (u->g0 == 0 && u->g1 == 0)
			snprintf(u->name, sizeof(u->name), "tok_embeddings");
		else if (u->g0 == ng - 1)
			snprintf(u->name, sizeof(u->name), "norm+output");
		else if (u->g0 == u->g1)
			snprintf(u->name, sizeof(u->name), "layer %d", u->g0 - 1);
		else
			snprintf(u->name, sizeof(u->name), "layers %d-%d", u->g0 - 1, u->g1 - 1);
	}
	return 0;
}

int titan_dp_new(struct titan_llama *m, const struct titan_dp_opts *o, struct titan_dp **out)
{
	struct titan_dp *dp = calloc(1, sizeof(*dp));
	int rc;

	*out = NULL;
	if (!dp)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	dp->m = m;
	dp->t = titan_llama_table(m);
	dp->be = o->be;
	dp->o = *o;
	if (!dp->be) {
		rc = titan_error(TITAN_E_INTERNAL, "data parallelism without a backend");
		goto fail;
	}
	dp->nshard = o->shard ? titan_comm_size(o->shard) : 1;
	dp->shard_rank = o->shard ? titan_comm_rank(o->shard) : 0;
	dp->nrep = o->replicate ? titan_comm_size(o->replicate) : 1;
	dp->fsdp = dp->nshard > 1;
	dp->pcomm[PART_SHARD] = o->shard;
	dp->pranks[PART_SHARD] = dp->nshard;
	dp->pcomm[PART_EXPERTS] = o->eshard;
	dp->pranks[PART_EXPERTS] = o->eshard ? titan_comm_size(o->eshard) : 1;
	dp->tied = titan_param_index(dp->t, TITAN_PARAM_OUTPUT, -1) < 0;
	if (dp->t->opts.shard_degree != (dp->fsdp ? dp->nshard : 1) ||
	    (dp->fsdp && dp->t->opts.shard_rank != dp->shard_rank)) {
		rc = titan_error(TITAN_E_INTERNAL, "model sharded %d of %d, the fsdp mesh is %d of %d",
				 dp->t->opts.shard_rank, dp->t->opts.shard_degree, dp->shard_rank,
				 dp->nshard);
		goto fail;
	}
	if (dp->fsdp && dp->t->opts.ep_degree > 1 &&
	    (!o->eshard || dp->t->opts.ep_shard_degree != dp->pranks[PART_EXPERTS] ||
	     dp->t->opts.ep_shard_rank != titan_comm_rank(o->eshard))) {
		rc = titan_error(TITAN_E_INTERNAL, "model's experts sharded %d of %d, the efsdp "
				 "mesh is %d of %d", dp->t->opts.ep_shard_rank,
				 dp->t->opts.ep_shard_degree,
				 o->eshard ? titan_comm_rank(o->eshard) : 0, dp->pranks[PART_EXPERTS]);
		goto fail;
	}
	if ((rc = build_units(dp)) < 0)
		goto fail;
	if (dp->fsdp)
		for (int g = 0; g < titan_llama_ngroups(m); g++)
			titan_llama_bind_group(m, g, NULL, NULL);
	*out = dp;
	return 0;
fail:
	titan_dp_free(dp);
	return rc;
}

/* ------------------------------------------------------------ FSDP */

static void bind_unit(struct titan_dp *dp, struct unit *u)
{
	const int64_t base = dp->t->params[u->p0].full_offset;

	for (int g = u->g0; g <= u->g1; g++) {
		int first, end;

		titan_llama_group_params(dp->m, g, &first, &end);
		const int64_t off = dp->t->params[first].full_offset - base;

		titan_llama_bind_group(dp->m, g, u->full ? u->full + off : NULL,
				       u->grad ? u->grad + off : NULL);
	}
}

static int gather_start(struct titan_dp *dp, struct unit *u)
{
	const struct titan_param_arena *pa = titan_llama_params(dp->m);
	char what[96];

	if (u->full || u->gathering)
		return 0;
	for (int k = 0; k < NPARTS; k++) {
		struct part *q = &u->pt[k];
		int64_t off = 0;
		int rc;

		if (!collective(dp, u, k))
			continue;
		if (!(q->gsend = mem(dp, q->shard_floats)) ||
		    !(q->grecv = mem(dp, q->shard_floats * dp->pranks[k])))
			return TITAN_E_NOMEM;
		for (int i = u->p0; i < u->p1; i++) {
			const struct titan_param *p = &dp->t->params[i];
			const int64_t slot = p->chunk_rows * p->shape[1];

			if (part_of(p) != k)
				continue;
			if ((rc = dp->be->ops->buf_copy(dp->be, q->gsend + off, titan_param_view(pa, p),
						   (size_t)p->local_numel * sizeof(float))) < 0 ||
			    (rc = dp->be->ops->buf_memset(dp->be, q->gsend + off + p->local_numel, 0,
						     (size_t)(slot - p->local_numel) * sizeof(float))) < 0)
				return rc;
			off += slot;
		}
		snprintf(what, sizeof(what), k == PART_SHARD ? "%s params" : "%s experts", u->name);
		if ((rc = titan_comm_iall_gather(dp->pcomm[k], q->gsend, q->grecv,
						 (size_t)q->shard_floats, TITAN_DTYPE_F32, what,
						 &q->greq)) < 0)
			return rc;
	}
	u->gathering = true;
	return 0;
}

static int gather_finish(struct titan_dp *dp, struct unit *u)
{
	const struct titan_param_arena *pa = titan_llama_params(dp->m);
	const int64_t base = dp->t->params[u->p0].full_offset;
	int rc = 0;

	if (u->full)
		return 0;
	if (!u->gathering && (rc = gather_start(dp, u)) < 0)
		return rc;
	u->gathering = false;
	for (int k = 0; k < NPARTS; k++) {
		struct part *q = &u->pt[k];
		int rk = q->greq ? titan_comm_wait(q->greq) : 0;

		q->greq = NULL;
		unmem(dp, &q->gsend);
		rc = rc < 0 ? rc : rk;
	}
	if (rc < 0)
		return rc;
	if (!(u->full = mem(dp, u->full_floats)))
		return TITAN_E_NOMEM;
	for (int k = 0; k < NPARTS && rc == 0; k++) {
		struct part *q = &u->pt[k];

		for (int r = 0; r < dp->pranks[k] && q->grecv; r++) {
			int64_t src = (int64_t)r * q->shard_floats;

			for (int i = u->p0; i < u->p1 && rc == 0; i++) {
				const struct titan_param *p = &dp->t->params[i];
				const int64_t cols = p->shape[1];
				int64_t r0, rows = shard_rows(p, r, &r0);

				if (part_of(p) != k)
					continue;
				rc = dp->be->ops->buf_copy_rows(dp->be, u->full,
								(p->full_offset - base) + r0 * cols,
								cols, q->grecv, src, cols, rows, cols);
				src += p->chunk_rows * cols;
			}
		}
		/* one rank: its rows are the whole view */
		for (int i = u->p0; i < u->p1 && rc == 0 && !collective(dp, u, k); i++) {
			const struct titan_param *p = &dp->t->params[i];

			if (part_of(p) == k)
				rc = dp->be->ops->buf_copy(dp->be, u->full + (p->full_offset - base),
							   titan_param_view(pa, p),
							   (size_t)p->local_numel * sizeof(float));
		}
		unmem(dp, &q->grecv);
	}
	if (rc < 0)
		return rc;
	bind_unit(dp, u);
	return 0;
}

static void release_params(struct titan_dp *dp, struct unit *u)
{
	if (!u->full)
		return;
	unmem(dp, &u->full);
	bind_unit(dp, u);
}

static int ensure_grad(struct titan_dp *dp, struct unit *u)
{
	int rc;

	if (u->grad)
		return 0;
	if (!(u->grad = mem(dp, u->full_floats)))
		return TITAN_E_NOMEM;
	if ((rc = dp->be->ops->buf_memset(dp->be, u->grad, 0, (size_t)u->full_floats * sizeof(float))) < 0)
		return rc;
	bind_unit(dp, u);
	return 0;
}

/* The sharded gradients of a unit: one contiguous slice of the arena. */
static float *shard_grads(struct titan_dp *dp, struct unit *u, int64_t *n)
{
	const struct titan_param_arena *ga = titan_llama_grads(dp->m);
	const struct titan_param *first = &dp->t->params[u->p0], *last = &dp->t->params[u->p1 - 1];

	*n = last->offset + last->local_numel - first->offset;
	return ga->data + first->offset;
}

static int reduce_start(struct titan_dp *dp, struct unit *u)
{
	char what[96];
	int rc;

	if (dp->fsdp) {
		const struct titan_param_arena *ga = titan_llama_grads(dp->m);
		const int64_t base = dp->t->params[u->p0].full_offset;

		for (int k = 0; k < NPARTS; k++) {
			struct part *q = &u->pt[k];
			int64_t dst = 0;

			if (!collective(dp, u, k)) {
				/* one rank: the whole view's gradients are its shard's */
				for (int i = u->p0; i < u->p1; i++) {
					const struct titan_param *p = &dp->t->params[i];
					float *g = titan_param_view(ga, p);

					if (part_of(p) == k &&
					    (rc = dp->be->ops->add(dp->be, g, g,
								   u->grad + (p->full_offset - base),
								   p->local_numel)) < 0)
						return rc;
				}
				continue;
			}
			if (!(q->rsend = mem(dp, q->shard_floats * dp->pranks[k])) ||
			    !(q->rrecv = mem(dp, q->shard_floats)))
				return TITAN_E_NOMEM;
			for (int r = 0; r < dp->pranks[k]; r++) {
				for (int i = u->p0; i < u->p1; i++) {
					const struct titan_param *p = &dp->t->params[i];
					const int64_t cols = p->shape[1], slot = p->chunk_rows * cols;
					int64_t r0, rows = shard_rows(p, r, &r0);

					if (part_of(p) != k)
						continue;
					if ((rc = dp->be->ops->buf_copy_rows(dp->be, q->rsend, dst, cols,
									u->grad,
									(p->full_offset - base) +
									r0 * cols, cols, rows,
									cols)) < 0 ||
					    (rc = dp->be->ops->buf_memset(dp->be,
								     q->rsend + dst + rows * cols, 0,
								     (size_t)(slot - rows * cols) *
								     sizeof(float))) < 0)
						return rc;
					dst += slot;
				}
			}
		}
		unmem(dp, &u->grad);
		bind_unit(dp, u);
		for (int k = 0; k < NPARTS; k++) {
			struct part *q = &u->pt[k];

			if (!q->rsend)
				continue;
			snprintf(what, sizeof(what), k == PART_SHARD ? "%s grads" : "%s expert grads",
				 u->name);
			if ((rc = titan_comm_ireduce_scatter(dp->pcomm[k], q->rsend, q->rrecv,
							     (size_t)q->shard_floats,
							     TITAN_DTYPE_F32, what, &q->rreq)) < 0)
				return rc;
		}
		u->rs_pending = true;
		u->rs_last = dp->last;
	} else {
		/* DDP: the unit's gradients are one slice of the full arena */
		int64_t n;
		float *g = shard_grads(dp, u, &n);

		snprintf(what, sizeof(what), "%s grads", u->name);
		if ((rc = titan_comm_iall_reduce(dp->o.replicate, TITAN_IN_PLACE, g, (size_t)n,
						 TITAN_DTYPE_F32, TITAN_REDOP_SUM, what,
						 &u->areq)) < 0)
			return rc;
	}
	dp->pending[dp->npending++] = (int)(u - dp->u);
	return 0;
}

/* Advance the reductions in flight by one stage each, blocking, except
 * the newest `keep` (issue order): a reduce-scatter is waited for and
 * added to the sharded gradients (then, on the step's last microbatch
 * under HSDP, the replicas' all-reduce starts), an all-reduce is waited
 * for.  The schedule is fixed — a unit's reduction completes at the next
 * unit's post_backward — so that the buffers live at each moment, and the
 * memory peak, do not depend on timing (titan-estimate models them). */
static int reduce_advance(struct titan_dp *dp, int keep)
{
	int n = dp->npending - keep, rc, w = 0;

	for (int i = 0; i < dp->npending; i++) {
		struct unit *u = &dp->u[dp->pending[i]];

		if (i >= n) {
			dp->pending[w++] = dp->pending[i];
			continue;
		}
		if (u->rs_pending) {
			const struct titan_param_arena *ga = titan_llama_grads(dp->m);

			u->rs_pending = false;
			rc = 0;
			for (int k = 0; k < NPARTS; k++) {
				struct part *q = &u->pt[k];
				int rk = q->rreq ? titan_comm_wait(q->rreq) : 0;

				q->rreq = NULL;
				unmem(dp, &q->rsend);
				rc = rc < 0 ? rc : rk;
			}
			if (rc < 0)
				return rc;
			/* add this rank's rows to the sharded gradients */
			for (int k = 0; k < NPARTS; k++) {
				const float *src = u->pt[k].rrecv;

				for (int j = u->p0; j < u->p1 && rc == 0 && src; j++) {
					const struct titan_param *p = &dp->t->params[j];
					float *g = titan_param_view(ga, p);

					if (part_of(p) != k)
						continue;
					rc = dp->be->ops->add(dp->be, g, g, src, p->local_numel);
					src += p->chunk_rows * p->shape[1];
				}
				unmem(dp, &u->pt[k].rrecv);
			}
			if (rc < 0)
				return rc;
			if (u->rs_last && dp->nrep > 1) {
				int64_t cnt;
				float *g = shard_grads(dp, u, &cnt);
				char what[96];

				snprintf(what, sizeof(what), "%s grads (replicas)", u->name);
				if ((rc = titan_comm_iall_reduce(dp->o.replicate, TITAN_IN_PLACE, g,
								 (size_t)cnt, TITAN_DTYPE_F32,
								 TITAN_REDOP_SUM, what, &u->areq)) < 0)
					return rc;
				dp->pending[w++] = dp->pending[i]; /* its next stage later */
				continue;
			}
		} else if (u->areq) {
			rc = titan_comm_wait(u->areq);
			u->areq = NULL;
			if (rc < 0)
				return rc;
		}
	}
	dp->npending = w;
	return 0;
}

static int reduce_all(struct titan_dp *dp)
{
	int rc;

	while (dp->npending > 0)
		if ((rc = reduce_advance(dp, 0)) < 0)
			return rc;
	return 0;
}

/* ------------------------------------------------------------ hooks */

static int pre_forward(void *ctx, int g)
{
	struct titan_dp *dp = ctx;
	const int k = dp->unit_of[g];
	struct unit *u = &dp->u[k];

	TITAN_ASSERT(k >= 0); /* a group of this pipeline stage */
	int rc;

	if (!dp->fsdp || g != u->g0)
		return 0;
	if ((rc = gather_finish(dp, u)) < 0)
		return rc;
	/* prefetch the next unit while this one computes */
	if (k + 1 < dp->nunits && (rc = gather_start(dp, &dp->u[k + 1])) < 0)
		return rc;
	return 0;
}

static int post_forward(void *ctx, int g)
{
	struct titan_dp *dp = ctx;
	const int k = dp->unit_of[g];
	struct unit *u = &dp->u[k];

	TITAN_ASSERT(k >= 0); /* a group of this pipeline stage */

	if (!dp->fsdp || g != u->g1)
		return 0;
	if (!dp->backward) {
		/* forward only (validation): nothing stays gathered, except
		 * the tied embeddings until the loss */
		if (!(dp->tied && k == 0))
			release_params(dp, u);
		if (dp->tied && k == dp->nunits - 1)
			release_params(dp, &dp->u[0]);
		return 0;
	}
	if (k == dp->nunits - 1 || (dp->tied && k == 0) || !dp->o.reshard_after_forward)
		return 0;
	release_params(dp, u);
	return 0;
}

static int pre_backward(void *ctx, int g)
{
	struct titan_dp *dp = ctx;
	const int k = dp->unit_of[g];
	struct unit *u = &dp->u[k];

	TITAN_ASSERT(k >= 0); /* a group of this pipeline stage */
	int rc;

	if (g != u->g1)
		return 0;
	if (dp->fsdp) {
		if ((rc = gather_finish(dp, u)) < 0 || (rc = ensure_grad(dp, u)) < 0)
			return rc;
		/* the classifier of a tied model adds to the embedding's gradient */
		if (dp->tied && k == dp->nunits - 1 && (rc = ensure_grad(dp, &dp->u[0])) < 0)
			return rc;
		if (k > 0 && (rc = gather_start(dp, &dp->u[k - 1])) < 0)
			return rc;
	}
	return 0;
}

static int post_backward(void *ctx, int g)
{
	struct titan_dp *dp = ctx;
	const int k = dp->unit_of[g];
	struct unit *u = &dp->u[k];

	TITAN_ASSERT(k >= 0); /* a group of this pipeline stage */
	int rc;

	if (g != u->g0)
		return 0;
	if (dp->fsdp) {
		release_params(dp, u);
		if ((rc = reduce_start(dp, u)) < 0)
			return rc;
	} else if (dp->last) {
		if ((rc = reduce_start(dp, u)) < 0)
			return rc;
	} else {
		return 0;
	}
	/* the previous unit's reduction has had this unit's backward */
	return reduce_advance(dp, 1);
}

/* The split backward's weight pass (titan/train.h): the unit's unsharded
 * gradient buffer again (post_backward of another microbatch's weight
 * pass may have reduce-scattered and freed it since the input pass); the
 * parameters are not needed. */
static int pre_weight(void *ctx, int g)
{
	struct titan_dp *dp = ctx;
	const int k = dp->unit_of[g];
	struct unit *u = &dp->u[k];

	TITAN_ASSERT(k >= 0); /* a group of this pipeline stage */
	if (g != u->g1 || !dp->fsdp)
		return 0;
	return ensure_grad(dp, u);
}

const struct titan_llama_group_hooks *titan_dp_hooks(struct titan_dp *dp,
						      struct titan_llama_group_hooks *h)
{
	h->pre_forward = pre_forward;
	h->post_forward = post_forward;
	h->pre_backward = pre_backward;
	h->post_backward = post_backward;
	h->pre_weight = pre_weight;
	h->ctx = dp;
	return h;
}

int titan_dp_begin_microbatch(struct titan_dp *dp, bool backward, bool last)
{
	dp->backward = backward;
	dp->last = last;
	/* one reduction per unit in flight: the previous microbatch's finish
	 * first (they have had a whole forward to complete) */
	return reduce_all(dp);
}

int titan_dp_finish_grads(struct titan_dp *dp)
{
	int rc = reduce_all(dp);

	for (int k = 0; k < dp->nunits && rc == 0; k++) {
		TITAN_ASSERT(!dp->u[k].grad && !dp->u[k].gathering);
		release_params(dp, &dp->u[k]);
	}
	return rc;
}

int titan_dp_grad_norm(struct titan_dp *dp, double max_norm, double *norm, float *coef)
{
	int rc;

	if ((rc = titan_llama_grad_sumsq(dp->m, dp->sumsq)) < 0)
		return rc;
	if (dp->fsdp && (rc = titan_comm_all_reduce(dp->o.shard, TITAN_IN_PLACE, dp->sumsq,
						     (size_t)dp->t->n, TITAN_DTYPE_F64,
						     TITAN_REDOP_SUM, "grad norm")) < 0)
		return rc;
	titan_grad_norm_from_sumsq(dp->sumsq, dp->t->n, max_norm, norm, coef);
	return 0;
}

int titan_dp_units(const struct titan_dp *dp)
{
	return dp->nunits;
}

void titan_dp_free(struct titan_dp *dp)
{
	if (!dp)
		return;
	if (dp->u) {
		for (int k = 0; k < dp->nunits; k++) {
			struct unit *u = &dp->u[k];

			/* an error left collectives in flight: the process ends
			 * (buffers stay with MPI); otherwise nothing is left */
			if (u->pt[0].greq || u->pt[1].greq || u->pt[0].rreq || u->pt[1].rreq ||
			    u->areq)
				continue;
			unmem(dp, &u->full);
			unmem(dp, &u->grad);
			for (int j = 0; j < NPARTS; j++) {
				unmem(dp, &u->pt[j].gsend);
				unmem(dp, &u->pt[j].grecv);
				unmem(dp, &u->pt[j].rsend);
				unmem(dp, &u->pt[j].rrecv);
			}
		}
	}
	free(dp->u);
	free(dp->unit_of);
	free(dp->pending);
	free(dp->sumsq);
	free(dp);
}
