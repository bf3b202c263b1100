/*
 * test_pretok.c — the pre-tokenizer: hand-written expected splits for each
 * known pattern (checked on the scanner and on PCRE2), then the scanners
 * against PCRE2 running the pattern text: the class tables against PCRE2's
 * Unicode properties, every code point in several contexts, and 200k
 * random strings; the API's errors, early stop, \s rewriting and
 * empty-match handling.
 *
 * PCRE2 may know an older Unicode than the tables (10.42: Unicode 14, the
 * tables: 16.0, the version of the tiktoken peer): code points whose class
 * differs from PCRE2's because the tables' age data says they were assigned
 * after PCRE2's Unicode version are counted, reported, and left out of the
 * comparisons; any other difference fails.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "titan/core.h"
#include "titan/tok.h"
#include "tok/tok_impl.h"

/* Age data of the generated tables (lib/tok/unicode_tables.c; test-only, so
 * not in tok_impl.h): code points assigned in Unicode 14.0 or later as
 * {first, last, major << 8 | minor}, sorted. */

#define NKINDS 3
static const enum titan_pretok_kind kinds[NKINDS] = {TITAN_PRETOK_CL100K, TITAN_PRETOK_O200K,
						       TITAN_PRETOK_GPT2};
static const char *const kind_names[NKINDS] = {"cl100k", "o200k", "gpt2"};

/* ------------------------------------------------------------- helpers */

struct pieces {
	const uint8_t *base;
	size_t n, cap;
	size_t *off, *len;
	int stop_after; /* return 7 after this many pieces (0 = never) */
};

static int collect(const uint8_t *p, size_t len, void *arg)
{
	struct pieces *ps = arg;
	if (ps->n == ps->cap) {
		ps->cap = ps->cap ? 2 * ps->cap : 256;
		ps->off = realloc(ps->off, ps->cap * sizeof *ps->off);
		ps->len = realloc(ps->len, ps->cap * sizeof *ps->len);
		assert_non_null(ps->off);
		assert_non_null(ps->len);
	}
	assert_true(len > 0);
	ps->off[ps->n] = (size_t)(p - ps->base);
	ps->len[ps->n] = len;
	ps->n++;
	return ps->stop_after && (int)ps->n == ps->stop_after ? 7 : 0;
}

static void pieces_free(struct pieces *ps)
{
	free(ps->off);
	free(ps->len);
	memset(ps, 0, sizeof *ps);
}

static void split(const struct titan_pretok *p, struct titan_pretok_state *st, const uint8_t *s,
		  size_t n, struct pieces *out)
{
	out->base = s;
	out->n = 0;
	int rc = titan_pretok_split(p, st, s, n, collect, out);
	if (rc != 0)
		fail_msg("split failed (%d): %s", rc, titan_errmsg());
}

/* The two engines of one kind. */
struct pair {
	struct titan_pretok *scan, *re;
	struct titan_pretok_state *scan_st, *re_st;
};

static void pair_init(struct pair *pr, enum titan_pretok_kind kind)
{
	pr->scan = titan_pretok_new(kind, NULL, false);
	pr->re = titan_pretok_new(kind, NULL, true);
	assert_non_null(pr->scan);
	assert_non_null(pr->re);
	pr->scan_st = titan_pretok_state_new(pr->scan);
	pr->re_st = titan_pretok_state_new(pr->re);
	assert_non_null(pr->scan_st);
	assert_non_null(pr->re_st);
}

static void pair_free(struct pair *pr)
{
	titan_pretok_state_free(pr->scan_st);
	titan_pretok_state_free(pr->re_st);
	titan_pretok_free(pr->scan);
	titan_pretok_free(pr->re);
}

/* Printable form of a byte string for failure messages. */
static const char *show(const uint8_t *s, size_t n, char *buf, size_t size)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 8 < size; i++) {
		if (s[i] >= 0x20 && s[i] < 0x7F && s[i] != '|')
			buf[o++] = (char)s[i];
		else
			o += (size_t)snprintf(buf + o, size - o, "\\x%02X", s[i]);
	}
	buf[o] = '\0';
	return buf;
}

static void show_pieces(const struct pieces *ps, char *buf, size_t size)
{
	size_t o = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < ps->n && o + 16 < size; i++) {
		if (i)
			buf[o++] = '|';
		show(ps->base + ps->off[i], ps->len[i], buf + o, size - o);
		o += strlen(buf + o);
	}
}

