#!/usr/bin/env bats
# Expert parallelism next to tensor parallelism (torchtitan's EP x TP with
# ETP 1): EP borrows its ranks from dp_shard x cp x tp, the EP ranks
# innermost (so EP 2 x TP 2 makes each TP group an EP group), the tokens
# are split over the TP ranks before routing (each TP rank routes its
# sequence shard to whole experts), the shared experts stay TP-split.
# EP 2 x TP 2 (4 ranks with dp_shard 2, and 2 ranks), EP 4 x TP 2 and
# EP 2 x TP 2 x CP 2 reproduce the 1-rank MoE curve (losses and grad
# norms within 1e-5, expert loads exactly); checkpoints move between
# EP 2 x TP 2 and 1 rank; titan-estimate --device cpu gives titan-train's
# memory to the byte; expert_tensor_parallel_degree > 1 (torchtitan
# removed ETP) and an EP degree that leaves an expert on several TP ranks
# with no FSDP mesh are refused with exit 2 naming the key; EP 2 x CP 2
# with dp_shard 1 dispatches over the CP ranks (ep innermost of the region).

bats_require_minimum_version 1.5.0

setup_file() {
	load moe
	moe_corpus 200
	# 3 blocks: block 0 dense, 1 and 2 MoE with a shared expert
	moe_yaml "$DATA/moe.yaml" 3 10 'moe_num_shared_experts: 1' 'n_dense_layers: 1'
}

setup() {
	load moe
	moe_setup
}

# same_moe ONE RUN: same_moe_layers with the MoE blocks 1 and 2
same_moe() { same_moe_layers "$1" "$2" 1 2; }

EP2="--parallelism.expert_parallel_degree=2"
TP2="--parallelism.tensor_parallel_degree=2"

@test "EP 2 x TP 2 (4 ranks, dp_shard 2; loss parallel or not), EP 2 x TP 2 on 2 ranks (full AC), EP 4 x TP 2 and EP 2 x TP 2 x CP 2 reproduce the 1-rank MoE curve and loads" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/moe.yaml" --job.dump_folder="$d/one"
	for p in "$EP2 $TP2 --training.local_batch_size=1" \
		"$EP2 $TP2 --training.local_batch_size=1 --parallelism.disable_loss_parallel" \
		"--parallelism.expert_parallel_degree=4 $TP2 --training.local_batch_size=1" \
		"$EP2 $TP2 --parallelism.context_parallel_degree=2 --parallelism.data_parallel_shard_degree=1"; do
		rm -rf "$d/l"
		run -0 mpi_moe 4 $p --job.dump_folder="$d/l"
		same_moe "$d/one/metrics.jsonl" "$d/l/metrics.jsonl"
	done
	# 2 ranks: the EP group is the TP group; full AC recomputes the dispatch
	rm -rf "$d/l"
	run -0 mpi_moe 2 $EP2 $TP2 --activation_checkpoint.mode=full --job.dump_folder="$d/l"
	same_moe "$d/one/metrics.jsonl" "$d/l/metrics.jsonl"
}

@test "EP 2 x TP 2: each rank holds whole experts, E/ep of them, FSDP-sharded over its efsdp peers (the checkpoint one logical file of 3-d experts)" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	run -0 mpi_moe 4 $EP2 $TP2 --training.local_batch_size=1 --training.steps=5 $ck \
		--metrics.save_for_all_ranks --job.dump_folder="$d/et"
	run -0 mpi_moe 4 $TP2 --training.local_batch_size=1 --training.steps=5 \
		--metrics.save_for_all_ranks --job.dump_folder="$d/t"
	# TP 2 x FSDP 2 holds a quarter of every expert per rank (half its
	# hidden dim, half the experts' rows); EP 2 x TP 2 whole experts, two
	# per EP rank, one per efsdp shard: the same quarter of the elements
	run -0 /usr/bin/python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]
for r in range(4):
    f = "metrics.jsonl" if r == 0 else "metrics.rank%d.jsonl" % r
    a, b = [json.loads(open("%s/%s/%s" % (d, k, f)).readline())["memory_peak_by_tag"] for k in ("et", "t")]
    assert a["params"] == b["params"] and a["optim"] == b["optim"], (r, a, b)
PY
	run -0 titan-ckpt-convert info --verify --no-checksums "$d/et/checkpoint/step-5.h5"
	assert_line --regexp '^verify: +[1-9][0-9]* ok, 0 mismatched, 0 without a checksum$'
	if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
		run -0 /usr/bin/python3 - "$d/et/checkpoint/step-5.h5" <<'PY'
import sys, h5py
m = h5py.File(sys.argv[1], "r")["model"]
assert m["layers.1.moe.experts.w1"].shape == (4, 24, 32)
assert m["layers.2.moe.experts.w2"].shape == (4, 32, 24)
assert m["layers.1.moe.shared_experts.w1.weight"].shape == (24, 32)
PY
	fi
}

@test "EP 2 x TP 2's checkpoint resumes on 1 rank on the 1-rank curve, and the 1-rank one under EP 2 x TP 2 (validation losses too)" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	val="--validation.enable --validation.freq=5 --validation.steps=2"
	run -0 titan-train -q --config "$DATA/moe.yaml" $ck $val --job.dump_folder="$d/one"
	run -0 mpi_moe 4 $EP2 $TP2 --training.local_batch_size=1 $ck $val --job.dump_folder="$d/et"
	same_moe "$d/one/metrics.jsonl" "$d/et/metrics.jsonl"
	# the validation forwards route each TP rank's shard too
	run -0 /usr/bin/python3 -c '
