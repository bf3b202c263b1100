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
	struct titan_param_table_opts table; /* the model's (titan_layout_table_opts) */
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

/* The model's groups and what it holds of the layout: its parameter table
 * (FSDP shard, TP slice, experts, stages), pipeline stages and
 * microbatches (logged as torchtitan's stage lines). */
static void place_model(const struct titan_parallelize_opts *o, const struct titan_layout *l,
			struct titan_engine *e)
{
	struct titan_llama_opts *mo = o->mo;

	titan_layout_table_opts(l, &e->table);
	mo->table = &e->table;
	mo->tp = comm(o, TITAN_DIM_TP);
	mo->cp = comm(o, TITAN_DIM_CP);
	mo->ep = o->dist->ep;
	mo->loss_parallel = l->loss_parallel;
	if (l->stages.n == 0)
		return;
	for (int v = 0; v < l->stages.n; v++) {
		const struct titan_pp_stage *st = &l->stages.v[v];

		titan_log_info("Pipeline stage %d of %d (rank %d): layers %d-%d%s%s", st->index,
			       l->nstages, (int)l->coord[TITAN_DIM_PP], st->l0, st->l1 - 1,
			       st->first ? ", embedding" : "", st->last ? ", norm + output" : "");
	}
	mo->stages = l->stages;
	mo->pp_split_backward = l->split_backward;
	mo->batch = l->microbatch;
	mo->pp_microbatches = l->microbatches;
	mo->pp = comm(o, TITAN_DIM_PP);
}

/* DDP, FSDP or HSDP over the model's groups (FSDP's mesh includes cp). */
static int build_dp(const struct titan_parallelize_opts *o, const struct titan_layout *l,
		    struct titan_engine *e)
{
	struct titan_dp_opts dpo = {
		.shard = l->fsdp > 1 ? comm(o, TITAN_DIM_FSDP) : NULL,
		.replicate = comm(o, TITAN_DIM_DP_REPLICATE),
		.eshard = l->fsdp > 1 ? o->dist->efsdp : NULL,
		.reshard_after_forward = l->reshard_after_forward,
		.bucket_bytes = l->bucket_bytes,
		.be = o->be,
	};
	struct titan_llama_group_hooks gh;
	int rc;

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
	const struct titan_layout *l = o->layout;
	struct titan_llama_opts *mo = o->mo;
	struct titan_engine *e = calloc(1, sizeof(*e));
	struct titan_layout own;
	int rc;

	*out = e;
	if (!e)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	e->dp_begin = dp_none;
	e->run = run_model;
	e->dp_finish = finish_none;
	e->norm = norm_model;
	if (!l) {
		if ((rc = titan_layout_resolve(&own, c, o->dims, o->dist->size, o->dist->rank)) < 0)
			return rc;
		l = &own;
	}
	place_model(o, l, e);
	if ((rc = titan_llama_new(o->dims, mo, o->be, o->alloc, &e->model)) < 0)
		return rc;
	if (o->hooks)
		titan_llama_set_hooks(e->model, o->hooks);
	if (l->stages.n > 0) {
		if ((rc = titan_pp_new(e->model, comm(o, TITAN_DIM_PP), l->schedule,
				       (int)l->microbatches, o->be, &e->pp)) < 0)
			return rc;
		e->pp_tokens = o->tokens / l->microbatches;
		e->run = run_pipeline;
	}
	/* each rank initialises its own rows: the same weights on any layout */
	if (!o->no_init && (rc = titan_llama_init_weights(e->model, (uint64_t)c->training.seed)) < 0)
		return rc;
	if ((l->dp > 1 || l->fsdp > 1) && (rc = build_dp(o, l, e)) < 0)
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
