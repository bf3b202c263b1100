/* SPDX-License-Identifier: Apache-2.0 */
/*
 * agree.c — every rank runs the same job (issue 21).  Ranks started with
 * different configs (an MPMD line `mpiexec -n 1 titan-train ... : -n 1
 * titan-train ... --model.dim=512`, per-rank overrides) would build different models and meshes and train to garbage or
 * hang in mismatched collectives.  The resolved config (the YAML
 * titan-config prints) is hashed on every rank; when the hashes differ,
 * rank 0's text is broadcast, each rank finds its first line that differs,
 * and every rank fails with the same message naming the first differing
 * rank and key.  Two small collectives when they agree.
 */
#include "titan/dist.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"

static uint64_t fnv1a(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		h ^= (uint8_t)s[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* The next line of [*p, end) as (start, length); false at the end. */
static bool next_line(const char **p, const char *end, const char **line, size_t *len)
{
	const char *nl;

	if (*p >= end)
		return false;
	nl = memchr(*p, '\n', (size_t)(end - *p));
	*line = *p;
	*len = nl ? (size_t)(nl - *p) : (size_t)(end - *p);
	*p = nl ? nl + 1 : end;
	return true;
}

/* The value part of "  key: value" (or the whole line). */
static void value_of(const char *line, size_t len, const char **v, int *vlen)
{
	const char *colon = line ? memchr(line, ':', len) : NULL;

	if (!line) {
		*v = "(nothing)";
		*vlen = 9;
	} else if (colon) {
		*v = colon + 1 + (colon + 1 < line + len && colon[1] == ' ');
		*vlen = (int)(line + len - *v);
	} else {
		*v = line;
		*vlen = (int)len;
	}
}

/* First difference of `mine` against rank 0's `ref`, as "section.key: X
 * here, Y on rank 0" in msg; false when they are the same text. */
static bool first_diff(const char *mine, size_t n, const char *ref, size_t rn, int rank,
		       char *msg, size_t cap)
{
	const char *p = mine, *q = ref, *end = mine + n, *rend = ref + rn;
	const char *a = NULL, *b = NULL, *section = "", *key = "";
	size_t al = 0, bl = 0;
	int seclen = 0, keylen = 0;

	for (;;) {
		bool ha = next_line(&p, end, &a, &al), hb = next_line(&q, rend, &b, &bl);

		if (!ha && !hb)
			return false;
		if (!ha)
			a = NULL;
		if (!hb)
			b = NULL;
		/* where in the YAML: "section:" then "  key: value" */
		const char *l = a ? a : b;
		size_t ll = a ? al : bl;
		const char *colon = memchr(l, ':', ll);

		if (colon && l[0] != ' ') {
			section = l;
			seclen = (int)(colon - l);
			key = "";
			keylen = 0;
		} else if (colon && ll > 2 && l[2] != ' ' && l[2] != '-') {
			key = l + 2;
			keylen = (int)(colon - key);
		}
		if (a && b && al == bl && !memcmp(a, b, al))
			continue;
		const char *va, *vb;
		int vla, vlb;

		value_of(a, al, &va, &vla);
		value_of(b, bl, &vb, &vlb);
		snprintf(msg, cap, "%.*s%s%.*s is %.*s on rank %d and %.*s on rank 0", seclen,
			 section, keylen ? "." : "", keylen, key, vla > 200 ? 200 : vla, va, rank,
			 vlb > 200 ? 200 : vlb, vb);
		return true;
	}
}

int titan_dist_check_same_config(struct titan_dist *d, const char *yaml, size_t n)
{
	struct titan_comm *w;
	int64_t h[2], len, first;
	char msg[640] = "";
	char *ref = NULL;
	int rc;

	if (!d || d->size <= 1)
		return 0;
	w = d->comm[TITAN_DIM_WORLD];
	/* max of h and of −h: min == max when every rank has the same hash */
	h[0] = (int64_t)(fnv1a(yaml, n) >> 2);
	h[1] = -h[0];
	if ((rc = titan_comm_all_reduce(w, TITAN_IN_PLACE, h, 2, TITAN_DTYPE_I64,
					TITAN_REDOP_MAX, "config hash")) < 0)
		return rc;
	if (h[0] == -h[1])
		return 0;
	/* they differ: which rank first, and where */
	len = d->rank == 0 ? (int64_t)n : 0;
	if ((rc = titan_comm_broadcast(w, &len, 1, TITAN_DTYPE_I64, 0, "config length")) < 0)
		return rc;
	if (!(ref = malloc((size_t)len + 1)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if (d->rank == 0)
		memcpy(ref, yaml, n);
	if ((rc = titan_comm_broadcast(w, ref, (size_t)len, TITAN_DTYPE_U8, 0, "config")) < 0) {
		free(ref);
		return rc;
	}
	first = d->rank > 0 && first_diff(yaml, n, ref, (size_t)len, d->rank, msg, sizeof(msg))
		? d->rank : d->size;
	free(ref);
	if ((rc = titan_comm_all_reduce(w, TITAN_IN_PLACE, &first, 1, TITAN_DTYPE_I64,
					TITAN_REDOP_MIN, "config difference")) < 0)
		return rc;
	if (first >= d->size) /* a hash collision the other way round cannot be */
		snprintf(msg, sizeof(msg), "the resolved configs hash differently");
	else if ((rc = titan_comm_broadcast(w, msg, sizeof(msg), TITAN_DTYPE_U8, (int)first,
					    "config difference")) < 0)
		return rc;
	msg[sizeof(msg) - 1] = '\0';
	return titan_error(TITAN_E_INVALID, "the ranks were started with different configs: %s "
			   "(start every rank with the same --config file and overrides)", msg);
}
