#!/usr/bin/env bats
# titan-memprof: the tool contract; summary, time, export, timeline and
# compare on synthetic traces with known answers (peak and breakdown,
# truncation, corruption, a newer format, a leak, four ranks with a
# straggler and overlapped communication, an estimate fixture); and real
# traces of tiny titan-train runs with activation checkpointing off and
# full (peak activations drop, the replayed peak equals titan-train's own
# metrics.jsonl); the SVG passes xmllint and the Perfetto JSON parses as
# trace-event JSON.  --json everywhere is checked with python3.

# bats file_tags=parallel
bats_require_minimum_version 1.5.0

PY=/usr/bin/python3

setup_file() {
	export DATA=$BATS_FILE_TMPDIR
	PATH=${TITAN_BIN:-$BATS_TEST_DIRNAME/../../bin}:$PATH
	local fx=$BATS_TEST_DIRNAME/memprof_fixtures.py
	$PY "$fx" known "$DATA/known.memtrace"
	$PY "$fx" multi "$DATA/multi"
	$PY "$fx" estimate "$DATA/est.json"
	# real traces: a tiny Llama (4 blocks) on shards of Genesis, 4 steps,
	# steps 2 and 4 profiled, activation checkpointing none and full
	if command -v bible >/dev/null; then
		bible -f gen1:1-gen50:26 > "$DATA/genesis.txt"
	else
		yes 'In the beginning God created the heaven and the earth.' | head -n 4000 > "$DATA/genesis.txt"
	fi
	titan-tokenize train --vocab-size 768 --format text "$DATA/genesis.txt" -o "$DATA/tok.tiktoken"
	titan-tokenize -t "$DATA/tok.tiktoken" --doc-per-line "$DATA/genesis.txt" |
		titan-shard -q -t "$DATA/tok.tiktoken" --out "$DATA/shards" --val-docs 40
	cat > "$DATA/tiny.yaml" <<YAML
model:
  flavor: custom
  dim: 64
  n_layers: 4
  n_heads: 4
  n_kv_heads: 2
  vocab_size: 768
  multiple_of: 32
training:
  dataset_path: $DATA/shards
  local_batch_size: 2
  seq_len: 64
  steps: 4
metrics:
  log_freq: 1
  peak_flops: 1.0e+11
profiling:
  enable_profiling: true
  enable_memory_snapshot: true
  profile_freq: 2
  profiler_warmup: 1
YAML
	for ac in none full; do
		titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder="$DATA/$ac" \
			--activation_checkpoint.mode=$ac > /dev/null
	done
}

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
	T=$BATS_TEST_TMPDIR
	FX=$BATS_TEST_DIRNAME/memprof_fixtures.py
}

# python3 on stdin with the command's stdout as $1 (a JSON text)
pycheck() { $PY -c "import json, sys; d = json.loads(sys.argv[1]); $1" "$output"; }

# ---------------------------------------------------------------- contract

@test "no arguments is a usage error (2)" {
	run -2 --separate-stderr titan-memprof
	refute_crash
	[[ $stderr == *"titan-memprof: error: no command"* ]]
	[[ $stderr == *"Try 'titan-memprof --help'"* ]]
	[ -z "$output" ]
}

@test "--help prints usage on stdout and exits 0" {
	run -0 --separate-stderr titan-memprof --help
	assert_line --partial "Usage: titan-memprof summary"
	assert_output --partial "export --perfetto"
	assert_output --partial "See also"
	[ -z "$stderr" ]
}

@test "--version names the program, revision and features" {
	run -0 titan-memprof --version
	assert_line --regexp '^titan-memprof \(titan\) '
	assert_line --partial "features:"
}

