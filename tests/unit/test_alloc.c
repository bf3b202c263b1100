/*
 * test_alloc.c — the tagged allocator: exact per-tag and total peaks under a
 * scripted alloc/free sequence, reset_peak, zero-size blocks, calloc, many
 * threads, custom backends (calls, sizes, reserved, zero), allocation
 * failure messages, the binary memory trace decoded back, write errors,
 * leak logging and the asserts on foreign pointers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "titan/core.h"

/* Under Address/ThreadSanitizer, let impossible sizes fail with NULL as
 * libc does (test_alloc_failure asks for SIZE_MAX / 2 bytes). */
__attribute__((used)) const char *__asan_default_options(void);
__attribute__((used)) const char *__asan_default_options(void)
{
	return "allocator_may_return_null=1";
}
__attribute__((used)) const char *__tsan_default_options(void);
__attribute__((used)) const char *__tsan_default_options(void)
{
	return "allocator_may_return_null=1";
}

#define P TITAN_MEM_PARAMS
#define G TITAN_MEM_GRADS
#define O TITAN_MEM_OPTIM
#define A TITAN_MEM_ACTIVATIONS
#define C TITAN_MEM_COMM
#define W TITAN_MEM_WORKSPACE
#define D TITAN_MEM_DATA
#define X TITAN_MEM_OTHER

/* Expected values per tag in the order P G O A C W D X. */
static void expect_tags(const int64_t *got, int64_t p, int64_t g, int64_t o, int64_t a,
			int64_t c, int64_t w, int64_t d, int64_t x)
{
	const int64_t want[TITAN_MEM_NTAGS] = { p, g, o, a, c, w, d, x };
	for (int t = 0; t < TITAN_MEM_NTAGS; t++)
		assert_int_equal(got[t], want[t]);
}

static void test_tag_names(void **state)
{
	enum titan_mem_tag t;
	(void)state;

	for (int i = 0; i < TITAN_MEM_NTAGS; i++) {
		assert_int_equal(titan_mem_tag_parse(titan_mem_tag_name((enum titan_mem_tag)i), &t), 0);
		assert_int_equal(t, i);
	}
	assert_string_equal(titan_mem_tag_name(TITAN_MEM_PARAMS), "params");
	assert_string_equal(titan_mem_tag_name(TITAN_MEM_ACTIVATIONS), "activations");
	assert_string_equal(titan_mem_tag_name(TITAN_MEM_OTHER), "other");
	assert_int_equal(titan_mem_tag_parse("param", &t), TITAN_E_INVALID);
	assert_int_equal(titan_mem_tag_parse("", &t), TITAN_E_INVALID);
	assert_int_equal(titan_mem_tag_parse(NULL, &t), TITAN_E_INVALID);
}

