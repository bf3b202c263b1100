/* test_layout.c — lib/model/layout.c, the split of the model over ranks
 * that titan-train and titan-estimate share: torchtitan's stage split
 * (automatic as generate_llm_fqn_per_model_part, split points,
 * layers_per_stage) with its errors, and the TP/CP divisibility checks;
 * and that titan-estimate's pipeline ranks (--json stage_layers) are
 * exactly titan_pp_split's stages under the trainer's stage-to-rank map. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "titan/estimate.h"
#include "titan/model.h"
#include "titan/train.h"

static void expect_error(int rc, const char *needle)
{
	assert_int_equal(rc, TITAN_E_INVALID);
	if (!strstr(titan_errmsg(), needle))
		fail_msg("'%s' does not name '%s'", titan_errmsg(), needle);
}

/* Stages [l0, l1) of every stage of a split, in one string: "0-1 1-3 ..." */
static int split_str(const struct titan_config *c, int64_t L, int ns, char *out, size_t cap)
{
	size_t at = 0;

	out[0] = 0;
	for (int s = 0; s < ns; s++) {
		struct titan_pp_stage st;
		int rc = titan_pp_split(c, L, ns, s, &st);

		if (rc < 0)
			return rc;
		assert_int_equal(st.first, s == 0);
		assert_int_equal(st.last, s == ns - 1);
		at += (size_t)snprintf(out + at, cap - at, "%s%d-%d", s ? " " : "", st.l0, st.l1);
	}
	return 0;
}

