/*
 * escape.c — strings from files made safe to print: a tensor name, a GGUF
 * key or a flavor string is data from someone else, and a terminal acts
 * on the escapes in it (ESC [ 2 J clears the screen, OSC 52 writes the
 * clipboard).  Control characters and bytes that are not UTF-8 are shown
 * as \xHH, as git and ls -b quote file names.
 */
#include "titan/core.h"

#include <stdio.h>
#include <string.h>

/* Length of the well-formed UTF-8 sequence at s (at most n bytes), 0 when
 * the bytes there are not one (RFC 3629: no overlongs, no surrogates,
 * nothing past U+10FFFF). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	if (len > n)
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

const char *titan_str_escapen(char *buf, size_t n, const char *str, size_t len, unsigned flags)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t o = 0;

	if (!n)
		return buf;
	for (size_t i = 0; i < len;) {
		unsigned char c = s[i];
		size_t k = utf8_len(s + i, len - i);
		char esc[16];
		size_t e;

		if (c == '\n' && (flags & TITAN_ESC_KEEP_LINES))
			e = (size_t)snprintf(esc, sizeof(esc), "\n");
		else if (c == '\t' && (flags & TITAN_ESC_KEEP_LINES))
			e = (size_t)snprintf(esc, sizeof(esc), "\t");
		else if (flags & TITAN_ESC_QUOTE && (c == '"' || c == '\\'))
			e = (size_t)snprintf(esc, sizeof(esc), "\\%c", c);
		else if (flags & TITAN_ESC_QUOTE && (c == '\n' || c == '\t'))
			e = (size_t)snprintf(esc, sizeof(esc), "\\%c", c == '\n' ? 'n' : 't');
		else if (c < 0x20 || c == 0x7f || k == 0)
			e = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", c);
		else if (k == 2 && c == 0xc2 && s[i + 1] < 0xa0) /* C1: U+0080..U+009F */
			e = (size_t)snprintf(esc, sizeof(esc), "\\x%02x\\x%02x", c, s[i + 1]);
		else
			memcpy(esc, s + i, e = k);
		if (o + e >= n)
			break; /* cut at a whole character or escape */
		memcpy(buf + o, esc, e);
		o += e;
		i += k ? k : 1;
	}
	buf[o] = '\0';
	return buf;
}

const char *titan_str_escape(char *buf, size_t n, const char *s)
{
	return titan_str_escapen(buf, n, s ? s : "", s ? strlen(s) : 0, 0);
}
