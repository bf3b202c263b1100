#!/usr/bin/python3
"""llama_ref.py — an independent PyTorch re-implementation of torchtitan's
Llama 3 pre-training step, the reference titan's C model is checked against.

It mirrors torchtitan's TOML-era code (github.com/pytorch/torchtitan: the model
and its weight init, files below) without importing torchtitan:

  models/llama3/model/model.py   precompute_freqs_cis (+ Llama 3.1 apply_scaling),
                                 apply_rotary_emb (adjacent pairs, complex),
                                 repeat_kv, Attention (causal SDPA), FeedForward
                                 (SwiGLU hidden-dim formula), TransformerBlock
                                 (pre-norm), Transformer, init_weights
  components/loss.py             cross_entropy(sum, ignore_index=-100) in fp32
  components/lr_scheduler.py     linear_warmup_stable_decay as a LambdaLR
  components/optimizer.py        torch.optim.AdamW(betas 0.9/0.95, eps 1e-8, wd 0.1)
  train.py                       train_step: global valid-token count, gradient
                                 accumulation, clip_grad_norm_ (pre-clip norm
                                 logged), optimizer step, scheduler step

Written for Debian's python3-torch (1.13, CPU), which lacks nn.RMSNorm and
F.scaled_dot_product_attention: RMSNorm and attention are written out (the
math SDPA backend's formula).  Every module works in float32 and float64
(float64 for the gradcheck in make_golden.py --selfcheck).

Parameter names are torchtitan's (state_dict keys): tok_embeddings.weight,
layers.{i}.attention.{wq,wk,wv,wo}.weight, layers.{i}.feed_forward.{w1,w2,w3}
.weight, layers.{i}.attention_norm.weight, layers.{i}.ffn_norm.weight,
norm.weight, output.weight (absent when the embeddings are tied).
"""

import math
from dataclasses import dataclass, field, asdict
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_INDEX = -100


# --------------------------------------------------------------------- args

@dataclass
class ModelArgs:
    """torchtitan's TransformerModelArgs (the fields this model uses)."""
    dim: int = 256
    n_layers: int = 6
    n_heads: int = 16
    n_kv_heads: Optional[int] = None      # None: MHA
    vocab_size: int = 2048
    multiple_of: int = 256
    ffn_dim_multiplier: Optional[float] = None
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    # Llama 3.1 RoPE scaling (torchtitan RoPEScalingArgs defaults); off: None
    rope_scaling: bool = True
    rope_scaling_factor: float = 8.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_position: int = 8192
    max_seq_len: int = 2048               # freqs_cis length (= training.seq_len)
    depth_init: bool = True
    tie_embeddings: bool = False          # output shares tok_embeddings (1B/3B)

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def ffn_hidden(self) -> int:
        return ffn_hidden_dim(self.dim, self.multiple_of, self.ffn_dim_multiplier)


def ffn_hidden_dim(dim, multiple_of, ffn_dim_multiplier=None):
    """FeedForward.__init__: int(2·(4·dim)/3), ×multiplier, round up."""
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


# --------------------------------------------------------------------- RoPE

