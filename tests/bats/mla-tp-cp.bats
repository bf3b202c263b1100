#!/usr/bin/env bats
# DeepSeek-V3's multi-head latent attention (model.name deepseek_v3) under
# tensor and context parallelism, as torchtitan's deepseek_v3 plan: wq /
# wq_b and wkv_b colwise (each TP rank holds n_heads / tp heads), wq_a,
# wkv_a, q_norm and kv_norm whole on every rank (their gradients summed
# over the TP group), wo rowwise with sequence parallelism; CP rotates the
# YaRN RoPE rows to each rank's load-balanced chunks and runs the
# attention on q/k of nope + rope dims with v zero-padded to them.  TP 2
# (loss parallel or not), CP 2 (allgather, alltoall), TP 2 x FSDP 2 and
# CP 2 x TP 2 reproduce the 1-rank curve (losses and grad norms within
# 1e-5); TP 2 checkpoints resume on 1 rank and the reverse; per-op
# activation checkpointing changes no bit; the zero-bubble schedules'
# weight pass (MLA's projections and latent norms from its stash) equals
# Interleaved1F1B bit for bit (titan-estimate --device cpu under these
# layouts: deepseek_v3.bats).

bats_require_minimum_version 1.5.0

setup_file() {
	load moe
	moe_corpus 400
	# titan's tiny flavor: 4 heads, q_lora_rank 32, kv_lora_rank 32,
	# nope 16 + rope 8, v 16; 8 experts top-2 + 1 shared, block 0 dense
	moe_train_yaml 10 2 | ds_yaml "$DATA/ds.yaml"
}

setup() {
	load moe
	moe_setup
}

# ds_layouts N ONE ARGS...: each ARGS (words) on N ranks reproduces the
# 1-rank ONE (same_curve)
ds_layouts() { each_layout mpi_ds same_ds "$@"; }

# same_ds ONE RUN: same_curve, passing
same_ds() { run -0 same_curve "$1" "$2"; }

@test "MLA x TP 2 (loss parallel or not) and x CP 2 (allgather, alltoall) reproduce the 1-rank curve" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	tp=--parallelism.tensor_parallel_degree=2
	cp=--parallelism.context_parallel_degree=2
	run -0 titan-train -q --config "$DATA/ds.yaml" --job.dump_folder="$d/one"
	ds_layouts 2 "$d/one/metrics.jsonl" "$tp" "$tp --parallelism.disable_loss_parallel" \
		"$cp" "$cp --parallelism.context_parallel_rotate_method=alltoall"
	# torchtitan's debugmodel's form: no q LoRA (wq colwise), dense blocks
	rm -rf "$d/one"
	x="--model.q_lora_rank=0 --model.moe_num_experts=0"
	run -0 titan-train -q --config "$DATA/ds.yaml" $x --job.dump_folder="$d/one"
	ds_layouts 2 "$d/one/metrics.jsonl" "$x $tp" "$x $cp --parallelism.context_parallel_rotate_method=alltoall"
}

@test "MLA: TP 2 x FSDP 2 and CP 2 x TP 2 (both rotate methods) reproduce the 1-rank curve (4 ranks)" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	tp=--parallelism.tensor_parallel_degree=2
	cp=--parallelism.context_parallel_degree=2
	run -0 titan-train -q --config "$DATA/ds.yaml" --training.local_batch_size=4 \
		--job.dump_folder="$d/one"
	ds_layouts 4 "$d/one/metrics.jsonl" "$tp --parallelism.data_parallel_shard_degree=2" \
		"$tp $cp --training.local_batch_size=4" \
		"$tp $cp --parallelism.context_parallel_rotate_method=alltoall --training.local_batch_size=4"
}

@test "MLA x TP 2: the checkpoint is the 1-rank file's tensors; it resumes on 1 rank, the 1-rank one under TP 2, on the curve" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	ck="--checkpoint.enable --checkpoint.interval=5 --checkpoint.last_save_model_only=false"
	tp=--parallelism.tensor_parallel_degree=2
	run -0 titan-train -q --config "$DATA/ds.yaml" $ck --job.dump_folder="$d/one"
	run -0 mpi_ds 2 $tp $ck --job.dump_folder="$d/t"
	run -0 same_curve "$d/one/metrics.jsonl" "$d/t/metrics.jsonl"
	# one logical file (every dataset's crc32c the whole tensor's): the
	# heads' windows of wq_b, wkv_b and wo in place, the replicated
	# low-rank weights whole, each tensor the 1-rank run's within 1e-5
	run -0 titan-ckpt-convert info --verify --no-checksums "$d/t/checkpoint/step-5.h5"
	assert_line --regexp '^verify: +[1-9][0-9]* ok, 0 mismatched, 0 without a checksum$'
	if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
		run -0 /usr/bin/python3 - "$d/one/checkpoint/step-5.h5" "$d/t/checkpoint/step-5.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r")["model"], h5py.File(sys.argv[2], "r")["model"]
