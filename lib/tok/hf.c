/*
 * hf.c — HuggingFace tokenizer.json with a byte-level BPE model (GPT-2,
 * Llama 3, and the like), read with jansson.
 *
 * Supported: model.type "BPE" with vocab, merges ("a b" strings or
 * ["a", "b"] pairs; a repeated pair keeps its last rank, as HF's map does),
 * ignore_merges, byte_fallback false, no dropout, empty or null
 * continuing_subword_prefix / end_of_word_suffix; added_tokens (special or
 * not; lstrip/rstrip/single_word false); normalizer null; pre_tokenizer
 * ByteLevel (use_regex: the GPT-2 pattern), or Sequence[Split(Regex|String,
 * Isolated, invert false), ByteLevel(use_regex false)], or Sequence[ByteLevel];
 * add_prefix_space applies per text segment (ByteLevel alone) or per piece
 * (ByteLevel after a Split), as HF applies it to each split it receives.
 * Text a Split regex does not match is kept as its own piece (HF's
 * Isolated behaviour).  Anything else is TITAN_E_UNSUPPORTED naming the key.
 *
 * Vocabulary strings are in HF's ByteLevel alphabet (GPT-2's
 * bytes_to_unicode); they are stored as the bytes they stand for.  An entry
 * with a character outside the alphabet can never come out of BPE; it is
 * kept as its UTF-8 text for decoding (as HF's ByteLevel decoder does).
 *
 * Added tokens: special ones are matched in the input only with
 * allow_special (like tiktoken; HF always matches them); non-special added
 * tokens are always matched, as HF does, since they are ordinary words of
 * the vocabulary, not control tokens.  Matching is leftmost-longest.
 *
 * BOS/EOS are recorded, never added by encode: BOS = "<|begin_of_text|>"
 * or the first special of a TemplateProcessing post-processor; EOS =
 * "<|end_of_text|>" or "<|endoftext|>".
 */
#include "tok/tok_impl.h"

#include <jansson.h>
#include <stdlib.h>

#include "titan/core.h"

#define MAX_ID ((1u << 24) - 1)
#define NALPHA 324 /* 256 + 68 code points of the ByteLevel alphabet */

/* Llama 3's Split regex in its tokenizer.json: tiktoken's cl100k pattern. */
static const char llama3_json_pattern[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct hf {
	struct titan_tokenizer *t;
	const char *path;
	int16_t byte_of_cp[NALPHA];
	json_t *vocab;
};

static int unsupported(struct hf *h, const char *key, const char *why)
{
	return titan_error(TITAN_E_UNSUPPORTED, "%s: %s: %s", h->path, key, why);
}

static int bad(struct hf *h, const char *key, const char *why)
{
	return titan_error(TITAN_E_FORMAT, "%s: %s: %s", h->path, key, why);
}

static void alphabet(struct hf *h)
{
	int extra = 0;
	for (int i = 0; i < NALPHA; i++)
		h->byte_of_cp[i] = -1;
	for (int b = 0; b < 256; b++) {
		bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
		h->byte_of_cp[printable ? b : 256 + extra++] = (int16_t)b;
	}
}

/* ByteLevel string -> bytes; false when a character is outside the alphabet. */
static bool unbyte(const struct hf *h, const char *s, size_t n, uint8_t *out, size_t *olen)
{
	const uint8_t *p = (const uint8_t *)s;
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		if (p[i] < 0x80) {
			cp = p[i++];
		} else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n) {
			cp = (uint32_t)(p[i] & 0x1F) << 6 | (p[i + 1] & 0x3F);
			i += 2;
		} else {
			return false; /* 3- and 4-byte characters are all outside */
		}
		if (cp >= NALPHA || h->byte_of_cp[cp] < 0)
			return false;
		out[o++] = (uint8_t)h->byte_of_cp[cp];
	}
	*olen = o;
	return true;
}

static bool is_false_or_null(json_t *v)
{
	return !v || json_is_null(v) || json_is_false(v);
}

static bool is_empty_or_null(json_t *v)
{
	return !v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0);
}

static int get_id(struct hf *h, json_t *v, const char *key, uint32_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > MAX_ID) {
		char why[64];
		snprintf(why, sizeof why, "id must be an integer in [0, %u]", MAX_ID);
		return bad(h, key, why);
	}
	*out = (uint32_t)json_integer_value(v);
	return 0;
}

