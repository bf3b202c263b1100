/*
 * tp.h — private to lib/train: the sequence/tensor-parallel moves the
 * Llama model's block math calls (tp.c), torchtitan's Llama plan with
 * sequence parallelism.  The residual stream and the norms' statistics
 * hold this rank's nl of a microbatch's n tokens; the norms' outputs are
 * all-gathered to n tokens before the column-parallel linears (wq, wk,
 * wv, w1, w3, output), and the row-parallel linears' partial sums (wo,
 * w2, the embedding) reduce-scattered back to nl.  Two implementations:
 * the identity (one rank: nl = n, nothing moves, the ops are the
 * backend's) and TP over a group.  Each gives the bits the code before
 * it gave: the same backend calls in the same order.
 */
#ifndef TITAN_TRAIN_TP_H
#define TITAN_TRAIN_TP_H

#include <stdbool.h>
#include <stdint.h>

#include "titan/core.h"
#include "titan/train.h"
#include "titan/model.h"

struct titan_backend;
struct titan_comm;
struct titan_sp;

struct titan_sp_ops {
	/* xn[n,C] = RMSNorm(x)·w of the nl rows x (1/rms of them in rstd),
	 * all-gathered */
	int (*norm)(struct titan_sp *sp, float *xn, float *rstd, const float *x, const float *w,
		    float eps, const char *what);
	/* y[nl,C] = res + in[n,k]·w[k,C] (row-parallel: this rank's rows of
	 * the group's sum) */
	int (*linear_residual)(struct titan_sp *sp, float *y, const float *res, const float *in,
			       const float *w, int64_t k, const char *what);
	/* backward: *full = the gradient of every token from this rank's
	 * rows loc (identity: loc itself), and *loc = this rank's rows of
	 * the group's sum of full (identity: full) */
	int (*gather_grad)(struct titan_sp *sp, const float **full, const float *loc,
			   const char *what);
	int (*scatter_grad)(struct titan_sp *sp, const float **loc, const float *full,
			    const char *what);
	/* tok_embeddings (vocabulary rows [v0, v0 + V) of w) of the n ids into
	 * x0[nl,C]; backward: their gradient from dx0[nl,C] added to dw */
	int (*embedding_fwd)(struct titan_sp *sp, float *x0, const uint32_t *ids, const float *w);
	int (*embedding_bwd)(struct titan_sp *sp, float *dw, const uint32_t *ids,
			     const float *dx0);
	/* The fused classifier + cross-entropy on h[n,C] (backend
	 * classifier_ce's contract; dh is this rank's partial sum) */
	int (*classifier_ce)(struct titan_sp *sp, double *loss_sum, int64_t *n_valid, float *dh,
			     float *dw, const float *h, const float *w, const int32_t *labels,
			     float grad_scale);
	/* Once per step: the replicated parameters' (the norms') gradients
	 * summed over the group; in the gradient norm's per-parameter sums
	 * of squares, the replicated ones counted once and the sums reduced
	 * over the group.  Nothing for the identity. */
	int (*reduce_grads)(struct titan_sp *sp, const struct titan_param_table *t,
			    const struct titan_param_arena *grads);
	int (*reduce_sumsq)(struct titan_sp *sp, const struct titan_param_table *t,
			    double *sumsq);
};

struct titan_sp {
	const struct titan_sp_ops *ops;
	struct titan_backend *be;
	struct titan_comm *comm;  /* the TP group; NULL: the identity */
	int rank, size;
	int64_t n, nl, C;         /* tokens of a microbatch, of this rank; model dim */
	int64_t vocab, V, v0;     /* vocabulary; this rank's rows [v0, v0 + V) */
	int64_t ce_chunk;
	bool loss_parallel;
	/* TP scratch: [nl,C], [n,C], [n,C], [nl,C]; the loss's logits
	 * [chunk,V], gathered, full, row max and sums */
	float *xn_loc, *part, *dfull, *dxn_loc;
	float *cz, *czg, *czf, *cmx;
	double *cst;
};

/* A MoE block under TP (moe.h): y[nl,C] = res + this rank's rows of the
 * group's sum of sp->part [n,C], where the caller put its partial sums.
 * Only for TP over a group (sp->comm). */
int titan_sp_partial_residual(struct titan_sp *sp, float *y, const float *res, const char *what);

/* Allocation of the scratch: `buf(ctx, nfloats, tag, role)` (role: the
 * model's buffer plan row, titan/train.h), NULL when out of memory; the
 * caller frees. */
typedef float *(*titan_sp_buf_fn)(void *ctx, int64_t nfloats, enum titan_mem_tag tag,
				   enum titan_buf_role role);

/* The identity over n tokens, or TP over `comm` (NULL or one rank: the
 * identity) with nl = n / size tokens per rank (the caller checked that
 * it divides) and vocabulary rows [v0, v0 + V).  TITAN_E_NOMEM. */
int titan_sp_init(struct titan_sp *sp, struct titan_backend *be, struct titan_comm *comm,
		  int64_t n, int64_t C, int64_t vocab, int64_t v0, int64_t V, int64_t ce_chunk,
		  bool loss_parallel, titan_sp_buf_fn buf, void *ctx);

#endif
