/*
 * mpi.c — the MPI communicator (struct titan_comm_ops of titan/dist.h),
 * with a progress thread each: non-blocking operations are queued, issued in program order by
 * the thread (so every rank issues the same sequence on a communicator)
 * and tested until complete while the caller computes.  In a one-process
 * run (no launcher, or a build without MPI) every communicator has size 1
 * and an operation is a copy, done when it is queued.
 */
#include "dist_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct mpi_comm *mc(const struct titan_comm *c)
{
	return (struct mpi_comm *)c;
}

static int mpi_rank(const struct titan_comm *c)
{
	return mc(c)->rank;
}

static int mpi_size(const struct titan_comm *c)
{
	return mc(c)->size;
}

static int mpi_world_rank(const struct titan_comm *c, int r)
{
	return r >= 0 && r < mc(c)->size ? mc(c)->world_ranks[r] : -1;
}

static const char *mpi_name(const struct titan_comm *c)
{
	return mc(c)->name;
}

static void *mpi_handle(const struct titan_comm *c)
{
#if TITAN_HAVE_MPI
	return mc(c)->mpi ? (void *)&mc(c)->comm : NULL;
#else
	(void)c;
	return NULL;
#endif
}

static const char *const op_names[] = {
	"all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv", "barrier",
	"all_to_all_v",
};

const char *dist_op_name(enum dist_op op)
{
	return op_names[op];
}

/* ------------------------------------------------------- one process */

/* Size-1 semantics: all_reduce, all_gather, reduce_scatter and broadcast
 * copy send to recv (or nothing in place); point-to-point has no peer. */
static int local_op(struct mpi_req *q)
{
	const size_t bytes = q->count * titan_dtype_size(q->dt);

	switch (q->op) {
	case DIST_ALL_REDUCE:
	case DIST_ALL_GATHER:
	case DIST_REDUCE_SCATTER:
		if (q->send != TITAN_IN_PLACE && q->send != q->recv && bytes)
			memcpy(q->recv, q->send, bytes);
		return 0;
	case DIST_ALL_TO_ALL_V: /* one rank: its block to itself */
		if (q->a2a[0])
			memcpy(q->recv, q->send, (size_t)q->a2a[0] * titan_dtype_size(q->dt));
		return 0;
	case DIST_BROADCAST:
	case DIST_BARRIER:
		return 0;
	case DIST_SEND:
	case DIST_RECV:
		break;
	}
	return titan_error(TITAN_E_INVALID, "%s '%s': no peer in a one-rank communicator",
			   dist_op_name(q->op), q->what);
}

/* --------------------------------------------------------------- MPI */

