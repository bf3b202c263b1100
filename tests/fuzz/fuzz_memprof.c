/*
 * fuzz_memprof.c — titan-memprof on the files of a run: memory traces
 * (*.memtrace: lib/memprof/memtrace.c, replay.c), Chrome trace JSON
 * (lib/memprof/spans.c, as lib/trace writes it), metrics.jsonl and a
 * titan-estimate --json file.  The tool's sources (every .c file of
 * tools/memprof but its main) are compiled in: mp_inputs_find puts the
 * files together (ranks, time bases) and one subcommand analyses them, as
 * `titan-memprof CMD DIR` does (reports go to /dev/null).
 *
 * Input: a byte choosing the subcommand (summary, timeline, time, export,
 * compare; bit 0x08 --json, 0x10 --rank 0), then files split at
 * FUZZ_SEPARATOR: a.memtrace, trace1.json, trace2.json, b.memtrace and
 * metrics.jsonl of one run folder, and the estimate for compare.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "titan/core.h"
#include "titan/memprof.h"
#include "../../tools/memprof/memprof.h"

extern int mp_verbosity; /* report.c: -1 drops the warnings */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = {"run/a.memtrace", "run/trace1.json", "run/trace2.json",
					    "run/b.memtrace", "run/metrics.jsonl", "estimate.json"};
	struct fuzz_in in = {data, size};
	unsigned cmd = fuzz_u8(&in);
	struct fuzz_part parts[6];
	size_t np = fuzz_split(in.p, in.n, parts, 6);
	struct mp_opts o = {.rank = cmd & 0x10 ? 0 : -1, .json = cmd & 0x08, .threshold_pct = 10,
			    .top_k = 5, .flops_per_step = NAN, .peak_flops = NAN, .width = 400};
	char dir[1024], svg[1024], perfetto[1024], est[1024], *arg = dir;
	struct mp_inputs in_;
	int rc;

	if (!freopen("/dev/null", "w", stdout)) /* the reports */
		abort();
	mp_verbosity = -1;
	snprintf(dir, sizeof(dir), "%s", fuzz_path("run"));
	snprintf(svg, sizeof(svg), "%s", fuzz_path("timeline.svg"));
	snprintf(perfetto, sizeof(perfetto), "%s", fuzz_path("perfetto.json"));
	snprintf(est, sizeof(est), "%s", fuzz_path("estimate.json"));
	fuzz_clean();
	if (mkdir(dir, 0755) < 0)
		abort();
	for (size_t i = 0; i < np; i++)
		fuzz_write(fuzz_path(names[i]), parts[i].p, parts[i].n);
	o.svg = svg;
	o.perfetto = perfetto;
	o.estimate = np > 5 ? est : NULL;
	rc = mp_inputs_find(&in_, &arg, 1, &o, (cmd & 7) == 2 || (cmd & 7) == 3);
	fuzz_check_error(rc);
	if (rc == 0) {
		switch (cmd & 7) {
		case 1: rc = mp_timeline(&in_, &o); break;
		case 2: rc = mp_time(&in_, &o); break;
		case 3: rc = mp_export(&in_, &o); break;
		case 4: rc = o.estimate ? mp_compare(&in_, &o) : mp_summary(&in_, &o); break;
		default: rc = mp_summary(&in_, &o); break;
		}
		if (rc < 0 || rc > 1)
			abort(); /* a subcommand returns an exit status */
		titan_error_clear();
	}
	mp_inputs_release(&in_); /* as titan-memprof does, after a failed find too */
	return 0;
}
