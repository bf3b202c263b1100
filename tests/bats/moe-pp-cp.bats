#!/usr/bin/env bats
# A mixture of experts under context, pipeline and tensor parallelism: CP
# 2 (both rotate methods, and EP 2 over the CP ranks) routes each rank's
# own tokens; PP 2 (1F1B, GPipe, Interleaved1F1B; x EP 2 and x FSDP 2 on 4
# ranks) gives each stage its MoE layers; TP 2 (torchtitan's TP of the
# experts without EP: each rank holds moe_inter_dim / 2 of every expert
# and of the shared expert, the router runs on the gathered tokens, the
# output's partial sums are reduce-scattered; x FSDP 2, x PP 2, x CP 2 on
# 4 ranks).  Each reproduces the 1-rank MoE curve (losses, grad norms
# within 1e-5, expert loads exactly: the token counts summed over dp x cp,
# not over the TP ranks that route the same tokens, and gathered from
# every stage); PP 2 and TP 2 checkpoints (the 3-d experts written as TP
# windows of their hidden dim) resume on 1 rank and the reverse; expert
# tensor parallelism (EP x TP itself: moe-ep-tp.bats) and a TP degree not
# dividing moe_inter_dim stay refused with exit 2 naming the key (the
# zero-bubble schedules run: moe-zb.bats).

bats_require_minimum_version 1.5.0

setup_file() {
	load moe
	moe_pp_setup_file # blocks 1, 3, 5 MoE of 6
}

setup() {
	load moe
	moe_setup
}

# same_moe ONE RUN: same_moe_layers with the MoE blocks 1, 3 and 5
same_moe() { same_moe_layers "$1" "$2" 1 3 5; }

# moe_layouts N ONE ARGS...: each ARGS (words) on N ranks reproduces the
# 1-rank ONE (same_moe)
moe_layouts() { each_layout mpi_moe same_moe "$@"; }

# cross_resume D RUN ONE LAYOUT: D/RUN's step-5 checkpoint resumed on 1
# rank (args ONE, in D/a) and D/one's on 2 ranks (args LAYOUT, in D/b),
# each on D/one's curve (same_moe)
cross_resume() {
	local d=$1
	mkdir -p "$d/a/checkpoint" "$d/b/checkpoint"
	cp "$d/$2/checkpoint/step-5.h5" "$d/a/checkpoint/"
	cp "$d/one/checkpoint/step-5.h5" "$d/b/checkpoint/"
	run -0 titan-train -q --config "$DATA/moe.yaml" $3 --job.dump_folder="$d/a"
	same_moe "$d/one/metrics.jsonl" "$d/a/metrics.jsonl"
	run -0 mpi_moe 2 $4 --job.dump_folder="$d/b"
	same_moe "$d/one/metrics.jsonl" "$d/b/metrics.jsonl"
}

@test "MoE x CP 2 (allgather, alltoall) and EP 2 x CP 2 reproduce the 1-rank MoE curve and loads" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/moe.yaml" --job.dump_folder="$d/one"
	cp=--parallelism.context_parallel_degree=2
	moe_layouts 2 "$d/one/metrics.jsonl" "$cp" "$cp --parallelism.context_parallel_rotate_method=alltoall" \
		"$cp --parallelism.expert_parallel_degree=2"
}

@test "MoE x PP 2 (1F1B, GPipe, Interleaved1F1B, with full AC) reproduces the 1-rank MoE curve and loads; checkpoints move between PP 2 and 1 rank" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	pp="--parallelism.pipeline_parallel_degree=2 --parallelism.pipeline_parallel_schedule"
	run -0 titan-train -q --config "$DATA/moe.yaml" $ck --job.dump_folder="$d/one"
	moe_layouts 2 "$d/one/metrics.jsonl" "$pp=GPipe" "$pp=Interleaved1F1B" \
		"$pp=Interleaved1F1B --activation_checkpoint.mode=full"
	run -0 mpi_moe 2 $pp=1F1B $ck --job.dump_folder="$d/p"
	same_moe "$d/one/metrics.jsonl" "$d/p/metrics.jsonl"
	# PP 2's step-5 checkpoint (every stage's expert_bias in one file) on
	# 1 rank, and the 1-rank one under Interleaved1F1B
	cross_resume "$d" p "$ck" "$pp=Interleaved1F1B $ck"
}

