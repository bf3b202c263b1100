/*
 * est_impl.h — private helpers of lib/estimate: item and moment lists of a
 * rank, checked 64-bit arithmetic, the two memory models and the
 * throughput model.
 */
#ifndef TITAN_EST_IMPL_H
#define TITAN_EST_IMPL_H

#include "titan/dist.h"
#include "titan/estimate.h"
#include "titan/train.h"

#include <math.h>

#define GiB 1073741824.0

/* Checked arithmetic: on overflow the flag is set and the result is 0. */
struct est_num {
	bool overflow;
};
int64_t est_mul(struct est_num *n, int64_t a, int64_t b);
int64_t est_add(struct est_num *n, int64_t a, int64_t b);
/* A byte count from a double: overflow when not below 2^62. */
int64_t est_bytes(struct est_num *n, double v);

/* Moment masks are built from indices returned by est_moment. */
#define EST_AT(i) (1u << (i))
#define EST_ALL 0xffffffffu

int est_moment(struct titan_est_rank *r, enum titan_est_phase ph, const char *label,
	       const char *what);
/* Adds an item (nothing when bytes == 0).  Bytes must be >= 0. */
void est_item(struct titan_est_rank *r, const char *name, enum titan_mem_tag tag,
	      int64_t bytes, uint32_t moments);
/* Totals per moment, peak (first maximal moment), step peak, tag peaks,
 * reserved bytes with the allocator overhead. */
void est_rank_finish(struct titan_est_rank *r, double alloc_overhead, struct est_num *n);

/* Pipeline geometry of a checked layout. */
/* Stages per rank (v) and the split of the blocks over pp·v stages
 * (stages[s]: global stage s), titan-train's own: every pipeline rank's
 * stages of the layout titan_layout_resolve makes of the options
 * (titan_layout_stages_of: titan_pp_stages_per_rank, titan_pp_split's
 * split points and layers_per_stage; LoopedBFS's as Interleaved1F1B's).
 * Without PP one stage of every block. */
int est_pipeline(const struct titan_est_opts *o, const struct titan_model_dims *d,
		 int64_t *v, struct titan_pp_stage **stages);
/* titan-train's schedule of an estimate schedule (the stage count and
 * the stage-to-rank map are titan-train's; LoopedBFS counts and maps its
 * stages as Interleaved1F1B). */
enum titan_pp_schedule est_train_schedule(enum titan_est_schedule s);
/* Stage index of a rank's k-th stage: titan_pp_stage_of (loop style
 * r + k·pp, or V style for ZBVZeroBubble). */
int64_t est_stage_of(const struct titan_est_opts *o, int64_t rank, int64_t k, int64_t v);
bool est_multi_stage(enum titan_est_schedule s);

/* Block b (global index) is fully checkpointed in the layer-selective sense. */
bool est_block_ckpt(const struct titan_est_opts *o, int64_t b);

/* FSDP's buffers (tag comm, bytes) at the moments of a step of titan-train's
 * CPU engine on rank o->rank: the most live while the forward's, the
 * loss's and the backward's hooks allocate, and live at the attention
 * forward, the loss, a recomputation's attention forward and the attention
 * backward — from a dry run of the engine (dry.c). */
enum { EST_FSDP_FWD_COMM, EST_FSDP_FWD_ATTN, EST_FSDP_LOSS, EST_FSDP_BWD_COMM,
       EST_FSDP_RECOMPUTE, EST_FSDP_BWD_ATTN, EST_FSDP_NKINDS };
/* titan-train's config of the estimate's options (the keys the engine and
 * titan_layout_resolve read; the split points borrowed), and its release. */
int est_dry_config(const struct titan_est_opts *o, struct titan_config *c);
void est_dry_config_release(struct titan_config *c);
/* titan-train's layout of the estimate's rank (titan_layout_resolve of
 * the config the dry run builds). */
int est_dry_layout(const struct titan_model_dims *d, const struct titan_est_opts *o,
		   struct titan_layout *l);
int est_dry_fsdp(const struct titan_model_dims *d, const struct titan_est_opts *o,
		 int64_t max[EST_FSDP_NKINDS]);
/* The dry run itself, with sequences of seq_len tokens: the FSDP moments
 * above, and the allocator's stats once the engine is built and after the
 * step (what stays: the engine's buffers for the run). */
struct est_dry {
	int64_t fsdp[EST_FSDP_NKINDS];
	struct titan_mem_stats built, after;
	struct titan_buf_entry *plan;  /* the model's buffer plan (titan_llama_plan) */
	int nplan;
};
int est_dry_run(const struct titan_model_dims *d, const struct titan_est_opts *o,
		int64_t seq_len, struct est_dry *out);
/* The engine only built, at the options' sequence length: its model's
 * buffer plan and the allocator's stats (`built`; `after` stays 0). */
int est_dry_plan(const struct titan_model_dims *d, const struct titan_est_opts *o,
		 struct est_dry *out);
void est_dry_release(struct est_dry *r);
/* The dry run on a device's terms (gpu_titan.c: titan-train's CUDA
 * path): the blocks come from `mem` (the caching allocator over address
 * space), the backend from `init` (its ops take the device's buffers from
 * the allocator it is given; released after the engine), `steps` steps
 * run at the options' sequence length. */
struct est_dry_dev {
	struct titan_mem_backend mem;
	int (*init)(struct titan_backend *be, struct titan_allocator *a, void *ctx);
	void *ctx;
	int steps;
};
int est_dry_device(const struct titan_model_dims *d, const struct titan_est_opts *o,
		   const struct est_dry_dev *dev, struct est_dry *out);
/* The rows of the model's buffer plan (titan_llama_plan), one per role,
 * as the report names them, present at `moments` (cpu.c). */
void est_plan_rows(struct titan_est_rank *r, const struct est_dry *p, int64_t nmb,
		   uint32_t moments, struct est_num *n);

/* A byte count that lib/cpu or lib/train states (the CPU ops' workspace,
 * titan_cpu_*_ws in titan/ops.h; the trainer's token buffers,
 * titan_trainer_token_bytes) in checked arithmetic: -1 (past 64 bits)
 * sets the overflow flag. */
int64_t est_stated(struct est_num *n, int64_t bytes);

int est_cpu_model(const struct titan_model_dims *d, const struct titan_est_opts *o,
		  struct titan_estimate *e);
int est_gpu_model(const struct titan_model_dims *d, const struct titan_est_opts *o,
		  struct titan_estimate *e);
/* titan-train's CUDA path on one GPU (gpu_titan.c) */
int est_gpu_titan_model(const struct titan_model_dims *d, const struct titan_est_opts *o,
			struct titan_estimate *e);
void est_perf(const struct titan_model_dims *d, struct titan_estimate *e);
/* cpu: e->kernel, the GEMM kernel titan-train will run and its rates (kernel.c) */
void est_cpu_kernel(struct titan_estimate *e);

#endif
