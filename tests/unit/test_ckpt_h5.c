/*
 * test_ckpt_h5.c — the HDF5 checkpoint (lib/ckpt/h5.c, h5read.c,
 * checkpoint.c): save/load round trip bit-exact with every scalar and the
 * AdamW moments, model-only and bf16/fp16 checkpoints read back as the
 * rounded values, a dim-0 shard load, atomic commit (a rename that fails
 * leaves nothing; leftover temporary files are ignored and pruned), the
 * folder functions, and each kind of bad checkpoint giving an error that
 * names the file and the object.  Float rounding is in test_ckpt_hf.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "scratch.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "titan/ckpt.h"
#include "titan/core.h"
#include "titan/model.h"

#if TITAN_HAVE_HDF5
#include <hdf5.h>

#include "ckpt/ckpt_impl.h" /* the I/O block sizes */
#endif

static int setup(void **state)
{
	(void)state;
	return scratch_setup("test_ckpt_h5");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_teardown();
}

static int count_files(const char *folder)
{
	DIR *d = opendir(folder);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	if (d)
		closedir(d);
	return n;
}

static void touch(const char *p)
{
	FILE *f = fopen(p, "w");

	assert_non_null(f);
	fputs("x", f);
	fclose(f);
}

/* A tiny Llama: dim 32, 2 layers, 4 heads (2 kv), ffn 48, vocab 40. */
static void tiny_dims(struct titan_model_dims *d, bool tied)
{
	assert_int_equal(titan_model_flavor("debugmodel", d), 0);
	snprintf(d->flavor, sizeof(d->flavor), "custom");
	d->dim = 32;
	d->n_layers = 2;
	d->n_heads = 4;
	d->n_kv_heads = 2;
	d->head_dim = 8;
	d->ffn_hidden = 48;
	d->multiple_of = 48;
	d->vocab_size = 40;
	d->tied = tied;
}

struct fx {
	struct titan_param_table table;
	struct titan_param_arena p, m, v;
	struct titan_loader_state loader[2];
	struct titan_ckpt_state st;
};

static void fx_init(struct fx *f, const struct titan_model_dims *d, uint64_t seed, int shard_rank,
		    int shard_degree)
{
	struct titan_param_table_opts o;
	struct titan_rng r;

	memset(f, 0, sizeof(*f));
	titan_param_table_opts_default(&o);
	o.shard_rank = shard_rank;
	o.shard_degree = shard_degree;
	assert_int_equal(titan_param_table_init(&f->table, d, &o), 0);
	assert_int_equal(titan_param_arena_init(&f->p, &f->table, NULL, TITAN_MEM_PARAMS), 0);
	assert_int_equal(titan_param_arena_init(&f->m, &f->table, NULL, TITAN_MEM_OPTIM), 0);
	assert_int_equal(titan_param_arena_init(&f->v, &f->table, NULL, TITAN_MEM_OPTIM), 0);
	titan_model_init_params(&f->p, seed);
	titan_rng_init(&r, seed, 7);
	for (int i = 0; i < f->table.n; i++) {
		const struct titan_param *p = &f->table.params[i];

		titan_rng_fill_normal(&r, (uint64_t)i << 20, f->m.data + p->offset,
				      (size_t)p->local_numel, 0.0f, 1e-3f);
		titan_rng_fill_uniform(&r, ((uint64_t)i << 20) + 99999, f->v.data + p->offset,
				       (size_t)p->local_numel, 0.0f, 1e-6f);
	}
	f->st.table = &f->table;
	f->st.params = f->p.data;
	f->st.exp_avg = f->m.data;
	f->st.exp_avg_sq = f->v.data;
	f->st.train.dp_world_size = 2;
	f->st.train.loader = f->loader;
}

static void fx_release(struct fx *f)
{
	titan_param_arena_release(&f->p);
	titan_param_arena_release(&f->m);
	titan_param_arena_release(&f->v);
	titan_param_table_release(&f->table);
}

static void fill_state(struct titan_ckpt_state *st)
{
	st->train.step = 7;
	st->train.ntokens_seen = 123456789012345LL;
	st->train.lr_last_epoch = 7;
	st->train.optim_step = 6;
	/* the loader state is global: every data-parallel rank holds the same */
	st->train.loader[0] = (struct titan_loader_state){3, 1ULL << 63, 1000, 2048, 1, UINT64_MAX};
	st->train.loader[1] = st->train.loader[0];
	st->train.rng = (struct titan_ckpt_rng){0xdeadbeefcafebabeULL, 3, UINT64_MAX - 1};
	st->config_yaml = "training:\n  steps: 7\n";
}

#define NEED_HDF5() \
	do { if (!titan_has_feature("hdf5")) { skip(); } } while (0)

/* ------------------------------------------------------------ round trip */

