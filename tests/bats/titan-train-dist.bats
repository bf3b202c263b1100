#!/usr/bin/env bats
# titan-train on several ranks under MPICH's mpiexec (oversubscribed on the
# machine's cores, a tiny model): DDP, FSDP (uneven shards), HSDP give the
# 1-rank losses and grad norms; checkpoints reshard across layouts; memory
# per rank is 1/N under FSDP; a dead or stopped rank ends the job with a
# message instead of a hang; SIGTERM checkpoints and exits 143.

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	[ -z "${NO_MPI:-}" ] || return 0
	tiny_corpus --bible genesis 4000 768 40
	# 2 blocks of width 64 (4 heads, 2 kv heads: wq 64 rows, wk/wv 32 rows,
	# so 3 shards are uneven: 22/22/20 and 11/11/10 rows); a global batch of
	# 12 sequences that every layout below divides
	tiny_yaml "$DATA/tiny.yaml" 768 64 2 4 2 <<YAML
job:
  dump_folder: $DATA/out
optimizer:
  lr: 3.0e-3
lr_scheduler:
  warmup_steps: 2
training:
  dataset_path: $DATA/shards
  local_batch_size: 12
  global_batch_size: 12
  seq_len: 32
  steps: 10
metrics:
  log_freq: 1
  peak_flops: 1.0e+11
activation_checkpoint:
  mode: none
comm:
  init_timeout_seconds: 120
  train_timeout_seconds: 60
YAML
	# the 1-rank reference
	titan-train -q --threads 1 --config "$DATA/tiny.yaml" --job.dump_folder="$DATA/ref"
}

setup() {
	load helpers
	load tiny
	[ -z "${NO_MPI:-}" ] || skip "no MPI in this build (or no mpiexec)"
	cd "$TITAN_SRCDIR"
}

# mpi N ARGS...: titan-train on N ranks (tiny_mpi)
mpi() { tiny_mpi "$@"; }

# same_curve A.jsonl B.jsonl [FIRST LAST]: losses and grad norms of steps
# FIRST..LAST equal within 1e-5 relative
same_curve() { /usr/bin/python3 - "$@" <<'PY'
import json, sys
def load(p):
    return {o["step"]: o for o in map(json.loads, open(p)) if "loss" in o}
a, b = load(sys.argv[1]), load(sys.argv[2])
first, last = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 3 else (1, 10)
worst = 0.0
for s in range(first, last + 1):
    assert s in a and s in b, ("missing step", s, sorted(a), sorted(b))
    for k in ("loss", "grad_norm"):
        x, y = a[s][k], b[s][k]
        rel = abs(x - y) / max(abs(x), 1e-30)
        worst = max(worst, rel)
        assert rel <= 1e-5, (s, k, x, y, rel)
print("worst relative difference %.2e" % worst)
PY
}

@test "DDP 2: the 1-rank losses and grad norms" {
	run -0 mpi 2 --parallelism.data_parallel_replicate_degree=2 --parallelism.data_parallel_shard_degree=1 \
		--training.local_batch_size=6 --job.dump_folder="$BATS_TEST_TMPDIR/o"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$BATS_TEST_TMPDIR/o/metrics.jsonl"
	echo "# $output" >&3
}

@test "DDP 2 with gradient accumulation (2 microbatches of 3) and buckets of several blocks" {
	run -0 mpi 2 --parallelism.data_parallel_replicate_degree=2 --parallelism.data_parallel_shard_degree=1 \
		--training.local_batch_size=3 --comm.bucket_size_mb=1 --job.dump_folder="$BATS_TEST_TMPDIR/o"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$BATS_TEST_TMPDIR/o/metrics.jsonl"
	echo "# $output" >&3
}

@test "FSDP 2: the 1-rank losses and grad norms" {
	run -0 mpi 2 --training.local_batch_size=6 --job.dump_folder="$BATS_TEST_TMPDIR/o"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$BATS_TEST_TMPDIR/o/metrics.jsonl"
	echo "# $output" >&3
}

@test "FSDP 3 (uneven shards) with gradient accumulation and reshard_after_forward never" {
	run -0 mpi 3 --training.local_batch_size=2 --parallelism.fsdp_reshard_after_forward=never \
		--job.dump_folder="$BATS_TEST_TMPDIR/o"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$BATS_TEST_TMPDIR/o/metrics.jsonl"
	echo "# $output" >&3
}

