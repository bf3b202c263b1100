/*
 * train.c — byte-level BPE training (titan_bpe_trainer_*, lib/titan/tok.h).
 *
 * Counting: each document is sanitised, cut into segments where
 * titan_doc_reader cuts, and pre-tokenized; distinct pieces are counted in a hash map (thread-local
 * maps merged per batch, so memory is bounded by the distinct pieces plus
 * one batch of text).
 *
 * Merging: the standard algorithm (HF tokenizers' BpeTrainer, minbpe,
 * tiktoken's _educational.py) with incremental pair counts.  Words are the
 * distinct pieces as id sequences weighted by their counts; a hash map holds
 * each adjacent pair's count and the words it occurs in; a max-heap keyed by
 * (count, concatenated bytes) with lazy deletion picks the next merge.  A
 * merge rewrites only the words that contain the pair and adjusts the counts
 * of the neighbouring pairs, so its cost is proportional to its occurrences.
 *
 * Choices (see tok.h):
 *  - ties between equal counts go to the pair whose concatenated bytes sort
 *    first (memcmp; a proper prefix first), then to the shorter left token,
 *    so the output depends neither on input order nor on thread count;
 *  - a merge takes the occurrences in a word left to right without overlap
 *    ("aaa" -> "aa" "a"), as tiktoken's encoder and HF do;
 *  - training stops when the best pair occurs fewer than 2 times.
 *  - A merge whose bytes already are a token would be applied with the
 *    existing id and emit no rank (tiktoken needs unique bytes).  It does
 *    not happen: the tokens that cover a span of a word, as long as no token
 *    crosses its ends, depend only on the span's bytes and the merges so
 *    far, so every word builds a given string from the same pair.  (Hence
 *    also the left-length tie never decides.)  The check stays as a guard.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "titan/core.h"
#include "titan/tok.h"

#define SEG_BYTES (256u << 10)   /* aim for segments of this size */
#define BATCH_BYTES (4u << 20)   /* count pending text past this size */

/* ------------------------------------------------------------- helpers */

static inline uint64_t mix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		h = (h ^ mix64(w)) * 0x100000001b3ull;
		p += 8;
		n -= 8;
	}
	uint64_t w = 0;
	memcpy(&w, p, n);
	h = mix64(h ^ w ^ ((uint64_t)n << 56));
	return h ? h : 1; /* 0 marks an empty slot */
}

/* ------------------------------------------------- bytes -> u64 map */

struct pm_ent {
	uint64_t hash; /* 0 = empty */
	uint64_t val;
	uint64_t off;  /* key bytes in keys.p */
	uint64_t len;
};
struct piece_map {
	struct pm_ent *e;
	size_t cap, n; /* cap: power of two */
	struct titan_bytes keys;
};

static int pm_rehash(struct piece_map *m, size_t cap)
{
	struct pm_ent *e = titan_calloc(cap * sizeof *e, TITAN_MEM_DATA);
	if (!e)
		return TITAN_E_NOMEM;
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->e[i].hash)
			continue;
		size_t j = m->e[i].hash & (cap - 1);
		while (e[j].hash)
			j = (j + 1) & (cap - 1);
		e[j] = m->e[i];
	}
	titan_free(m->e);
	m->e = e;
	m->cap = cap;
	return 0;
}

/* The entry for key p[0..n) (hash h), created with val 0 when absent. */
static struct pm_ent *pm_get(struct piece_map *m, const uint8_t *p, size_t n, uint64_t h)
{
	if ((m->n + 1) * 4 > m->cap * 3 && pm_rehash(m, m->cap ? m->cap * 2 : 1024) < 0)
		return NULL;
	size_t j = h & (m->cap - 1);
	for (;; j = (j + 1) & (m->cap - 1)) {
		struct pm_ent *e = &m->e[j];
		if (!e->hash)
			break;
		if (e->hash == h && e->len == n && !memcmp(m->keys.p + e->off, p, n))
			return e;
	}
	if (titan_bytes_append(&m->keys, p, n) < 0)
		return NULL;
	m->e[j] = (struct pm_ent){.hash = h, .off = m->keys.n - n, .len = n};
	m->n++;
	return &m->e[j];
}

static void pm_clear(struct piece_map *m)
{
	if (m->e)
		memset(m->e, 0, m->cap * sizeof *m->e);
	m->n = 0;
	m->keys.n = 0;
}

