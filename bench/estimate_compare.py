#!/usr/bin/python3
"""bench/estimate_compare.py — one titan-train run against titan-estimate.

    estimate_compare.py LABEL METRICS.jsonl RANK0.memtrace ESTIMATE.json

Reads titan-train's metrics.jsonl (memory_peak_bytes and memory_peak_by_tag
of step 1, which counts from the start of the process, and of the last step,
a steady-state step), replays the tagged allocator's event log (the
memtrace of docs/formats.md: total peak, each tag's own peak, the phase of
the peak) and compares them with `titan-estimate --device cpu --json`:
peak within 5 %, every nonzero tag within 10 % (at the peak and each tag's
own peak), the peak phase equal.  Prints one Markdown table row; exit 1 when
a bound is broken, naming it on stderr.
"""
import json
import struct
import sys

TAGS = ["params", "grads", "optim", "activations", "comm", "workspace", "data", "other"]
PHASES = {0: "startup", 1: "data", 2: "forward", 3: "loss", 4: "backward",
          5: "optimizer", 6: "validation"}


def replay(path):
    """Total peak, the phase at it, and each tag's own peak."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:8] != b"TTNMEM\0\1":
            sys.exit("%s: not a titan memtrace" % path)
        live, cur = {}, [0] * len(TAGS)
        total = peak = 0
        phase = "startup"
        own = [0] * len(TAGS)
        while True:
            rec = f.read(32)
            if len(rec) < 32:
                break
            kind, tag, ph, _step, _t, size, addr = struct.unpack("<BBHIQQQ", rec)
            if kind == 1:
                live[addr] = (tag, size)
                cur[tag] += size
                total += size
                own[tag] = max(own[tag], cur[tag])
                if total > peak:
                    peak, phase = total, PHASES.get(ph, "?")
            elif addr in live:
                t, s = live.pop(addr)
                cur[t] -= s
                total -= s
    return peak, phase, dict(zip(TAGS, own))


def rel(a, b):
    return abs(a - b) / b if b else (0.0 if a == b else float("inf"))


def main():
    label, metrics, memtrace, estimate = sys.argv[1:5]
    rows = [json.loads(l) for l in open(metrics) if '"memory_peak_bytes"' in l]
    est = json.load(open(estimate))
    r = est["ranks"][0]
    first, last = rows[0], rows[-1]
    tpeak, tphase, town = replay(memtrace)
    bad = []

    def check(what, measured, estimated, bound):
        e = rel(estimated, measured)
        if e > bound:
            bad.append("%s: measured %d, estimated %d (%.1f%% > %.0f%%)"
                       % (what, measured, estimated, 100 * e, 100 * bound))
        return e

    worst = 0.0
    check("peak (metrics, step 1)", first["memory_peak_bytes"], r["peak_bytes"], 0.05)
    check("peak (memtrace)", tpeak, r["peak_bytes"], 0.05)
    check("peak (metrics, last step)", last["memory_peak_bytes"], r["step_peak_bytes"], 0.05)
    for t in TAGS:
        m = first["memory_peak_by_tag"][t]
        if m or r["at_peak"][t]:
            worst = max(worst, check("tag %s at the peak" % t, m, r["at_peak"][t], 0.10))
        if town[t] or r["tag_peak"][t]:
            worst = max(worst, check("tag %s own peak" % t, town[t], r["tag_peak"][t], 0.10))
    if tphase != r["peak_phase"]:
        bad.append("peak phase: measured %s, estimated %s" % (tphase, r["peak_phase"]))
    d = r["peak_bytes"] - first["memory_peak_bytes"]
    print("| %s | %d | %d | %+d (%.2f%%) | %d | %d | %.2f%% | %s / %s |" % (
        label, first["memory_peak_bytes"], r["peak_bytes"], d,
        100.0 * d / first["memory_peak_bytes"], last["memory_peak_bytes"],
        r["step_peak_bytes"], 100 * worst, tphase, r["peak_phase"]))
    for b in bad:
        print("%s: %s" % (label, b), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
