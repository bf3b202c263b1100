#!/usr/bin/env bats
# titan-shard: the tool contract, round trips read back by an independent
# reader (python struct), shard sizes, the validation split, the document
# shuffle, refusing and replacing an output directory, bad input (odd
# length, ids >= vocab, empty, full disk), info/verify and corruption.

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	T=$BATS_TEST_TMPDIR
}

teardown() {
	if mountpoint -q "$BATS_TEST_TMPDIR/small" 2>/dev/null; then
		umount "$BATS_TEST_TMPDIR/small"
	fi
}

# gen FILE NDOCS SEED VOCAB: documents BOS(1) random ids EOS(2), uint32 LE
gen() {
	/usr/bin/python3 - "$@" <<'EOF'
import random, struct, sys
path, ndocs, seed, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(seed)
ids = []
for _ in range(ndocs):
    ids += [1] + [r.randrange(3, vocab) for _ in range(r.randint(0, 40))] + [2]
open(path, 'wb').write(struct.pack('<%dI' % len(ids), *ids))
EOF
}

# readback DIR SPLIT > stream: concatenate a split's payloads as uint32 LE,
# checking magic, sizes, indices and first_token_offset on the way
readback() {
	/usr/bin/python3 - "$@" <<'EOF'
import os, re, struct, sys
d, split = sys.argv[1], sys.argv[2]
names = sorted((int(m.group(1)), f) for f in os.listdir(d)
               if (m := re.fullmatch(re.escape(split) + r'-(\d+)\.tok', f)))
at = 0
for i, (idx, f) in enumerate(names):
    b = open(os.path.join(d, f), 'rb').read()
    assert idx == i and b[:8] == b'TITANTOK', f
    ver, tb, vocab, hb, n = struct.unpack_from('<IIIIQ', b, 8)
    index, = struct.unpack_from('<Q', b, 72)
    first, = struct.unpack_from('<Q', b, 96)
    assert (ver, hb, index, first) == (1, 4096, i, at), (f, ver, hb, index, first, at)
    assert b[80:96].rstrip(b'\0') == split.encode(), f
    assert len(b) == 4096 + n * tb, f
    ids = struct.unpack_from('<%d%s' % (n, 'H' if tb == 2 else 'I'), b, 4096)
    sys.stdout.buffer.write(struct.pack('<%dI' % n, *ids))
    at += n
EOF
}

