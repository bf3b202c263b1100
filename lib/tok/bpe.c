/*
 * bpe.c — the byte-pair merge of one pre-tokenized piece, with the two
 * semantics titan must reproduce id for id:
 *
 *  tiktoken (src/lib.rs, byte_pair_merge): start from single bytes and
 *    repeatedly merge the adjacent pair whose *concatenated bytes* have the
 *    lowest rank (ties: leftmost) until no adjacent concatenation is a token.
 *    A piece that is itself a token is emitted whole before any merging.
 *    Pieces up to SHORT_MAX bytes use tiktoken's own O(n·m) array scan
 *    (fast for the few bytes of a word); longer ones a linked list and a
 *    priority queue of (rank, position), O(n log n): both pick the same
 *    leftmost lowest-rank pair at each step.
 *
 *  HuggingFace (tokenizers/src/models/bpe/word.rs, Word::merge_all):
 *    symbols start as the ids of single bytes; a queue of (merge rank, pos)
 *    pops the lowest merge rank (ties: leftmost); an entry is skipped when
 *    its left symbol was removed, has no right neighbour, or the current
 *    pair does not map to the entry's merged id — HF's checks.  (A pair
 *    mapping to the same merged id spans the same bytes, so it is the same
 *    pair: the result is "lowest merge rank, leftmost" exactly, also for
 *    vocabularies where two merges make one token, like Llama 3's.)  With
 *    ignore_merges a piece that is in the vocabulary is emitted whole first.
 *
 * The per-scratch cache (piece bytes -> ids) is exact: it stores and
 * compares the piece's bytes, so results are identical with or without it.
 */
#include "tok/tok_impl.h"

#include "titan/core.h"

/* Pieces up to this many bytes use the array scan (tiktoken's own). */
#define SHORT_MAX 64

static inline int ids_append(struct titan_ids *out, const uint32_t *ids, size_t k)
{
	if (k == 1 && out->n < out->cap) {
		out->p[out->n++] = ids[0];
		return 0;
	}
	if (out->n + k > out->cap) {
		size_t want = out->cap * 2;
		if (want < out->n + k)
			want = out->n + k;
		if (want < 256)
			want = 256;
		int rc = titan_ids_reserve(out, want);
		if (rc < 0)
			return rc;
	}
	memcpy(out->p + out->n, ids, k * sizeof *ids);
	out->n += k;
	return 0;
}

/* Scratch work arrays: `words` uint32 and `keys` uint64 elements. */
static int work_reserve(struct titan_tok_scratch *s, size_t words, size_t keys)
{
	if (words > s->wcap) {
		size_t cap = s->wcap * 2 > words ? s->wcap * 2 : words;
		uint32_t *w = titan_malloc(cap * sizeof *w, TITAN_MEM_DATA);
		if (!w)
			return TITAN_E_NOMEM;
		titan_free(s->w);
		s->w = w;
		s->wcap = cap;
	}
	if (keys > s->heapcap) {
		size_t cap = s->heapcap * 2 > keys ? s->heapcap * 2 : keys;
		uint64_t *h = titan_malloc(cap * sizeof *h, TITAN_MEM_DATA);
		if (!h)
			return TITAN_E_NOMEM;
		titan_free(s->heap);
		s->heap = h;
		s->heapcap = cap;
	}
	return 0;
}

/* The priority queue of a long piece, in three parts:
 *  a: the first pairs, sorted once (a stable radix sort by rank; the
 *     positions are already ascending) and read in order;
 *  f: pairs made by merges while they arrive in ascending key order (a
 *     FIFO: a run of one byte merges level by level, left to right);
 *  h: the other pushed pairs, a 4-ary heap.
 * f grows up from the start of a shared area, h down from its end (h[i]
 * is area[cap - 1 - i]); together they hold at most two pushes per merge.
 * Popping takes the least of the three heads, so the order is exactly the
 * (rank, position) order of one big heap, at a fraction of the cost. */
struct pq {
	uint64_t *a, *area;
	size_t an, ai, fn, fi, hn, cap;
};

