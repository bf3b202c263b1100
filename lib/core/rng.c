/*
 * rng.c — counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11;
 * the Random123 / cuRAND generator), position-addressed fills for weight
 * initialisation (uniform, normal, PyTorch's trunc_normal_ as used by
 * torchtitan's init_weights) and a double-precision erfinv.
 *
 * Counter layout: key = (seed lo, seed hi); counter words =
 * (offset lo, offset hi, stream lo, stream hi).  A CUDA kernel that uses the
 * same layout reproduces these numbers bit for bit (uniform, u32) or to
 * libm accuracy (normal, trunc_normal).
 */
#include "titan/core.h"

#include <math.h>

/* M_PI and M_SQRT2 are POSIX, not C17. */
#define TWO_PI 6.283185307179586476925286766559
#define SQRT2 1.4142135623730950488016887242097

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void philox_round(uint32_t c[4], const uint32_t k[2])
{
	uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
	uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
	uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
	uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
	uint32_t n0 = hi1 ^ c[1] ^ k[0];
	uint32_t n2 = hi0 ^ c[3] ^ k[1];
	c[0] = n0;
	c[1] = lo1;
	c[2] = n2;
	c[3] = lo0;
}

/* The raw block function on 32-bit words (exposed to the test through the
 * 64-bit wrapper below; kept separate so the mapping is visible). */
static inline void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
				 uint32_t out[4])
{
	uint32_t c[4] = { ctr[0], ctr[1], ctr[2], ctr[3] };
	uint32_t k[2] = { key[0], key[1] };

	for (int r = 0; r < 10; r++) {
		if (r) {
			k[0] += PHILOX_W0;
			k[1] += PHILOX_W1;
		}
		philox_round(c, k);
	}
	out[0] = c[0];
	out[1] = c[1];
	out[2] = c[2];
	out[3] = c[3];
}

void titan_philox4x32(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4])
{
	const uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
	const uint32_t ctr[4] = { (uint32_t)counter, (uint32_t)(counter >> 32),
				  (uint32_t)stream, (uint32_t)(stream >> 32) };
	philox4x32_10(ctr, key, out);
}

void titan_rng_init(struct titan_rng *r, uint64_t seed, uint64_t stream)
{
	r->seed = seed;
	r->stream = stream;
	r->offset = 0;
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

uint64_t titan_rng_stream_id(const char *name, uint64_t index)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */

	for (const unsigned char *p = (const unsigned char *)(name ? name : ""); *p; p++) {
		h ^= *p;
		h *= 0x100000001b3ull;
	}
	return splitmix64(h ^ splitmix64(index));
}

static inline void block(const struct titan_rng *r, uint64_t counter, uint32_t w[4])
{
	titan_philox4x32(r->seed, r->stream, counter, w);
}

uint32_t titan_rng_u32(struct titan_rng *r)
{
	uint32_t w[4];
	block(r, r->offset++, w);
	return w[0];
}

static inline uint64_t words64(const uint32_t w[4])
{
	return (uint64_t)w[0] | (uint64_t)w[1] << 32;
}

uint64_t titan_rng_u64(struct titan_rng *r)
{
	uint32_t w[4];
	block(r, r->offset++, w);
	return words64(w);
}

/* 53-bit uniform in [0, 1) from words 0 and 1. */
static inline double u53(const uint32_t w[4])
{
	return (double)(words64(w) >> 11) * 0x1p-53;
}

double titan_rng_uniform(struct titan_rng *r)
{
	uint32_t w[4];
	block(r, r->offset++, w);
	return u53(w);
}

uint64_t titan_rng_below(struct titan_rng *r, uint64_t n)
{
	TITAN_ASSERT(n > 0);
	/* Reject the low (2^64 mod n) values so every residue is equally likely. */
	uint64_t threshold = (0 - n) % n;
	for (;;) {
		uint64_t x = titan_rng_u64(r);
		if (x >= threshold)
			return x % n;
	}
}

void titan_rng_fill_uniform(const struct titan_rng *r, uint64_t first, float *out,
			    size_t n, float lo, float hi)
{
	uint32_t w[4];
	double dlo = lo, span = (double)hi - (double)lo;
	float below_hi = nextafterf(hi, lo);

	for (size_t j = 0; j < n; j++) {
		block(r, first + j, w);
		double u = (double)(w[0] >> 8) * 0x1p-24; /* [0, 1), 24 bits */
		float x = (float)(dlo + span * u);
		/* Rounding to float can land on hi when hi - lo is tiny. */
		if (x >= hi && hi > lo)
			x = below_hi;
		out[j] = x;
	}
}

