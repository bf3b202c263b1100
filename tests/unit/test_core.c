/* test_core.c — errors, logging, number parsing and formatting, edit
 * distance, atomic file writes, build facts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "titan/core.h"

static void test_error_record(void **state)
{
	(void)state;
	titan_error_clear();
	assert_string_equal(titan_errmsg(), "");
	int rc = titan_error(TITAN_E_INVALID, "bad value '%s' at %d", "x", 3);
	assert_int_equal(rc, TITAN_E_INVALID);
	const struct titan_error_info *e = titan_error_last();
	assert_int_equal(e->code, TITAN_E_INVALID);
	assert_string_equal(e->msg, "bad value 'x' at 3");
	assert_non_null(strstr(e->file, "test_core.c"));
	assert_string_equal(e->func, "test_error_record");
	assert_true(e->line > 0);
	assert_int_equal(titan_error_prefix("reading '%s'", "f.yaml"), TITAN_E_INVALID);
	assert_string_equal(titan_errmsg(), "reading 'f.yaml': bad value 'x' at 3");
	assert_int_equal(titan_error_exit_status(TITAN_E_INVALID), 2);
	assert_int_equal(titan_error_exit_status(TITAN_E_IO), 1);
	assert_string_equal(titan_strerr(TITAN_E_NOMEM), "out of memory");
	titan_error_clear();
	assert_int_equal(titan_error_last()->code, 0);
}

static void test_error_prefix_truncates(void **state)
{
	char big[2000];

	(void)state;
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	titan_error(TITAN_E_IO, "%s", big);
	titan_error_prefix("ctx");
	assert_int_equal(strlen(titan_errmsg()), sizeof(titan_error_last()->msg) - 1);
	assert_memory_equal(titan_errmsg(), "ctx: aaa", 8);
}

static void test_log_format(void **state)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&buf, &len);

	(void)state;
	titan_log_set_stream(fp);
	titan_log_set_level(TITAN_LOG_INFO);
	titan_log_info("hello %d", 42);
	titan_log_debug("hidden");
	titan_set_rank(3);
	titan_log_warn("ranked");
	titan_set_rank(-1);
	titan_log_set_stream(NULL);
	fclose(fp);
	/* [titan] YYYY-MM-DD HH:MM:SS,mmm - root - INFO - hello 42 (torchtitan's) */
	char *l1 = buf, *l2 = strchr(buf, '\n') + 1;
	assert_memory_equal(l1, "[titan] ", 8);
	assert_int_equal(l1[12], '-');
	assert_int_equal(l1[27], ',');
	assert_non_null(strstr(l1, " - root - INFO - hello 42\n"));
	assert_null(strstr(buf, "hidden"));
	assert_memory_equal(l2, "[rank3]:[titan] ", 16);
	assert_non_null(strstr(l2, " - root - WARNING - ranked\n"));
	free(buf);
	/* the head alone (titan-train's step lines), and cut to a small buffer */
	{
		char h[96], small[12];
		size_t n = titan_log_head(h, sizeof(h), TITAN_LOG_INFO);

		assert_int_equal(n, strlen(h));
		assert_memory_equal(h, "[titan] ", 8);
		assert_int_equal(h[27], ',');
		assert_string_equal(h + 32, "- root - INFO - ");
		assert_int_equal(titan_log_head(small, sizeof(small), TITAN_LOG_INFO), 11);
		assert_string_equal(small, "[titan] 202");
	}

	enum titan_log_level l;
	assert_int_equal(titan_log_parse_level("debug", &l), 0);
	assert_int_equal(l, TITAN_LOG_DEBUG);
	assert_int_equal(titan_log_parse_level("WARN", &l), 0);
	assert_int_equal(l, TITAN_LOG_WARN);
	assert_int_equal(titan_log_parse_level("loud", &l), TITAN_E_INVALID);
}

