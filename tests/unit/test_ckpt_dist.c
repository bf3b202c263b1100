/*
 * test_ckpt_dist.c — the multi-rank checkpoint save (lib/ckpt/dist.c) and
 * the loader state across DP degrees.
 *
 * Run plainly (cmocka, one process): titan_ckpt_save_dist and
 * titan_ckpt_async_save_dist without a communicator write what
 * titan_ckpt_save writes (every tensor, attribute and state read back
 * equal), a sharded table without a communicator is refused as
 * titan_ckpt_save refuses it, and a communicator without MPI (not
 * initialized, or not built in) is an error.
 *
 * Run as `test_ckpt_dist --mpi DIR` under mpiexec (any number of ranks;
 * MPI_Init_thread MULTIPLE here): a tiny Llama whose every value is a
 * function of (part, parameter, element), so each rank computes its own
 * rows, saved from
 *   - FSDP: sharded by the world size (uneven with 3 ranks), moments too,
 *     sync and async (the staged copy, not the arenas changed after the
 *     call); model-only with tiny I/O blocks (ranks then make different
 *     numbers of writes: the extra collective calls select none)
 *   - DDP: unsharded tables, rows written by rank 0 only (also with tiny
 *     blocks, model-only)
 *   - HSDP 2x2 (4 ranks; 2 replicas of 2 shards): rows by replica 0
 *   - model-only bfloat16
 *   - the gather-to-rank-0 path (serial HDF5 builds), forced
 * and reloaded by every rank at other layouts (unsharded, 2-way, and the
 * DDP file N-way), bit-equal to the expected values, the loader state
 * into a different number of DP entries.  Errors: ranks whose rows do not
 * add up are refused everywhere; a write failing on rank 1 (a test hook)
 * makes every rank return that error, leaves no step file and no
 * temporary file, and keeps the previous step (sync, async, gather).
 * Rank 0 also writes DIR/ref/step-1.h5 and step-3.h5 with titan_ckpt_save
 * (the unsharded state) for tests/bats/ckpt-dist.bats to compare with
 * h5py.  With TITAN_TEST_CKPT_FAIL_RANK=R set, it only saves step 1 and
 * then a step 2 that fails on rank R, and every rank prints its result.
 * Rank 0 prints a line per check; the exit status is 0 when every check
 * passed on every rank, 1 otherwise.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "scratch.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "titan/ckpt.h"
#include "titan/config.h"
#include "titan/core.h"
#include "titan/model.h"

#include "ckpt/ckpt_impl.h" /* the test hooks and I/O block sizes */

#if TITAN_HAVE_MPI
#include <mpi.h>
#endif

#define SEED 1234
#define CONFIG "training:\n  steps: 7\n"
#define MAX_DP 8

/* A tiny Llama from a config, as titan-train makes it: dim 32, 2 layers,
 * 4 heads (2 kv), ffn 96, vocab 40 (rows 40, 32, 16, 96: 14/14/12,
 * 11/11/10 and 6/6/4 in 3 shards). */
static void tiny_dims(struct titan_model_dims *d)
{
	static const char *const kv[][2] = {
		{"model.flavor", "custom"}, {"model.dim", "32"}, {"model.n_layers", "2"},
		{"model.n_heads", "4"}, {"model.n_kv_heads", "2"}, {"model.vocab_size", "40"},
		{"model.multiple_of", "32"},
	};
	struct titan_config c;

	TITAN_ASSERT(titan_config_init(&c) == 0);
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
		TITAN_ASSERT(titan_config_set(&c, kv[i][0], kv[i][1], "test") == 0);
	TITAN_ASSERT(titan_model_dims_from_config(&c, d) == 0);
	titan_config_release(&c);
}

struct fx {
	struct titan_param_table table;
	struct titan_param_arena p, m, v;
	struct titan_loader_state loader[MAX_DP];
	struct titan_ckpt_state st;
};

static const struct titan_loader_state loader0 = {3, 1ULL << 63, 1000, 2048, 1, UINT64_MAX};

/* Shard `rank` of `degree` with `dp` loader entries; `fill`: the expected
 * values (weights from init_weights under SEED, moments from streams 1
 * and 2 by global element, the training state), else zeros. */
