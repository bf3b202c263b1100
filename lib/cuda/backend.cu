/*
 * backend.cu — the CUDA backend table (titan/ops.h): set-up of the stream
 * and cuBLAS handles, the scratch buffers ops share, and the table itself.
 * The ops live in gemm.cu, elementwise.cu, attention.cu and loss.cu.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_impl.h"

bool cuda_sync_debug(void)
{
	static int on = -1;

	if (on < 0) {
		const char *e = getenv("TITAN_CUDA_SYNC");

		on = e && *e && strcmp(e, "0") != 0;
	}
	return on;
}

void cuda_buf_free(struct titan_backend *be, void *p)
{
	if (!p)
		return;
	if (be->alloc)
		titan_mem_free(be->alloc, p);
	else
		cudaFree(p);
}

void *cuda_buf_alloc(struct titan_backend *be, size_t bytes, const char *what)
{
	void *p = NULL;

	if (be->alloc) {
		if (!(p = titan_mem_alloc(be->alloc, bytes, TITAN_MEM_WORKSPACE)))
			titan_error_prefix("CUDA: %s", what);
		return p;
	}
	if (cudaMalloc(&p, bytes) != cudaSuccess) {
		(void)cudaGetLastError();
		titan_error(TITAN_E_NOMEM, "CUDA: out of device memory for %zu bytes of %s", bytes,
			    what);
		return NULL;
	}
	return p;
}

void *cuda_grow_buf(struct titan_backend *be, void **buf, size_t *have, size_t bytes, size_t min,
		    unsigned extra_div, const char *what)
{
	if (bytes <= *have)
		return *buf;
	if (*buf) {
		/* the old buffer may still be read by queued work */
		cudaStreamSynchronize(cuda_of(be)->stream);
		cuda_buf_free(be, *buf);
		*buf = NULL;
		*have = 0;
	}
	bytes = bytes < min ? min : bytes + bytes / extra_div;
	if (!(*buf = cuda_buf_alloc(be, bytes, what)))
		return NULL;
	*have = bytes;
	return *buf;
}

void *cuda_scratch(struct titan_backend *be, size_t bytes)
{
	struct cuda_impl *c = cuda_of(be);

	return cuda_grow_buf(be, &c->scratch, &c->scratch_bytes, bytes, CUDA_SCRATCH_MIN, CUDA_SCRATCH_GROW_DIV,
			     "op scratch");
}

void *cuda_host_scratch(struct titan_backend *be, size_t bytes)
{
	struct cuda_impl *c = cuda_of(be);

	if (bytes <= c->host_scratch_bytes)
		return c->host_scratch;
	if (c->host_scratch) {
		cudaStreamSynchronize(c->stream);
		cudaFreeHost(c->host_scratch);
		c->host_scratch = NULL;
		c->host_scratch_bytes = 0;
	}
	bytes = bytes < 4096 ? 4096 : bytes;
	if (cudaMallocHost(&c->host_scratch, bytes) != cudaSuccess) {
		(void)cudaGetLastError();
		c->host_scratch = NULL;
		titan_error(TITAN_E_NOMEM, "CUDA: out of pinned host memory (%zu bytes)", bytes);
		return NULL;
	}
	c->host_scratch_bytes = bytes;
	return c->host_scratch;
}

/* ---- buffers (titan/ops.h): cudaMemcpy*Async on the compute stream ---- */

void *cuda_op_buf_alloc(struct titan_backend *be, size_t bytes, enum titan_mem_tag tag)
{
	void *p = NULL;

	if (be->alloc)
		return titan_mem_alloc(be->alloc, bytes, tag);
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
		(void)cudaGetLastError();
		titan_error(TITAN_E_NOMEM, "CUDA: out of device memory for a buffer of %zu bytes",
			    bytes);
		return NULL;
	}
	return p;
}

/* set and get: the copy is queued behind the stream's work (the host side
 * may be pageable or pinned; UVA tells the direction), then waited for so
 * that the host memory may be reused or read at once */
int cuda_op_buf_set(struct titan_backend *be, void *dst, const void *host, size_t bytes)
{
	struct cuda_impl *c = cuda_of(be);

	if (!bytes)
		return 0;
	CU_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyDefault, c->stream));
	CU_CHECK(cudaStreamSynchronize(c->stream));
	return 0;
}

int cuda_op_buf_get(struct titan_backend *be, void *host, const void *src, size_t bytes)
{
	return cuda_op_buf_set(be, host, src, bytes);
}

int cuda_op_buf_copy(struct titan_backend *be, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_of(be)->stream));
	return 0;
}

int cuda_op_buf_copy_rows(struct titan_backend *be, float *dst, int64_t dst_off,
			  int64_t dst_stride, const float *src, int64_t src_off, int64_t src_stride,
			  int64_t rows, int64_t width)
{
	int rc = titan_buf_copy_rows_check(dst_off, dst_stride, src_off, src_stride, rows, width);

	if (rc < 0 || !rows || !width)
		return rc;
	CU_CHECK(cudaMemcpy2DAsync(dst + dst_off, (size_t)dst_stride * sizeof(float),
				   src + src_off, (size_t)src_stride * sizeof(float),
				   (size_t)width * sizeof(float), (size_t)rows, cudaMemcpyDefault,
				   cuda_of(be)->stream));
	return 0;
}

