/*
 * json.c — a small streaming JSON writer for JSONL outputs (metrics.jsonl,
 * trace events, --json reports): compact text, commas and nesting tracked,
 * strings escaped and made valid UTF-8, non-finite numbers written as null.
 * The buffer comes from the host allocator under the "other" tag.
 */
#include "titan/core.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#define MAX_DEPTH ((int)sizeof(((struct titan_json *)0)->stack) - 1)
#define FIRST_CAP 256 /* a buffer's first size, doubled as the text grows */

/* The buffer size after `cap` (0: none yet) grows to hold `need` bytes. */
static size_t grown(size_t cap, size_t need)
{
	cap = cap ? cap : FIRST_CAP;
	while (cap < need)
		cap *= 2;
	return cap;
}

void titan_json_init(struct titan_json *j)
{
	memset(j, 0, sizeof *j);
	j->first[0] = true;
}

void titan_json_release(struct titan_json *j)
{
	if (!j)
		return;
	titan_mem_free(titan_host_allocator(), j->buf);
	titan_json_init(j);
}

void titan_json_reset(struct titan_json *j)
{
	j->len = 0;
	j->depth = 0;
	j->first[0] = true;
	j->want_value = false;
	j->oom = false;
	if (j->buf)
		j->buf[0] = '\0';
}

/* Room for `extra` more bytes plus the NUL; false once out of memory. */
static bool reserve(struct titan_json *j, size_t extra)
{
	if (j->oom)
		return false;
	if (extra > SIZE_MAX / 2 - j->len) {
		j->oom = true;
		titan_error(TITAN_E_NOMEM, "JSON text too large");
		return false;
	}
	size_t need = j->len + extra + 1;
	if (need <= j->cap)
		return true;
	size_t cap = grown(j->cap, need);
	char *buf = titan_mem_alloc(titan_host_allocator(), cap, TITAN_MEM_OTHER);
	if (!buf) {
		j->oom = true;
		return false;
	}
	if (j->buf) {
		memcpy(buf, j->buf, j->len + 1);
		titan_mem_free(titan_host_allocator(), j->buf);
	}
	j->buf = buf;
	j->cap = cap;
	return true;
}

bool titan_json_reserve(struct titan_json *j, size_t bytes)
{
	return bytes <= j->len + 1 || reserve(j, bytes - j->len - 1);
}

static void put(struct titan_json *j, const char *s, size_t n)
{
	if (!reserve(j, n))
		return;
	memcpy(j->buf + j->len, s, n);
	j->len += n;
	j->buf[j->len] = '\0';
}

/* Separator and structure checks before any value (scalar or container). */
static void before_value(struct titan_json *j)
{
	int d = j->depth;

	if (d == 0) {
		TITAN_ASSERT(j->first[0] && "one top-level value per text; reset first");
		j->first[0] = false;
	} else if (j->stack[d] == 'o') {
		TITAN_ASSERT(j->want_value && "object member needs a key first");
		j->want_value = false;
	} else {
		if (!j->first[d])
			put(j, ",", 1);
		j->first[d] = false;
	}
}

static void begin(struct titan_json *j, char kind, const char *open)
{
	before_value(j);
	TITAN_ASSERT(j->depth < MAX_DEPTH);
	j->depth++;
	j->stack[j->depth] = (uint8_t)kind;
	j->first[j->depth] = true;
	put(j, open, 1);
}

static void end(struct titan_json *j, char kind, const char *close)
{
	TITAN_ASSERT(j->depth > 0 && j->stack[j->depth] == (uint8_t)kind);
	TITAN_ASSERT(!j->want_value && "key without a value");
	j->depth--;
	put(j, close, 1);
}

void titan_json_object_begin(struct titan_json *j) { begin(j, 'o', "{"); }
void titan_json_object_end(struct titan_json *j) { end(j, 'o', "}"); }
void titan_json_array_begin(struct titan_json *j) { begin(j, 'a', "["); }
void titan_json_array_end(struct titan_json *j) { end(j, 'a', "]"); }

/* Length of the valid UTF-8 sequence at s (2..4 bytes), 0 if invalid:
 * bad lead byte, truncated, overlong, surrogate or beyond U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	unsigned char lo = 0x80, hi = 0xBF;
	size_t len;

	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		if (c == 0xE0)
			lo = 0xA0; /* overlong */
		else if (c == 0xED)
			hi = 0x9F; /* surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		if (c == 0xF0)
			lo = 0x90; /* overlong */
		else if (c == 0xF4)
			hi = 0x8F; /* > U+10FFFF */
	} else
		return 0;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t k = 2; k < len; k++)
		if (s[k] < 0x80 || s[k] > 0xBF)
			return 0;
	return len;
}

