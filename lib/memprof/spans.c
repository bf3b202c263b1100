/*
 * spans.c — Chrome trace-event JSON reader (titan/memprof.h): the events
 * of "traceEvents" are parsed one at a time with jansson, so that a file
 * cut short keeps every event before the cut.
 */
#include "titan/memprof.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

struct open_span {   /* a "B" event waiting for its "E" */
	int64_t pid, tid;
	struct titan_span s;
};

struct reader {
	struct titan_chrome_trace *t;
	const char *buf;
	size_t n;
	struct open_span *open;
	size_t n_open, cap_open;
};

static uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* Names repeat (a trace has a few dozen): each is stored once, found
 * through an open-addressing index of the string table. */
static const char *intern(struct titan_chrome_trace *t, const char *s)
{
	size_t i;
	char *d;

	if (2 * (t->n_strs + 1) > t->hcap) {
		size_t cap = t->hcap ? 2 * t->hcap : 256;
		size_t *h = malloc(cap * sizeof(*h));

		if (!h)
			return NULL;
		for (size_t k = 0; k < cap; k++)
			h[k] = SIZE_MAX;
		for (size_t k = 0; k < t->n_strs; k++) {
			for (i = str_hash(t->strs[k]) & (cap - 1); h[i] != SIZE_MAX; i = (i + 1) & (cap - 1))
				;
			h[i] = k;
		}
		free(t->hidx);
		t->hidx = h;
		t->hcap = cap;
	}
	for (i = str_hash(s) & (t->hcap - 1); t->hidx[i] != SIZE_MAX; i = (i + 1) & (t->hcap - 1))
		if (!strcmp(t->strs[t->hidx[i]], s))
			return t->strs[t->hidx[i]];
	if (t->n_strs == t->cap_strs) {
		size_t cap = t->cap_strs ? 2 * t->cap_strs : 64;
		char **n = realloc(t->strs, cap * sizeof(*n));

		if (!n)
			return NULL;
		t->strs = n;
		t->cap_strs = cap;
	}
	if (!(d = strdup(s)))
		return NULL;
	t->hidx[i] = t->n_strs;
	t->strs[t->n_strs++] = d;
	return d;
}

static int add_span(struct titan_chrome_trace *t, const struct titan_span *s)
{
	if (t->n_spans == t->cap_spans) {
		size_t cap = t->cap_spans ? 2 * t->cap_spans : 256;
		struct titan_span *n = realloc(t->spans, cap * sizeof(*n));

		if (!n)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		t->spans = n;
		t->cap_spans = cap;
	}
	t->spans[t->n_spans++] = *s;
	return 0;
}

static int add_counter(struct titan_chrome_trace *t, const struct titan_counter *c)
{
	if (t->n_counters == t->cap_counters) {
		size_t cap = t->cap_counters ? 2 * t->cap_counters : 256;
		struct titan_counter *n = realloc(t->counters, cap * sizeof(*n));

		if (!n)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		t->counters = n;
		t->cap_counters = cap;
	}
	t->counters[t->n_counters++] = *c;
	return 0;
}

/* pid/tid are numbers in titan's traces; strings (some profilers) hash. */
static int64_t id_of(const json_t *v)
{
	if (json_is_integer(v))
		return json_integer_value(v);
	if (json_is_real(v))
		return (int64_t)json_real_value(v);
	if (!json_is_string(v))
		return 0;
	return (int64_t)(str_hash(json_string_value(v)) >> 33);
}

