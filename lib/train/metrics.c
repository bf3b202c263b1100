/*
 * metrics.c — the trainer's metrics (metrics.h): the row of a logged step
 * filled once (titan_trainer_log_step: this rank's throughput and memory
 * peaks, the slowest and largest rank by one small all-reduce) and its
 * three sinks — the console line, metrics.jsonl (rank 0, or every rank
 * with metrics.save_for_all_ranks) and TensorBoard event files — with the
 * files' set-up.
 */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio_ext.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "titan/cuda.h"
#include "trainer_impl.h"

#define GIB 1073741824.0

/* ------------------------------------------------------------ the sinks */

void titan_metrics_print(FILE *f, const char *prefix, const struct titan_metrics_row *r)
{
	char g[48];

	fprintf(f, "%sstep: %2lld  loss: %8.5f  grad_norm: %7.4f  memory: %5.2fGiB(%.2f%%)  "
		"tps: %s  tflops: %.2f  mfu: %.2f%%\n", prefix, (long long)r->step, r->loss,
		r->grad_norm, (double)r->max_reserved / GIB,
		100.0 * (double)r->max_reserved / r->total_mem,
		titan_format_grouped(g, sizeof(g), r->tps), r->tflops, r->mfu_pct);
	fflush(f);
}

void titan_validation_print(FILE *f, const char *prefix, const struct titan_validation_row *r)
{
	char g[48];

	fprintf(f, "%svalidate step: %2lld  loss: %8.5f  memory: %5.2fGiB(%.2f%%)  tps: %s\n",
		prefix, (long long)r->step, r->loss, (double)r->max_reserved / GIB,
		100.0 * (double)r->max_reserved / r->total_mem,
		titan_format_grouped(g, sizeof(g), r->tps));
	fflush(f);
}

/* MoE block l's load since the last line: its least and most used
 * expert's tokens and the entropy (nats) of the experts' shares. */
static void moe_stats(const struct titan_metrics_row *r, int64_t l, int64_t *lo, int64_t *hi,
		      double *ent)
{
	const int64_t *c = r->moe_load + l * r->moe_experts;
	int64_t sum = 0;

	*lo = INT64_MAX;
	*hi = 0;
	*ent = 0;
	for (int64_t e = 0; e < r->moe_experts; e++) {
		*lo = c[e] < *lo ? c[e] : *lo;
		*hi = c[e] > *hi ? c[e] : *hi;
		sum += c[e];
	}
	for (int64_t e = 0; e < r->moe_experts && sum > 0; e++)
		if (c[e] > 0)
			*ent -= (double)c[e] / (double)sum * log((double)c[e] / (double)sum);
}