# docs FILE: one line per document (ids up to and including EOS 2)
docs() {
	/usr/bin/python3 -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
ids, cur = struct.unpack("<%dI" % (len(b) // 4), b), []
for i in ids:
    cur.append(str(i))
    if i == 2:
        print(" ".join(cur)); cur = []
if cur: print(" ".join(cur))' "$1"
}

ntokens() { echo $(( $(stat -c %s "$1") / 4 )); }

shard() { titan-shard --vocab-size 1000 --eos-id 2 --bos-id 1 "$@"; }

# ---------------------------------------------------------------- contract

@test "no arguments is a usage error (2)" {
	run -2 --separate-stderr titan-shard
	refute_crash
	[[ $stderr == *"titan-shard: error: --out DIR is required"* ]]
	[[ $stderr == *"Try 'titan-shard --help'"* ]]
	[ -z "$output" ]
}

@test "--help prints usage on stdout and exits 0" {
	run -0 --separate-stderr titan-shard --help
	assert_line --partial "Usage: titan-shard [write] --out DIR"
	assert_line --partial "titan-shard info"
	assert_output --partial "See also"
	[ -z "$stderr" ]
	run -0 --separate-stderr titan-shard info --help
	assert_line --partial "Usage: titan-shard"
}

@test "--version prints version, revision and features" {
	run -0 titan-shard --version
	assert_line --regexp '^titan-shard \(titan\) [0-9]+\.[0-9]+\.[0-9]+'
	assert_line --regexp '^features: '
}

@test "a bad option is a usage error (2) with a pointer to --help" {
	run -2 --separate-stderr titan-shard --frobnicate
	refute_crash
	[[ $stderr == *"unrecognized option"* ]]
	[[ $stderr == *"Try 'titan-shard --help'"* ]]
	[ -z "$output" ]
}

@test "a missing input file is an error naming it (1), nothing written" {
	run -1 --separate-stderr shard --out "$T/d" "$T/nope.bin"
	refute_crash
	[[ $stderr == "titan-shard: error: cannot open '$T/nope.bin': No such file or directory" ]]
	assert_not_exist "$T/d"
}

@test "a stream that is not whole uint32 ids is an error (1), no shard left" {
	printf '0123456789' > "$T/odd.bin"
	run -1 --separate-stderr shard --out "$T/d" "$T/odd.bin"
	refute_crash
	[[ $stderr == *"$T/odd.bin: 10 bytes is not a whole number of uint32 token ids (truncated stream?)"* ]]
	[ -z "$(ls -A "$T/d")" ]
	# the same through a pipe, found at the end after whole shards were cut
	gen "$T/odd2.bin" 50 1 1000
	printf 'xy' >> "$T/odd2.bin"
	run -1 --separate-stderr bash -c 'cat "$1" | titan-shard --vocab-size 1000 --eos-id 2 \
		--out "$2" --shard-tokens 10' _ "$T/odd2.bin" "$T/e"
	[[ $stderr == *"standard input: "*" bytes is not a whole number"* ]]
	[ -z "$(ls -A "$T/e")" ]
}

@test "vocabulary options: one source required, combinations checked (2)" {
	gen "$T/in.bin" 5 1 1000
	run -2 --separate-stderr titan-shard --out "$T/d" "$T/in.bin"
	[[ $stderr == *"give --tokenizer FILE, or --vocab-size N with --eos-id E"* ]]
	run -2 --separate-stderr titan-shard --out "$T/d" --vocab-size 1000 "$T/in.bin"
	[[ $stderr == *"--vocab-size needs --eos-id"* ]]
	run -2 --separate-stderr titan-shard --out "$T/d" --vocab-size 1000 --eos-id 1000 "$T/in.bin"
	[[ $stderr == *"--eos-id: expected an id from -1 (none) to 999"* ]]
	run -2 --separate-stderr titan-shard --out "$T/d" --tokenizer x --vocab-size 5 "$T/in.bin"
	[[ $stderr == *"exclusive"* ]]
	run -2 --separate-stderr shard --out "$T/d" --val-docs 1 --val-tokens 5 "$T/in.bin"
	run -2 --separate-stderr shard --out "$T/d" --seed 3 "$T/in.bin"
	[[ $stderr == *"--seed has no effect without --shuffle-docs"* ]]
	run -2 --separate-stderr titan-shard --out "$T/d" --vocab-size 9 --eos-id -1 --val-docs 1 "$T/in.bin"
	[[ $stderr == *"need document boundaries"* ]]
	run -2 --separate-stderr shard --out "$T/d" --shard-tokens 0 "$T/in.bin"
	run -2 --separate-stderr shard --out "$T/d" --shard-tokens 5X "$T/in.bin"
	[[ $stderr == *"--shard-tokens: expected a positive count (e.g. 100M), got '5X'"* ]]
	run -2 --separate-stderr titan-shard info --out "$T/d" "$T/d"
	run -2 --separate-stderr titan-shard verify
	assert_not_exist "$T/d"
}

@test "a tokenizer that cannot be loaded is an error naming it (1)" {
	gen "$T/in.bin" 5 1 1000
	run -1 --separate-stderr titan-shard --out "$T/d" --tokenizer "$T/nope.model" "$T/in.bin"
	refute_crash
	[[ $stderr == "titan-shard: error: "*"$T/nope.model"* ]]
}

# -------------------------------------------------------------- round trips

@test "round trip u16: shards of exactly N tokens, the rest last, ids unchanged" {
	gen "$T/in.bin" 300 7 1000
	n=$(ntokens "$T/in.bin")
	run -0 --separate-stderr shard --out "$T/d" --shard-tokens 1K "$T/in.bin"
	readback "$T/d" train > "$T/back.bin"
	cmp "$T/in.bin" "$T/back.bin"
	k=$(( (n + 999) / 1000 ))
	[ "$(ls "$T/d" | wc -l)" -eq "$k" ]
	for ((i = 0; i < k - 1; i++)); do
		[ "$(stat -c %s "$T/d/train-0000$i.tok")" -eq $((4096 + 2000)) ]
	done
	last=$(printf '%s/train-%05d.tok' "$T/d" $((k - 1)))
	[ "$(stat -c %s "$last")" -eq $((4096 + 2 * (n - (k - 1) * 1000))) ]
	[ -z "$(ls -A "$T/d" | grep '^\.')" ]
}

@test "round trip u32 from a pipe and several files in order" {
	gen "$T/a.bin" 40 1 100000
	gen "$T/b.bin" 40 2 100000
	cat "$T/a.bin" "$T/b.bin" > "$T/ab.bin"
	cat "$T/b.bin" | titan-shard --vocab-size 100000 --eos-id 2 --out "$T/p" --shard-tokens 300 "$T/a.bin" -
	readback "$T/p" train > "$T/back.bin"
	cmp "$T/ab.bin" "$T/back.bin"
	run -0 titan-shard info "$T/p/train-00000.tok"
	assert_line --regexp $'train-00000.tok\ttrain\t0\t1\tu32\t100000\t-1\t2\t'
}

@test "a vocabulary of 65536 is u16, 65537 is u32" {
	gen "$T/in.bin" 10 1 1000
	titan-shard --out "$T/a" --vocab-size 65536 --eos-id 2 "$T/in.bin"
	titan-shard --out "$T/b" --vocab-size 65537 --eos-id 2 "$T/in.bin"
	n=$(ntokens "$T/in.bin")
	[ "$(stat -c %s "$T/a/train-00000.tok")" -eq $((4096 + 2 * n)) ]
	[ "$(stat -c %s "$T/b/train-00000.tok")" -eq $((4096 + 4 * n)) ]
}

@test "--val-docs: the first N documents, then train" {
	gen "$T/in.bin" 100 3 1000
	shard --out "$T/d" --val-docs 7 --shard-tokens 200 "$T/in.bin"
	readback "$T/d" val > "$T/val.bin"
	readback "$T/d" train > "$T/train.bin"
	cat "$T/val.bin" "$T/train.bin" | cmp - "$T/in.bin"
	diff <(docs "$T/in.bin" | head -7) <(docs "$T/val.bin")
	run -0 titan-shard info --json "$T/d"
	echo "$output" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["totals"]["val"]["docs"] == 7 and j["totals"]["train"]["docs"] == 93, j["totals"]
assert j["totals"]["all"]["docs"] == 100 and j["bad"] == 0'
}

@test "--val-tokens: the first documents totalling at least N tokens" {
	gen "$T/in.bin" 100 4 1000
	shard --out "$T/d" --val-tokens 250 "$T/in.bin"
	readback "$T/d" val > "$T/val.bin"
	readback "$T/d" train > "$T/train.bin"
	cat "$T/val.bin" "$T/train.bin" | cmp - "$T/in.bin"
	docs "$T/in.bin" | awk '{ t += NF; print; if (t >= 250) exit }' > "$T/want"
	diff "$T/want" <(docs "$T/val.bin")
	[ "$(ntokens "$T/val.bin")" -ge 250 ]
}

@test "a validation split spanning many reads of a pipe" {
	gen "$T/in.bin" 3000 5 1000 # ~ 65k tokens, read in pipe-sized pieces
	cat "$T/in.bin" | shard --out "$T/d" --val-tokens 40K --shard-tokens 7K
	readback "$T/d" val > "$T/val.bin"
	readback "$T/d" train > "$T/train.bin"
	cat "$T/val.bin" "$T/train.bin" | cmp - "$T/in.bin"
	docs "$T/in.bin" | awk '{ t += NF; print; if (t >= 40000) exit }' > "$T/want"
	diff "$T/want" <(docs "$T/val.bin")
}

@test "a validation split that takes everything is an error (1)" {
	gen "$T/in.bin" 5 4 1000
	run -1 --separate-stderr shard --out "$T/d" --val-docs 5 "$T/in.bin"
	[[ $stderr == *"the validation split took the whole input (5 documents"*"nothing is left for training"* ]]
	[ -z "$(ls -A "$T/d")" ]
}

@test "--shuffle-docs: deterministic per seed, documents preserved" {
	gen "$T/in.bin" 200 5 1000
	shard --out "$T/a" --shuffle-docs --seed 1 --val-docs 10 --shard-tokens 500 "$T/in.bin"
	shard --out "$T/b" --shuffle-docs --seed 1 --val-docs 10 --shard-tokens 500 "$T/in.bin"
	shard --out "$T/c" --shuffle-docs --seed 2 --val-docs 10 --shard-tokens 500 "$T/in.bin"
	diff -r "$T/a" "$T/b"
	! diff -rq "$T/a" "$T/c" >/dev/null
	for x in a c; do
		readback "$T/$x" val > "$T/$x.val"
		readback "$T/$x" train > "$T/$x.train"
		[ "$(docs "$T/$x.val" | wc -l)" -eq 10 ]
		diff <(docs "$T/in.bin" | sort) <(cat "$T/$x.val" "$T/$x.train" > "$T/$x.all"; docs "$T/$x.all" | sort)
		! cmp -s "$T/in.bin" "$T/$x.all"
	done
	[ -z "$(ls -A "$T/a" | grep '^\.')" ] # the spool is gone
}

# ------------------------------------------------------ output directory

@test "an output directory with shards is refused (1) unless --force" {
	gen "$T/in.bin" 100 6 1000
	shard --out "$T/d" --shard-tokens 300 --val-docs 3 "$T/in.bin"
	before=$(cd "$T/d" && md5sum *)
	run -1 --separate-stderr shard --out "$T/d" "$T/in.bin"
	refute_crash
	[[ $stderr == *"output directory '$T/d' already holds shards"*"--force"* ]]
	[ "$(cd "$T/d" && md5sum *)" = "$before" ]

	# --force with bigger shards and no val: stale shards and temporaries go
	touch "$T/d/.train-00009.tok.tmp-abcdef" "$T/d/notes.txt"
	run -0 --separate-stderr shard --out "$T/d" --force --shard-tokens 1M "$T/in.bin"
	[ "$(ls -A "$T/d")" = "$(printf 'notes.txt\ntrain-00000.tok')" ]
	readback "$T/d" train | cmp - "$T/in.bin"
}

@test "the output directory is created with its parents" {
	gen "$T/in.bin" 3 6 1000
	shard --out "$T/x/y/z" "$T/in.bin"
	assert_file_exists "$T/x/y/z/train-00000.tok"
}

# ----------------------------------------------------------- bad input

@test "an id >= vocab size is an error naming id, position and file (1)" {
	/usr/bin/python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<6I", 1, 5, 999, 1000, 7, 2))' > "$T/bad.bin"
	gen "$T/ok.bin" 50 1 1000
	run -1 --separate-stderr shard --out "$T/d" --shard-tokens 10 "$T/ok.bin" "$T/bad.bin"
	refute_crash
	[[ $stderr == "titan-shard: error: $T/bad.bin: token id 1000 at position 3 is >= the vocab size 1000"* ]]
	[ -z "$(ls -A "$T/d")" ]
}

@test "empty input is an error (1)" {
	: > "$T/empty.bin"
	run -1 --separate-stderr shard --out "$T/d" "$T/empty.bin"
	[[ $stderr == *"no input tokens (empty input)"* ]]
}

@test "a stream whose last document has no EOS is kept, with a warning" {
	gen "$T/in.bin" 5 1 1000
	printf '\x05\x00\x00\x00' >> "$T/in.bin"
	run -0 --separate-stderr shard --out "$T/d" "$T/in.bin"
	[[ $stderr == *"WARN"*"does not end with EOS"* ]]
	readback "$T/d" train | cmp - "$T/in.bin"
}

@test "a full disk is a clear error, no shard under a final name" {
	[ "$(id -u)" = 0 ] || skip "needs root to mount a small tmpfs"
	mkdir "$T/small"
	mount -t tmpfs -o size=64k tmpfs "$T/small" 2>/dev/null || skip "cannot mount tmpfs here"
	gen "$T/in.bin" 2000 1 1000 # ~ 45k tokens = 90 KB of u16
	run -1 --separate-stderr shard --out "$T/small/d" --shard-tokens 10K "$T/in.bin"
	refute_crash
	[[ $stderr == *"cannot write shard '$T/small/d/train-0000"*".tok' (temporary"*"No space left on device"* ]]
	[ -z "$(ls -A "$T/small/d")" ]
}

# ---------------------------------------------------------- info, verify

@test "info prints header fields per shard and totals" {
	gen "$T/in.bin" 100 8 1000
	n=$(ntokens "$T/in.bin")
	shard --out "$T/d" --shard-tokens 1000 --val-docs 10 "$T/in.bin"
	run -0 --separate-stderr titan-shard info "$T/d"
	assert_line --index 0 --regexp '^#path	split	index	version	dtype	vocab_size	bos_id	eos_id'
	assert_line --regexp $'^'"$T/d"$'/train-00000.tok\ttrain\t0\t1\tu16\t1000\t1\t2\t0x0000000000000000\t1000\t[0-9]+\t0\t0x[0-9a-f]{8}\t6096$'
	assert_line --regexp $'/train-00001.tok\ttrain\t1\t.*\t1000\t[0-9]+\t1000\t0x'
	assert_line --regexp "^# total val: 1 shards, [0-9]+ tokens, 10 docs, [0-9]+ bytes$"
	assert_line --regexp "^# total: [0-9]+ shards, $n tokens, 100 docs, [0-9]+ bytes$"
	run -0 titan-shard info --json "$T/d/val-00000.tok" "$T/d/train-00000.tok"
	echo "$output" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
s = j["shards"]
assert [x["split"] for x in s] == ["val", "train"] and s[1]["n_tokens"] == 1000
assert s[0]["token_bytes"] == 2 and s[0]["eos_id"] == 2 and "verified" not in s[0]'
	run -1 --separate-stderr titan-shard info "$T/nope"
	[[ $stderr == *"cannot open '$T/nope': No such file or directory"* ]]
}

@test "verify passes good shards and names a corrupt one (1)" {
	gen "$T/in.bin" 100 9 1000
	shard --out "$T/d" --shard-tokens 1000 "$T/in.bin"
	run -0 --separate-stderr titan-shard verify "$T/d"
	assert_line --regexp "^$T/d/train-00000.tok: ok \(1000 tokens, max id [0-9]+ < vocab 1000\)$"
	assert_line --regexp "^[0-9]+ shards ok, 0 bad$"
	printf '\x07' | dd of="$T/d/train-00001.tok" bs=1 seek=5000 conv=notrunc status=none
	run -1 --separate-stderr titan-shard verify "$T/d"
	refute_crash
	[[ $stderr == *"'$T/d/train-00001.tok': payload checksum mismatch"* ]]
	assert_line --regexp "shards ok, 1 bad$"
	run -1 --separate-stderr titan-shard info --verify --json "$T/d"
	echo "$output" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["bad"] == 1 and "payload checksum" in j["shards"][1]["error"]
assert j["shards"][0]["verified"] is True'
	# info alone reads headers only: the payload damage goes unnoticed
	run -0 titan-shard info "$T/d"
}

@test "info --verify adds max id and status columns" {
	gen "$T/in.bin" 30 9 1000
	shard --out "$T/d" --shard-tokens 1000 "$T/in.bin"
	run -0 --separate-stderr titan-shard info --verify "$T/d"
	assert_line --index 0 --regexp $'\tbytes\tmax_id\tverify$'
	assert_line --index 1 --regexp $'^'"$T/d"$'/train-00000.tok\t.*\t[0-9]+\tok$'
	mkdir "$T/empty"
	run -1 --separate-stderr titan-shard info "$T/empty"
	[[ $stderr == *"'$T/empty' holds no shards"* ]]
	run -2 --separate-stderr titan-shard verify --verify "$T/d"
	run -2 --separate-stderr shard --out "$T/e" --json "$T/in.bin"
}

@test "info names a truncated, a foreign and a misplaced shard (1)" {
	gen "$T/in.bin" 100 9 1000
	shard --out "$T/d" --shard-tokens 1000 "$T/in.bin"
	truncate -s -5 "$T/d/train-00001.tok"
	run -1 --separate-stderr titan-shard info "$T/d/train-00001.tok"
	[[ $stderr == *"'$T/d/train-00001.tok': expected "*" bytes "*", found "*": truncated?"* ]]
	echo 'hello' > "$T/x.tok"
	run -1 --separate-stderr titan-shard verify "$T/x.tok"
	[[ $stderr == *"'$T/x.tok' is not a titan shard"* ]]
	rm "$T/d/train-00001.tok"
	run -1 --separate-stderr titan-shard info "$T/d"
	[[ $stderr == *"shard train-00001.tok is missing"* ]]
}

@test "--progress: input bytes of the total, %, tokens, docs, MB/s; lines ending at 100%" {
	gen "$T/in.bin" 20 9 1000
	n=$(stat -c %s "$T/in.bin")
	run -0 --separate-stderr shard --out "$T/d" --progress "$T/in.bin"
	[ -z "$output" ]
	[[ $stderr == *"titan-shard: "*"B / "*"B (100%), $(ntokens "$T/in.bin") tokens, 20 docs, "*" MB/s, "*" elapsed"* ]]
	[[ $stderr != *$'\r'* ]]
	# many reads of a bigger input: a line per update, the last at 100%
	gen "$T/big.bin" 60000 3 1000
	TITAN_PROGRESS_INTERVAL_MS=0 shard --out "$T/e" --progress "$T/big.bin" 2> "$T/err"
	[ "$(grep -c '^titan-shard: .* MiB / .* MiB ([0-9]*%), ' "$T/err")" -ge 2 ]
	run -0 grep '^titan-shard: ' "$T/err"
	assert_line --index $((${#lines[@]} - 1)) --regexp ' \(100%\), .* elapsed$'
	# --shuffle-docs: reading, then the documents written of their number
	TITAN_PROGRESS_INTERVAL_MS=0 shard --out "$T/f" --progress --shuffle-docs "$T/big.bin" 2> "$T/err"
	run -0 grep '^titan-shard: ' "$T/err"
	assert_line --index $((${#lines[@]} - 1)) --regexp '^titan-shard: writing shuffled: 60,000 / 60,000 docs \(100%\), '
	# a pipe: no total; without --progress (not a terminal): nothing
	cat "$T/in.bin" | shard --out "$T/g" --progress 2> "$T/err"
	run -0 grep '^titan-shard: ' "$T/err"
	assert_output --regexp '^titan-shard: [0-9.]+ [KM]?i?B, [0-9,]+ tokens, 20 docs, '
	run -0 --separate-stderr shard --out "$T/h" "$T/in.bin"
	[[ $stderr != *"titan-shard: "* && $stderr != *"MB/s"* ]]
}

@test "gzip and zstd token streams are read as the plain stream (files, pipes, members)" {
	command -v zstd >/dev/null || skip "the zstd tool is not installed (make deps)"
	titan-shard --version | grep -q -- '+zlib +zstd' || skip "built without zlib or libzstd"
	gen "$T/a.bin" 300 4 1000
	shard --out "$T/want" --shard-tokens 1000 "$T/a.bin"
	gzip -c "$T/a.bin" > "$T/a.bin.gz"
	{ head -c 4002 "$T/a.bin" | zstd -q; tail -c +4003 "$T/a.bin" | zstd -q; } > "$T/a.zst"
	shard --out "$T/gz" --shard-tokens 1000 "$T/a.bin.gz"
	zstd -q -c "$T/a.bin" | shard --out "$T/zst" --shard-tokens 1000
	shard --out "$T/multi" --shard-tokens 1000 "$T/a.zst"
	diff -r "$T/want" "$T/gz"
	diff -r "$T/want" "$T/zst"
	diff -r "$T/want" "$T/multi"
	# truncated: named with the offset, exit 1, no shard left
	n=$(stat -c %s "$T/a.bin.gz")
	head -c $((n - 100)) "$T/a.bin.gz" > "$T/t.gz"
	run -1 --separate-stderr shard --out "$T/t" "$T/t.gz"
	[[ $stderr == *"t.gz: truncated gzip data: the input ends at byte offset $((n - 100)) inside the member that starts at byte 0"* ]]
	[ -z "$(ls -A "$T/t")" ]
	# an odd length inside the compressed stream is counted uncompressed
	head -c 4001 "$T/a.bin" | gzip > "$T/odd.gz"
	run -1 --separate-stderr shard --out "$T/o" "$T/odd.gz"
	[[ $stderr == *"odd.gz: 4001 bytes (uncompressed) is not a whole number of uint32 token ids"* ]]
}

@test "-t FILE: vocab size, BOS/EOS and fingerprint from a tokenizer fixture" {
	tok=$FIXTURES/tok/tiny.tiktoken # 265 ranks + 256 Llama 3-style specials
	[ -r "$tok" ] || skip "no $tok"
	/usr/bin/python3 -c '
import struct, sys
ids = [265, 97, 98, 266] * 20 + [265, 520, 266]
sys.stdout.buffer.write(struct.pack("<%dI" % len(ids), *ids))' > "$T/in.bin"
	titan-shard -t "$tok" --out "$T/d" --val-docs 2 "$T/in.bin"
	cat <(readback "$T/d" val) <(readback "$T/d" train) | cmp - "$T/in.bin"
	run -0 titan-shard info --json "$T/d"
	echo "$output" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
s = j["shards"][0]
assert (s["vocab_size"], s["bos_id"], s["eos_id"]) == (521, 265, 266), s
assert s["fingerprint"] != "0x0000000000000000" and j["totals"]["all"]["docs"] == 21, j'
	printf '\x09\x02\x00\x00' > "$T/big.bin" # id 521
	run -1 --separate-stderr titan-shard -t "$tok" --out "$T/e" "$T/big.bin"
	[[ $stderr == *"token id 521 at position 0 is >= the vocab size 521 (wrong --tokenizer/--vocab-size?)"* ]]
}

@test "titan-tokenize | titan-shard -t: a trained tokenizer end to end" {
	[ -x "$TITAN_BIN/titan-tokenize" ] || skip "titan-tokenize is not built"
	text=/usr/share/common-licenses/GPL-3
	[ -r $text ] || skip "no $text to train on"
	titan-tokenize train --vocab-size 600 --format text $text -o "$T/tok.tiktoken"
	titan-tokenize -t "$T/tok.tiktoken" --format lines $text > "$T/ids.bin"
	titan-shard -t "$T/tok.tiktoken" --out "$T/d" --val-docs 10 "$T/ids.bin"
	readback "$T/d" val > "$T/val.bin"
	readback "$T/d" train > "$T/train.bin"
	cat "$T/val.bin" "$T/train.bin" | cmp - "$T/ids.bin"
	run -0 titan-shard verify "$T/d"
	run -0 titan-shard info --json "$T/d"
	echo "$output" | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)["shards"][0]
assert s["vocab_size"] == 600 and s["token_bytes"] == 2, s
assert (s["bos_id"], s["eos_id"]) == (344, 345), s
assert s["fingerprint"] != "0x0000000000000000", s'
}

# ---------------------------------------------------------------- cat

@test "cat: a folder gives back the stream it was cut from (val, then train), u16 widened" {
	gen "$T/in.bin" 300 11 1000
	shard --out "$T/d" --shard-tokens 1K --val-docs 30 "$T/in.bin"
	[ -e "$T/d/train-00002.tok" ] # several shards per split
	run -0 --separate-stderr bash -c "titan-shard cat '$T/d' | cmp - '$T/in.bin'"
	[ -z "$stderr" ]
	# one split of a folder, a trailing slash, single shard files in the order given
	readback "$T/d" train > "$T/train.bin"
	readback "$T/d" val > "$T/val.bin"
	titan-shard cat --split train "$T/d/" | cmp - "$T/train.bin"
	titan-shard cat --split val "$T/d" | cmp - "$T/val.bin"
	titan-shard cat "$T/d/val-00000.tok" "$T/d/train-00000.tok" |
		cmp - <(cat "$T/val.bin"; head -c 4000 "$T/train.bin")
	# -o FILE, checksums verified; a u32 folder
	titan-shard cat --verify -o "$T/out.bin" "$T/d"
	cmp "$T/out.bin" "$T/in.bin"
	gen "$T/big.bin" 50 12 100000
	titan-shard --vocab-size 100000 --eos-id 2 --shard-tokens 300 --out "$T/w" "$T/big.bin"
	titan-shard cat "$T/w" | cmp - "$T/big.bin"
	# and back into shards: the same shards again
	titan-shard cat "$T/d" | shard --out "$T/d2" --shard-tokens 1K --val-docs 30
	for f in "$T"/d/*.tok; do cmp "$f" "$T/d2/${f##*/}"; done
}

@test "cat: bad shards fail before any id is written (1); misuse is a usage error (2)" {
	gen "$T/in.bin" 100 13 1000
	shard --out "$T/d" --shard-tokens 1K --val-docs 5 "$T/in.bin"
	printf '\x07' | dd of="$T/d/train-00001.tok" bs=1 seek=5000 conv=notrunc status=none
	titan-shard cat "$T/d" > "$T/o.bin" # headers only: the damage goes through
	run -1 --separate-stderr bash -c "titan-shard cat --verify '$T/d' > '$T/o.bin'"
	refute_crash
	[[ $stderr == *"titan-shard: error: '$T/d/train-00001.tok': payload checksum mismatch"* ]]
	[ ! -s "$T/o.bin" ]
	run -1 --separate-stderr titan-shard cat --verify -o "$T/o2.bin" "$T/d"
	assert_file_not_exists "$T/o2.bin"
	truncate -s -5 "$T/d/train-00002.tok"
	run -1 --separate-stderr bash -c "titan-shard cat '$T/d' > '$T/o.bin'"
	[[ $stderr == *"'$T/d/train-00002.tok': expected "*"truncated?"* ]]
	[ ! -s "$T/o.bin" ]
	run -1 --separate-stderr titan-shard cat --split val "$T/d/train-00000.tok"
	[[ $stderr == *"'$T/d/train-00000.tok' is a 'train' shard, not 'val' (--split)"* ]]
	run -1 --separate-stderr titan-shard cat --split test "$T/d"
	[[ $stderr == *"no 'test' shards in '$T/d'"* ]]
	run -1 --separate-stderr titan-shard cat "$T/in.bin"
	[[ $stderr == *"is not a titan shard"* ]]
	run -2 --separate-stderr titan-shard cat
	[[ $stderr == *"cat: no shard file or directory given"* ]]
	run -2 --separate-stderr titan-shard cat -
	run -2 --separate-stderr titan-shard cat --json "$T/d"
	run -2 --separate-stderr titan-shard cat --split 'a/b' "$T/d"
	run -2 --separate-stderr titan-shard info --split val "$T/d"
	[[ $stderr == *"--split belongs to 'cat'"* ]]
	if command -v script >/dev/null; then
		run -0 script -q -e -c "titan-shard cat '$T/d/val-00000.tok'; echo rc=\$?" /dev/null
		[[ $output == *"standard output is a terminal"*"rc=2"* ]]
	fi
	run -0 titan-shard --help
	assert_line --partial "titan-shard cat [--split NAME] [--verify] [-o FILE] PATH ..."
}
