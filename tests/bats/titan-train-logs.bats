#!/usr/bin/env bats
# titan-train says what it runs and writes where it is told (issue 27):
# absolute path keys are used as they are (torchtitan's os.path.join), the
# log names the resolved device, every parallelism with its degree, the
# pipeline's microbatches, what the CPU computes in, and what a seed
# checkpoint run does.

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus g 2000 768 20
	tiny_yaml "$DATA/tiny.yaml" 768 32 2 4 2 <<YAML
lr_scheduler:
  warmup_steps: 1
training:
  dataset_path: $DATA/shards
  local_batch_size: 4
  seq_len: 32
  steps: 2
metrics:
  log_freq: 1
  peak_flops: 1.0e+11
activation_checkpoint:
  mode: none
YAML
}

setup() {
	load helpers
	cd "$BATS_TEST_TMPDIR"
}

# 2 ranks, 1 step, the log of rank 0
train2() {
	run -0 --separate-stderr timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 \
		titan-train --config "$DATA/tiny.yaml" --job.dump_folder="$BATS_TEST_TMPDIR/out" \
		--training.steps=1 "$@"
	refute_crash
}

@test "absolute checkpoint.folder: saves there, not under the dump folder, and resumes from it" {
	ck=$BATS_TEST_TMPDIR/shared/ckpt
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run1/ \
		--checkpoint.enable --checkpoint.interval=1 --checkpoint.no_last_save_model_only \
		--checkpoint.folder="$ck"
	assert_file_exists "$ck/step-2.h5"
	[[ ! -e run1/shared && -z $(find run1 -name 'step-*.h5') ]] || fail "nested under run1/: $(find run1)"
	[[ $stderr == *"Saved checkpoint $ck/step-1.h5 "* ]] || fail "$stderr"
	# a second run in another dump folder goes on from the shared folder
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run2 \
		--training.steps=3 --checkpoint.enable --checkpoint.interval=1 \
		--checkpoint.folder="$ck/"
	[[ $stderr == *"Loaded checkpoint $ck/step-2.h5 (step 2)"* ]] || fail "$stderr"
	assert_file_exists "$ck/step-3.h5"
	[[ $output == *"step:  3"* && $output != *"step:  1 "* ]] || fail "$output"
}

