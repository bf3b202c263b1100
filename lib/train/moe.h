/*
 * moe.h — private to lib/train: torchtitan's mixture-of-experts feed-
 * forward (models/moe/moe.py: TokenChoiceTopKRouter, TokenReorderer,
 * GroupedExperts, the shared FeedForward), the variant of a block's
 * feed-forward that any model family turns on per layer (titan/model.h's
 * titan_model_layer_is_moe).
 *
 * One MoE forward: the router's gate [E, C] in fp32, sigmoid or softmax
 * scores, top-k of scores + expert_bias (the bias only chooses; the gate
 * values are the unbiased scores, then route_norm and route_scale); the
 * token slots sorted by expert (a stable counting sort: torchtitan's
 * stable argsort); the experts as grouped GEMMs, each expert a matmul over
 * its contiguous rows (no per-token loop, no capacity padding); the
 * outputs combined with the gate values (before the experts when
 * score_before_experts) and the shared experts' SwiGLU added.
 *
 * Dispatch and combine go through struct titan_moe_dispatch_ops: the local one
 * (one rank holds every expert) permutes rows; expert parallelism swaps in
 * one that sends each expert's rows to its rank by all-to-all-v (counts
 * first) and back, with the same expert GEMMs between.  What EP changes
 * here: dispatch fills xin with the rows received for this rank's experts
 * [e0, e0 + E/ep) and their counts (moe_acts gains the received layout),
 * the expert loops run over those, combine and the two backward moves are
 * the reverse all-to-alls; the router, the sort and the shared experts
 * stay.  The stacked experts are rows of dim 0 (one expert each), so the
 * parameter table gives an EP rank only its experts' rows (titan/model.h
 * titan_param_table_opts ep_*), FSDP-sharded over its efsdp peers.
 * Under EP x TP (torchtitan's ETP 1) a TP rank routes only its sequence
 * shard of the gathered tokens (titan_moe r0, nr) to whole experts.
 *
 * The routing, sort and combine loops run on host memory: the CPU
 * backend's (a MoE model on CUDA is refused at configuration).
 */
#ifndef TITAN_TRAIN_MOE_H
#define TITAN_TRAIN_MOE_H

#include <stdint.h>

#include "titan/dist.h"
#include "titan/model.h"
#include "titan/ops.h"

/* What one MoE block keeps for backward. N = tokens (routed ones:
 * titan_moe_routed), K = top_k, R = N·K routed rows, Fm = an expert's
 * hidden size, Fs = the shared experts' (of all n tokens). */
struct moe_acts {
	float *scores;   /* [N, E] router scores (after sigmoid / softmax) */
	float *topw;     /* [N, K] gate values (after route_norm, route_scale) */
	int32_t *topi;   /* [N, K] chosen experts */
	int32_t *perm;   /* [R] slot (token·K + k) of each expert-sorted row */
	int32_t *pos;    /* [R] row of each slot: perm's inverse */
	int32_t *counts; /* [E] rows per expert */
	float *xin;      /* [R, C] expert inputs (scaled when score_before_experts) */
	float *a, *b, *g;/* [R, Fm] w1 x, w3 x, silu(a)·b */
	float *yout;     /* [R, C] expert outputs */
	float *sa, *sb, *sg; /* [N, Fs] the shared experts' */
	/* expert parallelism only (NULL otherwise): the rows at this rank's
	 * experts after dispatch (xin, a, b, g, yout then hold up to R·ep rows,
	 * titan_moe_expert_rows), grouped by local expert, and what the
	 * all-to-alls moved */
	int32_t *ecounts; /* [E/ep] rows per local expert */
	int64_t erows;    /* their sum */
	int64_t *ep_n;    /* [ep·E/ep] rows from rank p for local expert j, [p·E/ep + j] */
	int64_t *ep_sc;   /* [ep] rows sent to rank p (its experts' share of counts) */
	int64_t *ep_rc;   /* [ep] rows received from rank p */
	float *yret;      /* [R, C] the expert outputs of this rank's slots, back */
};

/* Backward scratch, shared by every MoE block. */
struct moe_scratch {
	float *drow;     /* [R, C] dL/d expert output, then dL/d expert input */
	float *dg;       /* [R, Fm] */
	float *dlogit;   /* [N, E] */
	float *dtopw;    /* [N, K] */
};

/* The weights of one MoE block, by role (TITAN_PARAM_MOE_*). */
struct moe_w {
	const float *w1, *w2, *w3, *gate, *sw1, *sw2, *sw3, *bias; /* bias may be NULL */
};
struct moe_dw {
	float *w1, *w2, *w3, *gate, *sw1, *sw2, *sw3; /* NULL: not wanted */
};

struct titan_moe;

/* Dispatch / combine: the expert-sorted rows to the experts and back.
 * Local: xin[r] = x[token of perm[r]] (times its gate value when
 * score_before_experts); combine adds each slot's row to its token. */
struct titan_moe_dispatch_ops {
	int (*dispatch)(const struct titan_moe *m, struct moe_acts *a, const float *x);
	int (*combine)(const struct titan_moe *m, const struct moe_acts *a, float *y);
	/* backward: dL/d expert output rows from dy (and the gate values'
	 * gradient when the scores scale the outputs), then dL/dx from the
	 * expert input rows (and the gate values' gradient otherwise) */
	int (*combine_bwd)(const struct titan_moe *m, const struct moe_acts *a,
			   const float *dy, float *drow, float *dtopw);
	int (*dispatch_bwd)(const struct titan_moe *m, const struct moe_acts *a,
			    const float *drow, const float *x, float *dx, float *dtopw);
};
extern const struct titan_moe_dispatch_ops titan_moe_dispatch_local;

