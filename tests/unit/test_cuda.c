/* test_cuda.c — the CUDA layer: clean failure without a driver, and on a
 * GPU the device allocator backend under the tagged allocator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "titan/core.h"
#include "titan/cuda.h"

static int device_count(void)
{
	int n = 0;

	if (!titan_cuda_built() || titan_cuda_device_count(&n) < 0)
		return 0;
	return n;
}

/* Without CUDA in the build, or without a driver/GPU, the calls must fail
 * with a message, never crash: this is what lets tools fall back to CPU. */
static void test_count_or_clean_error(void **state)
{
	int n = -1;
	int rc;

	(void)state;
	titan_error_clear();
	rc = titan_cuda_device_count(&n);
	if (!titan_cuda_built()) {
		assert_int_equal(rc, TITAN_E_UNSUPPORTED);
		assert_non_null(strstr(titan_errmsg(), "without CUDA"));
	} else if (rc < 0) {
		assert_int_equal(rc, TITAN_E_DEVICE);
		assert_int_equal(n, 0);
		assert_non_null(strstr(titan_errmsg(), "cudaGetDeviceCount"));
	} else {
		assert_true(n >= 1);
	}
}

static void test_device_allocator(void **state)
{
	struct titan_mem_backend be;
	struct titan_allocator *a;
	struct titan_mem_stats st;
	struct titan_cuda_device_info info;
	float host[256], back[256];
	void *p;

	(void)state;
	if (device_count() == 0) {
		printf("# skip reason: %s\n", titan_cuda_built() ? "no CUDA device or driver"
								   : "built without CUDA");
		skip();
	}
	assert_int_equal(titan_cuda_device_info(0, &info), 0);
	assert_true(info.total_memory > 0);
	assert_int_equal(titan_cuda_mem_backend(0, &be), 0);
	a = titan_allocator_new("cuda:0", &be);
	assert_non_null(a);
	p = titan_mem_alloc(a, sizeof(host), TITAN_MEM_PARAMS);
	assert_non_null(p);
	for (int i = 0; i < 256; i++)
		host[i] = (float)i * 0.5f;
	assert_int_equal(titan_cuda_memcpy(p, host, sizeof(host)), 0);
	assert_int_equal(titan_cuda_memcpy(back, p, sizeof(back)), 0);
	assert_memory_equal(host, back, sizeof(host));
	/* calloc zeroes device memory through the backend, not a host memset */
	void *z = titan_mem_calloc(a, sizeof(host), TITAN_MEM_GRADS);
	assert_non_null(z);
	assert_int_equal(titan_cuda_memcpy(back, z, sizeof(back)), 0);
	for (int i = 0; i < 256; i++)
		assert_true(back[i] == 0.0f);
	titan_mem_free(a, z);
	titan_mem_get_stats(a, &st);
	assert_int_equal(st.cur[TITAN_MEM_PARAMS], sizeof(host));
	titan_mem_free(a, p);
	titan_mem_get_stats(a, &st);
	assert_int_equal(st.total_cur, 0);
	assert_int_equal(st.peak[TITAN_MEM_PARAMS], sizeof(host));
	titan_allocator_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_count_or_clean_error),
		cmocka_unit_test(test_device_allocator),
	};
	return cmocka_run_group_tests_name("cuda", tests, NULL, NULL);
}
