/*
 * report.c — titan-memprof summary (where the memory went, per rank) and
 * compare (titan-estimate's prediction against the measurement), with the
 * helpers the other subcommands share.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "memprof.h"

int mp_verbosity;

const char *mp_bytes(char *buf, size_t n, double bytes)
{
	return titan_format_bytes(buf, n, bytes);
}

const char *mp_where(char *buf, size_t n, uint32_t step, unsigned phase)
{
	if (step == 0 && phase == 0)
		snprintf(buf, n, "set-up (step 0)");
	else
		snprintf(buf, n, "step %u, %s", step, titan_memprof_phase_name(phase));
	return buf;
}

void mp_warn(const char *fmt, ...)
{
	va_list ap;

	if (mp_verbosity < 0)
		return;
	fprintf(stderr, "titan-memprof: warning: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int mp_fail(void)
{
	fprintf(stderr, "titan-memprof: error: %s\n", titan_errmsg());
	return 1;
}

void mp_json_tags(struct titan_json *j, const char *key, const int64_t *v)
{
	titan_json_key(j, key);
	titan_json_object_begin(j);
	for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
		titan_json_key(j, titan_mem_tag_name((enum titan_mem_tag)t));
		titan_json_int(j, v[t]);
	}
	titan_json_object_end(j);
}

int mp_json_print(struct titan_json *j)
{
	if (titan_json_write_line(j, stdout) < 0)
		return mp_fail();
	return 0;
}

static const char *when(char *buf, size_t n, uint64_t ns)
{
	double s = (double)ns * 1e-9;

	if (s < 1e-3)
		snprintf(buf, n, "%.1f µs", s * 1e6);
	else if (s < 1)
		snprintf(buf, n, "%.2f ms", s * 1e3);
	else if (s < 600)
		snprintf(buf, n, "%.2f s", s);
	else
		snprintf(buf, n, "%.1f min", s / 60);
	return buf;
}

static void json_header(struct titan_json *j, const char *command)
{
	titan_json_object_begin(j);
	titan_json_key(j, "format");
	titan_json_string(j, "titan-memprof");
	titan_json_key(j, "version");
	titan_json_int(j, 1);
	titan_json_key(j, "command");
	titan_json_string(j, command);
}

/* ---------------------------------------------------------------- summary */

static const char *frag_note(const struct titan_memreplay_result *m)
{
	return strcmp(m->header.device, "host") ?
	       "n/a (memory trace format 1 records no reserved bytes)" :
	       "n/a (host allocator: the memory trace records no reserved bytes)";
}