@test "a bad option, an unknown command, no input, misplaced options: usage errors (2)" {
	run -2 --separate-stderr titan-memprof summary --frob "$DATA/known.memtrace"
	[[ $stderr == *"unrecognized option"* ]]
	run -2 --separate-stderr titan-memprof frobnicate "$DATA/known.memtrace"
	[[ $stderr == *"unknown command 'frobnicate'"* ]]
	run -2 --separate-stderr titan-memprof summary
	[[ $stderr == *"summary: no trace given"* ]]
	run -2 --separate-stderr titan-memprof summary --svg x.svg "$DATA/known.memtrace"
	[[ $stderr == *"--svg does not go with summary"* ]]
	run -2 --separate-stderr titan-memprof timeline "$DATA/known.memtrace"
	[[ $stderr == *"give --svg FILE and/or --png FILE"* ]]
	run -2 --separate-stderr titan-memprof export "$DATA/known.memtrace"
	[[ $stderr == *"give --perfetto FILE"* ]]
	run -2 --separate-stderr titan-memprof compare "$DATA/known.memtrace"
	[[ $stderr == *"give --estimate"* ]]
	run -2 --separate-stderr titan-memprof time --threshold -3 "$DATA/multi"
	[[ $stderr == *"--threshold"* ]]
	run -2 --separate-stderr titan-memprof summary --rank x "$DATA/known.memtrace"
	[[ $stderr == *"--rank"* ]]
}

@test "a missing file is a runtime failure (1) naming it" {
	run -1 --separate-stderr titan-memprof summary "$T/none.memtrace"
	refute_crash
	[[ $stderr == *"titan-memprof: error: cannot open '$T/none.memtrace': No such file or directory"* ]]
	[ -z "$output" ]
}

@test "a file that is no trace is refused (1)" {
	echo "hello" > "$T/hello.txt"
	run -1 --separate-stderr titan-memprof summary "$T/hello.txt"
	refute_crash
	[[ $stderr == *"'$T/hello.txt' is not a memory trace (.memtrace), a Chrome trace (JSON) or a metrics.jsonl"* ]]
	printf 'TTNMEM\0\1' > "$T/short.memtrace"
	run -1 --separate-stderr titan-memprof summary "$T/short.memtrace"
	[[ $stderr == *"truncated header"* ]]
	echo '{"traceEvents": [{"ph": "X", "ts": 1,}]}' > "$T/bad_trace.json"
	run -1 --separate-stderr titan-memprof time "$T/bad_trace.json"
	refute_crash
	[[ $stderr == *"bad trace event at byte"* ]]
}

@test "a folder without memory traces: summary says how to get one (1)" {
	run -1 --separate-stderr titan-memprof summary "$DATA/multi/profile_traces"
	[[ $stderr == *"no memory trace (*.memtrace)"*"enable_memory_snapshot"* ]]
	run -1 --separate-stderr titan-memprof time "$DATA/multi/memory_snapshot"
	[[ $stderr == *"no timing trace"*"enable_profiling"* ]]
}

# ----------------------------------------------------------------- summary

@test "summary: the known peak, its step and phase, the breakdown and the largest blocks" {
	run -0 --separate-stderr titan-memprof summary "$DATA/known.memtrace"
	[ -z "$stderr" ]
	assert_line --regexp '^peak +4.39 KiB at step 1, loss; 5.0 µs into the trace, byte 192$'
	assert_line --regexp '^params +1000 B +22.2% +1000 B +1000 B$'
	assert_line --regexp '^activations +800 B +17.8% +800 B +0 B$'
	assert_line --regexp '^workspace +700 B +15.6% +700 B +0 B$'
	assert_line --regexp '^ +1.95 KiB +optim +set-up \(step 0\), at 2.0 µs$'
	assert_line --regexp '^ +700 B +workspace +step 1, loss'
	assert_output --partial "no call sites"
	assert_line --partial "fragmentation n/a (host allocator"
	assert_line --regexp '^leak check +live at the end of step 1 -> 2: .*, \+0 B \(\+0 B/step\): no growth$'
	assert_line --regexp '^trace +complete: 896 bytes, 26 records$'
	run -0 titan-memprof summary --json "$DATA/known.memtrace"
	pycheck '
r = d["ranks"][0]
assert d["format"] == "titan-memprof" and d["command"] == "summary", d
assert r["peak_bytes"] == 4500 and r["peak_step"] == 1 and r["peak_phase"] == "loss", r
assert r["at_peak"] == {"params": 1000, "grads": 0, "optim": 2000, "activations": 800,
    "comm": 0, "workspace": 700, "data": 0, "other": 0}, r["at_peak"]
assert r["tag_peak"]["workspace"] == 700 and r["at_end"]["activations"] == 0
assert [b["bytes"] for b in r["top_blocks"]] == [2000, 1000, 700, 500, 300], r["top_blocks"]
assert r["top_blocks"][2] == {"bytes": 700, "tag": "workspace", "step": 1, "phase": "loss",
    "time_s": 5e-06}, r["top_blocks"][2]
assert r["fragmentation"] is None and "n/a" in r["fragmentation_note"]
assert r["leak"]["growth_bytes"] == 0 and r["leak"]["first_step"] == 1 and r["leak"]["last_step"] == 2
assert [s["peak_bytes"] for s in r["steps"]] == [3000, 4500, 4400, 4400]
assert r["trace"]["complete"] and not r["trace"]["truncated"] and r["trace"]["corrupt"] is None
'
}

