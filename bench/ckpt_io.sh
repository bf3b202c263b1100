#!/usr/bin/env bash
# bench/ckpt_io.sh — checkpoint write and read throughput against the disk's
# sequential speed measured in the same run, in the same folder.
#
#   bench/ckpt_io.sh [--dir DIR] [--layers "2 8"] [--repeat R] [--cold]
#
# For each LAYERS (a Llama 3 1B-shaped model with that many layers: 2 ->
# 0.38 B parameters, a 4.6 GB full checkpoint of weights and both AdamW
# moments), R times (default 1): bench/ckpt_io.c saves the checkpoint
# (titan_ckpt_save: HDF5, fsync, rename), dd writes random bytes of the
# same size with conv=fsync (the disk's sequential write speed); each side
# writes twice and times its second write (on a VM the first write into
# fresh page cache runs at a fraction of the disk speed, whoever does it).
# Then dd reads the file (read baseline) and ckpt_io loads it back
# (titan_ckpt_load: checks, then reads into the arenas).  With --cold the page
# cache is dropped before each read (root only), so reads come from disk.
# Prints GB/s (1e9 bytes) and titan / dd; the best of R runs is kept.
# Goal (issue 5): save >= 80% of dd.  Needs a built tree (make) and about
# three times the checkpoint size free in DIR (default: a folder in /tmp).
set -euo pipefail

prog=ckpt_io.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
src=$(cd "$(dirname "$0")/.." && pwd)
build=${TITAN_BUILD:-$src/build}
dir= layers="2" repeat=1 cold=0
while [ $# -gt 0 ]; do
	case $1 in
	--dir) dir=$2; shift ;;
	--layers) layers=$2; shift ;;
	--repeat) repeat=$2; shift ;;
	--cold) cold=1 ;;
	-h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done
[ -f "$build/libtitan.a" ] && [ -f "$build/config.mk" ] || die "build titan first (make)"
[ $cold = 0 ] || [ "$(id -u)" = 0 ] || die "--cold needs root (drop_caches)"
if [ -z "$dir" ]; then
	dir=$(mktemp -d /tmp/ckpt_io.XXXXXX)
	trap 'rm -rf "$dir"' EXIT
fi
mkdir -p "$dir"

# the timer, linked like the tools
libs=$(sed -n 's/^\(HDF5_LIBS\|MPI_LIBS\|YAML_LIBS\|JANSSON_LIBS\|PCRE2_LIBS\|BLAS_LIBS\) := //p' "$build/config.mk" | tr '\n' ' ')
cflags=$(sed -n 's/^\(HDF5_CFLAGS\) := //p' "$build/config.mk")
# shellcheck disable=SC2086
cc -std=c17 -D_GNU_SOURCE -O2 -fopenmp -I"$src/lib" -I"$build" $cflags "$src/bench/ckpt_io.c" \
	"$build/libtitan.a" $libs -lm -o "$dir/ckpt_io" || die "cannot build bench/ckpt_io.c"

drop() { [ $cold = 0 ] || { sync; echo 3 > /proc/sys/vm/drop_caches; }; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
now() { date +%s.%N; }

head -c $((256 << 20)) /dev/urandom > "$dir/rnd"
echo "# $(uname -n), $(nproc) CPUs, folder $dir ($(df -h "$dir" | awk 'NR == 2 { print $1 }')), cold=$cold"
printf '%-7s %-10s %9s %9s %7s %9s %9s %7s\n' layers bytes dd_write save ratio dd_read load ratio
for L in $layers; do
	best_dw=0 best_s=0 best_dr=0 best_l=0 bytes=0
	for _ in $(seq "$repeat"); do
		rm -f "$dir/step-1.h5" "$dir/dd.bin"
		out=$("$dir/ckpt_io" save "$dir" "$L") || die "save failed"
		bytes=$(echo "$out" | awk '{ print $2 }')
		s=$(echo "$out" | awk '{ print $3 }')
		mv "$dir/step-1.h5" "$dir/keep.h5"
		# dd twice, the first untimed, as ckpt_io saves twice (first
		# writes into fresh page cache are slow on VMs)
		n=$(( (bytes + (256 << 20) - 1) / (256 << 20) ))
		for pass in 1 2; do
			rm -f "$dir/dd.bin"
			t0=$(now)
			for _ in $(seq $n); do cat "$dir/rnd"; done |
				dd of="$dir/dd.bin" bs=64M iflag=fullblock count=$(( n * 4 )) conv=fsync status=none
			dw=$(secs "$t0" "$(now)")
		done
		dwb=$(( n * (256 << 20) ))
		rm -f "$dir/dd.bin"
		mv "$dir/keep.h5" "$dir/step-1.h5"
		drop
		t0=$(now)
		dd if="$dir/step-1.h5" of=/dev/null bs=64M status=none
		dr=$(secs "$t0" "$(now)")
		drop
		out=$("$dir/ckpt_io" load "$dir" "$L") || die "load failed"
		l=$(echo "$out" | awk '{ print $3 }')
		best_dw=$(awk -v x="$best_dw" -v y="$(awk -v b=$dwb -v t=$dw 'BEGIN { print b / t / 1e9 }')" 'BEGIN { print (y > x ? y : x) }')
		best_s=$(awk -v x="$best_s" -v y="$(awk -v b=$bytes -v t=$s 'BEGIN { print b / t / 1e9 }')" 'BEGIN { print (y > x ? y : x) }')
		best_dr=$(awk -v x="$best_dr" -v y="$(awk -v b=$bytes -v t=$dr 'BEGIN { print b / t / 1e9 }')" 'BEGIN { print (y > x ? y : x) }')
		best_l=$(awk -v x="$best_l" -v y="$(awk -v b=$bytes -v t=$l 'BEGIN { print b / t / 1e9 }')" 'BEGIN { print (y > x ? y : x) }')
		rm -f "$dir/step-1.h5"
	done
	awk -v L="$L" -v B="$bytes" -v dw="$best_dw" -v s="$best_s" -v dr="$best_dr" -v l="$best_l" 'BEGIN {
		printf "%-7s %-10s %7.2f/s %7.2f/s %6.0f%% %7.2f/s %7.2f/s %6.0f%%\n", L, B, dw, s, 100 * s / dw, dr, l, 100 * l / dr }'
done
echo "# GB/s; save = titan_ckpt_save (HDF5 write, fsync, rename); load = titan_ckpt_load"
