/*
 * test_cpu_peak.c — the nominal CPU peak for MFU (titan_cpu_peak_flops,
 * lib/cpu/peak.c): threads x clock x FLOPs/cycle, the clock from the model
 * name of a cpuinfo file, the FLOPs/cycle of the ISA; the same value on
 * every call (the sgemm probe it replaces moved 1.28e11..1.93e11 between
 * runs of one machine); and the choice of OpenBLAS kernel (titan_blas_choose,
 * lib/cpu/select.c) over recorded /proc/cpuinfo flag lines and the kernel
 * names OpenBLAS reports: a fallback is replaced, a right choice kept, a
 * user's OPENBLAS_CORETYPE kept (with a warning when slower), ARM and
 * unknown names left alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
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


/* ---- kernel selection: flag lines as /proc/cpuinfo has them */

/* Intel Xeon, family 6 model 207 class (Sapphire/Emerald Rapids), KVM */
static const char *const XEON_AVX512 =
	"fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
	"sse sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology "
	"nonstop_tsc cpuid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic "
	"movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm abm "
	"3dnowprefetch cpuid_fault fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm "
	"avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw "
	"avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 arat avx512vbmi umip "
	"avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid "
	"cldemote movdiri movdir64b fsrm serialize tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 "
	"arch_capabilities";
/* Intel Core i9-13900K (Raptor Lake): AVX2, no AVX-512; avx_vnni is not avx */
static const char *const RAPTOR_LAKE =
	"fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi "
	"mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon "
	"pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq "
	"dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm sse4_1 sse4_2 x2apic "
	"movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch "
	"cpuid_fault ssbd ibrs ibpb stibp ibrs_enhanced fsgsbase tsc_adjust bmi1 avx2 smep bmi2 "
	"erms invpcid rdseed adx smap clflushopt clwb intel_pt sha_ni xsaveopt xsavec xgetbv1 "
	"xsaves split_lock_detect avx_vnni dtherm ida arat pln pts hwp umip pku ospke waitpkg gfni "
	"vaes vpclmulqdq rdpid movdiri movdir64b fsrm md_clear serialize arch_lbr ibt flush_l1d "
	"arch_capabilities";
/* AMD EPYC 7763 (Zen 3) */
static const char *const ZEN3 =
	"fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
	"sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl "
	"nonstop_tsc cpuid extd_apicid aperfmperf pni pclmulqdq monitor ssse3 fma cx16 pcid sse4_1 "
	"sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy svm extapic "
	"cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce topoext perfctr_core "
	"perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 invpcid_single hw_pstate ssbd mba "
	"ibrs ibpb stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 erms invpcid cqm rdt_a rdseed adx smap "
	"clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total "
	"cqm_mbm_local clzero irperf xsaveerptr rdpru wbnoinvd arat npt lbrv svm_lock nrip_save "
	"tsc_scale vmcb_clean flushbyasid decodeassists pausefilter pfthreshold v_vmsave_vmload "
	"vgif v_spec_ctrl umip pku ospke vaes vpclmulqdq rdpid overflow_recov succor smca";
/* AMD EPYC 9654 (Zen 4): AVX-512, OpenBLAS 0.3.21 picks Cooperlake */
static const char *const ZEN4 =
	"fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
	"sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl "
	"nonstop_tsc cpuid extd_apicid aperfmperf rapl pni pclmulqdq monitor ssse3 fma cx16 pcid "
	"sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy svm extapic "
	"cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce topoext "
	"perfctr_core fsgsbase bmi1 avx2 smep bmi2 erms invpcid cqm rdt_a avx512f avx512dq rdseed "
	"adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec "
	"xgetbv1 xsaves avx512_bf16 clzero irperf xsaveerptr rdpru wbnoinvd amd_ppin cppc arat npt "
	"avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg "
	"avx512_vpopcntdq la57 rdpid overflow_recov succor smca fsrm flush_l1d";
/* Intel Xeon Phi 7250 (Knights Landing): AVX-512 F/CD/ER/PF, no BW/DQ/VL */
static const char *const KNL =
	"fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi "
	"mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc arch_perfmon pebs "
	"bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni pclmulqdq dtes64 monitor "
	"ds_cpl est tm2 ssse3 fma cx16 xtpr pdcm sse4_1 sse4_2 x2apic movbe popcnt "
	"tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch fsgsbase tsc_adjust "
	"bmi1 avx2 smep bmi2 erms avx512f rdseed adx avx512pf avx512er avx512cd xsaveopt dtherm ida "
	"arat pln pts";
