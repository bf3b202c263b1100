/*
 * test_caching.c — the caching allocator (lib/core/caching.c, PyTorch's
 * CUDACachingAllocator rules) over a malloc-backed raw backend with a
 * capacity limit: rounding and segment sizes, reuse without a new raw
 * allocation, splitting and coalescing, separate small/large pools, the
 * release-and-retry on a raw out-of-memory, a true out-of-memory (NULL, the
 * message, num_ooms), exact stats and peaks after a scripted sequence,
 * empty_cache, the tagged allocator on top, threads, and a random
 * alloc/free stress against a shadow model (no overlap between live blocks,
 * patterns written and checked, invariants and counters re-checked).
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

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* ------------------------------------------------ the raw test backend */

struct raw {
	size_t capacity, used;
	int64_t allocs, frees, failures, zeroes;
	pthread_mutex_t mu;
	/* live raw allocations, to check that free gets the allocated size */
	struct {
		void *p;
		size_t n;
	} live[4096];
	int nlive;
};

static void *raw_alloc(void *ctx, size_t bytes)
{
	struct raw *r = ctx;
	void *p = NULL;

	pthread_mutex_lock(&r->mu);
	if (r->used + bytes > r->capacity || r->nlive == 4096 ||
	    posix_memalign(&p, 512, bytes) != 0) {
		r->failures++;
		pthread_mutex_unlock(&r->mu);
		return NULL;
	}
	r->used += bytes;
	r->allocs++;
	r->live[r->nlive].p = p;
	r->live[r->nlive].n = bytes;
	r->nlive++;
	pthread_mutex_unlock(&r->mu);
	return p;
}

static void raw_free(void *ctx, void *ptr, size_t bytes)
{
	struct raw *r = ctx;
	int i;

	pthread_mutex_lock(&r->mu);
	for (i = 0; i < r->nlive && r->live[i].p != ptr; i++)
		;
	assert_true(i < r->nlive);             /* a segment base */
	assert_int_equal(r->live[i].n, bytes); /* freed with its size */
	r->live[i] = r->live[--r->nlive];
	r->used -= bytes;
	r->frees++;
	pthread_mutex_unlock(&r->mu);
	free(ptr);
}

static int raw_zero(void *ctx, void *ptr, size_t bytes)
{
	struct raw *r = ctx;

	r->zeroes++;
	memset(ptr, 0, bytes);
	return 0;
}

static int raw_info(void *ctx, int64_t *free_bytes, int64_t *total_bytes)
{
	struct raw *r = ctx;

	*free_bytes = (int64_t)(r->capacity - r->used);
	*total_bytes = (int64_t)r->capacity;
	return 0;
}

/* A cache over a fresh raw backend of `capacity` bytes. */
struct fix {
	struct raw raw;
	struct titan_caching *c;
	struct titan_mem_backend be;
};

static struct fix *fix_new(size_t capacity, bool info)
{
	struct fix *f = calloc(1, sizeof(*f));
	const struct titan_mem_backend rb = {
		.name = "testdev", .alloc = raw_alloc, .free = raw_free, .ctx = &f->raw,
		.zero = raw_zero,
	};
	const struct titan_caching_opts o = {.name = "testdev:0",
					     .mem_info = info ? raw_info : NULL};

	assert_non_null(f);
	f->raw.capacity = capacity;
	pthread_mutex_init(&f->raw.mu, NULL);
	f->c = titan_caching_new(&rb, &o);
	assert_non_null(f->c);
	titan_caching_backend(f->c, &f->be);
	return f;
}

static void fix_free(struct fix *f)
{
	titan_caching_free(f->c);
	assert_int_equal(f->raw.used, 0); /* everything went back */
	assert_int_equal(f->raw.nlive, 0);
	pthread_mutex_destroy(&f->raw.mu);
	free(f);
}

static void *A(struct fix *f, size_t n)
{
	void *p = f->be.alloc(f->be.ctx, n);

	assert_int_equal(titan_caching_check(f->c), 0);
	return p;
}

static void F(struct fix *f, void *p)
{
	f->be.free(f->be.ctx, p, 0);
	assert_int_equal(titan_caching_check(f->c), 0);
}

