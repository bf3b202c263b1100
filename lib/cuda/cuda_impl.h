/*
 * cuda_impl.h — what the .cu files of the CUDA backend share: the backend's
 * private state (stream, cuBLAS handles, a grow-only scratch buffer), the
 * error macros, and the op functions each file defines (signatures of
 * struct titan_backend_ops in titan/ops.h, on device pointers).
 */
#ifndef TITAN_CUDA_IMPL_H
#define TITAN_CUDA_IMPL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_sizes.h"

#include "titan/core.h"
#include "titan/cuda.h"
#include "titan/ops.h"

struct cuda_impl {
	int device;
	int sm_count;
	cudaStream_t stream;           /* every op's kernels and GEMMs */
	cublasHandle_t blas;
	cublasLtHandle_t lt;
	enum titan_cuda_matmul matmul;
	void *blas_ws;                 /* cuBLAS workspace */
	size_t blas_ws_bytes;
	void *scratch;                 /* cuda_scratch(): grow-only */
	size_t scratch_bytes;
	void *host_scratch;            /* pinned host memory for results */
	size_t host_scratch_bytes;
	struct cuda_mt_cache *mt;      /* the multi-tensor ops' span tables (elementwise.cu) */
	void *gemm_ws;                 /* bf16 copies of GEMM operands (gemm.cu) */
	size_t gemm_ws_bytes;
	void *bf16_keep;               /* cuda_bf16_keep(): operands an op reuses */
	size_t bf16_keep_bytes;
	struct cudnn_attn *dnn;        /* cudnn_attn.cu: handle, plans (NULL until used) */
};

static inline struct cuda_impl *cuda_of(struct titan_backend *be)
{
	return (struct cuda_impl *)be->impl;
}

/* Returns from the calling function with TITAN_E_DEVICE and CUDA's message. */
#define CU_CHECK(call)                                                                \
	do {                                                                          \
		cudaError_t e_ = (call);                                              \
		if (e_ != cudaSuccess) {                                              \
			(void)cudaGetLastError();                                     \
			return titan_error(TITAN_E_DEVICE, "%s: %s (%s)", #call,      \
					   cudaGetErrorString(e_), cudaGetErrorName(e_)); \
		}                                                                     \
	} while (0)

/* After a kernel launch: launch-configuration errors (and, with
 * TITAN_CUDA_SYNC=1 in the environment, errors of the kernel itself). */
#define CU_LAUNCHED(what)                                                                \
	do {                                                                             \
		cudaError_t e_ = cudaGetLastError();                                     \
		if (e_ == cudaSuccess && cuda_sync_debug())                              \
			e_ = cudaDeviceSynchronize();                                    \
		if (e_ != cudaSuccess)                                                   \
			return titan_error(TITAN_E_DEVICE, "%s kernel: %s (%s)", what,   \
					   cudaGetErrorString(e_), cudaGetErrorName(e_)); \
	} while (0)

#define BLAS_CHECK(call)                                                           \
	do {                                                                       \
		cublasStatus_t s_ = (call);                                        \
		if (s_ != CUBLAS_STATUS_SUCCESS)                                   \
			return titan_error(TITAN_E_DEVICE, "%s: %s (%s)", #call,   \
					   cublasGetStatusString(s_),              \
					   cublasGetStatusName(s_));               \
	} while (0)

/* true when TITAN_CUDA_SYNC=1: synchronize after every launch. */
bool cuda_sync_debug(void);
/* A grow-only device buffer (*buf, *have bytes) of at least `bytes`: kept
 * when big enough, else the old one is freed once the stream has drained
 * and max(min, bytes + bytes / extra_div) allocated (named `what` in the
 * allocator's tags).  The scratch, the bf16 GEMM operands and cuDNN's
 * staging are such buffers; titan-estimate (lib/estimate/gpu_titan.c)
 * replays the same growth.  NULL + TITAN_E_NOMEM when cudaMalloc fails. */
void *cuda_grow_buf(struct titan_backend *be, void **buf, size_t *have, size_t bytes, size_t min,
		    unsigned extra_div, const char *what);
/* Device scratch of at least `bytes` (valid until the next call; ops run in
 * stream order, so one op's scratch is free once it has queued its work).
 * NULL + TITAN_E_NOMEM recorded when cudaMalloc fails. */
void *cuda_scratch(struct titan_backend *be, size_t bytes);
/* Pinned host scratch of at least `bytes` (same rules). */
void *cuda_host_scratch(struct titan_backend *be, size_t bytes);
/* Device memory for the backend's own buffers (the cuBLAS workspace,
 * scratch, bf16 operand copies): from be->alloc when there is one — the
 * caching allocator, so they count as workspace in the memory line, the
 * reserved bytes and the memory trace, as PyTorch's cuBLAS workspace and
 * autocast copies do — else cudaMalloc.  NULL + TITAN_E_NOMEM naming
 * `what` on failure. */