/* Scanner and PCRE2 give the same pieces for s[0..n). */
static void same(struct pair *pr, const char *what, const uint8_t *s, size_t n, struct pieces *a,
		 struct pieces *b)
{
	split(pr->scan, pr->scan_st, s, n, a);
	split(pr->re, pr->re_st, s, n, b);
	size_t i = 0;
	while (i < a->n && i < b->n && a->off[i] == b->off[i] && a->len[i] == b->len[i])
		i++;
	if (i == a->n && i == b->n)
		return;
	char t[400], x[200], y[200];
	size_t at = i < a->n ? a->off[i] : i < b->n ? b->off[i] : n;
	size_t from = at > 24 ? at - 24 : 0, to = at + 24 < n ? at + 24 : n;
	snprintf(x, sizeof x, "%zu+%zu", i < a->n ? a->off[i] : 0, i < a->n ? a->len[i] : 0);
	snprintf(y, sizeof y, "%zu+%zu", i < b->n ? b->off[i] : 0, i < b->n ? b->len[i] : 0);
	fail_msg("%s: scanner and PCRE2 differ at piece %zu (scanner %s, pcre2 %s) near byte %zu: "
		 "\"%s\"",
		 what, i, x, y, at, show(s + from, to - from, t, sizeof t));
}

/* ------------------------------------------------------ expected splits */

struct expect {
	const char *text;
	const char *pieces[NKINDS]; /* '|'-separated, per kind */
};

/* Pieces per kind: cl100k (and Llama 3) | o200k | gpt2.  Derived by hand
 * from each regex's leftmost-first semantics. */
