#!/usr/bin/env bats
# Faults a user meets (issue 15): a full disk under checkpoints, corrupted
# shards, a run of non-finite steps.  Each must end with a clear message and
# a non-zero exit, never a crash, a silent wrong result or lost earlier work.

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus --bible genesis 4000 768 40
	tiny_yaml "$DATA/tiny.yaml" 768 64 2 4 2 <<YAML
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 64
  steps: 4
metrics:
  log_freq: 1
  peak_flops: 1.0e+11
checkpoint:
  interval: 2
  last_save_model_only: false
YAML
}

setup() {
	load helpers
	cd "$BATS_TEST_TMPDIR" || return 1
}

teardown() {
	if [ -n "${FS:-}" ] && mountpoint -q "$FS"; then
		umount "$FS" || umount -l "$FS"
	fi
}

# small_fs SIZE: a tmpfs of SIZE at $FS (skips where mounting is not allowed)
small_fs() {
	[ "$(id -u)" -eq 0 ] || skip "mounting a small tmpfs needs root"
	FS=$BATS_TEST_TMPDIR/fs
	mkdir -p "$FS"
	mount -t tmpfs -o "size=$1" tmpfs "$FS" || skip "cannot mount a tmpfs here"
}

@test "full disk: the checkpoint fails with the reason and exit 1, no crash, the earlier step intact (sync and async)" {
	# one full checkpoint of this model is 2.4 MB: step 2 fits, step 4 does not
	small_fs 3500k
	for mode in disabled async; do
		run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable \
			--checkpoint.async_mode=$mode --job.dump_folder="$FS/$mode"
		refute_crash
		[[ $stderr == *"step-4.h5.tmp."*"(HDF5: No space left on device)"* ]]
		[[ $stderr != *"time ="* ]] # not HDF5's raw driver message
		assert_file_exists "$FS/$mode/checkpoint/step-2.h5"
		assert_file_not_exists "$FS/$mode/checkpoint/step-4.h5"
		[ -z "$(compgen -G "$FS/$mode/checkpoint/*.tmp.*" || true)" ]
		run -0 titan-ckpt-convert info "$FS/$mode/checkpoint"
		assert_line --regexp 'step +2'
		rm -rf "${FS:?}/$mode"
	done
}

@test "full disk: titan-ckpt-convert fails with the reason and exit 1, no crash, no partial output" {
	titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable --training.steps=2 --job.dump_folder=run
	small_fs 1m
	run -1 --separate-stderr titan-ckpt-convert run/checkpoint/step-2.h5 "$FS/copy.h5"
	refute_crash
	[[ $stderr == *"No space left on device"* ]]
	run ls -A "$FS"
	assert_output ""
}

@test "a corrupted shard payload stops titan-train naming the shard, before it trains on it" {
	cp -r "$DATA/shards" bad
	f=bad/train-00000.tok
	# flip one byte in the middle of the payload (the header's CRC32C covers it)
	off=$(($(stat -c %s "$f") / 2))
	b=$(od -An -tu1 -j "$off" -N1 "$f" | tr -d ' ')
	printf "$(printf '\\%03o' $(((b + 1) % 256)))" | dd of="$f" bs=1 seek="$off" conv=notrunc status=none
	run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --training.dataset_path=bad \
		--job.dump_folder=out
	refute_crash
	[[ $stderr == *"bad/train-00000.tok': payload checksum mismatch"*"the shard is corrupt"* ]]
	run -1 titan-shard verify bad
	# the intact shards train
	run -0 titan-train -q --config "$DATA/tiny.yaml" --training.steps=1 --job.dump_folder=ok
}

@test "training.skip_nonfinite gives up after max_consecutive_nonfinite steps, exit 1, and never checkpoints them" {
	# lr 1e30: step 1 is finite, every later step is NaN
	run -1 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.steps=40 \
		--training.skip_nonfinite --training.max_consecutive_nonfinite=5 --optimizer.lr=1e30 \
		--checkpoint.enable --checkpoint.interval=3 --job.dump_folder=nf
	refute_crash
	[[ $stderr == *"step 6: loss "*"5 non-finite steps in a row (training.max_consecutive_nonfinite); stopping"* ]]
	[[ $stderr == *"step 3: no checkpoint, the loss is not finite"* ]]
	[ -z "$(compgen -G 'nf/checkpoint/step-*' || true)" ]
	# a finite run is untouched by the key
	run -0 titan-train -q --config "$DATA/tiny.yaml" --training.skip_nonfinite \
		--training.max_consecutive_nonfinite=1 --job.dump_folder=fine
}

@test "full disk under metrics.jsonl: exit 1 naming the file, the file ends at its last complete row" {
	small_fs 12k # a page for the folder's lock file, two for metrics
	run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --training.steps=60 \
		--checkpoint.enable=false --job.dump_folder="$FS/m"
	refute_crash
	[[ $stderr == *"cannot write metrics to '$FS/m/metrics.jsonl': No space left on device (the file ends at the last complete row)"* ]]
	# every line is whole JSON
	/usr/bin/python3 -c 'import json, sys; n = sum(1 for l in open(sys.argv[1]) if json.loads(l)); assert n > 1, n' \
		"$FS/m/metrics.jsonl"
}

@test "full disk under the TensorBoard events: exit 1 naming the file, the file ends at its last complete record" {
	/usr/bin/python3 -c 'import google.protobuf' 2>/dev/null || skip "python3-protobuf is not installed"
	small_fs 12k # a page for the folder's lock file, two for the events
	run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --training.steps=60 \
		--checkpoint.enable=false --metrics.save_jsonl_file= --metrics.enable_tensorboard \
		--job.dump_folder="$FS/m"
	refute_crash
	ev=$(compgen -G "$FS/m/tb/*/events.out.tfevents.*")
	[[ $stderr == *"cannot write TensorBoard events to '$ev': No space left on device (the file ends at the last complete event)"* ]]
	# whole records only, both CRCs right, some steps in
	/usr/bin/python3 - "$ev" "$TITAN_SRCDIR/tests/ref" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import tfevents_read as tr
ev = tr.load(sys.argv[1])
assert ev[0].file_version == "brain.Event:2" and len(ev) > 2, len(ev)
assert [e.step for e in ev[1:]] == list(range(1, len(ev))), [e.step for e in ev]
PY
}

@test "SIGTERM stops titan-shard and titan-tokenize -o without leaving temporary files" {
	titan-tokenize -t "$DATA/tok.tiktoken" --doc-per-line "$DATA/genesis.txt" > toks.bin
	mkdir d
	# the input stays open: titan-shard has shards in progress when the signal comes
	{ cat toks.bin; sleep 60; } | titan-shard -q -t "$DATA/tok.tiktoken" --out d --shard-tokens 20000 &
	pid=$!
	timeout 20 bash -c 'until compgen -G "d/.*tmp*" >/dev/null; do sleep 0.1; done'
	kill -TERM "$pid"
	st=0
	wait "$pid" || st=$?
	[ "$st" -eq 143 ]
	run ls -A d
	assert_output ""
	# titan-tokenize -o writes DIR/out.tmp.XXXXXX until done
	mkdir t
	{ cat "$DATA/genesis.txt"; sleep 60; } | titan-tokenize -t "$DATA/tok.tiktoken" --doc-per-line -o t/out.bin - &
	pid=$!
	timeout 20 bash -c 'until compgen -G "t/out.bin.tmp.*" >/dev/null; do sleep 0.1; done'
	kill -TERM "$pid"
	st=0
	wait "$pid" || st=$?
	[ "$st" -eq 143 ]
	run ls -A t
	assert_output ""
}

@test "one titan-train per dump folder: a second one is refused naming the first (flock)" {
	# hold the lock as a running titan-train does
	mkdir -p run
	exec 9> run/.titan-train.lock
	flock -x 9
	echo "pid 4242 on elsewhere" >&9
	run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder=run
	[[ $stderr == *"job.dump_folder 'run' is in use by another titan-train (pid 4242 on elsewhere)"* ]]
	assert_file_not_exists run/metrics.jsonl
	exec 9>&-
	# the lock goes with the process: now it runs
	run -0 titan-train -q --config "$DATA/tiny.yaml" --training.steps=1 --job.dump_folder=run
	run -0 cat run/.titan-train.lock
	assert_output --regexp '^pid [0-9]+ on '
}

@test "torchtitan keys titan-train cannot honour are refused with what to do instead, never ignored" {
	for kv in "--model.converters=float8:needs the CUDA backend" \
		"--training.dtype=bfloat16:need the CUDA backend" \
		"--optimizer.early_step_in_backward=true:set it to false"; do
		run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" "${kv%%:*}" \
			--checkpoint.last_save_model_only=true --job.dump_folder=x
		[[ $stderr == *"${kv#*:}"* ]] || fail "${kv%%:*}: $stderr"
	done
	run -0 titan-train --version
	if titan-train --version | grep -q '+cuda'; then
		assert_line --partial "trains on: cpu, or one GPU per rank (training.device: cuda; auto picks it on one rank)"
	fi
}

@test "a damaged newest checkpoint: resume falls back to the step before it, naming both, and goes on" {
	titan-train -q --config "$DATA/tiny.yaml" --training.steps=6 --checkpoint.enable --job.dump_folder=run
	# the reference: the same folder resumed from step 4 on purpose
	cp -r run ref
	rm ref/checkpoint/step-6.h5
	titan-train -q --config "$DATA/tiny.yaml" --training.steps=8 --checkpoint.enable --job.dump_folder=ref
	: > run/checkpoint/step-6.h5 # a crash left it empty
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.steps=8 \
		--checkpoint.enable --job.dump_folder=run
	[[ $stderr == *"cannot resume from run/checkpoint/step-6.h5 ("*"): falling back to step 4, the newest complete step before it"* ]]
	# steps 5-8 are those of a run resumed from step 4
	[ "$(grep '"step":8,' run/metrics.jsonl | grep -o '"loss":[^,]*')" = \
		"$(grep '"step":8,' ref/metrics.jsonl | grep -o '"loss":[^,]*')" ]
	# nothing older to fall back to: the error says so
	rm run/checkpoint/step-[24].h5 run/checkpoint/step-8.h5
	truncate -s 1000 run/checkpoint/step-6.h5
	run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --training.steps=9 \
		--checkpoint.enable --job.dump_folder=run
	[[ $stderr == *"resuming from step 6: "*"no older complete checkpoint in 'run/checkpoint'"* ]]
	# an explicit checkpoint.load_step never falls back
	titan-train -q --config "$DATA/tiny.yaml" --training.steps=4 --checkpoint.enable --job.dump_folder=x
	: > x/checkpoint/step-4.h5
	run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --training.steps=6 \
		--checkpoint.enable --checkpoint.load_step=4 --job.dump_folder=x
	[[ $stderr == *"checkpoint.load_step 4: "* ]]
}

@test "a damaged newest checkpoint on 2 ranks (FSDP): every rank falls back to the same step" {
	skip_without_mpi
	mpi2() { timeout -k 5 300 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train --config "$DATA/tiny.yaml" \
		--training.local_batch_size=1 --checkpoint.enable "$@"; }
	mpi2 --training.steps=6 --job.dump_folder=run
	truncate -s $(($(stat -c %s run/checkpoint/step-6.h5) / 2)) run/checkpoint/step-6.h5
	run -0 --separate-stderr mpi2 --training.steps=8 --job.dump_folder=run
	[[ $stderr == *"[rank0]:"*"falling back to step 4"* ]]
	[[ $stderr == *"[rank0]:"*"Loaded checkpoint run/checkpoint/step-4.h5 (step 4)"* ]]
	run -0 grep -c '"step":[78],' run/metrics.jsonl
	assert_output 2
}

# flip FILE DATASET [FROM_END]: one bit of DATASET's data in FILE flipped
# (1000 bytes into it, or FROM_END bytes before its end)
flip() {
	/usr/bin/python3 - "$@" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    d = f[sys.argv[2]]
    at = d.id.get_offset() + (d.id.get_storage_size() - int(sys.argv[3]) if len(sys.argv) > 3 else 1000)
with open(sys.argv[1], "r+b") as f:
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x20]))
PY
}