static struct titan_caching_stats S(struct fix *f)
{
	struct titan_caching_stats s;

	titan_caching_get_stats(f->c, &s);
	return s;
}

/* ------------------------------------------------------------- tests */

/* One request in a fresh cache: its rounded size and its segment. */
static void expect_rounding(size_t bytes, int64_t active, int64_t segment, bool small)
{
	struct fix *f = fix_new(1024 * MiB, false);
	void *p = A(f, bytes);
	struct titan_caching_stats s = S(f);

	assert_non_null(p);
	assert_int_equal(s.active, active);
	assert_int_equal(s.requested, (int64_t)bytes);
	assert_int_equal(s.reserved, segment);
	assert_int_equal(small ? s.reserved_small : s.reserved_large, segment);
	assert_int_equal(s.segments, 1);
	assert_int_equal(f->raw.allocs, 1);
	assert_int_equal((int64_t)f->raw.used, segment);
	/* the rest of the segment is a free piece of a split segment */
	assert_int_equal(s.inactive_split, segment - active);
	F(f, p);
	s = S(f);
	assert_int_equal(s.active, 0);
	assert_int_equal(s.inactive_split, 0); /* coalesced back into one block */
	assert_int_equal(s.reserved, segment);  /* cached, not returned */
	fix_free(f);
}

static void test_rounding_and_segments(void **state)
{
	(void)state;
	expect_rounding(0, 512, 2 * MiB, true);
	expect_rounding(1, 512, 2 * MiB, true);
	expect_rounding(512, 512, 2 * MiB, true);
	expect_rounding(513, 1024, 2 * MiB, true);
	expect_rounding(1 * MiB, 1 * MiB, 2 * MiB, true);          /* largest small */
	expect_rounding(1 * MiB + 1, 1 * MiB + 512, 20 * MiB, false);
	expect_rounding(10 * MiB - 512, 10 * MiB - 512, 20 * MiB, false);
	expect_rounding(10 * MiB - 1, 10 * MiB, 10 * MiB, false);  /* rounds to 10 MiB */
	expect_rounding(10 * MiB, 10 * MiB, 10 * MiB, false);
	expect_rounding(10 * MiB + 1, 10 * MiB + 512, 12 * MiB, false);
	/* 33 MiB in a 34 MiB segment: a rest of 1 MiB is not split off (the
	 * large pool splits only rests over 1 MiB), so 34 MiB are active */
	expect_rounding(33 * MiB, 34 * MiB, 34 * MiB, false);
	expect_rounding(33 * MiB + 512, 34 * MiB, 34 * MiB, false);
}

static void test_reuse_same_size(void **state)
{
	struct fix *f = fix_new(1024 * MiB, false);
	void *p, *q;

	(void)state;
	/* large: a 20 MiB segment, 4 MiB handed out, freed, handed out again */
	p = A(f, 4 * MiB);
	F(f, p);
	q = A(f, 4 * MiB);
	assert_ptr_equal(p, q);
	/* small */
	void *s1 = A(f, 1000);
	F(f, s1);
	void *s2 = A(f, 1000);
	assert_ptr_equal(s1, s2);
	assert_int_equal(f->raw.allocs, 2); /* one segment per pool, nothing more */
	assert_int_equal(f->raw.frees, 0);
	F(f, q);
	F(f, s2);
	assert_int_equal(S(f).num_alloc_retries, 0);
	fix_free(f);
}

