// ERNIE-4.5-VL's 3-D RoPE positions of a prompt (docs/vl-model-notes.md §6.2, following
// FastDeploy's ErnieEncoding): a text token at p is (p, p, p); the k-th run of
// <|IMAGE_PLACEHOLDER|> tokens, standing for item k's merged grid of T' x H' x W'
// tokens, starts at s and puts token (t, r, c) at (s + t, s + r, s + c); the token after
// it continues at s + max(T', H', W'). Generated tokens continue from the prompt's next
// position, so from then on the RoPE position runs behind the cache position by a fixed
// offset.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ernie {

// An image (frames = 1) or a video's patch grid, before merging.
struct VisualGrid {
  int frames = 1;
  int height = 0;  // patches
  int width = 0;
};

// Tokens an item becomes: (H/2)·(W/2), per pair of frames for a video.
int64_t visual_token_count(const VisualGrid& grid);

struct RopePositions {
  std::vector<int32_t> thw;  // 3 per token
  int64_t next = 0;          // the position of the token after the prompt
};

// Throws unless the placeholder runs match the items in number and length.
RopePositions multimodal_rope_positions(std::span<const int32_t> tokens, int32_t placeholder_id,
                                        std::span<const VisualGrid> items);

}  // namespace ernie
