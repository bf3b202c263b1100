#!/usr/bin/env python3
"""bench/gpu_ceilings.py — the two ceilings of the GPU at hand, measured once
(device-to-device copy bandwidth and matrix-product rate through cuBLAS at the
shapes of the 1B bench), plus where cuDNN lives.  The floors of
bench/cuda_floors.py use datasheet rates; this says what the card gives.

    python3 bench/gpu_ceilings.py [--tokens 8192] [--json FILE]

Times are the median of 20 runs with CUDA events after 5 warm-up runs; GEMM
inputs are random normal (zeros run faster), rotated over 3 sets so that
repeats do not measure the L2 cache.
"""
import argparse, json, os, statistics, sys

import torch


def timed(fn, warm=5, reps=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.cuda.get_device_properties(0)
    rows = {"gpu": dev.name, "sms": dev.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    try:
        import ctypes.util
        import glob
        libs = glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cudnn", "lib", "libcudnn.so*"))
        rows["cudnn_lib"] = sorted(os.path.realpath(p) for p in libs)[:1] or ctypes.util.find_library("cudnn")
    except Exception as e:  # noqa: BLE001 (a report, not a failure)
        rows["cudnn_lib"] = repr(e)

    n = 1 << 28  # 1 GiB of fp32
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src))
    rows["copy_GBps"] = 2 * n * 4 / t / 1e9
    del src, dst

    T = a.tokens
    shapes = [("wq/wo", T, 2048, 2048), ("w1/w3", T, 8192, 2048), ("w2", T, 2048, 8192),
              ("classifier", T, 128256, 2048), ("big", 8192, 8192, 8192)]
    for dt, name in ((torch.bfloat16, "bf16"), (torch.float32, "tf32"), (torch.float32, "fp32")):
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        for sname, m, nn, k in shapes:
            if name != "bf16" and sname == "classifier":
                continue
            xs = [torch.randn(m, k, device="cuda", dtype=dt) for _ in range(3)]
            ws = [torch.randn(k, nn, device="cuda", dtype=dt) for _ in range(3)]
            i = [0]

            def mm():
                j = i[0] % 3
                i[0] += 1
                return xs[j] @ ws[j]
            t = timed(mm)
            rows[f"gemm_{name}_{sname}_TFLOPs"] = 2 * m * nn * k / t / 1e12
            del xs, ws
    torch.backends.cuda.matmul.allow_tf32 = False
    # bf16 operands, fp32 output (what titan's GEMMs write today): torch.mm's
    # out_dtype where this PyTorch has it
    for sname, m, nn, k in shapes[:3]:
        xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        ws = [torch.randn(k, nn, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        i = [0]

        def mm32():
            j = i[0] % 3
            i[0] += 1
            return torch.mm(xs[j], ws[j], out_dtype=torch.float32)
        try:
            rows[f"gemm_bf16_out_fp32_{sname}_TFLOPs"] = 2 * m * nn * k / timed(mm32) / 1e12
        except (TypeError, RuntimeError) as e:
            rows[f"gemm_bf16_out_fp32_{sname}_TFLOPs"] = f"not available ({str(e)[:60]})"
            break
    w = max(len(k) for k in rows)
    for k, v in rows.items():
        print(f"{k:<{w}}  {v:.1f}" if isinstance(v, float) else f"{k:<{w}}  {v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
