#!/usr/bin/env bats
# Expert parallelism (parallelism.expert_parallel_degree, torchtitan's
# name): the configuration rules (EP borrows its ranks from dp_shard x cp
# (x tp: moe-ep-tp.bats), whole experts per rank,
# expert_tensor_parallel_degree only 1), and EP layouts reproducing the 1-rank
# MoE curve (losses, grad norms, expert loads) with checkpoints moving
# between EP and 1 rank.

bats_require_minimum_version 1.5.0

setup_file() {
	load moe
	moe_corpus 200
	moe_yaml "$DATA/moe.yaml" 2 2
}

setup() {
	load moe
	moe_setup
}

@test "EP: expert_tensor_parallel_degree > 1, EP on a dense model, EP not dividing the experts: exit 2 naming the key" {
	x=--job.dump_folder="$BATS_TEST_TMPDIR/x"
	run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" \
		--parallelism.expert_tensor_parallel_degree=2 "$x"
	[[ $stderr == "titan-train: error: parallelism.expert_tensor_parallel_degree: 2 is not supported"* ]]
	run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" \
		--parallelism.expert_parallel_degree=3 "$x"
	[[ $stderr == "titan-train: error: parallelism.expert_parallel_degree: 3 does not divide model.moe_num_experts 4"* ]]
	run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" --model.moe_num_experts=0 \
		--parallelism.expert_parallel_degree=2 "$x"
	[[ $stderr == "titan-train: error: parallelism.expert_parallel_degree: 2 needs a mixture of experts"* ]]
	run -2 --separate-stderr titan-config --check --config "$DATA/moe.yaml" \
		--parallelism.expert_parallel_degree=0
	[[ $stderr == *"parallelism.expert_parallel_degree"* ]]
	# the defaults: 1 and 1
	run -0 titan-config --config "$DATA/moe.yaml" --get parallelism.expert_parallel_degree
	[ "$output" = 1 ]
	run -0 titan-config --config "$DATA/moe.yaml" --get parallelism.expert_tensor_parallel_degree
	[ "$output" = 1 ]
}

@test "EP: the degree must divide data_parallel_shard_degree x context_parallel_degree (dp_shard -1 resolved)" {
	x=--job.dump_folder="$BATS_TEST_TMPDIR/x"
	run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" \
		--parallelism.expert_parallel_degree=2 "$x"
	[ "$stderr" = "titan-train: error: parallelism.expert_parallel_degree 2: must divide data_parallel_shard_degree x context_parallel_degree (1 x 1)" ]
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	run -2 --separate-stderr timeout -k 5 60 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
		--config "$DATA/moe.yaml" --parallelism.expert_parallel_degree=4 "$x"
	[[ $stderr == *"titan-train: error: parallelism.expert_parallel_degree 4: must divide data_parallel_shard_degree x context_parallel_degree (2 x 1)"* ]]
	run -2 --separate-stderr timeout -k 5 60 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
		--config "$DATA/moe.yaml" --parallelism.expert_parallel_degree=2 \
		--parallelism.data_parallel_replicate_degree=2 "$x"
	[[ $stderr == *"titan-train: error: parallelism.expert_parallel_degree 2: must divide data_parallel_shard_degree x context_parallel_degree (1 x 1)"* ]]
}

@test "EP: EP x TP with expert_tensor_parallel_degree 2 is refused with exit 2 naming the key" {
	# (EP x PP and EP x CP: moe-pp-cp.bats; EP x TP: moe-ep-tp.bats)
	x=--job.dump_folder="$BATS_TEST_TMPDIR/x"
	for a in parallelism.tensor_parallel_degree=2; do
		run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" --"$a" \
			--parallelism.expert_parallel_degree=2 --parallelism.expert_tensor_parallel_degree=2 "$x"
		[[ $stderr == "titan-train: error: parallelism.expert_tensor_parallel_degree: 2 is not supported"* ]]
	done
}

