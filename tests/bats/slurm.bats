#!/usr/bin/env bats
# slurm/ against a real SLURM (Debian's slurm-wlm + munge): a throwaway
# cluster of two simulated nodes on this machine (tests/slurm/cluster.sh),
# then sbatch multinode_trainer.slurm (the losses of plain mpiexec), the
# submit-pipeline chain to an HF export, the estimate gate, a requeue in the
# middle of training and a time limit that arrives mid-run.  Skipped, with
# the reason, only where the daemons cannot start (not root, no slurm-wlm).

bats_require_minimum_version 1.5.0

setup_file() {
	export DATA=$BATS_FILE_TMPDIR
	export CLUSTER=$BATS_FILE_TMPDIR/cluster
	PATH=${TITAN_BIN:-$BATS_TEST_DIRNAME/../../bin}:$PATH
	local src
	src=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	if ! command -v mpiexec >/dev/null || ! titan-train --version | grep -q '+mpi'; then
		export SLURM_SKIP="no MPI in this build"
		return 0
	fi
	if ! out=$(timeout 60 "$src/tests/slurm/cluster.sh" start "$CLUSTER" 2>&1); then
		export SLURM_SKIP="the SLURM daemons cannot start here: ${out//$'\n'/ }"
		return 0
	fi
	export SLURM_CONF=$CLUSTER/slurm.conf
	if command -v bible >/dev/null; then
		bible -f gen1:1-gen50:26 > "$DATA/genesis.txt"
	else
		yes 'In the beginning God created the heaven and the earth.' | head -n 4000 > "$DATA/genesis.txt"
	fi
	titan-tokenize train --vocab-size 768 --format text "$DATA/genesis.txt" -o "$DATA/tok.tiktoken"
	titan-tokenize -t "$DATA/tok.tiktoken" --doc-per-line "$DATA/genesis.txt" |
		titan-shard -q -t "$DATA/tok.tiktoken" --out "$DATA/shards" --val-docs 40
	cat > "$DATA/tiny.yaml" <<YAML
model:
  flavor: custom
  dim: 64
  n_layers: 2
  n_heads: 4
  n_kv_heads: 2
  vocab_size: 768
  multiple_of: 32
optimizer:
  lr: 3.0e-3
lr_scheduler:
  warmup_steps: 2
training:
  dataset_path: $DATA/shards
  local_batch_size: 6
  seq_len: 32
  steps: 30
metrics:
  log_freq: 1
  peak_flops: 1.0e+11
checkpoint:
  interval: 10
comm:
  init_timeout_seconds: 120
  train_timeout_seconds: 60
YAML
}

teardown_file() {
	if [ -n "${SLURM_CONF:-}" ]; then
		scancel --full --signal=KILL --user=root 2>/dev/null || true
		timeout 60 "$BATS_TEST_DIRNAME/../slurm/cluster.sh" stop "$CLUSTER" || true
	fi
}

setup() {
	load helpers
	[ -z "${SLURM_SKIP:-}" ] || skip "$SLURM_SKIP"
	export TITAN_HOME=$TITAN_SRCDIR TITAN_OUTPUT=$BATS_TEST_TMPDIR/outputs
	cd "$BATS_TEST_TMPDIR" || return 1
}

job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }

# wait_state ID SECONDS STATE...: until every task of job ID is in one of
# STATEs (the job's record is printed when the time is up)
wait_state() {
	local id=$1 end=$((SECONDS + $2)) s w ok
	shift 2
	while [ $SECONDS -lt $end ]; do
		ok=1
		for s in $(job_state "$id"); do
			w=0
			for x in "$@"; do [ "$s" = "$x" ] && w=1; done
			[ $w -eq 1 ] || ok=0
		done
		[ -n "$(job_state "$id")" ] && [ $ok -eq 1 ] && return 0
		sleep 0.5
	done
	echo "job $id: state $(job_state "$id" | tr '\n' ' ')after ${end}s, expected $*" >&2
	scontrol show job "$id" >&2
	return 1
}

