/*
 * titan/train.h — training-loop arithmetic shared by titan-train and its
 * tests: torchtitan's learning-rate schedule (components/lr_scheduler.py,
 * linear warmup + stable + decay) and gradient-accumulation geometry
 * (train.py).  See docs/torchtitan-notes.md §2.
 */
#ifndef TITAN_TRAIN_H
#define TITAN_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "titan/config.h"
#include "titan/dist.h"
#include "titan/model.h"
#include "titan/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* enum titan_decay_type (TITAN_DECAY_LINEAR, _SQRT, _COSINE) is lr_scheduler.decay_type's
 * enum of titan/config.h. */

/* torchtitan's warmup-stable-decay schedule as LambdaLR multipliers.
 * From training.steps (or lr_scheduler.total_steps when > 0) S:
 *   warmup = min(lr_scheduler.warmup_steps, S)
 *   decay  = round(S · decay_ratio) (Python's round: half to even), at most
 *            S − warmup; without decay_ratio: S − warmup
 *   stable = S + 1 − warmup − decay   (a virtual last step keeps lr > 0) */
struct titan_lr_schedule {
	int64_t warmup, stable, decay;
	enum titan_decay_type decay_type;
	double min_lr_factor;
	int clamped; /* bit 1: warmup clamped to S; bit 2: decay clamped */
};

void titan_lr_schedule_init(struct titan_lr_schedule *s, const struct titan_config *c);
/* Multiplier of the base lr at LambdaLR step `step0` (0-based: training
 * step k, counted from 1, runs with step0 = k − 1):
 *   step0 < warmup:          (step0 + 1) / warmup
 *   step0 < warmup + stable: 1
 *   else p = (step0 + 1 − warmup − stable) / decay and f = 1 − p (linear),
 *        1 − sqrt(p) (sqrt) or (1 + cos(π p)) / 2 (cosine); the result is
 *        min_lr_factor + (1 − min_lr_factor)·f. */
double titan_lr_factor(const struct titan_lr_schedule *s, int64_t step0);

/* Gradient accumulation (torchtitan train.py): global_batch_size −1 means
 * local_batch_size · dp_degree; it must be a multiple of that product;
 * the number of microbatches per step is global / (local · dp). */
int titan_grad_accum_steps(const struct titan_config *c, int64_t dp_degree, int64_t *out);

/* ------------------------------------------------------ the model step */

/* Activation checkpointing (torchtitan activation_checkpoint): none, full
 * (every block recomputed in backward), selective every N-th block: block i
 * is recomputed when (i + 1) % N == 0 (torchtitan's global counter
 * `_layer_sac_count % ac_freq == 0` after increment; N = 1: every block),
 * or selective "op", torchtitan's per-op policy: every block keeps the
 * outputs of the attention (and its log-sum-exp) and of every second
 * matmul in forward order (wq, wv, w1, w2: q, v, w1·x and the block
 * output), and backward recomputes the rest (both RMSNorms, wk, wo, w3,
 * RoPE of k, SwiGLU) from them.  (q is kept after RoPE, the same bytes as
 * torchtitan's saved wq output.)  Recomputation runs the same
 * deterministic ops, so losses and gradients are bit-identical with and
 * without it. */
/* Default tokens per classifier + cross-entropy chunk (the logits of one
 * chunk are the loss's workspace). */
#define TITAN_CE_CHUNK 1024

struct titan_comm;

enum titan_ac_mode { TITAN_AC_NONE, TITAN_AC_FULL, TITAN_AC_SELECTIVE, TITAN_AC_SELECTIVE_OP };

