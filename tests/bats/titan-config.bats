#!/usr/bin/env bats
# titan-config: the tool contract, every config error class through the
# command line, override precedence, round trips and the presets.

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
}

# ---------------------------------------------------------------- contract

@test "no arguments prints the default config as YAML" {
	run -0 --separate-stderr titan-config
	assert_line "training:"
	assert_line "  seq_len: 2048"
	assert_line "  lr: 0.0008"
	[ -z "$stderr" ]
}

@test "--help prints usage on stdout and exits 0" {
	run -0 --separate-stderr titan-config --help
	assert_line --partial "Usage: titan-config"
	assert_output --partial "See also"
	[ -z "$stderr" ]
}

@test "--version prints version, revision and features" {
	run -0 titan-config --version
	assert_line --regexp '^titan-config \(titan\) [0-9]+\.[0-9]+\.[0-9]+$'
	assert_line --regexp '^features: [+-]cuda [+-]nccl [+-]mpi [+-]hdf5 [+-]hdf5-parallel [+-]openblas [+-]zlib [+-]zstd$'
}

@test "a bad option is a usage error (2) with a pointer to --help" {
	run -2 --separate-stderr titan-config --frobnicate
	refute_crash
	[[ $stderr == *"unrecognized option"* ]]
	[[ $stderr == *"Try 'titan-config --help'"* ]]
	[ -z "$output" ]
}

@test "an extra argument is a usage error" {
	run -2 --separate-stderr titan-config configs/llama3_8b.yaml
	[[ $stderr == *"unexpected argument 'configs/llama3_8b.yaml'"* ]]
}

@test "a missing config file is a configuration error naming the file (2)" {
	run -2 --separate-stderr titan-config --config "$BATS_TEST_TMPDIR/nope.yaml"
	refute_crash
	[[ $stderr == "titan-config: error: "*"nope.yaml"*"No such file or directory"* ]]
	[ -z "$output" ]
}

@test "a file that is not YAML is an error with its line (2)" {
	printf 'training:\n  steps: [1, 2\n' > "$BATS_TEST_TMPDIR/bad.yaml"
	run -2 --separate-stderr titan-config --config "$BATS_TEST_TMPDIR/bad.yaml"
	refute_crash
	[[ $stderr == "titan-config: error: $BATS_TEST_TMPDIR/bad.yaml:"* ]]
	[ -z "$output" ]
}

# ------------------------------------------------------------ error classes

cfg() { printf "$1" > "$BATS_TEST_TMPDIR/c.yaml"; }

@test "unknown key: file, line, column, key and a suggestion" {
	cfg 'training:\n  steps: 10\n  stpes: 20\n'
	run -2 --separate-stderr titan-config -c "$BATS_TEST_TMPDIR/c.yaml"
	[[ $stderr == *"c.yaml:3:3: training.stpes: unknown key (did you mean 'training.steps'?)"* ]]
}

@test "unknown section with a suggestion" {
	cfg 'trainng:\n  steps: 10\n'
	run -2 --separate-stderr titan-config -c "$BATS_TEST_TMPDIR/c.yaml"
	[[ $stderr == *"c.yaml:1:1:"*"trainng"*"did you mean 'training'"* ]]
}

@test "key in the wrong section suggests the right one" {
	cfg 'training:\n  lr: 0.1\n'
	run -2 --separate-stderr titan-config -c "$BATS_TEST_TMPDIR/c.yaml"
	[[ $stderr == *"training.lr: unknown key (did you mean 'optimizer.lr'?)"* ]]
}

@test "wrong type" {
	cfg 'training:\n  steps: ten\n'
	run -2 --separate-stderr titan-config -c "$BATS_TEST_TMPDIR/c.yaml"
	[[ $stderr == *"c.yaml:2:10: training.steps: expected an integer"*"ten"* ]]
}

@test "out of range" {
	cfg 'training:\n  seq_len: 0\n'
	run -2 --separate-stderr titan-config -c "$BATS_TEST_TMPDIR/c.yaml"
	[[ $stderr == *"c.yaml:2:12: training.seq_len: "*"out of range"* ]]
}

