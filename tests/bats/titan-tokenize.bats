#!/usr/bin/env bats
# titan-tokenize: the tool contract, exact round trips in every input
# format, order and segmentation invariance under threads, invalid UTF-8,
# special tokens, BPE training, and bad input.  (Cross-checks against
# tiktoken and HF tokenizers are in tokenize-peers.bats.)

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

setup_file() {
	# A small real vocabulary: BPE trained on Genesis (King James Bible,
	# Debian's bible-kjv), Llama 3 conventions (256 specials after the ranks).
	export TOKDIR=$BATS_FILE_TMPDIR
	PATH=${TITAN_BIN:-$BATS_TEST_DIRNAME/../../bin}:$PATH
	if command -v bible >/dev/null; then
		bible -f gen1:1-gen50:26 > "$TOKDIR/genesis.txt"
	else
		yes 'In the beginning God created the heaven and the earth.' | head -n 4000 > "$TOKDIR/genesis.txt"
	fi
	titan-tokenize train --vocab-size 1280 --format text "$TOKDIR/genesis.txt" -o "$TOKDIR/gen.tiktoken"
}

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	TOK=$TOKDIR/gen.tiktoken
}

u32() { od -An -v -tu4 -w4 "$@" | tr -d ' '; }

# ---------------------------------------------------------------- contract

@test "no arguments: --tokenizer is required (2)" {
	run -2 --separate-stderr titan-tokenize
	[[ $stderr == *"titan-tokenize: error: --tokenizer FILE is required"* ]]
	[[ $stderr == *"Try 'titan-tokenize --help'"* ]]
}

@test "--help and --version" {
	run -0 --separate-stderr titan-tokenize --help
	assert_line --partial "Usage: titan-tokenize -t TOKENIZER"
	[ -z "$stderr" ]
	run -0 titan-tokenize --version
	assert_line --regexp '^titan-tokenize \(titan\) '
}

@test "a bad option or value is a usage error" {
	run -2 --separate-stderr titan-tokenize --frob
	[[ $stderr == *"unrecognized option"* ]]
	run -2 --separate-stderr titan-tokenize -t "$TOK" --format xml
	[[ $stderr == *"--format: 'xml' is not one of jsonl, text, lines"* ]]
	run -2 --separate-stderr titan-tokenize -t "$TOK" --encoding gpt5
	[[ $stderr == *"--encoding: 'gpt5'"* ]]
}

@test "a missing input file fails before anything is written" {
	run -1 --separate-stderr titan-tokenize -t "$TOK" --format text "$TOKDIR/genesis.txt" "$BATS_TEST_TMPDIR/nope.txt"
	[[ $stderr == *"cannot open '$BATS_TEST_TMPDIR/nope.txt': No such file or directory"* ]]
	[ -z "$output" ]
}

@test "a missing or bad tokenizer file is an error naming it" {
	run -1 --separate-stderr titan-tokenize -t "$BATS_TEST_TMPDIR/none.model" --format text "$TOKDIR/genesis.txt"
	refute_crash
	[[ $stderr == *"none.model"* ]]
	printf 'SGVsbG8= 0\nnot base64 at all!! 1\n' > "$BATS_TEST_TMPDIR/bad.tiktoken"
	run --separate-stderr titan-tokenize -t "$BATS_TEST_TMPDIR/bad.tiktoken" --format text "$TOKDIR/genesis.txt"
	refute_crash
	[ "$status" -ne 0 ]
	[[ $stderr == *"bad.tiktoken:2"* ]]
}

# -------------------------------------------------------------- round trips

@test "text: encode then decode reproduces the file byte for byte" {
	titan-tokenize -t "$TOK" --format text "$TOKDIR/genesis.txt" > "$BATS_TEST_TMPDIR/g.tok"
	titan-tokenize -t "$TOK" -d --format text "$BATS_TEST_TMPDIR/g.tok" > "$BATS_TEST_TMPDIR/g.txt"
	cmp "$TOKDIR/genesis.txt" "$BATS_TEST_TMPDIR/g.txt"
	# BOS first, EOS last, and far fewer tokens than bytes
	n=$(stat -c %s "$BATS_TEST_TMPDIR/g.tok")
	[ $((n / 4)) -lt $(( $(stat -c %s "$TOKDIR/genesis.txt") / 2 )) ]
	run u32 -N4 "$BATS_TEST_TMPDIR/g.tok"
	assert_output "1024"
	run u32 -j $((n - 4)) "$BATS_TEST_TMPDIR/g.tok"
	assert_output "1025"
}

