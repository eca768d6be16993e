// ERNIE-4.5-VL's vision tower (docs/vl-model-notes.md §4, §5): the DFNRope vision
// transformer over an image's (or a video's frames') patches, then the resampler that
// merges 2x2 patches and pairs of frames into tokens of the text decoder's width. The
// rows it returns replace the embeddings of the <|IMAGE_PLACEHOLDER|> tokens, in order.
#pragma once

#include <span>
#include <vector>

#include "model/config.h"
#include "model/ernie_weights.h"
#include "util/thread_pool.h"
#include "vision/preprocess.h"

namespace ernie {

class VisionEncoder {
 public:
  // `config` must describe a VL model and `weights` its vision tower; both must outlive
  // the encoder, as must `pool`, which runs the kernels.
  VisionEncoder(const ModelConfig& config, const VisionTowerWeights& weights, ThreadPool& pool);

  // Tokens the decoder sees for patches of this grid: gh·gw/4 per image, and per pair of
  // frames for a video.
  static int64_t num_tokens(int grid_t, int grid_h, int grid_w);

  // The features [num_tokens, hidden_size] of one image (grid_t = 1) or video (grid_t
  // even). Throws for a grid the model cannot take (odd sides, odd frame count).
  std::vector<float> encode(const ImagePatches& patches);

  // The two halves, for tests: the ViT's output [patches, vision hidden] and the
  // resampler applied to it.
  std::vector<float> transformer(const ImagePatches& patches);
  std::vector<float> resample(const ImagePatches& patches, std::span<const float> vit_output);

 private:
  void check_grid(const ImagePatches& patches) const;
  // y[n, out] = x · Wᵀ + b.
  void linear(const BiasedLinear& layer, const float* x, int64_t n, float* y);
  void block(const VisionBlockWeights& weights, const ImagePatches& patches, const float* rotations, float* x);

  const ModelConfig& config_;
  const VisionConfig& vision_;
  const VisionTowerWeights& weights_;
  ThreadPool& pool_;
  std::vector<float> inv_freq_;  // the 2-D RoPE's frequencies, head_dim / 4 of them
};

}  // namespace ernie
