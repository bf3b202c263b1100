/* test_ops.c — the CPU backend's ops (titan/ops.h) against float64
 * references written plainly here:
 *  - forward: fp32 output vs the float64 reference on the same inputs,
 *    |got − want| <= atol + rtol·|want| (rtol 1e-5 unless a test says);
 *  - backward: fp32 analytic gradients of L = Σ r·y (r random) vs float64
 *    central finite differences of the reference, |g − fd| <= 1e-3·(|fd| +
 *    0.01·max|fd|);
 *  - plus the properties each op promises (ignore labels, chunking, causal
 *    mask, GQA mapping, tiles, RoPE table and inverse, AdamW formula,
 *    bit-for-bit determinism and thread-count independence).
 * Shapes are tiny: B=2, T=5, H=4, Hkv=2, D=4, C=16, F=24, V=11. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/ops.h"
#include "cpu/cpu_impl.h" /* titan_cpu_expf, the lane sums */

enum { B = 2, T = 5, H = 4, HKV = 2, D = 4, C = 16, F = 24, V = 11, N = B * T };

#define GRAD_RTOL 1e-3

/* ------------------------------------------------------------ helpers */

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	assert_non_null(p);
	return p;
}
#define FALLOC(n) ((float *)xcalloc((n), sizeof(float)))
#define DALLOC(n) ((double *)xcalloc((n), sizeof(double)))

static void fill(float *x, size_t n, uint64_t stream, float std)
{
	struct titan_rng r;
	titan_rng_init(&r, 20240917, stream);
	titan_rng_fill_normal(&r, 0, x, n, 0.0f, std);
}

static double *to_d(const float *x, size_t n)
{
	double *d = DALLOC(n);
	for (size_t i = 0; i < n; i++)
		d[i] = x[i];
	return d;
}

static struct titan_backend cpu(int nthreads)
{
	struct titan_backend be;
	assert_int_equal(titan_backend_cpu_init(&be, nthreads), 0);
	assert_string_equal(be.ops->name, "cpu");
	return be;
}

/* every element: |got − want| <= atol + rtol·|want| (NaN fails) */
static void check_close_(const char *what, const float *got, const double *want,
			 size_t n, double rtol, double atol, int line)
{
	double worst = 0.0;
	size_t wi = 0;
	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)got[i] - want[i]) / (atol + rtol * fabs(want[i]));
		if (!(e <= worst)) {
			worst = isnan(e) ? INFINITY : e;
			wi = i;
		}
	}
	if (worst > 1.0)
		fail_msg("line %d: %s[%zu] = %.9g, want %.9g (rtol %g, atol %g)", line,
			 what, wi, (double)got[wi], want[wi], rtol, atol);
}
#define check_close(what, got, want, n, rtol, atol) \
	check_close_(what, got, want, n, rtol, atol, __LINE__)

static void check_grad_(const char *what, const float *g, const double *fd,
			size_t n, int line)
{
	double mx = 0.0;
	for (size_t i = 0; i < n; i++)
		mx = fmax(mx, fabs(fd[i]));
	assert_true(mx > 0.0);
	check_close_(what, g, fd, n, GRAD_RTOL, GRAD_RTOL * 0.01 * mx, line);
}
#define check_grad(what, g, fd, n) check_grad_(what, g, fd, n, __LINE__)

/* Finite differences: a problem is a set of double inputs and an
 * objective L(inputs) = Σ r·reference(inputs). */
struct fd {
	double (*f)(struct fd *p);
	double *in[4];
	size_t nin[4];
	const double *r;     /* output weights */
	double *out;         /* reference output scratch */
	const void *aux;     /* ids / labels / rope table */
	double scale;
};

