// Internal to src/vision: one decoder per format, and the size check they share.
#pragma once

#include <cstdint>
#include <span>

#include "vision/image.h"

namespace ernie {

// Throws naming the format, the size and the limit it breaks.
void check_image_size(int64_t width, int64_t height, const ImageLimits& limits, const char* format);

Image decode_gif(std::span<const uint8_t> bytes, const ImageLimits& limits);
Image decode_bmp(std::span<const uint8_t> bytes, const ImageLimits& limits);

}  // namespace ernie