@test "lines: one document per line, empty lines kept, exact round trip" {
	printf 'first line\n\nthird   line with  spaces\r\nlast without newline' > "$BATS_TEST_TMPDIR/l.txt"
	titan-tokenize -t "$TOK" --doc-per-line "$BATS_TEST_TMPDIR/l.txt" > "$BATS_TEST_TMPDIR/l.tok"
	run -0 bash -c "od -An -v -tu4 -w4 '$BATS_TEST_TMPDIR/l.tok' | grep -c '^ *1025$'"
	assert_output "4"
	titan-tokenize -t "$TOK" -d --doc-per-line "$BATS_TEST_TMPDIR/l.tok" > "$BATS_TEST_TMPDIR/l.out"
	printf 'first line\n\nthird   line with  spaces\nlast without newline\n' > "$BATS_TEST_TMPDIR/l.want"
	diff -u "$BATS_TEST_TMPDIR/l.want" "$BATS_TEST_TMPDIR/l.out"
}

@test "jsonl: documents from a field, exact round trip through JSON" {
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/c.jsonl" <<'PY'
import json, sys
docs = ["In the beginning", "", "quote \" backslash \\ tab \t newline \n end",
        "unicode: héllo 世界 👩‍👩‍👧 \u0000 nul", "x" * 5000]
with open(sys.argv[1], "w") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"id": i, "body": d}) + "\n")
    f.write("\n")  # blank lines are skipped
PY
	titan-tokenize -t "$TOK" --field body "$BATS_TEST_TMPDIR/c.jsonl" > "$BATS_TEST_TMPDIR/c.tok"
	titan-tokenize -t "$TOK" -d --field body "$BATS_TEST_TMPDIR/c.tok" > "$BATS_TEST_TMPDIR/c.out"
	/usr/bin/python3 - "$BATS_TEST_TMPDIR/c.jsonl" "$BATS_TEST_TMPDIR/c.out" <<'PY'
import json, sys
a = [json.loads(l)["body"] for l in open(sys.argv[1]) if l.strip()]
b = [json.loads(l)["body"] for l in open(sys.argv[2])]
assert a == b, (a, b)
PY
}

@test "stdin and '-' read the same as a file" {
	titan-tokenize -t "$TOK" --format text "$TOKDIR/genesis.txt" > "$BATS_TEST_TMPDIR/a.tok"
	titan-tokenize -t "$TOK" --format text < "$TOKDIR/genesis.txt" > "$BATS_TEST_TMPDIR/b.tok"
	titan-tokenize -t "$TOK" --format text - < "$TOKDIR/genesis.txt" > "$BATS_TEST_TMPDIR/c.tok"
	cmp "$BATS_TEST_TMPDIR/a.tok" "$BATS_TEST_TMPDIR/b.tok"
	cmp "$BATS_TEST_TMPDIR/a.tok" "$BATS_TEST_TMPDIR/c.tok"
}

@test "threads and document segmentation never change the ids" {
	cat "$TOKDIR/genesis.txt" "$TOKDIR/genesis.txt" > "$BATS_TEST_TMPDIR/big.txt"
	titan-tokenize -t "$TOK" --format text --threads 1 --segment-bytes 1G "$BATS_TEST_TMPDIR/big.txt" > "$BATS_TEST_TMPDIR/ref.tok"
	for t in 1 2 4; do
		for s in 64 1000 65536; do
			titan-tokenize -t "$TOK" --format text --threads $t --segment-bytes $s "$BATS_TEST_TMPDIR/big.txt" > "$BATS_TEST_TMPDIR/t.tok"
			cmp "$BATS_TEST_TMPDIR/ref.tok" "$BATS_TEST_TMPDIR/t.tok" || fail "threads $t segment $s differ"
		done
	done
	# many small documents keep their input order across threads
	titan-tokenize -t "$TOK" --doc-per-line --threads 1 "$TOKDIR/genesis.txt" > "$BATS_TEST_TMPDIR/l1.tok"
	titan-tokenize -t "$TOK" --doc-per-line --threads 2 "$TOKDIR/genesis.txt" > "$BATS_TEST_TMPDIR/l2.tok"
	cmp "$BATS_TEST_TMPDIR/l1.tok" "$BATS_TEST_TMPDIR/l2.tok"
}

