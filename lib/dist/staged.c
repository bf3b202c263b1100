/*
 * staged.c — the staged communicator (titan/dist.h titan_comm_staged_new):
 * another communicator's operations on a backend's buffers, through host
 * staging buffers.  At issue the inputs are copied to the host with the
 * backend's buf_get (which waits for the backend's queued work, so the
 * data is final), the inner communicator runs the operation on the host
 * copies exactly as it was asked (in place stays in place), and the wait
 * copies the result back with buf_set.  Until NCCL runs collectives on
 * device memory, this is how CUDA ranks talk: over MPI, through the host.
 */
#include "titan/dist.h"

#include <stdlib.h>

#include "titan/core.h"
#include "titan/ops.h"

struct staged_comm {
	struct titan_comm base;
	struct titan_comm *inner;
	struct titan_backend *be;
};

struct staged_req {
	struct titan_comm_req base;
	struct titan_comm_req *inner;
	void *hsend, *hrecv;   /* host copies of send and recv (or NULL) */
	void *back;            /* the buffer the result goes back to, or NULL */
	size_t back_bytes;     /* from hrecv[0] */
};

static struct staged_comm *sc(const struct titan_comm *c)
{
	return (struct staged_comm *)c;
}

static void *host_buf(size_t bytes)
{
	return titan_mem_alloc(titan_host_allocator(), bytes, TITAN_MEM_COMM);
}

static void drop(struct staged_req *q)
{
	titan_mem_free(titan_host_allocator(), q->hsend);
	titan_mem_free(titan_host_allocator(), q->hrecv);
	free(q);
}

/* A request with its staging buffers: hsend = send (send_bytes) when send
 * is not NULL; hrecv of recv_bytes when recv is not NULL, with recv's
 * bytes [in_off, in_off + in_bytes) copied in (in-place inputs); the
 * wait sets recv's first back_bytes from hrecv. */
static int stage_in(struct staged_comm *s, const void *send, size_t send_bytes, void *recv,
		    size_t recv_bytes, size_t in_off, size_t in_bytes, size_t back_bytes,
		    struct staged_req **out)
{
	const struct titan_backend_ops *o = s->be->ops;
	struct staged_req *q = calloc(1, sizeof(*q));
	int rc;

	*out = NULL;
	if (!q)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	q->base.c = &s->base;
	if ((send && !(q->hsend = host_buf(send_bytes))) ||
	    (recv && !(q->hrecv = host_buf(recv_bytes)))) {
		drop(q);
		return TITAN_E_NOMEM;
	}
	if ((send && (rc = o->buf_get(s->be, q->hsend, send, send_bytes)) < 0) ||
	    (recv && in_bytes &&
	     (rc = o->buf_get(s->be, (char *)q->hrecv + in_off, (const char *)recv + in_off,
			      in_bytes)) < 0)) {
		drop(q);
		return titan_error_prefix("staging '%s' through the host", titan_comm_name(s->inner));
	}
	if (recv && back_bytes) {
		q->back = recv;
		q->back_bytes = back_bytes;
	}
	*out = q;
	return 0;
}

/* The inner operation's return: keep its request, or drop ours. */
static int issued(struct staged_req *q, int rc, struct titan_comm_req **req)
{
	if (rc < 0) {
		drop(q);
		return rc;
	}
	*req = &q->base;
	return 0;
}

static int staged_iall_reduce(struct titan_comm *c, const void *send, void *recv, size_t count,
			      enum titan_dtype dt, enum titan_redop op, const char *what,
			      struct titan_comm_req **req)
{
	const bool in_place = send == TITAN_IN_PLACE;
	const size_t n = count * titan_dtype_size(dt);
	struct staged_req *q;
	int rc = stage_in(sc(c), in_place ? NULL : send, n, recv, n, 0, in_place ? n : 0, n, &q);

	if (rc < 0)
		return rc;
	rc = titan_comm_iall_reduce(sc(c)->inner, in_place ? TITAN_IN_PLACE : q->hsend, q->hrecv,
				    count, dt, op, what, &q->inner);
	return issued(q, rc, req);
}

static int staged_iall_gather(struct titan_comm *c, const void *send, void *recv, size_t count,
			      enum titan_dtype dt, const char *what, struct titan_comm_req **req)
{
	const bool in_place = send == TITAN_IN_PLACE;
	const size_t n = count * titan_dtype_size(dt);
	const size_t all = n * (size_t)titan_comm_size(c), mine = n * (size_t)titan_comm_rank(c);
	struct staged_req *q;
	int rc = stage_in(sc(c), in_place ? NULL : send, n, recv, all, mine, in_place ? n : 0, all,
			  &q);

	if (rc < 0)
		return rc;
	rc = titan_comm_iall_gather(sc(c)->inner, in_place ? TITAN_IN_PLACE : q->hsend, q->hrecv,
				    count, dt, what, &q->inner);
	return issued(q, rc, req);
}

static int staged_ireduce_scatter(struct titan_comm *c, const void *send, void *recv,
				  size_t count, enum titan_dtype dt, const char *what,
				  struct titan_comm_req **req)
{
	const bool in_place = send == TITAN_IN_PLACE;
	const size_t n = count * titan_dtype_size(dt), all = n * (size_t)titan_comm_size(c);
	struct staged_req *q;
	/* in place the input is all of recv, the result its first n bytes */
	int rc = stage_in(sc(c), in_place ? NULL : send, all, recv, in_place ? all : n, 0,
			  in_place ? all : 0, n, &q);

