/* test_model_parts.c — the private parts the Llama model is assembled
 * from (lib/train): the rank's pipeline stages (stage.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "titan/train.h"
#include "../../lib/train/stage.h"

/* Without PP: one stage of every block, holding embedding and loss; the
 * table options untouched. */
static void test_stages_whole_model(void **state)
{
	struct titan_llama_opts o;
	struct titan_param_table_opts to;
	struct titan_stages s;

	(void)state;
	memset(&o, 0, sizeof(o));
	titan_param_table_opts_default(&to);
	titan_stages_init(&s, &o, 6, &to);
	assert_int_equal(s.n, 1);
	assert_false(s.staged);
	assert_true(s.first && s.last);
	assert_int_equal(s.v[0].l0, 0);
	assert_int_equal(s.v[0].l1, 6);
	assert_true(s.v[0].first && s.v[0].last);
	assert_false(to.staged);
	for (int g = 0; g < 8; g++)
		assert_true(titan_stages_has_group(&s, g, 8));
}

/* Interleaved, rank 0 of 2 with stages 0 and 2 of 4 over 6 blocks:
 * [0, 2) with the embedding, [4, 6) without the loss (stage_last is the
 * rank's last stage's, false here); the table options name both ranges. */
static void test_stages_interleaved(void **state)
{
	struct titan_llama_opts o;
	struct titan_param_table_opts to;
	struct titan_stages s;
	const bool want[8] = {true, true, true, false, false, true, true, false};

	(void)state;
	memset(&o, 0, sizeof(o));
	o.stage_l0 = 0;
	o.stage_l1 = 2;
	o.stage_first = true;
	o.nmore = 1;
	o.more_l0[0] = 4;
	o.more_l1[0] = 6;
	titan_param_table_opts_default(&to);
	titan_stages_init(&s, &o, 6, &to);
	assert_int_equal(s.n, 2);
	assert_true(s.staged && s.first && !s.last);
	assert_true(s.v[0].first && !s.v[0].last);
	assert_true(!s.v[1].first && !s.v[1].last);
	assert_int_equal(s.v[1].l0, 4);
	assert_int_equal(s.v[1].l1, 6);
	assert_true(to.staged && to.stage_first && !to.stage_last);
	assert_int_equal(to.stage_l0, 0);
	assert_int_equal(to.stage_l1, 2);
	assert_int_equal(to.nmore, 1);
	assert_int_equal(to.more_l0[0], 4);
	assert_int_equal(to.more_l1[0], 6);
	for (int g = 0; g < 8; g++)
		assert_int_equal(titan_stages_has_group(&s, g, 8), want[g]);

	/* the other rank: stages 1 and 3, the loss on its second */
	o.stage_l0 = 2;
	o.stage_l1 = 4;
	o.stage_first = false;
	o.stage_last = true;
	o.more_l0[0] = 6;
	o.more_l1[0] = 6;
	titan_stages_init(&s, &o, 6, &to);
	assert_true(!s.v[0].first && !s.v[0].last);
	assert_true(s.v[1].last && !s.v[1].first);
	assert_false(titan_stages_has_group(&s, 0, 8));
	assert_true(titan_stages_has_group(&s, 7, 8));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stages_whole_model),
		cmocka_unit_test(test_stages_interleaved),
	};
	return cmocka_run_group_tests_name("model_parts", tests, NULL, NULL);
}
