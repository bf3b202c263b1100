/* test_generate.c — inference with a KV cache (lib/generate): the logits
 * of every position, by one prefill, token by token and in mixed chunks,
 * equal titan_llama_logits (the training forward) on the same tokens; the
 * generation loop equals greedy decoding by full recomputation and stops at
 * EOS, max_new_tokens and the capacity; the samplers keep what top-k and
 * top-p keep, draw with the right frequencies and repeat with a seed; a
 * checkpoint and its HF export load to the model's exact weights.
 *
 * Tolerance of the logit comparisons: |gen − ref| <= 1e-5 · max(1, max|ref|)
 * per row, ref being titan_llama_logits.  The two forwards run the same ops
 * on the same weights; they differ by sgemm blocking (other row counts) and,
 * for positions after the first chunk, by the cache attention kernel
 * (another summation order than the flash kernel): float rounding, ~1e-7
 * relative on these models. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/ckpt.h"
#include "titan/core.h"
#include "titan/generate.h"
#include "titan/model.h"
#include "titan/ops.h"
#include "titan/train.h"
#include "scratch.h"

#define TOL 1e-5

enum { T = 24 };

static bool qwen3; /* tiny(): a Qwen3 (QK-norm, head_dim 12 != dim / n_heads) */
static int moe;    /* tiny(): blocks 1, 2 MoE; 1: softmax, shared experts, bias; 2: sigmoid */

static struct titan_model_dims tiny(bool tied)
{
	struct titan_model_dims d;

	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	d.dim = 32;
	d.n_layers = 3;
	d.n_heads = 4;
	d.n_kv_heads = 2;
	d.head_dim = 8;
	d.vocab_size = 61;
	d.multiple_of = 16;
	d.ffn_dim_multiplier = NAN;
	d.ffn_hidden = titan_ffn_hidden_dim(d.dim, d.multiple_of, d.ffn_dim_multiplier);
	/* a small theta turns the rotation fast enough to matter in 24 steps */
	d.rope_theta = 100.0;
	d.tied = tied;
	if (qwen3) {
		d.family = TITAN_MODEL_NAME_QWEN3;
		d.qk_norm = true;
		d.head_dim = 12;
		d.rope_scaling = false;
		d.norm_eps = 1e-6;
	}
	if (moe)
		d.moe = (struct titan_moe_dims){
			.num_experts = 4, .num_shared_experts = moe == 1, .top_k = 2,
			.inter_dim = 16, .n_dense_layers = 1, .interleave_step = 1,
			.softmax = moe == 1, .route_norm = moe == 1, .score_before_experts = moe == 2,
			.route_scale = 1.5, .load_balance_coeff = moe == 1 ? 1e-3 : NAN};
	return d;
}

struct fixture {
	struct titan_backend be;
	struct titan_llama *m;
	int32_t tok[T];
	float *ref;                       /* [T, V] titan_llama_logits */
	int64_t V;
};

static void fixture_init(struct fixture *f, bool tied, int threads)
{
	struct titan_model_dims d = tiny(tied);
	struct titan_llama_opts o = {.batch = 1, .seq = T, .ac = TITAN_AC_NONE};
	struct titan_rng r;

	f->V = d.vocab_size;
	assert_int_equal(titan_backend_cpu_init(&f->be, threads), 0);
	assert_int_equal(titan_llama_new(&d, &o, &f->be, NULL, &f->m), 0);
	titan_llama_init_weights(f->m, 11);
	if (moe) { /* an expert_bias that changes the choice (it starts at zero) */
		const struct titan_param_table *t = titan_llama_table(f->m);

		for (int i = 0; i < t->n; i++)
			if (t->params[i].role == TITAN_PARAM_MOE_EXPERT_BIAS)
				for (int64_t e = 0; e < t->params[i].numel; e++)
					titan_llama_params(f->m)->data[t->params[i].offset + e] =
						0.05f * (float)(e % 3);
	}
	titan_rng_init(&r, 5, 9);
	for (int i = 0; i < T; i++)
		f->tok[i] = (int32_t)titan_rng_below(&r, (uint64_t)d.vocab_size);
	f->ref = malloc((size_t)(T * f->V) * sizeof(float));
	assert_non_null(f->ref);
	assert_int_equal(titan_llama_logits(f->m, f->tok, f->ref), 0);
}

