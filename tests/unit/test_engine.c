/* test_engine.c — titan_parallelize and the engine's operations
 * (lib/train/engine.h) on one rank: the engine builds the model the
 * trainer would (weights from training.seed) and its step — zero grads,
 * begin step, train microbatches, finish grads, grad norm, optimizer step
 * — gives bit for bit what the model's own calls give: the gradient scale
 * is 1 / the step's valid tokens, every microbatch adds to the gradients,
 * the eval microbatch leaves them alone.  The DP and pipeline engines
 * behind the same operations are run by titan-train under mpiexec
 * (tests/bats/titan-train-dist.bats, titan-train-tp-pp.bats, -zb, -cp:
 * every layout's curve equals one rank's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "titan/config.h"
#include "titan/core.h"
#include "titan/dist.h"
#include "titan/model.h"
#include "titan/ops.h"
#include "titan/train.h"

#include "train/engine.h"
#include "tiny_model.h"

enum { B = 2, T = 12, V = 61, SEED = 11 };

static struct titan_model_dims tiny(void)
{
	return tiny_dims(32, 2, 4, 2, V);
}

static void tokens(uint64_t seed, int32_t *in, int32_t *lab)
{
	struct titan_rng r;

	titan_rng_init(&r, seed, 3);
	for (int i = 0; i < B * T; i++) {
		in[i] = (int32_t)titan_rng_below(&r, V);
		lab[i] = (int32_t)titan_rng_below(&r, V);
	}
	lab[5] = -100; /* an ignored label */
}

struct fixture {
	struct titan_config cfg;
	struct titan_dist *dist;
	struct titan_model_dims dims;
	struct titan_llama_opts mo;
	struct titan_backend be;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct titan_parallel_dims pd;
	int argc = 1;
	char *args[] = {"test_engine", NULL}, **argv = args;

	assert_non_null(f);
	setenv("TITAN_MPI", "0", 1);
	assert_int_equal(titan_config_init(&f->cfg), 0);
	assert_int_equal(titan_config_set(&f->cfg, "training.seed", "11", "test"), 0);
	assert_int_equal(titan_dist_init(&argc, &argv, &f->dist), 0);
	assert_int_equal(titan_parallel_dims_from_config(&pd, &f->cfg, 1), 0);
	assert_int_equal(titan_dist_mesh(f->dist, &pd), 0);
	f->dims = tiny();
	f->mo = (struct titan_llama_opts){.batch = B, .seq = T, .ac = TITAN_AC_NONE, .ce_chunk = 7};
	assert_int_equal(titan_backend_cpu_init(&f->be, 1), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	titan_backend_release(&f->be);
	titan_dist_finalize(f->dist, true, 0);
	titan_config_release(&f->cfg);
	unsetenv("TITAN_MPI");
	free(f);
	return 0;
}

static int hook_calls;

static void count_begin(void *ctx, const char *name)
{
	(void)ctx, (void)name;
	hook_calls++;
}

static struct titan_engine *engine(struct fixture *f)
{
	struct titan_engine *e = NULL;
	struct titan_llama_opts mo = f->mo;

	assert_int_equal(titan_parallelize(&(struct titan_parallelize_opts){
		.cfg = &f->cfg, .dist = f->dist, .dims = &f->dims, .mo = &mo, .be = &f->be,
		.hooks = &(struct titan_llama_hooks){count_begin, NULL, NULL},
		.tokens = B * T}, &e), 0);
	assert_non_null(e);
	assert_non_null(titan_engine_model(e));
	assert_int_equal(titan_engine_dp_units(e), 0); /* one rank: no DP */
	/* one rank: no groups of size > 1 given to the model */
	assert_int_equal(mo.shard_degree, 0);
	assert_int_equal(mo.stages.n, 0);
	/* the model's table options are the layout's (titan_layout_table_opts) */
	assert_non_null(mo.table);
	assert_int_equal(mo.table->tp_degree, 1);
	assert_int_equal(mo.table->stages.n, 0);
	return e;
}

static struct titan_llama *reference(struct fixture *f)
{
	struct titan_llama *m;

