# tests/bats/layouts.bash — what the multi-rank layout suites share
# (titan-train-tp-pp, -zb, -cp, the MoE ones, titan-estimate-pp-cp):
# titan-train on N MPICH ranks under a time limit, the comparison of two
# runs' loss curves (and MoE loads), titan-estimate against a run's
# memory, and the data, config and 1-rank reference they compare against.  A suite's setup_file loads this
# and calls layouts_setup_file; its setup loads it after helpers.
load tiny

# mpi N ARGS...: titan-train on N ranks (tiny_mpi)
mpi() { tiny_mpi "$@"; }

# same_curve A.jsonl B.jsonl [bits]: the losses and grad norms of every step
# of B equal A's within 1e-5 relative (bit for bit with `bits`); B ends at
# step 10 and may start later (a resumed run)
same_curve() { /usr/bin/python3 - "$@" <<'PY'
import json, sys
def load(p):
    return {o["step"]: o for o in map(json.loads, open(p)) if "loss" in o}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert b and max(b) == 10, sorted(b)
tol = 0.0 if sys.argv[3:] == ["bits"] else 1e-5
worst = 0.0
for s in sorted(b):
    for k in ("loss", "grad_norm"):
        x, y = a[s][k], b[s][k]
        rel = abs(x - y) / max(abs(x), 1e-30)
        worst = max(worst, rel)
        assert rel <= tol, (s, k, x, y, rel)
print("steps %d-%d, worst relative difference %.2e" % (min(b), max(b), worst))
PY
}

# layouts_yaml N_LAYERS VOCAB: $DATA/tiny.yaml, the layout suites' model
# (dim 64, N_LAYERS blocks, VOCAB ids) training on $DATA/shards
layouts_yaml() {
	# 4 heads / 2 kv heads of 16 (GQA), FFN 192: TP 2 and 4 split every one;
	# a vocabulary of 520 rows is no multiple of 3 or 4 (uneven vocabulary
	# shards); seq 32: CP 4 cuts each row into 8 chunks of 4 tokens
	cat > "$DATA/tiny.yaml" <<YAML
job:
  dump_folder: $DATA/out
model:
  flavor: custom
  dim: 64
  n_layers: $1
  n_heads: 4
  n_kv_heads: 2
  vocab_size: $2
  multiple_of: 32
optimizer:
  lr: 3.0e-3
lr_scheduler:
  warmup_steps: 2
training:
  dataset_path: $DATA/shards
  local_batch_size: 8
  global_batch_size: 8
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
}

# layouts_setup_file N_LAYERS (from a suite's setup_file): the corpus, a
# tokenizer of 520 tokens and its shards, $DATA/tiny.yaml (dim 64, N_LAYERS
# blocks) and the 1-rank reference run in $DATA/ref (checkpoints at 5 and
# 10); NO_MPI=1 and nothing else without MPI
layouts_setup_file() {
	tiny_env
	[ -z "${NO_MPI:-}" ] || return 0
	tiny_corpus --line 'In the beginning God created the heaven and the earth. And the earth was without form.' \
		text 3000 520 40
	layouts_yaml "$1" 520
	titan-train -q --threads 1 --config "$DATA/tiny.yaml" --checkpoint.enable --checkpoint.interval=5 \
		--job.dump_folder="$DATA/ref"
}

# same_moe_layers ONE RUN L...: RUN's losses and grad norms those of the
# 1-rank ONE (same_curve), and at every step RUN logs its moe_load equals
# ONE's (integer counts: exactly), with exactly the MoE layers L... there
same_moe_layers() {
	run -0 same_curve "$1" "$2"
	/usr/bin/python3 - "$@" <<'PY'
import json, sys
def load(p):
    return {o["step"]: o.get("moe_load") for o in map(json.loads, open(p)) if "loss" in o}
a, b = load(sys.argv[1]), load(sys.argv[2])
want = sorted("layers." + l for l in sys.argv[3:])
for s in b:
    assert b[s] == a[s], (s, a[s], b[s])
    assert sorted(b[s]) == want, (s, b[s])
    assert all(v["max_tokens"] > 0 for v in b[s].values()), (s, b[s])
PY
}

# est_vs_run N ARGS...: titan-train on N ranks (2 steps, metrics on every
# rank), then titan-estimate --device cpu --rank R for each rank: the first
# row's peak (start-up included) and its bytes by tag, and the second row's
# peak (a step alone), to the byte; prints "rank R: measured M estimated E";
# THREADS=T: T threads per rank (the attention kernel's tiles are per thread);
# EST_CONFIG: the config ($DATA/tiny.yaml by default)
est_vs_run() {
	local n=$1 o=$BATS_TEST_TMPDIR/e$1 t=${THREADS:-1} cfg=${EST_CONFIG:-$DATA/tiny.yaml}
	shift
	rm -rf "$o"
	timeout -k 5 300 mpiexec -n "$n" env OMP_NUM_THREADS="$t" titan-train -q --threads "$t" \
		--config "$cfg" --metrics.save_for_all_ranks --job.dump_folder="$o" "$@"
	/usr/bin/python3 - "$o" "$n" "$cfg" "$t" "$@" <<'PY'
import json, subprocess, sys
o, n, cfg, t, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
for r in range(n):
    rows = [json.loads(l) for l in open(o + ("/metrics.jsonl" if r == 0 else "/metrics.rank%d.jsonl" % r))]
    e = json.loads(subprocess.check_output(
        ["titan-estimate", "--config", cfg, "--device", "cpu", "--threads", t, "--json",
         "--ngpu", str(n), "--rank", str(r), "--metrics.save_for_all_ranks"] + args))
    er = e["ranks"][0]
    assert rows[0]["memory_peak_bytes"] == er["peak_bytes"], (r, rows[0]["memory_peak_bytes"], er["peak_bytes"], er["peak_moment"])
    tags = rows[0]["memory_peak_by_tag"]
    for tag in set(tags) | set(er["at_peak"]):
        assert er["at_peak"].get(tag, 0) == tags.get(tag, 0), (r, tag, tags, er["at_peak"])
    assert rows[1]["memory_peak_bytes"] == er["step_peak_bytes"], (r, rows[1]["memory_peak_bytes"], er["step_peak_bytes"])
    print("rank %d: measured %d estimated %d (%s)" % (r, rows[0]["memory_peak_bytes"], er["peak_bytes"], er["peak_moment"]))
PY
}