static void fixture_release(struct fixture *f)
{
	free(f->ref);
	titan_llama_free(f->m);
	titan_backend_release(&f->be);
}

static struct titan_generator *gen_new(struct fixture *f, int64_t capacity, int64_t batch)
{
	struct titan_generator_opts o = {.capacity = capacity, .batch = batch};
	struct titan_generator *g;
	int rc = titan_generator_new(titan_llama_table(f->m), titan_llama_params(f->m)->data, &o,
				     &f->be, NULL, &g);

	if (rc)
		print_message("%s\n", titan_errmsg());
	assert_int_equal(rc, 0);
	return g;
}

/* logits row `got` against reference position `pos` */
static double row_err(const struct fixture *f, const float *got, int pos)
{
	const float *ref = f->ref + (int64_t)pos * f->V;
	double scale = 1, err = 0;

	for (int64_t v = 0; v < f->V; v++)
		if (fabs(ref[v]) > scale)
			scale = fabs(ref[v]);
	for (int64_t v = 0; v < f->V; v++)
		if (fabs((double)got[v] - ref[v]) > err)
			err = fabs((double)got[v] - ref[v]);
	return err / scale;
}

static void check_logits(bool tied, int threads)
{
	struct fixture f;
	struct titan_generator *g;
	float *lg;
	double worst = 0, e;

	fixture_init(&f, tied, threads);
	lg = malloc((size_t)(T * f.V) * sizeof(float));
	assert_non_null(lg);

	/* one prefill of the whole sequence, every position's logits */
	g = gen_new(&f, T, 0);
	assert_int_equal(titan_generator_forward(g, f.tok, T, lg, true), 0);
	assert_int_equal(titan_generator_pos(g), T);
	for (int i = 0; i < T; i++) {
		e = row_err(&f, lg + (int64_t)i * f.V, i);
		worst = e > worst ? e : worst;
		assert_true(e <= TOL);
	}
	/* token by token: the first through attention_fwd, the rest the cache */
	titan_generator_reset(g);
	for (int i = 0; i < T; i++) {
		assert_int_equal(titan_generator_forward(g, f.tok + i, 1, lg, false), 0);
		e = row_err(&f, lg, i);
		worst = e > worst ? e : worst;
		assert_true(e <= TOL);
	}
	/* full: one more token has no place */
	assert_int_equal(titan_generator_forward(g, f.tok, 1, lg, false), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "capacity of 24"));
	titan_generator_free(g);

	/* chunks of 5 (the cache kernel with several queries), last-only
	 * logits of a multi-chunk prefill, then single tokens */
	g = gen_new(&f, T, 5);
	assert_int_equal(titan_generator_forward(g, f.tok, 12, lg, true), 0);
	for (int i = 0; i < 12; i++)
		assert_true(row_err(&f, lg + (int64_t)i * f.V, i) <= TOL);
	assert_int_equal(titan_generator_forward(g, f.tok + 12, 8, lg, false), 0);
	assert_true(row_err(&f, lg, 19) <= TOL);
	for (int i = 20; i < T; i++) {
		assert_int_equal(titan_generator_forward(g, f.tok + i, 1, lg, false), 0);
		assert_true(row_err(&f, lg, i) <= TOL);
	}
	/* an id outside the vocabulary */
	titan_generator_reset(g);
	assert_int_equal(titan_generator_forward(g, (int32_t[]){3, 61}, 2, lg, false),
			 TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "outside the vocabulary"));
	titan_generator_free(g);
	print_message("tied %d, %d threads: worst relative logit difference %.3g\n", tied,
		      threads, worst);
	free(lg);
	fixture_release(&f);
}

static void test_logits_match_training_forward(void **state)
{
	(void)state;
	check_logits(false, 1);
	check_logits(true, 1);
	check_logits(false, 2);
}

