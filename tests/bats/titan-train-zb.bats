#!/usr/bin/env bats
# titan-train with the zero-bubble pipeline schedules InterleavedZeroBubble
# and ZBVZeroBubble (torch.distributed.pipelining's
# ScheduleInterleavedZeroBubble, loop-style stages, and ScheduleZBVZeroBubble,
# V-style: rank r holds stages r and 2pp-1-r; each backward split into an
# input pass B and a weight pass W) under MPICH's mpiexec (oversubscribed, a
# tiny model): PP 2 and 4 with 2 stages per rank, every activation-
# checkpointing mode, composed with FSDP 2, DDP 2 and TP 2, reproduce the
# 1-rank losses and grad norms (and Interleaved1F1B's bit for bit: the same
# GEMMs add the same gradients in the same microbatch order); their
# checkpoints resume on 1 rank; layouts torch refuses exit 2 naming the
# numbers.  The action orders themselves: tests/unit/test_pp_schedule.c.

bats_require_minimum_version 1.5.0

setup_file() {
	load layouts
	layouts_setup_file 6 # 6 blocks: 4 stages of PP 2 x 2 per rank
}

setup() {
	load helpers
	load layouts
	[ -z "${NO_MPI:-}" ] || skip "no MPI in this build (or no mpiexec)"
	cd "$TITAN_SRCDIR"
}

PP="--parallelism.pipeline_parallel_degree"
ZB="--parallelism.pipeline_parallel_schedule=InterleavedZeroBubble"

@test "InterleavedZeroBubble: PP 2 x 2 stages equals 1 rank, and Interleaved1F1B bit for bit" {
	local o=$BATS_TEST_TMPDIR
	run -0 mpi 2 $PP=2 $ZB --job.dump_folder="$o/z"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/z/metrics.jsonl"
	echo "# PP 2 x 2 stages: $output" >&3
	run -0 mpi 2 $PP=2 --parallelism.pipeline_parallel_schedule=Interleaved1F1B --job.dump_folder="$o/i"
	run -0 same_curve "$o/i/metrics.jsonl" "$o/z/metrics.jsonl" bits
	echo "# = Interleaved1F1B: $output" >&3
}

@test "InterleavedZeroBubble with full, selective 2 and per-op activation checkpointing" {
	local o=$BATS_TEST_TMPDIR
	run -0 mpi 2 $PP=2 $ZB --activation_checkpoint.mode=full --job.dump_folder="$o/f"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/f/metrics.jsonl"
	echo "# full AC: $output" >&3
	run -0 mpi 2 $PP=2 $ZB --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=2 --job.dump_folder="$o/s"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/s/metrics.jsonl"
	echo "# selective 2: $output" >&3
	run -0 mpi 2 $PP=2 $ZB --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=op --job.dump_folder="$o/p"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/p/metrics.jsonl"
	echo "# selective op: $output" >&3
}

@test "InterleavedZeroBubble x FSDP 2, x DDP 2 (the last W of a stage reduces), x TP 2" {
	local o=$BATS_TEST_TMPDIR
	run -0 mpi 4 $PP=2 $ZB --training.local_batch_size=4 --job.dump_folder="$o/f"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/f/metrics.jsonl"
	echo "# PP 2 x 2 stages x FSDP 2: $output" >&3
	run -0 mpi 4 $PP=2 $ZB --parallelism.data_parallel_replicate_degree=2 \
		--parallelism.data_parallel_shard_degree=1 --training.local_batch_size=4 --job.dump_folder="$o/d"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/d/metrics.jsonl"
	echo "# PP 2 x 2 stages x DDP 2: $output" >&3
	run -0 mpi 4 $PP=2 $ZB --parallelism.tensor_parallel_degree=2 --job.dump_folder="$o/t"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/t/metrics.jsonl"
	echo "# PP 2 x 2 stages x TP 2: $output" >&3
}

@test "InterleavedZeroBubble: PP 4 x 2 stages (14 blocks); 3 microbatches on PP 2 (one round)" {
	local o=$BATS_TEST_TMPDIR
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" --model.n_layers=14 --job.dump_folder="$o/r14"
	run -0 mpi 4 --model.n_layers=14 $PP=4 $ZB --job.dump_folder="$o/z4"
	run -0 same_curve "$o/r14/metrics.jsonl" "$o/z4/metrics.jsonl"
	echo "# PP 4 x 2 stages: $output" >&3
	# torch: rounds = max(1, 3 / 2) = 1 of 3 microbatches
	local b3="--training.local_batch_size=3 --training.global_batch_size=3"
	# shellcheck disable=SC2086
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" $b3 --job.dump_folder="$o/r3"
	# shellcheck disable=SC2086
	run -0 mpi 2 $PP=2 $ZB $b3 --job.dump_folder="$o/z3"
	run -0 same_curve "$o/r3/metrics.jsonl" "$o/z3/metrics.jsonl"
	echo "# PP 2, 3 microbatches: $output" >&3
}

@test "an InterleavedZeroBubble checkpoint resumes on 1 rank" {
	local o=$BATS_TEST_TMPDIR
	run -0 mpi 2 $PP=2 $ZB --checkpoint.enable --checkpoint.interval=5 --job.dump_folder="$o/z"
	mkdir -p "$o/one/checkpoint"
	cp "$o/z/checkpoint/step-5.h5" "$o/one/checkpoint/"
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" --checkpoint.enable --job.dump_folder="$o/one"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/one/metrics.jsonl"
	echo "# PP 2 x 2 stages -> 1 rank: $output" >&3
}