static void summary_text(const struct mp_rank *r, const struct titan_memreplay_result *m)
{
	char a[48], b[48], c[48];
	struct titan_memleak lk;

	printf("== rank %d: %s (%s, %llu records, ", r->rank, r->memtrace, m->header.device,
	       (unsigned long long)m->n_records);
	if (m->n_steps)
		printf("steps %u-%u, ", m->steps[0].step, m->steps[m->n_steps - 1].step);
	printf("%s)\n", when(a, sizeof(a), m->t_end_ns));
	if (m->n_records == 0) {
		printf("peak          none: the trace holds no event\n");
	} else {
		printf("peak          %s at %s; %s into the trace, byte %llu\n",
		       mp_bytes(a, sizeof(a), (double)m->total_peak),
		       mp_where(c, sizeof(c), m->at_peak.step, m->at_peak.phase),
		       when(b, sizeof(b), m->at_peak.t_ns), (unsigned long long)m->at_peak.offset);
		printf("              %llu blocks live at the peak, %llu at most\n",
		       (unsigned long long)m->live_blocks_at_peak, (unsigned long long)m->max_live_blocks);
	}
	printf("%-12s %12s %7s %12s %12s\n", "tag", "at peak", "share", "own peak", "at end");
	for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
		char d[48];

		if (!m->peak[t] && !m->cur[t])
			continue;
		printf("%-12s %12s %6.1f%% %12s %12s\n", titan_mem_tag_name((enum titan_mem_tag)t),
		       mp_bytes(a, sizeof(a), (double)m->peak_at_total[t]),
		       m->total_peak ? 100.0 * (double)m->peak_at_total[t] / (double)m->total_peak : 0.0,
		       mp_bytes(b, sizeof(b), (double)m->peak[t]), mp_bytes(d, sizeof(d), (double)m->cur[t]));
	}
	printf("%-12s %12s %6.1f%% %12s %12s\n", "total", mp_bytes(a, sizeof(a), (double)m->total_peak),
	       100.0, "", mp_bytes(b, sizeof(b), (double)m->total_cur));
	if (m->n_top) {
		printf("largest blocks live at the peak (a memory trace has no call sites: each block\n"
		       "is named by its tag, size and the step and phase that allocated it):\n");
		for (int i = 0; i < m->n_top; i++) {
			const struct titan_memblock *k = &m->top[i];

			printf("  %12s  %-12s %s, at %s\n", mp_bytes(a, sizeof(a), (double)k->bytes),
			       titan_mem_tag_name((enum titan_mem_tag)k->tag),
			       mp_where(c, sizeof(c), k->step, k->phase), when(b, sizeof(b), k->t_ns));
		}
	}
	if (m->n_steps > 1) {
		const struct titan_memstep *lo = NULL, *hi = NULL;

		for (size_t i = 0; i < m->n_steps; i++) {
			const struct titan_memstep *s = &m->steps[i];

			if (s->step == 0)
				continue;
			if (!lo || s->peak < lo->peak)
				lo = s;
			if (!hi || s->peak > hi->peak)
				hi = s;
		}
		if (lo && lo->peak == hi->peak)
			printf("step peaks    %s in every step from %u\n", mp_bytes(a, sizeof(a), (double)hi->peak),
			       lo->step);
		else if (lo)
			printf("step peaks    %s (step %u, %s) to %s (step %u, %s): +%s\n",
			       mp_bytes(a, sizeof(a), (double)lo->peak), lo->step,
			       titan_memprof_phase_name(lo->peak_phase), mp_bytes(b, sizeof(b), (double)hi->peak),
			       hi->step, titan_memprof_phase_name(hi->peak_phase),
			       mp_bytes(c, sizeof(c), (double)(hi->peak - lo->peak)));
	}
	printf("fragmentation %s\n", frag_note(m));
	titan_memleak_check(m, &lk);
	if (!lk.valid) {
		printf("leak check    n/a (fewer than two complete training steps with events)\n");
	} else {
		char d[48];

		printf("leak check    live at the end of step %u -> %u: %s -> %s, %s%s (%s%s/step): ",
		       lk.first_step, lk.last_step, mp_bytes(a, sizeof(a), (double)lk.first_live),
		       mp_bytes(b, sizeof(b), (double)lk.last_live), lk.growth >= 0 ? "+" : "",
		       mp_bytes(c, sizeof(c), (double)lk.growth), lk.per_step >= 0 ? "+" : "",
		       mp_bytes(d, sizeof(d), lk.per_step));
		if (lk.growth > 0) {
			printf("GROWING");
			for (int t = 0; t < TITAN_MEM_NTAGS; t++)
				if (lk.tag_growth[t])
					printf(", %s %s%s", titan_mem_tag_name((enum titan_mem_tag)t),
					       lk.tag_growth[t] > 0 ? "+" : "",
					       mp_bytes(b, sizeof(b), (double)lk.tag_growth[t]));
			printf("\n");
		} else {
			printf("%s\n", lk.growth == 0 ? "no growth" : "shrinking");
		}
	}
	if (m->corrupt)
		printf("trace         CORRUPT: %s; analysed the %llu records before it\n", m->corrupt_msg,
		       (unsigned long long)m->n_records);
	else if (m->truncated)
		printf("trace         TRUNCATED at byte %llu of %llu (a partial record of %llu bytes): "
		       "analysed %llu records, up to step %u, %s\n", (unsigned long long)m->stop_offset,
		       (unsigned long long)m->file_bytes, (unsigned long long)m->tail_bytes,
		       (unsigned long long)m->n_records, m->n_steps ? m->steps[m->n_steps - 1].step : 0,
		       when(a, sizeof(a), m->t_end_ns));
	else
		printf("trace         complete: %llu bytes, %llu records\n",
		       (unsigned long long)m->file_bytes, (unsigned long long)m->n_records);
	for (int k = 0; k < TITAN_MEMANOMALY_NKINDS; k++)
		if (m->anomalies[k])
			printf("anomalies     %llu: %s (the first at byte %llu)\n",
			       (unsigned long long)m->anomalies[k],
			       titan_memanomaly_name((enum titan_memanomaly_kind)k),
			       (unsigned long long)m->anomaly_offset[k]);
}