import json, sys
v = [[o["validation_loss"] for o in map(json.loads, open(f)) if "validation_loss" in o]
     for f in sys.argv[1:]]
assert len(v[0]) >= 2 and len(v[0]) == len(v[1]), v
assert all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(*v)), v' \
		"$d/one/metrics.jsonl" "$d/et/metrics.jsonl"
	mkdir -p "$d/a/checkpoint" "$d/b/checkpoint"
	cp "$d/et/checkpoint/step-5.h5" "$d/a/checkpoint/"
	cp "$d/one/checkpoint/step-5.h5" "$d/b/checkpoint/"
	run -0 titan-train -q --config "$DATA/moe.yaml" $ck --job.dump_folder="$d/a"
	same_moe "$d/one/metrics.jsonl" "$d/a/metrics.jsonl"
	run -0 mpi_moe 4 $EP2 $TP2 --training.local_batch_size=1 $ck --job.dump_folder="$d/b"
	same_moe "$d/one/metrics.jsonl" "$d/b/metrics.jsonl"
	# and EP 2 x TP 2 resumes its own bit for bit
	rm -rf "$d/b"
	mkdir -p "$d/b/checkpoint"
	cp "$d/et/checkpoint/step-5.h5" "$d/b/checkpoint/"
	run -0 mpi_moe 4 $EP2 $TP2 --training.local_batch_size=1 $ck --job.dump_folder="$d/b"
	run -0 same_curve "$d/et/metrics.jsonl" "$d/b/metrics.jsonl" bits
}

@test "titan-estimate --device cpu --rank R: EP 2 x TP 2's memory to the byte (4 ranks and 2)" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	# (layouts.bash est_vs_run: the first two rows' peaks, to the byte)
	EST_CONFIG=$DATA/moe.yaml
	run -0 est_vs_run 4 $EP2 $TP2 --training.steps=2 --training.local_batch_size=1
	echo "# EP 2 x TP 2 (4 ranks): ${lines[*]}" >&3
	run -0 est_vs_run 2 $EP2 $TP2 --training.steps=2 --activation_checkpoint.mode=full
	echo "# EP 2 x TP 2 (2 ranks, full AC): ${lines[*]}" >&3
}

@test "EP x TP: expert_tensor_parallel_degree > 1, an EP degree not dividing dp_shard x cp x tp, and EP < TP with one FSDP rank are refused with exit 2 naming the key" {
	x=--job.dump_folder="$BATS_TEST_TMPDIR/x"
	run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" $TP2 $EP2 \
		--parallelism.expert_tensor_parallel_degree=2 "$x"
	[ "$stderr" = "titan-train: error: parallelism.expert_tensor_parallel_degree: 2 is not supported (expert tensor parallelism, which torchtitan removed: under EP x TP every expert is whole on its EP rank, ETP 1; use 1)" ]
	run -2 --separate-stderr titan-estimate --config "$DATA/moe.yaml" --ngpu 4 --device cpu \
		--parallelism.tensor_parallel_degree=4 $EP2 --model.n_kv_heads=4
	[ "$stderr" = "titan-estimate: error: parallelism.expert_parallel_degree 2: with tensor_parallel_degree 4 and one FSDP rank (data_parallel_shard_degree x context_parallel_degree 1) it must equal tensor_parallel_degree (an expert on several TP ranks needs an efsdp mesh to sum its gradients)" ]
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	run -2 --separate-stderr timeout -k 5 60 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q \
		--config "$DATA/moe.yaml" $TP2 --parallelism.expert_parallel_degree=4 "$x"
	[[ $stderr == *"titan-train: error: parallelism.expert_parallel_degree 4: must divide data_parallel_shard_degree x context_parallel_degree x tensor_parallel_degree (1 x 1 x 2)"* ]]
	run -2 --separate-stderr timeout -k 5 60 mpiexec -n 4 env OMP_NUM_THREADS=1 titan-train -q \
		--config "$DATA/moe.yaml" --parallelism.tensor_parallel_degree=4 $EP2 \
		--model.n_kv_heads=4 "$x"
	[[ $stderr == *"titan-train: error: parallelism.expert_parallel_degree 2: with tensor_parallel_degree 4 and one FSDP rank"* ]]
}

@test "EP's groups are torchtitan's (ep innermost of dp_shard x cp x tp): EP 2 x CP 2 on 2 ranks (dp_shard 1) dispatches over the CP ranks" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	cp=--parallelism.context_parallel_degree=2
	for ep in 1 2; do
		run -0 mpi_moe 2 $cp --parallelism.expert_parallel_degree=$ep --training.steps=1 \
			--job.dump_folder="$d/ep$ep"
	done
	# an EP rank's expert rows are sized for every slot of its group
	# (titan_moe_expert_rows): more activation bytes than CP 2 alone (the
	# EP group of one rank each before, EP silently off)
	run -0 /usr/bin/python3 - "$d" <<'PY'
import json, sys
a = [json.loads(open("%s/ep%d/metrics.jsonl" % (sys.argv[1], e)).readline())["memory_peak_by_tag"]["activations"]
     for e in (1, 2)]
assert a[1] > a[0], a
PY
}
