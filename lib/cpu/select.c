/*
 * select.c — which OpenBLAS kernel runs titan's GEMMs.
 *
 * OpenBLAS's DYNAMIC_ARCH builds (Debian's, RHEL's, conda's) pick a
 * kernel in a constructor from the CPU's family and model.  A CPU newer
 * than the library falls back to an old kernel: Debian 12's 0.3.21 runs
 * its Prescott (SSE3) kernel on Intel family 6 models 0xB0-0xFF (Raptor
 * Lake, Emerald Rapids: get_coretype falls through to the Pentium 4 case),
 * 31 instead of 150 GFLOP/s on one core of an Emerald Rapids Xeon
 * (docs/performance.md, "The BLAS kernel").  The flags of /proc/cpuinfo
 * say what the CPU can run, whatever its model number:
 *
 *   avx512f + avx512bw + avx512dq + avx512vl (+ avx2, fma) -> SkylakeX
 *   avx2 + fma                                             -> Haswell
 *   avx                                                    -> Sandybridge
 *
 * (SkylakeX, not Cooperlake: their sgemm is the same code, and 0.3.21's
 * OPENBLAS_CORETYPE does not accept "Cooperlake".)  When OpenBLAS runs a
 * kernel of fewer FLOPs per cycle than that, titan sets OPENBLAS_CORETYPE
 * and re-executes itself before anything else happens (OpenBLAS reads the
 * variable only in its constructor; 0.3.21 exports gotoblas_dynamic_init
 * and _quit, but re-initialising a running library under its thread pool
 * and buffers is not an interface it keeps).  A value the user set is
 * never replaced, a build for one target (no DYNAMIC_ARCH) is left alone,
 * and a kernel titan does not know (ARM, a newer name) is kept.  The choice
 * depends only on the flags and the library, so every rank of a job on
 * like nodes makes the same one.
 */
#include "titan/ops.h"

#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if TITAN_HAVE_BLAS
#include <cblas.h>
#endif

/* Set with OPENBLAS_CORETYPE for the re-executed process: the kernel
 * OpenBLAS picked by itself, for the log line. */
#define MARKER "TITAN_BLAS_SELECTED_FROM"

/* The sgemm kernels of OpenBLAS's DYNAMIC_ARCH builds and what they issue
 * per cycle and core in fp32: two FMA pipes x lanes x 2, or one add and
 * one multiply pipe x lanes without FMA (SSE: 2 x 4 = 8). */
static const struct titan_blas_kernel kernels[] = {
	{"SapphireRapids", "AVX-512 FMA", 64, true},
	{"Cooperlake", "AVX-512 FMA", 64, true},
	{"SkylakeX", "AVX-512 FMA", 64, true},
	{"Haswell", "AVX2 FMA", 32, true},
	{"Zen", "AVX2 FMA", 32, true},
	{"Excavator", "AVX2 FMA", 32, true},
	{"Steamroller", "AVX FMA (128-bit pipes)", 16, true},
	{"Piledriver", "AVX FMA (128-bit pipes)", 16, true},
	{"Bulldozer", "AVX (128-bit pipes)", 16, true},
	{"Sandybridge", "AVX", 16, true},
	{"Nehalem", "SSE", 8, true},
	{"Core2", "SSE", 8, true},
	{"Penryn", "SSE", 8, true},
	{"Dunnington", "SSE", 8, true},
	{"Barcelona", "SSE", 8, true},
	{"Atom", "SSE", 8, true},
	{"Prescott", "SSE3", 8, true},
	{"Nano", "SSE", 8, true},
	{"Bobcat", "SSE", 8, true},
	{"Opteron", "SSE", 8, true},
	{"Opteron_SSE3", "SSE3", 8, true},
	{"NeoverseV1", "SVE 256-bit FMA", 32, false},
	{"NeoverseN2", "NEON FMA", 16, false},
	{"NeoverseN1", "NEON FMA", 16, false},
	{"ARMV8", "NEON FMA", 16, false},
	{"CortexA57", "NEON FMA", 16, false},
	{"CortexA72", "NEON FMA", 16, false},
	{"ThunderX2T99", "NEON FMA", 16, false},
};

const struct titan_blas_kernel *titan_blas_kernel_find(const char *core)
{
	for (size_t i = 0; core && i < sizeof(kernels) / sizeof(kernels[0]); i++)
		if (!strcasecmp(core, kernels[i].core))
			return &kernels[i];
	return NULL;
}

