/* test_comm.c — the communicator interface (titan/dist.h): the staged
 * communicator (a communicator's operations on a backend's buffers,
 * through the host) gives the results of the communicator it wraps, bit
 * for bit, for every operation, in place or not, blocking or not, and
 * moves its data with the backend's buf_get/buf_set.  Run plainly it
 * checks one rank (collectives are copies); test_two_ranks runs the same
 * checks under `mpiexec -n 2` (this program with --ranks), where they go
 * over MPI, and there also checks that FSDP (dp.c) packs through the
 * backend's buffer ops.  all_to_all_v (expert parallelism's) is checked
 * both ways too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "titan/core.h"
#include "titan/dist.h"
#include "titan/ops.h"
#include "titan/train.h"

#include "mpi_ranks.h"

enum { N = 37 };

/* The CPU backend with its buffer ops counted: the staged communicator
 * must move data through get/set, data parallelism pack with copy, rows,
 * memset and add (a device backend's are the only way in). */
static struct titan_backend_ops spy_ops;
static const struct titan_backend_ops *cpu_ops;
static int n_get, n_set, n_copy, n_rows, n_memset, n_add;

static int spy_get(struct titan_backend *be, void *host, const void *src, size_t bytes)
{
	n_get++;
	return cpu_ops->buf_get(be, host, src, bytes);
}

static int spy_set(struct titan_backend *be, void *dst, const void *host, size_t bytes)
{
	n_set++;
	return cpu_ops->buf_set(be, dst, host, bytes);
}

static int spy_copy(struct titan_backend *be, void *dst, const void *src, size_t bytes)
{
	n_copy++;
	return cpu_ops->buf_copy(be, dst, src, bytes);
}

static int spy_rows(struct titan_backend *be, float *dst, int64_t dst_off, int64_t dst_stride,
		    const float *src, int64_t src_off, int64_t src_stride, int64_t rows,
		    int64_t width)
{
	n_rows++;
	return cpu_ops->buf_copy_rows(be, dst, dst_off, dst_stride, src, src_off, src_stride, rows,
				      width);
}

static int spy_memset(struct titan_backend *be, void *dst, int value, size_t bytes)
{
	n_memset++;
	return cpu_ops->buf_memset(be, dst, value, bytes);
}

static int spy_add(struct titan_backend *be, float *y, const float *a, const float *b, int64_t n)
{
	n_add++;
	return cpu_ops->add(be, y, a, b, n);
}

static void spy_backend(struct titan_backend *be)
{
	assert_int_equal(titan_backend_cpu_init(be, 1), 0);
	cpu_ops = be->ops;
	spy_ops = *be->ops;
	spy_ops.buf_get = spy_get;
	spy_ops.buf_set = spy_set;
	spy_ops.buf_copy = spy_copy;
	spy_ops.buf_copy_rows = spy_rows;
	spy_ops.buf_memset = spy_memset;
	spy_ops.add = spy_add;
	be->ops = &spy_ops;
}

/* Inputs that differ per rank and round when added. */
static void fill(float *x, size_t n, int rank, int salt)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((double)(i * 7 + 1) / 3.0 + rank * 1.1 + salt * 0.013);
}

#define SAME(a, b) assert_memory_equal(a, b, sizeof(a))

/* all_to_all_v as expert parallelism uses it: the counts first (one per
 * rank), then blocks of uneven sizes, empty ones included; every element
 * says who sent it to whom.  The same on `c` and the staged `s`. */
