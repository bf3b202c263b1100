/*
 * test_params.c — the parameter table (lib/model/params.c): torchtitan's
 * names, shapes and order, totals against titan_model_count_params, tied
 * embeddings, arena alignment and tags, init_weights statistics and bounds
 * per kind, determinism (seed, thread count), and row-range / FSDP-shard
 * init equal to the same rows of the whole tensor.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/model.h"

static void check_param(const struct titan_param *p, const char *name, int ndim, int64_t d0,
			int64_t d1)
{
	assert_string_equal(p->name, name);
	assert_int_equal(p->ndim, ndim);
	assert_int_equal(p->shape[0], d0);
	assert_int_equal(p->shape[1], ndim == 1 ? 1 : d1);
	assert_int_equal(p->numel, d0 * (ndim == 1 ? 1 : d1));
	assert_int_equal(p->row0, 0);
	assert_int_equal(p->rows, d0);
	assert_int_equal(p->local_numel, p->numel);
	assert_int_equal(p->offset % TITAN_PARAM_ALIGN, 0);
}

static void test_table_debugmodel(void **state)
{
	struct titan_model_dims d;
	struct titan_model_params cnt;
	struct titan_param_table t;
	char name[64];

	(void)state;
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	titan_model_count_params(&d, &cnt);
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(t.n, 3 + 9 * 6);
	assert_int_equal(t.numel, cnt.total);
	assert_int_equal(t.numel, 6163712);
	assert_int_equal(t.local_numel, t.numel);

	const int64_t C = 256, V = 2048;
	int k = 0;
	check_param(&t.params[k++], "tok_embeddings.weight", 2, V, C);
	for (int i = 0; i < 6; i++) {
		static const struct {
			const char *suffix;
			int ndim;
			int64_t d0, d1;
		} blk[] = {
			/* torchtitan's named_parameters() order */
			{"attention.wq.weight", 2, 256, 256},
			{"attention.wk.weight", 2, 256, 256},
			{"attention.wv.weight", 2, 256, 256},
			{"attention.wo.weight", 2, 256, 256},
			{"feed_forward.w1.weight", 2, 768, 256},
			{"feed_forward.w2.weight", 2, 256, 768},
			{"feed_forward.w3.weight", 2, 768, 256},
			{"attention_norm.weight", 1, 256, 0},
			{"ffn_norm.weight", 1, 256, 0},
		};
		for (int j = 0; j < 9; j++) {
			const struct titan_param *p = &t.params[k];

			snprintf(name, sizeof(name), "layers.%d.%s", i, blk[j].suffix);
			check_param(p, name, blk[j].ndim, blk[j].d0, blk[j].d1);
			assert_int_equal(p->layer, i);
			assert_int_equal(p->role, TITAN_PARAM_WQ + j);
			assert_int_equal(titan_param_index(&t, p->role, i), k);
			assert_ptr_equal(titan_param_find(&t, name), p);
			k++;
		}
	}
	check_param(&t.params[k++], "norm.weight", 1, C, 0);
	check_param(&t.params[k++], "output.weight", 2, V, C);
	assert_int_equal(k, t.n);

	/* kinds and flags */
	int64_t prev_end = 0, norms = 0;
	for (int i = 0; i < t.n; i++) {
		const struct titan_param *p = &t.params[i];

		assert_true(p->offset >= prev_end); /* no overlap, in order */
		assert_true(p->offset - prev_end < TITAN_PARAM_ALIGN);
		prev_end = p->offset + p->local_numel;
		assert_int_equal(p->is_norm, strstr(p->name, "norm") != NULL);
		assert_int_equal(p->is_embedding, i == 0);
		norms += p->is_norm ? p->numel : 0;
		if (p->is_norm)
			assert_int_equal(p->init.kind, TITAN_INIT_ONES);
	}
	assert_int_equal(norms, cnt.norms);
	assert_true(t.arena_floats >= prev_end && t.arena_floats - prev_end < TITAN_PARAM_ALIGN);
	assert_int_equal(t.arena_floats % TITAN_PARAM_ALIGN, 0);

	/* inits as torchtitan's init_weights */
	const struct titan_param *e = titan_param_find(&t, "tok_embeddings.weight");
	assert_int_equal(e->init.kind, TITAN_INIT_NORMAL);
	assert_true(e->init.std == 1.0f && e->init.mean == 0.0f);
	const struct titan_param *q = titan_param_find(&t, "layers.0.attention.wq.weight");
	assert_int_equal(q->init.kind, TITAN_INIT_TRUNC_NORMAL);
	assert_true(q->init.std == 0.02f && q->init.a == -2.0f && q->init.b == 2.0f);
	for (int i = 0; i < 6; i++) {
		static const char *const depth[] = {"attention.wo.weight", "feed_forward.w2.weight",
						    "feed_forward.w3.weight"};
		for (int j = 0; j < 3; j++) {
			snprintf(name, sizeof(name), "layers.%d.%s", i, depth[j]);
			const struct titan_param *p = titan_param_find(&t, name);
			assert_non_null(p);
			assert_true(p->init.std == (float)(0.02 / sqrt(2.0 * (i + 1))));
			assert_true(p->init.a == -2.0f && p->init.b == 2.0f);
		}
		snprintf(name, sizeof(name), "layers.%d.feed_forward.w1.weight", i);
		assert_true(titan_param_find(&t, name)->init.std == 0.02f);
	}
	const struct titan_param *o = titan_param_find(&t, "output.weight");
	assert_true(o->init.std == (float)(1.0 / 16.0));
	assert_true(o->init.a == (float)(-3.0 / 16.0) && o->init.b == (float)(3.0 / 16.0));
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_OUTPUT, -1), t.n - 1);
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_NORM, -1), t.n - 2);
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_WQ, 6), -1);
	assert_null(titan_param_find(&t, "layers.6.attention.wq.weight"));
	titan_param_table_release(&t);

	/* depth_init = false: 0.02 / sqrt(2·n_layers) everywhere */
	struct titan_param_table_opts opts;
	titan_param_table_opts_default(&opts);
	opts.depth_init = false;
	assert_int_equal(titan_param_table_init(&t, &d, &opts), 0);
	assert_true(t.params[titan_param_index(&t, TITAN_PARAM_W2, 0)].init.std ==
		    (float)(0.02 / sqrt(12.0)));
	assert_true(t.params[titan_param_index(&t, TITAN_PARAM_WO, 5)].init.std ==
		    (float)(0.02 / sqrt(12.0)));
	titan_param_table_release(&t);
	titan_param_table_release(NULL);
}

