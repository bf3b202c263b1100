#!/usr/bin/env bash
# bench/estimate_vs_train.sh — titan-estimate's CPU model against what
# titan-train measures, on 14 configurations (the table of docs/estimate.md).
#
#   bench/estimate_vs_train.sh [--shards DIR] [--out DIR] [--threads N]
#
# Each configuration trains for 2 steps on KJV shards (Genesis, built here
# with titan-tokenize/titan-shard from Debian's bible-kjv unless --shards
# gives a folder) with the memory event log on, then runs
#   titan-estimate --device cpu --threads N --json
# on the same config, and bench/estimate_compare.py compares: the peak of
# step 1 (metrics.jsonl, which counts from process start) and of the
# memtrace replay against the estimate's peak within 5 %, the last step's
# peak against its steady-state peak within 5 %, every nonzero tag within
# 10 % (at the peak and each tag's own peak), and the phase of the peak.
# Prints a Markdown table on stdout; exit 1 if any row breaks a bound.
# TITAN_BIN=DIR runs another build's tools (default: ./bin).
set -euo pipefail

prog=estimate_vs_train.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
PATH=${TITAN_BIN:-$here/../bin}:$PATH
shards='' out='' threads=2
while [ $# -gt 0 ]; do
	case $1 in
	--shards) shards=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	*) sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
[ -n "$out" ] || { out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; }
mkdir -p "$out"
if [ -z "$shards" ]; then
	shards=$out/shards
	command -v bible >/dev/null || die "bible (Debian's bible-kjv) is needed to make shards"
	bible -f gen1:1-gen50:26 > "$out/genesis.txt"
	titan-tokenize train --vocab-size 768 --format text "$out/genesis.txt" -o "$out/tok.tiktoken"
	titan-tokenize -t "$out/tok.tiktoken" --doc-per-line "$out/genesis.txt" |
		titan-shard -q -t "$out/tok.tiktoken" --out "$shards" --val-docs 40
fi

# tests' tiny model: 2 blocks of width 64, 4 heads (2 kv), vocab 768
cat > "$out/tiny.yaml" <<YAML
model:
  flavor: custom
  dim: 64
  n_layers: 2
  n_heads: 4
  n_kv_heads: 2
  vocab_size: 768
  multiple_of: 32
training:
  dataset_path: $shards
  local_batch_size: 2
  seq_len: 64
  steps: 2
metrics:
  log_freq: 1
  peak_flops: 1.0e+11
activation_checkpoint:
  mode: none
YAML

# label | overrides (the model flags go to both tools)
configs=(
"tiny, AC none|"
"tiny, sgemm peak probe|--metrics.peak_flops=null --metrics.measure_peak_flops=true"
"tiny, full AC|--activation_checkpoint.mode=full"
"tiny 4 layers, selective 2|--model.n_layers=4 --activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=2"
"tiny 3 layers, selective op|--model.n_layers=3 --activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op"
"tiny, batch 4 x seq 128|--training.local_batch_size=4 --training.seq_len=128"
"tiny, batch 1 x seq 512, 1 thread|--training.local_batch_size=1 --training.seq_len=512 --threads 1"
"tiny, 4 microbatches (global batch 8)|--training.global_batch_size=8"
"tiny, tied embeddings|--model.tie_word_embeddings=true"
"debugmodel, selective 2, 2 x 128|--model.flavor=debugmodel --model.dim=-1 --model.n_layers=-1 --model.n_heads=-1 --model.n_kv_heads=-1 --model.vocab_size=-1 --model.multiple_of=-1 --training.seq_len=128 --activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=2"
"debugmodel, full AC, 1 x 256, probe|--model.flavor=debugmodel --model.dim=-1 --model.n_layers=-1 --model.n_heads=-1 --model.n_kv_heads=-1 --model.vocab_size=-1 --model.multiple_of=-1 --training.local_batch_size=1 --training.seq_len=256 --activation_checkpoint.mode=full --metrics.peak_flops=null --metrics.measure_peak_flops=true"
"dim 128 MHA 3 layers, selective 1, 1 x 512|--model.dim=128 --model.n_layers=3 --model.n_heads=8 --model.n_kv_heads=8 --training.local_batch_size=1 --training.seq_len=512 --activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=1"
"dim 256 (head_dim 128), 24 x 32, 48 threads|--model.dim=256 --model.n_heads=2 --model.n_kv_heads=2 --training.local_batch_size=24 --training.seq_len=32 --threads 48"
"debugmodel, AC none, 2 x 64, validation|--model.flavor=debugmodel --model.dim=-1 --model.n_layers=-1 --model.n_heads=-1 --model.n_kv_heads=-1 --model.vocab_size=-1 --model.multiple_of=-1 --validation.enable=true --validation.freq=1 --validation.steps=2 --validation.seq_len=64 --validation.local_batch_size=2"
)

echo "| configuration | measured peak (B) | estimated (B) | difference | measured later steps (B) | estimated (B) | worst tag | peak phase measured / estimated |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
status=0 i=0
for c in "${configs[@]}"; do
	label=${c%%|*} ov=${c#*|} i=$((i + 1))
	th=$threads
	# shellcheck disable=SC2086
	set -- $ov
	args=()
	for a in "$@"; do
		case $a in
		--threads) ;;
		[0-9]*) th=$a ;;
		*) args+=("$a") ;;
		esac
	done
	d=$out/run$i
	titan-train -q --config "$out/tiny.yaml" --threads "$th" --job.dump_folder="$d" \
		--profiling.enable_memory_snapshot=true "${args[@]}" >/dev/null
	titan-estimate --config "$out/tiny.yaml" --device cpu --threads "$th" --json \
		"${args[@]}" > "$d/estimate.json"
	/usr/bin/python3 "$here/estimate_compare.py" "$label" "$d/metrics.jsonl" \
		"$d/memory_snapshot/rank0.memtrace" "$d/estimate.json" || status=1
done
exit $status
