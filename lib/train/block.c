/*
 * block.c — one Llama 3 block's forward (block.h): torchtitan's
 * TransformerBlock.forward, h = x + attention(attention_norm(x)),
 * y = h + feed_forward(ffn_norm(h)), with Qwen3's QK-norm when the block
 * has q_norm/k_norm weights, on the backend's ops with the
 * sequence/tensor-parallel moves and the attention injected.
 */
#include "block.h"

#include <string.h>

#include "cp.h"
#include "tp.h"

const enum fwd_op titan_block_fwd_all[F_NOPS] = {
	F_NORM1, F_WQ, F_WK, F_WV, F_QNORM, F_KNORM, F_ROPE_Q, F_ROPE_K, F_ATTENTION, F_WO,
	F_NORM2, F_W1, F_W3, F_SWIGLU, F_W2,
};

void titan_mla_rope(float *x, const float *freqs, int64_t n, int64_t T, int64_t nh, int64_t hd,
		    int64_t off, int64_t rope, float scale, bool inverse)
{
	for (int64_t i = 0; i < n; i++) {
		const float *fc = freqs + (i % T) * rope;

		for (int64_t h = 0; h < nh; h++) {
			float *p = x + (i * nh + h) * hd;

			for (int64_t j = 0; j < rope; j += 2) {
				float a = p[off + j], b = p[off + j + 1], c = fc[j], s = fc[j + 1];

				/* (a + ib)(c ± is), as the rope kernels */
				p[off + j] = inverse ? a * c + b * s : a * c - b * s;
				p[off + j + 1] = inverse ? b * c - a * s : a * s + b * c;
			}
			if (scale != 1.0f)
				for (int64_t j = 0; j < hd; j++)
					p[j] *= scale;
		}
	}
}

/* torchtitan's deepseek_v3 Attention up to the attention output, at
 * F_WQ: q = wq x (or wq_b q_norm(wq_a x)) [N,H,nope+rope], its rope part
 * rotated; kv = wkv_a x split into the latent [R] and k_pe [rope] (rotated,
 * one for all heads); wkv_b kv_norm(latent) gives k_nope and v per head;
 * k = [k_nope, k_pe].  v is padded with zeros to the q/k head size, and
 * q scaled by mscale², for the attention kernel (1/sqrt(D)); attv is the
 * output without the padding, wo's input (F_WO). */
