#!/usr/bin/env bats
# The code CUDA ranks run, on the CPU: with the test hook TITAN_STAGED_COMM=1
# (docs/design.md) a CPU run reaches the model's buffers only through the
# backend's buf_get/buf_set, as a CUDA run does — every mesh communicator
# is a staged one (MPI on host copies, lib/dist/staged.c) and checkpoints
# go through host copies of the arenas.  Staging moves bytes and changes no
# arithmetic, so each layout's losses and grad norms equal the unstaged
# run's bit for bit, and its checkpoints hold the same values.

bats_require_minimum_version 1.5.0

setup_file() {
	load layouts
	layouts_setup_file 6 # 6 blocks: ZBV's 4 stages of PP 2
}

setup() {
	load helpers
	load layouts
	[ -z "${NO_MPI:-}" ] || skip "no MPI in this build (or no mpiexec)"
	cd "$TITAN_SRCDIR"
}

# run2 STAGED DIR ARGS...: 3 steps on 2 ranks (layouts.bash's mpi), the hook
# set to STAGED (0 or 1), metrics and checkpoints under DIR
run2() {
	local staged=$1 dir=$2
	shift 2
	TITAN_STAGED_COMM=$staged mpi 2 --training.steps=3 --job.dump_folder="$dir" "$@"
}

# curve M.jsonl: step, loss and grad norm of each step, as printed by repr
curve() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if "loss" in o: print(o["step"], repr(o["loss"]), repr(o["grad_norm"]))' "$1"; }