@test "summary --top limits the blocks; --rank picks a rank" {
	run -0 titan-memprof summary --json --top 1 "$DATA/multi"
	pycheck '
assert [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3]
assert [r["peak_bytes"] for r in d["ranks"]] == [4000, 5000, 6000, 7000]
assert all(r["peak_phase"] == "forward" and r["peak_step"] == 1 for r in d["ranks"])
assert all(len(r["top_blocks"]) == 1 for r in d["ranks"])
assert d["ranks"][3]["top_blocks"][0] == {"bytes": 4000, "tag": "activations", "step": 1,
    "phase": "forward", "time_s": d["ranks"][3]["top_blocks"][0]["time_s"]}'
	run -0 titan-memprof summary --json --rank 2 "$DATA/multi"
	pycheck 'assert [r["rank"] for r in d["ranks"]] == [2] and d["ranks"][0]["peak_bytes"] == 6000'
	run -1 --separate-stderr titan-memprof summary --rank 9 "$DATA/multi"
	[[ $stderr == *"--rank 9: no trace of that rank"* ]]
}

@test "summary: a truncated trace is analysed up to the cut, which is named (0)" {
	# 64-byte header + 6 records + 20 bytes of the 7th
	$PY "$FX" cut "$DATA/known.memtrace" "$T/cut.memtrace" $((64 + 6 * 32 + 20))
	run -0 --separate-stderr titan-memprof summary "$T/cut.memtrace"
	refute_crash
	[[ $stderr == *"warning: '$T/cut.memtrace' is truncated at byte 256, inside a record (20 bytes of 32"* ]]
	[[ $stderr == *"analysed the 6 complete records, up to step 1"* ]]
	assert_line --regexp '^trace +TRUNCATED at byte 256 of 276 \(a partial record of 20 bytes\): analysed 6 records, up to step 1'
	assert_line --regexp '^peak +4.39 KiB at step 1, loss; 5.0 µs into the trace, byte 192$'
	run -0 titan-memprof summary -q --json "$T/cut.memtrace"
	pycheck '
t = d["ranks"][0]["trace"]
assert t["truncated"] and not t["complete"] and t["stop_offset"] == 256 and t["tail_bytes"] == 20, t'
}

@test "summary: a corrupt record is reported with its offset, the part before it analysed (1)" {
	# record 4 (byte 192) gets kind 9
	$PY "$FX" poke "$DATA/known.memtrace" "$T/bad.memtrace" 192 9
	run -1 --separate-stderr titan-memprof summary "$T/bad.memtrace"
	refute_crash
	[[ $stderr == *"titan-memprof: error: '$T/bad.memtrace': corrupt record at byte 192 (record 4): unknown kind 9: analysed the 4 records before it"* ]]
	assert_line --regexp '^peak +3.71 KiB at step 1, forward'
	assert_line --partial "CORRUPT"
	# a tag out of range
	$PY "$FX" poke "$DATA/known.memtrace" "$T/tag.memtrace" 97 42
	run -1 --separate-stderr titan-memprof summary --json "$T/tag.memtrace"
	[[ $stderr == *"byte 96 (record 1): unknown tag 42"* ]]
	pycheck 'assert "unknown tag 42" in d["ranks"][0]["trace"]["corrupt"]'
}

