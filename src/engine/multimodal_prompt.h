// An ERNIE-4.5-VL prompt's images and videos, encoded before the request reaches the
// engine (so the engine thread never runs the vision encoder) and kept with the request:
// a prompt chunk takes its placeholder rows from it, and so does a recomputation after
// preemption. It also gives the 3-D RoPE positions and what the prefix cache compares in
// place of the placeholder tokens, so the same image in a later turn is a cache hit and a
// different one never is.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/multimodal_positions.h"

namespace ernie {

// One image or video after the vision encoder.
struct EncodedVisual {
  VisualGrid grid;
  std::vector<float> features;  // [visual_token_count(grid), hidden_size]
  uint64_t content_hash = 0;    // of the model's input pixels (after resizing), and the grid
};

struct MultimodalPrompt {
  int64_t hidden_size = 0;
  int64_t prompt_length = 0;
  std::vector<float> features;          // every item's rows, in prompt order
  std::vector<int32_t> feature_row;     // per prompt token: its row of `features`, or -1
  std::vector<int32_t> rope_positions;  // (t, h, w) per prompt token
  // A token past the prompt at cache index i has the RoPE position i + position_delta (<= 0:
  // an image's tokens share positions).
  int64_t position_delta = 0;
  // Per prompt token, what the prefix cache hashes and compares: the token, or for a
  // placeholder a negative key of its item's content and its row (real ids are >= 0).
  std::vector<int32_t> cache_identity;

  bool has_features(int64_t index) const { return index < prompt_length && feature_row[static_cast<size_t>(index)] >= 0; }
  const float* feature(int64_t index) const {
    return features.data() + static_cast<int64_t>(feature_row[static_cast<size_t>(index)]) * hidden_size;
  }
  // The (t, h, w) RoPE position of the token at cache index `index`.
  void position(int64_t index, int32_t* thw) const;
};

// Joins the tokens (each item's placeholder run in order) with the encoded items. Throws
// when runs and items do not match.
std::shared_ptr<const MultimodalPrompt> make_multimodal_prompt(std::span<const int32_t> tokens, int32_t placeholder_id,
                                                               int64_t hidden_size, std::vector<EncodedVisual> items);

// A 64-bit hash of the encoder's input (FNV-1a over the grid and the patch values' bytes).
uint64_t visual_content_hash(int frames, int grid_h, int grid_w, std::span<const float> values);

}  // namespace ernie
