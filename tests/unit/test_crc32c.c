/*
 * test_crc32c.c — CRC32C known answers (the check value and RFC 3720 B.4),
 * hardware == software on random buffers of many lengths and alignments
 * (including the 3-way interleaved block sizes of the hardware path),
 * chaining, and combining pieces checksummed apart (crc32c_combine, and
 * the XOR of shifted pieces that ranks reduce).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "titan/core.h"

static uint64_t xs_state = 0x9E3779B97F4A7C15ull;

static uint64_t xorshift(void)
{
	uint64_t x = xs_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return xs_state = x;
}

static void check_both(const void *p, size_t n, uint32_t want)
{
	assert_int_equal(titan_crc32c(0, p, n), want);
	assert_int_equal(titan_crc32c_sw(0, p, n), want);
}

static void test_check_value(void **state)
{
	(void)state;
	check_both("123456789", 9, 0xE3069283u);
	check_both("a", 1, 0xC1D04330u);
}

static void test_rfc3720(void **state)
{
	unsigned char buf[32];
	(void)state;

	memset(buf, 0, sizeof buf);
	check_both(buf, 32, 0x8A9136AAu);
	memset(buf, 0xff, sizeof buf);
	check_both(buf, 32, 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	check_both(buf, 32, 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)(31 - i);
	check_both(buf, 32, 0x113FDB5Cu);
}

static void test_empty(void **state)
{
	(void)state;
	check_both("", 0, 0);
	check_both(NULL, 0, 0);
	/* An empty update leaves a running value unchanged. */
	assert_int_equal(titan_crc32c(0xE3069283u, "", 0), 0xE3069283u);
	assert_int_equal(titan_crc32c_sw(0xE3069283u, "", 0), 0xE3069283u);
}

static void test_hw_equals_sw(void **state)
{
	enum { MAX = 4096 + 64 };
	static unsigned char buf[MAX + 16];
	(void)state;

	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (unsigned char)xorshift();
	for (size_t off = 0; off < 16; off++) {
		for (size_t n = 0; n <= 300; n++)
			assert_int_equal(titan_crc32c(0, buf + off, n),
					 titan_crc32c_sw(0, buf + off, n));
		for (int k = 0; k < 20; k++) {
			size_t n = (size_t)(xorshift() % MAX);
			uint32_t seed = (uint32_t)xorshift();
			assert_int_equal(titan_crc32c(seed, buf + off, n),
					 titan_crc32c_sw(seed, buf + off, n));
		}
	}
}

/* The hardware path runs three interleaved chains over 3 x 256 and
 * 3 x 8192 byte blocks; cover lengths on both sides of those sizes. */
static void test_hw_long_buffers(void **state)
{
	enum { MAX = 200000 };
	static const size_t edges[] = { 767, 768, 769, 775, 776, 1536, 1543,
					24575, 24576, 24577, 24583, 24584, 49152,
					49152 + 768, 49152 + 767, 73727, 73728 + 7 };
	unsigned char *buf = malloc(MAX + 16);
	(void)state;

	assert_non_null(buf);
	for (size_t i = 0; i < MAX + 16; i++)
		buf[i] = (unsigned char)xorshift();
	for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
		for (size_t off = 0; off < 9; off++)
			assert_int_equal(titan_crc32c(0, buf + off, edges[e]),
					 titan_crc32c_sw(0, buf + off, edges[e]));
	for (int k = 0; k < 10; k++) {
		size_t off = (size_t)(xorshift() % 16);
		size_t n = (size_t)(xorshift() % MAX);
		uint32_t seed = (uint32_t)xorshift();
		assert_int_equal(titan_crc32c(seed, buf + off, n),
				 titan_crc32c_sw(seed, buf + off, n));
	}
	assert_int_equal(titan_crc32c(0, buf, MAX), titan_crc32c_sw(0, buf, MAX));
	memset(buf, 0, MAX);
	assert_int_equal(titan_crc32c(0, buf, MAX), titan_crc32c_sw(0, buf, MAX));
	free(buf);
}

static void test_chaining(void **state)
{
	enum { N = 60000 };
	static unsigned char buf[N];
	(void)state;

	for (size_t i = 0; i < N; i++)
		buf[i] = (unsigned char)xorshift();
	uint32_t whole = titan_crc32c(0, buf, N);
	assert_int_equal(titan_crc32c_sw(0, buf, N), whole);
	for (size_t cut = 0; cut <= N; cut += 997) {
		uint32_t a = titan_crc32c(0, buf, cut);
		assert_int_equal(titan_crc32c(a, buf + cut, N - cut), whole);
		uint32_t b = titan_crc32c_sw(0, buf, cut);
		assert_int_equal(titan_crc32c_sw(b, buf + cut, N - cut), whole);
		/* Mixing the two paths chains as well. */
		assert_int_equal(titan_crc32c_sw(a, buf + cut, N - cut), whole);
	}
	/* Byte by byte. */
	uint32_t c = 0;
	for (size_t i = 0; i < N; i++)
		c = titan_crc32c(c, buf + i, 1);
	assert_int_equal(c, whole);
	assert_int_equal(titan_crc32c(titan_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
}

static void test_combine(void **state)
{
	enum { N = 70000 };
	static unsigned char buf[N];
	(void)state;

	for (size_t i = 0; i < N; i++)
		buf[i] = (unsigned char)xorshift();
	uint32_t whole = titan_crc32c(0, buf, N);
	for (size_t cut = 0; cut <= N; cut += 1231) {
		uint32_t a = titan_crc32c(0, buf, cut), b = titan_crc32c(0, buf + cut, N - cut);
		assert_int_equal(titan_crc32c_combine(a, b, N - cut), whole);
	}
	assert_int_equal(titan_crc32c_combine(titan_crc32c(0, "1234", 4),
					      titan_crc32c(0, "56789", 5), 5), 0xE3069283u);
	/* an empty piece on either side changes nothing */
	assert_int_equal(titan_crc32c_combine(whole, 0, 0), whole);
	assert_int_equal(titan_crc32c_combine(0, whole, N), whole);
	/* pieces of random lengths, each shifted to the end of the buffer and
	 * XOR-ed in any order (what ranks holding slices reduce) */
	for (int k = 0; k < 20; k++) {
		size_t at = 0;
		uint32_t x = 0;

		while (at < N) {
			size_t n = (size_t)(xorshift() % 9000);

			if (n > N - at)
				n = N - at;
			x ^= titan_crc32c_shift(titan_crc32c(0, buf + at, n), N - at - n);
			/* the same length twice in a row (a cached shift) */
			assert_int_equal(titan_crc32c_shift(titan_crc32c(0, buf + at, n), N - at - n),
					 titan_crc32c_shift(titan_crc32c(0, buf + at, n), N - at - n));
			at += n;
		}
		assert_int_equal(x, whole);
	}
	/* a shift by 0 bytes is the identity; large lengths stay exact */
	assert_int_equal(titan_crc32c_shift(0xE3069283u, 0), 0xE3069283u);
	assert_int_equal(titan_crc32c_shift(titan_crc32c_shift(whole, 3000000000ull), 5),
			 titan_crc32c_shift(whole, 3000000005ull));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_value),
		cmocka_unit_test(test_rfc3720),
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_hw_equals_sw),
		cmocka_unit_test(test_hw_long_buffers),
		cmocka_unit_test(test_chaining),
		cmocka_unit_test(test_combine),
	};
	return cmocka_run_group_tests_name("crc32c", tests, NULL, NULL);
}