static void pm_release(struct piece_map *m)
{
	titan_free(m->e);
	titan_bytes_release(&m->keys);
	memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ counting */

struct seg {
	size_t off, len;
};

struct titan_bpe_trainer {
	struct titan_bpe_train_opts o;
	int nthreads;
	struct titan_pretok *pt;
	struct titan_pretok_state **st; /* per thread */
	struct piece_map *local;        /* per thread, one batch */
	int *trc;                       /* per thread error code and message */
	char (*terr)[256];
	struct piece_map pieces;        /* all distinct pieces -> count */
	struct titan_bytes pend;        /* sanitised text not yet counted */
	struct seg *segs;
	size_t nsegs, capsegs;
	uint64_t bytes_in, replaced, npieces;
	bool finished;
};

static int count_piece(const uint8_t *p, size_t n, void *arg)
{
	struct pm_ent *e = pm_get(arg, p, n, hash_bytes(p, n));
	if (!e)
		return titan_error(TITAN_E_NOMEM, "out of memory counting pieces");
	e->val++;
	return 0;
}

/* Pre-tokenize the pending segments on all threads, then fold the
 * thread-local counts into tr->pieces. */
static int count_batch(struct titan_bpe_trainer *tr)
{
	int nt = tr->nthreads;
	for (int t = 0; t < nt; t++)
		tr->trc[t] = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)
#endif
	for (size_t i = 0; i < tr->nsegs; i++) {
#ifdef _OPENMP
		int t = omp_get_thread_num();
#else
		int t = 0;
#endif
		if (tr->trc[t])
			continue;
		int rc = titan_pretok_split(tr->pt, tr->st[t], tr->pend.p + tr->segs[i].off,
					    tr->segs[i].len, count_piece, &tr->local[t]);
		if (rc) {
			tr->trc[t] = rc < 0 ? rc : TITAN_E_INTERNAL;
			snprintf(tr->terr[t], sizeof tr->terr[t], "%s", titan_errmsg());
		}
	}
	int rc = 0;
	for (int t = 0; t < nt; t++) {
		struct piece_map *m = &tr->local[t];
		if (tr->trc[t] && !rc)
			rc = titan_error(tr->trc[t], "%s", tr->terr[t]);
		for (size_t i = 0; !rc && i < m->cap; i++) {
			const struct pm_ent *x = &m->e[i];
			if (!x->hash)
				continue;
			struct pm_ent *e = pm_get(&tr->pieces, m->keys.p + x->off, x->len, x->hash);
			if (!e)
				rc = titan_error(TITAN_E_NOMEM, "out of memory counting pieces");
			else
				e->val += x->val, tr->npieces += x->val;
		}
		pm_clear(m);
	}
	tr->pend.n = 0;
	tr->nsegs = 0;
	return rc;
}

static int push_seg(struct titan_bpe_trainer *tr, size_t off, size_t len)
{
	if (tr->nsegs == tr->capsegs) {
		size_t cap = tr->capsegs ? tr->capsegs * 2 : 256;
		struct seg *s = realloc(tr->segs, cap * sizeof *s);
		if (!s)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		tr->segs = s;
		tr->capsegs = cap;
	}
	tr->segs[tr->nsegs++] = (struct seg){off, len};
	return 0;
}

struct titan_bpe_trainer *titan_bpe_trainer_new(const struct titan_bpe_train_opts *o)
{
	if (o->pattern != TITAN_PRETOK_CL100K && o->pattern != TITAN_PRETOK_O200K &&
	    o->pattern != TITAN_PRETOK_GPT2) {
		titan_error(TITAN_E_INVALID, "BPE training: the pattern must be cl100k/llama3, o200k "
			    "or gpt2");
		return NULL;
	}
	if (o->nspecials > UINT32_MAX - 256 || o->vocab_size < 256 + o->nspecials) {
		titan_error(TITAN_E_INVALID, "vocab size %u is too small: it must be at least 256 "
			    "byte tokens + %u special tokens = %llu", o->vocab_size, o->nspecials,
			    256ull + o->nspecials);
		return NULL;
	}
	if (o->threads < 0) {
		titan_error(TITAN_E_INVALID, "BPE training: bad thread count %d", o->threads);
		return NULL;
	}
	struct titan_bpe_trainer *tr = calloc(1, sizeof *tr);
	if (!tr) {
		titan_error(TITAN_E_NOMEM, "out of memory");
		return NULL;
	}
	tr->o = *o;
	tr->nthreads = o->threads;
#ifdef _OPENMP
	if (!tr->nthreads)
		tr->nthreads = omp_get_num_procs();
#else
	tr->nthreads = 1;
#endif
	if (tr->nthreads < 1)
		tr->nthreads = 1;
	int nt = tr->nthreads;
	tr->st = calloc((size_t)nt, sizeof *tr->st);
	tr->local = calloc((size_t)nt, sizeof *tr->local);
	tr->trc = calloc((size_t)nt, sizeof *tr->trc);
	tr->terr = calloc((size_t)nt, sizeof *tr->terr);
	if (!tr->st || !tr->local || !tr->trc || !tr->terr) {
		titan_error(TITAN_E_NOMEM, "out of memory");
		goto fail;
	}
	tr->pt = titan_pretok_new(o->pattern, NULL, false);
	if (!tr->pt)
		goto fail;
	for (int t = 0; t < nt; t++)
		if (!(tr->st[t] = titan_pretok_state_new(tr->pt)))
			goto fail;
	return tr;
fail:
	titan_bpe_trainer_free(tr);
	return NULL;
}

