/*
 * titan/estimate.h — memory and throughput per rank before a job runs
 * (titan-estimate, issue 6).  torchtitan had scripts/estimate/estimation.py
 * (FSDP/HSDP only, a fake-tensor run of rank 0; deleted in Feb 2026, see
 * docs/torchtitan-notes.md §7); this is a closed-form model instead, for
 * every layout torchtitan composes (HSDP/FSDP x TP/SP x PP x CP), built on
 * the model description titan-train uses (titan/model.h).
 *
 * Two memory models:
 *  - the CPU model (device "cpu") is titan-train's CPU path as it is: fp32
 *    everything, the arenas of lib/model, the buffers lib/train allocates
 *    once, and the workspace lib/cpu takes per op, each under the tag the
 *    trainer uses, on one rank (--rank) of any DDP/FSDP/HSDP x TP x PP x
 *    CP layout titan-train runs.  It predicts the tagged allocator's peak
 *    to the byte (tests compare it with titan-train's metrics.jsonl);
 *  - the GPU model of titan-train's CUDA path (every other device, one
 *    rank; --model-of titan, the default): the CPU path's buffers (the
 *    same engine) plus lib/cuda's own (cuBLAS workspace, bf16 GEMM
 *    operand buffers, op scratch), replayed through the caching
 *    allocator: its reserved bytes, what titan-train's `memory:` prints
 *    (lib/estimate/gpu_titan.c);
 *  - torchtitan's GPU model (multi-rank layouts, --model-of torchtitan)
 *    is the design of DESIGN.md and torchtitan's practice: bf16 compute copies of fp32 sharded master
 *    weights (FSDP2 mixed precision), fp32 gradients and AdamW moments,
 *    activations of torchtitan's Llama 3 block per activation-checkpointing
 *    mode, FSDP all-gather / reduce-scatter buffers, TP/CP/PP buffers, the
 *    loss buffers, cuBLAS workspace and the caching allocator's overhead.
 *    docs/estimate.md states every assumption and compares it with
 *    torchtitan's published H100 measurements.
 *
 * Memory is given per distinct rank kind: one entry per pipeline rank
 * (ranks of one pipeline rank hold the same amount, up to rounding of
 * uneven shards).  For each, a list of items (what, tag, bytes) present at
 * a sequence of moments of a training step; the peak is the first moment
 * with the largest total, as the tagged allocator records it.
 *
 * Errors: TITAN_E_INVALID naming the constraint for an impossible layout
 * or option; numbers too large for 64 bits are TITAN_E_INVALID too (no
 * wrap-around).  Nothing here allocates device memory or runs a model.
 */
#ifndef TITAN_ESTIMATE_H
#define TITAN_ESTIMATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "titan/config.h"
#include "titan/core.h"
#include "titan/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- devices */

struct titan_est_device {
	char name[32];          /* "h100-80g", "cpu", "custom" */
	char description[64];
	bool cpu;               /* titan-train's CPU path */
	double memory;          /* bytes a process can use (torch's total_memory; RAM for cpu) */
	double peak_flops;      /* dense bf16 FLOP/s (fp32 for cpu; NAN: unknown) */
	double peak_flops_fp8;  /* dense float8 FLOP/s (NAN: no float8) */
	double bw_intra;        /* bytes/s per GPU inside a node (NVLink) */
	double bw_inter;        /* bytes/s per GPU between nodes */
	double reserve;         /* bytes outside the allocator: CUDA context, NCCL */
	double alloc_overhead;  /* caching allocator: reserved = live peak x (1 + this) */
};

/* The table: a100-80g, h100-80g, h200, b200 and cpu (memory = this
 * machine's RAM, peak unknown).  TITAN_E_INVALID naming the known ones. */
int titan_est_device_lookup(const char *name, struct titan_est_device *out);
/* The one GPU peak table (lib/estimate/device.c; titan-train's MFU and the
 * devices above): dense bf16 FLOP/s of a GPU by its name as the driver
 * reports it ("NVIDIA H100 80GB HBM3"), 0 when unknown; float8, NAN when
 * unknown. */