/* block_causal (training.attn_mask_type): the generator's logits equal
 * the training model's under the same document mask, documents ending at
 * id EOS (a one-token document, documents across the chunks of 5), in one
 * prefill, in chunks (the cache kernel from a document's first position)
 * and token by token; and they differ from the causal ones. */
static void test_block_causal_matches_training_forward(void **state)
{
	enum { EOS = 7 };
	static const int ends[] = {3, 4, 9, 13, 17};
	struct titan_model_dims d = tiny(false);
	struct titan_llama_opts o = {.batch = 1, .seq = T, .ac = TITAN_AC_NONE,
				     .block_causal = true, .doc_eos = EOS, .doc_bos = -1};
	struct titan_generator_opts go = {.capacity = T, .block_causal = true, .doc_eos = EOS};
	struct fixture f;
	struct titan_llama *m;
	struct titan_generator *g;
	float *ref = malloc((size_t)(T * d.vocab_size) * sizeof(float));
	float *lg = malloc((size_t)(T * d.vocab_size) * sizeof(float));

	(void)state;
	fixture_init(&f, false, 2);
	assert_non_null(ref);
	assert_non_null(lg);
	for (int i = 0; i < T; i++)
		f.tok[i] = f.tok[i] == EOS ? EOS + 1 : f.tok[i];
	for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++)
		f.tok[ends[i]] = EOS;
	assert_int_equal(titan_llama_new(&d, &o, &f.be, NULL, &m), 0);
	titan_llama_init_weights(m, 11);
	assert_int_equal(titan_llama_logits(m, f.tok, ref), 0);
	assert_int_equal(titan_llama_logits(f.m, f.tok, f.ref), 0); /* causal */
	assert_true(row_err(&f, ref + 20 * f.V, 20) > 1e-3);
	memcpy(f.ref, ref, (size_t)(T * f.V) * sizeof(float));
	for (int64_t batch = 0; batch <= 5; batch += 5) {
		go.batch = batch;
		assert_int_equal(titan_generator_new(titan_llama_table(m), titan_llama_params(m)->data,
						     &go, &f.be, NULL, &g), 0);
		assert_int_equal(titan_generator_forward(g, f.tok, T, lg, true), 0);
		for (int i = 0; i < T; i++)
			assert_true(row_err(&f, lg + (int64_t)i * f.V, i) <= TOL);
		titan_generator_reset(g);
		for (int i = 0; i < T; i++) {
			assert_int_equal(titan_generator_forward(g, f.tok + i, 1, lg, false), 0);
			assert_true(row_err(&f, lg, i) <= TOL);
		}
		titan_generator_free(g);
	}
	titan_llama_free(m);
	free(ref);
	free(lg);
	fixture_release(&f);
}

/* Qwen3's QK-norm on the generator's KV cache path (prefill, chunks,
 * single tokens) equals the training forward too */
static void test_qwen3_logits_match_training_forward(void **state)
{
	(void)state;
	qwen3 = true;
	check_logits(false, 1);
	check_logits(true, 2);
	qwen3 = false;
}

/* MoE blocks (the router, the expert-sorted grouped GEMMs and the shared
 * experts at the block's F_W1) on the generator's chunks equal the
 * training forward: softmax routing with route_norm, a shared expert and
 * a non-zero expert_bias; sigmoid scores before the experts without. */
static void test_moe_logits_match_training_forward(void **state)
{
	(void)state;
	moe = 1;
	check_logits(false, 1);
	check_logits(true, 2);
	moe = 2;
	check_logits(false, 2);
	moe = 0;
}

/* The KV cache matters: a cache filled from other tokens gives other
 * logits (the comparison above can fail). */
static void test_cache_is_used(void **state)
{
	struct fixture f;
	struct titan_generator *g;
	float *lg;
	int32_t other[T];

	(void)state;
	fixture_init(&f, false, 1);
	lg = malloc((size_t)f.V * sizeof(float));
	g = gen_new(&f, T, 0);
	for (int i = 0; i < T; i++)
		other[i] = (f.tok[i] + 1) % 61;
	assert_int_equal(titan_generator_forward(g, other, T - 1, NULL, false), 0);
	assert_int_equal(titan_generator_forward(g, f.tok + T - 1, 1, lg, false), 0);
	assert_true(row_err(&f, lg, T - 1) > 1e-3);
	titan_generator_free(g);
	free(lg);
	fixture_release(&f);
}