@test "invalid UTF-8 becomes U+FFFD (maximal subparts), nothing dropped" {
	printf 'ok \xff\xfe bad \xe2\x82 trunc \xed\xa0\x80 surrogate \xf0\x9f\x98\x80 fine' > "$BATS_TEST_TMPDIR/bad.txt"
	titan-tokenize -t "$TOK" --format text "$BATS_TEST_TMPDIR/bad.txt" | titan-tokenize -t "$TOK" -d --format text > "$BATS_TEST_TMPDIR/out.txt"
	/usr/bin/python3 -c '
import sys
raw = open(sys.argv[1], "rb").read()
want = raw.decode("utf-8", errors="replace").encode("utf-8")
got = open(sys.argv[2], "rb").read()
assert got == want, (got, want)' "$BATS_TEST_TMPDIR/bad.txt" "$BATS_TEST_TMPDIR/out.txt"
}

@test "special-token text is ordinary unless --allow-special" {
	printf 'a<|end_of_text|>b' > "$BATS_TEST_TMPDIR/s.txt"
	run -0 bash -c "titan-tokenize -t '$TOK' --format text --no-bos --no-eos '$BATS_TEST_TMPDIR/s.txt' | od -An -v -tu4 -w4 | tr -d ' '"
	refute_line "1025"
	run -0 bash -c "titan-tokenize -t '$TOK' --format text --no-bos --no-eos --allow-special '$BATS_TEST_TMPDIR/s.txt' | od -An -v -tu4 -w4 | tr -d ' '"
	assert_line "1025"
	[ "${#lines[@]}" -le 3 ]
	# decode drops BOS/EOS unless --keep-special
	run -0 bash -c "titan-tokenize -t '$TOK' --format text '$BATS_TEST_TMPDIR/s.txt' | titan-tokenize -t '$TOK' -d --format text --keep-special"
	assert_output "<|begin_of_text|>a<|end_of_text|>b<|end_of_text|>"
}

