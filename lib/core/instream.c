/*
 * instream.c — input files that may be gzip- or zstd-compressed, read as
 * their uncompressed bytes (what `zcat -f` / `zstdcat -f` do).  The format
 * is told by the first bytes, not the name, so standard input works too:
 * gzip 1f 8b, zstd 28 b5 2f fd or a skippable frame (5? 2a 4d 18).  As in
 * zcat and zstdcat, concatenated gzip members and zstd frames are one
 * stream.  Errors name the file and the byte offset in the compressed file
 * where decoding failed (zstd: a range of at most 16 KiB, see ZSTD_FEED); a
 * file that ends inside a member or frame is an error (truncated), not a
 * short read.
 */
#include "titan/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

#if TITAN_HAVE_ZLIB
#include <zlib.h>
#endif
#if TITAN_HAVE_ZSTD
#include <zstd.h>
#endif

#define RAW_CAP ((size_t)256 << 10)

struct titan_instream {
	int fd;
	bool own_fd;
	char *name;
	enum titan_compression comp;
	/* compressed bytes (and, for any input, the first bytes read to tell
	 * the format): valid bytes are raw[start, end) */
	uint8_t *raw;
	size_t start, end;
	bool eof;
	uint64_t raw_read;      /* bytes read from fd */
	uint64_t produced;      /* bytes handed out */
	int64_t size;           /* regular file: bytes from the open offset; -1 otherwise */
	uint64_t unit_start;    /* offset of the gzip member / zstd frame being decoded */
	bool in_unit;           /* inside a member / frame */
	bool pending;           /* the last decode filled the caller's buffer */
#if TITAN_HAVE_ZLIB
	z_stream z;
	bool z_init;
#endif
#if TITAN_HAVE_ZSTD
	ZSTD_DCtx *zd;
#endif
};

const char *titan_compression_name(enum titan_compression c)
{
	switch (c) {
	case TITAN_COMPRESSION_NONE: return "none";
	case TITAN_COMPRESSION_GZIP: return "gzip";
	case TITAN_COMPRESSION_ZSTD: return "zstd";
	}
	return "?";
}

enum titan_compression titan_compression_sniff(const void *p, size_t n)
{
	const uint8_t *b = p;

	if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b)
		return TITAN_COMPRESSION_GZIP;
	if (n >= 4 && ((b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd) ||
		       ((b[0] & 0xf0) == 0x50 && b[1] == 0x2a && b[2] == 0x4d && b[3] == 0x18)))
		return TITAN_COMPRESSION_ZSTD;
	return TITAN_COMPRESSION_NONE;
}

/* Offset in the file of the next compressed byte not yet decoded. */
static uint64_t raw_pos(const struct titan_instream *s)
{
	return s->raw_read - (s->end - s->start);
}

/* Read more bytes into raw (compacting first).  Returns bytes read, 0 at
 * EOF, or TITAN_E_IO. */
static int64_t raw_fill(struct titan_instream *s)
{
	ssize_t k;

	if (s->eof)
		return 0;
	if (s->start > 0) {
		memmove(s->raw, s->raw + s->start, s->end - s->start);
		s->end -= s->start;
		s->start = 0;
	}
	if (s->end == RAW_CAP)
		return (int64_t)titan_error(TITAN_E_INTERNAL, "%s: read buffer full", s->name);
	do
		k = read(s->fd, s->raw + s->end, RAW_CAP - s->end);
	while (k < 0 && errno == EINTR);
	if (k < 0)
		return titan_error(TITAN_E_IO, "cannot read '%s': %s", s->name, strerror(errno));
	if (k == 0)
		s->eof = true;
	s->end += (size_t)k;
	s->raw_read += (uint64_t)k;
	return k;
}

#if !TITAN_HAVE_ZLIB || !TITAN_HAVE_ZSTD
static int not_built(const struct titan_instream *s, const char *lib, const char *pkg,
		     const char *sw)
{
	return titan_error(TITAN_E_UNSUPPORTED, "'%s' is %s-compressed, and this titan was built "
			   "without %s (install %s, then rebuild: make deps && make %s=yes; "
			   "or decompress it first)", s->name, titan_compression_name(s->comp), lib,
			   pkg, sw);
}
#endif

