/*
 * pp.c — pipeline parallelism: the schedules of torch.distributed.pipelining
 * (over torchtitan's stage split, titan_pp_split in lib/model/layout.c) — GPipe and 1F1B
 * (one stage per rank), Interleaved1F1B and InterleavedZeroBubble (V
 * stages per rank, loop style: global stage s on rank s mod pp; the
 * zero-bubble schedule splits each backward into an input pass, B, and a
 * weight pass, W, that fills the bubbles) and ZBVZeroBubble (2 stages per
 * rank, V style: rank r holds stages r and 2·pp − 1 − r, so the last rank
 * hands its first stage's output to its second without a message) — run
 * over a titan_llama holding the
 * rank's stages (titan/train.h), with activations and gradients moving by
 * non-blocking MPI point-to-point on the pipeline communicator.
 *
 * A step runs the local batch as M microbatches.  Every receive of the
 * step is posted at its start (each microbatch has its own input buffer on
 * the model and its own gradient buffer here), so a stage never waits for
 * a peer to reach a matching call and the transfers overlap the compute of
 * the microbatches in between; sends are non-blocking from per-microbatch
 * buffers and completed at the end of the step.  The gradient buffers are
 * the model backend's, copied with its buffer ops.  Tags: 2(s·M + k) for
 * microbatch k's activations from global stage s to s + 1, one more for
 * its gradient from s + 1 back to s.
 */
#include "titan/train.h"

#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/dist.h"

struct titan_pp {
	struct titan_llama *m;
	struct titan_dp *dp;
	struct titan_comm *c;
	struct titan_backend *be;   /* the model's: gin/gout are its buffers */
	int rank, pp, nv, nmb;      /* rank, ranks, stages per rank, microbatches */
	enum titan_pp_schedule sched;
	int64_t nb;                 /* floats at a stage boundary */
	float **gin, **gout;        /* per (v, k): gradient received / sent */
	struct titan_comm_req **req; /* 4 per (v, k): act in, act out, grad in, grad out */
};

int titan_pp_stage_of(enum titan_pp_schedule sched, int pp, int rank, int v)
{
	if (sched == TITAN_PP_ZBV)
		return v == 0 ? rank : 2 * pp - 1 - rank;
	return rank + v * pp;
}

/* The rank holding global stage s. */
static int rank_of(const struct titan_pp *p, int s)
{
	if (p->sched == TITAN_PP_ZBV)
		return s < p->pp ? s : 2 * p->pp - 1 - s;
	return s % p->pp;
}

/* This rank's index of global stage s, or -1. */
static int local_of(const struct titan_pp *p, int s)
{
	for (int v = 0; v < p->nv; v++)
		if (titan_pp_stage_of(p->sched, p->pp, p->rank, v) == s)
			return v;
	return -1;
}

int titan_pp_check_microbatches(enum titan_pp_schedule sched, int pp, int nmb)
{
	if (sched == TITAN_PP_INTERLEAVED_1F1B && nmb % pp)
		return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_schedule "
				   "Interleaved1F1B: the %d microbatches (local_batch_size / "
				   "pipeline_parallel_microbatch_size) must be a multiple of "
				   "pipeline_parallel_degree %d", nmb, pp);
	if (sched == TITAN_PP_INTERLEAVED_ZB && nmb % (nmb / pp > 1 ? nmb / pp : 1))
		return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_schedule "
				   "InterleavedZeroBubble: the %d microbatches (local_batch_size / "
				   "pipeline_parallel_microbatch_size) must be a multiple of the %d "
				   "rounds (microbatches / pipeline_parallel_degree %d, as torch's "
				   "ScheduleInterleavedZeroBubble)", nmb, nmb / pp, pp);
	return 0;
}

