/*
 * cp_ring.c — ring attention for context parallelism (torchtitan's
 * parallelism.context_parallel_rotate_method "alltoall"; PyTorch's
 * torch/distributed/tensor/experimental/_attention.py: _RotateMethod.
 * ALL_TO_ALL, _templated_ring_attention and its backward, _SDPAMerger).
 *
 * Each of the cp ranks holds chunks r and 2·cp − 1 − r of every sequence
 * (2·cp chunks of Tl/2 tokens, torchtitan's causal load balancing), its
 * queries, keys and values in the local order [chunk r, chunk 2cp−1−r].
 * The keys and values move around the ring: at step i rank r holds those
 * of rank s = (r − i) mod cp, sends them on to r + 1 and receives the next
 * from r − 1 (non-blocking, on the cp communicator's progress thread)
 * while it computes its queries against them:
 *   i = 0 (its own):  causal over the local order (chunk r before chunk
 *                     2cp−1−r, so the causal mask of the local indices is
 *                     the global one);
 *   s < r:            every query row against the first half (chunk s),
 *                     no mask; chunk 2cp−1−s comes after both of its own;
 *   s > r:            the second half of its queries (chunk 2cp−1−r)
 *                     against both of s's chunks, no mask; its first half
 *                     (chunk r) sees neither.
 * The blocks run through the backend's attention_part ops (the CPU
 * flash-attention kernel on a rectangle); each later block is merged into
 * the output by log-sum-exp, inside the kernel (titan/ops.h).  Under
 * block_causal every part also carries the document ids of its queries
 * and of rank s's keys (each rank holds every rank's: they do not travel),
 * and a query row that sees none of a block's keys keeps its bits.
 *
 * Backward moves the keys and values around again with the gradients of
 * the block they belong to: at step i rank r adds its block's dK/dV to the
 * sum that came from r − 1 (that of ranks s .. r − 1) and passes it on, so
 * after cp steps every sum arrives at its owner, straight into dk, dv.
 * Probabilities are recomputed from the merged lse and output (as in
 * _scaled_dot_product_ring_flash_attention_backward); dq adds up the
 * blocks in step order.  The sums that travel are received while the next
 * block computes (its own terms go to a scratch block, added on arrival).
 *
 * Memory (n_kv = B·Tl·Hkv·D floats, one rank's keys), allocated at entry
 * and freed before return, through the tagged allocator (stated once in
 * titan_cp_ring_mem, which titan-estimate counts):
 *   forward:  min(cp − 1, 2) key/value receive buffers of 2·n_kv (comm);
 *   backward: the same, two travelling dK/dV sums of 2·n_kv (comm) and
 *             the block's own dK/dV, 2·n_kv (workspace);
 * against 5·cp·n_kv held for the whole run by rotate_method allgather.
 */
#include "cp_attn.h"

#include <string.h>

#include "titan/core.h"
#include "titan/dist.h"
#include "titan/ops.h"
#include "titan/train.h"

enum { TAG_K = 11, TAG_V, TAG_DK, TAG_DV };

#define CK(call) do { if ((rc = (call)) < 0) goto fail; } while (0)

/* Wait for every request in req[0..n) and clear them; the first error. */
static int drain(struct titan_comm_req **req, int n)
{
	int rc = 0;

	for (int i = 0; i < n; i++) {
		int e = titan_comm_wait(req[i]);

		req[i] = NULL;
		if (e < 0 && rc == 0)
			rc = e;
	}
	return rc;
}

int titan_cp_ring_mem(int64_t nkv, int64_t cp, struct titan_cp_ring_mem *m)
{
	m->nrecv = cp - 1 < 2 ? (int)(cp - 1) : 2;
	if (nkv < 0 || __builtin_mul_overflow(nkv, (int64_t)(2 * sizeof(float)), &m->buf) ||
	    __builtin_mul_overflow(m->buf, (int64_t)m->nrecv, &m->recv) ||
	    __builtin_mul_overflow(m->buf, (int64_t)2, &m->sums)) {
		m->buf = m->recv = m->sums = m->own = -1;
		return TITAN_E_NOMEM;
	}
	m->own = m->buf;
	return 0;
}

/* One buffer of m->buf bytes (2·n_kv floats). */
static float *ring_alloc(const struct titan_cp_ring *r, const struct titan_cp_ring_mem *m,
			 enum titan_mem_tag tag)
{
	float *p = m->buf < 0 ? NULL : titan_mem_alloc(r->alloc, (size_t)m->buf, tag);

