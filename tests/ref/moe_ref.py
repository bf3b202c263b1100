#!/usr/bin/python3
"""moe_ref.py — an independent PyTorch re-implementation of torchtitan's
mixture-of-experts feed-forward and its auxiliary-loss-free load balancing,
on top of llama_ref.py's Llama 3 (attention, norms, loss, AdamW, schedule).

It mirrors torchtitan's models/moe/moe.py of the MoEArgs era (github.com/
pytorch/torchtitan at e38d7abe0) without importing torchtitan:

  TokenChoiceTopKRouter  gate = Linear(dim, num_experts) in fp32; scores =
                         sigmoid|softmax; top-k of scores + expert_bias (the
                         bias only chooses), gate values gathered from the
                         unbiased scores; route_norm (/ sum + 1e-20);
                         × route_scale
  TokenReorderer         histc counts, stable argsort of the expert ids
  GroupedExperts         w1/w3 [E, hidden, dim], w2 [E, dim, hidden]; the
                         for-loop implementation (_run_experts_for_loop:
                         torch 1.13 has no _grouped_mm; the same math)
  MoE.forward            routed input scaled by its score before the experts
                         (score_before_experts) or the outputs after (bmm),
                         shared experts FeedForward(dim, hidden × n_shared)
                         added; tokens_per_expert accumulated in training
  MoE.init_weights       experts w1 std 0.02, w2/w3 and the gate init_std,
                         shared experts as FeedForward
  optimizer.py           _update_expert_bias (optimizer pre-step hook):
                         delta = coeff·sign(mean − tokens); bias += delta −
                         mean(delta); counts zeroed
  deepseek_v3 / llama4   block i is MoE when i >= n_dense_layers and
                         (i + 1) % interleave_moe_layer_step == 0

Used by tests/bats/moe.bats: titan-train's initial weights (a seed
checkpoint, read with h5py) and its token shards (read here from the shard
format of lib/titan/data.h) go in; 12 steps of losses, grad norms and the
final expert_bias come out as JSON.
"""

import argparse
import glob
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import llama_ref as L
import qwen3_ref as Q


