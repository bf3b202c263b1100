/* test_cpu_simd.c — every compiled path of the CPU kernels (lib/cpu/isa.c:
 * baseline, AVX2, AVX-512; cpu_impl.h's TITAN_CPU_DISPATCH) against the
 * baseline one, to the bit, on each path this CPU has: RMSNorm, SwiGLU,
 * RoPE, add, scale, the fused classifier loss, AdamW, sumsq and attention,
 * forward and backward, at lengths that leave tails (odd, one under and
 * one over a vector, across the 16384-element chunks).  The elementwise
 * kernels are also checked against scalar twins written here (the same
 * operations in the same order), so the baseline path is pinned too.
 * Paths the CPU lacks are skipped (cmocka prints them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/ops.h"
#include "cpu/cpu_impl.h"

static struct titan_backend be;

static uint64_t rng_state;

/* uniform in [lo, hi) */
static float urand(float lo, float hi)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return lo + (hi - lo) * (float)((rng_state >> 40) * (1.0 / 16777216.0));
}

static float *frand(int64_t n, float lo, float hi)
{
	float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
	assert_non_null(p);
	for (int64_t i = 0; i < n; i++)
		p[i] = urand(lo, hi);
	return p;
}

/* A case writes its outputs (as bytes) into out[0..nout) for the path
 * selected now. */
typedef void (*run_fn)(const void *ctx, unsigned char *out);

static void compare(const char *what, const unsigned char *want, const unsigned char *got,
		    size_t n, enum titan_cpu_isa isa)
{
	for (size_t i = 0; i < n; i++)
		if (want[i] != got[i])
			fail_msg("%s: the %s path differs from the baseline one at byte %zu of %zu",
				 what, titan_cpu_isa_name(isa), i, n);
}

/* Runs `run` on the baseline path, then on every other path the CPU has,
 * and compares the bytes; returns the baseline output (caller frees). */
static unsigned char *each_path(const char *what, run_fn run, const void *ctx, size_t nout)
{
	const enum titan_cpu_isa best = titan_cpu_isa_best();
	unsigned char *want = calloc(nout ? nout : 1, 1), *got = calloc(nout ? nout : 1, 1);

	assert_non_null(want);
	assert_non_null(got);
	assert_int_equal(titan_cpu_isa_set(TITAN_CPU_ISA_BASE), 0);
	memset(want, 0xa5, nout); /* what a kernel leaves unwritten shows */
	run(ctx, want);
	for (int isa = TITAN_CPU_ISA_BASE + 1; isa <= (int)best; isa++) {
		assert_int_equal(titan_cpu_isa_set((enum titan_cpu_isa)isa), 0);
		memset(got, 0xa5, nout);
		run(ctx, got);
		compare(what, want, got, nout, (enum titan_cpu_isa)isa);
	}
	assert_int_equal(titan_cpu_isa_set(best), 0);
	free(got);
	return want;
}

/* ------------------------------------------------------------ RMSNorm */

struct norm_case {
	int64_t n, c;
	const float *x, *w, *dy;
};

static void run_norm(const void *p, unsigned char *out)
{
	const struct norm_case *k = p;
	const int64_t nc = k->n * k->c;
	float *y = (float *)out, *rstd = y + nc, *dx = rstd + k->n, *dw = dx + nc;

	assert_int_equal(be.ops->rmsnorm_fwd(&be, y, rstd, k->x, k->w, k->n, k->c, 1e-5f), 0);
	memset(dw, 0, (size_t)k->c * sizeof(float));
	memcpy(dx, k->dy, (size_t)nc * sizeof(float)); /* accumulate onto dy */
	assert_int_equal(be.ops->rmsnorm_bwd(&be, dx, dw, k->dy, k->x, k->w, rstd, k->n, k->c,
					     true), 0);
}

