#!/usr/bin/python3
"""check_curve.py METRICS REF_JSON CKPT NPZ [--moved] — titan-train's 12 steps
against a reference's (moe_ref.py, deepseek_v3_ref.py: tests/bats/moe.bats
and deepseek_v3.bats): losses and grad norms within 1e-5 relative, the final
expert_bias within 1e-6 (with --moved also not zero: the balancing moved
it), every final tensor within 1e-4 (||a-b||/||b||, as test_golden's final
weights)."""

import json
import sys

import h5py
import numpy as np


def main():
    metrics, ref_json, ckpt, npz = sys.argv[1:5]
    moved = "--moved" in sys.argv[5:]
    rows = [json.loads(l) for l in open(metrics)]
    ref = json.load(open(ref_json))
    assert len(rows) == 12 == len(ref["loss"]), (len(rows), len(ref["loss"]))
    worst = 0
    for r, l, g in zip(rows, ref["loss"], ref["grad_norm"]):
        for a, b in ((r["loss"], l), (r["grad_norm"], g)):
            rel = abs(a - b) / abs(b)
            worst = max(worst, rel)
            assert rel <= 1e-5, (r["step"], a, b, rel)
    f = h5py.File(ckpt, "r")
    for k, v in ref["expert_bias"].items():
        got = f["model"][k + ".moe.expert_bias"][...]
        assert max(abs(x - y) for x, y in zip(got, v)) <= 1e-6, (k, list(got), v)
        assert not moved or any(x != 0 for x in v), (k, v)
    # every tensor after 12 AdamW steps (its first moves each weight by
    # about lr times the sign of its gradient: every gradient, the gate's
    # included)
    want = np.load(npz)
    assert sorted(want.files) == sorted(f["model"]), (sorted(want.files), sorted(f["model"]))
    for k in want.files:
        a, b = f["model"][k][...].astype(np.float64), want[k].astype(np.float64)
        assert a.shape == b.shape, (k, a.shape, b.shape)
        err = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)
        assert err <= 1e-4, (k, err)
    print("worst relative difference %.2e" % worst)


if __name__ == "__main__":
    main()