void *cuda_buf_alloc(struct titan_backend *be, size_t bytes, const char *what);
/* Frees a cuda_buf_alloc block; NULL is a no-op.  The caller makes sure no
 * queued work still uses it (the stream is synchronized first). */
void cuda_buf_free(struct titan_backend *be, void *p);

static inline unsigned cuda_blocks(int64_t n, int threads)
{
	int64_t b = (n + threads - 1) / threads; /* kernels loop grid-stride past this */

	return (unsigned)(b > (1LL << 20) ? (1LL << 20) : (b < 1 ? 1 : b));
}

/* TITAN_CUDA_PROFILE=1: wrap be's table with per-op GPU timers (profile.cu). */
void cuda_profile_wrap(struct titan_backend *be);

/* ---- ops (titan/ops.h signatures) ---------------------------------------- */
/* gemm.cu */
int cuda_matmul_fwd(struct titan_backend *be, float *y, const float *x, const float *w,
		    int64_t n, int64_t in, int64_t out, bool accumulate);
int cuda_matmul_bwd(struct titan_backend *be, float *dx, float *dw, const float *dy,
		    const float *x, const float *w, int64_t n, int64_t in, int64_t out,
		    bool accumulate_dx);
/* Row-major C[m,n] (=, or += when beta = 1) alpha·op(A)·op(B) with the
 * backend's compute mode; ta/tb: the operand is stored transposed
 * (A[k,m] / B[n,k] row-major).  lda/ldb/ldc are row strides. */
int cuda_gemm(struct titan_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
	      float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
	      float beta, float *c, int64_t ldc);
/* bf16 mode: cuda_gemm with operands already rounded to bf16 — a16/b16
 * non-NULL are used as they are (contiguous, row length = the stored
 * matrix's columns: ta ? m : k for A, tb ? k : n for B) and a/b ignored;
 * NULL ones are converted from a/b (lda/ldb) as cuda_gemm does. */
int cuda_gemm_bf16(struct titan_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
		   float alpha, const float *a, const __nv_bfloat16 *a16, int64_t lda,
		   const float *b, const __nv_bfloat16 *b16, int64_t ldb, float beta, float *c,
		   int64_t ldc);
/* dst[rows, cols] (contiguous) = bf16(src[r·ld + c]), on the stream. */
int cuda_to_bf16(struct titan_backend *be, __nv_bfloat16 *dst, const float *src, int64_t rows,
		 int64_t cols, int64_t ld);
/* A device buffer (grow-only, separate from cuda_scratch and from the one
 * cuda_gemm converts into) for bf16 operands an op converts once and uses
 * in several GEMMs. */
void *cuda_bf16_keep(struct titan_backend *be, size_t bytes);
/* elementwise.cu */
int cuda_embedding_fwd(struct titan_backend *be, float *out, const uint32_t *ids,
		       const float *table, int64_t n, int64_t v, int64_t c);
int cuda_embedding_bwd(struct titan_backend *be, float *dtable, const uint32_t *ids,
		       const float *dout, int64_t n, int64_t v, int64_t c);
int cuda_rmsnorm_fwd(struct titan_backend *be, float *y, float *rstd, const float *x,
		     const float *w, int64_t n, int64_t c, float eps);
int cuda_rmsnorm_bwd(struct titan_backend *be, float *dx, float *dw, const float *dy,
		     const float *x, const float *w, const float *rstd, int64_t n, int64_t c,
		     bool accumulate_dx);
int cuda_rope_fwd(struct titan_backend *be, float *x, const float *freqs, int64_t batch,
		  int64_t seq, int64_t nh, int64_t head_dim);
int cuda_rope_bwd(struct titan_backend *be, float *dx, const float *freqs, int64_t batch,
		  int64_t seq, int64_t nh, int64_t head_dim);
int cuda_swiglu_fwd(struct titan_backend *be, float *h, const float *a, const float *b,
		    int64_t n);
int cuda_swiglu_bwd(struct titan_backend *be, float *da, float *db, const float *dh,
		    const float *a, const float *b, int64_t n);
int cuda_adamw_step(struct titan_backend *be, float *p, float *m, float *v, const float *g,
		    int64_t n, const struct titan_adamw_hparams *hp, int64_t step,
		    float grad_mul);
int cuda_sumsq(struct titan_backend *be, double *out, const float *x, int64_t n);
int cuda_sumsq_multi(struct titan_backend *be, double *out, const float *base,
		     const struct titan_tensor_span *spans, int n);
int cuda_adamw_multi(struct titan_backend *be, float *p, float *m, float *v, const float *g,
		     const struct titan_tensor_span *spans, int n,
		     const struct titan_adamw_hparams *hp, int64_t step, float grad_mul);
