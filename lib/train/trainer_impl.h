/*
 * trainer_impl.h — the trainer's state, shared by its files (private to
 * lib/train): trainer.c (the loop and construction), engine.c (the model
 * on its layout), metrics.c (the metrics row and its sinks),
 * trainer_setup.c, trainer_device.c, trainer_profile.c and trainer_ckpt.c
 * (checkpoints).
 */
#ifndef TITAN_TRAINER_IMPL_H
#define TITAN_TRAINER_IMPL_H

#include <stdio.h>

#include "titan/ckpt.h"
#include "titan/config.h"
#include "titan/data.h"
#include "titan/dist.h"
#include "titan/ops.h"
#include "titan/trace.h"
#include "titan/train.h"
#include "engine.h"
#include "metrics.h"

struct titan_trainer {
	struct titan_config cfg;
	struct titan_dist *dist;       /* not owned */
	struct titan_model_dims dims;
	struct titan_layout layout;    /* this rank's (titan_trainer_check_layout) */
	struct titan_llama_opts mo;
	struct titan_backend be;
	bool be_ready;
	bool cuda;                     /* training.device resolved to cuda */
	struct titan_allocator *dev_alloc; /* cuda: device memory of the model */
	struct titan_allocator *mem;   /* what the memory line reports */
	/* The model's buffers are reached from the host only through the
	 * backend's buf_get/buf_set: on CUDA, or on the CPU with the test
	 * hook TITAN_STAGED_COMM=1 (trainer_device.c).  Then the mesh's
	 * communicators (all but the world's) are staged ones
	 * (titan_comm_staged_new) and checkpoints go through ckpt_host. */
	bool staged;
	struct titan_comm *comm[TITAN_DIM_NALL]; /* staged: the wrapped mesh, else NULL */
	float *ckpt_host;              /* staged: params, exp_avg, exp_avg_sq on the host */
	struct titan_engine *engine;   /* the model on this layout (engine.h) */
	struct titan_llama *model;     /* the engine's, for checkpoints */
	struct titan_loader *train, *val;
	int64_t dp_degree, dp_rank, fsdp_degree;
	int64_t accum, n;              /* microbatches per step, tokens per microbatch */
	int32_t *inputs, *labels;      /* [accum][n] */
	int64_t val_rows, val_seq;     /* validation batch: rows per rank x seq_len */
	int32_t *val_inputs, *val_labels; /* [val_rows][val_seq] when not the
					     training shape, else NULL */
	FILE *jsonl;                   /* rank 0 (all ranks with save_for_all_ranks) */
	char jsonl_path[4200];
	struct titan_tfevents *tb;     /* metrics.enable_tensorboard (rank 0, or all ranks) */
	int lock_fd;                   /* job.dump_folder's lock + 1 (rank 0), 0: none */
	double peak_flops, flops_per_token, total_mem;
	char peak_from[320];      /* where peak_flops came from, for the log */
	int verbosity;
	bool print_rank;               /* this rank prints step lines */
	char line_prefix[32];
	bool plain_steps;              /* step lines without torchtitan's logger head */
	double rank_loss;              /* this rank's last step: its loss sum / its
					  valid tokens (-inf: none), for max_loss */
	/* metrics since the last log line */
	uint64_t t_last, data_ns;
	int64_t tokens_since, steps_since;
	/* checkpoints */
	char ckpt_dir[4096];
	int64_t start_step, tokens_seen0, opt_steps0;
	struct titan_ckpt_async *ckpt_async; /* checkpoint.async_mode: async */
	double ckpt_blocked_s;         /* since the last log line */
	struct titan_loader_state *loader_states; /* [dp_degree] */
	/* profiling */
	struct titan_trace *trace;     /* open during a profiled step */
	int64_t trace_seq0;            /* first flight-recorder entry of the traced step */
	FILE *memtrace;
	int64_t step;
	uint16_t phase;
	int stopped_by;                /* signal that ended the run, or 0 */
	int64_t nonfinite_run;         /* non-finite steps in a row (skip_nonfinite) */
	/* MoE: tokens per expert [n_layers][num_experts] over every DP rank,
	 * summed since the last log line (metrics.jsonl's moe_load) */
	int64_t *moe_load;
};

static inline struct titan_comm *titan_trainer_comm(const struct titan_trainer *t,
						    enum titan_mesh_dim d)
{
	return t->comm[d] ? t->comm[d] : t->dist->comm[d];
}

/* trainer_setup.c: the checks, loaders, dump-folder lock, start-up lines */
int titan_mkdirs(const char *path);
int titan_trainer_check_layout(struct titan_trainer *t);
int titan_trainer_check_supported(const struct titan_config *c);
int titan_trainer_open_loaders(struct titan_trainer *t);
/* block_causal: the document boundaries (EOS, else BOS id) of the training
 * shards into the model options; TITAN_E_INVALID when they have neither. */
int titan_trainer_set_docs(struct titan_trainer *t);
int titan_trainer_lock_dump_folder(struct titan_trainer *t);
int titan_trainer_log_ranks(struct titan_trainer *t);
void titan_trainer_log_start(const struct titan_trainer *t);
/* trainer_device.c: training.device's backend; the peak MFU is of */
int titan_trainer_open_backend(struct titan_trainer *t, const struct titan_trainer_opts *o);
void titan_trainer_choose_peak(struct titan_trainer *t);
/* trainer_profile.c: phases, model spans, per-step traces, memory trace */
void titan_trainer_set_phase(struct titan_trainer *t, uint16_t phase);
struct titan_llama_hooks titan_trainer_model_hooks(struct titan_trainer *t);
int titan_trainer_trace_step_begin(struct titan_trainer *t, int64_t step);
int titan_trainer_trace_step_end(struct titan_trainer *t);
int titan_trainer_memtrace_open(struct titan_trainer *t);
int titan_trainer_memtrace_close(struct titan_trainer *t);
void titan_trainer_profile_release(struct titan_trainer *t);
/* trainer_ckpt.c */
int titan_trainer_ckpt_setup(struct titan_trainer *t);
int titan_trainer_ckpt_save(struct titan_trainer *t, int64_t step, bool last, int64_t tokens_seen,
			    int64_t opt_steps);
int titan_trainer_ckpt_reap(struct titan_trainer *t, bool block);
void titan_trainer_ckpt_release(struct titan_trainer *t);
/* metrics.c: metrics.jsonl and the TensorBoard events (rank 0, or every
 * rank with metrics.save_for_all_ranks), a logged step's row to every
 * sink (the console line when print_rank), a validation pass's; close
 * keeps an error rc already there. */
int titan_trainer_metrics_open(struct titan_trainer *t);
int titan_trainer_log_step(struct titan_trainer *t, int64_t step, double loss, double norm,
			   double lr, int64_t tokens_seen);
int titan_trainer_log_validation(struct titan_trainer *t, struct titan_validation_row *r);
int titan_trainer_metrics_close(struct titan_trainer *t, int rc);

#endif