static void check_all_to_all_v(struct titan_comm *c, struct titan_comm *s)
{
	const int rank = titan_comm_rank(c), size = titan_comm_size(c);
	const size_t one[4] = {1, 1, 1, 1};
	int64_t sn[4], rn[4];
	size_t sc[4], rc[4], st = 0, rt = 0;
	float in[16], a[16], b[16];

	for (int p = 0; p < size; p++) {
		sn[p] = (rank + 2 * p + 1) % 4; /* 0 to 3 rows to rank p */
		sc[p] = (size_t)sn[p];
		for (int64_t i = 0; i < sn[p]; i++)
			in[st++] = (float)(rank * 100 + p * 10 + i);
	}
	assert_int_equal(titan_comm_all_to_all_v(c, sn, one, rn, one, TITAN_DTYPE_I64, "n"), 0);
	for (int p = 0; p < size; p++) {
		assert_int_equal(rn[p], (p + 2 * rank + 1) % 4);
		rc[p] = (size_t)rn[p];
		rt += rc[p];
	}
	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	n_get = n_set = 0;
	assert_int_equal(titan_comm_all_to_all_v(c, in, sc, a, rc, TITAN_DTYPE_F32, "rows"), 0);
	assert_int_equal(titan_comm_all_to_all_v(s, in, sc, b, rc, TITAN_DTYPE_F32, "rows"), 0);
	SAME(a, b);
	assert_int_equal(n_get, 1);
	assert_int_equal(n_set, 1);
	for (int p = 0, k = 0; p < size; p++)
		for (size_t i = 0; i < rc[p]; i++, k++)
			assert_true(a[k] == (float)(p * 100 + rank * 10 + (int)i));
	for (size_t k = rt; k < 16; k++)
		assert_true(a[k] == 0);
	assert_int_equal(titan_comm_all_to_all_v(c, TITAN_IN_PLACE, sc, a, rc, TITAN_DTYPE_F32,
						 "t"), TITAN_E_INVALID);
}

