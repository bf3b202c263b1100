/*
 * test_tokenizer.c — BPE tokenizers (lib/tok/tokenizer.c, bpe.c,
 * tiktoken.c, hf.c) on hand-made fixtures (tests/fixtures/tok, written by
 * gen.py there; every expected id list below was computed by hand and
 * checked against the npm tiktoken and tokenizers peers): tiktoken rank
 * semantics vs HF merge-rank semantics, ignore_merges, added and special
 * tokens, HF pre-tokenizer variants, invalid UTF-8, round trips, long
 * pieces (not quadratic), file errors, fingerprints, and — when
 * tests/peers/setup.sh has fetched them — real vocabularies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/core.h"
#include "titan/tok.h"
#include "tok/tok_impl.h"

/* Not a speed test (the machines are shared and noisy; speed lives in
 * bench/): a guard against quadratic algorithms, which take many minutes
 * on the 1-4 MiB inputs below where linear ones take well under a second. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define TIME_LIMIT_S 120.0 /* sanitizers slow everything several times */
#else
#define TIME_LIMIT_S 30.0
#endif

/* ------------------------------------------------------------ helpers */

static const char *path_of(char *buf, size_t n, const char *rel)
{
	const char *s = getenv("TITAN_SRCDIR");
	snprintf(buf, n, "%s/%s", s && *s ? s : ".", rel);
	return buf;
}

static struct titan_tokenizer *load_rel(const char *rel)
{
	char path[512];
	struct titan_tokenizer *t = NULL;
	int rc = titan_tokenizer_load(path_of(path, sizeof path, rel), TITAN_ENC_AUTO, &t);
	if (rc)
		print_error("load %s: %s\n", rel, titan_errmsg());
	assert_int_equal(rc, 0);
	return t;
}

/* A temporary file holding `text`; the path is written to buf. */
static const char *tmp_file(char *buf, size_t n, const char *text, size_t len)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(buf, n, "%s/test_tokenizer_XXXXXX", tmp && *tmp ? tmp : "/tmp");
	int fd = mkstemp(buf);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	close(fd);
	return buf;
}

static void expect_ids(const struct titan_tokenizer *t, const char *text, size_t n,
		       bool allow, const uint32_t *want, size_t nwant)
{
	struct titan_tok_scratch *s = titan_tok_scratch_new(t);
	struct titan_ids ids = { 0 };
	assert_non_null(s);
	assert_int_equal(titan_tokenizer_encode(t, s, (const uint8_t *)text, n, allow, &ids), 0);
	if (ids.n != nwant || (nwant && memcmp(ids.p, want, nwant * sizeof *want))) {
		print_error("text '%s': got", text);
		for (size_t i = 0; i < ids.n; i++)
			print_error(" %u", ids.p[i]);
		print_error(", want");
		for (size_t i = 0; i < nwant; i++)
			print_error(" %u", want[i]);
		print_error("\n");
		fail();
	}
	titan_ids_release(&ids);
	titan_tok_scratch_free(s);
}

#define IDS(...) ((const uint32_t[]){ __VA_ARGS__ }), \
	(sizeof((const uint32_t[]){ __VA_ARGS__ }) / sizeof(uint32_t))
#define EXPECT(t, text, allow, ...) expect_ids((t), (text), strlen(text), (allow), IDS(__VA_ARGS__))

/* Loading `text` fails with `code` and the message "PATH" + msg. */
static void expect_load_error_enc(const char *text, enum titan_tok_encoding enc, int code,
				  const char *msg)
{
	char path[512], want[1024];
	struct titan_tokenizer *t = (void *)1;
	tmp_file(path, sizeof path, text, strlen(text));
	assert_int_equal(titan_tokenizer_load(path, enc, &t), code);
	assert_null(t);
	snprintf(want, sizeof want, "%s%s", path, msg);
	if (strcmp(titan_errmsg(), want)) {
		print_error("got  '%s'\nwant '%s'\n", titan_errmsg(), want);
		fail();
	}
	unlink(path);
}
#define expect_load_error(text, code, msg) expect_load_error_enc((text), TITAN_ENC_AUTO, (code), (msg))

/* tiny.tiktoken as text with `extra` lines appended. */
static char *tiny_tiktoken_plus(const char *extra)
{
	char path[512];
	uint8_t *data;
	size_t n;
	assert_int_equal(titan_tok_read_file(path_of(path, sizeof path,
						     "tests/fixtures/tok/tiny.tiktoken"), &data, &n), 0);
	char *r = malloc(n + strlen(extra) + 1);
	memcpy(r, data, n);
	strcpy(r + n, extra);
	free(data);
	return r;
}

/* tiny.json with `key` set to the JSON `value` (dotted path, one level
 * of nesting: "model.type"), written to a temporary file. */
static const char *tiny_json_with(char *path, size_t n, const char *key, const char *value)
{
	char src[512], k[64];
	json_error_t err;
	json_t *root = json_load_file(path_of(src, sizeof src, "tests/fixtures/tok/tiny.json"), 0,
				      &err);
	assert_non_null(root);
	json_t *obj = root;
	snprintf(k, sizeof k, "%s", key);
	char *dot = strchr(k, '.');
	if (dot) {
		*dot = 0;
		obj = json_object_get(root, k);
	}
	json_t *v = json_loads(value, JSON_DECODE_ANY, &err);
	assert_non_null(v);
	json_object_set_new(obj, dot ? dot + 1 : k, v);
	char *text = json_dumps(root, 0);
	tmp_file(path, n, text, strlen(text));
	free(text);
	json_decref(root);
	return path;
}

