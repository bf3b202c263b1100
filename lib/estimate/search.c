/*
 * search.c — titan-estimate --search: every valid layout for N GPUs (the
 * five degrees, activation checkpointing, microbatching), those that fit,
 * ranked by predicted tokens/s per device, with the reason for each rank.
 */
#include "est_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

enum { C_RECOMPUTE, C_TP, C_CP, C_FSDP, C_PIPE, C_COMPUTE, NCOMP };

static const char *const comp_name[NCOMP] = {
	"recomputation", "exposed TP collectives", "CP K/V exchange",
	"exposed FSDP/DP traffic", "pipeline bubble", "compute per token",
};

/* Seconds per token per device of each part of the step. */
static void components(const struct titan_est_candidate *c, double out[NCOMP])
{
	const struct titan_est_layout *l = &c->opts.layout;
	const struct titan_est_perf *p = &c->perf;
	double tok = (double)c->opts.local_batch * (double)c->opts.seq_len *
		     (double)c->opts.accum / (double)(l->tp * l->pp * l->cp);

	out[C_RECOMPUTE] = p->recompute_s / tok;
	out[C_TP] = p->tp_s / tok;
	out[C_CP] = p->cp_s / tok;
	out[C_FSDP] = p->fsdp_exposed_s / tok;
	out[C_PIPE] = (p->pp_bubble_s + p->pp_p2p_s) / tok;
	out[C_COMPUTE] = (p->compute_s - p->recompute_s) / tok;
}

static int cmp(const void *a, const void *b)
{
	const struct titan_est_candidate *x = a, *y = b;

	if (x->tokens_per_s != y->tokens_per_s)
		return x->tokens_per_s > y->tokens_per_s ? -1 : 1;
	if (x->required_bytes != y->required_bytes)
		return x->required_bytes < y->required_bytes ? -1 : 1;
	return 0;
}

static void reasons(struct titan_est_search *s)
{
	double c0[NCOMP], ci[NCOMP];

	if (s->n == 0)
		return;
	components(&s->best[0], c0);
	for (int i = 0; i < s->n; i++) {
		struct titan_est_candidate *c = &s->best[i];
		char ac[32];
		int k = 0;

		titan_est_ac_str(&c->opts, ac, sizeof(ac));
		if (i == 0 && s->n == 1) {
			snprintf(c->reason, sizeof(c->reason), "the only layout that fits");
			continue;
		}
		components(i == 0 ? &s->best[1] : c, ci);
		/* the part where the two differ most */
		for (int j = 1; j < NCOMP; j++)
			if (fabs(ci[j] - c0[j]) > fabs(ci[k] - c0[k]))
				k = j;
		if (i == 0 && c->tokens_per_s <= s->best[1].tokens_per_s) {
			snprintf(c->reason, sizeof(c->reason), "fastest (tied with #2) and needs the "
				 "least memory of those (AC %s, %.1f GiB margin)", ac,
				 (double)c->margin_bytes / GiB);
		} else if (i == 0) {
			snprintf(c->reason, sizeof(c->reason), "fastest: %.2f%% ahead of #2, mostly "
				 "less %s (AC %s, %.1f GiB margin)",
				 100 * (c->tokens_per_s / s->best[1].tokens_per_s - 1), comp_name[k], ac,
				 (double)c->margin_bytes / GiB);
		} else if (c->tokens_per_s >= s->best[0].tokens_per_s) {
			snprintf(c->reason, sizeof(c->reason), "as fast as #1 but needs more memory");
		} else {
			snprintf(c->reason, sizeof(c->reason), "%.2f%% behind #1, mostly %s %s",
				 100 * (1 - c->tokens_per_s / s->best[0].tokens_per_s),
				 ci[k] > c0[k] ? "more" : "less", comp_name[k]);
		}
	}
}

static int push(struct titan_est_candidate **v, int64_t *n, int64_t *cap,
		const struct titan_est_candidate *c)
{
	if (*n == *cap) {
		int64_t nc = *cap ? 2 * *cap : 256;
		struct titan_est_candidate *nv = realloc(*v, (size_t)nc * sizeof(*nv));

		if (!nv)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		*v = nv;
		*cap = nc;
	}
	(*v)[(*n)++] = *c;
	return 0;
}

