/*
 * moe.c — torchtitan's MoE feed-forward, forward and backward (moe.h).
 * Every loop over tokens writes only its own token's rows and sums in a
 * fixed order, and the GEMMs are the backend's: the same bits on any
 * thread count.
 */
#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"

#define CK(call) do { if ((rc = (call)) < 0) return rc; } while (0)

/* ------------------------------------------------------------ router */

/* scores = sigmoid|softmax(x gate^T) in fp32; per token the top_k experts
 * of scores + bias (ties: the lower index), their unbiased scores, then
 * route_norm and route_scale (TokenChoiceTopKRouter.forward). */
static int route(const struct titan_moe *m, const struct moe_w *w, const float *x,
		 struct moe_acts *a)
{
	const struct titan_moe_dims *d = m->d;
	const int64_t N = titan_moe_routed(m), E = d->num_experts, K = d->top_k;
	const float scale = (float)d->route_scale;
	int rc;

	CK(m->be->ops->matmul_fwd(m->be, a->scores, x, w->gate, N, m->C, E, false));
#pragma omp parallel for schedule(static)
	for (int64_t t = 0; t < N; t++) {
		float *s = a->scores + t * E, *tw = a->topw + t * K;
		int32_t *ti = a->topi + t * K;
		float sum = 0.0f;

		if (d->softmax) {
			float mx = s[0], z = 0.0f;

			for (int64_t e = 1; e < E; e++)
				mx = s[e] > mx ? s[e] : mx;
			for (int64_t e = 0; e < E; e++)
				z += (s[e] = expf(s[e] - mx));
			for (int64_t e = 0; e < E; e++)
				s[e] /= z;
		} else {
			for (int64_t e = 0; e < E; e++)
				s[e] = 1.0f / (1.0f + expf(-s[e]));
		}
		for (int64_t k = 0; k < K; k++) {
			int64_t best = -1;
			float bv = 0.0f;

			for (int64_t e = 0; e < E; e++) {
				float v = s[e] + (w->bias ? w->bias[e] : 0.0f);
				bool taken = false;

				for (int64_t j = 0; j < k && !taken; j++)
					taken = ti[j] == e;
				if (!taken && (best < 0 || v > bv)) {
					best = e;
					bv = v;
				}
			}
			ti[k] = (int32_t)best;
			tw[k] = s[best];
			sum += tw[k];
		}
		for (int64_t k = 0; k < K; k++)
			tw[k] = (d->route_norm ? tw[k] / (sum + 1e-20f) : tw[k]) * scale;
	}
	return 0;
}

/* The slots (token·K + k) sorted by expert, stably: TokenReorderer's
 * argsort; counts per expert (its histc). */
static int sort_slots(const struct titan_moe *m, struct moe_acts *a, int64_t *tokens)
{
	const int64_t E = m->d->num_experts, R = titan_moe_routed(m) * m->d->top_k;
	int32_t *next = malloc((size_t)E * sizeof(*next)), o = 0;

	if (!next)
		return titan_error(TITAN_E_NOMEM, "out of memory routing %lld experts",
				   (long long)E);
	memset(a->counts, 0, (size_t)E * sizeof(*a->counts));
	for (int64_t s = 0; s < R; s++)
		a->counts[a->topi[s]]++;
	for (int64_t e = 0; e < E; e++) {
		if (tokens)
			tokens[e] += a->counts[e];
		next[e] = o;
		o += a->counts[e];
	}
	for (int64_t s = 0; s < R; s++)
		a->perm[next[a->topi[s]]++] = (int32_t)s;
	for (int64_t r = 0; r < R; r++)
		a->pos[a->perm[r]] = (int32_t)r;
	free(next);
	return 0;
}

/* ------------------------------------------------- local dispatch */

/* The four row moves between tokens and expert-sorted slots, on explicit
 * buffers: the local dispatch runs them on xin / yout, EP on the rows the
 * all-to-alls bring. */

/* dst[r] = x[token of perm[r]] (times its gate value when
 * score_before_experts), r < R */
static void gather_rows(const struct titan_moe *m, const struct moe_acts *a, const float *x,
			float *dst0)
{
	const int64_t C = m->C, K = m->d->top_k, R = titan_moe_routed(m) * K;
	const bool before = m->d->score_before_experts;

#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < R; r++) {
		const float *src = x + (a->perm[r] / K) * C;
		float *dst = dst0 + r * C, w = before ? a->topw[a->perm[r]] : 1.0f;

		for (int64_t c = 0; c < C; c++)
			dst[c] = before ? src[c] * w : src[c];
	}
}