static void summary_json(struct titan_json *j, const struct mp_rank *r,
			 const struct titan_memreplay_result *m)
{
	static const char *const akeys[TITAN_MEMANOMALY_NKINDS] = {
		"free_unknown", "double_alloc", "free_mismatch",
	};
	struct titan_memleak lk;

	titan_json_object_begin(j);
	titan_json_key(j, "rank"); titan_json_int(j, r->rank);
	titan_json_key(j, "path"); titan_json_string(j, r->memtrace);
	titan_json_key(j, "device"); titan_json_string(j, m->header.device);
	titan_json_key(j, "records"); titan_json_uint(j, m->n_records);
	titan_json_key(j, "allocs"); titan_json_uint(j, m->n_alloc);
	titan_json_key(j, "frees"); titan_json_uint(j, m->n_free);
	titan_json_key(j, "duration_s"); titan_json_double(j, (double)m->t_end_ns * 1e-9);
	titan_json_key(j, "peak_bytes"); titan_json_int(j, m->total_peak);
	titan_json_key(j, "peak_step"); titan_json_int(j, m->at_peak.step);
	titan_json_key(j, "peak_phase"); titan_json_string(j, titan_memprof_phase_name(m->at_peak.phase));
	titan_json_key(j, "peak_time_s"); titan_json_double(j, (double)m->at_peak.t_ns * 1e-9);
	titan_json_key(j, "peak_offset"); titan_json_uint(j, m->at_peak.offset);
	mp_json_tags(j, "at_peak", m->peak_at_total);
	mp_json_tags(j, "tag_peak", m->peak);
	mp_json_tags(j, "at_end", m->cur);
	titan_json_key(j, "live_blocks_at_peak"); titan_json_uint(j, m->live_blocks_at_peak);
	titan_json_key(j, "max_live_blocks"); titan_json_uint(j, m->max_live_blocks);
	titan_json_key(j, "top_blocks");
	titan_json_array_begin(j);
	for (int i = 0; i < m->n_top; i++) {
		const struct titan_memblock *k = &m->top[i];

		titan_json_object_begin(j);
		titan_json_key(j, "bytes"); titan_json_uint(j, k->bytes);
		titan_json_key(j, "tag"); titan_json_string(j, titan_mem_tag_name((enum titan_mem_tag)k->tag));
		titan_json_key(j, "step"); titan_json_int(j, k->step);
		titan_json_key(j, "phase"); titan_json_string(j, titan_memprof_phase_name(k->phase));
		titan_json_key(j, "time_s"); titan_json_double(j, (double)k->t_ns * 1e-9);
		titan_json_object_end(j);
	}
	titan_json_array_end(j);
	titan_json_key(j, "fragmentation"); titan_json_null(j);
	titan_json_key(j, "fragmentation_note"); titan_json_string(j, frag_note(m));
	titan_memleak_check(m, &lk);
	titan_json_key(j, "leak");
	if (!lk.valid) {
		titan_json_null(j);
	} else {
		titan_json_object_begin(j);
		titan_json_key(j, "first_step"); titan_json_int(j, lk.first_step);
		titan_json_key(j, "last_step"); titan_json_int(j, lk.last_step);
		titan_json_key(j, "first_bytes"); titan_json_int(j, lk.first_live);
		titan_json_key(j, "last_bytes"); titan_json_int(j, lk.last_live);
		titan_json_key(j, "growth_bytes"); titan_json_int(j, lk.growth);
		titan_json_key(j, "growth_per_step"); titan_json_double(j, lk.per_step);
		titan_json_key(j, "max_step_growth"); titan_json_int(j, lk.max_step_growth);
		mp_json_tags(j, "growth_by_tag", lk.tag_growth);
		titan_json_object_end(j);
	}
	titan_json_key(j, "steps");
	titan_json_array_begin(j);
	for (size_t i = 0; i < m->n_steps; i++) {
		const struct titan_memstep *s = &m->steps[i];

		titan_json_object_begin(j);
		titan_json_key(j, "step"); titan_json_int(j, s->step);
		titan_json_key(j, "events"); titan_json_uint(j, s->n_events);
		titan_json_key(j, "live_at_start"); titan_json_int(j, s->live_at_start);
		titan_json_key(j, "peak_bytes"); titan_json_int(j, s->peak);
		titan_json_key(j, "peak_phase"); titan_json_string(j, titan_memprof_phase_name(s->peak_phase));
		titan_json_object_end(j);
	}
	titan_json_array_end(j);
	titan_json_key(j, "trace");
	titan_json_object_begin(j);
	titan_json_key(j, "bytes"); titan_json_uint(j, m->file_bytes);
	titan_json_key(j, "complete"); titan_json_bool(j, !m->truncated && !m->corrupt);
	titan_json_key(j, "truncated"); titan_json_bool(j, m->truncated);
	titan_json_key(j, "stop_offset"); titan_json_uint(j, m->stop_offset);
	titan_json_key(j, "tail_bytes"); titan_json_uint(j, m->tail_bytes);
	titan_json_key(j, "corrupt");
	if (m->corrupt)
		titan_json_string(j, m->corrupt_msg);
	else
		titan_json_null(j);
	titan_json_key(j, "anomalies");
	titan_json_object_begin(j);
	for (int k = 0; k < TITAN_MEMANOMALY_NKINDS; k++) {
		titan_json_key(j, akeys[k]);
		titan_json_uint(j, m->anomalies[k]);
	}
	titan_json_object_end(j);
	titan_json_object_end(j);
	titan_json_object_end(j);
}