/* A MoE model (torchtitan's MoE in block 1 of 2, n_dense_layers 1): its
 * state_dict names and order, the experts held as [E, F·C] rows and
 * checkpointed 3-d, the expert_bias buffer, inits, counts and the MFU's
 * active parameters (get_moe_model_nparams_and_flops). */
static void test_table_moe(void **state)
{
	static const char *const block1[] = {
		"attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
		"attention.wo.weight", "moe.experts.w1", "moe.experts.w2", "moe.experts.w3",
		"moe.router.gate.weight", "moe.shared_experts.w1.weight",
		"moe.shared_experts.w2.weight", "moe.shared_experts.w3.weight",
		"attention_norm.weight", "ffn_norm.weight", "moe.expert_bias",
	};
	struct titan_model_dims d;
	struct titan_model_params cnt, dense;
	struct titan_param_table t;
	char name[96];

	(void)state;
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	d.n_layers = 2;
	titan_model_count_params(&d, &dense);
	d.moe = (struct titan_moe_dims){ .num_experts = 8, .num_shared_experts = 2, .top_k = 2,
					 .inter_dim = 64, .n_dense_layers = 1, .interleave_step = 1,
					 .route_scale = 1.0, .load_balance_coeff = 1e-3 };
	assert_false(titan_model_layer_is_moe(&d, 0));
	assert_true(titan_model_layer_is_moe(&d, 1));
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(t.n, 1 + 9 + 14 + 2);
	for (int i = 0; i < 14; i++) {
		snprintf(name, sizeof(name), "layers.1.%s", block1[i]);
		assert_string_equal(t.params[10 + i].name, name);
	}
	const int64_t C = d.dim, E = 8, Fm = 64, Fs = 128;
	const struct titan_param *w1 = &t.params[titan_param_index(&t, TITAN_PARAM_MOE_W1, 1)];
	const struct titan_param *w2 = &t.params[titan_param_index(&t, TITAN_PARAM_MOE_W2, 1)];
	assert_string_equal(w1->name, "layers.1.moe.experts.w1");
	assert_int_equal(w1->shape[0], E);
	assert_int_equal(w1->shape[1], Fm * C);
	assert_int_equal(w1->fndim, 3);
	assert_true(w1->fshape[0] == E && w1->fshape[1] == Fm && w1->fshape[2] == C);
	assert_true(w2->fshape[0] == E && w2->fshape[1] == C && w2->fshape[2] == Fm);
	assert_true(w1->init.std == 0.02f && w2->init.std == (float)(0.02 / sqrt(4.0)));
	assert_true(titan_param_find(&t, "layers.1.moe.router.gate.weight")->init.std ==
		    (float)(0.02 / sqrt(4.0)));
	assert_int_equal(titan_param_find(&t, "layers.1.moe.shared_experts.w1.weight")->shape[0],
			 Fs);
	const struct titan_param *b = titan_param_find(&t, "layers.1.moe.expert_bias");
	assert_true(b->is_buffer && b->init.kind == TITAN_INIT_ZEROS && b->numel == E);
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_W1, 1), -1);
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_MOE_W1, 0), -1);
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_WQ, 1), 10);
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_NORM, -1), t.n - 2);
	/* counts: the buffer is no parameter; a token uses 2 of 8 experts */
	titan_model_count_params(&d, &cnt);
	const int64_t moe = E * C + 3 * E * Fm * C + 3 * Fs * C;
	assert_int_equal(cnt.total, dense.total - dense.feed_forward + moe);
	assert_int_equal(t.numel, cnt.total);
	assert_int_equal(cnt.active, cnt.total - 3 * (E - 2) * Fm * C);
	const double attn = 12.0 * 2 * d.n_heads * d.head_dim * 64;
	assert_true(titan_model_flops_per_token(&d, 64) ==
		    6.0 * (double)(cnt.active - cnt.embedding) + attn);
	titan_param_table_release(&t);
}

