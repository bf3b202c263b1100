#!/usr/bin/env bats
# titan-train: the tool contract, a real (tiny) training run on shards made
# from Debian's King James Bible — loss falls, metrics.jsonl, determinism,
# activation checkpointing gives identical losses — and failure handling.

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus --bible genesis 4000 768 40
	# a small custom Llama: 2 blocks of width 64, vocab 512
	tiny_yaml "$DATA/tiny.yaml" 768 64 2 4 2 <<YAML
job:
  dump_folder: $DATA/out
optimizer:
  lr: 3.0e-3
lr_scheduler:
  warmup_steps: 2
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 64
  steps: 12
metrics:
  log_freq: 1
  peak_flops: 1.0e+11
activation_checkpoint:
  mode: none
YAML
}

setup() {
	load helpers
	load tiny
	cd "$TITAN_SRCDIR"
}

losses() { tiny_losses "$@"; }

@test "contract: --config is required, --help, --version, bad option" {
	run -2 --separate-stderr titan-train
	[[ $stderr == *"titan-train: error: --config FILE is required"* ]]
	run -0 titan-train --help
	assert_line --partial "Usage: titan-train --config FILE"
	run -0 titan-train --version
	assert_line --regexp '^titan-train \(titan\) '
	run -2 --separate-stderr titan-train --frob
	[[ $stderr == *"unrecognized option"* ]]
	run -2 --separate-stderr titan-train --config "$BATS_TEST_TMPDIR/none.yaml"
	[[ $stderr == *"none.yaml"*"No such file"* ]]
}

@test "a missing dataset folder or a bad one is an error naming it" {
	run -2 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.dataset_path=
	[[ $stderr == *"training.dataset_path"* ]]
	# a missing data folder is a runtime failure (1), an empty key configuration (2)
	run -1 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.dataset_path="$BATS_TEST_TMPDIR/nowhere"
	refute_crash
	[[ $stderr == *"nowhere"* ]]
}

@test "a model vocabulary smaller than the shards' is refused" {
	# the config does not fit the data: configuration (2), found before training
	run -2 --separate-stderr titan-train --config "$DATA/tiny.yaml" --model.vocab_size=512
	refute_crash
	[[ $stderr == *"vocab"* ]]
}

@test "trains: the loss falls from about ln(vocab), one line and one JSON object per step" {
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml"
	assert_equal "${#lines[@]}" 12
	# torchtitan's logger head (helpers.bash sets TITAN_LOG_TIME=0: no time)
	assert_line --regexp '^\[titan\] - root - INFO - step:  1  loss:  [0-9.]+  grad_norm: +[0-9.]+  memory: +[0-9.]+GiB\([0-9.]+%\)  tps: [0-9,]+  tflops: [0-9.]+  mfu: [0-9.]+%$'
	[[ $stderr == *"Model llama3 custom size:"* ]]
	run -0 losses "$DATA/out/metrics.jsonl"
	first=$(echo "${lines[0]}" | cut -d' ' -f2) last=$(echo "${lines[11]}" | cut -d' ' -f2)
	/usr/bin/python3 -c "import math,sys; f,l=float(sys.argv[1]),float(sys.argv[2]); assert abs(f-math.log(768))<0.7, f; assert l<f-0.5, (f,l)" "$first" "$last"
}

@test "training.device: cuda without a GPU is an error naming the key; auto and cpu train on the CPU" {
	if nvidia-smi -L >/dev/null 2>&1; then
		skip "a GPU is present (make cuda-test covers it)"
	fi
	run -1 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.device=cuda \
		--job.dump_folder="$BATS_TEST_TMPDIR/c"
	refute_crash
	[[ $stderr == *"training.device: cuda"* ]]
	[ ! -e "$BATS_TEST_TMPDIR/c/metrics.jsonl" ]
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.device=auto \
		--training.steps=2 --job.dump_folder="$BATS_TEST_TMPDIR/a"
	assert_equal "${#lines[@]}" 2
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.device=cpu \
		--training.steps=2 --job.dump_folder="$BATS_TEST_TMPDIR/b"
	cmp <(losses "$BATS_TEST_TMPDIR/a/metrics.jsonl") <(losses "$BATS_TEST_TMPDIR/b/metrics.jsonl")
	run -2 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.device=tpu
	[[ $stderr == *"training.device"* ]]
}