@test "summary: a trace from a newer format version is refused (1)" {
	$PY "$FX" newer "$T/v2.memtrace"
	run -1 --separate-stderr titan-memprof summary "$T/v2.memtrace"
	refute_crash
	[[ $stderr == *"memory trace format version 2 is newer than this titan reads (1): upgrade titan"* ]]
	[ -z "$output" ]
}

@test "summary: frees of unknown addresses are counted with the first offset" {
	$PY - "$T/anom.memtrace" <<'EOF'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(b"TTNMEM\0\1" + struct.pack("<IiQ", 1, 0, 0) + b"host".ljust(40, b"\0"))
    f.write(struct.pack("<BBHIQQQ", 1, 0, 0, 0, 1, 64, 0x100))
    f.write(struct.pack("<BBHIQQQ", 2, 0, 0, 0, 2, 64, 0x999))
    f.write(struct.pack("<BBHIQQQ", 2, 0, 0, 0, 3, 64, 0x100))
EOF
	run -0 --separate-stderr titan-memprof summary "$T/anom.memtrace"
	[[ $stderr == *"1 record: free of an address that is not live (the first at byte 96)"* ]]
	assert_line --regexp '^anomalies +1: free of an address that is not live \(the first at byte 96\)'
}

@test "summary: the leak check finds steady growth and names the tag" {
	cc -std=c17 -O2 -o "$T/gen" bench/memprof_gen.c
	"$T/gen" "$T/leak.memtrace" 20000 0 4 4096 > /dev/null
	run -0 titan-memprof summary "$T/leak.memtrace"
	assert_line --regexp '^leak check +live at the end of step 2 -> [0-9]+: .*\(\+4.00 KiB/step\): GROWING, other \+'
	run -0 titan-memprof summary --json "$T/leak.memtrace"
	pycheck '
l = d["ranks"][0]["leak"]
assert l["growth_per_step"] == 4096 and l["growth_by_tag"]["other"] == l["growth_bytes"] > 0, l'
}

@test "summary: a million events stream through with the generator's peak" {
	cc -std=c17 -O2 -o "$T/gen" bench/memprof_gen.c
	"$T/gen" "$T/big.memtrace" 1000000 0 16 > "$T/want.json"
	titan-memprof summary --json --top 0 "$T/big.memtrace" > "$T/got.json"
	$PY -c '
import json, sys
want, got = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))["ranks"][0]
assert got["records"] == 1000000 and got["peak_bytes"] == want["peak_bytes"], (got["peak_bytes"], want)
assert got["at_peak"] == want["at_peak"], (got["at_peak"], want["at_peak"])
assert got["leak"]["growth_bytes"] == 0' "$T/want.json" "$T/got.json"
}

# -------------------------------------------------------------------- time

@test "time: per-phase times, exposed vs overlapped communication, the straggler" {
	run -0 --separate-stderr titan-memprof time "$DATA/multi"
	assert_line --regexp '^== rank 2: 2 profiled steps'
	assert_line --regexp '^ +2 +105.000 +5.000 +30.000 +5.000 +50.000 +8.000 +6.000 +10.000 +1.000 +-$'
	assert_line --regexp '^ +rank 2 +step +135.000 ms +\+28.6% over the median 105.000 ms'
	assert_line --regexp '^ +rank 2 +backward +80.000 ms +\+60.0% over the median 50.000 ms'
	refute_line --regexp '^ +rank [013] '
	run -0 titan-memprof time --json "$DATA/multi"
	pycheck '
assert d["command"] == "time" and d["threshold_pct"] == 10
r0 = d["ranks"][0]
assert [s["step"] for s in r0["steps"]] == [2, 3]
s = r0["steps"][0]
want = {"step_ms": 105, "data_ms": 5, "forward_ms": 30, "loss_ms": 5, "backward_ms": 50,
        "optimizer_ms": 8, "comm_exposed_ms": 6, "comm_overlapped_ms": 10, "other_ms": 1}
assert all(abs(s[k] - v) < 1e-9 for k, v in want.items()), s
assert s["mfu_pct"] is None
sg = {(x["rank"], x["what"]): x for x in d["stragglers"]}
assert set(sg) == {(2, "step"), (2, "backward")}, sg
assert abs(sg[(2, "backward")]["over_pct"] - 60) < 1e-9 and sg[(2, "step")]["median_ms"] == 105'
	run -0 titan-memprof time --json --threshold 70 "$DATA/multi"
	pycheck 'assert d["stragglers"] == [], d["stragglers"]'
}

