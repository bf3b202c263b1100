/* test_golden.c — titan's Llama 3 (A, B, C) and Qwen3 (Q, R) step against the independent PyTorch
 * reference (tests/ref, golden files in tests/fixtures/golden): same
 * initial weights and tokens -> the same logits, per-microbatch loss sums,
 * every gradient of step 1, and 10 steps of AdamW with clipping and the LR
 * schedule: per-step losses, grad norms, lrs and the final weights.
 * Tolerances (fp32): loss rel 1e-5; tensors ||a - b|| / ||b|| <= 1e-4. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "titan/ckpt.h"
#include "titan/config.h"
#include "titan/core.h"
#include "titan/model.h"
#include "titan/ops.h"
#include "titan/train.h"

static const struct titan_st_tensor *T(const struct titan_safetensors *f, const char *name)
{
	const struct titan_st_tensor *t = titan_safetensors_find(f, name);

	if (!t)
		fail_msg("golden file lacks '%s'", name);
	return t;
}

static float *f32(const struct titan_st_tensor *t)
{
	float *p = malloc((size_t)t->numel * sizeof(float));

	assert_non_null(p);
	assert_int_equal(titan_st_tensor_to_f32(t, p), 0);
	return p;
}

/* ||a - b|| / ||b|| over n floats */
static double norm_err(const float *a, const float *b, int64_t n)
{
	double d = 0, r = 0;

	for (int64_t i = 0; i < n; i++) {
		d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		r += (double)b[i] * b[i];
	}
	return r > 0 ? sqrt(d / r) : sqrt(d);
}

static double worst[4]; /* logits+loss, step-1 grads, per-step loss/norm, final weights */

static void check_k(int kind, const char *what, double err, double tol)
{
	if (!(err <= tol))
		fail_msg("%s: error %.3g above %.3g", what, err, tol);
	if (err > worst[kind])
		worst[kind] = err;
}
#define check(what, err, tol) check_k(kind, what, err, tol)

