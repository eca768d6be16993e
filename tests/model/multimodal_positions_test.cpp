// ERNIE-4.5-VL's 3-D RoPE positions (docs/vl-model-notes.md §6.2), on prompts worked out
// by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/multimodal_positions.h"
#include "support/test_support.h"

namespace ernie {
namespace {

constexpr int32_t kPatch = 99;

TEST(MultimodalPositions, TextTokensSitOnTheDiagonal) {
  const std::vector<int32_t> tokens = {5, 6, 7};
  const RopePositions positions = multimodal_rope_positions(tokens, kPatch, {});
  EXPECT_EQ(positions.thw, (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(positions.next, 3);
}

TEST(MultimodalPositions, AnImageSpreadsOverRowsAndColumnsAndAdvancesByItsLongerSide) {
  // Text, START, a 4x6-patch image (2x3 tokens), END, text.
  std::vector<int32_t> tokens = {10, 11};
  tokens.insert(tokens.end(), 6, kPatch);
  tokens.insert(tokens.end(), {12, 13});
  const VisualGrid grid{1, 4, 6};
  EXPECT_EQ(visual_token_count(grid), 6);
  const RopePositions positions = multimodal_rope_positions(tokens, kPatch, std::vector<VisualGrid>{grid});
  EXPECT_EQ(positions.thw, (std::vector<int32_t>{0, 0, 0, 1, 1, 1,                               // text, START
                                                 2, 2, 2, 2, 2, 3, 2, 2, 4, 2, 3, 2, 2, 3, 3, 2, 3, 4,  // (t, row, col)
                                                 5, 5, 5, 6, 6, 6}));                             // END at 2 + 3
  EXPECT_EQ(positions.next, 7);
}

TEST(MultimodalPositions, AVideoTakesOneTemporalPositionPerPairOfFrames) {
  // 6 frames of 2x4 patches: 3 temporal steps of 1x2 tokens.
  std::vector<int32_t> tokens = {1};
  tokens.insert(tokens.end(), 6, kPatch);
  tokens.push_back(2);
  const VisualGrid grid{6, 2, 4};
  EXPECT_EQ(visual_token_count(grid), 6);
  const RopePositions positions = multimodal_rope_positions(tokens, kPatch, std::vector<VisualGrid>{grid});
  EXPECT_EQ(positions.thw, (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 1, 1, 2, 1, 2, 3, 1, 1, 3, 1, 2,
                                                 4, 4, 4}));  // END at 1 + max(3, 1, 2)
  EXPECT_EQ(positions.next, 5);
}

TEST(MultimodalPositions, RunsThatDoNotMatchTheItemsAreRefused) {
  std::vector<int32_t> tokens = {1};
  tokens.insert(tokens.end(), 5, kPatch);
  const std::vector<VisualGrid> grids = {{1, 4, 6}};
  EXPECT_THAT(testing::error_message([&] { multimodal_rope_positions(tokens, kPatch, grids); }),
              ::testing::HasSubstr("has 5 tokens but its 1x4x6 patch grid needs 6"));
  EXPECT_THAT(testing::error_message([&] { multimodal_rope_positions(tokens, kPatch, {}); }),
              ::testing::HasSubstr("more image/video placeholder runs"));
  const std::vector<int32_t> text = {1, 2};
  EXPECT_THAT(testing::error_message([&] { multimodal_rope_positions(text, kPatch, grids); }),
              ::testing::HasSubstr("0 image/video placeholder run(s) but 1 item(s)"));
}

}  // namespace
}  // namespace ernie
