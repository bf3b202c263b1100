#!/usr/bin/env python3
"""torch_train_gpu.py — the PyTorch training-throughput peer of titan-train
on one GPU (bench/train_gpu.sh): torchtitan's Llama 3 trained as torchtitan
trains it on a single device, timed step by step.

The model is the architecture of tests/ref/llama_ref.py (its ModelArgs, FFN
hidden-size formula and Llama 3.1 RoPE frequencies are imported from there),
written here again for speed the way torchtitan writes it: nn.RMSNorm,
complex RoPE in fp32 on adjacent pairs, and
F.scaled_dot_product_attention(is_causal=True, enable_gqa=True) — flash
attention on the GPU.  llama_ref.py itself spells attention out as the math
backend (a [T,T] score matrix per head), which is right for golden files and
wrong for a throughput peer.

Precision: parameters, gradients and AdamW state in fp32, forward and loss
under torch.autocast(bfloat16) — torchtitan's single-device / DDP
mixed-precision path (training.mixed_precision_param = bfloat16), the
standard single-GPU recipe; GEMMs and attention run in bf16 on tensor cores,
the loss upcasts the logits to fp32.  --precision fp32: no autocast
(TF32 off unless --allow-tf32).

The step is torchtitan's train_step: zero_grad, forward + cross-entropy
(sum over tokens / token count, fp32 logits) under autocast, backward,
clip_grad_norm_(max_norm 1.0, foreach), AdamW (fused on CUDA; lr 8e-4,
betas 0.9/0.95, eps 1e-8, weight decay 0.1 on every parameter), the
warmup-stable-decay LambdaLR (warmup 2, linear decay, llama_ref.lr_lambda).
--compile compiles every TransformerBlock with fullgraph=True and the loss
function, as torchtitan's apply_compile with compile.components = [model,
loss].  Batches are random tokens from a fixed seed, made on the host
beforehand and copied to the device inside the timed step (pinned,
non-blocking), as a data loader would hand them over.

Timing: torch.cuda.synchronize() before and after each step; the first
--warmup steps (compilation, cuBLAS/cuDNN autotuning) are not counted;
tokens/s is batch*seq over the median of the --steps timed steps.
MFU = 100 * flops_per_token * tokens/s / --peak-flops, with titan's and
torchtitan's formula (lib/model/llama3.c, torchtitan models/utils.py):
flops_per_token = 6 * (N_params - N_embedding) + 12 * L * H * head_dim * seq
(the embedding is subtracted only when it is not tied to the output);
--peak-flops defaults to 989e12, the H100/H200 SXM bf16 dense peak.

Loss curves against titan (bench/curve_gpu.sh): --init-hf DIR starts from
the weights of titan's HuggingFace export (titan-ckpt-convert --to hf,
checkpoint.last_save_in_hf; docs/formats.md): config.json is checked
against the model arguments, the safetensors are read (the safetensors
package, else tests/ref/safetensors_py.py) and the q/k rows permuted back
from HF's rotate-half halves to torchtitan's adjacent pairs (per head, HF
row i*hd/2 + j is row 2j + i).  --tokens FILE (a raw little-endian uint32
token stream, what titan-shard reads) or --shards DIR (titan's train-*.tok
shards) gives the batches titan-train's data loader makes from them with
training.shuffle false on one rank: the split is one token sequence cut
into seq+1 windows, step s row b reads window s*batch + b (inputs its first
seq ids, labels its last seq), as lib/data/loader.c (next_batch,
titan_loader_window); the stream must hold every step's windows (no
re-looping).  The JSON then also holds "grad_norms" (before clipping) and
"lrs" (each step's learning rate), step by step as "losses".

Runs on PyTorch 2.x (CUDA) and, for a logic check, on PyTorch 1.13 on the
CPU (--device cpu; no SDPA there: the math formula with repeat_interleave
for GQA; no torch.compile; no fused AdamW).

  python3 tests/ref/torch_train_gpu.py --dim 2048 --n-layers 16 --n-heads 32 \\
      --n-kv-heads 8 --vocab 128256 --ffn-dim-multiplier 1.5 --multiple-of 1024 \\
      --tie-embeddings --seq 2048 --batch 4 --steps 25 --warmup 5 --compile

Prints one line of JSON on standard output (progress on standard error):
  {"torch", "device", "device_name", "precision", "compile", "params",
   "params_embedding", "tied", "flops_per_token", "batch", "seq",
   "step_s": [...], "median_step_s", "tps", "tflops", "mfu_pct",
   "peak_flops", "peak_mem_bytes", "peak_mem_gib", "peak_reserved_bytes",
   "losses": [...], "grad_norms": [...], "lrs": [...], "final_loss"}
"""

