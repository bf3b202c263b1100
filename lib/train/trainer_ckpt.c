/*
 * trainer_ckpt.c — the trainer's checkpoints (torchtitan's
 * CheckpointManager): save every checkpoint.interval steps and at the end,
 * one logical step-N.h5 whatever the layout (each rank writes the rows it
 * holds: lib/ckpt/dist.c), async saves, keep_latest_k, and resume from the
 * newest complete step on any layout (each rank reads its rows).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "titan/ckpt.h"
#include "titan/core.h"
#include "titan/dist.h"
#include "trainer_impl.h"

/* The state checkpoints read and write: the model's arenas, or when the
 * trainer is staged (CUDA) host copies of them (t->ckpt_host) read from
 * the backend with titan_llama_state_get; ckpt_state_set puts what a
 * load wrote there back. */
static int ckpt_state(struct titan_trainer *t, struct titan_ckpt_state *st)
{
	const size_t nf = (size_t)titan_llama_table(t->model)->arena_floats;

	memset(st, 0, sizeof(*st));
	st->table = titan_llama_table(t->model);
	st->train.dp_world_size = t->dp_degree;
	st->train.loader = t->loader_states;
	if (!t->staged) {
		st->params = titan_llama_params(t->model)->data;
		titan_llama_moments(t->model, &st->exp_avg, &st->exp_avg_sq);
		return 0;
	}
	if (!t->ckpt_host && !(t->ckpt_host = malloc(3 * nf * sizeof(float))))
		return titan_error(TITAN_E_NOMEM, "out of memory for the checkpoint's host copy");
	st->params = t->ckpt_host;
	st->exp_avg = t->ckpt_host + nf;
	st->exp_avg_sq = t->ckpt_host + 2 * nf;
	return titan_llama_state_get(t->model, st->params, st->exp_avg, st->exp_avg_sq);
}

static int ckpt_state_set(struct titan_trainer *t)
{
	const size_t nf = (size_t)titan_llama_table(t->model)->arena_floats;

	if (!t->staged)
		return 0;
	return titan_llama_state_set(t->model, t->ckpt_host, t->ckpt_host + nf,
				     t->ckpt_host + 2 * nf);
}

/* Does this rank write its rows?  Every element once: the ranks of the
 * first replica, under FSDP every shard of it, under DDP the first shard
 * coordinate (all hold all); with TP each TP rank its slice. */
static bool writes_rows(const struct titan_trainer *t)
{
	if (t->dist->coord[TITAN_DIM_DP_REPLICATE] != 0)
		return false;
	return t->fsdp_degree > 1 || t->dist->coord[TITAN_DIM_DP_SHARD] == 0;
}

static void *mpi_world(const struct titan_trainer *t)
{
	return t->dist->size > 1 ? titan_comm_mpi_handle(t->dist->comm[TITAN_DIM_WORLD]) : NULL;
}

/* Rank 0's outcome of a step only it does (`rc`), agreed by every rank:
 * the others fail with "rank 0: <what>" when it failed. */
static int rank0_agreed(struct titan_trainer *t, int rc, const char *what)
{
	int64_t bad = rc < 0;
	int arc;

	if (t->dist->size == 1)
		return rc;
	if ((arc = titan_comm_all_reduce(t->dist->comm[TITAN_DIM_WORLD], TITAN_IN_PLACE, &bad, 1,
					 TITAN_DTYPE_I64, TITAN_REDOP_MAX, what)) < 0)
		return arc;
	if (rc < 0)
		return rc;
	return bad ? titan_error(TITAN_E_IO, "rank 0 failed: %s", what) : 0;
}

/* checkpoint.last_save_in_hf (torchtitan's _save_last_step with to_hf):
 * the last step's model, already saved as FOLDER/step-N.h5 in
 * checkpoint.export_dtype, also as the HF folder FOLDER/step-N/ (the
 * name of torchtitan's checkpoint of that step), written by rank 0 with
 * titan-ckpt-convert's code (--to hf --dtype EXPORT_DTYPE [--tokenizer
 * model.tokenizer_path]): the same bytes. */
