#!/bin/sh
# cpu_kernels.sh — the CPU backend's non-GEMM ops on each compiled path
# (baseline, AVX2, AVX-512; lib/cpu/isa.c) at the 25M model's shapes.
#
#   bench/cpu_kernels.sh [ROUNDS [THREADS]]     (default 6 rounds, 2 threads)
#
#   bench/cpu_kernels.sh 6 2 swiglu             (only the ops named so)
#
# Builds bench/cpu_kernels.c against build/libtitan.a (run make first) and
# prints a markdown table of the best time per call of each op and path;
# the paths run interleaved, round by round, so a busy machine slows them
# alike.  Paths the CPU lacks print "-".
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${TITAN_BUILD:-$src/build}
die() { echo "cpu_kernels.sh: error: $*" >&2; exit 1; }
[ -f "$build/libtitan.a" ] && [ -f "$build/config.mk" ] || die "build titan first (make)"
dir=$(mktemp -d /tmp/cpu_kernels.XXXXXX)
trap 'rm -rf "$dir"' EXIT
libs=$(sed -n 's/^\(HDF5_LIBS\|MPI_LIBS\|YAML_LIBS\|JANSSON_LIBS\|PCRE2_LIBS\|BLAS_LIBS\) := //p' "$build/config.mk" | tr '\n' ' ')
# shellcheck disable=SC2086
cc -std=c17 -D_GNU_SOURCE -O2 -fopenmp -I"$src/lib" -I"$build" "$src/bench/cpu_kernels.c" \
	"$build/libtitan.a" $libs -lm -o "$dir/cpu_kernels" || die "cannot build bench/cpu_kernels.c"
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} "$dir/cpu_kernels" "${1:-6}" "${2:-2}" "${3:-}"
