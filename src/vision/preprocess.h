// ERNIE-4.5-VL's image preprocessing before the vision encoder (docs/vl-model-notes.md §3):
// the target size (FastDeploy's smart_resize: sides multiples of 28, pixel count within
// the limits, aspect ratio kept), Pillow's bicubic resize, then 14x14 patches in 2x2-window
// order, each flattened channel-major and normalised with CLIP's mean and std.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "vision/image.h"

namespace ernie {

struct VisionPreprocessConfig {
  int patch_size = 14;
  int merge_size = 2;                          // a 2x2 window of patches becomes one token
  int64_t min_pixels = 4LL * 28 * 28;          // images; videos use 299 and 1196 x 28 x 28 per frame
  int64_t max_pixels = 6177LL * 28 * 28;
  double max_aspect_ratio = 200;
  float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};  // OPENAI_CLIP_MEAN
  float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};  // OPENAI_CLIP_STD

  int factor() const { return patch_size * merge_size; }
};

struct ResizedSize {
  int width = 0;
  int height = 0;
};

// FastDeploy's smart_resize: each side rounded to a multiple of factor (Python's round,
// half to even), then scaled down into max_pixels or up to min_pixels with floor / ceil;
// an aspect ratio above max first clamps the long side. Throws for an empty image.
ResizedSize smart_resize(int height, int width, const VisionPreprocessConfig& config);

struct ImagePatches {
  int grid_t = 1;  // frames
  int grid_h = 0;  // patches down and across
  int grid_w = 0;
  // [grid_t * grid_h * grid_w][3 * patch * patch]: rows in (frame, window row, window
  // column, row in window, column in window) order; each row [channel][y][x], normalised.
  std::vector<float> values;
  int64_t num_patches() const { return static_cast<int64_t>(grid_t) * grid_h * grid_w; }
  // Tokens the language model sees: one per 2x2 window (and per two frames for video).
  int64_t num_tokens(int merge_size) const { return num_patches() / (merge_size * merge_size); }
};

// Resizes (smart_resize, Pillow bicubic) and cuts `image` into normalised patches.
ImagePatches preprocess_image(const Image& image, const VisionPreprocessConfig& config);

// A video's sampled frames: one smart_resize from the first frame's size (`config`
// carries the video pixel limits), every frame resized to it, and an odd count made even
// by repeating the last frame (FastDeploy). grid_t is the resulting frame count.
ImagePatches preprocess_video(std::span<const Image> frames, const VisionPreprocessConfig& config);
// The same for frames already resized to one smart_resize size (multiples of 28), so a
// decoder can resize each frame as it comes and keep only the small copy.
ImagePatches patchify_frames(std::span<const Image> resized_frames, const VisionPreprocessConfig& config);

}  // namespace ernie