static struct titan_tokenizer *tiny_json_variant(const char *key, const char *value)
{
	char path[512];
	struct titan_tokenizer *t = NULL;
	tiny_json_with(path, sizeof path, key, value);
	int rc = titan_tokenizer_load(path, TITAN_ENC_AUTO, &t);
	if (rc)
		print_error("%s\n", titan_errmsg());
	assert_int_equal(rc, 0);
	unlink(path);
	return t;
}

/* -------------------------------------------------------------- tests */

static void test_encoding_names(void **state)
{
	static const struct { const char *name; enum titan_tok_encoding e; } names[] = {
		{ "llama3", TITAN_ENC_LLAMA3 }, { "cl100k_base", TITAN_ENC_CL100K },
		{ "o200k_base", TITAN_ENC_O200K }, { "auto", TITAN_ENC_AUTO },
	};
	enum titan_tok_encoding e;
	(void)state;
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(titan_tok_encoding_parse(names[i].name, &e), 0);
		assert_int_equal(e, names[i].e);
		assert_string_equal(titan_tok_encoding_name(e), names[i].name);
	}
	assert_int_equal(titan_tok_encoding_parse("p50k", &e), TITAN_E_INVALID);
	assert_string_equal(titan_errmsg(),
			    "unknown encoding 'p50k' (expected llama3, cl100k_base, o200k_base or auto)");
}

static void test_tiktoken_tiny(void **state)
{
	(void)state;
	struct titan_tokenizer *t = load_rel("tests/fixtures/tok/tiny.tiktoken");
	/* 265 ranks, not cl100k/o200k: Llama 3 convention, 256 specials at 265 */
	assert_int_equal(titan_tokenizer_format(t), TITAN_TOK_TIKTOKEN);
	assert_int_equal(titan_tokenizer_encoding(t), TITAN_ENC_LLAMA3);
	assert_int_equal(titan_tokenizer_pretok_kind(t), TITAN_PRETOK_CL100K);
	assert_int_equal(titan_tokenizer_vocab_size(t), 265 + 256);
	assert_int_equal(titan_tokenizer_bos(t), 265);
	assert_int_equal(titan_tokenizer_eos(t), 266);
	assert_int_equal(titan_tokenizer_special(t, "<|begin_of_text|>"), 265);
	assert_int_equal(titan_tokenizer_special(t, "<|reserved_special_token_0|>"), 267);
	assert_int_equal(titan_tokenizer_special(t, "<|finetune_right_pad_id|>"), 269);
	assert_int_equal(titan_tokenizer_special(t, "<|eot_id|>"), 274);
	assert_int_equal(titan_tokenizer_special(t, "<|python_tag|>"), 275);
	assert_int_equal(titan_tokenizer_special(t, "<|reserved_special_token_2|>"), 276);
	assert_int_equal(titan_tokenizer_special(t, "<|reserved_special_token_246|>"), 520);
	assert_int_equal(titan_tokenizer_special(t, "<|reserved_special_token_247|>"), -1);
	assert_int_equal(titan_tokenizer_special(t, "aa"), -1);

	size_t len;
	const uint8_t *b = titan_tokenizer_token(t, 261, &len);
	assert_int_equal(len, 4);
	assert_memory_equal(b, "aaaa", 4);
	b = titan_tokenizer_token(t, 274, &len);
	assert_int_equal(len, 10);
	assert_memory_equal(b, "<|eot_id|>", 10);
	assert_null(titan_tokenizer_token(t, 521, &len));

	/* ties go to the leftmost pair: aa|a */
	EXPECT(t, "aaa", false, 256, 'a');
	EXPECT(t, "aaaa", false, 261);
	EXPECT(t, "aaaaa", false, 261, 'a');
	/* ab (257) before bc (258); then ab+c = abc (259) is a token */
	EXPECT(t, "abcd", false, 259, 'd');
	/* a piece that is a token is emitted whole, though no merge leads to it */
	EXPECT(t, "xyz", false, 263);
	EXPECT(t, "xyzz", false, 'x', 'y', 'z', 'z');
	EXPECT(t, " ab", false, ' ', 257);
	EXPECT(t, "bcd bcdd aaaaaaaa", false, 264, ' ', 264, 'd', ' ', 261, 261);
	expect_ids(t, "", 0, true, NULL, 0);
	titan_tokenizer_free(t);
}

