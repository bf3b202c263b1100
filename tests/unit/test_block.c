/* test_block.c — the shared block forward (lib/train/block.h) and the
 * KV-cache attention (attn_kv.c, cp.h): the block over T tokens with
 * local attention equals, within float rounding, the same block run as
 * the generator runs it — prefill and decode chunks whose keys and values
 * go into a cache, attention over the cache, the residual updated in place
 * — row by row; the cache holds the tokens' keys and values after RoPE; a
 * recomputation's op list rewrites what it redoes with the same bits; the
 * KV attention refuses a chunk outside its cache rows and a backward, the
 * block an op outside its list.
 *
 * Tolerance of the KV comparisons: 1e-5 · max(1, max|ref|): the same ops
 * on other row counts (sgemm blocking) and, after the first chunk,
 * another attention kernel (another summation order), as test_generate. */
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
#include "train/block.h"
#include "train/cp.h"
#include "train/tp.h"

enum { T = 9, C = 16, H = 4, HKV = 2, D = 4, F = 24, Q = H * D, KV = HKV * D };

struct blk {
	struct titan_backend be;
	struct titan_sp sp;
	struct titan_cp cp;
	float *wbuf, *freqs, *x, *y;
	struct block_w w;
	struct acts a;
	float *abuf;
};

static float rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return (float)((double)(*s >> 40) / (double)(1ULL << 24)) - 0.5f;
}

static float *fill(float *p, int64_t n, uint64_t *s, float scale, float off)
{
	for (int64_t i = 0; i < n; i++)
		p[i] = off + scale * rnd(s);
	return p + n;
}

/* Random weights, input, RoPE table; the reference block over T tokens
 * with local attention into y and the activations a. */
static void blk_init(struct blk *k)
{
	static const int64_t sizes[TITAN_PARAM_NROLES] = {
		[TITAN_PARAM_WQ] = C * Q, [TITAN_PARAM_WK] = C * KV, [TITAN_PARAM_WV] = C * KV,
		[TITAN_PARAM_WO] = Q * C, [TITAN_PARAM_W1] = C * F, [TITAN_PARAM_W2] = F * C,
		[TITAN_PARAM_W3] = C * F, [TITAN_PARAM_ATTENTION_NORM] = C,
		[TITAN_PARAM_FFN_NORM] = C,
	};
	const int64_t acts = 2 * T * C + 2 * T + 2 * T * Q + 2 * T * KV + H * T + T * C + 3 * T * F;
	uint64_t s = 42;
	float *p;

	memset(k, 0, sizeof(*k));
	assert_int_equal(titan_backend_cpu_init(&k->be, 1), 0);
	k->wbuf = p = malloc((size_t)(2 * C * Q + 2 * C * KV + 3 * C * F + 2 * C) * sizeof(float));
	k->freqs = malloc((size_t)(T * D) * sizeof(float));
	k->x = malloc((size_t)(T * C) * sizeof(float));
	k->y = malloc((size_t)(T * C) * sizeof(float));
	k->abuf = malloc((size_t)acts * sizeof(float));
	assert_true(k->wbuf && k->freqs && k->x && k->y && k->abuf);
	for (int r = TITAN_PARAM_WQ; r <= TITAN_PARAM_FFN_NORM; r++) {
		const bool norm = r == TITAN_PARAM_ATTENTION_NORM || r == TITAN_PARAM_FFN_NORM;

		k->w.w[r] = p;
		p = fill(p, sizes[r], &s, norm ? 0.2f : 0.6f, norm ? 1.0f : 0.0f);
	}
	fill(k->x, T * C, &s, 2.0f, 0.0f);
	assert_int_equal(titan_rope_freqs(k->freqs, T, D, 10000.0, NULL), 0);
	p = k->abuf;
	k->a.xn1 = p, p += T * C;
	k->a.rstd1 = p, p += T;
	k->a.q = p, p += T * Q;
	k->a.k = p, p += T * KV;
	k->a.v = p, p += T * KV;
	k->a.att = p, p += T * Q;
	k->a.lse = p, p += H * T;
	k->a.h = p, p += T * C;
	k->a.xn2 = p, p += T * C;
	k->a.rstd2 = p, p += T;
	k->a.a = p, p += T * F;
	k->a.b = p, p += T * F;
	k->a.g = p;
	assert_int_equal(titan_sp_init(&k->sp, &k->be, NULL, T, C, 1, 0, 1, 0, false, NULL, NULL), 0);
	assert_int_equal(titan_cp_init(&k->cp, &k->be, titan_host_allocator(), NULL, false, 1, T, H,
				       HKV, D), 0);
	assert_int_equal(titan_block_fwd(&(struct titan_block){
		.be = &k->be, .sp = &k->sp, .attn = &k->cp, .freqs = k->freqs, .n = T, .B = 1, .T = T,
		.C = C, .F = F, .H = H, .Hkv = HKV, .D = D, .eps = 1e-5f,
	}, &k->w, k->x, k->y, &k->a, titan_block_fwd_all, F_NOPS), 0);
}

