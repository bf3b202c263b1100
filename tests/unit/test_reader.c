/* test_reader.c — document reader: safe cut points, segments that
 * reassemble the documents exactly in every format, and input errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/core.h"
#include "titan/tok.h"

static void test_safe_cut(void **state)
{
	(void)state;
#define CUT(s) titan_doc_safe_cut((const uint8_t *)(s), strlen(s))
	assert_int_equal(CUT(""), 0);
	assert_int_equal(CUT("abc"), 0);
	assert_int_equal(CUT("abc\n"), 0);       /* nothing follows the newline */
	assert_int_equal(CUT("abc\nd"), 4);
	assert_int_equal(CUT("ab\ncd\nef"), 6);  /* the last one */
	assert_int_equal(CUT("ab\ncd\n ef"), 3); /* space after the last newline */
	assert_int_equal(CUT("ab\ncd\n\n"), 3);
	assert_int_equal(CUT("ab\ncd\n\nef"), 3);
	assert_int_equal(CUT("x\n\nA"), 0);      /* whitespace before the newline */
	assert_int_equal(CUT("x\r\nA"), 0);      /* CRLF: GPT-2 keeps \r\n apart */
	assert_int_equal(CUT("x \nA"), 0);
	assert_int_equal(CUT("x\n1\n\xc3\xa9\n-"), 0); /* digit, non-ASCII, punctuation */
	assert_int_equal(CUT("\nZ"), 0);        /* nothing before the newline */
	assert_int_equal(CUT(".\nZ"), 2);
#undef CUT
}

static char *write_tmp(const char *data, size_t n)
{
	char *path = strdup("/tmp/titan-reader-XXXXXX");
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, n), (ssize_t)n);
	close(fd);
	return path;
}

/* Read every segment; check flags and that segments start right after a
 * newline followed by a letter; return documents joined by '\x01'. */
static char *read_all(const char *path, enum titan_doc_format f, size_t seg, int *ndocs,
		      int *nsegs)
{
	struct titan_doc_reader_opts o = {.format = f, .field = "text", .segment_bytes = seg,
					  .cut_documents = true};
	struct titan_doc_reader *r = titan_doc_reader_open(path, &o);
	struct titan_doc_segment g;
	struct titan_bytes out = {0};
	bool in = false;
	int rc;

	assert_non_null(r);
	*ndocs = *nsegs = 0;
	while ((rc = titan_doc_reader_next(r, &g)) > 0) {
		assert_non_null(g.data); /* even when empty: callers pass it to memcpy */
		assert_true(g.doc_start == !in);
		if (!g.doc_start) {
			/* a continuation starts at a letter right after a newline */
			assert_true(out.n > 1 && out.p[out.n - 1] == '\n');
			assert_true(out.p[out.n - 2] > 0x20 && out.p[out.n - 2] < 0x7f);
			assert_true(g.len > 0 && ((g.data[0] | 0x20) >= 'a' && (g.data[0] | 0x20) <= 'z'));
		}
		titan_bytes_append(&out, g.data, g.len);
		(*nsegs)++;
		in = !g.doc_end;
		if (g.doc_end) {
			titan_bytes_append(&out, "\x01", 1);
			(*ndocs)++;
		}
	}
	assert_int_equal(rc, 0);
	assert_false(in);
	titan_doc_reader_close(r);
	titan_bytes_append(&out, "", 1);
	return (char *)out.p;
}

static void test_text_segments(void **state)
{
	size_t n = 3 << 20;
	char *text = malloc(n + 1), *got, *path;
	int docs, segs;

	(void)state;
	/* lines of varying shape; some newlines followed by letters */
	for (size_t i = 0; i < n; i++)
		text[i] = (i % 97 == 96) ? '\n' : (i % 97 == 0 && i % 3 == 0) ? ' ' : (char)('a' + i % 26);
	text[n] = '\0';
	path = write_tmp(text, n);
	for (size_t seg = 64; seg <= (4u << 20); seg *= 16) {
		got = read_all(path, TITAN_DOC_TEXT, seg, &docs, &segs);
		assert_int_equal(docs, 1);
		assert_int_equal(strlen(got), n + 1);
		assert_memory_equal(got, text, n);
		if (seg < n / 4)
			assert_true(segs > 1);
		titan_free(got);
	}
	unlink(path);
	free(path);
	/* a document with no cut point at all is one segment */
	memset(text, 'a', n);
	path = write_tmp(text, n);
	got = read_all(path, TITAN_DOC_TEXT, 4096, &docs, &segs);
	assert_int_equal(segs, 1);
	assert_int_equal(strlen(got), n + 1);
	titan_free(got);
	unlink(path);
	free(path);
	/* an empty file is one empty document */
	path = write_tmp("", 0);
	got = read_all(path, TITAN_DOC_TEXT, 4096, &docs, &segs);
	assert_int_equal(docs, 1);
	assert_string_equal(got, "\x01");
	titan_free(got);
	unlink(path);
	free(path);
	free(text);
}

