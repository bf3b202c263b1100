/* test_dist.c — lib/dist in one process: torchtitan's ParallelDims rules
 * (inference of -1, the product error naming the numbers), mesh
 * coordinates, size-1 collectives, and the flight recorder file.  The
 * multi-rank behaviour (collectives over MPI, timeouts) is tested through
 * titan-train under mpiexec in tests/bats/titan-train-dist.bats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/config.h"
#include "titan/core.h"
#include "titan/dist.h"

static void set(struct titan_config *c, const char *k, const char *v)
{
	assert_int_equal(titan_config_set(c, k, v, "test"), 0);
}

static void test_dims_infer_and_errors(void **state)
{
	struct titan_config c;
	struct titan_parallel_dims pd;

	(void)state;
	assert_int_equal(titan_config_init(&c), 0);
	/* dp_shard -1 takes the ranks left over */
	set(&c, "parallelism.data_parallel_replicate_degree", "2");
	assert_int_equal(titan_parallel_dims_from_config(&pd, &c, 8), 0);
	assert_int_equal(pd.degree[TITAN_DIM_DP_SHARD], 4);
	assert_int_equal(titan_parallel_dims_degree(&pd, TITAN_DIM_DP), 8);
	assert_int_equal(titan_parallel_dims_degree(&pd, TITAN_DIM_FSDP), 4);
	assert_int_equal(titan_parallel_dims_degree(&pd, TITAN_DIM_LOSS), 8);
	/* not a divisor */
	assert_int_equal(titan_parallel_dims_from_config(&pd, &c, 7), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "data_parallel_replicate_degree 2"));
	assert_non_null(strstr(titan_errmsg(), "7 ranks"));
	/* an explicit product that is not the world size */
	set(&c, "parallelism.data_parallel_shard_degree", "3");
	assert_int_equal(titan_parallel_dims_from_config(&pd, &c, 4), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "data_parallel_shard_degree 3"));
	assert_non_null(strstr(titan_errmsg(), "= 6, but 4 ranks were started"));
	set(&c, "parallelism.data_parallel_shard_degree", "2");
	set(&c, "parallelism.tensor_parallel_degree", "2");
	assert_int_equal(titan_parallel_dims_from_config(&pd, &c, 8), 0);
	titan_config_release(&c);
}

/* pp outermost, tp innermost: rank = (((pp·R + r)·S + s)·CP + c)·TP + t */
static void test_coords(void **state)
{
	struct titan_parallel_dims pd = {{2, 2, 3, 1, 2}, 24, 1};
	int64_t c[TITAN_DIM_NDIMS];

	(void)state;
	for (int64_t r = 0; r < 24; r++) {
		titan_parallel_dims_coords(&pd, r, c);
		assert_int_equal(titan_parallel_dims_rank(&pd, c), r);
	}
	titan_parallel_dims_coords(&pd, 13, c); /* 13 = ((1·2 + 0)·3 + 0)·2 + 1 */
	assert_int_equal(c[TITAN_DIM_PP], 1);
	assert_int_equal(c[TITAN_DIM_DP_REPLICATE], 0);
	assert_int_equal(c[TITAN_DIM_DP_SHARD], 0);
	assert_int_equal(c[TITAN_DIM_TP], 1);
	assert_string_equal(titan_mesh_dim_name(TITAN_DIM_FSDP), "fsdp");
}

/* torchtitan's sparse mesh (pp, dp_replicate, efsdp, ep): EP's groups are
 * ep consecutive ranks of the flattened dp_shard x cp x tp of each pp x
 * dp_replicate, efsdp the ranks of that region with the same EP rank. */
static void test_ep_groups(void **state)
{
	/* pp 2, dp_replicate 1, dp_shard 2, cp 1, tp 2; ep 2: the TP groups */
	struct titan_parallel_dims pd = {{2, 1, 2, 1, 2}, 8, 2};
	int64_t first, stride, size, index;

	(void)state;
	titan_parallel_dims_ep_group(&pd, 6, true, &first, &stride, &size, &index);
	assert_true(first == 6 && stride == 1 && size == 2 && index == 0);
	titan_parallel_dims_ep_group(&pd, 7, false, &first, &stride, &size, &index);
	assert_true(first == 5 && stride == 2 && size == 2 && index == 1);
	/* ep 4 over dp_shard x tp: one group per stage, efsdp one rank */
	pd.ep = 4;
	titan_parallel_dims_ep_group(&pd, 6, true, &first, &stride, &size, &index);
	assert_true(first == 4 && stride == 1 && size == 4 && index == 2);
	titan_parallel_dims_ep_group(&pd, 6, false, &first, &stride, &size, &index);
	assert_true(first == 6 && size == 1 && index == 0);
	/* dp_shard 1 x cp 2, ep 2 (no TP): the group spans the CP ranks */
	pd = (struct titan_parallel_dims){{1, 1, 1, 2, 1}, 2, 2};
	titan_parallel_dims_ep_group(&pd, 1, true, &first, &stride, &size, &index);
	assert_true(first == 0 && size == 2 && index == 1);
}

/* Without a launcher: one rank, every communicator of size 1, collectives
 * are copies, point-to-point is an error. */