static void test_rmsnorm(void **state)
{
	static const int64_t cs[] = {1, 7, 8, 15, 17, 63, 65, 130, 512};
	(void)state;
	for (size_t t = 0; t < sizeof(cs) / sizeof(cs[0]); t++) {
		struct norm_case k = {.n = 19, .c = cs[t]};
		float *x = frand(k.n * k.c, -3, 3), *w = frand(k.c, 0.5f, 1.5f);
		float *dy = frand(k.n * k.c, -1, 1);
		k.x = x, k.w = w, k.dy = dy;
		free(each_path("rmsnorm", run_norm, &k,
			       (size_t)(2 * k.n * k.c + k.n + k.c) * sizeof(float)));
		free(x), free(w), free(dy);
	}
}

/* ------------------------------------------------------------ SwiGLU */

struct swiglu_case {
	int64_t n;
	const float *a, *b, *dh;
};

static void run_swiglu(const void *p, unsigned char *out)
{
	const struct swiglu_case *k = p;
	float *h = (float *)out, *da = h + k->n, *db = da + k->n;

	assert_int_equal(be.ops->swiglu_fwd(&be, h, k->a, k->b, k->n), 0);
	assert_int_equal(be.ops->swiglu_bwd(&be, da, db, k->dh, k->a, k->b, k->n), 0);
}

static void test_swiglu(void **state)
{
	static const int64_t ns[] = {1, 3, 15, 16, 17, 33, 1000, 16384 + 37};
	(void)state;
	for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++) {
		struct swiglu_case k = {.n = ns[t]};
		float *a = frand(k.n, -12, 12), *b = frand(k.n, -2, 2), *dh = frand(k.n, -1, 1);
		/* exp's range ends and signed zero */
		static const float edge[] = {-100.0f, 100.0f, 0.0f, -0.0f, -87.5f, 88.5f, 1e-30f};
		for (size_t e = 0; e < sizeof(edge) / sizeof(edge[0]) && (int64_t)e < k.n; e++)
			a[k.n - 1 - (int64_t)e] = edge[e];
		k.a = a, k.b = b, k.dh = dh;
		float *want = (float *)each_path("swiglu", run_swiglu, &k,
						 (size_t)(3 * k.n) * sizeof(float));
		/* the scalar twin: PyTorch's silu and its backward as written
		 * in elementwise.c */
		for (int64_t i = 0; i < k.n; i++) {
			const float x = a[i], y = b[i], g = dh[i];
			const float e = titan_cpu_expf(-x);
			const float h = x / (1.0f + e) * y;
			const float silu = x / (1.0f + e), sig = 1.0f / (1.0f + e);
			const float da = g * y * sig * (1.0f + x * (1.0f - sig)), db = g * silu;
			assert_memory_equal(&want[i], &h, sizeof(float));
			assert_memory_equal(&want[k.n + i], &da, sizeof(float));
			assert_memory_equal(&want[2 * k.n + i], &db, sizeof(float));
		}
		free(want);
		free(a), free(b), free(dh);
	}
}

/* ------------------------------------------------------------ RoPE */

struct rope_case {
	int64_t batch, seq, nh, hd;
	const float *x, *freqs;
};

static void run_rope(const void *p, unsigned char *out)
{
	const struct rope_case *k = p;
	const int64_t n = k->batch * k->seq * k->nh * k->hd;
	float *f = (float *)out, *b = f + n;

	memcpy(f, k->x, (size_t)n * sizeof(float));
	assert_int_equal(be.ops->rope_fwd(&be, f, k->freqs, k->batch, k->seq, k->nh, k->hd), 0);
	memcpy(b, k->x, (size_t)n * sizeof(float));
	assert_int_equal(be.ops->rope_bwd(&be, b, k->freqs, k->batch, k->seq, k->nh, k->hd), 0);
}

