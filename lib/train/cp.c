/*
 * cp.c — attention for the Llama model's blocks (cp.h): local, or
 * context-parallel by all-gathered keys and values or by the ring of
 * cp_ring.c, and where a rank's tokens sit in the sequence.
 */
#include "cp.h"

#include <stdlib.h>
#include <string.h>

#include "titan/dist.h"
#include "cp_attn.h"

#define CK(call) do { if ((rc = (call)) < 0) return rc; } while (0)

/* ------------------------------------------------------------- local */

static struct titan_attn_dims local_dims(const struct titan_cp *cp)
{
	return (struct titan_attn_dims){cp->batch, cp->seq, cp->h, cp->hkv, cp->d, cp->doc};
}

static int local_fwd(struct titan_cp *cp, float *out, float *lse, const float *q, const float *k,
		     const float *v)
{
	const struct titan_attn_dims ad = local_dims(cp);

	return cp->be->ops->attention_fwd(cp->be, out, lse, q, k, v, &ad);
}

static int local_bwd(struct titan_cp *cp, float *dq, float *dk, float *dv, const float *dout,
		     const float *q, const float *k, const float *v, const float *out,
		     const float *lse)
{
	const struct titan_attn_dims ad = local_dims(cp);

	return cp->be->ops->attention_bwd(cp->be, dq, dk, dv, dout, q, k, v, out, lse, &ad);
}

static const struct titan_attn_ops local = {local_fwd, local_bwd};

/* --------------------------------------------------- CP: all-gather */

/* Position in the sequence of rank r's local token t. */
static int64_t cp_pos(const struct titan_cp *cp, int r, int64_t t)
{
	const int64_t half = cp->tl / 2;

	return t < half ? r * half + t : (2 * cp->size - 1 - r) * half + (t - half);
}

/* Between the gather layout [size][B][Tl] (rank-major, cpg) and the
 * sequence layout [B][T] of kv-float rows: each rank's two chunks of half
 * rows are contiguous on both sides, so one strided copy per (rank, chunk)
 * moves them for every batch row (the backend's buf_copy_rows). */
static int cp_permute(struct titan_cp *cp, float *seq, float *gath, bool to_seq)
{
	const int64_t B = cp->batch, Tl = cp->tl, T = Tl * cp->size, half = Tl / 2;
	const int64_t kv = cp->hkv * cp->d;
	const struct titan_backend_ops *op = cp->be->ops;
	int rc;

	for (int r = 0; r < cp->size; r++)
		for (int64_t c = 0; c < 2; c++) {
			const int64_t so = cp_pos(cp, r, c * half) * kv, go = (r * B * Tl + c * half) * kv;

			CK(to_seq ? op->buf_copy_rows(cp->be, seq, so, T * kv, gath, go, Tl * kv, B,
						      half * kv)
				  : op->buf_copy_rows(cp->be, gath, go, Tl * kv, seq, so,
						      T * kv, B, half * kv));
		}
	return 0;
}

/* kf, vf: the whole sequence's keys and values from every rank's [B,Tl]. */
static int cp_gather_kv(struct titan_cp *cp, const float *k, const float *v)
{
	const int64_t kv = cp->hkv * cp->d;
	const float *src[2] = {k, v};
	float *dst[2] = {cp->kf, cp->vf};
	int rc;

	for (int w = 0; w < 2; w++) {
		CK(titan_comm_all_gather(cp->comm, src[w], cp->cpg, (size_t)(cp->n * kv),
					 TITAN_DTYPE_F32, w ? "cp values" : "cp keys"));
		CK(cp_permute(cp, dst[w], cp->cpg, true));
	}
	return 0;
}

/* Query chunk `i` (0: chunk rank, 1: chunk 2·size − 1 − rank) against the
 * gathered sequence, each query seeing the keys up to its position (the
 * backend's attention_part ops); block_causal: the chunk's document ids
 * (this rank's local order) against the whole sequence's. */
static struct titan_attn_part gathered_part(const struct titan_cp *cp, int i)
{
	const int64_t Tl = cp->tl, half = Tl / 2, T = Tl * cp->size;
	const int64_t chunk = i ? 2 * cp->size - 1 - cp->rank : cp->rank;
	const int32_t *qd = cp->doc ? cp->ldoc + cp->rank * cp->n + i * half : NULL;

	return (struct titan_attn_part){cp->batch, half, T, Tl, T, cp->h, cp->hkv, cp->d,
					chunk * half, qd, cp->doc};
}

static int gather_fwd(struct titan_cp *cp, float *out, float *lse, const float *q,
		      const float *k, const float *v)
{
	const int64_t half = cp->tl / 2, qs = cp->h * cp->d;
	int rc;

	CK(cp_gather_kv(cp, k, v));
	for (int i = 0; i < 2; i++) {
		const struct titan_attn_part p = gathered_part(cp, i);
		const int64_t o = i * half;

		CK(cp->be->ops->attention_part_fwd(cp->be, out + o * qs, lse + o, q + o * qs,
						   cp->kf, cp->vf, &p, false));
	}
	return 0;
}

