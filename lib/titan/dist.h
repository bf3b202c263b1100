/*
 * titan/dist.h — ranks, the device mesh and communicators: torchtitan's
 * ParallelDims (torchtitan/distributed/parallel_dims.py) over MPI, and a
 * small communicator interface (all-reduce, all-gather, reduce-scatter,
 * broadcast, send/recv, non-blocking with wait; struct titan_comm_ops)
 * implemented over MPI on host buffers, staged through the host for a
 * backend's device buffers, and by NCCL later.
 *
 * Process model.  titan_dist_init() starts MPI when the build has it and
 * the process was started by a launcher (mpiexec/hydra, srun with pmi2, or
 * an MPI singleton when TITAN_MPI=1); otherwise, and in builds without MPI
 * (MPI=no), the run is one process and every communicator has size 1:
 * collectives become copies, so single-rank code needs no special cases.
 *
 * Mesh.  Ranks are laid out as torchtitan's mesh, outermost first:
 *     pp, dp_replicate, dp_shard, cp, tp        (tp innermost)
 * rank = (((pp_i·R + r_i)·S + s_i)·CP + c_i)·TP + t_i.  Each dimension has
 * a communicator over the ranks that differ only in that coordinate, plus
 * the flattened ones torchtitan uses:
 *     dp    = dp_replicate × dp_shard   (the data-loading "batch" mesh)
 *     fsdp  = dp_shard × cp             (the ranks that shard parameters)
 *     loss  = dp × cp                   (loss and token-count reductions)
 *
 * Progress and overlap.  Non-blocking operations are queued to a
 * communicator's progress thread, which issues them in program order (so
 * every rank issues the same sequence on a communicator, as MPI requires)
 * and drives them to completion while the caller computes: a CPU cannot
 * rely on MPI's own progress between calls.  A blocking call is a queued
 * call plus a wait.  Buffers passed to a non-blocking call must not be
 * touched until its wait returns.
 *
 * Timeouts (torchtitan's comm.init_timeout_seconds / train_timeout_seconds).
 * Every wait has a deadline: titan_dist_set_timeout() sets it (the trainer
 * uses the init timeout until the end of step 1, then the train timeout).
 * When a wait expires the rank finds out which ranks no longer answer
 * (a heartbeat exchange on a private communicator, a few seconds), logs
 *   "comm timeout: all_gather 'layer 3 params' (fsdp, 1.2 MiB) at step 4
 *    did not finish in 100 s; rank 2 does not answer (ranks 0,1,3 do)"
 * dumps the flight recorder and exits the process with status
 * TITAN_EXIT_COMM (after a short grace period so the other ranks can print
 * theirs).  It never returns to the caller: a hang cannot be handled.
 *
 * Flight recorder (comm.trace_buf_size, comm.save_traces_folder): the last
 * N operations of this rank (sequence number, communicator, op, name,
 * bytes, step, enqueue/start/end times, state) in a ring; dumped as
 * FOLDER/rank<R>.json on a timeout, on titan_dist_dump_traces() and by the
 * fatal-signal handler.  Format: docs/formats.md "Flight recorder".
 *
 * Errors: functions return 0 or a negative enum titan_err (TITAN_E_COMM
 * naming the operation and MPI's error string, TITAN_E_INVALID for bad
 * arguments); none aborts.  Thread safety: one thread (the trainer's) calls
 * these; the progress threads are internal.
 */
#ifndef TITAN_DIST_H
#define TITAN_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "titan/config.h"
#include "titan/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exit status of a process that gave up on a collective (timeout). */
#define TITAN_EXIT_COMM 3

/* ------------------------------------------------------- parallel dims */

enum titan_mesh_dim {
	TITAN_DIM_PP = 0,
	TITAN_DIM_DP_REPLICATE,
	TITAN_DIM_DP_SHARD,
	TITAN_DIM_CP,
	TITAN_DIM_TP,
	TITAN_DIM_NDIMS,
	/* flattened */
	TITAN_DIM_DP = TITAN_DIM_NDIMS, /* dp_replicate × dp_shard */
	TITAN_DIM_FSDP,                  /* dp_shard × cp */
	TITAN_DIM_LOSS,                  /* dp_replicate × dp_shard × cp */
	TITAN_DIM_WORLD,
	TITAN_DIM_NALL
};
/* "pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "fsdp", "loss", "world". */
const char *titan_mesh_dim_name(enum titan_mesh_dim d);

