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

namespace {

// Appends one resized frame's patches (2x2-window order, channel-major, normalised).
void append_patches(const Image& resized, const VisionPreprocessConfig& config, std::vector<float>& values) {
  const int p = config.patch_size, m = config.merge_size;
  const int grid_h = resized.height / p, grid_w = resized.width / p;
  const int64_t row_size = 3LL * p * p;
  const size_t first = values.size();
  values.resize(first + static_cast<size_t>(static_cast<int64_t>(grid_h) * grid_w * row_size));
  float* out = values.data() + first;
  for (int window_r = 0; window_r < grid_h / m; ++window_r)
    for (int window_c = 0; window_c < grid_w / m; ++window_c)
      for (int in_r = 0; in_r < m; ++in_r)
        for (int in_c = 0; in_c < m; ++in_c) {
          const int top = (window_r * m + in_r) * p, left = (window_c * m + in_c) * p;
          for (int c = 0; c < 3; ++c)
            for (int y = 0; y < p; ++y)
              for (int x = 0; x < p; ++x)
                *out++ = (static_cast<float>(resized.pixel(left + x, top + y)[c]) * (1.0f / 255.0f) - config.mean[c]) /
                         config.std[c];
        }
}

}  // namespace

ImagePatches preprocess_image(const Image& image, const VisionPreprocessConfig& config) {
  const ResizedSize size = smart_resize(image.height, image.width, config);
  ImagePatches patches;
  patches.grid_h = size.height / config.patch_size;
  patches.grid_w = size.width / config.patch_size;
  append_patches(resize_bicubic(image, size.width, size.height), config, patches.values);
  return patches;
}

ImagePatches patchify_frames(std::span<const Image> frames, const VisionPreprocessConfig& config) {
  if (frames.empty()) fail("a video needs at least one frame");
  const int width = frames.front().width, height = frames.front().height;
  if (width % config.factor() != 0 || height % config.factor() != 0)
    fail("video frames of ", width, "x", height, " are not resized to multiples of ", config.factor());
  ImagePatches patches;
  patches.grid_t = static_cast<int>(frames.size() + frames.size() % 2);
  patches.grid_h = height / config.patch_size;
  patches.grid_w = width / config.patch_size;
  patches.values.reserve(static_cast<size_t>(patches.num_patches() * 3 * config.patch_size * config.patch_size));
  for (const Image& frame : frames) {
    if (frame.width != width || frame.height != height) fail("video frames differ in size");
    append_patches(frame, config, patches.values);
  }
  // An odd count is made even by repeating the last frame (FastDeploy's load_video).
  if (frames.size() % 2 != 0) append_patches(frames.back(), config, patches.values);
  return patches;
}

ImagePatches preprocess_video(std::span<const Image> frames, const VisionPreprocessConfig& config) {
  if (frames.empty()) fail("a video needs at least one frame");
  const ResizedSize size = smart_resize(frames.front().height, frames.front().width, config);
  std::vector<Image> resized;
  for (const Image& frame : frames) resized.push_back(resize_bicubic(frame, size.width, size.height));
  return patchify_frames(resized, config);
}

}  // namespace ernie