static int fx_init(struct fx *f, int rank, int degree, int dp, bool fill)
{
	struct titan_model_dims d;
	struct titan_param_table_opts o;
	struct titan_rng r1, r2;
	int rc;

	memset(f, 0, sizeof(*f));
	tiny_dims(&d);
	titan_param_table_opts_default(&o);
	o.shard_rank = rank;
	o.shard_degree = degree;
	if ((rc = titan_param_table_init(&f->table, &d, &o)) < 0 ||
	    (rc = titan_param_arena_init(&f->p, &f->table, NULL, TITAN_MEM_PARAMS)) < 0 ||
	    (rc = titan_param_arena_init(&f->m, &f->table, NULL, TITAN_MEM_OPTIM)) < 0 ||
	    (rc = titan_param_arena_init(&f->v, &f->table, NULL, TITAN_MEM_OPTIM)) < 0)
		return rc;
	f->st.table = &f->table;
	f->st.params = f->p.data;
	f->st.exp_avg = f->m.data;
	f->st.exp_avg_sq = f->v.data;
	f->st.train.dp_world_size = dp;
	f->st.train.loader = f->loader;
	if (!fill)
		return 0;
	titan_model_init_params(&f->p, SEED);
	titan_rng_init(&r1, SEED, 1);
	titan_rng_init(&r2, SEED, 2);
	for (int i = 0; i < f->table.n; i++) {
		const struct titan_param *p = &f->table.params[i];
		uint64_t first = ((uint64_t)i << 32) + (uint64_t)(p->row0 * p->shape[1]);

		titan_rng_fill_normal(&r1, first, f->m.data + p->offset, (size_t)p->local_numel,
				      0.0f, 1e-3f);
		titan_rng_fill_uniform(&r2, first, f->v.data + p->offset, (size_t)p->local_numel,
				       0.0f, 1e-6f);
	}
	for (int r = 0; r < dp; r++)
		f->loader[r] = loader0;
	f->st.train.step = 7;
	f->st.train.ntokens_seen = 123456789012345LL;
	f->st.train.lr_last_epoch = 7;
	f->st.train.optim_step = 6;
	f->st.train.rng = (struct titan_ckpt_rng){0xdeadbeefcafebabeULL, 3, UINT64_MAX - 1};
	f->st.config_yaml = CONFIG;
	return 0;
}

static void fx_release(struct fx *f)
{
	titan_param_arena_release(&f->p);
	titan_param_arena_release(&f->m);
	titan_param_arena_release(&f->v);
	titan_param_table_release(&f->table);
}

/* Round the weights through a 16-bit type (what a model-only export
 * stores). */
static void fx_round(struct fx *f, enum titan_ckpt_dtype dt)
{
	size_t n = (size_t)f->table.arena_floats;
	uint16_t *h = malloc(n * 2);

	TITAN_ASSERT(h);
	titan_ckpt_cast(dt, f->p.data, h, n);
	titan_ckpt_uncast(dt, h, f->p.data, n);
	free(h);
}

/* Differences between a loaded state and the expected one: 0 when equal
 * (bits), else a description in `why`. */
static int fx_diff(const struct fx *got, const struct fx *want, bool model_only, char *why,
		   size_t n)
{
	const size_t bytes = (size_t)want->table.arena_floats * sizeof(float);

	if (memcmp(got->p.data, want->p.data, bytes))
		return snprintf(why, n, "weights differ"), 1;
	if (model_only)
		return 0;
	if (memcmp(got->m.data, want->m.data, bytes) || memcmp(got->v.data, want->v.data, bytes))
		return snprintf(why, n, "moments differ"), 1;
	for (int r = 0; r < got->st.train.dp_world_size; r++)
		if (memcmp(&got->loader[r], &loader0, sizeof(loader0)))
			return snprintf(why, n, "loader state %d differs", r), 1;
	if (got->st.train.step != 7 || got->st.train.ntokens_seen != 123456789012345LL ||
	    got->st.train.lr_last_epoch != 7 || got->st.train.optim_step != 6 ||
	    memcmp(&got->st.train.rng, &want->st.train.rng, sizeof(want->st.train.rng)))
		return snprintf(why, n, "training state differs"), 1;
	return 0;
}

/* Load `path` at shard (rank, degree) with `dp` loader entries and compare
 * with the expected values: 0, or 1 with `why`. */
static int reload(const char *path, int rank, int degree, int dp, unsigned flags,
		  enum titan_ckpt_dtype dt, char *why, size_t n)
{
	struct fx got, want;
	int bad;

