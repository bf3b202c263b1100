/*
 * dist_impl.h — lib/dist's private structures: the MPI communicator and
 * its requests, the flight recorder, timeouts.  Private to lib/dist.
 */
#ifndef TITAN_DIST_IMPL_H
#define TITAN_DIST_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "titan/dist.h"

#if TITAN_HAVE_MPI
#include <mpi.h>
#endif

#define DIST_MAX_INFLIGHT 64

enum dist_op {
	DIST_ALL_REDUCE = 0,
	DIST_ALL_GATHER,
	DIST_REDUCE_SCATTER,
	DIST_BROADCAST,
	DIST_SEND,
	DIST_RECV,
	DIST_BARRIER,
	DIST_ALL_TO_ALL_V,
};
const char *dist_op_name(enum dist_op op);

/* The MPI communicator (comm.c): struct titan_comm's MPI implementation. */
struct mpi_req {
	struct titan_comm_req base;    /* base.c: its communicator */
	struct mpi_req *next;          /* queue */
	enum dist_op op;
	const void *send;
	void *recv;
	size_t count;
	enum titan_dtype dt;
	enum titan_redop redop;
	int peer, tag;
	int *a2a;                      /* all_to_all_v: scounts, sdispls, rcounts, rdispls
					* (size ints each; freed with the request) */
	char what[96];
	int64_t rec;                   /* flight recorder sequence number */
	bool done;
	int rc;
	struct titan_error_info err;
#if TITAN_HAVE_MPI
	MPI_Request mreq;
#endif
};

struct mpi_comm {
	struct titan_comm base;        /* base.ops: the MPI table */
	struct titan_dist *dist;
	char name[32];
	int rank, size;
	int *world_ranks;
	bool mpi;
#if TITAN_HAVE_MPI
	MPI_Comm comm;
#endif
	pthread_t thread;
	bool thread_started, stop;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct mpi_req *head, *tail;
	int waiters;
};

int dist_comm_new(struct titan_dist *d, const char *name, int color, int key,
		  struct titan_comm **out);
void dist_comm_free(struct titan_comm *c);
#if TITAN_HAVE_MPI
int dist_mpi_error(int err, const char *op, const char *what);
#endif

/* Flight recorder (world.c): add an entry (returns its sequence number),
 * mark it started / completed. */
enum dist_rec_state { DIST_REC_QUEUED = 0, DIST_REC_STARTED, DIST_REC_COMPLETED };
int64_t dist_recorder_add(struct titan_dist *d, const char *comm, const char *op,
			  const char *what, size_t bytes);
void dist_recorder_update(struct titan_dist *d, int64_t seq, enum dist_rec_state st);
/* The deadline of a wait, and what happens when it passes (never returns). */
double dist_timeout(const struct titan_dist *d);
void dist_timeout_exit(struct titan_dist *d, const char *op, const char *what, const char *comm,
		       size_t bytes, double timeout) TITAN_NORETURN;

#endif