static void test_rope(void **state)
{
	static const int64_t hds[] = {2, 6, 14, 16, 18, 30, 32, 34, 64, 128};
	(void)state;
	for (size_t t = 0; t < sizeof(hds) / sizeof(hds[0]); t++) {
		struct rope_case k = {.batch = 2, .seq = 7, .nh = 3, .hd = hds[t]};
		const int64_t n = k.batch * k.seq * k.nh * k.hd;
		float *x = frand(n, -4, 4), *freqs = malloc((size_t)(k.seq * k.hd) * sizeof(float));
		assert_non_null(freqs);
		assert_int_equal(titan_rope_freqs(freqs, k.seq, k.hd, 500000.0, NULL), 0);
		x[0] = -0.0f;
		k.x = x, k.freqs = freqs;
		float *want = (float *)each_path("rope", run_rope, &k, (size_t)(2 * n) * sizeof(float));
		/* the scalar twin: (a + ib)(c ± is) pair by pair */
		for (int64_t r = 0; r < k.batch * k.seq; r++)
			for (int64_t h = 0; h < k.nh; h++)
				for (int64_t i = 0; i < k.hd / 2; i++) {
					const int64_t o = (r * k.nh + h) * k.hd + 2 * i;
					const float *fc = freqs + (r % k.seq) * k.hd + 2 * i;
					const float a = x[o], b = x[o + 1], c = fc[0], s = fc[1];
					const float f0 = a * c - b * s, f1 = a * s + b * c;
					const float b0 = a * c + b * s, b1 = b * c - a * s;
					assert_memory_equal(&want[o], &f0, sizeof(float));
					assert_memory_equal(&want[o + 1], &f1, sizeof(float));
					assert_memory_equal(&want[n + o], &b0, sizeof(float));
					assert_memory_equal(&want[n + o + 1], &b1, sizeof(float));
				}
		free(want);
		free(x), free(freqs);
	}
}

/* ------------------------------------------------------------ add, scale */

struct vec_case {
	int64_t n;
	const float *a, *b;
	float alpha;
};

static void run_vec(const void *p, unsigned char *out)
{
	const struct vec_case *k = p;
	float *y = (float *)out, *s = y + k->n, *inpl = s + k->n;

	assert_int_equal(be.ops->add(&be, y, k->a, k->b, k->n), 0);
	memcpy(s, k->a, (size_t)k->n * sizeof(float));
	assert_int_equal(be.ops->scale(&be, s, k->n, k->alpha), 0);
	memcpy(inpl, k->a, (size_t)k->n * sizeof(float)); /* y aliases a */
	assert_int_equal(be.ops->add(&be, inpl, inpl, k->b, k->n), 0);
}

static void test_add_scale(void **state)
{
	static const int64_t ns[] = {0, 1, 5, 16, 31, 33, 16384, 2 * 16384 + 9};
	(void)state;
	for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++) {
		struct vec_case k = {.n = ns[t], .alpha = 0.3f};
		float *a = frand(k.n, -5, 5), *b = frand(k.n, -5, 5);
		k.a = a, k.b = b;
		float *want = (float *)each_path("add/scale", run_vec, &k,
						 (size_t)(3 * k.n) * sizeof(float));
		for (int64_t i = 0; i < k.n; i++) {
			const float y = a[i] + b[i], s = a[i] * k.alpha;
			assert_memory_equal(&want[i], &y, sizeof(float));
			assert_memory_equal(&want[k.n + i], &s, sizeof(float));
			assert_memory_equal(&want[2 * k.n + i], &y, sizeof(float));
		}
		free(want);
		free(a), free(b);
	}
}

/* ------------------------------------------------------------ loss */

struct ce_case {
	int64_t n, c, v, chunk;
	const float *h, *w;
	const int32_t *labels;
};