static double dot(const double *a, const double *b, size_t n)
{
	double s = 0.0;
	for (size_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static double *fd_grad(struct fd *p, int which)
{
	double *x = p->in[which], *g = DALLOC(p->nin[which]);
	for (size_t i = 0; i < p->nin[which]; i++) {
		const double x0 = x[i], h = 1e-5 * fmax(1.0, fabs(x0));
		x[i] = x0 + h;
		const double lp = p->f(p);
		x[i] = x0 - h;
		const double lm = p->f(p);
		x[i] = x0;
		g[i] = (lp - lm) / (2.0 * h);
	}
	return g;
}

/* --------------------------------------------------- float64 references */

static void ref_matmul(double *y, const double *x, const double *w, int64_t n,
		       int64_t in, int64_t out)
{
	for (int64_t i = 0; i < n; i++)
		for (int64_t o = 0; o < out; o++)
			y[i * out + o] = dot(x + i * in, w + o * in, (size_t)in);
}

static void ref_rmsnorm(double *y, double *rstd, const double *x, const double *w,
			int64_t n, int64_t c, double eps)
{
	for (int64_t i = 0; i < n; i++) {
		double r = 1.0 / sqrt(dot(x + i * c, x + i * c, (size_t)c) / (double)c + eps);
		if (rstd)
			rstd[i] = r;
		for (int64_t j = 0; j < c; j++)
			y[i * c + j] = x[i * c + j] * r * w[j];
	}
}

/* tab: [T][D/2][2] (cos, sin) */
static void ref_rope(double *y, const double *x, const double *tab, int64_t b,
		     int64_t t, int64_t nh, int64_t d)
{
	for (int64_t r = 0; r < b * t; r++)
		for (int64_t h = 0; h < nh; h++)
			for (int64_t i = 0; i < d / 2; i++) {
				const double *xp = x + (r * nh + h) * d + 2 * i;
				double *yp = y + (r * nh + h) * d + 2 * i;
				const double c = tab[((r % t) * (d / 2) + i) * 2];
				const double s = tab[((r % t) * (d / 2) + i) * 2 + 1];
				yp[0] = xp[0] * c - xp[1] * s;
				yp[1] = xp[0] * s + xp[1] * c;
			}
}

static void ref_swiglu(double *h, const double *a, const double *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h[i] = a[i] / (1.0 + exp(-a[i])) * b[i];
}

static void ref_attention(double *out, double *lse, const double *q,
			  const double *k, const double *v,
			  const struct titan_attn_dims *d)
{
	const int64_t bb = d->batch, tt = d->seq, hh = d->n_heads;
	const int64_t hk = d->n_kv_heads, dd = d->head_dim;
	double s[256];
	assert_true(tt <= 256);
	for (int64_t b = 0; b < bb; b++)
		for (int64_t h = 0; h < hh; h++)
			for (int64_t t = 0; t < tt; t++) {
				const int64_t g = h / (hh / hk);
				const double *qr = q + ((b * tt + t) * hh + h) * dd;
				double mx = -INFINITY, sum = 0.0;
				for (int64_t u = 0; u <= t; u++) {
					s[u] = dot(qr, k + ((b * tt + u) * hk + g) * dd, (size_t)dd) /
					       sqrt((double)dd);
					mx = fmax(mx, s[u]);
				}
				for (int64_t u = 0; u <= t; u++)
					sum += exp(s[u] - mx);
				double *o = out + ((b * tt + t) * hh + h) * dd;
				for (int64_t j = 0; j < dd; j++) {
					o[j] = 0.0;
					for (int64_t u = 0; u <= t; u++)
						o[j] += exp(s[u] - mx) / sum *
							v[((b * tt + u) * hk + g) * dd + j];
				}
				if (lse)
					lse[(b * hh + h) * tt + t] = mx + log(sum);
			}
}

/* Σ over labels >= 0 of logsumexp(h W^T) − z_y */
static double ref_ce(const double *h, const double *w, const int32_t *labels,
		     int64_t n, int64_t c, int64_t v)
{
	double loss = 0.0, z[64];
	assert_true(v <= 64);
	for (int64_t i = 0; i < n; i++) {
		if (labels[i] < 0)
			continue;
		double mx = -INFINITY, sum = 0.0;
		for (int64_t j = 0; j < v; j++) {
			z[j] = dot(h + i * c, w + j * c, (size_t)c);
			mx = fmax(mx, z[j]);
		}
		for (int64_t j = 0; j < v; j++)
			sum += exp(z[j] - mx);
		loss += mx + log(sum) - z[labels[i]];
	}
	return loss;
}

/* ---------------------------------------------------------- objectives */

static double obj_matmul(struct fd *p)
{
	ref_matmul(p->out, p->in[0], p->in[1], N, C, F);
	return dot(p->r, p->out, N * F);
}

static double obj_embedding(struct fd *p)
{
	const uint32_t *ids = p->aux;
	double s = 0.0;
	for (int64_t i = 0; i < N; i++)
		s += dot(p->r + i * C, p->in[0] + ids[i] * C, C);
	return s;
}

static double obj_rmsnorm(struct fd *p)
{
	ref_rmsnorm(p->out, NULL, p->in[0], p->in[1], N, C, 1e-5);
	return dot(p->r, p->out, N * C);
}

static double obj_rope(struct fd *p)
{
	ref_rope(p->out, p->in[0], p->aux, B, T, H, D);
	return dot(p->r, p->out, N * H * D);
}

static double obj_swiglu(struct fd *p)
{
	ref_swiglu(p->out, p->in[0], p->in[1], N * F);
	return dot(p->r, p->out, N * F);
}

static const struct titan_attn_dims adims = {B, T, H, HKV, D, NULL};

static double obj_attention(struct fd *p)
{
	ref_attention(p->out, NULL, p->in[0], p->in[1], p->in[2], &adims);
	return dot(p->r, p->out, N * H * D);
}

static double obj_ce(struct fd *p)
{
	return ref_ce(p->in[0], p->in[1], p->aux, N, C, V) * p->scale;
}

/* ------------------------------------------------- private cpu helpers */

static void test_cpu_expf(void **state)
{
	(void)state;
	/* <= 1 ulp of exp() over the whole range (checked exhaustively when
	 * written: 0.99 ulp); here a dense sample */
	double worst = 0.0;
	for (float x = -87.33f; x < 88.37f; x += 0.0037f) {
		const double want = exp((double)x);
		const double ulp = nextafterf((float)want, INFINITY) - (float)want;
		worst = fmax(worst, fabs((double)titan_cpu_expf(x) - want) / ulp);
	}
	assert_true(worst <= 1.0);
	assert_true(titan_cpu_expf(0.0f) == 1.0f);
	assert_true(titan_cpu_expf(-0.0f) == 1.0f);
	assert_true(titan_cpu_expf(-INFINITY) == 0.0f);
	assert_true(titan_cpu_expf(-100.0f) == 0.0f);
	assert_true(isinf(titan_cpu_expf(89.0f)) && isinf(titan_cpu_expf(INFINITY)));
	assert_true(isnan(titan_cpu_expf(NAN)));
	assert_true(titan_cpu_expf(88.37f) < INFINITY);
	assert_true(titan_cpu_expf(-87.33f) > 0.0f);

	/* lane sums: fixed order, exact on integers */
	float v[37];
	for (int i = 0; i < 37; i++)
		v[i] = (float)(i + 1);
	for (int n = 0; n <= 37; n++) {
		assert_true(titan_cpu_sum8f(v, n) == (float)(n * (n + 1) / 2));
		assert_true(titan_cpu_sum8d(v, n) == (double)(n * (n + 1) / 2));
		assert_true(titan_cpu_dot8d(v, v, n) == (double)(n * (n + 1) * (2 * n + 1) / 6));
	}
}

/* --------------------------------------------------------------- matmul */

static void test_matmul(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	float *x = FALLOC(N * C), *w = FALLOC(F * C), *y = FALLOC(N * F);
	float *dy = FALLOC(N * F), *dx = FALLOC(N * C), *dw = FALLOC(F * C);
	fill(x, N * C, 1, 1.0f);
	fill(w, F * C, 2, 0.5f);
	fill(dy, N * F, 3, 1.0f);
	double *xd = to_d(x, N * C), *wd = to_d(w, F * C), *yd = DALLOC(N * F);

	/* forward, overwrite (y holds garbage first) then accumulate */
	for (int i = 0; i < N * F; i++)
		y[i] = NAN;
	assert_int_equal(be.ops->matmul_fwd(&be, y, x, w, N, C, F, false), 0);
	ref_matmul(yd, xd, wd, N, C, F);
	check_close("matmul y", y, yd, N * F, 1e-5, 1e-6);
	assert_int_equal(be.ops->matmul_fwd(&be, y, x, w, N, C, F, true), 0);
	for (int i = 0; i < N * F; i++)
		yd[i] *= 2.0;
	check_close("matmul y+=", y, yd, N * F, 1e-5, 1e-6);

	/* backward vs finite differences: dx overwritten, dw accumulated */
	struct fd p = {.f = obj_matmul, .in = {xd, wd}, .nin = {N * C, F * C},
		       .r = to_d(dy, N * F), .out = DALLOC(N * F)};
	double *gx = fd_grad(&p, 0), *gw = fd_grad(&p, 1);
	fill(dw, F * C, 4, 1.0f);
	double *dw0 = to_d(dw, F * C);
	for (int i = 0; i < N * C; i++)
		dx[i] = NAN;
	assert_int_equal(be.ops->matmul_bwd(&be, dx, dw, dy, x, w, N, C, F, false), 0);
	check_grad("matmul dx", dx, gx, N * C);
	for (int i = 0; i < F * C; i++)
		dw[i] -= (float)dw0[i];
	check_grad("matmul dw", dw, gw, F * C);
	/* accumulate dx; skip dw */
	double *dx2 = DALLOC(N * C);
	for (int i = 0; i < N * C; i++)
		dx2[i] = 2.0 * dx[i];
	float *dw_before = FALLOC(F * C);
	memcpy(dw_before, dw, F * C * sizeof(float));
	assert_int_equal(be.ops->matmul_bwd(&be, dx, NULL, dy, x, w, N, C, F, true), 0);
	check_close("matmul dx+=", dx, dx2, N * C, 1e-6, 1e-7);
	assert_memory_equal(dw, dw_before, F * C * sizeof(float));
	assert_int_equal(be.ops->matmul_bwd(&be, NULL, dw, dy, x, w, N, C, F, false), 0);
	for (int i = 0; i < F * C; i++) /* dw += the same gradient again */
		dw_before[i] *= 2.0f;
	for (int i = 0; i < F * C; i++)
		assert_true(fabsf(dw[i] - dw_before[i]) <= 1e-5f * (1.0f + fabsf(dw_before[i])));
	free(dw_before);

	free(x), free(w), free(y), free(dy), free(dx), free(dw), free(xd), free(wd);
	free(yd), free((void *)p.r), free(p.out), free(gx), free(gw), free(dw0), free(dx2);
}

/* ------------------------------------------------------------ embedding */

static void test_embedding(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	const uint32_t ids[N] = {3, 0, 10, 3, 3, 7, 1, 0, 10, 5}; /* repeats */
	float *tab = FALLOC(V * C), *out = FALLOC(N * C), *dout = FALLOC(N * C);
	float *dtab = FALLOC(V * C);
	fill(tab, V * C, 10, 1.0f);
	fill(dout, N * C, 11, 1.0f);

	assert_int_equal(be.ops->embedding_fwd(&be, out, ids, tab, N, V, C), 0);
	for (int i = 0; i < N; i++)
		assert_memory_equal(out + i * C, tab + ids[i] * C, C * sizeof(float));

	struct fd p = {.f = obj_embedding, .in = {to_d(tab, V * C)}, .nin = {V * C},
		       .r = to_d(dout, N * C), .aux = ids};
	double *g = fd_grad(&p, 0);
	assert_int_equal(be.ops->embedding_bwd(&be, dtab, ids, dout, N, V, C), 0);
	check_grad("embedding dtable", dtab, g, V * C);
	/* rows never looked up stay zero */
	for (int j = 0; j < C; j++)
		assert_true(dtab[2 * C + j] == 0.0f);

	const uint32_t bad[2] = {1, V};
	assert_int_equal(be.ops->embedding_fwd(&be, out, bad, tab, 2, V, C), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "position 1"));
	assert_int_equal(be.ops->embedding_bwd(&be, dtab, bad, dout, 2, V, C), TITAN_E_INVALID);

	free(tab), free(out), free(dout), free(dtab), free(p.in[0]), free((void *)p.r), free(g);
}

/* -------------------------------------------------------------- rmsnorm */

static void test_rmsnorm(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	float *x = FALLOC(N * C), *w = FALLOC(C), *y = FALLOC(N * C), *rstd = FALLOC(N);
	float *dy = FALLOC(N * C), *dx = FALLOC(N * C), *dw = FALLOC(C);
	fill(x, N * C, 20, 2.0f);
	fill(w, C, 21, 0.3f);
	for (int j = 0; j < C; j++)
		w[j] += 1.0f;
	fill(dy, N * C, 22, 1.0f);
	double *xd = to_d(x, N * C), *wd = to_d(w, C), *yd = DALLOC(N * C), *rd = DALLOC(N);

	assert_int_equal(be.ops->rmsnorm_fwd(&be, y, rstd, x, w, N, C, 1e-5f), 0);
	ref_rmsnorm(yd, rd, xd, wd, N, C, 1e-5);
	check_close("rmsnorm y", y, yd, N * C, 1e-6, 1e-7);
	check_close("rmsnorm rstd", rstd, rd, N, 1e-6, 0.0);

	struct fd p = {.f = obj_rmsnorm, .in = {xd, wd}, .nin = {N * C, C},
		       .r = to_d(dy, N * C), .out = DALLOC(N * C)};
	double *gx = fd_grad(&p, 0), *gw = fd_grad(&p, 1);
	for (int j = 0; j < C; j++)
		dw[j] = 1.0f;
	assert_int_equal(be.ops->rmsnorm_bwd(&be, dx, dw, dy, x, w, rstd, N, C, false), 0);
	check_grad("rmsnorm dx", dx, gx, N * C);
	for (int j = 0; j < C; j++)
		dw[j] -= 1.0f;
	check_grad("rmsnorm dw", dw, gw, C);

	/* accumulate into dx; then dx aliasing dy gives the overwrite result */
	double *twice = DALLOC(N * C);
	for (int i = 0; i < N * C; i++)
		twice[i] = 2.0 * dx[i];
	assert_int_equal(be.ops->rmsnorm_bwd(&be, dx, NULL, dy, x, w, rstd, N, C, true), 0);
	check_close("rmsnorm dx+=", dx, twice, N * C, 1e-6, 1e-7);
	float *alias = FALLOC(N * C), *dx1 = FALLOC(N * C);
	memcpy(alias, dy, N * C * sizeof(float));
	assert_int_equal(be.ops->rmsnorm_bwd(&be, dx1, NULL, dy, x, w, rstd, N, C, false), 0);
	assert_int_equal(be.ops->rmsnorm_bwd(&be, alias, NULL, alias, x, w, rstd, N, C, false), 0);
	assert_memory_equal(alias, dx1, N * C * sizeof(float));

	free(x), free(w), free(y), free(rstd), free(dy), free(dx), free(dw), free(xd);
	free(wd), free(yd), free(rd), free((void *)p.r), free(p.out), free(gx), free(gw);
	free(twice), free(alias), free(dx1);
}

/* ----------------------------------------------------------------- rope */

/* torchtitan's precompute_freqs_cis in double; regimes[3] counts the
 * frequencies kept, smoothed and divided by the Llama 3.1 scaling. */
static void ref_rope_freqs(double *tab, int64_t seq, int64_t hd, double theta,
			   const struct titan_rope_scaling *sc, int regimes[3])
{
	for (int64_t i = 0; i < hd / 2; i++) {
		double f = 1.0 / pow(theta, (double)(2 * i) / (double)hd);
		if (sc) {
			double wl = 2.0 * M_PI / f;
			double lo = sc->original_max_position / sc->low_freq_factor;
			double hi = sc->original_max_position / sc->high_freq_factor;
			if (wl < hi) {
				regimes[0]++;
			} else if (wl > lo) {
				f /= sc->factor;
				regimes[2]++;
			} else {
				double s = (sc->original_max_position / wl - sc->low_freq_factor) /
					   (sc->high_freq_factor - sc->low_freq_factor);
				f = (1.0 - s) * f / sc->factor + s * f;
				regimes[1]++;
			}
		}
		for (int64_t t = 0; t < seq; t++) {
			tab[(t * (hd / 2) + i) * 2] = cos((double)t * f);
			tab[(t * (hd / 2) + i) * 2 + 1] = sin((double)t * f);
		}
	}
}

static void test_rope_freqs(void **state)
{
	(void)state;
	const struct titan_rope_scaling sc = {8.0, 1.0, 4.0, 8192.0};
	const int64_t seqs[2] = {64, 8}, hds[2] = {16, 128};
	for (int k = 0; k < 2; k++) {
		for (int scaled = 0; scaled < 2; scaled++) {
			const int64_t seq = seqs[k], hd = hds[k], n = seq * hd;
			float *tab = FALLOC(n);
			double *want = DALLOC(n);
			int regimes[3] = {0, 0, 0};
			assert_int_equal(titan_rope_freqs(tab, seq, hd, 500000.0,
							  scaled ? &sc : NULL), 0);
			ref_rope_freqs(want, seq, hd, 500000.0, scaled ? &sc : NULL, regimes);
			/* the float angle t·f carries ~4 float roundings: error
			 * <= 1e-6·(1 + t) in cos/sin */
			for (int64_t t = 0; t < seq; t++)
				check_close("rope table", tab + t * hd, want + t * hd,
					    (size_t)hd, 0.0, 1e-6 * (1.0 + (double)t));
			if (scaled) /* every regime of the scaling is exercised */
				assert_true(regimes[0] > 0 && regimes[1] > 0 && regimes[2] > 0);
			/* i = 0: frequency 1, so (cos t, sin t) exactly as cosf/sinf */
			assert_true(tab[(seq - 1) * hd] == cosf((float)(seq - 1)));
			assert_true(tab[(seq - 1) * hd + 1] == sinf((float)(seq - 1)));
			free(tab), free(want);
		}
	}
	float one[4];
	assert_int_equal(titan_rope_freqs(one, 1, 3, 500000.0, NULL), TITAN_E_INVALID);
	assert_int_equal(titan_rope_freqs(one, 1, 4, 0.0, NULL), TITAN_E_INVALID);
	const struct titan_rope_scaling bad = {8.0, 4.0, 1.0, 8192.0};
	assert_int_equal(titan_rope_freqs(one, 1, 4, 500000.0, &bad), TITAN_E_INVALID);
}

static void test_rope(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	const struct titan_rope_scaling sc = {8.0, 1.0, 4.0, 8192.0};
	const size_t n = N * H * D;
	float *tab = FALLOC(T * D), *x = FALLOC(n), *x0 = FALLOC(n), *dy = FALLOC(n);
	assert_int_equal(titan_rope_freqs(tab, T, D, 500000.0, &sc), 0);
	fill(x, n, 30, 1.0f);
	fill(dy, n, 31, 1.0f);
	memcpy(x0, x, n * sizeof(float));
	double *tabd = to_d(tab, T * D), *x0d = to_d(x, n), *yd = DALLOC(n);

	/* forward on q-shaped [B,T,H,D] (k uses the same code with Hkv) */
	assert_int_equal(be.ops->rope_fwd(&be, x, tab, B, T, H, D), 0);
	ref_rope(yd, x0d, tabd, B, T, H, D);
	check_close("rope y", x, yd, n, 1e-6, 1e-7);
	/* backward is the inverse rotation: bwd(fwd(x)) = x */
	assert_int_equal(be.ops->rope_bwd(&be, x, tab, B, T, H, D), 0);
	check_close("rope bwd∘fwd", x, x0d, n, 1e-6, 1e-7);

	struct fd p = {.f = obj_rope, .in = {x0d}, .nin = {n}, .r = to_d(dy, n),
		       .out = DALLOC(n), .aux = tabd};
	double *g = fd_grad(&p, 0);
	assert_int_equal(be.ops->rope_bwd(&be, dy, tab, B, T, H, D), 0);
	check_grad("rope dx", dy, g, n);
	assert_int_equal(be.ops->rope_fwd(&be, x, tab, B, T, H, 3), TITAN_E_INVALID);

	free(tab), free(x), free(x0), free(dy), free(tabd), free(x0d), free(yd);
	free((void *)p.r), free(p.out), free(g);
}

/* --------------------------------------------------------------- swiglu */

static void test_swiglu(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	const size_t n = N * F;
	float *a = FALLOC(n), *b = FALLOC(n), *h = FALLOC(n), *dh = FALLOC(n);
	float *da = FALLOC(n), *db = FALLOC(n);
	fill(a, n, 40, 3.0f);
	fill(b, n, 41, 1.0f);
	fill(dh, n, 42, 1.0f);
	a[0] = -90.0f; /* exp overflow side: silu → −0 */
	a[1] = 90.0f;
	double *ad = to_d(a, n), *bd = to_d(b, n), *hd = DALLOC(n);

	assert_int_equal(be.ops->swiglu_fwd(&be, h, a, b, n), 0);
	ref_swiglu(hd, ad, bd, n);
	check_close("swiglu h", h, hd, n, 1e-6, 1e-30);

	struct fd p = {.f = obj_swiglu, .in = {ad, bd}, .nin = {n, n}, .r = to_d(dh, n),
		       .out = DALLOC(n)};
	double *ga = fd_grad(&p, 0), *gb = fd_grad(&p, 1);
	assert_int_equal(be.ops->swiglu_bwd(&be, da, db, dh, a, b, n), 0);
	check_grad("swiglu da", da, ga, n);
	check_grad("swiglu db", db, gb, n);
	/* in place: h over a; da over a, db over b */
	float *a2 = FALLOC(n);
	memcpy(a2, a, n * sizeof(float));
	assert_int_equal(be.ops->swiglu_fwd(&be, a2, a2, b, n), 0);
	assert_memory_equal(a2, h, n * sizeof(float));
	free(a2);
	assert_int_equal(be.ops->swiglu_bwd(&be, a, b, dh, a, b, n), 0);
	assert_memory_equal(a, da, n * sizeof(float));
	assert_memory_equal(b, db, n * sizeof(float));

	free(a), free(b), free(h), free(dh), free(da), free(db), free(ad), free(bd);
	free(hd), free((void *)p.r), free(p.out), free(ga), free(gb);
}

/* ------------------------------------------------------------ attention */

struct attn_data {
	struct titan_attn_dims d;
	size_t nq, nk;
	float *q, *k, *v, *out, *lse;
};

static void attn_data_init(struct attn_data *a, int64_t b, int64_t t, int64_t h,
			   int64_t hk, int64_t d, uint64_t seed)
{
	a->d = (struct titan_attn_dims){b, t, h, hk, d, NULL};
	a->nq = (size_t)(b * t * h * d);
	a->nk = (size_t)(b * t * hk * d);
	a->q = FALLOC(a->nq), a->k = FALLOC(a->nk), a->v = FALLOC(a->nk);
	a->out = FALLOC(a->nq), a->lse = FALLOC((size_t)(b * h * t));
	fill(a->q, a->nq, seed, 1.0f);
	fill(a->k, a->nk, seed + 1, 1.0f);
	fill(a->v, a->nk, seed + 2, 1.0f);
}

static void attn_data_free(struct attn_data *a)
{
	free(a->q), free(a->k), free(a->v), free(a->out), free(a->lse);
}

static void test_attention_fwd(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	static const int64_t shapes[][5] = {{B, T, H, HKV, D}, {2, 37, 4, 1, 8}, {1, 9, 3, 3, 6}};
	static const int tiles[][2] = {{64, 64}, {2, 3}, {1, 1}, {3, 2}, {16, 5}};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		struct attn_data a;
		attn_data_init(&a, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
			       shapes[s][4], 50 + 3 * s);
		double *qd = to_d(a.q, a.nq), *kd = to_d(a.k, a.nk), *vd = to_d(a.v, a.nk);
		const size_t nl = (size_t)(a.d.batch * a.d.n_heads * a.d.seq);
		double *od = DALLOC(a.nq), *ld = DALLOC(nl);
		ref_attention(od, ld, qd, kd, vd, &a.d);
		for (size_t t = 0; t < sizeof(tiles) / sizeof(tiles[0]); t++) {
			be.attn_block_q = tiles[t][0];
			be.attn_block_k = tiles[t][1];
			memset(a.out, 0xff, a.nq * sizeof(float)); /* NaNs: all overwritten */
			assert_int_equal(be.ops->attention_fwd(&be, a.out, a.lse, a.q, a.k,
							       a.v, &a.d), 0);
			check_close("attention out", a.out, od, a.nq, 1e-5, 1e-6);
			check_close("attention lse", a.lse, ld, nl, 1e-6, 1e-6);
		}
		free(qd), free(kd), free(vd), free(od), free(ld);
		attn_data_free(&a);
	}
	struct titan_attn_dims bad = {1, 4, 3, 2, 4, NULL};
	float dummy[64];
	assert_int_equal(be.ops->attention_fwd(&be, dummy, dummy, dummy, dummy, dummy, &bad),
			 TITAN_E_INVALID);
}

