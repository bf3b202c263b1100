#!/usr/bin/env bats
# A mixture of experts under tensor parallelism (torchtitan's TP of
# GroupedExperts without EP): each TP rank holds moe_inter_dim / tp of
# every expert (w1/w3 on their hidden dim 1, w2 on its last dim) and of the
# shared experts, the router runs on the gathered tokens (replicated), the
# output's partial sums are reduce-scattered.  TP 2 (sequence parallel,
# with and without loss parallel) and TP 2 x FSDP 2 reproduce the 1-rank
# MoE curve (losses, grad norms within 1e-5, expert loads exactly: TP
# ranks see the same tokens and are not counted twice); checkpoints (one
# logical file, the 3-d experts written as TP windows) move between TP 2
# and 1 rank; EP x TP stays refused naming the key.

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus --line 'In the beginning God created the heaven and the earth. And the earth was without form, and void.' \
		c 200 600 2
	# 4 blocks: block 0 dense, then MoE (1, 2, 3) with a shared expert
	tiny_yaml "$DATA/moe.yaml" 600 32 4 4 2 <<YAML
  moe_num_experts: 4
  moe_top_k: 2
  moe_inter_dim: 24
  moe_num_shared_experts: 1
  n_dense_layers: 1
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 16
  steps: 10
metrics:
  log_freq: 1
YAML
}

setup() {
	load helpers
	load tiny
	load layouts
	DATA=$BATS_FILE_TMPDIR
}

mpi_moe() {
	local n=$1
	shift
	timeout -k 5 180 mpiexec -n "$n" env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/moe.yaml" "$@"
}

# same_moe ONE RUN: RUN's losses and grad norms those of the 1-rank ONE
# (same_curve), and its moe_load at every step ONE's, exactly
same_moe() {
	run -0 same_curve "$1" "$2"
	/usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
def load(p):
    return {o["step"]: o.get("moe_load") for o in map(json.loads, open(p)) if "loss" in o}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert len(b) == 10 or len(b) == 5, sorted(b)
for s in b:
    assert b[s] == a[s], (s, a[s], b[s])
    assert sorted(b[s]) == ["layers.1", "layers.2", "layers.3"], (s, b[s])
    assert all(v["max_tokens"] > 0 for v in b[s].values()), (s, b[s])
PY
}

@test "MoE x TP 2 (sequence parallel, loss parallel or not) reproduces the 1-rank MoE curve and loads" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/moe.yaml" --job.dump_folder="$d/one"
	tp=--parallelism.tensor_parallel_degree=2
	for p in "$tp" "$tp --parallelism.disable_loss_parallel"; do
		rm -rf "$d/l"
		run -0 mpi_moe 2 $p --job.dump_folder="$d/l"
		same_moe "$d/one/metrics.jsonl" "$d/l/metrics.jsonl"
	done
}

@test "MoE: TP 2 x FSDP 2 reproduces the 1-rank MoE curve and loads (4 ranks)" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/moe.yaml" --training.local_batch_size=4 \
		--job.dump_folder="$d/one"
	run -0 mpi_moe 4 --parallelism.tensor_parallel_degree=2 \
		--job.dump_folder="$d/l"
	same_moe "$d/one/metrics.jsonl" "$d/l/metrics.jsonl"
}

@test "MoE: checkpoints move between TP 2 and 1 rank (the 3-d experts as TP windows, checksums whole)" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	tp=--parallelism.tensor_parallel_degree=2
	run -0 titan-train -q --config "$DATA/moe.yaml" $ck --job.dump_folder="$d/one"
	run -0 mpi_moe 2 $tp $ck --job.dump_folder="$d/t"
	same_moe "$d/one/metrics.jsonl" "$d/t/metrics.jsonl"
	# TP 2's file is the 1-rank one's layout: same tensors and shapes, its
	# stored crc32c attributes those of the data
	/usr/bin/python3 -c 'import h5py' 2>/dev/null || skip "no h5py for /usr/bin/python3"
	run -0 /usr/bin/python3 - "$d/one/checkpoint/step-5.h5" "$d/t/checkpoint/step-5.h5" <<'PY'
import sys, zlib, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
for k in a["model"]:
    x, y = a["model"][k], b["model"][k]
    assert x.shape == y.shape, (k, x.shape, y.shape)
    assert np.allclose(x[()], y[()], atol=1e-4), k
w2 = b["model"]["layers.1.moe.experts.w2"]
assert w2.shape == (4, 32, 24), w2.shape
PY
	# every dataset's crc32c (the XOR of each rank's window terms) is the
	# whole tensor's
	run -0 titan-ckpt-convert info --verify --no-checksums "$d/t/checkpoint/step-5.h5"
	assert_line --regexp '^verify: +[1-9][0-9]* ok, 0 mismatched, 0 without a checksum$'
	# TP 2's step-5 checkpoint on 1 rank, the 1-rank one under TP 2
	mkdir -p "$d/a/checkpoint" "$d/b/checkpoint"
	cp "$d/t/checkpoint/step-5.h5" "$d/a/checkpoint/"
	cp "$d/one/checkpoint/step-5.h5" "$d/b/checkpoint/"
	run -0 titan-train -q --config "$DATA/moe.yaml" $ck --job.dump_folder="$d/a"
	same_moe "$d/one/metrics.jsonl" "$d/a/metrics.jsonl"
	run -0 mpi_moe 2 $tp $ck --job.dump_folder="$d/b"
	same_moe "$d/one/metrics.jsonl" "$d/b/metrics.jsonl"
}

@test "MoE: EP x TP and a TP degree not dividing moe_inter_dim are refused with exit 2 naming the key" {
	x=--job.dump_folder="$BATS_TEST_TMPDIR/x"
	run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" \
		--parallelism.tensor_parallel_degree=2 --parallelism.expert_parallel_degree=2 "$x"
	[[ $stderr == "titan-train: error: parallelism.expert_parallel_degree: 2 with parallelism.tensor_parallel_degree 2 is not supported yet"* ]]
	run -2 --separate-stderr titan-config --check --config "$DATA/moe.yaml" \
		--parallelism.tensor_parallel_degree=5 --model.moe_inter_dim=24
	[[ $stderr == *"parallelism.tensor_parallel_degree: 5 does not divide model.moe_inter_dim 24"* ]]
}
