/* test_pp_schedule.c — the action order of the pipeline schedules
 * (titan_pp_schedule_actions, lib/train/pp.c), above all the zero-bubble
 * ones, InterleavedZeroBubble and ZBVZeroBubble (torch.distributed.
 * pipelining's ScheduleInterleavedZeroBubble and ScheduleZBVZeroBubble):
 * orders worked by hand from torch's code, and for many (pp, V, M) that every (stage,
 * microbatch) gets exactly one F, B and W, W after its B, and that the
 * ranks, running their lists in order with every receive posted up front
 * (as titan_pp_step does), never wait for each other in a cycle: each
 * forward after the previous stage's, each backward after the next
 * stage's (the last stage's after its own forward). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "titan/core.h"
#include "titan/estimate.h"
#include "titan/train.h"

/* "F0.1" = forward of the rank's stage 0, microbatch 1 */
static void format(const struct titan_pp_action *a, int n, char *out, size_t cap)
{
	size_t at = 0;

	out[0] = 0;
	for (int i = 0; i < n && at < cap; i++)
		at += (size_t)snprintf(out + at, cap - at, "%s%c%d.%d", i ? " " : "",
				       "FBW"[a[i].op], a[i].stage, a[i].mb);
}

/* pp 2, V 2, M 2 (one round of 2 microbatches), worked by hand from
 * torch's code: rank 0 warms up with (V-1)·2 + (pp-1-0) = 3 forwards and
 * issues W right after each B (num_1f1b_microbatches = rank = 0); rank 1
 * warms up with 2 and holds the first W back one step. */
/* ZBV, pp 2, M 4, worked by hand from torch's _calculate_single_rank_
 * operations: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2. */
static void test_zbv_order(void **state)
{
	struct titan_pp_action a[24];
	char buf[512];

	(void)state;
	assert_int_equal(titan_pp_stage_of(TITAN_PP_ZBV, 2, 0, 1), 3);
	assert_int_equal(titan_pp_stage_of(TITAN_PP_ZBV, 2, 1, 1), 2);
	assert_int_equal(titan_pp_stage_of(TITAN_PP_INTERLEAVED_ZB, 2, 0, 1), 2);
	assert_int_equal(titan_pp_schedule_actions(TITAN_PP_ZBV, 2, 0, 2, 4, true, a), 24);
	format(a, 24, buf, sizeof(buf));
	assert_string_equal(buf, "F0.0 F0.1 F0.2 F1.0 B1.0 W1.0 F1.1 B1.1 W1.1 F0.3 B0.0 W0.0 "
				 "F1.2 B1.2 W1.2 B0.1 W0.1 F1.3 B1.3 W1.3 B0.2 W0.2 B0.3 W0.3");
	assert_int_equal(titan_pp_schedule_actions(TITAN_PP_ZBV, 2, 1, 2, 4, true, a), 24);
	format(a, 24, buf, sizeof(buf));
	assert_string_equal(buf, "F0.0 F1.0 F0.1 F1.1 B1.0 W1.0 F0.2 B0.0 W0.0 F1.2 B1.1 W1.1 "
				 "F0.3 B0.1 W0.1 F1.3 B1.2 W1.2 B0.2 B1.3 B0.3 W0.2 W1.3 W0.3");
}

static void test_zero_bubble_order(void **state)
{
	struct titan_pp_action a[12];
	char buf[256];

	(void)state;
	assert_int_equal(titan_pp_schedule_actions(TITAN_PP_INTERLEAVED_ZB, 2, 0, 2, 2, true, a), 12);
	format(a, 12, buf, sizeof(buf));
	assert_string_equal(buf, "F0.0 F0.1 F1.0 F1.1 B1.0 W1.0 B1.1 W1.1 B0.0 W0.0 B0.1 W0.1");
	assert_int_equal(titan_pp_schedule_actions(TITAN_PP_INTERLEAVED_ZB, 2, 1, 2, 2, true, a), 12);
	format(a, 12, buf, sizeof(buf));
	assert_string_equal(buf, "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 W1.0 B0.0 W1.1 B0.1 W0.0 W0.1");
	/* forward only (validation): every stage's forwards, stage by stage */
	assert_int_equal(titan_pp_schedule_actions(TITAN_PP_INTERLEAVED_ZB, 2, 1, 2, 2, false, a), 4);
	format(a, 4, buf, sizeof(buf));
	assert_string_equal(buf, "F0.0 F0.1 F1.0 F1.1");
}

