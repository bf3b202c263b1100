/*
 * elementwise.cu — the memory-bound ops of the CUDA backend: token
 * embedding, RMSNorm, RoPE, SwiGLU, AdamW, the sum of squares of the
 * gradient norm (both also over all tensors in one launch) and the vector
 * helpers.  Twins of lib/cpu/elementwise.c, norm.c, rope.c and optim.c
 * with the same fp32 arithmetic: where a product feeds a sum it is
 * written with __fmul_rn/__fadd_rn, which nvcc never contracts into an
 * FMA (the CPU ops never do either; fmaf appears only
 * where the CPU writes it), and expf/sqrtf/division are CUDA's accurate
 * ones (expf ≤ 2 ulp, the CPU's own ≤ 1 ulp).
 *
 * Row ops (embedding, norms, RoPE) run one block per row; flat ops a
 * grid-stride loop; both use float4 accesses (float2 for RoPE pairs) when
 * every pointer is aligned and rows are whole vectors.  Reductions are in
 * double, in an order fixed by the shape and the alignment (block sizes and
 * chunk counts depend on n and c only), so results repeat run to run, but
 * the order is not the CPU's: rstd, the backward mean and dw may differ
 * from the CPU's in the last bit of their float, sumsq in the last bits of
 * its double.  RMSNorm dw sums row chunks per column, then the chunks in
 * order (no atomics); embedding_bwd sorts the tokens by id on the host and
 * adds each id's rows in token order, the CPU's bits (no atomics: a resumed
 * run repeats the uninterrupted one exactly).  ids are not range-checked on
 * the device (the caller checks them on the host); an id >= V gives a NaN
 * row forward and is skipped backward rather than read or write out of
 * bounds.
 */
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "cuda_impl.h"

#define THREADS CUDA_EW_THREADS
#define ROW_THREADS 256   /* at most, per row of the row kernels */
#define SUMSQ_BLOCKS CUDA_SUMSQ_BLOCKS
#define SUMSQ_PER_THREAD CUDA_SUMSQ_PER_THREAD
#define DW_CHUNKS CUDA_DW_CHUNKS
#define DW_ROWS CUDA_DW_ROWS

#define GRID_TID ((int64_t)blockIdx.x * blockDim.x + threadIdx.x)
#define GRID_STRIDE ((int64_t)gridDim.x * blockDim.x)

static bool aligned(const void *p, uintptr_t bytes)
{
	return ((uintptr_t)p & (bytes - 1)) == 0;
}

/* Threads of a row kernel with `items` per row: a multiple of 32 in
 * [32, ROW_THREADS] (block_sum needs whole warps). */
static int row_threads(int64_t items)
{
	int64_t t = (items + 31) / 32 * 32;

	return t < 32 ? 32 : t > ROW_THREADS ? ROW_THREADS : (int)t;
}

/* Blocks of a flat kernel over n elements, n4 of whose float4s it reads. */
static unsigned flat_blocks(int64_t n, int64_t n4)
{
	return cuda_blocks(n4 > 0 ? n4 : n, THREADS);
}

/* Σ v over the block (every thread gets it), in a fixed order; blockDim.x a
 * multiple of 32.  sh: 32 doubles of shared memory, free again on return. */
static __device__ double block_sum(double v, double *sh)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	if (warp == 0) {
		v = lane < (int)(blockDim.x >> 5) ? sh[lane] : 0.0;
		for (int o = 16; o > 0; o >>= 1)
			v += __shfl_xor_sync(0xffffffffu, v, o);
		if (lane == 0)
			sh[0] = v;
	}
	__syncthreads();
	v = sh[0];
	__syncthreads();
	return v;
}

static __device__ float4 ld4(const float *p, int64_t k)
{
	return reinterpret_cast<const float4 *>(p)[k];
}

static __device__ void st4(float *p, int64_t k, float4 v)
{
	reinterpret_cast<float4 *>(p)[k] = v;
}

/* ---- embedding ------------------------------------------------------------ */

static __global__ void embedding_fwd_kernel(float *out, const uint32_t *ids, const float *table,
					    int64_t n, int64_t v, int64_t c, bool vec)
{
	const int64_t c4 = vec ? c / 4 : 0;

	for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
		const int64_t id = ids[i];
		float *dst = out + i * c;

		if (id >= v) {
			for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
				dst[j] = __int_as_float(0x7fc00000); /* NaN */
			continue;
		}
		const float *src = table + id * c;
		for (int64_t k = threadIdx.x; k < c4; k += blockDim.x)
			st4(dst, k, ld4(src, k));
		for (int64_t j = 4 * c4 + threadIdx.x; j < c; j += blockDim.x)
			dst[j] = src[j];
	}
}

/* Deterministic backward: the tokens sorted (stably, on the host) by id
 * into segments; one block per (segment, column slice) starts from the
 * table row and adds its tokens' rows in token order — the CPU's order, so
 * the same bits as the CPU op. */
static __global__ void embedding_bwd_kernel(float *dtable, const int32_t *order,
					    const int32_t *seg, int64_t nseg, const uint32_t *ids,
					    const float *dout, int64_t c)
{
	for (int64_t s = blockIdx.x; s < nseg; s += gridDim.x) {
		const int32_t p0 = seg[s], p1 = seg[s + 1];
		float *dst = dtable + (int64_t)ids[order[p0]] * c;

		for (int64_t j = blockIdx.y * (int64_t)blockDim.x + threadIdx.x; j < c;
		     j += (int64_t)gridDim.y * blockDim.x) {
			float acc = dst[j];

			for (int32_t p = p0; p < p1; p++)
				acc = __fadd_rn(acc, dout[(int64_t)order[p] * c + j]);
			dst[j] = acc;
		}
	}
}

