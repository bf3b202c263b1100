/*
 * vocab.cu — the CUDA twins of the vocabulary-parallel pieces (titan/ops.h,
 * lib/cpu/vocab.c): tensor parallelism's embedding lookup and gradient on
 * a rank's rows [v0, v0 + V), and the three steps of its cross-entropy
 * over logits split by columns.  Every element's arithmetic is the CPU's,
 * in the CPU's order: the embedding gradient gives a thread one column
 * and walks the tokens in order (no atomics), the loss steps give a
 * thread one row and walk its columns in order (the double sum of
 * exponentials as the CPU adds it).  One thread per row is simple rather
 * than fast; the loss of one chunk is a small part of a step next to its
 * two GEMMs.  expf and log are CUDA's (within 2 ulp / 1 ulp of libm's).
 */
#include <math.h>
#include <stdint.h>

#include "cuda_impl.h"

#define THREADS 256

static __global__ void part_fwd_kernel(float *out, const uint32_t *ids, const float *w,
				       int64_t n, int64_t v0, int64_t V, int64_t C)
{
	for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
		const int64_t r = (int64_t)ids[i] - v0;
		float *dst = out + i * C;

		for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
			dst[j] = r >= 0 && r < V ? w[r * C + j] : 0.0f;
	}
}

static __global__ void part_bwd_kernel(float *dw, const uint32_t *ids, const float *dx,
				       int64_t n, int64_t v0, int64_t V, int64_t C)
{
	for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C;
	     c += (int64_t)gridDim.x * blockDim.x)
		for (int64_t i = 0; i < n; i++) {
			const int64_t r = (int64_t)ids[i] - v0;

			if (r >= 0 && r < V)
				dw[r * C + c] = __fadd_rn(dw[r * C + c], dx[i * C + c]);
		}
}

static __global__ void ce_max_kernel(float *mx, const float *z, int64_t rows, int64_t V)
{
	for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
	     r += (int64_t)gridDim.x * blockDim.x) {
		float x = -INFINITY;

		for (int64_t j = 0; j < V; j++)
			x = z[r * V + j] > x ? z[r * V + j] : x;
		mx[r] = x;
	}
}

static __global__ void ce_exp_kernel(double *st, float *z, const float *mx, const int32_t *labels,
				     int64_t v0, int64_t rows, int64_t V)
{
	for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
	     r += (int64_t)gridDim.x * blockDim.x) {
		const int64_t y = (int64_t)labels[r] - v0;
		float *zr = z + r * V;
		double sum = 0;

		st[2 * r + 1] = labels[r] >= 0 && y >= 0 && y < V ? zr[y] : 0;
		for (int64_t j = 0; j < V; j++) {
			zr[j] = expf(__fsub_rn(zr[j], mx[r]));
			sum += zr[j];
		}
		st[2 * r] = sum;
	}
}

static __global__ void ce_grad_kernel(double *st, float *z, const float *mx,
				      const int32_t *labels, int64_t v0, int64_t rows, int64_t V,
				      float gs, bool grads)
{
	for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
	     r += (int64_t)gridDim.x * blockDim.x) {
		const int64_t y = (int64_t)labels[r] - v0;
		const float inv = (float)(1.0 / st[2 * r]);
		float *zr = z + r * V;

		if (labels[r] < 0) {
			st[2 * r] = st[2 * r + 1] = 0;
			if (grads)
				for (int64_t j = 0; j < V; j++)
					zr[j] = 0.0f;
			continue;
		}
		st[2 * r] = ((double)mx[r] + log(st[2 * r])) - st[2 * r + 1];
		st[2 * r + 1] = 1;
		if (!grads)
			continue;
		for (int64_t j = 0; j < V; j++)
			zr[j] = __fmul_rn(__fmul_rn(zr[j], inv), gs);
		if (y >= 0 && y < V)
			zr[y] = __fsub_rn(zr[y], gs);
	}
}

int cuda_embedding_part_fwd(struct titan_backend *be, float *out, const uint32_t *ids,
			    const float *w, int64_t n, int64_t v0, int64_t V, int64_t C)
{
	int rc;

	if ((rc = titan_vocab_part_check("embedding_part_fwd", n, V, C)) < 0 || n == 0 ||
	    C == 0)
		return rc;
	part_fwd_kernel<<<cuda_blocks(n, 1), THREADS, 0, cuda_of(be)->stream>>>(out, ids, w, n,
										  v0, V, C);
	CU_LAUNCHED("embedding_part_fwd");
	return 0;
}

int cuda_embedding_part_bwd(struct titan_backend *be, float *dw, const uint32_t *ids,
			    const float *dx, int64_t n, int64_t v0, int64_t V, int64_t C)
{
	int rc;

	if ((rc = titan_vocab_part_check("embedding_part_bwd", n, V, C)) < 0 || n == 0 ||
	    C == 0 || V == 0)
		return rc;
	part_bwd_kernel<<<cuda_blocks(C, THREADS), THREADS, 0, cuda_of(be)->stream>>>(dw, ids, dx,
										       n, v0, V, C);
	CU_LAUNCHED("embedding_part_bwd");
	return 0;
}

int cuda_ce_part_max(struct titan_backend *be, float *mx, const float *z, int64_t rows, int64_t V)
{
	int rc;

	if ((rc = titan_vocab_part_check("ce_part_max", rows, V, 0)) < 0 || rows == 0)
		return rc;
	ce_max_kernel<<<cuda_blocks(rows, THREADS), THREADS, 0, cuda_of(be)->stream>>>(mx, z, rows,
										       V);
	CU_LAUNCHED("ce_part_max");
	return 0;
}

int cuda_ce_part_exp(struct titan_backend *be, double *st, float *z, const float *mx,
		     const int32_t *labels, int64_t v0, int64_t rows, int64_t V)
{
	int rc;

	if ((rc = titan_vocab_part_check("ce_part_exp", rows, V, 0)) < 0 || rows == 0)
		return rc;
	ce_exp_kernel<<<cuda_blocks(rows, THREADS), THREADS, 0, cuda_of(be)->stream>>>(
		st, z, mx, labels, v0, rows, V);
	CU_LAUNCHED("ce_part_exp");
	return 0;
}

int cuda_ce_part_grad(struct titan_backend *be, double *st, float *z, const float *mx,
		      const int32_t *labels, int64_t v0, int64_t rows, int64_t V, float gs,
		      bool grads)
{
	int rc;

	if ((rc = titan_vocab_part_check("ce_part_grad", rows, V, 0)) < 0 || rows == 0)
		return rc;
	ce_grad_kernel<<<cuda_blocks(rows, THREADS), THREADS, 0, cuda_of(be)->stream>>>(
		st, z, mx, labels, v0, rows, V, gs, grads);
	CU_LAUNCHED("ce_part_grad");
	return 0;
}
