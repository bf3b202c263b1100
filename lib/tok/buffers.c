/*
 * buffers.c — the growable byte and id buffers of titan/tok.h
 * (struct titan_bytes, struct titan_ids).  Storage comes from the host
 * allocator under the "data" tag; capacity grows geometrically so appends
 * are amortised O(1).
 */
#include "titan/tok.h"

#include <string.h>

#include "titan/core.h"

/* Grow *p (holding `used` elements of `size` bytes, capacity *cap) to at
 * least `want` elements. */
static int grow(void **p, size_t *cap, size_t used, size_t want, size_t size)
{
	if (want <= *cap)
		return 0;
	size_t ncap = *cap ? *cap : 64;
	while (ncap < want) {
		if (ncap > SIZE_MAX / 2) {
			ncap = want;
			break;
		}
		ncap *= 2;
	}
	if (ncap > SIZE_MAX / size)
		return titan_error(TITAN_E_NOMEM, "buffer of %zu elements of %zu bytes is too large",
				   want, size);
	void *np = titan_malloc(ncap * size, TITAN_MEM_DATA);
	if (!np)
		return TITAN_E_NOMEM;
	if (used)
		memcpy(np, *p, used * size);
	titan_free(*p);
	*p = np;
	*cap = ncap;
	return 0;
}

int titan_bytes_reserve(struct titan_bytes *b, size_t cap)
{
	void *p = b->p;
	int rc = grow(&p, &b->cap, b->n, cap, 1);
	b->p = p;
	return rc;
}

int titan_bytes_append(struct titan_bytes *b, const void *data, size_t n)
{
	if (n == 0)
		return 0;
	if (n > SIZE_MAX - b->n)
		return titan_error(TITAN_E_NOMEM, "byte buffer overflow");
	if (b->n + n > b->cap) {
		int rc = titan_bytes_reserve(b, b->n + n);
		if (rc < 0)
			return rc;
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
	return 0;
}

void titan_bytes_release(struct titan_bytes *b)
{
	if (!b)
		return;
	titan_free(b->p);
	b->p = NULL;
	b->n = b->cap = 0;
}

int titan_ids_reserve(struct titan_ids *v, size_t cap)
{
	void *p = v->p;
	int rc = grow(&p, &v->cap, v->n, cap, sizeof *v->p);
	v->p = p;
	return rc;
}

int titan_ids_push(struct titan_ids *v, uint32_t id)
{
	if (v->n == v->cap) {
		int rc = titan_ids_reserve(v, v->n + 1);
		if (rc < 0)
			return rc;
	}
	v->p[v->n++] = id;
	return 0;
}

void titan_ids_release(struct titan_ids *v)
{
	if (!v)
		return;
	titan_free(v->p);
	v->p = NULL;
	v->n = v->cap = 0;
}
