#!/usr/bin/env bash
# bench/memprof.sh — titan-memprof on a large synthetic memory trace: events
# per second and the largest resident set of summary and timeline.
#
#   bench/memprof.sh [--events N] [--layers L] [--repeat R] [--dir DIR]
#
# bench/memprof_gen.c writes a trace of N events (default 10,000,000: a
# 320 MB file) shaped like training (set-up, then per step a data buffer,
# L x 4 activation blocks in forward, a loss workspace, backward freeing
# them with a workspace block per layer, an optimizer temporary); then
# `titan-memprof summary` and `titan-memprof timeline --svg` run on it under
# /usr/bin/time -v, R times (default 3), best wall time kept (the file is
# read once first so every run reads from the page cache).  The summary's
# peak is checked against the generator's.  Needs a built tree (make), cc,
# python3 and about N x 32 bytes free in DIR (default: a folder in /tmp).
set -euo pipefail

prog=memprof.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
src=$(cd "$(dirname "$0")/.." && pwd)
bin=${TITAN_BIN:-$src/bin}
events=10000000 layers=16 repeat=3 dir=
while [ $# -gt 0 ]; do
	case $1 in
	--events) events=$2; shift ;;
	--layers) layers=$2; shift ;;
	--repeat) repeat=$2; shift ;;
	--dir) dir=$2; shift ;;
	-h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done
[ -x "$bin/titan-memprof" ] || die "build titan first (make): no $bin/titan-memprof"
[ -x /usr/bin/time ] || die "/usr/bin/time is needed (Debian: time)"
if [ -z "$dir" ]; then
	dir=$(mktemp -d /tmp/memprof_bench.XXXXXX)
	trap 'rm -rf "$dir"' EXIT
fi
mkdir -p "$dir"
cc -std=c17 -O2 -o "$dir/gen" "$src/bench/memprof_gen.c" || die "cannot build bench/memprof_gen.c"
"$dir/gen" "$dir/bench.memtrace" "$events" 0 "$layers" > "$dir/want.json"
cat "$dir/bench.memtrace" > /dev/null

# run NAME CMD...: best wall seconds and its max RSS (KiB) over $repeat runs
run() {
	local name=$1 best='' rss='' _
	shift
	for _ in $(seq "$repeat"); do
		/usr/bin/time -v "$@" > "$dir/out" 2> "$dir/time" || { cat "$dir/time" >&2; die "$name failed"; }
		local w r
		w=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0;
			for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' "$dir/time")
		r=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$dir/time")
		if [ -z "$best" ] || awk -v a="$w" -v b="$best" 'BEGIN { exit !(a < b) }'; then
			best=$w rss=$r
		fi
	done
	awk -v n="$name" -v e="$events" -v w="$best" -v r="$rss" 'BEGIN {
		printf "%-9s %12d %9.3f %14.1f %10.1f\n", n, e, w, e / (w > 0 ? w : 1e-3) / 1e6, r / 1024 }'
}

echo "# $(uname -n), $(nproc) CPUs, $(awk '/model name/ { sub(/.*: /, ""); print; exit }' /proc/cpuinfo)"
echo "# trace: $(stat -c %s "$dir/bench.memtrace") bytes, $events events, $layers layers"
printf '%-9s %12s %9s %14s %10s\n' command events wall_s Mevents_per_s max_rss_MiB
run summary "$bin/titan-memprof" summary --json "$dir/bench.memtrace"
python3 - "$dir/want.json" "$dir/out" <<'EOF' || die "summary disagrees with the generator"
import json, sys
want, got = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))["ranks"][0]
assert got["peak_bytes"] == want["peak_bytes"] and got["at_peak"] == want["at_peak"], (got, want)
EOF
run timeline "$bin/titan-memprof" timeline --svg "$dir/bench.svg" "$dir/bench.memtrace"
echo "# SVG: $(stat -c %s "$dir/bench.svg") bytes"