@test "time: MFU per step from --flops-per-step and --peak-flops" {
	run -0 titan-memprof time --json --rank 0 --flops-per-step 2.1e12 --peak-flops 1e14 "$DATA/multi"
	pycheck '
s = d["ranks"][0]["steps"][0]
assert abs(s["mfu_pct"] - 100 * 2.1e12 / 0.105 / 1e14) < 1e-9, s["mfu_pct"]'
	run -0 titan-memprof time --rank 0 --flops-per-step 2.1e12 --peak-flops 1e14 "$DATA/multi"
	assert_line --regexp '^ +2 +105.000 .* 20.0%$'
}

@test "time: communication by collective adds up to comm_exp/comm_ovl; EP 2's all_to_all_v is exposed" {
	# the synthetic ranks: one all_reduce a step, 6 ms exposed and 10 hidden
	run -0 --separate-stderr titan-memprof time --rank 0 "$DATA/multi"
	assert_line --regexp '^ +collective +calls +exposed +overlapped +exp_share$'
	assert_line --regexp '^ +all_reduce +2 +12.000 +20.000 +5.7%$'
	skip_without_mpi
	# a tiny MoE, experts sharded over 2 ranks: its dispatch and combine
	# are all_to_all_v; step 2 profiled
	timeout 120 mpiexec -n 2 titan-train -q --threads 1 --config "$DATA/tiny.yaml" \
		--job.dump_folder="$T/ep" --model.n_layers=2 --model.moe_num_experts=4 \
		--model.moe_top_k=2 --model.moe_inter_dim=64 --parallelism.expert_parallel_degree=2 \
		--training.steps=2 --profiling.enable_memory_snapshot=false --checkpoint.enable=false > /dev/null
	run -0 --separate-stderr titan-memprof time "$T/ep/profile_traces"
	assert_line --regexp '^== rank 1: 1 profiled step'
	assert_line --regexp '^ +all_to_all_v +[0-9]+ +[0-9]+[.][0-9]{3} +[0-9]+[.][0-9]{3} +[0-9]+[.][0-9]%$'
	# the printed lines add up to the printed comm_exp and comm_ovl (3 decimals each)
	$PY - "$output" <<'EOF'
import re, sys
rank = None
tab, col = {}, {}
for l in sys.argv[1].splitlines():
    m = re.match(r"^== rank (\d+):", l)
    if m:
        rank = int(m.group(1))
        col[rank] = []
    f = l.split()
    if len(f) == 11 and f[0] == "2":
        tab[rank] = float(f[7]), float(f[8])
    if len(f) == 5 and f[4].endswith("%") and f[0] != "collective":
        col[rank].append((f[0], float(f[2]), float(f[3])))
assert set(tab) == set(col) == {0, 1}, (tab, col)
for r in (0, 1):
    names = [c[0] for c in col[r]]
    assert "all_to_all_v" in names and len(set(names)) == len(names), names
    for k in (0, 1):
        tot = sum(c[1 + k] for c in col[r])
        assert abs(tot - tab[r][k]) <= 0.0005 * (len(col[r]) + 1), (r, k, tot, tab[r])
EOF
	run -0 --separate-stderr titan-memprof time --json "$T/ep/profile_traces"
	pycheck '
assert [r["rank"] for r in d["ranks"]] == [0, 1]
for r in d["ranks"]:
    for s in r["steps"]:
        c = {x["name"]: x for x in s["collectives"]}
        assert c["all_to_all_v"]["calls"] > 0, c
        # the main thread runs no op while it waits on the dispatch/combine
        # it issued: exposed, not hidden by its forward/backward spans
        assert c["all_to_all_v"]["exposed_ms"] > 0, c
        assert abs(sum(x["exposed_ms"] for x in c.values()) - s["comm_exposed_ms"]) < 1e-9, (s, c)
        assert abs(sum(x["overlapped_ms"] for x in c.values()) - s["comm_overlapped_ms"]) < 1e-9, (s, c)
    rc = {x["name"]: x["calls"] for x in r["collectives"]}
    assert rc == {x["name"]: x["calls"] for x in r["steps"][0]["collectives"]}, rc'
}