/* Every operation on `c` and on the staged `s` over it, results compared. */
static void check_staged(struct titan_comm *c, struct titan_comm *s)
{
	const int rank = titan_comm_rank(c), size = titan_comm_size(c);
	float in[4 * N], a[4 * N], b[4 * N];
	double x[3], y[3];
	struct titan_comm_req *qa, *qb, *qc;

	assert_int_equal(titan_comm_rank(s), rank);
	assert_int_equal(titan_comm_size(s), size);
	assert_string_equal(titan_comm_name(s), titan_comm_name(c));
	assert_int_equal(titan_comm_world_rank(s, size - 1), titan_comm_world_rank(c, size - 1));
	assert_ptr_equal(titan_comm_mpi_handle(s), titan_comm_mpi_handle(c));
	assert_true(size <= 4);

	/* all-reduce: sum of floats, in place and not; max of doubles */
	fill(in, N, rank, 1);
	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	n_get = n_set = 0;
	assert_int_equal(titan_comm_all_reduce(c, in, a, N, TITAN_DTYPE_F32, TITAN_REDOP_SUM, "t"), 0);
	assert_int_equal(titan_comm_all_reduce(s, in, b, N, TITAN_DTYPE_F32, TITAN_REDOP_SUM, "t"), 0);
	SAME(a, b);
	assert_int_equal(n_get, 1);
	assert_int_equal(n_set, 1);
	fill(a, N, rank, 2);
	memcpy(b, a, sizeof(a));
	assert_int_equal(titan_comm_all_reduce(c, TITAN_IN_PLACE, a, N, TITAN_DTYPE_F32,
					       TITAN_REDOP_SUM, "t"), 0);
	assert_int_equal(titan_comm_all_reduce(s, TITAN_IN_PLACE, b, N, TITAN_DTYPE_F32,
					       TITAN_REDOP_SUM, "t"), 0);
	SAME(a, b);
	for (int i = 0; i < 3; i++)
		x[i] = y[i] = (double)((rank * 5 + i * 3) % 7) + 0.25;
	assert_int_equal(titan_comm_all_reduce(c, TITAN_IN_PLACE, x, 3, TITAN_DTYPE_F64,
					       TITAN_REDOP_MAX, "t"), 0);
	assert_int_equal(titan_comm_all_reduce(s, TITAN_IN_PLACE, y, 3, TITAN_DTYPE_F64,
					       TITAN_REDOP_MAX, "t"), 0);
	SAME(x, y);

	/* all-gather: from a send buffer, and in place (own part at rank·N) */
	fill(in, N, rank, 3);
	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	assert_int_equal(titan_comm_all_gather(c, in, a, N, TITAN_DTYPE_F32, "t"), 0);
	assert_int_equal(titan_comm_all_gather(s, in, b, N, TITAN_DTYPE_F32, "t"), 0);
	SAME(a, b);
	memset(a, 0, sizeof(a));
	fill(a + rank * N, N, rank, 4);
	memcpy(b, a, sizeof(a));
	assert_int_equal(titan_comm_all_gather(c, TITAN_IN_PLACE, a, N, TITAN_DTYPE_F32, "t"), 0);
	assert_int_equal(titan_comm_all_gather(s, TITAN_IN_PLACE, b, N, TITAN_DTYPE_F32, "t"), 0);
	SAME(a, b);

	/* reduce-scatter: size·N in, N out; in place the input is recv */
	fill(in, (size_t)size * N, rank, 5);
	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	assert_int_equal(titan_comm_reduce_scatter(c, in, a, N, TITAN_DTYPE_F32, "t"), 0);
	assert_int_equal(titan_comm_reduce_scatter(s, in, b, N, TITAN_DTYPE_F32, "t"), 0);
	SAME(a, b);
	fill(a, (size_t)size * N, rank, 6);
	memcpy(b, a, sizeof(a));
	assert_int_equal(titan_comm_reduce_scatter(c, TITAN_IN_PLACE, a, N, TITAN_DTYPE_F32, "t"), 0);
	assert_int_equal(titan_comm_reduce_scatter(s, TITAN_IN_PLACE, b, N, TITAN_DTYPE_F32, "t"), 0);
	assert_memory_equal(a, b, N * sizeof(float));

	/* broadcast from the last rank; a bad root is refused before staging */
	fill(a, N, rank, 7);
	memcpy(b, a, sizeof(a));
	assert_int_equal(titan_comm_broadcast(c, a, N, TITAN_DTYPE_F32, size - 1, "t"), 0);
	assert_int_equal(titan_comm_broadcast(s, b, N, TITAN_DTYPE_F32, size - 1, "t"), 0);
	SAME(a, b);
	n_get = 0;
	assert_int_equal(titan_comm_broadcast(s, b, N, TITAN_DTYPE_F32, size, "t"), TITAN_E_INVALID);
	assert_int_equal(n_get, 0);
	assert_int_equal(titan_comm_barrier(s, "t"), 0);

	/* non-blocking: two staged operations in flight, waited for out of
	 * order; each result lands in its own buffer only at its wait */
	fill(in, N, rank, 8);
	fill(a, N, rank, 9);
	memcpy(b, a, sizeof(a));
	assert_int_equal(titan_comm_iall_reduce(c, TITAN_IN_PLACE, a, N, TITAN_DTYPE_F32,
						TITAN_REDOP_SUM, "t", &qa), 0);
	assert_int_equal(titan_comm_wait(qa), 0);
	assert_int_equal(titan_comm_iall_reduce(s, TITAN_IN_PLACE, b, N, TITAN_DTYPE_F32,
						TITAN_REDOP_SUM, "t", &qb), 0);
	float g[4 * N], h[4 * N];

	memset(h, 0, sizeof(h));
	assert_int_equal(titan_comm_all_gather(c, in, g, N, TITAN_DTYPE_F32, "t"), 0);
	assert_int_equal(titan_comm_iall_gather(s, in, h, N, TITAN_DTYPE_F32, "t", &qc), 0);
	while (!titan_comm_test(qc))
		;
	assert_int_equal(titan_comm_wait(qc), 0);
	assert_int_equal(titan_comm_wait(qb), 0);
	SAME(a, b);
	assert_memory_equal(g, h, (size_t)size * N * sizeof(float));

	/* point-to-point around the ring; one rank has no peer (an error at
	 * the wait, as the inner communicator's) */
	if (size == 1) {
		assert_int_equal(titan_comm_isend(s, in, N, TITAN_DTYPE_F32, 0, 0, "p2p", &qa), 0);
		n_set = 0;
		assert_int_equal(titan_comm_wait(qa), TITAN_E_INVALID);
		assert_non_null(strstr(titan_errmsg(), "send 'p2p'"));
		assert_int_equal(titan_comm_irecv(s, b, N, TITAN_DTYPE_F32, 0, 0, "p2p", &qa), 0);
		assert_int_equal(titan_comm_wait(qa), TITAN_E_INVALID);
		assert_int_equal(n_set, 0);
		return;
	}
	const int next = (rank + 1) % size, prev = (rank + size - 1) % size;

	fill(in, N, rank, 10);
	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	assert_int_equal(titan_comm_irecv(c, a, N, TITAN_DTYPE_F32, prev, 3, "ring", &qa), 0);
	assert_int_equal(titan_comm_isend(c, in, N, TITAN_DTYPE_F32, next, 3, "ring", &qb), 0);
	assert_int_equal(titan_comm_wait(qa), 0);
	assert_int_equal(titan_comm_wait(qb), 0);
	assert_int_equal(titan_comm_irecv(s, b, N, TITAN_DTYPE_F32, prev, 4, "ring", &qa), 0);
	assert_int_equal(titan_comm_isend(s, in, N, TITAN_DTYPE_F32, next, 4, "ring", &qb), 0);
	assert_int_equal(titan_comm_wait(qb), 0);
	assert_int_equal(titan_comm_wait(qa), 0);
	SAME(a, b);
	fill(g, N, prev, 10);
	assert_memory_equal(b, g, N * sizeof(float));
	check_all_to_all_v(c, s);
}

