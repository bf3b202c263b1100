/*
 * layout.c — one rank's layout resolved once (titan/train.h struct
 * titan_layout): the mesh's degrees and this rank's coordinates, what it
 * holds of the model (FSDP shard, TP slice, experts, pipeline stages by
 * lib/model's split and the schedule's placement), the microbatches and
 * the model's policies (activation checkpointing, loss chunk, loss
 * parallelism, CP rotation) and the data-parallel engine's.  titan-train
 * (trainer.c, engine.c) and titan-estimate (lib/estimate) both take it,
 * so nothing of a layout is derived twice.
 */
#include "titan/train.h"

#include <limits.h>
#include <string.h>

#include "titan/core.h"

int titan_layout_ac(const struct titan_config *c, enum titan_ac_mode *ac, int *every)
{
	int64_t n;

	*every = 0;
	if (c->activation_checkpoint.mode_e == TITAN_ACT_CKPT_NONE) {
		*ac = TITAN_AC_NONE;
	} else if (c->activation_checkpoint.mode_e == TITAN_ACT_CKPT_FULL) {
		*ac = TITAN_AC_FULL;
	} else if (!strcmp(c->activation_checkpoint.selective_ac_option, "op")) {
		*ac = TITAN_AC_SELECTIVE_OP;
	} else {
		if (titan_parse_i64(c->activation_checkpoint.selective_ac_option, &n) < 0)
			return titan_error(TITAN_E_INVALID,
					   "activation_checkpoint.selective_ac_option: '%s' is "
					   "neither a block interval (an integer such as '2') nor 'op'",
					   c->activation_checkpoint.selective_ac_option);
		/* torchtitan checkpoints block k (from 1) when k % N == 0, every
		 * block for 0: an N beyond the int range checkpoints none,
		 * as INT_MAX does */
		*ac = TITAN_AC_SELECTIVE;
		*every = n <= 0 ? 1 : n > INT_MAX ? INT_MAX : (int)n;
	}
	return 0;
}

/* The mesh: coordinates, the data-parallel ranks, FSDP's shard, TP's
 * slice, the experts. */
static void place(struct titan_layout *l)
{
	const int64_t *g = l->dims.degree, *x = l->coord;
	int64_t first, step, size, index;

	titan_parallel_dims_coords(&l->dims, l->rank, l->coord);
	l->dp = titan_parallel_dims_degree(&l->dims, TITAN_DIM_DP);
	l->dp_rank = x[TITAN_DIM_DP_REPLICATE] * g[TITAN_DIM_DP_SHARD] + x[TITAN_DIM_DP_SHARD];
	l->fsdp = titan_parallel_dims_degree(&l->dims, TITAN_DIM_FSDP);
	if (l->fsdp > 1) { /* the FSDP group's rank: dp_shard major, cp minor */
		l->shard_rank = (int)(x[TITAN_DIM_DP_SHARD] * g[TITAN_DIM_CP] + x[TITAN_DIM_CP]);
		l->shard_degree = (int)l->fsdp;
	}
	l->tp_rank = (int)x[TITAN_DIM_TP];
	l->tp_degree = (int)g[TITAN_DIM_TP];
	l->ep_degree = 1;
	if (l->dims.ep > 1) {
		/* the ep and efsdp groups as lib/dist/world.c builds them */
		titan_parallel_dims_ep_group(&l->dims, l->rank, true, &first, &step, &size, &index);
		l->ep_rank = (int)index;
		l->ep_degree = (int)size;
		if (l->fsdp > 1) {
			titan_parallel_dims_ep_group(&l->dims, l->rank, false, &first, &step, &size,
						     &index);
			l->ep_shard_rank = (int)index;
			l->ep_shard_degree = (int)size;
		}
	}
}

int titan_layout_stages_of(const struct titan_layout *l, const struct titan_config *c,
			   int64_t n_layers, int pp_rank, struct titan_pp_stages *out)
{
	const int pp = (int)l->dims.degree[TITAN_DIM_PP];
	int rc;

	out->n = l->nstages / pp;
	for (int v = 0; v < out->n; v++)
		if ((rc = titan_pp_split(c, n_layers, l->nstages,
					 titan_pp_stage_of(l->schedule, pp, pp_rank, v),
					 &out->v[v])) < 0)
			return rc;
	return 0;
}