@test "absolute metrics.save_tb_folder and save_jsonl_file land where asked" {
	elsewhere=$BATS_TEST_TMPDIR/elsewhere
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--metrics.enable_tensorboard --metrics.save_tb_folder="$elsewhere/tb" \
		--metrics.save_jsonl_file="$elsewhere/m/metrics.jsonl"
	[ "$(grep -c '"loss"' "$elsewhere/m/metrics.jsonl")" -eq 2 ]
	ls "$elsewhere"/tb/*/events.out.tfevents.* >/dev/null || fail "no events under $elsewhere/tb"
	[[ ! -e run/elsewhere && ! -e run/tb ]] || fail "nested under run/: $(find run)"
	# relative keys stay under the dump folder, with no doubled slash
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=rel/ \
		--metrics.enable_tensorboard
	assert_file_exists rel/metrics.jsonl
	[[ $stderr == *"TensorBoard events: rel/tb/"* && $stderr != *"//"* ]] || fail "$stderr"
}

@test "absolute profiling and memory snapshot folders land where asked" {
	p=$BATS_TEST_TMPDIR/prof
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--profiling.enable_profiling --profiling.profile_freq=1 --profiling.profiler_warmup=0 \
		--profiling.save_traces_folder="$p/traces" --profiling.enable_memory_snapshot \
		--profiling.save_memory_snapshot_folder="$p/mem"
	assert_file_exists "$p/traces/iteration_1/rank0_trace.json"
	assert_file_exists "$p/mem/rank0.memtrace"
	[[ -z $(find run -name '*trace*') ]] || fail "nested under run/: $(find run)"
}

@test "the first line names the device the run resolved to" {
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--training.steps=1 --training.device=auto
	[[ $stderr =~ "training.device auto → "(cpu|cuda)", 1 rank(s)" ]] || fail "$stderr"
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--training.steps=1 --training.device=cpu
	[[ $stderr == *"training.device cpu, 1 rank(s)"* ]] || fail "$stderr"
}

@test "on CPU, mixed_precision_param bfloat16 says the CPU computes in float32" {
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--training.steps=1 --training.device=cpu
	[[ $stderr == *"training.mixed_precision_param bfloat16: the CPU computes in float32 (mixed precision applies on CUDA)"* ]] ||
		fail "$stderr"
	[ "$(grep -c mixed_precision_param <<<"$stderr")" -eq 1 ]
	# float32 is what it computes in: nothing to say
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--training.steps=1 --training.device=cpu --training.mixed_precision_param=float32
	[[ $stderr != *"mixed_precision"* ]] || fail "$stderr"
}

@test "a single rank run says so" {
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run --training.steps=1
	[[ $stderr == *"Parallelism: single rank; 1 rank(s)"* ]] || fail "$stderr"
}

@test "TP 2 is logged as TP, not DDP" {
	skip_without_mpi
	train2 --parallelism.tensor_parallel_degree=2
	[[ $stderr == *"Parallelism: TP 2; 2 rank(s)"* && $stderr != *DDP* ]] || fail "$stderr"
}

@test "PP 2 names its schedule and microbatches, and the step its pipeline microbatches" {
	skip_without_mpi
	train2 --parallelism.pipeline_parallel_degree=2 --parallelism.pipeline_parallel_microbatch_size=1 \
		--parallelism.pipeline_parallel_schedule=1F1B
	[[ $stderr == *"Parallelism: PP 2 (1F1B, 4 microbatches of 1 x 32 tokens); 2 rank(s)"* ]] || fail "$stderr"
	[[ $stderr == *"Training starts: 1 steps, 4 microbatch(es) of 1 x 32 tokens per rank"* ]] || fail "$stderr"
	[[ $stderr != *DDP* ]] || fail "$stderr"
}

@test "CP 2 is logged as CP, its parameters sharded over dp_shard x cp" {
	skip_without_mpi
	train2 --parallelism.context_parallel_degree=2
	[[ $stderr == *"Parallelism: CP 2; parameters sharded over dp_shard x cp, 2 ranks in "*" FSDP unit(s); 2 rank(s)"* ]] ||
		fail "$stderr"
}

@test "FSDP 2 is logged with its degree" {
	skip_without_mpi
	train2 --parallelism.data_parallel_shard_degree=2
	[[ $stderr == *"Parallelism: FSDP 2 (dp_shard); parameters sharded over 2 ranks in "* ]] || fail "$stderr"
}

@test "create_seed_checkpoint says it does not train" {
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --job.dump_folder=run \
		--checkpoint.enable --checkpoint.create_seed_checkpoint
	assert_file_exists run/checkpoint/step-0.h5
	[[ $stderr == *"Created seed checkpoint run/checkpoint/step-0.h5"* ]] || fail "$stderr"
	[[ $stderr == *"Seed checkpoint only (checkpoint.create_seed_checkpoint): no training steps"* ]] ||
		fail "$stderr"
	[[ $stderr != *"Training starts"* && -z $output ]] || fail "$stderr"
}

@test "absolute comm.save_traces_folder: the flight recorder lands where asked" {
	skip_without_mpi
	local d=$BATS_TEST_TMPDIR ft=$BATS_TEST_TMPDIR/shared/ft job pids status=0
	timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train --log-rank all \
		--config "$DATA/tiny.yaml" --training.steps=100000 --job.dump_folder="$d/run" \
		--parallelism.data_parallel_shard_degree=2 --comm.train_timeout_seconds=2 \
		--comm.save_traces_folder="$ft" > "$d/out" 2> "$d/err" &
	job=$!
	for _ in $(seq 600); do
		[ -s "$d/run/metrics.jsonl" ] && [ "$(wc -l < "$d/run/metrics.jsonl")" -ge 3 ] && break
		sleep 0.1
	done
	pids=$(grep -m1 -o 'Ranks: .*' "$d/err" | grep -o 'pid [0-9]*' | cut -d' ' -f2)
	[ "$(echo "$pids" | wc -l)" -eq 2 ] || { kill $job; fail "no pids: $(cat "$d/err")"; }
	kill -STOP "$(echo "$pids" | sed -n 2p)"
	wait $job || status=$?
	[ "$status" -ne 0 ] && [ "$status" -ne 124 ]
	grep -q "the flight recorder is in $ft/rank0.json" "$d/err" || fail "$(cat "$d/err")"
	assert_file_exists "$ft/rank0.json"
	[ ! -e "$d/run/shared" ]
}

@test "step and validation lines carry torchtitan's logger head; --plain-steps drops it" {
	# torchtitan's tools/logging.py: "[titan] %(asctime)s - %(name)s -
	# %(levelname)s - %(message)s" on its root logger
	local head='\[titan\] [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]{3} - root - INFO - '
	TITAN_LOG_TIME=1 run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" \
		--job.dump_folder=a --validation.enable --validation.freq=2
	assert_line --regexp "^${head}step:  1  loss:  [0-9.]+  grad_norm: +[0-9.]+  memory: +[0-9.]+GiB\([0-9.]+%\)  tps: [0-9,]+  tflops: [0-9.]+  mfu: [0-9.]+%$"
	assert_line --regexp "^${head}validate step:  2  loss: +[0-9.]+  memory: +[0-9.]+GiB\([0-9.]+%\)  tps: [0-9,]+$"
	# the other log lines (stderr) have the same head
	[[ ${stderr_lines[0]} =~ ^${head}titan-train\  ]] || fail "${stderr_lines[0]}"
	# a log parser written for torchtitan's output (its loss regex after the head)
	/usr/bin/python3 - "$output" <<'PY'
import re, sys
pat = re.compile(r"^\[titan\] \S+ \S+ - root - INFO - step:\s*(\d+)\s+loss:\s*([\d.]+)")
steps = [int(m.group(1)) for l in sys.argv[1].splitlines() if (m := pat.match(l))]
assert steps == [1, 2], steps
PY
	TITAN_LOG_TIME=0 run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" \
		--job.dump_folder=b
	assert_line --regexp '^\[titan\] - root - INFO - step:  2  loss: '
	run -0 --separate-stderr titan-train --plain-steps --config "$DATA/tiny.yaml" \
		--job.dump_folder=c --validation.enable --validation.freq=2
	assert_line --regexp '^step:  1  loss:  [0-9.]+  grad_norm: '
	assert_line --regexp '^validate step:  2  loss: '
	refute_output --partial '[titan]'
}

@test "loss_metrics/global_max_loss: the largest rank's own loss, no smaller than the mean" {
	skip_without_mpi
	train2 --training.steps=3 --metrics.enable_tensorboard
	/usr/bin/python3 - out/metrics.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3, rows
for r in rows:
    assert r["max_loss"] >= r["loss"] - 1e-12, r
# two ranks read different sequences: their losses differ, the max is above the mean
assert any(r["max_loss"] > r["loss"] + 1e-6 for r in rows), rows
PY
}

@test "threads are bound to the cores a launcher gave the rank, and only then; the log says where" {
	command -v taskset >/dev/null || skip "no taskset"
	[ "$(nproc --all)" -ge 2 ] || skip "one CPU: nothing to confine a rank to"
	one() { run -0 --separate-stderr env -u OMP_PROC_BIND -u OMP_PLACES "$@" titan-train \
		--config "$DATA/tiny.yaml" --job.dump_folder=run --training.steps=1; }
	# the whole machine: no binding (every rank's first thread would share a core)
	one
	[[ $stderr == *"thread(s) per rank; on CPU(s) "*", threads not bound"* ]] || fail "$stderr"
	# a launcher's mask of one CPU: the threads bound inside it
	one taskset -c 1
	[[ $stderr == *"1 thread(s) per rank; on CPU(s) 1, threads bound (OMP_PROC_BIND=close, OMP_PLACES=cores)"* ]] ||
		fail "$stderr"
	# the user's settings win; TITAN_THREAD_DEFAULTS=0 leaves everything alone
	run -0 --separate-stderr env OMP_PROC_BIND=false taskset -c 1 titan-train --config "$DATA/tiny.yaml" \
		--job.dump_folder=run --training.steps=1
	[[ $stderr == *"on CPU(s) 1, threads not bound"* ]] || fail "$stderr"
	one TITAN_THREAD_DEFAULTS=0 taskset -c 1
	[[ $stderr == *"on CPU(s) 1, threads not bound"* ]] || fail "$stderr"
	# mpiexec -bind-to core: each rank on its own core, bound
	if command -v mpiexec >/dev/null && titan-train --version | grep -q '+mpi'; then
		run -0 --separate-stderr timeout -k 5 120 mpiexec -n 2 -bind-to core env -u OMP_PROC_BIND \
			-u OMP_PLACES OMP_NUM_THREADS=1 titan-train --config "$DATA/tiny.yaml" \
			--job.dump_folder="$BATS_TEST_TMPDIR/out" --training.steps=1 --log-rank all
		[[ $stderr == *"[rank0]:"*"on CPU(s) "[0-9]", threads bound (OMP_PROC_BIND=close"* ]] || fail "$stderr"
		[[ $stderr == *"[rank1]:"*"on CPU(s) "[0-9]", threads bound (OMP_PROC_BIND=close"* ]] || fail "$stderr"
	fi
}
