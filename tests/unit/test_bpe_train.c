/*
 * test_bpe_train.c — byte-level BPE training (lib/tok/train.c): hand-checked
 * merges (the Wikipedia "aaabdaaabac" example, the HF course's hug/pug/pun
 * example), the tie rule, runs of one letter, the tiktoken file format,
 * determinism across thread counts and document splits, errors, invalid
 * UTF-8, an independent naive trainer (all pair counts recomputed every
 * merge) that must give the same file on real text, and the trained file
 * loaded back as a tokenizer: encoding round-trips and compresses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/core.h"
#include "titan/tok.h"

#define FORTUNES "/usr/share/games/fortunes/"

struct tok {
	uint8_t *p;
	size_t n;
};
struct vocab {
	struct tok *t;
	size_t n;
};

static void vocab_free(struct vocab *v)
{
	for (size_t i = 0; i < v->n; i++)
		free(v->t[i].p);
	free(v->t);
	v->t = NULL;
	v->n = 0;
}

/* Train on docs (lens[i] bytes each; lens == NULL: strlen); returns the
 * finish code and the file in *out (malloc'd). */
static int train(const struct titan_bpe_train_opts *o, const char *const *docs,
		 const size_t *lens, size_t ndocs, char **out, size_t *outn)
{
	struct titan_bpe_trainer *tr = titan_bpe_trainer_new(o);
	assert_non_null(tr);
	for (size_t i = 0; i < ndocs; i++) {
		size_t n = lens ? lens[i] : strlen(docs[i]);
		assert_int_equal(titan_bpe_trainer_add(tr, (const uint8_t *)docs[i], n), 0);
	}
	*out = NULL;
	*outn = 0;
	FILE *fp = open_memstream(out, outn);
	assert_non_null(fp);
	int rc = titan_bpe_trainer_finish(tr, fp);
	assert_int_equal(fclose(fp), 0);
	titan_bpe_trainer_free(tr);
	return rc;
}

static int b64val(int c)
{
	const char *tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const char *p = c ? strchr(tab, c) : NULL;
	return p ? (int)(p - tab) : -1;
}

/* Parse a tiktoken file strictly: "base64 rank\n" lines, ranks 0..N-1 in
 * order, canonical padded base64, ranks 0..255 the single bytes in byte
 * order, all byte strings distinct. */
static void parse_ranks(const char *s, size_t n, struct vocab *v)
{
	v->t = NULL;
	v->n = 0;
	size_t cap = 0;
	const char *end = s + n;
	while (s < end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		assert_non_null(nl);
		const char *sp = memchr(s, ' ', (size_t)(nl - s));
		assert_non_null(sp);
		size_t b64n = (size_t)(sp - s);
		assert_true(b64n > 0 && b64n % 4 == 0);
		char num[32];
		assert_true((size_t)(nl - sp - 1) < sizeof num);
		memcpy(num, sp + 1, (size_t)(nl - sp - 1));
		num[nl - sp - 1] = 0;
		char buf[32];
		snprintf(buf, sizeof buf, "%zu", v->n);
		assert_string_equal(num, buf);
		uint8_t *p = malloc(b64n / 4 * 3);
		assert_non_null(p);
		size_t k = 0;
		for (size_t i = 0; i < b64n; i += 4) {
			int q[4];
			for (int j = 0; j < 4; j++)
				q[j] = s[i + j] == '=' ? -2 : b64val(s[i + j]);
			assert_true(q[0] >= 0 && q[1] >= 0);
			bool last = i + 4 == b64n;
			assert_true(q[2] >= 0 || (last && q[2] == -2 && q[3] == -2 && !(q[1] & 15)));
			assert_true(q[3] >= 0 || (last && q[3] == -2 && (q[2] < 0 || !(q[2] & 3))));
			p[k++] = (uint8_t)(q[0] << 2 | q[1] >> 4);
			if (q[2] >= 0)
				p[k++] = (uint8_t)((q[1] & 15) << 4 | q[2] >> 2);
			if (q[3] >= 0)
				p[k++] = (uint8_t)((q[2] & 3) << 6 | q[3]);
		}
		if (v->n == cap) {
			cap = cap ? cap * 2 : 512;
			v->t = realloc(v->t, cap * sizeof *v->t);
			assert_non_null(v->t);
		}
		v->t[v->n++] = (struct tok){p, k};
		s = nl + 1;
	}
	assert_true(v->n >= 256);
	for (size_t i = 0; i < 256; i++)
		assert_true(v->t[i].n == 1 && v->t[i].p[0] == i);
	/* distinct bytes: sort copies and compare neighbours */
	struct tok *c = malloc(v->n * sizeof *c);
	assert_non_null(c);
	memcpy(c, v->t, v->n * sizeof *c);
	for (size_t i = 1; i < v->n; i++) /* insertion sort is fine at this size */
		for (size_t j = i; j > 0; j--) {
			size_t m = c[j - 1].n < c[j].n ? c[j - 1].n : c[j].n;
			int r = memcmp(c[j - 1].p, c[j].p, m);
			if (r < 0 || (r == 0 && c[j - 1].n < c[j].n))
				break;
			assert_false(r == 0 && c[j - 1].n == c[j].n);
			struct tok t = c[j];
			c[j] = c[j - 1];
			c[j - 1] = t;
		}
	free(c);
}