int titan_instream_open(const char *path, const char *name, struct titan_instream **out)
{
	struct titan_instream *s = calloc(1, sizeof(*s));
	const bool is_stdin = !strcmp(path, "-");
	struct stat st;
	int rc = 0;

	*out = NULL;
	if (!s)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	s->fd = -1;
	s->size = -1;
	s->name = titan_strdup(name ? name : is_stdin ? "(stdin)" : path);
	s->raw = malloc(RAW_CAP);
	if (!s->name || !s->raw) {
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
		goto fail;
	}
	if (is_stdin) {
		s->fd = STDIN_FILENO;
	} else {
		s->fd = open(path, O_RDONLY | O_CLOEXEC);
		s->own_fd = true;
		if (s->fd < 0) {
			rc = titan_error(TITAN_E_IO, "cannot open '%s': %s", path, strerror(errno));
			goto fail;
		}
	}
	if (fstat(s->fd, &st) == 0 && S_ISREG(st.st_mode)) {
		off_t at = lseek(s->fd, 0, SEEK_CUR);

		s->size = (int64_t)st.st_size - (at > 0 ? (int64_t)at : 0);
		if (s->size < 0)
			s->size = 0;
	}
	/* the first bytes tell the format (a pipe may deliver them in pieces) */
	while (s->end < 4 && !s->eof) {
		int64_t k = raw_fill(s);

		if (k < 0) {
			rc = (int)k;
			goto fail;
		}
	}
	s->comp = titan_compression_sniff(s->raw, s->end);
	switch (s->comp) {
	case TITAN_COMPRESSION_NONE:
		break;
	case TITAN_COMPRESSION_GZIP:
#if TITAN_HAVE_ZLIB
		/* 16 + 15: gzip wrapper, 32 KiB window (any gzip file) */
		if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) {
			rc = titan_error(TITAN_E_NOMEM, "%s: cannot start zlib's inflate", s->name);
			goto fail;
		}
		s->z_init = true;
#else
		rc = not_built(s, "zlib", "zlib1g-dev", "ZLIB");
		goto fail;
#endif
		break;
	case TITAN_COMPRESSION_ZSTD:
#if TITAN_HAVE_ZSTD
		if (!(s->zd = ZSTD_createDCtx())) {
			rc = titan_error(TITAN_E_NOMEM, "%s: cannot create a zstd context", s->name);
			goto fail;
		}
#else
		rc = not_built(s, "libzstd", "libzstd-dev", "ZSTD");
		goto fail;
#endif
		break;
	}
	*out = s;
	return 0;
fail:
	titan_instream_close(s);
	return rc;
}

void titan_instream_close(struct titan_instream *s)
{
	if (!s)
		return;
	if (s->own_fd && s->fd >= 0)
		close(s->fd);
#if TITAN_HAVE_ZLIB
	if (s->z_init)
		inflateEnd(&s->z);
#endif
#if TITAN_HAVE_ZSTD
	ZSTD_freeDCtx(s->zd);
#endif
	free(s->raw);
	free(s->name);
	free(s);
}

const char *titan_instream_name(const struct titan_instream *s)
{
	return s->name;
}

enum titan_compression titan_instream_compression(const struct titan_instream *s)
{
	return s->comp;
}

int64_t titan_instream_size(const struct titan_instream *s)
{
	return s->size;
}

uint64_t titan_instream_consumed(const struct titan_instream *s)
{
	/* uncompressed: what was handed out; compressed: what was decoded */
	return s->comp == TITAN_COMPRESSION_NONE ? s->produced : raw_pos(s);
}

uint64_t titan_instream_produced(const struct titan_instream *s)
{
	return s->produced;
}

static int truncated(const struct titan_instream *s)
{
	return titan_error(TITAN_E_INVALID, "%s: truncated %s data: the input ends at byte offset "
			   "%llu inside the %s that starts at byte %llu", s->name,
			   titan_compression_name(s->comp), (unsigned long long)s->raw_read,
			   s->comp == TITAN_COMPRESSION_GZIP ? "member" : "frame",
			   (unsigned long long)s->unit_start);
}

