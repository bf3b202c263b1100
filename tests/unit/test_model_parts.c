/* test_model_parts.c — the private parts the Llama model is assembled
 * from (lib/train): the rank's pipeline stages (stage.h), the
 * sequence-parallel moves on one rank (tp.h) and local attention (cp.h):
 * each the same backend calls, so the same bits, as the model made before
 * they were interfaces.  Their TP and CP implementations run under
 * mpiexec in tests/bats/titan-train-{tp-pp,cp,zb}.bats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/dist.h"
#include "titan/ops.h"
#include "titan/train.h"
#include "../../lib/train/cp.h"
#include "../../lib/train/stage.h"
#include "../../lib/train/tp.h"

static void fill(float *x, int64_t n, uint64_t seed)
{
	struct titan_rng r;

	titan_rng_init(&r, seed, 0);
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)titan_rng_below(&r, 2001) / 1000.0f - 1.0f;
}

static float *bufs(int64_t n)
{
	float *p = calloc((size_t)n, sizeof(float));

	assert_non_null(p);
	return p;
}

static float *no_buf(void *ctx, int64_t nfloats, enum titan_mem_tag tag,
		     enum titan_buf_role role)
{
	(void)ctx, (void)nfloats, (void)tag, (void)role;
	fail_msg("the identity allocates nothing");
	return NULL;
}

/* Without PP: one stage of every block, holding embedding and loss. */
static void test_stages_whole_model(void **state)
{
	const struct titan_pp_stages none = {0};
	struct titan_stages s;

	(void)state;
	titan_stages_init(&s, &none, 6);
	assert_int_equal(s.n, 1);
	assert_false(s.staged);
	assert_true(s.first && s.last);
	assert_int_equal(s.v[0].l0, 0);
	assert_int_equal(s.v[0].l1, 6);
	assert_true(s.v[0].first && s.v[0].last);
	for (int g = 0; g < 8; g++)
		assert_true(titan_stages_has_group(&s, g, 8));
}

/* Interleaved, rank 0 of 2 with stages 0 and 2 of 4 over 6 blocks:
 * [0, 2) with the embedding, [4, 6) without the loss (the last stage is
 * the other rank's). */
static void test_stages_interleaved(void **state)
{
	struct titan_pp_stages st = {2, {{0, 2, true, false, 0}, {4, 6, false, false, 2}}};
	struct titan_stages s;
	const bool want[8] = {true, true, true, false, false, true, true, false};

	(void)state;
	titan_stages_init(&s, &st, 6);
	assert_int_equal(s.n, 2);
	assert_true(s.staged && s.first && !s.last);
	assert_true(s.v[0].first && !s.v[0].last);
	assert_true(!s.v[1].first && !s.v[1].last);
	assert_int_equal(s.v[1].l0, 4);
	assert_int_equal(s.v[1].l1, 6);
	for (int g = 0; g < 8; g++)
		assert_int_equal(titan_stages_has_group(&s, g, 8), want[g]);

	/* the other rank: stages 1 and 3, the loss on its second */
	st = (struct titan_pp_stages){2, {{2, 4, false, false, 1}, {6, 6, false, true, 3}}};
	titan_stages_init(&s, &st, 6);
	assert_true(!s.v[0].first && !s.v[0].last);
	assert_true(s.v[1].last && !s.v[1].first);
	assert_false(titan_stages_has_group(&s, 0, 8));
	assert_true(titan_stages_has_group(&s, 7, 8));
}

/* The identity moves (no TP group, or a NULL one): nl = n, the norm and
 * the row-parallel linear + residual are the backend's calls, the
 * gradient moves hand back the buffer they were given, the embedding and
 * the loss are the backend's; nothing is allocated. */
