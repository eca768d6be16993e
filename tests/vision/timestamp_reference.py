"""FastDeploy's video timestamp rendering (fastdeploy/input/utils/render_timestamp.py,
docs/vl-model-notes.md §8.2) restated with Pillow, for tests/vision/timestamp_test.cpp:
"time: " + HH:MM:SS.ss in Roboto Regular at int(min(w, h) * 0.1), black with a white
stroke of int(font_size * 0.1), drawn at (0, 0).

Usage: timestamp_reference.py FONT OUT_DIR
Writes OUT_DIR/cases.txt ("name seconds" per line), OUT_DIR/<name>.base.png (the frame)
and OUT_DIR/<name>.drawn.png (the frame with its timestamp).
"""
import os
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFont


def timestamp_converting(seconds):
    hours = 0
    while seconds >= 3600:
        hours += 1
        seconds -= 3600
    mins = 0
    while seconds >= 60:
        mins += 1
        seconds -= 60
    return f"{int(hours):02d}:{int(mins):02d}:{seconds:05.02f}"


def render(image, number, font_path, rate=0.1):
    width, height = image.size
    font_size = int(min(width, height) * rate)
    outline_size = int(font_size * 0.1)
    font = ImageFont.truetype(font_path, font_size)
    draw = ImageDraw.Draw(image)
    draw.text((0, 0), number, font=font, fill=(0, 0, 0), stroke_width=outline_size, stroke_fill=(255, 255, 255))
    return image


def main(font_path, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(3)
    cases = [("gray640", 640, 480, 1.5, "gray"), ("noise300", 300, 200, 83.5, "noise"),
             ("hd", 1280, 720, 3725.25, "noise"), ("tall", 90, 160, 0.0, "gray"), ("tiny", 40, 30, 12.75, "noise"),
             ("wide", 1000, 120, 59.996, "noise")]
    with open(os.path.join(out_dir, "cases.txt"), "w") as listing:
        for name, width, height, seconds, kind in cases:
            if kind == "gray":
                pixels = np.full((height, width, 3), 128, dtype=np.uint8)
            else:
                pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            base = Image.fromarray(pixels, "RGB")
            base.save(os.path.join(out_dir, name + ".base.png"))
            render(base.copy(), "time: " + timestamp_converting(seconds), font_path).save(
                os.path.join(out_dir, name + ".drawn.png"))
            listing.write(f"{name} {seconds!r}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
