/* test_llama.c — the model step: activation checkpointing gives identical
 * losses and gradients, runs are deterministic, gradients agree with finite
 * differences of the loss, AdamW and the gradient norm behave as torch's,
 * and activation memory drops with checkpointing.  (Exactness against the
 * PyTorch reference is test_golden.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/model.h"
#include "titan/ops.h"
#include "titan/train.h"

static struct titan_model_dims tiny(void)
{
	struct titan_model_dims d;

	assert_int_equal(titan_model_flavor("debugmodel", &d), 0);
	d.dim = 32;
	d.n_layers = 4;
	d.n_heads = 4;
	d.n_kv_heads = 2;
	d.head_dim = 8;
	d.vocab_size = 61;
	d.multiple_of = 16;
	d.ffn_dim_multiplier = NAN;
	d.ffn_hidden = titan_ffn_hidden_dim(d.dim, d.multiple_of, d.ffn_dim_multiplier);
	return d;
}

enum { B = 2, T = 12 };

static void tokens(int32_t *in, int32_t *lab)
{
	struct titan_rng r;

	titan_rng_init(&r, 7, 3);
	for (int i = 0; i < B * T; i++) {
		in[i] = (int32_t)titan_rng_below(&r, 61);
		lab[i] = (int32_t)titan_rng_below(&r, 61);
	}
	lab[5] = -100; /* an ignored label */
}

struct run {
	double loss;
	int64_t valid;
	float *grads;
	int64_t nfloats;
	int64_t act_bytes;
};

static void run_step(enum titan_ac_mode ac, int every, int threads, struct run *out)
{
	struct titan_model_dims d = tiny();
	struct titan_llama_opts o = {.batch = B, .seq = T, .ac = ac, .ac_every = every, .ce_chunk = 7};
	struct titan_backend be;
	struct titan_allocator *a = titan_allocator_new("test", NULL);
	struct titan_llama *m;
	struct titan_mem_stats st;
	int32_t in[B * T], lab[B * T];

	assert_non_null(a);
	assert_int_equal(titan_backend_cpu_init(&be, threads), 0);
	assert_int_equal(titan_llama_new(&d, &o, &be, a, &m), 0);
	titan_llama_init_weights(m, 42);
	assert_int_equal(titan_llama_zero_grads(m), 0);
	tokens(in, lab);
	assert_int_equal(titan_llama_step(m, in, lab, 1.0f / 23, true, &out->loss, &out->valid), 0);
	out->nfloats = titan_llama_table(m)->arena_floats;
	out->grads = malloc((size_t)out->nfloats * sizeof(float));
	memcpy(out->grads, titan_llama_grads(m)->data, (size_t)out->nfloats * sizeof(float));
	titan_mem_get_stats(a, &st);
	out->act_bytes = st.peak[TITAN_MEM_ACTIVATIONS];
	titan_llama_free(m);
	titan_backend_release(&be);
	titan_allocator_free(a);
}

static void test_ac_modes_identical(void **state)
{
	struct run none, full, sel1, sel2, selop;

	(void)state;
	run_step(TITAN_AC_NONE, 0, 1, &none);
	run_step(TITAN_AC_FULL, 0, 1, &full);
	run_step(TITAN_AC_SELECTIVE, 1, 1, &sel1);
	run_step(TITAN_AC_SELECTIVE, 2, 1, &sel2);
	run_step(TITAN_AC_SELECTIVE_OP, 0, 1, &selop);
	assert_int_equal(none.valid, B * T - 1);
	assert_true(fabs(none.loss / (double)none.valid - log(61.0)) < 1.0); /* ~ ln(V) at init */
	for (const struct run *r = &full; r;
	     r = r == &full ? &sel1 : r == &sel1 ? &sel2 : r == &sel2 ? &selop : NULL) {
		assert_true(r->loss == none.loss);
		assert_memory_equal(r->grads, none.grads, (size_t)none.nfloats * sizeof(float));
	}
	/* checkpointing drops activation memory: full < every 2nd < none */
	assert_true(full.act_bytes < sel2.act_bytes);
	assert_true(sel2.act_bytes < none.act_bytes);
	/* per-op keeps 5 of a block's 13 tensors: between full and none */
	assert_true(full.act_bytes < selop.act_bytes);
	assert_true(selop.act_bytes < none.act_bytes);
	free(selop.grads);
	free(none.grads);
	free(full.grads);
	free(sel1.grads);
	free(sel2.grads);
}