int cuda_embedding_fwd(struct titan_backend *be, float *out, const uint32_t *ids,
		       const float *table, int64_t n, int64_t v, int64_t c)
{
	if (n <= 0 || c <= 0)
		return 0;
	const bool vec = c % 4 == 0 && aligned(out, 16) && aligned(table, 16);
	embedding_fwd_kernel<<<cuda_blocks(n, 1), row_threads(vec ? c / 4 : c), 0,
			       cuda_of(be)->stream>>>(out, ids, table, n, v, c, vec);
	CU_LAUNCHED("embedding_fwd");
	return 0;
}

int cuda_embedding_bwd(struct titan_backend *be, float *dtable, const uint32_t *ids,
		       const float *dout, int64_t n, int64_t v, int64_t c)
{
	struct cuda_impl *cu = cuda_of(be);

	if (n <= 0 || c <= 0)
		return 0;
	if (n >= INT32_MAX / 2)
		return titan_error(TITAN_E_INVALID, "embedding_bwd: %lld tokens", (long long)n);
	/* host: ids back (they are small), a stable counting sort by id
	 * (ids >= V are skipped, as in the forward), then order + segment
	 * starts up; one synchronisation per call */
	char *hs = (char *)cuda_host_scratch(be, (size_t)n * 4 * 3 + 8);
	if (!hs)
		return TITAN_E_NOMEM;
	uint32_t *hid = (uint32_t *)hs;
	int32_t *order = (int32_t *)(hs + (size_t)n * 4);
	int32_t *seg = (int32_t *)(hs + (size_t)n * 8);
	CU_CHECK(cudaMemcpyAsync(hid, ids, (size_t)n * 4, cudaMemcpyDeviceToHost, cu->stream));
	CU_CHECK(cudaStreamSynchronize(cu->stream));
	int32_t *cnt = (int32_t *)calloc((size_t)v + 1, sizeof(int32_t));
	if (!cnt)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	for (int64_t i = 0; i < n; i++)
		if (hid[i] < (uint64_t)v)
			cnt[hid[i] + 1]++;
	for (int64_t k = 0; k < v; k++)
		cnt[k + 1] += cnt[k];
	const int32_t total = cnt[v];
	int64_t nseg = 0;
	for (int64_t k = 0; k < v; k++)
		if (cnt[k + 1] > cnt[k])
			seg[nseg++] = cnt[k];
	seg[nseg] = total;
	for (int64_t i = 0; i < n; i++)
		if (hid[i] < (uint64_t)v)
			order[cnt[hid[i]]++] = (int32_t)i;
	free(cnt);
	if (nseg == 0)
		return 0;
	int32_t *dev = (int32_t *)cuda_scratch(be, (size_t)(total + nseg + 1) * 4);
	if (!dev)
		return TITAN_E_NOMEM;
	CU_CHECK(cudaMemcpyAsync(dev, order, (size_t)total * 4, cudaMemcpyHostToDevice,
				 cu->stream));
	CU_CHECK(cudaMemcpyAsync(dev + total, seg, (size_t)(nseg + 1) * 4, cudaMemcpyHostToDevice,
				 cu->stream));
	const int threads = c >= 256 ? 256 : (int)((c + 31) / 32 * 32);
	const int64_t slices = (c + threads - 1) / threads;
	dim3 grid((unsigned)(nseg < 65535 * 16 ? nseg : 65535 * 16),
		  (unsigned)(slices < 65535 ? slices : 65535));
	embedding_bwd_kernel<<<grid, threads, 0, cu->stream>>>(dtable, dev, dev + total, nseg, ids,
							       dout, c);
	CU_LAUNCHED("embedding_bwd");
	/* the host buffers are read by the copies above before the next op
	 * reuses them: the next cuda_host_scratch user synchronises first */
	return cudaStreamSynchronize(cu->stream) == cudaSuccess
		       ? 0 : titan_error(TITAN_E_DEVICE, "embedding_bwd: %s",
					 cudaGetErrorString(cudaGetLastError()));
}

/* ---- RMSNorm -------------------------------------------------------------- */

/* y may alias x: each thread reads x[j] before writing y[j], and the whole
 * row has been read (block_sum's barrier) before the first write. */
static __global__ void rmsnorm_fwd_kernel(float *y, float *rstd, const float *x, const float *w,
					  int64_t n, int64_t c, float eps, bool vec)
{
	__shared__ double sh[32];
	const int64_t c4 = vec ? c / 4 : 0;

	for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
		const float *xi = x + i * c;
		float *yi = y + i * c;
		double ss = 0.0;

		for (int64_t k = threadIdx.x; k < c4; k += blockDim.x) {
			const float4 a = ld4(xi, k);
			ss += (double)a.x * a.x + (double)a.y * a.y + (double)a.z * a.z +
			      (double)a.w * a.w;
		}
		for (int64_t j = 4 * c4 + threadIdx.x; j < c; j += blockDim.x)
			ss += (double)xi[j] * xi[j];
		ss = block_sum(ss, sh);
		const float r = (float)(1.0 / sqrt(ss / (double)c + (double)eps));

		if (threadIdx.x == 0)
			rstd[i] = r;
		for (int64_t k = threadIdx.x; k < c4; k += blockDim.x) {
			const float4 a = ld4(xi, k), g = ld4(w, k);
			st4(yi, k, make_float4(a.x * r * g.x, a.y * r * g.y, a.z * r * g.z,
					       a.w * r * g.w));
		}
		for (int64_t j = 4 * c4 + threadIdx.x; j < c; j += blockDim.x)
			yi[j] = xi[j] * r * w[j];
	}
}

/* (dy·w)·x̂ of one element, both products rounded to float as the CPU */
static __device__ double rms_gx(float dy, float w, float x, float r)
{
	return (double)__fmul_rn(dy, w) * (double)__fmul_rn(x, r);
}

/* r·(g − x̂·mean), no contraction */
static __device__ float rms_dx(float dy, float w, float x, float r, float mean)
{
	return __fmul_rn(r, __fsub_rn(__fmul_rn(dy, w), __fmul_rn(__fmul_rn(x, r), mean)));
}