static int save_hf(struct titan_trainer *t, const char *h5, int64_t step, enum titan_ckpt_dtype dt)
{
	const struct titan_config *c = &t->cfg;
	struct titan_hf_export_opts eo;
	char dir[4200];
	uint64_t t0 = titan_time_ns();
	int rc = 0;

	if (snprintf(dir, sizeof(dir), "%s/step-%lld", t->ckpt_dir, (long long)step) >=
	    (int)sizeof(dir))
		return titan_error(TITAN_E_INVALID, "checkpoint.folder: '%s' is too long", t->ckpt_dir);
	titan_dist_watch_begin(t->dist, "HF export of the last step");
	if (t->dist->rank == 0) {
		titan_hf_export_opts_default(&eo);
		eo.dtype = dt;
		eo.tokenizer = *c->model.tokenizer_path ? c->model.tokenizer_path : NULL;
		if ((rc = titan_hf_export_ckpt(h5, dir, &eo)) < 0)
			titan_error_prefix("checkpoint.last_save_in_hf: '%s'", dir);
	}
	rc = rank0_agreed(t, rc, "checkpoint.last_save_in_hf: the HF export");
	titan_dist_watch_end(t->dist);
	if (rc < 0)
		return rc;
	titan_log_info("Saved the last step as HF safetensors %s/ in %.2f s", dir,
		       (double)(titan_time_ns() - t0) * 1e-9);
	return 0;
}

int titan_trainer_ckpt_save(struct titan_trainer *t, int64_t step, bool last, int64_t tokens_seen,
			    int64_t opt_steps)
{
	const struct titan_config *c = &t->cfg;
	struct titan_ckpt_state st;
	bool model_only = c->checkpoint.model_weights_only || (last && c->checkpoint.last_save_model_only);
	enum titan_ckpt_dtype dt = TITAN_CKPT_FLOAT32;
	unsigned flags = model_only ? TITAN_CKPT_MODEL_ONLY : 0;
	char *yaml = NULL, *path = NULL;
	size_t ylen = 0;
	FILE *ym = open_memstream(&yaml, &ylen);
	uint64_t t0 = titan_time_ns();
	int removed = 0, rc;

	if (model_only)
		dt = c->checkpoint.export_dtype_e == TITAN_EXPORT_BFLOAT16 ? TITAN_CKPT_BFLOAT16 :
		     c->checkpoint.export_dtype_e == TITAN_EXPORT_FLOAT16 ? TITAN_CKPT_FLOAT16 :
		     TITAN_CKPT_FLOAT32;
	if (ym) {
		titan_config_write_yaml(c, ym);
		fclose(ym);
	}
	for (int64_t r = 0; r < t->dp_degree; r++)
		titan_loader_get_state(t->train, &t->loader_states[r]);
	if ((rc = ckpt_state(t, &st)) < 0) {
		free(yaml);
		return rc;
	}
	st.config_yaml = yaml;
	st.train.step = step;
	st.train.ntokens_seen = tokens_seen;
	st.train.lr_last_epoch = step;
	st.train.optim_step = opt_steps;
	st.train.rng.seed = (uint64_t)c->training.seed;
	/* the HF export reads the file: the last save is synchronous then,
	 * after any background write (torchtitan's last save is never async) */
	if (last && c->checkpoint.last_save_in_hf && (rc = titan_trainer_ckpt_reap(t, true)) < 0) {
		free(yaml);
		return rc;
	}
	if (t->ckpt_async && !(last && c->checkpoint.last_save_in_hf)) {
		/* staged copy now, the write in the background, after the
		 * previous save (one write in flight), waited for under the
		 * comm timeout */
		if ((rc = titan_trainer_ckpt_reap(t, true)) < 0) {
			free(yaml);
			return rc;
		}
		rc = titan_ckpt_async_save_dist(t->ckpt_async, t->ckpt_dir, step, &st, flags, dt,
						c->checkpoint.keep_latest_k, mpi_world(t),
						writes_rows(t));
		free(yaml);
		if (rc < 0)
			return rc;
		double blocked = (double)(titan_time_ns() - t0) * 1e-9;
		t->ckpt_blocked_s += blocked;
		titan_log_info("Staged %scheckpoint step %lld in %.3f s (training blocked); "
			       "writing in the background", model_only ? "model-only " : "",
			       (long long)step, blocked);
		return 0;
	}
	titan_dist_watch_begin(t->dist, "checkpoint write");
	rc = titan_ckpt_save_dist(t->ckpt_dir, step, &st, flags, dt, mpi_world(t), writes_rows(t),
				  &path);
	titan_dist_watch_end(t->dist);
	free(yaml);
	if (rc < 0)
		return rc;
	double took = (double)(titan_time_ns() - t0) * 1e-9;
	t->ckpt_blocked_s += took;
	titan_log_info("Saved %scheckpoint %s in %.2f s", model_only ? "model-only " : "", path, took);
	if (last && c->checkpoint.last_save_in_hf && (rc = save_hf(t, path, step, dt)) < 0) {
		free(path);
		return rc;
	}
	free(path);
	if (t->dist->rank == 0 && c->checkpoint.keep_latest_k > 0 &&
	    (rc = titan_ckpt_prune(t->ckpt_dir, c->checkpoint.keep_latest_k, &removed)) < 0)
		return rc;
	return 0;
}