static void test_scripted_peaks(void **state)
{
	struct titan_allocator *a = titan_allocator_new("test", NULL);
	struct titan_mem_stats s;
	(void)state;

	assert_non_null(a);
	void *pa = titan_mem_alloc(a, 1000, P); /* total 1000 */
	void *pb = titan_mem_alloc(a, 500, A);  /* total 1500 */
	void *pc = titan_mem_alloc(a, 300, G);  /* total 1800: peak {P1000 G300 A500} */
	titan_mem_free(a, pb);                  /* total 1300 */
	void *pd = titan_mem_alloc(a, 200, A);  /* total 1500, no new peak */

	titan_mem_get_stats(a, &s);
	expect_tags(s.cur, 1000, 300, 0, 200, 0, 0, 0, 0);
	expect_tags(s.peak, 1000, 300, 0, 500, 0, 0, 0, 0);
	expect_tags(s.peak_at_total, 1000, 300, 0, 500, 0, 0, 0, 0);
	assert_int_equal(s.total_cur, 1500);
	assert_int_equal(s.total_peak, 1800);

	void *pe = titan_mem_alloc(a, 600, O);  /* total 2100: new peak */
	titan_mem_get_stats(a, &s);
	expect_tags(s.peak_at_total, 1000, 300, 600, 200, 0, 0, 0, 0);
	titan_mem_free(a, pc);                  /* total 1800 */
	void *pf = titan_mem_alloc(a, 400, A);  /* A 600 (new tag peak), total 2200 */
	titan_mem_free(a, pa);                  /* total 1200 */

	titan_mem_get_stats(a, &s);
	expect_tags(s.cur, 0, 0, 600, 600, 0, 0, 0, 0);
	expect_tags(s.peak, 1000, 300, 600, 600, 0, 0, 0, 0);
	expect_tags(s.peak_at_total, 1000, 0, 600, 600, 0, 0, 0, 0);
	assert_int_equal(s.total_cur, 1200);
	assert_int_equal(s.total_peak, 2200);
	assert_int_equal(s.n_alloc, 6);
	assert_int_equal(s.n_free, 3);
	assert_int_equal(s.reserved, 1200);

	enum titan_mem_tag tag = TITAN_MEM_OTHER;
	assert_int_equal(titan_mem_size(a, pf, &tag), 400);
	assert_int_equal(tag, A);
	assert_int_equal(titan_mem_size(a, pe, NULL), 600);
	assert_int_equal(titan_mem_size(a, pa, &tag), -1); /* freed */
	assert_int_equal(titan_mem_size(a, NULL, &tag), -1);

	/* Peaks restart at the current values. */
	titan_mem_reset_peak(a);
	titan_mem_get_stats(a, &s);
	expect_tags(s.peak, 0, 0, 600, 600, 0, 0, 0, 0);
	expect_tags(s.peak_at_total, 0, 0, 600, 600, 0, 0, 0, 0);
	assert_int_equal(s.total_peak, 1200);

	void *pw = titan_mem_alloc(a, 50, W);   /* total 1250: new peak */
	titan_mem_free(a, pd);                  /* total 1050 */
	void *pg = titan_mem_alloc(a, 100, C);  /* total 1150 */
	titan_mem_get_stats(a, &s);
	expect_tags(s.cur, 0, 0, 600, 400, 100, 50, 0, 0);
	expect_tags(s.peak, 0, 0, 600, 600, 100, 50, 0, 0);
	expect_tags(s.peak_at_total, 0, 0, 600, 600, 0, 50, 0, 0);
	assert_int_equal(s.total_peak, 1250);

	/* Reaching the same total again keeps the first breakdown. */
	void *ph = titan_mem_alloc(a, 100, D);  /* total 1250 = peak */
	titan_mem_get_stats(a, &s);
	assert_int_equal(s.total_cur, 1250);
	assert_int_equal(s.total_peak, 1250);
	expect_tags(s.peak_at_total, 0, 0, 600, 600, 0, 50, 0, 0);
	titan_mem_free(a, ph);

	/* Stats after everything is freed. */
	titan_mem_free(a, pe);
	titan_mem_free(a, pf);
	titan_mem_free(a, pw);
	titan_mem_free(a, pg);
	titan_mem_free(a, NULL); /* no-op */
	titan_mem_get_stats(a, &s);
	expect_tags(s.cur, 0, 0, 0, 0, 0, 0, 0, 0);
	expect_tags(s.peak, 0, 0, 600, 600, 100, 50, 100, 0);
	assert_int_equal(s.total_cur, 0);
	assert_int_equal(s.total_peak, 1250);
	assert_int_equal(s.n_alloc, 9);
	assert_int_equal(s.n_free, 9);
	titan_allocator_free(a);
	titan_allocator_free(NULL);
}