/* dx may alias dy: as in the forward, a row is read whole before any of it
 * is written, and each element is read and written by the same thread. */
static __global__ void rmsnorm_bwd_kernel(float *dx, const float *dy, const float *x,
					  const float *w, const float *rstd, int64_t n, int64_t c,
					  bool accumulate, bool vec)
{
	__shared__ double sh[32];
	const int64_t c4 = vec ? c / 4 : 0;

	for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
		const float *gi = dy + i * c, *xi = x + i * c;
		float *di = dx + i * c;
		const float r = rstd[i];
		double dot = 0.0;

		for (int64_t k = threadIdx.x; k < c4; k += blockDim.x) {
			const float4 g = ld4(gi, k), a = ld4(xi, k), ww = ld4(w, k);
			dot += rms_gx(g.x, ww.x, a.x, r) + rms_gx(g.y, ww.y, a.y, r) +
			       rms_gx(g.z, ww.z, a.z, r) + rms_gx(g.w, ww.w, a.w, r);
		}
		for (int64_t j = 4 * c4 + threadIdx.x; j < c; j += blockDim.x)
			dot += rms_gx(gi[j], w[j], xi[j], r);
		dot = block_sum(dot, sh);
		const float mean = (float)(dot / (double)c);

		for (int64_t k = threadIdx.x; k < c4; k += blockDim.x) {
			const float4 g = ld4(gi, k), a = ld4(xi, k), ww = ld4(w, k);
			float4 d = make_float4(rms_dx(g.x, ww.x, a.x, r, mean),
					       rms_dx(g.y, ww.y, a.y, r, mean),
					       rms_dx(g.z, ww.z, a.z, r, mean),
					       rms_dx(g.w, ww.w, a.w, r, mean));
			if (accumulate) {
				const float4 o = ld4(di, k);
				d = make_float4(__fadd_rn(o.x, d.x), __fadd_rn(o.y, d.y),
						__fadd_rn(o.z, d.z), __fadd_rn(o.w, d.w));
			}
			st4(di, k, d);
		}
		for (int64_t j = 4 * c4 + threadIdx.x; j < c; j += blockDim.x) {
			const float d = rms_dx(gi[j], w[j], xi[j], r, mean);
			di[j] = accumulate ? __fadd_rn(di[j], d) : d;
		}
	}
}

/* dw, first stage: part[chunk][j] = Σ dy[i][j]·(x[i][j]·rstd[i]) over the
 * chunk's rows in order (double); a thread per column, blockIdx.y the chunk. */
static __global__ void rmsnorm_dw_part_kernel(double *part, const float *dy, const float *x,
					      const float *rstd, int64_t n, int64_t c,
					      int64_t rows)
{
	const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	const int64_t i0 = (int64_t)blockIdx.y * rows;
	const int64_t i1 = i0 + rows < n ? i0 + rows : n;
	double acc = 0.0;

	if (j >= c)
		return;
	for (int64_t i = i0; i < i1; i++)
		acc += (double)(dy[i * c + j] * (x[i * c + j] * rstd[i]));
	part[(int64_t)blockIdx.y * c + j] = acc;
}

/* dw, second stage: dw[j] += Σ_chunk part[chunk][j], chunks in order */
static __global__ void rmsnorm_dw_sum_kernel(float *dw, const double *part, int64_t c, int nchunk)
{
	for (int64_t j = GRID_TID; j < c; j += GRID_STRIDE) {
		double s = 0.0;

		for (int k = 0; k < nchunk; k++)
			s += part[(int64_t)k * c + j];
		dw[j] += (float)s;
	}
}

int cuda_rmsnorm_fwd(struct titan_backend *be, float *y, float *rstd, const float *x,
		     const float *w, int64_t n, int64_t c, float eps)
{
	if (c <= 0)
		return titan_error(TITAN_E_INVALID, "rmsnorm: dim %lld", (long long)c);
	if (n <= 0)
		return 0;
	const bool vec = c % 4 == 0 && aligned(y, 16) && aligned(x, 16) && aligned(w, 16);
	rmsnorm_fwd_kernel<<<cuda_blocks(n, 1), row_threads(vec ? c / 4 : c), 0,
			     cuda_of(be)->stream>>>(y, rstd, x, w, n, c, eps, vec);
	CU_LAUNCHED("rmsnorm_fwd");
	return 0;
}

int cuda_rmsnorm_bwd(struct titan_backend *be, float *dx, float *dw, const float *dy,
		     const float *x, const float *w, const float *rstd, int64_t n, int64_t c,
		     bool accumulate_dx)
{
	cudaStream_t s = cuda_of(be)->stream;

	if (c <= 0)
		return titan_error(TITAN_E_INVALID, "rmsnorm: dim %lld", (long long)c);
	if (n <= 0)
		return 0;
	/* dw first: dx may overwrite dy (the stream keeps the order) */
	if (dw) {
		int64_t rows = (n + DW_CHUNKS - 1) / DW_CHUNKS;

		rows = rows < DW_ROWS ? DW_ROWS : rows;
		const int64_t nchunk = (n + rows - 1) / rows;
		double *part = (double *)cuda_scratch(be, (size_t)(nchunk * c) * sizeof(double));
		if (!part)
			return TITAN_E_NOMEM;
		const int t = row_threads(c);
		const dim3 grid((unsigned)((c + t - 1) / t), (unsigned)nchunk);
		rmsnorm_dw_part_kernel<<<grid, t, 0, s>>>(part, dy, x, rstd, n, c, rows);
		CU_LAUNCHED("rmsnorm_bwd dw");
		rmsnorm_dw_sum_kernel<<<cuda_blocks(c, THREADS), THREADS, 0, s>>>(dw, part, c,
										  (int)nchunk);
		CU_LAUNCHED("rmsnorm_bwd dw sum");
	}
	const bool vec = c % 4 == 0 && aligned(dx, 16) && aligned(dy, 16) && aligned(x, 16) &&
			 aligned(w, 16);
	rmsnorm_bwd_kernel<<<cuda_blocks(n, 1), row_threads(vec ? c / 4 : c), 0, s>>>(
		dx, dy, x, w, rstd, n, c, accumulate_dx, vec);
	CU_LAUNCHED("rmsnorm_bwd");
	return 0;
}

