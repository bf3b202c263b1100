#!/usr/bin/env bats
# titan-estimate's CPU model under pipeline and context parallelism: for
# every rank of a titan-train job (PP 2 with 1F1B and GPipe, PP 2 x FSDP 2,
# PP 2 x DDP 2, Interleaved1F1B alone and x FSDP 2, InterleavedZeroBubble,
# ZBVZeroBubble x FSDP 2 and x TP 2, CP 2 and CP 2 x TP 2
# with rotate_method allgather and alltoall, CP 4 alltoall, PP 2 x CP 2;
# a mixture of experts under PP 2, CP 2, EP 2, EP 2 x FSDP 2, TP 2 with
# loss parallel on and off, TP 2 x FSDP 2 and PP 2 x TP 2)
# `titan-estimate --device cpu --rank R` gives the peak measured by
# the tagged allocator and its bytes by tag, to the byte; and the stage
# split of both estimate models (--json stage_layers) is the one
# titan-train logs, for the automatic split, split points,
# layers_per_stage and ZBVZeroBubble's V-style stages.

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	[ -z "${NO_MPI:-}" ] || return 0
	tiny_corpus genesis 4000 768 40
	tiny_yaml "$DATA/tiny.yaml" 768 64 2 4 2 <<YAML
job:
  dump_folder: $DATA/out
training:
  dataset_path: $DATA/shards
  local_batch_size: 12
  global_batch_size: 12
  seq_len: 32
  steps: 2
metrics:
  log_freq: 1
  peak_flops: 1.0e+11
activation_checkpoint:
  mode: none
comm:
  init_timeout_seconds: 120
  train_timeout_seconds: 60
YAML
}

setup() {
	load helpers
	load layouts # est_vs_run
	[ -z "${NO_MPI:-}" ] || skip "no MPI in this build (or no mpiexec)"
	cd "$TITAN_SRCDIR"
}

PP2="--parallelism.pipeline_parallel_degree=2"

@test "titan-estimate --device cpu --rank R: each pipeline rank's memory to the byte (1F1B, GPipe, x FSDP 2, x DDP 2, Interleaved1F1B, zero bubble)" {
	# 1F1B, 4 microbatches of 3: the last rank holds the loss
	run -0 est_vs_run 2 $PP2 --parallelism.pipeline_parallel_microbatch_size=3
	echo "# 1F1B: ${lines[*]}" >&3
	assert_line --regexp '^rank 1: .*classifier \+ cross-entropy'
	# GPipe with full AC
	est_vs_run 2 $PP2 --parallelism.pipeline_parallel_schedule=GPipe \
		--parallelism.pipeline_parallel_microbatch_size=3 --activation_checkpoint.mode=full
	# PP 2 x FSDP 2 (1F1B): FSDP's buffers in the schedule's order
	run -0 est_vs_run 4 $PP2 --parallelism.data_parallel_shard_degree=2 --training.local_batch_size=6 \
		--parallelism.pipeline_parallel_microbatch_size=3
	echo "# PP 2 x FSDP 2: ${lines[*]}" >&3
	assert_line --regexp '^rank 0: .*FSDP gather/reduce-scatter \(backward\)'
	# PP 2 x DDP 2 (in-place all-reduce) with TP-free per-op AC
	est_vs_run 4 $PP2 --parallelism.data_parallel_replicate_degree=2 --parallelism.data_parallel_shard_degree=1 \
		--training.local_batch_size=6 --parallelism.pipeline_parallel_microbatch_size=3 \
		--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op
	# Interleaved1F1B, 2 stages per rank of 6 blocks, every second block checkpointed
	est_vs_run 2 $PP2 --parallelism.pipeline_parallel_schedule=Interleaved1F1B --model.n_layers=6 \
		--parallelism.pipeline_parallel_microbatch_size=2 --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=2
	# the zero-bubble schedules: the weight pass's stash per block and
	# microbatch; ZBV's last rank shares its two stages' boundary
	est_vs_run 2 $PP2 --parallelism.pipeline_parallel_schedule=InterleavedZeroBubble --model.n_layers=6 \
		--parallelism.pipeline_parallel_microbatch_size=2
	est_vs_run 4 $PP2 --parallelism.pipeline_parallel_schedule=ZBVZeroBubble --model.n_layers=6 \
		--parallelism.data_parallel_shard_degree=2 --training.local_batch_size=4 \
		--training.global_batch_size=8 --parallelism.pipeline_parallel_microbatch_size=1 \
		--activation_checkpoint.mode=full
	est_vs_run 4 $PP2 --parallelism.pipeline_parallel_schedule=ZBVZeroBubble --model.n_layers=6 \
		--parallelism.tensor_parallel_degree=2 --training.local_batch_size=8 --training.global_batch_size=8 \
		--parallelism.pipeline_parallel_microbatch_size=2 --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=op
	# Interleaved1F1B x FSDP 2 with merged units (one crosses the rank's stages) and full AC
	est_vs_run 4 $PP2 --parallelism.pipeline_parallel_schedule=Interleaved1F1B --model.n_layers=6 \
		--parallelism.data_parallel_shard_degree=2 --training.local_batch_size=4 \
		--training.global_batch_size=8 --parallelism.pipeline_parallel_microbatch_size=1 \
		--activation_checkpoint.mode=full --comm.bucket_size_mb=0.05
}