static void test_zero_size_and_calloc(void **state)
{
	struct titan_allocator *a = titan_allocator_new("z", NULL);
	struct titan_mem_stats s;
	(void)state;

	void *z1 = titan_mem_alloc(a, 0, D);
	void *z2 = titan_mem_alloc(a, 0, D);
	void *z3 = titan_mem_calloc(a, 0, D);
	assert_non_null(z1);
	assert_non_null(z2);
	assert_non_null(z3);
	assert_ptr_not_equal(z1, z2);
	assert_ptr_not_equal(z2, z3);
	assert_int_equal(titan_mem_size(a, z1, NULL), 0);
	titan_mem_get_stats(a, &s);
	assert_int_equal(s.total_cur, 0);
	assert_int_equal(s.total_peak, 0);
	assert_int_equal(s.n_alloc, 3);
	titan_mem_free(a, z1);
	titan_mem_free(a, z2);
	titan_mem_free(a, z3);

	/* Dirty the heap, then calloc blocks of the same sizes. */
	for (int round = 0; round < 2; round++) {
		for (size_t n = 1; n <= (1u << 20); n *= 4) {
			unsigned char *p = round ? titan_mem_calloc(a, n, X) : titan_mem_alloc(a, n, X);
			assert_non_null(p);
			assert_true(((uintptr_t)p & 63) == 0); /* 64-byte aligned */
			if (round) {
				for (size_t i = 0; i < n; i++)
					if (p[i])
						fail_msg("calloc byte %zu of %zu is %d", i, n, p[i]);
			}
			memset(p, 0xAB, n);
			titan_mem_free(a, p);
		}
	}
	titan_mem_get_stats(a, &s);
	assert_int_equal(s.total_cur, 0);
	assert_int_equal(s.peak[X], 1 << 20);
	titan_allocator_free(a);
}

/* ---------------------------------------------------------- custom backend */

struct counting {
	int n_alloc, n_free, n_zero;
	size_t last_alloc, last_free;
	size_t held;
	size_t limit; /* alloc fails above this size */
	pthread_mutex_t mu;
};

static void *count_alloc(void *ctx, size_t n)
{
	struct counting *c = ctx;
	if (n > c->limit)
		return NULL;
	void *p = malloc(n);
	if (!p)
		return NULL;
	pthread_mutex_lock(&c->mu);
	c->n_alloc++;
	c->last_alloc = n;
	c->held += n;
	pthread_mutex_unlock(&c->mu);
	return p;
}

static void count_free(void *ctx, void *p, size_t n)
{
	struct counting *c = ctx;
	pthread_mutex_lock(&c->mu);
	c->n_free++;
	c->last_free = n;
	c->held -= n;
	pthread_mutex_unlock(&c->mu);
	free(p);
}

