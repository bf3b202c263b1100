/*
 * gpu_titan.c — the GPU memory model of titan-train's own CUDA path (one
 * rank, training.device: cuda): what the caching allocator of lib/cuda
 * (lib/core/caching.c, PyTorch's CUDACachingAllocator rules) holds at the
 * step's peak, which is what titan-train's `memory:` prints (max_reserved,
 * the segments cudaMalloc'd: lib/train/metrics.c mem_peaks).
 *
 * It is the CPU model's dry run (dry.c) on the CUDA path's terms: the
 * engine titan-train builds (the same model buffers as the CPU path:
 * fp32 arenas, fp32 saved activations, allocated through the backend) and
 * two steps of it, every block going through titan_caching over address
 * space that is never committed, and a backend whose ops take and give
 * back the buffers lib/cuda's ops take, in the same order and sizes:
 *
 *   cuBLAS workspace   32 MiB at backend set-up (backend.cu)
 *   gemm_ws            bf16 copies of GEMM operands (gemm.cu gemm_ws,
 *                      bf16 GEMMs only): grown to the largest request
 *                      + 25%, the old one freed (kept by the cache)
 *   bf16_keep          bf16 dy of nn.Linear's backward, the classifier's
 *                      bf16 W + one chunk of bf16 dz (gemm.cu, loss.cu)
 *   op scratch         cuda_scratch (backend.cu, at least 1 MiB, + 25%):
 *                      the loss's chunk logits and row losses (loss.cu),
 *                      attention backward's Di and document ids
 *                      (attention.cu), RMSNorm dw partials, sumsq partials,
 *                      embedding backward's token order (elementwise.cu)
 *   cuDNN attention    cudnn_attn.cu dnn_buf (bf16 mode, plain causal
 *                      shapes cuDNN takes): bf16 staging of q, k, v, o
 *                      (forward; backward also dO, dq, dk, dv, the fp32
 *                      dQ_accum and softmax_sum) and the plan's workspace
 *                      in one block, grown to the request + 12.5%, the
 *                      old one freed (kept by the cache): the forward's
 *                      size at the first forward, the backward's at the
 *                      first backward
 *   multi-tensor       elementwise.cu mt_plan_build: one device block of
 *   tables             chunk table, offsets, partial sums and no_decay
 *                      flags per distinct span table (the gradient
 *                      norm's and AdamW's), at their first use
 *
 * The host-side buffers (pinned host scratch, the trainer's token
 * buffers: titan_malloc) are not on the device.  The caching allocator's
 * reserved bytes are monotone (segments are never given back without an
 * out-of-memory retry), so its peak after the second step is every
 * logged step's (the first step grows the buffers; later steps reuse
 * them).  The constants come from lib/cuda/cuda_sizes.h, which the CUDA
 * backend uses too; the formulas that combine them are lib/cuda's, written
 * again here (tests/unit/test_estimate.c and titan-estimate-cuda.bats
 * compare with GPU measurements).
 *
 * cuDNN's own plan workspace is not in lib/cuda's code: cudnn_plan_ws
 * is a fit to measurements (TITAN_CUDA_ATTN's default, the deterministic
 * backward, cuDNN 9.19.0).  The model assumes libcudnn.so.9 loads (else
 * titan-train runs titan's kernels, whose Di is in the op scratch).
 */
#include "est_impl.h"
#include "cuda/cuda_sizes.h"
#include "titan/ops.h"

#include <stdlib.h>
#include <string.h>

#define CUBLAS_WS CUDA_BLAS_WS_BYTES
#define SCRATCH_MIN CUDA_SCRATCH_MIN
#define EW_THREADS CUDA_EW_THREADS
#define SUMSQ_BLOCKS CUDA_SUMSQ_BLOCKS
#define SUMSQ_PER_THREAD CUDA_SUMSQ_PER_THREAD
#define DW_CHUNKS CUDA_DW_CHUNKS
#define DW_ROWS CUDA_DW_ROWS
#define MT_CHUNK CUDA_MT_CHUNK
#define MT_PLANS CUDA_MT_PLANS
#define MT_CHUNK_BYTES 16 /* struct mt_chunk */

/* A grow-only device buffer of lib/cuda. */
struct grow {
	void *p;
	size_t have;
};