static int check_model(struct hf *h, json_t *model)
{
	char why[160];
	json_t *type = json_object_get(model, "type");
	if (!json_is_string(type))
		return bad(h, "model.type", "missing (expected \"BPE\")");
	if (strcmp(json_string_value(type), "BPE")) {
		snprintf(why, sizeof why, "'%.60s' is not supported (byte-level BPE only)",
			 json_string_value(type));
		return titan_error(TITAN_E_UNSUPPORTED, "%s: model.type %s", h->path, why);
	}
	json_t *d = json_object_get(model, "dropout");
	if (d && !json_is_null(d) && !(json_is_number(d) && json_number_value(d) == 0))
		return unsupported(h, "model.dropout", "BPE dropout is not supported (must be null)");
	if (!is_false_or_null(json_object_get(model, "byte_fallback")))
		return unsupported(h, "model.byte_fallback", "true is not supported (byte-level BPE only)");
	if (!is_empty_or_null(json_object_get(model, "continuing_subword_prefix")))
		return unsupported(h, "model.continuing_subword_prefix", "must be null or empty");
	if (!is_empty_or_null(json_object_get(model, "end_of_word_suffix")))
		return unsupported(h, "model.end_of_word_suffix", "must be null or empty");
	json_t *im = json_object_get(model, "ignore_merges");
	if (im && !json_is_boolean(im) && !json_is_null(im))
		return bad(h, "model.ignore_merges", "must be true or false");
	h->t->ignore_merges = json_is_true(im);
	if (!json_is_object(json_object_get(model, "vocab")))
		return bad(h, "model.vocab", "missing or not an object");
	if (!json_is_array(json_object_get(model, "merges")))
		return bad(h, "model.merges", "missing or not an array");
	return 0;
}

