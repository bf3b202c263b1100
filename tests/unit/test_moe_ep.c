/* test_moe_ep.c — expert parallelism's dispatch (lib/train/moe.c
 * titan_moe_dispatch_ep): P ranks, each with N tokens and E/P whole
 * experts, reproduce one rank running every expert on the P·N tokens —
 * the block's output and input gradient per token, each local expert's
 * weight gradients, the gate's and the shared experts' gradients summed
 * over the ranks — for sigmoid routing with the scores after the experts
 * and softmax routing with route_norm and the scores before them.  Run
 * plainly it checks EP 1 (the EP path over a one-rank communicator);
 * test_ranks runs the same under `mpiexec -n 2` and `-n 4` (this program
 * with --ranks).  The split backward of the zero-bubble schedules
 * (titan_moe_bwd keeping, then titan_moe_wgrad) gives the same bits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "titan/config.h"
#include "titan/core.h"
#include "titan/dist.h"
#include "titan/ops.h"
#include "train/moe.h"

#include "mpi_ranks.h"

enum { N = 5, C = 8, FM = 6, E = 4, K = 2 };

static float *fz(int64_t n)
{
	float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));

	assert_non_null(p);
	return p;
}

/* Deterministic values in [-0.5, 0.5) that differ per buffer and index. */
static void fill(float *x, int64_t n, int salt)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)(((i * 37 + salt * 101) % 97) / 97.0 - 0.5);
}

struct run {
	struct moe_acts a;
	struct moe_scratch s;
	float *y, *dx;
	float *dw[7]; /* w1, w2, w3, gate, sw1, sw2, sw3 */
};

/* One MoE forward and backward of n tokens over the experts of w; with
 * `split` the backward as the zero-bubble schedules run it: the input
 * pass (no weight gradients, their operands kept), then the weight pass. */
static void run_moe(const struct titan_moe *m, const struct moe_w *w, const float *x,
		    const float *h, const float *dy, struct run *r, int64_t P, bool split)
{
	const int64_t n = m->n, R = n * K, Rx = titan_moe_expert_rows(m), El = E / P;
	const int64_t Fs = FM * m->d->num_shared_experts, W = FM * C;
	struct moe_acts *a = &r->a;

	memset(r, 0, sizeof(*r));
	a->scores = fz(n * E);
	a->topw = fz(n * K);
	a->topi = calloc((size_t)(n * K), sizeof(int32_t));
	a->perm = calloc((size_t)R, sizeof(int32_t));
	a->pos = calloc((size_t)R, sizeof(int32_t));
	a->counts = calloc(E, sizeof(int32_t));
	a->xin = fz(Rx * C);
	a->a = fz(Rx * FM);
	a->b = fz(Rx * FM);
	a->g = fz(Rx * FM);
	a->yout = fz(Rx * C);
	a->sa = fz(n * Fs);
	a->sb = fz(n * Fs);
	a->sg = fz(n * Fs);
	if (m->ep) {
		a->ecounts = calloc((size_t)El, sizeof(int32_t));
		a->ep_n = calloc((size_t)(P * El), sizeof(int64_t));
		a->ep_sc = calloc((size_t)P, sizeof(int64_t));
		a->ep_rc = calloc((size_t)P, sizeof(int64_t));
		a->yret = fz(R * C);
	}
	r->s = (struct moe_scratch){ fz(Rx * C), fz(Rx * FM), fz(n * E), fz(n * K) };
	r->y = fz(n * C);
	r->dx = fz(n * C);
	for (int i = 0; i < 7; i++)
		r->dw[i] = fz(i == 3 ? E * C : i < 3 ? E * W : Fs * C); /* room for all experts */
	assert_int_equal(titan_moe_fwd(m, w, x, h, r->y, a, NULL), 0);
	struct moe_dw dw = { r->dw[0], r->dw[1], r->dw[2], r->dw[3], r->dw[4], r->dw[5],
			     r->dw[6] };

	if (!split) {
		assert_int_equal(titan_moe_bwd(m, w, &dw, x, dy, r->dx, a, &r->s, NULL), 0);
		return;
	}
	struct moe_keep k = { fz(Rx * C), fz(n * E) };

	assert_int_equal(titan_moe_bwd(m, w, &(struct moe_dw){ 0 }, x, dy, r->dx, a, &r->s, &k),
			 0);
	assert_int_equal(titan_moe_wgrad(m, &dw, x, dy, a, &k), 0);
	free(k.drow);
	free(k.dlogit);
}

