/*
 * titan/trace.h — timing traces as Chrome trace-event JSON (opens in
 * Perfetto and chrome://tracing), the format torchtitan's profiler writes
 * per rank (profile_traces/iteration_N/rankR_trace.json), and TensorBoard
 * event files of scalars (further below):
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

#include <stdbool.h>
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
/* The same with integer args after "step" (keys: string literals or
 * strings that outlive the call), e.g. an op's shapes. */
struct titan_trace_arg {
	const char *key;
	int64_t value;
};
void titan_trace_complete_args(struct titan_trace *t, const char *name, const char *cat, int tid,
			       uint64_t start_ns, uint64_t end_ns, int64_t step,
			       const struct titan_trace_arg *args, int nargs);
/* Op-level events (profiling): while installed on `be`, every op of its
 * table is timed around the call into the backend it wraps and written
 * to `t` as a complete event on tid 0, category "op", named after the
 * op's field in struct titan_backend_ops ("matmul_fwd", "rmsnorm_bwd",
 * "buf_get"...), args the step and the op's sizes (matmul: m = tokens,
 * n = out features, k = in features).  Written when the op returns, on
 * the thread that installed it, so they nest under the spans open then
 * (Perfetto nests complete events of a track by time).  `launch`: the
 * backend only queues the op (cuda): the times are the host-side launch,
 * not the device's, and the events get args "launch": 1.  The wrapper
 * swaps be->ops for a table of its own (NULL entries stay NULL, name and
 * release are the inner backend's) and titan_trace_ops_remove puts the
 * backend's back; nothing is wrapped when not installed.  One backend
 * per process at a time: TITAN_E_INVALID when one is installed. */
struct titan_backend;
int titan_trace_ops_install(struct titan_backend *be, struct titan_trace *t, int64_t step,
			    bool launch);
/* Puts the backend's own table back (NULL-safe, and a no-op when `be`
 * is not the one installed). */
void titan_trace_ops_remove(struct titan_backend *be);
/* A counter track sample ("ph": "C"), e.g. memory in bytes. */
void titan_trace_counter(struct titan_trace *t, const char *name, double value);
/* Ends open spans, writes the closing brackets and renames the file into
 * place.  Returns 0 or TITAN_E_IO (then nothing is left under PATH).
 * NULL-safe. */
int titan_trace_close(struct titan_trace *t);

/* ------------------------------------------------------- TensorBoard events */

/*
 * An event file as torch.utils.tensorboard's SummaryWriter writes it
 * (TensorBoard, tbparse and TensorFlow's summary_iterator read it): a
 * TFRecord stream, each record
 *
 *   u64 length (little-endian), u32 masked CRC32C of those 8 bytes,
 *   length bytes of data, u32 masked CRC32C of the data,
 *   masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32),
 *
 * whose data is a tensorflow.Event protocol buffer:
 *
 *   Event   { double wall_time = 1; int64 step = 2;
 *             oneof { string file_version = 3; Summary summary = 5; } }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 *
 * The first record has file_version "brain.Event:2"; each later one the
 * scalars of one step (several values in one Summary).  Fields come in
 * field order, step 0 is left out (proto3's encoding: the bytes equal what
 * protobuf serializes for the same message).  Seconds since the epoch as
 * wall_time.  Errors as titan/core.h; the writer is not thread-safe.
 */
struct titan_tfevents;
/* Create DIR/events.out.tfevents.<10-digit wall_time>.<host>.<pid>.<n> (the
 * folder must exist; n counts the files this process opened) and write
 * the file_version record.  TITAN_E_IO naming the file (then no file is
 * left), TITAN_E_NOMEM. */
int titan_tfevents_open(struct titan_tfevents **out, const char *dir, double wall_time);
/* The file's path (owned by w). */
const char *titan_tfevents_path(const struct titan_tfevents *w);
/* Add a scalar (stored as float) to the pending event.  NULL w: no-op. */
void titan_tfevents_scalar(struct titan_tfevents *w, const char *tag, double value);
/* Write the pending scalars as one event of `step` (>= 0); nothing when
 * there are none.  On disk (write(2)) when it returns.  A failed write (a
 * full disk) cuts the file back to its last complete record and returns
 * TITAN_E_IO naming the file and the system's reason. */
int titan_tfevents_write(struct titan_tfevents *w, int64_t step, double wall_time);
/* Close and free (NULL-safe); TITAN_E_IO when close(2) fails. */
int titan_tfevents_close(struct titan_tfevents *w);

#ifdef __cplusplus
}
#endif
#endif
