/*
 * trainer.c — torchtitan's Trainer (train.py) on one or many ranks: the
 * construction (mesh already built: data loader per DP rank, the model on
 * its layout from titan_parallelize, checkpoint resume) and the step loop
 * (microbatches with the loss normalised by the step's valid tokens over
 * every rank, gradient clipping with the global norm, AdamW, the
 * warmup-stable-decay schedule), validation, checkpoints, logged steps,
 * comm timeouts and SIGTERM.  The loop calls the engine (engine.h) and
 * never asks for the layout.  The other concerns are files of their own:
 * metrics.c, trainer_setup.c, trainer_device.c, trainer_profile.c,
 * trainer_ckpt.c.
 */
#include "titan/train.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "titan/core.h"
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

/* ------------------------------------------------------------ validation */

/* The loss sum and valid tokens of a validation batch read into
 * t->val_inputs/labels when its shape is not the training one: each row is
 * padded to training.seq_len (input 0, label ignored: causal attention
 * keeps the real positions' logits those of the shorter row) and the rows
 * go through the model training.local_batch_size at a time, the last group
 * filled with ignored rows.  Every rank runs the same number of groups (a
 * layout's collectives need it), whatever rows its batch holds. */
static int eval_regrouped(struct titan_trainer *t, double *loss_sum, int64_t *n_valid)
{
	int64_t seq = t->cfg.training.seq_len, rows = t->cfg.training.local_batch_size;
	int rc;

	*loss_sum = 0;
	*n_valid = 0;
	for (int64_t r0 = 0; r0 < t->val_rows; r0 += rows) {
		double ls;
		int64_t nv;

		for (int64_t b = 0; b < rows; b++) {
			int32_t *in = t->inputs + b * seq, *lab = t->labels + b * seq;
			int64_t k = 0;

			if (r0 + b < t->val_rows) {
				k = t->val_seq;
				memcpy(in, t->val_inputs + (r0 + b) * k, (size_t)k * sizeof(*in));
				memcpy(lab, t->val_labels + (r0 + b) * k, (size_t)k * sizeof(*lab));
			}
			for (; k < seq; k++) {
				in[k] = 0;
				lab[k] = TITAN_LABEL_IGNORE;
			}
		}
		rc = titan_engine_eval_microbatch(t->engine, t->inputs, t->labels, &ls, &nv);
		if (rc < 0)
			return rc;
		*loss_sum += ls;
		*n_valid += nv;
	}
	return 0;
}

static int validate(struct titan_trainer *t, int64_t step)
{
	double sums[2] = {0, 0}, loss; /* loss sum, valid tokens */
	int32_t *vin = t->val_inputs ? t->val_inputs : t->inputs;
	int32_t *vlab = t->val_labels ? t->val_labels : t->labels;
	int64_t steps = 0;
	uint64_t t0 = titan_time_ns();
	int rc;

	titan_trainer_set_phase(t, TITAN_PHASE_VALIDATION);
	titan_loader_reset(t->val);
	while (t->cfg.validation.steps < 0 || steps < t->cfg.validation.steps) {
		struct titan_batch_info info;
		double ls;
		int64_t nv;

		if ((rc = titan_loader_next(t->val, vin, vlab, &info)) < 0)
			return rc;
		/* every rank stops at the same call: global rows decide */
		if (rc == 0 || info.global_rows == 0)
			break;
		if (t->val_inputs)
			rc = eval_regrouped(t, &ls, &nv);
		else
			rc = titan_engine_eval_microbatch(t->engine, t->inputs, t->labels, &ls,
							  &nv);
		if (rc < 0)
			return rc;
		sums[0] += ls;
		sums[1] += (double)nv;
		steps++;
	}
	if ((rc = titan_comm_all_reduce(titan_trainer_comm(t, TITAN_DIM_LOSS), TITAN_IN_PLACE, sums,
					2, TITAN_DTYPE_F64, TITAN_REDOP_SUM, "validation loss")) < 0)
		return rc;
	loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
	/* tokens read per second, as torchtitan counts them (labels.numel()) */
	return titan_trainer_log_validation(t, &(struct titan_validation_row){
		.step = step, .loss = loss, .tokens = sums[1],
		.tps = (double)(steps * t->val_rows * t->val_seq) /
		       ((double)(titan_time_ns() - t0) * 1e-9)});
}

/* ------------------------------------------------------------ the loop */

