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
 *
 * Two races a signal could win: arriving on the creating thread between
 * mkstemp and the track (the handler walks a list without the file, then
 * the process dies) — titan_tmp_mkstemp blocks the signals on that thread
 * for the two calls; and the handler running on another thread while a
 * file is being made — the handler raises `dying` before it walks, and a
 * tracker that finds `dying` raised after its push unlinks the file itself
 * (both sequentially consistent: one of the two always sees the other).
 */
#include "titan/core.h"

#include <errno.h>
#include <pthread.h>
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
static atomic_int dying; /* a stop signal's handler has begun */

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
	if (t) {
		if (atomic_load(&dying))
			unlink(path);
		return t;
	}
	if (!(t = malloc(sizeof(*t) + n)))
		return NULL; /* not tracked: only the clean-up on signals is lost */
	memcpy(t->path, path, n);
	atomic_init(&t->live, 1);
	t->next = atomic_load_explicit(&head, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&head, &t->next, t, memory_order_seq_cst,
						      memory_order_relaxed))
		;
	if (atomic_load(&dying))
		unlink(path); /* the handler may have walked the list before the push */
	return t;
}

int titan_tmp_mkstemp(char *tmpl, int flags, struct titan_tmp **track)
{
	sigset_t stop, old;
	int fd, e;

	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop, &old);
	fd = mkostemp(tmpl, flags);
	e = errno;
	if (fd >= 0) {
		struct titan_tmp *t = titan_tmp_track(tmpl);

		if (track)
			*track = t;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = e;
	return fd;
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
	atomic_store(&dying, 1);
	for (struct titan_tmp *t = atomic_load(&head); t;
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