int titan_pp_new(struct titan_llama *m, struct titan_comm *c, enum titan_pp_schedule sched,
		 int nmb, struct titan_backend *be, struct titan_pp **out)
{
	struct titan_pp *p = calloc(1, sizeof(*p));

	*out = NULL;
	if (!p)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	p->m = m;
	p->c = c;
	p->be = be;
	p->rank = titan_comm_rank(c);
	p->pp = titan_comm_size(c);
	p->nv = titan_llama_pp_nstages(m);
	p->nmb = nmb;
	p->sched = sched;
	p->nb = titan_llama_pp_boundary_floats(m);
	TITAN_ASSERT(sched != TITAN_PP_ZBV || p->nv == 2);
	{
		int rc = titan_pp_check_microbatches(sched, p->pp, nmb);

		if (rc < 0) {
			free(p);
			return rc;
		}
	}
	p->gin = calloc((size_t)(nmb * p->nv), sizeof(*p->gin));
	p->gout = calloc((size_t)(nmb * p->nv), sizeof(*p->gout));
	p->req = calloc(4 * (size_t)(nmb * p->nv), sizeof(*p->req));
	if (!p->gin || !p->gout || !p->req)
		goto nomem;
	for (int k = 0; k < nmb * p->nv; k++)
		if (!(p->gin[k] = be->ops->buf_alloc(be, (size_t)p->nb * sizeof(float),
						     TITAN_MEM_COMM)) ||
		    !(p->gout[k] = be->ops->buf_alloc(be, (size_t)p->nb * sizeof(float),
						      TITAN_MEM_COMM)))
			goto nomem;
	*out = p;
	return 0;
nomem:
	titan_pp_free(p);
	return titan_error(TITAN_E_NOMEM, "out of memory for the pipeline buffers");
}

void titan_pp_set_dp(struct titan_pp *p, struct titan_dp *dp)
{
	p->dp = dp;
}

void titan_pp_free(struct titan_pp *p)
{
	if (!p)
		return;
	for (int k = 0; k < p->nmb * p->nv; k++) {
		if (p->gin)
			p->be->ops->buf_free(p->be, p->gin[k]);
		if (p->gout)
			p->be->ops->buf_free(p->be, p->gout[k]);
	}
	free(p->gin);
	free(p->gout);
	free(p->req);
	free(p);
}

/* torch's ScheduleZBVZeroBubble (ZB-V, arXiv:2401.10241 section 6) for
 * rank r of P, chunk 0 = stage r, chunk 1 = stage 2P − 1 − r: the order is
 * built for max(2P − 1, M) microbatches and the actions of microbatches
 * >= M dropped, as torch does. */
static int zbv_actions(int P, int r, int M, struct titan_pp_action *a)
{
	const int nm = 2 * P - 1 > M ? 2 * P - 1 : M;
	int n = 0, f0 = 0, f1 = 0, b0 = 0, b1 = 0, w0, w1;

#define ZBV(o, c, k) do { if ((k) < M) a[n++] = (struct titan_pp_action){o, c, k}; } while (0)
	for (int i = 0; i < 2 * (P - r) - 1; i++, f0++)
		ZBV(TITAN_PP_F, 0, f0);
	for (int i = 0; i < r; i++, f0++, f1++) {
		ZBV(TITAN_PP_F, 1, f1);
		ZBV(TITAN_PP_F, 0, f0);
	}
	for (int i = 0; i < P - r; i++, f1++, b1++) {
		ZBV(TITAN_PP_F, 1, f1);
		ZBV(TITAN_PP_B, 1, b1);
		ZBV(TITAN_PP_W, 1, b1);
	}
	while (f1 < f0 || f0 < nm) {
		if (f0 < nm) {
			ZBV(TITAN_PP_F, 0, f0);
			f0++;
		}
		ZBV(TITAN_PP_B, 0, b0);
		ZBV(TITAN_PP_W, 0, b0);
		b0++;
		ZBV(TITAN_PP_F, 1, f1);
		f1++;
		ZBV(TITAN_PP_B, 1, b1);
		ZBV(TITAN_PP_W, 1, b1);
		b1++;
	}
	w0 = b0;
	w1 = b1;
	for (int i = 0; i < r; i++, b0++, b1++) {
		ZBV(TITAN_PP_B, 0, b0);
		ZBV(TITAN_PP_B, 1, b1);
	}
	for (int i = 0; i < P - r; i++, b0++, w0++) {
		ZBV(TITAN_PP_B, 0, b0);
		ZBV(TITAN_PP_W, 0, w0);
	}
	for (; w1 < b1; w1++)
		ZBV(TITAN_PP_W, 1, w1);
	for (; w0 < b0; w0++)
		ZBV(TITAN_PP_W, 0, w0);
#undef ZBV
	TITAN_ASSERT(f0 == b0 && b0 == w0 && f1 == b1 && b1 == w1 && n == 6 * M);
	return n;
}

