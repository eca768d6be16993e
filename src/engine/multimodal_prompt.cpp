#include "engine/multimodal_prompt.h"

#include <cstring>

#include "util/error.h"
#include "util/hash.h"

namespace ernie {

void MultimodalPrompt::position(int64_t index, int32_t* thw) const {
  if (index < prompt_length) {
    std::memcpy(thw, rope_positions.data() + 3 * index, 3 * sizeof(int32_t));
    return;
  }
  const auto p = static_cast<int32_t>(index + position_delta);
  thw[0] = thw[1] = thw[2] = p;
}

uint64_t visual_content_hash(int frames, int grid_h, int grid_w, std::span<const float> values) {
  const int grid[3] = {frames, grid_h, grid_w};
  return fnv1a(values.data(), values.size_bytes(), fnv1a(grid, sizeof grid));
}

std::shared_ptr<const MultimodalPrompt> make_multimodal_prompt(std::span<const int32_t> tokens, int32_t placeholder_id,
                                                               int64_t hidden_size, std::vector<EncodedVisual> items) {
  std::vector<VisualGrid> grids;
  for (const EncodedVisual& item : items) {
    grids.push_back(item.grid);
    if (static_cast<int64_t>(item.features.size()) != visual_token_count(item.grid) * hidden_size)
      fail("an encoded image has ", item.features.size(), " values; its grid needs ",
           visual_token_count(item.grid) * hidden_size);
  }
  const RopePositions positions = multimodal_rope_positions(tokens, placeholder_id, grids);
  auto prompt = std::make_shared<MultimodalPrompt>();
  prompt->hidden_size = hidden_size;
  prompt->prompt_length = static_cast<int64_t>(tokens.size());
  prompt->rope_positions = positions.thw;
  prompt->position_delta = positions.next - prompt->prompt_length;
  prompt->feature_row.assign(tokens.size(), -1);
  prompt->cache_identity.assign(tokens.begin(), tokens.end());
  // Placeholder run k (already matched to item k above) takes item k's rows in order.
  size_t item = 0;
  int32_t row = 0, item_row = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] != placeholder_id) continue;
    if (row > 0 && tokens[i - 1] != placeholder_id) {
      ++item;
      item_row = 0;
    }
    prompt->feature_row[i] = row++;
    const uint64_t key = mix64(items[item].content_hash ^ mix64(static_cast<uint64_t>(item_row++) + 1));
    prompt->cache_identity[i] = static_cast<int32_t>(static_cast<uint32_t>(key) | 0x80000000u);
  }
  for (EncodedVisual& encoded : items)
    prompt->features.insert(prompt->features.end(), encoded.features.begin(), encoded.features.end());
  return prompt;
}

}  // namespace ernie