/* Do all ranks agree to stop (a signal on any of them)?  One small
 * all-reduce per step, so that every rank leaves the loop after the same
 * step and takes part in the final checkpoint. */
static int agree_stop(struct titan_trainer *t, int *sig)
{
	int64_t s = stop_signal;
	int rc;

	if ((rc = titan_comm_all_reduce(titan_trainer_comm(t, TITAN_DIM_WORLD), TITAN_IN_PLACE, &s,
					1, TITAN_DTYPE_I64, TITAN_REDOP_MAX, "stop signal")) < 0)
		return rc;
	*sig = (int)s;
	return 0;
}

/* The step's microbatches, all first: the loss is normalised by the
 * step's valid-token count over every DP rank (torchtitan's
 * global_valid_tokens; the loader knows the global batch). */
static int load_batch(struct titan_trainer *t, int64_t step, uint64_t t0, int64_t *valid)
{
	titan_trace_begin(t->trace, "data", "train", step);
	titan_trainer_set_phase(t, TITAN_PHASE_DATA);
	*valid = 0;
	for (int64_t mb = 0; mb < t->accum; mb++) {
		struct titan_batch_info info;

		if (titan_loader_next(t->train, t->inputs + mb * t->n, t->labels + mb * t->n,
				      &info) < 0) /* the shard and offset are in the message */
			return titan_error_prefix("step %lld: training data", (long long)step);
		*valid += info.global_valid_tokens;
	}
	t->data_ns += titan_time_ns() - t0;
	titan_trace_end(t->trace);
	return 0;
}

/* Forward and backward of every microbatch, the gradients reduced; the
 * global loss: Σ ranks' loss sums / global valid tokens. */
static int forward_backward(struct titan_trainer *t, int64_t step, int64_t valid, double *loss)
{
	double red[2] = {0, 0};
	int64_t rank_valid = 0;
	int rc;

	if ((rc = titan_engine_zero_grads(t->engine)) < 0)
		return rc;
	titan_engine_begin_step(t->engine, t->accum, valid);
	for (int64_t mb = 0; mb < t->accum; mb++) {
		double ls;
		int64_t nv;

		if ((rc = titan_engine_train_microbatch(t->engine, t->inputs + mb * t->n,
							t->labels + mb * t->n, &ls, &nv)) < 0)
			return rc;
		red[0] += ls;
		rank_valid += nv;
	}
	/* this rank's own average, for the logged max over ranks */
	t->rank_loss = rank_valid > 0 ? red[0] / (double)rank_valid : -INFINITY;
	titan_trace_begin(t->trace, "grad sync", "comm", step);
	if ((rc = titan_engine_finish_grads(t->engine)) < 0)
		return rc;
	titan_trace_end(t->trace);
	if ((rc = titan_comm_all_reduce(titan_trainer_comm(t, TITAN_DIM_LOSS), TITAN_IN_PLACE, red,
					1, TITAN_DTYPE_F64, TITAN_REDOP_SUM, "loss")) < 0)
		return rc;
	*loss = valid ? red[0] / (double)valid : NAN;
	return 0;
}

/* MoE (torchtitan's optimizer pre-step hook): the step's tokens per expert
 * summed over the ranks that see different tokens (the loss group: data
 * parallel x context parallel, CP ranks routing their own chunks; and the
 * TP ranks under EP x TP, each routing its sequence shard), kept
 * for the metrics and moving each layer's expert_bias.  Pipeline stages
 * count only their own layers (zero elsewhere): the sum over the stages
 * gives every rank every layer's counts, the metrics row's (each stage
 * still moves only the expert_bias it holds). */
