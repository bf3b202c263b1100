/*
 * timing.c — time per step and phase from timing spans (titan/memprof.h):
 * the union of each phase's spans in a step, communication split into the
 * part hidden under compute on another thread (a side stream) and the
 * exposed rest, and what the step spent outside all of them.
 */
#include "titan/memprof.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const part_names[TITAN_TIME_NPARTS] = {
	"data", "forward", "loss", "backward", "optimizer", "comm_exposed", "comm_overlapped", "other",
};

const char *titan_time_part_name(enum titan_time_part p)
{
	return (unsigned)p < TITAN_TIME_NPARTS ? part_names[p] : "?";
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double titan_median(double *v, size_t n)
{
	if (n == 0)
		return NAN;
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool titan_span_is_comm(const struct titan_span *s)
{
	static const char *const cats[] = {"comm", "nccl", "collective", "communication"};
	static const char *const pats[] = {
		"allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "nccl",
		"sendrecv", "send", "recv", "barrier",
	};
	char name[128];
	size_t k = 0;

	for (size_t i = 0; i < sizeof(cats) / sizeof(cats[0]); i++)
		if (!strcmp(s->cat, cats[i]))
			return true;
	/* lower case without '_', '-' and ' ': all_reduce, all-reduce, AllReduce */
	for (const char *p = s->name; *p && k + 1 < sizeof(name); p++)
		if (*p != '_' && *p != '-' && *p != ' ')
			name[k++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
	name[k] = '\0';
	for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++)
		if (strstr(name, pats[i]))
			return true;
	return false;
}

/* ------------------------------------------------------------ intervals */

struct ivs {
	double (*v)[2];
	size_t n, cap;
};

static int iv_add(struct ivs *s, double a, double b)
{
	if (!(b > a))
		return 0;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 32;
		double (*n)[2] = realloc(s->v, cap * sizeof(*n));

		if (!n)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		s->v = n;
		s->cap = cap;
	}
	s->v[s->n][0] = a;
	s->v[s->n][1] = b;
	s->n++;
	return 0;
}

static int cmp_iv(const void *a, const void *b)
{
	const double *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Sort and merge in place; returns the covered length. */
static double iv_union(struct ivs *s)
{
	size_t k = 0;
	double len = 0;

	if (s->n == 0)
		return 0;
	qsort(s->v, s->n, sizeof(*s->v), cmp_iv);
	for (size_t i = 1; i < s->n; i++) {
		if (s->v[i][0] <= s->v[k][1]) {
			if (s->v[i][1] > s->v[k][1])
				s->v[k][1] = s->v[i][1];
		} else {
			s->v[++k][0] = s->v[i][0];
			s->v[k][1] = s->v[i][1];
		}
	}
	s->n = k + 1;
	for (size_t i = 0; i < s->n; i++)
		len += s->v[i][1] - s->v[i][0];
	return len;
}

/* Parts of [a, b) not covered by the merged set m go to `out`; returns
 * the covered length. */
static double iv_cut(const struct ivs *m, double a, double b, struct ivs *out, int *rc)
{
	double covered = 0, at = a;
	size_t lo = 0, hi = m->n;

	while (lo < hi) { /* first interval ending after a */
		size_t mid = (lo + hi) / 2;

		if (m->v[mid][1] <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < m->n && m->v[i][0] < b; i++) {
		double x = m->v[i][0] > at ? m->v[i][0] : at, y = m->v[i][1] < b ? m->v[i][1] : b;

		if (x > at && *rc == 0)
			*rc = iv_add(out, at, x);
		if (y > x) {
			covered += y - x;
			at = y;
		}
	}
	if (at < b && *rc == 0)
		*rc = iv_add(out, at, b);
	return covered;
}

/* ------------------------------------------------------------ per step */

static int part_of(const char *name)
{
	for (int p = TITAN_TIME_DATA; p <= TITAN_TIME_OPTIMIZER; p++)
		if (!strcmp(name, part_names[p]))
			return p;
	return -1;
}

struct stepx {
	struct titan_step_time t;
	size_t *spans;   /* indices of the step's spans */
	size_t n, cap;
};

static int cmp_step(const void *a, const void *b)
{
	const struct stepx *x = a, *y = b;

	if (x->t.step != y->t.step)
		return x->t.step < y->t.step ? -1 : 1;
	return x->t.ts < y->t.ts ? -1 : x->t.ts > y->t.ts;
}

static int step_add(struct stepx *s, size_t i)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		size_t *n = realloc(s->spans, cap * sizeof(*n));

		if (!n)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		s->spans = n;
		s->cap = cap;
	}
	s->spans[s->n++] = i;
	return 0;
}

/* The step's entry for the collective of a comm span: the first word of
 * its name (titan-train's "all_to_all_v moe dispatch (ep)" is
 * all_to_all_v); past TITAN_TIME_NCOMM names the last entry is "(other)". */
static struct titan_comm_time *comm_slot(struct titan_step_time *t, const char *name)
{
	char w[sizeof(t->comm[0].name)];
	size_t k = 0;

	while (*name == ' ')
		name++;
	while (name[k] && name[k] != ' ' && k + 1 < sizeof(w)) {
		w[k] = name[k];
		k++;
	}
	w[k] = '\0';
	if (!k)
		snprintf(w, sizeof(w), "?");
	for (int i = 0; i < t->n_comm; i++)
		if (!strcmp(t->comm[i].name, w))
			return &t->comm[i];
	if (t->n_comm == TITAN_TIME_NCOMM) {
		snprintf(t->comm[TITAN_TIME_NCOMM - 1].name, sizeof(w), "(other)");
		return &t->comm[TITAN_TIME_NCOMM - 1];
	}
	memset(&t->comm[t->n_comm], 0, sizeof(t->comm[0]));
	memcpy(t->comm[t->n_comm].name, w, k + 1);
	return &t->comm[t->n_comm++];
}

struct cspan {
	double a, b;
	struct titan_comm_time *c;
};

static int cmp_cspan(const void *x, const void *y)
{
	const struct cspan *p = x, *q = y;

	if (p->a != q->a)
		return p->a < q->a ? -1 : 1;
	return p->b > q->b ? -1 : p->b < q->b; /* the outer one first */
}

static int cmp_dbl_raw(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Split one thread's communication among its collectives: every stretch
 * between two span ends goes to the latest started span still running
 * there (the innermost of nested spans), and is cut against `busy` as
 * analyse() cuts the union of the thread's spans, so the collectives'
 * exposed and overlapped times add up to the step's. */
static int comm_by_collective(const struct titan_span *sp, struct stepx *s, int64_t tid,
			      const struct ivs *busy)
{
	struct cspan *cs = malloc((s->n ? s->n : 1) * sizeof(*cs));
	double *bd = malloc((s->n ? 2 * s->n : 1) * sizeof(*bd));
	size_t *stk = malloc((s->n ? s->n : 1) * sizeof(*stk));
	struct ivs gap = {0};
	size_t nc = 0, nb = 0, ns = 0, i = 0;
	int rc = 0;

	if (!cs || !bd || !stk) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < s->n; k++) {
		const struct titan_span *x = &sp[s->spans[k]];

		if (x->tid != tid || !titan_span_is_comm(x))
			continue;
		cs[nc] = (struct cspan){x->ts, x->ts + x->dur, comm_slot(&s->t, x->name)};
		cs[nc].c->calls++;
		bd[nb++] = cs[nc].a;
		bd[nb++] = cs[nc].b;
		nc++;
	}
	qsort(cs, nc, sizeof(*cs), cmp_cspan);
	qsort(bd, nb, sizeof(*bd), cmp_dbl_raw);
	for (size_t m = 0; m + 1 < nb && rc == 0; m++) {
		double p = bd[m], q = bd[m + 1], hidden, exposed = 0;

		if (!(q > p))
			continue;
		while (i < nc && cs[i].a <= p)
			stk[ns++] = i++;
		while (ns && cs[stk[ns - 1]].b <= p) /* ended: below the top, it waits its turn */
			ns--;
		if (!ns)
			continue;
		gap.n = 0;
		hidden = iv_cut(busy, p, q, &gap, &rc);
		for (size_t g = 0; g < gap.n; g++)
			exposed += gap.v[g][1] - gap.v[g][0];
		cs[stk[ns - 1]].c->overlapped += hidden;
		cs[stk[ns - 1]].c->exposed += exposed;
	}
out:
	free(cs);
	free(bd);
	free(stk);
	free(gap.v);
	return rc;
}

static int analyse(const struct titan_span *sp, struct stepx *s)
{
	struct ivs parts[TITAN_TIME_OPTIMIZER + 1] = {{0}}, busy = {0}, other = {0}, covered = {0};
	double a = s->t.ts, b = s->t.ts + s->t.total;
	int64_t tids[8], optids[8];
	int ntid = 0, nop = 0, rc = 0;

	for (size_t k = 0; k < s->n && rc == 0; k++) {
		const struct titan_span *x = &sp[s->spans[k]];
		int p = part_of(x->name);

		if (p >= 0)
			rc = iv_add(&parts[p], x->ts, x->ts + x->dur);
		if (titan_span_is_comm(x)) {
			bool seen = false;

			for (int j = 0; j < ntid; j++)
				seen |= tids[j] == x->tid;
			if (!seen && ntid < 8)
				tids[ntid++] = x->tid;
		}
		if (!strcmp(x->cat, "op")) {
			bool seen = false;

			for (int j = 0; j < nop; j++)
				seen |= optids[j] == x->tid;
			if (!seen && nop < 8)
				optids[nop++] = x->tid;
		}
	}
	for (int p = 0; p <= TITAN_TIME_OPTIMIZER && rc == 0; p++) {
		s->t.part[p] = iv_union(&parts[p]);
		for (size_t k = 0; k < parts[p].n && rc == 0; k++)
			rc = iv_add(&covered, parts[p].v[k][0], parts[p].v[k][1]);
	}
	/* communication, per thread that runs it, against compute elsewhere */
	for (int j = 0; j < ntid && rc == 0; j++) {
		busy.n = 0;
		other.n = 0;
		for (size_t k = 0; k < s->n && rc == 0; k++) {
			const struct titan_span *x = &sp[s->spans[k]];

			/* A thread with op events (titan-train's, category
			 * "op": every backend op of a traced step) is busy
			 * exactly while one runs: its forward/backward spans
			 * also cover the time it waits on a collective it
			 * issued (EP's all-to-all), which is exposed.  A
			 * thread without them (no op tracing, other tools'
			 * traces) is busy while its phase spans are open. */
			bool has_ops = false;

			for (int q = 0; q < nop; q++)
				has_ops |= optids[q] == x->tid;
			if (x->tid != tids[j] && !titan_span_is_comm(x) && strcmp(x->name, "step") &&
			    (has_ops ? !strcmp(x->cat, "op") : strcmp(x->cat, "op") != 0))
				rc = iv_add(&busy, x->ts, x->ts + x->dur);
		}
		iv_union(&busy);
		for (size_t k = 0; k < s->n && rc == 0; k++) {
			const struct titan_span *x = &sp[s->spans[k]];

			if (x->tid == tids[j] && titan_span_is_comm(x))
				rc = iv_add(&other, x->ts, x->ts + x->dur);
		}
		iv_union(&other); /* nested comm spans count once */
		for (size_t k = 0; k < other.n && rc == 0; k++) {
			size_t before = covered.n;
			double hidden = iv_cut(&busy, other.v[k][0], other.v[k][1], &covered, &rc);
			double exposed = 0;

			for (size_t q = before; q < covered.n; q++)
				exposed += covered.v[q][1] - covered.v[q][0];
			s->t.part[TITAN_TIME_COMM_OVERLAPPED] += hidden;
			s->t.part[TITAN_TIME_COMM_EXPOSED] += exposed;
		}
		if (rc == 0)
			rc = comm_by_collective(sp, s, tids[j], &busy);
	}
	if (rc == 0) {
		double in = 0;

		iv_union(&covered);
		for (size_t k = 0; k < covered.n; k++) {
			double x = covered.v[k][0] > a ? covered.v[k][0] : a;
			double y = covered.v[k][1] < b ? covered.v[k][1] : b;

			if (y > x)
				in += y - x;
		}
		s->t.part[TITAN_TIME_OTHER] = s->t.total - in > 0 ? s->t.total - in : 0;
	}
	for (int p = 0; p <= TITAN_TIME_OPTIMIZER; p++)
		free(parts[p].v);
	free(busy.v);
	free(other.v);
	free(covered.v);
	return rc;
}

int titan_step_times(const struct titan_span *sp, size_t n, int64_t pid,
		     struct titan_step_time **out, size_t *n_out)
{
	struct stepx *st = NULL;
	size_t ns = 0, cap = 0;
	bool by_step_span = false;
	int rc = 0;

	*out = NULL;
	*n_out = 0;
	for (size_t i = 0; i < n; i++)
		by_step_span |= sp[i].pid == pid && !strcmp(sp[i].name, "step");
	/* the steps: "step" spans, or else the args.step values seen */
	for (size_t i = 0; i < n; i++) {
		const struct titan_span *x = &sp[i];
		size_t k;

		if (x->pid != pid || (by_step_span ? strcmp(x->name, "step") != 0 : x->step < 0))
			continue;
		for (k = 0; !by_step_span && k < ns && st[k].t.step != x->step; k++)
			;
		if (by_step_span || k == ns) {
			if (ns == cap) {
				size_t c = cap ? 2 * cap : 64;
				struct stepx *m = realloc(st, c * sizeof(*m));

				if (!m) {
					rc = titan_error(TITAN_E_NOMEM, "out of memory");
					goto out;
				}
				st = m;
				cap = c;
			}
			memset(&st[ns], 0, sizeof(st[ns]));
			st[ns].t.step = x->step;
			st[ns].t.ts = x->ts;
			st[ns].t.total = x->dur;
			k = ns++;
		} else { /* no step spans: a step lasts from its first to its last span */
			double end = st[k].t.ts + st[k].t.total;

			if (x->ts < st[k].t.ts)
				st[k].t.ts = x->ts;
			if (x->ts + x->dur > end)
				end = x->ts + x->dur;
			st[k].t.total = end - st[k].t.ts;
		}
	}
	if (ns == 0)
		goto out;
	qsort(st, ns, sizeof(*st), cmp_step);
	for (size_t i = 0; i < n; i++) {
		const struct titan_span *x = &sp[i];
		size_t k = ns;

		if (x->pid != pid || !strcmp(x->name, "step"))
			continue;
		if (x->step >= 0) { /* the step of that number whose span holds it */
			size_t lo = 0, hi = ns;

			while (lo < hi) {
				size_t mid = (lo + hi) / 2;

				if (st[mid].t.step < x->step)
					lo = mid + 1;
				else
					hi = mid;
			}
			for (size_t j = lo; j < ns && st[j].t.step == x->step; j++)
				if (x->ts >= st[j].t.ts - 1e-3 && x->ts <= st[j].t.ts + st[j].t.total + 1e-3) {
					k = j;
					break;
				}
		}
		for (size_t j = 0; k == ns && j < ns; j++)
			if (x->ts >= st[j].t.ts && x->ts < st[j].t.ts + st[j].t.total)
				k = j;
		if (k < ns && (rc = step_add(&st[k], i)) < 0)
			goto out;
	}
	if (!(*out = malloc(ns * sizeof(**out)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < ns && rc == 0; k++) {
		rc = analyse(sp, &st[k]);
		(*out)[k] = st[k].t;
	}
	if (rc < 0) {
		free(*out);
		*out = NULL;
	} else {
		*n_out = ns;
	}
out:
	for (size_t k = 0; k < ns; k++)
		free(st[k].spans);
	free(st);
	return rc;
}