static void test_round_trip(void **state)
{
	struct titan_model_dims d;
	struct fx a, b;
	const struct titan_ckpt_info *in;
	struct titan_ckpt_file *f;
	char *path = NULL;
	float special[6] = {-0.0f, INFINITY, -INFINITY, 0x1p-149f, 0x1.fffffep127f, 0};
	uint32_t qnan = 0x7fc12345u;

	(void)state;
	NEED_HDF5();
	tiny_dims(&d, false);
	fx_init(&a, &d, 1, 0, 1);
	fx_init(&b, &d, 2, 0, 1);
	memcpy(&special[5], &qnan, 4); /* a NaN payload must survive too */
	memcpy(a.p.data + a.table.params[3].offset, special, sizeof(special));
	fill_state(&a.st);
	assert_int_equal(titan_ckpt_save(path_of("ck/sub"), 7, &a.st, 0, TITAN_CKPT_FLOAT32, &path), 0);
	assert_string_equal(path, path_of("ck/sub/step-7.h5"));
	free(path);
	assert_int_equal(count_files(path_of("ck/sub")), 1); /* no temporary file left */

	assert_int_equal(titan_ckpt_load(path_of("ck/sub/step-7.h5"), &b.st, 0), 0);
	assert_memory_equal(a.p.data, b.p.data, (size_t)a.table.arena_floats * 4);
	assert_memory_equal(a.m.data, b.m.data, (size_t)a.table.arena_floats * 4);
	assert_memory_equal(a.v.data, b.v.data, (size_t)a.table.arena_floats * 4);
	assert_int_equal(b.st.train.step, 7);
	assert_int_equal(b.st.train.ntokens_seen, 123456789012345LL);
	assert_int_equal(b.st.train.lr_last_epoch, 7);
	assert_int_equal(b.st.train.optim_step, 6);
	assert_memory_equal(a.loader, b.loader, sizeof(a.loader));
	assert_memory_equal(&a.st.train.rng, &b.st.train.rng, sizeof(a.st.train.rng));

	/* what the reader reports */
	assert_int_equal(titan_ckpt_open(path_of("ck/sub/step-7.h5"), &f), 0);
	in = titan_ckpt_file_info(f);
	assert_int_equal(in->format_version, TITAN_CKPT_VERSION);
	assert_string_equal(in->config_yaml, "training:\n  steps: 7\n");
	assert_string_equal(in->titan_version, titan_version());
	assert_true(in->has_optimizer && in->has_train_state && in->has_lr_scheduler &&
		    in->has_dataloader && in->has_rng);
	assert_int_equal(in->n_tensors, 3 * (size_t)a.table.n);
	assert_string_equal(in->tensors[0].name, "tok_embeddings.weight"); /* creation order */
	assert_int_equal(in->tensors[0].part, TITAN_CKPT_MODEL);
	assert_int_equal(in->tensors[a.table.n].part, TITAN_CKPT_EXP_AVG);
	assert_int_equal(in->tensors[0].shape[0], 40);
	assert_int_equal(in->tensors[0].storage_bytes, 40 * 32 * 4);
	assert_int_equal(in->dims.dim, 32);
	assert_int_equal(in->dims.ffn_hidden, 48);
	assert_int_equal(in->dims.n_kv_heads, 2);
	assert_false(in->dims.tied);
	assert_true(in->dims.rope_scaling);
	assert_true(isnan(in->dims.ffn_dim_multiplier));
	titan_ckpt_close(f);

	/* the same state saved twice gives the same bytes (no timestamps) */
	assert_int_equal(titan_ckpt_write(path_of("again.h5"), &a.st, 0, TITAN_CKPT_FLOAT32), 0);
	{
		FILE *x = fopen(path_of("ck/sub/step-7.h5"), "rb"), *y = fopen(path_of("again.h5"), "rb");
		int cx, cy;

		assert_non_null(x);
		assert_non_null(y);
		do {
			cx = fgetc(x);
			cy = fgetc(y);
			assert_int_equal(cx, cy);
		} while (cx != EOF);
		fclose(x);
		fclose(y);
	}
	fx_release(&a);
	fx_release(&b);
}

/* exclusions leave the caller's values alone; a large config attribute */
static void test_exclude_and_big_config(void **state)
{
	struct titan_model_dims d;
	struct fx a, b;
	struct titan_strlist names;
	char *items[] = {"optimizer", "dataloader", "rng"}, *bad[] = {"model"};
	char *big = malloc(200001);
	unsigned flags = 0;
	struct titan_ckpt_file *f;

	(void)state;
	NEED_HDF5();
	tiny_dims(&d, true);
	fx_init(&a, &d, 1, 0, 1);
	fx_init(&b, &d, 2, 0, 1);
	fill_state(&a.st);
	memset(big, 'y', 200000); /* past HDF5's 64 KiB compact attribute limit */
	big[200000] = 0;
	a.st.config_yaml = big;
	assert_int_equal(titan_ckpt_save(dir, 3, &a.st, 0, TITAN_CKPT_FLOAT32, NULL), 0);
	names = (struct titan_strlist){3, items};
	assert_int_equal(titan_ckpt_exclude_parse(&names, &flags), 0);
	assert_int_equal(flags, TITAN_CKPT_EXCLUDE_OPTIMIZER | TITAN_CKPT_EXCLUDE_DATALOADER |
				       TITAN_CKPT_EXCLUDE_RNG);
	names = (struct titan_strlist){1, bad};
	assert_int_equal(titan_ckpt_exclude_parse(&names, &flags), TITAN_E_INVALID);
	assert_non_null(strstr(titan_errmsg(), "'model'"));

	b.st.exp_avg = b.st.exp_avg_sq = NULL; /* not needed when excluded */
	b.st.train.loader = NULL;
	b.st.train.optim_step = -5;
	b.st.train.rng.seed = 99;
	assert_int_equal(titan_ckpt_load(path_of("step-3.h5"), &b.st, TITAN_CKPT_EXCLUDE_OPTIMIZER |
					 TITAN_CKPT_EXCLUDE_DATALOADER | TITAN_CKPT_EXCLUDE_RNG), 0);
	assert_memory_equal(a.p.data, b.p.data, (size_t)a.table.arena_floats * 4);
	assert_int_equal(b.st.train.optim_step, -5);
	assert_int_equal(b.st.train.rng.seed, 99);
	assert_int_equal(b.st.train.step, 7);
	assert_int_equal(b.st.train.lr_last_epoch, 7);
	assert_int_equal(titan_ckpt_open(path_of("step-3.h5"), &f), 0);
	assert_int_equal(strlen(titan_ckpt_file_info(f)->config_yaml), 200000);
	assert_true(titan_ckpt_file_info(f)->dims.tied);
	titan_ckpt_close(f);
	free(big);
	fx_release(&a);
	fx_release(&b);
}

/* model-only checkpoints in each dtype read back as the rounded values */
static void test_model_only_dtypes(void **state)
{
	struct titan_model_dims d;
	struct fx a, b;

	(void)state;
	NEED_HDF5();
	tiny_dims(&d, false);
	fx_init(&a, &d, 5, 0, 1);
	fx_init(&b, &d, 6, 0, 1);
	for (int dt = TITAN_CKPT_FLOAT32; dt <= TITAN_CKPT_FLOAT16; dt++) {
		struct titan_ckpt_file *f;

		assert_int_equal(titan_ckpt_save(dir, dt, &a.st, TITAN_CKPT_MODEL_ONLY,
						 (enum titan_ckpt_dtype)dt, NULL), 0);
		assert_int_equal(titan_ckpt_load(path_of(dt == 0 ? "step-0.h5" : dt == 1 ? "step-1.h5" :
							 "step-2.h5"), &b.st, TITAN_CKPT_MODEL_ONLY), 0);
		for (int i = 0; i < a.table.n; i++) {
			const struct titan_param *p = &a.table.params[i];

			for (int64_t k = 0; k < p->numel; k++) {
				float x = a.p.data[p->offset + k], want = x;

				if (dt == TITAN_CKPT_BFLOAT16)
					want = titan_bf16_to_f32(titan_f32_to_bf16(x));
				else if (dt == TITAN_CKPT_FLOAT16)
					want = titan_f16_to_f32(titan_f32_to_f16(x));
				assert_memory_equal(&want, &b.p.data[p->offset + k], 4);
			}
		}
		assert_int_equal(titan_ckpt_open(path_of(dt == 0 ? "step-0.h5" : dt == 1 ? "step-1.h5" :
							 "step-2.h5"), &f), 0);
		assert_false(titan_ckpt_file_info(f)->has_optimizer);
		assert_false(titan_ckpt_file_info(f)->has_train_state);
		assert_int_equal(titan_ckpt_file_info(f)->tensors[0].dtype, dt);
		assert_int_equal(titan_ckpt_file_info(f)->tensors[0].storage_bytes,
				 40 * 32 * (dt ? 2 : 4));
		titan_ckpt_close(f);
		/* a full load of a model-only checkpoint says what to do */
		assert_int_equal(titan_ckpt_load(path_of("step-0.h5"), &b.st, 0), TITAN_E_INVALID);
		assert_non_null(strstr(titan_errmsg(), "model-only"));
	}
	/* a full checkpoint stays float32 */
	fill_state(&a.st);
	assert_int_equal(titan_ckpt_save(dir, 9, &a.st, 0, TITAN_CKPT_BFLOAT16, NULL), TITAN_E_INVALID);
	assert_int_equal(count_files(dir), 3);
	fx_release(&a);
	fx_release(&b);
}

