/*
 * trainer.c — torchtitan's Trainer (train.py) on one or many ranks: set-up
 * (mesh, data loader per DP rank, model sharded or replicated, checkpoint
 * resume), the step loop (microbatches with the loss normalised by the
 * step's valid tokens over every rank, gradient clipping with the global
 * norm, AdamW, the warmup-stable-decay schedule), validation, checkpoints,
 * the log line and metrics.jsonl (rank 0), per-rank profiling traces and
 * memory traces, comm timeouts and SIGTERM.
 */
#include "titan/train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "titan/ckpt.h"
#include "titan/core.h"
#include "titan/cuda.h"
#include "titan/data.h"
#include "titan/dist.h"
#include "titan/trace.h"
#include "trainer_impl.h"

/* ------------------------------------------------------------ signals */

static volatile sig_atomic_t stop_signal;

/* The first stop signal finishes the step (and checkpoints); a second one
 * stops at once, removing the files being written. */
static void on_stop_signal(int sig)
{
	if (stop_signal) {
		titan_tmp_remove_all();
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	stop_signal = sig;
}

void titan_trainer_catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
}

/* ------------------------------------------------------------ helpers */

/* Peak fp32 FLOP/s of this CPU measured with an sgemm (1024^3, best of 3)
 * on the threads the run uses: OpenBLAS's own threading for the probe (the
 * training GEMMs run it on one thread per tile of C, lib/cpu/matmul.c).
 * Only with metrics.measure_peak_flops: it moves between runs (1.28e11 to
 * 1.93e11 on one machine), the nominal peak (lib/cpu/peak.c) does not. */
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

static struct titan_comm *comm(const struct titan_trainer *t, enum titan_mesh_dim d)
{
	return t->dist->comm[d];
}

/* ------------------------------------------------------------ profiling */

static void set_phase(struct titan_trainer *t, uint16_t phase)
{
	t->phase = phase;
	titan_mem_set_step(t->mem, (uint32_t)t->step, phase);
}

static void hook_begin(void *ctx, const char *name)
{
	struct titan_trainer *t = ctx;

	if (!strcmp(name, "forward") && t->phase != TITAN_PHASE_VALIDATION)
		set_phase(t, TITAN_PHASE_FORWARD);
	else if (!strcmp(name, "loss") && t->phase != TITAN_PHASE_VALIDATION)
		set_phase(t, TITAN_PHASE_LOSS);
	else if (!strcmp(name, "backward"))
		set_phase(t, TITAN_PHASE_BACKWARD);
	titan_trace_begin(t->trace, name, "model", t->step);
}

static void hook_end(void *ctx, const char *name)
{
	struct titan_trainer *t = ctx;
	struct titan_mem_stats ms;

	(void)name;
	if (!t->trace)
		return;
	titan_trace_end(t->trace);
	titan_mem_get_stats(t->mem, &ms);
	titan_trace_counter(t->trace, t->cuda ? "device memory (bytes)" : "host memory (bytes)",
			    (double)ms.total_cur);
	if (t->cuda) /* the caching allocator's segments */
		titan_trace_counter(t->trace, "device memory reserved (bytes)",
				    (double)ms.reserved);
}

/* profiling.profile_freq / profiler_warmup / profiler_active as torchtitan's
 * schedule: in each window of profile_freq steps the last `active` steps are
 * traced (wait = freq - warmup - active steps, then warmup, then active). */
static bool profiled(const struct titan_config *c, int64_t step)
{
	int64_t f = c->profiling.profile_freq, pos = (step - 1) % f;

	return c->profiling.enable_profiling && pos >= f - c->profiling.profiler_active;
}

static int trace_open(struct titan_trainer *t, int64_t step)
{
	const struct titan_config *c = &t->cfg;
	char base[4096], dir[4200], path[4300], meta[256];
	int rc;

	if ((rc = titan_path_join(base, sizeof(base), c->job.dump_folder,
				  c->profiling.save_traces_folder)) < 0)
		return titan_error_prefix("profiling.save_traces_folder");
	snprintf(dir, sizeof(dir), "%s/iteration_%lld", base, (long long)step);
	if ((rc = titan_mkdirs(dir)) < 0)
		return rc;
	snprintf(path, sizeof(path), "%s/rank%d_trace.json", dir, t->dist->rank);
	snprintf(meta, sizeof(meta), "{\"tool\": \"titan-train\", \"version\": \"%s\", \"step\": %lld, "
		 "\"world_size\": %d}", titan_version(), (long long)step, t->dist->size);
	t->trace_seq0 = titan_dist_comm_spans(t->dist, INT64_MAX, NULL, NULL);
	return titan_trace_open(&t->trace, path, t->dist->rank, meta);
}

/* The step's collectives as spans of a "comm" track (tid 1), from when the
 * progress thread issued them to their completion: titan-memprof time
 * splits them into exposed and overlapped communication. */
static void comm_span(void *ctx, const struct titan_comm_span *s)
{
	struct titan_trainer *t = ctx;
	char name[160];

	if (!s->start_ns || !s->end_ns || !strcmp(s->comm, "world"))
		return;
	snprintf(name, sizeof(name), "%s %s (%s)", s->op, s->what, s->comm);
	titan_trace_complete(t->trace, name, "comm", 1, s->start_ns, s->end_ns, s->step);
}

/* One metrics.jsonl row, on disk when this returns.  A write that fails
 * (a full disk) leaves the file at its last complete row — the partial
 * one is cut off and stdio's buffer dropped, so that closing the file
 * cannot append it later — and stops the run. */
static int write_row(struct titan_trainer *t, struct titan_json *j)
{
	const off_t at = ftello(t->jsonl);
	int rc = titan_json_write_line(j, t->jsonl), err;

	if (rc == 0 && fflush(t->jsonl) == 0)
		return 0;
	err = errno ? errno : EIO;
	titan_error_clear();
	__fpurge(t->jsonl);
	if (at < 0 || ftruncate(fileno(t->jsonl), at) != 0)
		titan_log_warn("cannot cut the partial row off '%s': %s", t->jsonl_path,
			       strerror(errno));
	return titan_error(TITAN_E_IO, "cannot write metrics to '%s': %s (the file ends at the "
			   "last complete row)", t->jsonl_path, strerror(err));
}

/* ------------------------------------------------------------ validation */