struct titan_llama_opts {
	int64_t batch, seq;          /* microbatch rows and sequence length */
	enum titan_ac_mode ac;
	int ac_every;                /* selective: every N-th block */
	int64_t ce_chunk;            /* tokens per classifier/CE chunk (0: TITAN_CE_CHUNK) */
	bool exclude_norms_embeddings_from_wd;
	/* training.attn_mask_type block_causal: a token attends only to the
	 * earlier tokens of its own document (torchtitan's document mask).
	 * Documents end at input id `doc_eos` (the token after an EOS starts
	 * the next one) or, when doc_eos is -1, start at input id `doc_bos`;
	 * the trainer sets them from the shards' header (both -1: refused). */
	bool block_causal;
	int64_t doc_eos, doc_bos;
	/* The parameter table's options, what the rank holds of every
	 * parameter (FSDP shard, TP slice, experts, stages: titan/model.h),
	 * read by titan_llama_new only: titan_parallelize gives its layout's
	 * (titan_layout_table_opts).  NULL: from shard_rank/shard_degree, the
	 * tp and ep groups, ep_shard_rank/ep_shard_degree and stages below. */
	const struct titan_param_table_opts *table;
	/* FSDP: the arenas hold dim-0 shard `shard_rank` of `shard_degree`
	 * (titan/model.h); 0 or 1 degree: unsharded.  A sharded model computes
	 * only with its groups bound to unsharded buffers (group hooks below). */
	int shard_rank, shard_degree;
	/* Tensor parallelism (torchtitan's Llama plan with sequence
	 * parallelism): `tp` is the TP group (NULL or one rank: none).  The
	 * table holds this rank's TP slice of every parameter (titan/model.h);
	 * the residual stream and the norms hold tokens [r·N/tp, (r+1)·N/tp) of
	 * the microbatch's N (flattened batch × sequence), all-gathered before
	 * attention, the FFN and the output layer and reduce-scattered after
	 * wo, w2 and the embedding.  `loss_parallel`: cross-entropy on the
	 * vocabulary-sharded logits (max, sum of exponentials and the target
	 * logit all-reduced); false (disable_loss_parallel) gathers each
	 * chunk's logits instead.  The same losses either way. */
	struct titan_comm *tp;
	bool loss_parallel;
	/* Context parallelism: `cp` the CP group (NULL or one rank: none); the
	 * model takes whole microbatches (batch x seq tokens) and computes the
	 * seq/cp tokens of each row it holds — chunks r and 2·cp − 1 − r of
	 * 2·cp (torchtitan's causal load balancing) — with RoPE at their
	 * positions and attention against the all-gathered keys and values;
	 * the loss sum is over its tokens (sum it over the group).  `cp_ring`
	 * (rotate_method alltoall): the keys and values go around the group's
	 * ring instead (ring attention), block by block, merged by
	 * log-sum-exp; no whole-sequence buffers. */
	struct titan_comm *cp;
	bool cp_ring;
	/* Expert parallelism: `ep` the EP group (NULL or one rank: none); rank
	 * r of ep runs experts [r·E/ep, (r + 1)·E/ep) of every MoE block on
	 * the tokens the group routes to them (moe.h titan_moe_dispatch_ep)
	 * and holds only those rows of the stacked w1/w2/w3 (parameters,
	 * gradients, optimizer moments): FSDP shards them over the efsdp
	 * peers, shard `ep_shard_rank` of `ep_shard_degree` (= shard_degree x
	 * tp / ep; 0: from shard_rank and the TP rank, the EP ranks innermost
	 * of dp_shard x cp x tp); every other parameter is sharded as without
	 * EP (titan/model.h titan_param_table_opts).  Under TP the experts
	 * are whole and each TP rank routes its own sequence shard (EP x TP,
	 * torchtitan's ETP 1). */
	struct titan_comm *ep;
	int ep_shard_rank, ep_shard_degree;
	/* Pipeline parallelism: with stages.n > 0 the model is the rank's
	 * stages (interleaved schedules hold several, in order): their
	 * blocks, the embedding on a `first` stage, the final norm, output
	 * and loss on a `last` one (the table holds only those parameters,
	 * titan/model.h); pp_microbatches sets of activations (a schedule's
	 * microbatches in flight); `pp` the stage group (grad norm). */
	struct titan_pp_stages stages;
	int64_t pp_microbatches;
	struct titan_comm *pp;
	/* zero-bubble schedules: backward split into an input pass and a
	 * weight pass per (stage, microbatch) (titan_llama_pp_backward_input
	 * / _weight); each microbatch then keeps, per block of its stages but
	 * the first global stage, the weight gradients' inputs until its
	 * weight pass (TITAN_MEM_ACTIVATIONS) */
	bool pp_split_backward;
};

/* A Llama 3 model on a backend: parameters, gradients and AdamW moments in
 * arenas of one layout (lib/model), RoPE table, and activation buffers
 * allocated once (TITAN_MEM_ACTIVATIONS; per block a full set for blocks
 * that keep their activations, the block input only for checkpointed ones,
 * the input and the five saved tensors (q, v, attention output, lse, w1·x)
 * for "op", plus one recompute set and the backward scratch
 * (TITAN_MEM_WORKSPACE)). */
struct titan_llama;

int titan_llama_new(const struct titan_model_dims *d, const struct titan_llama_opts *o,
		    struct titan_backend *be, struct titan_allocator *alloc,
		    struct titan_llama **out);
void titan_llama_free(struct titan_llama *m);
const struct titan_param_table *titan_llama_table(const struct titan_llama *m);
/* The model's buffer plan: every buffer titan_llama_new allocates (the
 * arenas, RoPE table, CP's and TP's buffers, each microbatch's
 * activation set, the zero-bubble stash, the scratch), in allocation
 * order, each with the report row it belongs to (titan-estimate sums the
 * plan by role for its named rows), its tag, bytes and lifetime.  Every
 * such buffer lives for the run; TITAN_BUF_MICROBATCH marks one copy per
 * microbatch in flight (`mb`).  What the ops take for a moment (the
 * backend's workspace), the pipeline's and FSDP's buffers and the
 * trainer's inputs are not the model's. */
