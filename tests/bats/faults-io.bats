#!/usr/bin/env bats
# Files in the way (issue 21): a symbolic link planted in titan-train's
# dump folder is replaced, never written through; a FIFO in place of an
# input that is read with seeks or mapped is refused at once (exit 1), not
# waited on forever; a shard truncated in place while training reads it is
# an error naming the shard and the offset (exit 1), not a SIGBUS; ranks
# started with different configs are refused (exit 2) before they train.

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
YAML
	titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable --checkpoint.last_save_model_only=false \
		--job.dump_folder="$DATA/run" > /dev/null
	titan-ckpt-convert --to hf "$DATA/run/checkpoint/step-2.h5" "$DATA/hf" > /dev/null
}

setup() {
	load helpers
	PATH=${TITAN_BIN:-$BATS_TEST_DIRNAME/../../bin}:$PATH
	cd "$BATS_TEST_TMPDIR" || return 1
}

# ------------------------------------------------------------ symbolic links

@test "titan-train replaces symbolic links at DUMP/metrics.jsonl, .titan-train.lock and the memory trace, never writes through them" {
	mkdir -p dump/memory_snapshot
	for f in metrics lock memtrace; do printf 'precious %s\n' "$f" > "outside-$f"; done
	ln -s "$PWD/outside-metrics" dump/metrics.jsonl
	ln -s "$PWD/outside-lock" dump/.titan-train.lock
	ln -s "$PWD/outside-memtrace" dump/memory_snapshot/rank0.memtrace
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=dump \
		--profiling.enable_memory_snapshot
	for f in metrics lock memtrace; do
		[ "$(cat "outside-$f")" = "precious $f" ]
	done
	[ ! -L dump/metrics.jsonl ] && [ -f dump/metrics.jsonl ]
	[ ! -L dump/.titan-train.lock ] && [ -f dump/.titan-train.lock ]
	[ ! -L dump/memory_snapshot/rank0.memtrace ]
	grep -q '"step":2' dump/metrics.jsonl
	[[ $stderr == *"'dump/metrics.jsonl' was a symbolic link: replaced by a regular file"* ]]
}

@test "a resumed titan-train appends to metrics.jsonl, but not through a symbolic link" {
	cp -r "$DATA/run" run
	printf 'precious\n' > outside
	rm -f run/metrics.jsonl
	ln -s "$PWD/outside" run/metrics.jsonl
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --checkpoint.enable \
		--job.dump_folder=run --training.steps=3
	[ "$(cat outside)" = precious ]
	[ ! -L run/metrics.jsonl ]
	grep -q '"step":3' run/metrics.jsonl
}

# ------------------------------------------------------------ FIFOs

@test "a FIFO in place of a shard: titan-train and titan-shard exit 1 at once naming it" {
	cp -r "$DATA/shards" shards
	rm shards/train-00000.tok
	mkfifo shards/train-00000.tok
	run -1 --separate-stderr timeout 10 titan-train --config "$DATA/tiny.yaml" \
		--training.dataset_path=shards --job.dump_folder=dump
	[[ $stderr == *"shards/train-00000.tok"*"not a regular file (a FIFO)"* ]]
	refute_crash
	run -1 --separate-stderr timeout 10 titan-shard info shards/train-00000.tok
	[[ $stderr == *"not a regular file (a FIFO)"* ]]
}

@test "a FIFO in place of a checkpoint: titan-ckpt-convert, titan-generate and a resume exit 1 at once" {
	mkfifo fifo.h5
	run -1 --separate-stderr timeout 10 titan-ckpt-convert info fifo.h5
	[[ $stderr == *"'fifo.h5': not a regular file (a FIFO)"* ]]
	run -1 --separate-stderr timeout 10 titan-generate -t "$DATA/tok.tiktoken" fifo.h5 "In the"
	[[ $stderr == *"not a regular file (a FIFO)"* ]]
	mkdir -p dump/checkpoint
	mkfifo dump/checkpoint/step-5.h5
	run -1 --separate-stderr timeout 10 titan-train --config "$DATA/tiny.yaml" \
		--checkpoint.enable --job.dump_folder=dump --training.steps=6 --checkpoint.load_step=5
	[[ $stderr == *"step-5.h5': not a regular file (a FIFO)"* ]]
	refute_crash
}

