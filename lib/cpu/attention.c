/*
 * attention.c — causal grouped-query scaled-dot-product attention on the
 * CPU, forward and backward, flash-attention style (Dao et al. 2022): keys
 * are visited in blocks with an online softmax, the log-sum-exp of every
 * query row is saved, and backward recomputes the probabilities from it.
 * Mirrors torchtitan's SDPA call (is_causal, enable_gqa, scale 1/sqrt(D)).
 *
 * Tasks own disjoint outputs and run their loops in a fixed order, so the
 * results are the same for any thread count: forward has one task per
 * (batch, head, query block); backward one per (batch, kv head), which
 * owns dk/dv of that kv head and dq of the query heads that read it.
 */
#include "cpu_impl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

static int check_dims(const struct titan_attn_dims *d)
{
	if (d->batch < 0 || d->seq < 0 || d->n_heads <= 0 || d->n_kv_heads <= 0 ||
	    d->head_dim <= 0 || d->n_heads % d->n_kv_heads != 0)
		return titan_error(TITAN_E_INVALID,
				   "attention: bad dims B=%lld T=%lld H=%lld Hkv=%lld D=%lld (Hkv must divide H)",
				   (long long)d->batch, (long long)d->seq, (long long)d->n_heads,
				   (long long)d->n_kv_heads, (long long)d->head_dim);
	return 0;
}

/* C[m,n] (+)= A[m,k] · B[k,n], row strides lda/ldb/ldc.  Every element is
 * C (or 0) plus the products for p = 0..k−1 in order, so the tiling below
 * (4×16 register tiles, a plain loop at the edges) never changes a bit. */
#define MR 4
#define NR 16
TITAN_CPU_CLONES
static void mm_nn(float *restrict c, int64_t ldc, const float *restrict a,
		  int64_t lda, const float *restrict b, int64_t ldb, int64_t m,
		  int64_t n, int64_t k, bool acc)
{
	int64_t j0 = 0;
	for (; j0 + NR <= n; j0 += NR) {
		int64_t i = 0;
		for (; i + MR <= m; i += MR) {
			float t[MR][NR];
			for (int r = 0; r < MR; r++)
				for (int j = 0; j < NR; j++)
					t[r][j] = acc ? c[(i + r) * ldc + j0 + j] : 0.0f;
			for (int64_t p = 0; p < k; p++) {
				const float *bp = b + p * ldb + j0;
				#pragma GCC unroll 4
				for (int r = 0; r < MR; r++) {
					const float av = a[(i + r) * lda + p];
					#pragma omp simd
					for (int j = 0; j < NR; j++)
						t[r][j] += av * bp[j];
				}
			}
			for (int r = 0; r < MR; r++)
				for (int j = 0; j < NR; j++)
					c[(i + r) * ldc + j0 + j] = t[r][j];
		}
		for (; i < m; i++) {
			float t[NR];
			for (int j = 0; j < NR; j++)
				t[j] = acc ? c[i * ldc + j0 + j] : 0.0f;
			for (int64_t p = 0; p < k; p++) {
				const float av = a[i * lda + p], *bp = b + p * ldb + j0;
				#pragma omp simd
				for (int j = 0; j < NR; j++)
					t[j] += av * bp[j];
			}
			for (int j = 0; j < NR; j++)
				c[i * ldc + j0 + j] = t[j];
		}
	}
	if (j0 == n)
		return;
	for (int64_t i = 0; i < m; i++) {
		float *ci = c + i * ldc;
		if (!acc)
			for (int64_t j = j0; j < n; j++)
				ci[j] = 0.0f;
		for (int64_t p = 0; p < k; p++) {
			const float av = a[i * lda + p], *bp = b + p * ldb;
			#pragma omp simd
			for (int64_t j = j0; j < n; j++)
				ci[j] += av * bp[j];
		}
	}
}

/* Online-softmax update of one query row with the nc visible scores of a
 * key block of nk: s[c] = exp(s[c]·scale − m') for c < nc and 0 after,
 * l = l·exp(m − m') + Σ s, m = m' = max(m, scores).  Returns exp(m − m'),
 * the factor for the row's output accumulator. */
TITAN_CPU_CLONES
static float softmax_update(float *s, int64_t nc, int64_t nk, float scale,
			    float *m, float *l)
{
	float mx = *m;
	for (int64_t c = nc; c < nk; c++)
		s[c] = 0.0f;
	if (nc == 0)
		return 1.0f;
	#pragma omp simd
	for (int64_t c = 0; c < nc; c++)
		s[c] *= scale;
	#pragma omp simd reduction(max : mx)
	for (int64_t c = 0; c < nc; c++)
		mx = s[c] > mx ? s[c] : mx;
	#pragma omp simd
	for (int64_t c = 0; c < nc; c++)
		s[c] = titan_cpu_expf(s[c] - mx);
	const float corr = titan_cpu_expf(*m - mx); /* exp(−inf) = 0 */
	*l = *l * corr + titan_cpu_sum8f(s, nc);
	*m = mx;
	return corr;
}

