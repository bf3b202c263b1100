/*
 * pp.c — pipeline parallelism: torchtitan's stage split
 * (generate_llm_fqn_per_model_part, or explicit split points / layers per
 * stage) and the single-stage schedules of torch.distributed.pipelining,
 * GPipe and 1F1B, run over a titan_llama stage (titan/train.h) with
 * activations and gradients moving by non-blocking MPI point-to-point on
 * the pipeline communicator.
 *
 * A step runs the local batch as M microbatches.  Every receive of the
 * step is posted at its start (each microbatch has its own input buffer on
 * the model and its own gradient buffer here), so a stage never waits for
 * a peer to reach a matching call and the transfers overlap the compute of
 * the microbatches in between; sends are non-blocking from per-microbatch
 * buffers and completed at the end of the step.  Tags: 2k for microbatch
 * k's activations, 2k + 1 for its gradient.
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
	int stage, nstages, nmb;
	enum titan_pp_schedule sched;
	int64_t nb;                 /* floats at a stage boundary */
	float **gin, **gout;        /* per microbatch: gradient received / sent */
	struct titan_comm_req **req; /* 4 per microbatch: act in, act out, grad in, grad out */
};

static const char *const sched_names[] = {"GPipe", "1F1B"};

int titan_pp_schedule_parse(const char *name, enum titan_pp_schedule *out)
{
	for (int i = 0; i < (int)(sizeof(sched_names) / sizeof(*sched_names)); i++)
		if (!strcmp(name, sched_names[i])) {
			*out = (enum titan_pp_schedule)i;
			return 0;
		}
	return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_schedule: '%s' is not "
			   "implemented yet (GPipe and 1F1B are; Interleaved1F1B, LoopedBFS and the "
			   "zero-bubble schedules are not)", name);
}

/* Blocks of each stage from split points "layers.N" (each starts a stage). */
static int split_points(const struct titan_config *c, int64_t L, int nstages, int *first)
{
	const struct titan_strlist *sp = &c->parallelism.pipeline_parallel_split_points;

	if ((int64_t)sp->n != nstages - 1)
		return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_split_points: %zu "
				   "points make %zu stages, but pipeline_parallel_degree is %d",
				   (size_t)sp->n, (size_t)sp->n + 1, nstages);
	first[0] = 0;
	for (int s = 1; s < nstages; s++) {
		const char *p = sp->items[s - 1];
		int64_t l;

		if (strncmp(p, "layers.", 7) || titan_parse_i64(p + 7, &l) < 0 || l < 1 || l >= L ||
		    l <= first[s - 1])
			return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_split_points: "
					   "'%s' is not layers.N with N increasing in 1 .. %lld", p,
					   (long long)(L - 1));
		first[s] = (int)l;
	}
	first[nstages] = (int)L;
	return 0;
}

int titan_pp_split(const struct titan_config *c, int64_t L, int nstages, int stage,
		   struct titan_pp_stage *out)
{
	int *first = calloc((size_t)nstages + 1, sizeof(*first));
	const int64_t units = L + 2; /* the embedding and norm + output weigh one block each */
	int rc = 0;

	if (!first)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if (c->parallelism.pipeline_parallel_split_points.n > 0) {
		rc = split_points(c, L, nstages, first);
	} else {
		int64_t per = units / nstages, extra = units % nstages, at = 0;

		if (c->parallelism.pipeline_parallel_layers_per_stage > 0) {
			per = c->parallelism.pipeline_parallel_layers_per_stage;
			extra = 0;
			if ((units + per - 1) / per != nstages)
				rc = titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_"
						 "layers_per_stage %lld: %lld blocks + embedding + "
						 "output make %lld stages, but pipeline_parallel_degree "
						 "is %d (one stage per rank with GPipe/1F1B)",
						 (long long)per, (long long)L,
						 (long long)((units + per - 1) / per), nstages);
		} else if (per < 2 && nstages > 1) {
			rc = titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_degree %d: "
					 "%lld blocks cannot give every stage one besides the "
					 "embedding and the output (at most %lld stages)", nstages,
					 (long long)L, (long long)(units / 2));
		}
		/* torchtitan's generate_llm_fqn_per_model_part: `per` units a
		 * stage, the first `extra` stages one more; the embedding takes
		 * one of stage 0's, norm + output one of the last stage's */
		for (int s = 0; rc == 0 && s < nstages; s++) {
			int64_t n = per + (s < extra ? 1 : 0) - (s == 0) - (s == nstages - 1);

			first[s] = (int)at;
			at = at + n < L ? at + n : L;
		}
		first[nstages] = (int)L;
		for (int s = 0; rc == 0 && s < nstages; s++)
			if (first[s + 1] <= first[s] && nstages > 1)
				rc = titan_error(TITAN_E_INVALID, "pipeline stage %d of %d would hold "
						 "no block (n_layers %lld)", s, nstages, (long long)L);
	}
	if (rc == 0) {
		out->l0 = first[stage];
		out->l1 = first[stage + 1];
		out->first = stage == 0;
		out->last = stage == nstages - 1;
	}
	free(first);
	return rc;
}

