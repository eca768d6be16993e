"""Writes the images of tests/model/vl_reference_test.cpp into OUT_DIR with Pillow:
smooth colour fields with some structure (so resizing and attention have something to
work on), in several sizes and aspect ratios, PNG and JPEG, the frames of a short clip,
and an animated GIF (40 frames at 10 a second) with the frames FastDeploy samples from it
(tests/vision/video_reference.py's restatement), as Pillow decodes them, listed in
clip_frames.json.

Usage: vl_test_images.py OUT_DIR
"""
import json
import os
import sys

import numpy as np
from PIL import Image, ImageSequence

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "vision"))
from video_reference import frame_indices  # noqa: E402


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
    clip = [picture(100, 80, 100 + i) for i in range(40)]
    gif = os.path.join(out_dir, "clip.gif")
    clip[0].save(gif, save_all=True, append_images=clip[1:], duration=100, loop=0, optimize=False, disposal=1)
    decoded = []
    with Image.open(gif) as opened:
        for i, frame in enumerate(ImageSequence.Iterator(opened)):
            path = os.path.join(out_dir, "clip%02d.png" % i)
            frame.convert("RGB").save(path)
            decoded.append(path)
    sampled = frame_indices(len(decoded), 10.0, 2.0, 16, 180)
    with open(os.path.join(out_dir, "clip_frames.json"), "w") as f:
        json.dump([decoded[i] for i in sampled], f)


if __name__ == "__main__":
    main(sys.argv[1])
