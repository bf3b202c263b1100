/*
 * chrome.c — Chrome trace-event JSON writer (see titan/trace.h).
 */
#include "titan/trace.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

struct span {
	char name[96];
	char cat[32];
	int64_t step;
	uint64_t t0;
};

struct titan_trace {
	struct titan_afile out;
	struct titan_json json;
	uint64_t t0;
	int rank, depth;
	bool first, failed;
	struct span stack[MAX_DEPTH];
};

static void emit(struct titan_trace *t)
{
	const char *s = titan_json_str(&t->json);

	if (!s || fprintf(t->out.fp, "%s\n  %s", t->first ? "" : ",", s) < 0)
		t->failed = true;
	t->first = false;
	titan_json_reset(&t->json);
}

int titan_trace_open(struct titan_trace **out, const char *path, int rank, const char *meta)
{
	struct titan_trace *t = calloc(1, sizeof(*t));
	int rc;

	*out = NULL;
	if (!t)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if ((rc = titan_afile_open(&t->out, path)) < 0) {
		free(t);
		return rc;
	}
	titan_json_init(&t->json);
	t->t0 = titan_time_ns();
	t->rank = rank;
	t->first = true;
	fprintf(t->out.fp, "{\"displayTimeUnit\": \"ms\",\n \"otherData\": %s,\n \"traceEvents\": [",
		meta ? meta : "{}");
	*out = t;
	return 0;
}

void titan_trace_begin(struct titan_trace *t, const char *name, const char *cat, int64_t step)
{
	struct span *s;

	if (!t)
		return;
	TITAN_ASSERT(t->depth < MAX_DEPTH);
	s = &t->stack[t->depth++];
	snprintf(s->name, sizeof(s->name), "%s", name);
	snprintf(s->cat, sizeof(s->cat), "%s", cat);
	s->step = step;
	s->t0 = titan_time_ns();
}

/* One complete event; args: "step" and the given integers. */
static void write_span(struct titan_trace *t, const char *name, const char *cat, int tid,
		       uint64_t start_ns, uint64_t end_ns, int64_t step,
		       const struct titan_trace_arg *args, int nargs)
{
	titan_json_object_begin(&t->json);
	titan_json_key(&t->json, "name");
	titan_json_string(&t->json, name);
	titan_json_key(&t->json, "cat");
	titan_json_string(&t->json, cat);
	titan_json_key(&t->json, "ph");
	titan_json_string(&t->json, "X");
	titan_json_key(&t->json, "ts");
	titan_json_double(&t->json, ((double)start_ns - (double)t->t0) / 1e3);
	titan_json_key(&t->json, "dur");
	titan_json_double(&t->json, (double)(end_ns - start_ns) / 1e3);
	titan_json_key(&t->json, "pid");
	titan_json_int(&t->json, t->rank);
	titan_json_key(&t->json, "tid");
	titan_json_int(&t->json, tid);
	titan_json_key(&t->json, "args");
	titan_json_object_begin(&t->json);
	titan_json_key(&t->json, "step");
	titan_json_int(&t->json, step);
	for (int i = 0; i < nargs; i++) {
		titan_json_key(&t->json, args[i].key);
		titan_json_int(&t->json, args[i].value);
	}
	titan_json_object_end(&t->json);
	titan_json_object_end(&t->json);
	emit(t);
}

void titan_trace_end(struct titan_trace *t)
{
	struct span *s;

	if (!t)
		return;
	TITAN_ASSERT(t->depth > 0);
	s = &t->stack[--t->depth];
	write_span(t, s->name, s->cat, 0, s->t0, titan_time_ns(), s->step, NULL, 0);
}

void titan_trace_complete(struct titan_trace *t, const char *name, const char *cat, int tid,
			  uint64_t start_ns, uint64_t end_ns, int64_t step)
{
	if (t && end_ns >= start_ns)
		write_span(t, name, cat, tid, start_ns, end_ns, step, NULL, 0);
}

void titan_trace_complete_args(struct titan_trace *t, const char *name, const char *cat, int tid,
			       uint64_t start_ns, uint64_t end_ns, int64_t step,
			       const struct titan_trace_arg *args, int nargs)
{
	if (t && end_ns >= start_ns)
		write_span(t, name, cat, tid, start_ns, end_ns, step, args, nargs);
}

void titan_trace_counter(struct titan_trace *t, const char *name, double value)
{
	if (!t)
		return;
	titan_json_object_begin(&t->json);
	titan_json_key(&t->json, "name");
	titan_json_string(&t->json, name);
	titan_json_key(&t->json, "ph");
	titan_json_string(&t->json, "C");
	titan_json_key(&t->json, "ts");
	titan_json_double(&t->json, (double)(titan_time_ns() - t->t0) / 1e3);
	titan_json_key(&t->json, "pid");
	titan_json_int(&t->json, t->rank);
	titan_json_key(&t->json, "args");
	titan_json_object_begin(&t->json);
	titan_json_key(&t->json, "value");
	titan_json_double(&t->json, value);
	titan_json_object_end(&t->json);
	titan_json_object_end(&t->json);
	emit(t);
}

int titan_trace_close(struct titan_trace *t)
{
	int rc = 0;

	if (!t)
		return 0;
	while (t->depth > 0)
		titan_trace_end(t);
	if (fprintf(t->out.fp, "\n]}\n") < 0 || t->failed)
		rc = titan_error(TITAN_E_IO, "cannot write the trace '%s'",
				 t->out.path ? t->out.path : "(stdout)");
	rc = titan_afile_close(&t->out, rc);
	titan_json_release(&t->json);
	free(t);
	return rc;
}