/* A caching allocator would hold more than is live: report 1 MiB granules. */
static size_t count_reserved(void *ctx)
{
	struct counting *c = ctx;
	return (c->held + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
}

static int count_zero(void *ctx, void *p, size_t n)
{
	struct counting *c = ctx;
	c->n_zero++;
	if (n == 12345) /* a device memset that fails */
		return titan_error(TITAN_E_DEVICE, "memset failed");
	memset(p, 0, n);
	return 0;
}

static void test_custom_backend(void **state)
{
	struct counting c = { .limit = SIZE_MAX, .mu = PTHREAD_MUTEX_INITIALIZER };
	struct titan_mem_backend be = {
		.name = "counting", .alloc = count_alloc, .free = count_free,
		.reserved = count_reserved, .ctx = &c, .zero = count_zero,
	};
	struct titan_mem_stats s;
	(void)state;

	struct titan_allocator *a = titan_allocator_new(NULL, &be);
	assert_non_null(a);
	be.alloc = NULL; /* the allocator keeps its own copy */

	void *p = titan_mem_alloc(a, 3000, P);
	assert_int_equal(c.n_alloc, 1);
	assert_int_equal(c.last_alloc, 3000);
	void *q = titan_mem_calloc(a, 5000, G);
	assert_int_equal(c.n_zero, 1);
	void *z = titan_mem_alloc(a, 0, P);
	assert_int_equal(c.last_alloc, 1);

	titan_mem_get_stats(a, &s);
	assert_int_equal(s.total_cur, 8000);
	assert_int_equal(s.reserved, 1 << 20);

	/* A failing zero op: NULL, the block is given back, the error says why. */
	titan_error_clear();
	assert_null(titan_mem_calloc(a, 12345, O));
	assert_int_equal(c.n_zero, 2);
	assert_int_equal(titan_error_last()->code, TITAN_E_DEVICE);
	assert_non_null(strstr(titan_errmsg(), "optim"));
	assert_non_null(strstr(titan_errmsg(), "memset failed"));
	assert_int_equal(c.n_alloc - c.n_free, 3);
	titan_mem_get_stats(a, &s);
	assert_int_equal(s.total_cur, 8000);
	assert_int_equal(s.cur[O], 0);

	titan_mem_free(a, p);
	assert_int_equal(c.n_free, 2);
	assert_int_equal(c.last_free, 3000);
	titan_mem_free(a, z);
	assert_int_equal(c.last_free, 1);
	titan_mem_free(a, q);
	assert_int_equal(c.last_free, 5000);
	assert_int_equal(c.held, 0);
	titan_mem_get_stats(a, &s);
	assert_int_equal(s.reserved, 0);
	assert_int_equal(c.n_alloc, 4);
	assert_int_equal(c.n_free, 4);
	titan_allocator_free(a);
}

static void test_alloc_failure(void **state)
{
	struct counting c = { .limit = 4096, .mu = PTHREAD_MUTEX_INITIALIZER };
	struct titan_mem_backend be = {
		.name = "small", .alloc = count_alloc, .free = count_free, .ctx = &c,
	};
	struct titan_mem_stats s;
	(void)state;

	struct titan_allocator *a = titan_allocator_new("gpu0", &be);
	void *ok = titan_mem_alloc(a, 4096, W);
	assert_non_null(ok);
	titan_error_clear();
	void *p = titan_mem_alloc(a, (size_t)3 << 30, A);
	assert_null(p);
	assert_int_equal(titan_error_last()->code, TITAN_E_NOMEM);
	assert_non_null(strstr(titan_errmsg(), "activations"));
	assert_non_null(strstr(titan_errmsg(), "3.00 GiB"));
	assert_non_null(strstr(titan_errmsg(), "gpu0"));
	assert_null(titan_mem_calloc(a, 5000, G));
	assert_non_null(strstr(titan_errmsg(), "grads"));

	/* A failure changes nothing. */
	titan_mem_get_stats(a, &s);
	assert_int_equal(s.n_alloc, 1);
	assert_int_equal(s.total_cur, 4096);
	assert_int_equal(s.cur[A], 0);
	assert_int_equal(s.peak[A], 0);
	titan_mem_free(a, ok);
	titan_allocator_free(a);

	/* The host backend fails cleanly on an impossible size. */
	titan_error_clear();
	assert_null(titan_mem_alloc(titan_host_allocator(), SIZE_MAX / 2, P));
	assert_int_equal(titan_error_last()->code, TITAN_E_NOMEM);
	assert_non_null(strstr(titan_errmsg(), "params"));
}

/* ----------------------------------------------------------------- threads */

enum { NTHREADS = 4, ITERS = 20000, KEEP = 64 };

struct worker {
	struct titan_allocator *a;
	uint64_t seed;
	void *live[KEEP];
	size_t live_bytes[KEEP];
	int live_tag[KEEP];
	int64_t n_alloc, n_free;
	int errors; /* cmocka asserts are not thread-safe: count, check later */
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t x = w->seed;

	for (int i = 0; i < ITERS; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		int k = (int)(x % KEEP);
		if (w->live[k]) {
			if (titan_mem_size(w->a, w->live[k], NULL) != (int64_t)w->live_bytes[k])
				w->errors++;
			titan_mem_free(w->a, w->live[k]);
			w->live[k] = NULL;
			w->n_free++;
		} else {
			size_t n = (size_t)(x >> 40) % 5000;
			int tag = (int)((x >> 20) % TITAN_MEM_NTAGS);
			w->live[k] = titan_mem_alloc(w->a, n, (enum titan_mem_tag)tag);
			if (!w->live[k])
				w->errors++;
			w->live_bytes[k] = n;
			w->live_tag[k] = tag;
			w->n_alloc++;
		}
	}
	return NULL;
}

static void run_threads(struct titan_allocator *a)
{
	static struct worker w[NTHREADS];
	pthread_t th[NTHREADS];
	struct titan_mem_stats before, s;
	int64_t cur[TITAN_MEM_NTAGS] = { 0 }, n_alloc = 0, n_free = 0;

	titan_mem_get_stats(a, &before);
	memset(w, 0, sizeof w);
	for (int t = 0; t < NTHREADS; t++) {
		w[t].a = a;
		w[t].seed = 0x12345678ull * (uint64_t)(t + 1) + 1;
		assert_int_equal(pthread_create(&th[t], NULL, worker_main, &w[t]), 0);
	}
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(th[t], NULL);

	for (int t = 0; t < NTHREADS; t++) {
		n_alloc += w[t].n_alloc;
		n_free += w[t].n_free;
		assert_int_equal(w[t].errors, 0);
		for (int k = 0; k < KEEP; k++)
			if (w[t].live[k])
				cur[w[t].live_tag[k]] += (int64_t)w[t].live_bytes[k];
	}
	titan_mem_get_stats(a, &s);
	assert_int_equal(s.n_alloc - before.n_alloc, n_alloc);
	assert_int_equal(s.n_free - before.n_free, n_free);
	int64_t total = 0;
	for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
		assert_int_equal(s.cur[t] - before.cur[t], cur[t]);
		assert_true(s.peak[t] >= s.cur[t]);
		assert_true(s.peak_at_total[t] <= s.peak[t]);
		total += s.peak_at_total[t];
	}
	assert_int_equal(total, s.total_peak);

	for (int t = 0; t < NTHREADS; t++)
		for (int k = 0; k < KEEP; k++)
			titan_mem_free(a, w[t].live[k]);
	titan_mem_get_stats(a, &s);
	for (int t = 0; t < TITAN_MEM_NTAGS; t++)
		assert_int_equal(s.cur[t], before.cur[t]);
	assert_int_equal(s.n_alloc - s.n_free, before.n_alloc - before.n_free);
}

