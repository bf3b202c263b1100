/*
 * titan/ops.h — the compute ops of one Llama 3 training step (forward and
 * hand-written backward, fp32) as a backend table, ggml-style: a
 * `struct titan_backend_ops` per backend with the same signatures, the CPU
 * table (OpenBLAS sgemm + OpenMP, lib/cpu) being the oracle every other
 * backend is tested against.  Shapes and semantics mirror torchtitan's
 * models/llama3 (see docs/torchtitan-notes.md §1): nn.Linear without
 * bias, nn.RMSNorm, complex (adjacent-pair) RoPE with Llama 3.1 scaling,
 * causal GQA scaled-dot-product attention, SwiGLU, cross-entropy with
 * ignore_index, torch.optim.AdamW.
 *
 * Conventions for every op:
 *  - Tensors are dense, row-major fp32 (ids/labels integer) in the backend's
 *    memory: host pointers for cpu, device pointers for cuda.
 *  - Names: N = tokens (= B·T), C = model dim, H = heads, Hkv = kv heads,
 *    D = head dim (C = H·D), F = FFN hidden, V = vocab.  Token-major
 *    activations: row n = b·T + t.
 *  - Every op returns 0, or a negative enum titan_err after recording a
 *    message (TITAN_E_INVALID for out-of-range ids/labels or bad sizes,
 *    TITAN_E_NOMEM when workspace cannot be allocated).  Outputs are
 *    unspecified after a failure.
 *  - "overwrite" outputs are written without being read; "accumulate"
 *    outputs are added to (the caller zeroes them once per step).
 *  - Unless an op says otherwise outputs must not alias inputs.
 *  - Workspace an op needs is taken from be->alloc with TITAN_MEM_WORKSPACE
 *    and released before the op returns (sizes are stated per op).
 *
 * Determinism (cpu): every op is bit-for-bit reproducible run to run for a
 * fixed thread count, and every op except the sgemm-based ones (matmul_*,
 * and the GEMMs inside classifier_ce) gives the same bits for any thread
 * count: work is split into tasks with disjoint outputs whose internal
 * order does not depend on the split, and reductions run in a fixed order
 * (token order, or fixed 8-lane partial sums).  OpenBLAS splits GEMMs over
 * M/N only, so in practice its results do not depend on the thread count
 * either (the tests check 1 vs 2 threads), but OpenBLAS does not promise
 * it.  Hot loops are compiled for SSE2/AVX2/AVX-512 and picked at load
 * time; they never contract to FMA or reassociate, so the choice does not
 * change results.  Bits may differ between machines where glibc picks a
 * different variant of logf/cosf/sinf/pow (used once per row or table).
 *
 * exp: the CPU ops use a vectorised expf of their own (≤ 1 ulp from exp,
 * 0 below −87.34), where PyTorch uses Sleef's (≤ 1 ulp): a last-bit
 * difference in softmax, SwiGLU and cross-entropy terms.
 */
#ifndef TITAN_OPS_H
#define TITAN_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "titan/core.h"