int titan_pp_new(struct titan_llama *m, struct titan_comm *c, enum titan_pp_schedule sched,
		 int nmb, struct titan_pp **out)
{
	struct titan_pp *p = calloc(1, sizeof(*p));

	*out = NULL;
	if (!p)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	p->m = m;
	p->c = c;
	p->stage = titan_comm_rank(c);
	p->nstages = titan_comm_size(c);
	p->nmb = nmb;
	p->sched = sched;
	p->nb = titan_llama_pp_boundary_floats(m);
	p->gin = calloc((size_t)nmb, sizeof(*p->gin));
	p->gout = calloc((size_t)nmb, sizeof(*p->gout));
	p->req = calloc(4 * (size_t)nmb, sizeof(*p->req));
	if (!p->gin || !p->gout || !p->req)
		goto nomem;
	for (int k = 0; k < nmb; k++)
		if (!(p->gin[k] = malloc((size_t)p->nb * sizeof(float))) ||
		    !(p->gout[k] = malloc((size_t)p->nb * sizeof(float))))
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
	for (int k = 0; k < p->nmb; k++) {
		if (p->gin)
			free(p->gin[k]);
		if (p->gout)
			free(p->gout[k]);
	}
	free(p->gin);
	free(p->gout);
	free(p->req);
	free(p);
}

/* The schedule's actions for this stage: +k+1 forward of microbatch k,
 * -(k+1) its backward; 2·nmb entries (nmb without backward). */
static int actions(const struct titan_pp *p, bool backward, int *a)
{
	const int M = p->nmb;
	int n = 0;

	if (!backward || p->sched == TITAN_PP_GPIPE) {
		for (int k = 0; k < M; k++)
			a[n++] = k + 1;
		for (int k = 0; backward && k < M; k++)
			a[n++] = -(k + 1);
		return n;
	}
	/* 1F1B: warm-up forwards (more on earlier stages), then one forward
	 * and one backward in turn, then the remaining backwards */
	int warm = p->nstages - p->stage - 1, f = 0, b = 0;

	warm = warm < M ? warm : M;
	while (f < warm)
		a[n++] = ++f;
	while (f < M) {
		a[n++] = ++f;
		a[n++] = -(++b);
	}
	while (b < M)
		a[n++] = -(++b);
	return n;
}

static int wait_all(struct titan_pp *p)
{
	int rc = 0;

	for (int i = 0; i < 4 * p->nmb; i++) {
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
	const int M = p->nmb, prev = p->stage - 1, next = p->stage + 1;
	const bool first = p->stage == 0, last = p->stage == p->nstages - 1;
	int *act = malloc(2 * (size_t)M * sizeof(*act)), n, rc = 0;
	double red[2] = {0, 0};

	if (!act)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	n = actions(p, backward, act);
	/* every receive of the step, posted now */
	for (int k = 0; k < M && rc == 0; k++) {
		if (!first)
			rc = titan_comm_irecv(p->c, titan_llama_pp_input(m, k), (size_t)p->nb,
					      TITAN_DTYPE_F32, prev, 2 * k, "pp activations",
					      &p->req[4 * k]);
		if (rc == 0 && backward && !last)
			rc = titan_comm_irecv(p->c, p->gin[k], (size_t)p->nb, TITAN_DTYPE_F32, next,
					      2 * k + 1, "pp gradients", &p->req[4 * k + 2]);
	}
	for (int i = 0; i < n && rc == 0; i++) {
		const int k = (act[i] > 0 ? act[i] : -act[i]) - 1;

		/* data parallelism: the step's last backward reduces (DDP) */
		if (p->dp && (rc = titan_dp_begin_microbatch(p->dp, backward,
							     last_accum && act[i] < 0 &&
							     i == n - 1)) < 0)
			break;

		if (act[i] > 0) {
			double ls;
			int64_t nv;

			rc = titan_comm_wait(p->req[4 * k]);
			p->req[4 * k] = NULL;
			if (rc == 0)
				rc = titan_llama_pp_forward(m, k, inputs + k * mb_tokens,
							    labels + k * mb_tokens, grad_scale,
							    backward, &ls, &nv);
			if (rc == 0 && last) {
				red[0] += ls;
				red[1] += (double)nv;
			}
			if (rc == 0 && !last)
				rc = titan_comm_isend(p->c, titan_llama_pp_output(m, k), (size_t)p->nb,
						      TITAN_DTYPE_F32, next, 2 * k, "pp activations",
						      &p->req[4 * k + 1]);
		} else {
			float *g = titan_llama_pp_grad(m);

			rc = titan_comm_wait(p->req[4 * k + 2]);
			p->req[4 * k + 2] = NULL;
			if (rc == 0 && !last)
				memcpy(g, p->gin[k], (size_t)p->nb * sizeof(float));
			if (rc == 0)
				rc = titan_llama_pp_backward(m, k);
			if (rc == 0 && !first) {
				memcpy(p->gout[k], g, (size_t)p->nb * sizeof(float));
				rc = titan_comm_isend(p->c, p->gout[k], (size_t)p->nb, TITAN_DTYPE_F32,
						      prev, 2 * k + 1, "pp gradients",
						      &p->req[4 * k + 3]);
			}
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