@test "a flipped byte in the newest checkpoint fails its checksum: resume falls back to the step before it, naming both" {
	titan-train -q --config "$DATA/tiny.yaml" --training.steps=6 --checkpoint.enable --job.dump_folder=run
	cp -r run ref
	rm ref/checkpoint/step-6.h5
	titan-train -q --config "$DATA/tiny.yaml" --training.steps=8 --checkpoint.enable --job.dump_folder=ref
	flip run/checkpoint/step-6.h5 model/layers.1.feed_forward.w3.weight
	run -1 --separate-stderr titan-ckpt-convert info --verify run/checkpoint/step-6.h5
	[[ $stderr == *"checksum mismatch in 1 dataset: model/layers.1.feed_forward.w3.weight"* ]]
	# an explicit load_step names the file and the dataset, and stops
	run -1 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --training.steps=8 \
		--checkpoint.enable --checkpoint.load_step=6 --job.dump_folder=run
	[[ $stderr == *"checkpoint.load_step 6: 'run/checkpoint/step-6.h5': model/layers.1.feed_forward.w3.weight: checksum mismatch (crc32c attribute "*"): the file is damaged"* ]]
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.steps=8 \
		--checkpoint.enable --job.dump_folder=run
	[[ $stderr == *"WARNING - cannot resume from run/checkpoint/step-6.h5 ('run/checkpoint/step-6.h5': model/layers.1.feed_forward.w3.weight: checksum mismatch"*"): falling back to step 4, the newest complete step before it"* ]]
	[[ $stderr == *"Loaded checkpoint run/checkpoint/step-4.h5 (step 4)"* ]]
	[ "$(grep '"step":8,' run/metrics.jsonl | grep -o '"loss":[^,]*')" = \
		"$(grep '"step":8,' ref/metrics.jsonl | grep -o '"loss":[^,]*')" ]
	# the steps saved since verify clean
	run -0 titan-ckpt-convert info --verify --no-checksums run/checkpoint/step-8.h5
	assert_line "verify:        63 ok, 0 mismatched, 0 without a checksum"
}