static const struct expect expects[] = {
	{"I'm don't HE'S 'LL we'll they've 'S x'Re",
	 {"I|'m| don|'t| HE|'S| '|LL| we|'ll| they|'ve| '|S| x|'Re",
	  "I'm| don't| HE'S| '|LL| we'll| they've| '|S| x'Re",
	  "I|'m| don|'t| HE|'|S| '|LL| we|'ll| they|'ve| '|S| x|'|Re"}},
	{"'s'sa's", {"'s|'s|a|'s", "'s's|a's", "'s|'s|a|'s"}},
	{"1234567 12", {"123|456|7| |12", "123|456|7| |12", "1234567| 12"}},
	{"a   b", {"a|  | b", "a|  | b", "a|  | b"}},
	{"a \n\n b", {"a| \n\n| b", "a| \n\n| b", "a| \n\n| b"}},
	{"trailing   ", {"trailing|   ", "trailing|   ", "trailing|   "}},
	{"line1\r\nline2\r\n",
	 {"line|1|\r\n|line|2|\r\n", "line|1|\r\n|line|2|\r\n", "line|1|\r|\n|line|2|\r\n"}},
	{"\tx\t\ty", {"\tx|\t|\ty", "\tx|\t|\ty", "\t|x|\t|\t|y"}},
	{"a\xC2\xA0" "b a\xC2\xA0\xC2\xA0" "b",
	 {"a|\xC2\xA0" "b| a|\xC2\xA0|\xC2\xA0" "b", "a|\xC2\xA0" "b| a|\xC2\xA0|\xC2\xA0" "b",
	  "a|\xC2\xA0|b| a|\xC2\xA0|\xC2\xA0|b"}},
	/* man + ZWJ + woman + ZWJ + girl (So, Cf): one punctuation run */
	{"\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 ok",
	 {"\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7| ok",
	  "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7| ok",
	  "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7| ok"}},
	/* heart + VS16 (Mn) + x: o200k's word classes take marks */
	{"\xE2\x9D\xA4\xEF\xB8\x8Fx",
	 {"\xE2\x9D\xA4\xEF\xB8\x8F|x", "\xE2\x9D\xA4\xEF\xB8\x8Fx", "\xE2\x9D\xA4\xEF\xB8\x8F|x"}},
	/* 日本語、テキスト。 */
	{"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x80\x81\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9"
	 "\xE3\x83\x88\xE3\x80\x82",
	 {"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E|\xE3\x80\x81\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9"
	  "\xE3\x83\x88|\xE3\x80\x82",
	  "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E|\xE3\x80\x81\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9"
	  "\xE3\x83\x88|\xE3\x80\x82",
	  "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E|\xE3\x80\x81|\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9"
	  "\xE3\x83\x88|\xE3\x80\x82"}},
	/* مرحبا بالعالم */
	{"\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD8\xA8\xD8\xA7\xD9\x84\xD8\xB9\xD8\xA7\xD9\x84"
	 "\xD9\x85",
	 {"\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7| \xD8\xA8\xD8\xA7\xD9\x84\xD8\xB9\xD8\xA7\xD9\x84"
	  "\xD9\x85",
	  "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7| \xD8\xA8\xD8\xA7\xD9\x84\xD8\xB9\xD8\xA7\xD9\x84"
	  "\xD9\x85",
	  "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7| \xD8\xA8\xD8\xA7\xD9\x84\xD8\xB9\xD8\xA7\xD9\x84"
	  "\xD9\x85"}},
	/* नमस्ते दुनिया: न म स ्(Mn) त े(Mn) ' ' द ु(Mn) न ि(Mc) य ा(Mc) */
	{"\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 \xE0\xA4\xA6"
	 "\xE0\xA5\x81\xE0\xA4\xA8\xE0\xA4\xBF\xE0\xA4\xAF\xE0\xA4\xBE",
	 {"\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8|\xE0\xA5\x8D\xE0\xA4\xA4|\xE0\xA5\x87| \xE0\xA4\xA6"
	  "|\xE0\xA5\x81\xE0\xA4\xA8|\xE0\xA4\xBF\xE0\xA4\xAF|\xE0\xA4\xBE",
	  "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87| \xE0\xA4\xA6"
	  "\xE0\xA5\x81\xE0\xA4\xA8\xE0\xA4\xBF\xE0\xA4\xAF\xE0\xA4\xBE",
	  "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8|\xE0\xA5\x8D|\xE0\xA4\xA4|\xE0\xA5\x87| \xE0\xA4\xA6"
	  "|\xE0\xA5\x81|\xE0\xA4\xA8|\xE0\xA4\xBF|\xE0\xA4\xAF|\xE0\xA4\xBE"}},
	{"hello,world!!!", {"hello|,world|!!!", "hello|,world|!!!", "hello|,|world|!!!"}},
	{"\xC2\xA1Hola", {"\xC2\xA1Hola", "\xC2\xA1Hola", "\xC2\xA1|Hola"}},
	{"HELLO'S", {"HELLO|'S", "HELLO'S", "HELLO|'|S"}},
	{"HelloWorld ABCdef helloWORLD",
	 {"HelloWorld| ABCdef| helloWORLD", "Hello|World| ABCdef| hello|WORLD",
	  "HelloWorld| ABCdef| helloWORLD"}},
	{"a+=b;\n/x", {"a|+=|b|;\n|/x", "a|+=|b|;\n/|x", "a|+=|b|;|\n|/|x"}},
	{"abc123def", {"abc|123|def", "abc|123|def", "abc|123|def"}},
	/* o200k: [U]* gives back to the last Lo before an Lu: 漢A! */
	{"\xE6\xBC\xA2" "A!", {"\xE6\xBC\xA2" "A|!", "\xE6\xBC\xA2|A|!", "\xE6\xBC\xA2" "A|!"}},
	/* long s (U+017F) folds to 's' in (?i:...) */
	{"'\xC5\xBFt", {"'\xC5\xBF|t", "'\xC5\xBFt", "'|\xC5\xBFt"}},
	/* U+180E is not White_Space (PCRE2's own \s would say it is) */
	{"!\xE1\xA0\x8E!", {"!\xE1\xA0\x8E!", "!\xE1\xA0\x8E!", "!\xE1\xA0\x8E!"}},
	/* U+0085 and U+3000 are */
	{"!\xC2\x85!\xE3\x80\x80\xE3\x80\x80", {"!|\xC2\x85|!|\xE3\x80\x80\xE3\x80\x80",
	  "!|\xC2\x85|!|\xE3\x80\x80\xE3\x80\x80", "!|\xC2\x85|!|\xE3\x80\x80\xE3\x80\x80"}},
	{" \r\n \r \t\r\nx", {" \r\n \r \t\r\n|x", " \r\n \r \t\r\n|x", " \r\n \r \t\r|\n|x"}},
	{"  !! ?", {" | !!| ?", " | !!| ?", " | !!| ?"}},
	{"x  ", {"x|  ", "x|  ", "x|  "}},
	{"", {"", "", ""}},
};

