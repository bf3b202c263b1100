/*
 * optim.c — torch.optim.AdamW on the CPU (torchtitan's optimizer:
 * components/optimizer.py with implementation "fused"/"foreach"/"for-loop",
 * which agree in fp32) and the sum of squares behind the global grad norm.
 *
 * The AdamW arithmetic is PyTorch's _single_tensor_adamw / the CPU fused
 * kernel (aten/src/ATen/native/cpu/FusedAdamKernel.cpp) for fp32 tensors:
 * Python-float hyper-parameters become float constants, bias corrections
 * and the step size are computed in double, lerp_ is an FMA.
 */
#include "cpu_impl.h"

#include <math.h>

#define GRAIN 16384

struct adamw_consts {
	bool decay, small;
	float keep, lc, b2, c2, neg_step, bc2_sqrt, eps, grad_mul;
};

/* One element; `small` (loop-invariant) picks lerp's form. */
#define ADAMW_ELEM(i, base) \
	do { \
		const float gi = g[i] * gm; \
		const float pi = p[i] * keep; /* × 1 is exact when wd = 0 */ \
		const float mo = m[i]; \
		const float mi = fmaf(lc, gi - mo, (base)); \
		const float vi = v[i] * b2 + c2 * gi * gi; \
		const float denom = sqrtf(vi) / bc2_sqrt + eps; \
		p[i] = pi + neg_step * mi / denom; \
		m[i] = mi; \
		v[i] = vi; \
	} while (0)

static inline TITAN_CPU_BODY void
adamw_range_body(float *restrict p, float *restrict m, float *restrict v,
		 const float *restrict g, int64_t n, const struct adamw_consts *k)
{
	const float keep = k->decay ? k->keep : 1.0f, lc = k->lc, b2 = k->b2;
	const float c2 = k->c2, neg_step = k->neg_step, bc2_sqrt = k->bc2_sqrt;
	const float eps = k->eps, gm = k->grad_mul;

	if (k->small) {
		#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			ADAMW_ELEM(i, mo);
	} else {
		#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			ADAMW_ELEM(i, gi);
	}
}
TITAN_CPU_DISPATCH_VOID(adamw_range, (float *restrict p, float *restrict m, float *restrict v,
			const float *restrict g, int64_t n, const struct adamw_consts *k),
			(p, m, v, g, n, k))

int titan_cpu_adamw_step(struct titan_backend *be, float *p, float *m,
			 float *v, const float *g, int64_t n,
			 const struct titan_adamw_hparams *hp, int64_t step,
			 float grad_mul)
{
	if (step < 1)
		return titan_error(TITAN_E_INVALID, "adamw: step %lld (must be >= 1)",
				   (long long)step);
	/* exp_avg.lerp_(grad, 1 − β1): fma(w, g − m, m) for |w| < 0.5, else
	 * fma(w − 1, g − m, g) (ATen's lerp) */
	const float lw = (float)(1.0 - hp->beta1);
	const double bc1 = 1.0 - pow(hp->beta1, (double)step);
	const double bc2 = 1.0 - pow(hp->beta2, (double)step);
	const struct adamw_consts k = {
		.decay = hp->weight_decay != 0.0,
		.small = fabsf(lw) < 0.5f,
		.keep = (float)(1.0 - hp->lr * hp->weight_decay),
		.lc = fabsf(lw) < 0.5f ? lw : lw - 1.0f,
		.b2 = (float)hp->beta2,
		.c2 = (float)(1.0 - hp->beta2),
		.neg_step = (float)(-(hp->lr / bc1)),
		.bc2_sqrt = (float)sqrt(bc2),
		.eps = (float)hp->eps,
		.grad_mul = grad_mul,
	};
	const int64_t nch = (n + GRAIN - 1) / GRAIN;
	int nt = titan_cpu_threads(be, nch);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t ch = 0; ch < nch; ch++) {
		const int64_t i0 = ch * GRAIN, len = i0 + GRAIN < n ? GRAIN : n - i0;
		adamw_range(p + i0, m + i0, v + i0, g + i0, len, &k);
	}
	return 0;
}