# start_requeued ID [SCONTROL UPDATE ARGS]: SLURM holds a requeued job
# back for ~2 minutes so that the old run's step daemons are gone (a new
# step 0 while the old one's slurmstepd still cleans up loses its PMI
# sockets: "failed to send temp kvs").  Wait for that here instead, then
# start it.
start_requeued() {
	local id=$1
	shift
	timeout 60 bash -c "while pgrep -f 'slurmstepd: \\[$id\\.' >/dev/null; do sleep 0.2; done"
	scontrol update JobId="$id" StartTime=now "$@"
}

# loss_at FILE STEP: the logged loss of a step
loss_at() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o.get("step") == int(sys.argv[2]) and "loss" in o: print(repr(o["loss"]))' "$1" "$2"; }

@test "sbatch multinode_trainer.slurm: FSDP on 2 nodes x 1 task, the losses of plain mpiexec" {
	timeout -k 5 300 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/ref"
	run -0 sbatch --parsable -J fsdp "$TITAN_SRCDIR/slurm/multinode_trainer.slurm" "$DATA/tiny.yaml"
	id=$output
	wait_state "$id" 120 COMPLETED
	run -0 scontrol show job "$id"
	assert_output --partial "NodeList=n[1-2]"
	run -0 cat "fsdp-$id.out"
	assert_line --partial "2 node(s) n[1-2], 2 rank(s) x 1 thread(s)"
	assert_line "titan: titan-train exited with status 0"
	run -0 grep -c '"loss"' outputs/fsdp/metrics.jsonl
	assert_output 30
	run -0 cmp <(grep -o '"loss":[^,]*,"grad_norm":[^,]*' ref/metrics.jsonl) \
		<(grep -o '"loss":[^,]*,"grad_norm":[^,]*' outputs/fsdp/metrics.jsonl)
	assert_file_exists outputs/fsdp/checkpoint/step-30.h5
	# bad input: a config that is not there fails at once, with the reason
	run -0 sbatch --parsable -J bad "$TITAN_SRCDIR/slurm/multinode_trainer.slurm" nope.yaml
	wait_state "$output" 60 FAILED
	run -0 cat bad-*.err
	assert_output --partial "cannot read the config 'nope.yaml'"
}

@test "submit-pipeline: tokenize (array) -> shard -> estimate -> train -> HF export, every job COMPLETED" {
	head -c 300000 "$DATA/genesis.txt" > a.txt
	tail -c 200000 "$DATA/genesis.txt" > b.txt
	run -0 --separate-stderr "$TITAN_SRCDIR/slurm/submit-pipeline" --work w --tokenizer "$DATA/tok.tiktoken" \
		--config "$DATA/tiny.yaml" --format lines --val-docs 20 a.txt b.txt -- --training.steps=12
	assert_line --regexp '^tokenize [0-9]+ \(2 task\(s\)\)$'
	for stage in tokenize shard estimate train convert; do
		id=$(printf '%s\n' "${lines[@]}" | awk -v s=$stage '$1 == s { print $2 }')
		wait_state "$id" 180 COMPLETED
	done
	run -0 titan-shard info --verify w/shards
	assert_file_exists w/hf/model.safetensors
	assert_file_exists w/hf/config.json
	assert_file_exists w/hf/tok.tiktoken
	run -0 grep -c '"loss"' w/outputs/titan/metrics.jsonl
	assert_output 12
	grep -q '"vocab_size": *768' w/hf/config.json
}

@test "submit-pipeline: a layout that does not fit fails the estimate; training and export never start" {
	cp "$DATA/genesis.txt" g.txt
	run -0 --separate-stderr "$TITAN_SRCDIR/slurm/submit-pipeline" --work w --tokenizer "$DATA/tok.tiktoken" \
		--config "$DATA/tiny.yaml" --format lines g.txt -- --model.dim=32768 --model.n_layers=64 \
		--model.n_heads=64 --model.n_kv_heads=8
	est=$(printf '%s\n' "${lines[@]}" | awk '$1 == "estimate" { print $2 }')
	train=$(printf '%s\n' "${lines[@]}" | awk '$1 == "train" { print $2 }')
	conv=$(printf '%s\n' "${lines[@]}" | awk '$1 == "convert" { print $2 }')
	wait_state "$est" 120 FAILED
	wait_state "$train" 60 CANCELLED
	wait_state "$conv" 60 CANCELLED
	run -0 cat w/logs/titan-estimate-"$est".out
	assert_output --partial "DOES NOT FIT"
	assert_not_exist w/outputs
}

