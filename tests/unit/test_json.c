/*
 * test_json.c — the streaming JSON writer: exact text of nested documents,
 * validity and value round trip through jansson (doubles bit-exact),
 * escaping of every control character, invalid UTF-8 replaced by U+FFFD,
 * non-finite numbers as null, write_line and its errors, misuse asserts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "titan/core.h"

static json_t *parse(const char *text)
{
	json_error_t err;
	json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
	if (!v)
		fail_msg("jansson rejects %s: %s at %d", text, err.text, err.position);
	return v;
}

static void test_nested_exact(void **state)
{
	struct titan_json j;
	(void)state;

	titan_json_init(&j);
	assert_string_equal(titan_json_str(&j), "");
	titan_json_object_begin(&j);
	titan_json_key(&j, "name");
	titan_json_string(&j, "titan");
	titan_json_key(&j, "step");
	titan_json_int(&j, 12);
	titan_json_key(&j, "loss");
	titan_json_double(&j, 2.5);
	titan_json_key(&j, "ok");
	titan_json_bool(&j, true);
	titan_json_key(&j, "bad");
	titan_json_bool(&j, false);
	titan_json_key(&j, "none");
	titan_json_null(&j);
	titan_json_key(&j, "list");
	titan_json_array_begin(&j);
	titan_json_int(&j, 1);
	titan_json_int(&j, -2);
	titan_json_double(&j, 3.25);
	titan_json_array_begin(&j);
	titan_json_array_end(&j);
	titan_json_object_begin(&j);
	titan_json_object_end(&j);
	titan_json_string(&j, "");
	titan_json_array_end(&j);
	titan_json_key(&j, "obj");
	titan_json_object_begin(&j);
	titan_json_key(&j, "a");
	titan_json_object_begin(&j);
	titan_json_key(&j, "");
	titan_json_array_begin(&j);
	titan_json_bool(&j, true);
	titan_json_string(&j, NULL);
	titan_json_array_end(&j);
	titan_json_object_end(&j);
	titan_json_object_end(&j);
	titan_json_key(&j, "u");
	titan_json_uint(&j, UINT64_MAX);
	titan_json_key(&j, "i");
	titan_json_int(&j, INT64_MIN);
	titan_json_object_end(&j);

	const char *want =
		"{\"name\":\"titan\",\"step\":12,\"loss\":2.5,\"ok\":true,\"bad\":false,"
		"\"none\":null,\"list\":[1,-2,3.25,[],{},\"\"],"
		"\"obj\":{\"a\":{\"\":[true,null]}},"
		"\"u\":18446744073709551615,\"i\":-9223372036854775808}";
	assert_string_equal(titan_json_str(&j), want);
	assert_int_equal(j.len, strlen(want));

	/* jansson stops at INT64_MAX: blank out the uint64 before parsing. */
	char *copy = strdup(titan_json_str(&j));
	memcpy(strstr(copy, "18446744073709551615"), "1                   ", 20);
	json_t *v = parse(copy);
	free(copy);
	assert_string_equal(json_string_value(json_object_get(v, "name")), "titan");
	assert_int_equal(json_integer_value(json_object_get(v, "step")), 12);
	assert_true(json_real_value(json_object_get(v, "loss")) == 2.5);
	assert_true(json_is_true(json_object_get(v, "ok")));
	assert_true(json_is_null(json_object_get(v, "none")));
	assert_int_equal(json_array_size(json_object_get(v, "list")), 6);
	assert_true(json_integer_value(json_object_get(v, "i")) == INT64_MIN);
	json_decref(v);

	/* A scalar alone is a document too. */
	titan_json_reset(&j);
	titan_json_int(&j, 7);
	assert_string_equal(titan_json_str(&j), "7");
	titan_json_release(&j);
	titan_json_release(NULL);
}

static void check_double_text(double v, const char *want)
{
	struct titan_json j;
	titan_json_init(&j);
	titan_json_double(&j, v);
	assert_string_equal(titan_json_str(&j), want);
	titan_json_release(&j);
}

