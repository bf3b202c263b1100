/*
 * dist.c — the multi-rank save (titan_ckpt_save_dist): every rank of an MPI
 * communicator takes part in writing ONE logical FOLDER/step-N.h5 with
 * whole tensors (the layout of lib/titan/ckpt.h: the objects, attributes,
 * types and order titan_ckpt_save writes for the unsharded state), whatever
 * the parallel layout: FSDP dim-0 shards, DDP replicas, HSDP both.  Readers
 * (h5py, h5dump, titan_ckpt_load at any other layout) see no difference;
 * only the places of the objects in the file differ (and parallel HDF5
 * allocates datasets early).
 *
 * torchtitan counterpart: dcp.save of components/checkpoint.py, with one
 * HDF5 file in place of a .distcp folder of per-rank files.
 *
 * Two ways to write, chosen at build time:
 *   - parallel HDF5 (hdf5-mpich, TITAN_HDF5_PARALLEL): the file is opened
 *     by every rank through the MPI-IO driver.  Creating groups, datasets
 *     and attributes is collective metadata work (every rank makes the
 *     same calls with the same values); each tensor's rows go in
 *     collective hyperslab writes, each rank selecting the rows it writes
 *     (none when it writes none).  Every rank makes the same number of
 *     H5Dwrite calls per tensor: the most blocks any rank needs (an
 *     MPI_Allreduce at the start gives that and checks that the row counts
 *     add up to each tensor's).
 *   - serial HDF5 with MPI (and titan_ckpt_dist_gather_ for tests): each
 *     tensor's rows are gathered to rank 0 (MPI_Gatherv into a buffer of
 *     one tensor, rows placed at their row0) and rank 0 writes the file
 *     with the serial writer; the other ranks only send.
 *
 * Atomicity: rank 0 makes FOLDER/step-N.h5.tmp.XXXXXX (mkstemp) and
 * broadcasts the name; after the collective close every rank's result is
 * agreed (an MPI_Allreduce MINLOC of the return codes; the failing rank's
 * message is broadcast, so every rank returns the same code and message,
 * "rank R: ..."); only when all succeeded does rank 0 fsync, rename to
 * step-N.h5 and fsync the folder, and that result is agreed again (the
 * final barrier).  On any error rank 0 removes the temporary file, and the
 * ranks wait for that before they return: no step-N.h5 appears, and the
 * previous complete step is untouched.  Results are agreed after every
 * tensor too, so a failure stops the write early.  An HDF5 error inside a
 * collective call on some ranks only cannot be recovered (the others wait
 * in the call), as with any MPI collective: the trainer's watchdog ends
 * such a job.
 *
 * Checksums: every rank computes the CRC32C term of the rows (TP: column
 * windows) it writes into each dataset (h5.c), one MPI_Allreduce(BXOR)
 * before the close gives every rank each dataset's crc32c, which the close
 * writes (collectively: the same values everywhere); the gather path's
 * rank 0 has whole tensors.  titan_ckpt_load_dist checks a multi-rank
 * load the same way: the terms of what the owning ranks read, XOR-reduced.
 *
 * MPI is called on a private duplicate of the caller's communicator
 * (cached on it as an MPI attribute, freed with it; an asynchronous saver
 * owns its own), with MPI_ERRORS_RETURN, so that other threads may use
 * other communicators meanwhile.  HDF5 duplicates it again for the file.
 */
#include "ckpt_impl.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if TITAN_HAVE_MPI
#include <mpi.h>
#include <pthread.h>
#endif

int titan_ckpt_dist_fail_rank_ = -1;
bool titan_ckpt_dist_gather_ = false;

#if TITAN_HAVE_MPI

struct titan_ckpt_comm {
	MPI_Comm user;  /* the caller's communicator */
	MPI_Comm comm;  /* our duplicate */
	int rank, size;
};

static int mpi_check(int err, const char *call)
{
	char s[MPI_MAX_ERROR_STRING] = "";
	int n = 0;

	if (err == MPI_SUCCESS)
		return 0;
	MPI_Error_string(err, s, &n);
	return titan_error(TITAN_E_COMM, "checkpoint: %s failed: %s", call, s);
}