static void assert_tok(const struct vocab *v, size_t rank, const char *bytes)
{
	assert_true(rank < v->n);
	assert_int_equal(v->t[rank].n, strlen(bytes));
	assert_memory_equal(v->t[rank].p, bytes, strlen(bytes));
}

static struct titan_bpe_train_opts opts(uint32_t vocab, int threads)
{
	return (struct titan_bpe_train_opts){.vocab_size = vocab, .nspecials = 256,
					     .pattern = TITAN_PRETOK_CL100K,
					     .threads = threads};
}

/* Wikipedia's example as one piece: aa (4), then aa+a vs a+b (2 each: "aaa"
 * sorts first), then aaa+b; nothing occurs twice after that. */
static void test_wikipedia_example(void **state)
{
	(void)state;
	struct titan_bpe_train_opts o = opts(256 + 256 + 100, 1);
	const char *doc = "aaabdaaabac";
	char *out;
	size_t n;
	assert_int_equal(train(&o, &doc, NULL, 1, &out, &n), 0);
	struct vocab v;
	parse_ranks(out, n, &v);
	assert_int_equal(v.n, 259);
	assert_tok(&v, 256, "aa");
	assert_tok(&v, 257, "aaa");
	assert_tok(&v, 258, "aaab");
	assert_non_null(strstr(out, "\nYWFh 257\nYWFhYg== 258\n"));
	vocab_free(&v);
	free(out);
}

/* The HF course's corpus: hug 10, pug 5, pun 12, bun 4, hugs 5 (one word a
 * line, so no piece carries a space).  u+g 20, u+n 16, h+ug 15, p+un 12,
 * then hug+s and p+ug tie at 5 ("hugs" < "pug"), then b+un 4. */