double titan_gpu_peak_flops(const char *name);
double titan_gpu_peak_flops_fp8(const char *name);
int titan_est_ndevices(void);
const char *titan_est_device_name(int i);

/* ------------------------------------------------------------- options */

enum titan_est_ac {
	TITAN_EST_AC_NONE = 0,
	TITAN_EST_AC_SELECTIVE,  /* every ac_every-th block fully checkpointed */
	TITAN_EST_AC_OP,         /* torchtitan's per-op policy (selective 'op') */
	TITAN_EST_AC_FULL,
};

/* parallelism.pipeline_parallel_schedule's enum titan_schedule, by the
 * estimator's names (the one name table is TITAN_SCHEDULES, titan/config.h). */
enum titan_est_schedule {
	TITAN_EST_GPIPE = TITAN_SCHEDULE_GPIPE,
	TITAN_EST_1F1B = TITAN_SCHEDULE_1F1B,
	TITAN_EST_INTERLEAVED_1F1B = TITAN_SCHEDULE_INTERLEAVED_1F1B,
	TITAN_EST_LOOPED_BFS = TITAN_SCHEDULE_LOOPED_BFS,
	TITAN_EST_INTERLEAVED_ZB = TITAN_SCHEDULE_INTERLEAVED_ZB,
	TITAN_EST_ZBV = TITAN_SCHEDULE_ZBV,
};

enum titan_est_loss {
	TITAN_EST_LOSS_CHUNKED = 0, /* fused classifier + CE over token chunks (titan) */
	TITAN_EST_LOSS_EAGER,       /* bf16 logits, fp32 upcast, log-softmax (torchtitan 2024) */
};

/* The memory model of a GPU device (--model-of). */
enum titan_est_gpu_model {
	TITAN_EST_MODEL_TITAN = 0,  /* titan-train's CUDA path (one rank; else torchtitan's) */
	TITAN_EST_MODEL_TORCHTITAN, /* torchtitan's practice (bf16 compute, FSDP2, ...) */
};

enum titan_est_reshard { TITAN_EST_RESHARD_DEFAULT = 0, TITAN_EST_RESHARD_ALWAYS,
			 TITAN_EST_RESHARD_NEVER };

struct titan_est_layout {
	int64_t dp_replicate, dp_shard, tp, pp, cp; /* dp_shard -1: infer from ngpu */
};

struct titan_est_opts {
	struct titan_est_device dev;
	int64_t ngpu;             /* world size */
	int gpus_per_node;
	struct titan_est_layout layout;
	int64_t local_batch;      /* rows per microbatch (training.local_batch_size) */
	int64_t seq_len;
	int64_t accum;            /* gradient-accumulation microbatches per step */
	int64_t pp_microbatch;    /* rows per pipeline microbatch */
	enum titan_est_schedule schedule;
	int64_t pp_layers_per_stage; /* 0: auto (1 or 2 stages per rank) */
	struct titan_strlist pp_split_points; /* "layers.N" starting each stage; borrowed
						 from the config (n 0: none) */
	enum titan_est_ac ac;
	int ac_every;             /* selective: every N-th block */
	int param_bytes;          /* compute copy of the weights, activations: 2 bf16, 4 fp32 */
	int master_bytes;         /* sharded master weights and gradients (training.dtype) */
	int reduce_bytes;         /* gradient reductions (mixed_precision_reduce) */
	int optim_bytes;          /* each AdamW moment */
	bool float8;              /* float8 linears (model.converters float8) */
	enum titan_est_loss loss;
	int64_t ce_chunk;         /* tokens per chunk of the chunked loss */
	enum titan_est_reshard reshard;
	bool loss_parallel;       /* vocab-sharded logits with TP */
	bool async_tp;
	bool cp_alltoall;         /* context_parallel_rotate_method alltoall (else allgather) */
	bool block_causal;        /* training.attn_mask_type block_causal (CPU: document ids) */
	int64_t ep;               /* parallelism.expert_parallel_degree (MoE): > 1 refused, its
				     memory is not modelled yet */
	double mfu;               /* fraction of peak achieved on the executed FLOPs */
	enum titan_est_gpu_model model_of; /* GPU devices: whose memory model */
	bool cuda_attn_titan;     /* titan's CUDA path: TITAN_CUDA_ATTN=titan (titan's
				     attention kernels; else cuDNN's in bf16 mode) */
	/* CPU model */
	int threads;              /* OpenMP threads of titan-train (0: this process's) */
	bool cpu_peak_probe;      /* titan-train measures sgemm peak (metrics.peak_flops unset) */
	bool cpu_metrics_jsonl;   /* titan-train writes metrics.jsonl rows (JSON writer buffer) */
	bool cpu_metrics_all_ranks; /* ... on every rank (metrics.save_for_all_ranks) */
	int64_t cpu_bucket_bytes; /* FSDP units merged up to this size (comm.bucket_size_mb) */
	int64_t rank;             /* cpu: the world rank modelled (0: the largest shard) */
	bool cpu_kernel_rates;    /* cpu: step time from the GEMM kernel's rates (struct
				     titan_est_kernel), not peak x mfu; off with --peak-flops
				     or --mfu */
};