static int load_vocab(struct hf *h, json_t *added)
{
	struct titan_tokenizer *t = h->t;
	const char *key;
	json_t *v;
	uint32_t max = 0, id;
	uint8_t *buf = NULL;
	size_t bufcap = 0, len;
	int rc;

	json_object_foreach(h->vocab, key, v) {
		char k[96];
		snprintf(k, sizeof k, "model.vocab['%.60s']", key);
		if ((rc = get_id(h, v, k, &id)) < 0)
			return rc;
		max = id > max ? id : max;
	}
	for (size_t i = 0; i < json_array_size(added); i++) {
		char k[48];
		snprintf(k, sizeof k, "added_tokens[%zu].id", i);
		if ((rc = get_id(h, json_object_get(json_array_get(added, i), "id"), k, &id)) < 0)
			return rc;
		max = id > max ? id : max;
	}
	if ((rc = titan_tok_alloc_ids(t, max + 1)) < 0)
		return rc;
	json_object_foreach(h->vocab, key, v) {
		size_t n = strlen(key);
		id = (uint32_t)json_integer_value(v);
		if (t->kind[id] != TOK_UNUSED) {
			char why[200];
			snprintf(why, sizeof why, "id %u is given to two tokens ('%.60s' and another)", id,
				 key);
			free(buf);
			return bad(h, "model.vocab", why);
		}
		if (n > bufcap) {
			free(buf);
			bufcap = n * 2;
			if (!(buf = malloc(bufcap)))
				return titan_error(TITAN_E_NOMEM, "out of memory");
		}
		if (n == 0) {
			free(buf);
			return bad(h, "model.vocab", "empty token");
		}
		if (unbyte(h, key, n, buf, &len))
			rc = titan_tok_set_id(t, id, buf, len, TOK_NORMAL);
		else
			rc = titan_tok_set_id(t, id, key, n, TOK_OPAQUE);
		if (rc < 0) {
			free(buf);
			return rc;
		}
	}
	free(buf);
	for (size_t i = 0; i < json_array_size(added); i++) {
		json_t *a = json_array_get(added, i);
		json_t *content = json_object_get(a, "content");
		char k[48];
		static const char *const flags[] = { "lstrip", "rstrip", "single_word" };
		snprintf(k, sizeof k, "added_tokens[%zu].content", i);
		if (!json_is_string(content) || json_string_length(content) == 0)
			return bad(h, k, "missing or empty");
		for (size_t f = 0; f < 3; f++) {
			if (!is_false_or_null(json_object_get(a, flags[f]))) {
				snprintf(k, sizeof k, "added_tokens[%zu].%s", i, flags[f]);
				return unsupported(h, k, "true is not supported");
			}
		}
		id = (uint32_t)json_integer_value(json_object_get(a, "id"));
		bool special = json_is_true(json_object_get(a, "special"));
		rc = titan_tok_set_id(t, id, json_string_value(content), json_string_length(content),
				      special ? TOK_SPECIAL : TOK_ADDED);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int vocab_id(struct hf *h, const char *s, uint32_t *id)
{
	json_t *v = json_object_get(h->vocab, s);
	if (!v)
		return -1;
	*id = (uint32_t)json_integer_value(v);
	return 0;
}

static int load_merges(struct hf *h, json_t *merges)
{
	struct titan_tokenizer *t = h->t;
	size_t n = json_array_size(merges);
	char *cat = NULL, *split = NULL;
	size_t catcap = 0;
	int rc = 0;

	if (n > MAX_ID)
		return bad(h, "model.merges", "too many merges");
	size_t cap = 1024;
	while (cap < 2 * n)
		cap *= 2;
	t->merges = titan_malloc(cap * sizeof *t->merges, TITAN_MEM_DATA);
	t->merge_new = titan_malloc(n * sizeof *t->merge_new, TITAN_MEM_DATA);
	if (!t->merges || !t->merge_new)
		return TITAN_E_NOMEM;
	memset(t->merges, 0xff, cap * sizeof *t->merges);
	t->merge_mask = (uint32_t)(cap - 1);
	t->nmerges = (uint32_t)n;

	for (size_t i = 0; i < n; i++) {
		json_t *m = json_array_get(merges, i);
		const char *a, *b;
		char key[64], why[200];
		snprintf(key, sizeof key, "model.merges[%zu]", i);
		if (json_is_string(m)) {
			const char *s = json_string_value(m);
			const char *sp = strchr(s, ' ');
			if (!sp || strchr(sp + 1, ' ') || sp == s || !sp[1]) {
				rc = bad(h, key, "expected \"a b\" (two tokens, one space)");
				goto out;
			}
			free(split);
			if (!(split = titan_strdup(s))) {
				rc = TITAN_E_NOMEM;
				goto out;
			}
			split[sp - s] = 0;
			a = split;
			b = split + (sp - s) + 1;
		} else if (json_is_array(m) && json_array_size(m) == 2 &&
			   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
			a = json_string_value(json_array_get(m, 0));
			b = json_string_value(json_array_get(m, 1));
		} else {
			rc = bad(h, key, "expected \"a b\" or [\"a\", \"b\"]");
			goto out;
		}
		size_t la = strlen(a), lb = strlen(b);
		if (la + lb + 1 > catcap) {
			free(cat);
			catcap = 2 * (la + lb + 1);
			if (!(cat = malloc(catcap))) {
				rc = titan_error(TITAN_E_NOMEM, "out of memory");
				goto out;
			}
		}
		memcpy(cat, a, la);
		memcpy(cat + la, b, lb + 1);
		uint32_t ia, ib, inew;
		const char *missing = vocab_id(h, a, &ia) ? a
				      : vocab_id(h, b, &ib) ? b
				      : vocab_id(h, cat, &inew) ? cat : NULL;
		if (missing) {
			snprintf(why, sizeof why, "'%.80s' is not in model.vocab", missing);
			rc = bad(h, key, why);
			goto out;
		}
		uint64_t k = (uint64_t)ia << 32 | ib;
		uint32_t s = (uint32_t)tok_mix(k) & t->merge_mask;
		while (t->merges[s].key != UINT64_MAX && t->merges[s].key != k)
			s = (s + 1) & t->merge_mask;
		t->merges[s] = (struct tok_merge_slot){ k, (uint32_t)i, inew }; /* last wins */
		t->merge_new[i] = inew;
	}
out:
	free(cat);
	free(split);
	return rc;
}

/* A PCRE2 pattern matching the literal string s. */
static char *escape_literal(const char *s)
{
	size_t n = strlen(s);
	char *r = malloc(2 * n + 1), *o = r;
	if (!r)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
				  (c >= 'A' && c <= 'Z')))
			*o++ = '\\';
		*o++ = (char)c;
	}
	*o = 0;
	return r;
}