struct titan_parallel_dims {
	int64_t degree[TITAN_DIM_NDIMS]; /* pp, dp_replicate, dp_shard, cp, tp */
	int64_t world_size;
	/* expert parallel degree: ranks of dp_shard x cp x tp (consecutive,
	 * the innermost of that region: torchtitan's sparse mesh) that split
	 * the experts; 1 = none */
	int64_t ep;
};

/* torchtitan's ParallelDims validation: every degree >= 1 except dp_shard,
 * which may be -1 (= world / (the others' product)); the product must equal
 * `world_size`: otherwise TITAN_E_INVALID naming the keys and the numbers
 * ("parallelism: data_parallel_replicate_degree 2 x data_parallel_shard_degree
 * 3 x ... = 6, but 4 ranks were started").  From the config's parallelism.*
 * keys; expert_parallel_degree (pd->ep) must divide dp_shard x cp x tp
 * and, with one FSDP rank (dp_shard x cp 1), not leave the experts
 * replicated over TP ranks (efsdp 1: ep a multiple of tp). */
int titan_parallel_dims_from_config(struct titan_parallel_dims *pd,
				    const struct titan_config *c, int64_t world_size);
/* Expert parallelism's groups (pd->ep > 1), torchtitan's sparse mesh
 * (pp, dp_replicate, efsdp, ep) unflattened from the world: the region
 * dp_shard x cp x tp of each (pp, dp_replicate) flattened, ep innermost.
 * Of world rank `rank`: with `ep` its EP group (ep consecutive ranks),
 * else its efsdp group (the experts' FSDP mesh: the ranks of the region
 * with its EP rank) — the group's first world rank, the step between its
 * members, its size, and rank's index in it (its EP / efsdp rank). */
void titan_parallel_dims_ep_group(const struct titan_parallel_dims *pd, int64_t rank, bool ep,
				  int64_t *first, int64_t *stride, int64_t *size, int64_t *index);
/* Coordinates of `rank` (world) in the mesh, and back. */
void titan_parallel_dims_coords(const struct titan_parallel_dims *pd, int64_t rank,
				int64_t coord[TITAN_DIM_NDIMS]);
int64_t titan_parallel_dims_rank(const struct titan_parallel_dims *pd,
				 const int64_t coord[TITAN_DIM_NDIMS]);
/* Degree of a dimension, flattened ones included. */
int64_t titan_parallel_dims_degree(const struct titan_parallel_dims *pd, enum titan_mesh_dim d);

/* -------------------------------------------------------- communicator */

enum titan_dtype { TITAN_DTYPE_F32 = 0, TITAN_DTYPE_F64, TITAN_DTYPE_I64, TITAN_DTYPE_U8 };
enum titan_redop { TITAN_REDOP_SUM = 0, TITAN_REDOP_MAX, TITAN_REDOP_MIN };
/* Bytes of one element. */
size_t titan_dtype_size(enum titan_dtype t);

struct titan_comm;     /* a communicator (callers use only the functions) */
struct titan_comm_req; /* a non-blocking operation in flight */

int titan_comm_rank(const struct titan_comm *c);
int titan_comm_size(const struct titan_comm *c);
/* World rank of rank `r` of `c`. */
int titan_comm_world_rank(const struct titan_comm *c, int r);
/* The communicator's name ("fsdp", "dp_replicate", "world", ...). */
const char *titan_comm_name(const struct titan_comm *c);

/* Pass as `send` for an in-place operation (the data is in `recv`). */
#define TITAN_IN_PLACE ((const void *)1)