/* The same vocabulary with HF semantics: merge order, not ids, decides. */
static void test_tiktoken_vs_hf(void **state)
{
	(void)state;
	struct titan_tokenizer *tk = load_rel("tests/fixtures/tok/tiny.tiktoken");
	struct titan_tokenizer *hf = load_rel("tests/fixtures/tok/tiny.json");
	/* tiktoken: ab (rank 257) beats bc (258).  HF: "b c" is merge 0 */
	EXPECT(tk, "abcd", false, 259, 'd');
	EXPECT(hf, "abcd", false, 'a', 264);
	EXPECT(tk, " abcd", false, ' ', 259, 'd');
	EXPECT(hf, " abcd", false, 262, 264);
	/* HF without ignore_merges does not emit a vocabulary piece whole */
	EXPECT(tk, "abc", false, 259);
	EXPECT(hf, "abc", false, 'a', 258);
	EXPECT(tk, "xyz", false, 263);
	EXPECT(hf, "xyz", false, 'x', 'y', 'z');
	/* where the orders agree, so do the ids */
	EXPECT(hf, "aaa", false, 256, 'a');
	EXPECT(hf, "aaaaa", false, 261, 'a');
	EXPECT(hf, "bcd bcdd aaaaaaaa", false, 264, ' ', 264, 'd', ' ', 261, 261);
	titan_tokenizer_free(tk);
	titan_tokenizer_free(hf);
}

static void test_hf_tiny(void **state)
{
	(void)state;
	struct titan_tokenizer *t = load_rel("tests/fixtures/tok/tiny.json");
	assert_int_equal(titan_tokenizer_format(t), TITAN_TOK_HF_JSON);
	assert_int_equal(titan_tokenizer_pretok_kind(t), TITAN_PRETOK_GPT2);
	assert_int_equal(titan_tokenizer_vocab_size(t), 268);
	assert_int_equal(titan_tokenizer_bos(t), 265);
	assert_int_equal(titan_tokenizer_eos(t), 266);
	assert_int_equal(titan_tokenizer_special(t, "zzz"), 267);
	size_t len;
	const uint8_t *b = titan_tokenizer_token(t, 262, &len); /* "Ġa" */
	assert_int_equal(len, 2);
	assert_memory_equal(b, " a", 2);
	b = titan_tokenizer_token(t, 0, &len); /* "Ā" is byte 0 */
	assert_int_equal(len, 1);
	assert_int_equal(b[0], 0);

	/* the non-special added token is always matched, as HF does */
	EXPECT(t, "zzz", false, 267);
	EXPECT(t, "xzzzy", false, 'x', 267, 'y');
	titan_tokenizer_free(t);

	/* [a, b] merges and ignore_merges: vocabulary pieces come out whole */
	t = load_rel("tests/fixtures/tok/tiny-pairs.json");
	EXPECT(t, "abc", false, 259);
	EXPECT(t, "xyz", false, 263);
	EXPECT(t, "abcd", false, 'a', 264);
	EXPECT(t, " abcd", false, 262, 264);
	titan_tokenizer_free(t);
}

/* HF pre-tokenizer variants (ids from the tokenizers npm package). */
static void test_hf_pre_tokenizers(void **state)
{
	(void)state;
	struct titan_tokenizer *t;
	/* ByteLevel(add_prefix_space): once per text segment */
	t = tiny_json_variant("pre_tokenizer", "{\"type\": \"ByteLevel\", \"add_prefix_space\": true,"
					       " \"use_regex\": true}");
	assert_int_equal(titan_tokenizer_pretok_kind(t), TITAN_PRETOK_REGEX); /* not cuttable */
	EXPECT(t, "abcbd", false, 262, 258, 'b', 'd');
	EXPECT(t, "aa bcd", false, ' ', 256, ' ', 264);
	EXPECT(t, " abcd", false, 262, 264);
	EXPECT(t, "a<|end_of_text|> ab", true, 262, 266, ' ', 257);
	titan_tokenizer_free(t);
	/* ByteLevel(use_regex false): the whole segment is one piece */
	t = tiny_json_variant("pre_tokenizer", "{\"type\": \"ByteLevel\", \"use_regex\": false}");
	assert_int_equal(titan_tokenizer_pretok_kind(t), TITAN_PRETOK_REGEX);
	EXPECT(t, "xaayabcd", false, 'x', 256, 'y', 'a', 264);
	EXPECT(t, "aa bcd", false, 256, ' ', 264);
	titan_tokenizer_free(t);
	/* Split(String) then ByteLevel(add_prefix_space): a space per piece */
	t = tiny_json_variant("pre_tokenizer",
			      "{\"type\": \"Sequence\", \"pretokenizers\": ["
			      "{\"type\": \"Split\", \"pattern\": {\"String\": \"b\"}, \"behavior\": \"Isolated\","
			      " \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": true,"
			      " \"use_regex\": false}]}");
	EXPECT(t, "abcbd", false, 262, ' ', 'b', ' ', 'c', ' ', 'b', ' ', 'd');
	EXPECT(t, "aa bcd", false, ' ', 256, ' ', ' ', 'b', ' ', 260);
	EXPECT(t, "abcd<|end_of_text|>abcd", true, 262, ' ', 'b', ' ', 260, 266, 262, ' ', 'b', ' ',
	       260);
	titan_tokenizer_free(t);
	/* Split(Regex): text the regex skips is a piece of its own */
	t = tiny_json_variant("pre_tokenizer",
			      "{\"type\": \"Sequence\", \"pretokenizers\": ["
			      "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a+|c\"}, \"behavior\": \"Isolated\","
			      " \"invert\": false}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}");
	EXPECT(t, "xaayabcd", false, 'x', 256, 'y', 'a', 'b', 'c', 'd');
	EXPECT(t, " abcd", false, ' ', 'a', 'b', 'c', 'd');
	titan_tokenizer_free(t);
}