/* Report (and collect errors of) a background save: when it has finished,
 * or always with `block`.  Every rank waits for its own writer thread (the
 * write is collective, so they finish together), under the comm timeout.
 * A multi-rank write's result is the same on every rank; so that every
 * rank also collects it at the same step (and stops there when it failed,
 * rather than one rank leaving the others in the next step's collectives),
 * the ranks agree that all writers are done before any reaps. */
int titan_trainer_ckpt_reap(struct titan_trainer *t, bool block)
{
	struct titan_ckpt_async_result res;
	int rc;

	if (!t->ckpt_async || !titan_ckpt_async_busy(t->ckpt_async))
		return 0;
	if (!block) {
		int64_t done = titan_ckpt_async_done(t->ckpt_async);

		if (t->dist->size > 1 &&
		    (rc = titan_comm_all_reduce(t->dist->comm[TITAN_DIM_WORLD], TITAN_IN_PLACE,
						&done, 1, TITAN_DTYPE_I64, TITAN_REDOP_MIN,
						"checkpoint write done")) < 0)
			return rc;
		if (!done)
			return 0;
	}
	titan_dist_watch_begin(t->dist, "checkpoint write (background)");
	rc = titan_ckpt_async_wait(t->ckpt_async, &res);
	titan_dist_watch_end(t->dist);
	if (rc < 0)
		return rc;
	titan_log_info("Saved checkpoint %s in %.2f s (background write)", res.path, res.write_s);
	free(res.path);
	return 0;
}

/* The step to resume from: checkpoint.load_step, or the newest complete
 * step of the folder, decided by rank 0 (a folder listing may race with
 * nothing here, but every rank must load the same step). */
static int resume_step(struct titan_trainer *t, int64_t *step)
{
	const struct titan_config *c = &t->cfg;
	int64_t s[2] = {-1, 0}; /* step, error */
	int rc;

	if (c->checkpoint.load_step >= 0) {
		*step = c->checkpoint.load_step;
		return 0;
	}
	if (t->dist->rank == 0 && (rc = titan_ckpt_latest(t->ckpt_dir, &s[0])) < 0)
		s[1] = 1;
	if ((rc = titan_comm_broadcast(t->dist->comm[TITAN_DIM_WORLD], s, 2, TITAN_DTYPE_I64, 0,
				       "checkpoint step")) < 0)
		return rc;
	if (s[1])
		return t->dist->rank == 0 ? TITAN_E_IO
					  : titan_error(TITAN_E_IO, "rank 0 cannot list '%s'",
							t->ckpt_dir);
	*step = s[0];
	return 0;
}

