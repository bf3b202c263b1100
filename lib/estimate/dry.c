/*
 * dry.c — titan-estimate's dry run of titan-train's CPU engine: the
 * engine of one rank of the layout (titan_parallelize: model, FSDP/HSDP,
 * pipeline, TP/CP) and one training step on the measure backend
 * (measure.c), its peers played by instant communicators (rank r of a mesh
 * of any size, lib/dist/instant.c), every block counted by a
 * titan_allocator as titan-train's.  Nothing is computed and no model-size
 * memory is committed.
 *
 * What it gives the CPU model (cpu.c) is the dynamic part: FSDP's buffers
 * (tag comm) as lib/train/dp.c allocates and frees them through the step's
 * actions — the pipeline schedule's, the model's hooks — at each moment of
 * the report.  The data-parallel engine's group hooks are wrapped: FSDP
 * allocates only inside them, so the comm bytes live at a hook's entry and
 * exit, less those live after the engine was built (the pipeline's
 * buffers), are FSDP's, and the allocator's comm peak during a hook is its
 * most.  The model's profiling spans say which part of the step runs
 * (forward, loss, backward with recomputation), the backend's attention
 * and loss ops mark the moments.
 *
 * est_dry_device runs the same engine and steps on a device's terms
 * (gpu_titan.c, titan-train's CUDA path): its blocks through the caching
 * allocator, its backend's ops taking lib/cuda's buffers.
 *
 * The blocks are address space that is never committed: guarded
 * (PROT_NONE, titan_measure_mem_backend), so a host write to a backend
 * buffer during the dry run faults instead of counting right by luck.
 * The model, tp.c and cp.c move data only through the backend's buffer
 * ops, which the measure backend does not carry out.
 */
#include "est_impl.h"
#include "titan/dist.h"
#include "titan/ops.h"
#include "train/engine.h"

#include <stdlib.h>
#include <string.h>

enum span { SPAN_OTHER, SPAN_FORWARD, SPAN_LOSS, SPAN_BACKWARD };

struct dry {
	struct titan_allocator *a;
	struct titan_llama_group_hooks dp; /* the data-parallel engine's */
	struct titan_backend_ops ops;      /* the measure backend's, observed */
	const struct titan_backend_ops *inner;
	int depth;                         /* profiling spans open */
	enum span span;                    /* the outermost one */
	int64_t base;                      /* comm bytes live outside FSDP */
	int64_t live;                      /* FSDP's, at the last hook's exit */
	int64_t *max;                      /* EST_FSDP_* */
};

static struct dry *the(struct titan_backend *be)
{
	return be->impl;
}

static void at(struct dry *d, int k, int64_t bytes)
{
	if (bytes > d->max[k])
		d->max[k] = bytes;
}

/* ------------------------------------------------------ spans and hooks */

static void span_begin(void *ctx, const char *name)
{
	struct dry *d = ctx;

	if (d->depth++)
		return;
	d->span = !strcmp(name, "forward") ? SPAN_FORWARD : !strcmp(name, "loss") ? SPAN_LOSS :
		  !strcmp(name, "backward") ? SPAN_BACKWARD : SPAN_OTHER;
}

static void span_end(void *ctx, const char *name)
{
	struct dry *d = ctx;

	(void)name;
	if (--d->depth == 0)
		d->span = SPAN_OTHER;
}

/* A hook of the DP engine: the most FSDP bytes while it allocates count
 * for the part of the step it runs in. */
static int hook(struct dry *d, int (*fn)(void *, int), int g)
{
	struct titan_mem_stats st;
	int64_t n0;
	int rc;

	if (!fn)
		return 0;
	titan_mem_reset_peak(d->a);
	titan_mem_get_stats(d->a, &st);
	n0 = st.n_alloc;
	rc = fn(d->dp.ctx, g);
	titan_mem_get_stats(d->a, &st);
	d->live = st.cur[TITAN_MEM_COMM] - d->base;
	if (st.n_alloc > n0) {
		const int64_t most = st.peak[TITAN_MEM_COMM] - d->base;

		if (d->span == SPAN_FORWARD)
			at(d, EST_FSDP_FWD_COMM, most);
		else if (d->span == SPAN_LOSS)
			at(d, EST_FSDP_LOSS, most);
		else if (d->span == SPAN_BACKWARD)
			at(d, EST_FSDP_BWD_COMM, most);
	}
	return rc;
}