static void test_parse_numbers(void **state)
{
	int64_t i;
	uint64_t u;
	double d;

	(void)state;
	assert_int_equal(titan_parse_i64("-42", &i), 0);
	assert_int_equal(i, -42);
	assert_int_equal(titan_parse_i64("9223372036854775807", &i), 0);
	assert_int_equal(i, INT64_MAX);
	assert_int_equal(titan_parse_i64("9223372036854775808", &i), TITAN_E_INVALID);
	assert_int_equal(titan_parse_i64("", &i), TITAN_E_INVALID);
	assert_int_equal(titan_parse_i64(" 1", &i), TITAN_E_INVALID);
	assert_int_equal(titan_parse_i64("1 ", &i), TITAN_E_INVALID);
	assert_int_equal(titan_parse_i64("12abc", &i), TITAN_E_INVALID);
	assert_int_equal(titan_parse_i64("2.5", &i), TITAN_E_INVALID);
	assert_int_equal(titan_parse_u64("18446744073709551615", &u), 0);
	assert_true(u == UINT64_MAX);
	assert_int_equal(titan_parse_u64("-1", &u), TITAN_E_INVALID);
	assert_int_equal(titan_parse_double("8e-4", &d), 0);
	assert_true(d == 8e-4);
	assert_int_equal(titan_parse_double("1e999", &d), TITAN_E_INVALID);
	assert_int_equal(titan_parse_double("fast", &d), TITAN_E_INVALID);
	assert_int_equal(titan_parse_double("", &d), TITAN_E_INVALID);
	assert_int_equal(titan_parse_size("512", &u), 0);
	assert_true(u == 512);
	assert_int_equal(titan_parse_size("4K", &u), 0);
	assert_true(u == 4096);
	assert_int_equal(titan_parse_size("16MiB", &u), 0);
	assert_true(u == 16u << 20);
	assert_int_equal(titan_parse_size("2G", &u), 0);
	assert_true(u == 2ull << 30);
	assert_int_equal(titan_parse_size("3X", &u), TITAN_E_INVALID);
	assert_int_equal(titan_parse_size("99999999999T", &u), TITAN_E_INVALID);
}

/* Strings from files made safe to print: controls, C1 and bytes that are
 * not UTF-8 as \xHH, the rest as it is; cut at whole escapes. */
static void test_str_escape(void **state)
{
	char b[64], small[8];

	(void)state;
	assert_string_equal(titan_str_escape(b, sizeof(b), "layers.0.wq"), "layers.0.wq");
	assert_string_equal(titan_str_escape(b, sizeof(b), NULL), "");
	assert_string_equal(titan_str_escape(b, sizeof(b), "a\x1b[31mb\x07"), "a\\x1b[31mb\\x07");
	assert_string_equal(titan_str_escape(b, sizeof(b), "t\tn\nd\x7f"), "t\\x09n\\x0ad\\x7f");
	/* UTF-8 stays; C1 (U+009B, CSI) and lone / overlong / surrogate bytes do not */
	assert_string_equal(titan_str_escape(b, sizeof(b), "caf\xc3\xa9 \xe2\x82\xac"),
			    "caf\xc3\xa9 \xe2\x82\xac");
	assert_string_equal(titan_str_escape(b, sizeof(b), "\xc2\x9b" "2J"), "\\xc2\\x9b2J");
	assert_string_equal(titan_str_escape(b, sizeof(b), "\x9b\xff\xc0\xaf"),
			    "\\x9b\\xff\\xc0\\xaf");
	assert_string_equal(titan_str_escape(b, sizeof(b), "\xed\xa0\x80"), "\\xed\\xa0\\x80");
	assert_string_equal(titan_str_escape(b, sizeof(b), "\xf0\x9f\x98\x80!"), "\xf0\x9f\x98\x80!");
	assert_string_equal(titan_str_escape(b, sizeof(b), "\xe2\x82"), "\\xe2\\x82");
	/* flags: a message keeps its lines; a quoted value escapes quotes */
	assert_string_equal(titan_str_escapen(b, sizeof(b), "a\n\tb\x1b", 5, TITAN_ESC_KEEP_LINES),
			    "a\n\tb\\x1b");
	assert_string_equal(titan_str_escapen(b, sizeof(b), "\"q\\\n", 4, TITAN_ESC_QUOTE),
			    "\\\"q\\\\\\n");
	/* an embedded NUL with a length */
	assert_string_equal(titan_str_escapen(b, sizeof(b), "a\0b", 3, 0), "a\\x00b");
	/* cut at a whole escape, always terminated */
	assert_string_equal(titan_str_escape(small, sizeof(small), "abcd\x1b" "e"), "abcd");
	assert_string_equal(titan_str_escape(small, sizeof(small), "abcdefghij"), "abcdefg");
	assert_string_equal(titan_str_escape(small, 1, "abc"), "");
	/* error messages and log lines go through it */
	titan_error(TITAN_E_FORMAT, "'%s': bad", "x\x1b[2J\x9b");
	assert_string_equal(titan_errmsg(), "'x\\x1b[2J\\x9b': bad");
}

