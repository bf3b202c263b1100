/*
 * test_shard.c — the token shard format (lib/data/shard.c): header round
 * trip, u16/u32 selection, the writer cutting exact shards with the
 * remainder last (across its 4 MiB buffer), first_token_offset and n_docs,
 * nothing under a final name before commit, the reader's checks (magic,
 * newer version, short and truncated files, header and payload CRC, ids
 * >= vocab) and the directory listing (order, gaps, duplicates).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "scratch.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "titan/core.h"
#include "titan/data.h"

static int setup(void **state)
{
	(void)state;
	return scratch_setup("test_shard");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_teardown();
}

static int count_files(bool hidden)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n += (e->d_name[0] == '.') == hidden;
	closedir(d);
	return n;
}

static void write_file(const char *name, const void *data, size_t n)
{
	FILE *f = fopen(path_of(name), "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static struct titan_shard_writer_opts opts(uint64_t shard_tokens, uint32_t vocab)
{
	struct titan_shard_writer_opts o = {
		.shard_tokens = shard_tokens, .vocab_size = vocab,
		.bos_id = 1, .eos_id = 2, .fingerprint = 0x1234567890abcdefull,
	};
	return o;
}

/* ids i*7 % vocab, with EOS (2) every 10th position */
static uint32_t id_at(uint64_t i, uint32_t vocab)
{
	return i % 10 == 9 ? 2 : (uint32_t)((i * 7 + 3) % vocab);
}

static void test_header_round_trip(void **state)
{
	struct titan_shard_header h = {
		.version = 1, .token_bytes = 4, .vocab_size = 128256, .header_bytes = 4096,
		.n_tokens = 123456789012ull, .n_docs = 42, .bos_id = 128000, .eos_id = -1,
		.fingerprint = 0xfeedfacecafebeefull, .payload_crc32c = 0xdeadbeef,
		.shard_index = 7, .split = "val", .first_token_offset = 99,
	}, g;
	uint8_t buf[4096];
	(void)state;

	titan_shard_header_encode(&h, buf);
	assert_memory_equal(buf, "TITANTOK", 8);
	assert_int_equal(buf[8], 1);
	assert_int_equal(buf[20] | buf[21] << 8, 4096);
	assert_int_equal(titan_shard_header_decode(buf, sizeof(buf), "x", &g), 0);
	assert_int_equal(g.vocab_size, 128256);
	assert_int_equal(g.n_tokens, 123456789012ull);
	assert_int_equal(g.bos_id, 128000);
	assert_int_equal(g.eos_id, -1);
	assert_int_equal(g.fingerprint, 0xfeedfacecafebeefull);
	assert_int_equal(g.payload_crc32c, 0xdeadbeef);
	assert_int_equal(g.shard_index, 7);
	assert_string_equal(g.split, "val");
	assert_int_equal(g.first_token_offset, 99);
	/* the tail of the header is zero */
	for (int i = 104; i < 4096; i++)
		assert_int_equal(buf[i], 0);
}

static void test_token_bytes(void **state)
{
	struct titan_shard_writer *w;
	struct titan_shard_writer_opts o = opts(10, 70000);
	char name[64];
	(void)state;

	assert_int_equal(titan_shard_token_bytes_for(1), 2);
	assert_int_equal(titan_shard_token_bytes_for(65536), 2);
	assert_int_equal(titan_shard_token_bytes_for(65537), 4);
	assert_int_equal(titan_shard_token_bytes_for(128256), 4);
	o.token_bytes = 2;
	assert_int_equal(titan_shard_writer_open(dir, "train", &o, &w), TITAN_E_INVALID);
	assert_null(w);
	assert_int_equal(titan_shard_writer_open(dir, "tr-ain", &o, &w), TITAN_E_INVALID);
	assert_int_equal(titan_shard_writer_open(dir, "a_very_long_split", &o, &w), TITAN_E_INVALID);
	o = opts(10, 100);
	o.eos_id = 100;
	assert_int_equal(titan_shard_writer_open(dir, "train", &o, &w), TITAN_E_INVALID);
	assert_string_equal(titan_shard_name(name, sizeof(name), "d", "val", 3), "d/val-00003.tok");
	assert_string_equal(titan_shard_name(name, sizeof(name), "d", "t", 1234567), "d/t-1234567.tok");
	assert_null(titan_shard_name(name, 8, "d", "val", 3));
}