static void test_split_and_coalesce(void **state)
{
	struct fix *f = fix_new(1024 * MiB, false);
	char *a, *b, *c, *d, *e;

	(void)state;
	a = A(f, 2048);
	b = A(f, 2048);
	c = A(f, 2048);
	/* splits lie back to back in one segment */
	assert_ptr_equal(b, a + 2048);
	assert_ptr_equal(c, b + 2048);
	assert_int_equal(S(f).inactive_split, (int64_t)(2 * MiB - 3 * 2048));
	/* a and b freed: neighbours merge into one 4 KiB free block ... */
	F(f, a);
	F(f, b);
	assert_int_equal(S(f).inactive_split, (int64_t)(2 * MiB - 2048));
	/* ... which serves a 4 KiB request (best fit: smaller than the tail) */
	d = A(f, 4096);
	assert_ptr_equal(d, a);
	/* a 1 KiB request is split off the tail, not off a live block */
	e = A(f, 1024);
	assert_ptr_equal(e, c + 2048);
	assert_int_equal(f->raw.allocs, 1);
	/* free in an order that merges left, right and both ways */
	F(f, c); /* between d and e: no free neighbour */
	F(f, d); /* merges right with c */
	F(f, e); /* merges left with d+c and right with the tail */
	struct titan_caching_stats s = S(f);
	assert_int_equal(s.inactive_split, 0);
	assert_int_equal(s.active, 0);
	/* the whole segment is one block again: 1 MiB (small) from its start */
	a = A(f, 1 * MiB);
	assert_ptr_equal(a, d);
	F(f, a);
	assert_int_equal(f->raw.allocs, 1);

	/* large pool: the rest of a split is kept only when over 1 MiB */
	char *l1 = A(f, 19 * MiB);          /* 20 MiB segment, 1 MiB rest: not split */
	s = S(f);
	assert_int_equal(s.active, (int64_t)(20 * MiB));
	assert_int_equal(s.requested, (int64_t)(19 * MiB));
	F(f, l1);
	char *l2 = A(f, 2 * MiB);            /* the 20 MiB block: split, 18 MiB rest */
	assert_ptr_equal(l2, l1);
	char *l3 = A(f, 3 * MiB);
	assert_ptr_equal(l3, l2 + 2 * MiB);
	assert_int_equal(S(f).active, (int64_t)(5 * MiB));
	F(f, l2);
	F(f, l3);
	assert_int_equal(f->raw.allocs, 2);
	fix_free(f);
}

static void test_best_fit(void **state)
{
	struct fix *f = fix_new(1024 * MiB, false);
	char *p[6];

	(void)state;
	/* free holes of 8, 4 and 4 KiB between live blocks: a 4 KiB request
	 * takes the lower-addressed 4 KiB hole, a 6 KiB one the 8 KiB hole */
	size_t sz[6] = {8 * KiB, 512, 4 * KiB, 512, 4 * KiB, 512};
	for (int i = 0; i < 6; i++)
		p[i] = A(f, sz[i]);
	F(f, p[0]);
	F(f, p[2]);
	F(f, p[4]);
	assert_ptr_equal(A(f, 4 * KiB), p[2]);
	assert_ptr_equal(A(f, 6 * KiB), p[0]);
	assert_ptr_equal(A(f, 2 * KiB), p[0] + 6 * KiB); /* the 2 KiB left of the 8 */
	assert_ptr_equal(A(f, 4 * KiB), p[4]);
	titan_caching_free(f->c); /* live blocks: their segment is leaked */
	/* the leaked segment is the test's to free */
	assert_int_equal(f->raw.nlive, 1);
	free(f->raw.live[0].p);
	pthread_mutex_destroy(&f->raw.mu);
	free(f);
}

static void test_pools_separate(void **state)
{
	struct fix *f = fix_new(1024 * MiB, false);
	void *s1, *l1, *s2, *l2;

	(void)state;
	/* a small segment with almost 2 MiB free does not serve 1.5 MiB */
	s1 = A(f, 512);
	l1 = A(f, 1536 * KiB);
	struct titan_caching_stats s = S(f);
	assert_int_equal(f->raw.allocs, 2);
	assert_int_equal(s.reserved_small, (int64_t)(2 * MiB));
	assert_int_equal(s.reserved_large, (int64_t)(20 * MiB));
	/* a large segment with 18.5 MiB free does not serve small requests:
	 * they come from the small segment */
	s2 = A(f, 4096);
	assert_ptr_equal(s2, (char *)s1 + 512);
	/* and with the small segment full, a new small segment */
	void *s3 = A(f, 1 * MiB);
	void *s4 = A(f, 1 * MiB); /* 2 MiB - 4.5 KiB - 1 MiB left: not enough */
	assert_non_null(s3);
	assert_non_null(s4);
	s = S(f);
	assert_int_equal(s.reserved_small, (int64_t)(4 * MiB));
	assert_int_equal(s.reserved_large, (int64_t)(20 * MiB));
	l2 = A(f, 2 * MiB);
	assert_ptr_equal(l2, (char *)l1 + 1536 * KiB);
	assert_int_equal(f->raw.allocs, 3);
	void *all[] = {s1, l1, s2, l2, s3, s4};
	for (int i = 0; i < 6; i++)
		F(f, all[i]);
	fix_free(f);
}

