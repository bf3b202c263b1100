#!/usr/bin/env bats
# The exit-status contract of every titan tool (docs/conventions.md, the
# EXIT STATUS section of each man page): 0 ok; 1 runtime failure (a data
# file missing, unreadable or malformed, an output that cannot be written);
# 2 usage or configuration (a bad option or value, a --config file that is
# missing or malformed).  Each tool meets the same four classes of failure:
# a bad option, a missing file, a malformed input file, an unwritable output.

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

TOOLS="titan-tokenize titan-shard titan-train titan-estimate titan-ckpt-convert titan-memprof titan-config titan-generate"

setup_file() {
	load tiny
	tiny_env
	tiny_corpus text 2000 600 10
	tiny_yaml "$DATA/tiny.yaml" 768 32 1 2 1 <<YAML
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 32
  steps: 2
metrics:
  log_freq: 1
  peak_flops: 1.0e+11
checkpoint:
  interval: 2
profiling:
  enable_memory_snapshot: true
YAML
	titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable --job.dump_folder="$DATA/run" > /dev/null
	# malformed inputs: the same bytes for every reader of data, a YAML error
	printf 'not a file any titan tool reads \001\002' > "$DATA/bad.bin"
	printf '{"text": "unterminated' > "$DATA/bad.jsonl"
	printf 'model: [\n' > "$DATA/bad.yaml"
	# an output path nothing can be created under (root ignores modes)
	printf 'a file\n' > "$DATA/file"
}

setup() {
	load helpers
	cd "$BATS_TEST_TMPDIR" || return 1
}

# expect STATUS CMD...: the exact status, one error line naming the tool, no crash
expect() {
	local want=$1
	shift
	run --separate-stderr "$@"
	refute_crash
	if [ "$status" -ne "$want" ]; then
		fail "$* exited $status, expected $want: $stderr"
	fi
	[[ $stderr == *"$1: "* ]] || [[ $stderr == *"titan-"*"error"* ]] || fail "$*: no error line: $stderr"
}

@test "a bad option: exit 2 in every tool" {
	for t in $TOOLS; do
		expect 2 "$t" --no-such-option
		[[ $stderr == *"Try '$t --help'"* ]]
		expect 2 "$t" --threads=many
	done
}

@test "a missing data file: exit 1 in every tool that reads one" {
	expect 1 titan-tokenize -t "$DATA/tok.tiktoken" none.jsonl
	expect 1 titan-tokenize -t none.tiktoken "$DATA/text.txt"
	expect 1 titan-shard -t "$DATA/tok.tiktoken" --out out none.tok
	expect 1 titan-shard -t none.tiktoken --out out "$DATA/text.tok"
	expect 1 titan-shard info none
	expect 1 titan-train -q --config "$DATA/tiny.yaml" --training.dataset_path=none --job.dump_folder=run
	expect 1 titan-ckpt-convert info none.h5
	expect 1 titan-ckpt-convert --from hf none out.h5
	expect 1 titan-memprof summary none
	expect 1 titan-memprof compare --estimate none.json "$DATA/run"
	expect 1 titan-generate -t "$DATA/tok.tiktoken" none.h5 hello
	expect 1 titan-generate -t none.tiktoken "$DATA/run/checkpoint/step-2.h5" hello
}

@test "a missing --config file is configuration: exit 2 in every tool that takes one" {
	for t in titan-train titan-estimate titan-config; do
		expect 2 "$t" --config none.yaml
		[[ $stderr == *"cannot open 'none.yaml'"* ]]
	done
	expect 2 titan-generate --config none.yaml -t "$DATA/tok.tiktoken" "$DATA/run/checkpoint/step-2.h5" hi
}

