/*
 * measure.c — the measure pass (titan/estimate.h), as ggml's: a memory
 * backend whose blocks are address space only, and a compute backend
 * whose ops do nothing but take and give back the workspace the CPU ops
 * take.  The real engine (lib/train: titan_parallelize, one step) runs on
 * them through a titan_allocator, which counts every block exactly as in
 * titan-train — bytes as requested, tags, current and peak per tag, the
 * breakdown at the total peak — while nothing is computed and no memory
 * is committed.  With `guard` the blocks are PROT_NONE: host code that
 * touches a buffer during the dry run faults instead of silently working.
 */
#include "est_impl.h"
#include "titan/ops.h"

#include <sys/mman.h>

/* ---------------------------------------------------------- address space */

static void *reserve(bool guard, size_t bytes)
{
	void *p = mmap(NULL, bytes, guard ? PROT_NONE : PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void *guarded_alloc(void *ctx, size_t bytes)
{
	(void)ctx;
	return reserve(true, bytes);
}

/* Under strict overcommit accounting (vm.overcommit_memory 2) a writable
 * mapping counts in full, MAP_NORESERVE or not: a block too large for
 * that is address space only, as with the guard (host code that touches
 * buffers touches small ones). */
static void *open_alloc(void *ctx, size_t bytes)
{
	void *p = reserve(false, bytes);

	(void)ctx;
	return p ? p : reserve(true, bytes);
}

static void unreserve(void *ctx, void *ptr, size_t bytes)
{
	(void)ctx;
	munmap(ptr, bytes);
}

/* titan_mem_calloc's zeroing: nothing to zero in address space. */
static int no_zero(void *ctx, void *ptr, size_t bytes)
{
	(void)ctx, (void)ptr, (void)bytes;
	return 0;
}

void titan_measure_mem_backend(struct titan_mem_backend *out, bool guard)
{
	*out = (struct titan_mem_backend){
		.name = guard ? "measure" : "measure-open",
		.alloc = guard ? guarded_alloc : open_alloc,
		.free = unreserve,
		.zero = no_zero,
	};
}

/* Blocks with no memory at all: a distinct address per block, never
 * mapped (the engine built and not run touches none: the guard shows
 * it), so a plan of any size up to 64 bits counts. */
static void *unmapped_alloc(void *ctx, size_t bytes)
{
	uintptr_t *next = ctx;

	(void)bytes;
	*next += 64;
	return (void *)*next;
}

static void unmapped_free(void *ctx, void *ptr, size_t bytes)
{
	(void)ctx, (void)ptr, (void)bytes;
}

void titan_measure_unmapped_backend(struct titan_mem_backend *out, uintptr_t *next)
{
	*next = (uintptr_t)1 << 16; /* below: vm.mmap_min_addr, never mapped */
	*out = (struct titan_mem_backend){
		.name = "measure-unmapped",
		.alloc = unmapped_alloc,
		.free = unmapped_free,
		.zero = no_zero,
		.ctx = next,
	};
}

/* ---------------------------------------------------------- the ops */

/* The CPU ops' workspace (lib/cpu): a block taken and given back. */
static int workspace(struct titan_backend *be, int64_t bytes)
{
	void *p = titan_mem_alloc(be->alloc, (size_t)bytes, TITAN_MEM_WORKSPACE);

	if (!p)
		return TITAN_E_NOMEM;
	titan_mem_free(be->alloc, p);
	return 0;
}

/* A stated byte count (est_impl.h) in the estimate's checked
 * arithmetic: -1 (no 64-bit size) is an overflow. */
int64_t est_stated(struct est_num *n, int64_t bytes)
{
	return est_mul(n, bytes < 0 ? INT64_MAX : bytes, 1);
}

static int64_t block_q(const struct titan_backend *be)
{
	return be->attn_block_q > 0 ? be->attn_block_q : TITAN_ATTN_BLOCK;
}

static int64_t block_k(const struct titan_backend *be)
{
	return be->attn_block_k > 0 ? be->attn_block_k : TITAN_ATTN_BLOCK;
}

static int attn_fwd_ws(struct titan_backend *be, int64_t batch, int64_t tq, int64_t h,
		       int64_t d)
{
	const int64_t b = titan_cpu_attn_fwd_ws(be->nthreads, block_q(be), block_k(be), batch,
						tq, h, d);

	return b < 0 ? TITAN_E_NOMEM : b ? workspace(be, b) : 0;
}

static int attn_bwd_ws(struct titan_backend *be, int64_t batch, int64_t tq, int64_t tk,
		       int64_t hkv, int64_t d)
{
	const int64_t b = titan_cpu_attn_bwd_ws(be->nthreads, block_q(be), block_k(be), batch,
						tq, tk, hkv, d);

	return b < 0 ? TITAN_E_NOMEM : b ? workspace(be, b) : 0;
}

static void m_release(struct titan_backend *be)
{
	(void)be;
}

static int m_matmul_fwd(struct titan_backend *be, float *y, const float *x, const float *w,
			int64_t n, int64_t in, int64_t out, bool accumulate)
{
	(void)be, (void)y, (void)x, (void)w, (void)n, (void)in, (void)out, (void)accumulate;
	return 0;
}

static int m_matmul_bwd(struct titan_backend *be, float *dx, float *dw, const float *dy,
			const float *x, const float *w, int64_t n, int64_t in, int64_t out,
			bool accumulate_dx)
{
	(void)be, (void)dx, (void)dw, (void)dy, (void)x, (void)w, (void)n, (void)in, (void)out;
	(void)accumulate_dx;
	return 0;
}

static int m_embedding(struct titan_backend *be, float *a, const uint32_t *ids, const float *b,
		       int64_t n, int64_t v, int64_t c)
{
	(void)be, (void)a, (void)ids, (void)b, (void)n, (void)v, (void)c;
	return 0;
}

static int m_rmsnorm_fwd(struct titan_backend *be, float *y, float *rstd, const float *x,
			 const float *w, int64_t n, int64_t c, float eps)
{
	(void)be, (void)y, (void)rstd, (void)x, (void)w, (void)n, (void)c, (void)eps;
	return 0;
}

static int m_rmsnorm_bwd(struct titan_backend *be, float *dx, float *dw, const float *dy,
			 const float *x, const float *w, const float *rstd, int64_t n, int64_t c,
			 bool accumulate_dx)
{
	(void)be, (void)dx, (void)dw, (void)dy, (void)x, (void)w, (void)rstd, (void)n, (void)c;
	(void)accumulate_dx;
	return 0;
}

static int m_rope(struct titan_backend *be, float *x, const float *freqs, int64_t batch,
		  int64_t seq, int64_t nh, int64_t head_dim)
{
	(void)be, (void)x, (void)freqs, (void)batch, (void)seq, (void)nh, (void)head_dim;
	return 0;
}

static int m_swiglu_fwd(struct titan_backend *be, float *h, const float *a, const float *b,
			int64_t n)
{
	(void)be, (void)h, (void)a, (void)b, (void)n;
	return 0;
}

static int m_swiglu_bwd(struct titan_backend *be, float *da, float *db, const float *dh,
			const float *a, const float *b, int64_t n)
{
	(void)be, (void)da, (void)db, (void)dh, (void)a, (void)b, (void)n;
	return 0;
}

static int m_attention_fwd(struct titan_backend *be, float *out, float *lse, const float *q,
			   const float *k, const float *v, const struct titan_attn_dims *d)
{
	(void)out, (void)lse, (void)q, (void)k, (void)v;
	return attn_fwd_ws(be, d->batch, d->seq, d->n_heads, d->head_dim);
}

static int m_attention_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
			   const float *dout, const float *q, const float *k, const float *v,
			   const float *out, const float *lse, const struct titan_attn_dims *d)
{
	(void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)out, (void)lse;
	return attn_bwd_ws(be, d->batch, d->seq, d->seq, d->n_kv_heads, d->head_dim);
}

static int m_attention_part_fwd(struct titan_backend *be, float *out, float *lse,
				const float *q, const float *k, const float *v,
				const struct titan_attn_part *p, bool merge)
{
	(void)out, (void)lse, (void)q, (void)k, (void)v, (void)merge;
	return attn_fwd_ws(be, p->batch, p->tq, p->n_heads, p->head_dim);
}

static int m_attention_part_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
				const float *dout, const float *q, const float *k,
				const float *v, const float *out, const float *lse,
				const struct titan_attn_part *p, bool accumulate)
{
	(void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)out, (void)lse;
	(void)accumulate;
	return attn_bwd_ws(be, p->batch, p->tq, p->tk, p->n_kv_heads, p->head_dim);
}

