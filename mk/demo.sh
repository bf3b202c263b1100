#!/usr/bin/env bash
# mk/demo.sh — `make demo`: what titan can do today, end to end on this CPU.
# Resolves and checks every Llama 3 preset (torchtitan's), shows the model
# arithmetic behind MFU for each, and an override round trip.  Grows with the
# toolkit: tokenize -> shard -> train -> checkpoint -> convert.
set -euo pipefail
bin=${TITAN_BIN:-bin}
cd "${TITAN_SRCDIR:-.}"
run() { printf '\n$ %s\n' "$*"; "$@"; }

run "$bin/titan-config" --version
for p in configs/llama3_debug.yaml configs/llama3_8b.yaml configs/llama3_70b.yaml configs/llama3_405b.yaml; do
	run "$bin/titan-config" --config "$p" --check
	run "$bin/titan-config" --config "$p" --summary
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run "$bin/titan-config" --config configs/llama3_8b.yaml --training.seq_len=4096 \
	--parallelism.tensor_parallel_degree=8 --non-default -o "$tmp/my8b.yaml"
run cat "$tmp/my8b.yaml"
run "$bin/titan-config" --config "$tmp/my8b.yaml" --summary
printf '\n$ %s   # a typo is caught with the file, line and a suggestion\n' \
	"titan-config --config bad.yaml"
printf 'training:\n  seq_len: 4096\n  stpes: 10\n' > "$tmp/bad.yaml"
if "$bin/titan-config" --config "$tmp/bad.yaml"; then
	echo "demo: the misspelt key was accepted" >&2
	exit 1
fi
echo
echo "demo: ok"