static void test_deterministic_and_thread_independent(void **state)
{
	struct run a, b, c;

	(void)state;
	run_step(TITAN_AC_NONE, 0, 1, &a);
	run_step(TITAN_AC_NONE, 0, 1, &b);
	run_step(TITAN_AC_NONE, 0, 2, &c);
	assert_true(a.loss == b.loss);
	assert_memory_equal(a.grads, b.grads, (size_t)a.nfloats * sizeof(float));
	assert_true(a.loss == c.loss);
	assert_memory_equal(a.grads, c.grads, (size_t)a.nfloats * sizeof(float));
	free(a.grads);
	free(b.grads);
	free(c.grads);
}

/* d(loss_sum)/dw for a few weights of every kind against central
 * differences of the forward loss (fp32 forward: a loose tolerance). */
/* Element e of p (weights w, gradient g): the analytic gradient against
 * the central difference of the loss with step 1e-2 (2e-2 relative). */
static void fd_check(struct titan_llama *m, const int32_t *in, const int32_t *lab,
		     const struct titan_param *p, float *w, const float *g, int64_t e)
{
	const float keep = w[e], h = 1e-2f;
	double lp, lm, fd;
	int64_t nv;

	w[e] = keep + h;
	assert_int_equal(titan_llama_step(m, in, lab, 1.0f, false, &lp, &nv), 0);
	w[e] = keep - h;
	assert_int_equal(titan_llama_step(m, in, lab, 1.0f, false, &lm, &nv), 0);
	w[e] = keep;
	fd = (lp - lm) / (2.0 * h);
	if (fabs(fd - g[e]) > 2e-2 * fmax(1.0, fabs(fd)))
		fail_msg("%s[%lld]: analytic %g, finite difference %g", p->name, (long long)e,
			 (double)g[e], fd);
}

/* Every parameter (whose name holds `only`, when given) of a model of
 * dims d from `seed`: `per` elements each by fd_check, a buffer's gradient
 * zero.  Returns the elements checked. */
static int fd_model(struct titan_model_dims d, uint64_t seed, const char *only, int per)
{
	struct titan_llama_opts o = {.batch = B, .seq = T, .ac = TITAN_AC_NONE};
	struct titan_backend be;
	struct titan_llama *m;
	int32_t in[B * T], lab[B * T];
	double loss;
	int64_t valid;
	int checked = 0;

	assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
	assert_int_equal(titan_llama_new(&d, &o, &be, NULL, &m), 0);
	titan_llama_init_weights(m, seed);
	tokens(in, lab);
	assert_int_equal(titan_llama_zero_grads(m), 0);
	assert_int_equal(titan_llama_step(m, in, lab, 1.0f, true, &loss, &valid), 0);
	const struct titan_param_table *t = titan_llama_table(m);
	for (int i = 0; i < t->n; i++) {
		const struct titan_param *p = &t->params[i];
		float *w = titan_param_view(titan_llama_params(m), p);
		const float *g = titan_param_view(titan_llama_grads(m), p);

		if (only && !strstr(p->name, only))
			continue;
		if (p->is_buffer) { /* expert_bias: it only chooses */
			for (int64_t e = 0; e < p->local_numel; e++)
				assert_true(g[e] == 0.0f);
			continue;
		}
		for (int k = 0; k < per; k++) {
			fd_check(m, in, lab, p, w, g,
				 (p->local_numel * (2 * k + 1)) / (2 * per) + i % 3);
			checked++;
		}
	}
	titan_llama_free(m);
	titan_backend_release(&be);
	return checked;
}

