#!/usr/bin/env python3
"""gguf_read.py — a GGUF reader written from the GGUF specification
(ggml-org/ggml docs/gguf.md, version 3), with struct and numpy only: the
independent reader that titan's GGUF export is checked against.  It shares
no code with titan (lib/ckpt/gguf.c).

    import gguf_read
    g = gguf_read.load("model.gguf")
    g.version, g.alignment, g.data_offset
    g.metadata["llama.block_count"]       # (type name, value); arrays: lists
    g.tensors["blk.0.attn_q.weight"]      # Tensor(type, ne, offset, array)
    g.tensors[...].array                  # numpy, shape = reversed(ne),
                                          # F16 as float16, BF16 widened to float32

    python3 tests/ref/gguf_read.py FILE.gguf   # one JSON object: version,
        alignment, metadata {key: {"type", "value"}}, tensors [{name, type,
        ne, offset}] (arrays in full)

The reader raises ValueError for anything the spec does not allow: a bad
magic, a version other than 3, unknown value or tensor types, strings or
arrays running past the end, misaligned offsets, tensor data outside the
file or overlapping.
"""
import json
import struct
import sys
from collections import namedtuple

import numpy as np

# gguf_metadata_value_type
VALUE_TYPES = {0: ("u8", "<B"), 1: ("i8", "<b"), 2: ("u16", "<H"), 3: ("i16", "<h"),
               4: ("u32", "<I"), 5: ("i32", "<i"), 6: ("f32", "<f"), 7: ("bool", "<?"),
               8: ("string", None), 9: ("array", None), 10: ("u64", "<Q"), 11: ("i64", "<q"),
               12: ("f64", "<d")}
# ggml_type: the plain types (name, numpy dtype); block-quantized ones are not decoded
GGML_TYPES = {0: ("F32", "<f4"), 1: ("F16", "<f2"), 24: ("I8", "i1"), 25: ("I16", "<i2"),
              26: ("I32", "<i4"), 27: ("I64", "<i8"), 28: ("F64", "<f8"), 30: ("BF16", "<u2")}

Tensor = namedtuple("Tensor", "type ne offset array")
GGUF = namedtuple("GGUF", "version alignment data_offset metadata tensors")


class _Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n, what):
        if n > len(self.data) - self.pos:
            raise ValueError(f"{what} at byte {self.pos} runs past the end of the file")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what):
        n = self.unpack("<Q", what + " length")
        return self.take(n, what).decode("utf-8")

    def value(self, vtype, what):
        if vtype not in VALUE_TYPES:
            raise ValueError(f"{what}: unknown value type {vtype}")
        name, fmt = VALUE_TYPES[vtype]
        if name == "string":
            return self.string(what)
        if name == "array":
            etype = self.unpack("<I", what + " element type")
            n = self.unpack("<Q", what + " count")
            if etype == 9:
                raise ValueError(f"{what}: nested arrays")
            return [self.value(etype, what) for _ in range(n)]
        v = self.unpack(fmt, what)
        return v


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    r = _Reader(data)
    if r.take(4, "magic") != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    version = r.unpack("<I", "version")
    if version != 3:
        raise ValueError(f"{path}: version {version}, this reader knows 3")
    n_tensors = r.unpack("<Q", "tensor count")
    n_kv = r.unpack("<Q", "metadata count")
    metadata = {}
    for _ in range(n_kv):
        key = r.string("key")
        if key in metadata:
            raise ValueError(f"{path}: duplicate key {key}")
        vtype = r.unpack("<I", key + " type")
        if vtype == 9:
            at = r.pos
            etype = struct.unpack("<I", data[at:at + 4])[0]
            tname = "array[" + VALUE_TYPES.get(etype, ("?",))[0] + "]"
        else:
            tname = VALUE_TYPES.get(vtype, ("?",))[0]
        metadata[key] = (tname, r.value(vtype, key))
    alignment = metadata.get("general.alignment", ("u32", 32))
    if alignment[0] != "u32" or alignment[1] <= 0 or alignment[1] & (alignment[1] - 1):
        raise ValueError(f"{path}: general.alignment {alignment}")
    alignment = alignment[1]
    infos = []
    for _ in range(n_tensors):
        name = r.string("tensor name")
        n_dims = r.unpack("<I", name + " n_dims")
        ne = [r.unpack("<Q", name + " dim") for _ in range(n_dims)]
        ttype = r.unpack("<I", name + " type")
        offset = r.unpack("<Q", name + " offset")
        infos.append((name, ne, ttype, offset))
    data_offset = (r.pos + alignment - 1) // alignment * alignment
    tensors, spans = {}, []
    for name, ne, ttype, offset in infos:
        if name in tensors:
            raise ValueError(f"{path}: duplicate tensor {name}")
        if offset % alignment:
            raise ValueError(f"{path}: {name}: offset {offset} not aligned to {alignment}")
        numel = int(np.prod(ne, dtype=np.uint64)) if ne else 1
        if ttype in GGML_TYPES:
            tname, dt = GGML_TYPES[ttype]
            nbytes = numel * np.dtype(dt).itemsize
            start = data_offset + offset
            if start + nbytes > len(data):
                raise ValueError(f"{path}: {name}: data runs past the end of the file")
            arr = np.frombuffer(data, dtype=dt, count=numel, offset=start).reshape(ne[::-1])
            if tname == "BF16":
                arr = (arr.astype(np.uint32) << 16).view(np.float32)
            spans.append((offset, offset + nbytes, name))
        else:
            tname, arr = f"type{ttype}", None
        tensors[name] = Tensor(tname, ne, offset, arr)
    spans.sort()
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        if b0 < a1:
            raise ValueError(f"{path}: tensors {an} and {bn} overlap")
    return GGUF(version, alignment, data_offset, metadata, tensors)


def main():
    g = load(sys.argv[1])
    out = {"version": g.version, "alignment": g.alignment, "data_offset": g.data_offset,
           "metadata": {k: {"type": t, "value": v} for k, (t, v) in g.metadata.items()},
           "tensors": [{"name": n, "type": t.type, "ne": t.ne, "offset": t.offset}
                       for n, t in g.tensors.items()]}
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