/* dq, and dk, dv of this rank's tokens: every rank's contributions to the
 * whole sequence's key/value gradients reduce-scattered to their owners. */
static int gather_bwd(struct titan_cp *cp, float *dq, float *dk, float *dv, const float *dout,
		      const float *q, const float *k, const float *v, const float *out,
		      const float *lse)
{
	const int64_t B = cp->batch, Tl = cp->tl, T = Tl * cp->size;
	const int64_t kv = cp->hkv * cp->d, half = Tl / 2, qs = cp->h * cp->d;
	const struct titan_backend_ops *op = cp->be->ops;
	const float *src[2] = {cp->dkf, cp->dvf};
	float *dst[2] = {dk, dv};
	int rc;

	CK(cp_gather_kv(cp, k, v));
	CK(op->zero(cp->be, dq, cp->n * qs));
	CK(op->zero(cp->be, cp->dkf, B * T * kv));
	CK(op->zero(cp->be, cp->dvf, B * T * kv));
	for (int i = 0; i < 2; i++) {
		const struct titan_attn_part p = gathered_part(cp, i);
		const int64_t o = i * half;

		CK(op->attention_part_bwd(cp->be, dq + o * qs, cp->dkf, cp->dvf, dout + o * qs,
					  q + o * qs, cp->kf, cp->vf, out + o * qs, lse + o, &p,
					  true));
	}
	for (int w = 0; w < 2; w++) {
		CK(cp_permute(cp, (float *)src[w], cp->cpg, false));
		CK(titan_comm_reduce_scatter(cp->comm, cp->cpg, dst[w], (size_t)(cp->n * kv),
					     TITAN_DTYPE_F32, w ? "cp value grads" : "cp key grads"));
	}
	return 0;
}

static const struct titan_attn_ops all_gather = {gather_fwd, gather_bwd};

/* ---------------------------------------------------------- CP: ring */

static struct titan_cp_ring ring_of(const struct titan_cp *cp)
{
	return (struct titan_cp_ring){cp->be, cp->alloc, cp->comm, cp->rank, cp->size, cp->batch,
				      cp->tl, cp->h, cp->hkv, cp->d, cp->doc ? cp->ldoc : NULL};
}

static int ring_fwd(struct titan_cp *cp, float *out, float *lse, const float *q, const float *k,
		    const float *v)
{
	const struct titan_cp_ring r = ring_of(cp);

	return titan_cp_ring_fwd(&r, out, lse, q, k, v);
}

static int ring_bwd(struct titan_cp *cp, float *dq, float *dk, float *dv, const float *dout,
		    const float *q, const float *k, const float *v, const float *out,
		    const float *lse)
{
	const struct titan_cp_ring r = ring_of(cp);

	return titan_cp_ring_bwd(&r, dq, dk, dv, dout, q, k, v, out, lse);
}

static const struct titan_attn_ops ring = {ring_fwd, ring_bwd};

/* ------------------------------------------------------------ set-up */

int titan_cp_init(struct titan_cp *cp, struct titan_backend *be, struct titan_allocator *alloc,
		  struct titan_comm *comm, bool use_ring, int64_t batch, int64_t seq, int64_t h,
		  int64_t hkv, int64_t d)
{
	memset(cp, 0, sizeof(*cp));
	cp->attn = &local;
	cp->be = be;
	cp->alloc = alloc;
	cp->comm = comm && titan_comm_size(comm) > 1 ? comm : NULL;
	cp->ring = use_ring;
	cp->rank = cp->comm ? titan_comm_rank(cp->comm) : 0;
	cp->size = cp->comm ? titan_comm_size(cp->comm) : 1;
	/* a real gap, not a layout rule: CP runs its attention as parts
	 * (query chunks against gathered or passed keys), which the CUDA
	 * backend does not have yet */
	if (cp->comm && (!be->ops->attention_part_fwd || !be->ops->attention_part_bwd))
		return titan_error(TITAN_E_UNSUPPORTED, "context_parallel_degree %d: the %s backend "
				   "has no partial attention (attention_part_fwd/bwd), which context "
				   "parallelism runs on; use training.device: cpu", cp->size,
				   be->ops->name);
	if (cp->comm && seq % (2 * cp->size))
		return titan_error(TITAN_E_INVALID, "context parallelism: seq_len %lld does not "
				   "split into 2 x context_parallel_degree %d chunks",
				   (long long)seq, cp->size);
	cp->batch = batch;
	cp->seq = seq;
	cp->tl = seq / cp->size;
	cp->n = batch * cp->tl;
	cp->h = h;
	cp->hkv = hkv;
	cp->d = d;
	if (cp->comm)
		cp->attn = use_ring ? &ring : &all_gather;
	return 0;
}

