#!/usr/bin/env bash
# bench/train_gpu.sh — titan-train on one GPU against PyTorch on the same GPU
# (tests/ref/torch_train_gpu.py, eager and torch.compile), the same model,
# batch and sequence length, in the same run; prints tokens/s, MFU, peak
# memory and the ratios.
#
#   bench/train_gpu.sh [--models debug,125m,1b] [--steps N] [--warmup W] [--quick]
#                      [--batch MODEL=B,...] [--precision bf16|fp32] [--peak-flops F]
#                      [--no-compile] [--device cuda|cpu]
#
# Models (Llama 3 as torchtitan builds it; activation checkpointing none on
# both sides):
#   debug  torchtitan's debugmodel (configs/llama3_debug.yaml's flavor): dim
#          256, 6 layers, 16 heads, vocab 2048, seq 2048, batch 8 (its config)
#   125m   dim 768, 12 layers, 12 heads (MHA), FFN 2048, vocab 32000 (a
#          Llama 2-sized vocabulary: the tokens are random, see below):
#          134 M parameters, 85 M without the embeddings; seq 2048, batch 16
#   1b     titan's flavor 1B = torchtitan's / Llama 3.2 1B: dim 2048, 16
#          layers, 32 heads, 8 KV heads, ffn_dim_multiplier 1.5 (FFN 8192),
#          vocab 128256, tied embeddings, 1.236 B parameters; seq 2048, batch 4
#   tiny   (not in the default list: the CPU logic check, --device cpu) dim 64,
#          2 layers, 4 heads, 2 KV heads, vocab 768, seq 128, batch 2
# The batch is the same for titan and PyTorch; --batch 1b=8,125m=32 changes it.
# titan keeps its activations in fp32, PyTorch under autocast in bf16, so
# titan needs more memory at the same batch: the defaults fit an 80 GB H100.
#
# Each model, in this order: titan-train (training.device cuda, the config
# written to OUT/MODEL/titan.yaml), torch_train_gpu.py eager, then with
# --compile.  All three run --steps steps (default 30; --quick: 12) of
# AdamW (lr 8e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1, fused),
# warmup 2 then linear decay, gradient clipping at 1.0; the first --warmup
# steps (default 5; --quick: 4) are not timed (start-up, cuBLAS heuristics,
# torch.compile) and tokens/s is batch x seq over the median of the others:
# titan's from its per-step log line (`tps:`), PyTorch's from its own
# per-step timing (torch.cuda.synchronize around each step).
# Precision: bf16 (default) = titan's training.mixed_precision_param
# bfloat16 (bf16 tensor-core GEMMs, fp32 master weights) against PyTorch's
# fp32 parameters under torch.autocast(bfloat16); fp32 = float32 GEMMs on
# both sides (TF32 off in PyTorch).
# MFU = FLOPs/token x tokens/s / peak, FLOPs/token = 6 (N - N_embedding) +
# 12 L H head_dim seq (torchtitan's formula; the embedding counts when
# tied), peak = --peak-flops (default 989e12, the H100/H200 bf16 dense
# peak) on both sides (titan: metrics.peak_flops).  The script checks that
# both sides count the same parameters and FLOPs/token before it compares.
# Memory: titan's peak is the largest `memory:` of its step lines (its
# device allocator's peak), PyTorch's torch.cuda.max_memory_allocated().
#
# Data: titan reads shards of uniformly random token ids (any python3
# writes the stream, titan-shard --vocab-size V --eos-id -1 shards it);
# PyTorch draws random tokens of the same shape.  The content does not
# change the work of a step, and nothing is downloaded: the GPU machine
# needs titan's tools (bin/, or TITAN_BIN=DIR, or titan-train on PATH as
# mk/device-run.sh sets it) and a python3 with PyTorch 2 (PYTHON=...).
#
# Output: the table on standard output; OUT (default bench/out) gets
# env.txt, results.md (environment + table), results.jsonl (one object per
# model) and OUT/MODEL/ with titan.yaml, titan.log, titan/metrics.jsonl,
# torch_{eager,compile}.{json,log}.  A run that fails stops the script
# (exit 1) with the tail of its log; the rows of the models finished before
# stay in results.md.  --device cpu runs the same pipeline on the CPU for a
# logic check (titan on its CPU backend, PyTorch on the CPU, no compile
# unless it is PyTorch 2): the numbers mean nothing there.
#
# On a bare GPU machine (no Debian packages, no network): build here, pack
# with mk/device-bundle.sh (carry .device/), then
#   OUT=$OUT bash mk/device-run.sh bench --models 1b
# which puts the bundle's titan tools and libraries on PATH and
# LD_LIBRARY_PATH and runs this script.  One model per call keeps a call
# within a 10-minute limit (torch.compile of the 1B model takes a minute or
# two); --quick shortens every run.
set -euo pipefail

