/*
 * reader.c — documents from corpus files (JSONL, whole-file text, one per
 * line) as segments for parallel encoding.  Long documents are cut only at
 * "\n" followed by an ASCII letter: every supported pre-tokenizer (cl100k /
 * Llama 3, o200k, GPT-2) ends a piece at that newline and starts the next
 * one at the letter, so the segments encode to exactly the ids of the whole.
 * Input files may be gzip- or zstd-compressed (titan_instream: told by the
 * first bytes, standard input included).
 */
#include "titan/tok.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"

#define DEFAULT_SEGMENT (1u << 20)
#define READ_CHUNK (1u << 20)

struct titan_doc_reader {
	struct titan_instream *in;
	const char *path;    /* the instream's name, for messages */
	struct titan_doc_reader_opts o;
	/* read buffer: valid bytes are buf[start, end) */
	uint8_t *buf;
	size_t cap, start, end;
	bool eof;
	uint64_t line;       /* lines consumed (JSONL/LINES) */
	uint64_t consumed;   /* input bytes handed out or skipped */
	/* the current in-memory document (JSONL and LINES modes) */
	struct titan_bytes doc;
	size_t doc_pos;
	bool in_doc;
	/* TEXT mode: the file's single document */
	bool text_started, text_done;
	size_t scan;         /* TEXT mode: bytes after start known to hold no cut */
};

int titan_doc_format_parse(const char *name, enum titan_doc_format *out)
{
	if (!strcmp(name, "jsonl"))
		*out = TITAN_DOC_JSONL;
	else if (!strcmp(name, "text"))
		*out = TITAN_DOC_TEXT;
	else if (!strcmp(name, "lines"))
		*out = TITAN_DOC_LINES;
	else
		return TITAN_E_INVALID;
	return 0;
}

static inline bool ascii_letter(uint8_t c)
{
	return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}

/* A cut at p is safe when s[p-1] is '\n', s[p] an ASCII letter and s[p-2]
 * a visible ASCII character: then the newline is a piece of its own in
 * every supported pattern whether the letter follows or the text ends (with
 * whitespace before it, GPT-2's \s+(?!\S) would see the end of the text and
 * merge the run). */
static inline bool cut_ok(const uint8_t *s, size_t p)
{
	return p >= 2 && s[p - 1] == '\n' && ascii_letter(s[p]) && s[p - 2] > 0x20 && s[p - 2] < 0x7f;
}

/* Smallest safe p >= from (p < n), or 0. */
static size_t first_cut(const uint8_t *s, size_t n, size_t from)
{
	size_t i = from ? from - 1 : 0;

	while (i + 1 < n) {
		const uint8_t *nl = memchr(s + i, '\n', n - 1 - i);

		if (!nl)
			return 0;
		i = (size_t)(nl - s);
		if (cut_ok(s, i + 1))
			return i + 1;
		i++;
	}
	return 0;
}

size_t titan_doc_safe_cut(const uint8_t *s, size_t n)
{
	size_t p = n;

	while (p > 1) {
		const uint8_t *nl = memrchr(s, '\n', p - 1);

		if (!nl)
			return 0;
		p = (size_t)(nl - s) + 1; /* just after the newline */
		if (cut_ok(s, p))
			return p;
		/* next round searches s[0, p - 1): the bytes before this newline */
	}
	return 0;
}

struct titan_doc_reader *titan_doc_reader_open(const char *path,
					       const struct titan_doc_reader_opts *o)
{
	struct titan_doc_reader *r = calloc(1, sizeof(*r));

	if (!r) {
		titan_error(TITAN_E_NOMEM, "out of memory");
		return NULL;
	}
	r->o = *o;
	if (!r->o.field)
		r->o.field = "text";
	if (!r->o.segment_bytes)
		r->o.segment_bytes = DEFAULT_SEGMENT;
	if (titan_instream_open(path, NULL, &r->in) < 0) {
		free(r);
		return NULL;
	}
	r->path = titan_instream_name(r->in);
	return r;
}

void titan_doc_reader_close(struct titan_doc_reader *r)
{
	if (!r)
		return;
	titan_instream_close(r->in);
	titan_bytes_release(&r->doc);
	free(r->buf);
	free(r);
}

uint64_t titan_doc_reader_bytes(const struct titan_doc_reader *r)
{
	return r->consumed;
}

int64_t titan_doc_reader_file_size(const struct titan_doc_reader *r)
{
	return titan_instream_size(r->in);
}

uint64_t titan_doc_reader_file_bytes(const struct titan_doc_reader *r)
{
	return titan_instream_consumed(r->in);
}

