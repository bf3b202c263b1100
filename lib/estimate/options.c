/*
 * options.c — estimator options from a job config, layout checks, and the
 * pipeline geometry: titan-train's own stage split and stage count
 * (titan_pp_split in lib/model/layout.c, titan_pp_stages_per_rank in
 * lib/train/pp.c: torchtitan's generate_llm_fqn_per_model_part) and the
 * stage-to-rank maps.
 */
#include "est_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "titan/train.h"

static bool has_float8(const struct titan_config *c)
{
	for (size_t i = 0; i < c->model.converters.n; i++)
		if (!strcmp(c->model.converters.items[i], "float8"))
			return true;
	return false;
}

int titan_est_opts_from_config(struct titan_est_opts *o, const struct titan_config *c,
			       const struct titan_est_device *dev, int64_t ngpu)
{
	struct est_num n = {false};
	enum titan_ac_mode ac;
	int64_t shard;
	int rc;

	memset(o, 0, sizeof(*o));
	o->dev = *dev;
	o->gpus_per_node = 8;
	o->layout.dp_replicate = c->parallelism.data_parallel_replicate_degree;
	o->layout.dp_shard = c->parallelism.data_parallel_shard_degree;
	o->layout.tp = c->parallelism.tensor_parallel_degree;
	o->layout.pp = c->parallelism.pipeline_parallel_degree;
	o->layout.cp = c->parallelism.context_parallel_degree;
	if (ngpu <= 0) {
		shard = o->layout.dp_shard > 0 ? o->layout.dp_shard : 1;
		ngpu = est_mul(&n, est_mul(&n, est_mul(&n, o->layout.dp_replicate, shard),
					   est_mul(&n, o->layout.tp, o->layout.pp)), o->layout.cp);
		if (n.overflow)
			return titan_error(TITAN_E_INVALID, "parallelism: the product of the degrees "
					   "is too large");
	}
	o->ngpu = ngpu;
	o->local_batch = c->training.local_batch_size;
	o->seq_len = c->training.seq_len;
	o->accum = 1;
	o->pp_microbatch = c->parallelism.pipeline_parallel_microbatch_size;
	o->schedule = (enum titan_est_schedule)c->parallelism.pipeline_parallel_schedule_e;
	o->pp_layers_per_stage = c->parallelism.pipeline_parallel_layers_per_stage ==
				 TITAN_CFG_NONE_INT ? 0 : c->parallelism.pipeline_parallel_layers_per_stage;
	o->pp_split_points = c->parallelism.pipeline_parallel_split_points; /* borrowed */
	o->cp_alltoall = c->parallelism.context_parallel_rotate_method_e == TITAN_CP_ROTATE_ALLTOALL;
	o->ep = c->parallelism.expert_parallel_degree;
	/* exactly titan-train's reading of the keys (its layout's) */
	if ((rc = titan_layout_ac(c, &ac, &o->ac_every)) < 0)
		return rc;
	o->ac = ac == TITAN_AC_NONE ? TITAN_EST_AC_NONE : ac == TITAN_AC_FULL ? TITAN_EST_AC_FULL :
		ac == TITAN_AC_SELECTIVE_OP ? TITAN_EST_AC_OP : TITAN_EST_AC_SELECTIVE;
	o->block_causal = dev->cpu &&
			  c->training.attn_mask_type_e == TITAN_ATTN_MASK_BLOCK_CAUSAL;
	if (dev->cpu) {
		o->param_bytes = o->master_bytes = o->reduce_bytes = o->optim_bytes = 4;
	} else {
		o->param_bytes = c->training.mixed_precision_param_e == TITAN_MP_PARAM_FLOAT32 ? 4 : 2;
		o->master_bytes = c->training.dtype_e == TITAN_MASTER_BFLOAT16 ? 2 : 4;
		o->reduce_bytes = 4;
		o->optim_bytes = o->master_bytes;
	}
	o->float8 = has_float8(c) && !dev->cpu;
	o->loss = TITAN_EST_LOSS_CHUNKED;
	o->ce_chunk = 1024;
	o->reshard = c->parallelism.fsdp_reshard_after_forward_e == TITAN_RESHARD_ALWAYS ?
		     TITAN_EST_RESHARD_ALWAYS :
		     c->parallelism.fsdp_reshard_after_forward_e == TITAN_RESHARD_NEVER ?
		     TITAN_EST_RESHARD_NEVER : TITAN_EST_RESHARD_DEFAULT;
	o->loss_parallel = !c->parallelism.disable_loss_parallel;
	o->async_tp = c->parallelism.enable_async_tensor_parallel;
	o->mfu = 0.40;
	o->cpu_kernel_rates = dev->cpu;
	o->cpu_peak_probe = isnan(c->metrics.peak_flops) && c->metrics.measure_peak_flops;
	o->cpu_metrics_jsonl = *c->metrics.save_jsonl_file != '\0';
	o->cpu_metrics_all_ranks = c->metrics.save_for_all_ranks;
	/* lib/train/trainer.c: FSDP units are one block each unless the key
	 * asks for buckets */
	o->cpu_bucket_bytes = c->comm.bucket_size_mb < 0 ? 0 :
			      (int64_t)(c->comm.bucket_size_mb * 1048576.0);
	/* gradient accumulation as titan-train computes it */
	shard = o->layout.dp_shard;
	if (shard < 0) {
		int64_t rest = est_mul(&n, est_mul(&n, o->layout.dp_replicate, o->layout.tp),
				       est_mul(&n, o->layout.pp, o->layout.cp));

		shard = !n.overflow && rest > 0 && ngpu % rest == 0 ? ngpu / rest : 1;
	}
	if (c->training.global_batch_size > 0 &&
	    (rc = titan_grad_accum_steps(c, est_mul(&n, o->layout.dp_replicate, shard),
					 &o->accum)) < 0)
		return rc;
	return 0;
}