/* Run every rank's list; 0 when all finish, -1 on a wait cycle. */
static int simulate(enum titan_pp_schedule sched, int P, int V, int M)
{
	const int S = P * V, split = sched == TITAN_PP_INTERLEAVED_ZB || sched == TITAN_PP_ZBV;
	struct titan_pp_action *a[8];
	int n[8], at[8] = {0}, left = 0;
	char *done = calloc((size_t)(3 * S * M), 1); /* [op][stage][mb] */

	assert_non_null(done);
	assert_true(P <= 8);
	for (int r = 0; r < P; r++) {
		a[r] = malloc(3 * (size_t)(V * M) * sizeof(*a[r]));
		assert_non_null(a[r]);
		n[r] = titan_pp_schedule_actions(sched, P, r, V, M, true, a[r]);
		assert_int_equal(n[r], (split ? 3 : 2) * V * M);
		left += n[r];
		/* each (stage, microbatch): one F, one B, one W (split), in
		 * that order on this rank */
		int *seen = calloc((size_t)(3 * V * M), sizeof(*seen));

		assert_non_null(seen);
		for (int i = 0; i < n[r]; i++) {
			const struct titan_pp_action *x = &a[r][i];

			assert_true(x->stage >= 0 && x->stage < V && x->mb >= 0 && x->mb < M);
			assert_true(split || x->op != TITAN_PP_W);
			assert_int_equal(seen[(x->op * V + x->stage) * M + x->mb]++, 0);
			if (x->op > TITAN_PP_F) /* B after F, W after B */
				assert_int_equal(seen[((x->op - 1) * V + x->stage) * M + x->mb], 1);
		}
		free(seen);
	}
	for (bool moved = true; moved && left > 0;) {
		moved = false;
		for (int r = 0; r < P; r++) {
			while (at[r] < n[r]) {
				const struct titan_pp_action *x = &a[r][at[r]];
				const int s = titan_pp_stage_of(sched, P, r, x->stage), k = x->mb;
				bool ready;

				if (x->op == TITAN_PP_F)
					ready = s == 0 || done[(0 * S + s - 1) * M + k];
				else if (x->op == TITAN_PP_B)
					ready = s == S - 1 ? done[(0 * S + s) * M + k]
							   : done[(1 * S + s + 1) * M + k];
				else
					ready = true; /* its B ran earlier on this rank */
				if (!ready)
					break;
				done[(x->op * S + s) * M + k] = 1;
				at[r]++;
				left--;
				moved = true;
			}
		}
	}
	for (int r = 0; r < P; r++)
		free(a[r]);
	free(done);
	return left == 0 ? 0 : -1;
}

static void test_every_layout_runs(void **state)
{
	int runs = 0;

	(void)state;
	for (int P = 2; P <= 6; P++)
		for (int V = 1; V <= 4; V++)
			for (int M = 1; M <= 16; M++) {
				const int rounds = M / P > 1 ? M / P : 1;

				if (M % rounds == 0) { /* torch's condition (titan_pp_new) */
					if (simulate(TITAN_PP_INTERLEAVED_ZB, P, V, M) < 0)
						fail_msg("InterleavedZeroBubble pp %d V %d M %d: the "
							 "ranks wait for each other", P, V, M);
					runs++;
				}
				if (M % P == 0 &&
				    simulate(TITAN_PP_INTERLEAVED_1F1B, P, V, M) < 0)
					fail_msg("Interleaved1F1B pp %d V %d M %d deadlocks", P, V, M);
				if (V == 2 && simulate(TITAN_PP_ZBV, P, 2, M) < 0)
					fail_msg("ZBVZeroBubble pp %d M %d deadlocks", P, M);
				if (V == 1 && (simulate(TITAN_PP_1F1B, P, 1, M) < 0 ||
					       simulate(TITAN_PP_GPIPE, P, 1, M) < 0))
					fail_msg("1F1B/GPipe pp %d M %d deadlocks", P, M);
			}
	assert_true(runs > 200);
}