static void test_format(void **state)
{
	char b[64];

	(void)state;
	assert_string_equal(titan_format_bytes(b, sizeof(b), 512), "512 B");
	assert_string_equal(titan_format_bytes(b, sizeof(b), 1536), "1.50 KiB");
	assert_string_equal(titan_format_bytes(b, sizeof(b), 3.0 * (1 << 30)), "3.00 GiB");
	assert_string_equal(titan_format_grouped(b, sizeof(b), 0), "0");
	assert_string_equal(titan_format_grouped(b, sizeof(b), 999.4), "999");
	assert_string_equal(titan_format_grouped(b, sizeof(b), 1234567), "1,234,567");
	assert_string_equal(titan_format_grouped(b, sizeof(b), -1234), "-1,234");
	assert_string_equal(titan_format_grouped(b, sizeof(b), 100000), "100,000");
	assert_string_equal(titan_format_double(b, sizeof(b), 8e-4), "0.0008");
	assert_string_equal(titan_format_double(b, sizeof(b), 0.1), "0.1");
	assert_string_equal(titan_format_double(b, sizeof(b), 500000), "500000");
	assert_string_equal(titan_format_double(b, sizeof(b), NAN), "nan");
	/* exact round trip for awkward values */
	const double vals[] = {1.0 / 3.0, 2.0 / 3.0, 1e-300, 5e-324, 1.7976931348623157e308,
			       0.1 + 0.2, 3.0e-4, 1.5e-4};
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		titan_format_double(b, sizeof(b), vals[i]);
		assert_true(strtod(b, NULL) == vals[i]);
	}
}

static void test_edit_distance(void **state)
{
	(void)state;
	assert_int_equal(titan_edit_distance("", ""), 0);
	assert_int_equal(titan_edit_distance("steps", "steps"), 0);
	assert_int_equal(titan_edit_distance("stpes", "steps"), 1); /* transposition */
	assert_int_equal(titan_edit_distance("step", "steps"), 1);
	assert_int_equal(titan_edit_distance("kitten", "sitting"), 3);
	assert_int_equal(titan_edit_distance("", "abc"), 3);
}

static void test_write_file_atomic(void **state)
{
	char dir[] = "/tmp/titan-test-XXXXXX", path[256];
	char buf[64] = {0};
	FILE *fp;
	struct stat st;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/out.txt", dir);
	assert_int_equal(titan_write_file_atomic(path, "hello\n", 6), 0);
	fp = fopen(path, "r");
	assert_non_null(fp);
	assert_int_equal(fread(buf, 1, sizeof(buf), fp), 6);
	fclose(fp);
	assert_string_equal(buf, "hello\n");
	assert_int_equal(stat(path, &st), 0);
	assert_true((st.st_mode & 0777) == (0666 & ~(mode_t)022) || (st.st_mode & 0644) == 0644);
	/* overwrite keeps a complete file and leaves no temporary behind */
	assert_int_equal(titan_write_file_atomic(path, "bye\n", 4), 0);
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	assert_int_equal(n, 1);
	/* a folder that does not exist: error naming the path, nothing created */
	snprintf(path, sizeof(path), "%s/missing/out.txt", dir);
	assert_int_equal(titan_write_file_atomic(path, "x", 1), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "missing/out.txt"));
	snprintf(path, sizeof(path), "%s/out.txt", dir);
	unlink(path);
	rmdir(dir);
}