@test "same config and seed: the same losses bit for bit; any thread count" {
	titan-train -q --config "$DATA/tiny.yaml" --threads 1 --job.dump_folder="$BATS_TEST_TMPDIR/a"
	titan-train -q --config "$DATA/tiny.yaml" --threads 2 --job.dump_folder="$BATS_TEST_TMPDIR/b"
	diff <(losses "$BATS_TEST_TMPDIR/a/metrics.jsonl") <(losses "$BATS_TEST_TMPDIR/b/metrics.jsonl")
	# 2 x 600 tokens a step: the GEMMs are cut into several tiles; 3 threads
	long="--training.seq_len=600 --training.steps=3"
	titan-train -q --config "$DATA/tiny.yaml" $long --threads 1 --job.dump_folder="$BATS_TEST_TMPDIR/l1"
	titan-train -q --config "$DATA/tiny.yaml" $long --threads 3 --job.dump_folder="$BATS_TEST_TMPDIR/l3"
	diff <(losses "$BATS_TEST_TMPDIR/l1/metrics.jsonl") <(losses "$BATS_TEST_TMPDIR/l3/metrics.jsonl")
	titan-train -q --config "$DATA/tiny.yaml" --training.seed=1 --job.dump_folder="$BATS_TEST_TMPDIR/c"
	! diff -q <(losses "$BATS_TEST_TMPDIR/a/metrics.jsonl") <(losses "$BATS_TEST_TMPDIR/c/metrics.jsonl")
}

@test "activation checkpointing (full, every 2nd block, per op) gives identical losses with less memory" {
	titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder="$BATS_TEST_TMPDIR/none"
	titan-train -q --config "$DATA/tiny.yaml" --activation_checkpoint.mode=full --job.dump_folder="$BATS_TEST_TMPDIR/full"
	titan-train -q --config "$DATA/tiny.yaml" --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=2 --job.dump_folder="$BATS_TEST_TMPDIR/sel"
	diff <(losses "$BATS_TEST_TMPDIR/none/metrics.jsonl") <(losses "$BATS_TEST_TMPDIR/full/metrics.jsonl")
	diff <(losses "$BATS_TEST_TMPDIR/none/metrics.jsonl") <(losses "$BATS_TEST_TMPDIR/sel/metrics.jsonl")
	titan-train -q --config "$DATA/tiny.yaml" --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=op --job.dump_folder="$BATS_TEST_TMPDIR/op"
	diff <(losses "$BATS_TEST_TMPDIR/none/metrics.jsonl") <(losses "$BATS_TEST_TMPDIR/op/metrics.jsonl")
	act() { /usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["memory_peak_by_tag"]["activations"])' "$1"; }
	[ "$(act "$BATS_TEST_TMPDIR/full/metrics.jsonl")" -lt "$(act "$BATS_TEST_TMPDIR/op/metrics.jsonl")" ]
	[ "$(act "$BATS_TEST_TMPDIR/op/metrics.jsonl")" -lt "$(act "$BATS_TEST_TMPDIR/none/metrics.jsonl")" ]
	run -2 --separate-stderr titan-train --config "$DATA/tiny.yaml" --activation_checkpoint.mode=selective \
		--activation_checkpoint.selective_ac_option=ops
	[[ $stderr == *"selective_ac_option: 'ops' is neither 'op' nor"* ]]
}

@test "gradient accumulation: 2 microbatches of 1 row equal 1 of 2 rows" {
	titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder="$BATS_TEST_TMPDIR/one"
	titan-train -q --config "$DATA/tiny.yaml" --training.local_batch_size=1 --training.global_batch_size=2 \
		--job.dump_folder="$BATS_TEST_TMPDIR/two"
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/one/metrics.jsonl" "$BATS_TEST_TMPDIR/two/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 12
for x, y in zip(a, b):
    assert abs(x - y) <= 1e-4 * abs(x), (x, y)
PY
}

@test "validation loss over the val split" {
	run -0 titan-train --config "$DATA/tiny.yaml" --validation.enable --validation.freq=6 \
		--validation.local_batch_size=2 --validation.seq_len=64 --training.steps=6
	assert_line --regexp ' - root - INFO - validate step:  1  loss: +[0-9.]+'
	assert_line --regexp ' - root - INFO - validate step:  6  loss: +[0-9.]+'
}

# the validation rows of metrics.jsonl: "step loss tokens" lines
val_rows() { /usr/bin/python3 -c '
import json, sys
for o in map(json.loads, open(sys.argv[1])):
    if "validation_loss" in o:
        print(o["step"], repr(o["validation_loss"]), o["validation_tokens"])' "$1"
}

