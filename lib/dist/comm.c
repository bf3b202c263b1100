/*
 * comm.c — the communicator interface of titan/dist.h: each titan_comm_*
 * function checks what every implementation would and calls the
 * communicator's op table (MPI in mpi.c, staged through the host in
 * staged.c); the blocking forms are the non-blocking entry and its wait.
 */
#include "titan/dist.h"

#include <stdlib.h>

int titan_comm_rank(const struct titan_comm *c)
{
	return c->ops->rank(c);
}

int titan_comm_size(const struct titan_comm *c)
{
	return c->ops->size(c);
}

int titan_comm_world_rank(const struct titan_comm *c, int r)
{
	return c->ops->world_rank(c, r);
}

const char *titan_comm_name(const struct titan_comm *c)
{
	return c->ops->comm_name(c);
}

void *titan_comm_mpi_handle(const struct titan_comm *c)
{
	return c->ops->mpi_handle(c);
}

void titan_comm_free(struct titan_comm *c)
{
	if (c)
		c->ops->release(c);
}

int titan_comm_iall_reduce(struct titan_comm *c, const void *send, void *recv, size_t count,
			   enum titan_dtype dt, enum titan_redop op, const char *what,
			   struct titan_comm_req **req)
{
	*req = NULL;
	return c->ops->iall_reduce(c, send, recv, count, dt, op, what, req);
}

int titan_comm_iall_gather(struct titan_comm *c, const void *send, void *recv, size_t count,
			   enum titan_dtype dt, const char *what, struct titan_comm_req **req)
{
	*req = NULL;
	return c->ops->iall_gather(c, send, recv, count, dt, what, req);
}

int titan_comm_ireduce_scatter(struct titan_comm *c, const void *send, void *recv, size_t count,
			       enum titan_dtype dt, const char *what, struct titan_comm_req **req)
{
	*req = NULL;
	return c->ops->ireduce_scatter(c, send, recv, count, dt, what, req);
}

int titan_comm_ibroadcast(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
			  int root, const char *what, struct titan_comm_req **req)
{
	const int size = titan_comm_size(c);

	*req = NULL;
	if (root < 0 || root >= size)
		return titan_error(TITAN_E_INVALID, "broadcast '%s': root %d of %d ranks", what, root,
				   size);
	return c->ops->ibroadcast(c, buf, count, dt, root, what, req);
}

int titan_comm_isend(struct titan_comm *c, const void *buf, size_t count, enum titan_dtype dt,
		     int dest, int tag, const char *what, struct titan_comm_req **req)
{
	const int size = titan_comm_size(c);

	*req = NULL;
	if (dest < 0 || dest >= size || tag < 0)
		return titan_error(TITAN_E_INVALID, "send '%s': rank %d of %d, tag %d", what, dest,
				   size, tag);
	return c->ops->isend(c, buf, count, dt, dest, tag, what, req);
}

int titan_comm_irecv(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
		     int src, int tag, const char *what, struct titan_comm_req **req)
{
	const int size = titan_comm_size(c);

	*req = NULL;
	if (src < 0 || src >= size || tag < 0)
		return titan_error(TITAN_E_INVALID, "recv '%s': rank %d of %d, tag %d", what, src,
				   size, tag);
	return c->ops->irecv(c, buf, count, dt, src, tag, what, req);
}

bool titan_comm_test(struct titan_comm_req *q)
{
	return !q || q->c->ops->test(q);
}

int titan_comm_wait(struct titan_comm_req *q)
{
	return q ? q->c->ops->wait(q) : 0;
}

int titan_comm_all_reduce(struct titan_comm *c, const void *send, void *recv, size_t count,
			  enum titan_dtype dt, enum titan_redop op, const char *what)
{
	struct titan_comm_req *q;
	int rc = titan_comm_iall_reduce(c, send, recv, count, dt, op, what, &q);

	return rc < 0 ? rc : titan_comm_wait(q);
}

int titan_comm_all_gather(struct titan_comm *c, const void *send, void *recv, size_t count,
			  enum titan_dtype dt, const char *what)
{
	struct titan_comm_req *q;
	int rc = titan_comm_iall_gather(c, send, recv, count, dt, what, &q);

	return rc < 0 ? rc : titan_comm_wait(q);
}

int titan_comm_reduce_scatter(struct titan_comm *c, const void *send, void *recv, size_t count,
			      enum titan_dtype dt, const char *what)
{
	struct titan_comm_req *q;
	int rc = titan_comm_ireduce_scatter(c, send, recv, count, dt, what, &q);

	return rc < 0 ? rc : titan_comm_wait(q);
}

int titan_comm_broadcast(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
			 int root, const char *what)
{
	struct titan_comm_req *q;
	int rc = titan_comm_ibroadcast(c, buf, count, dt, root, what, &q);

	return rc < 0 ? rc : titan_comm_wait(q);
}

int titan_comm_barrier(struct titan_comm *c, const char *what)
{
	struct titan_comm_req *q = NULL;
	int rc = c->ops->ibarrier(c, what, &q);

	return rc < 0 ? rc : titan_comm_wait(q);
}

int titan_comm_iall_to_all_v(struct titan_comm *c, const void *send, const size_t *scounts,
			     void *recv, const size_t *rcounts, enum titan_dtype dt,
			     const char *what, struct titan_comm_req **req)
{
	*req = NULL;
	if (!c->ops->iall_to_all_v)
		return titan_error(TITAN_E_INVALID, "all_to_all_v '%s': the %s communicator '%s' "
				   "has none", what ? what : "", c->ops->name, titan_comm_name(c));
	if (send == TITAN_IN_PLACE)
		return titan_error(TITAN_E_INVALID, "all_to_all_v '%s': no in-place form",
				   what ? what : "");
	return c->ops->iall_to_all_v(c, send, scounts, recv, rcounts, dt, what, req);
}

int titan_comm_all_to_all_v(struct titan_comm *c, const void *send, const size_t *scounts,
			    void *recv, const size_t *rcounts, enum titan_dtype dt,
			    const char *what)
{
	struct titan_comm_req *q;
	int rc = titan_comm_iall_to_all_v(c, send, scounts, recv, rcounts, dt, what, &q);

	return rc < 0 ? rc : titan_comm_wait(q);
}
