/*
 * async.c — checkpoint.async_mode = "async" (torchtitan's AsyncMode.ASYNC):
 * the state is copied into host buffers owned by the saver (the
 * "staging" copy), and a background thread writes FOLDER/step-N.h5 from
 * them while training goes on.  A save first waits for the previous one
 * (at most one write in flight, as torchtitan's checkpointer), so the
 * buffers are reused.
 *
 * HDF5 (Debian's builds are not thread-safe) is called by one thread at
 * a time: the writer thread while a save is in flight, and the trainer
 * only after titan_ckpt_async_wait.  Errors of the writer are recorded in
 * its thread and handed to the caller by the wait.
 *
 * Multi-rank saves (titan_ckpt_async_save_dist): each rank stages its own
 * (sharded) arenas, and the writer threads of all ranks run the collective
 * titan_ckpt_save_dist sequence on a duplicate of the job's communicator
 * owned by the saver (made in the caller's thread, collectively, at the
 * first such save), so that the training threads' collectives on other
 * communicators go on meanwhile.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_impl.h"
#include "titan/data.h"

struct titan_ckpt_async {
	struct titan_allocator *alloc;
	pthread_t thread;
	bool running;              /* a thread was started and not joined */
	/* staging buffers, grown as needed, kept between saves */
	float *params, *exp_avg, *exp_avg_sq;
	int64_t floats;
	struct titan_loader_state *loader;
	int64_t nloader;
	struct titan_ckpt_comm *comm; /* multi-rank saves: our communicator */
	/* the save in flight */
	struct titan_ckpt_state st;
	bool dist, write_rows;
	char folder[4096];
	int64_t step, keep_latest_k;
	unsigned flags;
	enum titan_ckpt_dtype dtype;
	/* its result, read after the join */
	int rc;
	struct titan_error_info err;
	char *path;
	int removed;
	uint64_t start_ns, end_ns;
};

int titan_ckpt_async_new(struct titan_allocator *alloc, struct titan_ckpt_async **out)
{
	struct titan_ckpt_async *a = calloc(1, sizeof(*a));

	*out = NULL;
	if (!a)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	a->alloc = alloc ? alloc : titan_host_allocator();
	*out = a;
	return 0;
}

static void *writer(void *arg)
{
	struct titan_ckpt_async *a = arg;
	int rc;

	titan_error_clear();
	if (a->dist) {
		rc = titan_ckpt_save_dist_(a->folder, a->step, &a->st, a->flags, a->dtype, a->comm,
					   a->write_rows, a->keep_latest_k, &a->removed, &a->path);
	} else {
		rc = titan_ckpt_save(a->folder, a->step, &a->st, a->flags, a->dtype, &a->path);
		if (rc == 0 && a->keep_latest_k > 0)
			rc = titan_ckpt_prune(a->folder, a->keep_latest_k, &a->removed);
	}
	if (rc < 0)
		a->err = *titan_error_last();
	a->rc = rc;
	__atomic_store_n(&a->end_ns, titan_time_ns(), __ATOMIC_RELEASE);
	return NULL;
}

/* Copy in 4 MiB pieces over the OpenMP threads: the copy is the time
 * training is blocked, and one core does not saturate memory bandwidth. */
static void copy_parallel(float *dst, const float *src, int64_t n)
{
	const int64_t piece = (4 << 20) / sizeof(float), np = (n + piece - 1) / piece;

	#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < np; i++)
		memcpy(dst + i * piece, src + i * piece,
		       (size_t)(i + 1 < np ? piece : n - i * piece) * sizeof(float));
}

/* Allocate a staging buffer and touch every page (first-touch page faults
 * cost as much as the copy itself). */
static int stage_alloc(struct titan_ckpt_async *a, float **buf)
{
	if (*buf)
		return 0;
	if (!(*buf = titan_mem_alloc(a->alloc, (size_t)a->floats * sizeof(float), TITAN_MEM_OTHER)))
		return titan_error_prefix("checkpoint staging buffer");
	memset(*buf, 0, (size_t)a->floats * sizeof(float));
	return 0;
}

static int stage(struct titan_ckpt_async *a, float **buf, const float *src)
{
	int rc;

	if (!src)
		return 0;
	if ((rc = stage_alloc(a, buf)) < 0)
		return rc;
	copy_parallel(*buf, src, a->floats);
	return 0;
}

static void drop_buffers(struct titan_ckpt_async *a, int64_t floats)
{
	if (a->floats == floats)
		return;
	titan_mem_free(a->alloc, a->params);
	titan_mem_free(a->alloc, a->exp_avg);
	titan_mem_free(a->alloc, a->exp_avg_sq);
	a->params = a->exp_avg = a->exp_avg_sq = NULL;
	a->floats = floats;
}

int titan_ckpt_async_reserve(struct titan_ckpt_async *a, int64_t arena_floats, bool moments)
{
	int rc;

	if ((rc = titan_ckpt_async_wait(a, NULL)) < 0)
		return rc;
	drop_buffers(a, arena_floats);
	if ((rc = stage_alloc(a, &a->params)) < 0)
		return rc;
	if (moments && ((rc = stage_alloc(a, &a->exp_avg)) < 0 ||
			(rc = stage_alloc(a, &a->exp_avg_sq)) < 0))
		return rc;
	return 0;
}

int titan_ckpt_async_save(struct titan_ckpt_async *a, const char *folder, int64_t step,
			  const struct titan_ckpt_state *st, unsigned flags,
			  enum titan_ckpt_dtype dtype, int64_t keep_latest_k)
{
	return titan_ckpt_async_save_dist(a, folder, step, st, flags, dtype, keep_latest_k, NULL,
					  true);
}