/* y[t] += (gate value, unless before) · out[pos[slot]] over t's slots */
static void combine_rows(const struct titan_moe *m, const struct moe_acts *a, const float *out,
			 float *y)
{
	const int64_t C = m->C, K = m->d->top_k, N = titan_moe_routed(m);
	const bool before = m->d->score_before_experts;

#pragma omp parallel for schedule(static)
	for (int64_t t = 0; t < N; t++)
		for (int64_t k = 0; k < K; k++) {
			const float *src = out + (int64_t)a->pos[t * K + k] * C;
			const float w = before ? 1.0f : a->topw[t * K + k];
			float *dst = y + t * C;

			for (int64_t c = 0; c < C; c++)
				dst[c] += w * src[c];
		}
}

static void combine_bwd_rows(const struct titan_moe *m, const struct moe_acts *a,
			     const float *dy, const float *yout, float *drow, float *dtopw)
{
	const int64_t C = m->C, K = m->d->top_k, N = titan_moe_routed(m);
	const bool before = m->d->score_before_experts;

#pragma omp parallel for schedule(static)
	for (int64_t t = 0; t < N; t++)
		for (int64_t k = 0; k < K; k++) {
			const int64_t s = t * K + k, r = a->pos[s];
			const float *g = dy + t * C, *out = yout + r * C;
			const float w = before ? 1.0f : a->topw[s];
			float *dst = drow + r * C;
			double dot = 0.0;

			for (int64_t c = 0; c < C; c++) {
				dst[c] = w * g[c];
				dot += (double)g[c] * out[c];
			}
			if (!before)
				dtopw[s] = (float)dot;
		}
}

static void dispatch_bwd_rows(const struct titan_moe *m, const struct moe_acts *a,
			      const float *drow, const float *x, float *dx, float *dtopw)
{
	const int64_t C = m->C, K = m->d->top_k, N = titan_moe_routed(m);
	const bool before = m->d->score_before_experts;

#pragma omp parallel for schedule(static)
	for (int64_t t = 0; t < N; t++)
		for (int64_t k = 0; k < K; k++) {
			const int64_t s = t * K + k;
			const float *g = drow + (int64_t)a->pos[s] * C, *in = x + t * C;
			const float w = before ? a->topw[s] : 1.0f;
			float *dst = dx + t * C;
			double dot = 0.0;

			for (int64_t c = 0; c < C; c++) {
				dst[c] += w * g[c];
				dot += (double)g[c] * in[c];
			}
			if (before)
				dtopw[s] = (float)dot;
		}
}

static int local_dispatch(const struct titan_moe *m, struct moe_acts *a, const float *x)
{
	gather_rows(m, a, x, a->xin);
	return 0;
}

static int local_combine(const struct titan_moe *m, const struct moe_acts *a, float *y)
{
	combine_rows(m, a, a->yout, y);
	return 0;
}

static int local_combine_bwd(const struct titan_moe *m, const struct moe_acts *a,
			     const float *dy, float *drow, float *dtopw)
{
	combine_bwd_rows(m, a, dy, a->yout, drow, dtopw);
	return 0;
}

static int local_dispatch_bwd(const struct titan_moe *m, const struct moe_acts *a,
			      const float *drow, const float *x, float *dx, float *dtopw)
{
	dispatch_bwd_rows(m, a, drow, x, dx, dtopw);
	return 0;
}

const struct titan_moe_dispatch_ops titan_moe_dispatch_local = {
	local_dispatch, local_combine, local_combine_bwd, local_dispatch_bwd,
};

/* ---------------------------------------------------- EP dispatch */

/* This rank's slots, expert-sorted, are already grouped by destination
 * rank (rank p's experts are the contiguous [p·El, (p + 1)·El)).  The rows
 * arrive grouped by source rank, then local expert; the experts want them
 * grouped by local expert, then source rank (so each expert's rows stay
 * in global token order, as on one rank).  ep_reorder moves rows between
 * the two: by source (src) to by expert (dst), or back with `back`. */
