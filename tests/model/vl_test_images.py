"""Writes the images of tests/model/vl_reference_test.cpp into OUT_DIR with Pillow:
smooth colour fields with some structure (so resizing and attention have something to
work on), in several sizes and aspect ratios, PNG and JPEG, and the frames of a short clip.

Usage: vl_test_images.py OUT_DIR
"""
import os
import sys

import numpy as np
from PIL import Image


def picture(width, height, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    channels = []
    for c in range(3):
        fx, fy, phase = rng.uniform(0.02, 0.2), rng.uniform(0.02, 0.2), rng.uniform(0, 6.28)
        channels.append(127.5 + 100 * np.sin(fx * x + phase) * np.cos(fy * y - phase) + rng.normal(0, 12, (height, width)))
    return Image.fromarray(np.clip(np.stack(channels, axis=-1), 0, 255).astype(np.uint8), "RGB")


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    picture(20, 30, 1).save(os.path.join(out_dir, "small.png"))                 # below min_pixels: upscaled
    picture(300, 140, 2).save(os.path.join(out_dir, "wide.jpg"), quality=90)    # wide, JPEG
    picture(90, 250, 3).save(os.path.join(out_dir, "tall.png"))                 # tall
    picture(400, 300, 4).save(os.path.join(out_dir, "big.png"))                 # shrunk by a low max_pixels
    for i in range(5):                                                          # an odd frame count
        picture(100, 80, 10 + i).save(os.path.join(out_dir, "frame%d.png" % i))


if __name__ == "__main__":
    main(sys.argv[1])