enum titan_compression titan_doc_reader_compression(const struct titan_doc_reader *r)
{
	return titan_instream_compression(r->in);
}

/* Read more input: make room (compacting or growing), then read.  Returns
 * bytes read, 0 at EOF, negative on error (corrupt compressed data: the
 * instream's message names the file and offset). */
static int64_t fill(struct titan_doc_reader *r)
{
	int64_t got;

	if (r->eof)
		return 0;
	if (r->start > 0 && (r->start == r->end || r->end + READ_CHUNK > r->cap)) {
		memmove(r->buf, r->buf + r->start, r->end - r->start);
		r->end -= r->start;
		r->start = 0;
	}
	if (r->end + READ_CHUNK > r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 2 * READ_CHUNK;
		uint8_t *p;

		while (cap < r->end + READ_CHUNK)
			cap *= 2;
		p = realloc(r->buf, cap);
		if (!p)
			return titan_error(TITAN_E_NOMEM, "%s: out of memory for a %zu-byte read buffer",
					   r->path, cap);
		r->buf = p;
		r->cap = cap;
	}
	got = titan_instream_read(r->in, r->buf + r->end, r->cap - r->end);
	if (got < 0)
		return got;
	r->end += (size_t)got;
	if (got == 0)
		r->eof = true;
	return got;
}

/* Next segment of an in-memory document. */
static int doc_segment(struct titan_doc_reader *r, struct titan_doc_segment *seg)
{
	size_t left = r->doc.n - r->doc_pos, take = left;

	if (r->o.cut_documents && left > 2 * r->o.segment_bytes) {
		size_t p = titan_doc_safe_cut(r->doc.p + r->doc_pos, r->o.segment_bytes);

		if (!p) /* none in the window: up to the first cut after it */
			p = first_cut(r->doc.p + r->doc_pos, left, r->o.segment_bytes);
		if (p)
			take = p;
	}
	seg->data = r->doc.p ? r->doc.p + r->doc_pos : (const uint8_t *)""; /* "" if never grown */
	seg->len = take;
	seg->doc_start = r->doc_pos == 0;
	r->doc_pos += take;
	seg->doc_end = r->doc_pos == r->doc.n;
	r->in_doc = !seg->doc_end;
	return 1;
}

/* One line from the buffer into r->doc (without its "\n" or "\r\n").
 * Returns 1, 0 at EOF, or an error. */
static int next_line(struct titan_doc_reader *r, bool *had_newline)
{
	for (;;) {
		uint8_t *nl = r->start < r->end ? memchr(r->buf + r->start, '\n', r->end - r->start) : NULL;
		size_t len, full;
		int64_t rc;

		if (nl || (r->eof && r->start < r->end)) {
			full = nl ? (size_t)(nl - (r->buf + r->start)) + 1 : r->end - r->start;
			len = nl ? full - 1 : full;
			if (nl && len > 0 && r->buf[r->start + len - 1] == '\r')
				len--;
			r->doc.n = 0;
			if (titan_bytes_append(&r->doc, r->buf + r->start, len) < 0)
				return TITAN_E_NOMEM;
			r->start += full;
			r->consumed += full;
			r->line++;
			*had_newline = nl != NULL;
			return 1;
		}
		if (r->eof)
			return 0;
		if ((rc = fill(r)) < 0)
			return (int)rc;
	}
}