static void test_retry_after_oom(void **state)
{
	struct fix *f = fix_new(24 * MiB, true);
	void *p, *q, *s;

	(void)state;
	p = A(f, 12 * MiB);   /* a 12 MiB segment */
	s = A(f, 100);        /* a 2 MiB small segment */
	F(f, p);              /* cached: 14 MiB reserved, 0.5 KiB active */
	F(f, s);
	assert_int_equal(S(f).reserved, (int64_t)(14 * MiB));
	q = A(f, 16 * MiB);   /* 14 + 16 > 24: the raw backend refuses, the cache
				 is released and the retry succeeds */
	assert_non_null(q);
	struct titan_caching_stats st = S(f);
	assert_int_equal(st.num_alloc_retries, 1);
	assert_int_equal(st.num_ooms, 0);
	assert_int_equal(st.reserved, (int64_t)(16 * MiB));
	assert_int_equal(st.reserved_peak, (int64_t)(16 * MiB));
	assert_int_equal(st.num_raw_frees, 2);
	assert_int_equal(st.num_raw_allocs, 3);
	assert_int_equal(f->raw.failures, 1);
	F(f, q);
	fix_free(f);
}

static void test_true_oom(void **state)
{
	struct fix *f = fix_new(24 * MiB, true);
	char want[256], cap[32], fr[32];
	void *p, *q;

	(void)state;
	p = A(f, 12 * MiB);
	titan_error_clear();
	q = A(f, 16 * MiB);
	assert_null(q);
	struct titan_caching_stats s = S(f);
	assert_int_equal(s.num_alloc_retries, 1); /* retried, as PyTorch does */
	assert_int_equal(s.num_ooms, 1);
	assert_int_equal(s.reserved, (int64_t)(12 * MiB)); /* the live segment stays */
	assert_int_equal(titan_error_last()->code, TITAN_E_NOMEM);
	const char *m = titan_errmsg();
	assert_non_null(strstr(m, "'testdev:0' is out of memory"));
	assert_non_null(strstr(m, "tried to allocate 16777216 bytes"));
	assert_non_null(strstr(m, "12.00 MiB active and 12.00 MiB reserved by titan"));
	snprintf(want, sizeof(want), "device capacity %s of which %s is free",
		 titan_format_bytes(cap, sizeof(cap), 24.0 * MiB),
		 titan_format_bytes(fr, sizeof(fr), 12.0 * MiB));
	assert_non_null(strstr(m, want));
	/* smaller requests still work after an OOM (10 MiB: a 10 MiB segment;
	 * 8 MiB would need a 20 MiB one) */
	q = A(f, 10 * MiB);
	assert_non_null(q);
	F(f, q);
	F(f, p);

	/* through the tagged allocator: NULL, the cache's message prefixed */
	struct titan_allocator *a = titan_allocator_new("dev", &f->be);
	assert_non_null(a);
	assert_null(titan_mem_alloc(a, 30 * MiB, TITAN_MEM_ACTIVATIONS));
	m = titan_errmsg();
	assert_int_equal(titan_error_last()->code, TITAN_E_NOMEM);
	const char *want2 = "cannot allocate 30.00 MiB for activations on 'dev': 'testdev:0' "
			    "is out of memory: tried to allocate 31457280 bytes";
	assert_true(strncmp(m, want2, strlen(want2)) == 0);
	assert_int_equal(S(f).num_ooms, 2);
	titan_allocator_free(a);
	fix_free(f);

	/* without mem_info the capacity is unknown */
	f = fix_new(4 * MiB, false);
	assert_null(A(f, 5 * MiB));
	assert_non_null(strstr(titan_errmsg(), "device capacity unknown"));
	fix_free(f);
}

