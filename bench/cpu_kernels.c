/* cpu_kernels.c — the CPU backend's non-GEMM ops on each compiled path
 * (baseline, AVX2, AVX-512: lib/cpu/isa.c) at the 25M model's shapes (dim
 * 512, FFN 1536, 8 heads / 4 KV heads of 64, vocab 8192, batch 4 × seq
 * 512), the paths interleaved round by round so that a shared machine's
 * noise hits them alike; prints the best time per call of each.
 * Built and run by bench/cpu_kernels.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "titan/core.h"
#include "titan/ops.h"
#include "titan/train.h" /* TITAN_CE_CHUNK */
#include "cpu/cpu_impl.h"

enum { B = 4, T = 512, N = B * T, C = 512, F = 1536, H = 8, HKV = 4, HD = 64, V = 8192 };
#define NPARAM 33579520 /* the 25M model's parameters (titan-config --summary) */

static struct titan_backend be;
static float *x, *y, *w, *dy, *dx, *dw, *rstd, *a, *b, *g, *h2, *fr, *q, *k, *v, *o, *lse;
static float *dq, *dk, *dv, *pp, *pm, *pv, *pg, *wc;
static int32_t *labels;

static float *buf(size_t n)
{
	float *p = malloc(n * sizeof(float));
	if (!p) {
		perror("malloc");
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		p[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 1000.0f;
	return p;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void check(int rc)
{
	if (rc < 0) {
		fprintf(stderr, "cpu_kernels: %s\n", titan_errmsg());
		exit(1);
	}
}

/* the RoPE loop before it had a path per ISA (scalar pairs) */
static void rope_scalar(float *xr, const float *fc, int64_t nh, int64_t hd)
{
	for (int64_t hh = 0; hh < nh; hh++) {
		float *p = xr + hh * hd;
		for (int64_t i = 0; i < hd / 2; i++) {
			float aa = p[2 * i], bb = p[2 * i + 1], c = fc[2 * i], s = fc[2 * i + 1];
			p[2 * i] = aa * c - bb * s;
			p[2 * i + 1] = aa * s + bb * c;
		}
	}
}

static void op_rmsnorm_fwd(void) { check(be.ops->rmsnorm_fwd(&be, y, rstd, x, w, N, C, 1e-5f)); }
static void op_rmsnorm_bwd(void) { check(be.ops->rmsnorm_bwd(&be, dx, dw, dy, x, w, rstd, N, C, false)); }
static void op_swiglu_fwd(void) { check(be.ops->swiglu_fwd(&be, h2, a, b, (int64_t)N * F)); }
static void op_swiglu_bwd(void) { check(be.ops->swiglu_bwd(&be, a, b, g, h2, h2, (int64_t)N * F)); }
static void op_rope_fwd(void) { check(be.ops->rope_fwd(&be, q, fr, B, T, H, HD)); }
static void op_rope_bwd(void) { check(be.ops->rope_bwd(&be, q, fr, B, T, H, HD)); }
static void op_rope_old(void)
{
	#pragma omp parallel for num_threads(be.nthreads) schedule(static)
	for (int64_t r = 0; r < N; r++)
		rope_scalar(q + r * H * HD, fr + (r % T) * HD, H, HD);
}
static void op_add(void) { check(be.ops->add(&be, y, x, dy, (int64_t)N * C)); }
static void op_scale(void) { check(be.ops->scale(&be, y, (int64_t)N * C, 0.999f)); }
static void op_adamw(void)
{
	const struct titan_adamw_hparams hp = {8e-4, 0.9, 0.95, 1e-8, 0.1};
	check(be.ops->adamw_step(&be, pp, pm, pv, pg, NPARAM, &hp, 5, 1.0f));
}
static void op_sumsq(void)
{
	double s;
	check(be.ops->sumsq(&be, &s, pg, NPARAM));
}
static void op_ce(void)
{
	double loss;
	int64_t nv;
	check(be.ops->classifier_ce(&be, &loss, &nv, dx, wc, x, wc, labels, N, C, V, 1.0f / N,
				    TITAN_CE_CHUNK));
}
static void op_attn_fwd(void)
{
	const struct titan_attn_dims d = {B, T, H, HKV, HD};
	check(be.ops->attention_fwd(&be, o, lse, q, k, v, &d));
}
static void op_attn_bwd(void)
{
	const struct titan_attn_dims d = {B, T, H, HKV, HD};
	check(be.ops->attention_bwd(&be, dq, dk, dv, o, q, k, v, o, lse, &d));
}

static const struct {
	const char *name;
	void (*fn)(void);
	int isa_free; /* the same code on every path (a fixed reference) */
} ops[] = {
	{"rmsnorm_fwd", op_rmsnorm_fwd, 0},
	{"rmsnorm_bwd", op_rmsnorm_bwd, 0},
	{"swiglu_fwd", op_swiglu_fwd, 0},
	{"swiglu_bwd", op_swiglu_bwd, 0},
	{"rope_fwd", op_rope_fwd, 0},
	{"rope_bwd", op_rope_bwd, 0},
	{"rope (scalar loop before)", op_rope_old, 1},
	{"add", op_add, 0},
	{"scale", op_scale, 0},
	{"classifier_ce (+3 GEMMs)", op_ce, 0},
	{"adamw (all params)", op_adamw, 0},
	{"sumsq (all grads)", op_sumsq, 0},
	{"attention_fwd", op_attn_fwd, 0},
	{"attention_bwd", op_attn_bwd, 0},
};

int main(int argc, char **argv)
{
	const int rounds = argc > 1 ? atoi(argv[1]) : 5;
	const int threads = argc > 2 ? atoi(argv[2]) : 2;
	const char *only = argc > 3 ? argv[3] : ""; /* ops whose name contains it */
	const int nops = (int)(sizeof(ops) / sizeof(ops[0]));
	const int best = (int)titan_cpu_isa_best();
	double t[sizeof(ops) / sizeof(ops[0])][3];

	check(titan_backend_cpu_init(&be, threads));
	x = buf(N * C), y = buf(N * C), dy = buf(N * C), dx = buf(N * C), w = buf(C), dw = buf(C);
	rstd = buf(N), a = buf((size_t)N * F), b = buf((size_t)N * F), g = buf((size_t)N * F);
	h2 = buf((size_t)N * F), fr = buf(T * HD), q = buf(N * H * HD), k = buf(N * HKV * HD);
	v = buf(N * HKV * HD), o = buf(N * H * HD), lse = buf(B * H * T), dq = buf(N * H * HD);
	dk = buf(N * HKV * HD), dv = buf(N * HKV * HD), wc = buf((size_t)V * C);
	pp = buf(NPARAM), pm = buf(NPARAM), pv = buf(NPARAM), pg = buf(NPARAM);
	for (size_t i = 0; i < NPARAM; i++)
		pv[i] = pv[i] * pv[i];
	check(titan_rope_freqs(fr, T, HD, 500000.0, NULL));
	labels = malloc(N * sizeof(*labels));
	for (int i = 0; i < N; i++)
		labels[i] = (int32_t)(i * 37 % V);
	for (int i = 0; i < nops; i++)
		for (int p = 0; p < 3; p++)
			t[i][p] = 1e30;
	for (int r = 0; r < rounds; r++)
		for (int i = 0; i < nops; i++)
			for (int p = 0; p <= best && strstr(ops[i].name, only); p++) {
				check(titan_cpu_isa_set((enum titan_cpu_isa)p));
				double t0 = now();
				ops[i].fn();
				double dt = now() - t0;
				if (r > 0 && dt < t[i][p]) /* round 0 warms up */
					t[i][p] = dt;
			}
	check(titan_cpu_isa_set((enum titan_cpu_isa)best));
	printf("# best of %d rounds after a warm-up, %d threads, ms per call; paths up to %s\n",
	       rounds - 1, threads, titan_cpu_isa_name((enum titan_cpu_isa)best));
	printf("| op | baseline | avx2 | avx512 |\n|---|---|---|---|\n");
	for (int i = 0; i < nops; i++) {
		if (!strstr(ops[i].name, only))
			continue;
		printf("| %s |", ops[i].name);
		for (int p = 0; p < 3; p++)
			if (p <= best && !(ops[i].isa_free && p > 0))
				printf(" %.3f |", 1e3 * t[i][p]);
			else
				printf(" - |");
		printf("\n");
	}
	return 0;
}