/* ------------------------------------------------------------- the loop */

struct collect {
	int32_t ids[T];
	int n, stop_after;
};

static int on_token(void *ctx, int32_t id)
{
	struct collect *c = ctx;

	c->ids[c->n++] = id;
	return c->n == c->stop_after;
}

/* greedy by recomputing the whole (right-padded: causal) sequence; the
 * sum of the chosen tokens' log-probabilities */
static double greedy_reference(struct fixture *f, int n_prompt, int32_t *seq, int n_total)
{
	double logprob = 0;

	float *lg = malloc((size_t)(T * f->V) * sizeof(float));
	int32_t buf[T];

	memcpy(buf, f->tok, sizeof(buf));
	memcpy(seq, f->tok, (size_t)n_prompt * sizeof(*seq));
	for (int pos = n_prompt; pos < n_total; pos++) {
		int64_t best = 0;

		memcpy(buf, seq, (size_t)pos * sizeof(*seq));
		assert_int_equal(titan_llama_logits(f->m, buf, lg), 0);
		const float *row = lg + (pos - 1) * f->V;
		double sum = 0;

		for (int64_t v = 1; v < f->V; v++)
			if (row[v] > row[best])
				best = v;
		seq[pos] = (int32_t)best;
		for (int64_t v = 0; v < f->V; v++)
			sum += exp((double)row[v] - row[best]);
		logprob -= log(sum);
	}
	free(lg);
	return logprob;
}

static void test_generate_greedy_and_stops(void **state)
{
	struct fixture f;
	struct titan_generator *g;
	struct titan_gen_opts o = {.max_new_tokens = 10, .eos_id = -1};
	struct titan_gen_result res;
	struct collect c = {0};
	int32_t seq[T];
	int eos_at = -1;
	double logprob;

	(void)state;
	fixture_init(&f, false, 1);
	titan_sampler_opts_default(&o.sampling);
	logprob = greedy_reference(&f, 6, seq, 16);
	g = gen_new(&f, T, 4);
	assert_int_equal(titan_generate(g, f.tok, 6, &o, on_token, &c, &res), 0);
	assert_int_equal(res.stop, TITAN_GEN_STOP_LENGTH);
	assert_int_equal(res.n_prompt, 6);
	assert_int_equal(res.n_new, 10);
	assert_int_equal(c.n, 10);
	assert_memory_equal(c.ids, seq + 6, 10 * sizeof(int32_t));
	assert_true(logprob < 0 && fabs(res.logprob - logprob) <= 1e-5 * fabs(logprob));
	/* the last token is emitted, never fed */
	assert_int_equal(titan_generator_pos(g), 6 + 9);

	/* EOS: the 5th new token; earlier copies of it stop sooner */
	o.eos_id = seq[10];
	for (int i = 6; i < 16 && eos_at < 0; i++)
		if (seq[i] == o.eos_id)
			eos_at = i - 6;
	c.n = 0;
	assert_int_equal(titan_generate(g, f.tok, 6, &o, on_token, &c, &res), 0);
	assert_int_equal(res.stop, TITAN_GEN_STOP_EOS);
	assert_int_equal(res.n_new, eos_at);
	assert_memory_equal(c.ids, seq + 6, (size_t)eos_at * sizeof(int32_t));
	titan_generator_free(g);

	/* a capacity of 9: 3 new tokens after a prompt of 6 */
	o.eos_id = -1;
	g = gen_new(&f, 9, 0);
	c.n = 0;
	assert_int_equal(titan_generate(g, f.tok, 6, &o, on_token, &c, &res), 0);
	assert_int_equal(res.stop, TITAN_GEN_STOP_CONTEXT);
	assert_int_equal(res.n_new, 3);
	assert_memory_equal(c.ids, seq + 6, 3 * sizeof(int32_t));
	/* a prompt that fills it: nothing; one that does not fit: an error */
	assert_int_equal(titan_generate(g, f.tok, 9, &o, on_token, &c, &res), 0);
	assert_int_equal(res.stop, TITAN_GEN_STOP_CONTEXT);
	assert_int_equal(res.n_new, 0);
	assert_int_equal(titan_generate(g, f.tok, 10, &o, on_token, &c, &res), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "the prompt is 10 tokens"));
	/* the callback stops it */
	c.n = 0;
	c.stop_after = 2;
	assert_int_equal(titan_generate(g, f.tok, 6, &o, on_token, &c, &res), 0);
	assert_int_equal(res.stop, TITAN_GEN_STOP_CALLBACK);
	assert_int_equal(res.n_new, 2);
	titan_generator_free(g);
	fixture_release(&f);
}