/* An MPI call: 0, or TITAN_E_COMM naming the call and MPI's message. */
#define MPI_TRY(call) mpi_check((call), #call)
#define agree titan_ckpt_comm_agree_

int titan_ckpt_comm_get_(struct titan_ckpt_comm **c, void *mpi_comm, bool threaded)
{
	MPI_Comm user = *(MPI_Comm *)mpi_comm;
	struct titan_ckpt_comm *n;
	int init = 0, fin = 0, level = MPI_THREAD_SINGLE, rc;

	MPI_Initialized(&init);
	MPI_Finalized(&fin);
	if (!init || fin)
		return titan_error(TITAN_E_INVALID, "multi-rank checkpoint: MPI is %s",
				   fin ? "finalized" : "not initialized");
	if (threaded && (MPI_Query_thread(&level), level < MPI_THREAD_MULTIPLE))
		return titan_error(TITAN_E_UNSUPPORTED, "asynchronous multi-rank checkpoints need "
				   "MPI_THREAD_MULTIPLE (the writer thread calls MPI while training "
				   "goes on); initialize MPI with it or save synchronously");
	if (*c && (*c)->user == user)
		return 0;
	titan_ckpt_comm_free_(*c);
	*c = NULL;
	if (!(n = calloc(1, sizeof(*n))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	n->user = user;
	if ((rc = MPI_TRY(MPI_Comm_dup(user, &n->comm))) < 0) {
		free(n);
		return rc;
	}
	if ((rc = MPI_TRY(MPI_Comm_set_errhandler(n->comm, MPI_ERRORS_RETURN))) < 0 ||
	    (rc = MPI_TRY(MPI_Comm_rank(n->comm, &n->rank))) < 0 ||
	    (rc = MPI_TRY(MPI_Comm_size(n->comm, &n->size))) < 0) {
		titan_ckpt_comm_free_(n);
		return rc;
	}
	*c = n;
	return 0;
}

void titan_ckpt_comm_free_(struct titan_ckpt_comm *c)
{
	int fin = 0;

	if (!c)
		return;
	MPI_Finalized(&fin);
	if (!fin)
		MPI_Comm_free(&c->comm);
	free(c);
}

/* Every rank's rc -> one result: the lowest code (the lowest rank among
 * those that have it), with that rank's message, on every rank. */
int titan_ckpt_comm_agree_(const struct titan_ckpt_comm *c, int rc)
{
	struct { int rc, rank; } in = {rc, c->rank}, out;
	char msg[sizeof(titan_error_last()->msg)] = "";
	int e;

	if ((e = MPI_TRY(MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, c->comm))) < 0)
		return e;
	if (out.rc == 0)
		return 0;
	if (out.rank == c->rank)
		snprintf(msg, sizeof(msg), "%s", titan_errmsg());
	if ((e = MPI_TRY(MPI_Bcast(msg, sizeof(msg), MPI_CHAR, out.rank, c->comm))) < 0)
		return e;
	return titan_error(out.rc, "rank %d: %s", out.rank, msg);
}

#if TITAN_HAVE_HDF5
/* The synchronous saves' duplicate, cached on the caller's communicator
 * (an attribute: freed when the caller frees its communicator). */
static int keyval = MPI_KEYVAL_INVALID;
static pthread_once_t keyval_once = PTHREAD_ONCE_INIT;

static int keyval_delete(MPI_Comm comm, int key, void *value, void *extra)
{
	(void)comm, (void)key, (void)extra;
	titan_ckpt_comm_free_(value);
	return MPI_SUCCESS;
}

static void keyval_init(void)
{
	if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, keyval_delete, &keyval, NULL) !=
	    MPI_SUCCESS)
		keyval = MPI_KEYVAL_INVALID;
}