int titan_est_search_run(const struct titan_model_dims *d, const struct titan_est_opts *base,
			 int64_t global_batch, int top, struct titan_est_search *s)
{
	static const struct { enum titan_est_ac ac; int every; } acs[] = {
		{ TITAN_EST_AC_NONE, 0 }, { TITAN_EST_AC_SELECTIVE, 2 },
		{ TITAN_EST_AC_OP, 0 }, { TITAN_EST_AC_FULL, 0 },
	};
	const int64_t N = base->ngpu;
	struct titan_est_candidate *all = NULL;
	int64_t nall = 0, cap = 0;
	int rc = 0;

	memset(s, 0, sizeof(*s));
	if (isnan(base->dev.peak_flops))
		return titan_error(TITAN_E_INVALID, "--search ranks by predicted throughput: the device "
				   "'%s' has no known peak (give --peak-flops)", base->dev.name);
	if (N < 1)
		return titan_error(TITAN_E_INVALID, "--ngpu: must be at least 1");
	if (base->ep > 1) /* the search enumerates no EP layouts */
		return titan_error(TITAN_E_INVALID, "parallelism.expert_parallel_degree %" PRId64
				   ": --search does not search expert-parallel layouts yet "
				   "(use 1, or estimate the layout without --search)", base->ep);
	for (int64_t tp = 1; tp <= N; tp++) {
		if (N % tp || tp > base->gpus_per_node)
			continue;
		for (int64_t pp = 1; pp <= N / tp; pp++) {
			if ((N / tp) % pp)
				continue;
			for (int64_t cp = 1; cp <= N / tp / pp; cp++) {
				if ((N / tp / pp) % cp)
					continue;
				int64_t rest = N / tp / pp / cp;

				for (int64_t rep = 1; rep <= rest; rep++) {
					int64_t dp, rows;

					if (rest % rep)
						continue;
					dp = rest;
					if (global_batch > 0) {
						if (global_batch % dp) {
							s->considered++;
							continue;
						}
						rows = global_batch / dp;
					} else {
						rows = base->local_batch * base->accum;
					}
					for (int64_t mb = 1; mb <= rows; mb++) {
						if (rows % mb)
							continue;
						for (size_t a = 0; a < sizeof(acs) / sizeof(acs[0]); a++) {
							struct titan_est_candidate c;
							struct titan_estimate e;

							memset(&c, 0, sizeof(c));
							c.opts = *base;
							c.opts.layout = (struct titan_est_layout){rep, rest / rep, tp, pp, cp};
							c.opts.ac = acs[a].ac;
							c.opts.ac_every = acs[a].every;
							if (pp > 1) {
								c.opts.local_batch = rows;
								c.opts.pp_microbatch = mb;
								c.opts.accum = 1;
							} else {
								c.opts.local_batch = mb;
								c.opts.accum = rows / mb;
							}
							s->considered++;
							if (titan_est_check(&c.opts, d) < 0)
								continue;
							s->valid++;
							if (titan_estimate_run(d, &c.opts, &e) < 0)
								continue;
							/* cpu: one rank per run; the first rank
							 * of each other pipeline rank too (the
							 * last holds the loss) */
							for (int64_t p = 1; c.opts.dev.cpu && p < pp; p++) {
								struct titan_est_opts po = c.opts;
								struct titan_estimate pe;

								po.rank = p * (N / pp);
								if (titan_estimate_run(d, &po, &pe) < 0)
									continue;
								if (pe.required_bytes > e.required_bytes) {
									e.required_bytes = pe.required_bytes;
									e.margin_bytes = pe.margin_bytes;
									e.fits = pe.fits;
								}
								titan_estimate_release(&pe);
							}
							c.required_bytes = e.required_bytes;
							c.margin_bytes = e.margin_bytes;
							c.fits = e.fits;
							c.perf = e.perf;
							c.tokens_per_s = e.perf.tokens_per_s;
							c.step_s = e.perf.step_s;
							c.mfu_torchtitan = e.perf.mfu_torchtitan;
							titan_estimate_release(&e);
							if (!c.fits)
								continue;
							s->fitting++;
							if ((rc = push(&all, &nall, &cap, &c)) < 0)
								goto fail;
						}
					}
				}
			}
		}
	}
	titan_error_clear();
	if (nall > 1)
		qsort(all, (size_t)nall, sizeof(*all), cmp);
	s->n = (int)(nall < top ? nall : top);
	s->best = all;
	reasons(s);
	return 0;
fail:
	free(all);
	return rc;
}

void titan_est_search_release(struct titan_est_search *s)
{
	if (!s)
		return;
	free(s->best);
	s->best = NULL;
	s->n = 0;
}