/* Σ x² of a chunk in double, 8 lanes (titan_cpu_dot8d): vectorised, and
 * no chain of dependent additions through the whole chunk. */
static inline TITAN_CPU_BODY double
sumsq_range_body(const float *x, int64_t n)
{
	return titan_cpu_dot8d(x, x, n);
}
TITAN_CPU_DISPATCH(double, sumsq_range, (const float *x, int64_t n),
		   (x, n))

/* a partial sum (double) per TITAN_SUMSQ_CHUNK elements */
int64_t titan_cpu_sumsq_ws(int64_t n)
{
	const int64_t nch = (n + TITAN_SUMSQ_CHUNK - 1) / TITAN_SUMSQ_CHUNK;

	return n > 0 ? nch * (int64_t)sizeof(double) : 0;
}

int titan_cpu_sumsq(struct titan_backend *be, double *out, const float *x,
		    int64_t n)
{
	const int64_t nch = (n + TITAN_SUMSQ_CHUNK - 1) / TITAN_SUMSQ_CHUNK;

	*out = 0.0;
	if (n <= 0)
		return 0;
	double *part = titan_cpu_workspace(be, (size_t)titan_cpu_sumsq_ws(n));
	if (!part)
		return TITAN_E_NOMEM;
	int nt = titan_cpu_threads(be, nch);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t ch = 0; ch < nch; ch++) {
		const int64_t i0 = ch * TITAN_SUMSQ_CHUNK;
		const int64_t i1 = i0 + TITAN_SUMSQ_CHUNK < n ? i0 + TITAN_SUMSQ_CHUNK : n;
		part[ch] = sumsq_range(x + i0, i1 - i0);
	}
	double s = 0.0;
	for (int64_t ch = 0; ch < nch; ch++)
		s += part[ch];
	titan_cpu_workspace_free(be, part);
	*out = s;
	return 0;
}

/* ---- the multi-tensor ops: the per-tensor ones in a loop --------------- */

int titan_tensor_spans_check(const char *op, const struct titan_tensor_span *spans, int n)
{
	if (n < 0)
		return titan_error(TITAN_E_INVALID, "%s: %d tensors", op, n);
	for (int i = 0; i < n; i++)
		if (spans[i].offset < 0 || spans[i].numel < 0)
			return titan_error(TITAN_E_INVALID, "%s: tensor %d: offset %lld, %lld "
					   "elements", op, i, (long long)spans[i].offset,
					   (long long)spans[i].numel);
	return 0;
}

/* Through be->ops, in tensor order: the workspace each sumsq takes and
 * gives back, the bits, and a wrapping table's view (the op trace, the
 * estimate's measure pass) are the per-tensor loop's. */
int titan_sumsq_multi_loop(struct titan_backend *be, double *out, const float *base,
			   const struct titan_tensor_span *spans, int n)
{
	int rc = titan_tensor_spans_check("sumsq_multi", spans, n);

	for (int i = 0; i < n && rc == 0; i++)
		rc = be->ops->sumsq(be, &out[i], base + spans[i].offset, spans[i].numel);
	return rc;
}

int titan_adamw_multi_loop(struct titan_backend *be, float *p, float *m, float *v,
			   const float *g, const struct titan_tensor_span *spans, int n,
			   const struct titan_adamw_hparams *hp, int64_t step, float grad_mul)
{
	int rc = titan_tensor_spans_check("adamw_multi", spans, n);

	if (rc == 0 && step < 1)
		rc = titan_error(TITAN_E_INVALID, "adamw: step %lld (must be >= 1)",
				 (long long)step);
	for (int i = 0; i < n && rc == 0; i++) {
		const int64_t o = spans[i].offset;
		struct titan_adamw_hparams h = *hp;

		if (spans[i].no_decay)
			h.weight_decay = 0;
		rc = be->ops->adamw_step(be, p + o, m + o, v + o, g + o, spans[i].numel, &h, step,
					 grad_mul);
	}
	return rc;
}