enum titan_buf_role {
	TITAN_BUF_WEIGHTS, TITAN_BUF_GRADS, TITAN_BUF_MOMENTS, TITAN_BUF_ROPE,
	TITAN_BUF_CP_POSITIONS, TITAN_BUF_CP_LABELS, TITAN_BUF_CP_GATHERED,
	TITAN_BUF_BLOCK_INPUTS, TITAN_BUF_SAVED_OP, TITAN_BUF_RECOMPUTE_OP, TITAN_BUF_SAVED,
	TITAN_BUF_RECOMPUTE, TITAN_BUF_FINAL_NORM, TITAN_BUF_LOSS_GRAD, TITAN_BUF_ZB_FINAL_GRAD,
	TITAN_BUF_ZB_STASH, TITAN_BUF_ZB_INPUTS, TITAN_BUF_ZB_ONES, TITAN_BUF_TOKEN_IDS,
	TITAN_BUF_DOC_IDS, TITAN_BUF_CHUNK_IDS,
	TITAN_BUF_SCRATCH, TITAN_BUF_TP_SP, TITAN_BUF_TP_LOSS, TITAN_BUF_TP_LOGITS,
	TITAN_BUF_MOE_ROUTER, TITAN_BUF_MOE_EXPERTS, /* a MoE block's activations */
	TITAN_BUF_NROLES
};
enum titan_buf_life { TITAN_BUF_RUN, TITAN_BUF_MICROBATCH };
struct titan_buf_entry {
	enum titan_buf_role role;
	enum titan_mem_tag tag;
	enum titan_buf_life life;
	int64_t bytes;
	int layer;   /* the block it belongs to, or -1 */
	int mb;      /* TITAN_BUF_MICROBATCH: the microbatch set, else -1 */
};
/* The row's name (titan-estimate's report; the four per-block roles —
 * block inputs, saved tensors, the stash — are the stem the report adds
 * its counts to). */
const char *titan_buf_role_name(enum titan_buf_role r);
/* The plan of a model built by titan_llama_new: *n entries. */
const struct titan_buf_entry *titan_llama_plan(const struct titan_llama *m, int *n);
/* The arenas, in the backend's memory (host code: titan_llama_state_get). */
struct titan_param_arena *titan_llama_params(struct titan_llama *m);
struct titan_param_arena *titan_llama_grads(struct titan_llama *m);
/* The AdamW moments (arenas of the parameters' layout, backend memory). */
void titan_llama_moments(struct titan_llama *m, float **exp_avg, float **exp_avg_sq);
/* torchtitan init_weights from `seed` (lib/model). */
int titan_llama_init_weights(struct titan_llama *m, uint64_t seed);
/* The parameters and AdamW moments between the backend's arenas and host
 * memory (checkpoints): each of params, exp_avg, exp_avg_sq that is not
 * NULL is arena_floats floats of host memory, copied with the backend's
 * buf_get (state_get) or buf_set (state_set).  The model's memory is the
 * backend's (device memory on CUDA): host code reads and writes its
 * arenas only through these. */
int titan_llama_state_get(struct titan_llama *m, float *params, float *exp_avg,
			  float *exp_avg_sq);
int titan_llama_state_set(struct titan_llama *m, const float *params, const float *exp_avg,
			  const float *exp_avg_sq);
int titan_llama_zero_grads(struct titan_llama *m);

/* One microbatch: inputs/labels [batch·seq] (labels < 0 are ignored).
 * Forward, loss and backward; gradients of loss_sum·grad_scale are ADDED
 * to the gradient arena (zero it once per step).  Returns the summed loss
 * over valid labels and their count.  With `backward` false: forward and
 * loss only (validation), gradients untouched. */
int titan_llama_step(struct titan_llama *m, const int32_t *inputs, const int32_t *labels,
		     float grad_scale, bool backward, double *loss_sum, int64_t *n_valid);
/* Pipeline stages (opts.stages.n > 0): microbatch k (0 .. pp_microbatches
 * - 1) forward — from `inputs` on the first stage, else from the buffer
 * titan_llama_pp_input(m, k), which the caller fills with the previous
 * stage's output (titan_llama_pp_boundary_floats floats) — and on the last
 * stage the loss (its gradient kept for the microbatch's backward when
 * `backward`); other stages return a loss of 0 over 0 tokens and leave
 * their output in titan_llama_pp_output(m, k).  Backward of microbatch k:
 * on the last stage from its loss, else from titan_llama_pp_grad(m), which
 * the caller fills with the next stage's gradient; it leaves the gradient
 * of the stage's input there (send it before the next backward). */
