/*
 * caching.c — the caching allocator (titan/core.h): a titan_mem_backend
 * over a raw one (cudaMalloc/cudaFree in lib/cuda) that keeps freed blocks
 * for reuse, with PyTorch's CUDACachingAllocator rules for rounding, pools,
 * segment sizes, best fit, splitting, coalescing, the release-and-retry on
 * out-of-memory and its statistics (active/reserved bytes and peaks,
 * num_alloc_retries, num_ooms) — what torchtitan's memory line reports.
 *
 * A segment is one raw allocation; it is tiled by a doubly linked chain of
 * blocks in address order, each live (handed out) or free.  Free blocks sit
 * in their pool's array sorted by (size, address), so the best fit is a
 * binary search; live blocks are found by address in an open-addressing
 * hash table.  Every host allocation a call may need (the block record for
 * a split, array and table room) is made before the cache changes, so a
 * failed malloc leaves it as it was.
 */
#include "titan/core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MIN_BLOCK ((size_t)512)               /* kMinBlockSize */
#define SMALL_SIZE ((size_t)1 << 20)          /* kSmallSize: largest small request */
#define SMALL_SEGMENT ((size_t)2 << 20)       /* kSmallBuffer */
#define LARGE_SEGMENT ((size_t)20 << 20)      /* kLargeBuffer */
#define MIN_LARGE_ALLOC ((size_t)10 << 20)    /* kMinLargeAlloc */
#define ROUND_LARGE ((size_t)2 << 20)         /* kRoundLarge */

enum { POOL_SMALL = 0, POOL_LARGE = 1 };

struct cblock {
	uintptr_t ptr;
	size_t size;
	size_t requested;             /* while live */
	struct cblock *prev, *next;   /* neighbours in the segment */
	uint8_t pool;
	bool live;
};

struct pool {
	struct cblock **v;            /* free blocks, sorted by (size, ptr) */
	size_t n, cap;
	size_t nblocks;               /* all blocks of the pool; cap >= nblocks */
};

struct slot {
	uintptr_t key;                /* 0 = empty */
	struct cblock *b;
};

struct titan_caching {
	char name[64];
	struct titan_mem_backend raw;
	int (*mem_info)(void *raw_ctx, int64_t *free_bytes, int64_t *total_bytes);
	pthread_mutex_t mu;
	struct pool pools[2];
	struct slot *tab;             /* live blocks; cap a power of two (or 0) */
	size_t cap, count;
	struct titan_caching_stats st;
};

/* ------------------------------------------------------------ size rules */

/* 0 when the rounded size would overflow. */
static size_t round_size(size_t n)
{
	if (n < MIN_BLOCK)
		return MIN_BLOCK;
	if (n > SIZE_MAX - (MIN_BLOCK - 1))
		return 0;
	return (n + MIN_BLOCK - 1) / MIN_BLOCK * MIN_BLOCK;
}

static int pool_of(size_t size)
{
	return size <= SMALL_SIZE ? POOL_SMALL : POOL_LARGE;
}

