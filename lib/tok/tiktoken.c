/*
 * tiktoken.c — tiktoken-format vocabularies ("base64(bytes) rank" per
 * line, as tiktoken's load_tiktoken_bpe reads them; Llama 3's
 * tokenizer.model is the same format) and the special tokens of the
 * built-in encodings (tiktoken_ext/openai_public.py, Meta's Llama 3
 * tokenizer.py).  The file holds only the ranks: the pattern and the
 * specials come from the encoding.
 *
 * Rules: standard base64 with padding, one space, a decimal rank; ranks
 * need not be contiguous but must be unique (and so must the bytes); a
 * trailing '\r' and empty lines at the end are accepted.  Errors name the
 * file and line: "tok.model:17: bad base64".
 */
#include "tok/tok_impl.h"

#include <stdlib.h>

#include "titan/core.h"

#define MAX_RANK ((1u << 24) - 1)
#define CL100K_RANKS 100256
#define O200K_RANKS 199998
#define LLAMA3_NSPECIALS 256

struct named_id {
	const char *text;
	uint32_t id;
};

static const struct named_id cl100k_specials[] = {
	{ "<|endoftext|>", 100257 }, { "<|fim_prefix|>", 100258 }, { "<|fim_middle|>", 100259 },
	{ "<|fim_suffix|>", 100260 }, { "<|endofprompt|>", 100276 },
};
static const struct named_id o200k_specials[] = {
	{ "<|endoftext|>", 199999 }, { "<|endofprompt|>", 200018 },
};
/* Llama 3: offsets from N; the rest are <|reserved_special_token_K|>. */
static const char *const llama3_named[] = {
	"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
	"<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
	"<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>",
	"<|python_tag|>",
};

struct entry {
	uint32_t rank, line;
	const uint8_t *b64;
	size_t b64len;
};