static void test_table_tied_gqa(void **state)
{
	struct titan_model_dims d;
	struct titan_model_params cnt;
	struct titan_param_table t;

	(void)state;
	assert_int_equal(titan_model_flavor("1B", &d), 0);
	assert_true(d.tied);
	titan_model_count_params(&d, &cnt);
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(t.n, 2 + 9 * 16);
	assert_int_equal(t.numel, cnt.total);
	assert_null(titan_param_find(&t, "output.weight"));
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_OUTPUT, -1), -1);
	assert_string_equal(t.params[t.n - 1].name, "norm.weight");
	/* GQA: 8 kv heads of 64 */
	const struct titan_param *k = titan_param_find(&t, "layers.15.attention.wk.weight");
	assert_non_null(k);
	assert_int_equal(k->shape[0], 512);
	assert_int_equal(k->shape[1], 2048);
	assert_int_equal(titan_param_find(&t, "layers.3.attention.wo.weight")->shape[1], 2048);
	assert_int_equal(titan_param_find(&t, "layers.3.feed_forward.w2.weight")->shape[1], 8192);
	/* the shared matrix takes the output init (torchtitan HEAD) */
	const struct titan_param *e = &t.params[0];
	assert_true(e->is_embedding);
	assert_int_equal(e->init.kind, TITAN_INIT_TRUNC_NORMAL);
	assert_true(e->init.std == (float)(1.0 / sqrt(2048.0)));
	assert_true(e->init.b == (float)(3.0 / sqrt(2048.0)));
	titan_param_table_release(&t);

	/* bad dims and shards */
	d.dim = 0;
	assert_int_equal(titan_param_table_init(&t, &d, NULL), TITAN_E_INVALID);
	titan_param_table_release(&t);
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	struct titan_param_table_opts o;
	titan_param_table_opts_default(&o);
	o.shard_rank = 2;
	o.shard_degree = 2;
	assert_int_equal(titan_param_table_init(&t, &d, &o), TITAN_E_INVALID);
	titan_param_table_release(&t);
}