static int cached_comm(void *mpi_comm, struct titan_ckpt_comm **out)
{
	MPI_Comm user = *(MPI_Comm *)mpi_comm;
	struct titan_ckpt_comm *c = NULL;
	int found = 0, init = 0, rc;

	*out = NULL;
	MPI_Initialized(&init);
	if (!init)
		return titan_ckpt_comm_get_(out, mpi_comm, false); /* the error */
	pthread_once(&keyval_once, keyval_init);
	if (keyval == MPI_KEYVAL_INVALID)
		return titan_error(TITAN_E_COMM, "checkpoint: cannot create an MPI attribute key");
	if ((rc = MPI_TRY(MPI_Comm_get_attr(user, keyval, &c, &found))) < 0)
		return rc;
	if (found) {
		*out = c;
		return 0;
	}
	if ((rc = titan_ckpt_comm_get_(&c, mpi_comm, false)) < 0)
		return rc;
	if ((rc = MPI_TRY(MPI_Comm_set_attr(user, keyval, c))) < 0) {
		titan_ckpt_comm_free_(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* One save in progress. */
struct job {
	const struct titan_ckpt_comm *c;
	const struct titan_ckpt_state *st;
	const struct titan_param_table *t;
	unsigned flags;
	enum titan_ckpt_dtype dtype;
	bool full, write_rows, gather;
	char path[4096], tmp[4200];
	int64_t *calls;  /* per parameter: write calls of each rank (the most any
			    needs), then the rows written by all ranks */
	float *buf;      /* gather, rank 0: one whole tensor */
	int *gathered;   /* gather, rank 0: (row0, rows) of every rank, counts, displacements */
};

static int64_t rows_of(const struct job *j, const struct titan_param *p)
{
	/* replicated over TP (the norms): TP rank 0's copy */
	return j->write_rows && (!titan_param_tp_replicated(p) || j->t->opts.tp_rank == 0) ?
	       p->rows : 0;
}

/* The same model on every rank, the row counts of every tensor adding up
 * to its rows (the ranks that write cover every row once), and the write
 * calls per tensor (j->calls: this rank's blocks in, the most of any rank
 * out).  Every rank gets the same result. */
static int plan(struct job *j)
{
	const struct titan_param_table *t = j->t;
	int64_t *rows = j->calls + t->n;
	int n[2] = {t->n, -t->n}, rc;

	if ((rc = MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, n, 2, MPI_INT, MPI_MAX, j->c->comm))) < 0)
		return rc;
	if (n[0] != -n[1])
		return titan_error(TITAN_E_INVALID, "checkpoint '%s': the ranks' models differ "
				   "(%d and %d parameters)", j->path, -n[1], n[0]);
	if ((rc = MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, rows, t->n, MPI_INT64_T, MPI_SUM,
					j->c->comm))) < 0 ||
	    (rc = MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, j->calls, t->n, MPI_INT64_T, MPI_MAX,
					j->c->comm))) < 0)
		return rc;
	for (int i = 0; i < t->n; i++)
		if (rows[i] != t->params[i].gshape[0] * t->params[i].gshape[1])
			return titan_error(TITAN_E_INVALID, "checkpoint '%s': the ranks that write "
					   "hold %lld elements of %s, which has %lld (write_rows "
					   "must cover every element exactly once)", j->path,
					   (long long)rows[i], t->params[i].name,
					   (long long)(t->params[i].gshape[0] * t->params[i].gshape[1]));
	return 0;
}

/* Local checks, buffers and rank 0's temporary file, agreed; then the
 * plan. */
