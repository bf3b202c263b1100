/*
 * engine.c — titan_parallelize (engine.h): the model of this rank's layout
 * with its pipeline runner and data-parallel engine, behind operations
 * that are the same on every layout.  Each layout choice is made here
 * once, as the function an operation calls: a microbatch goes through the
 * pipeline schedule (titan_pp_step) or the model step (titan_llama_step);
 * DP is told about each microbatch and waited for after the last, or
 * nothing is; the norm is summed over the shards (titan_dp_grad_norm) or
 * the model's (titan_llama_grad_norm, over its TP and PP groups).
 */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "titan/core.h"

struct titan_engine {
	struct titan_llama *model;
	struct titan_dp *dp;           /* NULL: one DP rank */
	struct titan_pp *pp;           /* NULL: no pipeline */
	int64_t pp_tokens;             /* tokens per pipeline microbatch */
	/* the step */
	int64_t nmb, mb;               /* microbatches of the step, the next one */
	float grad_scale;
	/* the layout's choices */
	int (*dp_begin)(struct titan_engine *e, bool backward, bool last);
	int (*run)(struct titan_engine *e, const int32_t *inputs, const int32_t *labels,
		   float grad_scale, bool backward, bool last, double *loss_sum, int64_t *n_valid);
	int (*dp_finish)(struct titan_engine *e);
	int (*norm)(struct titan_engine *e, double max_norm, double *norm, float *coef);
};

/* ------------------------------------------------------------ the choices */

static int run_model(struct titan_engine *e, const int32_t *inputs, const int32_t *labels,
		     float grad_scale, bool backward, bool last, double *loss_sum,
		     int64_t *n_valid)
{
	(void)last;
	return titan_llama_step(e->model, inputs, labels, grad_scale, backward, loss_sum, n_valid);
}

/* the pipeline splits the local batch into its own microbatches */
static int run_pipeline(struct titan_engine *e, const int32_t *inputs, const int32_t *labels,
			float grad_scale, bool backward, bool last, double *loss_sum,
			int64_t *n_valid)
{
	return titan_pp_step(e->pp, inputs, labels, e->pp_tokens, grad_scale, backward, last,
			     loss_sum, n_valid);
}

static int dp_none(struct titan_engine *e, bool backward, bool last)
{
	(void)e, (void)backward, (void)last;
	return 0;
}

static int dp_begin(struct titan_engine *e, bool backward, bool last)
{
	return titan_dp_begin_microbatch(e->dp, backward, last);
}

static int finish_none(struct titan_engine *e)
{
	(void)e;
	return 0;
}

static int finish_dp(struct titan_engine *e)
{
	return titan_dp_finish_grads(e->dp);
}

static int norm_model(struct titan_engine *e, double max_norm, double *norm, float *coef)
{
	return titan_llama_grad_norm(e->model, max_norm, norm, coef);
}

static int norm_dp(struct titan_engine *e, double max_norm, double *norm, float *coef)
{
	return titan_dp_grad_norm(e->dp, max_norm, norm, coef);
}

/* ------------------------------------------------------------ building */

static struct titan_comm *comm(const struct titan_parallelize_opts *o, enum titan_mesh_dim d)
{
	return o->comm && o->comm[d] ? o->comm[d] : o->dist->comm[d];
}

/* Pipeline stages: this rank's stages of the schedule, in order (loop
 * style: the rank's v-th stage is global stage rank + v·pp; ZBV's V style:
 * stages rank and 2·pp − 1 − rank). */