static int need_memory(const struct mp_inputs *in)
{
	for (size_t i = 0; i < in->n; i++)
		if (in->ranks[i].memtrace)
			return 0;
	titan_error(TITAN_E_INVALID, "no memory trace (*.memtrace) among the inputs: titan-train "
		    "writes DUMP/memory_snapshot/rankR.memtrace with "
		    "--profiling.enable_memory_snapshot=true");
	return TITAN_E_INVALID;
}

int mp_summary(struct mp_inputs *in, const struct mp_opts *o)
{
	struct titan_json j;
	int status, rc;

	if (need_memory(in) < 0)
		return mp_fail();
	if ((status = mp_inputs_replay(in, o, 0)) < 0)
		return mp_fail();
	titan_json_init(&j);
	if (o->json) {
		json_header(&j, "summary");
		titan_json_key(&j, "ranks");
		titan_json_array_begin(&j);
	}
	for (size_t i = 0; i < in->n; i++) {
		const struct mp_rank *r = &in->ranks[i];

		if (!r->mem) {
			if (!o->json)
				printf("== rank %d: no memory trace (timing traces only)\n", r->rank);
			continue;
		}
		if (o->json)
			summary_json(&j, r, titan_memreplay_get(r->mem));
		else
			summary_text(r, titan_memreplay_get(r->mem));
		if (!o->json && i + 1 < in->n)
			printf("\n");
	}
	if (o->json) {
		titan_json_array_end(&j);
		titan_json_object_end(&j);
		if ((rc = mp_json_print(&j)) != 0)
			status = rc;
	}
	titan_json_release(&j);
	return status;
}

/* ---------------------------------------------------------------- compare */

struct est_rank {
	int64_t stage, peak, step_peak; /* step_peak: -1 when the estimate has none */
	char phase[32];
	int64_t at_peak[TITAN_MEM_NTAGS], tag_peak[TITAN_MEM_NTAGS];
	bool has_tag_peak;
};

static int est_tags(const json_t *o, int64_t *out, const char *path, size_t i, const char *key)
{
	if (!json_is_object(o))
		return titan_error(TITAN_E_FORMAT, "'%s': ranks[%zu].%s is not an object", path, i, key);
	for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
		const json_t *v = json_object_get(o, titan_mem_tag_name((enum titan_mem_tag)t));

		if (v && !json_is_number(v))
			return titan_error(TITAN_E_FORMAT, "'%s': ranks[%zu].%s.%s is not a number", path, i,
					   key, titan_mem_tag_name((enum titan_mem_tag)t));
		out[t] = v ? (int64_t)json_number_value(v) : 0;
	}
	return 0;
}

