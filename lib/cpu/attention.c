/*
 * attention.c — causal grouped-query scaled-dot-product attention on the
 * CPU, forward and backward, flash-attention style (Dao et al. 2022): keys
 * are visited in blocks with an online softmax, the log-sum-exp of every
 * query row is saved, and backward recomputes the probabilities from it.
 * Mirrors torchtitan's SDPA call (is_causal, enable_gqa, scale 1/sqrt(D)).
 * With document ids (titan/ops.h) the mask is block_causal, torchtitan's
 * FlexAttention document mask: a query sees the earlier keys of its own
 * document only, and key blocks holding none of a query block's documents
 * are never visited.  Without them the code paths are the causal ones.
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

/* Document ids must ascend along each of `rows` rows of n (stride ld). */
static int check_docs(const int32_t *doc, int64_t rows, int64_t n, int64_t ld, const char *what)
{
	for (int64_t b = 0; doc && b < rows; b++)
		for (int64_t t = 1; t < n; t++)
			if (doc[b * ld + t] < doc[b * ld + t - 1])
				return titan_error(TITAN_E_INVALID, "attention: %s document ids "
						   "decrease at row %lld, token %lld (%d after %d)",
						   what, (long long)b, (long long)t,
						   (int)doc[b * ld + t], (int)doc[b * ld + t - 1]);
	return 0;
}

static int check_dims(const struct titan_attn_dims *d)
{
	if (d->batch < 0 || d->seq < 0 || d->n_heads <= 0 || d->n_kv_heads <= 0 ||
	    d->head_dim <= 0 || d->n_heads % d->n_kv_heads != 0)
		return titan_error(TITAN_E_INVALID,
				   "attention: bad dims B=%lld T=%lld H=%lld Hkv=%lld D=%lld (Hkv must divide H)",
				   (long long)d->batch, (long long)d->seq, (long long)d->n_heads,
				   (long long)d->n_kv_heads, (long long)d->head_dim);
	return check_docs(d->doc, d->batch, d->seq, d->seq, "token");
}

/* C[m,n] (+)= A[m,k] · B[k,n], with A[i,p] at a[i·ars + p·aps] (A itself:
 * ars = lda, aps = 1; Aᵀ of a stored [k,m] matrix: ars = 1, aps = lda) and
 * row strides ldb/ldc for B and C.  Every element is C (or 0) plus the
 * products for p = 0..k−1 in order, each added with one fused multiply-add
 * (fmaf: rounded once), so the tiling below (8×32 or 8×16 register tiles held in
 * GCC vectors — one zmm, two ymm or four xmm per row, whatever the path —
 * and a plain loop at the edges) never changes a bit, and every path gives
 * the same bits: AVX2 and AVX-512 paths use vfmadd, the baseline path
 * calls libm's fmaf (exact, slow: only CPUs without FMA run it). */
typedef float v16f __attribute__((vector_size(64)));

/* unaligned vector load/store (macros: a function returning a vector
 * would have a different ABI in each path) */
#define LD16(v, p) memcpy(&(v), (p), sizeof(v16f))
#define ST16(p, v) memcpy((p), &(v), sizeof(v16f))
/* t += s·b, lane by lane, fused (GCC turns the loop into one vfmadd) */
#define FMA16(t, s, b) \
	do { \
		const float s_ = (s); \
		for (int u_ = 0; u_ < 16; u_++) \
			(t)[u_] = fmaf(s_, (b)[u_], (t)[u_]); \
	} while (0)

#define MR 8
#define NR 16

/* 8×32 tiles (16 accumulators: AVX-512 has 32 vector registers, AVX2 only
 * 16) on the AVX-512 path (titan_cpu_isa): two vectors of B per broadcast of A, so the
 * loop is bound by the FMAs rather than by loads.  Same products in the
 * same order per element as the 8×16 tiles: the same bits. */
#define FMA_ROW2(r) \
	do { \
		const float s2_ = ap[(r) * ars]; \
		FMA16(t[r][0], s2_, b0); \
		FMA16(t[r][1], s2_, b1); \
	} while (0)