static int validate(struct titan_trainer *t, int64_t step)
{
	double sums[2] = {0, 0}, loss; /* loss sum, valid tokens */
	int64_t steps = 0;
	uint64_t t0 = titan_time_ns();
	int rc;

	set_phase(t, TITAN_PHASE_VALIDATION);
	titan_loader_reset(t->val);
	while (t->cfg.validation.steps < 0 || steps < t->cfg.validation.steps) {
		struct titan_batch_info info;
		double ls;
		int64_t nv;

		if ((rc = titan_loader_next(t->val, t->inputs, t->labels, &info)) < 0)
			return rc;
		/* every rank stops at the same call: global rows decide */
		if (rc == 0 || info.global_rows == 0)
			break;
		if (t->dp && (rc = titan_dp_begin_microbatch(t->dp, false, true)) < 0)
			return rc;
		rc = t->pp ? titan_pp_step(t->pp, t->inputs, t->labels, t->n / t->mo.pp_microbatches,
					   0.0f, false, true, &ls, &nv)
			   : titan_llama_step(t->model, t->inputs, t->labels, 0.0f, false, &ls, &nv);
		if (rc < 0)
			return rc;
		sums[0] += ls;
		sums[1] += (double)nv;
		steps++;
	}
	if ((rc = titan_comm_all_reduce(comm(t, TITAN_DIM_LOSS), TITAN_IN_PLACE, sums, 2,
					TITAN_DTYPE_F64, TITAN_REDOP_SUM, "validation loss")) < 0)
		return rc;
	loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
	if (t->verbosity >= 0 && t->print_rank)
		printf("validate step: %2lld  loss: %8.5f  tps: %.0f\n", (long long)step, loss,
		       (double)(steps * t->n) / ((double)(titan_time_ns() - t0) * 1e-9));
	if (t->jsonl) {
		struct titan_json j;

		titan_json_init(&j);
		titan_json_object_begin(&j);
		titan_json_key(&j, "step");
		titan_json_int(&j, step);
		titan_json_key(&j, "validation_loss");
		titan_json_double(&j, loss);
		titan_json_key(&j, "validation_tokens");
		titan_json_int(&j, (int64_t)sums[1]);
		titan_json_object_end(&j);
		rc = write_row(t, &j);
		titan_json_release(&j);
		if (rc < 0)
			return rc;
	}
	if (t->tb) {
		titan_tfevents_scalar(t->tb, "validation_metrics/loss", loss);
		titan_tfevents_scalar(t->tb, "validation_metrics/tokens", sums[1]);
		if ((rc = titan_tfevents_write(t->tb, step, (double)titan_unix_time_ns() * 1e-9)) < 0)
			return rc;
	}
	return 0;
}

/* ------------------------------------------------------------ metrics */

/* torchtitan's memory figures (DeviceMemoryMonitor.get_peak_stats): peaks
 * since the last logged step.  On CUDA they come from the caching
 * allocator (active = live blocks at their rounded sizes, reserved = its
 * cudaMalloc'd segments); on the CPU the tagged allocator's peak is both
 * max_active and max_reserved (the host allocator caches nothing) and
 * there are no retries or OOMs to count. */
struct mem_peaks {
	int64_t max_active, max_reserved, num_alloc_retries, num_ooms;
};

static void mem_peaks(const struct titan_trainer *t, const struct titan_mem_stats *ms,
		      struct mem_peaks *out)
{
	struct titan_caching_stats cs;

	*out = (struct mem_peaks){ms->total_peak, ms->total_peak, 0, 0};
	if (t->cuda && titan_cuda_mem_stats(0, &cs) == 0)
		*out = (struct mem_peaks){cs.active_peak, cs.reserved_peak, cs.num_alloc_retries,
					  cs.num_ooms};
}

/* The step's metrics as TensorBoard scalars, under torchtitan's tags
 * (MetricsProcessor.log) where it has the metric, the values of the
 * metrics.jsonl row. */
static int log_tensorboard(struct titan_trainer *t, int64_t step, const double *v,
			   const struct titan_mem_stats *ms, const struct mem_peaks *mp,
			   const double *mx)
{
	struct titan_tfevents *e = t->tb;
	char tag[96];

	titan_tfevents_scalar(e, "loss_metrics/global_avg_loss", v[0]);
	titan_tfevents_scalar(e, "grad_norm", v[1]);
	titan_tfevents_scalar(e, "lr", v[2]);
	titan_tfevents_scalar(e, "n_tokens_seen", v[3]);
	titan_tfevents_scalar(e, "throughput(tps)", v[4]);
	titan_tfevents_scalar(e, "tflops", v[5]);
	titan_tfevents_scalar(e, "mfu(%)", v[6]);
	titan_tfevents_scalar(e, "time_metrics/end_to_end(s)", v[7]);
	titan_tfevents_scalar(e, "time_metrics/data_loading(s)", v[8]);
	titan_tfevents_scalar(e, "time_metrics/data_loading(%)", v[7] > 0 ? 100.0 * v[8] / v[7] : 0);
	titan_tfevents_scalar(e, "time_metrics/checkpoint_blocked(s)", t->ckpt_blocked_s);
	titan_tfevents_scalar(e, "memory/max_active(GiB)", (double)mp->max_active / 1073741824.0);
	titan_tfevents_scalar(e, "memory/max_active(%)",
			      100.0 * (double)mp->max_active / t->total_mem);
	titan_tfevents_scalar(e, "memory/max_reserved(GiB)",
			      (double)mp->max_reserved / 1073741824.0);
	titan_tfevents_scalar(e, "memory/max_reserved(%)",
			      100.0 * (double)mp->max_reserved / t->total_mem);
	if (t->cuda) {
		titan_tfevents_scalar(e, "memory/num_alloc_retries",
				      (double)mp->num_alloc_retries);
		titan_tfevents_scalar(e, "memory/num_ooms", (double)mp->num_ooms);
	}
	for (int k = 0; k < TITAN_MEM_NTAGS; k++) {
		snprintf(tag, sizeof(tag), "memory/by_tag/%s(GiB)",
			 titan_mem_tag_name((enum titan_mem_tag)k));
		titan_tfevents_scalar(e, tag, (double)ms->peak_at_total[k] / 1073741824.0);
	}
	if (t->dist->size > 1) {
		titan_tfevents_scalar(e, "memory/max_reserved_max_rank(GiB)", mx[0] / 1073741824.0);
		titan_tfevents_scalar(e, "time_metrics/end_to_end_max_rank(s)", mx[1]);
	}
	return titan_tfevents_write(e, step, (double)titan_unix_time_ns() * 1e-9);
}