static void test_specials(void **state)
{
	(void)state;
	struct titan_tokenizer *tk = load_rel("tests/fixtures/tok/tiny.tiktoken");
	struct titan_tokenizer *hf = load_rel("tests/fixtures/tok/tiny.json");
	struct titan_tokenizer *ts[2] = { tk, hf };
	for (int i = 0; i < 2; i++) {
		struct titan_tokenizer *t = ts[i];
		EXPECT(t, "a<|end_of_text|>b", true, 'a', 266, 'b');
		EXPECT(t, "<|end_of_text|><|begin_of_text|>", true, 266, 265);
		EXPECT(t, "<|begin_of_text|>aaaa<|end_of_text|>", true, 265, 261, 266);
		/* an unfinished special is text */
		EXPECT(t, "<|end_of_text|", true, '<', '|', 'e', 'n', 'd', '_', 'o', 'f', '_', 't',
		       'e', 'x', 't', '|');
		EXPECT(t, "<<|end_of_text|>", true, '<', 266);
		/* without allow_special the text is ordinary */
		EXPECT(t, "a<|end_of_text|>b", false, 'a', '<', '|', 'e', 'n', 'd', '_', 'o', 'f', '_',
		       't', 'e', 'x', 't', '|', '>', 'b');
	}
	EXPECT(tk, "<|eot_id|><|reserved_special_token_246|>", true, 274, 520);
	EXPECT(tk, "<|reserved_special_token_24|>", true, 265 + 11 + 22);
	titan_tokenizer_free(tk);
	titan_tokenizer_free(hf);
}

static void test_invalid_utf8(void **state)
{
	(void)state;
	struct titan_tokenizer *t = load_rel("tests/fixtures/tok/tiny.tiktoken");
	struct titan_tok_scratch *s = titan_tok_scratch_new(t);
	struct titan_ids ids = { 0 };
	struct titan_bytes out = { 0 };
	/* 0xFF and a truncated 3-byte sequence (one U+FFFD each), a lone
	 * continuation byte */
	const char in[] = "a\xff" "b\xe2\x82" "c\x80";
	const char want[] = "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd";
	expect_ids(t, "a\xff" "b", 3, false, IDS('a', 0xef, 0xbf, 0xbd, 'b'));
	assert_int_equal(titan_tokenizer_encode(t, s, (const uint8_t *)in, sizeof in - 1, false, &ids), 0);
	assert_int_equal(titan_tokenizer_decode(t, ids.p, ids.n, &out), 0);
	assert_int_equal(out.n, sizeof want - 1);
	assert_memory_equal(out.p, want, out.n);
	titan_ids_release(&ids);
	titan_bytes_release(&out);
	titan_tok_scratch_free(s);
	titan_tokenizer_free(t);
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state % n);
}

/* Random valid UTF-8: ASCII (biased to the fixture's letters), Latin,
 * CJK, emoji, whitespace runs, digits, special-token text. */
static size_t random_utf8(char *buf, size_t cap)
{
	static const char *const bits[] = { "a", "b", "c", "d", "x", "y", "z", " ", "  ", "\n", "\r\n",
					    "\t", "7", "123", "'s", "é", "ü", "\xe4\xb8\xad",
					    "\xf0\x9f\x98\x80", "\xd9\x85", "<|end_of_text|>",
					    "<|begin_of_text|>", "zzz", ".", "!?", "\xc2\xa0" };
	size_t n = 0;
	size_t want = rnd((uint32_t)cap / 8);
	while (n < want) {
		const char *b = bits[rnd(sizeof bits / sizeof *bits)];
		size_t l = strlen(b);
		if (n + l >= cap)
			break;
		memcpy(buf + n, b, l);
		n += l;
	}
	return n;
}

static void test_round_trip(void **state)
{
	(void)state;
	const char *files[] = { "tests/fixtures/tok/tiny.tiktoken", "tests/fixtures/tok/tiny.json",
				"tests/fixtures/tok/tiny-pairs.json" };
	char buf[600];
	for (size_t f = 0; f < 3; f++) {
		struct titan_tokenizer *t = load_rel(files[f]);
		struct titan_tok_scratch *s = titan_tok_scratch_new(t);
		for (int it = 0; it < 2000; it++) {
			struct titan_ids ids = { 0 };
			struct titan_bytes out = { 0 };
			size_t n = random_utf8(buf, sizeof buf);
			bool allow = it & 1;
			assert_int_equal(titan_tokenizer_encode(t, s, (const uint8_t *)buf, n, allow, &ids), 0);
			assert_int_equal(titan_tokenizer_decode(t, ids.p, ids.n, &out), 0);
			assert_int_equal(out.n, n);
			if (n)
				assert_memory_equal(out.p, buf, n);
			titan_ids_release(&ids);
			titan_bytes_release(&out);
		}
		titan_tok_scratch_free(s);
		titan_tokenizer_free(t);
	}
}

/* Reference tiktoken BPE from the public API: the lowest-rank adjacent
 * concatenation, leftmost, until none is a token.  Quadratic and simple. */