/* chunk·V logits and chunk row losses, both live at once; no token is
 * valid (the labels are not read: they may be the dry run's too) */
static int m_classifier_ce(struct titan_backend *be, double *loss_sum, int64_t *n_valid,
			   float *dh, float *dw, const float *h, const float *w,
			   const int32_t *labels, int64_t n, int64_t c, int64_t v,
			   float grad_scale, int64_t chunk)
{
	void *z, *rl;
	int64_t zb, rb;

	(void)dh, (void)dw, (void)h, (void)w, (void)labels, (void)c, (void)grad_scale;
	*loss_sum = 0.0;
	*n_valid = 0;
	if (n <= 0)
		return 0;
	titan_cpu_classifier_ce_ws(n, v, chunk, &zb, &rb);
	if (zb < 0 || rb < 0)
		return TITAN_E_NOMEM;
	z = titan_mem_alloc(be->alloc, (size_t)zb, TITAN_MEM_WORKSPACE);
	rl = z ? titan_mem_alloc(be->alloc, (size_t)rb, TITAN_MEM_WORKSPACE) : NULL;
	titan_mem_free(be->alloc, z);
	titan_mem_free(be->alloc, rl);
	return rl ? 0 : TITAN_E_NOMEM;
}

/* Tensor parallelism's vocabulary pieces (lib/cpu/vocab.c): no workspace. */
static int m_embedding_part(struct titan_backend *be, float *a, const uint32_t *ids,
			    const float *b, int64_t n, int64_t v0, int64_t V, int64_t C)
{
	(void)be, (void)a, (void)ids, (void)b, (void)n, (void)v0, (void)V, (void)C;
	return 0;
}

