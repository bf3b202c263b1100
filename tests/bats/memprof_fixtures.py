#!/usr/bin/python3
"""Synthetic traces with known answers for tests/bats/titan-memprof.bats,
written independently of libtitan from docs/formats.md.

  memprof_fixtures.py known OUT.memtrace        the scripted run (peak 4500)
  memprof_fixtures.py multi DIR                 4 ranks: memtraces, timing traces
  memprof_fixtures.py estimate OUT.json [VERSION]  a titan-estimate --json fixture
  memprof_fixtures.py cut IN OUT BYTES          the first BYTES bytes of IN
  memprof_fixtures.py poke IN OUT OFFSET BYTE   IN with one byte replaced
"""
import json
import os
import struct
import sys

TAGS = ["params", "grads", "optim", "activations", "comm", "workspace", "data", "other"]
P, G, O, A, C, W, D, X = range(8)


class Mem:
    def __init__(self, path, rank=0, start=1_700_000_000_000_000_000, version=1, device=b"host"):
        self.f = open(path, "wb")
        self.f.write(b"TTNMEM\0" + bytes([version]) + struct.pack("<IiQ", version, rank, start)
                     + device.ljust(40, b"\0"))
        self.step, self.phase, self.t = 0, 0, 0

    def rec(self, kind, tag, nbytes, addr, dt=1000):
        self.t += dt
        self.f.write(struct.pack("<BBHIQQQ", kind, tag, self.phase, self.step, self.t, nbytes, addr))

    def alloc(self, tag, nbytes, addr, dt=1000):
        self.rec(1, tag, nbytes, addr, dt)

    def free(self, tag, nbytes, addr, dt=1000):
        self.rec(2, tag, nbytes, addr, dt)

    def close(self):
        self.f.close()


def known(path):
    """Peak 4500 at step 1, loss: params 1000, optim 2000, activations 800,
    workspace 700 (as tests/unit/test_memprof.c's test_known_answer)."""
    m = Mem(path, rank=0)
    m.alloc(P, 1000, 0xA)
    m.alloc(O, 2000, 0xB)
    for s in (1, 2, 3):
        m.step, m.phase = s, 2
        m.alloc(A, 300, 0xC)
        m.alloc(A, 500, 0xD)
        m.phase = 3
        m.alloc(W, 700 if s == 1 else 600, 0xE)
        m.free(W, 700 if s == 1 else 600, 0xE)
        m.phase = 4
        m.free(A, 500, 0xD)
        m.free(A, 300, 0xC)
        m.phase = 5
        m.alloc(W, 100, 0xF)
        m.free(W, 100, 0xF)
    m.close()


def span(name, cat, ts_ms, dur_ms, rank, step, tid=0):
    return {"name": name, "cat": cat, "ph": "X", "ts": ts_ms * 1000.0, "dur": dur_ms * 1000.0,
            "pid": rank, "tid": tid, "args": {"step": step}}


def multi(d):
    """4 ranks, steps 1..3 in the memory traces, steps 2 and 3 profiled.
    Rank r: peak 3000 + 1000 (r + 1) (activations 1000 (r + 1)) at step 1,
    forward; its memory trace starts r ms after rank 0's.  Timing (ms): a
    step is data 0-5, forward 5-35, loss 35-40, backward 40-90, all_reduce
    on tid 1 80-96 (10 hidden under backward, 6 exposed), optimizer 96-104,
    step 0-105 (other 1).  Rank 2's backward takes 80 (40-120), all_reduce
    110-126, optimizer 126-134, step 0-135: a straggler in step (+28.6%)
    and backward (+60%)."""
    os.makedirs(d + "/memory_snapshot", exist_ok=True)
    for r in range(4):
        m = Mem(f"{d}/memory_snapshot/rank{r}.memtrace", rank=r,
                start=1_700_000_000_000_000_000 + r * 1_000_000)
        m.alloc(P, 1000, 0x10)
        m.alloc(O, 2000, 0x20)
        for s in (1, 2, 3):
            m.step, m.phase = s, 1
            m.alloc(D, 0, 0x30, dt=100_000)  # the step starts (data phase)
            m.phase = 2
            m.alloc(A, 1000 * (r + 1) if s == 1 else 500, 0x40, dt=5_000_000)
            m.phase = 4
            m.free(A, 1000 * (r + 1) if s == 1 else 500, 0x40, dt=35_000_000)
            m.phase = 5
            m.free(D, 0, 0x30, dt=56_000_000)
        m.close()
    for it in (2, 3):
        os.makedirs(f"{d}/profile_traces/iteration_{it}", exist_ok=True)
        for r in range(4):
            slow = r == 2
            bwd = 80 if slow else 50
            end = 40 + bwd
            ev = [span("data", "train", 0, 5, r, it),
                  span("forward", "model", 5, 30, r, it),
                  span("layer 0 forward", "model", 6, 20, r, it),
                  {"name": "host memory (bytes)", "ph": "C", "ts": 36000.0, "pid": r,
                   "args": {"value": 4000 + r}},
                  span("loss", "model", 35, 5, r, it),
                  span("backward", "model", 40, bwd, r, it),
                  span("all_reduce", "comm", end - 10, 16, r, it, tid=1),
                  span("optimizer", "train", end + 6, 8, r, it),
                  span("step", "train", 0, end + 15, r, it)]
            with open(f"{d}/profile_traces/iteration_{it}/rank{r}_trace.json", "w") as f:
                json.dump({"displayTimeUnit": "ms",
                           "otherData": {"tool": "fixture", "step": it},
                           "traceEvents": ev}, f)


def estimate(path, version=1):
    at = {"params": 1000, "grads": 0, "optim": 2000, "activations": 1000, "comm": 0,
          "workspace": 1000, "data": 0, "other": 0}
    tp = dict(at, workspace=1200)
    with open(path, "w") as f:
        json.dump({"format": "titan-estimate", "version": version,
                   "ranks": [{"stage": 0, "peak_bytes": 5000, "step_peak_bytes": 4500,
                              "peak_phase": "backward",
                              "at_peak": at, "tag_peak": tp}]}, f)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "known":
        known(args[0])
    elif cmd == "multi":
        multi(args[0])
    elif cmd == "estimate":
        estimate(args[0], int(args[1]) if len(args) > 1 else 1)
    elif cmd == "cut":
        data = open(args[0], "rb").read()
        open(args[1], "wb").write(data[:int(args[2])])
    elif cmd == "poke":
        data = bytearray(open(args[0], "rb").read())
        data[int(args[2])] = int(args[3])
        open(args[1], "wb").write(bytes(data))
    elif cmd == "newer":
        m = Mem(args[0], version=2)
        m.close()
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