int cuda_op_buf_memset(struct titan_backend *be, void *dst, int value, size_t bytes)
{
	if (bytes)
		CU_CHECK(cudaMemsetAsync(dst, value, bytes, cuda_of(be)->stream));
	return 0;
}

static void cuda_release(struct titan_backend *be)
{
	struct cuda_impl *c;

	if (!be || !(c = cuda_of(be)))
		return;
	if (c->stream)
		cudaStreamSynchronize(c->stream);
	cudnn_attn_release(be);
	if (c->blas)
		cublasDestroy(c->blas);
	if (c->lt)
		cublasLtDestroy(c->lt);
	cuda_mt_release(be);
	cuda_buf_free(be, c->blas_ws);
	cuda_buf_free(be, c->gemm_ws);
	cuda_buf_free(be, c->bf16_keep);
	cuda_buf_free(be, c->scratch);
	if (c->host_scratch)
		cudaFreeHost(c->host_scratch);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	free(c);
	be->impl = NULL;
}

static const struct titan_backend_ops cuda_ops = {
	.name = "cuda",
	.release = cuda_release,
	.matmul_fwd = cuda_matmul_fwd,
	.matmul_bwd = cuda_matmul_bwd,
	.embedding_fwd = cuda_embedding_fwd,
	.embedding_bwd = cuda_embedding_bwd,
	.rmsnorm_fwd = cuda_rmsnorm_fwd,
	.rmsnorm_bwd = cuda_rmsnorm_bwd,
	.rope_fwd = cuda_rope_fwd,
	.rope_bwd = cuda_rope_bwd,
	.swiglu_fwd = cuda_swiglu_fwd,
	.swiglu_bwd = cuda_swiglu_bwd,
	.attention_fwd = cuda_attention_fwd,
	.attention_bwd = cuda_attention_bwd,
	.attention_part_fwd = cuda_attention_part_fwd,
	.attention_part_bwd = cuda_attention_part_bwd,
	.classifier_ce = cuda_classifier_ce,
	.adamw_step = cuda_adamw_step,
	.sumsq = cuda_sumsq,
	.scale = cuda_scale,
	.add = cuda_add,
	.copy = cuda_copy,
	.zero = cuda_zero,
	.sumsq_multi = cuda_sumsq_multi,
	.adamw_multi = cuda_adamw_multi,
	CUDA_BUF_OPS,
	CUDA_VOCAB_OPS,
};

extern "C" int titan_backend_cuda_init(struct titan_backend *be, const struct titan_cuda_opts *o,
				       struct titan_allocator *alloc)
{
	struct cuda_impl *c;
	cudaDeviceProp p;
	int n = 0, rc;

	memset(be, 0, sizeof(*be));
	if ((rc = titan_cuda_device_count(&n)) < 0)
		return rc;
	if (o->device < 0 || o->device >= n)
		return titan_error(TITAN_E_DEVICE, "CUDA device %d requested, %d present", o->device,
				   n);
	CU_CHECK(cudaSetDevice(o->device));
	CU_CHECK(cudaGetDeviceProperties(&p, o->device));
	if (!(c = (struct cuda_impl *)calloc(1, sizeof(*c))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	*be = (struct titan_backend){
		.ops = &cuda_ops,
		.alloc = alloc,
		.nthreads = 1,
		.attn_block_q = TITAN_ATTN_BLOCK,
		.attn_block_k = TITAN_ATTN_BLOCK,
		.impl = c,
	};
	c->device = o->device;
	c->sm_count = p.multiProcessorCount;
	c->matmul = o->matmul;
	c->blas_ws_bytes = CUDA_BLAS_WS_BYTES;
	if ((rc = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
		rc = titan_error(TITAN_E_DEVICE, "CUDA set-up on device %d: %s", o->device,
				 cudaGetErrorString((cudaError_t)rc));
		goto fail;
	}
	if (!(c->blas_ws = cuda_buf_alloc(be, c->blas_ws_bytes, "the cuBLAS workspace"))) {
		rc = TITAN_E_NOMEM;
		goto fail;
	}
	if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS ||
	    cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetWorkspace(c->blas, c->blas_ws, c->blas_ws_bytes) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetMathMode(c->blas, o->matmul == TITAN_CUDA_MATMUL_FP32
					      ? CUBLAS_PEDANTIC_MATH
					      : CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
		rc = titan_error(TITAN_E_DEVICE, "cuBLAS set-up on device %d failed", o->device);
		goto fail;
	}
	cuda_profile_wrap(be);
	return 0;
fail:
	cuda_release(be);
	be->ops = NULL;
	return rc;
}
