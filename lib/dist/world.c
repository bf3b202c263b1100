/*
 * world.c — the ranks of a job (titan/dist.h): MPI start-up when a launcher
 * started the process, the mesh's communicators, timeouts with a heartbeat
 * that names the ranks that stopped answering, the flight recorder
 * (torchtitan's comm.trace_buf_size / save_traces_folder, PyTorch's NCCL
 * flight recorder) and the end of the job.
 */
#include "dist_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TAG_PING 7001
#define TAG_PONG 7002

struct rec {
	int64_t seq, step;
	char comm[32], op[16], what[96];
	size_t bytes;
	uint64_t t_enqueue, t_start, t_end; /* titan_time_ns(); 0: not yet */
	enum dist_rec_state state;
};

struct world {
	struct titan_dist pub;          /* first: a titan_dist * is a world * */
	double timeout;                 /* seconds */
	_Atomic int64_t step;
	uint64_t t0;
	/* flight recorder */
	pthread_mutex_t rlock;
	struct rec *ring;
	int64_t cap, next;
	char traces_dir[4096];
	/* heartbeat listener and watchdog */
#if TITAN_HAVE_MPI
	MPI_Comm hb;
#endif
	pthread_t listener;
	bool listening;
	atomic_bool stop;
	pthread_mutex_t wlock;
	char watch_what[96];
	double watch_deadline;          /* seconds since t0; 0: none */
	atomic_int exiting;
};

static struct world *the_world; /* for the fatal-signal handler */

static double now_s(const struct world *w)
{
	return (double)(titan_time_ns() - w->t0) * 1e-9;
}

/* ------------------------------------------------------- flight recorder */

int64_t dist_recorder_add(struct titan_dist *d, const char *comm, const char *op,
			  const char *what, size_t bytes)
{
	struct world *w = (struct world *)d;
	int64_t seq;

	pthread_mutex_lock(&w->rlock);
	seq = w->next++;
	if (w->cap > 0) {
		struct rec *r = &w->ring[seq % w->cap];

		memset(r, 0, sizeof(*r));
		r->seq = seq;
		r->step = atomic_load(&w->step);
		snprintf(r->comm, sizeof(r->comm), "%s", comm);
		snprintf(r->op, sizeof(r->op), "%s", op);
		snprintf(r->what, sizeof(r->what), "%s", what);
		r->bytes = bytes;
		r->t_enqueue = titan_time_ns();
		r->state = DIST_REC_QUEUED;
	}
	pthread_mutex_unlock(&w->rlock);
	return seq;
}

void dist_recorder_update(struct titan_dist *d, int64_t seq, enum dist_rec_state st)
{
	struct world *w = (struct world *)d;

	pthread_mutex_lock(&w->rlock);
	if (w->cap > 0 && seq > w->next - 1 - w->cap && seq < w->next) {
		struct rec *r = &w->ring[seq % w->cap];

		r->state = st;
		if (st == DIST_REC_STARTED)
			r->t_start = titan_time_ns();
		else if (st == DIST_REC_COMPLETED)
			r->t_end = titan_time_ns();
	}
	pthread_mutex_unlock(&w->rlock);
}

/* Seconds since start-up, or -1 for "not yet". */
static double rel(const struct world *w, uint64_t ns)
{
	return ns ? (double)(ns - w->t0) * 1e-9 : -1.0;
}

int64_t titan_dist_comm_spans(struct titan_dist *d, int64_t from,
			      void (*fn)(void *ctx, const struct titan_comm_span *s), void *ctx)
{
	struct world *w = (struct world *)d;
	int64_t next;

	pthread_mutex_lock(&w->rlock);
	next = w->next;
	if (from < next - w->cap)
		from = next - w->cap;
	for (int64_t q = from < 0 ? 0 : from; fn && w->cap > 0 && q < next; q++) {
		const struct rec *r = &w->ring[q % w->cap];
		struct titan_comm_span s = {r->comm, r->op, r->what, r->bytes, r->step,
					    r->t_enqueue, r->t_start, r->t_end};

		fn(ctx, &s);
	}
	pthread_mutex_unlock(&w->rlock);
	return next;
}

static const char *state_name(enum dist_rec_state s)
{
	return s == DIST_REC_COMPLETED ? "completed" : s == DIST_REC_STARTED ? "started" : "queued";
}