#define PQ_H(q, i) ((q)->area[(q)->cap - 1 - (i)])

static inline void pq_heap_down(struct pq *q, size_t i, uint64_t k)
{
	size_t n = q->hn;
	for (;;) {
		size_t c = 4 * i + 1;
		if (c >= n)
			break;
		size_t m = c;
		size_t e = c + 4 < n ? c + 4 : n;
		for (size_t j = c + 1; j < e; j++)
			if (PQ_H(q, j) < PQ_H(q, m))
				m = j;
		if (PQ_H(q, m) >= k)
			break;
		PQ_H(q, i) = PQ_H(q, m);
		i = m;
	}
	PQ_H(q, i) = k;
}

static inline void pq_push(struct pq *q, uint64_t k)
{
	if (q->fi == q->fn)
		q->fi = q->fn = 0;
	if (q->fn == 0 || k >= q->area[q->fn - 1]) {
		q->area[q->fn++] = k;
		return;
	}
	size_t i = q->hn++;
	while (i) {
		size_t up = (i - 1) / 4;
		if (PQ_H(q, up) <= k)
			break;
		PQ_H(q, i) = PQ_H(q, up);
		i = up;
	}
	PQ_H(q, i) = k;
}

static inline bool pq_pop(struct pq *q, uint64_t *k)
{
	int src = 0;
	uint64_t best = UINT64_MAX;
	if (q->ai < q->an) {
		best = q->a[q->ai];
		src = 1;
	}
	if (q->fi < q->fn && q->area[q->fi] < best) {
		best = q->area[q->fi];
		src = 2;
	}
	if (q->hn && PQ_H(q, 0) < best) {
		best = PQ_H(q, 0);
		src = 3;
	}
	switch (src) {
	case 0:
		return false;
	case 1:
		q->ai++;
		break;
	case 2:
		q->fi++;
		break;
	default:
		if (--q->hn)
			pq_heap_down(q, 0, PQ_H(q, q->hn));
	}
	*k = best;
	return true;
}

static void pq_sort(struct pq *q)
{
	uint64_t *src = q->a, *dst = q->area; /* free until the first push */
	size_t n = q->an;
	if (n <= 64) { /* insertion sort: keys are distinct */
		for (size_t i = 1; i < n; i++) {
			uint64_t k = src[i];
			size_t j = i;
			for (; j > 0 && src[j - 1] > k; j--)
				src[j] = src[j - 1];
			src[j] = k;
		}
		return;
	}
	for (int shift = 32; shift < 56; shift += 8) { /* ranks < 2^24 */
		size_t cnt[256] = { 0 }, off = 0;
		for (size_t i = 0; i < n; i++)
			cnt[(src[i] >> shift) & 255]++;
		if (cnt[(src[0] >> shift) & 255] == n)
			continue;
		for (int d = 0; d < 256; d++) {
			size_t c = cnt[d];
			cnt[d] = off;
			off += c;
		}
		for (size_t i = 0; i < n; i++)
			dst[cnt[(src[i] >> shift) & 255]++] = src[i];
		uint64_t *x = src;
		src = dst;
		dst = x;
	}
	if (src != q->a)
		memcpy(q->a, src, n * sizeof *src);
}

/* ------------------------------------------------------------ tiktoken */

static int tiktoken_short(const struct titan_tokenizer *t, const uint8_t *p, size_t n,
			  struct titan_ids *out)
{
	uint32_t start[SHORT_MAX + 1], rk[SHORT_MAX], id[SHORT_MAX];
	size_t m = n;