/* `v`: the rank's stage (0 .. titan_llama_pp_nstages - 1, interleaved
 * schedules hold several; 0 otherwise). */
int titan_llama_pp_nstages(const struct titan_llama *m);
int titan_llama_pp_forward(struct titan_llama *m, int v, int k, const int32_t *inputs,
			   const int32_t *labels, float grad_scale, bool backward,
			   double *loss_sum, int64_t *n_valid);
int titan_llama_pp_backward(struct titan_llama *m, int v, int k);
/* The same backward in two passes (opts.pp_split_backward; torch's
 * stage.backward_one_chunk(full_backward=False) then
 * backward_weight_one_chunk).  The input pass computes the gradient of the
 * stage's input only — through the final norm and every block, recomputing
 * checkpointed blocks as titan_llama_pp_backward does — leaving it in
 * titan_llama_pp_grad(m), and stashes, per block, the output gradient of
 * each linear layer (w2, wo, and wq/wk/wv's after RoPE; w1/w3's are the
 * block's SwiGLU buffers) and of both RMSNorms, plus copies of the layer
 * inputs that live in shared recompute buffers (checkpointed blocks,
 * selective "op").  The weight pass adds the weight gradients from the
 * stash (the same GEMM and norm calls as the fused backward, so the same
 * bits) and reads no parameter: it runs pre_weight / post_backward group
 * hooks, pre_backward only ran in the input pass.  On the first global
 * stage, as torch's stage 0 (no input gradient to send), the input pass
 * does nothing and the weight pass is the whole backward, from
 * titan_llama_pp_grad(m) as titan_llama_pp_backward.  The classifier's
 * weight gradient stays with the loss in the forward (fused with it). */
int titan_llama_pp_backward_input(struct titan_llama *m, int v, int k);
int titan_llama_pp_backward_weight(struct titan_llama *m, int v, int k);
float *titan_llama_pp_input(struct titan_llama *m, int v, int k);
float *titan_llama_pp_output(struct titan_llama *m, int v, int k);
float *titan_llama_pp_grad(struct titan_llama *m);
int64_t titan_llama_pp_boundary_floats(const struct titan_llama *m);
/* Logits of the last forward are not kept (the classifier is fused with
 * the loss); for tests, titan_llama_logits computes them for one forward. */
int titan_llama_logits(struct titan_llama *m, const int32_t *inputs, float *logits);

/* Profiling hooks: called around the parts of a step with names
 * "forward", "backward" (umbrella spans), "embedding", "layer I forward",
 * "layer I recompute", "loss", "norm backward", "layer I backward",
 * "embedding backward" (with the split backward "layer I backward input"
 * and "layer I backward weight", both passes under "backward").  Spans
 * nest; NULL callbacks are skipped. */
/* Phases stamped on memory trace events (titan_mem_set_step). */
enum titan_phase {
	TITAN_PHASE_NONE = 0,
	TITAN_PHASE_DATA = 1,
	TITAN_PHASE_FORWARD = 2,
	TITAN_PHASE_LOSS = 3,
	TITAN_PHASE_BACKWARD = 4,
	TITAN_PHASE_OPTIMIZER = 5,
	TITAN_PHASE_VALIDATION = 6,
};

struct titan_llama_hooks {
	void (*begin)(void *ctx, const char *name);
	void (*end)(void *ctx, const char *name);
	void *ctx;
};
void titan_llama_set_hooks(struct titan_llama *m, const struct titan_llama_hooks *h);

/* Parameter groups: FSDP's units (torchtitan fully_shards tok_embeddings,
 * each TransformerBlock, and [norm, output]): group 0 is tok_embeddings,
 * group 1 + l block l, group L + 1 norm (and output unless tied).  A
 * group's parameters are consecutive in the table: [first, end).
 *
 * Group hooks let a data-parallel engine (lib/train/dp.c) gather a group's
 * parameters before it computes and reduce its gradients after: in one
 * titan_llama_step, pre_forward(g) / post_forward(g) bracket the group's
 * forward for g = 0 .. L; the last group's pre_forward comes before the
 * final norm, its post_forward after the loss; with backward, the last
 * group's pre_backward comes before the loss (the classifier's gradient is
 * computed with it) and its post_backward after the final norm's backward,
 * then pre_backward(g) (before any recomputation) / post_backward(g) for
 * g = L .. 0.  With tied embeddings the loss also uses group 0.  A hook
 * returns 0 or a negative error, which the step returns.  A hook may bind
 * the group's views to unsharded buffers laid out as the unsharded table's
 * arena slice of the group (titan_param.full_offset relative to the first
 * parameter's): the model then reads weights from `params` and adds
 * gradients to `grads` (NULL: its own arenas, the default). */
/* With the split backward (opts.pp_split_backward) the input pass runs
 * pre_backward(g) only, the weight pass pre_weight(g) — the gradients are
 * about to be added, the parameters are not read — then post_backward(g),
 * for g from the stage's last group down. */