static int set_regex(struct hf *h, const char *re, const char *key)
{
	struct titan_tokenizer *t = h->t;
	static const enum titan_pretok_kind known[] = { TITAN_PRETOK_CL100K, TITAN_PRETOK_O200K,
							 TITAN_PRETOK_GPT2 };
	enum titan_pretok_kind kind = TITAN_PRETOK_REGEX;
	for (size_t i = 0; i < 3; i++) {
		if (!strcmp(re, titan_pretok_pattern(known[i])))
			kind = known[i];
	}
	if (!strcmp(re, llama3_json_pattern))
		kind = TITAN_PRETOK_CL100K;
	t->pattern = titan_strdup(kind == TITAN_PRETOK_REGEX ? re : titan_pretok_pattern(kind));
	if (!t->pattern)
		return TITAN_E_NOMEM;
	t->pretok = titan_pretok_new(kind, kind == TITAN_PRETOK_REGEX ? re : NULL, false);
	if (!t->pretok)
		return titan_error_prefix("%s: %s", h->path, key);
	t->keep_gaps = true;
	return 0;
}

/* ByteLevel: returns 1 when it splits with the GPT-2 regex. */
static int byte_level(struct hf *h, json_t *bl, const char *key, bool after_split)
{
	char k[96];
	json_t *ur = json_object_get(bl, "use_regex");
	bool use_regex = !ur || json_is_null(ur) || json_is_true(ur);
	if (json_is_true(json_object_get(bl, "add_prefix_space")))
		h->t->prefix_space = after_split ? TOK_PREFIX_PIECE : TOK_PREFIX_SEGMENT;
	if (use_regex && after_split) {
		snprintf(k, sizeof k, "%s.use_regex", key);
		return unsupported(h, k, "a ByteLevel regex after a Split is not supported");
	}
	return use_regex ? set_regex(h, titan_pretok_pattern(TITAN_PRETOK_GPT2), key) : 0;
}

static int split(struct hf *h, json_t *sp, const char *key)
{
	char k[96], why[120];
	json_t *pat = json_object_get(sp, "pattern");
	json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
	json_t *beh = json_object_get(sp, "behavior");
	if (!json_is_string(beh) || strcmp(json_string_value(beh), "Isolated")) {
		snprintf(k, sizeof k, "%s.behavior", key);
		snprintf(why, sizeof why, "'%.40s' is not supported (Isolated only)",
			 json_is_string(beh) ? json_string_value(beh) : "?");
		return unsupported(h, k, why);
	}
	if (json_is_true(json_object_get(sp, "invert"))) {
		snprintf(k, sizeof k, "%s.invert", key);
		return unsupported(h, k, "true is not supported");
	}
	snprintf(k, sizeof k, "%s.pattern", key);
	if (json_is_string(re))
		return set_regex(h, json_string_value(re), k);
	if (!json_is_string(str) || !json_string_length(str))
		return bad(h, k, "expected {\"Regex\": ...} or {\"String\": ...}");
	char *lit = escape_literal(json_string_value(str));
	if (!lit)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	int rc = set_regex(h, lit, k);
	free(lit);
	return rc;
}

static const char *type_of(json_t *v)
{
	json_t *ty = json_object_get(v, "type");
	return json_is_string(ty) ? json_string_value(ty) : "";
}

static int pre_tokenizer(struct hf *h, json_t *pt)
{
	char why[160];
	const char *ty = type_of(pt);
	if (!strcmp(ty, "ByteLevel"))
		return byte_level(h, pt, "pre_tokenizer", false);
	if (strcmp(ty, "Sequence")) {
		snprintf(why, sizeof why,
			 "%.40s%s%s is not supported (ByteLevel, or Sequence of Split and ByteLevel)",
			 pt && !json_is_null(pt) ? "type '" : "", pt && !json_is_null(pt) ? ty : "null",
			 pt && !json_is_null(pt) ? "'" : "");
		return unsupported(h, "pre_tokenizer", why);
	}
	json_t *list = json_object_get(pt, "pretokenizers");
	size_t n = json_array_size(list);
	bool seen_split = false, seen_bl = false;
	for (size_t i = 0; i < n; i++) {
		char key[64];
		json_t *e = json_array_get(list, i);
		int rc;
		snprintf(key, sizeof key, "pre_tokenizer.pretokenizers[%zu]", i);
		ty = type_of(e);
		if (!strcmp(ty, "Split") && !seen_split && !seen_bl) {
			seen_split = true;
			rc = split(h, e, key);
		} else if (!strcmp(ty, "ByteLevel") && !seen_bl) {
			seen_bl = true;
			rc = byte_level(h, e, key, seen_split);
		} else {
			snprintf(why, sizeof why,
				 "'%.40s' is not supported here (one Split, then ByteLevel)", ty);
			rc = unsupported(h, key, why);
		}
		if (rc < 0)
			return rc;
	}
	if (!seen_bl)
		return unsupported(h, "pre_tokenizer", "no ByteLevel step (byte-level BPE only)");
	return 0;
}