@test "validation.seq_len and local_batch_size follow training's; --validation.enable alone runs" {
	local d=$BATS_TEST_TMPDIR
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --validation.enable \
		--validation.freq=2 --training.steps=2 --job.dump_folder="$d/a"
	assert_line --regexp ' - root - INFO - validate step:  2  loss: +[0-9.]+'
	run -0 titan-train -q --config "$DATA/tiny.yaml" --validation.enable --validation.freq=2 \
		--training.steps=2 --validation.seq_len=64 --validation.local_batch_size=2 \
		--job.dump_folder="$d/b"
	[ -n "$(val_rows "$d/a/metrics.jsonl")" ]
	[ "$(val_rows "$d/a/metrics.jsonl")" = "$(val_rows "$d/b/metrics.jsonl")" ]
	run -0 titan-config --config "$DATA/tiny.yaml" --get validation.seq_len
	[ "$output" = -1 ]
}

@test "another validation batch size or a shorter validation seq_len gives the same loss" {
	# the whole val split (steps -1) at seq_len 32 is the same windows however
	# it is batched, and whatever training.seq_len the model was trained at:
	# an lr of 1e-30 leaves the weights as initialised, so a model trained at
	# seq_len 32 is the reference for one trained at 64 validating at 32
	local d=$BATS_TEST_TMPDIR v="--validation.enable --validation.freq=2 --training.steps=2 --optimizer.lr=1e-30"
	run -0 titan-train -q --config "$DATA/tiny.yaml" $v --training.seq_len=32 --job.dump_folder="$d/ref"
	ref=$(val_rows "$d/ref/metrics.jsonl")
	[ -n "$ref" ]
	for b in 1 2 3 5; do
		run -0 titan-train -q --config "$DATA/tiny.yaml" $v --validation.seq_len=32 \
			--validation.local_batch_size=$b --job.dump_folder="$d/b$b"
		/usr/bin/python3 - "$ref" "$(val_rows "$d/b$b/metrics.jsonl")" <<'PY'
import sys
a, b = ([l.split() for l in s.splitlines()] for s in sys.argv[1:3])
assert len(a) == len(b) == 2, (a, b)
for x, y in zip(a, b):
    assert x[0] == y[0] and x[2] == y[2], (x, y)
    assert abs(float(x[1]) - float(y[1])) <= 1e-9 * abs(float(x[1])), (x, y)
PY
	done
	# and another batch under FSDP 2: every rank runs the same regrouped batches
	if [ -z "${NO_MPI:-}" ]; then
		run -0 timeout 120 mpiexec -n 2 titan-train -q --config "$DATA/tiny.yaml" $v \
			--validation.seq_len=32 --validation.local_batch_size=3 --job.dump_folder="$d/mp"
		[ "$(val_rows "$d/mp/metrics.jsonl" | cut -d' ' -f1,3)" = "$(echo "$ref" | cut -d' ' -f1,3)" ]
	fi
}

@test "a validation.seq_len longer than training's: exit 2 naming both" {
	run -2 --separate-stderr titan-train -q --config "$DATA/tiny.yaml" --validation.enable \
		--validation.seq_len=128 --job.dump_folder="$BATS_TEST_TMPDIR/x"
	[[ $stderr == "titan-train: error: validation.seq_len: 128 is longer than training.seq_len 64"* ]]
}