static int pre_forward(void *ctx, int g)
{
	return hook(ctx, ((struct dry *)ctx)->dp.pre_forward, g);
}

static int post_forward(void *ctx, int g)
{
	return hook(ctx, ((struct dry *)ctx)->dp.post_forward, g);
}

static int pre_backward(void *ctx, int g)
{
	return hook(ctx, ((struct dry *)ctx)->dp.pre_backward, g);
}

static int post_backward(void *ctx, int g)
{
	return hook(ctx, ((struct dry *)ctx)->dp.post_backward, g);
}

static int pre_weight(void *ctx, int g)
{
	return hook(ctx, ((struct dry *)ctx)->dp.pre_weight, g);
}

/* ---------------------------------------------------- the moments' ops */

/* attention forward: the forward's moment, or under backward the
 * recomputation's */
static void attn_fwd(struct dry *d)
{
	if (d->span == SPAN_FORWARD)
		at(d, EST_FSDP_FWD_ATTN, d->live);
	else if (d->span == SPAN_BACKWARD)
		at(d, EST_FSDP_RECOMPUTE, d->live);
}

static int o_attention_fwd(struct titan_backend *be, float *out, float *lse, const float *q,
			   const float *k, const float *v, const struct titan_attn_dims *a)
{
	attn_fwd(the(be));
	return the(be)->inner->attention_fwd(be, out, lse, q, k, v, a);
}

static int o_attention_part_fwd(struct titan_backend *be, float *out, float *lse,
				const float *q, const float *k, const float *v,
				const struct titan_attn_part *p, bool merge)
{
	attn_fwd(the(be));
	return the(be)->inner->attention_part_fwd(be, out, lse, q, k, v, p, merge);
}

static int o_attention_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
			   const float *dout, const float *q, const float *k, const float *v,
			   const float *out, const float *lse, const struct titan_attn_dims *a)
{
	at(the(be), EST_FSDP_BWD_ATTN, the(be)->live);
	return the(be)->inner->attention_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, a);
}

static int o_attention_part_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
				const float *dout, const float *q, const float *k,
				const float *v, const float *out, const float *lse,
				const struct titan_attn_part *p, bool accumulate)
{
	at(the(be), EST_FSDP_BWD_ATTN, the(be)->live);
	return the(be)->inner->attention_part_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, p,
						  accumulate);
}

static int o_classifier_ce(struct titan_backend *be, double *loss_sum, int64_t *n_valid,
			   float *dh, float *dw, const float *h, const float *w,
			   const int32_t *labels, int64_t n, int64_t c, int64_t v,
			   float grad_scale, int64_t chunk)
{
	at(the(be), EST_FSDP_LOSS, the(be)->live);
	return the(be)->inner->classifier_ce(be, loss_sum, n_valid, dh, dw, h, w, labels, n, c, v,
					     grad_scale, chunk);
}

/* ------------------------------------------------------------ the run */

/* titan-train's config of the estimate's options (what the engine reads) */
int est_dry_config(const struct titan_est_opts *o, struct titan_config *c)
{
	int rc;

	if ((rc = titan_config_init(c)) < 0)
		return rc;
	c->training.local_batch_size = o->local_batch;
	c->training.seq_len = o->seq_len;
	c->parallelism.data_parallel_replicate_degree = o->layout.dp_replicate;
	c->parallelism.data_parallel_shard_degree = o->layout.dp_shard;
	c->parallelism.tensor_parallel_degree = o->layout.tp;
	c->parallelism.pipeline_parallel_degree = o->layout.pp;
	c->parallelism.context_parallel_degree = o->layout.cp;
	c->parallelism.expert_parallel_degree = o->ep > 1 ? o->ep : 1; /* 0: unset */
	c->parallelism.pipeline_parallel_microbatch_size = o->pp_microbatch;
	c->parallelism.pipeline_parallel_schedule_e = (enum titan_schedule)o->schedule;
	c->parallelism.pipeline_parallel_layers_per_stage = o->pp_layers_per_stage > 0 ?
		o->pp_layers_per_stage : TITAN_CFG_NONE_INT;
	c->parallelism.pipeline_parallel_split_points = o->pp_split_points; /* borrowed */
	c->parallelism.context_parallel_rotate_method_e = o->cp_alltoall ?
		TITAN_CP_ROTATE_ALLTOALL : TITAN_CP_ROTATE_ALLGATHER;
	c->parallelism.fsdp_reshard_after_forward_e =
		o->reshard == TITAN_EST_RESHARD_NEVER ? TITAN_RESHARD_NEVER :
		o->reshard == TITAN_EST_RESHARD_ALWAYS ? TITAN_RESHARD_ALWAYS : TITAN_RESHARD_DEFAULT;
	c->parallelism.disable_loss_parallel = !o->loss_parallel;
	c->comm.bucket_size_mb = o->cpu_bucket_bytes > 0 ? (double)o->cpu_bucket_bytes / 1048576.0
							 : -1;
	return 0;
}

