/*
 * replay.c — replays a memory event log (titan/memprof.h): per-tag current
 * and peak bytes exactly as the tagged allocator counted them, the blocks
 * live at the peak, one entry per step, a fixed-size timeline, and the
 * anomalies a damaged log shows.  Memory is bounded by the live blocks
 * (an open-addressing table on the address), the steps and the columns,
 * never by the number of events.
 */
#include "titan/memprof.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_LIVE (1ull << 24)

struct slot {
	uint64_t addr, bytes, t_ns;
	uint32_t step;
	uint16_t phase;
	uint8_t tag;
	uint8_t used;
};

struct titan_memreplay {
	struct titan_memreplay_opts o;
	struct titan_memreplay_result r;
	struct slot *tab;
	uint64_t cap, mask, live;         /* cap: power of two */
	size_t cap_steps;
	bool peak_dirty;                  /* a new peak not yet snapshotted */
	bool finished;
};

static const char *const anomaly_names[TITAN_MEMANOMALY_NKINDS] = {
	"free of an address that is not live",
	"allocation of an address that is already live",
	"free whose size or tag differs from its allocation",
};

const char *titan_memanomaly_name(enum titan_memanomaly_kind k)
{
	return (unsigned)k < TITAN_MEMANOMALY_NKINDS ? anomaly_names[k] : "?";
}

void titan_memreplay_opts_default(struct titan_memreplay_opts *o)
{
	o->top_k = 10;
	o->max_live = DEFAULT_MAX_LIVE;
	o->timeline_cols = 0;
}

/* ---------------------------------------------------------- live blocks */

static inline uint64_t hash(uint64_t a)
{
	a ^= a >> 33;
	a *= 0xff51afd7ed558ccdull;
	a ^= a >> 33;
	return a;
}

static struct slot *find(const struct titan_memreplay *m, uint64_t addr)
{
	for (uint64_t i = hash(addr) & m->mask;; i = (i + 1) & m->mask) {
		struct slot *s = &m->tab[i];

		if (!s->used)
			return NULL;
		if (s->addr == addr)
			return s;
	}
}

static void put(struct slot *tab, uint64_t mask, const struct slot *b)
{
	uint64_t i = hash(b->addr) & mask;

	while (tab[i].used)
		i = (i + 1) & mask;
	tab[i] = *b;
}