static void run_ce(const void *p, unsigned char *out)
{
	const struct ce_case *k = p;
	double loss;
	int64_t nv;
	float *dh = (float *)(out + sizeof(double)), *dw = dh + k->n * k->c;

	memset(dw, 0, (size_t)(k->v * k->c) * sizeof(float));
	assert_int_equal(be.ops->classifier_ce(&be, &loss, &nv, dh, dw, k->h, k->w, k->labels, k->n,
					       k->c, k->v, 0.25f, k->chunk), 0);
	memcpy(out, &loss, sizeof(loss));
	/* the loss alone (no gradients) must be the same too */
	double loss2;
	assert_int_equal(be.ops->classifier_ce(&be, &loss2, &nv, NULL, NULL, k->h, k->w, k->labels,
					       k->n, k->c, k->v, 0.25f, k->chunk), 0);
	assert_memory_equal(&loss, &loss2, sizeof(double));
}

static void test_classifier_ce(void **state)
{
	static const int64_t vs[] = {1, 7, 16, 17, 37, 100};
	(void)state;
	for (size_t t = 0; t < sizeof(vs) / sizeof(vs[0]); t++) {
		struct ce_case k = {.n = 11, .c = 9, .v = vs[t], .chunk = 4};
		float *h = frand(k.n * k.c, -2, 2), *w = frand(k.v * k.c, -2, 2);
		int32_t labels[11];
		for (int64_t i = 0; i < k.n; i++)
			labels[i] = i % 5 == 3 ? -100 : (int32_t)(i * 7 % k.v);
		k.h = h, k.w = w, k.labels = labels;
		free(each_path("classifier_ce", run_ce, &k,
			       sizeof(double) + (size_t)((k.n + k.v) * k.c) * sizeof(float)));
		free(h), free(w);
	}
}

/* ------------------------------------------------------------ AdamW, sumsq */

struct adamw_case {
	int64_t n;
	const float *p, *m, *v, *g;
	struct titan_adamw_hparams hp;
};

static void run_adamw(const void *ctx, unsigned char *out)
{
	const struct adamw_case *k = ctx;
	double *ss = (double *)out;
	float *p = (float *)(out + sizeof(double)), *m = p + k->n, *v = m + k->n;

	memcpy(p, k->p, (size_t)k->n * sizeof(float));
	memcpy(m, k->m, (size_t)k->n * sizeof(float));
	memcpy(v, k->v, (size_t)k->n * sizeof(float));
	for (int64_t step = 1; step <= 3; step++)
		assert_int_equal(be.ops->adamw_step(&be, p, m, v, k->g, k->n, &k->hp, step, 0.7f), 0);
	assert_int_equal(be.ops->sumsq(&be, ss, k->g, k->n), 0);
}

static void test_adamw_sumsq(void **state)
{
	static const int64_t ns[] = {1, 9, 16, 17, 100, 2 * 16384 + 77};
	static const struct titan_adamw_hparams hps[] = {
		{.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1},
		{.lr = 1e-2, .beta1 = 0.3, .beta2 = 0.999, .eps = 1e-6, .weight_decay = 0.0},
	};
	(void)state;
	for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++)
		for (size_t h = 0; h < 2; h++) {
			struct adamw_case k = {.n = ns[t], .hp = hps[h]};
			float *p = frand(k.n, -1, 1), *m = frand(k.n, -0.1f, 0.1f);
			float *v = frand(k.n, 0, 0.01f), *g = frand(k.n, -1, 1);
			k.p = p, k.m = m, k.v = v, k.g = g;
			/* the 8-lane sum's tail and the chunk edges are in ns */
			free(each_path("adamw/sumsq", run_adamw, &k,
				       sizeof(double) + (size_t)(3 * k.n) * sizeof(float)));
			free(p), free(m), free(v), free(g);
		}
}

/* ------------------------------------------------------------ attention */

struct attn_case {
	struct titan_attn_dims d;
	const float *q, *k, *v, *dout;
};