void est_dry_config_release(struct titan_config *c)
{
	memset(&c->parallelism.pipeline_parallel_split_points, 0,
	       sizeof(c->parallelism.pipeline_parallel_split_points));
	titan_config_release(c);
}

/* Dimensions [d0, d1] of the mesh flattened: this rank's index in them,
 * their size, and the world ranks of the group (base + i x stride). */
static int mesh_comm(const struct titan_parallel_dims *pd, const int64_t *coord,
		     enum titan_mesh_dim name, int d0, int d1, struct titan_comm **out)
{
	int64_t rank = 0, size = 1, stride = 1, c0[TITAN_DIM_NDIMS];

	for (int d = d0; d <= d1; d++) {
		rank = rank * pd->degree[d] + coord[d];
		size *= pd->degree[d];
	}
	for (int d = d1 + 1; d < TITAN_DIM_NDIMS; d++)
		stride *= pd->degree[d];
	memcpy(c0, coord, sizeof(c0));
	for (int d = d0; d <= d1; d++)
		c0[d] = 0;
	return titan_comm_instant_new(titan_mesh_dim_name(name), (int)rank, (int)size,
				      (int)titan_parallel_dims_rank(pd, c0), (int)stride, out);
}

static int dry_mesh(const struct titan_config *c, const struct titan_est_opts *o,
		    struct titan_dist *dist)
{
	int rc;

	memset(dist, 0, sizeof(*dist));
	if ((rc = titan_parallel_dims_from_config(&dist->dims, c, o->ngpu)) < 0)
		return rc;
	dist->rank = (int)o->rank;
	dist->size = (int)o->ngpu;
	titan_parallel_dims_coords(&dist->dims, o->rank, dist->coord);
	for (int d = 0; d < TITAN_DIM_NDIMS && rc == 0; d++)
		rc = mesh_comm(&dist->dims, dist->coord, d, d, d, &dist->comm[d]);
	if (rc == 0)
		rc = mesh_comm(&dist->dims, dist->coord, TITAN_DIM_DP, TITAN_DIM_DP_REPLICATE,
			       TITAN_DIM_DP_SHARD, &dist->comm[TITAN_DIM_DP]);
	if (rc == 0)
		rc = mesh_comm(&dist->dims, dist->coord, TITAN_DIM_FSDP, TITAN_DIM_DP_SHARD,
			       TITAN_DIM_CP, &dist->comm[TITAN_DIM_FSDP]);
	if (rc == 0)
		rc = mesh_comm(&dist->dims, dist->coord, TITAN_DIM_LOSS, TITAN_DIM_DP_REPLICATE,
			       TITAN_DIM_CP, &dist->comm[TITAN_DIM_LOSS]);
	if (rc == 0)
		rc = mesh_comm(&dist->dims, dist->coord, TITAN_DIM_WORLD, 0, TITAN_DIM_NDIMS - 1,
			       &dist->comm[TITAN_DIM_WORLD]);
	/* expert parallelism: its dispatch group and the experts' FSDP mesh */
	for (int k = 0; k < 2 && rc == 0 && dist->dims.ep > 1; k++) {
		int64_t first, step, size, index;

		titan_parallel_dims_ep_group(&dist->dims, o->rank, k == 0, &first, &step, &size,
					     &index);
		rc = titan_comm_instant_new(k == 0 ? "ep" : "efsdp", (int)index, (int)size,
					    (int)first, (int)step, k == 0 ? &dist->ep : &dist->efsdp);
	}
	return rc;
}

int est_dry_layout(const struct titan_model_dims *d, const struct titan_est_opts *o,
		   struct titan_layout *l)
{
	struct titan_config c;
	int rc;

	if ((rc = est_dry_config(o, &c)) < 0)
		return rc;
	rc = titan_layout_resolve(l, &c, d, o->ngpu, o->rank);
	est_dry_config_release(&c);
	return rc;
}

/* One step as titan-train's (trainer.c): its microbatches (two at most:
 * from the second on they repeat), the reductions finished, the norm and
 * AdamW. */
