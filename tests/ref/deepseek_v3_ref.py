#!/usr/bin/python3
"""deepseek_v3_ref.py — an independent PyTorch re-implementation of
torchtitan's DeepSeek-V3 model (models/deepseek_v3/model.py and
models/common/rope.py at github.com/pytorch/torchtitan HEAD), the reference
titan's model.name deepseek_v3 is checked against, on top of llama_ref.py
(norms, loss, AdamW, schedule) and moe_ref.py (the MoE feed-forward and its
load balancing).  It does not import torchtitan.

  Attention (MLA)   q = wq(x), or wq_b(q_norm(wq_a(x))) when q_lora_rank > 0,
                    viewed [.., H, qk_nope + qk_rope] and split; kv = wkv_a(x)
                    split into the latent [kv_lora_rank] and k_pe [qk_rope];
                    RoPE (complex, adjacent pairs) on q_pe and on k_pe as one
                    head shared by all; kv = wkv_b(kv_norm(latent)) viewed
                    [.., H, qk_nope + v_head_dim] and split into k_nope, v;
                    k = cat(k_nope, k_pe expanded); causal softmax attention
                    with softmax_scale = qk_head_dim^-0.5, times mscale² with
                    mscale = 0.1·mscale·ln(rope_factor) + 1 when
                    rope_factor > 1; wo on the [.., H·v_head_dim] output
  ComplexRoPE yarn  _yarn_inv_freq with truncate (floor/ceil of the
                    correction dims, clamped to [0, dim − 1])
  blocks            attention, attention_norm, ffn_norm, then moe or
                    feed_forward (registration order); block i is MoE when
                    i >= n_dense_layers

Used by tests/bats/deepseek_v3.bats as moe_ref.py is by moe.bats:
titan-train's seed checkpoint and token shards in, 12 steps of losses, grad
norms and expert_bias out (JSON), the final tensors with --save.
"""

import argparse
import glob
import json
import math
import sys
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

import block_causal_ref as BC
import llama_ref as L
import moe_ref as M

DOCS = None  # [B, T] document ids of the current batch (None: causal only)


@dataclass
class DSArgs(L.ModelArgs):
    hidden_dim: int = 1024            # the dense blocks' FFN size
    rope_theta: float = 10000.0
    rope_scaling: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    rope_factor: float = 40.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    original_seq_len: int = 4096
    mscale: float = 0.70

    @property
    def ffn_hidden(self) -> int:
        return self.hidden_dim


def yarn_freqs_cis(a: DSArgs, end: int) -> torch.Tensor:
    """ComplexRoPE._precompute_cache with scaling 'yarn' [end, rope/2]."""
    dim, base = a.qk_rope_head_dim, a.rope_theta
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    if a.rope_factor > 1.0:
        def corr(r):
            return (dim * math.log(a.original_seq_len / (r * 2 * math.pi))) / (2 * math.log(base))
        low, high = math.floor(corr(a.beta_fast)), math.ceil(corr(a.beta_slow))
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        freqs = freqs / a.rope_factor * ramp + freqs * (1 - ramp)
    t = torch.arange(end, device=freqs.device)
    ang = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(ang), ang)