static int mla_fwd(const struct titan_block *k, const float *const *W, struct acts *a)
{
	const struct titan_backend_ops *op = k->be->ops;
	struct titan_backend *be = k->be;
	const struct titan_mla_dims *m = k->mla;
	const int64_t n = k->n, C = k->C, H = k->H, D = k->D, R = m->kv_lora_rank;
	const int64_t Q = m->q_lora_rank, nope = m->qk_nope_head_dim, rope = m->qk_rope_head_dim;
	const int64_t V = m->v_head_dim, KA = R + rope, KB = nope + V;
	struct mla_acts *x = &a->mla;
	int rc;

	if (Q > 0) {
		if ((rc = op->matmul_fwd(be, x->cq0, a->xn1, W[TITAN_PARAM_MLA_WQ_A], n, C, Q,
					 false)) < 0 ||
		    (rc = op->rmsnorm_fwd(be, x->cq, x->rstdcq, x->cq0, W[TITAN_PARAM_MLA_Q_NORM],
					  n, Q, k->eps)) < 0 ||
		    (rc = op->matmul_fwd(be, a->q, x->cq, W[TITAN_PARAM_MLA_WQ_B], n, Q, H * D,
					 false)) < 0)
			return rc;
	} else if ((rc = op->matmul_fwd(be, a->q, a->xn1, W[TITAN_PARAM_WQ], n, C, H * D,
					false)) < 0) {
		return rc;
	}
	titan_mla_rope(a->q, k->mla_freqs, n, k->T, H, D, nope, rope, k->mla_qscale, false);
	if ((rc = op->matmul_fwd(be, x->kv0, a->xn1, W[TITAN_PARAM_MLA_WKV_A], n, C, KA,
				 false)) < 0)
		return rc;
	titan_mla_rope(x->kv0, k->mla_freqs, n, k->T, 1, KA, R, rope, 1.0f, false);
	for (int64_t i = 0; i < n; i++)
		memcpy(x->kvl + i * R, x->kv0 + i * KA, (size_t)R * sizeof(float));
	if ((rc = op->rmsnorm_fwd(be, x->kvn, x->rstdkv, x->kvl, W[TITAN_PARAM_MLA_KV_NORM], n, R,
				  k->eps)) < 0 ||
	    (rc = op->matmul_fwd(be, x->kvb, x->kvn, W[TITAN_PARAM_MLA_WKV_B], n, R, H * KB,
				 false)) < 0)
		return rc;
	for (int64_t i = 0; i < n; i++)
		for (int64_t h = 0; h < H; h++) {
			const float *src = x->kvb + (i * H + h) * KB;
			float *kk = a->k + (i * H + h) * D, *vv = a->v + (i * H + h) * D;

			memcpy(kk, src, (size_t)nope * sizeof(float));
			memcpy(kk + nope, x->kv0 + i * KA + R, (size_t)rope * sizeof(float));
			memcpy(vv, src + nope, (size_t)V * sizeof(float));
			memset(vv + V, 0, (size_t)(D - V) * sizeof(float));
		}
	/* the CPU backend's ops are done when they return (MLA runs there only) */
	if ((rc = k->attn->attn->fwd(k->attn, a->att, a->lse, a->q, a->k, a->v)) < 0)
		return rc;
	for (int64_t i = 0; i < n * H; i++)
		memcpy(x->attv + i * V, a->att + i * D, (size_t)V * sizeof(float));
	return 0;
}

/* One op.  With TP the residual stream (x, h, y) and the norms'
 * statistics hold this rank's tokens, xn1/xn2 are gathered to all n
 * tokens, and wo and w2 are row-parallel (their partial sums reduce-
 * scattered back). */
static int fwd_op(const struct titan_block *k, const struct block_w *w, const float *x, float *y,
		  struct acts *a, enum fwd_op o)
{
	const struct titan_backend_ops *op = k->be->ops;
	struct titan_backend *be = k->be;
	struct titan_sp *sp = k->sp;
	const int64_t n = k->n, C = k->C, F = k->F, D = k->D, q = k->H * D, kv = k->Hkv * D;
	const float *const *W = w->w;