static int log_step(struct titan_trainer *t, int64_t step, double loss, double norm, double lr,
		    int64_t tokens_seen)
{
	struct titan_allocator *host = t->mem;
	struct titan_mem_stats ms;
	struct mem_peaks mp;
	uint64_t now = titan_time_ns();
	double dt = (double)(now - t->t_last) * 1e-9;
	double tps = (double)t->tokens_since / dt;
	double tflops = t->flops_per_token * tps / 1e12;
	double mfu = t->peak_flops > 0 ? 100.0 * t->flops_per_token * tps / t->peak_flops : 0;
	double gib, mx[2];
	char g[48];
	int rc;

	titan_mem_get_stats(host, &ms);
	mem_peaks(t, &ms, &mp);
	/* the slowest and the largest rank, for the metrics (one small
	 * all-reduce per logged step) */
	mx[0] = (double)mp.max_reserved;
	mx[1] = dt / (double)t->steps_since;
	if ((rc = titan_comm_all_reduce(comm(t, TITAN_DIM_WORLD), TITAN_IN_PLACE, mx, 2,
					TITAN_DTYPE_F64, TITAN_REDOP_MAX, "metrics")) < 0)
		return rc;
	gib = (double)mp.max_reserved / 1073741824.0;
	/* torchtitan warns at every logged step once any happened */
	if (mp.num_alloc_retries > 0)
		titan_log_warn("%lld CUDA memory allocation retries.",
			       (long long)mp.num_alloc_retries);
	if (mp.num_ooms > 0)
		titan_log_warn("%lld CUDA OOM errors thrown.", (long long)mp.num_ooms);
	if (t->verbosity >= 0 && t->print_rank) {
		printf("%sstep: %2lld  loss: %8.5f  grad_norm: %7.4f  memory: %5.2fGiB(%.2f%%)  "
		       "tps: %s  tflops: %.2f  mfu: %.2f%%\n", t->line_prefix, (long long)step, loss,
		       norm, gib, 100.0 * (double)mp.max_reserved / t->total_mem,
		       titan_format_grouped(g, sizeof(g), tps), tflops, mfu);
		fflush(stdout);
	}
	if (t->jsonl) {
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
		titan_json_double(&j, lr);
		titan_json_key(&j, "tokens_seen");
		titan_json_int(&j, tokens_seen);
		titan_json_key(&j, "tps");
		titan_json_double(&j, tps);
		titan_json_key(&j, "tflops");
		titan_json_double(&j, tflops);
		titan_json_key(&j, "mfu_pct");
		titan_json_double(&j, mfu);
		titan_json_key(&j, "step_time_s");
		titan_json_double(&j, dt / (double)t->steps_since);
		titan_json_key(&j, "data_time_s");
		titan_json_double(&j, (double)t->data_ns * 1e-9 / (double)t->steps_since);
		titan_json_key(&j, "checkpoint_blocked_s");
		titan_json_double(&j, t->ckpt_blocked_s);
		titan_json_key(&j, "memory_peak_bytes");
		titan_json_int(&j, ms.total_peak);
		titan_json_key(&j, "memory_peak_by_tag");
		titan_json_object_begin(&j);
		for (int k = 0; k < TITAN_MEM_NTAGS; k++) {
			titan_json_key(&j, titan_mem_tag_name((enum titan_mem_tag)k));
			titan_json_int(&j, ms.peak_at_total[k]);
		}
		titan_json_object_end(&j);
		if (t->cuda) { /* the caching allocator's, as torchtitan's */
			titan_json_key(&j, "memory_max_active_bytes");
			titan_json_int(&j, mp.max_active);
			titan_json_key(&j, "memory_max_active_pct");
			titan_json_double(&j, 100.0 * (double)mp.max_active / t->total_mem);
			titan_json_key(&j, "memory_max_reserved_bytes");
			titan_json_int(&j, mp.max_reserved);
			titan_json_key(&j, "memory_max_reserved_pct");
			titan_json_double(&j, 100.0 * (double)mp.max_reserved / t->total_mem);
			titan_json_key(&j, "num_alloc_retries");
			titan_json_int(&j, mp.num_alloc_retries);
			titan_json_key(&j, "num_ooms");
			titan_json_int(&j, mp.num_ooms);
		}
		if (t->dist->size > 1) {
			titan_json_key(&j, "world_size");
			titan_json_int(&j, t->dist->size);
			titan_json_key(&j, "memory_peak_bytes_max_rank");
			titan_json_int(&j, (int64_t)mx[0]);
			titan_json_key(&j, "step_time_s_max_rank");
			titan_json_double(&j, mx[1]);
		}
		titan_json_object_end(&j);
		rc = write_row(t, &j);
		titan_json_release(&j);
		if (rc < 0)
			return rc;
	}
	if (t->tb) {
		const double v[] = {loss, norm, lr, (double)tokens_seen, tps, tflops, mfu,
				    dt / (double)t->steps_since,
				    (double)t->data_ns * 1e-9 / (double)t->steps_since};

		if ((rc = log_tensorboard(t, step, v, &ms, &mp, mx)) < 0)
			return rc;
	}
	titan_mem_reset_peak(host);
	if (t->cuda)
		titan_cuda_mem_reset_peak(0);
	t->ckpt_blocked_s = 0;
	t->t_last = titan_time_ns();
	t->tokens_since = t->steps_since = 0;
	t->data_ns = 0;
	return 0;
}

/* ------------------------------------------------------------ the loop */

/* Do all ranks agree to stop (a signal on any of them)?  One small
 * all-reduce per step, so that every rank leaves the loop after the same
 * step and takes part in the final checkpoint. */
static int agree_stop(struct titan_trainer *t, int *sig)
{
	int64_t s = stop_signal;
	int rc;

	if ((rc = titan_comm_all_reduce(comm(t, TITAN_DIM_WORLD), TITAN_IN_PLACE, &s, 1,
					TITAN_DTYPE_I64, TITAN_REDOP_MAX, "stop signal")) < 0)
		return rc;
	*sig = (int)s;
	return 0;
}

