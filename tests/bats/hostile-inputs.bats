#!/usr/bin/env bats
# Inputs made to hurt: YAML aliases that expand a small config into
# gigabytes, and names in model files that carry terminal escapes.  Each
# is refused or quoted with a bounded cost.

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

PY=/usr/bin/python3

setup_file() {
	load tiny
	tiny_env
	tiny_corpus text 200 600 4
	tiny_yaml "$DATA/tiny.yaml" 600 32 1 2 "" "$DATA/tok.tiktoken" <<YAML
job:
  dump_folder: $DATA/out
training:
  dataset_path: $DATA/shards
  local_batch_size: 1
  seq_len: 16
  steps: 1
checkpoint:
  enable: true
  interval: 1
activation_checkpoint:
  mode: none
YAML
	titan-train -q --config "$DATA/tiny.yaml"
}

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	CKPT=$DATA/out/checkpoint/step-1.h5
}

# No ESC (0x1b), BEL (0x07) or 8-bit CSI (0x9b) byte in the files given.
no_raw_escapes() {
	for f; do
		if LC_ALL=C grep -q $'[\x1b\x07\x9b]' "$f"; then
			fail "$f holds a raw terminal escape: $(od -c "$f" | head -20)"
		fi
	done
}

@test "YAML aliases of a large anchor in a list key: exit 2 naming the alias, in bounded memory" {
	$PY - "$BATS_TEST_TMPDIR/alias.yaml" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("model:\n  flavor: debugmodel\n")
    f.write('checkpoint:\n  exclude_from_loading: [&a "%s",\n' % ("x" * (2 << 20)))
    f.write("    " + ", ".join(["*a"] * 1000) + "]\n")
PY
	run -2 --separate-stderr bash -c "ulimit -v 1000000; exec titan-config --check -c '$BATS_TEST_TMPDIR/alias.yaml'"
	refute_crash
	[[ $stderr == "titan-config: error: $BATS_TEST_TMPDIR/alias.yaml:5:5: the alias '*a' expands the config's values past 4 MiB (a large anchor repeated): not a job config" ]] ||
		fail "$stderr"
	# "billion laughs": lists of aliases of lists, ten deep (a mapping that
	# is no section is refused later; the aliases are refused first)
	$PY - "$BATS_TEST_TMPDIR/laughs.yaml" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("a0: &a0 [lol]\n")
    for i in range(1, 10):
        f.write("a%d: &a%d [%s]\n" % (i, i, ", ".join(["*a%d" % (i - 1)] * 10)))
PY
	run -2 --separate-stderr bash -c "ulimit -v 1000000; exec titan-config --check -c '$BATS_TEST_TMPDIR/laughs.yaml'"
	refute_crash
	[[ $stderr == *"laughs.yaml:7:"*"expands the config's values past 4 MiB"* ]] || fail "$stderr"
	# a few aliases are fine
	printf 'checkpoint:\n  exclude_from_loading: [&o optimizer, *o]\n' > "$BATS_TEST_TMPDIR/ok.yaml"
	run -0 titan-config --check -c "$BATS_TEST_TMPDIR/ok.yaml"
}

@test "info and logs: terminal escapes in tensor names, GGUF keys and values, flavor strings are shown escaped" {
	$PY -c 'import h5py' 2>/dev/null || skip "python3-h5py is not installed"
	# a checkpoint whose flavor is an OSC 52 clipboard write and one of
	# whose datasets is named with a colour escape
	cp "$CKPT" "$BATS_TEST_TMPDIR/esc.h5"
	$PY - "$BATS_TEST_TMPDIR/esc.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r+")
f.attrs["flavor"] = "\x1b]52;c;ZXZpbA==\x07\x1b[2J"
f.move("model/norm.weight", "model/norm\x1b[31m.weight")
f.close()
PY
	titan-ckpt-convert info "$BATS_TEST_TMPDIR/esc.h5" > "$BATS_TEST_TMPDIR/out" 2> "$BATS_TEST_TMPDIR/err" || true
	no_raw_escapes "$BATS_TEST_TMPDIR/out" "$BATS_TEST_TMPDIR/err"
	grep -qF 'model:         \x1b]52;c;ZXZpbA==\x07\x1b[2J: dim 32' "$BATS_TEST_TMPDIR/out" ||
		fail "$(cat "$BATS_TEST_TMPDIR/out")"
	grep -qF 'model/norm\x1b[31m.weight' "$BATS_TEST_TMPDIR/out" || fail "$(cat "$BATS_TEST_TMPDIR/out")"
	# the flavor in titan-generate's log line
	cp "$CKPT" "$BATS_TEST_TMPDIR/flavor.h5"
	$PY - "$BATS_TEST_TMPDIR/flavor.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r+")
f.attrs["flavor"] = "\x1b[2J\x9b31m"
f.close()
PY
	titan-generate -n 1 "$BATS_TEST_TMPDIR/flavor.h5" "In the" > "$BATS_TEST_TMPDIR/out" 2> "$BATS_TEST_TMPDIR/err"
	no_raw_escapes "$BATS_TEST_TMPDIR/err"
	grep -qF '(\x1b[2J\xc2\x9b31m, dim 32' "$BATS_TEST_TMPDIR/err" || fail "$(cat "$BATS_TEST_TMPDIR/err")"

	# a GGUF file: a key, a string value and a tensor name with escapes
	$PY - "$BATS_TEST_TMPDIR/esc.gguf" <<'PY'
import struct, sys
def s(b): return struct.pack("<Q", len(b)) + b
kv = s(b"general.name\x1b[31m") + struct.pack("<I", 8) + s(b"red\x1b[0m\x9b2J\xff")
ti = s(b"tok\x1b[2J") + struct.pack("<I", 1) + struct.pack("<Q", 4) + struct.pack("<I", 0) + struct.pack("<Q", 0)
hdr = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + kv + ti
hdr += b"\0" * (-len(hdr) % 32)
open(sys.argv[1], "wb").write(hdr + struct.pack("<4f", 1, 2, 3, 4))
PY
	run -0 --separate-stderr titan-ckpt-convert info "$BATS_TEST_TMPDIR/esc.gguf"
	printf '%s\n%s\n' "$output" "$stderr" > "$BATS_TEST_TMPDIR/out"
	no_raw_escapes "$BATS_TEST_TMPDIR/out"
	[[ $output == *'general.name\x1b[31m'*'"red\x1b[0m\x9b2J\xff"'* ]] || fail "$output"
	[[ $output == *'tok\x1b[2J'* ]] || fail "$output"
}
