/*
 * test_utf8.c — UTF-8 validation and sanitising (titan_utf8_*), and the
 * byte / id buffers.  Known answers come from Python 3
 * (bytes.decode("utf-8", errors="replace"), the WHATWG maximal-subpart
 * rule); 100k random byte strings are compared with an independent
 * decoder written from the WHATWG Encoding Standard's algorithm.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/tok.h"
#include "tok/tok_impl.h"

#define FFFD "\xEF\xBF\xBD"

struct known {
	const char *in;
	size_t n;
	const char *out;
	size_t nout;
	int64_t nrep;
	size_t valid; /* titan_utf8_valid_prefix */
};

#define K(in, out, nrep, valid) {in, sizeof in - 1, out, sizeof out - 1, nrep, valid}

/* Expected outputs as printed by Python 3.11's bytes.decode(errors="replace"). */
static const struct known known[] = {
	K("", "", 0, 0),
	K("abc", "abc", 0, 3),
	K("\xE2\x82", FFFD, 1, 0),                       /* truncated 3-byte */
	K("\xE2\x82\xAC", "\xE2\x82\xAC", 0, 3),          /* U+20AC */
	K("\xF0\x80\x80\x80", FFFD FFFD FFFD FFFD, 4, 0), /* overlong: F0 80 not a prefix */
	K("\xED\xA0\x80", FFFD FFFD FFFD, 3, 0),          /* surrogate D800 */
	K("\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD, 4, 0), /* > U+10FFFF */
	K("\xC0\xAF", FFFD FFFD, 2, 0),
	K("\xC1\xBF", FFFD FFFD, 2, 0),
	K("\xC2", FFFD, 1, 0),
	K("\xC2" "a", FFFD "a", 1, 0),
	K("\x80", FFFD, 1, 0),
	K("\xBF\x80", FFFD FFFD, 2, 0),
	K("\xFE\xFF", FFFD FFFD, 2, 0),
	K("\xF5\x80", FFFD FFFD, 2, 0),
	K("\xF0\x9F\x98", FFFD, 1, 0),
	K("\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80", 0, 4),
	K("\xF0\x9F\x98" "a", FFFD "a", 1, 0),
	K("\xE0\x80\x80", FFFD FFFD FFFD, 3, 0),
	K("\xE0\xA0\x80", "\xE0\xA0\x80", 0, 3),
	K("\xED\x9F\xBF", "\xED\x9F\xBF", 0, 3),
	K("\xEE\x80\x80", "\xEE\x80\x80", 0, 3),
	K("\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF", 0, 4),
	K("\xF1\x80\x80", FFFD, 1, 0),
	K("a\xF1\x80\x80\xE2", "a" FFFD FFFD, 2, 1),
	K("\xE2\x82\xE2\x82\xAC", FFFD "\xE2\x82\xAC", 1, 0),
	K("\xF8\x88\x80\x80\x80", FFFD FFFD FFFD FFFD FFFD, 5, 0),
	K("\xEF\xBF\xBD", FFFD, 0, 3),
	K("\xE1\x80\xC2\x80", FFFD "\xC2\x80", 1, 0),
	K("\xC2\xC2\x80", FFFD "\xC2\x80", 1, 0),
	K("\xF0\x90\x80\xF0\x90\x80\x80", FFFD "\xF0\x90\x80\x80", 1, 0),
	K("ok\0nul", "ok\0nul", 0, 6),
	K("caf\xC3\xA9 \xFF!", "caf\xC3\xA9 " FFFD "!", 1, 6),
};

static void test_known(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
		const struct known *k = &known[i];
		struct titan_bytes out = {0};
		int64_t r = titan_utf8_sanitize((const uint8_t *)k->in, k->n, &out);
		size_t want = k->nout;
		if (r != k->nrep || out.n != want || (want && memcmp(out.p, k->out, want) != 0))
			fail_msg("case %zu: %" PRId64 " replacements, %zu bytes", i, r, out.n);
		assert_int_equal(titan_utf8_valid_prefix((const uint8_t *)k->in, k->n), k->valid);
		titan_bytes_release(&out);
	}
}

/* Sanitising appends to what the buffer holds. */
static void test_append(void **state)
{
	(void)state;
	struct titan_bytes out = {0};
	assert_int_equal(titan_bytes_append(&out, "xy", 2), 0);
	assert_int_equal(titan_utf8_sanitize((const uint8_t *)"\xC3", 1, &out), 1);
	assert_int_equal(titan_utf8_sanitize((const uint8_t *)"z", 1, &out), 0);
	assert_int_equal(out.n, 6);
	assert_memory_equal(out.p, "xy" FFFD "z", 6);
	titan_bytes_release(&out);
	titan_bytes_release(NULL);
}

