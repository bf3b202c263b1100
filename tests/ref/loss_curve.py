#!/usr/bin/env python3
"""loss_curve.py — the helpers of bench/curve_gpu.sh (titan-train's loss
curve against PyTorch's, tests/ref/torch_train_gpu.py, from the same
initial weights and batches).  Plain Python 3, no torch.

  loss_curve.py tokens N VOCAB SEED > ids.bin
      N token ids < VOCAB as a raw little-endian uint32 stream (what
      titan-shard reads): make_golden.py's order-1 Markov chain (each id
      has 3 likely successors, 80%; otherwise uniform), so the loss falls
      over a few steps and the curve has a shape to compare, not the flat
      ln(VOCAB) of uniform ids.
  loss_curve.py compare METRICS.JSONL PEER.JSON TOL [OUT.json]
      titan's per-step loss (metrics.jsonl, every step logged) against the
      peer's "losses": |titan - torch| / |torch| <= TOL at every step, the
      same number of steps, both finite; also the learning rates (titan's
      `lr` against the peer's "lrs", 1e-6 relative: the same schedule).
      Prints a table; exit 1 beyond TOL, 2 on unreadable input.
"""

import array
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from markov_tokens import markov_tokens  # noqa: E402


def tokens(n, vocab, seed):
    out = sys.stdout.buffer
    buf = array.array("I")
    for x in markov_tokens(n, vocab, seed):
        buf.append(x)
        if len(buf) == 1 << 16:
            if sys.byteorder != "little":
                buf.byteswap()
            out.write(buf.tobytes())
            buf = array.array("I")
    if sys.byteorder != "little":
        buf.byteswap()
    out.write(buf.tobytes())


def titan_curve(path):
    rows = {}
    for line in open(path):
        o = json.loads(line)
        if "loss" in o:
            rows[int(o["step"])] = o
    steps = sorted(rows)
    if steps != list(range(1, len(steps) + 1)):
        raise ValueError(f"{path}: the steps logged are not 1..N (metrics.log_freq 1?): {steps[:5]}...")
    return [float(rows[s]["loss"]) for s in steps], [float(rows[s]["lr"]) for s in steps]


def compare(metrics, peer, tol, out=None):
    try:
        tl, tlr = titan_curve(metrics)
        p = json.load(open(peer))
        pl, plr = [float(x) for x in p["losses"]], [float(x) for x in p.get("lrs", [])]
    except (OSError, ValueError, KeyError) as e:
        print(f"loss_curve.py: error: {e}", file=sys.stderr)
        return 2
    bad = []
    if len(tl) != len(pl) or not tl:
        bad.append(f"titan logged {len(tl)} steps, torch {len(pl)}")
    if not all(math.isfinite(x) for x in tl + pl):
        bad.append("a non-finite loss")
    rels = []
    print("| step | titan loss | torch loss | rel. diff | titan lr | torch lr |")
    print("|---|---|---|---|---|---|")
    for s, (a, b) in enumerate(zip(tl, pl)):
        r = abs(a - b) / abs(b) if b else abs(a - b)
        rels.append(r)
        lr_t, lr_p = tlr[s], (plr[s] if s < len(plr) else float("nan"))
        print(f"| {s + 1} | {a:.6f} | {b:.6f} | {r:.2e}{' **over**' if r > tol else ''} "
              f"| {lr_t:.6g} | {lr_p:.6g} |")
        if not math.isclose(lr_t, lr_p, rel_tol=1e-6, abs_tol=1e-12):
            bad.append(f"step {s + 1}: learning rate titan {lr_t:.8g}, torch {lr_p:.8g}")
    mx = max(rels) if rels else float("nan")
    worst = rels.index(mx) + 1 if rels else 0
    over = [i + 1 for i, r in enumerate(rels) if r > tol]
    if over:
        bad.append(f"{len(over)} step(s) beyond {tol:g} relative (first: step {over[0]})")
    print(f"max relative loss difference {mx:.3e} at step {worst} (tolerance {tol:g}); "
          f"{'AGREE' if not bad else 'DIFFER: ' + '; '.join(bad[:3])}")
    if out:
        with open(out, "w") as f:
            json.dump({"steps": len(tl), "titan_losses": tl, "torch_losses": pl,
                       "rel_diff": rels, "max_rel_diff": mx, "worst_step": worst,
                       "tolerance": tol, "titan_lrs": tlr, "torch_lrs": plr,
                       "agree": not bad, "problems": bad}, f, indent=1)
            f.write("\n")
    return 0 if not bad else 1


def main():
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == "tokens":
        tokens(int(a[1]), int(a[2]), int(a[3]))
        return 0
    if len(a) in (4, 5) and a[0] == "compare":
        return compare(a[1], a[2], float(a[3]), a[4] if len(a) == 5 else None)
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