/* Write `total` ids in uneven pieces, commit, read every shard back. */
static void round_trip(uint64_t total, uint64_t shard_tokens, uint32_t vocab,
		       uint32_t want_bytes, uint32_t force_bytes)
{
	struct titan_shard_writer_opts o = opts(shard_tokens, vocab);
	struct titan_shard_writer_stats st;
	struct titan_shard_writer *w;
	const uint64_t nshards = (total + shard_tokens - 1) / shard_tokens;
	uint32_t *ids = malloc(total * sizeof(*ids));
	char **paths;
	size_t n;
	uint64_t at = 0, docs = 0;

	assert_non_null(ids);
	for (uint64_t i = 0; i < total; i++)
		ids[i] = id_at(i, vocab);
	o.token_bytes = force_bytes;
	assert_int_equal(titan_shard_writer_open(dir, "train", &o, &w), 0);
	for (uint64_t i = 0, step = 1; i < total; i += step, step = step * 3 + 1) {
		if (step > total - i)
			step = total - i;
		assert_int_equal(titan_shard_writer_write(w, ids + i, (size_t)step), 0);
	}
	assert_int_equal(titan_shard_writer_finish(w), 0);
	/* complete, but only under hidden temporary names until commit */
	assert_int_equal(count_files(false), 0);
	assert_int_equal(count_files(true), (int)nshards);
	titan_shard_writer_get_stats(w, &st);
	assert_int_equal(st.n_shards, nshards);
	assert_int_equal(st.n_tokens, total);
	assert_int_equal(st.bytes, nshards * 4096 + total * want_bytes);
	assert_int_equal(titan_shard_writer_close(w), 0);
	assert_int_equal(count_files(true), 0);

	assert_int_equal(titan_shard_list(dir, "train", &paths, &n), 0);
	assert_int_equal(n, nshards);
	for (size_t k = 0; k < n; k++) {
		struct titan_shard *s;
		struct titan_shard_header prev;
		uint32_t tb, max_id;
		uint64_t nt, d = 0;
		const void *p;
		char want[256];

		titan_shard_name(want, sizeof(want), dir, "train", k);
		assert_string_equal(paths[k], want);
		assert_int_equal(titan_shard_open(paths[k], &s), 0);
		p = titan_shard_tokens(s, &tb, &nt);
		assert_int_equal(tb, want_bytes);
		assert_int_equal(((uintptr_t)p) % 4096, 0);
		assert_int_equal(nt, k + 1 < n ? shard_tokens : total - (n - 1) * shard_tokens);
		assert_int_equal(s->h.first_token_offset, at);
		assert_int_equal(s->h.shard_index, k);
		assert_int_equal(s->h.fingerprint, 0x1234567890abcdefull);
		assert_int_equal(s->h.bos_id, 1);
		assert_int_equal(s->h.eos_id, 2);
		assert_int_equal(s->file_bytes, 4096 + nt * tb);
		for (uint64_t i = 0; i < nt; i++) {
			uint32_t v = tb == 2 ? ((const uint16_t *)p)[i] : ((const uint32_t *)p)[i];

			if (v != ids[at + i])
				fail_msg("shard %zu token %llu: %u != %u", k, (unsigned long long)i, v,
					 ids[at + i]);
			d += v == 2;
		}
		assert_int_equal(titan_shard_token(s, nt - 1), ids[at + nt - 1]);
		assert_int_equal(s->h.n_docs, d);
		assert_int_equal(titan_shard_verify(s, &max_id), 0);
		assert_true(max_id < vocab);
		if (k > 0)
			assert_int_equal(titan_shard_check_next(&prev, "a", &s->h, "b"), 0);
		prev = s->h;
		at += nt;
		docs += d;
		titan_shard_close(s);
	}
	assert_int_equal(at, total);
	assert_int_equal(docs, st.n_docs);
	titan_shard_list_free(paths, n);
	free(ids);
	teardown(NULL);
	assert_int_equal(mkdir(dir, 0700), 0);
}