@test "bad enum value lists the choices" {
	cfg 'checkpoint:\n  async_mode: sync\n'
	run -2 --separate-stderr titan-config -c "$BATS_TEST_TMPDIR/c.yaml"
	[[ $stderr == *"c.yaml:2:15: checkpoint.async_mode: 'sync' is not one of disabled"* ]]
}

@test "errors in overrides name the command line" {
	run -2 --separate-stderr titan-config --training.steps=abc
	[[ $stderr == *"command line: training.steps: expected an integer"* ]]
	run -2 --separate-stderr titan-config --training.stepz=3
	[[ $stderr == *"training.stepz: unknown key (did you mean 'training.steps'?)"* ]]
	run -2 --separate-stderr titan-config --optimizer.lr=-1
	[[ $stderr == *"optimizer.lr"*"out of range"* ]]
}

@test "cross-key checks name the keys" {
	run -2 --separate-stderr titan-config --checkpoint.keep_latest_k=1
	[[ $stderr == *"checkpoint.keep_latest_k"* ]]
	run -2 --separate-stderr titan-config --training.global_batch_size=12
	[[ $stderr == *"training.global_batch_size"* ]]
}

# -------------------------------------------------------------- precedence

@test "defaults < file < overrides, later overrides win" {
	cfg 'training:\n  steps: 10\n  seq_len: 512\n'
	run -0 titan-config -c "$BATS_TEST_TMPDIR/c.yaml" --get training.steps
	assert_output "10"
	run -0 titan-config -c "$BATS_TEST_TMPDIR/c.yaml" --training.steps=20 --get training.steps
	assert_output "20"
	run -0 titan-config -c "$BATS_TEST_TMPDIR/c.yaml" --training.steps 20 --training.steps=30 --get training.steps
	assert_output "30"
	run -0 titan-config -c "$BATS_TEST_TMPDIR/c.yaml" --get training.seq_len
	assert_output "512"
	run -0 titan-config --get training.steps
	assert_output "10000"
}

@test "a bare boolean override sets true" {
	run -0 titan-config --checkpoint.enable --get checkpoint.enable
	assert_output "true"
	run -0 titan-config --checkpoint.enable false --get checkpoint.enable
	assert_output "false"
}

# -------------------------------------------------------------- round trips

