/*
 * fuzz_memprof.c — the inputs of titan-memprof: memory traces (*.memtrace,
 * lib/memprof/memtrace.c, replay.c) and Chrome trace JSON
 * (lib/memprof/spans.c, as lib/trace writes it), found and put on one time
 * base by tools/memprof/inputs.c, which this harness compiles in.
 *
 * Input: files split at FUZZ_SEPARATOR, written into one folder as
 * a.memtrace, trace1.json, trace2.json, b.memtrace (titan-memprof finds
 * them by name and gives each its rank from the contents).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "titan/core.h"
#include "titan/memprof.h"
#include "../../tools/memprof/memprof.h"

/* report.c's, which the harness does not link: format, do not print */
void mp_warn(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = {"a.memtrace", "trace1.json", "trace2.json", "b.memtrace"};
	struct fuzz_part parts[4];
	size_t np = fuzz_split(data, size, parts, 4);
	struct mp_opts o = {.rank = -1, .top_k = 5};
	struct mp_inputs in;
	char dir[1024], name[64], *arg = dir;
	int rc;

	snprintf(dir, sizeof(dir), "%s", fuzz_path("run"));
	fuzz_clean();
	if (mkdir(dir, 0755) < 0)
		abort();
	for (size_t i = 0; i < np; i++) {
		snprintf(name, sizeof(name), "run/%s", names[i]);
		fuzz_write(fuzz_path(name), parts[i].p, parts[i].n);
	}
	rc = mp_inputs_find(&in, &arg, 1, &o, true);
	fuzz_check_error(rc);
	if (rc < 0) {
		mp_inputs_release(&in); /* as titan-memprof does: a failed find leaves ranks */
		return 0;
	}
	if ((rc = mp_inputs_replay(&in, &o, 16)) >= 0)
		rc = mp_inputs_merge_spans(&in);
	fuzz_check_error(rc);
	for (size_t i = 0; rc >= 0 && i < in.n; i++) {
		struct mp_rank *r = &in.ranks[i];
		struct titan_step_time *st = NULL;
		size_t n = 0;

		if (r->mem) {
			struct titan_memleak lk;

			titan_memleak_check(titan_memreplay_get(r->mem), &lk);
		}
		fuzz_check_error(titan_step_times(r->spans, r->n_spans, r->rank, &st, &n));
		free(st);
	}
	mp_inputs_release(&in);
	return 0;
}
