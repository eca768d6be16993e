"""Reading and writing single-file safetensors checkpoints with numpy only, for the
tools that make and check FastDeploy-format checkpoints."""
import json
import struct

import numpy as np


def read_safetensors(path):
    """name -> (dtype name, shape, raw bytes)."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = (info["dtype"], info["shape"], data[begin:end])
    return tensors


def write_safetensors(path, tensors):
    """tensors: name -> (dtype name, shape, raw bytes), written in that order."""
    header, chunks, offset = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-(len(text) + 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)


def to_f32(dtype, shape, raw):
    """A float tensor's values as float32."""
    if dtype == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dtype == "F16":
        return np.frombuffer(raw, "<f2").astype(np.float32).reshape(shape)
    if dtype == "F32":
        return np.frombuffer(raw, "<f4").reshape(shape)
    raise SystemExit(f"unsupported dtype {dtype}")