static void test_afile(void **state)
{
	char dir[] = "/tmp/titan-afile-XXXXXX", path[256];
	struct titan_afile f;
	DIR *d;
	struct dirent *e;
	int n = 0;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/out.bin", dir);
	/* discarded: nothing under the name, no temporary left */
	assert_int_equal(titan_afile_open(&f, path), 0);
	fputs("partial", f.fp);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(titan_afile_close(&f, TITAN_E_INVALID), TITAN_E_INVALID);
	d = opendir(dir);
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	assert_int_equal(n, 0);
	/* committed */
	assert_int_equal(titan_afile_open(&f, path), 0);
	fputs("whole", f.fp);
	assert_int_equal(titan_afile_close(&f, 0), 0);
	FILE *fp = fopen(path, "r");
	char buf[16] = {0};
	assert_non_null(fp);
	assert_int_equal(fread(buf, 1, sizeof(buf), fp), 5);
	fclose(fp);
	assert_string_equal(buf, "whole");
	/* "-" is standard output */
	assert_int_equal(titan_afile_open(&f, "-"), 0);
	assert_ptr_equal(f.fp, stdout);
	assert_int_equal(titan_afile_close(&f, 0), 0);
	/* a folder that does not exist */
	snprintf(path, sizeof(path), "%s/no/out.bin", dir);
	assert_int_equal(titan_afile_open(&f, path), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "no/out.bin"));
	snprintf(path, sizeof(path), "%s/out.bin", dir);
	unlink(path);
	rmdir(dir);
}

static void test_timer(void **state)
{
	struct titan_timer t = {0};

	(void)state;
	uint64_t a = titan_time_ns();
	titan_timer_start(&t);
	usleep(2000);
	uint64_t d = titan_timer_stop(&t);
	assert_true(d >= 2000000);
	assert_true(t.total_ns == d && t.count == 1);
	assert_true(titan_time_ns() > a);
	assert_int_equal(titan_timer_stop(&t), 0); /* not running */
	assert_true(titan_unix_time_ns() > 1700000000ull * 1000000000ull);
}

static void test_build_facts(void **state)
{
	(void)state;
	assert_true(strlen(titan_version()) > 0);
	assert_true(strlen(titan_git_revision()) > 0);
	const char *f = titan_features();
	assert_non_null(strstr(f, "cuda"));
	assert_non_null(strstr(f, "openblas"));
	assert_int_equal(titan_has_feature("hdf5"), strstr(f, "+hdf5 ") != NULL);
	assert_false(titan_has_feature("no-such-feature"));
	assert_false(titan_has_feature("hdf")); /* whole names only */
}

static void test_map_file(void **state)
{
	char dir[] = "/tmp/titan-map-XXXXXX", path[64];
	const void *m;
	size_t n;
	FILE *fp;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/f", dir);
	assert_int_equal(titan_map_file(path, &m, &n), TITAN_E_IO); /* missing */
	assert_non_null(strstr(titan_errmsg(), "cannot open"));
	assert_int_equal(titan_map_file(dir, &m, &n), TITAN_E_IO);  /* a folder */
	assert_non_null(strstr(titan_errmsg(), "not a regular file"));
	fp = fopen(path, "wb");
	assert_non_null(fp);
	fclose(fp);
	assert_int_equal(titan_map_file(path, &m, &n), 0);         /* empty */
	assert_null(m);
	assert_int_equal(n, 0);
	titan_unmap_file(m, n);
	fp = fopen(path, "wb");
	fputs("hello", fp);
	fclose(fp);
	assert_int_equal(titan_map_file(path, &m, &n), 0);
	assert_int_equal(n, 5);
	assert_memory_equal(m, "hello", 5);
	titan_unmap_file(m, n);
	unlink(path);
	/* a FIFO: refused at once, not waited on for a writer (issue 21) */
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(titan_map_file(path, &m, &n), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "not a regular file (a FIFO)"));
	assert_int_equal(titan_check_regular(path), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "not a regular file (a FIFO)"));
	unlink(path);
	rmdir(dir);
}

/* titan_create_nofollow: a symbolic link at the name is replaced by a
 * regular file; the file it pointed at is untouched (issue 21). */