	if (fx_init(&got, rank, degree, dp, false) < 0 || fx_init(&want, rank, degree, dp, true) < 0)
		return snprintf(why, n, "setup: %s", titan_errmsg()), 1;
	if (dt != TITAN_CKPT_FLOAT32)
		fx_round(&want, dt);
	if (titan_ckpt_load(path, &got.st, flags) < 0) {
		snprintf(why, n, "load: %s", titan_errmsg());
		bad = 1;
	} else {
		bad = fx_diff(&got, &want, flags & TITAN_CKPT_MODEL_ONLY, why, n);
	}
	fx_release(&got);
	fx_release(&want);
	return bad;
}

/* ------------------------------------------------- one process (cmocka) */

static int setup(void **state)
{
	(void)state;
	return scratch_setup("test_ckpt_dist");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_teardown();
}

#define NEED_HDF5() \
	do { if (!titan_has_feature("hdf5")) { skip(); } } while (0)

/* Every tensor (read whole), attribute and state of two files equal. */
static void assert_same_files(const char *a, const char *b)
{
	struct titan_ckpt_file *fa, *fb;
	const struct titan_ckpt_info *ia, *ib;

	assert_int_equal(titan_ckpt_open(a, &fa), 0);
	assert_int_equal(titan_ckpt_open(b, &fb), 0);
	ia = titan_ckpt_file_info(fa);
	ib = titan_ckpt_file_info(fb);
	assert_string_equal(ia->config_yaml, ib->config_yaml);
	assert_memory_equal(&ia->dims, &ib->dims, sizeof(ia->dims));
	assert_int_equal(ia->has_optimizer, ib->has_optimizer);
	assert_int_equal(ia->has_dataloader, ib->has_dataloader);
	assert_int_equal(ia->train.step, ib->train.step);
	assert_int_equal(ia->train.dp_world_size, ib->train.dp_world_size);
	if (ia->has_dataloader)
		assert_memory_equal(ia->train.loader, ib->train.loader,
				    (size_t)ia->train.dp_world_size * sizeof(*ia->train.loader));
	assert_memory_equal(&ia->train.rng, &ib->train.rng, sizeof(ia->train.rng));
	assert_int_equal(ia->n_tensors, ib->n_tensors);
	for (size_t i = 0; i < ia->n_tensors; i++) {
		const struct titan_ckpt_tensor_info *ta = &ia->tensors[i], *tb = &ib->tensors[i];
		float *x = malloc((size_t)ta->numel * 4), *y = malloc((size_t)tb->numel * 4);

		assert_string_equal(ta->name, tb->name); /* and the order */
		assert_int_equal(ta->part, tb->part);
		assert_int_equal(ta->dtype, tb->dtype);
		assert_memory_equal(ta->shape, tb->shape, sizeof(ta->shape));
		assert_int_equal(titan_ckpt_read(fa, ta, 0, ta->shape[0], x), 0);
		assert_int_equal(titan_ckpt_read(fb, tb, 0, tb->shape[0], y), 0);
		assert_memory_equal(x, y, (size_t)ta->numel * 4);
		free(x);
		free(y);
	}
	titan_ckpt_close(fa);
	titan_ckpt_close(fb);
}

static void test_no_comm_is_save(void **state)
{
	struct fx a;
	char *p1 = NULL, *p2 = NULL, why[256];

	(void)state;
	NEED_HDF5();
	assert_int_equal(fx_init(&a, 0, 1, 2, true), 0);
	assert_int_equal(titan_ckpt_save_dist(path_of("d"), 5, &a.st, 0, TITAN_CKPT_FLOAT32, NULL,
					      false, &p1), 0);
	assert_string_equal(p1, path_of("d/step-5.h5"));
	assert_int_equal(titan_ckpt_save(path_of("s"), 5, &a.st, 0, TITAN_CKPT_FLOAT32, &p2), 0);
	assert_same_files(p1, p2);
	if (reload(p1, 0, 1, 1, 0, TITAN_CKPT_FLOAT32, why, sizeof(why)))
		fail_msg("%s", why);
	free(p1);
	free(p2);
	/* model-only bfloat16 */
	assert_int_equal(titan_ckpt_save_dist(path_of("d"), 6, &a.st, TITAN_CKPT_MODEL_ONLY,
					      TITAN_CKPT_BFLOAT16, NULL, true, NULL), 0);
	assert_int_equal(titan_ckpt_save(path_of("s"), 6, &a.st, TITAN_CKPT_MODEL_ONLY,
					 TITAN_CKPT_BFLOAT16, NULL), 0);
	assert_same_files(path_of("d/step-6.h5"), path_of("s/step-6.h5"));
	/* the same errors */
	assert_int_equal(titan_ckpt_save_dist(path_of("d"), 7, &a.st, 0, TITAN_CKPT_BFLOAT16, NULL,
					      true, NULL), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "only in a model-only checkpoint"));
	fx_release(&a);
	assert_int_equal(fx_init(&a, 1, 3, 1, true), 0);
	assert_int_equal(titan_ckpt_save_dist(path_of("d"), 7, &a.st, 0, TITAN_CKPT_FLOAT32, NULL,
					      true, NULL), TITAN_E_UNSUPPORTED);
	assert_non_null(strstr(titan_errmsg(), "shard 1 of 3"));
	fx_release(&a);
}

