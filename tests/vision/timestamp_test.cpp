// Video timestamps drawn as FastDeploy draws them with Pillow (tests/vision/
// timestamp_reference.py runs FastDeploy's render_timestamp with Debian's python3-pil and
// the same Roboto file): frames of several sizes, gray and noisy, byte for byte.
#include "vision/timestamp_render.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/test_support.h"

namespace ernie {
namespace {

TEST(TimestampLabel, FormatsLikeFastDeploy) {
  EXPECT_EQ(timestamp_label(0), "time: 00:00:00.00");
  EXPECT_EQ(timestamp_label(1.5), "time: 00:00:01.50");
  EXPECT_EQ(timestamp_label(83.5), "time: 00:01:23.50");
  EXPECT_EQ(timestamp_label(3725.25), "time: 01:02:05.25");
  EXPECT_EQ(timestamp_label(59.996), "time: 00:00:60.00");  // Python's f"{59.996:05.02f}" too
}

TEST(TimestampRender, DrawsWhatPillowDraws) {
  testing::TempDir dir;
  const testing::CommandResult result =
      testing::run_shell(testing::python3() + " " + std::string(ERNIE_SOURCE_DIR) + "/tests/vision/timestamp_reference.py " +
                         kTimestampFontPath + " " + dir.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const TimestampFont font;
  std::istringstream cases(testing::read_file(dir.file("cases.txt")));
  int checked = 0;
  for (std::string name; cases >> name;) {
    double seconds = 0;
    cases >> seconds;
    Image frame = decode_image(testing::read_bytes_file(dir.file(name + ".base.png")));
    const Image drawn = decode_image(testing::read_bytes_file(dir.file(name + ".drawn.png")));
    const std::vector<uint8_t> before = frame.rgb;
    font.draw(frame, seconds);
    size_t differing = 0;
    for (size_t i = 0; i < frame.rgb.size(); ++i) differing += frame.rgb[i] != drawn.rgb[i];
    EXPECT_EQ(differing, 0u) << name << ": " << differing << " of " << frame.rgb.size() << " bytes differ";
    EXPECT_NE(frame.rgb, before) << name << ": nothing drawn";
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

}  // namespace
}  // namespace ernie
