/*
 * timecmd.c — titan-memprof time: per-phase time of every profiled step of
 * every rank, the stragglers among the ranks, and MFU per step recomputed
 * from the step spans (torchtitan's MFU: FLOPs of a step over its time and
 * the peak FLOP/s).
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memprof.h"

#define NP TITAN_TIME_NPARTS
#define NOISE 0.005 /* a phase must be this share of the median step to count */

struct rank_times {
	int rank;
	struct titan_step_time *steps;
	size_t n;
	double med_total, med[NP];
};

/* FLOPs per step and peak FLOP/s from metrics.jsonl: tflops x step_time_s
 * is the FLOPs of one step (titan-train logs tflops = FLOPs per token x
 * tokens/s), and tflops / mfu_pct gives the peak it used. */
static void metrics_flops(const char *path, double *flops, double *peak)
{
	FILE *fp = strcmp(path, "-") ? fopen(path, "r") : stdin; /* --metrics - */
	double f[64], p[64];
	size_t nf = 0, np = 0, cap = 0;
	char *line = NULL;

	if (!fp) {
		mp_warn("cannot open '%s': no MFU", path);
		return;
	}
	while (getline(&line, &cap, fp) > 0 && nf < 64) {
		json_t *o = json_loads(line, 0, NULL);
		const json_t *tf = json_object_get(o, "tflops"), *st = json_object_get(o, "step_time_s");
		const json_t *mf = json_object_get(o, "mfu_pct");

		if (json_is_number(tf) && json_is_number(st) && json_number_value(tf) > 0) {
			f[nf++] = json_number_value(tf) * 1e12 * json_number_value(st);
			if (json_is_number(mf) && json_number_value(mf) > 0)
				p[np++] = json_number_value(tf) * 1e12 * 100 / json_number_value(mf);
		}
		json_decref(o);
	}
	free(line);
	if (fp != stdin)
		fclose(fp);
	if (isnan(*flops) && nf)
		*flops = titan_median(f, nf);
	if (isnan(*peak) && np)
		*peak = titan_median(p, np);
}

static double mfu(double flops, double peak, double us)
{
	return isnan(flops) || isnan(peak) || peak <= 0 || us <= 0 ? NAN : 100.0 * flops / (us * 1e-6) / peak;
}

static void medians(struct rank_times *r)
{
	double *v = malloc((r->n ? r->n : 1) * sizeof(*v));

	r->med_total = NAN;
	for (int p = 0; p < NP; p++)
		r->med[p] = NAN;
	if (!v || r->n == 0) {
		free(v);
		return;
	}
	for (size_t i = 0; i < r->n; i++)
		v[i] = r->steps[i].total;
	r->med_total = titan_median(v, r->n);
	for (int p = 0; p < NP; p++) {
		for (size_t i = 0; i < r->n; i++)
			v[i] = r->steps[i].part[p];
		r->med[p] = titan_median(v, r->n);
	}
	free(v);
}

/* The rank's communication by collective, summed over its profiled steps
 * (the names in first-seen order; past TITAN_TIME_NCOMM, "(other)"). */
static int rank_comm(const struct rank_times *r, struct titan_comm_time *c)
{
	int n = 0;

	for (size_t k = 0; k < r->n; k++)
		for (int q = 0; q < r->steps[k].n_comm; q++) {
			const struct titan_comm_time *x = &r->steps[k].comm[q];
			int i;

			for (i = 0; i < n && strcmp(c[i].name, x->name); i++)
				;
			if (i == n && n == TITAN_TIME_NCOMM) {
				i = n - 1;
				snprintf(c[i].name, sizeof(c[i].name), "(other)");
			} else if (i == n) {
				c[n++] = (struct titan_comm_time){.calls = 0};
				snprintf(c[i].name, sizeof(c[i].name), "%s", x->name);
			}
			c[i].calls += x->calls;
			c[i].exposed += x->exposed;
			c[i].overlapped += x->overlapped;
		}
	return n;
}

static void json_comm(struct titan_json *j, const struct titan_comm_time *c, int n)
{
	titan_json_key(j, "collectives");
	titan_json_array_begin(j);
	for (int i = 0; i < n; i++) {
		titan_json_object_begin(j);
		titan_json_key(j, "name"); titan_json_string(j, c[i].name);
		titan_json_key(j, "calls"); titan_json_int(j, c[i].calls);
		titan_json_key(j, "exposed_ms"); titan_json_double(j, c[i].exposed / 1e3);
		titan_json_key(j, "overlapped_ms"); titan_json_double(j, c[i].overlapped / 1e3);
		titan_json_object_end(j);
	}
	titan_json_array_end(j);
}

struct straggler {
	int rank;
	int what;          /* -1: the step, else enum titan_time_part */
	double value, median, over_pct;
};

static const char *what_name(int w)
{
	return w < 0 ? "step" : titan_time_part_name((enum titan_time_part)w);
}

/* One line per collective of the rank: calls, exposed and overlapped ms
 * over its profiled steps, and the exposed time's share of their time. */