bool est_multi_stage(enum titan_est_schedule s)
{
	return s != TITAN_EST_GPIPE && s != TITAN_EST_1F1B;
}

enum titan_pp_schedule est_train_schedule(enum titan_est_schedule s)
{
	/* one numbering (enum titan_schedule's); LoopedBFS, which titan-train
	 * does not run, is placed as Interleaved1F1B */
	return s == TITAN_EST_LOOPED_BFS ? TITAN_PP_INTERLEAVED_1F1B : (enum titan_pp_schedule)s;
}

int est_pipeline(const struct titan_est_opts *o, const struct titan_model_dims *d,
		 int64_t *v, struct titan_pp_stage **stages)
{
	const int64_t pp = o->layout.pp;
	struct titan_pp_stages rs;
	struct titan_pp_stage *st;
	struct titan_layout l;
	struct titan_config c;
	int rc;

	*stages = NULL;
	*v = 1;
	if (pp > INT32_MAX / 8)
		return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_degree: %" PRId64
				   " is too large", pp);
	if (pp <= 1) { /* one stage (titan-train ignores the split keys) */
		if (!(st = calloc(1, sizeof(*st))))
			return titan_error(TITAN_E_NOMEM, "out of memory");
		*st = (struct titan_pp_stage){0, (int)d->n_layers, true, true, 0};
		*stages = st;
		return 0;
	}
	/* titan-train's layout of the options: the stage count and split of
	 * rank 0's, every pipeline rank's stages placed as titan-train's
	 * (the GPU model holds no experts: no EP group to resolve) */
	if ((rc = est_dry_config(o, &c)) < 0)
		return rc;
	c.parallelism.pipeline_parallel_schedule_e =
		(enum titan_schedule)est_train_schedule(o->schedule);
	c.parallelism.expert_parallel_degree = 1;
	if ((rc = titan_layout_resolve(&l, &c, d, o->ngpu, 0)) < 0)
		goto out;
	*v = l.nstages / pp;
	if (!(st = calloc((size_t)l.nstages, sizeof(*st)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto out;
	}
	for (int r = 0; r < pp && rc == 0; r++)
		if ((rc = titan_layout_stages_of(&l, &c, d->n_layers, r, &rs)) == 0)
			for (int k = 0; k < rs.n; k++)
				st[rs.v[k].index] = rs.v[k];
	if (rc < 0)
		free(st);
	else
		*stages = st;
out:
	est_dry_config_release(&c);
	return rc;
}

int64_t est_stage_of(const struct titan_est_opts *o, int64_t rank, int64_t k, int64_t v)
{
	(void)v;
	return titan_pp_stage_of(est_train_schedule(o->schedule), (int)o->layout.pp, (int)rank,
				 (int)k);
}

bool est_block_ckpt(const struct titan_est_opts *o, int64_t b)
{
	switch (o->ac) {
	case TITAN_EST_AC_FULL:
		return true;
	case TITAN_EST_AC_SELECTIVE:
		return (b + 1) % (o->ac_every > 0 ? o->ac_every : 1) == 0;
	default:
		return false;
	}
}

int titan_est_check(struct titan_est_opts *o, const struct titan_model_dims *d)
{
	struct titan_est_layout *l = &o->layout;
	struct est_num n = {false};
	struct titan_pp_stage *st = NULL;
	int64_t rest, prod, v;
	int rc;

	/* a MoE (lib/train/moe.c): the layouts titan-train refuses
	 * (titan_config_check_moe_layout; --search meets them here).  The CPU
	 * model is a dry run of titan-train's engine (dry.c), EP's groups and
	 * dispatch buffers and TP's expert slices included; the GPU model
	 * holds every expert on every rank and knows no stage's, CP's, EP's
	 * or TP's MoE memory yet */
	if ((rc = titan_config_check_moe_layout(d->moe.num_experts, d->moe.inter_dim, l->tp,
						o->ep)) < 0)
		return rc;
	if (d->moe.num_experts > 0) {
		if (l->tp > 1 && !o->dev.cpu)
			return titan_error(TITAN_E_INVALID, "parallelism.tensor_parallel_degree: the "
					   "GPU model does not estimate a mixture of experts with it "
					   "yet (use --device cpu)");
		if (!o->dev.cpu && o->ep > 1)
			return titan_error(TITAN_E_INVALID, "parallelism.expert_parallel_degree %" PRId64
					   ": the GPU model does not estimate expert parallelism "
					   "yet (use 1, or --device cpu)", o->ep);
		if (!o->dev.cpu && (l->pp > 1 || l->cp > 1))
			return titan_error(TITAN_E_INVALID, "parallelism.%s: the GPU model does not "
					   "estimate a mixture of experts with it yet (use --device "
					   "cpu)", l->pp > 1 ? "pipeline_parallel_degree" :
					   "context_parallel_degree");
	}
	if (o->ngpu < 1)
		return titan_error(TITAN_E_INVALID, "--ngpu: must be at least 1");
	/* MLA: the CPU model is the engine's dry run, which builds its
	 * projections, latent and padded v as titan-train; the GPU model does
	 * not count them yet */
	if (titan_model_mla(d) && !o->dev.cpu)
		return titan_error(TITAN_E_INVALID, "model.kv_lora_rank %" PRId64 ": the GPU model "
				   "does not know multi-head latent attention (model.name "
				   "deepseek_v3) yet (use --device cpu)", d->mla.kv_lora_rank);
	if (l->dp_replicate < 1 || l->tp < 1 || l->pp < 1 || l->cp < 1 ||
	    (l->dp_shard < 1 && l->dp_shard != -1))
		return titan_error(TITAN_E_INVALID, "parallelism: every degree must be at least 1 "
				   "(data_parallel_shard_degree may be -1)");
	rest = est_mul(&n, est_mul(&n, l->dp_replicate, l->tp), est_mul(&n, l->pp, l->cp));
	if (n.overflow)
		return titan_error(TITAN_E_INVALID, "parallelism: the product of the degrees is too large");
	if (l->dp_shard == -1) {
		if (o->ngpu % rest)
			return titan_error(TITAN_E_INVALID, "parallelism.data_parallel_shard_degree -1: "
					   "%" PRId64 " GPUs are not divisible by dp_replicate x tp x pp x cp "
					   "= %" PRId64, o->ngpu, rest);
		l->dp_shard = o->ngpu / rest;
	}
	prod = est_mul(&n, rest, l->dp_shard);
	if (n.overflow || prod != o->ngpu)
		return titan_error(TITAN_E_INVALID, "parallelism: dp_replicate %" PRId64 " x dp_shard %"
				   PRId64 " x tp %" PRId64 " x pp %" PRId64 " x cp %" PRId64 " = %" PRId64
				   " ranks, but --ngpu is %" PRId64, l->dp_replicate, l->dp_shard, l->tp,
				   l->pp, l->cp, n.overflow ? INT64_MAX : prod, o->ngpu);
	if (o->rank < 0 || o->rank >= o->ngpu)
		return titan_error(TITAN_E_INVALID, "--rank: %" PRId64 " is not a rank of %" PRId64,
				   o->rank, o->ngpu);
	if (o->rank > 0 && !o->dev.cpu)
		return titan_error(TITAN_E_INVALID, "--rank: the GPU model gives every pipeline rank "
				   "already; --rank selects a rank of titan-train's CPU path "
				   "(--device cpu)");
	if (o->local_batch < 1 || o->seq_len < 1 || o->accum < 1)
		return titan_error(TITAN_E_INVALID, "training: local_batch_size, seq_len and the "
				   "accumulation steps must be at least 1");
	if (l->pp > 1) {
		if (d->tied)
			return titan_error(TITAN_E_INVALID, "model.tie_word_embeddings: tied weights "
					   "cannot be used with parallelism.pipeline_parallel_degree > 1");
		if (o->pp_microbatch < 1 || o->local_batch % o->pp_microbatch)
			return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_microbatch_size: "
					   "%" PRId64 " does not divide training.local_batch_size %" PRId64,
					   o->pp_microbatch, o->local_batch);
	}
	/* titan-train's checks (lib/model/layout.c) */
	if ((rc = titan_model_check_tp_cp(d, l->tp, l->cp, o->seq_len,
					  l->pp > 1 ? o->pp_microbatch : o->local_batch)) < 0)
		return rc;
	if ((rc = est_pipeline(o, d, &v, &st)) < 0)
		return rc;
	free(st);
	if (!(o->mfu > 0 && o->mfu <= 1))
		return titan_error(TITAN_E_INVALID, "--mfu: %g is not in (0, 1]", o->mfu);
	if (o->gpus_per_node < 1)
		return titan_error(TITAN_E_INVALID, "--gpus-per-node: must be at least 1");
	if (o->ce_chunk < 1)
		o->ce_chunk = 1024;
	return 0;
}