# ------------------------------------------------------------------ export

@test "export --perfetto: every rank's spans, counters and memory in one trace-event JSON" {
	run -0 --separate-stderr titan-memprof export --perfetto "$T/p.json" "$DATA/multi"
	assert_output --partial "wrote $T/p.json:"
	$PY - "$T/p.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
assert isinstance(ev, list) and ev
for e in ev:
    assert isinstance(e["name"], str) and e["ph"] in "XCM" and isinstance(e["pid"], int), e
    if e["ph"] == "X":
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0 and e["dur"] >= 0, e
        assert isinstance(e["tid"], int) and isinstance(e["args"], dict), e
    if e["ph"] == "C":
        assert e["ts"] >= 0 and e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert names == {"rank 0", "rank 1", "rank 2", "rank 3"}, names
spans = [e for e in ev if e["ph"] == "X"]
assert len(spans) == 4 * 2 * 8, len(spans)
mem = [e for e in ev if e["name"] == "memory by tag (bytes)"]
assert {e["pid"] for e in mem} == {0, 1, 2, 3}
assert max(sum(e["args"].values()) for e in mem if e["pid"] == 3) == 7000
# the ranks' memory traces start 1 ms apart and each timing trace sits on
# its rank's memory clock: step 2's data span starts with its data event
for r in range(4):
    st = min(e["ts"] for e in spans if e["pid"] == r and e["name"] == "data" and e["args"]["step"] == 2)
    rank0 = min(e["ts"] for e in spans if e["pid"] == 0 and e["name"] == "data" and e["args"]["step"] == 2)
    assert abs(st - rank0 - r * 1000) < 1e-6, (r, st, rank0)
EOF
	run -0 titan-memprof export --json --perfetto "$T/p2.json" "$DATA/multi"
	pycheck '
assert d["command"] == "export" and d["ranks_aligned_by_clock"] is True
assert [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3] and all(r["spans"] == 16 for r in d["ranks"])'
	run -0 --separate-stderr titan-memprof export --perfetto - "$DATA/multi/profile_traces"
	$PY -c 'import json, sys; json.loads(sys.argv[1])["traceEvents"]' "$output"
}

# ---------------------------------------------------------------- timeline

@test "timeline: a well-formed SVG with axes, legend, steps and the peak" {
	command -v xmllint >/dev/null || skip "xmllint (libxml2-utils) is not installed"
	run -0 --separate-stderr titan-memprof timeline --svg "$T/m.svg" "$DATA/multi"
	[ -z "$output" ]
	run -0 xmllint --noout "$T/m.svg"
	grep -q 'rank 3 (host): peak 6.84 KiB at step 1, forward' "$T/m.svg"
	grep -q '>activations 3.91 KiB<' "$T/m.svg"
	grep -q '>step 2<' "$T/m.svg"
	grep -q 'KiB</text>' "$T/m.svg"
	grep -q 'time since the trace started (ms)' "$T/m.svg"
	[ "$(grep -c '<g transform' "$T/m.svg")" = 4 ]
	run -0 titan-memprof timeline --json --svg "$T/m2.svg" "$DATA/known.memtrace"
	pycheck '
r = d["ranks"][0]
assert d["command"] == "timeline" and d["svg"].endswith("m2.svg") and d["png"] is None
assert r["peak_bytes"] == 4500 and r["tags"][3] == "activations"
assert max(sum(row[1:]) for row in r["series"]) == 4500, r["series"]'
	run -0 titan-memprof timeline --svg - "$DATA/known.memtrace"
	[[ $output == *"</svg>"* ]]
}

