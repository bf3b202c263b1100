#!/bin/sh
# tests/fuzz/seeds.sh MKSEEDS OUT — the seed corpora of the fuzz harnesses:
# OUT/<harness>/ gets the small fixtures of tests/fixtures/ and configs/
# that a harness reads, and what MKSEEDS (tests/fuzz/mkseeds.c, titan's own
# writers) makes.  Run by make fuzz-build; nothing here is committed.
set -eu
mkseeds=$1 out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
"$mkseeds" "$out"
rm -f "$out"/.scratch-*

copy() { # HARNESS FILE... (files over 64 KiB are left out)
	h=$1
	shift
	mkdir -p "$out/$h"
	for f in "$@"; do
		[ -f "$f" ] && [ "$(wc -c < "$f")" -le 65536 ] && cp "$f" "$out/$h/$(basename "$f")"
	done
	return 0
}
copy config "$src"/tests/fixtures/config/*.yaml "$src"/configs/*.yaml
copy toml "$src"/tests/data/torchtitan/*.toml
copy tokenizer "$src"/tests/fixtures/tok/*.tiktoken "$src"/tests/fixtures/tok/*.json
copy safetensors "$src"/tests/fixtures/safetensors/*.safetensors
# compressed inputs: byte 0 the mode of fuzz_instream.c, byte 1 the read
# size, bytes 2-3 a position, then the text (or, mode 0, the file itself)
mkdir -p "$out/instream"
t='In the beginning God created the heaven and the earth.
{"text": "And the earth was without form, and void."}
'
for m in 0 1 2 3 5 6 9 10 17 18 21 22; do
	printf "\\$(printf %03o "$m")\\003\\021\\000%s" "$t" > "$out/instream/mode$m"
done
if command -v gzip >/dev/null; then
	{ printf '\000\004\000\000'; printf '%s' "$t" | gzip -c; printf '%s' "$t" | gzip -c; } > "$out/instream/gz-members"
fi
if command -v zstd >/dev/null; then
	{ printf '\000\004\000\000'; printf '%s' "$t" | zstd -q -c; } > "$out/instream/zst"
fi