@test "HSDP 2x2: the 1-rank losses and grad norms" {
	run -0 mpi 4 --parallelism.data_parallel_replicate_degree=2 --training.local_batch_size=3 \
		--job.dump_folder="$BATS_TEST_TMPDIR/o"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$BATS_TEST_TMPDIR/o/metrics.jsonl"
	echo "# $output" >&3
}

@test "FSDP 4 with tied embeddings and full activation checkpointing" {
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" --model.tie_word_embeddings=true \
		--activation_checkpoint.mode=full --job.dump_folder="$BATS_TEST_TMPDIR/r"
	run -0 mpi 4 --training.local_batch_size=3 --model.tie_word_embeddings=true \
		--activation_checkpoint.mode=full --job.dump_folder="$BATS_TEST_TMPDIR/o"
	run -0 same_curve "$BATS_TEST_TMPDIR/r/metrics.jsonl" "$BATS_TEST_TMPDIR/o/metrics.jsonl"
	echo "# $output" >&3
}

@test "validation on FSDP 2 and DDP 2 equals the 1-rank validation loss" {
	local o=$BATS_TEST_TMPDIR v="--validation.enable --validation.freq=2 --validation.local_batch_size=12 --validation.seq_len=32 --training.steps=4"
	# shellcheck disable=SC2086
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" $v --job.dump_folder="$o/r"
	# shellcheck disable=SC2086
	run -0 mpi 2 --training.local_batch_size=6 $v --validation.local_batch_size=6 --job.dump_folder="$o/f"
	# shellcheck disable=SC2086
	run -0 mpi 2 --parallelism.data_parallel_replicate_degree=2 --parallelism.data_parallel_shard_degree=1 \
		--training.local_batch_size=6 $v --validation.local_batch_size=6 --job.dump_folder="$o/d"
	/usr/bin/python3 - "$o" <<'PY'
import json, sys
def val(p):
    return {o["step"]: (o["validation_loss"], o["validation_tokens"]) for o in map(json.loads, open(p)) if "validation_loss" in o}
r = val(sys.argv[1] + "/r/metrics.jsonl")
assert sorted(r) == [1, 2, 4], r
for d in ("f", "d"):
    x = val(sys.argv[1] + "/" + d + "/metrics.jsonl")
    assert sorted(x) == sorted(r), (d, x)
    for s in r:
        assert x[s][1] == r[s][1], (d, s, x[s], r[s])
        assert abs(x[s][0] - r[s][0]) <= 1e-5 * r[s][0], (d, s, x[s], r[s])
print("ok")
PY
}

@test "FSDP 2 memory: params, grads and optimizer state per rank are half the 1-rank bytes" {
	run -0 mpi 2 --training.local_batch_size=6 --training.steps=2 --job.dump_folder="$BATS_TEST_TMPDIR/o" \
		--metrics.save_for_all_ranks
	/usr/bin/python3 - "$DATA/ref/metrics.jsonl" "$BATS_TEST_TMPDIR/o" <<'PY'
import json, sys
one = json.loads(open(sys.argv[1]).readline())["memory_peak_by_tag"]
for f in ("metrics.jsonl", "metrics.rank1.jsonl"):
    m = json.loads(open(sys.argv[2] + "/" + f).readline())["memory_peak_by_tag"]
    for tag in ("params", "grads", "optim"):
        # half the floats, up to one 64-byte alignment pad per tensor (21 tensors)
        assert abs(m[tag] - one[tag] / 2) <= 21 * 64 * (2 if tag == "optim" else 1), (f, tag, m[tag], one[tag])
print("ok")
PY
}

