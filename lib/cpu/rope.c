/*
 * rope.c — rotary position embedding as torchtitan's llama3 model.py:
 * precompute_freqs_cis (with apply_scaling, Llama 3.1) and
 * apply_rotary_emb (view_as_complex on adjacent pairs times freqs_cis),
 * plus its adjoint for backward.
 */
#include "cpu_impl.h"

#include <math.h>
#include <string.h>

int titan_rope_freqs(float *freqs, int64_t seq, int64_t head_dim,
		     double theta, const struct titan_rope_scaling *sc)
{
	if (head_dim <= 0 || head_dim % 2 != 0 || seq < 0 || !(theta > 0.0))
		return titan_error(TITAN_E_INVALID,
				   "rope: head_dim %lld must be even and positive, seq %lld >= 0, theta %g > 0",
				   (long long)head_dim, (long long)seq, theta);
	if (sc && !(sc->factor > 0.0 && sc->low_freq_factor > 0.0 &&
		    sc->high_freq_factor >= sc->low_freq_factor &&
		    sc->original_max_position > 0.0))
		return titan_error(TITAN_E_INVALID,
				   "rope scaling: need factor > 0, 0 < low_freq_factor <= high_freq_factor, original_max_position > 0");
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
			/* low = high (Llama 4): no band between them to smooth */
			if (wl >= high_wl && wl <= low_wl && sc->high_freq_factor > sc->low_freq_factor)
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

int titan_rope_freqs_yarn(float *freqs, int64_t seq, int64_t head_dim, double theta,
			  double factor, double beta_fast, double beta_slow,
			  int64_t original_seq_len)
{
	int rc = titan_rope_freqs(freqs, seq, head_dim, theta, NULL);
	const int64_t half = head_dim / 2;
	double low, high;

	if (rc < 0 || !(factor > 1.0))
		return rc;
	if (!(beta_fast > 0.0) || !(beta_slow > 0.0) || original_seq_len <= 0)
		return titan_error(TITAN_E_INVALID, "rope: YaRN needs beta_fast %g, beta_slow %g "
				   "and original_seq_len %lld positive", beta_fast, beta_slow,
				   (long long)original_seq_len);
	/* find_correction_dim, in Python's double arithmetic */
	low = floor((double)head_dim * log((double)original_seq_len / (beta_fast * 2.0 * M_PI)) /
		    (2.0 * log(theta)));
	high = ceil((double)head_dim * log((double)original_seq_len / (beta_slow * 2.0 * M_PI)) /
		    (2.0 * log(theta)));
	low = low > 0.0 ? low : 0.0;
	high = high < (double)(head_dim - 1) ? high : (double)(head_dim - 1);
	if (low == high)
		high += 0.001;
	for (int64_t i = 0; i < half; i++) {
		float e = (float)(2 * i) / (float)head_dim;
		float f = 1.0f / (float)pow((double)(float)theta, (double)e);
		float r = ((float)i - (float)low) / (float)(high - low);

		r = r < 0.0f ? 0.0f : r > 1.0f ? 1.0f : r;
		f = f / (float)factor * r + f * (1.0f - r);
		for (int64_t t = 0; t < seq; t++) {
			float a = (float)t * f;
			freqs[(t * half + i) * 2] = cosf(a);
			freqs[(t * half + i) * 2 + 1] = sinf(a);
		}
	}
	return 0;
}

/* One row of nh heads, in place: pair i of a head is (a, b) = (p[2i],
 * p[2i+1]) and (c, s) its frequency; forward (a + ib)(c + is), inverse
 * (a + ib)(c − is).  Pairs from `i0` on. */
static inline TITAN_CPU_BODY void rope_pairs(float *p, const float *fc, int64_t i0,
					     int64_t half, bool inverse)
{
	for (int64_t i = i0; i < half; i++) {
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

static void rope_row_scalar(float *xr, const float *fc, int64_t nh, int64_t head_dim,
			    bool inverse)
{
	for (int64_t h = 0; h < nh; h++)
		rope_pairs(xr + h * head_dim, fc, 0, head_dim / 2, inverse);
}

#if TITAN_CPU_MULTI_ISA
/* The AVX-512 path: sixteen floats at a time as out = p·C + swap(p)·S
 * with C = (c, c) and S = (−s, s) (inverse: (s, −s)) per pair: that is
 * a·c + b·(−s) = a·c − b·s and b·c + a·s = a·s + b·c (x + (−y) is x − y
 * and + commutes in IEEE arithmetic, products are rounded alone with
 * contraction off), so every lane has the scalar loop's bits.  (The same
 * vectors on the baseline and AVX2 paths are split by GCC into slower
 * code than the scalar loop, so those keep it.) */
typedef float rope_v16 __attribute__((vector_size(64)));
typedef int32_t rope_i16 __attribute__((vector_size(64)));

__attribute__((target("arch=x86-64-v4")))
static void rope_row_avx512(float *xr, const float *fc, int64_t nh, int64_t head_dim,
			    bool inverse)
{
	const rope_i16 dup_c = {0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14};
	const rope_i16 dup_s = {1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13, 13, 15, 15};
	const rope_i16 swap = {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14};
	const float e = inverse ? 1.0f : -1.0f;
	const rope_v16 sgn = {e, -e, e, -e, e, -e, e, -e, e, -e, e, -e, e, -e, e, -e};
	const int64_t vend = head_dim / 16 * 16;

	for (int64_t h = 0; h < nh; h++) {
		float *p = xr + h * head_dim;
		for (int64_t j = 0; j < vend; j += 16) {
			rope_v16 x, f;
			memcpy(&x, p + j, sizeof(x));
			memcpy(&f, fc + j, sizeof(f));
			const rope_v16 cv = __builtin_shuffle(f, dup_c);
			const rope_v16 sv = __builtin_shuffle(f, dup_s) * sgn;
			const rope_v16 y = x * cv + __builtin_shuffle(x, swap) * sv;
			memcpy(p + j, &y, sizeof(y));
		}
		rope_pairs(p, fc, vend / 2, head_dim / 2, inverse);
	}
}
#endif

static void rope_row(float *xr, const float *fc, int64_t nh, int64_t head_dim, bool inverse)
{
#if TITAN_CPU_MULTI_ISA
	if (titan_cpu_isa == TITAN_CPU_ISA_AVX512) {
		rope_row_avx512(xr, fc, nh, head_dim, inverse);
		return;
	}
#endif
	rope_row_scalar(xr, fc, nh, head_dim, inverse);
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
	for (int64_t r = 0; r < rows; r++)
		rope_row(x + r * nh * head_dim, freqs + (r % seq) * half * 2, nh, head_dim, inverse);
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