struct titan_llama_group_hooks {
	int (*pre_forward)(void *ctx, int group);
	int (*post_forward)(void *ctx, int group);
	int (*pre_backward)(void *ctx, int group);
	int (*post_backward)(void *ctx, int group);
	int (*pre_weight)(void *ctx, int group);
	void *ctx;
};
void titan_llama_set_group_hooks(struct titan_llama *m, const struct titan_llama_group_hooks *h);
int titan_llama_ngroups(const struct titan_llama *m);
/* Does this pipeline stage compute group g?  (Always true without PP.) */
bool titan_llama_group_active(const struct titan_llama *m, int g);
void titan_llama_group_params(const struct titan_llama *m, int g, int *first, int *end);
void titan_llama_bind_group(struct titan_llama *m, int g, float *params, float *grads);

/* torch.nn.utils.clip_grad_norm_(max_norm, foreach): the total L2 norm of
 * all gradients (per-tensor norms in fp32, then the norm of those), and
 * the coefficient min(1, max_norm / (norm + 1e-6)) in fp32.  Gradients are
 * not changed: pass the coefficient to titan_llama_adamw. */
int titan_llama_grad_norm(struct titan_llama *m, double max_norm, double *norm, float *coef);
/* Mixture of experts: the tokens per expert [n_layers][moe.num_experts]
 * (zero rows for dense blocks) the training steps counted since the last
 * balance, or NULL for a dense model; titan_llama_moe_balance moves each
 * MoE layer's expert_bias by `tokens` (those counts summed over the data-
 * parallel ranks: torchtitan's optimizer pre-step hook) and zeroes the
 * counts. */
int64_t *titan_llama_moe_tokens(struct titan_llama *m);
int titan_llama_moe_balance(struct titan_llama *m, const int64_t *tokens);
/* The parts of it: the sum of squares of each parameter's gradient (local
 * rows; table->n doubles; with TP already summed over the TP group, the
 * replicated norms counted once), and the norm and coefficient from the
 * per-tensor sums (summed over shards first). */
int titan_llama_grad_sumsq(struct titan_llama *m, double *sumsq);
/* With TP: the gradients of the replicated parameters (the norms, each
 * rank's sum over its tokens) summed over the TP group; call once per step
 * after the last microbatch (and the data-parallel reduction).  0 without. */
int titan_llama_tp_reduce_grads(struct titan_llama *m);
void titan_grad_norm_from_sumsq(const double *sumsq, int n, double max_norm, double *norm,
				float *coef);
/* One AdamW step over every parameter (step counted from 1). */
int titan_llama_adamw(struct titan_llama *m, const struct titan_adamw_hparams *hp,
		      int64_t step, float grad_mul);

/* ------------------------------------------------- pipeline parallelism */

/* The stage split (struct titan_pp_stage, titan_pp_split) is lib/model's
 * (titan/model.h): titan-estimate splits with the same function. */

/* The schedules titan-train runs: enum titan_schedule's values (the
 * config's parallelism.pipeline_parallel_schedule_e), LoopedBFS left out. */
enum titan_pp_schedule {
	TITAN_PP_GPIPE = TITAN_SCHEDULE_GPIPE, TITAN_PP_1F1B = TITAN_SCHEDULE_1F1B,
	TITAN_PP_INTERLEAVED_1F1B = TITAN_SCHEDULE_INTERLEAVED_1F1B,
	/* InterleavedZeroBubble: backward split into B and W */
	TITAN_PP_INTERLEAVED_ZB = TITAN_SCHEDULE_INTERLEAVED_ZB,
	/* ZBVZeroBubble: the same split, 2 stages per rank, V style */
	TITAN_PP_ZBV = TITAN_SCHEDULE_ZBV
};
/* The global stage of a rank's v-th stage: loop style rank + v·pp, or for
 * ZBVZeroBubble V style (torch's style="v"): v = 0 is stage rank, v = 1
 * stage 2·pp − 1 − rank. */
int titan_pp_stage_of(enum titan_pp_schedule sched, int pp, int rank, int v);
/* Stages per rank of a schedule: 1, or for the multi-stage schedules
 * (Interleaved1F1B, InterleavedZeroBubble) 2 (torchtitan's default) or as
 * many as pipeline_parallel_layers_per_stage gives (TITAN_E_INVALID when
 * that is no multiple of the degree); ZBVZeroBubble exactly 2
 * (TITAN_E_INVALID when layers_per_stage gives another count). */
int titan_pp_stages_per_rank(const struct titan_config *c, enum titan_pp_schedule sched,
			     int64_t n_layers, int pp);
