/* test_cuda_ops.c — every op of the CUDA backend (titan/ops.h on device
 * pointers, lib/cuda) against the CPU backend, its oracle, on the same fresh
 * random inputs (Philox, seeded; the seed is printed and
 * TITAN_CUDA_TEST_SEED=N repeats a run).
 *
 * Each output is compared as ‖cuda − cpu‖/‖cpu‖ (double sums):
 *  - <= 1e-5 for every fp32 path (backend created with
 *    TITAN_CUDA_MATMUL_FP32), and the GEMM-based ops (matmul_fwd/bwd,
 *    classifier_ce) also <= 5e-3 with TITAN_CUDA_MATMUL_TF32 and <= 2e-2
 *    with TITAN_CUDA_MATMUL_BF16;
 *  - bit-for-bit for the ops that are one fp32 rounding or none
 *    (embedding_fwd, scale, add, copy, zero);
 *  - no NaN or Inf anywhere in a CUDA output.
 * Device outputs are poisoned (quiet-NaN words 0x7fc00000) before every
 * CUDA op, so an element an op fails to write shows up as NaN, and every
 * device buffer is followed by GUARD poisoned words that must survive (no
 * write past the end).  Some vector cases pass pointers one float past an
 * allocation (no 16-byte alignment), as views into an arena are.
 *
 * Environment:
 *   TITAN_CUDA_TEST_LARGE=1    add model-sized cases (N = B·T = 4096, C = 2048,
 *                              F = 5632/8192, V = 32000 chunk 1024, attention
 *                              B=2 T=2048 H=32 Hkv=8 D=64): GPU machine only
 *   TITAN_CUDA_TEST_TIME=1     time each CUDA op on the large cases: median of
 *                              20 runs (host clock between two
 *                              titan_cuda_synchronize()), table printed at the end
 *   TITAN_CUDA_TEST_SEED=N     the seed (default: from the clock)
 *   TITAN_CUDA_TEST_REQUIRE=1  fail instead of skipping without a GPU (make cuda-test),
 *                              or without cuDNN (test_attention_cudnn)
 *   TITAN_CUDA_TEST_ONLY=GLOB  run only the tests whose name matches (cmocka's
 *                              filter: * and ?), e.g. 'test_attention*'
 * Without CUDA in the build, or without a driver or device, every test is
 * skipped with the reason (make check on CI). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/core.h"
#include "titan/cuda.h"
#include "titan/ops.h"

#define NMODES 3
#define TOL 1e-5                 /* fp32 paths */
#define GUARD 16                 /* poisoned words after every device buffer */
#define POISON 0x7fc00000u       /* a quiet NaN */
#define POISON_WORDS (1u << 22)  /* host buffer the poison is copied from */
#define NRUNS 20
#define WARMUP 2
#define MAX_TIMINGS 96
#define MAX_LIVE 32              /* device buffers of one case */
#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static const char *const mode_name[NMODES] = {"fp32", "tf32", "bf16"};
static const enum titan_cuda_matmul mode_enum[NMODES] = {
	TITAN_CUDA_MATMUL_FP32, TITAN_CUDA_MATMUL_TF32, TITAN_CUDA_MATMUL_BF16};
static const double mode_tol[NMODES] = {1e-5, 5e-3, 2e-2};

struct timing {
	char op[24], mode[8], shape[96];
	const char *work;  /* what flops or bytes count */
	double ms, flops, bytes;
};

static struct {
	bool gpu, require, large, time;
	char why[600];     /* skip reason */
	char broken[600];  /* set-up failure on a machine with a device */
	uint64_t seed;
	struct titan_cuda_device_info info;
	struct titan_allocator *dev;
	struct titan_backend cpu, cu[NMODES];
	bool cpu_ok, cu_ok[NMODES];
	bool dnn;          /* cuDNN's attention loads (bf16 backend) */
	char dnn_why[400]; /* why not */
	struct titan_rng rng;
	uint64_t draw;     /* next counter of rng */
	char op[24], shape[96], label[160];
	uint32_t *poison;
	void *live[MAX_LIVE];  /* device buffers whose guards are checked */
	int nlive;
	struct timing t[MAX_TIMINGS];
	int nt;
} g;

/* ------------------------------------------------------------ helpers */

static void *xmalloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	assert_non_null(p);
	return p;
}
#define FALLOC(n) ((float *)xmalloc((size_t)(n) * sizeof(float)))

static float *fdup(const float *x, size_t n)
{
	float *y = FALLOC(n);

	memcpy(y, x, n * sizeof(float));
	return y;
}

static bool env_on(const char *name)
{
	const char *e = getenv(name);

	return e && *e && strcmp(e, "0") != 0;
}

static double norm(const float *x, size_t n)
{
	double s = 0.0;

	for (size_t i = 0; i < n; i++)
		s += (double)x[i] * x[i];
	return sqrt(s);
}

/* Skips without CUDA or a device (fails with TITAN_CUDA_TEST_REQUIRE=1);
 * fails when a device is present but the backend could not be set up. */
static void need_gpu(void)
{
	g.nlive = 0; /* a failed test leaks its buffers: their guards are not ours */
	if (g.broken[0])
		fail_msg("%s", g.broken);
	if (!g.gpu) {
		if (g.require)
			fail_msg("TITAN_CUDA_TEST_REQUIRE=1 but %s", g.why);
		printf("# skip reason: %s\n", g.why);
		skip();
	}
}

static void set_label(const char *mode)
{
	snprintf(g.label, sizeof(g.label), "%s %s%s%s%s", g.op, g.shape, mode ? " [" : "",
		 mode ? mode : "", mode ? "]" : "");
}

/* Starts a case: its name (printed with every check) and its own random
 * stream, so a case draws the same inputs whatever ran before it. */
static void TITAN_PRINTF(3, 4) begin_case(const char *op, uint64_t index, const char *fmt, ...)
{
	va_list ap;

	snprintf(g.op, sizeof(g.op), "%s", op);
	va_start(ap, fmt);
	vsnprintf(g.shape, sizeof(g.shape), fmt, ap);
	va_end(ap);
	set_label(NULL);
	titan_rng_init(&g.rng, g.seed, titan_rng_stream_id(op, index));
	g.draw = 0;
}

static void fill(float *x, size_t n, float std)
{
	titan_rng_fill_normal(&g.rng, g.draw, x, n, 0.0f, std);
	g.draw += n;
}

static uint32_t draw_below(uint32_t n)
{
	float u;

	titan_rng_fill_uniform(&g.rng, g.draw++, &u, 1, 0.0f, 1.0f);
	uint32_t r = (uint32_t)((double)u * n);
	return r < n ? r : n - 1;
}

/* ------------------------------------------------------ device memory */

static void dsync(void)
{
	if (titan_cuda_synchronize() < 0)
		fail_msg("%s: titan_cuda_synchronize: %s", g.label, titan_errmsg());
}

static void dcopy(void *dst, const void *src, size_t bytes)
{
	if (titan_cuda_memcpy(dst, src, bytes) < 0)
		fail_msg("%s: titan_cuda_memcpy of %zu bytes: %s", g.label, bytes, titan_errmsg());
}

/* The ops run on the backend's own (non-blocking) stream and
 * titan_cuda_memcpy on the default one: every transfer and every op is
 * fenced with titan_cuda_synchronize(). */
static void dset(void *d, const void *h, size_t bytes)
{
	dsync();
	dcopy(d, h, bytes);
	dsync();
}

static void dget(void *h, const void *d, size_t bytes)
{
	dsync();
	dcopy(h, d, bytes);
}

static void dpoison(void *d, size_t bytes)
{
	const size_t chunk = POISON_WORDS * sizeof(uint32_t);

	dsync();
	for (size_t o = 0; o < bytes; o += chunk)
		dcopy((char *)d + o, g.poison, bytes - o < chunk ? bytes - o : chunk);
	dsync();
}

/* A poisoned device buffer of `bytes` (+ the guard), registered so that
 * every CUDA op is followed by a check of all guards. */
static void *dnew(size_t bytes)
{
	void *d = titan_mem_alloc(g.dev, bytes + GUARD * sizeof(uint32_t), TITAN_MEM_OTHER);

	if (!d)
		fail_msg("%s: device allocation of %zu bytes: %s", g.label, bytes, titan_errmsg());
	dpoison(d, bytes + GUARD * sizeof(uint32_t));
	assert_true(g.nlive < MAX_LIVE);
	g.live[g.nlive++] = d;
	return d;
}

static void *dput(const void *h, size_t bytes)
{
	void *d = dnew(bytes);

	dset(d, h, bytes);
	return d;
}

/* Fails when `after` (an op) wrote into the guard of a live buffer. */
static void check_guards(const char *after)
{
	uint32_t guard[GUARD];

	for (int b = 0; b < g.nlive; b++) {
		const int64_t size = titan_mem_size(g.dev, g.live[b], NULL);

		assert_true(size >= (int64_t)sizeof(guard));
		dget(guard, (char *)g.live[b] + size - (int64_t)sizeof(guard), sizeof(guard));
		for (int i = 0; i < GUARD; i++)
			if (guard[i] != POISON)
				fail_msg("%s: %s wrote past the end of a %lld-byte buffer (guard "
					 "word %d is 0x%08x)", g.label, after,
					 (long long)(size - (int64_t)sizeof(guard)), i, guard[i]);
	}
}

static void dfree(void *d)
{
	if (!d)
		return;
	for (int b = 0; b < g.nlive; b++)
		if (g.live[b] == d) {
			g.live[b] = g.live[--g.nlive];
			break;
		}
	titan_mem_free(g.dev, d);
}

/* --------------------------------------------------------------- checks */

/* ‖got − want‖ / max(‖want‖, floor) <= tol, every got finite.  floor is for
 * outputs whose exact value is 0 (rounding noise on both sides): the norm
 * of a tensor of the same scale.  want == 0 with floor 0: got must be 0. */
static void check_(const char *what, const float *got, const float *want, size_t n,
		   double tol, double floor, int line)
{
	double num = 0.0, den = 0.0, worst = -1.0;
	size_t wi = 0;

	for (size_t i = 0; i < n; i++) {
		if (!isfinite(got[i]))
			fail_msg("line %d: %s: %s[%zu] = %g is not finite (cpu %.9g)", line,
				 g.label, what, i, (double)got[i], (double)want[i]);
		if (!isfinite(want[i]))
			fail_msg("line %d: %s: the cpu oracle's %s[%zu] = %g is not finite", line,
				 g.label, what, i, (double)want[i]);
		const double d = (double)got[i] - (double)want[i];
		num += d * d;
		den += (double)want[i] * want[i];
		if (fabs(d) > worst) {
			worst = fabs(d);
			wi = i;
		}
	}
	const double ref = fmax(sqrt(den), floor);
	const double rel = ref > 0.0 ? sqrt(num) / ref : (num > 0.0 ? INFINITY : 0.0);
	printf("# %s %s: rel %.2e (tol %.0e)\n", g.label, what, rel, tol);
	if (!(rel <= tol))
		fail_msg("line %d: %s %s: |cuda - cpu|/|cpu| = %.3e > %.0e (n %zu; worst [%zu]: "
			 "cuda %.9g, cpu %.9g)", line, g.label, what, rel, tol, n, wi,
			 (double)got[wi], (double)want[wi]);
}
#define check(what, got, want, n, tol) check_(what, got, want, n, tol, 0.0, __LINE__)
#define check_floor(what, got, want, n, tol, floor) \
	check_(what, got, want, n, tol, floor, __LINE__)

/* Bit-for-bit (ops that are a copy or one fp32 rounding). */
static void check_exact_(const char *what, const float *got, const float *want, size_t n,
			 int line)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t a, b;

		memcpy(&a, &got[i], sizeof(a));
		memcpy(&b, &want[i], sizeof(b));
		if (a != b)
			fail_msg("line %d: %s %s[%zu] = %.9g (0x%08x), cpu %.9g (0x%08x): must be "
				 "bit-identical", line, g.label, what, i, (double)got[i], a,
				 (double)want[i], b);
	}
	printf("# %s %s: bit-identical\n", g.label, what);
}
#define check_exact(what, got, want, n) check_exact_(what, got, want, n, __LINE__)

static void check_scalar_(const char *what, double got, double want, double tol, int line)
{
	if (!isfinite(got))
		fail_msg("line %d: %s %s = %g is not finite (cpu %.17g)", line, g.label, what, got,
			 want);
	const double rel = want != 0.0 ? fabs(got - want) / fabs(want) : fabs(got);
	printf("# %s %s: %.17g vs cpu %.17g, rel %.2e (tol %.0e)\n", g.label, what, got, want,
	       rel, tol);
	if (!(rel <= tol))
		fail_msg("line %d: %s %s: cuda %.17g, cpu %.17g: rel %.3e > %.0e", line, g.label,
			 what, got, want, rel, tol);
}
#define check_scalar(what, got, want, tol) check_scalar_(what, got, want, tol, __LINE__)