int titan_trainer_run(struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;
	struct titan_lr_schedule sched;
	struct titan_adamw_hparams hp = {c->optimizer.lr, c->optimizer.beta1, c->optimizer.beta2,
					 c->optimizer.eps, c->optimizer.weight_decay};
	int64_t opt_steps = t->opt_steps0, tokens_seen = t->tokens_seen0;
	int rc, sig = 0;

	titan_lr_schedule_init(&sched, c);
	if ((sched.clamped & 1) && !c->checkpoint.create_seed_checkpoint)
		titan_log_warn("lr_scheduler.warmup_steps %lld exceeds the %lld training steps: "
			       "warmup over all of them", (long long)c->lr_scheduler.warmup_steps,
			       (long long)sched.warmup);
	t->t_last = titan_time_ns();
	for (int64_t step = t->start_step + 1; step <= c->training.steps; step++) {
		double loss_sum = 0, loss, norm, red[2];
		int64_t valid = 0;
		float coef;
		uint64_t t0 = titan_time_ns();

		t->step = step;
		titan_dist_set_step(t->dist, step);
		if (profiled(c, step) && (rc = trace_open(t, step)) < 0)
			return rc;
		titan_trace_begin(t->trace, "step", "train", step);
		titan_trace_begin(t->trace, "data", "train", step);
		set_phase(t, TITAN_PHASE_DATA);
		/* all microbatches first: the loss is normalised by the step's
		 * valid-token count over every DP rank (torchtitan's
		 * global_valid_tokens; the loader knows the global batch) */
		for (int64_t mb = 0; mb < t->accum; mb++) {
			struct titan_batch_info info;

			rc = titan_loader_next(t->train, t->inputs + mb * t->n, t->labels + mb * t->n,
					       &info);
			if (rc < 0) /* the shard and offset are in the message */
				return titan_error_prefix("step %lld: training data", (long long)step);
			valid += info.global_valid_tokens;
		}
		t->data_ns += titan_time_ns() - t0;
		titan_trace_end(t->trace);
		if ((rc = titan_llama_zero_grads(t->model)) < 0)
			return rc;
		for (int64_t mb = 0; mb < t->accum; mb++) {
			double ls;
			int64_t nv;

			if (t->dp && (rc = titan_dp_begin_microbatch(t->dp, true, mb == t->accum - 1)) < 0)
				return rc;
			if (t->pp)
				rc = titan_pp_step(t->pp, t->inputs + mb * t->n, t->labels + mb * t->n,
						   t->n / t->mo.pp_microbatches,
						   valid ? 1.0f / (float)valid : 0.0f, true,
						   mb == t->accum - 1, &ls, &nv);
			else
				rc = titan_llama_step(t->model, t->inputs + mb * t->n,
						      t->labels + mb * t->n,
						      valid ? 1.0f / (float)valid : 0.0f, true, &ls, &nv);
			if (rc < 0)
				return rc;
			loss_sum += ls;
		}
		titan_trace_begin(t->trace, "grad sync", "comm", step);
		if (t->dp && (rc = titan_dp_finish_grads(t->dp)) < 0)
			return rc;
		if ((rc = titan_llama_tp_reduce_grads(t->model)) < 0)
			return rc;
		titan_trace_end(t->trace);
		/* the global loss: Σ ranks' loss sums / global valid tokens */
		red[0] = loss_sum;
		red[1] = 0;
		if ((rc = titan_comm_all_reduce(comm(t, TITAN_DIM_LOSS), TITAN_IN_PLACE, red, 1,
						TITAN_DTYPE_F64, TITAN_REDOP_SUM, "loss")) < 0)
			return rc;
		loss = valid ? red[0] / (double)valid : NAN;
		rc = t->dp ? titan_dp_grad_norm(t->dp, c->training.max_norm, &norm, &coef)
			   : titan_llama_grad_norm(t->model, c->training.max_norm, &norm, &coef);
		if (rc < 0)
			return rc;
		if (!isfinite(loss) || !isfinite(norm)) {
			if (!c->training.skip_nonfinite)
				return titan_error(TITAN_E_NUMERIC,
						   "step %lld: loss %g, grad_norm %g is not finite; stopping "
						   "(training.skip_nonfinite skips such steps instead)",
						   (long long)step, loss, norm);
			if (++t->nonfinite_run >= c->training.max_consecutive_nonfinite)
				return titan_error(TITAN_E_NUMERIC,
						   "step %lld: loss %g, grad_norm %g: %lld non-finite steps "
						   "in a row (training.max_consecutive_nonfinite); stopping "
						   "(no checkpoint is written while the loss is not finite)",
						   (long long)step, loss, norm, (long long)t->nonfinite_run);
			titan_log_warn("step %lld: loss %g, grad_norm %g is not finite: optimizer step "
				       "skipped (%lld in a row)", (long long)step, loss, norm,
				       (long long)t->nonfinite_run);
		} else {
			t->nonfinite_run = 0;
			hp.lr = c->optimizer.lr * titan_lr_factor(&sched, step - 1);
			set_phase(t, TITAN_PHASE_OPTIMIZER);
			titan_trace_begin(t->trace, "optimizer", "train", step);
			rc = titan_llama_adamw(t->model, &hp, ++opt_steps, coef);
			titan_trace_end(t->trace);
			if (rc < 0)
				return rc;
		}
		if (t->trace && t->dist->size > 1)
			titan_dist_comm_spans(t->dist, t->trace_seq0, comm_span, t);
		titan_trace_end(t->trace); /* step */
		if (t->trace) {
			rc = titan_trace_close(t->trace);
			t->trace = NULL;
			if (rc < 0)
				return rc;
		}
		t->tokens_since += t->accum * t->n;
		tokens_seen += t->accum * t->n * t->dp_degree;
		t->steps_since++;
		/* the run's first step, whatever its number (a resumed run's too) */
		if (step == t->start_step + 1)
			titan_dist_set_timeout(t->dist, (double)c->comm.train_timeout_seconds);
		if ((rc = agree_stop(t, &sig)) < 0)
			return rc;
		if ((step == 1 || step % c->metrics.log_freq == 0 || step == c->training.steps ||
		     sig) && (rc = log_step(t, step, loss, norm, hp.lr, tokens_seen)) < 0)
			return rc;
		if ((rc = titan_trainer_ckpt_reap(t, false)) < 0)
			return rc;
		if (c->checkpoint.enable && !c->checkpoint.load_only &&
		    (step % c->checkpoint.interval == 0 || step == c->training.steps || sig ||
		     (step == 1 && c->checkpoint.enable_first_step_checkpoint))) {
			/* weights whose loss is not finite are never saved: the
			 * newest checkpoint stays the last healthy one */
			if (t->nonfinite_run > 0)
				titan_log_warn("step %lld: no checkpoint, the loss is not finite",
					       (long long)step);
			else if ((rc = titan_trainer_ckpt_save(t, step, step == c->training.steps,
								tokens_seen, opt_steps)) < 0)
				return rc;
		}
		if (sig) {
			titan_log_warn("%s received: stopped after step %lld of %lld%s", strsignal(sig),
				       (long long)step, (long long)c->training.steps,
				       !c->checkpoint.enable || c->checkpoint.load_only
				       ? " (checkpointing is off: nothing saved)"
				       : t->nonfinite_run > 0 ? " (no checkpoint: the loss is not finite)"
				       : " (checkpoint saved)");
			t->stopped_by = sig;
			break;
		}
		if (t->val && (step == 1 || step % c->validation.freq == 0) &&
		    (rc = validate(t, step)) < 0)
			return rc;
	}
	return titan_trainer_ckpt_reap(t, true);
}

int titan_trainer_stopped_by(const struct titan_trainer *t)
{
	return t->stopped_by;
}

/* ------------------------------------------------------------ set-up */