/* The schedule's actions for one rank, in order (titan/train.h). */
int titan_pp_schedule_actions(enum titan_pp_schedule sched, int P, int rank, int V, int M,
			      bool backward, struct titan_pp_action *a)
{
	int n = 0;

	TITAN_ASSERT(V >= 1 && V <= TITAN_PP_MAX_STAGES_PER_RANK && rank >= 0 && rank < P && M >= 1);
	if (!backward || sched == TITAN_PP_GPIPE) {
		for (int v = 0; v < V; v++)
			for (int k = 0; k < M; k++)
				a[n++] = (struct titan_pp_action){TITAN_PP_F, v, k};
		for (int v = V - 1; backward && v >= 0; v--)
			for (int k = 0; k < M; k++)
				a[n++] = (struct titan_pp_action){TITAN_PP_B, v, k};
		return n;
	}
	if (sched == TITAN_PP_ZBV) {
		TITAN_ASSERT(V == 2);
		return zbv_actions(P, rank, M, a);
	}
	if (sched == TITAN_PP_1F1B) {
		/* warm-up forwards (more on earlier stages), then one forward
		 * and one backward in turn, then the remaining backwards */
		int warm = P - rank - 1, f = 0, b = 0;

		warm = warm < M ? warm : M;
		while (f < warm)
			a[n++] = (struct titan_pp_action){TITAN_PP_F, 0, f++};
		while (f < M) {
			a[n++] = (struct titan_pp_action){TITAN_PP_F, 0, f++};
			a[n++] = (struct titan_pp_action){TITAN_PP_B, 0, b++};
		}
		while (b < M)
			a[n++] = (struct titan_pp_action){TITAN_PP_B, 0, b++};
		return n;
	}
	const int ops = V * M;
	int fk[TITAN_PP_MAX_STAGES_PER_RANK] = {0}, bk[TITAN_PP_MAX_STAGES_PER_RANK] = {0}, wk[TITAN_PP_MAX_STAGES_PER_RANK] = {0};

	if (sched == TITAN_PP_INTERLEAVED_1F1B) {
		/* torch.distributed.pipelining's ScheduleInterleaved1F1B: the
		 * rank's stages take microbatches in rounds of pp; warm-up
		 * (V - 1)·pp + 2·(pp - 1 - rank) forwards, then a forward and a
		 * backward in turn, then the backwards */
		int warm = (V - 1) * P + 2 * (P - 1 - rank);

		warm = warm < ops ? warm : ops;
		for (int op = 0; op < ops + warm; op++) {
			if (op < ops) {
				const int v = (op / P) % V;

				a[n++] = (struct titan_pp_action){TITAN_PP_F, v, fk[v]++};
			}
			if (op >= warm) {
				const int v = V - 1 - ((op - warm) / P) % V;

				a[n++] = (struct titan_pp_action){TITAN_PP_B, v, bk[v]++};
			}
		}
		return n;
	}
	/* ScheduleInterleavedZeroBubble (torch's _get_1f1b_rank_ops with
	 * enable_zero_bubble, the ZB1P schedule of arXiv:2401.10241): rounds
	 * of mpr = M / max(1, M / pp) microbatches; warm-up (V - 1)·mpr +
	 * (pp - 1 - rank) forwards; then each step a forward and an input
	 * backward (B), and from the rank-th step on the weight backward (W)
	 * of the oldest B still without one; then the remaining Bs, each
	 * followed by a W, and the remaining Ws.  (torch's bubble padding only
	 * aligns time steps: the order of a rank's actions is this.) */
	const int rounds = M / P > 1 ? M / P : 1, mpr = M / rounds;
	int warm = (V - 1) * mpr + (P - 1 - rank), nb = 0, nw = 0;
	int *bv = malloc((size_t)ops * sizeof(*bv)); /* stage of each B, in order */

	if (!bv)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	warm = warm < ops ? warm : ops;
	for (int op = 0; op < ops + warm; op++) {
		if (op < ops) {
			const int v = (op / mpr) % V;

			a[n++] = (struct titan_pp_action){TITAN_PP_F, v, fk[v]++};
		}
		if (op >= warm) {
			const int v = V - 1 - ((op - warm) / mpr) % V;

			a[n++] = (struct titan_pp_action){TITAN_PP_B, v, bk[v]++};
			bv[nb++] = v;
			if (op - warm >= rank) {
				const int w = bv[nw++];

				a[n++] = (struct titan_pp_action){TITAN_PP_W, w, wk[w]++};
			}
		}
	}
	while (nw < nb) {
		const int w = bv[nw++];

		a[n++] = (struct titan_pp_action){TITAN_PP_W, w, wk[w]++};
	}
	free(bv);
	return n;
}