/* a table holding rows of a dim-0 shard loads just those rows */
static void test_shard_load(void **state)
{
	struct titan_model_dims d;
	struct fx a, s;

	(void)state;
	NEED_HDF5();
	tiny_dims(&d, false);
	fx_init(&a, &d, 11, 0, 1);
	fill_state(&a.st);
	assert_int_equal(titan_ckpt_save(dir, 1, &a.st, TITAN_CKPT_MODEL_ONLY, TITAN_CKPT_BFLOAT16,
					 NULL), 0);
	assert_int_equal(titan_ckpt_save(dir, 2, &a.st, 0, TITAN_CKPT_FLOAT32, NULL), 0);
	fx_init(&s, &d, 12, 1, 3);
	assert_int_equal(titan_ckpt_save(dir, 3, &s.st, 0, TITAN_CKPT_FLOAT32, NULL),
			 TITAN_E_UNSUPPORTED);
	assert_int_equal(titan_ckpt_load(path_of("step-2.h5"), &s.st, 0), 0);
	for (int i = 0; i < s.table.n; i++) {
		const struct titan_param *p = &s.table.params[i];
		const float *whole = a.p.data + a.table.params[i].offset + p->row0 * p->shape[1];

		assert_memory_equal(whole, s.p.data + p->offset, (size_t)p->local_numel * 4);
		assert_memory_equal(a.v.data + a.table.params[i].offset + p->row0 * p->shape[1],
				    s.v.data + p->offset, (size_t)p->local_numel * 4);
	}
	assert_int_equal(titan_ckpt_load(path_of("step-1.h5"), &s.st, TITAN_CKPT_MODEL_ONLY), 0);
	for (int i = 0; i < s.table.n; i++) {
		const struct titan_param *p = &s.table.params[i];

		for (int64_t k = 0; k < p->local_numel; k++) {
			float x = a.p.data[a.table.params[i].offset + p->row0 * p->shape[1] + k];
			float want = titan_bf16_to_f32(titan_f32_to_bf16(x));

			assert_memory_equal(&want, &s.p.data[p->offset + k], 4);
		}
	}
	fx_release(&a);
	fx_release(&s);
}

/* ------------------------------------------------------------ atomicity */

