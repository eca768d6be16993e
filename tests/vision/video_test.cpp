// Video decoding (FFmpeg) and FastDeploy's frame sampling, against
// tests/vision/video_reference.py: the sampled indices as numpy computes them with
// FastDeploy's code, and the frames of an animated GIF as Pillow decodes them (palette
// images: exact, byte for byte).
#include "vision/video_decode.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;

class VideoTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    const testing::CommandResult result = testing::run_shell(
        testing::python3() + " " + std::string(ERNIE_SOURCE_DIR) + "/tests/vision/video_reference.py " + dir_->path());
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static testing::TempDir* dir_;
};
testing::TempDir* VideoTest::dir_ = nullptr;

TEST_F(VideoTest, SamplesTheFramesFastDeploySamples) {
  const auto cases = nlohmann::json::parse(testing::read_file(dir_->file("indices.json")));
  ASSERT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    VideoSampling sampling;
    sampling.fps = c.at("target_fps").get<double>();
    sampling.min_frames = c.at("min").get<int>();
    sampling.max_frames = c.at("max").get<int>();
    EXPECT_EQ(sample_frame_indices(c.at("frames").get<int64_t>(), c.at("fps").get<double>(), sampling),
              c.at("indices").get<std::vector<int64_t>>())
        << c.dump();
  }
}

TEST_F(VideoTest, DecodesTheSampledFramesLikePillow) {
  const std::vector<uint8_t> bytes = testing::read_bytes_file(dir_->file("clip.gif"));
  std::vector<Image> frames;
  std::vector<double> timestamps;
  size_t announced = 0;
  const VideoInfo info = decode_video_frames(
      bytes, VideoSampling{}, VideoLimits{}, [&](const VideoInfo&, size_t sampled) { announced = sampled; },
      [&](Image& frame, double timestamp) {
        frames.push_back(frame);
        timestamps.push_back(timestamp);
      });
  EXPECT_EQ(info.width, 64);
  EXPECT_EQ(info.height, 48);
  EXPECT_EQ(info.num_frames, 20);
  EXPECT_NEAR(info.fps, 4.0, 1e-6);
  // 5 s at 2 fps is 10 frames, below the minimum of 16: 16 spread evenly over 20.
  const std::vector<int64_t> expected = {0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 15, 16, 17, 18};
  ASSERT_EQ(announced, expected.size());
  ASSERT_EQ(frames.size(), expected.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "frame%02lld.png", static_cast<long long>(expected[i]));
    const Image pillow = decode_image(testing::read_bytes_file(dir_->file(name)));
    EXPECT_EQ(frames[i].rgb, pillow.rgb) << name;
    EXPECT_DOUBLE_EQ(timestamps[i], static_cast<double>(expected[i]) * 0.25) << name;
  }
}

TEST_F(VideoTest, RefusesWhatIsNotAVideoOrTooLarge) {
  const auto decode = [](const std::vector<uint8_t>& bytes, const VideoLimits& limits) {
    return testing::error_message([&] {
      decode_video_frames(bytes, VideoSampling{}, limits, [](const VideoInfo&, size_t) {}, [](Image&, double) {});
    });
  };
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'v', 'i', 'd', 'e', 'o'};
  EXPECT_THAT(decode(text, {}), HasSubstr("not a video FFmpeg can read"));
  std::vector<uint8_t> clip = testing::read_bytes_file(dir_->file("clip.gif"));
  VideoLimits small;
  small.frame.max_pixels = 1000;
  EXPECT_THAT(decode(clip, small), HasSubstr("the video's frames are 64x48 pixels; the limit is 1000"));
  VideoLimits few;
  few.max_source_frames = 10;
  EXPECT_THAT(decode(clip, few), HasSubstr("more than 10 frames"));
  clip.resize(clip.size() / 3);  // truncated: what is there decodes, the rest is missing
  std::vector<Image> frames;
  const std::string truncated = testing::error_message([&] {
    decode_video_frames(clip, VideoSampling{}, VideoLimits{}, [](const VideoInfo&, size_t) {},
                        [&](Image& frame, double) { frames.push_back(frame); });
  });
  EXPECT_LT(frames.size(), 16u) << truncated;
}

}  // namespace
}  // namespace ernie