/* ---- RoPE ----------------------------------------------------------------- */

/* One block per (b, t) row of nh·D floats = `pairs` pairs; pair p is
 * element i = p % half of its head.  vec: x and freqs 8-byte aligned, so
 * every pair (an even float offset) is one float2. */
template <bool INVERSE>
static __global__ void rope_kernel(float *x, const float *freqs, int64_t rows, int64_t seq,
				   int half, int pairs, bool vec)
{
	for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
		const float *fc = freqs + (r % seq) * half * 2;
		float *xr = x + r * pairs * 2;

		for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
			const int i = p % half;
			float a, b, co, si, o0, o1;

			if (vec) {
				const float2 xv = reinterpret_cast<const float2 *>(xr)[p];
				const float2 f = reinterpret_cast<const float2 *>(fc)[i];
				a = xv.x;
				b = xv.y;
				co = f.x;
				si = f.y;
			} else {
				a = xr[2 * p];
				b = xr[2 * p + 1];
				co = fc[2 * i];
				si = fc[2 * i + 1];
			}
			if (!INVERSE) {
				/* (a + ib)(c + is) */
				o0 = __fsub_rn(__fmul_rn(a, co), __fmul_rn(b, si));
				o1 = __fadd_rn(__fmul_rn(a, si), __fmul_rn(b, co));
			} else {
				/* (a + ib)(c − is) */
				o0 = __fadd_rn(__fmul_rn(a, co), __fmul_rn(b, si));
				o1 = __fsub_rn(__fmul_rn(b, co), __fmul_rn(a, si));
			}
			if (vec) {
				reinterpret_cast<float2 *>(xr)[p] = make_float2(o0, o1);
			} else {
				xr[2 * p] = o0;
				xr[2 * p + 1] = o1;
			}
		}
	}
}

static int rope_apply(struct titan_backend *be, float *x, const float *freqs, int64_t batch,
		      int64_t seq, int64_t nh, int64_t head_dim, bool inverse)
{
	if (head_dim <= 0 || head_dim % 2 != 0)
		return titan_error(TITAN_E_INVALID, "rope: head_dim %lld must be even",
				   (long long)head_dim);
	if (batch <= 0 || seq <= 0 || nh <= 0)
		return 0;
	if (nh > INT32_MAX / head_dim)
		return titan_error(TITAN_E_INVALID, "rope: %lld heads of %lld is too large a row",
				   (long long)nh, (long long)head_dim);
	const int half = (int)(head_dim / 2), pairs = (int)(nh * half);
	const bool vec = aligned(x, 8) && aligned(freqs, 8);
	const int64_t rows = batch * seq;
	const unsigned blocks = cuda_blocks(rows, 1);
	const int t = row_threads(pairs);
	cudaStream_t s = cuda_of(be)->stream;

	if (!inverse)
		rope_kernel<false><<<blocks, t, 0, s>>>(x, freqs, rows, seq, half, pairs, vec);
	else
		rope_kernel<true><<<blocks, t, 0, s>>>(x, freqs, rows, seq, half, pairs, vec);
	CU_LAUNCHED(inverse ? "rope_bwd" : "rope_fwd");
	return 0;
}

int cuda_rope_fwd(struct titan_backend *be, float *x, const float *freqs, int64_t batch,
		  int64_t seq, int64_t nh, int64_t head_dim)
{
	return rope_apply(be, x, freqs, batch, seq, nh, head_dim, false);
}

int cuda_rope_bwd(struct titan_backend *be, float *dx, const float *freqs, int64_t batch,
		  int64_t seq, int64_t nh, int64_t head_dim)
{
	return rope_apply(be, dx, freqs, batch, seq, nh, head_dim, true);
}

/* ---- SwiGLU --------------------------------------------------------------- */

/* silu(a)·b = a/(1 + exp(−a))·b */
static __device__ float swiglu_h(float a, float b)
{
	return __fmul_rn(__fdiv_rn(a, __fadd_rn(1.0f, expf(-a))), b);
}

/* da = dh·b·σ·(1 + a·(1 − σ)), db = dh·silu(a) */
static __device__ void swiglu_d(float *da, float *db, float g, float a, float b)
{
	const float e = expf(-a);
	const float silu = __fdiv_rn(a, __fadd_rn(1.0f, e));
	const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));

	*da = __fmul_rn(__fmul_rn(__fmul_rn(g, b), sig),
			__fadd_rn(1.0f, __fmul_rn(a, __fsub_rn(1.0f, sig))));
	*db = __fmul_rn(g, silu);
}

/* h may alias a or b: each element is read and written by one thread */
static __global__ void swiglu_fwd_kernel(float *h, const float *a, const float *b, int64_t n,
					 int64_t n4)
{
	for (int64_t k = GRID_TID; k < n4; k += GRID_STRIDE) {
		const float4 x = ld4(a, k), y = ld4(b, k);
		st4(h, k, make_float4(swiglu_h(x.x, y.x), swiglu_h(x.y, y.y), swiglu_h(x.z, y.z),
				      swiglu_h(x.w, y.w)));
	}
	for (int64_t i = 4 * n4 + GRID_TID; i < n; i += GRID_STRIDE)
		h[i] = swiglu_h(a[i], b[i]);
}