static int check_layout(const struct titan_trainer *t)
{
	const struct titan_parallel_dims *pd = &t->dist->dims;
	const struct titan_config *c = &t->cfg;
	const int64_t tp = pd->degree[TITAN_DIM_TP];
	const int64_t pp = pd->degree[TITAN_DIM_PP];
	enum titan_pp_schedule sched;
	int rc;

	if (pp > 1) {
		if ((rc = titan_pp_schedule_parse(c->parallelism.pipeline_parallel_schedule,
						  &sched)) < 0)
			return rc;
		if (t->dims.tied)
			return titan_error(TITAN_E_INVALID, "model.tie_word_embeddings with "
					   "parallelism.pipeline_parallel_degree %lld: the embedding "
					   "and the output live on different stages", (long long)pp);
	}
	/* lib/model/layout.c: titan-estimate checks the same */
	if ((rc = titan_model_check_tp_cp(&t->dims, tp, pd->degree[TITAN_DIM_CP],
					  c->training.seq_len,
					  pp > 1 ? c->parallelism.pipeline_parallel_microbatch_size
						 : c->training.local_batch_size)) < 0)
		return rc;
	if (tp > 1 && c->parallelism.enable_async_tensor_parallel)
		return titan_error(TITAN_E_INVALID, "parallelism.enable_async_tensor_parallel: "
				   "not supported (the CPU path runs TP's collectives between the "
				   "matmuls); set it to false");
	if (t->cfg.parallelism.data_parallel_replicate_degree < 1)
		return titan_error(TITAN_E_INVALID, "parallelism.data_parallel_replicate_degree");
	return 0;
}

/* Keys torchtitan has that this trainer cannot honour are refused, never
 * accepted and ignored; each message says what to do instead. */
static int check_supported(const struct titan_config *c)
{
	if (c->model.converters.n > 0)
		return titan_error(TITAN_E_INVALID, "model.converters: '%s' needs the CUDA "
				   "backend; titan-train's CPU path has no converters (remove the key)",
				   c->model.converters.items[0]);
	if (strcmp(c->training.dtype, "float32") != 0)
		return titan_error(TITAN_E_INVALID, "training.dtype: '%s' master weights need "
				   "the CUDA backend; the CPU path keeps them in float32",
				   c->training.dtype);
	if (c->optimizer.early_step_in_backward)
		return titan_error(TITAN_E_INVALID, "optimizer.early_step_in_backward: not "
				   "supported (AdamW steps once the global gradient norm is known, "
				   "after backward); set it to false");
	if (c->checkpoint.initial_load_in_hf)
		return titan_error(TITAN_E_INVALID, "checkpoint.initial_load_in_hf: convert the "
				   "HuggingFace folder first (titan-ckpt-convert --from hf HF_DIR "
				   "init.h5) and set checkpoint.initial_load_path=init.h5");
	if (c->checkpoint.last_save_in_hf)
		return titan_error(TITAN_E_INVALID, "checkpoint.last_save_in_hf: export after "
				   "training instead (titan-ckpt-convert --to hf DUMP/checkpoint "
				   "HF_DIR, which takes the newest step)");
	return 0;
}

/* bf16 dense peak FLOP/s of a GPU by name (torchtitan's
 * get_peak_flops), 0 when unknown. */
static double gpu_peak_flops(const char *name)
{
	if (strstr(name, "H100") || strstr(name, "H200") || strstr(name, "H800") ||
	    strstr(name, "H20"))
		return strstr(name, "H20") && !strstr(name, "H200") ? 148e12 : 989e12;
	if (strstr(name, "B200"))
		return 2.25e15;
	if (strstr(name, "A100") || strstr(name, "A800"))
		return 312e12;
	if (strstr(name, "L40S"))
		return 362e12;
	return 0;
}

const char *titan_trainer_device(const struct titan_config *c, int nranks)
{
	int n = 0;

	if (!strcmp(c->training.device, "cuda"))
		return "cuda";
	if (!strcmp(c->training.device, "cpu") || nranks > 1 || !titan_cuda_built() ||
	    titan_cuda_device_count(&n) < 0 || n == 0) {
		titan_error_clear();
		return "cpu";
	}
	return "cuda";
}

/* training.device: cuda needs a GPU and one rank with no model parallelism
 * (this version); auto picks cuda when that holds and a GPU is there. */
static int open_backend(struct titan_trainer *t, const struct titan_trainer_opts *o)
{
	const struct titan_config *c = &t->cfg;
	const bool parallel = t->dist->size > 1;
	struct titan_cuda_opts co = {0};
	struct titan_cuda_device_info info;
	struct titan_mem_backend mb;
	int rc;

	t->mem = titan_host_allocator();
	if (!strcmp(titan_trainer_device(c, t->dist->size), "cpu")) {
		if ((rc = titan_backend_cpu_init(&t->be, o->threads)) < 0)
			return rc;
		t->be_ready = true;
		/* the docs promise no key is silently ignored: say what the
		 * CPU computes in (its kernels are float32; bf16 applies on
		 * CUDA, where it is the GEMM precision) */
		if (!strcmp(c->training.mixed_precision_param, "bfloat16"))
			titan_log_info("training.mixed_precision_param bfloat16: the CPU computes in "
				       "float32 (mixed precision applies on CUDA)");
		return 0;
	}
	if (parallel)
		return titan_error(TITAN_E_UNSUPPORTED, "training.device: cuda trains on one rank "
				   "in this version (%d ranks here); use training.device: cpu for "
				   "multi-rank runs", t->dist->size);
	if (c->training.enable_cpu_offload)
		return titan_error(TITAN_E_UNSUPPORTED, "training.enable_cpu_offload: not with "
				   "training.device: cuda on one rank");
	co.device = 0;
	co.matmul = strcmp(c->training.mixed_precision_param, "bfloat16") == 0
			    ? TITAN_CUDA_MATMUL_BF16 : TITAN_CUDA_MATMUL_FP32;
	if ((rc = titan_cuda_device_info(co.device, &info)) < 0 ||
	    (rc = titan_cuda_mem_backend(co.device, &mb)) < 0)
		return titan_error_prefix("training.device: cuda");
	if (!(t->dev_alloc = titan_allocator_new("cuda:0", &mb)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if ((rc = titan_backend_cuda_init(&t->be, &co, t->dev_alloc)) < 0)
		return titan_error_prefix("training.device: cuda");
	t->be_ready = true;
	t->cuda = true;
	t->mem = t->dev_alloc;
	t->total_mem = (double)info.total_memory;
	t->peak_flops = gpu_peak_flops(info.name);
	titan_log_info("Device: %s (cuda:%d, compute capability %d.%d, %.1f GiB), GEMMs in %s",
		       info.name, co.device, info.cc_major, info.cc_minor,
		       (double)info.total_memory / 1073741824.0,
		       co.matmul == TITAN_CUDA_MATMUL_BF16 ? "bf16 (fp32 accumulate)" : "fp32");
	if (t->peak_flops == 0 && isnan(c->metrics.peak_flops))
		titan_log_warn("no bf16 peak known for '%s': MFU reads 0 (set "
			       "metrics.peak_flops)", info.name);
	return 0;
}

static int open_loaders(struct titan_trainer *t)
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
		lo.seq_len = c->validation.seq_len;
		lo.local_batch_size = c->validation.local_batch_size;
		lo.infinite = false;
		lo.shuffle = false;
		if (c->validation.seq_len != c->training.seq_len ||
		    c->validation.local_batch_size != c->training.local_batch_size)
			return titan_error(TITAN_E_UNSUPPORTED,
					   "validation.seq_len and validation.local_batch_size must equal "
					   "the training ones in this version");
		if ((rc = titan_loader_open(&lo, &t->val)) < 0)
			return rc;
	}
	return 0;
}