# est_vs_run N ARGS...: titan-train on N ranks (2 steps, metrics on every
# rank), then titan-estimate --device cpu --rank R for each rank: the
# first row's peak (start-up included) and its bytes by tag, and the second
# row's peak (a step alone), to the byte
est_vs_run() {
	local n=$1 o=$BATS_TEST_TMPDIR/e$1
	shift
	rm -rf "$o"
	mpi "$n" --training.steps=2 --metrics.save_for_all_ranks --job.dump_folder="$o" "$@"
	/usr/bin/python3 - "$o" "$n" "$DATA/tiny.yaml" "$@" <<'PY'
import json, subprocess, sys
o, n, cfg, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
for r in range(n):
    rows = [json.loads(l) for l in open(o + ("/metrics.jsonl" if r == 0 else "/metrics.rank%d.jsonl" % r))]
    e = json.loads(subprocess.check_output(
        ["titan-estimate", "--config", cfg, "--device", "cpu", "--threads", "1", "--json",
         "--ngpu", str(n), "--rank", str(r), "--training.steps=2", "--metrics.save_for_all_ranks"] + args))
    er = e["ranks"][0]
    assert rows[0]["memory_peak_bytes"] == er["peak_bytes"], (r, rows[0]["memory_peak_bytes"], er["peak_bytes"], er["peak_moment"])
    for tag, v in rows[0]["memory_peak_by_tag"].items():
        assert er["at_peak"].get(tag, 0) == v, (r, tag, v, er["at_peak"])
    assert rows[1]["memory_peak_bytes"] == er["step_peak_bytes"], (r, rows[1]["memory_peak_bytes"], er["step_peak_bytes"])
    print(r, er["peak_bytes"], er["peak_moment"])
PY
}

@test "titan-estimate --device cpu --rank R predicts each rank's memory to the byte (DDP, FSDP, HSDP)" {
	# DDP 2: no buffers (the all-reduce is in place)
	est_vs_run 2 --parallelism.data_parallel_replicate_degree=2 --parallelism.data_parallel_shard_degree=1 \
		--training.local_batch_size=3
	# FSDP 3: uneven shards (rank 2 holds less), accumulation, never resharded
	est_vs_run 3 --training.local_batch_size=2 --parallelism.fsdp_reshard_after_forward=never
	# HSDP 2x2 with tied weights and full AC
	est_vs_run 4 --parallelism.data_parallel_replicate_degree=2 --training.local_batch_size=3 \
		--model.tie_word_embeddings=true --activation_checkpoint.mode=full
	# FSDP 2, wide and short: the peak is FSDP's buffers in backward;
	# units merged by comm.bucket_size_mb
	run -0 est_vs_run 2 --training.local_batch_size=1 --training.global_batch_size=4 \
		--training.seq_len=8 --model.dim=256 --model.n_layers=3 --model.n_heads=4 --model.n_kv_heads=4
	assert_line --partial "FSDP gather/reduce-scatter (backward)"
	est_vs_run 2 --training.local_batch_size=6 --comm.bucket_size_mb=0.05
}

@test "titan-estimate --device cpu --rank R predicts each rank's memory to the byte (TP)" {
	# TP 2 (sequence and loss parallel), per-op AC
	est_vs_run 2 --parallelism.tensor_parallel_degree=2 --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=op
	# FSDP 2 x TP 2 without loss parallel, full AC, accumulation
	est_vs_run 4 --parallelism.tensor_parallel_degree=2 --parallelism.disable_loss_parallel \
		--training.local_batch_size=3 --activation_checkpoint.mode=full
}

@test "titan-estimate --device cpu --rank R predicts each rank's memory to the byte (MoE: FSDP, DDP)" {
	local moe=(--model.moe_num_experts=4 --model.moe_top_k=2 --model.moe_inter_dim=48)
	# FSDP 2 (the experts' rows split 2/2), layer-selective AC, load balancing
	est_vs_run 2 "${moe[@]}" --training.local_batch_size=6 --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=2 --model.moe_load_balance_coeff=0.001
	# FSDP 3: uneven shards (4 experts: 2/2/0 rows), never resharded, full AC, no shared expert
	est_vs_run 3 "${moe[@]}" --training.local_batch_size=2 --parallelism.fsdp_reshard_after_forward=never \
		--activation_checkpoint.mode=full --model.moe_num_shared_experts=0
	# DDP 2, per-op AC, the first block dense
	est_vs_run 2 "${moe[@]}" --parallelism.data_parallel_replicate_degree=2 --parallelism.data_parallel_shard_degree=1 \
		--training.local_batch_size=3 --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=op --model.n_dense_layers=1
}

