/*
 * titan/memprof.h — reading what titan-train's profiler writes and
 * replaying it: the tagged allocator's memory event log (`*.memtrace`,
 * docs/formats.md) and Chrome trace-event JSON timing traces
 * (`rankR_trace.json`, titan/trace.h).  The library side of titan-memprof:
 * where the memory and the time of a run went (torchtitan users get a
 * pickle snapshot for a web viewer and a Chrome trace per rank instead).
 *
 * Memory event log, little-endian (TITAN_MEMTRACE_* in titan/core.h):
 *   header, 64 bytes: char magic[8] "TTNMEM\0\1", u32 version (1),
 *     i32 rank (-1 unknown), u64 start_unix_ns, char device[40]
 *   records, 32 bytes: u8 kind (1 alloc, 2 free), u8 tag (enum
 *     titan_mem_tag), u16 phase, u32 step, u64 ns since the start,
 *     u64 bytes, u64 address
 *
 * Everything streams: a memtrace is read record by record through a
 * buffer, and a replay keeps only the live blocks, one entry per training
 * step and a fixed number of timeline columns, so ten million events need
 * a few megabytes whatever the file size.
 *
 * Errors: functions return 0 (or 1 for "a record") and a negative
 * titan_err after titan_error(); messages name the file and, for a bad
 * record, its byte offset.  Destructors accept NULL.
 */
#ifndef TITAN_MEMPROF_H
#define TITAN_MEMPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "titan/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------ memtrace reading */

/* Phases as titan-train stamps them (enum titan_phase in titan/train.h);
 * ids from 7 up are counted together as "other". */
#define TITAN_MEMPROF_NPHASES 8
/* "none", "data", "forward", "loss", "backward", "optimizer",
 * "validation", "other" (any id >= 7). */
const char *titan_memprof_phase_name(unsigned phase);
/* The slot a phase id is counted in: itself, or 7 for ids >= 7. */
static inline unsigned titan_memprof_phase_slot(unsigned phase)
{
	return phase < TITAN_MEMPROF_NPHASES ? phase : TITAN_MEMPROF_NPHASES - 1;
}

struct titan_memtrace_header {
	uint32_t version;
	int32_t rank;            /* -1: unknown */
	uint64_t start_unix_ns;  /* CLOCK_REALTIME when the trace opened */
	char device[41];         /* allocator name ("host", "cuda:0"), NUL-terminated */
};

struct titan_memtrace_record {
	uint8_t kind;            /* TITAN_MEMTRACE_ALLOC or _FREE */
	uint8_t tag;             /* enum titan_mem_tag */
	uint16_t phase;
	uint32_t step;
	uint64_t t_ns;           /* since the header's start (monotonic clock) */
	uint64_t bytes;
	uint64_t addr;
};

struct titan_memtrace_reader;

/* Open PATH ("-": standard input) and check the header: the magic ("not a
 * titan memory trace", TITAN_E_FORMAT), the version (a newer one is refused:
 * "format version N is newer than this titan reads (1): upgrade titan",
 * TITAN_E_UNSUPPORTED), a file shorter than the header (TITAN_E_FORMAT,
 * "truncated"). */
int titan_memtrace_open(struct titan_memtrace_reader **out, const char *path);
void titan_memtrace_close(struct titan_memtrace_reader *r);
const struct titan_memtrace_header *titan_memtrace_header(const struct titan_memtrace_reader *r);
const char *titan_memtrace_path(const struct titan_memtrace_reader *r);

/* The next record: 1, or 0 at the end of the file, or TITAN_E_FORMAT for a
 * corrupt record (a kind other than alloc/free, a tag >= TITAN_MEM_NTAGS;
 * the message gives its byte offset; reading stops there), or TITAN_E_IO.
 * `offset` (may be NULL) receives the record's byte offset in the file. */
int titan_memtrace_next(struct titan_memtrace_reader *r, struct titan_memtrace_record *rec,
			uint64_t *offset);
/* After next() returned 0: the bytes past the last complete record (a file
 * cut inside a record by a killed run), 0 when it ends on a boundary. */
uint64_t titan_memtrace_tail_bytes(const struct titan_memtrace_reader *r);
/* Bytes consumed so far: the header and every complete record returned. */
uint64_t titan_memtrace_offset(const struct titan_memtrace_reader *r);

/* Write the 64-byte header / one 32-byte record (tests and generators). */
void titan_memtrace_encode_header(unsigned char out[TITAN_MEMTRACE_HEADER_BYTES],
				  const struct titan_memtrace_header *h);
void titan_memtrace_encode_record(unsigned char out[TITAN_MEMTRACE_RECORD_BYTES],
				  const struct titan_memtrace_record *rec);

/* ------------------------------------------------------------- replay */

/* A block live at the peak, as the trace knows it: there are no call
 * sites in a memtrace, so a block is named by its tag, size and the step
 * and phase that allocated it. */
struct titan_memblock {
	uint64_t addr, bytes;
	uint64_t t_ns;           /* when it was allocated */
	uint32_t step;
	uint16_t phase;
	uint8_t tag;
};