prog=train_gpu.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
usage() {
	sed -n '7,9p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

models=debug,125m,1b steps='' warmup='' quick=0 precision=bf16 peak=989e12 compile=1 device=cuda
batch_over=
while [ $# -gt 0 ]; do
	case "$1" in
	--models) [ $# -ge 2 ] || usage; models=$2; shift ;;
	--steps) [ $# -ge 2 ] || usage; steps=$2; shift ;;
	--warmup) [ $# -ge 2 ] || usage; warmup=$2; shift ;;
	--quick) quick=1 ;;
	--batch) [ $# -ge 2 ] || usage; batch_over=$2; shift ;;
	--precision) [ $# -ge 2 ] || usage; precision=$2; shift ;;
	--peak-flops) [ $# -ge 2 ] || usage; peak=$2; shift ;;
	--no-compile) compile=0 ;;
	--device) [ $# -ge 2 ] || usage; device=$2; shift ;;
	-h | --help) sed -n '2,70p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$prog: error: unknown argument '$1'" >&2; usage ;;
	esac
	shift
done
if [ "$quick" = 1 ]; then
	steps=${steps:-12} warmup=${warmup:-4}
else
	steps=${steps:-30} warmup=${warmup:-5}
fi
case "$steps" in '' | *[!0-9]*) die "--steps needs a positive integer" ;; esac
case "$warmup" in '' | *[!0-9]*) die "--warmup needs an integer >= 0" ;; esac
[ "$steps" -gt "$warmup" ] || die "--steps ($steps) must exceed --warmup ($warmup): nothing would be timed"
case "$precision" in bf16) mp=bfloat16 ;; fp32) mp=float32 ;; *) die "--precision: bf16 or fp32" ;; esac
case "$device" in cuda | cpu) ;; *) die "--device: cuda or cpu" ;; esac
awk -v p="$peak" 'BEGIN { exit !(p + 0 > 0) }' || die "--peak-flops needs a positive number"
models=${models//,/ }
[ -n "${models// /}" ] || die "--models: empty list"
for m in $models; do
	case "$m" in debug | 125m | 1b | tiny) ;; *) die "unknown model '$m' (debug, 125m, 1b, tiny)" ;; esac
done

# ---- per-model shape (bench/gpu_common.sh: seq_of, batch_default, vocab_of,
# titan_model_yaml, peer_model_args)
# shellcheck source=bench/gpu_common.sh
. "$root/bench/gpu_common.sh"
batch_of() {
	local b
	b=$(batch_default "$1")
	for kv in ${batch_over//,/ }; do
		case "$kv" in "$1="*) b=${kv#*=} ;; esac
	done
	case "$b" in '' | *[!0-9]* | 0) die "--batch: '$1' needs a positive integer, got '$b'" ;; esac
	echo "$b"
}
for kv in ${batch_over//,/ }; do
	case "${kv%%=*}" in debug | 125m | 1b | tiny) ;; *) die "--batch: unknown model in '$kv'" ;; esac
	case "$kv" in *=*) ;; *) die "--batch: expected MODEL=B, got '$kv'" ;; esac
	case "${kv#*=}" in '' | *[!0-9]* | 0) die "--batch: '$kv' needs a positive integer" ;; esac
done

# ---- tools
find_titan_bin titan-train titan-config titan-shard
find_torch_python "$device"
peer=$root/tests/ref/torch_train_gpu.py
[ -f "$peer" ] || die "$peer is missing"
if [ "$compile" = 1 ] && ! "$py" -c 'import torch, sys; sys.exit(0 if hasattr(torch, "compile") else 1)'; then
	if [ "$device" = cuda ]; then
		die "$py has no torch.compile (PyTorch $("$py" -c 'import torch; print(torch.__version__)')); --no-compile to skip it"
	fi
	echo "$prog: note: PyTorch $("$py" -c 'import torch; print(torch.__version__)') has no torch.compile: the compile runs are skipped" >&2
	compile=0