static void test_sp_identity(void **state)
{
	enum { N = 6, C = 8, K = 12, V = 11 };
	struct titan_backend be;
	struct titan_sp sp;
	float *x = bufs(N * C), *w = bufs(C), *in = bufs(N * K), *wk = bufs(K * C);
	float *xn = bufs(N * C), *rs = bufs(N), *xn2 = bufs(N * C), *rs2 = bufs(N);
	float *y = bufs(N * C), *y2 = bufs(N * C), *tab = bufs(V * C);
	float *dh = bufs(N * C), *dh2 = bufs(N * C), *dw = bufs(V * C), *dw2 = bufs(V * C);
	uint32_t ids[N] = {3, 0, 10, 3, 7, 1};
	int32_t lab[N] = {1, -100, 4, 10, 0, 2};
	const float *p;
	double l1, l2;
	int64_t n1, n2;

	(void)state;
	assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
	assert_int_equal(titan_sp_init(&sp, &be, NULL, N, C, V, 0, V, 4, true, no_buf, NULL), 0);
	assert_null(sp.comm);
	assert_int_equal(sp.nl, N);
	fill(x, N * C, 1);
	fill(w, C, 2);
	fill(in, N * K, 3);
	fill(wk, K * C, 4);
	fill(tab, V * C, 5);
	assert_int_equal(sp.ops->norm(&sp, xn, rs, x, w, 1e-5f, "t"), 0);
	assert_int_equal(be.ops->rmsnorm_fwd(&be, xn2, rs2, x, w, N, C, 1e-5f), 0);
	assert_memory_equal(xn, xn2, N * C * sizeof(float));
	assert_memory_equal(rs, rs2, N * sizeof(float));
	assert_int_equal(sp.ops->linear_residual(&sp, y, x, in, wk, K, "t"), 0);
	assert_int_equal(be.ops->copy(&be, y2, x, N * C), 0);
	assert_int_equal(be.ops->matmul_fwd(&be, y2, in, wk, N, K, C, true), 0);
	assert_memory_equal(y, y2, N * C * sizeof(float));
	assert_int_equal(sp.ops->gather_grad(&sp, &p, y, "t"), 0);
	assert_ptr_equal(p, y);
	assert_int_equal(sp.ops->scatter_grad(&sp, &p, y2, "t"), 0);
	assert_ptr_equal(p, y2);
	assert_int_equal(sp.ops->embedding_fwd(&sp, y, ids, tab), 0);
	assert_int_equal(be.ops->embedding_fwd(&be, y2, ids, tab, N, V, C), 0);
	assert_memory_equal(y, y2, N * C * sizeof(float));
	assert_int_equal(sp.ops->embedding_bwd(&sp, dw, ids, x), 0);
	assert_int_equal(be.ops->embedding_bwd(&be, dw2, ids, x, N, V, C), 0);
	assert_memory_equal(dw, dw2, V * C * sizeof(float));
	assert_int_equal(sp.ops->classifier_ce(&sp, &l1, &n1, dh, dw, x, tab, lab, 0.5f), 0);
	assert_int_equal(be.ops->classifier_ce(&be, &l2, &n2, dh2, dw2, x, tab, lab, N, C, V, 0.5f,
					       4), 0);
	assert_true(l1 == l2);
	assert_int_equal(n1, 5);
	assert_int_equal(n2, 5);
	assert_memory_equal(dh, dh2, N * C * sizeof(float));
	assert_memory_equal(dw, dw2, V * C * sizeof(float));
	assert_int_equal(sp.ops->reduce_sumsq(&sp, NULL, NULL), 0);
	free(x), free(w), free(in), free(wk), free(xn), free(rs), free(xn2), free(rs2);
	free(y), free(y2), free(tab), free(dh), free(dh2), free(dw), free(dw2);
	titan_backend_release(&be);
}

/* Without a CP group: local attention over whole sequences (the backend's
 * attention ops), every token at its own place, the labels untouched. */