static void test_hf_course_example(void **state)
{
	(void)state;
	static const struct {
		const char *w;
		int n;
	} words[] = {{"hug", 10}, {"pug", 5}, {"pun", 12}, {"bun", 4}, {"hugs", 5}};
	char text[512] = "";
	for (int i = 0; i < 12; i++)
		for (size_t k = 0; k < 5; k++)
			if (i < words[k].n) {
				strcat(text, words[k].w);
				strcat(text, "\n");
			}
	const char *doc = text;
	/* room for all merges; the trainer stops at 7 with a warning.  The
	 * three patterns cut this text alike. */
	static const enum titan_pretok_kind kinds[] = {TITAN_PRETOK_CL100K, TITAN_PRETOK_O200K,
						       TITAN_PRETOK_GPT2};
	struct titan_bpe_train_opts o;
	char *out;
	size_t n;
	struct vocab v;
	for (int k = 0; k < 3; k++) {
		o = opts(256 + 256 + 50, 1);
		o.pattern = kinds[k];
		assert_int_equal(train(&o, &doc, NULL, 1, &out, &n), 0);
		parse_ranks(out, n, &v);
		const char *want[] = {"ug", "un", "hug", "pun", "hugs", "pug", "bun"};
		assert_int_equal(v.n, 263);
		for (int i = 0; i < 7; i++)
			assert_tok(&v, 256 + (size_t)i, want[i]);
		vocab_free(&v);
		free(out);
	}

	/* the pattern reaches the pre-tokenizer: "x 123456" is "x", " ",
	 * "123", "456" with cl100k but "x", " 123456" with GPT-2, whose
	 * first merge is then " 1" rather than "12" */
	const char *digits = "x 123456 123456 123456";
	o = opts(256 + 256 + 1, 1);
	assert_int_equal(train(&o, &digits, NULL, 1, &out, &n), 0);
	parse_ranks(out, n, &v);
	assert_tok(&v, 256, "12");
	vocab_free(&v);
	free(out);
	o.pattern = TITAN_PRETOK_GPT2;
	assert_int_equal(train(&o, &digits, NULL, 1, &out, &n), 0);
	parse_ranks(out, n, &v);
	assert_tok(&v, 256, " 1");
	vocab_free(&v);
	free(out);

	/* the vocabulary size caps the ranks: 2 merges */
	o = opts(256 + 256 + 2, 1);
	assert_int_equal(train(&o, &doc, NULL, 1, &out, &n), 0);
	parse_ranks(out, n, &v);
	assert_int_equal(v.n, 258);
	assert_tok(&v, 257, "un");
	vocab_free(&v);
	free(out);
}

static void test_errors(void **state)
{
	(void)state;
	struct titan_bpe_train_opts o = opts(511, 1);
	assert_null(titan_bpe_trainer_new(&o));
	assert_int_equal(titan_error_last()->code, TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "vocab size 511 is too small"));
	o = opts(100, 1);
	o.nspecials = UINT32_MAX;
	assert_null(titan_bpe_trainer_new(&o));
	o = opts(1000, 1);
	o.pattern = TITAN_PRETOK_REGEX;
	assert_null(titan_bpe_trainer_new(&o));
	assert_int_equal(titan_error_last()->code, TITAN_E_INVALID);
	o = opts(1000, -1);
	assert_null(titan_bpe_trainer_new(&o));

	/* no input, or only empty documents: a clear error */
	o = opts(1000, 1);
	const char *docs[] = {"", ""};
	char *out;
	size_t n;
	assert_int_equal(train(&o, docs, NULL, 0, &out, &n), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "no text to train on"));
	free(out);
	assert_int_equal(train(&o, docs, NULL, 2, &out, &n), TITAN_E_INVALID);
	free(out);

	/* exactly 256 + nspecials: the byte ranks only */
	o = opts(512, 1);
	const char *doc = "hello hello hello";
	assert_int_equal(train(&o, &doc, NULL, 1, &out, &n), 0);
	struct vocab v;
	parse_ranks(out, n, &v);
	assert_int_equal(v.n, 256);
	vocab_free(&v);
	free(out);

	/* add after finish, finish twice */
	struct titan_bpe_trainer *tr = titan_bpe_trainer_new(&o);
	assert_non_null(tr);
	FILE *fp = fopen("/dev/null", "w");
	assert_non_null(fp);
	assert_int_equal(titan_bpe_trainer_add(tr, (const uint8_t *)"ab ab", 5), 0);
	assert_int_equal(titan_bpe_trainer_finish(tr, fp), 0);
	assert_int_equal(titan_bpe_trainer_add(tr, (const uint8_t *)"ab", 2), TITAN_E_INVALID);
	assert_int_equal(titan_bpe_trainer_finish(tr, fp), TITAN_E_INVALID);
	fclose(fp);
	titan_bpe_trainer_free(tr);
	titan_bpe_trainer_free(NULL);

	/* a write error is reported */
	fp = fopen("/dev/full", "w");
	if (fp) {
		tr = titan_bpe_trainer_new(&o);
		assert_int_equal(titan_bpe_trainer_add(tr, (const uint8_t *)"ab ab", 5), 0);
		assert_int_equal(titan_bpe_trainer_finish(tr, fp), TITAN_E_IO);
		fclose(fp);
		titan_bpe_trainer_free(tr);
	}
}