@test "a FIFO in place of a tokenizer: titan-tokenize, titan-shard and titan-generate exit 1 at once" {
	mkfifo tok.tiktoken
	run -1 --separate-stderr timeout 10 titan-tokenize -t tok.tiktoken "$DATA/text.txt"
	[[ $stderr == *"'tok.tiktoken': not a regular file (a FIFO)"* ]]
	run -1 --separate-stderr timeout 10 titan-shard -t tok.tiktoken --out s < "$DATA/text.tok"
	[[ $stderr == *"not a regular file (a FIFO)"* ]]
	run -1 --separate-stderr timeout 10 titan-generate -t tok.tiktoken \
		"$DATA/run/checkpoint/step-2.h5" "In the"
	[[ $stderr == *"not a regular file (a FIFO)"* ]]
	# standard input stays a stream: '-' is copied to a temporary file
	run -0 --separate-stderr timeout 10 titan-tokenize -t - --doc-per-line <(echo x) < "$DATA/tok.tiktoken"
}

@test "a FIFO in place of safetensors, config.json or a GGUF file: titan-ckpt-convert exits 1 at once" {
	cp -r "$DATA/hf" hf
	rm hf/model.safetensors
	mkfifo hf/model.safetensors
	run -1 --separate-stderr timeout 10 titan-ckpt-convert --from hf hf out.h5
	[[ $stderr == *"model.safetensors': not a regular file (a FIFO)"* ]]
	cp -r "$DATA/hf" hf2
	rm hf2/config.json
	mkfifo hf2/config.json
	run -1 --separate-stderr timeout 10 titan-ckpt-convert --from hf hf2 out.h5
	[[ $stderr == *"config.json': not a regular file (a FIFO)"* ]]
	mkfifo x.gguf
	run -1 --separate-stderr timeout 10 titan-ckpt-convert info x.gguf
	[[ $stderr == *"'x.gguf': not a regular file (a FIFO)"* ]]
	[ ! -e out.h5 ]
}

# ------------------------------------------------------------ SIGBUS

@test "a shard truncated in place during training: exit 1 naming the shard and the offset, not SIGBUS" {
	cp -r "$DATA/shards" shards
	titan-train --config "$DATA/tiny.yaml" --training.dataset_path=shards \
		--job.dump_folder=dump --training.steps=1000000 --metrics.log_freq=1 \
		2> err &
	pid=$!
	# the shards are mapped once the first step is logged; stop the run,
	# cut every shard to nothing, let it go on: its next read faults
	timeout 60 bash -c 'until grep -q "\"step\":1," dump/metrics.jsonl 2>/dev/null; do sleep 0.05; done'
	kill -STOP "$pid"
	for f in shards/train-*.tok; do truncate -s 0 "$f"; done
	kill -CONT "$pid"
	status=0
	timeout 60 tail --pid="$pid" -f /dev/null || true
	wait "$pid" || status=$?
	[ "$status" -eq 1 ] || { cat err; false; }
	grep -q "titan-train: error: .*shards/train-0000[0-9].tok': cannot read byte offset [0-9]*: the file is 0 bytes now" err
}

# ------------------------------------------------------------ configs of the ranks

@test "ranks started with different configs: exit 2 on every rank, naming the rank and the key" {
	skip_without_mpi
	local t="env OMP_NUM_THREADS=1 titan-train -q --config $DATA/tiny.yaml --job.dump_folder=d"
	run -2 --separate-stderr timeout -k 5 120 mpiexec -n 1 $t : -n 1 $t --model.dim=64
	[[ $stderr == *"[rank0]: titan-train: error: the ranks were started with different configs: model.dim is 64 on rank 1 and 32 on rank 0"* ]]
	[[ $stderr == *"[rank1]: titan-train: error: the ranks were started with different configs: model.dim is 64 on rank 1 and 32 on rank 0"* ]]
	[ ! -e d/checkpoint ] && [ ! -e d/metrics.jsonl ]
	# the same config on both: it trains
	run -0 --separate-stderr timeout -k 5 120 mpiexec -n 2 $t
}

@test "--config - on several ranks: rank 0 reads standard input and sends it to the others" {
	skip_without_mpi
	# standard input reaches rank 0 only: rank 1 waited on its own forever
	run -0 --separate-stderr timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 \
		titan-train -q --config - --job.dump_folder=d < "$DATA/tiny.yaml"
	grep -q '"step":2' d/metrics.jsonl
	# its temporary copies are gone
	run -1 compgen -G "${TMPDIR:-/tmp}/titan-train-config.*"
}