/* Every weight pass of a rank comes after its input pass and before the
 * step ends, and the rank's last W of a stage is after the stage's last
 * B (where DDP reduces). */
static void test_last_w_after_last_b(void **state)
{
	struct titan_pp_action a[3 * 2 * 8];

	(void)state;
	for (int r = 0; r < 4; r++) {
		const int n = titan_pp_schedule_actions(TITAN_PP_INTERLEAVED_ZB, 4, r, 2, 8, true, a);
		int lastb[2] = {-1, -1}, lastw[2] = {-1, -1};

		for (int i = 0; i < n; i++) {
			if (a[i].op == TITAN_PP_B)
				lastb[a[i].stage] = i;
			else if (a[i].op == TITAN_PP_W)
				lastw[a[i].stage] = i;
		}
		for (int v = 0; v < 2; v++)
			assert_true(lastw[v] > lastb[v]);
	}
}

/*
 * One name table for the pipeline schedules: the schema's choices, the
 * names titan-train and titan-estimate print, and the schedule titan-train
 * runs of each (by enum, and by name through pp.c's parse) all agree.
 */
static void test_schedule_names(void **state)
{
	static const char *const key = "parallelism.pipeline_parallel_schedule";
	(void)state;
	int n = 0;

	for (; titan_config_choice(key, n); n++) {
		const char *name = titan_config_choice(key, n);
		enum titan_pp_schedule b = TITAN_PP_GPIPE;

		assert_string_equal(titan_schedule_name((enum titan_schedule)n), name);
		assert_string_equal(titan_est_schedule_name((enum titan_est_schedule)n), name);
		/* every schedule but LoopedBFS runs */
		int rc = titan_pp_schedule_from((enum titan_schedule)n, &b);
		assert_int_equal(rc, n == TITAN_SCHEDULE_LOOPED_BFS ? TITAN_E_INVALID : 0);
	}
	assert_int_equal(n, 6);
	assert_string_equal(titan_schedule_name((enum titan_schedule)n), "?");

	enum titan_pp_schedule s;
	assert_int_equal(titan_pp_schedule_from(TITAN_SCHEDULE_ZBV, &s), 0);
	assert_int_equal(s, TITAN_PP_ZBV);
	assert_int_equal(titan_pp_schedule_from(TITAN_SCHEDULE_INTERLEAVED_1F1B, &s), 0);
	assert_int_equal(s, TITAN_PP_INTERLEAVED_1F1B);
	assert_int_equal(titan_pp_schedule_from(TITAN_SCHEDULE_LOOPED_BFS, &s), TITAN_E_INVALID);
	assert_string_equal(titan_errmsg(), "parallelism.pipeline_parallel_schedule: 'LoopedBFS' "
			    "is not implemented yet (GPipe, 1F1B, Interleaved1F1B, "
			    "InterleavedZeroBubble and ZBVZeroBubble are; LoopedBFS is not)");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_zero_bubble_order),
		cmocka_unit_test(test_zbv_order),
		cmocka_unit_test(test_every_layout_runs),
		cmocka_unit_test(test_last_w_after_last_b),
		cmocka_unit_test(test_schedule_names),
	};
	return cmocka_run_group_tests_name("pp_schedule", tests, NULL, NULL);
}