static void test_finite_differences(void **state)
{
	struct titan_model_dims d = tiny();
	struct titan_param_table t;

	(void)state;
	assert_int_equal(titan_param_table_init(&t, &d, NULL), 0);
	assert_int_equal(fd_model(d, 3, NULL, 2), 2 * t.n);
	titan_param_table_release(&t);
}

static void test_grad_norm_and_adamw(void **state)
{
	struct titan_model_dims d = tiny();
	struct titan_llama_opts o = {.batch = B, .seq = T, .ac = TITAN_AC_NONE};
	struct titan_backend be;
	struct titan_llama *m;
	int32_t in[B * T], lab[B * T];
	double loss0, loss1, norm, ss = 0;
	int64_t valid;
	float coef;
	struct titan_adamw_hparams hp = {1e-2, 0.9, 0.95, 1e-8, 0.1};

	(void)state;
	assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
	assert_int_equal(titan_llama_new(&d, &o, &be, NULL, &m), 0);
	titan_llama_init_weights(m, 5);
	tokens(in, lab);
	assert_int_equal(titan_llama_zero_grads(m), 0);
	assert_int_equal(titan_llama_step(m, in, lab, 1.0f / 23, true, &loss0, &valid), 0);
	assert_int_equal(titan_llama_grad_norm(m, 1.0, &norm, &coef), 0);
	const struct titan_param_table *t = titan_llama_table(m);
	for (int i = 0; i < t->n; i++) {
		const float *g = titan_param_view(titan_llama_grads(m), &t->params[i]);
		for (int64_t e = 0; e < t->params[i].local_numel; e++)
			ss += (double)g[e] * g[e];
	}
	assert_true(fabs(norm - sqrt(ss)) <= 1e-5 * sqrt(ss));
	assert_true(coef == (norm > 1.0 ? (float)(1.0 / (norm + 1e-6)) : 1.0f) ||
		    fabs(coef - 1.0 / (norm + 1e-6)) < 1e-6);
	/* a few AdamW steps on the same batch lower the loss */
	for (int s = 1; s <= 5; s++) {
		assert_int_equal(titan_llama_adamw(m, &hp, s, coef), 0);
		assert_int_equal(titan_llama_zero_grads(m), 0);
		assert_int_equal(titan_llama_step(m, in, lab, 1.0f / 23, true, &loss1, &valid), 0);
		assert_int_equal(titan_llama_grad_norm(m, 1.0, &norm, &coef), 0);
	}
	assert_true(loss1 < loss0);
	titan_llama_free(m);
	titan_backend_release(&be);
}

/* optimizer.weight_decay_exclude_norms_embeddings: with zero gradients an
 * AdamW step only applies weight decay, so excluded tensors stay put. */
static void test_weight_decay_exclusion(void **state)
{
	struct titan_model_dims d = tiny();
	struct titan_adamw_hparams hp = {1e-2, 0.9, 0.95, 1e-8, 0.1};
	struct titan_backend be;

	(void)state;
	assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
	for (int exclude = 0; exclude <= 1; exclude++) {
		struct titan_llama_opts o = {.batch = B, .seq = T, .exclude_norms_embeddings_from_wd = exclude};
		struct titan_llama *m;

		assert_int_equal(titan_llama_new(&d, &o, &be, NULL, &m), 0);
		titan_llama_init_weights(m, 9);
		const struct titan_param_table *t = titan_llama_table(m);
		float *before = malloc((size_t)t->arena_floats * sizeof(float));
		memcpy(before, titan_llama_params(m)->data, (size_t)t->arena_floats * sizeof(float));
		assert_int_equal(titan_llama_zero_grads(m), 0);
		assert_int_equal(titan_llama_adamw(m, &hp, 1, 1.0f), 0);
		for (int i = 0; i < t->n; i++) {
			const struct titan_param *p = &t->params[i];
			const float *w = titan_param_view(titan_llama_params(m), p);
			const float *w0 = before + p->offset;
			bool kept = (p->is_norm || p->is_embedding) && exclude;

			for (int64_t e = 0; e < p->local_numel; e += 7) {
				float want = kept ? w0[e] : w0[e] * (1.0f - (float)(1e-2 * 0.1));
				if (fabsf(w[e] - want) > 1e-7f * fabsf(want))
					fail_msg("%s (exclude %d): %g, want %g", p->name, exclude, (double)w[e],
						 (double)want);
			}
		}
		free(before);
		titan_llama_free(m);
	}
	titan_backend_release(&be);
}

