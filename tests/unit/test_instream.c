/* test_instream.c — compressed input files (lib/core/instream.c): gzip and
 * zstd told by their first bytes, concatenated members and frames read as
 * one stream, any read size, the byte counts progress uses, and truncated,
 * corrupt and trailing data as errors naming the file and offset; the
 * progress line's format (lib/core/progress.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "titan/core.h"
#include "titan/tok.h"

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

static void buf_add(struct buf *b, const void *p, size_t n)
{
	if (b->n + n + 1 > b->cap) { /* doubling: byte-sized reads stay linear */
		b->cap = 2 * (b->n + n + 1);
		b->p = realloc(b->p, b->cap);
	}
	assert_non_null(b->p);
	memcpy(b->p + b->n, p, n);
	b->n += n;
}

/* ~2 MiB of text that compresses about 4:1 (larger than the 256 KiB read
 * buffer even compressed) */
static struct buf corpus(void)
{
	struct buf b = {0};
	struct titan_rng r;
	static const char *words[] = {"the", "beginning", "God", "created", "heaven", "and",
				      "earth", "\n", "{\"text\": ", "\"", "é", "世界", "light"};

	titan_rng_init(&r, 7, 0);
	while (b.n < (2u << 20)) {
		const char *w = words[titan_rng_below(&r, sizeof(words) / sizeof(words[0]))];

		buf_add(&b, w, strlen(w));
		buf_add(&b, " ", 1);
		if (titan_rng_below(&r, 50) == 0) { /* some incompressible bytes */
			uint8_t x[64];

			for (int i = 0; i < 64; i++)
				x[i] = (uint8_t)titan_rng_u32(&r);
			buf_add(&b, x, sizeof(x));
		}
	}
	return b;
}

static char *write_tmp(const void *data, size_t n)
{
	char *path = strdup("/tmp/titan-instream-XXXXXX");
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, n), (ssize_t)n);
	close(fd);
	return path;
}

/* Read the whole file in reads of `chunk` bytes; returns the error or 0. */
static int read_file(const char *path, size_t chunk, struct buf *out, int64_t *size,
		     uint64_t *consumed)
{
	struct titan_instream *s;
	uint8_t *tmp = malloc(chunk);
	int64_t k;
	int rc = titan_instream_open(path, NULL, &s);

	assert_non_null(tmp);
	out->n = 0;
	if (rc < 0) {
		free(tmp);
		return rc;
	}
	while ((k = titan_instream_read(s, tmp, chunk)) > 0)
		buf_add(out, tmp, (size_t)k);
	if (size)
		*size = titan_instream_size(s);
	if (consumed)
		*consumed = titan_instream_consumed(s);
	if (k == 0)
		assert_int_equal(titan_instream_produced(s), out->n);
	titan_instream_close(s);
	free(tmp);
	return k < 0 ? (int)k : 0;
}

/* The file reads back as `want` with reads of several sizes, and its bytes
 * are all consumed at the end. */
static void expect_content(const void *file, size_t n, const struct buf *want)
{
	static const size_t chunks[] = {1, 7, 4096, 1u << 20};
	char *path = write_tmp(file, n);
	struct buf got = {0};

	for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
		int64_t size;
		uint64_t consumed;

		if (chunks[i] == 1 && want->n > (64u << 10))
			continue; /* byte by byte only on small inputs (time) */
		if (read_file(path, chunks[i], &got, &size, &consumed) != 0)
			fail_msg("chunk %zu: %s", chunks[i], titan_errmsg());
		assert_int_equal(got.n, want->n);
		assert_memory_equal(got.p, want->p, want->n);
		assert_int_equal(size, (int64_t)n);
		assert_int_equal(consumed, n);
	}
	free(got.p);
	unlink(path);
	free(path);
}

/* Reading the file fails with TITAN_E_INVALID and a message holding each
 * of the strings (and the path). */