static inline TITAN_CPU_BODY void
mm_kernel_body(float *restrict c, int64_t ldc, const float *restrict a, int64_t ars,
	       int64_t aps, const float *restrict b, int64_t ldb, int64_t m, int64_t n,
	       int64_t k, bool acc)
{
	const v16f zero = {0};
	int64_t j0 = 0;
	for (; titan_cpu_isa == TITAN_CPU_ISA_AVX512 && j0 + 2 * NR <= n; j0 += 2 * NR) {
		int64_t i = 0;
		for (; i + MR <= m; i += MR) {
			const float *ar = a + i * ars;
			float *c0 = c + i * ldc + j0;
			v16f t[MR][2], b0, b1;
			for (int r = 0; r < MR; r++) {
				t[r][0] = t[r][1] = zero;
				if (acc) {
					LD16(t[r][0], c0 + r * ldc);
					LD16(t[r][1], c0 + r * ldc + NR);
				}
			}
			const float *bp = b + j0;
			for (int64_t p = 0; p < k; p++, bp += ldb) {
				LD16(b0, bp);
				LD16(b1, bp + NR);
				const float *ap = ar + p * aps;
				FMA_ROW2(0);
				FMA_ROW2(1);
				FMA_ROW2(2);
				FMA_ROW2(3);
				FMA_ROW2(4);
				FMA_ROW2(5);
				FMA_ROW2(6);
				FMA_ROW2(7);
			}
			for (int r = 0; r < MR; r++) {
				ST16(c0 + r * ldc, t[r][0]);
				ST16(c0 + r * ldc + NR, t[r][1]);
			}
		}
		for (; i < m; i++) {
			const float *ai = a + i * ars;
			float *ci = c + i * ldc + j0;
			v16f t0 = zero, t1 = zero, b0, b1;
			if (acc) {
				LD16(t0, ci);
				LD16(t1, ci + NR);
			}
			const float *bp = b + j0;
			for (int64_t p = 0; p < k; p++, bp += ldb) {
				LD16(b0, bp);
				LD16(b1, bp + NR);
				FMA16(t0, ai[p * aps], b0);
				FMA16(t1, ai[p * aps], b1);
			}
			ST16(ci, t0);
			ST16(ci + NR, t1);
		}
	}
	for (; j0 + NR <= n; j0 += NR) {
		int64_t i = 0;
		for (; i + MR <= m; i += MR) {
			const float *ar = a + i * ars;
			float *c0 = c + i * ldc + j0;
			v16f t[MR], bv;
			for (int r = 0; r < MR; r++) {
				t[r] = zero;
				if (acc)
					LD16(t[r], c0 + r * ldc);
			}
			const float *bp = b + j0;
			for (int64_t p = 0; p < k; p++, bp += ldb) {
				LD16(bv, bp);
				const float *ap = ar + p * aps;
				FMA16(t[0], ap[0], bv);
				FMA16(t[1], ap[ars], bv);
				FMA16(t[2], ap[2 * ars], bv);
				FMA16(t[3], ap[3 * ars], bv);
				FMA16(t[4], ap[4 * ars], bv);
				FMA16(t[5], ap[5 * ars], bv);
				FMA16(t[6], ap[6 * ars], bv);
				FMA16(t[7], ap[7 * ars], bv);
			}
			for (int r = 0; r < MR; r++)
				ST16(c0 + r * ldc, t[r]);
		}
		for (; i < m; i++) {
			const float *ai = a + i * ars;
			float *ci = c + i * ldc + j0;
			v16f t = zero, bv;
			if (acc)
				LD16(t, ci);
			const float *bp = b + j0;
			for (int64_t p = 0; p < k; p++, bp += ldb) {
				LD16(bv, bp);
				FMA16(t, ai[p * aps], bv);
			}
			ST16(ci, t);
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
			const float av = a[i * ars + p * aps], *bp = b + p * ldb;
			#pragma omp simd
			for (int64_t j = j0; j < n; j++)
				ci[j] = fmaf(av, bp[j], ci[j]);
		}
	}
}
TITAN_CPU_DISPATCH_VOID(mm_kernel, (float *restrict c, int64_t ldc, const float *restrict a, int64_t ars,
			int64_t aps, const float *restrict b, int64_t ldb, int64_t m, int64_t n,
			int64_t k, bool acc),
			(c, ldc, a, ars, aps, b, ldb, m, n, k, acc))