# same_moe ONE RUN: RUN's losses and grad norms (steps up to 10) those of
# the 1-rank ONE at the same steps, and its expert loads ONE's last ones
same_moe() {
	run -0 same_curve "$1" "$2"
	local n
	n=$(grep -c '"moe_load"' "$2")
	diff <(grep -o '"moe_load":[^}]*}' "$1" | tail -n "$n") <(grep -o '"moe_load":[^}]*}' "$2")
}

@test "EP 2 (= FSDP 2) reproduces the 1-rank MoE curve and loads; checkpoints move between EP 2 and 1 rank" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	val="--validation.enable --validation.freq=5 --validation.steps=2"
	run -0 titan-train -q --config "$DATA/moe.yaml" --training.local_batch_size=4 \
		--training.steps=10 $ck $val --job.dump_folder="$d/one"
	run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
		--config "$DATA/moe.yaml" --training.steps=10 --parallelism.expert_parallel_degree=2 \
		$ck $val --job.dump_folder="$d/ep"
	same_moe "$d/one/metrics.jsonl" "$d/ep/metrics.jsonl"
	# the validation forwards dispatch too: the same validation losses
	run -0 /usr/bin/python3 -c '
import json, sys
v = [[o["validation_loss"] for o in map(json.loads, open(f)) if "validation_loss" in o]
     for f in sys.argv[1:]]
assert len(v[0]) >= 2 and len(v[0]) == len(v[1]), v
assert all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(*v)), v' \
		"$d/one/metrics.jsonl" "$d/ep/metrics.jsonl"
	# EP 2's step-5 checkpoint (one logical file, 3-d experts) resumed on 1 rank
	mkdir -p "$d/a/checkpoint"
	cp "$d/ep/checkpoint/step-5.h5" "$d/a/checkpoint/"
	run -0 titan-train -q --config "$DATA/moe.yaml" --training.local_batch_size=4 \
		--training.steps=10 $ck --job.dump_folder="$d/a"
	same_moe "$d/one/metrics.jsonl" "$d/a/metrics.jsonl"
	# and the 1-rank one under EP 2
	mkdir -p "$d/b/checkpoint"
	cp "$d/one/checkpoint/step-5.h5" "$d/b/checkpoint/"
	run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
		--config "$DATA/moe.yaml" --training.steps=10 --parallelism.expert_parallel_degree=2 \
		$ck --job.dump_folder="$d/b"
	same_moe "$d/one/metrics.jsonl" "$d/b/metrics.jsonl"
}

@test "EP 2 inside FSDP 4, EP 4, and DP replicate 2 x EP 2 reproduce the 1-rank MoE curve (4 ranks)" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/moe.yaml" --training.local_batch_size=8 \
		--training.steps=10 --job.dump_folder="$d/one"
	for p in "--parallelism.expert_parallel_degree=2" "--parallelism.expert_parallel_degree=4" \
		"--parallelism.expert_parallel_degree=2 --parallelism.data_parallel_replicate_degree=2"; do
		rm -rf "$d/ep"
		run -0 timeout -k 5 180 mpiexec -n 4 env OMP_NUM_THREADS=1 titan-train -q \
			--config "$DATA/moe.yaml" --training.steps=10 $p --job.dump_folder="$d/ep"
		same_moe "$d/one/metrics.jsonl" "$d/ep/metrics.jsonl"
	done
}

@test "EP 2 holds its experts only: a MoE block's gathered copy, gradient buffer and collective buffers lose E - E/ep experts; params, grads, optimizer stay FSDP 2's" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	for ep in 1 2; do
		run -0 timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
			--config "$DATA/moe.yaml" --parallelism.expert_parallel_degree=$ep \
			--profiling.enable_memory_snapshot=true --metrics.save_for_all_ranks \
			--job.dump_folder="$d/ep$ep"
	done
	# the model's experts: E 4 of F 24 x C 32 in each of w1, w2, w3.  EP 2
	# drops E - E/ep = 2 of them from a MoE block's unsharded copies (its
	# gathered parameters and gradient buffer), and its efsdp mesh is one
	# rank, so the experts leave the collectives' buffers too: FSDP 2's
	# slot of E/2 = 2 experts per rank, twice in the 2-rank buffers
	run -0 /usr/bin/python3 - "$d" $((2 * 3 * 24 * 32 * 4)) <<'PY'