/*
 * Pipeline schedule names have one table: TITAN_SCHEDULES of titan/config.h,
 * whose enum titan_schedule is parallelism.pipeline_parallel_schedule_e and
 * whose names are the schema's choices.  enum titan_pp_schedule (the part
 * titan-train runs) and titan-estimate's enum titan_est_schedule have
 * enum titan_schedule's values.
 */
/* torch's name of a schedule ("ZBVZeroBubble"), or "?" out of range. */
const char *titan_schedule_name(enum titan_schedule s);
/* The schedule titan-train runs for `s`: TITAN_E_INVALID for the schedules
 * not implemented (LoopedBFS), naming them. */
int titan_pp_schedule_from(enum titan_schedule s, enum titan_pp_schedule *out);

/* One action of a schedule: forward (F), backward (B: the whole backward,
 * or with the zero-bubble schedules the input pass, torch's "I"), or weight
 * pass (W) of microbatch `mb` on the rank's stage `stage` (0 .. V - 1:
 * global stage rank + stage·pp). */
enum { TITAN_PP_F, TITAN_PP_B, TITAN_PP_W };
struct titan_pp_action {
	int op, stage, mb;
};
/* The actions of rank `rank` of `pp` with V stages each (1 ..
 * TITAN_PP_MAX_STAGES_PER_RANK) and M microbatches, in the order
 * torch.distributed.pipelining's schedule runs them (without `backward`:
 * the forwards only).  `out` holds 3·V·M
 * entries; returns how many were written (2·V·M, or 3·V·M with the
 * split), or TITAN_E_NOMEM. */
int titan_pp_schedule_actions(enum titan_pp_schedule sched, int pp, int rank, int V, int M,
			      bool backward, struct titan_pp_action *out);

/* What a schedule needs of the microbatch count (titan_pp_new checks it;
 * titan-estimate too): Interleaved1F1B a multiple of pp, InterleavedZero-
 * Bubble a multiple of its rounds.  TITAN_E_INVALID naming the numbers. */
int titan_pp_check_microbatches(enum titan_pp_schedule sched, int pp, int nmb);
/* A stage's schedule runner over the pipeline communicator `c` (stage =
 * its rank) for a model built as that stage with nmb microbatch sets; its
 * gradient buffers are the model's backend `be`'s (buf_alloc), copied with
 * its buffer ops. */
struct titan_pp;
int titan_pp_new(struct titan_llama *m, struct titan_comm *c, enum titan_pp_schedule sched,
		 int nmb, struct titan_backend *be, struct titan_pp **out);
/* With data parallelism over the stage: the runner tells `dp` before each
 * forward and backward which microbatch is the step's last backward (DDP
 * and HSDP reduce after it).  NULL: none. */
struct titan_dp;
void titan_pp_set_dp(struct titan_pp *p, struct titan_dp *dp);
void titan_pp_free(struct titan_pp *p);
/* One local batch as nmb microbatches of mb_tokens (inputs/labels of all
 * of them, one after another): the schedule's forwards (and backwards),
 * gradients added to the model's arena; the loss sum and valid tokens of
 * the last stage, on every stage. */
int titan_pp_step(struct titan_pp *p, const int32_t *inputs, const int32_t *labels,
		  int64_t mb_tokens, float grad_scale, bool backward, bool last_accum,
		  double *loss_sum, int64_t *n_valid);

/* ------------------------------------------------------------ layout */

/* One rank's layout, resolved once from the config, the model's dims and
 * the world (titan_layout_resolve, lib/train/layout.c) and taken by the
 * trainer, titan_parallelize, the parameter table and titan-estimate:
 * where the rank sits in the mesh, what it holds of the model and how it
 * runs it.  Nothing here is a communicator; the engine pairs it with the
 * mesh's. */
struct titan_layout {
	struct titan_parallel_dims dims;  /* degrees, world size, EP degree */
	int64_t rank, coord[TITAN_DIM_NDIMS]; /* world rank, mesh coordinates */
	/* data parallelism: dp_replicate x dp_shard ranks read different
	 * batches (dp_rank of dp); FSDP shards the parameters over
	 * dp_shard x cp (shard_rank of shard_degree; 0, 0 with one rank) */
	int64_t dp, dp_rank, fsdp;
	int shard_rank, shard_degree;
	int tp_rank, tp_degree;
	/* expert parallelism (dims.ep > 1): the rank's experts, ep_rank of
	 * ep_degree (the ep group), and their FSDP shard, ep_shard_rank of
	 * ep_shard_degree (the efsdp group; 0, 0 without FSDP) */
	int ep_rank, ep_degree, ep_shard_rank, ep_shard_degree;
	/* pipeline (dims.degree[TITAN_DIM_PP] > 1): the schedule, the
	 * pipeline's nstages (pp x stages per rank) and this rank's stages in
	 * its order (stages.n 0 without PP); the zero-bubble schedules split
	 * the backward */
	enum titan_pp_schedule schedule;
	int nstages;
	struct titan_pp_stages stages;
	bool split_backward;
	/* rows of a model microbatch (pipeline_parallel_microbatch_size with
	 * PP, else the local batch) and the pipeline microbatches of a local
	 * batch (1 without PP) */
	int64_t microbatch, microbatches;
	/* the model's policies */
	enum titan_ac_mode ac;
	int ac_every;
	int64_t ce_chunk;
	bool loss_parallel, cp_ring;
	/* FSDP/DDP (lib/train/dp.c) */
	bool reshard_after_forward;
	int64_t bucket_bytes;
};
/* The layout of world rank `rank` of `world_size`.  TITAN_E_INVALID naming
 * the key: degrees (titan_parallel_dims_from_config), the schedule
 * (titan_pp_schedule_from), tied embeddings with PP, the stage split
 * (titan_pp_stages_per_rank, titan_pp_split), the microbatch size, TP and
 * CP's divisibility (titan_model_check_tp_cp), the AC policy.  Logs
 * nothing. */