/* Expert parallelism (titan_moe_dispatch_ep): rank `rank` of the `comm`
 * of ep ranks holds experts [rank·E/ep, (rank + 1)·E/ep), whole; the
 * weights given to titan_moe_fwd / _bwd are those rows only.  sbuf
 * [R, C] and rbuf [R·ep, C] are scratch shared by every MoE block. */
struct titan_moe_ep {
	struct titan_comm *comm;
	int64_t ep, rank;
	float *sbuf, *rbuf;
	/* the expert at row 0 of the w1, w2, w3 given (and of dw's): rank·E/ep
	 * when only this rank's rows are given, 0 for the whole stacked tensors */
	int64_t w_expert0;
};

/* One MoE block's geometry and injected parts. */
struct titan_moe {
	struct titan_backend *be;
	const struct titan_moe_dispatch_ops *dispatch;
	const struct titan_moe_dims *d;
	int64_t n, C;        /* tokens, model dim */
	const struct titan_moe_ep *ep; /* NULL: every expert here (local) */
	/* Tensor parallelism (torchtitan's TP of GroupedExperts, no EP): 0 or
	 * 1 none; else each rank holds inter_dim / tp of every expert's and of
	 * the shared experts' hidden dim (w1/w3 rows, w2 columns), x is every
	 * token (gathered), the router runs replicated, and the output is a
	 * partial sum the caller reduce-scatters. */
	int64_t tp;
	/* EP x TP (torchtitan's ETP 1: the tokens split over the TP ranks
	 * before routing): the router and the routed experts (whole, ep set)
	 * take only the nr tokens at rows [r0, r0 + nr) of x, this TP rank's
	 * sequence shard, and add their outputs to those rows of y (so the
	 * partial sum the caller reduce-scatters holds them once); the shared
	 * experts stay TP-split over all n.  nr 0: every token routed here. */
	int64_t r0, nr;
};

/* The tokens one rank routes: nr under EP x TP, else n. */
static inline int64_t titan_moe_routed(const struct titan_moe *m)
{
	return m->nr > 0 ? m->nr : m->n;
}

/* Expert parallelism: tokens to the ranks of their experts by
 * all_to_all_v (the counts per expert first, then the rows), back the
 * same way; backward the reverse moves.  Needs m->ep and moe_acts' EP
 * members. */
extern const struct titan_moe_dispatch_ops titan_moe_dispatch_ep;

/* Rows the experts of one rank may get: R (local) or R·ep (EP: every
 * rank may route all its slots here); xin, a, b, g, yout and the
 * scratch drow, dg hold that many. */
static inline int64_t titan_moe_expert_rows(const struct titan_moe *m)
{
	return titan_moe_routed(m) * m->d->top_k * (m->ep ? m->ep->ep : 1);
}

/* An expert's hidden size here (TP without EP: a slice), and the shared
 * experts' (TP: a slice). */
static inline int64_t titan_moe_expert_hidden(const struct titan_moe *m)
{
	return m->d->inter_dim / (m->tp > 1 && !m->ep ? m->tp : 1);
}

static inline int64_t titan_moe_shared_hidden(const struct titan_moe *m)
{
	return m->d->inter_dim / (m->tp > 1 ? m->tp : 1) * m->d->num_shared_experts;
}

/* y = h + moe(x) (h NULL: y = moe(x)), keeping the activations in `a`;
 * `tokens` (NULL: not counted, e.g. a recomputation) gets the rows per
 * expert added. */
int titan_moe_fwd(const struct titan_moe *m, const struct moe_w *w, const float *x,
		  const float *h, float *y, struct moe_acts *a, int64_t *tokens);
/* The split backward's (zero-bubble) stash of what titan_moe_wgrad reads
 * besides the activations: w2's output-gradient rows at this rank's
 * experts [expert rows, C] and the router logits' gradient [routed, E]. */
struct moe_keep {
	float *drow, *dlogit;
};

/* dx = dL/dx (overwritten) from dy = dL/dy; the weight gradients added to
 * dw's non-NULL members.  a's SwiGLU inputs are overwritten (by their
 * gradients: a, b hold dL/d(w1 x), dL/d(w3 x), sa, sb the shared
 * experts').  keep (NULL: none) gets the operands titan_moe_wgrad needs. */
int titan_moe_bwd(const struct titan_moe *m, const struct moe_w *w, struct moe_dw *dw,
		  const float *x, const float *dy, float *dx, struct moe_acts *a,
		  const struct moe_scratch *s, const struct moe_keep *keep);
/* The split backward's weight pass: the weight gradients titan_moe_bwd
 * skipped (its dw NULL), added to dw's (every member set), from the
 * activations `a` after titan_moe_bwd (xin, a, b, g, sa, sb, sg and the
 * counts), its input x, its dy and the kept `k`.  No communication: under
 * EP `a` and k->drow hold the rows this rank's experts computed. */
int titan_moe_wgrad(const struct titan_moe *m, struct moe_dw *dw, const float *x,
		    const float *dy, const struct moe_acts *a, const struct moe_keep *k);

/* torchtitan's _update_expert_bias for one layer: with t = the tokens per
 * expert of the step, bias += coeff · (sign(mean t − t) − mean of that). */
void titan_moe_update_bias(float *bias, const int64_t *tokens, int64_t E, double coeff);

#endif
