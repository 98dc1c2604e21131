"""Reads a safetensors file (float32 tensors) for the checkpoint checks."""
import json
import struct


def read(path, keep=lambda name: True):
    """The F32 tensors of a safetensors file whose names `keep` accepts, by
    name, each a tuple of floats."""
    with open(path, "rb") as f:
        data = f.read()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or not keep(name):
            continue
        assert info["dtype"] == "F32", (name, info)
        lo, hi = info["data_offsets"]
        raw = data[8 + size + lo:8 + size + hi]
        out[name] = struct.unpack(f"<{len(raw) // 4}f", raw)
    return out


def shapes(path):
    """The shape of every tensor of a safetensors file, by name."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    return {name: info["shape"] for name, info in header.items() if name != "__metadata__"}
