// Images as the VL preprocessor sees them: 8-bit RGB, decoded from the bytes a client
// sent (JPEG, PNG, WebP, GIF's first frame, uncompressed BMP) with the libraries Pillow uses
// where the format is lossy (libjpeg-turbo, libwebp), so that pixels equal Pillow's.
// Every decode is bounded: the header's size is checked against ImageLimits before any
// pixel buffer is made, so a decompression bomb costs nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ernie {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel

  const uint8_t* pixel(int x, int y) const { return rgb.data() + (static_cast<size_t>(y) * width + x) * 3; }
};

struct ImageLimits {
  int64_t max_pixels = 64LL * 1024 * 1024;  // width × height; beyond it the image is refused unread
  int max_side = 32768;
  size_t max_bytes = 32u << 20;  // of the encoded file
};

// Decodes `bytes`, whatever the format (recognised by its signature). Throws
// ernie::Error saying what was wrong: not an image (naming the formats read), truncated
// or corrupt data, a zero or oversized dimension (with the limit), an unsupported
// variant. Transparent images are composited onto nothing: alpha is dropped, as Pillow's
// convert("RGB") does.
Image decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits = {});

// Pillow's Image.resize(..., BICUBIC) on an RGB image, to the byte: separable
// convolution with the a = -0.5 cubic widened by the scale when shrinking, 22-bit
// fixed-point coefficients, rows first, each pass rounded and clipped to 8 bits.
Image resize_bicubic(const Image& image, int width, int height);

}  // namespace ernie