static void test_scripted_stats(void **state)
{
	struct fix *f = fix_new(1024 * MiB, false);
	struct titan_caching_stats s;
	char *a, *b, *c, *c2, *d;

	(void)state;
	a = A(f, 1000);          /* 1024 active, a 2 MiB small segment */
	b = A(f, 3 * MiB + 7);   /* 3 MiB + 512 active, a 20 MiB large segment */
	c = A(f, 12 * MiB);      /* best fit: the 20 MiB segment's rest, split */
	assert_ptr_equal(c, b + 3 * MiB + 512);
	c2 = A(f, 24 * MiB);     /* a 24 MiB segment of its own, not split */
	s = S(f);
	assert_int_equal(s.requested, 1000 + 3 * MiB + 7 + 12 * MiB + 24 * MiB);
	assert_int_equal(s.active, 1024 + 3 * MiB + 512 + 12 * MiB + 24 * MiB);
	assert_int_equal(s.reserved, 2 * MiB + 20 * MiB + 24 * MiB);
	assert_int_equal(s.reserved_small, 2 * MiB);
	assert_int_equal(s.reserved_large, 44 * MiB);
	assert_int_equal(s.segments, 3);
	assert_int_equal(s.active_blocks, 4);
	assert_int_equal(s.inactive_split, (2 * MiB - 1024) + (5 * MiB - 512));
	F(f, c);                 /* merges with the free rest after it */
	assert_int_equal(S(f).inactive_split, (2 * MiB - 1024) + (17 * MiB - 512));
	F(f, b);                 /* and the segment is whole again */
	assert_int_equal(S(f).inactive_split, 2 * MiB - 1024);
	d = A(f, 5 * MiB);       /* best fit: the whole 20 MiB segment, split */
	assert_ptr_equal(d, b);
	F(f, c2);
	s = S(f);
	assert_int_equal(s.requested, 1000 + 5 * MiB);
	assert_int_equal(s.requested_peak, 1000 + 3 * MiB + 7 + 12 * MiB + 24 * MiB);
	assert_int_equal(s.active, 1024 + 5 * MiB);
	assert_int_equal(s.active_peak, 1024 + 3 * MiB + 512 + 12 * MiB + 24 * MiB);
	assert_int_equal(s.reserved, 46 * MiB);
	assert_int_equal(s.reserved_peak, 46 * MiB);
	assert_int_equal(s.active_blocks, 2);
	assert_int_equal(s.inactive_split, (2 * MiB - 1024) + 15 * MiB);
	titan_caching_reset_peak(f->c);
	s = S(f);
	assert_int_equal(s.active_peak, s.active);
	assert_int_equal(s.reserved_peak, s.reserved);
	assert_int_equal(s.requested_peak, s.requested);
	/* empty_cache: only c2's segment, whole and free, goes back */
	assert_int_equal(titan_caching_empty_cache(f->c), 24 * MiB);
	s = S(f);
	assert_int_equal(s.reserved, 22 * MiB);
	assert_int_equal(s.reserved_peak, 46 * MiB); /* a peak stays until reset */
	assert_int_equal(s.reserved_large, 20 * MiB);
	assert_int_equal(s.segments, 2);
	assert_int_equal(s.num_raw_allocs, 3);
	assert_int_equal(s.num_raw_frees, 1);
	/* a new peak after the reset */
	c = A(f, 30 * MiB);
	F(f, c);
	s = S(f);
	assert_int_equal(s.active_peak, 1024 + 5 * MiB + 30 * MiB);
	assert_int_equal(s.reserved_peak, 52 * MiB);
	assert_int_equal(s.requested_peak, 1000 + 5 * MiB + 30 * MiB);
	F(f, a);
	F(f, d);
	s = S(f);
	assert_int_equal(s.requested, 0);
	assert_int_equal(s.active, 0);
	assert_int_equal(s.active_blocks, 0);
	assert_int_equal(s.inactive_split, 0);
	assert_int_equal(s.num_alloc_retries, 0);
	assert_int_equal(s.num_ooms, 0);
	fix_free(f);
}