static void test_attention_causal_gqa(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	be.attn_block_q = 4;
	be.attn_block_k = 3;
	struct attn_data a;
	attn_data_init(&a, 2, 13, 6, 2, 4, 60);
	const int64_t Tn = 13, Hn = 6, Hk = 2, Dn = 4, t0 = 6;
	assert_int_equal(be.ops->attention_fwd(&be, a.out, a.lse, a.q, a.k, a.v, &a.d), 0);
	float *out0 = FALLOC(a.nq), *lse0 = FALLOC(2 * Hn * Tn);
	memcpy(out0, a.out, a.nq * sizeof(float));
	memcpy(lse0, a.lse, 2 * Hn * Tn * sizeof(float));

	/* changing keys/values at positions >= t0 leaves earlier rows alone
	 * (bit for bit) and changes the rows at t0 */
	for (int64_t b = 0; b < 2; b++)
		for (int64_t t = t0; t < Tn; t++)
			for (int64_t j = 0; j < Hk * Dn; j++) {
				a.k[(b * Tn + t) * Hk * Dn + j] += 1.5f;
				a.v[(b * Tn + t) * Hk * Dn + j] -= 2.0f;
			}
	assert_int_equal(be.ops->attention_fwd(&be, a.out, a.lse, a.q, a.k, a.v, &a.d), 0);
	for (int64_t b = 0; b < 2; b++) {
		const size_t row = (size_t)(Hn * Dn);
		assert_memory_equal(a.out + b * Tn * row, out0 + b * Tn * row,
				    (size_t)t0 * row * sizeof(float));
		assert_memory_not_equal(a.out + (b * Tn + t0) * row, out0 + (b * Tn + t0) * row,
					row * sizeof(float));
		for (int64_t h = 0; h < Hn; h++)
			assert_memory_equal(a.lse + (b * Hn + h) * Tn, lse0 + (b * Hn + h) * Tn,
					    (size_t)t0 * sizeof(float));
	}

	/* GQA: query head h reads kv head h/(H/Hkv), i.e. the same as MHA on
	 * repeat_interleave'd keys and values (bit for bit: same loops) */
	float *kr = FALLOC(a.nq), *vr = FALLOC(a.nq), *outr = FALLOC(a.nq);
	float *lser = FALLOC(2 * Hn * Tn);
	for (int64_t r = 0; r < 2 * Tn; r++)
		for (int64_t h = 0; h < Hn; h++) {
			memcpy(kr + (r * Hn + h) * Dn, a.k + (r * Hk + h / (Hn / Hk)) * Dn,
			       Dn * sizeof(float));
			memcpy(vr + (r * Hn + h) * Dn, a.v + (r * Hk + h / (Hn / Hk)) * Dn,
			       Dn * sizeof(float));
		}
	struct titan_attn_dims mha = a.d;
	mha.n_kv_heads = Hn;
	assert_int_equal(be.ops->attention_fwd(&be, outr, lser, a.q, kr, vr, &mha), 0);
	assert_memory_equal(outr, a.out, a.nq * sizeof(float));
	assert_memory_equal(lser, a.lse, 2 * Hn * Tn * sizeof(float));

	/* and backward: dk/dv of a kv head = sum of the repeated heads' grads */
	float *dout = FALLOC(a.nq), *dq = FALLOC(a.nq), *dk = FALLOC(a.nk), *dv = FALLOC(a.nk);
	float *dqr = FALLOC(a.nq), *dkr = FALLOC(a.nq), *dvr = FALLOC(a.nq);
	fill(dout, a.nq, 61, 1.0f);
	assert_int_equal(be.ops->attention_bwd(&be, dq, dk, dv, dout, a.q, a.k, a.v, a.out,
					       a.lse, &a.d), 0);
	assert_int_equal(be.ops->attention_bwd(&be, dqr, dkr, dvr, dout, a.q, kr, vr, outr,
					       lser, &mha), 0);
	assert_memory_equal(dq, dqr, a.nq * sizeof(float));
	double *dks = DALLOC(a.nk), *dvs = DALLOC(a.nk);
	for (int64_t r = 0; r < 2 * Tn; r++)
		for (int64_t h = 0; h < Hn; h++)
			for (int64_t j = 0; j < Dn; j++) {
				dks[(r * Hk + h / (Hn / Hk)) * Dn + j] += dkr[(r * Hn + h) * Dn + j];
				dvs[(r * Hk + h / (Hn / Hk)) * Dn + j] += dvr[(r * Hn + h) * Dn + j];
			}
	check_close("gqa dk", dk, dks, a.nk, 1e-5, 1e-6);
	check_close("gqa dv", dv, dvs, a.nk, 1e-5, 1e-6);

	free(out0), free(lse0), free(kr), free(vr), free(outr), free(lser), free(dout);
	free(dq), free(dk), free(dv), free(dqr), free(dkr), free(dvr), free(dks), free(dvs);
	attn_data_free(&a);
}