static int prepare(struct job *j, const char *folder)
{
	const struct titan_ckpt_comm *c = j->c;
	const struct titan_param_table *t = j->t;
	struct stat sb;
	char *tmp = NULL;
	int rc = titan_ckpt_check_state_(j->path, j->st, j->flags, j->dtype);

	/* calls, then rows, per parameter */
	if (rc == 0 && !(j->calls = calloc(2 * (size_t)t->n, sizeof(*j->calls))))
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
	for (int i = 0; rc == 0 && i < t->n; i++) {
		const struct titan_param *p = &t->params[i];
		int64_t per = titan_ckpt_rows_per_block_(p->shape[1], j->dtype);

		j->calls[t->n + i] = rows_of(j, p) * p->shape[1]; /* elements */
		j->calls[i] = (rows_of(j, p) + per - 1) / per;
		if (p->tp_dim >= 0 && j->gather && rc == 0)
			rc = titan_error(TITAN_E_UNSUPPORTED, "checkpoint '%s': a tensor-parallel "
					 "model is saved with parallel HDF5 only (this build's "
					 "HDF5 is serial: install libhdf5-mpich-dev)", j->path);
	}
	if (rc == 0 && j->gather && c->rank == 0) {
		int64_t most = 0;

		for (int i = 0; i < t->n; i++) {
			most = t->params[i].numel > most ? t->params[i].numel : most;
			if (t->params[i].shape[0] > INT_MAX ||
			    t->params[i].numel / t->params[i].shape[0] > INT_MAX)
				rc = titan_error(TITAN_E_UNSUPPORTED, "checkpoint '%s': %s is too "
						 "large to gather", j->path, t->params[i].name);
		}
		if (rc == 0 && (!(j->buf = malloc((size_t)most * sizeof(float))) ||
				!(j->gathered = malloc(4 * (size_t)c->size * sizeof(int)))))
			rc = titan_error(TITAN_E_NOMEM, "checkpoint '%s': out of memory for a "
					 "tensor of %lld floats", j->path, (long long)most);
	}
	if (rc == 0 && c->rank == 0 && stat(folder, &sb) != 0)
		rc = titan_ckpt_mkdirs_(folder);
	if (rc == 0 && c->rank == 0 && (rc = titan_ckpt_mktemp_(j->path, &tmp)) == 0)
		snprintf(j->tmp, sizeof(j->tmp), "%s", tmp);
	free(tmp);
	if ((rc = agree(c, rc)) == 0 &&
	    (rc = MPI_TRY(MPI_Bcast(j->tmp, sizeof(j->tmp), MPI_CHAR, 0, c->comm))) == 0)
		rc = plan(j);
	return rc;
}

/* The test hook: this rank's write of the second model tensor fails. */
static int injected(const struct job *j, enum titan_ckpt_part part, int i, int rc)
{
	if (rc == 0 && j->c->rank == titan_ckpt_dist_fail_rank_ && part == TITAN_CKPT_MODEL &&
	    i == 1)
		return titan_error(TITAN_E_IO, "'%s': cannot write model/%s (failure injected by "
				   "a test)", j->tmp, j->t->params[i].name);
	return rc;
}

static const float *arena(const struct job *j, enum titan_ckpt_part part)
{
	return part == TITAN_CKPT_MODEL ? j->st->params :
	       part == TITAN_CKPT_EXP_AVG ? j->st->exp_avg : j->st->exp_avg_sq;
}

/* One tensor, gathered to rank 0 and written there. */
static int gather_one(const struct job *j, struct titan_ckpt_writer *w, enum titan_ckpt_part part,
		      const struct titan_param *p)
{
	const struct titan_ckpt_comm *c = j->c;
	int mine[2] = {(int)p->row0, (int)rows_of(j, p)}, *all = j->gathered;
	int *counts = all ? all + 2 * c->size : NULL, *displs = all ? all + 3 * c->size : NULL;
	MPI_Datatype rt = MPI_DATATYPE_NULL;
	int rc;

	if ((rc = MPI_TRY(MPI_Gather(mine, 2, MPI_INT, all, 2, MPI_INT, 0, c->comm))) < 0 ||
	    (rc = MPI_TRY(MPI_Type_contiguous((int)(p->numel / p->shape[0]), MPI_FLOAT, &rt))) < 0 ||
	    (rc = MPI_TRY(MPI_Type_commit(&rt))) < 0)
		goto done;
	for (int r = 0; all && r < c->size; r++) {
		displs[r] = all[2 * r];
		counts[r] = all[2 * r + 1];
	}
	/* rows as the unit: a count of floats could pass INT_MAX */
	if ((rc = MPI_TRY(MPI_Gatherv(arena(j, part) + p->offset, mine[1], rt, j->buf, counts,
				      displs, rt, 0, c->comm))) < 0)
		goto done;
	if (c->rank == 0)
		rc = titan_ckpt_writer_tensor(w, part, p->name, p->fndim, p->fshape, j->buf,
					      part == TITAN_CKPT_MODEL ? j->dtype : TITAN_CKPT_FLOAT32);
done:
	if (rt != MPI_DATATYPE_NULL)
		MPI_Type_free(&rt);
	return rc;
}