/* Invalid UTF-8 is replaced by U+FFFD before counting: no merged token
 * holds a byte 0xFF, and EF BF BD is learned. */
static void test_invalid_utf8(void **state)
{
	(void)state;
	static char text[4000];
	for (size_t i = 0; i < sizeof text; i++)
		text[i] = i % 4 == 3 ? '\n' : (char)0xff;
	const char *doc = text;
	size_t len = sizeof text;
	struct titan_bpe_train_opts o = opts(256 + 256 + 10, 1);
	char *out;
	size_t n;
	assert_int_equal(train(&o, &doc, &len, 1, &out, &n), 0);
	struct vocab v;
	parse_ranks(out, n, &v);
	assert_true(v.n > 258);
	bool fffd = false;
	for (size_t t = 256; t < v.n; t++) {
		assert_null(memchr(v.t[t].p, 0xff, v.t[t].n));
		fffd |= v.t[t].n == 3 && !memcmp(v.t[t].p, "\xef\xbf\xbd", 3);
	}
	assert_true(fffd);
	vocab_free(&v);
	free(out);
}

/* ------------------------------------------------- naive reference */

struct naive {
	struct tok *words; /* as byte strings, with counts */
	int64_t *cnt;
	uint32_t **sym;
	size_t *len;
	size_t nwords, cap;
};

static int collect_piece(const uint8_t *p, size_t n, void *arg)
{
	struct naive *nv = arg;
	if (nv->nwords == nv->cap) {
		nv->cap = nv->cap ? nv->cap * 2 : 1024;
		nv->words = realloc(nv->words, nv->cap * sizeof *nv->words);
	}
	nv->words[nv->nwords++] = (struct tok){(uint8_t *)p, n};
	return 0;
}

static int tokcmp(const void *a, const void *b)
{
	const struct tok *x = a, *y = b;
	size_t m = x->n < y->n ? x->n : y->n;
	int r = memcmp(x->p, y->p, m);
	return r ? r : (x->n > y->n) - (x->n < y->n);
}

static int cmp_cat(const struct vocab *v, uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
	size_t nx = v->t[a].n + v->t[b].n, ny = v->t[c].n + v->t[d].n;
	uint8_t *x = malloc(nx), *y = malloc(ny);
	memcpy(x, v->t[a].p, v->t[a].n);
	memcpy(x + v->t[a].n, v->t[b].p, v->t[b].n);
	memcpy(y, v->t[c].p, v->t[c].n);
	memcpy(y + v->t[c].n, v->t[d].p, v->t[d].n);
	int r = memcmp(x, y, nx < ny ? nx : ny);
	free(x);
	free(y);
	if (r || nx != ny)
		return r ? r : (nx < ny ? -1 : 1);
	return (v->t[a].n > v->t[c].n) - (v->t[a].n < v->t[c].n);
}

struct expect_ctx {
	const struct naive *nv;
	size_t nw;
	struct titan_ids *ids;
};