static void expect_error(const void *file, size_t n, const char *m1, const char *m2)
{
	char *path = write_tmp(file, n);
	struct buf got = {0};

	assert_int_equal(read_file(path, 1u << 16, &got, NULL, NULL), TITAN_E_INVALID);
	if (!strstr(titan_errmsg(), path) || !strstr(titan_errmsg(), m1) ||
	    (m2 && !strstr(titan_errmsg(), m2)))
		fail_msg("message '%s' lacks the path, '%s' or '%s'", titan_errmsg(), m1,
			 m2 ? m2 : "");
	free(got.p);
	unlink(path);
	free(path);
}

static void test_sniff(void **state)
{
	(void)state;
	assert_int_equal(titan_compression_sniff("\x1f\x8b\x08", 3), TITAN_COMPRESSION_GZIP);
	assert_int_equal(titan_compression_sniff("\x28\xb5\x2f\xfd", 4), TITAN_COMPRESSION_ZSTD);
	assert_int_equal(titan_compression_sniff("\x5a\x2a\x4d\x18", 4), TITAN_COMPRESSION_ZSTD);
	assert_int_equal(titan_compression_sniff("\x28\xb5\x2f", 3), TITAN_COMPRESSION_NONE);
	assert_int_equal(titan_compression_sniff("\x1f", 1), TITAN_COMPRESSION_NONE);
	assert_int_equal(titan_compression_sniff("{\"te", 4), TITAN_COMPRESSION_NONE);
	assert_string_equal(titan_compression_name(TITAN_COMPRESSION_ZSTD), "zstd");
}

static void test_plain(void **state)
{
	struct buf c = corpus(), small = {0};

	(void)state;
	expect_content(c.p, c.n, &c);
	buf_add(&small, "ab", 2); /* shorter than any magic */
	expect_content(small.p, small.n, &small);
	small.n = 0;
	expect_content("", 0, &small);
	free(c.p);
	free(small.p);
}

#if TITAN_HAVE_ZLIB
/* One gzip member of p[0..n) appended to out. */
static void gzip_member(struct buf *out, const void *p, size_t n, int level)
{
	z_stream z = {0};
	uLong cap;
	uint8_t *tmp;

	assert_int_equal(deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
			 Z_OK);
	cap = deflateBound(&z, (uLong)n) + 64;
	tmp = malloc(cap);
	z.next_in = (Bytef *)(uintptr_t)p;
	z.avail_in = (uInt)n;
	z.next_out = tmp;
	z.avail_out = (uInt)cap;
	assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
	buf_add(out, tmp, z.total_out);
	deflateEnd(&z);
	free(tmp);
}

static void test_gzip(void **state)
{
	struct buf c = corpus(), gz = {0}, multi = {0}, bad = {0}, empty = {0};
	size_t third;
	char want[96];

	(void)state;
	gzip_member(&gz, c.p, c.n, 6);
	assert_true(gz.n > (256u << 10)); /* more than one read buffer */
	expect_content(gz.p, gz.n, &c);
	/* concatenated members (cat a.gz b.gz), an empty one among them */
	gzip_member(&multi, c.p, 1000, 1);
	gzip_member(&multi, c.p, 0, 9);
	third = multi.n;
	gzip_member(&multi, c.p + 1000, c.n - 1000, 6);
	expect_content(multi.p, multi.n, &c);
	/* only an empty member */
	gzip_member(&empty, "", 0, 6);
	{
		struct buf none = {0};

		expect_content(empty.p, empty.n, &none);
	}
	/* truncated: inside the data, inside the trailer, inside the second member */
	expect_error(gz.p, gz.n / 2, "truncated gzip data", "inside the member that starts at byte 0");
	expect_error(gz.p, gz.n - 3, "truncated gzip data", NULL);
	snprintf(want, sizeof(want), "ends at byte offset %zu inside the member that starts at "
		 "byte %zu", multi.n - 10, third);
	expect_error(multi.p, multi.n - 10, "truncated gzip data", want);
	/* a flipped byte: a corrupt block or a CRC mismatch, with an offset */
	buf_add(&bad, gz.p, gz.n);
	bad.p[gz.n / 3] ^= 0x55;
	expect_error(bad.p, bad.n, "corrupt gzip data at byte offset", "(member starting at byte 0)");
	memcpy(bad.p, gz.p, gz.n);
	bad.p[gz.n - 6] ^= 1; /* the CRC-32 in the trailer */
	expect_error(bad.p, bad.n, "corrupt gzip data at byte offset", "incorrect data check");
	/* data after the last member that is not gzip */
	memcpy(bad.p, gz.p, gz.n);
	buf_add(&bad, "junk\n", 5);
	snprintf(want, sizeof(want), "at byte offset %zu: the bytes after", gz.n);
	expect_error(bad.p, bad.n, want, "not another gzip member");
	free(c.p);
	free(gz.p);
	free(multi.p);
	free(bad.p);
	free(empty.p);
}
#endif

