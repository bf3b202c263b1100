/*
 * export.c — titan-memprof export --perfetto: one Chrome trace-event JSON
 * file with every rank's spans (a process per rank), their counters, and
 * a "memory by tag (bytes)" counter track per rank from the memory trace,
 * on one clock: timing traces are aligned to the memory trace of their
 * rank, ranks to each other by the memory traces' wall-clock start.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memprof.h"

#define EXPORT_COLS 4096

struct out {
	FILE *fp;
	struct titan_json j;
	uint64_t n;
	bool failed;
};

static void emit(struct out *o)
{
	const char *s = titan_json_str(&o->j);

	if (!s || fprintf(o->fp, "%s\n  %s", o->n ? "," : "", s) < 0)
		o->failed = true;
	o->n++;
	titan_json_reset(&o->j);
}

static void meta(struct out *o, const char *name, int64_t pid, int64_t tid, const char *key,
		 const char *sval, int64_t ival)
{
	struct titan_json *j = &o->j;

	titan_json_object_begin(j);
	titan_json_key(j, "name"); titan_json_string(j, name);
	titan_json_key(j, "ph"); titan_json_string(j, "M");
	titan_json_key(j, "pid"); titan_json_int(j, pid);
	titan_json_key(j, "tid"); titan_json_int(j, tid);
	titan_json_key(j, "args");
	titan_json_object_begin(j);
	titan_json_key(j, key);
	if (sval)
		titan_json_string(j, sval);
	else
		titan_json_int(j, ival);
	titan_json_object_end(j);
	titan_json_object_end(j);
	emit(o);
}

static void mem_sample(struct out *o, int64_t pid, double ts, const int64_t *v)
{
	struct titan_json *j = &o->j;

	titan_json_object_begin(j);
	titan_json_key(j, "name"); titan_json_string(j, "memory by tag (bytes)");
	titan_json_key(j, "ph"); titan_json_string(j, "C");
	titan_json_key(j, "ts"); titan_json_double(j, ts);
	titan_json_key(j, "pid"); titan_json_int(j, pid);
	titan_json_key(j, "tid"); titan_json_int(j, 0);
	titan_json_key(j, "args");
	titan_json_object_begin(j);
	for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
		titan_json_key(j, titan_mem_tag_name((enum titan_mem_tag)t));
		titan_json_int(j, v[t]);
	}
	titan_json_object_end(j);
	titan_json_object_end(j);
	emit(o);
}

int mp_export(struct mp_inputs *in, const struct mp_opts *opt)
{
	struct titan_afile f;
	struct out o = {0};
	uint64_t t_min = UINT64_MAX;
	double shift = 0;
	bool all_mem = true;
	int status, rc;
	uint64_t *n_mem = calloc(in->n ? in->n : 1, sizeof(*n_mem));

	if (!n_mem) {
		titan_error(TITAN_E_NOMEM, "out of memory");
		return mp_fail();
	}
	if ((status = mp_inputs_replay(in, opt, EXPORT_COLS)) < 0 || mp_inputs_merge_spans(in) < 0) {
		free(n_mem);
		return mp_fail();
	}
	/* ranks against each other: the memory traces' wall-clock starts */
	for (size_t i = 0; i < in->n; i++) {
		const struct mp_rank *r = &in->ranks[i];
		uint64_t s = r->mem ? titan_memreplay_get(r->mem)->header.start_unix_ns : 0;

		if (!r->mem || s == 0)
			all_mem = false;
		else if (s < t_min)
			t_min = s;
	}
	for (size_t i = 0; i < in->n; i++) {
		struct mp_rank *r = &in->ranks[i];

		r->rank_offset_us = all_mem ? (double)(titan_memreplay_get(r->mem)->header.start_unix_ns - t_min) / 1e3 : 0;
		for (size_t k = 0; k < r->n_spans; k++)
			shift = fmin(shift, r->spans[k].ts + r->rank_offset_us);
		for (size_t k = 0; k < r->n_counters; k++)
			shift = fmin(shift, r->counters[k].ts + r->rank_offset_us);
	}
	shift = -shift; /* nothing before 0 */
	if ((rc = titan_afile_open(&f, opt->perfetto)) < 0) {
		free(n_mem);
		return mp_fail();
	}
	o.fp = f.fp;
	titan_json_init(&o.j);
	fprintf(o.fp, "{\"displayTimeUnit\": \"ms\",\n \"otherData\": {\"tool\": \"titan-memprof\", "
		"\"version\": \"%s\"},\n \"traceEvents\": [", titan_version());
	for (size_t i = 0; i < in->n; i++) {
		const struct mp_rank *r = &in->ranks[i];
		double off = r->rank_offset_us + shift;
		int64_t tids[64];
		int ntid = 0;
		char name[64];

		snprintf(name, sizeof(name), "rank %d", r->rank);
		meta(&o, "process_name", r->rank, 0, "name", name, 0);
		meta(&o, "process_sort_index", r->rank, 0, "sort_index", NULL, r->rank);
		for (size_t k = 0; k < r->n_spans; k++) {
			const struct titan_span *s = &r->spans[k];
			struct titan_json *j = &o.j;
			bool seen = false;

			for (int q = 0; q < ntid; q++)
				seen |= tids[q] == s->tid;
			if (!seen && ntid < 64) {
				tids[ntid++] = s->tid;
				snprintf(name, sizeof(name), s->tid == 0 ? "main" : "thread %lld", (long long)s->tid);
				meta(&o, "thread_name", r->rank, s->tid, "name", name, 0);
			}
			titan_json_object_begin(j);
			titan_json_key(j, "name"); titan_json_string(j, s->name);
			titan_json_key(j, "cat"); titan_json_string(j, *s->cat ? s->cat : "span");
			titan_json_key(j, "ph"); titan_json_string(j, "X");
			titan_json_key(j, "ts"); titan_json_double(j, s->ts + off);
			titan_json_key(j, "dur"); titan_json_double(j, s->dur);
			titan_json_key(j, "pid"); titan_json_int(j, r->rank);
			titan_json_key(j, "tid"); titan_json_int(j, s->tid);
			titan_json_key(j, "args");
			titan_json_object_begin(j);
			if (s->step >= 0) {
				titan_json_key(j, "step");
				titan_json_int(j, s->step);
			}
			titan_json_object_end(j);
			titan_json_object_end(j);
			emit(&o);
		}
		for (size_t k = 0; k < r->n_counters; k++) {
			const struct titan_counter *c = &r->counters[k];
			struct titan_json *j = &o.j;

			titan_json_object_begin(j);
			titan_json_key(j, "name"); titan_json_string(j, c->name);
			titan_json_key(j, "ph"); titan_json_string(j, "C");
			titan_json_key(j, "ts"); titan_json_double(j, c->ts + off);
			titan_json_key(j, "pid"); titan_json_int(j, r->rank);
			titan_json_key(j, "tid"); titan_json_int(j, 0);
			titan_json_key(j, "args");
			titan_json_object_begin(j);
			titan_json_key(j, c->series);
			titan_json_double(j, c->value);
			titan_json_object_end(j);
			titan_json_object_end(j);
			emit(&o);
		}
		if (r->mem) { /* each column: its peak, then where it ended */
			const struct titan_memreplay_result *m = titan_memreplay_get(r->mem);

			for (int k = 0; k < m->n_cols; k++) {
				const struct titan_memcol *c = &m->cols[k];
				double t0 = (double)((uint64_t)k * m->col_ns) / 1e3 + off;

				if (!c->used)
					continue;
				mem_sample(&o, r->rank, t0, c->at_max);
				n_mem[i]++;
				if (memcmp(c->last, c->at_max, sizeof(c->last))) {
					mem_sample(&o, r->rank, t0 + (double)m->col_ns / 2e3, c->last);
					n_mem[i]++;
				}
			}
		}
	}
	if (fprintf(o.fp, "\n]}\n") < 0 || o.failed)
		rc = titan_error(TITAN_E_IO, "cannot write '%s'", opt->perfetto);
	titan_json_release(&o.j);
	if ((rc = titan_afile_close(&f, rc)) < 0) {
		free(n_mem);
		return mp_fail();
	}
	if (opt->json) {
		struct titan_json j;

		titan_json_init(&j);
		titan_json_object_begin(&j);
		titan_json_key(&j, "format"); titan_json_string(&j, "titan-memprof");
		titan_json_key(&j, "version"); titan_json_int(&j, 1);
		titan_json_key(&j, "command"); titan_json_string(&j, "export");
		titan_json_key(&j, "out"); titan_json_string(&j, opt->perfetto);
		titan_json_key(&j, "events"); titan_json_uint(&j, o.n);
		titan_json_key(&j, "ranks_aligned_by_clock"); titan_json_bool(&j, all_mem);
		titan_json_key(&j, "ranks");
		titan_json_array_begin(&j);
		for (size_t i = 0; i < in->n; i++) {
			const struct mp_rank *r = &in->ranks[i];

			titan_json_object_begin(&j);
			titan_json_key(&j, "rank"); titan_json_int(&j, r->rank);
			titan_json_key(&j, "spans"); titan_json_uint(&j, r->n_spans);
			titan_json_key(&j, "counter_samples"); titan_json_uint(&j, r->n_counters);
			titan_json_key(&j, "memory_samples"); titan_json_uint(&j, n_mem[i]);
			titan_json_key(&j, "offset_us"); titan_json_double(&j, r->rank_offset_us + shift);
			titan_json_object_end(&j);
		}
		titan_json_array_end(&j);
		titan_json_object_end(&j);
		if (strcmp(opt->perfetto, "-") && (rc = mp_json_print(&j)) != 0)
			status = rc;
		titan_json_release(&j);
	} else if (strcmp(opt->perfetto, "-")) {
		uint64_t ns = 0, nm = 0;

		for (size_t i = 0; i < in->n; i++) {
			ns += in->ranks[i].n_spans;
			nm += n_mem[i];
		}
		printf("wrote %s: %llu events (%zu rank%s, %llu spans, %llu memory samples)%s\n",
		       opt->perfetto, (unsigned long long)o.n, in->n, in->n == 1 ? "" : "s",
		       (unsigned long long)ns, (unsigned long long)nm,
		       all_mem || in->n < 2 ? "" : "; ranks not aligned (a rank has no memory trace)");
	}
	free(n_mem);
	return status;
}
