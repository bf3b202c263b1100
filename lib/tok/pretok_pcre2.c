/*
 * pretok_pcre2.c — the PCRE2 pre-tokenizer: any pattern (tokenizer.json's
 * Split regex), and the known patterns when the scanners need an oracle.
 *
 * Patterns are compiled with PCRE2_UTF | PCRE2_UCP, so \p{..} and \d are
 * Unicode, and JIT-compiled when PCRE2 has a JIT.  One difference from the
 * engines the peers use is removed by rewriting the pattern: with UCP,
 * PCRE2's \s also matches U+180E MONGOLIAN VOWEL SEPARATOR (its \h list),
 * while Rust's regex (tiktoken) and Oniguruma (HF tokenizers) match exactly
 * White_Space, so \s and \S become \p{White_Space} and \P{White_Space}
 * (inside and outside classes).  Left as they are: PCRE2's Unicode tables
 * (10.42: Unicode 14) versus the peers' (tiktoken's regex-syntax: Unicode
 * 16), and \w, which PCRE2 takes as [\p{L}\p{N}_] while Oniguruma adds
 * marks and connector punctuation.
 *
 * Find-iter follows Rust's regex: leftmost-first matches, each search
 * starting where the last match ended; an empty match (none of the known
 * patterns has one) emits nothing and the search goes on one code point
 * further.  Text between matches is skipped.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "tok_impl.h"

struct tok_re {
	pcre2_code *code;
	bool jit;
};

struct tok_re_state {
	pcre2_match_data *md;
	pcre2_match_context *mctx;
	pcre2_jit_stack *stack;
};

/* Append s to the output buffer (sized by the caller). */
static char *put(char *o, const char *s)
{
	size_t k = strlen(s);
	memcpy(o, s, k);
	return o + k;
}

/* \p{..} is valid both in and out of a character class, so the rewrite
 * needs no class tracking: only escapes and \Q...\E quoting matter. */
char *tok_re_translate(const char *pattern)
{
	static const char ws[] = "\\p{White_Space}", nws[] = "\\P{White_Space}";
	size_t n = strlen(pattern);
	/* each two-byte \s or \S grows to sizeof ws - 1 bytes */
	char *out = malloc(n / 2 * (sizeof ws - 1) + n + 1);
	if (!out)
		return NULL;
	char *o = out;
	size_t i = 0;
	while (i < n) {
		if (pattern[i] != '\\' || i + 1 == n) {
			*o++ = pattern[i++];
			continue;
		}
		char e = pattern[i + 1];
		if (e == 'Q') { /* \Q...\E: literal text, copied as is */
			const char *end = strstr(pattern + i + 2, "\\E");
			size_t k = end ? (size_t)(end - pattern) + 2 - i : n - i;
			memcpy(o, pattern + i, k);
			o += k;
			i += k;
		} else if (e == 's' || e == 'S') {
			o = put(o, e == 's' ? ws : nws);
			i += 2;
		} else {
			*o++ = pattern[i++];
			*o++ = pattern[i++];
		}
	}
	*o = '\0';
	return out;
}

static void pcre2_msg(int code, char *buf, size_t size)
{
	if (pcre2_get_error_message(code, (PCRE2_UCHAR *)buf, size) < 0)
		snprintf(buf, size, "PCRE2 error %d", code);
}