/* Frees the multi-tensor ops' device tables (the backend's release). */
void cuda_mt_release(struct titan_backend *be);
int cuda_scale(struct titan_backend *be, float *x, int64_t n, float alpha);
int cuda_add(struct titan_backend *be, float *y, const float *a, const float *b, int64_t n);
int cuda_copy(struct titan_backend *be, float *dst, const float *src, int64_t n);
int cuda_zero(struct titan_backend *be, float *x, int64_t n);
/* backend.cu: the buffer ops */
void *cuda_op_buf_alloc(struct titan_backend *be, size_t bytes, enum titan_mem_tag tag);
int cuda_op_buf_set(struct titan_backend *be, void *dst, const void *host, size_t bytes);
int cuda_op_buf_get(struct titan_backend *be, void *host, const void *src, size_t bytes);
int cuda_op_buf_copy(struct titan_backend *be, void *dst, const void *src, size_t bytes);
int cuda_op_buf_copy_rows(struct titan_backend *be, float *dst, int64_t dst_off,
			  int64_t dst_stride, const float *src, int64_t src_off, int64_t src_stride,
			  int64_t rows, int64_t width);
int cuda_op_buf_memset(struct titan_backend *be, void *dst, int value, size_t bytes);
/* Their entries of an op table (the backend's and the profiling one's). */
#define CUDA_BUF_OPS                                                             \
	.buf_alloc = cuda_op_buf_alloc, .buf_free = cuda_buf_free,               \
	.buf_set = cuda_op_buf_set, .buf_get = cuda_op_buf_get,                  \
	.buf_copy = cuda_op_buf_copy, .buf_copy_rows = cuda_op_buf_copy_rows,    \
	.buf_memset = cuda_op_buf_memset
/* vocab.cu: the vocabulary-parallel pieces */
int cuda_embedding_part_fwd(struct titan_backend *be, float *out, const uint32_t *ids,
			    const float *w, int64_t n, int64_t v0, int64_t V, int64_t C);
int cuda_embedding_part_bwd(struct titan_backend *be, float *dw, const uint32_t *ids,
			    const float *dx, int64_t n, int64_t v0, int64_t V, int64_t C);
int cuda_ce_part_max(struct titan_backend *be, float *mx, const float *z, int64_t rows,
		     int64_t V);
int cuda_ce_part_exp(struct titan_backend *be, double *st, float *z, const float *mx,
		     const int32_t *labels, int64_t v0, int64_t rows, int64_t V);
int cuda_ce_part_grad(struct titan_backend *be, double *st, float *z, const float *mx,
		      const int32_t *labels, int64_t v0, int64_t rows, int64_t V, float gs,
		      bool grads);
/* Their entries of an op table (the backend's and, untimed, the profiling
 * one's). */
#define CUDA_VOCAB_OPS                                                             \
	.embedding_part_fwd = cuda_embedding_part_fwd,                             \
	.embedding_part_bwd = cuda_embedding_part_bwd, .ce_part_max = cuda_ce_part_max, \
	.ce_part_exp = cuda_ce_part_exp, .ce_part_grad = cuda_ce_part_grad
/* attention.cu */
int cuda_attention_fwd(struct titan_backend *be, float *out, float *lse, const float *q,
		       const float *k, const float *v, const struct titan_attn_dims *d);
int cuda_attention_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
		       const float *dout, const float *q, const float *k, const float *v,
		       const float *out, const float *lse, const struct titan_attn_dims *d);
int cuda_attention_part_fwd(struct titan_backend *be, float *out, float *lse, const float *q,
			    const float *k, const float *v, const struct titan_attn_part *p,
			    bool merge);
int cuda_attention_part_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
			    const float *dout, const float *q, const float *k, const float *v,
			    const float *out, const float *lse, const struct titan_attn_part *p,
			    bool accumulate);
/* cudnn_attn.cu: attention_fwd/bwd through cuDNN's flash attention.  They
 * return 1 when cuDNN does not run this call (not bf16 mode, TITAN_CUDA_ATTN
 * =titan, no cuDNN, a shape it refuses: the caller runs titan's kernel), 0
 * when done, < 0 on an error. */
bool cudnn_attn_qualifies(enum titan_cuda_matmul matmul, const struct titan_attn_dims *d);
int cudnn_attn_fwd(struct titan_backend *be, float *out, float *lse, const float *q,
		   const float *k, const float *v, const struct titan_attn_dims *d);
int cudnn_attn_bwd(struct titan_backend *be, float *dq, float *dk, float *dv, const float *dout,
		   const float *q, const float *k, const float *v, const float *out,
		   const float *lse, const struct titan_attn_dims *d);
/* Frees the handle, plans and buffers (the stream is idle). */
void cudnn_attn_release(struct titan_backend *be);
/* loss.cu */
int cuda_classifier_ce(struct titan_backend *be, double *loss_sum, int64_t *n_valid,
		       float *dh, float *dw, const float *h, const float *w,
		       const int32_t *labels, int64_t n, int64_t c, int64_t v,
		       float grad_scale, int64_t chunk);

#endif