static void test_bad_input_id(void **state)
{
	struct titan_model_dims d = tiny();
	struct titan_llama_opts o = {.batch = B, .seq = T};
	struct titan_backend be;
	struct titan_llama *m;
	int32_t in[B * T], lab[B * T];
	double loss;
	int64_t valid;

	(void)state;
	assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
	assert_int_equal(titan_llama_new(&d, &o, &be, NULL, &m), 0);
	tokens(in, lab);
	in[3] = 61;
	assert_int_equal(titan_llama_step(m, in, lab, 1.0f, false, &loss, &valid), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "input token 3 is id 61"));
	titan_llama_free(m);
	titan_backend_release(&be);
}

/* A CPU backend whose buf_set/buf_get count the bytes they move: the
 * model reaches its arenas from the host only through them. */
static size_t set_bytes, get_bytes;
static const struct titan_backend_ops *cpu_ops;

static int counted_set(struct titan_backend *be, void *dst, const void *host, size_t bytes)
{
	set_bytes += bytes;
	return cpu_ops->buf_set(be, dst, host, bytes);
}

static int counted_get(struct titan_backend *be, void *host, const void *src, size_t bytes)
{
	get_bytes += bytes;
	return cpu_ops->buf_get(be, host, src, bytes);
}

/* init_weights sets every parameter with buf_set; state_get/set copy the
 * parameters and moments with buf_get/buf_set (the checkpoints' path);
 * labels outside the vocabulary are refused on the host, with the
 * backends' message, before any of them reaches the loss. */
static void test_state_through_buffers(void **state)
{
	struct titan_model_dims d = tiny();
	struct titan_llama_opts o = {.batch = B, .seq = T};
	struct titan_backend be;
	struct titan_backend_ops ops;
	struct titan_llama *m;
	int32_t in[B * T], lab[B * T];
	double loss;
	int64_t valid;
	float *mo, *vo;

	(void)state;
	assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
	cpu_ops = be.ops;
	ops = *be.ops;
	ops.buf_set = counted_set;
	ops.buf_get = counted_get;
	be.ops = &ops;
	assert_int_equal(titan_llama_new(&d, &o, &be, NULL, &m), 0);
	const struct titan_param_table *t = titan_llama_table(m);
	const size_t nf = (size_t)t->arena_floats, bytes = nf * sizeof(float);
	float *h = malloc(3 * bytes), *h2 = malloc(3 * bytes);

	assert_non_null(h);
	assert_non_null(h2);
	set_bytes = get_bytes = 0;
	assert_int_equal(titan_llama_init_weights(m, 5), 0);
	assert_int_equal(set_bytes, bytes);
	tokens(in, lab);
	assert_int_equal(titan_llama_zero_grads(m), 0);
	assert_int_equal(titan_llama_step(m, in, lab, 1.0f, true, &loss, &valid), 0);
	assert_int_equal(titan_llama_adamw(m, &(struct titan_adamw_hparams){1e-3, 0.9, 0.95,
									  1e-8, 0.1}, 1, 1.0f), 0);
	get_bytes = 0;
	assert_int_equal(titan_llama_state_get(m, h, h + nf, h + 2 * nf), 0);
	assert_int_equal(get_bytes, 3 * bytes);
	titan_llama_moments(m, &mo, &vo);
	assert_memory_equal(h, titan_llama_params(m)->data, bytes);
	assert_memory_equal(h + nf, mo, bytes);
	assert_memory_equal(h + 2 * nf, vo, bytes);
	for (size_t i = 0; i < 3 * nf; i++)
		h2[i] = (float)i;
	set_bytes = 0;
	assert_int_equal(titan_llama_state_set(m, h2, NULL, h2 + 2 * nf), 0);
	assert_int_equal(set_bytes, 2 * bytes);
	assert_memory_equal(titan_llama_params(m)->data, h2, bytes);
	assert_memory_equal(mo, h + nf, bytes); /* NULL: left alone */
	assert_memory_equal(vo, h2 + 2 * nf, bytes);
	lab[5] = 61; /* the vocabulary is 61 */
	assert_int_equal(titan_llama_step(m, in, lab, 1.0f, false, &loss, &valid), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "label 61 at position 5 is outside the vocabulary "
				"(size 61)"));
	titan_error_clear();
	free(h), free(h2);
	titan_llama_free(m);
	titan_backend_release(&be);
}