enum { G_SCRATCH, G_GEMM, G_KEEP, G_CUDNN, G_N };

/* elementwise.cu struct mt_plan: a span table's device block */
struct mt_plan {
	struct titan_tensor_span *spans; /* the key (NULL: slot free) */
	int n;
	void *block;
	size_t bytes;
	uint64_t used;
};

struct sim {
	struct titan_backend_ops ops;
	struct titan_allocator *a;
	bool bf16;                 /* training.mixed_precision_param bfloat16 */
	bool cudnn;                /* cudnn_attn.cu runs the plain causal shapes */
	void *blas_ws;
	struct grow g[G_N];
	struct mt_plan mt[MT_PLANS];
	uint64_t clock;
	size_t tables;             /* bytes of the tables held */
};

static struct sim *sim_of(struct titan_backend *be)
{
	return be->impl;
}

/* cuda_buf_alloc: the workspace tag */
static void *dev_alloc(struct sim *s, size_t bytes)
{
	return titan_mem_alloc(s->a, bytes, TITAN_MEM_WORKSPACE);
}

/* backend.cu cuda_grow_buf (cuda_scratch, gemm.cu's operands, cudnn_attn.cu
 * dnn_buf): the old buffer freed, the new one max(min, bytes + bytes / DIV)
 * with cuda_sizes.h's minimum and headroom */
static int grow(struct sim *s, int k, size_t bytes)
{
	struct grow *g = &s->g[k];

	if (bytes <= g->have)
		return 0;
	titan_mem_free(s->a, g->p); /* NULL-safe */
	g->p = NULL;
	g->have = 0;
	if (k == G_SCRATCH)
		bytes = bytes < SCRATCH_MIN ? SCRATCH_MIN : bytes + bytes / CUDA_SCRATCH_GROW_DIV;
	else if (k == G_CUDNN)
		bytes += bytes / CUDA_CUDNN_GROW_DIV;
	else
		bytes += bytes / CUDA_GEMM_GROW_DIV;
	if (!(g->p = dev_alloc(s, bytes)))
		return TITAN_E_NOMEM;
	g->have = bytes;
	return 0;
}

static size_t bf16_bytes(int64_t r, int64_t c)
{
	return (size_t)(r * c) * 2;
}

static size_t align256(size_t b)
{
	return (b + 255) & ~(size_t)255;
}

/* gemm.cu cuda_gemm_bf16: the operands given in fp32 rounded into gemm_ws
 * (A at a 256-byte boundary, then B) */
static int gemm_bf16(struct sim *s, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
		     bool a16, bool b16)
{
	const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
	const size_t ab = a16 ? 0 : align256(bf16_bytes(ar, ac));
	const size_t bb = b16 ? 0 : bf16_bytes(br, bc);

	if (m == 0 || n == 0 || ab + bb == 0)
		return 0;
	return grow(s, G_GEMM, ab + bb);
}

/* gemm.cu cuda_gemm: bf16 mode only takes buffers (k 0 returns first) */
static int gemm(struct sim *s, bool ta, bool tb, int64_t m, int64_t n, int64_t k)
{
	if (m == 0 || n == 0 || k == 0 || !s->bf16)
		return 0;
	return gemm_bf16(s, ta, tb, m, n, k, false, false);
}

static int scratch(struct sim *s, size_t bytes)
{
	return grow(s, G_SCRATCH, bytes);
}

/* cudnn_attn.cu cudnn_attn_qualifies, in bf16 mode */
static bool cudnn_runs(const struct sim *s, const struct titan_attn_dims *d)
{
	return s->cudnn && !d->doc && d->head_dim % 8 == 0 && d->head_dim >= 8 &&
	       d->head_dim <= 128 && d->n_kv_heads > 0 && d->n_heads % d->n_kv_heads == 0 &&
	       d->batch > 0 && d->seq > 0;
}

static size_t round_up(size_t n, size_t m)
{
	return (n + m - 1) / m * m;
}

