#!/usr/bin/env bash
# tests/fuzz/run.sh [--tap] [--time SECONDS] [NAME...] — run the libFuzzer
# harnesses (build/fuzz/bin/fuzz_NAME, made by make fuzz-build) one after
# the other, each for SECONDS (default 300; with --tap FUZZ_CI_TIME or 8),
# and report the executions of each.  docs/fuzzing.md tells more.
#
#   --tap   for tests/run: build the harnesses first (make fuzz-build),
#           print TAP ("ok N fuzz NAME: X execs in T s"), start every
#           harness from its seeds alone (a fresh corpus), and skip with a
#           reason when clang or libFuzzer is missing.
#   else    (make fuzz) the corpus grows in build/fuzz/corpus/NAME across
#           runs; a table of executions at the end.
#
# Before fuzzing, a harness replays the inputs of tests/fuzz/regress/NAME/
# (what found the bugs fixed so far; one TAP line for them).  A crash, a
# sanitizer report, a leak, a timeout (FUZZ_TIMEOUT seconds for one input,
# default 25) or running out of memory fails the harness and leaves the
# input under build/fuzz/crashes/NAME/ (reproduce it with
# build/fuzz/bin/fuzz_NAME FILE).  Exit status: 0 when no harness failed.
# Logs: build/fuzz/logs/NAME.log (build/fuzz/logs-ci/ with --tap).
# Environment: FUZZ_BUILD (build/fuzz), FUZZ_CC (clang), FUZZ_CI_TIME,
# FUZZ_TIMEOUT, FUZZ_JOBS (make -j, 2).
set -u
{ # read whole before running: editing this file during a run is harmless
src=$(cd "$(dirname "$0")/../.." && pwd)
cd "$src" || exit 1
fb=${FUZZ_BUILD:-build/fuzz}
tap=0 time='' names=()
while [ $# -gt 0 ]; do
	case $1 in
	--tap) tap=1 ;;
	--time) time=${2:-}; shift ;;
	-*) echo "tests/fuzz/run.sh: unknown option '$1'" >&2; exit 2 ;;
	*) names+=("$1") ;;
	esac
	shift
done
[ -n "$time" ] || time=$([ $tap = 1 ] && echo "${FUZZ_CI_TIME:-8}" || echo 300)
case $time in ''|*[!0-9]*) echo "tests/fuzz/run.sh: --time: '$time' is not a number of seconds" >&2; exit 2 ;; esac

n=0
result() { # ok|not ok, text
	n=$((n + 1))
	if [ $tap = 1 ]; then echo "$1 $n fuzz $2"; else echo "fuzz: ${1/#ok/passed}: $2"; fi
}

if [ $tap = 1 ]; then
	# clang with libFuzzer and the sanitizers, else skip saying why
	cc=${FUZZ_CC:-clang}
	probe=$(mktemp -d)
	printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' > "$probe/p.c"
	if ! command -v "$cc" > /dev/null 2>&1; then
		why="'$cc' is not installed (apt-get install clang libclang-rt-14-dev libomp-14-dev)"
	elif ! "$cc" -fsanitize=fuzzer,address,undefined -fopenmp "$probe/p.c" -o "$probe/p" > "$probe/log" 2>&1; then
		why="'$cc' cannot link a libFuzzer harness (install libclang-rt-14-dev and libomp-14-dev): $(head -n 1 "$probe/log")"
	else
		why=
	fi
	rm -rf "$probe"
	if [ -n "$why" ]; then
		echo "ok 1 fuzz # SKIP $why"
		exit 0
	fi
	echo "# fuzz: make fuzz-build (log in $fb/build.log)"
	mkdir -p "$fb"
	if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -j"${FUZZ_JOBS:-2}" fuzz-build > "$fb/build.log" 2>&1; then
		result "not ok" "build: make fuzz-build failed"
		tail -n 15 "$fb/build.log" | sed 's/^/#   /'
		exit 1
	fi
fi