/* Every operation takes `what`, a short description for the flight
 * recorder and error messages ("layer 3 params", "grad norm"); the string
 * is copied.  Counts are elements of `dt`.
 *
 * all_reduce:      recv[i] = op over ranks of send[i], count elements
 * all_gather:      recv[r·count .. (r+1)·count) = send of rank r
 * reduce_scatter:  recv[0..count) = sum over ranks of send[rank·count ..
 *                  (rank+1)·count) (send holds size·count elements); SUM only
 * broadcast:       buf of `root` to every rank
 * send / recv:     point-to-point with a tag >= 0
 * all_to_all_v:    the block send[soff[p] .. soff[p] + scounts[p]) goes to
 *                  rank p and arrives at its recv[roff[r] .. + rcounts[r])
 *                  (r = this rank), where soff / roff are the prefix sums of
 *                  the counts (the blocks packed in rank order); scounts and
 *                  rcounts have size entries, and each rank's rcounts[p]
 *                  must equal p's scounts[r]: learn them first with an
 *                  all_to_all_v of one count per rank (MPI_Alltoallv's
 *                  rule).  The counts are copied; send and recv must not
 *                  overlap (no in place). */
int titan_comm_iall_reduce(struct titan_comm *c, const void *send, void *recv, size_t count,
			   enum titan_dtype dt, enum titan_redop op, const char *what,
			   struct titan_comm_req **req);
int titan_comm_iall_gather(struct titan_comm *c, const void *send, void *recv, size_t count,
			   enum titan_dtype dt, const char *what, struct titan_comm_req **req);
int titan_comm_ireduce_scatter(struct titan_comm *c, const void *send, void *recv, size_t count,
			       enum titan_dtype dt, const char *what, struct titan_comm_req **req);
int titan_comm_ibroadcast(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
			  int root, const char *what, struct titan_comm_req **req);
int titan_comm_isend(struct titan_comm *c, const void *buf, size_t count, enum titan_dtype dt,
		     int dest, int tag, const char *what, struct titan_comm_req **req);
int titan_comm_irecv(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
		     int src, int tag, const char *what, struct titan_comm_req **req);
int titan_comm_iall_to_all_v(struct titan_comm *c, const void *send, const size_t *scounts,
			     void *recv, const size_t *rcounts, enum titan_dtype dt,
			     const char *what, struct titan_comm_req **req);
/* Wait for `req` and free it (NULL: no-op, 0).  Returns the operation's
 * error, if any.  On a timeout it does not return (see above). */
int titan_comm_wait(struct titan_comm_req *req);
/* Has it finished?  (Then titan_comm_wait returns at once.) */
bool titan_comm_test(struct titan_comm_req *req);

/* Blocking forms: the non-blocking call and its wait. */
int titan_comm_all_reduce(struct titan_comm *c, const void *send, void *recv, size_t count,
			  enum titan_dtype dt, enum titan_redop op, const char *what);
int titan_comm_all_gather(struct titan_comm *c, const void *send, void *recv, size_t count,
			  enum titan_dtype dt, const char *what);
int titan_comm_reduce_scatter(struct titan_comm *c, const void *send, void *recv, size_t count,
			      enum titan_dtype dt, const char *what);
int titan_comm_broadcast(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
			 int root, const char *what);
int titan_comm_barrier(struct titan_comm *c, const char *what);
int titan_comm_all_to_all_v(struct titan_comm *c, const void *send, const size_t *scounts,
			    void *recv, const size_t *rcounts, enum titan_dtype dt,
			    const char *what);

/* The MPI communicator behind `c`: a pointer to its MPI_Comm (MPI_Comm *
 * as void *, valid while `c` lives; for parallel HDF5 and
 * titan_ckpt_save_dist), or NULL in a single-process run. */
void *titan_comm_mpi_handle(const struct titan_comm *c);

/* Frees a communicator made by titan_comm_staged_new or _instant_new (the mesh's are the
 * world's: titan_dist_finalize frees them).  NULL-safe. */
void titan_comm_free(struct titan_comm *c);