@test "titan-estimate --device cpu --rank R: each rank's memory to the byte under CP (allgather and alltoall; 2, 4, x TP 2, x PP 2)" {
	# CP 2 alone: FSDP shards over the CP group
	run -0 est_vs_run 2 --parallelism.context_parallel_degree=2
	echo "# CP 2: ${lines[*]}" >&3
	# CP 2 x TP 2, full AC
	run -0 est_vs_run 4 --parallelism.context_parallel_degree=2 --parallelism.tensor_parallel_degree=2 \
		--activation_checkpoint.mode=full
	echo "# CP 2 x TP 2: ${lines[*]}" >&3
	# ... with 8 threads a rank, per-op AC, never resharded: the peak is the
	# attention kernel's tiles on the two query chunks
	THREADS=8 run -0 est_vs_run 4 --parallelism.context_parallel_degree=2 --parallelism.tensor_parallel_degree=2 \
		--training.seq_len=256 --training.local_batch_size=2 --training.global_batch_size=2 \
		--parallelism.fsdp_reshard_after_forward=never --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=op
	assert_line --regexp '^rank 3: .*\(attention backward\)'
	# PP 2 (Interleaved1F1B) x CP 2
	est_vs_run 4 $PP2 --parallelism.pipeline_parallel_schedule=Interleaved1F1B --model.n_layers=6 \
		--parallelism.context_parallel_degree=2 --training.local_batch_size=8 \
		--training.global_batch_size=8 --parallelism.pipeline_parallel_microbatch_size=2
	# rotate_method alltoall: the ring's buffers, allocated per call
	run -0 est_vs_run 2 --parallelism.context_parallel_degree=2 \
		--parallelism.context_parallel_rotate_method=alltoall --activation_checkpoint.mode=full
	echo "# CP 2 alltoall: ${lines[*]}" >&3
	est_vs_run 4 --parallelism.context_parallel_degree=4 --parallelism.context_parallel_rotate_method=alltoall \
		--training.local_batch_size=3 --training.global_batch_size=3
	est_vs_run 4 --parallelism.context_parallel_degree=2 --parallelism.context_parallel_rotate_method=alltoall \
		--parallelism.tensor_parallel_degree=2 --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=op
}