static void check_split(struct titan_pretok *p, struct titan_pretok_state *st,
			   const char *engine, int k, const struct expect *e)
{
	struct pieces ps = {0};
	char got[1024], want[1024];
	split(p, st, (const uint8_t *)e->text, strlen(e->text), &ps);
	show_pieces(&ps, got, sizeof got);
	/* the expectation, shown the same way */
	size_t o = 0;
	const char *w = e->pieces[k];
	for (const char *q = w;; q++) {
		if (*q == '|' || *q == '\0') {
			show((const uint8_t *)w, (size_t)(q - w), want + o, sizeof want - o);
			o += strlen(want + o);
			if (!*q)
				break;
			want[o++] = '|';
			w = q + 1;
		}
	}
	if (strcmp(got, want) != 0)
		fail_msg("%s %s on \"%s\":\n  got  %s\n  want %s", kind_names[k], engine, e->text, got,
			 want);
	pieces_free(&ps);
}

static void test_expected(void **state)
{
	(void)state;
	for (int k = 0; k < NKINDS; k++) {
		struct pair pr;
		pair_init(&pr, kinds[k]);
		for (size_t i = 0; i < sizeof expects / sizeof expects[0]; i++) {
			check_split(pr.scan, pr.scan_st, "scanner", k, &expects[i]);
			check_split(pr.re, pr.re_st, "pcre2", k, &expects[i]);
		}
		pair_free(&pr);
	}
}

/* --------------------------------------------- class tables vs PCRE2 */

static uint8_t *skip_cp; /* code points PCRE2 does not know (newer Unicode) */

/* Version (major << 8 | minor) that assigned c per the tables' age data, 0
 * for code points assigned before 14.0 or unassigned. */
static unsigned table_age(uint32_t c)
{
	size_t lo = 0, hi = tok_uc_age_nranges;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (c < tok_uc_age_ranges[mid][0])
			hi = mid;
		else if (c > tok_uc_age_ranges[mid][1])
			lo = mid + 1;
		else
			return tok_uc_age_ranges[mid][2];
	}
	return 0;
}

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

static bool is_surrogate(uint32_t c)
{
	return c >= 0xD800 && c < 0xE000;
}

/* Every code point's class in the tables equals PCRE2's Unicode properties,
 * except code points that the tables' age data says were assigned after
 * PCRE2's Unicode version; PCRE2 must call each of those unassigned (Cn). */
static int setup_classes(void **state)
{
	(void)state;
	static const char probe[] = "(\\p{Lu})|(\\p{Ll})|(\\p{Lt})|(\\p{Lm})|(\\p{Lo})|(\\p{M})|"
				    "(\\p{N})|(\\p{White_Space})|(\\p{Cn})|(.)";
	int err;
	PCRE2_SIZE eoff;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)probe, PCRE2_ZERO_TERMINATED,
				       PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED | PCRE2_DOTALL, &err,
				       &eoff, NULL);
	if (!re)
		return -1;
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	skip_cp = calloc(0x110000, 1);
	size_t nskip = 0, nnew = 0, bad = 0;
	char version[32] = "";
	unsigned major = 0, minor = 0;
	pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, version);
	if (sscanf(version, "%u.%u", &major, &minor) != 2 || major < 14) {
		/* the age data starts at 14.0 */
		print_message("PCRE2's Unicode version '%s': 14.0 or later needed\n", version);
		return -1;
	}
	const unsigned pcre2_age = major << 8 | minor;
	for (uint32_t c = 0; c < 0x110000; c++) {
		if (is_surrogate(c))
			continue;
		uint8_t b[4];
		size_t n = put_cp(b, c);
		int rc = pcre2_match(re, b, n, 0, 0, md, NULL);
		unsigned want = rc >= 2 && rc <= 9 ? (unsigned)rc - 1 : TOK_UC_OTHER;
		unsigned got = tok_uc_class(c);
		unsigned age = table_age(c);
		bool newer = age > pcre2_age; /* assigned after PCRE2's Unicode */
		nnew += newer;
		if (newer && rc != 10) {
			if (bad++ < 20)
				print_message("U+%04X: the tables' age data says Unicode %u.%u, yet PCRE2 "
					      "(Unicode %s) knows it\n",
					      c, age >> 8, age & 0xFF, version);
			continue;
		}
		if (got == want)
			continue;
		if (newer) {
			skip_cp[c] = 1;
			nskip++;
		} else if (bad++ < 20) {
			print_message("U+%04X: tables say class %u, PCRE2 (Unicode %s) %u\n", c, got,
				      version, want);
		}
	}
	pcre2_match_data_free(md);
	pcre2_code_free(re);
	print_message("# tables: Unicode %s, PCRE2: Unicode %s; %zu of the %zu code points assigned "
		      "after Unicode %u.%u (per the tables' age data) are letters, marks, numbers "
		      "or spaces there and left out of the comparisons\n",
		      tok_uc_version, version, nskip, nnew, major, minor);
	return bad == 0 ? 0 : -1;
}