@test "metrics.enable_tensorboard: TFRecords of Event protos with the scalars of metrics.jsonl, torchtitan's tags" {
	/usr/bin/python3 -c 'import google.protobuf' 2>/dev/null || skip "python3-protobuf is not installed"
	d=$BATS_TEST_TMPDIR/tb
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.steps=5 \
		--validation.enable --validation.freq=2 --validation.local_batch_size=2 \
		--validation.seq_len=64 --metrics.enable_tensorboard --job.dump_folder="$d"
	# one file, where torchtitan puts it: DUMP/tb/YYYYmmdd-HHMM/events.out.tfevents.*
	run -0 compgen -G "$d/tb/*/events.out.tfevents.*"
	[ "${#lines[@]}" -eq 1 ]
	ev=${lines[0]}
	[[ $ev =~ /tb/[0-9]{8}-[0-9]{4}/events\.out\.tfevents\.[0-9]{10}\.$(hostname)\.[0-9]+\.0$ ]]
	[[ $stderr == *"TensorBoard events: $ev"* ]]
	# framing and both CRCs checked by a reader written from the spec, the
	# Event/Summary messages decoded by python3-protobuf; every scalar is
	# metrics.jsonl's value as a float32
	/usr/bin/python3 - "$ev" "$d/metrics.jsonl" tests/ref <<'PY'
import json, math, struct, sys
sys.path.insert(0, sys.argv[3])
import tfevents_read as tr
ev = tr.load(sys.argv[1])
assert ev[0].WhichOneof("what") == "file_version" and ev[0].file_version == "brain.Event:2", ev[0]
assert all(e.WhichOneof("what") == "summary" for e in ev[1:])
wall = [e.wall_time for e in ev]
assert wall == sorted(wall) and abs(wall[0] - int(sys.argv[1].split(".")[3])) < 1, wall
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
G = 1073741824.0
train, val = {}, {}
for e in ev[1:]:
    tags = {v.tag: v.simple_value for v in e.summary.value}
    (val if "validation_metrics/loss" in tags else train)[e.step] = tags
rows = [json.loads(l) for l in open(sys.argv[2])]
n = 0
for r in rows:
    if "validation_loss" in r:
        t = val.pop(r["step"])
        assert t == {"validation_metrics/loss": f32(r["validation_loss"]),
                     "validation_metrics/tokens": f32(r["validation_tokens"]),
                     "validation_metrics/throughput(tps)": f32(r["validation_tps"]),
                     "validation_metrics/memory/max_reserved(GiB)": f32(r["validation_memory_peak_bytes"] / G),
                     "validation_metrics/memory/max_active(GiB)": f32(r["validation_memory_peak_bytes"] / G),
                     "validation_metrics/memory/max_reserved(%)": t["validation_metrics/memory/max_active(%)"],
                     "validation_metrics/memory/max_active(%)": t["validation_metrics/memory/max_reserved(%)"]}, (r, t)
        assert t["validation_metrics/memory/max_active(%)"] > 0, t
        continue
    t = train.pop(r["step"])
    want = {"loss_metrics/global_avg_loss": r["loss"], "loss_metrics/global_max_loss": r["max_loss"],
            "grad_norm": r["grad_norm"], "lr": r["lr"],
            "n_tokens_seen": r["tokens_seen"], "throughput(tps)": r["tps"], "tflops": r["tflops"],
            "mfu(%)": r["mfu_pct"], "time_metrics/end_to_end(s)": r["step_time_s"],
            "time_metrics/data_loading(s)": r["data_time_s"],
            "time_metrics/checkpoint_blocked(s)": r["checkpoint_blocked_s"],
            "memory/max_reserved(GiB)": r["memory_peak_bytes"] / G,
            "memory/max_active(GiB)": r["memory_peak_bytes"] / G,
            "memory/num_alloc_retries": 0, "memory/num_ooms": 0}  # CUDA's; none on the CPU
    want.update({f"memory/by_tag/{k}(GiB)": v / G for k, v in r["memory_peak_by_tag"].items()})
    for k, v in want.items():
        assert t[k] == f32(v), (r["step"], k, t[k], v)
    assert math.isclose(t["time_metrics/data_loading(%)"], 100 * r["data_time_s"] / r["step_time_s"],
                        rel_tol=1e-6), t
    assert t["memory/max_reserved(%)"] == t["memory/max_active(%)"] > 0, t
    assert r["max_loss"] == r["loss"], r  # one rank: its own loss
    assert set(t) == set(want) | {"time_metrics/data_loading(%)", "memory/max_reserved(%)",
                                  "memory/max_active(%)"}, sorted(t)
    n += 1
assert n == 5 and not train and not val, (n, train, val)
# the reader does check: one flipped bit in a record's data
raw = bytearray(open(sys.argv[1], "rb").read())
raw[60] ^= 1
open(sys.argv[1] + ".bad", "wb").write(raw)
try:
    tr.load(sys.argv[1] + ".bad")
    raise AssertionError("a flipped bit was not found")
except ValueError as e:
    assert "data CRC" in str(e), e
PY
	# off by default
	run -0 titan-train -q --config "$DATA/tiny.yaml" --training.steps=1 --job.dump_folder="$d/off"
	assert_file_not_exists "$d/off/tb"
}

@test "a non-finite loss stops the run with the step, or is skipped on request" {
	run -1 --separate-stderr titan-train --config "$DATA/tiny.yaml" --optimizer.lr=1e30 --training.max_norm=1e30
	[[ $stderr == *"is not finite; stopping"* ]]
	# skipped (up to training.max_consecutive_nonfinite in a row: faults.bats)
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --optimizer.lr=1e30 \
		--training.max_norm=1e30 --training.skip_nonfinite --training.max_consecutive_nonfinite=100
	[[ $stderr == *"optimizer step skipped"* ]]
}