static int expect_piece(const uint8_t *p, size_t n, void *arg)
{
	struct expect_ctx *e = arg;
	struct tok key = {(uint8_t *)p, n};
	const struct tok *w = bsearch(&key, e->nv->words, e->nw, sizeof key, tokcmp);
	assert_non_null(w);
	size_t i = (size_t)(w - e->nv->words);
	for (size_t j = 0; j < e->nv->len[i]; j++)
		assert_int_equal(titan_ids_push(e->ids, e->nv->sym[i][j]), 0);
	return 0;
}

/* The textbook algorithm, no incremental state: recount every pair of
 * every word before each merge.  Returns the file text, and in *expect the
 * text's ids: each piece as its word ended up after the last merge. */
static char *naive_train(const char *const *docs, const size_t *lens, size_t ndocs,
			 uint32_t ranks, size_t *outn, struct titan_ids *expect)
{
	struct titan_bytes clean = {0};
	size_t *ends = malloc(ndocs * sizeof *ends);
	for (size_t d = 0; d < ndocs; d++) {
		assert_true(titan_utf8_sanitize((const uint8_t *)docs[d], lens[d], &clean) >= 0);
		ends[d] = clean.n;
	}
	struct titan_pretok *pt = titan_pretok_new(TITAN_PRETOK_CL100K, NULL, false);
	assert_non_null(pt);
	struct titan_pretok_state *st = titan_pretok_state_new(pt);
	struct naive nv = {0};
	for (size_t d = 0, at = 0; d < ndocs; at = ends[d++])
		assert_int_equal(titan_pretok_split(pt, st, clean.p + at, ends[d] - at,
						    collect_piece, &nv), 0);
	qsort(nv.words, nv.nwords, sizeof *nv.words, tokcmp);
	size_t nw = 0;
	nv.cnt = calloc(nv.nwords, sizeof *nv.cnt);
	for (size_t i = 0; i < nv.nwords; i++) {
		if (nw && !tokcmp(&nv.words[nw - 1], &nv.words[i])) {
			nv.cnt[nw - 1]++;
			continue;
		}
		nv.words[nw] = nv.words[i];
		nv.cnt[nw++] = 1;
	}
	nv.sym = calloc(nw, sizeof *nv.sym);
	nv.len = calloc(nw, sizeof *nv.len);
	for (size_t w = 0; w < nw; w++) {
		nv.sym[w] = malloc(nv.words[w].n * sizeof(uint32_t));
		for (size_t j = 0; j < nv.words[w].n; j++)
			nv.sym[w][j] = nv.words[w].p[j];
		nv.len[w] = nv.words[w].n;
	}
	struct vocab v = {calloc(ranks, sizeof(struct tok)), 256};
	for (size_t i = 0; i < 256; i++) {
		v.t[i].p = malloc(1);
		v.t[i].p[0] = (uint8_t)i;
		v.t[i].n = 1;
	}
	size_t hcap = 1 << 20;
	uint64_t *hk = malloc(hcap * sizeof *hk);
	int64_t *hc = malloc(hcap * sizeof *hc);
	while (v.n < ranks) {
		memset(hk, 0xff, hcap * sizeof *hk);
		uint64_t bestk = UINT64_MAX;
		int64_t bestc = 0;
		for (size_t w = 0; w < nw; w++)
			for (size_t j = 0; j + 1 < nv.len[w]; j++) {
				uint64_t k = (uint64_t)nv.sym[w][j] << 32 | nv.sym[w][j + 1];
				size_t h = (size_t)((k * 0x9e3779b97f4a7c15ull) >> 44) & (hcap - 1);
				while (hk[h] != k && hk[h] != UINT64_MAX)
					h = (h + 1) & (hcap - 1);
				if (hk[h] == UINT64_MAX)
					hk[h] = k, hc[h] = 0;
				hc[h] += nv.cnt[w];
			}
		for (size_t h = 0; h < hcap; h++) {
			if (hk[h] == UINT64_MAX)
				continue;
			uint64_t k = hk[h];
			if (hc[h] > bestc ||
			    (hc[h] == bestc && cmp_cat(&v, (uint32_t)(k >> 32), (uint32_t)k,
						       (uint32_t)(bestk >> 32), (uint32_t)bestk) < 0))
				bestc = hc[h], bestk = k;
		}
		if (bestc < 2)
			break;
		uint32_t a = (uint32_t)(bestk >> 32), b = (uint32_t)bestk, z = UINT32_MAX;
		struct tok t = {malloc(v.t[a].n + v.t[b].n), v.t[a].n + v.t[b].n};
		memcpy(t.p, v.t[a].p, v.t[a].n);
		memcpy(t.p + v.t[a].n, v.t[b].p, v.t[b].n);
		for (uint32_t i = 0; i < v.n; i++)
			if (!tokcmp(&v.t[i], &t))
				z = i;
		if (z == UINT32_MAX)
			v.t[z = (uint32_t)v.n++] = t;
		else
			free(t.p);
		for (size_t w = 0; w < nw; w++) {
			size_t o = 0;
			for (size_t j = 0; j < nv.len[w];)
				if (j + 1 < nv.len[w] && nv.sym[w][j] == a && nv.sym[w][j + 1] == b)
					nv.sym[w][o++] = z, j += 2;
				else
					nv.sym[w][o++] = nv.sym[w][j++];
			nv.len[w] = o;
		}
	}
	struct expect_ctx ec = {&nv, nw, expect};
	for (size_t d = 0, at = 0; d < ndocs; at = ends[d++])
		assert_int_equal(titan_pretok_split(pt, st, clean.p + at, ends[d] - at,
						    expect_piece, &ec), 0);
	char *out = NULL;
	FILE *fp = open_memstream(&out, outn);
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	for (size_t r = 0; r < v.n; r++) {
		const uint8_t *s = v.t[r].p;
		size_t m = v.t[r].n;
		for (size_t i = 0; i < m; i += 3) {
			uint32_t x = (uint32_t)s[i] << 16 | (i + 1 < m ? (uint32_t)s[i + 1] << 8 : 0) |
				     (i + 2 < m ? s[i + 2] : 0);
			fprintf(fp, "%c%c%c%c", tab[x >> 18], tab[(x >> 12) & 63],
				i + 1 < m ? tab[(x >> 6) & 63] : '=', i + 2 < m ? tab[x & 63] : '=');
		}
		fprintf(fp, " %zu\n", r);
	}
	fclose(fp);
	free(hk);
	free(hc);
	for (size_t w = 0; w < nw; w++)
		free(nv.sym[w]);
	free(nv.sym);
	free(nv.len);
	free(nv.cnt);
	free(nv.words);
	vocab_free(&v);
	titan_pretok_state_free(st);
	titan_pretok_free(pt);
	titan_bytes_release(&clean);
	free(ends);
	return out;
}