static int b64val(uint8_t c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Decode standard padded base64 into out (room for 3*n/4 bytes); returns
 * the length or -1. */
static long b64decode(const uint8_t *s, size_t n, uint8_t *out)
{
	if (n == 0 || n % 4)
		return -1;
	size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
	size_t o = 0;
	for (size_t i = 0; i < n; i += 4) {
		int v[4];
		for (int k = 0; k < 4; k++) {
			bool padpos = i + 4 == n && k >= 4 - (int)pad;
			v[k] = padpos ? 0 : b64val(s[i + k]);
			if (v[k] < 0)
				return -1;
		}
		uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
			     (uint32_t)v[3];
		out[o++] = (uint8_t)(w >> 16);
		if (!(i + 4 == n && pad == 2))
			out[o++] = (uint8_t)(w >> 8);
		if (!(i + 4 == n && pad >= 1))
			out[o++] = (uint8_t)w;
	}
	/* like Python's b64decode, nonzero bits under the padding are ignored */
	return (long)o;
}

static int parse_lines(const char *path, const uint8_t *data, size_t n, struct entry **out,
		       size_t *nout)
{
	size_t cap = 1024, count = 0;
	struct entry *e = malloc(cap * sizeof *e);
	uint32_t line = 0;
	const uint8_t *p = data, *end = data + n;

	if (!e)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	while (p < end) {
		const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
		const uint8_t *le = nl ? nl : end;
		line++;
		if (le > p && le[-1] == '\r')
			le--;
		if (le == p) { /* empty line: only trailing ones are fine */
			const uint8_t *q = p;
			while (q < end && (*q == '\n' || *q == '\r'))
				q++;
			if (q == end)
				break;
			free(e);
			return titan_error(TITAN_E_FORMAT, "%s:%u: empty line", path, line);
		}
		const uint8_t *sp = memchr(p, ' ', (size_t)(le - p));
		if (!sp) {
			free(e);
			return titan_error(TITAN_E_FORMAT, "%s:%u: expected 'base64 rank'", path, line);
		}
		uint64_t rank = 0;
		const uint8_t *r = sp + 1;
		if (r == le) {
			free(e);
			return titan_error(TITAN_E_FORMAT, "%s:%u: missing rank", path, line);
		}
		for (; r < le; r++) {
			if (*r < '0' || *r > '9' || rank > MAX_RANK) {
				free(e);
				if (*r >= '0' && *r <= '9')
					return titan_error(TITAN_E_FORMAT, "%s:%u: rank too large (max %u)",
							   path, line, MAX_RANK);
				return titan_error(TITAN_E_FORMAT, "%s:%u: bad rank '%.*s'", path, line,
						   (int)(le - sp - 1 > 40 ? 40 : le - sp - 1),
						   (const char *)sp + 1);
			}
			rank = rank * 10 + (uint64_t)(*r - '0');
		}
		if (rank > MAX_RANK) {
			free(e);
			return titan_error(TITAN_E_FORMAT, "%s:%u: rank too large (max %u)", path, line,
					   MAX_RANK);
		}
		if (count == cap) {
			struct entry *ne = realloc(e, 2 * cap * sizeof *e);
			if (!ne) {
				free(e);
				return titan_error(TITAN_E_NOMEM, "out of memory");
			}
			e = ne;
			cap *= 2;
		}
		e[count++] = (struct entry){ (uint32_t)rank, line, p, (size_t)(sp - p) };
		p = nl ? nl + 1 : end;
	}
	*out = e;
	*nout = count;
	return 0;
}

static int add_special(struct titan_tokenizer *t, const char *path, const uint32_t *line_of,
		       const char *text, uint32_t id)
{
	if (t->kind[id] != TOK_UNUSED)
		return titan_error(TITAN_E_FORMAT,
				   "%s:%u: rank %u is the id of %s's special token %s (wrong --encoding?)",
				   path, line_of[id], id, titan_tok_encoding_name(t->encoding), text);
	return titan_tok_set_id(t, id, text, strlen(text), TOK_SPECIAL);
}

int titan_tok_load_tiktoken(struct titan_tokenizer *t, const char *path, const uint8_t *data,
			    size_t n, enum titan_tok_encoding enc)
{
	struct entry *e = NULL;
	size_t count = 0;
	uint32_t *line_of = NULL;
	uint8_t *buf = NULL;
	int rc = parse_lines(path, data, n, &e, &count);
	if (rc < 0)
		return rc;
	if (count == 0) {
		rc = titan_error(TITAN_E_FORMAT, "%s: no ranks (empty file)", path);
		goto fail;
	}
	uint32_t max_rank = 0;
	size_t maxb64 = 0;
	for (size_t i = 0; i < count; i++) {
		if (e[i].rank > max_rank)
			max_rank = e[i].rank;
		if (e[i].b64len > maxb64)
			maxb64 = e[i].b64len;
	}
	if (enc == TITAN_ENC_AUTO)
		enc = count == CL100K_RANKS ? TITAN_ENC_CL100K
		      : count == O200K_RANKS ? TITAN_ENC_O200K : TITAN_ENC_LLAMA3;
	t->format = TITAN_TOK_TIKTOKEN;
	t->encoding = enc;

	uint32_t vocab = max_rank + 1;
	const struct named_id *sp = NULL;
	size_t nsp = 0;
	if (enc == TITAN_ENC_CL100K) {
		sp = cl100k_specials;
		nsp = sizeof cl100k_specials / sizeof *sp;
	} else if (enc == TITAN_ENC_O200K) {
		sp = o200k_specials;
		nsp = sizeof o200k_specials / sizeof *sp;
	}
	for (size_t i = 0; i < nsp; i++)
		vocab = sp[i].id + 1 > vocab ? sp[i].id + 1 : vocab;
	uint32_t nbase = max_rank + 1;
	if (enc == TITAN_ENC_LLAMA3)
		vocab = nbase + LLAMA3_NSPECIALS;

	if ((rc = titan_tok_alloc_ids(t, vocab)) < 0)
		goto fail;
	line_of = calloc(vocab, sizeof *line_of);
	buf = malloc(maxb64 / 4 * 3 + 3);
	if (!line_of || !buf || titan_bytes_reserve(&t->blob, n / 4 * 3 + 8192) < 0) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory loading '%s'", path);
		goto fail;
	}
	for (size_t i = 0; i < count; i++) {
		long len = b64decode(e[i].b64, e[i].b64len, buf);
		if (len < 0) {
			rc = titan_error(TITAN_E_FORMAT, "%s:%u: bad base64", path, e[i].line);
			goto fail;
		}
		uint32_t r = e[i].rank;
		if (t->kind[r] != TOK_UNUSED) {
			rc = titan_error(TITAN_E_FORMAT, "%s:%u: duplicate rank %u (also on line %u)",
					 path, e[i].line, r, line_of[r]);
			goto fail;
		}
		line_of[r] = e[i].line;
		if ((rc = titan_tok_set_id(t, r, buf, (size_t)len, TOK_NORMAL)) < 0)
			goto fail;
	}
	for (size_t i = 0; i < nsp; i++) {
		if ((rc = add_special(t, path, line_of, sp[i].text, sp[i].id)) < 0)
			goto fail;
	}
	if (enc == TITAN_ENC_LLAMA3) {
		size_t nnamed = sizeof llama3_named / sizeof *llama3_named;
		for (uint32_t k = 0; k < LLAMA3_NSPECIALS; k++) {
			char name[64];
			if (k < nnamed)
				snprintf(name, sizeof name, "%s", llama3_named[k]);
			else
				snprintf(name, sizeof name, "<|reserved_special_token_%u|>",
					 (unsigned)(k - nnamed + 2));
			if ((rc = add_special(t, path, line_of, name, nbase + k)) < 0)
				goto fail;
		}
		t->bos = nbase;
		t->eos = nbase + 1;
	} else {
		t->bos = -1;
		t->eos = sp[0].id; /* <|endoftext|> */
	}

	enum titan_pretok_kind kind = enc == TITAN_ENC_O200K ? TITAN_PRETOK_O200K : TITAN_PRETOK_CL100K;
	t->pattern = titan_strdup(titan_pretok_pattern(kind));
	if (!t->pattern) {
		rc = TITAN_E_NOMEM;
		goto fail;
	}
	t->pretok = titan_pretok_new(kind, NULL, false);
	if (!t->pretok) {
		rc = titan_error_prefix("%s", path);
		goto fail;
	}
	rc = titan_tok_finish(t, path, line_of);
fail:
	free(e);
	free(line_of);
	free(buf);
	return rc;
}