# comm_bytes M.jsonl: the largest memory_peak_by_tag.comm of the run (the
# staging buffers count there: the proof that a run was staged)
comm_bytes() { /usr/bin/python3 -c '
import json, sys
print(max(json.loads(l)["memory_peak_by_tag"]["comm"] for l in open(sys.argv[1])
          if "memory_peak_by_tag" in l))' "$1"; }

# staged_more A B: run B staged more bytes through comm buffers than A
staged_more() {
	local a b
	a=$(comm_bytes "$1/metrics.jsonl")
	b=$(comm_bytes "$2/metrics.jsonl")
	[ "$b" -gt "$a" ] || fail "staged run: comm peak $b bytes, unstaged $a: not staged?"
}

# same_staged ARGS...: the layout unstaged and staged; the staged run
# holds staging buffers, and its losses and grad norms are the unstaged
# run's exactly
same_staged() {
	local a=$BATS_TEST_TMPDIR/plain b=$BATS_TEST_TMPDIR/staged
	run -0 run2 0 "$a" "$@"
	run -0 run2 1 "$b" "$@"
	staged_more "$a" "$b"
	run -0 curve "$a/metrics.jsonl"
	local want=$output
	[ "$(echo "$want" | wc -l)" -eq 3 ] || fail "3 steps expected: $want"
	run -0 curve "$b/metrics.jsonl"
	[ "$output" = "$want" ] || fail "staged: $output; unstaged: $want"
}

@test "staged FSDP 2: the unstaged losses and grad norms, bit for bit" {
	same_staged --parallelism.data_parallel_shard_degree=2 --training.local_batch_size=4
}

@test "staged TP 2 (loss parallel, and the gathered loss): bit for bit" {
	same_staged --parallelism.tensor_parallel_degree=2
	same_staged --parallelism.tensor_parallel_degree=2 --parallelism.disable_loss_parallel
}

@test "staged PP 2 (1F1B, and the zero-bubble ZBV): bit for bit" {
	same_staged --parallelism.pipeline_parallel_degree=2 \
		--parallelism.pipeline_parallel_microbatch_size=2 \
		--parallelism.pipeline_parallel_schedule=1F1B
	same_staged --parallelism.pipeline_parallel_degree=2 \
		--parallelism.pipeline_parallel_microbatch_size=2 \
		--parallelism.pipeline_parallel_schedule=ZBVZeroBubble
}

@test "staged CP 2 (all-gather, and the ring): bit for bit" {
	same_staged --parallelism.context_parallel_degree=2
	same_staged --parallelism.context_parallel_degree=2 \
		--parallelism.context_parallel_rotate_method=alltoall
}

@test "staged checkpoints: the same values as unstaged ones, and a staged resume goes on exactly" {
	[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import h5py' 2>/dev/null || skip "no h5py"
	local a=$BATS_TEST_TMPDIR/plain b=$BATS_TEST_TMPDIR/staged
	local ck=(--parallelism.data_parallel_shard_degree=2 --training.local_batch_size=4
		--checkpoint.enable --checkpoint.interval=2 --checkpoint.last_save_model_only=false)
	run -0 run2 0 "$a" "${ck[@]}"
	run -0 run2 1 "$b" "${ck[@]}"
	staged_more "$a" "$b"
	run -0 /usr/bin/python3 - "$a/checkpoint/step-2.h5" "$b/checkpoint/step-2.h5" <<'PY'
import sys, h5py, numpy as np
seen = []
def walk(fa, fb):
    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and obj.dtype.kind in "fiu":
            x, y = obj[()], fb[name][()]
            assert np.array_equal(x, y), name
            seen.append(name)
    fa.visititems(visit)
with h5py.File(sys.argv[1]) as fa, h5py.File(sys.argv[2]) as fb:
    walk(fa, fb)
assert any("exp_avg_sq" in n for n in seen), seen[:20]
print(len(seen), "datasets equal")
PY
	# resumed from step 3 to step 4, staged and unstaged: the same step 4
	run -0 run2 0 "$a" "${ck[@]}" --training.steps=4
	run -0 run2 1 "$b" "${ck[@]}" --training.steps=4
	run -0 curve "$a/metrics.jsonl"
	local want=$output
	[[ $want == *$'\n4 '* ]] || fail "no step 4 after the resume: $want"
	run -0 curve "$b/metrics.jsonl"
	[ "$output" = "$want" ] || fail "staged: $output; unstaged: $want"
}

# cuda_on_two NAME ARGS...: titan-train --training.device=cuda on 2 ranks
# (metrics under $BATS_TEST_TMPDIR/NAME) is not refused by design: with a
# GPU it trains (talking through the host), without one (or without CUDA)
# each rank gives the 1-rank run's error
cuda_on_two() {
	local name=$1 one
	shift
	run titan-train -q --config "$DATA/tiny.yaml" --training.device=cuda \
		--job.dump_folder="$BATS_TEST_TMPDIR/one"
	one=$output
	run run2 0 "$BATS_TEST_TMPDIR/$name" --training.device=cuda "$@"
	refute_output --partial "trains on one rank"
	refute_output --partial "block_causal is not"
	refute_output --partial "no partial attention"
	refute_crash
	if [ "$status" -eq 0 ]; then
		run -0 curve "$BATS_TEST_TMPDIR/$name/metrics.jsonl"
		[ "$(echo "$output" | wc -l)" -eq 3 ] || fail "3 steps expected: $output"
	else
		[ -n "$one" ] || fail "one rank trained on cuda but two did not: $output"
		assert_output --partial "${one#titan-train: }"
	fi
}

@test "training.device: cuda on 2 ranks is not refused by design: it opens the GPU as one rank does" {
	cuda_on_two two --parallelism.tensor_parallel_degree=2
}

@test "staged CP 2 under block_causal (all-gather, ring): bit for bit; on cuda not refused" {
	# the CPU path of what CUDA ranks run: staged CP with document ids
	same_staged --parallelism.context_parallel_degree=2 --training.attn_mask_type=block_causal
	same_staged --parallelism.context_parallel_degree=2 --training.attn_mask_type=block_causal \
		--parallelism.context_parallel_rotate_method=alltoall
	# the CUDA backend has attention_part and the document mask: the
	# config is valid, and titan-train refuses neither
	run -0 titan-config --check --config "$DATA/tiny.yaml" --training.device=cuda \
		--parallelism.context_parallel_degree=2 --training.attn_mask_type=block_causal
	local rot
	for rot in allgather alltoall; do
		cuda_on_two "$rot" --parallelism.context_parallel_degree=2 \
			--training.attn_mask_type=block_causal \
			--parallelism.context_parallel_rotate_method="$rot"
	done
}