/* JSON string contents (the names are ours: escape quotes and controls). */
static void put_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", (unsigned char)*s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static int dump(struct world *w, const char *reason, bool locked)
{
	char path[4200], tmp[4300];
	FILE *f;
	int64_t first;
	int fd;

	if (w->cap <= 0 || !*w->traces_dir)
		return 0;
	for (char *p = w->traces_dir + 1; *p; p++) { /* mkdir -p */
		if (*p == '/') {
			*p = '\0';
			mkdir(w->traces_dir, 0777);
			*p = '/';
		}
	}
	mkdir(w->traces_dir, 0777);
	snprintf(path, sizeof(path), "%s/rank%d.json", w->traces_dir, w->pub.rank);
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	/* a fresh file, never through a symbolic link planted at the name (the
	 * rename below replaces a link at `path`) (issue 21) */
	unlink(tmp);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666)) < 0 ||
	    !(f = fdopen(fd, "w"))) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		return titan_error(TITAN_E_IO, "cannot create '%s': %s", tmp, strerror(e));
	}
	if (!locked)
		pthread_mutex_lock(&w->rlock);
	first = w->next > w->cap ? w->next - w->cap : 0;
	fprintf(f, "{\"format\": \"titan-flight-recorder\", \"version\": 1, \"rank\": %d, "
		"\"world_size\": %d, \"host\": ", w->pub.rank, w->pub.size);
	put_str(f, w->pub.host);
	fprintf(f, ", \"pid\": %d, \"reason\": ", (int)getpid());
	put_str(f, reason);
	fprintf(f, ", \"step\": %lld, \"time_s\": %.6f, \"entries\": [",
		(long long)atomic_load(&w->step), now_s(w));
	for (int64_t s = first; s < w->next; s++) {
		const struct rec *r = &w->ring[s % w->cap];

		fprintf(f, "%s\n  {\"seq\": %lld, \"comm\": ", s > first ? "," : "", (long long)r->seq);
		put_str(f, r->comm);
		fprintf(f, ", \"op\": ");
		put_str(f, r->op);
		fprintf(f, ", \"what\": ");
		put_str(f, r->what);
		fprintf(f, ", \"bytes\": %zu, \"step\": %lld, \"state\": \"%s\", \"t_enqueue\": %.6f, "
			"\"t_start\": %.6f, \"t_end\": %.6f}", r->bytes, (long long)r->step,
			state_name(r->state), rel(w, r->t_enqueue), rel(w, r->t_start),
			rel(w, r->t_end));
	}
	fprintf(f, "\n]}\n");
	if (!locked)
		pthread_mutex_unlock(&w->rlock);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		return titan_error(TITAN_E_IO, "cannot write '%s': %s", path, strerror(errno));
	}
	return 0;
}

int titan_dist_dump_traces(struct titan_dist *d, const char *reason)
{
	return dump((struct world *)d, reason, false);
}

static void on_fatal(int sig)
{
	if (the_world && !atomic_exchange(&the_world->exiting, 1))
		dump(the_world, strsignal(sig), true);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* ------------------------------------------------------------ timeouts */

double dist_timeout(const struct titan_dist *d)
{
	return ((const struct world *)d)->timeout;
}

void titan_dist_set_timeout(struct titan_dist *d, double seconds)
{
	if (d && seconds > 0)
		((struct world *)d)->timeout = seconds;
}

void titan_dist_set_step(struct titan_dist *d, int64_t step)
{
	if (d)
		atomic_store(&((struct world *)d)->step, step);
}

/* Which ranks still answer: ping every other rank on the heartbeat
 * communicator and collect pongs for a grace period; a rank whose
 * listener thread runs answers within milliseconds. */
static void probe(struct world *w, bool *alive)
{
	for (int r = 0; r < w->pub.size; r++)
		alive[r] = r == w->pub.rank;
#if TITAN_HAVE_MPI
	const char *g = getenv("TITAN_COMM_HEARTBEAT_S");
	double grace = g ? atof(g) : 3.0, t_end;
	char b = 1;

	if (grace <= 0)
		grace = 3.0;
	for (int r = 0; r < w->pub.size; r++) {
		MPI_Request q;

		if (r != w->pub.rank && MPI_Isend(&b, 1, MPI_CHAR, r, TAG_PING, w->hb, &q) == MPI_SUCCESS)
			MPI_Request_free(&q);
	}
	t_end = now_s(w) + grace;
	while (now_s(w) < t_end) {
		int flag = 0;
		MPI_Status st;

		if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_PONG, w->hb, &flag, &st) == MPI_SUCCESS && flag) {
			MPI_Recv(&b, 1, MPI_CHAR, st.MPI_SOURCE, TAG_PONG, w->hb, MPI_STATUS_IGNORE);
			alive[st.MPI_SOURCE] = true;
			continue;
		}
		struct timespec ts = {0, 5000000};

		nanosleep(&ts, NULL);
	}
