/*
 * vocab.c — the CPU's vocabulary-parallel pieces (titan/ops.h): tensor
 * parallelism's embedding lookup and gradient on a rank's rows [v0, v0 +
 * V) of the table, and the three steps of its cross-entropy over logits
 * split by columns.  Rows (or, for the embedding gradient, columns) go to
 * OpenMP threads; each element's arithmetic is in the one order the ops
 * document, so the thread count changes no bit.  expf and log are libm's
 * (the loss kernel in loss.c has its own vectorised exp).
 */
#include "cpu_impl.h"

#include <math.h>
#include <string.h>

int titan_vocab_part_check(const char *op, int64_t a, int64_t b, int64_t c)
{
	if (a < 0 || b < 0 || c < 0)
		return titan_error(TITAN_E_INVALID, "%s: negative size (%lld, %lld, %lld)", op,
				   (long long)a, (long long)b, (long long)c);
	return 0;
}

int titan_cpu_embedding_part_fwd(struct titan_backend *be, float *out, const uint32_t *ids,
				 const float *w, int64_t n, int64_t v0, int64_t V, int64_t C)
{
	int rc;

	if ((rc = titan_vocab_part_check("embedding_part_fwd", n, V, C)) < 0)
		return rc;
#pragma omp parallel for num_threads(titan_cpu_threads(be, n)) schedule(static)
	for (int64_t i = 0; i < n; i++) {
		const int64_t r = (int64_t)ids[i] - v0;

		if (r >= 0 && r < V)
			memcpy(out + i * C, w + r * C, (size_t)C * sizeof(float));
		else
			memset(out + i * C, 0, (size_t)C * sizeof(float));
	}
	return 0;
}

/* Threads over column blocks, tokens in order inside: every element sums
 * its tokens in token order. */
int titan_cpu_embedding_part_bwd(struct titan_backend *be, float *dw, const uint32_t *ids,
				 const float *dx, int64_t n, int64_t v0, int64_t V, int64_t C)
{
	enum { CB = 64 };
	const int64_t nb = (C + CB - 1) / CB;
	int rc;

	if ((rc = titan_vocab_part_check("embedding_part_bwd", n, V, C)) < 0)
		return rc;
#pragma omp parallel for num_threads(titan_cpu_threads(be, nb)) schedule(static)
	for (int64_t b = 0; b < nb; b++) {
		const int64_t c0 = b * CB, c1 = c0 + CB < C ? c0 + CB : C;

		for (int64_t i = 0; i < n; i++) {
			const int64_t r = (int64_t)ids[i] - v0;

			if (r >= 0 && r < V)
				for (int64_t c = c0; c < c1; c++)
					dw[r * C + c] += dx[i * C + c];
		}
	}
	return 0;
}

int titan_cpu_ce_part_max(struct titan_backend *be, float *mx, const float *z, int64_t rows,
			  int64_t V)
{
	int rc;

	if ((rc = titan_vocab_part_check("ce_part_max", rows, V, 0)) < 0)
		return rc;
#pragma omp parallel for num_threads(titan_cpu_threads(be, rows)) schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		float x = -INFINITY;

		for (int64_t j = 0; j < V; j++)
			x = z[r * V + j] > x ? z[r * V + j] : x;
		mx[r] = x;
	}
	return 0;
}

int titan_cpu_ce_part_exp(struct titan_backend *be, double *st, float *z, const float *mx,
			  const int32_t *labels, int64_t v0, int64_t rows, int64_t V)
{
	int rc;

	if ((rc = titan_vocab_part_check("ce_part_exp", rows, V, 0)) < 0)
		return rc;
#pragma omp parallel for num_threads(titan_cpu_threads(be, rows)) schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const int64_t y = (int64_t)labels[r] - v0;
		float *zr = z + r * V;
		double sum = 0;

		st[2 * r + 1] = labels[r] >= 0 && y >= 0 && y < V ? zr[y] : 0;
		for (int64_t j = 0; j < V; j++) {
			zr[j] = expf(zr[j] - mx[r]);
			sum += zr[j];
		}
		st[2 * r] = sum;
	}
	return 0;
}

int titan_cpu_ce_part_grad(struct titan_backend *be, double *st, float *z, const float *mx,
			   const int32_t *labels, int64_t v0, int64_t rows, int64_t V, float gs,
			   bool grads)
{
	int rc;

	if ((rc = titan_vocab_part_check("ce_part_grad", rows, V, 0)) < 0)
		return rc;
#pragma omp parallel for num_threads(titan_cpu_threads(be, rows)) schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const int64_t y = (int64_t)labels[r] - v0;
		const float inv = (float)(1.0 / st[2 * r]);
		float *zr = z + r * V;

		if (labels[r] < 0) {
			st[2 * r] = st[2 * r + 1] = 0;
			if (grads)
				memset(zr, 0, (size_t)V * sizeof(float));
			continue;
		}
		st[2 * r] = ((double)mx[r] + log(st[2 * r])) - st[2 * r + 1];
		st[2 * r + 1] = 1;
		if (!grads)
			continue;
		for (int64_t j = 0; j < V; j++)
			zr[j] = zr[j] * inv * gs;
		if (y >= 0 && y < V)
			zr[y] -= gs;
	}
	return 0;
}