static void test_pp_split(void **state)
{
	struct titan_config c;
	char buf[256], *pts[2] = {"layers.4", "layers.2"};

	(void)state;
	memset(&c, 0, sizeof(c));
	/* 6 blocks + embedding + output = 8 units over 4 stages: 1+2+2+1 */
	assert_int_equal(split_str(&c, 6, 4, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "0-1 1-3 3-5 5-6");
	/* 126 blocks over 8 stages: 16 units each, the ends one block fewer */
	assert_int_equal(split_str(&c, 126, 8, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "0-15 15-31 31-47 47-63 63-79 79-95 95-111 111-126");
	/* 7 blocks + 2 = 9 units over 4 stages: the first gets the extra one */
	assert_int_equal(split_str(&c, 7, 4, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "0-2 2-4 4-6 6-7");
	/* a stage without a block */
	expect_error(split_str(&c, 6, 5, buf, sizeof(buf)), "at most 4 stages");
	/* layers_per_stage: 10 blocks + 2, 2 each = 6 stages */
	c.parallelism.pipeline_parallel_layers_per_stage = 2;
	assert_int_equal(split_str(&c, 10, 6, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "0-1 1-3 3-5 5-7 7-9 9-10");
	expect_error(split_str(&c, 10, 4, buf, sizeof(buf)),
		     "layers_per_stage 2: 10 blocks + embedding + output make 6 stages, but the "
		     "schedule runs 4");
	c.parallelism.pipeline_parallel_layers_per_stage = 0;
	/* split points */
	c.parallelism.pipeline_parallel_split_points.n = 1;
	c.parallelism.pipeline_parallel_split_points.items = pts;
	assert_int_equal(split_str(&c, 5, 2, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "0-4 4-5");
	expect_error(split_str(&c, 5, 3, buf, sizeof(buf)), "1 points make 2 stages");
	c.parallelism.pipeline_parallel_split_points.n = 2; /* layers.4 then layers.2 */
	expect_error(split_str(&c, 5, 3, buf, sizeof(buf)),
		     "'layers.2' is not layers.N with N increasing in 1 .. 4");
}

static void test_tp_cp_checks(void **state)
{
	struct titan_model_dims d;

	(void)state;
	assert_int_equal(titan_model_flavor("8B", &d), 0); /* 32 heads, 8 kv heads, ffn 14336 */
	assert_int_equal(titan_model_check_tp_cp(&d, 8, 2, 8192, 1), 0);
	assert_int_equal(titan_model_check_tp_cp(&d, 1, 1, 7, 3), 0);
	expect_error(titan_model_check_tp_cp(&d, 3, 1, 8192, 1),
		     "tensor_parallel_degree 3 must divide model n_heads 32, n_kv_heads 8 and the "
		     "FFN hidden size 14336");
	expect_error(titan_model_check_tp_cp(&d, 16, 1, 8192, 1), "n_kv_heads 8");
	d.ffn_hidden = 100;
	expect_error(titan_model_check_tp_cp(&d, 8, 1, 8192, 1), "FFN hidden size 100");
	assert_int_equal(titan_model_flavor("8B", &d), 0);
	expect_error(titan_model_check_tp_cp(&d, 2, 4, 8200, 1),
		     "training.seq_len: 8200 is not divisible by 16 (parallelism."
		     "tensor_parallel_degree 2 x 2 x context_parallel_degree 4)");
	expect_error(titan_model_check_tp_cp(&d, 2, 1, 31, 1),
		     "training.seq_len: 31 is not divisible by 2");
	expect_error(titan_model_check_tp_cp(&d, 1, 1, 8, 0), "0 rows");
}

/* The GPU model's pipeline ranks hold titan_pp_split's stages, rank r the
 * stages titan_pp_stage_of maps to it (loop style; ZBV in a V). */
static void test_estimate_uses_the_split(void **state)
{
	static const struct {
		enum titan_est_schedule est;
		enum titan_pp_schedule train;
		int64_t L, pp, per_stage;
	} cases[] = {
		{TITAN_EST_1F1B, TITAN_PP_1F1B, 126, 8, 0},
		{TITAN_EST_GPIPE, TITAN_PP_GPIPE, 7, 4, 0},
		{TITAN_EST_INTERLEAVED_1F1B, TITAN_PP_INTERLEAVED_1F1B, 30, 4, 0},
		{TITAN_EST_INTERLEAVED_1F1B, TITAN_PP_INTERLEAVED_1F1B, 22, 2, 4},
		{TITAN_EST_INTERLEAVED_ZB, TITAN_PP_INTERLEAVED_ZB, 14, 2, 0},
		{TITAN_EST_ZBV, TITAN_PP_ZBV, 14, 4, 0},
	};
	struct titan_model_dims d;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct titan_est_opts o;
		struct titan_estimate e;
		struct titan_config c;
		int v;

		assert_int_equal(titan_model_flavor("8B", &d), 0);
		d.n_layers = cases[i].L;
		memset(&o, 0, sizeof(o));
		assert_int_equal(titan_est_device_lookup("h100-80g", &o.dev), 0);
		o.ngpu = cases[i].pp;
		o.gpus_per_node = 8;
		o.layout = (struct titan_est_layout){1, 1, 1, cases[i].pp, 1};
		o.local_batch = 8;
		o.pp_microbatch = 1;
		o.seq_len = 1024;
		o.accum = 1;
		o.schedule = cases[i].est;
		o.pp_layers_per_stage = cases[i].per_stage;
		o.param_bytes = 2;
		o.master_bytes = o.reduce_bytes = o.optim_bytes = 4;
		o.ce_chunk = 1024;
		o.mfu = 0.4;
		assert_int_equal(titan_estimate_run(&d, &o, &e), 0);
		memset(&c, 0, sizeof(c));
		c.parallelism.pipeline_parallel_layers_per_stage = cases[i].per_stage;
		v = titan_pp_stages_per_rank(&c, cases[i].train, d.n_layers, (int)cases[i].pp);
		assert_true(v >= 1);
		assert_int_equal(e.stages_per_rank, v);
		for (int r = 0; r < (int)cases[i].pp; r++)
			for (int k = 0; k < v; k++) {
				const int s = titan_pp_stage_of(cases[i].train, (int)cases[i].pp, r, k);
				struct titan_pp_stage st;

				assert_int_equal(titan_pp_split(&c, d.n_layers, (int)cases[i].pp * v, s,
								&st), 0);
				assert_int_equal(e.ranks[r].stages[k], s);
				assert_int_equal(e.ranks[r].stage_l0[k], st.l0);
				assert_int_equal(e.ranks[r].stage_l1[k], st.l1);
			}
		titan_estimate_release(&e);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pp_split),
		cmocka_unit_test(test_tp_cp_checks),
		cmocka_unit_test(test_estimate_uses_the_split),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