static __global__ void swiglu_bwd_kernel(float *da, float *db, const float *dh, const float *a,
					 const float *b, int64_t n, int64_t n4)
{
	for (int64_t k = GRID_TID; k < n4; k += GRID_STRIDE) {
		const float4 g = ld4(dh, k), x = ld4(a, k), y = ld4(b, k);
		float4 oa, ob;

		swiglu_d(&oa.x, &ob.x, g.x, x.x, y.x);
		swiglu_d(&oa.y, &ob.y, g.y, x.y, y.y);
		swiglu_d(&oa.z, &ob.z, g.z, x.z, y.z);
		swiglu_d(&oa.w, &ob.w, g.w, x.w, y.w);
		st4(da, k, oa);
		st4(db, k, ob);
	}
	for (int64_t i = 4 * n4 + GRID_TID; i < n; i += GRID_STRIDE) {
		float oa, ob;

		swiglu_d(&oa, &ob, dh[i], a[i], b[i]);
		da[i] = oa;
		db[i] = ob;
	}
}

int cuda_swiglu_fwd(struct titan_backend *be, float *h, const float *a, const float *b,
		    int64_t n)
{
	if (n <= 0)
		return 0;
	const int64_t n4 = aligned(h, 16) && aligned(a, 16) && aligned(b, 16) ? n / 4 : 0;
	swiglu_fwd_kernel<<<flat_blocks(n, n4), THREADS, 0, cuda_of(be)->stream>>>(h, a, b, n, n4);
	CU_LAUNCHED("swiglu_fwd");
	return 0;
}

int cuda_swiglu_bwd(struct titan_backend *be, float *da, float *db, const float *dh,
		    const float *a, const float *b, int64_t n)
{
	if (n <= 0)
		return 0;
	const int64_t n4 = aligned(da, 16) && aligned(db, 16) && aligned(dh, 16) &&
				   aligned(a, 16) && aligned(b, 16)
			   ? n / 4
			   : 0;
	swiglu_bwd_kernel<<<flat_blocks(n, n4), THREADS, 0, cuda_of(be)->stream>>>(da, db, dh, a,
										    b, n, n4);
	CU_LAUNCHED("swiglu_bwd");
	return 0;
}

/* ---- AdamW ---------------------------------------------------------------- */

/* The float constants of lib/cpu/optim.c (same names, same rounding). */
struct adamw_consts {
	bool small;
	float keep, lc, b2, c2, neg_step, bc2_sqrt, eps, grad_mul;
};

static __device__ void adamw_elem(float *p, float *m, float *v, float g,
				  const struct adamw_consts &k)
{
	const float gi = __fmul_rn(g, k.grad_mul);
	const float pi = __fmul_rn(*p, k.keep); /* × 1 is exact when wd = 0 */
	const float mo = *m;
	const float mi = fmaf(k.lc, __fsub_rn(gi, mo), k.small ? mo : gi);
	const float vi = __fadd_rn(__fmul_rn(*v, k.b2), __fmul_rn(__fmul_rn(k.c2, gi), gi));
	const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);

	*p = __fadd_rn(pi, __fdiv_rn(__fmul_rn(k.neg_step, mi), denom));
	*m = mi;
	*v = vi;
}

/* Float4 number j of p, m, v, g (16-byte aligned pointers). */
static __device__ void adamw_vec4(float *p, float *m, float *v, const float *g, int64_t j,
				  const struct adamw_consts &k)
{
	float4 pp = ld4(p, j), mm = ld4(m, j), vv = ld4(v, j);
	const float4 gg = ld4(g, j);

	adamw_elem(&pp.x, &mm.x, &vv.x, gg.x, k);
	adamw_elem(&pp.y, &mm.y, &vv.y, gg.y, k);
	adamw_elem(&pp.z, &mm.z, &vv.z, gg.z, k);
	adamw_elem(&pp.w, &mm.w, &vv.w, gg.w, k);
	st4(p, j, pp);
	st4(m, j, mm);
	st4(v, j, vv);
}

static __global__ void adamw_kernel(float *p, float *m, float *v, const float *g, int64_t n,
				    int64_t n4, struct adamw_consts k)
{
	for (int64_t j = GRID_TID; j < n4; j += GRID_STRIDE)
		adamw_vec4(p, m, v, g, j, k);
	for (int64_t i = 4 * n4 + GRID_TID; i < n; i += GRID_STRIDE)
		adamw_elem(p + i, m + i, v + i, g[i], k);
}

/* The constants of one step (keep is 1 without weight decay). */
static struct adamw_consts adamw_consts_of(const struct titan_adamw_hparams *hp, int64_t step,
					   float grad_mul)
{
	/* exp_avg.lerp_(grad, 1 − β1) as ATen: fma(w, g − m, m) for |w| < 0.5,
	 * else fma(w − 1, g − m, g) */
	const float lw = (float)(1.0 - hp->beta1);
	const double bc1 = 1.0 - pow(hp->beta1, (double)step);
	const double bc2 = 1.0 - pow(hp->beta2, (double)step);
	struct adamw_consts k;

	k.small = fabsf(lw) < 0.5f;
	k.keep = hp->weight_decay != 0.0 ? (float)(1.0 - hp->lr * hp->weight_decay) : 1.0f;
	k.lc = k.small ? lw : lw - 1.0f;
	k.b2 = (float)hp->beta2;
	k.c2 = (float)(1.0 - hp->beta2);
	k.neg_step = (float)(-(hp->lr / bc1));
	k.bc2_sqrt = (float)sqrt(bc2);
	k.eps = (float)hp->eps;
	k.grad_mul = grad_mul;
	return k;
}

int cuda_adamw_step(struct titan_backend *be, float *p, float *m, float *v, const float *g,
		    int64_t n, const struct titan_adamw_hparams *hp, int64_t step,
		    float grad_mul)
{
	if (step < 1)
		return titan_error(TITAN_E_INVALID, "adamw: step %lld (must be >= 1)",
				   (long long)step);
	if (n <= 0)
		return 0;
	const struct adamw_consts k = adamw_consts_of(hp, step, grad_mul);
	const int64_t n4 =
		aligned(p, 16) && aligned(m, 16) && aligned(v, 16) && aligned(g, 16) ? n / 4 : 0;
	adamw_kernel<<<flat_blocks(n, n4), THREADS, 0, cuda_of(be)->stream>>>(p, m, v, g, n, n4,
									       k);
	CU_LAUNCHED("adamw_step");
	return 0;
}

