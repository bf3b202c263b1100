/*
 * schedule.c — torchtitan's learning-rate schedule
 * (components/lr_scheduler.py: build_lr_schedulers +
 * linear_warmup_stable_decay) and gradient-accumulation geometry.
 */
#include "titan/train.h"

#include <math.h>
#include <string.h>

#include "titan/core.h"

void titan_lr_schedule_init(struct titan_lr_schedule *s, const struct titan_config *c)
{
	int64_t total = c->lr_scheduler.total_steps > 0 ? c->lr_scheduler.total_steps : c->training.steps;

	memset(s, 0, sizeof(*s));
	s->warmup = c->lr_scheduler.warmup_steps;
	if (s->warmup > total) {
		s->warmup = total;
		s->clamped |= 1;
	}
	if (!isnan(c->lr_scheduler.decay_ratio)) {
		/* Python's round(): half to even, which nearbyint does in the
		 * default rounding mode */
		s->decay = (int64_t)nearbyint((double)total * c->lr_scheduler.decay_ratio);
		if (s->warmup + s->decay > total) {
			s->decay = total - s->warmup;
			s->clamped |= 2;
		}
	} else {
		s->decay = total - s->warmup;
	}
	s->stable = total + 1 - s->warmup - s->decay;
	s->decay_type = c->lr_scheduler.decay_type_e;
	s->min_lr_factor = c->lr_scheduler.min_lr_factor;
}

double titan_lr_factor(const struct titan_lr_schedule *s, int64_t step0)
{
	double p, f;

	if (step0 < s->warmup)
		return (double)(step0 + 1) / (double)s->warmup;
	if (step0 < s->warmup + s->stable)
		return 1.0;
	p = (double)(step0 + 1 - s->warmup - s->stable) / (double)s->decay;
	switch (s->decay_type) {
	case TITAN_DECAY_SQRT:
		f = 1.0 - sqrt(p);
		break;
	case TITAN_DECAY_COSINE:
		f = 0.5 * (1.0 + cos(M_PI * p));
		break;
	default:
		f = 1.0 - p;
		break;
	}
	return s->min_lr_factor + (1.0 - s->min_lr_factor) * f;
}

int titan_grad_accum_steps(const struct titan_config *c, int64_t dp_degree, int64_t *out)
{
	int64_t local = c->training.local_batch_size, global = c->training.global_batch_size;
	int64_t per_step = local * dp_degree;

	if (global < 0)
		global = per_step;
	if (global % per_step != 0)
		return titan_error(TITAN_E_INVALID,
				   "training.global_batch_size %lld is not a multiple of "
				   "training.local_batch_size %lld x data-parallel degree %lld",
				   (long long)global, (long long)local, (long long)dp_degree);
	*out = global / per_step;
	return 0;
}