/* Runs an op of the CPU or the CUDA backend; any error fails the test. */
#define CPU(call)                                                                                \
	do {                                                                                     \
		int op_rc_ = (call);                                                             \
		if (op_rc_ != 0)                                                                 \
			fail_msg("%s: cpu %s = %d: %s", g.label, #call, op_rc_, titan_errmsg()); \
	} while (0)
#define CU(call)                                                                                  \
	do {                                                                                      \
		dsync();                                                                          \
		int op_rc_ = (call);                                                              \
		if (op_rc_ != 0)                                                                  \
			fail_msg("%s: cuda %s = %d: %s", g.label, #call, op_rc_, titan_errmsg()); \
		dsync();                                                                          \
		check_guards(#call);                                                              \
	} while (0)

/* --------------------------------------------------------------- timing */

static int cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void record(const char *op, const char *mode, double *ms, double flops, double bytes,
		   const char *work)
{
	struct timing *t;

	qsort(ms, NRUNS, sizeof(double), cmp_double);
	if (g.nt == MAX_TIMINGS)
		return;
	t = &g.t[g.nt++];
	snprintf(t->op, sizeof(t->op), "%s", op);
	snprintf(t->mode, sizeof(t->mode), "%s", mode);
	snprintf(t->shape, sizeof(t->shape), "%s", g.shape);
	t->work = work;
	t->ms = (ms[NRUNS / 2 - 1] + ms[NRUNS / 2]) / 2.0;
	t->flops = flops;
	t->bytes = bytes;
}

/* With TITAN_CUDA_TEST_TIME=1: WARMUP + NRUNS runs of `call`, each timed on
 * the host clock from one titan_cuda_synchronize() to the next. */
#define TIME_OP(name, mode, flops, bytes, work, call)                                       \
	do {                                                                                \
		double time_ms_[NRUNS];                                                     \
		if (!g.time)                                                                \
			break;                                                              \
		for (int time_run_ = -WARMUP; time_run_ < NRUNS; time_run_++) {             \
			dsync();                                                            \
			const uint64_t time_t0_ = titan_time_ns();                          \
			int op_rc_ = (call);                                                \
			dsync();                                                            \
			const uint64_t time_t1_ = titan_time_ns();                          \
			if (op_rc_ != 0)                                                    \
				fail_msg("%s: timing %s = %d: %s", g.label, #call, op_rc_,  \
					 titan_errmsg());                                   \
			if (time_run_ >= 0)                                                 \
				time_ms_[time_run_] = (double)(time_t1_ - time_t0_) * 1e-6; \
		}                                                                           \
		record(name, mode, time_ms_, flops, bytes, work);                           \
	} while (0)

static void print_timings(void)
{
	if (!g.time || !g.gpu)
		return;
	if (g.nt == 0) {
		printf("# timings: none (TITAN_CUDA_TEST_TIME=1 times the large cases: set "
		       "TITAN_CUDA_TEST_LARGE=1 too)\n");
		return;
	}
	printf("#\n# CUDA op timings on %s (cc %d.%d, %d SMs): median of %d runs after %d "
	       "warm-up runs,\n# host clock from one titan_cuda_synchronize() to the next "
	       "(launch and sync overhead included)\n", g.info.name, g.info.cc_major,
	       g.info.cc_minor, g.info.sm_count, NRUNS, WARMUP);
	printf("# %-15s %-4s %-34s %9s %-17s %s\n", "op", "mode", "shape", "median ms",
	       " achieved", "work counted");
	for (int i = 0; i < g.nt; i++) {
		const struct timing *t = &g.t[i];
		const double s = t->ms * 1e-3;
		const bool fl = t->flops > 0.0;

		printf("# %-15s %-4s %-34s %9.3f %9.2f %-7s %s\n", t->op, t->mode, t->shape,
		       t->ms, fl ? t->flops / s * 1e-12 : t->bytes / s * 1e-9,
		       fl ? "TFLOP/s" : "GB/s", t->work);
	}
	fflush(stdout);
}

/* --------------------------------------------------------------- matmul */

struct mm_case {
	int64_t n, in, out;
	bool large;
};

static const struct mm_case mm_cases[] = {
	{1, 16, 8, false},       {37, 48, 70, false},     {64, 64, 64, false},
	{130, 256, 688, false},  {257, 100, 33, false},   {300, 1000, 129, false},
	{4096, 2048, 5632, true}, {4096, 5632, 2048, true}, {4096, 2048, 8192, true},
};

/* y = x·W^T (overwrite, accumulate); dx (overwrite, accumulate) and dW
 * (accumulate) together and alone; in the three compute modes. */
static void test_matmul(void **state)
{
	(void)state;
	need_gpu();
	for (size_t ci = 0; ci < LEN(mm_cases); ci++) {
		const struct mm_case *k = &mm_cases[ci];
		const int64_t n = k->n, in = k->in, out = k->out;
		const size_t nx = (size_t)(n * in), nw = (size_t)(out * in), ny = (size_t)(n * out);

		if (k->large && !g.large)
			continue;
		begin_case("matmul", ci, "N=%lld in=%lld out=%lld", (long long)n, (long long)in,
			   (long long)out);
		float *x = FALLOC(nx), *w = FALLOC(nw), *y0 = FALLOC(ny), *dy = FALLOC(ny);
		float *dx0 = FALLOC(nx), *dw0 = FALLOC(nw);
		fill(x, nx, 1.0f);
		fill(w, nw, 1.0f / sqrtf((float)in));
		fill(y0, ny, 1.0f);
		fill(dy, ny, 1.0f);
		fill(dx0, nx, 1.0f);
		fill(dw0, nw, sqrtf((float)n));

		/* the oracle */
		float *y = FALLOC(ny), *yacc = fdup(y0, ny), *dx = FALLOC(nx), *dw = fdup(dw0, nw);
		float *dxacc = fdup(dx0, nx);
		const struct titan_backend_ops *c = g.cpu.ops;
		CPU(c->matmul_fwd(&g.cpu, y, x, w, n, in, out, false));
		CPU(c->matmul_fwd(&g.cpu, yacc, x, w, n, in, out, true));
		CPU(c->matmul_bwd(&g.cpu, dx, dw, dy, x, w, n, in, out, false));
		CPU(c->matmul_bwd(&g.cpu, dxacc, NULL, dy, x, w, n, in, out, true));

		float *x_ = dput(x, nx * 4), *w_ = dput(w, nw * 4), *dy_ = dput(dy, ny * 4);
		float *y_ = dnew(ny * 4), *dx_ = dnew(nx * 4), *dw_ = dnew(nw * 4);
		float *got = FALLOC(nx > ny ? (nx > nw ? nx : nw) : (ny > nw ? ny : nw));
		float *got2 = FALLOC(nw);
		for (int m = 0; m < NMODES; m++) {
			struct titan_backend *be = &g.cu[m];
			const double tol = mode_tol[m];

			set_label(mode_name[m]);
			dpoison(y_, ny * 4);
			CU(be->ops->matmul_fwd(be, y_, x_, w_, n, in, out, false));
			dget(got, y_, ny * 4);
			check("y", got, y, ny, tol);

			dset(y_, y0, ny * 4);
			CU(be->ops->matmul_fwd(be, y_, x_, w_, n, in, out, true));
			dget(got, y_, ny * 4);
			check("y+= (accumulate)", got, yacc, ny, tol);

			dpoison(dx_, nx * 4);
			dset(dw_, dw0, nw * 4);
			CU(be->ops->matmul_bwd(be, dx_, dw_, dy_, x_, w_, n, in, out, false));
			dget(got, dx_, nx * 4);
			dget(got2, dw_, nw * 4);
			check("dx", got, dx, nx, tol);
			check("dw+=", got2, dw, nw, tol);

			dset(dx_, dx0, nx * 4);
			CU(be->ops->matmul_bwd(be, dx_, NULL, dy_, x_, w_, n, in, out, true));
			dget(got, dx_, nx * 4);
			check("dx+= (accumulate_dx, dw NULL)", got, dxacc, nx, tol);

			dset(dw_, dw0, nw * 4);
			CU(be->ops->matmul_bwd(be, NULL, dw_, dy_, x_, w_, n, in, out, false));
			dget(got2, dw_, nw * 4);
			check("dw+= (dx NULL)", got2, dw, nw, tol);

			if (k->large) {
				const double f = 2.0 * (double)n * (double)in * (double)out;

				TIME_OP("matmul_fwd", mode_name[m], f, 0.0, "2·N·in·out FLOP",
					be->ops->matmul_fwd(be, y_, x_, w_, n, in, out, false));
				TIME_OP("matmul_bwd", mode_name[m], 2.0 * f, 0.0,
					"4·N·in·out FLOP (dx and dW)",
					be->ops->matmul_bwd(be, dx_, dw_, dy_, x_, w_, n, in, out,
							    false));
			}
		}
		dfree(x_), dfree(w_), dfree(dy_), dfree(y_), dfree(dx_), dfree(dw_);
		free(x), free(w), free(y0), free(dy), free(dx0), free(dw0), free(y), free(yacc);
		free(dx), free(dw), free(dxacc), free(got), free(got2);
	}
}

/* ------------------------------------------------------------ embedding */

struct emb_case {
	int64_t n, v, c;
	bool large;
};

static const struct emb_case emb_cases[] = {
	{1, 5, 16, false},    {37, 11, 48, false},  {130, 1000, 256, false},
	{257, 3, 100, false}, {1000, 64, 129, false}, {4096, 32000, 2048, true},
};

/* Forward is a gather (bit-identical); backward adds repeated ids (every
 * fifth token repeats the first id, and small V repeats everywhere). */
static void test_embedding(void **state)
{
	(void)state;
	need_gpu();
	for (size_t ci = 0; ci < LEN(emb_cases); ci++) {
		const struct emb_case *k = &emb_cases[ci];
		const int64_t n = k->n, v = k->v, c = k->c;
		const size_t no = (size_t)(n * c), nt = (size_t)(v * c);

		if (k->large && !g.large)
			continue;
		begin_case("embedding", ci, "N=%lld V=%lld C=%lld", (long long)n, (long long)v,
			   (long long)c);
		uint32_t *ids = xmalloc((size_t)n * sizeof(uint32_t));
		for (int64_t i = 0; i < n; i++)
			ids[i] = i % 5 == 4 ? ids[0] : draw_below((uint32_t)v);
		float *tab = FALLOC(nt), *dout = FALLOC(no), *dtab0 = FALLOC(nt);
		fill(tab, nt, 1.0f);
		fill(dout, no, 1.0f);
		fill(dtab0, nt, 1.0f);
		float *out = FALLOC(no), *dtab = fdup(dtab0, nt);
		CPU(g.cpu.ops->embedding_fwd(&g.cpu, out, ids, tab, n, v, c));
		CPU(g.cpu.ops->embedding_bwd(&g.cpu, dtab, ids, dout, n, v, c));

		struct titan_backend *be = &g.cu[0];
		uint32_t *ids_ = dput(ids, (size_t)n * sizeof(uint32_t));
		float *tab_ = dput(tab, nt * 4), *dout_ = dput(dout, no * 4);
		float *out_ = dnew(no * 4), *dtab_ = dnew(nt * 4);
		float *got = FALLOC(no > nt ? no : nt);
		CU(be->ops->embedding_fwd(be, out_, ids_, tab_, n, v, c));
		dget(got, out_, no * 4);
		check_exact("out", got, out, no);
		dset(dtab_, dtab0, nt * 4);
		CU(be->ops->embedding_bwd(be, dtab_, ids_, dout_, n, v, c));
		dget(got, dtab_, nt * 4);
		check("dtable+=", got, dtab, nt, TOL);
		if (k->large) {
			const double b = (double)n * (double)c * 4.0;

			TIME_OP("embedding_fwd", "fp32", 0.0, 2.0 * b + (double)n * 4.0,
				"(2·N·C + N)·4 B",
				be->ops->embedding_fwd(be, out_, ids_, tab_, n, v, c));
			TIME_OP("embedding_bwd", "fp32", 0.0, 3.0 * b + (double)n * 4.0,
				"(3·N·C + N)·4 B (dout; dtable row read+write)",
				be->ops->embedding_bwd(be, dtab_, ids_, dout_, n, v, c));
		}
		dfree(ids_), dfree(tab_), dfree(dout_), dfree(out_), dfree(dtab_);
		free(ids), free(tab), free(dout), free(dtab0), free(out), free(dtab), free(got);
	}
}

/* -------------------------------------------------------------- rmsnorm */

struct norm_case {
	int64_t n, c;
	bool large;
};

static const struct norm_case norm_cases[] = {
	{1, 16, false},  {37, 48, false}, {130, 256, false}, {64, 1000, false},
	{7, 4096, false}, {33, 257, false}, {4096, 2048, true},
};

/* Forward (also y over x); backward with dw, with dw NULL and
 * accumulate_dx, and dx over dy. */
static void test_rmsnorm(void **state)
{
	(void)state;
	need_gpu();
	for (size_t ci = 0; ci < LEN(norm_cases); ci++) {
		const struct norm_case *k = &norm_cases[ci];
		const int64_t n = k->n, c = k->c;
		const size_t nx = (size_t)(n * c);
		const float eps = 1e-5f;

		if (k->large && !g.large)
			continue;
		begin_case("rmsnorm", ci, "N=%lld C=%lld", (long long)n, (long long)c);
		float *x = FALLOC(nx), *w = FALLOC(c), *dy = FALLOC(nx), *dx0 = FALLOC(nx);
		float *dw0 = FALLOC(c);
		fill(x, nx, 2.0f);
		fill(w, (size_t)c, 0.3f);
		for (int64_t j = 0; j < c; j++)
			w[j] += 1.0f;
		fill(dy, nx, 1.0f);
		fill(dx0, nx, 1.0f);
		fill(dw0, (size_t)c, 1.0f);
		float *y = FALLOC(nx), *rstd = FALLOC(n), *dx = FALLOC(nx), *dw = fdup(dw0, (size_t)c);
		float *dxacc = fdup(dx0, nx);
		const struct titan_backend_ops *o = g.cpu.ops;
		CPU(o->rmsnorm_fwd(&g.cpu, y, rstd, x, w, n, c, eps));
		CPU(o->rmsnorm_bwd(&g.cpu, dx, dw, dy, x, w, rstd, n, c, false));
		CPU(o->rmsnorm_bwd(&g.cpu, dxacc, NULL, dy, x, w, rstd, n, c, true));

		struct titan_backend *be = &g.cu[0];
		float *x_ = dput(x, nx * 4), *w_ = dput(w, (size_t)c * 4), *dy_ = dput(dy, nx * 4);
		float *rs_ = dput(rstd, (size_t)n * 4); /* backward reads the oracle's rstd */
		float *y_ = dnew(nx * 4), *r_ = dnew((size_t)n * 4), *t_ = dnew(nx * 4);
		float *dw_ = dnew((size_t)c * 4);
		float *got = FALLOC(nx), *gotr = FALLOC(n > c ? n : c);

		CU(be->ops->rmsnorm_fwd(be, y_, r_, x_, w_, n, c, eps));
		dget(got, y_, nx * 4);
		dget(gotr, r_, (size_t)n * 4);
		check("y", got, y, nx, TOL);
		check("rstd", gotr, rstd, (size_t)n, TOL);

		dset(t_, x, nx * 4); /* y over x */
		dpoison(r_, (size_t)n * 4);
		CU(be->ops->rmsnorm_fwd(be, t_, r_, t_, w_, n, c, eps));
		dget(got, t_, nx * 4);
		dget(gotr, r_, (size_t)n * 4);
		check("y (aliasing x)", got, y, nx, TOL);
		check("rstd (y aliasing x)", gotr, rstd, (size_t)n, TOL);

		dpoison(y_, nx * 4);
		dset(dw_, dw0, (size_t)c * 4);
		CU(be->ops->rmsnorm_bwd(be, y_, dw_, dy_, x_, w_, rs_, n, c, false));
		dget(got, y_, nx * 4);
		dget(gotr, dw_, (size_t)c * 4);
		check("dx", got, dx, nx, TOL);
		check("dw+=", gotr, dw, (size_t)c, TOL);

		dset(y_, dx0, nx * 4);
		CU(be->ops->rmsnorm_bwd(be, y_, NULL, dy_, x_, w_, rs_, n, c, true));
		dget(got, y_, nx * 4);
		check("dx+= (accumulate_dx, dw NULL)", got, dxacc, nx, TOL);

		dset(t_, dy, nx * 4); /* dx over dy */
		CU(be->ops->rmsnorm_bwd(be, t_, NULL, t_, x_, w_, rs_, n, c, false));
		dget(got, t_, nx * 4);
		check("dx (aliasing dy)", got, dx, nx, TOL);

		if (k->large) {
			const double b = (double)nx * 4.0, s = (double)c * 4.0, r = (double)n * 4.0;

			TIME_OP("rmsnorm_fwd", "fp32", 0.0, 2.0 * b + s + r, "(2·N·C + C + N)·4 B",
				be->ops->rmsnorm_fwd(be, y_, r_, x_, w_, n, c, eps));
			TIME_OP("rmsnorm_bwd", "fp32", 0.0, 3.0 * b + 2.0 * s + r,
				"(3·N·C + 2·C + N)·4 B",
				be->ops->rmsnorm_bwd(be, t_, dw_, dy_, x_, w_, rs_, n, c, false));
		}
		dfree(x_), dfree(w_), dfree(dy_), dfree(rs_), dfree(y_), dfree(r_), dfree(t_);
		dfree(dw_);
		free(x), free(w), free(dy), free(dx0), free(dw0), free(y), free(rstd), free(dx);
		free(dw), free(dxacc), free(got), free(gotr);
	}
}

/* ----------------------------------------------------------------- rope */

struct rope_case {
	int64_t b, t, nh, d;
	bool large;
};

static const struct rope_case rope_cases[] = {
	{1, 1, 4, 16, false},    {2, 37, 4, 32, false},   {1, 130, 2, 64, false},
	{2, 64, 8, 128, false},  {3, 256, 1, 16, false},
	{2, 2048, 32, 64, true}, {2, 2048, 8, 64, true},
};

/* In place on q/k-shaped tensors; Llama 3.1 scaled table with more rows
 * than T (only the first T are read). */
static void test_rope(void **state)
{
	(void)state;
	need_gpu();
	const struct titan_rope_scaling sc = {8.0, 1.0, 4.0, 8192.0};
	for (size_t ci = 0; ci < LEN(rope_cases); ci++) {
		const struct rope_case *k = &rope_cases[ci];
		const size_t n = (size_t)(k->b * k->t * k->nh * k->d);
		const size_t ntab = (size_t)((k->t + 3) * k->d);

		if (k->large && !g.large)
			continue;
		begin_case("rope", ci, "B=%lld T=%lld nh=%lld D=%lld", (long long)k->b,
			   (long long)k->t, (long long)k->nh, (long long)k->d);
		float *tab = FALLOC(ntab), *x = FALLOC(n), *dy = FALLOC(n);
		assert_int_equal(titan_rope_freqs(tab, k->t + 3, k->d, 500000.0, &sc), 0);
		fill(x, n, 1.0f);
		fill(dy, n, 1.0f);
		float *y = fdup(x, n), *dx = fdup(dy, n);
		CPU(g.cpu.ops->rope_fwd(&g.cpu, y, tab, k->b, k->t, k->nh, k->d));
		CPU(g.cpu.ops->rope_bwd(&g.cpu, dx, tab, k->b, k->t, k->nh, k->d));

		struct titan_backend *be = &g.cu[0];
		float *tab_ = dput(tab, ntab * 4), *x_ = dput(x, n * 4), *got = FALLOC(n);
		CU(be->ops->rope_fwd(be, x_, tab_, k->b, k->t, k->nh, k->d));
		dget(got, x_, n * 4);
		check("x (fwd, in place)", got, y, n, TOL);
		dset(x_, dy, n * 4);
		CU(be->ops->rope_bwd(be, x_, tab_, k->b, k->t, k->nh, k->d));
		dget(got, x_, n * 4);
		check("dx (bwd, in place)", got, dx, n, TOL);
		if (k->large) {
			const double b = 2.0 * (double)n * 4.0 + (double)(k->t * k->d) * 4.0;

			TIME_OP("rope_fwd", "fp32", 0.0, b, "(2·B·T·nh·D + T·D)·4 B",
				be->ops->rope_fwd(be, x_, tab_, k->b, k->t, k->nh, k->d));
			TIME_OP("rope_bwd", "fp32", 0.0, b, "(2·B·T·nh·D + T·D)·4 B",
				be->ops->rope_bwd(be, x_, tab_, k->b, k->t, k->nh, k->d));
		}
		dfree(tab_), dfree(x_);
		free(tab), free(x), free(dy), free(y), free(dx), free(got);
	}
}

/* --------------------------------------------------------------- swiglu */

struct vec_case {
	int64_t n, off; /* off: the pointers are this many floats past the allocation */
	bool large;
};

static const struct vec_case swiglu_cases[] = {
	{1, 0, false},     {2, 1, false},     {37, 1, false},           {1000, 0, false},
	{130 * 688 + 1, 1, false}, {65536, 0, false}, {4096 * 5632, 0, true},
	{4096 * 8192, 0, true},
};

/* Forward (also h over a, h over b) and backward (also da over a and db
 * over b), with exp's extremes (a = ±90) in the input. */
static void test_swiglu(void **state)
{
	(void)state;
	need_gpu();
	for (size_t ci = 0; ci < LEN(swiglu_cases); ci++) {
		const struct vec_case *k = &swiglu_cases[ci];
		const int64_t n = k->n, off = k->off;
		const size_t nb = (size_t)(n + off) * 4, nn = (size_t)n * 4;

		if (k->large && !g.large)
			continue;
		begin_case("swiglu", ci, "n=%lld%s", (long long)n, off ? " unaligned" : "");
		float *a = FALLOC(n), *b = FALLOC(n), *dh = FALLOC(n);
		fill(a, (size_t)n, 3.0f);
		fill(b, (size_t)n, 1.0f);
		fill(dh, (size_t)n, 1.0f);
		a[0] = -90.0f;
		if (n > 1)
			a[1] = 90.0f;
		float *h = FALLOC(n), *da = FALLOC(n), *db = FALLOC(n);
		CPU(g.cpu.ops->swiglu_fwd(&g.cpu, h, a, b, n));
		CPU(g.cpu.ops->swiglu_bwd(&g.cpu, da, db, dh, a, b, n));

		struct titan_backend *be = &g.cu[0];
		float *ab = dnew(nb), *bb = dnew(nb), *dhb = dnew(nb), *hb = dnew(nb);
		float *tab = dnew(nb), *tbb = dnew(nb);
		float *a_ = ab + off, *b_ = bb + off, *dh_ = dhb + off, *h_ = hb + off;
		float *ta_ = tab + off, *tb_ = tbb + off;
		float *got = FALLOC(n);
		dset(a_, a, nn);
		dset(b_, b, nn);
		dset(dh_, dh, nn);

		CU(be->ops->swiglu_fwd(be, h_, a_, b_, n));
		dget(got, h_, nn);
		check("h", got, h, (size_t)n, TOL);
		dset(ta_, a, nn);
		CU(be->ops->swiglu_fwd(be, ta_, ta_, b_, n));
		dget(got, ta_, nn);
		check("h (aliasing a)", got, h, (size_t)n, TOL);
		dset(ta_, b, nn);
		CU(be->ops->swiglu_fwd(be, ta_, a_, ta_, n));
		dget(got, ta_, nn);
		check("h (aliasing b)", got, h, (size_t)n, TOL);

		dpoison(ta_, nn);
		dpoison(tb_, nn);
		CU(be->ops->swiglu_bwd(be, ta_, tb_, dh_, a_, b_, n));
		dget(got, ta_, nn);
		check("da", got, da, (size_t)n, TOL);
		dget(got, tb_, nn);
		check("db", got, db, (size_t)n, TOL);
		dset(ta_, a, nn);
		dset(tb_, b, nn);
		CU(be->ops->swiglu_bwd(be, ta_, tb_, dh_, ta_, tb_, n));
		dget(got, ta_, nn);
		check("da (aliasing a)", got, da, (size_t)n, TOL);
		dget(got, tb_, nn);
		check("db (aliasing b)", got, db, (size_t)n, TOL);

		if (k->large) {
			TIME_OP("swiglu_fwd", "fp32", 0.0, 3.0 * (double)nn, "3·n·4 B",
				be->ops->swiglu_fwd(be, h_, a_, b_, n));
			TIME_OP("swiglu_bwd", "fp32", 0.0, 5.0 * (double)nn, "5·n·4 B",
				be->ops->swiglu_bwd(be, ta_, tb_, dh_, a_, b_, n));
		}
		dfree(ab), dfree(bb), dfree(dhb), dfree(hb), dfree(tab), dfree(tbb);
		free(a), free(b), free(dh), free(h), free(da), free(db), free(got);
	}
}

/* ------------------------------------------------------------ attention */

/* A pass of attention_case: matmul mode m with attention `attn` (the
 * bf16 backend's titan kernels or cuDNN's), labelled `name`. */
struct attn_pass {
	int m;
	enum titan_cuda_attn attn;
	const char *name;
};

/* titan's kernels: fp32 (the kernels tf32 runs too), then bf16 (tensor
 * cores at D 33..128) */
static const struct attn_pass titan_passes[] = {{0, TITAN_CUDA_ATTN_TITAN, "fp32"},
						{2, TITAN_CUDA_ATTN_TITAN, "bf16"}};
/* cuDNN's flash attention (bf16 mode) with its deterministic backward and
 * with its default one (cudnn-fast: dQ accumulated with atomics), then,
 * timed next to them in the large cases, titan's bf16 kernels on the same
 * inputs */
static const struct attn_pass cudnn_passes[] = {{2, TITAN_CUDA_ATTN_CUDNN, "cudnn"},
						{2, TITAN_CUDA_ATTN_CUDNN_FAST, "cudnnF"},
						{2, TITAN_CUDA_ATTN_TITAN, "bf16"}};

/* With the cudnn passes, cuDNN must have run both directions (not fallen
 * back to titan's kernel) when `must_run`, else a fallback is reported. */
static void attention_case_(const struct titan_attn_dims *d, uint64_t index, bool large,
			    bool cudnn, bool must_run)
{
	const struct attn_pass *passes = cudnn ? cudnn_passes : titan_passes;
	const size_t npasses = !cudnn ? LEN(titan_passes) : large ? LEN(cudnn_passes) : 2;
	const size_t nq = (size_t)(d->batch * d->seq * d->n_heads * d->head_dim);
	const size_t nk = (size_t)(d->batch * d->seq * d->n_kv_heads * d->head_dim);
	const size_t nl = (size_t)(d->batch * d->n_heads * d->seq);

	begin_case("attention", index, "B=%lld T=%lld H=%lld Hkv=%lld D=%lld%s",
		   (long long)d->batch, (long long)d->seq, (long long)d->n_heads,
		   (long long)d->n_kv_heads, (long long)d->head_dim, d->doc ? " docs" : "");
	float *q = FALLOC(nq), *k = FALLOC(nk), *v = FALLOC(nk), *dout = FALLOC(nq);
	fill(q, nq, 1.0f);
	fill(k, nk, 1.0f);
	fill(v, nk, 1.0f);
	fill(dout, nq, 1.0f);
	float *out = FALLOC(nq), *lse = FALLOC(nl), *dq = FALLOC(nq), *dk = FALLOC(nk);
	float *dv = FALLOC(nk);
	CPU(g.cpu.ops->attention_fwd(&g.cpu, out, lse, q, k, v, d));
	CPU(g.cpu.ops->attention_bwd(&g.cpu, dq, dk, dv, dout, q, k, v, out, lse, d));

	float *q_ = dput(q, nq * 4), *k_ = dput(k, nk * 4), *v_ = dput(v, nk * 4);
	float *dout_ = dput(dout, nq * 4), *out_ = dnew(nq * 4), *lse_ = dnew(nl * 4);
	float *outc_ = dput(out, nq * 4), *lsec_ = dput(lse, nl * 4); /* the oracle's */
	float *dq_ = dnew(nq * 4), *dk_ = dnew(nk * 4), *dv_ = dnew(nk * 4);
	float *got = FALLOC(nq > nl ? nq : nl);

	for (size_t pi = 0; pi < npasses; pi++) {
		const int m = passes[pi].m;
		struct titan_backend *be = &g.cu[m];
		const double tol = m == 0 ? TOL : mode_tol[m];
		struct titan_cuda_attn_info before, after;

		set_label(m == 0 ? NULL : passes[pi].name);
		if (titan_cuda_set_attention(be, passes[pi].attn) < 0 ||
		    titan_cuda_attention_info(be, &before) < 0)
			fail_msg("%s: %s", g.label, titan_errmsg());
		if (m > 0) {
			dpoison(out_, nq * 4), dpoison(lse_, nl * 4), dpoison(dq_, nq * 4);
			dpoison(dk_, nk * 4), dpoison(dv_, nk * 4);
		}
		CU(be->ops->attention_fwd(be, out_, lse_, q_, k_, v_, d));
		dget(got, out_, nq * 4);
		check("out", got, out, nq, tol);
		dget(got, lse_, nl * 4);
		check("lse", got, lse, nl, tol);

		/* backward from the oracle's out and lse */
		CU(be->ops->attention_bwd(be, dq_, dk_, dv_, dout_, q_, k_, v_, outc_, lsec_,
					  d));
		/* T = 1: one key per query, softmax gradient 0, so dq and dk are
		 * rounding noise on both sides: measured against |dout| and |dv| */
		const bool t1 = d->seq == 1;
		dget(got, dq_, nq * 4);
		check_floor("dq", got, dq, nq, tol, t1 ? norm(dout, nq) : 0.0);
		dget(got, dk_, nk * 4);
		check_floor("dk", got, dk, nk, tol, t1 ? norm(dv, nk) : 0.0);
		dget(got, dv_, nk * 4);
		check("dv", got, dv, nk, tol);
		if (passes[pi].attn == TITAN_CUDA_ATTN_CUDNN) {
			/* the deterministic backward: a second run, the same bits */
			float *g1 = FALLOC(nq + 2 * nk), *g2 = FALLOC(nq + 2 * nk);

			dget(g1, dq_, nq * 4), dget(g1 + nq, dk_, nk * 4);
			dget(g1 + nq + nk, dv_, nk * 4);
			CU(be->ops->attention_bwd(be, dq_, dk_, dv_, dout_, q_, k_, v_, outc_,
						  lsec_, d));
			dget(g2, dq_, nq * 4), dget(g2 + nq, dk_, nk * 4);
			dget(g2 + nq + nk, dv_, nk * 4);
			if (memcmp(g1, g2, (nq + 2 * nk) * 4) != 0)
				fail_msg("%s: two runs of the deterministic backward differ",
					 g.label);
			free(g1), free(g2);
		}
		if (passes[pi].attn != TITAN_CUDA_ATTN_TITAN) {
			if (titan_cuda_attention_info(be, &after) < 0)
				fail_msg("%s: %s", g.label, titan_errmsg());
			if (after.fwd_calls == before.fwd_calls ||
			    after.bwd_calls == before.bwd_calls) {
				if (must_run)
					fail_msg("%s: cuDNN did not run (forward %s, backward %s): "
						 "titan's kernel ran instead (see the log line)",
						 g.label,
						 after.fwd_calls > before.fwd_calls ? "ran" : "fell back",
						 after.bwd_calls > before.bwd_calls ? "ran" : "fell back");
				printf("# note: %s: cuDNN fell back to titan's kernel\n", g.label);
			}
		}

		if (large) {
			const double pairs = (double)d->batch * (double)d->n_heads *
					     (double)d->seq * (double)(d->seq + 1) / 2.0;
			const double f = 4.0 * (double)d->head_dim * pairs;

			TIME_OP("attention_fwd", passes[pi].name, f, 0.0,
				"4·D·B·H·T(T+1)/2 FLOP (causal)",
				be->ops->attention_fwd(be, out_, lse_, q_, k_, v_, d));
			TIME_OP("attention_bwd", passes[pi].name, 2.5 * f, 0.0,
				"10·D·B·H·T(T+1)/2 FLOP (causal)",
				be->ops->attention_bwd(be, dq_, dk_, dv_, dout_, q_, k_, v_, outc_,
						       lsec_, d));
		}
	}
	if (titan_cuda_set_attention(&g.cu[2], TITAN_CUDA_ATTN_TITAN) < 0)
		fail_msg("%s: %s", g.label, titan_errmsg());
	dfree(q_), dfree(k_), dfree(v_), dfree(dout_), dfree(out_), dfree(lse_), dfree(outc_);
	dfree(lsec_), dfree(dq_), dfree(dk_), dfree(dv_);
	free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv);
	free(got);
}

static void attention_case(const struct titan_attn_dims *d, uint64_t index, bool large)
{
	attention_case_(d, index, large, false, false);
}

/* Causal GQA with H = Hkv, 2·Hkv and 4·Hkv, T from 1 to 256 (not only
 * multiples of the 64-row tiles), head_dim 16, 32, 64 and 128. */
static void test_attention(void **state)
{
	static const int64_t ts[] = {1, 37, 64, 130, 256}, ds[] = {16, 32, 64, 128};
	static const int64_t groups[] = {1, 2, 4};
	static const struct titan_attn_dims large[] = {{2, 2048, 32, 8, 64, NULL},
						       {1, 2048, 16, 4, 128, NULL}};
	uint64_t index = 0;

	(void)state;
	need_gpu();
	for (size_t ti = 0; ti < LEN(ts); ti++)
		for (size_t di = 0; di < LEN(ds); di++)
			for (size_t gi = 0; gi < LEN(groups); gi++) {
				const int64_t hkv = 2;
				const struct titan_attn_dims d = {ts[ti] <= 64 ? 2 : 1, ts[ti],
								  groups[gi] * hkv, hkv, ds[di], NULL};

				attention_case(&d, index++, false);
			}
	for (size_t i = 0; i < LEN(large) && g.large; i++)
		attention_case(&large[i], index++, true);
}

/* cuDNN's SDPA graphs (lib/cuda/cudnn_attn.cu) built as far as needs no
 * device — every tensor and operation descriptor finalized, the operation
 * graph and the heuristics descriptor — against the libcudnn.so.9 that
 * loads here: runs on a machine without a GPU too (skips, with the reason,
 * when cuDNN does not load or CUDA is not built). */
static void test_attention_cudnn_graph(void **state)
{
	static const struct titan_attn_dims shapes[] = {
		{2, 37, 4, 2, 64, NULL}, {1, 130, 8, 8, 128, NULL}, {4, 2048, 32, 8, 64, NULL},
		{2, 96, 6, 3, 32, NULL},
	};
	char why[400] = "";

	(void)state;
	for (size_t i = 0; i < LEN(shapes); i++) {
		const struct titan_attn_dims *d = &shapes[i];
		int rc = titan_cuda_attention_graph_check(d, why, sizeof(why));

		if (rc == 1) {
			if (g.require && g.gpu)
				fail_msg("TITAN_CUDA_TEST_REQUIRE=1 but cuDNN does not load: %s", why);
			printf("# skip reason: cuDNN does not load: %s\n", why);
			skip();
		}
		if (rc != 0)
			fail_msg("B=%lld T=%lld H=%lld Hkv=%lld D=%lld: %s", (long long)d->batch,
				 (long long)d->seq, (long long)d->n_heads, (long long)d->n_kv_heads,
				 (long long)d->head_dim, titan_errmsg());
	}
}

/* attention_fwd/bwd through cuDNN's flash attention (bf16 mode, the
 * default there when libcudnn.so.9 loads; the other tests pin the bf16
 * backend to titan's kernels) against the CPU op at bf16 tolerance: GQA
 * groups 1 to 4, T not a multiple of 64 or 128, head_dim 16 to 128; both
 * backward variants (the default deterministic one must give the same bits
 * twice; cudnn-fast's atomics need not); with TITAN_CUDA_TEST_LARGE=1 the
 * Llama 3.2 1B shape (B=4 T=2048 H=32 Hkv=8 D=64), timed next to titan's
 * bf16 kernels with TITAN_CUDA_TEST_TIME=1 (modes cudnn, cudnnF, bf16).
 * Skips (with the reason) when cuDNN does not load; fails then under
 * TITAN_CUDA_TEST_REQUIRE=1, and also when cuDNN falls back to titan's
 * kernel for a shape it should run. */
static void test_attention_cudnn(void **state)
{
	static const struct {
		struct titan_attn_dims d;
		bool must_run;
	} cases[] = {
		{{2, 64, 4, 4, 64, NULL}, true},   {{2, 37, 4, 2, 64, NULL}, true},
		{{1, 130, 8, 2, 128, NULL}, true}, {{2, 256, 8, 2, 64, NULL}, true},
		{{1, 200, 6, 3, 128, NULL}, true}, {{1, 333, 4, 1, 64, NULL}, true},
		{{2, 96, 4, 2, 32, NULL}, false},  {{2, 80, 2, 1, 16, NULL}, false},
		{{2, 1, 4, 2, 64, NULL}, false},
	};
	static const struct titan_attn_dims model = {4, 2048, 32, 8, 64, NULL};
	uint64_t index = 0;

	(void)state;
	need_gpu();
	if (!g.dnn) {
		if (g.require)
			fail_msg("TITAN_CUDA_TEST_REQUIRE=1 but cuDNN's attention is unavailable: %s",
				 g.dnn_why);
		printf("# skip reason: cuDNN's attention is unavailable: %s\n", g.dnn_why);
		skip();
	}
	for (size_t i = 0; i < LEN(cases); i++)
		attention_case_(&cases[i].d, index++, false, true, cases[i].must_run);
	if (g.large)
		attention_case_(&model, index++, true, true, true);
}

/* ------------------------------------------ attention parts and documents */

/* Ascending document ids: doc[i] for positions i < n of a sequence whose
 * documents begin at random positions, about `ndocs` of them. */
static void draw_docs(int32_t *doc, int64_t n, int ndocs)
{
	int32_t id = 0;

	for (int64_t i = 0; i < n; i++) {
		if (i > 0 && draw_below((uint32_t)n) < (uint32_t)ndocs)
			id++;
		doc[i] = id;
	}
}

/* ‖got − want‖/‖want‖ over the finite elements of an lse; −inf (a row
 * that sees no key) must be −inf on both sides. */
static void check_lse_(const float *got, const float *want, size_t n, int line)
{
	float *g2 = FALLOC(n), *w2 = FALLOC(n);
	size_t m = 0;

	for (size_t i = 0; i < n; i++) {
		if (isinf(want[i]) || isinf(got[i])) {
			if (got[i] != want[i])
				fail_msg("line %d: %s: lse[%zu] = %g, cpu %g", line, g.label, i,
					 (double)got[i], (double)want[i]);
			continue;
		}
		g2[m] = got[i];
		w2[m++] = want[i];
	}
	check_(m < n ? "lse (finite)" : "lse", g2, w2, m, TOL, 0.0, line);
	free(g2);
	free(w2);
}
#define check_lse(got, want, n) check_lse_(got, want, n, __LINE__)

/* A part (struct titan_attn_part), or a merge of nblk of them: the keys
 * [0, tk) cut into nblk blocks, run the later first (as the ring delivers
 * them), the first without merge and the others with it; backward the
 * same blocks, the first overwriting and the others accumulating.
 * Document ids (ndocs > 0) of positions: key s at s, query t at t + diag,
 * the queries' raised by `shift` (rows of other documents than any key's
 * see none: out 0, lse −inf, no gradient); the rows' gaps (strides past
 * tq, tk) hold ids that would decrease, and values that must survive. */
struct part_case {
	int64_t batch, tq, tk, q_stride, k_stride, h, hkv, d, diag;
	int ndocs, shift, nblk;
};

static void part_case(const struct part_case *c, uint64_t index)
{
	const int64_t B = c->batch, kvw = c->hkv * c->d;
	const size_t nq = (size_t)(B * c->q_stride * c->h * c->d);
	const size_t nk = (size_t)(B * c->k_stride * kvw), nl = (size_t)(B * c->h * c->q_stride);
	int32_t *qd = NULL, *kd = NULL;
	struct titan_attn_part p[4];
	int64_t k0[4];

	assert_true(c->nblk >= 1 && c->nblk <= 4);
	begin_case("attention_part", index, "B=%lld Tq=%lld/%lld Tk=%lld/%lld H=%lld Hkv=%lld "
		   "D=%lld diag=%lld%s%s x%d", (long long)B, (long long)c->tq,
		   (long long)c->q_stride, (long long)c->tk, (long long)c->k_stride,
		   (long long)c->h, (long long)c->hkv, (long long)c->d, (long long)c->diag,
		   c->ndocs ? " docs" : "", c->shift ? "+1" : "", c->nblk);
	float *q = FALLOC(nq), *k = FALLOC(nk), *v = FALLOC(nk), *dout = FALLOC(nq);
	float *out = FALLOC(nq), *lse = FALLOC(nl);
	fill(q, nq, 1.0f);
	fill(k, nk, 1.0f);
	fill(v, nk, 1.0f);
	fill(dout, nq, 1.0f);
	fill(out, nq, 1.0f); /* what the gaps (and a first merge) must not lose */
	fill(lse, nl, 1.0f);
	if (c->ndocs) {
		const int64_t off = c->diag < 0 ? -c->diag : 0;
		const int64_t span = off + (c->tk > c->tq + c->diag ? c->tk : c->tq + c->diag) + 1;
		int32_t *pos = (int32_t *)xmalloc((size_t)span * sizeof(int32_t));

		qd = (int32_t *)xmalloc((size_t)(B * c->q_stride) * sizeof(int32_t));
		kd = (int32_t *)xmalloc((size_t)(B * c->k_stride) * sizeof(int32_t));
		for (int64_t b = 0; b < B; b++) {
			draw_docs(pos, span, c->ndocs);
			for (int64_t t = 0; t < c->q_stride; t++)
				qd[b * c->q_stride + t] = t < c->tq ? pos[t + c->diag + off] + c->shift
								     : -7 - (int32_t)t;
			for (int64_t s0 = 0; s0 < c->k_stride; s0++)
				kd[b * c->k_stride + s0] = s0 < c->tk ? pos[s0 + off] : -9 - (int32_t)s0;
		}
		free(pos);
	}
	for (int i = 0; i < c->nblk; i++) { /* block i: keys [k0, k1), the later first */
		const int blk = c->nblk - 1 - i;
		const int64_t a0 = c->tk * blk / c->nblk, a1 = c->tk * (blk + 1) / c->nblk;
		const int64_t dg = c->diag - a0 < -c->tq ? -c->tq : c->diag - a0;

		k0[i] = a0;
		p[i] = (struct titan_attn_part){B, c->tq, a1 - a0, c->q_stride, c->k_stride, c->h,
						c->hkv, c->d, dg, qd, kd ? kd + a0 : NULL};
	}
	float *q_ = dput(q, nq * 4), *k_ = dput(k, nk * 4), *v_ = dput(v, nk * 4);
	float *dout_ = dput(dout, nq * 4), *out_ = dnew(nq * 4), *lse_ = dnew(nl * 4);
	float *outc_ = dnew(nq * 4), *lsec_ = dnew(nl * 4);
	float *dq_ = dnew(nq * 4), *dk_ = dnew(nk * 4), *dv_ = dnew(nk * 4);
	float *cout = fdup(out, nq), *clse = fdup(lse, nl), *got = FALLOC(nq > nk ? nq : nk);
	float *dq = FALLOC(nq), *dk = FALLOC(nk), *dv = FALLOC(nk);

	for (int i = 0; i < c->nblk; i++)
		CPU(g.cpu.ops->attention_part_fwd(&g.cpu, cout, clse, q, k + k0[i] * kvw,
						  v + k0[i] * kvw, &p[i], i > 0));
	dset(outc_, cout, nq * 4);
	dset(lsec_, clse, nl * 4);
	/* backward from zeros: what is not written stays 0 on both sides */
	memset(dq, 0, nq * 4);
	memset(dk, 0, nk * 4);
	memset(dv, 0, nk * 4);
	for (int i = 0; i < c->nblk; i++)
		CPU(g.cpu.ops->attention_part_bwd(&g.cpu, dq, dk + k0[i] * kvw, dv + k0[i] * kvw,
						  dout, q, k + k0[i] * kvw, v + k0[i] * kvw, cout,
						  clse, &p[i], i > 0));

	/* the part kernels are fp32 in every matmul mode: fp32, and bf16 */
	for (int m = 0; m < NMODES; m += 2) {
		struct titan_backend *be = &g.cu[m];

		set_label(m == 0 ? NULL : mode_name[m]);
		dset(out_, out, nq * 4);
		dset(lse_, lse, nl * 4);
		for (int i = 0; i < c->nblk; i++)
			CU(be->ops->attention_part_fwd(be, out_, lse_, q_, k_ + k0[i] * kvw,
						       v_ + k0[i] * kvw, &p[i], i > 0));
		dget(got, out_, nq * 4);
		check("out", got, cout, nq, TOL);
		dget(got, lse_, nl * 4);
		check_lse(got, clse, nl);

		memset(got, 0, (nq > nk ? nq : nk) * 4);
		dset(dq_, got, nq * 4);
		dset(dk_, got, nk * 4);
		dset(dv_, got, nk * 4);
		for (int i = 0; i < c->nblk; i++)
			CU(be->ops->attention_part_bwd(be, dq_, dk_ + k0[i] * kvw, dv_ + k0[i] * kvw,
						       dout_, q_, k_ + k0[i] * kvw, v_ + k0[i] * kvw,
						       outc_, lsec_, &p[i], i > 0));
		dget(got, dq_, nq * 4);
		check("dq", got, dq, nq, TOL);
		dget(got, dk_, nk * 4);
		check("dk", got, dk, nk, TOL);
		dget(got, dv_, nk * 4);
		check("dv", got, dv, nk, TOL);
		if (c->nblk > 1)
			continue;
		/* accumulate onto what is there: the same terms once more */
		float *dq2 = fdup(dq, nq), *dk2 = fdup(dk, nk), *dv2 = fdup(dv, nk);

		CPU(g.cpu.ops->attention_part_bwd(&g.cpu, dq2, dk2, dv2, dout, q, k, v, cout, clse,
						  &p[0], true));
		CU(be->ops->attention_part_bwd(be, dq_, dk_, dv_, dout_, q_, k_, v_, outc_, lsec_,
					       &p[0], true));
		dget(got, dq_, nq * 4);
		check("dq (accumulate)", got, dq2, nq, TOL);
		dget(got, dk_, nk * 4);
		check("dk (accumulate)", got, dk2, nk, TOL);
		dget(got, dv_, nk * 4);
		check("dv (accumulate)", got, dv2, nk, TOL);
		free(dq2), free(dk2), free(dv2);
	}
	dfree(q_), dfree(k_), dfree(v_), dfree(dout_), dfree(out_), dfree(lse_), dfree(outc_);
	dfree(lsec_), dfree(dq_), dfree(dk_), dfree(dv_);
	free(q), free(k), free(v), free(dout), free(out), free(lse), free(cout), free(clse);
	free(got), free(dq), free(dk), free(dv), free(qd), free(kd);
}

/* attention_part_fwd/bwd (context parallelism's blocks) against the CPU's:
 * whole causal squares; CP's all-gather parts (query chunks r and
 * 2·cp − 1 − r of a rank against the whole sequence) and ring steps (its
 * own block, an earlier rank's, a later rank's) at cp 2, 3 and 4; uneven
 * sizes with strides, negative, partial and past-the-end diagonals; merges
 * of 2 to 4 key blocks; GQA, head dims 16 to 128, with and without
 * document ids. */
static void test_attention_part(void **state)
{
	static const int64_t ds[] = {16, 32, 64, 128}, ts[] = {1, 37, 64, 130}, tds[] = {37, 256};
	uint64_t index = 0;

	(void)state;
	need_gpu();
	if (!g.cu[0].ops->attention_part_fwd || !g.cu[0].ops->attention_part_bwd)
		fail_msg("the CUDA backend has no attention_part_fwd/bwd");
	for (size_t ti = 0; ti < LEN(ts); ti++)
		for (size_t di = 0; di < LEN(ds); di++) {
			const struct part_case c = {2, ts[ti], ts[ti], ts[ti], ts[ti], 4, 2, ds[di],
						    0, 0, 0, 1};

			part_case(&c, index++);
		}
	for (size_t ti = 0; ti < LEN(tds); ti++)
		for (size_t di = 0; di < LEN(ds); di++) {
			const struct part_case c = {2, tds[ti], tds[ti], tds[ti], tds[ti], 4, 1,
						    ds[di], 0, 4, 0, 1};

			part_case(&c, index++);
		}
	for (int cp = 2; cp <= 4; cp++)
		for (int r = 0; r < cp; r++) {
			const int64_t half = 24, tl = 2 * half, t = tl * cp;

			for (int i = 0; i < 2; i++) { /* all-gather: chunk i of rank r */
				const int64_t chunk = i ? 2 * cp - 1 - r : r;
				const struct part_case c = {2, half, t, tl, t, 4, 1, 64, chunk * half,
							    (r + i) % 2 ? 3 : 0, 0, 1};

				part_case(&c, index++);
			}
			/* ring: the own block, an earlier rank's (first half of the
			 * keys, every query), a later one's (second half of the
			 * queries, every key) */
			const struct part_case own = {2, tl, tl, tl, tl, 8, 2, 32, 0, r % 2 * 3, 0, 1};
			const struct part_case early = {2, tl, half, tl, tl, 8, 2, 32, half,
							r % 2 * 3, 0, 1};
			const struct part_case late = {2, half, tl, tl, tl, 8, 2, 32, tl, r % 2 * 3,
						       r % 2, 1};

			part_case(&own, index++);
			part_case(&early, index++);
			part_case(&late, index++);
		}
	static const struct part_case odd[] = {
		{1, 37, 70, 45, 80, 6, 3, 40, -5, 0, 0, 1},
		{1, 37, 70, 45, 80, 6, 3, 40, -37, 0, 0, 1},  /* sees nothing */
		{1, 37, 70, 45, 80, 6, 3, 40, 20, 5, 0, 1},
		{1, 37, 70, 45, 80, 6, 3, 40, 1000, 5, 1, 1}, /* clamped to tk */
		{2, 37, 70, 45, 80, 2, 1, 128, 33, 5, 1, 1},
		{2, 70, 0, 70, 4, 2, 1, 16, 0, 0, 0, 1},      /* no keys */
		{2, 0, 70, 3, 70, 2, 1, 16, 0, 0, 0, 1},      /* no queries */
		{3, 100, 1, 100, 1, 3, 3, 8, 99, 0, 0, 1},
	};
	for (size_t i = 0; i < LEN(odd); i++)
		part_case(&odd[i], index++);
	for (int nb = 2; nb <= 4; nb++) {
		const struct part_case m[] = {
			{2, 130, 130, 130, 130, 4, 2, 64, 0, 0, 0, nb},
			{2, 130, 200, 140, 210, 4, 2, 16, 70, 6, 0, nb},
			{1, 70, 140, 70, 140, 2, 1, 128, 70, 4, 1, nb},
		};
		for (size_t i = 0; i < LEN(m); i++)
			part_case(&m[i], index++);
	}
}

/* attention_fwd/bwd with document ids (block_causal) against the CPU's:
 * one document (the causal op's result), several, a document per token;
 * then ids that decrease and ids of one side only are refused as on the
 * CPU. */
static void test_attention_docs(void **state)
{
	static const int64_t ts[] = {1, 37, 130, 256}, ds[] = {16, 64, 128};
	static const int ndocs[] = {0, 5, 1000};
	uint64_t index = 1000;

	(void)state;
	need_gpu();
	for (size_t ti = 0; ti < LEN(ts); ti++)
		for (size_t di = 0; di < LEN(ds); di++)
			for (size_t ni = 0; ni < LEN(ndocs); ni++) {
				const int64_t b = 2, t = ts[ti];
				int32_t *doc = (int32_t *)xmalloc((size_t)(b * t) * sizeof(int32_t));
				const struct titan_attn_dims d = {b, t, 4 << (ni % 2), 2, ds[di], doc};

				titan_rng_init(&g.rng, g.seed, titan_rng_stream_id("docs", index));
				g.draw = 0;
				for (int64_t r = 0; r < b; r++)
					draw_docs(doc + r * t, t, ndocs[ni]);
				attention_case(&d, index++, false);
				free(doc);
			}
	if (g.large) {
		int32_t *doc = (int32_t *)xmalloc(2 * 2048 * sizeof(int32_t));
		const struct titan_attn_dims d = {2, 2048, 32, 8, 64, doc};

		titan_rng_init(&g.rng, g.seed, titan_rng_stream_id("docs", index));
		g.draw = 0;
		draw_docs(doc, 2048, 8);
		draw_docs(doc + 2048, 2048, 8);
		attention_case(&d, index++, false);
		free(doc);
	}

	/* refused as on the CPU, naming the ids */
	static const int32_t down[] = {0, 0, 1, 0};
	const struct titan_attn_dims bad = {1, 4, 2, 2, 16, down};
	const struct titan_attn_part one_side = {1, 4, 4, 4, 4, 2, 2, 16, 0, down, NULL};
	float *x_ = dnew(4 * 2 * 16 * 4), *l_ = dnew(2 * 4 * 4);

	begin_case("attention_docs", index, "bad ids");
	titan_error_clear();
	assert_int_equal(g.cu[0].ops->attention_fwd(&g.cu[0], x_, l_, x_, x_, x_, &bad),
			 TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "document ids decrease"));
	assert_int_equal(g.cu[0].ops->attention_bwd(&g.cu[0], x_, x_, x_, x_, x_, x_, x_, x_,
						    l_, &bad), TITAN_E_INVALID);
	assert_int_equal(g.cu[0].ops->attention_part_fwd(&g.cu[0], x_, l_, x_, x_, x_,
							 &one_side, false), TITAN_E_INVALID);
	assert_int_equal(g.cu[0].ops->attention_part_bwd(&g.cu[0], x_, x_, x_, x_, x_, x_, x_, x_,
							 l_, &one_side, false), TITAN_E_INVALID);
	titan_error_clear();
	dfree(x_), dfree(l_);
}

/* -------------------------------------------------------- classifier_ce */

struct ce_case {
	int64_t n, c, v, chunk;
	bool large;
};

static const struct ce_case ce_cases[] = {
	{1, 16, 11, 0, false},       {37, 48, 1000, 0, false},   {37, 48, 1000, 5, false},
	{130, 256, 1000, 64, false}, {130, 64, 5003, -1, false}, {257, 128, 777, 1, false},
	{100, 32, 50, 1000, false},  {4096, 2048, 32000, 1024, true},
};

/* Loss and count without gradients, then with dh (overwrite) and dW
 * (accumulate); ignored labels (-100 and -1) give zero rows of dh; chunk
 * 0, -1, 1, ragged, and larger than N; all labels ignored. */
static void test_classifier_ce(void **state)
{
	(void)state;
	need_gpu();
	for (size_t ci = 0; ci < LEN(ce_cases); ci++) {
		const struct ce_case *k = &ce_cases[ci];
		const int64_t n = k->n, c = k->c, v = k->v, chunk = k->chunk;
		const size_t nh = (size_t)(n * c), nw = (size_t)(v * c);

		if (k->large && !g.large)
			continue;
		begin_case("classifier_ce", ci, "N=%lld C=%lld V=%lld chunk=%lld", (long long)n,
			   (long long)c, (long long)v, (long long)chunk);
		int32_t *labels = xmalloc((size_t)n * sizeof(int32_t));
		for (int64_t i = 0; i < n; i++)
			labels[i] = i % 7 == 3 ? -100 : i % 11 == 5 ? -1 : (int32_t)draw_below((uint32_t)v);
		if (n > 2) {
			labels[1] = (int32_t)(v - 1);
			labels[2] = 0;
		}
		float *h = FALLOC(nh), *w = FALLOC(nw), *dw0 = FALLOC(nw);
		fill(h, nh, 1.0f);
		fill(w, nw, 2.0f / sqrtf((float)c));
		fill(dw0, nw, 0.01f);

		const struct titan_backend_ops *o = g.cpu.ops;
		double loss0, loss1;
		int64_t nv0, nv1;
		CPU(o->classifier_ce(&g.cpu, &loss0, &nv0, NULL, NULL, h, w, labels, n, c, v, 1.0f,
				     chunk));
		const float gs = nv0 > 0 ? 1.0f / (float)nv0 : 1.0f;
		float *dh = FALLOC(nh), *dw = fdup(dw0, nw);
		CPU(o->classifier_ce(&g.cpu, &loss1, &nv1, dh, dw, h, w, labels, n, c, v, gs, chunk));

		int32_t *lab_ = dput(labels, (size_t)n * sizeof(int32_t));
		float *h_ = dput(h, nh * 4), *w_ = dput(w, nw * 4), *dh_ = dnew(nh * 4);
		float *dw_ = dnew(nw * 4), *got = FALLOC(nh > nw ? nh : nw);
		for (int m = 0; m < NMODES; m++) {
			struct titan_backend *be = &g.cu[m];
			const double tol = mode_tol[m];
			double loss = NAN;
			int64_t nv = -1;

			set_label(mode_name[m]);
			CU(be->ops->classifier_ce(be, &loss, &nv, NULL, NULL, h_, w_, lab_, n, c, v,
						  1.0f, chunk));
			assert_int_equal(nv, nv0);
			check_scalar("loss_sum (no grads)", loss, loss0, tol);

			loss = NAN;
			nv = -1;
			dpoison(dh_, nh * 4);
			dset(dw_, dw0, nw * 4);
			CU(be->ops->classifier_ce(be, &loss, &nv, dh_, dw_, h_, w_, lab_, n, c, v, gs,
						  chunk));
			assert_int_equal(nv, nv1);
			check_scalar("loss_sum (grads)", loss, loss1, tol);
			dget(got, dh_, nh * 4);
			check("dh", got, dh, nh, tol);
			for (int64_t i = 0; i < n; i++)
				if (labels[i] < 0)
					for (int64_t j = 0; j < c; j++)
						if (got[i * c + j] != 0.0f)
							fail_msg("%s: dh[%lld,%lld] = %g for an ignored "
								 "label", g.label, (long long)i,
								 (long long)j, (double)got[i * c + j]);
			dget(got, dw_, nw * 4);
			check("dw+=", got, dw, nw, tol);

			if (k->large) {
				const double f = 2.0 * (double)n * (double)c * (double)v;

				TIME_OP("classifier_ce", mode_name[m], f, 0.0,
					"2·N·C·V FLOP (loss only)",
					be->ops->classifier_ce(be, &loss, &nv, NULL, NULL, h_, w_, lab_,
							       n, c, v, 1.0f, chunk));
				TIME_OP("classifier_ce+g", mode_name[m], 3.0 * f, 0.0,
					"6·N·C·V FLOP (loss, dh, dW)",
					be->ops->classifier_ce(be, &loss, &nv, dh_, dw_, h_, w_, lab_,
							       n, c, v, gs, chunk));
			}
		}
		if (ci == 3) { /* every label ignored: nothing counts, dh = 0, dW unchanged */
			for (int64_t i = 0; i < n; i++)
				labels[i] = -100;
			set_label("fp32, all ignored");
			struct titan_backend *be = &g.cu[0];
			double loss = NAN;
			int64_t nv = -1;
			dset(lab_, labels, (size_t)n * sizeof(int32_t));
			dpoison(dh_, nh * 4);
			dset(dw_, dw0, nw * 4);
			CU(be->ops->classifier_ce(be, &loss, &nv, dh_, dw_, h_, w_, lab_, n, c, v, 1.0f,
						  chunk));
			assert_int_equal(nv, 0);
			assert_true(loss == 0.0);
			dget(got, dh_, nh * 4);
			for (size_t i = 0; i < nh; i++)
				if (got[i] != 0.0f)
					fail_msg("%s: dh[%zu] = %g, want 0", g.label, i,
						 (double)got[i]);
			printf("# %s dh: all 0\n", g.label);
			dget(got, dw_, nw * 4);
			check("dw (unchanged)", got, dw0, nw, TOL);
		}
		dfree(lab_), dfree(h_), dfree(w_), dfree(dh_), dfree(dw_);
		free(labels), free(h), free(w), free(dw0), free(dh), free(dw), free(got);
	}
}

/* ---------------------------------------------------------------- adamw */

struct adamw_case {
	int64_t n, off;
	float grad_mul;
	double wd;
	bool large;
};

static const struct adamw_case adamw_cases[] = {
	{1, 0, 1.0f, 0.1, false},        {37, 1, 0.75f, 0.1, false},
	{1000, 0, 1.0f, 0.0, false},     {16385, 1, 0.5f, 0.1, false},
	{(1 << 20) + 3, 0, 0.75f, 0.1, false}, {4096 * 5632, 0, 0.75f, 0.1, true},
};

/* Three steps from a zero state (bias corrections change per step), with
 * grad_mul != 1 and weight decay; p, m, v, and the update p − p_prev alone
 * (p ~ 0.02 as at init, so the update is not lost in p's rounding). */
static void test_adamw(void **state)
{
	(void)state;
	need_gpu();
	for (size_t ci = 0; ci < LEN(adamw_cases); ci++) {
		const struct adamw_case *k = &adamw_cases[ci];
		const int64_t n = k->n, off = k->off;
		const size_t nn = (size_t)n * 4, nb = (size_t)(n + off) * 4;
		const struct titan_adamw_hparams hp = {1e-2, 0.9, 0.95, 1e-8, k->wd};

		if (k->large && !g.large)
			continue;
		begin_case("adamw_step", ci, "n=%lld grad_mul=%g wd=%g%s", (long long)n,
			   (double)k->grad_mul, k->wd, off ? " unaligned" : "");
		float *p = FALLOC(n), *m = calloc((size_t)n, sizeof(float));
		float *v = calloc((size_t)n, sizeof(float)), *gr = FALLOC(n);
		assert_non_null(m);
		assert_non_null(v);
		fill(p, (size_t)n, 0.02f);

		struct titan_backend *be = &g.cu[0];
		float *pb = dnew(nb), *mb = dnew(nb), *vb = dnew(nb), *gb = dnew(nb);
		float *p_ = pb + off, *m_ = mb + off, *v_ = vb + off, *g_ = gb + off;
		float *got = FALLOC(n), *prev = FALLOC(n), *dcpu = FALLOC(n);
		dset(p_, p, nn);
		dset(m_, m, nn);
		dset(v_, v, nn);
		for (int64_t step = 1; step <= 3; step++) {
			char what[32];

			fill(gr, (size_t)n, 0.1f);
			gr[0] = 0.0f; /* decay only */
			memcpy(prev, p, nn);
			CPU(g.cpu.ops->adamw_step(&g.cpu, p, m, v, gr, n, &hp, step, k->grad_mul));
			dset(g_, gr, nn);
			CU(be->ops->adamw_step(be, p_, m_, v_, g_, n, &hp, step, k->grad_mul));
			snprintf(what, sizeof(what), "p (step %lld)", (long long)step);
			dget(got, p_, nn);
			check(what, got, p, (size_t)n, TOL);
			for (int64_t i = 0; i < n; i++) {
				got[i] -= prev[i];
				dcpu[i] = p[i] - prev[i];
			}
			snprintf(what, sizeof(what), "p - p_prev (step %lld)", (long long)step);
			check(what, got, dcpu, (size_t)n, TOL);
			snprintf(what, sizeof(what), "m (step %lld)", (long long)step);
			dget(got, m_, nn);
			check(what, got, m, (size_t)n, TOL);
			snprintf(what, sizeof(what), "v (step %lld)", (long long)step);
			dget(got, v_, nn);
			check(what, got, v, (size_t)n, TOL);
			/* both sides start the next step from the oracle's state, so
			 * differences do not compound */
			dset(p_, p, nn);
			dset(m_, m, nn);
			dset(v_, v, nn);
		}
		if (k->large)
			TIME_OP("adamw_step", "fp32", 0.0, 7.0 * (double)nn,
				"7·n·4 B (p, m, v, g read; p, m, v written)",
				be->ops->adamw_step(be, p_, m_, v_, g_, n, &hp, 4, k->grad_mul));
		dfree(pb), dfree(mb), dfree(vb), dfree(gb);
		free(p), free(m), free(v), free(gr), free(got), free(prev), free(dcpu);
	}
}

/* ---------------------------------------------------------------- sumsq */

/* Sizes around the 16384-element chunk of the CPU's fixed-order sum. */
static void test_sumsq(void **state)
{
	static const int64_t sizes[] = {0,     1,     37,     16383,  16384,         16385,
					32767, 32768, 32769, 100003, (1 << 20) + 7, 4096 * 5632};

	(void)state;
	need_gpu();
	for (size_t ci = 0; ci < LEN(sizes); ci++) {
		const int64_t n = sizes[ci], off = (int64_t)(ci % 2);
		const bool large = n == 4096 * 5632;

		if (large && !g.large)
			continue;
		begin_case("sumsq", ci, "n=%lld%s", (long long)n, off ? " unaligned" : "");
		float *x = FALLOC(n);
		fill(x, (size_t)n, 1.0f);
		double want = NAN, got = NAN;
		CPU(g.cpu.ops->sumsq(&g.cpu, &want, x, n));

		struct titan_backend *be = &g.cu[0];
		float *xb = dnew((size_t)(n + off) * 4), *x_ = xb + off;
		dset(x_, x, (size_t)n * 4);
		CU(be->ops->sumsq(be, &got, x_, n));
		if (n == 0) {
			printf("# %s: %g\n", g.label, got);
			assert_true(got == 0.0);
		} else {
			check_scalar("sum", got, want, TOL);
		}
		if (large)
			TIME_OP("sumsq", "fp32", 0.0, (double)n * 4.0, "n·4 B",
				be->ops->sumsq(be, &got, x_, n));
		dfree(xb);
		free(x);
	}
}

/* ------------------------------------------------------- multi-tensor ops */

/* Chunks of the CUDA multi-tensor ops are 65536 elements: sizes around
 * that and the CPU's 16384, empty tensors, unaligned offsets, tensors back
 * to back and with gaps. */
static const struct titan_tensor_span mt_spans[] = {
	{3, 37, false},          {40, 0, true},          {40, 65535, false},
	{65575, 1, true},        {65577, 65536, true},   {131113, 0, false},
	{131113, 65537, false},  {196650, 16385, true},  {213040, (1 << 20) + 3, false},
	{1261619, 5, false},     {1261632, 2048, true},  {1263680, 131072, false},
};
#define MT_FLOATS 1394752 /* the last span's end */

/* got[i] against want[i] for the k tensors of t: rel <= tol, and exactly 0
 * for an empty tensor; one line with the worst. */
static void mt_check_sums(const char *what, const double *got, const double *want,
			  const struct titan_tensor_span *t, int k, double tol)
{
	double worst = 0.0;

	for (int i = 0; i < k; i++) {
		const double rel = want[i] != 0.0 ? fabs(got[i] - want[i]) / fabs(want[i])
						  : fabs(got[i]);

		if (!isfinite(got[i]) || !(rel <= tol) || (t[i].numel == 0 && got[i] != 0.0))
			fail_msg("%s: %s of tensor %d (%lld elements): %.17g, want %.17g: rel "
				 "%.3e > %.0e", g.label, what, i, (long long)t[i].numel, got[i],
				 want[i], rel, tol);
		worst = fmax(worst, rel);
	}
	printf("# %s %s (%d tensors): worst rel %.2e (tol %.0e)\n", g.label, what, k, worst,
	       tol);
}

/* Every element outside the spans of t[0..n), where got must still hold want. */
static void mt_check_gaps(const char *what, const struct titan_tensor_span *t, int n,
			  const float *got, const float *want, int64_t total)
{
	for (int64_t i = 0, k = 0; i < total; i++) {
		while (k < n && i >= t[k].offset + t[k].numel)
			k++;
		if (k < n && i >= t[k].offset)
			continue;
		if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
			fail_msg("%s: %s[%lld] outside every tensor changed: %.9g, was %.9g",
				 g.label, what, (long long)i, (double)got[i], (double)want[i]);
	}
}

/* sumsq_multi and adamw_multi against the CPU twin (sums rel 1e-12 per
 * tensor, AdamW TOL over the arenas) and against the CUDA per-tensor ops
 * (AdamW bit for bit), with the arenas' base aligned, one float off, and
 * p, m, v, g misaligned against each other (AdamW's scalar path); the
 * device tables cached (a second call repeats the bits) and replaced
 * (more distinct tables than the cache keeps). */
static void test_multi_tensor(void **state)
{
	static const int64_t shift[][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {0, 1, 2, 3}};
	const int n = (int)LEN(mt_spans);
	const size_t nn = (size_t)MT_FLOATS * 4, nb = nn + 4 * sizeof(float);
	const struct titan_adamw_hparams hp = {1e-2, 0.9, 0.95, 1e-8, 0.1};
	struct titan_backend *be = &g.cu[0];

	(void)state;
	need_gpu();
	for (size_t ci = 0; ci < LEN(shift); ci++) {
		const int64_t *sh = shift[ci];

		begin_case("multi_tensor", ci, "%d tensors, %d floats, shifts %lld %lld %lld %lld",
			   n, MT_FLOATS, (long long)sh[0], (long long)sh[1], (long long)sh[2],
			   (long long)sh[3]);
		float *p = FALLOC(MT_FLOATS), *m = calloc(MT_FLOATS, sizeof(float));
		float *v = calloc(MT_FLOATS, sizeof(float)), *gr = FALLOC(MT_FLOATS);
		float *got = FALLOC(MT_FLOATS), *pprev = FALLOC(MT_FLOATS);
		float *mprev = FALLOC(MT_FLOATS), *vprev = FALLOC(MT_FLOATS);
		float *pl = FALLOC(MT_FLOATS), *ml = FALLOC(MT_FLOATS), *vl = FALLOC(MT_FLOATS);
		double want[LEN(mt_spans)], sum[LEN(mt_spans)], sum2[LEN(mt_spans)];
		assert_non_null(m);
		assert_non_null(v);
		fill(p, MT_FLOATS, 0.02f);
		float *pb = dnew(nb), *mb = dnew(nb), *vb = dnew(nb), *gb = dnew(nb);
		float *p_ = pb + sh[0], *m_ = mb + sh[1], *v_ = vb + sh[2], *g_ = gb + sh[3];
		/* the CUDA per-tensor ops' arenas (p, m, v; g shared) */
		float *qb = dnew(nb), *nb_ = dnew(nb), *wb = dnew(nb);
		float *q_ = qb + sh[0], *n_ = nb_ + sh[1], *w_ = wb + sh[2];

		for (int64_t step = 1; step <= 3; step++) {
			char what[48];

			fill(gr, MT_FLOATS, 0.1f);
			gr[3] = 0.0f; /* decay only */
			/* the sums: cpu twin, cuda multi (twice: the kept table), per tensor */
			CPU(g.cpu.ops->sumsq_multi(&g.cpu, want, gr, mt_spans, n));
			dset(g_, gr, nn);
			CU(be->ops->sumsq_multi(be, sum, g_, mt_spans, n));
			CU(be->ops->sumsq_multi(be, sum2, g_, mt_spans, n));
			assert_memory_equal(sum, sum2, sizeof(sum));
			mt_check_sums("sums", sum, want, mt_spans, n, 1e-12);
			CU(titan_sumsq_multi_loop(be, sum2, g_, mt_spans, n));
			mt_check_sums("sums vs cuda's sumsq", sum, sum2, mt_spans, n, 1e-12);
			/* AdamW: every side from the oracle's state */
			memcpy(pprev, p, nn);
			memcpy(mprev, m, nn);
			memcpy(vprev, v, nn);
			dset(p_, p, nn), dset(m_, m, nn), dset(v_, v, nn);
			dset(q_, p, nn), dset(n_, m, nn), dset(w_, v, nn);
			CPU(g.cpu.ops->adamw_multi(&g.cpu, p, m, v, gr, mt_spans, n, &hp, step, 0.75f));
			CU(be->ops->adamw_multi(be, p_, m_, v_, g_, mt_spans, n, &hp, step, 0.75f));
			CU(titan_adamw_multi_loop(be, q_, n_, w_, g_, mt_spans, n, &hp, step, 0.75f));
			dget(pl, q_, nn), dget(ml, n_, nn), dget(vl, w_, nn);
			const float *const want_a[3] = {p, m, v}, *const loop_a[3] = {pl, ml, vl};
			const float *const prev_a[3] = {pprev, mprev, vprev};
			float *const dev_a[3] = {p_, m_, v_};
			for (int a = 0; a < 3; a++) {
				const char *name = a == 0 ? "p" : a == 1 ? "m" : "v";

				dget(got, dev_a[a], nn);
				snprintf(what, sizeof(what), "%s (step %lld)", name, (long long)step);
				check(what, got, want_a[a], MT_FLOATS, TOL);
				snprintf(what, sizeof(what), "%s vs adamw_step (step %lld)", name,
					 (long long)step);
				check_exact(what, got, loop_a[a], MT_FLOATS);
				mt_check_gaps(name, mt_spans, n, got, prev_a[a], MT_FLOATS);
			}
		}
		/* more distinct tables (23) than the device keeps (16): every
		 * prefix and every suffix, twice */
		for (int round = 0; round < 2; round++)
			for (int k = 1; k < 2 * n; k++) {
				const struct titan_tensor_span *t = k <= n ? mt_spans : mt_spans + k - n;
				const int nt = k <= n ? k : 2 * n - k;

				CPU(g.cpu.ops->sumsq_multi(&g.cpu, want, gr, t, nt));
				CU(be->ops->sumsq_multi(be, sum, g_, t, nt));
				mt_check_sums(k <= n ? "prefix sums" : "suffix sums", sum, want, t, nt,
					      1e-12);
			}
		/* n = 0, bad tables, step 0 */
		sum[0] = -1.0;
		CU(be->ops->sumsq_multi(be, sum, g_, NULL, 0));
		assert_true(sum[0] == -1.0);
		CU(be->ops->adamw_multi(be, p_, m_, v_, g_, NULL, 0, &hp, 1, 1.0f));
		const struct titan_tensor_span bad[1] = {{-1, 4, false}};
		assert_int_equal(be->ops->sumsq_multi(be, sum, g_, bad, 1), TITAN_E_INVALID);
		assert_int_equal(be->ops->adamw_multi(be, p_, m_, v_, g_, mt_spans, n, &hp, 0, 1.0f),
				 TITAN_E_INVALID);
		dfree(pb), dfree(mb), dfree(vb), dfree(gb), dfree(qb), dfree(nb_), dfree(wb);
		free(p), free(m), free(v), free(gr), free(got), free(pprev), free(mprev), free(vprev);
		free(pl), free(ml), free(vl);
	}
}

/* Llama 3.2 1B's parameter table (dim 2048, 16 layers, 32/8 heads of 64,
 * FFN 8192, vocabulary 128256, output not tied: 147 tensors, 1.5 G floats,
 * 24 GB for p, m, v, g), offsets rounded up to 16 floats as the arenas'. */
static int mt_llama_1b(struct titan_tensor_span *t, int64_t *total)
{
	const int64_t C = 2048, KV = 512, F = 8192, V = 128256;
	const int64_t layer[9] = {C, C * C, KV * C, KV * C, C * C, C, F * C, C * F, F * C};
	int n = 0;
	int64_t o = 0;

#define MT_ADD(numel, nd)                                                        \
	do {                                                                     \
		t[n++] = (struct titan_tensor_span){o, (numel), (nd)};           \
		o += ((numel) + 15) / 16 * 16;                                   \
	} while (0)
	MT_ADD(V * C, true);
	for (int l = 0; l < 16; l++)
		for (int i = 0; i < 9; i++)
			MT_ADD(layer[i], layer[i] == C);
	MT_ADD(C, true);
	MT_ADD(V * C, false);
#undef MT_ADD
	*total = o;
	return n;
}

/* The model-sized case (TITAN_CUDA_TEST_LARGE): the 1B table, inputs set
 * on the device (every element the same), the multi-tensor ops against
 * the per-tensor ones in a loop (what titan_llama_grad_sumsq and
 * titan_llama_adamw ran before: 147 launches each, and a synchronisation
 * per sum), timed with TITAN_CUDA_TEST_TIME. */
static void test_multi_tensor_large(void **state)
{
	struct titan_tensor_span t[160];
	int64_t total;
	const int n = mt_llama_1b(t, &total);
	const struct titan_adamw_hparams hp = {3e-4, 0.9, 0.95, 1e-8, 0.1};
	struct titan_backend *be = &g.cu[0];
	double sum[160], loop[160];
	const float gv = 1e-3f;

	(void)state;
	need_gpu();
	if (!g.large) {
		printf("# skip reason: TITAN_CUDA_TEST_LARGE=1 runs it\n");
		skip();
	}
	begin_case("multi_tensor", 100, "Llama 3.2 1B: %d tensors, %lld floats", n,
		   (long long)total);
	const size_t nn = (size_t)total * 4;
	float *p_ = dnew(nn), *m_ = dnew(nn), *v_ = dnew(nn), *g_ = dnew(nn);
	const size_t blk = (size_t)1 << 22;
	float *gh = FALLOC(blk), *ph = FALLOC(blk);
	for (size_t i = 0; i < blk; i++)
		gh[i] = gv, ph[i] = 0.02f;
	/* p = 0.02, g = 1e-3 (16-MB copies), m = v = 0 */
	for (size_t o = 0; o < (size_t)total; o += blk) {
		const size_t k = (size_t)total - o < blk ? (size_t)total - o : blk;

		dcopy(p_ + o, ph, k * 4);
		dcopy(g_ + o, gh, k * 4);
	}
	dsync();
	CU(be->ops->buf_memset(be, m_, 0, nn));
	CU(be->ops->buf_memset(be, v_, 0, nn));
	CU(be->ops->sumsq_multi(be, sum, g_, t, n));
	CU(titan_sumsq_multi_loop(be, loop, g_, t, n));
	mt_check_sums("sums vs cuda's sumsq", sum, loop, t, n, 1e-12);
	for (int i = 0; i < n; i++)
		loop[i] = (double)t[i].numel * ((double)gv * gv);
	mt_check_sums("sums vs numel·g²", sum, loop, t, n, 1e-12);
	/* one step: the first and last element of every tensor as the cpu's
	 * step of one element with the tensor's weight decay */
	CU(be->ops->adamw_multi(be, p_, m_, v_, g_, t, n, &hp, 1, 0.5f));
	float one[2][3], dev[3][2 * 160], cpu[3][2 * 160];
	for (int nd = 0; nd < 2; nd++) {
		struct titan_adamw_hparams h = hp;

		h.weight_decay = nd ? 0.0 : hp.weight_decay;
		one[nd][0] = 0.02f, one[nd][1] = 0.0f, one[nd][2] = 0.0f;
		CPU(g.cpu.ops->adamw_step(&g.cpu, &one[nd][0], &one[nd][1], &one[nd][2], &gv, 1, &h,
					  1, 0.5f));
	}
	for (int i = 0; i < n; i++)
		for (int e = 0; e < 2; e++) {
			const int64_t at = t[i].offset + (e ? t[i].numel - 1 : 0);
			float *const src[3] = {p_, m_, v_};

			for (int a = 0; a < 3; a++) {
				dget(&dev[a][2 * i + e], src[a] + at, sizeof(float));
				cpu[a][2 * i + e] = one[t[i].no_decay][a];
			}
		}
	check("p (first and last elements)", dev[0], cpu[0], (size_t)(2 * n), TOL);
	check("m (first and last elements)", dev[1], cpu[1], (size_t)(2 * n), TOL);
	check("v (first and last elements)", dev[2], cpu[2], (size_t)(2 * n), TOL);
	TIME_OP("sumsq_multi", "fp32", 0.0, (double)nn, "n·4 B, all tensors, one sync",
		be->ops->sumsq_multi(be, sum, g_, t, n));
	TIME_OP("sumsq (loop)", "fp32", 0.0, (double)nn, "n·4 B, a sync per tensor",
		titan_sumsq_multi_loop(be, loop, g_, t, n));
	TIME_OP("adamw_multi", "fp32", 0.0, 7.0 * (double)nn, "7·n·4 B, one launch",
		be->ops->adamw_multi(be, p_, m_, v_, g_, t, n, &hp, 2, 0.5f));
	TIME_OP("adamw_step (loop)", "fp32", 0.0, 7.0 * (double)nn, "7·n·4 B, a launch per tensor",
		titan_adamw_multi_loop(be, p_, m_, v_, g_, t, n, &hp, 2, 0.5f));
	dfree(p_), dfree(m_), dfree(v_), dfree(g_);
	free(gh), free(ph);
}

/* ------------------------------------------------- scale, add, copy, zero */

static const struct vec_case vec_cases[] = {
	{1, 0, false},      {37, 1, false},          {16385, 0, false},
	{100003, 1, false}, {(1 << 20) + 1, 0, false}, {4096 * 5632, 0, true},
};

/* One fp32 rounding or none: bit-identical to the CPU, add also in place
 * over either input. */
static void test_vector_ops(void **state)
{
	(void)state;
	need_gpu();
	for (size_t ci = 0; ci < LEN(vec_cases); ci++) {
		const struct vec_case *k = &vec_cases[ci];
		const int64_t n = k->n, off = k->off;
		const size_t nn = (size_t)n * 4, nb = (size_t)(n + off) * 4;
		const float alpha = 0.37f;

		if (k->large && !g.large)
			continue;
		begin_case("vector", ci, "n=%lld%s", (long long)n, off ? " unaligned" : "");
		float *a = FALLOC(n), *b = FALLOC(n);
		fill(a, (size_t)n, 1.0f);
		fill(b, (size_t)n, 1.0f);
		float *s = fdup(a, (size_t)n), *y = FALLOC(n), *cp = FALLOC(n), *z = fdup(a, (size_t)n);
		const struct titan_backend_ops *o = g.cpu.ops;
		CPU(o->scale(&g.cpu, s, n, alpha));
		CPU(o->add(&g.cpu, y, a, b, n));
		CPU(o->copy(&g.cpu, cp, a, n));
		CPU(o->zero(&g.cpu, z, n));

		struct titan_backend *be = &g.cu[0];
		float *ab = dnew(nb), *bb = dnew(nb), *yb = dnew(nb), *tb = dnew(nb);
		float *a_ = ab + off, *b_ = bb + off, *y_ = yb + off, *t_ = tb + off;
		float *got = FALLOC(n);
		dset(a_, a, nn);
		dset(b_, b, nn);

		snprintf(g.op, sizeof(g.op), "scale");
		set_label(NULL);
		dset(t_, a, nn);
		CU(be->ops->scale(be, t_, n, alpha));
		dget(got, t_, nn);
		check_exact("x", got, s, (size_t)n);

		snprintf(g.op, sizeof(g.op), "add");
		set_label(NULL);
		CU(be->ops->add(be, y_, a_, b_, n));
		dget(got, y_, nn);
		check_exact("y", got, y, (size_t)n);
		dset(t_, a, nn);
		CU(be->ops->add(be, t_, t_, b_, n));
		dget(got, t_, nn);
		check_exact("y (aliasing a)", got, y, (size_t)n);
		dset(t_, b, nn);
		CU(be->ops->add(be, t_, a_, t_, n));
		dget(got, t_, nn);
		check_exact("y (aliasing b)", got, y, (size_t)n);

		snprintf(g.op, sizeof(g.op), "copy");
		set_label(NULL);
		dpoison(y_, nn);
		CU(be->ops->copy(be, y_, a_, n));
		dget(got, y_, nn);
		check_exact("dst", got, cp, (size_t)n);

		snprintf(g.op, sizeof(g.op), "zero");
		set_label(NULL);
		dpoison(t_, nn);
		CU(be->ops->zero(be, t_, n));
		dget(got, t_, nn);
		check_exact("x", got, z, (size_t)n);

		if (k->large) {
			const double bn = (double)nn;

			TIME_OP("scale", "fp32", 0.0, 2.0 * bn, "2·n·4 B",
				be->ops->scale(be, t_, n, 1.0f));
			TIME_OP("add", "fp32", 0.0, 3.0 * bn, "3·n·4 B",
				be->ops->add(be, y_, a_, b_, n));
			TIME_OP("copy", "fp32", 0.0, 2.0 * bn, "2·n·4 B",
				be->ops->copy(be, y_, a_, n));
			TIME_OP("zero", "fp32", 0.0, bn, "n·4 B", be->ops->zero(be, t_, n));
		}
		dfree(ab), dfree(bb), dfree(yb), dfree(tb);
		free(a), free(b), free(s), free(y), free(cp), free(z), free(got);
	}
}

/* The buffer ops on device memory against their CPU twin on host memory
 * (test_ops.c test_buffer_ops): the same calls, the same bytes after
 * each; the guards catch a write past a buffer. */
static void test_buffer_ops(void **state)
{
	enum { SR = 41, SC = 53, DR = 41, DC = 48, NB = SR * SC * 4 };
	static const struct { int64_t dst_off, dst_stride, src_off, src_stride, rows, width; }
		rc_cases[] = {
			{1, DC, SC + 2, SC, 30, 40},  /* strided both sides */
			{3, 40, 5, 40, 35, 40},       /* contiguous: one block */
			{0, DC, 0, SC, 0, 40},        /* 0 rows */
			{0, DC, 0, SC, 5, 0},         /* 0 width */
			{7, DC, 1, 1, 20, 1},         /* one column */
		};

	(void)state;
	need_gpu();
	begin_case("buffers", 0, "%dx%d -> %dx%d", SR, SC, DR, DC);
	struct titan_backend *be = &g.cu[0], *cpu = &g.cpu;
	const struct titan_backend_ops *o = be->ops, *c = cpu->ops;
	float *src = FALLOC(SR * SC), *want = FALLOC(DR * DC), *got = FALLOC(DR * DC);
	enum titan_mem_tag tag;

	fill(src, SR * SC, 1.0f);
	/* alloc: the device allocator under the caller's tag */
	void *a = o->buf_alloc(be, 1000, TITAN_MEM_COMM);
	assert_non_null(a);
	assert_int_equal(titan_mem_size(g.dev, a, &tag), 1000);
	assert_int_equal(tag, TITAN_MEM_COMM);
	o->buf_free(be, a);
	o->buf_free(be, NULL);

	float *sd = dnew(NB), *dd = dnew((size_t)DR * DC * 4);

	/* set / get round trip at an odd byte offset, then against a plain copy */
	snprintf(g.op, sizeof(g.op), "buf_set/get");
	set_label(NULL);
	CU(o->buf_set(be, (char *)sd + 3, src, NB - 3));
	memset(got, 0, (size_t)DR * DC * 4);
	CU(o->buf_get(be, got, (char *)sd + 3, (size_t)DR * DC * 4));
	check_exact("round trip", got, src, DR * DC);
	CU(o->buf_set(be, sd, src, NB));
	dget(got, sd, (size_t)DR * DC * 4);
	check_exact("set", got, src, DR * DC);

	snprintf(g.op, sizeof(g.op), "buf_copy");
	set_label(NULL);
	dpoison(dd, (size_t)DR * DC * 4);
	CU(o->buf_copy(be, dd, sd, (size_t)DR * DC * 4));
	CU(o->buf_get(be, got, dd, (size_t)DR * DC * 4));
	check_exact("dst", got, src, DR * DC);

	snprintf(g.op, sizeof(g.op), "buf_memset");
	set_label(NULL);
	memcpy(want, src, (size_t)DR * DC * 4);
	CPU(c->buf_memset(cpu, want + 5, 0, 100 * 4));
	CPU(c->buf_memset(cpu, want + 200, 0x3f, 17));
	CU(o->buf_set(be, dd, src, (size_t)DR * DC * 4));
	CU(o->buf_memset(be, dd + 5, 0, 100 * 4));
	CU(o->buf_memset(be, dd + 200, 0x3f, 17));
	CU(o->buf_memset(be, dd, 0x11, 0));
	CU(o->buf_get(be, got, dd, (size_t)DR * DC * 4));
	check_exact("dst", got, want, DR * DC);

	snprintf(g.op, sizeof(g.op), "buf_copy_rows");
	for (size_t i = 0; i < LEN(rc_cases); i++) {
		const int64_t *k = &rc_cases[i].dst_off;

		snprintf(g.shape, sizeof(g.shape), "rows %lld width %lld", (long long)k[4],
			 (long long)k[5]);
		set_label(NULL);
		for (int j = 0; j < DR * DC; j++)
			want[j] = -(float)j;
		CPU(c->buf_copy_rows(cpu, want, k[0], k[1], src, k[2], k[3], k[4], k[5]));
		CU(o->buf_set(be, dd, want, 0)); /* 0 bytes: nothing */
		for (int j = 0; j < DR * DC; j++)
			got[j] = -(float)j;
		CU(o->buf_set(be, dd, got, (size_t)DR * DC * 4));
		CU(o->buf_copy_rows(be, dd, k[0], k[1], sd, k[2], k[3], k[4], k[5]));
		CU(o->buf_get(be, got, dd, (size_t)DR * DC * 4));
		check_exact("dst", got, want, DR * DC);
	}
	assert_int_equal(o->buf_copy_rows(be, dd, 0, 3, sd, 0, SC, 2, 5), TITAN_E_INVALID);
	dfree(sd), dfree(dd);
	free(src), free(want), free(got);
}

/* ---------------------------------------------------------------- setup */

/* ---------------------------------------------------- vocabulary parts */

/* The TP pieces (embedding_part_*, ce_part_*) against the CPU's: the
 * embedding ones bit for bit (copies, and sums in token order), the loss
 * ones within TOL (expf, log); a part in the middle of the vocabulary, ids
 * and labels on both sides of it and ignored (-1) labels. */
static void test_vocab_parts(void **state)
{
	enum { N = 37, C = 48, VG = 100, V0 = 30, V = 40 };
	const float gs = 0.125f;

	(void)state;
	need_gpu();
	begin_case("vocab_parts", 0, "N=%d C=%d V=%d of %d at %d", N, C, V, VG, V0);
	struct titan_backend *be = &g.cu[0], *cpu = &g.cpu;
	uint32_t ids[N];
	int32_t lab[N];
	for (int i = 0; i < N; i++) {
		ids[i] = i % 6 == 5 ? ids[0] : draw_below(VG);
		lab[i] = i % 7 == 3 ? -1 : (int32_t)draw_below(VG);
	}
	lab[1] = V0; /* the part's first and last columns */
	lab[2] = V0 + V - 1;
	float *w = FALLOC(V * C), *dx = FALLOC(N * C), *dw0 = FALLOC(V * C);
	float *out = FALLOC(N * C), *dw = FALLOC(V * C), *got = FALLOC(N * C > N * V ? N * C : N * V);
	fill(w, V * C, 1.0f);
	fill(dx, N * C, 1.0f);
	fill(dw0, V * C, 1.0f);
	memcpy(dw, dw0, sizeof(float) * V * C);
	CPU(cpu->ops->embedding_part_fwd(cpu, out, ids, w, N, V0, V, C));
	CPU(cpu->ops->embedding_part_bwd(cpu, dw, ids, dx, N, V0, V, C));
	uint32_t *ids_ = dput(ids, sizeof(ids));
	float *w_ = dput(w, sizeof(float) * V * C), *dx_ = dput(dx, sizeof(float) * N * C);
	float *out_ = dnew(sizeof(float) * N * C), *dw_ = dput(dw0, sizeof(float) * V * C);
	snprintf(g.op, sizeof(g.op), "embedding_part");
	set_label(NULL);
	CU(be->ops->embedding_part_fwd(be, out_, ids_, w_, N, V0, V, C));
	dget(got, out_, sizeof(float) * N * C);
	check_exact("out", got, out, N * C);
	CU(be->ops->embedding_part_bwd(be, dw_, ids_, dx_, N, V0, V, C));
	dget(got, dw_, sizeof(float) * V * C);
	check_exact("dw+=", got, dw, V * C);

	/* the loss steps, on logits z [N,V] */
	for (int grads = 0; grads < 2; grads++) {
		float *z = FALLOC(N * V), *mx = FALLOC(N), *stf = FALLOC(2 * N), *gotst = FALLOC(2 * N);
		double st[2 * N], dst[2 * N];
		fill(z, N * V, 2.0f);
		float *z_ = dput(z, sizeof(float) * N * V), *mx_ = dnew(sizeof(float) * N);
		int32_t *lab_ = dput(lab, sizeof(lab));
		double *st_ = dnew(sizeof(st));
		snprintf(g.op, sizeof(g.op), "ce_part%s", grads ? " grads" : "");
		set_label(NULL);
		CPU(cpu->ops->ce_part_max(cpu, mx, z, N, V));
		CU(be->ops->ce_part_max(be, mx_, z_, N, V));
		dget(got, mx_, sizeof(float) * N);
		check_exact("mx", got, mx, N);
		for (int step = 0; step < 2; step++) { /* exp, then grad: st and z after each */
			if (step == 0) {
				CPU(cpu->ops->ce_part_exp(cpu, st, z, mx, lab, V0, N, V));
				CU(be->ops->ce_part_exp(be, st_, z_, mx_, lab_, V0, N, V));
			} else {
				CPU(cpu->ops->ce_part_grad(cpu, st, z, mx, lab, V0, N, V, gs, grads));
				CU(be->ops->ce_part_grad(be, st_, z_, mx_, lab_, V0, N, V, gs, grads));
			}
			dget(dst, st_, sizeof(st));
			for (int i = 0; i < 2 * N; i++)
				stf[i] = (float)st[i], gotst[i] = (float)dst[i];
			check(step ? "row losses" : "exp sums", gotst, stf, 2 * N, TOL);
			dget(got, z_, sizeof(float) * N * V);
			check(step ? "dz" : "exp", got, z, N * V, TOL);
		}
		dfree(z_), dfree(mx_), dfree(lab_), dfree(st_);
		free(z), free(mx), free(stf), free(gotst);
	}
	dfree(ids_), dfree(w_), dfree(dx_), dfree(out_), dfree(dw_);
	free(w), free(dx), free(dw0), free(out), free(dw), free(got);
}


static int group_setup(void **state)
{
	struct titan_mem_backend mb;
	const char *s;
	int n = 0, rc;

	(void)state;
	g.require = env_on("TITAN_CUDA_TEST_REQUIRE");
	g.large = env_on("TITAN_CUDA_TEST_LARGE");
	g.time = env_on("TITAN_CUDA_TEST_TIME");
	if (!titan_cuda_built()) {
		snprintf(g.why, sizeof(g.why), "built without CUDA");
		return 0;
	}
	titan_error_clear();
	if ((rc = titan_cuda_device_count(&n)) < 0 || n == 0) {
		snprintf(g.why, sizeof(g.why), "no CUDA device or driver (%s)",
			 rc < 0 ? titan_errmsg() : "0 devices");
		return 0;
	}
	if ((s = getenv("TITAN_CUDA_TEST_SEED")) && *s) {
		char *end;

		errno = 0;
		g.seed = strtoull(s, &end, 0);
		if (*end || errno || end == s) {
			snprintf(g.broken, sizeof(g.broken),
				 "TITAN_CUDA_TEST_SEED='%s' is not a number", s);
			return 0;
		}
	} else {
		g.seed = titan_unix_time_ns() ^ ((uint64_t)getpid() << 40);
	}
	printf("# seed %" PRIu64 " (TITAN_CUDA_TEST_SEED=%" PRIu64 " repeats these inputs)\n",
	       g.seed, g.seed);
	if (titan_cuda_device_info(0, &g.info) < 0 || titan_cuda_mem_backend(0, &mb) < 0 ||
	    !(g.dev = titan_allocator_new("cuda:0", &mb))) {
		snprintf(g.broken, sizeof(g.broken), "device 0 memory: %s", titan_errmsg());
		return 0;
	}
	for (int m = 0; m < NMODES; m++) {
		const struct titan_cuda_opts o = {.device = 0, .matmul = mode_enum[m]};

		if (titan_backend_cuda_init(&g.cu[m], &o, g.dev) < 0) {
			snprintf(g.broken, sizeof(g.broken), "titan_backend_cuda_init (%s): %s",
				 mode_name[m], titan_errmsg());
			return 0;
		}
		g.cu_ok[m] = true;
		if (strcmp(g.cu[m].ops->name, "cuda") != 0) {
			snprintf(g.broken, sizeof(g.broken), "the CUDA backend is named '%s'",
				 g.cu[m].ops->name);
			return 0;
		}
	}
	/* the bf16 backend runs titan's attention kernels in every test but
	 * test_attention_cudnn (cuDNN's would be its default) */
	{
		struct titan_cuda_attn_info ai;

		if (titan_cuda_attention_info(&g.cu[2], &ai) < 0 ||
		    titan_cuda_set_attention(&g.cu[2], TITAN_CUDA_ATTN_TITAN) < 0) {
			snprintf(g.broken, sizeof(g.broken), "cuDNN attention set-up: %s",
				 titan_errmsg());
			return 0;
		}
		g.dnn = ai.cudnn;
		snprintf(g.dnn_why, sizeof(g.dnn_why), "%s", ai.why);
		if (ai.cudnn)
			printf("# cuDNN attention: cuDNN %d.%d.%d\n", ai.version / 10000,
			       ai.version / 100 % 100, ai.version % 100);
		else
			printf("# cuDNN attention: unavailable (%s)\n", ai.why);
	}
	if (titan_backend_cpu_init(&g.cpu, 0) < 0) {
		snprintf(g.broken, sizeof(g.broken), "titan_backend_cpu_init: %s", titan_errmsg());
		return 0;
	}
	g.cpu_ok = true;
	if (!(g.poison = malloc(POISON_WORDS * sizeof(uint32_t)))) {
		snprintf(g.broken, sizeof(g.broken), "out of host memory");
		return 0;
	}
	for (size_t i = 0; i < POISON_WORDS; i++)
		g.poison[i] = POISON;
	printf("# device 0: %s (cc %d.%d, %d SMs, %.1f GiB); cpu oracle on %d threads; large "
	       "cases %s; timings %s\n", g.info.name, g.info.cc_major, g.info.cc_minor,
	       g.info.sm_count, (double)g.info.total_memory / (1 << 30), g.cpu.nthreads,
	       g.large ? "on" : "off (TITAN_CUDA_TEST_LARGE=1)",
	       g.time ? "on" : "off (TITAN_CUDA_TEST_TIME=1)");
	fflush(stdout);
	g.gpu = true;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	print_timings();
	for (int m = 0; m < NMODES; m++)
		if (g.cu_ok[m])
			titan_backend_release(&g.cu[m]);
	if (g.cpu_ok)
		titan_backend_release(&g.cpu);
	titan_allocator_free(g.dev);
	free(g.poison);
	return 0;
}

int main(void)
{
	const char *only = getenv("TITAN_CUDA_TEST_ONLY");

	setvbuf(stdout, NULL, _IOLBF, 0); /* progress through a pipe (make cuda-test | tee) */
	if (only && *only)
		cmocka_set_test_filter(only);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matmul),
		cmocka_unit_test(test_embedding),
		cmocka_unit_test(test_rmsnorm),
		cmocka_unit_test(test_rope),
		cmocka_unit_test(test_swiglu),
		cmocka_unit_test(test_attention),
		cmocka_unit_test(test_attention_cudnn_graph),
		cmocka_unit_test(test_attention_cudnn),
		cmocka_unit_test(test_attention_part),
		cmocka_unit_test(test_attention_docs),
		cmocka_unit_test(test_classifier_ce),
		cmocka_unit_test(test_adamw),
		cmocka_unit_test(test_sumsq),
		cmocka_unit_test(test_multi_tensor),
		cmocka_unit_test(test_multi_tensor_large),
		cmocka_unit_test(test_vector_ops),
		cmocka_unit_test(test_buffer_ops),
		cmocka_unit_test(test_vocab_parts),
	};
	return cmocka_run_group_tests_name("cuda_ops", tests, group_setup, group_teardown);
}