static int teardown_classes(void **state)
{
	(void)state;
	free(skip_cp);
	return 0;
}

static void test_classes(void **state)
{
	(void)state;
	/* a few fixed answers, independent of PCRE2 */
	assert_int_equal(tok_uc_class('a'), TOK_UC_LL);
	assert_int_equal(tok_uc_class('A'), TOK_UC_LU);
	assert_int_equal(tok_uc_class(0x01C5), TOK_UC_LT); /* Dž */
	assert_int_equal(tok_uc_class(0x02B0), TOK_UC_LM);
	assert_int_equal(tok_uc_class(0x4E00), TOK_UC_LO);
	assert_int_equal(tok_uc_class(0x0301), TOK_UC_M);
	assert_int_equal(tok_uc_class(0x0903), TOK_UC_M);  /* Mc */
	assert_int_equal(tok_uc_class(0x20DD), TOK_UC_M);  /* Me */
	assert_int_equal(tok_uc_class(0x00B2), TOK_UC_N);  /* No */
	assert_int_equal(tok_uc_class(0x2160), TOK_UC_N);  /* Nl */
	assert_int_equal(tok_uc_class(0x31350), TOK_UC_LO); /* CJK Ext H (Unicode 15.0) */
	assert_int_equal(tok_uc_class(0x2EBF0), TOK_UC_LO); /* CJK Ext I (Unicode 15.1) */
	assert_int_equal(tok_uc_class(0x10D50), TOK_UC_LU); /* Garay (Unicode 16.0) */
	assert_int_equal(tok_uc_class(0x10D70), TOK_UC_LL);
	assert_int_equal(tok_uc_class(0x10D69), TOK_UC_M);
	assert_int_equal(tok_uc_class(0x16D40), TOK_UC_LM); /* Kirat Rai */
	assert_int_equal(tok_uc_class(0x16D70), TOK_UC_N);
	assert_int_equal(tok_uc_class(0x1CCF0), TOK_UC_N);  /* outlined digit zero */
	assert_int_equal(tok_uc_class(0x1CC00), TOK_UC_OTHER); /* So */
	assert_string_equal(tok_uc_version, "16.0.0");
	/* the age data: sorted, disjoint, versions 14.0 .. 16.0 */
	assert_true(tok_uc_age_nranges > 0);
	for (size_t i = 0; i < tok_uc_age_nranges; i++) {
		assert_true(tok_uc_age_ranges[i][0] <= tok_uc_age_ranges[i][1]);
		assert_true(tok_uc_age_ranges[i][1] < 0x110000);
		assert_in_range(tok_uc_age_ranges[i][2], 0x0E00, 0x1000);
		if (i > 0)
			assert_true(tok_uc_age_ranges[i - 1][1] < tok_uc_age_ranges[i][0]);
	}
	assert_int_equal(table_age('a'), 0);
	assert_int_equal(table_age(0x4E00), 0);
	assert_int_equal(table_age(0x061D), 0x0E00);  /* Arabic end of text mark */
	assert_int_equal(table_age(0x31350), 0x0F00);
	assert_int_equal(table_age(0x2EBF0), 0x1000); /* 15.1 and 16.0 both say 16.0 */
	assert_int_equal(table_age(0x10D50), 0x1000);
	assert_int_equal(table_age(0x11B60), 0);      /* unassigned in 16.0 */
	static const uint32_t ws[] = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680,
				      0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
	for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
		assert_int_equal(tok_uc_class(ws[i]), TOK_UC_WS);
	size_t nws = 0;
	for (uint32_t c = 0; c < 0x110000; c++)
		nws += tok_uc_class(c) == TOK_UC_WS;
	assert_int_equal(nws, 25);
	assert_int_equal(tok_uc_class(0x180E), TOK_UC_OTHER);
	assert_int_equal(tok_uc_class(0x200B), TOK_UC_OTHER);
	assert_int_equal(tok_uc_class(0x1C), TOK_UC_OTHER);
	assert_int_equal(tok_uc_class(0xE000), TOK_UC_OTHER);
	assert_int_equal(tok_uc_class(0x10FFFF), TOK_UC_OTHER);
	assert_int_equal(tok_uc_class(0x110000), TOK_UC_OTHER);
	assert_non_null(skip_cp); /* set up against PCRE2 */
}