import argparse
import contextlib
import importlib
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import llama_ref  # noqa: E402  (ModelArgs, ffn_hidden_dim, rope_freqs, lr_lambda)

H100_BF16_DENSE = 989e12


# ------------------------------------------------------------ capabilities

def _probe_sdpa():
    """(has F.scaled_dot_product_attention, accepts enable_gqa)."""
    if not hasattr(F, "scaled_dot_product_attention"):
        return False, False
    q = torch.zeros(1, 2, 3, 4)
    kv = torch.zeros(1, 1, 3, 4)
    try:
        F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        return True, True
    except TypeError:
        return True, False


HAS_SDPA, HAS_GQA = _probe_sdpa()


# ------------------------------------------------------------------- model

class RMSNormManual(nn.Module):
    """nn.RMSNorm for PyTorch < 2.4: x * rsqrt(mean(x^2) + eps) * w."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self):
        nn.init.ones_(self.weight)

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).type_as(x)


def rms_norm(dim, eps):
    if hasattr(nn, "RMSNorm"):
        return nn.RMSNorm(dim, eps=eps)
    return RMSNormManual(dim, eps)


def apply_rotary_emb(xq, xk, freqs_cis):
    """torchtitan's apply_rotary_emb: adjacent pairs (2i, 2i+1) rotated as
    complex numbers in fp32, cast back.  xq [B,T,H,D], freqs_cis [T,D/2]."""
    T = xq.shape[1]
    fc = freqs_cis[0:T].view(1, T, 1, freqs_cis.shape[-1])
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * fc).flatten(3)
    xk_out = torch.view_as_real(xk_ * fc).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def causal_attention(q, k, v, n_rep):
    """q [B,H,T,D], k/v [B,Hkv,T,D] -> [B,H,T,D]."""
    if HAS_SDPA and HAS_GQA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=n_rep > 1)
    if n_rep > 1:
        k = k.repeat_interleave(n_rep, dim=1)
        v = v.repeat_interleave(n_rep, dim=1)
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T, D = q.shape[-2], q.shape[-1]  # PyTorch 1.13: the math backend's formula
    s = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    s = s.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(s.float(), dim=-1).type_as(v), v)


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = a.n_heads, a.kv_heads, a.head_dim
        self.n_rep = self.n_heads // self.n_kv_heads
        self.wq = nn.Linear(a.dim, a.n_heads * a.head_dim, bias=False)
        self.wk = nn.Linear(a.dim, a.kv_heads * a.head_dim, bias=False)
        self.wv = nn.Linear(a.dim, a.kv_heads * a.head_dim, bias=False)
        self.wo = nn.Linear(a.n_heads * a.head_dim, a.dim, bias=False)

    def init_weights(self, std):
        for lin in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(lin.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=std)

    def forward(self, x, freqs_cis):
        bs, T, _ = x.shape
        xq = self.wq(x).view(bs, T, -1, self.head_dim)
        xk = self.wk(x).view(bs, T, -1, self.head_dim)
        xv = self.wv(x).view(bs, T, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        out = causal_attention(xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2),
                               self.n_rep)
        return self.wo(out.transpose(1, 2).contiguous().view(bs, T, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def init_weights(self, std):
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=0.02)
        for lin in (self.w2, self.w3):
            nn.init.trunc_normal_(lin.weight, mean=0.0, std=std)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id, a):
        super().__init__()
        self.attention = Attention(a)
        self.feed_forward = FeedForward(a.dim, a.ffn_hidden)
        self.attention_norm = rms_norm(a.dim, a.norm_eps)
        self.ffn_norm = rms_norm(a.dim, a.norm_eps)
        self.std = 0.02 / (2 * (layer_id + 1)) ** 0.5  # depth_init

    def init_weights(self):
        self.attention_norm.reset_parameters()
        self.ffn_norm.reset_parameters()
        self.attention.init_weights(self.std)
        self.feed_forward.init_weights(self.std)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.args = a
        self.tok_embeddings = nn.Embedding(a.vocab_size, a.dim)
        freqs = llama_ref.rope_freqs(a)  # fp32, Llama 3.1 scaling as llama_ref / torchtitan
        pos = torch.arange(a.max_seq_len, dtype=torch.float32, device="cpu")
        angles = torch.outer(pos, freqs.cpu()).float()
        fc = torch.polar(torch.ones_like(angles), angles)
        self.register_buffer("freqs_cis", fc.to(self.tok_embeddings.weight.device),
                             persistent=False)
        self.layers = nn.ModuleDict()
        for i in range(a.n_layers):
            self.layers[str(i)] = TransformerBlock(i, a)
        self.norm = rms_norm(a.dim, a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab_size, bias=False)
        if a.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def init_weights(self):
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
        return self.output(self.norm(h))


def cross_entropy_loss(pred, labels):
    """torchtitan's loss: CE summed over fp32 logits, divided by the token
    count (every label is valid here)."""
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1),
                           reduction="sum") / labels.numel()


def flops_per_token(a, nparams, seq):
    """titan_model_flops_per_token / torchtitan get_dense_model_nparams_and_flops."""
    emb = a.vocab_size * a.dim
    n = nparams - (0 if a.tie_embeddings else emb)
    return 6.0 * n + 12.0 * a.n_layers * a.n_heads * a.head_dim * seq


# ------------------------------------------- titan's weights and batches

def _die(msg):
    sys.exit(f"torch_train_gpu.py: error: {msg}")


def read_safetensors(path):
    """name -> fp32 tensor of one .safetensors file."""
    try:
        from safetensors.torch import load_file
        d = load_file(path)
    except ImportError:
        import safetensors_py
        d, _ = safetensors_py.load(path)
    return {k: v.float() for k, v in d.items()}


def load_hf(d, margs):
    """titan's HF Llama export in folder d -> torchtitan state_dict names."""
    try:
        cfg = json.load(open(os.path.join(d, "config.json")))
    except (OSError, ValueError) as e:
        _die(f"--init-hf: '{d}/config.json': {e}")
    want = {"hidden_size": margs.dim, "num_hidden_layers": margs.n_layers,
            "num_attention_heads": margs.n_heads, "num_key_value_heads": margs.kv_heads,
            "vocab_size": margs.vocab_size, "intermediate_size": margs.ffn_hidden,
            "tie_word_embeddings": margs.tie_embeddings}
    for k, v in want.items():
        if cfg.get(k) != v:
            _die(f"--init-hf: '{d}/config.json': {k} is {cfg.get(k)!r}, the model "
                 f"arguments give {v!r}")
    for k, v in (("rms_norm_eps", margs.norm_eps), ("rope_theta", margs.rope_theta)):
        if k in cfg and not math.isclose(float(cfg[k]), v, rel_tol=1e-6):
            _die(f"--init-hf: '{d}/config.json': {k} is {cfg[k]!r}, the model arguments give {v!r}")
    rs = cfg.get("rope_scaling")
    if (rs is not None) != margs.rope_scaling or (rs is not None and (
            float(rs.get("factor", 0)) != margs.rope_scaling_factor or
            float(rs.get("low_freq_factor", 0)) != margs.rope_low_freq_factor or
            float(rs.get("high_freq_factor", 0)) != margs.rope_high_freq_factor or
            int(rs.get("original_max_position_embeddings", 0)) != margs.rope_original_max_position)):
        _die(f"--init-hf: '{d}/config.json': rope_scaling {rs!r} is not the model's "
             f"(Llama 3.1 scaling {'on' if margs.rope_scaling else 'off'})")
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    hf = {}
    for f in files:
        hf.update(read_safetensors(os.path.join(d, f)))
    hd = margs.head_dim

    def unpermute(w, nh):  # HF row i*hd/2 + j -> torchtitan row 2j + i
        return w.view(nh, 2, hd // 2, w.shape[-1]).transpose(1, 2).reshape(nh * hd, w.shape[-1])

    names = {"model.embed_tokens.weight": "tok_embeddings.weight",
             "model.norm.weight": "norm.weight"}
    if not margs.tie_embeddings:
        names["lm_head.weight"] = "output.weight"
    sub = {"self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk",
           "self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo",
           "mlp.gate_proj": "feed_forward.w1", "mlp.up_proj": "feed_forward.w3",
           "mlp.down_proj": "feed_forward.w2", "input_layernorm": "attention_norm",
           "post_attention_layernorm": "ffn_norm"}
    for i in range(margs.n_layers):
        for h, t in sub.items():
            names[f"model.layers.{i}.{h}.weight"] = f"layers.{i}.{t}.weight"
    missing = sorted(set(names) - set(hf))
    extra = sorted(set(hf) - set(names))
    if missing or extra:
        _die(f"--init-hf: '{d}': tensors missing {missing[:4]}, unexpected {extra[:4]}")
    sd = {}
    for h, t in names.items():
        w = hf[h]
        if h.endswith("q_proj.weight"):
            w = unpermute(w, margs.n_heads)
        elif h.endswith("k_proj.weight"):
            w = unpermute(w, margs.kv_heads)
        sd[t] = w
    return sd


def read_tokens(path):
    """A raw little-endian uint32 token stream -> int64 tensor."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) % 4:
        _die(f"--tokens: '{path}': {len(raw)} bytes, not a multiple of 4 (truncated stream?)")
    t = torch.frombuffer(bytearray(raw), dtype=torch.int32)
    if sys.byteorder != "little":
        t = t.byteswap()
    return t.long() & 0xFFFFFFFF


def read_shards(d):
    """The train split of titan's shards (docs/formats.md "Shard") -> int64
    tensor, the shards concatenated in index order."""
    import struct
    names = sorted(n for n in os.listdir(d) if n.startswith("train-") and n.endswith(".tok"))
    if not names:
        _die(f"--shards: '{d}': no train-*.tok shard")
    parts = []
    for i, n in enumerate(sorted(names, key=lambda n: int(n[6:-4]))):
        with open(os.path.join(d, n), "rb") as f:
            raw = f.read()
        if raw[:8] != b"TITANTOK":
            _die(f"--shards: '{d}/{n}': not a titan shard")
        tb, _, hb, nt = struct.unpack_from("<IIIQ", raw, 12)
        idx, = struct.unpack_from("<Q", raw, 72)
        if idx != i or len(raw) != hb + nt * tb or tb not in (2, 4):
            _die(f"--shards: '{d}/{n}': index {idx} (expected {i}), size {len(raw)}")
        dt = torch.int16 if tb == 2 else torch.int32
        t = torch.frombuffer(bytearray(raw[hb:]), dtype=dt).long()
        parts.append(t & (0xFFFF if tb == 2 else 0xFFFFFFFF))
    return torch.cat(parts)


def titan_batches(stream, n_steps, batch, seq):
    """titan-train's batches from a split's token sequence (shuffle off,
    one rank): step s row b is window s*batch + b of seq+1 tokens."""
    need = n_steps * batch * (seq + 1)
    if stream.numel() < need:
        _die(f"the token stream holds {stream.numel()} ids, {n_steps} steps of "
             f"{batch}x({seq}+1) need {need} (titan would re-loop)")
    return list(stream[:need].view(n_steps, batch, seq + 1).unbind(0))


# ---------------------------------------------------------------- training

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--n-layers", type=int, default=6)
    ap.add_argument("--n-heads", type=int, default=16)
    ap.add_argument("--n-kv-heads", type=int, default=None, help="default: --n-heads (MHA)")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--ffn-dim-multiplier", type=float, default=None)
    ap.add_argument("--multiple-of", type=int, default=256)
    ap.add_argument("--norm-eps", type=float, default=1e-5)
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    ap.add_argument("--tie-embeddings", action="store_true",
                    help="output shares the embedding (torchtitan's 1B/3B)")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=25, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile each TransformerBlock (fullgraph) and the loss")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                    help="bf16: fp32 parameters + autocast(bfloat16); fp32: no autocast")
    ap.add_argument("--allow-tf32", action="store_true", help="TF32 matmuls in fp32 mode")
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--peak-flops", type=float, default=H100_BF16_DENSE,
                    help="peak FLOP/s for MFU (default 989e12: H100/H200 bf16 dense)")
    ap.add_argument("--lr", type=float, default=8e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--init-hf", metavar="DIR",
                    help="initial weights from titan's HF export (config.json + safetensors)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--tokens", metavar="FILE",
                     help="batches from a raw uint32 token stream, in titan-train's order")
    src.add_argument("--shards", metavar="DIR",
                     help="batches from titan's train-*.tok shards, in titan-train's order")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.batch < 1 or a.seq < 1:
        ap.error("--steps, --batch and --seq must be >= 1, --warmup >= 0")

    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_train_gpu.py: error: --device cuda but torch.cuda.is_available() is False")
    if a.compile and not hasattr(torch, "compile"):
        sys.exit(f"torch_train_gpu.py: error: --compile needs PyTorch 2 (this is {torch.__version__})")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and a.allow_tf32:  # PyTorch's default is off
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    margs = llama_ref.ModelArgs(dim=a.dim, n_layers=a.n_layers, n_heads=a.n_heads,
                                n_kv_heads=a.n_kv_heads, vocab_size=a.vocab,
                                multiple_of=a.multiple_of,
                                ffn_dim_multiplier=a.ffn_dim_multiplier, norm_eps=a.norm_eps,
                                rope_theta=a.rope_theta, max_seq_len=a.seq,
                                tie_embeddings=a.tie_embeddings)
    if a.dim % a.n_heads or a.n_heads % margs.kv_heads:
        ap.error("--n-heads must divide --dim and --n-kv-heads must divide --n-heads")

    # build and initialise on the device (PyTorch 2's device context; 1.13: host then .to)
    torch.manual_seed(a.seed)
    # (torch.device is a context manager from PyTorch 2.0, when torch.compile came)
    with dev if (cuda and hasattr(torch, "compile")) else contextlib.nullcontext():
        model = Transformer(margs)
        torch.manual_seed(a.seed)
        if not a.init_hf:
            model.init_weights()
    model = model.to(dev)
    if a.init_hf:
        sd = load_hf(a.init_hf, margs)
        with torch.no_grad():
            for name, p in model.named_parameters():  # a tied matrix once
                p.copy_(sd[name].to(dev))
        del sd
    model.train()
    nparams = sum(p.numel() for p in model.parameters())  # a tied matrix once
    fpt = flops_per_token(margs, nparams, a.seq)

    loss_fn = cross_entropy_loss
    if a.compile:
        # one compiled code object serves every block (PyTorch >= 2.5 inlines
        # nn.Modules); older versions recompile per block: leave them room
        dcfg = importlib.import_module("torch._dynamo").config
        for key in ("recompile_limit", "cache_size_limit"):
            if hasattr(dcfg, key):
                setattr(dcfg, key, max(64, getattr(dcfg, key)))
        for k, block in list(model.layers.items()):
            model.layers[k] = torch.compile(block, fullgraph=True)
        loss_fn = torch.compile(cross_entropy_loss)

    params = [p for p in model.parameters()]
    kw = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    try:
        opt = torch.optim.AdamW(params, fused=True, **kw) if cuda else \
            torch.optim.AdamW(params, foreach=True, **kw)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(params, **kw)
    total = a.warmup + a.steps
    sched_args = llama_ref.ScheduleArgs(warmup_steps=2, total_steps=total)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: llama_ref.lr_lambda(s, sched_args))

    def clip(max_norm):
        try:
            return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        except TypeError:  # PyTorch < 2.0
            return torch.nn.utils.clip_grad_norm_(params, max_norm)

    def amp():
        if a.precision == "bf16":
            return torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def train_step(inp, lab):
        opt.zero_grad(set_to_none=True)
        with amp():
            pred = model(inp)
            loss = loss_fn(pred, lab)
        del pred
        loss.backward()
        gn = clip(1.0)
        opt.step()
        sched.step()
        return loss.detach(), gn

    if a.tokens or a.shards:
        stream = read_tokens(a.tokens) if a.tokens else read_shards(a.shards)
        batches = [t.clone() for t in titan_batches(stream, total, a.batch, a.seq)]
        del stream
        if int(max(int(t.max()) for t in batches)) >= a.vocab:
            _die(f"a token id is >= --vocab {a.vocab}")
        if cuda:
            batches = [t.pin_memory() for t in batches]
    else:
        g = torch.Generator().manual_seed(a.seed)
        batches = []
        for _ in range(total):
            t = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g, dtype=torch.int64)
            if cuda:
                t = t.pin_memory()
            batches.append(t)

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    times, losses, gnorms, lrs = [], [], [], []
    for s in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        sync()
        t0 = time.perf_counter()
        toks = batches[s].to(dev, non_blocking=True)
        loss, gn = train_step(toks[:, :-1].contiguous(), toks[:, 1:].contiguous())
        sync()
        dt = time.perf_counter() - t0
        losses.append(float(loss))
        gnorms.append(float(gn))
        if s >= a.warmup:
            times.append(dt)
        print(f"step {s + 1:3d}  loss {losses[-1]:8.5f}  grad_norm {float(gn):7.4f}  "
              f"{dt * 1e3:9.2f} ms{'  (warm-up)' if s < a.warmup else ''}",
              file=sys.stderr, flush=True)

    med = statistics.median(times)
    tps = a.batch * a.seq / med
    if cuda:
        peak = torch.cuda.max_memory_allocated(dev)
        reserved = torch.cuda.max_memory_reserved(dev)
        name = torch.cuda.get_device_name(dev)
    else:
        peak = reserved = None
        name = "cpu (peak memory not measured)"
    if not all(math.isfinite(x) for x in losses):
        sys.exit("torch_train_gpu.py: error: non-finite loss")
    print(json.dumps({
        "torch": torch.__version__, "device": dev.type, "device_name": name,
        "precision": "fp32 params + autocast bf16" if a.precision == "bf16" else "fp32",
        "compile": a.compile, "sdpa": HAS_SDPA, "enable_gqa": HAS_GQA,
        "params": nparams, "params_embedding": margs.vocab_size * margs.dim,
        "tied": a.tie_embeddings, "ffn_hidden": margs.ffn_hidden,
        "flops_per_token": fpt, "batch": a.batch, "seq": a.seq,
        "warmup": a.warmup, "step_s": [round(x, 6) for x in times],
        "median_step_s": med, "tps": tps, "tflops": fpt * tps / 1e12,
        "mfu_pct": 100.0 * fpt * tps / a.peak_flops, "peak_flops": a.peak_flops,
        "peak_mem_bytes": peak, "peak_mem_gib": None if peak is None else peak / 2**30,
        "peak_reserved_bytes": reserved,
        "losses": losses, "grad_norms": gnorms, "lrs": lrs,
        "final_loss": losses[-1]}))


if __name__ == "__main__":
    main()
