/*
 * titan/train.h — training-loop arithmetic shared by titan-train and its
 * tests: torchtitan's learning-rate schedule (components/lr_scheduler.py,
 * linear warmup + stable + decay) and gradient-accumulation geometry
 * (train.py).  See shared/torchtitan-notes.md §2.
 */
#ifndef TITAN_TRAIN_H
#define TITAN_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "titan/config.h"
#include "titan/model.h"
#include "titan/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

enum titan_decay_type { TITAN_DECAY_LINEAR, TITAN_DECAY_SQRT, TITAN_DECAY_COSINE };

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

enum titan_ac_mode { TITAN_AC_NONE, TITAN_AC_FULL, TITAN_AC_SELECTIVE, TITAN_AC_SELECTIVE_OP };

struct titan_llama_opts {
	int64_t batch, seq;          /* microbatch rows and sequence length */
	enum titan_ac_mode ac;
	int ac_every;                /* selective: every N-th block */
	int64_t ce_chunk;            /* tokens per classifier/CE chunk (0: TITAN_CE_CHUNK) */
	bool exclude_norms_embeddings_from_wd;
};
/* From activation_checkpoint.{mode, selective_ac_option}: an integer N or
 * "op"; anything else is TITAN_E_INVALID naming the key. */
int titan_llama_opts_from_config(struct titan_llama_opts *o, const struct titan_config *c);

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
struct titan_param_arena *titan_llama_params(struct titan_llama *m);
struct titan_param_arena *titan_llama_grads(struct titan_llama *m);
/* The AdamW moments (arenas of the parameters' layout), for checkpoints. */
void titan_llama_moments(struct titan_llama *m, float **exp_avg, float **exp_avg_sq);
/* torchtitan init_weights from `seed` (lib/model). */
void titan_llama_init_weights(struct titan_llama *m, uint64_t seed);
int titan_llama_zero_grads(struct titan_llama *m);

/* One microbatch: inputs/labels [batch·seq] (labels < 0 are ignored).
 * Forward, loss and backward; gradients of loss_sum·grad_scale are ADDED
 * to the gradient arena (zero it once per step).  Returns the summed loss
 * over valid labels and their count.  With `backward` false: forward and
 * loss only (validation), gradients untouched. */
int titan_llama_step(struct titan_llama *m, const int32_t *inputs, const int32_t *labels,
		     float grad_scale, bool backward, double *loss_sum, int64_t *n_valid);
/* Logits of the last forward are not kept (the classifier is fused with
 * the loss); for tests, titan_llama_logits computes them for one forward. */
int titan_llama_logits(struct titan_llama *m, const int32_t *inputs, float *logits);

/* Profiling hooks: called around the parts of a step with names
 * "forward", "backward" (umbrella spans), "embedding", "layer I forward",
 * "layer I recompute", "loss", "norm backward", "layer I backward",
 * "embedding backward".  Spans nest; NULL callbacks are skipped. */
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

/* torch.nn.utils.clip_grad_norm_(max_norm, foreach): the total L2 norm of
 * all gradients (per-tensor norms in fp32, then the norm of those), and
 * the coefficient min(1, max_norm / (norm + 1e-6)) in fp32.  Gradients are
 * not changed: pass the coefficient to titan_llama_adamw. */
int titan_llama_grad_norm(struct titan_llama *m, double max_norm, double *norm, float *coef);
/* One AdamW step over every parameter (step counted from 1). */
int titan_llama_adamw(struct titan_llama *m, const struct titan_adamw_hparams *hp,
		      int64_t step, float grad_mul);

#ifdef __cplusplus
}
#endif
#endif