/* The pipeline's nstages (pp x stages per rank) and the rank's stages. */
static int stages(struct titan_layout *l, const struct titan_config *c, int64_t n_layers)
{
	const int pp = (int)l->dims.degree[TITAN_DIM_PP];
	int nv, rc;

	if ((rc = nv = titan_pp_stages_per_rank(c, l->schedule, n_layers, pp)) < 0)
		return rc;
	l->nstages = pp * nv;
	if ((rc = titan_layout_stages_of(l, c, n_layers, (int)l->coord[TITAN_DIM_PP],
					 &l->stages)) < 0)
		return rc;
	l->split_backward = l->schedule == TITAN_PP_INTERLEAVED_ZB || l->schedule == TITAN_PP_ZBV;
	return 0;
}

int titan_layout_resolve(struct titan_layout *l, const struct titan_config *c,
			 const struct titan_model_dims *d, int64_t world_size, int64_t rank)
{
	const int64_t local = c->training.local_batch_size;
	const double mb = c->comm.bucket_size_mb;
	int64_t pp;
	int rc;

	memset(l, 0, sizeof(*l));
	if ((rc = titan_parallel_dims_from_config(&l->dims, c, world_size)) < 0 ||
	    (rc = titan_layout_ac(c, &l->ac, &l->ac_every)) < 0)
		return rc;
	if (rank < 0 || rank >= world_size)
		return titan_error(TITAN_E_INVALID, "rank %lld is not a rank of %lld",
				   (long long)rank, (long long)world_size);
	l->rank = rank;
	place(l);
	pp = l->dims.degree[TITAN_DIM_PP];
	l->microbatch = local;
	l->microbatches = 1;
	if (pp > 1) {
		if ((rc = titan_pp_schedule_from(c->parallelism.pipeline_parallel_schedule_e,
						 &l->schedule)) < 0)
			return rc;
		if (d->tied)
			return titan_error(TITAN_E_INVALID, "model.tie_word_embeddings with "
					   "parallelism.pipeline_parallel_degree %lld: the embedding "
					   "and the output live on different stages", (long long)pp);
		l->microbatch = c->parallelism.pipeline_parallel_microbatch_size;
		if (l->microbatch < 1 || local % l->microbatch)
			return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_"
					   "microbatch_size: %lld does not divide "
					   "training.local_batch_size %lld", (long long)l->microbatch,
					   (long long)local);
		l->microbatches = local / l->microbatch;
	}
	/* lib/model/layout.c */
	if ((rc = titan_model_check_tp_cp(d, l->dims.degree[TITAN_DIM_TP],
					  l->dims.degree[TITAN_DIM_CP], c->training.seq_len,
					  l->microbatch)) < 0)
		return rc;
	if (pp > 1 && (rc = stages(l, c, d->n_layers)) < 0)
		return rc;
	l->ce_chunk = TITAN_CE_CHUNK;
	l->loss_parallel = !c->parallelism.disable_loss_parallel;
	l->cp_ring = c->parallelism.context_parallel_rotate_method_e == TITAN_CP_ROTATE_ALLTOALL;
	l->reshard_after_forward = c->parallelism.fsdp_reshard_after_forward_e !=
				   TITAN_RESHARD_NEVER;
	/* torch DDP's bucket_cap_mb by default; FSDP: one unit per block */
	l->bucket_bytes = mb >= 0 ? (int64_t)(mb * 1048576.0) : l->fsdp <= 1 ? 25 << 20 : 0;
	return 0;
}

void titan_layout_table_opts(const struct titan_layout *l, struct titan_param_table_opts *o)
{
	titan_param_table_opts_default(o);
	if (l->shard_degree > 1) {
		o->shard_rank = l->shard_rank;
		o->shard_degree = l->shard_degree;
	}
	o->tp_rank = l->tp_rank;
	o->tp_degree = l->tp_degree;
	if (l->ep_degree > 1) {
		o->ep_rank = l->ep_rank;
		o->ep_degree = l->ep_degree;
		o->ep_shard_rank = l->ep_shard_rank;
		o->ep_shard_degree = l->ep_shard_degree;
	}
	o->stages = l->stages;
}

void titan_llama_opts_from_layout(struct titan_llama_opts *o, const struct titan_config *c,
				  const struct titan_layout *l)
{
	memset(o, 0, sizeof(*o));
	o->batch = l->microbatch;
	o->seq = c->training.seq_len;
	o->ac = l->ac;
	o->ac_every = l->ac_every;
	o->ce_chunk = l->ce_chunk;
	o->exclude_norms_embeddings_from_wd = c->optimizer.weight_decay_exclude_norms_embeddings;
	o->cp_ring = l->cp_ring;
	o->loss_parallel = l->loss_parallel;
	o->block_causal = c->training.attn_mask_type_e == TITAN_ATTN_MASK_BLOCK_CAUSAL;
	o->doc_eos = o->doc_bos = -1; /* the trainer sets them from the shards */
}