static int moe_balance(struct titan_trainer *t)
{
	struct titan_llama *m = titan_engine_model(t->engine);
	int64_t *tok = titan_llama_moe_tokens(m);
	const size_t n = (size_t)(t->dims.n_layers * t->dims.moe.num_experts);
	int rc;

	if (!tok)
		return 0;
	if (!t->moe_load && !(t->moe_load = calloc(n, sizeof(*t->moe_load))))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if ((rc = titan_comm_all_reduce(titan_trainer_comm(t, TITAN_DIM_LOSS), TITAN_IN_PLACE, tok,
					n, TITAN_DTYPE_I64, TITAN_REDOP_SUM, "moe tokens")) < 0)
		return rc;
	/* EP x TP: each TP rank routes its own sequence shard (moe.h) */
	if (t->dist->dims.ep > 1 && t->dist->dims.degree[TITAN_DIM_TP] > 1 &&
	    (rc = titan_comm_all_reduce(titan_trainer_comm(t, TITAN_DIM_TP), TITAN_IN_PLACE, tok,
					n, TITAN_DTYPE_I64, TITAN_REDOP_SUM, "tp moe tokens")) < 0)
		return rc;
	if (t->dist->dims.degree[TITAN_DIM_PP] > 1 &&
	    (rc = titan_comm_all_reduce(titan_trainer_comm(t, TITAN_DIM_PP), TITAN_IN_PLACE, tok,
					n, TITAN_DTYPE_I64, TITAN_REDOP_SUM, "pp moe tokens")) < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		t->moe_load[i] += tok[i];
	return titan_llama_moe_balance(m, tok);
}

/* AdamW at the schedule's lr, or with a loss or norm that is not finite
 * an error, or with training.skip_nonfinite the step skipped. */
static int optimizer_step(struct titan_trainer *t, int64_t step, double loss, double norm,
			  float coef, const struct titan_lr_schedule *sched,
			  struct titan_adamw_hparams *hp, int64_t *opt_steps)
{
	const struct titan_config *c = &t->cfg;
	int rc;

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
		return 0;
	}
	t->nonfinite_run = 0;
	if ((rc = moe_balance(t)) < 0)
		return rc;
	hp->lr = c->optimizer.lr * titan_lr_factor(sched, step - 1);
	titan_trainer_set_phase(t, TITAN_PHASE_OPTIMIZER);
	titan_trace_begin(t->trace, "optimizer", "train", step);
	rc = titan_engine_optimizer_step(t->engine, hp, ++*opt_steps, coef);
	titan_trace_end(t->trace);
	return rc;
}

/* checkpoint.interval, the last step, a stop signal, or the first step
 * when asked; weights whose loss is not finite are never saved: the
 * newest checkpoint stays the last healthy one. */
