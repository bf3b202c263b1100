/*
 * loss.cu — the output layer fused with cross-entropy on the GPU (the CUDA
 * twin of lib/cpu/loss.c; torchtitan's cross_entropy(logits.float(), labels,
 * reduction="sum", ignore_index=-100) and its backward).  Logits are made
 * `chunk` tokens at a time with cuda_gemm; one block per row turns its row
 * into the token's loss and, in place, into dz = (softmax − onehot(y))·gs;
 * two more GEMMs give dh and dW.
 *
 * Per row: one read for the max and Σ exp(z − max), online (each thread
 * keeps a running max and rescales its double sum when the max grows; the
 * (max, sum) pairs merge in a fixed shuffle/shared-memory tree), and with
 * gradients a second read and one write for dz, whose terms are
 * exp(z − max) with the row's max as on the CPU.  The sum's terms are
 * exp(z − local max) rescaled in double, so it differs from the CPU's by
 * rounding (~1e-7 relative), besides CUDA's expf.
 *
 * Per-token losses (double) stay on the device until the end; the host
 * copies them back with the labels and adds the valid ones in token order,
 * as the CPU does.  A label >= V (the caller checks labels on the host) is
 * treated as ignored by the kernel and reported as TITAN_E_INVALID here.
 */
#include <limits.h>
#include <math.h>

#include "cuda_impl.h"

#define CE_MAX_THREADS 512

/* Merges (om, os) into (*m, *s): the sum of exp(· − max) over both parts.
 * Symmetric in its two arguments (fmaxf and + commute), so both lanes of a
 * butterfly shuffle get the same bits. */
static __device__ __forceinline__ void ce_merge(float *m, double *s, float om, double os)
{
	const float nm = fmaxf(*m, om);
	const double a = *m == nm ? *s : *s * exp((double)*m - (double)nm);
	const double b = om == nm ? os : os * exp((double)om - (double)nm);

	*m = nm;
	*s = a + b;
}

/* Every thread gets the block's (max, sum).  blockDim.x is a multiple of 32,
 * at most 1024; each warp reduces the warp partials itself (same order in
 * every warp, same result), so no second barrier is needed. */
static __device__ void ce_block_reduce(float *m, double *s)
{
	__shared__ float wm[32];
	__shared__ double ws[32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nw = blockDim.x >> 5;

	for (int o = 16; o > 0; o >>= 1)
		ce_merge(m, s, __shfl_xor_sync(0xffffffffu, *m, o),
			 __shfl_xor_sync(0xffffffffu, *s, o));
	if (lane == 0) {
		wm[warp] = *m;
		ws[warp] = *s;
	}
	__syncthreads();
	*m = lane < nw ? wm[lane] : -INFINITY;
	*s = lane < nw ? ws[lane] : 0.0;
	for (int o = 16; o > 0; o >>= 1)
		ce_merge(m, s, __shfl_xor_sync(0xffffffffu, *m, o),
			 __shfl_xor_sync(0xffffffffu, *s, o));
}

/* One block per row r of z[rows, ldz] (ldz a multiple of 4, the row
 * 16-byte aligned; the first v entries are the logits).  loss[r] =
 * logsumexp(z[r]) − z[r,y] for 0 <= y < v, else 0; with `grads` the row
 * becomes dz (zeros for an ignored row). */
static __global__ void __launch_bounds__(CE_MAX_THREADS)
ce_rows(float *z, int64_t ldz, const int32_t *labels, int64_t v, float gs, bool grads,
	double *loss)
{
	float *zr = z + (int64_t)blockIdx.x * ldz;
	float4 *z4 = (float4 *)zr;
	const int32_t y = labels[blockIdx.x];
	const int64_t v4 = v >> 2;

	if (y < 0 || y >= v) {
		if (grads) {
			for (int64_t i = threadIdx.x; i < v4; i += blockDim.x)
				z4[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			for (int64_t j = 4 * v4 + threadIdx.x; j < v; j += blockDim.x)
				zr[j] = 0.0f;
		}
		if (threadIdx.x == 0)
			loss[blockIdx.x] = 0.0;
		return;
	}
	/* read before the barrier in ce_block_reduce, so before any write */
	const float zy = threadIdx.x == 0 ? zr[y] : 0.0f;
	float m = -INFINITY;
	double s = 0.0;

	for (int64_t i = threadIdx.x; i < v4; i += blockDim.x) {
		const float4 q = z4[i];
		const float qm = fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w));

		if (qm > m) {
			s *= exp((double)m - (double)qm);
			m = qm;
		}
		s += (double)expf(q.x - m);
		s += (double)expf(q.y - m);
		s += (double)expf(q.z - m);
		s += (double)expf(q.w - m);
	}
	for (int64_t j = 4 * v4 + threadIdx.x; j < v; j += blockDim.x) {
		const float x = zr[j];

		if (x > m) {
			s *= exp((double)m - (double)x);
			m = x;
		}
		s += (double)expf(x - m);
	}
	ce_block_reduce(&m, &s);
	if (threadIdx.x == 0)
		loss[blockIdx.x] = ((double)m + log(s)) - (double)zy;
	if (!grads)
		return;

	/* dz = exp(z − max)·inv·gs, minus gs at the label (as lib/cpu/loss.c) */
	const float inv = (float)(1.0 / s);

	for (int64_t i = threadIdx.x; i < v4; i += blockDim.x) {
		float4 q = z4[i];
		const int64_t j = 4 * i;

		q.x = expf(q.x - m) * inv * gs;
		q.y = expf(q.y - m) * inv * gs;
		q.z = expf(q.z - m) * inv * gs;
		q.w = expf(q.w - m) * inv * gs;
		q.x = j == y ? q.x - gs : q.x;
		q.y = j + 1 == y ? q.y - gs : q.y;
		q.z = j + 2 == y ? q.z - gs : q.z;
		q.w = j + 3 == y ? q.w - gs : q.w;
		z4[i] = q;
	}
	for (int64_t j = 4 * v4 + threadIdx.x; j < v; j += blockDim.x) {
		const float d = expf(zr[j] - m) * inv * gs;

		zr[j] = j == y ? d - gs : d;
	}
}

