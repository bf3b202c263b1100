/* test_vocab_ops.c — the CPU backend's vocabulary-parallel pieces
 * (titan/ops.h: embedding_part_fwd/bwd, ce_part_max/exp/grad), what
 * tensor parallelism's embedding and loss are made of (lib/train/tp.c):
 * two parts of a vocabulary, joined as the TP group joins them (sum of
 * the lookups, max and sums of the loss statistics), give the whole
 * vocabulary's embedding bit for bit and a cross-entropy equal to the
 * direct formula; no bit depends on the thread count.  The CUDA twins are
 * checked against these in test_cuda_ops.c. */
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

enum { N = 29, C = 24, VG = 50, V0 = 23 }; /* parts [0, 23) and [23, 50) */

static void fill(float *x, int64_t n, uint64_t seed, float scale)
{
	struct titan_rng r;

	titan_rng_init(&r, seed, 0);
	for (int64_t i = 0; i < n; i++)
		x[i] = ((float)titan_rng_below(&r, 2001) / 1000.0f - 1.0f) * scale;
}

static void ids_labels(uint32_t *ids, int32_t *lab)
{
	struct titan_rng r;

	titan_rng_init(&r, 7, 1);
	for (int i = 0; i < N; i++) {
		ids[i] = (uint32_t)titan_rng_below(&r, VG);
		lab[i] = i % 5 == 2 ? -1 : (int32_t)titan_rng_below(&r, VG);
	}
	ids[3] = ids[0]; /* a repeated id: its gradient sums in token order */
	lab[0] = V0 - 1;  /* both sides of the split */
	lab[1] = V0;
}

/* The two parts' lookups add up to embedding_fwd; their gradients are
 * embedding_bwd's rows, bit for bit. */
static void test_embedding_parts(void **state)
{
	struct titan_backend be;
	uint32_t ids[N];
	int32_t lab[N];
	float *w = malloc(sizeof(float) * VG * C), *dx = malloc(sizeof(float) * N * C);
	float *whole = malloc(sizeof(float) * N * C), *a = malloc(sizeof(float) * N * C);
	float *b = malloc(sizeof(float) * N * C), *dw = calloc(VG * C, sizeof(float));
	float *dwp = calloc(VG * C, sizeof(float));

	(void)state;
	assert_int_equal(titan_backend_cpu_init(&be, 3), 0);
	ids_labels(ids, lab);
	fill(w, VG * C, 1, 1.0f);
	fill(dx, N * C, 2, 1.0f);
	assert_int_equal(be.ops->embedding_fwd(&be, whole, ids, w, N, VG, C), 0);
	assert_int_equal(be.ops->embedding_part_fwd(&be, a, ids, w, N, 0, V0, C), 0);
	assert_int_equal(be.ops->embedding_part_fwd(&be, b, ids, w + V0 * C, N, V0, VG - V0, C), 0);
	for (int i = 0; i < N * C; i++) {
		const int64_t t = i / C;

		/* each row from exactly one part, zeros from the other */
		assert_true(ids[t] < V0 ? b[i] == 0.0f : a[i] == 0.0f);
		assert_memory_equal(&(float){a[i] + b[i]}, &whole[i], sizeof(float));
	}
	assert_int_equal(be.ops->embedding_bwd(&be, dw, ids, dx, N, VG, C), 0);
	assert_int_equal(be.ops->embedding_part_bwd(&be, dwp, ids, dx, N, 0, V0, C), 0);
	assert_int_equal(be.ops->embedding_part_bwd(&be, dwp + V0 * C, ids, dx, N, V0, VG - V0,
						     C), 0);
	assert_memory_equal(dwp, dw, sizeof(float) * VG * C);
	assert_int_equal(be.ops->embedding_part_fwd(&be, a, ids, w, -1, 0, V0, C), TITAN_E_INVALID);
	titan_error_clear();
	free(w), free(dx), free(whole), free(a), free(b), free(dw), free(dwp);
	titan_backend_release(&be);
}

/* The loss of rows split in two column parts, joined as the TP group
 * does; returns the summed loss and count; dz (with grads) in z. */