/* Defaults for `dev`, then the job config: batch, seq_len, degrees,
 * schedule, AC mode, dtypes, float8 converter, reshard policy, loss
 * parallel, async TP, and (cpu) whether titan-train probes the peak.
 * ngpu <= 0: the product of the config's degrees (dp_shard -1 counts 1).
 * Gradient accumulation follows training.global_batch_size as titan-train
 * computes it.  TITAN_E_INVALID / TITAN_E_UNSUPPORTED (selective 'op' on
 * the cpu device, as titan-train) naming the key. */
int titan_est_opts_from_config(struct titan_est_opts *o, const struct titan_config *c,
			       const struct titan_est_device *dev, int64_t ngpu);

/* Checks the layout against ngpu and the model (degrees multiply to ngpu,
 * dp_shard -1 inferred; titan-train's own checks: tp and cp as
 * titan_model_check_tp_cp, the stage split and stages per rank as
 * titan_pp_split and titan_pp_stages_per_rank; batch divisible by the
 * pipeline microbatch, tied weights without PP, the cpu device with CP's
 * rotate_method allgather).  Resolves dp_shard in place.
 * TITAN_E_INVALID naming the constraint. */
int titan_est_check(struct titan_est_opts *o, const struct titan_model_dims *d);

/* ------------------------------------------------------------- results */

/* Moments of a training step (the phase the tagged allocator's trace
 * would show there). */
enum titan_est_phase {
	TITAN_EST_PHASE_STARTUP = 0,
	TITAN_EST_PHASE_FORWARD,
	TITAN_EST_PHASE_LOSS,
	TITAN_EST_PHASE_BACKWARD,
	TITAN_EST_PHASE_OPTIMIZER,
};
const char *titan_est_phase_name(enum titan_est_phase p); /* "forward", ... */

#define TITAN_EST_MAX_ITEMS 48
#define TITAN_EST_MAX_MOMENTS 12

struct titan_est_item {
	char name[72];            /* "saved activations, 2 microbatch(es)" */
	enum titan_mem_tag tag;
	int64_t bytes;
	uint32_t moments;         /* bit i: present at moment i */
};

struct titan_est_moment {
	enum titan_est_phase phase;
	char label[12];           /* column label: "forward", "bwd-end", ... */
	char what[40];            /* "end of forward", "loss backward", ... */
	int64_t by_tag[TITAN_MEM_NTAGS];
	int64_t total;
};

struct titan_est_rank {
	int pp_rank;
	int nstages;              /* pipeline stages held by this rank */
	int stages[TITAN_PP_MAX_STAGES_PER_RANK]; /* their indices */
	/* their blocks [l0, l1) (titan_pp_split) */
	int stage_l0[TITAN_PP_MAX_STAGES_PER_RANK], stage_l1[TITAN_PP_MAX_STAGES_PER_RANK];
	int64_t layers;           /* transformer blocks held */
	bool first, last;         /* holds the embedding / the output */
	int64_t params_local;     /* parameter elements held (after TP, before FSDP) */
	int64_t params_shard;     /* ... and after FSDP sharding */
	int nitems;
	struct titan_est_item items[TITAN_EST_MAX_ITEMS];
	int nmoments;
	struct titan_est_moment moments[TITAN_EST_MAX_MOMENTS];
	int peak_moment;          /* first moment with the largest total */
	int64_t peak_bytes;
	int64_t step_peak_bytes;  /* peak without the startup moment (later steps) */
	int64_t at_peak[TITAN_MEM_NTAGS];
	int64_t tag_peak[TITAN_MEM_NTAGS]; /* each tag's own maximum */
	int64_t reserved_bytes;   /* peak with the allocator's overhead */
	/* time of one microbatch on this rank (all its stages), seconds */
	double mb_compute_s, mb_tp_s, mb_cp_s;
};

