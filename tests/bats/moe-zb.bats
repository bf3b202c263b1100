#!/usr/bin/env bats
# A mixture of experts under the zero-bubble pipeline schedules
# (InterleavedZeroBubble, ZBVZeroBubble): the MoE backward split into an
# input pass (the gradients through the router's gate, the routed experts'
# grouped GEMMs and the shared experts; the operands of their weight
# gradients stashed, under full AC copies of the recomputed ones) and a
# deferred weight pass per (stage, microbatch).  PP 2 on 2 ranks (6 blocks,
# MoE blocks 1, 3, 5 with a shared expert; 4 stages) equals Interleaved1F1B
# bit for bit (losses, grad norms; expert loads exactly: counted once per
# microbatch) with AC none, full and per-op, DeepSeek-V3 (MLA and MoE)
# with AC none and selective 2, PP 2 x TP 2 (the experts' hidden dim
# split); PP 2 x EP 2 on 4 ranks (the stash holds the rows this rank's
# experts computed) within 1e-5, as FSDP 2 under zero bubble; titan-estimate
# --device cpu counts the stash to the byte.

bats_require_minimum_version 1.5.0

setup_file() {
	load moe
	moe_pp_setup_file 'moe_num_shared_experts: 1' # blocks 1, 3, 5 MoE of 6
	# DeepSeek-V3's tiny flavor (MLA, sigmoid routing, a shared expert,
	# block 0 dense) with 6 blocks
	moe_train_yaml 10 | ds_yaml "$DATA/ds.yaml" 'n_layers: 6'
}

setup() {
	load moe
	moe_setup
	[ -z "${NO_MPI:-}" ] || skip "no MPI in this build (or no mpiexec)"
}

PP=--parallelism.pipeline_parallel_degree=2
S=--parallelism.pipeline_parallel_schedule

# zb_equal N ARGS...: on N ranks, InterleavedZeroBubble and ZBVZeroBubble
# with ARGS equal Interleaved1F1B with ARGS bit for bit, expert loads too
# (TOL=1: within same_curve's 1e-5, for data-parallel layouts; CFG: the
# config, $DATA/moe.yaml by default; LAYERS: its MoE blocks, 1 3 5)
zb_equal() {
	local n=$1 o=$BATS_TEST_TMPDIR s b=bits
	shift
	[ -z "${TOL:-}" ] || b=
	rm -rf "$o/i"
	run -0 mpi_moe "$n" $PP $S=Interleaved1F1B "$@" --job.dump_folder="$o/i"
	for s in InterleavedZeroBubble ZBVZeroBubble; do
		rm -rf "$o/z"
		run -0 mpi_moe "$n" $PP $S=$s "$@" --job.dump_folder="$o/z"
		run -0 same_curve "$o/i/metrics.jsonl" "$o/z/metrics.jsonl" $b
		echo "# $s $*: $output" >&3
		# shellcheck disable=SC2086
		same_moe_layers "$o/i/metrics.jsonl" "$o/z/metrics.jsonl" ${LAYERS:-1 3 5}
	done
}

@test "MoE: InterleavedZeroBubble and ZBVZeroBubble on PP 2 equal Interleaved1F1B bit for bit" {
	zb_equal 2
}

@test "MoE: the zero-bubble schedules with full and per-op activation checkpointing equal Interleaved1F1B bit for bit" {
	zb_equal 2 --activation_checkpoint.mode=full
	zb_equal 2 --activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op
}

@test "deepseek_v3 (MLA and MoE): the zero-bubble schedules with AC none and selective 2 equal Interleaved1F1B bit for bit" {
	CFG=$DATA/ds.yaml LAYERS="1 2 3 4 5" zb_equal 2
	CFG=$DATA/ds.yaml LAYERS="1 2 3 4 5" zb_equal 2 --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=2
}

# EP 2 borrows dp_shard 2, and under FSDP 2 the zero-bubble curve is
# Interleaved1F1B's within 1e-5, not bit for bit (a dense model's too:
# FSDP reduces a stage's gradients at its last weight pass)
@test "MoE: the zero-bubble schedules on PP 2 x EP 2 (4 ranks), AC none and full, equal Interleaved1F1B (1e-5; loads exactly); on PP 2 x TP 2 bit for bit" {
	TOL=1 zb_equal 4 --parallelism.expert_parallel_degree=2 --training.local_batch_size=4
	TOL=1 zb_equal 4 --parallelism.expert_parallel_degree=2 --training.local_batch_size=4 \
		--activation_checkpoint.mode=full
	zb_equal 4 --parallelism.tensor_parallel_degree=2
}

@test "MoE: titan-estimate --device cpu counts the zero-bubble MoE stash to the byte (PP 2, full AC)" {
	EST_CONFIG=$DATA/moe.yaml run -0 est_vs_run 2 $PP $S=ZBVZeroBubble --activation_checkpoint.mode=full \
		--training.steps=2
	echo "# $output" >&3
}