void titan_metrics_json(struct titan_json *j, const struct titan_metrics_row *r)
{
	titan_json_object_begin(j);
	titan_json_key(j, "step");
	titan_json_int(j, r->step);
	titan_json_key(j, "loss");
	titan_json_double(j, r->loss);
	titan_json_key(j, "max_loss");
	titan_json_double(j, r->max_loss);
	titan_json_key(j, "grad_norm");
	titan_json_double(j, r->grad_norm);
	titan_json_key(j, "lr");
	titan_json_double(j, r->lr);
	titan_json_key(j, "tokens_seen");
	titan_json_int(j, r->tokens_seen);
	titan_json_key(j, "tps");
	titan_json_double(j, r->tps);
	titan_json_key(j, "tflops");
	titan_json_double(j, r->tflops);
	titan_json_key(j, "mfu_pct");
	titan_json_double(j, r->mfu_pct);
	titan_json_key(j, "step_time_s");
	titan_json_double(j, r->step_time_s);
	titan_json_key(j, "data_time_s");
	titan_json_double(j, r->data_time_s);
	titan_json_key(j, "checkpoint_blocked_s");
	titan_json_double(j, r->checkpoint_blocked_s);
	titan_json_key(j, "memory_peak_bytes");
	titan_json_int(j, r->memory_peak_bytes);
	titan_json_key(j, "memory_peak_by_tag");
	titan_json_object_begin(j);
	for (int k = 0; k < TITAN_MEM_NTAGS; k++) {
		titan_json_key(j, titan_mem_tag_name((enum titan_mem_tag)k));
		titan_json_int(j, r->memory_peak_by_tag[k]);
	}
	titan_json_object_end(j);
	if (r->cuda) { /* the caching allocator's, as torchtitan's */
		titan_json_key(j, "memory_max_active_bytes");
		titan_json_int(j, r->max_active);
		titan_json_key(j, "memory_max_active_pct");
		titan_json_double(j, 100.0 * (double)r->max_active / r->total_mem);
		titan_json_key(j, "memory_max_reserved_bytes");
		titan_json_int(j, r->max_reserved);
		titan_json_key(j, "memory_max_reserved_pct");
		titan_json_double(j, 100.0 * (double)r->max_reserved / r->total_mem);
		titan_json_key(j, "num_alloc_retries");
		titan_json_int(j, r->num_alloc_retries);
		titan_json_key(j, "num_ooms");
		titan_json_int(j, r->num_ooms);
	}
	if (r->moe_load) { /* per MoE block: the load of its least and most used expert */
		titan_json_key(j, "moe_load");
		titan_json_object_begin(j);
		for (int64_t l = 0; l < r->moe_layers; l++) {
			int64_t lo, hi;
			double ent;
			char key[48];

			if (!r->moe_layer[l])
				continue;
			moe_stats(r, l, &lo, &hi, &ent);
			snprintf(key, sizeof(key), "layers.%lld", (long long)l);
			titan_json_key(j, key);
			titan_json_object_begin(j);
			titan_json_key(j, "min_tokens");
			titan_json_int(j, lo);
			titan_json_key(j, "max_tokens");
			titan_json_int(j, hi);
			titan_json_key(j, "entropy");
			titan_json_double(j, ent);
			titan_json_object_end(j);
		}
		titan_json_object_end(j);
	}
	if (r->world_size > 1) {
		titan_json_key(j, "world_size");
		titan_json_int(j, r->world_size);
		titan_json_key(j, "memory_peak_bytes_max_rank");
		titan_json_int(j, (int64_t)r->max_rank_reserved);
		titan_json_key(j, "step_time_s_max_rank");
		titan_json_double(j, r->max_rank_step_time_s);
	}
	titan_json_object_end(j);
}

void titan_validation_json(struct titan_json *j, const struct titan_validation_row *r)
{
	titan_json_object_begin(j);
	titan_json_key(j, "step");
	titan_json_int(j, r->step);
	titan_json_key(j, "validation_loss");
	titan_json_double(j, r->loss);
	titan_json_key(j, "validation_tokens");
	titan_json_int(j, (int64_t)r->tokens);
	titan_json_key(j, "validation_tps");
	titan_json_double(j, r->tps);
	titan_json_key(j, "validation_memory_peak_bytes");
	titan_json_int(j, r->max_reserved);
	titan_json_object_end(j);
}

/* torchtitan's tags (MetricsProcessor.log, every one of them: the list
 * tests/ref/torchtitan_tb_tags.txt), then titan's own.  On the CPU the
 * allocator retries and OOMs, CUDA caching-allocator facts, are 0. */
int titan_metrics_tensorboard(struct titan_tfevents *e, const struct titan_metrics_row *r,
			      double wall_time)
{
	char tag[96];

	titan_tfevents_scalar(e, "loss_metrics/global_avg_loss", r->loss);
	titan_tfevents_scalar(e, "loss_metrics/global_max_loss", r->max_loss);
	titan_tfevents_scalar(e, "grad_norm", r->grad_norm);
	titan_tfevents_scalar(e, "lr", r->lr);
	titan_tfevents_scalar(e, "n_tokens_seen", (double)r->tokens_seen);
	titan_tfevents_scalar(e, "throughput(tps)", r->tps);
	titan_tfevents_scalar(e, "tflops", r->tflops);
	titan_tfevents_scalar(e, "mfu(%)", r->mfu_pct);
	titan_tfevents_scalar(e, "time_metrics/end_to_end(s)", r->step_time_s);
	titan_tfevents_scalar(e, "time_metrics/data_loading(s)", r->data_time_s);
	titan_tfevents_scalar(e, "time_metrics/data_loading(%)",
			      r->step_time_s > 0 ? 100.0 * r->data_time_s / r->step_time_s : 0);
	titan_tfevents_scalar(e, "time_metrics/checkpoint_blocked(s)", r->checkpoint_blocked_s);
	titan_tfevents_scalar(e, "memory/max_active(GiB)", (double)r->max_active / GIB);
	titan_tfevents_scalar(e, "memory/max_active(%)",
			      100.0 * (double)r->max_active / r->total_mem);
	titan_tfevents_scalar(e, "memory/max_reserved(GiB)", (double)r->max_reserved / GIB);
	titan_tfevents_scalar(e, "memory/max_reserved(%)",
			      100.0 * (double)r->max_reserved / r->total_mem);
	titan_tfevents_scalar(e, "memory/num_alloc_retries", (double)r->num_alloc_retries);
	titan_tfevents_scalar(e, "memory/num_ooms", (double)r->num_ooms);
	for (int k = 0; k < TITAN_MEM_NTAGS; k++) {
		snprintf(tag, sizeof(tag), "memory/by_tag/%s(GiB)",
			 titan_mem_tag_name((enum titan_mem_tag)k));
		titan_tfevents_scalar(e, tag, (double)r->memory_peak_by_tag[k] / GIB);
	}
	for (int64_t l = 0; r->moe_load && l < r->moe_layers; l++) {
		int64_t lo, hi;
		double ent;

		if (!r->moe_layer[l])
			continue;
		moe_stats(r, l, &lo, &hi, &ent);
		snprintf(tag, sizeof(tag), "moe_load/layers.%lld/min_tokens", (long long)l);
		titan_tfevents_scalar(e, tag, (double)lo);
		snprintf(tag, sizeof(tag), "moe_load/layers.%lld/max_tokens", (long long)l);
		titan_tfevents_scalar(e, tag, (double)hi);
		snprintf(tag, sizeof(tag), "moe_load/layers.%lld/entropy", (long long)l);
		titan_tfevents_scalar(e, tag, ent);
	}
	if (r->world_size > 1) {
		titan_tfevents_scalar(e, "memory/max_reserved_max_rank(GiB)",
				      r->max_rank_reserved / GIB);
		titan_tfevents_scalar(e, "time_metrics/end_to_end_max_rank(s)",
				      r->max_rank_step_time_s);
	}
	return titan_tfevents_write(e, r->step, wall_time);
}

