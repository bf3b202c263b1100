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
copy tokenizer "$src"/tests/fixtures/tok/*.tiktoken "$src"/tests/fixtures/tok/*.json
copy safetensors "$src"/tests/fixtures/safetensors/*.safetensors
