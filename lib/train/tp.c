/*
 * tp.c — the sequence/tensor-parallel moves of the Llama model (tp.h):
 * the identity on one rank and torchtitan's TP plan with sequence
 * parallelism over a group, including the vocabulary-parallel embedding
 * and cross-entropy.
 */
#include "tp.h"

#include <stdlib.h>

#include "titan/dist.h"
#include "titan/ops.h"

#define CK(call) do { if ((rc = (call)) < 0) return rc; } while (0)

/* ------------------------------------------------------------ identity */

static int id_norm(struct titan_sp *sp, float *xn, float *rstd, const float *x, const float *w,
		   float eps, const char *what)
{
	(void)what;
	return sp->be->ops->rmsnorm_fwd(sp->be, xn, rstd, x, w, sp->nl, sp->C, eps);
}

static int id_linear_residual(struct titan_sp *sp, float *y, const float *res, const float *in,
			      const float *w, int64_t k, const char *what)
{
	const struct titan_backend_ops *op = sp->be->ops;
	int rc;

	(void)what;
	if (y != res) /* the generator adds in place */
		CK(op->copy(sp->be, y, res, sp->n * sp->C));
	return op->matmul_fwd(sp->be, y, in, w, sp->n, k, sp->C, true);
}

static int id_gather_grad(struct titan_sp *sp, const float **full, const float *loc,
			  const char *what)
{
	(void)sp, (void)what;
	*full = loc;
	return 0;
}

static int id_scatter_grad(struct titan_sp *sp, const float **loc, const float *full,
			   const char *what)
{
	(void)sp, (void)what;
	*loc = full;
	return 0;
}

static int id_embedding_fwd(struct titan_sp *sp, float *x0, const uint32_t *ids, const float *w)
{
	return sp->be->ops->embedding_fwd(sp->be, x0, ids, w, sp->n, sp->vocab, sp->C);
}

static int id_embedding_bwd(struct titan_sp *sp, float *dw, const uint32_t *ids, const float *dx0)
{
	return sp->be->ops->embedding_bwd(sp->be, dw, ids, dx0, sp->n, sp->vocab, sp->C);
}

static int id_classifier_ce(struct titan_sp *sp, double *loss_sum, int64_t *n_valid, float *dh,
			    float *dw, const float *h, const float *w, const int32_t *labels,
			    float gs)
{
	return sp->be->ops->classifier_ce(sp->be, loss_sum, n_valid, dh, dw, h, w, labels, sp->n,
					  sp->C, sp->vocab, gs, sp->ce_chunk);
}

static int id_reduce_grads(struct titan_sp *sp, const struct titan_param_table *t,
			   const struct titan_param_arena *grads)
{
	(void)sp, (void)t, (void)grads;
	return 0;
}

static int id_reduce_sumsq(struct titan_sp *sp, const struct titan_param_table *t,
			   double *sumsq)
{
	(void)sp, (void)t, (void)sumsq;
	return 0;
}

static const struct titan_sp_ops identity = {
	id_norm, id_linear_residual, id_gather_grad, id_scatter_grad, id_embedding_fwd,
	id_embedding_bwd, id_classifier_ce, id_reduce_grads, id_reduce_sumsq,
};

/* ------------------------------------------------- tensor parallelism */

/* full[n,C] = the group's local rows [nl,C] in rank order. */
static int tp_gather(struct titan_sp *sp, float *full, const float *loc, const char *what)
{
	return titan_comm_all_gather(sp->comm, loc, full, (size_t)(sp->nl * sp->C),
				     TITAN_DTYPE_F32, what);
}

/* loc[nl,C] = this rank's rows of the sum over the group of full[n,C]. */
static int tp_scatter(struct titan_sp *sp, float *loc, const float *full, const char *what)
{
	return titan_comm_reduce_scatter(sp->comm, full, loc, (size_t)(sp->nl * sp->C),
					 TITAN_DTYPE_F32, what);
}