/*
 * The workspace of cuDNN's own plan (CUDNN_ATTR_ENGINEHEUR / the plan's
 * WORKSPACE_SIZE): not computable from lib/cuda, fitted to what
 * TITAN_CUDNN_DEBUG=1 logged ("plan with N bytes of workspace"), cuDNN
 * 9.19.0 on an H200, 2026-11-28:
 *
 *   forward: 256 bytes for every shape measured;
 *   backward (deterministic, titan's default):
 *     B·H·up(T, 64)·up(T, 128)·2   (the bf16 dP / dS tile workspace)
 *   + B·H·T·D·4 when H > Hkv       (fp32 full-head dK / dV of GQA before
 *                                   the group's reduction)
 *   + 256
 *
 * It fits all nine shapes measured exactly: Llama 3.2 1B (B=4 T=2048 H=32
 * Hkv=8 D=64: 1,140,850,944), the debug model (B=4 T=512 H=Hkv=16 D=16:
 * 33,554,688) and test_attention_cudnn's cases B T H Hkv D -> bytes:
 * 2 64 4 4 64 -> 131,328; 2 37 4 2 64 -> 207,104; 1 130 8 2 128 ->
 * 1,319,168; 2 256 8 2 64 -> 3,145,984; 1 200 6 3 128 -> 1,401,088;
 * 1 333 4 1 64 -> 1,520,896; 2 96 4 2 32 -> 360,704.  Another cuDNN may
 * pick other engines: re-measure when it changes.
 */
static size_t cudnn_plan_ws(const struct titan_attn_dims *d, bool bwd)
{
	const size_t B = (size_t)d->batch, T = (size_t)d->seq, H = (size_t)d->n_heads;

	if (!bwd)
		return 256;
	return B * H * round_up(T, 64) * round_up(T, 128) * 2 +
	       (d->n_kv_heads < d->n_heads ? B * H * T * (size_t)d->head_dim * 4 : 0) + 256;
}

/* cudnn_attn.cu cudnn_attn_fwd / _bwd: the staging arrays at 256-byte
 * boundaries, then the plan's workspace, in dnn_buf */
static int cudnn_attn(struct sim *s, const struct titan_attn_dims *d, bool bwd)
{
	const int64_t nq = d->batch * d->seq * d->n_heads * d->head_dim;
	const int64_t nk = d->batch * d->seq * d->n_kv_heads * d->head_dim;
	const int64_t nl = d->batch * d->n_heads * d->seq;
	const size_t q16 = align256((size_t)nq * 2), k16 = align256((size_t)nk * 2);
	size_t bytes;

	if (!bwd) /* q k v o */
		bytes = 2 * q16 + 2 * k16;
	else /* q k v o dO dq dk dv, dQ_accum, softmax_sum */
		bytes = 5 * q16 + 3 * k16 + align256((size_t)nq * 4) + align256((size_t)nl * 4);
	return grow(s, G_CUDNN, bytes + cudnn_plan_ws(d, bwd));
}

/* elementwise.cu mt_plan_get: the device block of a span table, kept
 * (looked up by content) or built in the least recently used of
 * MT_PLANS slots (the one there freed first) */