static int dry_step(struct titan_engine *e, const struct titan_est_opts *o, int64_t tokens)
{
	const struct titan_adamw_hparams hp = {1e-3, 0.9, 0.95, 1e-8, 0.1};
	const int64_t nmb = o->accum < 2 ? o->accum : 2;
	int32_t *ids = calloc((size_t)tokens, sizeof(*ids));
	double loss, norm;
	int64_t nv;
	float coef;
	int rc;

	if (!ids)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if ((rc = titan_engine_zero_grads(e)) == 0) {
		titan_engine_begin_step(e, nmb, tokens * nmb);
		for (int64_t k = 0; k < nmb && rc == 0; k++)
			rc = titan_engine_train_microbatch(e, ids, ids, &loss, &nv);
	}
	if (rc == 0)
		rc = titan_engine_finish_grads(e);
	if (rc == 0)
		rc = titan_engine_grad_norm(e, 1.0, &norm, &coef);
	if (rc == 0)
		rc = titan_engine_optimizer_step(e, &hp, 1, coef);
	free(ids);
	return rc;
}

/* The engine of the layout with sequences of seq_len tokens, built; with
 * `step` one step run.  The model's buffer plan is copied to out. */
static int dry(const struct titan_model_dims *model, const struct titan_est_opts *full,
	       int64_t seq_len, bool step, const struct est_dry_dev *dev, struct est_dry *out)
{
	struct titan_model_dims chunked = *model;
	/* Llama 4's chunk ids, as block_causal's document ids below: in the
	 * plan, not written by a step (no chunk past its sequence) */
	const struct titan_model_dims *dims = &chunked;
	struct titan_est_opts opts = *full;
	const struct titan_est_opts *o = &opts;
	struct dry d = {.max = out->fsdp};
	struct titan_config c;
	struct titan_dist dist;
	struct titan_layout lay;
	struct titan_mem_backend mb;
	struct titan_backend be;
	struct titan_llama_opts mo = {
		.batch = o->local_batch, .seq = seq_len, .ac_every = o->ac_every,
		.cp_ring = o->cp_alltoall,
		/* block_causal: the document ids in the plan of the engine
		 * built (doc_eos 0: any boundary, nothing is computed); a
		 * step would write them from the host, and FSDP's buffers do
		 * not depend on them */
		.block_causal = o->block_causal && !step,
		.ac = o->ac == TITAN_EST_AC_NONE ? TITAN_AC_NONE : o->ac == TITAN_EST_AC_FULL ?
		      TITAN_AC_FULL : o->ac == TITAN_EST_AC_OP ? TITAN_AC_SELECTIVE_OP :
		      TITAN_AC_SELECTIVE,
	};
	struct titan_llama_group_hooks gh;
	struct titan_engine *e = NULL;
	const int64_t tokens = o->local_batch * seq_len;
	enum titan_log_level lvl;
	uintptr_t next;
	int rc;

	memset(out, 0, sizeof(*out));
	opts.seq_len = seq_len;
	if (step && chunked.attn_chunk < seq_len)
		chunked.attn_chunk = seq_len;
	/* a MoE's router, slot sort and row moves run on the host
	 * (lib/train/moe.c), over the blocks of a sequence of 2·cp·tp tokens
	 * (est_dry_fsdp): its dry run maps its blocks, unguarded.  So does
	 * multi-head latent attention's, whose YaRN table the engine writes
	 * from the host when it is built (lib/train/llama.c init_rope) and
	 * whose ops read host memory: the plan's blocks too (mapped without
	 * reserve, the large ones address space only) */
	if (dev)
		mb = dev->mem;
	else if (step || titan_model_mla(dims))
		titan_measure_mem_backend(&mb, dims->moe.num_experts <= 0 && !titan_model_mla(dims));
	else
		titan_measure_unmapped_backend(&mb, &next);
	if (!(d.a = titan_allocator_new("dry run", &mb)))
		return TITAN_E_NOMEM;
	if (dev) { /* the device's backend: its own ops and buffers */
		if ((rc = dev->init(&be, d.a, dev->ctx)) < 0) {
			if (be.ops && be.ops->release)
				be.ops->release(&be);
			titan_allocator_free(d.a);
			return rc;
		}
	} else {
		titan_backend_measure_init(&be, d.a, o->threads);
		d.inner = be.ops;
		d.ops = *be.ops;
		d.ops.attention_fwd = o_attention_fwd;
		d.ops.attention_part_fwd = o_attention_part_fwd;
		d.ops.attention_bwd = o_attention_bwd;
		d.ops.attention_part_bwd = o_attention_part_bwd;
		d.ops.classifier_ce = o_classifier_ce;
		be.ops = &d.ops;
		be.impl = &d;
	}
	if ((rc = est_dry_config(o, &c)) < 0) {
		titan_allocator_free(d.a);
		return rc;
	}
	/* the engine's log lines (the stages it builds) are titan-train's, not
	 * the estimate's: errors only */
	lvl = titan_log_get_level();
	if (lvl > TITAN_LOG_ERROR)
		titan_log_set_level(TITAN_LOG_ERROR);
	if ((rc = dry_mesh(&c, o, &dist)) == 0 &&
	    (rc = titan_layout_resolve(&lay, &c, dims, o->ngpu, o->rank)) == 0)
		rc = titan_parallelize(&(struct titan_parallelize_opts){
			.cfg = &c, .dist = &dist, .dims = dims, .layout = &lay, .mo = &mo, .be = &be,
			.alloc = d.a,
			.hooks = &(struct titan_llama_hooks){span_begin, span_end, &d},
			.tokens = tokens, .no_init = true}, &e);
	if (rc == 0 && titan_engine_dp(e)) {
		d.dp = *titan_dp_hooks(titan_engine_dp(e), &gh);
		titan_llama_set_group_hooks(titan_engine_model(e), &(struct titan_llama_group_hooks){
			pre_forward, post_forward, pre_backward, post_backward, pre_weight, &d});
	}
	if (rc == 0) {
		const struct titan_buf_entry *p = titan_llama_plan(titan_engine_model(e), &out->nplan);

		titan_mem_get_stats(d.a, &out->built);
		d.base = out->built.cur[TITAN_MEM_COMM];
		if (!(out->plan = malloc((size_t)(out->nplan ? out->nplan : 1) * sizeof(*p))))
			rc = titan_error(TITAN_E_NOMEM, "out of memory");
		else
			memcpy(out->plan, p, (size_t)out->nplan * sizeof(*p));
		for (int k = 0; rc == 0 && step && k < (dev ? dev->steps : 1); k++)
			rc = dry_step(e, o, tokens);
		if (rc == 0 && step)
			titan_mem_get_stats(d.a, &out->after);
	}
	titan_engine_free(e);
	if (dev && be.ops->release) /* the device backend's own buffers */
		be.ops->release(&be);
	titan_log_set_level(lvl);
	for (int k = 0; k < TITAN_DIM_NALL; k++)
		titan_comm_free(dist.comm[k]);
	titan_comm_free(dist.ep);
	titan_comm_free(dist.efsdp);
	est_dry_config_release(&c);
	titan_allocator_free(d.a);
	if (rc < 0)
		est_dry_release(out);
	return rc;
}