@test "a malformed data file: exit 1 in every tool, the file named" {
	expect 1 titan-tokenize -t "$DATA/tok.tiktoken" "$DATA/bad.jsonl"
	[[ $stderr == *"bad.jsonl:1:"*"invalid JSON"* ]]
	expect 1 titan-tokenize -t "$DATA/tok.tiktoken" --decode "$DATA/bad.bin"
	[[ $stderr == *"bad.bin: 34 bytes is not a whole number of uint32 token ids"* ]]
	expect 1 titan-tokenize -t "$DATA/bad.bin" "$DATA/text.txt"
	expect 1 titan-shard -t "$DATA/tok.tiktoken" --out out "$DATA/bad.bin"
	[[ $stderr == *"bad.bin: 34 bytes is not a whole number"* ]]
	expect 1 titan-shard -t "$DATA/bad.bin" --out out "$DATA/text.tok"
	expect 1 titan-shard info "$DATA/bad.bin"
	expect 1 titan-ckpt-convert info "$DATA/bad.bin"
	expect 1 titan-ckpt-convert --to hf "$DATA/bad.bin" hf
	expect 1 titan-memprof summary "$DATA/bad.bin"
	expect 1 titan-generate -t "$DATA/tok.tiktoken" "$DATA/bad.bin" hello
	expect 1 titan-generate -t "$DATA/bad.bin" "$DATA/run/checkpoint/step-2.h5" hello
	mkdir empty
	expect 1 titan-train -q --config "$DATA/tiny.yaml" --training.dataset_path=empty --job.dump_folder=run
	[[ $stderr == *"no 'train' shards in 'empty'"* ]]
}

@test "a malformed config is configuration: exit 2 in every tool that takes one" {
	for t in titan-train titan-estimate titan-config; do
		expect 2 "$t" --config "$DATA/bad.yaml"
		[[ $stderr == *"bad.yaml:2:"*"YAML syntax error"* ]]
		expect 2 "$t" --config "$DATA/tiny.yaml" --training.stpes=3
	done
	expect 2 titan-generate --config "$DATA/bad.yaml" -t "$DATA/tok.tiktoken" "$DATA/run/checkpoint/step-2.h5" hi
}

@test "an unwritable output: exit 1 in every tool, nothing left behind" {
	local no=$DATA/file/sub
	mkdir work && cd work
	expect 1 titan-tokenize -t "$DATA/tok.tiktoken" --format text "$DATA/text.txt" -o "$no/x.tok"
	expect 1 titan-shard -q -t "$DATA/tok.tiktoken" --out "$no" "$DATA/text.tok"
	expect 1 titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder="$no"
	expect 1 titan-ckpt-convert "$DATA/run/checkpoint/step-2.h5" "$no/x.h5"
	expect 1 titan-ckpt-convert --to hf "$DATA/run/checkpoint/step-2.h5" "$no"
	expect 1 titan-memprof timeline --svg "$no/x.svg" "$DATA/run"
	expect 1 titan-config --config "$DATA/tiny.yaml" -o "$no/x.yaml"
	[[ $stderr == *"Not a directory"* ]]
	# standard output on a full disk
	expect 1 bash -c 'titan-tokenize -t "$DATA/tok.tiktoken" --format text "$DATA/text.txt" > /dev/full'
	expect 1 bash -c 'titan-shard info "$DATA/shards" > /dev/full'
	expect 1 bash -c 'titan-estimate --config "$DATA/tiny.yaml" --device cpu --json > /dev/full'
	expect 1 bash -c 'titan-ckpt-convert info "$DATA/run/checkpoint/step-2.h5" > /dev/full'
	expect 1 bash -c 'titan-memprof summary "$DATA/run" > /dev/full'
	expect 1 bash -c 'titan-config --config "$DATA/tiny.yaml" > /dev/full'
	expect 1 bash -c 'titan-generate -q -n 4 -t "$DATA/tok.tiktoken" "$DATA/run/checkpoint/step-2.h5" In > /dev/full'
	[ -z "$(ls -A)" ]
}

# shard_with_oor OUT: a shard whose header says vocab 500 and whose payload
# (CRC intact) holds id 550 at position 700: what an id outside the model's
# vocabulary looks like to the loader
shard_with_oor() {
	python3 - "$1" <<'PY'
import struct, sys
ids = [(i * 7) % 500 for i in range(2000)]
ids[700] = 550
open(sys.argv[1] + ".u32", "wb").write(struct.pack("<%dI" % len(ids), *ids))
PY
	titan-shard -q --vocab-size 600 --eos-id 0 --out "$1" "$1.u32"
	python3 - "$1/train-00000.tok" <<'PY'
import struct, sys
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    return c ^ 0xFFFFFFFF
p = sys.argv[1]
d = bytearray(open(p, "rb").read())
d[16:20] = struct.pack("<I", 500)
d[68:72] = b"\0\0\0\0"
d[68:72] = struct.pack("<I", crc32c(bytes(d[:4096])))
open(p, "wb").write(d)
PY
}