static void test_attention_local(void **state)
{
	enum { B = 2, T = 6, H = 4, HKV = 2, D = 8 };
	const struct titan_attn_dims ad = {B, T, H, HKV, D, NULL};
	struct titan_backend be;
	struct titan_cp cp;
	float *q = bufs(B * T * H * D), *k = bufs(B * T * HKV * D), *v = bufs(B * T * HKV * D);
	float *o1 = bufs(B * T * H * D), *o2 = bufs(B * T * H * D), *l1 = bufs(B * H * T);
	float *l2 = bufs(B * H * T), *dq1 = bufs(B * T * H * D), *dq2 = bufs(B * T * H * D);
	float *dk1 = bufs(B * T * HKV * D), *dk2 = bufs(B * T * HKV * D);
	float *dv1 = bufs(B * T * HKV * D), *dv2 = bufs(B * T * HKV * D);
	int32_t lab[B * T] = {0};

	(void)state;
	assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
	assert_int_equal(titan_cp_init(&cp, &be, NULL, NULL, true, B, T, H, HKV, D), 0);
	assert_null(cp.comm);
	assert_int_equal(cp.tl, T);
	assert_int_equal(cp.n, B * T);
	for (int64_t i = 0; i < B * T; i++)
		assert_int_equal(titan_cp_token(&cp, i), i);
	assert_ptr_equal(titan_cp_labels(&cp, lab, NULL), lab);
	fill(q, B * T * H * D, 1);
	fill(k, B * T * HKV * D, 2);
	fill(v, B * T * HKV * D, 3);
	assert_int_equal(cp.attn->fwd(&cp, o1, l1, q, k, v), 0);
	assert_int_equal(be.ops->attention_fwd(&be, o2, l2, q, k, v, &ad), 0);
	assert_memory_equal(o1, o2, B * T * H * D * sizeof(float));
	assert_memory_equal(l1, l2, B * H * T * sizeof(float));
	fill(o2, B * T * H * D, 4); /* dout */
	assert_int_equal(cp.attn->bwd(&cp, dq1, dk1, dv1, o2, q, k, v, o1, l1), 0);
	assert_int_equal(be.ops->attention_bwd(&be, dq2, dk2, dv2, o2, q, k, v, o1, l1, &ad), 0);
	assert_memory_equal(dq1, dq2, B * T * H * D * sizeof(float));
	assert_memory_equal(dk1, dk2, B * T * HKV * D * sizeof(float));
	assert_memory_equal(dv1, dv2, B * T * HKV * D * sizeof(float));
	free(q), free(k), free(v), free(o1), free(o2), free(l1), free(l2);
	free(dq1), free(dq2), free(dk1), free(dk2), free(dv1), free(dv2);
	titan_backend_release(&be);
}

/* A communicator that only says it has two ranks (titan_cp_init reads
 * rank and size, and communicates nothing). */
static int two_rank(const struct titan_comm *c)
{
	(void)c;
	return 0;
}

static int two_size(const struct titan_comm *c)
{
	(void)c;
	return 2;
}

/* CP runs its attention as parts: a backend without attention_part_fwd/
 * bwd (CUDA today) is refused at set-up, naming the backend and what it
 * lacks, instead of calling a NULL op in the first step. */
static void test_cp_needs_attention_parts(void **state)
{
	static const struct titan_comm_ops two_ops = {.name = "two", .rank = two_rank,
						      .size = two_size};
	struct titan_comm two = {&two_ops};
	struct titan_backend_ops ops;
	struct titan_backend be;
	struct titan_cp cp;

	(void)state;
	assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
	assert_int_equal(titan_cp_init(&cp, &be, NULL, &two, false, 1, 8, 4, 2, 8), 0);
	assert_ptr_equal(cp.comm, &two);
	ops = *be.ops;
	ops.name = "partless";
	ops.attention_part_bwd = NULL;
	be.ops = &ops;
	assert_int_equal(titan_cp_init(&cp, &be, NULL, &two, true, 1, 8, 4, 2, 8),
			 TITAN_E_UNSUPPORTED);
	assert_non_null(strstr(titan_errmsg(), "context_parallel_degree 2: the partless backend "
				"has no partial attention"));
	titan_error_clear();
	/* one rank: local attention, no parts needed */
	assert_int_equal(titan_cp_init(&cp, &be, NULL, NULL, true, 1, 8, 4, 2, 8), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stages_whole_model),
		cmocka_unit_test(test_stages_interleaved),
		cmocka_unit_test(test_sp_identity),
		cmocka_unit_test(test_attention_local),
		cmocka_unit_test(test_cp_needs_attention_parts),
	};
	return cmocka_run_group_tests_name("model_parts", tests, NULL, NULL);
}