static int pp_stages(const struct titan_parallelize_opts *o, enum titan_pp_schedule sched)
{
	const struct titan_config *c = o->cfg;
	struct titan_llama_opts *mo = o->mo;
	const int pp = (int)o->dist->dims.degree[TITAN_DIM_PP];
	const int rank = (int)o->dist->coord[TITAN_DIM_PP];
	int nv, rc;

	if ((rc = nv = titan_pp_stages_per_rank(c, sched, o->dims->n_layers, pp)) < 0)
		return rc;
	mo->pp_split_backward = sched == TITAN_PP_INTERLEAVED_ZB || sched == TITAN_PP_ZBV;
	for (int v = 0; v < nv; v++) {
		const int gs = titan_pp_stage_of(sched, pp, rank, v);
		struct titan_pp_stage st;

		if ((rc = titan_pp_split(c, o->dims->n_layers, pp * nv, gs, &st)) < 0)
			return rc;
		if (v == 0) {
			mo->stage_l0 = st.l0;
			mo->stage_l1 = st.l1;
			mo->stage_first = st.first;
		} else {
			mo->more_l0[v - 1] = st.l0;
			mo->more_l1[v - 1] = st.l1;
		}
		mo->stage_last = st.last;
		titan_log_info("Pipeline stage %d of %d (rank %d): layers %d-%d%s%s", gs, pp * nv,
			       rank, st.l0, st.l1 - 1, st.first ? ", embedding" : "",
			       st.last ? ", norm + output" : "");
	}
	mo->nmore = nv - 1;
	mo->batch = c->parallelism.pipeline_parallel_microbatch_size;
	mo->pp_microbatches = c->training.local_batch_size /
			      c->parallelism.pipeline_parallel_microbatch_size;
	mo->pp = comm(o, TITAN_DIM_PP);
	return 0;
}

/* DDP, FSDP or HSDP over the model's groups (FSDP's mesh includes cp). */
static int build_dp(const struct titan_parallelize_opts *o, int64_t fsdp, struct titan_engine *e)
{
	const struct titan_config *c = o->cfg;
	struct titan_dp_opts dpo = {
		.shard = fsdp > 1 ? comm(o, TITAN_DIM_FSDP) : NULL,
		.replicate = comm(o, TITAN_DIM_DP_REPLICATE),
		.eshard = fsdp > 1 ? o->dist->efsdp : NULL,
		.reshard_after_forward = c->parallelism.fsdp_reshard_after_forward_e !=
					 TITAN_RESHARD_NEVER,
		.bucket_bytes = (int64_t)(c->comm.bucket_size_mb * 1048576.0),
		.be = o->be,
	};
	struct titan_llama_group_hooks gh;
	int rc;

	if (fsdp <= 1 && c->comm.bucket_size_mb < 0)
		dpo.bucket_bytes = 25 << 20; /* torch DDP's bucket_cap_mb */
	else if (c->comm.bucket_size_mb < 0)
		dpo.bucket_bytes = 0;         /* FSDP: one unit per block */
	if ((rc = titan_dp_new(e->model, &dpo, &e->dp)) < 0)
		return rc;
	titan_llama_set_group_hooks(e->model, titan_dp_hooks(e->dp, &gh));
	if (e->pp)
		titan_pp_set_dp(e->pp, e->dp);
	e->dp_begin = dp_begin;
	e->dp_finish = finish_dp;
	e->norm = norm_dp;
	return 0;
}