static void free_run(struct run *r)
{
	struct moe_acts *a = &r->a;
	void *p[] = { a->scores, a->topw, a->topi, a->perm, a->pos, a->counts, a->xin, a->a,
		      a->b, a->g, a->yout, a->sa, a->sb, a->sg, a->ecounts, a->ep_n, a->ep_sc,
		      a->ep_rc, a->yret, r->s.drow, r->s.dg, r->s.dlogit, r->s.dtopw, r->y,
		      r->dx };

	for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
		free(p[i]);
	for (int i = 0; i < 7; i++)
		free(r->dw[i]);
}

/* max |a - b| <= 1e-5 · max(1, max |b|) */
static void close_to(const float *a, const float *b, int64_t n, const char *what)
{
	double d = 0, mx = 1;

	for (int64_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - b[i]));
		mx = fmax(mx, fabs((double)b[i]));
	}
	if (d > 1e-5 * mx)
		fail_msg("%s: max difference %g", what, d);
}

static void check_ep(struct titan_comm *comm, bool before)
{
	const int64_t P = titan_comm_size(comm), rank = titan_comm_rank(comm), El = E / P;
	const int64_t W = FM * C, NT = P * N;
	struct titan_backend be;
	struct titan_moe_dims d = { .num_experts = E, .num_shared_experts = 1, .top_k = K,
				    .inter_dim = FM, .softmax = before, .route_norm = before,
				    .score_before_experts = before, .route_scale = 1.5 };
	float *w[8], *x = fz(NT * C), *h = fz(NT * C), *dy = fz(NT * C);
	const int64_t sz[8] = { E * W, E * W, E * W, E * C, W, W, W, E };
	struct run ref, ep;

	assert_true(E % P == 0);
	assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
	for (int i = 0; i < 8; i++) {
		w[i] = fz(sz[i]);
		fill(w[i], sz[i], i + 1);
	}
	for (int64_t e = 0; e < E; e++) /* a bias that moves the choice */
		w[7][e] = 0.05f * (float)e;
	fill(x, NT * C, 11);
	fill(dy, NT * C, 12);
	fill(h, NT * C, 9);
	/* one rank: every expert, every token */
	struct titan_moe one = { &be, &titan_moe_dispatch_local, &d, NT, C, NULL, 1, 0, 0 };

	run_moe(&one, &(struct moe_w){ w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7] }, x, h,
		dy, &ref, 1, false);
	/* this rank: its tokens and its experts */
	struct titan_moe_ep epd = { comm, P, rank, fz(N * K * C), fz(N * K * P * C), rank * El };
	struct titan_moe m = { &be, &titan_moe_dispatch_ep, &d, N, C, &epd, 1, 0, 0 };
	const int64_t e0 = rank * El;

	run_moe(&m, &(struct moe_w){ w[0] + e0 * W, w[1] + e0 * W, w[2] + e0 * W, w[3], w[4],
				     w[5], w[6], w[7] }, x + rank * N * C, h + rank * N * C,
		dy + rank * N * C, &ep, P, false);
	close_to(ep.y, ref.y + rank * N * C, N * C, "y");
	close_to(ep.dx, ref.dx + rank * N * C, N * C, "dx");
	close_to(ep.dw[0], ref.dw[0] + e0 * W, El * W, "d w1");
	close_to(ep.dw[1], ref.dw[1] + e0 * W, El * W, "d w2");
	close_to(ep.dw[2], ref.dw[2] + e0 * W, El * W, "d w3");
	/* the same given the whole stacked experts (w_expert0 0, as the engine) */
	struct run full;

	epd.w_expert0 = 0;
	run_moe(&m, &(struct moe_w){ w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7] },
		x + rank * N * C, h + rank * N * C, dy + rank * N * C, &full, P, false);
	close_to(full.y, ep.y, N * C, "y (whole experts)");
	close_to(full.dw[1] + e0 * W, ep.dw[1], El * W, "d w2 (whole experts)");
	/* the split backward (titan_moe_wgrad from the kept operands): the
	 * input gradient and every weight gradient bit for bit */
	struct run spl;

	run_moe(&m, &(struct moe_w){ w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7] },
		x + rank * N * C, h + rank * N * C, dy + rank * N * C, &spl, P, true);
	assert_memory_equal(spl.dx, full.dx, (size_t)(N * C) * sizeof(float));
	for (int i = 0; i < 7; i++)
		assert_memory_equal(spl.dw[i], full.dw[i], (size_t)(i == 3 ? E * C : i < 3 ?
				    E * W : W) * sizeof(float));
	free_run(&spl);
	free_run(&full);
	/* the gate and the shared experts: partial sums over this rank's tokens */
	for (int i = 3; i < 7; i++) {
		const int64_t n = i == 3 ? E * C : W;

		assert_int_equal(titan_comm_all_reduce(comm, TITAN_IN_PLACE, ep.dw[i], (size_t)n,
						       TITAN_DTYPE_F32, TITAN_REDOP_SUM, "dw"), 0);
		close_to(ep.dw[i], ref.dw[i], n, i == 3 ? "d gate" : "d shared");
	}
	/* the loads: this rank's routing counts summed are the one rank's */
	int64_t cnt[E], all[E];

	for (int64_t e = 0; e < E; e++)
		cnt[e] = ep.a.counts[e];
	assert_int_equal(titan_comm_all_reduce(comm, cnt, all, E, TITAN_DTYPE_I64,
					       TITAN_REDOP_SUM, "loads"), 0);
	for (int64_t e = 0; e < E; e++)
		assert_int_equal(all[e], ref.a.counts[e]);
	free_run(&ref);
	free_run(&ep);
	free(epd.sbuf);
	free(epd.rbuf);
	for (int i = 0; i < 8; i++)
		free(w[i]);
	free(x);
	free(h);
	free(dy);
	titan_backend_release(&be);
}

