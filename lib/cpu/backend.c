/*
 * backend.c — the CPU backend table (titan/ops.h): fp32 ops with OpenBLAS
 * sgemm and OpenMP, the oracle the CUDA backend is checked against.
 */
#include "cpu_impl.h"

#include <omp.h>
#include <string.h>

#include "config.h"
#if TITAN_HAVE_BLAS
#include <cblas.h>
#endif

int titan_cpu_nthreads(int64_t nthreads, int64_t work)
{
	int64_t nt = nthreads > 0 ? nthreads : 1;

	if (work < nt)
		nt = work;
	return nt < 1 ? 1 : (int)nt;
}

int titan_cpu_threads(const struct titan_backend *be, int64_t work)
{
	return titan_cpu_nthreads(be->nthreads, work);
}

void *titan_cpu_workspace(struct titan_backend *be, size_t bytes)
{
	struct titan_allocator *a = be->alloc ? be->alloc : titan_host_allocator();

	return titan_mem_alloc(a, bytes, TITAN_MEM_WORKSPACE);
}

void titan_cpu_workspace_free(struct titan_backend *be, void *p)
{
	struct titan_allocator *a = be->alloc ? be->alloc : titan_host_allocator();

	titan_mem_free(a, p);
}

static void cpu_release(struct titan_backend *be)
{
	(void)be;
}

/* ---- buffers: host memory, so plain memcpy/memset ---------------------- */

static void *cpu_buf_alloc(struct titan_backend *be, size_t bytes, enum titan_mem_tag tag)
{
	return titan_mem_alloc(be->alloc ? be->alloc : titan_host_allocator(), bytes, tag);
}

static void cpu_buf_free(struct titan_backend *be, void *buf)
{
	titan_mem_free(be->alloc ? be->alloc : titan_host_allocator(), buf);
}

static int cpu_buf_copy(struct titan_backend *be, void *dst, const void *src, size_t bytes)
{
	(void)be;
	if (bytes)
		memcpy(dst, src, bytes);
	return 0;
}

static int cpu_buf_copy_rows(struct titan_backend *be, float *dst, int64_t dst_off,
			     int64_t dst_stride, const float *src, int64_t src_off,
			     int64_t src_stride, int64_t rows, int64_t width)
{
	int rc = titan_buf_copy_rows_check(dst_off, dst_stride, src_off, src_stride, rows, width);

	(void)be;
	if (rc < 0 || !rows || !width)
		return rc;
	dst += dst_off;
	src += src_off;
	if (dst_stride == width && src_stride == width) {
		memcpy(dst, src, (size_t)(rows * width) * sizeof(float));
		return 0;
	}
	for (int64_t r = 0; r < rows; r++)
		memcpy(dst + r * dst_stride, src + r * src_stride, (size_t)width * sizeof(float));
	return 0;
}

static int cpu_buf_memset(struct titan_backend *be, void *dst, int value, size_t bytes)
{
	(void)be;
	if (bytes)
		memset(dst, value, bytes);
	return 0;
}

static const struct titan_backend_ops cpu_ops = {
	.name = "cpu",
	.release = cpu_release,
	.matmul_fwd = titan_cpu_matmul_fwd,
	.matmul_bwd = titan_cpu_matmul_bwd,
	.embedding_fwd = titan_cpu_embedding_fwd,
	.embedding_bwd = titan_cpu_embedding_bwd,
	.rmsnorm_fwd = titan_cpu_rmsnorm_fwd,
	.rmsnorm_bwd = titan_cpu_rmsnorm_bwd,
	.rope_fwd = titan_cpu_rope_fwd,
	.rope_bwd = titan_cpu_rope_bwd,
	.swiglu_fwd = titan_cpu_swiglu_fwd,
	.swiglu_bwd = titan_cpu_swiglu_bwd,
	.attention_fwd = titan_cpu_attention_fwd,
	.attention_bwd = titan_cpu_attention_bwd,
	.attention_part_fwd = titan_cpu_attention_part_fwd,
	.attention_part_bwd = titan_cpu_attention_part_bwd,
	.classifier_ce = titan_cpu_classifier_ce,
	.adamw_step = titan_cpu_adamw_step,
	.sumsq = titan_cpu_sumsq,
	.scale = titan_cpu_scale,
	.add = titan_cpu_add,
	.copy = titan_cpu_copy,
	.zero = titan_cpu_zero,
	.sumsq_multi = titan_sumsq_multi_loop,
	.adamw_multi = titan_adamw_multi_loop,
	.buf_alloc = cpu_buf_alloc,
	.buf_free = cpu_buf_free,
	.buf_set = cpu_buf_copy,
	.buf_get = cpu_buf_copy,
	.buf_copy = cpu_buf_copy,
	.buf_copy_rows = cpu_buf_copy_rows,
	.buf_memset = cpu_buf_memset,
	.embedding_part_fwd = titan_cpu_embedding_part_fwd,
	.embedding_part_bwd = titan_cpu_embedding_part_bwd,
	.ce_part_max = titan_cpu_ce_part_max,
	.ce_part_exp = titan_cpu_ce_part_exp,
	.ce_part_grad = titan_cpu_ce_part_grad,
};

int titan_backend_cpu_init(struct titan_backend *be, int nthreads)
{
	if (nthreads <= 0)
		nthreads = omp_get_max_threads();
	*be = (struct titan_backend){
		.ops = &cpu_ops,
		.alloc = titan_host_allocator(),
		.nthreads = nthreads,
		.attn_block_q = TITAN_ATTN_BLOCK,
		.attn_block_k = TITAN_ATTN_BLOCK,
	};
#if TITAN_HAVE_BLAS
	/* matmul.c threads over fixed tiles of C: OpenBLAS itself runs on
	 * one thread (its own split would depend on the thread count). */
	openblas_set_num_threads(1);
#endif
	return titan_cpu_isa_init(); /* the kernels' path (isa.c) */
}

int titan_buf_copy_rows_check(int64_t dst_off, int64_t dst_stride, int64_t src_off,
			      int64_t src_stride, int64_t rows, int64_t width)
{
	if (rows < 0 || width < 0 || dst_off < 0 || src_off < 0 || dst_stride < width ||
	    src_stride < width)
		return titan_error(TITAN_E_INVALID, "buf_copy_rows: %lld rows of %lld floats, "
				   "strides %lld and %lld, offsets %lld and %lld", (long long)rows,
				   (long long)width, (long long)dst_stride, (long long)src_stride,
				   (long long)dst_off, (long long)src_off);
	return 0;
}

void titan_backend_release(struct titan_backend *be)
{
	if (be && be->ops && be->ops->release)
		be->ops->release(be);
}
