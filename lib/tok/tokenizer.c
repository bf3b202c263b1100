/*
 * tokenizer.c — struct titan_tokenizer: loading (format detection), the
 * shared build step (bytes -> id map, specials trie, fingerprint), encode
 * (sanitise, split at special tokens, pre-tokenize, BPE each piece),
 * decode and the per-thread scratch.
 *
 * Fingerprint: FNV-1a 64 over "titan-tok-1\0", the canonical pattern text
 * and a NUL, then for every id in order: id (u32 LE), kind (u8: 0 unused,
 * 1 BPE token, 2 special, 3 added, 4 opaque), length (u32 LE), bytes.  So
 * a tiktoken file and a tokenizer.json of the same vocabulary, pattern and
 * specials have the same fingerprint.
 */
#include "tok/tok_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "titan/core.h"

/* ---------------------------------------------------------- encodings */

int titan_tok_encoding_parse(const char *name, enum titan_tok_encoding *out)
{
	static const struct { const char *name; enum titan_tok_encoding e; } names[] = {
		{ "auto", TITAN_ENC_AUTO },          { "cl100k_base", TITAN_ENC_CL100K },
		{ "cl100k", TITAN_ENC_CL100K },      { "o200k_base", TITAN_ENC_O200K },
		{ "o200k", TITAN_ENC_O200K },        { "llama3", TITAN_ENC_LLAMA3 },
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (!strcmp(name, names[i].name)) {
			*out = names[i].e;
			return 0;
		}
	}
	return titan_error(TITAN_E_INVALID,
			   "unknown encoding '%s' (expected llama3, cl100k_base, o200k_base or auto)",
			   name);
}

const char *titan_tok_encoding_name(enum titan_tok_encoding e)
{
	switch (e) {
	case TITAN_ENC_AUTO: return "auto";
	case TITAN_ENC_CL100K: return "cl100k_base";
	case TITAN_ENC_O200K: return "o200k_base";
	case TITAN_ENC_LLAMA3: return "llama3";
	}
	return "?";
}

/* ------------------------------------------------------------ helpers */

uint64_t titan_tok_fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

int titan_tok_read_file(const char *path, uint8_t **data, size_t *n)
{
	FILE *fp;
	struct stat st;
	uint8_t *buf = NULL;
	size_t cap, len = 0;
	int fd, rc;

	*data = NULL;
	*n = 0;
	/* a regular file only: a FIFO would block forever (issue 21); '-' on
	 * the command line is copied to a temporary file before this */
	if ((rc = titan_open_regular(path, O_RDONLY, &fd, &st)) < 0)
		return rc;
	if (!(fp = fdopen(fd, "rb"))) {
		close(fd);
		return titan_error(TITAN_E_IO, "cannot open '%s': %s", path, strerror(errno));
	}
	cap = st.st_size > 0 ? (size_t)st.st_size + 1 : (size_t)1 << 16;
	for (;;) {
		if (!buf || len + 1 >= cap) {
			size_t ncap = buf ? cap * 2 : cap;
			uint8_t *nb = realloc(buf, ncap);
			if (!nb) {
				free(buf);
				fclose(fp);
				return titan_error(TITAN_E_NOMEM, "reading '%s': out of memory", path);
			}
			buf = nb;
			cap = ncap;
		}
		size_t want = cap - 1 - len, got = fread(buf + len, 1, want, fp);
		len += got;
		if (got < want)
			break; /* end of file or error */
	}
	if (ferror(fp)) {
		int e = errno;
		free(buf);
		fclose(fp);
		return titan_error(TITAN_E_IO, "cannot read '%s': %s", path, strerror(e));
	}
	fclose(fp);
	buf[len] = 0;
	*data = buf;
	*n = len;
	return 0;
}

int titan_tok_alloc_ids(struct titan_tokenizer *t, uint32_t vocab_size)
{
	t->vocab_size = vocab_size;
	t->off = titan_calloc((size_t)vocab_size * sizeof *t->off, TITAN_MEM_DATA);
	t->len = titan_calloc((size_t)vocab_size * sizeof *t->len, TITAN_MEM_DATA);
	t->kind = titan_calloc(vocab_size, TITAN_MEM_DATA);
	return t->off && t->len && t->kind ? 0 : TITAN_E_NOMEM;
}

