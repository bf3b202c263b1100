#!/usr/bin/python3
"""make_golden.py — write the golden files titan's C model is checked
against (tests/fixtures/golden/<config>.safetensors + <config>.json), the
small Python-written safetensors fixture the C reader is tested on
(tests/fixtures/safetensors/python.safetensors), or check the reference.

  /usr/bin/python3 tests/ref/make_golden.py               # write all
  /usr/bin/python3 tests/ref/make_golden.py --check       # regenerate to a temp dir, compare (bytes, or 1e-4 across CPUs)
  /usr/bin/python3 tests/ref/make_golden.py --selfcheck   # verify llama_ref.py itself
  /usr/bin/python3 tests/ref/make_golden.py --config A --steps 1 --out /tmp/g   # ad hoc

See tests/ref/README.md for the file layout.  Deterministic: one thread,
torch.use_deterministic_algorithms(True), fixed seeds; the bytes depend on
the torch version (Debian's 1.13.1 made the committed files).
"""

import argparse
import filecmp
import json
import math
import os
import random
import sys
import tempfile
import time

import torch

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref            # noqa: E402
from markov_tokens import markov_tokens  # noqa: E402
import qwen3_ref                   # noqa: E402
import safetensors_py as st        # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GOLDEN_DIR = os.path.join(ROOT, "tests", "fixtures", "golden")
ST_FIXTURE = os.path.join(ROOT, "tests", "fixtures", "safetensors", "python.safetensors")
FORMAT_VERSION = "1"
REGEN = "/usr/bin/python3 tests/ref/make_golden.py"

# The configurations.  Sizes are kept small so the committed files stay
# well under 1 MB together (weights are stored three times: init, grad, final).
CONFIGS = {
    # GQA (2 kv heads for 4 heads), Llama 3.1 RoPE scaling, untied output,
    # one microbatch, WSD with linear decay over half the steps.
    "A": dict(model=dict(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=97,
                         multiple_of=32, rope_scaling=True, tie_embeddings=False),
              seq_len=16, local_batch_size=2, grad_accum=1, steps=10, seed=42, data_seed=1,
              lr=1e-3, warmup_steps=2, decay_ratio=0.5, decay_type="linear", min_lr_factor=0.0,
              padding=False),
    # Gradient accumulation over 2 microbatches with padding (labels -100:
    # tails of rows, a whole row in step 1), GQA 4:1, sqrt decay.
    "B": dict(model=dict(dim=16, n_layers=2, n_heads=4, n_kv_heads=1, vocab_size=61,
                         multiple_of=16, rope_scaling=True, tie_embeddings=False),
              seq_len=16, local_batch_size=2, grad_accum=2, steps=10, seed=7, data_seed=2,
              lr=2e-3, warmup_steps=3, decay_ratio=0.8, decay_type="sqrt", min_lr_factor=0.0,
              padding=True),
    # MHA, no RoPE scaling, tied embeddings (1B/3B style), cosine decay
    # straight after warmup down to min_lr_factor 0.1.
    # head_dim 6: an odd number of rotary pairs.
    "C": dict(model=dict(dim=24, n_layers=2, n_heads=4, n_kv_heads=None, vocab_size=89,
                         multiple_of=32, rope_scaling=False, tie_embeddings=True),
              seq_len=16, local_batch_size=2, grad_accum=1, steps=10, seed=1234, data_seed=3,
              lr=1e-3, warmup_steps=2, decay_ratio=None, decay_type="cosine", min_lr_factor=0.1,
              padding=False),
    # Qwen3 dense (qwen3_ref.py): QK-norm, head_dim 12 apart from dim / n_heads
    # (32 / 4 = 8), hidden_dim given, θ 1e6, eps 1e-6, no RoPE scaling;
    # 12 steps.  Q untied with GQA 2:1 and 2 microbatches, R tied.
    "Q": dict(family="qwen3",
              model=dict(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=97,
                         qk_head_dim=12, hidden_dim=40, tie_embeddings=False),
              seq_len=16, local_batch_size=2, grad_accum=2, steps=12, seed=11, data_seed=4,
              lr=2e-3, warmup_steps=2, decay_ratio=0.5, decay_type="linear", min_lr_factor=0.0,
              padding=False),
    "R": dict(family="qwen3",
              model=dict(dim=24, n_layers=2, n_heads=4, n_kv_heads=4, vocab_size=89,
                         qk_head_dim=10, hidden_dim=48, tie_embeddings=True),
              seq_len=16, local_batch_size=2, grad_accum=1, steps=12, seed=5, data_seed=6,
              lr=2e-3, warmup_steps=2, decay_ratio=None, decay_type="cosine", min_lr_factor=0.1,
              padding=False),
}