/* Intel Xeon X5650 (Westmere): SSE4.2, no AVX */
static const char *const WESTMERE =
	"fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi "
	"mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc arch_perfmon pebs "
	"bts rep_good nopl xtopology nonstop_tsc aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx "
	"smx est tm2 ssse3 cx16 xtpr pdcm pcid dca sse4_1 sse4_2 popcnt aes lahf_lm";
/* Intel Xeon E5-2670 (Sandy Bridge): AVX, no AVX2/FMA */
static const char *const SANDY_BRIDGE =
	"fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi "
	"mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc arch_perfmon pebs "
	"bts rep_good nopl xtopology nonstop_tsc aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx "
	"smx est tm2 ssse3 cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic popcnt "
	"tsc_deadline_timer aes xsave avx lahf_lm";
/* AWS Graviton2 (Neoverse N1): the "Features" line of an ARM cpuinfo */
static const char *const NEOVERSE_N1 =
	"fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop "
	"asimddp ssbs";

static void test_best_for_flags(void **state)
{
	(void)state;
	assert_string_equal(titan_blas_best_for_flags(XEON_AVX512), "SkylakeX");
	assert_string_equal(titan_blas_best_for_flags(ZEN4), "SkylakeX");
	assert_string_equal(titan_blas_best_for_flags(RAPTOR_LAKE), "Haswell");
	assert_string_equal(titan_blas_best_for_flags(ZEN3), "Haswell");
	assert_string_equal(titan_blas_best_for_flags(KNL), "Haswell"); /* no avx512bw/dq/vl */
	assert_string_equal(titan_blas_best_for_flags(SANDY_BRIDGE), "Sandybridge");
	assert_null(titan_blas_best_for_flags(WESTMERE));
	assert_null(titan_blas_best_for_flags(NEOVERSE_N1));
	assert_null(titan_blas_best_for_flags(""));
	assert_null(titan_blas_best_for_flags(NULL));
	/* whole words only: avx_vnni / avx512_bf16 are not avx / avx512bw */
	assert_null(titan_blas_best_for_flags("sse sse2 avx_vnni"));
	assert_string_equal(titan_blas_best_for_flags("avx2 fma avx512f avx512_bf16 avx512dq "
						      "avx512vl"), "Haswell");
}

/* OpenBLAS 0.3.21 picks Prescott on Intel family 6 models 0xB0-0xFF: titan
 * selects the kernel of the flags, and says what OpenBLAS had picked. */
static void test_choose_replaces_a_fallback(void **state)
{
	struct titan_blas_choice c;
	char buf[512];

	(void)state;
	titan_blas_choose(XEON_AVX512, "Prescott", NULL, true, &c);
	assert_int_equal(c.how, TITAN_BLAS_SELECTED);
	assert_string_equal(c.core, "SkylakeX");
	assert_string_equal(c.openblas, "Prescott");
	assert_false(c.slower);
	assert_string_equal(titan_blas_format(&c, "0.3.21", buf, sizeof(buf)),
			    "OpenBLAS SkylakeX kernel (chosen by titan from the CPU flags; OpenBLAS "
			    "0.3.21 picked Prescott)");
	assert_false(titan_blas_warning_for(&c, buf, sizeof(buf)));
	/* an empty user value is no value */
	titan_blas_choose(XEON_AVX512, "Prescott", "", true, &c);
	assert_int_equal(c.how, TITAN_BLAS_SELECTED);
	titan_blas_choose(RAPTOR_LAKE, "Prescott", NULL, true, &c);
	assert_int_equal(c.how, TITAN_BLAS_SELECTED);
	assert_string_equal(c.core, "Haswell");
	titan_blas_choose(XEON_AVX512, "Haswell", NULL, true, &c);
	assert_int_equal(c.how, TITAN_BLAS_SELECTED);
	assert_string_equal(c.core, "SkylakeX");
	titan_blas_choose(KNL, "Sandybridge", NULL, true, &c);
	assert_string_equal(c.core, "Haswell");
	titan_blas_choose(SANDY_BRIDGE, "Prescott", NULL, true, &c);
	assert_string_equal(c.core, "Sandybridge");
}

