/*
 * cp_attn.h — private to lib/train: causal attention of this rank's query
 * tokens against the whole sequence's keys and values (context
 * parallelism, cp_attn.c).
 */
#ifndef TITAN_TRAIN_CP_ATTN_H
#define TITAN_TRAIN_CP_ATTN_H

#include <stdint.h>

struct titan_cp_attn_dims {
	int64_t batch, tl, t, h, hkv, d; /* rows, local tokens, sequence, heads, kv heads, head dim */
};

/* out[B,Tl,H,D], lse[B,H,Tl] from q[B,Tl,H,D] at positions pos[Tl] and the
 * whole sequence's kf, vf [B,T,Hkv,D] (causal: key j <= pos[t]). */
int titan_cp_attn_fwd(float *out, float *lse, const float *q, const float *kf, const float *vf,
		      const int64_t *pos, const struct titan_cp_attn_dims *d);
/* dq (overwritten) and this rank's contributions to dkf, dvf [B,T,Hkv,D]
 * (zeroed, then summed over its queries; the caller sums them over the
 * group). */
int titan_cp_attn_bwd(float *dq, float *dkf, float *dvf, const float *dout, const float *q,
		      const float *kf, const float *vf, const float *out, const float *lse,
		      const int64_t *pos, const struct titan_cp_attn_dims *d);

#endif