static void test_empty_cache(void **state)
{
	struct fix *f = fix_new(1024 * MiB, false);
	void *p[8];

	(void)state;
	/* 10, 12, ..., 24 MiB: each fills a segment of its own exactly */
	for (int i = 0; i < 8; i++)
		p[i] = A(f, (size_t)(10 + 2 * i) * MiB);
	/* a small segment with one block live and one freed: split, kept */
	void *s1 = A(f, 1000), *s2 = A(f, 1000);
	F(f, s2);
	assert_int_equal(S(f).reserved, (10 + 12 + 14 + 16 + 18 + 20 + 22 + 24 + 2) * (int64_t)MiB);
	assert_int_equal(S(f).segments, 9);
	for (int i = 0; i < 8; i += 2)
		F(f, p[i]);
	assert_int_equal(titan_caching_empty_cache(f->c), (10 + 14 + 18 + 22) * (int64_t)MiB);
	assert_int_equal(S(f).reserved, (12 + 16 + 20 + 24 + 2) * (int64_t)MiB);
	assert_int_equal((int64_t)f->raw.used, S(f).reserved);
	assert_int_equal(titan_caching_empty_cache(f->c), 0); /* nothing more */
	for (int i = 1; i < 8; i += 2)
		F(f, p[i]);
	F(f, s1);
	assert_int_equal(titan_caching_empty_cache(f->c), (12 + 16 + 20 + 24 + 2) * (int64_t)MiB);
	struct titan_caching_stats s = S(f);
	assert_int_equal(s.reserved, 0);
	assert_int_equal(s.segments, 0);
	assert_int_equal(s.num_raw_frees, 9);
	assert_int_equal(f->raw.used, 0);
	/* the cache works again afterwards */
	void *q = A(f, 100);
	assert_non_null(q);
	F(f, q);
	fix_free(f);
}

static void test_tagged_allocator_on_top(void **state)
{
	struct fix *f = fix_new(1024 * MiB, false);
	struct titan_mem_stats ms;
	struct titan_allocator *a;

	(void)state;
	assert_true(f->be.alloc_sets_error);
	assert_non_null(f->be.zero);
	a = titan_allocator_new("dev", &f->be);
	assert_non_null(a);
	float *x = titan_mem_calloc(a, 1000 * sizeof(float), TITAN_MEM_PARAMS);
	assert_non_null(x);
	assert_int_equal(f->raw.zeroes, 1); /* the raw backend's zero, not memset */
	for (int i = 0; i < 1000; i++)
		assert_true(x[i] == 0.0f);
	void *y = titan_mem_alloc(a, 0, TITAN_MEM_OTHER);
	assert_non_null(y);
	titan_mem_get_stats(a, &ms);
	assert_int_equal(ms.total_cur, 4000);         /* exact, as requested */
	assert_int_equal(ms.reserved, (int64_t)(2 * MiB)); /* the cache's */
	assert_int_equal(S(f).active, 4096 + 512);
	titan_mem_free(a, x);
	titan_mem_free(a, y);
	titan_mem_get_stats(a, &ms);
	assert_int_equal(ms.total_cur, 0);
	assert_int_equal(ms.reserved, (int64_t)(2 * MiB));
	titan_allocator_free(a);
	fix_free(f);

	/* a raw backend without zero: memset (host memory) */
	struct raw r = {.capacity = 64 * MiB};
	pthread_mutex_init(&r.mu, NULL);
	const struct titan_mem_backend rb = {.alloc = raw_alloc, .free = raw_free, .ctx = &r};
	struct titan_caching *c = titan_caching_new(&rb, NULL);
	struct titan_mem_backend be;
	titan_caching_backend(c, &be);
	assert_null(be.zero);
	titan_caching_free(c);
	pthread_mutex_destroy(&r.mu);
}

/* ----------------------------------------------------------- threads */