	if (rc < 0)
		return rc;
	rc = titan_comm_ireduce_scatter(sc(c)->inner, in_place ? TITAN_IN_PLACE : q->hsend,
					q->hrecv, count, dt, what, &q->inner);
	return issued(q, rc, req);
}

static int staged_ibroadcast(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
			     int root, const char *what, struct titan_comm_req **req)
{
	const size_t n = count * titan_dtype_size(dt);
	struct staged_req *q;
	int rc = stage_in(sc(c), NULL, 0, buf, n, 0, titan_comm_rank(c) == root ? n : 0, n, &q);

	if (rc < 0)
		return rc;
	rc = titan_comm_ibroadcast(sc(c)->inner, q->hrecv, count, dt, root, what, &q->inner);
	return issued(q, rc, req);
}

static int staged_isend(struct titan_comm *c, const void *buf, size_t count, enum titan_dtype dt,
			int dest, int tag, const char *what, struct titan_comm_req **req)
{
	struct staged_req *q;
	int rc = stage_in(sc(c), buf, count * titan_dtype_size(dt), NULL, 0, 0, 0, 0, &q);

	if (rc < 0)
		return rc;
	rc = titan_comm_isend(sc(c)->inner, q->hsend, count, dt, dest, tag, what, &q->inner);
	return issued(q, rc, req);
}

static int staged_irecv(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
			int src, int tag, const char *what, struct titan_comm_req **req)
{
	const size_t n = count * titan_dtype_size(dt);
	struct staged_req *q;
	int rc = stage_in(sc(c), NULL, 0, buf, n, 0, 0, n, &q);

	if (rc < 0)
		return rc;
	rc = titan_comm_irecv(sc(c)->inner, q->hrecv, count, dt, src, tag, what, &q->inner);
	return issued(q, rc, req);
}

static int staged_iall_to_all_v(struct titan_comm *c, const void *send, const size_t *scounts,
				void *recv, const size_t *rcounts, enum titan_dtype dt,
				const char *what, struct titan_comm_req **req)
{
	const size_t es = titan_dtype_size(dt);
	size_t sn = 0, rn = 0;
	struct staged_req *q;
	int rc;

	for (int p = 0; p < titan_comm_size(c); p++) {
		sn += scounts[p] * es;
		rn += rcounts[p] * es;
	}
	/* at least a byte each: nothing to move still needs a host buffer */
	if ((rc = stage_in(sc(c), send, sn ? sn : 1, recv, rn ? rn : 1, 0, 0, rn, &q)) < 0)
		return rc;
	rc = titan_comm_iall_to_all_v(sc(c)->inner, q->hsend, scounts, q->hrecv, rcounts, dt,
				      what, &q->inner);
	return issued(q, rc, req);
}

/* No buffers: the inner communicator's request itself. */
static int staged_ibarrier(struct titan_comm *c, const char *what, struct titan_comm_req **req)
{
	struct titan_comm *in = sc(c)->inner;

	return in->ops->ibarrier(in, what, req);
}

static int staged_wait(struct titan_comm_req *r)
{
	struct staged_req *q = (struct staged_req *)r;
	struct titan_backend *be = sc(r->c)->be;
	int rc = titan_comm_wait(q->inner);

	if (rc == 0 && q->back && (rc = be->ops->buf_set(be, q->back, q->hrecv, q->back_bytes)) < 0)
		titan_error_prefix("staging '%s' through the host", titan_comm_name(r->c));
	drop(q);
	return rc;
}

static bool staged_test(struct titan_comm_req *r)
{
	return titan_comm_test(((struct staged_req *)r)->inner);
}

static int staged_rank(const struct titan_comm *c)
{
	return titan_comm_rank(sc(c)->inner);
}

static int staged_size(const struct titan_comm *c)
{
	return titan_comm_size(sc(c)->inner);
}

static int staged_world_rank(const struct titan_comm *c, int r)
{
	return titan_comm_world_rank(sc(c)->inner, r);
}

static const char *staged_name(const struct titan_comm *c)
{
	return titan_comm_name(sc(c)->inner);
}

static void *staged_mpi_handle(const struct titan_comm *c)
{
	return titan_comm_mpi_handle(sc(c)->inner);
}

static void staged_release(struct titan_comm *c)
{
	free(sc(c));
}

static const struct titan_comm_ops staged_ops = {
	.name = "staged",
	.rank = staged_rank,
	.size = staged_size,
	.world_rank = staged_world_rank,
	.comm_name = staged_name,
	.mpi_handle = staged_mpi_handle,
	.iall_reduce = staged_iall_reduce,
	.iall_gather = staged_iall_gather,
	.ireduce_scatter = staged_ireduce_scatter,
	.ibroadcast = staged_ibroadcast,
	.isend = staged_isend,
	.irecv = staged_irecv,
	.ibarrier = staged_ibarrier,
	.iall_to_all_v = staged_iall_to_all_v,
	.wait = staged_wait,
	.test = staged_test,
	.release = staged_release,
};

int titan_comm_staged_new(struct titan_comm *inner, struct titan_backend *be,
			  struct titan_comm **out)
{
	struct staged_comm *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	s->base.ops = &staged_ops;
	s->inner = inner;
	s->be = be;
	*out = &s->base;
	return 0;
}
