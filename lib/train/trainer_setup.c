/*
 * trainer_setup.c — the trainer's set-up apart from the model: the layout
 * and the keys checked, the data loaders, the dump folder's lock, and the
 * start-up log lines (ranks, parallelism, model, peak, what a step runs).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sched.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "titan/core.h"
#include "titan/data.h"
#include "trainer_impl.h"

int titan_mkdirs(const char *path)
{
	char tmp[4096];

	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
			return titan_error(TITAN_E_IO, "cannot create '%s': %s", tmp, strerror(errno));
		*p = '/';
	}
	if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
		return titan_error(TITAN_E_IO, "cannot create '%s': %s", tmp, strerror(errno));
	return 0;
}

int titan_trainer_check_layout(struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;
	int rc;

	if ((rc = titan_layout_resolve(&t->layout, c, &t->dims, t->dist->size, t->dist->rank)) < 0)
		return rc;
	titan_llama_opts_from_layout(&t->mo, c, &t->layout);
	if (t->layout.tp_degree > 1 && c->parallelism.enable_async_tensor_parallel)
		return titan_error(TITAN_E_INVALID, "parallelism.enable_async_tensor_parallel: "
				   "not supported (the CPU path runs TP's collectives between the "
				   "matmuls); set it to false");
	if (t->cfg.parallelism.data_parallel_replicate_degree < 1)
		return titan_error(TITAN_E_INVALID, "parallelism.data_parallel_replicate_degree");
	return 0;
}

/* Keys torchtitan has that this trainer cannot honour are refused, never
 * accepted and ignored; each message says what to do instead. */
int titan_trainer_check_supported(const struct titan_config *c)
{
	if (c->model.converters.n > 0)
		return titan_error(TITAN_E_INVALID, "model.converters: '%s' needs the CUDA "
				   "backend; titan-train's CPU path has no converters (remove the key)",
				   c->model.converters.items[0]);
	if (c->training.dtype_e != TITAN_MASTER_FLOAT32)
		return titan_error(TITAN_E_INVALID, "training.dtype: '%s' master weights need "
				   "the CUDA backend; the CPU path keeps them in float32",
				   c->training.dtype);
	if (c->optimizer.early_step_in_backward)
		return titan_error(TITAN_E_INVALID, "optimizer.early_step_in_backward: not "
				   "supported (AdamW steps once the global gradient norm is known, "
				   "after backward); set it to false");
	return 0;
}

int titan_trainer_set_docs(struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;
	struct titan_loader_info li;

	if (!t->mo.block_causal)
		return 0;
	titan_loader_get_info(t->train, &li);
	t->mo.doc_eos = li.eos_id;
	t->mo.doc_bos = li.eos_id < 0 ? li.bos_id : -1;
	if (li.eos_id < 0 && li.bos_id < 0)
		return titan_error(TITAN_E_INVALID, "training.attn_mask_type: block_causal needs "
				   "document boundaries, but the shards in '%s' have neither an EOS "
				   "nor a BOS id (titan-shard --eos-id)", c->training.dataset_path);
	if (li.eos_id < 0)
		titan_log_info("training.attn_mask_type block_causal: the shards have no EOS id; "
			       "documents start at BOS id %lld", (long long)li.bos_id);
	return 0;
}

int titan_trainer_open_loaders(struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;
	struct titan_loader_opts lo;
	int rc;

	titan_loader_opts_default(&lo);
	lo.dir = c->training.dataset_path;
	lo.split = "train";
	lo.seq_len = c->training.seq_len;
	lo.local_batch_size = c->training.local_batch_size;
	lo.dp_rank = (int)t->dp_rank;
	lo.dp_degree = (int)t->dp_degree;
	lo.shuffle = c->training.shuffle;
	lo.seed = (uint64_t)c->training.seed;
	lo.vocab_size = (uint32_t)t->dims.vocab_size;
	lo.verify = true; /* payload CRC32C and ids, once per shard this rank reads */
	if ((rc = titan_loader_open(&lo, &t->train)) < 0)
		return rc;
	if (c->validation.enable) {
		lo.dir = *c->validation.dataset_path ? c->validation.dataset_path
						     : c->training.dataset_path;
		lo.split = "val";
		/* -1 follows training (torchtitan validates with the training
		 * shapes); validate.c refused a longer validation.seq_len */
		t->val_seq = c->validation.seq_len > 0 ? c->validation.seq_len
						       : c->training.seq_len;
		t->val_rows = c->validation.local_batch_size > 0
				      ? c->validation.local_batch_size
				      : c->training.local_batch_size;
		if (t->val_seq > c->training.seq_len)
			return titan_error(TITAN_E_INVALID, "validation.seq_len: %lld is longer "
					   "than training.seq_len %lld",
					   (long long)t->val_seq, (long long)c->training.seq_len);
		lo.seq_len = t->val_seq;
		lo.local_batch_size = t->val_rows;
		lo.infinite = false;
		lo.shuffle = false;
		if ((rc = titan_loader_open(&lo, &t->val)) < 0)
			return rc;
		/* another shape is read into its own buffers and regrouped into
		 * training-shaped batches (trainer.c, validate) */
		if (t->val_seq != c->training.seq_len ||
		    t->val_rows != c->training.local_batch_size) {
			size_t bytes = (size_t)(t->val_rows * t->val_seq) * sizeof(int32_t);
			t->val_inputs = titan_malloc(bytes, TITAN_MEM_DATA);
			t->val_labels = titan_malloc(bytes, TITAN_MEM_DATA);
			if (!t->val_inputs || !t->val_labels)
				return titan_error(TITAN_E_NOMEM, "validation batch: %zu bytes",
						   bytes);
		}
	}
	return 0;
}