static int event(struct reader *rd, const json_t *e)
{
	struct titan_chrome_trace *t = rd->t;
	const char *ph = json_string_value(json_object_get(e, "ph"));
	const char *name = json_string_value(json_object_get(e, "name"));
	const char *cat = json_string_value(json_object_get(e, "cat"));
	const json_t *ts = json_object_get(e, "ts"), *args = json_object_get(e, "args");
	const json_t *st = args ? json_object_get(args, "step") : NULL;
	int64_t pid = id_of(json_object_get(e, "pid")), tid = id_of(json_object_get(e, "tid"));
	struct titan_span s;

	if (!json_is_object(e) || !ph || !json_is_number(ts))
		return 0;
	if (t->pid < 0 && json_object_get(e, "pid"))
		t->pid = pid;
	t->n_events++;
	if (!name)
		name = "";
	s = (struct titan_span){intern(t, name), intern(t, cat ? cat : ""), json_number_value(ts), 0,
				json_is_integer(st) ? json_integer_value(st) : -1, pid, tid};
	if (!s.name || !s.cat)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if (!strcmp(ph, "X")) {
		s.dur = json_number_value(json_object_get(e, "dur"));
		return add_span(t, &s);
	}
	if (!strcmp(ph, "B")) {
		if (rd->n_open == rd->cap_open) {
			size_t cap = rd->cap_open ? 2 * rd->cap_open : 64;
			struct open_span *n = realloc(rd->open, cap * sizeof(*n));

			if (!n)
				return titan_error(TITAN_E_NOMEM, "out of memory");
			rd->open = n;
			rd->cap_open = cap;
		}
		rd->open[rd->n_open++] = (struct open_span){pid, tid, s};
		return 0;
	}
	if (!strcmp(ph, "E")) { /* closes the innermost open span of its thread */
		for (size_t i = rd->n_open; i > 0; i--) {
			struct open_span *o = &rd->open[i - 1];

			if (o->pid != pid || o->tid != tid)
				continue;
			o->s.dur = s.ts - o->s.ts;
			if (o->s.step < 0)
				o->s.step = s.step;
			s = o->s;
			memmove(o, o + 1, (rd->n_open - i) * sizeof(*o));
			rd->n_open--;
			return add_span(t, &s);
		}
		return 0;
	}
	if (!strcmp(ph, "C") && json_is_object(args)) {
		const char *k;
		json_t *v;

		json_object_foreach((json_t *)args, k, v) {
			struct titan_counter c = {s.name, intern(t, k), s.ts, json_number_value(v), pid};

			if (!json_is_number(v))
				continue;
			if (!c.series)
				return titan_error(TITAN_E_NOMEM, "out of memory");
			if (add_counter(t, &c) < 0)
				return TITAN_E_NOMEM;
		}
	}
	return 0;
}

static size_t skip_ws(const char *b, size_t i, size_t n)
{
	while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r'))
		i++;
	return i;
}

/* Parse one value at b[*i] (an object or array: jansson stops at its end). */
static json_t *value_at(struct reader *rd, size_t *i, json_error_t *err)
{
	json_t *v = json_loadb(rd->buf + *i, rd->n - *i,
			       JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, err);

	if (v)
		*i += (size_t)err->position;
	return v;
}

/* Skip a scalar or a string (top-level values other than objects/arrays). */
static size_t skip_scalar(const char *b, size_t i, size_t n)
{
	if (i < n && b[i] == '"') {
		for (i++; i < n && b[i] != '"'; i++)
			if (b[i] == '\\')
				i++;
		return i < n ? i + 1 : n;
	}
	while (i < n && !strchr(",}] \t\r\n", b[i]))
		i++;
	return i;
}

static int bad(struct reader *rd, size_t at, const char *what)
{
	return titan_error(TITAN_E_FORMAT, "'%s': not a Chrome trace: %s at byte %zu",
			   rd->t->path, what, at);
}

/* The event list: '[' at b[*i]. */
static int events(struct reader *rd, size_t *pi)
{
	size_t i = *pi + 1;
	int rc;

	for (;;) {
		json_error_t err;
		json_t *e;

		i = skip_ws(rd->buf, i, rd->n);
		if (i < rd->n && rd->buf[i] == ']') {
			*pi = i + 1;
			return 0;
		}
		if (i >= rd->n)
			goto cut;
		if (!(e = value_at(rd, &i, &err))) {
			if (json_error_code(&err) == json_error_premature_end_of_input)
				goto cut;
			return titan_error(TITAN_E_FORMAT, "'%s': bad trace event at byte %zu: %s",
					   rd->t->path, i + (size_t)err.position, err.text);
		}
		rc = event(rd, e);
		json_decref(e);
		if (rc < 0)
			return rc;
		i = skip_ws(rd->buf, i, rd->n);
		if (i >= rd->n)
			goto cut;
		if (rd->buf[i] == ',')
			i++;
		else if (rd->buf[i] != ']')
			return bad(rd, i, "expected ',' or ']' after an event");
	}
cut:
	rd->t->truncated = true;
	rd->t->stop_offset = i;
	*pi = rd->n;
	return 0;
}