/* Each invalid byte becomes one U+FFFD (a byte-wise policy: simple, and the
 * output length is bounded by 6 bytes per input byte). */
static void put_string(struct titan_json *j, const char *str, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)str;

	if (n > (SIZE_MAX - 8) / 6 || !reserve(j, 6 * n + 2)) {
		j->oom = true;
		return;
	}
	char *o = j->buf + j->len;
	*o++ = '"';
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		if (c >= 0x80) {
			size_t len = utf8_seq(s + i, n - i);
			if (len) {
				memcpy(o, s + i, len);
				o += len;
				i += len;
			} else {
				memcpy(o, "\xEF\xBF\xBD", 3);
				o += 3;
				i++;
			}
			continue;
		}
		i++;
		switch (c) {
		case '"': *o++ = '\\'; *o++ = '"'; break;
		case '\\': *o++ = '\\'; *o++ = '\\'; break;
		case '\n': *o++ = '\\'; *o++ = 'n'; break;
		case '\t': *o++ = '\\'; *o++ = 't'; break;
		case '\r': *o++ = '\\'; *o++ = 'r'; break;
		case '\b': *o++ = '\\'; *o++ = 'b'; break;
		case '\f': *o++ = '\\'; *o++ = 'f'; break;
		default:
			if (c < 0x20) {
				memcpy(o, "\\u00", 4);
				o[4] = hex[c >> 4];
				o[5] = hex[c & 15];
				o += 6;
			} else
				*o++ = (char)c;
		}
	}
	*o++ = '"';
	*o = '\0';
	j->len = (size_t)(o - j->buf);
}

void titan_json_key(struct titan_json *j, const char *key)
{
	int d = j->depth;

	TITAN_ASSERT(d > 0 && j->stack[d] == 'o' && "key outside an object");
	TITAN_ASSERT(!j->want_value && "two keys in a row");
	TITAN_ASSERT(key);
	if (!j->first[d])
		put(j, ",", 1);
	j->first[d] = false;
	put_string(j, key, strlen(key));
	put(j, ":", 1);
	j->want_value = true;
}

void titan_json_stringn(struct titan_json *j, const char *s, size_t n)
{
	before_value(j);
	if (!s && !n)
		s = "";
	TITAN_ASSERT(s);
	put_string(j, s, n);
}

void titan_json_string(struct titan_json *j, const char *s)
{
	if (!s) {
		titan_json_null(j);
		return;
	}
	titan_json_stringn(j, s, strlen(s));
}

void titan_json_int(struct titan_json *j, int64_t v)
{
	char buf[32];
	int n = snprintf(buf, sizeof buf, "%" PRId64, v);
	before_value(j);
	put(j, buf, (size_t)n);
}

void titan_json_uint(struct titan_json *j, uint64_t v)
{
	char buf[32];
	int n = snprintf(buf, sizeof buf, "%" PRIu64, v);
	before_value(j);
	put(j, buf, (size_t)n);
}

void titan_json_double(struct titan_json *j, double v)
{
	char buf[48];

	if (!isfinite(v)) {
		titan_json_null(j);
		return;
	}
	titan_format_double(buf, sizeof buf, v);
	/* printf follows LC_NUMERIC; JSON always uses '.'. */
	for (char *p = buf; *p; p++)
		if (*p == ',')
			*p = '.';
	before_value(j);
	put(j, buf, strlen(buf));
}

void titan_json_bool(struct titan_json *j, bool v)
{
	before_value(j);
	put(j, v ? "true" : "false", v ? 4 : 5);
}

void titan_json_null(struct titan_json *j)
{
	before_value(j);
	put(j, "null", 4);
}

const char *titan_json_str(const struct titan_json *j)
{
	if (j->oom)
		return NULL;
	return j->buf ? j->buf : "";
}

int titan_json_write_line(struct titan_json *j, FILE *fp)
{
	TITAN_ASSERT(j->depth == 0 && !j->want_value && "unfinished JSON value");
	if (j->oom)
		return titan_error(TITAN_E_NOMEM, "cannot build JSON line: out of memory");
	errno = 0;
	if ((j->len && fwrite(j->buf, 1, j->len, fp) != j->len) || putc('\n', fp) == EOF)
		return titan_error(TITAN_E_IO, "cannot write JSON line: %s",
				   strerror(errno ? errno : EIO));
	return 0;
}