#if TITAN_HAVE_ZSTD
/* One frame with a content checksum, as the zstd tool writes them (without
 * one, a flipped literal byte decodes to wrong bytes undetected). */
static void zstd_frame(struct buf *out, const void *p, size_t n, int level)
{
	size_t cap = ZSTD_compressBound(n), k;
	uint8_t *tmp = malloc(cap);
	ZSTD_CCtx *cx = ZSTD_createCCtx();

	assert_non_null(cx);
	assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cx, ZSTD_c_compressionLevel, level)));
	assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cx, ZSTD_c_checksumFlag, 1)));
	k = ZSTD_compress2(cx, tmp, cap, p, n);
	assert_false(ZSTD_isError(k));
	buf_add(out, tmp, k);
	ZSTD_freeCCtx(cx);
	free(tmp);
}

static void test_zstd(void **state)
{
	struct buf c = corpus(), zs = {0}, multi = {0}, bad = {0};
	/* a skippable frame: magic 0x184D2A53, 4-byte length, payload */
	static const uint8_t skip[] = {0x53, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'a', 'b', 'c'};

	(void)state;
	zstd_frame(&zs, c.p, c.n, 3);
	expect_content(zs.p, zs.n, &c);
	/* skippable frame first, then frames, one empty */
	buf_add(&multi, skip, sizeof(skip));
	zstd_frame(&multi, c.p, 12345, 1);
	zstd_frame(&multi, c.p, 0, 1);
	buf_add(&multi, skip, sizeof(skip));
	zstd_frame(&multi, c.p + 12345, c.n - 12345, 5);
	expect_content(multi.p, multi.n, &c);
	expect_error(zs.p, zs.n / 2, "truncated zstd data", "inside the frame that starts at byte 0");
	expect_error(multi.p, multi.n - 1, "truncated zstd data", "ends at byte offset");
	/* a flipped byte: zstd names no position, the error gives a range of
	 * at most 16 KiB that holds the end of the bad block */
	buf_add(&bad, zs.p, zs.n);
	bad.p[zs.n / 3] ^= 0x55;
	expect_error(bad.p, bad.n, "corrupt zstd data between byte offsets", "frame starting at byte 0");
	memcpy(bad.p, zs.p, zs.n);
	buf_add(&bad, "junk\n", 5);
	expect_error(bad.p, bad.n, "corrupt zstd data between byte offsets", NULL);
	free(c.p);
	free(zs.p);
	free(multi.p);
	free(bad.p);
}
#endif

/* The document reader over compressed input: the same documents, and the
 * file counters progress uses. */
