/*
 * titan-train — Llama 3 pre-training from titan-shard shards, on the CPU in
 * one process (the reference every other path is checked against).  The
 * loop of torchtitan's train.py: microbatches with the loss normalised by
 * the step's valid-token count, gradient clipping (pre-clip norm logged),
 * AdamW, the warmup-stable-decay schedule, validation, torchtitan's log
 * line and a metrics.jsonl row per logged step.
 */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cblas.h>

#include "titan/ckpt.h"
#include "titan/cli.h"
#include "titan/config.h"
#include "titan/core.h"
#include "titan/data.h"
#include "titan/model.h"
#include "titan/ops.h"
#include "titan/trace.h"
#include "titan/train.h"

static void usage(FILE *fp)
{
	fprintf(fp,
"Usage: titan-train --config FILE [--section.key=VALUE ...] [OPTIONS]\n"
"Train a Llama 3 model on the CPU from titan-shard shards\n"
"(training.dataset_path), as torchtitan's train.py does.\n"
"\n"
"Options:\n"
"  -c, --config FILE     YAML job config (see configs/, titan-config(1))\n"
"      --section.key=V   override a config key (e.g. --training.steps=100)\n"
"      --help-config     every config key with its type, default and meaning\n"
"      --threads N       CPU threads (default: all cores)\n"
"  -v, --verbose; -q, --quiet (no per-step lines); -h, --help; --version\n"
"\n"
"Each logged step prints torchtitan's line on standard output:\n"
"  step:  1  loss:  7.66051  grad_norm:  1.3702  memory:  0.29GiB(1.22%%)  tps: 5,212  tflops: 0.37  mfu: 29.76%%\n"
"and appends a JSON object to job.dump_folder/metrics.save_jsonl_file.\n"
"\n"
"Example:\n"
"  titan-train --config configs/llama3_debug.yaml --training.dataset_path=data/ \\\n"
"              --training.steps=100 --training.seq_len=256\n"
"\n"
"See also: titan-tokenize(1), titan-shard(1), titan-config(1)\n");
}

/* Peak fp32 FLOP/s of this CPU for MFU: metrics.peak_flops, or a measured
 * sgemm (1024^3, best of 3) on the threads the run uses: OpenBLAS's own
 * threading for the probe (the training GEMMs run it on one thread per tile
 * of C, lib/cpu/matmul.c). */
static double measure_peak(int nthreads)
{
	const int n = 1024;
	float *a = titan_malloc((size_t)n * n * 3 * sizeof(float), TITAN_MEM_WORKSPACE);
	double best = 0;

	if (!a)
		return 0;
	openblas_set_num_threads(nthreads);
	for (size_t i = 0; i < (size_t)n * n * 3; i++)
		a[i] = (float)(i % 7) * 0.1f;
	for (int r = 0; r < 3; r++) {
		uint64_t t0 = titan_time_ns();

		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n,
			    a + (size_t)n * n, n, 0.0f, a + 2 * (size_t)n * n, n);
		double s = (double)(titan_time_ns() - t0) * 1e-9;
		double f = 2.0 * n * n * (double)n / s;

		if (f > best)
			best = f;
	}
	openblas_set_num_threads(1);
	titan_free(a);
	return best;
}

static int mkdirs(const char *path)
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

struct run {
	struct titan_config cfg;
	struct titan_model_dims dims;
	struct titan_llama_opts mo;
	struct titan_backend be;
	bool be_ready;
	struct titan_llama *model;
	struct titan_loader *train, *val;
	int64_t accum, n;              /* microbatches per step, tokens per microbatch */
	int32_t *inputs, *labels;      /* [accum][n] */
	FILE *jsonl;
	double peak_flops, flops_per_token;
	int verbosity;
	/* checkpoints */
	char ckpt_dir[4096];
	int64_t start_step, tokens_seen0, opt_steps0;
	struct titan_ckpt_async *ckpt_async; /* checkpoint.async_mode: async */
	double ckpt_blocked_s;         /* since the last log line */
	/* profiling */
	struct titan_trace *trace;   /* open during a profiled step */
	FILE *memtrace;
	int64_t step;
	uint16_t phase;
};

static void set_phase(struct run *r, uint16_t phase)
{
	r->phase = phase;
	titan_mem_set_step(titan_host_allocator(), (uint32_t)r->step, phase);
}