static void test_writer_u16(void **state)
{
	(void)state;
	round_trip(30, 7, 1000, 2, 0);     /* 7 7 7 7 2 */
	round_trip(14, 7, 1000, 2, 0);     /* exactly two, no empty third */
	round_trip(5, 100, 65536, 2, 0);   /* one short shard */
	round_trip(30, 7, 1000, 4, 4);     /* u32 forced for a small vocab */
}

static void test_writer_u32_large(void **state)
{
	(void)state;
	/* 10 MB of u32 payload: shards and the 4 MiB buffer cut at different points */
	round_trip(2500000, 1000003, 128256, 4, 0);
	round_trip(3000000, 2900000, 50000, 2, 0);
}

static void test_writer_empty_and_bad_id(void **state)
{
	struct titan_shard_writer_opts o = opts(8, 1000);
	struct titan_shard_writer *w;
	uint32_t ids[20];
	(void)state;

	assert_int_equal(titan_shard_writer_open(dir, "val", &o, &w), 0);
	assert_int_equal(titan_shard_writer_close(w), 0);
	assert_int_equal(count_files(false) + count_files(true), 0);

	for (int i = 0; i < 20; i++)
		ids[i] = (uint32_t)i;
	assert_int_equal(titan_shard_writer_open(dir, "train", &o, &w), 0);
	assert_int_equal(titan_shard_writer_write(w, ids, 10), 0);
	ids[13] = 1000;
	assert_int_equal(titan_shard_writer_write(w, ids + 10, 10), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "token id 1000 at position 13 is >= the vocab size 1000"));
	assert_int_equal(titan_shard_writer_write(w, ids, 1), TITAN_E_INVALID);
	assert_int_equal(titan_shard_writer_close(w), TITAN_E_INVALID);
	/* the complete first shard and the partial one are both gone */
	assert_int_equal(count_files(false) + count_files(true), 0);

	assert_int_equal(titan_shard_writer_open(dir, "train", &o, &w), 0);
	assert_int_equal(titan_shard_writer_write(w, ids, 10), 0);
	titan_shard_writer_discard(w);
	titan_shard_writer_discard(NULL);
	assert_int_equal(count_files(false) + count_files(true), 0);
}

/* A valid two-shard train split in dir; returns the raw bytes of shard 0. */
static size_t make_split(uint8_t *raw, size_t cap)
{
	struct titan_shard_writer_opts o = opts(100, 1000);
	struct titan_shard_writer *w;
	uint32_t ids[150];
	FILE *f;
	size_t n;

	for (int i = 0; i < 150; i++)
		ids[i] = id_at((uint64_t)i, 1000);
	assert_int_equal(titan_shard_writer_open(dir, "train", &o, &w), 0);
	assert_int_equal(titan_shard_writer_write(w, ids, 150), 0);
	assert_int_equal(titan_shard_writer_close(w), 0);
	f = fopen(path_of("train-00000.tok"), "rb");
	n = fread(raw, 1, cap, f);
	fclose(f);
	assert_int_equal(n, 4096 + 200);
	return n;
}

static int open_err(const char *name, const char *want)
{
	struct titan_shard *s = (struct titan_shard *)1;
	int rc = titan_shard_open(path_of(name), &s);

	assert_null(s);
	if (!strstr(titan_errmsg(), want))
		fail_msg("'%s' not in '%s'", want, titan_errmsg());
	assert_non_null(strstr(titan_errmsg(), name));
	return rc;
}