int titan_validation_tensorboard(struct titan_tfevents *e, const struct titan_validation_row *r,
				 double wall_time)
{
	titan_tfevents_scalar(e, "validation_metrics/loss", r->loss);
	titan_tfevents_scalar(e, "validation_metrics/throughput(tps)", r->tps);
	titan_tfevents_scalar(e, "validation_metrics/memory/max_active(GiB)",
			      (double)r->max_active / GIB);
	titan_tfevents_scalar(e, "validation_metrics/memory/max_active(%)",
			      100.0 * (double)r->max_active / r->total_mem);
	titan_tfevents_scalar(e, "validation_metrics/memory/max_reserved(GiB)",
			      (double)r->max_reserved / GIB);
	titan_tfevents_scalar(e, "validation_metrics/memory/max_reserved(%)",
			      100.0 * (double)r->max_reserved / r->total_mem);
	titan_tfevents_scalar(e, "validation_metrics/tokens", r->tokens);
	return titan_tfevents_write(e, r->step, wall_time);
}

int titan_metrics_write_line(FILE *f, const char *path, struct titan_json *j)
{
	const off_t at = ftello(f);
	int rc = titan_json_write_line(j, f), err;

	if (rc == 0 && fflush(f) == 0)
		return 0;
	err = errno ? errno : EIO;
	titan_error_clear();
	__fpurge(f);
	if (at < 0 || ftruncate(fileno(f), at) != 0)
		titan_log_warn("cannot cut the partial row off '%s': %s", path, strerror(errno));
	return titan_error(TITAN_E_IO, "cannot write metrics to '%s': %s (the file ends at the "
			   "last complete row)", path, strerror(err));
}

/* ------------------------------------------------------------ the trainer's rows */

static double wall_now(void)
{
	return (double)titan_unix_time_ns() * 1e-9;
}

/* The JSON writer's buffer of a metrics.jsonl row, reserved whole before
 * the row is rendered, so that its memory is the same at every step
 * whatever the values (a row of shortest round-trip doubles measures
 * 420-580 characters on one rank, ~810 with world_size's keys, and its
 * length moves with the timings: grown by doubling, the buffers live
 * were 768 or 1536 bytes from one run to the next).  4096 bytes hold
 * every dense row with room to spare (twice the longest, on 64 ranks with
 * every figure at its widest: 966).  A MoE row adds moe_load's entry of
 * each MoE block, MOE_ROW_BYTES at most ("layers.<int64>":{"min_tokens":
 * <int64>,"max_tokens":<int64>,"entropy":<double>}, 135 characters):
 * half of ROW_BYTES for the rest of the row and that per block, rounded up
 * to the writer's buffer sizes (lib/core/json.c doubles from 256 bytes),
 * so that no row outgrows its buffer.  Stated once: titan-estimate counts
 * titan_metrics_row_bytes. */