static void run_attn(const void *ctx, unsigned char *out)
{
	const struct attn_case *a = ctx;
	const int64_t nq = a->d.batch * a->d.seq * a->d.n_heads * a->d.head_dim;
	const int64_t nk = a->d.batch * a->d.seq * a->d.n_kv_heads * a->d.head_dim;
	float *o = (float *)out, *lse = o + nq, *dq = lse + a->d.batch * a->d.n_heads * a->d.seq;
	float *dk = dq + nq, *dv = dk + nk;

	assert_int_equal(be.ops->attention_fwd(&be, o, lse, a->q, a->k, a->v, &a->d), 0);
	assert_int_equal(be.ops->attention_bwd(&be, dq, dk, dv, a->dout, a->q, a->k, a->v, o, lse,
					       &a->d), 0);
}

static void test_attention(void **state)
{
	/* head dims around the 16- and 32-wide tiles; seq across a block */
	static const int64_t hds[] = {8, 16, 24, 32, 40, 64};
	(void)state;
	for (size_t t = 0; t < sizeof(hds) / sizeof(hds[0]); t++) {
		struct attn_case a = {.d = {.batch = 2, .seq = TITAN_ATTN_BLOCK + 13, .n_heads = 4,
					    .n_kv_heads = 2, .head_dim = hds[t]}};
		const int64_t nq = a.d.batch * a.d.seq * a.d.n_heads * a.d.head_dim;
		const int64_t nk = a.d.batch * a.d.seq * a.d.n_kv_heads * a.d.head_dim;
		float *q = frand(nq, -1, 1), *k = frand(nk, -1, 1), *v = frand(nk, -1, 1);
		float *dout = frand(nq, -1, 1);
		a.q = q, a.k = k, a.v = v, a.dout = dout;
		free(each_path("attention", run_attn, &a,
			       (size_t)(2 * nq + 2 * nk + a.d.batch * a.d.n_heads * a.d.seq) *
				       sizeof(float)));
		free(q), free(k), free(v), free(dout);
	}
}

/* ------------------------------------------------------------ selection */

static void test_isa_env(void **state)
{
	const enum titan_cpu_isa best = titan_cpu_isa_best();
	(void)state;
	/* the default is the best the CPU has */
	unsetenv("TITAN_CPU_ISA");
	assert_int_equal(titan_cpu_isa_init(), 0);
	assert_int_equal(titan_cpu_isa, best);
	/* each path by name, and the backend init applies it */
	for (int isa = TITAN_CPU_ISA_BASE; isa <= (int)best; isa++) {
		struct titan_backend b2;
		setenv("TITAN_CPU_ISA", titan_cpu_isa_name((enum titan_cpu_isa)isa), 1);
		assert_int_equal(titan_backend_cpu_init(&b2, 1), 0);
		assert_int_equal(titan_cpu_isa, isa);
	}
	setenv("TITAN_CPU_ISA", "sse9", 1);
	assert_int_equal(titan_cpu_isa_init(), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "TITAN_CPU_ISA=sse9"));
	if (best < TITAN_CPU_ISA_AVX512) {
		setenv("TITAN_CPU_ISA", "avx512", 1);
		assert_int_equal(titan_cpu_isa_init(), TITAN_E_UNSUPPORTED);
		assert_int_equal(titan_cpu_isa_set(TITAN_CPU_ISA_AVX512), TITAN_E_UNSUPPORTED);
	}
	unsetenv("TITAN_CPU_ISA");
	assert_int_equal(titan_cpu_isa_init(), 0);
	print_message("CPU paths here: baseline..%s\n", titan_cpu_isa_name(best));
}

static int setup(void **state)
{
	(void)state;
	rng_state = 0x4444;
	unsetenv("TITAN_CPU_ISA");
	return titan_backend_cpu_init(&be, 2) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_isa_env),
		cmocka_unit_test(test_rmsnorm),
		cmocka_unit_test(test_swiglu),
		cmocka_unit_test(test_rope),
		cmocka_unit_test(test_add_scale),
		cmocka_unit_test(test_classifier_ce),
		cmocka_unit_test(test_adamw_sumsq),
		cmocka_unit_test(test_attention),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