static void test_reader_checks(void **state)
{
	static uint8_t raw[8192], bad[8192];
	struct titan_shard_header h;
	struct titan_shard *s;
	size_t n = make_split(raw, sizeof(raw));
	uint64_t i = 0;
	char want[128];
	(void)state;

	memcpy(bad, raw, n);
	bad[3] ^= 1;
	write_file("magic.tok", bad, n);
	assert_int_equal(open_err("magic.tok", "is not a titan shard"), TITAN_E_FORMAT);
	write_file("empty.tok", bad, 0);
	assert_int_equal(open_err("empty.tok", "is not a titan shard"), TITAN_E_FORMAT);

	memcpy(bad, raw, n);
	bad[8] = 2;
	write_file("newer.tok", bad, n);
	assert_int_equal(open_err("newer.tok", "format version 2 is newer than this titan (1): "
				  "upgrade titan"), TITAN_E_FORMAT);

	write_file("short.tok", raw, 100);
	open_err("short.tok", "file is 100 bytes, shorter than the 4096-byte shard header: truncated?");

	write_file("trunc.tok", raw, n - 3);
	snprintf(want, sizeof(want), "expected %zu bytes", n);
	open_err("trunc.tok", want);
	snprintf(want, sizeof(want), "found %zu: truncated?", n - 3);
	open_err("trunc.tok", want);

	write_file("long.tok", raw, n + 2);
	open_err("long.tok", "trailing bytes?");

	memcpy(bad, raw, n);
	bad[33] ^= 0x10; /* n_docs */
	write_file("hdr.tok", bad, n);
	open_err("hdr.tok", "header checksum mismatch");

	/* payload corruption passes open, fails verify */
	memcpy(bad, raw, n);
	bad[4096 + 77] ^= 0x01;
	write_file("payload.tok", bad, n);
	assert_int_equal(titan_shard_open(path_of("payload.tok"), &s), 0);
	assert_int_equal(titan_shard_verify(s, NULL), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "payload checksum mismatch"));
	assert_non_null(strstr(titan_errmsg(), "payload.tok"));
	titan_shard_close(s);

	/* an id >= vocab behind a valid header CRC (vocab forged down) */
	memcpy(bad, raw, n);
	assert_int_equal(titan_shard_header_decode(bad, n, "x", &h), 0);
	h.vocab_size = 500;
	titan_shard_header_encode(&h, bad);
	write_file("vocab.tok", bad, n);
	assert_int_equal(titan_shard_open(path_of("vocab.tok"), &s), 0);
	assert_int_equal(titan_shard_verify(s, NULL), TITAN_E_FORMAT);
	while (titan_shard_token(s, i) < 500)
		i++;
	snprintf(want, sizeof(want), "token id %u at position %llu is >= the vocab size 500",
		 titan_shard_token(s, i), (unsigned long long)i);
	assert_non_null(strstr(titan_errmsg(), want));
	titan_shard_close(s);

	/* a document count that the payload does not hold (header forged) */
	memcpy(bad, raw, n);
	assert_int_equal(titan_shard_header_decode(bad, n, "x", &h), 0);
	h.n_docs += 1;
	titan_shard_header_encode(&h, bad);
	write_file("docs.tok", bad, n);
	assert_int_equal(titan_shard_open(path_of("docs.tok"), &s), 0);
	assert_int_equal(titan_shard_verify(s, NULL), TITAN_E_FORMAT);
	snprintf(want, sizeof(want), "the header counts %llu documents, the payload holds %llu",
		 (unsigned long long)h.n_docs, (unsigned long long)h.n_docs - 1);
	if (!strstr(titan_errmsg(), want))
		fail_msg("'%s' does not say '%s'", titan_errmsg(), want);
	titan_shard_close(s);

	/* a valid CRC over nonsense fields is still refused */
	memcpy(bad, raw, n);
	assert_int_equal(titan_shard_header_decode(bad, n, "x", &h), 0);
	h.token_bytes = 3;
	titan_shard_header_encode(&h, bad);
	write_file("width.tok", bad, n);
	open_err("width.tok", "token_bytes is 3");

	/* forged fields behind valid CRCs */
	for (int k = 0; k < 5; k++) {
		static const char *const want_msg[] = {
			"bad shard format version 0", "header_bytes is 512", "does not fit 2-byte ids",
			"BOS/EOS ids 1000/2 are outside", "bad split name",
		};
		memcpy(bad, raw, n);
		assert_int_equal(titan_shard_header_decode(bad, n, "x", &h), 0);
		h.version = k == 0 ? 0 : 1;
		h.header_bytes = k == 1 ? 512 : 4096;
		h.vocab_size = k == 2 ? 70000 : 1000;
		h.bos_id = k == 3 ? 1000 : 1;
		strcpy(h.split, k == 4 ? "tr.in" : "train");
		titan_shard_header_encode(&h, bad);
		assert_int_equal(titan_shard_header_decode(bad, n, "forged", &h), TITAN_E_FORMAT);
		if (!strstr(titan_errmsg(), want_msg[k]))
			fail_msg("'%s' not in '%s'", want_msg[k], titan_errmsg());
	}

	/* a damaged payload whose ids also went out of range: the checksum speaks */
	memcpy(bad, raw, n);
	bad[4096 + 1] = 0xff;
	write_file("both.tok", bad, n);
	assert_int_equal(titan_shard_open(path_of("both.tok"), &s), 0);
	assert_int_equal(titan_shard_verify(s, NULL), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "payload checksum mismatch"));
	titan_shard_close(s);

	assert_int_equal(titan_shard_open(path_of("nope.tok"), &s), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "No such file"));
	assert_int_equal(titan_shard_open(dir, &s), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "not a regular file (a folder)"));
	/* a FIFO is refused at once, not waited on for a writer (issue 21) */
	assert_int_equal(mkfifo(path_of("fifo.tok"), 0600), 0);
	assert_int_equal(titan_shard_open(path_of("fifo.tok"), &s), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "not a regular file (a FIFO)"));
	assert_null(s);
	titan_shard_close(NULL);
}