/* ---- sum of squares --------------------------------------------------------- */

/* part[block] = Σ x² over the block's grid-stride share, in double */
static __global__ void sumsq_part_kernel(double *part, const float *x, int64_t n, int64_t n4)
{
	__shared__ double sh[32];
	double s = 0.0;

	for (int64_t k = GRID_TID; k < n4; k += GRID_STRIDE) {
		const float4 a = ld4(x, k);
		s += (double)a.x * a.x + (double)a.y * a.y + (double)a.z * a.z + (double)a.w * a.w;
	}
	for (int64_t i = 4 * n4 + GRID_TID; i < n; i += GRID_STRIDE)
		s += (double)x[i] * x[i];
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		part[blockIdx.x] = s;
}

/* *out = Σ part[0..np), one block */
static __global__ void sum_final_kernel(double *out, const double *part, int np)
{
	__shared__ double sh[32];
	double s = 0.0;

	for (int i = threadIdx.x; i < np; i += blockDim.x)
		s += part[i];
	s = block_sum(s, sh);
	if (threadIdx.x == 0)
		*out = s;
}

int cuda_sumsq(struct titan_backend *be, double *out, const float *x, int64_t n)
{
	cudaStream_t s = cuda_of(be)->stream;

	*out = 0.0;
	if (n <= 0)
		return 0;
	int64_t nb = (n + THREADS * SUMSQ_PER_THREAD - 1) / (THREADS * SUMSQ_PER_THREAD);
	nb = nb > SUMSQ_BLOCKS ? SUMSQ_BLOCKS : nb;
	const int64_t n4 = aligned(x, 16) ? n / 4 : 0;
	double *host = (double *)cuda_host_scratch(be, sizeof(double));
	if (!host)
		return TITAN_E_NOMEM;
	double *part = (double *)cuda_scratch(be, (size_t)(nb + 1) * sizeof(double));
	if (!part)
		return TITAN_E_NOMEM;
	sumsq_part_kernel<<<(unsigned)nb, THREADS, 0, s>>>(part, x, n, n4);
	CU_LAUNCHED("sumsq");
	sum_final_kernel<<<1, THREADS, 0, s>>>(part + nb, part, (int)nb);
	CU_LAUNCHED("sumsq final");
	CU_CHECK(cudaMemcpyAsync(host, part + nb, sizeof(double), cudaMemcpyDeviceToHost, s));
	CU_CHECK(cudaStreamSynchronize(s));
	*out = *host;
	return 0;
}

/* ---- multi-tensor ops: the gradient norm's sums and AdamW over all tensors ----
 *
 * A span table (titan/ops.h struct titan_tensor_span) becomes a chunk table:
 * each tensor cut into MT_CHUNK-element chunks in order, one block per
 * chunk (grid-stride over chunks).  A chunk reads float4s from its first
 * 16-byte-aligned element, scalars before and after it (AdamW: float4s only
 * where p, m, v, g agree modulo 16 bytes), and never past its own end.
 * sumsq_multi: the partial sum of every chunk, then one block per tensor
 * adds its chunks' partials in chunk order (a fixed order: the result
 * depends on the spans and the base's alignment only), one copy back.
 * The tables live on the device, one block per distinct span table (the
 * model's two are the same every step): looked up by content, the least
 * recently used of MT_PLANS replaced, freed with the backend. */

#define MT_CHUNK CUDA_MT_CHUNK
#define MT_PLANS CUDA_MT_PLANS

struct mt_chunk {
	int64_t start;       /* floats past the arena base */
	int32_t len, tensor; /* elements (1..MT_CHUNK), index into the span table */
};

/* One span table on the device: its chunks (tensor t's are
 * first[t] .. first[t+1]), no_decay per tensor, and room for the sums
 * (part per chunk, tot per tensor), in one device block. */
struct mt_plan {
	struct titan_tensor_span *spans; /* host copy: the key (NULL: slot free) */
	int n;
	int64_t nchunks;
	void *block; /* NULL when there is no chunk */
	const struct mt_chunk *chunk;
	const int64_t *first;
	double *part, *tot;
	const unsigned char *no_decay;
	uint64_t used; /* last use: the clock of the cache */
};

struct cuda_mt_cache {
	struct mt_plan plan[MT_PLANS];
	uint64_t clock;
};

static void mt_plan_clear(struct titan_backend *be, struct mt_plan *pl)
{
	if (pl->block) {
		/* queued work may still read the table */
		cudaStreamSynchronize(cuda_of(be)->stream);
		cuda_buf_free(be, pl->block);
	}
	free(pl->spans);
	memset(pl, 0, sizeof(*pl));
}

void cuda_mt_release(struct titan_backend *be)
{
	struct cuda_impl *c = cuda_of(be);

	if (!c->mt)
		return;
	for (int i = 0; i < MT_PLANS; i++)
		mt_plan_clear(be, &c->mt->plan[i]);
	free(c->mt);
	c->mt = NULL;
}

static bool mt_same(const struct mt_plan *pl, const struct titan_tensor_span *s, int n)
{
	if (pl->n != n)
		return false;
	for (int i = 0; i < n; i++)
		if (pl->spans[i].offset != s[i].offset || pl->spans[i].numel != s[i].numel ||
		    pl->spans[i].no_decay != s[i].no_decay)
			return false;
	return true;
}