static void test_doubles(void **state)
{
	(void)state;
	check_double_text(0.1, "0.1");
	check_double_text(1.0, "1");
	check_double_text(-0.0, "-0");
	check_double_text(1e300, "1e+300");
	check_double_text(-2.5e-7, "-2.5e-07");
	check_double_text(1.0 / 3.0, "0.3333333333333333");
	check_double_text(0.1 + 0.2, "0.30000000000000004");
	check_double_text(NAN, "null");
	check_double_text(INFINITY, "null");
	check_double_text(-INFINITY, "null");

	/* Every finite double survives a trip through the text exactly. */
	struct titan_json j;
	uint64_t x = 0x243F6A8885A308D3ull;
	titan_json_init(&j);
	enum { N = 4000 };
	static double vals[N];
	titan_json_array_begin(&j);
	for (int i = 0; i < N; i++) {
		double v;
		do {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			uint64_t bits = x;
			if (i % 4 == 1)
				bits &= 0x800FFFFFFFFFFFFFull; /* subnormals */
			else if (i % 4 == 2)
				bits = (bits & 0x800FFFFFFFFFFFFFull) | 0x4330000000000000ull;
			memcpy(&v, &bits, sizeof v);
		} while (!isfinite(v));
		if (i == 0)
			v = 5e-324;
		if (i == 4)
			v = 1.7976931348623157e308;
		if (i == 8)
			v = 9007199254740992.0; /* 2^53, written as integer text */
		vals[i] = v;
		titan_json_double(&j, v);
	}
	titan_json_array_end(&j);
	json_t *a = parse(titan_json_str(&j));
	assert_int_equal(json_array_size(a), N);
	for (int i = 0; i < N; i++) {
		double got = json_number_value(json_array_get(a, (size_t)i));
		if (memcmp(&got, &vals[i], sizeof got) != 0 && !(got == 0 && vals[i] == 0))
			fail_msg("double %d: wrote %.17g, read %.17g", i, vals[i], got);
	}
	json_decref(a);
	titan_json_release(&j);
}

static void test_control_chars(void **state)
{
	struct titan_json j;
	char in[40], want[512];
	size_t w = 0;
	(void)state;

	for (int c = 0; c < 32; c++)
		in[c] = (char)c;
	in[32] = '"';
	in[33] = '\\';
	in[34] = '/';
	in[35] = 0x7f;
	want[w++] = '"';
	for (int c = 0; c < 32; c++) {
		const char *e = NULL;
		switch (c) {
		case '\b': e = "\\b"; break;
		case '\t': e = "\\t"; break;
		case '\n': e = "\\n"; break;
		case '\f': e = "\\f"; break;
		case '\r': e = "\\r"; break;
		}
		if (e)
			w += (size_t)sprintf(want + w, "%s", e);
		else
			w += (size_t)sprintf(want + w, "\\u%04x", c);
	}
	w += (size_t)sprintf(want + w, "\\\"\\\\/\x7f\"");

	titan_json_init(&j);
	titan_json_stringn(&j, in, 36);
	assert_string_equal(titan_json_str(&j), want);

	json_t *v = parse(titan_json_str(&j));
	assert_int_equal(json_string_length(v), 36);
	assert_memory_equal(json_string_value(v), in, 36);
	json_decref(v);

	/* Keys are escaped the same way. */
	titan_json_reset(&j);
	titan_json_object_begin(&j);
	titan_json_key(&j, "a\"b\n");
	titan_json_stringn(&j, NULL, 0);
	titan_json_object_end(&j);
	assert_string_equal(titan_json_str(&j), "{\"a\\\"b\\n\":\"\"}");
	titan_json_release(&j);
}

static void check_utf8(const char *in, size_t n, const char *want)
{
	struct titan_json j;
	char quoted[256];

	snprintf(quoted, sizeof quoted, "\"%s\"", want);
	titan_json_init(&j);
	titan_json_stringn(&j, in, n);
	if (strcmp(titan_json_str(&j), quoted) != 0)
		fail_msg("input of %zu bytes: got %s want %s", n, titan_json_str(&j), quoted);
	json_decref(parse(titan_json_str(&j)));
	titan_json_release(&j);
}

#define R "\xEF\xBF\xBD" /* U+FFFD */
#define U(s, want) check_utf8(s, sizeof(s) - 1, want)