	for (size_t i = 0; i < n; i++) {
		start[i] = (uint32_t)i;
		id[i] = t->byte_id[p[i]];
		rk[i] = i + 1 < n ? tok_lookup(t, p + i, 2) : TOK_NONE;
	}
	start[n] = (uint32_t)n;
	for (;;) {
		uint32_t best = TOK_NONE;
		size_t bi = 0;
		for (size_t i = 0; i + 1 < m; i++) {
			if (rk[i] < best) {
				best = rk[i];
				bi = i;
			}
		}
		if (best == TOK_NONE)
			break;
		id[bi] = best;
		/* drop part bi+1 */
		memmove(&start[bi + 1], &start[bi + 2], (m - bi - 1) * sizeof *start);
		memmove(&rk[bi + 1], &rk[bi + 2], (m - bi - 2) * sizeof *rk);
		memmove(&id[bi + 1], &id[bi + 2], (m - bi - 2) * sizeof *id);
		m--;
		rk[bi] = bi + 1 < m ? tok_lookup(t, p + start[bi], start[bi + 2] - start[bi])
				    : TOK_NONE;
		if (bi > 0)
			rk[bi - 1] = tok_lookup(t, p + start[bi - 1], start[bi + 1] - start[bi - 1]);
	}
	return ids_append(out, id, m);
}

static int tiktoken_long(const struct titan_tokenizer *t, struct titan_tok_scratch *s,
			 const uint8_t *p, size_t n, struct titan_ids *out)
{
	int rc = work_reserve(s, 4 * n, 3 * n);
	if (rc < 0)
		return rc;
	uint32_t *next = s->w, *prev = next + n, *rk = prev + n, *id = rk + n;
	struct pq q = { .a = s->heap, .area = s->heap + n, .cap = 2 * n };
	const uint32_t end = (uint32_t)n;
	uint64_t key;

	for (size_t i = 0; i < n; i++) {
		next[i] = (uint32_t)i + 1;
		prev[i] = i ? (uint32_t)i - 1 : TOK_NONE;
		id[i] = t->byte_id[p[i]];
		rk[i] = i + 1 < n ? tok_lookup(t, p + i, 2) : TOK_NONE;
		if (rk[i] != TOK_NONE)
			q.a[q.an++] = (uint64_t)rk[i] << 32 | i;
	}
	pq_sort(&q);
	while (pq_pop(&q, &key)) {
		uint32_t r = (uint32_t)(key >> 32), i = (uint32_t)key;
		if (id[i] == TOK_NONE || rk[i] != r)
			continue; /* stale */
		uint32_t j = next[i], nj = next[j];
		id[i] = r;
		id[j] = TOK_NONE;
		next[i] = nj;
		if (nj != end)
			prev[nj] = i;
		rk[i] = nj != end ? tok_lookup(t, p + i, next[nj] - i) : TOK_NONE;
		if (rk[i] != TOK_NONE)
			pq_push(&q, (uint64_t)rk[i] << 32 | i);
		uint32_t k = prev[i];
		if (k != TOK_NONE) {
			rk[k] = tok_lookup(t, p + k, nj - k);
			if (rk[k] != TOK_NONE)
				pq_push(&q, (uint64_t)rk[k] << 32 | k);
		}
	}
	/* compact the surviving ids in place (ids only move left) */
	size_t m = 0;
	for (uint32_t i = 0; i != end; i = next[i])
		id[m++] = id[i];
	return ids_append(out, id, m);
}

int titan_tok_bpe_tiktoken(const struct titan_tokenizer *t, struct titan_tok_scratch *s,
			   const uint8_t *p, size_t n, bool long_algo, struct titan_ids *out)
{
	if (n == 0)
		return 0;
	if (n >= UINT32_MAX)
		return titan_error(TITAN_E_INVALID, "piece of %zu bytes is too long (max 4 GiB)", n);
	if (n == 1)
		return ids_append(out, &t->byte_id[p[0]], 1);
	if (n <= SHORT_MAX && !long_algo)
		return tiktoken_short(t, p, n, out);
	return tiktoken_long(t, s, p, n, out);
}

/* ------------------------------------------------------------------ HF */

