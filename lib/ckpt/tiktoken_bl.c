/*
 * tiktoken_bl.c — a tiktoken vocabulary as HuggingFace's byte-level BPE
 * sees it: each token's bytes through GPT-2's bytes_to_unicode, and the
 * merges recovered from the ranks as transformers' TikTokenConverter
 * (extract_vocab_merges_from_model) makes them.  Shared by the GGUF
 * export (tokenizer.ggml.*) and the HF export (tokenizer.json).
 */
#include "ckpt_impl.h"

#include <stdlib.h>
#include <string.h>

#include "titan/tok.h"

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * others in byte order to U+0100, U+0101, ... */
static void byte_level_table(uint16_t cp[256])
{
	uint16_t n = 0;

	for (int b = 0; b < 256; b++) {
		bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);

		cp[b] = printable ? (uint16_t)b : (uint16_t)(256 + n++);
	}
}

/* bytes -> byte-level string (malloc'd, NUL-terminated) */
static char *byte_level(const uint16_t cp[256], const uint8_t *s, size_t n, size_t *len)
{
	char *out = malloc(2 * n + 1), *q = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		uint16_t c = cp[s[i]];

		if (c < 0x80) {
			*q++ = (char)c;
		} else {
			*q++ = (char)(0xc0 | c >> 6);
			*q++ = (char)(0x80 | (c & 0x3f));
		}
	}
	*q = 0;
	if (len)
		*len = (size_t)(q - out);
	return out;
}

int titan_ckpt_merge_add_(struct titan_ckpt_merges *m, const char *a, size_t na, const char *b,
			  size_t nb)
{
	char *s;

	if (m->n == m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 1024;
		char **q = realloc(m->v, cap * sizeof(*q));

		if (!q)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		m->v = q;
		m->cap = cap;
	}
	if (!(s = malloc(na + nb + 2)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	memcpy(s, a, na);
	s[na] = ' ';
	memcpy(s + na + 1, b, nb);
	s[na + nb + 1] = 0;
	m->v[m->n++] = s;
	return 0;
}

void titan_ckpt_merges_free_(struct titan_ckpt_merges *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->v[i]);
	free(m->v);
	memset(m, 0, sizeof(*m));
}

void titan_ckpt_bl_free_(struct titan_ckpt_bl_vocab *v)
{
	for (uint32_t i = 0; v->tokens && i < v->n; i++)
		free(v->tokens[i]);
	free(v->tokens);
	free(v->lens);
	free(v->special);
	titan_ckpt_merges_free_(&v->merges);
	memset(v, 0, sizeof(*v));
}

/* bytes -> rank (open addressing, FNV-1a) */
struct rank_map {
	const struct titan_tokenizer *tok;
	uint32_t *slot;    /* id + 1; 0 = empty */
	size_t mask;
};

static uint64_t fnv(const uint8_t *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 1099511628211ULL;
	return h;
}

static void map_put(struct rank_map *m, uint32_t id, const uint8_t *s, size_t n)
{
	size_t i = (size_t)fnv(s, n) & m->mask;

	while (m->slot[i])
		i = (i + 1) & m->mask;
	m->slot[i] = id + 1;
}

static int64_t map_get(const struct rank_map *m, const uint8_t *s, size_t n)
{
	size_t i = (size_t)fnv(s, n) & m->mask;

	while (m->slot[i]) {
		size_t len;
		const uint8_t *b = titan_tokenizer_token(m->tok, m->slot[i] - 1, &len);

		if (len == n && !memcmp(b, s, n))
			return m->slot[i] - 1;
		i = (i + 1) & m->mask;
	}
	return -1;
}

struct split {
	uint32_t l, r;
};

static int cmp_split(const void *a, const void *b)
{
	const struct split *x = a, *y = b;

	if (x->l != y->l)
		return x->l < y->l ? -1 : 1;
	return (x->r > y->r) - (x->r < y->r);
}

/* The merges: for every token of two or more bytes, each split into a left
 * and a right part that are both tokens, ordered by (rank of left, rank of
 * right); all of them ordered by the rank of the token.  HF's BPE, which
 * merges the pair listed first, then merges as tiktoken does (the adjacent
 * pair whose concatenation has the lowest rank). */
int titan_ckpt_bl_tiktoken_(const struct titan_tokenizer *tok, struct titan_ckpt_bl_vocab *v)
{
	const uint32_t nt = titan_tokenizer_vocab_size(tok);
	struct rank_map m = {.tok = tok};
	uint16_t cp[256];
	struct split *sp = NULL;
	size_t cap_sp = 0, cap = 1;
	char text[1024];
	int rc = 0;

	memset(v, 0, sizeof(*v));
	v->n = nt;
	byte_level_table(cp);
	while (cap < 2 * (size_t)nt + 2)
		cap *= 2;
	m.mask = cap - 1;
	v->tokens = calloc((size_t)nt + 1, sizeof(*v->tokens));
	v->lens = calloc((size_t)nt + 1, sizeof(*v->lens));
	v->special = calloc((size_t)nt + 1, sizeof(*v->special));
	if (!v->tokens || !v->lens || !v->special || !(m.slot = calloc(cap, sizeof(*m.slot)))) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto done;
	}
	for (uint32_t id = 0; id < nt && rc == 0; id++) {
		size_t len;
		const uint8_t *b = titan_tokenizer_token(tok, id, &len);

		if (!b)
			continue;
		if (len < sizeof(text) && !memchr(b, 0, len)) {
			memcpy(text, b, len);
			text[len] = 0;
			v->special[id] = titan_tokenizer_special(tok, text) == (int64_t)id;
		}
		if (v->special[id]) {
			v->tokens[id] = strdup(text);
			v->lens[id] = len;
		} else {
			v->tokens[id] = byte_level(cp, b, len, &v->lens[id]);
			map_put(&m, id, b, len);
		}
		if (!v->tokens[id])
			rc = titan_error(TITAN_E_NOMEM, "out of memory");
	}
	for (uint32_t id = 0; id < nt && rc == 0; id++) {
		size_t len, k = 0;
		const uint8_t *b = titan_tokenizer_token(tok, id, &len);

		if (!b || v->special[id] || len < 2)
			continue;
		if (len - 1 > cap_sp) {
			struct split *q = realloc(sp, (len - 1) * sizeof(*q));

			if (!q) {
				rc = titan_error(TITAN_E_NOMEM, "out of memory");
				break;
			}
			sp = q;
			cap_sp = len - 1;
		}
		for (size_t i = 1; i < len; i++) {
			int64_t l = map_get(&m, b, i), r = map_get(&m, b + i, len - i);

			if (l >= 0 && r >= 0)
				sp[k++] = (struct split){(uint32_t)l, (uint32_t)r};
		}
		qsort(sp, k, sizeof(*sp), cmp_split);
		for (size_t i = 0; i < k && rc == 0; i++)
			rc = titan_ckpt_merge_add_(&v->merges, v->tokens[sp[i].l], v->lens[sp[i].l],
						   v->tokens[sp[i].r], v->lens[sp[i].r]);
	}
done:
	free(sp);
	free(m.slot);
	if (rc < 0)
		titan_ckpt_bl_free_(v);
	return rc;
}