/* Load a tiktoken file (in memory) as a LLAMA3-convention tokenizer. */
static struct titan_tokenizer *load_trained(const char *file, size_t n)
{
	char path[] = "/tmp/test_bpe_train_XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, file, n), (ssize_t)n);
	close(fd);
	struct titan_tokenizer *tok = NULL;
	int rc = titan_tokenizer_load(path, TITAN_ENC_LLAMA3, &tok);
	unlink(path);
	if (rc < 0)
		fail_msg("loading the trained file: %s", titan_errmsg());
	return tok;
}

/* The trainer (with 1..max_threads threads) and the naive trainer give
 * byte-identical files, and encoding the training text with the file
 * (tiktoken semantics: lowest rank first) gives exactly the segmentation
 * the merges left each piece in: the ranks reproduce the training. */
static void check_naive(const char *const *docs, const size_t *lens, size_t ndocs,
			uint32_t ranks, int max_threads)
{
	size_t refn, total = 0;
	struct titan_ids expect = {0}, ids = {0};
	char *ref = naive_train(docs, lens, ndocs, ranks, &refn, &expect);
	char *out = NULL;
	size_t outn;
	for (int threads = 1; threads <= max_threads; threads++) {
		struct titan_bpe_train_opts o = opts(ranks + 256, threads);
		free(out);
		assert_int_equal(train(&o, docs, lens, ndocs, &out, &outn), 0);
		struct vocab v;
		parse_ranks(out, outn, &v);
		vocab_free(&v);
		assert_int_equal(outn, refn);
		assert_memory_equal(out, ref, refn);
	}

	struct titan_tokenizer *tok = load_trained(out, outn);
	struct titan_tok_scratch *s = titan_tok_scratch_new(tok);
	assert_non_null(s);
	for (size_t d = 0; d < ndocs; d++) {
		assert_int_equal(titan_tokenizer_encode(tok, s, (const uint8_t *)docs[d], lens[d],
							false, &ids), 0);
		total += lens[d];
	}
	assert_int_equal(ids.n, expect.n);
	assert_memory_equal(ids.p, expect.p, ids.n * sizeof *ids.p);
	assert_true(ids.n < total); /* some merge happened */
	titan_tok_scratch_free(s);
	titan_tokenizer_free(tok);
	titan_ids_release(&ids);
	titan_ids_release(&expect);
	free(out);
	free(ref);
}

