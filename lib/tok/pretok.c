/*
 * pretok.c — the pre-tokenizer API of titan/tok.h: the known patterns, and
 * dispatch to the hand-written scanners (scan.c) or to PCRE2
 * (pretok_pcre2.c).
 *
 * The pattern texts are the `pat_str` of the npm `tiktoken` package 1.0.22
 * (its registry.json / encoders/NAME.json; Rust core, regex-syntax 0.8.5 and
 * fancy-regex 0.11 inside the WASM):
 *  - cl100k_base uses the older, non-possessive form below.  Meta's Llama 3
 *    tokenizer (llama3/tokenizer.py, pat_str) uses the identical string, so
 *    one kind serves both.  Python tiktoken >= 0.8 ships a possessive
 *    rewrite, `'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|
 *    \p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s`.
 *    It is not equivalent everywhere: its `\s++$` takes a whitespace run
 *    that ends the text whole, where the form here ends a piece after the
 *    run's last newline ("a\n  " -> "a" "\n  " versus "a" "\n" "  ").
 *    titan follows the npm peer and Meta's string.
 *  - o200k_base and gpt2 (r50k/p50k too) are as in every tiktoken release.
 */
#include "tok_impl.h"

#include <stdlib.h>

#include "titan/core.h"

static const char pat_cl100k[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
	" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char pat_o200k[] =
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
	"\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char pat_gpt2[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct titan_pretok {
	enum titan_pretok_kind kind;
	struct tok_re *re; /* PCRE2 (REGEX kind, or use_pcre2); else a scanner */
	int (*scan)(const uint8_t *s, size_t n, titan_pretok_fn fn, void *arg);
};

struct titan_pretok_state {
	struct tok_re_state *re; /* NULL for the scanners */
};

const char *titan_pretok_pattern(enum titan_pretok_kind kind)
{
	switch (kind) {
	case TITAN_PRETOK_CL100K:
		return pat_cl100k;
	case TITAN_PRETOK_O200K:
		return pat_o200k;
	case TITAN_PRETOK_GPT2:
		return pat_gpt2;
	case TITAN_PRETOK_REGEX:
		break;
	}
	return NULL;
}

struct titan_pretok *titan_pretok_new(enum titan_pretok_kind kind, const char *regex,
				      bool use_pcre2)
{
	const char *pattern = titan_pretok_pattern(kind);
	if (kind == TITAN_PRETOK_REGEX) {
		if (!regex) {
			titan_error(TITAN_E_INVALID, "pre-tokenizer: a regex is required");
			return NULL;
		}
		pattern = regex;
		use_pcre2 = true;
	} else if (!pattern) {
		titan_error(TITAN_E_INVALID, "pre-tokenizer: unknown kind %d", (int)kind);
		return NULL;
	} else if (regex) {
		titan_error(TITAN_E_INVALID, "pre-tokenizer: a known kind takes no regex");
		return NULL;
	}
	struct titan_pretok *p = calloc(1, sizeof *p);
	if (!p) {
		titan_error(TITAN_E_NOMEM, "out of memory for a pre-tokenizer");
		return NULL;
	}
	p->kind = kind;
	if (use_pcre2) {
		if (!(p->re = tok_re_new(pattern))) {
			free(p);
			return NULL;
		}
	} else {
		p->scan = kind == TITAN_PRETOK_CL100K ? tok_scan_cl100k
			: kind == TITAN_PRETOK_O200K  ? tok_scan_o200k
						      : tok_scan_gpt2;
	}
	return p;
}

void titan_pretok_free(struct titan_pretok *p)
{
	if (!p)
		return;
	tok_re_free(p->re);
	free(p);
}

enum titan_pretok_kind titan_pretok_get_kind(const struct titan_pretok *p)
{
	return p->kind;
}

struct titan_pretok_state *titan_pretok_state_new(const struct titan_pretok *p)
{
	struct titan_pretok_state *s = calloc(1, sizeof *s);
	if (!s) {
		titan_error(TITAN_E_NOMEM, "out of memory for a pre-tokenizer state");
		return NULL;
	}
	if (p->re && !(s->re = tok_re_state_new(p->re))) {
		free(s);
		return NULL;
	}
	return s;
}

void titan_pretok_state_free(struct titan_pretok_state *s)
{
	if (!s)
		return;
	tok_re_state_free(s->re);
	free(s);
}

int titan_pretok_split(const struct titan_pretok *p, struct titan_pretok_state *s,
		       const uint8_t *text, size_t n, titan_pretok_fn fn, void *arg)
{
	if (p->scan)
		return p->scan(text, n, fn, arg);
	return tok_re_split(p->re, s ? s->re : NULL, text, n, fn, arg);
}