import collections, json, struct, sys
d, drop = sys.argv[1], int(sys.argv[2])
def comm_allocs(ep, r):
    """step 2's comm allocations (bytes -> count) of rank r: the schedule is fixed"""
    b = open("%s/ep%d/memory_snapshot/rank%d.memtrace" % (d, ep, r), "rb").read()
    c = collections.Counter()
    for i in range(64, len(b) - 31, 32):
        kind, tag, _, step, _, nbytes, _ = struct.unpack("<BBHIQQQ", b[i:i + 32])
        if kind == 1 and tag == 4 and step == 2:
            c[nbytes] += 1
    return c
for r in range(2):
    m = [json.loads(open("%s/ep%d/%s" % (d, ep, "metrics.jsonl" if r == 0 else
                                        "metrics.rank1.jsonl")).readline())["memory_peak_by_tag"]
         for ep in (1, 2)]
    # FSDP 2 already held half the experts per rank: EP 2's half is whole experts
    for tag in ("params", "grads", "optim"):
        assert m[0][tag] == m[1][tag], (r, tag, m)
    a, b = comm_allocs(1, r), comm_allocs(2, r)
    gone, new = a - b, b - a
    # the MoE blocks' (2) buffers, FSDP 2's sizes: S (all-gather send,
    # reduce-scatter receive), 2 S (all-gather receive, reduce-scatter
    # send), the unit U (gathered copy, gradients); every other unit's stay
    s = min(gone)
    assert len(gone) == 3 and 2 * s in gone and all(n >= 2 * 2 for n in gone.values()), (r, gone)
    assert new == collections.Counter({x - drop * (2 if x == 2 * s else 1): n
                                       for x, n in gone.items()}), (r, gone, new)
    print(r, dict(gone), dict(new))
PY
}

@test "EP 2 x FSDP 2 (4 ranks) resumes its own checkpoint bit for bit, and on 1 rank on the 1-rank curve" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR ep=--parallelism.expert_parallel_degree=2
	run -0 titan-train -q --config "$DATA/moe.yaml" --training.local_batch_size=8 \
		--training.steps=10 --job.dump_folder="$d/one"
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	run -0 timeout -k 5 180 mpiexec -n 4 env OMP_NUM_THREADS=1 titan-train -q \
		--config "$DATA/moe.yaml" --training.steps=10 $ep $ck --job.dump_folder="$d/ep"
	same_moe "$d/one/metrics.jsonl" "$d/ep/metrics.jsonl"
	# each rank wrote its experts' efsdp rows: the same layout reads them back
	mkdir -p "$d/a/checkpoint"
	cp "$d/ep/checkpoint/step-5.h5" "$d/a/checkpoint/"
	run -0 timeout -k 5 180 mpiexec -n 4 env OMP_NUM_THREADS=1 titan-train -q \
		--config "$DATA/moe.yaml" --training.steps=10 $ep $ck --job.dump_folder="$d/a"
	run -0 same_curve "$d/ep/metrics.jsonl" "$d/a/metrics.jsonl" bits
	run -0 /usr/bin/python3 -c '
import h5py, numpy, sys
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
n = []
a.visititems(lambda k, v: n.append(k) if isinstance(v, h5py.Dataset) else None)
assert any("experts" in k for k in n), n
for k in n:
    assert numpy.array_equal(a[k][()], b[k][()]), k' "$d/ep/checkpoint/step-10.h5" "$d/a/checkpoint/step-10.h5"
	# and one rank reads the whole experts from it
	mkdir -p "$d/b/checkpoint"
	cp "$d/ep/checkpoint/step-5.h5" "$d/b/checkpoint/"
	run -0 titan-train -q --config "$DATA/moe.yaml" --training.local_batch_size=8 \
		--training.steps=10 $ck --job.dump_folder="$d/b"
	same_moe "$d/one/metrics.jsonl" "$d/b/metrics.jsonl"
}