static void test_threads(void **state)
{
	(void)state;
	struct titan_allocator *a = titan_allocator_new("mt", NULL);
	run_threads(a);
	titan_allocator_free(a);
	/* The shared host allocator as well. */
	run_threads(titan_host_allocator());
}

static void test_host_allocator(void **state)
{
	(void)state;
	struct titan_allocator *h = titan_host_allocator();
	assert_ptr_equal(h, titan_host_allocator());
	struct titan_mem_stats before, s;
	titan_mem_get_stats(h, &before);
	char *p = titan_malloc(100, TITAN_MEM_DATA);
	int *q = titan_calloc(64 * sizeof(int), TITAN_MEM_OTHER);
	assert_non_null(p);
	assert_non_null(q);
	for (int i = 0; i < 64; i++)
		assert_int_equal(q[i], 0);
	titan_mem_get_stats(h, &s);
	assert_int_equal(s.cur[TITAN_MEM_DATA] - before.cur[TITAN_MEM_DATA], 100);
	titan_free(p);
	titan_free(q);
	titan_free(NULL);
	titan_mem_get_stats(h, &s);
	assert_int_equal(s.total_cur, before.total_cur);
}

/* ------------------------------------------------------------------- trace */

static uint64_t get_le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

struct rec {
	int kind, tag, phase;
	uint32_t step;
	uint64_t time_ns, bytes, addr;
};