static void test_lines(void **state)
{
	const char *in = "one\n\ntwo\r\nthree";
	char *path = write_tmp(in, strlen(in)), *got;
	int docs, segs;

	(void)state;
	got = read_all(path, TITAN_DOC_LINES, 0, &docs, &segs);
	assert_int_equal(docs, 4);
	assert_string_equal(got, "one\x01\x01two\x01three\x01");
	titan_free(got);
	unlink(path);
	free(path);
}

/* An empty first document (an empty first line, "text": "") comes with
 * data "", not NULL + 0 (undefined behaviour, found by tests/fuzz/fuzz_docs:
 * the document buffer had never grown). */
static void test_empty_first_document(void **state)
{
	static const struct { enum titan_doc_format f; const char *in, *want; int docs; } cases[] = {
		{TITAN_DOC_LINES, "\none", "\x01one\x01", 2},
		{TITAN_DOC_LINES, "\r\n", "\x01", 1},
		{TITAN_DOC_JSONL, "{\"text\": \"\"}\n{\"text\": \"b\"}\n", "\x01" "b\x01", 2},
	};
	int docs, segs;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *path = write_tmp(cases[i].in, strlen(cases[i].in));
		char *got = read_all(path, cases[i].f, 0, &docs, &segs);

		assert_int_equal(docs, cases[i].docs);
		assert_string_equal(got, cases[i].want);
		titan_free(got);
		unlink(path);
		free(path);
	}
}

static void test_jsonl(void **state)
{
	const char *in = "{\"text\": \"a\\nb\", \"x\": 1}\n  \n{\"x\": 2, \"text\": \"\\u00e9\\u0000z\"}\n";
	char *path = write_tmp(in, strlen(in)), *got;
	int docs, segs;

	(void)state;
	got = read_all(path, TITAN_DOC_JSONL, 0, &docs, &segs);
	assert_int_equal(docs, 2);
	assert_memory_equal(got, "a\nb\x01\xc3\xa9\0z\x01", 9);
	titan_free(got);
	unlink(path);
	free(path);
}

static void expect_error(const char *in, const char *field, const char *msg)
{
	struct titan_doc_reader_opts o = {.format = TITAN_DOC_JSONL, .field = field};
	char *path = write_tmp(in, strlen(in));
	struct titan_doc_reader *r = titan_doc_reader_open(path, &o);
	struct titan_doc_segment g;
	int rc;

	assert_non_null(r);
	while ((rc = titan_doc_reader_next(r, &g)) > 0)
		;
	assert_int_equal(rc, TITAN_E_INVALID);
	if (!strstr(titan_errmsg(), msg) || !strstr(titan_errmsg(), path))
		fail_msg("message '%s' lacks '%s' or the path", titan_errmsg(), msg);
	titan_doc_reader_close(r);
	unlink(path);
	free(path);
}

static void test_jsonl_errors(void **state)
{
	(void)state;
	expect_error("{\"text\": \"ok\"}\n{bad\n", "text", ":2:");
	expect_error("{\"text\": \"ok\"}\n{\"body\": \"x\"}\n", "text", ":2: field 'text' is missing");
	expect_error("{\"text\": 5}\n", "text", ":1: field 'text' is not a string");
	expect_error("[1, 2]\n", "text", ":1: not a JSON object");
}

static void test_missing_file(void **state)
{
	struct titan_doc_reader_opts o = {.format = TITAN_DOC_TEXT};

	(void)state;
	assert_null(titan_doc_reader_open("/nonexistent/x.txt", &o));
	assert_non_null(strstr(titan_errmsg(), "cannot open '/nonexistent/x.txt'"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_safe_cut),
		cmocka_unit_test(test_text_segments),
		cmocka_unit_test(test_lines),
		cmocka_unit_test(test_empty_first_document),
		cmocka_unit_test(test_jsonl),
		cmocka_unit_test(test_jsonl_errors),
		cmocka_unit_test(test_missing_file),
	};
	return cmocka_run_group_tests_name("reader", tests, NULL, NULL);
}
