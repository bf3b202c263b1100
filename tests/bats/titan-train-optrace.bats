#!/usr/bin/env bats
# titan-train's profiler: a profiled step's Chrome trace has an event per
# backend op (category "op", the op's name, its sizes as args) nested under
# the model's spans, as torch.profiler's traces show ops under the modules;
# on 1 rank and on 2 ranks with tensor parallelism (vocabulary-parallel
# embedding and loss).

bats_require_minimum_version 1.5.0

setup_file() {
	load tiny
	tiny_env
	tiny_corpus --bible genesis 4000 768 40
	# 2 blocks of width 64, 4 heads / 2 kv heads: TP 2 splits every one
	tiny_yaml "$DATA/tiny.yaml" 768 64 2 4 2 <<YAML
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 64
  steps: 3
profiling:
  enable_profiling: true
  profile_freq: 2
  profiler_warmup: 0
YAML
}

setup() {
	load helpers
	load tiny
	cd "$TITAN_SRCDIR"
}

# check_ops TRACE RANK OPS...: every "op" event is a complete event of the
# rank's main track inside the step span, nested (never half in) under the
# model's spans; each named op occurs, and each op of a layer lies inside
# a "layer N ..." span at least once; the loss ops inside "loss", AdamW
# inside "optimizer"; matmuls carry m/n/k
check_ops() { /usr/bin/python3 - "$@" <<'PY'
import json, re, sys
path, rank, want = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
ev = json.load(open(path))["traceEvents"]
ops = [e for e in ev if e.get("cat") == "op"]
spans = [e for e in ev if e["ph"] == "X" and e.get("cat") != "op" and e["tid"] == 0]
eps = 1e-3
def inside(e, s):
    return s["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + eps
def disjoint(e, s):
    return e["ts"] + e["dur"] <= s["ts"] + eps or s["ts"] + s["dur"] <= e["ts"] + eps
step = next(s for s in spans if s["name"] == "step")
assert ops, "no op events in " + path
for e in ops:
    assert e["ph"] == "X" and e["pid"] == rank and e["tid"] == 0 and e["dur"] >= 0, e
    assert e["args"]["step"] == step["args"]["step"] and inside(e, step), e
    for s in spans:  # Perfetto nests by time: an op is in a span or out of it
        assert inside(e, s) or disjoint(e, s), (e, s)
names = {e["name"] for e in ops}
for n in want:
    assert n in names, (n, sorted(names))
def under(e, pat):
    return any(inside(e, s) and re.fullmatch(pat, s["name"]) for s in spans)
layer = {"fwd": r"layer \d+ forward", "bwd": r"layer \d+ (backward|recompute)"}
for n in want:
    ev_n = [e for e in ops if e["name"] == n]
    kind = n.rsplit("_", 1)[-1]
    if n.split("_")[0] in ("matmul", "rmsnorm", "rope", "swiglu", "attention"):
        assert any(under(e, layer[kind]) for e in ev_n), (n, "not under a layer span")
    if n.split("_")[0] in ("rope", "swiglu", "attention"):  # only in the blocks
        assert all(under(e, r"layer \d+ \w+") for e in ev_n), (n, "outside the layers")
    if n in ("classifier_ce", "ce_part_max", "ce_part_exp", "ce_part_grad"):
        assert all(under(e, r"loss|norm backward") for e in ev_n), (n, "outside the loss")
    if n in ("adamw_step", "adamw_multi"):
        assert all(under(e, "optimizer") for e in ev_n), (n, "outside the optimizer")
    if n.startswith("matmul"):
        for e in ev_n:
            assert all(e["args"][k] > 0 for k in "mnk"), e
print(len(ops), "op events,", len(names), "ops")
PY
}

LAYER_OPS="matmul_fwd matmul_bwd rmsnorm_fwd rmsnorm_bwd attention_fwd attention_bwd rope_fwd
rope_bwd swiglu_fwd swiglu_bwd adamw_step sumsq"

@test "profiling: a traced step has op events nested under the layer spans (1 rank)" {
	run -0 titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder="$BATS_TEST_TMPDIR/p"
	# shellcheck disable=SC2086
	run -0 check_ops "$BATS_TEST_TMPDIR/p/profile_traces/iteration_2/rank0_trace.json" 0 \
		$LAYER_OPS classifier_ce embedding_fwd embedding_bwd sumsq_multi adamw_multi
	# the timing report still reads the trace, ops not counted as phases
	run -0 titan-memprof time "$BATS_TEST_TMPDIR/p/profile_traces/iteration_2/rank0_trace.json"
	[[ $output == *"1 profiled step"* ]]
	[[ $output != *"matmul"* ]]
}

@test "profiling: op events on 2 ranks with TP 2 (vocabulary-parallel ops)" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI in this build (or no mpiexec)"
	run -0 timeout 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/p" --parallelism.tensor_parallel_degree=2
	for r in 0 1; do
		# shellcheck disable=SC2086
		run -0 check_ops "$BATS_TEST_TMPDIR/p/profile_traces/iteration_2/rank${r}_trace.json" $r \
			$LAYER_OPS embedding_part_fwd embedding_part_bwd ce_part_max ce_part_exp ce_part_grad
	done
	# the collectives keep their own track
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/p/profile_traces/iteration_2/rank0_trace.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
assert any(e.get("cat") == "comm" and e["tid"] == 1 for e in ev)
PY
}

@test "profiling: FSDP 2's packing and gradient sums are op events too" {
	[ -z "${NO_MPI:-}" ] || skip "no MPI in this build (or no mpiexec)"
	run -0 timeout 120 mpiexec -n 2 env OMP_NUM_THREADS=1 titan-train -q --config "$DATA/tiny.yaml" \
		--job.dump_folder="$BATS_TEST_TMPDIR/p" --parallelism.data_parallel_shard_degree=2 \
		--training.global_batch_size=4
	# shellcheck disable=SC2086
	run -0 check_ops "$BATS_TEST_TMPDIR/p/profile_traces/iteration_2/rank0_trace.json" 0 \
		$LAYER_OPS buf_copy buf_copy_rows buf_memset add
}
