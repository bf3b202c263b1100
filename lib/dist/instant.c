/*
 * instant.c — the instant communicator (titan/dist.h
 * titan_comm_instant_new): rank r of a group of any size, alone in the
 * process.  Every operation completes when it is issued and touches no
 * buffer: a collective's result is whatever its output held, a receive
 * leaves its buffer as it was.  With it one process plays one rank of a
 * 64- or 1024-rank layout through the real data- and pipeline-parallel
 * code — titan-estimate's dry run over a measure backend (titan/ops.h),
 * as ggml's measure pass — where what counts is which buffers are
 * allocated when, not what they hold.
 */
#include "titan/dist.h"

#include <stdio.h>
#include <stdlib.h>

struct instant_comm {
	struct titan_comm base;
	int rank, size, world_base, world_stride;
	char name[32];
};

static const struct instant_comm *ic(const struct titan_comm *c)
{
	return (const struct instant_comm *)c;
}

static int instant_rank(const struct titan_comm *c)
{
	return ic(c)->rank;
}

static int instant_size(const struct titan_comm *c)
{
	return ic(c)->size;
}

static int instant_world_rank(const struct titan_comm *c, int r)
{
	const struct instant_comm *s = ic(c);

	return r >= 0 && r < s->size ? s->world_base + r * s->world_stride : -1;
}

static const char *instant_name(const struct titan_comm *c)
{
	return ic(c)->name;
}

static void *instant_mpi_handle(const struct titan_comm *c)
{
	(void)c;
	return NULL;
}

/* Done at once, but with a request as any communicator's: callers may
 * keep "a request in flight" as state (dp.c's gathers do), so an
 * operation never returns NULL; the wait frees it. */
static int done(struct titan_comm *c, struct titan_comm_req **req)
{
	if (!(*req = malloc(sizeof(**req))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	(*req)->c = c;
	return 0;
}

static int instant_all_reduce(struct titan_comm *c, const void *send, void *recv, size_t count,
			      enum titan_dtype dt, enum titan_redop op, const char *what,
			      struct titan_comm_req **req)
{
	(void)c, (void)send, (void)recv, (void)count, (void)dt, (void)op, (void)what;
	return done(c, req);
}

static int instant_all_gather(struct titan_comm *c, const void *send, void *recv, size_t count,
			      enum titan_dtype dt, const char *what, struct titan_comm_req **req)
{
	(void)c, (void)send, (void)recv, (void)count, (void)dt, (void)what;
	return done(c, req);
}

static int instant_broadcast(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
			     int root, const char *what, struct titan_comm_req **req)
{
	(void)c, (void)buf, (void)count, (void)dt, (void)root, (void)what;
	return done(c, req);
}

static int instant_p2p(struct titan_comm *c, const void *buf, size_t count, enum titan_dtype dt,
		       int peer, int tag, const char *what, struct titan_comm_req **req)
{
	(void)c, (void)buf, (void)count, (void)dt, (void)peer, (void)tag, (void)what;
	return done(c, req);
}

static int instant_recv(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
			int peer, int tag, const char *what, struct titan_comm_req **req)
{
	return instant_p2p(c, buf, count, dt, peer, tag, what, req);
}

static int instant_barrier(struct titan_comm *c, const char *what, struct titan_comm_req **req)
{
	(void)c, (void)what;
	return done(c, req);
}

static int instant_all_to_all_v(struct titan_comm *c, const void *send, const size_t *scounts,
				void *recv, const size_t *rcounts, enum titan_dtype dt,
				const char *what, struct titan_comm_req **req)
{
	(void)send, (void)scounts, (void)recv, (void)rcounts, (void)dt, (void)what;
	return done(c, req);
}

static int instant_wait(struct titan_comm_req *req)
{
	free(req);
	return 0;
}

static bool instant_test(struct titan_comm_req *req)
{
	(void)req;
	return true;
}

static void instant_release(struct titan_comm *c)
{
	free(c);
}

static const struct titan_comm_ops instant_ops = {
	.name = "instant",
	.rank = instant_rank,
	.size = instant_size,
	.world_rank = instant_world_rank,
	.comm_name = instant_name,
	.mpi_handle = instant_mpi_handle,
	.iall_reduce = instant_all_reduce,
	.iall_gather = instant_all_gather,
	.ireduce_scatter = instant_all_gather,
	.ibroadcast = instant_broadcast,
	.isend = instant_p2p,
	.irecv = instant_recv,
	.ibarrier = instant_barrier,
	.iall_to_all_v = instant_all_to_all_v,
	.wait = instant_wait,
	.test = instant_test,
	.release = instant_release,
};

int titan_comm_instant_new(const char *name, int rank, int size, int world_base,
			   int world_stride, struct titan_comm **out)
{
	struct instant_comm *s;

	*out = NULL;
	if (size < 1 || rank < 0 || rank >= size || world_base < 0 || world_stride < 1)
		return titan_error(TITAN_E_INVALID, "instant communicator '%s': rank %d of %d "
				   "(world ranks %d + r x %d) is not a rank of the group",
				   name ? name : "", rank, size, world_base, world_stride);
	if (!(s = calloc(1, sizeof(*s))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	s->base.ops = &instant_ops;
	s->rank = rank;
	s->size = size;
	s->world_base = world_base;
	s->world_stride = world_stride;
	snprintf(s->name, sizeof(s->name), "%s", name ? name : "instant");
	*out = &s->base;
	return 0;
}
