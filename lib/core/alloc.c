/*
 * alloc.c — the tagged allocator: every block is counted under a tag
 * (params, grads, optim, activations, ...) with exact current and peak bytes
 * per tag and in total, the per-tag breakdown at the total peak, and an
 * optional binary event trace for titan-memprof.  The counterpart of
 * torchtitan's device memory monitor, but exact rather than sampled.
 *
 * Blocks carry no header: live pointers sit in an open-addressing hash table
 * (linear probing, backward-shift deletion), so the same code accounts for
 * device pointers that the host cannot touch.
 */
#include "titan/core.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct block {
	uintptr_t key; /* 0 = empty slot */
	uint64_t bytes;
	uint8_t tag;
};

struct titan_allocator {
	char name[64];
	struct titan_mem_backend be;
	pthread_mutex_t mu;

	struct block *tab; /* cap slots, cap a power of two (or 0) */
	size_t cap, count;

	struct titan_mem_stats st; /* .reserved unused: filled on read */

	FILE *trace;
	uint64_t trace_t0;
	int trace_errno; /* first write error, 0 when none */
	uint32_t step;
	uint16_t phase;
};

static const char *const tag_names[TITAN_MEM_NTAGS] = {
	"params", "grads", "optim", "activations", "comm", "workspace", "data", "other",
};

const char *titan_mem_tag_name(enum titan_mem_tag tag)
{
	return (unsigned)tag < TITAN_MEM_NTAGS ? tag_names[tag] : "unknown";
}

int titan_mem_tag_parse(const char *name, enum titan_mem_tag *out)
{
	for (int t = 0; name && t < TITAN_MEM_NTAGS; t++)
		if (!strcmp(name, tag_names[t])) {
			*out = (enum titan_mem_tag)t;
			return 0;
		}
	return TITAN_E_INVALID;
}

/* ------------------------------------------------------------ host backend */

static void *host_alloc(void *ctx, size_t bytes)
{
	void *p;
	(void)ctx;
	return posix_memalign(&p, 64, bytes) ? NULL : p;
}

static void host_free(void *ctx, void *ptr, size_t bytes)
{
	(void)ctx;
	(void)bytes;
	free(ptr);
}

static const struct titan_mem_backend host_backend = {
	.name = "host", .alloc = host_alloc, .free = host_free,
};

/* -------------------------------------------------------------- hash table */

static inline size_t slot_of(uintptr_t key, size_t mask)
{
	uint64_t h = (uint64_t)key;
	h ^= h >> 29;
	h *= 0xBF58476D1CE4E5B9ull;
	h ^= h >> 32;
	return (size_t)h & mask;
}

static struct block *find(const struct titan_allocator *a, uintptr_t key)
{
	if (!a->cap)
		return NULL;
	size_t mask = a->cap - 1;
	for (size_t i = slot_of(key, mask);; i = (i + 1) & mask) {
		if (a->tab[i].key == key)
			return &a->tab[i];
		if (!a->tab[i].key)
			return NULL;
	}
}

static void put(struct block *tab, size_t cap, const struct block *b)
{
	size_t mask = cap - 1, i = slot_of(b->key, mask);
	while (tab[i].key) {
		/* The backend handed out a pointer that is still live. */
		TITAN_ASSERT(tab[i].key != b->key);
		i = (i + 1) & mask;
	}
	tab[i] = *b;
}

/* Keeps the load factor at most 1/2.  Returns 0 or -1 (out of memory). */
static int reserve_slot(struct titan_allocator *a)
{
	if ((a->count + 1) * 2 <= a->cap)
		return 0;
	size_t cap = a->cap ? a->cap * 2 : 256;
	struct block *tab = calloc(cap, sizeof *tab);
	if (!tab)
		return -1;
	for (size_t i = 0; i < a->cap; i++)
		if (a->tab[i].key)
			put(tab, cap, &a->tab[i]);
	free(a->tab);
	a->tab = tab;
	a->cap = cap;
	return 0;
}

static void erase(struct titan_allocator *a, struct block *b)
{
	size_t mask = a->cap - 1, i = (size_t)(b - a->tab), j = i;

	/* Backward shift: pull later entries of the probe run into the hole
	 * unless their home slot lies cyclically in (i, j]. */
	for (;;) {
		j = (j + 1) & mask;
		if (!a->tab[j].key)
			break;
		size_t k = slot_of(a->tab[j].key, mask);
		bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (!stays) {
			a->tab[i] = a->tab[j];
			i = j;
		}
	}
	a->tab[i].key = 0;
	a->count--;
}

/* ------------------------------------------------------------------- trace */

static void put_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* Called with the lock held. */
static void trace_event(struct titan_allocator *a, int kind, int tag,
			uint64_t bytes, uintptr_t addr)
{
	unsigned char r[TITAN_MEMTRACE_RECORD_BYTES];

	if (!a->trace || a->trace_errno)
		return;
	r[0] = (unsigned char)kind;
	r[1] = (unsigned char)tag;
	put_le(r + 2, a->phase, 2);
	put_le(r + 4, a->step, 4);
	put_le(r + 8, titan_time_ns() - a->trace_t0, 8);
	put_le(r + 16, bytes, 8);
	put_le(r + 24, (uint64_t)addr, 8);
	errno = 0;
	if (fwrite(r, sizeof r, 1, a->trace) != 1)
		a->trace_errno = errno ? errno : EIO;
}