static int open_memtrace(struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;
	char dir[4096], path[4200];
	int rc, fd;

	if ((rc = titan_path_join(dir, sizeof(dir), c->job.dump_folder,
				  c->profiling.save_memory_snapshot_folder)) < 0)
		return titan_error_prefix("profiling.save_memory_snapshot_folder");
	if ((rc = titan_mkdirs(dir)) < 0)
		return rc;
	/* written as it goes (not renamed at the end): the events of a killed
	 * run are what titan-memprof is asked to explain */
	snprintf(path, sizeof(path), "%s/rank%d.memtrace", dir, t->dist->rank);
	/* never through a symbolic link planted at the name (issue 21) */
	if ((rc = titan_create_nofollow(path, O_WRONLY | O_TRUNC, &fd)) < 0)
		return rc;
	if (!(t->memtrace = fdopen(fd, "wb"))) {
		close(fd);
		return titan_error(TITAN_E_IO, "cannot create '%s': %s", path, strerror(errno));
	}
	return titan_mem_trace_start(titan_host_allocator(), t->memtrace);
}

/* One job per dump folder: two titan-train processes appending to one
 * metrics.jsonl and replacing each other's checkpoints corrupt both.  Rank
 * 0 holds an exclusive flock on DUMP/.titan-train.lock for the life of the
 * process (the kernel drops it when the process ends, however it ends);
 * the file says who holds it. */
static int lock_dump_folder(struct titan_trainer *t)
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

static int open_jsonl(struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;
	char path[4200], file[4096];
	bool append = t->start_step > 0;
	int rc, fd;

	if (!*c->metrics.save_jsonl_file || (t->dist->rank != 0 && !c->metrics.save_for_all_ranks))
		return 0;
	/* an absolute metrics.save_jsonl_file is that file (os.path.join) */
	if ((rc = titan_path_join(file, sizeof(file), c->job.dump_folder,
				  c->metrics.save_jsonl_file)) < 0)
		return titan_error_prefix("metrics.save_jsonl_file");
	if (t->dist->rank != 0) {
		/* metrics.save_for_all_ranks: FILE.rankR.jsonl beside rank 0's */
		const char *slash = strrchr(file, '/'), *dot = strrchr(file, '.');

		if (!dot || (slash && dot < slash))
			dot = file + strlen(file);
		if (snprintf(path, sizeof(path), "%.*s.rank%d%s", (int)(dot - file), file,
			     t->dist->rank, dot) >= (int)sizeof(path))
			return titan_error(TITAN_E_INVALID, "metrics.save_jsonl_file: path too long");
	} else {
		snprintf(path, sizeof(path), "%s", file);
	}
	/* the file's folder: the dump folder or wherever an absolute or
	 * nested name points */
	{
		char dir[4200], *slash;

		snprintf(dir, sizeof(dir), "%s", path);
		if ((slash = strrchr(dir, '/')) && slash > dir) {
			*slash = '\0';
			if ((rc = titan_mkdirs(dir)) < 0)
				return rc;
		}
	}
	/* a resumed run continues the file; a symbolic link at the name is
	 * replaced by a regular file, never written through (issue 21) */
	snprintf(t->jsonl_path, sizeof(t->jsonl_path), "%s", path);
	if ((rc = titan_create_nofollow(path, O_WRONLY | (append ? O_APPEND : O_TRUNC), &fd)) < 0)
		return rc;
	if (!(t->jsonl = fdopen(fd, append ? "a" : "w"))) {
		close(fd);
		return titan_error(TITAN_E_IO, "cannot create '%s': %s", path, strerror(errno));
	}
	return 0;
}

/* metrics.enable_tensorboard: DUMP/save_tb_folder/YYYYmmdd-HHMM/ (the
 * minute the run started, torchtitan's folders: a resumed run is a new
 * TensorBoard run), on rank 0; with metrics.save_for_all_ranks every rank
 * in rank_R/ of rank 0's folder. */
static int open_tensorboard(struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;
	int64_t now = (int64_t)(titan_unix_time_ns() / 1000000000u);
	char base[4096], dir[4300], when[32];
	struct tm tm;
	time_t secs;
	int rc;

	if (!c->metrics.enable_tensorboard)
		return 0;
	if (c->metrics.save_for_all_ranks && t->dist->size > 1 &&
	    (rc = titan_comm_broadcast(comm(t, TITAN_DIM_WORLD), &now, 1, TITAN_DTYPE_I64, 0,
				       "tensorboard folder")) < 0)
		return rc;
	if (t->dist->rank != 0 && !c->metrics.save_for_all_ranks)
		return 0;
	secs = (time_t)now;
	if (!localtime_r(&secs, &tm) || !strftime(when, sizeof(when), "%Y%m%d-%H%M", &tm))
		snprintf(when, sizeof(when), "%lld", (long long)now);
	/* an absolute metrics.save_tb_folder is that folder (os.path.join) */
	if ((rc = titan_path_join(base, sizeof(base), c->job.dump_folder,
				  c->metrics.save_tb_folder)) < 0)
		return titan_error_prefix("metrics.save_tb_folder");
	snprintf(dir, sizeof(dir), "%s/%s", base, when);
	if (c->metrics.save_for_all_ranks)
		snprintf(dir + strlen(dir), sizeof(dir) - strlen(dir), "/rank_%d", t->dist->rank);
	if ((rc = titan_mkdirs(dir)) < 0 ||
	    (rc = titan_tfevents_open(&t->tb, dir, (double)titan_unix_time_ns() * 1e-9)) < 0)
		return rc;
	titan_log_info("TensorBoard events: %s", titan_tfevents_path(t->tb));
	return 0;
}

/* Which process is which rank: a launcher that kills the job reports PIDs
 * and hosts ("BAD TERMINATION ... PID 1234 RUNNING AT node7"), the rest of
 * titan speaks of ranks. */
