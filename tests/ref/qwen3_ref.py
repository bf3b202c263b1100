#!/usr/bin/python3
"""qwen3_ref.py — the dense Qwen3 model in PyTorch, written from the public
architecture (Qwen3 = Llama 3's pre-norm block with QK-norm, a head_dim of
its own, RoPE by rotate_half, optional tied embeddings), as torchtitan's
TOML-era models/qwen3/model/model.py has it:

  precompute_rope_cache   cos/sin of outer(t, 1/θ^(2i/D)) for the two halves
  apply_rotary_emb        x·cos + rotate_half(x)·sin (halves, not pairs)
  Attention               wq, wk, wv; q_norm, k_norm = RMSNorm(head_dim) on
                          each head BEFORE RoPE; causal SDPA with GQA; wo
  FeedForward             SwiGLU with hidden_dim given (no formula)
  init_weights            Llama 3's (trunc normal 0.02 / depth std, norms 1,
                          output trunc normal dim^-0.5; a tied matrix gets the
                          output init)

The rest (RMSNorm, SDPA, the loss, AdamW, the LR schedule, clipping) is
llama_ref.py's.  Parameters come out in torchtitan's order and names
(layers.N.attention.q_norm.weight before wq...).

titan's layout: titan runs RoPE on adjacent pairs (Llama's complex form), so
its wq/wk rows and q_norm/k_norm of each head hold the halves interleaved
(row 2i = half-row i, row 2i+1 = half-row i + D/2), the permutation HF's
Llama conversion undoes.  The model is the same function of the tokens
(RMSNorm over a head commutes with a permutation of its elements, and q·k
is unchanged when both are permuted alike); to_titan()/from_titan() move a
state dict between the two layouts.
"""

import math
import sys
from dataclasses import dataclass

import torch
from torch import nn

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
import llama_ref as ref            # noqa: E402


@dataclass
class Qwen3Args(ref.ModelArgs):
    qk_head_dim: int = 128            # Qwen3ModelArgs.head_dim
    hidden_dim: int = 3072            # Qwen3ModelArgs.hidden_dim
    norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    rope_scaling: bool = False

    @property
    def head_dim(self) -> int:
        return self.qk_head_dim

    @property
    def ffn_hidden(self) -> int:
        return self.hidden_dim


def precompute_rope_cache(dim, max_seq_len, base):
    """[max_seq_len, 2·dim]: cos then sin of the angles, each repeated for
    the two halves (torchtitan's qwen3 precompute_rope_cache)."""
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(max_seq_len, dtype=freqs.dtype)
    idx_theta = torch.outer(t, freqs).float()
    freqs = torch.cat([idx_theta, idx_theta], dim=-1)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_emb(xq, xk, rope_cache):
    bs, seqlen, _, head_dim = xq.shape
    rc = rope_cache[0:seqlen].view(1, seqlen, 1, head_dim * 2)
    cos = rc[..., :head_dim].to(dtype=xq.dtype)
    sin = rc[..., head_dim:].to(dtype=xq.dtype)
    return ((xq * cos) + (rotate_half(xq) * sin)).type_as(xq), \
        ((xk * cos) + (rotate_half(xk) * sin)).type_as(xk)


class Attention(ref.Attention):
    """llama_ref's Attention (its head_dim is Qwen3Args.head_dim) with
    q_norm, k_norm on each head before RoPE, RoPE by rotate_half."""

    def __init__(self, args: Qwen3Args):
        super().__init__(args)
        self.q_norm = ref.RMSNorm(self.head_dim, args.norm_eps)
        self.k_norm = ref.RMSNorm(self.head_dim, args.norm_eps)
        # registered first, as torchtitan's Attention does
        for name in ("k_norm", "q_norm"):
            self._modules.move_to_end(name, last=False)

    def init_weights(self, init_std):
        super().init_weights(init_std)
        self.q_norm.reset_parameters()
        self.k_norm.reset_parameters()

    def rotate(self, xq, xk, rope_cache):
        return apply_rotary_emb(self.q_norm(xq), self.k_norm(xk), rope_cache)


