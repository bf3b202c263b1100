/*
 * cp.h — private to lib/train: the attention implementation the Llama
 * model's block math calls, and the placement of a sequence's tokens
 * under context parallelism (cp.c).  Three implementations: local
 * attention (no CP: the backend's attention ops over whole sequences),
 * CP all-gather (rotate_method allgather: the whole sequence's keys and
 * values gathered, the backend's attention_part ops on this rank's two
 * query chunks) and CP ring (rotate_method alltoall: cp_ring.c); and for
 * generation a fourth, attention over a KV cache (attn_kv.c).  Under
 * CP this rank holds, of each sequence, chunks rank and 2·size − 1 − rank
 * of 2·size (torchtitan's causal load balancing).
 */
#ifndef TITAN_TRAIN_CP_H
#define TITAN_TRAIN_CP_H

#include <stdbool.h>
#include <stdint.h>

#include "titan/core.h"
#include "titan/train.h"
#include "titan/ops.h"

struct titan_comm;
struct titan_cp;

struct titan_attn_ops {
	/* out [B,Tl,H,D], lse [B,H,Tl] from q [B,Tl,H,D], k, v [B,Tl,Hkv,D] */
	int (*fwd)(struct titan_cp *cp, float *out, float *lse, const float *q, const float *k,
		   const float *v);
	/* dq, dk, dv of this rank's tokens (overwritten) from dout and the
	 * forward's out and lse */
	int (*bwd)(struct titan_cp *cp, float *dq, float *dk, float *dv, const float *dout,
		   const float *q, const float *k, const float *v, const float *out,
		   const float *lse);
};

struct titan_cp {
	const struct titan_attn_ops *attn;
	struct titan_backend *be;
	struct titan_allocator *alloc;
	struct titan_comm *comm;  /* the CP group; NULL: no CP */
	bool ring;
	int rank, size;
	int64_t batch, seq, tl, n;    /* rows, sequence, tokens of a row here, batch·tl */
	int64_t h, hkv, d;            /* heads, kv heads, head dim */
	/* CP, backend buffers: the sequence position of local token t [tl]
	 * (host code computes it: titan_cp_token) and this rank's labels [n]
	 * (the model sets them there for the loss) */
	int64_t *pos;
	int32_t *lab;
	/* block_causal: the current microbatch's document ids in host memory
	 * (the model points them at the microbatch before each call; NULL:
	 * causal): doc [batch, seq] in sequence order and, under CP, ldoc
	 * [size][batch, tl] every rank's tokens in their local order
	 * (titan_cp_docs) */
	const int32_t *doc, *ldoc;
	float *kf, *vf, *dkf, *dvf, *cpg; /* all-gather: whole-sequence k, v, grads; gather buffer */
};

/* Scratch allocation, as titan_sp_buf_fn (tp.h). */
typedef float *(*titan_cp_buf_fn)(void *ctx, int64_t nfloats, enum titan_mem_tag tag,
				   enum titan_buf_role role);

/* The geometry: local attention without `comm` (NULL or one rank), else
 * CP over it (the ring with `ring`); TITAN_E_INVALID when seq does not
 * split into 2·size chunks.  No allocation. */
int titan_cp_init(struct titan_cp *cp, struct titan_backend *be, struct titan_allocator *alloc,
		  struct titan_comm *comm, bool ring, int64_t batch, int64_t seq, int64_t h,
		  int64_t hkv, int64_t d);
/* CP only: the positions, labels and (all-gather) the whole-sequence
 * buffers; `freqs` [tl, d] gets the RoPE rows of this rank's positions.
 * TITAN_E_NOMEM. */
int titan_cp_alloc(struct titan_cp *cp, titan_cp_buf_fn buf, void *ctx, float *freqs,
		   double theta, const struct titan_rope_scaling *scaling);
/* Document ids of a microbatch's inputs [batch, seq] (block_causal):
 * doc[b, t] counts the documents that end (input id `eos` >= 0) before t,
 * or, with eos -1, the document starts (id `bos`) in 1..t, as torchtitan's
 * get_document_mask_mod; and under CP every rank's local order of them
 * into ldoc [size][batch, tl] (NULL without CP). */
void titan_cp_docs(const struct titan_cp *cp, const int32_t *inputs, int64_t eos, int64_t bos,
		   int32_t *doc, int32_t *ldoc);
/* Llama 4's chunked attention (its RoPE blocks, fixed_attn_block_size
 * `chunk`): ids [batch, seq] that change every `chunk` positions and, with
 * document ids `doc` (block_causal; NULL: none), at every document
 * boundary: doc[b, t] + t / chunk, both terms non-decreasing, so two
 * tokens share an id exactly when they share the chunk and the document
 * (torchtitan's and_masks of the fixed-block and document masks); the
 * attention takes them as document ids.  Under CP their local order into
 * lcid as titan_cp_docs. */
void titan_cp_chunk_ids(const struct titan_cp *cp, const int32_t *doc, int64_t chunk,
			int32_t *cid, int32_t *lcid);
/* The index in a microbatch [batch, seq] of local token i (i itself
 * without CP). */
int64_t titan_cp_token(const struct titan_cp *cp, int64_t i);
/* This rank's labels of a microbatch's (host memory): written to `host`
 * [n] and returned; `labels` itself without CP. */
const int32_t *titan_cp_labels(struct titan_cp *cp, const int32_t *labels, int32_t *host);

/* KV-cache attention, the generator's (forward only): the chunk of
 * `tl` tokens at positions p0 .. p0 + tl − 1 of one sequence (batch 1)
 * against the cached keys/values of positions 0 .. p0 + i.  The block's
 * wk/wv (and RoPE) write the chunk's k, v straight into the cache: the
 * caller points the activations' k, v at rows p0 of `kc`, `vc` (fwd checks
 * it).  At p0 = 0 the backend's attention_fwd, as local attention; after
 * it, softmax(q·k / sqrt(D)) v over the cache in host memory, one task per
 * (query, head), the exponentials summed in double. */
struct titan_attn_kv {
	struct titan_cp cp;          /* first: the attention the block calls */
	const float *kc, *vc;        /* the layer's cache [capacity, Hkv·D] */
	const int32_t *doc;          /* block_causal: document ids [capacity]
					(ascending), a query sees its own
					document's keys only; NULL: causal */
	int64_t p0, capacity;
	float *scores;               /* [nthreads, capacity + D] */
	int nthreads;
};

/* The KV attention of a cache of `capacity` positions, `scores` as
 * above; set kc, vc, p0 and cp.tl = cp.seq = cp.n (the chunk) per call. */
void titan_attn_kv_init(struct titan_attn_kv *kv, struct titan_backend *be, int64_t h,
			int64_t hkv, int64_t d, int64_t capacity, float *scores, int nthreads);

#endif