int titan_tok_set_id(struct titan_tokenizer *t, uint32_t id, const void *bytes, size_t len,
		     enum tok_id_kind kind)
{
	TITAN_ASSERT(id < t->vocab_size);
	if (len > UINT32_MAX)
		return titan_error(TITAN_E_INVALID, "token %u is too long", id);
	t->off[id] = t->blob.n;
	t->len[id] = (uint32_t)len;
	t->kind[id] = (uint8_t)kind;
	return len ? titan_bytes_append(&t->blob, bytes, len) : 0;
}

static size_t pow2_at_least(size_t n)
{
	size_t c = 1024;
	while (c < n)
		c *= 2;
	return c;
}

static void fmt_bytes(char *buf, size_t cap, const uint8_t *p, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 8 < cap; i++) {
		if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\'' && p[i] != '\\')
			buf[o++] = (char)p[i];
		else
			o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", p[i]);
	}
	buf[o] = 0;
}

static int build_map(struct titan_tokenizer *t, const char *what, const uint32_t *line_of)
{
	size_t count = 0;
	for (uint32_t id = 0; id < t->vocab_size; id++) {
		if (t->kind[id] == TOK_NORMAL) {
			count++;
			if (t->len[id] > t->max_len)
				t->max_len = t->len[id];
		}
	}
	size_t cap = pow2_at_least(count * 2);
	t->slots = titan_malloc(cap * sizeof *t->slots, TITAN_MEM_DATA);
	if (!t->slots)
		return TITAN_E_NOMEM;
	memset(t->slots, 0xff, cap * sizeof *t->slots);
	t->mask = (uint32_t)(cap - 1);
	for (uint32_t id = 0; id < t->vocab_size; id++) {
		if (t->kind[id] != TOK_NORMAL)
			continue;
		const uint8_t *p = t->blob.p + t->off[id];
		size_t n = t->len[id];
		if (n == 0)
			return titan_error(TITAN_E_FORMAT, "%s: token %u is empty", what, id);
		uint64_t h = tok_hash(p, n);
		uint32_t other = tok_lookup_h(t, p, n, h);
		if (other != TOK_NONE) {
			char b[96];
			fmt_bytes(b, sizeof b, p, n);
			if (line_of)
				return titan_error(TITAN_E_FORMAT,
						   "%s:%u: duplicate token bytes '%s' (also rank %u on line %u)",
						   what, line_of[id], b, other, line_of[other]);
			return titan_error(TITAN_E_FORMAT, "%s: ids %u and %u have the same bytes '%s'",
					   what, other, id, b);
		}
		uint32_t i = (uint32_t)h & t->mask;
		while (t->slots[i].id != TOK_NONE)
			i = (i + 1) & t->mask;
		t->slots[i].tag = (uint32_t)(h >> 32);
		t->slots[i].id = id;
	}
	for (int b = 0; b < 256; b++) {
		uint8_t c = (uint8_t)b;
		t->byte_id[b] = tok_lookup_h(t, &c, 1, tok_hash(&c, 1));
		if (t->byte_id[b] == TOK_NONE)
			return titan_error(TITAN_E_FORMAT,
					   "%s: byte 0x%02x has no token (byte-level BPE needs all 256 single bytes)",
					   what, b);
	}
	t->pair2 = titan_malloc(65536 * sizeof *t->pair2, TITAN_MEM_DATA);
	if (!t->pair2)
		return TITAN_E_NOMEM;
	for (int i = 0; i < 65536; i++) {
		uint8_t c[2] = { (uint8_t)(i >> 8), (uint8_t)i };
		t->pair2[i] = t->max_len >= 2 ? tok_lookup_h(t, c, 2, tok_hash(c, 2)) : TOK_NONE;
	}
	return 0;
}

static int trie_add(struct titan_tokenizer *t, size_t *cap, const uint8_t *s, size_t n,
		    uint32_t id, bool special)
{
	uint32_t node = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t c = t->trie[node].child;
		while (c != TOK_NONE && t->trie[c].byte != s[i])
			c = t->trie[c].sibling;
		if (c == TOK_NONE) {
			if (t->ntrie == *cap) {
				size_t nc = *cap * 2;
				struct tok_trie_node *nt = realloc(t->trie, nc * sizeof *nt);
				if (!nt)
					return titan_error(TITAN_E_NOMEM, "out of memory");
				t->trie = nt;
				*cap = nc;
			}
			c = (uint32_t)t->ntrie++;
			t->trie[c] = (struct tok_trie_node){ .child = TOK_NONE,
							     .sibling = t->trie[node].child,
							     .id = TOK_NONE,
							     .byte = s[i] };
			t->trie[node].child = c;
		}
		node = c;
	}
	/* two specials with the same text: the lower id wins (ids ascend) */
	if (t->trie[node].id == TOK_NONE) {
		t->trie[node].id = id;
		t->trie[node].special = special;
	}
	return 0;
}