static void run_golden(const char *name)
{
	char path[512];
	const char *src = getenv("TITAN_SRCDIR");
	struct titan_safetensors *f;
	struct titan_config cfg;
	struct titan_model_dims d;
	struct titan_llama_opts o = {0};
	struct titan_lr_schedule sched;
	struct titan_backend be;
	struct titan_llama *m;
	const struct titan_param_table *tab;
	int64_t S, M, B, Tn, V;

	int kind = 0;

	memset(worst, 0, sizeof(worst));
	snprintf(path, sizeof(path), "%s/tests/fixtures/golden/%s.safetensors", src ? src : ".", name);
	f = titan_safetensors_open(path);
	if (!f)
		fail_msg("%s", titan_errmsg());
	/* the config from the file's metadata (titan's key names) */
	assert_int_equal(titan_config_init(&cfg), 0);
	for (size_t i = 0; i < f->n_meta; i++) {
		const char *k = f->meta_keys[i], *v = f->meta_values[i];

		if (!titan_config_find(k))
			continue; /* derived.*, data.*, golden.*, model.depth_init */
		if (!strcmp(k, "model.ffn_dim_multiplier") && !*v)
			v = "null";
		if (titan_config_set(&cfg, k, v, path) < 0)
			fail_msg("%s", titan_errmsg());
	}
	assert_string_equal(titan_safetensors_meta(f, "model.depth_init"), "true");
	assert_int_equal(titan_model_dims_from_config(&cfg, &d), 0);
	assert_int_equal(d.head_dim, atoi(titan_safetensors_meta(f, "derived.head_dim")));
	assert_int_equal(d.ffn_hidden, atoi(titan_safetensors_meta(f, "derived.ffn_hidden")));
	titan_lr_schedule_init(&sched, &cfg);
	assert_int_equal(sched.warmup, atoi(titan_safetensors_meta(f, "derived.warmup")));
	assert_int_equal(sched.stable, atoi(titan_safetensors_meta(f, "derived.stable")));
	assert_int_equal(sched.decay, atoi(titan_safetensors_meta(f, "derived.decay")));

	const struct titan_st_tensor *ti = T(f, "inputs");
	assert_int_equal(ti->ndim, 4);
	S = ti->shape[0];
	M = ti->shape[1];
	B = ti->shape[2];
	Tn = ti->shape[3];
	V = d.vocab_size;
	int64_t *in64 = malloc((size_t)ti->numel * sizeof(int64_t));
	int64_t *lab64 = malloc((size_t)ti->numel * sizeof(int64_t));
	int32_t *in = malloc((size_t)ti->numel * sizeof(int32_t));
	int32_t *lab = malloc((size_t)ti->numel * sizeof(int32_t));
	assert_int_equal(titan_st_tensor_to_i64(ti, in64), 0);
	assert_int_equal(titan_st_tensor_to_i64(T(f, "labels"), lab64), 0);
	for (int64_t i = 0; i < ti->numel; i++) {
		in[i] = (int32_t)in64[i];
		lab[i] = (int32_t)lab64[i];
	}

	o.batch = B;
	o.seq = Tn;
	o.ac = TITAN_AC_FULL; /* recomputation must not change anything */
	o.ce_chunk = 5;
	assert_int_equal(titan_backend_cpu_init(&be, 2), 0);
	assert_int_equal(titan_llama_new(&d, &o, &be, NULL, &m), 0);
	tab = titan_llama_table(m);
	for (int i = 0; i < tab->n; i++) {
		const struct titan_param *p = &tab->params[i];
		const struct titan_st_tensor *t = T(f, p->name);

		assert_int_equal(t->numel, p->numel);
		assert_int_equal(titan_st_tensor_to_f32(t, titan_param_view(titan_llama_params(m), p)), 0);
	}

	/* step 1 logits of each microbatch */
	float *want_logits = f32(T(f, "logits"));
	float *logits = malloc((size_t)(B * Tn * V) * sizeof(float));
	for (int64_t mb = 0; mb < M; mb++) {
		char what[64];

		assert_int_equal(titan_llama_logits(m, in + mb * B * Tn, logits), 0);
		snprintf(what, sizeof(what), "%s: logits of microbatch %lld", name, (long long)mb);
		check(what, norm_err(logits, want_logits + mb * B * Tn * V, B * Tn * V), 1e-5);
	}

	float *losses = f32(T(f, "losses")), *norms = f32(T(f, "grad_norms"));
	float *sums1 = f32(T(f, "step1.loss_sums"));
	double *lrs = malloc((size_t)S * sizeof(double));
	const struct titan_st_tensor *tl = T(f, "lrs");
	assert_int_equal(tl->dtype, TITAN_ST_F64);
	memcpy(lrs, tl->data, (size_t)S * sizeof(double));
	struct titan_adamw_hparams hp = {cfg.optimizer.lr, cfg.optimizer.beta1, cfg.optimizer.beta2,
					 cfg.optimizer.eps, cfg.optimizer.weight_decay};

	for (int64_t s = 0; s < S; s++) {
		int64_t valid = 0;
		double loss = 0, norm;
		float coef;
		char what[256];

		for (int64_t i = 0; i < M * B * Tn; i++)
			valid += lab[s * M * B * Tn + i] >= 0;
		assert_int_equal(titan_llama_zero_grads(m), 0);
		for (int64_t mb = 0; mb < M; mb++) {
			double ls;
			int64_t nv;
			const int64_t off = (s * M + mb) * B * Tn;

			assert_int_equal(titan_llama_step(m, in + off, lab + off, 1.0f / (float)valid, true,
							  &ls, &nv), 0);
			if (s == 0) {
				snprintf(what, sizeof(what), "%s: step-1 loss sum of microbatch %lld", name,
					 (long long)mb);
				check(what, fabs(ls - sums1[mb]) / fabs(sums1[mb]), 1e-5);
			}
			loss += ls;
		}
		loss /= (double)valid;
		snprintf(what, sizeof(what), "%s: loss of step %lld", name, (long long)s + 1);
		kind = 2;
		check(what, fabs(loss - losses[s]) / fabs(losses[s]), 1e-5);
		if (s == 0) {
			kind = 1;
			for (int i = 0; i < tab->n; i++) {
				const struct titan_param *p = &tab->params[i];
				char gname[96];

				snprintf(gname, sizeof(gname), "grad.%s", p->name);
				float *g = f32(T(f, gname));
				snprintf(what, sizeof(what), "%s: step-1 %s", name, gname);
				check(what, norm_err(titan_param_view(titan_llama_grads(m), p), g, p->numel), 1e-4);
				free(g);
			}
		}
		kind = 2;
		assert_int_equal(titan_llama_grad_norm(m, cfg.training.max_norm, &norm, &coef), 0);
		snprintf(what, sizeof(what), "%s: grad norm of step %lld", name, (long long)s + 1);
		check(what, fabs(norm - norms[s]) / fabs(norms[s]), 1e-5);
		hp.lr = cfg.optimizer.lr * titan_lr_factor(&sched, s);
		snprintf(what, sizeof(what), "%s: lr of step %lld", name, (long long)s + 1);
		check(what, fabs(hp.lr - lrs[s]) / lrs[s], 1e-12);
		assert_int_equal(titan_llama_adamw(m, &hp, s + 1, coef), 0);
	}
	kind = 3;
	for (int i = 0; i < tab->n; i++) {
		const struct titan_param *p = &tab->params[i];
		char fname[96], what[256];

		snprintf(fname, sizeof(fname), "final.%s", p->name);
		float *w = f32(T(f, fname));
		snprintf(what, sizeof(what), "%s: %s after %lld steps", name, p->name, (long long)S);
		check(what, norm_err(titan_param_view(titan_llama_params(m), p), w, p->numel), 1e-4);
		free(w);
	}
	printf("# %s: worst errors: step-1 logits/loss sums %.2g, step-1 gradients %.2g, "
	       "per-step loss/grad norm/lr %.2g, weights after %lld steps %.2g\n", name, worst[0],
	       worst[1], worst[2], (long long)S, worst[3]);
	free(in64);
	free(lab64);
	free(in);
	free(lab);
	free(want_logits);
	free(logits);
	free(losses);
	free(norms);
	free(sums1);
	free(lrs);
	titan_llama_free(m);
	titan_backend_release(&be);
	titan_config_release(&cfg);
	titan_safetensors_close(f);
}

static void test_golden_A(void **state)
{
	(void)state;
	run_golden("A"); /* GQA 2:1, RoPE 3.1 scaling, linear decay */
}

static void test_golden_B(void **state)
{
	(void)state;
	run_golden("B"); /* GQA 4:1, 2 microbatches, padding labels, sqrt decay */
}

static void test_golden_C(void **state)
{
	(void)state;
	run_golden("C"); /* MHA, no scaling, tied embeddings, cosine + min lr */
}

static void test_golden_Q(void **state)
{
	(void)state;
	run_golden("Q"); /* Qwen3: QK-norm, head_dim 12 != dim / n_heads, 2 microbatches */
}

static void test_golden_R(void **state)
{
	(void)state;
	run_golden("R"); /* Qwen3 with tied embeddings */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden_A),
		cmocka_unit_test(test_golden_B),
		cmocka_unit_test(test_golden_C),
		cmocka_unit_test(test_golden_Q),
		cmocka_unit_test(test_golden_R),
	};
	return cmocka_run_group_tests_name("golden", tests, NULL, NULL);
}