/* The file: open, tensors, training state, close; each step agreed.
 * Returns the agreed result with the file closed on every rank. */
static int write_file(const struct job *j)
{
	const struct titan_ckpt_comm *c = j->c;
	const bool writes = !j->gather || c->rank == 0; /* this rank calls HDF5 */
	struct titan_ckpt_writer_opts_ o = {.tmp = j->tmp, .fapl = -1, .dxpl = H5P_DEFAULT};
	struct titan_ckpt_writer *w = NULL;
	hid_t dxpl = -1;
	int rc = 0;

	quiet();
#if TITAN_HDF5_PARALLEL
	if (!j->gather &&
	    ((o.fapl = H5Pcreate(H5P_FILE_ACCESS)) < 0 ||
	     H5Pset_fapl_mpio(o.fapl, c->comm, MPI_INFO_NULL) < 0 ||
	     H5Pset_coll_metadata_write(o.fapl, true) < 0 ||
	     (dxpl = H5Pcreate(H5P_DATASET_XFER)) < 0 ||
	     H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE) < 0))
		rc = h5fail(TITAN_E_INTERNAL, "cannot set up parallel HDF5 for '%s'", j->path);
#endif
	o.dxpl = dxpl >= 0 ? dxpl : H5P_DEFAULT;
	if (rc == 0 && writes)
		rc = titan_ckpt_writer_open_(j->path, &o, &j->t->dims, j->st->config_yaml, &w);
	rc = agree(c, rc);
	/* the room for the whole file first: a full disk met in a collective
	 * write of some ranks only would leave the others waiting in it */
	if (rc == 0)
		rc = agree(c, c->rank != 0 ? 0 :
			   titan_ckpt_reserve_(j->tmp, j->path,
					       titan_ckpt_size_bound_(j->t, j->full, j->dtype,
								      j->st->config_yaml,
								      j->st->train.dp_world_size)));
	for (int part = 0; rc == 0 && part < (j->full ? TITAN_CKPT_NPARTS : 1); part++) {
		for (int i = 0; rc == 0 && i < j->t->n; i++) {
			const struct titan_param *p = &j->t->params[i];

			int64_t w0, wn;
			const int wdim = titan_param_tp_window(p, &w0, &wn);

			if (j->gather)
				rc = gather_one(j, w, part, p);
			else /* TP: the slice's place in the global tensor */
				rc = titan_ckpt_writer_window_(w, part, p->name, p->fndim, p->fshape,
							       p->row0 + (p->tp_dim == 0 ?
									  p->tp_off : 0),
							       rows_of(j, p), wdim, w0, wn,
							       arena(j, part) + p->offset,
							       part == TITAN_CKPT_MODEL ? j->dtype :
							       TITAN_CKPT_FLOAT32, j->calls[i]);
			rc = agree(c, injected(j, part, i, rc));
		}
	}
	if (rc == 0 && j->full)
		rc = agree(c, writes ? titan_ckpt_writer_train_state(w, &j->st->train) : 0);
	if (rc == 0 && !j->gather) {
		/* each dataset's crc32c: the XOR of the ranks' terms (every rank
		 * made the same datasets; the close writes the attributes) */
		size_t n;
		uint32_t *sums = titan_ckpt_writer_sums_(w, &n);

		rc = agree(c, MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, sums, (int)n, MPI_UINT32_T, MPI_BXOR,
						    c->comm)));
	}
	if (rc < 0) { /* agreed: close without another agreement */
		/* the file is removed anyway: its space back first, so that
		 * the close can flush HDF5's metadata on a full disk */
		if (c->rank == 0 && truncate(j->tmp, 0) != 0)
			titan_log_debug("cannot truncate '%s': %s", j->tmp, strerror(errno));
		titan_ckpt_writer_close(w, rc);
	} else {
		rc = agree(c, titan_ckpt_writer_finish_(w, 0));
		titan_ckpt_writer_close(w, rc);
	}
	if (o.fapl >= 0)
		H5Pclose(o.fapl);
	if (dxpl >= 0)
		H5Pclose(dxpl);
	return rc;
}