@test "checkpoint resharding: FSDP 4 saves step 5, DDP 2 and 1 rank resume, steps 6-10 equal" {
	local o=$BATS_TEST_TMPDIR
	run -0 mpi 4 --training.local_batch_size=3 --checkpoint.enable --checkpoint.interval=5 \
		--checkpoint.last_save_model_only=false --job.dump_folder="$o/f4"
	assert_file_exists "$o/f4/checkpoint/step-5.h5"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/f4/metrics.jsonl"
	# h5py reads whole tensors of the logical shapes
	/usr/bin/python3 -c '
import h5py, sys
f = h5py.File(sys.argv[1], "r")
assert f["model/layers.0.attention.wq.weight"].shape == (64, 64)
assert f["model/layers.0.attention.wk.weight"].shape == (32, 64)
assert f["optimizer/exp_avg/tok_embeddings.weight"].shape == (768, 64)
assert f["train_state"].attrs["step"] == 5' "$o/f4/checkpoint/step-5.h5"
	for layout in ddp2 one; do
		mkdir -p "$o/$layout/checkpoint"
		cp "$o/f4/checkpoint/step-5.h5" "$o/$layout/checkpoint/"
	done
	run -0 mpi 2 --parallelism.data_parallel_replicate_degree=2 --parallelism.data_parallel_shard_degree=1 \
		--training.local_batch_size=6 --checkpoint.enable --checkpoint.interval=100 --job.dump_folder="$o/ddp2"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/ddp2/metrics.jsonl" 6 10
	run -0 titan-train -q --threads 1 --config "$DATA/tiny.yaml" --checkpoint.enable \
		--checkpoint.interval=100 --job.dump_folder="$o/one"
	run -0 same_curve "$DATA/ref/metrics.jsonl" "$o/one/metrics.jsonl" 6 10
	# the step-10 checkpoints of the three layouts hold the same weights
	/usr/bin/python3 - "$o" <<'PY'
import h5py, numpy as np, sys
o = sys.argv[1]
a = h5py.File(o + "/f4/checkpoint/step-10.h5", "r")["model"]
for other in ("ddp2", "one"):
    b = h5py.File(o + "/" + other + "/checkpoint/step-10.h5", "r")["model"]
    assert list(a.keys()) == list(b.keys())
    for k in a:
        x, y = a[k][()], b[k][()]
        assert np.allclose(x, y, rtol=1e-4, atol=1e-6), (other, k, np.abs(x - y).max())
print("ok")
PY
}

@test "async checkpoints on 2 ranks equal the synchronous ones" {
	local o=$BATS_TEST_TMPDIR
	run -0 mpi 2 --training.local_batch_size=6 --training.steps=4 --checkpoint.enable \
		--checkpoint.interval=2 --checkpoint.last_save_model_only=false --job.dump_folder="$o/s"
	run -0 mpi 2 --training.local_batch_size=6 --training.steps=4 --checkpoint.enable \
		--checkpoint.interval=2 --checkpoint.last_save_model_only=false --checkpoint.async_mode=async \
		--job.dump_folder="$o/a"
	/usr/bin/python3 - "$o" <<'PY'
import h5py, numpy as np, sys
o = sys.argv[1]
for step in (2, 4):
    a = h5py.File("%s/s/checkpoint/step-%d.h5" % (o, step), "r")
    b = h5py.File("%s/a/checkpoint/step-%d.h5" % (o, step), "r")
    def walk(g, h):
        for k in g:
            if isinstance(g[k], h5py.Dataset):
                assert np.array_equal(g[k][()], h[k][()]), k
            else:
                walk(g[k], h[k])
    walk(a, b)
print("ok")
PY
}

@test "TensorBoard on 2 ranks: rank 0's events, every rank's under rank_R/ with save_for_all_ranks" {
	/usr/bin/python3 -c 'import google.protobuf' 2>/dev/null || skip "python3-protobuf is not installed"
	o=$BATS_TEST_TMPDIR
	mpi 2 --training.local_batch_size=6 --training.steps=3 --metrics.enable_tensorboard \
		--job.dump_folder="$o/a"
	run -0 compgen -G "$o/a/tb/*/events.out.tfevents.*"
	[ "${#lines[@]}" -eq 1 ]
	mpi 2 --training.local_batch_size=6 --training.steps=3 --metrics.enable_tensorboard \
		--metrics.save_for_all_ranks --job.dump_folder="$o/b"
	# one folder (rank 0's minute) with a file per rank; each rank's scalars
	# are its metrics file's, the slowest and largest rank's included
	/usr/bin/python3 - "$o/a" "$o/b" tests/ref <<'PY'
import glob, json, struct, sys
sys.path.insert(0, sys.argv[3])
import tfevents_read as tr
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
def check(ev, jsonl):
    got = tr.scalars(tr.load(ev))
    rows = [json.loads(l) for l in open(jsonl)]
    assert sorted(got) == [r["step"] for r in rows] == [1, 2, 3], (sorted(got), rows)
    for r in rows:
        t = got[r["step"]]
        assert t["loss_metrics/global_avg_loss"] == f32(r["loss"]), (t, r)
        assert t["throughput(tps)"] == f32(r["tps"]), (t, r)
        assert t["time_metrics/end_to_end_max_rank(s)"] == f32(r["step_time_s_max_rank"]), (t, r)
        assert t["memory/max_reserved_max_rank(GiB)"] == f32(r["memory_peak_bytes_max_rank"] / 2**30)
(a,) = glob.glob(sys.argv[1] + "/tb/*/events.out.tfevents.*")
check(a, sys.argv[1] + "/metrics.jsonl")
b = sorted(glob.glob(sys.argv[2] + "/tb/*/rank_*/events.out.tfevents.*"))
assert len(b) == 2 and b[0].split("/rank_")[0] == b[1].split("/rank_")[0], b
assert "/rank_0/" in b[0] and "/rank_1/" in b[1], b
check(b[0], sys.argv[2] + "/metrics.jsonl")
check(b[1], sys.argv[2] + "/metrics.rank1.jsonl")
PY
}