/* Copy st into the staging buffers and a->st. */
static int stage_state(struct titan_ckpt_async *a, const char *folder, int64_t step,
		       const struct titan_ckpt_state *st, bool full)
{
	int rc;

	if (!st->table || !st->params)
		return titan_error(TITAN_E_INVALID, "checkpoint step %lld: no model to save",
				   (long long)step);
	if (strlen(folder) >= sizeof(a->folder))
		return titan_error(TITAN_E_INVALID, "checkpoint folder name too long: '%s'", folder);
	drop_buffers(a, st->table->arena_floats);
	a->st = *st;
	a->st.config_yaml = NULL;
	a->st.exp_avg = a->st.exp_avg_sq = NULL;
	a->st.train.loader = NULL;
	if ((rc = stage(a, &a->params, st->params)) < 0)
		return rc;
	a->st.params = a->params;
	if (full) {
		if ((rc = stage(a, &a->exp_avg, st->exp_avg)) < 0 ||
		    (rc = stage(a, &a->exp_avg_sq, st->exp_avg_sq)) < 0)
			return rc;
		a->st.exp_avg = st->exp_avg ? a->exp_avg : NULL;
		a->st.exp_avg_sq = st->exp_avg_sq ? a->exp_avg_sq : NULL;
		if (st->train.loader && st->train.dp_world_size > 0) {
			if (a->nloader < st->train.dp_world_size) {
				struct titan_loader_state *l =
					realloc(a->loader, (size_t)st->train.dp_world_size *
							   sizeof(*l));
				if (!l)
					return titan_error(TITAN_E_NOMEM, "out of memory");
				a->loader = l;
				a->nloader = st->train.dp_world_size;
			}
			memcpy(a->loader, st->train.loader,
			       (size_t)st->train.dp_world_size * sizeof(*a->loader));
			a->st.train.loader = a->loader;
		}
	}
	if (st->config_yaml && !(a->st.config_yaml = titan_strdup(st->config_yaml)))
		return TITAN_E_NOMEM;
	strcpy(a->folder, folder);
	return 0;
}

int titan_ckpt_async_save_dist(struct titan_ckpt_async *a, const char *folder, int64_t step,
			       const struct titan_ckpt_state *st, unsigned flags,
			       enum titan_ckpt_dtype dtype, int64_t keep_latest_k, void *mpi_comm,
			       bool write_rows)
{
	int rc;

	if ((rc = titan_ckpt_async_wait(a, NULL)) < 0)
		return rc;
	/* every rank gets here for the same step, so every rank makes (or
	 * keeps) the duplicate */
	if (mpi_comm && (rc = titan_ckpt_comm_get_(&a->comm, mpi_comm, true)) < 0)
		return rc;
	rc = stage_state(a, folder, step, st, !(flags & TITAN_CKPT_MODEL_ONLY));
	if (mpi_comm) /* a rank that cannot stage stops every rank's write */
		rc = titan_ckpt_comm_agree_(a->comm, rc);
	if (rc < 0) {
		free((char *)a->st.config_yaml);
		a->st.config_yaml = NULL;
		return rc;
	}
	a->step = step;
	a->flags = flags;
	a->dtype = dtype;
	a->keep_latest_k = keep_latest_k;
	a->dist = mpi_comm != NULL;
	a->write_rows = write_rows;
	a->rc = 0;
	a->path = NULL;
	a->removed = 0;
	a->start_ns = titan_time_ns();
	if ((rc = pthread_create(&a->thread, NULL, writer, a)) != 0) {
		free((char *)a->st.config_yaml);
		a->st.config_yaml = NULL;
		return titan_error(TITAN_E_INTERNAL, "cannot start the checkpoint writer thread: %s",
				   strerror(rc));
	}
	a->running = true;
	return 0;
}

bool titan_ckpt_async_busy(const struct titan_ckpt_async *a)
{
	return a && a->running;
}

bool titan_ckpt_async_done(struct titan_ckpt_async *a)
{
	/* end_ns is written by the writer last; a racy read only delays the
	 * report to the next poll (the join below synchronises properly). */
	return a && a->running && __atomic_load_n(&a->end_ns, __ATOMIC_ACQUIRE) != 0;
}

int titan_ckpt_async_wait(struct titan_ckpt_async *a, struct titan_ckpt_async_result *res)
{
	int rc;

	if (res)
		*res = (struct titan_ckpt_async_result){.step = -1};
	if (!a || !a->running)
		return 0;
	pthread_join(a->thread, NULL);
	a->running = false;
	free((char *)a->st.config_yaml);
	a->st.config_yaml = NULL;
	rc = a->rc;
	if (res) {
		res->step = a->step;
		res->write_s = (double)(a->end_ns - a->start_ns) * 1e-9;
		res->removed = a->removed;
		res->path = a->path;
	} else {
		free(a->path);
	}
	a->path = NULL;
	a->end_ns = 0;
	if (rc < 0)
		return titan_error(rc, "checkpoint step %lld (written in the background): %s",
				   (long long)a->step, a->err.msg);
	return 0;
}

void titan_ckpt_async_free(struct titan_ckpt_async *a)
{
	if (!a)
		return;
	if (a->running) {
		titan_ckpt_async_wait(a, NULL);
		titan_error_clear();
	}
	titan_mem_free(a->alloc, a->params);
	titan_mem_free(a->alloc, a->exp_avg);
	titan_mem_free(a->alloc, a->exp_avg_sq);
	free(a->loader);
	titan_ckpt_comm_free_(a->comm);
	free(a);
}
