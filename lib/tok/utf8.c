/*
 * utf8.c — UTF-8 validation and sanitising (titan_utf8_*, titan/tok.h).
 *
 * Well-formed sequences are those of Unicode's Table 3-7 (no overlongs, no
 * surrogates, nothing past U+10FFFF).  Sanitising replaces each "maximal
 * subpart of an ill-formed subsequence" by one U+FFFD: the longest prefix
 * of a well-formed sequence that starts at the bad byte, or that one byte
 * when none does.  This is the WHATWG Encoding Standard's decoder, and what
 * JavaScript's TextDecoder and Python's bytes.decode(errors="replace") do,
 * so ids match a peer that reads the same bytes as text.
 */
#include "tok_impl.h"

#include <string.h>

#include "titan/core.h"

/* For a lead byte: the sequence length (0 = never a lead byte) and the
 * range of the second byte (later bytes are always 80..BF). */
static inline unsigned lead_info(uint8_t b, uint8_t *lo, uint8_t *hi)
{
	*lo = 0x80;
	*hi = 0xBF;
	if (b < 0x80)
		return 1;
	if (b < 0xC2)
		return 0;
	if (b < 0xE0)
		return 2;
	if (b < 0xF0) {
		if (b == 0xE0)
			*lo = 0xA0;
		else if (b == 0xED)
			*hi = 0x9F;
		return 3;
	}
	if (b < 0xF5) {
		if (b == 0xF0)
			*lo = 0x90;
		else if (b == 0xF4)
			*hi = 0x8F;
		return 4;
	}
	return 0;
}

/* Length of the well-formed sequence at s[0..n) (>= 1), or 0 when there is
 * none; then *bad is the length of the maximal subpart (>= 1). */
static inline size_t seq_len(const uint8_t *s, size_t n, size_t *bad)
{
	uint8_t lo, hi;
	unsigned len = lead_info(s[0], &lo, &hi);
	if (len <= 1) {
		*bad = 1;
		return len;
	}
	if (n < 2 || s[1] < lo || s[1] > hi) {
		*bad = 1;
		return 0;
	}
	for (unsigned i = 2; i < len; i++) {
		if (i >= n || (s[i] & 0xC0) != 0x80) {
			*bad = i;
			return 0;
		}
	}
	return len;
}

size_t tok_utf8_bad_prefix(const uint8_t *s, size_t n)
{
	size_t bad;
	if (n == 0)
		return 0;
	return seq_len(s, n, &bad) ? 0 : bad;
}

#define HIGH_BITS 0x8080808080808080ull

size_t titan_utf8_valid_prefix(const uint8_t *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		if (s[i] < 0x80) {
			while (i + 8 <= n) {
				uint64_t w;
				memcpy(&w, s + i, 8);
				if (w & HIGH_BITS)
					break;
				i += 8;
			}
			while (i < n && s[i] < 0x80)
				i++;
			continue;
		}
		size_t bad;
		size_t k = seq_len(s + i, n - i, &bad);
		if (k == 0)
			return i;
		i += k;
	}
	return n;
}

int64_t titan_utf8_sanitize(const uint8_t *s, size_t n, struct titan_bytes *out)
{
	static const uint8_t fffd[3] = {0xEF, 0xBF, 0xBD};
	int64_t nrep = 0;
	size_t i = 0;
	int rc = titan_bytes_reserve(out, out->n + n);
	if (rc < 0)
		return rc;
	while (i < n) {
		size_t v = titan_utf8_valid_prefix(s + i, n - i);
		if ((rc = titan_bytes_append(out, s + i, v)) < 0)
			return rc;
		i += v;
		if (i == n)
			break;
		size_t bad = 1;
		seq_len(s + i, n - i, &bad);
		if ((rc = titan_bytes_append(out, fffd, sizeof fffd)) < 0)
			return rc;
		i += bad;
		nrep++;
	}
	return nrep;
}
