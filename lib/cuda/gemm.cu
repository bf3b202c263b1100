/*
 * gemm.cu — nn.Linear forward/backward on the GPU (the CUDA twin of
 * lib/cpu/matmul.c) and cuda_gemm, the row-major GEMM the backend's other
 * ops use: cublasGemmEx on fp32 storage (A, B, C all CUDA_R_32F) with the
 * backend's compute mode, fp32 accumulate throughout:
 *   TITAN_CUDA_MATMUL_FP32  CUBLAS_COMPUTE_32F (the handle is in
 *                           CUBLAS_PEDANTIC_MATH: plain fp32 FMA)
 *   TITAN_CUDA_MATMUL_TF32  CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores)
 *   TITAN_CUDA_MATMUL_BF16  CUBLAS_COMPUTE_32F_FAST_16BF (tensor cores)
 *
 * Row-major to column-major: a row-major X[r,c] with row stride ld is, read
 * column-major with leading dimension ld, the matrix X^T[c,r].  So the
 * row-major C[m,n] = op(A)·op(B) is the column-major C^T = op(B)^T·op(A)^T:
 * cuBLAS gets B as its first operand (transa = tb ? T : N) and A as its
 * second (transb = ta ? T : N), with m and n swapped, k and the three
 * leading dimensions unchanged.  Each call below is written out in this
 * form.  cuBLAS's fast paths want 16-byte aligned pointers and leading
 * dimensions that are multiples of 4 floats; nn.Linear sizes are, and
 * loss.cu pads its logits rows to keep them so.
 */
#include <limits.h>

#include "cuda_impl.h"

static cublasComputeType_t gemm_compute(enum titan_cuda_matmul mode)
{
	switch (mode) {
	case TITAN_CUDA_MATMUL_TF32:
		return CUBLAS_COMPUTE_32F_FAST_TF32;
	case TITAN_CUDA_MATMUL_BF16:
		return CUBLAS_COMPUTE_32F_FAST_16BF;
	case TITAN_CUDA_MATMUL_FP32:
	default:
		return CUBLAS_COMPUTE_32F;
	}
}

int cuda_gemm(struct titan_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
	      float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
	      float beta, float *c, int64_t ldc)
{
	struct cuda_impl *cu = cuda_of(be);

	if (m < 0 || n < 0 || k < 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX ||
	    lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
		return titan_error(TITAN_E_INVALID, "gemm %lldx%lldx%lld: dimensions out of range",
				   (long long)m, (long long)n, (long long)k);
	if (m == 0 || n == 0)
		return 0;
	if (k == 0) {
		/* C = beta·C; beta is 0 or 1 in every caller */
		if (beta == 0.0f)
			CU_CHECK(cudaMemset2DAsync(c, (size_t)ldc * sizeof(float), 0,
						   (size_t)n * sizeof(float), (size_t)m, cu->stream));
		if (beta == 0.0f || beta == 1.0f)
			return 0;
	}
	BLAS_CHECK(cublasGemmEx(cu->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
				ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha,
				b, CUDA_R_32F, (int)ldb, a, CUDA_R_32F, (int)lda, &beta,
				c, CUDA_R_32F, (int)ldc, gemm_compute(cu->matmul),
				CUBLAS_GEMM_DEFAULT));
	return 0;
}

int cuda_matmul_fwd(struct titan_backend *be, float *y, const float *x, const float *w,
		    int64_t n, int64_t in, int64_t out, bool accumulate)
{
	/* y[n,out] = x[n,in] · W[out,in]^T
	 * cuBLAS: (T, N, m=out, n=n, k=in, W lda=in, x ldb=in, y ldc=out):
	 * W read column-major is [in,out] (T: [out,in]), x is [in,n], y^T [out,n] */
	return cuda_gemm(be, false, true, n, out, in, 1.0f, x, in, w, in,
			 accumulate ? 1.0f : 0.0f, y, out);
}

int cuda_matmul_bwd(struct titan_backend *be, float *dx, float *dw, const float *dy,
		    const float *x, const float *w, int64_t n, int64_t in, int64_t out,
		    bool accumulate_dx)
{
	int rc;

	if (dx) {
		/* dx[n,in] = dy[n,out] · W[out,in]
		 * cuBLAS: (N, N, m=in, n=n, k=out, W lda=in, dy ldb=out, dx ldc=in):
		 * W column-major is [in,out], dy is [out,n], dx^T [in,n] */
		rc = cuda_gemm(be, false, false, n, in, out, 1.0f, dy, out, w, in,
			       accumulate_dx ? 1.0f : 0.0f, dx, in);
		if (rc < 0)
			return rc;
	}
	if (dw) {
		/* dW[out,in] += dy^T[out,n] · x[n,in]
		 * cuBLAS: (N, T, m=in, n=out, k=n, x lda=in, dy ldb=out, dW ldc=in,
		 * beta=1): x column-major is [in,n], dy is [out,n] (T: [n,out]),
		 * dW^T [in,out] */
		rc = cuda_gemm(be, true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);
		if (rc < 0)
			return rc;
	}
	return 0;
}
