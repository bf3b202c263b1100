/*
 * inputs.c — titan-memprof's inputs: which files belong to which rank,
 * replaying the memory traces, and putting each rank's timing traces (one
 * per profiled iteration, each timed from its own start) on one time base.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "memprof.h"

#define MAX_DEPTH 6

struct list {
	char **v;
	size_t n, cap;
};

static int list_add(struct list *l, const char *s)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		char **n = realloc(l->v, cap * sizeof(*n));

		if (!n)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		l->v = n;
		l->cap = cap;
	}
	if (!(l->v[l->n] = titan_strdup(s)))
		return TITAN_E_NOMEM;
	l->n++;
	return 0;
}

static void list_release(struct list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

/* "iteration_4" before "iteration_12": digits compare as numbers. */
static int natural_cmp(const char *a, const char *b)
{
	while (*a && *b) {
		if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
			const char *x = a, *y = b;
			size_t lx, ly;
			int c;

			while (*x == '0' && isdigit((unsigned char)x[1]))
				x++;
			while (*y == '0' && isdigit((unsigned char)y[1]))
				y++;
			for (a = x; isdigit((unsigned char)*a); a++)
				;
			for (b = y; isdigit((unsigned char)*b); b++)
				;
			lx = (size_t)(a - x);
			ly = (size_t)(b - y);
			if (lx != ly)
				return lx < ly ? -1 : 1;
			if ((c = strncmp(x, y, lx)) != 0)
				return c;
			continue;
		}
		if (*a != *b)
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		a++;
		b++;
	}
	return *a ? 1 : *b ? -1 : 0;
}

static int natural_qsort(const void *a, const void *b)
{
	return natural_cmp(*(char *const *)a, *(char *const *)b);
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && !strcmp(s + a - b, suffix);
}

/* The N of "rankN" in a file name, or -1. */
static int rank_of_name(const char *path)
{
	const char *b = base_name(path), *p = strstr(b, "rank");
	long v;
	char *end;

	if (!p || !isdigit((unsigned char)p[4]))
		return -1;
	v = strtol(p + 4, &end, 10);
	return v >= 0 && v < 1 << 24 ? (int)v : -1;
}

struct found {
	struct list mem, traces, metrics;
};

static int walk(struct found *f, const char *dir, int depth)
{
	struct list names = {0};
	struct dirent *e;
	DIR *d = opendir(dir);
	int rc = 0;

	if (!d)
		return titan_error(TITAN_E_IO, "cannot open '%s': %s", dir, strerror(errno));
	while ((e = readdir(d)) && rc == 0)
		if (e->d_name[0] != '.' && !strstr(e->d_name, ".tmp"))
			rc = list_add(&names, e->d_name);
	closedir(d);
	if (rc == 0 && names.n > 1)
		qsort(names.v, names.n, sizeof(*names.v), natural_qsort);
	for (size_t i = 0; i < names.n && rc == 0; i++) {
		char path[4096];
		struct stat st;
		const char *n = names.v[i];

		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, n) >= sizeof(path) ||
		    stat(path, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			if (depth < MAX_DEPTH)
				rc = walk(f, path, depth + 1);
		} else if (ends_with(n, ".memtrace")) {
			rc = list_add(&f->mem, path);
		} else if (ends_with(n, ".json") && strstr(n, "trace")) {
			rc = list_add(&f->traces, path);
		} else if (ends_with(n, ".jsonl") && !strncmp(n, "metrics", 7)) {
			rc = list_add(&f->metrics, path);
		}
	}
	list_release(&names);
	return rc;
}