@test "a layout that does not match the number of ranks is a config error naming the numbers" {
	run -2 --separate-stderr titan-train --config "$DATA/tiny.yaml" --parallelism.tensor_parallel_degree=2
	[[ $stderr == *"tensor_parallel_degree 2"* ]]
	[[ $stderr == *"1 rank"* ]]
}

@test "profiling: a Chrome trace per profiled step and the memory event log" {
	run -0 titan-train -q --config "$DATA/tiny.yaml" --training.steps=4 --job.dump_folder="$BATS_TEST_TMPDIR/p" \
		--profiling.enable_profiling --profiling.profile_freq=2 --profiling.profiler_warmup=0 \
		--profiling.enable_memory_snapshot --activation_checkpoint.mode=full
	assert_file_exists "$BATS_TEST_TMPDIR/p/profile_traces/iteration_2/rank0_trace.json"
	assert_file_exists "$BATS_TEST_TMPDIR/p/profile_traces/iteration_4/rank0_trace.json"
	assert_file_not_exists "$BATS_TEST_TMPDIR/p/profile_traces/iteration_1"
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/p" <<'PY'
import json, struct, sys
d = sys.argv[1]
t = json.load(open(d + "/profile_traces/iteration_2/rank0_trace.json"))
ev = t["traceEvents"]
names = {e["name"] for e in ev if e["ph"] == "X"}
for n in ["step", "data", "forward", "embedding", "layer 0 forward", "layer 1 forward", "loss",
          "backward", "layer 1 recompute", "layer 1 backward", "layer 0 backward", "optimizer"]:
    assert n in names, (n, names)
for e in ev:
    assert e["ph"] in ("X", "C") and e["pid"] == 0 and e["ts"] >= 0, e
    if e["ph"] == "X":
        assert e["dur"] >= 0 and e["args"]["step"] == 2, e
step = next(e for e in ev if e["name"] == "step")
for e in ev:  # every span lies inside the step span
    if e["ph"] == "X":
        assert step["ts"] <= e["ts"] + 1e-3 and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1e-3, e
m = open(d + "/memory_snapshot/rank0.memtrace", "rb").read()
assert m[:8] == b"TTNMEM\0\1", m[:8]
assert (len(m) - 64) % 32 == 0 and len(m) > 64
cur = peak = 0
phases, tags = set(), set()
for i in range(64, len(m), 32):
    kind, tag, phase, step, t, size, addr = struct.unpack("<BBHIQQQ", m[i:i + 32])
    cur += size if kind == 1 else -size
    peak = max(peak, cur)
    phases.add(phase)
    tags.add(tag)
assert {2, 3, 4, 5} <= phases, phases   # forward, loss, backward, optimizer
assert {0, 1, 2, 3} <= tags, tags       # params, grads, optim, activations
assert peak > 0
PY
}

@test "the debug model on the whole KJV: 100 steps, the loss falls steadily from about ln(vocab)" {
	command -v bible >/dev/null || skip "bible-kjv is not installed"
	d=$BATS_TEST_TMPDIR
	bible -f gen1:1-rev22:21 > "$d/kjv.txt"
	titan-tokenize train --vocab-size 2048 --format text "$d/kjv.txt" -o "$d/kjv.tiktoken"
	titan-tokenize -t "$d/kjv.tiktoken" --doc-per-line "$d/kjv.txt" |
		titan-shard -q -t "$d/kjv.tiktoken" --out "$d/kjv" --val-docs 100
	run -0 titan-train -q --config configs/llama3_debug.yaml --training.dataset_path="$d/kjv" \
		--training.seq_len=128 --training.local_batch_size=2 --training.steps=100 \
		--lr_scheduler.warmup_steps=10 --metrics.log_freq=1 --metrics.peak_flops=1e11 \
		--job.dump_folder="$d/out"
	/usr/bin/python3 - "$d/out/metrics.jsonl" <<'PY'
import json, math, sys
loss = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
assert len(loss) == 100, len(loss)
mean = lambda a: sum(a) / len(a)
w = [mean(loss[i:i + 20]) for i in range(0, 100, 20)]
print("# window means:", ["%.3f" % x for x in w])
assert abs(loss[0] - math.log(2048)) < 0.7, loss[0]
# falls steadily: no 20-step window above the previous one beyond noise
# (256 tokens a step; the lr decays linearly to 0 over the last 80 steps)
assert all(b < a + 0.05 for a, b in zip(w, w[1:])), w
assert w[0] > w[2] > w[4], w
assert w[-1] < loss[0] - 2.0, (loss[0], w[-1])
PY
}