/* Fills pl (cleared) for spans[0..n), n > 0, checked. */
static int mt_plan_build(struct titan_backend *be, struct mt_plan *pl,
			 const struct titan_tensor_span *spans, int n)
{
	cudaStream_t s = cuda_of(be)->stream;
	int64_t nch = 0;

	for (int t = 0; t < n; t++)
		nch += (spans[t].numel + MT_CHUNK - 1) / MT_CHUNK;
	if (!(pl->spans = (struct titan_tensor_span *)malloc((size_t)n * sizeof(*spans))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	memcpy(pl->spans, spans, (size_t)n * sizeof(*spans));
	pl->n = n;
	pl->nchunks = nch;
	if (nch == 0)
		return 0;
	/* chunks (16 B), first (n + 1 int64), part (nch double), tot (n
	 * double), no_decay (n bytes): every array at a multiple of 8 bytes */
	const size_t o_first = (size_t)nch * sizeof(struct mt_chunk);
	const size_t o_part = o_first + ((size_t)n + 1) * sizeof(int64_t);
	const size_t o_tot = o_part + (size_t)nch * sizeof(double);
	const size_t o_nd = o_tot + (size_t)n * sizeof(double);
	const size_t bytes = o_nd + (size_t)n;
	char *host = (char *)calloc(1, bytes);
	if (!host)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	struct mt_chunk *ch = (struct mt_chunk *)host;
	int64_t *first = (int64_t *)(host + o_first), k = 0;
	for (int t = 0; t < n; t++) {
		first[t] = k;
		for (int64_t i0 = 0; i0 < spans[t].numel; i0 += MT_CHUNK) {
			const int64_t len = spans[t].numel - i0;

			ch[k].start = spans[t].offset + i0;
			ch[k].len = (int32_t)(len < MT_CHUNK ? len : MT_CHUNK);
			ch[k].tensor = t;
			k++;
		}
		host[o_nd + (size_t)t] = spans[t].no_decay;
	}
	first[n] = k;
	if (!(pl->block = cuda_buf_alloc(be, bytes, "the multi-tensor tables"))) {
		free(host);
		return TITAN_E_NOMEM;
	}
	char *d = (char *)pl->block;
	pl->chunk = (const struct mt_chunk *)d;
	pl->first = (const int64_t *)(d + o_first);
	pl->part = (double *)(d + o_part);
	pl->tot = (double *)(d + o_tot);
	pl->no_decay = (const unsigned char *)(d + o_nd);
	/* once per table: wait for the copy, then the host image can go */
	cudaError_t e = cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, s);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(s);
	free(host);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return titan_error(TITAN_E_DEVICE, "uploading the multi-tensor tables: %s (%s)",
				   cudaGetErrorString(e), cudaGetErrorName(e));
	}
	return 0;
}

/* The device tables of spans[0..n) (n > 0, checked): a kept one, or a new
 * one in the least recently used slot. */