/* Box-Muller on words 0 and 1: u1 in (0, 1] so log() stays finite. */
static inline double normal_from(const uint32_t w[4])
{
	double u1 = ((double)w[0] + 1.0) * 0x1p-32;
	double u2 = (double)w[1] * 0x1p-32;
	return sqrt(-2.0 * log(u1)) * cos(TWO_PI * u2);
}

void titan_rng_fill_normal(const struct titan_rng *r, uint64_t first, float *out,
			   size_t n, float mean, float std)
{
	uint32_t w[4];

	for (size_t j = 0; j < n; j++) {
		block(r, first + j, w);
		out[j] = (float)((double)mean + (double)std * normal_from(w));
	}
}

static double norm_cdf(double x)
{
	return 0.5 * (1.0 + erf(x / SQRT2));
}

void titan_rng_fill_trunc_normal(const struct titan_rng *r, uint64_t first, float *out,
				 size_t n, float mean, float std, float a, float b)
{
	/* torch.nn.init.trunc_normal_: uniform in [2l-1, 2u-1], erfinv, scale,
	 * shift, clamp; computed in double, rounded once to float. */
	if (!(std > 0)) { /* degenerate: every value is the clamped mean */
		float m = mean < a ? a : mean > b ? b : mean;
		for (size_t j = 0; j < n; j++)
			out[j] = m;
		return;
	}
	const double l = norm_cdf(((double)a - mean) / std);
	const double u = norm_cdf(((double)b - mean) / std);
	const double lo = 2.0 * l - 1.0, span = 2.0 * (u - l);
	const double scale = (double)std * SQRT2;
	uint32_t w[4];

	for (size_t j = 0; j < n; j++) {
		block(r, first + j, w);
		double x = titan_erfinv(lo + span * u53(w)) * scale + mean;
		if (!(x >= a)) /* also catches NaN */
			x = a;
		if (x > b)
			x = b;
		out[j] = (float)x;
	}
}

/*
 * erfinv: Giles' single-precision approximation ("Approximating the erfinv
 * function", GPU Computing Gems, 2011) as a start, then Halley steps.  The
 * start is good to ~1e-7 for |x| < 1 - 2^-24, so one or two steps reach
 * double precision; closer to 1 the polynomial is extrapolated and a few
 * more steps are needed.  In the tails the step solves erfc(y) = 1 - x
 * (1 - x is exact for x >= 0.5), so precision is not lost near |x| = 1.
 */
double titan_erfinv(double x)
{
	if (isnan(x) || x < -1.0 || x > 1.0)
		return NAN;
	if (x == 1.0)
		return INFINITY;
	if (x == -1.0)
		return -INFINITY;
	if (x == 0.0)
		return x; /* keeps the sign of -0 */

	const double sign = x < 0 ? -1.0 : 1.0;
	const double ax = fabs(x);
	double w = -log((1.0 - ax) * (1.0 + ax)), p;

	if (w < 5.0) {
		w -= 2.5;
		p = 2.81022636e-08;
		p = 3.43273939e-07 + p * w;
		p = -3.5233877e-06 + p * w;
		p = -4.39150654e-06 + p * w;
		p = 0.00021858087 + p * w;
		p = -0.00125372503 + p * w;
		p = -0.00417768164 + p * w;
		p = 0.246640727 + p * w;
		p = 1.50140941 + p * w;
	} else {
		w = sqrt(w) - 3.0;
		p = -0.000200214257;
		p = 0.000100950558 + p * w;
		p = 0.00134934322 + p * w;
		p = -0.00367342844 + p * w;
		p = 0.00573950773 + p * w;
		p = -0.0076224613 + p * w;
		p = 0.00943887047 + p * w;
		p = 1.00167406 + p * w;
		p = 2.83297682 + p * w;
	}
	double y = p * ax;

	/* f(y) = erf(y) - ax, f' = 2/sqrt(pi) e^{-y^2}, f'' = -2y f'. */
	const double two_over_sqrtpi = 1.1283791670955126;
	for (int it = 0; it < 12; it++) {
		double f = ax < 0.5 ? erf(y) - ax : (1.0 - ax) - erfc(y);
		double d = f / (two_over_sqrtpi * exp(-y * y));
		y -= d / (1.0 + y * d);
		/* Halley converges cubically: after a relative step below 1e-7
		 * the remaining error is far below an ulp. */
		if (fabs(d) <= 1e-7 * y)
			break;
	}
	return sign * y;
}