static void test_create_nofollow(void **state)
{
	char dir[] = "/tmp/titan-nofollow-XXXXXX", path[64], target[64], buf[32] = "";
	FILE *fp;
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
	snprintf(target, sizeof(target), "%s/outside", dir);
	fp = fopen(target, "wb");
	fputs("precious", fp);
	fclose(fp);
	assert_int_equal(symlink(target, path), 0);
	titan_log_set_level(TITAN_LOG_ERROR); /* the warning */
	assert_int_equal(titan_create_nofollow(path, O_WRONLY | O_TRUNC, &fd), 0);
	titan_log_set_level(TITAN_LOG_INFO);
	assert_int_equal(write(fd, "new", 3), 3);
	close(fd);
	fp = fopen(target, "rb");
	assert_int_equal(fread(buf, 1, sizeof(buf) - 1, fp), 8);
	fclose(fp);
	assert_string_equal(buf, "precious");
	struct stat st;
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_size, 3);
	/* a regular file is opened as it is (appended here) */
	assert_int_equal(titan_create_nofollow(path, O_WRONLY | O_APPEND, &fd), 0);
	assert_int_equal(write(fd, "+", 1), 1);
	close(fd);
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_size, 4);
	/* a hard link to the outside file: replaced too when truncating */
	unlink(path);
	assert_int_equal(link(target, path), 0);
	titan_log_set_level(TITAN_LOG_ERROR);
	assert_int_equal(titan_create_nofollow(path, O_WRONLY | O_TRUNC, &fd), 0);
	titan_log_set_level(TITAN_LOG_INFO);
	close(fd);
	assert_int_equal(lstat(target, &st), 0);
	assert_int_equal(st.st_size, 8);
	assert_int_equal(st.st_nlink, 1);
	/* a FIFO in the way is refused, not opened */
	unlink(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(titan_create_nofollow(path, O_WRONLY, &fd), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "a FIFO is in the way"));
	unlink(path);
	unlink(target);
	rmdir(dir);
}

static void test_path_join(void **state)
{
	char out[32];

	(void)state;
	/* os.path.join: an absolute part wins, no doubled or trailing slash */
	assert_int_equal(titan_path_join(out, sizeof(out), "mm2", "/abs/ckpt"), 0);
	assert_string_equal(out, "/abs/ckpt");
	assert_int_equal(titan_path_join(out, sizeof(out), "mm2", "ckpt"), 0);
	assert_string_equal(out, "mm2/ckpt");
	assert_int_equal(titan_path_join(out, sizeof(out), "mm2/", "ckpt/"), 0);
	assert_string_equal(out, "mm2/ckpt");
	assert_int_equal(titan_path_join(out, sizeof(out), "mm2//", "./tb"), 0);
	assert_string_equal(out, "mm2/tb");
	assert_int_equal(titan_path_join(out, sizeof(out), "/", "x"), 0);
	assert_string_equal(out, "/x");
	assert_int_equal(titan_path_join(out, sizeof(out), "out", ""), 0);
	assert_string_equal(out, "out");
	assert_int_equal(titan_path_join(out, sizeof(out), "", "a/b"), 0);
	assert_string_equal(out, "a/b");
	assert_int_equal(titan_path_join(out, sizeof(out), "./outputs", "/"), 0);
	assert_string_equal(out, "/");
	assert_int_equal(titan_path_join(out, 8, "outputs", "checkpoint"), TITAN_E_INVALID);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_error_record),
		cmocka_unit_test(test_error_prefix_truncates),
		cmocka_unit_test(test_log_format),
		cmocka_unit_test(test_parse_numbers),
		cmocka_unit_test(test_str_escape),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_edit_distance),
		cmocka_unit_test(test_write_file_atomic),
		cmocka_unit_test(test_afile),
		cmocka_unit_test(test_timer),
		cmocka_unit_test(test_build_facts),
		cmocka_unit_test(test_map_file),
		cmocka_unit_test(test_create_nofollow),
		cmocka_unit_test(test_path_join),
	};
	setenv("TITAN_LOG_TIME", "1", 1);
	return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