@test "--no-bos and --no-eos" {
	printf 'In the beginning' > "$BATS_TEST_TMPDIR/x.txt"
	run -0 bash -c "titan-tokenize -t '$TOK' --format text --no-bos --no-eos '$BATS_TEST_TMPDIR/x.txt' | od -An -v -tu4 -w4 | tr -d ' '"
	refute_line "1024"
	refute_line "1025"
	n=${#lines[@]}
	run -0 bash -c "titan-tokenize -t '$TOK' --format text '$BATS_TEST_TMPDIR/x.txt' | od -An -v -tu4 -w4 | tr -d ' '"
	[ "${#lines[@]}" -eq $((n + 2)) ]
}

# -------------------------------------------------------------- bad input

# a malformed input file is a runtime failure (exit 1), not usage (2):
# docs/conventions.md, tests/bats/exit-codes.bats
@test "decode: a stream that is not whole uint32s is an error" {
	printf 'abcdef' > "$BATS_TEST_TMPDIR/odd.tok"
	run -1 --separate-stderr titan-tokenize -t "$TOK" -d "$BATS_TEST_TMPDIR/odd.tok"
	[[ $stderr == *"odd.tok: 6 bytes is not a whole number of uint32 token ids"* ]]
}

@test "decode: an id outside the vocabulary is an error naming its position" {
	/usr/bin/python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<3I", 5, 6, 999999))' > "$BATS_TEST_TMPDIR/big.tok"
	run -1 --separate-stderr titan-tokenize -t "$TOK" -d "$BATS_TEST_TMPDIR/big.tok"
	[[ $stderr == *"big.tok: token 2 (byte offset 8) is id 999999"* ]]
}

@test "jsonl: bad JSON and a missing field are errors with file:line" {
	printf '{"text": "ok"}\n{"text": broken}\n' > "$BATS_TEST_TMPDIR/b.jsonl"
	run -1 --separate-stderr titan-tokenize -t "$TOK" "$BATS_TEST_TMPDIR/b.jsonl"
	[[ $stderr == *"b.jsonl:2:"*"invalid JSON"* ]]
	printf '{"text": "ok"}\n{"body": "x"}\n' > "$BATS_TEST_TMPDIR/f.jsonl"
	run -1 --separate-stderr titan-tokenize -t "$TOK" "$BATS_TEST_TMPDIR/f.jsonl"
	[[ $stderr == *"f.jsonl:2: field 'text' is missing"* ]]
}

@test "-o writes atomically and leaves nothing on failure" {
	run -0 titan-tokenize -t "$TOK" --format text "$TOKDIR/genesis.txt" -o "$BATS_TEST_TMPDIR/o.tok"
	assert_file_exists "$BATS_TEST_TMPDIR/o.tok"
	printf '{"text": "ok"}\nnot json\n' > "$BATS_TEST_TMPDIR/b.jsonl"
	run -1 titan-tokenize -t "$TOK" "$BATS_TEST_TMPDIR/b.jsonl" -o "$BATS_TEST_TMPDIR/p.tok"
	assert_file_not_exists "$BATS_TEST_TMPDIR/p.tok"
	run ls "$BATS_TEST_TMPDIR"
	refute_output --partial "p.tok.tmp"
}

@test "a full disk on stdout is an error" {
	[ -w /dev/full ] || skip "/dev/full not available"
	run -1 --separate-stderr bash -c "titan-tokenize -t '$TOK' --format text '$TOKDIR/genesis.txt' > /dev/full"
	[[ $stderr == *"No space left on device"* ]]
}

# ---------------------------------------------------------------- training

@test "train: deterministic, loadable, contiguous ranks, specials after them" {
	titan-tokenize train --vocab-size 1280 --format text "$TOKDIR/genesis.txt" > "$BATS_TEST_TMPDIR/again.tiktoken"
	cmp "$TOK" "$BATS_TEST_TMPDIR/again.tiktoken"
	run -0 wc -l < "$TOK"
	assert_output "1024"
	run -0 awk '$2 != NR - 1 { print "rank " $2 " on line " NR; exit 1 }' "$TOK"
}

@test "train: usage errors" {
	run -2 --separate-stderr titan-tokenize train "$TOKDIR/genesis.txt"
	[[ $stderr == *"--vocab-size is required"* ]]
	run -2 --separate-stderr titan-tokenize train --vocab-size 300 "$TOKDIR/genesis.txt"
	[[ $stderr == *"leaves no room"* ]]
}

# -------------------------------------------- compressed input, --progress

# c.jsonl: Genesis three times over as JSONL documents (~2.5 MB, several
# encoding jobs), and its gzip and zstd forms
make_jsonl() {
	/usr/bin/python3 - "$TOKDIR/genesis.txt" "$BATS_TEST_TMPDIR/c.jsonl" <<'PY'
import json, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
with open(sys.argv[2], "w") as f:
    for rep in range(3):
        for i in range(0, len(lines), 4):
            f.write(json.dumps({"text": "\n".join(lines[i:i + 4]) * (rep + 1)}) + "\n")
PY
	gzip -c "$BATS_TEST_TMPDIR/c.jsonl" > "$BATS_TEST_TMPDIR/c.jsonl.gz"
	zstd -q -c "$BATS_TEST_TMPDIR/c.jsonl" > "$BATS_TEST_TMPDIR/c.jsonl.zst"
}

need_compression() {
	command -v zstd >/dev/null || skip "the zstd tool is not installed (make deps)"
	titan-tokenize --version | grep -q -- '+zlib +zstd' || skip "built without zlib or libzstd"
}

@test "gzip and zstd inputs give the ids of the plain file: files, stdin, pipes, any name" {
	need_compression
	make_jsonl
	d=$BATS_TEST_TMPDIR
	titan-tokenize -t "$TOK" "$d/c.jsonl" > "$d/want.tok"
	[ "$(stat -c %s "$d/want.tok")" -gt 400000 ]
	for f in c.jsonl.gz c.jsonl.zst; do
		titan-tokenize -t "$TOK" "$d/$f" > "$d/got.tok"
		cmp "$d/want.tok" "$d/got.tok"
		titan-tokenize -t "$TOK" - < "$d/$f" > "$d/got.tok"
		cmp "$d/want.tok" "$d/got.tok"
		cat "$d/$f" | titan-tokenize -t "$TOK" > "$d/got.tok"
		cmp "$d/want.tok" "$d/got.tok"
	done
	# told by the first bytes, not the name
	cp "$d/c.jsonl.zst" "$d/corpus.data"
	titan-tokenize -t "$TOK" "$d/corpus.data" | cmp "$d/want.tok" -
	# --format text and train read them too
	gzip -c "$TOKDIR/genesis.txt" > "$d/g.txt.gz"
	titan-tokenize -t "$TOK" --format text "$TOKDIR/genesis.txt" > "$d/a.tok"
	titan-tokenize -t "$TOK" --format text "$d/g.txt.gz" | cmp "$d/a.tok" -
	titan-tokenize train --vocab-size 1280 --format text "$d/g.txt.gz" -o "$d/g.tiktoken"
	cmp "$TOK" "$d/g.tiktoken"
}

@test "concatenated gzip members and zstd frames read as zcat and zstdcat read them" {
	need_compression
	make_jsonl
	d=$BATS_TEST_TMPDIR
	titan-tokenize -t "$TOK" "$d/c.jsonl" > "$d/want.tok"
	head -n 100 "$d/c.jsonl" | gzip -1 > "$d/m.gz"
	tail -n +101 "$d/c.jsonl" | gzip -9 >> "$d/m.gz"
	zcat "$d/m.gz" | cmp "$d/c.jsonl" -
	titan-tokenize -t "$TOK" "$d/m.gz" | cmp "$d/want.tok" -
	head -n 100 "$d/c.jsonl" | zstd -q -1 > "$d/m.zst"
	tail -n +101 "$d/c.jsonl" | zstd -q -19 >> "$d/m.zst"
	zstdcat "$d/m.zst" | cmp "$d/c.jsonl" -
	titan-tokenize -t "$TOK" - < "$d/m.zst" | cmp "$d/want.tok" -
}

@test "truncated and corrupt compressed input: an error naming the file and byte offset, no output" {
	need_compression
	make_jsonl
	d=$BATS_TEST_TMPDIR
	for z in gz zst; do
		n=$(stat -c %s "$d/c.jsonl.$z")
		name=$([ $z = gz ] && echo gzip || echo zstd)
		unit=$([ $z = gz ] && echo member || echo frame)
		head -c $((n / 2)) "$d/c.jsonl.$z" > "$d/t.$z"
		run -1 --separate-stderr titan-tokenize -t "$TOK" "$d/t.$z" -o "$d/out.tok"
		[[ $stderr == *"t.$z: truncated $name data: the input ends at byte offset $((n / 2)) inside the $unit that starts at byte 0"* ]]
		assert_file_not_exists "$d/out.tok"
		run -1 --separate-stderr bash -c "titan-tokenize -t '$TOK' < '$d/t.$z' > /dev/null"
		[[ $stderr == *"(stdin): truncated $name data"* ]]
		cp "$d/c.jsonl.$z" "$d/bad.$z"
		printf '\xde\xad\xbe\xef\xde\xad\xbe\xef' | dd of="$d/bad.$z" bs=1 seek=$((n / 3)) conv=notrunc status=none
		run -1 --separate-stderr titan-tokenize -t "$TOK" "$d/bad.$z" -o "$d/out.tok"
		[[ $stderr == *"bad.$z: corrupt $name data "*"byte offset"* ]]
		assert_file_not_exists "$d/out.tok"
	done
	run ls "$d"
	refute_output --partial "out.tok.tmp"
	# gzip names the offset zlib stopped at (within a few bytes of the damage),
	# zstd a range of at most 16 KiB where zstd detected it
	gz=$(stat -c %s "$d/c.jsonl.gz")
	run -1 --separate-stderr titan-tokenize -t "$TOK" "$d/bad.gz"
	off=$(sed -n 's/.*corrupt gzip data at byte offset \([0-9]*\).*/\1/p' <<< "$stderr")
	[ -n "$off" ] && [ "$off" -ge $((gz / 3)) ] && [ "$off" -le "$gz" ]
	# data after the last member that is not gzip
	{ cat "$d/c.jsonl.gz"; echo trailing; } > "$d/trail.gz"
	run -1 --separate-stderr titan-tokenize -t "$TOK" "$d/trail.gz"
	[[ $stderr == *"trail.gz: corrupt gzip data at byte offset $gz: the bytes after the gzip member"* ]]
}

@test "--progress on a non-terminal: lines with %, docs and tokens, the last at 100%" {
	need_compression
	make_jsonl
	d=$BATS_TEST_TMPDIR
	size=$(stat -c %s "$d/c.jsonl.gz")
	TITAN_PROGRESS_INTERVAL_MS=0 titan-tokenize -t "$TOK" --progress --threads 2 \
		"$d/c.jsonl.gz" > "$d/o.tok" 2> "$d/err"
	titan-tokenize -t "$TOK" "$d/c.jsonl" | cmp "$d/o.tok" -
	run -0 wc -l < "$d/err"
	[ "$output" -ge 2 ]
	# every line: file bytes / total (%), text bytes, docs, tokens, rate
	run -1 grep -Ev '^titan-tokenize: [0-9.]+ [KM]iB / [0-9.]+ [KM]iB \([0-9]{1,3}%\), [0-9.]+ MiB text, [0-9,]+ docs, [0-9,]+ tokens, [0-9.]+ MB/s' "$d/err"
	assert_output ''
	run -0 tail -n 1 "$d/err"
	ntok=$(/usr/bin/python3 -c "print(f'{$(stat -c %s "$d/o.tok") // 4:,}')")
	assert_output --regexp "\(100%\), .*, $ntok tokens, .* elapsed$"
	refute_output --partial $'\r'
	# a pipe: no total, no percentage
	cat "$d/c.jsonl" | titan-tokenize -t "$TOK" --progress > /dev/null 2> "$d/err"
	run -0 tail -n 1 "$d/err"
	assert_output --regexp '^titan-tokenize: [0-9.]+ MiB, [0-9,]+ docs, [0-9,]+ tokens, [0-9.]+ MB/s, [0-9:]+ elapsed$'
	# without --progress, stderr is not a terminal: nothing
	run -0 --separate-stderr titan-tokenize -t "$TOK" "$d/c.jsonl.gz"
	[ -z "$stderr" ]
}

@test "progress on a terminal: one line rewritten with \\r, ending at 100%" {
	command -v script >/dev/null || skip "script (util-linux) is not installed"
	need_compression
	make_jsonl
	d=$BATS_TEST_TMPDIR
	TITAN_PROGRESS_INTERVAL_MS=0 script -q -e -c "titan-tokenize -t '$TOK' '$d/c.jsonl.zst' > '$d/o.tok'" /dev/null > "$d/tty"
	titan-tokenize -t "$TOK" "$d/c.jsonl" | cmp "$d/o.tok" -
	run -0 grep -c $'\rtitan-tokenize: ' "$d/tty"
	run -0 tr '\r' '\n' < "$d/tty"
	assert_line --regexp '^titan-tokenize: .* \(100%\), .* elapsed *$'
	# one line on the terminal: the updates are joined by '\r', not newlines
	run -0 wc -l < "$d/tty"
	assert_output 1
}

@test "decode: gzip and zstd token streams decode as the plain stream; an odd length counts uncompressed" {
	need_compression
	d=$BATS_TEST_TMPDIR
	titan-tokenize -t "$TOK" --format text "$TOKDIR/genesis.txt" > "$d/g.tok"
	gzip -c "$d/g.tok" > "$d/g.tok.gz"
	zstd -q -c "$d/g.tok" > "$d/g.tok.zst"
	titan-tokenize -t "$TOK" -d --format text "$d/g.tok.gz" | cmp "$TOKDIR/genesis.txt" -
	titan-tokenize -t "$TOK" -d --format text - < "$d/g.tok.zst" | cmp "$TOKDIR/genesis.txt" -
	head -c 4001 "$d/g.tok" | gzip > "$d/odd.gz"
	run -1 --separate-stderr titan-tokenize -t "$TOK" -d "$d/odd.gz"
	[[ $stderr == *"odd.gz: 4001 bytes (uncompressed) is not a whole number of uint32 token ids"* ]]
}

@test "decode: a shard is decoded from its payload (u16, u32), from a file, a pipe or titan-shard cat" {
	d=$BATS_TEST_TMPDIR
	titan-tokenize -t "$TOK" --format lines "$TOKDIR/genesis.txt" > "$d/g.tok"
	titan-shard -q -t "$TOK" --val-docs 5 --shard-tokens 2K --out "$d/s" "$d/g.tok"
	[ -e "$d/s/train-00001.tok" ]
	# the header is not read as ids (it was: "token 0 ... is id 1096042836")
	titan-tokenize -t "$TOK" -d --format lines "$d/s/val-00000.tok" "$d/s"/train-*.tok |
		cmp "$TOKDIR/genesis.txt" -
	cat "$d/s/val-00000.tok" | titan-tokenize -t "$TOK" -d --format lines > "$d/val.txt"
	titan-shard cat --split val "$d/s" | titan-tokenize -t "$TOK" -d --format lines | cmp "$d/val.txt" -
	[ "$(wc -l < "$d/val.txt")" -eq 5 ]
	titan-shard cat "$d/s" | titan-tokenize -t "$TOK" -d --format lines | cmp "$TOKDIR/genesis.txt" -
	titan-shard cat "$d/s" | cmp "$d/g.tok" - # the stream titan-shard was given
	run -1 --separate-stderr titan-tokenize -t "$TOK" -d "$d/s"
	[[ $stderr == *"'$d/s' is a directory: for a folder of shards, titan-shard cat '$d/s' | titan-tokenize -d"* ]]
	# u32 ids (a vocabulary above 65536), gzip-compressed
	titan-shard -q --vocab-size 70000 --bos-id 1024 --eos-id 1025 --out "$d/w" "$d/g.tok"
	gzip -c "$d/w/train-00000.tok" > "$d/w.tok.gz"
	titan-tokenize -t "$TOK" -d --format lines "$d/w.tok.gz" | cmp "$TOKDIR/genesis.txt" -
}

@test "decode: a truncated or corrupt shard is an error naming it (1)" {
	d=$BATS_TEST_TMPDIR
	titan-tokenize -t "$TOK" --format lines "$TOKDIR/genesis.txt" > "$d/g.tok"
	titan-shard -q -t "$TOK" --out "$d/s" "$d/g.tok"
	head -c 5000 "$d/s/train-00000.tok" > "$d/t.tok"
	run -1 --separate-stderr titan-tokenize -t "$TOK" -d "$d/t.tok" -o "$d/out.jsonl"
	refute_crash
	[[ $stderr == *"titan-tokenize: error: '$d/t.tok': expected "*" bytes (header 4096 + "*" tokens of 2 bytes), found 5000: truncated?"* ]]
	assert_file_not_exists "$d/out.jsonl"
	run -1 --separate-stderr bash -c "cat '$d/t.tok' | titan-tokenize -t '$TOK' -d > /dev/null"
	[[ $stderr == *"the payload holds 904 bytes: truncated?"* ]]
	# two ids swapped: every id is valid, the payload CRC is not
	/usr/bin/python3 - "$d/s/train-00000.tok" "$d/c.tok" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
i = next(k for k in range(4096, len(b) - 4, 2) if b[k:k + 2] != b[k + 2:k + 4])
b[i:i + 2], b[i + 2:i + 4] = b[i + 2:i + 4], b[i:i + 2]
open(sys.argv[2], "wb").write(b)
PY
	run -1 --separate-stderr titan-tokenize -t "$TOK" -d "$d/c.tok" -o "$d/out.jsonl"
	[[ $stderr == *"'$d/c.tok': payload checksum mismatch"*"the shard is corrupt"* ]]
	assert_file_not_exists "$d/out.jsonl"
}

@test "decode writes JSONL unless --format says otherwise: --help, the man page, a note on a terminal" {
	run -0 titan-tokenize --help
	[[ $output == *'JSONL by'*'default, one {"text": ...} object per document'*'--format text for the plain text'* ]]
	run -0 grep -c 'writes JSONL by default' "$TITAN_SRCDIR/docs/titan-tokenize.1"
	d=$BATS_TEST_TMPDIR
	printf 'one\ntwo\n' > "$d/l.txt"
	titan-tokenize -t "$TOK" --format lines "$d/l.txt" > "$d/l.tok"
	run -0 --separate-stderr titan-tokenize -t "$TOK" -d "$d/l.tok"
	assert_output $'{"text":"one"}\n{"text":"two"}'
	[ -z "$stderr" ] # not a terminal: no note
	command -v script >/dev/null || skip "script (util-linux) is not installed"
	run -0 script -q -e -c "titan-tokenize -t '$TOK' -d '$d/l.tok'" /dev/null
	[[ $output == *'--decode writes JSONL (one {"text": ...} object per document); --format text writes the plain text'* ]]
	run -0 script -q -e -c "titan-tokenize -t '$TOK' -d --format lines '$d/l.tok'" /dev/null
	[[ $output != *"writes JSONL"* ]]
}
