/*
 * loss.c — the output layer fused with cross-entropy on the CPU: logits
 * are made `chunk` tokens at a time (torchtitan HEAD's ChunkedLossWrapper
 * idea), turned into the loss and, in the same pass, into the gradients of
 * the output weight and of the final-norm output.  The loss is torchtitan's
 * cross_entropy(logits.float(), labels, reduction="sum", ignore_index=-100).
 */
#include "cpu_impl.h"

#include <math.h>
#include <string.h>

#define ROWS_GRAIN 4

/* One valid row: returns logsumexp(z) − z[y] (max-shifted, exp sum in
 * double) and, when `grads`, leaves dz = (softmax − onehot(y))·gs in z
 * (otherwise z is left holding exp(z − max)). */
static inline TITAN_CPU_BODY double
ce_row_body(float *z, int64_t v, int32_t y, float gs, bool grads)
{
	float mx = z[0];
	#pragma omp simd reduction(max : mx)
	for (int64_t j = 0; j < v; j++)
		mx = z[j] > mx ? z[j] : mx;
	const float zy = z[y];
	#pragma omp simd
	for (int64_t j = 0; j < v; j++)
		z[j] = titan_cpu_expf(z[j] - mx);
	const double sum = titan_cpu_sum8d(z, v);
	if (grads) {
		const float inv = (float)(1.0 / sum);
		#pragma omp simd
		for (int64_t j = 0; j < v; j++)
			z[j] = z[j] * inv * gs;
		z[y] -= gs;
	}
	/* −log_softmax[y] = logsumexp − z_y */
	return ((double)mx + log(sum)) - (double)zy;
}
TITAN_CPU_DISPATCH(double, ce_row, (float *z, int64_t v, int32_t y, float gs, bool grads),
		   (z, v, y, gs, grads))

/* chunk·v logits (fp32) and chunk row losses (fp64), both live at once */
void titan_cpu_classifier_ce_ws(int64_t n, int64_t v, int64_t chunk, int64_t *logits,
				int64_t *rows)
{
	if (n <= 0) {
		*logits = *rows = 0;
		return;
	}
	if (chunk <= 0 || chunk > n)
		chunk = n;
	*logits = titan_cpu_ws_mul(titan_cpu_ws_mul(chunk, v), (int64_t)sizeof(float));
	*rows = titan_cpu_ws_mul(chunk, (int64_t)sizeof(double));
}

int titan_cpu_classifier_ce(struct titan_backend *be, double *loss_sum,
			    int64_t *n_valid, float *dh, float *dw,
			    const float *h, const float *w,
			    const int32_t *labels, int64_t n, int64_t c,
			    int64_t v, float grad_scale, int64_t chunk)
{
	const bool grads = dh != NULL;
	int rc = 0;

	*loss_sum = 0.0;
	*n_valid = 0;
	if ((dh == NULL) != (dw == NULL))
		return titan_error(TITAN_E_INVALID, "classifier_ce: dh and dw must both be given or both be NULL");
	if (c <= 0 || v <= 0 || n < 0)
		return titan_error(TITAN_E_INVALID, "classifier_ce: bad sizes N=%lld C=%lld V=%lld",
				   (long long)n, (long long)c, (long long)v);
	for (int64_t i = 0; i < n; i++)
		if (labels[i] >= v)
			return titan_error(TITAN_E_INVALID,
					   "label %d at position %lld is outside the vocabulary (size %lld)",
					   (int)labels[i], (long long)i, (long long)v);
	if (n == 0)
		return 0;
	int64_t zb, rb;
	titan_cpu_classifier_ce_ws(n, v, chunk, &zb, &rb);
	if (chunk <= 0 || chunk > n)
		chunk = n;
	float *z = zb < 0 ? NULL : titan_cpu_workspace(be, (size_t)zb);
	double *rl = rb < 0 ? NULL : titan_cpu_workspace(be, (size_t)rb);
	if (!z || !rl) {
		rc = TITAN_E_NOMEM;
		goto fail;
	}
	double total = 0.0;
	int64_t count = 0;
	for (int64_t n0 = 0; n0 < n; n0 += chunk) {
		const int64_t cn = n0 + chunk < n ? chunk : n - n0;
		const float *hc = h + n0 * c;
		const int32_t *lc = labels + n0;
		/* z[cn,V] = h[cn,C] · W[V,C]^T */
		rc = titan_cpu_sgemm(be, false, true, cn, v, c, 1.0f, hc, c, w, c, 0.0f, z, v);
		if (rc < 0)
			goto fail;
		int nt = titan_cpu_threads(be, cn / ROWS_GRAIN);
		#pragma omp parallel for num_threads(nt) schedule(static)
		for (int64_t r = 0; r < cn; r++) {
			float *zr = z + r * v;
			if (lc[r] >= 0) {
				rl[r] = ce_row(zr, v, lc[r], grad_scale, grads);
			} else {
				rl[r] = 0.0;
				if (grads)
					memset(zr, 0, (size_t)v * sizeof(float));
			}
		}
		for (int64_t r = 0; r < cn; r++) {
			if (lc[r] >= 0) {
				total += rl[r];
				count++;
			}
		}
		if (grads) {
			/* dh[cn,C] = dz[cn,V] · W[V,C];  dW[V,C] += dz^T · h */
			rc = titan_cpu_sgemm(be, false, false, cn, c, v, 1.0f, z, v, w, c,
					     0.0f, dh + n0 * c, c);
			if (rc < 0)
				goto fail;
			rc = titan_cpu_sgemm(be, true, false, v, c, cn, 1.0f, z, v, hc, c,
					     1.0f, dw, c);
			if (rc < 0)
				goto fail;
		}
	}
	*loss_sum = total;
	*n_valid = count;
fail:
	titan_cpu_workspace_free(be, rl);
	titan_cpu_workspace_free(be, z);
	return rc;
}
