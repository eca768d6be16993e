"""Pillow's answers for tests/vision/image_test.cpp: writes test images in several
formats, and for each the pixels Pillow decodes (convert("RGB")) and its bicubic resizes.

Usage: pil_reference.py OUT_DIR
Writes OUT_DIR/<name>.<ext> (the encoded image), OUT_DIR/<name>.rgb (Pillow's decoded
RGB bytes) and OUT_DIR/<name>.<W>x<H>.rgb (Pillow's Image.resize((W, H), BICUBIC)), and
OUT_DIR/cases.txt with one line per case: name ext width height W1xH1 W2xH2 ...
"""
import os
import random
import sys

from PIL import Image


def pattern(width, height, seed):
    """Noise over gradients and hard edges: every filter tap matters somewhere."""
    rng = random.Random(seed)
    image = Image.new("RGB", (width, height))
    pixels = image.load()
    for y in range(height):
        for x in range(width):
            edge = 255 if (x // 7 + y // 5) % 2 else 0
            pixels[x, y] = ((x * 255 // max(1, width - 1) + rng.randrange(40)) % 256,
                            (y * 255 // max(1, height - 1)) ^ rng.randrange(16),
                            edge if rng.random() < 0.8 else rng.randrange(256))
    return image


def main():
    out = sys.argv[1]
    cases = []
    shapes = [("wide", 97, 41, [(28, 28), (56, 14), (200, 90), (97, 20), (40, 41)]),
              ("tall", 33, 120, [(14, 56), (66, 240), (33, 7), (1, 1)]),
              ("tiny", 3, 2, [(28, 28), (1, 1)])]
    for index, (name, width, height, sizes) in enumerate(shapes):
        base = pattern(width, height, index)
        variants = [("png", base, {}), ("jpg", base, {"quality": 90}), ("webp", base, {"lossless": True}),
                    ("webp", base, {"quality": 80}),
                    ("png", base.convert("L"), {}), ("png", base.convert("P"), {}),
                    ("png", Image.merge("RGBA", (*base.split(), base.convert("L"))), {}),
                    ("gif", base.convert("P"), {}), ("gif", base.convert("P"), {"interlace": True}),
                    ("bmp", base, {}), ("bmp", base.convert("P"), {}), ("bmp", base.convert("RGBA"), {})]
        for number, (ext, image, options) in enumerate(variants):
            case = f"{name}{number}"
            path = os.path.join(out, f"{case}.{ext}")
            image.save(path, **options)
            decoded = Image.open(path).convert("RGB")
            with open(os.path.join(out, f"{case}.rgb"), "wb") as f:
                f.write(decoded.tobytes())
            for w, h in sizes:
                with open(os.path.join(out, f"{case}.{w}x{h}.rgb"), "wb") as f:
                    f.write(decoded.resize((w, h), Image.BICUBIC).tobytes())
            cases.append(" ".join([case, ext, str(width), str(height)] + [f"{w}x{h}" for w, h in sizes]))
    with open(os.path.join(out, "cases.txt"), "w") as f:
        f.write("\n".join(cases) + "\n")


if __name__ == "__main__":
    main()