#if TITAN_HAVE_MPI
static MPI_Datatype mpi_type(enum titan_dtype t)
{
	switch (t) {
	case TITAN_DTYPE_F32: return MPI_FLOAT;
	case TITAN_DTYPE_F64: return MPI_DOUBLE;
	case TITAN_DTYPE_I64: return MPI_INT64_T;
	case TITAN_DTYPE_U8: return MPI_UINT8_T;
	}
	return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(enum titan_redop o)
{
	return o == TITAN_REDOP_MAX ? MPI_MAX : o == TITAN_REDOP_MIN ? MPI_MIN : MPI_SUM;
}

int dist_mpi_error(int err, const char *op, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	MPI_Error_string(err, msg, &len);
	return titan_error(TITAN_E_COMM, "%s '%s': %s", op, what, msg);
}

/* Issue one queued operation (progress thread). */
static int issue(struct mpi_comm *c, struct mpi_req *q)
{
	MPI_Datatype t = mpi_type(q->dt);
	const void *s = q->send == TITAN_IN_PLACE ? MPI_IN_PLACE : q->send;
	const int n = (int)q->count;
	int err = MPI_SUCCESS;

	switch (q->op) {
	case DIST_ALL_REDUCE:
		err = MPI_Iallreduce(s, q->recv, n, t, mpi_op(q->redop), c->comm, &q->mreq);
		break;
	case DIST_ALL_GATHER:
		err = MPI_Iallgather(s, n, t, q->recv, n, t, c->comm, &q->mreq);
		break;
	case DIST_REDUCE_SCATTER:
		err = MPI_Ireduce_scatter_block(s, q->recv, n, t, MPI_SUM, c->comm, &q->mreq);
		break;
	case DIST_BROADCAST:
		err = MPI_Ibcast(q->recv, n, t, q->peer, c->comm, &q->mreq);
		break;
	case DIST_SEND:
		err = MPI_Isend(q->send, n, t, q->peer, q->tag, c->comm, &q->mreq);
		break;
	case DIST_RECV:
		err = MPI_Irecv(q->recv, n, t, q->peer, q->tag, c->comm, &q->mreq);
		break;
	case DIST_BARRIER:
		err = MPI_Ibarrier(c->comm, &q->mreq);
		break;
	case DIST_ALL_TO_ALL_V: {
		const int *a = q->a2a, z = c->size;

		err = MPI_Ialltoallv(q->send, a, a + z, t, q->recv, a + 2 * z, a + 3 * z, t,
				     c->comm, &q->mreq);
		break;
	}
	}
	return err == MPI_SUCCESS ? 0 : dist_mpi_error(err, dist_op_name(q->op), q->what);
}

static void finish(struct mpi_comm *c, struct mpi_req *q, int rc)
{
	pthread_mutex_lock(&c->lock);
	q->rc = rc;
	q->done = true;
	if (rc < 0)
		q->err = *titan_error_last();
	dist_recorder_update(c->dist, q->rec, DIST_REC_COMPLETED);
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

/* The progress thread: issue what is queued, in order; test what is in
 * flight; sleep a little (20 µs doubling to 1 ms, 50 µs when the caller
 * is waiting) when nothing moved, so that it does not take a core from
 * the computation on a machine with few cores. */
static void *progress(void *arg)
{
	struct mpi_comm *c = arg;
	struct mpi_req *inflight[DIST_MAX_INFLIGHT];
	int n = 0;
	long nap = 20000;

	for (;;) {
		bool moved = false;

		pthread_mutex_lock(&c->lock);
		while (!c->stop && !c->head && n == 0)
			pthread_cond_wait(&c->cond, &c->lock);
		if (c->stop && n == 0 && !c->head) {
			pthread_mutex_unlock(&c->lock);
			break;
		}
		while (c->head && n < DIST_MAX_INFLIGHT) {
			struct mpi_req *q = c->head;

			c->head = q->next;
			if (!c->head)
				c->tail = NULL;
			pthread_mutex_unlock(&c->lock);
			dist_recorder_update(c->dist, q->rec, DIST_REC_STARTED);
			int rc = issue(c, q);

			if (rc < 0)
				finish(c, q, rc);
			else
				inflight[n++] = q;
			moved = true;
			pthread_mutex_lock(&c->lock);
		}
		const bool waiting = c->waiters > 0;

		pthread_mutex_unlock(&c->lock);
		for (int i = 0; i < n;) {
			int flag = 0, err = MPI_Test(&inflight[i]->mreq, &flag, MPI_STATUS_IGNORE);

			if (err != MPI_SUCCESS || flag) {
				finish(c, inflight[i], err == MPI_SUCCESS ? 0
					: dist_mpi_error(err, dist_op_name(inflight[i]->op), inflight[i]->what));
				inflight[i] = inflight[--n];
				moved = true;
			} else {
				i++;
			}
		}
		if (moved) {
			nap = 20000;
			continue;
		}
		struct timespec ts = {0, waiting && nap > 50000 ? 50000 : nap};

		nanosleep(&ts, NULL);
		if (nap < 1000000)
			nap *= 2;
	}
	return NULL;
}
#endif

/* ------------------------------------------------------------ queue */

/* Queue an operation; `a2a` (all_to_all_v's counts and displacements, or
 * NULL) becomes the request's, freed with it or here on failure. */
static int submit_a2a(struct titan_comm *comm, enum dist_op op, const void *send, void *recv,
		      size_t count, enum titan_dtype dt, enum titan_redop redop, int peer,
		      int tag, int *a2a, const char *what, struct titan_comm_req **req)
{
	struct mpi_comm *c = mc(comm);
	struct mpi_req *q = calloc(1, sizeof(*q));
	size_t bytes = count * titan_dtype_size(dt);

	*req = NULL;
	if (!q) {
		free(a2a);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	q->a2a = a2a;
	if (count > (size_t)0x7fffffff) {
		free(a2a);
		free(q);
		return titan_error(TITAN_E_INVALID, "%s '%s': %zu elements is more than one MPI "
				   "call takes", dist_op_name(op), what, count);
	}
	q->base.c = comm;
	q->op = op;
	q->send = send;
	q->recv = recv;
	q->count = count;
	q->dt = dt;
	q->redop = redop;
	q->peer = peer;
	q->tag = tag;
	snprintf(q->what, sizeof(q->what), "%s", what ? what : "");
	if (op == DIST_ALL_GATHER || op == DIST_REDUCE_SCATTER)
		bytes *= (size_t)c->size;
	q->rec = dist_recorder_add(c->dist, c->name, dist_op_name(op), q->what, bytes);
	if (!c->mpi) {
		q->rc = local_op(q);
		if (q->rc < 0)
			q->err = *titan_error_last();
		q->done = true;
		dist_recorder_update(c->dist, q->rec, DIST_REC_COMPLETED);
		*req = &q->base;
		return 0;
	}
#if TITAN_HAVE_MPI
	pthread_mutex_lock(&c->lock);
	if (c->tail)
		c->tail->next = q;
	else
		c->head = q;
	c->tail = q;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
#endif
	*req = &q->base;
	return 0;
}

static int submit(struct titan_comm *comm, enum dist_op op, const void *send, void *recv,
		  size_t count, enum titan_dtype dt, enum titan_redop redop, int peer, int tag,
		  const char *what, struct titan_comm_req **req)
{
	return submit_a2a(comm, op, send, recv, count, dt, redop, peer, tag, NULL, what, req);
}

static int mpi_iall_reduce(struct titan_comm *c, const void *send, void *recv, size_t count,
			   enum titan_dtype dt, enum titan_redop op, const char *what,
			   struct titan_comm_req **req)
{
	return submit(c, DIST_ALL_REDUCE, send, recv, count, dt, op, 0, 0, what, req);
}

static int mpi_iall_gather(struct titan_comm *c, const void *send, void *recv, size_t count,
			   enum titan_dtype dt, const char *what, struct titan_comm_req **req)
{
	/* in place: this rank's part already sits at recv[rank·count] */
	if (send == TITAN_IN_PLACE && !mc(c)->mpi)
		send = (char *)recv;
	return submit(c, DIST_ALL_GATHER, send, recv, count, dt, TITAN_REDOP_SUM, 0, 0, what, req);
}

static int mpi_ireduce_scatter(struct titan_comm *c, const void *send, void *recv, size_t count,
			       enum titan_dtype dt, const char *what, struct titan_comm_req **req)
{
	return submit(c, DIST_REDUCE_SCATTER, send, recv, count, dt, TITAN_REDOP_SUM, 0, 0, what,
		      req);
}

static int mpi_ibroadcast(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
			  int root, const char *what, struct titan_comm_req **req)
{
	return submit(c, DIST_BROADCAST, buf, buf, count, dt, TITAN_REDOP_SUM, root, 0, what, req);
}

static int mpi_isend(struct titan_comm *c, const void *buf, size_t count, enum titan_dtype dt,
		     int dest, int tag, const char *what, struct titan_comm_req **req)
{
	return submit(c, DIST_SEND, buf, NULL, count, dt, TITAN_REDOP_SUM, dest, tag, what, req);
}

static int mpi_irecv(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
		     int src, int tag, const char *what, struct titan_comm_req **req)
{
	return submit(c, DIST_RECV, NULL, buf, count, dt, TITAN_REDOP_SUM, src, tag, what, req);
}

static int mpi_ibarrier(struct titan_comm *c, const char *what, struct titan_comm_req **req)
{
	return submit(c, DIST_BARRIER, NULL, NULL, 0, TITAN_DTYPE_U8, TITAN_REDOP_SUM, 0, 0, what,
		      req);
}

/* The counts and their prefix sums as MPI's ints; `count` (for the flight
 * recorder and the size check) is the larger of the totals sent and
 * received, so that a total over INT_MAX is refused. */
static int mpi_iall_to_all_v(struct titan_comm *c, const void *send, const size_t *scounts,
			     void *recv, const size_t *rcounts, enum titan_dtype dt,
			     const char *what, struct titan_comm_req **req)
{
	const int z = mc(c)->size;
	int *a = malloc(4 * (size_t)z * sizeof(int));
	size_t st = 0, rt = 0;

	*req = NULL;
	if (!a)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	for (int p = 0; p < z; p++) {
		a[z + p] = (int)st;
		a[3 * z + p] = (int)rt;
		st += scounts[p];
		rt += rcounts[p];
		if (st > (size_t)0x7fffffff || rt > (size_t)0x7fffffff)
			break;
		a[p] = (int)scounts[p];
		a[2 * z + p] = (int)rcounts[p];
	}
	return submit_a2a(c, DIST_ALL_TO_ALL_V, send, recv, st > rt ? st : rt, dt,
			  TITAN_REDOP_SUM, 0, 0, a, what, req);
}

static bool mpi_test(struct titan_comm_req *r)
{
	struct mpi_req *q = (struct mpi_req *)r;
	struct mpi_comm *c = mc(r->c);
	bool done;

	if (!c->mpi)
		return q->done;
	pthread_mutex_lock(&c->lock);
	done = q->done;
	pthread_mutex_unlock(&c->lock);
	return done;
}

static int mpi_wait(struct titan_comm_req *r)
{
	struct mpi_req *q = (struct mpi_req *)r;
	struct mpi_comm *c = mc(r->c);
	int rc;

	if (c->mpi) {
		struct timespec dl;
		double timeout = dist_timeout(c->dist);

		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += (time_t)timeout;
		dl.tv_nsec += (long)((timeout - (double)(time_t)timeout) * 1e9);
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&c->lock);
		c->waiters++;
		while (!q->done) {
			if (pthread_cond_timedwait(&c->cond, &c->lock, &dl) == ETIMEDOUT && !q->done) {
				pthread_mutex_unlock(&c->lock);
				dist_timeout_exit(c->dist, dist_op_name(q->op), q->what, c->name,
						  q->count * titan_dtype_size(q->dt), timeout);
			}
		}
		c->waiters--;
		pthread_mutex_unlock(&c->lock);
	}
	rc = q->rc;
	if (rc < 0) /* the error was recorded on the progress thread */
		titan_error_set_(q->err.code, q->err.file, q->err.line, q->err.func, "%s", q->err.msg);
	free(q->a2a);
	free(q);
	return rc;
}

static void mpi_release(struct titan_comm *comm);

static const struct titan_comm_ops mpi_ops = {
	.name = "mpi",
	.rank = mpi_rank,
	.size = mpi_size,
	.world_rank = mpi_world_rank,
	.comm_name = mpi_name,
	.mpi_handle = mpi_handle,
	.iall_reduce = mpi_iall_reduce,
	.iall_gather = mpi_iall_gather,
	.ireduce_scatter = mpi_ireduce_scatter,
	.ibroadcast = mpi_ibroadcast,
	.isend = mpi_isend,
	.irecv = mpi_irecv,
	.ibarrier = mpi_ibarrier,
	.iall_to_all_v = mpi_iall_to_all_v,
	.wait = mpi_wait,
	.test = mpi_test,
	.release = mpi_release,
};

/* ------------------------------------------------------ life cycle */

/* A communicator over `members` world ranks (this rank among them):
 * MPI_Comm_split of the world by `color`, then its progress thread. */
int dist_comm_new(struct titan_dist *d, const char *name, int color, int key,
		  struct titan_comm **out)
{
	struct mpi_comm *c = calloc(1, sizeof(*c));

	*out = NULL;
	if (!c)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	c->base.ops = &mpi_ops;
	c->dist = d;
	snprintf(c->name, sizeof(c->name), "%s", name);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->size = 1;
	c->rank = 0;
	c->mpi = d->mpi;
#if TITAN_HAVE_MPI
	if (c->mpi) {
		int err = MPI_Comm_split(MPI_COMM_WORLD, color, key, &c->comm), wr = d->rank;

		if (err != MPI_SUCCESS) {
			free(c);
			return dist_mpi_error(err, "MPI_Comm_split", name);
		}
		MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
		MPI_Comm_rank(c->comm, &c->rank);
		MPI_Comm_size(c->comm, &c->size);
		if (!(c->world_ranks = calloc((size_t)c->size, sizeof(int)))) {
			MPI_Comm_free(&c->comm);
			free(c);
			return titan_error(TITAN_E_NOMEM, "out of memory");
		}
		MPI_Allgather(&wr, 1, MPI_INT, c->world_ranks, 1, MPI_INT, c->comm);
		if (pthread_create(&c->thread, NULL, progress, c) != 0) {
			free(c->world_ranks);
			MPI_Comm_free(&c->comm);
			free(c);
			return titan_error(TITAN_E_COMM, "cannot start the progress thread of '%s'",
					   name);
		}
		c->thread_started = true;
		*out = &c->base;
		return 0;
	}
#else
	(void)color;
	(void)key;
#endif
	if (!(c->world_ranks = calloc(1, sizeof(int)))) {
		free(c);
		return titan_error(TITAN_E_NOMEM, "out of memory");
	}
	c->world_ranks[0] = d->rank;
	*out = &c->base;
	return 0;
}

static void mpi_release(struct titan_comm *comm)
{
	struct mpi_comm *c = mc(comm);

#if TITAN_HAVE_MPI
	if (c->thread_started) {
		pthread_mutex_lock(&c->lock);
		c->stop = true;
		pthread_cond_broadcast(&c->cond);
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->thread, NULL);
	}
	if (c->mpi)
		MPI_Comm_free(&c->comm);
#endif
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	free(c->world_ranks);
	free(c);
}

void dist_comm_free(struct titan_comm *c)
{
	if (c)
		mpi_release(c);
}