/* The world with its default mesh (every rank in dp_shard: fsdp = world);
 * MPI starts under a launcher, else one process. */
static int world_up(void **state)
{
	struct titan_dist *d = NULL;
	struct titan_config cfg;
	struct titan_parallel_dims pd;
	int argc = 1, rc;
	char *args[] = {"test_comm", NULL}, **argv = args;

	if ((rc = titan_dist_init(&argc, &argv, &d)) < 0)
		return rc;
	titan_dist_set_timeout(d, 60);
	if ((rc = titan_config_init(&cfg)) == 0) {
		if ((rc = titan_parallel_dims_from_config(&pd, &cfg, d->size)) == 0)
			rc = titan_dist_mesh(d, &pd);
		titan_config_release(&cfg);
	}
	*state = d;
	return rc;
}

static int world_down(void **state)
{
	titan_dist_finalize(*state, true, 0);
	return 0;
}

/* One rank, or every rank of an mpiexec job (--ranks): the world
 * communicator and the mesh's fsdp one, each plain and staged. */
static void test_staged(void **state)
{
	struct titan_dist *d = *state;
	struct titan_backend be;
	struct titan_comm *s = NULL;

	spy_backend(&be);
	for (int k = 0; k < 2; k++) {
		struct titan_comm *c = d->comm[k ? TITAN_DIM_FSDP : TITAN_DIM_WORLD];

		assert_int_equal(titan_comm_staged_new(c, &be, &s), 0);
		check_staged(c, s);
		titan_comm_free(s);
	}
	titan_comm_free(NULL);
	titan_backend_release(&be);
}

/* FSDP over 2 ranks (dp.c) packs and unpacks with the backend's buffer
 * ops, at the right offsets: both ranks train on the same batch, so each
 * rank's shard of the reduce-scattered gradients is exactly twice the
 * rows of an unsharded model's gradients (x + x is exact), uneven shards
 * (61 embedding rows: 31 and 30) included. */