@test "rank-prefixed logs: --log-rank all prints every rank's lines" {
	run -0 --separate-stderr timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train \
		--config "$DATA/tiny.yaml" --training.local_batch_size=6 --training.steps=2 \
		--log-rank all --job.dump_folder="$BATS_TEST_TMPDIR/o"
	assert_line --regexp '^\[rank0\]:\[titan\] ([0-9 :,-]+ )?- root - INFO - step:  1  loss: '
	assert_line --regexp '^\[rank1\]:\[titan\] ([0-9 :,-]+ )?- root - INFO - step:  1  loss: '
	[[ $stderr == *"[rank1]:"* ]]
	run -0 --separate-stderr timeout -k 5 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train \
		--config "$DATA/tiny.yaml" --training.local_batch_size=6 --training.steps=2 \
		--job.dump_folder="$BATS_TEST_TMPDIR/o2"
	assert_line --regexp '^\[rank0\]:\[titan\] ([0-9 :,-]+ )?- root - INFO - step:  2  loss: '
	refute_line --partial '[rank1]:[titan]'
	[[ $stderr != *"[rank1]:"*"INFO"* ]]
}

@test "bad layouts: the product of the degrees must be the number of ranks" {
	run -2 --separate-stderr mpi 2 --parallelism.data_parallel_replicate_degree=3
	[[ $stderr == *"data_parallel_replicate_degree 3"* ]]
	run -2 --separate-stderr mpi 2 --parallelism.context_parallel_degree=4 --parallelism.data_parallel_shard_degree=1
	[[ $stderr == *"context_parallel_degree 4"* ]]
	[ "$status" -ne 124 ]
}

