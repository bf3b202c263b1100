# tests/bats/layouts.bash — what the multi-rank layout suites share
# (titan-train-tp-pp, -zb, -cp): titan-train on N MPICH ranks under a time
# limit, the comparison of two runs' loss curves, and the data, config and
# 1-rank reference they compare against.  A suite's setup_file loads this
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