static int read_estimate(const char *path, struct est_rank **out, size_t *n_out)
{
	json_error_t err;
	/* --estimate -: titan-estimate --json | titan-memprof compare --estimate - */
	json_t *root = strcmp(path, "-") ? json_load_file(path, 0, &err) : json_loadf(stdin, 0, &err);
	json_t *ranks, *v;
	struct est_rank *e = NULL;
	size_t n = 0;
	int rc = 0;

	*out = NULL;
	*n_out = 0;
	if (!root) {
		if (json_error_code(&err) == json_error_cannot_open_file)
			return titan_error(TITAN_E_IO, "%s", err.text);
		return titan_error(TITAN_E_FORMAT, "'%s': not JSON (line %d: %s)", path, err.line, err.text);
	}
	v = json_object_get(root, "format");
	if (!json_is_string(v) || strcmp(json_string_value(v), "titan-estimate")) {
		rc = titan_error(TITAN_E_FORMAT, "'%s' is not titan-estimate --json output (no \"format\": "
				 "\"titan-estimate\")", path);
		goto out;
	}
	v = json_object_get(root, "version");
	if (!json_is_integer(v) || json_integer_value(v) < 1) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': no valid \"version\"", path);
		goto out;
	}
	if (json_integer_value(v) > 1) {
		rc = titan_error(TITAN_E_UNSUPPORTED, "'%s': titan-estimate format version %lld is newer "
				 "than this titan-memprof reads (1): upgrade titan", path,
				 (long long)json_integer_value(v));
		goto out;
	}
	ranks = json_object_get(root, "ranks");
	if (!json_is_array(ranks) || json_array_size(ranks) == 0) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': \"ranks\" is not a non-empty array", path);
		goto out;
	}
	n = json_array_size(ranks);
	if (!(e = calloc(n, sizeof(*e)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		const json_t *r = json_array_get(ranks, i), *pk = json_object_get(r, "peak_bytes");
		const json_t *ph = json_object_get(r, "peak_phase"), *st = json_object_get(r, "stage");
		const json_t *tp = json_object_get(r, "tag_peak");

		if (!json_is_number(pk)) {
			rc = titan_error(TITAN_E_FORMAT, "'%s': ranks[%zu].peak_bytes is missing", path, i);
			break;
		}
		e[i].stage = json_is_integer(st) ? json_integer_value(st) : (int64_t)i;
		e[i].peak = (int64_t)json_number_value(pk);
		pk = json_object_get(r, "step_peak_bytes"); /* titan-estimate adds it */
		e[i].step_peak = json_is_number(pk) ? (int64_t)json_number_value(pk) : -1;
		snprintf(e[i].phase, sizeof(e[i].phase), "%s", json_is_string(ph) ? json_string_value(ph) : "?");
		if ((rc = est_tags(json_object_get(r, "at_peak"), e[i].at_peak, path, i, "at_peak")) < 0)
			break;
		if (tp) {
			rc = est_tags(tp, e[i].tag_peak, path, i, "tag_peak");
			e[i].has_tag_peak = true;
		}
	}
out:
	json_decref(root);
	if (rc < 0) {
		free(e);
		return rc;
	}
	*out = e;
	*n_out = n;
	return 0;
}

/* The measurement when there is no memory trace: metrics.jsonl's highest
 * memory_peak_bytes line (the tagged allocator's own count, rank 0). */
static int metrics_peak(const char *path, int64_t *peak, int64_t *at_peak, bool *found)
{
	FILE *fp = strcmp(path, "-") ? fopen(path, "r") : stdin; /* --metrics - */
	char *line = NULL;
	size_t cap = 0;

	*found = false;
	if (!fp)
		return titan_error(TITAN_E_IO, "cannot open '%s': %s", path, strerror(errno));
	while (getline(&line, &cap, fp) > 0) {
		json_t *o = json_loads(line, 0, NULL);
		const json_t *p = json_object_get(o, "memory_peak_bytes");
		const json_t *b = json_object_get(o, "memory_peak_by_tag");

		if (json_is_integer(p) && json_is_object(b) && (!*found || json_integer_value(p) > *peak)) {
			*found = true;
			*peak = json_integer_value(p);
			for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
				const json_t *v = json_object_get(b, titan_mem_tag_name((enum titan_mem_tag)t));

				at_peak[t] = json_is_integer(v) ? json_integer_value(v) : 0;
			}
		}
		json_decref(o);
	}
	free(line);
	if (fp != stdin)
		fclose(fp);
	return 0;
}

static double diff_pct(int64_t est, int64_t got)
{
	if (est == 0)
		return got == 0 ? 0 : NAN;
	return 100.0 * (double)(got - est) / (double)est;
}

