#!/usr/bin/env bats
# The OpenBLAS kernel (lib/cpu/select.c, docs/performance.md "The BLAS
# kernel"): with nothing set, titan-train and titan-generate run the fastest
# kernel the CPU flags allow and say so on their first log line; a user's
# OPENBLAS_CORETYPE is kept (with a warning when slower); the peak and MFU
# follow the kernel that runs; every rank under mpiexec chooses alike.
# An OpenBLAS that picks Prescott on this CPU (0.3.21 on Intel family 6
# models 0xB0-0xFF) is simulated with an LD_PRELOAD'ed
# openblas_get_corename that reports Prescott unless OPENBLAS_CORETYPE was
# set when the process started, as the real one does.

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus g 2000 768 40
	tiny_yaml "$DATA/tiny.yaml" 768 64 2 4 2 "$DATA/tok.tiktoken" <<YAML
job:
  dump_folder: $DATA/out
lr_scheduler:
  warmup_steps: 1
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 32
  steps: 2
checkpoint:
  enable: true
  interval: 2
activation_checkpoint:
  mode: none
comm:
  init_timeout_seconds: 120
  train_timeout_seconds: 60
YAML
	# an OpenBLAS that falls back to Prescott on this CPU
	if command -v "${CC:-cc}" >/dev/null; then
		cat > "$DATA/prescott.c" <<'C'
#include <stdlib.h>
static char *core = "Prescott";
__attribute__((constructor)) static void pick(void)
{
	if (getenv("OPENBLAS_CORETYPE"))
		core = getenv("OPENBLAS_CORETYPE");
}
char *openblas_get_corename(void) { return core; }
C
		"${CC:-cc}" -shared -fPIC -o "$DATA/prescott.so" "$DATA/prescott.c" || rm -f "$DATA/prescott.so"
	fi
}

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	titan-train --version | grep -q '+openblas' || skip "built without OpenBLAS"
	flags=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1) "
	# the kernel class the flags allow, as OpenBLAS names its kernels
	if [[ $flags == *" avx512f "* && $flags == *" avx512bw "* && $flags == *" avx512dq "* &&
	      $flags == *" avx512vl "* && $flags == *" avx2 "* && $flags == *" fma "* ]]; then
		best=SkylakeX class='(SkylakeX|Cooperlake|SapphireRapids)' flops=64 slower=Haswell
	elif [[ $flags == *" avx2 "* && $flags == *" fma "* ]]; then
		best=Haswell class='(Haswell|Zen|Excavator)' flops=32 slower=Sandybridge
	else
		best= class= flops=
	fi
}

# the first log line of a titan-train run, with ENV... before it
first_line() {
	run -0 --separate-stderr env -u OPENBLAS_CORETYPE "$@" titan-train --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/out" --checkpoint.enable=false
	line=${stderr_lines[0]}
}

@test "nothing set: the first log line names the fastest kernel the CPU flags allow" {
	[ -n "$best" ] || skip "no AVX2/AVX-512 on this CPU: nothing to choose"
	first_line
	[[ $line == "[titan] - root - INFO - titan-train "* ]] || fail "first line: $line"
	[[ $line =~ "; OpenBLAS "$class" kernel (OpenBLAS's own choice)"$ ||
	   $line =~ "; OpenBLAS "$class" kernel (chosen by titan from the CPU flags; OpenBLAS ".*" picked ".*")"$ ]] ||
		fail "first line does not name a $best-class kernel and how: $line"
	kernel=$(sed -E 's/.*; OpenBLAS ([A-Za-z0-9_]+) kernel \(.*/\1/' <<< "$line")
	# the peak follows it; no warning
	[[ $stderr == *"x $flops FLOP/cycle, OpenBLAS $kernel kernel;"* ]] || fail "peak: $stderr"
	[[ $stderr != *WARNING*OpenBLAS* ]] || fail "warned: $stderr"
	run -0 titan-train --version
	assert_line --regexp "^gemm: +OpenBLAS $class kernel \("
	run -0 titan-config --summary
	assert_line --regexp "^cpu gemm: +OpenBLAS $class kernel \("
}

