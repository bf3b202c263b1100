"""safetensors_py.py — a minimal safetensors writer and reader in plain
Python (json + struct), so the golden files need no `safetensors` package.

Format (huggingface/safetensors): u64 little-endian N, N bytes of UTF-8 JSON
header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
..., "__metadata__": {str: str}}, padded with spaces to a multiple of 8 as
the HF writer does, then the data buffer, which the offsets cover exactly
(contiguous, no holes).  Tensors are little-endian, C order.
"""

import json
import struct
import sys

import torch

DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
    torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}
TORCH = {v: k for k, v in DTYPES.items()}


def tensor_bytes(t: torch.Tensor) -> bytes:
    assert sys.byteorder == "little", "safetensors data is little-endian"
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def save(path, tensors, metadata=None, reverse_header=False):
    """tensors: list of (name, tensor), their data written in this order;
    metadata: dict str -> str.  reverse_header lists the tensors in the JSON
    header in reverse order (readers must not rely on key order).  Returns
    the number of bytes written."""
    header, blobs, off = {}, [], 0
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"metadata {k!r}: keys and values must be str")
        header["__metadata__"] = dict(metadata)
    seen = set()
    for name, t in tensors:
        if name in seen or name == "__metadata__":
            raise ValueError(f"duplicate or reserved tensor name {name!r}")
        seen.add(name)
        b = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if reverse_header:
        header = dict(reversed(list(header.items())))
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return 8 + len(h) + off


def load(path):
    """Returns (dict name -> tensor, metadata dict)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode())
    meta = header.pop("__metadata__", {}) or {}
    buf = data[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = TORCH[info["dtype"]]
        raw = bytearray(buf[b:e])
        if dt == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if e > b else \
                torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(raw, dtype=dt) if e > b else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out, meta