static bool has_flag(const char *flags, const char *f)
{
	size_t n = strlen(f);

	for (const char *p = flags; (p = strstr(p, f)) != NULL; p += n)
		if ((p == flags || p[-1] == ' ' || p[-1] == '\t') &&
		    (p[n] == '\0' || p[n] == ' ' || p[n] == '\t' || p[n] == '\n'))
			return true;
	return false;
}

const char *titan_blas_best_for_flags(const char *flags)
{
	if (!flags)
		return NULL;
	if (has_flag(flags, "avx512f") && has_flag(flags, "avx512bw") &&
	    has_flag(flags, "avx512dq") && has_flag(flags, "avx512vl") &&
	    has_flag(flags, "avx2") && has_flag(flags, "fma"))
		return "SkylakeX";
	if (has_flag(flags, "avx2") && has_flag(flags, "fma"))
		return "Haswell";
	if (has_flag(flags, "avx"))
		return "Sandybridge";
	return NULL;
}

static void copy(char *dst, size_t n, const char *s)
{
	snprintf(dst, n, "%s", s ? s : "");
}

void titan_blas_choose(const char *flags, const char *current, const char *user, bool dynamic,
		       struct titan_blas_choice *c)
{
	const struct titan_blas_kernel *cur = titan_blas_kernel_find(current);
	const struct titan_blas_kernel *best = titan_blas_kernel_find(titan_blas_best_for_flags(flags));

	memset(c, 0, sizeof(*c));
	copy(c->core, sizeof(c->core), current);
	copy(c->best, sizeof(c->best), best ? best->core : NULL);
	if (!current) {
		c->how = TITAN_BLAS_NONE;
		return;
	}
	/* slower: a known x86 kernel of fewer FLOPs/cycle than the flags allow */
	c->slower = cur && cur->x86 && best && cur->flops < best->flops;
	if (user && *user) {
		c->how = TITAN_BLAS_USER;
		copy(c->user, sizeof(c->user), user);
	} else if (!dynamic) {
		c->how = TITAN_BLAS_FIXED;
	} else if (c->slower) {
		c->how = TITAN_BLAS_SELECTED;
		copy(c->openblas, sizeof(c->openblas), current);
		copy(c->core, sizeof(c->core), best->core);
		c->slower = false;
	} else {
		c->how = TITAN_BLAS_OWN;
	}
}

/* ---- this process */

static struct {
	bool done, pending, reexecuted;
	struct titan_blas_choice c;
	char version[32];
} self;

static void cpu_flags(char *buf, size_t n)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[8192];

	*buf = '\0';
	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (colon && (!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8))) {
			colon++;
			colon[strcspn(colon, "\n")] = '\0';
			snprintf(buf, n, "%s", colon + strspn(colon, " \t"));
			break;
		}
	}
	if (f)
		fclose(f);
}

/* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." */
static void library(const char **current, bool *dynamic)
{
	*current = NULL;
	*dynamic = false;
#if TITAN_HAVE_BLAS
	{
		const char *cfg = openblas_get_config();

		*current = openblas_get_corename();
		*dynamic = cfg && strstr(cfg, "DYNAMIC_ARCH") != NULL;
		if (cfg && !strncmp(cfg, "OpenBLAS ", 9))
			snprintf(self.version, sizeof(self.version), "%.*s", (int)strcspn(cfg + 9, " "),
				 cfg + 9);
	}
#endif
}

static void decide(void)
{
	char flags[8192];
	const char *current, *from = getenv(MARKER);
	bool dynamic;

	if (self.done)
		return;
	self.done = true;
	cpu_flags(flags, sizeof(flags));
	library(&current, &dynamic);
	if (from && *from && getenv("OPENBLAS_CORETYPE")) {
		/* the re-executed process: OPENBLAS_CORETYPE is titan's */
		titan_blas_choose(flags, current, NULL, dynamic, &self.c);
		self.c.how = TITAN_BLAS_SELECTED;
		copy(self.c.core, sizeof(self.c.core), current);
		copy(self.c.openblas, sizeof(self.c.openblas), from);
		self.c.slower = !titan_blas_kernel_find(current) ||
				(self.c.best[0] && titan_blas_kernel_find(current)->flops <
				 titan_blas_kernel_find(self.c.best)->flops);
		/* the library has read them: the tool's children choose for
		 * themselves */
		unsetenv(MARKER);
		unsetenv("OPENBLAS_CORETYPE");
		self.reexecuted = true;
		return;
	}
	titan_blas_choose(flags, current, getenv("OPENBLAS_CORETYPE"), dynamic, &self.c);
}