static void test_atomic(void **state)
{
	struct titan_model_dims d;
	struct fx a;
	int64_t *steps, latest;
	size_t n;
	int removed;

	(void)state;
	NEED_HDF5();
	tiny_dims(&d, false);
	fx_init(&a, &d, 1, 0, 1);
	fill_state(&a.st);
	/* the final name is taken by a non-empty folder: the rename fails */
	assert_int_equal(mkdir(path_of("step-4.h5"), 0777), 0);
	touch(path_of("step-4.h5/x"));
	assert_int_equal(titan_ckpt_save(dir, 4, &a.st, 0, TITAN_CKPT_FLOAT32, NULL), TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "step-4.h5"));
	assert_int_equal(count_files(dir), 1); /* just the folder: no temporary file */
	assert_int_equal(titan_ckpt_list(dir, &steps, &n), 0);
	assert_int_equal(n, 0); /* a folder is not a checkpoint */
	free(steps);
	/* a write into a folder that cannot be created */
	touch(path_of("file"));
	assert_int_equal(titan_ckpt_save(path_of("file/ck"), 1, &a.st, 0, TITAN_CKPT_FLOAT32, NULL),
			 TITAN_E_IO);
	assert_non_null(strstr(titan_errmsg(), "file/ck"));

	/* leftovers of a crashed save are not checkpoints */
	assert_int_equal(titan_ckpt_save(dir, 2, &a.st, 0, TITAN_CKPT_FLOAT32, NULL), 0);
	assert_int_equal(titan_ckpt_save(dir, 5, &a.st, TITAN_CKPT_MODEL_ONLY, TITAN_CKPT_FLOAT32,
					 NULL), 0);
	touch(path_of("step-3.h5.tmp.a1b2c3"));
	touch(path_of("step-9.h5.tmp.zzzzzz"));
	touch(path_of("step-05.h5"));      /* not canonical */
	touch(path_of("step-6.h5.bak"));
	touch(path_of("step--1.h5"));
	touch(path_of("step-.h5"));
	assert_int_equal(titan_ckpt_list(dir, &steps, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(steps[0], 2);
	assert_int_equal(steps[1], 5);
	free(steps);
	assert_int_equal(titan_ckpt_latest(dir, &latest), 0);
	assert_int_equal(latest, 5);
	/* prune removes the old temporary file, not the one of a newer step
	 * (a save in progress), and keeps both checkpoints with k = 2 */
	assert_int_equal(titan_ckpt_prune(dir, 2, &removed), 0);
	assert_int_equal(removed, 1);
	assert_int_equal(access(path_of("step-3.h5.tmp.a1b2c3"), F_OK), -1);
	assert_int_equal(access(path_of("step-9.h5.tmp.zzzzzz"), F_OK), 0);
	assert_int_equal(access(path_of("step-2.h5"), F_OK), 0);
	/* the leftover does not disturb loading the newest */
	assert_int_equal(titan_ckpt_load(path_of("step-2.h5"), &a.st, 0), 0);
	fx_release(&a);
}

/* A process killed in the middle of a save (SIGKILL: no cleanup at all)
 * leaves the previous step loadable and newest; the leftover is pruned. */
static void test_killed_mid_write(void **state)
{
	struct titan_model_dims d;
	struct fx a;
	int64_t latest;
	int status, removed;
	pid_t pid;

	(void)state;
	NEED_HDF5();
	tiny_dims(&d, false);
	fx_init(&a, &d, 1, 0, 1);
	fill_state(&a.st);
	assert_int_equal(titan_ckpt_save(dir, 10, &a.st, 0, TITAN_CKPT_FLOAT32, NULL), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) { /* the child dies with half a checkpoint on disk */
		struct titan_ckpt_writer *w;
		const struct titan_param *p = &a.table.params[0];

		if (titan_ckpt_writer_open(path_of("step-20.h5"), &d, "", &w) == 0 &&
		    titan_ckpt_writer_tensor(w, TITAN_CKPT_MODEL, p->name, p->ndim, p->shape,
					     a.p.data, TITAN_CKPT_FLOAT32) == 0)
			raise(SIGKILL);
		_exit(3);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	assert_int_equal(count_files(dir), 2); /* step-10.h5 and the temporary file */
	assert_int_equal(titan_ckpt_latest(dir, &latest), 0);
	assert_int_equal(latest, 10);
	assert_int_equal(titan_ckpt_load(path_of("step-10.h5"), &a.st, 0), 0);
	/* the temporary file is of a newer step: a save could still be running */
	assert_int_equal(titan_ckpt_prune(dir, 1, &removed), 0);
	assert_int_equal(removed, 0);
	/* once step 20 is complete, the leftover goes */
	assert_int_equal(titan_ckpt_save(dir, 20, &a.st, 0, TITAN_CKPT_FLOAT32, NULL), 0);
	assert_int_equal(titan_ckpt_prune(dir, 1, &removed), 0);
	assert_int_equal(removed, 2); /* step-10.h5 and the leftover */
	assert_int_equal(count_files(dir), 1);
	fx_release(&a);
}

static void test_folders(void **state)
{
	int64_t *steps, latest;
	size_t n;
	int removed;
	const int64_t made[] = {10, 2, 300, 40, 5};

	(void)state;
	assert_int_equal(titan_ckpt_list(path_of("missing"), &steps, &n), 0);
	assert_int_equal(n, 0);
	free(steps);
	assert_int_equal(titan_ckpt_latest(path_of("missing"), &latest), 0);
	assert_int_equal(latest, -1);
	for (int i = 0; i < 5; i++) {
		char name[32];

		snprintf(name, sizeof(name), "step-%lld.h5", (long long)made[i]);
		touch(path_of(name));
	}
	assert_int_equal(titan_ckpt_list(dir, &steps, &n), 0);
	assert_int_equal(n, 5);
	for (size_t i = 1; i < n; i++)
		assert_true(steps[i - 1] < steps[i]);
	free(steps);
	assert_int_equal(titan_ckpt_prune(dir, -1, NULL), TITAN_E_INVALID);
	assert_int_equal(titan_ckpt_prune(dir, 0, &removed), 0); /* 0 keeps all */
	assert_int_equal(removed, 0);
	assert_int_equal(titan_ckpt_prune(dir, 3, &removed), 0);
	assert_int_equal(removed, 2);
	assert_int_equal(titan_ckpt_list(dir, &steps, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(steps[0], 10);
	assert_int_equal(steps[2], 300);
	free(steps);
	assert_int_equal(titan_ckpt_prune(dir, 1, &removed), 0); /* the newest always stays */
	assert_int_equal(titan_ckpt_latest(dir, &latest), 0);
	assert_int_equal(latest, 300);
	assert_int_equal(count_files(dir), 1);
	assert_int_equal(titan_ckpt_prune(dir, 1, &removed), 0);
	assert_int_equal(removed, 0);
	assert_int_equal(count_files(dir), 1);
}

/* A resume from step 2 of steps 1-5 moves 3-5 into one superseded-*
 * subfolder, deleting nothing; temporaries older than a time are removed,
 * other names never. */
static void test_supersede_and_clean(void **state)
{
	int64_t *steps, *moved;
	char *sub, p[4200], name[32];
	size_t n;
	int removed;

	(void)state;
	for (int i = 1; i <= 5; i++) {
		snprintf(name, sizeof(name), "step-%d.h5", i);
		touch(path_of(name));
	}
	assert_int_equal(titan_ckpt_supersede(dir, 5, &sub, &moved, &n), 0);
	assert_int_equal(n, 0);
	assert_null(sub);
	free(moved);
	assert_int_equal(titan_ckpt_supersede(dir, 2, &sub, &moved, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(moved[0], 3);
	assert_int_equal(moved[2], 5);
	assert_non_null(sub);
	assert_non_null(strstr(sub, "/superseded-"));
	assert_int_equal(count_files(sub), 3);
	snprintf(p, sizeof(p), "%s/step-5.h5", sub);
	assert_int_equal(access(p, F_OK), 0);
	free(sub);
	free(moved);
	assert_int_equal(titan_ckpt_list(dir, &steps, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(steps[1], 2);
	free(steps);
	assert_int_equal(count_files(dir), 3); /* 1, 2 and the subfolder */

	touch(path_of("step-3.h5.tmp.AbC123"));
	touch(path_of("step-3.h5.tmp."));
	touch(path_of("other.tmp.AbC123"));
	assert_int_equal(titan_ckpt_clean_tmp(dir, 0, &removed), 0); /* all newer than that */
	assert_int_equal(removed, 0);
	assert_int_equal(titan_ckpt_clean_tmp(dir, INT64_MAX, &removed), 0);
	assert_int_equal(removed, 1);
	assert_int_equal(access(path_of("step-3.h5.tmp.AbC123"), F_OK), -1);
	assert_int_equal(count_files(dir), 5);
}

#if TITAN_HAVE_HDF5
/* titan_ckpt_size_bound_ bounds the file titan_ckpt_save writes (the room
 * a multi-rank save reserves first), and not by much. */
static void test_size_bound(void **state)
{
	static const struct {
		bool tied, full;
		enum titan_ckpt_dtype dt;
	} cases[] = {
		{false, true, TITAN_CKPT_FLOAT32},
		{true, true, TITAN_CKPT_FLOAT32},
		{false, false, TITAN_CKPT_BFLOAT16},
		{true, false, TITAN_CKPT_FLOAT16},
	};

	(void)state;
	NEED_HDF5();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct titan_model_dims d;
		struct fx f;
		struct stat sb;
		char *path = NULL;
		int64_t bound;

		tiny_dims(&d, cases[i].tied);
		d.dim = 128;
		d.head_dim = 32;
		d.ffn_hidden = 384;
		d.vocab_size = 1000;
		fx_init(&f, &d, 1, 0, 1);
		fill_state(&f.st);
		assert_int_equal(titan_ckpt_save(dir, (int64_t)i, &f.st,
						 cases[i].full ? 0 : TITAN_CKPT_MODEL_ONLY, cases[i].dt,
						 &path), 0);
		assert_int_equal(stat(path, &sb), 0);
		bound = titan_ckpt_size_bound_(&f.table, cases[i].full, cases[i].dt,
					       f.st.config_yaml, f.st.train.dp_world_size);
		assert_true(sb.st_size <= bound);
		assert_true(bound <= sb.st_size + sb.st_size / 2 + (256 << 10));
		free(path);
		fx_release(&f);
	}
}
#endif

/* ------------------------------------------------------------ async saves */

/* The saver copies the state before returning: arenas changed right after
 * the call do not reach the file.  Two saves in a row (the second waits for
 * the first), pruning in the writer thread, and an error of the writer
 * (the folder is a file) coming back from the wait with the step. */
static void test_async(void **state)
{
	struct titan_model_dims d;
	struct fx a, b, keep;
	struct titan_ckpt_async *as;
	struct titan_ckpt_async_result res;

	(void)state;
	NEED_HDF5();
	tiny_dims(&d, false);
	fx_init(&a, &d, 1, 0, 1);
	fx_init(&keep, &d, 1, 0, 1);
	fx_init(&b, &d, 2, 0, 1);
	fill_state(&a.st);
	fill_state(&keep.st);
	assert_int_equal(titan_ckpt_async_new(NULL, &as), 0);
	assert_false(titan_ckpt_async_busy(as));
	assert_int_equal(titan_ckpt_async_wait(as, &res), 0); /* nothing in flight */
	assert_int_equal(res.step, -1);
	assert_int_equal(titan_ckpt_async_save(as, path_of("ck"), 1, &a.st, 0, TITAN_CKPT_FLOAT32, 0), 0);
	assert_true(titan_ckpt_async_busy(as));
	assert_int_equal(titan_ckpt_async_save(as, path_of("ck"), 2, &a.st, 0, TITAN_CKPT_FLOAT32, 1), 0);
	/* the trainer goes on: scribble over everything the saver was given */
	memset(a.p.data, 0x7f, (size_t)a.table.arena_floats * 4);
	memset(a.m.data, 0x7f, (size_t)a.table.arena_floats * 4);
	memset(a.v.data, 0x7f, (size_t)a.table.arena_floats * 4);
	a.loader[0].position = 999;
	assert_int_equal(titan_ckpt_async_wait(as, &res), 0);
	assert_int_equal(res.step, 2);
	assert_string_equal(res.path, path_of("ck/step-2.h5"));
	assert_true(res.write_s >= 0.0);
	assert_int_equal(res.removed, 1); /* keep_latest_k 1: step-1 pruned */
	free(res.path);
	assert_false(titan_ckpt_async_busy(as));
	assert_int_equal(count_files(path_of("ck")), 1);
	assert_int_equal(titan_ckpt_load(path_of("ck/step-2.h5"), &b.st, 0), 0);
	assert_memory_equal(keep.p.data, b.p.data, (size_t)a.table.arena_floats * 4);
	assert_memory_equal(keep.m.data, b.m.data, (size_t)a.table.arena_floats * 4);
	assert_memory_equal(keep.v.data, b.v.data, (size_t)a.table.arena_floats * 4);
	assert_memory_equal(keep.loader, b.loader, sizeof(keep.loader));

	/* a write that fails: the error surfaces at the wait, naming the step */
	touch(path_of("notadir"));
	assert_int_equal(titan_ckpt_async_save(as, path_of("notadir"), 3, &keep.st, 0,
					       TITAN_CKPT_FLOAT32, 0), 0);
	assert_true(titan_ckpt_async_wait(as, NULL) < 0);
	assert_non_null(strstr(titan_errmsg(), "checkpoint step 3"));
	assert_non_null(strstr(titan_errmsg(), "notadir"));
	/* freeing with a save in flight waits for it */
	assert_int_equal(titan_ckpt_async_save(as, path_of("ck"), 4, &keep.st, 0, TITAN_CKPT_FLOAT32, 0), 0);
	titan_ckpt_async_free(as);
	assert_int_equal(count_files(path_of("ck")), 2);
	titan_ckpt_async_free(NULL);
	fx_release(&a);
	fx_release(&b);
	fx_release(&keep);
}

/* ------------------------------------------------------------ bad files */

#if TITAN_HAVE_HDF5
/* Rewrite a root attribute of an existing file. */
static void set_root_i64(const char *path, const char *name, int64_t v)
{
	hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), a;

	assert_true(f >= 0);
	a = H5Aopen(f, name, H5P_DEFAULT);
	assert_true(a >= 0);
	assert_true(H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0);
	H5Aclose(a);
	H5Fclose(f);
}

static void delete_object(const char *path, const char *obj, bool attr)
{
	hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);

	assert_true(f >= 0);
	assert_true((attr ? H5Adelete(f, obj) : H5Ldelete(f, obj, H5P_DEFAULT)) >= 0);
	H5Fclose(f);
}
#endif

static void copy_file(const char *from, const char *to, long truncate_at)
{
	FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
	long n = 0;
	int c;

	assert_non_null(a);
	assert_non_null(b);
	while ((c = fgetc(a)) != EOF && (truncate_at < 0 || n < truncate_at)) {
		fputc(c, b);
		n++;
	}
	fclose(a);
	fclose(b);
}

static void expect_load_error(const char *file, struct titan_ckpt_state *st, unsigned flags,
			      int code, const char *s1, const char *s2)
{
	int rc = titan_ckpt_load(path_of(file), st, flags);

	if (rc != code || !strstr(titan_errmsg(), s1) || (s2 && !strstr(titan_errmsg(), s2)))
		fail_msg("%s: got %d '%s', want %d with '%s' '%s'", file, rc, titan_errmsg(), code,
			 s1, s2 ? s2 : "");
}

static void test_bad_files(void **state)
{
	struct titan_model_dims d, wide, tied;
	struct fx a, b, w, t;

	(void)state;
	NEED_HDF5();
	tiny_dims(&d, false);
	fx_init(&a, &d, 1, 0, 1);
	fill_state(&a.st);
	assert_int_equal(titan_ckpt_write(path_of("good.h5"), &a.st, 0, TITAN_CKPT_FLOAT32), 0);
	fx_init(&b, &d, 2, 0, 1);

	/* the architecture fields first (they name the config key), then
	 * shapes and names against the table */
	wide = d;
	wide.ffn_hidden = 64;
	fx_init(&w, &wide, 3, 0, 1);
	expect_load_error("good.h5", &w.st, 0, TITAN_E_INVALID,
			  "good.h5' holds another model than the config's: ffn_hidden 48 there, "
			  "64 in the config (model.multiple_of, model.ffn_dim_multiplier)", NULL);
	tied = d;
	tied.tied = true;
	fx_init(&t, &tied, 4, 0, 1);
	expect_load_error("good.h5", &t.st, 0, TITAN_E_INVALID, "tie_word_embeddings false there, "
			  "true in the config", NULL);
	assert_int_equal(titan_ckpt_write(path_of("tied.h5"), &t.st, TITAN_CKPT_MODEL_ONLY,
					  TITAN_CKPT_FLOAT32), 0);
	expect_load_error("tied.h5", &b.st, TITAN_CKPT_MODEL_ONLY, TITAN_E_INVALID,
			  "tie_word_embeddings true there, false in the config", NULL);
	/* same shapes, another model: 4 heads of 8 under 2 heads of 16 */
	{
		struct titan_model_dims h = d;
		struct fx hx;

		h.n_heads = d.n_heads * 2;
		h.n_kv_heads = d.n_kv_heads * 2;
		h.head_dim = d.head_dim / 2;
		h.norm_eps = d.norm_eps * 2;
		fx_init(&hx, &h, 5, 0, 1);
		expect_load_error("good.h5", &hx.st, 0, TITAN_E_INVALID, "n_heads", "norm_eps");
		fx_release(&hx);
	}
	/* the data loader state is global: saved by 2 ranks, it loads into 1
	 * or 3 (every entry dp_rank_0's); saved entries that differ are a
	 * damaged file */
	{
		struct titan_loader_state three[3];

		memset(three, 0, sizeof(three));
		b.st.train.dp_world_size = 1;
		assert_int_equal(titan_ckpt_load(path_of("good.h5"), &b.st, 0), 0);
		assert_memory_equal(&b.loader[0], &a.loader[0], sizeof(a.loader[0]));
		b.st.train.loader = three;
		b.st.train.dp_world_size = 3;
		assert_int_equal(titan_ckpt_load(path_of("good.h5"), &b.st, 0), 0);
		for (int r = 0; r < 3; r++)
			assert_memory_equal(&three[r], &a.loader[0], sizeof(a.loader[0]));
		b.st.train.loader = b.loader;
		b.st.train.dp_world_size = 2;
		a.loader[1].position = 5;
		assert_int_equal(titan_ckpt_write(path_of("differ.h5"), &a.st, 0, TITAN_CKPT_FLOAT32), 0);
		a.loader[1] = a.loader[0];
		expect_load_error("differ.h5", &b.st, 0, TITAN_E_FORMAT, "differ.h5': "
				  "/dataloader/dp_rank_1 differs from dp_rank_0", NULL);
		assert_int_equal(titan_ckpt_load(path_of("differ.h5"), &b.st,
						 TITAN_CKPT_EXCLUDE_DATALOADER), 0);
	}

#if TITAN_HAVE_HDF5
	/* newer format version */
	copy_file(path_of("good.h5"), path_of("newer.h5"), -1);
	set_root_i64(path_of("newer.h5"), "format_version", TITAN_CKPT_VERSION + 1);
	expect_load_error("newer.h5", &b.st, 0, TITAN_E_FORMAT, "newer.h5': format version 2 is "
			  "newer than this titan reads (1)", NULL);
	/* a missing tensor, a missing moment, a missing state group */
	copy_file(path_of("good.h5"), path_of("miss.h5"), -1);
	delete_object(path_of("miss.h5"), "model/layers.1.attention.wk.weight", false);
	expect_load_error("miss.h5", &b.st, 0, TITAN_E_INVALID,
			  "miss.h5': model/layers.1.attention.wk.weight is missing", NULL);
	copy_file(path_of("good.h5"), path_of("miss2.h5"), -1);
	delete_object(path_of("miss2.h5"), "optimizer/exp_avg_sq/norm.weight", false);
	expect_load_error("miss2.h5", &b.st, 0, TITAN_E_INVALID,
			  "optimizer/exp_avg_sq/norm.weight is missing", NULL);
	assert_int_equal(titan_ckpt_load(path_of("miss2.h5"), &b.st, TITAN_CKPT_EXCLUDE_OPTIMIZER), 0);
	copy_file(path_of("good.h5"), path_of("miss3.h5"), -1);
	delete_object(path_of("miss3.h5"), "lr_scheduler", false);
	expect_load_error("miss3.h5", &b.st, 0, TITAN_E_INVALID, "has no /lr_scheduler", NULL);
	copy_file(path_of("good.h5"), path_of("miss4.h5"), -1);
	delete_object(path_of("miss4.h5"), "n_heads", true);
	expect_load_error("miss4.h5", &b.st, 0, TITAN_E_FORMAT, "no attribute 'n_heads'", NULL);
	/* an HDF5 file that is not a checkpoint */
	{
		hid_t f = H5Fcreate(path_of("plain.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);

		H5Fclose(f);
	}
	expect_load_error("plain.h5", &b.st, 0, TITAN_E_FORMAT, "plain.h5' is not a titan "
			  "checkpoint", NULL);
	/* attributes of two values where titan reads one: H5Aread wrote both,
	 * the second over the pointer after format_version in the file info (a
	 * crash when it was freed) or past a string pointer on the stack (found
	 * by tests/fuzz/fuzz_ckpt: tests/fuzz/regress/ckpt/array-attribute) */
	for (int k = 0; k < 3; k++) {
		static const char *const names[] = {"format_version", "titan_version", "norm_eps"};
		hsize_t two = 2;
		const char *strs[2] = {"0.1", "0.2"};
		int64_t ints[2] = {1, 1};
		double dbls[2] = {1e-5, 1e-5};
		hid_t hf, hs, ht, ha;
		char file[32];

		snprintf(file, sizeof(file), "two%d.h5", k);
		copy_file(path_of("good.h5"), path_of(file), -1);
		delete_object(path_of(file), names[k], true);
		hf = H5Fopen(path_of(file), H5F_ACC_RDWR, H5P_DEFAULT);
		hs = H5Screate_simple(1, &two, NULL);
		ht = k == 1 ? H5Tcopy(H5T_C_S1) : H5Tcopy(k ? H5T_IEEE_F64LE : H5T_STD_I64LE);
		if (k == 1)
			H5Tset_size(ht, H5T_VARIABLE);
		ha = H5Acreate2(hf, names[k], ht, hs, H5P_DEFAULT, H5P_DEFAULT);
		assert_true(hf >= 0 && ha >= 0);
		assert_true(H5Awrite(ha, k == 1 ? ht : k ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64,
				     k == 1 ? (const void *)strs : k ? (const void *)dbls :
				     (const void *)ints) >= 0);
		H5Aclose(ha);
		H5Tclose(ht);
		H5Sclose(hs);
		H5Fclose(hf);
		expect_load_error(file, &b.st, 0, TITAN_E_FORMAT, names[k], "is not a single value");
	}
	/* a chunked dataset of 2^40 x 2^40 floats (HDF5 stores no chunk up
	 * front): its element count overflowed int64 and wrapped to 0, so the
	 * file opened (found by tests/fuzz/fuzz_ckpt) */
	{
		hsize_t dims[2] = {(hsize_t)1 << 40, (hsize_t)1 << 40}, chunk[2] = {16, 16};
		hid_t f, s, p, ds;

		copy_file(path_of("good.h5"), path_of("huge.h5"), -1);
		f = H5Fopen(path_of("huge.h5"), H5F_ACC_RDWR, H5P_DEFAULT);
		s = H5Screate_simple(2, dims, NULL);
		p = H5Pcreate(H5P_DATASET_CREATE);
		assert_true(f >= 0 && s >= 0 && p >= 0 && H5Pset_chunk(p, 2, chunk) >= 0);
		ds = H5Dcreate2(f, "model/huge", H5T_IEEE_F32LE, s, H5P_DEFAULT, p, H5P_DEFAULT);
		assert_true(ds >= 0);
		H5Dclose(ds);
		H5Pclose(p);
		H5Sclose(s);
		H5Fclose(f);
		expect_load_error("huge.h5", &b.st, 0, TITAN_E_FORMAT, "huge.h5': model/huge: "
				  "dimension 1 of 1099511627776 makes more elements than a file can "
				  "hold", NULL);
	}
#endif
	/* not HDF5, missing, truncated */
	touch(path_of("text.h5"));
	expect_load_error("text.h5", &b.st, 0, TITAN_E_FORMAT, "text.h5' is not an HDF5 file", NULL);
	expect_load_error("nope.h5", &b.st, 0, TITAN_E_IO, "nope.h5': No such file", NULL);
	{
		struct stat sb;

		assert_int_equal(stat(path_of("good.h5"), &sb), 0);
		for (long cut = 0; cut < 8; cut++) {
			long at = sb.st_size * (cut + 1) / 9;
			int rc;

			copy_file(path_of("good.h5"), path_of("cut.h5"), at);
			rc = titan_ckpt_load(path_of("cut.h5"), &b.st, 0);
			if (rc != TITAN_E_FORMAT || !strstr(titan_errmsg(), "cut.h5"))
				fail_msg("truncated at %ld: %d %s", at, rc, titan_errmsg());
		}
	}
	fx_release(&a);
	fx_release(&b);
	fx_release(&w);
	fx_release(&t);
}

#if TITAN_HAVE_HDF5
static void expect_open_error(const char *file, const char *s1)
{
	struct titan_ckpt_file *f = NULL;
	int rc = titan_ckpt_open(path_of(file), &f);

	if (rc != TITAN_E_FORMAT || f || !strstr(titan_errmsg(), file) ||
	    !strstr(titan_errmsg(), s1))
		fail_msg("%s: got %d '%s', want %d with '%s'", file, rc, titan_errmsg(),
			 TITAN_E_FORMAT, s1);
	titan_ckpt_close(f);
}

/* good.h5 copied to `file` with model/norm.weight ([32] float32) replaced
 * through dcpl `p` (or a link when `link` is 's' soft, 'e' external) */
static void replace_norm(const char *file, hid_t p, char link)
{
	float x[32] = {1.0f};
	hsize_t n = 32, unlim = H5S_UNLIMITED;
	hid_t f, s, d;

	copy_file(path_of("good.h5"), path_of(file), -1);
	delete_object(path_of(file), "model/norm.weight", false);
	f = H5Fopen(path_of(file), H5F_ACC_RDWR, H5P_DEFAULT);
	assert_true(f >= 0);
	if (link == 's') {
		assert_true(H5Lcreate_soft("/model/layers.0.ffn_norm.weight", f, "model/norm.weight",
					   H5P_DEFAULT, H5P_DEFAULT) >= 0);
	} else if (link == 'e') {
		assert_true(H5Lcreate_external(path_of("good.h5"), "/model/norm.weight", f,
					       "model/norm.weight", H5P_DEFAULT, H5P_DEFAULT) >= 0);
	} else {
		s = H5Screate_simple(1, &n, link == 'u' ? &unlim : NULL);
		d = H5Dcreate2(f, "model/norm.weight", H5T_IEEE_F32LE, s, H5P_DEFAULT, p,
			       H5P_DEFAULT);
		assert_true(s >= 0 && d >= 0);
		if (H5Pget_layout(p) != H5D_VIRTUAL)
			assert_true(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0);
		H5Dclose(d);
		H5Sclose(s);
	}
	H5Fclose(f);
}

static void set_attr_f64(const char *file, const char *obj, const char *name, double v)
{
	hid_t f = H5Fopen(path_of(file), H5F_ACC_RDWR, H5P_DEFAULT), a;

	assert_true(f >= 0);
	a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
	assert_true(a >= 0);
	assert_true(H5Awrite(a, H5T_NATIVE_DOUBLE, &v) >= 0);
	H5Aclose(a);
	H5Fclose(f);
}
#endif

/* Checkpoints that would make titan read other files or inflate data, or
 * carry values no model or run has, are refused at open (issue 21). */
static void test_hostile(void **state)
{
#if TITAN_HAVE_HDF5
	struct titan_model_dims d;
	struct fx a;
	hsize_t n = 32, big = 64;
	hid_t p;
	FILE *sec;

	(void)state;
	tiny_dims(&d, false);
	fx_init(&a, &d, 1, 0, 1);
	fill_state(&a.st);
	assert_int_equal(titan_ckpt_write(path_of("good.h5"), &a.st, 0, TITAN_CKPT_FLOAT32), 0);
	assert_non_null(sec = fopen(path_of("secret.bin"), "wb"));
	for (int i = 0; i < 128; i++)
		fputc('A' + i % 26, sec);
	fclose(sec);

	p = H5Pcreate(H5P_DATASET_CREATE);
	assert_true(H5Pset_external(p, path_of("secret.bin"), 0, 128) >= 0);
	replace_norm("ext.h5", p, 0);
	H5Pclose(p);
	expect_open_error("ext.h5", "/model/norm.weight has external storage");
	replace_norm("soft.h5", -1, 's');
	expect_open_error("soft.h5", "/model/norm.weight is a soft link");
	replace_norm("elink.h5", -1, 'e');
	expect_open_error("elink.h5", "/model/norm.weight is an external link");
	p = H5Pcreate(H5P_DATASET_CREATE);
	{
		hid_t vs = H5Screate_simple(1, &n, NULL);

		assert_true(H5Pset_virtual(p, vs, path_of("good.h5"), "/model/norm.weight", vs) >= 0);
		H5Sclose(vs);
	}
	replace_norm("vds.h5", p, 0);
	H5Pclose(p);
	expect_open_error("vds.h5", "/model/norm.weight is a virtual dataset");
	p = H5Pcreate(H5P_DATASET_CREATE);
	assert_true(H5Pset_chunk(p, 1, &n) >= 0 && H5Pset_deflate(p, 6) >= 0);
	replace_norm("gzip.h5", p, 0);
	H5Pclose(p);
	expect_open_error("gzip.h5", "/model/norm.weight is stored through HDF5 filter 1 (deflate");
	p = H5Pcreate(H5P_DATASET_CREATE);
	assert_true(H5Pset_layout(p, H5D_COMPACT) >= 0);
	replace_norm("compact.h5", p, 0);
	H5Pclose(p);
	expect_open_error("compact.h5", "/model/norm.weight has compact layout");
	p = H5Pcreate(H5P_DATASET_CREATE);
	assert_true(H5Pset_chunk(p, 1, &big) >= 0);
	replace_norm("bigchunk.h5", p, 'u');
	H5Pclose(p);
	expect_open_error("bigchunk.h5", "/model/norm.weight: chunk dimension 0 of 64 exceeds "
			  "the dataset's 32");
	/* a chunked dataset without filters, as h5py may write one, still loads */
	p = H5Pcreate(H5P_DATASET_CREATE);
	assert_true(H5Pset_chunk(p, 1, &n) >= 0);
	replace_norm("chunked.h5", p, 0);
	H5Pclose(p);
	{
		struct titan_ckpt_file *f = NULL;

		assert_int_equal(titan_ckpt_open(path_of("chunked.h5"), &f), 0);
		titan_ckpt_close(f);
	}

	/* values no run or model has */
	copy_file(path_of("good.h5"), path_of("step.h5"), -1);
	{
		/* deleted and made again: HDF5 1.10 cannot rewrite an attribute
		 * in the dense storage of a creation-ordered group */
		hid_t f = H5Fopen(path_of("step.h5"), H5F_ACC_RDWR, H5P_DEFAULT);
		hid_t s = H5Screate(H5S_SCALAR), at;
		int64_t v = -5;

		assert_true(f >= 0 && s >= 0);
		assert_true(H5Adelete_by_name(f, "train_state", "step", H5P_DEFAULT) >= 0);
		at = H5Acreate_by_name(f, "train_state", "step", H5T_STD_I64LE, s, H5P_DEFAULT,
				       H5P_DEFAULT, H5P_DEFAULT);
		assert_true(at >= 0 && H5Awrite(at, H5T_NATIVE_INT64, &v) >= 0);
		H5Aclose(at);
		H5Sclose(s);
		H5Fclose(f);
	}
	expect_open_error("step.h5", "/train_state: attribute 'step' is -5 (must not be negative)");
	copy_file(path_of("good.h5"), path_of("eps.h5"), -1);
	set_attr_f64("eps.h5", "/", "norm_eps", NAN);
	expect_open_error("eps.h5", "norm_eps nan: must be a finite number above 0");
	copy_file(path_of("good.h5"), path_of("theta.h5"), -1);
	set_attr_f64("theta.h5", "/", "rope_theta", INFINITY);
	expect_open_error("theta.h5", "rope_theta inf: must be a finite number above 0");
	copy_file(path_of("good.h5"), path_of("fac.h5"), -1);
	set_attr_f64("fac.h5", "/", "rope_scaling_factor", -8);
	expect_open_error("fac.h5", "rope_scaling_factor -8: must be a finite number above 0");
	copy_file(path_of("good.h5"), path_of("heads.h5"), -1);
	set_root_i64(path_of("heads.h5"), "n_heads", 0);
	expect_open_error("heads.h5", "n_heads 0: must be in [1, ");
	/* ffn_dim_multiplier NaN is "none": good.h5 has it so, and opens */
	fx_release(&a);
#else
	(void)state;
	skip();
#endif
}

static void test_config_for_dims(void **state)
{
	struct titan_model_dims d, back;
	struct titan_config c;
	char *y;

	(void)state;
	/* a flavor's dims give the flavor */
	assert_int_equal(titan_model_flavor("8B", &d), 0);
	d.rope_scaling = false;
	y = titan_ckpt_config_for_dims(&d);
	assert_non_null(y);
	assert_int_equal(titan_config_init(&c), 0);
	assert_int_equal(titan_config_load_string(&c, y, strlen(y), "gen"), 0);
	assert_string_equal(c.model.flavor, "8B");
	assert_false(c.model.rope_scaling);
	titan_config_release(&c);
	free(y);
	/* custom dims come back through multiple_of / ffn_dim_multiplier */
	const int64_t ffns[] = {48, 96, 20, 85};
	for (int i = 0; i < 4; i++) {
		tiny_dims(&d, i & 1);
		d.ffn_hidden = ffns[i];
		d.norm_eps = 1e-6;
		d.rope_theta = 10000;
		y = titan_ckpt_config_for_dims(&d);
		assert_non_null(y);
		assert_int_equal(titan_config_init(&c), 0);
		assert_int_equal(titan_config_load_string(&c, y, strlen(y), "gen"), 0);
		assert_int_equal(titan_model_dims_from_config(&c, &back), 0);
		assert_int_equal(back.ffn_hidden, ffns[i]);
		assert_int_equal(back.dim, 32);
		assert_int_equal(back.n_kv_heads, 2);
		assert_int_equal(back.vocab_size, 40);
		assert_int_equal(back.tied, i & 1);
		assert_true(back.norm_eps == 1e-6 && back.rope_theta == 10000);
		titan_config_release(&c);
		free(y);
	}
}

/* The same tests with I/O blocks of 1024 floats / 1000 16-bit elements, so
 * that tensors span several blocks with a partial last one. */
#if TITAN_HAVE_HDF5
static int small_blocks(void **state)
{
	titan_ckpt_block_bytes_ = 4096;
	titan_ckpt_block_elems_ = 1000;
	return setup(state);
}

static int default_blocks(void **state)
{
	titan_ckpt_block_bytes_ = (int64_t)64 << 20;
	titan_ckpt_block_elems_ = (int64_t)1 << 20;
	return teardown(state);
}
#else
#define small_blocks setup
#define default_blocks teardown
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exclude_and_big_config, setup, teardown),
		cmocka_unit_test_setup_teardown(test_model_only_dtypes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shard_load, setup, teardown),
		cmocka_unit_test_setup_teardown(test_atomic, setup, teardown),
		cmocka_unit_test_setup_teardown(test_killed_mid_write, setup, teardown),
		cmocka_unit_test_setup_teardown(test_folders, setup, teardown),
		cmocka_unit_test_setup_teardown(test_supersede_and_clean, setup, teardown),
#if TITAN_HAVE_HDF5
		cmocka_unit_test_setup_teardown(test_size_bound, setup, teardown),
#endif
		cmocka_unit_test_setup_teardown(test_async, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile, setup, teardown),
		cmocka_unit_test(test_config_for_dims),
		cmocka_unit_test_setup_teardown(test_round_trip, small_blocks, default_blocks),
		cmocka_unit_test_setup_teardown(test_model_only_dtypes, small_blocks, default_blocks),
		cmocka_unit_test_setup_teardown(test_shard_load, small_blocks, default_blocks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