/* One training step seen in the trace (steps with no event do not appear). */
struct titan_memstep {
	uint32_t step;
	uint64_t n_events;
	uint64_t t_first_ns, t_last_ns;
	int64_t live_at_start;                  /* total live before its first event */
	int64_t tag_at_start[TITAN_MEM_NTAGS];
	int64_t peak;                           /* highest total during the step */
	uint16_t peak_phase;
	uint64_t peak_t_ns;
	uint16_t first_phase;
	uint8_t phase_seen;                     /* bit p: an event in phase slot p */
	uint64_t phase_t_ns[TITAN_MEMPROF_NPHASES]; /* first event of each phase slot */
};

/* One column of the timeline: the state at the column's highest total
 * (the picture shows peaks, however many events a column holds) and the
 * state after its last event. */
struct titan_memcol {
	bool used;                              /* an event fell into it */
	int64_t max_total, min_total;
	int64_t at_max[TITAN_MEM_NTAGS];
	int64_t last[TITAN_MEM_NTAGS];
};

/* Problems that do not stop a replay; each kind keeps its first offset. */
enum titan_memanomaly_kind {
	TITAN_MEMANOMALY_FREE_UNKNOWN = 0,  /* free of an address that is not live */
	TITAN_MEMANOMALY_DOUBLE_ALLOC,      /* alloc of an address already live */
	TITAN_MEMANOMALY_FREE_MISMATCH,     /* free whose size/tag differ from its alloc's */
	TITAN_MEMANOMALY_NKINDS
};
const char *titan_memanomaly_name(enum titan_memanomaly_kind k);

struct titan_memreplay_opts {
	int top_k;               /* largest live blocks kept at the peak (default 10) */
	uint64_t max_live;       /* live-block limit, 0 = default 16,777,216 */
	int timeline_cols;       /* columns of the timeline, 0 = none */
};
void titan_memreplay_opts_default(struct titan_memreplay_opts *o);

struct titan_memreplay_result {
	struct titan_memtrace_header header;
	char path[4096];
	uint64_t n_records, n_alloc, n_free;
	uint64_t t_end_ns;                      /* time of the last record */
	int64_t cur[TITAN_MEM_NTAGS];           /* live at the end */
	int64_t total_cur;
	int64_t peak[TITAN_MEM_NTAGS];          /* each tag's own peak */
	int64_t total_peak;                     /* peak of the sum */
	int64_t peak_at_total[TITAN_MEM_NTAGS]; /* breakdown at total_peak */
	struct {                                /* the record that reached the peak */
		uint32_t step;
		uint16_t phase;
		uint64_t t_ns, offset, index;
	} at_peak;
	uint64_t live_blocks_at_peak, max_live_blocks;
	struct titan_memblock *top;             /* largest blocks live at the peak, */
	int n_top;                              /* by size, descending */
	struct titan_memstep *steps;
	size_t n_steps;
	/* how reading ended */
	uint64_t file_bytes;                    /* bytes read (header + records + tail) */
	uint64_t stop_offset;                   /* where the analysis stopped */
	uint64_t tail_bytes;                    /* a partial last record (truncated) */
	bool truncated;                         /* the file ends inside a record */
	bool corrupt;                           /* a corrupt record stopped it */
	char corrupt_msg[512];
	uint64_t anomalies[TITAN_MEMANOMALY_NKINDS];
	uint64_t anomaly_offset[TITAN_MEMANOMALY_NKINDS]; /* the first of each kind */
	/* timeline: n_cols columns of col_ns each from t = 0 */
	struct titan_memcol *cols;
	int n_cols;
	uint64_t col_ns;
};

struct titan_memreplay;

int titan_memreplay_new(struct titan_memreplay **out, const struct titan_memreplay_opts *o);
void titan_memreplay_free(struct titan_memreplay *m);
/* Apply one record read at `offset`.  Anomalies are counted; exceeding
 * max_live is TITAN_E_UNSUPPORTED ("raise --max-live"); an allocation that
 * would make more than 2^63 bytes live is a corrupt record (TITAN_E_FORMAT
 * naming its offset; nothing is applied). */
int titan_memreplay_feed(struct titan_memreplay *m, const struct titan_memtrace_record *rec,
			 uint64_t offset);
/* Close the books (the peak's live blocks, the timeline); then read. */
const struct titan_memreplay_result *titan_memreplay_finish(struct titan_memreplay *m);

/* Replay a whole file.  A truncated file or a corrupt record (one the
 * reader or titan_memreplay_feed refuses) ends the replay with the result
 * flagged (truncated / corrupt, stop_offset: the corrupt record's) and
 * returns 0; a bad header, a read error or too many live blocks return the
 * error.  On success *out owns the result (free with _free). */
int titan_memreplay_file(const char *path, const struct titan_memreplay_opts *o,
			 struct titan_memreplay **out);
const struct titan_memreplay_result *titan_memreplay_get(const struct titan_memreplay *m);