/* A last pipeline stage of every block (no embedding) with two
 * microbatches: the zero-bubble split backward (both input passes, then
 * both weight passes, so the second input pass runs between the first's
 * two halves) gives the fused backward's input gradients and weight
 * gradients bit for bit, under every activation-checkpointing mode (the
 * deferred weight-gradient sink keeps what the shared recompute buffers
 * lose). */
static void stage_backward(enum titan_ac_mode ac, bool split, float **grads, float **dx,
			   int64_t *nfloats)
{
	struct titan_model_dims d = tiny();
	struct titan_llama_opts o = {.batch = B, .seq = T, .ac = ac, .ac_every = 2, .ce_chunk = 7,
				     .stages = {1, {{0, 4, false, true, 0}}},
				     .pp_microbatches = 2, .pp_split_backward = split};
	struct titan_backend be;
	struct titan_llama *m;
	struct titan_rng r;
	int32_t in[B * T], lab[B * T];
	double loss;
	int64_t valid, nb;

	assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
	assert_int_equal(titan_llama_new(&d, &o, &be, NULL, &m), 0);
	titan_llama_init_weights(m, 42);
	assert_int_equal(titan_llama_zero_grads(m), 0);
	tokens(in, lab);
	titan_rng_init(&r, 11, 0);
	nb = titan_llama_pp_boundary_floats(m);
	*dx = malloc(2 * (size_t)nb * sizeof(float));
	for (int k = 0; k < 2; k++) {
		float *x = titan_llama_pp_input(m, 0, k);

		for (int64_t i = 0; i < nb; i++)
			x[i] = (float)titan_rng_below(&r, 1000) / 1000.0f - 0.5f;
		assert_int_equal(titan_llama_pp_forward(m, 0, k, in, lab, 1.0f / 23, true, &loss,
							&valid), 0);
		assert_int_equal(valid, B * T - 1);
	}
	for (int k = 0; k < 2; k++) {
		assert_int_equal(split ? titan_llama_pp_backward_input(m, 0, k)
				       : titan_llama_pp_backward(m, 0, k), 0);
		memcpy(*dx + k * nb, titan_llama_pp_grad(m), (size_t)nb * sizeof(float));
	}
	for (int k = 0; split && k < 2; k++)
		assert_int_equal(titan_llama_pp_backward_weight(m, 0, k), 0);
	*nfloats = titan_llama_table(m)->arena_floats;
	*grads = malloc((size_t)*nfloats * sizeof(float));
	memcpy(*grads, titan_llama_grads(m)->data, (size_t)*nfloats * sizeof(float));
	titan_llama_free(m);
	titan_backend_release(&be);
}

static void test_split_backward_equals_fused(void **state)
{
	const enum titan_ac_mode modes[] = {TITAN_AC_NONE, TITAN_AC_FULL, TITAN_AC_SELECTIVE,
					    TITAN_AC_SELECTIVE_OP};

	(void)state;
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		float *gf, *dxf, *gs, *dxs;
		int64_t n, ns;
		double sum = 0;

		stage_backward(modes[i], false, &gf, &dxf, &n);
		stage_backward(modes[i], true, &gs, &dxs, &ns);
		assert_int_equal(n, ns);
		for (int64_t j = 0; j < n; j++)
			sum += fabs(gf[j]);
		assert_true(sum > 0);
		assert_memory_equal(gs, gf, (size_t)n * sizeof(float));
		assert_memory_equal(dxs, dxf, 2 * (size_t)(B * T * 32) * sizeof(float));
		free(gf);
		free(dxf);
		free(gs);
		free(dxs);
	}
}