@test "every preset: print, re-read, print again gives the same text" {
	for p in configs/*.yaml; do
		titan-config -c "$p" > "$BATS_TEST_TMPDIR/a.yaml"
		titan-config -c "$BATS_TEST_TMPDIR/a.yaml" > "$BATS_TEST_TMPDIR/b.yaml"
		diff -u "$BATS_TEST_TMPDIR/a.yaml" "$BATS_TEST_TMPDIR/b.yaml"
	done
}

@test "--non-default YAML re-reads to the same config" {
	titan-config -c configs/llama3_70b.yaml > "$BATS_TEST_TMPDIR/full.yaml"
	titan-config -c configs/llama3_70b.yaml --non-default > "$BATS_TEST_TMPDIR/small.yaml"
	titan-config -c "$BATS_TEST_TMPDIR/small.yaml" > "$BATS_TEST_TMPDIR/again.yaml"
	diff -u "$BATS_TEST_TMPDIR/full.yaml" "$BATS_TEST_TMPDIR/again.yaml"
	[ "$(wc -l < "$BATS_TEST_TMPDIR/small.yaml")" -lt "$(wc -l < "$BATS_TEST_TMPDIR/full.yaml")" ]
}

@test "--json is valid JSON with typed values" {
	run -0 titan-config -c configs/llama3_debug.yaml --json
	echo "$output" | /usr/bin/python3 -c '
import json, sys
c = json.load(sys.stdin)
assert c["training"]["seq_len"] == 2048, c["training"]
assert c["optimizer"]["lr"] == 8e-4
assert c["checkpoint"]["enable"] in (True, False)
assert isinstance(c["checkpoint"]["exclude_from_loading"], list)
assert c["lr_scheduler"]["decay_ratio"] == 0.8
'
}

@test "every preset is valid (--check prints nothing)" {
	for p in configs/llama3_debug.yaml configs/llama3_8b.yaml configs/llama3_70b.yaml configs/llama3_405b.yaml; do
		run -0 --separate-stderr titan-config -c "$p" --check
		[ -z "$output" ] && [ -z "$stderr" ]
	done
}

@test "presets keep torchtitan's TensorBoard keys; no doc says TensorBoard has no counterpart" {
	# the presets' torchtitan files: tests/data/torchtitan (8B, debug);
	# 70B and 405B set TensorBoard as 8B does
	for pair in llama3_8b:llama3_8b llama3_debug:debug_model; do
		for k in metrics.enable_tensorboard metrics.save_tb_folder; do
			run -0 titan-config -c "configs/${pair%%:*}.yaml" --get "$k"
			preset=$output
			run -0 titan-config -c "tests/data/torchtitan/${pair#*:}.toml" --get "$k"
			[ "$preset" = "$output" ] || fail "${pair%%:*}: $k is '$preset', torchtitan's '$output'"
		done
	done
	for p in configs/llama3_70b.yaml configs/llama3_405b.yaml; do
		run -0 titan-config -c "$p" --get metrics.enable_tensorboard
		assert_output true
	done
	run -1 grep -il 'TensorBoard[^.]*no titan' configs/*.yaml docs/config.md
	run -1 grep -n '(TensorBoard, W&B' docs/config.md
}

@test "--summary gives torchtitan's parameter counts and FLOPs/token" {
	run -0 titan-config -c configs/llama3_8b.yaml --summary
	assert_output --partial "8030261248 total (8.030 B)"
	assert_output --partial "flops/token:  5.791e+10 at seq_len 8192"
	run -0 titan-config -c configs/llama3_debug.yaml --summary
	assert_output --partial "6163712 total"
	assert_output --partial "7.159e+07 at seq_len 2048"
}

@test "--help-config documents every key" {
	run -0 titan-config --help-config
	for k in training.steps optimizer.lr parallelism.tensor_parallel_degree \
		 checkpoint.async_mode activation_checkpoint.mode metrics.log_freq \
		 profiling.profile_freq comm.init_timeout_seconds validation.freq job.dump_folder \
		 model.flavor lr_scheduler.warmup_steps; do
		[[ $output == *"${k#*.}"* ]] || fail "--help-config does not mention $k"
	done
}

# ------------------------------------------------------------------ output

@test "-o writes the file atomically" {
	run -0 titan-config -c configs/llama3_8b.yaml -o "$BATS_TEST_TMPDIR/out.yaml"
	[ -z "$output" ]
	assert_file_exists "$BATS_TEST_TMPDIR/out.yaml"
	run -0 titan-config -c "$BATS_TEST_TMPDIR/out.yaml" --get optimizer.lr
	assert_output "0.0003"
	run -1 --separate-stderr titan-config -o "$BATS_TEST_TMPDIR/no/such/dir/out.yaml"
	[[ $stderr == *"no/such/dir/out.yaml"* ]]
	assert_file_not_exists "$BATS_TEST_TMPDIR/no/such/dir/out.yaml"
}

@test "a full disk on stdout is an error, not silent truncation" {
	[ -w /dev/full ] || skip "/dev/full not available"
	run -1 --separate-stderr bash -c 'titan-config > /dev/full'
	[[ $stderr == *"cannot write to standard output"* ]]
}

@test "--get of an unknown key suggests one" {
	run -2 --separate-stderr titan-config --get training.setps
	[[ $stderr == *"did you mean 'training.steps'"* ]]
}

@test "an unknown section on the command line gets the same 'did you mean' as in YAML" {
	run -2 --separate-stderr titan-config --trainng.steps=3 --check
	[[ $stderr == *"command line: trainng.steps: unknown section 'trainng' (did you mean 'training'?)"* ]]
	run -2 --separate-stderr titan-train --config configs/llama3_debug.yaml --optimiser.lr=1
	[[ $stderr == *"unknown section 'optimiser' (did you mean 'optimizer'?)"* ]]
}