static void ep_reorder(const struct titan_moe *m, const struct moe_acts *a, const float *src,
		       float *dst, bool back)
{
	const int64_t P = m->ep->ep, El = m->d->num_experts / P, C = m->C;
	int64_t eo = 0; /* rows of the local experts before j (by expert) */

	for (int64_t j = 0; j < El; j++) {
		int64_t so = 0, po = 0; /* rows of ranks before p (by source) */

		for (int64_t p = 0; p < P; p++) {
			const int64_t n = a->ep_n[p * El + j];
			int64_t in = so; /* rank p's rows of local experts before j */

			for (int64_t i = 0; i < j; i++)
				in += a->ep_n[p * El + i];
			const size_t bytes = (size_t)(n * C) * sizeof(float);

			if (n && back)
				memcpy(dst + in * C, src + (eo + po) * C, bytes);
			else if (n)
				memcpy(dst + (eo + po) * C, src + in * C, bytes);
			so += a->ep_rc[p];
			po += n;
		}
		eo += a->ecounts[j];
	}
}

/* The rows of this rank's slots (R, by destination) to the experts' ranks
 * (`fwd`) or back (ep_rc rows by source to ep_sc rows by destination). */
static int ep_move(const struct titan_moe *m, const struct moe_acts *a, const float *src,
		   float *dst, bool fwd, const char *what)
{
	const int64_t P = m->ep->ep;
	size_t *n = malloc(2 * (size_t)P * sizeof(*n));
	int rc;

	if (!n)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	for (int64_t p = 0; p < P; p++) {
		n[p] = (size_t)((fwd ? a->ep_sc : a->ep_rc)[p] * m->C);
		n[P + p] = (size_t)((fwd ? a->ep_rc : a->ep_sc)[p] * m->C);
	}
	rc = titan_comm_all_to_all_v(m->ep->comm, src, n, dst, n + P, TITAN_DTYPE_F32, what);
	free(n);
	return rc;
}

static int ep_dispatch(const struct titan_moe *m, struct moe_acts *a, const float *x)
{
	const int64_t P = m->ep->ep, E = m->d->num_experts, El = E / P;
	int64_t *cnt = malloc((size_t)E * sizeof(*cnt));
	size_t *one = malloc((size_t)P * sizeof(*one));
	int rc = TITAN_E_NOMEM;

	if (!cnt || !one) {
		titan_error(TITAN_E_NOMEM, "out of memory");
		goto out;
	}
	gather_rows(m, a, x, m->ep->sbuf);
	/* the counts first: El per rank, rank p's experts' */
	for (int64_t e = 0; e < E; e++)
		cnt[e] = a->counts[e];
	for (int64_t p = 0; p < P; p++)
		one[p] = (size_t)El;
	if ((rc = titan_comm_all_to_all_v(m->ep->comm, cnt, one, a->ep_n, one, TITAN_DTYPE_I64,
					  "moe counts")) < 0)
		goto out;
	a->erows = 0;
	for (int64_t j = 0; j < El; j++)
		a->ecounts[j] = 0;
	for (int64_t p = 0; p < P; p++) {
		a->ep_sc[p] = a->ep_rc[p] = 0;
		for (int64_t j = 0; j < El; j++) {
			a->ep_sc[p] += cnt[p * El + j];
			a->ep_rc[p] += a->ep_n[p * El + j];
			a->ecounts[j] += (int32_t)a->ep_n[p * El + j];
		}
		a->erows += a->ep_rc[p];
	}
	if (a->erows > titan_moe_expert_rows(m)) {
		rc = titan_error(TITAN_E_INVALID, "moe dispatch: %lld rows for %lld",
				 (long long)a->erows, (long long)titan_moe_expert_rows(m));
		goto out;
	}
	if ((rc = ep_move(m, a, m->ep->sbuf, m->ep->rbuf, true, "moe dispatch")) < 0)
		goto out;
	ep_reorder(m, a, m->ep->rbuf, a->xin, false);
out:
	free(cnt);
	free(one);
	return rc;
}

static int ep_combine(const struct titan_moe *m, const struct moe_acts *a, float *y)
{
	int rc;

	ep_reorder(m, a, a->yout, m->ep->rbuf, true);
	if ((rc = ep_move(m, a, m->ep->rbuf, a->yret, false, "moe combine")) < 0)
		return rc;
	combine_rows(m, a, a->yret, y);
	return 0;
}

static int ep_combine_bwd(const struct titan_moe *m, const struct moe_acts *a, const float *dy,
			  float *drow, float *dtopw)
{
	int rc;

	combine_bwd_rows(m, a, dy, a->yret, m->ep->sbuf, dtopw);
	if ((rc = ep_move(m, a, m->ep->sbuf, m->ep->rbuf, true, "moe combine bwd")) < 0)
		return rc;
	ep_reorder(m, a, m->ep->rbuf, drow, false);
	return 0;
}

