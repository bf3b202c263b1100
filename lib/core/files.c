/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Files titan reads in place and files it creates by name (issue 21):
 *
 *  - titan_open_regular / titan_check_regular: an input that is read with
 *    seeks or mapped must be a regular file.  A FIFO at that name would
 *    block open(2) (and every read after it) forever, so the open is
 *    non-blocking, the type is checked on the descriptor, and only then is
 *    the descriptor made blocking again.
 *  - titan_create_nofollow: a file titan creates under a fixed name in a
 *    folder (DUMP/.titan-train.lock, DUMP/metrics.jsonl) never writes
 *    through a symbolic link planted at that name: the link is replaced by
 *    a regular file, as the rename of titan_afile_close replaces a link at
 *    a converter's output name.
 *  - titan_guard_sigbus: a file mapped with mmap that another process
 *    truncates in place kills the reader with SIGBUS; inside the guard the
 *    fault becomes an error with the faulting address.
 */
#include "titan/core.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
	return S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" :
	       S_ISDIR(m) ? "a folder" : "of an unknown type";
}

/* Inputs that are read with seeks or mapped: a folder, a FIFO, a device
 * or a socket is refused by what it is. */
static int not_regular(const char *path, mode_t m)
{
	return titan_error(TITAN_E_IO, "cannot read '%s': not a regular file (%s)", path,
			   kind_of(m));
}

int titan_check_regular(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return titan_error(TITAN_E_IO, "cannot open '%s': %s", path, strerror(errno));
	return S_ISREG(st.st_mode) ? 0 : not_regular(path, st.st_mode);
}

int titan_open_regular(const char *path, int flags, int *fd_out, struct stat *st_out)
{
	struct stat st;
	int fd, fl;

	*fd_out = -1;
	if ((fd = open(path, flags | O_NONBLOCK | O_CLOEXEC)) < 0)
		return titan_error(TITAN_E_IO, "cannot open '%s': %s", path, strerror(errno));
	if (fstat(fd, &st) != 0) {
		int e = errno;

		close(fd);
		return titan_error(TITAN_E_IO, "cannot stat '%s': %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return not_regular(path, st.st_mode);
	}
	if (!(flags & O_NONBLOCK) && (fl = fcntl(fd, F_GETFL)) >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	if (st_out)
		*st_out = st;
	*fd_out = fd;
	return 0;
}

int titan_create_nofollow(const char *path, int flags, int *fd_out)
{
	int fd = -1, e = 0;

	*fd_out = -1;
	for (int tries = 0; tries < 4; tries++) {
		const char *was;
		struct stat st;

		/* O_TRUNC once the file is known to be only this name */
		fd = open(path, (flags & ~O_TRUNC) | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
			  0666);
		e = errno;
		if (fd >= 0) {
			int fl;

			if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
				close(fd);
				return titan_error(TITAN_E_IO, "cannot create '%s': %s is in the way",
						   path, kind_of(st.st_mode));
			}
			/* a file with other names (hard links) would be
			 * truncated or rewritten under those too: replaced
			 * like a symbolic link; appending to it harms nothing */
			if (st.st_nlink <= 1 || (flags & O_APPEND)) {
				if ((flags & O_TRUNC) && ftruncate(fd, 0) != 0) {
					e = errno;
					close(fd);
					return titan_error(TITAN_E_IO, "cannot truncate '%s': %s",
							   path, strerror(e));
				}
				if (!(flags & O_NONBLOCK) && (fl = fcntl(fd, F_GETFL)) >= 0)
					fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
				*fd_out = fd;
				return 0;
			}
			close(fd);
			was = "had other hard links";
		} else if (e == ELOOP && lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
			/* ELOOP: a symbolic link at the name (O_NOFOLLOW) */
			was = "was a symbolic link";
		} else {
			/* a FIFO without a reader: ENXIO (O_NONBLOCK) */
			if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
				return titan_error(TITAN_E_IO, "cannot create '%s': %s is in the way",
						   path, kind_of(st.st_mode));
			break;
		}
		/* replace the name, never the file it leads to */
		if (unlink(path) != 0 && errno != ENOENT)
			return titan_error(TITAN_E_IO, "cannot replace '%s' (it %s): %s", path, was,
					   strerror(errno));
		titan_log_warn("'%s' %s: replaced by a regular file (titan does not write "
			       "through links in its folders)", path, was);
		e = ELOOP;
	}
	return titan_error(TITAN_E_IO, "cannot create '%s': %s", path, strerror(e));
}

/* ------------------------------------------------------------ SIGBUS */

static _Thread_local sigjmp_buf *guard_jb;
static _Thread_local void *volatile guard_addr;
static struct sigaction prev_bus;
static pthread_mutex_t bus_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
	sigjmp_buf *jb = guard_jb;

	if (jb) {
		guard_jb = NULL;
		guard_addr = si ? si->si_addr : NULL;
		siglongjmp(*jb, 1);
	}
	/* not ours: whoever handled it before (the flight recorder), or die */
	if (prev_bus.sa_flags & SA_SIGINFO) {
		prev_bus.sa_sigaction(sig, si, ctx);
	} else if (prev_bus.sa_handler != SIG_DFL && prev_bus.sa_handler != SIG_IGN) {
		prev_bus.sa_handler(sig);
	} else {
		signal(sig, SIG_DFL);
		raise(sig);
	}
}

/* (Re)install the handler when another took its place (titan_dist_init
 * installs the flight recorder's), chaining to that one. */
static void install_sigbus(void)
{
	struct sigaction cur, sa;

	pthread_mutex_lock(&bus_lock);
	if (sigaction(SIGBUS, NULL, &cur) == 0 &&
	    !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus)) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_sigbus;
		sa.sa_flags = SA_SIGINFO | SA_NODEFER;
		sigemptyset(&sa.sa_mask);
		prev_bus = cur;
		sigaction(SIGBUS, &sa, NULL);
	}
	pthread_mutex_unlock(&bus_lock);
}

int titan_guard_sigbus(int (*fn)(void *arg), void *arg, const void **fault)
{
	sigjmp_buf jb, *volatile outer = guard_jb;
	int rc;

	*fault = NULL;
	install_sigbus();
	if (sigsetjmp(jb, 1)) {
		guard_jb = outer;
		*fault = guard_addr;
		return titan_error(TITAN_E_IO, "SIGBUS reading a mapped file at %p (truncated "
				   "while it was read?)", *fault);
	}
	guard_jb = &jb;
	rc = fn(arg);
	guard_jb = outer;
	return rc;
}