def is_qwen3(c):
    return c.get("family") == "qwen3"


def setup_determinism():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)


def model_args(c) -> ref.ModelArgs:
    if is_qwen3(c):
        return qwen3_ref.Qwen3Args(max_seq_len=c["seq_len"], **c["model"])
    return ref.ModelArgs(max_seq_len=c["seq_len"], **c["model"])


def train_args(c, steps) -> ref.TrainArgs:
    return ref.TrainArgs(lr=c["lr"], schedule=ref.ScheduleArgs(
        warmup_steps=c["warmup_steps"], total_steps=steps, decay_ratio=c["decay_ratio"],
        decay_type=c["decay_type"], min_lr_factor=c["min_lr_factor"]))


# --------------------------------------------------------------------- data

def make_tokens(n, vocab, seed):
    """The reference tests' token stream (markov_tokens.py)."""
    return list(markov_tokens(n, vocab, seed))


def make_batches(c, steps):
    """tokens [W·(T+1)], inputs/labels [steps, M, B, T] (int64), windows
    taken in order: step s, microbatch m, row b uses window (s·M + m)·B + b."""
    T, B, M = c["seq_len"], c["local_batch_size"], c["grad_accum"]
    n_win = steps * M * B
    toks = torch.tensor(make_tokens(n_win * (T + 1), c["model"]["vocab_size"], c["data_seed"]),
                        dtype=torch.int64)
    w = toks.view(n_win, T + 1)
    inputs = w[:, :-1].reshape(steps, M, B, T).clone()
    labels = w[:, 1:].reshape(steps, M, B, T).clone()
    if c["padding"]:
        rng = random.Random(c["data_seed"] + 1000)
        for s in range(steps):
            for m in range(M):
                for b in range(B):
                    k = rng.choice([0, 0, 2, 5, 11])
                    if k:
                        labels[s, m, b, T - k:] = ref.IGNORE_INDEX
        labels[0, 1, 0, :] = ref.IGNORE_INDEX        # a fully padded row
        labels[0, 0, 1, 3] = ref.IGNORE_INDEX        # a hole inside a row
    return toks, inputs, labels


# ---------------------------------------------------------------- metadata