static int mt_plan_get(struct titan_backend *be, const struct titan_tensor_span *spans, int n,
		       const struct mt_plan **out)
{
	struct cuda_impl *c = cuda_of(be);
	struct cuda_mt_cache *mc = c->mt;
	struct mt_plan *lru;
	int rc;

	if (!mc && !(mc = c->mt = (struct cuda_mt_cache *)calloc(1, sizeof(*mc))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	lru = &mc->plan[0];
	for (int i = 0; i < MT_PLANS; i++) {
		struct mt_plan *pl = &mc->plan[i];

		if (pl->spans && mt_same(pl, spans, n)) {
			pl->used = ++mc->clock;
			*out = pl;
			return 0;
		}
		if (pl->used < lru->used)
			lru = pl; /* a free slot has used 0 */
	}
	mt_plan_clear(be, lru);
	if ((rc = mt_plan_build(be, lru, spans, n)) < 0) {
		mt_plan_clear(be, lru);
		return rc;
	}
	lru->used = ++mc->clock;
	*out = lru;
	return 0;
}

/* Elements of x (4-byte aligned) before its first 16-byte boundary, at
 * most len. */
static __device__ int64_t mt_head(const float *x, int64_t len)
{
	const int64_t h = (int64_t)(((16u - ((uintptr_t)x & 15u)) & 15u) / 4u);

	return h < len ? h : len;
}

/* part[c] = Σ x² over chunk c, in double */
static __global__ void mt_sumsq_part_kernel(double *part, const float *base,
					    const struct mt_chunk *chunk, int64_t nch)
{
	__shared__ double sh[32];

	for (int64_t c = blockIdx.x; c < nch; c += gridDim.x) {
		const struct mt_chunk q = chunk[c];
		const float *x = base + q.start;
		const int64_t len = q.len, head = mt_head(x, len), n4 = (len - head) / 4;
		const float *x4 = x + head;
		double s = 0.0;

		for (int64_t i = threadIdx.x; i < head; i += blockDim.x)
			s += (double)x[i] * x[i];
		for (int64_t j = threadIdx.x; j < n4; j += blockDim.x) {
			const float4 a = ld4(x4, j);
			s += (double)a.x * a.x + (double)a.y * a.y + (double)a.z * a.z +
			     (double)a.w * a.w;
		}
		for (int64_t i = head + 4 * n4 + threadIdx.x; i < len; i += blockDim.x)
			s += (double)x[i] * x[i];
		s = block_sum(s, sh); /* ends with a barrier: sh is free again */
		if (threadIdx.x == 0)
			part[c] = s;
	}
}

/* tot[t] = Σ part[first[t] .. first[t+1]), one block per tensor */
static __global__ void mt_sumsq_tot_kernel(double *tot, const double *part, const int64_t *first,
					   int n)
{
	__shared__ double sh[32];

	for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
		const int64_t c1 = first[t + 1];
		double s = 0.0;

		for (int64_t c = first[t] + threadIdx.x; c < c1; c += blockDim.x)
			s += part[c];
		s = block_sum(s, sh);
		if (threadIdx.x == 0)
			tot[t] = s;
	}
}

int cuda_sumsq_multi(struct titan_backend *be, double *out, const float *base,
		     const struct titan_tensor_span *spans, int n)
{
	cudaStream_t s = cuda_of(be)->stream;
	const struct mt_plan *pl;
	int rc = titan_tensor_spans_check("sumsq_multi", spans, n);

	if (rc < 0 || n == 0)
		return rc;
	if ((rc = mt_plan_get(be, spans, n, &pl)) < 0)
		return rc;
	if (pl->nchunks == 0) { /* every tensor empty */
		for (int t = 0; t < n; t++)
			out[t] = 0.0;
		return 0;
	}
	double *host = (double *)cuda_host_scratch(be, (size_t)n * sizeof(double));
	if (!host)
		return TITAN_E_NOMEM;
	mt_sumsq_part_kernel<<<cuda_blocks(pl->nchunks, 1), THREADS, 0, s>>>(pl->part, base,
									     pl->chunk,
									     pl->nchunks);
	CU_LAUNCHED("sumsq_multi");
	mt_sumsq_tot_kernel<<<cuda_blocks(n, 1), THREADS, 0, s>>>(pl->tot, pl->part, pl->first, n);
	CU_LAUNCHED("sumsq_multi totals");
	CU_CHECK(cudaMemcpyAsync(host, pl->tot, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost,
				 s));
	CU_CHECK(cudaStreamSynchronize(s));
	memcpy(out, host, (size_t)n * sizeof(double));
	return 0;
}

static __global__ void mt_adamw_kernel(float *p, float *m, float *v, const float *g,
				       const struct mt_chunk *chunk,
				       const unsigned char *no_decay, int64_t nch,
				       struct adamw_consts k)
{
	for (int64_t c = blockIdx.x; c < nch; c += gridDim.x) {
		const struct mt_chunk q = chunk[c];
		struct adamw_consts kc = k;
		float *pc = p + q.start, *mc = m + q.start, *vc = v + q.start;
		const float *gc = g + q.start;
		const uintptr_t mis = (uintptr_t)pc & 15u;
		const bool vec = ((uintptr_t)mc & 15u) == mis && ((uintptr_t)vc & 15u) == mis &&
				 ((uintptr_t)gc & 15u) == mis;
		const int64_t len = q.len, head = vec ? mt_head(pc, len) : len;
		const int64_t n4 = (len - head) / 4;

		if (no_decay[q.tensor])
			kc.keep = 1.0f; /* adamw_step's with weight decay 0 */
		for (int64_t i = threadIdx.x; i < head; i += blockDim.x)
			adamw_elem(pc + i, mc + i, vc + i, gc[i], kc);
		for (int64_t j = threadIdx.x; j < n4; j += blockDim.x)
			adamw_vec4(pc + head, mc + head, vc + head, gc + head, j, kc);
		for (int64_t i = head + 4 * n4 + threadIdx.x; i < len; i += blockDim.x)
			adamw_elem(pc + i, mc + i, vc + i, gc[i], kc);
	}
}

int cuda_adamw_multi(struct titan_backend *be, float *p, float *m, float *v, const float *g,
		     const struct titan_tensor_span *spans, int n,
		     const struct titan_adamw_hparams *hp, int64_t step, float grad_mul)
{
	const struct mt_plan *pl;
	int rc = titan_tensor_spans_check("adamw_multi", spans, n);

	if (rc < 0)
		return rc;
	if (step < 1)
		return titan_error(TITAN_E_INVALID, "adamw: step %lld (must be >= 1)",
				   (long long)step);
	if (n == 0)
		return 0;
	if ((rc = mt_plan_get(be, spans, n, &pl)) < 0)
		return rc;
	if (pl->nchunks == 0)
		return 0;
	mt_adamw_kernel<<<cuda_blocks(pl->nchunks, 1), THREADS, 0, cuda_of(be)->stream>>>(
		p, m, v, g, pl->chunk, pl->no_decay, pl->nchunks,
		adamw_consts_of(hp, step, grad_mul));
	CU_LAUNCHED("adamw_multi");
	return 0;
}

/* ---- vector helpers --------------------------------------------------------- */

static __global__ void scale_kernel(float *x, int64_t n, int64_t n4, float alpha)
{
	for (int64_t k = GRID_TID; k < n4; k += GRID_STRIDE) {
		const float4 a = ld4(x, k);
		st4(x, k, make_float4(a.x * alpha, a.y * alpha, a.z * alpha, a.w * alpha));
	}
	for (int64_t i = 4 * n4 + GRID_TID; i < n; i += GRID_STRIDE)
		x[i] *= alpha;
}

/* y may alias a or b */
static __global__ void add_kernel(float *y, const float *a, const float *b, int64_t n, int64_t n4)
{
	for (int64_t k = GRID_TID; k < n4; k += GRID_STRIDE) {
		const float4 u = ld4(a, k), w = ld4(b, k);
		st4(y, k, make_float4(u.x + w.x, u.y + w.y, u.z + w.z, u.w + w.w));
	}
	for (int64_t i = 4 * n4 + GRID_TID; i < n; i += GRID_STRIDE)
		y[i] = a[i] + b[i];
}

int cuda_scale(struct titan_backend *be, float *x, int64_t n, float alpha)
{
	if (n <= 0)
		return 0;
	const int64_t n4 = aligned(x, 16) ? n / 4 : 0;
	scale_kernel<<<flat_blocks(n, n4), THREADS, 0, cuda_of(be)->stream>>>(x, n, n4, alpha);
	CU_LAUNCHED("scale");
	return 0;
}

int cuda_add(struct titan_backend *be, float *y, const float *a, const float *b, int64_t n)
{
	if (n <= 0)
		return 0;
	const int64_t n4 = aligned(y, 16) && aligned(a, 16) && aligned(b, 16) ? n / 4 : 0;
	add_kernel<<<flat_blocks(n, n4), THREADS, 0, cuda_of(be)->stream>>>(y, a, b, n, n4);
	CU_LAUNCHED("add");
	return 0;
}

int cuda_copy(struct titan_backend *be, float *dst, const float *src, int64_t n)
{
	if (n > 0)
		CU_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float),
					 cudaMemcpyDeviceToDevice, cuda_of(be)->stream));
	return 0;
}

int cuda_zero(struct titan_backend *be, float *x, int64_t n)
{
	if (n > 0)
		CU_CHECK(cudaMemsetAsync(x, 0, (size_t)n * sizeof(float), cuda_of(be)->stream));
	return 0;
}