	switch (o) {
	/* attention: h = x + wo(attn(rope(wq xn1), rope(wk xn1), wv xn1)), xn1 = norm(x) */
	case F_NORM1:
		return sp->ops->norm(sp, a->xn1, a->rstd1, x, W[TITAN_PARAM_ATTENTION_NORM], k->eps,
				     "tp attention input");
	case F_WQ: /* into q0 with QK-norm, which then writes q; MLA's whole attention */
		if (k->mla)
			return mla_fwd(k, W, a);
		return op->matmul_fwd(be, W[TITAN_PARAM_Q_NORM] ? a->q0 : a->q, a->xn1,
				      W[TITAN_PARAM_WQ], n, C, q, false);
	case F_WK:
		if (k->mla) /* F_WK .. F_ATTENTION: done by MLA's F_WQ */
			return 0;
		return op->matmul_fwd(be, W[TITAN_PARAM_K_NORM] ? a->k0 : a->k, a->xn1,
				      W[TITAN_PARAM_WK], n, C, kv, false);
	case F_WV:
		if (k->mla)
			return 0;
		return op->matmul_fwd(be, a->v, a->xn1, W[TITAN_PARAM_WV], n, C, kv, false);
	/* Qwen3's QK-norm: RMSNorm over head_dim of each token's heads (rows of
	 * D), before RoPE; local to a rank's heads under TP */
	case F_QNORM:
		return W[TITAN_PARAM_Q_NORM] ? op->rmsnorm_fwd(be, a->q, a->rstdq, a->q0,
							       W[TITAN_PARAM_Q_NORM], n * k->H, D,
							       k->eps)
					     : 0;
	case F_KNORM:
		return W[TITAN_PARAM_K_NORM] ? op->rmsnorm_fwd(be, a->k, a->rstdk, a->k0,
							       W[TITAN_PARAM_K_NORM], n * k->Hkv, D,
							       k->eps)
					     : 0;
	case F_ROPE_Q:
		if (k->mla || k->nope)
			return 0;
		return op->rope_fwd(be, a->q, k->freqs, k->B, k->T, k->H, D);
	case F_ROPE_K:
		if (k->mla || k->nope)
			return 0;
		return op->rope_fwd(be, a->k, k->freqs, k->B, k->T, k->Hkv, D);
	case F_ATTENTION:
		if (k->mla)
			return 0;
		return k->attn->attn->fwd(k->attn, a->att, a->lse, a->q, a->k, a->v);
	case F_WO:
		if (k->mla)
			return sp->ops->linear_residual(sp, a->h, x, a->mla.attv, W[TITAN_PARAM_WO],
							k->H * k->mla->v_head_dim,
							"tp attention output");
		return sp->ops->linear_residual(sp, a->h, x, a->att, W[TITAN_PARAM_WO], q,
						"tp attention output");
	/* feed-forward: y = h + w2(silu(w1 xn2) * w3 xn2), xn2 = norm(h) */
	case F_NORM2:
		return sp->ops->norm(sp, a->xn2, a->rstd2, a->h, W[TITAN_PARAM_FFN_NORM], k->eps,
				     "tp ffn input");
	/* a MoE block: the whole of moe(xn2) at F_W1, y = h + moe(xn2); under
	 * TP the experts' partial sums (every token) reduce-scattered as w2's */
	case F_W1:
		if (k->moe) {
			const bool tp = sp->comm != NULL;
			int rc = titan_moe_fwd(k->moe, &(struct moe_w){
				W[TITAN_PARAM_MOE_W1], W[TITAN_PARAM_MOE_W2], W[TITAN_PARAM_MOE_W3],
				W[TITAN_PARAM_MOE_GATE], W[TITAN_PARAM_MOE_SHARED_W1],
				W[TITAN_PARAM_MOE_SHARED_W2], W[TITAN_PARAM_MOE_SHARED_W3],
				W[TITAN_PARAM_MOE_EXPERT_BIAS]}, a->xn2, tp ? NULL : a->h,
				tp ? sp->part : y, &a->moe, k->moe_tokens);

			return rc < 0 || !tp ? rc : titan_sp_partial_residual(sp, y, a->h,
									       "tp moe output");
		}
		return op->matmul_fwd(be, a->a, a->xn2, W[TITAN_PARAM_W1], n, C, F, false);
	case F_W3:
		return k->moe ? 0 : op->matmul_fwd(be, a->b, a->xn2, W[TITAN_PARAM_W3], n, C, F, false);
	case F_SWIGLU:
		return k->moe ? 0 : op->swiglu_fwd(be, a->g, a->a, a->b, n * F);
	case F_W2:
		if (k->moe)
			return 0;
		return sp->ops->linear_residual(sp, y, a->h, a->g, W[TITAN_PARAM_W2], F,
						"tp ffn output");
	case F_NOPS:
		break;
	}
	return titan_error(TITAN_E_INVALID, "block forward: no op %d", (int)o);
}

int titan_block_fwd(const struct titan_block *k, const struct block_w *w, const float *x,
		    float *y, struct acts *a, const enum fwd_op *ops, int nops)
{
	int rc;

	for (int i = 0; i < nops; i++)
		if ((rc = fwd_op(k, w, x, y, a, ops[i])) < 0)
			return rc;
	return 0;
}