static void test_list(void **state)
{
	static uint8_t raw[8192];
	struct titan_shard *a, *b;
	char **paths;
	size_t n;
	(void)state;

	make_split(raw, sizeof(raw));
	write_file("val-00000.tok", raw, 10);
	write_file("notes.txt", "x", 1);
	write_file(".train-00002.tok.tmp-abc", "x", 1);
	write_file("train.tok", "x", 1);
	write_file("x-y-.tok", "x", 1);
	assert_int_equal(titan_shard_list(dir, NULL, &paths, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(strrchr(paths[0], '/'), "/train-00000.tok");
	assert_string_equal(strrchr(paths[1], '/'), "/train-00001.tok");
	assert_string_equal(strrchr(paths[2], '/'), "/val-00000.tok");
	titan_shard_list_free(paths, n);
	assert_int_equal(titan_shard_list(dir, "val", &paths, &n), 0);
	assert_int_equal(n, 1);
	titan_shard_list_free(paths, n);
	assert_int_equal(titan_shard_list(dir, "test", &paths, &n), 0);
	assert_int_equal(n, 0);
	assert_null(paths);

	/* consecutive shards check; a gap or a duplicate index is an error */
	assert_int_equal(titan_shard_open(path_of("train-00000.tok"), &a), 0);
	assert_int_equal(titan_shard_open(path_of("train-00001.tok"), &b), 0);
	assert_int_equal(titan_shard_check_next(&a->h, "a", &b->h, "b"), 0);
	assert_int_equal(titan_shard_check_next(&b->h, "b", &a->h, "a"), TITAN_E_FORMAT);
	b->h.first_token_offset++;
	assert_int_equal(titan_shard_check_next(&a->h, "a", &b->h, "b"), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "first_token_offset"));
	b->h.fingerprint++;
	assert_int_equal(titan_shard_check_next(&a->h, "a", &b->h, "b"), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "'b' does not follow 'a': tokenizer fingerprints differ"));
	strcpy(b->h.split, "val");
	assert_int_equal(titan_shard_check_next(&a->h, "a", &b->h, "b"), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "split names differ"));
	titan_shard_close(a);
	titan_shard_close(b);

	write_file("train-00003.tok", "x", 1);
	assert_int_equal(titan_shard_list(dir, "train", &paths, &n), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "train-00002.tok is missing"));
	unlink(path_of("train-00003.tok"));
	write_file("train-1.tok", "x", 1);
	assert_int_equal(titan_shard_list(dir, NULL, &paths, &n), TITAN_E_FORMAT);
	assert_non_null(strstr(titan_errmsg(), "same shard index"));
	assert_int_equal(titan_shard_list("/nonexistent-dir", NULL, &paths, &n), TITAN_E_IO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_round_trip),
		cmocka_unit_test_setup_teardown(test_token_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writer_u16, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writer_u32_large, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writer_empty_and_bad_id, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reader_checks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
