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
#include "titan/estimate.h"
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
		rc = titan_engine_eval_microbatch(t->engine, t->inputs, t->labels, &ls, &nv);
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
	return titan_trainer_log_validation(t, &(struct titan_validation_row){
		step, loss, sums[1],
		(double)(steps * t->n) / ((double)(titan_time_ns() - t0) * 1e-9)});
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
		if ((rc = titan_engine_zero_grads(t->engine)) < 0)
			return rc;
		titan_engine_begin_step(t->engine, t->accum, valid);
		for (int64_t mb = 0; mb < t->accum; mb++) {
			double ls;
			int64_t nv;

			if ((rc = titan_engine_train_microbatch(t->engine, t->inputs + mb * t->n,
								t->labels + mb * t->n, &ls, &nv)) < 0)
				return rc;
			loss_sum += ls;
		}
		titan_trace_begin(t->trace, "grad sync", "comm", step);
		if ((rc = titan_engine_finish_grads(t->engine)) < 0)
			return rc;
		titan_trace_end(t->trace);
		/* the global loss: Σ ranks' loss sums / global valid tokens */
		red[0] = loss_sum;
		red[1] = 0;
		if ((rc = titan_comm_all_reduce(comm(t, TITAN_DIM_LOSS), TITAN_IN_PLACE, red, 1,
						TITAN_DTYPE_F64, TITAN_REDOP_SUM, "loss")) < 0)
			return rc;
		loss = valid ? red[0] / (double)valid : NAN;
		if ((rc = titan_engine_grad_norm(t->engine, c->training.max_norm, &norm, &coef)) < 0)
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
			rc = titan_engine_optimizer_step(t->engine, &hp, ++opt_steps, coef);
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
		     sig) && (rc = titan_trainer_log_step(t, step, loss, norm, hp.lr, tokens_seen)) < 0)
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
	t->peak_flops = titan_gpu_peak_flops(info.name);
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
	const int units = titan_engine_dp_units(t->engine);
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
	if (units && t->fsdp_degree > 1)
		ADD("; parameters sharded over %s%lld ranks in %d FSDP unit(s)",
		    d[TITAN_DIM_CP] > 1 ? "dp_shard x cp, " : "", (long long)t->fsdp_degree, units);
	else if (units)
		ADD("; gradients all-reduced in %d bucket(s)", units);
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
	rc = titan_parallelize(&(struct titan_parallelize_opts){
		.cfg = c, .dist = t->dist, .dims = &t->dims, .mo = &t->mo, .be = &t->be,
		.alloc = t->dev_alloc, .hooks = &(struct titan_llama_hooks){hook_begin, hook_end, t},
		.tokens = t->n}, &t->engine);
	if (rc < 0)
		return rc;
	t->model = titan_engine_model(t->engine);
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
	else if (t->mo.stage_l1 > 0)
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
	return titan_trainer_metrics_open(t);
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
	return titan_trainer_metrics_close(t, rc);
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
	titan_engine_free(t->engine);
	titan_loader_close(t->train);
	titan_loader_close(t->val);
	if (t->be_ready)
		titan_backend_release(&t->be);
	titan_allocator_free(t->dev_alloc);
	titan_config_release(&t->cfg);
	free(t);
}