static void test_trace(void **state)
{
	struct titan_allocator *a = titan_allocator_new("cuda:0", NULL);
	FILE *fp = tmpfile();
	(void)state;

	assert_non_null(fp);
	void *before = titan_mem_alloc(a, 7, X); /* not traced */
	uint64_t t_before = titan_unix_time_ns();
	assert_int_equal(titan_mem_trace_start(a, fp), 0);
	uint64_t t_after = titan_unix_time_ns();
	assert_int_equal(titan_mem_trace_start(a, fp), TITAN_E_INVALID);

	titan_mem_set_step(a, 3, 1);
	void *p = titan_mem_alloc(a, 100, P);
	void *q = titan_mem_alloc(a, 0, G);
	titan_mem_set_step(a, 4, 2);
	titan_mem_free(a, p);
	void *r = titan_mem_calloc(a, 1u << 16, A);
	titan_mem_set_step(a, 0x12345678, 0xBEEF);
	titan_mem_free(a, before);
	titan_mem_free(a, r);
	assert_int_equal(titan_mem_trace_stop(a), 0);
	assert_int_equal(titan_mem_trace_stop(a), 0); /* not open: no-op */
	titan_mem_free(a, q);                          /* not traced */

	const struct rec want[] = {
		{ TITAN_MEMTRACE_ALLOC, P, 1, 3, 0, 100, (uintptr_t)p },
		{ TITAN_MEMTRACE_ALLOC, G, 1, 3, 0, 0, (uintptr_t)q },
		{ TITAN_MEMTRACE_FREE, P, 2, 4, 0, 100, (uintptr_t)p },
		{ TITAN_MEMTRACE_ALLOC, A, 2, 4, 0, 1u << 16, (uintptr_t)r },
		{ TITAN_MEMTRACE_FREE, X, 0xBEEF, 0x12345678, 0, 7, (uintptr_t)before },
		{ TITAN_MEMTRACE_FREE, A, 0xBEEF, 0x12345678, 0, 1u << 16, (uintptr_t)r },
	};
	const int nrec = (int)(sizeof want / sizeof want[0]);

	unsigned char buf[4096];
	rewind(fp);
	size_t n = fread(buf, 1, sizeof buf, fp);
	fclose(fp);
	assert_int_equal(n, TITAN_MEMTRACE_HEADER_BYTES + nrec * TITAN_MEMTRACE_RECORD_BYTES);

	assert_memory_equal(buf, "TTNMEM\0\1", 8);
	assert_int_equal(get_le(buf + 8, 4), TITAN_MEMTRACE_VERSION);
	assert_int_equal((int32_t)get_le(buf + 12, 4), titan_get_rank());
	uint64_t start = get_le(buf + 16, 8);
	assert_true(start >= t_before && start <= t_after);
	assert_string_equal((const char *)buf + 24, "cuda:0");
	for (int i = 24 + 6; i < 64; i++)
		assert_int_equal(buf[i], 0);

	uint64_t last_t = 0;
	for (int i = 0; i < nrec; i++) {
		const unsigned char *r8 = buf + TITAN_MEMTRACE_HEADER_BYTES +
					  i * TITAN_MEMTRACE_RECORD_BYTES;
		assert_int_equal(r8[0], want[i].kind);
		assert_int_equal(r8[1], want[i].tag);
		assert_int_equal(get_le(r8 + 2, 2), want[i].phase);
		assert_int_equal(get_le(r8 + 4, 4), want[i].step);
		uint64_t t = get_le(r8 + 8, 8);
		assert_true(t >= last_t);
		assert_true(t < 10ull * 1000 * 1000 * 1000);
		last_t = t;
		assert_int_equal(get_le(r8 + 16, 8), want[i].bytes);
		assert_int_equal(get_le(r8 + 24, 8), want[i].addr);
	}
	titan_allocator_free(a);
}