/* Steady-state growth: live bytes at the end of the first and the last
 * complete step (a step is complete when a later step follows it; its end
 * is the next step's start).  Step 0 (set-up) is left out, and so is step 1
 * when at least three complete steps follow it (warm-up allocations). */
struct titan_memleak {
	bool valid;                        /* fewer than two complete steps: false */
	uint32_t first_step, last_step;
	int64_t first_live, last_live;
	int64_t growth;                    /* last_live - first_live */
	double per_step;                   /* growth / (last_step - first_step) */
	int64_t tag_growth[TITAN_MEM_NTAGS];
	int64_t max_step_growth;           /* largest growth between two complete steps */
};
void titan_memleak_check(const struct titan_memreplay_result *r, struct titan_memleak *out);

/* --------------------------------------------------- Chrome trace reading */

/* One complete span ("ph": "X", or a matched "B"/"E" pair). */
struct titan_span {
	const char *name;        /* owned by the trace */
	const char *cat;         /* "" when absent */
	double ts, dur;          /* microseconds */
	int64_t step;            /* args.step, -1 when absent */
	int64_t pid, tid;
};

/* One counter sample ("ph": "C"): each numeric arg is a sample. */
struct titan_counter {
	const char *name, *series;  /* series: the arg name ("value") */
	double ts, value;
	int64_t pid;
};

struct titan_chrome_trace {
	char *path;
	struct titan_span *spans;
	size_t n_spans;
	struct titan_counter *counters;
	size_t n_counters;
	int64_t pid;             /* the first event's pid, -1 when there is none */
	int64_t meta_step;       /* otherData.step, -1 when absent */
	bool truncated;          /* the file ends inside the event list */
	uint64_t stop_offset;    /* byte offset where reading stopped when truncated */
	uint64_t n_events;       /* events read */
	/* private: interned strings */
	char **strs;
	size_t n_strs, cap_strs;
	size_t *hidx, hcap;
	size_t cap_spans, cap_counters;
};

/* Read a Chrome trace-event JSON file: the object form ({"traceEvents":
 * [...], ...}) or the bare array.  Events are parsed one by one, so a file
 * cut short (a killed run) yields the events before the cut with
 * `truncated` set; a syntax error is TITAN_E_FORMAT naming the byte offset;
 * an event without a valid ph/ts is skipped.  Returns 0 or an error. */
int titan_chrome_read(const char *path, struct titan_chrome_trace **out);
void titan_chrome_free(struct titan_chrome_trace *t);

/* -------------------------------------------------------- time analysis */

/* Time of one step of one rank, from its spans (microseconds). */
enum titan_time_part {
	TITAN_TIME_DATA = 0,
	TITAN_TIME_FORWARD,
	TITAN_TIME_LOSS,
	TITAN_TIME_BACKWARD,
	TITAN_TIME_OPTIMIZER,
	TITAN_TIME_COMM_EXPOSED,     /* communication no compute on another thread hides */
	TITAN_TIME_COMM_OVERLAPPED,  /* communication under compute on another thread */
	TITAN_TIME_OTHER,            /* the step minus data..optimizer and exposed comm */
	TITAN_TIME_NPARTS
};
const char *titan_time_part_name(enum titan_time_part p); /* "data", ..., "comm_exposed" */

/* Communication of a step by collective: the first word of the comm
 * spans' names ("all_to_all_v", "reduce_scatter", "grad" for titan-train's
 * "grad sync"); exposed and overlapped split the step's comm_exposed and
 * comm_overlapped (they add up to them): each stretch of a thread's
 * communication goes to the innermost (latest started) span covering it. */
#define TITAN_TIME_NCOMM 12          /* more collectives than this: the last is "(other)" */
struct titan_comm_time {
	char name[32];
	int64_t calls;               /* spans of that collective in the step */
	double exposed, overlapped;  /* µs */
};

struct titan_step_time {
	int64_t step;
	double ts;                   /* the step span's start, µs */
	double total;                /* the step span, µs */
	double part[TITAN_TIME_NPARTS];
	struct titan_comm_time comm[TITAN_TIME_NCOMM];
	int n_comm;                  /* in first-seen order */
};

/* Is this span communication?  cat "comm"/"nccl"/"collective", or a name
 * with all_reduce, all_gather, reduce_scatter, broadcast, all_to_all,
 * send/recv (either spelling: allreduce, all-reduce, ...). */
bool titan_span_is_comm(const struct titan_span *s);

/* The steps of one rank: one entry per "step" span (sorted by step); data,
 * forward, loss, backward and optimizer are the durations of spans of
 * those names (summed: gradient accumulation runs forward and backward
 * once per microbatch), nested ones counted once; a span belongs to the
 * step of its args.step, else to the step span that contains it.
 * *out is malloc'ed (NULL when there are none). */
int titan_step_times(const struct titan_span *spans, size_t n, int64_t pid,
		     struct titan_step_time **out, size_t *n_out);

/* Median of n doubles (n > 0; v is reordered). */
double titan_median(double *v, size_t n);

#ifdef __cplusplus
}
#endif
#endif
