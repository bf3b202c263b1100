/*
 * test_tfevents.c — the TensorBoard event writer (lib/trace/tfevents.c):
 * the bytes of two records against what python3-protobuf serializes for
 * the same Events with TFRecord framing (made by tests/ref/tfevents_read.py,
 * which shares no code with titan), the file name, an event without
 * scalars, a folder that does not exist.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <unistd.h>

#include "scratch.h"
#include "titan/trace.h"

/* Event{wall_time: 1.5, file_version: "brain.Event:2"}, then Event{wall_time:
 * 2.25, step: 300, summary {value {tag: "loss" simple_value: 0.5} value {tag:
 * "a/b(%)" simple_value: -1}}}, each framed as a TFRecord */
static const unsigned char want[] = {
	0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa3, 0x7f, 0x4b, 0x22,
	0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x1a, 0x0d, 0x62,
	0x72, 0x61, 0x69, 0x6e, 0x2e, 0x45, 0x76, 0x65, 0x6e, 0x74, 0x3a, 0x32,
	0x2a, 0x28, 0x64, 0x6c, 0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0xae, 0x8d, 0x91, 0xf5, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
	0x40, 0x10, 0xac, 0x02, 0x2a, 0x1c, 0x0a, 0x0b, 0x0a, 0x04, 0x6c, 0x6f,
	0x73, 0x73, 0x15, 0x00, 0x00, 0x00, 0x3f, 0x0a, 0x0d, 0x0a, 0x06, 0x61,
	0x2f, 0x62, 0x28, 0x25, 0x29, 0x15, 0x00, 0x00, 0x80, 0xbf, 0xc2, 0x15,
	0x1f, 0x81,
};

static int setup(void **state)
{
	(void)state;
	return scratch_setup("test_tfevents");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_teardown();
}

static void test_bytes(void **state)
{
	struct titan_tfevents *w;
	unsigned char got[256];
	char pat[600], host[256] = "";
	const char *p;
	glob_t g;
	FILE *fp;
	size_t n;
	(void)state;

	assert_int_equal(titan_tfevents_open(&w, dir, 1.5), 0);
	p = titan_tfevents_path(w);
	snprintf(pat, sizeof(pat), "%s/events.out.tfevents.0000000001.", dir);
	assert_memory_equal(p, pat, strlen(pat));
	gethostname(host, sizeof(host) - 1);
	snprintf(pat, sizeof(pat), "%s/events.out.tfevents.0000000001.%s.%lld.", dir, host,
		 (long long)getpid());
	assert_memory_equal(p, pat, strlen(pat));
	/* no scalars: no event */
	assert_int_equal(titan_tfevents_write(w, 7, 2.0), 0);
	titan_tfevents_scalar(w, "loss", 0.5);
	titan_tfevents_scalar(w, "a/b(%)", -1.0);
	assert_int_equal(titan_tfevents_write(w, 300, 2.25), 0);
	fp = fopen(p, "rb");
	assert_non_null(fp);
	n = fread(got, 1, sizeof(got), fp);
	fclose(fp);
	assert_int_equal(n, sizeof(want));
	assert_memory_equal(got, want, sizeof(want));
	assert_int_equal(titan_tfevents_close(w), 0);
	titan_tfevents_close(NULL);
	/* a second writer in the same second gets its own file */
	assert_int_equal(titan_tfevents_open(&w, dir, 1.5), 0);
	assert_int_equal(titan_tfevents_close(w), 0);
	snprintf(pat, sizeof(pat), "%s/events.out.tfevents.*", dir);
	assert_int_equal(glob(pat, 0, NULL, &g), 0);
	assert_int_equal(g.gl_pathc, 2);
	globfree(&g);
}

static void test_missing_folder(void **state)
{
	struct titan_tfevents *w = (void *)1;
	(void)state;

	assert_int_equal(titan_tfevents_open(&w, path_of("nowhere"), 1.0), TITAN_E_IO);
	assert_null(w);
	assert_non_null(strstr(titan_errmsg(), "nowhere/events.out.tfevents."));
	assert_non_null(strstr(titan_errmsg(), "No such file or directory"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_missing_folder),
	};
	return cmocka_run_group_tests_name("tfevents", tests, setup, teardown);
}
