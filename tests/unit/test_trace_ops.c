/*
 * test_trace_ops.c — op-level trace events (lib/trace/ops.c,
 * titan_trace_ops_install): the wrapper table around a fake backend
 * forwards every argument and return code, keeps the backend's NULL
 * entries, name and release, writes one "op" event per call with the
 * op's sizes (and "launch" for a queuing backend), none from another
 * thread and none once removed; a second install is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>

#include "scratch.h"
#include "titan/ops.h"
#include "titan/trace.h"

static int mm_calls;
static int64_t mm_args[3];

static int fake_mm(struct titan_backend *be, float *y, const float *x, const float *w, int64_t n,
		   int64_t in, int64_t out, bool acc)
{
	(void)be, (void)y, (void)x, (void)w, (void)acc;
	mm_calls++;
	mm_args[0] = n, mm_args[1] = in, mm_args[2] = out;
	return n == 0 ? TITAN_E_INVALID : 0;
}

static void *fake_alloc(struct titan_backend *be, size_t bytes, enum titan_mem_tag tag)
{
	(void)be, (void)tag;
	return (void *)(uintptr_t)bytes;
}

static void fake_release(struct titan_backend *be)
{
	(void)be;
}

static const struct titan_backend_ops fake = {
	.name = "fake", .release = fake_release, .matmul_fwd = fake_mm, .buf_alloc = fake_alloc,
};

static int setup(void **state)
{
	(void)state;
	return scratch_setup("test_trace_ops");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_teardown();
}

static char *slurp(const char *path)
{
	static char buf[1 << 16];
	FILE *f = fopen(path, "r");
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int count(const char *s, const char *what)
{
	int k = 0;

	for (; (s = strstr(s, what)); s++)
		k++;
	return k;
}

static void *other_thread(void *be_)
{
	struct titan_backend *be = be_;

	be->ops->matmul_fwd(be, NULL, NULL, NULL, 9, 9, 9, false);
	return NULL;
}

static void test_events(void **state)
{
	struct titan_backend be = {.ops = &fake}, other = {.ops = &fake};
	struct titan_trace *t;
	pthread_t th;
	const char *s;

	(void)state;
	mm_calls = 0;
	assert_int_equal(titan_trace_open(&t, path_of("a.json"), 3, NULL), 0);
	assert_int_equal(titan_trace_ops_install(&be, t, 7, false), 0);
	assert_ptr_not_equal(be.ops, &fake);
	assert_string_equal(be.ops->name, "fake");
	assert_ptr_equal(be.ops->release, fake_release);
	assert_null(be.ops->attention_part_fwd); /* a NULL entry stays NULL */
	assert_null(be.ops->rmsnorm_fwd);
	assert_ptr_not_equal(be.ops->matmul_fwd, fake_mm);
	/* one backend at a time */
	assert_int_equal(titan_trace_ops_install(&other, t, 7, false), TITAN_E_INVALID);
	assert_ptr_equal(other.ops, &fake);

	titan_trace_begin(t, "layer 0 forward", "model", 7);
	assert_int_equal(be.ops->matmul_fwd(&be, NULL, NULL, NULL, 3, 5, 11, false), 0);
	assert_int_equal(be.ops->matmul_fwd(&be, NULL, NULL, NULL, 0, 5, 11, false),
			 TITAN_E_INVALID); /* the inner return code */
	assert_ptr_equal(be.ops->buf_alloc(&be, 640, TITAN_MEM_COMM), (void *)(uintptr_t)640);
	titan_trace_end(t);
	assert_int_equal(mm_calls, 2);
	assert_true(mm_args[0] == 0 && mm_args[1] == 5 && mm_args[2] == 11);
	/* another thread's op is forwarded, not recorded */
	assert_int_equal(pthread_create(&th, NULL, other_thread, &be), 0);
	pthread_join(th, NULL);
	assert_int_equal(mm_calls, 3);
	titan_trace_ops_remove(&other); /* not the one installed: nothing */
	assert_ptr_not_equal(be.ops, &fake);
	titan_trace_ops_remove(&be);
	assert_ptr_equal(be.ops, &fake);
	be.ops->matmul_fwd(&be, NULL, NULL, NULL, 1, 1, 1, false);
	assert_int_equal(titan_trace_close(t), 0);

	s = slurp(path_of("a.json"));
	assert_int_equal(count(s, "\"name\":\"matmul_fwd\",\"cat\":\"op\""), 2);
	assert_int_equal(count(s, "\"pid\":3,\"tid\":0,\"args\":{\"step\":7,\"m\":3,\"n\":11,\"k\":5"),
			 1);
	assert_non_null(strstr(s, "\"args\":{\"step\":7,\"bytes\":640,\"tag\":"));
	assert_null(strstr(s, "\"launch\""));
	assert_null(strstr(s, "\"m\":9"));
	assert_null(strstr(s, "\"m\":1,"));

	/* installed again after a removal, as a queuing (cuda) backend */
	assert_int_equal(titan_trace_open(&t, path_of("b.json"), 0, NULL), 0);
	assert_int_equal(titan_trace_ops_install(&be, t, 1, true), 0);
	be.ops->matmul_fwd(&be, NULL, NULL, NULL, 2, 2, 2, false);
	titan_trace_ops_remove(&be);
	assert_int_equal(titan_trace_close(t), 0);
	s = slurp(path_of("b.json"));
	assert_non_null(strstr(s, "\"m\":2,\"n\":2,\"k\":2,\"launch\":1}"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_events),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
