# tests/bats/helpers.bash — shared setup for titan's bats suites.
# The tools under test come from $TITAN_BIN (set by make / tests/run).
bats_load_library bats-support
bats_load_library bats-assert
bats_load_library bats-file

TITAN_SRCDIR=${TITAN_SRCDIR:-$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}
TITAN_BIN=${TITAN_BIN:-$TITAN_SRCDIR/bin}
TITAN_BUILD=${TITAN_BUILD:-$TITAN_SRCDIR/build}
PATH=$TITAN_BIN:$PATH
export TITAN_LOG_TIME=0
FIXTURES=$TITAN_SRCDIR/tests/fixtures

# A crash (abort, segfault) never counts as the expected failure.
refute_crash() {
	if [ "$status" -ge 126 ]; then
		fail "crashed with status $status: $stderr"
	fi
}

# skip_without_mpi: skip the test where there is no mpiexec or titan-train
# was built without MPI
skip_without_mpi() {
	command -v mpiexec >/dev/null && titan-train --version | grep -q '+mpi' ||
		skip "no MPI in this build (or no mpiexec)"
}