assert list(a) == list(b)
assert b["layers.1.attention.wkv_b.weight"].shape == (4 * (16 + 16), 32)
for k in a:
    x, y = a[k][...], b[k][...]
    assert x.shape == y.shape, k
    assert np.abs(x - y).max() <= 1e-5 * max(np.abs(x).max(), 1e-30), (k, np.abs(x - y).max())
PY
	fi
	mkdir -p "$d/a/checkpoint" "$d/b/checkpoint"
	cp "$d/t/checkpoint/step-5.h5" "$d/a/checkpoint/"
	cp "$d/one/checkpoint/step-5.h5" "$d/b/checkpoint/"
	run -0 titan-train -q --config "$DATA/ds.yaml" $ck --job.dump_folder="$d/a"
	run -0 same_curve "$d/one/metrics.jsonl" "$d/a/metrics.jsonl"
	run -0 mpi_ds 2 $tp $ck --job.dump_folder="$d/b"
	run -0 same_curve "$d/one/metrics.jsonl" "$d/b/metrics.jsonl"
	# TP 2 resuming its own step-5 checkpoint: bit for bit
	mkdir -p "$d/c/checkpoint"
	cp "$d/t/checkpoint/step-5.h5" "$d/c/checkpoint/"
	run -0 mpi_ds 2 $tp $ck --job.dump_folder="$d/c"
	run -0 same_curve "$d/t/metrics.jsonl" "$d/c/metrics.jsonl" bits
}

@test "MLA with per-op activation checkpointing (selective 'op'): no bit changes on 1 rank; TP 2 on the curve" {
	d=$BATS_TEST_TMPDIR
	op="--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op"
	for x in "" "--model.q_lora_rank=0"; do
		rm -rf "$d/a" "$d/b"
		run -0 titan-train -q --config "$DATA/ds.yaml" $x --job.dump_folder="$d/a"
		run -0 titan-train -q --config "$DATA/ds.yaml" $x $op --job.dump_folder="$d/b"
		run -0 same_curve "$d/a/metrics.jsonl" "$d/b/metrics.jsonl" bits
	done
	[ -z "${NO_MPI:-}" ] || return 0
	ds_layouts 2 "$d/a/metrics.jsonl" "--model.q_lora_rank=0 $op --parallelism.tensor_parallel_degree=2"
}

@test "MLA under the zero-bubble schedules: InterleavedZeroBubble and ZBVZeroBubble equal Interleaved1F1B bit for bit (AC none, full, op; no q LoRA); x TP 2 on the curve" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI"
	d=$BATS_TEST_TMPDIR
	# dense blocks (a MoE refuses the split backward), 6 of them: PP 2 x 2
	# stages a rank
	x="--model.moe_num_experts=0 --model.n_layers=6"
	pp="--parallelism.pipeline_parallel_degree=2 --parallelism.pipeline_parallel_schedule"
	op="--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op"
	for q in "" "--model.q_lora_rank=0"; do
		rm -rf "$d/one" "$d/i"
		run -0 titan-train -q --config "$DATA/ds.yaml" $x $q --job.dump_folder="$d/one"
		run -0 mpi_ds 2 $x $q $pp=Interleaved1F1B --job.dump_folder="$d/i"
		run -0 same_curve "$d/one/metrics.jsonl" "$d/i/metrics.jsonl"
		for z in "$pp=InterleavedZeroBubble" "$pp=ZBVZeroBubble" \
			"$pp=InterleavedZeroBubble --activation_checkpoint.mode=full" "$pp=ZBVZeroBubble $op"; do
			rm -rf "$d/z"
			run -0 mpi_ds 2 $x $q $z --job.dump_folder="$d/z"
			run -0 same_curve "$d/i/metrics.jsonl" "$d/z/metrics.jsonl" bits
		done
	done
	run -0 titan-train -q --config "$DATA/ds.yaml" $x --training.local_batch_size=4 --job.dump_folder="$d/four"
	ds_layouts 4 "$d/four/metrics.jsonl" \
		"$x $pp=InterleavedZeroBubble --parallelism.tensor_parallel_degree=2 --training.local_batch_size=4"
}
