#!/usr/bin/env python3
"""ernie.cpp's int6 weight format (the LM head under the 4-bit names) in numpy, written
from its description in docs/quantization.md, independently of the C++.

    python3 tools/ref_int6_numpy.py DIR ROWS COLS

reads, raw little-endian:
  DIR/original.f32  [ROWS, COLS]  the weights before quantization
  DIR/packed.u8     panels of 16 rows (ROWS padded up); a panel is its blocks of 32
                    inputs in pairs, each pair the two blocks' codes (two units of 16
                    inputs, three 64-byte lines each, per block) then one 64-byte line of
                    fp16 scales: the 16 rows' of the first block, then of the second (zero
                    when an odd last block has none)
and writes DIR/dequantized.f32 [ROWS, COLS]. It exits non-zero, saying why, when the
format's promises do not hold:
  - every code is its weight divided by the block's stored scale, rounded to nearest and
    clamped to [-32, 31];
  - the chosen scales leave no more squared error than mapping each block's extreme to
    -32 (the plain absmax rule, as Q4_0 does at 4 bits);
  - padding rows hold code 32 (zero).
"""
import sys

import numpy as np

PANEL = 16
GROUP = 32


BLOCK_BYTES = 2 * 3 * 64  # a block's two units


def split_panels(packed, rows, cols):
    """The panels' code bytes [panels, blocks, BLOCK_BYTES] and scales [panels, blocks, 16]."""
    panels = (rows + PANEL - 1) // PANEL
    blocks = cols // GROUP
    pairs = (blocks + 1) // 2
    pair_bytes = 2 * BLOCK_BYTES + 64
    if packed.size != panels * pairs * pair_bytes:
        raise SystemExit(f"packed.u8 holds {packed.size} bytes, the layout {panels * pairs * pair_bytes}")
    by_pair = packed.reshape(panels, pairs, pair_bytes)
    codes = by_pair[:, :, : 2 * BLOCK_BYTES].reshape(panels, 2 * pairs, BLOCK_BYTES)
    scales = by_pair[:, :, 2 * BLOCK_BYTES :].copy().view(np.float16).reshape(panels, 2 * pairs, PANEL)
    if blocks % 2 and np.any(scales[:, blocks:] != 0):
        raise SystemExit("the unused half of an odd last scale line is not zero")
    return codes[:, :blocks], scales[:, :blocks]


def unpack_codes(block_codes, rows, cols):
    """Codes c = level + 32 (0..63), [padded rows, cols]."""
    panels = (rows + PANEL - 1) // PANEL
    units = cols // 16
    lines = block_codes.reshape(panels, units, 3, PANEL, 4)  # panel, unit, line, row r, byte j
    first, second, high = lines[:, :, 0], lines[:, :, 1], lines[:, :, 2]
    codes = np.empty((panels, units, 4, PANEL, 4), np.int64)  # ..., quarter of the unit, r, j
    low_parts = [first & 15, first >> 4, second & 15, second >> 4]
    for quarter in range(4):
        codes[:, :, quarter] = low_parts[quarter] | (((high >> (2 * quarter)) & 3) << 4)
    # input k = 16 * unit + 4 * quarter + j of row 16 * panel + r
    return codes.transpose(0, 3, 1, 2, 4).reshape(panels * PANEL, cols)


def unpack_scales(block_scales, rows, cols):
    panels = (rows + PANEL - 1) // PANEL
    blocks = cols // GROUP
    scales = block_scales.reshape(panels, blocks, PANEL).astype(np.float32)
    return scales.transpose(0, 2, 1).reshape(panels * PANEL, blocks)


def main():
    directory, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if cols % GROUP:
        raise SystemExit(f"COLS must be a multiple of {GROUP}")
    original = np.fromfile(f"{directory}/original.f32", np.float32).reshape(rows, cols)
    block_codes, block_scales = split_panels(np.fromfile(f"{directory}/packed.u8", np.uint8), rows, cols)
    codes = unpack_codes(block_codes, rows, cols)
    scales = unpack_scales(block_scales, rows, cols)

    if np.any(codes[rows:] != 32):
        raise SystemExit("a padding row holds a code other than 32")
    codes, scales = codes[:rows], scales[:rows]
    levels = (codes - 32).astype(np.float32)
    block_scale = np.repeat(scales, GROUP, axis=1)  # [rows, cols]
    dequantized = (levels * block_scale).astype(np.float32)

    with np.errstate(divide="ignore", invalid="ignore"):
        wanted = np.where(block_scale != 0, np.clip(np.rint(original / block_scale), -32, 31), 0)
    # The C++ rounds w times the inverse of the scale; a weight a hair from a half step
    # may round the other way. Anything else is a wrong code.
    off = np.abs(wanted - levels)
    if np.any(off > 1) or np.count_nonzero(off) > max(2, original.size // 10000):
        raise SystemExit(f"{np.count_nonzero(off)} codes are not their weight's rounding at the stored scale")

    blocks = original.reshape(rows, cols // GROUP, GROUP)
    index = np.argmax(np.abs(blocks), axis=2)
    extreme = np.take_along_axis(blocks, index[:, :, None], axis=2)
    absmax_scale = (extreme / -32.0).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        absmax_levels = np.where(absmax_scale != 0, np.clip(np.rint(blocks / absmax_scale), -32, 31), 0)
    absmax_error = np.sum((blocks - absmax_levels * absmax_scale) ** 2, dtype=np.float64)
    ours_error = np.sum((original - dequantized) ** 2, dtype=np.float64)
    print(f"squared error: ours {ours_error:.6g}, absmax {absmax_error:.6g} (ratio {ours_error / absmax_error:.3f})")
    if ours_error > absmax_error * 1.001:
        raise SystemExit("the chosen scales leave more error than the absmax rule")
    dequantized.tofile(f"{directory}/dequantized.f32")


if __name__ == "__main__":
    main()
