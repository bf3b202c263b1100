#!/usr/bin/env bats
# Checkpoint writing, pruning and resume under faults (issue 21): a full disk
# under a multi-rank write, keep_latest_k after a rewind (load_step), the
# train timeout of a resumed run, temporaries of killed writes.  Each ends
# with a clear message and the right exit status, promptly, and loses none
# of the run's own checkpoints.

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus genesis 4000 768 40
	# one full checkpoint of this model is 2.4 MB, a model-only one 0.8 MB
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
  enable: true
  interval: 2
  last_save_model_only: false
activation_checkpoint:
  mode: none
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

# mpi N ARGS...: titan-train on N ranks, one thread each; a hang ends in
# status 124 after 60 s instead of blocking the suite
mpi() {
	local n=$1
	shift
	timeout -k 5 60 mpiexec -n "$n" env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/tiny.yaml" "$@"
}

@test "full disk on 2 ranks (sync and async): both exit 1 at once naming the file, no temporary left, the earlier step intact and resumable" {
	skip_without_mpi
	small_fs 3500k
	for mode in disabled async; do
		local d=$FS/$mode t0=$SECONDS
		# step 2 fits, step 4 does not; the comm timeouts are 20 s
		run -1 --separate-stderr mpi 2 --checkpoint.async_mode=$mode --job.dump_folder="$d" \
			--comm.init_timeout_seconds=20 --comm.train_timeout_seconds=20
		local took=$((SECONDS - t0))
		echo "# $mode: exit $status after $took s" >&3
		refute_crash
		[ "$took" -lt 15 ]
		# the ranks say why (the same words: the result is agreed), naming
		# the checkpoint; none blames another (the first rank to exit
		# aborts the job 200 ms later: a loaded machine may lose a line)
		local errs
		errs=$(echo "$stderr" | grep 'titan-train: error: ')
		echo "$errs" | head -1 | sed 's/^/# /' >&3
		[ -n "$errs" ]
		! echo "$errs" | grep -vF "cannot write checkpoint '$d/checkpoint/step-4.h5': No space left on device"
		[[ $stderr != *"comm timeout"* && $stderr != *"does not answer"* ]]
		assert_file_exists "$d/checkpoint/step-2.h5"
		assert_file_not_exists "$d/checkpoint/step-4.h5"
		[ -z "$(compgen -G "$d/checkpoint/*.tmp.*" || true)" ]
		run -0 titan-ckpt-convert info --verify "$d/checkpoint/step-2.h5"
		# the disk holds step 2 and a model-only step 3 next to it
		run -0 --separate-stderr mpi 2 --checkpoint.async_mode=$mode --job.dump_folder="$d" \
			--training.steps=3 --checkpoint.last_save_model_only=true
		assert_file_exists "$d/checkpoint/step-3.h5"
		rm -rf "${d:?}"
	done
	# no room for the first checkpoint either (the case that hung: the
	# background writers of step 2 in different collectives, the trainers
	# waiting for them at step 4)
	fallocate -l 2000k "$FS/filler"
	run -1 --separate-stderr mpi 2 --checkpoint.async_mode=async --job.dump_folder="$FS/a" \
		--comm.init_timeout_seconds=20 --comm.train_timeout_seconds=20
	refute_crash
	[[ $stderr == *"checkpoint step 2 (written in the background): rank 0: cannot write checkpoint '$FS/a/checkpoint/step-2.h5': No space left on device"* ]]
	run ls -A "$FS/a/checkpoint"
	assert_output ""
}

# steps 1-6 of one run in $1/checkpoint (interval 1, nothing pruned)
six_steps() {
	titan-train -q --config "$DATA/tiny.yaml" --training.steps=6 --checkpoint.interval=1 \
		--checkpoint.keep_latest_k=0 --job.dump_folder="$1"
}

@test "keep_latest_k after a rewind (load_step): the run's own checkpoints are kept, the newer ones of the old run moved aside, never deleted" {
	six_steps run
	run ls run/checkpoint
	assert_output "$(printf 'step-%s.h5\n' 1 2 3 4 5 6)"
	# another learning rate: this run's steps 3 and 4 differ from the old ones
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--checkpoint.load_step=2 --checkpoint.keep_latest_k=2 --optimizer.lr=1e-2 \
		--checkpoint.interval=1
	[[ $stderr == *"WARNING"*"step-3.h5, step-4.h5, step-5.h5, step-6.h5"*"superseded-"* ]]
	# this run's steps 3 and 4 (step 2 loaded, then pruned as the oldest of
	# the new lineage); the old run's 3-6 all kept, in the one subfolder
	local sub
	sub=$(cd run/checkpoint && compgen -G 'superseded-*')
	[ "$(echo "$sub" | wc -l)" -eq 1 ]
	run ls run/checkpoint
	assert_output "$(printf '%s\n' step-3.h5 step-4.h5 "$sub")"
	run ls "run/checkpoint/$sub"
	assert_output "$(printf 'step-%s.h5\n' 3 4 5 6)"
	! cmp -s run/checkpoint/step-4.h5 "run/checkpoint/$sub/step-4.h5"
	# a plain resume goes on from this run's newest step, not the old 6
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--checkpoint.keep_latest_k=2 --optimizer.lr=1e-2 --training.steps=5 --checkpoint.interval=1
	[[ $stderr == *"Loaded checkpoint run/checkpoint/step-4.h5 (step 4)"* ]]
	[[ $stderr != *"superseded"* ]]
	run ls run/checkpoint
	assert_output "$(printf '%s\n' step-4.h5 step-5.h5 "$sub")"
	run ls "run/checkpoint/$sub"
	assert_output "$(printf 'step-%s.h5\n' 3 4 5 6)"
}

@test "load_step of the newest step, load_only, or a run that stops at the check of training.steps move nothing aside" {
	six_steps run
	run -2 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--checkpoint.load_step=4 --training.steps=3
	[[ $stderr == *"training.steps 3 is below the step of the checkpoint"* ]]
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--checkpoint.load_step=2 --checkpoint.load_only --training.steps=3
	[[ $stderr != *"superseded"* ]]
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--checkpoint.load_step=6 --training.steps=7 --checkpoint.keep_latest_k=0
	[[ $stderr != *"superseded"* ]]
	run ls run/checkpoint
	assert_output "$(printf 'step-%s.h5\n' 1 2 3 4 5 6 7)"
}

@test "temporaries of killed writes are removed at start, also with keep_latest_k 0; other files are not" {
	titan-train -q --config "$DATA/tiny.yaml" --training.steps=2 --job.dump_folder=run
	# what a kill -9 during the writes of steps 4 and 2 leaves
	head -c 100000 /dev/urandom > run/checkpoint/step-4.h5.tmp.AbC123
	head -c 100000 /dev/urandom > run/checkpoint/step-2.h5.tmp.xYz789
	touch run/checkpoint/step-4.h5.tmp. run/checkpoint/notes.tmp.AbC123 run/checkpoint/step-x.h5.tmp.AbC123
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--checkpoint.keep_latest_k=0 --training.steps=3
	[[ $stderr == *"removed 2 temporary files of interrupted checkpoint writes"* ]]
	run ls -A run/checkpoint
	assert_output "$(printf '%s\n' notes.tmp.AbC123 step-2.h5 step-3.h5 step-4.h5.tmp. step-x.h5.tmp.AbC123)"
}

@test "a resumed run on 2 ranks switches to comm.train_timeout_seconds after its first step: a stopped rank ends it within that" {
	skip_without_mpi
	mpi 2 --training.steps=2 --job.dump_folder=run
	assert_file_exists run/checkpoint/step-2.h5
	timeout -k 5 60 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train --log-rank all \
		--config "$DATA/tiny.yaml" --job.dump_folder=run --training.steps=100000 \
		--checkpoint.interval=100000 --comm.init_timeout_seconds=50 \
		--comm.train_timeout_seconds=4 > out 2> err &
	local job=$! pids
	for _ in $(seq 600); do
		[ "$(grep -c '"step"' run/metrics.jsonl 2>/dev/null)" -ge 6 ] && break
		sleep 0.1
	done
	grep -q "Loaded checkpoint run/checkpoint/step-2.h5" err
	pids=$(grep -m1 -o 'Ranks: .*' err | grep -o 'pid [0-9]*' | cut -d' ' -f2)
	[ "$(echo "$pids" | wc -l)" -eq 2 ]
	local t0=$SECONDS status=0
	kill -STOP "$(echo "$pids" | sed -n 2p)"
	wait $job || status=$?
	local took=$((SECONDS - t0))
	echo "# job ended ${took} s after SIGSTOP of rank 1 (train timeout 4 s, init 50 s), status $status" >&3
	[ "$status" -ne 0 ]
	[ "$status" -ne 124 ]
	[ "$took" -le 20 ]
	grep -q "did not finish in 4 s; rank 1 does not answer" err
}
