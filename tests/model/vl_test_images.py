"""Writes the images of tests/model/vl_reference_test.cpp into OUT_DIR with Pillow:
smooth colour fields with some structure (so resizing and attention have something to
work on), in several sizes and aspect ratios, PNG and JPEG, the frames of a short clip,
and an animated GIF (40 frames at 10 a second) with the frames FastDeploy samples from it
(tests/vision/video_reference.py's restatement), as Pillow decodes them and with their
timestamps drawn (tests/vision/timestamp_reference.py), listed in clip_frames.json.

Usage: vl_test_images.py OUT_DIR
"""
import json
import os
import sys

import numpy as np
from PIL import Image, ImageSequence

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "vision"))
from video_reference import frame_indices  # noqa: E402
from timestamp_reference import render, timestamp_converting  # noqa: E402

FONT = "/usr/share/fonts/truetype/roboto/unhinted/RobotoTTF/Roboto-Regular.ttf"


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
    with Image.open(gif) as opened:
        decoded = [frame.convert("RGB") for frame in ImageSequence.Iterator(opened)]
    # FastDeploy's load_video: the sampled frames, each with its time drawn on it.
    vlen, fps = len(decoded), 10.0
    duration = vlen / fps
    paths = []
    for index in frame_indices(vlen, fps, 2.0, 16, 180):
        path = os.path.join(out_dir, "clip%02d.png" % index)
        render(decoded[index], "time: " + timestamp_converting(index * duration / vlen), FONT).save(path)
        paths.append(path)
    with open(os.path.join(out_dir, "clip_frames.json"), "w") as f:
        json.dump(paths, f)


if __name__ == "__main__":
    main(sys.argv[1])
