/*
 * titan/trace.h — timing traces as Chrome trace-event JSON (opens in
 * Perfetto and chrome://tracing), the format torchtitan's profiler writes
 * per rank (profile_traces/iteration_N/rankR_trace.json):
 *
 *   {"traceEvents": [
 *     {"name": "layer 3 forward", "cat": "model", "ph": "X", "ts": 1234.5,
 *      "dur": 87.25, "pid": 0, "tid": 0, "args": {"step": 10}}, ...],
 *    "displayTimeUnit": "ms", "otherData": {...}}
 *
 * ts and dur are microseconds (fractional) since the trace opened; pid is
 * the rank.  Spans nest (begin/end pairs); each is written as one complete
 * ("X") event when it ends.  The file is written under a temporary name
 * and renamed when closed, so a killed run leaves no half-written trace
 * under the final name.
 */
#ifndef TITAN_TRACE_H
#define TITAN_TRACE_H

#include <stdint.h>

#include "titan/core.h"

#ifdef __cplusplus
extern "C" {
#endif

struct titan_trace;

/* Opens PATH for writing (folders must exist).  `rank` becomes the pid;
 * `meta` (may be NULL) is a JSON object text stored as "otherData". */
int titan_trace_open(struct titan_trace **out, const char *path, int rank, const char *meta);
/* Start / end a span; spans nest up to 64 deep.  `step` goes to args. */
void titan_trace_begin(struct titan_trace *t, const char *name, const char *cat, int64_t step);
void titan_trace_end(struct titan_trace *t);
/* A finished span on track `tid` (> 0 for work of other threads, e.g. the
 * communication thread), times from titan_time_ns(). */
void titan_trace_complete(struct titan_trace *t, const char *name, const char *cat, int tid,
			  uint64_t start_ns, uint64_t end_ns, int64_t step);
/* A counter track sample ("ph": "C"), e.g. memory in bytes. */
void titan_trace_counter(struct titan_trace *t, const char *name, double value);
/* Ends open spans, writes the closing brackets and renames the file into
 * place.  Returns 0 or TITAN_E_IO (then nothing is left under PATH).
 * NULL-safe. */
int titan_trace_close(struct titan_trace *t);

#ifdef __cplusplus
}
#endif
#endif