#define ROW_BYTES 4096
#define MOE_ROW_BYTES 160

int64_t titan_metrics_row_bytes(int64_t moe_layers)
{
	const int64_t need = ROW_BYTES / 2 + (moe_layers > 0 ? moe_layers : 0) * MOE_ROW_BYTES;
	int64_t b = ROW_BYTES;

	while (b < need)
		b *= 2;
	return b;
}

bool titan_metrics_row_begin(struct titan_json *j, int64_t moe_layers)
{
	titan_json_init(j);
	return titan_json_reserve(j, (size_t)titan_metrics_row_bytes(moe_layers));
}

/* The MoE blocks whose load a step row carries. */
static int64_t moe_row_layers(const struct titan_trainer *t)
{
	int64_t n = 0;

	for (int64_t l = 0; t->moe_load && l < t->dims.n_layers; l++)
		n += titan_model_layer_is_moe(&t->dims, l);
	return n;
}

static int write_jsonl(struct titan_trainer *t, void (*render)(struct titan_json *, const void *),
		       const void *row, int64_t moe_layers)
{
	struct titan_json j;
	int rc;

	if (!titan_metrics_row_begin(&j, moe_layers)) {
		titan_json_release(&j);
		return titan_error_prefix("cannot write metrics to '%s'", t->jsonl_path);
	}
	render(&j, row);
	rc = titan_metrics_write_line(t->jsonl, t->jsonl_path, &j);
	titan_json_release(&j);
	return rc;
}

static void render_step(struct titan_json *j, const void *row)
{
	titan_metrics_json(j, row);
}

static void render_validation(struct titan_json *j, const void *row)
{
	titan_validation_json(j, row);
}

/* torchtitan's memory figures (DeviceMemoryMonitor.get_peak_stats): peaks
 * since the last logged step.  On CUDA they come from the caching
 * allocator (active = live blocks at their rounded sizes, reserved = its
 * cudaMalloc'd segments); on the CPU the tagged allocator's peak is both
 * max_active and max_reserved (the host allocator caches nothing) and
 * there are no retries or OOMs to count. */
static void mem_peaks(const struct titan_trainer *t, const struct titan_mem_stats *ms,
		      struct titan_metrics_row *r)
{
	struct titan_caching_stats cs;

	r->memory_peak_bytes = ms->total_peak;
	memcpy(r->memory_peak_by_tag, ms->peak_at_total, sizeof(r->memory_peak_by_tag));
	r->max_active = r->max_reserved = ms->total_peak;
	r->num_alloc_retries = r->num_ooms = 0;
	r->cuda = t->cuda;
	if (t->cuda && titan_cuda_mem_stats(0, &cs) == 0) {
		r->max_active = cs.active_peak;
		r->max_reserved = cs.reserved_peak;
		r->num_alloc_retries = cs.num_alloc_retries;
		r->num_ooms = cs.num_ooms;
	}
}

/* "[rankR]:" where several ranks print, then torchtitan's logger head
 * "[titan] 2026-11-27 10:01:02,123 - root - INFO - " unless --plain-steps */
static const char *line_head(const struct titan_trainer *t, char *buf, size_t size)
{
	size_t n = (size_t)snprintf(buf, size, "%s", t->line_prefix);

	if (!t->plain_steps && n < size)
		titan_log_head(buf + n, size - n, TITAN_LOG_INFO);
	return buf;
}

/* Reset the peaks a row reported: the next row's are its own (torchtitan
 * resets them after every training and validation log). */
static void mem_reset_peaks(struct titan_trainer *t)
{
	titan_mem_reset_peak(t->mem);
	if (t->cuda)
		titan_cuda_mem_reset_peak(0);
}