static void test_arena(void **state)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_param_arena w, g, m, v;
	struct titan_mem_stats st;
	struct titan_allocator *al = titan_allocator_new("test", NULL);

	(void)state;
	assert_non_null(al);
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	d.vocab_size = 1001; /* odd sizes: padding between tensors */
	d.dim = 40;
	d.n_heads = 4;
	d.n_kv_heads = 2;
	d.head_dim = 10;
	d.n_layers = 2;
	d.ffn_hidden = 120;
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(titan_param_arena_init(&w, &t, al, TITAN_MEM_PARAMS), 0);
	assert_int_equal(titan_param_arena_init(&g, &t, al, TITAN_MEM_GRADS), 0);
	assert_int_equal(titan_param_arena_init(&m, &t, al, TITAN_MEM_OPTIM), 0);
	assert_int_equal(titan_param_arena_init(&v, &t, al, TITAN_MEM_OPTIM), 0);
	titan_mem_get_stats(al, &st);
	const int64_t bytes = t.arena_floats * (int64_t)sizeof(float);
	assert_int_equal(st.cur[TITAN_MEM_PARAMS], bytes);
	assert_int_equal(st.cur[TITAN_MEM_GRADS], bytes);
	assert_int_equal(st.cur[TITAN_MEM_OPTIM], 2 * bytes);
	assert_int_equal(st.n_alloc, 4);

	titan_model_init_params(&w, 1);
	for (int i = 0; i < t.n; i++) {
		const struct titan_param *p = &t.params[i];

		assert_int_equal((uintptr_t)titan_param_view(&w, p) % 64, 0);
		assert_int_equal((uintptr_t)titan_param_view(&g, p) % 64, 0);
		assert_ptr_equal(titan_param_view(&g, p) - g.data, titan_param_view(&w, p) - w.data);
		/* padding after the tensor stays zero */
		int64_t end = i + 1 < t.n ? t.params[i + 1].offset : t.arena_floats;
		for (int64_t j = p->offset + p->local_numel; j < end; j++)
			assert_true(w.data[j] == 0.0f);
		assert_true(titan_param_view(&g, p)[0] == 0.0f);
	}
	assert_true(t.params[0].numel % TITAN_PARAM_ALIGN != 0); /* there was padding */

	titan_param_arena_release(&w);
	titan_param_arena_release(&w); /* idempotent */
	titan_param_arena_release(&g);
	titan_param_arena_release(&m);
	titan_param_arena_release(&v);
	titan_param_arena_release(NULL);
	titan_mem_get_stats(al, &st);
	assert_int_equal(st.total_cur, 0);
	titan_param_table_release(&t);
	titan_allocator_free(al);
}

/* A mid-size model (~6.6M values) with GQA and 4 layers. */
static void mid_dims(struct titan_model_dims *d)
{
	assert_int_equal(titan_model_flavor("debugmodel", d), 0);
	d->dim = 384;
	d->n_layers = 4;
	d->n_heads = 6;
	d->n_kv_heads = 2;
	d->head_dim = 64;
	d->ffn_hidden = titan_ffn_hidden_dim(384, 256, NAN);
	d->vocab_size = 4096;
}

struct moments {
	double mean, std, min, max;
};

/* A small one for exact comparisons. */
static void small_dims(struct titan_model_dims *d)
{
	mid_dims(d);
	d->dim = 128;
	d->n_layers = 2;
	d->n_heads = 4;
	d->n_kv_heads = 2;
	d->head_dim = 32;
	d->ffn_hidden = titan_ffn_hidden_dim(128, 64, NAN);
	d->vocab_size = 1003;
}

static struct moments moments_of(const float *x, int64_t n)
{
	double s = 0, s2 = 0;
	struct moments m = { 0, 0, INFINITY, -INFINITY };

	for (int64_t i = 0; i < n; i++) {
		s += x[i];
		s2 += (double)x[i] * x[i];
		m.min = x[i] < m.min ? x[i] : m.min;
		m.max = x[i] > m.max ? x[i] : m.max;
	}
	m.mean = s / (double)n;
	m.std = sqrt(s2 / (double)n - m.mean * m.mean);
	return m;
}

/* The shard of p in arena a holds p's rows of the whole model's q. */
static void assert_rows_of(const struct titan_param_arena *a, const struct titan_param *p,
			   const struct titan_param_arena *whole, const struct titan_param *q)
{
	assert_memory_equal(titan_param_view(a, p),
			    titan_param_view(whole, q) + p->row0 * q->shape[1],
			    (size_t)p->local_numel * sizeof(float));
}

/* std of N(0, σ²) truncated to ±cσ, divided by σ */
static double trunc_std_factor(double c)
{
	double phi = exp(-0.5 * c * c) / sqrt(2.0 * 3.14159265358979323846);
	double z = erf(c / sqrt(2.0));
	return sqrt(1.0 - 2.0 * c * phi / z);
}

