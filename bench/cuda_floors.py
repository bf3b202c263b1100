#!/usr/bin/env python3
"""bench/cuda_floors.py — the floor of every CUDA op of one titan-train step:
FLOPs and bytes moved per op (as lib/cuda runs it: fp32 activations in
device memory, GEMM operands rounded into bf16 buffers of their own, fp32
accumulation) and the time neither the tensor cores nor HBM can beat,
max(FLOPs / peak, bytes / bandwidth).  The sum is the step's floor, and
tokens / floor the throughput no kernel work can exceed; the MFU bound is
torchtitan's FLOPs/token x that throughput / peak.

    bench/cuda_floors.py [--model 1b|125m|debug] [--batch B] [--seq T]
                         [--peak 989e12] [--bw 3.35e12] [--markdown]

Peak: H100 SXM / H200 dense bf16 989 TFLOP/s; bandwidth: H100 SXM HBM3
3.35 TB/s (H200: 4.8e12).  Bytes count each tensor read or written once per
kernel (no cache reuse across kernels; inside a kernel, attention's re-reads
of K/V per query tile are taken to hit L2/shared memory).  Measured times belong
beside these (TITAN_CUDA_PROFILE=1 titan-train ..., mk/device-run.sh
profile): docs/perf-cuda.md.
"""
import argparse

MODELS = {  # dim, layers, heads, kv heads, ffn, vocab, tied, batch, seq
    "debug": (256, 6, 16, 16, 768, 2048, False, 8, 2048),
    "125m": (768, 12, 12, 12, 2048, 32000, False, 16, 2048),
    "1b": (2048, 16, 32, 8, 8192, 128256, True, 4, 2048),
}