int titan_trainer_log_step(struct titan_trainer *t, int64_t step, double loss, double norm,
			   double lr, int64_t tokens_seen)
{
	struct titan_mem_stats ms;
	struct titan_metrics_row r = {.step = step, .loss = loss, .grad_norm = norm, .lr = lr,
				      .tokens_seen = tokens_seen};
	uint64_t now = titan_time_ns();
	double dt = (double)(now - t->t_last) * 1e-9, mx[3];
	char head[160];
	int rc;

	r.tps = (double)t->tokens_since / dt;
	r.tflops = t->flops_per_token * r.tps / 1e12;
	r.mfu_pct = t->peak_flops > 0 ? 100.0 * t->flops_per_token * r.tps / t->peak_flops : 0;
	r.step_time_s = dt / (double)t->steps_since;
	r.data_time_s = (double)t->data_ns * 1e-9 / (double)t->steps_since;
	r.checkpoint_blocked_s = t->ckpt_blocked_s;
	r.total_mem = t->total_mem;
	r.world_size = t->dist->size;
	bool moe_layer[t->moe_load ? t->dims.n_layers : 1];
	if (t->moe_load) {
		for (int64_t l = 0; l < t->dims.n_layers; l++)
			moe_layer[l] = titan_model_layer_is_moe(&t->dims, l);
		r.moe_load = t->moe_load;
		r.moe_layer = moe_layer;
		r.moe_layers = t->dims.n_layers;
		r.moe_experts = t->dims.moe.num_experts;
	}
	titan_mem_get_stats(t->mem, &ms);
	mem_peaks(t, &ms, &r);
	/* the slowest and the largest rank, and the largest rank loss
	 * (torchtitan's global_max_loss over the DP and CP ranks; TP and PP
	 * ranks hold their group's value, so the world's max is the same):
	 * one small all-reduce per logged step, no more than before the max
	 * loss rode on it */
	mx[0] = (double)r.max_reserved;
	mx[1] = r.step_time_s;
	mx[2] = t->rank_loss;
	if ((rc = titan_comm_all_reduce(t->dist->comm[TITAN_DIM_WORLD], TITAN_IN_PLACE, mx, 3,
					TITAN_DTYPE_F64, TITAN_REDOP_MAX, "metrics")) < 0)
		return rc;
	r.max_rank_reserved = mx[0];
	r.max_rank_step_time_s = mx[1];
	r.max_loss = mx[2];
	/* torchtitan warns at every logged step once any happened */
	if (r.num_alloc_retries > 0)
		titan_log_warn("%lld CUDA memory allocation retries.",
			       (long long)r.num_alloc_retries);
	if (r.num_ooms > 0)
		titan_log_warn("%lld CUDA OOM errors thrown.", (long long)r.num_ooms);
	if (t->verbosity >= 0 && t->print_rank)
		titan_metrics_print(stdout, line_head(t, head, sizeof(head)), &r);
	if (t->jsonl && (rc = write_jsonl(t, render_step, &r, moe_row_layers(t))) < 0)
		return rc;
	if (t->tb && (rc = titan_metrics_tensorboard(t->tb, &r, wall_now())) < 0)
		return rc;
	mem_reset_peaks(t);
	t->ckpt_blocked_s = 0;
	t->t_last = titan_time_ns();
	t->tokens_since = t->steps_since = 0;
	t->data_ns = 0;
	if (t->moe_load)
		memset(t->moe_load, 0, (size_t)(t->dims.n_layers * t->dims.moe.num_experts) *
		       sizeof(*t->moe_load));
	return 0;
}

/* The row's loss, tokens and throughput are the caller's; the memory
 * peaks since the last log (this pass's where validation follows a
 * logged step) are filled here and reset, as torchtitan's
 * log_validation does. */
int titan_trainer_log_validation(struct titan_trainer *t, struct titan_validation_row *r)
{
	struct titan_mem_stats ms;
	struct titan_metrics_row m = {0};
	char head[160];
	int rc;

	titan_mem_get_stats(t->mem, &ms);
	mem_peaks(t, &ms, &m);
	r->max_active = m.max_active;
	r->max_reserved = m.max_reserved;
	r->total_mem = t->total_mem;
	mem_reset_peaks(t);
	if (t->verbosity >= 0 && t->print_rank)
		titan_validation_print(stdout, line_head(t, head, sizeof(head)), r);
	if (t->jsonl && (rc = write_jsonl(t, render_validation, r, 0)) < 0)
		return rc;
	if (t->tb)
		return titan_validation_tensorboard(t->tb, r, wall_now());
	return 0;
}

/* ------------------------------------------------------------ the files */

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
	    (rc = titan_comm_broadcast(t->dist->comm[TITAN_DIM_WORLD], &now, 1, TITAN_DTYPE_I64, 0,
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
	    (rc = titan_tfevents_open(&t->tb, dir, wall_now())) < 0)
		return rc;
	titan_log_info("TensorBoard events: %s", titan_tfevents_path(t->tb));
	return 0;
}

int titan_trainer_metrics_open(struct titan_trainer *t)
{
	int rc;

	if ((rc = open_jsonl(t)) < 0)
		return rc;
	return open_tensorboard(t);
}

int titan_trainer_metrics_close(struct titan_trainer *t, int rc)
{
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