@test "an OpenBLAS that falls back to Prescott: titan selects the flags' kernel before it runs" {
	[ -n "$best" ] || skip "no AVX2/AVX-512 on this CPU: nothing to choose"
	[ -f "$DATA/prescott.so" ] || skip "no C compiler for the simulated OpenBLAS"
	first_line LD_PRELOAD="$DATA/prescott.so"
	[[ $line == *"; OpenBLAS $best kernel (chosen by titan from the CPU flags; OpenBLAS "*" picked Prescott)" ]] ||
		fail "first line: $line"
	[[ $stderr == *"x $flops FLOP/cycle, OpenBLAS $best kernel;"* ]] || fail "peak: $stderr"
	[[ $stderr != *WARNING*OpenBLAS* ]] || fail "warned: $stderr"
	# argv survives the re-execution: the run used the overrides
	[ -d "$BATS_TEST_TMPDIR/out" ] && [ ! -e "$DATA/out" ] || fail "--job.dump_folder was lost"
	[[ $output == *"step:  2"* || $stderr == *"step:  2"* ]] || fail "no step 2: $stderr"
	# --version of the tools that run GEMMs
	run -0 env -u OPENBLAS_CORETYPE LD_PRELOAD="$DATA/prescott.so" titan-train --version
	assert_line "gemm:     OpenBLAS $best kernel (chosen by titan from the CPU flags; OpenBLAS $(
		sed -n 's/.*OpenBLAS \([^ ]*\) picked.*/\1/p' <<< "$line") picked Prescott)"
	run -0 env -u OPENBLAS_CORETYPE LD_PRELOAD="$DATA/prescott.so" titan-generate --version
	assert_line --partial "gemm:     OpenBLAS $best kernel (chosen by titan from the CPU flags;"
	# the same choice reported by titan-config, which runs no GEMM
	run -0 env -u OPENBLAS_CORETYPE LD_PRELOAD="$DATA/prescott.so" titan-config --summary
	assert_line --partial "cpu gemm:     OpenBLAS $best kernel (chosen by titan"
}

@test "titan-generate: its first log line names the kernel" {
	[ -n "$best" ] || skip "no AVX2/AVX-512 on this CPU: nothing to choose"
	titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder="$BATS_TEST_TMPDIR/g"
	ckpt=$BATS_TEST_TMPDIR/g/checkpoint/step-2.h5
	run -0 --separate-stderr env -u OPENBLAS_CORETYPE titan-generate -n 2 --temperature 0 "$ckpt" In
	[[ ${stderr_lines[0]} =~ "[titan] - root - INFO - titan-generate ".*"; OpenBLAS "$class" kernel (" ]] ||
		fail "first line: ${stderr_lines[0]}"
	if [ -f "$DATA/prescott.so" ]; then
		run -0 --separate-stderr env -u OPENBLAS_CORETYPE LD_PRELOAD="$DATA/prescott.so" \
			titan-generate -n 2 --temperature 0 "$ckpt" In
		[[ ${stderr_lines[0]} == *"; OpenBLAS $best kernel (chosen by titan from the CPU flags; OpenBLAS "*" picked Prescott)" ]] ||
			fail "first line: ${stderr_lines[0]}"
	fi
	run -0 --separate-stderr env OPENBLAS_CORETYPE=Prescott titan-generate -n 2 --temperature 0 "$ckpt" In
	[[ ${stderr_lines[0]} == *"; OpenBLAS Prescott kernel (set by OPENBLAS_CORETYPE)" ]] ||
		fail "first line: ${stderr_lines[0]}"
	[[ $stderr == *"WARNING - OpenBLAS runs its Prescott kernel (SSE3, 8 FLOP/cycle per core)"* ]] ||
		fail "no warning: $stderr"
}