/* attention_part (the context-parallel ring's blocks): causal attention
 * cut into parts two ways equals the causal op — keys split at c (rows
 * before c see none of the later part: out 0, lse -inf, then the merge
 * keeps the earlier part's bits), and queries split at c (a sub-block of
 * the rows with q_stride > tq); backward of the parts, added up, equals
 * the causal backward. */
static void test_attention_part(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	be.attn_block_q = 4;
	be.attn_block_k = 3;
	struct attn_data a;
	const int64_t Bn = 2, Tn = 13, Hn = 6, Hk = 2, Dn = 4, c = 5;
	const int64_t qs = Hn * Dn, ks = Hk * Dn;
	attn_data_init(&a, Bn, Tn, Hn, Hk, Dn, 70);
	const size_t nl = (size_t)(Bn * Hn * Tn);
	float *out = FALLOC(a.nq), *lse = FALLOC(nl), *dout = FALLOC(a.nq);
	float *dq = FALLOC(a.nq), *dk = FALLOC(a.nk), *dv = FALLOC(a.nk);
	float *pq = FALLOC(a.nq), *pk = FALLOC(a.nk), *pv = FALLOC(a.nk);
	fill(dout, a.nq, 71, 1.0f);
	assert_int_equal(be.ops->attention_fwd(&be, a.out, a.lse, a.q, a.k, a.v, &a.d), 0);
	assert_int_equal(be.ops->attention_bwd(&be, dq, dk, dv, dout, a.q, a.k, a.v, a.out,
					       a.lse, &a.d), 0);
	double *od = to_d(a.out, a.nq), *ld = to_d(a.lse, nl);
	double *dqd = to_d(dq, a.nq), *dkd = to_d(dk, a.nk), *dvd = to_d(dv, a.nk);

	/* keys [c, T) first (row t sees key c + s when s <= t - c), then
	 * keys [0, c) merged in (row t sees s <= t) */
	struct titan_attn_part late = {Bn, Tn, Tn - c, Tn, Tn, Hn, Hk, Dn, -c, NULL, NULL};
	struct titan_attn_part early = {Bn, Tn, c, Tn, Tn, Hn, Hk, Dn, 0, NULL, NULL};
	memset(out, 0xff, a.nq * sizeof(float));
	assert_int_equal(be.ops->attention_part_fwd(&be, out, lse, a.q, a.k + c * ks,
						    a.v + c * ks, &late, false), 0);
	for (int64_t b = 0; b < Bn; b++)
		for (int64_t t = 0; t < c; t++) {
			assert_true(isinf(lse[b * Hn * Tn + t]) && lse[b * Hn * Tn + t] < 0);
			assert_true(out[(b * Tn + t) * qs] == 0.0f);
		}
	assert_int_equal(be.ops->attention_part_fwd(&be, out, lse, a.q, a.k, a.v, &early, true),
			 0);
	check_close("part out (keys split)", out, od, a.nq, 1e-5, 1e-6);
	check_close("part lse (keys split)", lse, ld, nl, 1e-5, 1e-6);
	/* backward from the causal op's out and lse: the parts' dk/dv rows
	 * are disjoint, dq adds up */
	memset(pk, 0xff, a.nk * sizeof(float));
	memset(pv, 0xff, a.nk * sizeof(float));
	assert_int_equal(be.ops->attention_part_bwd(&be, pq, pk + c * ks, pv + c * ks, dout, a.q,
						    a.k + c * ks, a.v + c * ks, a.out, a.lse,
						    &late, false), 0);
	for (int64_t b = 0; b < Bn; b++) /* the early keys' rows: zero them */
		for (int64_t j = 0; j < c * ks; j++)
			pk[b * Tn * ks + j] = pv[b * Tn * ks + j] = 0.0f;
	assert_int_equal(be.ops->attention_part_bwd(&be, pq, pk, pv, dout, a.q, a.k, a.v, a.out,
						    a.lse, &early, true), 0);
	check_close("part dq (keys split)", pq, dqd, a.nq, 1e-5, 1e-6);
	check_close("part dk (keys split)", pk, dkd, a.nk, 1e-5, 1e-6);
	check_close("part dv (keys split)", pv, dvd, a.nk, 1e-5, 1e-6);

	/* queries [0, c) against keys [0, c) causally; queries [c, T) (row
	 * t' = t - c of a sub-block with stride T) against every key up to t */
	struct titan_attn_part top = {Bn, c, c, Tn, Tn, Hn, Hk, Dn, 0, NULL, NULL};
	struct titan_attn_part bottom = {Bn, Tn - c, Tn, Tn, Tn, Hn, Hk, Dn, c, NULL, NULL};
	memset(out, 0xff, a.nq * sizeof(float));
	assert_int_equal(be.ops->attention_part_fwd(&be, out, lse, a.q, a.k, a.v, &top, false), 0);
	assert_int_equal(be.ops->attention_part_fwd(&be, out + c * qs, lse + c, a.q + c * qs, a.k,
						    a.v, &bottom, false), 0);
	check_close("part out (queries split)", out, od, a.nq, 1e-5, 1e-6);
	check_close("part lse (queries split)", lse, ld, nl, 1e-5, 1e-6);
	memset(pq, 0, a.nq * sizeof(float));
	memset(pk, 0, a.nk * sizeof(float));
	memset(pv, 0, a.nk * sizeof(float));
	assert_int_equal(be.ops->attention_part_bwd(&be, pq, pk, pv, dout, a.q, a.k, a.v, a.out,
						    a.lse, &top, true), 0);
	assert_int_equal(be.ops->attention_part_bwd(&be, pq + c * qs, pk, pv, dout + c * qs,
						    a.q + c * qs, a.k, a.v, a.out + c * qs,
						    a.lse + c, &bottom, true), 0);
	check_close("part dq (queries split)", pq, dqd, a.nq, 1e-5, 1e-6);
	check_close("part dk (queries split)", pk, dkd, a.nk, 1e-5, 1e-6);
	check_close("part dv (queries split)", pv, dvd, a.nk, 1e-5, 1e-6);
	/* bad geometry names the numbers */
	struct titan_attn_part bad = {1, 4, 4, 3, 4, 4, 2, 4, 0, NULL, NULL};
	assert_int_equal(be.ops->attention_part_fwd(&be, out, lse, a.q, a.k, a.v, &bad, false),
			 TITAN_E_INVALID);
	assert_non_null(strstr(titan_error_last()->msg, "Tq=4 (stride 3)"));
	free(od), free(ld), free(dqd), free(dkd), free(dvd);
	free(out), free(lse), free(dout), free(dq), free(dk), free(dv), free(pq), free(pk), free(pv);
	attn_data_free(&a);
}

