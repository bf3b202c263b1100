#!/usr/bin/env bash
# mk/demo.sh — `make demo`: the toolkit end to end on this CPU, on data it
# gets from Debian packages (the King James Bible, bible-kjv):
#   1. configs: resolve and check every Llama 3 preset (torchtitan's), with
#      the model arithmetic behind MFU, and catch a typo;
#   2. data: train a BPE vocabulary, tokenize the corpus in parallel,
#      cut shards with a validation split, verify them, and decode a shard
#      back to the exact text.
#   3. train: torchtitan's debug model (6.2 M parameters) on those shards for
#      a couple of minutes on this CPU; the loss falls from about ln(vocab).
# Grows with the toolkit: checkpoint -> convert.
set -euo pipefail
bin=${TITAN_BIN:-bin}
cd "${TITAN_SRCDIR:-.}"
run() { printf '\n$ %s\n' "$*"; "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== configs"
run "$bin/titan-config" --version
for p in configs/llama3_debug.yaml configs/llama3_8b.yaml configs/llama3_70b.yaml configs/llama3_405b.yaml; do
	run "$bin/titan-config" --config "$p" --check
	run "$bin/titan-config" --config "$p" --summary
done
run "$bin/titan-config" --config configs/llama3_8b.yaml --training.seq_len=4096 \
	--parallelism.tensor_parallel_degree=8 --non-default -o "$tmp/my8b.yaml"
run cat "$tmp/my8b.yaml"
printf 'training:\n  seq_len: 4096\n  stpes: 10\n' > "$tmp/bad.yaml"
printf '\n$ titan-config --config bad.yaml   # a typo: caught with file, line and a suggestion\n'
if "$bin/titan-config" --config "$tmp/bad.yaml"; then
	echo "demo: the misspelt key was accepted" >&2
	exit 1
fi

echo
echo "== data: King James Bible (Debian bible-kjv) -> tokenizer -> token stream -> shards"
# one document per book of the Bible, as JSONL
bible -f gen1:1-rev22:21 | /usr/bin/python3 mk/kjv-jsonl.py > "$tmp/kjv.jsonl"
run wc -c "$tmp/kjv.jsonl"
run "$bin/titan-tokenize" train --vocab-size 2048 "$tmp/kjv.jsonl" -o "$tmp/kjv.tiktoken"
run "$bin/titan-tokenize" -t "$tmp/kjv.tiktoken" --progress "$tmp/kjv.jsonl" -o "$tmp/kjv.tok"
run "$bin/titan-shard" -t "$tmp/kjv.tiktoken" --out "$tmp/data" --shard-tokens 400K \
	--val-docs 2 "$tmp/kjv.tok"
run "$bin/titan-shard" info "$tmp/data"
run "$bin/titan-shard" verify "$tmp/data"
printf '\n$ titan-tokenize -t kjv.tiktoken -d train shards ... | cmp - original   # exact round trip\n'
/usr/bin/python3 -c '
import sys
# the payload of every shard, in order (header 4096 bytes, u16 ids)
import glob, struct
out = open(sys.argv[2], "wb")
for p in sorted(glob.glob(sys.argv[1] + "/val-*.tok")) + sorted(glob.glob(sys.argv[1] + "/train-*.tok")):
    d = open(p, "rb").read()
    ids = struct.unpack("<%dH" % ((len(d) - 4096) // 2), d[4096:])
    out.write(struct.pack("<%dI" % len(ids), *ids))' "$tmp/data" "$tmp/all.tok"
"$bin/titan-tokenize" -t "$tmp/kjv.tiktoken" -d "$tmp/all.tok" > "$tmp/back.jsonl"
cmp "$tmp/back.jsonl" <(/usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    print(json.dumps({"text": json.loads(l)["text"]}, ensure_ascii=False, separators=(",", ":")))' "$tmp/kjv.jsonl")
echo "identical"

echo
echo "== train: torchtitan's debug model on the KJV shards (CPU)"
run "$bin/titan-train" --config configs/llama3_debug.yaml --training.dataset_path="$tmp/data" \
	--training.seq_len=256 --training.local_batch_size=4 --training.steps=${DEMO_STEPS:-60} \
	--lr_scheduler.warmup_steps=5 --metrics.log_freq=5 --activation_checkpoint.mode=none \
	--validation.enable --validation.freq=30 --validation.seq_len=256 \
	--validation.local_batch_size=4 --validation.steps=10 --job.dump_folder="$tmp/out"
echo
echo "demo: ok"