static void test_init_stats(void **state)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_param_arena w;

	(void)state;
	mid_dims(&d);
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(titan_param_arena_init(&w, &t, NULL, TITAN_MEM_PARAMS), 0);
	titan_model_init_params(&w, 1234);
	for (int i = 0; i < t.n; i++) {
		const struct titan_param *p = &t.params[i];
		const float *x = titan_param_view(&w, p);
		struct moments m = moments_of(x, p->numel);
		double n = (double)p->numel, sigma = p->init.std, expect = sigma;

		if (p->init.kind == TITAN_INIT_ONES) {
			assert_true(m.min == 1.0 && m.max == 1.0);
			continue;
		}
		if (p->init.kind == TITAN_INIT_TRUNC_NORMAL) {
			assert_true(m.min >= p->init.a && m.max <= p->init.b);
			expect = sigma * trunc_std_factor(p->init.b / sigma);
		}
		/* mean within 5 standard errors, std within 5 of its standard
		 * error (≈ σ/sqrt(2n)) plus a little */
		if (fabs(m.mean) > 5.0 * expect / sqrt(n) || fabs(m.std - expect) >
		    5.0 * expect / sqrt(2.0 * n) + 1e-3 * expect)
			fail_msg("%s: mean %g std %g, expected 0 and %g (n %g)", p->name, m.mean,
				 m.std, expect, n);
		/* the tails are reached */
		assert_true(m.max > 0.8 * (p->init.kind == TITAN_INIT_TRUNC_NORMAL &&
					   p->init.b < 3.5 * sigma ? p->init.b : 3.5 * sigma));
	}
	/* the ±3σ truncation of output.weight is visible: std < σ */
	const struct titan_param *o = titan_param_find(&t, "output.weight");
	struct moments m = moments_of(titan_param_view(&w, o), o->numel);
	assert_true(m.std < 0.995 * o->init.std);
	assert_true(m.max > 0.99 * o->init.b && m.min < 0.99 * o->init.a);
	titan_param_arena_release(&w);
	titan_param_table_release(&t);
}

static void test_init_determinism(void **state)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_param_arena a, b;

	(void)state;
	small_dims(&d);
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(titan_param_arena_init(&a, &t, NULL, TITAN_MEM_PARAMS), 0);
	assert_int_equal(titan_param_arena_init(&b, &t, NULL, TITAN_MEM_PARAMS), 0);
	const size_t bytes = (size_t)t.arena_floats * sizeof(float);
	int threads = omp_get_max_threads();

	omp_set_num_threads(1);
	titan_model_init_params(&a, 42);
	omp_set_num_threads(4);
	titan_model_init_params(&b, 42);
	omp_set_num_threads(threads);
	assert_memory_equal(a.data, b.data, bytes);

	titan_model_init_params(&b, 43);
	for (int i = 0; i < t.n; i++) {
		const struct titan_param *p = &t.params[i];
		bool same = memcmp(titan_param_view(&a, p), titan_param_view(&b, p),
				   (size_t)p->numel * sizeof(float)) == 0;
		assert_int_equal(same, p->init.kind == TITAN_INIT_ONES);
	}
	/* parameters draw from distinct streams */
	const struct titan_param *q = titan_param_find(&t, "layers.0.attention.wq.weight");
	const struct titan_param *k = titan_param_find(&t, "layers.1.attention.wq.weight");
	assert_memory_not_equal(titan_param_view(&a, q), titan_param_view(&a, k), 64 * sizeof(float));
	titan_param_arena_release(&a);
	titan_param_arena_release(&b);
	titan_param_table_release(&t);
}

static void test_row_shards(void **state)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_param_arena whole;

	(void)state;
	small_dims(&d);
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(titan_param_arena_init(&whole, &t, NULL, TITAN_MEM_PARAMS), 0);
	titan_model_init_params(&whole, 7);

	/* any row range initialised alone equals those rows of the whole */
	static const char *const names[] = {"tok_embeddings.weight", "layers.1.attention.wk.weight",
					    "layers.0.feed_forward.w2.weight", "norm.weight",
					    "output.weight"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const struct titan_param *p = titan_param_find(&t, names[i]);
		const int64_t r0[] = {0, 1, 5, p->shape[0] - 3};
		const int64_t nr[] = {p->shape[0], 2, 300 < p->shape[0] - 5 ? 300 : p->shape[0] - 5, 3};
		float *buf = malloc((size_t)p->numel * sizeof(float));

		for (int j = 0; j < 4; j++) {
			titan_model_init_param_rows(p, 7, r0[j], nr[j], buf);
			assert_memory_equal(buf, titan_param_view(&whole, p) + r0[j] * p->shape[1],
					    (size_t)(nr[j] * p->shape[1]) * sizeof(float));
		}
		titan_model_init_param_rows(p, 7, 0, 0, buf); /* empty range is fine */
		free(buf);
	}

	/* FSDP-style tables: shard r of R holds torch.chunk rows; their inits
	 * put together are the whole model */
	for (int R = 2; R <= 5; R += 3) {
		int64_t *rows_seen = calloc((size_t)t.n, sizeof(int64_t));

		for (int r = 0; r < R; r++) {
			struct titan_param_table_opts o;
			struct titan_param_table ts;
			struct titan_param_arena a;

			titan_param_table_opts_default(&o);
			o.shard_rank = r;
			o.shard_degree = R;
			assert_int_equal(titan_param_table_init(&ts, &d, &o), 0);
			assert_int_equal(ts.n, t.n);
			assert_int_equal(ts.numel, t.numel);
			assert_int_equal(titan_param_arena_init(&a, &ts, NULL, TITAN_MEM_PARAMS), 0);
			titan_model_init_params(&a, 7);
			for (int i = 0; i < ts.n; i++) {
				const struct titan_param *p = &ts.params[i];
				int64_t chunk = (p->shape[0] + R - 1) / R;

				assert_int_equal(p->offset % TITAN_PARAM_ALIGN, 0);
				assert_int_equal(p->row0, chunk * r < p->shape[0] ? chunk * r : p->shape[0]);
				assert_int_equal(p->row0, rows_seen[i]);
				rows_seen[i] += p->rows;
				assert_rows_of(&a, p, &whole, &t.params[i]);
			}
			titan_param_arena_release(&a);
			titan_param_table_release(&ts);
		}
		for (int i = 0; i < t.n; i++)
			assert_int_equal(rows_seen[i], t.params[i].shape[0]);
		free(rows_seen);
	}
	titan_param_arena_release(&whole);
	titan_param_table_release(&t);
}

