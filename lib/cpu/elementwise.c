/*
 * elementwise.c — token embedding (nn.Embedding forward/backward), SwiGLU
 * (torchtitan FeedForward: silu(w1 x) * w3 x) and the small vector helpers
 * of the CPU backend.
 */
#include "cpu_impl.h"

#include <math.h>
#include <string.h>

#define GRAIN 16384  /* elements per thread below which threads do not pay */
#define COLS 64      /* column block of the token-order reductions */

static int check_ids(const uint32_t *ids, int64_t n, int64_t v)
{
	for (int64_t i = 0; i < n; i++)
		if ((int64_t)ids[i] >= v)
			return titan_error(TITAN_E_INVALID,
					   "token id %u at position %lld is outside the vocabulary (size %lld)",
					   ids[i], (long long)i, (long long)v);
	return 0;
}

int titan_cpu_embedding_fwd(struct titan_backend *be, float *out,
			    const uint32_t *ids, const float *table, int64_t n,
			    int64_t v, int64_t c)
{
	int rc = check_ids(ids, n, v);

	if (rc < 0)
		return rc;
	int nt = titan_cpu_threads(be, n * c / GRAIN);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++)
		memcpy(out + i * c, table + (int64_t)ids[i] * c, (size_t)c * sizeof(float));
	return 0;
}

int titan_cpu_embedding_bwd(struct titan_backend *be, float *dtable,
			    const uint32_t *ids, const float *dout, int64_t n,
			    int64_t v, int64_t c)
{
	int rc = check_ids(ids, n, v);

	if (rc < 0)
		return rc;
	/* Threads own column blocks and walk the tokens in order: repeated ids
	 * add up in token order whatever the thread count, without atomics. */
	int64_t nblk = (c + COLS - 1) / COLS;
	int nt = titan_cpu_threads(be, n * c < GRAIN ? 1 : nblk);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t blk = 0; blk < nblk; blk++) {
		int64_t c0 = blk * COLS, c1 = c0 + COLS < c ? c0 + COLS : c;
		for (int64_t i = 0; i < n; i++) {
			float *dst = dtable + (int64_t)ids[i] * c;
			const float *src = dout + i * c;
			for (int64_t j = c0; j < c1; j++)
				dst[j] += src[j];
		}
	}
	return 0;
}

/* PyTorch's silu(x) = x / (1 + exp(−x)) and its backward
 * dy·σ·(1 + x·(1 − σ)) with dy = dh·b. */
static inline TITAN_CPU_BODY void
swiglu_fwd_range_body(float *h, const float *a, const float *b, int64_t n)
{
	#pragma omp simd
	for (int64_t i = 0; i < n; i++) {
		const float x = a[i];
		h[i] = x / (1.0f + titan_cpu_expf(-x)) * b[i];
	}
}
TITAN_CPU_DISPATCH_VOID(swiglu_fwd_range, (float *h, const float *a, const float *b, int64_t n),
			(h, a, b, n))

static inline TITAN_CPU_BODY void
swiglu_bwd_range_body(float *da, float *db, const float *dh, const float *a,
		      const float *b, int64_t n)
{
	#pragma omp simd
	for (int64_t i = 0; i < n; i++) {
		const float x = a[i], y = b[i], g = dh[i];
		const float e = titan_cpu_expf(-x);
		const float silu = x / (1.0f + e), sig = 1.0f / (1.0f + e);
		da[i] = g * y * sig * (1.0f + x * (1.0f - sig));
		db[i] = g * silu;
	}
}
TITAN_CPU_DISPATCH_VOID(swiglu_bwd_range, (float *da, float *db, const float *dh, const float *a,
			const float *b, int64_t n),
			(da, db, dh, a, b, n))

int titan_cpu_swiglu_fwd(struct titan_backend *be, float *h, const float *a,
			 const float *b, int64_t n)
{
	const int64_t nch = (n + GRAIN - 1) / GRAIN;
	int nt = titan_cpu_threads(be, nch);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t ch = 0; ch < nch; ch++) {
		const int64_t i0 = ch * GRAIN, len = i0 + GRAIN < n ? GRAIN : n - i0;
		swiglu_fwd_range(h + i0, a + i0, b + i0, len);
	}
	return 0;
}

int titan_cpu_swiglu_bwd(struct titan_backend *be, float *da, float *db,
			 const float *dh, const float *a, const float *b,
			 int64_t n)
{
	const int64_t nch = (n + GRAIN - 1) / GRAIN;
	int nt = titan_cpu_threads(be, nch);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t ch = 0; ch < nch; ch++) {
		const int64_t i0 = ch * GRAIN, len = i0 + GRAIN < n ? GRAIN : n - i0;
		swiglu_bwd_range(da + i0, db + i0, dh + i0, a + i0, b + i0, len);
	}
	return 0;
}

static inline TITAN_CPU_BODY void
scale_range_body(float *x, int64_t n, float alpha)
{
	#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		x[i] *= alpha;
}
TITAN_CPU_DISPATCH_VOID(scale_range, (float *x, int64_t n, float alpha), (x, n, alpha))

static inline TITAN_CPU_BODY void
add_range_body(float *y, const float *a, const float *b, int64_t n)
{
	#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		y[i] = a[i] + b[i];
}
TITAN_CPU_DISPATCH_VOID(add_range, (float *y, const float *a, const float *b, int64_t n),
			(y, a, b, n))

int titan_cpu_scale(struct titan_backend *be, float *x, int64_t n, float alpha)
{
	const int64_t nch = (n + GRAIN - 1) / GRAIN;
	int nt = titan_cpu_threads(be, nch);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t ch = 0; ch < nch; ch++) {
		const int64_t i0 = ch * GRAIN, len = i0 + GRAIN < n ? GRAIN : n - i0;
		scale_range(x + i0, len, alpha);
	}
	return 0;
}

int titan_cpu_add(struct titan_backend *be, float *y, const float *a,
		  const float *b, int64_t n)
{
	const int64_t nch = (n + GRAIN - 1) / GRAIN;
	int nt = titan_cpu_threads(be, nch);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t ch = 0; ch < nch; ch++) {
		const int64_t i0 = ch * GRAIN, len = i0 + GRAIN < n ? GRAIN : n - i0;
		add_range(y + i0, a + i0, b + i0, len);
	}
	return 0;
}

int titan_cpu_copy(struct titan_backend *be, float *dst, const float *src,
		   int64_t n)
{
	(void)be;
	if (n > 0)
		memcpy(dst, src, (size_t)n * sizeof(float));
	return 0;
}

int titan_cpu_zero(struct titan_backend *be, float *x, int64_t n)
{
	(void)be;
	if (n > 0)
		memset(x, 0, (size_t)n * sizeof(float));
	return 0;
}
