/*
 * test_device.c — the one GPU peak table (titan_gpu_peak_flops,
 * lib/estimate/device.c): the GPU names titan-train's MFU reads map to the
 * numbers its own table had (torchtitan's get_peak_flops), and
 * titan-estimate's devices carry the bf16 and float8 peaks they had.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "titan/estimate.h"

static void test_names(void **state)
{
	static const struct {
		const char *name;
		double bf16;
	} want[] = {
		{ "NVIDIA H100 80GB HBM3", 989e12 },
		{ "NVIDIA H100 PCIe", 989e12 },
		{ "NVIDIA H200", 989e12 },
		{ "NVIDIA H800", 989e12 },
		{ "NVIDIA H20", 148e12 },
		{ "NVIDIA B200", 2.25e15 },
		{ "NVIDIA A100-SXM4-80GB", 312e12 },
		{ "NVIDIA A800 80GB PCIe", 312e12 },
		{ "NVIDIA L40S", 362e12 },
		{ "NVIDIA GeForce RTX 4090", 0 },
		{ "Tesla V100-SXM2-16GB", 0 },
		{ "", 0 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		assert_true(titan_gpu_peak_flops(want[i].name) == want[i].bf16);
	}
	assert_true(titan_gpu_peak_flops_fp8("NVIDIA H100 80GB HBM3") == 1979e12);
	assert_true(titan_gpu_peak_flops_fp8("NVIDIA B200") == 4500e12);
	assert_true(isnan(titan_gpu_peak_flops_fp8("NVIDIA A100-SXM4-80GB")));
	assert_true(isnan(titan_gpu_peak_flops_fp8("unknown")));
}

static void test_estimate_devices(void **state)
{
	static const struct {
		const char *name;
		double bf16, fp8;
	} want[] = {
		{ "a100-80g", 312e12, NAN },
		{ "h100-80g", 989e12, 1979e12 },
		{ "h200", 989e12, 1979e12 },
		{ "b200", 2250e12, 4500e12 },
		{ "cpu", NAN, NAN },
	};
	struct titan_est_device d;

	(void)state;
	assert_int_equal(titan_est_ndevices(), 5);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		assert_int_equal(titan_est_device_lookup(want[i].name, &d), 0);
		assert_true(isnan(want[i].bf16) ? isnan(d.peak_flops)
						: d.peak_flops == want[i].bf16);
		assert_true(isnan(want[i].fp8) ? isnan(d.peak_flops_fp8)
					       : d.peak_flops_fp8 == want[i].fp8);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_estimate_devices),
	};
	return cmocka_run_group_tests_name("device", tests, NULL, NULL);
}