class MoE(nn.Module):
    def __init__(self, dim, hidden, a):
        super().__init__()
        E = a["num_experts"]
        self.E, self.K = E, a["top_k"]
        self.softmax = a["score_func"] == "softmax"
        self.route_norm, self.route_scale = a["route_norm"], a["route_scale"]
        self.score_before = a["score_before_experts"]
        self.coeff = a["load_balance_coeff"]
        # module order = torchtitan's: experts, router, shared_experts
        self.experts = nn.Module()
        self.experts.w1 = nn.Parameter(torch.empty(E, hidden, dim))
        self.experts.w2 = nn.Parameter(torch.empty(E, dim, hidden))
        self.experts.w3 = nn.Parameter(torch.empty(E, hidden, dim))
        self.router = nn.Module()
        self.router.gate = nn.Linear(dim, E, bias=False)
        ns = a["num_shared_experts"]
        self.shared_experts = L.FeedForward(dim, hidden * ns) if ns > 0 else None
        if self.coeff is not None:
            self.register_buffer("expert_bias", torch.zeros(E), persistent=True)
        else:
            self.expert_bias = None
        self.register_buffer("tokens_per_expert", torch.zeros(E), persistent=False)

    def forward(self, x):
        bs, slen, dim = x.shape
        x = x.view(-1, dim)
        scores = self.router.gate(x).float()
        scores = F.softmax(scores, dim=1) if self.softmax else torch.sigmoid(scores)
        choice = scores if self.expert_bias is None else scores + self.expert_bias
        _, idx = torch.topk(choice, k=self.K, dim=-1)
        top = scores.gather(dim=1, index=idx)
        if self.route_norm:
            top = top / (top.sum(dim=-1, keepdim=True) + 1e-20)
        top = top * self.route_scale
        counts = torch.histc(idx.view(-1).float(), bins=self.E, min=0, max=self.E)
        if self.training:
            with torch.no_grad():
                self.tokens_per_expert.add_(counts)
        order = torch.argsort(idx.view(-1), stable=True)
        top_sorted = top.view(-1)[order]
        routed = x[order // self.K]
        if self.score_before:
            routed = routed.float() * top_sorted.reshape(-1, 1)
        outs = []
        for e, xe in enumerate(torch.split(routed, counts.long().tolist(), dim=0)):
            h = F.silu(xe @ self.experts.w1[e].t()) * (xe @ self.experts.w3[e].t())
            outs.append(h @ self.experts.w2[e].t())
        routed_out = torch.cat(outs, dim=0)
        unsorted = torch.zeros_like(routed_out).index_copy(0, order, routed_out)
        unsorted = unsorted.reshape(-1, self.K, dim)
        if self.score_before:
            out = unsorted.sum(dim=1)
        else:
            out = torch.bmm(top.reshape(-1, 1, self.K), unsorted).squeeze(1)
        if self.shared_experts is not None:
            out = self.shared_experts(x) + out
        return out.reshape(bs, slen, dim)

    def init_weights(self, init_std):
        nn.init.trunc_normal_(self.experts.w1, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.experts.w2, mean=0.0, std=init_std)
        nn.init.trunc_normal_(self.experts.w3, mean=0.0, std=init_std)
        nn.init.trunc_normal_(self.router.gate.weight, mean=0.0, std=init_std)
        if self.shared_experts is not None:
            self.shared_experts.init_weights(init_std)
        self.tokens_per_expert.zero_()
        if self.expert_bias is not None:
            self.expert_bias.zero_()

    @torch.no_grad()
    def update_bias(self):
        if self.expert_bias is None:
            return
        t = self.tokens_per_expert
        delta = self.coeff * torch.sign(t.mean() - t)
        self.expert_bias.add_(delta - delta.mean())
        self.tokens_per_expert.zero_()


def is_moe(i, a):
    return a["num_experts"] > 0 and i >= a["n_dense_layers"] and \
        (i + 1) % a["interleave_moe_layer_step"] == 0


class MoEBlock(L.TransformerBlock):
    """TransformerBlock with `moe` in place of `feed_forward`."""

    def __init__(self, layer_id, args, a):
        super().__init__(layer_id, args)
        del self.feed_forward
        self.moe = MoE(args.dim, a["inter_dim"], a)
        # attention, moe, then the norms (torchtitan's attribute order)
        self._modules.move_to_end("attention_norm")
        self._modules.move_to_end("ffn_norm")

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.moe(self.ffn_norm(h))

    def init_weights(self):
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.moe.init_weights(self.weight_init_std)


def build(args, a, qwen3=False):
    """llama_ref's Transformer, or with qwen3 qwen3_ref's Qwen3Model (QK-norm,
    rotate_half RoPE): its MoE blocks take the Qwen3 attention in place."""
    model = Q.Qwen3Model(args) if qwen3 else L.Transformer(args)
    for i in range(args.n_layers):
        if is_moe(i, a):
            blk = MoEBlock(i, args, a)
            if qwen3:
                blk.attention = Q.Attention(args)  # same slot: the order stays
            model.layers[str(i)] = blk
    return model


def load_checkpoint(model, path):
    """A titan HDF5 checkpoint's tensors into model (strict), checking that
    the model's parameters come in the checkpoint's (torchtitan's) order."""
    import h5py

    f = h5py.File(path, "r")
    model.load_state_dict({k: torch.from_numpy(f["model"][k][...]) for k in f["model"]},
                          strict=True)
    assert [n for n, _ in model.named_parameters()] == \
        [k for k in f["model"] if not k.endswith("expert_bias")], "parameter order"


@torch.no_grad()
def greedy_logprob(model, ids, length):
    """titan-generate's greedy continuation of ids up to `length` tokens,
    recomputed whole each step: the sum of the new tokens' log-probs."""
    model.eval()
    ids, lp = list(ids), 0.0
    while len(ids) < length:
        logits = model(torch.tensor([ids]))[0, -1]
        nxt = int(logits.argmax())
        lp += float(torch.log_softmax(logits.double(), -1)[nxt])
        ids.append(nxt)
    return lp


def moe_layers(model):
    return [b.moe for b in model.layers.values() if isinstance(b, MoEBlock)]


def read_tokens(shard_dir, split="train"):
    """The split's shards in name order as one sequence (lib/titan/data.h:
    a 4096-byte header with u32 token_bytes at byte 12 and u64 n_tokens at
    byte 24, then the ids, little-endian)."""
    out = []
    for p in sorted(glob.glob(f"{shard_dir}/{split}-*.tok")):
        b = open(p, "rb").read()
        assert b[:8] == b"TITANTOK", p
        width = int.from_bytes(b[12:16], "little")
        n = int.from_bytes(b[24:32], "little")
        dt = {2: "<u2", 4: "<u4"}[width]
        out.append(np.frombuffer(b[4096:4096 + n * width], dtype=dt).astype(np.int64))
    return torch.from_numpy(np.concatenate(out))


def train(model, shards, t, on_batch=None):
    """t["steps"] steps of the model on the shards' tokens (batch, seq_len,
    lr, warmup of t) as torchtitan's train loop with the load-balancing
    hook: losses, grad norms and the final expert_bias per MoE block.
    on_batch(inputs), when given, sees each step's inputs first."""
    model.train()
    tr = L.Trainer(model, L.TrainArgs(lr=t["lr"], schedule=L.ScheduleArgs(
        warmup_steps=t["warmup"], total_steps=t["steps"])))
    # torchtitan's optimizer pre-step hook (the order against clipping does
    # not matter: the bias is not a parameter)
    tr.on_backward = lambda step, trainer: [m.update_bias() for m in moe_layers(model)]
    toks = read_tokens(shards)
    B, T = t["batch"], t["seq_len"]
    wins = L.windows(toks, T, B * t["steps"])
    out = {"loss": [], "grad_norm": []}
    for s in range(t["steps"]):
        rows = wins[s * B:(s + 1) * B]
        inp = torch.stack([r[0] for r in rows])
        lab = torch.stack([r[1] for r in rows])
        if on_batch:
            on_batch(inp)
        rec, _ = tr.step(s + 1, [(inp, lab)])
        out["loss"].append(rec.loss)
        out["grad_norm"].append(rec.grad_norm)
    out["expert_bias"] = {f"layers.{i}": b.moe.expert_bias.tolist()
                          for i, b in model.layers.items()
                          if isinstance(b, MoEBlock) and b.moe.expert_bias is not None}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True, help="titan's seed checkpoint (HDF5)")
    ap.add_argument("--shards", required=True)
    ap.add_argument("--model", required=True, help="JSON: llama_ref.ModelArgs fields")
    ap.add_argument("--moe", required=True, help="JSON: num_experts, top_k, ...")
    ap.add_argument("--train", required=True, help="JSON: batch, seq_len, steps, lr, warmup")
    ap.add_argument("--save", help="the final state_dict as .npz")
    ap.add_argument("--qwen3", help="JSON: qwen3_ref.Qwen3Args fields besides --model's "
                    "(a Qwen3 MoE; the tensors move from and to titan's q/k layout)")
    args_ = ap.parse_args()
    import h5py

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    a = json.loads(args_.moe)
    t = json.loads(args_.train)
    qwen3 = json.loads(args_.qwen3) if args_.qwen3 else None
    if qwen3 is not None:
        args = Q.Qwen3Args(**json.loads(args_.model), **qwen3, max_seq_len=t["seq_len"])
        lay = lambda n, x, to_titan: Q.layout(n, x, args, to_titan)  # noqa: E731
    else:
        args = L.ModelArgs(**json.loads(args_.model), max_seq_len=t["seq_len"])
        lay = lambda n, x, to_titan: x  # noqa: E731
    model = build(args, a, qwen3 is not None)
    f = h5py.File(args_.init, "r")
    sd = {k: lay(k, torch.from_numpy(f["model"][k][...]), False) for k in f["model"]}
    model.load_state_dict(sd, strict=True)
    assert [n for n, _ in model.named_parameters()] == \
        [k for k in f["model"] if not k.endswith("expert_bias")], "parameter order"
    out = train(model, args_.shards, t)
    if args_.save:
        np.savez(args_.save, **{k: lay(k, v.detach(), True).numpy()
                                for k, v in model.state_dict().items()})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
