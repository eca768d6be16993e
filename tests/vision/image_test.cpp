// Image decoding (JPEG, PNG, WebP, GIF, BMP) and bicubic resizing against Pillow
// (tests/vision/pil_reference.py, run with Debian's python3-pil, which decodes with the
// same libjpeg-turbo and libwebp): the
// decoded pixels and every resize must equal Pillow's byte for byte. And hostile files
// (not images, truncated, zero-sized, huge) are refused with a reason, never decoded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/test_support.h"
#include "util/error.h"
#include "vision/image.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;

size_t differing_bytes(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += a[i] != b[i];
  return count;
}

TEST(ImageTest, DecodingAndBicubicResizeEqualPillow) {
  testing::TempDir temp;
  const std::string command = testing::python3() + " " + std::string(ERNIE_SOURCE_DIR) +
                              "/tests/vision/pil_reference.py " + temp.path();
  const testing::CommandResult result = testing::run_shell(command);
  ASSERT_EQ(result.exit_code, 0) << command << "\n" << result.output;
  std::ifstream cases(temp.file("cases.txt"));
  int checked = 0;
  for (std::string line; std::getline(cases, line);) {
    std::istringstream fields(line);
    std::string name, ext;
    int width = 0, height = 0;
    fields >> name >> ext >> width >> height;
    SCOPED_TRACE(name + "." + ext);
    const Image image = decode_image(testing::read_bytes_file(temp.file(name + "." + ext)));
    ASSERT_EQ(image.width, width);
    ASSERT_EQ(image.height, height);
    EXPECT_EQ(differing_bytes(image.rgb, testing::read_bytes_file(temp.file(name + ".rgb"))), 0u) << "decoded pixels";
    for (std::string size; fields >> size;) {
      const int w = std::stoi(size.substr(0, size.find('x'))), h = std::stoi(size.substr(size.find('x') + 1));
      const Image resized = resize_bicubic(image, w, h);
      EXPECT_EQ(differing_bytes(resized.rgb, testing::read_bytes_file(temp.file(name + "." + size + ".rgb"))), 0u) << "resize to " << size;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 11 * 12) << "every case was read";
}

TEST(ImageTest, HostileFilesAreRefusedWithAReason) {
  testing::TempDir temp;
  ASSERT_EQ(testing::run_shell(testing::python3() + " " + std::string(ERNIE_SOURCE_DIR) +
                               "/tests/vision/pil_reference.py " + temp.path())
                .exit_code,
            0);
  const auto error = [](const std::vector<uint8_t>& bytes, const ImageLimits& limits = {}) {
    return testing::error_message([&] { decode_image(bytes, limits); });
  };
  EXPECT_THAT(error({'h', 'e', 'l', 'l', 'o'}), HasSubstr("not an image"));
  EXPECT_THAT(error({}), HasSubstr("not an image"));
  for (const char* ext : {"png", "jpg"}) {
    std::vector<uint8_t> bytes = testing::read_bytes_file(temp.file(std::string(ext) == "png" ? "wide0.png" : "wide1.jpg"));
    bytes.resize(bytes.size() / 2);
    EXPECT_THAT(error(bytes), HasSubstr("could not be decoded")) << ext << " truncated";
  }
  for (const char* file : {"wide7.gif", "wide9.bmp"}) {
    std::vector<uint8_t> bytes = testing::read_bytes_file(temp.file(file));
    bytes.resize(bytes.size() / 2);
    EXPECT_THAT(error(bytes), ::testing::AnyOf(HasSubstr("truncated"), HasSubstr("could not be decoded"))) << file;
  }
  const std::vector<uint8_t> webp = testing::read_bytes_file(temp.file("wide2.webp"));
  EXPECT_THAT(error(std::vector<uint8_t>(webp.begin(), webp.begin() + static_cast<long>(webp.size() / 2))),
              HasSubstr("WebP"));
  // Sizes are judged from the header, before any pixel buffer exists.
  ImageLimits small;
  small.max_pixels = 1000;
  for (const char* file : {"wide0.png", "wide1.jpg", "wide2.webp", "wide7.gif", "wide9.bmp"})
    EXPECT_THAT(error(testing::read_bytes_file(temp.file(file)), small), HasSubstr("the limit is 1000")) << file;
  small.max_side = 50;
  small.max_pixels = 1 << 20;
  EXPECT_THAT(error(testing::read_bytes_file(temp.file("wide0.png")), small), HasSubstr("no side may exceed 50"));
  // A PNG header that claims 100000 x 100000 pixels.
  std::vector<uint8_t> bomb = testing::read_bytes_file(temp.file("wide0.png"));
  const uint8_t huge[8] = {0x00, 0x01, 0x86, 0xA0, 0x00, 0x01, 0x86, 0xA0};
  std::copy(std::begin(huge), std::end(huge), bomb.begin() + 16);
  EXPECT_THAT(error(bomb), ::testing::AnyOf(HasSubstr("pixels"), HasSubstr("could not be decoded")));
  ImageLimits tiny_file;
  tiny_file.max_bytes = 10;
  EXPECT_THAT(error(testing::read_bytes_file(temp.file("wide0.png")), tiny_file), HasSubstr("the limit is 10"));
  EXPECT_THAT(testing::error_message([] { resize_bicubic(Image{2, 2, std::vector<uint8_t>(12)}, 0, 3); }),
              HasSubstr("0x3"));
}

}  // namespace
}  // namespace ernie