@test "titan-estimate --device cpu --rank R: block_causal's document ids counted by both, to the byte (1 rank, CP 2 allgather and alltoall, PP 2)" {
	local bc=--training.attn_mask_type=block_causal
	# the document ids are the model's (its buffer plan): sequence order and
	# CP's local order, an int32 a token each, of the 12 x 32 microbatch
	titan-estimate --config "$DATA/tiny.yaml" --device cpu --json $bc > "$BATS_TEST_TMPDIR/bc.json"
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/bc.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["ranks"][0]
it = [i for i in r["items"] if i["name"] == "block_causal: document ids"]
assert it and it[0]["tag"] == "data" and it[0]["bytes"] == 2 * 12 * 32 * 4, r["items"]
PY
	run -0 est_vs_run 1 $bc
	echo "# block_causal: ${lines[*]}" >&3
	run -0 est_vs_run 2 $bc --parallelism.context_parallel_degree=2
	echo "# block_causal CP 2: ${lines[*]}" >&3
	run -0 est_vs_run 2 $bc --parallelism.context_parallel_degree=2 \
		--parallelism.context_parallel_rotate_method=alltoall
	echo "# block_causal CP 2 alltoall: ${lines[*]}" >&3
	run -0 est_vs_run 2 $bc $PP2 --parallelism.pipeline_parallel_microbatch_size=3
	echo "# block_causal PP 2: ${lines[*]}" >&3
}

MOE="--model.moe_num_experts=4 --model.moe_top_k=2 --model.moe_inter_dim=48"

@test "titan-estimate --device cpu --rank R: a mixture of experts' memory to the byte under PP and CP (1F1B, Interleaved1F1B; allgather, alltoall)" {
	# the MoE's router and expert rows are the model's buffer plan of each
	# stage (worst case: every slot's row), its scratch shared by the blocks
	run -0 est_vs_run 2 $MOE $PP2 --parallelism.pipeline_parallel_microbatch_size=3
	echo "# MoE PP 2 1F1B: ${lines[*]}" >&3
	est_vs_run 2 $MOE $PP2 --parallelism.pipeline_parallel_schedule=Interleaved1F1B --model.n_layers=6 \
		--model.n_dense_layers=1 --parallelism.pipeline_parallel_microbatch_size=2 \
		--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=2
	# CP 2: each rank routes its own S / cp tokens; FSDP over the CP group
	run -0 est_vs_run 2 $MOE --parallelism.context_parallel_degree=2
	echo "# MoE CP 2: ${lines[*]}" >&3
	est_vs_run 2 $MOE --parallelism.context_parallel_degree=2 \
		--parallelism.context_parallel_rotate_method=alltoall --activation_checkpoint.mode=full
}

@test "titan-estimate --device cpu --rank R: expert parallelism's memory to the byte (EP 2, EP 2 x FSDP 2)" {
	# EP 2: each rank holds 2 of the 4 experts, its dispatch buffers sized
	# for the worst case (every slot of the EP group at its experts)
	run -0 est_vs_run 2 $MOE --parallelism.expert_parallel_degree=2 --training.local_batch_size=6
	echo "# MoE EP 2: ${lines[*]}" >&3
	# EP 2 x FSDP 2: the experts sharded over the efsdp peers
	run -0 est_vs_run 4 $MOE --parallelism.expert_parallel_degree=2 \
		--training.local_batch_size=3 --training.global_batch_size=12
	echo "# MoE EP 2 x FSDP 2: ${lines[*]}" >&3
}

@test "titan-estimate --device cpu --rank R: a mixture of experts under TP to the byte (TP 2 loss parallel or not, TP 2 x FSDP 2, PP 2 x TP 2)" {
	local tp=--parallelism.tensor_parallel_degree=2
	# TP 2 (sequence parallel): each rank holds moe_inter_dim / 2 of every
	# expert and of the shared one, the router replicated, the tokens
	# all-gathered before the router and the partial sums reduce-scattered
	run -0 est_vs_run 2 $MOE $tp
	echo "# MoE TP 2: ${lines[*]}" >&3
	run -0 est_vs_run 2 $MOE $tp --parallelism.disable_loss_parallel --activation_checkpoint.mode=full
	echo "# MoE TP 2 no loss parallel: ${lines[*]}" >&3
	# TP 2 x FSDP 2 and PP 2 x TP 2
	run -0 est_vs_run 4 $MOE $tp --parallelism.data_parallel_shard_degree=2 --training.local_batch_size=6 \
		--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op
	echo "# MoE TP 2 x FSDP 2: ${lines[*]}" >&3
	run -0 est_vs_run 4 $MOE $tp $PP2 --training.local_batch_size=6 --training.global_batch_size=6 \
		--parallelism.pipeline_parallel_microbatch_size=3
	echo "# MoE PP 2 x TP 2: ${lines[*]}" >&3
}

