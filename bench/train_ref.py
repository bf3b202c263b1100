#!/usr/bin/python3
"""train_ref.py — time the PyTorch reference model (tests/ref/llama_ref.py)
on the same training step titan-train runs: forward, fp32 cross-entropy
summed and divided by the valid-token count, backward, clip_grad_norm_,
AdamW (torch's for-loop implementation, as the golden tests), LR scheduler.
Random tokens of shape [batch, seq]; the model is torchtitan's Llama 3 with
the given dims.  Used by bench/train_cpu.sh.

  /usr/bin/python3 bench/train_ref.py --dim 256 --layers 6 --heads 16 \
      --vocab 2048 --seq 512 --batch 4 --threads 1 --steps 8 --warmup 2

Prints one line of JSON on stdout:
  {"torch": version, "threads": N, "params": N, "step_s": [..],
   "median_step_s": s, "tps": tokens/s of the median step}
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))

import torch  # noqa: E402

import llama_ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--multiple-of", type=int, default=256)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=8, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    args = llama_ref.ModelArgs(dim=a.dim, n_layers=a.layers, n_heads=a.heads,
                               n_kv_heads=a.kv_heads, vocab_size=a.vocab,
                               multiple_of=a.multiple_of, max_seq_len=a.seq)
    model = llama_ref.build_model(args, a.seed)
    nparams = sum(p.numel() for p in model.parameters())
    total = a.warmup + a.steps
    t = llama_ref.TrainArgs(schedule=llama_ref.ScheduleArgs(warmup_steps=2, total_steps=total))
    trainer = llama_ref.Trainer(model, t)
    rng = random.Random(a.seed)
    times = []
    for s in range(total):
        toks = torch.tensor([rng.randrange(a.vocab) for _ in range(a.batch * (a.seq + 1))],
                            dtype=torch.int64).view(a.batch, a.seq + 1)
        mb = [(toks[:, :-1].contiguous(), toks[:, 1:].contiguous())]
        t0 = time.perf_counter()
        trainer.step(s + 1, mb)
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt)
    med = statistics.median(times)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "params": nparams, "step_s": [round(x, 4) for x in times],
                      "median_step_s": med, "tps": a.batch * a.seq / med}))


if __name__ == "__main__":
    main()
