/*
 * titan/core.h — the core of libtitan: errors, logging, tagged memory
 * accounting, counter-based RNG, timers, CRC32C, a streaming JSON writer,
 * number parsing, input files that may be gzip/zstd-compressed, the
 * progress line and the shared command-line contract of the titan-* tools.
 *
 * Conventions (see STYLE.md):
 *  - Library functions return 0 (or a pointer) on success and a negative
 *    `enum titan_err` (or NULL) on failure, after recording a message with
 *    titan_error().  The library never exits and never writes to stdout.
 *  - Destructors (`_free`, `_release`, `_close`) accept NULL.
 *  - Broken invariants are bugs: TITAN_ASSERT prints file:line and aborts.
 */
#ifndef TITAN_CORE_H
#define TITAN_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TITAN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define TITAN_NORETURN __attribute__((noreturn))
#else
#define TITAN_PRINTF(f, a)
#define TITAN_NORETURN
#endif

/* ------------------------------------------------------------------ errors */

/* Error codes; library functions return them negated-free: the values are
 * already negative so `if (rc < 0)` works everywhere. */
enum titan_err {
	TITAN_OK = 0,
	TITAN_E_IO = -1,          /* open/read/write/rename failed (errno in msg) */
	TITAN_E_NOMEM = -2,       /* allocation failed */
	TITAN_E_INVALID = -3,     /* bad user input: config, arguments, data */
	TITAN_E_FORMAT = -4,      /* a file is not what it claims (magic, size) */
	TITAN_E_UNSUPPORTED = -5, /* feature not built in or not available */
	TITAN_E_DEVICE = -6,      /* CUDA / cuBLAS / NCCL failure */
	TITAN_E_COMM = -7,        /* MPI failure */
	TITAN_E_INTERNAL = -8,    /* a bug that was caught without aborting */
	TITAN_E_NUMERIC = -9,     /* a loss or gradient that is not finite */
};

/* The last error recorded on this thread. */
struct titan_error_info {
	int code;           /* enum titan_err, 0 when none */
	char msg[1024];     /* user-facing message, no trailing newline */
	const char *file;   /* library source location that raised it */
	int line;
	const char *func;
};

/* Record an error and return `code` (so `return titan_error(...)` works). */
#define titan_error(code, ...) \
	titan_error_set_((code), __FILE__, __LINE__, __func__, __VA_ARGS__)
int titan_error_set_(int code, const char *file, int line, const char *func,
		     const char *fmt, ...) TITAN_PRINTF(5, 6);
/* Prepend context to the current message: "ctx: old message". Returns code. */
int titan_error_prefix(const char *fmt, ...) TITAN_PRINTF(1, 2);
const struct titan_error_info *titan_error_last(void);
const char *titan_errmsg(void);          /* "" when no error */
void titan_error_clear(void);
const char *titan_strerr(int code);      /* "invalid input", ... */
/* Exit status a tool should use for a code: 2 for TITAN_E_INVALID, else 1. */
int titan_error_exit_status(int code);