/* The ASCII fast path: a bad byte at every offset and alignment. */
static void test_fast_path(void **state)
{
	(void)state;
	uint8_t buf[80];
	for (size_t align = 0; align < 8; align++) {
		for (size_t len = 0; len + align <= sizeof buf; len++) {
			uint8_t *s = buf + align;
			memset(s, 'a', len);
			assert_int_equal(titan_utf8_valid_prefix(s, len), len);
			for (size_t bad = 0; bad < len; bad++) {
				s[bad] = 0x80;
				assert_int_equal(titan_utf8_valid_prefix(s, len), bad);
				if (bad + 1 < len) { /* a valid 2-byte sequence is no error */
					s[bad] = 0xC3;
					s[bad + 1] = 0xA9;
					assert_int_equal(titan_utf8_valid_prefix(s, len), len);
					s[bad + 1] = 'a';
					assert_int_equal(titan_utf8_valid_prefix(s, len), bad);
				}
				s[bad] = 'a';
			}
		}
	}
}

/* ----------------------------------------------- independent reference
 * The WHATWG Encoding Standard's UTF-8 decoder, step by step (a state
 * machine over "bytes needed" and the lower/upper boundary), writing
 * U+FFFD for each error; *first_err is where the first error's sequence
 * started. */
static size_t put_cp(uint8_t *o, uint32_t c)
{
	if (c < 0x80) {
		o[0] = (uint8_t)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (uint8_t)(0xC0 | c >> 6);
		o[1] = (uint8_t)(0x80 | (c & 0x3F));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (uint8_t)(0xE0 | c >> 12);
		o[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
		o[2] = (uint8_t)(0x80 | (c & 0x3F));
		return 3;
	}
	o[0] = (uint8_t)(0xF0 | c >> 18);
	o[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
	o[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
	o[3] = (uint8_t)(0x80 | (c & 0x3F));
	return 4;
}

static size_t whatwg_decode(const uint8_t *s, size_t n, uint8_t *out, int64_t *nerr,
			    size_t *first_err)
{
	uint32_t cp = 0, needed = 0, seen = 0, lower = 0x80, upper = 0xBF;
	size_t o = 0, start = 0;
	*nerr = 0;
	*first_err = n;
	for (size_t i = 0; i <= n; i++) {
		if (i == n) {
			if (needed) {
				o += put_cp(out + o, 0xFFFD);
				if (!(*nerr)++)
					*first_err = start;
			}
			break;
		}
		uint32_t b = s[i];
		if (needed == 0) {
			start = i;
			if (b <= 0x7F) {
				o += put_cp(out + o, b);
			} else if (b >= 0xC2 && b <= 0xDF) {
				needed = 1;
				cp = b & 0x1F;
			} else if (b >= 0xE0 && b <= 0xEF) {
				if (b == 0xE0)
					lower = 0xA0;
				if (b == 0xED)
					upper = 0x9F;
				needed = 2;
				cp = b & 0xF;
			} else if (b >= 0xF0 && b <= 0xF4) {
				if (b == 0xF0)
					lower = 0x90;
				if (b == 0xF4)
					upper = 0x8F;
				needed = 3;
				cp = b & 0x7;
			} else {
				o += put_cp(out + o, 0xFFFD);
				if (!(*nerr)++)
					*first_err = start;
			}
			continue;
		}
		if (b < lower || b > upper) {
			cp = needed = seen = 0;
			lower = 0x80;
			upper = 0xBF;
			o += put_cp(out + o, 0xFFFD);
			if (!(*nerr)++)
				*first_err = start;
			i--; /* the byte is processed again ("prepend to stream") */
			continue;
		}
		lower = 0x80;
		upper = 0xBF;
		cp = (cp << 6) | (b & 0x3F);
		if (++seen == needed) {
			o += put_cp(out + o, cp);
			cp = needed = seen = 0;
		}
	}
	return o;
}

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint32_t rnd(uint32_t below)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	rng_state = x;
	return (uint32_t)((x >> 11) % below);
}

static uint8_t random_byte(void)
{
	static const uint8_t special[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF,
					  0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE,
					  0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF8, 0xFE, 0xFF};
	switch (rnd(4)) {
	case 0:
		return (uint8_t)rnd(0x80);
	case 1:
		return (uint8_t)(0x80 + rnd(0x40)); /* continuation */
	case 2:
		return special[rnd(sizeof special)];
	default:
		return (uint8_t)rnd(256);
	}
}

static void test_random_vs_whatwg(void **state)
{
	(void)state;
	uint8_t in[64], want[64 * 3];
	struct titan_bytes out = {0};
	for (int t = 0; t < 100000; t++) {
		size_t n = rnd(sizeof in + 1);
		for (size_t i = 0; i < n; i++)
			in[i] = random_byte();
		/* sometimes a valid character in the middle of the noise */
		if (n >= 4 && rnd(2)) {
			uint32_t c = 0x80 + rnd(0x10FF80);
			put_cp(in + rnd((uint32_t)n - 3), c >= 0xD800 && c < 0xE000 ? c - 0x800 : c);
		}
		int64_t nerr;
		size_t first;
		size_t wn = whatwg_decode(in, n, want, &nerr, &first);
		out.n = 0;
		int64_t r = titan_utf8_sanitize(in, n, &out);
		if (r != nerr || out.n != wn || memcmp(out.p, want, wn) != 0)
			fail_msg("random case %d (n=%zu): %" PRId64 " vs %" PRId64 " replacements", t,
				 n, r, nerr);
		assert_int_equal(titan_utf8_valid_prefix(in, n), first);
		/* the output is valid and sanitising it again changes nothing */
		assert_int_equal(titan_utf8_valid_prefix(out.p, out.n), out.n);
	}
	titan_bytes_release(&out);
}

/* Every code point's encoding is valid; surrogates are not. */
static void test_all_code_points(void **state)
{
	(void)state;
	uint8_t b[4];
	for (uint32_t c = 0; c < 0x110000; c++) {
		size_t n = put_cp(b, c);
		size_t want = c >= 0xD800 && c < 0xE000 ? 0 : n;
		if (titan_utf8_valid_prefix(b, n) != want)
			fail_msg("U+%04X", c);
	}
}

/* The scanners' decoder agrees with the validator on random bytes: a
 * well-formed sequence decodes to its code point and length, anything else
 * to TOK_CP_INVALID with length 1. */
static void test_decode(void **state)
{
	(void)state;
	uint8_t b[6], enc[4];
	for (int t = 0; t < 200000; t++) {
		size_t n = 1 + rnd(5);
		for (size_t i = 0; i < n; i++)
			b[i] = random_byte();
		if (rnd(3) == 0) {
			uint32_t c = rnd(0x110000);
			size_t k = put_cp(enc, c);
			memcpy(b, enc, k < n ? k : n);
		}
		size_t len = 0;
		uint32_t c = tok_utf8_decode(b, n, &len);
		size_t bad = tok_utf8_bad_prefix(b, n);
		if (bad) {
			assert_int_equal(c, TOK_CP_INVALID);
			assert_int_equal(len, 1);
		} else {
			assert_true(c < 0x110000);
			assert_int_equal(len, put_cp(enc, c));
			assert_memory_equal(enc, b, len);
			assert_int_equal(titan_utf8_valid_prefix(b, len), len);
		}
	}
	assert_int_equal(tok_utf8_bad_prefix(b, 0), 0);
}

static void test_ids(void **state)
{
	(void)state;
	struct titan_ids v = {0};
	for (uint32_t i = 0; i < 100000; i++)
		assert_int_equal(titan_ids_push(&v, i * 7), 0);
	assert_int_equal(v.n, 100000);
	assert_true(v.cap >= v.n);
	for (uint32_t i = 0; i < 100000; i++)
		assert_int_equal(v.p[i], i * 7);
	assert_int_equal(titan_ids_reserve(&v, 10), 0); /* never shrinks */
	assert_true(v.cap >= 100000);
	titan_ids_release(&v);
	assert_null(v.p);
	assert_int_equal(v.n, 0);
	titan_ids_release(NULL);

	struct titan_bytes b = {0};
	assert_int_equal(titan_bytes_reserve(&b, 1000), 0);
	assert_true(b.cap >= 1000);
	assert_int_equal(b.n, 0);
	assert_int_equal(titan_bytes_append(&b, NULL, 0), 0);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(titan_bytes_append(&b, "abc", 3), 0);
	assert_int_equal(b.n, 3000);
	assert_memory_equal(b.p + 2997, "abc", 3);
	titan_bytes_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known),
		cmocka_unit_test(test_append),
		cmocka_unit_test(test_fast_path),
		cmocka_unit_test(test_random_vs_whatwg),
		cmocka_unit_test(test_all_code_points),
		cmocka_unit_test(test_decode),
		cmocka_unit_test(test_ids),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