/* ------------------------------------------------------------- sampling */

static void test_sampler(void **state)
{
	/* probabilities 0.5, 0.3, 0.2 at temperature 1, then two unlikely ids */
	const float lg[5] = {logf(0.5f), logf(0.3f), logf(0.2f), -30.0f, -30.0f};
	struct titan_sampler_opts o;
	struct titan_sampler s;
	int count[5] = {0};
	int32_t id, a[64], b[64];
	bool differ = false;
	enum { N = 20000 };

	(void)state;
	titan_sampler_opts_default(&o);
	/* greedy: the first largest */
	assert_int_equal(titan_sampler_init(&s, &o, 4), 0);
	assert_int_equal(titan_sampler_sample(&s, (float[]){1, 3, 3, 2}, &id), 0);
	assert_int_equal(id, 1);
	assert_int_equal(titan_sampler_sample(&s, (float[]){1, NAN, 3, 2}, &id), TITAN_E_NUMERIC);
	assert_non_null(strstr(titan_errmsg(), "token 1"));
	titan_sampler_release(&s);

	/* temperature 1: the frequencies of the distribution */
	o.temperature = 1;
	o.seed = 1;
	assert_int_equal(titan_sampler_init(&s, &o, 5), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(titan_sampler_sample(&s, lg, &id), 0);
		count[id]++;
	}
	assert_true(fabs(count[0] / (double)N - 0.5) < 0.015);
	assert_true(fabs(count[1] / (double)N - 0.3) < 0.015);
	assert_true(fabs(count[2] / (double)N - 0.2) < 0.015);
	titan_sampler_release(&s);

	/* top-k 2 and top-p 0.6 keep {0, 1} (0.5 + 0.3 = 0.8 >= 0.6), top-p
	 * 0.5 keeps {0}: transformers' TopP removes ids whose ascending
	 * cumulative mass is <= 1 - p */
	for (int k = 0; k < 3; k++) {
		memset(count, 0, sizeof(count));
		titan_sampler_opts_default(&o);
		o.temperature = 1;
		if (k == 0)
			o.top_k = 2;
		else
			o.top_p = k == 1 ? 0.6 : 0.5;
		assert_int_equal(titan_sampler_init(&s, &o, 5), 0);
		for (int i = 0; i < 4000; i++) {
			assert_int_equal(titan_sampler_sample(&s, lg, &id), 0);
			count[id]++;
		}
		assert_int_equal(count[2] + count[3] + count[4], 0);
		if (k < 2) {
			/* renormalised: 0.5/0.8 and 0.3/0.8 */
			assert_true(fabs(count[0] / 4000.0 - 0.625) < 0.03);
		} else {
			assert_int_equal(count[0], 4000);
		}
		titan_sampler_release(&s);
	}

	/* a high temperature flattens: the unlikely ids appear */
	titan_sampler_opts_default(&o);
	o.temperature = 100;
	memset(count, 0, sizeof(count));
	assert_int_equal(titan_sampler_init(&s, &o, 5), 0);
	for (int i = 0; i < 4000; i++) {
		assert_int_equal(titan_sampler_sample(&s, lg, &id), 0);
		count[id]++;
	}
	assert_true(count[3] > 400 && count[4] > 400);
	titan_sampler_release(&s);

	/* the same seed repeats, another differs */
	for (int run = 0; run < 3; run++) {
		titan_sampler_opts_default(&o);
		o.temperature = 1;
		o.seed = run < 2 ? 42 : 43;
		assert_int_equal(titan_sampler_init(&s, &o, 5), 0);
		for (int i = 0; i < 64; i++)
			assert_int_equal(titan_sampler_sample(&s, lg, run == 0 ? &a[i] : &b[i]), 0);
		titan_sampler_release(&s);
		if (run == 1)
			assert_memory_equal(a, b, sizeof(a));
	}
	for (int i = 0; i < 64; i++)
		differ |= a[i] != b[i];
	assert_true(differ);

	/* bad options name themselves */
	titan_sampler_opts_default(&o);
	o.top_p = 0;
	assert_int_equal(titan_sampler_opts_check(&o), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "top_p"));
	o.top_p = 1.5;
	assert_int_equal(titan_sampler_init(&s, &o, 5), TITAN_E_INVALID);
	titan_sampler_opts_default(&o);
	o.temperature = -1;
	assert_int_equal(titan_sampler_opts_check(&o), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "temperature"));
	titan_sampler_opts_default(&o);
	o.top_k = -2;
	assert_int_equal(titan_sampler_opts_check(&o), TITAN_E_INVALID);
	titan_sampler_release(&s);
}