int titan_cp_alloc(struct titan_cp *cp, titan_cp_buf_fn buf, void *ctx, float *freqs,
		   double theta, const struct titan_rope_scaling *scaling)
{
	/* the RoPE rows of this rank's positions, and the positions, made
	 * on the host (after the whole table) and set into the buffers */
	float *full = malloc((size_t)(cp->seq * cp->d + cp->tl * cp->d) * sizeof(float));
	int64_t *pos = malloc((size_t)cp->tl * sizeof(*pos));
	const int64_t kvf = cp->batch * cp->seq * cp->hkv * cp->d;
	const struct titan_backend_ops *op = cp->be->ops;
	int rc;

	cp->pos = (int64_t *)buf(ctx, 2 * cp->tl, TITAN_MEM_OTHER, TITAN_BUF_CP_POSITIONS);
	cp->lab = (int32_t *)buf(ctx, cp->n, TITAN_MEM_DATA, TITAN_BUF_CP_LABELS);
	if (!cp->ring) { /* allgather: the whole sequence's k, v (the ring
			  * allocates its buffers per call) */
		cp->kf = buf(ctx, kvf, TITAN_MEM_WORKSPACE, TITAN_BUF_CP_GATHERED);
		cp->vf = buf(ctx, kvf, TITAN_MEM_WORKSPACE, TITAN_BUF_CP_GATHERED);
		cp->dkf = buf(ctx, kvf, TITAN_MEM_WORKSPACE, TITAN_BUF_CP_GATHERED);
		cp->dvf = buf(ctx, kvf, TITAN_MEM_WORKSPACE, TITAN_BUF_CP_GATHERED);
		cp->cpg = buf(ctx, kvf, TITAN_MEM_WORKSPACE, TITAN_BUF_CP_GATHERED);
	}
	if (!full || !pos || !cp->pos || !cp->lab ||
	    (!cp->ring && (!cp->kf || !cp->vf || !cp->dkf || !cp->dvf || !cp->cpg))) {
		free(full);
		free(pos);
		return TITAN_E_NOMEM;
	}
	float *loc = full + cp->seq * cp->d;

	for (int64_t t = 0; t < cp->tl; t++)
		pos[t] = cp_pos(cp, cp->rank, t);
	rc = titan_rope_freqs(full, cp->seq, cp->d, theta, scaling);
	for (int64_t t = 0; rc == 0 && t < cp->tl; t++)
		memcpy(loc + t * cp->d, full + pos[t] * cp->d, (size_t)cp->d * sizeof(float));
	if (rc == 0)
		rc = op->buf_set(cp->be, freqs, loc, (size_t)(cp->tl * cp->d) * sizeof(float));
	if (rc == 0)
		rc = op->buf_set(cp->be, cp->pos, pos, (size_t)cp->tl * sizeof(*pos));
	free(full);
	free(pos);
	return rc;
}

/* Under CP, every rank's local order of the ids [batch, seq] into lids
 * [size][batch, tl] (nothing without CP or lids). */
static void local_ids(const struct titan_cp *cp, const int32_t *ids, int32_t *lids)
{
	const int64_t T = cp->seq;

	for (int r = 0; lids && cp->comm && r < cp->size; r++)
		for (int64_t b = 0; b < cp->batch; b++)
			for (int64_t t = 0; t < cp->tl; t++)
				lids[r * cp->n + b * cp->tl + t] = ids[b * T + cp_pos(cp, r, t)];
}

void titan_cp_docs(const struct titan_cp *cp, const int32_t *inputs, int64_t eos, int64_t bos,
		   int32_t *doc, int32_t *ldoc)
{
	const int64_t T = cp->seq;

	for (int64_t b = 0; b < cp->batch; b++) {
		const int32_t *in = inputs + b * T;
		int32_t *d = doc + b * T;

		d[0] = 0;
		for (int64_t t = 1; t < T; t++)
			d[t] = d[t - 1] + (eos >= 0 ? in[t - 1] == eos : in[t] == bos);
	}
	local_ids(cp, doc, ldoc);
}

void titan_cp_chunk_ids(const struct titan_cp *cp, const int32_t *doc, int64_t chunk,
			int32_t *cid, int32_t *lcid)
{
	const int64_t T = cp->seq;

	for (int64_t b = 0; b < cp->batch; b++)
		for (int64_t t = 0; t < T; t++)
			cid[b * T + t] = (int32_t)((doc ? doc[b * T + t] : 0) + t / chunk);
	local_ids(cp, cid, lcid);
}

/* From the closed form (cp->pos is the backend's copy). */
int64_t titan_cp_token(const struct titan_cp *cp, int64_t i)
{
	if (!cp->comm)
		return i;
	return (i / cp->tl) * cp->tl * cp->size + cp_pos(cp, cp->rank, i % cp->tl);
}

const int32_t *titan_cp_labels(struct titan_cp *cp, const int32_t *labels, int32_t *host)
{
	if (!cp->comm)
		return labels;
	for (int64_t i = 0; i < cp->n; i++)
		host[i] = labels[titan_cp_token(cp, i)];
	return host;
}