int titan_tok_bpe_hf(const struct titan_tokenizer *t, struct titan_tok_scratch *s,
		     const uint8_t *p, size_t n, struct titan_ids *out)
{
	if (n == 0)
		return 0;
	if (n >= UINT32_MAX)
		return titan_error(TITAN_E_INVALID, "piece of %zu bytes is too long (max 4 GiB)", n);
	if (n == 1)
		return ids_append(out, &t->byte_id[p[0]], 1);
	int rc = work_reserve(s, 3 * n, 3 * n);
	if (rc < 0)
		return rc;
	uint32_t *next = s->w, *prev = next + n, *id = prev + n;
	struct pq q = { .a = s->heap, .area = s->heap + n, .cap = 2 * n };
	const uint32_t end = (uint32_t)n;
	const struct tok_merge_slot *m;
	uint64_t key;

	for (size_t i = 0; i < n; i++) {
		next[i] = (uint32_t)i + 1;
		prev[i] = i ? (uint32_t)i - 1 : TOK_NONE;
		id[i] = t->byte_id[p[i]];
	}
	for (size_t i = 0; i + 1 < n; i++) {
		if ((m = tok_merge_get(t, id[i], id[i + 1])))
			q.a[q.an++] = (uint64_t)m->rank << 32 | i;
	}
	pq_sort(&q);
	while (pq_pop(&q, &key)) {
		uint32_t r = (uint32_t)(key >> 32), pos = (uint32_t)key;
		if (id[pos] == TOK_NONE)
			continue;
		uint32_t nx = next[pos];
		if (nx == end)
			continue;
		uint32_t new_id = t->merge_new[r];
		m = tok_merge_get(t, id[pos], id[nx]);
		if (!m || m->new_id != new_id)
			continue; /* expired entry (HF compares the merged id only) */
		id[pos] = new_id;
		id[nx] = TOK_NONE;
		next[pos] = next[nx];
		if (next[pos] != end)
			prev[next[pos]] = pos;
		uint32_t left = prev[pos];
		if (left != TOK_NONE && (m = tok_merge_get(t, id[left], id[pos])))
			pq_push(&q, (uint64_t)m->rank << 32 | left);
		if (next[pos] != end && (m = tok_merge_get(t, id[pos], id[next[pos]])))
			pq_push(&q, (uint64_t)m->rank << 32 | pos);
	}
	size_t k = 0;
	for (uint32_t i = 0; i != end; i = next[i])
		id[k++] = id[i];
	return ids_append(out, id, k);
}

/* ---------------------------------------------------------- one piece */

static int merge_piece(const struct titan_tokenizer *t, struct titan_tok_scratch *s,
		       const uint8_t *p, size_t n, struct titan_ids *out)
{
	if (t->format == TITAN_TOK_TIKTOKEN)
		return titan_tok_bpe_tiktoken(t, s, p, n, false, out);
	return titan_tok_bpe_hf(t, s, p, n, out);
}

int titan_tok_bpe_piece(const struct titan_tokenizer *t, struct titan_tok_scratch *s,
			const uint8_t *p, size_t n, struct titan_ids *out)
{
	uint64_t h = 0;
	bool hashed = false;

	if (n == 0)
		return 0;
	if ((t->format == TITAN_TOK_TIKTOKEN || t->ignore_merges) && n <= t->max_len) {
		h = tok_hash(p, n);
		hashed = true;
		uint32_t id = tok_lookup_h(t, p, n, h);
		if (id != TOK_NONE)
			return ids_append(out, &id, 1);
	}
	if (n == 1)
		return ids_append(out, &t->byte_id[p[0]], 1);
	if (n > TOK_CACHE_BYTES || !s->cache)
		return merge_piece(t, s, p, n, out);

	if (!hashed)
		h = tok_hash(p, n);
	struct tok_cache_entry *e = &s->cache[h & (TOK_CACHE_SLOTS - 1)];
	if (e->len == n && e->hash == h && tok_eq(e->bytes, p, n))
		return ids_append(out, e->ids, e->nids);
	size_t before = out->n;
	int rc = merge_piece(t, s, p, n, out);
	if (rc == 0 && out->n - before <= TOK_CACHE_IDS) {
		e->hash = h;
		e->len = (uint8_t)n;
		e->nids = (uint8_t)(out->n - before);
		memcpy(e->bytes, p, n);
		memcpy(e->ids, out->p + before, e->nids * sizeof *e->ids);
	}
	return rc;
}