/* BOS from a TemplateProcessing post-processor (possibly in a Sequence). */
static int64_t template_bos(json_t *pp)
{
	if (!strcmp(type_of(pp), "Sequence")) {
		json_t *list = json_object_get(pp, "processors");
		for (size_t i = 0; i < json_array_size(list); i++) {
			int64_t b = template_bos(json_array_get(list, i));
			if (b >= 0)
				return b;
		}
		return -1;
	}
	if (strcmp(type_of(pp), "TemplateProcessing"))
		return -1;
	json_t *first = json_object_get(json_array_get(json_object_get(pp, "single"), 0),
					"SpecialToken");
	const char *name = json_string_value(json_object_get(first, "id"));
	if (!name)
		return -1;
	json_t *ids = json_object_get(json_object_get(json_object_get(pp, "special_tokens"), name),
				      "ids");
	json_t *id = json_array_get(ids, 0);
	return json_is_integer(id) ? json_integer_value(id) : -1;
}

static int64_t named_id(struct hf *h, const char *name)
{
	int64_t id = titan_tokenizer_special(h->t, name);
	uint32_t v;
	if (id < 0 && vocab_id(h, name, &v) == 0)
		id = v;
	return id;
}

int titan_tok_load_hf(struct titan_tokenizer *t, const char *path, const uint8_t *data,
		      size_t n)
{
	json_error_t err;
	struct hf h = { .t = t, .path = path };
	int rc;
	char what[512];

	alphabet(&h);
	t->format = TITAN_TOK_HF_JSON;
	t->encoding = TITAN_ENC_AUTO;
	json_t *root = json_loadb((const char *)data, n, 0, &err);
	if (!root)
		return titan_error(TITAN_E_FORMAT, "%s:%d:%d: %s", path, err.line, err.column, err.text);
	if (!json_is_object(root)) {
		rc = bad(&h, "(top level)", "not a JSON object");
		goto out;
	}
	json_t *model = json_object_get(root, "model");
	if (!json_is_object(model)) {
		rc = bad(&h, "model", "missing or not an object");
		goto out;
	}
	if ((rc = check_model(&h, model)) < 0)
		goto out;
	json_t *norm = json_object_get(root, "normalizer");
	if (norm && !json_is_null(norm)) {
		snprintf(what, sizeof what, "type '%.40s' is not supported (must be null)",
			 type_of(norm));
		rc = unsupported(&h, "normalizer", what);
		goto out;
	}
	static const char *const nulls[] = { "truncation", "padding" };
	for (size_t i = 0; i < 2; i++) {
		json_t *v = json_object_get(root, nulls[i]);
		if (v && !json_is_null(v)) {
			rc = unsupported(&h, nulls[i], "must be null (it changes the ids)");
			goto out;
		}
	}
	json_t *added = json_object_get(root, "added_tokens");
	if (added && !json_is_array(added) && !json_is_null(added)) {
		rc = bad(&h, "added_tokens", "not an array");
		goto out;
	}
	h.vocab = json_object_get(model, "vocab");
	if ((rc = load_vocab(&h, added)) < 0)
		goto out;
	if ((rc = load_merges(&h, json_object_get(model, "merges"))) < 0)
		goto out;
	if ((rc = pre_tokenizer(&h, json_object_get(root, "pre_tokenizer"))) < 0)
		goto out;
	if (!t->pattern && !(t->pattern = titan_strdup(""))) {
		rc = TITAN_E_NOMEM;
		goto out;
	}
	snprintf(what, sizeof what, "%s: model.vocab", path);
	if ((rc = titan_tok_finish(t, what, NULL)) < 0)
		goto out;
	t->bos = named_id(&h, "<|begin_of_text|>");
	if (t->bos < 0)
		t->bos = template_bos(json_object_get(root, "post_processor"));
	if (t->bos >= t->vocab_size)
		t->bos = -1;
	t->eos = named_id(&h, "<|end_of_text|>");
	if (t->eos < 0)
		t->eos = named_id(&h, "<|endoftext|>");
out:
	json_decref(root);
	return rc;
}