static const char *pct(char *buf, size_t n, double v)
{
	if (isnan(v))
		snprintf(buf, n, "n/a");
	else
		snprintf(buf, n, "%+.1f%%", v);
	return buf;
}

struct measured {
	int rank;
	const char *source;
	int64_t peak, step_peak, at_peak[TITAN_MEM_NTAGS], tag_peak[TITAN_MEM_NTAGS];
	bool has_tag_peak;
	const char *phase;
};

static void compare_one(struct titan_json *j, bool json, const struct measured *m,
			const struct est_rank *e, const char *est_path)
{
	char a[48], b[48], c[48], d[48], x[24], y[24];

	if (json) {
		titan_json_object_begin(j);
		titan_json_key(j, "rank"); titan_json_int(j, m->rank);
		titan_json_key(j, "stage"); titan_json_int(j, e->stage);
		titan_json_key(j, "measured_from"); titan_json_string(j, m->source);
		titan_json_key(j, "peak");
		titan_json_object_begin(j);
		titan_json_key(j, "estimated"); titan_json_int(j, e->peak);
		titan_json_key(j, "measured"); titan_json_int(j, m->peak);
		titan_json_key(j, "diff_pct"); titan_json_double(j, diff_pct(e->peak, m->peak));
		titan_json_object_end(j);
		titan_json_key(j, "step_peak");
		if (e->step_peak >= 0 && m->step_peak >= 0) {
			titan_json_object_begin(j);
			titan_json_key(j, "estimated"); titan_json_int(j, e->step_peak);
			titan_json_key(j, "measured"); titan_json_int(j, m->step_peak);
			titan_json_key(j, "diff_pct"); titan_json_double(j, diff_pct(e->step_peak, m->step_peak));
			titan_json_object_end(j);
		} else {
			titan_json_null(j);
		}
		titan_json_key(j, "peak_phase");
		titan_json_object_begin(j);
		titan_json_key(j, "estimated"); titan_json_string(j, e->phase);
		titan_json_key(j, "measured"); titan_json_string(j, m->phase);
		titan_json_object_end(j);
		titan_json_key(j, "tags");
		titan_json_object_begin(j);
		for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
			titan_json_key(j, titan_mem_tag_name((enum titan_mem_tag)t));
			titan_json_object_begin(j);
			titan_json_key(j, "estimated_at_peak"); titan_json_int(j, e->at_peak[t]);
			titan_json_key(j, "measured_at_peak"); titan_json_int(j, m->at_peak[t]);
			titan_json_key(j, "diff_pct"); titan_json_double(j, diff_pct(e->at_peak[t], m->at_peak[t]));
			titan_json_key(j, "estimated_peak");
			if (e->has_tag_peak)
				titan_json_int(j, e->tag_peak[t]);
			else
				titan_json_null(j);
			titan_json_key(j, "measured_peak");
			if (m->has_tag_peak)
				titan_json_int(j, m->tag_peak[t]);
			else
				titan_json_null(j);
			titan_json_object_end(j);
		}
		titan_json_object_end(j);
		titan_json_object_end(j);
		return;
	}
	printf("== rank %d (stage %lld): estimate %s vs %s\n", m->rank, (long long)e->stage, est_path,
	       m->source);
	printf("%-12s %12s %12s %8s   %12s %12s %8s\n", "tag", "est at peak", "at peak", "diff",
	       "est own peak", "own peak", "diff");
	for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
		if (!e->at_peak[t] && !m->at_peak[t] && !e->tag_peak[t] && !m->tag_peak[t])
			continue;
		printf("%-12s %12s %12s %8s", titan_mem_tag_name((enum titan_mem_tag)t),
		       mp_bytes(a, sizeof(a), (double)e->at_peak[t]), mp_bytes(b, sizeof(b), (double)m->at_peak[t]),
		       pct(x, sizeof(x), diff_pct(e->at_peak[t], m->at_peak[t])));
		if (e->has_tag_peak && m->has_tag_peak)
			printf("   %12s %12s %8s", mp_bytes(c, sizeof(c), (double)e->tag_peak[t]),
			       mp_bytes(d, sizeof(d), (double)m->tag_peak[t]),
			       pct(y, sizeof(y), diff_pct(e->tag_peak[t], m->tag_peak[t])));
		printf("\n");
	}
	printf("%-12s %12s %12s %8s\n", "total peak", mp_bytes(a, sizeof(a), (double)e->peak),
	       mp_bytes(b, sizeof(b), (double)m->peak), pct(x, sizeof(x), diff_pct(e->peak, m->peak)));
	if (e->step_peak >= 0 && m->step_peak >= 0)
		printf("%-12s %12s %12s %8s\n", "step peak", mp_bytes(a, sizeof(a), (double)e->step_peak),
		       mp_bytes(b, sizeof(b), (double)m->step_peak),
		       pct(x, sizeof(x), diff_pct(e->step_peak, m->step_peak)));
	printf("%-12s %12s %12s\n", "peak phase", e->phase, m->phase);
}