static int ep_dispatch_bwd(const struct titan_moe *m, const struct moe_acts *a,
			   const float *drow, const float *x, float *dx, float *dtopw)
{
	int rc;

	ep_reorder(m, a, drow, m->ep->rbuf, true);
	if ((rc = ep_move(m, a, m->ep->rbuf, m->ep->sbuf, false, "moe dispatch bwd")) < 0)
		return rc;
	dispatch_bwd_rows(m, a, m->ep->sbuf, x, dx, dtopw);
	return 0;
}

const struct titan_moe_dispatch_ops titan_moe_dispatch_ep = {
	ep_dispatch, ep_combine, ep_combine_bwd, ep_dispatch_bwd,
};

/* --------------------------------------------------------- forward */

/* A MoE block's sizes: tokens, model dim, experts, an expert's hidden,
 * routed rows, the shared experts' hidden; the offset of the routed
 * tokens' rows (EP x TP). */
struct geo {
	int64_t N, C, E, Fm, R, Fs;
	int64_t W; /* floats of one expert's w1, w2 or w3: Fm·C */
	int64_t o;
};

static struct geo geo(const struct titan_moe *m)
{
	const struct titan_moe_dims *d = m->d;
	const int64_t Fm = titan_moe_expert_hidden(m); /* TP: this rank's */

	return (struct geo){ m->n, m->C, d->num_experts, Fm, titan_moe_routed(m) * d->top_k,
			     titan_moe_shared_hidden(m), Fm * m->C, m->nr > 0 ? m->r0 * m->C : 0 };
}

/* The experts this rank runs (after dispatch): every one and the routed
 * rows, or under EP the local ones and the rows received. */
struct here {
	int64_t E, R;
	const int32_t *counts;
};

static struct here here(const struct titan_moe *m, const struct moe_acts *a)
{
	if (m->ep)
		return (struct here){ m->d->num_experts / m->ep->ep, a->erows, a->ecounts };
	return (struct here){ m->d->num_experts, titan_moe_routed(m) * m->d->top_k, a->counts };
}

/* Floats from the given w1/w2/w3 (and dw's) to this rank's first expert. */
static int64_t expert_off(const struct titan_moe *m)
{
	if (!m->ep)
		return 0;
	return (m->ep->rank * (m->d->num_experts / m->ep->ep) - m->ep->w_expert0) * geo(m).W;
}

int titan_moe_fwd(const struct titan_moe *m, const struct moe_w *w0, const float *x,
		  const float *h, float *y, struct moe_acts *a, int64_t *tokens)
{
	const struct titan_backend_ops *op = m->be->ops;
	struct titan_backend *be = m->be;
	const struct geo g = geo(m);
	const int64_t eo = expert_off(m);
	struct moe_w wl = *w0;
	const struct moe_w *w = &wl;
	int64_t o = 0;
	int rc;

	wl.w1 += eo;
	wl.w2 += eo;
	wl.w3 += eo;

	CK(route(m, w, x + g.o, a));
	CK(sort_slots(m, a, tokens));
	CK(m->dispatch->dispatch(m, a, x + g.o));
	const struct here h_ = here(m, a);

	/* GroupedExperts: one GEMM per expert over its contiguous rows */
	for (int64_t e = 0; e < h_.E; o += h_.counts[e++]) {
		const int64_t c = h_.counts[e];

		if (!c)
			continue;
		CK(op->matmul_fwd(be, a->a + o * g.Fm, a->xin + o * g.C, w->w1 + e * g.W, c, g.C,
				  g.Fm, false));
		CK(op->matmul_fwd(be, a->b + o * g.Fm, a->xin + o * g.C, w->w3 + e * g.W, c, g.C,
				  g.Fm, false));
	}
	CK(op->swiglu_fwd(be, a->g, a->a, a->b, h_.R * g.Fm));
	o = 0;
	for (int64_t e = 0; e < h_.E; o += h_.counts[e++])
		if (h_.counts[e])
			CK(op->matmul_fwd(be, a->yout + o * g.C, a->g + o * g.Fm, w->w2 + e * g.W,
					  h_.counts[e], g.Fm, g.C, false));
	/* y = h + shared_experts(x) + the routed outputs */
	if (!h)
		CK(op->zero(be, y, g.N * g.C));
	else if (y != h)
		CK(op->copy(be, y, h, g.N * g.C));
	if (g.Fs > 0) {
		CK(op->matmul_fwd(be, a->sa, x, w->sw1, g.N, g.C, g.Fs, false));
		CK(op->matmul_fwd(be, a->sb, x, w->sw3, g.N, g.C, g.Fs, false));
		CK(op->swiglu_fwd(be, a->sg, a->sa, a->sb, g.N * g.Fs));
		CK(op->matmul_fwd(be, y, a->sg, w->sw2, g.N, g.Fs, g.C, true));
	}
	return m->dispatch->combine(m, a, y + g.o);
}

