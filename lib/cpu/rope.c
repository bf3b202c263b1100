/*
 * rope.c — rotary position embedding as torchtitan's llama3 model.py:
 * precompute_freqs_cis (with apply_scaling, Llama 3.1) and
 * apply_rotary_emb (view_as_complex on adjacent pairs times freqs_cis),
 * plus its adjoint for backward.
 */
#include "cpu_impl.h"

#include <math.h>

int titan_rope_freqs(float *freqs, int64_t seq, int64_t head_dim,
		     double theta, const struct titan_rope_scaling *sc)
{
	if (head_dim <= 0 || head_dim % 2 != 0 || seq < 0 || !(theta > 0.0))
		return titan_error(TITAN_E_INVALID,
				   "rope: head_dim %lld must be even and positive, seq %lld >= 0, theta %g > 0",
				   (long long)head_dim, (long long)seq, theta);
	if (sc && !(sc->factor > 0.0 && sc->low_freq_factor > 0.0 &&
		    sc->high_freq_factor > sc->low_freq_factor &&
		    sc->original_max_position > 0.0))
		return titan_error(TITAN_E_INVALID,
				   "rope scaling: need factor > 0, 0 < low_freq_factor < high_freq_factor, original_max_position > 0");
	int64_t half = head_dim / 2;
	for (int64_t i = 0; i < half; i++) {
		/* 1.0 / (theta ** (arange(0, dim, 2).float() / dim)), in float */
		float e = (float)(2 * i) / (float)head_dim;
		float f = 1.0f / (float)pow((double)(float)theta, (double)e);
		if (sc) {
			/* apply_scaling: Python scalars meet float tensors as floats */
			float factor = (float)sc->factor;
			float low_wl = (float)(sc->original_max_position / sc->low_freq_factor);
			float high_wl = (float)(sc->original_max_position / sc->high_freq_factor);
			float wl = (float)(2.0 * M_PI) / f;
			float nf = wl > low_wl ? f / factor : f;
			float s = ((float)sc->original_max_position / wl -
				   (float)sc->low_freq_factor) /
				  (float)(sc->high_freq_factor - sc->low_freq_factor);
			if (wl >= high_wl && wl <= low_wl)
				nf = (1.0f - s) * nf / factor + s * nf;
			f = nf;
		}
		/* torch.outer(t, freqs) in float, then torch.polar */
		for (int64_t t = 0; t < seq; t++) {
			float a = (float)t * f;
			freqs[(t * half + i) * 2] = cosf(a);
			freqs[(t * half + i) * 2 + 1] = sinf(a);
		}
	}
	return 0;
}

static int rope_apply(struct titan_backend *be, float *x, const float *freqs,
		      int64_t batch, int64_t seq, int64_t nh, int64_t head_dim,
		      bool inverse)
{
	if (head_dim <= 0 || head_dim % 2 != 0)
		return titan_error(TITAN_E_INVALID, "rope: head_dim %lld must be even",
				   (long long)head_dim);
	int64_t half = head_dim / 2, rows = batch * seq;
	int nt = titan_cpu_threads(be, rows * nh * head_dim / 16384);
	#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const float *fc = freqs + (r % seq) * half * 2;
		float *xr = x + r * nh * head_dim;
		for (int64_t h = 0; h < nh; h++) {
			float *p = xr + h * head_dim;
			for (int64_t i = 0; i < half; i++) {
				float a = p[2 * i], b = p[2 * i + 1];
				float c = fc[2 * i], s = fc[2 * i + 1];
				if (!inverse) {
					/* (a + ib)(c + is) */
					p[2 * i] = a * c - b * s;
					p[2 * i + 1] = a * s + b * c;
				} else {
					/* (a + ib)(c − is): autograd's grad·conj(freqs_cis) */
					p[2 * i] = a * c + b * s;
					p[2 * i + 1] = b * c - a * s;
				}
			}
		}
	}
	return 0;
}

int titan_cpu_rope_fwd(struct titan_backend *be, float *x, const float *freqs,
		       int64_t batch, int64_t seq, int64_t nh, int64_t head_dim)
{
	return rope_apply(be, x, freqs, batch, seq, nh, head_dim, false);
}

int titan_cpu_rope_bwd(struct titan_backend *be, float *dx, const float *freqs,
		       int64_t batch, int64_t seq, int64_t nh, int64_t head_dim)
{
	return rope_apply(be, dx, freqs, batch, seq, nh, head_dim, true);
}
