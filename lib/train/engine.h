/*
 * engine.h — the training step's engine, private to lib/train (and its
 * unit test): torchtitan's parallelize step.  titan_parallelize builds the
 * model of this rank's layout — FSDP shard, TP and CP groups, pipeline
 * stages — with its pipeline runner (pp.c) and data-parallel engine (dp.c),
 * and returns one object whose operations are the same on every layout.
 * Which runner does the microbatch, who reduces the gradients and how the
 * norm is summed is chosen here, once; the trainer's loop (trainer.c) and
 * validation never ask.
 *
 * A step:
 *   titan_engine_zero_grads
 *   titan_engine_begin_step(nmb, global valid tokens)
 *   titan_engine_train_microbatch   × nmb (loss sum and valid tokens back)
 *   titan_engine_finish_grads       (DP reductions, TP's replicated grads)
 *   titan_engine_grad_norm          (global norm, clipping coefficient)
 *   titan_engine_optimizer_step
 * Validation: titan_engine_eval_microbatch per batch (forward and loss).
 */
#ifndef TITAN_TRAIN_ENGINE_H
#define TITAN_TRAIN_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "titan/config.h"
#include "titan/dist.h"
#include "titan/model.h"
#include "titan/ops.h"
#include "titan/train.h"

struct titan_parallelize_opts {
	const struct titan_config *cfg;
	struct titan_dist *dist;          /* its mesh gives every group */
	/* the groups to use instead, by titan_mesh_dim (the trainer's staged
	 * communicators), or NULL: dist's */
	struct titan_comm *const *comm;
	const struct titan_model_dims *dims;
	/* the rank's layout (titan_layout_resolve), or NULL: resolved here
	 * from cfg, dims and dist */
	const struct titan_layout *layout;
	/* from titan_llama_opts_from_layout; completed here with the layout's
	 * parameter table (mo->table: the engine's, valid while it lives),
	 * the TP/CP/PP groups and the stages */
	struct titan_llama_opts *mo;
	struct titan_backend *be;
	struct titan_allocator *alloc;    /* the model's (device) memory, or NULL */
	const struct titan_llama_hooks *hooks; /* profiling spans, or NULL */
	int64_t tokens;                   /* tokens per microbatch (local batch x seq) */
	/* a dry run (titan-estimate's measure pass): the weights are left as
	 * allocated, never written (training.seed unused) */
	bool no_init;
};

struct titan_engine;

/* Build the model (weights initialised from training.seed: each rank its
 * own rows, the same weights on any layout), the pipeline runner when
 * parallelism.pipeline_parallel_degree > 1 and the data-parallel engine
 * when the DP or FSDP degree is above 1.  *out is set even on error (free
 * it). */
int titan_parallelize(const struct titan_parallelize_opts *o, struct titan_engine **out);
void titan_engine_free(struct titan_engine *e); /* NULL-safe; frees the model too */

struct titan_llama *titan_engine_model(const struct titan_engine *e);
/* The data-parallel engine, NULL without DP (its hooks are the model's
 * group hooks; a dry run wraps them). */
struct titan_dp *titan_engine_dp(const struct titan_engine *e);
/* DP's units (FSDP units or DDP buckets) for the layout line; 0 without DP. */
int titan_engine_dp_units(const struct titan_engine *e);

int titan_engine_zero_grads(struct titan_engine *e);
/* A step of `nmb` microbatches whose loss is normalised by `valid_tokens`
 * (the step's valid labels over every DP rank; 0: gradients scaled by 0). */
void titan_engine_begin_step(struct titan_engine *e, int64_t nmb, int64_t valid_tokens);
/* The step's next microbatch (inputs/labels of `tokens`): forward, loss and
 * backward, gradients added.  The loss sum and valid-label count are this
 * rank's (the last stage's, on every stage, with a pipeline). */
int titan_engine_train_microbatch(struct titan_engine *e, const int32_t *inputs,
				  const int32_t *labels, double *loss_sum, int64_t *n_valid);
/* Forward and loss only (validation); gradients untouched. */
int titan_engine_eval_microbatch(struct titan_engine *e, const int32_t *inputs,
				 const int32_t *labels, double *loss_sum, int64_t *n_valid);
/* After the step's last microbatch: every gradient reduction done. */
int titan_engine_finish_grads(struct titan_engine *e);
/* The global gradient norm (over shards, stages and TP ranks) and
 * torch's clipping coefficient for max_norm. */
int titan_engine_grad_norm(struct titan_engine *e, double max_norm, double *norm, float *coef);
/* AdamW (opt_step counted from 1) with the gradients scaled by coef. */
int titan_engine_optimizer_step(struct titan_engine *e, const struct titan_adamw_hparams *hp,
				int64_t opt_step, float coef);

#endif