static int tp_norm(struct titan_sp *sp, float *xn, float *rstd, const float *x, const float *w,
		   float eps, const char *what)
{
	int rc;

	CK(sp->be->ops->rmsnorm_fwd(sp->be, sp->xn_loc, rstd, x, w, sp->nl, sp->C, eps));
	return tp_gather(sp, xn, sp->xn_loc, what);
}

static int tp_linear_residual(struct titan_sp *sp, float *y, const float *res, const float *in,
			      const float *w, int64_t k, const char *what)
{
	const struct titan_backend_ops *op = sp->be->ops;
	int rc;

	CK(op->matmul_fwd(sp->be, sp->part, in, w, sp->n, k, sp->C, false));
	CK(tp_scatter(sp, y, sp->part, what));
	return op->add(sp->be, y, res, y, sp->nl * sp->C);
}

int titan_sp_partial_residual(struct titan_sp *sp, float *y, const float *res, const char *what)
{
	int rc;

	CK(tp_scatter(sp, y, sp->part, what));
	return sp->be->ops->add(sp->be, y, res, y, sp->nl * sp->C);
}

static int tp_gather_grad(struct titan_sp *sp, const float **full, const float *loc,
			  const char *what)
{
	*full = sp->dfull;
	return tp_gather(sp, sp->dfull, loc, what);
}

static int tp_scatter_grad(struct titan_sp *sp, const float **loc, const float *full,
			   const char *what)
{
	*loc = sp->dxn_loc;
	return tp_scatter(sp, sp->dxn_loc, full, what);
}

/* TP embedding (torchtitan: RowwiseParallel on the vocabulary, output
 * sharded on the sequence): each rank looks up the ids in its rows, zeros
 * for the others, and the sum is reduce-scattered to nl tokens. */
static int tp_embedding_fwd(struct titan_sp *sp, float *x0, const uint32_t *ids, const float *w)
{
	int rc;

	CK(sp->be->ops->embedding_part_fwd(sp->be, sp->part, ids, w, sp->n, sp->v0, sp->V, sp->C));
	return tp_scatter(sp, x0, sp->part, "tp embedding");
}

static int tp_embedding_bwd(struct titan_sp *sp, float *dw, const uint32_t *ids, const float *dx0)
{
	int rc;

	CK(tp_gather(sp, sp->dfull, dx0, "tp embedding grad"));
	return sp->be->ops->embedding_part_bwd(sp->be, dw, ids, sp->dfull, sp->n, sp->v0, sp->V,
					       sp->C);
}

/* Without loss parallelism: the chunk's logits z [cn,V] of every rank
 * all-gathered ([tp][cn][vc], rows widened to vc through zf, the last
 * ranks' padded) and put together as whole rows zf [cn,Vg]. */
static int gather_logits(struct titan_sp *sp, float *z, int64_t cn)
{
	const struct titan_backend_ops *op = sp->be->ops;
	const int64_t V = sp->V, Vg = sp->vocab, vc = (Vg + sp->size - 1) / sp->size;
	int rc;

	CK(op->buf_copy_rows(sp->be, sp->czf, 0, vc, z, 0, V, cn, V));
	CK(titan_comm_all_gather(sp->comm, sp->czf, sp->czg, (size_t)(cn * vc), TITAN_DTYPE_F32,
				 "tp logits"));
	for (int k = 0; k < sp->size; k++) {
		const int64_t c0 = k * vc, nc = c0 + vc <= Vg ? vc : Vg > c0 ? Vg - c0 : 0;

		CK(op->buf_copy_rows(sp->be, sp->czf, c0, Vg, sp->czg, (int64_t)k * cn * vc, vc, cn,
				     nc));
	}
	return 0;
}

/* TP classifier + cross-entropy on h[n,C] (gathered) and this rank's
 * vocabulary rows W[V,C], `chunk` tokens at a time (the backend's
 * ce_part ops).  Loss parallel: the row max, the sum of exponentials and
 * the target logit are all-reduced over the group; otherwise each chunk's
 * logits are all-gathered and every rank computes the whole rows
 * (torchtitan without loss_parallel) and keeps its columns.  The loss is
 * the same on every rank, summed on the host from the rows' losses in
 * order; dh is this rank's partial sum (reduce-scattered by the caller),
 * dW its rows' gradient.  The labels are in range (the model checks). */