/* ------------------------------------------------------------ load */

int titan_ckpt_load_sums_(const struct titan_ckpt_comm *c, struct titan_ckpt_file *f,
			  const struct titan_param_table *t, const bool *parts, bool verify_rows,
			  int rc)
{
	const struct titan_ckpt_info *in = f ? titan_ckpt_file_info(f) : NULL;
	int n[2] = {in ? (int)in->n_tensors : 0, in ? -(int)in->n_tensors : 0}, bad = 0;
	const struct titan_ckpt_tensor_info *first = NULL;
	uint32_t *sums = NULL, got = 0;

	if (rc == 0 && !(sums = calloc(in->n_tensors + 1, sizeof(*sums))))
		rc = titan_error(TITAN_E_NOMEM, "out of memory");
	if ((rc = agree(c, rc)) < 0)
		goto done;
	/* the same file on every rank: the same tensors */
	if ((rc = MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, n, 2, MPI_INT, MPI_MAX, c->comm))) < 0)
		goto done;
	if (n[0] != -n[1]) {
		rc = titan_error(TITAN_E_FORMAT, "'%s': the ranks see %d and %d tensors in it (the "
				 "file changed while it was loaded?)", in->path, -n[1], n[0]);
		goto done;
	}
	for (size_t i = 0; i < in->n_tensors; i++) {
		const struct titan_ckpt_tensor_info *ti = &in->tensors[i];
		const struct titan_param *p = titan_param_find(t, ti->name);

		if (parts[ti->part] && verify_rows && p &&
		    (!titan_param_tp_replicated(p) || t->opts.tp_rank == 0))
			sums[i] = titan_ckpt_file_sum_(f, ti);
	}
	if ((rc = MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, sums, n[0], MPI_UINT32_T, MPI_BXOR,
					c->comm))) < 0)
		goto done;
	for (size_t i = 0; i < in->n_tensors; i++) {
		const struct titan_ckpt_tensor_info *ti = &in->tensors[i];

		if (parts[ti->part] && ti->has_crc32c && sums[i] != ti->crc32c && !bad++) {
			first = ti;
			got = sums[i];
		}
	}
	if (bad)
		rc = titan_error(TITAN_E_FORMAT, "'%s': %s/%s: checksum mismatch (crc32c attribute "
				 "%08x, the data's %08x)%s: the file is damaged", in->path,
				 titan_ckpt_part_name(first->part), first->name, first->crc32c, got,
				 bad > 1 ? ", and more datasets" : "");
done:
	free(sums);
	return rc;
}

int titan_ckpt_save_dist_(const char *folder, int64_t step, const struct titan_ckpt_state *st,
			  unsigned flags, enum titan_ckpt_dtype dtype, struct titan_ckpt_comm *c,
			  bool write_rows, int64_t keep_latest_k, int *removed, char **path_out)
{
	struct job j = {.c = c, .st = st, .t = st->table, .flags = flags, .dtype = dtype,
			.full = !(flags & TITAN_CKPT_MODEL_ONLY), .write_rows = write_rows,
			.gather = !TITAN_HDF5_PARALLEL || titan_ckpt_dist_gather_};
	bool failed;
	int rc;

	if (path_out)
		*path_out = NULL;
	if (removed)
		*removed = 0;
	if (step < 0)
		return titan_error(TITAN_E_INVALID, "checkpoint step %lld < 0", (long long)step);
	if ((rc = titan_ckpt_path(j.path, sizeof(j.path), folder, step)) < 0)
		return rc;
	if ((rc = prepare(&j, folder)) == 0)
		rc = write_file(&j);
	failed = rc < 0; /* agreed by every rank (or the communicator failed) */
	if (c->rank == 0 && j.tmp[0]) {
		rc = titan_ckpt_commit_(j.tmp, j.path, rc); /* or remove it */
		if (rc == 0 && keep_latest_k > 0)
			rc = titan_ckpt_prune(folder, keep_latest_k, removed);
	}
	if (!failed)
		rc = agree(c, rc); /* also the final barrier */
	else if (rc != TITAN_E_COMM)
		MPI_Barrier(c->comm); /* the temporary file is gone when any rank returns */
	if (rc == 0 && path_out && !(*path_out = titan_strdup(j.path)))
		rc = TITAN_E_NOMEM;
	free(j.calls);
	free(j.buf);
	free(j.gathered);
	return rc;
}
#endif /* TITAN_HAVE_HDF5 */
#endif /* TITAN_HAVE_MPI */