void titan_bpe_trainer_free(struct titan_bpe_trainer *tr)
{
	if (!tr)
		return;
	for (int t = 0; tr->st && t < tr->nthreads; t++)
		titan_pretok_state_free(tr->st[t]);
	for (int t = 0; tr->local && t < tr->nthreads; t++)
		pm_release(&tr->local[t]);
	titan_pretok_free(tr->pt);
	pm_release(&tr->pieces);
	titan_bytes_release(&tr->pend);
	free(tr->st);
	free(tr->local);
	free(tr->trc);
	free(tr->terr);
	free(tr->segs);
	free(tr);
}

int titan_bpe_trainer_add(struct titan_bpe_trainer *tr, const uint8_t *text, size_t n)
{
	if (tr->finished)
		return titan_error(TITAN_E_INVALID, "BPE training: add after finish");
	size_t start = tr->pend.n;
	int64_t r = titan_utf8_sanitize(text, n, &tr->pend);
	if (r < 0)
		return titan_error((int)r, "out of memory reading the training text");
	tr->replaced += (uint64_t)r;
	tr->bytes_in += n;
	/* Segments for the threads, cut where titan_doc_reader cuts: every
	 * supported pattern has a piece boundary there. */
	size_t end = tr->pend.n, off = start;
	while (end - off > SEG_BYTES) {
		size_t cut = titan_doc_safe_cut(tr->pend.p + off, SEG_BYTES);
		if (!cut)
			cut = titan_doc_safe_cut(tr->pend.p + off, end - off);
		if (!cut)
			break;
		if (push_seg(tr, off, cut) < 0)
			return TITAN_E_NOMEM;
		off += cut;
	}
	if (end > off && push_seg(tr, off, end - off) < 0)
		return TITAN_E_NOMEM;
	return tr->pend.n >= BATCH_BYTES ? count_batch(tr) : 0;
}

/* ------------------------------------------------------------- merging */

struct pair {
	uint64_t key;   /* a << 32 | b; PAIR_EMPTY when unused */
	int64_t count;  /* weighted occurrences */
	uint32_t *w;    /* words that contain (or contained) the pair */
	uint32_t nw, capw;
	uint64_t stamp; /* last merge that raised the count */
};
#define PAIR_EMPTY UINT64_MAX

struct hent {
	int64_t count;
	uint64_t key;
};

struct bpe {
	const struct titan_bpe_trainer *tr;
	/* tokens: ids = ranks */
	uint32_t ntok;
	uint64_t *toff;
	uint32_t *tlen;
	struct titan_bytes tokb;
	struct piece_map tokmap; /* bytes -> id */
	uint64_t ndup;
	/* words */
	size_t nwords;
	uint32_t *sym, *wlen;
	uint64_t *woff;
	int64_t *wcnt;
	/* pairs */
	struct pair *p;
	size_t pcap, pn;
	struct hent *heap;
	size_t hn, hcap;
	uint64_t *touched;
	size_t ntouched, captouched;
	uint64_t merge_no;
};

static size_t pair_slot(const struct bpe *b, uint64_t key)
{
	size_t j = mix64(key) & (b->pcap - 1);
	while (b->p[j].key != key && b->p[j].key != PAIR_EMPTY)
		j = (j + 1) & (b->pcap - 1);
	return j;
}