static void test_utf8(void **state)
{
	(void)state;
	/* Valid sequences pass through, including the edges of each range. */
	U("caf\xC3\xA9", "caf\xC3\xA9");
	U("\xC2\x80", "\xC2\x80");
	U("\xE2\x82\xAC", "\xE2\x82\xAC");
	U("\xE0\xA0\x80", "\xE0\xA0\x80");
	U("\xED\x9F\xBF", "\xED\x9F\xBF");     /* U+D7FF */
	U("\xEE\x80\x80", "\xEE\x80\x80");     /* U+E000 */
	U("\xEF\xBF\xBF", "\xEF\xBF\xBF");     /* U+FFFF */
	U("\xF0\x90\x80\x80", "\xF0\x90\x80\x80");
	U("\xF0\x9D\x84\x9E", "\xF0\x9D\x84\x9E");
	U("\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF"); /* U+10FFFF */

	/* Each invalid byte becomes one U+FFFD. */
	U("\x80", R);
	U("a\xBFz", "a" R "z");
	U("\xC0\xAF", R R);                     /* overlong '/' */
	U("\xC1\xBF", R R);
	U("\xE0\x80\xAF", R R R);               /* overlong */
	U("\xE0\x9F\xBF", R R R);
	U("\xF0\x8F\xBF\xBF", R R R R);         /* overlong */
	U("\xED\xA0\x80", R R R);               /* surrogate U+D800 */
	U("\xED\xBF\xBF", R R R);               /* surrogate U+DFFF */
	U("\xF4\x90\x80\x80", R R R R);         /* U+110000 */
	U("\xF5\x80\x80\x80", R R R R);
	U("\xF8\x88\x80\x80\x80", R R R R R);
	U("\xFE\xFF", R R);
	U("\xE2\x82", R R);                     /* truncated at the end */
	U("\xE2\x82" "A", R R "A");             /* truncated before ASCII */
	U("\xF0\x9D\x84", R R R);
	U("\xC3" "\xC3\xA9", R "\xC3\xA9");     /* lead then a valid sequence */
	U("\xE2\x82\xAC\x80", "\xE2\x82\xAC" R);

	/* Random bytes always give valid JSON; valid UTF-8 comes back whole. */
	uint64_t x = 88172645463325252ull;
	char buf[64];
	for (int it = 0; it < 5000; it++) {
		size_t n = 0;
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		n = (size_t)(x % sizeof buf);
		for (size_t i = 0; i < n; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			buf[i] = (char)(it & 1 ? (x >> 24) : 0x80 | (x >> 24 & 0x3f) | (x >> 30 & 0x40));
		}
		struct titan_json j;
		titan_json_init(&j);
		titan_json_stringn(&j, buf, n);
		json_t *v = parse(titan_json_str(&j));
		json_t *raw = json_stringn(buf, n); /* NULL when buf is not valid UTF-8 */
		if (raw) {
			assert_int_equal(json_string_length(v), n);
			assert_memory_equal(json_string_value(v), buf, n);
			json_decref(raw);
		}
		json_decref(v);
		titan_json_release(&j);
	}
}

static void test_growth_and_reset(void **state)
{
	struct titan_json j;
	struct titan_mem_stats before, s;
	(void)state;

	titan_mem_get_stats(titan_host_allocator(), &before);
	titan_json_init(&j);
	titan_json_array_begin(&j);
	for (int i = 0; i < 100000; i++)
		titan_json_int(&j, i);
	titan_json_array_end(&j);
	json_t *v = parse(titan_json_str(&j));
	assert_int_equal(json_array_size(v), 100000);
	assert_int_equal(json_integer_value(json_array_get(v, 99999)), 99999);
	json_decref(v);

	/* The buffer is counted under "other" and kept across reset. */
	titan_mem_get_stats(titan_host_allocator(), &s);
	assert_int_equal(s.cur[TITAN_MEM_OTHER] - before.cur[TITAN_MEM_OTHER], (int64_t)j.cap);
	char *buf = j.buf;
	titan_json_reset(&j);
	assert_string_equal(titan_json_str(&j), "");
	titan_json_object_begin(&j);
	titan_json_object_end(&j);
	assert_ptr_equal(j.buf, buf);
	assert_string_equal(titan_json_str(&j), "{}");
	titan_json_release(&j);
	titan_mem_get_stats(titan_host_allocator(), &s);
	assert_int_equal(s.cur[TITAN_MEM_OTHER], before.cur[TITAN_MEM_OTHER]);

	/* 63 levels of nesting are allowed. */
	titan_json_init(&j);
	for (int d = 0; d < 63; d++)
		titan_json_array_begin(&j);
	for (int d = 0; d < 63; d++)
		titan_json_array_end(&j);
	json_decref(parse(titan_json_str(&j)));
	titan_json_release(&j);
}