def fmt(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def config_metadata(name, c, steps):
    a = model_args(c)
    s = train_args(c, steps)
    warmup, stable, decay = ref.schedule_phases(s.schedule)
    m = {
        **({"model.name": "qwen3"} if is_qwen3(c) else {}),
        "format": "titan-golden",
        "format_version": FORMAT_VERSION,
        "golden.config": name,
        "golden.generator": "tests/ref/make_golden.py (tests/ref/%s)" % ("qwen3_ref.py" if is_qwen3(c) else "llama_ref.py"),
        "golden.regenerate": REGEN,
        "golden.torch_version": torch.__version__,
        "model.flavor": "custom",
        "model.dim": fmt(a.dim),
        **({"model.head_dim": fmt(a.head_dim), "model.hidden_dim": fmt(a.ffn_hidden)}
           if is_qwen3(c) else {}),
        "model.n_layers": fmt(a.n_layers),
        "model.n_heads": fmt(a.n_heads),
        "model.n_kv_heads": fmt(a.kv_heads),
        "model.vocab_size": fmt(a.vocab_size),
        "model.multiple_of": fmt(a.multiple_of),
        "model.ffn_dim_multiplier": fmt(a.ffn_dim_multiplier),
        "model.norm_eps": fmt(a.norm_eps),
        "model.rope_theta": fmt(a.rope_theta),
        "model.rope_scaling": fmt(a.rope_scaling),
        "model.rope_scaling_factor": fmt(a.rope_scaling_factor),
        "model.rope_low_freq_factor": fmt(a.rope_low_freq_factor),
        "model.rope_high_freq_factor": fmt(a.rope_high_freq_factor),
        "model.rope_original_max_position": fmt(a.rope_original_max_position),
        "model.tie_word_embeddings": fmt(a.tie_embeddings),
        "model.depth_init": fmt(a.depth_init),
        "derived.head_dim": fmt(a.head_dim),
        "derived.ffn_hidden": fmt(a.ffn_hidden),
        "derived.grad_accum_steps": fmt(c["grad_accum"]),
        "derived.warmup": fmt(warmup),
        "derived.stable": fmt(stable),
        "derived.decay": fmt(decay),
        "optimizer.name": "AdamW",
        "optimizer.implementation": "for-loop",
        "optimizer.lr": fmt(s.lr),
        "optimizer.beta1": fmt(s.beta1),
        "optimizer.beta2": fmt(s.beta2),
        "optimizer.eps": fmt(s.eps),
        "optimizer.weight_decay": fmt(s.weight_decay),
        "lr_scheduler.warmup_steps": fmt(c["warmup_steps"]),
        "lr_scheduler.decay_ratio": fmt(c["decay_ratio"]),
        "lr_scheduler.decay_type": c["decay_type"],
        "lr_scheduler.min_lr_factor": fmt(c["min_lr_factor"]),
        "training.steps": fmt(steps),
        "training.seq_len": fmt(c["seq_len"]),
        "training.local_batch_size": fmt(c["local_batch_size"]),
        "training.global_batch_size": fmt(c["local_batch_size"] * c["grad_accum"]),
        "training.max_norm": fmt(s.max_norm),
        "training.seed": fmt(c["seed"]),
        "data.seed": fmt(c["data_seed"]),
        "data.padding": fmt(c["padding"]),
    }
    return m


# ----------------------------------------------------------------- golden

def run_config(c, steps, keep_grads=True):
    """Train `steps` steps; returns everything the golden file holds."""
    a = model_args(c)
    model = (qwen3_ref.build_model if is_qwen3(c) else ref.build_model)(a, c["seed"])
    names = ref.param_names(model)
    # tensors in titan's layout (qwen3: wq/wk/q_norm/k_norm rows interleaved)
    lay = (lambda n, t: qwen3_ref.layout(n, t, a)) if is_qwen3(c) else (lambda n, t: t)
    init = {n: lay(n, p.detach().clone()) for n, p in model.named_parameters()}
    toks, inputs, labels = make_batches(c, steps)
    tr = ref.Trainer(model, train_args(c, steps))
    grads = {}

    def grab(step, trainer):
        if step == 1 and keep_grads:
            for n, p in trainer.model.named_parameters():
                grads[n] = lay(n, p.grad.detach().clone())

    tr.on_backward = grab
    recs, logits1 = [], None
    for s in range(steps):
        mbs = [(inputs[s, m], labels[s, m]) for m in range(c["grad_accum"])]
        rec, lg = tr.step(s + 1, mbs, keep_logits=(s == 0))
        if s == 0:
            logits1 = torch.stack(lg)
        recs.append(rec)
    final = {n: lay(n, p.detach().clone()) for n, p in model.named_parameters()}
    return dict(args=a, names=names, init=init, grads=grads, final=final, tokens=toks,
                inputs=inputs, labels=labels, logits=logits1, recs=recs)


def write_golden(name, c, steps, out_dir):
    t0 = time.time()
    r = run_config(c, steps)
    a = r["args"]
    recs = r["recs"]
    meta = config_metadata(name, c, steps)
    meta["golden.params"] = json.dumps(r["names"])
    i32 = torch.int32
    tensors = [
        ("tokens", r["tokens"].to(i32)),
        ("inputs", r["inputs"].to(i32)),
        ("labels", r["labels"].to(i32)),
        ("rope.freqs", ref.rope_freqs(ref.ModelArgs(dim=a.head_dim, n_heads=1,
                                                    rope_theta=a.rope_theta,
                                                    rope_scaling=a.rope_scaling))
         if is_qwen3(c) else ref.rope_freqs(a)),
    ]
    tensors += [(n, r["init"][n]) for n in r["names"]]
    tensors += [("logits", r["logits"])]
    tensors += [("step1.loss_sums", torch.tensor([rec for rec in recs[0].loss_sums],
                                                 dtype=torch.float32))]
    tensors += [("grad." + n, r["grads"][n]) for n in r["names"]]
    tensors += [
        ("losses", torch.tensor([x.loss for x in recs], dtype=torch.float32)),
        ("grad_norms", torch.tensor([x.grad_norm for x in recs], dtype=torch.float32)),
        ("lrs", torch.tensor([x.lr for x in recs], dtype=torch.float64)),
        ("valid_tokens", torch.tensor([x.valid_tokens for x in recs], dtype=i32)),
    ]
    tensors += [("final." + n, r["final"][n]) for n in r["names"]]
    for n, t in tensors:
        assert t.dtype in (torch.float32, torch.float64, torch.int32), n
    path = os.path.join(out_dir, f"{name}.safetensors")
    size = st.save(path, tensors, meta)

    summary = {
        "config": name,
        "file": f"{name}.safetensors",
        "regenerate": REGEN,
        "torch_version": torch.__version__,
        "metadata": meta,
        "n_params": sum(r["init"][n].numel() for n in r["names"]),
        "ln_vocab": math.log(a.vocab_size),
        "step1_loss": recs[0].loss,
        "losses": [x.loss for x in recs],
        "grad_norms": [x.grad_norm for x in recs],
        "lrs": [x.lr for x in recs],
        "valid_tokens": [x.valid_tokens for x in recs],
    }
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print(f"{name}: {path} ({size} bytes, {summary['n_params']} params, {time.time() - t0:.1f}s)"
          f"  step-1 loss {recs[0].loss:.6f} (ln V = {math.log(a.vocab_size):.6f})"
          f"  final loss {recs[-1].loss:.6f}")
    return path


def write_st_fixture(path):
    """Every common dtype with known values, a scalar, an empty tensor,
    metadata with non-ASCII text, and a header whose key order is the
    reverse of the data order (readers must sort by offsets)."""
    tensors = [
        ("f32", torch.tensor([[0.0, 1.5, -2.0], [3.25, 1e-3, -0.0]], dtype=torch.float32)),
        ("f64", torch.tensor([1.0 / 3.0, -2.5, 1e300], dtype=torch.float64)),
        ("f16", torch.tensor([1.0, -2.0, 0.5, 65504.0], dtype=torch.float16)),
        ("bf16", torch.tensor([[1.0, -1.5], [3.0, 0.15625]], dtype=torch.bfloat16)),
        ("i32", torch.tensor([-2147483648, -1, 0, 1, 2147483647], dtype=torch.int32)),
        ("i64", torch.tensor([-(2 ** 62), 2 ** 40 + 3], dtype=torch.int64)),
        ("u8", torch.tensor([0, 7, 255], dtype=torch.uint8)),
        ("bool", torch.tensor([True, False], dtype=torch.bool)),
        ("scalar", torch.tensor(42.0, dtype=torch.float32)),
        ("empty", torch.zeros(0, 4, dtype=torch.float32)),
        ("layers.0.attention.wq.weight", torch.arange(12, dtype=torch.float32).view(3, 4)),
    ]
    meta = {"format": "pt", "note": "written by tests/ref/make_golden.py — ✓ ü", "empty": ""}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    st.save(path, tensors, meta, reverse_header=True)
    back, m2 = st.load(path)
    for n, t in tensors:
        assert torch.equal(back[n], t), n
    assert m2 == meta
    print(f"fixture: {path} ({os.path.getsize(path)} bytes)")


# --------------------------------------------------------------- selfcheck

class Checks:
    def __init__(self):
        self.failed = 0

    def ok(self, cond, what):
        print(f"  {'ok  ' if cond else 'FAIL'} {what}")
        if not cond:
            self.failed += 1


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def naive_attention(x, attn, freqs_cis, n_heads, n_kv):
    """Attention written with loops and real cos/sin rotation (no complex
    numbers, no repeat_kv), to check the vectorised module.  The cos/sin
    table is the model's (checked on its own by rope_table_by_hand)."""
    B, T, C = x.shape
    D = C // n_heads
    q = x @ attn.wq.weight.t()
    k = x @ attn.wk.weight.t()
    v = x @ attn.wv.weight.t()
    cos = freqs_cis[:T].real.to(x.dtype)
    sin = freqs_cis[:T].imag.to(x.dtype)

    def rot(z):  # z [B, T, D]
        out = z.clone()
        e, o = z[..., 0::2], z[..., 1::2]
        out[..., 0::2] = e * cos - o * sin
        out[..., 1::2] = e * sin + o * cos
        return out

    out = torch.zeros(B, T, n_heads * D, dtype=x.dtype)
    for b in range(B):
        for h in range(n_heads):
            g = h // (n_heads // n_kv)
            qh = rot(q[b:b + 1, :, h * D:(h + 1) * D])[0]
            kh = rot(k[b:b + 1, :, g * D:(g + 1) * D])[0]
            vh = v[b, :, g * D:(g + 1) * D]
            for t in range(T):
                s = (kh[:t + 1] @ qh[t]) / math.sqrt(D)
                p = torch.softmax(s, 0)
                out[b, t, h * D:(h + 1) * D] = p @ vh[:t + 1]
    return out @ attn.wo.weight.t()


class patched:
    """Temporarily replace llama_ref.<name> (a mutation for check 8)."""

    def __init__(self, **repl):
        self.repl = repl

    def __call__(self):
        return self

    def __enter__(self):
        self.old = {k: getattr(ref, k) for k in self.repl}
        for k, v in self.repl.items():
            setattr(ref, k, v)

    def __exit__(self, *exc):
        for k, v in self.old.items():
            setattr(ref, k, v)


def mutations(a, c):
    """(description, context) pairs of plausible implementation bugs."""
    orig_rot, orig_freqs, orig_sdpa = ref.apply_rotary_emb, ref.rope_freqs, ref.sdpa_causal
    orig_ce = ref.cross_entropy_sum
    out = []
    out.append(("no RoPE", patched(apply_rotary_emb=lambda q, k, f: (q, k))))

    def rotate_half(xq, xk, fc):   # HF layout: pairs (i, i + D/2)
        def r(x):
            D = x.shape[-1]
            y = x.reshape(*x.shape[:-1], 2, D // 2).transpose(-1, -2).reshape(x.shape)
            return y
        def back(x):
            D = x.shape[-1]
            return x.reshape(*x.shape[:-1], D // 2, 2).transpose(-1, -2).reshape(x.shape)
        q, k = orig_rot(r(xq), r(xk), fc)
        return back(q), back(k)
    out.append(("rotate-half RoPE pairs instead of adjacent", patched(apply_rotary_emb=rotate_half)))
    if a.rope_scaling:
        def unscaled(args):
            import dataclasses
            return orig_freqs(dataclasses.replace(args, rope_scaling=False))
        out.append(("RoPE without the 3.1 scaling", patched(rope_freqs=unscaled)))
    out.append(("theta 10000 instead of 500000",
                patched(rope_freqs=lambda args: orig_freqs(
                    __import__("dataclasses").replace(args, rope_theta=10000.0)))))
    if 1 < a.kv_heads < a.n_heads:   # with one kv head the two mappings agree
        def tiled(x, n_rep):        # kv head j serves q heads j, j+Hkv, ...
            return x.repeat(1, 1, n_rep, 1) if n_rep > 1 else x
        out.append(("GQA heads tiled instead of interleaved", patched(repeat_kv=tiled)))

    def no_mask(q, k, v):
        return torch.matmul(torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1), v)
    out.append(("attention without the causal mask", patched(sdpa_causal=no_mask)))

    def rms_no_eps(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-2) * self.weight
    out.append(("RMSNorm eps 1e-2", lambda: _PatchMethod(ref.RMSNorm, "forward", rms_no_eps)))
    if c["grad_accum"] > 1 or c["padding"]:
        def mean_ce(logits, labels):  # per-microbatch mean instead of global sum/count
            n = int((labels != ref.IGNORE_INDEX).sum())
            return orig_ce(logits, labels) / max(n, 1) * c["seq_len"] * c["local_batch_size"] / 2
        out.append(("loss normalised per microbatch", patched(cross_entropy_sum=mean_ce)))
    del orig_sdpa
    return out


class _PatchMethod:
    def __init__(self, cls, name, fn):
        self.cls, self.name, self.fn = cls, name, fn

    def __enter__(self):
        self.old = getattr(self.cls, self.name)
        setattr(self.cls, self.name, self.fn)

    def __exit__(self, *exc):
        setattr(self.cls, self.name, self.old)


def rope_freqs_by_hand(a):
    """Meta's llama3 apply_scaling (reference/llama/model.py), in Python
    floats, one frequency at a time."""
    d = a.head_dim
    out = []
    for i in range(0, d, 2):
        f = 1.0 / (a.rope_theta ** (i / d))
        if a.rope_scaling:
            low_wl = a.rope_original_max_position / a.rope_low_freq_factor
            high_wl = a.rope_original_max_position / a.rope_high_freq_factor
            wl = 2 * math.pi / f
            if wl < high_wl:
                pass
            elif wl > low_wl:
                f = f / a.rope_scaling_factor
            else:
                sm = (a.rope_original_max_position / wl - a.rope_low_freq_factor) / (
                    a.rope_high_freq_factor - a.rope_low_freq_factor)
                f = (1 - sm) * f / a.rope_scaling_factor + sm * f
        out.append(f)
    return out


def selfcheck(configs, fast=False):
    ck = Checks()
    for name in configs:
        c = CONFIGS[name]
        if is_qwen3(c):
            continue  # qwen3_ref.py checks itself (its __main__)
        a = model_args(c)
        print(f"config {name}: {a}")

        # 1. schedule: the multipliers against the formula by hand
        s = train_args(c, c["steps"]).schedule
        w, st_, d = ref.schedule_phases(s)
        lam = [ref.lr_lambda(i, s) for i in range(c["steps"])]
        print(f"  lr multipliers (warmup {w}, stable {st_}, decay {d}): "
              + " ".join(f"{x:.4f}" for x in lam))
        ck.ok(abs(lam[0] - 1.0 / w) < 1e-15, "step 1 trains with lr/warmup")
        ck.ok(all(x > 0 for x in lam), "lr never reaches 0 (virtual last step)")

        # 2. attention vs loops + real rotation, float64
        torch.manual_seed(0)
        m64 = ref.build_model(a, c["seed"], dtype=torch.float64)
        x = torch.randn(2, c["seq_len"], a.dim, dtype=torch.float64)
        attn = m64.layers["0"].attention
        y1 = attn(x, m64.freqs_cis)
        y2 = naive_attention(x, attn, m64.freqs_cis, a.n_heads, a.kv_heads)
        e = rel(y1, y2)
        ck.ok(e < 1e-12, f"attention (complex RoPE, repeat_kv, SDPA) vs loops: rel {e:.2e}")

        # RoPE table: Meta's apply_scaling loop in Python doubles vs the
        # fp32 tensor code (agreement to fp32 rounding)
        f_ref = rope_freqs_by_hand(a)
        f32 = ref.rope_freqs(a)
        e = max(abs(float(f32[i]) - f_ref[i]) / f_ref[i] for i in range(len(f_ref)))
        ck.ok(e < 1e-6, f"RoPE frequencies{' (3.1 scaling)' if a.rope_scaling else ''} vs "
                        f"Python doubles: rel {e:.1e}")
        ang = [[t * f for f in f_ref] for t in range(c["seq_len"])]
        fc = ref.precompute_freqs_cis(a, c["seq_len"])
        e = max(max(abs(float(fc[t, i].real) - math.cos(ang[t][i])),
                    abs(float(fc[t, i].imag) - math.sin(ang[t][i])))
                for t in range(c["seq_len"]) for i in range(len(f_ref)))
        ck.ok(e < 1e-5, f"freqs_cis (fp32 angles, complex64) vs doubles: max abs {e:.1e}")

        # 3. RMSNorm against its definition
        nrm = m64.layers["0"].attention_norm
        with torch.no_grad():
            nrm.weight.copy_(torch.linspace(0.5, 1.5, a.dim, dtype=torch.float64))
        want = x / torch.sqrt((x * x).mean(-1, keepdim=True) + a.norm_eps) * nrm.weight
        e = rel(nrm(x), want)
        ck.ok(e < 1e-14, f"RMSNorm: rel {e:.2e}")

        # 4. gradcheck of the whole step-1 loss (all microbatches, global
        #    valid-token normalisation) w.r.t. every parameter, float64
        m64 = ref.build_model(a, c["seed"], dtype=torch.float64)
        toks, inputs, labels = make_batches(c, 1)
        mbs = [(inputs[0, m], labels[0, m]) for m in range(c["grad_accum"])]
        valid = int(sum(int((lab != ref.IGNORE_INDEX).sum()) for _, lab in mbs))
        names = ref.param_names(m64)
        params = [p.detach().clone().requires_grad_(True) for _, p in m64.named_parameters()]
        from torch.nn.utils import stateless

        def loss_of(*flat):
            pd = dict(zip(names, flat))
            if a.tie_embeddings:
                pd["output.weight"] = pd["tok_embeddings.weight"]
            total = 0
            for inp, lab in mbs:
                logits = stateless.functional_call(m64, pd, (inp,))
                total = total + ref.cross_entropy_sum(logits, lab) / valid
            return total

        t0 = time.time()
        try:
            good = torch.autograd.gradcheck(loss_of, params, eps=1e-6, atol=1e-7, rtol=1e-5,
                                            fast_mode=fast)
        except Exception as ex:  # gradcheck raises with the mismatching entries
            print(f"    {str(ex)[:2000]}")
            good = False
        n = sum(p.numel() for p in params)
        ck.ok(good, f"gradcheck{' (fast mode)' if fast else ''} float64, {n} parameters, "
                    f"{len(mbs)} microbatch(es), "
                    f"{valid} valid tokens ({time.time() - t0:.0f}s)")

        # 5. fp32 reference vs float64: logits, loss, grads of step 1
        r32 = run_config(c, 1)
        m64 = ref.build_model(a, c["seed"], dtype=torch.float64)
        loss64 = 0.0
        for inp, lab in mbs:
            loss64 = loss64 + ref.cross_entropy_sum(m64(inp), lab) / valid
        loss64.backward()
        e = abs(r32["recs"][0].loss - float(loss64)) / float(loss64)
        ck.ok(e < 1e-5, f"step-1 loss fp32 {r32['recs'][0].loss:.7f} vs fp64 {float(loss64):.7f}: "
                        f"rel {e:.1e}")
        worst = max(rel(r32["grads"][n], p.grad) for n, p in m64.named_parameters())
        ck.ok(worst < 1e-4, f"step-1 gradients fp32 vs fp64: worst tensor rel {worst:.1e}")
        lnv = math.log(a.vocab_size)
        l1 = r32["recs"][0].loss
        ck.ok(abs(l1 - lnv) < 1.5, f"step-1 loss {l1:.4f} ≈ ln(vocab) {lnv:.4f}")

        # 6. AdamW + clipping of step 1 by hand (float64 from the fp32 inputs)
        t = train_args(c, c["steps"])
        g = r32["grads"]
        gn = math.sqrt(sum(float((g[n].double() ** 2).sum()) for n in names))
        ck.ok(abs(gn - r32["recs"][0].grad_norm) / gn < 1e-6,
              f"grad norm {r32['recs'][0].grad_norm:.7f} = sqrt(sum g²) {gn:.7f}")
        coef = min(1.0, t.max_norm / (gn + 1e-6))
        lr = r32["recs"][0].lr      # a 1-step run: warmup clamped to 1
        worst = 0.0
        for n in names:
            p0, gg = r32["init"][n].double(), g[n].double() * coef
            m = (1 - t.beta1) * gg
            v = (1 - t.beta2) * gg * gg
            mhat, vhat = m / (1 - t.beta1), v / (1 - t.beta2)
            want = p0 * (1 - lr * t.weight_decay) - lr * mhat / (vhat.sqrt() + t.eps)
            worst = max(worst, rel(r32["final"][n], want))
        ck.ok(worst < 1e-5, f"AdamW step 1 (clip coef {coef:.4f}, lr {lr:g}) by hand: "
                            f"worst tensor rel {worst:.1e}")

        # 8. the golden data catches plausible bugs: each mutation moves the
        #    step-1 gradients (or the 10-step losses) well past the C tests'
        #    tolerance (1e-4 relative per tensor)
        base = run_config(c, c["steps"])
        for what, mutated in mutations(a, c):
            with mutated():
                r = run_config(c, c["steps"])
            dg = max(rel(r["grads"][n], base["grads"][n]) for n in names)
            dl = max(abs(x.loss - y.loss) / y.loss for x, y in zip(r["recs"], base["recs"]))
            dw = max(rel(r["final"][n], base["final"][n]) for n in names)
            ck.ok(max(dg, dw) > 1e-3, f"caught: {what}: step-1 grads rel {dg:.1e}, "
                                      f"final weights rel {dw:.1e}, losses rel {dl:.1e}")

        # 7. determinism: two runs give the same bits
        r_again = run_config(c, 1)
        same = all(torch.equal(r32["final"][n], r_again["final"][n]) for n in names) and \
            torch.equal(r32["logits"], r_again["logits"])
        ck.ok(same, "bit-identical on a second run")
    print(f"selfcheck: {'FAILED ' + str(ck.failed) if ck.failed else 'all passed'}")
    return 1 if ck.failed else 0


# --------------------------------------------------------------------- main

# --check on a CPU other than the one that wrote the golden files: PyTorch
# picks other kernels, and after 10 AdamW steps the weights differ by ~1e-5
# of their largest value (measured on an AMD EPYC with AVX-512: 1.2e-5 at
# most).  A real change of the reference moves them by far more.
CHECK_RTOL = 1e-4


def close_to(a, b):
    """The worst difference between two golden files (safetensors: per
    tensor, relative to its largest |value|; JSON: numbers, relative),
    or None when their structure differs."""
    if a.endswith(".json"):
        def walk(x, y):
            if isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys():
                return max([walk(x[k], y[k]) for k in x] or [0.0])
            if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
                return max([walk(p, q) for p, q in zip(x, y)] or [0.0])
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                return abs(x - y) / max(abs(y), 1e-30) if x != y else 0.0
            return 0.0 if x == y else float("inf")
        with open(a) as fa, open(b) as fb:
            w = walk(json.load(fa), json.load(fb))
        return None if w == float("inf") else w
    ta, tb = st.load(a), st.load(b)
    ta, tb = (ta[0] if isinstance(ta, tuple) else ta), (tb[0] if isinstance(tb, tuple) else tb)
    if ta.keys() != tb.keys():
        return None
    worst = 0.0
    for k in tb:
        x, y = ta[k], tb[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            return None
        if x.is_floating_point():
            d = (x.double() - y.double()).abs().max().item() if x.numel() else 0.0
            worst = max(worst, d / max(y.double().abs().max().item(), 1e-30) if d else 0.0)
        elif not torch.equal(x, y):
            return None
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=GOLDEN_DIR, help="output folder (default %(default)s)")
    ap.add_argument("--config", default=",".join(CONFIGS), help="configs, comma-separated")
    ap.add_argument("--steps", type=int, default=None, help="override the step count")
    ap.add_argument("--selfcheck", action="store_true", help="verify the reference, write nothing")
    ap.add_argument("--fast", action="store_true",
                    help="with --selfcheck: gradcheck's fast mode (seconds instead of minutes)")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary folder and compare with the committed files")
    args = ap.parse_args()
    setup_determinism()
    names = [n for n in args.config.split(",") if n]
    for n in names:
        if n not in CONFIGS:
            ap.error(f"unknown config {n!r} (have {', '.join(CONFIGS)})")
    if args.selfcheck:
        return selfcheck(names, fast=args.fast)
    if args.check:
        bad = 0
        with tempfile.TemporaryDirectory() as tmp:
            for n in names:
                write_golden(n, CONFIGS[n], CONFIGS[n]["steps"], tmp)
                for ext in ("safetensors", "json"):
                    a, b = os.path.join(tmp, f"{n}.{ext}"), os.path.join(GOLDEN_DIR, f"{n}.{ext}")
                    same = os.path.exists(b) and filecmp.cmp(a, b, shallow=False)
                    if same:
                        print(f"  same: {b}")
                        continue
                    # PyTorch's CPU kernels round differently on other CPUs
                    # (ISA dispatch): the same reference, not the same bits
                    worst = close_to(a, b) if os.path.exists(b) else None
                    ok = worst is not None and worst <= CHECK_RTOL
                    print(f"  {'close' if ok else 'DIFFERS'}: {b}"
                          + (f" (worst relative difference {worst:.2e}; bytes differ:"
                             f" another CPU's rounding)" if worst is not None else ""))
                    bad += not ok
            write_st_fixture(os.path.join(tmp, "python.safetensors"))
            same = filecmp.cmp(os.path.join(tmp, "python.safetensors"), ST_FIXTURE, shallow=False)
            print(f"  {'same' if same else 'DIFFERS'}: {ST_FIXTURE}")
            bad += not same
        return 1 if bad else 0
    os.makedirs(args.out, exist_ok=True)
    for n in names:
        c = CONFIGS[n]
        write_golden(n, c, args.steps or c["steps"], args.out)
    if args.out == GOLDEN_DIR and args.steps is None:
        write_st_fixture(ST_FIXTURE)
    print(f"regenerate with: {REGEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
