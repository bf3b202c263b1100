/*
 * matmul.c — nn.Linear forward/backward (no bias) on the CPU: row-major
 * sgemm through OpenBLAS, or a plain OpenMP loop when titan is built
 * without BLAS (correct, slow).
 *
 * Bit-identical results on any thread count: OpenBLAS's own threading
 * splits C by thread count, and some of its kernels (the AVX2 "Haswell"
 * sgemm) round differently for every split.  So OpenBLAS runs on one
 * thread, and we cut C into tiles whose sizes depend only on the shape
 * (gemm_tiles) and hand the tiles to OpenMP threads: each element is
 * always computed by the same single-threaded call on the same tile.
 */
#include "cpu_impl.h"

#include <limits.h>

#include "config.h"
#if TITAN_HAVE_BLAS
#include <cblas.h>
#endif

#if !TITAN_HAVE_BLAS
/* Fallback: each row of C by one thread, k in order (deterministic). */
static void sgemm_loop(int nt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
		       float alpha, const float *a, int64_t lda, const float *b,
		       int64_t ldb, float beta, float *c, int64_t ldc)
{
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < m; i++) {
		float *ci = c + i * ldc;
		for (int64_t j = 0; j < n; j++) {
			float s = 0.0f;
			for (int64_t p = 0; p < k; p++) {
				float av = ta ? a[p * lda + i] : a[i * lda + p];
				float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
				s += av * bv;
			}
			ci[j] = beta == 0.0f ? alpha * s : alpha * s + beta * ci[j];
		}
	}
}
#endif

#if TITAN_HAVE_BLAS
/* Tile of C for one single-threaded sgemm call, from the shape alone.
 * Rows in blocks of about GEMM_TILE (a multiple of 64); a GEMM with one
 * row block splits its columns the same way instead, and one that fits in
 * a single tile is still cut in two when it is at least half a tile wide
 * (or tall), so that a second thread has work.  Every tile repacks
 * its panel of the other operand, so tiles stay large: 512-row tiles cost
 * ~2% against one whole-matrix call on one thread (2048x1536x512, OpenBLAS
 * 0.3.21), 1024-row tiles ~1% (the 25M bench model: 2-3% more tokens/s
 * than with 512). */
#define GEMM_TILE 1024
static int64_t gemm_block(int64_t len)
{
	const int64_t nb = (len + GEMM_TILE - 1) / GEMM_TILE;
	const int64_t b = (len + nb - 1) / nb;

	return (b + 63) / 64 * 64;
}

static void gemm_tiles(int64_t m, int64_t n, int64_t *tm, int64_t *tn)
{
	*tm = m;
	*tn = n;
	if (m > GEMM_TILE)
		*tm = gemm_block(m);
	else if (n > GEMM_TILE)
		*tn = gemm_block(n);
	else if (n >= GEMM_TILE / 2)
		*tn = (n / 2 + 63) / 64 * 64;  /* two column tiles for a second thread */
	else if (m >= GEMM_TILE / 2)
		*tm = (m / 2 + 63) / 64 * 64;
}
#endif

int titan_cpu_sgemm(struct titan_backend *be, bool ta, bool tb, int64_t m,
		    int64_t n, int64_t k, float alpha, const float *a,
		    int64_t lda, const float *b, int64_t ldb, float beta,
		    float *c, int64_t ldc)
{
	if (m < 0 || n < 0 || k < 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX ||
	    lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
		return titan_error(TITAN_E_INVALID,
				   "sgemm %lldx%lldx%lld: dimensions out of range",
				   (long long)m, (long long)n, (long long)k);
	if (m == 0 || n == 0)
		return 0;
	if (k == 0) {
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++)
				c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
		return 0;
	}
#if TITAN_HAVE_BLAS
	int64_t tm, tn;
	gemm_tiles(m, n, &tm, &tn);
	const int64_t rt = (m + tm - 1) / tm, ct = (n + tn - 1) / tn;
	const int nt = titan_cpu_threads(be, rt * ct);
	#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
	for (int64_t t = 0; t < rt * ct; t++) {
		const int64_t i0 = t / ct * tm, j0 = t % ct * tn;
		const int64_t mm = m - i0 < tm ? m - i0 : tm;
		const int64_t nn = n - j0 < tn ? n - j0 : tn;
		/* op(A) rows i0.. and op(B) columns j0.. */
		const float *at = ta ? a + i0 : a + i0 * lda;
		const float *bt = tb ? b + j0 * ldb : b + j0;
		cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
			    tb ? CblasTrans : CblasNoTrans, (int)mm, (int)nn, (int)k,
			    alpha, at, (int)lda, bt, (int)ldb, beta, c + i0 * ldc + j0,
			    (int)ldc);
	}
#else
	sgemm_loop(titan_cpu_threads(be, m), ta, tb, m, n, k, alpha, a, lda, b,
		   ldb, beta, c, ldc);
#endif
	return 0;
}

int titan_cpu_matmul_fwd(struct titan_backend *be, float *y, const float *x,
			 const float *w, int64_t n, int64_t in, int64_t out,
			 bool accumulate)
{
	/* y[n,out] = x[n,in] · W[out,in]^T */
	return titan_cpu_sgemm(be, false, true, n, out, in, 1.0f, x, in, w, in,
			       accumulate ? 1.0f : 0.0f, y, out);
}

int titan_cpu_matmul_bwd(struct titan_backend *be, float *dx, float *dw,
			 const float *dy, const float *x, const float *w,
			 int64_t n, int64_t in, int64_t out, bool accumulate_dx)
{
	int rc;

	if (dx) {
		/* dx[n,in] = dy[n,out] · W[out,in] */
		rc = titan_cpu_sgemm(be, false, false, n, in, out, 1.0f, dy, out,
				     w, in, accumulate_dx ? 1.0f : 0.0f, dx, in);
		if (rc < 0)
			return rc;
	}
	if (dw) {
		/* dW[out,in] += dy^T[out,n] · x[n,in] */
		rc = titan_cpu_sgemm(be, true, false, out, in, n, 1.0f, dy, out,
				     x, in, 1.0f, dw, in);
		if (rc < 0)
			return rc;
	}
	return 0;
}