static int build_specials(struct titan_tokenizer *t)
{
	size_t n = 0, cap = 64;
	for (uint32_t id = 0; id < t->vocab_size; id++)
		n += t->kind[id] == TOK_SPECIAL || t->kind[id] == TOK_ADDED;
	t->specials = calloc(n ? n : 1, sizeof *t->specials);
	t->trie = malloc(cap * sizeof *t->trie);
	if (!t->specials || !t->trie)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	t->trie[0] = (struct tok_trie_node){ .child = TOK_NONE, .sibling = TOK_NONE, .id = TOK_NONE };
	t->ntrie = 1;
	t->single_first = -1;
	int nfirst = 0;
	for (uint32_t id = 0; id < t->vocab_size; id++) {
		if (t->kind[id] != TOK_SPECIAL && t->kind[id] != TOK_ADDED)
			continue;
		struct tok_special *sp = &t->specials[t->nspecials++];
		sp->id = id;
		sp->len = t->len[id];
		sp->text = t->blob.p + t->off[id];
		sp->special = t->kind[id] == TOK_SPECIAL;
		if (!sp->special)
			t->has_added = true;
		if (!sp->len)
			continue;
		uint8_t b = sp->text[0];
		if (!(t->first_bytes[b >> 3] & (1u << (b & 7)))) {
			t->first_bytes[b >> 3] |= (uint8_t)(1u << (b & 7));
			t->single_first = nfirst++ ? -1 : b;
		}
		int rc = trie_add(t, &cap, sp->text, sp->len, id, sp->special);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int titan_tok_finish(struct titan_tokenizer *t, const char *what, const uint32_t *line_of)
{
	int rc = build_map(t, what, line_of);
	if (rc < 0)
		return rc;
	if ((rc = build_specials(t)) < 0)
		return rc;
	uint64_t h = 0xcbf29ce484222325ull;
	h = titan_tok_fnv(h, "titan-tok-1", 12);
	h = titan_tok_fnv(h, t->pattern, strlen(t->pattern) + 1);
	for (uint32_t id = 0; id < t->vocab_size; id++) {
		uint8_t rec[9];
		for (int k = 0; k < 4; k++) {
			rec[k] = (uint8_t)(id >> (8 * k));
			rec[5 + k] = (uint8_t)(t->len[id] >> (8 * k));
		}
		rec[4] = t->kind[id];
		h = titan_tok_fnv(h, rec, sizeof rec);
		h = titan_tok_fnv(h, t->blob.p + t->off[id], t->len[id]);
	}
	t->fingerprint = h;
	return 0;
}

/* -------------------------------------------------------- load / free */

int titan_tokenizer_load(const char *path, enum titan_tok_encoding enc,
			 struct titan_tokenizer **out)
{
	uint8_t *data;
	size_t n, i = 0;
	*out = NULL;
	int rc = titan_tok_read_file(path, &data, &n);
	if (rc < 0)
		return rc;
	struct titan_tokenizer *t = calloc(1, sizeof *t);
	if (!t) {
		free(data);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	t->bos = t->eos = -1;
	while (i < n && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n'))
		i++;
	if (i < n && data[i] == '{') {
		if (enc != TITAN_ENC_AUTO)
			rc = titan_error(TITAN_E_INVALID,
					 "%s: an encoding (%s) applies only to tiktoken files, not to tokenizer.json",
					 path, titan_tok_encoding_name(enc));
		else
			rc = titan_tok_load_hf(t, path, data, n);
	} else {
		rc = titan_tok_load_tiktoken(t, path, data, n, enc);
	}
	free(data);
	if (rc < 0) {
		titan_tokenizer_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void titan_tokenizer_free(struct titan_tokenizer *t)
{
	if (!t)
		return;
	titan_bytes_release(&t->blob);
	titan_free(t->off);
	titan_free(t->len);
	titan_free(t->kind);
	titan_free(t->slots);
	titan_free(t->pair2);
	titan_free(t->merges);
	titan_free(t->merge_new);
	titan_pretok_free(t->pretok);
	free(t->pattern);
	free(t->specials);
	free(t->trie);
	free(t);
}

enum titan_tok_format titan_tokenizer_format(const struct titan_tokenizer *t)
{
	return t->format;
}

enum titan_tok_encoding titan_tokenizer_encoding(const struct titan_tokenizer *t)
{
	return t->encoding;
}

enum titan_pretok_kind titan_tokenizer_pretok_kind(const struct titan_tokenizer *t)
{
	if (!t->pretok || t->prefix_space == TOK_PREFIX_SEGMENT)
		return TITAN_PRETOK_REGEX;
	return titan_pretok_get_kind(t->pretok);
}

uint32_t titan_tokenizer_vocab_size(const struct titan_tokenizer *t)
{
	return t->vocab_size;
}

int64_t titan_tokenizer_bos(const struct titan_tokenizer *t)
{
	return t->bos;
}

int64_t titan_tokenizer_eos(const struct titan_tokenizer *t)
{
	return t->eos;
}

int64_t titan_tokenizer_special(const struct titan_tokenizer *t, const char *text)
{
	size_t n = strlen(text);
	for (size_t i = 0; i < t->nspecials; i++) {
		if (t->specials[i].len == n && !memcmp(t->specials[i].text, text, n))
			return t->specials[i].id;
	}
	return -1;
}

uint64_t titan_tokenizer_fingerprint(const struct titan_tokenizer *t)
{
	return t->fingerprint;
}

const uint8_t *titan_tokenizer_token(const struct titan_tokenizer *t, uint32_t id, size_t *len)
{
	if (id >= t->vocab_size || t->kind[id] == TOK_UNUSED) {
		if (len)
			*len = 0;
		return NULL;
	}
	if (len)
		*len = t->len[id];
	return t->blob.p + t->off[id];
}

/* ------------------------------------------------------------ scratch */

struct titan_tok_scratch *titan_tok_scratch_new(const struct titan_tokenizer *t)
{
	struct titan_tok_scratch *s = calloc(1, sizeof *s);
	if (!s) {
		titan_error(TITAN_E_NOMEM, "out of memory");
		return NULL;
	}
	s->t = t;
	s->cache = titan_calloc(TOK_CACHE_SLOTS * sizeof *s->cache, TITAN_MEM_DATA);
	if (!s->cache) {
		free(s);
		return NULL;
	}
	if (t->pretok && !(s->pst = titan_pretok_state_new(t->pretok))) {
		titan_tok_scratch_free(s);
		return NULL;
	}
	return s;
}

void titan_tok_scratch_free(struct titan_tok_scratch *s)
{
	if (!s)
		return;
	titan_pretok_state_free(s->pst);
	titan_bytes_release(&s->clean);
	titan_bytes_release(&s->seg);
	titan_bytes_release(&s->piece);
	titan_free(s->w);
	titan_free(s->heap);
	titan_free(s->cache);
	free(s);
}

/* ------------------------------------------------------------- encode */

struct seg_ctx {
	const struct titan_tokenizer *t;
	struct titan_tok_scratch *s;
	struct titan_ids *out;
	const uint8_t *pos; /* end of the previous piece (gap tracking) */
};

static int do_piece(struct seg_ctx *c, const uint8_t *p, size_t n)
{
	if (c->t->prefix_space == TOK_PREFIX_PIECE && p[0] != ' ') {
		struct titan_bytes *b = &c->s->piece;
		b->n = 0;
		int rc = titan_bytes_append(b, " ", 1);
		if (rc == 0)
			rc = titan_bytes_append(b, p, n);
		if (rc < 0)
			return rc;
		p = b->p;
		n = b->n;
	}
	return titan_tok_bpe_piece(c->t, c->s, p, n, c->out);
}

static int piece_cb(const uint8_t *piece, size_t len, void *arg)
{
	struct seg_ctx *c = arg;
	if (c->t->keep_gaps && piece > c->pos) {
		int rc = do_piece(c, c->pos, (size_t)(piece - c->pos));
		if (rc)
			return rc;
	}
	c->pos = piece + len;
	return do_piece(c, piece, len);
}

/* Encode text with no special tokens in it. */
static int encode_segment(const struct titan_tokenizer *t, struct titan_tok_scratch *s,
			  const uint8_t *p, size_t n, struct titan_ids *out)
{
	if (n == 0)
		return 0;
	if (t->prefix_space == TOK_PREFIX_SEGMENT && p[0] != ' ') {
		s->seg.n = 0;
		int rc = titan_bytes_append(&s->seg, " ", 1);
		if (rc == 0)
			rc = titan_bytes_append(&s->seg, p, n);
		if (rc < 0)
			return rc;
		p = s->seg.p;
		n = s->seg.n;
	}
	struct seg_ctx c = { t, s, out, p };
	if (!t->pretok)
		return do_piece(&c, p, n);
	int rc = titan_pretok_split(t->pretok, s->pst, p, n, piece_cb, &c);
	if (rc)
		return rc;
	if (t->keep_gaps && c.pos < p + n)
		return do_piece(&c, c.pos, (size_t)(p + n - c.pos));
	return 0;
}

/* Longest allowed special starting at p: its id and length, or TOK_NONE. */
static uint32_t match_special(const struct titan_tokenizer *t, const uint8_t *p, size_t n,
			      bool allow_special, size_t *mlen)
{
	uint32_t node = 0, best = TOK_NONE;
	for (size_t i = 0; i < n; i++) {
		uint32_t c = t->trie[node].child;
		while (c != TOK_NONE && t->trie[c].byte != p[i])
			c = t->trie[c].sibling;
		if (c == TOK_NONE)
			break;
		node = c;
		if (t->trie[c].id != TOK_NONE && (allow_special || !t->trie[c].special)) {
			best = t->trie[c].id;
			*mlen = i + 1;
		}
	}
	return best;
}

static int push_id(struct titan_ids *out, uint32_t id)
{
	if (out->n == out->cap) {
		int rc = titan_ids_reserve(out, out->cap < 128 ? 256 : out->cap * 2);
		if (rc < 0)
			return rc;
	}
	out->p[out->n++] = id;
	return 0;
}

static int encode_text(const struct titan_tokenizer *t, struct titan_tok_scratch *s,
		       const uint8_t *text, size_t n, bool allow_special, struct titan_ids *out)
{
	int rc;
	if (titan_utf8_valid_prefix(text, n) < n) {
		s->clean.n = 0;
		int64_t r = titan_utf8_sanitize(text, n, &s->clean);
		if (r < 0)
			return (int)r;
		text = s->clean.p;
		n = s->clean.n;
	}
	if (!(t->nspecials && (allow_special || t->has_added)))
		return encode_segment(t, s, text, n, out);

	size_t seg = 0, i = 0;
	while (i < n) {
		if (t->single_first >= 0) {
			const uint8_t *q = memchr(text + i, t->single_first, n - i);
			if (!q)
				break;
			i = (size_t)(q - text);
		} else if (!(t->first_bytes[text[i] >> 3] & (1u << (text[i] & 7)))) {
			i++;
			continue;
		}
		size_t mlen = 0;
		uint32_t id = match_special(t, text + i, n - i, allow_special, &mlen);
		if (id == TOK_NONE) {
			i++;
			continue;
		}
		if ((rc = encode_segment(t, s, text + seg, i - seg, out)) < 0)
			return rc;
		if ((rc = push_id(out, id)) < 0)
			return rc;
		i += mlen;
		seg = i;
	}
	return encode_segment(t, s, text + seg, n - seg, out);
}

/* After a huge piece, give its work arrays back (40 bytes per byte). */
static void trim_scratch(struct titan_tok_scratch *s)
{
	if (s->wcap > ((size_t)1 << 24)) {
		titan_free(s->w);
		titan_free(s->heap);
		s->w = NULL;
		s->heap = NULL;
		s->wcap = s->heapcap = 0;
	}
}

int titan_tokenizer_encode(const struct titan_tokenizer *t, struct titan_tok_scratch *s,
			   const uint8_t *text, size_t n, bool allow_special,
			   struct titan_ids *out)
{
	TITAN_ASSERT(s->t == t); /* a scratch (and its cache) serves one tokenizer */
	int rc = encode_text(t, s, text, n, allow_special, out);
	trim_scratch(s);
	return rc;
}

/* ------------------------------------------------------------- decode */

int titan_tokenizer_decode(const struct titan_tokenizer *t, const uint32_t *ids, size_t n,
			   struct titan_bytes *out)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] >= t->vocab_size || t->kind[ids[i]] == TOK_UNUSED)
			return titan_error(TITAN_E_INVALID, "token id %u out of range (vocab size %u)",
					   ids[i], t->vocab_size);
		total += t->len[ids[i]];
	}
	if (out->n + total > out->cap) {
		size_t want = out->cap * 2 > out->n + total ? out->cap * 2 : out->n + total;
		int rc = titan_bytes_reserve(out, want);
		if (rc < 0)
			return rc;
	}
	for (size_t i = 0; i < n; i++) {
		size_t len = t->len[ids[i]];
		if (len)
			memcpy(out->p + out->n, t->blob.p + t->off[ids[i]], len);
		out->n += len;
	}
	return 0;
}