static int pair_rehash(struct bpe *b, size_t cap)
{
	struct pair *old = b->p;
	size_t oldcap = b->pcap;
	b->p = titan_malloc(cap * sizeof *b->p, TITAN_MEM_DATA);
	if (!b->p) {
		b->p = old;
		return TITAN_E_NOMEM;
	}
	for (size_t i = 0; i < cap; i++)
		b->p[i] = (struct pair){.key = PAIR_EMPTY};
	b->pcap = cap;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].key != PAIR_EMPTY)
			b->p[pair_slot(b, old[i].key)] = old[i];
	titan_free(old);
	return 0;
}

/* Add `delta` to the count of (x, y); with `w` != UINT32_MAX also note that
 * word w contains the pair and that the pair went up in this merge. */
static int pair_add(struct bpe *b, uint32_t x, uint32_t y, int64_t delta, uint32_t w)
{
	uint64_t key = (uint64_t)x << 32 | y;
	if ((b->pn + 1) * 2 > b->pcap && pair_rehash(b, b->pcap * 2) < 0)
		return TITAN_E_NOMEM;
	struct pair *p = &b->p[pair_slot(b, key)];
	if (p->key == PAIR_EMPTY) {
		p->key = key;
		b->pn++;
	}
	p->count += delta;
	TITAN_ASSERT(p->count >= 0);
	if (p->count == 0) {
		free(p->w);
		p->w = NULL;
		p->nw = p->capw = 0;
	}
	if (w == UINT32_MAX)
		return 0;
	if (!p->nw || p->w[p->nw - 1] != w) {
		if (p->nw == p->capw) {
			uint32_t cap = p->capw ? p->capw * 2 : 2;
			uint32_t *nw = realloc(p->w, cap * sizeof *nw);
			if (!nw)
				return TITAN_E_NOMEM;
			p->w = nw;
			p->capw = cap;
		}
		p->w[p->nw++] = w;
	}
	if (p->stamp != b->merge_no) {
		p->stamp = b->merge_no;
		if (b->ntouched == b->captouched) {
			size_t cap = b->captouched ? b->captouched * 2 : 1024;
			uint64_t *t = realloc(b->touched, cap * sizeof *t);
			if (!t)
				return TITAN_E_NOMEM;
			b->touched = t;
			b->captouched = cap;
		}
		b->touched[b->ntouched++] = key;
	}
	return 0;
}

/* memcmp order of bytes(a)||bytes(b) against bytes(c)||bytes(d). */
static int cmp_concat(const struct bpe *b, uint64_t k1, uint64_t k2)
{
	const uint8_t *s[2][2];
	size_t n[2][2];
	uint64_t k[2] = {k1, k2};
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++) {
			uint32_t id = j ? (uint32_t)k[i] : (uint32_t)(k[i] >> 32);
			s[i][j] = b->tokb.p + b->toff[id];
			n[i][j] = b->tlen[id];
		}
	int i0 = 0, i1 = 0;
	const uint8_t *p0 = s[0][0], *p1 = s[1][0];
	size_t r0 = n[0][0], r1 = n[1][0];
	for (;;) {
		if (!r0 && i0 == 0)
			i0 = 1, p0 = s[0][1], r0 = n[0][1];
		if (!r1 && i1 == 0)
			i1 = 1, p1 = s[1][1], r1 = n[1][1];
		if (!r0 || !r1)
			break;
		size_t m = r0 < r1 ? r0 : r1;
		int c = memcmp(p0, p1, m);
		if (c)
			return c;
		p0 += m, r0 -= m, p1 += m, r1 -= m;
	}
	if (r0 || r1)
		return r0 ? 1 : -1;
	/* same bytes: the shorter left token first */
	return n[0][0] < n[1][0] ? -1 : n[0][0] > n[1][0];
}

/* Heap order: higher count first, then cmp_concat. */
static bool heap_before(const struct bpe *b, const struct hent *x, const struct hent *y)
{
	if (x->count != y->count)
		return x->count > y->count;
	return cmp_concat(b, x->key, y->key) < 0;
}

static void sift_down(struct bpe *b, size_t i)
{
	struct hent *h = b->heap;
	for (;;) {
		size_t l = 2 * i + 1, best = i;
		if (l < b->hn && heap_before(b, &h[l], &h[best]))
			best = l;
		if (l + 1 < b->hn && heap_before(b, &h[l + 1], &h[best]))
			best = l + 1;
		if (best == i)
			return;
		struct hent t = h[i];
		h[i] = h[best];
		h[best] = t;
		i = best;
	}
}

