/*
 * cp_attn.c — causal attention for context parallelism: this rank's
 * queries, at their places in the sequence, against the keys and values of
 * the whole sequence (all-gathered over the context-parallel group:
 * torchtitan's rotate_method "allgather").  Exact softmax per query row
 * (scores, max, exp, sum in double), the log-sum-exp kept for backward,
 * which recomputes the probabilities from it.  No T x T matrix is stored:
 * one row of scores per task.
 *
 * Layouts: q, out [B, Tl, H, D]; kf, vf [B, T, Hkv, D]; lse [B, H, Tl];
 * pos[t] < T is the position of local token t (the same for every batch
 * row); query head h reads kv head h / (H / Hkv) (GQA).
 */
#include "cp_attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"

int titan_cp_attn_fwd(float *out, float *lse, const float *q, const float *kf, const float *vf,
		      const int64_t *pos, const struct titan_cp_attn_dims *d)
{
	const int64_t B = d->batch, Tl = d->tl, T = d->t, H = d->h, Hkv = d->hkv, D = d->d;
	const int64_t grp = H / Hkv;
	const double scale = 1.0 / sqrt((double)D);
	int failed = 0;

#pragma omp parallel
	{
		double *s = malloc((size_t)T * sizeof(*s));
		double *acc = malloc((size_t)D * sizeof(*acc));

		if (!s || !acc) {
#pragma omp atomic write
			failed = 1;
		}
#pragma omp for collapse(2) schedule(static)
		for (int64_t bh = 0; bh < B * H; bh++)
			for (int64_t t = 0; t < Tl; t++) {
				const int64_t b = bh / H, h = bh % H, hk = h / grp, n = pos[t] + 1;
				const float *qt = q + ((b * Tl + t) * H + h) * D;
				double mx = -INFINITY, sum = 0;

				if (!s || !acc)
					continue;
				for (int64_t j = 0; j < n; j++) {
					const float *kj = kf + ((b * T + j) * Hkv + hk) * D;
					double x = 0;

					for (int64_t e = 0; e < D; e++)
						x += (double)qt[e] * (double)kj[e];
					s[j] = x * scale;
					mx = s[j] > mx ? s[j] : mx;
				}
				memset(acc, 0, (size_t)D * sizeof(*acc));
				for (int64_t j = 0; j < n; j++) {
					const float *vj = vf + ((b * T + j) * Hkv + hk) * D;
					const double p = exp(s[j] - mx);

					sum += p;
					for (int64_t e = 0; e < D; e++)
						acc[e] += p * (double)vj[e];
				}
				for (int64_t e = 0; e < D; e++)
					out[((b * Tl + t) * H + h) * D + e] = (float)(acc[e] / sum);
				lse[(b * H + h) * Tl + t] = (float)(mx + log(sum));
			}
		free(s);
		free(acc);
	}
	return failed ? titan_error(TITAN_E_NOMEM, "out of memory in context-parallel attention")
		      : 0;
}

int titan_cp_attn_bwd(float *dq, float *dkf, float *dvf, const float *dout, const float *q,
		      const float *kf, const float *vf, const float *out, const float *lse,
		      const int64_t *pos, const struct titan_cp_attn_dims *d)
{
	const int64_t B = d->batch, Tl = d->tl, T = d->t, H = d->h, Hkv = d->hkv, D = d->d;
	const int64_t grp = H / Hkv;
	const double scale = 1.0 / sqrt((double)D);
	int failed = 0;

	memset(dkf, 0, (size_t)(B * T * Hkv * D) * sizeof(float));
	memset(dvf, 0, (size_t)(B * T * Hkv * D) * sizeof(float));
	/* one task per (batch row, kv head): it owns that slice of dk and dv */
#pragma omp parallel
	{
		double *g = malloc((size_t)D * sizeof(*g));

		if (!g) {
#pragma omp atomic write
			failed = 1;
		}
#pragma omp for schedule(static)
		for (int64_t bk = 0; bk < B * Hkv; bk++) {
			const int64_t b = bk / Hkv, hk = bk % Hkv;

			if (!g)
				continue;
			for (int64_t h = hk * grp; h < (hk + 1) * grp; h++)
				for (int64_t t = 0; t < Tl; t++) {
					const int64_t i = (b * Tl + t) * H + h, n = pos[t] + 1;
					const float *qt = q + i * D, *ot = out + i * D, *gt = dout + i * D;
					const double l = lse[(b * H + h) * Tl + t];
					double dd = 0;

					for (int64_t e = 0; e < D; e++)
						dd += (double)gt[e] * (double)ot[e];
					memset(g, 0, (size_t)D * sizeof(*g));
					for (int64_t j = 0; j < n; j++) {
						const int64_t kj = ((b * T + j) * Hkv + hk) * D;
						double x = 0, dp = 0;

						for (int64_t e = 0; e < D; e++) {
							x += (double)qt[e] * (double)kf[kj + e];
							dp += (double)gt[e] * (double)vf[kj + e];
						}
						const double p = exp(x * scale - l);
						const double ds = p * (dp - dd) * scale;

						for (int64_t e = 0; e < D; e++) {
							g[e] += ds * (double)kf[kj + e];
							dkf[kj + e] += (float)(ds * (double)qt[e]);
							dvf[kj + e] += (float)(p * (double)gt[e]);
						}
					}
					for (int64_t e = 0; e < D; e++)
						dq[i * D + e] = (float)g[e];
				}
		}
		free(g);
	}
	return failed ? titan_error(TITAN_E_NOMEM, "out of memory in context-parallel attention")
		      : 0;
}