/* The raw allocation for a request of `size` (rounded) bytes; 0 = overflow. */
static size_t segment_size(size_t size)
{
	if (size <= SMALL_SIZE)
		return SMALL_SEGMENT;
	if (size < MIN_LARGE_ALLOC)
		return LARGE_SEGMENT;
	if (size > SIZE_MAX - (ROUND_LARGE - 1))
		return 0;
	return (size + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
}

static bool should_split(const struct cblock *b, size_t size)
{
	size_t rest = b->size - size;

	return b->pool == POOL_SMALL ? rest >= MIN_BLOCK : rest > SMALL_SIZE;
}

static bool is_split(const struct cblock *b)
{
	return b->prev || b->next;
}

/* --------------------------------------------------------------- pools */

static bool less(const struct cblock *a, size_t size, uintptr_t ptr)
{
	return a->size < size || (a->size == size && a->ptr < ptr);
}

/* Index of the first free block not less than (size, ptr). */
static size_t lower_bound(const struct pool *p, size_t size, uintptr_t ptr)
{
	size_t lo = 0, hi = p->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (less(p->v[mid], size, ptr))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Room for `more` blocks in pool `k`: 0 or -1 (out of host memory). */
static int pool_reserve(struct titan_caching *c, int k, size_t more)
{
	struct pool *p = &c->pools[k];

	if (p->nblocks + more <= p->cap)
		return 0;
	size_t cap = p->cap ? p->cap * 2 : 64;
	struct cblock **v = realloc(p->v, cap * sizeof(*v));
	if (!v)
		return -1;
	p->v = v;
	p->cap = cap;
	return 0;
}

/* The pool's array always has room: cap >= nblocks >= n + 1 here. */
static void pool_insert(struct titan_caching *c, struct cblock *b)
{
	struct pool *p = &c->pools[b->pool];
	size_t i = lower_bound(p, b->size, b->ptr);

	TITAN_ASSERT(p->n < p->cap);
	memmove(p->v + i + 1, p->v + i, (p->n - i) * sizeof(*p->v));
	p->v[i] = b;
	p->n++;
	if (is_split(b))
		c->st.inactive_split += (int64_t)b->size;
}

static void pool_remove_at(struct titan_caching *c, struct pool *p, size_t i)
{
	struct cblock *b = p->v[i];

	if (is_split(b))
		c->st.inactive_split -= (int64_t)b->size;
	memmove(p->v + i, p->v + i + 1, (p->n - i - 1) * sizeof(*p->v));
	p->n--;
}

static void pool_remove(struct titan_caching *c, struct cblock *b)
{
	struct pool *p = &c->pools[b->pool];
	size_t i = lower_bound(p, b->size, b->ptr);

	TITAN_ASSERT(i < p->n && p->v[i] == b);
	pool_remove_at(c, p, i);
}

/* ---------------------------------------------------- live-block table */

static size_t slot_of(uintptr_t key, size_t mask)
{
	uint64_t h = (uint64_t)key;

	h ^= h >> 29;
	h *= 0xBF58476D1CE4E5B9ull;
	h ^= h >> 32;
	return (size_t)h & mask;
}

static struct slot *find(const struct titan_caching *c, uintptr_t key)
{
	if (!c->cap)
		return NULL;
	size_t mask = c->cap - 1;
	for (size_t i = slot_of(key, mask);; i = (i + 1) & mask) {
		if (c->tab[i].key == key)
			return &c->tab[i];
		if (!c->tab[i].key)
			return NULL;
	}
}

static void put(struct slot *tab, size_t cap, uintptr_t key, struct cblock *b)
{
	size_t mask = cap - 1, i = slot_of(key, mask);

	while (tab[i].key) {
		TITAN_ASSERT(tab[i].key != key);
		i = (i + 1) & mask;
	}
	tab[i].key = key;
	tab[i].b = b;
}

/* Load factor at most 1/2 after one more insert: 0 or -1. */
static int table_reserve(struct titan_caching *c)
{
	if ((c->count + 1) * 2 <= c->cap)
		return 0;
	size_t cap = c->cap ? c->cap * 2 : 256;
	struct slot *tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return -1;
	for (size_t i = 0; i < c->cap; i++)
		if (c->tab[i].key)
			put(tab, cap, c->tab[i].key, c->tab[i].b);
	free(c->tab);
	c->tab = tab;
	c->cap = cap;
	return 0;
}

static void erase(struct titan_caching *c, struct slot *s)
{
	size_t mask = c->cap - 1, i = (size_t)(s - c->tab), j = i;

	for (;;) { /* backward shift */
		j = (j + 1) & mask;
		if (!c->tab[j].key)
			break;
		size_t k = slot_of(c->tab[j].key, mask);
		bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (!stays) {
			c->tab[i] = c->tab[j];
			i = j;
		}
	}
	c->tab[i].key = 0;
	c->tab[i].b = NULL;
	c->count--;
}

/* ------------------------------------------------------------ segments */

static void peak(int64_t cur, int64_t *pk)
{
	if (cur > *pk)
		*pk = cur;
}

/* A new segment of `bytes` from the raw backend as one block in `rec`
 * (not yet in a pool); false when the raw backend fails. */
static bool raw_segment(struct titan_caching *c, size_t bytes, int k, struct cblock *rec)
{
	void *p = c->raw.alloc(c->raw.ctx, bytes);

	if (!p)
		return false;
	*rec = (struct cblock){.ptr = (uintptr_t)p, .size = bytes, .pool = (uint8_t)k};
	c->st.reserved += (int64_t)bytes;
	*(k == POOL_SMALL ? &c->st.reserved_small : &c->st.reserved_large) += (int64_t)bytes;
	peak(c->st.reserved, &c->st.reserved_peak);
	c->st.segments++;
	c->st.num_raw_allocs++;
	return true;
}

/* Returns every free block that is a whole segment to the raw backend. */
static int64_t release_cached(struct titan_caching *c)
{
	int64_t released = 0;

	for (int k = 0; k < 2; k++) {
		struct pool *p = &c->pools[k];
		size_t w = 0;

		for (size_t i = 0; i < p->n; i++) {
			struct cblock *b = p->v[i];

			if (is_split(b)) {
				p->v[w++] = b;
				continue;
			}
			c->raw.free(c->raw.ctx, (void *)b->ptr, b->size);
			released += (int64_t)b->size;
			c->st.reserved -= (int64_t)b->size;
			*(k == POOL_SMALL ? &c->st.reserved_small : &c->st.reserved_large) -=
				(int64_t)b->size;
			c->st.segments--;
			c->st.num_raw_frees++;
			p->nblocks--;
			free(b);
		}
		p->n = w;
	}
	return released;
}

/* ------------------------------------------------------- alloc and free */

static void *fail_oom(struct titan_caching *c, size_t bytes, size_t size, size_t seg)
{
	char req[32], sg[32], act[32], res[32], held[32], cap[48] = "unknown", fr[32];
	int64_t dev_free = -1, dev_total = -1;

	c->st.num_ooms++;
	if (c->mem_info && c->mem_info(c->raw.ctx, &dev_free, &dev_total) < 0) {
		dev_free = dev_total = -1;
		titan_error_clear();
	}
	if (dev_total >= 0)
		titan_format_bytes(cap, sizeof(cap), (double)dev_total);
	titan_format_bytes(req, sizeof(req), (double)size);
	titan_format_bytes(sg, sizeof(sg), (double)seg);
	titan_format_bytes(act, sizeof(act), (double)c->st.active);
	titan_format_bytes(res, sizeof(res), (double)c->st.reserved);
	titan_format_bytes(held, sizeof(held), (double)(c->st.reserved - c->st.active));
	titan_error(TITAN_E_NOMEM,
		    "'%s' is out of memory: tried to allocate %zu bytes (%s rounded, a new %s "
		    "segment); %s active and %s reserved by titan (%s of it reserved but "
		    "unallocated), device capacity %s%s%s%s",
		    c->name, bytes, req, sg, act, res, held, cap,
		    dev_free >= 0 ? " of which " : "",
		    dev_free >= 0 ? titan_format_bytes(fr, sizeof(fr), (double)dev_free) : "",
		    dev_free >= 0 ? " is free" : "");
	return NULL;
}

static void *caching_alloc(void *ctx, size_t bytes)
{
	struct titan_caching *c = ctx;
	size_t size = round_size(bytes), seg = segment_size(size);
	struct cblock *b = NULL, *spare[2] = {NULL, NULL};
	int k = pool_of(size), used = 0;

	if (!size || !seg) {
		titan_error(TITAN_E_NOMEM, "'%s': cannot allocate %zu bytes (too large)", c->name,
			    bytes);
		return NULL;
	}
	pthread_mutex_lock(&c->mu);
	/* host bookkeeping first: records for a new segment and a split's
	 * rest, room for both in the pool, a slot for the live block */
	if (!(spare[0] = malloc(sizeof(struct cblock))) ||
	    !(spare[1] = malloc(sizeof(struct cblock))) || pool_reserve(c, k, 2) < 0 ||
	    table_reserve(c) < 0) {
		free(spare[0]);
		free(spare[1]);
		pthread_mutex_unlock(&c->mu);
		titan_error(TITAN_E_NOMEM, "'%s': out of host memory for the allocator's "
			    "bookkeeping", c->name);
		return NULL;
	}

	struct pool *p = &c->pools[k];
	size_t i = lower_bound(p, size, 0);
	if (i < p->n) { /* best fit */
		b = p->v[i];
		pool_remove_at(c, p, i);
	} else {
		if (!raw_segment(c, seg, k, spare[0])) {
			/* PyTorch's release_cached_blocks, then one retry */
			release_cached(c);
			c->st.num_alloc_retries++;
			if (!raw_segment(c, seg, k, spare[0])) {
				fail_oom(c, bytes, size, seg);
				free(spare[0]);
				free(spare[1]);
				pthread_mutex_unlock(&c->mu);
				return NULL;
			}
		}
		b = spare[used++];
		p->nblocks++;
	}
	if (should_split(b, size)) {
		struct cblock *rest = spare[used++];

		*rest = (struct cblock){.ptr = b->ptr + size, .size = b->size - size,
					.prev = b, .next = b->next, .pool = b->pool};
		if (b->next)
			b->next->prev = rest;
		b->next = rest;
		b->size = size;
		p->nblocks++;
		pool_insert(c, rest);
	}
	while (used < 2)
		free(spare[used++]);
	b->live = true;
	b->requested = bytes;
	put(c->tab, c->cap, b->ptr, b);
	c->count++;
	c->st.requested += (int64_t)bytes;
	peak(c->st.requested, &c->st.requested_peak);
	c->st.active += (int64_t)b->size;
	peak(c->st.active, &c->st.active_peak);
	c->st.active_blocks++;
	pthread_mutex_unlock(&c->mu);
	return (void *)b->ptr;
}

static void caching_free(void *ctx, void *ptr, size_t bytes)
{
	struct titan_caching *c = ctx;
	struct slot *s;
	struct cblock *b, *n;

	(void)bytes;
	if (!ptr)
		return;
	pthread_mutex_lock(&c->mu);
	s = find(c, (uintptr_t)ptr);
	TITAN_ASSERT(s != NULL && "pointer not allocated by this caching allocator");
	b = s->b;
	erase(c, s);
	TITAN_ASSERT(b->live);
	b->live = false;
	c->st.requested -= (int64_t)b->requested;
	c->st.active -= (int64_t)b->size;
	c->st.active_blocks--;
	b->requested = 0;
	/* coalesce with free neighbours: [prev b] then [b next] */
	if ((n = b->prev) && !n->live) {
		pool_remove(c, n);
		b->ptr = n->ptr;
		b->size += n->size;
		b->prev = n->prev;
		if (b->prev)
			b->prev->next = b;
		c->pools[b->pool].nblocks--;
		free(n);
	}
	if ((n = b->next) && !n->live) {
		pool_remove(c, n);
		b->size += n->size;
		b->next = n->next;
		if (b->next)
			b->next->prev = b;
		c->pools[b->pool].nblocks--;
		free(n);
	}
	pool_insert(c, b);
	pthread_mutex_unlock(&c->mu);
}

static size_t caching_reserved(void *ctx)
{
	struct titan_caching *c = ctx;

	pthread_mutex_lock(&c->mu);
	size_t r = (size_t)c->st.reserved;
	pthread_mutex_unlock(&c->mu);
	return r;
}

static int caching_zero(void *ctx, void *ptr, size_t bytes)
{
	struct titan_caching *c = ctx;

	return c->raw.zero(c->raw.ctx, ptr, bytes);
}

/* ------------------------------------------------------------- public */

struct titan_caching *titan_caching_new(const struct titan_mem_backend *raw,
					const struct titan_caching_opts *o)
{
	struct titan_caching *c;
	const char *name = o && o->name ? o->name : raw->name ? raw->name : "caching";

	TITAN_ASSERT(raw && raw->alloc && raw->free);
	if (!(c = calloc(1, sizeof(*c)))) {
		titan_error(TITAN_E_NOMEM, "cannot create the caching allocator of '%s'", name);
		return NULL;
	}
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->raw = *raw;
	c->mem_info = o ? o->mem_info : NULL;
	pthread_mutex_init(&c->mu, NULL);
	return c;
}

void titan_caching_free(struct titan_caching *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	release_cached(c);
	if (c->st.segments && titan_log_get_level() >= TITAN_LOG_DEBUG) {
		char a[32], r[32];

		titan_log_debug("caching allocator '%s': %lld block(s) of %s still live in %lld "
				"segment(s) of %s at release; leaked", c->name,
				(long long)c->st.active_blocks,
				titan_format_bytes(a, sizeof(a), (double)c->st.active),
				(long long)c->st.segments,
				titan_format_bytes(r, sizeof(r), (double)c->st.reserved));
	}
	/* the records of leaked segments go with the cache */
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; i < c->pools[k].n; i++)
			free(c->pools[k].v[i]);
	for (size_t i = 0; i < c->cap; i++)
		if (c->tab[i].key)
			free(c->tab[i].b);
	free(c->pools[0].v);
	free(c->pools[1].v);
	free(c->tab);
	pthread_mutex_unlock(&c->mu);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

void titan_caching_backend(struct titan_caching *c, struct titan_mem_backend *out)
{
	TITAN_ASSERT(c && out);
	*out = (struct titan_mem_backend){
		.name = c->raw.name ? c->raw.name : c->name,
		.alloc = caching_alloc,
		.free = caching_free,
		.reserved = caching_reserved,
		.ctx = c,
		.zero = c->raw.zero ? caching_zero : NULL,
		.alloc_sets_error = true,
	};
}

void titan_caching_get_stats(struct titan_caching *c, struct titan_caching_stats *out)
{
	TITAN_ASSERT(c && out);
	pthread_mutex_lock(&c->mu);
	*out = c->st;
	pthread_mutex_unlock(&c->mu);
}

void titan_caching_reset_peak(struct titan_caching *c)
{
	TITAN_ASSERT(c);
	pthread_mutex_lock(&c->mu);
	c->st.requested_peak = c->st.requested;
	c->st.active_peak = c->st.active;
	c->st.reserved_peak = c->st.reserved;
	pthread_mutex_unlock(&c->mu);
}

int64_t titan_caching_empty_cache(struct titan_caching *c)
{
	TITAN_ASSERT(c);
	pthread_mutex_lock(&c->mu);
	int64_t n = release_cached(c);
	pthread_mutex_unlock(&c->mu);
	return n;
}

/* ------------------------------------------------------------- checks */

#define BAD(...) (rc = titan_error(TITAN_E_INTERNAL, __VA_ARGS__))

/* Walks one segment from its first block, adding it to the recount `r`. */
static int check_segment(struct titan_caching *c, const struct cblock *b,
			 struct titan_caching_stats *r, size_t *free_seen, size_t *blocks)
{
	int64_t seg = 0;
	int rc = 0;

	for (const struct cblock *x = b; x && !rc; x = x->next) {
		if (x->pool != b->pool)
			BAD("'%s': a segment mixes pools", c->name);
		else if (x->next && x->next->prev != x)
			BAD("'%s': broken neighbour links at %#lx", c->name, (unsigned long)x->ptr);
		else if (x->next && x->ptr + x->size != x->next->ptr)
			BAD("'%s': block at %#lx (%zu bytes) does not end where the next begins "
			    "(%#lx)", c->name, (unsigned long)x->ptr, x->size,
			    (unsigned long)x->next->ptr);
		else if (x->size < MIN_BLOCK || x->size % MIN_BLOCK)
			BAD("'%s': block of %zu bytes", c->name, x->size);
		else if (!x->live && x->next && !x->next->live)
			BAD("'%s': two free neighbours at %#lx", c->name, (unsigned long)x->ptr);
		if (rc)
			break;
		if (x->live) {
			struct slot *s = find(c, x->ptr);
			if (!s || s->b != x)
				BAD("'%s': live block %#lx not in the table", c->name,
				    (unsigned long)x->ptr);
			r->active += (int64_t)x->size;
			r->requested += (int64_t)x->requested;
			r->active_blocks++;
		} else {
			struct pool *p = &c->pools[x->pool];
			size_t j = lower_bound(p, x->size, x->ptr);
			if (j >= p->n || p->v[j] != x)
				BAD("'%s': free block %#lx not in its pool", c->name,
				    (unsigned long)x->ptr);
			if (is_split(x))
				r->inactive_split += (int64_t)x->size;
			free_seen[x->pool]++;
		}
		blocks[x->pool]++;
		seg += (int64_t)x->size;
	}
	r->reserved += seg;
	*(b->pool == POOL_SMALL ? &r->reserved_small : &r->reserved_large) += seg;
	r->segments++;
	return rc;
}

int titan_caching_check(struct titan_caching *c)
{
	struct titan_caching_stats r = {0};
	size_t free_seen[2] = {0, 0}, blocks[2] = {0, 0};
	int rc = 0;

	TITAN_ASSERT(c);
	pthread_mutex_lock(&c->mu);
	/* every segment's first block is either free (in a pool) or live (in
	 * the table): walk each segment once, from there */
	for (int k = 0; k < 2 && !rc; k++)
		for (size_t i = 0; i < c->pools[k].n && !rc; i++)
			if (!c->pools[k].v[i]->prev)
				rc = check_segment(c, c->pools[k].v[i], &r, free_seen, blocks);
	for (size_t i = 0; i < c->cap && !rc; i++)
		if (c->tab[i].key && !c->tab[i].b->prev)
			rc = check_segment(c, c->tab[i].b, &r, free_seen, blocks);
	for (int k = 0; k < 2 && !rc; k++) {
		const struct pool *p = &c->pools[k];
		for (size_t i = 1; i < p->n && !rc; i++)
			if (!less(p->v[i - 1], p->v[i]->size, p->v[i]->ptr))
				BAD("'%s': pool %d not sorted at %zu", c->name, k, i);
		if (!rc && free_seen[k] != p->n)
			BAD("'%s': pool %d holds %zu blocks, the segments %zu free ones", c->name,
			    k, p->n, free_seen[k]);
		if (!rc && (blocks[k] != p->nblocks || p->cap < p->nblocks))
			BAD("'%s': pool %d counts %zu blocks (room %zu), the segments hold %zu",
			    c->name, k, p->nblocks, p->cap, blocks[k]);
	}
	const struct titan_caching_stats *st = &c->st;
	if (!rc && (r.active != st->active || r.requested != st->requested ||
		    r.reserved != st->reserved || r.reserved_small != st->reserved_small ||
		    r.reserved_large != st->reserved_large || r.segments != st->segments ||
		    r.active_blocks != st->active_blocks || r.inactive_split != st->inactive_split ||
		    (size_t)r.active_blocks != c->count))
		BAD("'%s': counters differ from a recount: active %lld/%lld, requested "
		    "%lld/%lld, reserved %lld/%lld, segments %lld/%lld, inactive_split %lld/%lld",
		    c->name, (long long)st->active, (long long)r.active, (long long)st->requested,
		    (long long)r.requested, (long long)st->reserved, (long long)r.reserved,
		    (long long)st->segments, (long long)r.segments, (long long)st->inactive_split,
		    (long long)r.inactive_split);
	if (!rc && (st->active_peak < st->active || st->reserved_peak < st->reserved ||
		    st->requested_peak < st->requested || st->reserved < st->active))
		BAD("'%s': a peak below its current value, or active above reserved", c->name);
	pthread_mutex_unlock(&c->mu);
	return rc;
}
