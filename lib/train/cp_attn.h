/*
 * cp_attn.h — private to lib/train: context parallelism's ring attention
 * (cp_ring.c), one of the attention implementations of cp.h (cp.c holds
 * the others: local, and allgather through the backend's attention_part
 * ops).
 */
#ifndef TITAN_TRAIN_CP_ATTN_H
#define TITAN_TRAIN_CP_ATTN_H

#include <stdint.h>

struct titan_backend;
struct titan_allocator;
struct titan_comm;

/* Ring attention (rotate_method alltoall, cp_ring.c): this rank's q, k, v
 * [B,Tl,H|Hkv,D] in the local order (chunks rank, 2·size − 1 − rank);
 * keys and values move around the ring of `comm`.  Buffers from `alloc`
 * (see cp_ring.c for their sizes), freed before return.  Collective over
 * the cp group. */
struct titan_cp_ring {
	struct titan_backend *be;
	struct titan_allocator *alloc;
	struct titan_comm *comm;
	int rank, size;
	int64_t batch, tl, h, hkv, d; /* rows, local tokens, heads, kv heads, head dim */
	/* block_causal: every rank's document ids in its local order,
	 * [size][batch, tl] (cp.h's ldoc); NULL: causal */
	const int32_t *ldoc;
};
/* out [B,Tl,H,D], lse [B,H,Tl] (overwritten). */
int titan_cp_ring_fwd(const struct titan_cp_ring *r, float *out, float *lse, const float *q,
		      const float *k, const float *v);
/* dq, dk, dv of this rank's tokens (overwritten) from dout and the
 * forward's out and lse. */
int titan_cp_ring_bwd(const struct titan_cp_ring *r, float *dq, float *dk, float *dv,
		      const float *dout, const float *q, const float *k, const float *v,
		      const float *out, const float *lse);

#endif