static void hook_begin(void *ctx, const char *name)
{
	struct run *r = ctx;

	if (!strcmp(name, "forward") && r->phase != TITAN_PHASE_VALIDATION)
		set_phase(r, TITAN_PHASE_FORWARD);
	else if (!strcmp(name, "loss") && r->phase != TITAN_PHASE_VALIDATION)
		set_phase(r, TITAN_PHASE_LOSS);
	else if (!strcmp(name, "backward"))
		set_phase(r, TITAN_PHASE_BACKWARD);
	titan_trace_begin(r->trace, name, "model", r->step);
}

static void hook_end(void *ctx, const char *name)
{
	struct run *r = ctx;
	struct titan_mem_stats ms;

	(void)name;
	if (!r->trace)
		return;
	titan_trace_end(r->trace);
	titan_mem_get_stats(titan_host_allocator(), &ms);
	titan_trace_counter(r->trace, "host memory (bytes)", (double)ms.total_cur);
}

/* profiling.profile_freq / profiler_warmup / profiler_active as torchtitan's
 * schedule: in each window of profile_freq steps the last `active` steps are
 * traced (wait = freq - warmup - active steps, then warmup, then active). */
static bool profiled(const struct titan_config *c, int64_t step)
{
	int64_t f = c->profiling.profile_freq, pos = (step - 1) % f;

	return c->profiling.enable_profiling && pos >= f - c->profiling.profiler_active;
}

static int trace_open(struct run *r, int64_t step)
{
	const struct titan_config *c = &r->cfg;
	char dir[4096], path[4200], meta[256];
	int rc;

	snprintf(dir, sizeof(dir), "%s/%s/iteration_%lld", c->job.dump_folder,
		 c->profiling.save_traces_folder, (long long)step);
	if ((rc = mkdirs(dir)) < 0)
		return rc;
	snprintf(path, sizeof(path), "%s/rank0_trace.json", dir);
	snprintf(meta, sizeof(meta), "{\"tool\": \"titan-train\", \"version\": \"%s\", \"step\": %lld}",
		 titan_version(), (long long)step);
	return titan_trace_open(&r->trace, path, 0, meta);
}

/* ------------------------------------------------------------ checkpoints */

static void ckpt_state(struct run *r, struct titan_ckpt_state *st, struct titan_loader_state *ls)
{
	memset(st, 0, sizeof(*st));
	st->table = titan_llama_table(r->model);
	st->params = titan_llama_params(r->model)->data;
	titan_llama_moments(r->model, &st->exp_avg, &st->exp_avg_sq);
	st->train.dp_world_size = 1;
	st->train.loader = ls;
}

/* Save step `step` (torchtitan's CheckpointManager.save): a full checkpoint
 * (weights, AdamW moments, train state, data position) in float32, or
 * weights only (checkpoint.model_weights_only, or the last step with
 * last_save_model_only) in export_dtype; then keep_latest_k. */
static int ckpt_save(struct run *r, int64_t step, bool last, int64_t tokens_seen, int64_t opt_steps)
{
	const struct titan_config *c = &r->cfg;
	struct titan_ckpt_state st;
	struct titan_loader_state ls;
	bool model_only = c->checkpoint.model_weights_only || (last && c->checkpoint.last_save_model_only);
	enum titan_ckpt_dtype dt = TITAN_CKPT_FLOAT32;
	char *yaml = NULL, *path = NULL;
	size_t ylen = 0;
	FILE *ym = open_memstream(&yaml, &ylen);
	uint64_t t0 = titan_time_ns();
	int removed = 0, rc;

	if (model_only && titan_ckpt_dtype_parse(c->checkpoint.export_dtype, &dt) < 0)
		dt = TITAN_CKPT_FLOAT32;
	if (ym) {
		titan_config_write_yaml(c, ym);
		fclose(ym);
	}
	titan_loader_get_state(r->train, &ls);
	ckpt_state(r, &st, &ls);
	st.config_yaml = yaml;
	st.train.step = step;
	st.train.ntokens_seen = tokens_seen;
	st.train.lr_last_epoch = step;
	st.train.optim_step = opt_steps;
	st.train.rng.seed = (uint64_t)c->training.seed;
	if (r->ckpt_async) {
		/* staged copy now, the write in the background (waits for the
		 * previous save first: one write in flight) */
		rc = titan_ckpt_async_save(r->ckpt_async, r->ckpt_dir, step, &st,
					   model_only ? TITAN_CKPT_MODEL_ONLY : 0, dt,
					   c->checkpoint.keep_latest_k);
		free(yaml);
		if (rc < 0)
			return rc;
		double blocked = (double)(titan_time_ns() - t0) * 1e-9;
		r->ckpt_blocked_s += blocked;
		titan_log_info("Staged %scheckpoint step %lld in %.3f s (training blocked); "
			       "writing in the background", model_only ? "model-only " : "",
			       (long long)step, blocked);
		return 0;
	}
	rc = titan_ckpt_save(r->ckpt_dir, step, &st, model_only ? TITAN_CKPT_MODEL_ONLY : 0, dt, &path);
	free(yaml);
	if (rc < 0)
		return rc;
	double took = (double)(titan_time_ns() - t0) * 1e-9;
	r->ckpt_blocked_s += took;
	titan_log_info("Saved %scheckpoint %s in %.2f s", model_only ? "model-only " : "", path, took);
	free(path);
	if (c->checkpoint.keep_latest_k > 0 &&
	    (rc = titan_ckpt_prune(r->ckpt_dir, c->checkpoint.keep_latest_k, &removed)) < 0)
		return rc;
	return 0;
}

