/*
 * tmpfiles.c — temporary files that a SIGINT, SIGTERM or SIGHUP removes.
 *
 * Tools write their outputs under temporary names and rename them when
 * complete (titan_afile, shards, checkpoints); a tool stopped by Ctrl-C or
 * by SLURM must not leave those behind.  A tracked path sits in a list the
 * signal handler walks: nodes are pushed with a release store of the head
 * once complete, and untracking only marks a node dead (an atomic flag),
 * so the handler never sees a half-built node or a freed one, whatever
 * thread it runs on.  Dead nodes are reused by the next titan_tmp_track,
 * so the list is as long as the most files ever tracked at once.
 */
#include "titan/core.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct titan_tmp {
	struct titan_tmp *next;
	atomic_int live;
	char path[];
};

static _Atomic(struct titan_tmp *) head;
static atomic_flag reuse_lock = ATOMIC_FLAG_INIT;

struct titan_tmp *titan_tmp_track(const char *path)
{
	const size_t n = strlen(path) + 1;
	struct titan_tmp *t;

	/* a dead node long enough (one tracker at a time reuses) */
	while (atomic_flag_test_and_set_explicit(&reuse_lock, memory_order_acquire))
		;
	for (t = atomic_load_explicit(&head, memory_order_acquire); t; t = t->next) {
		if (!atomic_load(&t->live) && strlen(t->path) + 1 >= n) {
			memcpy(t->path, path, n);
			atomic_store(&t->live, 1);
			break;
		}
	}
	atomic_flag_clear_explicit(&reuse_lock, memory_order_release);
	if (t)
		return t;
	if (!(t = malloc(sizeof(*t) + n)))
		return NULL; /* not tracked: only the clean-up on signals is lost */
	memcpy(t->path, path, n);
	atomic_init(&t->live, 1);
	t->next = atomic_load_explicit(&head, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&head, &t->next, t, memory_order_release,
						      memory_order_relaxed))
		;
	return t;
}

void titan_tmp_untrack(struct titan_tmp *t)
{
	if (t)
		atomic_store(&t->live, 0);
}

void titan_tmp_forget(const char *path)
{
	while (atomic_flag_test_and_set_explicit(&reuse_lock, memory_order_acquire))
		;
	for (struct titan_tmp *t = atomic_load_explicit(&head, memory_order_acquire); t;
	     t = t->next)
		if (atomic_load(&t->live) && !strcmp(t->path, path))
			atomic_store(&t->live, 0);
	atomic_flag_clear_explicit(&reuse_lock, memory_order_release);
}

static void on_signal(int sig)
{
	for (struct titan_tmp *t = atomic_load_explicit(&head, memory_order_acquire); t;
	     t = t->next)
		if (atomic_load(&t->live))
			unlink(t->path);
	/* die of the signal, so the parent sees what stopped us */
	signal(sig, SIG_DFL);
	raise(sig);
}

void titan_tmp_catch_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaddset(&sa.sa_mask, sigs[i]);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old;

		/* a signal the shell ignores (nohup, a background job's SIGINT)
		 * stays ignored */
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		sigaction(sigs[i], &sa, NULL);
	}
}

void titan_tmp_remove_all(void)
{
	for (struct titan_tmp *t = atomic_load_explicit(&head, memory_order_acquire); t;
	     t = t->next)
		if (atomic_load(&t->live))
			unlink(t->path);
}