bool titan_blas_select_env(void)
{
	if (self.done)
		return false;
	decide();
	if (self.reexecuted || self.c.how != TITAN_BLAS_SELECTED || !*self.c.openblas ||
	    setenv("OPENBLAS_CORETYPE", self.c.core, 1) != 0)
		return false;
	if (setenv(MARKER, self.c.openblas, 1) != 0) {
		unsetenv("OPENBLAS_CORETYPE");
		return false;
	}
	self.pending = true;
	return true;
}

void titan_blas_reexec(char **argv)
{
	if (!self.pending)
		return;
	execv("/proc/self/exe", argv);
	/* still here: go on with OpenBLAS's own kernel */
	self.c.exec_errno = errno;
	self.pending = false;
	unsetenv(MARKER);
	unsetenv("OPENBLAS_CORETYPE");
	self.c.how = TITAN_BLAS_FAILED;
	self.c.slower = true;
	copy(self.c.core, sizeof(self.c.core), self.c.openblas);
}

const struct titan_blas_choice *titan_blas_choice(void)
{
	decide();
	return &self.c;
}

const char *titan_blas_describe(char *buf, size_t n)
{
	return titan_blas_format(titan_blas_choice(), self.version, buf, n);
}

bool titan_blas_warning(char *buf, size_t n)
{
	return titan_blas_warning_for(titan_blas_choice(), buf, n);
}

const char *titan_blas_format(const struct titan_blas_choice *c, const char *version, char *buf,
			      size_t n)
{
	const char *v = version ? version : "";
	const char *sp = *v ? " " : "";

	switch (c->how) {
	case TITAN_BLAS_NONE:
		snprintf(buf, n, "no OpenBLAS in this build (titan's own loops)");
		break;
	case TITAN_BLAS_OWN:
		snprintf(buf, n, "OpenBLAS %s kernel (OpenBLAS's own choice)", c->core);
		break;
	case TITAN_BLAS_SELECTED:
		snprintf(buf, n, "OpenBLAS %s kernel (chosen by titan from the CPU flags; OpenBLAS "
			 "%s%spicked %s)", c->core, v, sp, c->openblas);
		break;
	case TITAN_BLAS_USER:
		if (!strcasecmp(c->user, c->core))
			snprintf(buf, n, "OpenBLAS %s kernel (set by OPENBLAS_CORETYPE)", c->core);
		else
			snprintf(buf, n, "OpenBLAS %s kernel (OPENBLAS_CORETYPE=%.40s, which OpenBLAS "
				 "%s%sdoes not take: its fallback)", c->core, c->user, v, sp);
		break;
	case TITAN_BLAS_FIXED:
		snprintf(buf, n, "OpenBLAS %s kernel (OpenBLAS %s%sbuilt for one target, not "
			 "DYNAMIC_ARCH)", c->core, v, sp);
		break;
	case TITAN_BLAS_FAILED:
		snprintf(buf, n, "OpenBLAS %s kernel (OpenBLAS's own choice: titan's %s could not be "
			 "set, re-executing /proc/self/exe failed: %s)", c->core, c->best,
			 strerror(c->exec_errno));
		break;
	}
	return buf;
}

bool titan_blas_warning_for(const struct titan_blas_choice *c, char *buf, size_t n)
{
	const struct titan_blas_kernel *k = titan_blas_kernel_find(c->core);
	const struct titan_blas_kernel *b = titan_blas_kernel_find(c->best);
	const char *fix;
	char fixbuf[160];

	if (!c->slower || !b)
		return false;
	switch (c->how) {
	case TITAN_BLAS_USER:
		snprintf(fixbuf, sizeof(fixbuf), "unset OPENBLAS_CORETYPE (titan then chooses %s) or "
			 "set it to %s", b->core, b->core);
		fix = fixbuf;
		break;
	case TITAN_BLAS_FIXED:
		fix = "use an OpenBLAS built with DYNAMIC_ARCH=1 (Debian's libopenblas0-pthread) or "
		      "built for this CPU";
		break;
	default:
		snprintf(fixbuf, sizeof(fixbuf), "set OPENBLAS_CORETYPE=%s before starting titan",
			 b->core);
		fix = fixbuf;
		break;
	}
	if (k)
		snprintf(buf, n, "OpenBLAS runs its %s kernel (%s, %d FLOP/cycle per core) on a CPU "
			 "whose flags allow %s (%s, %d): GEMMs up to %dx slower than they can be; %s",
			 k->core, k->isa, k->flops, b->core, b->isa, b->flops, b->flops / k->flops,
			 fix);
	else
		snprintf(buf, n, "OpenBLAS runs its %s kernel on a CPU whose flags allow %s (%s, %d "
			 "FLOP/cycle per core): GEMMs may be slower than they can be; %s", c->core,
			 b->core, b->isa, b->flops, fix);
	return true;
}