if [ ${#names[@]} -eq 0 ]; then
	for b in "$fb"/bin/fuzz_*; do
		[ -x "$b" ] && names+=("${b##*/fuzz_}")
	done
fi
if [ ${#names[@]} -eq 0 ]; then
	echo "tests/fuzz/run.sh: no harnesses in $fb/bin (run make fuzz-build)" >&2
	exit 1
fi

tmp=$(mktemp -d /dev/shm/titan-fuzz-run.XXXXXX 2> /dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export FUZZ_TMPDIR=$tmp
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:quarantine_size_mb=16}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
logs=$fb/logs # make fuzz's; tests/run's short runs do not overwrite them
[ $tap = 1 ] && logs=$fb/logs-ci
mkdir -p "$logs"
failed=0 table=()
for name in "${names[@]}"; do
	bin=$fb/bin/fuzz_$name
	if [ ! -x "$bin" ]; then
		result "not ok" "$name: no harness $bin"
		failed=1
		continue
	fi
	seeds=$fb/seeds/$name
	mkdir -p "$seeds" "$fb/crashes/$name"
	regress=(tests/fuzz/regress/"$name"/*) regress_dir=
	if [ -f "${regress[0]}" ]; then
		regress_dir=tests/fuzz/regress/$name
		if "$bin" -timeout="${FUZZ_TIMEOUT:-25}" -rss_limit_mb=2048 "${regress[@]}" \
			> "$logs/$name.regress.log" 2>&1; then
			result ok "$name: ${#regress[@]} regression input(s) of tests/fuzz/regress/$name"
		else
			failed=1
			result "not ok" "$name: a regression input of tests/fuzz/regress/$name fails"
			grep -E -m 6 'Running:|ERROR:|SUMMARY:|runtime error:|^fuzz: ' \
				"$logs/$name.regress.log" | sed 's/^/#   /'
		fi
	fi
	if [ $tap = 1 ]; then
		corpus=$tmp/corpus-$name
		rm -rf "$corpus"
	else
		corpus=$fb/corpus/$name
	fi
	mkdir -p "$corpus"
	dict=()
	for d in "tests/fuzz/$name.dict" "$fb/seeds/$name.dict"; do # written, or made by mkseeds
		[ -f "$d" ] && dict=(-dict="$d") && break
	done
	log=$logs/$name.log
	t0=$(date +%s.%N)
	"$bin" -max_total_time="$time" -print_final_stats=1 -timeout="${FUZZ_TIMEOUT:-25}" \
		-rss_limit_mb=2048 -artifact_prefix="$fb/crashes/$name/" "${dict[@]}" \
		"$corpus" "$seeds" ${regress_dir:+"$regress_dir"} > "$log" 2>&1
	rc=$?
	t1=$(date +%s.%N)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	execs=${execs:-0}
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')
	units=$(find "$corpus" -type f | wc -l)
	if [ $rc -eq 0 ]; then
		result ok "$name: $execs execs in $secs s"
		table+=("$(printf '%-12s %12s execs %6s s %9s/s  corpus %s' "$name" "$execs" "$secs" \
			"$(awk -v e="$execs" -v s="$secs" 'BEGIN { printf "%.0f", (s > 0 ? e / s : e) }')" "$units")")
	else
		failed=1
		crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
		result "not ok" "$name: failed after $execs execs in $secs s (exit $rc)${crash:+, input $crash}"
		grep -E -m 6 'ERROR:|SUMMARY:|runtime error:|^fuzz: |==[0-9]+== ?[A-Z]' "$log" | sed 's/^/#   /'
		echo "#   log: $log"
		table+=("$(printf '%-12s FAILED after %s execs (%s)' "$name" "$execs" "${crash:-see $log}")")
	fi
done
if [ $tap = 0 ]; then
	echo "fuzz: executions per harness (${time} s each, $(date -u +%Y-%m-%d), logs in $logs):"
	printf '  %s\n' "${table[@]}"
fi
exit $failed
}