static int grow(struct titan_memreplay *m)
{
	uint64_t cap = m->cap ? 2 * m->cap : 1024;
	struct slot *t = calloc(cap, sizeof(*t));

	if (!t)
		return titan_error(TITAN_E_NOMEM, "out of memory for %llu live blocks",
				   (unsigned long long)m->live);
	for (uint64_t i = 0; i < m->cap; i++)
		if (m->tab[i].used)
			put(t, cap - 1, &m->tab[i]);
	free(m->tab);
	m->tab = t;
	m->cap = cap;
	m->mask = cap - 1;
	return 0;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void erase(struct titan_memreplay *m, struct slot *s)
{
	uint64_t i = (uint64_t)(s - m->tab), j = i;

	for (;;) {
		uint64_t k;

		j = (j + 1) & m->mask;
		if (!m->tab[j].used)
			break;
		k = hash(m->tab[j].addr) & m->mask;
		/* move j to i unless k lies cyclically in (i, j] */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		m->tab[i] = m->tab[j];
		i = j;
	}
	m->tab[i].used = 0;
	m->live--;
}

/* The top_k largest live blocks, now: a min-heap over the table. */
static int cmp_block_desc(const void *a, const void *b)
{
	const struct titan_memblock *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return x->t_ns < y->t_ns ? -1 : x->t_ns > y->t_ns;
}

static void sift_down(struct titan_memblock *h, int n, int i)
{
	for (;;) {
		int l = 2 * i + 1, r = l + 1, s = i;
		struct titan_memblock t;

		if (l < n && h[l].bytes < h[s].bytes)
			s = l;
		if (r < n && h[r].bytes < h[s].bytes)
			s = r;
		if (s == i)
			return;
		t = h[i];
		h[i] = h[s];
		h[s] = t;
		i = s;
	}
}

static void snapshot(struct titan_memreplay *m)
{
	struct titan_memblock *h = m->r.top;
	int n = 0, k = m->o.top_k;

	m->peak_dirty = false;
	m->r.live_blocks_at_peak = m->live;
	if (k <= 0 || !h)
		return;
	for (uint64_t i = 0; i < m->cap; i++) {
		const struct slot *s = &m->tab[i];
		struct titan_memblock b;

		if (!s->used)
			continue;
		if (n == k && s->bytes <= h[0].bytes)
			continue;
		b = (struct titan_memblock){s->addr, s->bytes, s->t_ns, s->step, s->phase, s->tag};
		if (n < k) {
			h[n++] = b;
			if (n == k)
				for (int j = k / 2 - 1; j >= 0; j--)
					sift_down(h, k, j);
		} else {
			h[0] = b;
			sift_down(h, k, 0);
		}
	}
	qsort(h, (size_t)n, sizeof(*h), cmp_block_desc);
	m->r.n_top = n;
}

/* ------------------------------------------------------------- timeline */

static void col_merge(struct titan_memcol *out, const struct titan_memcol *a,
		      const struct titan_memcol *b)
{
	struct titan_memcol r;

	if (!b->used) {
		r = *a;
	} else if (!a->used) {
		r = *b;
	} else {
		r = b->max_total > a->max_total ? *b : *a;
		r.min_total = a->min_total < b->min_total ? a->min_total : b->min_total;
		memcpy(r.last, b->last, sizeof(r.last));
	}
	*out = r;
}

static void timeline_add(struct titan_memreplay *m, uint64_t t)
{
	struct titan_memreplay_result *r = &m->r;
	uint64_t idx = t / r->col_ns;
	struct titan_memcol *c;

	while (idx >= (uint64_t)r->n_cols) {
		int n = r->n_cols;

		if (r->col_ns > UINT64_MAX / 2) { /* no wider column: 2^63 ns is 292 years */
			idx = (uint64_t)n - 1;
			break;
		}

		for (int i = 0; i < (n + 1) / 2; i++) {
			struct titan_memcol none = {0};

			col_merge(&r->cols[i], &r->cols[2 * i], 2 * i + 1 < n ? &r->cols[2 * i + 1] : &none);
		}
		memset(r->cols + (n + 1) / 2, 0, (size_t)(n - (n + 1) / 2) * sizeof(*r->cols));
		r->col_ns *= 2;
		idx = t / r->col_ns;
	}
	c = &r->cols[idx];
	if (!c->used) {
		c->used = true;
		c->max_total = c->min_total = r->total_cur;
		memcpy(c->at_max, r->cur, sizeof(c->at_max));
	} else if (r->total_cur > c->max_total) {
		c->max_total = r->total_cur;
		memcpy(c->at_max, r->cur, sizeof(c->at_max));
	} else if (r->total_cur < c->min_total) {
		c->min_total = r->total_cur;
	}
	memcpy(c->last, r->cur, sizeof(c->last));
}

/* --------------------------------------------------------------- replay */

int titan_memreplay_new(struct titan_memreplay **out, const struct titan_memreplay_opts *o)
{
	struct titan_memreplay *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if (o)
		m->o = *o;
	else
		titan_memreplay_opts_default(&m->o);
	if (m->o.max_live == 0)
		m->o.max_live = DEFAULT_MAX_LIVE;
	if (m->o.top_k < 0)
		m->o.top_k = 0;
	if (m->o.top_k > 0 && !(m->r.top = calloc((size_t)m->o.top_k, sizeof(*m->r.top))))
		goto nomem;
	if (m->o.timeline_cols > 0) {
		if (!(m->r.cols = calloc((size_t)m->o.timeline_cols, sizeof(*m->r.cols))))
			goto nomem;
		m->r.n_cols = m->o.timeline_cols;
		m->r.col_ns = 1000;
	}
	if (grow(m) < 0) {
		titan_memreplay_free(m);
		return TITAN_E_NOMEM;
	}
	m->r.header.rank = -1;
	*out = m;
	return 0;
nomem:
	titan_memreplay_free(m);
	return titan_error(TITAN_E_NOMEM, "out of memory");
}

void titan_memreplay_free(struct titan_memreplay *m)
{
	if (!m)
		return;
	free(m->tab);
	free(m->r.top);
	free(m->r.steps);
	free(m->r.cols);
	free(m);
}

static void anomaly(struct titan_memreplay *m, enum titan_memanomaly_kind k, uint64_t offset)
{
	if (m->r.anomalies[k]++ == 0)
		m->r.anomaly_offset[k] = offset;
}

static int step_entry(struct titan_memreplay *m, const struct titan_memtrace_record *rec)
{
	struct titan_memreplay_result *r = &m->r;
	struct titan_memstep *s;

	if (r->n_steps && r->steps[r->n_steps - 1].step == rec->step)
		return 0;
	if (r->n_steps == m->cap_steps) {
		size_t cap = m->cap_steps ? 2 * m->cap_steps : 64;
		struct titan_memstep *n = realloc(r->steps, cap * sizeof(*n));

		if (!n)
			return titan_error(TITAN_E_NOMEM, "out of memory for %zu steps", cap);
		r->steps = n;
		m->cap_steps = cap;
	}
	s = &r->steps[r->n_steps++];
	memset(s, 0, sizeof(*s));
	s->step = rec->step;
	s->t_first_ns = rec->t_ns;
	s->live_at_start = r->total_cur;
	memcpy(s->tag_at_start, r->cur, sizeof(s->tag_at_start));
	s->peak = r->total_cur;
	s->peak_phase = rec->phase;
	s->peak_t_ns = rec->t_ns;
	s->first_phase = rec->phase;
	return 0;
}

static void release(struct titan_memreplay *m, struct slot *s)
{
	struct titan_memreplay_result *r = &m->r;

	if (m->peak_dirty)
		snapshot(m); /* the peak's state ends with its first free */
	r->cur[s->tag] -= (int64_t)s->bytes;
	r->total_cur -= (int64_t)s->bytes;
	erase(m, s);
}

int titan_memreplay_feed(struct titan_memreplay *m, const struct titan_memtrace_record *rec,
			 uint64_t offset)
{
	struct titan_memreplay_result *r = &m->r;
	unsigned ph = titan_memprof_phase_slot(rec->phase);
	struct titan_memstep *st;
	struct slot *s;
	int rc;

	TITAN_ASSERT(!m->finished);
	TITAN_ASSERT(rec->tag < TITAN_MEM_NTAGS);
	/* live bytes are summed as int64 (never negative: a free subtracts
	 * what its alloc added); a size that would pass 2^63 is no allocation */
	if (rec->kind == TITAN_MEMTRACE_ALLOC && rec->bytes > (uint64_t)(INT64_MAX - r->total_cur))
		return titan_error(TITAN_E_FORMAT, "'%s': corrupt record at byte %llu (record %llu): "
				   "an allocation of %llu bytes with %lld bytes live", r->path,
				   (unsigned long long)offset,
				   (unsigned long long)((offset - TITAN_MEMTRACE_HEADER_BYTES) /
							TITAN_MEMTRACE_RECORD_BYTES),
				   (unsigned long long)rec->bytes, (long long)r->total_cur);
	if ((rc = step_entry(m, rec)) < 0)
		return rc;
	st = &r->steps[r->n_steps - 1];
	st->n_events++;
	st->t_last_ns = rec->t_ns;
	if (!(st->phase_seen & (1u << ph))) {
		st->phase_seen |= (uint8_t)(1u << ph);
		st->phase_t_ns[ph] = rec->t_ns;
	}
	r->n_records++;
	r->t_end_ns = rec->t_ns;
	s = find(m, rec->addr);
	if (rec->kind == TITAN_MEMTRACE_ALLOC) {
		struct slot b = {rec->addr, rec->bytes, rec->t_ns, rec->step, rec->phase, rec->tag, 1};

		r->n_alloc++;
		if (s) { /* its free was lost: count it freed now */
			anomaly(m, TITAN_MEMANOMALY_DOUBLE_ALLOC, offset);
			release(m, s);
		}
		if (m->live >= m->o.max_live)
			return titan_error(TITAN_E_UNSUPPORTED, "'%s': more than %llu live blocks at "
					   "byte %llu: raise --max-live", r->path,
					   (unsigned long long)m->o.max_live, (unsigned long long)offset);
		if (2 * (m->live + 1) > m->cap && (rc = grow(m)) < 0)
			return rc;
		put(m->tab, m->mask, &b);
		m->live++;
		if (m->live > r->max_live_blocks)
			r->max_live_blocks = m->live;
		r->cur[rec->tag] += (int64_t)rec->bytes;
		r->total_cur += (int64_t)rec->bytes;
		if (r->cur[rec->tag] > r->peak[rec->tag])
			r->peak[rec->tag] = r->cur[rec->tag];
		if (r->total_cur > r->total_peak) {
			r->total_peak = r->total_cur;
			memcpy(r->peak_at_total, r->cur, sizeof(r->cur));
			r->at_peak.step = rec->step;
			r->at_peak.phase = rec->phase;
			r->at_peak.t_ns = rec->t_ns;
			r->at_peak.offset = offset;
			r->at_peak.index = r->n_records - 1;
			m->peak_dirty = true;
		}
		if (r->total_cur > st->peak) {
			st->peak = r->total_cur;
			st->peak_phase = rec->phase;
			st->peak_t_ns = rec->t_ns;
		}
	} else {
		r->n_free++;
		if (!s) {
			anomaly(m, TITAN_MEMANOMALY_FREE_UNKNOWN, offset);
		} else {
			if (s->bytes != rec->bytes || s->tag != rec->tag)
				anomaly(m, TITAN_MEMANOMALY_FREE_MISMATCH, offset);
			release(m, s);
		}
	}
	if (r->n_cols)
		timeline_add(m, rec->t_ns);
	return 0;
}

const struct titan_memreplay_result *titan_memreplay_finish(struct titan_memreplay *m)
{
	if (!m->finished) {
		if (m->peak_dirty)
			snapshot(m);
		m->finished = true;
	}
	return &m->r;
}

const struct titan_memreplay_result *titan_memreplay_get(const struct titan_memreplay *m)
{
	return &m->r;
}

int titan_memreplay_file(const char *path, const struct titan_memreplay_opts *o,
			 struct titan_memreplay **out)
{
	struct titan_memtrace_reader *rd = NULL;
	struct titan_memreplay *m = NULL;
	struct titan_memtrace_record rec;
	struct titan_memreplay_result *r;
	uint64_t off = 0;
	bool refused = false;
	int rc;

	*out = NULL;
	if ((rc = titan_memtrace_open(&rd, path)) < 0)
		return rc;
	if ((rc = titan_memreplay_new(&m, o)) < 0)
		goto fail;
	r = &m->r;
	r->header = *titan_memtrace_header(rd);
	snprintf(r->path, sizeof(r->path), "%s", path);
	while ((rc = titan_memtrace_next(rd, &rec, &off)) > 0) {
		if ((rc = titan_memreplay_feed(m, &rec, off)) < 0) {
			refused = true; /* the record at `off` */
			break;
		}
	}
	if (rc == TITAN_E_FORMAT) {
		r->corrupt = true;
		snprintf(r->corrupt_msg, sizeof(r->corrupt_msg), "%s", titan_errmsg());
		titan_error_clear();
	} else if (rc < 0) {
		goto fail;
	}
	r->stop_offset = refused ? off : titan_memtrace_offset(rd);
	r->tail_bytes = titan_memtrace_tail_bytes(rd);
	r->truncated = r->tail_bytes > 0;
	r->file_bytes = r->stop_offset + r->tail_bytes;
	titan_memtrace_close(rd);
	titan_memreplay_finish(m);
	*out = m;
	return 0;
fail:
	titan_memtrace_close(rd);
	titan_memreplay_free(m);
	return rc;
}

/* ------------------------------------------------------------ leak check */

void titan_memleak_check(const struct titan_memreplay_result *r, struct titan_memleak *out)
{
	size_t *c = NULL, n = 0, first = 0;

	memset(out, 0, sizeof(*out));
	if (r->n_steps < 2 || !(c = malloc(r->n_steps * sizeof(*c))))
		return;
	for (size_t i = 0; i + 1 < r->n_steps; i++) /* complete: a later step follows */
		if (r->steps[i].step >= 1)
			c[n++] = i;
	if (n >= 4 && r->steps[c[0]].step == 1)
		first = 1;
	if (n - first >= 2) {
		const struct titan_memstep *a = &r->steps[c[first] + 1], *b = &r->steps[c[n - 1] + 1];

		out->valid = true;
		out->first_step = r->steps[c[first]].step;
		out->last_step = r->steps[c[n - 1]].step;
		out->first_live = a->live_at_start;
		out->last_live = b->live_at_start;
		out->growth = b->live_at_start - a->live_at_start;
		out->per_step = (double)out->growth / (double)(out->last_step - out->first_step);
		for (int t = 0; t < TITAN_MEM_NTAGS; t++)
			out->tag_growth[t] = b->tag_at_start[t] - a->tag_at_start[t];
		for (size_t i = first + 1; i < n; i++) {
			int64_t g = r->steps[c[i] + 1].live_at_start - r->steps[c[i - 1] + 1].live_at_start;

			if (g > out->max_step_growth)
				out->max_step_growth = g;
		}
	}
	free(c);
}
