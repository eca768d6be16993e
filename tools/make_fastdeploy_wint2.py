#!/usr/bin/env python3
"""Writes a checkpoint in FastDeploy's WINT2 release format from a float Paddle-layout
ERNIE 4.5 MoE checkpoint, so ernie.cpp's loader is tested on the real layout
(docs/quantization.md describes it, with FastDeploy's sources).

    python3 tools/make_fastdeploy_wint2.py SRC_DIR OUT_DIR [--w4-end-layer 6] [--dense-quant-type wint8]
                                           [--pad-intermediate N]

SRC_DIR may be in Paddle or PT layout (converted; paddle_checkpoint.py); OUT_DIR is Paddle's.
--pad-intermediate zero-pads the experts' inner size to N (exact), for models whose
moe_intermediate_size is not a multiple of 128 (the shipped MoE's 192).

Routed experts of MoE layers past --w4-end-layer become
  ernie.layers.L.mlp.experts.E.{up_gate_proj,down_proj}.{quant_weight, weight_scale,
  super_scales, code_scale, code_zp}
(uint8 [K/4, N], uint8 [K/128, N], bf16 [N], float32 [N], float32 [N]); every other tensor is
copied unchanged, and config.json gains FastDeploy's quantization_config for the release.
Experts of layers up to --w4-end-layer stay float: ernie.cpp quantizes them to wint4 at
load, as the config says (the release stores them in Paddle's GPU weight_quantize layout).

FastDeploy's own encoder (CCQ, arXiv 2507.07145) is not public. This one is ours: per output
column a super scale (the largest group absmax / (15 * 31), rounded to bf16) and a 4-bit
scale per 64-input group; the code map (code_scale, code_zp) is the best of a few candidates;
each byte is the code whose four decoded levels are nearest the target levels (least squares).
"""
import argparse
import os

import numpy as np

from paddle_checkpoint import finish_release, float32_of, load_float_moe, pad_moe_inner
from safetensors_io import write_safetensors


def bf16_round(values):
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def bf16_bytes(values):
    return (bf16_round(values).view(np.uint32) >> 16).astype("<u2").tobytes()


# ---------------------------------------------------------------- WINT2 encoding

# Candidate code maps (code_scale, code_zp): the codes of all 256 bytes stay within 15 bits.
CODE_MAPS = [(128.0, 0.0), (127.5, 64.0), (127.0, 128.0), (126.5, 200.0)]


def decoded_levels(code_scale, code_zp):
    """[256, 4] levels of every byte under one code map (FastDeploy's decode, float32)."""
    u = np.arange(256, dtype=np.float32)
    t = (u * np.float32(code_scale)).astype(np.float32)
    t = (t + np.float32(code_zp)).astype(np.float32)
    code = np.floor((t + np.float32(0.5)).astype(np.float32)).astype(np.int64)
    return np.stack([((code >> s) & 0x3F) - 32 for s in (9, 6, 3, 0)], axis=1).astype(np.float32)


LEVEL_TABLES = [decoded_levels(cs, cz) for cs, cz in CODE_MAPS]