static int wait_all(struct titan_pp *p)
{
	int rc = 0;

	for (int i = 0; i < 4 * p->nmb * p->nv; i++) {
		int r = titan_comm_wait(p->req[i]);

		p->req[i] = NULL;
		rc = rc < 0 ? rc : r;
	}
	return rc;
}

int titan_pp_step(struct titan_pp *p, const int32_t *inputs, const int32_t *labels,
		  int64_t mb_tokens, float grad_scale, bool backward, bool last_accum,
		  double *loss_sum, int64_t *n_valid)
{
	struct titan_llama *m = p->m;
	const int M = p->nmb, V = p->nv, P = p->pp, S = P * V;
	const bool split = p->sched == TITAN_PP_INTERLEAVED_ZB || p->sched == TITAN_PP_ZBV;
	const size_t bytes = (size_t)p->nb * sizeof(float);
	struct titan_pp_action *act = malloc(3 * (size_t)(V * M) * sizeof(*act));
	double red[2] = {0, 0};
	int n, rc = 0;

	if (!act)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if ((n = titan_pp_schedule_actions(p->sched, P, p->rank, V, M, backward, act)) < 0) {
		free(act);
		return n;
	}
	/* the last gradient contribution of each of the rank's stages (its
	 * last backward, or with the split its last W): DDP reduces a
	 * stage's gradients after it */
	int lastb[TITAN_PP_MAX_STAGES_PER_RANK] = {0};
	for (int i = 0; i < n; i++)
		if (act[i].op == (split ? TITAN_PP_W : TITAN_PP_B))
			lastb[act[i].stage] = i;
	/* every receive of the step, posted now */
	/* (a neighbour stage on this rank, ZBV's V bottom, needs none: its
	 * activations are the same buffer, its gradient is copied) */
	for (int v = 0; v < V && rc == 0; v++) {
		const int s = titan_pp_stage_of(p->sched, P, p->rank, v);

		for (int k = 0; k < M && rc == 0; k++) {
			struct titan_comm_req **r = &p->req[4 * (v * M + k)];

			if (s > 0 && rank_of(p, s - 1) != p->rank)
				rc = titan_comm_irecv(p->c, titan_llama_pp_input(m, v, k), (size_t)p->nb,
						      TITAN_DTYPE_F32, rank_of(p, s - 1),
						      2 * ((s - 1) * M + k), "pp activations", &r[0]);
			if (rc == 0 && backward && s < S - 1 && rank_of(p, s + 1) != p->rank)
				rc = titan_comm_irecv(p->c, p->gin[v * M + k], (size_t)p->nb,
						      TITAN_DTYPE_F32, rank_of(p, s + 1), 2 * (s * M + k) + 1,
						      "pp gradients", &r[2]);
		}
	}
	for (int i = 0; i < n && rc == 0; i++) {
		const int v = act[i].stage, k = act[i].mb;
		const int s = titan_pp_stage_of(p->sched, P, p->rank, v);
		struct titan_comm_req **r = &p->req[4 * (v * M + k)];
		float *g = titan_llama_pp_grad(m);

		/* data parallelism: the stage's last contribution reduces (DDP) */
		if (p->dp && (rc = titan_dp_begin_microbatch(p->dp, backward,
							     last_accum && act[i].op != TITAN_PP_F &&
							     i == lastb[v])) < 0)
			break;
		if (act[i].op == TITAN_PP_F) {
			double ls;
			int64_t nv;

			rc = titan_comm_wait(r[0]);
			r[0] = NULL;
			if (rc == 0)
				rc = titan_llama_pp_forward(m, v, k, inputs + k * mb_tokens,
							    labels + k * mb_tokens, grad_scale,
							    backward, &ls, &nv);
			if (rc == 0 && s == S - 1) {
				red[0] += ls;
				red[1] += (double)nv;
			}
			if (rc == 0 && s < S - 1 && rank_of(p, s + 1) != p->rank)
				rc = titan_comm_isend(p->c, titan_llama_pp_output(m, v, k),
						      (size_t)p->nb, TITAN_DTYPE_F32, rank_of(p, s + 1),
						      2 * (s * M + k), "pp activations", &r[1]);
			else if (rc == 0 && s < S - 1) /* the next stage is ours: shared buffer */
				TITAN_ASSERT(titan_llama_pp_output(m, v, k) ==
					     titan_llama_pp_input(m, local_of(p, s + 1), k));
		} else if (act[i].op == TITAN_PP_B) {
			rc = titan_comm_wait(r[2]);
			r[2] = NULL;
			/* the split's B on global stage 0 computes nothing (torch's
			 * stage 0): its W is the whole backward, from gin */
			if (rc < 0 || (split && s == 0))
				continue;
			if (s < S - 1)
				rc = p->be->ops->buf_copy(p->be, g, p->gin[v * M + k], bytes);
			if (rc == 0)
				rc = split ? titan_llama_pp_backward_input(m, v, k)
					   : titan_llama_pp_backward(m, v, k);
			if (rc == 0 && s > 0 && rank_of(p, s - 1) == p->rank) {
				/* the previous stage is ours: its received gradient */
				rc = p->be->ops->buf_copy(p->be, p->gin[local_of(p, s - 1) * M + k], g,
							  bytes);
			} else if (rc == 0 && s > 0) {
				rc = p->be->ops->buf_copy(p->be, p->gout[v * M + k], g, bytes);
				if (rc == 0)
					rc = titan_comm_isend(p->c, p->gout[v * M + k], (size_t)p->nb,
							      TITAN_DTYPE_F32, rank_of(p, s - 1),
							      2 * ((s - 1) * M + k) + 1, "pp gradients",
							      &r[3]);
			}
		} else {
			if (s == 0 && s < S - 1)
				rc = p->be->ops->buf_copy(p->be, g, p->gin[v * M + k], bytes);
			if (rc == 0)
				rc = titan_llama_pp_backward_weight(m, v, k);
		}
	}
	free(act);
	if (rc < 0)
		return rc; /* requests left in flight: the process ends */
	if ((rc = wait_all(p)) < 0)
		return rc;
	/* the loss is the last stage's: every stage reports it */
	if ((rc = titan_comm_all_reduce(p->c, TITAN_IN_PLACE, red, 2, TITAN_DTYPE_F64,
					TITAN_REDOP_SUM, "pp loss")) < 0)
		return rc;
	*loss_sum = red[0];
	*n_valid = (int64_t)red[1];
	return 0;
}