/* Invariant check; failure is a bug in titan, not a user error. */
#define TITAN_ASSERT(x) \
	((x) ? (void)0 : titan_assert_fail_(#x, __FILE__, __LINE__, __func__))
void titan_assert_fail_(const char *expr, const char *file, int line,
			const char *func) TITAN_NORETURN;

/* MPI rank of this process for messages and logs; -1 (default) = unknown. */
void titan_set_rank(int rank);
int titan_get_rank(void);

/* ----------------------------------------------------------------- logging */

enum titan_log_level {
	TITAN_LOG_ERROR = 0,
	TITAN_LOG_WARN = 1,
	TITAN_LOG_INFO = 2,
	TITAN_LOG_DEBUG = 3,
	TITAN_LOG_TRACE = 4,
};

/* Lines go to stderr (or the stream set below) as
 *   [rank0]:[titan] 2026-11-21 23:01:02,123 - root - INFO - message
 * ("[rank0]:" only once titan_set_rank() was called), torchtitan's format
 * ("[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s", its
 * root logger).  TITAN_LOG_LEVEL=error|warn|info|debug|trace in the
 * environment sets the initial level; TITAN_LOG_TIME=0 drops the timestamp. */
void titan_log_set_level(enum titan_log_level level);
enum titan_log_level titan_log_get_level(void);
int titan_log_parse_level(const char *s, enum titan_log_level *out);
void titan_log_set_stream(FILE *fp); /* NULL = stderr */
/* The head of a line, "[titan] DATE - root - LEVEL - " (no rank), into buf
 * (truncated to size); its length.  For lines printed elsewhere in the
 * same format (titan-train's step lines on stdout). */
size_t titan_log_head(char *buf, size_t size, enum titan_log_level level);
void titan_log(enum titan_log_level level, const char *fmt, ...) TITAN_PRINTF(2, 3);
void titan_vlog(enum titan_log_level level, const char *fmt, va_list ap) TITAN_PRINTF(2, 0);
#define titan_log_error(...) titan_log(TITAN_LOG_ERROR, __VA_ARGS__)
#define titan_log_warn(...) titan_log(TITAN_LOG_WARN, __VA_ARGS__)
#define titan_log_info(...) titan_log(TITAN_LOG_INFO, __VA_ARGS__)
#define titan_log_debug(...) titan_log(TITAN_LOG_DEBUG, __VA_ARGS__)

/* ------------------------------------------------- tagged memory accounting */

/* What an allocation is for.  Estimates (titan-estimate) and measurements
 * (titan-train, titan-memprof) are compared tag by tag. */
enum titan_mem_tag {
	TITAN_MEM_PARAMS = 0,
	TITAN_MEM_GRADS,
	TITAN_MEM_OPTIM,
	TITAN_MEM_ACTIVATIONS,
	TITAN_MEM_COMM,
	TITAN_MEM_WORKSPACE,
	TITAN_MEM_DATA,
	TITAN_MEM_OTHER,
	TITAN_MEM_NTAGS
};
const char *titan_mem_tag_name(enum titan_mem_tag tag); /* "params", ... */
int titan_mem_tag_parse(const char *name, enum titan_mem_tag *out);

/* Where the bytes come from.  The host backend is posix_memalign(64); the
 * CUDA backend (lib/cuda) is the caching allocator below over cudaMalloc.
 * `reserved` reports bytes held from the system (caching allocators hold
 * more than is live); NULL means reserved == live. */
struct titan_mem_backend {
	const char *name;
	void *(*alloc)(void *ctx, size_t bytes);
	void (*free)(void *ctx, void *ptr, size_t bytes);
	size_t (*reserved)(void *ctx);
	void *ctx;
	/* Zero a block for titan_mem_calloc: 0, or a negative titan_err after
	 * recording an error.  NULL = memset (host-addressable memory only: a
	 * device backend must set it, e.g. to a cudaMemset wrapper). */
	int (*zero)(void *ctx, void *ptr, size_t bytes);
	/* true: `alloc` records a titan_error whenever it returns NULL (the
	 * caching allocator's out-of-memory report); titan_mem_alloc prefixes
	 * that message instead of replacing it. */
	bool alloc_sets_error;
};

/* Bytes are counted exactly as requested (not rounded). */
struct titan_mem_stats {
	int64_t cur[TITAN_MEM_NTAGS];
	int64_t peak[TITAN_MEM_NTAGS];  /* max of cur[tag] since reset */
	int64_t total_cur;
	int64_t total_peak;             /* max of the sum, not the sum of peaks */
	int64_t peak_at_total[TITAN_MEM_NTAGS]; /* breakdown at total_peak */
	int64_t n_alloc, n_free;        /* since creation */
	int64_t reserved;               /* backend's reserved bytes, or total_cur */
};

struct titan_allocator;

/* A new allocator over `backend` (copied); NULL backend = host memory.
 * Thread-safe.  Returns NULL with an error recorded on failure. */
struct titan_allocator *titan_allocator_new(const char *name,
					    const struct titan_mem_backend *backend);
/* Frees the allocator; live blocks are reported at DEBUG level and leaked. */
void titan_allocator_free(struct titan_allocator *a);
/* The process-wide host allocator (created on first use, never freed). */
struct titan_allocator *titan_host_allocator(void);

/* `bytes` may be 0 (returns a unique non-NULL pointer).  NULL + error
 * (TITAN_E_NOMEM naming the tag and size) on failure. */
void *titan_mem_alloc(struct titan_allocator *a, size_t bytes, enum titan_mem_tag tag);
void *titan_mem_calloc(struct titan_allocator *a, size_t bytes, enum titan_mem_tag tag);
/* Frees a block of this allocator; NULL is a no-op.  A pointer that this
 * allocator did not hand out is a bug (TITAN_ASSERT). */
void titan_mem_free(struct titan_allocator *a, void *ptr);
/* Size and tag of a live block; -1 if unknown. */
int64_t titan_mem_size(struct titan_allocator *a, const void *ptr,
		       enum titan_mem_tag *tag);
void titan_mem_get_stats(struct titan_allocator *a, struct titan_mem_stats *out);
/* Peaks restart from the current values (torchtitan resets after each log). */
void titan_mem_reset_peak(struct titan_allocator *a);

/* Context stamped on trace events: training step and phase (a small id the
 * caller defines, e.g. forward=1, backward=2; 0 = none). */
void titan_mem_set_step(struct titan_allocator *a, uint32_t step, uint16_t phase);

/* ------------------------------------------------------ caching allocator
 *
 * A caching layer over a "raw" backend (cudaMalloc/cudaFree on a GPU; any
 * titan_mem_backend, e.g. malloc with a capacity limit in tests), modelled
 * on PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp):
 *  - every request is rounded up to a multiple of 512 bytes (0 -> 512);
 *  - requests of at most 1 MiB come from the small pool, whose segments
 *    (raw allocations) are 2 MiB; larger ones from the large pool, whose
 *    segments are 20 MiB for requests under 10 MiB and the request rounded
 *    up to 2 MiB otherwise;
 *  - a request takes the best-fitting free block of its pool (smallest
 *    size, then lowest address), splitting off the rest when the rest is at
 *    least 512 bytes (small pool) or more than 1 MiB (large pool); a freed
 *    block merges with free neighbours of its segment;
 *  - when the raw backend fails, every cached segment with nothing live in
 *    it is released and the raw allocation is tried once more
 *    (num_alloc_retries counts these retries, as PyTorch's does, even when
 *    there was nothing to release); if that fails too, num_ooms counts it
 *    and alloc returns NULL with TITAN_E_NOMEM naming the request, the
 *    active and reserved bytes and the device's capacity when known.
 * Not modelled: streams (a freed block is handed out again at once: free a
 * block only when no queued device work on another stream still uses it;
 * titan's CUDA backend runs every op on one compute stream), max_split_size,
 * expandable segments, garbage collection thresholds, CUDA-graph pools.
 * Thread-safe (one mutex; the raw backend is called with it held). */
struct titan_caching_stats {
	int64_t requested, requested_peak; /* bytes asked for, exactly */
	int64_t active, active_peak;       /* live blocks at their rounded sizes
					      (PyTorch's active_bytes: no stream
					      events here, so also allocated_bytes) */
	int64_t reserved, reserved_peak;   /* segments held from the raw backend */
	int64_t reserved_small, reserved_large; /* reserved by pool */
	int64_t inactive_split;            /* free bytes inside segments that also
					      hold live blocks (fragmentation) */
	int64_t segments, active_blocks;   /* current counts */
	int64_t num_raw_allocs, num_raw_frees; /* calls into the raw backend */
	int64_t num_alloc_retries, num_ooms;   /* since creation */
};

struct titan_caching_opts {
	const char *name;   /* in messages, e.g. "cuda:0"; NULL = raw->name */
	/* Optional: the device's free and total bytes now (cudaMemGetInfo),
	 * for the out-of-memory message; 0 or a negative titan_err. */
	int (*mem_info)(void *raw_ctx, int64_t *free_bytes, int64_t *total_bytes);
};

struct titan_caching;

/* A caching allocator over `raw` (copied; its ctx must outlive the cache).
 * `o` may be NULL.  NULL + TITAN_E_NOMEM on failure. */
struct titan_caching *titan_caching_new(const struct titan_mem_backend *raw,
					const struct titan_caching_opts *o);
/* Releases every cached segment; segments that still hold live blocks are
 * leaked (reported at DEBUG level).  NULL is a no-op. */
void titan_caching_free(struct titan_caching *c);
/* The titan_mem_backend of the cache (alloc/free/reserved, zero passed
 * through to the raw backend's), to give to titan_allocator_new. */
void titan_caching_backend(struct titan_caching *c, struct titan_mem_backend *out);
void titan_caching_get_stats(struct titan_caching *c, struct titan_caching_stats *out);
/* Peaks restart from the current values (torch.cuda.reset_peak_memory_stats). */
void titan_caching_reset_peak(struct titan_caching *c);
/* Returns every cached segment with nothing live in it to the raw backend
 * (torch.cuda.empty_cache); the bytes released. */
int64_t titan_caching_empty_cache(struct titan_caching *c);
/* Checks the cache's invariants (block chains tile their segments, no two
 * free neighbours, pools sorted, counters equal to a recount): 0, or
 * TITAN_E_INTERNAL with what is wrong.  For tests. */
int titan_caching_check(struct titan_caching *c);

/* Memory event log.  While a trace is open every alloc/free appends one
 * 32-byte little-endian record to `fp`:
 *   u8 kind (1 alloc, 2 free), u8 tag, u16 phase, u32 step,
 *   u64 time_ns since the trace opened, u64 bytes, u64 address
 * after a 64-byte header:
 *   char magic[8] "TTNMEM\0\1"(last byte: version 1), u32 version, i32 rank,
 *   u64 start_unix_ns, char device[40] (allocator name, NUL padded).
 * The caller owns `fp` (it must stay open until titan_mem_trace_stop). */
#define TITAN_MEMTRACE_MAGIC "TTNMEM\0\1"
#define TITAN_MEMTRACE_VERSION 1
#define TITAN_MEMTRACE_HEADER_BYTES 64
#define TITAN_MEMTRACE_RECORD_BYTES 32
enum titan_memtrace_kind { TITAN_MEMTRACE_ALLOC = 1, TITAN_MEMTRACE_FREE = 2 };
int titan_mem_trace_start(struct titan_allocator *a, FILE *fp);
/* Flushes; returns TITAN_E_IO if any record could not be written. */
int titan_mem_trace_stop(struct titan_allocator *a);

/* Convenience: the host allocator. */
static inline void *titan_malloc(size_t n, enum titan_mem_tag tag)
{
	return titan_mem_alloc(titan_host_allocator(), n, tag);
}
static inline void *titan_calloc(size_t n, enum titan_mem_tag tag)
{
	return titan_mem_calloc(titan_host_allocator(), n, tag);
}
static inline void titan_free(void *p)
{
	titan_mem_free(titan_host_allocator(), p);
}

/* --------------------------------------------------------------------- rng */

/* Philox4x32-10 (Salmon et al., SC'11; the generator cuRAND calls
 * "Philox_4x32_10"), counter-based: value i of stream s under seed k depends
 * only on (k, s, i).  A tensor filled in pieces — by threads, by ranks owning
 * shards, on the GPU — gets the same numbers as one filled whole, which is
 * how every parallel layout starts from identical weights.
 *
 * Key = seed (64 bit).  Counter = (offset: 64 bit, stream: 64 bit).  One
 * Philox call yields four 32-bit words. */
struct titan_rng {
	uint64_t seed;
	uint64_t stream;
	uint64_t offset; /* next counter to use (sequential API) */
};

void titan_rng_init(struct titan_rng *r, uint64_t seed, uint64_t stream);
/* Derive an independent stream id, e.g. per rank or per parameter name. */
uint64_t titan_rng_stream_id(const char *name, uint64_t index);
/* One Philox4x32-10 block. */
void titan_philox4x32(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4]);

/* Sequential draws (advance r->offset by one counter per value). */
uint32_t titan_rng_u32(struct titan_rng *r);
uint64_t titan_rng_u64(struct titan_rng *r);
double titan_rng_uniform(struct titan_rng *r); /* [0, 1), 53 bits */
uint64_t titan_rng_below(struct titan_rng *r, uint64_t n); /* unbiased [0, n) */

/* Position-addressed fills: out[j] is value number (first + j) of the stream,
 * independent of how a tensor is split.  Each value consumes one counter.
 *  - uniform: [lo, hi)
 *  - normal: Box-Muller on the block's first two words (24-bit uniforms
 *    are not enough for the tails: 32-bit words, computed in double)
 *  - trunc_normal: PyTorch's trunc_normal_ method (inverse CDF: uniform in
 *    [2·Φ(α)−1, 2·Φ(β)−1], erfinv, scale, clamp to [a, b]), a and b absolute. */
void titan_rng_fill_uniform(const struct titan_rng *r, uint64_t first, float *out,
			    size_t n, float lo, float hi);
void titan_rng_fill_normal(const struct titan_rng *r, uint64_t first, float *out,
			   size_t n, float mean, float std);
void titan_rng_fill_trunc_normal(const struct titan_rng *r, uint64_t first, float *out,
				 size_t n, float mean, float std, float a, float b);
/* Inverse error function in double precision (|err| < 1e-15). */
double titan_erfinv(double x);

/* ------------------------------------------------------------------ timers */

uint64_t titan_time_ns(void);      /* CLOCK_MONOTONIC */
uint64_t titan_unix_time_ns(void); /* CLOCK_REALTIME */
struct titan_timer {
	uint64_t start_ns;  /* 0 when stopped */
	uint64_t total_ns;  /* accumulated over start/stop pairs */
	uint64_t count;
};
void titan_timer_start(struct titan_timer *t);
uint64_t titan_timer_stop(struct titan_timer *t); /* returns this interval */
static inline double titan_timer_seconds(const struct titan_timer *t)
{
	return (double)t->total_ns * 1e-9;
}

/* --------------------------------------------------------------- checksums */

/* CRC32C (Castagnoli, as iSCSI/ext4/LevelDB): crc32c("123456789") =
 * 0xE3069283.  Hardware SSE4.2 when the CPU has it, slicing-by-8 otherwise;
 * both give the same value.  Chain calls by passing the previous result. */
uint32_t titan_crc32c(uint32_t crc, const void *data, size_t n);
uint32_t titan_crc32c_sw(uint32_t crc, const void *data, size_t n);
/* crc32c(A || B) from crc32c(A), crc32c(B) and B's length in bytes (zlib's
 * crc32_combine), in O(log len_b) without the data.  Pieces of a buffer
 * checksummed apart (by ranks, by threads) join in any grouping. */
uint32_t titan_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
/* crc · x^(8n) mod P: crc32c(A) moved past n more bytes, so that
 * crc32c(A || B) = titan_crc32c_shift(crc32c(A), |B|) ^ crc32c(B).  The CRC
 * of a buffer is then the XOR over any pieces that tile it of
 * shift(crc32c(piece), bytes after the piece): ranks holding disjoint
 * pieces reduce their terms with a bitwise XOR, in any order. */
uint32_t titan_crc32c_shift(uint32_t crc, uint64_t n);

/* --------------------------------------------------------------- json out */

/* A small streaming JSON writer for JSONL (metrics, traces, --json output).
 * Values are appended to a growing buffer; commas and nesting are tracked.
 * Strings are escaped (control characters as \u00XX) and invalid UTF-8
 * bytes become U+FFFD; non-finite numbers are written as null.  Misuse
 * (a value where a key is required, unbalanced ends) is a bug: assert. */
struct titan_json {
	char *buf;
	size_t len, cap;
	int depth;
	uint8_t stack[64];   /* per level: 'o' object / 'a' array */
	bool first[64];      /* no value yet at this level */
	bool want_value;     /* a key was just written */
	bool oom;
};
void titan_json_init(struct titan_json *j);
void titan_json_release(struct titan_json *j);
void titan_json_reset(struct titan_json *j); /* empty, keep buffer */
/* Make the buffer hold `bytes` bytes (the NUL included) in one allocation
 * now, so that a text that fits takes exactly that memory whatever its
 * values: the metrics rows, whose memory titan-estimate counts.  False
 * (and titan_error) out of memory; the writer then refuses the text. */
bool titan_json_reserve(struct titan_json *j, size_t bytes);
void titan_json_object_begin(struct titan_json *j);
void titan_json_object_end(struct titan_json *j);
void titan_json_array_begin(struct titan_json *j);
void titan_json_array_end(struct titan_json *j);
void titan_json_key(struct titan_json *j, const char *key);
void titan_json_string(struct titan_json *j, const char *s);
void titan_json_stringn(struct titan_json *j, const char *s, size_t n);
void titan_json_int(struct titan_json *j, int64_t v);
void titan_json_uint(struct titan_json *j, uint64_t v);
void titan_json_double(struct titan_json *j, double v); /* shortest round-trip */
void titan_json_bool(struct titan_json *j, bool v);
void titan_json_null(struct titan_json *j);
/* The text so far (NUL-terminated) or NULL after an allocation failure. */
const char *titan_json_str(const struct titan_json *j);
/* Writes the text and a newline; TITAN_E_IO / TITAN_E_NOMEM on failure. */
int titan_json_write_line(struct titan_json *j, FILE *fp);

/* -------------------------------------------------------- numbers, strings */

/* Strict parsers: the whole string must be the number (no trailing junk,
 * no empty string), in range; 0 on success, TITAN_E_INVALID otherwise
 * (without recording an error: callers know the context). */
int titan_parse_i64(const char *s, int64_t *out);
int titan_parse_u64(const char *s, uint64_t *out);
int titan_parse_double(const char *s, double *out);
/* Size with optional binary suffix: 512, 4K, 16M, 2G, 1T (powers of 1024). */
int titan_parse_size(const char *s, uint64_t *out);
/* "1.50 GiB", "12.0 MiB", "512 B" into buf. */
const char *titan_format_bytes(char *buf, size_t n, double bytes);
/* Comma-grouped integer part of v, as Python's f"{v:,.0f}": "1,234,567". */
const char *titan_format_grouped(char *buf, size_t n, double v);
/* Shortest "%.{15,16,17}g" text that parses back to exactly v. */
const char *titan_format_double(char *buf, size_t n, double v);
/* Damerau–Levenshtein (optimal string alignment) distance. */
int titan_edit_distance(const char *a, const char *b);
char *titan_strdup(const char *s); /* NULL + TITAN_E_NOMEM on failure */
/* `rel` under `base` into out[n] as Python's os.path.join(base, rel): an
 * absolute `rel` wins (checkpoint.folder=/shared/ckpt is that folder, not
 * DUMP//shared/ckpt), an empty one is `base`; never a doubled slash, no
 * trailing one ("/" stays "/").  TITAN_E_INVALID when it does not fit in n. */
int titan_path_join(char *out, size_t n, const char *base, const char *rel);
/* A string from a file made safe to print (to a terminal, a log, a
 * message): control characters (C0, DEL, the C1 range U+0080..U+009F)
 * and bytes that are not well-formed UTF-8 become \xHH, one per byte; the
 * rest of the text (UTF-8) stays as it is.  Into buf (n bytes, always
 * NUL-terminated, cut at a whole character or escape when it does not
 * fit); returns buf.  Flags: TITAN_ESC_KEEP_LINES leaves newlines and tabs
 * (a message's own layout), TITAN_ESC_QUOTE writes '"', '\\', newline and
 * tab as \", \\, \n, \t (a quoted value). */
enum { TITAN_ESC_KEEP_LINES = 1, TITAN_ESC_QUOTE = 2 };
const char *titan_str_escapen(char *buf, size_t n, const char *s, size_t len, unsigned flags);
/* titan_str_escapen of a NUL-terminated string (NULL: ""), no flags. */
const char *titan_str_escape(char *buf, size_t n, const char *s);

/* ------------------------------------------------- compressed input files */

/* An input file read as its uncompressed bytes: gzip and zstd are told by
 * the first bytes (gzip 1f 8b; zstd 28 b5 2f fd or a skippable frame), not
 * by the name, so "-" (standard input) works too; anything else is read as
 * it is.  Concatenated gzip members and zstd frames are one stream, as
 * zcat and zstdcat read them.  gzip needs a build with zlib, zstd one with
 * libzstd (`make ZLIB= ZSTD=`, auto by default; features +zlib +zstd). */
enum titan_compression {
	TITAN_COMPRESSION_NONE = 0,
	TITAN_COMPRESSION_GZIP,
	TITAN_COMPRESSION_ZSTD,
};
const char *titan_compression_name(enum titan_compression c); /* "none", "gzip", "zstd" */
/* The format the first n bytes of a file announce. */
enum titan_compression titan_compression_sniff(const void *p, size_t n);

struct titan_instream;
/* Open `path` ("-" = standard input) and read its first bytes to tell the
 * format.  `name` is what messages call the file (NULL: the path, or
 * "(stdin)").  0, or TITAN_E_IO (cannot open/read), TITAN_E_UNSUPPORTED (a
 * compressed file and a build without its library; the message says what
 * to install), TITAN_E_NOMEM; *out is NULL then. */
int titan_instream_open(const char *path, const char *name, struct titan_instream **out);
void titan_instream_close(struct titan_instream *s);
/* Up to n uncompressed bytes into buf: the count (> 0), 0 at the end, or
 * an error: TITAN_E_IO (read failed), TITAN_E_INVALID for corrupt or
 * truncated compressed data, naming the file and the byte offset in it
 * (zstd: two offsets at most 16 KiB apart, as zstd does not say where in
 * its input it failed) ("x.jsonl.gz: corrupt gzip data at byte offset 1234 (member starting at
 * byte 0): invalid distance too far back", "truncated zstd data: the input
 * ends at byte offset 4096 inside the frame that starts at byte 0"). */
int64_t titan_instream_read(struct titan_instream *s, void *buf, size_t n);
const char *titan_instream_name(const struct titan_instream *s);
enum titan_compression titan_instream_compression(const struct titan_instream *s);
/* Bytes of the file from where it was opened (a regular file), else -1. */
int64_t titan_instream_size(const struct titan_instream *s);
/* File bytes consumed so far (compressed bytes decoded; for a plain file
 * the bytes returned): progress against titan_instream_size. */
uint64_t titan_instream_consumed(const struct titan_instream *s);
/* Uncompressed bytes returned so far. */
uint64_t titan_instream_produced(const struct titan_instream *s);

/* ---------------------------------------------------------------- progress */

/* The progress line of the titan-* tools, on stderr (DESIGN.md: only when
 * stderr is a terminal or with --progress):
 *   titan-tokenize: 12.0 MiB / 48.0 MiB (25%), 3,210 docs, 2,890,112 tokens, 41.3 MB/s, ETA 0:03
 * `done` and `total` count `unit`s (bytes are shown as "12.0 MiB", other
 * units as grouped counts, "1,234,567 tokens"); with total 0 (unknown:
 * a pipe) there is no percentage and no ETA.  The rate is done per second
 * (MB/s for bytes).  On a terminal the line is rewritten in place with
 * '\r'; otherwise each update is a line of its own.  Updates come at most
 * every 0.25 s on a terminal and every 1 s otherwise
 * (TITAN_PROGRESS_INTERVAL_MS overrides both); the last one is always
 * shown.  Not thread-safe: one thread reports. */
struct titan_progress {
	bool on;              /* print anything */
	bool tty;             /* '\r'-updated line */
	bool bytes;           /* unit is bytes */
	FILE *fp;             /* stderr */
	const char *prog;     /* line prefix: "titan-tokenize" */
	const char *unit;     /* "tokens", "bytes", ... */
	uint64_t total, done;
	uint64_t t0, last, interval_ns;
	int width;            /* of the last '\r' line, to blank a shorter one */
};
/* `on`: cli.progress.  `unit` "bytes" shows sizes and MB/s. */
void titan_progress_init(struct titan_progress *p, bool on, const char *prog, const char *unit,
			 uint64_t total);
/* Record `done` (and set `total` when it became known; 0 keeps it); print
 * when the interval has passed.  `extra` (or NULL) is appended after the
 * counts: "3,210 docs". */
void titan_progress_update(struct titan_progress *p, uint64_t done, const char *extra);
/* Print the last line (done as given; 100% when it equals the total) and
 * end it with a newline. */
void titan_progress_finish(struct titan_progress *p, uint64_t done, const char *extra);

/* ------------------------------------------------------------ file maps */

/* Map a whole regular file read-only (private mapping); the descriptor is
 * closed before returning.  An empty file gives *map = NULL, *size = 0.
 * TITAN_E_IO naming the file when it cannot be opened, is not a regular
 * file, or cannot be mapped.  Release with titan_unmap_file. */
int titan_map_file(const char *path, const void **map, size_t *size);
/* NULL (an empty file's map) is a no-op. */
void titan_unmap_file(const void *map, size_t size);

/* Inputs read with seeks or mapped must be regular files: a FIFO would
 * block open(2) and every read forever.  titan_open_regular opens `path`
 * with `flags` (O_RDONLY...) without blocking, refuses anything but a
 * regular file (TITAN_E_IO naming the file and what it is) and returns the
 * blocking descriptor (O_CLOEXEC) and, when st is not NULL, its stat.
 * titan_check_regular is the same check by name for files a library opens
 * itself (HDF5, jansson). */
struct stat;
int titan_open_regular(const char *path, int flags, int *fd, struct stat *st);
int titan_check_regular(const char *path);

/* Open or create `path` (0666 & ~umask) with `flags` (O_RDWR, O_WRONLY,
 * O_APPEND, O_TRUNC...) without following a symbolic link at that name: a
 * link is removed and a regular file created in its place (with a
 * warning); the file it pointed at is never opened.  So is a file with
 * other hard links, unless O_APPEND.  Anything else that is not a regular
 * file is refused (TITAN_E_IO). */
int titan_create_nofollow(const char *path, int flags, int *fd);

/* Run fn(arg) with SIGBUS (a mapped file truncated under the reader) made
 * an error: returns fn's result, or TITAN_E_IO with *fault set to the
 * faulting address when fn touched a page beyond the end of its file.  The
 * caller names the file and offset.  Other SIGBUS go to the handler that
 * was installed before (or kill the process as usual). */
int titan_guard_sigbus(int (*fn)(void *arg), void *arg, const void **fault);

/* Temporary files removed when a signal stops the process.  Outputs are
 * written under temporary names and renamed when complete; tracked ones
 * are unlinked by the handler of titan_tmp_catch_signals (SIGINT, SIGTERM,
 * SIGHUP: remove them, then die of the signal).  Track right after the
 * file is created, untrack after the rename or unlink; both are cheap and
 * thread-safe.  titan_tmp_track returns NULL when out of memory (the file
 * is then simply not removed on a signal). */
struct titan_tmp;
struct titan_tmp *titan_tmp_track(const char *path);
/* mkostemp(tmpl, flags) + titan_tmp_track with SIGINT/SIGTERM/SIGHUP
 * blocked on this thread in between, so no signal finds the file made but
 * untracked.  The fd, or -1 with errno; *track (may be NULL) gets the
 * tracking node (NULL when out of memory). */
int titan_tmp_mkstemp(char *tmpl, int flags, struct titan_tmp **track);
void titan_tmp_untrack(struct titan_tmp *t); /* NULL-safe */
void titan_tmp_forget(const char *path);     /* untrack by path */
void titan_tmp_catch_signals(void);
/* Unlink every tracked file now (async-signal-safe: titan-train's second
 * stop signal). */
void titan_tmp_remove_all(void);

/* Write `n` bytes to `path` atomically: a temporary file in the same folder,
 * fsync, rename.  On failure nothing exists under `path` that was not there. */
int titan_write_file_atomic(const char *path, const void *data, size_t n);

/* A streamed output file that appears under its name only when complete:
 * written as PATH.tmp.XXXXXX in the same folder, then fsync and rename.
 * PATH NULL or "-" is standard output (written directly). */
struct titan_afile {
	FILE *fp;     /* write here */
	char *path;   /* NULL for standard output */
	char *tmp;
	struct titan_tmp *track; /* tmp, removed on a stop signal */
};
int titan_afile_open(struct titan_afile *f, const char *path);
/* Commit when `rc` == 0 (flush, fsync, rename), otherwise remove the
 * temporary file.  Returns `rc`, or the commit's error. */
int titan_afile_close(struct titan_afile *f, int rc);

/* ------------------------------------------------------------ build facts */

/* Version and the features compiled in, e.g. "0.1.0-12-gabcdef". */
const char *titan_version(void);
const char *titan_git_revision(void);
/* Space-separated "cuda nccl mpi hdf5 hdf5-parallel openblas", each with a
 * leading '+' (built in) or '-' (not built). */
const char *titan_features(void);
bool titan_has_feature(const char *name);

#ifdef __cplusplus
}
#endif
#endif