/* Backward of one query row: p[c] = exp(s[c]·scale − lse) and
 * ds[c] = p[c]·(dp[c] − D_t)·scale for the nc visible keys, 0 after
 * (p holds the scores and ds holds dP on entry). */
TITAN_CPU_CLONES
static void softmax_grad(float *p, float *ds, int64_t nc, int64_t nk, float scale,
			 float lse, float dt)
{
	#pragma omp simd
	for (int64_t c = 0; c < nc; c++) {
		p[c] = titan_cpu_expf(p[c] * scale - lse);
		ds[c] = p[c] * (ds[c] - dt) * scale;
	}
	for (int64_t c = nc; c < nk; c++)
		p[c] = ds[c] = 0.0f;
}

/* dst[j][i] = src[i][j] for i < rows, j < cols (row strides lds, ldd). */
static void transpose(float *restrict dst, int64_t ldd, const float *restrict src,
		      int64_t lds, int64_t rows, int64_t cols)
{
	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < cols; j++)
			dst[j * ldd + i] = src[i * lds + j];
}

int titan_cpu_attention_fwd(struct titan_backend *be, float *out, float *lse,
			    const float *q, const float *k, const float *v,
			    const struct titan_attn_dims *d)
{
	int rc = check_dims(d);
	if (rc < 0)
		return rc;
	const int64_t B = d->batch, T = d->seq, H = d->n_heads, Hkv = d->n_kv_heads;
	const int64_t D = d->head_dim, rep = H / Hkv;
	const int64_t bq = be->attn_block_q > 0 ? be->attn_block_q : 64;
	const int64_t bk = be->attn_block_k > 0 ? be->attn_block_k : 64;
	const int64_t nqb = (T + bq - 1) / bq, ntask = B * H * nqb;
	const int64_t qs = H * D, ks = Hkv * D; /* row strides */
	const float scale = (float)(1.0 / sqrt((double)D));
	if (ntask == 0)
		return 0;
	int nt = titan_cpu_threads(be, ntask);
	const int64_t per = bq * bk + D * bk + 2 * bq;
	float *ws = titan_cpu_workspace(be, (size_t)(nt * per) * sizeof(float));
	if (!ws)
		return TITAN_E_NOMEM;

	#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
	for (int64_t task = 0; task < ntask; task++) {
		float *s = ws + (int64_t)omp_get_thread_num() * per;
		float *kt = s + bq * bk, *m = kt + D * bk, *l = m + bq;
		/* later query blocks first: they cost more (causal) */
		const int64_t qb = nqb - 1 - task % nqb, h = (task / nqb) % H;
		const int64_t b = task / (nqb * H), g = h / rep;
		const int64_t t0 = qb * bq, t1 = t0 + bq < T ? t0 + bq : T, nr = t1 - t0;
		const float *qblk = q + (b * T + t0) * qs + h * D;
		float *oblk = out + (b * T + t0) * qs + h * D;

		for (int64_t r = 0; r < nr; r++) {
			m[r] = -INFINITY;
			l[r] = 0.0f;
			memset(oblk + r * qs, 0, (size_t)D * sizeof(float));
		}
		/* keys s0 < t1 only: later keys are masked for every row */
		for (int64_t s0 = 0; s0 < t1; s0 += bk) {
			const int64_t nk = s0 + bk < t1 ? bk : t1 - s0;
			const float *kblk = k + (b * T + s0) * ks + g * D;
			const float *vblk = v + (b * T + s0) * ks + g * D;
			transpose(kt, bk, kblk, ks, nk, D);
			mm_nn(s, bk, qblk, qs, kt, bk, nr, nk, D, false); /* S = Q·K^T */
			for (int64_t r = 0; r < nr; r++) {
				float *sr = s + r * bk, *o = oblk + r * qs;
				int64_t nc = t0 + r - s0 + 1; /* keys s0..t are visible */
				nc = nc < 0 ? 0 : nc > nk ? nk : nc;
				const float corr = softmax_update(sr, nc, nk, scale, m + r, l + r);
				if (corr != 1.0f)
					for (int64_t j = 0; j < D; j++)
						o[j] *= corr;
			}
			mm_nn(oblk, qs, s, bk, vblk, ks, nr, D, nk, true); /* O += P·V */
		}
		for (int64_t r = 0; r < nr; r++) {
			float *o = oblk + r * qs, inv = 1.0f / l[r];
			for (int64_t j = 0; j < D; j++)
				o[j] *= inv;
			lse[(b * H + h) * T + t0 + r] = m[r] + logf(l[r]);
		}
	}
	titan_cpu_workspace_free(be, ws);
	return 0;
}