static void test_async_no_comm(void **state)
{
	struct fx a;
	struct titan_ckpt_async *as;
	struct titan_ckpt_async_result res;

	(void)state;
	NEED_HDF5();
	assert_int_equal(fx_init(&a, 0, 1, 1, true), 0);
	assert_int_equal(titan_ckpt_async_new(NULL, &as), 0);
	assert_int_equal(titan_ckpt_async_save_dist(as, path_of("a"), 1, &a.st, 0,
						    TITAN_CKPT_FLOAT32, 0, NULL, true), 0);
	memset(a.p.data, 0x7f, (size_t)a.table.arena_floats * 4); /* staged already */
	assert_int_equal(titan_ckpt_async_wait(as, &res), 0);
	assert_string_equal(res.path, path_of("a/step-1.h5"));
	free(res.path);
	titan_ckpt_async_free(as);
	fx_release(&a);
	assert_int_equal(fx_init(&a, 0, 1, 1, true), 0);
	assert_int_equal(titan_ckpt_save(path_of("s"), 1, &a.st, 0, TITAN_CKPT_FLOAT32, NULL), 0);
	assert_same_files(path_of("a/step-1.h5"), path_of("s/step-1.h5"));
	fx_release(&a);
}

/* A communicator in a process without MPI running (or a build without
 * MPI): an error, nothing written. */
static void test_comm_without_mpi(void **state)
{
#if TITAN_HAVE_MPI
	MPI_Comm world = MPI_COMM_WORLD;
	const int want = TITAN_HAVE_HDF5 ? TITAN_E_INVALID : TITAN_E_UNSUPPORTED;
#else
	int world = 0;
	const int want = TITAN_E_UNSUPPORTED;
#endif
	struct titan_ckpt_async *as;
	struct fx a;

	(void)state;
	assert_int_equal(fx_init(&a, 0, 1, 1, true), 0);
	assert_int_equal(titan_ckpt_save_dist(path_of("m"), 1, &a.st, 0, TITAN_CKPT_FLOAT32, &world,
					      true, NULL), want);
	assert_int_equal(titan_ckpt_async_new(NULL, &as), 0);
	assert_int_equal(titan_ckpt_async_save_dist(as, path_of("m"), 1, &a.st, 0,
						    TITAN_CKPT_FLOAT32, 0, &world, true),
			 TITAN_HAVE_MPI ? TITAN_E_INVALID : TITAN_E_UNSUPPORTED);
	assert_false(titan_ckpt_async_busy(as));
	titan_ckpt_async_free(as);
	assert_int_equal(access(path_of("m"), F_OK), -1);
	fx_release(&a);
}

/* ------------------------------------------------------ many ranks (MPI) */

#if TITAN_HAVE_MPI && TITAN_HAVE_HDF5

static int rank, world;
static MPI_Comm comm;
static int nfail, total_fail;
static char outdir[512];

