#include "model/multimodal_positions.h"

#include <algorithm>

#include "util/error.h"

namespace ernie {

int64_t visual_token_count(const VisualGrid& grid) {
  const int64_t per_frame = static_cast<int64_t>(grid.height / 2) * (grid.width / 2);
  return grid.frames == 1 ? per_frame : per_frame * (grid.frames / 2);
}

RopePositions multimodal_rope_positions(std::span<const int32_t> tokens, int32_t placeholder_id,
                                        std::span<const VisualGrid> items) {
  RopePositions result;
  result.thw.reserve(tokens.size() * 3);
  int64_t position = 0;
  size_t item = 0;
  for (size_t i = 0; i < tokens.size();) {
    if (tokens[i] != placeholder_id) {
      const auto p = static_cast<int32_t>(position++);
      result.thw.insert(result.thw.end(), {p, p, p});
      ++i;
      continue;
    }
    size_t run = 0;
    while (i + run < tokens.size() && tokens[i + run] == placeholder_id) ++run;
    if (item >= items.size())
      fail("the prompt has more image/video placeholder runs than the ", items.size(), " item(s) given");
    const VisualGrid& grid = items[item++];
    const int64_t expected = visual_token_count(grid);
    if (static_cast<int64_t>(run) != expected)
      fail("placeholder run ", item, " has ", run, " tokens but its ", grid.frames, "x", grid.height, "x", grid.width,
           " patch grid needs ", expected);
    const int frames = grid.frames == 1 ? 1 : grid.frames / 2, rows = grid.height / 2, cols = grid.width / 2;
    for (int t = 0; t < frames; ++t)
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
          result.thw.insert(result.thw.end(), {static_cast<int32_t>(position + t), static_cast<int32_t>(position + r),
                                               static_cast<int32_t>(position + c)});
    position += std::max({frames, rows, cols});
    i += run;
  }
  if (item != items.size())
    fail("the prompt has ", item, " image/video placeholder run(s) but ", items.size(), " item(s) were given");
  result.next = position;
  return result;
}

}  // namespace ernie
