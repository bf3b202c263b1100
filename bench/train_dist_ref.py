#!/usr/bin/python3
"""train_dist_ref.py — time PyTorch DDP (torch.nn.parallel.DistributedDataParallel,
gloo backend, CPU) training the reference model (tests/ref/llama_ref.py) on
the same step as bench/train_ref.py: forward, fp32 cross-entropy summed and
divided by the rank's valid-token count (DDP averages the gradients, which
gives the global mean over equal-sized ranks), backward with DDP's bucketed
all-reduce overlapping it, clip_grad_norm_, AdamW (for-loop implementation),
LR scheduler.  WORLD processes started with torch.multiprocessing.spawn, each
with torch.set_num_threads(THREADS) and its own random tokens of shape
[batch, seq] (seed + rank).  Used by bench/train_dist.sh.

  /usr/bin/python3 bench/train_dist_ref.py --dim 512 --layers 8 --heads 8 \
      --kv-heads 4 --vocab 8192 --seq 512 --batch 4 --world 2 --threads 1 \
      --steps 6 --warmup 2 [--bind]

A step's time is the slowest rank's (all_reduce MAX of the per-rank times).
After the run every rank hashes its parameters (SHA-256 of the fp32 bytes):
the replicas must be bitwise identical, else the exit status is 1.
Prints one line of JSON on stdout (rank 0):
  {"torch": version, "world": N, "threads": N, "params": N, "step_s": [..],
   "median_step_s": s, "tps": global tokens/s of the median step,
   "param_sha256": [per rank], "replicas_identical": bool}
"""

import argparse
import datetime
import hashlib
import json
import os
import random
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import llama_ref  # noqa: E402


def worker(rank, a, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(a.world)
    if a.bind:
        # rank r on the r-th block of `threads` CPUs of the ones this process
        # may use, as mpiexec -bind-to core:THREADS places titan's ranks;
        # threads started later (intra-op pool, gloo) inherit it
        cpus = sorted(os.sched_getaffinity(0))
        k = rank * a.threads
        os.sched_setaffinity(0, {cpus[(k + i) % len(cpus)] for i in range(a.threads)})
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.comm_timeout))
    args = llama_ref.ModelArgs(dim=a.dim, n_layers=a.layers, n_heads=a.heads,
                               n_kv_heads=a.kv_heads, vocab_size=a.vocab,
                               multiple_of=a.multiple_of, max_seq_len=a.seq)
    model = llama_ref.build_model(args, a.seed)  # same init everywhere; DDP broadcasts rank 0's too
    nparams = sum(p.numel() for p in model.parameters())
    ddp = DDP(model)
    total = a.warmup + a.steps
    t = llama_ref.TrainArgs(schedule=llama_ref.ScheduleArgs(warmup_steps=2, total_steps=total))
    trainer = llama_ref.Trainer(ddp, t)  # Trainer calls self.model(inp): DDP's forward
    rng = random.Random(a.seed + 1000 * rank)
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
    tt = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(tt, op=dist.ReduceOp.MAX)
    h = hashlib.sha256()
    with torch.no_grad():
        for p in model.parameters():
            h.update(p.detach().contiguous().numpy().tobytes())
    sums = [None] * a.world
    dist.all_gather_object(sums, h.hexdigest())
    same = all(x == sums[0] for x in sums)
    if rank == 0:
        times = tt.tolist()
        med = statistics.median(times)
        print(json.dumps({"torch": torch.__version__, "world": a.world,
                          "threads": torch.get_num_threads(), "params": nparams,
                          "step_s": [round(x, 4) for x in times], "median_step_s": med,
                          "tps": a.world * a.batch * a.seq / med,
                          "param_sha256": sums, "replicas_identical": same}), flush=True)
    for r, x in enumerate(sums):
        if rank == 0:
            print(f"rank {r}: parameters sha256 {x}", file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()
    if not same:
        if rank == 0:
            print("train_dist_ref.py: error: the DDP replicas' parameters differ", file=sys.stderr)
        sys.exit(1)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--multiple-of", type=int, default=256)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank")
    ap.add_argument("--world", type=int, default=2, help="processes")
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--steps", type=int, default=6, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--comm-timeout", type=int, default=600, help="seconds")
    ap.add_argument("--bind", action="store_true",
                    help="pin rank r to its own THREADS CPUs (sched_setaffinity)")
    a = ap.parse_args()
    if a.steps < 1 or a.world < 1 or a.threads < 1:
        ap.error("--steps, --world and --threads need positive integers")
    # mp.spawn raises ProcessRaisedException / ProcessExitedException when a
    # worker fails, which ends this process with status 1
    mp.spawn(worker, args=(a, free_port()), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