struct titan_est_perf {
	bool known;               /* false when the device peak is unknown */
	double flops_per_token_torchtitan; /* 6N + 12·L·H·hd·S (MFU's numerator) */
	double flops_per_token_exact;      /* executed: causal attention, recompute */
	double flops_attention, flops_recompute; /* parts of the exact count */
	double peak_flops, mfu;
	double step_s;            /* predicted step time */
	double compute_s;         /* FLOPs / (peak x mfu), per rank per step */
	double tp_s, cp_s;        /* exposed TP and CP collectives per step */
	double fsdp_s;            /* FSDP/HSDP collectives per step (overlapped) */
	double fsdp_exposed_s;
	double pp_bubble_s, pp_p2p_s;
	double recompute_s;       /* part of compute_s spent recomputing */
	double gemm_s, attn_s, score_s, elem_s; /* cpu kernel rates: compute_s's parts
					   (GEMMs, attention products, softmax passes,
					   elementwise ops and AdamW) */
	double tokens_per_s;      /* per device, as torchtitan's tps */
	double mfu_torchtitan;    /* predicted MFU as torchtitan logs it */
	bool tp_intra, cp_intra, fsdp_intra, pp_intra;
};

/* cpu: the sgemm kernel titan-train will run on this machine — the choice
 * of lib/cpu/select.c (titan_blas_choice: the CPU flags, OpenBLAS's own
 * pick, OPENBLAS_CORETYPE), made here without re-executing anything — its
 * nominal peak (titan-train's MFU peak, lib/cpu/peak.c) and the rates the
 * step time is predicted from (lib/estimate/kernel.c, docs/estimate.md):
 *   GEMM FLOPs at peak x gemm_eff, attention's products at peak x attn_eff,
 *   the softmax passes over the score matrix at score_cycles per element
 *   and thread, the elementwise ops and AdamW at elem_cycles. */
struct titan_est_kernel {
	bool known;               /* false: not the cpu device, or no clock known */
	char core[32];            /* "SkylakeX" */
	char how[16];             /* "own", "titan", "user", "fixed", "none", "failed" */
	char describe[192];       /* as titan-train's first log line says it */
	char isa[32];             /* "AVX-512 FMA" */
	int flops_per_cycle, threads;
	double clock_hz;
	char clock_from[32];
	double peak_flops;        /* threads x clock x FLOPs/cycle */
	double gemm_eff, attn_eff, score_cycles, elem_cycles;
};

struct titan_estimate {
	struct titan_model_dims dims;
	struct titan_model_params params;
	struct titan_est_opts opts;   /* resolved (dp_shard inferred) */
	int64_t stages_per_rank, nstages, pp_microbatches;
	int64_t tokens_per_step;      /* per DP group (local rows x seq x accum) */
	int nranks;
	struct titan_est_rank *ranks; /* owned; one per pipeline rank */
	int worst;                    /* rank with the largest reserved bytes */
	int64_t required_bytes;       /* worst reserved + device reserve */
	int64_t device_bytes;
	int64_t margin_bytes;         /* device - required (negative: does not fit) */
	bool fits;
	/* GPU devices: the memory model used — titan-train's CUDA path
	 * (titan_cuda: one rank, the caching allocator's reserved bytes as
	 * titan-train's `memory:` prints them, overhead included) or
	 * torchtitan's; why titan's was not used when asked for */
	bool titan_cuda;
	char model_note[128];
	struct titan_est_perf perf;
	struct titan_est_kernel kernel; /* cpu */
};

