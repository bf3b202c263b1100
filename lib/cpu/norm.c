/*
 * norm.c — RMSNorm forward/backward on the CPU (torchtitan uses
 * nn.RMSNorm(dim, eps) computed in fp32: y = x·rsqrt(mean(x²) + eps)·w).
 */
#include "cpu_impl.h"

#include <math.h>

#define ROWS_GRAIN 16 /* rows per thread below which threads do not pay */
#define COLS 64       /* column block of the dw reduction */

/* Row and column-block kernels, one per ISA (cpu_impl.h; the OpenMP bodies
 * around them are not). */
static inline TITAN_CPU_BODY float
rms_row_fwd_body(float *yi, const float *xi, const float *w, int64_t c, float eps)
{
	const double ss = titan_cpu_dot8d(xi, xi, c);
	float r = (float)(1.0 / sqrt(ss / (double)c + (double)eps));

	#pragma omp simd
	for (int64_t j = 0; j < c; j++)
		yi[j] = xi[j] * r * w[j];
	return r;
}
TITAN_CPU_DISPATCH(float, rms_row_fwd, (float *yi, const float *xi, const float *w, int64_t c, float eps),
		   (yi, xi, w, c, eps))

/* acc[j] += Σ_i dy[i][j]·(x[i][j]·rstd[i]) over the n rows, in row order */
static inline TITAN_CPU_BODY void
rms_dw_block_body(double *restrict acc, const float *restrict x, const float *restrict dy,
		  const float *restrict rstd, int64_t n, int64_t c, int64_t nc)
{
	for (int64_t i = 0; i < n; i++) {
		const float *xi = x + i * c, *gi = dy + i * c;
		const float r = rstd[i];

		#pragma omp simd
		for (int64_t j = 0; j < nc; j++)
			acc[j] += (double)(gi[j] * (xi[j] * r));
	}
}
TITAN_CPU_DISPATCH_VOID(rms_dw_block, (double *restrict acc, const float *restrict x, const float *restrict dy,
			const float *restrict rstd, int64_t n, int64_t c, int64_t nc),
			(acc, x, dy, rstd, n, c, nc))

/* dx of one row; the mean of (dy·w)·x̂ in 8 double lanes */
static inline TITAN_CPU_BODY void
rms_row_bwd_body(float *dxi, const float *gi, const float *xi, const float *w, float r,
		 int64_t c, bool accumulate)
{
	double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int64_t j = 0;

	for (; j + 8 <= c; j += 8)
		for (int u = 0; u < 8; u++)
			a[u] += (double)(gi[j + u] * w[j + u]) * (double)(xi[j + u] * r);
	for (int u = 0; j < c; j++, u++)
		a[u] += (double)(gi[j] * w[j]) * (double)(xi[j] * r);
	const double dot = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
	const float mean = (float)(dot / (double)c);

	#pragma omp simd
	for (j = 0; j < c; j++) {
		float g = gi[j] * w[j], xhat = xi[j] * r;
		float d = r * (g - xhat * mean);
		dxi[j] = accumulate ? dxi[j] + d : d;
	}
}
TITAN_CPU_DISPATCH_VOID(rms_row_bwd, (float *dxi, const float *gi, const float *xi, const float *w, float r,
			int64_t c, bool accumulate),
			(dxi, gi, xi, w, r, c, accumulate))

int titan_cpu_rmsnorm_fwd(struct titan_backend *be, float *y, float *rstd,
			  const float *x, const float *w, int64_t n, int64_t c,
			  float eps)
{
	if (c <= 0)
		return titan_error(TITAN_E_INVALID, "rmsnorm: dim %lld", (long long)c);
	int nt = titan_cpu_threads(be, n / ROWS_GRAIN);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++)
		rstd[i] = rms_row_fwd(y + i * c, x + i * c, w, c, eps);
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
			rms_dw_block(acc, x + c0, dy + c0, rstd, n, c, nc);
			for (int64_t j = 0; j < nc; j++)
				dw[c0 + j] += (float)acc[j];
		}
	}
	int nt = titan_cpu_threads(be, n / ROWS_GRAIN);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++)
		rms_row_bwd(dx + i * c, dy + i * c, x + i * c, w, rstd[i], c, accumulate_dx);
	return 0;
}