# a slower run (~0.13 s a step here) so that signals land mid-training
slow=(--training.seq_len=256 --training.local_batch_size=24 --checkpoint.interval=25)

@test "scontrol requeue mid-training: the job resumes from the newest checkpoint, same final loss" {
	timeout -k 5 300 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/ref" --training.steps=150 "${slow[@]}"
	run -0 sbatch --parsable -J rq "$TITAN_SRCDIR/slurm/multinode_trainer.slurm" "$DATA/tiny.yaml" \
		--training.steps=150 "${slow[@]}"
	id=$output
	wait_state "$id" 60 RUNNING
	# wait for the first checkpoint, then requeue
	timeout 60 bash -c 'until [ -f outputs/rq/checkpoint/step-25.h5 ]; do sleep 0.2; done'
	scontrol requeue "$id"
	wait_state "$id" 60 PENDING
	run -0 scontrol show job "$id"
	assert_output --partial "Restarts=1"
	# the step the ranks stopped at (SLURM's SIGTERM: finish it, checkpoint)
	run -0 cat "rq-$id.err"
	assert_output --regexp "Terminated received: stopped after step [0-9]+ of 150 \\(checkpoint saved\\)"
	stopped=$(grep -o 'stopped after step [0-9]*' "rq-$id.err" | head -n 1 | awk '{print $4}')
	assert_file_exists "outputs/rq/checkpoint/step-$stopped.h5"
	start_requeued "$id"
	wait_state "$id" 400 COMPLETED
	run -0 cat "rq-$id.out"
	assert_line --partial "restart 1: 2 node(s)"
	assert_line --partial "newest checkpoint step $stopped"
	[ "$(loss_at outputs/rq/metrics.jsonl 150)" = "$(loss_at ref/metrics.jsonl 150)" ]
	[ -n "$(loss_at ref/metrics.jsonl 150)" ]
}

# steps_for SECONDS: how many steps of the slow run take about SECONDS on
# this machine now (a 20-step calibration run; the shared machines CI runs
# on vary fivefold in speed, so a fixed count is either too short to be
# signalled or too long to finish)
steps_for() {
	timeout -k 5 300 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/cal" --training.steps=20 "${slow[@]}" >&2 || return 1
	/usr/bin/python3 -c '
import json, statistics, sys
t = [json.loads(l)["step_time_s"] for l in open(sys.argv[1]) if "step_time_s" in l][4:]
print(max(100, int(float(sys.argv[2]) / statistics.median(t))))' "$BATS_TEST_TMPDIR/cal/metrics.jsonl" "$1"
}

@test "time limit: SIGTERM before it (--signal=B:TERM@20), checkpoint, requeue, and the requeue finishes" {
	# a 1-minute limit; SLURM signals 20 s before the end, checking every
	# 30 s: 10-40 s into the job, so the run is made to need ~80 s
	steps=$(steps_for 80)
	echo "# $steps steps (about 80 s here now)" >&3
	run -0 sbatch --parsable -J tl --time=1 --signal=B:TERM@20 \
		"$TITAN_SRCDIR/slurm/multinode_trainer.slurm" "$DATA/tiny.yaml" --training.steps="$steps" "${slow[@]}"
	id=$output
	wait_state "$id" 60 RUNNING
	wait_state "$id" 120 PENDING
	run -0 cat "tl-$id.out"
	assert_line "titan: SIGTERM: the ranks finish the step and checkpoint"
	assert_line "titan: titan-train exited with status 143"
	assert_line "titan: requeued job $id; it resumes from the newest checkpoint"
	stopped=$(grep -o 'stopped after step [0-9]*' "tl-$id.err" | head -n 1 | awk '{print $4}')
	[ -n "$stopped" ] && [ "$stopped" -lt "$steps" ]
	assert_file_exists "outputs/tl/checkpoint/step-$stopped.h5"
	# the requeue gets the time it needs (an operator's scontrol update)
	start_requeued "$id" TimeLimit=15
	wait_state "$id" 600 COMPLETED
	run -0 cat "tl-$id.out"
	assert_line --partial "newest checkpoint step $stopped"
	[ -n "$(loss_at outputs/tl/metrics.jsonl "$steps")" ]
}
