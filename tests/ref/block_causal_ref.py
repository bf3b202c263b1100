#!/usr/bin/env python3
"""block_causal_ref.py — the PyTorch reference of titan-train's
training.attn_mask_type: block_causal: llama_ref.py's model and train step
with its attention mask written out as torchtitan's FlexAttention document
mask (torchtitan models/attention.py, get_document_mask_mod with
get_causal_mask_mod: and_masks), on the windows titan's loader cuts.

  block_causal_ref.py SEED.h5 SHARD.tok --seq 32 --batch 8 --steps 4 \\
      --lr 3e-3 --warmup 2 [--mask causal|block_causal]

SEED.h5: a titan checkpoint of the initial weights (titan-train
--checkpoint.create_seed_checkpoint); SHARD.tok: the split's only shard
(titan-shard), read with struct (format in lib/titan/data.h); its EOS id
ends the documents.  Window i is tokens [i(T+1), (i+1)(T+1)), step k reads
windows k·B .. k·B + B − 1 (no shuffle, one rank).  Document ids of an
input row, as torchtitan: the number of EOS ids before each token (an EOS
belongs to the document it ends).  Prints one JSON line per step:
{"step", "loss", "grad_norm"} (fp32, one thread, deterministic).
"""

import argparse
import json
import os
import struct
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402

DOCS = None  # [B, T] document ids of the current microbatch (None: causal)


def sdpa_masked(q, k, v):
    """softmax(q·kᵀ/√D + mask)·v, mask: causal and (block_causal) the
    same document, −inf elsewhere.  q, k, v [B,H,T,D]."""
    T, D = q.shape[-2], q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / D ** 0.5)
    mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
    if DOCS is not None:
        mask = mask & (DOCS[:, None, :, None] == DOCS[:, None, None, :])
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def document_ids(inputs, eos):
    """torchtitan's get_document_mask_mod: sequence_indices."""
    eos_mask = inputs == eos
    eos_mask[:, -1] = True
    cum = torch.cumsum(eos_mask.to(torch.int64), dim=1)
    ids = torch.zeros_like(cum)
    ids[:, 1:] = cum[:, :-1]
    return ids


def read_shard(path):
    raw = open(path, "rb").read()
    assert raw[:8] == b"TITANTOK", path
    token_bytes, = struct.unpack_from("<I", raw, 12)
    n_tokens, = struct.unpack_from("<Q", raw, 24)
    eos, = struct.unpack_from("<q", raw, 48)
    dt = np.uint16 if token_bytes == 2 else np.uint32
    toks = np.frombuffer(raw, dtype=dt, count=n_tokens, offset=4096).astype(np.int64)
    return torch.from_numpy(toks), eos


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seed")
    ap.add_argument("shard")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--mask", choices=("causal", "block_causal"), default="block_causal")
    a = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    f = h5py.File(a.seed, "r")
    A = dict(f.attrs)
    args = llama_ref.ModelArgs(
        dim=int(A["dim"]), n_layers=int(A["n_layers"]), n_heads=int(A["n_heads"]),
        n_kv_heads=int(A["n_kv_heads"]), vocab_size=int(A["vocab_size"]),
        multiple_of=int(A["multiple_of"]), norm_eps=float(A["norm_eps"]),
        rope_theta=float(A["rope_theta"]), rope_scaling=bool(A["rope_scaling"]),
        rope_scaling_factor=float(A["rope_scaling_factor"]),
        rope_low_freq_factor=float(A["rope_low_freq_factor"]),
        rope_high_freq_factor=float(A["rope_high_freq_factor"]),
        rope_original_max_position=int(A["rope_original_max_position"]),
        max_seq_len=a.seq)
    assert args.ffn_hidden == int(A["ffn_hidden"])
    model = llama_ref.Transformer(args)
    model.load_state_dict({k: torch.from_numpy(f["model"][k][...]) for k in f["model"]},
                          strict=True)
    llama_ref.sdpa_causal = sdpa_masked  # Attention.forward looks it up per call
    trainer = llama_ref.Trainer(model, llama_ref.TrainArgs(
        lr=a.lr, schedule=llama_ref.ScheduleArgs(warmup_steps=a.warmup, total_steps=a.steps)))
    tokens, eos = read_shard(a.shard)
    assert eos >= 0, "the shard has no EOS id"
    global DOCS
    for step in range(a.steps):
        win = llama_ref.windows(tokens[step * a.batch * (a.seq + 1):], a.seq, a.batch)
        inp = torch.stack([w[0] for w in win])
        lab = torch.stack([w[1] for w in win])
        DOCS = document_ids(inp, eos) if a.mask == "block_causal" else None
        rec, _ = trainer.step(step, [(inp, lab)])
        print(json.dumps({"step": step + 1, "loss": rec.loss, "grad_norm": rec.grad_norm,
                          "docs_per_row": float((DOCS[:, -1] + 1).float().mean())
                          if DOCS is not None else 1.0}))


if __name__ == "__main__":
    main()