static size_t reference_bpe(const struct titan_tokenizer *t, const uint8_t *p, size_t n,
			    uint32_t *out)
{
	size_t start[600], m = n, lens[265];
	for (uint32_t id = 0; id < 265; id++)
		titan_tokenizer_token(t, id, &lens[id]);
	for (size_t i = 0; i <= n; i++)
		start[i] = i;
	for (;;) {
		uint32_t best = UINT32_MAX;
		size_t bi = 0;
		for (size_t i = 0; i + 1 < m; i++) {
			for (uint32_t id = 0; id < 265 && id < best; id++) {
				size_t len = lens[id];
				if (len != start[i + 2] - start[i])
					continue;
				const uint8_t *b = titan_tokenizer_token(t, id, &len);
				if (!memcmp(b, p + start[i], len)) {
					best = id;
					bi = i;
				}
			}
		}
		if (best == UINT32_MAX)
			break;
		memmove(&start[bi + 1], &start[bi + 2], (m - bi - 1) * sizeof *start);
		m--;
	}
	for (size_t i = 0; i < m; i++) {
		for (uint32_t id = 0; id < 265; id++) {
			size_t len;
			const uint8_t *b = titan_tokenizer_token(t, id, &len);
			if (len == start[i + 1] - start[i] && !memcmp(b, p + start[i], len))
				out[i] = id;
		}
	}
	return m;
}

/* The array scan and the heap version agree with the reference. */
static void test_bpe_algorithms_agree(void **state)
{
	(void)state;
	struct titan_tokenizer *t = load_rel("tests/fixtures/tok/tiny.tiktoken");
	struct titan_tok_scratch *s = titan_tok_scratch_new(t);
	uint8_t piece[300];
	uint32_t want[300];
	for (int it = 0; it < 340; it++) {
		size_t n = 2 + rnd(it < 300 ? 63 : 298);
		for (size_t i = 0; i < n; i++)
			piece[i] = "aaabcdxyz "[rnd(10)];
		size_t m = reference_bpe(t, piece, n, want);
		for (int algo = 0; algo < 2; algo++) {
			struct titan_ids ids = { 0 };
			assert_int_equal(titan_tok_bpe_tiktoken(t, s, piece, n, algo, &ids), 0);
			assert_int_equal(ids.n, m);
			assert_memory_equal(ids.p, want, m * sizeof *want);
			titan_ids_release(&ids);
		}
	}
	titan_tok_scratch_free(s);
	titan_tokenizer_free(t);
}

static void check_aaaa(const struct titan_ids *ids, size_t n)
{
	assert_int_equal(ids->n, n / 4);
	for (size_t i = 0; i < ids->n; i++)
		assert_int_equal(ids->p[i], 261);
}

/* 1 MiB pieces through each merge algorithm, and 4 MiB of 'a' (a single
 * piece for the cl100k pattern) through encode: not quadratic. */
static void test_long_pieces(void **state)
{
	(void)state;
	size_t n = 1u << 20, big = 4u << 20;
	uint8_t *a = malloc(big);
	memset(a, 'a', big);
	struct titan_tokenizer *tk = load_rel("tests/fixtures/tok/tiny.tiktoken");
	struct titan_tokenizer *hf = load_rel("tests/fixtures/tok/tiny.json");
	struct titan_tok_scratch *s = titan_tok_scratch_new(tk);
	struct titan_tok_scratch *sh = titan_tok_scratch_new(hf);
	struct titan_ids ids = { 0 };

	uint64_t t0 = titan_time_ns();
	assert_int_equal(titan_tok_bpe_tiktoken(tk, s, a, n, true, &ids), 0);
	double dt = (double)(titan_time_ns() - t0) * 1e-9;
	check_aaaa(&ids, n);
	print_message("# tiktoken BPE of a 1 MiB piece: %.3f s\n", dt);
	assert_true(dt < TIME_LIMIT_S);

	ids.n = 0;
	t0 = titan_time_ns();
	assert_int_equal(titan_tok_bpe_hf(hf, sh, a, n, &ids), 0);
	dt = (double)(titan_time_ns() - t0) * 1e-9;
	check_aaaa(&ids, n);
	print_message("# HF BPE of a 1 MiB piece: %.3f s\n", dt);
	assert_true(dt < TIME_LIMIT_S);

	ids.n = 0;
	t0 = titan_time_ns();
	assert_int_equal(titan_tokenizer_encode(tk, s, a, big, false, &ids), 0);
	dt = (double)(titan_time_ns() - t0) * 1e-9;
	check_aaaa(&ids, big);
	print_message("# encode of 4 MiB of 'a': %.3f s\n", dt);
	assert_true(dt < TIME_LIMIT_S);

	titan_ids_release(&ids);
	titan_tok_scratch_free(s);
	titan_tok_scratch_free(sh);
	titan_tokenizer_free(tk);
	titan_tokenizer_free(hf);
	free(a);
}

