/*
 * trainer_profile.c — the trainer's profiling: the memory trace's phases
 * and the model's spans (hooks), a Chrome trace per profiled step with the
 * step's collectives on a track of their own and its backend ops as
 * events under the model's spans, and the memory event log
 * (profiling.enable_memory_snapshot).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "titan/core.h"
#include "titan/trace.h"
#include "trainer_impl.h"

void titan_trainer_set_phase(struct titan_trainer *t, uint16_t phase)
{
	t->phase = phase;
	titan_mem_set_step(t->mem, (uint32_t)t->step, phase);
}

static void hook_begin(void *ctx, const char *name)
{
	struct titan_trainer *t = ctx;

	if (!strcmp(name, "forward") && t->phase != TITAN_PHASE_VALIDATION)
		titan_trainer_set_phase(t, TITAN_PHASE_FORWARD);
	else if (!strcmp(name, "loss") && t->phase != TITAN_PHASE_VALIDATION)
		titan_trainer_set_phase(t, TITAN_PHASE_LOSS);
	else if (!strcmp(name, "backward"))
		titan_trainer_set_phase(t, TITAN_PHASE_BACKWARD);
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

struct titan_llama_hooks titan_trainer_model_hooks(struct titan_trainer *t)
{
	return (struct titan_llama_hooks){hook_begin, hook_end, t};
}

/* A step begins: its trace is opened when the step is profiled, and the
 * backend's ops are wrapped to write an event each (titan/trace.h
 * titan_trace_ops_install; on CUDA their times are the launches).  An
 * unprofiled step runs the backend's own table: no cost. */
int titan_trainer_trace_step_begin(struct titan_trainer *t, int64_t step)
{
	int rc;

	if (profiled(&t->cfg, step) && (rc = trace_open(t, step)) < 0)
		return rc;
	titan_trace_begin(t->trace, "step", "train", step);
	if (t->trace && (rc = titan_trace_ops_install(&t->be, t->trace, step, t->cuda)) < 0)
		return rc;
	return 0;
}

/* ... and ends: the trace gets the step's collectives and is closed. */
int titan_trainer_trace_step_end(struct titan_trainer *t)
{
	int rc;

	titan_trace_ops_remove(&t->be);
	if (t->trace && t->dist->size > 1)
		titan_dist_comm_spans(t->dist, t->trace_seq0, comm_span, t);
	titan_trace_end(t->trace); /* step */
	if (!t->trace)
		return 0;
	rc = titan_trace_close(t->trace);
	t->trace = NULL;
	return rc;
}

int titan_trainer_memtrace_open(struct titan_trainer *t)
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

int titan_trainer_memtrace_close(struct titan_trainer *t)
{
	int rc = 0;

	if (t->memtrace) {
		rc = titan_mem_trace_stop(titan_host_allocator());
		if (fclose(t->memtrace) != 0 && rc == 0)
			rc = titan_error(TITAN_E_IO, "cannot write the memory trace: %s",
					 strerror(errno));
		t->memtrace = NULL;
	}
	return rc;
}

/* After an error: the files as far as they got, no messages. */
void titan_trainer_profile_release(struct titan_trainer *t)
{
	titan_trace_ops_remove(&t->be);
	titan_trace_close(t->trace);
	t->trace = NULL;
	if (t->memtrace) {
		titan_mem_trace_stop(titan_host_allocator());
		fclose(t->memtrace);
		t->memtrace = NULL;
	}
}