int titan_layout_resolve(struct titan_layout *l, const struct titan_config *c,
			 const struct titan_model_dims *d, int64_t world_size, int64_t rank);
/* The stages of pipeline rank `pp_rank` of a resolved layout's pipeline
 * (l->nstages > 0), in that rank's order: its v-th is global stage
 * pp_rank + v·pp (loop style) or, for ZBVZeroBubble, stages pp_rank and
 * 2·pp − 1 − pp_rank (V) (titan_pp_stage_of), split by titan_pp_split
 * over the config `c` the layout was resolved from.  l->stages is those of
 * the layout's own rank; titan-estimate's GPU model takes every rank's. */
int titan_layout_stages_of(const struct titan_layout *l, const struct titan_config *c,
			   int64_t n_layers, int pp_rank, struct titan_pp_stages *out);
/* activation_checkpoint.{mode, selective_ac_option}: an integer N or "op";
 * anything else is TITAN_E_INVALID naming the key. */
int titan_layout_ac(const struct titan_config *c, enum titan_ac_mode *ac, int *every);
/* The parameter table's options of the layout's rank: FSDP shard, TP
 * slice, experts, stages. */
void titan_layout_table_opts(const struct titan_layout *l, struct titan_param_table_opts *o);
/* The model options of the layout (microbatch rows, sequence, AC, CE
 * chunk, CP rotation, document mask, weight decay; no groups: the engine
 * adds them). */
void titan_llama_opts_from_layout(struct titan_llama_opts *o, const struct titan_config *c,
				  const struct titan_layout *l);


/* ------------------------------------------------------------ trainer */

/* torchtitan's Trainer (lib/train/trainer.c): set-up from a resolved
 * config on the ranks of `dist` (mesh already built), then the step loop.
 * Rank 0 prints the log lines (when print_rank) and writes metrics.jsonl;
 * every rank writes its own profiling and memory traces
 * (rank<R>_trace.json, rank<R>.memtrace).  Errors are recorded and
 * returned; the caller exits (and on several ranks takes the job down:
 * titan_dist_finalize(d, false, status)). */
struct titan_dist;
struct titan_trainer;
struct titan_trainer_opts {
	struct titan_dist *dist;
	int threads;          /* CPU threads per rank (0: all the rank's cores) */
	int verbosity;        /* -1 quiet: no step lines */
	bool print_rank;      /* this rank prints the step lines */
	const char *line_prefix; /* before each step line ("[rank1]:" or "") */
	bool plain_steps;     /* step and validation lines without torchtitan's
				 logger head ("[titan] DATE - root - INFO - ") */
};
int titan_trainer_new(const struct titan_config *c, const struct titan_trainer_opts *o,
		      struct titan_trainer **out);
/* What training.device comes to on `nranks` ranks: "cuda" or "cpu" (auto:
 * cuda on one rank when the build has CUDA and a GPU is there). */
const char *titan_trainer_device(const struct titan_config *c, int nranks);
/* Train from the resumed step to training.steps, or until SIGTERM, SIGINT
 * or SIGUSR1 (after titan_trainer_catch_signals) reaches any rank: then
 * every rank finishes the step, a checkpoint is saved when checkpointing
 * is on, and titan_trainer_stopped_by() returns the signal. */
int titan_trainer_run(struct titan_trainer *t);
int titan_trainer_stopped_by(const struct titan_trainer *t);
/* Close the metrics and memory trace files (their write errors). */
int titan_trainer_close(struct titan_trainer *t);
void titan_trainer_free(struct titan_trainer *t); /* NULL-safe */
/* The trainer's token buffers of a step, stated once (titan-estimate
 * counts them): inputs and labels, each an int32 for every token of the
 * step's microbatches (`tokens`: local_batch_size x seq_len x gradient
 * accumulation steps); the bytes of one of the two, -1 past 64 bits. */