/* A file named on the command line: what is it? */
static int classify(struct found *f, const char *path)
{
	unsigned char b[64];
	size_t n, i = 0;
	FILE *fp;

	if (!strcmp(path, "-"))
		return list_add(&f->mem, path);
	if (!(fp = fopen(path, "rb")))
		return titan_error(TITAN_E_IO, "cannot open '%s': %s", path, strerror(errno));
	n = fread(b, 1, sizeof(b), fp);
	fclose(fp);
	if ((n >= 7 && !memcmp(b, TITAN_MEMTRACE_MAGIC, 7)) || ends_with(path, ".memtrace"))
		return list_add(&f->mem, path);
	if (ends_with(path, ".jsonl"))
		return list_add(&f->metrics, path);
	while (i < n && isspace(b[i]))
		i++;
	if (i < n && (b[i] == '{' || b[i] == '['))
		return list_add(&f->traces, path);
	return titan_error(TITAN_E_FORMAT, "'%s' is not a memory trace (.memtrace), a Chrome "
			   "trace (JSON) or a metrics.jsonl", path);
}

static struct mp_rank *rank_get(struct mp_inputs *in, int rank)
{
	struct mp_rank *r;

	for (size_t i = 0; i < in->n; i++)
		if (in->ranks[i].rank == rank)
			return &in->ranks[i];
	if (!(r = realloc(in->ranks, (in->n + 1) * sizeof(*r)))) {
		titan_error(TITAN_E_NOMEM, "out of memory");
		return NULL;
	}
	in->ranks = r;
	r = &in->ranks[in->n++];
	memset(r, 0, sizeof(*r));
	r->rank = rank;
	return r;
}

static int add_trace(struct mp_rank *r, const char *path, struct titan_chrome_trace *t)
{
	struct mp_trace *n = realloc(r->traces, (r->n_traces + 1) * sizeof(*n));

	if (!n)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	r->traces = n;
	n = &r->traces[r->n_traces];
	memset(n, 0, sizeof(*n));
	if (!(n->path = titan_strdup(path)))
		return TITAN_E_NOMEM;
	n->t = t;
	r->n_traces++;
	return 0;
}

static void rank_release(struct mp_rank *r);