int est_dry_run(const struct titan_model_dims *d, const struct titan_est_opts *o,
		int64_t seq_len, struct est_dry *out)
{
	return dry(d, o, seq_len, true, NULL, out);
}

int est_dry_device(const struct titan_model_dims *d, const struct titan_est_opts *o,
		   const struct est_dry_dev *dev, struct est_dry *out)
{
	return dry(d, o, o->seq_len, true, dev, out);
}


int est_dry_plan(const struct titan_model_dims *d, const struct titan_est_opts *o,
		 struct est_dry *out)
{
	return dry(d, o, o->seq_len, false, NULL, out);
}

void est_dry_release(struct est_dry *r)
{
	free(r->plan);
	r->plan = NULL;
	r->nplan = 0;
}

/* FSDP's buffers are the parameters' (units, shards) and their moments
 * the order of the hooks and actions, which the tokens do not change: the
 * dry run takes the shortest sequence the layout allows (2·cp·tp: CP's
 * 2·cp chunks, TP's sequence-parallel split), so that the host code that
 * still loops over a microbatch's tokens (TP's loss and packing in
 * lib/train/tp.c, CP's in cp.c) costs nothing. */
int est_dry_fsdp(const struct titan_model_dims *d, const struct titan_est_opts *o,
		 int64_t max[EST_FSDP_NKINDS])
{
	struct est_dry r;
	int rc = est_dry_run(d, o, 2 * o->layout.cp * o->layout.tp, &r);

	memcpy(max, r.fsdp, sizeof(r.fsdp));
	est_dry_release(&r);
	return rc;
}