/* tiny() with torchtitan's MoE in blocks 1..3 (n_dense_layers 1): 4
 * experts of 16, top-2, one shared expert, load balancing on. */
static struct titan_model_dims tiny_moe(bool softmax, bool before)
{
	struct titan_model_dims d = tiny();

	d.moe = (struct titan_moe_dims){ .num_experts = 4, .num_shared_experts = 1, .top_k = 2,
					 .inter_dim = 16, .n_dense_layers = 1, .interleave_step = 1,
					 .softmax = softmax, .route_norm = softmax,
					 .score_before_experts = before, .route_scale = 1.5,
					 .load_balance_coeff = 1e-3 };
	return d;
}

/* Every MoE weight's gradient (router gate, experts, shared experts)
 * against central differences of the loss, both score functions and both
 * places of the scores; the expert_bias buffer has none (it only chooses). */
static void test_moe_finite_differences(void **state)
{
	(void)state;
	for (int v = 0; v < 2; v++) /* 3 MoE blocks of 7 weights */
		assert_int_equal(fd_model(tiny_moe(v, !v), 5, ".moe.", 4), 4 * 3 * 7);
}

/* A MoE block's activations are the plan's "MoE router" and "MoE experts"
 * rows: its own in each MoE block without checkpointing, one set in the
 * recompute set with full checkpointing, its own again under selective
 * "op" (the router's choice is kept); the dense feed-forward's are not
 * allocated for MoE blocks. */
static void test_moe_buffer_plan(void **state)
{
	const enum titan_ac_mode modes[] = {TITAN_AC_NONE, TITAN_AC_FULL, TITAN_AC_SELECTIVE_OP};
	const int64_t n = B * T, E = 4, K = 2, R = n * K, C = 32, Fm = 16, Fs = 16;
	const int64_t router = 4 * (n * E + 2 * n * K + 2 * R + E);
	const int64_t experts = 4 * (2 * R * C + 3 * R * Fm + 3 * n * Fs);

	(void)state;
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		struct titan_model_dims d = tiny_moe(false, true);
		struct titan_llama_opts o = {.batch = B, .seq = T, .ac = modes[i]};
		int64_t role[TITAN_BUF_NROLES] = {0};
		const struct titan_buf_entry *p;
		struct titan_backend be;
		struct titan_llama *m;
		int nb, sets = modes[i] == TITAN_AC_FULL ? 1 : 3;

		assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
		assert_int_equal(titan_llama_new(&d, &o, &be, NULL, &m), 0);
		p = titan_llama_plan(m, &nb);
		for (int k = 0; k < nb; k++)
			role[p[k].role] += p[k].bytes;
		assert_int_equal(role[TITAN_BUF_MOE_ROUTER], sets * router);
		assert_int_equal(role[TITAN_BUF_MOE_EXPERTS], sets * experts);
		assert_string_equal(titan_buf_role_name(TITAN_BUF_MOE_ROUTER),
				    "MoE router: scores, gate values, choices, slot order");
		if (modes[i] == TITAN_AC_NONE) /* the dense block 0 keeps 3 n·F SwiGLU tensors */
			assert_int_equal(role[TITAN_BUF_SAVED],
					 4 * (3 * (n * C) + 2 * n + 2 * n * 32 + 2 * n * 16 +
					      n * 4 + 3 * n * d.ffn_hidden) +
					 3 * 4 * (3 * (n * C) + 2 * n + 2 * n * 32 + 2 * n * 16 + n * 4));
		titan_llama_free(m);
		titan_backend_release(&be);
	}
}

/* The buffer plan (titan_llama_plan) is what the model allocates: an entry
 * per block in allocation order (as many as the allocator counts), bytes
 * by tag the allocator's, each microbatch set the same, and the roles the
 * options ask for: saved sets only for blocks that keep them, a recompute
 * set only with checkpointing, the stash only with the split backward. */