struct tok_re *tok_re_new(const char *pattern)
{
	char msg[256];
	int err;
	PCRE2_SIZE off;
	struct tok_re *re = calloc(1, sizeof *re);
	char *tr = tok_re_translate(pattern);
	if (!re || !tr) {
		free(re);
		free(tr);
		titan_error(TITAN_E_NOMEM, "out of memory compiling a regex");
		return NULL;
	}
	re->code = pcre2_compile((PCRE2_SPTR)tr, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
				 &err, &off, NULL);
	free(tr);
	if (!re->code) {
		/* report the offset in the user's pattern, not the rewritten one */
		pcre2_code *orig = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
						 PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
		pcre2_code_free(orig);
		pcre2_msg(err, msg, sizeof msg);
		free(re);
		titan_error(err == PCRE2_ERROR_NOMEMORY ? TITAN_E_NOMEM : TITAN_E_INVALID,
			    "bad regex '%s': %s at offset %zu", pattern, msg, (size_t)off);
		return NULL;
	}
	uint32_t have_jit = 0;
	pcre2_config(PCRE2_CONFIG_JIT, &have_jit);
	if (have_jit) {
		int rc = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
		re->jit = rc == 0;
		if (rc != 0) {
			pcre2_msg(rc, msg, sizeof msg);
			titan_log_debug("regex JIT unavailable (%s); using the interpreter", msg);
		}
	}
	return re;
}

void tok_re_free(struct tok_re *re)
{
	if (!re)
		return;
	pcre2_code_free(re->code);
	free(re);
}

struct tok_re_state *tok_re_state_new(const struct tok_re *re)
{
	struct tok_re_state *st = calloc(1, sizeof *st);
	if (!st)
		goto fail;
	st->md = pcre2_match_data_create_from_pattern(re->code, NULL);
	st->mctx = pcre2_match_context_create(NULL);
	if (!st->md || !st->mctx)
		goto fail;
	/* The default limits (10M backtracking steps, 20 MB of heap) stop a
	 * pattern like \s*[\r\n]+ on a whitespace run of some MB: the cost is
	 * linear in the run, so lift them. */
	pcre2_set_match_limit(st->mctx, UINT32_MAX);
	pcre2_set_depth_limit(st->mctx, UINT32_MAX);
	pcre2_set_heap_limit(st->mctx, UINT32_MAX);
	if (re->jit) {
		/* long runs of one class can need deep backtracking stacks */
		st->stack = pcre2_jit_stack_create(32 << 10, 64 << 20, NULL);
		if (!st->stack)
			goto fail;
		pcre2_jit_stack_assign(st->mctx, NULL, st->stack);
	}
	return st;
fail:
	tok_re_state_free(st);
	titan_error(TITAN_E_NOMEM, "out of memory for regex match data");
	return NULL;
}

void tok_re_state_free(struct tok_re_state *st)
{
	if (!st)
		return;
	pcre2_match_data_free(st->md);
	pcre2_match_context_free(st->mctx);
	pcre2_jit_stack_free(st->stack);
	free(st);
}

int tok_re_split(const struct tok_re *re, struct tok_re_state *st, const uint8_t *s, size_t n,
		 titan_pretok_fn fn, void *arg)
{
	size_t bad = titan_utf8_valid_prefix(s, n);
	if (bad < n)
		return titan_error(TITAN_E_INVALID,
				   "pre-tokenizer: invalid UTF-8 at byte %zu (sanitise first)", bad);
	struct tok_re_state *own = NULL;
	if (!st && !(st = own = tok_re_state_new(re)))
		return TITAN_E_NOMEM;
	int rc = 0;
	size_t off = 0;
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
	while (off < n) {
		int m = re->jit ? pcre2_jit_match(re->code, s, n, off, 0, st->md, st->mctx)
				: pcre2_match(re->code, s, n, off, PCRE2_NO_UTF_CHECK, st->md, st->mctx);
		if (m == PCRE2_ERROR_NOMATCH)
			break;
		if (m < 0) {
			char msg[256];
			pcre2_msg(m, msg, sizeof msg);
			rc = titan_error(m == PCRE2_ERROR_NOMEMORY ? TITAN_E_NOMEM : TITAN_E_INVALID,
					 "regex match failed at byte %zu: %s", off, msg);
			break;
		}
		size_t a = ov[0], b = ov[1];
		if (b > a) {
			if ((rc = fn(s + a, b - a, arg)) != 0)
				break;
			off = b;
		} else {
			size_t len = 1; /* empty match: go on one code point further */
			if (a < n)
				tok_utf8_decode(s + a, n - a, &len);
			off = a + len;
		}
	}
	tok_re_state_free(own);
	return rc;
}
