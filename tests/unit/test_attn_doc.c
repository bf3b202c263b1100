/* test_attn_doc.c — document-masked (block_causal) attention of the CPU
 * backend (titan/ops.h: titan_attn_dims.doc, titan_attn_part.q_doc/k_doc)
 * against a float64 reference that masks explicitly: token t sees key s
 * when s <= t and doc[s] == doc[t].  Forward (out, lse) and backward (dq,
 * dk, dv of L = Σ dout·out, the analytic float64 gradients), with odd
 * lengths, documents crossing the 16-token attention blocks, one-token
 * documents, a row that is one document; the parts of context
 * parallelism (query and key splits, merge) against the whole op; one
 * document equal to the causal op bit for bit; bad ids refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/ops.h"

enum { B = 3, T = 67, H = 4, HKV = 2, D = 16, BLK = 16 };
enum { NQ = B * T * H * D, NK = B * T * HKV * D, NL = B * H * T };

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	assert_non_null(p);
	return p;
}
#define FALLOC(n) ((float *)xcalloc((n), sizeof(float)))
#define DALLOC(n) ((double *)xcalloc((n), sizeof(double)))

static void fill(float *x, size_t n, uint64_t stream)
{
	struct titan_rng r;
	titan_rng_init(&r, 20261127, stream);
	titan_rng_fill_normal(&r, 0, x, n, 0.0f, 1.0f);
}

/* Row 0: documents of 1, 5, 1, 20, 1, 17 (crossing the blocks at 16, 32,
 * 48), then the rest; row 1: one document; row 2: every token its own
 * document for 9 tokens, then one of 58.  Ids start anywhere (the kernel
 * only compares them). */
static void make_docs(int32_t *doc)
{
	static const int lens[] = {1, 5, 1, 20, 1, 17};
	int64_t t = 0;
	int32_t id = 7;

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++, id++)
		for (int j = 0; j < lens[i]; j++)
			doc[t++] = id;
	for (; t < T; t++)
		doc[t] = id;
	for (t = 0; t < T; t++)
		doc[T + t] = 3;
	for (t = 0; t < T; t++)
		doc[2 * T + t] = t < 9 ? (int32_t)t : 9;
}

struct ref {
	double *out, *lse, *dq, *dk, *dv;
};

/* float64 reference, mask written out: fwd and the analytic backward */
static void reference(struct ref *r, const float *q, const float *k, const float *v,
		      const float *dout, const int32_t *doc)
{
	const double scale = 1.0 / sqrt((double)D);
	double p[T];

	r->out = DALLOC(NQ), r->lse = DALLOC(NL);
	r->dq = DALLOC(NQ), r->dk = DALLOC(NK), r->dv = DALLOC(NK);
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t t = 0; t < T; t++) {
				const int64_t g = h / (H / HKV);
				const float *qr = q + ((b * T + t) * H + h) * D;
				const float *dor = dout + ((b * T + t) * H + h) * D;
				double mx = -INFINITY, sum = 0, dt = 0;
				bool vis[T];

				for (int64_t s = 0; s < T; s++) {
					vis[s] = s <= t && doc[b * T + s] == doc[b * T + t];
					if (!vis[s])
						continue;
					double a = 0;
					for (int64_t j = 0; j < D; j++)
						a += (double)qr[j] * k[((b * T + s) * HKV + g) * D + j];
					p[s] = a * scale;
					mx = fmax(mx, p[s]);
				}
				for (int64_t s = 0; s < T; s++)
					if (vis[s])
						sum += exp(p[s] - mx);
				r->lse[(b * H + h) * T + t] = mx + log(sum);
				double *o = r->out + ((b * T + t) * H + h) * D;
				for (int64_t s = 0; s < T; s++) {
					if (!vis[s])
						continue;
					p[s] = exp(p[s] - mx) / sum;
					for (int64_t j = 0; j < D; j++)
						o[j] += p[s] * v[((b * T + s) * HKV + g) * D + j];
				}
				for (int64_t j = 0; j < D; j++)
					dt += (double)dor[j] * o[j];
				for (int64_t s = 0; s < T; s++) {
					if (!vis[s])
						continue;
					const int64_t kr = ((b * T + s) * HKV + g) * D;
					double dp = 0;
					for (int64_t j = 0; j < D; j++) {
						dp += (double)dor[j] * v[kr + j];
						r->dv[kr + j] += p[s] * dor[j];
					}
					const double ds = p[s] * (dp - dt) * scale;
					for (int64_t j = 0; j < D; j++) {
						r->dq[((b * T + t) * H + h) * D + j] += ds * k[kr + j];
						r->dk[kr + j] += ds * qr[j];
					}
				}
			}
}

