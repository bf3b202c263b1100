#!/usr/bin/env bash
# bench/kjv_shards.sh OUTDIR VOCAB... — token shards of Debian's King James
# Bible (bible-kjv) for the training benches: one JSONL document per book,
# a BPE vocabulary of each size trained with titan-tokenize, then
# OUTDIR/dataVOCAB/ from titan-tokenize | titan-shard (400K-token shards).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: kjv_shards.sh OUTDIR VOCAB..." >&2; exit 2; }
out=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TITAN_BIN:-$root/bin}
command -v bible >/dev/null || { echo "kjv_shards.sh: error: bible (Debian package bible-kjv) is needed" >&2; exit 1; }
mkdir -p "$out"
bible -f gen1:1-rev22:21 | /usr/bin/python3 "$root/mk/kjv-jsonl.py" > "$out/kjv.jsonl"
for v in "$@"; do
	"$bin/titan-tokenize" train --vocab-size "$v" "$out/kjv.jsonl" -o "$out/kjv$v.tiktoken" 2>/dev/null
	"$bin/titan-tokenize" -t "$out/kjv$v.tiktoken" "$out/kjv.jsonl" -o "$out/kjv$v.tok" 2>/dev/null
	"$bin/titan-shard" -t "$out/kjv$v.tiktoken" --out "$out/data$v" --shard-tokens 400K \
		"$out/kjv$v.tok" 2>/dev/null
done
