/*
 * sample.c — the next token from a row of logits: greedy (torch.argmax),
 * or temperature, top-k and top-p in transformers' order
 * (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper), drawn
 * with the counter-based Philox generator of lib/core/rng.c.
 */
#include "titan/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void titan_sampler_opts_default(struct titan_sampler_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->top_p = 1.0;
}

int titan_sampler_opts_check(const struct titan_sampler_opts *o)
{
	if (!(o->temperature >= 0) || !isfinite(o->temperature))
		return titan_error(TITAN_E_INVALID, "temperature %g: expected a finite number >= 0 "
				   "(0: greedy)", o->temperature);
	if (o->top_k < 0)
		return titan_error(TITAN_E_INVALID, "top_k %lld: expected a count >= 0 (0: all)",
				   (long long)o->top_k);
	if (!(o->top_p > 0 && o->top_p <= 1))
		return titan_error(TITAN_E_INVALID, "top_p %g: expected a probability in (0, 1]",
				   o->top_p);
	return 0;
}

int titan_sampler_init(struct titan_sampler *s, const struct titan_sampler_opts *o,
		       int64_t vocab)
{
	int rc;

	memset(s, 0, sizeof(*s));
	if ((rc = titan_sampler_opts_check(o)) < 0)
		return rc;
	if (vocab < 1)
		return titan_error(TITAN_E_INVALID, "sampler: vocabulary of %lld ids", (long long)vocab);
	s->o = *o;
	s->vocab = vocab;
	titan_rng_init(&s->rng, o->seed, titan_rng_stream_id("generate", 0));
	if (!(s->p = titan_malloc((size_t)vocab * sizeof(*s->p), TITAN_MEM_WORKSPACE)) ||
	    !(s->idx = titan_malloc((size_t)vocab * sizeof(*s->idx), TITAN_MEM_WORKSPACE))) {
		titan_sampler_release(s);
		return TITAN_E_NOMEM;
	}
	return 0;
}

void titan_sampler_release(struct titan_sampler *s)
{
	if (!s)
		return;
	titan_free(s->p);
	titan_free(s->idx);
	s->p = NULL;
	s->idx = NULL;
}

/* qsort_r order: probabilities descending, ties by id (a total order) */
static int by_prob_desc(const void *a, const void *b, void *ctx)
{
	const double *p = ctx;
	const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;

	if (p[i] != p[j])
		return p[i] > p[j] ? -1 : 1;
	return (i > j) - (i < j);
}

int titan_sampler_sample(struct titan_sampler *s, const float *logits, int32_t *id)
{
	const int64_t V = s->vocab;
	const double T = s->o.temperature;
	const bool sorted = (s->o.top_k > 0 && s->o.top_k < V) || s->o.top_p < 1;
	int64_t best = 0, kept;
	double total = 0, u;

	for (int64_t i = 0; i < V; i++) {
		if (!isfinite(logits[i]))
			return titan_error(TITAN_E_NUMERIC, "the logit of token %lld is %g: the model's "
					   "output is not finite", (long long)i, (double)logits[i]);
		if (logits[i] > logits[best])
			best = i;
	}
	if (T == 0) {
		*id = (int32_t)best;
		return 0;
	}
	/* softmax(logits / T), max-shifted, in double */
	for (int64_t i = 0; i < V; i++)
		total += s->p[i] = exp(((double)logits[i] - (double)logits[best]) / T);
	kept = V;
	if (sorted) {
		for (int64_t i = 0; i < V; i++)
			s->idx[i] = (int32_t)i;
		qsort_r(s->idx, (size_t)V, sizeof(*s->idx), by_prob_desc, s->p);
		if (s->o.top_k > 0 && s->o.top_k < V) {
			kept = s->o.top_k;
			total = 0;
			for (int64_t j = 0; j < kept; j++)
				total += s->p[s->idx[j]];
		}
		if (s->o.top_p < 1) {
			/* keep an id while the ids before it hold less than top_p
			 * of the (top-k renormalised) mass: the smallest set that
			 * reaches top_p, at least one id */
			double before = 0;
			int64_t j = 0;

			while (j < kept && before < s->o.top_p * total)
				before += s->p[s->idx[j++]];
			kept = j;
			total = before;
		}
	}
	u = titan_rng_uniform(&s->rng) * total;
	for (int64_t j = 0; j < kept; j++) {
		const int64_t i = sorted ? s->idx[j] : j;

		if (u < s->p[i] || j == kept - 1) {
			*id = (int32_t)i;
			return 0;
		}
		u -= s->p[i];
	}
	TITAN_ASSERT(!"unreachable: kept >= 1");
	return TITAN_E_INTERNAL;
}
