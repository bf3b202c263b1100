/*
 * memprof.h — private to titan-memprof: the inputs of a run (per rank: a
 * memory trace, timing traces), the options shared by the subcommands,
 * and the subcommands themselves.
 */
#ifndef TITAN_TOOLS_MEMPROF_H
#define TITAN_TOOLS_MEMPROF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "titan/core.h"
#include "titan/memprof.h"

struct mp_opts {
	bool json;
	const char *svg, *png, *perfetto, *estimate, *metrics;
	int rank;                 /* --rank, -1: all */
	double threshold_pct;     /* stragglers: % over the median */
	int top_k;
	uint64_t max_live;
	double flops_per_step, peak_flops; /* NAN: from metrics.jsonl */
	int width;                /* SVG width in pixels */
	int verbosity;
};

struct mp_trace {             /* one timing trace file */
	char *path;
	struct titan_chrome_trace *t;
	double offset_us;         /* added to its timestamps */
	int64_t first_step;
};

struct mp_rank {
	int rank;
	char *memtrace;           /* NULL: none */
	struct titan_memreplay *mem;
	struct mp_trace *traces;
	size_t n_traces;
	/* spans and counters of every trace, on one time base */
	struct titan_span *spans;
	size_t n_spans;
	struct titan_counter *counters;
	size_t n_counters;
	double rank_offset_us;    /* export: this rank against the earliest */
};

struct mp_inputs {
	struct mp_rank *ranks;
	size_t n;
	char *metrics;            /* metrics.jsonl, NULL: none */
};

/* Find the inputs in directories (searched recursively: *.memtrace,
 * *trace*.json, metrics*.jsonl) and files (recognised by content).
 * Ranks come from the memtrace header, else a "rankN" in the file name,
 * else the trace's pid.  `want_traces`: read the timing traces now. */
int mp_inputs_find(struct mp_inputs *in, char **args, int n, const struct mp_opts *o,
		   bool want_traces);
void mp_inputs_release(struct mp_inputs *in);
/* Replay the memory traces (timeline_cols 0: none).  A truncated or
 * corrupt trace is reported on stderr (and flagged in the result). */
int mp_inputs_replay(struct mp_inputs *in, const struct mp_opts *o, int timeline_cols);
/* Put each rank's timing traces on one time base: a trace is aligned to
 * the memory trace when there is one (the first event of a phase against
 * the span of that phase), else placed after the previous trace. */
int mp_inputs_merge_spans(struct mp_inputs *in);

/* subcommands: 0, or an exit status (1 runtime failure) after printing */
int mp_summary(struct mp_inputs *in, const struct mp_opts *o);
int mp_compare(struct mp_inputs *in, const struct mp_opts *o);
int mp_time(struct mp_inputs *in, const struct mp_opts *o);
int mp_timeline(struct mp_inputs *in, const struct mp_opts *o);
int mp_export(struct mp_inputs *in, const struct mp_opts *o);

/* helpers (report.c) */
const char *mp_bytes(char *buf, size_t n, double bytes);  /* "1.50 GiB" */
/* "step 4, backward", or "set-up (step 0)" for step 0 without a phase */
const char *mp_where(char *buf, size_t n, uint32_t step, unsigned phase);
void mp_json_tags(struct titan_json *j, const char *key, const int64_t *v);
int mp_json_print(struct titan_json *j); /* to stdout, one line */
void mp_warn(const char *fmt, ...) TITAN_PRINTF(1, 2);
int mp_fail(void); /* prints titan_errmsg() as an error, returns 1 */

#endif
