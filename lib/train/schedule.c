/*
 * schedule.c — torchtitan's learning-rate schedule
 * (components/lr_scheduler.py: build_lr_schedulers +
 * linear_warmup_stable_decay), gradient-accumulation geometry and the
 * pipeline schedules' names.
 */
#include "titan/train.h"

#include <math.h>
#include <stdio.h>
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

/* The schedules by torch's names: the X-macro table of titan/config.h. */
#define SCHEDULE_NAME(id, name) [id] = name,
static const char *const schedule_names[] = { TITAN_SCHEDULES(SCHEDULE_NAME) };
#undef SCHEDULE_NAME
#define NSCHEDULES (sizeof(schedule_names) / sizeof(schedule_names[0]))

/* Whether titan-train runs schedule s (enum titan_pp_schedule has its
 * value). */
static bool implemented(size_t s)
{
	return s != TITAN_SCHEDULE_LOOPED_BFS;
}

const char *titan_schedule_name(enum titan_schedule s)
{
	return (unsigned)s < NSCHEDULES ? schedule_names[s] : "?";
}

/* "A, B and C" of the schedules that are (`want`) or are not run. */
static void join_schedules(char *buf, size_t n, bool want)
{
	size_t k = 0, count = 0, len = 0;

	for (size_t i = 0; i < NSCHEDULES; i++)
		count += implemented(i) == want;
	buf[0] = '\0';
	for (size_t i = 0; i < NSCHEDULES && len < n; i++) {
		if (implemented(i) != want)
			continue;
		int w = snprintf(buf + len, n - len, "%s%s",
				 k == 0 ? "" : k + 1 == count ? " and " : ", ", schedule_names[i]);
		if (w < 0)
			break;
		len += (size_t)w;
		k++;
	}
}

int titan_pp_schedule_from(enum titan_schedule s, enum titan_pp_schedule *out)
{
	char yes[160], no[80];

	if ((unsigned)s < NSCHEDULES && implemented(s)) {
		*out = (enum titan_pp_schedule)s;
		return 0;
	}
	join_schedules(yes, sizeof yes, true);
	join_schedules(no, sizeof no, false);
	return titan_error(TITAN_E_INVALID, "parallelism.pipeline_parallel_schedule: '%s' is not "
			   "implemented yet (%s are; %s is not)", titan_schedule_name(s), yes, no);
}