/* The newest complete step older than `step` (-1: none), decided by rank 0. */
static int older_step(struct titan_trainer *t, int64_t step, int64_t *older)
{
	int64_t s[2] = {-1, 0}, *steps = NULL; /* step, error */
	size_t n = 0;
	int rc;

	if (t->dist->rank == 0) {
		if (titan_ckpt_list(t->ckpt_dir, &steps, &n) < 0)
			s[1] = 1;
		for (size_t i = 0; i < n; i++)
			if (steps[i] < step)
				s[0] = steps[i];
		free(steps);
	}
	if ((rc = titan_comm_broadcast(t->dist->comm[TITAN_DIM_WORLD], s, 2, TITAN_DTYPE_I64, 0,
				       "checkpoint step")) < 0)
		return rc;
	if (s[1])
		return t->dist->rank == 0 ? TITAN_E_IO
					  : titan_error(TITAN_E_IO, "rank 0 cannot list '%s'",
							t->ckpt_dir);
	*older = s[0];
	return 0;
}

/* Load step `step` on every rank; all ranks agree on the outcome (a rank
 * whose rows are damaged fails alone; a checksum mismatch in any rank's
 * rows fails all).  *why: this rank's reason, or another rank's failure. */
static int load_agreed(struct titan_trainer *t, const char *path, struct titan_ckpt_state *st,
		       unsigned flags, char *why, size_t whylen)
{
	int64_t bad;
	int rc, arc;

	titan_dist_watch_begin(t->dist, "checkpoint load");
	/* the ranks that would write each element check its checksum */
	rc = titan_ckpt_load_dist(path, st, flags, mpi_world(t), writes_rows(t));
	titan_dist_watch_end(t->dist);
	bad = rc < 0 ? (rc == TITAN_E_NOMEM ? 2 : 1) : 0;
	snprintf(why, whylen, "%s", rc < 0 ? titan_errmsg() : "another rank cannot read it");
	if ((arc = titan_comm_all_reduce(t->dist->comm[TITAN_DIM_WORLD], TITAN_IN_PLACE, &bad, 1,
					 TITAN_DTYPE_I64, TITAN_REDOP_MAX, "checkpoint load")) < 0)
		return arc;
	if (bad == 0)
		return 0;
	return rc < 0 ? rc : titan_error(TITAN_E_FORMAT, "%s", why);
}

/* A run that goes on from step L (a resume from step L of its folder:
 * checkpoint.load_step, or the step before a damaged newest one; L = 0
 * when the train state is not loaded) and saves starts a new lineage
 * there: the complete steps newer than L are not this run's (a run that
 * went on from L before this one, a damaged file).  Left in place,
 * keep_latest_k would delete this run's own checkpoints (the newest by
 * step are the old lineage's), this run would replace some of them, and
 * the next resume would jump back to the old lineage.  torchtitan keeps
 * the newest by step; titan moves the newer ones into
 * FOLDER/superseded-<time>/ (rank 0), with a warning naming them: nothing
 * is deleted. */
static int supersede(struct titan_trainer *t, int64_t step)
{
	const struct titan_config *c = &t->cfg;
	int64_t *moved = NULL, bad = 0;
	char *sub = NULL, names[512] = "";
	size_t n = 0, k = 0;
	int rc = 0, arc;

	if (!c->checkpoint.enable || c->checkpoint.load_only || step >= c->training.steps)
		return 0;
	if (t->dist->rank == 0) {
		rc = titan_ckpt_supersede(t->ckpt_dir, step, &sub, &moved, &n);
		for (size_t i = 0; i < n && k < sizeof(names); i++) {
			if (i == 6 && n > 8) {
				k += (size_t)snprintf(names + k, sizeof(names) - k, ", ... step-%lld.h5 (%zu "
						      "files)", (long long)moved[n - 1], n);
				break;
			}
			k += (size_t)snprintf(names + k, sizeof(names) - k, "%sstep-%lld.h5",
					      i ? ", " : "", (long long)moved[i]);
		}
		if (n)
			titan_log_warn("this run goes on from step %lld: %s in '%s' %s newer, of a run "
				       "that went on from there before this one: moved to '%s' (not "
				       "deleted), so that keep_latest_k and the next resume see this "
				       "run's checkpoints only", (long long)step, names, t->ckpt_dir,
				       n > 1 ? "are" : "is", sub);
		bad = rc < 0;
		free(sub);
		free(moved);
	}
	if ((arc = titan_comm_all_reduce(t->dist->comm[TITAN_DIM_WORLD], TITAN_IN_PLACE, &bad, 1,
					 TITAN_DTYPE_I64, TITAN_REDOP_MAX, "checkpoint folder")) < 0)
		return arc;
	if (rc < 0)
		return titan_error_prefix("going on from step %lld: setting aside the newer "
					  "checkpoints", (long long)step);
	return bad ? titan_error(TITAN_E_IO, "rank 0 cannot set aside the checkpoints newer than "
				 "step %lld in '%s'", (long long)step, t->ckpt_dir) : 0;
}