static void print_comm(const struct rank_times *r)
{
	struct titan_comm_time c[TITAN_TIME_NCOMM];
	int n = rank_comm(r, c);
	double total = 0;

	if (!n)
		return;
	for (size_t k = 0; k < r->n; k++)
		total += r->steps[k].total;
	printf("   %-16s %6s %9s %10s %9s\n", "collective", "calls", "exposed", "overlapped", "exp_share");
	for (int i = 0; i < n; i++) {
		printf("   %-16s %6lld %9.3f %10.3f", c[i].name, (long long)c[i].calls,
		       c[i].exposed / 1e3, c[i].overlapped / 1e3);
		if (total > 0)
			printf(" %8.1f%%\n", 100 * c[i].exposed / total);
		else
			printf(" %9s\n", "-");
	}
}

int mp_time(struct mp_inputs *in, const struct mp_opts *o)
{
	struct rank_times *rt = calloc(in->n ? in->n : 1, sizeof(*rt));
	struct straggler *sg = NULL;
	double flops = o->flops_per_step, peak = o->peak_flops, xmed_total = NAN, xmed[NP];
	size_t nr = 0, ns = 0;
	struct titan_json j;
	int status = 0;

	titan_json_init(&j);
	if (!rt) {
		titan_error(TITAN_E_NOMEM, "out of memory");
		status = mp_fail();
		goto out;
	}
	if (mp_inputs_merge_spans(in) < 0) {
		status = mp_fail();
		goto out;
	}
	if (in->metrics && (isnan(flops) || isnan(peak)))
		metrics_flops(in->metrics, &flops, &peak);
	for (size_t i = 0; i < in->n; i++) {
		struct mp_rank *r = &in->ranks[i];

		if (!r->n_traces)
			continue;
		for (size_t k = 0; k < r->n_spans; k++) /* one rank, whatever pid it wrote */
			r->spans[k].pid = r->rank;
		rt[nr].rank = r->rank;
		if (titan_step_times(r->spans, r->n_spans, r->rank, &rt[nr].steps, &rt[nr].n) < 0) {
			status = mp_fail();
			goto out;
		}
		medians(&rt[nr]);
		nr++;
	}
	if (nr == 0) {
		titan_error(TITAN_E_INVALID, "no timing trace (*trace*.json) among the inputs: titan-train "
			    "writes DUMP/profile_traces/iteration_N/rankR_trace.json with "
			    "--profiling.enable_profiling=true");
		status = mp_fail();
		goto out;
	}
	/* stragglers: ranks whose step, or a phase, is over the median of the ranks */
	if (nr >= 2) {
		double *v = malloc(nr * sizeof(*v));
		size_t nv;

		if (!v || !(sg = calloc(nr * (NP + 1), sizeof(*sg)))) {
			free(v);
			titan_error(TITAN_E_NOMEM, "out of memory");
			status = mp_fail();
			goto out;
		}
		for (int p = -1; p < NP; p++) {
			nv = 0;
			for (size_t i = 0; i < nr; i++)
				if (rt[i].n)
					v[nv++] = p < 0 ? rt[i].med_total : rt[i].med[p];
			if (p < 0)
				xmed_total = nv ? titan_median(v, nv) : NAN;
			else
				xmed[p] = nv ? titan_median(v, nv) : NAN;
		}
		for (size_t i = 0; i < nr; i++) {
			for (int p = -1; p < NP && rt[i].n; p++) {
				double x = p < 0 ? rt[i].med_total : rt[i].med[p];
				double m = p < 0 ? xmed_total : xmed[p];

				if (p == TITAN_TIME_COMM_OVERLAPPED) /* hidden: not slowing anyone */
					continue;
				if (x > m * (1 + o->threshold_pct / 100) && x - m >= NOISE * xmed_total)
					sg[ns++] = (struct straggler){rt[i].rank, p, x, m,
								      m > 0 ? 100 * (x - m) / m : INFINITY};
			}
		}
		free(v);
	}
	if (o->json) {
		titan_json_object_begin(&j);
		titan_json_key(&j, "format"); titan_json_string(&j, "titan-memprof");
		titan_json_key(&j, "version"); titan_json_int(&j, 1);
		titan_json_key(&j, "command"); titan_json_string(&j, "time");
		titan_json_key(&j, "threshold_pct"); titan_json_double(&j, o->threshold_pct);
		titan_json_key(&j, "flops_per_step"); titan_json_double(&j, flops);
		titan_json_key(&j, "peak_flops"); titan_json_double(&j, peak);
		titan_json_key(&j, "ranks");
		titan_json_array_begin(&j);
		for (size_t i = 0; i < nr; i++) {
			titan_json_object_begin(&j);
			titan_json_key(&j, "rank"); titan_json_int(&j, rt[i].rank);
			titan_json_key(&j, "steps");
			titan_json_array_begin(&j);
			for (size_t k = 0; k < rt[i].n; k++) {
				const struct titan_step_time *s = &rt[i].steps[k];

				titan_json_object_begin(&j);
				titan_json_key(&j, "step"); titan_json_int(&j, s->step);
				titan_json_key(&j, "step_ms"); titan_json_double(&j, s->total / 1e3);
				for (int p = 0; p < NP; p++) {
					char key[40];

					snprintf(key, sizeof(key), "%s_ms", titan_time_part_name((enum titan_time_part)p));
					titan_json_key(&j, key);
					titan_json_double(&j, s->part[p] / 1e3);
				}
				titan_json_key(&j, "mfu_pct"); titan_json_double(&j, mfu(flops, peak, s->total));
				json_comm(&j, s->comm, s->n_comm);
				titan_json_object_end(&j);
			}
			titan_json_array_end(&j);
			{
				struct titan_comm_time c[TITAN_TIME_NCOMM];
				int n = rank_comm(&rt[i], c);

				json_comm(&j, c, n); /* over the rank's profiled steps */
			}
			titan_json_key(&j, "median");
			titan_json_object_begin(&j);
			titan_json_key(&j, "step_ms"); titan_json_double(&j, rt[i].med_total / 1e3);
			for (int p = 0; p < NP; p++) {
				char key[40];

				snprintf(key, sizeof(key), "%s_ms", titan_time_part_name((enum titan_time_part)p));
				titan_json_key(&j, key);
				titan_json_double(&j, rt[i].med[p] / 1e3);
			}
			titan_json_key(&j, "mfu_pct"); titan_json_double(&j, mfu(flops, peak, rt[i].med_total));
			titan_json_object_end(&j);
			titan_json_object_end(&j);
		}
		titan_json_array_end(&j);
		titan_json_key(&j, "median_step_ms"); titan_json_double(&j, xmed_total / 1e3);
		titan_json_key(&j, "stragglers");
		titan_json_array_begin(&j);
		for (size_t k = 0; k < ns; k++) {
			titan_json_object_begin(&j);
			titan_json_key(&j, "rank"); titan_json_int(&j, sg[k].rank);
			titan_json_key(&j, "what"); titan_json_string(&j, what_name(sg[k].what));
			titan_json_key(&j, "ms"); titan_json_double(&j, sg[k].value / 1e3);
			titan_json_key(&j, "median_ms"); titan_json_double(&j, sg[k].median / 1e3);
			titan_json_key(&j, "over_pct"); titan_json_double(&j, sg[k].over_pct);
			titan_json_object_end(&j);
		}
		titan_json_array_end(&j);
		titan_json_object_end(&j);
		status = mp_json_print(&j);
		goto out;
	}
	for (size_t i = 0; i < nr; i++) {
		const struct rank_times *r = &rt[i];

		printf("== rank %d: %zu profiled step%s (times in ms)\n", r->rank, r->n, r->n == 1 ? "" : "s");
		printf("%6s %9s %8s %8s %8s %8s %9s %8s %8s %8s %6s\n", "step", "step", "data", "forward",
		       "loss", "backward", "optimizer", "comm_exp", "comm_ovl", "other", "MFU");
		for (size_t k = 0; k <= r->n; k++) {
			const struct titan_step_time *s = k < r->n ? &r->steps[k] : NULL;
			double m = mfu(flops, peak, s ? s->total : r->med_total);
			char st[24];

			if (!s && r->n < 2)
				break;
			if (s)
				snprintf(st, sizeof(st), "%lld", (long long)s->step);
			else
				snprintf(st, sizeof(st), "median");
			printf("%6s %9.3f", st, (s ? s->total : r->med_total) / 1e3);
			for (int p = 0; p < NP; p++)
				printf(p == TITAN_TIME_OPTIMIZER ? " %9.3f" : " %8.3f",
				       (s ? s->part[p] : r->med[p]) / 1e3);
			if (isnan(m))
				printf(" %6s\n", "-");
			else
				printf(" %5.1f%%\n", m);
		}
		print_comm(r);
	}
	if (isnan(flops) || isnan(peak))
		printf("MFU: - (no metrics.jsonl with tflops and mfu_pct among the inputs: give "
		       "--flops-per-step and --peak-flops)\n");
	else
		printf("MFU: %.4g FLOPs per step over the step span at a peak of %.4g FLOP/s\n", flops, peak);
	if (nr >= 2) {
		printf("stragglers: ranks more than %g%% over the median of %zu ranks (step %.3f ms)%s\n",
		       o->threshold_pct, nr, xmed_total / 1e3, ns ? ":" : ": none");
		for (size_t k = 0; k < ns; k++) {
			const struct straggler *s = &sg[k];

			printf("  rank %d  %-15s %9.3f ms  %+6.1f%% over the median %.3f ms\n", s->rank,
			       what_name(s->what), s->value / 1e3, s->over_pct, s->median / 1e3);
		}
	}
out:
	for (size_t i = 0; i < nr; i++)
		free(rt[i].steps);
	free(rt);
	free(sg);
	titan_json_release(&j);
	return status;
}