/* ------------------------------------------------------------- loading */

struct get_ctx {
	struct titan_llama *m;
};

static int get_param(void *ctx, const struct titan_param *p, float *out)
{
	struct get_ctx *c = ctx;
	const struct titan_param *q = titan_param_find(titan_llama_table(c->m), p->name);

	memcpy(out, titan_param_view(titan_llama_params(c->m), q), (size_t)p->numel * sizeof(float));
	return 0;
}

static void test_load_checkpoint_and_hf(void **state)
{
	struct fixture f;
	struct titan_ckpt_state st = {0};
	struct titan_hf_export_opts eo;
	struct get_ctx gc;
	struct titan_gen_model *gm;
	const struct titan_param_table *t;
	const char *ck, *hf;

	(void)state;
	if (!titan_has_feature("hdf5"))
		skip();
	assert_int_equal(scratch_setup("test_generate"), 0);
	fixture_init(&f, false, 1);
	t = titan_llama_table(f.m);
	st.table = t;
	st.params = titan_llama_params(f.m)->data;
	ck = path_of("step-3.h5");
	assert_int_equal(titan_ckpt_write(ck, &st, TITAN_CKPT_MODEL_ONLY, TITAN_CKPT_FLOAT32), 0);
	hf = path_of("hf");
	titan_hf_export_opts_default(&eo);
	gc.m = f.m;
	assert_int_equal(titan_hf_export(hf, t, get_param, &gc, &eo), 0);

	for (int k = 0; k < 3; k++) {
		const char *p = k == 0 ? ck : k == 1 ? hf : dir; /* dir: the newest step */

		assert_int_equal(titan_gen_model_load(p, NULL, &gm), 0);
		assert_int_equal(gm->hf, k == 1);
		assert_int_equal(gm->table.n, t->n);
		assert_int_equal(gm->dims.n_kv_heads, 2);
		/* the exact weights: HF's q/k permutation undone */
		for (int i = 0; i < t->n; i++)
			assert_memory_equal(titan_param_view(&gm->params, &gm->table.params[i]),
					    titan_param_view(titan_llama_params(f.m), &t->params[i]),
					    (size_t)t->params[i].numel * sizeof(float));
		if (k == 1)
			assert_true(gm->seq_len > 0); /* max_position_embeddings */
		titan_gen_model_free(gm);
	}
	/* a missing file names itself */
	assert_int_equal(titan_gen_model_load(path_of("nope.h5"), NULL, &gm), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "nope.h5"));
	assert_null(gm);
	fixture_release(&f);
	scratch_teardown();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_logits_match_training_forward),
		cmocka_unit_test(test_qwen3_logits_match_training_forward),
		cmocka_unit_test(test_moe_logits_match_training_forward),
		cmocka_unit_test(test_cache_is_used),
		cmocka_unit_test(test_block_causal_matches_training_forward),
		cmocka_unit_test(test_generate_greedy_and_stops),
		cmocka_unit_test(test_sampler),
		cmocka_unit_test(test_load_checkpoint_and_hf),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