@test "OPENBLAS_CORETYPE set by the user is kept; a slower one warns once, naming the loss and the fix" {
	[ -n "$best" ] || skip "no AVX2/AVX-512 on this CPU: nothing to choose"
	first_line OPENBLAS_CORETYPE=$slower
	[[ $line == *"; OpenBLAS $slower kernel (set by OPENBLAS_CORETYPE)" ]] || fail "first line: $line"
	[ "$(grep -c 'WARNING - OpenBLAS runs' <<< "$stderr")" = 1 ] || fail "not one warning: $stderr"
	[[ $stderr == *"WARNING - OpenBLAS runs its $slower kernel ("*" on a CPU whose flags allow $best ("*"$flops): GEMMs up to 2x slower than they can be; unset OPENBLAS_CORETYPE (titan then chooses $best) or set it to $best"* ]] ||
		fail "warning: $stderr"
	# the peak (and so the MFU) is the kernel's that runs
	[[ $stderr == *"x $((flops / 2)) FLOP/cycle, OpenBLAS $slower kernel;"* ]] || fail "peak: $stderr"
	# kept even where OpenBLAS would fall back to Prescott
	if [ -f "$DATA/prescott.so" ]; then
		first_line OPENBLAS_CORETYPE=$slower LD_PRELOAD="$DATA/prescott.so"
		[[ $line == *"; OpenBLAS $slower kernel (set by OPENBLAS_CORETYPE)" ]] || fail "first line: $line"
	fi
	# the user's own best kernel: no warning
	first_line OPENBLAS_CORETYPE=$best
	[[ $line == *"; OpenBLAS $best kernel (set by OPENBLAS_CORETYPE)" ]] || fail "first line: $line"
	[[ $stderr != *WARNING*OpenBLAS* ]] || fail "warned: $stderr"
}

@test "Prescott's peak is SSE3's 8 FLOP/cycle, not a guess from the CPU flags" {
	first_line OPENBLAS_CORETYPE=Prescott
	[[ $stderr == *"(SSE3: "*" x 8 FLOP/cycle, OpenBLAS Prescott kernel;"* ]] || fail "peak: $stderr"
}

@test "2 ranks under mpiexec: each re-executes with its argv and makes the same choice" {
	skip_without_mpi
	[ -n "$best" ] || skip "no AVX2/AVX-512 on this CPU: nothing to choose"
	[ -f "$DATA/prescott.so" ] || skip "no C compiler for the simulated OpenBLAS"
	run -0 --separate-stderr env -u OPENBLAS_CORETYPE LD_PRELOAD="$DATA/prescott.so" \
		timeout 120 mpiexec -n 2 titan-train --log-rank all --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/out" --checkpoint.enable=false
	for r in 0 1; do
		[[ $stderr == *"[rank$r]:[titan] - root - INFO - titan-train "*"2 rank(s) over MPI"*"; OpenBLAS $best kernel (chosen by titan from the CPU flags; OpenBLAS "*" picked Prescott)"* ]] ||
			fail "rank $r: $stderr"
	done
	# a slower user value: kept on both, one warning (rank 0 logs)
	run -0 --separate-stderr env OPENBLAS_CORETYPE=$slower timeout 120 mpiexec -n 2 titan-train \
		--config "$DATA/tiny.yaml" --job.dump_folder="$BATS_TEST_TMPDIR/out2" --checkpoint.enable=false
	[[ $stderr == *"; OpenBLAS $slower kernel (set by OPENBLAS_CORETYPE)"* ]] || fail "$stderr"
	[ "$(grep -c 'WARNING - OpenBLAS runs' <<< "$stderr")" = 1 ] || fail "not one warning: $stderr"
}

@test "titan-estimate --device cpu: the step time of the kernel titan-train will select, without re-executing" {
	[ -n "$best" ] || skip "no AVX2/AVX-512 on this CPU: nothing to choose"
	[ -f "$DATA/prescott.so" ] || skip "no C compiler for the simulated OpenBLAS"
	run -0 --separate-stderr env -u OPENBLAS_CORETYPE LD_PRELOAD="$DATA/prescott.so" \
		titan-estimate --config "$DATA/tiny.yaml" --device cpu --threads 2
	assert_line --regexp "^kernel    OpenBLAS $best kernel \(chosen by titan from the CPU flags; OpenBLAS .*picked Prescott\): .* x $flops FLOP/cycle = "
	run -0 env -u OPENBLAS_CORETYPE LD_PRELOAD="$DATA/prescott.so" \
		titan-estimate --config "$DATA/tiny.yaml" --device cpu --threads 2 --json
	/usr/bin/python3 -c '
import json, sys
k = json.loads(sys.argv[1])["cpu_kernel"]
assert k["name"] == sys.argv[2] and k["chosen_by"] == "titan", k
assert k["flops_per_cycle"] == int(sys.argv[3]) and k["step_time_from_kernel"], k' "$output" "$best" "$flops"
}
