/*
 * block.c — one Llama 3 block's forward (block.h): torchtitan's
 * TransformerBlock.forward, h = x + attention(attention_norm(x)),
 * y = h + feed_forward(ffn_norm(h)), with Qwen3's QK-norm when the block
 * has q_norm/k_norm weights, on the backend's ops with the
 * sequence/tensor-parallel moves and the attention injected.
 */
#include "block.h"

#include "cp.h"
#include "tp.h"

const enum fwd_op titan_block_fwd_all[F_NOPS] = {
	F_NORM1, F_WQ, F_WK, F_WV, F_QNORM, F_KNORM, F_ROPE_Q, F_ROPE_K, F_ATTENTION, F_WO,
	F_NORM2, F_W1, F_W3, F_SWIGLU, F_W2,
};

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
	case F_WQ: /* into q0 with QK-norm, which then writes q */
		return op->matmul_fwd(be, W[TITAN_PARAM_Q_NORM] ? a->q0 : a->q, a->xn1,
				      W[TITAN_PARAM_WQ], n, C, q, false);
	case F_WK:
		return op->matmul_fwd(be, W[TITAN_PARAM_K_NORM] ? a->k0 : a->k, a->xn1,
				      W[TITAN_PARAM_WK], n, C, kv, false);
	case F_WV:
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
		return op->rope_fwd(be, a->q, k->freqs, k->B, k->T, k->H, D);
	case F_ROPE_K:
		return op->rope_fwd(be, a->k, k->freqs, k->B, k->T, k->Hkv, D);
	case F_ATTENTION:
		return k->attn->attn->fwd(k->attn, a->att, a->lse, a->q, a->k, a->v);
	case F_WO:
		return sp->ops->linear_residual(sp, a->h, x, a->att, W[TITAN_PARAM_WO], q,
						"tp attention output");
	/* feed-forward: y = h + w2(silu(w1 xn2) * w3 xn2), xn2 = norm(h) */
	case F_NORM2:
		return sp->ops->norm(sp, a->xn2, a->rstd2, a->h, W[TITAN_PARAM_FFN_NORM], k->eps,
				     "tp ffn input");
	/* a MoE block: the whole of moe(xn2) at F_W1, y = h + moe(xn2) */
	case F_W1:
		if (k->moe)
			return titan_moe_fwd(k->moe, &(struct moe_w){
				W[TITAN_PARAM_MOE_W1], W[TITAN_PARAM_MOE_W2], W[TITAN_PARAM_MOE_W3],
				W[TITAN_PARAM_MOE_GATE], W[TITAN_PARAM_MOE_SHARED_W1],
				W[TITAN_PARAM_MOE_SHARED_W2], W[TITAN_PARAM_MOE_SHARED_W3],
				W[TITAN_PARAM_MOE_EXPERT_BIAS]}, a->xn2, a->h, y, &a->moe,
				k->moe_tokens);
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