/* A staged communicator: the collectives of `inner` on buffers that live
 * in `be`'s memory (device memory on cuda), through host memory.  Each
 * operation copies its input to a host staging buffer with be's buf_get
 * when it is issued (after the work queued on `be` before it), runs on
 * `inner` (MPI over host buffers), and its wait copies the result back
 * with buf_set.  The MPI path for CUDA ranks until NCCL works on device
 * buffers directly.  Every buffer given to it must be one of be's (cuda:
 * or host memory, which get/set accept too); the results are those of
 * `inner` bit for bit.  Rank, size and name are inner's, and so are the
 * flight recorder entries and timeouts.  `inner` and `be` must outlive it.
 * 0, or TITAN_E_NOMEM. */
struct titan_backend;
int titan_comm_staged_new(struct titan_comm *inner, struct titan_backend *be,
			  struct titan_comm **out);

/* An instant communicator: rank `rank` of a group of `size` ranks, alone
 * in this process (its peers are virtual: world rank of group rank r is
 * world_base + r x world_stride, as the mesh's strided groups).  Every
 * operation completes when issued and touches no buffer (collectives leave
 * their outputs, receives their buffers, as they were): one process plays
 * one rank of any layout through the real parallel code, for a dry run
 * (titan-estimate's measure pass).  Free with titan_comm_free.  0, or
 * TITAN_E_INVALID (a rank outside the group), TITAN_E_NOMEM. */
int titan_comm_instant_new(const char *name, int rank, int size, int world_base,
			   int world_stride, struct titan_comm **out);

/* --------------------------------------- implementing a communicator
 *
 * A communicator is an op table over its own state: MPI on host buffers
 * (lib/dist/mpi.c: the world's and the mesh's), the staged one above, and
 * later NCCL on device buffers; callers never see which.  The titan_comm_*
 * functions check what every implementation would (root, peer and tag
 * ranges) and dispatch; the blocking forms are the non-blocking entry and
 * wait.  An implementation embeds struct titan_comm as the first member
 * of its state and struct titan_comm_req as the first member of its
 * requests (with `c` set: titan_comm_wait finds the table through it).
 * The entries have the semantics of the functions of the same names. */
struct titan_comm_ops {
	const char *name; /* "mpi", "staged", ("nccl") */
	int (*rank)(const struct titan_comm *c);
	int (*size)(const struct titan_comm *c);
	int (*world_rank)(const struct titan_comm *c, int r);
	const char *(*comm_name)(const struct titan_comm *c);
	void *(*mpi_handle)(const struct titan_comm *c);
	int (*iall_reduce)(struct titan_comm *c, const void *send, void *recv, size_t count,
			   enum titan_dtype dt, enum titan_redop op, const char *what,
			   struct titan_comm_req **req);
	int (*iall_gather)(struct titan_comm *c, const void *send, void *recv, size_t count,
			   enum titan_dtype dt, const char *what, struct titan_comm_req **req);
	int (*ireduce_scatter)(struct titan_comm *c, const void *send, void *recv, size_t count,
			       enum titan_dtype dt, const char *what, struct titan_comm_req **req);
	int (*ibroadcast)(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt,
			  int root, const char *what, struct titan_comm_req **req);
	int (*isend)(struct titan_comm *c, const void *buf, size_t count, enum titan_dtype dt,
		     int dest, int tag, const char *what, struct titan_comm_req **req);
	int (*irecv)(struct titan_comm *c, void *buf, size_t count, enum titan_dtype dt, int src,
		     int tag, const char *what, struct titan_comm_req **req);
	int (*ibarrier)(struct titan_comm *c, const char *what, struct titan_comm_req **req);
	/* NULL: the communicator has none (titan_comm_iall_to_all_v refuses) */
	int (*iall_to_all_v)(struct titan_comm *c, const void *send, const size_t *scounts,
			     void *recv, const size_t *rcounts, enum titan_dtype dt,
			     const char *what, struct titan_comm_req **req);
	/* wait frees the request (never NULL here); test does not */
	int (*wait)(struct titan_comm_req *req);
	bool (*test)(struct titan_comm_req *req);
	/* frees the communicator's state (titan_comm_free) */
	void (*release)(struct titan_comm *c);
};
struct titan_comm {
	const struct titan_comm_ops *ops;
};
struct titan_comm_req {
	struct titan_comm *c;
};