static int tp_classifier_ce(struct titan_sp *sp, double *loss_sum, int64_t *n_valid, float *dh,
			    float *dw, const float *h, const float *w, const int32_t *labels,
			    float gs)
{
	const struct titan_backend_ops *op = sp->be->ops;
	struct titan_backend *be = sp->be;
	const int64_t n = sp->n, C = sp->C, V = sp->V, Vg = sp->vocab, v0 = sp->v0;
	const int64_t chunk = sp->ce_chunk < n ? sp->ce_chunk : n;
	const bool lp = sp->loss_parallel, grads = dh != NULL;
	double total = 0, *st = malloc((size_t)(2 * (chunk ? chunk : 1)) * sizeof(*st));
	int64_t count = 0;
	int rc = 0;

	if (!st)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	for (int64_t n0 = 0; n0 < n && rc == 0; n0 += chunk) {
		const int64_t cn = n0 + chunk < n ? chunk : n - n0;
		const int32_t *lc = labels + n0;
		float *z = sp->cz;

		if (V > 0 && (rc = op->matmul_fwd(be, z, h + n0 * C, w, cn, C, V, false)) < 0)
			break;
		if (lp) {
			if ((rc = op->ce_part_max(be, sp->cmx, z, cn, V)) < 0 ||
			    (rc = titan_comm_all_reduce(sp->comm, TITAN_IN_PLACE, sp->cmx, (size_t)cn,
							TITAN_DTYPE_F32, TITAN_REDOP_MAX,
							"tp loss max")) < 0 ||
			    (rc = op->ce_part_exp(be, sp->cst, z, sp->cmx, lc, v0, cn, V)) < 0 ||
			    (rc = titan_comm_all_reduce(sp->comm, TITAN_IN_PLACE, sp->cst,
							(size_t)(2 * cn), TITAN_DTYPE_F64,
							TITAN_REDOP_SUM, "tp loss sums")) < 0)
				break;
		} else if ((rc = gather_logits(sp, z, cn)) < 0 ||
			   (rc = op->ce_part_max(be, sp->cmx, sp->czf, cn, Vg)) < 0 ||
			   (rc = op->ce_part_exp(be, sp->cst, sp->czf, sp->cmx, lc, 0, cn, Vg)) < 0 ||
			   /* this rank's columns back, compact */
			   (rc = op->buf_copy_rows(be, z, 0, V, sp->czf, v0, Vg, cn, V)) < 0) {
			break;
		}
		/* the rows' losses and, with grads, dz = (softmax − onehot)·gs in z */
		if ((rc = op->ce_part_grad(be, sp->cst, z, sp->cmx, lc, v0, cn, V, gs, grads)) < 0 ||
		    (rc = op->buf_get(be, st, sp->cst, (size_t)(2 * cn) * sizeof(*st))) < 0)
			break;
		for (int64_t r = 0; r < cn; r++)
			if (st[2 * r + 1] != 0) {
				total += st[2 * r];
				count++;
			}
		if (grads) {
			if (V > 0)
				rc = op->matmul_bwd(be, dh + n0 * C, dw, z, h + n0 * C, w, cn, C, V,
						    false);
			else
				rc = op->zero(be, dh + n0 * C, cn * C);
		}
	}
	free(st);
	*loss_sum = total;
	*n_valid = count;
	return rc;
}

