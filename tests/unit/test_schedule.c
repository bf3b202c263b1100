/* test_schedule.c — torchtitan's LR schedule and gradient accumulation.
 * Expected values computed with torchtitan's linear_warmup_stable_decay
 * (notes §2) by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "titan/config.h"
#include "titan/train.h"

static void set(struct titan_config *c, const char *k, const char *v)
{
	assert_int_equal(titan_config_set(c, k, v, "test"), 0);
}

/* The debug preset: 10 steps, warmup 2, decay_ratio 0.8 linear, min 0:
 * decay = 8, stable = 10 + 1 - 2 - 8 = 1. */
static void test_debug_preset(void **state)
{
	struct titan_config c;
	struct titan_lr_schedule s;
	const double want[10] = {0.5, 1.0, 1.0, 7.0 / 8, 6.0 / 8, 5.0 / 8, 4.0 / 8, 3.0 / 8,
				 2.0 / 8, 1.0 / 8};

	(void)state;
	assert_int_equal(titan_config_init(&c), 0);
	set(&c, "training.steps", "10");
	set(&c, "lr_scheduler.warmup_steps", "2");
	set(&c, "lr_scheduler.decay_ratio", "0.8");
	titan_lr_schedule_init(&s, &c);
	assert_int_equal(s.warmup, 2);
	assert_int_equal(s.decay, 8);
	assert_int_equal(s.stable, 1);
	for (int i = 0; i < 10; i++)
		assert_true(fabs(titan_lr_factor(&s, i) - want[i]) < 1e-15);
	titan_config_release(&c);
}

static void test_decay_types_and_min(void **state)
{
	struct titan_config c;
	struct titan_lr_schedule s;

	(void)state;
	assert_int_equal(titan_config_init(&c), 0);
	set(&c, "training.steps", "100");
	set(&c, "lr_scheduler.warmup_steps", "10");
	set(&c, "lr_scheduler.decay_type", "cosine");
	set(&c, "lr_scheduler.min_lr_factor", "0.1");
	titan_lr_schedule_init(&s, &c); /* no decay_ratio: decay right after warmup */
	assert_int_equal(s.decay, 90);
	assert_int_equal(s.stable, 1);
	/* step0 = 10: p = (11 - 10 - 1)/90 = 0 -> 1.0 */
	assert_true(fabs(titan_lr_factor(&s, 10) - 1.0) < 1e-15);
	/* step0 = 55: p = 45/90 = 0.5 -> 0.1 + 0.9 * 0.5 */
	assert_true(fabs(titan_lr_factor(&s, 55) - 0.55) < 1e-15);
	/* last step (99): p = 89/90: the virtual step keeps it above min */
	assert_true(titan_lr_factor(&s, 99) > 0.1);
	set(&c, "lr_scheduler.decay_type", "sqrt");
	titan_lr_schedule_init(&s, &c);
	assert_true(fabs(titan_lr_factor(&s, 32) - (0.1 + 0.9 * (1 - sqrt(22.0 / 90)))) < 1e-15);
	titan_config_release(&c);
}

static void test_clamps_and_round_half_even(void **state)
{
	struct titan_config c;
	struct titan_lr_schedule s;

	(void)state;
	assert_int_equal(titan_config_init(&c), 0);
	set(&c, "training.steps", "5");
	set(&c, "lr_scheduler.warmup_steps", "200"); /* more than the steps */
	titan_lr_schedule_init(&s, &c);
	assert_int_equal(s.warmup, 5);
	assert_int_equal(s.decay, 0);
	assert_int_equal(s.stable, 1);
	assert_true(s.clamped & 1);
	assert_true(fabs(titan_lr_factor(&s, 0) - 0.2) < 1e-15);
	/* round(5 * 0.5) = round(2.5) = 2 in Python */
	set(&c, "lr_scheduler.warmup_steps", "1");
	set(&c, "lr_scheduler.decay_ratio", "0.5");
	titan_lr_schedule_init(&s, &c);
	assert_int_equal(s.decay, 2);
	assert_int_equal(s.stable, 3);
	/* decay clamped to steps - warmup */
	set(&c, "lr_scheduler.decay_ratio", "1.0");
	titan_lr_schedule_init(&s, &c);
	assert_int_equal(s.decay, 4);
	assert_true(s.clamped & 2);
	titan_config_release(&c);
}

static void test_grad_accum(void **state)
{
	struct titan_config c;
	int64_t n;

	(void)state;
	assert_int_equal(titan_config_init(&c), 0);
	set(&c, "training.local_batch_size", "4");
	assert_int_equal(titan_grad_accum_steps(&c, 1, &n), 0);
	assert_int_equal(n, 1);
	set(&c, "training.global_batch_size", "32");
	assert_int_equal(titan_grad_accum_steps(&c, 2, &n), 0);
	assert_int_equal(n, 4);
	assert_int_equal(titan_grad_accum_steps(&c, 3, &n), -3);
	titan_config_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_debug_preset),
		cmocka_unit_test(test_decay_types_and_min),
		cmocka_unit_test(test_clamps_and_round_half_even),
		cmocka_unit_test(test_grad_accum),
	};
	return cmocka_run_group_tests_name("schedule", tests, NULL, NULL);
}
