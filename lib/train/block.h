/*
 * block.h — private to lib/train and lib/generate: the forward math of one
 * Llama 3 block (block.c), the one statement of it that training
 * (llama.c) and generation (lib/generate) both run.  It is plain: explicit
 * weights, input, output and activation pointers, and the layout as the
 * injected interfaces — the sequence/tensor-parallel moves (tp.h, the
 * identity on one rank) and the attention implementation (cp.h: local,
 * CP all-gather, CP ring, or the generator's KV cache, attn_kv.c).
 */
#ifndef TITAN_TRAIN_BLOCK_H
#define TITAN_TRAIN_BLOCK_H

#include <stdint.h>

#include "titan/model.h"
#include "titan/ops.h"
#include "moe.h"

struct titan_cp;
struct titan_sp;

/* What one block keeps for backward (the generator points several of
 * these at the same buffers: it keeps nothing). */
struct acts {
	float *xn1, *rstd1;  /* attention_norm output [N,C], 1/rms [N] */
	float *q, *k, *v;    /* after RoPE: [N,H*D], [N,Hkv*D] x2 */
	float *att, *lse;    /* attention output [N,H*D], log-sum-exp [B,H,T] */
	float *h;            /* residual after attention [N,C] */
	float *xn2, *rstd2;  /* ffn_norm output, 1/rms */
	float *a, *b, *g;    /* w1 x, w3 x, silu(a)*b [N,F] */
	/* QK-norm (qk_norm models; NULL otherwise): wq x and wk x before
	 * their per-head RMSNorm, and its 1/rms per token and head */
	float *q0, *k0;      /* [N,H*D], [N,Hkv*D] */
	float *rstdq, *rstdk;/* [N*H], [N*Hkv] */
	struct moe_acts moe; /* a MoE block's feed-forward (moe.h) */
	/* multi-head latent attention (deepseek_v3; NULL otherwise): q, k, v
	 * above are [N,H,D] with D = nope + rope (v zero past v_head_dim), q
	 * already times the YaRN mscale² so that the kernel's 1/sqrt(D) is
	 * MLA's softmax scale, att [N,H,D] the kernel's output */
	struct mla_acts {
		float *cq0, *rstdcq, *cq; /* wq_a x, 1/rms, q_norm(wq_a x) [N,Qr] (q_lora_rank) */
		float *kv0;          /* wkv_a x [N,R+rope] */
		float *kvl, *rstdkv; /* its latent part [N,R] (contiguous), 1/rms */
		float *kvn;          /* kv_norm(latent) [N,R] */
		float *kvb;          /* wkv_b kvn [N,H*(nope+v)] */
		float *attv;         /* att without the padding [N,H*v], wo's input */
	} mla;
};

/* The ops of a block's forward, in order (titan_block_fwd runs a list of
 * them: the whole block, or what a recomputation redoes). */
enum fwd_op {
	F_NORM1, F_WQ, F_WK, F_WV, F_QNORM, F_KNORM, F_ROPE_Q, F_ROPE_K, F_ATTENTION, F_WO,
	F_NORM2, F_W1, F_W3, F_SWIGLU, F_W2, F_NOPS
};

/* A block's weights by role (TITAN_PARAM_WQ .. TITAN_PARAM_K_NORM, a
 * MoE block's TITAN_PARAM_MOE_* in place of W1..W3; the others unused),
 * this rank's shards of them under TP.  Q_NORM and K_NORM are NULL without
 * QK-norm: F_QNORM and F_KNORM do nothing then, and wq, wk write q, k
 * directly. */
struct block_w {
	const float *w[TITAN_PARAM_NROLES];
};

/* The block's geometry on this rank and its injected parts. */
struct titan_block {
	struct titan_backend *be;
	struct titan_sp *sp;     /* residual-stream moves around the norms, wo, w2 */
	struct titan_cp *attn;   /* attention: attn->attn->fwd */
	const float *freqs;      /* RoPE rows of the tokens of a row [T, D] */
	bool nope;               /* no RoPE in this block (Llama 4's NoPE layers) */
	/* multi-head latent attention (NULL: none): its dims, the YaRN RoPE
	 * rows of its rope part [T, rope] and q's factor (mscale²) */
	const struct titan_mla_dims *mla;
	const float *mla_freqs;
	float mla_qscale;
	int64_t n;               /* tokens after the norms' gather */
	int64_t B, T;            /* rows, tokens of a row (RoPE) */
	int64_t C, F, H, Hkv, D; /* model dim; this rank's FFN hidden, heads, kv heads; head dim */
	float eps;
	/* a MoE block (moe.h; NULL: the dense feed-forward), and where its
	 * forward counts the tokens per expert (NULL: not counted) */
	const struct titan_moe *moe;
	int64_t *moe_tokens;
};

/* Block forward: the ops `ops` in order, reading the block input x and
 * writing its output y (x[l], x[l + 1]; they may be one buffer when the
 * activations' h is too, as the generator's), keeping the activations in
 * `a`.  Error: an op's, or TITAN_E_INVALID for an op outside the list. */
int titan_block_fwd(const struct titan_block *k, const struct block_w *w, const float *x,
		    float *y, struct acts *a, const enum fwd_op *ops, int nops);

/* MLA's host-side moves (block.c; the CPU backend's memory): RoPE of the
 * rope part of each of nh heads of `hd` dims from `off` on, for the n
 * tokens of B rows of T (freqs [T, rope/2, 2], the inverse rotation with
 * `inverse`), and scaled by `scale`. */
void titan_mla_rope(float *x, const float *freqs, int64_t n, int64_t T, int64_t nh, int64_t hd,
		    int64_t off, int64_t rope, float scale, bool inverse);

/* The whole block, fwd_all's F_NOPS ops. */
extern const enum fwd_op titan_block_fwd_all[F_NOPS];

#endif
