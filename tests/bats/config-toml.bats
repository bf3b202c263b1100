#!/usr/bin/env bats
# torchtitan's TOML job files (issue 27): every tool that takes --config
# reads a .toml file as torchtitan's job file (lib/config/toml.c), with
# torchtitan's names mapped or refused with titan's, and `titan-config
# --from toml FILE` prints it as titan's YAML.  The fixtures are torchtitan's
# own llama3 debug_model.toml and llama3_8b.toml (tests/data/torchtitan).

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus g 600 768 4
}

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	TT=$TITAN_SRCDIR/tests/data/torchtitan
}

@test "torchtitan's debug_model.toml loads with its values" {
	run -0 --separate-stderr titan-config --config "$TT/debug_model.toml" --non-default
	[ -z "$stderr" ] || fail "$stderr"
	assert_line '  description: "Llama 3 debug training"'
	assert_line '  hf_assets_path: "./tests/assets/tokenizer"'
	assert_line '  warmup_steps: 2'
	assert_line '  decay_ratio: 0.8'
	assert_line '  steps: 10'
	assert_line '  pipeline_parallel_schedule: "Interleaved1F1B"'
	assert_line '  last_save_model_only: false'
	assert_line '  log_freq: 1'
	assert_line '  save_traces_folder: "profile_trace"'
	assert_line '  freq: 5'
	# values equal to titan's defaults are read too
	run -0 titan-config --config "$TT/debug_model.toml" --get training.seq_len
	assert_output 2048
	run -0 titan-config --config "$TT/debug_model.toml" --get activation_checkpoint.selective_ac_option
	assert_output 2
}

@test "torchtitan's llama3_8b.toml loads with its values" {
	for kv in model.flavor=8B optimizer.lr=0.0003 training.seq_len=8192 \
		training.local_batch_size=1 training.steps=1000 training.dataset=c4 \
		activation_checkpoint.selective_ac_option=op metrics.enable_tensorboard=true \
		profiling.enable_profiling=true profiling.profile_freq=100 \
		checkpoint.last_save_model_only=true validation.steps=1200; do
		run -0 titan-config --config "$TT/llama3_8b.toml" --get "${kv%%=*}"
		[ "$output" = "${kv#*=}" ] || fail "${kv%%=*}: '$output', expected '${kv#*=}'"
	done
}

@test "--from toml FILE prints YAML that reads back to the same config" {
	cp "$TT/debug_model.toml" "$BATS_TEST_TMPDIR/job.txt"
	run -0 --separate-stderr titan-config --from toml "$BATS_TEST_TMPDIR/job.txt" \
		-o "$BATS_TEST_TMPDIR/job.yaml"
	run -0 titan-config --config "$BATS_TEST_TMPDIR/job.yaml" --json
	yaml_json=$output
	run -0 titan-config --config "$TT/debug_model.toml" --json
	[ "$output" = "$yaml_json" ] || fail "TOML and its YAML differ"
	# standard input, with an override after the file's values
	run -0 titan-config --from toml - --training.steps=3 --get training.steps < "$TT/debug_model.toml"
	assert_output 3
	# without --from the same text is YAML, and not a YAML config
	run -2 --separate-stderr titan-config --config "$BATS_TEST_TMPDIR/job.txt"
	refute_crash
	run -2 --separate-stderr titan-config --from ini "$TT/debug_model.toml"
	[[ $stderr == *"--from: 'ini' is not a format (yaml, toml)"* ]] || fail "$stderr"
	run -2 --separate-stderr titan-config --from toml
	[[ $stderr == *"--from toml: which file?"* ]] || fail "$stderr"
}

@test "torchtitan's names: debug.seed is training.seed, profiler is profiling" {
	cat > "$BATS_TEST_TMPDIR/j.toml" <<'TOML'
[debug]
seed = 1234
deterministic = true

[profiler]
profile_freq = 20

[compile]
enable = false
components = ["model", "loss"]
TOML
	run -0 titan-config --config "$BATS_TEST_TMPDIR/j.toml" --get training.seed
	assert_output 1234
	run -0 titan-config --config "$BATS_TEST_TMPDIR/j.toml" --get training.deterministic
	assert_output true
	run -0 titan-config --config "$BATS_TEST_TMPDIR/j.toml" --get profiling.profile_freq
	assert_output 20
}

