#!/usr/bin/env python3
"""FastDeploy's WINT2 ("2-bit CCQ") dequantization in numpy, written from the format's
description (docs/quantization.md, which cites FastDeploy's winx_unzip reference
dequantizer and its Triton kernel), independently of ernie.cpp's C++.

    python3 tools/ref_wint2_numpy.py DIR K N

reads DIR/quant_weight.u8 [K/4, N], DIR/weight_scale.u8 [K/128, N], DIR/super_scales.f32,
DIR/code_scale.f32 and DIR/code_zp.f32 ([N] each), raw little-endian, and writes
DIR/dequantized.f32: W [K, N] such that y = x @ W.

    python3 tools/ref_wint2_numpy.py --checkpoint WINT2_DIR OUT_DIR

writes OUT_DIR: the checkpoint with every WINT2 Linear replaced by its dequantized float32
weight (BASE.weight, [K, N], Paddle's orientation) and no quantization_config, for a float
reference forward pass (shared/tools/ref_ernie_numpy.py).
"""
import json
import os
import shutil
import sys

import numpy as np

from safetensors_io import read_safetensors, to_f32, write_safetensors


def dequantize_wint2(quant_weight, weight_scale, super_scales, code_scale, code_zp):
    packed_rows, n = quant_weight.shape
    k = 4 * packed_rows
    # (1) The byte's code, rounding after each float32 operation (winx_unzip:
    #     floor(zipped * code_scale + code_zp + 0.5)).
    u = quant_weight.astype(np.float32)
    t = (u * code_scale[None, :]).astype(np.float32)
    t = (t + code_zp[None, :]).astype(np.float32)
    t = (t + np.float32(0.5)).astype(np.float32)
    code = np.floor(t).astype(np.int64)
    # (2) Four overlapping 6-bit windows, 3 bits apart; the most significant is input 4r.
    levels = np.stack([((code >> shift) & 0x3F) - 32 for shift in (9, 6, 3, 0)], axis=1)  # [K/4, 4, N]
    levels = levels.reshape(k, n).astype(np.float32)
    # (3) Group g = k // 64 has a 4-bit scale: byte row g // 2, high nibble for even g.
    group = np.arange(k) // 64
    nibble = (weight_scale[group // 2, :].astype(np.int64) >> (((group + 1) & 1) * 4)[:, None]) & 0xF
    scale = nibble.astype(np.float32) * super_scales[None, :].astype(np.float32)
    return (levels * scale).astype(np.float32)


def bytes_of(tensor):
    dtype, shape, raw = tensor
    if dtype not in ("U8", "I8"):
        raise SystemExit(f"packed WINT2 bytes must be U8 or I8, got {dtype}")
    return np.frombuffer(raw, np.uint8).reshape(shape)  # int8 bits are read as uint8


def dequantize_checkpoint(source, out):
    tensors = read_safetensors(os.path.join(source, "model.safetensors"))
    result = {}
    for name, tensor in tensors.items():
        if not name.endswith(".quant_weight"):
            if not name.endswith((".weight_scale", ".super_scales", ".code_scale", ".code_zp")):
                result[name] = tensor
            continue
        stem = name[: -len(".quant_weight")]
        w = dequantize_wint2(bytes_of(tensor), bytes_of(tensors[stem + ".weight_scale"]),
                             to_f32(*tensors[stem + ".super_scales"]), to_f32(*tensors[stem + ".code_scale"]),
                             to_f32(*tensors[stem + ".code_zp"]))
        result[stem + ".weight"] = ("F32", list(w.shape), w.astype("<f4").tobytes())
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), result)
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    config.pop("quantization_config", None)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in os.listdir(source):
        if name not in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(source, name), os.path.join(out, name))


def main():
    if sys.argv[1] == "--checkpoint":
        dequantize_checkpoint(sys.argv[2], sys.argv[3])
        return
    directory, k, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def load(name, dtype, shape):
        return np.fromfile(f"{directory}/{name}", dtype=dtype).reshape(shape)

    w = dequantize_wint2(load("quant_weight.u8", np.uint8, (k // 4, n)), load("weight_scale.u8", np.uint8, (k // 128, n)),
                         load("super_scales.f32", np.float32, (n,)), load("code_scale.f32", np.float32, (n,)),
                         load("code_zp.f32", np.float32, (n,)))
    w.astype("<f4").tofile(f"{directory}/dequantized.f32")


if __name__ == "__main__":
    main()
