/*
 * fuzz_instream.c — compressed inputs (lib/core/instream.c): gzip members
 * and zstd frames told by their magic bytes, read through titan_instream
 * as titan-tokenize, titan-shard and the corpus reader read them.
 *
 * Input: byte 0 chooses the mode, byte 1 the read size, bytes 2-3 a
 * position; the rest is P.
 *   mode & 3 == 0  P is the file as it is (a stream with or without a
 *                  magic, whatever the mutations made of it)
 *   mode & 3 == 1  P gzip-compressed by zlib, in one member or (mode & 4)
 *                  two, split at the position
 *   mode & 3 == 2  P zstd-compressed with a content checksum, in one frame
 *                  or (mode & 4) two
 *   mode & 3 == 3  as 1, with a zstd frame after the gzip member: a mixed
 *                  file, which must be refused or read whole, never
 *                  misread
 * then (modes 1-3) mode & 8 flips a byte of the compressed file at the
 * position, mode & 16 cuts the file there.
 * Oracles: a read never crashes, returns at most what was asked and counts
 * what it returned (titan_instream_produced); a plain file reads back as
 * itself; an intact compressed file reads back as P exactly; a damaged one
 * is an error or reads back as P (gzip's CRC-32 and zstd's checksum catch
 * a changed payload), never other bytes; a cut single member/frame is an
 * error; two members cut past the first read back as the first's part of P.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"       /* TITAN_HAVE_ZLIB, TITAN_HAVE_ZSTD (build/fuzz/config.h) */
#include "fuzz.h"
#include "titan/core.h"

#if TITAN_HAVE_ZLIB
#include <zlib.h>
#endif
#if TITAN_HAVE_ZSTD
#include <zstd.h>
#endif

struct buf {
	uint8_t *p;
	size_t n, cap;
};

static void put(struct buf *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		if (!(b->p = realloc(b->p, b->cap)))
			abort();
	}
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

#if TITAN_HAVE_ZLIB
static void gzip_member(struct buf *b, const uint8_t *p, size_t n)
{
	z_stream z;
	uint8_t out[4096];
	int rc;

	memset(&z, 0, sizeof(z));
	if (deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		abort();
	z.next_in = (Bytef *)(uintptr_t)p;
	z.avail_in = (uInt)n;
	do {
		z.next_out = out;
		z.avail_out = sizeof(out);
		rc = deflate(&z, Z_FINISH);
		put(b, out, sizeof(out) - z.avail_out);
	} while (rc == Z_OK);
	if (rc != Z_STREAM_END)
		abort();
	deflateEnd(&z);
}
#endif

#if TITAN_HAVE_ZSTD
static void zstd_frame(struct buf *b, const uint8_t *p, size_t n)
{
	ZSTD_CCtx *c = ZSTD_createCCtx();
	size_t cap = ZSTD_compressBound(n), got;
	uint8_t *out = malloc(cap);

	if (!c || !out)
		abort();
	ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 3);
	ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
	got = ZSTD_compress2(c, out, cap, p, n);
	if (ZSTD_isError(got))
		abort();
	put(b, out, got);
	free(out);
	ZSTD_freeCCtx(c);
}
#endif

/* Read the whole file through titan_instream in reads of `chunk`: 0 and
 * the bytes in *out, or the error. */
static int read_all(const char *path, size_t chunk, struct buf *out)
{
	struct titan_instream *s;
	uint8_t *tmp = malloc(chunk);
	int64_t got;
	int rc;

	if (!tmp)
		abort();
	if ((rc = titan_instream_open(path, NULL, &s)) < 0) {
		free(tmp);
		return rc;
	}
	while ((got = titan_instream_read(s, tmp, chunk)) > 0) {
		if ((size_t)got > chunk)
			abort();
		put(out, tmp, (size_t)got);
		if (titan_instream_produced(s) != out->n)
			abort();
	}
	titan_instream_close(s);
	free(tmp);
	return got < 0 ? (int)got : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t chunks[] = {1, 3, 7, 64, 4096, 65536, 1 << 20};
	struct buf file = {0}, got = {0};
	const char *path = fuzz_path("in");
	uint8_t mode;
	size_t chunk, pos, n;
	const uint8_t *p;
	bool damaged = false, cut_single = false, unknown = false;
	int rc;

	if (size < 4)
		return 0;
	mode = data[0];
	chunk = chunks[data[1] % (sizeof(chunks) / sizeof(chunks[0]))];
	pos = (size_t)data[2] | (size_t)data[3] << 8;
	p = data + 4;
	n = size - 4;
	switch (mode & 3) {
	case 0:
		put(&file, p, n);
		break;
#if TITAN_HAVE_ZLIB
	case 1:
	case 3:
		if (mode & 4) {
			gzip_member(&file, p, pos % (n + 1));
			gzip_member(&file, p + pos % (n + 1), n - pos % (n + 1));
		} else {
			gzip_member(&file, p, n);
		}
#if TITAN_HAVE_ZSTD
		if ((mode & 3) == 3)
			zstd_frame(&file, p, 0);
#endif
		break;
#endif
#if TITAN_HAVE_ZSTD
	case 2:
		if (mode & 4) {
			zstd_frame(&file, p, pos % (n + 1));
			zstd_frame(&file, p + pos % (n + 1), n - pos % (n + 1));
		} else {
			zstd_frame(&file, p, n);
		}
		break;
#endif
	default:
		return 0; /* a build without the library: nothing to compress with */
	}
	if ((mode & 3) && file.n) {
		if (mode & 8) {
			file.p[pos % file.n] ^= (uint8_t)(data[3] | 1);
			damaged = true;
			/* a changed magic makes another format (plain text) */
			unknown = pos % file.n < 4;
		}
		if (mode & 16) {
			file.n = pos % file.n;
			damaged = true;
			cut_single = !(mode & 4) && (mode & 3) != 3;
			/* shorter than a magic: plain text (or empty) */
			unknown = unknown || file.n < 4;
		}
	}
	fuzz_write(path, file.p, file.n);
	rc = read_all(path, chunk, &got);
	if ((mode & 3) == 0) {
		/* plain: itself; with a magic at the front, whatever the decoder
		 * makes of it, but no crash */
		bool magic = file.n >= 2 && file.p[0] == 0x1f && file.p[1] == 0x8b;

		magic = magic || (file.n >= 4 && file.p[1] == 0xb5 && file.p[2] == 0x2f &&
				  file.p[3] == 0xfd);
		magic = magic || (file.n >= 4 && (file.p[0] & 0xf0) == 0x50 && file.p[1] == 0x2a &&
				  file.p[2] == 0x4d && file.p[3] == 0x18);
		if (!magic && (rc != 0 || got.n != file.n || (file.n && memcmp(got.p, file.p, file.n))))
			abort();
	} else if (unknown) {
		/* no longer a compressed file: anything but a crash */
	} else if (rc == 0) {
		/* compressed: P itself, damaged or not (the gzip + empty zstd
		 * file too); a cut single member or frame never reads as whole */
		if (cut_single)
			abort();
		/* a file of two members cut at or after the end of the first is
		 * a whole one-member file: it reads back as the first part */
		if (got.n != n && !((mode & 16) && (mode & 4) && got.n == pos % (n + 1)))
			abort();
		if (got.n && memcmp(got.p, p, got.n))
			abort();
	} else if (!damaged && (mode & 3) != 3) {
		abort(); /* an intact file refused */
	}
	free(file.p);
	free(got.p);
	return 0;
}