static int hexval(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The \uXXXX escape at s[i] ("\\u" + 4 hex digits), or -1. */
static int32_t escape_at(const uint8_t *s, size_t n, size_t i)
{
	int32_t v = 0;

	if (i + 6 > n || s[i] != '\\' || s[i + 1] != 'u')
		return -1;
	for (int k = 2; k < 6; k++) {
		int h = hexval(s[i + k]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

/* Make a JSONL line acceptable to a strict JSON parser the way tiktoken's
 * and HF's bindings see text: invalid UTF-8 bytes become U+FFFD (the line
 * is read as text first), and an escaped lone surrogate (\ud800 without its
 * pair) becomes \ufffd (same length, in place). */
static int sanitize_json_line(struct titan_doc_reader *r)
{
	uint8_t *s;
	size_t n;

	if (titan_utf8_valid_prefix(r->doc.p, r->doc.n) < r->doc.n) {
		struct titan_bytes clean = {0};
		int64_t rc = titan_utf8_sanitize(r->doc.p, r->doc.n, &clean);

		if (rc < 0)
			return (int)rc;
		titan_bytes_release(&r->doc);
		r->doc = clean;
	}
	s = r->doc.p;
	n = r->doc.n;
	for (size_t i = 0; i + 1 < n; i++) {
		int32_t c;

		if (s[i] != '\\')
			continue;
		if (s[i + 1] != 'u') {
			i++; /* \\, \", ...: skip the escaped character */
			continue;
		}
		c = escape_at(s, n, i);
		if (c >= 0xD800 && c <= 0xDBFF) {
			int32_t lo = escape_at(s, n, i + 6);

			if (lo >= 0xDC00 && lo <= 0xDFFF) {
				i += 11; /* a proper pair */
				continue;
			}
		}
		if (c >= 0xD800 && c <= 0xDFFF)
			memcpy(s + i + 2, "fffd", 4);
		if (c >= 0)
			i += 5;
	}
	return 0;
}

static int next_jsonl(struct titan_doc_reader *r)
{
	bool nl;
	int rc;

	for (;;) {
		json_error_t err;
		json_t *root, *v;
		size_t i = 0;

		if ((rc = next_line(r, &nl)) <= 0)
			return rc;
		while (i < r->doc.n && (r->doc.p[i] == ' ' || r->doc.p[i] == '\t' || r->doc.p[i] == '\r'))
			i++;
		if (i == r->doc.n)
			continue; /* blank line */
		if ((rc = sanitize_json_line(r)) < 0)
			return rc;
		root = json_loadb((const char *)r->doc.p, r->doc.n, JSON_ALLOW_NUL, &err);
		if (!root)
			return titan_error(TITAN_E_INVALID, "%s:%llu:%d: invalid JSON: %s", r->path,
					   (unsigned long long)r->line, err.column, err.text);
		v = json_is_object(root) ? json_object_get(root, r->o.field) : NULL;
		if (!json_is_string(v)) {
			const char *why = !json_is_object(root) ? "not a JSON object" :
					  v ? "is not a string" : "is missing";

			json_decref(root);
			if (!strcmp(why, "not a JSON object"))
				return titan_error(TITAN_E_INVALID, "%s:%llu: not a JSON object", r->path,
						   (unsigned long long)r->line);
			return titan_error(TITAN_E_INVALID, "%s:%llu: field '%s' %s (--field names it)",
					   r->path, (unsigned long long)r->line, r->o.field, why);
		}
		r->doc.n = 0;
		rc = titan_bytes_append(&r->doc, json_string_value(v), json_string_length(v));
		json_decref(root);
		if (rc < 0)
			return rc;
		r->doc_pos = 0;
		return 1;
	}
}

static int next_text(struct titan_doc_reader *r, struct titan_doc_segment *seg)
{
	const size_t target = r->o.segment_bytes;
	int64_t rc;

	if (r->text_done)
		return 0;
	for (;;) {
		size_t avail = r->end - r->start;

		if (r->o.cut_documents && avail > target) {
			size_t p = titan_doc_safe_cut(r->buf + r->start, avail > 2 * target ? 2 * target : avail);

			if (!p) {
				p = first_cut(r->buf + r->start, avail, r->scan > target ? r->scan : target);
				if (!p)
					r->scan = avail - 1;
			}
			if (p) {
				r->scan = 0;
				seg->data = r->buf + r->start;
				seg->len = p;
				seg->doc_start = !r->text_started;
				seg->doc_end = false;
				r->text_started = true;
				r->start += p;
				r->consumed += p;
				return 1;
			}
		}
		if (r->eof) {
			seg->data = r->buf ? r->buf + r->start : (const uint8_t *)"";
			seg->len = avail;
			seg->doc_start = !r->text_started;
			seg->doc_end = true;
			r->text_started = r->text_done = true;
			r->start = r->end;
			r->consumed += avail;
			return 1;
		}
		/* Before reading more, drop nothing: a segment handed out earlier
		 * is no longer referenced once the caller asks for the next. */
		if ((rc = fill(r)) < 0)
			return (int)rc;
	}
}

int titan_doc_reader_next(struct titan_doc_reader *r, struct titan_doc_segment *seg)
{
	bool nl;
	int rc;

	switch (r->o.format) {
	case TITAN_DOC_TEXT:
		return next_text(r, seg);
	case TITAN_DOC_LINES:
		if (r->in_doc)
			return doc_segment(r, seg);
		if ((rc = next_line(r, &nl)) <= 0)
			return rc;
		r->doc_pos = 0;
		return doc_segment(r, seg);
	case TITAN_DOC_JSONL:
		if (r->in_doc)
			return doc_segment(r, seg);
		if ((rc = next_jsonl(r)) <= 0)
			return rc;
		return doc_segment(r, seg);
	}
	return titan_error(TITAN_E_INTERNAL, "bad document format");
}