int titan_cpu_attention_bwd(struct titan_backend *be, float *dq, float *dk,
			    float *dv, const float *dout, const float *q,
			    const float *k, const float *v, const float *out,
			    const float *lse, const struct titan_attn_dims *d)
{
	int rc = check_dims(d);
	if (rc < 0)
		return rc;
	const int64_t B = d->batch, T = d->seq, H = d->n_heads, Hkv = d->n_kv_heads;
	const int64_t D = d->head_dim, rep = H / Hkv;
	const int64_t bq = be->attn_block_q > 0 ? be->attn_block_q : 64;
	const int64_t bk = be->attn_block_k > 0 ? be->attn_block_k : 64;
	const int64_t ntask = B * Hkv;
	const int64_t qs = H * D, ks = Hkv * D;
	const float scale = (float)(1.0 / sqrt((double)D));
	if (ntask == 0 || T == 0)
		return 0;
	int nt = titan_cpu_threads(be, ntask);
	const int64_t per = T + 4 * bq * bk + 2 * D * bk;
	float *ws = titan_cpu_workspace(be, (size_t)(nt * per) * sizeof(float));
	if (!ws)
		return TITAN_E_NOMEM;

	#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
	for (int64_t task = 0; task < ntask; task++) {
		float *di = ws + (int64_t)omp_get_thread_num() * per;
		float *p = di + T, *ds = p + bq * bk, *pt = ds + bq * bk, *dst = pt + bq * bk;
		float *kt = dst + bq * bk, *vt = kt + D * bk;
		const int64_t b = task / Hkv, g = task % Hkv;

		for (int64_t t = 0; t < T; t++) {
			memset(dk + (b * T + t) * ks + g * D, 0, (size_t)D * sizeof(float));
			memset(dv + (b * T + t) * ks + g * D, 0, (size_t)D * sizeof(float));
			memset(dq + (b * T + t) * qs + g * rep * D, 0,
			       (size_t)(rep * D) * sizeof(float));
		}
		for (int64_t h = g * rep; h < (g + 1) * rep; h++) {
			const float *lrow = lse + (b * H + h) * T;
			/* D_t = rowsum(dout·out) */
			for (int64_t t = 0; t < T; t++) {
				const float *o = out + (b * T + t) * qs + h * D;
				const float *go = dout + (b * T + t) * qs + h * D;
				di[t] = (float)titan_cpu_dot8d(go, o, D);
			}
			for (int64_t t0 = 0; t0 < T; t0 += bq) {
				const int64_t t1 = t0 + bq < T ? t0 + bq : T, nr = t1 - t0;
				const float *qblk = q + (b * T + t0) * qs + h * D;
				const float *doblk = dout + (b * T + t0) * qs + h * D;
				float *dqblk = dq + (b * T + t0) * qs + h * D;
				for (int64_t s0 = 0; s0 < t1; s0 += bk) {
					const int64_t nk = s0 + bk < t1 ? bk : t1 - s0;
					const float *kblk = k + (b * T + s0) * ks + g * D;
					const float *vblk = v + (b * T + s0) * ks + g * D;
					transpose(kt, bk, kblk, ks, nk, D);
					transpose(vt, bk, vblk, ks, nk, D);
					mm_nn(p, bk, qblk, qs, kt, bk, nr, nk, D, false);   /* S */
					mm_nn(ds, bk, doblk, qs, vt, bk, nr, nk, D, false); /* dP */
					for (int64_t r = 0; r < nr; r++) {
						const int64_t t = t0 + r;
						int64_t nc = t - s0 + 1;
						nc = nc < 0 ? 0 : nc > nk ? nk : nc;
						softmax_grad(p + r * bk, ds + r * bk, nc, nk, scale,
							     lrow[t], di[t]);
					}
					transpose(pt, bq, p, bk, nr, nk);
					transpose(dst, bq, ds, bk, nr, nk);
					/* dV += P^T·dO, dK += dS^T·Q, dQ += dS·K */
					mm_nn(dv + (b * T + s0) * ks + g * D, ks, pt, bq, doblk, qs,
					      nk, D, nr, true);
					mm_nn(dk + (b * T + s0) * ks + g * D, ks, dst, bq, qblk, qs,
					      nk, D, nr, true);
					mm_nn(dqblk, qs, ds, bk, kblk, ks, nr, D, nk, true);
				}
			}
		}
	}
	titan_cpu_workspace_free(be, ws);
	return 0;
}