static int heap_reserve(struct bpe *b)
{
	if (b->hn < b->hcap)
		return 0;
	size_t cap = b->hcap ? b->hcap * 2 : 1024;
	struct hent *h = titan_malloc(cap * sizeof *h, TITAN_MEM_DATA);
	if (!h)
		return TITAN_E_NOMEM;
	if (b->hn)
		memcpy(h, b->heap, b->hn * sizeof *h);
	titan_free(b->heap);
	b->heap = h;
	b->hcap = cap;
	return 0;
}

static int heap_push(struct bpe *b, int64_t count, uint64_t key)
{
	if (heap_reserve(b) < 0)
		return TITAN_E_NOMEM;
	size_t i = b->hn++;
	b->heap[i] = (struct hent){count, key};
	while (i && heap_before(b, &b->heap[i], &b->heap[(i - 1) / 2])) {
		struct hent t = b->heap[i];
		b->heap[i] = b->heap[(i - 1) / 2];
		b->heap[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
	return 0;
}

/* Token id of bytes(x)||bytes(y): a new rank, or the existing one. */
static int make_token(struct bpe *b, uint32_t x, uint32_t y, uint32_t *out)
{
	size_t nx = b->tlen[x], ny = b->tlen[y], at = b->tokb.n;
	if (titan_bytes_reserve(&b->tokb, at + nx + ny) < 0)
		return TITAN_E_NOMEM;
	memcpy(b->tokb.p + at, b->tokb.p + b->toff[x], nx);
	memcpy(b->tokb.p + at + nx, b->tokb.p + b->toff[y], ny);
	const uint8_t *s = b->tokb.p + at;
	struct pm_ent *e = pm_get(&b->tokmap, s, nx + ny, hash_bytes(s, nx + ny));
	if (!e)
		return TITAN_E_NOMEM;
	if (e->val) { /* the bytes are a token already (ids start at 1 here) */
		*out = (uint32_t)(e->val - 1);
		b->ndup++;
		return 0;
	}
	*out = b->ntok;
	e->val = (uint64_t)b->ntok + 1;
	b->toff[b->ntok] = at;
	b->tlen[b->ntok] = (uint32_t)(nx + ny);
	b->tokb.n = at + nx + ny;
	b->ntok++;
	return 0;
}

/* Replace each (x, y) in word w by z, left to right without overlap, and
 * update the neighbouring pair counts. */
static int merge_word(struct bpe *b, uint32_t w, uint32_t x, uint32_t y, uint32_t z)
{
	uint32_t *s = b->sym + b->woff[w];
	size_t n = b->wlen[w], i = 0, o = 0;
	int64_t c = b->wcnt[w];
	bool prev_merged = false; /* s[o-1] is a z made at i-2 */
	int rc = 0;
	while (i < n && rc == 0) {
		if (i + 1 < n && s[i] == x && s[i + 1] == y) {
			rc |= pair_add(b, x, y, -c, UINT32_MAX);
			if (o > 0) {
				uint32_t l = prev_merged ? y : s[o - 1];
				rc |= pair_add(b, l, x, -c, UINT32_MAX);
				rc |= pair_add(b, s[o - 1], z, c, w);
			}
			bool next = i + 3 < n && s[i + 2] == x && s[i + 3] == y;
			if (i + 2 < n && !next) {
				rc |= pair_add(b, y, s[i + 2], -c, UINT32_MAX);
				rc |= pair_add(b, z, s[i + 2], c, w);
			}
			s[o++] = z;
			i += 2;
			prev_merged = true;
		} else {
			s[o++] = s[i++];
			prev_merged = false;
		}
	}
	b->wlen[w] = (uint32_t)o;
	return rc ? TITAN_E_NOMEM : 0;
}

static int build_words(struct bpe *b)
{
	const struct piece_map *m = &b->tr->pieces;
	size_t nsym = 0;
	for (size_t i = 0; i < m->cap; i++)
		if (m->e[i].hash && m->e[i].len >= 2)
			b->nwords++, nsym += m->e[i].len;
	if (b->nwords > UINT32_MAX - 1)
		return titan_error(TITAN_E_UNSUPPORTED, "BPE training: more than 2^32 distinct pieces");
	size_t nw = b->nwords ? b->nwords : 1;
	b->sym = titan_malloc((nsym ? nsym : 1) * sizeof *b->sym, TITAN_MEM_DATA);
	b->wlen = titan_malloc(nw * sizeof *b->wlen, TITAN_MEM_DATA);
	b->woff = titan_malloc(nw * sizeof *b->woff, TITAN_MEM_DATA);
	b->wcnt = titan_malloc(nw * sizeof *b->wcnt, TITAN_MEM_DATA);
	if (!b->sym || !b->wlen || !b->woff || !b->wcnt)
		return TITAN_E_NOMEM;
	size_t w = 0, at = 0;
	for (size_t i = 0; i < m->cap; i++) {
		const struct pm_ent *e = &m->e[i];
		if (!e->hash || e->len < 2)
			continue;
		if (e->len > UINT32_MAX)
			return titan_error(TITAN_E_UNSUPPORTED, "BPE training: a piece of 4 GiB");
		const uint8_t *p = m->keys.p + e->off;
		b->woff[w] = at;
		b->wlen[w] = (uint32_t)e->len;
		b->wcnt[w] = (int64_t)e->val;
		for (size_t j = 0; j < e->len; j++)
			b->sym[at + j] = p[j];
		for (size_t j = 0; j + 1 < e->len; j++)
			if (pair_add(b, p[j], p[j + 1], (int64_t)e->val, (uint32_t)w) < 0)
				return TITAN_E_NOMEM;
		at += e->len;
		w++;
	}
	/* heapify every pair once */
	b->ntouched = 0;
	for (size_t i = 0; i < b->pcap; i++)
		if (b->p[i].key != PAIR_EMPTY && b->p[i].count > 0) {
			if (heap_reserve(b) < 0)
				return TITAN_E_NOMEM;
			b->heap[b->hn++] = (struct hent){b->p[i].count, b->p[i].key};
		}
	for (size_t i = b->hn / 2; i-- > 0;)
		sift_down(b, i);
	return 0;
}

/* One merge of the pair `key`; its count was just checked. */
static int merge_pair(struct bpe *b, uint64_t key)
{
	uint32_t x = (uint32_t)(key >> 32), y = (uint32_t)key, z;
	if (make_token(b, x, y, &z) < 0)
		return TITAN_E_NOMEM;
	b->merge_no++;
	b->ntouched = 0;
	struct pair *p = &b->p[pair_slot(b, key)];
	uint32_t *words = p->w, nw = p->nw; /* take the list: (x, y) goes to 0 */
	p->w = NULL;
	p->nw = p->capw = 0;
	int rc = 0;
	for (uint32_t i = 0; i < nw && rc == 0; i++)
		if (i == 0 || words[i] != words[i - 1])
			rc = merge_word(b, words[i], x, y, z);
	free(words);
	if (rc < 0)
		return rc;
	TITAN_ASSERT(b->p[pair_slot(b, key)].count == 0);
	for (size_t i = 0; i < b->ntouched; i++) {
		const struct pair *q = &b->p[pair_slot(b, b->touched[i])];
		if (q->count > 0 && heap_push(b, q->count, q->key) < 0)
			return TITAN_E_NOMEM;
	}
	return 0;
}

static void bpe_release(struct bpe *b)
{
	titan_free(b->toff);
	titan_free(b->tlen);
	titan_bytes_release(&b->tokb);
	pm_release(&b->tokmap);
	titan_free(b->sym);
	titan_free(b->wlen);
	titan_free(b->woff);
	titan_free(b->wcnt);
	for (size_t i = 0; b->p && i < b->pcap; i++)
		free(b->p[i].w);
	titan_free(b->p);
	titan_free(b->heap);
	free(b->touched);
}

static int write_ranks(const struct bpe *b, FILE *out)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char line[64];
	for (uint32_t id = 0; id < b->ntok; id++) {
		const uint8_t *s = b->tokb.p + b->toff[id];
		size_t n = b->tlen[id];
		for (size_t i = 0; i < n; i += 3) {
			uint32_t v = (uint32_t)s[i] << 16;
			if (i + 1 < n)
				v |= (uint32_t)s[i + 1] << 8;
			if (i + 2 < n)
				v |= s[i + 2];
			char q[4] = {tab[v >> 18], tab[(v >> 12) & 63],
				     i + 1 < n ? tab[(v >> 6) & 63] : '=', i + 2 < n ? tab[v & 63] : '='};
			fwrite(q, 1, 4, out);
		}
		int k = snprintf(line, sizeof line, " %u\n", id);
		fwrite(line, 1, (size_t)k, out);
	}
	if (fflush(out) != 0 || ferror(out))
		return titan_error(TITAN_E_IO, "cannot write the trained vocabulary: %s",
				   strerror(errno));
	return 0;
}

int titan_bpe_trainer_finish(struct titan_bpe_trainer *tr, FILE *out)
{
	if (tr->finished)
		return titan_error(TITAN_E_INVALID, "BPE training: finish called twice");
	tr->finished = true;
	if (tr->nsegs && count_batch(tr) < 0)
		return titan_error_prefix("BPE training");
	titan_bytes_release(&tr->pend);
	if (!tr->pieces.n)
		return titan_error(TITAN_E_INVALID, "BPE training: no text to train on (%llu bytes "
				   "of input gave no pieces)", (unsigned long long)tr->bytes_in);
	enum titan_log_level lv = tr->o.progress ? TITAN_LOG_INFO : TITAN_LOG_DEBUG;
	titan_log(lv, "bpe: %llu bytes, %llu pieces, %zu distinct, %llu invalid UTF-8 sequences "
		  "replaced", (unsigned long long)tr->bytes_in, (unsigned long long)tr->npieces,
		  tr->pieces.n, (unsigned long long)tr->replaced);

	uint32_t target = tr->o.vocab_size - tr->o.nspecials;
	struct bpe b = {.tr = tr};
	int rc = TITAN_E_NOMEM;
	b.toff = titan_malloc(target * sizeof *b.toff, TITAN_MEM_DATA);
	b.tlen = titan_malloc(target * sizeof *b.tlen, TITAN_MEM_DATA);
	if (!b.toff || !b.tlen || pair_rehash(&b, 1024) < 0)
		goto fail;
	for (uint32_t i = 0; i < 256; i++) {
		uint8_t c = (uint8_t)i;
		struct pm_ent *e = pm_get(&b.tokmap, &c, 1, hash_bytes(&c, 1));
		if (!e || titan_bytes_append(&b.tokb, &c, 1) < 0)
			goto fail;
		e->val = i + 1; /* id + 1: 0 means absent */
		b.toff[i] = i;
		b.tlen[i] = 1;
	}
	b.ntok = 256;
	if ((rc = build_words(&b)) < 0)
		goto fail;

	uint64_t t0 = titan_time_ns(), tlast = t0, mlast = 0;
	int64_t last_count = 0;
	while (b.ntok < target && b.hn) {
		struct hent top = b.heap[0];
		b.heap[0] = b.heap[--b.hn];
		sift_down(&b, 0);
		int64_t cur = b.p[pair_slot(&b, top.key)].count;
		if (cur != top.count) { /* stale: re-queue a lowered count */
			if (cur > 0 && cur < top.count && (rc = heap_push(&b, cur, top.key)) < 0)
				goto fail;
			continue;
		}
		if (cur < 2)
			break;
		last_count = cur;
		if ((rc = merge_pair(&b, top.key)) < 0)
			goto fail;
		if (tr->o.progress && (b.merge_no & 255) == 0) {
			uint64_t now = titan_time_ns();
			if (now - tlast >= 1000000000ull) {
				titan_log_info("bpe: %u/%u ranks, %.0f merges/s, last count %lld",
					       b.ntok, target,
					       (double)(b.merge_no - mlast) * 1e9 / (double)(now - tlast),
					       (long long)cur);
				tlast = now;
				mlast = b.merge_no;
			}
		}
	}
	double secs = (double)(titan_time_ns() - t0) * 1e-9;
	titan_log(lv, "bpe: %u ranks from %llu merges (%llu repeated bytes) in %.2f s, last "
		  "count %lld", b.ntok, (unsigned long long)b.merge_no, (unsigned long long)b.ndup,
		  secs, (long long)last_count);
	if (b.ntok < target)
		titan_log_warn("bpe: no pair occurs twice any more: %u ranks instead of %u (vocab "
			       "size %u with %u specials)", b.ntok, target,
			       b.ntok + tr->o.nspecials, tr->o.nspecials);
	if ((rc = write_ranks(&b, out)) < 0)
		goto fail;
	rc = 0;
fail:
	if (rc == TITAN_E_NOMEM)
		titan_error(rc, "out of memory in BPE training");
	bpe_release(&b);
	return rc;
}