class MLA(nn.Module):
    def __init__(self, a: DSArgs, freqs_cis):
        super().__init__()
        self.H, self.Q, self.R = a.n_heads, a.q_lora_rank, a.kv_lora_rank
        self.nope, self.rope, self.v = a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim
        qk = self.nope + self.rope
        if self.Q == 0:
            self.wq = nn.Linear(a.dim, self.H * qk, bias=False)
        else:
            self.wq_a = nn.Linear(a.dim, self.Q, bias=False)
            self.q_norm = L.RMSNorm(self.Q, a.norm_eps)
            self.wq_b = nn.Linear(self.Q, self.H * qk, bias=False)
        self.wkv_a = nn.Linear(a.dim, self.R + self.rope, bias=False)
        self.kv_norm = L.RMSNorm(self.R, a.norm_eps)
        self.wkv_b = nn.Linear(self.R, self.H * (self.nope + self.v), bias=False)
        self.wo = nn.Linear(self.H * self.v, a.dim, bias=False)
        self.scale = qk ** -0.5
        if a.rope_factor > 1.0:
            ms = 0.1 * a.mscale * math.log(a.rope_factor) + 1.0
            self.scale = self.scale * ms * ms
        self.fc = freqs_cis  # a plain attribute, as llama_ref's table

    def forward(self, x, _freqs_cis):
        bs, T, _ = x.shape
        q = self.wq(x) if self.Q == 0 else self.wq_b(self.q_norm(self.wq_a(x)))
        q = q.view(bs, T, self.H, self.nope + self.rope)
        q_nope, q_pe = torch.split(q, [self.nope, self.rope], dim=-1)
        kv = self.wkv_a(x)
        kv, k_pe = torch.split(kv, [self.R, self.rope], dim=-1)
        q_pe, k_pe = L.apply_rotary_emb(q_pe, k_pe.unsqueeze(2), self.fc)
        q = torch.cat([q_nope, q_pe], dim=-1)
        kv = self.wkv_b(self.kv_norm(kv)).view(bs, T, self.H, self.nope + self.v)
        k_nope, v = torch.split(kv, [self.nope, self.v], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(-1, -1, self.H, -1)], dim=-1)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        s = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
        if DOCS is not None:  # block_causal: the same document only
            mask = mask & (DOCS[:, None, :, None] == DOCS[:, None, None, :])
        s = s.masked_fill(~mask, float("-inf"))
        out = torch.matmul(torch.softmax(s, dim=-1), v)
        return self.wo(out.transpose(1, 2).contiguous().view(bs, T, -1))


def build(a: DSArgs, moe: dict) -> L.Transformer:
    model = L.Transformer(a)
    fc = yarn_freqs_cis(a, a.max_seq_len)
    moe = dict(moe, n_dense_layers=moe.get("n_dense_layers", 0), interleave_moe_layer_step=1)
    for i in range(a.n_layers):
        blk = M.MoEBlock(i, a, moe) if M.is_moe(i, moe) else model.layers[str(i)]
        blk.attention = MLA(a, fc)  # the same slot: the order stays
        # DeepSeekV3TransformerBlock: attention, the norms, then moe or
        # feed_forward
        blk._modules.move_to_end("moe" if M.is_moe(i, moe) else "feed_forward")
        model.layers[str(i)] = blk
    return model, moe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True, help="titan's seed checkpoint (HDF5)")
    ap.add_argument("--shards", required=True)
    ap.add_argument("--model", required=True, help="JSON: DSArgs fields")
    ap.add_argument("--moe", required=True, help="JSON: moe_ref's MoE fields + n_dense_layers")
    ap.add_argument("--train", required=True, help="JSON: batch, seq_len, steps, lr, warmup")
    ap.add_argument("--save", help="the final state_dict as .npz")
    ap.add_argument("--mask", choices=("causal", "block_causal"), default="causal",
                    help="block_causal: attention within a document (the shards' EOS ends one)")
    o = ap.parse_args()
    import h5py

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    t = json.loads(o.train)
    a = DSArgs(**json.loads(o.model), max_seq_len=t["seq_len"])
    model, _ = build(a, json.loads(o.moe))
    f = h5py.File(o.init, "r")
    model.load_state_dict({k: torch.from_numpy(f["model"][k][...]) for k in f["model"]},
                          strict=True)
    assert [n for n, _ in model.named_parameters()] == \
        [k for k in f["model"] if not k.endswith("expert_bias")], "parameter order"
    on_batch = None
    if o.mask == "block_causal":
        _, eos = BC.read_shard(sorted(glob.glob(f"{o.shards}/train-*.tok"))[0])

        def on_batch(inp):
            global DOCS
            DOCS = BC.document_ids(inp, eos)
    out = M.train(model, o.shards, t, on_batch)
    if o.save:
        np.savez(o.save, **{k: v.detach().numpy() for k, v in model.state_dict().items()})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