static int checkpoint(struct titan_trainer *t, int64_t step, int sig, int64_t tokens_seen,
		      int64_t opt_steps)
{
	const struct titan_config *c = &t->cfg;

	if (!c->checkpoint.enable || c->checkpoint.load_only ||
	    !(step % c->checkpoint.interval == 0 || step == c->training.steps || sig ||
	      (step == 1 && c->checkpoint.enable_first_step_checkpoint)))
		return 0;
	if (t->nonfinite_run > 0) {
		titan_log_warn("step %lld: no checkpoint, the loss is not finite", (long long)step);
		return 0;
	}
	return titan_trainer_ckpt_save(t, step, step == c->training.steps, tokens_seen, opt_steps);
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
		double loss, norm;
		int64_t valid;
		float coef;
		uint64_t t0 = titan_time_ns(); /* data time: from the step's start */

		t->step = step;
		titan_dist_set_step(t->dist, step);
		if ((rc = titan_trainer_trace_step_begin(t, step)) < 0 ||
		    (rc = load_batch(t, step, t0, &valid)) < 0 ||
		    (rc = forward_backward(t, step, valid, &loss)) < 0 ||
		    (rc = titan_engine_grad_norm(t->engine, c->training.max_norm, &norm, &coef)) < 0 ||
		    (rc = optimizer_step(t, step, loss, norm, coef, &sched, &hp, &opt_steps)) < 0 ||
		    (rc = titan_trainer_trace_step_end(t)) < 0)
			return rc;
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
		if ((rc = titan_trainer_ckpt_reap(t, false)) < 0 ||
		    (rc = checkpoint(t, step, sig, tokens_seen, opt_steps)) < 0)
			return rc;
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

int titan_trainer_new(const struct titan_config *cfg, const struct titan_trainer_opts *o,
		      struct titan_trainer **out)
{
	struct titan_trainer *t = calloc(1, sizeof(*t));
	struct titan_config *c;
	struct titan_llama_hooks hooks;
	int rc;

	*out = NULL;
	if (!t)
		return titan_error(TITAN_E_NOMEM, "out of memory");
	*out = t;
	t->dist = o->dist;
	t->verbosity = o->verbosity;
	t->print_rank = o->print_rank;
	snprintf(t->line_prefix, sizeof(t->line_prefix), "%s", o->line_prefix ? o->line_prefix : "");
	t->plain_steps = o->plain_steps;
	t->total_mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
	if ((rc = titan_config_copy(&t->cfg, cfg)) < 0)
		return rc;
	c = &t->cfg;
	titan_dist_set_timeout(t->dist, (double)c->comm.init_timeout_seconds);
	if (t->dist->size > 1 && (rc = titan_trainer_log_ranks(t)) < 0)
		return rc;
	if ((rc = titan_model_dims_from_config(c, &t->dims)) < 0 ||
	    (rc = titan_trainer_check_layout(t)) < 0 || (rc = titan_trainer_check_supported(c)) < 0)
		return rc;
	if (!*c->training.dataset_path)
		return titan_error(TITAN_E_INVALID, "training.dataset_path: a folder of titan-shard "
				   "shards is required (titan-tokenize | titan-shard --out DIR)");
	if (t->dist->rank == 0 && (rc = titan_trainer_lock_dump_folder(t)) < 0)
		return rc;
	t->dp_degree = t->layout.dp;
	t->dp_rank = t->layout.dp_rank;
	t->fsdp_degree = t->layout.fsdp;
	if ((rc = titan_grad_accum_steps(c, t->dp_degree, &t->accum)) < 0)
		return rc;
	t->n = c->training.local_batch_size * c->training.seq_len;
	if ((rc = titan_trainer_open_backend(t, o)) < 0 ||
	    (rc = titan_trainer_open_loaders(t)) < 0 || (rc = titan_trainer_set_docs(t)) < 0)
		return rc;
	if (c->profiling.enable_memory_snapshot && (rc = titan_trainer_memtrace_open(t)) < 0)
		return rc;
	titan_trainer_choose_peak(t);
	hooks = titan_trainer_model_hooks(t);
	rc = titan_parallelize(&(struct titan_parallelize_opts){
		.cfg = c, .dist = t->dist, .comm = t->comm, .dims = &t->dims, .layout = &t->layout,
		.mo = &t->mo,
		.be = &t->be, .alloc = t->dev_alloc, .hooks = &hooks, .tokens = t->n},
		&t->engine);
	if (rc < 0)
		return rc;
	t->model = titan_engine_model(t->engine);
	if ((rc = titan_trainer_ckpt_setup(t)) < 0)
		return rc;
	const int64_t bytes = titan_trainer_token_bytes(t->accum * t->n);
	if (bytes < 0)
		return titan_error(TITAN_E_NOMEM, "the step's %lld tokens do not fit in 64-bit "
				   "byte counts", (long long)(t->accum * t->n));
	t->inputs = titan_malloc((size_t)bytes, TITAN_MEM_DATA);
	t->labels = titan_malloc((size_t)bytes, TITAN_MEM_DATA);
	if (!t->inputs || !t->labels)
		return TITAN_E_NOMEM;
	t->flops_per_token = titan_model_flops_per_token(&t->dims, c->training.seq_len);
	titan_trainer_log_start(t);
	return titan_trainer_metrics_open(t);
}

int titan_trainer_close(struct titan_trainer *t)
{
	if (!t)
		return 0;
	return titan_trainer_metrics_close(t, titan_trainer_memtrace_close(t));
}

int64_t titan_trainer_token_bytes(int64_t tokens)
{
	int64_t bytes;

	return tokens < 0 || __builtin_mul_overflow(tokens, (int64_t)sizeof(int32_t), &bytes) ?
	       -1 : bytes;
}

void titan_trainer_free(struct titan_trainer *t)
{
	if (!t)
		return;
	titan_trainer_ckpt_release(t); /* waits for a write in flight */
	titan_trainer_profile_release(t);
	if (t->jsonl)
		fclose(t->jsonl);
	titan_tfevents_close(t->tb);
	if (t->lock_fd > 0)
		close(t->lock_fd - 1); /* the lock goes with it */
	titan_free(t->inputs);
	titan_free(t->labels);
	titan_free(t->val_inputs);
	titan_free(t->val_labels);
	titan_engine_free(t->engine);
	free(t->moe_load);
	for (int d = 0; d < TITAN_DIM_NALL; d++)
		titan_comm_free(t->comm[d]);
	free(t->ckpt_host);
	titan_loader_close(t->train);
	titan_loader_close(t->val);
	if (t->be_ready)
		titan_backend_release(&t->be);
	titan_allocator_free(t->dev_alloc);
	titan_config_release(&t->cfg);
	free(t);
}