def rope_freqs(args: ModelArgs) -> torch.Tensor:
    """The per-pair angular frequencies [head_dim/2] (fp32), after the
    Llama 3.1 scaling when enabled: torchtitan's precompute_freqs_cis and
    apply_scaling, computed in float32 exactly as there."""
    d = args.head_dim
    freqs = 1.0 / (args.rope_theta ** (torch.arange(0, d, 2)[: (d // 2)].float() / d))
    if args.rope_scaling:
        low_wl = args.rope_original_max_position / args.rope_low_freq_factor
        high_wl = args.rope_original_max_position / args.rope_high_freq_factor
        wavelen = 2 * math.pi / freqs
        new_freqs = torch.where(wavelen > low_wl, freqs / args.rope_scaling_factor, freqs)
        smooth = (args.rope_original_max_position / wavelen - args.rope_low_freq_factor) / (
            args.rope_high_freq_factor - args.rope_low_freq_factor)
        freqs = torch.where((wavelen >= high_wl) & (wavelen <= low_wl),
                            (1 - smooth) * new_freqs / args.rope_scaling_factor + smooth * new_freqs,
                            new_freqs)
    return freqs


def precompute_freqs_cis(args: ModelArgs, end: int) -> torch.Tensor:
    """[end, head_dim/2] complex64: polar(1, outer(t, freqs)) in fp32."""
    freqs = rope_freqs(args)
    t = torch.arange(end, device=freqs.device)
    angles = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(angles), angles)


def apply_rotary_emb(xq, xk, freqs_cis):
    """Rotate adjacent pairs (2i, 2i+1) of the last dim as complex numbers.
    xq [B,T,H,D], xk [B,T,Hkv,D], freqs_cis [T, D/2].  torchtitan computes in
    float32 (`.float()`) and casts back; float64 inputs stay float64 here so
    the gradcheck sees one precision (freqs_cis is promoted to complex128,
    its values still the fp32 angles)."""
    work = torch.promote_types(xq.dtype, torch.float32)
    cdt = torch.complex128 if work == torch.float64 else torch.complex64
    fc = freqs_cis.to(cdt)
    T = xq.shape[1]
    fc = fc[0:T].view(1, T, 1, fc.shape[-1])
    xq_ = torch.view_as_complex(xq.to(work).reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.to(work).reshape(*xk.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * fc).flatten(3)
    xk_out = torch.view_as_real(xk_ * fc).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    """torch.repeat_interleave(x, dim=2, repeats=n_rep): kv head j serves
    query heads j·n_rep .. j·n_rep + n_rep − 1."""
    bs, slen, n_kv, hd = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv, n_rep, hd).reshape(bs, slen, n_kv * n_rep, hd)


# ------------------------------------------------------------------ modules

class RMSNorm(nn.Module):
    """nn.RMSNorm(dim, eps) with elementwise weight: x·rsqrt(mean(x²)+eps)·w,
    computed in the input's precision (at least fp32)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self):
        nn.init.ones_(self.weight)

    def forward(self, x):
        work = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(work)
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.to(work)).type_as(x)


def sdpa_causal(q, k, v):
    """F.scaled_dot_product_attention(q, k, v, is_causal=True), math backend:
    softmax(q·kᵀ/√D + causal −inf mask)·v.  q, k, v [B,H,T,D]."""
    T, D = q.shape[-2], q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.n_kv_heads = args.kv_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.head_dim = args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def init_weights(self, init_std):
        for linear in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)

    def rotate(self, xq, xk, freqs_cis):
        """RoPE on q and k [B,T,heads,D] (qwen3_ref.py's Attention also
        norms them first)."""
        return apply_rotary_emb(xq, xk, freqs_cis)

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bs, seqlen, -1, self.head_dim)
        xk = xk.view(bs, seqlen, -1, self.head_dim)
        xv = xv.view(bs, seqlen, -1, self.head_dim)
        xq, xk = self.rotate(xq, xk, freqs_cis)
        keys = repeat_kv(xk, self.n_rep)
        values = repeat_kv(xv, self.n_rep)
        out = sdpa_causal(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2))
        out = out.transpose(1, 2).contiguous().view(bs, seqlen, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def init_weights(self, init_std):
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=0.02)
        for linear in (self.w2, self.w3):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=init_std)


class TransformerBlock(nn.Module):
    def __init__(self, layer_id, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, args.ffn_hidden)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        if args.depth_init:
            self.weight_init_std = 0.02 / (2 * (layer_id + 1)) ** 0.5
        else:
            self.weight_init_std = 0.02 / (2 * args.n_layers) ** 0.5

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))

    def init_weights(self):
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.feed_forward.init_weights(self.weight_init_std)


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        # torchtitan registers it as a non-persistent buffer; a plain
        # attribute here, so that Module.to(dtype) cannot cast the complex
        # table to real
        self.freqs_cis = precompute_freqs_cis(args, args.max_seq_len)
        self.layers = nn.ModuleDict()
        for layer_id in range(args.n_layers):
            self.layers[str(layer_id)] = TransformerBlock(layer_id, args)
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def init_weights(self):
        """torchtitan's Transformer.init_weights, in its order (which fixes
        the RNG stream): embedding N(0,1); per layer wq, wk, wv (0.02), wo
        (depth std), w1 (0.02), w2, w3 (depth std), all trunc_normal with
        absolute cutoffs ±2; norms 1; output trunc_normal(dim^-0.5, ±3σ).
        Tied (torchtitan HEAD, 1B/3B): the embedding init is skipped and the
        shared matrix gets the output init at the output's turn."""
        if not self.args.tie_embeddings:
            nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers.values():
            layer.init_weights()
        self.norm.reset_parameters()
        std = self.args.dim ** -0.5
        nn.init.trunc_normal_(self.output.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        h = self.norm(h)
        return self.output(h)


def build_model(args: ModelArgs, seed: int, dtype=torch.float32) -> Transformer:
    """A model initialised as torchtitan does, from torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    model = Transformer(args)
    torch.manual_seed(seed)
    model.init_weights()
    if dtype != torch.float32:
        model = model.to(dtype)
    return model


def param_names(model: Transformer):
    """Unique parameters in module order (a tied output is not listed)."""
    return [n for n, _ in model.named_parameters()]


# --------------------------------------------------------------------- loss

def cross_entropy_sum(logits, labels):
    """torchtitan's loss: CE over flattened tokens, fp32 logits, summed,
    ignore_index −100 (the caller divides by the global valid-token count)."""
    work = torch.promote_types(logits.dtype, torch.float32)
    return F.cross_entropy(logits.flatten(0, 1).to(work), labels.flatten(0, 1),
                           reduction="sum", ignore_index=IGNORE_INDEX)


# ------------------------------------------------------------ LR schedule

@dataclass
class ScheduleArgs:
    warmup_steps: int = 200
    total_steps: int = 10          # lr_scheduler.total_steps or training.steps
    decay_ratio: Optional[float] = None
    decay_type: str = "linear"     # linear, sqrt, cosine
    min_lr_factor: float = 0.0


def schedule_phases(s: ScheduleArgs):
    """build_lr_schedulers: (warmup, stable, decay) with torchtitan's clamps
    and the virtual last step (stable = total + 1 − warmup − decay)."""
    total = s.total_steps
    warmup = min(int(s.warmup_steps), total)
    if s.decay_ratio is not None:
        decay = round(total * s.decay_ratio)
        if warmup + decay > total:
            decay = total - warmup
    else:
        decay = total - warmup
    stable = total + 1 - warmup - decay
    return warmup, stable, decay


def lr_lambda(current_step: int, s: ScheduleArgs) -> float:
    """linear_warmup_stable_decay (LambdaLR multiplier, 0-based step)."""
    warmup, stable, decay = schedule_phases(s)
    if current_step < warmup:
        return float((current_step + 1) / warmup)
    if current_step < warmup + stable:
        return 1.0
    progress = float(current_step + 1 - (warmup + stable)) / decay
    if s.decay_type == "linear":
        f = 1 - progress
    elif s.decay_type == "sqrt":
        f = 1 - math.sqrt(progress)
    elif s.decay_type == "cosine":
        f = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"unknown decay_type {s.decay_type!r}")
    return s.min_lr_factor + (1 - s.min_lr_factor) * f


# ----------------------------------------------------------------- training

@dataclass
class TrainArgs:
    lr: float = 8e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    max_norm: float = 1.0
    schedule: ScheduleArgs = field(default_factory=ScheduleArgs)


@dataclass
class StepRecord:
    loss: float            # sum over microbatches of loss_sum / global_valid
    grad_norm: float       # pre-clip total L2 norm
    lr: float              # lr the step trained with
    valid_tokens: int      # global count of labels != −100
    loss_sums: list        # per-microbatch CE sums (fp32)


class Trainer:
    """torchtitan's train loop on one rank: AdamW (for-loop implementation)
    + LambdaLR, gradient accumulation over microbatches, clip_grad_norm_."""

    def __init__(self, model: Transformer, t: TrainArgs):
        self.model = model
        self.t = t
        self.params = list(model.parameters())
        self.opt = torch.optim.AdamW(self.params, lr=t.lr, betas=(t.beta1, t.beta2), eps=t.eps,
                                     weight_decay=t.weight_decay, foreach=False)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda step: lr_lambda(step, t.schedule))
        self.on_backward = None  # hook(step, grads) called before clipping

    def step(self, step: int, microbatches, keep_logits=False):
        """One training step over [(inputs [B,T], labels [B,T]), ...]."""
        self.opt.zero_grad()
        lr = self.opt.param_groups[0]["lr"]
        valid = int(sum(int((lab != IGNORE_INDEX).sum()) for _, lab in microbatches))
        losses, sums, logits_out = [], [], []
        for inp, lab in microbatches:
            logits = self.model(inp)
            loss_sum = cross_entropy_sum(logits, lab)
            loss = loss_sum / valid
            loss.backward()
            losses.append(loss.detach())
            sums.append(float(loss_sum.detach()))
            if keep_logits:
                logits_out.append(logits.detach().clone())
        if self.on_backward is not None:
            self.on_backward(step, self)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.t.max_norm)
        self.opt.step()
        self.sched.step()
        rec = StepRecord(loss=float(torch.sum(torch.stack(losses))), grad_norm=float(grad_norm),
                         lr=lr, valid_tokens=valid, loss_sums=sums)
        return rec, logits_out


def windows(tokens, seq_len, n):
    """torchtitan's packing: window i = tokens[i(T+1) : (i+1)(T+1)];
    input = first T, labels = last T."""
    out = []
    for i in range(n):
        w = tokens[i * (seq_len + 1):(i + 1) * (seq_len + 1)]
        out.append((w[:-1], w[1:]))
    return out


def args_dict(a) -> dict:
    return asdict(a)