@test "SIGTERM on one rank: every rank finishes the step, a checkpoint is saved, exit 143" {
	local o=$BATS_TEST_TMPDIR
	mpi 2 --training.local_batch_size=6 --training.steps=100000 --checkpoint.enable \
		--checkpoint.interval=100000 --checkpoint.last_save_model_only=false --job.dump_folder="$o/t" \
		> "$o/out" 2> "$o/err" &
	local job=$!
	for _ in $(seq 600); do
		[ -s "$o/t/metrics.jsonl" ] && [ "$(wc -l < "$o/t/metrics.jsonl")" -ge 3 ] && break
		sleep 0.1
	done
	local victim
	victim=$(pgrep -f "^titan-train -q --config $DATA/tiny.yaml" | sort -n | tail -1)
	[ -n "$victim" ]
	kill -TERM "$victim"
	local status=0
	wait $job || status=$?
	echo "# status $status" >&3
	[ "$status" -eq 143 ]
	run ls "$o/t/checkpoint"
	assert_output --regexp '^step-[0-9]+\.h5$'
	# it resumes from there
	local s=${output#step-}
	s=${s%.h5}
	run -0 mpi 2 --training.local_batch_size=6 --training.steps=$((s + 1)) --checkpoint.enable \
		--job.dump_folder="$o/t"
	grep -q "Loaded checkpoint" "$o/t/metrics.jsonl" || true
}

# titan_job N DIR ARGS...: a long 4-rank run in the background; waits
# until it has logged 4 steps; sets $job and $pids (the ranks' PIDs in rank
# order, from its "Ranks:" log line)
titan_job() {
	local n=$1 dir=$2
	shift 2
	timeout -k 5 300 mpiexec -n "$n" env OMP_NUM_THREADS=1 titan-train --log-rank all \
		--config "$DATA/tiny.yaml" --training.local_batch_size=3 --training.steps=100000 \
		--job.dump_folder="$dir" "$@" > "$dir.out" 2> "$dir.err" &
	job=$!
	for _ in $(seq 900); do
		[ -s "$dir/metrics.jsonl" ] && [ "$(wc -l < "$dir/metrics.jsonl")" -ge 4 ] && break
		sleep 0.1
	done
	[ -s "$dir/metrics.jsonl" ]
	pids=$(grep -m1 -o 'Ranks: .*' "$dir.err" | grep -o 'pid [0-9]*' | cut -d' ' -f2)
	[ "$(echo "$pids" | wc -l)" -eq "$n" ]
}

@test "a rank that stops answering (SIGSTOP) in 4: the others exit 3 within the timeout naming it" {
	local o=$BATS_TEST_TMPDIR job pids
	titan_job 4 "$o/s" --comm.train_timeout_seconds=5
	local t0=$SECONDS
	kill -STOP "$(echo "$pids" | sed -n 3p)"
	local status=0
	wait $job || status=$?
	local took=$((SECONDS - t0))
	echo "# job ended ${took} s after SIGSTOP of rank 2 (timeout 5 s), status $status" >&3
	# the survivors exit 3; mpiexec then kills the stopped rank (signal 9)
	# and reports the worst status
	[ "$status" -ne 0 ]
	[ "$status" -ne 124 ]
	[ "$took" -le 20 ]
	grep -E "comm timeout: .* at step [0-9]+ did not finish in 5 s; rank 2 does not answer \(ranks 0,1,3 do\)" "$o/s.err" |
		head -1 | sed 's/^/# /' >&3
	[ "$(grep -c 'rank 2 does not answer' "$o/s.err")" -ge 3 ]
	# the survivors' flight recorders: the collective they were stuck in is
	# one of the last three (FSDP prefetches: a later reduce-scatter can
	# complete while the all-gather issued before it waits for rank 2)
	/usr/bin/python3 - "$o/s/comm_traces" <<'PY'
import json, sys
for r in (0, 1, 3):
    t = json.load(open("%s/rank%d.json" % (sys.argv[1], r)))
    assert t["format"] == "titan-flight-recorder" and t["rank"] == r and t["world_size"] == 4
    assert t["reason"] == "comm timeout"
    e = t["entries"]
    assert e and any(x["state"] != "completed" for x in e[-3:]), e[-3:]
    assert all(x["state"] == "completed" for x in e[:-3]), "older entries completed"
print("ok")
PY
}

@test "kill -9 of one of 4 ranks: MPICH ends the job at once (no hang); the newest checkpoint resumes" {
	local o=$BATS_TEST_TMPDIR job pids
	titan_job 4 "$o/k" --checkpoint.enable --checkpoint.interval=2 --checkpoint.last_save_model_only=false
	local victim t0=$SECONDS
	victim=$(echo "$pids" | sed -n 3p)
	kill -9 "$victim"
	local status=0
	wait $job || status=$?
	local took=$((SECONDS - t0))
	echo "# job ended ${took} s after kill -9 of rank 2, status $status" >&3
	[ "$status" -ne 0 ]
	[ "$status" -ne 124 ]
	[ "$took" -le 20 ]
	# MPICH's mpiexec ends the job itself (its "BAD TERMINATION" banner names
	# a PID, not always the dead one); titan's start-up line maps PIDs to ranks
	grep -q "Ranks: .*2: pid $victim on" "$o/k.err"
	grep -q "BAD TERMINATION" "$o/k.out" "$o/k.err"
	# the newest complete checkpoint resumes (a write cut by the kill left
	# at most a temporary file, which is never taken for a step)
	local last
	last=$(ls "$o/k/checkpoint" | grep -E '^step-[0-9]+\.h5$' | sed 's/step-//; s/\.h5//' | sort -n | tail -1)
	[ -n "$last" ]
	run -0 mpi 4 --training.local_batch_size=3 --training.steps=$((last + 2)) --checkpoint.enable \
		--checkpoint.interval=100 --job.dump_folder="$o/k"
	run -0 tail -1 "$o/k/metrics.jsonl"
	assert_output --partial "\"step\":$((last + 2)),"
}
