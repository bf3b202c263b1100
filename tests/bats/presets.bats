#!/usr/bin/env bats
# Presets that run (issue 27): every configs/*.yaml trains one step with
# titan-train under tiny overrides (model dims, batch, seq_len, steps, and
# the TP degree cut to the 2 ranks of a test), or says at its top which
# options to change to run it today, and runs with exactly those changed.

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus g 600 768 4
}

setup() {
	load helpers
	cd "$BATS_TEST_TMPDIR"
	P=$TITAN_SRCDIR/configs
	# the tiny overrides: a custom model of the preset's shape (GQA), tiny
	# batches and one step; the data and tokenizer of the test
	TINY=(--model.flavor=custom --model.dim=32 --model.n_layers=2 --model.n_heads=4
		--model.n_kv_heads=2 --model.vocab_size=768 --model.multiple_of=32
		--model.hf_assets_path= --model.tokenizer_path="$DATA/tok.tiktoken"
		--training.dataset_path="$DATA/shards" --training.local_batch_size=2
		--training.seq_len=16 --training.steps=1 --job.dump_folder=out)
}

# titan-train PRESET [OVERRIDE...]: one step on one rank
train1() {
	run -0 --separate-stderr timeout 120 titan-train --config "$P/$1" "${TINY[@]}" "${@:2}"
	refute_crash
	[[ $output == *"step:  1 "* ]] || fail "$1: no step 1: $stderr"
}

# the same on 2 ranks
train2() {
	run -0 --separate-stderr timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 \
		titan-train --config "$P/$1" "${TINY[@]}" "${@:2}"
	refute_crash
	[[ $output == *"step:  1 "* ]] || fail "$1: no step 1: $stderr"
}

@test "every preset is covered here" {
	run -0 ls "$P"
	[ "$output" = "$(printf '%s\n' llama3_405b.yaml llama3_70b.yaml llama3_8b.yaml llama3_debug.yaml)" ] ||
		fail "presets changed: add a test for each ($output)"
}

@test "llama3_debug.yaml runs as written" {
	train1 llama3_debug.yaml
}

@test "llama3_8b.yaml runs as written (profiling and TensorBoard on)" {
	train1 llama3_8b.yaml
	[ -n "$(find out/tb -name 'events.out.tfevents.*')" ] || fail "no TensorBoard events: $(find out)"
}

@test "llama3_70b.yaml runs with its tensor parallelism cut to 2 ranks" {
	skip_without_mpi
	train2 llama3_70b.yaml --parallelism.tensor_parallel_degree=2
	[[ $stderr == *"Parallelism: TP 2"* ]] || fail "$stderr"
}

@test "llama3_405b.yaml: titan-train refuses what its header names, and runs with them changed" {
	skip_without_mpi
	# the two options the header says to change, as the header spells them
	mapfile -t change < <(sed -n 's/^#   \(--[a-z_.]*=[a-z]*\).*/\1/p' "$P/llama3_405b.yaml")
	[ "${change[*]}" = "--model.converters= --parallelism.enable_async_tensor_parallel=false" ] ||
		fail "the header's options: ${change[*]}"
	# as written: each one refused, exit 2, naming the key
	run -2 --separate-stderr timeout 120 titan-train --config "$P/llama3_405b.yaml" "${TINY[@]}" \
		--parallelism.tensor_parallel_degree=1
	[[ $stderr == *"model.converters: 'float8'"* ]] || fail "$stderr"
	run -2 --separate-stderr timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 \
		titan-train --config "$P/llama3_405b.yaml" "${TINY[@]}" \
		--parallelism.tensor_parallel_degree=2 --model.converters=
	[[ $stderr == *"parallelism.enable_async_tensor_parallel"* ]] || fail "$stderr"
	# with them changed: 2 ranks, TP 2
	train2 llama3_405b.yaml --parallelism.tensor_parallel_degree=2 "${change[@]}"
	[[ $stderr == *"Parallelism: TP 2"* ]] || fail "$stderr"
	# titan-estimate takes it as written
	run -0 --separate-stderr titan-estimate --config "$P/llama3_405b.yaml" --json
	[[ $output == *'"float8":true'* && $output == *'"tp_exposed_s":0,'* ]] || fail "$output"
}