/* ------------------------------------------------------------ the world */

struct titan_dist {
	int rank, size;              /* world */
	bool mpi;                    /* MPI is running (false: one process) */
	int local_rank, local_size;  /* on this node (MPI_COMM_TYPE_SHARED) */
	char host[64];
	struct titan_parallel_dims dims;
	int64_t coord[TITAN_DIM_NDIMS];
	struct titan_comm *comm[TITAN_DIM_NALL]; /* every dimension, flattened ones too */
	/* expert parallelism's group (dims.ep > 1, else NULL): ep consecutive
	 * ranks of dp_shard x cp x tp (titan_parallel_dims_ep_group) */
	struct titan_comm *ep;
	/* the experts' FSDP group under EP (else NULL): the ranks of dp_shard x
	 * cp x tp with this rank's EP rank, in world-rank order (torchtitan's
	 * efsdp mesh) */
	struct titan_comm *efsdp;
};

/* Start MPI if launched under one (see the top), record the rank for log
 * lines (titan_set_rank) when size > 1, install the fatal-signal handler
 * that dumps the flight recorder.  Call once, early in main.  The world
 * communicator exists after this (dist->comm[TITAN_DIM_WORLD]); the mesh
 * after titan_dist_mesh(). */
int titan_dist_init(int *argc, char ***argv, struct titan_dist **out);
/* Build the mesh of `pd` (pd->world_size must be dist->size): the
 * per-dimension communicators (collective over the world). */
int titan_dist_mesh(struct titan_dist *d, const struct titan_parallel_dims *pd);
/* Flight recorder and timeouts from the config's comm.* keys and
 * job.dump_folder. */
int titan_dist_configure(struct titan_dist *d, const struct titan_config *c);
/* The deadline of every later wait, in seconds (> 0). */
void titan_dist_set_timeout(struct titan_dist *d, double seconds);
/* The training step stamped on later operations (messages, recorder). */
void titan_dist_set_step(struct titan_dist *d, int64_t step);
/* Watch a blocking section that is not a titan_comm operation (a parallel
 * HDF5 checkpoint write, an MPI call made elsewhere): if it has not ended
 * within the timeout, the timeout path above runs with `what` as the
 * operation.  Sections do not nest; end one before the next. */
void titan_dist_watch_begin(struct titan_dist *d, const char *what);
void titan_dist_watch_end(struct titan_dist *d);
/* The operations of the flight recorder from sequence number `from` on
 * that are still in the ring, in issue order, to `fn` (times from
 * titan_time_ns(); start is when the progress thread issued it, 0 if it
 * has not yet); returns the next sequence number.  For profiling traces:
 * titan-train writes them as spans of a "comm" track. */
struct titan_comm_span {
	const char *comm, *op, *what;
	size_t bytes;
	int64_t step;
	uint64_t enqueue_ns, start_ns, end_ns; /* end 0: not finished */
};
int64_t titan_dist_comm_spans(struct titan_dist *d, int64_t from,
			      void (*fn)(void *ctx, const struct titan_comm_span *s), void *ctx);
/* Write the flight recorder of this rank now (0 or TITAN_E_IO). */
int titan_dist_dump_traces(struct titan_dist *d, const char *reason);
/* Every rank must run the same job: compare the resolved config (`yaml`,
 * titan_config_write_yaml's text) over the world.  0 when all ranks hold
 * the same text; otherwise TITAN_E_INVALID on every rank, naming the first
 * rank that differs from rank 0 and the first key where it does.
 * Collective over the world; 0 at once on one rank. */
int titan_dist_check_same_config(struct titan_dist *d, const char *yaml, size_t n);
/* Finish: stop the progress threads, free the communicators,
 * MPI_Finalize when `ok` (otherwise MPI_Abort(status) so that a failed
 * rank takes the job down instead of leaving the others in a collective).
 * NULL-safe. */
void titan_dist_finalize(struct titan_dist *d, bool ok, int status);

#ifdef __cplusplus
}
#endif
#endif