static const char *at(const char *fmt, ...) TITAN_PRINTF(1, 2);
static const char *at(const char *fmt, ...)
{
	static char buf[4][800];
	static int k;
	char name[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", outdir, name);
	return buf[k];
}

#define CHECK(cond, ...) \
	do { \
		if (!(cond)) { \
			fprintf(stderr, "rank %d: FAIL line %d: ", rank, __LINE__); \
			fprintf(stderr, __VA_ARGS__); \
			fprintf(stderr, " [last error: %s]\n", titan_errmsg()); \
			nfail++; \
		} \
	} while (0)

/* End of a check: every rank's failures summed; rank 0 reports. */
static void report(const char *what)
{
	int all = 0;

	static double t0;
	double t = MPI_Wtime();

	MPI_Allreduce(&nfail, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("%s: %s (%d ranks, %.1f s)\n", all ? "FAILED" : "ok", what, world,
		       t0 ? t - t0 : 0.0);
	t0 = MPI_Wtime();
	fflush(stdout);
	total_fail += all;
	nfail = 0;
}

/* The files of `folder` whose names contain `sub` (rank 0). */
static int count_names(const char *folder, const char *sub)
{
	DIR *d = opendir(folder);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += strstr(e->d_name, sub) != NULL;
	if (d)
		closedir(d);
	return n;
}

static void expect_reload(const char *path, int rk, int degree, int dp, unsigned flags,
			  enum titan_ckpt_dtype dt, const char *layout)
{
	char why[1200];

	CHECK(!reload(path, rk, degree, dp, flags, dt, why, sizeof(why)), "%s at %s: %s", path,
	      layout, why);
}

/* Save from shard (srank, sdeg) of every rank, rows written when `writes`;
 * then every rank reloads unsharded, 2-way and `world`-way. */
static void save_and_reload(const char *sub, int step, int srank, int sdeg, bool writes,
			    unsigned flags, enum titan_ckpt_dtype dt, bool async)
{
	struct fx a;
	char *path = NULL;
	int rc;

	CHECK(fx_init(&a, srank, sdeg, world, true) == 0, "setup");
	if (!async) {
		rc = titan_ckpt_save_dist(at("%s", sub), step, &a.st, flags, dt, &comm, writes, &path);
		CHECK(rc == 0, "save_dist %s", sub);
	} else {
		struct titan_ckpt_async *as = NULL;
		struct titan_ckpt_async_result res;

		CHECK(titan_ckpt_async_new(NULL, &as) == 0, "async_new");
		rc = titan_ckpt_async_save_dist(as, at("%s", sub), step, &a.st, flags, dt, 0, &comm,
						writes);
		CHECK(rc == 0, "async_save_dist %s", sub);
		/* training goes on: the saver wrote its staged copy */
		memset(a.p.data, 0x7f, (size_t)a.table.arena_floats * 4);
		memset(a.m.data, 0x7f, (size_t)a.table.arena_floats * 4);
		a.loader[0].position = 999;
		CHECK(titan_ckpt_async_wait(as, &res) == 0, "async wait %s", sub);
		CHECK(res.step == step, "async result step %lld", (long long)res.step);
		path = res.path;
		titan_ckpt_async_free(as);
	}
	CHECK(path && !strcmp(path, at("%s/step-%d.h5", sub, step)), "path_out %s",
	      path ? path : "(null)");
	free(path);
	fx_release(&a);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		CHECK(count_names(at("%s", sub), ".tmp.") == 0, "temporary files left in %s", sub);
	path = (char *)at("%s/step-%d.h5", sub, step);
	expect_reload(path, 0, 1, 1, flags, dt, "unsharded, 1 DP rank");
	expect_reload(path, rank % 2, 2, 2, flags, dt, "2-way");
	expect_reload(path, rank, world, world, flags, dt, "world-way");
	expect_reload(path, world - 1 - rank, world, world + 1, flags, dt, "world-way reversed");
}

/* Rank 1 fails writing the second model tensor: every rank returns that
 * error; no step file, no temporary file; the previous step stays. */
static void failing_save(const char *sub, int good, int bad, bool async)
{
	struct fx a;
	char *path = NULL;
	int rc;

	CHECK(fx_init(&a, rank, world, world, true) == 0, "setup");
	titan_ckpt_dist_fail_rank_ = 1;
	if (!async) {
		rc = titan_ckpt_save_dist(at("%s", sub), bad, &a.st, 0, TITAN_CKPT_FLOAT32, &comm,
					  true, &path);
	} else {
		struct titan_ckpt_async *as = NULL;

		CHECK(titan_ckpt_async_new(NULL, &as) == 0, "async_new");
		rc = titan_ckpt_async_save_dist(as, at("%s", sub), bad, &a.st, 0, TITAN_CKPT_FLOAT32,
						0, &comm, true);
		CHECK(rc == 0, "async_save_dist (the failure comes at the wait)");
		rc = titan_ckpt_async_wait(as, NULL);
		titan_ckpt_async_free(as);
	}
	titan_ckpt_dist_fail_rank_ = -1;
	CHECK(rc == TITAN_E_IO && strstr(titan_errmsg(), "rank 1: ") &&
	      strstr(titan_errmsg(), "injected"), "step %d: got %d", bad, rc);
	CHECK(path == NULL, "path_out set on failure");
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) {
		CHECK(count_names(at("%s", sub), ".tmp.") == 0, "temporary file left in %s", sub);
		CHECK(access(at("%s/step-%d.h5", sub, bad), F_OK) != 0, "step-%d.h5 exists", bad);
	}
	expect_reload(at("%s/step-%d.h5", sub, good), rank, world, world, 0, TITAN_CKPT_FLOAT32,
		      "previous step after a failure");
	fx_release(&a);
}

static void test_errors(void)
{
	struct fx a;
	int rc;

	/* rows that do not add up: every rank writes its unsharded table */
	CHECK(fx_init(&a, 0, 1, world, true) == 0, "setup");
	if (world > 1) {
		rc = titan_ckpt_save_dist(at("cover"), 1, &a.st, 0, TITAN_CKPT_FLOAT32, &comm, true,
					  NULL);
		CHECK(rc == TITAN_E_INVALID && strstr(titan_errmsg(), "exactly once"), "got %d", rc);
	}
	/* an invalid state on one rank only */
	if (rank == world - 1)
		a.st.exp_avg = NULL;
	rc = titan_ckpt_save_dist(at("cover"), 2, &a.st, 0, TITAN_CKPT_FLOAT32, &comm, rank == 0,
				  NULL);
	CHECK(rc == TITAN_E_INVALID && strstr(titan_errmsg(), "AdamW moments"), "got %d", rc);
	fx_release(&a);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		CHECK(count_names(at("cover"), "step-") == 0, "files in cover/");
	report("refused everywhere: rows not covered once, a bad state on one rank; nothing written");
	if (world < 2)
		return;
	save_and_reload("fail", 4, rank, world, true, 0, TITAN_CKPT_FLOAT32, false);
	failing_save("fail", 4, 5, false);
	report("a write failing on rank 1: every rank returns it, no step-5.h5, no temporary file, "
	       "step-4.h5 intact");
	failing_save("fail", 4, 6, true);
	report("the same in an async save (the error at every rank's wait)");
	titan_ckpt_dist_gather_ = true;
	failing_save("fail", 4, 7, false);
	titan_ckpt_dist_gather_ = false;
	report("the same on the gather-to-rank-0 path");
}

/* TITAN_TEST_CKPT_FAIL_RANK=R: step 1, then a step 2 failing on rank R;
 * every rank prints its result. */
static int only_fail(int fail_rank)
{
	struct fx a;
	int rc1, rc2, ok;

	fx_init(&a, rank, world, world, true);
	rc1 = titan_ckpt_save_dist(outdir, 1, &a.st, 0, TITAN_CKPT_FLOAT32, &comm, true, NULL);
	titan_ckpt_dist_fail_rank_ = fail_rank;
	rc2 = titan_ckpt_save_dist(outdir, 2, &a.st, 0, TITAN_CKPT_FLOAT32, &comm, true, NULL);
	printf("rank %d: step 1: %d; step 2: %d %s\n", rank, rc1, rc2, rc2 ? titan_errmsg() : "");
	fflush(stdout);
	fx_release(&a);
	ok = rc1 == 0 && rc2 == TITAN_E_IO;
	MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	return ok ? 0 : 1;
}

/* The single-process reference files (rank 0, titan_ckpt_save). */
static void reference(void)
{
	struct fx a;

	if (rank == 0) {
		CHECK(fx_init(&a, 0, 1, world, true) == 0, "setup");
		CHECK(titan_ckpt_save(at("ref"), 1, &a.st, 0, TITAN_CKPT_FLOAT32, NULL) == 0, "ref");
		CHECK(titan_ckpt_save(at("ref"), 3, &a.st, TITAN_CKPT_MODEL_ONLY,
				      TITAN_CKPT_BFLOAT16, NULL) == 0, "ref bf16");
		fx_release(&a);
	}
	report("reference files ref/step-1.h5, ref/step-3.h5 (titan_ckpt_save, one process)");
}

static int mpi_main(int argc, char **argv)
{
	const char *fail_env = getenv("TITAN_TEST_CKPT_FAIL_RANK");
	int provided, rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
		fprintf(stderr, "test_ckpt_dist: MPI_Init_thread failed\n");
		return 1;
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	titan_set_rank(rank);
	if (argc < 3 || world > MAX_DP - 1 || provided < MPI_THREAD_MULTIPLE) {
		if (rank == 0)
			fprintf(stderr, "usage: mpiexec -n N test_ckpt_dist --mpi DIR (N <= %d; needs "
				"MPI_THREAD_MULTIPLE: got %d)\n", MAX_DP - 1, provided);
		MPI_Finalize();
		return 1;
	}
	snprintf(outdir, sizeof(outdir), "%s", argv[2]);
	/* the caller's communicator: a duplicate of the world, as the trainer's */
	MPI_Comm_dup(MPI_COMM_WORLD, &comm);
	if (fail_env) {
		rc = only_fail(atoi(fail_env));
		MPI_Comm_free(&comm);
		MPI_Finalize();
		return rc;
	}
	reference();
	save_and_reload("fsdp", 1, rank, world, true, 0, TITAN_CKPT_FLOAT32, false);
	report("FSDP (sharded by the world size) sync save; reloaded unsharded, 2-way, "
	       "world-way, loader into other DP degrees");
	save_and_reload("fsdp", 2, rank, world, true, 0, TITAN_CKPT_FLOAT32, true);
	report("FSDP async save (the staged copy) fsdp/step-2.h5");
	/* 8 rows of 32 floats a write (2 of w2's 96): with 3 ranks w2's 11/11/10
	 * rows take 6/6/5 writes; under DDP rank 0 alone makes them all */
	titan_ckpt_block_bytes_ = 1024;
	save_and_reload("small", 1, rank, world, true, TITAN_CKPT_MODEL_ONLY, TITAN_CKPT_FLOAT32,
			false);
	save_and_reload("small", 2, 0, 1, rank == 0, TITAN_CKPT_MODEL_ONLY, TITAN_CKPT_FLOAT32,
			false);
	titan_ckpt_block_bytes_ = (int64_t)64 << 20;
	report("FSDP and DDP model-only with tiny I/O blocks (ranks make different numbers of "
	       "writes: the extra collective calls select none)");
	save_and_reload("ddp", 1, 0, 1, rank == 0, 0, TITAN_CKPT_FLOAT32, false);
	report("DDP (unsharded tables, rows from rank 0 only)");
	if (world == 4) {
		save_and_reload("hsdp", 1, rank % 2, 2, rank / 2 == 0, 0, TITAN_CKPT_FLOAT32, false);
		report("HSDP 2x2 (2 shards, rows from replica 0)");
	} else if (rank == 0) {
		printf("skip: HSDP 2x2 needs 4 ranks\n");
	}
	save_and_reload("bf16", 3, rank, world, true, TITAN_CKPT_MODEL_ONLY, TITAN_CKPT_BFLOAT16,
			false);
	report("FSDP model-only bfloat16 export bf16/step-3.h5");
	titan_ckpt_dist_gather_ = true;
	save_and_reload("gather", 1, rank, world, true, 0, TITAN_CKPT_FLOAT32, false);
	save_and_reload("gather", 2, rank, world, true, 0, TITAN_CKPT_FLOAT32, true);
	save_and_reload("gather", 3, rank, world, true, TITAN_CKPT_MODEL_ONLY, TITAN_CKPT_BFLOAT16,
			false);
	titan_ckpt_dist_gather_ = false;
	report("gather-to-rank-0 path (serial HDF5 builds): sync, async, bfloat16");
	test_errors();
	MPI_Comm_free(&comm); /* frees the cached duplicate too */
	MPI_Finalize();
	if (rank == 0)
		printf("%s\n", total_fail ? "FAILED" : "all checks passed");
	return total_fail ? 1 : 0;
}
#endif

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_no_comm_is_save, setup, teardown),
		cmocka_unit_test_setup_teardown(test_async_no_comm, setup, teardown),
		cmocka_unit_test_setup_teardown(test_comm_without_mpi, setup, teardown),
	};

	if (argc > 1 && !strcmp(argv[1], "--mpi")) {
#if TITAN_HAVE_MPI && TITAN_HAVE_HDF5
		return mpi_main(argc, argv);
#else
		printf("skip: built without %s\n", TITAN_HAVE_MPI ? "HDF5" : "MPI");
		return 0;
#endif
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