/* ------------------------------------ every code point, in contexts */

/* Contexts around X: between letters, after a space, before and after
 * digits, after a newline, doubled, before a contraction, upper case
 * around it, before trailing spaces. */
static size_t put_contexts(uint8_t *o, uint32_t c)
{
	uint8_t x[4];
	size_t k = put_cp(x, c), n = 0;
#define LIT(s) (memcpy(o + n, s, sizeof s - 1), n += sizeof s - 1)
#define X() (memcpy(o + n, x, k), n += k)
	LIT("a");
	X();
	LIT("b ");
	X();
	LIT("1");
	X();
	LIT("\n");
	X();
	X();
	LIT("'s A");
	X();
	LIT("'S");
	X();
	LIT("  ");
#undef LIT
#undef X
	return n;
}

static void test_every_code_point(void **state)
{
	(void)state;
	enum { CHUNK = 8192 };
	uint8_t *buf = malloc(CHUNK * 48);
	assert_non_null(buf);
	struct pair pr[NKINDS];
	struct pieces a = {0}, b = {0};
	for (int k = 0; k < NKINDS; k++)
		pair_init(&pr[k], kinds[k]);
	for (uint32_t c0 = 1; c0 < 0x110000; c0 += CHUNK) {
		size_t n = 0;
		for (uint32_t c = c0; c < c0 + CHUNK && c < 0x110000; c++)
			if (!is_surrogate(c) && !skip_cp[c])
				n += put_contexts(buf + n, c);
		char what[64];
		for (int k = 0; k < NKINDS; k++) {
			snprintf(what, sizeof what, "%s, U+%04X..", kind_names[k], c0);
			same(&pr[k], what, buf, n, &a, &b);
			/* the known patterns match everything: pieces tile the text */
			size_t end = 0;
			for (size_t i = 0; i < a.n; i++) {
				assert_int_equal(a.off[i], end);
				end += a.len[i];
			}
			assert_int_equal(end, n);
		}
	}
	for (int k = 0; k < NKINDS; k++)
		pair_free(&pr[k]);
	pieces_free(&a);
	pieces_free(&b);
	free(buf);
}

/* -------------------------------------------------- random strings */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t below)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	rng_state = x;
	return (uint32_t)((x >> 11) % below);
}

static uint32_t random_cp(void)
{
	static const char punct[] = "!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~";
	static const uint32_t misc[] = {
		0xA0, 0x85, 0x3000, 0x2028, 0x180E, 0x200B, 0x200D, 0xFEFF, 0x17F, 0x1C5, 0x2B0,
		0x0301, 0x0308, 0x094D, 0x093F, 0x20DD, 0xFE0F, 0x00B2, 0x2160, 0x0661, 0xFF11,
		0x00A1, 0x00BF, 0x2019, 0x201C, 0x3001, 0x3002, 0x1F600, 0x1F468, 0x1F3FB, 0x2764,
		0x00E9, 0x00C9, 0x0394, 0x03B4, 0x0416, 0x0436, 0x05D0, 0x0627, 0x0915, 0x0E01,
		0xAC00, 0x3042, 0x30AB, 0x30FC, 0x4E00, 0x9FFF, 0x20000, 0xE000, 0x10FFFD, 0x1D400};
	switch (rnd(12)) {
	case 0:
	case 1:
		return 'a' + rnd(26);
	case 2:
		return 'A' + rnd(26);
	case 3:
		return '0' + rnd(10);
	case 4:
		return " \t\r\n\v\f  "[rnd(8)];
	case 5:
		return (uint32_t)punct[rnd(sizeof punct - 1)];
	case 6:
		return "'sStTlLdDmMrReEvV"[rnd(17)];
	case 7:
		return 0x4E00 + rnd(0x5000);               /* CJK */
	case 8:
		return 0x1F300 + rnd(0x300);               /* emoji */
	case 9:
		return 0x300 + rnd(0x70);                  /* combining marks */
	case 10:
		return misc[rnd(sizeof misc / sizeof misc[0])];
	default: {
		uint32_t c = 1 + rnd(0x10FFFF);
		return is_surrogate(c) || skip_cp[c] ? 'x' : c;
	}
	}
}