/* Estimate `d` under `o` (checked with titan_est_check first).  On
 * failure `e` is left empty (releasing it is fine). */
int titan_estimate_run(const struct titan_model_dims *d, const struct titan_est_opts *o,
		       struct titan_estimate *e);
void titan_estimate_release(struct titan_estimate *e); /* NULL-safe */

/* The --json object (docs/estimate.md): format "titan-estimate", version 1. */
void titan_estimate_json(const struct titan_estimate *e, struct titan_json *j);
/* The text report (what titan-estimate prints by default). */
int titan_estimate_print(const struct titan_estimate *e, FILE *fp);

/* ------------------------------------------------------- measure pass
 *
 * A dry run of the real engine, as ggml's measure pass: a titan_allocator
 * over the memory backend below counts every block exactly as titan-train's
 * (bytes as requested, tags, peaks, the breakdown at the peak) while the
 * blocks are address space only (mmap MAP_NORESERVE, unmapped on free: no
 * memory is committed).  With `guard` they are PROT_NONE, so host code that
 * touches a buffer during the dry run faults instead of silently working;
 * without, touched pages are real (committed as touched; a block the
 * kernel's overcommit accounting refuses is address space only). */
void titan_measure_mem_backend(struct titan_mem_backend *out, bool guard);
/* Blocks that are not even address space: a distinct never-mapped address
 * per block (`next` is the backend's counter), for an engine that is built
 * but not run (its buffer plan, at any size). */
void titan_measure_unmapped_backend(struct titan_mem_backend *out, uintptr_t *next);
/* A backend whose compute and buffer ops do nothing (buffers are never
 * read or written; sums and losses come out 0, no token valid) but whose
 * buffers come from `alloc` and whose ops take and give back, from
 * `alloc`, the workspace lib/cpu's ops take for `nthreads` threads (<= 0:
 * 1): attention tiles, the loss's chunk logits, the norm's partial sums.
 * Pair with an instant communicator (titan/dist.h) for other ranks. */
struct titan_backend;
void titan_backend_measure_init(struct titan_backend *be, struct titan_allocator *alloc,
				int nthreads);

/* ------------------------------------------------------------- search */

struct titan_est_candidate {
	struct titan_est_opts opts;   /* layout, AC, microbatching */
	int64_t required_bytes, margin_bytes;
	bool fits;
	double tokens_per_s, step_s, mfu_torchtitan;
	struct titan_est_perf perf;
	char reason[160];
};

struct titan_est_search {
	int64_t considered, valid, fitting;
	int n;                        /* candidates kept, best first */
	struct titan_est_candidate *best; /* owned */
};

/* Every valid (dp_replicate, dp_shard, tp, pp, cp, AC, microbatch) for
 * base->ngpu GPUs: layouts that do not fit are dropped, the rest ranked by
 * predicted tokens/s per device (then by memory); the top `top` kept with
 * the reason each one wins (or loses against the first).  The batch per
 * data-parallel rank follows training.global_batch_size when the config
 * sets it (global / dp rows, split into microbatches), else the config's
 * local batch.  Needs a known device peak (TITAN_E_INVALID otherwise). */
int titan_est_search_run(const struct titan_model_dims *d, const struct titan_est_opts *base,
			 int64_t global_batch, int top, struct titan_est_search *s);
void titan_est_search_release(struct titan_est_search *s);
void titan_est_search_json(const struct titan_est_search *s, const struct titan_model_dims *d,
			   const struct titan_est_opts *base, struct titan_json *j);
int titan_est_search_print(const struct titan_est_search *s, const struct titan_model_dims *d,
			   const struct titan_est_opts *base, FILE *fp);

/* Short text of a layout / AC mode for tables: "dp_shard 8 x tp 8 x pp 4". */
const char *titan_est_layout_str(const struct titan_est_opts *o, char *buf, size_t n);
const char *titan_est_ac_str(const struct titan_est_opts *o, char *buf, size_t n);
const char *titan_est_schedule_name(enum titan_est_schedule s);

#ifdef __cplusplus
}
#endif
#endif