/* One job per dump folder: two titan-train processes appending to one
 * metrics.jsonl and replacing each other's checkpoints corrupt both.  Rank
 * 0 holds an exclusive flock on DUMP/.titan-train.lock for the life of the
 * process (the kernel drops it when the process ends, however it ends);
 * the file says who holds it. */
int titan_trainer_lock_dump_folder(struct titan_trainer *t)
{
	const char *dir = t->cfg.job.dump_folder;
	char path[4200], who[256] = "", host[64] = "?";
	int fd, rc, err;
	ssize_t n;

	if ((rc = titan_mkdirs(dir)) < 0)
		return rc;
	if ((rc = titan_path_join(path, sizeof(path), dir, ".titan-train.lock")) < 0)
		return rc;
	/* a symbolic link at the name is replaced, never written through: the
	 * ftruncate below would empty the file it points at (issue 21) */
	if ((rc = titan_create_nofollow(path, O_RDWR, &fd)) < 0)
		return rc;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		err = errno;
		if ((n = pread(fd, who, sizeof(who) - 1, 0)) > 0)
			who[n] = '\0';
		who[strcspn(who, "\n")] = '\0';
		close(fd);
		if (err == EWOULDBLOCK)
			return titan_error(TITAN_E_IO, "job.dump_folder '%s' is in use by another "
					   "titan-train (%s): two runs in one folder would corrupt its "
					   "metrics and checkpoints; give this one its own "
					   "job.dump_folder", dir, *who ? who : "which one is unknown");
		return titan_error(TITAN_E_IO, "cannot lock '%s': %s", path, strerror(err));
	}
	gethostname(host, sizeof(host) - 1);
	if (ftruncate(fd, 0) == 0)
		dprintf(fd, "pid %lld on %s\n", (long long)getpid(), host);
	t->lock_fd = fd + 1;
	return 0;
}

/* Which process is which rank: a launcher that kills the job reports PIDs
 * and hosts ("BAD TERMINATION ... PID 1234 RUNNING AT node7"), the rest of
 * titan speaks of ranks. */
int titan_trainer_log_ranks(struct titan_trainer *t)
{
	struct who {
		int64_t pid;
		char host[56];
	} me = {(int64_t)getpid(), ""}, *all = calloc((size_t)t->dist->size, sizeof(me));
	char line[2048];
	size_t k = 0;
	int rc;

	if (!all)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	snprintf(me.host, sizeof(me.host), "%.55s", t->dist->host);
	rc = titan_comm_all_gather(t->dist->comm[TITAN_DIM_WORLD], &me, all, sizeof(me), TITAN_DTYPE_U8,
				   "rank pids");
	for (int r = 0; rc == 0 && r < t->dist->size && k < sizeof(line) - 96; r++)
		k += (size_t)snprintf(line + k, sizeof(line) - k, "%s%d: pid %lld on %.56s",
				      r ? ", " : "", r, (long long)all[r].pid, all[r].host);
	if (rc == 0)
		titan_log_info("Ranks: %s", line);
	free(all);
	return rc;
}

/* Where this rank's threads run: the CPUs the launcher gave it and
 * OpenMP's binding (titan_cli_thread_defaults binds inside a mask), for
 * the Parallelism line. */
static const char *placement(char *buf, size_t n)
{
	const char *bind = getenv("OMP_PROC_BIND"), *places = getenv("OMP_PLACES");
	cpu_set_t set;
	size_t o;
	int first = -1;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		CPU_ZERO(&set);
	o = (size_t)snprintf(buf, n, "on CPU(s) ");
	for (int c = 0; c <= CPU_SETSIZE && o < n; c++) {
		bool in = c < CPU_SETSIZE && CPU_ISSET(c, &set);

		if (in && first < 0)
			first = c;
		if (!in && first >= 0) {
			o += (size_t)snprintf(buf + o, n - o, "%s%d", o > 10 ? "," : "", first);
			if (c - 1 > first && o < n)
				o += (size_t)snprintf(buf + o, n - o, "-%d", c - 1);
			first = -1;
		}
	}
	if (o < n && bind && *bind && strcasecmp(bind, "false"))
		snprintf(buf + o, n - o, ", threads bound (OMP_PROC_BIND=%.16s, OMP_PLACES=%.16s)", bind,
			 places && *places ? places : "unset");
	else if (o < n)
		snprintf(buf + o, n - o, ", threads not bound");
	return buf;
}