static void test_decode_errors(void **state)
{
	(void)state;
	/* rank 300 leaves 265..299 unused (and the specials start at 301) */
	char *text = tiny_tiktoken_plus("YWJjZA== 300\n");
	char path[512];
	struct titan_tokenizer *t = NULL;
	tmp_file(path, sizeof path, text, strlen(text));
	assert_int_equal(titan_tokenizer_load(path, TITAN_ENC_AUTO, &t), 0);
	unlink(path);
	free(text);
	assert_int_equal(titan_tokenizer_vocab_size(t), 301 + 256);
	assert_int_equal(titan_tokenizer_bos(t), 301);
	EXPECT(t, "abcd", false, 300);
	struct titan_bytes out = { 0 };
	uint32_t ok[] = { 300, 301, 'a' };
	assert_int_equal(titan_tokenizer_decode(t, ok, 3, &out), 0);
	assert_int_equal(out.n, 4 + 17 + 1);
	assert_memory_equal(out.p, "abcd<|begin_of_text|>a", out.n);
	uint32_t unused[] = { 'a', 280 };
	assert_int_equal(titan_tokenizer_decode(t, unused, 2, &out), TITAN_E_INVALID);
	assert_string_equal(titan_errmsg(), "token id 280 out of range (vocab size 557)");
	uint32_t big[] = { 557 };
	assert_int_equal(titan_tokenizer_decode(t, big, 1, &out), TITAN_E_INVALID);
	assert_string_equal(titan_errmsg(), "token id 557 out of range (vocab size 557)");
	assert_null(titan_tokenizer_token(t, 280, NULL));
	titan_bytes_release(&out);
	titan_tokenizer_free(t);
}

static void test_tiktoken_errors(void **state)
{
	(void)state;
	char path[512];
	struct titan_tokenizer *t = (void *)1;
	assert_int_equal(titan_tokenizer_load("/nonexistent/tok.model", TITAN_ENC_AUTO, &t),
			 TITAN_E_IO);
	assert_null(t);
	assert_string_equal(titan_errmsg(),
			    "cannot open '/nonexistent/tok.model': No such file or directory");

	expect_load_error("YQ== 0\nYg== 1\n!!!! 2\n", TITAN_E_FORMAT, ":3: bad base64");
	expect_load_error("YQ== 0\nYWJ 1\n", TITAN_E_FORMAT, ":2: bad base64");
	expect_load_error("YQ== 0\nYg== 0\n", TITAN_E_FORMAT, ":2: duplicate rank 0 (also on line 1)");
	expect_load_error("YQ== 0\nYg==  1\n", TITAN_E_FORMAT, ":2: bad rank ' 1'");
	expect_load_error("YQ== 0\nYg==\n", TITAN_E_FORMAT, ":2: expected 'base64 rank'");
	expect_load_error("YQ== 0\n\nYg== 1\n", TITAN_E_FORMAT, ":2: empty line");
	expect_load_error("YQ== 99999999999\n", TITAN_E_FORMAT, ":1: rank too large (max 16777215)");
	expect_load_error("", TITAN_E_FORMAT, ": no ranks (empty file)");
	expect_load_error("YQ== 0\nYg== 1\n", TITAN_E_FORMAT,
			  ": byte 0x00 has no token (byte-level BPE needs all 256 single bytes)");

	char *text = tiny_tiktoken_plus("YWE= 400\n");
	expect_load_error(text, TITAN_E_FORMAT,
			  ":266: duplicate token bytes 'aa' (also rank 256 on line 257)");
	free(text);
	/* cl100k's specials sit at 100257..: a rank there collides */
	text = tiny_tiktoken_plus("YWJjZA== 100257\n");
	expect_load_error_enc(text, TITAN_ENC_CL100K, TITAN_E_FORMAT,
			      ":266: rank 100257 is the id of cl100k_base's special token <|endoftext|> (wrong --encoding?)");
	free(text);
	/* trailing empty lines and CRLF are fine */
	text = tiny_tiktoken_plus("YWJjZA== 265\r\n\n\n");
	tmp_file(path, sizeof path, text, strlen(text));
	assert_int_equal(titan_tokenizer_load(path, TITAN_ENC_CL100K, &t), 0);
	assert_int_equal(titan_tokenizer_encoding(t), TITAN_ENC_CL100K);
	assert_int_equal(titan_tokenizer_vocab_size(t), 100277);
	assert_int_equal(titan_tokenizer_bos(t), -1);
	assert_int_equal(titan_tokenizer_eos(t), 100257);
	assert_int_equal(titan_tokenizer_special(t, "<|endofprompt|>"), 100276);
	EXPECT(t, "abcd<|fim_middle|>", true, 265, 100259);
	titan_tokenizer_free(t);
	unlink(path);
	free(text);
}

static void expect_json_error(const char *key, const char *value, int code, const char *msg)
{
	char path[512], want[1024];
	struct titan_tokenizer *t = (void *)1;
	tiny_json_with(path, sizeof path, key, value);
	assert_int_equal(titan_tokenizer_load(path, TITAN_ENC_AUTO, &t), code);
	assert_null(t);
	snprintf(want, sizeof want, "%s: %s", path, msg);
	if (strcmp(titan_errmsg(), want)) {
		print_error("got  '%s'\nwant '%s'\n", titan_errmsg(), want);
		fail();
	}
	unlink(path);
}