static void test_trace_write_errors(void **state)
{
	struct titan_allocator *a = titan_allocator_new("io", NULL);
	(void)state;

	/* Writes into a full device fail when the buffer is flushed. */
	FILE *fp = fopen("/dev/full", "w");
	if (fp) {
		assert_int_equal(titan_mem_trace_start(a, fp), 0);
		/* 400 records overflow the stdio buffer: some writes fail here. */
		for (int i = 0; i < 200; i++)
			titan_mem_free(a, titan_mem_alloc(a, 10, O));
		titan_error_clear();
		assert_int_equal(titan_mem_trace_stop(a), TITAN_E_IO);
		assert_int_equal(titan_error_last()->code, TITAN_E_IO);
		assert_non_null(strstr(titan_errmsg(), "io"));
		fclose(fp);

		/* Unbuffered: the header write fails at once. */
		fp = fopen("/dev/full", "w");
		setvbuf(fp, NULL, _IONBF, 0);
		assert_int_equal(titan_mem_trace_start(a, fp), TITAN_E_IO);
		fclose(fp);
	}

	/* A stream opened for reading cannot be written at all. */
	fp = tmpfile();
	FILE *ro = fopen("/proc/self/cmdline", "r");
	assert_non_null(ro);
	assert_int_equal(titan_mem_trace_start(a, ro), TITAN_E_IO);
	fclose(ro);
	fclose(fp);

	/* After errors, a new trace works. */
	fp = tmpfile();
	assert_int_equal(titan_mem_trace_start(a, fp), 0);
	titan_mem_free(a, titan_mem_alloc(a, 10, O));
	assert_int_equal(titan_mem_trace_stop(a), 0);
	assert_int_equal(ftell(fp), 64 + 2 * 32);
	fclose(fp);
	titan_allocator_free(a);
}

/* ------------------------------------------------------- leaks and asserts */

static void test_leak_log(void **state)
{
	(void)state;
	struct titan_allocator *a = titan_allocator_new("leaky", NULL);
	void *p = titan_mem_alloc(a, 1234, TITAN_MEM_COMM);
	void *q = titan_mem_alloc(a, 10, TITAN_MEM_DATA);
	FILE *log = tmpfile();
	enum titan_log_level old = titan_log_get_level();

	titan_log_set_stream(log);
	titan_log_set_level(TITAN_LOG_DEBUG);
	titan_allocator_free(a);
	titan_log_set_level(old);
	titan_log_set_stream(NULL);

	char text[2048] = { 0 };
	rewind(log);
	size_t n = fread(text, 1, sizeof text - 1, log);
	fclose(log);
	assert_true(n > 0);
	assert_non_null(strstr(text, "leaky"));
	assert_non_null(strstr(text, "2 block(s)"));
	assert_non_null(strstr(text, "comm"));
	assert_non_null(strstr(text, "data"));
	/* The blocks were leaked on purpose; host blocks are plain heap memory. */
	free(p);
	free(q);
}

static void expect_abort(void (*fn)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		FILE *devnull = freopen("/dev/null", "w", stderr);
		(void)devnull;
		fn();
		_exit(0);
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGABRT);
}

static void free_foreign(void)
{
	struct titan_allocator *a = titan_allocator_new("x", NULL);
	int local;
	titan_mem_free(a, &local);
}

static void free_twice(void)
{
	struct titan_allocator *a = titan_allocator_new("x", NULL);
	void *p = titan_mem_alloc(a, 8, X);
	titan_mem_free(a, p);
	titan_mem_free(a, p);
}

static void free_other_allocator(void)
{
	struct titan_allocator *a = titan_allocator_new("a", NULL);
	struct titan_allocator *b = titan_allocator_new("b", NULL);
	titan_mem_free(b, titan_mem_alloc(a, 8, X));
}

static void test_bad_free_asserts(void **state)
{
	(void)state;
	expect_abort(free_foreign);
	expect_abort(free_twice);
	expect_abort(free_other_allocator);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tag_names),
		cmocka_unit_test(test_scripted_peaks),
		cmocka_unit_test(test_zero_size_and_calloc),
		cmocka_unit_test(test_custom_backend),
		cmocka_unit_test(test_alloc_failure),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_host_allocator),
		cmocka_unit_test(test_trace),
		cmocka_unit_test(test_trace_write_errors),
		cmocka_unit_test(test_leak_log),
		cmocka_unit_test(test_bad_free_asserts),
	};
	return cmocka_run_group_tests_name("alloc", tests, NULL, NULL);
}
