/*
 * titan/train.h — training-loop arithmetic shared by titan-train and its
 * tests: torchtitan's learning-rate schedule (components/lr_scheduler.py,
 * linear warmup + stable + decay) and gradient-accumulation geometry
 * (train.py).  See shared/torchtitan-notes.md §2.
 */
#ifndef TITAN_TRAIN_H
#define TITAN_TRAIN_H

#include <stdint.h>

#include "titan/config.h"

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

#ifdef __cplusplus
}
#endif
#endif