	if (!p)
		titan_error(TITAN_E_NOMEM, "out of memory for the context-parallel ring "
			    "(%lld floats)", (long long)(m->buf / (int64_t)sizeof(float)));
	return p;
}

/* The part of a step that holds rank s's keys and values: the queries
 * from row *qoff of the local order, the geometry in *p (block_causal:
 * with this rank's queries' and rank s's keys' document ids, which every
 * rank has: they need not travel). */
static void step_part(const struct titan_cp_ring *r, int s, struct titan_attn_part *p,
		      int64_t *qoff)
{
	const int64_t Tl = r->tl, half = Tl / 2;

	*p = (struct titan_attn_part){r->batch, Tl, Tl, Tl, Tl, r->h, r->hkv, r->d, 0, NULL, NULL};
	*qoff = 0;
	if (s < r->rank) { /* all queries, keys of chunk s: no mask */
		p->tk = half;
		p->diag = half;
	} else if (s > r->rank) { /* chunk 2cp-1-r against chunks s, 2cp-1-s */
		p->tq = half;
		p->diag = Tl;
		*qoff = half;
	}
	if (r->ldoc) {
		p->q_doc = r->ldoc + r->rank * r->batch * Tl + *qoff;
		p->k_doc = r->ldoc + s * r->batch * Tl;
	}
}

/* Post the exchange of the keys and values: send ck, cv to rank + 1,
 * receive rank − 1's into nb (keys) and nb + nkv (values). */
static int post_kv(const struct titan_cp_ring *r, const float *ck, const float *cv, float *nb,
		   int64_t nkv, struct titan_comm_req **req)
{
	const int next = (r->rank + 1) % r->size, prev = (r->rank + r->size - 1) % r->size;
	int rc;

	if ((rc = titan_comm_isend(r->comm, ck, (size_t)nkv, TITAN_DTYPE_F32, next, TAG_K,
				   "cp ring keys", &req[0])) < 0 ||
	    (rc = titan_comm_isend(r->comm, cv, (size_t)nkv, TITAN_DTYPE_F32, next, TAG_V,
				   "cp ring values", &req[1])) < 0 ||
	    (rc = titan_comm_irecv(r->comm, nb, (size_t)nkv, TITAN_DTYPE_F32, prev, TAG_K,
				   "cp ring keys", &req[2])) < 0 ||
	    (rc = titan_comm_irecv(r->comm, nb + nkv, (size_t)nkv, TITAN_DTYPE_F32, prev, TAG_V,
				   "cp ring values", &req[3])) < 0)
		return rc;
	return 0;
}

int titan_cp_ring_fwd(const struct titan_cp_ring *r, float *out, float *lse, const float *q,
		      const float *k, const float *v)
{
	const struct titan_backend_ops *op = r->be->ops;
	const int64_t nkv = r->batch * r->tl * r->hkv * r->d, qs = r->h * r->d;
	struct titan_cp_ring_mem m;
	struct titan_comm_req *req[4] = {NULL};
	float *buf[2] = {NULL, NULL};
	const float *ck = k, *cv = v;
	int rc = 0;

	if (!op->attention_part_fwd)
		return titan_error(TITAN_E_UNSUPPORTED, "context_parallel_rotate_method alltoall: "
				   "the %s backend has no attention_part op", op->name);
	titan_cp_ring_mem(nkv, r->size, &m);
	for (int b = 0; b < m.nrecv; b++)
		if (!(buf[b] = ring_alloc(r, &m, TITAN_MEM_COMM))) {
			rc = TITAN_E_NOMEM;
			goto fail;
		}
	for (int i = 0; i < r->size; i++) {
		const int s = (r->rank - i + r->size) % r->size;
		struct titan_attn_part p;
		int64_t qo;

		if (i > 0) {
			CK(drain(req, 4));
			ck = buf[(i - 1) % 2];
			cv = ck + nkv;
		}
		if (i < r->size - 1)
			CK(post_kv(r, ck, cv, buf[i % 2], nkv, req));
		step_part(r, s, &p, &qo);
		CK(op->attention_part_fwd(r->be, out + qo * qs, lse + qo, q + qo * qs, ck, cv, &p,
					  i > 0));
	}
fail:
	drain(req, 4);
	for (int b = 0; b < m.nrecv; b++)
		titan_mem_free(r->alloc, buf[b]);
	return rc;
}