@test "checkpoints: 8 steps equal 4 steps + resume to 8, bit for bit (losses, weights, moments)" {
	/usr/bin/python3 -c 'import h5py' 2>/dev/null || fail "python3-h5py is missing (make deps installs it)"
	c=(--config "$DATA/tiny.yaml" --training.steps=8 --lr_scheduler.total_steps=8
	   --checkpoint.enable --checkpoint.interval=4 --checkpoint.last_save_model_only=false)
	titan-train -q "${c[@]}" --job.dump_folder="$BATS_TEST_TMPDIR/a"
	titan-train -q "${c[@]}" --training.steps=4 --job.dump_folder="$BATS_TEST_TMPDIR/b"
	assert_file_exists "$BATS_TEST_TMPDIR/b/checkpoint/step-4.h5"
	run -0 --separate-stderr titan-train "${c[@]}" --job.dump_folder="$BATS_TEST_TMPDIR/b"
	[[ $stderr == *"Loaded checkpoint"*"step-4.h5 (step 4)"* ]]
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b" <<'PY'
import json, sys, h5py, numpy as np
a, b = sys.argv[1], sys.argv[2]
la = [(o["step"], o["loss"], o["grad_norm"]) for o in map(json.loads, open(a + "/metrics.jsonl"))]
lb = [(o["step"], o["loss"], o["grad_norm"]) for o in map(json.loads, open(b + "/metrics.jsonl"))]
assert la == lb, (la, lb)   # the resumed run appended steps 5..8
fa, fb = h5py.File(a + "/checkpoint/step-8.h5"), h5py.File(b + "/checkpoint/step-8.h5")
for g in ("model", "optimizer/exp_avg", "optimizer/exp_avg_sq"):
    assert list(fa[g]) == list(fb[g])
    for k in fa[g]:
        assert np.array_equal(fa[g][k][()], fb[g][k][()]), (g, k)
assert fa["train_state"].attrs["step"] == 8 and fa["optimizer"].attrs["step"] == 8
assert fa["model/tok_embeddings.weight"].shape == (768, 64)
PY
}

@test "checkpoints: async_mode async writes the same files in the background; resume from them is exact" {
	c=(--config "$DATA/tiny.yaml" --training.steps=8 --lr_scheduler.total_steps=8 --metrics.log_freq=1
	   --checkpoint.enable --checkpoint.interval=2 --checkpoint.keep_latest_k=2
	   --checkpoint.last_save_model_only=false)
	titan-train -q "${c[@]}" --job.dump_folder="$BATS_TEST_TMPDIR/sync"
	run -0 --separate-stderr titan-train "${c[@]}" --checkpoint.async_mode=async \
		--job.dump_folder="$BATS_TEST_TMPDIR/async"
	[[ $stderr == *"Staged checkpoint step 2 in "*" s (training blocked); writing in the background"* ]]
	[[ $stderr == *"Saved checkpoint $BATS_TEST_TMPDIR/async/checkpoint/step-8.h5 in "*"(background write)"* ]]
	run -0 ls "$BATS_TEST_TMPDIR/async/checkpoint"
	assert_output $'step-6.h5\nstep-8.h5'
	# resume from the async step-6 and run to 8 again
	rm "$BATS_TEST_TMPDIR/async/checkpoint/step-8.h5"
	cp "$BATS_TEST_TMPDIR/async/metrics.jsonl" "$BATS_TEST_TMPDIR/async.jsonl"
	titan-train -q "${c[@]}" --checkpoint.async_mode=async --job.dump_folder="$BATS_TEST_TMPDIR/async"
	/usr/bin/python3 - "$BATS_TEST_TMPDIR" <<'PY'
import json, sys, h5py, numpy as np
d = sys.argv[1]
rows = lambda f: [(o["step"], o["loss"], o["grad_norm"]) for o in map(json.loads, open(f))]
s, a = rows(d + "/sync/metrics.jsonl"), rows(d + "/async.jsonl")
assert s == a, (s, a)
r = rows(d + "/async/metrics.jsonl")
assert r[:8] == s and r[8:] == s[6:], r     # resumed at 6: steps 7, 8 appended
assert all("checkpoint_blocked_s" in json.loads(l) for l in open(d + "/async.jsonl"))
for step in (6, 8):
    fs, fa = h5py.File(d + "/sync/checkpoint/step-%d.h5" % step), h5py.File(d + "/async/checkpoint/step-%d.h5" % step)
    for g in ("model", "optimizer/exp_avg", "optimizer/exp_avg_sq"):
        assert list(fs[g]) == list(fa[g])
        for k in fs[g]:
            assert np.array_equal(fs[g][k][()], fa[g][k][()]), (step, g, k)
    assert fa["train_state"].attrs["step"] == step
PY
}