static void test_attention_bwd(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	struct attn_data a;
	attn_data_init(&a, B, T, H, HKV, D, 70);
	float *dout = FALLOC(a.nq), *dq = FALLOC(a.nq), *dk = FALLOC(a.nk), *dv = FALLOC(a.nk);
	fill(dout, a.nq, 73, 1.0f);
	struct fd p = {.f = obj_attention,
		       .in = {to_d(a.q, a.nq), to_d(a.k, a.nk), to_d(a.v, a.nk)},
		       .nin = {a.nq, a.nk, a.nk}, .r = to_d(dout, a.nq), .out = DALLOC(a.nq)};
	double *gq = fd_grad(&p, 0), *gk = fd_grad(&p, 1), *gv = fd_grad(&p, 2);
	static const int tiles[][2] = {{64, 64}, {2, 3}, {1, 1}, {3, 2}};
	for (size_t t = 0; t < sizeof(tiles) / sizeof(tiles[0]); t++) {
		be.attn_block_q = tiles[t][0];
		be.attn_block_k = tiles[t][1];
		assert_int_equal(be.ops->attention_fwd(&be, a.out, a.lse, a.q, a.k, a.v, &a.d), 0);
		memset(dq, 0xff, a.nq * sizeof(float)); /* all overwritten */
		memset(dk, 0xff, a.nk * sizeof(float));
		memset(dv, 0xff, a.nk * sizeof(float));
		assert_int_equal(be.ops->attention_bwd(&be, dq, dk, dv, dout, a.q, a.k, a.v,
						       a.out, a.lse, &a.d), 0);
		check_grad("attention dq", dq, gq, a.nq);
		check_grad("attention dk", dk, gk, a.nk);
		check_grad("attention dv", dv, gv, a.nk);
	}
	free(dout), free(dq), free(dk), free(dv), free(p.in[0]), free(p.in[1]), free(p.in[2]);
	free((void *)p.r), free(p.out), free(gq), free(gk), free(gv);
	attn_data_free(&a);
}

/* ----------------------------------------------------- classifier + CE */

static void test_classifier_ce(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	const int32_t labels[N] = {3, -100, 10, 0, 7, -1, 7, 2, 5, -100};
	const int64_t nvalid = 7;
	float *h = FALLOC(N * C), *w = FALLOC(V * C), *dh = FALLOC(N * C), *dw = FALLOC(V * C);
	fill(h, N * C, 80, 1.0f);
	fill(w, V * C, 81, 0.5f);
	double *hd = to_d(h, N * C), *wd = to_d(w, V * C);
	const double want = ref_ce(hd, wd, labels, N, C, V);
	const float gs = 1.0f / (float)nvalid;

	double loss = 0.0, loss_all = 0.0;
	int64_t nv = 0;
	assert_int_equal(be.ops->classifier_ce(&be, &loss, &nv, NULL, NULL, h, w, labels,
					       N, C, V, gs, 0), 0);
	assert_int_equal(nv, nvalid);
	assert_true(fabs(loss - want) <= 1e-6 * want);

	struct fd p = {.f = obj_ce, .in = {hd, wd}, .nin = {N * C, V * C}, .aux = labels,
		       .scale = gs};
	double *gh = fd_grad(&p, 0), *gw = fd_grad(&p, 1);
	float *dh1 = FALLOC(N * C), *dw1 = FALLOC(V * C);
	/* chunk sizes 1, 3 (ragged), all: same loss, same gradients up to
	 * sgemm rounding (1e-6 loss, 1e-5 grads) */
	static const int64_t chunks[] = {0, 1, 3, N, 4 * N};
	for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
		for (int i = 0; i < N * C; i++)
			dh[i] = NAN;
		memset(dw, 0, V * C * sizeof(float));
		dw[5] = 1.0f; /* accumulates */
		assert_int_equal(be.ops->classifier_ce(&be, &loss, &nv, dh, dw, h, w, labels,
						       N, C, V, gs, chunks[k]), 0);
		assert_int_equal(nv, nvalid);
		assert_true(fabs(loss - want) <= 1e-6 * want);
		dw[5] -= 1.0f;
		for (int i = 0; i < C; i++) { /* ignored token: zero gradient */
			assert_true(dh[1 * C + i] == 0.0f && dh[5 * C + i] == 0.0f);
			assert_true(dh[9 * C + i] == 0.0f);
		}
		check_grad("ce dh", dh, gh, N * C);
		check_grad("ce dw", dw, gw, V * C);
		if (k == 0) {
			loss_all = loss;
			memcpy(dh1, dh, N * C * sizeof(float));
			memcpy(dw1, dw, V * C * sizeof(float));
		} else {
			double *ref = to_d(dh1, N * C), *refw = to_d(dw1, V * C);
			assert_true(fabs(loss - loss_all) <= 1e-6 * loss_all);
			check_close("ce dh vs chunk", dh, ref, N * C, 1e-5, 1e-8);
			check_close("ce dw vs chunk", dw, refw, V * C, 1e-5, 1e-8);
			free(ref), free(refw);
		}
	}
	/* all ignored: zero loss and count, zero dh */
	const int32_t none[N] = {-100, -100, -100, -100, -100, -100, -100, -100, -100, -100};
	assert_int_equal(be.ops->classifier_ce(&be, &loss, &nv, dh, dw, h, w, none, N, C, V,
					       1.0f, 3), 0);
	assert_true(loss == 0.0 && nv == 0 && dh[0] == 0.0f);
	/* label out of range; half-given gradients */
	const int32_t bad[2] = {1, V};
	assert_int_equal(be.ops->classifier_ce(&be, &loss, &nv, NULL, NULL, h, w, bad, 2, C,
					       V, 1.0f, 0), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "position 1"));
	assert_int_equal(be.ops->classifier_ce(&be, &loss, &nv, dh, NULL, h, w, labels, N, C,
					       V, 1.0f, 0), TITAN_E_INVALID);

	free(h), free(w), free(dh), free(dw), free(hd), free(wd), free(gh), free(gw);
	free(dh1), free(dw1);
}

/* ---------------------------------------------------------------- adamw */