static void test_reader_compressed(void **state)
{
	const char *jsonl = "{\"text\": \"In the beginning\"}\n\n{\"text\": \"God\\ncreated\"}\n";
	struct buf files[3] = {{0}};
	int nfiles = 1;

	(void)state;
	buf_add(&files[0], jsonl, strlen(jsonl));
#if TITAN_HAVE_ZLIB
	gzip_member(&files[nfiles], jsonl, 20, 6);
	gzip_member(&files[nfiles++], jsonl + 20, strlen(jsonl) - 20, 6);
#endif
#if TITAN_HAVE_ZSTD
	zstd_frame(&files[nfiles++], jsonl, strlen(jsonl), 3);
#endif
	for (int i = 0; i < nfiles; i++) {
		struct titan_doc_reader_opts o = {.format = TITAN_DOC_JSONL, .field = "text"};
		char *path = write_tmp(files[i].p, files[i].n);
		struct titan_doc_reader *r = titan_doc_reader_open(path, &o);
		struct titan_doc_segment g;
		struct buf got = {0};
		int rc;

		assert_non_null(r);
		assert_int_equal(titan_doc_reader_compression(r),
				 i == 0 ? TITAN_COMPRESSION_NONE : titan_compression_sniff(files[i].p, 4));
		assert_int_equal(titan_doc_reader_file_size(r), (int64_t)files[i].n);
		while ((rc = titan_doc_reader_next(r, &g)) > 0) {
			buf_add(&got, g.data, g.len);
			buf_add(&got, "|", 1);
		}
		assert_int_equal(rc, 0);
		assert_int_equal(got.n, strlen("In the beginning|God\ncreated|"));
		assert_memory_equal(got.p, "In the beginning|God\ncreated|", got.n);
		assert_int_equal(titan_doc_reader_bytes(r), strlen(jsonl));
		assert_int_equal(titan_doc_reader_file_bytes(r), files[i].n);
		titan_doc_reader_close(r);
		unlink(path);
		free(path);
		free(got.p);
		free(files[i].p);
	}
}

/* The progress line: counts, percentage, rate, ETA, the final 100%. */
static void test_progress(void **state)
{
	struct titan_progress p;
	char *text = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&text, &len);

	(void)state;
	assert_non_null(fp);
	setenv("TITAN_PROGRESS_INTERVAL_MS", "0", 1);
	titan_progress_init(&p, true, "titan-x", "bytes", 4u << 20);
	p.fp = fp;
	p.tty = false;
	titan_progress_update(&p, 1u << 20, "3 docs");
	titan_progress_finish(&p, 4u << 20, "12 docs");
	titan_progress_init(&p, false, "titan-x", "bytes", 100); /* off: nothing */
	p.fp = fp;
	titan_progress_update(&p, 50, NULL);
	titan_progress_finish(&p, 100, NULL);
	titan_progress_init(&p, true, "titan-y", "tensors", 0); /* total unknown */
	p.fp = fp;
	p.tty = true;
	titan_progress_update(&p, 1234567, NULL);
	titan_progress_finish(&p, 2000000, NULL);
	titan_progress_init(&p, true, "titan-z", "tensors", 10); /* a count with a total */
	p.fp = fp;
	p.tty = false;
	titan_progress_update(&p, 5, "x");
	unsetenv("TITAN_PROGRESS_INTERVAL_MS");
	fclose(fp);
	if (!strstr(text, "titan-x: 1.00 MiB / 4.00 MiB (25%), 3 docs, ") ||
	    !strstr(text, " MB/s") ||
	    !strstr(text, "\ntitan-x: 4.00 MiB / 4.00 MiB (100%), 12 docs, ") ||
	    !strstr(text, " elapsed\n\rtitan-y: 1,234,567 tensors, ") ||
	    !strstr(text, "\rtitan-y: 2,000,000 tensors, ") || strstr(text, "titan-y: 1,234,567 /") ||
	    !strstr(text, "\ntitan-z: 5 / 10 tensors (50%), x, ") || !strstr(text, " tensors/s, ETA ") ||
	    text[strlen(text) - 1] != '\n')
		fail_msg("unexpected progress text:\n%s", text);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sniff),
		cmocka_unit_test(test_plain),
#if TITAN_HAVE_ZLIB
		cmocka_unit_test(test_gzip),
#endif
#if TITAN_HAVE_ZSTD
		cmocka_unit_test(test_zstd),
#endif
		cmocka_unit_test(test_reader_compressed),
		cmocka_unit_test(test_progress),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