static int log_ranks(struct titan_trainer *t)
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
	rc = titan_comm_all_gather(comm(t, TITAN_DIM_WORLD), &me, all, sizeof(me), TITAN_DTYPE_U8,
				   "rank pids");
	for (int r = 0; rc == 0 && r < t->dist->size && k < sizeof(line) - 96; r++)
		k += (size_t)snprintf(line + k, sizeof(line) - k, "%s%d: pid %lld on %.56s",
				      r ? ", " : "", r, (long long)all[r].pid, all[r].host);
	if (rc == 0)
		titan_log_info("Ranks: %s", line);
	free(all);
	return rc;
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
	char line[1024] = "";
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
		    (long long)t->mo.pp_microbatches, (long long)t->mo.batch,
		    (long long)c->training.seq_len);
	if (!n)
		ADD("single rank");
	if (t->dp && t->fsdp_degree > 1)
		ADD("; parameters sharded over %s%lld ranks in %d FSDP unit(s)",
		    d[TITAN_DIM_CP] > 1 ? "dp_shard x cp, " : "", (long long)t->fsdp_degree,
		    titan_dp_units(t->dp));
	else if (t->dp)
		ADD("; gradients all-reduced in %d bucket(s)", titan_dp_units(t->dp));
#undef ADD
	titan_log_info("Parallelism: %s; %d rank(s), %d thread(s) per rank", line, t->dist->size,
		       t->be.nthreads);
}

int titan_trainer_new(const struct titan_config *cfg, const struct titan_trainer_opts *o,
		      struct titan_trainer **out)
{
	struct titan_trainer *t = calloc(1, sizeof(*t));
	struct titan_config *c;
	struct titan_model_params mp;
	int rc;

	*out = NULL;
	if (!t)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	*out = t;
	t->dist = o->dist;
	t->verbosity = o->verbosity;
	t->print_rank = o->print_rank;
	snprintf(t->line_prefix, sizeof(t->line_prefix), "%s", o->line_prefix ? o->line_prefix : "");
	t->total_mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
	if ((rc = titan_config_copy(&t->cfg, cfg)) < 0)
		return rc;
	c = &t->cfg;
	titan_dist_set_timeout(t->dist, (double)c->comm.init_timeout_seconds);
	if (t->dist->size > 1 && (rc = log_ranks(t)) < 0)
		return rc;
	if ((rc = titan_model_dims_from_config(c, &t->dims)) < 0 ||
	    (rc = titan_llama_opts_from_config(&t->mo, c)) < 0 ||
	    (rc = check_layout(t)) < 0 || (rc = check_supported(c)) < 0)
		return rc;
	if (!*c->training.dataset_path)
		return titan_error(TITAN_E_INVALID, "training.dataset_path: a folder of titan-shard "
				   "shards is required (titan-tokenize | titan-shard --out DIR)");
	if (t->dist->rank == 0 && (rc = lock_dump_folder(t)) < 0)
		return rc;
	t->dp_degree = titan_parallel_dims_degree(&t->dist->dims, TITAN_DIM_DP);
	t->dp_rank = t->dist->coord[TITAN_DIM_DP_REPLICATE] *
		     t->dist->dims.degree[TITAN_DIM_DP_SHARD] + t->dist->coord[TITAN_DIM_DP_SHARD];
	t->fsdp_degree = titan_parallel_dims_degree(&t->dist->dims, TITAN_DIM_FSDP);
	if ((rc = titan_grad_accum_steps(c, t->dp_degree, &t->accum)) < 0)
		return rc;
	t->n = c->training.local_batch_size * c->training.seq_len;
	if ((rc = open_backend(t, o)) < 0)
		return rc;
	if ((rc = open_loaders(t)) < 0)
		return rc;
	if (c->profiling.enable_memory_snapshot && (rc = open_memtrace(t)) < 0)
		return rc;
	/* the probe's 12 MiB before the model: never on top of its arenas */
	if (!isnan(c->metrics.peak_flops)) {
		t->peak_flops = c->metrics.peak_flops;
		snprintf(t->peak_from, sizeof(t->peak_from), "metrics.peak_flops");
	} else if (!t->cuda && c->metrics.measure_peak_flops) {
		t->peak_flops = measure_peak(t->be.nthreads);
		snprintf(t->peak_from, sizeof(t->peak_from), "sgemm measured at start-up "
			 "(metrics.measure_peak_flops), %d threads", t->be.nthreads);
	} else if (!t->cuda) {
		struct titan_cpu_peak cp;

		if (titan_cpu_peak_flops(NULL, t->be.nthreads, &cp) == 0) {
			t->peak_flops = cp.flops;
			snprintf(t->peak_from, sizeof(t->peak_from), "%s: %d threads x %.3f GHz (%s) "
				 "x %d FLOP/cycle, %s; override with metrics.peak_flops", cp.isa,
				 cp.threads, cp.clock_hz * 1e-9, cp.clock_from, cp.flops_per_cycle,
				 cp.kernel);
		} else {
			titan_log_warn("%s: no MFU", titan_errmsg());
			snprintf(t->peak_from, sizeof(t->peak_from), "unknown");
		}
	}
	t->mo.device_memory = t->cuda;
	if (t->fsdp_degree > 1) {
		t->mo.shard_rank = titan_comm_rank(comm(t, TITAN_DIM_FSDP));
		t->mo.shard_degree = (int)t->fsdp_degree;
	}
	t->mo.tp = comm(t, TITAN_DIM_TP);
	t->mo.cp = comm(t, TITAN_DIM_CP);
	t->mo.loss_parallel = !c->parallelism.disable_loss_parallel;
	if (t->dist->dims.degree[TITAN_DIM_PP] > 1) {
		const int pp = (int)t->dist->dims.degree[TITAN_DIM_PP];
		const int rank = (int)t->dist->coord[TITAN_DIM_PP];
		enum titan_pp_schedule sched;
		int nv;

		if ((rc = titan_pp_schedule_parse(c->parallelism.pipeline_parallel_schedule,
						  &sched)) < 0 ||
		    (rc = nv = titan_pp_stages_per_rank(c, sched, t->dims.n_layers, pp)) < 0)
			return rc;
		t->mo.pp_split_backward = sched == TITAN_PP_INTERLEAVED_ZB || sched == TITAN_PP_ZBV;
		/* loop style: the rank's v-th stage is global stage rank + v·pp;
		 * ZBV's V style: stages rank and 2·pp − 1 − rank */
		for (int v = 0; v < nv; v++) {
			const int gs = titan_pp_stage_of(sched, pp, rank, v);
			struct titan_pp_stage st;

			if ((rc = titan_pp_split(c, t->dims.n_layers, pp * nv, gs, &st)) < 0)
				return rc;
			if (v == 0) {
				t->mo.stage_l0 = st.l0;
				t->mo.stage_l1 = st.l1;
				t->mo.stage_first = st.first;
			} else {
				t->mo.more_l0[v - 1] = st.l0;
				t->mo.more_l1[v - 1] = st.l1;
			}
			t->mo.stage_last = st.last;
			titan_log_info("Pipeline stage %d of %d (rank %d): layers %d-%d%s%s", gs,
				       pp * nv, rank, st.l0, st.l1 - 1, st.first ? ", embedding" : "",
				       st.last ? ", norm + output" : "");
		}
		t->mo.nmore = nv - 1;
		t->mo.batch = c->parallelism.pipeline_parallel_microbatch_size;
		t->mo.pp_microbatches = c->training.local_batch_size /
					c->parallelism.pipeline_parallel_microbatch_size;
		t->mo.pp = comm(t, TITAN_DIM_PP);
	}
	if ((rc = titan_llama_new(&t->dims, &t->mo, &t->be, t->dev_alloc, &t->model)) < 0)
		return rc;
	titan_llama_set_hooks(t->model, &(struct titan_llama_hooks){hook_begin, hook_end, t});
	if (t->mo.stage_l1 > 0) {
		enum titan_pp_schedule sched;

		if ((rc = titan_pp_schedule_parse(c->parallelism.pipeline_parallel_schedule,
						  &sched)) < 0 ||
		    (rc = titan_pp_new(t->model, comm(t, TITAN_DIM_PP), sched,
				       (int)t->mo.pp_microbatches, &t->be, &t->pp)) < 0)
			return rc;
	}
	/* each rank initialises its own rows: the same weights on any layout */
	if ((rc = titan_llama_init_weights(t->model, (uint64_t)c->training.seed)) < 0)
		return rc;
	if (t->dp_degree > 1 || t->fsdp_degree > 1) { /* FSDP's mesh includes cp */
		struct titan_dp_opts dpo = {
			.shard = t->fsdp_degree > 1 ? comm(t, TITAN_DIM_FSDP) : NULL,
			.replicate = comm(t, TITAN_DIM_DP_REPLICATE),
			.reshard_after_forward = strcmp(c->parallelism.fsdp_reshard_after_forward,
							"never") != 0,
			.bucket_bytes = (int64_t)(c->comm.bucket_size_mb * 1048576.0),
			.be = &t->be,
		};
		struct titan_llama_group_hooks gh;

		if (t->fsdp_degree <= 1 && c->comm.bucket_size_mb < 0)
			dpo.bucket_bytes = 25 << 20; /* torch DDP's bucket_cap_mb */
		else if (c->comm.bucket_size_mb < 0)
			dpo.bucket_bytes = 0;         /* FSDP: one unit per block */
		if ((rc = titan_dp_new(t->model, &dpo, &t->dp)) < 0)
			return rc;
		titan_llama_set_group_hooks(t->model, titan_dp_hooks(t->dp, &gh));
		if (t->pp)
			titan_pp_set_dp(t->pp, t->dp);
	}
	if ((rc = titan_trainer_ckpt_setup(t)) < 0)
		return rc;
	t->inputs = titan_malloc((size_t)(t->accum * t->n) * sizeof(int32_t), TITAN_MEM_DATA);
	t->labels = titan_malloc((size_t)(t->accum * t->n) * sizeof(int32_t), TITAN_MEM_DATA);
	if (!t->inputs || !t->labels)
		return TITAN_E_NOMEM;
	titan_model_count_params(&t->dims, &mp);
	t->flops_per_token = titan_model_flops_per_token(&t->dims, c->training.seq_len);
	titan_log_info("Model llama3 %s size: %lld total parameters", t->dims.flavor,
		       (long long)mp.total);
	log_layout(t);
	if (t->cuda && isnan(c->metrics.peak_flops))
		snprintf(t->peak_from, sizeof(t->peak_from), "bf16 dense peak of the GPU");
	titan_log_info("Peak FLOPS used for computing MFU: %.3e (%s)", t->peak_flops, t->peak_from);
	if (c->checkpoint.create_seed_checkpoint)
		titan_log_info("Seed checkpoint only (checkpoint.create_seed_checkpoint): no "
			       "training steps; runs with checkpoint.enable and this "
			       "checkpoint.folder start from it");
	else if (t->pp)
		/* a pipeline step runs accum x (local batch / microbatch size)
		 * microbatches of the pipeline's size */
		titan_log_info("Training starts: %lld steps, %lld microbatch(es) of %lld x %lld tokens "
			       "per rank (%lld local batch(es) of %lld, pipelined), activation "
			       "checkpointing %s", (long long)c->training.steps,
			       (long long)(t->accum * t->mo.pp_microbatches), (long long)t->mo.batch,
			       (long long)c->training.seq_len, (long long)t->accum,
			       (long long)c->training.local_batch_size, c->activation_checkpoint.mode);
	else
		titan_log_info("Training starts: %lld steps, %lld microbatch(es) of %lld x %lld "
			       "tokens per rank, activation checkpointing %s",
			       (long long)c->training.steps, (long long)t->accum,
			       (long long)c->training.local_batch_size, (long long)c->training.seq_len,
			       c->activation_checkpoint.mode);
	if ((rc = open_jsonl(t)) < 0)
		return rc;
	return open_tensorboard(t);
}