static void free_ref(struct ref *r)
{
	free(r->out), free(r->lse), free(r->dq), free(r->dk), free(r->dv);
}

static void check_close(const char *what, const float *got, const double *want, size_t n,
			double atol)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabs(got[i] - want[i]) <= atol + 1e-4 * fabs(want[i])))
			fail_msg("%s[%zu]: got %.9g want %.9g", what, i, got[i], want[i]);
}

struct io {
	float *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv;
	int32_t doc[B * T];
	struct titan_attn_dims d;
	struct titan_backend be;
};

static void io_init(struct io *a, int nthreads)
{
	a->q = FALLOC(NQ), a->k = FALLOC(NK), a->v = FALLOC(NK), a->dout = FALLOC(NQ);
	a->out = FALLOC(NQ), a->lse = FALLOC(NL);
	a->dq = FALLOC(NQ), a->dk = FALLOC(NK), a->dv = FALLOC(NK);
	fill(a->q, NQ, 1), fill(a->k, NK, 2), fill(a->v, NK, 3), fill(a->dout, NQ, 4);
	make_docs(a->doc);
	a->d = (struct titan_attn_dims){B, T, H, HKV, D, a->doc};
	assert_int_equal(titan_backend_cpu_init(&a->be, nthreads), 0);
	a->be.attn_block_q = a->be.attn_block_k = BLK;
}

static void io_free(struct io *a)
{
	free(a->q), free(a->k), free(a->v), free(a->dout), free(a->out), free(a->lse);
	free(a->dq), free(a->dk), free(a->dv);
	a->be.ops->release(&a->be);
}

static void run_op(struct io *a)
{
	assert_int_equal(a->be.ops->attention_fwd(&a->be, a->out, a->lse, a->q, a->k, a->v, &a->d),
			 0);
	assert_int_equal(a->be.ops->attention_bwd(&a->be, a->dq, a->dk, a->dv, a->dout, a->q, a->k,
						  a->v, a->out, a->lse, &a->d), 0);
}

/* the whole op against the reference, for several tiles and threads */
static void test_op_vs_reference(void **state)
{
	static const int tiles[][2] = {{16, 16}, {64, 64}, {7, 5}, {16, 32}};
	struct io a;
	struct ref r;

	(void)state;
	io_init(&a, 2);
	reference(&r, a.q, a.k, a.v, a.dout, a.doc);
	for (size_t i = 0; i < sizeof(tiles) / sizeof(tiles[0]); i++) {
		a.be.attn_block_q = tiles[i][0];
		a.be.attn_block_k = tiles[i][1];
		run_op(&a);
		check_close("out", a.out, r.out, NQ, 1e-5);
		check_close("lse", a.lse, r.lse, NL, 1e-5);
		check_close("dq", a.dq, r.dq, NQ, 1e-5);
		check_close("dk", a.dk, r.dk, NK, 1e-5);
		check_close("dv", a.dv, r.dv, NK, 1e-5);
	}
	/* a one-token document sees itself only: out = its value */
	for (int64_t h = 0; h < H; h++)
		for (int64_t j = 0; j < D; j++)
			assert_true(fabsf(a.out[(0 * H + h) * D + j] -
					  a.v[(0 * HKV + h / 2) * D + j]) < 1e-6f);
	free_ref(&r);
	io_free(&a);
}

/* one document per row is the causal op, bit for bit (the doc path adds
 * no rounding), and the thread count changes nothing */
static void test_one_document_is_causal(void **state)
{
	struct io a, c;

	(void)state;
	io_init(&a, 1);
	io_init(&c, 2);
	for (int64_t i = 0; i < B * T; i++)
		a.doc[i] = 5;
	c.d.doc = NULL;
	run_op(&a);
	run_op(&c);
	assert_memory_equal(a.out, c.out, NQ * sizeof(float));
	assert_memory_equal(a.lse, c.lse, NL * sizeof(float));
	assert_memory_equal(a.dq, c.dq, NQ * sizeof(float));
	assert_memory_equal(a.dk, c.dk, NK * sizeof(float));
	assert_memory_equal(a.dv, c.dv, NK * sizeof(float));
	io_free(&a);
	io_free(&c);
}

/* context parallelism's parts: queries split (top causal, bottom against
 * every key up to its position) and keys split (late keys, then the early
 * ones merged), with the ids offset as q and k */