/* OpenBLAS's own choice is as fast as the flags allow: unchanged. */
static void test_choose_keeps_a_right_choice(void **state)
{
	static const struct {
		const char *const *flags, *core;
	} cases[] = {
		{&XEON_AVX512, "SkylakeX"}, {&XEON_AVX512, "Cooperlake"},
		{&XEON_AVX512, "SapphireRapids"}, {&ZEN4, "Cooperlake"}, {&ZEN3, "Zen"},
		{&RAPTOR_LAKE, "Haswell"}, {&KNL, "Haswell"}, {&SANDY_BRIDGE, "Sandybridge"},
		{&WESTMERE, "Nehalem"}, {&WESTMERE, "Prescott"},
	};
	struct titan_blas_choice c;
	char buf[512];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		titan_blas_choose(*cases[i].flags, cases[i].core, NULL, true, &c);
		assert_int_equal(c.how, TITAN_BLAS_OWN);
		assert_string_equal(c.core, cases[i].core);
		assert_false(c.slower);
		assert_false(titan_blas_warning_for(&c, buf, sizeof(buf)));
	}
	titan_blas_choose(XEON_AVX512, "SkylakeX", NULL, true, &c);
	assert_string_equal(titan_blas_format(&c, "0.3.21", buf, sizeof(buf)),
			    "OpenBLAS SkylakeX kernel (OpenBLAS's own choice)");
}

/* OPENBLAS_CORETYPE set by the user is never replaced; a slower one warns,
 * naming the speed lost and the fix. */
static void test_choose_keeps_the_user_value(void **state)
{
	struct titan_blas_choice c;
	char buf[512];

	(void)state;
	titan_blas_choose(XEON_AVX512, "Haswell", "Haswell", true, &c);
	assert_int_equal(c.how, TITAN_BLAS_USER);
	assert_string_equal(c.core, "Haswell");
	assert_true(c.slower);
	assert_string_equal(titan_blas_format(&c, "0.3.21", buf, sizeof(buf)),
			    "OpenBLAS Haswell kernel (set by OPENBLAS_CORETYPE)");
	assert_true(titan_blas_warning_for(&c, buf, sizeof(buf)));
	assert_non_null(strstr(buf, "Haswell kernel (AVX2 FMA, 32 FLOP/cycle per core)"));
	assert_non_null(strstr(buf, "SkylakeX (AVX-512 FMA, 64)"));
	assert_non_null(strstr(buf, "up to 2x slower"));
	assert_non_null(strstr(buf, "unset OPENBLAS_CORETYPE"));
	titan_blas_choose(XEON_AVX512, "Prescott", "prescott", true, &c);
	assert_int_equal(c.how, TITAN_BLAS_USER);
	assert_string_equal(c.core, "Prescott");
	assert_true(titan_blas_warning_for(&c, buf, sizeof(buf)));
	assert_non_null(strstr(buf, "up to 8x slower"));
	/* the user's value as fast as the flags allow: no warning */
	titan_blas_choose(XEON_AVX512, "SkylakeX", "SkylakeX", true, &c);
	assert_int_equal(c.how, TITAN_BLAS_USER);
	assert_false(c.slower);
	assert_false(titan_blas_warning_for(&c, buf, sizeof(buf)));
	/* a name OpenBLAS does not take: it runs its fallback, and says so */
	titan_blas_choose(XEON_AVX512, "Cooperlake", "Bogus", true, &c);
	assert_int_equal(c.how, TITAN_BLAS_USER);
	assert_non_null(strstr(titan_blas_format(&c, "0.3.21", buf, sizeof(buf)),
			       "OPENBLAS_CORETYPE=Bogus, which OpenBLAS 0.3.21 does not take"));
}

/* ARM, kernels titan does not know, builds for one target, no OpenBLAS:
 * nothing to choose. */