static void test_random_strings(void **state)
{
	(void)state;
	struct pair pr[NKINDS];
	struct pieces a = {0}, b = {0};
	uint8_t buf[32 * 4];
	for (int k = 0; k < NKINDS; k++)
		pair_init(&pr[k], kinds[k]);
	for (int t = 0; t < 200000; t++) {
		size_t n = 0, len = rnd(t < 1000 ? 4 : 32);
		for (size_t i = 0; i < len; i++)
			n += put_cp(buf + n, random_cp());
		char what[64];
		for (int k = 0; k < NKINDS; k++) {
			snprintf(what, sizeof what, "%s, random string %d", kind_names[k], t);
			same(&pr[k], what, buf, n, &a, &b);
		}
	}
	for (int k = 0; k < NKINDS; k++)
		pair_free(&pr[k]);
	pieces_free(&a);
	pieces_free(&b);
}

/* Long runs of one class (deep backtracking for PCRE2, long pieces). */
static void test_long_runs(void **state)
{
	(void)state;
	const size_t n = 1 << 20;
	uint8_t *buf = malloc(n + 8);
	struct pieces a = {0}, b = {0};
	assert_non_null(buf);
	static const char fills[][4] = {" ", "\n", "a", "1", "!", " \n", "\xC2\xA0"};
	for (size_t f = 0; f < sizeof fills / sizeof fills[0]; f++) {
		size_t k = strlen(fills[f]), m = 0;
		while (m + k <= n) {
			memcpy(buf + m, fills[f], k);
			m += k;
		}
		buf[m] = 'x';
		for (int k2 = 0; k2 < NKINDS; k2++) {
			struct pair pr;
			pair_init(&pr, kinds[k2]);
			same(&pr, kind_names[k2], buf, m, &a, &b);
			same(&pr, kind_names[k2], buf, m + 1, &a, &b);
			pair_free(&pr);
		}
	}
	pieces_free(&a);
	pieces_free(&b);
	free(buf);
}

/* --------------------------------------------------------------- API */

static void test_api(void **state)
{
	(void)state;
	assert_string_equal(titan_pretok_pattern(TITAN_PRETOK_GPT2),
			    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
			    "\\s+(?!\\S)|\\s+");
	assert_string_equal(titan_pretok_pattern(TITAN_PRETOK_CL100K),
			    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
			    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|"
			    "\\s+");
	assert_non_null(strstr(titan_pretok_pattern(TITAN_PRETOK_O200K), "[\\r\\n/]*"));
	assert_null(titan_pretok_pattern(TITAN_PRETOK_REGEX));

	assert_null(titan_pretok_new(TITAN_PRETOK_REGEX, NULL, false));
	assert_int_equal(titan_error_last()->code, TITAN_E_INVALID);
	assert_null(titan_pretok_new(TITAN_PRETOK_CL100K, "x", false));
	assert_int_equal(titan_error_last()->code, TITAN_E_INVALID);
	assert_null(titan_pretok_new(TITAN_PRETOK_REGEX, "a(b\\s", false));
	assert_int_equal(titan_error_last()->code, TITAN_E_INVALID);
	/* PCRE2's message, at the offset in the user's pattern */
	assert_non_null(strstr(titan_errmsg(), "missing closing parenthesis"));
	assert_non_null(strstr(titan_errmsg(), "at offset 5"));

	struct titan_pretok *p = titan_pretok_new(TITAN_PRETOK_O200K, NULL, false);
	assert_non_null(p);
	assert_int_equal(titan_pretok_get_kind(p), TITAN_PRETOK_O200K);
	/* early stop returns fn's value; a NULL state is fine for a scanner */
	struct pieces ps = {.stop_after = 2};
	const char *txt = "one two three";
	ps.base = (const uint8_t *)txt;
	assert_int_equal(titan_pretok_split(p, NULL, ps.base, strlen(txt), collect, &ps), 7);
	assert_int_equal(ps.n, 2);
	pieces_free(&ps);
	/* bad bytes: the scanner reads no further than n and covers them */
	ps.base = (const uint8_t *)"a\xF0\x9F" "b\xC3";
	assert_int_equal(titan_pretok_split(p, NULL, ps.base, 5, collect, &ps), 0);
	size_t total = 0;
	for (size_t i = 0; i < ps.n; i++)
		total += ps.len[i];
	assert_int_equal(total, 5);
	pieces_free(&ps);
	titan_pretok_free(p);
	titan_pretok_free(NULL);
	titan_pretok_state_free(NULL);

	p = titan_pretok_new(TITAN_PRETOK_CL100K, NULL, true);
	assert_non_null(p);
	ps.base = (const uint8_t *)"ok\xFF";
	assert_int_equal(titan_pretok_split(p, NULL, ps.base, 3, collect, &ps), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "invalid UTF-8 at byte 2"));
	pieces_free(&ps);
	titan_pretok_free(p);
}