/* Expert parallelism: the stacked experts of EP rank e hold experts
 * [e·E/ep, (e + 1)·E/ep) only, sharded over its efsdp peers (the shard
 * ranks r with r mod ep = e, efsdp rank r / ep by default); every other
 * parameter is the plain FSDP shard.  Over all shard ranks each expert row
 * is held once and initialised as in the whole model. */
static void test_ep_shards(void **state)
{
	static const int layouts[][2] = { {2, 2}, {4, 2}, {4, 4}, {8, 2} }; /* shards, ep */
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_param_arena whole;

	(void)state;
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	d.n_layers = 2;
	d.moe = (struct titan_moe_dims){ .num_experts = 8, .num_shared_experts = 1, .top_k = 2,
					 .inter_dim = 32, .interleave_step = 1, .route_scale = 1.0 };
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(titan_param_arena_init(&whole, &t, NULL, TITAN_MEM_PARAMS), 0);
	titan_model_init_params(&whole, 7);
	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		const int R = layouts[l][0], P = layouts[l][1];
		int64_t *rows_seen = calloc((size_t)t.n, sizeof(int64_t));

		for (int r = 0; r < R; r++) {
			struct titan_param_table_opts o, f;
			struct titan_param_table ts, tf;
			struct titan_param_arena a;

			titan_param_table_opts_default(&o);
			o.shard_rank = r;
			o.shard_degree = R;
			f = o;
			o.ep_rank = r % P;
			o.ep_degree = P;
			assert_int_equal(titan_param_table_init(&ts, &d, &o), 0);
			assert_int_equal(titan_param_table_init(&tf, &d, &f), 0);
			assert_int_equal(ts.opts.ep_shard_rank, r / P);
			assert_int_equal(ts.opts.ep_shard_degree, R / P);
			assert_int_equal(titan_param_arena_init(&a, &ts, NULL, TITAN_MEM_PARAMS), 0);
			titan_model_init_params(&a, 7);
			/* the unsharded view lacks (E - E/ep) experts of each w1/w2/w3 */
			assert_int_equal(tf.full_arena_floats - ts.full_arena_floats,
					 d.n_layers * 3 * (8 - 8 / P) * 32 * d.dim);
			for (int i = 0; i < ts.n; i++) {
				const struct titan_param *p = &ts.params[i], *q = &tf.params[i];
				const bool ex = p->role == TITAN_PARAM_MOE_W1 ||
						p->role == TITAN_PARAM_MOE_W2 ||
						p->role == TITAN_PARAM_MOE_W3;

				assert_int_equal(p->ep_sharded, ex);
				if (ex) {
					const int64_t El = 8 / P, chunk = (El + R / P - 1) / (R / P);

					assert_int_equal(p->full_rows, El);
					assert_int_equal(p->full_row0, (r % P) * El);
					assert_int_equal(p->chunk_rows, chunk);
					assert_int_equal(p->row0, (r % P) * El + (r / P) * chunk);
				} else {
					assert_int_equal(p->full_row0, 0);
					assert_int_equal(p->full_rows, p->shape[0]);
					assert_int_equal(p->row0, q->row0);
					assert_int_equal(p->rows, q->rows);
				}
				rows_seen[i] += p->rows;
				assert_rows_of(&a, p, &whole, &t.params[i]);
			}
			titan_param_arena_release(&a);
			titan_param_table_release(&ts);
			titan_param_table_release(&tf);
		}
		for (int i = 0; i < t.n; i++)
			assert_int_equal(rows_seen[i], t.params[i].shape[0]);
		free(rows_seen);
	}
	/* an EP degree that does not split the experts, or the shards */
	{
		struct titan_param_table_opts o;
		struct titan_param_table ts;

		titan_param_table_opts_default(&o);
		o.shard_degree = 3;
		o.ep_degree = 3;
		assert_int_equal(titan_param_table_init(&ts, &d, &o), TITAN_E_INVALID);
		assert_non_null(strstr(titan_errmsg(), "model.moe_num_experts 8"));
		o.shard_degree = 2;
		o.ep_degree = 4;
		assert_int_equal(titan_param_table_init(&ts, &d, &o), TITAN_E_INVALID);
	}
	titan_param_arena_release(&whole);
	titan_param_table_release(&t);
}