static void test_choose_leaves_the_rest_alone(void **state)
{
	struct titan_blas_choice c;
	char buf[512];

	(void)state;
	titan_blas_choose(NEOVERSE_N1, "NeoverseN1", NULL, true, &c);
	assert_int_equal(c.how, TITAN_BLAS_OWN);
	assert_string_equal(c.core, "NeoverseN1");
	assert_string_equal(c.best, "");
	assert_false(c.slower);
	titan_blas_choose(NEOVERSE_N1, "ARMV8", NULL, true, &c);
	assert_int_equal(c.how, TITAN_BLAS_OWN);
	assert_string_equal(c.core, "ARMV8");
	/* a name of a newer OpenBLAS, or "Unknown": left as it is */
	titan_blas_choose(XEON_AVX512, "Unknown", NULL, true, &c);
	assert_int_equal(c.how, TITAN_BLAS_OWN);
	assert_string_equal(c.core, "Unknown");
	assert_false(c.slower);
	titan_blas_choose(XEON_AVX512, "GraniteRapids", NULL, true, &c);
	assert_int_equal(c.how, TITAN_BLAS_OWN);
	/* not DYNAMIC_ARCH: OPENBLAS_CORETYPE does nothing; a slower target warns */
	titan_blas_choose(XEON_AVX512, "Haswell", NULL, false, &c);
	assert_int_equal(c.how, TITAN_BLAS_FIXED);
	assert_string_equal(c.core, "Haswell");
	assert_true(c.slower);
	assert_true(titan_blas_warning_for(&c, buf, sizeof(buf)));
	assert_non_null(strstr(buf, "DYNAMIC_ARCH"));
	titan_blas_choose(XEON_AVX512, NULL, NULL, true, &c);
	assert_int_equal(c.how, TITAN_BLAS_NONE);
	assert_false(titan_blas_warning_for(&c, buf, sizeof(buf)));
	/* a re-execution that failed: OpenBLAS's kernel, the warning and the fix */
	titan_blas_choose(XEON_AVX512, "Prescott", NULL, true, &c);
	c.how = TITAN_BLAS_FAILED;
	c.exec_errno = ENOENT;
	c.slower = true;
	snprintf(c.core, sizeof(c.core), "%s", c.openblas);
	assert_non_null(strstr(titan_blas_format(&c, "0.3.21", buf, sizeof(buf)),
			       "OpenBLAS Prescott kernel (OpenBLAS's own choice: titan's SkylakeX"));
	assert_true(titan_blas_warning_for(&c, buf, sizeof(buf)));
	assert_non_null(strstr(buf, "set OPENBLAS_CORETYPE=SkylakeX before starting titan"));
}

/* The peak follows the kernel that runs, not the CPU: Prescott is SSE3 at
 * 8 FLOP/cycle (it was "not in the table" and counted as AVX2's 32), and
 * Zen 4's AVX-512 goes through 256-bit pipes. */
static void test_peak_follows_the_kernel(void **state)
{
	char *p = write_cpuinfo("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
				"model\t\t: 207\nmodel name\t: Intel(R) Xeon(R) Platinum 8581C CPU @ "
				"2.30GHz\nflags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512bw "
				"avx512dq avx512vl\n");
	struct titan_cpu_peak a;

	(void)state;
	assert_int_equal(titan_cpu_peak_flops_for(p, "Prescott", 2, &a), 0);
	assert_int_equal(a.flops_per_cycle, 8);
	assert_string_equal(a.isa, "SSE3");
	assert_string_equal(a.kernel, "OpenBLAS Prescott kernel");
	assert_true(a.flops == 2 * 2.3e9 * 8);
	assert_int_equal(titan_cpu_peak_flops_for(p, "SkylakeX", 2, &a), 0);
	assert_int_equal(a.flops_per_cycle, 64);
	assert_string_equal(a.isa, "AVX-512 FMA");
	assert_true(a.flops == 2.944e11); /* the 2-core figure */
	assert_int_equal(titan_cpu_peak_flops_for(p, "Haswell", 1, &a), 0);
	assert_int_equal(a.flops_per_cycle, 32);
	unlink(p);
	p = write_cpuinfo("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n"
			  "model\t\t: 17\nmodel name\t: AMD EPYC 9654 96-Core Processor\n"
			  "cpu MHz\t\t: 2400.000\nflags\t\t: fpu avx fma avx2 avx512f avx512bw "
			  "avx512dq avx512vl\n");
	assert_int_equal(titan_cpu_peak_flops_for(p, "Cooperlake", 1, &a), 0);
	assert_int_equal(a.flops_per_cycle, 32);
	assert_string_equal(a.isa, "AVX-512 FMA (256-bit pipes)");
	assert_int_equal(titan_cpu_peak_flops_for(p, "Zen", 1, &a), 0);
	assert_int_equal(a.flops_per_cycle, 32);
	unlink(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clock_from_model_name),
		cmocka_unit_test(test_this_machine_is_stable),
		cmocka_unit_test(test_clock_without_model_name),
		cmocka_unit_test(test_best_for_flags),
		cmocka_unit_test(test_choose_replaces_a_fallback),
		cmocka_unit_test(test_choose_keeps_a_right_choice),
		cmocka_unit_test(test_choose_keeps_the_user_value),
		cmocka_unit_test(test_choose_leaves_the_rest_alone),
		cmocka_unit_test(test_peak_follows_the_kernel),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