struct worker {
	struct fix *f;
	unsigned seed;
	int bad;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	unsigned char *live[16] = {0};
	size_t size[16] = {0};
	uint64_t x = w->seed * 0x9E3779B97F4A7C15ull + 1;

	for (int it = 0; it < 3000; it++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int k = (int)(x % 16);
		if (live[k]) {
			for (size_t i = 0; i < size[k]; i++)
				if (live[k][i] != (unsigned char)(w->seed + k))
					w->bad++;
			w->f->be.free(w->f->be.ctx, live[k], size[k]);
			live[k] = NULL;
		} else {
			size[k] = 1 + (size_t)(x >> 20) % (x & 1 ? 3000 : 200000);
			live[k] = w->f->be.alloc(w->f->be.ctx, size[k]);
			if (!live[k]) {
				w->bad++;
				continue;
			}
			memset(live[k], (unsigned char)(w->seed + k), size[k]);
		}
	}
	for (int k = 0; k < 16; k++)
		if (live[k])
			w->f->be.free(w->f->be.ctx, live[k], size[k]);
	return NULL;
}

static void test_threads(void **state)
{
	struct fix *f = fix_new(1024 * MiB, false);
	struct worker w[4];
	pthread_t t[4];

	(void)state;
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){.f = f, .seed = (unsigned)i + 1};
		assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(w[i].bad, 0);
	}
	assert_int_equal(titan_caching_check(f->c), 0);
	assert_int_equal(S(f).active, 0);
	fix_free(f);
}

/* ------------------------------------------------------------ stress */

struct shadow {
	unsigned char *p;
	size_t n, rounded;
	uint32_t tag;
};

static uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	return *s = x;
}

/* The pattern: the first and last KiB of a block and a byte every 4 KiB
 * (big blocks stay cheap). */
static void pattern_at(struct shadow *b, size_t i, bool check)
{
	unsigned char v = (unsigned char)(b->tag * 131u + (uint32_t)i * 7u);

	if (check)
		assert_int_equal(b->p[i], v);
	else
		b->p[i] = v;
}

static void pattern(struct shadow *b, bool check)
{
	for (size_t i = 0; i < b->n && i < 1024; i++)
		pattern_at(b, i, check);
	for (size_t i = b->n > 1024 ? b->n - 1024 : 0; i < b->n; i++)
		pattern_at(b, i, check);
	for (size_t i = 0; i < b->n; i += 4096)
		pattern_at(b, i, check);
}

static size_t rounded(size_t n)
{
	return n < 512 ? 512 : (n + 511) / 512 * 512;
}

