// The serving side of images: the flags, which content parts are media, the limits, and
// the prompt's tokens with each item's placeholder run where the template put it.
#include "serving/multimodal_input.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "serving/openai_protocol.h"
#include "support/test_support.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;
using nlohmann::ordered_json;

std::string api_error(const std::function<void()>& action) {
  try {
    action();
  } catch (const ApiException& exception) {
    return exception.error.param + ": " + exception.error.message;
  }
  return "(no error)";
}

TEST(MultimodalOptions, ParsesFastDeploysFlags) {
  const MultimodalOptions defaults = parse_multimodal_options("", "");
  EXPECT_EQ(defaults.max_images, 16);
  EXPECT_EQ(defaults.video.min_pixels, 299 * 28 * 28);
  const MultimodalOptions options = parse_multimodal_options(
      R"({"image": 100, "video": 100})", R"({"image_max_pixels": 12845056, "video_max_pixels": 300000})");
  EXPECT_EQ(options.max_images, 100);
  EXPECT_EQ(options.max_videos, 100);
  EXPECT_EQ(options.image.max_pixels, 12845056);
  EXPECT_EQ(options.video.max_pixels, 300000);
  EXPECT_THAT(testing::error_message([] { parse_multimodal_options(R"({"audio": 1})", ""); }),
              HasSubstr("--limit-mm-per-prompt key \"audio\" is not known"));
  EXPECT_THAT(testing::error_message([] { parse_multimodal_options(R"({"image": -1})", ""); }),
              HasSubstr("must be an integer in 0..1000"));
  EXPECT_THAT(testing::error_message([] { parse_multimodal_options("", R"({"fps": 2})"); }),
              HasSubstr("--mm-processor-kwargs key \"fps\" is not known"));
  EXPECT_THAT(testing::error_message([] { parse_multimodal_options("", R"({"image_min_pixels": 5000, "image_max_pixels": 4000})"); }),
              HasSubstr("a minimum of 5000 pixels exceeds the maximum of 4000"));
  EXPECT_THAT(testing::error_message([] { parse_multimodal_options("[1]", ""); }), HasSubstr("expects a JSON object"));
}

TEST(CollectMedia, FindsImageAndVideoPartsInOrderWithinTheLimits) {
  const auto messages = ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:1"}}]},
    {"role": "assistant", "content": "b"},
    {"role": "user", "content": [{"type": "video_url", "video_url": {"url": "http://x/v.mp4"}},
                                 {"type": "image_url", "image_url": {"url": "data:2"}}]}])");
  MultimodalOptions options = parse_multimodal_options("", "");
  const std::vector<MediaItem> items = collect_media(messages, options, true);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].url, "data:1");
  EXPECT_EQ(items[0].field, "messages[1].content[1]");
  EXPECT_EQ(items[1].kind, MediaItem::Kind::kVideo);
  EXPECT_EQ(items[2].field, "messages[3].content[1]");
  options.max_images = 1;
  EXPECT_THAT(api_error([&] { collect_media(messages, options, true); }),
              HasSubstr("messages[3].content[1]: the request has more than 1 image(s)"));
  EXPECT_THAT(api_error([&] { collect_media(messages, parse_multimodal_options("", ""), false); }),
              HasSubstr("messages[1].content[1]: this model reads text only"));
  const auto with_options = ordered_json::parse(
      R"([{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "data:1", "fps": 1.5, "max_frames": 8}}]}])");
  const MediaItem video = collect_media(with_options, parse_multimodal_options("", ""), true).at(0);
  EXPECT_EQ(video.fps, 1.5);
  EXPECT_EQ(video.max_frames, 8);
  EXPECT_FALSE(video.min_frames.has_value());
  const auto bad_fps = ordered_json::parse(
      R"([{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "data:1", "fps": 0}}]}])");
  EXPECT_THAT(api_error([&] { collect_media(bad_fps, parse_multimodal_options("", ""), true); }),
              HasSubstr("video_url.fps must be a number in (0, 1000]"));
  const auto no_url = ordered_json::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": 7}}]}])");
  EXPECT_THAT(api_error([&] { collect_media(no_url, parse_multimodal_options("", ""), true); }), HasSubstr("needs {\"image_url\""));
}

TEST(TokenizeWithMedia, PutsEachItemsRunWhereTheTemplateWroteItsPlaceholder) {
  const Tokenizer tokenizer = Tokenizer::load(testing::golden_model_dir("tiny-dense"));
  const std::vector<MediaItem> items = {{MediaItem::Kind::kImage, "data:1", "messages[0].content[0]"},
                                        {MediaItem::Kind::kVideo, "data:2", "messages[0].content[1]"}};
  std::vector<EncodedVisual> encoded(2);
  encoded[0].grid = {1, 4, 6};  // 6 tokens
  encoded[1].grid = {4, 2, 2};  // 2 tokens
  const std::string rendered = "Look <|image@placeholder|> and <|video@placeholder|>!";
  const std::vector<int32_t> tokens = tokenize_with_media(rendered, tokenizer, items, encoded, 4000);
  std::vector<int32_t> expected = tokenizer.encode("Look ");
  expected.insert(expected.end(), 6, 4000);
  for (int32_t id : tokenizer.encode(" and ")) expected.push_back(id);
  expected.insert(expected.end(), 2, 4000);
  for (int32_t id : tokenizer.encode("!")) expected.push_back(id);
  EXPECT_EQ(tokens, expected);
  EXPECT_THAT(api_error([&] { tokenize_with_media("only <|image@placeholder|>", tokenizer, items, encoded, 4000); }),
              HasSubstr("placed 1 image/video placeholder(s) for 2 item(s)"));
  EXPECT_THAT(api_error([&] { tokenize_with_media("<|video@placeholder|><|image@placeholder|>", tokenizer, items, encoded, 4000); }),
              HasSubstr("messages[0].content[0]: the chat template placed a video placeholder"));
}

}  // namespace
}  // namespace ernie