/* EP x TP (torchtitan's ETP 1): the experts are never TP-split, whole
 * on the EP rank (f mod ep of f = shard_rank·tp + tp_rank by default) and
 * sharded over the efsdp peers (f / ep); titan_param_tp_replicated is
 * false for them, true for the router and the norms; the shared experts
 * stay TP-split. */
static void test_ep_tp(void **state)
{
	struct titan_model_dims d;
	struct titan_param_table t;
	struct titan_param_table_opts o;

	(void)state;
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	d.n_layers = 1;
	d.moe = (struct titan_moe_dims){ .num_experts = 8, .num_shared_experts = 1, .top_k = 2,
					 .inter_dim = 32, .interleave_step = 1, .route_scale = 1.0 };
	titan_param_table_opts_default(&o);
	o.shard_rank = 1;
	o.shard_degree = 2;
	o.tp_rank = 1;
	o.tp_degree = 2;
	o.ep_rank = 1; /* f = 3 */
	o.ep_degree = 2;
	assert_int_equal(titan_param_table_init(&t, &d, &o), 0);
	assert_int_equal(t.opts.ep_shard_rank, 1);
	assert_int_equal(t.opts.ep_shard_degree, 2);
	for (int i = 0; i < t.n; i++) {
		const struct titan_param *p = &t.params[i];

		switch (p->role) {
		case TITAN_PARAM_MOE_W1: case TITAN_PARAM_MOE_W2: case TITAN_PARAM_MOE_W3:
			assert_true(p->ep_sharded && p->tp_dim == -1);
			assert_false(titan_param_tp_replicated(p));
			assert_int_equal(p->shape[1], 32 * d.dim); /* the whole hidden dim */
			assert_int_equal(p->full_row0, 4);
			assert_int_equal(p->row0, 6);
			assert_int_equal(p->rows, 2);
			break;
		case TITAN_PARAM_MOE_GATE: case TITAN_PARAM_FFN_NORM:
			assert_true(titan_param_tp_replicated(p));
			break;
		case TITAN_PARAM_MOE_SHARED_W1:
			assert_int_equal(p->tp_dim, 0);
			assert_int_equal(p->shape[0], 16);
			break;
		default:
			break;
		}
	}
	titan_param_table_release(&t);
	/* experts sharded over more ranks than dp_shard x tp hold */
	o.ep_shard_rank = 0;
	o.ep_shard_degree = 4;
	assert_int_equal(titan_param_table_init(&t, &d, &o), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "over parameter shards 2 x TP 2"));
}

/* Dims read from a file (config.json, checkpoint attributes) can be any
 * int64: sizes whose element counts overflow int64 are refused (found by
 * tests/fuzz/fuzz_hf: hidden_size 80000000000000 overflowed wq's numel). */
static void test_huge_dims(void **state)
{
	struct titan_model_dims d;
	struct titan_param_table t;

	(void)state;
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	d.dim = 80000000000000;
	d.head_dim = d.dim / d.n_heads;
	assert_int_equal(titan_param_table_init(&t, &d, NULL), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "too many parameters to count in 64 bits"));
	titan_param_table_release(&t);
	/* heads x head_dim overflows by itself; negative factors are not sizes */
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	d.n_heads = d.n_kv_heads = (int64_t)1 << 32;
	d.head_dim = (int64_t)1 << 32;
	assert_int_equal(titan_param_table_init(&t, &d, NULL), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "too many parameters"));
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	d.n_heads = d.n_kv_heads = -2;
	d.head_dim = -d.head_dim;
	assert_int_equal(titan_param_table_init(&t, &d, NULL), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "every size must be positive"));
	/* the largest flavor still fits */
	assert_int_equal(titan_model_flavor("405B", &d), 0);
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	titan_param_table_release(&t);
	titan_error_clear();
}

