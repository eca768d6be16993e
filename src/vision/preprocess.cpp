#include "vision/preprocess.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace ernie {
namespace {

// Python's round(): half to even (std::nearbyint under the default rounding mode).
int round_by_factor(double value, int factor) { return static_cast<int>(std::nearbyint(value / factor)) * factor; }
int floor_by_factor(double value, int factor) { return static_cast<int>(std::floor(value / factor)) * factor; }
int ceil_by_factor(double value, int factor) { return static_cast<int>(std::ceil(value / factor)) * factor; }

}  // namespace

ResizedSize smart_resize(int height, int width, const VisionPreprocessConfig& config) {
  if (height < 1 || width < 1) fail("cannot size an image of ", width, "x", height);
  const int factor = config.factor();
  double h = height, w = width;
  // A very long image first has its long side clamped to max_aspect_ratio x the short.
  if (std::max(h, w) / std::min(h, w) > config.max_aspect_ratio) {
    if (h > w) {
      w = std::max(factor, round_by_factor(w, factor));
      h = floor_by_factor(w * config.max_aspect_ratio, factor);
    } else {
      h = std::max(factor, round_by_factor(h, factor));
      w = floor_by_factor(h * config.max_aspect_ratio, factor);
    }
  }
  int h_bar = std::max(factor, round_by_factor(h, factor));
  int w_bar = std::max(factor, round_by_factor(w, factor));
  if (static_cast<int64_t>(h_bar) * w_bar > config.max_pixels) {
    const double beta = std::sqrt(h * w / static_cast<double>(config.max_pixels));
    h_bar = floor_by_factor(h / beta, factor);
    w_bar = floor_by_factor(w / beta, factor);
  } else if (static_cast<int64_t>(h_bar) * w_bar < config.min_pixels) {
    const double beta = std::sqrt(static_cast<double>(config.min_pixels) / (h * w));
    h_bar = ceil_by_factor(h * beta, factor);
    w_bar = ceil_by_factor(w * beta, factor);
  }
  return {std::max(factor, w_bar), std::max(factor, h_bar)};
}

ImagePatches preprocess_image(const Image& image, const VisionPreprocessConfig& config) {
  const ResizedSize size = smart_resize(image.height, image.width, config);
  const Image resized = resize_bicubic(image, size.width, size.height);
  const int p = config.patch_size, m = config.merge_size;
  ImagePatches patches;
  patches.grid_h = size.height / p;
  patches.grid_w = size.width / p;
  const int64_t row_size = 3LL * p * p;
  patches.values.resize(static_cast<size_t>(patches.num_patches() * row_size));
  int64_t row = 0;
  for (int window_r = 0; window_r < patches.grid_h / m; ++window_r)
    for (int window_c = 0; window_c < patches.grid_w / m; ++window_c)
      for (int in_r = 0; in_r < m; ++in_r)
        for (int in_c = 0; in_c < m; ++in_c, ++row) {
          const int top = (window_r * m + in_r) * p, left = (window_c * m + in_c) * p;
          float* out = patches.values.data() + row * row_size;
          for (int c = 0; c < 3; ++c)
            for (int y = 0; y < p; ++y)
              for (int x = 0; x < p; ++x)
                *out++ = (static_cast<float>(resized.pixel(left + x, top + y)[c]) * (1.0f / 255.0f) - config.mean[c]) /
                         config.std[c];
        }
  return patches;
}

}  // namespace ernie