/* Report (and collect errors of) a background save: when it has finished,
 * or always with `block`. */
static int ckpt_async_reap(struct run *r, bool block)
{
	struct titan_ckpt_async_result res;
	int rc;

	if (!titan_ckpt_async_busy(r->ckpt_async) ||
	    (!block && !titan_ckpt_async_done(r->ckpt_async)))
		return 0;
	if ((rc = titan_ckpt_async_wait(r->ckpt_async, &res)) < 0)
		return rc;
	titan_log_info("Saved checkpoint %s in %.2f s (background write)", res.path, res.write_s);
	free(res.path);
	return 0;
}

/* Resume (torchtitan's CheckpointManager.load): checkpoint.load_step, or
 * the newest complete step of the folder; step-0 (a seed checkpoint) is
 * weights only.  Without a checkpoint: checkpoint.initial_load_path. */
static int ckpt_resume(struct run *r)
{
	const struct titan_config *c = &r->cfg;
	struct titan_ckpt_state st;
	struct titan_loader_state ls;
	unsigned flags = 0;
	int64_t step = -1;
	char path[4200];
	int rc;

	if ((rc = titan_ckpt_exclude_parse(&c->checkpoint.exclude_from_loading, &flags)) < 0)
		return rc;
	if (c->checkpoint.load_step >= 0) {
		step = c->checkpoint.load_step;
	} else if ((rc = titan_ckpt_latest(r->ckpt_dir, &step)) < 0) {
		return rc;
	}
	ckpt_state(r, &st, &ls);
	if (step >= 0) {
		if ((rc = titan_ckpt_path(path, sizeof(path), r->ckpt_dir, step)) < 0)
			return rc;
		if (step == 0)
			flags |= TITAN_CKPT_MODEL_ONLY;
		if ((rc = titan_ckpt_load(path, &st, flags)) < 0)
			return titan_error_prefix("checkpoint.load_step %lld", (long long)step);
		if (!(flags & (TITAN_CKPT_MODEL_ONLY | TITAN_CKPT_EXCLUDE_TRAIN_STATE))) {
			r->start_step = st.train.step;
			r->tokens_seen0 = st.train.ntokens_seen;
		}
		if (!(flags & (TITAN_CKPT_MODEL_ONLY | TITAN_CKPT_EXCLUDE_OPTIMIZER)))
			r->opt_steps0 = st.train.optim_step;
		if (!(flags & (TITAN_CKPT_MODEL_ONLY | TITAN_CKPT_EXCLUDE_DATALOADER)) &&
		    (rc = titan_loader_set_state(r->train, &ls)) < 0)
			return titan_error_prefix("%s: dataloader", path);
		titan_log_info("Loaded checkpoint %s (step %lld)", path, (long long)st.train.step);
		return 0;
	}
	if (*c->checkpoint.initial_load_path) {
		flags = c->checkpoint.initial_load_model_only ? TITAN_CKPT_MODEL_ONLY : flags;
		if ((rc = titan_ckpt_load(c->checkpoint.initial_load_path, &st, flags)) < 0)
			return titan_error_prefix("checkpoint.initial_load_path");
		titan_log_info("Loaded initial weights from %s", c->checkpoint.initial_load_path);
	}
	return 0;
}