def encode_wint2(w):
    """w: [K, N] float (y = x @ w). Returns the five WINT2 tensors."""
    k, n = w.shape
    assert k % 128 == 0, f"WINT2 needs a multiple of 128 inputs, got {k}"
    groups = k // 64
    absmax = np.abs(w.reshape(groups, 64, n)).max(axis=1)  # [G, N]
    super_scale = bf16_round(np.maximum(absmax.max(axis=0) / (15 * 31), 1e-8))  # [N]
    nibble = np.clip(np.ceil(absmax / (31 * super_scale[None, :])), 1, 15).astype(np.int64)  # [G, N]
    scale = (nibble.astype(np.float32) * super_scale[None, :]).repeat(64, axis=0)  # [K, N]
    target = (w / scale).T.reshape(n, k // 4, 4)  # [N, K/4, 4] target levels
    best_error = np.full(n, np.inf)
    best_bytes = np.zeros((n, k // 4), np.uint8)
    best_map = np.zeros(n, np.int64)
    for first in range(0, n, 128):  # in column chunks: the distances are [columns, K/4, 256]
        part = target[first:first + 128]
        for index, levels in enumerate(LEVEL_TABLES):
            # |t - l|^2 = |t|^2 - 2 t.l + |l|^2, minimised over the 256 codes.
            distance = -2.0 * part @ levels.T + (levels * levels).sum(axis=1)[None, None, :]
            choice = distance.argmin(axis=2)
            error = ((levels[choice] - part) ** 2).sum(axis=(1, 2))
            better = error < best_error[first:first + 128]
            best_error[first:first + 128][better] = error[better]
            best_bytes[first:first + 128][better] = choice[better].astype(np.uint8)
            best_map[first:first + 128][better] = index
    code_scale = np.array([CODE_MAPS[i][0] for i in best_map], np.float32)
    code_zp = np.array([CODE_MAPS[i][1] for i in best_map], np.float32)
    quant_weight = np.ascontiguousarray(best_bytes.T)  # [K/4, N]
    pairs = nibble.reshape(groups // 2, 2, n)
    weight_scale = ((pairs[:, 0, :] << 4) | pairs[:, 1, :]).astype(np.uint8)  # even group: high nibble
    return quant_weight, weight_scale, super_scale, code_scale, code_zp


# ---------------------------------------------------------------- checkpoint


def moe_layers(config):
    start, end = config.get("moe_layer_start_index", 0), config.get("moe_layer_end_index", -1)
    start = min(start) if isinstance(start, list) else start
    end = max(end) if isinstance(end, list) else end
    end = config["num_hidden_layers"] - 1 if end < 0 else end
    interval = config.get("moe_layer_interval", 1)
    return [i for i in range(start, end + 1) if (i + 1) % interval == 0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src")
    parser.add_argument("out")
    parser.add_argument("--w4-end-layer", type=int, default=6)
    parser.add_argument("--dense-quant-type", default="wint8", help="wint8 as in the release; bf16 for tests")
    parser.add_argument("--pad-intermediate", type=int, help="zero-pad the experts' inner size to N")
    options = parser.parse_args()
    config, tensors = load_float_moe(options.src, "WINT2")
    if options.pad_intermediate is not None:
        pad_moe_inner(tensors, config, options.pad_intermediate)
    wint2_layers = [layer for layer in moe_layers(config) if layer > options.w4_end_layer]
    out = {}
    for name, (dtype, array) in tensors.items():
        stem = name[: -len(".weight")] if name.endswith(".weight") else None
        layer = int(name.split(".")[2]) if name.startswith("ernie.layers.") else -1
        is_expert = stem is not None and ".mlp.experts." in name and (".up_gate_proj" in stem or ".down_proj" in stem)
        if not (is_expert and layer in wint2_layers):
            out[name] = (dtype, list(array.shape), np.ascontiguousarray(array).tobytes())
            continue
        quant_weight, weight_scale, super_scale, code_scale, code_zp = encode_wint2(float32_of(dtype, array))
        k4, n = quant_weight.shape
        out[stem + ".quant_weight"] = ("U8", [k4, n], quant_weight.tobytes())
        out[stem + ".weight_scale"] = ("U8", list(weight_scale.shape), weight_scale.tobytes())
        out[stem + ".super_scales"] = ("BF16", [n], bf16_bytes(super_scale))
        out[stem + ".code_scale"] = ("F32", [n], code_scale.astype("<f4").tobytes())
        out[stem + ".code_zp"] = ("F32", [n], code_zp.astype("<f4").tobytes())
    os.makedirs(options.out, exist_ok=True)
    write_safetensors(os.path.join(options.out, "model.safetensors"), out)
    last = config["num_hidden_layers"] - 1
    config["quantization_config"] = {
        "dense_quant_type": options.dense_quant_type, "moe_quant_type": "w4w2", "quantization": "wint2",
        "moe_quant_config": {
            "moe_w4_quant_config": {"quant_type": "wint4", "quant_granularity": "per_channel", "quant_start_layer": 0,
                                    "quant_end_layer": options.w4_end_layer},
            "moe_w2_quant_config": {"quant_type": "wint2", "quant_granularity": "pp_acc", "quant_group_size": 64,
                                    "quant_start_layer": options.w4_end_layer + 1, "quant_end_layer": last}}}
    finish_release(options.src, options.out, config)
    print(f"{options.out}: WINT2 experts in layers {wint2_layers}")


if __name__ == "__main__":
    main()