static void test_parts(void **state)
{
	struct io a;
	struct ref r;
	const int64_t qs = H * D, ks = HKV * D, c = 29;

	(void)state;
	io_init(&a, 2);
	reference(&r, a.q, a.k, a.v, a.dout, a.doc);
	run_op(&a); /* the final out and lse the part backward needs */
	float *out = FALLOC(NQ), *lse = FALLOC(NL);
	float *pq = FALLOC(NQ), *pk = FALLOC(NK), *pv = FALLOC(NK);
	const int32_t *doc = a.doc;

	struct titan_attn_part top = {B, c, c, T, T, H, HKV, D, 0, doc, doc};
	struct titan_attn_part bottom = {B, T - c, T, T, T, H, HKV, D, c, doc + c, doc};
	assert_int_equal(a.be.ops->attention_part_fwd(&a.be, out, lse, a.q, a.k, a.v, &top, false),
			 0);
	assert_int_equal(a.be.ops->attention_part_fwd(&a.be, out + c * qs, lse + c, a.q + c * qs,
						      a.k, a.v, &bottom, false), 0);
	check_close("part out (queries split)", out, r.out, NQ, 1e-5);
	check_close("part lse (queries split)", lse, r.lse, NL, 1e-5);
	assert_int_equal(a.be.ops->attention_part_bwd(&a.be, pq, pk, pv, a.dout, a.q, a.k, a.v,
						      a.out, a.lse, &top, false), 0);
	assert_int_equal(a.be.ops->attention_part_bwd(&a.be, pq + c * qs, pk, pv, a.dout + c * qs,
						      a.q + c * qs, a.k, a.v, a.out + c * qs,
						      a.lse + c, &bottom, true), 0);
	check_close("part dq (queries split)", pq, r.dq, NQ, 1e-5);
	check_close("part dk (queries split)", pk, r.dk, NK, 1e-5);
	check_close("part dv (queries split)", pv, r.dv, NK, 1e-5);

	/* keys [c, T) first (rows before c see none of them: out 0, lse -inf
	 * unless merged later), then keys [0, c) merged in */
	struct titan_attn_part late = {B, T, T - c, T, T, H, HKV, D, -c, doc, doc + c};
	struct titan_attn_part early = {B, T, c, T, T, H, HKV, D, 0, doc, doc};
	assert_int_equal(a.be.ops->attention_part_fwd(&a.be, out, lse, a.q, a.k + c * ks,
						      a.v + c * ks, &late, false), 0);
	assert_int_equal(a.be.ops->attention_part_fwd(&a.be, out, lse, a.q, a.k, a.v, &early, true),
			 0);
	check_close("part out (keys split)", out, r.out, NQ, 1e-5);
	check_close("part lse (keys split)", lse, r.lse, NL, 1e-5);
	memset(pk, 0, NK * sizeof(float));
	memset(pv, 0, NK * sizeof(float));
	assert_int_equal(a.be.ops->attention_part_bwd(&a.be, pq, pk + c * ks, pv + c * ks, a.dout,
						      a.q, a.k + c * ks, a.v + c * ks, a.out,
						      a.lse, &late, false), 0);
	assert_int_equal(a.be.ops->attention_part_bwd(&a.be, pq, pk, pv, a.dout, a.q, a.k, a.v,
						      a.out, a.lse, &early, true), 0);
	check_close("part dq (keys split)", pq, r.dq, NQ, 1e-5);
	check_close("part dk (keys split)", pk, r.dk, NK, 1e-5);
	check_close("part dv (keys split)", pv, r.dv, NK, 1e-5);
	free(out), free(lse), free(pq), free(pk), free(pv);
	free_ref(&r);
	io_free(&a);
}

static void test_bad_ids(void **state)
{
	struct io a;

	(void)state;
	io_init(&a, 1);
	a.doc[T + 40] = 2; /* row 1 is all 3: decreases at token 40 */
	assert_int_equal(a.be.ops->attention_fwd(&a.be, a.out, a.lse, a.q, a.k, a.v, &a.d),
			 TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "row 1, token 40"));
	struct titan_attn_part half = {B, T, T, T, T, H, HKV, D, 0, a.doc, NULL};
	a.doc[T + 40] = 3;
	assert_int_equal(a.be.ops->attention_part_fwd(&a.be, a.out, a.lse, a.q, a.k, a.v, &half,
						      false), TITAN_E_INVALID);
	io_free(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_op_vs_reference),
		cmocka_unit_test(test_one_document_is_causal),
		cmocka_unit_test(test_parts),
		cmocka_unit_test(test_bad_ids),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