/* checkpoint.initial_load_in_hf (torchtitan's initial load with from_hf,
 * model only): rank 0 checks the HF folder initial_load_path against the
 * model and converts it with titan-ckpt-convert's code (--from hf, float32:
 * F32, BF16 and F16 weights exactly) into DUMP/initial_load_in_hf.h5.tmp;
 * every rank then loads its rows of that as any initial checkpoint (so
 * every layout), and rank 0 removes it.  A MoE's expert_bias is the
 * config's, as torchtitan's load of the model's own tensors: HF's
 * e_score_correction_bias (DeepSeek-V3) or zeros (Qwen3 MoE, Llama 4:
 * none in HF) with load balancing on; none, the HF one dropped, with
 * model.moe_load_balance_coeff null. */
static int initial_load_hf(struct titan_trainer *t, struct titan_ckpt_state *st)
{
	const struct titan_config *c = &t->cfg;
	/* torchtitan: initial_load_path, else model.hf_assets_path */
	const char *dir = *c->checkpoint.initial_load_path ? c->checkpoint.initial_load_path
							   : c->model.hf_assets_path;
	struct titan_hf_model *m = NULL;
	char tmp[4200], why[1024];
	int rc = 0;

	if ((rc = titan_path_join(tmp, sizeof(tmp), c->job.dump_folder,
				  "initial_load_in_hf.h5.tmp")) < 0)
		return titan_error_prefix("job.dump_folder");
	titan_dist_watch_begin(t->dist, "HF initial load");
	if (t->dist->rank == 0) {
		const bool bias = !isnan(t->dims.moe.load_balance_coeff);

		if ((rc = titan_hf_open(dir, &m)) == 0 &&
		    (rc = titan_ckpt_dims_match(dir, &titan_hf_table(m)->dims, &t->dims)) == 0) {
			if (!bias && t->dims.moe.num_experts > 0 &&
			    t->dims.family == TITAN_MODEL_NAME_DEEPSEEK_V3)
				titan_log_warn("checkpoint.initial_load_in_hf: '%s': its "
					       "e_score_correction_bias is not loaded "
					       "(model.moe_load_balance_coeff null: no expert_bias)",
					       dir);
			rc = titan_hf_write_ckpt(m, tmp, TITAN_CKPT_FLOAT32, bias, NULL, NULL);
		}
		titan_hf_close(m);
		if (rc < 0)
			titan_error_prefix("checkpoint.initial_load_in_hf: '%s'", dir);
	}
	rc = rank0_agreed(t, rc, "checkpoint.initial_load_in_hf: reading the HF folder");
	titan_dist_watch_end(t->dist);
	if (rc < 0)
		return rc;
	rc = load_agreed(t, tmp, st, TITAN_CKPT_MODEL_ONLY, why, sizeof(why));
	if (t->dist->rank == 0)
		remove(tmp);
	if (rc < 0)
		return titan_error_prefix("checkpoint.initial_load_in_hf: '%s'", dir);
	titan_log_info("Loaded initial weights from HF safetensors %s", dir);
	return 0;
}

/* Resume (torchtitan's CheckpointManager.load): checkpoint.load_step, or
 * the newest complete step of the folder; step-0 (a seed checkpoint) is
 * weights only.  Without a checkpoint: checkpoint.initial_load_path.  Each
 * rank reads the rows it holds; the data-loader position is global, so a
 * checkpoint of any DP degree resumes on any other. */