static void test_hf_errors(void **state)
{
	(void)state;
	expect_json_error("model.type", "\"Unigram\"", TITAN_E_UNSUPPORTED,
			  "model.type 'Unigram' is not supported (byte-level BPE only)");
	expect_json_error("model.type", "\"WordPiece\"", TITAN_E_UNSUPPORTED,
			  "model.type 'WordPiece' is not supported (byte-level BPE only)");
	expect_json_error("model.byte_fallback", "true", TITAN_E_UNSUPPORTED,
			  "model.byte_fallback: true is not supported (byte-level BPE only)");
	expect_json_error("model.dropout", "0.1", TITAN_E_UNSUPPORTED,
			  "model.dropout: BPE dropout is not supported (must be null)");
	expect_json_error("normalizer", "{\"type\": \"NFC\"}", TITAN_E_UNSUPPORTED,
			  "normalizer: type 'NFC' is not supported (must be null)");
	expect_json_error("pre_tokenizer", "{\"type\": \"Metaspace\"}", TITAN_E_UNSUPPORTED,
			  "pre_tokenizer: type 'Metaspace' is not supported (ByteLevel, or Sequence of Split and ByteLevel)");
	expect_json_error("pre_tokenizer", "null", TITAN_E_UNSUPPORTED,
			  "pre_tokenizer: null is not supported (ByteLevel, or Sequence of Split and ByteLevel)");
	expect_json_error("pre_tokenizer",
			  "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\","
			  " \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Removed\"}]}",
			  TITAN_E_UNSUPPORTED,
			  "pre_tokenizer.pretokenizers[0].behavior: 'Removed' is not supported (Isolated only)");
	expect_json_error("truncation", "{\"max_length\": 5}", TITAN_E_UNSUPPORTED,
			  "truncation: must be null (it changes the ids)");
	expect_json_error("model.merges", "[\"a b\", \"q Q\"]", TITAN_E_FORMAT,
			  "model.merges[1]: 'qQ' is not in model.vocab");
	expect_json_error("model.merges", "[\"a b c\"]", TITAN_E_FORMAT,
			  "model.merges[0]: expected \"a b\" (two tokens, one space)");
	expect_json_error("model.vocab", "{\"a\": 0}", TITAN_E_FORMAT,
			  "model.merges[0]: 'b' is not in model.vocab");
	expect_json_error("model.vocab", "{\"a\": -1}", TITAN_E_FORMAT,
			  "model.vocab['a']: id must be an integer in [0, 16777215]");
}

static void test_hf_errors_more(void **state)
{
	(void)state;
	char path[512];
	struct titan_tokenizer *t = (void *)1;
	/* JSON syntax: "PATH:LINE:COLUMN: jansson's message" */
	char want[600];
	tmp_file(path, sizeof path, "{\"model\": ", 10);
	assert_int_equal(titan_tokenizer_load(path, TITAN_ENC_AUTO, &t), TITAN_E_FORMAT);
	assert_null(t);
	snprintf(want, sizeof want, "%s:1:10: ", path);
	assert_int_equal(strncmp(titan_errmsg(), want, strlen(want)), 0);
	unlink(path);
	expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
			  " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
			  TITAN_E_FORMAT,
			  ": model.vocab: byte 0x00 has no token (byte-level BPE needs all 256 single bytes)");
	/* an encoding applies to tiktoken files only */
	char src[512];
	assert_int_equal(titan_tokenizer_load(path_of(src, sizeof src, "tests/fixtures/tok/tiny.json"),
					      TITAN_ENC_LLAMA3, &t), TITAN_E_INVALID);
	assert_null(t);
}

static void test_fingerprint(void **state)
{
	(void)state;
	struct titan_tokenizer *a = load_rel("tests/fixtures/tok/tiny.tiktoken");
	struct titan_tokenizer *b = load_rel("tests/fixtures/tok/tiny.tiktoken");
	struct titan_tokenizer *h = load_rel("tests/fixtures/tok/tiny.json");
	assert_true(titan_tokenizer_fingerprint(a) == titan_tokenizer_fingerprint(b));
	assert_true(titan_tokenizer_fingerprint(a) != titan_tokenizer_fingerprint(h));
	assert_true(titan_tokenizer_fingerprint(a) != 0);
	char *text = tiny_tiktoken_plus("YWJjZA== 265\n");
	char path[512];
	struct titan_tokenizer *c = NULL;
	tmp_file(path, sizeof path, text, strlen(text));
	assert_int_equal(titan_tokenizer_load(path, TITAN_ENC_AUTO, &c), 0);
	assert_true(titan_tokenizer_fingerprint(a) != titan_tokenizer_fingerprint(c));
	titan_tokenizer_free(c);
	/* the same ranks under another encoding: other pattern, specials */
	assert_int_equal(titan_tokenizer_load(path, TITAN_ENC_O200K, &c), 0);
	struct titan_tokenizer *d = NULL;
	assert_int_equal(titan_tokenizer_load(path, TITAN_ENC_CL100K, &d), 0);
	assert_true(titan_tokenizer_fingerprint(c) != titan_tokenizer_fingerprint(d));
	unlink(path);
	free(text);
	titan_tokenizer_free(a);
	titan_tokenizer_free(b);
	titan_tokenizer_free(c);
	titan_tokenizer_free(d);
	titan_tokenizer_free(h);
}