int titan_mem_trace_start(struct titan_allocator *a, FILE *fp)
{
	unsigned char h[TITAN_MEMTRACE_HEADER_BYTES] = { 0 };
	int rc = 0;

	TITAN_ASSERT(a && fp);
	pthread_mutex_lock(&a->mu);
	if (a->trace) {
		rc = titan_error(TITAN_E_INVALID, "a memory trace is already open for '%s'",
				 a->name);
		goto out;
	}
	uint64_t t0 = titan_time_ns(), unix0 = titan_unix_time_ns();
	memcpy(h, TITAN_MEMTRACE_MAGIC, 8);
	put_le(h + 8, TITAN_MEMTRACE_VERSION, 4);
	put_le(h + 12, (uint32_t)titan_get_rank(), 4);
	put_le(h + 16, unix0, 8);
	memcpy(h + 24, a->name, strnlen(a->name, 39)); /* NUL padded */
	errno = 0;
	if (fwrite(h, sizeof h, 1, fp) != 1) {
		rc = titan_error(TITAN_E_IO, "cannot write memory trace of '%s': %s", a->name,
				 strerror(errno ? errno : EIO));
		goto out;
	}
	a->trace = fp;
	a->trace_t0 = t0;
	a->trace_errno = 0;
out:
	pthread_mutex_unlock(&a->mu);
	return rc;
}

int titan_mem_trace_stop(struct titan_allocator *a)
{
	TITAN_ASSERT(a);
	pthread_mutex_lock(&a->mu);
	FILE *fp = a->trace;
	int err = a->trace_errno;
	a->trace = NULL;
	a->trace_errno = 0;
	pthread_mutex_unlock(&a->mu);

	if (!fp)
		return 0;
	errno = 0;
	if (fflush(fp) != 0 && !err)
		err = errno ? errno : EIO;
	if (!err && ferror(fp))
		err = EIO;
	if (err)
		return titan_error(TITAN_E_IO, "cannot write memory trace of '%s': %s", a->name,
				   strerror(err));
	return 0;
}

void titan_mem_set_step(struct titan_allocator *a, uint32_t step, uint16_t phase)
{
	TITAN_ASSERT(a);
	pthread_mutex_lock(&a->mu);
	a->step = step;
	a->phase = phase;
	pthread_mutex_unlock(&a->mu);
}

/* --------------------------------------------------------------- lifecycle */

static void init_fields(struct titan_allocator *a, const char *name,
			const struct titan_mem_backend *backend)
{
	memset(a, 0, sizeof *a);
	a->be = backend ? *backend : host_backend;
	TITAN_ASSERT(a->be.alloc && a->be.free);
	if (!name)
		name = a->be.name ? a->be.name : "unnamed";
	snprintf(a->name, sizeof a->name, "%s", name);
	pthread_mutex_init(&a->mu, NULL);
}

struct titan_allocator *titan_allocator_new(const char *name,
					    const struct titan_mem_backend *backend)
{
	struct titan_allocator *a = malloc(sizeof *a);
	if (!a) {
		titan_error(TITAN_E_NOMEM, "cannot create allocator '%s'", name ? name : "");
		return NULL;
	}
	init_fields(a, name, backend);
	return a;
}

static struct titan_allocator host_allocator;
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void host_init(void)
{
	init_fields(&host_allocator, "host", NULL);
}

struct titan_allocator *titan_host_allocator(void)
{
	pthread_once(&host_once, host_init);
	return &host_allocator;
}

void titan_allocator_free(struct titan_allocator *a)
{
	if (!a)
		return;
	TITAN_ASSERT(a != &host_allocator);
	if (a->count && titan_log_get_level() >= TITAN_LOG_DEBUG) {
		char buf[32];
		size_t shown = 0;
		titan_log_debug("allocator '%s': %zu block(s), %s, still live at release; leaked",
				a->name, a->count,
				titan_format_bytes(buf, sizeof buf, (double)a->st.total_cur));
		for (size_t i = 0; i < a->cap; i++) {
			const struct block *b = &a->tab[i];
			if (!b->key)
				continue;
			if (++shown > 32) {
				titan_log_debug("  ... and %zu more", a->count - 32);
				break;
			}
			titan_log_debug("  leaked %s for %s at %p",
					titan_format_bytes(buf, sizeof buf, (double)b->bytes),
					tag_names[b->tag], (void *)b->key);
		}
	}
	free(a->tab);
	pthread_mutex_destroy(&a->mu);
	free(a);
}

/* ------------------------------------------------------- alloc/free/stats */

