/*
 * metrics.h — the trainer's metrics, private to lib/train (and its unit
 * test): one typed row per logged step, filled once by the trainer
 * (metrics.c, titan_trainer_log_step) and rendered by three sinks — the
 * console line, a metrics.jsonl object, TensorBoard scalars under
 * torchtitan's tags — and the same for a validation pass.
 */
#ifndef TITAN_TRAIN_METRICS_H
#define TITAN_TRAIN_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "titan/core.h"
#include "titan/trace.h"

/* A logged training step.  Times are per step, averaged since the last
 * logged one; memory peaks are since then too. */
struct titan_metrics_row {
	int64_t step;
	double loss, grad_norm, lr;
	double max_loss;               /* torchtitan's global_max_loss: the largest
					  rank's own average (its loss sum / its
					  valid tokens) */
	int64_t tokens_seen;           /* over every DP rank, since the run began */
	double tps, tflops, mfu_pct;   /* this rank's */
	double step_time_s, data_time_s, checkpoint_blocked_s;
	/* the tagged allocator (host, or the CUDA device arenas) */
	int64_t memory_peak_bytes;
	int64_t memory_peak_by_tag[TITAN_MEM_NTAGS]; /* each tag at the total's peak */
	/* torchtitan's DeviceMemoryMonitor figures: the caching allocator's on
	 * CUDA, the tagged peak as both active and reserved on the CPU */
	bool cuda;                     /* retries, OOMs and the caching figures apply */
	int64_t max_active, max_reserved, num_alloc_retries, num_ooms;
	double total_mem;              /* bytes the percentages are of */
	/* world_size > 1: the largest reserved peak and the slowest step of any rank */
	int world_size;
	double max_rank_reserved, max_rank_step_time_s;
	/* MoE: tokens per expert since the last log [n_layers][moe_experts]
	 * over every DP rank (NULL: dense); is_moe[l] marks the MoE blocks */
	const int64_t *moe_load;
	const bool *moe_layer;
	int64_t moe_layers, moe_experts;
};

struct titan_validation_row {
	int64_t step;
	double loss, tokens, tps;
	/* the pass's memory peaks, as a step row's (max_active, max_reserved) */
	int64_t max_active, max_reserved;
	double total_mem;
};

/* The console sinks: "<prefix>step: ..." (flushed), "<prefix>validate
 * step: ...", the prefix torchtitan's logger head (titan_log_head) after
 * "[rankR]:" where several ranks print. */
void titan_metrics_print(FILE *f, const char *prefix, const struct titan_metrics_row *r);
void titan_validation_print(FILE *f, const char *prefix, const struct titan_validation_row *r);
/* A writer for one metrics.jsonl row (of a model with moe_layers MoE
 * blocks; 0: dense, or a validation row): its buffer of
 * titan_metrics_row_bytes reserved whole (false, with titan_error, out of
 * memory; j is released either way by titan_json_release). */
bool titan_metrics_row_begin(struct titan_json *j, int64_t moe_layers);
/* The metrics.jsonl objects (appended to j). */
void titan_metrics_json(struct titan_json *j, const struct titan_metrics_row *r);
void titan_validation_json(struct titan_json *j, const struct titan_validation_row *r);
/* One TensorBoard event of the row's scalars at `wall_time`. */
int titan_metrics_tensorboard(struct titan_tfevents *e, const struct titan_metrics_row *r,
			      double wall_time);
int titan_validation_tensorboard(struct titan_tfevents *e, const struct titan_validation_row *r,
				 double wall_time);
/* Append j as one line of `f` (named `path` in messages), on disk when this
 * returns.  A write that fails (a full disk) leaves the file at its last
 * complete row — the partial one is cut off and stdio's buffer dropped, so
 * that closing the file cannot append it later — and is TITAN_E_IO. */
int titan_metrics_write_line(FILE *f, const char *path, struct titan_json *j);

#endif