static void test_write_line(void **state)
{
	struct titan_json j;
	FILE *fp = tmpfile();
	char text[256] = { 0 };
	(void)state;

	assert_non_null(fp);
	titan_json_init(&j);
	for (int step = 1; step <= 3; step++) {
		titan_json_reset(&j);
		titan_json_object_begin(&j);
		titan_json_key(&j, "step");
		titan_json_int(&j, step);
		titan_json_key(&j, "loss");
		titan_json_double(&j, 10.0 / step);
		titan_json_object_end(&j);
		assert_int_equal(titan_json_write_line(&j, fp), 0);
	}
	rewind(fp);
	size_t n = fread(text, 1, sizeof text - 1, fp);
	fclose(fp);
	assert_int_equal(n, strlen(text));
	assert_string_equal(text, "{\"step\":1,\"loss\":10}\n"
				  "{\"step\":2,\"loss\":5}\n"
				  "{\"step\":3,\"loss\":3.3333333333333335}\n");

	/* A stream that cannot be written. */
	FILE *ro = fopen("/proc/self/cmdline", "r");
	assert_non_null(ro);
	titan_error_clear();
	assert_int_equal(titan_json_write_line(&j, ro), TITAN_E_IO);
	assert_int_equal(titan_error_last()->code, TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "JSON"));
	fclose(ro);
	titan_json_release(&j);
}

/* --------------------------------------------------------------- misuse */

static void expect_abort(void (*fn)(struct titan_json *))
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct titan_json j;
		FILE *devnull = freopen("/dev/null", "w", stderr);
		(void)devnull;
		titan_json_init(&j);
		fn(&j);
		_exit(0);
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGABRT);
}

static void value_without_key(struct titan_json *j)
{
	titan_json_object_begin(j);
	titan_json_int(j, 1);
}

static void key_in_array(struct titan_json *j)
{
	titan_json_array_begin(j);
	titan_json_key(j, "k");
}

static void key_at_top(struct titan_json *j) { titan_json_key(j, "k"); }

static void two_keys(struct titan_json *j)
{
	titan_json_object_begin(j);
	titan_json_key(j, "a");
	titan_json_key(j, "b");
}

static void mismatched_end(struct titan_json *j)
{
	titan_json_object_begin(j);
	titan_json_array_end(j);
}

static void end_at_top(struct titan_json *j) { titan_json_object_end(j); }

static void dangling_key(struct titan_json *j)
{
	titan_json_object_begin(j);
	titan_json_key(j, "a");
	titan_json_object_end(j);
}

static void two_documents(struct titan_json *j)
{
	titan_json_int(j, 1);
	titan_json_int(j, 2);
}

static void write_unfinished(struct titan_json *j)
{
	titan_json_array_begin(j);
	titan_json_write_line(j, stderr);
}

static void too_deep(struct titan_json *j)
{
	for (int d = 0; d < 64; d++)
		titan_json_array_begin(j);
}

static void test_misuse_asserts(void **state)
{
	(void)state;
	expect_abort(value_without_key);
	expect_abort(key_in_array);
	expect_abort(key_at_top);
	expect_abort(two_keys);
	expect_abort(mismatched_end);
	expect_abort(end_at_top);
	expect_abort(dangling_key);
	expect_abort(two_documents);
	expect_abort(write_unfinished);
	expect_abort(too_deep);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nested_exact),
		cmocka_unit_test(test_doubles),
		cmocka_unit_test(test_control_chars),
		cmocka_unit_test(test_utf8),
		cmocka_unit_test(test_growth_and_reset),
		cmocka_unit_test(test_write_line),
		cmocka_unit_test(test_misuse_asserts),
	};
	return cmocka_run_group_tests_name("json", tests, NULL, NULL);
}