/* C (+)= A·B, A [m,k] with row stride lda */
static void mm_nn(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
		  int64_t ldb, int64_t m, int64_t n, int64_t k, bool acc)
{
	mm_kernel(c, ldc, a, lda, 1, b, ldb, m, n, k, acc);
}

/* C (+)= Aᵀ·B, A stored [k,m] with row stride lda */
static void mm_tn(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
		  int64_t ldb, int64_t m, int64_t n, int64_t k, bool acc)
{
	mm_kernel(c, ldc, a, 1, lda, b, ldb, m, n, k, acc);
}

/* Document masks (block_causal): the ids ascend along a row, so the keys
 * of one document are a contiguous run.  doc_lower: the first i in
 * [lo, hi) with d[i] >= x (hi when none); doc_upper: with d[i] > x. */
static int64_t doc_lower(const int32_t *d, int64_t lo, int64_t hi, int32_t x)
{
	while (lo < hi) {
		const int64_t mid = lo + (hi - lo) / 2;

		if (d[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int64_t doc_upper(const int32_t *d, int64_t lo, int64_t hi, int32_t x)
{
	while (lo < hi) {
		const int64_t mid = lo + (hi - lo) / 2;

		if (d[mid] <= x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The visible columns [*lo, *hi) of a row of document x that sees the
 * first nc of a key block's nk columns (documents kd[0..nk)); a block
 * inside one document (the common case) needs no search. */
static inline void doc_run(const int32_t *kd, int64_t nc, int64_t nk, int32_t x, int64_t *lo,
			   int64_t *hi)
{
	if (kd[0] == kd[nk - 1]) {
		*lo = 0;
		*hi = kd[0] == x ? nc : 0;
		return;
	}
	*lo = doc_lower(kd, 0, nc, x);
	*hi = doc_upper(kd, *lo, nc, x);
}

/* Online-softmax update of the nr query rows of a block against a key block
 * of nk keys, of which row r sees the first nc(r) = clamp(first + r + 1, 0,
 * nk) — with documents (qd, kd not NULL: row r's document qd[r], column
 * c's kd[c]) only those of its document, the run [lo, hi) of them:
 * s[r][c] = exp(s[r][c]·scale − m') for the visible c and 0 for the others,
 * l = l·exp(m − m') + Σ s, m = m' = max(m, scores), and the row's output
 * accumulator o[r] (D floats, row stride ldo) is multiplied by exp(m − m')
 * when that is not 1.  (max(fl(s·scale)) = fl(max(s)·scale): rounding is
 * monotonic, so the scaling is done in the exp pass.)  Without documents
 * lo = 0 and hi = nc: the causal op's arithmetic, unchanged. */
static inline TITAN_CPU_BODY void
softmax_update_body(float *s, int64_t lds, int64_t nr, int64_t nk, int64_t first,
		    float scale, float *m, float *l, float *o, int64_t ldo, int64_t D,
		    const int32_t *qd, const int32_t *kd)
{
	for (int64_t r = 0; r < nr; r++) {
		float *sr = s + r * lds;
		int64_t nc = first + r + 1;
		nc = nc < 0 ? 0 : nc > nk ? nk : nc;
		int64_t lo = 0, hi = nc;
		if (qd)
			doc_run(kd, nc, nk, qd[r], &lo, &hi);
		for (int64_t c = 0; c < lo; c++)
			sr[c] = 0.0f;
		for (int64_t c = hi; c < nk; c++)
			sr[c] = 0.0f;
		if (hi == lo)
			continue;
		float rmax = sr[lo];
		#pragma omp simd reduction(max : rmax)
		for (int64_t c = lo; c < hi; c++)
			rmax = sr[c] > rmax ? sr[c] : rmax;
		float mx = rmax * scale;
		mx = mx > m[r] ? mx : m[r];
		#pragma omp simd
		for (int64_t c = lo; c < hi; c++)
			sr[c] = titan_cpu_expf(sr[c] * scale - mx);
		const float corr = titan_cpu_expf(m[r] - mx); /* exp(−inf) = 0 */
		l[r] = l[r] * corr + titan_cpu_sum8f(sr + lo, hi - lo);
		m[r] = mx;
		if (corr != 1.0f) {
			float *orow = o + r * ldo;
			#pragma omp simd
			for (int64_t j = 0; j < D; j++)
				orow[j] *= corr;
		}
	}
}
TITAN_CPU_DISPATCH_VOID(softmax_update, (float *s, int64_t lds, int64_t nr, int64_t nk, int64_t first,
			float scale, float *m, float *l, float *o, int64_t ldo, int64_t D,
			const int32_t *qd, const int32_t *kd),
			(s, lds, nr, nk, first, scale, m, l, o, ldo, D, qd, kd))

/* Backward of the nr query rows t = t0 + r of a block against a key block
 * (the visible keys [lo, hi) as above): p[c] = exp(s[c]·scale − lse[t]) and
 * ds[c] = p[c]·(dp[c] − D_t)·scale for the visible c, 0 for the others (p
 * holds the scores and ds holds dP on entry; lse and dt are indexed by r). */
static inline TITAN_CPU_BODY void
softmax_grad_body(float *p, float *ds, int64_t lds, int64_t nr, int64_t nk, int64_t first,
		  float scale, const float *lse, const float *dt, const int32_t *qd,
		  const int32_t *kd)
{
	for (int64_t r = 0; r < nr; r++) {
		float *pr = p + r * lds, *dr = ds + r * lds;
		int64_t nc = first + r + 1;
		nc = nc < 0 ? 0 : nc > nk ? nk : nc;
		int64_t lo = 0, hi = nc;
		if (qd)
			doc_run(kd, nc, nk, qd[r], &lo, &hi);
		const float lr = lse[r], dtr = dt[r];
		for (int64_t c = 0; c < lo; c++)
			pr[c] = dr[c] = 0.0f;
		#pragma omp simd
		for (int64_t c = lo; c < hi; c++) {
			pr[c] = titan_cpu_expf(pr[c] * scale - lr);
			dr[c] = pr[c] * (dr[c] - dtr) * scale;
		}
		for (int64_t c = hi; c < nk; c++)
			pr[c] = dr[c] = 0.0f;
	}
}
TITAN_CPU_DISPATCH_VOID(softmax_grad, (float *p, float *ds, int64_t lds, int64_t nr, int64_t nk,
			int64_t first, float scale, const float *lse, const float *dt,
			const int32_t *qd, const int32_t *kd),
			(p, ds, lds, nr, nk, first, scale, lse, dt, qd, kd))

/* dst[j][i] = src[i][j] for i < rows, j < cols (row strides lds, ldd).
 * (A 16×16-register-tile AVX-512 version was 1.3x faster per 64×64 block,
 * 1.0 vs 1.3 us: about 0.15% of a 25M step, not worth its code.) */
static void transpose(float *restrict dst, int64_t ldd, const float *restrict src,
		      int64_t lds, int64_t rows, int64_t cols)
{
	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < cols; j++)
			dst[j * ldd + i] = src[i * lds + j];
}

/* di[t] = Σ_j dout[t][j]·out[t][j] (rows of D at stride ld) in the 8
 * double lanes of titan_cpu_dot8d */
static inline TITAN_CPU_BODY void row_dots_body(float *di, const float *go, const float *o,
						int64_t ld, int64_t n, int64_t D)
{
	for (int64_t t = 0; t < n; t++)
		di[t] = (float)titan_cpu_dot8d(go + t * ld, o + t * ld, D);
}
TITAN_CPU_DISPATCH_VOID(row_dots, (float *di, const float *go, const float *o, int64_t ld,
			int64_t n, int64_t D), (di, go, o, ld, n, D))

/* The diagonal of a part, clamped so that t + diag cannot overflow. */
static int64_t part_diag(const struct titan_attn_part *p)
{
	return p->diag > p->tk ? p->tk : p->diag;
}

static int check_part(const struct titan_attn_part *p)
{
	if (p->batch < 0 || p->tq < 0 || p->tk < 0 || p->q_stride < p->tq ||
	    p->k_stride < p->tk || p->n_heads <= 0 || p->n_kv_heads <= 0 || p->head_dim <= 0 ||
	    p->n_heads % p->n_kv_heads != 0 || p->diag < -p->tq)
		return titan_error(TITAN_E_INVALID,
				   "attention part: bad dims B=%lld Tq=%lld (stride %lld) Tk=%lld "
				   "(stride %lld) H=%lld Hkv=%lld D=%lld diag=%lld",
				   (long long)p->batch, (long long)p->tq, (long long)p->q_stride,
				   (long long)p->tk, (long long)p->k_stride, (long long)p->n_heads,
				   (long long)p->n_kv_heads, (long long)p->head_dim,
				   (long long)p->diag);
	if (!p->q_doc != !p->k_doc)
		return titan_error(TITAN_E_INVALID, "attention part: document ids of the %s only",
				   p->q_doc ? "queries" : "keys");
	int rc = check_docs(p->q_doc, p->batch, p->tq, p->q_stride, "query");

	return rc < 0 ? rc : check_docs(p->k_doc, p->batch, p->tk, p->k_stride, "key");
}

/* A thread's workspace in floats.  Forward: the score tile S (bq·bk), the
 * transposed key tile (D·bk), the rows' m and l (bq each). */
static int64_t fwd_per(int64_t bq, int64_t bk, int64_t d)
{
	return titan_cpu_ws_add(titan_cpu_ws_add(titan_cpu_ws_mul(bq, bk),
						 titan_cpu_ws_mul(d, bk)),
				titan_cpu_ws_mul(2, bq));
}

/* Backward: D_t of the tq query rows, the P and dS tiles (bq·bk each),
 * the transposed key and value tiles (D·bk each). */
static int64_t bwd_per(int64_t tq, int64_t bq, int64_t bk, int64_t d)
{
	return titan_cpu_ws_add(tq, titan_cpu_ws_add(titan_cpu_ws_mul(2, titan_cpu_ws_mul(bq, bk)),
						     titan_cpu_ws_mul(2, titan_cpu_ws_mul(d, bk))));
}

/* One set per thread; a task per (row, head, query block) forward, per
 * (row, kv head) backward. */
int64_t titan_cpu_attn_fwd_ws(int64_t nthreads, int64_t bq, int64_t bk, int64_t batch,
			      int64_t tq, int64_t h, int64_t d)
{
	const int64_t ntask = titan_cpu_ws_mul(titan_cpu_ws_mul(batch, h), (tq + bq - 1) / bq);

	if (ntask <= 0)
		return ntask;
	return titan_cpu_ws_mul(titan_cpu_ws_mul(titan_cpu_nthreads(nthreads, ntask),
						 fwd_per(bq, bk, d)),
				(int64_t)sizeof(float));
}

int64_t titan_cpu_attn_bwd_ws(int64_t nthreads, int64_t bq, int64_t bk, int64_t batch,
			      int64_t tq, int64_t tk, int64_t hkv, int64_t d)
{
	const int64_t ntask = titan_cpu_ws_mul(batch, hkv);

	if (ntask <= 0 || (tq == 0 && tk == 0))
		return ntask < 0 ? -1 : 0;
	return titan_cpu_ws_mul(titan_cpu_ws_mul(titan_cpu_nthreads(nthreads, ntask),
						 bwd_per(tq, bq, bk, d)),
				(int64_t)sizeof(float));
}

/* Forward of a part (the causal op is the part tq = tk = T, diag 0).  With
 * `merge` every row's online-softmax state starts from the result it
 * already holds over other keys: m = lse, l = 1, o = out (o/l = out and
 * m + log l = lse, so the state is the same), and continues over this
 * part's keys; a row that sees none of them keeps its bits. */
static int part_fwd(struct titan_backend *be, float *out, float *lse, const float *q,
		    const float *k, const float *v, const struct titan_attn_part *p, bool merge)
{
	const int64_t B = p->batch, Tq = p->tq, Tk = p->tk, H = p->n_heads, Hkv = p->n_kv_heads;
	const int64_t D = p->head_dim, rep = H / Hkv, qst = p->q_stride, kst = p->k_stride;
	const int64_t diag = part_diag(p);
	const int64_t bq = be->attn_block_q > 0 ? be->attn_block_q : TITAN_ATTN_BLOCK;
	const int64_t bk = be->attn_block_k > 0 ? be->attn_block_k : TITAN_ATTN_BLOCK;
	const int64_t nqb = (Tq + bq - 1) / bq, ntask = B * H * nqb;
	const int64_t qs = H * D, ks = Hkv * D; /* row strides */
	const float scale = (float)(1.0 / sqrt((double)D));
	if (ntask == 0)
		return 0;
	int nt = titan_cpu_threads(be, ntask);
	const int64_t per = fwd_per(bq, bk, D);
	const int64_t bytes = titan_cpu_attn_fwd_ws(be->nthreads, bq, bk, B, Tq, H, D);
	float *ws = bytes < 0 ? NULL : titan_cpu_workspace(be, (size_t)bytes);
	if (!ws)
		return TITAN_E_NOMEM;

	#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
	for (int64_t task = 0; task < ntask; task++) {
		float *s = ws + (int64_t)omp_get_thread_num() * per;
		float *kt = s + bq * bk, *m = kt + D * bk, *l = m + bq;
		/* later query blocks first: they cost more (causal) */
		const int64_t qb = nqb - 1 - task % nqb, h = (task / nqb) % H;
		const int64_t b = task / (nqb * H), g = h / rep;
		const int64_t t0 = qb * bq, t1 = t0 + bq < Tq ? t0 + bq : Tq, nr = t1 - t0;
		const float *qblk = q + (b * qst + t0) * qs + h * D;
		float *oblk = out + (b * qst + t0) * qs + h * D;
		float *lrow = lse + (b * H + h) * qst + t0;
		/* keys s0 < kend only: later keys are masked for every row */
		int64_t kend = t1 + diag < Tk ? t1 + diag : Tk, sbeg = 0;
		/* documents: only the keys of the block's documents, from the
		 * key block holding the first of them */
		const int32_t *qd = p->q_doc ? p->q_doc + b * qst + t0 : NULL;
		const int32_t *kd = p->k_doc ? p->k_doc + b * kst : NULL;
		if (qd) {
			sbeg = doc_lower(kd, 0, kend, qd[0]);
			kend = doc_upper(kd, sbeg, kend, qd[nr - 1]);
			sbeg = sbeg / bk * bk;
		}

		for (int64_t r = 0; r < nr; r++) {
			if (merge) {
				m[r] = lrow[r];
				l[r] = 1.0f;
			} else {
				m[r] = -INFINITY;
				l[r] = 0.0f;
				memset(oblk + r * qs, 0, (size_t)D * sizeof(float));
			}
		}
		for (int64_t s0 = sbeg; s0 < kend; s0 += bk) {
			const int64_t nk = s0 + bk < kend ? bk : kend - s0;
			const float *kblk = k + (b * kst + s0) * ks + g * D;
			const float *vblk = v + (b * kst + s0) * ks + g * D;
			transpose(kt, bk, kblk, ks, nk, D);
			mm_nn(s, bk, qblk, qs, kt, bk, nr, nk, D, false); /* S = Q·K^T */
			/* row r sees keys s0..t0+r+diag */
			softmax_update(s, bk, nr, nk, t0 - s0 + diag, scale, m, l, oblk, qs, D, qd,
				       kd ? kd + s0 : NULL);
			mm_nn(oblk, qs, s, bk, vblk, ks, nr, D, nk, true); /* O += P·V */
		}
		for (int64_t r = 0; r < nr; r++) {
			float *o = oblk + r * qs, inv = 1.0f / l[r];
			if (l[r] == 0.0f) { /* no key at all: out 0, lse −inf */
				lrow[r] = -INFINITY;
				continue;
			}
			for (int64_t j = 0; j < D; j++)
				o[j] *= inv;
			lrow[r] = m[r] + logf(l[r]);
		}
	}
	titan_cpu_workspace_free(be, ws);
	return 0;
}

/* Backward of a part from the (merged) out and lse of its rows. */
static int part_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
		    const float *dout, const float *q, const float *k, const float *v,
		    const float *out, const float *lse, const struct titan_attn_part *p,
		    bool accumulate)
{
	const int64_t B = p->batch, Tq = p->tq, Tk = p->tk, H = p->n_heads, Hkv = p->n_kv_heads;
	const int64_t D = p->head_dim, rep = H / Hkv, qst = p->q_stride, kst = p->k_stride;
	const int64_t diag = part_diag(p);
	const int64_t bq = be->attn_block_q > 0 ? be->attn_block_q : TITAN_ATTN_BLOCK;
	const int64_t bk = be->attn_block_k > 0 ? be->attn_block_k : TITAN_ATTN_BLOCK;
	const int64_t ntask = B * Hkv;
	const int64_t qs = H * D, ks = Hkv * D;
	const float scale = (float)(1.0 / sqrt((double)D));
	if (ntask == 0 || (Tq == 0 && Tk == 0))
		return 0;
	int nt = titan_cpu_threads(be, ntask);
	const int64_t per = bwd_per(Tq, bq, bk, D);
	const int64_t bytes = titan_cpu_attn_bwd_ws(be->nthreads, bq, bk, B, Tq, Tk, Hkv, D);
	float *ws = bytes < 0 ? NULL : titan_cpu_workspace(be, (size_t)bytes);
	if (!ws)
		return TITAN_E_NOMEM;

	/* Loop order head, key block, query block: every dq, dk and dv element
	 * receives its terms in the same order as with the query blocks outside
	 * (dq over key blocks, dk/dv over query blocks, both ascending), and
	 * each key block is transposed once per head. */
	#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
	for (int64_t task = 0; task < ntask; task++) {
		float *di = ws + (int64_t)omp_get_thread_num() * per;
		float *pp = di + Tq, *ds = pp + bq * bk, *kt = ds + bq * bk, *vt = kt + D * bk;
		const int64_t b = task / Hkv, g = task % Hkv;
		const int32_t *qd = p->q_doc ? p->q_doc + b * qst : NULL;
		const int32_t *kd = p->k_doc ? p->k_doc + b * kst : NULL;

		for (int64_t t = 0; !accumulate && t < Tk; t++) {
			memset(dk + (b * kst + t) * ks + g * D, 0, (size_t)D * sizeof(float));
			memset(dv + (b * kst + t) * ks + g * D, 0, (size_t)D * sizeof(float));
		}
		for (int64_t t = 0; !accumulate && t < Tq; t++)
			memset(dq + (b * qst + t) * qs + g * rep * D, 0,
			       (size_t)(rep * D) * sizeof(float));
		for (int64_t h = g * rep; h < (g + 1) * rep; h++) {
			const float *lrow = lse + (b * H + h) * qst;
			/* D_t = rowsum(dout·out) */
			row_dots(di, dout + b * qst * qs + h * D, out + b * qst * qs + h * D, qs, Tq,
				 D);
			for (int64_t s0 = 0; s0 < Tk; s0 += bk) {
				/* the first query row that sees key s0 (documents: of
				 * its document or a later one), the block's last key */
				int64_t tfirst = s0 - diag > 0 ? s0 - diag : 0;
				const int64_t slast = (s0 + bk < Tk ? s0 + bk : Tk) - 1;
				if (qd)
					tfirst = doc_lower(qd, tfirst, Tq, kd[s0]);
				const float *kblk = k + (b * kst + s0) * ks + g * D;
				const float *vblk = v + (b * kst + s0) * ks + g * D;
				float *dkblk = dk + (b * kst + s0) * ks + g * D;
				float *dvblk = dv + (b * kst + s0) * ks + g * D;
				if (tfirst >= Tq)
					break;
				transpose(kt, bk, kblk, ks, s0 + bk < Tk ? bk : Tk - s0, D);
				transpose(vt, bk, vblk, ks, s0 + bk < Tk ? bk : Tk - s0, D);
				/* query blocks that see a key of this block */
				for (int64_t t0 = tfirst / bq * bq; t0 < Tq; t0 += bq) {
					const int64_t t1 = t0 + bq < Tq ? t0 + bq : Tq, nr = t1 - t0;
					const int64_t kend = t1 + diag < Tk ? t1 + diag : Tk;
					if (qd && qd[t0] > kd[slast])
						break; /* later documents than the block's */
					const int64_t nk = s0 + bk < kend ? bk : kend - s0;
					const float *qblk = q + (b * qst + t0) * qs + h * D;
					const float *doblk = dout + (b * qst + t0) * qs + h * D;
					float *dqblk = dq + (b * qst + t0) * qs + h * D;
					mm_nn(pp, bk, qblk, qs, kt, bk, nr, nk, D, false);  /* S */
					mm_nn(ds, bk, doblk, qs, vt, bk, nr, nk, D, false); /* dP */
					softmax_grad(pp, ds, bk, nr, nk, t0 - s0 + diag, scale,
						     lrow + t0, di + t0, qd ? qd + t0 : NULL,
						     kd ? kd + s0 : NULL);
					/* dV += P^T·dO, dK += dS^T·Q, dQ += dS·K */
					mm_tn(dvblk, ks, pp, bk, doblk, qs, nk, D, nr, true);
					mm_tn(dkblk, ks, ds, bk, qblk, qs, nk, D, nr, true);
					mm_nn(dqblk, qs, ds, bk, kblk, ks, nr, D, nk, true);
				}
			}
		}
	}
	titan_cpu_workspace_free(be, ws);
	return 0;
}

static struct titan_attn_part causal_part(const struct titan_attn_dims *d)
{
	return (struct titan_attn_part){d->batch, d->seq, d->seq, d->seq, d->seq, d->n_heads,
					d->n_kv_heads, d->head_dim, 0, d->doc, d->doc};
}

int titan_cpu_attention_fwd(struct titan_backend *be, float *out, float *lse,
			    const float *q, const float *k, const float *v,
			    const struct titan_attn_dims *d)
{
	int rc = check_dims(d);
	const struct titan_attn_part p = causal_part(d);

	return rc < 0 ? rc : part_fwd(be, out, lse, q, k, v, &p, false);
}

int titan_cpu_attention_bwd(struct titan_backend *be, float *dq, float *dk,
			    float *dv, const float *dout, const float *q,
			    const float *k, const float *v, const float *out,
			    const float *lse, const struct titan_attn_dims *d)
{
	int rc = check_dims(d);
	const struct titan_attn_part p = causal_part(d);

	if (rc < 0 || d->seq == 0)
		return rc;
	return part_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, &p, false);
}

int titan_cpu_attention_part_fwd(struct titan_backend *be, float *out, float *lse,
				 const float *q, const float *k, const float *v,
				 const struct titan_attn_part *p, bool merge)
{
	int rc = check_part(p);

	return rc < 0 ? rc : part_fwd(be, out, lse, q, k, v, p, merge);
}

int titan_cpu_attention_part_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
				 const float *dout, const float *q, const float *k,
				 const float *v, const float *out, const float *lse,
				 const struct titan_attn_part *p, bool accumulate)
{
	int rc = check_part(p);

	return rc < 0 ? rc : part_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, p, accumulate);
}

/* The checks above, for the other backends' attention ops (titan/ops.h). */
int titan_attn_docs_check(const int32_t *doc, int64_t rows, int64_t n, int64_t ld, const char *what)
{
	return check_docs(doc, rows, n, ld, what);
}

int titan_attn_part_check(const struct titan_attn_part *p)
{
	return check_part(p);
}