static void *fail_nomem(struct titan_allocator *a, size_t bytes, enum titan_mem_tag tag)
{
	char buf[32];
	titan_error(TITAN_E_NOMEM, "cannot allocate %s for %s on '%s'",
		    titan_format_bytes(buf, sizeof buf, (double)bytes), tag_names[tag], a->name);
	return NULL;
}

void *titan_mem_alloc(struct titan_allocator *a, size_t bytes, enum titan_mem_tag tag)
{
	TITAN_ASSERT(a);
	TITAN_ASSERT((unsigned)tag < TITAN_MEM_NTAGS);
	if (bytes > (size_t)INT64_MAX)
		return fail_nomem(a, bytes, tag);

	/* Zero-byte requests get a real 1-byte block so pointers stay unique. */
	size_t real = bytes ? bytes : 1;
	void *p = a->be.alloc(a->be.ctx, real);
	if (!p && a->be.alloc_sets_error) {
		char buf[32];
		titan_error_prefix("cannot allocate %s for %s on '%s'",
				   titan_format_bytes(buf, sizeof buf, (double)bytes), tag_names[tag],
				   a->name);
		return NULL;
	}
	if (!p)
		return fail_nomem(a, bytes, tag);

	pthread_mutex_lock(&a->mu);
	if (reserve_slot(a) < 0) {
		pthread_mutex_unlock(&a->mu);
		a->be.free(a->be.ctx, p, real);
		return fail_nomem(a, bytes, tag);
	}
	struct block b = { (uintptr_t)p, bytes, (uint8_t)tag };
	put(a->tab, a->cap, &b);
	a->count++;

	struct titan_mem_stats *st = &a->st;
	int64_t n = (int64_t)bytes;
	st->cur[tag] += n;
	if (st->cur[tag] > st->peak[tag])
		st->peak[tag] = st->cur[tag];
	st->total_cur += n;
	if (st->total_cur > st->total_peak) {
		st->total_peak = st->total_cur;
		memcpy(st->peak_at_total, st->cur, sizeof st->cur);
	}
	st->n_alloc++;
	trace_event(a, TITAN_MEMTRACE_ALLOC, tag, bytes, (uintptr_t)p);
	pthread_mutex_unlock(&a->mu);
	return p;
}

void *titan_mem_calloc(struct titan_allocator *a, size_t bytes, enum titan_mem_tag tag)
{
	void *p = titan_mem_alloc(a, bytes, tag);
	if (!p || !bytes)
		return p;
	if (!a->be.zero) {
		memset(p, 0, bytes);
		return p;
	}
	if (a->be.zero(a->be.ctx, p, bytes) < 0) {
		char buf[32];
		titan_error_prefix("cannot zero %s for %s on '%s'",
				   titan_format_bytes(buf, sizeof buf, (double)bytes),
				   tag_names[tag], a->name);
		titan_mem_free(a, p);
		return NULL;
	}
	return p;
}

void titan_mem_free(struct titan_allocator *a, void *ptr)
{
	if (!ptr)
		return;
	TITAN_ASSERT(a);
	pthread_mutex_lock(&a->mu);
	struct block *b = find(a, (uintptr_t)ptr);
	TITAN_ASSERT(b != NULL && "pointer not allocated by this allocator");
	uint64_t bytes = b->bytes;
	int tag = b->tag;
	erase(a, b);

	a->st.cur[tag] -= (int64_t)bytes;
	a->st.total_cur -= (int64_t)bytes;
	a->st.n_free++;
	trace_event(a, TITAN_MEMTRACE_FREE, tag, bytes, (uintptr_t)ptr);
	pthread_mutex_unlock(&a->mu);

	/* The slot is gone before the backend can hand the address out again. */
	a->be.free(a->be.ctx, ptr, bytes ? (size_t)bytes : 1);
}

int64_t titan_mem_size(struct titan_allocator *a, const void *ptr, enum titan_mem_tag *tag)
{
	int64_t n = -1;

	TITAN_ASSERT(a);
	if (!ptr)
		return -1;
	pthread_mutex_lock(&a->mu);
	const struct block *b = find(a, (uintptr_t)ptr);
	if (b) {
		n = (int64_t)b->bytes;
		if (tag)
			*tag = (enum titan_mem_tag)b->tag;
	}
	pthread_mutex_unlock(&a->mu);
	return n;
}

void titan_mem_get_stats(struct titan_allocator *a, struct titan_mem_stats *out)
{
	TITAN_ASSERT(a && out);
	pthread_mutex_lock(&a->mu);
	*out = a->st;
	pthread_mutex_unlock(&a->mu);
	/* Outside the lock: a caching backend takes its own. */
	out->reserved = a->be.reserved ? (int64_t)a->be.reserved(a->be.ctx) : out->total_cur;
}

void titan_mem_reset_peak(struct titan_allocator *a)
{
	TITAN_ASSERT(a);
	pthread_mutex_lock(&a->mu);
	memcpy(a->st.peak, a->st.cur, sizeof a->st.cur);
	memcpy(a->st.peak_at_total, a->st.cur, sizeof a->st.cur);
	a->st.total_peak = a->st.total_cur;
	pthread_mutex_unlock(&a->mu);
}