/* -------------------------------------------------------- backward */

/* The router's backward: the gate values' gradient through route_scale,
 * route_norm, the gather and the score function, then the gate linear. */
static int route_bwd(const struct titan_moe *m, const struct moe_w *w, struct moe_dw *dw,
		     const float *x, float *dx, const struct moe_acts *a,
		     const struct moe_scratch *s, const struct moe_keep *keep)
{
	const struct titan_moe_dims *d = m->d;
	const int64_t N = titan_moe_routed(m), E = d->num_experts, K = d->top_k;
	const float scale = (float)d->route_scale;

#pragma omp parallel for schedule(static)
	for (int64_t t = 0; t < N; t++) {
		const float *sc = a->scores + t * E, *dt = s->dtopw + t * K;
		const int32_t *ti = a->topi + t * K;
		float *dl = s->dlogit + t * E;
		float sum = 0.0f, ug = 0.0f;

		memset(dl, 0, (size_t)E * sizeof(*dl));
		for (int64_t k = 0; k < K; k++) {
			sum += sc[ti[k]];
			ug += dt[k] * scale * sc[ti[k]];
		}
		sum += 1e-20f;
		for (int64_t k = 0; k < K; k++) {
			float u = dt[k] * scale;

			dl[ti[k]] += d->route_norm ? u / sum - ug / (sum * sum) : u;
		}
		if (d->softmax) {
			float dot = 0.0f;

			for (int64_t e = 0; e < E; e++)
				dot += dl[e] * sc[e];
			for (int64_t e = 0; e < E; e++)
				dl[e] = sc[e] * (dl[e] - dot);
		} else {
			for (int64_t e = 0; e < E; e++)
				dl[e] *= sc[e] * (1.0f - sc[e]);
		}
	}
	if (keep) {
		int rc;

		CK(m->be->ops->copy(m->be, keep->dlogit, s->dlogit, N * E));
	}
	return m->be->ops->matmul_bwd(m->be, dx, dw->gate, s->dlogit, x, w->gate, N, m->C, E,
				      true);
}

int titan_moe_bwd(const struct titan_moe *m, const struct moe_w *w0, struct moe_dw *dw0,
		  const float *x, const float *dy, float *dx, struct moe_acts *a,
		  const struct moe_scratch *s, const struct moe_keep *keep)
{
	const struct titan_backend_ops *op = m->be->ops;
	struct titan_backend *be = m->be;
	const struct geo g = geo(m);
	const int64_t eo = expert_off(m);
	struct moe_w wl = *w0;
	struct moe_dw dwl = *dw0;
	const struct moe_w *w = &wl;
	struct moe_dw *dw = &dwl;
	int64_t o = 0;
	int rc;

	wl.w1 += eo;
	wl.w2 += eo;
	wl.w3 += eo;
	dwl.w1 = dwl.w1 ? dwl.w1 + eo : NULL;
	dwl.w2 = dwl.w2 ? dwl.w2 + eo : NULL;
	dwl.w3 = dwl.w3 ? dwl.w3 + eo : NULL;

	/* shared experts: dx = their input gradient */
	if (g.Fs > 0) {
		CK(op->matmul_bwd(be, s->dg, dw->sw2, dy, a->sg, w->sw2, g.N, g.Fs, g.C, false));
		CK(op->swiglu_bwd(be, a->sa, a->sb, s->dg, a->sa, a->sb, g.N * g.Fs));
		CK(op->matmul_bwd(be, dx, dw->sw1, a->sa, x, w->sw1, g.N, g.C, g.Fs, false));
		CK(op->matmul_bwd(be, dx, dw->sw3, a->sb, x, w->sw3, g.N, g.C, g.Fs, true));
	} else {
		CK(op->zero(be, dx, g.N * g.C));
	}
	/* routed experts, grouped as in forward */
	CK(m->dispatch->combine_bwd(m, a, dy + g.o, s->drow, s->dtopw));
	const struct here h_ = here(m, a);

	if (keep) /* w2's output gradient: drow is overwritten below */
		CK(op->copy(be, keep->drow, s->drow, h_.R * g.C));

	for (int64_t e = 0; e < h_.E; o += h_.counts[e++])
		if (h_.counts[e])
			CK(op->matmul_bwd(be, s->dg + o * g.Fm, dw->w2 ? dw->w2 + e * g.W : NULL,
					  s->drow + o * g.C, a->g + o * g.Fm, w->w2 + e * g.W,
					  h_.counts[e], g.Fm, g.C, false));
	CK(op->swiglu_bwd(be, a->a, a->b, s->dg, a->a, a->b, h_.R * g.Fm));
	o = 0;
	for (int64_t e = 0; e < h_.E; o += h_.counts[e++]) {
		const int64_t c = h_.counts[e];

		if (!c)
			continue;
		CK(op->matmul_bwd(be, s->drow + o * g.C, dw->w1 ? dw->w1 + e * g.W : NULL,
				  a->a + o * g.Fm, a->xin + o * g.C, w->w1 + e * g.W, c, g.C, g.Fm,
				  false));
		CK(op->matmul_bwd(be, s->drow + o * g.C, dw->w3 ? dw->w3 + e * g.W : NULL,
				  a->b + o * g.Fm, a->xin + o * g.C, w->w3 + e * g.W, c, g.C, g.Fm,
				  true));
	}
	CK(m->dispatch->dispatch_bwd(m, a, s->drow, x + g.o, dx + g.o, s->dtopw));
	return route_bwd(m, w, dw, x + g.o, dx + g.o, a, s, keep);
}

