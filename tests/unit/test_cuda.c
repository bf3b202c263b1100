/* test_cuda.c — the CUDA layer: clean failure without a driver, and on a
 * GPU the device allocator backend under the tagged allocator and its
 * caching allocator (reuse without cudaMalloc, stats, a real out-of-memory
 * with the device's capacity in the message, empty_cache). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "titan/core.h"
#include "titan/cuda.h"

#define MAX_DEV_PROBE 63 /* a device index no test set up a cache for */

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

static struct titan_caching_stats cstats(void)
{
	struct titan_caching_stats s;

	assert_int_equal(titan_cuda_mem_stats(0, &s), 0);
	return s;
}

static void test_device_caching(void **state)
{
	struct titan_mem_backend be, be2;
	struct titan_caching_stats s0, s;
	struct titan_cuda_device_info info;
	struct titan_allocator *a;
	float host[256], back[256];

	(void)state;
	if (device_count() == 0) {
		struct titan_caching_stats cs;

		if (!titan_cuda_built())
			assert_int_equal(titan_cuda_mem_stats(0, &cs), TITAN_E_UNSUPPORTED);
		printf("# skip reason: %s\n", titan_cuda_built() ? "no CUDA device or driver"
								   : "built without CUDA");
		skip();
	}
	assert_int_equal(titan_cuda_device_info(0, &info), 0);
	assert_int_equal(titan_cuda_mem_backend(0, &be), 0);
	assert_int_equal(titan_cuda_mem_backend(0, &be2), 0);
	assert_ptr_equal(be.ctx, be2.ctx); /* one cache per device */
	assert_true(be.alloc_sets_error);
	assert_int_equal(titan_cuda_mem_stats(MAX_DEV_PROBE, &s), TITAN_E_INVALID);
	a = titan_allocator_new("cuda:0", &be);
	assert_non_null(a);
	s0 = cstats();

	/* a freed block comes back for the same size, without cudaMalloc */
	float *p = titan_mem_alloc(a, sizeof(host), TITAN_MEM_PARAMS);
	assert_non_null(p);
	s = cstats();
	assert_int_equal(s.active, s0.active + 1024);
	assert_int_equal(s.requested, s0.requested + (int64_t)sizeof(host));
	titan_mem_free(a, p);
	int64_t raw = cstats().num_raw_allocs;
	float *q = titan_mem_alloc(a, sizeof(host), TITAN_MEM_PARAMS);
	assert_ptr_equal(q, p);
	assert_int_equal(cstats().num_raw_allocs, raw);
	for (int i = 0; i < 256; i++)
		host[i] = (float)i - 100.0f;
	assert_int_equal(titan_cuda_memcpy(q, host, sizeof(host)), 0);
	assert_int_equal(titan_cuda_memcpy(back, q, sizeof(back)), 0);
	assert_memory_equal(host, back, sizeof(host));

	/* a real out-of-memory: twice the device */
	titan_error_clear();
	assert_null(titan_mem_alloc(a, (size_t)info.total_memory * 2, TITAN_MEM_ACTIVATIONS));
	assert_int_equal(titan_error_last()->code, TITAN_E_NOMEM);
	printf("# %s\n", titan_errmsg());
	assert_non_null(strstr(titan_errmsg(), "'cuda:0' is out of memory"));
	assert_non_null(strstr(titan_errmsg(), "device capacity "));
	assert_non_null(strstr(titan_errmsg(), " is free"));
	s = cstats();
	assert_int_equal(s.num_ooms, s0.num_ooms + 1);
	assert_int_equal(s.num_alloc_retries, s0.num_alloc_retries + 1);
	/* the device still works after it */
	float *r = titan_mem_calloc(a, 3 << 20, TITAN_MEM_GRADS);
	assert_non_null(r);
	assert_int_equal(titan_cuda_memcpy(back, r, sizeof(back)), 0);
	for (int i = 0; i < 256; i++)
		assert_true(back[i] == 0.0f);
	titan_mem_free(a, r);
	titan_mem_free(a, q);

	/* everything freed: empty_cache gives every segment back */
	assert_true(titan_cuda_empty_cache(0) >= 0);
	s = cstats();
	assert_int_equal(s.active, 0);
	assert_int_equal(s.reserved, 0);
	assert_true(s.reserved_peak >= (int64_t)(20 << 20)); /* the 3 MiB block's segment */
	assert_int_equal(titan_cuda_mem_reset_peak(0), 0);
	s = cstats();
	assert_int_equal(s.reserved_peak, 0);
	titan_allocator_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_count_or_clean_error),
		cmocka_unit_test(test_device_allocator),
		cmocka_unit_test(test_device_caching),
	};
	return cmocka_run_group_tests_name("cuda", tests, NULL, NULL);
}