#endif
}

void dist_timeout_exit(struct titan_dist *d, const char *op, const char *what, const char *comm,
		       size_t bytes, double timeout)
{
	struct world *w = (struct world *)d;
	bool *alive = calloc((size_t)w->pub.size, sizeof(bool));
	char missing[512] = "", answering[512] = "", size[32];
	size_t nm = 0, na = 0;

	if (atomic_exchange(&w->exiting, 1)) /* another thread is on it */
		for (;;)
			pause();
	if (alive) {
		probe(w, alive);
		for (int r = 0; r < w->pub.size; r++) {
			char *buf = alive[r] ? answering : missing;
			size_t *n = alive[r] ? &na : &nm;

			if (*n < sizeof(missing) - 16)
				*n += (size_t)snprintf(buf + *n, sizeof(missing) - *n, "%s%d",
						       *n ? "," : "", r);
		}
	}
	if (bytes >= 1 << 20)
		snprintf(size, sizeof(size), "%.1f MiB", (double)bytes / 1048576.0);
	else
		snprintf(size, sizeof(size), "%zu bytes", bytes);
	const bool several = strchr(missing, ',') != NULL;

	if (nm)
		titan_log_error("comm timeout: %s '%s' (%s, %s) at step %lld did not finish in %.0f s; "
				"%s %s %s not answer (ranks %s do); the flight recorder is in "
				"%s/rank%d.json", op, what, comm, size, (long long)atomic_load(&w->step),
				timeout, several ? "ranks" : "rank", missing, several ? "do" : "does",
				*answering ? answering : "none", w->traces_dir, w->pub.rank);
	else
		titan_log_error("comm timeout: %s '%s' (%s, %s) at step %lld did not finish in %.0f s, "
				"yet every rank answers (ranks issuing different collectives?); the "
				"flight recorder is in %s/rank%d.json", op, what, comm, size,
				(long long)atomic_load(&w->step), timeout, w->traces_dir, w->pub.rank);
	if (nm)
		fprintf(stderr, "titan: error: rank%s %s %s not answer (%s at step %lld)\n",
			several ? "s" : "", missing, several ? "do" : "does", op,
			(long long)atomic_load(&w->step));
	dump(w, "comm timeout", false);
	fflush(NULL);
	sleep(1); /* the other ranks print theirs */
	_exit(TITAN_EXIT_COMM);
}

void titan_dist_watch_begin(struct titan_dist *d, const char *what)
{
	struct world *w = (struct world *)d;

	if (!w || w->pub.size <= 1)
		return;
	pthread_mutex_lock(&w->wlock);
	snprintf(w->watch_what, sizeof(w->watch_what), "%s", what);
	w->watch_deadline = now_s(w) + w->timeout;
	pthread_mutex_unlock(&w->wlock);
}

void titan_dist_watch_end(struct titan_dist *d)
{
	struct world *w = (struct world *)d;

	if (!w || w->pub.size <= 1)
		return;
	pthread_mutex_lock(&w->wlock);
	w->watch_deadline = 0;
	pthread_mutex_unlock(&w->wlock);
}

#if TITAN_HAVE_MPI
/* Answers pings (so a slow but live rank is not reported missing) and
 * watches the sections of titan_dist_watch_begin. */
static void *listen_thread(void *arg)
{
	struct world *w = arg;

	while (!atomic_load(&w->stop)) {
		int flag = 0;
		MPI_Status st;
		char b;

		if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_PING, w->hb, &flag, &st) == MPI_SUCCESS && flag) {
			MPI_Request q;

			MPI_Recv(&b, 1, MPI_CHAR, st.MPI_SOURCE, TAG_PING, w->hb, MPI_STATUS_IGNORE);
			if (MPI_Isend(&b, 1, MPI_CHAR, st.MPI_SOURCE, TAG_PONG, w->hb, &q) == MPI_SUCCESS)
				MPI_Request_free(&q);
			continue;
		}
		pthread_mutex_lock(&w->wlock);
		double dl = w->watch_deadline;
		char what[96];

		snprintf(what, sizeof(what), "%s", w->watch_what);
		pthread_mutex_unlock(&w->wlock);
		if (dl > 0 && now_s(w) > dl)
			dist_timeout_exit(&w->pub, "section", what, "world", 0, w->timeout);
		struct timespec ts = {0, 20000000};

		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* Started by a launcher?  (Otherwise titan-train runs alone without
 * touching MPI: MPI_Init as a singleton would work but costs a second and
 * needs no launcher environment.) */