/* Threads per row: enough for ~16 logits each, 64 to CE_MAX_THREADS. */
static int ce_threads(int64_t v)
{
	int t = 64;

	while (t < CE_MAX_THREADS && (int64_t)t * 16 < v)
		t *= 2;
	return t;
}

int cuda_classifier_ce(struct titan_backend *be, double *loss_sum, int64_t *n_valid,
		       float *dh, float *dw, const float *h, const float *w,
		       const int32_t *labels, int64_t n, int64_t c, int64_t v,
		       float grad_scale, int64_t chunk)
{
	struct cuda_impl *cu = cuda_of(be);
	const bool grads = dh != NULL;
	int rc;

	*loss_sum = 0.0;
	*n_valid = 0;
	if ((dh == NULL) != (dw == NULL))
		return titan_error(TITAN_E_INVALID,
				   "classifier_ce: dh and dw must both be given or both be NULL");
	if (c <= 0 || v <= 0 || n < 0 || v > INT_MAX)
		return titan_error(TITAN_E_INVALID, "classifier_ce: bad sizes N=%lld C=%lld V=%lld",
				   (long long)n, (long long)c, (long long)v);
	if (n == 0)
		return 0;
	if (chunk <= 0 || chunk > n)
		chunk = n;
	if (chunk > INT_MAX)
		chunk = INT_MAX;

	/* Device scratch, one call: logits z[chunk, ldz] (rows padded to 4
	 * floats: aligned rows for float4 and cuBLAS's fast paths), then the
	 * per-token losses rl[n] at a 256-byte boundary. */
	const int64_t ldz = (v + 3) / 4 * 4;
	const size_t zbytes = ((size_t)chunk * (size_t)ldz * sizeof(float) + 255) / 256 * 256;
	char *ws = (char *)cuda_scratch(be, zbytes + (size_t)n * sizeof(double));
	if (!ws)
		return TITAN_E_NOMEM;
	float *z = (float *)ws;
	double *rl = (double *)(ws + zbytes);
	/* Host scratch: the losses, then the labels. */
	char *hs = (char *)cuda_host_scratch(be, (size_t)n * (sizeof(double) + sizeof(int32_t)));
	if (!hs)
		return TITAN_E_NOMEM;
	double *hl = (double *)hs;
	int32_t *hy = (int32_t *)(hs + (size_t)n * sizeof(double));
	const int threads = ce_threads(v);

	/* bf16 GEMMs: W rounded once for every chunk's GEMMs, dz once for the
	 * dh and dW GEMMs of its chunk (cuda_gemm would round each operand of
	 * each call: W alone is V·C floats) */
	const bool bf = cu->matmul == TITAN_CUDA_MATMUL_BF16;
	const size_t w16b = ((size_t)(v * c) * 2 + 255) & ~(size_t)255;
	__nv_bfloat16 *w16 = NULL, *z16 = NULL;

	if (bf) {
		char *keep = (char *)cuda_bf16_keep(be, w16b + (size_t)chunk * (size_t)v * 2);

		if (!keep)
			return TITAN_E_NOMEM;
		w16 = (__nv_bfloat16 *)keep;
		z16 = (__nv_bfloat16 *)(keep + w16b);
		if ((rc = cuda_to_bf16(be, w16, w, v, c, c)) < 0)
			return rc;
	}
	for (int64_t n0 = 0; n0 < n; n0 += chunk) {
		const int64_t cn = n0 + chunk < n ? chunk : n - n0;
		const float *hc = h + n0 * c;

		/* z[cn,V] = h[cn,C] · W[V,C]^T
		 * cuBLAS: (T, N, m=V, n=cn, k=C, W lda=C, h ldb=C, z ldc=ldz) */
		rc = bf ? cuda_gemm_bf16(be, false, true, cn, v, c, 1.0f, hc, NULL, c, NULL, w16, c,
					 0.0f, z, ldz)
			: cuda_gemm(be, false, true, cn, v, c, 1.0f, hc, c, w, c, 0.0f, z, ldz);
		if (rc < 0)
			return rc;
		ce_rows<<<(unsigned)cn, threads, 0, cu->stream>>>(z, ldz, labels + n0, v,
								    grad_scale, grads, rl + n0);
		CU_LAUNCHED("classifier_ce rows");
		if (grads && bf) {
			/* z16[cn,V] (contiguous) = bf16(dz); the same two GEMMs */
			if ((rc = cuda_to_bf16(be, z16, z, cn, v, ldz)) < 0 ||
			    (rc = cuda_gemm_bf16(be, false, false, cn, c, v, 1.0f, NULL, z16, v,
						 NULL, w16, c, 0.0f, dh + n0 * c, c)) < 0 ||
			    (rc = cuda_gemm_bf16(be, true, false, v, c, cn, 1.0f, NULL, z16, v, hc,
						 NULL, c, 1.0f, dw, c)) < 0)
				return rc;
		} else if (grads) {
			/* dh[cn,C] = dz[cn,V] · W[V,C]
			 * cuBLAS: (N, N, m=C, n=cn, k=V, W lda=C, dz ldb=ldz, dh ldc=C) */
			rc = cuda_gemm(be, false, false, cn, c, v, 1.0f, z, ldz, w, c, 0.0f,
				       dh + n0 * c, c);
			if (rc < 0)
				return rc;
			/* dW[V,C] += dz^T[V,cn] · h[cn,C]
			 * cuBLAS: (N, T, m=C, n=V, k=cn, h lda=C, dz ldb=ldz, dW ldc=C,
			 * beta=1) */
			rc = cuda_gemm(be, true, false, v, c, cn, 1.0f, z, ldz, hc, c, 1.0f, dw, c);
			if (rc < 0)
				return rc;
		}
	}
	CU_CHECK(cudaMemcpyAsync(hl, rl, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost,
				 cu->stream));
	CU_CHECK(cudaMemcpyAsync(hy, labels, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost,
				 cu->stream));
	CU_CHECK(cudaStreamSynchronize(cu->stream));

	double total = 0.0;
	int64_t count = 0;
	for (int64_t i = 0; i < n; i++) {
		if (hy[i] >= v)
			return titan_error(TITAN_E_INVALID,
					   "label %d at position %lld is outside the vocabulary "
					   "(size %lld)", (int)hy[i], (long long)i, (long long)v);
		if (hy[i] >= 0) {
			total += hl[i];
			count++;
		}
	}
	*loss_sum = total;
	*n_valid = count;
	return 0;
}