/* Runs of one letter: merges of a pair with itself (a+a, aa+aa) must take
 * occurrences left to right without overlap and count the pairs they
 * create between two adjacent merges (aa aa -> aaaa) once.  Random run
 * lengths and frequencies, several seeds, against the naive trainer. */
static void test_letter_runs(void **state)
{
	(void)state;
	static char text[1 << 17];
	for (uint64_t seed = 1; seed <= 6; seed++) {
		struct titan_rng r;
		titan_rng_init(&r, seed, 0);
		size_t k = 0;
		for (int len = 1; len <= 40; len++) {
			uint64_t reps = titan_rng_below(&r, 30);
			for (uint64_t i = 0; i < reps; i++) {
				char c = seed % 2 ? 'a' : (char)('a' + titan_rng_below(&r, 2));
				for (int j = 0; j < len; j++)
					text[k++] = seed % 3 ? c : (char)('a' + titan_rng_below(&r, 2));
				text[k++] = '\n';
			}
		}
		const char *doc = text;
		check_naive(&doc, &k, 1, 256 + 300, 2);
	}
}

static char *read_file(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	char *buf = NULL;
	size_t cap = 0;
	*n = 0;
	for (;;) {
		if (*n + 65536 > cap) {
			cap = (cap + 65536) * 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		size_t k = fread(buf + *n, 1, 65536, fp);
		*n += k;
		if (k < 65536)
			break;
	}
	fclose(fp);
	return buf;
}

/* Real text (two fortune files, ~480 KB, one document: the trainer cuts
 * it into segments) plus Chinese: the incremental trainer and the naive
 * one give the same file, with 1 and 2 threads, and so with 4.6 MB of
 * documents that fill several counting batches. */
static void test_against_naive(void **state)
{
	(void)state;
	size_t n1, n2, n3;
	char *a = read_file(FORTUNES "computers", &n1);
	char *b = read_file(FORTUNES "cookie", &n2);
	char *c = read_file(FORTUNES "chinese", &n3);
	if (!a || !b || !c) {
		free(a), free(b), free(c);
		skip(); /* the fortunes packages are not installed */
	}
	if (n3 > 60000)
		n3 = 60000; /* may cut a character: sanitised, same for both */
	char *text = malloc(n1 + n2 + n3);
	memcpy(text, a, n1);
	memcpy(text + n1, b, n2);
	memcpy(text + n1 + n2, c, n3);
	size_t n = n1 + n2 + n3;
	free(a), free(b), free(c);

	const char *docs[9];
	size_t lens[9];
	docs[0] = text;
	lens[0] = n;
	check_naive(docs, lens, 1, 256 + 400, 2);

	/* 8 copies and the first third as documents (several counting
	 * batches, uneven counts) */
	for (int i = 1; i < 9; i++)
		docs[i] = text, lens[i] = i < 8 ? n : n / 3;
	check_naive(docs, lens, 9, 256 + 400, 2);
	free(text);
}

/* Train on real text, load the file as a Llama 3 style tokenizer, encode
 * every document: decoding gives the text back and the token count is far
 * below the byte count.  Two runs with different thread counts and
 * document batching are byte-identical. */
static void test_tokenizer_roundtrip(void **state)
{
	(void)state;
	size_t n;
	char *text = read_file(FORTUNES "songs-poems", &n);
	if (!text)
		skip();
	/* documents: the fortunes between "%" lines */
	const char **docs = NULL;
	size_t *lens = NULL, ndocs = 0, cap = 0;
	for (char *p = text, *end = text + n; p < end;) {
		char *q = memmem(p, (size_t)(end - p), "\n%\n", 3);
		char *e = q ? q + 1 : end;
		if (ndocs == cap) {
			cap = cap ? cap * 2 : 256;
			docs = realloc(docs, cap * sizeof *docs);
			lens = realloc(lens, cap * sizeof *lens);
		}
		docs[ndocs] = p;
		lens[ndocs++] = (size_t)(e - p);
		p = q ? q + 3 : end;
	}
	uint32_t ranks = 256 + 1500;
	char *out1, *out2;
	size_t n1, n2;
	struct titan_bpe_train_opts o = opts(ranks + 256, 1);
	assert_int_equal(train(&o, docs, lens, ndocs, &out1, &n1), 0);
	o.threads = 2;
	assert_int_equal(train(&o, docs, lens, ndocs, &out2, &n2), 0);
	assert_int_equal(n1, n2);
	assert_memory_equal(out1, out2, n1);
	struct vocab v;
	parse_ranks(out1, n1, &v);
	assert_int_equal(v.n, ranks);
	vocab_free(&v);

	struct titan_tokenizer *tok = load_trained(out1, n1);
	assert_int_equal(titan_tokenizer_vocab_size(tok), ranks + 256);
	assert_int_equal(titan_tokenizer_bos(tok), ranks);
	assert_int_equal(titan_tokenizer_eos(tok), ranks + 1);
	struct titan_tok_scratch *s = titan_tok_scratch_new(tok);
	assert_non_null(s);
	struct titan_ids ids = {0};
	struct titan_bytes dec = {0};
	size_t total_bytes = 0, total_ids = 0;
	for (size_t i = 0; i < ndocs; i++) {
		ids.n = 0;
		dec.n = 0;
		assert_int_equal(titan_tokenizer_encode(tok, s, (const uint8_t *)docs[i], lens[i],
							false, &ids), 0);
		for (size_t k = 0; k < ids.n; k++)
			assert_true(ids.p[k] < ranks);
		assert_int_equal(titan_tokenizer_decode(tok, ids.p, ids.n, &dec), 0);
		assert_int_equal(dec.n, lens[i]);
		assert_memory_equal(dec.p, docs[i], lens[i]);
		total_bytes += lens[i];
		total_ids += ids.n;
	}
	/* 1500 merges on 230 KB of English verse: 2.8 bytes a token */
	print_message("# %zu bytes -> %zu tokens (%.2f bytes/token)\n", total_bytes, total_ids,
		      (double)total_bytes / (double)total_ids);
	assert_true(total_ids * 5 < total_bytes * 2);
	titan_ids_release(&ids);
	titan_bytes_release(&dec);
	titan_tok_scratch_free(s);
	titan_tokenizer_free(tok);
	free(out1);
	free(out2);
	free(docs);
	free(lens);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wikipedia_example),
		cmocka_unit_test(test_hf_course_example),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_letter_runs),
		cmocka_unit_test(test_against_naive),
		cmocka_unit_test(test_tokenizer_roundtrip),
	};
	titan_log_set_level(TITAN_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