/* Real vocabularies, when tests/peers/setup.sh has fetched them (the
 * cross-checks against the peers themselves are bats suites). */
static bool have(const char *rel)
{
	char path[512];
	if (!access(path_of(path, sizeof path, rel), R_OK))
		return true;
	print_message("# skip reason: %s is missing (run tests/peers/setup.sh)\n", path);
	return false;
}

static void test_real_vocabularies(void **state)
{
	(void)state;
	static const struct {
		const char *file, *json;
		enum titan_tok_encoding enc;
		uint32_t vocab, ids[2];
	} cases[] = {
		{ "cl100k_base.tiktoken", NULL, TITAN_ENC_CL100K, 100277, { 15339, 1917 } },
		{ "o200k_base.tiktoken", "o200k-tokenizer.json", TITAN_ENC_O200K, 200019, { 24912, 2375 } },
		{ "llama3.tiktoken", "llama3-tokenizer.json", TITAN_ENC_LLAMA3, 128256, { 15339, 1917 } },
	};
	static const char sample[] =
		"Hello, World! It's 2024-11-21 \xe2\x80\x94 caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 "
		"\xd8\xa7\xd9\x84\xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a\xd8\xa9 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd\r\n"
		"\tint main(void) { return 0; }\n\n\n      x    \n123456789 I'LL we've";
	int found = 0;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char rel[128], jrel[128];
		snprintf(rel, sizeof rel, "build/cache/peers/cache/%s", cases[i].file);
		if (!have(rel))
			continue;
		found++;
		struct titan_tokenizer *t = load_rel(rel);
		assert_int_equal(titan_tokenizer_encoding(t), cases[i].enc);
		assert_int_equal(titan_tokenizer_vocab_size(t), cases[i].vocab);
		enum titan_pretok_kind kind = cases[i].enc == TITAN_ENC_O200K ? TITAN_PRETOK_O200K
									       : TITAN_PRETOK_CL100K;
		assert_int_equal(titan_tokenizer_pretok_kind(t), kind);
		expect_ids(t, "hello world", 11, false, cases[i].ids, 2);
		/* the tokenizer.json of the same vocabulary gives the same ids */
		snprintf(jrel, sizeof jrel, "build/cache/peers/cache/%s", cases[i].json ? cases[i].json : "");
		if (cases[i].json && have(jrel)) {
			struct titan_tokenizer *j = load_rel(jrel);
			assert_int_equal(titan_tokenizer_pretok_kind(j), kind); /* the fast scanner */
			struct titan_tok_scratch *s = titan_tok_scratch_new(t);
			struct titan_ids ids = { 0 };
			assert_int_equal(titan_tokenizer_encode(t, s, (const uint8_t *)sample,
								sizeof sample - 1, true, &ids), 0);
			expect_ids(j, sample, sizeof sample - 1, true, ids.p, ids.n);
			assert_int_equal(titan_tokenizer_bos(j), titan_tokenizer_bos(t));
			assert_int_equal(titan_tokenizer_eos(j), titan_tokenizer_eos(t));
			titan_ids_release(&ids);
			titan_tok_scratch_free(s);
			titan_tokenizer_free(j);
		}
		if (cases[i].enc == TITAN_ENC_CL100K) {
			/* 1 MiB of spaces then "x": one long whitespace piece */
			size_t n = (1u << 20) + 1;
			uint8_t *sp = malloc(n);
			memset(sp, ' ', n - 1);
			sp[n - 1] = 'x';
			struct titan_tok_scratch *s = titan_tok_scratch_new(t);
			struct titan_ids ids = { 0 };
			struct titan_bytes out = { 0 };
			uint64_t t0 = titan_time_ns();
			assert_int_equal(titan_tokenizer_encode(t, s, sp, n, false, &ids), 0);
			double dt = (double)(titan_time_ns() - t0) * 1e-9;
			print_message("# cl100k: 1 MiB of spaces in %.3f s, %zu ids\n", dt, ids.n);
			assert_true(dt < TIME_LIMIT_S);
			assert_int_equal(titan_tokenizer_decode(t, ids.p, ids.n, &out), 0);
			assert_int_equal(out.n, n);
			assert_memory_equal(out.p, sp, n);
			titan_bytes_release(&out);
			titan_ids_release(&ids);
			titan_tok_scratch_free(s);
			free(sp);
		}
		titan_tokenizer_free(t);
	}
	if (!found)
		skip();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encoding_names),
		cmocka_unit_test(test_tiktoken_tiny),
		cmocka_unit_test(test_tiktoken_vs_hf),
		cmocka_unit_test(test_hf_tiny),
		cmocka_unit_test(test_hf_pre_tokenizers),
		cmocka_unit_test(test_specials),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_bpe_algorithms_agree),
		cmocka_unit_test(test_long_pieces),
		cmocka_unit_test(test_decode_errors),
		cmocka_unit_test(test_tiktoken_errors),
		cmocka_unit_test(test_hf_errors),
		cmocka_unit_test(test_hf_errors_more),
		cmocka_unit_test(test_fingerprint),
		cmocka_unit_test(test_real_vocabularies),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