class TransformerBlock(ref.TransformerBlock):
    def __init__(self, layer_id, args: Qwen3Args):
        super().__init__(layer_id, args)
        self.attention = Attention(args)


class Qwen3Model(ref.Transformer):
    def __init__(self, args: Qwen3Args):
        super().__init__(args)
        self.freqs_cis = precompute_rope_cache(args.head_dim, args.max_seq_len, args.rope_theta)
        for layer_id in range(args.n_layers):
            self.layers[str(layer_id)] = TransformerBlock(layer_id, args)


def build_model(args: Qwen3Args, seed: int) -> Qwen3Model:
    torch.manual_seed(seed)
    model = Qwen3Model(args)
    torch.manual_seed(seed)
    model.init_weights()
    return model


def _perm(t, heads, to_titan):
    """Rows of each head between halves (HF, torchtitan's qwen3) and
    interleaved pairs (titan)."""
    rows = t.shape[0]
    d = rows // heads
    rest = t.shape[1:]
    if to_titan:   # [h, 2, d/2, ...] -> [h, d/2, 2, ...]
        return t.reshape(heads, 2, d // 2, *rest).transpose(1, 2).reshape(rows, *rest)
    return t.reshape(heads, d // 2, 2, *rest).transpose(1, 2).reshape(rows, *rest)


def layout(name, t, args: Qwen3Args, to_titan=True):
    """One tensor of a state dict in titan's layout (to_titan) or back."""
    if name.endswith("attention.wq.weight"):
        return _perm(t, args.n_heads, to_titan).contiguous()
    if name.endswith("attention.wk.weight"):
        return _perm(t, args.kv_heads, to_titan).contiguous()
    if name.endswith("attention.q_norm.weight") or name.endswith("attention.k_norm.weight"):
        return _perm(t, 1, to_titan).contiguous()
    return t


if __name__ == "__main__":
    # the layout claim, on random weights: titan's permuted layout with
    # Llama's pair RoPE gives the same logits as the public model
    torch.manual_seed(0)
    a = Qwen3Args(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=50, qk_head_dim=12,
                  hidden_dim=40, max_seq_len=16)
    m = build_model(a, 0)
    for n, p in m.named_parameters():
        if "norm" in n:
            with torch.no_grad():
                p.add_(0.1 * torch.randn_like(p))
    tok = torch.randint(0, 50, (2, 16))
    want = m(tok)
    la = ref.ModelArgs(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=50,
                       max_seq_len=16, rope_scaling=False, rope_theta=a.rope_theta)
    fc = ref.precompute_freqs_cis(ref.ModelArgs(dim=a.head_dim * a.n_heads, n_heads=a.n_heads,
                                                rope_scaling=False, rope_theta=a.rope_theta),
                                  16)
    sd = {n: layout(n, p.detach(), a) for n, p in m.named_parameters()}
    # titan's math: pair RoPE on the permuted heads
    h = sd["tok_embeddings.weight"][tok]
    for i in range(a.n_layers):
        g = lambda k: sd[f"layers.{i}.{k}.weight"]  # noqa: E731
        blk = m.layers[str(i)]
        x = blk.attention_norm(h)
        B, T, _ = x.shape
        q = (x @ g("attention.wq").t()).view(B, T, -1, a.head_dim)
        k = (x @ g("attention.wk").t()).view(B, T, -1, a.head_dim)
        v = (x @ g("attention.wv").t()).view(B, T, -1, a.head_dim)
        rms = lambda y, w: y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + a.norm_eps) * w  # noqa
        q, k = rms(q, g("attention.q_norm")), rms(k, g("attention.k_norm"))
        q, k = ref.apply_rotary_emb(q, k, fc)
        o = ref.sdpa_causal(q.transpose(1, 2), ref.repeat_kv(k, 2).transpose(1, 2),
                            ref.repeat_kv(v, 2).transpose(1, 2))
        h = h + blk.attention.wo(o.transpose(1, 2).reshape(B, T, -1))
        h = h + blk.feed_forward(blk.ffn_norm(h))
    got = m.output(m.norm(h))
    err = float((got - want).norm() / want.norm())
    print(f"titan layout vs public Qwen3: rel err {err:.2e}")
    assert err < 1e-5 and not math.isnan(err)