fi

out=${OUT:-bench/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
data_root=${DATA_DIR:-$tmp/data}

# ---- helpers (python3: data, log parsing, the table)
cat > "$tmp/h.py" <<'PY'
import array, json, math, random, re, statistics, sys

def gen(n, vocab, seed):
    """n uniformly random ids < vocab as little-endian uint32 on stdout."""
    r = random.Random(seed)
    out = sys.stdout.buffer
    left = n
    while left:
        k = min(left, 1 << 20)
        a = array.array("I", [r.randrange(vocab) for _ in range(k)])
        if sys.byteorder != "little":
            a.byteswap()
        out.write(a.tobytes())
        left -= k

LINE = re.compile(r"step:\s*(\d+)\s+loss:\s*(\S+)\s+grad_norm:\s*\S+\s+memory:\s*([\d.]+)GiB"
                  r".*?tps:\s*([\d,]+)\s+tflops:\s*([\d.,]+)\s+mfu:\s*([\d.]+)%")

def titan(log, steps, warmup):
    """titan-train's step lines -> JSON: median tps/mfu of the timed steps."""
    rows = {}
    for line in open(log, errors="replace"):
        m = LINE.search(line)
        if m:
            rows[int(m.group(1))] = m
    got = sorted(rows)
    if got != list(range(1, steps + 1)):
        sys.exit(f"{log}: expected step lines 1..{steps}, found {len(got)} "
                 f"({got[:3]}...{got[-3:]})")
    timed = [rows[s] for s in range(warmup + 1, steps + 1)]
    tps = [float(r.group(4).replace(",", "")) for r in timed]
    mfu = [float(r.group(6)) for r in timed]
    losses = [float(rows[s].group(2)) for s in got]
    if not all(math.isfinite(x) for x in losses):
        sys.exit(f"{log}: non-finite loss")
    if not all(x > 0 for x in tps):
        sys.exit(f"{log}: a timed step has tps 0")
    print(json.dumps({"tps": statistics.median(tps), "mfu_pct": statistics.median(mfu),
                      "peak_mem_gib": max(float(rows[s].group(3)) for s in got),
                      "final_loss": losses[-1], "tps_steps": tps}))

def summary(path):
    """titan-config --summary -> {params, flops_per_token, ffn_hidden, vocab, tied}."""
    t = open(path).read()
    g = lambda p: re.search(p, t)
    return {"params": int(g(r"parameters:\s+(\d+) total").group(1)),
            "flops_per_token": float(g(r"flops/token:\s+([0-9.e+]+)").group(1)),
            "ffn_hidden": int(g(r"ffn hidden (\d+)").group(1)),
            "vocab": int(g(r"vocab (\d+)").group(1)),
            "tied": "tied embeddings" in t}

def check(summ, peer_json, name):
    """titan and the peer build the same model: parameters, FFN, FLOPs/token."""
    s = summary(summ)
    p = json.load(open(peer_json))
    bad = []
    if s["params"] != p["params"]:
        bad.append(f"parameters titan {s['params']} vs torch {p['params']}")
    if s["ffn_hidden"] != p["ffn_hidden"]:
        bad.append(f"FFN hidden titan {s['ffn_hidden']} vs torch {p['ffn_hidden']}")
    if s["tied"] != p["tied"]:
        bad.append(f"tied embeddings titan {s['tied']} vs torch {p['tied']}")
    if abs(s["flops_per_token"] - p["flops_per_token"]) > 0.006 * p["flops_per_token"]:
        bad.append(f"FLOPs/token titan {s['flops_per_token']:.3e} vs torch {p['flops_per_token']:.3e}")
    if bad:
        sys.exit(f"{name}: titan and PyTorch do not build the same model: " + "; ".join(bad))

def row(model, batch, seq, summ, tj, ej, cj):
    """One result object (results.jsonl) and one Markdown row (stdout)."""
    s = summary(summ)
    t = json.load(open(tj))
    e = json.load(open(ej))
    c = json.load(open(cj)) if cj != "-" else None
    gib = lambda x: None if x is None else x / 2**30
    r = {"model": model, "params": s["params"], "flops_per_token": e["flops_per_token"],
         "batch": batch, "seq": seq,
         "titan": t, "torch_eager": {k: e[k] for k in ("tps", "mfu_pct", "peak_mem_bytes",
                                                       "final_loss", "median_step_s")},
         "torch_compile": None if c is None else
         {k: c[k] for k in ("tps", "mfu_pct", "peak_mem_bytes", "final_loss", "median_step_s")},
         "titan_over_eager": t["tps"] / e["tps"],
         "titan_over_compile": None if c is None else t["tps"] / c["tps"]}
    fm = lambda x: "—" if x is None else f"{x:.2f}"
    pct = lambda x: f"{x:.1f}%" if x >= 1 else f"{x:.2g}%"
    cells = [model, f"{s['params'] / 1e6:.1f} M", f"{batch}×{seq}",
             f"{t['tps']:,.0f}", pct(t["mfu_pct"]),
             f"{e['tps']:,.0f}", pct(e["mfu_pct"]),
             "not run" if c is None else f"{c['tps']:,.0f}",
             "—" if c is None else pct(c["mfu_pct"]),
             f"**{r['titan_over_eager']:.2f}×**",
             "—" if c is None else f"**{r['titan_over_compile']:.2f}×**",
             fm(t["peak_mem_gib"]), fm(gib(e["peak_mem_bytes"])),
             "—" if c is None else fm(gib(c["peak_mem_bytes"]))]
    print("| " + " | ".join(cells) + " |")
    with open(sys.argv[-1], "a") as f:
        f.write(json.dumps(r) + "\n")

cmd = sys.argv[1]
if cmd == "gen":
    gen(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
elif cmd == "titan":
    titan(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
elif cmd == "check":
    check(sys.argv[2], sys.argv[3], sys.argv[4])
elif cmd == "row":
    row(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:9])
PY

# data MODEL -> a folder of shards of random ids with the model's vocab,
# enough tokens for every step (made once per vocab and size)
data_for() {
	local v b s n dir
	v=$(vocab_of "$1") b=$(batch_of "$1") s=$(seq_of "$1")
	n=$(((steps + 1) * b * (s + 1)))
	dir=$data_root/v${v}_n$n
	if [ ! -f "$dir/.done" ]; then
		rm -rf "$dir"
		mkdir -p "$dir"
		"$py" "$tmp/h.py" gen "$n" "$v" 0 > "$tmp/ids.bin" || die "cannot write random ids"
		"$bin/titan-shard" -q --vocab-size "$v" --eos-id -1 --out "$dir/shards" "$tmp/ids.bin" ||
			die "titan-shard failed on $n random ids (vocab $v)"
		rm -f "$tmp/ids.bin"
		touch "$dir/.done"
	fi
	echo "$dir/shards"
}

# training.device: cuda for the bench; for --device cpu, cpu where the
# schema has the key (it is left out otherwise)
device_yaml=
if [ "$device" = cuda ]; then
	device_yaml="  device: cuda"
elif "$bin/titan-config" --training.device=cpu --check >/dev/null 2>&1; then
	device_yaml="  device: cpu"
fi

write_config() { # MODEL DIR DATA BATCH SEQ
	cat > "$2/titan.yaml" <<YAML
# written by bench/train_gpu.sh ($1)
job:
  dump_folder: $2/titan
  description: bench/train_gpu.sh $1
model:
  name: llama3
$(titan_model_yaml "$1")
optimizer:
  name: AdamW
  lr: 8.0e-4
  beta1: 0.9
  beta2: 0.95
  eps: 1.0e-8
  weight_decay: 0.1
  implementation: fused
lr_scheduler:
  warmup_steps: 2
training:
$device_yaml
  dataset_path: $3
  local_batch_size: $4
  seq_len: $5
  steps: $steps
  max_norm: 1.0
  dtype: float32
  mixed_precision_param: $mp
  seed: 0
metrics:
  log_freq: 1
  disable_color_printing: true
  peak_flops: $peak
activation_checkpoint:
  mode: none
checkpoint:
  enable: false
validation:
  enable: false
YAML
}

# ---- environment
{
	echo "date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
	if [ "$device" = cuda ] && command -v nvidia-smi >/dev/null; then
		echo "gpu:       $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
	fi
	echo "device:    $device"
	echo "titan:     $("$bin/titan-train" --version 2>&1 | tr '\n' ' ')"
	echo "torch:     $("$py" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)') ($py)"
	echo "precision: $precision (titan training.mixed_precision_param $mp; PyTorch $([ "$precision" = bf16 ] && echo 'fp32 params + autocast bf16' || echo 'fp32, TF32 off'))"
	echo "timing:    $steps steps, the median of the last $((steps - warmup)) (first $warmup not timed); MFU against $peak FLOP/s"
	echo "compile:   $([ "$compile" = 1 ] && echo 'torch.compile per TransformerBlock (fullgraph) + loss' || echo 'not run')"
} > "$out/env.txt"
echo "== environment"
cat "$out/env.txt"
echo

header='| model | params | batch×seq | titan tok/s | titan MFU | torch eager tok/s | eager MFU | torch compile tok/s | compile MFU | titan / eager | titan / compile | titan peak GiB | eager peak GiB | compile peak GiB |'
sep='|---|---|---|---|---|---|---|---|---|---|---|---|---|---|'
{
	echo "# bench/train_gpu.sh"
	echo
	sed 's/^/    /' "$out/env.txt"
	echo
	echo "$header"
	echo "$sep"
} > "$out/results.md"
: > "$out/results.jsonl"
echo "$header"
echo "$sep"

titan_dev=
for m in $models; do
	b=$(batch_of "$m") s=$(seq_of "$m")
	dir=$out/$m
	rm -rf "$dir"
	mkdir -p "$dir"
	shards=$(data_for "$m")
	write_config "$m" "$dir" "$shards" "$b" "$s"
	"$bin/titan-config" --config "$dir/titan.yaml" --summary > "$dir/titan-summary.txt" 2> "$dir/titan-config.log" ||
		fail_run "titan-config on $dir/titan.yaml" $? "$dir/titan-config.log"

	# titan-train
	rc=0
	"$bin/titan-train" --config "$dir/titan.yaml" > "$dir/titan.log" 2>&1 || rc=$?
	[ "$rc" = 0 ] || fail_run "titan-train ($m)" "$rc" "$dir/titan.log"
	if [ "$device" = cuda ]; then
		grep -q 'INFO - Device: ' "$dir/titan.log" ||
			die "titan-train ($m) did not report a CUDA device ('Device:' line): it did not train on the GPU (see $dir/titan.log)"
		titan_dev=$(grep -m1 -o 'Device: .*' "$dir/titan.log")
	fi
	"$py" "$tmp/h.py" titan "$dir/titan.log" "$steps" "$warmup" > "$dir/titan.json" ||
		die "cannot read titan-train's step lines in $dir/titan.log"

	# PyTorch, eager then compiled
	# shellcheck disable=SC2046
	set -- $(peer_model_args "$m") --seq "$s" --batch "$b" --steps $((steps - warmup)) \
		--warmup "$warmup" --precision "$precision" --peak-flops "$peak" --device "$device"
	rc=0
	"$py" "$peer" "$@" > "$dir/torch_eager.json" 2> "$dir/torch_eager.log" || rc=$?
	[ "$rc" = 0 ] || fail_run "torch_train_gpu.py eager ($m)" "$rc" "$dir/torch_eager.log"
	"$py" "$tmp/h.py" check "$dir/titan-summary.txt" "$dir/torch_eager.json" "$m" || exit 1
	cj=-
	if [ "$compile" = 1 ]; then
		rc=0
		"$py" "$peer" "$@" --compile > "$dir/torch_compile.json" 2> "$dir/torch_compile.log" || rc=$?
		[ "$rc" = 0 ] || fail_run "torch_train_gpu.py --compile ($m)" "$rc" "$dir/torch_compile.log"
		cj=$dir/torch_compile.json
	fi
	"$py" "$tmp/h.py" row "$m" "$b" "$s" "$dir/titan-summary.txt" "$dir/titan.json" \
		"$dir/torch_eager.json" "$cj" "$out/results.jsonl" | tee -a "$out/results.md"
done
if [ -n "$titan_dev" ]; then
	echo "titan-train: $titan_dev" | tee -a "$out/results.md"
fi
echo
echo "results: $out/results.md, $out/results.jsonl; logs under $out/<model>/"