int mp_compare(struct mp_inputs *in, const struct mp_opts *o)
{
	struct est_rank *est = NULL;
	struct measured *ms = NULL;
	size_t n_est = 0, n_ms = 0, world = 0;
	struct titan_json j;
	int status = 0, rc;

	if ((rc = read_estimate(o->estimate, &est, &n_est)) < 0)
		return mp_fail();
	for (size_t i = 0; i < in->n; i++)
		world += in->ranks[i].memtrace != NULL;
	if (world) {
		if ((status = mp_inputs_replay(in, o, 0)) < 0) {
			free(est);
			return mp_fail();
		}
	} else if (!in->metrics) {
		free(est);
		need_memory(in);
		return mp_fail();
	}
	if (!(ms = calloc(world ? world : 1, sizeof(*ms)))) {
		free(est);
		titan_error(TITAN_E_NOMEM, "out of memory");
		return mp_fail();
	}
	for (size_t i = 0; i < in->n; i++) {
		const struct titan_memreplay_result *m;
		struct measured *x = &ms[n_ms];

		if (!in->ranks[i].mem)
			continue;
		m = titan_memreplay_get(in->ranks[i].mem);
		x->rank = in->ranks[i].rank;
		x->source = in->ranks[i].memtrace;
		x->peak = m->total_peak;
		memcpy(x->at_peak, m->peak_at_total, sizeof(x->at_peak));
		memcpy(x->tag_peak, m->peak, sizeof(x->tag_peak));
		x->has_tag_peak = true;
		/* titan-estimate calls set-up "startup" */
		x->phase = m->at_peak.phase == 0 && m->at_peak.step == 0 ? "startup" :
			   titan_memprof_phase_name(m->at_peak.phase);
		x->step_peak = -1;
		for (size_t k = 0; k < m->n_steps; k++) /* the training steps' own peak */
			if (m->steps[k].step > 0 && m->steps[k].peak > x->step_peak)
				x->step_peak = m->steps[k].peak;
		n_ms++;
	}
	if (n_ms == 0) {
		bool found;

		if (metrics_peak(in->metrics, &ms[0].peak, ms[0].at_peak, &found) < 0) {
			free(est);
			free(ms);
			return mp_fail();
		}
		if (!found) {
			free(est);
			free(ms);
			titan_error(TITAN_E_FORMAT, "'%s' has no memory_peak_bytes line and there is no "
				    "memory trace", in->metrics);
			return mp_fail();
		}
		ms[0].source = in->metrics;
		ms[0].phase = "?";
		ms[0].step_peak = ms[0].peak; /* metrics lines cover training steps */
		n_ms = 1;
	}
	titan_json_init(&j);
	if (o->json) {
		json_header(&j, "compare");
		titan_json_key(&j, "estimate");
		titan_json_string(&j, o->estimate);
		titan_json_key(&j, "ranks");
		titan_json_array_begin(&j);
	}
	for (size_t i = 0; i < n_ms; i++) {
		/* pipeline stages are the outermost mesh dim (torchtitan's
		 * [pp, dp_replicate, dp_shard, cp, tp]): stage = rank / (world / pp) */
		size_t w = n_ms, per = w >= n_est && w % n_est == 0 ? w / n_est : 1;
		size_t s = n_est == 1 ? 0 : ((size_t)ms[i].rank / per) % n_est;

		compare_one(&j, o->json, &ms[i], &est[s], o->estimate);
		if (!o->json && i + 1 < n_ms)
			printf("\n");
	}
	if (o->json) {
		titan_json_array_end(&j);
		titan_json_object_end(&j);
		if ((rc = mp_json_print(&j)) != 0)
			status = rc;
	}
	titan_json_release(&j);
	free(est);
	free(ms);
	return status;
}