@test "2 ranks (FSDP): the checkpoint verifies clean; a flipped byte in rank 1's rows makes every rank fall back" {
	skip_without_mpi
	mpi2() { timeout -k 5 300 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train --config "$DATA/tiny.yaml" \
		--training.local_batch_size=1 --checkpoint.enable "$@"; }
	mpi2 -q --training.steps=4 --job.dump_folder=run
	# each rank wrote its rows; the attributes are the whole tensors' CRC32C
	for s in 2 4; do
		run -0 titan-ckpt-convert info --verify --no-checksums run/checkpoint/step-$s.h5
		assert_line "verify:        63 ok, 0 mismatched, 0 without a checksum"
	done
	cp run/checkpoint/step-4.h5 clean.h5
	# 8 bytes before the end of exp_avg_sq of w1: rank 1's shard, which
	# rank 0 never reads
	flip run/checkpoint/step-4.h5 optimizer/exp_avg_sq/layers.0.feed_forward.w1.weight 8
	run -0 --separate-stderr mpi2 --training.steps=6 --job.dump_folder=run
	for r in 0 1; do
		[[ $stderr == *"[rank$r]:"*"cannot resume from run/checkpoint/step-4.h5 ('run/checkpoint/step-4.h5': optimizer/exp_avg_sq/layers.0.feed_forward.w1.weight: checksum mismatch"*"falling back to step 2"* ]]
	done
	[[ $stderr == *"[rank0]:"*"Loaded checkpoint run/checkpoint/step-2.h5 (step 2)"* ]]
	# steps 3 and 4 again (from step 2), then 5 and 6
	run -0 grep -c '"step":[34],' run/metrics.jsonl
	assert_output 4
	run -0 grep -c '"step":[56],' run/metrics.jsonl
	assert_output 2
	# the undamaged file resumes on 2 ranks without a word about checksums
	rm -r run/checkpoint/step-[56].h5
	cp clean.h5 run/checkpoint/step-4.h5
	run -0 --separate-stderr mpi2 --training.steps=5 --job.dump_folder=run
	[[ $stderr == *"[rank0]:"*"Loaded checkpoint run/checkpoint/step-4.h5 (step 4)"* ]]
	[[ $stderr != *checksum* ]]
}