# stages_vs_log N ARGS...: titan-train's log of its stages ("Pipeline stage
# S of T (rank R): layers A-B") against --json stage_layers of the CPU
# model (each rank) and of the GPU model (every pipeline rank at once)
stages_vs_log() {
	local n=$1 o=$BATS_TEST_TMPDIR/s$1
	shift
	rm -rf "$o"
	timeout -k 5 300 mpiexec -n "$n" env OMP_NUM_THREADS=1 titan-train --log-rank all --config "$DATA/tiny.yaml" \
		--training.steps=1 --job.dump_folder="$o" "$@" > "$o.log" 2>&1 || { cat "$o.log"; return 1; }
	titan-estimate --config "$DATA/tiny.yaml" --ngpu "$n" --json "$@" > "$o.gpu.json"
	for ((r = 0; r < n; r++)); do
		titan-estimate --config "$DATA/tiny.yaml" --device cpu --ngpu "$n" --rank "$r" --json "$@" \
			> "$o.cpu$r.json"
	done
	/usr/bin/python3 - "$o" "$n" <<'PY'
import json, re, sys
o, n = sys.argv[1], int(sys.argv[2])
log = {}
for m in re.finditer(r"Pipeline stage (\d+) of (\d+) \(rank (\d+)\): layers (\d+)-(\d+)", open(o + ".log").read()):
    s, _, r, a, b = map(int, m.groups())
    log.setdefault(r, {})[s] = [a, b + 1]
assert log, "no stage lines in the log"
want = {r: [v[s] for s in sorted(v)] for r, v in log.items()}
gpu = json.load(open(o + ".gpu.json"))
assert len(gpu["ranks"]) == len(want), (len(gpu["ranks"]), want)
for rank in gpu["ranks"]:
    assert rank["stage_layers"] == want[rank["stage"]], ("gpu", rank["stage"], rank["stage_layers"], want)
for r in range(n):
    er = json.load(open("%s.cpu%d.json" % (o, r)))["ranks"][0]
    assert er["stage_layers"] == want[er["stage"]], ("cpu", r, er["stage_layers"], want)
print(" ".join("rank %d: %s" % (r, want[r]) for r in sorted(want)))
PY
}

@test "the estimate's stage split is titan-train's: automatic, split points, layers_per_stage, ZBV" {
	# 6 blocks on 4 stages: 1+2+2+1 with the embedding and the output
	run -0 stages_vs_log 4 --parallelism.pipeline_parallel_degree=4 --model.n_layers=6 \
		--parallelism.pipeline_parallel_microbatch_size=3
	echo "# auto: $output" >&3
	assert_output "rank 0: [[0, 1]] rank 1: [[1, 3]] rank 2: [[3, 5]] rank 3: [[5, 6]]"
	# explicit split points
	run -0 stages_vs_log 2 $PP2 --model.n_layers=5 --parallelism.pipeline_parallel_microbatch_size=3 \
		--parallelism.pipeline_parallel_split_points=layers.4
	echo "# split points: $output" >&3
	assert_output "rank 0: [[0, 4]] rank 1: [[4, 5]]"
	# Interleaved1F1B: 3 stages per rank from layers_per_stage
	run -0 stages_vs_log 2 $PP2 --parallelism.pipeline_parallel_schedule=Interleaved1F1B \
		--model.n_layers=10 --parallelism.pipeline_parallel_layers_per_stage=2 \
		--parallelism.pipeline_parallel_microbatch_size=2
	echo "# layers_per_stage: $output" >&3
	assert_output "rank 0: [[0, 1], [3, 5], [7, 9]] rank 1: [[1, 3], [5, 7], [9, 10]]"
	# ZBVZeroBubble: V style, rank r holds stages r and 2·pp − 1 − r
	run -0 stages_vs_log 2 $PP2 --parallelism.pipeline_parallel_schedule=ZBVZeroBubble \
		--model.n_layers=6 --parallelism.pipeline_parallel_microbatch_size=3
	echo "# ZBV: $output" >&3
	assert_output "rank 0: [[0, 1], [5, 6]] rank 1: [[1, 3], [3, 5]]"
}
