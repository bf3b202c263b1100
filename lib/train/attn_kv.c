/*
 * attn_kv.c — the fourth attention implementation (cp.h): over a KV
 * cache, for generation.  torchtitan counterpart: the KV cache of
 * transformers' LlamaForCausalLM that scripts/generate uses.
 */
#include <math.h>
#include <omp.h>

#include "cp.h"

static struct titan_attn_kv *kv_of(struct titan_cp *cp)
{
	return (struct titan_attn_kv *)cp; /* cp is its first member */
}

/* out[i, h, :] for the n queries q[i, h, :] at positions p0 + i, each
 * against the cached keys/values 0 .. p0 + i of kv head h / (H/Hkv)
 * (block_causal: from the first position of its document). */
static void attend_cache(const struct titan_attn_kv *kv, float *out, const float *q)
{
	const struct titan_cp *cp = &kv->cp;
	const int64_t H = cp->h, D = cp->d, rep = H / cp->hkv, n = cp->tl, p0 = kv->p0;
	const int64_t kvd = cp->hkv * D, qd = H * D, stride = kv->capacity + D;
	const float scale = 1.0f / sqrtf((float)D);
	const int64_t ntask = n * H, work = n * H * (p0 + n) * D;
	const int nt = work < 65536 ? 1 : (int)(ntask < kv->nthreads ? ntask : kv->nthreads);

	#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
	for (int64_t task = 0; task < ntask; task++) {
		const int64_t i = task / H, h = task % H, hk = h / rep, nk = p0 + i + 1;
		int64_t j0 = 0;
		const float *qv = q + i * qd + h * D;
		float *s = kv->scores + (int64_t)omp_get_thread_num() * stride;
		float *acc = s + kv->capacity;
		float *o = out + i * qd + h * D;
		float mx = -INFINITY;
		double sum = 0;

		while (kv->doc && kv->doc[j0] != kv->doc[p0 + i])
			j0++;
		for (int64_t j = j0; j < nk; j++) {
			const float *kr = kv->kc + j * kvd + hk * D;
			float dot = 0;

			for (int64_t e = 0; e < D; e++)
				dot += qv[e] * kr[e];
			s[j] = dot * scale;
			if (s[j] > mx)
				mx = s[j];
		}
		for (int64_t e = 0; e < D; e++)
			acc[e] = 0;
		for (int64_t j = j0; j < nk; j++) {
			const float *vr = kv->vc + j * kvd + hk * D;
			const float w = expf(s[j] - mx);

			sum += w;
			for (int64_t e = 0; e < D; e++)
				acc[e] += w * vr[e];
		}
		for (int64_t e = 0; e < D; e++)
			o[e] = (float)(acc[e] / sum);
	}
}

static int kv_fwd(struct titan_cp *cp, float *out, float *lse, const float *q, const float *k,
		  const float *v)
{
	const struct titan_attn_kv *kv = kv_of(cp);
	const int64_t kvd = cp->hkv * cp->d;

	if (k != kv->kc + kv->p0 * kvd || v != kv->vc + kv->p0 * kvd || cp->batch != 1 ||
	    kv->p0 < 0 || kv->p0 + cp->tl > kv->capacity)
		return titan_error(TITAN_E_INVALID, "kv-cache attention: the chunk of %lld tokens "
				   "at position %lld is not the cache's rows there (capacity %lld)",
				   (long long)cp->tl, (long long)kv->p0, (long long)kv->capacity);
	if (kv->p0 == 0) {
		const struct titan_attn_dims ad = {1, cp->tl, cp->h, cp->hkv, cp->d, kv->doc};

		return cp->be->ops->attention_fwd(cp->be, out, lse, q, k, v, &ad);
	}
	attend_cache(kv, out, q);
	return 0;
}

static int kv_bwd(struct titan_cp *cp, float *dq, float *dk, float *dv, const float *dout,
		  const float *q, const float *k, const float *v, const float *out,
		  const float *lse)
{
	(void)cp, (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)out;
	(void)lse;
	return titan_error(TITAN_E_UNSUPPORTED, "kv-cache attention has no backward");
}

static const struct titan_attn_ops kv_ops = {kv_fwd, kv_bwd};

void titan_attn_kv_init(struct titan_attn_kv *kv, struct titan_backend *be, int64_t h,
			int64_t hkv, int64_t d, int64_t capacity, float *scores, int nthreads)
{
	*kv = (struct titan_attn_kv){
		.cp = {.attn = &kv_ops, .be = be, .rank = 0, .size = 1, .batch = 1, .h = h,
		       .hkv = hkv, .d = d},
		.capacity = capacity, .scores = scores, .nthreads = nthreads > 0 ? nthreads : 1,
	};
}