int titan_pp_stages_per_rank(const struct titan_config *c, enum titan_pp_schedule sched,
			     int64_t n_layers, int pp)
{
	const int64_t per = c->parallelism.pipeline_parallel_layers_per_stage;
	int64_t stages;

	if (sched != TITAN_PP_INTERLEAVED_1F1B && sched != TITAN_PP_INTERLEAVED_ZB &&
	    sched != TITAN_PP_ZBV)
		return 1;
	if (sched == TITAN_PP_ZBV) { /* torch: exactly 2 stages per rank */
		stages = per > 0 ? (n_layers + 2 + per - 1) / per : 2 * pp;
		if (stages != 2 * pp)
			return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_schedule "
					   "ZBVZeroBubble runs exactly 2 stages per rank, but "
					   "pipeline_parallel_layers_per_stage %lld makes %lld stages "
					   "for pipeline_parallel_degree %d", (long long)per,
					   (long long)stages, pp);
		return 2;
	}
	if (per <= 0)
		return 2;
	stages = (n_layers + 2 + per - 1) / per;
	if (stages % pp || stages / pp > TITAN_PP_MAX_STAGES_PER_RANK)
		return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_layers_per_stage "
				   "%lld: %lld stages, not a multiple of pipeline_parallel_degree %d "
				   "(at most %d per rank)", (long long)per, (long long)stages, pp,
				   TITAN_PP_MAX_STAGES_PER_RANK);
	return (int)(stages / pp);
}