	assert_int_equal(titan_llama_new(&f->dims, &f->mo, &f->be, NULL, &m), 0);
	assert_int_equal(titan_llama_init_weights(m, SEED), 0);
	return m;
}

static void assert_arena_equal(struct titan_param_arena *a, struct titan_param_arena *b,
			       int64_t n)
{
	assert_memory_equal(a->data, b->data, (size_t)n * sizeof(float));
}

/* Two steps of two microbatches each: losses, gradients, norms and
 * weights bit-equal to the model's own calls. */
static void test_step_equals_model_calls(void **state)
{
	struct fixture *f = *state;
	struct titan_engine *e = engine(f);
	struct titan_llama *em = titan_engine_model(e), *m = reference(f);
	struct titan_adamw_hparams hp = {1e-2, 0.9, 0.95, 1e-8, 0.1};
	const int64_t n = titan_llama_table(m)->arena_floats;
	int32_t in[2][B * T], lab[2][B * T];

	assert_int_equal(titan_llama_table(em)->arena_floats, n);
	assert_arena_equal(titan_llama_params(em), titan_llama_params(m), n);
	hook_calls = 0;
	for (int step = 1; step <= 2; step++) {
		const int64_t valid = 2 * (B * T - 1);
		double le = 0, lm = 0, ls, ne, nm;
		int64_t nv, nve = 0, nvm = 0;
		float ce, cm;

		for (int k = 0; k < 2; k++)
			tokens((uint64_t)(10 * step + k), in[k], lab[k]);
		assert_int_equal(titan_engine_zero_grads(e), 0);
		titan_engine_begin_step(e, 2, valid);
		assert_int_equal(titan_llama_zero_grads(m), 0);
		for (int k = 0; k < 2; k++) {
			assert_int_equal(titan_engine_train_microbatch(e, in[k], lab[k], &ls, &nv), 0);
			le += ls;
			nve += nv;
			assert_int_equal(titan_llama_step(m, in[k], lab[k], 1.0f / (float)valid, true,
							  &ls, &nv), 0);
			lm += ls;
			nvm += nv;
		}
		assert_true(le == lm);
		assert_int_equal(nve, valid);
		assert_int_equal(nvm, valid);
		assert_int_equal(titan_engine_finish_grads(e), 0);
		assert_arena_equal(titan_llama_grads(em), titan_llama_grads(m), n);
		assert_int_equal(titan_engine_grad_norm(e, 0.5, &ne, &ce), 0);
		assert_int_equal(titan_llama_grad_norm(m, 0.5, &nm, &cm), 0);
		assert_true(ne == nm && ce == cm && ne > 0);
		assert_int_equal(titan_engine_optimizer_step(e, &hp, step, ce), 0);
		assert_int_equal(titan_llama_adamw(m, &hp, step, cm), 0);
		assert_arena_equal(titan_llama_params(em), titan_llama_params(m), n);
	}
	assert_true(hook_calls > 0); /* the profiling hooks were installed */
	titan_llama_free(m);
	titan_engine_free(e);
}

/* The eval flavour: forward and loss, gradients untouched; a step with no
 * valid tokens scales the gradients by 0. */
static void test_eval_and_empty_step(void **state)
{
	struct fixture *f = *state;
	struct titan_engine *e = engine(f);
	struct titan_llama *em = titan_engine_model(e), *m = reference(f);
	const int64_t n = titan_llama_table(m)->arena_floats;
	int32_t in[B * T], lab[B * T];
	double le, lm;
	int64_t nve, nvm;
	float *g = titan_llama_grads(em)->data;

	tokens(3, in, lab);
	assert_int_equal(titan_engine_zero_grads(e), 0);
	assert_int_equal(titan_engine_eval_microbatch(e, in, lab, &le, &nve), 0);
	assert_int_equal(titan_llama_step(m, in, lab, 0.0f, false, &lm, &nvm), 0);
	assert_true(le == lm && le > 0);
	assert_int_equal(nve, B * T - 1);
	assert_int_equal(nvm, nve);
	for (int64_t i = 0; i < n; i++)
		assert_true(g[i] == 0.0f);
	titan_engine_begin_step(e, 1, 0);
	assert_int_equal(titan_engine_train_microbatch(e, in, lab, &le, &nve), 0);
	assert_true(le == lm);
	for (int64_t i = 0; i < n; i++)
		assert_true(g[i] == 0.0f);
	titan_llama_free(m);
	titan_engine_free(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_step_equals_model_calls),
		cmocka_unit_test(test_eval_and_empty_step),
	};
	return cmocka_run_group_tests_name("engine", tests, setup, teardown);
}