int titan_cp_ring_bwd(const struct titan_cp_ring *r, float *dq, float *dk, float *dv,
		      const float *dout, const float *q, const float *k, const float *v,
		      const float *out, const float *lse)
{
	const struct titan_backend_ops *op = r->be->ops;
	const int64_t nkv = r->batch * r->tl * r->hkv * r->d, qs = r->h * r->d;
	struct titan_cp_ring_mem m;
	const int next = (r->rank + 1) % r->size, prev = (r->rank + r->size - 1) % r->size;
	/* kv: the keys/values exchange; dkv: the travelling sums' */
	struct titan_comm_req *kv[4] = {NULL}, *dkv[4] = {NULL};
	float *buf[2] = {NULL, NULL}, *acc[2] = {NULL, NULL}, *own = NULL;
	const float *ck = k, *cv = v;
	int rc = 0;

	if (!op->attention_part_bwd)
		return titan_error(TITAN_E_UNSUPPORTED, "context_parallel_rotate_method alltoall: "
				   "the %s backend has no attention_part op", op->name);
	titan_cp_ring_mem(nkv, r->size, &m);
	for (int b = 0; b < m.nrecv; b++)
		if (!(buf[b] = ring_alloc(r, &m, TITAN_MEM_COMM))) {
			rc = TITAN_E_NOMEM;
			goto fail;
		}
	if (!(acc[0] = ring_alloc(r, &m, TITAN_MEM_COMM)) ||
	    !(acc[1] = ring_alloc(r, &m, TITAN_MEM_COMM)) ||
	    !(own = ring_alloc(r, &m, TITAN_MEM_WORKSPACE))) {
		rc = TITAN_E_NOMEM;
		goto fail;
	}
	for (int i = 0; i < r->size; i++) {
		const int s = (r->rank - i + r->size) % r->size;
		float *a = acc[i % 2], *g = i ? own : a;
		struct titan_attn_part p;
		int64_t qo;

		if (i > 0) {
			CK(drain(kv, 4));
			ck = buf[(i - 1) % 2];
			cv = ck + nkv;
		}
		if (i < r->size - 1)
			CK(post_kv(r, ck, cv, buf[i % 2], nkv, kv));
		/* this rank's terms of block s: dq added to (overwritten at step
		 * 0), dK/dV of s into g (zeroed first: a part covers half of it) */
		step_part(r, s, &p, &qo);
		if (i > 0)
			CK(op->zero(r->be, g, 2 * nkv));
		CK(op->attention_part_bwd(r->be, dq + qo * qs, g, g + nkv, dout + qo * qs,
					  q + qo * qs, ck, cv, out + qo * qs, lse + qo, &p, i > 0));
		if (i > 0) { /* the sum of ranks s .. r-1 has arrived in a */
			CK(drain(dkv, 4));
			CK(op->add(r->be, a, a, g, 2 * nkv));
		}
		CK(titan_comm_isend(r->comm, a, (size_t)nkv, TITAN_DTYPE_F32, next, TAG_DK,
				    "cp ring key grads", &dkv[0]));
		CK(titan_comm_isend(r->comm, a + nkv, (size_t)nkv, TITAN_DTYPE_F32, next, TAG_DV,
				    "cp ring value grads", &dkv[1]));
		/* the next block's sum, or after the last step this rank's own */
		float *nk = i < r->size - 1 ? acc[(i + 1) % 2] : dk;
		float *nv = i < r->size - 1 ? acc[(i + 1) % 2] + nkv : dv;

		CK(titan_comm_irecv(r->comm, nk, (size_t)nkv, TITAN_DTYPE_F32, prev, TAG_DK,
				    "cp ring key grads", &dkv[2]));
		CK(titan_comm_irecv(r->comm, nv, (size_t)nkv, TITAN_DTYPE_F32, prev, TAG_DV,
				    "cp ring value grads", &dkv[3]));
	}
	rc = drain(dkv, 4);
fail:
	drain(kv, 4);
	drain(dkv, 4);
	for (int b = 0; b < m.nrecv; b++)
		titan_mem_free(r->alloc, buf[b]);
	titan_mem_free(r->alloc, acc[0]);
	titan_mem_free(r->alloc, acc[1]);
	titan_mem_free(r->alloc, own);
	return rc;
}