@test "a config that is not one: /dev/zero and deep nesting are refused at once; steps below the checkpoint's is an error" {
	run -2 --separate-stderr timeout 20 titan-config --config /dev/zero --check
	[[ $stderr == *"'/dev/zero': larger than 4 MiB: not a job config"* ]]
	/usr/bin/python3 -c 'n = 200000; print("x: " + "[" * n + "]" * n)' > deep.yaml
	run -2 --separate-stderr timeout 20 titan-config --config deep.yaml --check
	[[ $stderr == *"deep.yaml:1:"*"nested deeper than 16 levels"* ]]
	titan-train -q --config "$DATA/tiny.yaml" --training.steps=4 --checkpoint.enable --job.dump_folder=run
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --training.steps=3 \
		--checkpoint.enable --job.dump_folder=run
	[[ $stderr == *"training.steps 3 is below the step of the checkpoint it resumes (4 in 'run/checkpoint')"* ]]
}

@test "titan-shard info on a missing path prints only the error, no empty table" {
	run -1 --separate-stderr titan-shard info /nonexistent
	assert_output ""
	[[ $stderr == *"cannot open '/nonexistent': No such file or directory"* ]]
}

@test "titan-shard verify: a shard renamed to another split is refused" {
	mkdir s
	cp "$DATA/shards/train-00000.tok" s/val-00000.tok
	run -1 --separate-stderr titan-shard verify s/val-00000.tok
	[[ $stderr == *"s/val-00000.tok': the header's split is 'train' but the file name is not 'train-NNNNN.tok'"* ]]
}

@test "titan-shard with another encoding than the stream's: an error, no shards of 0 documents" {
	titan-tokenize -t "$DATA/tok.tiktoken" --doc-per-line "$DATA/genesis.txt" > toks.bin
	run --separate-stderr titan-shard -q -t "$DATA/tok.tiktoken" -e cl100k_base --out s < toks.bin
	[ "$status" -ne 0 ]
	refute_crash
	[[ $stderr == *"hold no end-of-document id 100257: it was made with another tokenizer or encoding"* ]]
	[ -z "$(ls -A s 2>/dev/null)" ]
}

@test "terminal escapes from names and files are shown escaped in errors, not sent to the terminal" {
	run -1 --separate-stderr titan-shard info $'bad\033[31mred'
	[[ $stderr == *"cannot open 'bad\\x1b[31mred'"* ]]
	[[ $stderr != *$'\033'* ]]
}