static int resume(struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;
	struct titan_ckpt_state st;
	unsigned flags = 0;
	int64_t step = -1;
	char path[4200];
	int rc;

	if ((rc = titan_ckpt_exclude_parse(&c->checkpoint.exclude_from_loading, &flags)) < 0 ||
	    (rc = resume_step(t, &step)) < 0)
		return rc;
	if ((rc = ckpt_state(t, &st)) < 0)
		return rc;
	if (step >= 0) {
		const unsigned base = flags;
		char why[1024];

		/* the newest complete step, or the one before it when it cannot
		 * be read (truncated, damaged): a crash must not cost the run */
		for (;;) {
			int64_t older = -1;

			if ((rc = titan_ckpt_path(path, sizeof(path), t->ckpt_dir, step)) < 0)
				return rc;
			flags = base | (step == 0 ? TITAN_CKPT_MODEL_ONLY : 0);
			if ((rc = load_agreed(t, path, &st, flags, why, sizeof(why))) == 0)
				break;
			/* a damaged file, not a config that does not fit it */
			if (c->checkpoint.load_step >= 0 || (rc != TITAN_E_IO && rc != TITAN_E_FORMAT))
				return titan_error_prefix(c->checkpoint.load_step >= 0
							  ? "checkpoint.load_step %lld"
							  : "resuming from step %lld", (long long)step);
			titan_error_clear();
			if ((rc = older_step(t, step, &older)) < 0)
				return rc;
			if (older < 0)
				return titan_error(TITAN_E_FORMAT, "resuming from step %lld: %s; no "
						   "older complete checkpoint in '%s'",
						   (long long)step, why, t->ckpt_dir);
			titan_log_warn("cannot resume from %s (%s): falling back to step %lld, the "
				       "newest complete step before it", path, why, (long long)older);
			step = older;
		}
		if (!(flags & (TITAN_CKPT_MODEL_ONLY | TITAN_CKPT_EXCLUDE_TRAIN_STATE))) {
			t->start_step = st.train.step;
			t->tokens_seen0 = st.train.ntokens_seen;
		}
		if (!(flags & (TITAN_CKPT_MODEL_ONLY | TITAN_CKPT_EXCLUDE_OPTIMIZER))) {
			/* a bad count in the file is data (exit 1), not the
			 * config; AdamW would refuse it later as an argument */
			if (st.train.optim_step < 0 || st.train.optim_step > INT64_MAX / 2)
				return titan_error(TITAN_E_FORMAT, "'%s': /optimizer: step %lld is "
						   "not a step count (damaged?)", path,
						   (long long)st.train.optim_step);
			t->opt_steps0 = st.train.optim_step;
		}
		if (!(flags & (TITAN_CKPT_MODEL_ONLY | TITAN_CKPT_EXCLUDE_DATALOADER)) &&
		    (rc = titan_loader_set_state(t->train, &t->loader_states[0])) < 0)
			return titan_error_prefix("%s: dataloader", path);
		titan_log_info("Loaded checkpoint %s (step %lld)", path, (long long)st.train.step);
		return 0;
	}
	if (c->checkpoint.initial_load_in_hf)
		return initial_load_hf(t, &st);
	if (*c->checkpoint.initial_load_path) {
		flags = c->checkpoint.initial_load_model_only ? TITAN_CKPT_MODEL_ONLY : flags;
		titan_dist_watch_begin(t->dist, "checkpoint load");
		rc = titan_ckpt_load_dist(c->checkpoint.initial_load_path, &st, flags, mpi_world(t),
					  writes_rows(t));
		titan_dist_watch_end(t->dist);
		if (rc < 0)
			return titan_error_prefix("checkpoint.initial_load_path");
		titan_log_info("Loaded initial weights from %s", c->checkpoint.initial_load_path);
	}
	return 0;
}