static int mt_table(struct sim *s, const struct titan_tensor_span *spans, int n)
{
	struct mt_plan *lru = &s->mt[0], *pl;
	int64_t nch = 0;

	if (n <= 0)
		return 0;
	for (int i = 0; i < MT_PLANS; i++) {
		pl = &s->mt[i];
		if (pl->spans && pl->n == n) {
			int t = 0;

			while (t < n && pl->spans[t].offset == spans[t].offset &&
			       pl->spans[t].numel == spans[t].numel &&
			       pl->spans[t].no_decay == spans[t].no_decay)
				t++;
			if (t == n) {
				pl->used = ++s->clock;
				return 0;
			}
		}
		if (pl->used < lru->used)
			lru = pl;
	}
	pl = lru;
	titan_mem_free(s->a, pl->block);
	s->tables -= pl->bytes;
	free(pl->spans);
	memset(pl, 0, sizeof(*pl));
	if (!(pl->spans = malloc((size_t)n * sizeof(*spans))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	memcpy(pl->spans, spans, (size_t)n * sizeof(*spans));
	pl->n = n;
	pl->used = ++s->clock;
	for (int t = 0; t < n; t++)
		nch += (spans[t].numel + MT_CHUNK - 1) / MT_CHUNK;
	if (nch == 0)
		return 0;
	/* chunks, first (n + 1 int64), part (nch double), tot (n double),
	 * no_decay (n bytes) */
	pl->bytes = (size_t)nch * MT_CHUNK_BYTES + ((size_t)n + 1) * 8 + (size_t)nch * 8 +
		    (size_t)n * 8 + (size_t)n;
	if (!(pl->block = dev_alloc(s, pl->bytes)))
		return TITAN_E_NOMEM;
	s->tables += pl->bytes;
	return 0;
}

/* ------------------------------------------------------------- the ops */

static int s_matmul_fwd(struct titan_backend *be, float *y, const float *x, const float *w,
			int64_t n, int64_t in, int64_t out, bool accumulate)
{
	(void)y, (void)x, (void)w, (void)accumulate;
	return gemm(sim_of(be), false, true, n, out, in);
}

static int s_matmul_bwd(struct titan_backend *be, float *dx, float *dw, const float *dy,
			const float *x, const float *w, int64_t n, int64_t in, int64_t out,
			bool accumulate_dx)
{
	struct sim *s = sim_of(be);
	int rc;

	(void)dy, (void)x, (void)w, (void)accumulate_dx;
	if (dx && dw && n > 0 && s->bf16) { /* dy rounded once into bf16_keep */
		if ((rc = grow(s, G_KEEP, bf16_bytes(n, out))) < 0 ||
		    (rc = gemm_bf16(s, false, false, n, in, out, true, false)) < 0)
			return rc;
		return gemm_bf16(s, true, false, out, in, n, true, false);
	}
	if (dx && (rc = gemm(s, false, false, n, in, out)) < 0)
		return rc;
	return dw ? gemm(s, true, false, out, in, n) : 0;
}

/* the token order and segment starts: at most n + min(n, V) + 1 ints */
static int s_embedding_bwd(struct titan_backend *be, float *dtable, const uint32_t *ids,
			   const float *dout, int64_t n, int64_t v, int64_t c)
{
	(void)dtable, (void)ids, (void)dout, (void)c;
	if (n <= 0)
		return 0;
	return scratch(sim_of(be), (size_t)(n + (n < v ? n : v) + 1) * 4);
}

static int s_rmsnorm_bwd(struct titan_backend *be, float *dx, float *dw, const float *dy,
			 const float *x, const float *w, const float *rstd, int64_t n, int64_t c,
			 bool accumulate_dx)
{
	int64_t rows;

	(void)dx, (void)dy, (void)x, (void)w, (void)rstd, (void)accumulate_dx;
	if (n <= 0 || !dw)
		return 0;
	rows = (n + DW_CHUNKS - 1) / DW_CHUNKS;
	rows = rows < DW_ROWS ? DW_ROWS : rows;
	return scratch(sim_of(be), (size_t)((n + rows - 1) / rows * c) * sizeof(double));
}

/* attention.cu part_prepare: Di floats, then the document ids */
static int part(struct titan_backend *be, const struct titan_attn_part *p, int64_t di)
{
	const int64_t ndoc = p->q_doc ? p->batch * (p->tq + p->tk) : 0;

	if (p->batch == 0 || (p->tq == 0 && p->tk == 0) || di + ndoc == 0)
		return 0;
	return scratch(sim_of(be), (size_t)(di + ndoc) * 4);
}

static struct titan_attn_part doc_part(const struct titan_attn_dims *d)
{
	return (struct titan_attn_part){d->batch, d->seq, d->seq, d->seq, d->seq, d->n_heads,
					d->n_kv_heads, d->head_dim, 0, d->doc, d->doc};
}

static int s_attention_fwd(struct titan_backend *be, float *out, float *lse, const float *q,
			   const float *k, const float *v, const struct titan_attn_dims *d)
{
	const struct titan_attn_part p = doc_part(d);

	(void)out, (void)lse, (void)q, (void)k, (void)v;
	if (d->batch == 0 || d->seq == 0)
		return 0;
	if (cudnn_runs(sim_of(be), d))
		return cudnn_attn(sim_of(be), d, false);
	return d->doc ? part(be, &p, 0) : 0;
}

static int s_attention_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
			   const float *dout, const float *q, const float *k, const float *v,
			   const float *out, const float *lse, const struct titan_attn_dims *d)
{
	const struct titan_attn_part p = doc_part(d);
	const int64_t rows = d->batch * d->seq * d->n_heads;

	(void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)out, (void)lse;
	if (d->batch == 0 || d->seq == 0)
		return 0;
	if (cudnn_runs(sim_of(be), d))
		return cudnn_attn(sim_of(be), d, true);
	return d->doc ? part(be, &p, rows) : scratch(sim_of(be), (size_t)rows * sizeof(float));
}

static int s_attention_part_fwd(struct titan_backend *be, float *out, float *lse,
				const float *q, const float *k, const float *v,
				const struct titan_attn_part *p, bool merge)
{
	(void)out, (void)lse, (void)q, (void)k, (void)v, (void)merge;
	return part(be, p, 0);
}

static int s_attention_part_bwd(struct titan_backend *be, float *dq, float *dk, float *dv,
				const float *dout, const float *q, const float *k, const float *v,
				const float *out, const float *lse, const struct titan_attn_part *p,
				bool accumulate)
{
	(void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)out, (void)lse;
	(void)accumulate;
	return part(be, p, p->batch * p->tq * p->n_heads);
}

/* loss.cu cuda_classifier_ce: scratch of chunk logits (rows padded to 4
 * floats, 256-byte aligned) and n row losses; bf16: bf16_keep of W and a
 * chunk of dz, each chunk's h rounded into gemm_ws forward and for dW */
static int s_classifier_ce(struct titan_backend *be, double *loss_sum, int64_t *n_valid,
			   float *dh, float *dw, const float *h, const float *w,
			   const int32_t *labels, int64_t n, int64_t c, int64_t v,
			   float grad_scale, int64_t chunk)
{
	struct sim *s = sim_of(be);
	const int64_t ldz = (v + 3) / 4 * 4;
	int rc;

	(void)dw, (void)h, (void)w, (void)labels, (void)grad_scale;
	*loss_sum = 0.0;
	*n_valid = 0;
	if (n <= 0)
		return 0;
	if (chunk <= 0 || chunk > n)
		chunk = n;
	if ((rc = scratch(s, align256((size_t)(chunk * ldz) * sizeof(float)) +
				     (size_t)n * sizeof(double))) < 0)
		return rc;
	if (!s->bf16)
		return 0;
	if ((rc = grow(s, G_KEEP, align256(bf16_bytes(v, c)) + bf16_bytes(chunk, v))) < 0)
		return rc;
	for (int64_t n0 = 0; n0 < n; n0 += chunk) {
		const int64_t cn = n0 + chunk < n ? chunk : n - n0;

		if ((rc = gemm_bf16(s, false, true, cn, v, c, false, true)) < 0)
			return rc;
		if (dh && (rc = gemm_bf16(s, true, false, v, c, cn, true, false)) < 0)
			return rc;
	}
	return 0;
}

static int s_sumsq(struct titan_backend *be, double *out, const float *x, int64_t n)
{
	int64_t nb;

	(void)x;
	*out = 0.0;
	if (n <= 0)
		return 0;
	nb = (n + EW_THREADS * SUMSQ_PER_THREAD - 1) / (EW_THREADS * SUMSQ_PER_THREAD);
	nb = nb > SUMSQ_BLOCKS ? SUMSQ_BLOCKS : nb;
	return scratch(sim_of(be), (size_t)(nb + 1) * sizeof(double));
}

/* elementwise.cu cuda_sumsq_multi / cuda_adamw_multi: the tables only
 * (the sums are read back through host scratch) */
static int s_sumsq_multi(struct titan_backend *be, double *out, const float *base,
			 const struct titan_tensor_span *spans, int n)
{
	int rc = titan_tensor_spans_check("sumsq_multi", spans, n);

	(void)base;
	for (int t = 0; t < n; t++)
		out[t] = 0.0;
	return rc < 0 ? rc : mt_table(sim_of(be), spans, n);
}

static int s_adamw_multi(struct titan_backend *be, float *p, float *m, float *v, const float *g,
			 const struct titan_tensor_span *spans, int n,
			 const struct titan_adamw_hparams *hp, int64_t step, float grad_mul)
{
	int rc = titan_tensor_spans_check("adamw_multi", spans, n);

	(void)p, (void)m, (void)v, (void)g, (void)hp, (void)step, (void)grad_mul;
	return rc < 0 ? rc : mt_table(sim_of(be), spans, n);
}

/* backend.cu cuda_release */
static void s_release(struct titan_backend *be)
{
	struct sim *s = sim_of(be);

	titan_mem_free(s->a, s->blas_ws);
	s->blas_ws = NULL;
	for (int k = 0; k < G_N; k++) { /* their sizes stay for the report */
		titan_mem_free(s->a, s->g[k].p);
		s->g[k].p = NULL;
	}
	for (int i = 0; i < MT_PLANS; i++) { /* s->tables stays for the report */
		titan_mem_free(s->a, s->mt[i].block);
		free(s->mt[i].spans);
		s->mt[i].block = NULL;
		s->mt[i].spans = NULL;
	}
}

/* The raw device memory under the caching allocator: address ranges
 * that are never mapped, from 2^63 up (kernel space: any host access
 * faults, as the dry run's guarded blocks), so that a model of any size a
 * 64-bit count holds is counted without address space of this machine. */
static void *far_alloc(void *ctx, size_t bytes)
{
	uintptr_t *next = ctx, p = *next;
	const size_t r = (bytes + 4095) & ~(size_t)4095;

	if (r < bytes || p + r < p)
		return NULL;
	*next = p + r;
	return (void *)p;
}

static void far_free(void *ctx, void *ptr, size_t bytes)
{
	(void)ctx, (void)ptr, (void)bytes;
}

static int far_zero(void *ctx, void *ptr, size_t bytes)
{
	(void)ctx, (void)ptr, (void)bytes;
	return 0;
}

/* The run's context: the options and what the backend kept. */
struct run {
	const struct titan_model_dims *d;
	const struct titan_est_opts *o;
	struct sim s;
	size_t have[G_N];
	size_t tables;
};

/* backend.cu titan_backend_cuda_init: the cuBLAS workspace first; the
 * measure backend's buffer ops (nothing is computed), lib/cuda's
 * workspace in the compute ops */
static int sim_init(struct titan_backend *be, struct titan_allocator *a, void *ctx)
{
	struct run *r = ctx;
	struct sim *s = &r->s;

	titan_backend_measure_init(be, a, 1);
	s->ops = *be->ops;
	s->a = a;
	s->bf16 = r->o->param_bytes == 2;
	s->cudnn = s->bf16 && !r->o->cuda_attn_titan; /* cuDNN where it loads */
	s->ops.release = s_release;
	s->ops.matmul_fwd = s_matmul_fwd;
	s->ops.matmul_bwd = s_matmul_bwd;
	s->ops.embedding_bwd = s_embedding_bwd;
	s->ops.rmsnorm_bwd = s_rmsnorm_bwd;
	s->ops.attention_fwd = s_attention_fwd;
	s->ops.attention_bwd = s_attention_bwd;
	s->ops.attention_part_fwd = s_attention_part_fwd;
	s->ops.attention_part_bwd = s_attention_part_bwd;
	s->ops.classifier_ce = s_classifier_ce;
	s->ops.sumsq = s_sumsq;
	s->ops.sumsq_multi = s_sumsq_multi;
	s->ops.adamw_multi = s_adamw_multi;
	be->ops = &s->ops;
	be->impl = s;
	if (!(s->blas_ws = dev_alloc(s, CUBLAS_WS)))
		return TITAN_E_NOMEM;
	return 0;
}

int est_gpu_titan_model(const struct titan_model_dims *d, const struct titan_est_opts *o,
			struct titan_estimate *e)
{
	struct run run = {.d = d, .o = o};
	struct titan_caching_stats cs;
	struct titan_mem_backend raw;
	struct titan_caching *cache;
	struct titan_est_rank *r;
	struct est_num n = {false};
	struct est_dry plan;
	struct est_dry_dev dev = {.init = sim_init, .ctx = &run, .steps = 2};
	int64_t live = 0, kept = 0;
	uintptr_t next = (uintptr_t)1 << 63;
	uint32_t at;
	int rc;

	raw = (struct titan_mem_backend){.name = "cuda", .alloc = far_alloc, .free = far_free,
					 .zero = far_zero, .ctx = &next};
	if (!(cache = titan_caching_new(&raw, &(struct titan_caching_opts){.name = "cuda:0"})))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	titan_caching_backend(cache, &dev.mem);
	/* what the backend keeps is recorded before it is released */
	rc = est_dry_device(d, o, &dev, &plan);
	titan_caching_get_stats(cache, &cs);
	titan_caching_free(cache);
	if (rc < 0)
		return rc;
	for (int k = 0; k < G_N; k++)
		run.have[k] = run.s.g[k].have;
	run.tables = run.s.tables;
	if (!(e->ranks = calloc(1, sizeof(*e->ranks)))) {
		est_dry_release(&plan);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	e->nranks = 1;
	e->stages_per_rank = 1;
	e->nstages = 1;
	e->pp_microbatches = 1;
	e->tokens_per_step = est_mul(&n, est_mul(&n, o->local_batch, o->seq_len), o->accum);
	r = &e->ranks[0];
	r->nstages = 1;
	r->stage_l1[0] = (int)d->n_layers;
	r->layers = d->n_layers;
	r->first = r->last = true;
	r->params_local = r->params_shard = e->params.total;
	at = EST_AT(est_moment(r, TITAN_EST_PHASE_BACKWARD, "step",
			       "training step (reserved segments)"));
	/* the CPU path's buffers (the model's plan), then lib/cuda's */
	est_plan_rows(r, &plan, 1, at, &n);
	for (int i = 0; i < plan.nplan; i++)
		live = est_add(&n, live, plan.plan[i].bytes);
	est_item(r, "CUDA: cuBLAS workspace (32 MiB)", TITAN_MEM_WORKSPACE, (int64_t)CUBLAS_WS, at);
	est_item(r, "CUDA: cuDNN attention staging + workspace", TITAN_MEM_WORKSPACE,
		 (int64_t)run.have[G_CUDNN], at);
	est_item(r, "CUDA: multi-tensor AdamW/sumsq tables", TITAN_MEM_WORKSPACE,
		 (int64_t)run.tables, at);
	est_item(r, "CUDA: bf16 GEMM operands (gemm_ws, largest + 25%)", TITAN_MEM_WORKSPACE,
		 (int64_t)run.have[G_GEMM], at);
	est_item(r, "CUDA: bf16 dy / classifier W + dz (bf16_keep)", TITAN_MEM_WORKSPACE,
		 (int64_t)run.have[G_KEEP], at);
	est_item(r, "CUDA: op scratch (loss logits chunk, Di, partials)", TITAN_MEM_WORKSPACE,
		 (int64_t)run.have[G_SCRATCH], at);
	kept = (int64_t)(CUBLAS_WS + run.have[G_CUDNN] + run.tables + run.have[G_GEMM] +
			 run.have[G_KEEP] + run.have[G_SCRATCH]);
	live = est_add(&n, live, kept);
	/* anything else live after the step (none today: the plan and the
	 * backend's buffers are all the engine keeps) */
	if (plan.after.total_cur > live)
		est_item(r, "other live blocks", TITAN_MEM_OTHER, plan.after.total_cur - live, at);
	live = plan.after.total_cur > live ? plan.after.total_cur : live;
	est_dry_release(&plan);
	/* the rest of the segments: blocks rounded to 512 bytes, segments to
	 * 2 or 20 MiB, freed blocks the cache keeps (the grown buffers' old
	 * copies, the step's transient blocks) */
	if (cs.reserved_peak < live && !n.overflow)
		return titan_error(TITAN_E_INVALID, "the CUDA model's caching allocator holds %lld "
				   "bytes, less than the %lld live (lib/estimate/gpu_titan.c is out of "
				   "date with lib/cuda)", (long long)cs.reserved_peak, (long long)live);
	est_item(r, "caching allocator: rounding, cached free blocks", TITAN_MEM_OTHER,
		 cs.reserved_peak - live, at);
	est_rank_finish(r, 0.0, &n);
	if (n.overflow)
		return titan_error(TITAN_E_INVALID, "the estimate does not fit in 64-bit byte counts "
				   "(batch, sequence or model far too large)");
	return 0;
}