static void test_fsdp_packing(void **state)
{
	struct titan_dist *d = *state;
	struct titan_backend be;
	struct titan_model_dims md;
	struct titan_llama *full, *shard;
	struct titan_dp *dp;
	struct titan_llama_group_hooks gh;
	int32_t in[2 * 12], lab[2 * 12];
	double loss[2];
	int64_t valid;

	assert_int_equal(d->size, 2);
	spy_backend(&be);
	assert_int_equal(titan_model_flavor("debugmodel", &md), 0);
	md.dim = 32;
	md.n_layers = 2;
	md.n_heads = 4;
	md.n_kv_heads = 2;
	md.head_dim = 8;
	md.vocab_size = 61;
	md.multiple_of = 16;
	md.ffn_dim_multiplier = NAN;
	md.ffn_hidden = titan_ffn_hidden_dim(md.dim, md.multiple_of, md.ffn_dim_multiplier);
	for (int i = 0; i < 24; i++) {
		in[i] = (i * 17 + 3) % 61;
		lab[i] = (i * 29 + 11) % 61;
	}
	struct titan_llama_opts o = {.batch = 2, .seq = 12, .ce_chunk = 7};

	assert_int_equal(titan_llama_new(&md, &o, &be, NULL, &full), 0);
	o.shard_rank = d->rank;
	o.shard_degree = 2;
	assert_int_equal(titan_llama_new(&md, &o, &be, NULL, &shard), 0);
	assert_int_equal(titan_llama_init_weights(full, 42), 0);
	assert_int_equal(titan_llama_init_weights(shard, 42), 0);
	assert_int_equal(titan_llama_zero_grads(full), 0);
	assert_int_equal(titan_llama_step(full, in, lab, 1.0f, true, &loss[0], &valid), 0);

	struct titan_dp_opts dpo = {.shard = d->comm[TITAN_DIM_FSDP],
				    .replicate = d->comm[TITAN_DIM_DP_REPLICATE],
				    .reshard_after_forward = true, .be = &be};

	assert_int_equal(titan_dp_new(shard, &dpo, &dp), 0);
	titan_llama_set_group_hooks(shard, titan_dp_hooks(dp, &gh));
	n_copy = n_rows = n_memset = n_add = 0;
	assert_int_equal(titan_llama_zero_grads(shard), 0);
	assert_int_equal(titan_dp_begin_microbatch(dp, true, true), 0);
	assert_int_equal(titan_llama_step(shard, in, lab, 1.0f, true, &loss[1], &valid), 0);
	assert_int_equal(titan_dp_finish_grads(dp), 0);
	assert_true(loss[0] == loss[1]);
	assert_true(n_copy > 0 && n_rows > 0 && n_memset > 0 && n_add > 0);

	const struct titan_param_table *tf = titan_llama_table(full), *ts = titan_llama_table(shard);
	const float *gf = titan_llama_grads(full)->data, *gs = titan_llama_grads(shard)->data;

	assert_int_equal(tf->n, ts->n);
	for (int i = 0; i < ts->n; i++) {
		const struct titan_param *pf = &tf->params[i], *ps = &ts->params[i];

		for (int64_t k = 0; k < ps->local_numel; k++) {
			const float want = 2.0f * gf[pf->offset + ps->row0 * ps->shape[1] + k];

			if (memcmp(&gs[ps->offset + k], &want, sizeof(want)) != 0)
				fail_msg("%s rank %d element %lld: %.9g, want %.9g", ps->name, d->rank,
					 (long long)k, (double)gs[ps->offset + k], (double)want);
		}
	}
	titan_dp_free(dp);
	titan_llama_free(shard);
	titan_llama_free(full);
	titan_backend_release(&be);
}

/* The same under mpiexec -n 2: this program again with --ranks. */
static void test_two_ranks(void **state)
{
	(void)state;
	mpi_ranks_run(2);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_staged),
		cmocka_unit_test(test_two_ranks),
	};
	const struct CMUnitTest ranks[] = {
		cmocka_unit_test(test_staged),
		cmocka_unit_test(test_fsdp_packing),
	};

	if (argc > 1 && !strcmp(argv[1], "--ranks"))
		return cmocka_run_group_tests_name("test_comm --ranks", ranks, world_up, world_down);
	setenv("TITAN_MPI", "0", 1); /* one process, even if a launcher started it */
	return cmocka_run_group_tests(tests, world_up, world_down);
}
