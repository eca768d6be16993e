#!/usr/bin/env python3
"""FastDeploy's WINT2 ("2-bit CCQ") dequantization in numpy, written from the format's
description (docs/quantization.md, which cites FastDeploy's winx_unzip reference
dequantizer and its Triton kernel), independently of ernie.cpp's C++.

    python3 tools/ref_wint2_numpy.py DIR K N

reads DIR/quant_weight.u8 [K/4, N], DIR/weight_scale.u8 [K/128, N], DIR/super_scales.f32,
DIR/code_scale.f32 and DIR/code_zp.f32 ([N] each), raw little-endian, and writes
DIR/dequantized.f32: W [K, N] such that y = x @ W.
"""
import sys

import numpy as np


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


def main():
    directory, k, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def load(name, dtype, shape):
        return np.fromfile(f"{directory}/{name}", dtype=dtype).reshape(shape)

    w = dequantize_wint2(load("quant_weight.u8", np.uint8, (k // 4, n)), load("weight_scale.u8", np.uint8, (k // 128, n)),
                         load("super_scales.f32", np.float32, (n,)), load("code_scale.f32", np.float32, (n,)),
                         load("code_zp.f32", np.float32, (n,)))
    w.astype("<f4").tofile(f"{directory}/dequantized.f32")


if __name__ == "__main__":
    main()
