/*
 * backend.c — the CPU backend table (titan/ops.h): fp32 ops with OpenBLAS
 * sgemm and OpenMP, the oracle the CUDA backend is checked against.
 */
#include "cpu_impl.h"

#include <omp.h>

#include "config.h"
#if TITAN_HAVE_BLAS
#include <cblas.h>
#endif

int titan_cpu_threads(const struct titan_backend *be, int64_t work)
{
	int64_t nt = be->nthreads > 0 ? be->nthreads : 1;

	if (work < nt)
		nt = work;
	return nt < 1 ? 1 : (int)nt;
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
	return 0;
}

void titan_backend_release(struct titan_backend *be)
{
	if (be && be->ops && be->ops->release)
		be->ops->release(be);
}