static int parse(struct reader *rd)
{
	size_t i = skip_ws(rd->buf, 0, rd->n);
	bool seen = false;
	int rc;

	if (i < rd->n && rd->buf[i] == '[')
		return events(rd, &i);
	if (i >= rd->n || rd->buf[i] != '{')
		return bad(rd, i, "expected '{' or '['");
	for (i++;;) {
		char key[64] = "";
		size_t k0;

		i = skip_ws(rd->buf, i, rd->n);
		if (i >= rd->n) {
			rd->t->truncated = true;
			rd->t->stop_offset = i;
			break;
		}
		if (rd->buf[i] == '}')
			break;
		if (rd->buf[i] == ',') {
			i++;
			continue;
		}
		if (rd->buf[i] != '"')
			return bad(rd, i, "expected a key");
		k0 = i;
		i = skip_scalar(rd->buf, i, rd->n);
		if (i - k0 - 2 < sizeof(key) && i - k0 >= 2) {
			memcpy(key, rd->buf + k0 + 1, i - k0 - 2);
			key[i - k0 - 2] = '\0';
		}
		i = skip_ws(rd->buf, i, rd->n);
		if (i >= rd->n || rd->buf[i] != ':') {
			if (i >= rd->n) {
				rd->t->truncated = true;
				rd->t->stop_offset = i;
				break;
			}
			return bad(rd, i, "expected ':'");
		}
		i = skip_ws(rd->buf, i + 1, rd->n);
		if (!strcmp(key, "traceEvents")) {
			if (i >= rd->n || rd->buf[i] != '[')
				return bad(rd, i, "traceEvents is not an array");
			if ((rc = events(rd, &i)) < 0)
				return rc;
			seen = true;
			if (rd->t->truncated)
				break;
		} else if (i < rd->n && (rd->buf[i] == '{' || rd->buf[i] == '[')) {
			json_error_t err;
			json_t *v = value_at(rd, &i, &err);

			if (!v) {
				if (json_error_code(&err) == json_error_premature_end_of_input) {
					rd->t->truncated = true;
					rd->t->stop_offset = i;
					break;
				}
				return titan_error(TITAN_E_FORMAT, "'%s': bad JSON at byte %zu: %s",
						   rd->t->path, i + (size_t)err.position, err.text);
			}
			if (!strcmp(key, "otherData") && json_is_integer(json_object_get(v, "step")))
				rd->t->meta_step = json_integer_value(json_object_get(v, "step"));
			json_decref(v);
		} else {
			i = skip_scalar(rd->buf, i, rd->n);
		}
	}
	if (!seen && !rd->t->truncated)
		return bad(rd, i, "no traceEvents");
	return 0;
}

int titan_chrome_read(const char *path, struct titan_chrome_trace **out)
{
	struct titan_chrome_trace *t = calloc(1, sizeof(*t));
	struct reader rd = {t, NULL, 0, NULL, 0, 0};
	const void *map = NULL;
	size_t size = 0;
	int rc;

	*out = NULL;
	if (!t || !(t->path = strdup(path))) {
		free(t);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	t->pid = -1;
	t->meta_step = -1;
	if ((rc = titan_map_file(path, &map, &size)) < 0)
		goto out;
	if (size == 0) {
		rc = titan_error(TITAN_E_FORMAT, "'%s' is empty", path);
		goto out;
	}
	rd.buf = map;
	rd.n = size;
	rc = parse(&rd);
out:
	titan_unmap_file(map, size);
	free(rd.open);
	if (rc < 0) {
		titan_chrome_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void titan_chrome_free(struct titan_chrome_trace *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n_strs; i++)
		free(t->strs[i]);
	free(t->strs);
	free(t->hidx);
	free(t->spans);
	free(t->counters);
	free(t->path);
	free(t);
}