#if !TITAN_HAVE_MPI
int titan_ckpt_comm_get_(struct titan_ckpt_comm **c, void *mpi_comm, bool threaded)
{
	(void)c, (void)mpi_comm, (void)threaded;
	return titan_error(TITAN_E_UNSUPPORTED, "multi-rank checkpoints: titan was built without "
			   "MPI (install libmpich-dev and rebuild)");
}

void titan_ckpt_comm_free_(struct titan_ckpt_comm *c)
{
	(void)c;
}

int titan_ckpt_comm_agree_(const struct titan_ckpt_comm *c, int rc)
{
	(void)c;
	return rc;
}
#endif

#if !TITAN_HAVE_MPI || !TITAN_HAVE_HDF5
/* Only reached with a communicator from titan_ckpt_comm_get_, which needs
 * MPI: the missing piece is HDF5. */
int titan_ckpt_save_dist_(const char *folder, int64_t step, const struct titan_ckpt_state *st,
			  unsigned flags, enum titan_ckpt_dtype dtype, struct titan_ckpt_comm *c,
			  bool write_rows, int64_t keep_latest_k, int *removed, char **path_out)
{
	(void)folder, (void)step, (void)st, (void)flags, (void)dtype, (void)c, (void)write_rows;
	(void)keep_latest_k;
	if (removed)
		*removed = 0;
	if (path_out)
		*path_out = NULL;
	return NO_HDF5;
}

int titan_ckpt_load_sums_(const struct titan_ckpt_comm *c, struct titan_ckpt_file *f,
			  const struct titan_param_table *t, const bool *parts, bool verify_rows,
			  int rc)
{
	(void)c, (void)f, (void)t, (void)parts, (void)verify_rows;
	return rc;
}
#endif

int titan_ckpt_save_dist(const char *folder, int64_t step, const struct titan_ckpt_state *st,
			 unsigned flags, enum titan_ckpt_dtype dtype, void *mpi_comm,
			 bool write_rows, char **path_out)
{
	if (!mpi_comm)
		return titan_ckpt_save(folder, step, st, flags, dtype, path_out);
	if (path_out)
		*path_out = NULL;
#if !TITAN_HAVE_MPI
	(void)write_rows;
	return titan_ckpt_comm_get_(NULL, mpi_comm, false); /* the error */
#elif !TITAN_HAVE_HDF5
	(void)write_rows;
	return NO_HDF5;
#else
	struct titan_ckpt_comm *c;
	int rc;

	if ((rc = cached_comm(mpi_comm, &c)) < 0)
		return rc;
	return titan_ckpt_save_dist_(folder, step, st, flags, dtype, c, write_rows, 0, NULL,
				     path_out);
#endif
}

int titan_ckpt_load_dist(const char *path, struct titan_ckpt_state *st, unsigned flags,
			 void *mpi_comm, bool verify_rows)
{
	if (!mpi_comm)
		return titan_ckpt_load(path, st, flags);
#if !TITAN_HAVE_MPI
	(void)path, (void)st, (void)flags, (void)verify_rows;
	return titan_ckpt_comm_get_(NULL, mpi_comm, false); /* the error */
#elif !TITAN_HAVE_HDF5
	(void)path, (void)st, (void)flags, (void)verify_rows;
	return NO_HDF5;
#else
	struct titan_ckpt_comm *c;
	int rc;

	if ((rc = cached_comm(mpi_comm, &c)) < 0)
		return rc;
	return titan_ckpt_load_(path, st, flags, c, verify_rows);
#endif
}