@test "checkpoints: keep_latest_k, a model-only last save in bfloat16, a seed checkpoint" {
	titan-train --config "$DATA/tiny.yaml" -q --checkpoint.enable --checkpoint.interval=2 \
		--checkpoint.keep_latest_k=2 --checkpoint.export_dtype=bfloat16 --job.dump_folder="$BATS_TEST_TMPDIR/k"
	run -0 ls "$BATS_TEST_TMPDIR/k/checkpoint"
	assert_output $'step-10.h5\nstep-12.h5'
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/k/checkpoint" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1] + "/step-12.h5")
assert list(f) == ["model"], list(f)                    # last save: weights only
w = f["model/norm.weight"]
t = w.id.get_type()   # stored as bfloat16: 2 bytes, 8-bit exponent, 7-bit mantissa
assert t.get_size() == 2 and t.get_fields() == (15, 7, 8, 0, 7), (t.get_size(), t.get_fields())
assert abs(float(w[0]) - 1.0) < 0.05, w[0]            # h5py widens it to float32 exactly
assert "optimizer" in h5py.File(sys.argv[1] + "/step-10.h5")
PY
	titan-train --config "$DATA/tiny.yaml" -q --checkpoint.create_seed_checkpoint --job.dump_folder="$BATS_TEST_TMPDIR/s"
	run -0 ls "$BATS_TEST_TMPDIR/s/checkpoint"
	assert_output "step-0.h5"
	# a run over a seed checkpoint starts from its weights: the same losses
	titan-train --config "$DATA/tiny.yaml" -q --checkpoint.enable --checkpoint.interval=100 --job.dump_folder="$BATS_TEST_TMPDIR/s"
	titan-train --config "$DATA/tiny.yaml" -q --job.dump_folder="$BATS_TEST_TMPDIR/n"
	diff <(losses "$BATS_TEST_TMPDIR/s/metrics.jsonl") <(losses "$BATS_TEST_TMPDIR/n/metrics.jsonl")
}

@test "checkpoints: kill -9 during a checkpoint write; the resume takes the previous step and stays exact" {
	/usr/bin/python3 -c 'import h5py' 2>/dev/null || fail "python3-h5py is missing (make deps installs it)"
	# a wide vocabulary makes a 400 MB checkpoint that takes a while to write,
	# with cheap steps (1 block, 1 x 64 tokens)
	c=(--config "$DATA/tiny.yaml" --model.vocab_size=65536 --model.n_layers=1 --model.dim=256
	   --training.local_batch_size=1 --training.steps=4 --lr_scheduler.total_steps=4
	   --checkpoint.enable --checkpoint.interval=2 --checkpoint.keep_latest_k=0
	   --checkpoint.last_save_model_only=false --metrics.log_freq=1)
	titan-train -q "${c[@]}" --job.dump_folder="$BATS_TEST_TMPDIR/a"
	d=$BATS_TEST_TMPDIR/b
	titan-train -q "${c[@]}" --job.dump_folder="$d" &
	pid=$!
	# wait for step 4's temporary file, then kill without any cleanup
	for _ in $(seq 3000); do
		compgen -G "$d/checkpoint/step-4.h5.tmp.*" > /dev/null && break
		kill -0 $pid 2> /dev/null || break
		sleep 0.01
	done
	kill -9 $pid 2> /dev/null || true
	wait $pid || true
	[ -f "$d/checkpoint/step-2.h5" ]
	if [ -f "$d/checkpoint/step-4.h5" ]; then
		skip "the write finished before the kill (a very fast disk): nothing to test"
	fi
	compgen -G "$d/checkpoint/step-4.h5.tmp.*" > /dev/null   # the half-written file
	run -0 --separate-stderr titan-train "${c[@]}" --job.dump_folder="$d"
	[[ $stderr == *"Loaded checkpoint"*"step-2.h5 (step 2)"* ]]
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/a" "$d" <<'PY'
import json, sys, h5py, numpy as np
a, b = sys.argv[1], sys.argv[2]
rows = lambda f: [(o["step"], o["loss"], o["grad_norm"]) for o in map(json.loads, open(f + "/metrics.jsonl"))]
ra, rb = rows(a), rows(b)
assert rb[-2:] == ra[2:], (ra, rb)       # steps 3 and 4 after the resume
fa, fb = h5py.File(a + "/checkpoint/step-4.h5"), h5py.File(b + "/checkpoint/step-4.h5")
for g in ("model", "optimizer/exp_avg", "optimizer/exp_avg_sq"):
    for k in fa[g]:
        assert np.array_equal(fa[g][k][()], fb[g][k][()]), (g, k)
PY
}