static void expect_regex(const char *re, const char *text, const char *want)
{
	struct titan_pretok *p = titan_pretok_new(TITAN_PRETOK_REGEX, re, false);
	if (!p)
		fail_msg("%s: %s", re, titan_errmsg());
	assert_int_equal(titan_pretok_get_kind(p), TITAN_PRETOK_REGEX);
	struct titan_pretok_state *st = titan_pretok_state_new(p);
	struct pieces ps = {0};
	char got[256];
	split(p, st, (const uint8_t *)text, strlen(text), &ps);
	show_pieces(&ps, got, sizeof got);
	if (strcmp(got, want) != 0)
		fail_msg("/%s/ on \"%s\": got \"%s\", want \"%s\"", re, text, got, want);
	pieces_free(&ps);
	titan_pretok_state_free(st);
	titan_pretok_free(p);
}

static void test_regex(void **state)
{
	(void)state;
	/* \s and \S are White_Space, in and out of classes */
	static const struct {
		const char *in, *out;
	} tr[] = {
		{"\\s+", "\\p{White_Space}+"},
		{"[^\\S\\r\\n]", "[^\\P{White_Space}\\r\\n]"},
		{"\\\\s", "\\\\s"},
		{"\\Q\\s\\E\\s", "\\Q\\s\\E\\p{White_Space}"},
		{"[]\\s]", "[]\\p{White_Space}]"},
		{"[[:alpha:]\\s]", "[[:alpha:]\\p{White_Space}]"},
		{"\\p{L}\\d", "\\p{L}\\d"},
	};
	for (size_t i = 0; i < sizeof tr / sizeof tr[0]; i++) {
		char *o = tok_re_translate(tr[i].in);
		assert_non_null(o);
		assert_string_equal(o, tr[i].out);
		free(o);
	}
	expect_regex("\\s+", "a\xE1\xA0\x8E" "b c\xC2\x85", " |\\xC2\\x85");
	expect_regex("\\S+", "a\xE1\xA0\x8E" "b c", "a\\xE1\\xA0\\x8Eb|c");
	/* Rust find-iter: empty matches emit nothing, the search moves on one
	 * code point; unmatched text is skipped */
	expect_regex("a*", "baab", "aa");
	expect_regex("x*", "\xC3\xA9\xC3\xA9", "");
	expect_regex("(?=b)|a", "abab", "a|a");
	expect_regex("[0-9]+", "ab12cd345", "12|345");
	expect_regex("\\p{L}+", "\xC3\xA9t\xC3\xA9 2", "\\xC3\\xA9t\\xC3\\xA9");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_expected),
		cmocka_unit_test(test_classes),
		cmocka_unit_test(test_every_code_point),
		cmocka_unit_test(test_random_strings),
		cmocka_unit_test(test_long_runs),
		cmocka_unit_test(test_api),
		cmocka_unit_test(test_regex),
	};
	return cmocka_run_group_tests(tests, setup_classes, teardown_classes);
}