ZBV="--parallelism.pipeline_parallel_schedule=ZBVZeroBubble"

@test "ZBVZeroBubble: PP 2 (stages 0+3, 1+2) equals 1 rank and Interleaved1F1B bit for bit; full AC; PP 4 (14 blocks)" {
	local o=$BATS_TEST_TMPDIR
	run -0 mpi 2 $PP=2 $ZBV --job.dump_folder="$o/v"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/v/metrics.jsonl"
	echo "# ZBV PP 2: $output" >&3
	run -0 mpi 2 $PP=2 --parallelism.pipeline_parallel_schedule=Interleaved1F1B --job.dump_folder="$o/i"
	run -0 same_curve "$o/i/metrics.jsonl" "$o/v/metrics.jsonl" bits
	echo "# = Interleaved1F1B: $output" >&3
	run -0 mpi 2 $PP=2 $ZBV --activation_checkpoint.mode=full --job.dump_folder="$o/f"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/f/metrics.jsonl"
	echo "# ZBV PP 2, full AC: $output" >&3
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" --model.n_layers=14 --job.dump_folder="$o/r14"
	run -0 mpi 4 --model.n_layers=14 $PP=4 $ZBV --job.dump_folder="$o/v4"
	run -0 same_curve "$o/r14/metrics.jsonl" "$o/v4/metrics.jsonl"
	echo "# ZBV PP 4: $output" >&3
}

@test "ZBVZeroBubble x FSDP 2 and x DDP 2; its checkpoint resumes on 1 rank" {
	local o=$BATS_TEST_TMPDIR
	run -0 mpi 4 $PP=2 $ZBV --training.local_batch_size=4 --job.dump_folder="$o/f"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/f/metrics.jsonl"
	echo "# ZBV PP 2 x FSDP 2: $output" >&3
	run -0 mpi 4 $PP=2 $ZBV --parallelism.data_parallel_replicate_degree=2 \
		--parallelism.data_parallel_shard_degree=1 --training.local_batch_size=4 --job.dump_folder="$o/d"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/d/metrics.jsonl"
	echo "# ZBV PP 2 x DDP 2: $output" >&3
	run -0 mpi 2 $PP=2 $ZBV --checkpoint.enable --checkpoint.interval=5 --job.dump_folder="$o/c"
	mkdir -p "$o/one/checkpoint"
	cp "$o/c/checkpoint/step-5.h5" "$o/one/checkpoint/"
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" --checkpoint.enable --job.dump_folder="$o/one"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/one/metrics.jsonl"
	echo "# ZBV PP 2 -> 1 rank: $output" >&3
}

@test "validation under ZBVZeroBubble and InterleavedZeroBubble (forwards only) equals the 1-rank validation loss" {
	local o=$BATS_TEST_TMPDIR v="--validation.enable --validation.freq=2 --validation.seq_len=32 --training.steps=4 --validation.local_batch_size=8"
	# shellcheck disable=SC2086
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" $v --job.dump_folder="$o/r"
	# shellcheck disable=SC2086
	run -0 mpi 2 $PP=2 $ZBV $v --job.dump_folder="$o/v"
	# shellcheck disable=SC2086
	run -0 mpi 2 $PP=2 $ZB $v --job.dump_folder="$o/z"
	run -0 /usr/bin/python3 - "$o/r/metrics.jsonl" "$o/v/metrics.jsonl" "$o/z/metrics.jsonl" <<'PY'
import json, sys
def val(p):
    return {o["step"]: (o["validation_loss"], o["validation_tokens"])
            for o in map(json.loads, open(p)) if "validation_loss" in o}
r = val(sys.argv[1])
assert sorted(r) == [1, 2, 4], r
for p in sys.argv[2:]:
    x = val(p)
    assert sorted(x) == sorted(r), (p, x)
    for s in r:
        assert x[s][1] == r[s][1] and abs(x[s][0] - r[s][0]) <= 1e-5 * r[s][0], (p, s, x[s], r[s])
print("ok")
PY
}

@test "zero-bubble layouts torch refuses, and the schedules not implemented, exit 2 with the reason" {
	run -2 mpi 2 $PP=2 $ZB --training.local_batch_size=5 --training.global_batch_size=5 \
		--job.dump_folder="$BATS_TEST_TMPDIR/o"
	[[ $output == *"InterleavedZeroBubble: the 5 microbatches (local_batch_size / pipeline_parallel_microbatch_size) must be a multiple of the 2 rounds"* ]]
	run -2 mpi 2 $PP=2 $ZB --parallelism.pipeline_parallel_layers_per_stage=3 \
		--job.dump_folder="$BATS_TEST_TMPDIR/o"
	[[ $output == *"pipeline_parallel_layers_per_stage 3: 3 stages, not a multiple of pipeline_parallel_degree 2"* ]]
	run -2 mpi 2 $PP=2 $ZBV --parallelism.pipeline_parallel_layers_per_stage=4 \
		--job.dump_folder="$BATS_TEST_TMPDIR/o"
	[[ $output == *"ZBVZeroBubble runs exactly 2 stages per rank, but pipeline_parallel_layers_per_stage 4 makes 2 stages for pipeline_parallel_degree 2"* ]]
	run -2 mpi 2 $PP=2 --parallelism.pipeline_parallel_schedule=LoopedBFS --job.dump_folder="$BATS_TEST_TMPDIR/o"
	[[ $output == *"'LoopedBFS' is not implemented yet (GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble and ZBVZeroBubble are; LoopedBFS is not)"* ]]
}