static int m_ce_part_max(struct titan_backend *be, float *mx, const float *z, int64_t rows,
			 int64_t V)
{
	(void)be, (void)mx, (void)z, (void)rows, (void)V;
	return 0;
}

static int m_ce_part_exp(struct titan_backend *be, double *st, float *z, const float *mx,
			 const int32_t *labels, int64_t v0, int64_t rows, int64_t V)
{
	(void)be, (void)st, (void)z, (void)mx, (void)labels, (void)v0, (void)rows, (void)V;
	return 0;
}

static int m_ce_part_grad(struct titan_backend *be, double *st, float *z, const float *mx,
			  const int32_t *labels, int64_t v0, int64_t rows, int64_t V, float gs,
			  bool grads)
{
	(void)be, (void)st, (void)z, (void)mx, (void)labels, (void)v0, (void)rows, (void)V;
	(void)gs, (void)grads;
	return 0;
}

static int m_adamw(struct titan_backend *be, float *p, float *m, float *v, const float *g,
		   int64_t n, const struct titan_adamw_hparams *hp, int64_t step, float grad_mul)
{
	(void)be, (void)p, (void)m, (void)v, (void)g, (void)n, (void)hp, (void)step, (void)grad_mul;
	return 0;
}

/* one partial sum per TITAN_SUMSQ_CHUNK elements; the sum is 0 */
static int m_sumsq(struct titan_backend *be, double *out, const float *x, int64_t n)
{
	(void)x;
	*out = 0.0;
	if (n <= 0)
		return 0;
	return workspace(be, titan_cpu_sumsq_ws(n));
}

