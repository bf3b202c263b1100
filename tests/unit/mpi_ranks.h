/* mpi_ranks.h — a unit test that checks several ranks runs itself again
 * under `mpiexec -n N` with --ranks (its main then runs the multi-rank
 * group): mpi_ranks_run(N) does that and asserts exit 0, or skips where
 * the build has no MPI or there is no mpiexec. */
#ifndef TITAN_TEST_MPI_RANKS_H
#define TITAN_TEST_MPI_RANKS_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"

static inline void mpi_ranks_run(int n)
{
	char self[4096], cmd[4400];
	ssize_t len;
	int st;

	if (!TITAN_HAVE_MPI || system("command -v mpiexec >/dev/null 2>&1") != 0) {
		printf("# skip reason: no MPI in this build or no mpiexec\n");
		skip();
	}
	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	assert_true(len > 0);
	self[len] = '\0';
	snprintf(cmd, sizeof(cmd), "env -u TITAN_MPI OMP_NUM_THREADS=1 timeout 120 "
		 "mpiexec -n %d '%s' --ranks", n, self);
	st = system(cmd);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

#endif