static void test_adamw(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	enum { P = 1000 };
	const struct titan_adamw_hparams hp = {1e-2, 0.9, 0.95, 1e-8, 0.1};
	float *p = FALLOC(P), *m = FALLOC(P), *v = FALLOC(P), *g = FALLOC(P);
	float *ps = FALLOC(P), *ms = FALLOC(P), *vs = FALLOC(P);
	double *pd = DALLOC(P), *md = DALLOC(P), *vd = DALLOC(P);
	fill(p, P, 90, 1.0f);
	for (int i = 0; i < P; i++)
		pd[i] = ps[i] = p[i];
	const float clip = 0.75f;
	for (int step = 1; step <= 3; step++) {
		fill(g, P, 91 + step, 0.1f);
		g[7] = 0.0f; /* zero gradient: pure decay */
		assert_int_equal(be.ops->adamw_step(&be, p, m, v, g, P, &hp, step, clip), 0);
		const double bc1 = 1.0 - pow(hp.beta1, step), bc2 = 1.0 - pow(hp.beta2, step);
		for (int i = 0; i < P; i++) {
			/* float64 torch.optim.AdamW */
			const double gi = (double)(g[i] * clip);
			pd[i] -= hp.lr * hp.weight_decay * pd[i];
			md[i] = hp.beta1 * md[i] + (1.0 - hp.beta1) * gi;
			vd[i] = hp.beta2 * vd[i] + (1.0 - hp.beta2) * gi * gi;
			pd[i] -= hp.lr * (md[i] / bc1) / (sqrt(vd[i] / bc2) + hp.eps);
			/* the fp32 operation order of PyTorch's kernels, literally */
			const float gf = g[i] * clip;
			ps[i] = ps[i] * (float)(1.0 - hp.lr * hp.weight_decay);
			ms[i] = fmaf((float)(1.0 - hp.beta1), gf - ms[i], ms[i]); /* lerp_ */
			vs[i] = vs[i] * (float)hp.beta2;                          /* mul_ */
			vs[i] = vs[i] + (float)(1.0 - hp.beta2) * gf * gf;        /* addcmul_ */
			const float denom = sqrtf(vs[i]) / (float)sqrt(bc2) + (float)hp.eps;
			ps[i] = ps[i] + (float)(-(hp.lr / bc1)) * ms[i] / denom;  /* addcdiv_ */
		}
		check_close("adamw p", p, pd, P, 1e-5, 1e-7);
		check_close("adamw m", m, md, P, 1e-5, 1e-9);
		check_close("adamw v", v, vd, P, 1e-5, 1e-12);
		assert_memory_equal(p, ps, P * sizeof(float));
		assert_memory_equal(m, ms, P * sizeof(float));
		assert_memory_equal(v, vs, P * sizeof(float));
	}
	/* weight decay 0 leaves a zero-gradient parameter alone */
	const struct titan_adamw_hparams nowd = {1e-2, 0.9, 0.95, 1e-8, 0.0};
	float p1 = 0.5f, m1 = 0.0f, v1 = 0.0f, g1 = 0.0f;
	assert_int_equal(be.ops->adamw_step(&be, &p1, &m1, &v1, &g1, 1, &nowd, 1, 1.0f), 0);
	assert_true(p1 == 0.5f);
	assert_int_equal(be.ops->adamw_step(&be, &p1, &m1, &v1, &g1, 1, &nowd, 0, 1.0f),
			 TITAN_E_INVALID);
	free(p), free(m), free(v), free(g), free(ps), free(ms), free(vs), free(pd), free(md), free(vd);
}

/* ----------------------------------------------------- multi-tensor ops */

/* A table with every case the arenas of a model do not have: unaligned
 * offsets, tensors back to back and with gaps, empty ones, sizes around
 * the sumsq chunk. */
static const struct titan_tensor_span mt_spans[] = {
	{3, 37, false},      {40, 0, true},        {40, 16385, false}, {16431, 1, true},
	{16433, 0, false},   {16433, 16384, true}, {32821, 100003, false},
	{132829, 5, false},  {132840, 2048, true},
};
#define MT_FLOATS 134900 /* past the last span's end */

static const struct titan_backend_ops *mt_inner;
static int mt_sumsq_calls, mt_adamw_calls;

static int mt_spy_sumsq(struct titan_backend *be, double *out, const float *x, int64_t n)
{
	mt_sumsq_calls++;
	return mt_inner->sumsq(be, out, x, n);
}

static int mt_spy_adamw(struct titan_backend *be, float *p, float *m, float *v, const float *g,
			int64_t n, const struct titan_adamw_hparams *hp, int64_t step, float gm)
{
	mt_adamw_calls++;
	return mt_inner->adamw_step(be, p, m, v, g, n, hp, step, gm);
}

/* sumsq_multi and adamw_multi: the per-tensor ops' bits, tensor by tensor,
 * through the table (a wrapping table sees each per-tensor op), nothing
 * outside the spans written; n = 0 and bad tables. */
static void test_multi_tensor(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	struct titan_backend_ops spy = *be.ops;
	const int n = (int)(sizeof(mt_spans) / sizeof(mt_spans[0]));
	const struct titan_adamw_hparams hp = {1e-2, 0.9, 0.95, 1e-8, 0.1};
	float *p = FALLOC(MT_FLOATS), *m = FALLOC(MT_FLOATS), *v = FALLOC(MT_FLOATS);
	float *g = FALLOC(MT_FLOATS), *pr = FALLOC(MT_FLOATS), *mr = FALLOC(MT_FLOATS);
	float *vr = FALLOC(MT_FLOATS), *p0 = FALLOC(MT_FLOATS);
	double got[16], want[16];

	assert_non_null(be.ops->sumsq_multi);
	assert_non_null(be.ops->adamw_multi);
	mt_inner = be.ops;
	spy.sumsq = mt_spy_sumsq;
	spy.adamw_step = mt_spy_adamw;
	fill(p, MT_FLOATS, 120, 0.02f);
	memcpy(pr, p, MT_FLOATS * sizeof(float));
	memcpy(p0, p, MT_FLOATS * sizeof(float));
	for (int step = 1; step <= 3; step++) {
		fill(g, MT_FLOATS, 120 + step, 0.1f);
		/* the sums, per tensor */
		for (int i = 0; i < n; i++) {
			got[i] = -1.0;
			assert_int_equal(be.ops->sumsq(&be, &want[i], g + mt_spans[i].offset,
						       mt_spans[i].numel), 0);
		}
		be.ops = &spy;
		mt_sumsq_calls = mt_adamw_calls = 0;
		assert_int_equal(be.ops->sumsq_multi(&be, got, g, mt_spans, n), 0);
		assert_int_equal(mt_sumsq_calls, n);
		assert_memory_equal(got, want, (size_t)n * sizeof(double));
		/* AdamW: the arenas against tensor-by-tensor steps on copies */
		assert_int_equal(be.ops->adamw_multi(&be, p, m, v, g, mt_spans, n, &hp, step,
						     0.75f), 0);
		assert_int_equal(mt_adamw_calls, n);
		be.ops = mt_inner;
		for (int i = 0; i < n; i++) {
			const int64_t o = mt_spans[i].offset;
			struct titan_adamw_hparams h = hp;

			if (mt_spans[i].no_decay)
				h.weight_decay = 0.0;
			assert_int_equal(be.ops->adamw_step(&be, pr + o, mr + o, vr + o, g + o,
							    mt_spans[i].numel, &h, step, 0.75f), 0);
		}
		assert_memory_equal(p, pr, MT_FLOATS * sizeof(float));
		assert_memory_equal(m, mr, MT_FLOATS * sizeof(float));
		assert_memory_equal(v, vr, MT_FLOATS * sizeof(float));
	}
	/* outside the spans (the gaps, the end): untouched */
	for (int64_t i = 0, t = 0; i < MT_FLOATS; i++) {
		while (t < n && i >= mt_spans[t].offset + mt_spans[t].numel)
			t++;
		if (t < n && i >= mt_spans[t].offset)
			continue;
		assert_true(p[i] == p0[i] && m[i] == 0.0f && v[i] == 0.0f);
	}
	/* decay only where no_decay is false: a zero gradient shows it */
	const struct titan_tensor_span one[2] = {{0, 1, false}, {1, 1, true}};
	float q[2] = {0.5f, 0.5f}, qm[2] = {0}, qv[2] = {0}, qg[2] = {0};
	assert_int_equal(be.ops->adamw_multi(&be, q, qm, qv, qg, one, 2, &hp, 1, 1.0f), 0);
	assert_true(q[0] == 0.5f * (float)(1.0 - hp.lr * hp.weight_decay) && q[1] == 0.5f);
	/* n = 0: nothing, not even a read of the table */
	got[0] = -1.0;
	assert_int_equal(be.ops->sumsq_multi(&be, got, g, NULL, 0), 0);
	assert_true(got[0] == -1.0);
	assert_int_equal(be.ops->adamw_multi(&be, p, m, v, g, NULL, 0, &hp, 1, 1.0f), 0);
	/* bad tables and steps */
	const struct titan_tensor_span neg[2] = {{0, 4, false}, {4, -1, false}};
	assert_int_equal(be.ops->sumsq_multi(&be, got, g, neg, 2), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "sumsq_multi: tensor 1"));
	assert_int_equal(be.ops->sumsq_multi(&be, got, g, mt_spans, -1), TITAN_E_INVALID);
	assert_int_equal(be.ops->adamw_multi(&be, p, m, v, g, neg, 2, &hp, 1, 1.0f),
			 TITAN_E_INVALID);
	assert_int_equal(be.ops->adamw_multi(&be, p, m, v, g, mt_spans, n, &hp, 0, 1.0f),
			 TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "step 0"));
	assert_int_equal(be.ops->adamw_multi(&be, p, m, v, g, NULL, 0, &hp, 0, 1.0f),
			 TITAN_E_INVALID);
	titan_backend_release(&be);
	free(p), free(m), free(v), free(g), free(pr), free(mr), free(vr), free(p0);
}