def ops(dim, L, H, KV, F, V, tied, B, T):
    """(name, count per step, FLOPs, bytes) of each op as lib/cuda runs it."""
    N, D, hd = B * T, dim, dim // H
    Dkv = KV * hd
    f4, b2 = 4, 2
    out = []

    def gemm(name, m, k, n, count):
        # forward y = x W^T: round x (m x k) and W (n x k) to bf16, GEMM, fp32 y;
        # backward dx = dy W and dW = dy^T x: dy rounded once, x re-rounded
        rnd_f = (m * k + n * k) * (f4 + b2)
        fwd = (name + " fwd", count, 2 * m * k * n, rnd_f + (m * k + n * k) * b2 + m * n * f4)
        rnd_b = (m * n + m * k + n * k) * (f4 + b2)
        bwd = (name + " bwd", count, 4 * m * k * n,
               rnd_b + 2 * (m * n) * b2 + (n * k + m * k) * b2 + (m * k + n * k) * f4 * 2)
        return [fwd, bwd]

    out.append(("embedding fwd", 1, 0, N * 4 + 2 * N * D * f4))
    out.append(("embedding bwd", 1, N * D, N * 4 + 2 * N * D * f4))
    out.append(("rmsnorm fwd", 2 * L + 1, 4 * N * D, 2 * N * D * f4 + N * f4 + D * f4))
    out.append(("rmsnorm bwd (+dw)", 2 * L + 1, 8 * N * D, 4 * N * D * f4 + N * f4 + 2 * D * f4))
    out += gemm("wq", N, D, D, L)
    out += gemm("wk+wv", N, D, 2 * Dkv, L)
    out.append(("rope fwd (q, k)", L, 6 * N * (D + Dkv), 2 * N * (D + Dkv) * f4 + T * hd * f4))
    out.append(("rope bwd (dq, dk)", L, 6 * N * (D + Dkv), 2 * N * (D + Dkv) * f4 + T * hd * f4))
    # causal attention: QK^T and PV over the lower triangle, 2 FLOPs a MAC
    att = 2 * 2 * B * H * hd * T * (T + 1) // 2
    # bytes: Q, K, V read and O, lse written once (a flash kernel keeps the
    # re-reads of K/V per query tile in L2/shared memory: not counted)
    out.append(("attention fwd", L, att, N * (D + 2 * Dkv) * f4 + N * D * f4 + B * H * T * f4))
    out.append(("attention bwd", L, int(2.5 * att),  # dV, dP, dS·K, dS^T·Q + recomputed S
                2 * N * (D + 2 * Dkv) * f4 + 2 * N * D * f4 + 2 * B * H * T * f4))
    out += gemm("wo", N, D, D, L)
    out.append(("residual add", 2 * L, N * D, 3 * N * D * f4))
    out += gemm("w1+w3", N, D, 2 * F, L)
    out.append(("swiglu fwd", L, 6 * N * F, 3 * N * F * f4))
    out.append(("swiglu bwd", L, 12 * N * F, 5 * N * F * f4))
    out += gemm("w2", N, F, D, L)
    # classifier + cross-entropy, chunked over rows: logits never leave a chunk
    out.append(("classifier+CE fwd", 1, 2 * N * D * V + 5 * N * V,
                (N * D + V * D) * (f4 + b2) + N * V * f4 * 2))
    out.append(("classifier+CE bwd", 1, 4 * N * D * V,
                N * V * (f4 + b2) + (N * D + V * D) * b2 * 2 + (N * D + V * D) * f4))
    P = V * D * (1 if tied else 2) + L * (2 * D * D + 2 * D * Dkv + 3 * D * F + 2 * D) + D
    out.append(("grad norm (sumsq)", 1, 2 * P, P * f4))
    out.append(("AdamW", 1, 14 * P, 7 * P * f4))
    return out, P, N


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="1b", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq", type=int)
    ap.add_argument("--peak", type=float, default=989e12)
    ap.add_argument("--bw", type=float, default=3.35e12)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    dim, L, H, KV, F, V, tied, B, T = MODELS[a.model]
    B, T = a.batch or B, a.seq or T
    rows, P, N = ops(dim, L, H, KV, F, V, tied, B, T)
    total_t = total_f = total_b = 0.0
    sep = "|" if a.markdown else " "
    hdr = ["op", "calls", "GFLOP/step", "GB/step", "FLOP/byte", "floor ms", "bound"]
    if a.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
    else:
        print(f"{'op':24s} {'calls':>5s} {'GFLOP/step':>11s} {'GB/step':>9s} {'FLOP/B':>7s} {'floor ms':>9s}  bound")
    for name, n, fl, by in rows:
        t_c, t_m = n * fl / a.peak, n * by / a.bw
        t = max(t_c, t_m)
        total_t, total_f, total_b = total_t + t, total_f + n * fl, total_b + n * by
        ai = fl / by if by else 0.0
        cells = [name, str(n), f"{n * fl / 1e9:.1f}", f"{n * by / 1e9:.2f}", f"{ai:.1f}",
                 f"{t * 1e3:.3f}", "compute" if t_c >= t_m else "memory"]
        if a.markdown:
            print("| " + " | ".join(cells) + " |")
        else:
            print(f"{cells[0]:24s} {cells[1]:>5s} {cells[2]:>11s} {cells[3]:>9s} {cells[4]:>7s} {cells[5]:>9s}  {cells[6]}")
    hd = dim // H
    n_emb = V * dim
    flops_tok = 6 * (P - (0 if tied else n_emb)) + 12 * L * H * hd * T
    tps = N / total_t
    print(f"{a.model}: {P / 1e6:.1f} M parameters, batch {B} x seq {T} = {N} tokens; "
          f"executed {total_f / 1e12:.2f} TFLOP and {total_b / 1e9:.1f} GB a step")
    print(f"floor {total_t * 1e3:.1f} ms/step = {tps:,.0f} tokens/s; MFU bound "
          f"{flops_tok * tps / a.peak * 100:.1f}% (torchtitan's {flops_tok / 1e9:.2f} GFLOP/token "
          f"at peak {a.peak:.3g} FLOP/s, {a.bw:.3g} B/s)")


if __name__ == "__main__":
    main()