#ifdef __cplusplus
extern "C" {
#endif

struct titan_backend_ops;

/* A backend instance: its op table plus the state ops need.  Fill with
 * titan_backend_cpu_init(); the fields after `ops` may be changed between
 * calls (they are read on every op). */
struct titan_backend {
	const struct titan_backend_ops *ops;
	struct titan_allocator *alloc; /* workspace (TITAN_MEM_WORKSPACE) */
	int nthreads;                  /* cpu: OpenMP threads of every op */
	/* Attention tiles: query rows and keys per block (> 0).  They change
	 * rounding (online softmax), not the math; default TITAN_ATTN_BLOCK. */
	int attn_block_q, attn_block_k;
	void *impl;                    /* backend private (cuda: stream, handles) */
};

/* Sizes that decide the CPU ops' workspace (titan-estimate models it from
 * these): the default attention block, and the chunk of the gradient-norm
 * sum of squares (fixed: the sum must not depend on the thread count). */
#define TITAN_ATTN_BLOCK 64
#define TITAN_SUMSQ_CHUNK 16384

/* Attention geometry: q/out [B,T,H,D], k/v [B,T,Hkv,D], lse [B,H,T].
 * H must be a multiple of Hkv; query head h reads kv head h / (H/Hkv)
 * (repeat_interleave, as torchtitan's repeat_kv and SDPA enable_gqa).
 * `doc` (NULL: plain causal) is the document id of every token [B,T]
 * (host memory), non-decreasing along each row: token t then sees key s
 * only when s <= t and doc[b,s] == doc[b,t] (training.attn_mask_type
 * block_causal, torchtitan's FlexAttention document mask), and key blocks
 * of other documents are skipped, so the cost falls with the documents'
 * length.  TITAN_E_INVALID when the ids decrease. */
struct titan_attn_dims {
	int64_t batch, seq, n_heads, n_kv_heads, head_dim;
	const int32_t *doc;
};

/* A part of attention (context parallelism's ring, lib/train): tq query
 * rows against tk key/value rows, each batch row's queries at rows
 * b·q_stride + t (t < tq) of q/out/dout and lse [B,H,q_stride] (index
 * (b·H + h)·q_stride + t), its keys at rows b·k_stride + s (s < tk) of
 * k/v/dk/dv; pointer offsets select sub-blocks.  Query row t sees key s
 * when s <= t + diag: diag 0 with tq = tk is the causal op, diag >= tk
 * lets every row see every key.  With document ids (both or neither,
 * host memory, non-decreasing along each row): q_doc[b·q_stride + t] and
 * k_doc[b·k_stride + s], offset with q and k, and query t then also needs
 * k_doc == q_doc to see key s (struct titan_attn_dims' doc). */
struct titan_attn_part {
	int64_t batch, tq, tk, q_stride, k_stride, n_heads, n_kv_heads, head_dim, diag;
	const int32_t *q_doc, *k_doc;
};

/* torch.optim.AdamW hyper-parameters (doubles, as PyTorch's Python floats). */
struct titan_adamw_hparams {
	double lr, beta1, beta2, eps, weight_decay;
};

/* One tensor of a multi-tensor op (sumsq_multi, adamw_multi): the numel
 * floats starting `offset` floats past each base pointer the op is given,
 * every operand an arena with the same layout (titan/model.h's
 * titan_param_arena: a parameter's offset is the same in the parameters,
 * gradients and moments).  Offsets need no alignment; adamw_multi's spans
 * must not overlap.  no_decay: adamw_multi runs this tensor with weight
 * decay 0 (optimizer.weight_decay's exclusions); sumsq_multi ignores it. */
struct titan_tensor_span {
	int64_t offset, numel;
	bool no_decay;
};

struct titan_backend_ops {
	const char *name; /* "cpu", "cuda" */

	/* Frees what the backend instance holds (cpu: nothing).  NULL-safe. */
	void (*release)(struct titan_backend *be);

	/* ---- linear layers (nn.Linear layout: W[out,in], no bias) ---------- */

	/* y[N,out] = x[N,in] · W[out,in]^T, overwritten, or added to y when
	 * `accumulate` (e.g. straight into the residual stream). */
	int (*matmul_fwd)(struct titan_backend *be, float *y, const float *x,
			  const float *w, int64_t n, int64_t in, int64_t out,
			  bool accumulate);
	/* dx[N,in] = dy[N,out] · W[out,in] (overwrite, or add when
	 * `accumulate_dx`); dW[out,in] += dy^T · x (always accumulates).
	 * dx or dw may be NULL to skip that gradient. */
	int (*matmul_bwd)(struct titan_backend *be, float *dx, float *dw,
			  const float *dy, const float *x, const float *w,
			  int64_t n, int64_t in, int64_t out, bool accumulate_dx);

	/* ---- embedding ------------------------------------------------------ */

	/* out[N,C] = table[ids[n], :] (overwrite).  TITAN_E_INVALID when an
	 * id is >= V (naming the position). */
	int (*embedding_fwd)(struct titan_backend *be, float *out,
			     const uint32_t *ids, const float *table, int64_t n,
			     int64_t v, int64_t c);
	/* dtable[ids[n], :] += dout[n, :] for n in token order (repeated ids
	 * add up in that order; no atomics). */
	int (*embedding_bwd)(struct titan_backend *be, float *dtable,
			     const uint32_t *ids, const float *dout, int64_t n,
			     int64_t v, int64_t c);

	/* ---- RMSNorm (nn.RMSNorm, fp32) ------------------------------------- */

	/* rstd[n] = 1/sqrt(mean_c(x[n,c]^2) + eps) (computed in double, rounded
	 * once),
	 * y[n,c] = (x[n,c]·rstd[n])·w[c].  y and rstd overwritten; y may alias
	 * x (but backward needs x). */
	int (*rmsnorm_fwd)(struct titan_backend *be, float *y, float *rstd,
			   const float *x, const float *w, int64_t n, int64_t c,
			   float eps);
	/* With g = dy·w and xhat = x·rstd:
	 *   dx[n,c] = rstd[n]·(g[n,c] − xhat[n,c]·mean_c(g·xhat))  (overwrite,
	 *             or add when `accumulate_dx`; dx may alias dy),
	 *   dw[c]  += Σ_n dy[n,c]·xhat[n,c]  (accumulate; sum in double, token
	 *             order).  dw may be NULL. */
	int (*rmsnorm_bwd)(struct titan_backend *be, float *dx, float *dw,
			   const float *dy, const float *x, const float *w,
			   const float *rstd, int64_t n, int64_t c,
			   bool accumulate_dx);

	/* ---- RoPE (complex form, adjacent pairs) ---------------------------- */

	/* In place on x[B,T,nh,D] (q with nh = H, k with nh = Hkv): pair
	 * (x[2i], x[2i+1]) at position t is multiplied by the complex number
	 * freqs[t,i] = (cos, sin) from titan_rope_freqs():
	 *   (a, b) -> (a·cos − b·sin, a·sin + b·cos).
	 * freqs must hold at least T rows. */
	int (*rope_fwd)(struct titan_backend *be, float *x, const float *freqs,
			int64_t batch, int64_t seq, int64_t nh, int64_t head_dim);
	/* The adjoint (rotation by −angle), in place on the gradient:
	 *   (da, db) -> (da·cos + db·sin, −da·sin + db·cos). */
	int (*rope_bwd)(struct titan_backend *be, float *dx, const float *freqs,
			int64_t batch, int64_t seq, int64_t nh, int64_t head_dim);

	/* ---- SwiGLU --------------------------------------------------------- */

	/* h[i] = silu(a[i])·b[i], silu(a) = a/(1+exp(−a)); a = x·W1^T,
	 * b = x·W3^T, all [N,F] flattened to n elements.  h may alias a or b. */
	int (*swiglu_fwd)(struct titan_backend *be, float *h, const float *a,
			  const float *b, int64_t n);
	/* da = dh·b·σ(a)·(1 + a·(1−σ(a))), db = dh·silu(a) (overwrite);
	 * da may alias a, db may alias b. */
	int (*swiglu_bwd)(struct titan_backend *be, float *da, float *db,
			  const float *dh, const float *a, const float *b,
			  int64_t n);

	/* ---- causal GQA attention (flash-style, online softmax) ------------ */

	/* out[b,t,h,:] = Σ_{s<=t} softmax_s(q[b,t,h]·k[b,s,g] / sqrt(D)) v[b,s,g]
	 * with g = h/(H/Hkv); lse[b,h,t] = log Σ_{s<=t} exp(score) (natural
	 * log, scores already scaled) is saved for backward.  Both
	 * overwritten.  Keys are visited in blocks of be->attn_block_k, so
	 * memory is O(block) per task, never O(T^2).  Workspace:
	 * nthreads·(bq·bk + D·bk + 2·bq) floats. */
	int (*attention_fwd)(struct titan_backend *be, float *out, float *lse,
			     const float *q, const float *k, const float *v,
			     const struct titan_attn_dims *d);
	/* Flash-attention backward: probabilities recomputed from q, k and
	 * lse; Di = rowsum(dout·out).  dq [B,T,H,D], dk, dv [B,T,Hkv,D] are
	 * overwritten; dk/dv sum over the H/Hkv query heads of their group in
	 * a fixed order (one task per (b, kv head), no atomics).  Workspace:
	 * nthreads·(T + 2·bq·bk + 2·D·bk) floats. */
	int (*attention_bwd)(struct titan_backend *be, float *dq, float *dk,
			     float *dv, const float *dout, const float *q,
			     const float *k, const float *v, const float *out,
			     const float *lse, const struct titan_attn_dims *d);

	/* The same on a part (struct titan_attn_part), for the ring of context
	 * parallelism.  Without `merge`, out and lse are overwritten (a row
	 * that sees no key gets out 0, lse −inf).  With `merge` they hold the
	 * row's result over other keys and become the result over both: the
	 * online softmax continues from (out, lse) (m = lse, l = 1, o = out),
	 * which is the log-sum-exp merge of PyTorch's _SDPAMerger done in the
	 * kernel; a row that sees none of the part's keys keeps its bits.
	 * Workspace as attention_fwd.  Both backends have them (the cuda
	 * ones: plain fp32 kernels, lib/cuda/attention.cu); a backend without
	 * them leaves them NULL and context parallelism refuses it. */
	int (*attention_part_fwd)(struct titan_backend *be, float *out, float *lse,
				  const float *q, const float *k, const float *v,
				  const struct titan_attn_part *p, bool merge);
	/* Backward of a part given the rows' final (merged) out and lse: the
	 * part's terms of dq [rows of q], dk, dv [rows of k], overwritten, or
	 * added to when `accumulate`.  Workspace: nthreads·(tq + 2·bq·bk +
	 * 2·D·bk) floats. */
	int (*attention_part_bwd)(struct titan_backend *be, float *dq, float *dk, float *dv,
				  const float *dout, const float *q, const float *k,
				  const float *v, const float *out, const float *lse,
				  const struct titan_attn_part *p, bool accumulate);

	/* ---- output layer + cross-entropy, fused and chunked ---------------- */

	/* logits[N,V] = h[N,C] · W[V,C]^T, computed `chunk` tokens at a time
	 * (chunk <= 0: all N at once) so at most chunk·V logits exist.  For
	 * each token with labels[n] >= 0 (negative = ignored, as
	 * ignore_index=-100) the loss is logsumexp(logits[n]) − logits[n,y]
	 * (fp32 logits, max-shifted fp32 exp, their sum and the log in
	 * double).  Returns in
	 * *loss_sum the sum over valid tokens (double, added in token order)
	 * and in *n_valid their count.  When dh and dw are not NULL it also
	 * computes the gradients of loss_sum·grad_scale in the same pass:
	 *   dz = (softmax(logits) − onehot(y))·grad_scale (0 for ignored rows),
	 *   dh[N,C] = dz · W (overwrite), dW[V,C] += dz^T · h (accumulate).
	 * (dh and dw are both NULL, or both set.)  Labels >= V are
	 * TITAN_E_INVALID.  The loss does not depend on `chunk`; dh/dW do only
	 * through sgemm rounding (dW sums chunk by chunk): relative differences
	 * ~1e-6, the tests allow 1e-5.  Workspace: chunk·V floats (+ chunk
	 * doubles): pick chunk so that chunk·V·4 bytes is affordable (e.g.
	 * 1024 tokens × 128256 = 525 MB). */
	int (*classifier_ce)(struct titan_backend *be, double *loss_sum,
			     int64_t *n_valid, float *dh, float *dw,
			     const float *h, const float *w,
			     const int32_t *labels, int64_t n, int64_t c,
			     int64_t v, float grad_scale, int64_t chunk);

	/* ---- optimizer and gradient utilities ------------------------------- */

	/* One torch.optim.AdamW step (PyTorch >= 2.0 single-tensor and fused
	 * CPU kernels, fp32 state) on n elements; `step` is the step number
	 * after increment (1 for the first).  g' = fp32(g·grad_mul) (pass 1
	 * for none; clip_grad_norm_'s coefficient otherwise, g is not
	 * modified), then, with every double constant rounded to float:
	 *   p = p·(1 − lr·wd)
	 *   m = fma(1−β1, g' − m, m)              (exp_avg.lerp_(g', 1−β1))
	 *   v = v·β2 + ((1−β2)·g')·g'             (mul_, addcmul_)
	 *   denom = sqrt(v)/sqrt(1−β2^step) + eps
	 *   p = p + (−lr/(1−β1^step)·m)/denom      (addcdiv_)
	 * (bias corrections and step size in double, as PyTorch). */
	int (*adamw_step)(struct titan_backend *be, float *p, float *m,
			  float *v, const float *g, int64_t n,
			  const struct titan_adamw_hparams *hp, int64_t step,
			  float grad_mul);
	/* *out = Σ x[i]^2 in double, in fixed 16384-element chunks added in
	 * order (the same value for any thread count). */
	int (*sumsq)(struct titan_backend *be, double *out, const float *x,
		     int64_t n);
	/* x[i] *= alpha (fp32 multiply). */
	int (*scale)(struct titan_backend *be, float *x, int64_t n, float alpha);
	/* y[i] = a[i] + b[i]; y may alias a or b. */
	int (*add)(struct titan_backend *be, float *y, const float *a,
		   const float *b, int64_t n);
	/* dst = src (n floats, no overlap). */
	int (*copy)(struct titan_backend *be, float *dst, const float *src,
		    int64_t n);
	/* x[0..n) = 0. */
	int (*zero)(struct titan_backend *be, float *x, int64_t n);
	/* The gradient norm's and the optimizer's ops over all tensors at once
	 * (lib/train/llama.c), each one call where the per-tensor ops take one
	 * per tensor.  TITAN_E_INVALID for n < 0 or a negative offset or
	 * numel; n = 0 does nothing.
	 *   sumsq_multi: out[i] (host memory, n doubles) = Σ x² of tensor i of
	 *     `base`.  cpu: sumsq per tensor (the same bits); cuda: one launch
	 *     for every tensor's fixed chunks, one for the per-tensor totals in
	 *     a fixed order, one copy back and one synchronisation for all n
	 *     (results repeat run to run, and differ from cuda's sumsq in the
	 *     last bits of the double, as both do from the cpu's).
	 *   adamw_multi: adamw_step on every tensor of the arenas p, m, v, g
	 *     (weight decay 0 where spans[i].no_decay), the same bits as
	 *     adamw_step per tensor; cuda: one launch.  TITAN_E_INVALID for
	 *     step < 1, also when n is 0.
	 * cuda keeps a device copy of each distinct span table it is given
	 * (the model's is the same every step; a few are kept, the least
	 * recently used replaced), freed with the backend. */
	int (*sumsq_multi)(struct titan_backend *be, double *out, const float *base,
			   const struct titan_tensor_span *spans, int n);
	int (*adamw_multi)(struct titan_backend *be, float *p, float *m, float *v,
			   const float *g, const struct titan_tensor_span *spans, int n,
			   const struct titan_adamw_hparams *hp, int64_t step, float grad_mul);

	/* ---- buffers: memory, transfers to and from the host ---------------
	 * What the parallel code (data and pipeline parallelism, context and
	 * tensor parallelism's packing, staged communication) moves data
	 * with, so that it never reads or writes backend memory from host
	 * code.  A buffer is a pointer into the backend's memory (host for
	 * cpu, device for cuda), offsets included: a tensor inside an arena
	 * is one.  Sizes are bytes unless an op says floats; 0 is allowed
	 * everywhere and does nothing.  buf_copy, buf_copy_rows and buf_memset
	 * are ordered with the compute ops (cuda: queued on the compute
	 * stream, asynchronous); buf_set and buf_get return when the host
	 * memory has been read or written (cuda: after the work queued before
	 * them).  Source and destination must not overlap. */

	/* A buffer of `bytes` from be->alloc counted under `tag` (cpu: the
	 * host allocator when be->alloc is NULL; cuda: cudaMalloc), contents
	 * undefined.  NULL + TITAN_E_NOMEM recorded on failure. */
	void *(*buf_alloc)(struct titan_backend *be, size_t bytes, enum titan_mem_tag tag);
	/* Frees a buf_alloc buffer; NULL is a no-op.  Work queued before the
	 * call may still use it (cuda: one stream, so the caching allocator
	 * hands it out again only to later work). */
	void (*buf_free)(struct titan_backend *be, void *buf);
	/* Host -> buffer: dst[0..bytes) = host[0..bytes). */
	int (*buf_set)(struct titan_backend *be, void *dst, const void *host, size_t bytes);
	/* Buffer -> host: host[0..bytes) = src[0..bytes). */
	int (*buf_get)(struct titan_backend *be, void *host, const void *src, size_t bytes);
	/* Buffer -> buffer: dst[0..bytes) = src[0..bytes). */
	int (*buf_copy)(struct titan_backend *be, void *dst, const void *src, size_t bytes);
	/* Strided rows, buffer -> buffer (packing for collectives):
	 *   dst[dst_off + r·dst_stride + j] = src[src_off + r·src_stride + j]
	 * for r < rows, j < width, in floats.  TITAN_E_INVALID for negative
	 * sizes or offsets, or a stride below width. */
	int (*buf_copy_rows)(struct titan_backend *be, float *dst, int64_t dst_off,
			     int64_t dst_stride, const float *src, int64_t src_off,
			     int64_t src_stride, int64_t rows, int64_t width);
	/* dst[0..bytes) = (unsigned char)value. */
	int (*buf_memset)(struct titan_backend *be, void *dst, int value, size_t bytes);

	/* ---- vocabulary-parallel pieces --------------------------------------
	 * Tensor parallelism's embedding and cross-entropy (lib/train/tp.c),
	 * where a rank holds the rows [v0, v0 + V) of the embedding table or
	 * the classifier, and the group's collectives join the pieces.  Each
	 * element's arithmetic is in a fixed order, so the backends agree up
	 * to expf and log. */

	/* out[i,:] = w[ids[i] − v0, :] for the ids in [v0, v0 + V), else 0
	 * (i < n; w [V,C], out [n,C]). */
	int (*embedding_part_fwd)(struct titan_backend *be, float *out, const uint32_t *ids,
				  const float *w, int64_t n, int64_t v0, int64_t V, int64_t C);
	/* dw[ids[i] − v0, :] += dx[i, :] for the ids in range, each element's
	 * sum in token order (embedding_bwd's bits). */
	int (*embedding_part_bwd)(struct titan_backend *be, float *dw, const uint32_t *ids,
				  const float *dx, int64_t n, int64_t v0, int64_t V, int64_t C);
	/* Cross-entropy over logits split by columns: z [rows,V] holds this
	 * rank's columns [v0, v0 + V) of each row, labels [rows] the targets
	 * (< 0: ignored).  Per row r:
	 *   ce_part_max: mx[r] = max_j z[r,j] (−inf when V is 0);
	 *   ce_part_exp (mx the group's max): st[2r+1] = z[r, labels[r] − v0]
	 *     when labels[r] >= 0 and that column is here, else 0; then
	 *     z[r,j] = expf(z[r,j] − mx[r]) and st[2r] = their sum in double,
	 *     in j order;
	 *   ce_part_grad (mx, st the group's: summed): the row's loss
	 *     st[2r] = (mx[r] + log st[2r]) − st[2r+1] and st[2r+1] = 1, or
	 *     both 0 for an ignored row; with `grads`, z[r,:] = (softmax −
	 *     onehot)·gs as z·(1/st[2r])·gs with gs subtracted at the label's
	 *     column (0 for an ignored row), else z is left as it is. */
	int (*ce_part_max)(struct titan_backend *be, float *mx, const float *z, int64_t rows,
			   int64_t V);
	int (*ce_part_exp)(struct titan_backend *be, double *st, float *z, const float *mx,
			   const int32_t *labels, int64_t v0, int64_t rows, int64_t V);
	int (*ce_part_grad)(struct titan_backend *be, double *st, float *z, const float *mx,
			    const int32_t *labels, int64_t v0, int64_t rows, int64_t V, float gs,
			    bool grads);
};

/* The argument checks of the attention ops, stated once (lib/cpu) and
 * applied by every backend: document ids `doc` (NULL: none) ascending
 * along each of `rows` rows of n ids at stride ld (`what` names them in
 * the message: "token", "query", "key"); a part's dims and ids.  0, or
 * TITAN_E_INVALID with the CPU op's message. */
int titan_attn_docs_check(const int32_t *doc, int64_t rows, int64_t n, int64_t ld,
			  const char *what);
int titan_attn_part_check(const struct titan_attn_part *p);

/* The CPU backend: nthreads <= 0 means omp_get_max_threads().  Workspace
 * comes from the host allocator.  Also sets OpenBLAS's thread count to
 * nthreads (process-wide: OpenBLAS has one setting); BLAS is only called
 * outside OpenMP parallel regions, so the two never nest.  Returns 0. */
int titan_backend_cpu_init(struct titan_backend *be, int nthreads);

/* The CPU ops' workspace, stated once (lib/cpu): the ops take exactly
 * these blocks (tag TITAN_MEM_WORKSPACE, given back before they return)
 * and titan-estimate counts them.  Bytes, 0 when the op takes none, -1
 * when the size does not fit in 64 bits.  `nthreads` is the backend's
 * (be->nthreads), bq and bk its attention blocks.
 *
 * titan_cpu_nthreads: the threads an op runs for `work` tasks (nthreads,
 * at least 1, at most work).  Attention: forward of tq query rows of
 * h heads, backward of tq query rows against tk keys of hkv kv heads
 * (titan_attn_dims is the part tq = tk = seq).  Sum of squares of n
 * elements.  classifier_ce over n rows of a vocabulary of v in chunks of
 * `chunk` rows (<= 0: all): two blocks live at once, the chunk's logits
 * (logits) and row losses (rows). */
int titan_cpu_nthreads(int64_t nthreads, int64_t work);
int64_t titan_cpu_attn_fwd_ws(int64_t nthreads, int64_t bq, int64_t bk, int64_t batch,
			      int64_t tq, int64_t h, int64_t d);
int64_t titan_cpu_attn_bwd_ws(int64_t nthreads, int64_t bq, int64_t bk, int64_t batch,
			      int64_t tq, int64_t tk, int64_t hkv, int64_t d);
int64_t titan_cpu_sumsq_ws(int64_t n);
void titan_cpu_classifier_ce_ws(int64_t n, int64_t v, int64_t chunk, int64_t *logits,
				int64_t *rows);

/* The nominal fp32 peak of this CPU (lib/cpu/peak.c, docs/performance.md):
 * flops = threads x clock_hz x flops_per_cycle, with FLOPs/cycle of the
 * sgemm kernel OpenBLAS runs (isa, kernel) and the nominal clock
 * (clock_from: model name, cpufreq, or cpu MHz).  `cpuinfo` is NULL for
 * /proc/cpuinfo.  0, or TITAN_E_UNSUPPORTED when no clock is known. */
struct titan_cpu_peak {
	double flops, clock_hz;
	int threads, flops_per_cycle;
	char isa[32], kernel[128], clock_from[32], model[128];
};
int titan_cpu_peak_flops(const char *cpuinfo, int threads, struct titan_cpu_peak *p);
/* The same for a named OpenBLAS kernel (`core`, as openblas_get_corename
 * spells it; NULL: the one running).  A kernel of the AVX-512 class on an
 * AMD family 25 core (Zen 3/4: 256-bit FMA pipes) counts 32 FLOP/cycle. */
int titan_cpu_peak_flops_for(const char *cpuinfo, const char *core, int threads,
			     struct titan_cpu_peak *p);

/* Which OpenBLAS kernel runs the GEMMs (lib/cpu/select.c,
 * docs/performance.md "The BLAS kernel").  An OpenBLAS kernel and what its
 * sgemm issues per cycle and core in fp32; x86: an x86 kernel (the ones
 * titan compares with the CPU flags). */
struct titan_blas_kernel {
	const char *core, *isa;
	int flops;
	bool x86;
};
/* The table entry of a kernel name (case-insensitive), or NULL. */
const struct titan_blas_kernel *titan_blas_kernel_find(const char *core);
/* The fastest kernel a /proc/cpuinfo flags line allows: "SkylakeX"
 * (avx512f+bw+dq+vl with avx2 and fma), "Haswell" (avx2 + fma),
 * "Sandybridge" (avx), or NULL (older x86, ARM, NULL flags). */
const char *titan_blas_best_for_flags(const char *flags);

enum titan_blas_how {
	TITAN_BLAS_NONE,     /* no OpenBLAS in this build */
	TITAN_BLAS_OWN,      /* OpenBLAS's own choice, as good as the flags allow (or unknown) */
	TITAN_BLAS_SELECTED, /* titan sets OPENBLAS_CORETYPE: OpenBLAS's was slower */
	TITAN_BLAS_USER,     /* OPENBLAS_CORETYPE set by the user: never replaced */
	TITAN_BLAS_FIXED,    /* OpenBLAS built for one target: it has no choice */
	TITAN_BLAS_FAILED,   /* titan's choice could not be applied (re-exec failed) */
};
struct titan_blas_choice {
	enum titan_blas_how how;
	char core[32];     /* the kernel that runs (SELECTED: titan's) */
	char openblas[32]; /* SELECTED, FAILED: the one OpenBLAS picked itself */
	char best[32];     /* the fastest the flags allow ("" unknown) */
	char user[48];     /* USER: the value of OPENBLAS_CORETYPE */
	bool slower;       /* `core` issues fewer FLOPs/cycle than `best` */
	int exec_errno;    /* FAILED: why */
};
/* The choice as a pure function: the flags line of /proc/cpuinfo (x86
 * "flags" or ARM "Features"), the kernel OpenBLAS runs (NULL: no OpenBLAS),
 * OPENBLAS_CORETYPE as the user set it (NULL or "" if unset), and whether
 * the library is a DYNAMIC_ARCH build (only those read OPENBLAS_CORETYPE). */
void titan_blas_choose(const char *flags, const char *current, const char *user, bool dynamic,
		       struct titan_blas_choice *c);
/* The tools that run GEMMs call these first in main, with the untouched
 * argv: titan_blas_select_env sets OPENBLAS_CORETYPE (and a marker) when
 * titan's choice differs from OpenBLAS's and returns true; the process
 * must then re-execute itself for OpenBLAS to read it: titan_blas_reexec
 * (execv of /proc/self/exe; on failure it undoes the variables and goes on
 * with OpenBLAS's kernel, which titan_blas_choice then reports).  In the
 * re-executed process the marker and OPENBLAS_CORETYPE are removed again
 * (the library has read them; children choose for themselves). */
bool titan_blas_select_env(void);
void titan_blas_reexec(char **argv);
/* This process's choice (tools that do not re-execute: what the GEMM tools
 * would run). */
const struct titan_blas_choice *titan_blas_choice(void);
/* "OpenBLAS SkylakeX kernel (chosen by titan from the CPU flags; OpenBLAS
 * 0.3.21 picked Prescott)", "... (set by OPENBLAS_CORETYPE)", "...
 * (OpenBLAS's own choice)"; returns buf. */
const char *titan_blas_describe(char *buf, size_t n);
/* When the running kernel is slower than the CPU allows: the warning (the
 * speed lost and the fix) in buf, and true. */
bool titan_blas_warning(char *buf, size_t n);
/* The same for a given choice and OpenBLAS version ("0.3.21", or NULL). */
const char *titan_blas_format(const struct titan_blas_choice *c, const char *version, char *buf,
			      size_t n);
bool titan_blas_warning_for(const struct titan_blas_choice *c, char *buf, size_t n);
/* Calls be->ops->release; NULL-safe. */
void titan_backend_release(struct titan_backend *be);
/* The arguments of buf_copy_rows as every backend checks them: 0, or
 * TITAN_E_INVALID naming the numbers (negative sizes or offsets, a stride
 * below the width). */
int titan_buf_copy_rows_check(int64_t dst_off, int64_t dst_stride, int64_t src_off,
			      int64_t src_stride, int64_t rows, int64_t width);
/* The multi-tensor ops as loops over the per-tensor ones, called through
 * be->ops (so a wrapping table sees every sumsq and adamw_step): the CPU
 * backend's and the measure backend's sumsq_multi and adamw_multi.  And
 * the check of a span table every backend applies: 0, or TITAN_E_INVALID
 * naming `op` and the tensor. */
int titan_sumsq_multi_loop(struct titan_backend *be, double *out, const float *base,
			   const struct titan_tensor_span *spans, int n);
int titan_adamw_multi_loop(struct titan_backend *be, float *p, float *m, float *v,
			   const float *g, const struct titan_tensor_span *spans, int n,
			   const struct titan_adamw_hparams *hp, int64_t step, float grad_mul);
int titan_tensor_spans_check(const char *op, const struct titan_tensor_span *spans, int n);
/* The sizes of a vocabulary-parallel op as every backend checks them: 0,
 * or TITAN_E_INVALID naming the op when one is negative. */
int titan_vocab_part_check(const char *op, int64_t a, int64_t b, int64_t c);

/* Llama 3.1 RoPE frequency scaling (torchtitan RoPEScalingArgs). */
struct titan_rope_scaling {
	double factor;                 /* 8 */
	double low_freq_factor;        /* 1 */
	double high_freq_factor;       /* 4 */
	double original_max_position;  /* 8192 */
};

/* torchtitan's precompute_freqs_cis as a host table freqs[T][D/2][2] =
 * (cos, sin) (the memory of its complex64 tensor), float arithmetic as
 * PyTorch does it:
 *   f_i = 1 / theta^((2i)/D)       (float; the power correctly rounded)
 *   with scaling (NULL = none): wl = 2π/f;  wl > orig/low: f/factor;
 *     orig/high <= wl <= orig/low: s = (orig/wl − low)/(high − low),
 *     f = (1−s)·f/factor + s·f;  else f
 *   angle = float(t)·f_i, (cosf, sinf).
 * PyTorch's vectorised pow may differ from the correctly rounded power in
 * the last bit of some f_i.  TITAN_E_INVALID for odd or non-positive D,
 * seq < 0 or theta <= 0. */
int titan_rope_freqs(float *freqs, int64_t seq, int64_t head_dim,
		     double theta, const struct titan_rope_scaling *scaling);

/* DeepSeek-V3's YaRN RoPE (torchtitan's ComplexRoPE with scaling "yarn",
 * _yarn_inv_freq with truncate): the same table with, when factor > 1,
 *   low = max(floor(c(beta_fast)), 0), high = min(ceil(c(beta_slow)), D−1)
 *   (c(r) = D·ln(orig/(2πr)) / (2 ln theta); high += 0.001 if equal),
 *   ramp_i = clamp((i − low)/(high − low), 0, 1),
 *   f_i = f_i/factor·ramp_i + f_i·(1 − ramp_i)  (float). */
int titan_rope_freqs_yarn(float *freqs, int64_t seq, int64_t head_dim, double theta,
			  double factor, double beta_fast, double beta_slow,
			  int64_t original_seq_len);

#ifdef __cplusplus
}
#endif
#endif