static void test_stress(void **state)
{
	enum { MAXLIVE = 256, STEPS = 20000 };
	struct fix *f = fix_new(192 * MiB, true);
	struct shadow live[MAXLIVE];
	int nlive = 0;
	int64_t req = 0, act = 0, peak_act = 0, nulls = 0, ooms_seen = 0;
	uint64_t s = 0x5EED5EEDull;
	const char *env = getenv("TITAN_TEST_SEED");

	(void)state;
	if (env && *env)
		s = strtoull(env, NULL, 0) | 1;
	printf("# stress seed %#llx (TITAN_TEST_SEED)\n", (unsigned long long)s);
	for (int step = 0; step < STEPS; step++) {
		uint64_t r = rnd(&s);
		bool do_alloc = nlive == 0 || (nlive < MAXLIVE && r % 100 < 55);

		if (do_alloc) {
			size_t n;
			uint64_t kind = rnd(&s) % 100;
			if (kind < 60)
				n = rnd(&s) % (8 * KiB);               /* small, often tiny */
			else if (kind < 85)
				n = rnd(&s) % (1 * MiB + 1);           /* small, up to 1 MiB */
			else if (kind < 97)
				n = 1 * MiB + rnd(&s) % (9 * MiB);     /* 1-10 MiB: 20 MiB segments */
			else
				n = 10 * MiB + rnd(&s) % (14 * MiB);   /* rounded to 2 MiB */
			int64_t ooms = S(f).num_ooms, act0 = S(f).active;
			unsigned char *p = A(f, n);
			if (!p) {
				/* refused only when the cache could not get room */
				assert_int_equal(S(f).num_ooms, ooms + 1);
				assert_int_equal(titan_error_last()->code, TITAN_E_NOMEM);
				nulls++;
				continue;
			}
			/* the block: n rounded to 512, or in the large pool up to
			 * 1 MiB more (a rest not worth splitting off) */
			size_t rn = (size_t)(S(f).active - act0);
			assert_true(rn == rounded(n) ||
				    (n > 1 * MiB && rn > rounded(n) && rn <= rounded(n) + 1 * MiB &&
				     rn % 512 == 0));
			/* no overlap with any live block */
			for (int i = 0; i < nlive; i++)
				assert_true(p + rn <= live[i].p || live[i].p + live[i].rounded <= p);
			assert_int_equal((uintptr_t)p % 512, 0);
			live[nlive] = (struct shadow){p, n, rn, (uint32_t)step};
			pattern(&live[nlive], false);
			nlive++;
			req += (int64_t)n;
			act += (int64_t)rn;
			if (act > peak_act)
				peak_act = act;
		} else {
			int i = (int)(rnd(&s) % (uint64_t)nlive);
			pattern(&live[i], true);
			F(f, live[i].p);
			req -= (int64_t)live[i].n;
			act -= (int64_t)live[i].rounded;
			live[i] = live[--nlive];
		}
		struct titan_caching_stats st = S(f);
		assert_int_equal(st.requested, req);
		assert_int_equal(st.active, act);
		assert_int_equal(st.active_peak, peak_act);
		assert_int_equal(st.reserved, (int64_t)f->raw.used);
		assert_true(st.reserved <= (int64_t)(192 * MiB));
		ooms_seen = st.num_ooms;
		if (step % 5000 == 4999) {
			titan_caching_empty_cache(f->c);
			assert_int_equal(titan_caching_check(f->c), 0);
		}
	}
	/* every live block still holds its pattern */
	for (int i = 0; i < nlive; i++) {
		pattern(&live[i], true);
		F(f, live[i].p);
	}
	struct titan_caching_stats st = S(f);
	printf("# %lld refused, %lld retries, %lld raw allocs, peak reserved %lld MiB\n",
	       (long long)nulls, (long long)st.num_alloc_retries, (long long)st.num_raw_allocs,
	       (long long)(st.reserved_peak >> 20));
	assert_int_equal(st.num_ooms, nulls);
	assert_int_equal(ooms_seen, nulls);
	assert_true(st.num_alloc_retries >= st.num_ooms);
	assert_true(st.num_alloc_retries > 0); /* the limit was reached */
	assert_true(st.num_raw_allocs < STEPS / 4); /* the cache was used */
	assert_int_equal(st.active, 0);
	assert_int_equal(st.requested, 0);
	assert_int_equal(titan_caching_empty_cache(f->c), st.reserved);
	assert_int_equal(f->raw.used, 0);
	fix_free(f);
}

/* ----------------------------------------------------------- asserts */

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
	struct fix *f = fix_new(64 * MiB, false);
	char local[512];

	f->be.free(f->be.ctx, local, sizeof(local));
}

static void free_twice(void)
{
	struct fix *f = fix_new(64 * MiB, false);
	void *p = f->be.alloc(f->be.ctx, 100);

	f->be.free(f->be.ctx, p, 100);
	f->be.free(f->be.ctx, p, 100);
}

static void test_asserts(void **state)
{
	(void)state;
	expect_abort(free_foreign);
	expect_abort(free_twice);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rounding_and_segments),
		cmocka_unit_test(test_reuse_same_size),
		cmocka_unit_test(test_split_and_coalesce),
		cmocka_unit_test(test_best_fit),
		cmocka_unit_test(test_pools_separate),
		cmocka_unit_test(test_retry_after_oom),
		cmocka_unit_test(test_true_oom),
		cmocka_unit_test(test_scripted_stats),
		cmocka_unit_test(test_empty_cache),
		cmocka_unit_test(test_tagged_allocator_on_top),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_stress),
		cmocka_unit_test(test_asserts),
	};
	return cmocka_run_group_tests_name("caching", tests, NULL, NULL);
}
