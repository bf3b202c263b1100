#!/bin/sh
# bench/blas_kernels.sh [--threads N] [--size N] [--repeat R] [KERNEL...]
#
# One sgemm (C = A B^T, fp32, N x N x N, default 1024) with each OpenBLAS
# kernel this machine's OpenBLAS (a DYNAMIC_ARCH build: Debian's) can run,
# chosen with OPENBLAS_CORETYPE, best of R calls after a warm-up, on N
# threads (default 1).  The first row is OpenBLAS's own choice (nothing
# set); the last line is the kernel titan chooses here (`titan-config
# --version`, lib/cpu/select.c).  docs/performance.md, "The BLAS kernel",
# has the numbers and the command.
#
#   bench/blas_kernels.sh                   # Prescott Nehalem Sandybridge Haswell SkylakeX Cooperlake
#   bench/blas_kernels.sh --threads 2 Haswell SkylakeX
#
# Kernels the CPU cannot run (AVX-512 on an AVX2 machine) die with SIGILL:
# the row says so.  Cooperlake is not a name 0.3.21's OPENBLAS_CORETYPE
# takes: OpenBLAS then picks from the CPU's features (so it is Cooperlake
# only where avx512_bf16 is there); the "ran" column says what ran.
set -eu

threads=1 size=1024 repeat=10
while [ $# -gt 0 ]; do
	case $1 in
	--threads) threads=$2; shift 2 ;;
	--size) size=$2; shift 2 ;;
	--repeat) repeat=$2; shift 2 ;;
	-h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	--) shift; break ;;
	-*) echo "blas_kernels.sh: unknown option '$1'" >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || set -- Prescott Nehalem Sandybridge Haswell SkylakeX Cooperlake
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${TITAN_BIN:-$here/bin}
blas_flags=$(pkg-config --cflags --libs openblas 2>/dev/null || echo -lopenblas)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/sgemm.c" <<'EOF'
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
char *openblas_get_corename(void);
char *openblas_get_config(void);
int main(int argc, char **argv)
{
	int nt = atoi(argv[1]), n = atoi(argv[2]), reps = atoi(argv[3]);
	float *a = malloc(sizeof(float) * n * n * 3);
	double best = 0;

	openblas_set_num_threads(nt);
	for (long i = 0; i < 3L * n * n; i++)
		a[i] = (float)(i % 7) * 0.1f;
	for (int r = 0; r <= reps; r++) {
		struct timespec t0, t1;
		double s;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n,
			    a + (long)n * n, n, 0.0f, a + 2L * n * n, n);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
		if (r > 0 && 2.0 * n * n * (double)n / s > best) /* r 0: warm-up */
			best = 2.0 * n * n * (double)n / s;
	}
	printf("%.1f %s\n", best * 1e-9, openblas_get_corename());
	return 0;
}
EOF
# shellcheck disable=SC2086
${CC:-cc} -O2 -o "$tmp/sgemm" "$tmp/sgemm.c" $blas_flags

echo "cpu:     $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)," \
	"family $(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -1)" \
	"model $(sed -n 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
echo "openblas: $(pkg-config --modversion openblas 2>/dev/null || echo unknown)"
echo "sgemm:   ${size}^3 fp32, $threads thread(s), best of $repeat (GFLOP/s)"
printf '%-16s %-16s %10s\n' "OPENBLAS_CORETYPE" "ran" "GFLOP/s"
r=$(env -u OPENBLAS_CORETYPE "$tmp/sgemm" "$threads" "$size" "$repeat")
printf '%-16s %-16s %10s\n' "(unset)" "${r#* }" "${r%% *}"
for k in "$@"; do
	if r=$(OPENBLAS_CORETYPE=$k "$tmp/sgemm" "$threads" "$size" "$repeat" 2>/dev/null); then
		printf '%-16s %-16s %10s\n' "$k" "${r#* }" "${r%% *}"
	else
		printf '%-16s %-16s %10s\n' "$k" "(exit $?: not on this CPU)" "-"
	fi
done
if [ -x "$bin/titan-config" ]; then
	echo "titan:   $(env -u OPENBLAS_CORETYPE "$bin/titan-config" --version | sed -n 's/^gemm: *//p')"
fi