int titan_moe_wgrad(const struct titan_moe *m, struct moe_dw *dw0, const float *x,
		    const float *dy, const struct moe_acts *a, const struct moe_keep *k)
{
	const struct titan_backend_ops *op = m->be->ops;
	struct titan_backend *be = m->be;
	const struct geo g = geo(m);
	const int64_t eo = expert_off(m);
	const struct here h_ = here(m, a);
	int64_t o = 0;
	int rc;

	/* titan_moe_bwd's weight gradients, by the same calls on the same
	 * operands, in the same order */
	if (g.Fs > 0) {
		CK(op->matmul_bwd(be, NULL, dw0->sw2, dy, a->sg, NULL, g.N, g.Fs, g.C, false));
		CK(op->matmul_bwd(be, NULL, dw0->sw1, a->sa, x, NULL, g.N, g.C, g.Fs, false));
		CK(op->matmul_bwd(be, NULL, dw0->sw3, a->sb, x, NULL, g.N, g.C, g.Fs, false));
	}
	for (int64_t e = 0; e < h_.E; o += h_.counts[e++])
		if (h_.counts[e])
			CK(op->matmul_bwd(be, NULL, dw0->w2 + eo + e * g.W, k->drow + o * g.C,
					  a->g + o * g.Fm, NULL, h_.counts[e], g.Fm, g.C, false));
	o = 0;
	for (int64_t e = 0; e < h_.E; o += h_.counts[e++]) {
		const int64_t c = h_.counts[e];

		if (!c)
			continue;
		CK(op->matmul_bwd(be, NULL, dw0->w1 + eo + e * g.W, a->a + o * g.Fm,
				  a->xin + o * g.C, NULL, c, g.C, g.Fm, false));
		CK(op->matmul_bwd(be, NULL, dw0->w3 + eo + e * g.W, a->b + o * g.Fm,
				  a->xin + o * g.C, NULL, c, g.C, g.Fm, false));
	}
	return op->matmul_bwd(be, NULL, dw0->gate, k->dlogit, x + g.o, NULL,
			      titan_moe_routed(m), g.C, m->d->num_experts, false);
}

/* --------------------------------------------------- load balancing */

void titan_moe_update_bias(float *bias, const int64_t *tokens, int64_t E, double coeff)
{
	float sum = 0.0f, mean, dmean = 0.0f;
	const float c = (float)coeff;

	for (int64_t e = 0; e < E; e++)
		sum += (float)tokens[e];
	mean = sum / (float)E;
	for (int64_t e = 0; e < E; e++) {
		float v = mean - (float)tokens[e];

		dmean += c * (float)((v > 0) - (v < 0));
	}
	dmean /= (float)E;
	for (int64_t e = 0; e < E; e++) {
		float v = mean - (float)tokens[e];

		bias[e] += c * (float)((v > 0) - (v < 0)) - dmean;
	}
	/* (bias starts at 0 for a delta: the caller adds it to its rows) */
}