#if TITAN_HAVE_ZLIB
/* One inflate call.  Returns bytes produced or an error. */
static int64_t gzip_step(struct titan_instream *s, uint8_t *buf, size_t n)
{
	size_t avail = s->end - s->start;
	int r;

	if (!s->in_unit) {
		/* a new member, or data after the last one that is not gzip */
		while (s->end - s->start < 2 && !s->eof) {
			int64_t k = raw_fill(s);

			if (k < 0)
				return k;
		}
		avail = s->end - s->start;
		if (avail == 0)
			return 0; /* the end, right after a member */
		if (titan_compression_sniff(s->raw + s->start, avail) != TITAN_COMPRESSION_GZIP)
			return titan_error(TITAN_E_INVALID, "%s: corrupt gzip data at byte offset %llu: "
					   "the bytes after the gzip member that ends there are not "
					   "another gzip member", s->name,
					   (unsigned long long)raw_pos(s));
		if (inflateReset(&s->z) != Z_OK)
			return titan_error(TITAN_E_INTERNAL, "%s: inflateReset failed", s->name);
		s->unit_start = raw_pos(s);
		s->in_unit = true;
	}
	s->z.next_in = s->raw + s->start;
	s->z.avail_in = (uInt)avail;
	s->z.next_out = buf;
	s->z.avail_out = (uInt)n;
	r = inflate(&s->z, Z_NO_FLUSH);
	s->start += avail - s->z.avail_in;
	if (r == Z_STREAM_END)
		s->in_unit = false;
	else if (r != Z_OK && r != Z_BUF_ERROR)
		return titan_error(TITAN_E_INVALID, "%s: corrupt gzip data at byte offset %llu "
				   "(member starting at byte %llu): %s", s->name,
				   (unsigned long long)raw_pos(s), (unsigned long long)s->unit_start,
				   s->z.msg ? s->z.msg : r == Z_NEED_DICT ? "needs a preset dictionary" :
				   "inflate failed");
	return (int64_t)(n - s->z.avail_out);
}
#endif

#if TITAN_HAVE_ZSTD
/* zstd reports an error without saying how much of the input it read, so
 * it gets at most ZSTD_FEED bytes a call: the error then names a range that
 * narrow (a block is checked when its last byte arrives). */
#define ZSTD_FEED ((size_t)16 << 10)

static int64_t zstd_step(struct titan_instream *s, uint8_t *buf, size_t n)
{
	size_t avail = s->end - s->start;
	ZSTD_inBuffer in = {s->raw + s->start, avail < ZSTD_FEED ? avail : ZSTD_FEED, 0};
	ZSTD_outBuffer out = {buf, n, 0};
	size_t r;

	if (!s->in_unit && in.size > 0) {
		s->unit_start = raw_pos(s);
		s->in_unit = true;
	}
	r = ZSTD_decompressStream(s->zd, &out, &in);
	if (ZSTD_isError(r))
		return titan_error(TITAN_E_INVALID, "%s: corrupt zstd data between byte offsets %llu "
				   "and %llu (frame starting at byte %llu): %s", s->name,
				   (unsigned long long)raw_pos(s),
				   (unsigned long long)(raw_pos(s) + in.size),
				   (unsigned long long)s->unit_start, ZSTD_getErrorName(r));
	s->start += in.pos;
	if (r == 0) /* a frame ended and everything it holds is out */
		s->in_unit = false;
	return (int64_t)out.pos;
}
#endif

int64_t titan_instream_read(struct titan_instream *s, void *buf, size_t n)
{
	if (n == 0)
		return 0;
	if (s->comp == TITAN_COMPRESSION_NONE) {
		size_t have = s->end - s->start;
		ssize_t k;

		if (have) { /* the bytes read to tell the format */
			if (have > n)
				have = n;
			memcpy(buf, s->raw + s->start, have);
			s->start += have;
			s->produced += have;
			return (int64_t)have;
		}
		if (s->eof)
			return 0;
		do
			k = read(s->fd, buf, n);
		while (k < 0 && errno == EINTR);
		if (k < 0)
			return titan_error(TITAN_E_IO, "cannot read '%s': %s", s->name, strerror(errno));
		if (k == 0)
			s->eof = true;
		s->raw_read += (uint64_t)k;
		s->produced += (uint64_t)k;
		return k;
	}
	for (;;) {
		int64_t got = 0;

		if (!s->pending && s->start == s->end) {
			int64_t k = raw_fill(s);

			if (k < 0)
				return k;
			if (k == 0)
				return s->in_unit ? truncated(s) : 0;
		}
		if (n > (1u << 30))
			n = 1u << 30; /* zlib counts in uInt */
#if TITAN_HAVE_ZLIB
		if (s->comp == TITAN_COMPRESSION_GZIP)
			got = gzip_step(s, buf, n);
#endif
#if TITAN_HAVE_ZSTD
		if (s->comp == TITAN_COMPRESSION_ZSTD)
			got = zstd_step(s, buf, n);
#endif
		if (got < 0)
			return got;
		/* a full buffer may leave decoded bytes inside the codec: ask again
		 * before reading more input */
		s->pending = (size_t)got == n;
		if (got > 0) {
			s->produced += (uint64_t)got;
			return got;
		}
	}
}