/* Qwen3 0.6B: torchtitan's dense qwen3 table (q_norm, k_norm first in each
 * block, head_dim 128 apart from dim / heads, tied), its roles and counts,
 * and TP slicing that leaves the per-head norms replicated. */
static void test_table_qwen3(void **state)
{
	struct titan_model_dims d;
	struct titan_model_params cnt;
	struct titan_param_table t;
	struct titan_param_table_opts o;

	(void)state;
	assert_int_equal(titan_model_family_flavor(TITAN_MODEL_NAME_QWEN3, "0.6B", &d), 0);
	assert_true(d.tied && d.qk_norm);
	assert_int_equal(d.head_dim, 128);
	assert_int_equal(d.ffn_hidden, 3072);
	assert_true(d.norm_eps == 1e-6 && d.rope_theta == 1e6 && !d.rope_scaling);
	titan_model_count_params(&d, &cnt);
	assert_int_equal(cnt.total, 596049920); /* Qwen3-0.6B */
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(t.n, 2 + 11 * 28);
	assert_int_equal(t.numel, cnt.total);
	static const char *const block[] = {
		"attention.q_norm.weight", "attention.k_norm.weight", "attention.wq.weight",
		"attention.wk.weight", "attention.wv.weight", "attention.wo.weight",
		"feed_forward.w1.weight", "feed_forward.w2.weight", "feed_forward.w3.weight",
		"attention_norm.weight", "ffn_norm.weight"};
	for (int i = 0; i < 11; i++) {
		char want[64];

		snprintf(want, sizeof(want), "layers.5.%s", block[i]);
		assert_string_equal(t.params[1 + 11 * 5 + i].name, want);
	}
	static const enum titan_param_role roles[] = {
		TITAN_PARAM_Q_NORM, TITAN_PARAM_K_NORM, TITAN_PARAM_WQ, TITAN_PARAM_WK, TITAN_PARAM_WV,
		TITAN_PARAM_WO, TITAN_PARAM_W1, TITAN_PARAM_W2, TITAN_PARAM_W3,
		TITAN_PARAM_ATTENTION_NORM, TITAN_PARAM_FFN_NORM};
	for (int i = 0; i < 11; i++) {
		int at = titan_param_index(&t, roles[i], 7);

		assert_int_equal(at, 1 + 11 * 7 + i);
		assert_int_equal(t.params[at].role, roles[i]);
	}
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_NORM, -1), t.n - 1);
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_OUTPUT, -1), -1);
	const struct titan_param *qn = titan_param_find(&t, "layers.0.attention.q_norm.weight");
	assert_int_equal(qn->ndim, 1);
	assert_int_equal(qn->numel, 128);
	assert_true(qn->is_norm);
	assert_int_equal(qn->init.kind, TITAN_INIT_ONES);
	assert_int_equal(titan_param_find(&t, "layers.0.attention.wq.weight")->shape[0], 16 * 128);
	assert_int_equal(titan_param_find(&t, "layers.0.attention.wo.weight")->shape[1], 16 * 128);
	titan_param_table_release(&t);
	/* TP 2: q/k/v split by heads, the norms replicated */
	titan_param_table_opts_default(&o);
	o.tp_rank = 1;
	o.tp_degree = 2;
	assert_int_equal(titan_param_table_init(&t, &d, &o), 0);
	qn = titan_param_find(&t, "layers.3.attention.k_norm.weight");
	assert_int_equal(qn->tp_dim, -1);
	assert_int_equal(qn->shape[0], 128);
	assert_int_equal(titan_param_find(&t, "layers.3.attention.wk.weight")->shape[0], 4 * 128);
	titan_param_table_release(&t);
	/* Llama 3 keeps 9 a block and no q/k norms */
	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_Q_NORM, 0), -1);
	assert_int_equal(titan_param_index(&t, TITAN_PARAM_WQ, 1), 1 + 9);
	titan_param_table_release(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_debugmodel),
		cmocka_unit_test(test_table_tied_gqa),
		cmocka_unit_test(test_table_qwen3),
		cmocka_unit_test(test_table_moe),
		cmocka_unit_test(test_arena),
		cmocka_unit_test(test_init_stats),
		cmocka_unit_test(test_init_determinism),
		cmocka_unit_test(test_row_shards),
		cmocka_unit_test(test_ep_shards),
		cmocka_unit_test(test_ep_tp),
		cmocka_unit_test(test_huge_dims),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