/* -------------------------------------------------------- vector helpers */

static void test_vector_helpers(void **state)
{
	(void)state;
	struct titan_backend be = cpu(2);
	enum { M = 100003 }; /* several sumsq chunks, ragged end */
	float *x = FALLOC(M), *y = FALLOC(M), *z = FALLOC(M);
	fill(x, M, 100, 1.0f);
	fill(y, M, 101, 1.0f);
	double want = 0.0, got = -1.0;
	for (int i = 0; i < M; i++)
		want += (double)x[i] * x[i];
	assert_int_equal(be.ops->sumsq(&be, &got, x, M), 0);
	assert_true(fabs(got - want) <= 1e-12 * want);
	assert_int_equal(be.ops->sumsq(&be, &got, x, 0), 0);
	assert_true(got == 0.0);

	assert_int_equal(be.ops->add(&be, z, x, y, M), 0);
	for (int i = 0; i < M; i++)
		assert_true(z[i] == x[i] + y[i]);
	assert_int_equal(be.ops->add(&be, x, x, y, M), 0); /* in place */
	assert_memory_equal(x, z, M * sizeof(float));
	assert_int_equal(be.ops->copy(&be, y, z, M), 0);
	assert_int_equal(be.ops->scale(&be, y, M, 0.25f), 0);
	for (int i = 0; i < M; i++)
		assert_true(y[i] == z[i] * 0.25f);
	assert_int_equal(be.ops->zero(&be, y, M), 0);
	for (int i = 0; i < M; i++)
		assert_true(y[i] == 0.0f);
	titan_backend_release(&be);
	titan_backend_release(NULL);
	free(x), free(y), free(z);
}

/* ----------------------------------------------------------- determinism */

/* Outputs of every op on one set of inputs, big enough that the ops split
 * their work over threads. */
struct run {
	float *mm, *dx, *dw, *emb, *demb, *y, *rstd, *ndx, *ndw, *rope, *sw, *da, *db;
	float *ao, *lse, *dq, *dk, *dv, *dh, *dwo, *p, *m, *v;
	double loss, ss;
};

/* RN, RV above the sgemm tile (1024): GEMMs are cut into several tiles */
enum { RN = 1100, RC = 128, RV = 1300, RF = 96, RB = 2, RT = 64, RH = 4, RK = 2, RD = 32 };

static void run_all(struct run *o, int nthreads, bool blas)
{
	struct titan_backend be = cpu(nthreads);
	be.attn_block_q = 16;
	be.attn_block_k = 8;
	float *x = FALLOC(RN * RC), *w = FALLOC(RF * RC), *tab = FALLOC(RT * RD);
	float *g = FALLOC(RN * RF), *wo = FALLOC(RV * RC);
	uint32_t *ids = xcalloc(RN, sizeof(uint32_t));
	int32_t *labels = xcalloc(RN, sizeof(int32_t));
	fill(x, RN * RC, 200, 1.0f);
	fill(w, RF * RC, 201, 0.1f);
	fill(g, RN * RF, 202, 1.0f);
	fill(wo, RV * RC, 203, 0.1f);
	for (int i = 0; i < RN; i++) {
		ids[i] = (uint32_t)((i * 7919) % 37); /* many repeats */
		labels[i] = i % 13 == 0 ? -100 : (i * 31) % RV;
	}
	assert_int_equal(titan_rope_freqs(tab, RT, RD, 500000.0, NULL), 0);
	const struct titan_attn_dims ad = {RB, RT, RH, RK, RD, NULL};
	const size_t nq = RB * RT * RH * RD, nk = RB * RT * RK * RD;
	*o = (struct run){0};
	o->emb = FALLOC(RN * RC), o->demb = FALLOC(RV * RC);
	o->y = FALLOC(RN * RC), o->rstd = FALLOC(RN), o->ndx = FALLOC(RN * RC);
	o->ndw = FALLOC(RC), o->rope = FALLOC(nq), o->sw = FALLOC(RN * RF);
	o->da = FALLOC(RN * RF), o->db = FALLOC(RN * RF), o->ao = FALLOC(nq);
	o->lse = FALLOC(RB * RH * RT), o->dq = FALLOC(nq), o->dk = FALLOC(nk), o->dv = FALLOC(nk);
	o->p = FALLOC(RN * RF), o->m = FALLOC(RN * RF), o->v = FALLOC(RN * RF);
	struct titan_backend_ops const *op = be.ops;

	assert_int_equal(op->embedding_fwd(&be, o->emb, ids, wo, RN, RV, RC), 0);
	assert_int_equal(op->embedding_bwd(&be, o->demb, ids, x, RN, RV, RC), 0);
	assert_int_equal(op->rmsnorm_fwd(&be, o->y, o->rstd, x, wo, RN, RC, 1e-5f), 0);
	assert_int_equal(op->rmsnorm_bwd(&be, o->ndx, o->ndw, o->emb, x, wo, o->rstd, RN, RC,
					 false), 0);
	memcpy(o->rope, x, nq * sizeof(float));
	assert_int_equal(op->rope_fwd(&be, o->rope, tab, RB, RT, RH, RD), 0);
	assert_int_equal(op->swiglu_fwd(&be, o->sw, g, g + 1, RN * RF - 1), 0);
	assert_int_equal(op->swiglu_bwd(&be, o->da, o->db, g, g + 1, o->sw, RN * RF - 1), 0);
	assert_int_equal(op->attention_fwd(&be, o->ao, o->lse, x, x + nq, x + nq + nk, &ad), 0);
	assert_int_equal(op->attention_bwd(&be, o->dq, o->dk, o->dv, x + 2 * nk, x, x + nq,
					   x + nq + nk, o->ao, o->lse, &ad), 0);
	memcpy(o->p, g, RN * RF * sizeof(float));
	const struct titan_adamw_hparams hp = {1e-3, 0.9, 0.95, 1e-8, 0.1};
	for (int s = 1; s <= 2; s++)
		assert_int_equal(op->adamw_step(&be, o->p, o->m, o->v, o->da, RN * RF, &hp, s,
						0.5f), 0);
	assert_int_equal(op->sumsq(&be, &o->ss, o->da, RN * RF), 0);
	if (blas) {
		o->mm = FALLOC(RN * RF), o->dx = FALLOC(RN * RC), o->dw = FALLOC(RF * RC);
		o->dh = FALLOC(RN * RC), o->dwo = FALLOC(RV * RC);
		assert_int_equal(op->matmul_fwd(&be, o->mm, x, w, RN, RC, RF, false), 0);
		assert_int_equal(op->matmul_bwd(&be, o->dx, o->dw, g, x, w, RN, RC, RF, false), 0);
		int64_t nv;
		assert_int_equal(op->classifier_ce(&be, &o->loss, &nv, o->dh, o->dwo, x, wo,
						   labels, RN, RC, RV, 1.0f / 400, 100), 0);
	}
	free(x), free(w), free(tab), free(g), free(wo), free(ids), free(labels);
}

static void run_free(struct run *o)
{
	float **f[] = {&o->mm, &o->dx, &o->dw, &o->emb, &o->demb, &o->y, &o->rstd, &o->ndx,
		       &o->ndw, &o->rope, &o->sw, &o->da, &o->db, &o->ao, &o->lse, &o->dq,
		       &o->dk, &o->dv, &o->dh, &o->dwo, &o->p, &o->m, &o->v};
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		free(*f[i]);
}

static void run_compare(const struct run *a, const struct run *b, bool blas)
{
	const size_t nq = RB * RT * RH * RD, nk = RB * RT * RK * RD, fsz = sizeof(float);
#define SAME(field, n) assert_memory_equal(a->field, b->field, (n) * fsz)
	SAME(emb, RN * RC), SAME(demb, RV * RC), SAME(y, RN * RC), SAME(rstd, RN);
	SAME(ndx, RN * RC), SAME(ndw, RC), SAME(rope, nq), SAME(sw, RN * RF - 1);
	SAME(da, RN * RF - 1), SAME(db, RN * RF - 1), SAME(ao, nq), SAME(lse, RB * RH * RT);
	SAME(dq, nq), SAME(dk, nk), SAME(dv, nk), SAME(p, RN * RF), SAME(m, RN * RF);
	SAME(v, RN * RF);
	assert_memory_equal(&a->ss, &b->ss, sizeof(double));
	if (blas) {
		SAME(mm, RN * RF), SAME(dx, RN * RC), SAME(dw, RF * RC), SAME(dh, RN * RC);
		SAME(dwo, RV * RC);
		assert_memory_equal(&a->loss, &b->loss, sizeof(double));
	}
#undef SAME
}

/* The buffer ops (host memory on the CPU): alloc under a tag, set/get/
 * copy of bytes at offsets, strided rows with offsets, memset; each leaves
 * the bytes around its destination alone. */
