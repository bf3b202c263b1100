/*
 * test_cpu_peak.c — the nominal CPU peak for MFU (titan_cpu_peak_flops,
 * lib/cpu/peak.c): threads x clock x FLOPs/cycle, the clock from the model
 * name of a cpuinfo file, the FLOPs/cycle of the ISA; the same value on
 * every call (the sgemm probe it replaces moved 1.28e11..1.93e11 between
 * runs of one machine).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/core.h"
#include "titan/ops.h"

static char *write_cpuinfo(const char *text)
{
	static char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/test_cpu_peak.XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

/* An Intel model name carries its nominal clock: 2 x 2.5 GHz x FLOPs/cycle
 * of whatever kernel this build's OpenBLAS runs (or the flags). */
static void test_clock_from_model_name(void **state)
{
	char *p = write_cpuinfo("processor\t: 0\n"
				"model name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\n"
				"cpu MHz\t\t: 3899.999\n"
				"flags\t\t: fpu sse sse2 avx fma avx2 avx512f\n");
	struct titan_cpu_peak a, b;

	(void)state;
	assert_int_equal(titan_cpu_peak_flops(p, 2, &a), 0);
	assert_string_equal(a.clock_from, "model name");
	assert_true(a.clock_hz == 2.5e9);
	assert_int_equal(a.threads, 2);
	assert_true(a.flops_per_cycle == 8 || a.flops_per_cycle == 16 || a.flops_per_cycle == 32 ||
		    a.flops_per_cycle == 64);
	assert_true(a.flops == 2 * 2.5e9 * a.flops_per_cycle);
	assert_string_equal(a.model, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz");
	/* stable: the same answer again, and linear in threads */
	assert_int_equal(titan_cpu_peak_flops(p, 4, &b), 0);
	assert_true(b.flops == 2 * a.flops);
	unlink(p);
}

/* /proc/cpuinfo of this machine: two calls agree to the bit. */
static void test_this_machine_is_stable(void **state)
{
	struct titan_cpu_peak a, b;

	(void)state;
	if (titan_cpu_peak_flops(NULL, 1, &a) < 0)
		skip();
	assert_int_equal(titan_cpu_peak_flops(NULL, 1, &b), 0);
	assert_true(a.flops > 0 && a.flops == b.flops);
	assert_true(a.clock_hz >= 1e8 && a.clock_hz <= 1e10);
	assert_string_equal(a.isa, b.isa);
	print_message("# this CPU: %s, %s, %s, %.3f GHz (%s): %.4g FLOP/s per thread\n", a.model,
		      a.isa, a.kernel, a.clock_hz * 1e-9, a.clock_from, a.flops);
}

/* No model-name clock: "cpu MHz" (a virtual machine has no cpufreq; where
 * sysfs has one, that wins and the value is still a plausible clock). */
static void test_clock_without_model_name(void **state)
{
	char *p = write_cpuinfo("processor\t: 0\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2596.122\n"
				"flags\t\t: fpu avx fma avx2\n");
	struct titan_cpu_peak a;

	(void)state;
	assert_int_equal(titan_cpu_peak_flops(p, 1, &a), 0);
	if (!strcmp(a.clock_from, "cpu MHz in /proc/cpuinfo"))
		assert_true(a.clock_hz == 2596e6); /* rounded to 1 MHz */
	else
		assert_true(a.clock_hz >= 1e8 && a.clock_hz <= 1e10);
	unlink(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clock_from_model_name),
		cmocka_unit_test(test_this_machine_is_stable),
		cmocka_unit_test(test_clock_without_model_name),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
