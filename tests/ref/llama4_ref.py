#!/usr/bin/python3
"""llama4_ref.py — an independent PyTorch re-implementation of torchtitan's
Llama 4 text model (models/llama4/model/model.py and args.py, github.com/
pytorch/torchtitan before its removal in d92336fee, read at 9810191bb^),
the reference titan's model.name llama4 is checked against, on top of
llama_ref.py (attention, norms, loss, AdamW, schedule) and moe_ref.py (the
MoE feed-forward and its load balancing).  It does not import torchtitan.

  precompute_freqs_cis  Llama 3.1-style scaling with RoPEScalingArgs'
                        defaults (factor 16, low = high = 1, original 8192):
                        freqs / factor where wavelen > 8192, the medium band
                        (~(wavelen < high_wl) & ~(wavelen > low_wl)) smoothed
  TransformerBlock      attention without RoPE when every_n_layers_nope is
                        set and layer_id % every_n_layers_nope == 0 (iRoPE's
                        NoPE layers); the other (RoPE) layers then attend
                        within fixed blocks of fixed_attn_block_size
                        positions (get_attention_masks' "rope" mask, flex
                        attention: and_masks of the causal mask, the
                        document mask with --mask block_causal, and
                        get_fixed_block_mask_mod, q_idx // size == kv_idx //
                        size), the NoPE layers with the "nope" mask (causal,
                        document); written out as explicit masks
                        MoE when (layer_id + 1) % interleave_moe_layer_step
                        == 0, else FeedForward(4·dim, multiple_of,
                        ffn_dim_multiplier); registration order attention,
                        moe | feed_forward, attention_norm, ffn_norm
  MoE hidden            auto_scale_hidden_dim: int(2·4·dim/3), ×multiplier,
                        int(/(top_k + num_shared_experts)), rounded up to
                        multiple_of
  MoEArgs defaults      8 experts, top-1, sigmoid, 1 shared expert,
                        score_before_experts, route_norm off, scale 1

Used by tests/bats/llama4.bats as moe_ref.py is by moe.bats: titan-train's
seed checkpoint and token shards in, 12 steps of losses, grad norms and
expert_bias out (JSON), the final tensors with --save.
"""

import argparse
import glob
import json
import math
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

import block_causal_ref as BC
import llama_ref as L
import moe_ref as M

DOCS = None  # [B, T] document ids of the current batch (--mask block_causal)
BLOCK = None  # the fixed block size of the attention being run (None: none)


@dataclass
class Llama4Args(L.ModelArgs):
    rope_scaling_factor: float = 16.0
    rope_high_freq_factor: float = 1.0
    every_n_layers_nope: Optional[int] = None
    fixed_attn_block_size: int = 8192
    auto_scale_hidden_dim: bool = True


def llama4_freqs_cis(a: Llama4Args, end: int) -> torch.Tensor:
    """torchtitan's llama4 precompute_freqs_cis [end, head_dim/2]."""
    dim = a.head_dim
    freqs = 1.0 / (a.rope_theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    if a.rope_scaling:
        sf, lo, hi = a.rope_scaling_factor, a.rope_low_freq_factor, a.rope_high_freq_factor
        orig = a.rope_original_max_position
        wavelen = 2 * math.pi / freqs
        high_wl, low_wl = orig / hi, orig / lo
        freqs = torch.where(wavelen > low_wl, freqs / sf, freqs)
        smooth = (orig / wavelen - lo) / (hi - lo)  # inf/nan when lo = hi: unused
        smoothed = (1 - smooth) * freqs / sf + smooth * freqs
        medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
        freqs = torch.where(medium, smoothed, freqs)
    t = torch.arange(end, device=freqs.device)
    ang = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(ang), ang)


def moe_hidden(a: Llama4Args, moe: dict) -> int:
    h = int(2 * (4 * a.dim) / 3)
    if a.ffn_dim_multiplier is not None:
        h = int(a.ffn_dim_multiplier * h)
    if a.auto_scale_hidden_dim:
        h = int(h / (moe["top_k"] + moe["num_shared_experts"]))
    h += -h % a.multiple_of
    return h