@test "timeline: steps far apart in a tiny part of the time axis (it looped forever; found by fuzz_memprof)" {
	$PY - "$T/far.memtrace" "$BATS_TEST_DIRNAME" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
import memprof_fixtures as fx
m = fx.Mem(sys.argv[1])
m.step = 1
m.alloc(fx.P, 100, 0xA, dt=1)
m.step = 4000000000
m.alloc(fx.P, 100, 0xB, dt=1)
m.free(fx.P, 100, 0xA, dt=2**62)
m.close()
EOF
	run -0 --separate-stderr timeout 60 titan-memprof timeline --svg "$T/far.svg" "$T/far.memtrace"
	grep -q '</svg>' "$T/far.svg"
}

@test "timeline --png: through rsvg-convert, or a clear error without a converter" {
	if command -v rsvg-convert >/dev/null; then
		run -0 titan-memprof timeline --png "$T/m.png" "$DATA/known.memtrace"
		[ "$(head -c 8 "$T/m.png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ]
	fi
	mkdir "$T/bin"
	ln -s "$(command -v titan-memprof)" "$T/bin/titan-memprof"
	run -1 --separate-stderr env PATH="$T/bin" titan-memprof timeline --png "$T/n.png" "$DATA/known.memtrace"
	refute_crash
	[[ $stderr == *"--png needs rsvg-convert (Debian: librsvg2-bin) or ImageMagick on PATH"* ]]
	[ ! -e "$T/n.png" ]
}

# ----------------------------------------------------------------- compare

@test "compare: titan-estimate's prediction per tag against the measured peak" {
	run -0 --separate-stderr titan-memprof compare --estimate "$DATA/est.json" "$DATA/known.memtrace"
	assert_line --regexp '^activations +1000 B +800 B +-20.0% +1000 B +800 B +-20.0%$'
	assert_line --regexp '^workspace +1000 B +700 B +-30.0% +1.17 KiB +700 B +-41.7%$'
	assert_line --regexp '^total peak +4.88 KiB +4.39 KiB +-10.0%$'
	assert_line --regexp '^step peak +4.39 KiB +4.39 KiB +\+0.0%$'
	assert_line --regexp '^peak phase +backward +loss$'
	run -0 titan-memprof compare --json --estimate "$DATA/est.json" "$DATA/known.memtrace"
	pycheck '
r = d["ranks"][0]
assert d["command"] == "compare" and r["stage"] == 0
assert r["peak"] == {"estimated": 5000, "measured": 4500, "diff_pct": -10.0}, r["peak"]
assert r["tags"]["optim"]["diff_pct"] == 0 and r["tags"]["grads"]["diff_pct"] == 0
assert r["tags"]["workspace"]["estimated_peak"] == 1200 and r["tags"]["workspace"]["measured_peak"] == 700
assert r["peak_phase"] == {"estimated": "backward", "measured": "loss"}
assert r["step_peak"] == {"estimated": 4500, "measured": 4500, "diff_pct": 0}, r["step_peak"]'
}

@test "compare: a newer or foreign estimate file is refused (1)" {
	$PY "$FX" estimate "$T/est2.json" 2
	run -1 --separate-stderr titan-memprof compare --estimate "$T/est2.json" "$DATA/known.memtrace"
	[[ $stderr == *"titan-estimate format version 2 is newer than this titan-memprof reads (1)"* ]]
	echo '{"ranks": []}' > "$T/x.json"
	run -1 --separate-stderr titan-memprof compare --estimate "$T/x.json" "$DATA/known.memtrace"
	[[ $stderr == *"is not titan-estimate --json output"* ]]
	run -1 --separate-stderr titan-memprof compare --estimate "$T/none.json" "$DATA/known.memtrace"
	[[ $stderr == *"none.json"* ]]
}

# -------------------------------------------------------- real titan-train

@test "real run: the replayed peak equals titan-train's own count in metrics.jsonl" {
	run -0 titan-memprof summary --json "$DATA/none"
	$PY - "$output" "$DATA/none/metrics.jsonl" <<'EOF'
import json, sys
r = json.loads(sys.argv[1])["ranks"][0]
m = [json.loads(l) for l in open(sys.argv[2])]
best = max((x for x in m if "memory_peak_bytes" in x), key=lambda x: x["memory_peak_bytes"])
assert r["peak_bytes"] == best["memory_peak_bytes"], (r["peak_bytes"], best["memory_peak_bytes"])
assert r["at_peak"] == best["memory_peak_by_tag"], (r["at_peak"], best["memory_peak_by_tag"])
assert r["records"] > 100 and r["trace"]["complete"] and r["leak"]["growth_bytes"] == 0, r
assert sum(r["trace"]["anomalies"].values()) == 0
EOF
}