int titan_trainer_ckpt_setup(struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;
	int rc;

	/* an absolute checkpoint.folder is that folder (shared storage),
	 * as torchtitan's os.path.join */
	if ((rc = titan_path_join(t->ckpt_dir, sizeof(t->ckpt_dir), c->job.dump_folder,
				  c->checkpoint.folder)) < 0)
		return titan_error_prefix("checkpoint.folder");
	/* what killed writes left (a full disk's worth, perhaps), whatever
	 * keep_latest_k: rank 0 holds the dump folder's lock, so no other
	 * titan-train writes here; files changed since this run began are
	 * left alone all the same */
	if (c->checkpoint.enable && !c->checkpoint.load_only && t->dist->rank == 0) {
		struct timespec now;
		int removed = 0;

		clock_gettime(CLOCK_REALTIME, &now);
		if (titan_ckpt_clean_tmp(t->ckpt_dir, (int64_t)now.tv_sec * 1000000000 + now.tv_nsec,
					 &removed) < 0)
			titan_log_warn("%s", titan_errmsg());
		titan_error_clear();
		if (removed)
			titan_log_info("removed %d temporary file%s of interrupted checkpoint writes "
				       "in '%s'", removed, removed > 1 ? "s" : "", t->ckpt_dir);
	}
	if (!(t->loader_states = calloc((size_t)t->dp_degree, sizeof(*t->loader_states))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if (c->checkpoint.create_seed_checkpoint && t->dist->size > 1)
		return titan_error(TITAN_E_INVALID, "checkpoint.create_seed_checkpoint: run it on one "
				   "rank (%d were started); every layout loads the seed checkpoint",
				   t->dist->size);
	if (c->checkpoint.enable && c->checkpoint.async_mode_e == TITAN_ASYNC_ASYNC &&
	    ((rc = titan_ckpt_async_new(titan_host_allocator(), &t->ckpt_async)) < 0 ||
	     (rc = titan_ckpt_async_reserve(t->ckpt_async, titan_llama_table(t->model)->arena_floats,
					    !c->checkpoint.model_weights_only)) < 0))
		return rc;
	if ((c->checkpoint.enable || *c->checkpoint.initial_load_path ||
	     c->checkpoint.initial_load_in_hf) &&
	    ((rc = resume(t)) < 0 || (rc = ckpt_state_set(t)) < 0))
		return rc;
	/* a run that would do nothing says why instead of exiting 0 quietly */
	if (t->start_step > c->training.steps)
		return titan_error(TITAN_E_INVALID, "training.steps %lld is below the step of the "
				   "checkpoint it resumes (%lld in '%s'): raise training.steps, or "
				   "choose an older step with checkpoint.load_step",
				   (long long)c->training.steps, (long long)t->start_step,
				   t->ckpt_dir);
	if (t->start_step > 0 && t->start_step == c->training.steps)
		titan_log_info("the checkpoint is at training.steps (%lld): nothing left to train",
			       (long long)c->training.steps);
	if (c->checkpoint.create_seed_checkpoint) {
		struct titan_ckpt_state st;
		char *path = NULL;

		if ((rc = ckpt_state(t, &st)) < 0)
			return rc;
		if ((rc = titan_ckpt_save(t->ckpt_dir, 0, &st, TITAN_CKPT_MODEL_ONLY, TITAN_CKPT_FLOAT32,
					  &path)) < 0)
			return rc;
		titan_log_info("Created seed checkpoint %s", path);
		free(path);
		t->start_step = c->training.steps; /* nothing to train */
	}
	return supersede(t, t->start_step);
}

void titan_trainer_ckpt_release(struct titan_trainer *t)
{
	if (titan_ckpt_async_busy(t->ckpt_async)) { /* a write in flight: bounded too */
		titan_dist_watch_begin(t->dist, "checkpoint write (background)");
		titan_ckpt_async_wait(t->ckpt_async, NULL);
		titan_dist_watch_end(t->dist);
		titan_error_clear();
	}
	titan_ckpt_async_free(t->ckpt_async);
	t->ckpt_async = NULL;
	free(t->loader_states);
	t->loader_states = NULL;
}