static void blk_release(struct blk *k)
{
	free(k->wbuf);
	free(k->freqs);
	free(k->x);
	free(k->y);
	free(k->abuf);
	titan_backend_release(&k->be);
}

static void assert_close(const float *got, const float *ref, int64_t n, const char *what)
{
	float mx = 1, err = 0;

	for (int64_t i = 0; i < n; i++) {
		mx = fmaxf(mx, fabsf(ref[i]));
		err = fmaxf(err, fabsf(got[i] - ref[i]));
	}
	if (!(err <= 1e-5f * mx))
		fail_msg("%s: max |got - ref| %g over max |ref| %g", what, (double)err, (double)mx);
}

/* The generator's way, chunk by chunk: in-place residual, k/v into the
 * cache rows p0.., KV attention. */
static void test_kv_chunks_equal_local(void **state)
{
	static const int64_t chunks[] = {3, 1, 2, 1, 2}; /* prefill, then decode */
	struct blk k;
	float *kc = calloc(T * KV, sizeof(float)), *vc = calloc(T * KV, sizeof(float));
	float *x = malloc(T * C * sizeof(float)), *xn = malloc(T * C * sizeof(float));
	float *q = malloc(T * Q * sizeof(float)), *att = malloc(T * Q * sizeof(float));
	float *lse = malloc(H * T * sizeof(float)), *rstd = malloc(T * sizeof(float));
	float *fa = malloc(T * F * sizeof(float)), *fb = malloc(T * F * sizeof(float));
	float *scores = malloc((T + D) * sizeof(float));
	struct titan_attn_kv kv;
	struct titan_sp sp;
	int64_t p0 = 0;

	(void)state;
	blk_init(&k);
	assert_true(kc && vc && x && xn && q && att && lse && rstd && fa && fb && scores);
	memcpy(x, k.x, T * C * sizeof(float));
	titan_attn_kv_init(&kv, &k.be, H, HKV, D, T, scores, 1);
	kv.kc = kc;
	kv.vc = vc;
	assert_int_equal(titan_sp_init(&sp, &k.be, NULL, T, C, 1, 0, 1, 0, false, NULL, NULL), 0);
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		const int64_t n = chunks[c];
		const struct titan_block blk = {
			.be = &k.be, .sp = &sp, .attn = &kv.cp, .freqs = k.freqs + p0 * D, .n = n,
			.B = 1, .T = n, .C = C, .F = F, .H = H, .Hkv = HKV, .D = D, .eps = 1e-5f,
		};
		struct acts a = {
			.xn1 = xn, .rstd1 = rstd, .q = q, .k = kc + p0 * KV, .v = vc + p0 * KV,
			.att = att, .lse = lse, .h = x + p0 * C, .xn2 = xn, .rstd2 = rstd, .a = fa,
			.b = fb, .g = fa,
		};

		sp.n = sp.nl = n;
		kv.p0 = p0;
		kv.cp.tl = kv.cp.seq = kv.cp.n = n;
		assert_int_equal(titan_block_fwd(&blk, &k.w, x + p0 * C, x + p0 * C, &a,
						 titan_block_fwd_all, F_NOPS), 0);
		assert_close(att, k.a.att + p0 * Q, n * Q, "attention output");
		p0 += n;
	}
	assert_int_equal(p0, T);
	assert_close(x, k.y, T * C, "block output");
	assert_close(kc, k.a.k, T * KV, "cached keys (after RoPE)");
	assert_close(vc, k.a.v, T * KV, "cached values");
	blk_release(&k);
	free(kc), free(vc), free(x), free(xn), free(q), free(att), free(lse), free(rstd);
	free(fa), free(fb), free(scores);
}