@test "MFU on the CPU: the nominal peak (threads x clock x FLOPs/cycle), the same in two runs; metrics.peak_flops overrides; the sgemm probe only when asked" {
	cd "$BATS_TEST_TMPDIR"
	# the peak metrics.jsonl implies: tflops / mfu_pct
	peak_of() { /usr/bin/python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).readline()); print("%.6e" % (d["tflops"] * 1e12 * 100 / d["mfu_pct"]))' "$1"; }
	for n in 1 2; do
		run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.steps=1 \
			--metrics.peak_flops=null --threads 2 --job.dump_folder=n$n
		[[ $stderr =~ "Peak FLOPS used for computing MFU: "([0-9.e+]+)" ("([A-Za-z0-9 -]+)": 2 threads x "([0-9.]+)" GHz ("[^\)]+") x "([0-9]+)" FLOP/cycle, "[^\;]+"; override with metrics.peak_flops)" ]] ||
			fail "no nominal peak line: $stderr"
		peak[$n]=${BASH_REMATCH[1]} ghz=${BASH_REMATCH[3]} fpc=${BASH_REMATCH[4]}
		# the formula, to the 4 digits the line prints
		/usr/bin/python3 -c "import sys; p, g, f = map(float, sys.argv[1:]); assert abs(p - 2 * g * 1e9 * f) / p < 1e-3, (p, g, f)" \
			"${peak[$n]}" "$ghz" "$fpc"
		# and metrics.jsonl's MFU is against it
		/usr/bin/python3 -c "import sys; a, b = map(float, sys.argv[1:]); assert abs(a - b) / b < 1e-3, (a, b)" \
			"$(peak_of n$n/metrics.jsonl)" "${peak[$n]}"
	done
	[ "${peak[1]}" = "${peak[2]}" ]
	# an explicit peak wins, and says so
	run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.steps=1 \
		--metrics.peak_flops=2.5e11 --job.dump_folder=o
	[[ $stderr == *"Peak FLOPS used for computing MFU: 2.500e+11 (metrics.peak_flops)"* ]]
	[ "$(peak_of o/metrics.jsonl)" = 2.500000e+11 ]
	# the start-up sgemm, opt-in: titan-estimate models its 12 MiB only then,
	# byte for byte with the measured peak either way
	for m in false true; do
		run -0 --separate-stderr titan-train --config "$DATA/tiny.yaml" --training.steps=1 \
			--metrics.peak_flops=null --metrics.measure_peak_flops=$m --threads 2 --job.dump_folder=m$m
		if [ $m = true ]; then
			[[ $stderr == *"(sgemm measured at start-up (metrics.measure_peak_flops), 2 threads)"* ]]
		fi
		measured=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["memory_peak_bytes"])' m$m/metrics.jsonl)
		run -0 --separate-stderr titan-estimate --config "$DATA/tiny.yaml" --metrics.peak_flops=null \
			--metrics.measure_peak_flops=$m --device cpu --threads 2
		assert_line --regexp "^  peak [0-9.]+ MiB \\($measured bytes\\) at "
	done
}

@test "TensorBoard: every tag torchtitan writes (tests/fixtures/tensorboard/torchtitan-tags.txt)" {
	/usr/bin/python3 -c 'import google.protobuf' 2>/dev/null || skip "python3-protobuf is not installed"
	d=$BATS_TEST_TMPDIR/tb
	run -0 titan-train -q --config "$DATA/tiny.yaml" --training.steps=2 --validation.enable \
		--validation.freq=2 --validation.seq_len=64 --validation.local_batch_size=2 \
		--metrics.enable_tensorboard --job.dump_folder="$d"
	/usr/bin/python3 - "$d"/tb/*/events.out.tfevents.* tests/fixtures/tensorboard/torchtitan-tags.txt tests/ref <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import tfevents_read as tr
want = {"train": set(), "validation": set()}
for l in open(sys.argv[2]):
    if l.strip() and not l.startswith("#"):
        kind, tag = l.split()
        want[kind].add(tag)
assert len(want["train"]) == 17 and len(want["validation"]) == 6, want
got = {"train": set(), "validation": set()}
for e in tr.load(sys.argv[1])[1:]:
    tags = {v.tag for v in e.summary.value}
    got["validation" if "validation_metrics/loss" in tags else "train"] |= tags
for kind in want:
    missing = want[kind] - got[kind]
    assert not missing, (kind, sorted(missing))
PY
}