int64_t titan_trainer_token_bytes(int64_t tokens);
void titan_trainer_catch_signals(void);
/* The sgemm peak probe's matrices (metrics.measure_peak_flops without
 * metrics.peak_flops: lib/train/trainer_device.c), stated once
 * (titan-estimate counts them): three 1024 x 1024 fp32 matrices, bytes. */
int64_t titan_trainer_peak_probe_bytes(void);
/* The JSON writer's buffer of a metrics.jsonl step row of a model with
 * moe_layers MoE blocks (lib/train/metrics.c), stated once (titan-estimate
 * counts it): reserved whole before the row is rendered, so the same bytes
 * at every step whatever the values (each MoE block's load entry counted
 * at its longest). */
int64_t titan_metrics_row_bytes(int64_t moe_layers);
/* The CP ring's buffers (lib/train/cp_ring.c, rotate_method alltoall) of
 * one attention call, stated once (titan-estimate counts them), for `nkv`
 * floats of one rank's keys (batch x local tokens x kv heads x head dim)
 * on a ring of `cp` ranks: nrecv key/value receive buffers in flight
 * (forward and backward, comm), two travelling dK/dV sums (backward,
 * comm) and the block's own dK/dV (backward, workspace), each `buf`
 * bytes (keys and values, 2·nkv floats); recv, sums, own: their bytes.
 * -1 when a size is past 64 bits. */
struct titan_cp_ring_mem {
	int nrecv;
	int64_t buf, recv, sums, own;
};
int titan_cp_ring_mem(int64_t nkv, int64_t cp, struct titan_cp_ring_mem *m);

/* ------------------------------------------------ data parallelism */

/* DDP, FSDP and HSDP over a model's parameter groups (lib/train/dp.c):
 *   DDP   shard == NULL or size 1, replicate size > 1: the model is
 *         unsharded; gradients all-reduced (sum) over `replicate` in
 *         buckets as backward produces them, on the last microbatch of a
 *         step (earlier ones accumulate locally, torch's no_sync).
 *   FSDP  shard size > 1: the model must be built with shard_rank /
 *         shard_degree = the shard communicator's rank / size (under EP
 *         the stacked experts hold only the EP rank's experts, sharded
 *         over `eshard`); each unit
 *         is all-gathered before its forward (the next one prefetched) and
 *         before its backward (the previous one prefetched), freed after
 *         forward when reshard_after_forward (never the last unit, as
 *         torchtitan) and after backward; its gradients are reduce-
 *         scattered (sum) after its backward, every microbatch.
 *   HSDP  both: FSDP over `shard`, then the sharded gradients all-reduced
 *         over `replicate` on the last microbatch.
 * Sums, not means: the trainer scales the loss by 1 / (the step's valid
 * tokens over every rank), torchtitan's gradient divide factor 1. */
struct titan_dp_opts {
	struct titan_comm *shard;      /* fsdp mesh (dp_shard × cp), or NULL */
	struct titan_comm *replicate;  /* dp_replicate mesh, or NULL */
	/* EP: the experts' fsdp mesh (efsdp, titan_dist.efsdp), whose rank /
	 * size the model's table has as ep_shard_rank / _degree; NULL without
	 * EP.  The stacked experts' all-gathers and reduce-scatters run on it,
	 * every other parameter's on `shard`. */
	struct titan_comm *eshard;
	bool reshard_after_forward;
	int64_t bucket_bytes;          /* merge groups into units up to this size; 0: per group */
	/* The model's backend: the communication buffers are its (buf_alloc),
	 * packed and unpacked with its buffer ops, never by host code. */
	struct titan_backend *be;
};
struct titan_dp;
int titan_dp_new(struct titan_llama *m, const struct titan_dp_opts *o, struct titan_dp **out);
void titan_dp_free(struct titan_dp *dp); /* NULL-safe */
/* Fill `h` with the engine's group hooks (install with
 * titan_llama_set_group_hooks); returns h. */
const struct titan_llama_group_hooks *titan_dp_hooks(struct titan_dp *dp,
						      struct titan_llama_group_hooks *h);
/* Before each titan_llama_step: with backward or not, and whether it is the
 * step's last microbatch. */
int titan_dp_begin_microbatch(struct titan_dp *dp, bool backward, bool last);
/* After the step's last microbatch: wait for every reduction; every
 * gathered copy is freed. */
int titan_dp_finish_grads(struct titan_dp *dp);
/* titan_llama_grad_norm over the whole model (sums of squares reduced over
 * the shards). */
int titan_dp_grad_norm(struct titan_dp *dp, double max_norm, double *norm, float *coef);
int titan_dp_units(const struct titan_dp *dp);

#ifdef __cplusplus
}
#endif
#endif