@test "MoE: PP 2 x EP 2 (dp_shard 2), PP 2 x FSDP 2, Interleaved1F1B x EP 2, TP 2 x FSDP 2, PP 2 x TP 2 and CP 2 x TP 2 reproduce the 1-rank MoE curve (4 ranks)" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	run -0 titan-train -q --config "$DATA/moe.yaml" --training.local_batch_size=4 \
		--job.dump_folder="$d/one"
	pp=--parallelism.pipeline_parallel_degree=2
	moe_layouts 4 "$d/one/metrics.jsonl" "$pp --parallelism.expert_parallel_degree=2" "$pp" \
		"$pp --parallelism.expert_parallel_degree=2 --parallelism.pipeline_parallel_schedule=Interleaved1F1B"
	# TP 2 with dp_shard 2, or with PP 2 or CP 2 (one data-parallel rank)
	tp=--parallelism.tensor_parallel_degree=2
	moe_layouts 4 "$d/one/metrics.jsonl" "$tp" "$tp $pp --training.local_batch_size=4" \
		"$tp --parallelism.context_parallel_degree=2 --training.local_batch_size=4"
}

@test "MoE x TP 2 (sequence parallel, loss parallel or not, a shared expert) reproduces the 1-rank MoE curve and loads; checkpoints move between TP 2 and 1 rank" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	sh=--model.moe_num_shared_experts=1
	tp=--parallelism.tensor_parallel_degree=2
	run -0 titan-train -q --config "$DATA/moe.yaml" $sh $ck --job.dump_folder="$d/one"
	moe_layouts 2 "$d/one/metrics.jsonl" "$sh $tp --parallelism.disable_loss_parallel"
	run -0 mpi_moe 2 $sh $tp $ck --job.dump_folder="$d/t"
	same_moe "$d/one/metrics.jsonl" "$d/t/metrics.jsonl"
	# one logical file: every dataset's crc32c (the XOR of the TP ranks'
	# window terms) the whole tensor's; the shapes those of the 1-rank file
	run -0 titan-ckpt-convert info --verify --no-checksums "$d/t/checkpoint/step-5.h5"
	assert_line --regexp '^verify: +[1-9][0-9]* ok, 0 mismatched, 0 without a checksum$'
	if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
		run -0 /usr/bin/python3 - "$d/one/checkpoint/step-5.h5" "$d/t/checkpoint/step-5.h5" <<'PY'
import sys, h5py
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert sorted(a["model"]) == sorted(b["model"])
for k in a["model"]:
    assert a["model"][k].shape == b["model"][k].shape, k
assert b["model"]["layers.1.moe.experts.w2"].shape == (4, 32, 24)
assert b["model"]["layers.1.moe.experts.w1"].shape == (4, 24, 32)
PY
	fi
	# TP 2's step-5 checkpoint on 1 rank, the 1-rank one under TP 2
	cross_resume "$d" t "$sh $ck" "$sh $tp $ck"
}

@test "MoE: EP x TP with ETP 2 and TP not dividing moe_inter_dim are refused with exit 2 naming the key; the zero-bubble schedules pass the check" {
	x=--job.dump_folder="$BATS_TEST_TMPDIR/x"
	for s in InterleavedZeroBubble ZBVZeroBubble; do # their runs: moe-zb.bats
		run -0 titan-config --check --config "$DATA/moe.yaml" \
			--parallelism.pipeline_parallel_degree=2 --parallelism.pipeline_parallel_schedule=$s
	done
	run -2 --separate-stderr titan-train -q --config "$DATA/moe.yaml" \
		--parallelism.tensor_parallel_degree=2 --parallelism.expert_parallel_degree=2 \
		--parallelism.expert_tensor_parallel_degree=2 "$x"
	[[ $stderr == "titan-train: error: parallelism.expert_tensor_parallel_degree: 2 is not supported"* ]]
	run -2 --separate-stderr titan-config --check --config "$DATA/moe.yaml" \
		--parallelism.tensor_parallel_degree=5
	[[ $stderr == *"parallelism.tensor_parallel_degree: 5 does not divide model.moe_inter_dim 24"* ]]
}
