#!/usr/bin/python3
"""moe_ref.py — time the PyTorch reference MoE model (tests/ref/moe_ref.py
on llama_ref.py) on the training step titan-train runs: forward, fp32
cross-entropy, backward, clip_grad_norm_, AdamW (for-loop), LR scheduler,
and the auxiliary-loss-free expert_bias update; fp32.  The tokens are
titan's own shards (--shards, the train split packed as torchtitan does),
so both sides see the same data.  Used by bench/moe_cpu.sh.

  /usr/bin/python3 bench/moe_ref.py --shards DIR --dim 512 --layers 4 \
      --heads 8 --vocab 8192 --experts 8 --top-k 2 --shared 1 --inter 1024 \
      --seq 512 --batch 4 --threads 2 --steps 6 --warmup 2

Prints one line of JSON on stdout:
  {"torch": version, "threads": N, "params": N, "step_s": [..],
   "median_step_s": s, "tps": tokens/s of the median step}
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))

import torch  # noqa: E402

import llama_ref as L  # noqa: E402
import moe_ref as M  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", required=True, help="titan token shards (train-*.tok)")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--shared", type=int, default=1)
    ap.add_argument("--inter", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    args = L.ModelArgs(dim=a.dim, n_layers=a.layers, n_heads=a.heads, n_kv_heads=a.kv_heads,
                       vocab_size=a.vocab, max_seq_len=a.seq)
    # titan's model.moe_* defaults (torchtitan's MoEArgs)
    moe = {"num_experts": a.experts, "top_k": a.top_k, "score_func": "sigmoid",
           "route_norm": False, "route_scale": 1.0, "score_before_experts": True,
           "load_balance_coeff": 1e-3, "num_shared_experts": a.shared,
           "inter_dim": a.inter, "n_dense_layers": 0, "interleave_moe_layer_step": 1}
    torch.manual_seed(a.seed)
    model = M.build(args, moe)
    torch.manual_seed(a.seed)
    model.init_weights()
    model.train()
    nparams = sum(p.numel() for p in model.parameters())
    total = a.warmup + a.steps
    tr = L.Trainer(model, L.TrainArgs(schedule=L.ScheduleArgs(warmup_steps=2, total_steps=total)))
    tr.on_backward = lambda step, trainer: [m.update_bias() for m in M.moe_layers(model)]
    wins = L.windows(M.read_tokens(a.shards), a.seq, a.batch * total)
    times = []
    for s in range(total):
        rows = wins[s * a.batch:(s + 1) * a.batch]
        mb = [(torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows]))]
        t0 = time.perf_counter()
        tr.step(s + 1, mb)
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt)
    med = statistics.median(times)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "params": nparams, "step_s": [round(x, 4) for x in times],
                      "median_step_s": med, "tps": a.batch * a.seq / med}))


if __name__ == "__main__":
    main()
