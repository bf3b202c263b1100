/*
 * isa.c — which compiled path of the CPU kernels runs (cpu_impl.h:
 * TITAN_CPU_DISPATCH): the best the CPU has, chosen once at backend init,
 * or the one TITAN_CPU_ISA names (to compare paths, or to rule one out).
 */
#include "cpu_impl.h"

#include <stdlib.h>
#include <string.h>

enum titan_cpu_isa titan_cpu_isa = TITAN_CPU_ISA_BASE;

static const char *const isa_names[] = {
	[TITAN_CPU_ISA_BASE] = "baseline",
	[TITAN_CPU_ISA_AVX2] = "avx2",
	[TITAN_CPU_ISA_AVX512] = "avx512",
};

const char *titan_cpu_isa_name(enum titan_cpu_isa isa)
{
	return (unsigned)isa < sizeof(isa_names) / sizeof(isa_names[0]) ? isa_names[isa] : "?";
}

enum titan_cpu_isa titan_cpu_isa_best(void)
{
#if TITAN_CPU_MULTI_ISA
	/* the levels GCC's target("arch=x86-64-v3/v4") compile for */
	__builtin_cpu_init();
	if (__builtin_cpu_supports("x86-64-v4"))
		return TITAN_CPU_ISA_AVX512;
	if (__builtin_cpu_supports("x86-64-v3"))
		return TITAN_CPU_ISA_AVX2;
#endif
	return TITAN_CPU_ISA_BASE;
}

int titan_cpu_isa_set(enum titan_cpu_isa isa)
{
	const enum titan_cpu_isa best = titan_cpu_isa_best();

	if ((unsigned)isa > (unsigned)best)
		return titan_error(TITAN_E_UNSUPPORTED,
				   "CPU kernels: the %s path is not available on this CPU (best: %s)",
				   titan_cpu_isa_name(isa), titan_cpu_isa_name(best));
	titan_cpu_isa = isa;
	return 0;
}

int titan_cpu_isa_init(void)
{
	const char *env = getenv("TITAN_CPU_ISA");

	if (!env || !*env)
		return titan_cpu_isa_set(titan_cpu_isa_best());
	for (unsigned i = 0; i < sizeof(isa_names) / sizeof(isa_names[0]); i++)
		if (strcmp(env, isa_names[i]) == 0) {
			int rc = titan_cpu_isa_set((enum titan_cpu_isa)i);
			return rc < 0 ? titan_error(rc, "TITAN_CPU_ISA=%s: the %s path is not available on this CPU (best: %s)",
						     env, env, titan_cpu_isa_name(titan_cpu_isa_best())) : 0;
		}
	return titan_error(TITAN_E_INVALID, "TITAN_CPU_ISA=%s: not a CPU path (baseline, avx2, avx512)",
			   env);
}

/* the best path from the start, for code that runs the kernels without a
 * backend (titan_backend_cpu_init applies TITAN_CPU_ISA) */
__attribute__((constructor)) static void isa_detect(void)
{
	titan_cpu_isa = titan_cpu_isa_best();
}