/* One line naming every parallelism of the run with its degree, only the
 * dimensions above 1, as torchtitan's "Building 3-D device mesh with
 * ['dp_shard', 'cp', 'tp'], [2, 2, 2]" does: "FSDP 2 (dp_shard) x TP 2 x PP
 * 2 (1F1B, 4 microbatches of 1 x 128 tokens)", or "single rank".  FSDP's
 * mesh includes cp: a CP run shards its parameters over dp_shard x cp. */
static void log_layout(const struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;
	const int64_t *d = t->dist->dims.degree;
	const int units = titan_engine_dp_units(t->engine);
	char line[1024] = "", place[192];
	size_t n = 0;

#define ADD(...) (n += (size_t)snprintf(line + n, n < sizeof(line) ? sizeof(line) - n : 0, \
					__VA_ARGS__))
	if (d[TITAN_DIM_DP_REPLICATE] > 1 && d[TITAN_DIM_DP_SHARD] > 1)
		ADD("HSDP %lld x %lld (dp_replicate x dp_shard)",
		    (long long)d[TITAN_DIM_DP_REPLICATE], (long long)d[TITAN_DIM_DP_SHARD]);
	else if (d[TITAN_DIM_DP_REPLICATE] > 1)
		ADD("DDP %lld (dp_replicate)", (long long)d[TITAN_DIM_DP_REPLICATE]);
	else if (d[TITAN_DIM_DP_SHARD] > 1)
		ADD("FSDP %lld (dp_shard)", (long long)d[TITAN_DIM_DP_SHARD]);
	if (d[TITAN_DIM_CP] > 1)
		ADD("%sCP %lld", n ? " x " : "", (long long)d[TITAN_DIM_CP]);
	if (d[TITAN_DIM_TP] > 1)
		ADD("%sTP %lld", n ? " x " : "", (long long)d[TITAN_DIM_TP]);
	if (d[TITAN_DIM_PP] > 1)
		ADD("%sPP %lld (%s, %lld microbatches of %lld x %lld tokens)", n ? " x " : "",
		    (long long)d[TITAN_DIM_PP], c->parallelism.pipeline_parallel_schedule,
		    (long long)t->layout.microbatches, (long long)t->layout.microbatch,
		    (long long)c->training.seq_len);
	if (!n)
		ADD("single rank");
	if (units && t->fsdp_degree > 1)
		ADD("; parameters sharded over %s%lld ranks in %d FSDP unit(s)",
		    d[TITAN_DIM_CP] > 1 ? "dp_shard x cp, " : "", (long long)t->fsdp_degree, units);
	else if (units)
		ADD("; gradients all-reduced in %d bucket(s)", units);
#undef ADD
	titan_log_info("Parallelism: %s; %d rank(s), %d thread(s) per rank; %s", line,
		       t->dist->size, t->be.nthreads, placement(place, sizeof(place)));
}

void titan_trainer_log_start(const struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;
	struct titan_model_params mp;

	titan_model_count_params(&t->dims, &mp);
	titan_log_info("Model %s %s size: %lld total parameters",
		       titan_model_family_name(t->dims.family), t->dims.flavor, (long long)mp.total);
	log_layout(t);
	titan_log_info("Peak FLOPS used for computing MFU: %.3e (%s)", t->peak_flops, t->peak_from);
	if (c->checkpoint.create_seed_checkpoint)
		titan_log_info("Seed checkpoint only (checkpoint.create_seed_checkpoint): no "
			       "training steps; runs with checkpoint.enable and this "
			       "checkpoint.folder start from it");
	else if (t->layout.stages.n > 0)
		/* a pipeline step runs accum x (local batch / microbatch size)
		 * microbatches of the pipeline's size */
		titan_log_info("Training starts: %lld steps, %lld microbatch(es) of %lld x %lld tokens "
			       "per rank (%lld local batch(es) of %lld, pipelined), activation "
			       "checkpointing %s", (long long)c->training.steps,
			       (long long)(t->accum * t->layout.microbatches),
			       (long long)t->layout.microbatch,
			       (long long)c->training.seq_len, (long long)t->accum,
			       (long long)c->training.local_batch_size, c->activation_checkpoint.mode);
	else
		titan_log_info("Training starts: %lld steps, %lld microbatch(es) of %lld x %lld "
			       "tokens per rank, activation checkpointing %s",
			       (long long)c->training.steps, (long long)t->accum,
			       (long long)c->training.local_batch_size, (long long)c->training.seq_len,
			       c->activation_checkpoint.mode);
}