def sdpa_masked(q, k, v):
    """softmax(q·kᵀ/√D + mask)·v, the mask causal, and-ed with the same
    document (DOCS) and, with a block size (BLOCK), the same fixed block
    of the sequence's positions.  q, k, v [B,H,T,D]; llama_ref's
    Attention calls it in place of its sdpa_causal (build)."""
    block = BLOCK
    T, D = q.shape[-2], q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
    mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
    if DOCS is not None:
        mask = mask & (DOCS[:, None, :, None] == DOCS[:, None, None, :])
    if block is not None:
        i = torch.arange(T) // block
        mask = mask & (i[:, None] == i[None, :])[None, None]
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class IRoPEAttention(L.Attention):
    """torchtitan's llama4 Attention of a model with every_n_layers_nope:
    use_rope False (NoPE: q and k as the projections give them, the
    "nope" mask) or True (RoPE and the "rope" mask: fixed blocks)."""

    def __init__(self, a: Llama4Args, use_rope: bool):
        super().__init__(a)
        self.use_rope = use_rope
        self.block = a.fixed_attn_block_size if use_rope else None

    def rotate(self, xq, xk, freqs_cis):
        return super().rotate(xq, xk, freqs_cis) if self.use_rope else (xq, xk)

    def forward(self, x, freqs_cis):
        global BLOCK
        BLOCK = self.block
        try:
            return super().forward(x, freqs_cis)
        finally:
            BLOCK = None


class Llama4Model(L.Transformer):
    def __init__(self, a: Llama4Args):
        super().__init__(a)
        self.freqs_cis = llama4_freqs_cis(a, a.max_seq_len)


def build(a: Llama4Args, moe: dict):
    model = Llama4Model(a)
    moe = dict(moe, n_dense_layers=0)
    moe.setdefault("inter_dim", moe_hidden(a, moe))
    for i in range(a.n_layers):
        blk = M.MoEBlock(i, a, moe) if M.is_moe(i, moe) else model.layers[str(i)]
        n = a.every_n_layers_nope
        if n is not None:  # the same slot: the order stays
            blk.attention = IRoPEAttention(a, i % n != 0)
            L.sdpa_causal = sdpa_masked  # Attention.forward looks it up per call
        model.layers[str(i)] = blk
    return model, moe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True, help="titan's checkpoint (HDF5): the start")
    ap.add_argument("--model", required=True, help="JSON: Llama4Args fields")
    ap.add_argument("--moe", required=True,
                    help="JSON: moe_ref's MoE fields + interleave_moe_layer_step "
                    "(inter_dim: auto-scaled when absent)")
    ap.add_argument("--shards")
    ap.add_argument("--train", help="JSON: batch, seq_len, steps, lr, warmup")
    ap.add_argument("--save", help="the final state_dict as .npz")
    ap.add_argument("--prompt", help="instead of training: token ids (u32, the last one "
                    "dropped) continued greedily to --length; prints the log-probability")
    ap.add_argument("--length", type=int, default=16)
    ap.add_argument("--mask", choices=("causal", "block_causal"), default="causal",
                    help="block_causal: attention within a document (the shards' EOS ends one)")
    o = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    t = json.loads(o.train) if o.train else {"seq_len": o.length}
    a = Llama4Args(**json.loads(o.model), max_seq_len=t["seq_len"])
    model, moe = build(a, json.loads(o.moe))
    M.load_checkpoint(model, o.init)
    if o.prompt:
        ids = np.fromfile(o.prompt, dtype=np.uint32).tolist()[:-1]
        print("%.6f" % M.greedy_logprob(model, ids, o.length))
        return
    on_batch = None
    if o.mask == "block_causal":
        _, eos = BC.read_shard(sorted(glob.glob(f"{o.shards}/train-*.tok"))[0])
        L.sdpa_causal = sdpa_masked  # a model without iRoPE too

        def on_batch(inp):
            global DOCS
            DOCS = BC.document_ids(inp, eos)
    out = M.train(model, o.shards, t, on_batch)
    out["inter_dim"] = moe["inter_dim"]
    if o.save:
        np.savez(o.save, **{k: v.detach().numpy() for k, v in model.state_dict().items()})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