static int tp_reduce_grads(struct titan_sp *sp, const struct titan_param_table *t,
			   const struct titan_param_arena *grads)
{
	int64_t total = 0, at = 0;
	float *pack;
	int rc;

	for (int i = 0; i < t->n; i++)
		if (titan_param_tp_replicated(&t->params[i]))
			total += t->params[i].local_numel;
	if (!(pack = malloc((size_t)(total ? total : 1) * sizeof(*pack))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	for (int i = 0; i < t->n; i++) {
		const struct titan_param *p = &t->params[i];

		if (titan_param_tp_replicated(p)) {
			if ((rc = sp->be->ops->buf_get(sp->be, pack + at, titan_param_view(grads, p),
						       (size_t)p->local_numel * sizeof(float))) < 0) {
				free(pack);
				return rc;
			}
			at += p->local_numel;
		}
	}
	rc = titan_comm_all_reduce(sp->comm, TITAN_IN_PLACE, pack, (size_t)total, TITAN_DTYPE_F32,
				   TITAN_REDOP_SUM, "tp norm grads");
	at = 0;
	for (int i = 0; i < t->n && rc == 0; i++) {
		const struct titan_param *p = &t->params[i];

		if (titan_param_tp_replicated(p)) {
			rc = sp->be->ops->buf_set(sp->be, titan_param_view(grads, p), pack + at,
						  (size_t)p->local_numel * sizeof(float));
			at += p->local_numel;
		}
	}
	free(pack);
	return rc;
}

static int tp_reduce_sumsq(struct titan_sp *sp, const struct titan_param_table *t, double *sumsq)
{
	for (int i = 0; i < t->n; i++)
		if (titan_param_tp_replicated(&t->params[i]) && sp->rank > 0)
			sumsq[i] = 0; /* replicated: counted on TP rank 0 */
	return titan_comm_all_reduce(sp->comm, TITAN_IN_PLACE, sumsq, (size_t)t->n,
				     TITAN_DTYPE_F64, TITAN_REDOP_SUM, "tp grad norm");
}

static const struct titan_sp_ops tensor_parallel = {
	tp_norm, tp_linear_residual, tp_gather_grad, tp_scatter_grad, tp_embedding_fwd,
	tp_embedding_bwd, tp_classifier_ce, tp_reduce_grads, tp_reduce_sumsq,
};

int titan_sp_init(struct titan_sp *sp, struct titan_backend *be, struct titan_comm *comm,
		  int64_t n, int64_t C, int64_t vocab, int64_t v0, int64_t V, int64_t ce_chunk,
		  bool loss_parallel, titan_sp_buf_fn buf, void *ctx)
{
	const enum titan_mem_tag ws = TITAN_MEM_WORKSPACE;
	int64_t ch, vc;

	const bool tp = comm && titan_comm_size(comm) > 1;

	*sp = (struct titan_sp){.ops = &identity, .be = be, .comm = tp ? comm : NULL,
				.rank = tp ? titan_comm_rank(comm) : 0,
				.size = tp ? titan_comm_size(comm) : 1, .n = n, .C = C,
				.vocab = vocab, .V = V, .v0 = v0, .ce_chunk = ce_chunk,
				.loss_parallel = loss_parallel};
	sp->nl = n / sp->size;
	if (!tp)
		return 0;
	sp->ops = &tensor_parallel;
	ch = ce_chunk < n ? ce_chunk : n;
	vc = (vocab + sp->size - 1) / sp->size;
	sp->xn_loc = buf(ctx, sp->nl * C, ws, TITAN_BUF_TP_SP);
	sp->part = buf(ctx, n * C, ws, TITAN_BUF_TP_SP);
	sp->dfull = buf(ctx, n * C, ws, TITAN_BUF_TP_SP);
	sp->dxn_loc = buf(ctx, sp->nl * C, ws, TITAN_BUF_TP_SP);
	sp->cz = buf(ctx, ch * vc, ws, TITAN_BUF_TP_LOSS);
	sp->cmx = buf(ctx, ch, ws, TITAN_BUF_TP_LOSS);
	sp->cst = (double *)buf(ctx, 4 * ch, ws, TITAN_BUF_TP_LOSS);
	if (!sp->xn_loc || !sp->part || !sp->dfull || !sp->dxn_loc || !sp->cz || !sp->cmx ||
	    !sp->cst)
		return TITAN_E_NOMEM;
	if (!loss_parallel &&
	    (!(sp->czg = buf(ctx, sp->size * ch * vc, ws, TITAN_BUF_TP_LOGITS)) ||
	     !(sp->czf = buf(ctx, ch * vocab, ws, TITAN_BUF_TP_LOGITS))))
		return TITAN_E_NOMEM;
	return 0;
}