static bool launched(void)
{
	static const char *const vars[] = {"PMI_RANK", "PMI_FD", "PMI_PORT", "PMIX_RANK",
					   "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID"};
	const char *force = getenv("TITAN_MPI");

	if (force)
		return strcmp(force, "0") != 0;
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (getenv(vars[i]))
			return true;
	return false;
}
#endif

/* ------------------------------------------------------------ life cycle */

int titan_dist_init(int *argc, char ***argv, struct titan_dist **out)
{
	struct world *w = calloc(1, sizeof(*w));
	struct titan_dist *d = &w->pub;
	int rc;

	*out = NULL;
	if (!w)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	w->timeout = 300;
	w->t0 = titan_time_ns();
	w->cap = 2000;
	pthread_mutex_init(&w->rlock, NULL);
	pthread_mutex_init(&w->wlock, NULL);
	d->size = d->local_size = 1;
	if (gethostname(d->host, sizeof(d->host)) != 0)
		snprintf(d->host, sizeof(d->host), "?");
	d->host[sizeof(d->host) - 1] = '\0';
#if TITAN_HAVE_MPI
	if (launched()) {
		int provided = 0, err = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
		MPI_Comm local;

		if (err != MPI_SUCCESS) {
			free(w);
			return titan_error(TITAN_E_COMM, "MPI_Init_thread failed (error %d)", err);
		}
		if (provided < MPI_THREAD_MULTIPLE) {
			MPI_Finalize();
			free(w);
			return titan_error(TITAN_E_COMM, "the MPI library does not provide "
					   "MPI_THREAD_MULTIPLE (it gave level %d)", provided);
		}
		d->mpi = true;
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
		MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
		MPI_Comm_size(MPI_COMM_WORLD, &d->size);
		MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local);
		MPI_Comm_rank(local, &d->local_rank);
		MPI_Comm_size(local, &d->local_size);
		MPI_Comm_free(&local);
		MPI_Comm_dup(MPI_COMM_WORLD, &w->hb);
		if (d->size > 1) {
			titan_set_rank(d->rank);
			if (pthread_create(&w->listener, NULL, listen_thread, w) == 0)
				w->listening = true;
		}
	}
#else
	(void)argc;
	(void)argv;
#endif
	if (d->size == 1) {
		/* plain srun without --mpi=pmi2 starts N separate 1-rank runs */
		const char *nt = getenv("SLURM_STEP_NUM_TASKS");

		if (nt && getenv("SLURM_PROCID") && atoi(nt) > 1) {
			titan_dist_finalize(d, true, 0);
			return titan_error(TITAN_E_INVALID, "srun started %s tasks but they do not form "
					   "one MPI job (each would train alone): use srun --mpi=pmi2 "
					   "or mpiexec", nt);
		}
	}
	if (!(w->ring = calloc((size_t)w->cap, sizeof(*w->ring))))
		w->cap = 0;
	if ((rc = dist_comm_new(d, "world", 0, d->rank, &d->comm[TITAN_DIM_WORLD])) < 0) {
		titan_dist_finalize(d, false, 1);
		return rc;
	}
	the_world = w;
	signal(SIGSEGV, on_fatal);
	signal(SIGBUS, on_fatal);
	signal(SIGFPE, on_fatal);
	*out = d;
	return 0;
}

