/*
 * norm.c — RMSNorm forward/backward on the CPU (torchtitan uses
 * nn.RMSNorm(dim, eps) computed in fp32: y = x·rsqrt(mean(x²) + eps)·w).
 */
#include "cpu_impl.h"

#include <math.h>

#define ROWS_GRAIN 16 /* rows per thread below which threads do not pay */
#define COLS 64       /* column block of the dw reduction */

int titan_cpu_rmsnorm_fwd(struct titan_backend *be, float *y, float *rstd,
			  const float *x, const float *w, int64_t n, int64_t c,
			  float eps)
{
	if (c <= 0)
		return titan_error(TITAN_E_INVALID, "rmsnorm: dim %lld", (long long)c);
	int nt = titan_cpu_threads(be, n / ROWS_GRAIN);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++) {
		const float *xi = x + i * c;
		float *yi = y + i * c;
		const double ss = titan_cpu_dot8d(xi, xi, c);
		float r = (float)(1.0 / sqrt(ss / (double)c + (double)eps));
		rstd[i] = r;
		for (int64_t j = 0; j < c; j++)
			yi[j] = xi[j] * r * w[j];
	}
	return 0;
}

int titan_cpu_rmsnorm_bwd(struct titan_backend *be, float *dx, float *dw,
			  const float *dy, const float *x, const float *w,
			  const float *rstd, int64_t n, int64_t c,
			  bool accumulate_dx)
{
	if (c <= 0)
		return titan_error(TITAN_E_INVALID, "rmsnorm: dim %lld", (long long)c);
	/* dw first (dx may overwrite dy): threads own column blocks and sum
	 * the tokens in order, so the result does not depend on the split. */
	if (dw) {
		int64_t nblk = (c + COLS - 1) / COLS;
		int nt = titan_cpu_threads(be, n < ROWS_GRAIN ? 1 : nblk);
		#pragma omp parallel for num_threads(nt) schedule(static)
		for (int64_t blk = 0; blk < nblk; blk++) {
			int64_t c0 = blk * COLS, nc = c0 + COLS < c ? COLS : c - c0;
			double acc[COLS] = {0};
			for (int64_t i = 0; i < n; i++) {
				const float *xi = x + i * c + c0, *gi = dy + i * c + c0;
				float r = rstd[i];
				for (int64_t j = 0; j < nc; j++)
					acc[j] += (double)(gi[j] * (xi[j] * r));
			}
			for (int64_t j = 0; j < nc; j++)
				dw[c0 + j] += (float)acc[j];
		}
	}
	int nt = titan_cpu_threads(be, n / ROWS_GRAIN);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++) {
		const float *xi = x + i * c, *gi = dy + i * c;
		float *dxi = dx + i * c;
		float r = rstd[i];
		double dot = 0.0;
		for (int64_t j = 0; j < c; j++)
			dot += (double)(gi[j] * w[j]) * (double)(xi[j] * r);
		float mean = (float)(dot / (double)c);
		for (int64_t j = 0; j < c; j++) {
			float g = gi[j] * w[j], xhat = xi[j] * r;
			float d = r * (g - xhat * mean);
			dxi[j] = accumulate_dx ? dxi[j] + d : d;
		}
	}
	return 0;
}
