/*
 * peak.c — the nominal fp32 peak of this CPU for titan-train's MFU, the
 * CPU counterpart of torchtitan's get_peak_flops (a table of device peaks by
 * name, utils.py), so MFU does not move with a start-up measurement:
 *
 *   peak = threads x clock x FLOPs/cycle/core
 *
 * FLOPs/cycle is what the sgemm kernel OpenBLAS runs can issue
 * (openblas_get_corename; the table is lib/cpu/select.c's, which also
 * chooses the kernel): 2 FMA units x lanes x 2 FLOPs per FMA (AVX-512: 64,
 * AVX2 + FMA: 32, AVX without FMA: 16, SSE: 8 from one add and one multiply
 * pipe, NEON: 16), so on a fallback kernel (Prescott on an AVX-512 CPU) the
 * peak and MFU are those of the kernel that runs, and the log warns.
 * The clock is the nominal one the user can check: the "@ 2.20GHz" of the
 * model name, else the base (or highest non-boost) frequency in sysfs, else
 * "cpu MHz" of /proc/cpuinfo (steady on virtual machines, which have no
 * cpufreq: the host's nominal clock).  docs/
 * performance.md ("MFU on the CPU") states the formula and the table.
 */
#include "titan/ops.h"

#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if TITAN_HAVE_BLAS
#include <cblas.h>
#endif

/* The ISA from the CPU's flags when the kernel name is not in the table
 * (or the build has no OpenBLAS): AVX2 + FMA at most, as OpenBLAS's Haswell
 * kernel is what most builds run on newer CPUs. */
static void isa_from_flags(const char *flags, struct titan_cpu_peak *p)
{
	char buf[8192];
	bool fma = false, avx2 = false, avx = false;

	snprintf(buf, sizeof(buf), " %s ", flags);
	fma = strstr(buf, " fma ") != NULL;
	avx2 = strstr(buf, " avx2 ") != NULL;
	avx = strstr(buf, " avx ") != NULL;
	if (fma && avx2)
		snprintf(p->isa, sizeof(p->isa), "AVX2 FMA"), p->flops_per_cycle = 32;
	else if (avx)
		snprintf(p->isa, sizeof(p->isa), "AVX"), p->flops_per_cycle = 16;
	else if (strstr(buf, " asimd "))
		snprintf(p->isa, sizeof(p->isa), "NEON FMA"), p->flops_per_cycle = 16;
	else
		snprintf(p->isa, sizeof(p->isa), "SSE"), p->flops_per_cycle = 8;
}

/* "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz" -> 2.5e9 */
static double clock_from_model(const char *model)
{
	const char *at = strrchr(model, '@');
	char *end;
	double v;

	if (!at)
		return 0;
	v = strtod(at + 1, &end);
	while (*end == ' ')
		end++;
	if (v <= 0)
		return 0;
	if (!strncasecmp(end, "GHz", 3))
		return v * 1e9;
	if (!strncasecmp(end, "MHz", 3))
		return v * 1e6;
	return 0;
}

static double read_khz(const char *path)
{
	FILE *f = fopen(path, "r");
	double v = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%lf", &v) != 1)
		v = 0;
	fclose(f);
	return v * 1e3;
}

int titan_cpu_peak_flops(const char *cpuinfo, int threads, struct titan_cpu_peak *p)
{
	return titan_cpu_peak_flops_for(cpuinfo, NULL, threads, p);
}

int titan_cpu_peak_flops_for(const char *cpuinfo, const char *core, int threads,
			     struct titan_cpu_peak *p)
{
	FILE *f;
	char line[8192], model[256] = "", flags[8192] = "", vendor[32] = "";
	double mhz = 0;
	long family = -1;
	const struct titan_blas_kernel *k;

	memset(p, 0, sizeof(*p));
	p->threads = threads > 0 ? threads : 1;
	f = fopen(cpuinfo ? cpuinfo : "/proc/cpuinfo", "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':'), *v;

		if (!colon)
			continue;
		v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		v[strcspn(v, "\n")] = '\0';
		if (!model[0] && (!strncmp(line, "model name", 10) || !strncmp(line, "Model name", 10)))
			snprintf(model, sizeof(model), "%s", v);
		else if (mhz == 0 && !strncmp(line, "cpu MHz", 7))
			mhz = strtod(v, NULL);
		else if (!flags[0] && (!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8)))
			snprintf(flags, sizeof(flags), "%s", v);
		else if (!vendor[0] && !strncmp(line, "vendor_id", 9))
			snprintf(vendor, sizeof(vendor), "%s", v);
		else if (family < 0 && !strncmp(line, "cpu family", 10))
			family = strtol(v, NULL, 10);
		if (model[0] && mhz > 0 && flags[0] && vendor[0] && family >= 0)
			break;
	}
	if (f)
		fclose(f);
	snprintf(p->model, sizeof(p->model), "%s", model[0] ? model : "unknown CPU");

	/* the kernel, then its FLOPs per cycle */
#if TITAN_HAVE_BLAS
	if (!core)
		core = openblas_get_corename();
#endif
	if ((k = titan_blas_kernel_find(core)) != NULL) {
		snprintf(p->isa, sizeof(p->isa), "%s", k->isa);
		p->flops_per_cycle = k->flops;
		snprintf(p->kernel, sizeof(p->kernel), "OpenBLAS %s kernel", k->core);
		/* Zen 4 runs AVX-512 in halves on its two 256-bit FMA pipes */
		if (k->flops == 64 && !strcmp(vendor, "AuthenticAMD") && family == 25) {
			snprintf(p->isa, sizeof(p->isa), "AVX-512 FMA (256-bit pipes)");
			p->flops_per_cycle = 32;
		}
	} else {
		isa_from_flags(flags, p);
		snprintf(p->kernel, sizeof(p->kernel), "%s%s%s", core ? "OpenBLAS " : "",
			 core ? core : "from the CPU flags (no OpenBLAS)",
			 core ? " kernel, not in the table: from the CPU flags" : "");
	}

	/* the nominal clock */
	if ((p->clock_hz = clock_from_model(model)) > 0) {
		snprintf(p->clock_from, sizeof(p->clock_from), "model name");
	} else if ((p->clock_hz = read_khz("/sys/devices/system/cpu/cpu0/cpufreq/base_frequency")) > 0) {
		snprintf(p->clock_from, sizeof(p->clock_from), "cpufreq base_frequency");
	} else if ((p->clock_hz = read_khz("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")) > 0) {
		snprintf(p->clock_from, sizeof(p->clock_from), "cpufreq cpuinfo_max_freq");
	} else if (mhz > 0) { /* virtual machines: the host's nominal clock */
		p->clock_hz = mhz * 1e6;
		snprintf(p->clock_from, sizeof(p->clock_from), "cpu MHz in /proc/cpuinfo");
	} else {
		return titan_error(TITAN_E_UNSUPPORTED, "no CPU clock in /proc/cpuinfo or "
				   "/sys/devices/system/cpu/cpu0/cpufreq: set metrics.peak_flops");
	}
	/* MHz are printed with 3 decimals by Linux: round to 1 MHz so runs
	 * agree to the last digit */
	p->clock_hz = (double)(long long)(p->clock_hz / 1e6 + 0.5) * 1e6;
	p->flops = (double)p->threads * p->clock_hz * p->flops_per_cycle;
	return 0;
}
