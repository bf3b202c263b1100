/* test_model.c — Llama 3 flavor table, FFN hidden dims, parameter counts
 * and torchtitan's FLOPs/token (values in docs/torchtitan-notes.md §1, §3). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "titan/config.h"
#include "titan/core.h"
#include "titan/model.h"

static void test_ffn_hidden(void **state)
{
	(void)state;
	assert_int_equal(titan_ffn_hidden_dim(256, 256, NAN), 768);
	assert_int_equal(titan_ffn_hidden_dim(4096, 1024, 1.3), 14336);
	assert_int_equal(titan_ffn_hidden_dim(8192, 4096, 1.3), 28672);
	assert_int_equal(titan_ffn_hidden_dim(16384, 4096, 1.2), 53248);
	assert_int_equal(titan_ffn_hidden_dim(2048, 1024, 1.5), 8192);
	assert_int_equal(titan_ffn_hidden_dim(3072, 1024, 1.0), 8192);
}

static void test_flavor_params(void **state)
{
	static const struct {
		const char *name;
		int64_t params;
		int64_t seq;
		double flops; /* torchtitan-notes §3 and the formula */
	} cases[] = {
		{"debugmodel", 6163712, 2048, 7.158528e7},
		{"1B", 1235814400, 8192, 1.063611e10},
		{"3B", 3212749824, 8192, 2.773222e10},
		{"8B", 8030261248, 8192, 5.791445e10},
		{"70B", 70553706496, 8192, 4.814427e11},
		{"405B", 405853388800, 8192, 2.625449e12},
	};
	(void)state;
	assert_int_equal(titan_model_nflavors(), 6);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct titan_model_dims d;
		struct titan_model_params p;

		assert_int_equal(titan_model_flavor(cases[i].name, &d), 0);
		titan_model_count_params(&d, &p);
		assert_int_equal(p.total, cases[i].params);
		double f = titan_model_flops_per_token(&d, cases[i].seq);
		assert_true(fabs(f - cases[i].flops) / cases[i].flops < 1e-6);
	}
	struct titan_model_dims d;
	assert_int_equal(titan_model_flavor("7B", &d), -3);
}

static void test_dims_from_config(void **state)
{
	struct titan_config c;
	struct titan_model_dims d;

	(void)state;
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_model_dims_from_config(&c, &d), 0);
	assert_string_equal(d.flavor, "debugmodel");
	assert_int_equal(d.dim, 256);
	assert_int_equal(d.head_dim, 16);
	/* override a dim of a flavor */
	assert_int_equal(titan_config_set(&c, "model.n_layers", "2", "test"), 0);
	assert_int_equal(titan_model_dims_from_config(&c, &d), 0);
	assert_int_equal(d.n_layers, 2);
	/* custom needs its dims */
	assert_int_equal(titan_config_set(&c, "model.flavor", "custom", "test"), 0);
	assert_int_equal(titan_config_set(&c, "model.dim", "-1", "test"), 0);
	assert_int_equal(titan_model_dims_from_config(&c, &d), -3);
	assert_non_null(strstr(titan_errmsg(), "model.dim"));
	assert_int_equal(titan_config_set(&c, "model.dim", "96", "test"), 0);
	assert_int_equal(titan_config_set(&c, "model.n_heads", "5", "test"), 0);
	assert_int_equal(titan_config_set(&c, "model.vocab_size", "300", "test"), 0);
	assert_int_equal(titan_model_dims_from_config(&c, &d), -3);
	assert_non_null(strstr(titan_errmsg(), "model.n_heads"));
	assert_int_equal(titan_config_set(&c, "model.n_heads", "4", "test"), 0);
	assert_int_equal(titan_config_set(&c, "model.n_kv_heads", "3", "test"), 0);
	assert_int_equal(titan_model_dims_from_config(&c, &d), -3);
	assert_non_null(strstr(titan_errmsg(), "model.n_kv_heads"));
	assert_int_equal(titan_config_set(&c, "model.n_kv_heads", "2", "test"), 0);
	assert_int_equal(titan_model_dims_from_config(&c, &d), 0);
	assert_int_equal(d.head_dim, 24);
	assert_int_equal(d.ffn_hidden, 256);
	titan_config_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ffn_hidden),
		cmocka_unit_test(test_flavor_params),
		cmocka_unit_test(test_dims_from_config),
	};
	return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