static int validate(struct run *r, int64_t step)
{
	double sum = 0, loss;
	int64_t valid = 0, steps = 0;
	uint64_t t0 = titan_time_ns();
	int rc;

	set_phase(r, TITAN_PHASE_VALIDATION);
	titan_loader_reset(r->val);
	while (r->cfg.validation.steps < 0 || steps < r->cfg.validation.steps) {
		struct titan_batch_info info;
		double ls;
		int64_t nv;

		if ((rc = titan_loader_next(r->val, r->inputs, r->labels, &info)) < 0)
			return rc;
		if (rc == 0 || info.rows == 0)
			break;
		if ((rc = titan_llama_step(r->model, r->inputs, r->labels, 0.0f, false, &ls, &nv)) < 0)
			return rc;
		sum += ls;
		valid += nv;
		steps++;
	}
	loss = valid ? sum / (double)valid : NAN;
	if (r->verbosity >= 0)
		printf("validate step: %2lld  loss: %8.5f  tps: %.0f\n", (long long)step, loss,
		       (double)(steps * r->n) / ((double)(titan_time_ns() - t0) * 1e-9));
	if (r->jsonl) {
		struct titan_json j;

		titan_json_init(&j);
		titan_json_object_begin(&j);
		titan_json_key(&j, "step");
		titan_json_int(&j, step);
		titan_json_key(&j, "validation_loss");
		titan_json_double(&j, loss);
		titan_json_key(&j, "validation_tokens");
		titan_json_int(&j, valid);
		titan_json_object_end(&j);
		rc = titan_json_write_line(&j, r->jsonl);
		titan_json_release(&j);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int train(struct run *r)
{
	const struct titan_config *c = &r->cfg;
	struct titan_lr_schedule sched;
	struct titan_adamw_hparams hp = {c->optimizer.lr, c->optimizer.beta1, c->optimizer.beta2,
					 c->optimizer.eps, c->optimizer.weight_decay};
	struct titan_allocator *host = titan_host_allocator();
	uint64_t t_last = titan_time_ns(), data_ns = 0;
	int64_t tokens_since = 0, steps_since = 0, opt_steps = r->opt_steps0;
	int64_t tokens_seen = r->tokens_seen0;
	double total_mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
	int rc;

	titan_lr_schedule_init(&sched, c);
	if (sched.clamped & 1)
		titan_log_warn("lr_scheduler.warmup_steps %lld exceeds the %lld training steps: "
			       "warmup over all of them", (long long)c->lr_scheduler.warmup_steps,
			       (long long)sched.warmup);
	for (int64_t step = r->start_step + 1; step <= c->training.steps; step++) {
		double loss_sum = 0, loss, norm;
		int64_t valid = 0;
		float coef;
		uint64_t t0 = titan_time_ns();

		r->step = step;
		if (profiled(c, step) && (rc = trace_open(r, step)) < 0)
			return rc;
		titan_trace_begin(r->trace, "step", "train", step);
		titan_trace_begin(r->trace, "data", "train", step);
		set_phase(r, TITAN_PHASE_DATA);
		/* all microbatches first: the loss is normalised by the step's
		 * valid-token count (torchtitan's global_valid_tokens) */
		for (int64_t mb = 0; mb < r->accum; mb++) {
			struct titan_batch_info info;

			rc = titan_loader_next(r->train, r->inputs + mb * r->n, r->labels + mb * r->n, &info);
			if (rc < 0)
				return rc;
			valid += info.valid_tokens;
		}
		data_ns += titan_time_ns() - t0;
		titan_trace_end(r->trace);
		if ((rc = titan_llama_zero_grads(r->model)) < 0)
			return rc;
		for (int64_t mb = 0; mb < r->accum; mb++) {
			double ls;
			int64_t nv;

			rc = titan_llama_step(r->model, r->inputs + mb * r->n, r->labels + mb * r->n,
					      valid ? 1.0f / (float)valid : 0.0f, true, &ls, &nv);
			if (rc < 0)
				return rc;
			loss_sum += ls;
		}
		loss = valid ? loss_sum / (double)valid : NAN;
		if ((rc = titan_llama_grad_norm(r->model, c->training.max_norm, &norm, &coef)) < 0)
			return rc;
		if (!isfinite(loss) || !isfinite(norm)) {
			if (!c->training.skip_nonfinite)
				return titan_error(TITAN_E_NUMERIC,
						   "step %lld: loss %g, grad_norm %g is not finite; stopping "
						   "(training.skip_nonfinite skips such steps instead)",
						   (long long)step, loss, norm);
			titan_log_warn("step %lld: loss %g, grad_norm %g is not finite: optimizer step "
				       "skipped", (long long)step, loss, norm);
		} else {
			hp.lr = c->optimizer.lr * titan_lr_factor(&sched, step - 1);
			set_phase(r, TITAN_PHASE_OPTIMIZER);
			titan_trace_begin(r->trace, "optimizer", "train", step);
			rc = titan_llama_adamw(r->model, &hp, ++opt_steps, coef);
			titan_trace_end(r->trace);
			if (rc < 0)
				return rc;
		}
		titan_trace_end(r->trace); /* step */
		if (r->trace) {
			rc = titan_trace_close(r->trace);
			r->trace = NULL;
			if (rc < 0)
				return rc;
		}
		tokens_since += r->accum * r->n;
		tokens_seen += r->accum * r->n;
		steps_since++;
		if (step == 1 || step % c->metrics.log_freq == 0 || step == c->training.steps) {
			struct titan_mem_stats ms;
			uint64_t now = titan_time_ns();
			double dt = (double)(now - t_last) * 1e-9;
			double tps = (double)tokens_since / dt;
			double tflops = r->flops_per_token * tps / 1e12;
			double mfu = r->peak_flops > 0 ? 100.0 * r->flops_per_token * tps / r->peak_flops : 0;
			double gib;
			char g[48];

			titan_mem_get_stats(host, &ms);
			gib = (double)ms.total_peak / 1073741824.0;
			if (r->verbosity >= 0) {
				printf("step: %2lld  loss: %8.5f  grad_norm: %7.4f  memory: %5.2fGiB(%.2f%%)  "
				       "tps: %s  tflops: %.2f  mfu: %.2f%%\n", (long long)step, loss, norm,
				       gib, 100.0 * (double)ms.total_peak / total_mem,
				       titan_format_grouped(g, sizeof(g), tps), tflops, mfu);
				fflush(stdout);
			}
			if (r->jsonl) {
				struct titan_json j;

				titan_json_init(&j);
				titan_json_object_begin(&j);
				titan_json_key(&j, "step");
				titan_json_int(&j, step);
				titan_json_key(&j, "loss");
				titan_json_double(&j, loss);
				titan_json_key(&j, "grad_norm");
				titan_json_double(&j, norm);
				titan_json_key(&j, "lr");
				titan_json_double(&j, hp.lr);
				titan_json_key(&j, "tokens_seen");
				titan_json_int(&j, tokens_seen);
				titan_json_key(&j, "tps");
				titan_json_double(&j, tps);
				titan_json_key(&j, "tflops");
				titan_json_double(&j, tflops);
				titan_json_key(&j, "mfu_pct");
				titan_json_double(&j, mfu);
				titan_json_key(&j, "step_time_s");
				titan_json_double(&j, dt / (double)steps_since);
				titan_json_key(&j, "data_time_s");
				titan_json_double(&j, (double)data_ns * 1e-9 / (double)steps_since);
				titan_json_key(&j, "checkpoint_blocked_s");
				titan_json_double(&j, r->ckpt_blocked_s);
				titan_json_key(&j, "memory_peak_bytes");
				titan_json_int(&j, ms.total_peak);
				titan_json_key(&j, "memory_peak_by_tag");
				titan_json_object_begin(&j);
				for (int t = 0; t < TITAN_MEM_NTAGS; t++) {
					titan_json_key(&j, titan_mem_tag_name((enum titan_mem_tag)t));
					titan_json_int(&j, ms.peak_at_total[t]);
				}
				titan_json_object_end(&j);
				titan_json_object_end(&j);
				rc = titan_json_write_line(&j, r->jsonl);
				titan_json_release(&j);
				if (rc < 0)
					return rc;
				fflush(r->jsonl);
			}
			titan_mem_reset_peak(host);
			r->ckpt_blocked_s = 0;
			t_last = titan_time_ns();
			tokens_since = steps_since = 0;
			data_ns = 0;
		}
		if ((rc = ckpt_async_reap(r, false)) < 0)
			return rc;
		if (c->checkpoint.enable && !c->checkpoint.load_only &&
		    (step % c->checkpoint.interval == 0 || step == c->training.steps ||
		     (step == 1 && c->checkpoint.enable_first_step_checkpoint)) &&
		    (rc = ckpt_save(r, step, step == c->training.steps, tokens_seen, opt_steps)) < 0)
			return rc;
		if (r->val && (step == 1 || step % c->validation.freq == 0) && (rc = validate(r, step)) < 0)
			return rc;
	}
	return ckpt_async_reap(r, true);
}

static int setup(struct run *r, struct titan_cli *cli)
{
	struct titan_config *c = &r->cfg;
	struct titan_loader_opts lo;
	struct titan_model_params mp;
	int rc;

	if ((rc = titan_model_dims_from_config(c, &r->dims)) < 0)
		return rc;
	if ((rc = titan_llama_opts_from_config(&r->mo, c)) < 0)
		return rc;
	if (c->parallelism.data_parallel_replicate_degree * (c->parallelism.data_parallel_shard_degree < 0 ? 1 : c->parallelism.data_parallel_shard_degree) *
	    c->parallelism.tensor_parallel_degree * c->parallelism.pipeline_parallel_degree *
	    c->parallelism.context_parallel_degree != 1)
		return titan_error(TITAN_E_UNSUPPORTED,
				   "parallelism: this titan-train runs one process (all degrees 1); "
				   "multi-rank training comes with MPI support");
	if (!*c->training.dataset_path)
		return titan_error(TITAN_E_INVALID, "training.dataset_path: a folder of titan-shard "
				   "shards is required (titan-tokenize | titan-shard --out DIR)");
	if ((rc = titan_grad_accum_steps(c, 1, &r->accum)) < 0)
		return rc;
	r->n = c->training.local_batch_size * c->training.seq_len;
	if ((rc = titan_backend_cpu_init(&r->be, cli->threads)) < 0)
		return rc;
	r->be_ready = true;
	titan_loader_opts_default(&lo);
	lo.dir = c->training.dataset_path;
	lo.split = "train";
	lo.seq_len = c->training.seq_len;
	lo.local_batch_size = c->training.local_batch_size;
	lo.shuffle = c->training.shuffle;
	lo.seed = (uint64_t)c->training.seed;
	lo.vocab_size = (uint32_t)r->dims.vocab_size;
	if ((rc = titan_loader_open(&lo, &r->train)) < 0)
		return rc;
	if (c->validation.enable) {
		lo.dir = *c->validation.dataset_path ? c->validation.dataset_path : c->training.dataset_path;
		lo.split = "val";
		lo.seq_len = c->validation.seq_len;
		lo.local_batch_size = c->validation.local_batch_size;
		lo.infinite = false;
		lo.shuffle = false;
		if (c->validation.seq_len != c->training.seq_len ||
		    c->validation.local_batch_size != c->training.local_batch_size)
			return titan_error(TITAN_E_UNSUPPORTED,
					   "validation.seq_len and validation.local_batch_size must equal "
					   "the training ones in this version");
		if ((rc = titan_loader_open(&lo, &r->val)) < 0)
			return rc;
	}
	if (c->profiling.enable_memory_snapshot) {
		char dir[4096], path[4200];

		snprintf(dir, sizeof(dir), "%s/%s", c->job.dump_folder,
			 c->profiling.save_memory_snapshot_folder);
		if ((rc = mkdirs(dir)) < 0)
			return rc;
		/* written as it goes (not renamed at the end): the events of a
		 * killed run are what titan-memprof is asked to explain */
		snprintf(path, sizeof(path), "%s/rank0.memtrace", dir);
		if (!(r->memtrace = fopen(path, "wb")))
			return titan_error(TITAN_E_IO, "cannot create '%s': %s", path, strerror(errno));
		if ((rc = titan_mem_trace_start(titan_host_allocator(), r->memtrace)) < 0)
			return rc;
	}
	/* the probe's 12 MiB before the model: never on top of its arenas */
	r->peak_flops = isnan(c->metrics.peak_flops) ? measure_peak(r->be.nthreads)
						     : c->metrics.peak_flops;
	if ((rc = titan_llama_new(&r->dims, &r->mo, &r->be, NULL, &r->model)) < 0)
		return rc;
	titan_llama_set_hooks(r->model, &(struct titan_llama_hooks){hook_begin, hook_end, r});
	titan_llama_init_weights(r->model, (uint64_t)c->training.seed);
	snprintf(r->ckpt_dir, sizeof(r->ckpt_dir), "%s/%s", c->job.dump_folder, c->checkpoint.folder);
	if (c->checkpoint.enable && !strcmp(c->checkpoint.async_mode, "async") &&
	    ((rc = titan_ckpt_async_new(titan_host_allocator(), &r->ckpt_async)) < 0 ||
	     (rc = titan_ckpt_async_reserve(r->ckpt_async, titan_llama_table(r->model)->arena_floats,
					    !c->checkpoint.model_weights_only)) < 0))
		return rc;
	if (c->checkpoint.enable || *c->checkpoint.initial_load_path) {
		if ((rc = ckpt_resume(r)) < 0)
			return rc;
	}
	if (c->checkpoint.create_seed_checkpoint) {
		struct titan_ckpt_state st;
		struct titan_loader_state ls;
		char *path = NULL;

		ckpt_state(r, &st, &ls);
		if ((rc = titan_ckpt_save(r->ckpt_dir, 0, &st, TITAN_CKPT_MODEL_ONLY, TITAN_CKPT_FLOAT32,
					  &path)) < 0)
			return rc;
		titan_log_info("Created seed checkpoint %s", path);
		free(path);
		r->start_step = c->training.steps; /* nothing to train */
	}
	r->inputs = titan_malloc((size_t)(r->accum * r->n) * sizeof(int32_t), TITAN_MEM_DATA);
	r->labels = titan_malloc((size_t)(r->accum * r->n) * sizeof(int32_t), TITAN_MEM_DATA);
	if (!r->inputs || !r->labels)
		return TITAN_E_NOMEM;
	titan_model_count_params(&r->dims, &mp);
	r->flops_per_token = titan_model_flops_per_token(&r->dims, c->training.seq_len);
	titan_log_info("Model llama3 %s size: %lld total parameters", r->dims.flavor,
		       (long long)mp.total);
	titan_log_info("Peak FLOPS used for computing MFU: %.3e (%s, %d threads)", r->peak_flops,
		       isnan(c->metrics.peak_flops) ? "measured sgemm" : "metrics.peak_flops",
		       r->be.nthreads);
	titan_log_info("Training starts: %lld steps, %lld microbatch(es) of %lld x %lld tokens, "
		       "activation checkpointing %s", (long long)c->training.steps,
		       (long long)r->accum, (long long)c->training.local_batch_size,
		       (long long)c->training.seq_len, c->activation_checkpoint.mode);
	if (*c->metrics.save_jsonl_file) {
		char path[4096];

		if ((rc = mkdirs(c->job.dump_folder)) < 0)
			return rc;
		snprintf(path, sizeof(path), "%s/%s", c->job.dump_folder, c->metrics.save_jsonl_file);
		/* a resumed run continues the file */
		if (!(r->jsonl = fopen(path, r->start_step > 0 ? "a" : "w")))
			return titan_error(TITAN_E_IO, "cannot create '%s': %s", path, strerror(errno));
	}
	return 0;
}

/* Threading defaults.  On a few cores, threads that spin while idle steal
 * the cores the working threads need: libgomp's default wait policy spins
 * between parallel regions, and OpenBLAS's pthread workers spin (with
 * sched_yield) for 2^28 cycles after every sgemm, while titan alternates
 * sgemm with OpenMP regions all the time.  So titan-train runs with
 *   OMP_WAIT_POLICY=PASSIVE      idle OpenMP threads sleep
 *   OPENBLAS_THREAD_TIMEOUT=4    OpenBLAS workers sleep after 2^4 cycles
 * unless the environment sets them (measured: debugmodel at seq 512 on 2
 * threads, 1.5-1.7x the tokens/s of the libraries' defaults; no change on
 * 1 thread).  Both libraries read their environment when they are loaded,
 * before main, so the first run sets the missing ones and re-executes
 * itself once (/proc/self/exe); if that fails it goes on with the
 * libraries' defaults.  TITAN_THREAD_DEFAULTS=0 turns this off. */
static void threading_defaults(char **argv)
{
	static const char *const vars[][2] = {
		{"OMP_WAIT_POLICY", "PASSIVE"},
		{"OPENBLAS_THREAD_TIMEOUT", "4"},
	};
	const char *off = getenv("TITAN_THREAD_DEFAULTS");
	int changed = 0;

	if (off && !strcmp(off, "0"))
		return;
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (!getenv(vars[i][0]) && setenv(vars[i][0], vars[i][1], 0) == 0)
			changed = 1;
	if (changed)
		execv("/proc/self/exe", argv);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		TITAN_CLI_GLOBAL_OPTIONS,
		TITAN_CLI_CONFIG_OPTIONS,
		{0},
	};
	struct titan_cli cli;
	struct run r = {0};
	int opt, rc;

	threading_defaults(argv);
	/* Per-step buffers (the classifier's logits chunk: 32 MiB at vocab
	 * 8192) sit at glibc's largest mmap threshold: each would be mapped,
	 * page-faulted and unmapped every step.  Keep them in the heap. */
	mallopt(M_MMAP_THRESHOLD, 1 << 30);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	if ((rc = titan_cli_init(&cli, "titan-train", &argc, argv, true)) != 0)
		return rc;
	while ((opt = getopt_long(argc, argv, TITAN_CLI_GLOBAL_SHORT TITAN_CLI_CONFIG_SHORT,
				  longopts, NULL)) != -1) {
		if (opt == 'h') {
			usage(stdout);
			return titan_cli_finish(&cli, 0);
		}
		rc = titan_cli_option(&cli, opt, optarg);
		if (rc == TITAN_CLI_HANDLED)
			continue;
		titan_cli_release(&cli);
		return rc == TITAN_CLI_UNKNOWN ? titan_cli_usage_error(&cli, "unhandled option") : rc;
	}
	if (optind < argc) {
		rc = titan_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind]);
		goto done;
	}
	if (!cli.config_path && cli.overrides.n == 0) {
		rc = titan_cli_usage_error(&cli, "--config FILE is required");
		goto done;
	}
	r.verbosity = cli.verbosity;
	if ((rc = titan_cli_load_config(&cli, &r.cfg)) != 0)
		goto done;
	/* runs describe themselves: version, features and the config they used */
	titan_log_info("titan-train %s (%s), features %s, config %s", titan_version(),
		       titan_git_revision(), titan_features(),
		       cli.config_path ? cli.config_path : "(defaults)");
	if (r.cfg.job.print_config)
		titan_config_write_yaml(&r.cfg, stderr);
	if ((rc = setup(&r, &cli)) < 0 || (rc = train(&r)) < 0) {
		rc = titan_cli_fail(&cli, rc);
		goto done;
	}
	if (r.memtrace) {
		rc = titan_mem_trace_stop(titan_host_allocator());
		if (fclose(r.memtrace) != 0 && rc == 0)
			rc = titan_error(TITAN_E_IO, "cannot write the memory trace: %s", strerror(errno));
		r.memtrace = NULL;
		if (rc < 0) {
			rc = titan_cli_fail(&cli, rc);
			goto done;
		}
	}
	if (r.jsonl && fclose(r.jsonl) != 0) {
		r.jsonl = NULL;
		rc = titan_cli_fail(&cli, titan_error(TITAN_E_IO, "cannot write metrics: %s",
						      strerror(errno)));
		goto done;
	}
	r.jsonl = NULL;
	rc = titan_cli_finish(&cli, 0);
done:
	titan_ckpt_async_free(r.ckpt_async); /* waits for a write in flight */
	titan_trace_close(r.trace);
	if (r.memtrace) {
		titan_mem_trace_stop(titan_host_allocator());
		fclose(r.memtrace);
	}
	if (r.jsonl)
		fclose(r.jsonl);
	titan_free(r.inputs);
	titan_free(r.labels);
	titan_llama_free(r.model);
	titan_loader_close(r.train);
	titan_loader_close(r.val);
	if (r.be_ready)
		titan_backend_release(&r.be);
	titan_config_release(&r.cfg);
	titan_cli_release(&cli);
	return rc;
}
