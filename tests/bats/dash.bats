#!/usr/bin/env bats
# '-' as standard input or output for every file argument of every tool
# (docs/conventions.md has the table): where it works the result equals the
# named file's; where it cannot (a folder, an HDF5 file read with seeks) a
# usage error says why (exit 2) and nothing named '-' is created; two
# arguments cannot both read standard input.

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus text 2000 600 10
	tiny_yaml "$DATA/tiny.yaml" 768 32 1 2 1 <<YAML
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 32
  steps: 2
metrics:
  log_freq: 1
  peak_flops: 1.0e+11
checkpoint:
  interval: 2
profiling:
  enable_memory_snapshot: true
  enable_profiling: true
  profile_freq: 1
  profiler_warmup: 0
YAML
	titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable --job.dump_folder="$DATA/run" > /dev/null
	titan-estimate --config "$DATA/tiny.yaml" --device cpu --json > "$DATA/est.json"
}

setup() {
	load helpers
	mkdir -p "$BATS_TEST_TMPDIR/w"
	cd "$BATS_TEST_TMPDIR/w" || return 1
}

teardown() {
	# no tool ever makes a file or folder named '-'
	[ ! -e "$BATS_TEST_TMPDIR/w/-" ] || fail "a file named '-' was created"
}

@test "titan-config -o - writes standard output, as without -o" {
	run -0 --separate-stderr titan-config --config "$DATA/tiny.yaml" -o -
	want=$(titan-config --config "$DATA/tiny.yaml")
	[ "$output" = "$want" ]
	run -0 --separate-stderr titan-config --config - < "$DATA/tiny.yaml"
	[ "$output" = "$want" ]
}

@test "titan-memprof compare --estimate - reads titan-estimate --json from a pipe" {
	want=$(titan-memprof compare --estimate "$DATA/est.json" "$DATA/run" | sed "s|estimate $DATA/est.json vs|estimate - vs|")
	run -0 --separate-stderr bash -c 'titan-estimate --config "$DATA/tiny.yaml" --device cpu --json |
		titan-memprof compare --estimate - "$DATA/run"'
	[ "$output" = "$want" ]
	[[ $output == *"estimate - vs"* ]]
	# --metrics -: the MFU of the traces from a metrics.jsonl on standard input
	mkdir only && cp -r "$DATA/run/profile_traces" only/
	run -0 --separate-stderr titan-memprof time only
	assert_line --partial "MFU: - (no metrics.jsonl"
	run -0 --separate-stderr titan-memprof time --metrics - only < "$DATA/run/metrics.jsonl"
	assert_line --regexp '^MFU: .* at a peak of 1e\+11 FLOP/s'
	rm -r only
	# stdin twice: a usage error naming both
	run -2 --separate-stderr titan-memprof compare --estimate - - < "$DATA/est.json"
	[[ $stderr == *"both read standard input ('-')"* ]]
	run -2 --separate-stderr titan-memprof timeline --png - "$DATA/run"
	[[ $stderr == *"--png: '-' (standard input/output) cannot be used"* ]]
}

@test "--tokenizer - reads the tokenizer from standard input (tokenize, shard, generate); not when the data comes from there too" {
	want=$(titan-tokenize -t "$DATA/tok.tiktoken" --format text "$DATA/text.txt" | od -An -tx1 | md5sum)
	run -0 --separate-stderr bash -c 'titan-tokenize -t - --format text "$DATA/text.txt" < "$DATA/tok.tiktoken" | od -An -tx1 | md5sum'
	[ "$output" = "$want" ]
	run -2 --separate-stderr titan-tokenize -t - --format text < "$DATA/tok.tiktoken"
	[[ $stderr == *"the input and --tokenizer both read standard input"* ]]
	run -0 --separate-stderr titan-shard -q -t - --val-docs 10 --out sh "$DATA/text.tok" < "$DATA/tok.tiktoken"
	cmp sh/train-00000.tok "$DATA/shards/train-00000.tok"
	cmp sh/val-00000.tok "$DATA/shards/val-00000.tok"
	run -2 --separate-stderr titan-shard -t - --out sh2 < "$DATA/tok.tiktoken"
	[[ $stderr == *"the token stream and --tokenizer both read standard input"* ]]
	run -0 --separate-stderr titan-generate -q -n 4 --temperature 0 -t "$DATA/tok.tiktoken" "$DATA/run/checkpoint/step-2.h5" In
	want=$output
	run -0 --separate-stderr titan-generate -q -n 4 --temperature 0 -t - "$DATA/run/checkpoint/step-2.h5" In < "$DATA/tok.tiktoken"
	[ "$output" = "$want" ]
	run -2 --separate-stderr titan-generate -t - "$DATA/run/checkpoint/step-2.h5" < "$DATA/tok.tiktoken"
	[[ $stderr == *"the prompt and --tokenizer both read standard input"* ]]
	# the temporary copy is gone
	[ -z "$(find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'titan-stdin.*' -newer "$DATA/est.json" 2>/dev/null)" ]
}

@test "'-' where it cannot work: folders and HDF5 files are refused with the reason (2)" {
	ck=$DATA/run/checkpoint/step-2.h5
	run -2 --separate-stderr titan-shard -q -t "$DATA/tok.tiktoken" --out - "$DATA/text.tok"
	[[ $stderr == *"--out: '-' (standard input/output) cannot be used: it is a folder of shards (a file named '-' is ./-)"* ]]
	run -2 --separate-stderr titan-shard info - < "$DATA/shards/train-00000.tok"
	[[ $stderr == *"info: '-' (standard input/output) cannot be used: a shard is mapped"* ]]
	run -2 --separate-stderr titan-shard verify -
	run -2 --separate-stderr titan-ckpt-convert info - < "$ck"
	[[ $stderr == *"read with seeks"* ]]
	run -2 --separate-stderr titan-ckpt-convert "$ck" -
	[[ $stderr == *"the output: '-' (standard input/output) cannot be used: an HDF5 checkpoint"* ]]
	run -2 --separate-stderr titan-ckpt-convert - out.h5 < "$ck"
	run -2 --separate-stderr titan-ckpt-convert --to hf "$ck" -
	[[ $stderr == *"OUTDIR: '-'"*"it is a folder"* ]]
	run -2 --separate-stderr titan-ckpt-convert --to hf --tokenizer - "$ck" hf < "$DATA/tok.tiktoken"
	[[ $stderr == *"--to hf copies the file by its name"* ]]
	run -2 --separate-stderr titan-ckpt-convert --from hf - out.h5
	run -2 --separate-stderr titan-generate -t "$DATA/tok.tiktoken" - hello < "$ck"
	[[ $stderr == *"MODEL: '-'"* ]]
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder=-
	[[ $stderr == *"job.dump_folder: '-'"*"it is the run's folder"* ]]
	[ -z "$(ls -A)" ]
}

@test "'-' for a GGUF export is standard output, equal to the file" {
	titan-ckpt-convert -q --to gguf "$DATA/run/checkpoint/step-2.h5" m.gguf
	run -0 --separate-stderr bash -c 'titan-ckpt-convert -q --to gguf "$DATA/run/checkpoint/step-2.h5" - | cmp - m.gguf'
	# and a tokenizer for its metadata from standard input
	titan-ckpt-convert -q --to gguf --tokenizer "$DATA/tok.tiktoken" "$DATA/run/checkpoint/step-2.h5" t.gguf
	titan-ckpt-convert -q --to gguf --tokenizer - "$DATA/run/checkpoint/step-2.h5" t2.gguf < "$DATA/tok.tiktoken"
	cmp t.gguf t2.gguf
}