/* What selective "op" recomputes, redone from cleared buffers, comes back
 * with the bits the whole forward wrote. */
static void test_recompute_list_same_bits(void **state)
{
	static const enum fwd_op redo[] = {F_NORM1, F_WK, F_ROPE_K, F_WO, F_NORM2, F_W3, F_SWIGLU};
	struct blk k;
	float *save = malloc((size_t)(T * C + T * KV + T * F) * sizeof(float));

	(void)state;
	blk_init(&k);
	assert_non_null(save);
	memcpy(save, k.a.h, T * C * sizeof(float));
	memcpy(save + T * C, k.a.k, T * KV * sizeof(float));
	memcpy(save + T * C + T * KV, k.a.g, T * F * sizeof(float));
	memset(k.a.h, 0, T * C * sizeof(float));
	memset(k.a.k, 0, T * KV * sizeof(float));
	memset(k.a.g, 0, T * F * sizeof(float));
	assert_int_equal(titan_block_fwd(&(struct titan_block){
		.be = &k.be, .sp = &k.sp, .attn = &k.cp, .freqs = k.freqs, .n = T, .B = 1, .T = T,
		.C = C, .F = F, .H = H, .Hkv = HKV, .D = D, .eps = 1e-5f,
	}, &k.w, k.x, k.y, &k.a, redo, 7), 0);
	assert_memory_equal(k.a.h, save, T * C * sizeof(float));
	assert_memory_equal(k.a.k, save + T * C, T * KV * sizeof(float));
	assert_memory_equal(k.a.g, save + T * C + T * KV, T * F * sizeof(float));
	free(save);
	blk_release(&k);
}

static void test_refusals(void **state)
{
	const enum fwd_op bad = F_NOPS;
	float scores[T + D], out[Q], lse[H];
	float *kc = calloc(T * KV, sizeof(float)), *vc = calloc(T * KV, sizeof(float));
	struct titan_attn_kv kv;
	struct blk k;

	(void)state;
	blk_init(&k);
	assert_true(kc && vc);
	titan_attn_kv_init(&kv, &k.be, H, HKV, D, T, scores, 1);
	kv.kc = kc, kv.vc = vc, kv.p0 = 2;
	kv.cp.tl = kv.cp.seq = kv.cp.n = 1;
	/* k, v not at the cache's row p0 */
	assert_int_equal(kv.cp.attn->fwd(&kv.cp, out, lse, k.a.q, kc, vc), TITAN_E_INVALID);
	assert_non_null(strstr(titan_error_last()->msg, "at position 2"));
	/* past the capacity */
	kv.p0 = T;
	assert_int_equal(kv.cp.attn->fwd(&kv.cp, out, lse, k.a.q, kc + T * KV, vc + T * KV),
			 TITAN_E_INVALID);
	assert_int_equal(kv.cp.attn->bwd(&kv.cp, out, out, out, out, out, out, out, out, lse),
			 TITAN_E_UNSUPPORTED);
	assert_int_equal(titan_block_fwd(&(struct titan_block){.be = &k.be, .sp = &k.sp,
							       .attn = &k.cp},
					 &k.w, k.x, k.y, &k.a, &bad, 1), TITAN_E_INVALID);
	free(kc), free(vc);
	blk_release(&k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kv_chunks_equal_local),
		cmocka_unit_test(test_recompute_list_same_bits),
		cmocka_unit_test(test_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