int titan_parallelize(const struct titan_parallelize_opts *o, struct titan_engine **out)
{
	const struct titan_config *c = o->cfg;
	const struct titan_parallel_dims *pd = &o->dist->dims;
	const int64_t fsdp = titan_parallel_dims_degree(pd, TITAN_DIM_FSDP);
	const int64_t dp = titan_parallel_dims_degree(pd, TITAN_DIM_DP);
	struct titan_llama_opts *mo = o->mo;
	struct titan_engine *e = calloc(1, sizeof(*e));
	enum titan_pp_schedule sched = TITAN_PP_GPIPE;
	int rc;

	*out = e;
	if (!e)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	e->dp_begin = dp_none;
	e->run = run_model;
	e->dp_finish = finish_none;
	e->norm = norm_model;
	if (fsdp > 1) {
		mo->shard_rank = titan_comm_rank(comm(o, TITAN_DIM_FSDP));
		mo->shard_degree = (int)fsdp;
	}
	mo->tp = comm(o, TITAN_DIM_TP);
	mo->cp = comm(o, TITAN_DIM_CP);
	mo->ep = o->dist->ep;
	if (o->dist->efsdp && fsdp > 1) { /* the experts' FSDP shard */
		mo->ep_shard_rank = titan_comm_rank(o->dist->efsdp);
		mo->ep_shard_degree = titan_comm_size(o->dist->efsdp);
	}
	mo->loss_parallel = !c->parallelism.disable_loss_parallel;
	if (pd->degree[TITAN_DIM_PP] > 1 &&
	    ((rc = titan_pp_schedule_from(c->parallelism.pipeline_parallel_schedule_e, &sched)) < 0 ||
	     (rc = pp_stages(o, sched)) < 0))
		return rc;
	if ((rc = titan_llama_new(o->dims, mo, o->be, o->alloc, &e->model)) < 0)
		return rc;
	if (o->hooks)
		titan_llama_set_hooks(e->model, o->hooks);
	if (mo->stage_l1 > 0) {
		if ((rc = titan_pp_new(e->model, comm(o, TITAN_DIM_PP), sched,
				       (int)mo->pp_microbatches, o->be, &e->pp)) < 0)
			return rc;
		e->pp_tokens = o->tokens / mo->pp_microbatches;
		e->run = run_pipeline;
	}
	/* each rank initialises its own rows: the same weights on any layout */
	if (!o->no_init && (rc = titan_llama_init_weights(e->model, (uint64_t)c->training.seed)) < 0)
		return rc;
	if ((dp > 1 || fsdp > 1) && (rc = build_dp(o, fsdp, e)) < 0)
		return rc;
	return 0;
}

void titan_engine_free(struct titan_engine *e)
{
	if (!e)
		return;
	titan_dp_free(e->dp);
	titan_pp_free(e->pp);
	titan_llama_free(e->model);
	free(e);
}

struct titan_llama *titan_engine_model(const struct titan_engine *e)
{
	return e->model;
}

struct titan_dp *titan_engine_dp(const struct titan_engine *e)
{
	return e->dp;
}

int titan_engine_dp_units(const struct titan_engine *e)
{
	return e->dp ? titan_dp_units(e->dp) : 0;
}

/* ------------------------------------------------------------ the step */

int titan_engine_zero_grads(struct titan_engine *e)
{
	return titan_llama_zero_grads(e->model);
}

void titan_engine_begin_step(struct titan_engine *e, int64_t nmb, int64_t valid_tokens)
{
	e->nmb = nmb;
	e->mb = 0;
	e->grad_scale = valid_tokens ? 1.0f / (float)valid_tokens : 0.0f;
}

int titan_engine_train_microbatch(struct titan_engine *e, const int32_t *inputs,
				  const int32_t *labels, double *loss_sum, int64_t *n_valid)
{
	const bool last = ++e->mb == e->nmb;
	int rc;

	if ((rc = e->dp_begin(e, true, last)) < 0)
		return rc;
	return e->run(e, inputs, labels, e->grad_scale, true, last, loss_sum, n_valid);
}

int titan_engine_eval_microbatch(struct titan_engine *e, const int32_t *inputs,
				 const int32_t *labels, double *loss_sum, int64_t *n_valid)
{
	int rc;

	if ((rc = e->dp_begin(e, false, true)) < 0)
		return rc;
	return e->run(e, inputs, labels, 0.0f, false, true, loss_sum, n_valid);
}

int titan_engine_finish_grads(struct titan_engine *e)
{
	int rc;

	if ((rc = e->dp_finish(e)) < 0)
		return rc;
	/* the replicated parameters' gradients over the TP group (0 without) */
	return titan_llama_tp_reduce_grads(e->model);
}

int titan_engine_grad_norm(struct titan_engine *e, double max_norm, double *norm, float *coef)
{
	return e->norm(e, max_norm, norm, coef);
}

int titan_engine_optimizer_step(struct titan_engine *e, const struct titan_adamw_hparams *hp,
				int64_t opt_step, float coef)
{
	return titan_llama_adamw(e->model, hp, opt_step, coef);
}
