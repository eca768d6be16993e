"""FastDeploy's video frame sampling restated with numpy (fastdeploy/input/utils/video.py
get_frame_indices and ErnieEncoding.set_video_frame_args, docs/vl-model-notes.md §8.1),
and a short animated GIF with Pillow's decoding of each of its frames, for
tests/vision/video_test.cpp.

Usage: video_reference.py OUT_DIR
Writes OUT_DIR/indices.json ([{"frames", "fps", "target_fps", "min", "max", "indices"}]),
OUT_DIR/clip.gif (20 frames of 64x48 at 4 frames a second) and OUT_DIR/frameNN.png, the
RGB frames Pillow decodes from clip.gif.
"""
import json
import os
import sys

import numpy as np
from PIL import Image, ImageSequence


def frame_indices(vlen, input_fps, target_fps, min_frames, max_frames):
    # set_video_frame_args: clamp the count, switching from the fps rule to a fixed count.
    duration = vlen / input_fps
    frames_to_extract = int(duration * target_fps)
    target_frames = -1
    if min_frames > 0 and frames_to_extract < min_frames:
        target_frames, target_fps = min_frames, -1
    if max_frames > 0 and frames_to_extract > max_frames:
        target_frames, target_fps = max_frames, -1
    # get_frame_indices, frames_sample="leading".
    if target_frames > 0:
        acc_samples = min(target_frames, vlen)
        intervals = np.linspace(start=0, stop=vlen, num=acc_samples + 1).astype(int)
        return [int(intervals[i]) for i in range(len(intervals) - 1)]
    delta = 1 / target_fps
    frame_seconds = np.arange(0, duration, delta)
    indices = np.around(frame_seconds * input_fps).astype(int)
    return [int(i) for i in indices if i < vlen]


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    cases = []
    for vlen, fps, target, lo, hi in [(20, 4.0, 2.0, 16, 180), (300, 30.0, 2.0, 16, 180), (3000, 25.0, 2.0, 16, 180),
                                      (1000, 29.97, 2.0, 16, 180), (7, 30.0, 2.0, 16, 180), (601, 24.0, 2.0, 4, 30),
                                      (450, 15.0, 1.0, 2, 100), (100, 10.0, 0.5, 0, 0)]:
        cases.append({"frames": vlen, "fps": fps, "target_fps": target, "min": lo, "max": hi,
                      "indices": frame_indices(vlen, fps, target, lo, hi)})
    with open(os.path.join(out_dir, "indices.json"), "w") as f:
        json.dump(cases, f)
    rng = np.random.default_rng(5)
    frames = []
    for i in range(20):
        y, x = np.mgrid[0:48, 0:64]
        base = np.stack([(x * 4 + i * 12) % 256, (y * 5 + i * 7) % 256, ((x + y) * 3 + i * 20) % 256], axis=-1)
        noisy = np.clip(base + rng.normal(0, 10, base.shape), 0, 255).astype(np.uint8)
        frames.append(Image.fromarray(noisy, "RGB"))
    path = os.path.join(out_dir, "clip.gif")
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=250, loop=0, optimize=False, disposal=1)
    with Image.open(path) as clip:
        for i, frame in enumerate(ImageSequence.Iterator(clip)):
            frame.convert("RGB").save(os.path.join(out_dir, "frame%02d.png" % i))


if __name__ == "__main__":
    main(sys.argv[1])