static void ce_split(struct titan_backend *be, float *z, const int32_t *lab, bool grads,
		     float gs, double *rowloss, double *valid)
{
	const int64_t v[2] = {V0, VG - V0}, v0[2] = {0, V0};
	float part[2][N * VG], mx[2][N], gmx[N];
	double st[2][2 * N];

	for (int p = 0; p < 2; p++) {
		for (int r = 0; r < N; r++)
			memcpy(part[p] + r * v[p], z + r * VG + v0[p], sizeof(float) * v[p]);
		assert_int_equal(be->ops->ce_part_max(be, mx[p], part[p], N, v[p]), 0);
	}
	for (int r = 0; r < N; r++)
		gmx[r] = fmaxf(mx[0][r], mx[1][r]);
	for (int p = 0; p < 2; p++)
		assert_int_equal(be->ops->ce_part_exp(be, st[p], part[p], gmx, lab, v0[p], N, v[p]),
				 0);
	for (int i = 0; i < 2 * N; i++)
		st[0][i] = st[1][i] = st[0][i] + st[1][i];
	for (int p = 0; p < 2; p++)
		assert_int_equal(be->ops->ce_part_grad(be, st[p], part[p], gmx, lab, v0[p], N, v[p],
						       gs, grads), 0);
	for (int r = 0; r < N; r++) {
		rowloss[r] = st[0][2 * r];
		valid[r] = st[0][2 * r + 1];
		assert_memory_equal(&st[0][2 * r], &st[1][2 * r], 2 * sizeof(double));
		for (int p = 0; p < 2; p++)
			memcpy(z + r * VG + v0[p], part[p] + r * v[p], sizeof(float) * v[p]);
	}
}

/* Against the formula in double: loss = logsumexp − z[y], dz = (softmax
 * − onehot)·gs; ignored rows: no loss, flag 0, and dz 0 with grads. */
static void test_ce_parts(void **state)
{
	const float gs = 0.25f;
	uint32_t ids[N];
	int32_t lab[N];
	float z0[N * VG], z[N * VG], z3[N * VG];
	double loss[N], valid[N], loss3[N], valid3[N];
	struct titan_backend be1, be3;

	(void)state;
	assert_int_equal(titan_backend_cpu_init(&be1, 1), 0);
	assert_int_equal(titan_backend_cpu_init(&be3, 3), 0);
	ids_labels(ids, lab);
	fill(z0, N * VG, 3, 4.0f);
	for (int grads = 0; grads < 2; grads++) {
		memcpy(z, z0, sizeof(z));
		memcpy(z3, z0, sizeof(z));
		ce_split(&be1, z, lab, grads, gs, loss, valid);
		ce_split(&be3, z3, lab, grads, gs, loss3, valid3);
		assert_memory_equal(z, z3, sizeof(z)); /* no thread-count bits */
		assert_memory_equal(loss, loss3, sizeof(loss));
		for (int r = 0; r < N; r++) {
			const float *zr = z0 + r * VG;
			double m = -INFINITY, s = 0;

			if (lab[r] < 0) {
				assert_true(valid[r] == 0.0 && loss[r] == 0.0);
				for (int j = 0; grads && j < VG; j++)
					assert_true(z[r * VG + j] == 0.0f);
				continue;
			}
			for (int j = 0; j < VG; j++)
				m = fmax(m, zr[j]);
			for (int j = 0; j < VG; j++)
				s += exp(zr[j] - m);
			assert_true(valid[r] == 1.0);
			assert_true(fabs(loss[r] - (m + log(s) - zr[lab[r]])) < 1e-5);
			if (!grads)
				continue;
			for (int j = 0; j < VG; j++) {
				const double want = (exp(zr[j] - m) / s - (j == lab[r])) * gs;

				assert_true(fabs(z[r * VG + j] - want) < 1e-6);
			}
		}
	}
	titan_backend_release(&be1);
	titan_backend_release(&be3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_embedding_parts),
		cmocka_unit_test(test_ce_parts),
	};
	return cmocka_run_group_tests_name("vocab_ops", tests, NULL, NULL);
}