@test "real run: full activation checkpointing lowers peak activations" {
	run -0 titan-memprof summary --json "$DATA/none"
	none=$output
	run -0 titan-memprof summary --json "$DATA/full"
	$PY - "$none" "$output" <<'EOF'
import json, sys
n, f = (json.loads(a)["ranks"][0] for a in sys.argv[1:3])
an, af = n["at_peak"]["activations"], f["at_peak"]["activations"]
# 4 blocks: none keeps every block's activations, full one recompute set
assert af < 0.7 * an, (an, af)
assert f["peak_bytes"] < n["peak_bytes"] and f["tag_peak"]["activations"] < n["tag_peak"]["activations"]
for k in ("params", "grads", "optim"):
    assert f["at_peak"][k] == n["at_peak"][k], k
EOF
	run -0 titan-memprof summary "$DATA/full"
	assert_line --regexp '^activations '
	assert_line --regexp '^leak check .*no growth$'
}

@test "real run: time, export, timeline and compare on titan-train's traces" {
	run -0 --separate-stderr titan-memprof time --json "$DATA/none"
	pycheck '
r = d["ranks"][0]
assert [s["step"] for s in r["steps"]] == [2, 4], r["steps"]
for s in r["steps"]:
    assert s["step_ms"] > 0 and s["forward_ms"] > 0 and s["backward_ms"] > 0 and s["optimizer_ms"] > 0
    assert s["forward_ms"] + s["backward_ms"] + s["loss_ms"] <= s["step_ms"] + 1e-6
    assert s["mfu_pct"] > 0, s
assert d["flops_per_step"] > 0 and abs(d["peak_flops"] - 1e11) < 1e3, d'
	run -0 titan-memprof time "$DATA/full"
	assert_line --regexp '^== rank 0: 2 profiled steps'
	run -0 titan-memprof export --perfetto "$T/real.json" "$DATA/none"
	$PY - "$T/real.json" <<'EOF'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
assert {"step", "forward", "backward", "optimizer", "layer 3 forward"} <= {e["name"] for e in x}
assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in x)
c = [e for e in ev if e["ph"] == "C"]
assert {"host memory (bytes)", "memory by tag (bytes)"} <= {e["name"] for e in c}
EOF
	command -v xmllint >/dev/null || skip "xmllint (libxml2-utils) is not installed"
	run -0 titan-memprof timeline --svg "$T/real.svg" "$DATA/full"
	run -0 xmllint --noout "$T/real.svg"
	run -0 titan-memprof compare --estimate "$DATA/est.json" "$DATA/none"
	assert_line --regexp '^total peak '
}

@test "estimate, train, compare: titan-estimate's CPU model and the replayed trace agree per tag" {
	# no Chrome trace this time (its buffers are the one thing the CPU model
	# does not predict): the memory event log only
	titan-train -q --config "$DATA/tiny.yaml" --job.dump_folder="$T/run" \
		--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op \
		--profiling.enable_profiling=false > /dev/null
	titan-estimate --config "$DATA/tiny.yaml" --device cpu --json \
		--activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op \
		--profiling.enable_profiling=false > "$T/est.json"
	run -0 --separate-stderr titan-memprof compare --json --estimate "$T/est.json" "$T/run"
	pycheck '
r = d["ranks"][0]
assert r["peak"]["estimated"] == r["peak"]["measured"] > 0, r["peak"]
assert r["peak_phase"]["estimated"] == r["peak_phase"]["measured"], r["peak_phase"]
assert len(r["tags"]) == 8
for tag, row in r["tags"].items():
    assert row["estimated_at_peak"] == row["measured_at_peak"], (tag, row)
    assert row["estimated_peak"] == row["measured_peak"], (tag, row)'
}