@test "an id outside the vocabulary in a shard: titan-train exits 1 naming the shard, the offset and the step" {
	shard_with_oor oor
	expect 1 titan-train -q --config "$DATA/tiny.yaml" --training.dataset_path=oor --job.dump_folder=run
	[[ $stderr == *"step 1: training data: 'oor/train-00000.tok': token id 550 at position 700 is >= the vocab size 500 (byte offset 5496 of the file)"* ]]
	assert_file_not_exists run/checkpoint
	# the shard's own check says the same
	expect 1 titan-shard verify oor
	[[ $stderr == *"token id 550 at position 700"* ]]
}

@test "a model vocabulary below the shards': exit 2 naming the shard, its vocabulary and the override" {
	vocab=$(titan-shard info --json "$DATA/shards" | python3 -c 'import json, sys; print(json.load(sys.stdin)["shards"][0]["vocab_size"])')
	[ "$vocab" -gt 300 ]
	expect 2 titan-train -q --config "$DATA/tiny.yaml" --model.vocab_size=300 --job.dump_folder=run
	[[ $stderr == *"'$DATA/shards/train-00000.tok': the shard header's vocab_size is $vocab but the model has 300 ids"* ]]
	[[ $stderr == *"set --model.vocab_size=$vocab (or more)"* ]]
	assert_file_not_exists run/checkpoint
}

@test "every man page states the same EXIT STATUS contract" {
	local ref
	ref=$(sed -n '/^\.SH EXIT STATUS/,/^\.\\" end of the shared exit status/p' "$TITAN_SRCDIR/docs/titan-tokenize.1")
	[ -n "$ref" ]
	[[ $ref == *"runtime failure"* ]]
	for t in $TOOLS; do
		local got
		got=$(sed -n '/^\.SH EXIT STATUS/,/^\.\\" end of the shared exit status/p' "$TITAN_SRCDIR/docs/$t.1")
		[ "$got" = "$ref" ] || fail "docs/$t.1: EXIT STATUS differs from titan-tokenize.1's"
	done
	grep -q '^## Exit status' "$TITAN_SRCDIR/docs/conventions.md"
}

@test "a validation.seq_len longer than training's is configuration: exit 2, titan-config --check too" {
	# issue 27: another batch or a shorter sequence runs (titan-train.bats);
	# a longer one does not fit the RoPE table, as in torchtitan
	expect 2 titan-config --config "$DATA/tiny.yaml" --check --validation.enable \
		--validation.seq_len=64
	[[ $stderr == *"validation.seq_len: 64 is longer than training.seq_len 32"* ]]
	run -0 titan-config --config "$DATA/tiny.yaml" --check --validation.enable \
		--validation.seq_len=16 --validation.local_batch_size=3
	expect 2 titan-train -q --config "$DATA/tiny.yaml" --validation.enable \
		--validation.seq_len=64 --job.dump_folder=run
	[[ $stderr == *"validation.seq_len: 64 is longer than training.seq_len 32"* ]]
	assert_file_not_exists run/checkpoint
	# disabled, the validation keys are not checked
	run -0 titan-config --config "$DATA/tiny.yaml" --check --validation.seq_len=64
}

@test "a malformed optimizer step in a checkpoint is data: exit 1 naming the file" {
	/usr/bin/python3 -c 'import h5py' 2>/dev/null || skip "python3-h5py is not installed"
	titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable \
		--checkpoint.last_save_model_only=false --job.dump_folder=run > /dev/null
	cp run/checkpoint/step-2.h5 good.h5
	# refused when the file is opened (a negative count) ...
	/usr/bin/python3 -c 'import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    f["optimizer"].attrs["step"] = -5' run/checkpoint/step-2.h5
	expect 1 titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable \
		--job.dump_folder=run --training.steps=3
	[[ $stderr == *"step-2.h5': /optimizer: attribute 'step' is -5 (must not be negative)"* ]]
	assert_file_not_exists run/checkpoint/step-3.h5
	# ... or when it is loaded (a count AdamW cannot take)
	cp good.h5 run/checkpoint/step-2.h5
	/usr/bin/python3 -c 'import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    f["optimizer"].attrs["step"] = 2**62' run/checkpoint/step-2.h5
	expect 1 titan-train -q --config "$DATA/tiny.yaml" --checkpoint.enable \
		--job.dump_folder=run --training.steps=3
	[[ $stderr == *"step-2.h5': /optimizer: step 4611686018427387904 is not a step count"* ]]
	assert_file_not_exists run/checkpoint/step-3.h5
}