static void test_buffer_plan(void **state)
{
	const enum titan_ac_mode modes[] = {TITAN_AC_NONE, TITAN_AC_FULL, TITAN_AC_SELECTIVE,
					    TITAN_AC_SELECTIVE_OP};

	(void)state;
	for (int r = 0; r < TITAN_BUF_NROLES; r++)
		assert_string_not_equal(titan_buf_role_name((enum titan_buf_role)r), "?");
	for (size_t i = 0; i < 2 * sizeof(modes) / sizeof(modes[0]); i++) {
		const bool split = i % 2;
		struct titan_model_dims d = tiny();
		struct titan_llama_opts o = {.batch = B, .seq = T, .ac = modes[i / 2], .ac_every = 2,
					     .stages = {1, {{0, 4, false, true, 0}}},
					     .pp_microbatches = 2, .pp_split_backward = split};
		struct titan_allocator *a = titan_allocator_new("test", NULL);
		int64_t tag[TITAN_MEM_NTAGS] = {0}, mb[2] = {0}, role[TITAN_BUF_NROLES] = {0};
		const struct titan_buf_entry *p;
		struct titan_mem_stats st;
		struct titan_backend be;
		struct titan_llama *m;
		int n;

		assert_int_equal(titan_backend_cpu_init(&be, 1), 0);
		assert_int_equal(titan_llama_new(&d, &o, &be, a, &m), 0);
		p = titan_llama_plan(m, &n);
		titan_mem_get_stats(a, &st);
		assert_int_equal(n, st.n_alloc);
		for (int k = 0; k < n; k++) {
			assert_true(p[k].bytes > 0);
			tag[p[k].tag] += p[k].bytes;
			role[p[k].role] += p[k].bytes;
			if (p[k].life == TITAN_BUF_MICROBATCH) {
				assert_true(p[k].mb == 0 || p[k].mb == 1);
				mb[p[k].mb] += p[k].bytes;
			} else {
				assert_int_equal(p[k].mb, -1);
			}
		}
		assert_memory_equal(tag, st.cur, sizeof(tag));
		assert_true(mb[0] > 0);
		assert_int_equal(mb[0], mb[1]);
		assert_int_equal(role[TITAN_BUF_WEIGHTS], titan_llama_table(m)->arena_floats * 4);
		assert_int_equal(role[TITAN_BUF_MOMENTS], 2 * role[TITAN_BUF_WEIGHTS]);
		assert_int_equal(role[TITAN_BUF_SAVED] > 0,
				 o.ac == TITAN_AC_NONE || o.ac == TITAN_AC_SELECTIVE);
		assert_int_equal(role[TITAN_BUF_SAVED_OP] > 0, o.ac == TITAN_AC_SELECTIVE_OP);
		assert_int_equal(role[TITAN_BUF_RECOMPUTE] > 0,
				 o.ac == TITAN_AC_FULL || o.ac == TITAN_AC_SELECTIVE);
		assert_int_equal(role[TITAN_BUF_RECOMPUTE_OP] > 0, o.ac == TITAN_AC_SELECTIVE_OP);
		assert_int_equal(role[TITAN_BUF_ZB_STASH] > 0, split);
		assert_int_equal(role[TITAN_BUF_ZB_ONES], split ? 4 * d.dim : 0);
		assert_int_equal(role[TITAN_BUF_TP_SP] + role[TITAN_BUF_CP_GATHERED], 0);
		titan_llama_free(m);
		titan_backend_release(&be);
		titan_allocator_free(a);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ac_modes_identical),
		cmocka_unit_test(test_deterministic_and_thread_independent),
		cmocka_unit_test(test_finite_differences),
		cmocka_unit_test(test_grad_norm_and_adamw),
		cmocka_unit_test(test_weight_decay_exclusion),
		cmocka_unit_test(test_bad_input_id),
		cmocka_unit_test(test_state_through_buffers),
		cmocka_unit_test(test_split_backward_equals_fused),
		cmocka_unit_test(test_buffer_plan),
		cmocka_unit_test(test_moe_finite_differences),
		cmocka_unit_test(test_moe_buffer_plan),
	};
	return cmocka_run_group_tests_name("llama", tests, NULL, NULL);
}
