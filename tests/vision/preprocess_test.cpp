// ERNIE-4.5-VL image preprocessing against FastDeploy's, restated in numpy + Pillow
// (tests/vision/vl_preprocess_reference.py): smart_resize sizes exactly, and the
// normalised patches of decoded PNGs bit for bit (the same fp32 operations in order).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/test_support.h"
#include "util/error.h"
#include "vision/preprocess.h"

namespace ernie {
namespace {

TEST(VisionPreprocessTest, SizesAndPatchesEqualFastDeploys) {
  testing::TempDir temp;
  const std::string command = testing::python3() + " " + std::string(ERNIE_SOURCE_DIR) +
                              "/tests/vision/vl_preprocess_reference.py " + temp.path();
  const testing::CommandResult result = testing::run_shell(command);
  ASSERT_EQ(result.exit_code, 0) << command << "\n" << result.output;
  const VisionPreprocessConfig config;
  std::ifstream sizes(temp.file("sizes.txt"));
  int checked = 0;
  for (int h, w, expected_h, expected_w; sizes >> h >> w >> expected_h >> expected_w; ++checked) {
    const ResizedSize size = smart_resize(h, w, config);
    EXPECT_EQ(size.height, expected_h) << h << "x" << w;
    EXPECT_EQ(size.width, expected_w) << h << "x" << w;
  }
  EXPECT_EQ(checked, 14);
  std::ifstream images(temp.file("images.txt"));
  int images_checked = 0;
  for (std::string name; images >> name; ++images_checked) {
    int grid_h = 0, grid_w = 0;
    images >> grid_h >> grid_w;
    const ImagePatches patches = preprocess_image(decode_image(testing::read_bytes_file(temp.file(name + ".png"))), config);
    EXPECT_EQ(patches.grid_h, grid_h) << name;
    EXPECT_EQ(patches.grid_w, grid_w) << name;
    const std::vector<float> expected = testing::read_f32_file(temp.file(name + ".patches.f32"));
    ASSERT_EQ(patches.values.size(), expected.size()) << name;
    size_t different = 0;
    for (size_t i = 0; i < expected.size(); ++i) different += patches.values[i] != expected[i];
    EXPECT_EQ(different, 0u) << name;
    EXPECT_EQ(patches.num_tokens(config.merge_size), static_cast<int64_t>(grid_h) * grid_w / 4);
  }
  EXPECT_EQ(images_checked, 3);
  EXPECT_THROW(smart_resize(0, 10, config), Error);
}

}  // namespace
}  // namespace ernie