int titan_dist_mesh(struct titan_dist *d, const struct titan_parallel_dims *pd)
{
	static const unsigned flat[TITAN_DIM_NALL] = {
		[TITAN_DIM_PP] = 1u << TITAN_DIM_PP,
		[TITAN_DIM_DP_REPLICATE] = 1u << TITAN_DIM_DP_REPLICATE,
		[TITAN_DIM_DP_SHARD] = 1u << TITAN_DIM_DP_SHARD,
		[TITAN_DIM_CP] = 1u << TITAN_DIM_CP,
		[TITAN_DIM_TP] = 1u << TITAN_DIM_TP,
		[TITAN_DIM_DP] = 1u << TITAN_DIM_DP_REPLICATE | 1u << TITAN_DIM_DP_SHARD,
		[TITAN_DIM_FSDP] = 1u << TITAN_DIM_DP_SHARD | 1u << TITAN_DIM_CP,
		[TITAN_DIM_LOSS] = 1u << TITAN_DIM_DP_REPLICATE | 1u << TITAN_DIM_DP_SHARD |
				   1u << TITAN_DIM_CP,
	};
	int rc;

	if (pd->world_size != d->size)
		return titan_error(TITAN_E_INVALID, "the mesh is for %lld ranks, %d were started",
				   (long long)pd->world_size, d->size);
	d->dims = *pd;
	titan_parallel_dims_coords(pd, d->rank, d->coord);
	for (int k = 0; k < TITAN_DIM_NALL; k++) {
		int64_t c[TITAN_DIM_NDIMS];

		if (k == TITAN_DIM_WORLD)
			continue;
		dist_comm_free(d->comm[k]);
		d->comm[k] = NULL;
		/* the ranks that differ only in the dimension(s) of k share the
		 * other coordinates: that is the color */
		for (int j = 0; j < TITAN_DIM_NDIMS; j++)
			c[j] = flat[k] & (1u << j) ? 0 : d->coord[j];
		if ((rc = dist_comm_new(d, titan_mesh_dim_name((enum titan_mesh_dim)k),
					(int)titan_parallel_dims_rank(pd, c), d->rank, &d->comm[k])) < 0)
			return rc;
	}
	dist_comm_free(d->ep);
	dist_comm_free(d->efsdp);
	d->ep = d->efsdp = NULL;
	for (int k = 0; k < 2 && pd->ep > 1; k++) {
		int64_t first, stride, size, index;

		/* the group's first world rank names it */
		titan_parallel_dims_ep_group(pd, d->rank, k == 0, &first, &stride, &size, &index);
		if ((rc = dist_comm_new(d, k == 0 ? "ep" : "efsdp", (int)first, d->rank,
					k == 0 ? &d->ep : &d->efsdp)) < 0)
			return rc;
	}
	return 0;
}

int titan_dist_configure(struct titan_dist *d, const struct titan_config *c)
{
	struct world *w = (struct world *)d;

	/* an absolute comm.save_traces_folder is that folder (os.path.join) */
	if (titan_path_join(w->traces_dir, sizeof(w->traces_dir), c->job.dump_folder,
			    c->comm.save_traces_folder) < 0)
		return titan_error_prefix("comm.save_traces_folder");
	pthread_mutex_lock(&w->rlock);
	if (c->comm.trace_buf_size != w->cap) {
		struct rec *r = c->comm.trace_buf_size > 0
			? calloc((size_t)c->comm.trace_buf_size, sizeof(*r)) : NULL;

		if (r || c->comm.trace_buf_size == 0) {
			free(w->ring);
			w->ring = r;
			w->cap = c->comm.trace_buf_size;
			w->next = 0;
		}
	}
	pthread_mutex_unlock(&w->rlock);
	w->timeout = (double)c->comm.init_timeout_seconds;
	return 0;
}

void titan_dist_finalize(struct titan_dist *d, bool ok, int status)
{
	struct world *w = (struct world *)d;

	if (!w)
		return;
#if TITAN_HAVE_MPI
	if (d->mpi && !ok && d->size > 1) {
		/* the other ranks usually fail the same way within milliseconds:
		 * a moment for their messages to reach the launcher before the
		 * abort kills them (a bad config named by one rank only, or
		 * by none, when the first abort came too soon) */
		struct timespec grace = {0, 200 * 1000 * 1000};

		fflush(NULL);
		nanosleep(&grace, NULL);
		MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
	}
#else
	(void)ok;
	(void)status;
#endif
	atomic_store(&w->stop, true);
	if (w->listening)
		pthread_join(w->listener, NULL);
	for (int k = 0; k < TITAN_DIM_NALL; k++)
		dist_comm_free(d->comm[k]);
	dist_comm_free(d->ep);
	dist_comm_free(d->efsdp);
#if TITAN_HAVE_MPI
	if (d->mpi) {
		MPI_Comm_free(&w->hb);
		MPI_Finalize();
	}
#endif
	if (the_world == w)
		the_world = NULL;
	free(w->ring);
	pthread_mutex_destroy(&w->rlock);
	pthread_mutex_destroy(&w->wlock);
	free(w);
}