@test "YAML and --section.key take titan's names, and name it for torchtitan's" {
	printf 'debug:\n  seed: 3\n' > "$BATS_TEST_TMPDIR/j.yaml"
	run -2 --separate-stderr titan-config --config "$BATS_TEST_TMPDIR/j.yaml"
	[[ $stderr == *"j.yaml:2:3: debug.seed: torchtitan's name: titan's is 'training.seed'"* ]] || fail "$stderr"
	run -2 --separate-stderr titan-config --profiler.profile_freq=3
	[[ $stderr == *"command line: profiler.profile_freq: torchtitan's name: titan's is 'profiling.profile_freq'"* ]] || fail "$stderr"
}

@test "a torchtitan key titan cannot honour is refused (2) with titan's way, FILE:LINE:COL" {
	f=$BATS_TEST_TMPDIR/j.toml
	printf '[job]\ndescription = "x"\n\n[compile]\nenable = true\n' > "$f"
	run -2 --separate-stderr titan-config --config "$f"
	refute_crash
	[[ $stderr == "titan-config: error: $f:5:10: compile.enable: torchtitan's key has no titan counterpart (titan has no torch.compile"* ]] || fail "$stderr"
	printf '[training]\nnum_tokens_per_train_step = 65536\n' > "$f"
	run -2 --separate-stderr titan-config --config "$f"
	[[ $stderr == *"$f:2:29: training.num_tokens_per_train_step: torchtitan's key has no titan counterpart: titan counts sequences: set training.global_batch_size"* ]] || fail "$stderr"
	printf '[parallelism]\nmodule_fqns_per_model_part = [["layers.0"], ["layers.1"]]\n' > "$f"
	run -2 --separate-stderr titan-config --config "$f"
	[[ $stderr == *"parallelism.module_fqns_per_model_part: "*"parallelism.pipeline_parallel_split_points"* ]] || fail "$stderr"
	printf '[wandb]\nproject = "x"\n' > "$f"
	run -2 --separate-stderr titan-config --config "$f"
	[[ $stderr == *"$f:2:11: wandb.project: unknown section [wandb]: neither titan nor torchtitan has it"* ]] || fail "$stderr"
	printf '[training]\nsteps = 10\nsteps = 20\n' > "$f"
	run -2 --separate-stderr titan-config --config "$f"
	[[ $stderr == *"$f:3:1: training.steps: duplicate key (first at line 2, column 1)"* ]] || fail "$stderr"
	printf '[training]\nsteps = "10"\n' > "$f"
	run -2 --separate-stderr titan-config --config "$f"
	[[ $stderr == *"$f:2:9: training.steps: expected an integer, got the string \"10\""* ]] || fail "$stderr"
	# torchtitan's 405B preset asks for torch.compile: refused, not ignored
	cat > "$f" <<'TOML'
[compile]
enable=true
components = ["model", "loss"]
TOML
	run -2 --separate-stderr titan-config --config "$f"
	[[ $stderr == *"$f:2:8: compile.enable:"* ]] || fail "$stderr"
}

@test "titan-estimate and titan-train take a .toml config" {
	run -0 --separate-stderr titan-estimate --config "$TT/llama3_8b.toml" --json
	[[ $output == *'"seq_len"'* || $output == *'8192'* ]] || fail "$output"
	cd "$BATS_TEST_TMPDIR"
	run -0 --separate-stderr titan-train --config "$TT/debug_model.toml" \
		--model.hf_assets_path= --model.tokenizer_path="$DATA/tok.tiktoken" \
		--model.flavor=custom --model.dim=32 --model.n_layers=2 --model.n_heads=4 \
		--model.vocab_size=768 --model.multiple_of=32 \
		--training.dataset_path="$DATA/shards" --training.local_batch_size=2 \
		--training.seq_len=16 --training.steps=1 --validation.local_batch_size=2 \
		--validation.seq_len=16 --job.dump_folder=out
	refute_crash
	[[ $output == *"step:  1 "* ]] || fail "$output"
}