int titan_trainer_close(struct titan_trainer *t)
{
	int rc = 0;

	if (!t)
		return 0;
	if (t->memtrace) {
		rc = titan_mem_trace_stop(titan_host_allocator());
		if (fclose(t->memtrace) != 0 && rc == 0)
			rc = titan_error(TITAN_E_IO, "cannot write the memory trace: %s",
					 strerror(errno));
		t->memtrace = NULL;
	}
	if (t->jsonl) {
		if (fclose(t->jsonl) != 0 && rc == 0)
			rc = titan_error(TITAN_E_IO, "cannot write metrics to '%s': %s", t->jsonl_path,
					 strerror(errno));
		t->jsonl = NULL;
	}
	if (t->tb) {
		int e = titan_tfevents_close(t->tb);

		rc = rc < 0 ? rc : e;
		t->tb = NULL;
	}
	return rc;
}

void titan_trainer_free(struct titan_trainer *t)
{
	if (!t)
		return;
	titan_trainer_ckpt_release(t); /* waits for a write in flight */
	titan_trace_close(t->trace);
	if (t->memtrace) {
		titan_mem_trace_stop(titan_host_allocator());
		fclose(t->memtrace);
	}
	if (t->jsonl)
		fclose(t->jsonl);
	titan_tfevents_close(t->tb);
	if (t->lock_fd > 0)
		close(t->lock_fd - 1); /* the lock goes with it */
	titan_free(t->inputs);
	titan_free(t->labels);
	titan_dp_free(t->dp);
	titan_pp_free(t->pp);
	titan_llama_free(t->model);
	titan_loader_close(t->train);
	titan_loader_close(t->val);
	if (t->be_ready)
		titan_backend_release(&t->be);
	titan_allocator_free(t->dev_alloc);
	titan_config_release(&t->cfg);
	free(t);
}
