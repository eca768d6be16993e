"""FastDeploy's ERNIE-4.5-VL image preprocessing, restated in numpy + Pillow for
tests/vision/preprocess_test.cpp (sources: docs/vl-model-notes.md §3): smart_resize as
fastdeploy/input/image_processors/common.py has it, Pillow BICUBIC, then the
reshape/transpose patchification of AdaptiveImageProcessor._preprocess and the fp32 CLIP
normalisation of extract_vision_features_ernie.

Usage: vl_preprocess_reference.py OUT_DIR
Writes OUT_DIR/sizes.txt ("H W -> H' W'" per line), and for each test image
OUT_DIR/<name>.png, OUT_DIR/<name>.patches.f32 and a line in OUT_DIR/images.txt:
"name grid_h grid_w".
"""
import math
import os
import random
import sys

import numpy as np
from PIL import Image

FACTOR, MIN_PIXELS, MAX_PIXELS, MAX_RATIO = 28, 4 * 28 * 28, 6177 * 28 * 28, 200
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)


def round_by_factor(n, f):
    return round(n / f) * f


def floor_by_factor(n, f):
    return math.floor(n / f) * f


def ceil_by_factor(n, f):
    return math.ceil(n / f) * f


def smart_resize(height, width):
    if max(height, width) / min(height, width) > MAX_RATIO:
        if height > width:
            new_width = max(FACTOR, round_by_factor(width, FACTOR))
            new_height = floor_by_factor(new_width * MAX_RATIO, FACTOR)
        else:
            new_height = max(FACTOR, round_by_factor(height, FACTOR))
            new_width = floor_by_factor(new_height * MAX_RATIO, FACTOR)
        height, width = new_height, new_width
    h_bar = max(FACTOR, round_by_factor(height, FACTOR))
    w_bar = max(FACTOR, round_by_factor(width, FACTOR))
    if h_bar * w_bar > MAX_PIXELS:
        beta = math.sqrt((height * width) / MAX_PIXELS)
        h_bar = floor_by_factor(height / beta, FACTOR)
        w_bar = floor_by_factor(width / beta, FACTOR)
    elif h_bar * w_bar < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (height * width))
        h_bar = ceil_by_factor(height * beta, FACTOR)
        w_bar = ceil_by_factor(width * beta, FACTOR)
    return max(FACTOR, h_bar), max(FACTOR, w_bar)


def patches(image):
    h, w = smart_resize(image.height, image.width)
    pixels = np.asarray(image.resize((w, h), Image.BICUBIC), dtype=np.uint8)  # [H, W, C]
    stack = pixels.transpose(2, 0, 1)[None]                                   # [T=1, C, H, W]
    p, m = 14, 2
    gh, gw = h // p, w // p
    x = stack.reshape(1, 3, gh // m, m, p, gw // m, m, p).transpose(0, 2, 5, 3, 6, 1, 4, 7)
    flat = x.reshape(gh * gw, 3 * p * p).astype(np.float32)
    scale = np.float32(1 / 255)
    mean = np.repeat(MEAN, p * p)
    std = np.repeat(STD, p * p)
    return gh, gw, ((scale * flat - mean) / std).astype(np.float32)


def main():
    out = sys.argv[1]
    sizes = [(1, 1), (27, 27), (41, 97), (100, 100), (42, 42), (70, 70), (14, 2000), (3000, 10),
             (768, 1024), (1080, 1920), (4000, 3000), (10000, 10000), (55, 57), (126, 378)]
    with open(os.path.join(out, "sizes.txt"), "w") as f:
        for h, w in sizes:
            f.write("%d %d %d %d\n" % ((h, w) + smart_resize(h, w)))
    rng = random.Random(5)
    lines = []
    for name, (w, h) in {"small": (40, 30), "odd": (97, 41), "photo": (320, 240)}.items():
        image = Image.new("RGB", (w, h))
        image.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(w * h)])
        image.save(os.path.join(out, name + ".png"))
        gh, gw, values = patches(image)
        values.tofile(os.path.join(out, name + ".patches.f32"))
        lines.append("%s %d %d" % (name, gh, gw))
    with open(os.path.join(out, "images.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