static void test_one_process(void **state)
{
	struct titan_config c;
	struct titan_parallel_dims pd;
	struct titan_dist *d = NULL;
	struct titan_comm_req *q;
	float a[4] = {1, 2, 3, 4}, b[4] = {0};
	double x = 5;
	int argc = 1;
	char *args[] = {"test_dist", NULL}, **argv = args;

	(void)state;
	setenv("TITAN_MPI", "0", 1);
	assert_int_equal(titan_dist_init(&argc, &argv, &d), 0);
	assert_int_equal(d->size, 1);
	assert_false(d->mpi);
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_parallel_dims_from_config(&pd, &c, 1), 0);
	assert_int_equal(titan_dist_mesh(d, &pd), 0);
	for (int k = 0; k < TITAN_DIM_NALL; k++) {
		assert_int_equal(titan_comm_size(d->comm[k]), 1);
		assert_int_equal(titan_comm_rank(d->comm[k]), 0);
		assert_int_equal(titan_comm_world_rank(d->comm[k], 0), 0);
		assert_null(titan_comm_mpi_handle(d->comm[k]));
	}
	struct titan_comm *w = d->comm[TITAN_DIM_FSDP];

	assert_int_equal(titan_comm_all_gather(w, a, b, 4, TITAN_DTYPE_F32, "t"), 0);
	assert_memory_equal(a, b, sizeof(a));
	memset(b, 0, sizeof(b));
	assert_int_equal(titan_comm_ireduce_scatter(w, a, b, 4, TITAN_DTYPE_F32, "t", &q), 0);
	assert_true(titan_comm_test(q));
	assert_int_equal(titan_comm_wait(q), 0);
	assert_memory_equal(a, b, sizeof(a));
	assert_int_equal(titan_comm_all_reduce(w, TITAN_IN_PLACE, &x, 1, TITAN_DTYPE_F64,
					       TITAN_REDOP_MAX, "t"), 0);
	assert_true(x == 5);
	assert_int_equal(titan_comm_broadcast(w, &x, 1, TITAN_DTYPE_F64, 0, "t"), 0);
	assert_int_equal(titan_comm_barrier(w, "t"), 0);
	assert_int_equal(titan_comm_broadcast(w, &x, 1, TITAN_DTYPE_F64, 1, "t"), TITAN_E_INVALID);
	assert_int_equal(titan_comm_isend(w, a, 4, TITAN_DTYPE_F32, 0, 0, "p2p", &q), 0);
	assert_int_equal(titan_comm_wait(q), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "send 'p2p'"));
	assert_int_equal(titan_comm_wait(NULL), 0);
	titan_config_release(&c);
	titan_dist_finalize(d, true, 0);
	unsetenv("TITAN_MPI");
}

/* The flight recorder: the last trace_buf_size operations, as JSON. */
static void test_recorder(void **state)
{
	struct titan_config c;
	struct titan_parallel_dims pd;
	struct titan_dist *d = NULL;
	char dir[] = "/tmp/test_dist.XXXXXX", path[256], buf[8192];
	double x = 1;
	int argc = 1;
	char *args[] = {"test_dist", NULL}, **argv = args;
	FILE *f;
	size_t n;

	(void)state;
	assert_non_null(mkdtemp(dir));
	setenv("TITAN_MPI", "0", 1);
	assert_int_equal(titan_dist_init(&argc, &argv, &d), 0);
	assert_int_equal(titan_config_init(&c), 0);
	set(&c, "job.dump_folder", dir);
	set(&c, "comm.trace_buf_size", "3");
	assert_int_equal(titan_parallel_dims_from_config(&pd, &c, 1), 0);
	assert_int_equal(titan_dist_mesh(d, &pd), 0);
	assert_int_equal(titan_dist_configure(d, &c), 0);
	titan_dist_set_step(d, 7);
	for (int i = 0; i < 5; i++)
		assert_int_equal(titan_comm_all_reduce(d->comm[TITAN_DIM_LOSS], TITAN_IN_PLACE, &x, 1,
						       TITAN_DTYPE_F64, TITAN_REDOP_SUM, "loss \"q\""), 0);
	assert_int_equal(titan_dist_dump_traces(d, "test"), 0);
	snprintf(path, sizeof(path), "%s/comm_traces/rank0.json", dir);
	assert_non_null(f = fopen(path, "r"));
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	assert_non_null(strstr(buf, "\"format\": \"titan-flight-recorder\""));
	assert_non_null(strstr(buf, "\"reason\": \"test\""));
	assert_non_null(strstr(buf, "\"what\": \"loss \\\"q\\\"\""));
	assert_non_null(strstr(buf, "\"seq\": 4"));   /* the newest three: 2, 3, 4 */
	assert_null(strstr(buf, "\"seq\": 1,"));
	assert_non_null(strstr(buf, "\"comm\": \"loss\", \"op\": \"all_reduce\""));
	assert_non_null(strstr(buf, "\"step\": 7, \"state\": \"completed\""));
	unlink(path);
	snprintf(path, sizeof(path), "%s/comm_traces", dir);
	rmdir(path);
	rmdir(dir);
	titan_config_release(&c);
	titan_dist_finalize(d, true, 0);
	unsetenv("TITAN_MPI");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dims_infer_and_errors),
		cmocka_unit_test(test_coords),
		cmocka_unit_test(test_ep_groups),
		cmocka_unit_test(test_one_process),
		cmocka_unit_test(test_recorder),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