static void test_buffer_ops(void **state)
{
	struct titan_backend be = cpu(2);
	const struct titan_backend_ops *o = be.ops;
	struct titan_allocator *host = titan_host_allocator();
	enum titan_mem_tag tag;
	enum { SR = 7, SC = 9, DR = 6, DC = 6 };
	float src[SR * SC], dst[DR * DC], want[DR * DC];
	unsigned char h[64], back[64];

	(void)state;
	/* alloc/free: the backend's allocator, the caller's tag, 0 bytes too */
	float *a = o->buf_alloc(&be, 100 * sizeof(float), TITAN_MEM_COMM);
	void *z = o->buf_alloc(&be, 0, TITAN_MEM_WORKSPACE);
	assert_non_null(a);
	assert_non_null(z);
	assert_int_equal(titan_mem_size(host, a, &tag), 100 * sizeof(float));
	assert_int_equal(tag, TITAN_MEM_COMM);
	assert_int_equal(titan_mem_size(host, z, &tag), 0);
	assert_int_equal(tag, TITAN_MEM_WORKSPACE);
	o->buf_free(&be, z);
	o->buf_free(&be, NULL);

	/* set / get at an offset inside the buffer */
	for (int i = 0; i < 64; i++)
		h[i] = (unsigned char)(i * 7 + 1);
	assert_int_equal(o->buf_memset(&be, a, 0x5a, 100 * sizeof(float)), 0);
	assert_int_equal(o->buf_set(&be, (char *)a + 3, h, 64), 0);
	memset(back, 0, sizeof(back));
	assert_int_equal(o->buf_get(&be, back, (char *)a + 3, 64), 0);
	assert_memory_equal(back, h, 64);
	assert_int_equal(((unsigned char *)a)[2], 0x5a);
	assert_int_equal(((unsigned char *)a)[67], 0x5a);
	assert_int_equal(o->buf_set(&be, a, NULL, 0), 0); /* 0 bytes: nothing read */
	assert_int_equal(o->buf_get(&be, NULL, a, 0), 0);

	/* copy buffer -> buffer */
	assert_int_equal(o->buf_copy(&be, a + 50, (char *)a + 3, 64), 0);
	assert_memory_equal(a + 50, h, 64);
	assert_int_equal(((unsigned char *)(a + 50))[64], 0x5a);
	assert_int_equal(o->buf_copy(&be, a, a + 50, 0), 0);

	/* memset: a part, then the byte pattern */
	assert_int_equal(o->buf_memset(&be, a + 20, 0, 5 * sizeof(float)), 0);
	for (int i = 20; i < 25; i++)
		assert_true(a[i] == 0.0f);
	assert_int_equal(((unsigned char *)(a + 25))[0], 0x5a);
	assert_int_equal(((unsigned char *)(a + 20))[-1], 0x5a);
	assert_int_equal(o->buf_memset(&be, a, 0x12, 0), 0);
	assert_int_equal(((unsigned char *)a)[0], 0x5a);

	/* strided rows with offsets: 4 rows of 5 from src row 1 col 2
	 * (stride 9) to dst row 0 col 1 (stride 6) */
	for (int i = 0; i < SR * SC; i++)
		src[i] = (float)i;
	for (int i = 0; i < DR * DC; i++)
		dst[i] = want[i] = -1.0f;
	for (int r = 0; r < 4; r++)
		for (int j = 0; j < 5; j++)
			want[1 + r * DC + j] = src[SC + 2 + r * SC + j];
	assert_int_equal(o->buf_copy_rows(&be, dst, 1, DC, src, SC + 2, SC, 4, 5), 0);
	assert_memory_equal(dst, want, sizeof(dst));
	/* contiguous rows (stride = width) are one block */
	for (int i = 0; i < DR * DC; i++)
		dst[i] = want[i] = -1.0f;
	for (int i = 0; i < 3 * 4; i++)
		want[2 + i] = src[5 + i];
	assert_int_equal(o->buf_copy_rows(&be, dst, 2, 4, src, 5, 4, 3, 4), 0);
	assert_memory_equal(dst, want, sizeof(dst));
	/* 0 rows or 0 width: nothing written */
	assert_int_equal(o->buf_copy_rows(&be, dst, 0, DC, src, 0, SC, 0, 5), 0);
	assert_int_equal(o->buf_copy_rows(&be, dst, 0, DC, src, 0, SC, 3, 0), 0);
	assert_memory_equal(dst, want, sizeof(dst));
	/* a stride below the width, negative sizes or offsets */
	assert_int_equal(o->buf_copy_rows(&be, dst, 0, 3, src, 0, SC, 2, 5), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "buf_copy_rows"));
	assert_int_equal(o->buf_copy_rows(&be, dst, 0, DC, src, 0, 4, 2, 5), TITAN_E_INVALID);
	assert_int_equal(o->buf_copy_rows(&be, dst, 0, DC, src, 0, SC, -1, 5), TITAN_E_INVALID);
	assert_int_equal(o->buf_copy_rows(&be, dst, -1, DC, src, 0, SC, 1, 5), TITAN_E_INVALID);
	assert_memory_equal(dst, want, sizeof(dst));
	o->buf_free(&be, a);
	titan_backend_release(&be);
}

static void test_determinism(void **state)
{
	(void)state;
	struct run r1, r2, r3, r4;
	/* run to run and any thread count: every op, GEMMs included */
	run_all(&r1, 2, true);
	run_all(&r2, 2, true);
	run_all(&r3, 1, true);
	run_all(&r4, 3, true);
	run_compare(&r1, &r2, true);
	run_compare(&r1, &r3, true);
	run_compare(&r1, &r4, true);
	run_free(&r1), run_free(&r2), run_free(&r3), run_free(&r4);
}

/* titan_cpu_sgemm: right (against a double loop) and bit-identical on 1, 2
 * and 5 threads for every transpose, beta 0 and 1, ragged shapes cut into
 * row tiles (m > 1024) or column tiles (m <= 1024 < n), halves of a single
 * tile (m, n <= 1024, one of them >= 512), and sub-matrices
 * (ld > width). */
static void test_sgemm_tiles(void **state)
{
	(void)state;
	static const int64_t shapes[][3] = {
		{2100, 70, 33}, {1100, 300, 129}, {45, 2300, 64}, {1025, 1025, 7}, {3, 5, 2},
		{600, 700, 50}, {700, 100, 20},
	};
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
		const int64_t pad = 3;
		for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++)
		for (int beta = 0; beta < 2; beta++) {
			/* A stored [m,k] or [k,m], B [k,n] or [n,k], each with pad columns */
			const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad;
			const int64_t ldc = n + pad;
			float *a = FALLOC((ta ? k : m) * lda), *b = FALLOC((tb ? n : k) * ldb);
			float *c0 = FALLOC(m * ldc), *c[3];
			fill(a, (size_t)((ta ? k : m) * lda), 300 + si, 1.0f);
			fill(b, (size_t)((tb ? n : k) * ldb), 400 + si, 1.0f);
			fill(c0, (size_t)(m * ldc), 500 + si, 1.0f);
			const int threads[3] = {1, 2, 5};
			for (int r = 0; r < 3; r++) {
				struct titan_backend be = cpu(threads[r]);
				c[r] = FALLOC(m * ldc);
				memcpy(c[r], c0, (size_t)(m * ldc) * sizeof(float));
				assert_int_equal(titan_cpu_sgemm(&be, ta, tb, m, n, k, 0.5f, a, lda,
								 b, ldb, (float)beta, c[r], ldc), 0);
			}
			assert_memory_equal(c[0], c[1], (size_t)(m * ldc) * sizeof(float));
			assert_memory_equal(c[0], c[2], (size_t)(m * ldc) * sizeof(float));
			for (int64_t i = 0; i < m; i++) {
				for (int64_t j = 0; j < n; j++) {
					double want = beta ? c0[i * ldc + j] : 0.0, abs = fabs(want);
					for (int64_t p = 0; p < k; p++) {
						double x = ta ? a[p * lda + i] : a[i * lda + p];
						double y = tb ? b[j * ldb + p] : b[p * ldb + j];
						want += 0.5 * x * y;
						abs += fabs(0.5 * x * y);
					}
					if (fabs(c[0][i * ldc + j] - want) > 1e-5 * abs + 1e-6)
						fail_msg("sgemm %lldx%lldx%lld ta %d tb %d beta %d: C[%lld,%lld] = %g, want %g",
							 (long long)m, (long long)n, (long long)k, ta, tb, beta,
							 (long long)i, (long long)j, c[0][i * ldc + j], want);
				}
				/* padding columns untouched */
				for (int64_t j = n; j < ldc; j++)
					assert_true(c[0][i * ldc + j] == c0[i * ldc + j]);
			}
			free(a), free(b), free(c0), free(c[0]), free(c[1]), free(c[2]);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpu_expf),
		cmocka_unit_test(test_matmul),
		cmocka_unit_test(test_embedding),
		cmocka_unit_test(test_rmsnorm),
		cmocka_unit_test(test_rope_freqs),
		cmocka_unit_test(test_rope),
		cmocka_unit_test(test_swiglu),
		cmocka_unit_test(test_attention_fwd),
		cmocka_unit_test(test_attention_causal_gqa),
		cmocka_unit_test(test_attention_bwd),
		cmocka_unit_test(test_attention_part),
		cmocka_unit_test(test_classifier_ce),
		cmocka_unit_test(test_adamw),
		cmocka_unit_test(test_multi_tensor),
		cmocka_unit_test(test_vector_helpers),
		cmocka_unit_test(test_buffer_ops),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_sgemm_tiles),
	};
	return cmocka_run_group_tests_name("ops", tests, NULL, NULL);
}