static int m_scale(struct titan_backend *be, float *x, int64_t n, float alpha)
{
	(void)be, (void)x, (void)n, (void)alpha;
	return 0;
}

static int m_add(struct titan_backend *be, float *y, const float *a, const float *b, int64_t n)
{
	(void)be, (void)y, (void)a, (void)b, (void)n;
	return 0;
}

static int m_copy(struct titan_backend *be, float *dst, const float *src, int64_t n)
{
	(void)be, (void)dst, (void)src, (void)n;
	return 0;
}

static int m_zero(struct titan_backend *be, float *x, int64_t n)
{
	(void)be, (void)x, (void)n;
	return 0;
}

static void *m_buf_alloc(struct titan_backend *be, size_t bytes, enum titan_mem_tag tag)
{
	return titan_mem_alloc(be->alloc, bytes, tag);
}

static void m_buf_free(struct titan_backend *be, void *buf)
{
	titan_mem_free(be->alloc, buf);
}

static int m_buf_move(struct titan_backend *be, void *dst, const void *src, size_t bytes)
{
	(void)be, (void)dst, (void)src, (void)bytes;
	return 0;
}

static int m_buf_copy_rows(struct titan_backend *be, float *dst, int64_t dst_off,
			   int64_t dst_stride, const float *src, int64_t src_off,
			   int64_t src_stride, int64_t rows, int64_t width)
{
	(void)be, (void)dst, (void)src;
	return titan_buf_copy_rows_check(dst_off, dst_stride, src_off, src_stride, rows, width);
}

static int m_buf_memset(struct titan_backend *be, void *dst, int value, size_t bytes)
{
	(void)be, (void)dst, (void)value, (void)bytes;
	return 0;
}

static const struct titan_backend_ops measure_ops = {
	.name = "measure",
	.release = m_release,
	.matmul_fwd = m_matmul_fwd,
	.matmul_bwd = m_matmul_bwd,
	.embedding_fwd = m_embedding,
	.embedding_bwd = m_embedding,
	.rmsnorm_fwd = m_rmsnorm_fwd,
	.rmsnorm_bwd = m_rmsnorm_bwd,
	.rope_fwd = m_rope,
	.rope_bwd = m_rope,
	.swiglu_fwd = m_swiglu_fwd,
	.swiglu_bwd = m_swiglu_bwd,
	.attention_fwd = m_attention_fwd,
	.attention_bwd = m_attention_bwd,
	.attention_part_fwd = m_attention_part_fwd,
	.attention_part_bwd = m_attention_part_bwd,
	.classifier_ce = m_classifier_ce,
	.embedding_part_fwd = m_embedding_part,
	.embedding_part_bwd = m_embedding_part,
	.ce_part_max = m_ce_part_max,
	.ce_part_exp = m_ce_part_exp,
	.ce_part_grad = m_ce_part_grad,
	.adamw_step = m_adamw,
	.sumsq = m_sumsq,
	.scale = m_scale,
	.add = m_add,
	.copy = m_copy,
	.zero = m_zero,
	/* loops over m_sumsq and m_adamw: the CPU's workspace per tensor */
	.sumsq_multi = titan_sumsq_multi_loop,
	.adamw_multi = titan_adamw_multi_loop,
	.buf_alloc = m_buf_alloc,
	.buf_free = m_buf_free,
	.buf_set = m_buf_move,
	.buf_get = m_buf_move,
	.buf_copy = m_buf_move,
	.buf_copy_rows = m_buf_copy_rows,
	.buf_memset = m_buf_memset,
};

void titan_backend_measure_init(struct titan_backend *be, struct titan_allocator *alloc,
				int nthreads)
{
	*be = (struct titan_backend){
		.ops = &measure_ops,
		.alloc = alloc,
		.nthreads = nthreads > 0 ? nthreads : 1,
		.attn_block_q = TITAN_ATTN_BLOCK,
		.attn_block_k = TITAN_ATTN_BLOCK,
	};
}