static int cmp_rank(const void *a, const void *b)
{
	const struct mp_rank *x = a, *y = b;

	return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static int cmp_trace(const void *a, const void *b)
{
	return natural_cmp(((const struct mp_trace *)a)->path, ((const struct mp_trace *)b)->path);
}

int mp_inputs_find(struct mp_inputs *in, char **args, int n, const struct mp_opts *o,
		   bool want_traces)
{
	struct found f = {{0}, {0}, {0}};
	int rc = 0;

	memset(in, 0, sizeof(*in));
	for (int i = 0; i < n && rc == 0; i++) {
		struct stat st;

		if (strcmp(args[i], "-") && stat(args[i], &st) != 0)
			rc = titan_error(TITAN_E_IO, "cannot open '%s': %s", args[i], strerror(errno));
		else if (strcmp(args[i], "-") && S_ISDIR(st.st_mode))
			rc = walk(&f, args[i], 0);
		else
			rc = classify(&f, args[i]);
	}
	if (rc < 0)
		goto out;
	if (o->metrics)
		rc = list_add(&f.metrics, o->metrics);
	if (f.metrics.n && !(in->metrics = titan_strdup(f.metrics.v[f.metrics.n - 1])))
		rc = TITAN_E_NOMEM;
	for (size_t i = 0; i < f.mem.n && rc == 0; i++) {
		struct titan_memtrace_reader *rd;
		struct mp_rank *r;
		int rank = -1;

		if (strcmp(f.mem.v[i], "-")) { /* the header's rank, else the name's */
			if (titan_memtrace_open(&rd, f.mem.v[i]) == 0)
				rank = titan_memtrace_header(rd)->rank;
			titan_memtrace_close(rd);
			titan_error_clear(); /* a bad file is reported when replayed */
		}
		if (rank < 0)
			rank = rank_of_name(f.mem.v[i]);
		if (!(r = rank_get(in, rank < 0 ? 0 : rank))) {
			rc = TITAN_E_NOMEM;
			break;
		}
		if (r->memtrace) {
			rc = titan_error(TITAN_E_INVALID, "two memory traces for rank %d: '%s' and '%s' "
					 "(give the files of one run)", r->rank, r->memtrace, f.mem.v[i]);
			break;
		}
		if (!(r->memtrace = titan_strdup(f.mem.v[i])))
			rc = TITAN_E_NOMEM;
	}
	for (size_t i = 0; i < f.traces.n && rc == 0; i++) {
		struct titan_chrome_trace *t = NULL;
		struct mp_rank *r;
		int rank = rank_of_name(f.traces.v[i]);

		if (rank < 0 || want_traces) {
			if ((rc = titan_chrome_read(f.traces.v[i], &t)) < 0)
				break;
			if (rank < 0)
				rank = t->pid >= 0 && t->pid < 1 << 24 ? (int)t->pid : 0;
			if (t->truncated)
				mp_warn("'%s' is cut short at byte %llu (a killed run?): using the %llu "
					"events before it", f.traces.v[i], (unsigned long long)t->stop_offset,
					(unsigned long long)t->n_events);
		}
		if (!(r = rank_get(in, rank)) || add_trace(r, f.traces.v[i], t) < 0) {
			titan_chrome_free(t);
			rc = TITAN_E_NOMEM;
		}
	}
	if (rc < 0)
		goto out;
	if (in->n > 1)
		qsort(in->ranks, in->n, sizeof(*in->ranks), cmp_rank);
	for (size_t i = 0; i < in->n; i++)
		if (in->ranks[i].n_traces > 1)
			qsort(in->ranks[i].traces, in->ranks[i].n_traces, sizeof(struct mp_trace), cmp_trace);
	if (o->rank >= 0) { /* keep one rank */
		size_t k;

		for (k = 0; k < in->n && in->ranks[k].rank != o->rank; k++)
			;
		if (k == in->n) {
			rc = titan_error(TITAN_E_INVALID, "--rank %d: no trace of that rank in the inputs",
					 o->rank);
			goto out;
		}
		for (size_t i = 0; i < in->n; i++)
			if (i != k)
				rank_release(&in->ranks[i]);
		in->ranks[0] = in->ranks[k];
		in->n = 1;
	}
out:
	list_release(&f.mem);
	list_release(&f.traces);
	list_release(&f.metrics);
	return rc;
}

static void rank_release(struct mp_rank *r)
{
	free(r->memtrace);
	titan_memreplay_free(r->mem);
	for (size_t k = 0; k < r->n_traces; k++) {
		free(r->traces[k].path);
		titan_chrome_free(r->traces[k].t);
	}
	free(r->traces);
	free(r->spans);
	free(r->counters);
}

void mp_inputs_release(struct mp_inputs *in)
{
	for (size_t i = 0; i < in->n; i++)
		rank_release(&in->ranks[i]);
	free(in->ranks);
	free(in->metrics);
	memset(in, 0, sizeof(*in));
}

int mp_inputs_replay(struct mp_inputs *in, const struct mp_opts *o, int timeline_cols)
{
	struct titan_memreplay_opts ro;
	int status = 0;

	titan_memreplay_opts_default(&ro);
	ro.top_k = o->top_k;
	ro.max_live = o->max_live;
	ro.timeline_cols = timeline_cols;
	for (size_t i = 0; i < in->n; i++) {
		struct mp_rank *r = &in->ranks[i];
		const struct titan_memreplay_result *m;
		int rc;

		if (!r->memtrace)
			continue;
		if ((rc = titan_memreplay_file(r->memtrace, &ro, &r->mem)) < 0)
			return rc;
		m = titan_memreplay_get(r->mem);
		if (m->corrupt) {
			fprintf(stderr, "titan-memprof: error: %s: analysed the %llu records before it\n",
				m->corrupt_msg, (unsigned long long)m->n_records);
			status = 1;
		} else if (m->truncated) {
			mp_warn("'%s' is truncated at byte %llu, inside a record (%llu bytes of %d; a "
				"killed run?): analysed the %llu complete records, up to step %u",
				r->memtrace, (unsigned long long)m->stop_offset,
				(unsigned long long)m->tail_bytes, TITAN_MEMTRACE_RECORD_BYTES,
				(unsigned long long)m->n_records,
				m->n_steps ? m->steps[m->n_steps - 1].step : 0);
		}
		for (int k = 0; k < TITAN_MEMANOMALY_NKINDS; k++)
			if (m->anomalies[k])
				mp_warn("'%s': %llu record%s: %s (the first at byte %llu)", r->memtrace,
					(unsigned long long)m->anomalies[k], m->anomalies[k] == 1 ? "" : "s",
					titan_memanomaly_name((enum titan_memanomaly_kind)k),
					(unsigned long long)m->anomaly_offset[k]);
	}
	return status;
}

static const struct titan_memstep *mem_step(const struct titan_memreplay_result *m, int64_t step)
{
	size_t lo = 0, hi = m->n_steps;

	while (lo < hi) { /* steps ascend in a titan-train trace */
		size_t mid = (lo + hi) / 2;

		if ((int64_t)m->steps[mid].step < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < m->n_steps && m->steps[lo].step == step)
		return &m->steps[lo];
	for (size_t i = 0; i < m->n_steps; i++)
		if ((int64_t)m->steps[i].step == step)
			return &m->steps[i];
	return NULL;
}

/* Offset of a timing trace on the memory trace's clock: its earliest span
 * of a phase the memory trace has an event in, for that step. */
static bool align(const struct titan_chrome_trace *t, const struct titan_memreplay_result *m,
		  double *offset)
{
	static const char *const names[] = {"data", "forward", "loss", "backward", "optimizer"};
	static const unsigned phases[] = {1, 2, 3, 4, 5}; /* enum titan_phase */
	const struct titan_span *best = NULL;
	unsigned best_phase = 0;
	const struct titan_memstep *best_step = NULL;

	for (size_t i = 0; i < t->n_spans; i++) {
		const struct titan_span *s = &t->spans[i];
		const struct titan_memstep *ms;

		if (s->step < 0 || (best && s->ts >= best->ts))
			continue;
		for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
			if (strcmp(s->name, names[k]) || !(ms = mem_step(m, s->step)) ||
			    !(ms->phase_seen & (1u << phases[k])))
				continue;
			best = s;
			best_phase = phases[k];
			best_step = ms;
		}
	}
	if (!best)
		return false;
	*offset = (double)best_step->phase_t_ns[best_phase] / 1e3 - best->ts;
	return true;
}

int mp_inputs_merge_spans(struct mp_inputs *in)
{
	for (size_t i = 0; i < in->n; i++) {
		struct mp_rank *r = &in->ranks[i];
		const struct titan_memreplay_result *m = r->mem ? titan_memreplay_get(r->mem) : NULL;
		size_t ns = 0, nc = 0;
		double end = 0;

		for (size_t k = 0; k < r->n_traces; k++) {
			ns += r->traces[k].t->n_spans;
			nc += r->traces[k].t->n_counters;
		}
		free(r->spans);
		free(r->counters);
		r->spans = malloc((ns ? ns : 1) * sizeof(*r->spans));
		r->counters = malloc((nc ? nc : 1) * sizeof(*r->counters));
		if (!r->spans || !r->counters)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		r->n_spans = r->n_counters = 0;
		for (size_t k = 0; k < r->n_traces; k++) {
			struct mp_trace *tr = &r->traces[k];
			const struct titan_chrome_trace *t = tr->t;
			double off = 0, lo = INFINITY;

			for (size_t j = 0; j < t->n_spans; j++)
				lo = fmin(lo, t->spans[j].ts);
			if (!(m && align(t, m, &off)))
				off = k == 0 || !isfinite(lo) ? 0 : end + 1.0 - lo;
			tr->offset_us = off;
			for (size_t j = 0; j < t->n_spans; j++) {
				struct titan_span s = t->spans[j];

				s.ts += off;
				if (s.ts + s.dur > end)
					end = s.ts + s.dur;
				r->spans[r->n_spans++] = s;
			}
			for (size_t j = 0; j < t->n_counters; j++) {
				struct titan_counter c = t->counters[j];

				c.ts += off;
				if (c.ts > end)
					end = c.ts;
				r->counters[r->n_counters++] = c;
			}
		}
	}
	return 0;
}
