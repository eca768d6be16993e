#!/usr/bin/env python3
"""Writes a checkpoint in the layout of one of FastDeploy's offline-quantized releases
(WINT2 or W4A8C8, docs/quantization.md) at a model's full shape, for memory and speed
figures only: the routed experts (and, when resized, the shared experts) get random
codes and scales in the release's exact tensors, every other tensor is copied from SRC.
The tools/make_fastdeploy_*.py generators encode a float model instead, which takes
minutes per billion weights in numpy; speed does not depend on the values.

    python3 bench/make_release_like.py SRC OUT --format wint2|w4a8 [--moe-intermediate N]

SRC: a float Paddle-layout MoE checkpoint (`ernie synth --layout paddle`). With
--moe-intermediate, SRC may hold small experts (e.g. `ernie synth --preset 21b-a3b
--moe-intermediate 64`, a few GB instead of 43): OUT's experts and shared experts get
that inner size, the shared ones random bf16.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from paddle_checkpoint import finish_release, read_checkpoint  # noqa: E402
from safetensors_io import write_safetensors  # noqa: E402

RANDOM = np.random.default_rng(0)


def bf16_bits(values):
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype("<u2")


def wint2_tensors(stem, k, n):
    """One Linear's WINT2 tensors: codes decode to levels in [-32, 31] under the code map
    (128, 0); 4-bit group scales 1..15 times a bf16 super scale."""
    return {
        stem + ".quant_weight": ("U8", [k // 4, n], RANDOM.integers(0, 256, (k // 4, n), np.uint8).tobytes()),
        stem + ".weight_scale": ("U8", [k // 128, n], RANDOM.integers(0x11, 0x100, (k // 128, n), np.uint8).tobytes()),
        stem + ".super_scales": ("BF16", [n], bf16_bits(np.full(n, 1e-4)).tobytes()),
        stem + ".code_scale": ("F32", [n], np.full(n, 128.0, "<f4").tobytes()),
        stem + ".code_zp": ("F32", [n], np.zeros(n, "<f4").tobytes()),
    }


def w4a8_tensors(stem, k, n):
    """One Linear's W4A8 tensors: random int4 levels, per-column and static input scales."""
    return {
        stem + ".quant_weight": ("I8", [k // 2, n], RANDOM.integers(0, 256, (k // 2, n), np.uint8).tobytes()),
        stem + ".weight_scale": ("F32", [n], np.full(n, 0.05, "<f4").tobytes()),
        stem + ".activation_scale": ("F32", [1], np.full(1, 4.0, "<f4").tobytes()),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src")
    parser.add_argument("out")
    parser.add_argument("--format", choices=("wint2", "w4a8"), required=True)
    parser.add_argument("--moe-intermediate", type=int)
    options = parser.parse_args()
    with open(os.path.join(options.src, "config.json")) as f:
        config = json.load(f)
    inner = options.moe_intermediate or config["moe_intermediate_size"]
    hidden, shared = config["hidden_size"], config.get("moe_num_shared_experts", 0)
    resized = inner != config["moe_intermediate_size"]
    config["moe_intermediate_size"] = inner
    encode = wint2_tensors if options.format == "wint2" else w4a8_tensors
    out = {}
    for name, (dtype, array) in read_checkpoint(options.src).items():
        if ".mlp.experts." in name:
            if name.endswith(".up_gate_proj.weight"):
                stem = name[: -len(".up_gate_proj.weight")]
                out.update(encode(stem + ".up_gate_proj", hidden, 2 * inner))
                out.update(encode(stem + ".down_proj", inner, hidden))
            continue
        if resized and ".mlp.shared_experts." in name:
            width = inner * shared
            shape = [hidden, 2 * width] if "up_gate_proj" in name else [width, hidden]
            values = RANDOM.standard_normal(shape, np.float32) * 0.02
            out[name] = ("BF16", shape, bf16_bits(values).tobytes())
            continue
        out[name] = (dtype, list(array.shape), np.ascontiguousarray(array).tobytes())
    if options.format == "wint2":
        config["quantization_config"] = {
            "quantization": "wint2", "dense_quant_type": "wint8", "moe_quant_type": "w4w2",
            "moe_quant_config": {"moe_w4_quant_config": {"quant_end_layer": 0}}}
    else:
        head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
        channels = config["num_key_value_heads"] * head_dim
        for layer in range(config["num_hidden_layers"]):
            for kind in ("cachek", "cachev"):
                out[f"ernie.layers.{layer}.self_attn.{kind}_matmul.activation_scale"] = (
                    "F32", [channels], np.full(channels, 8.0, "<f4").tobytes())
        config["quantization_config"] = {
            "quantization": "mix_quant", "dense_quant_type": "wint8", "moe_quant_type": "w4a8",
            "kv_cache_quant_type": "int8", "is_permuted": False, "is_quantized": True, "hadamard_block_size": 128}
    os.makedirs(options.out, exist_ok=True)
    write_safetensors(os.path.join(options.out, "model.safetensors"), out)
    finish_release(options.src, options.out, config)
    print(f"{options.out}: {options.format} release layout, experts of inner size {inner} with random codes")


if __name__ == "__main__":
    main()
