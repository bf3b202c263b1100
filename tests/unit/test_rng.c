/*
 * test_rng.c — Philox4x32-10 against the Random123 known answers, the
 * counter mapping, split fills equal whole fills, distribution checks of the
 * uniform / normal / truncated normal fills, unbiased below(), erfinv.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"

static void check_block(uint64_t seed, uint64_t stream, uint64_t counter,
			uint32_t e0, uint32_t e1, uint32_t e2, uint32_t e3)
{
	uint32_t w[4];
	titan_philox4x32(seed, stream, counter, w);
	assert_int_equal(w[0], e0);
	assert_int_equal(w[1], e1);
	assert_int_equal(w[2], e2);
	assert_int_equal(w[3], e3);
}

/* Random123 kat_vectors, philox4x32 10 rounds.  Counter words are
 * (counter lo, counter hi, stream lo, stream hi), key = (seed lo, seed hi). */
static void test_known_answers(void **state)
{
	(void)state;
	check_block(0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
	check_block(UINT64_MAX, UINT64_MAX, UINT64_MAX,
		    0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
	check_block(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull,
		    0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

static void test_sequential(void **state)
{
	struct titan_rng r;
	uint32_t w[4];
	(void)state;

	titan_rng_init(&r, 1234, 7);
	assert_true(r.offset == 0);
	for (uint64_t i = 0; i < 100; i++) {
		titan_philox4x32(1234, 7, i, w);
		assert_int_equal(titan_rng_u32(&r), w[0]);
	}
	assert_true(r.offset == 100);
	titan_philox4x32(1234, 7, 100, w);
	assert_true(titan_rng_u64(&r) == ((uint64_t)w[1] << 32 | w[0]));
	titan_philox4x32(1234, 7, 101, w);
	double u = titan_rng_uniform(&r);
	assert_true(u == (double)(((uint64_t)w[1] << 32 | w[0]) >> 11) * 0x1p-53);
	assert_true(r.offset == 102);

	/* Uniform doubles stay in [0, 1) with mean 1/2. */
	double s = 0;
	for (int i = 0; i < 100000; i++) {
		u = titan_rng_uniform(&r);
		assert_true(u >= 0.0 && u < 1.0);
		s += u;
	}
	assert_true(fabs(s / 100000 - 0.5) < 0.005);
}

static void test_determinism_and_independence(void **state)
{
	enum { N = 256 };
	float a[N], b[N], c[N], d[N];
	struct titan_rng r1, r2, r3, r4;
	(void)state;

	titan_rng_init(&r1, 42, 3);
	titan_rng_init(&r2, 42, 3);
	titan_rng_init(&r3, 42, 4);
	titan_rng_init(&r4, 43, 3);
	titan_rng_fill_normal(&r1, 0, a, N, 0, 1);
	titan_rng_fill_normal(&r2, 0, b, N, 0, 1);
	titan_rng_fill_normal(&r3, 0, c, N, 0, 1);
	titan_rng_fill_normal(&r4, 0, d, N, 0, 1);
	assert_memory_equal(a, b, sizeof a);
	int same_c = 0, same_d = 0;
	for (int i = 0; i < N; i++) {
		same_c += a[i] == c[i];
		same_d += a[i] == d[i];
	}
	assert_true(same_c < 2);
	assert_true(same_d < 2);

	/* Sequential draws are reproducible too. */
	titan_rng_init(&r1, 99, 0);
	titan_rng_init(&r2, 99, 0);
	for (int i = 0; i < 1000; i++)
		assert_true(titan_rng_u64(&r1) == titan_rng_u64(&r2));

	/* Stream ids: deterministic, distinct over names and indices, and frozen
	 * (changing the hash changes every initialisation). */
	assert_true(titan_rng_stream_id("layers.0.attention.wq.weight", 0) ==
		    titan_rng_stream_id("layers.0.attention.wq.weight", 0));
	assert_true(titan_rng_stream_id("a", 0) != titan_rng_stream_id("b", 0));
	assert_true(titan_rng_stream_id("a", 0) != titan_rng_stream_id("a", 1));
	assert_true(titan_rng_stream_id("", 0) != titan_rng_stream_id("", 1));
	assert_true(titan_rng_stream_id(NULL, 5) == titan_rng_stream_id("", 5));
	assert_true(titan_rng_stream_id("tok_embeddings.weight", 0) == 0xd825b0c8f65ff7bfull);
}

static void test_split_fill(void **state)
{
	enum { N = 1000, CUT = 300 };
	static float whole[N], part[N];
	struct titan_rng r;
	(void)state;

	titan_rng_init(&r, 2024, titan_rng_stream_id("w", 0));
	titan_rng_fill_uniform(&r, 0, whole, N, -0.5f, 0.5f);
	titan_rng_fill_uniform(&r, 0, part, CUT, -0.5f, 0.5f);
	titan_rng_fill_uniform(&r, CUT, part + CUT, N - CUT, -0.5f, 0.5f);
	assert_memory_equal(whole, part, sizeof whole);

	titan_rng_fill_normal(&r, 0, whole, N, 0.1f, 2.0f);
	titan_rng_fill_normal(&r, 0, part, CUT, 0.1f, 2.0f);
	titan_rng_fill_normal(&r, CUT, part + CUT, N - CUT, 0.1f, 2.0f);
	assert_memory_equal(whole, part, sizeof whole);

	titan_rng_fill_trunc_normal(&r, 0, whole, N, 0, 0.02f, -0.04f, 0.04f);
	titan_rng_fill_trunc_normal(&r, 0, part, CUT, 0, 0.02f, -0.04f, 0.04f);
	titan_rng_fill_trunc_normal(&r, CUT, part + CUT, N - CUT, 0, 0.02f, -0.04f, 0.04f);
	assert_memory_equal(whole, part, sizeof whole);

	/* Many small pieces (as threads or ranks would fill them). */
	for (size_t off = 0; off < N; off += 7)
		titan_rng_fill_trunc_normal(&r, off, part + off, off + 7 <= N ? 7 : N - off,
					    0, 0.02f, -0.04f, 0.04f);
	assert_memory_equal(whole, part, sizeof whole);

	/* A fill at an offset far from 0 uses the 64-bit counter. */
	titan_rng_fill_normal(&r, (1ull << 40) - 3, whole, 6, 0, 1);
	titan_rng_fill_normal(&r, (1ull << 40), part, 3, 0, 1);
	assert_memory_equal(whole + 3, part, 3 * sizeof(float));

	/* The sequential offset does not affect fills. */
	r.offset = 12345;
	titan_rng_fill_uniform(&r, 0, part, N, -0.5f, 0.5f);
	titan_rng_fill_uniform(&r, 0, whole, N, -0.5f, 0.5f);
	assert_memory_equal(whole, part, sizeof whole);
}

static void test_uniform_fill(void **state)
{
	enum { N = 200000 };
	float *x = malloc(N * sizeof *x);
	struct titan_rng r;
	uint32_t w[4];
	(void)state;

	assert_non_null(x);
	titan_rng_init(&r, 7, 1);
	titan_rng_fill_uniform(&r, 10, x, N, -2.0f, 6.0f);
	double s = 0, s2 = 0;
	for (int i = 0; i < N; i++) {
		assert_true(x[i] >= -2.0f && x[i] < 6.0f);
		s += x[i];
		s2 += (double)x[i] * x[i];
	}
	double mean = s / N, var = s2 / N - mean * mean;
	assert_true(fabs(mean - 2.0) < 0.03);
	assert_true(fabs(var - 64.0 / 12.0) < 0.05);
	/* Value j is a 24-bit uniform from word 0 of counter first + j. */
	titan_philox4x32(7, 1, 10 + 5, w);
	assert_true(x[5] == (float)(-2.0 + 8.0 * ((double)(w[0] >> 8) * 0x1p-24)));

	/* A range narrower than the 24-bit grid never yields hi. */
	const float lo = 1.0f, hi = nextafterf(1.0f, 2.0f);
	titan_rng_fill_uniform(&r, 0, x, 10000, lo, hi);
	for (int i = 0; i < 10000; i++)
		assert_true(x[i] == lo);
	free(x);
}

static void moments(const float *x, size_t n, double *mean, double *std)
{
	double s = 0, s2 = 0;
	for (size_t i = 0; i < n; i++)
		s += x[i];
	*mean = s / (double)n;
	for (size_t i = 0; i < n; i++)
		s2 += (x[i] - *mean) * (x[i] - *mean);
	*std = sqrt(s2 / (double)n);
}

static void test_normal_fill(void **state)
{
	enum { N = 1000000 };
	float *x = malloc(N * sizeof *x);
	struct titan_rng r;
	double mean, std;
	(void)state;

	assert_non_null(x);
	titan_rng_init(&r, 1, 0);
	titan_rng_fill_normal(&r, 0, x, N, 0.0f, 1.0f);
	moments(x, N, &mean, &std);
	assert_true(fabs(mean) < 0.005);
	assert_true(fabs(std - 1.0) < 0.005);
	/* Tails: P(|z| > 3) = 0.0026998; 32-bit words reach beyond 4 sigma. */
	int tail = 0;
	float mx = 0;
	for (int i = 0; i < N; i++) {
		assert_true(isfinite(x[i]));
		tail += fabsf(x[i]) > 3.0f;
		if (fabsf(x[i]) > mx)
			mx = fabsf(x[i]);
	}
	assert_true(fabs(tail / (double)N - 0.0026998) < 0.0003);
	assert_true(mx > 4.5f);

	titan_rng_fill_normal(&r, 0, x, N / 4, 3.0f, 0.5f);
	moments(x, N / 4, &mean, &std);
	assert_true(fabs(mean - 3.0) < 0.005);
	assert_true(fabs(std - 0.5) < 0.005);
	free(x);
}

static double phi(double x) { return exp(-0.5 * x * x) / sqrt(2 * 3.14159265358979323846); }
static double Phi(double x) { return 0.5 * (1 + erf(x / sqrt(2.0))); }

static void test_trunc_normal_fill(void **state)
{
	enum { N = 400000 };
	float *x = malloc(N * sizeof *x);
	struct titan_rng r;
	double mean, std;
	(void)state;

	assert_non_null(x);
	titan_rng_init(&r, 5, 11);

	/* torchtitan's default: std 0.02, a = -2, b = 2 (no effective truncation). */
	titan_rng_fill_trunc_normal(&r, 0, x, N, 0.0f, 0.02f, -2.0f, 2.0f);
	moments(x, N, &mean, &std);
	for (int i = 0; i < N; i++)
		assert_true(x[i] >= -2.0f && x[i] <= 2.0f);
	assert_true(fabs(mean) < 1e-4);
	assert_true(fabs(std / 0.02 - 1.0) < 0.005);

	/* Truncated at +-3 sigma: sd = sqrt(1 - 6 phi(3) / (2 Phi(3) - 1)) = 0.98658. */
	const float s = 0.05f;
	titan_rng_fill_trunc_normal(&r, 1000, x, N, 0.0f, s, -3 * s, 3 * s);
	moments(x, N, &mean, &std);
	for (int i = 0; i < N; i++)
		assert_true(x[i] >= -3 * s && x[i] <= 3 * s);
	double want = sqrt(1 - 6 * phi(3) / (2 * Phi(3) - 1));
	assert_true(fabs(want - 0.98658) < 1e-4);
	assert_true(fabs(std / s - want) < 0.005);

	/* Asymmetric window: mean + std (phi(al) - phi(be)) / (Phi(be) - Phi(al)). */
	const float m = 1.0f, sd = 0.5f, a = 0.0f, b = 1.5f;
	titan_rng_fill_trunc_normal(&r, 0, x, N, m, sd, a, b);
	moments(x, N, &mean, &std);
	for (int i = 0; i < N; i++)
		assert_true(x[i] >= a && x[i] <= b);
	double al = (a - m) / sd, be = (b - m) / sd, Z = Phi(be) - Phi(al);
	double tmean = m + sd * (phi(al) - phi(be)) / Z;
	double tvar = sd * sd * (1 + (al * phi(al) - be * phi(be)) / Z -
				 pow((phi(al) - phi(be)) / Z, 2));
	assert_true(fabs(mean - tmean) < 0.003);
	assert_true(fabs(std - sqrt(tvar)) < 0.003);

	/* std 0 gives the mean, clamped into [a, b]. */
	titan_rng_fill_trunc_normal(&r, 0, x, 4, 0.5f, 0.0f, -1.0f, 1.0f);
	assert_true(x[0] == 0.5f && x[3] == 0.5f);
	titan_rng_fill_trunc_normal(&r, 0, x, 4, 5.0f, 0.0f, -1.0f, 1.0f);
	assert_true(x[0] == 1.0f && x[3] == 1.0f);
	free(x);
}

static void test_below(void **state)
{
	enum { K = 10, N = 200000 };
	int count[K] = { 0 };
	struct titan_rng r;
	(void)state;

	titan_rng_init(&r, 77, 0);
	for (int i = 0; i < N; i++) {
		uint64_t v = titan_rng_below(&r, K);
		assert_true(v < K);
		count[v]++;
	}
	/* chi-square with 9 degrees of freedom; 27.9 is the 0.001 quantile. */
	double chi = 0, e = N / (double)K;
	for (int k = 0; k < K; k++)
		chi += (count[k] - e) * (count[k] - e) / e;
	assert_true(chi < 27.9);

	for (int i = 0; i < 100; i++)
		assert_true(titan_rng_below(&r, 1) == 0);
	/* A bound just above 2^63 rejects almost half the raw draws; the
	 * accepted values still cover the range evenly. */
	const uint64_t big = (1ull << 63) + 1;
	int high = 0;
	for (int i = 0; i < 2000; i++) {
		uint64_t v = titan_rng_below(&r, big);
		assert_true(v < big);
		high += v >= (1ull << 62);
	}
	assert_true(high > 900 && high < 1100); /* P(v >= 2^62) = 1/2 */
	/* Non-power-of-two bound: every value hit, none out of range. */
	int seen[3] = { 0 };
	for (int i = 0; i < 300; i++)
		seen[titan_rng_below(&r, 3)]++;
	assert_true(seen[0] > 50 && seen[1] > 50 && seen[2] > 50);
}

static void test_erfinv(void **state)
{
	(void)state;
	assert_true(titan_erfinv(0.0) == 0.0);
	assert_true(signbit(titan_erfinv(-0.0)));
	assert_true(isinf(titan_erfinv(1.0)) && titan_erfinv(1.0) > 0);
	assert_true(isinf(titan_erfinv(-1.0)) && titan_erfinv(-1.0) < 0);
	assert_true(isnan(titan_erfinv(1.5)));
	assert_true(isnan(titan_erfinv(-1.0000001)));
	assert_true(isnan(titan_erfinv(NAN)));
	assert_true(fabs(titan_erfinv(0.5) - 0.47693627620446987) < 1e-16);
	assert_true(fabs(titan_erfinv(-0.9) + 1.1630871536766743) < 4e-16);

	/* erf(erfinv(x)) == x up to the rounding of erf itself. */
	double worst = 0;
	for (int i = -100000; i <= 100000; i++) {
		double x = i / 100000.0 * (1 - 1e-12);
		double y = titan_erfinv(x);
		assert_true(titan_erfinv(-x) == -y);
		double err = fabs(erf(y) - x) / fmax(fabs(x), 1e-300);
		if (err > worst)
			worst = err;
	}
	assert_true(worst < 1e-15);

	/* Tails: compare 1 - x with erfc(y), relative. */
	for (int k = 1; k <= 53; k++) {
		double t = ldexp(1.0, -k), x = 1.0 - t;
		double y = titan_erfinv(x);
		assert_true(isfinite(y));
		assert_true(fabs(erfc(y) - t) / t < 1e-14);
	}
	/* Tiny arguments: erfinv(x) ~ x sqrt(pi) / 2. */
	for (int k = 30; k <= 1070; k += 40) {
		double x = ldexp(1.0, -k);
		double y = titan_erfinv(x);
		assert_true(fabs(y / (x * 0.88622692545275801) - 1) < 1e-15);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_answers),
		cmocka_unit_test(test_sequential),
		cmocka_unit_test(test_determinism_and_independence),
		cmocka_unit_test(test_split_fill),
		cmocka_unit_test(test_uniform_fill),
		cmocka_unit_test(test_normal_fill),
		cmocka_unit_test(test_trunc_normal_fill),
		cmocka_unit_test(test_below),
		cmocka_unit_test(test_erfinv),
	};
	return cmocka_run_group_tests_name("rng", tests, NULL, NULL);
}