static int world_up(void **state)
{
	struct titan_dist *d = NULL;
	int argc = 1, rc;
	char *args[] = {"test_moe_ep", NULL}, **argv = args;

	if ((rc = titan_dist_init(&argc, &argv, &d)) < 0)
		return rc;
	titan_dist_set_timeout(d, 60);
	*state = d;
	return 0;
}

static int world_down(void **state)
{
	titan_dist_finalize(*state, true, 0);
	return 0;
}

static void test_ep(void **state)
{
	struct titan_dist *d = *state;

	check_ep(d->comm[TITAN_DIM_WORLD], false);
	check_ep(d->comm[TITAN_DIM_WORLD], true);
}

/* The same under mpiexec -n 2 and -n 4: this program again with --ranks. */
static void test_ranks(void **state)
{
	(void)state;
	mpi_ranks_run(2);
	mpi_ranks_run(4);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ep),
		cmocka_unit_test(test_ranks),
	};
	const struct CMUnitTest ranks[] = {
		cmocka_unit_test(test_ep),
	};

	if (argc > 1 && !strcmp(argv[1], "--ranks"))
		return cmocka_run_group_tests_name("test_moe_ep --ranks", ranks, world_up,
						   world_down);
	setenv("TITAN_MPI", "0", 1); /* one process, even if a launcher started it */
	return cmocka_run_group_tests(tests, world_up, world_down);
}
