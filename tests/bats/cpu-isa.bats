#!/usr/bin/env bats
# TITAN_CPU_ISA: titan-train's own CPU kernels on each compiled path
# (baseline, avx2, avx512; lib/cpu/isa.c) train to the same bits, and a
# bad value is a usage error naming the variable.

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus --bible genesis 4000 768 40
	# head dim 32 (the attention's 16- and 32-wide tiles), FFN tails
	tiny_yaml "$DATA/tiny.yaml" 768 64 2 2 1 <<YAML
job:
  dump_folder: $DATA/out
lr_scheduler:
  warmup_steps: 2
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 80
  steps: 4
metrics:
  log_freq: 1
  peak_flops: 1.0e+11
activation_checkpoint:
  mode: none
YAML
}

setup() {
	load helpers
	load tiny
	cd "$TITAN_SRCDIR"
}

# the paths this CPU runs, from /proc/cpuinfo (x86-64-v3 / -v4 as GCC checks)
paths() {
	local f
	f=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
	echo baseline
	[[ $f == *" avx2 "* && $f == *" fma "* && $f == *" bmi2 "* && $f == *" movbe "* ]] || return 0
	echo avx2
	[[ $f == *" avx512f "* && $f == *" avx512bw "* && $f == *" avx512dq "* && $f == *" avx512vl "* &&
	   $f == *" avx512cd "* ]] && echo avx512
	return 0
}

@test "every CPU path trains to the same losses and grad norms, bit for bit" {
	local p n=0
	TITAN_CPU_ISA= titan-train --config "$DATA/tiny.yaml" --threads 2 -q \
		--job.dump_folder="$BATS_TEST_TMPDIR/best"
	tiny_losses "$BATS_TEST_TMPDIR/best/metrics.jsonl" > "$BATS_TEST_TMPDIR/best.txt"
	[ "$(wc -l < "$BATS_TEST_TMPDIR/best.txt")" -eq 4 ]
	for p in $(paths); do
		TITAN_CPU_ISA=$p titan-train --config "$DATA/tiny.yaml" --threads 2 -q \
			--job.dump_folder="$BATS_TEST_TMPDIR/$p"
		tiny_losses "$BATS_TEST_TMPDIR/$p/metrics.jsonl" > "$BATS_TEST_TMPDIR/$p.txt"
		diff "$BATS_TEST_TMPDIR/best.txt" "$BATS_TEST_TMPDIR/$p.txt"
		n=$((n + 1))
	done
	[ $n -ge 1 ]
}

@test "TITAN_CPU_ISA: another word is a usage error, a path the CPU lacks a runtime one" {
	run -2 --separate-stderr env TITAN_CPU_ISA=sse9 titan-train --config "$DATA/tiny.yaml" -q \
		--job.dump_folder="$BATS_TEST_TMPDIR/bad"
	[[ $stderr == *"titan-train: error: TITAN_CPU_ISA=sse9: not a CPU path (baseline, avx2, avx512)"* ]]
	if ! paths | grep -qx avx512; then
		run -1 --separate-stderr env TITAN_CPU_ISA=avx512 titan-train --config "$DATA/tiny.yaml" \
			-q --job.dump_folder="$BATS_TEST_TMPDIR/bad"
		[[ $stderr == *"TITAN_CPU_ISA=avx512"*"not available on this CPU"* ]]
	fi
}
