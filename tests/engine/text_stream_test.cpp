#include "engine/text_stream.h"

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace ernie {
namespace {

class TextStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(testing::golden_model_dir("tiny-dense"))); }

  // Streams `text` token by token through a TextStream and returns what was emitted
  // before it stopped (or everything, with finish()).
  std::pair<std::string, bool> stream(const std::string& text, std::vector<std::string> stops, bool include) {
    TextStream stream(*tokenizer_, std::move(stops), include);
    std::string out;
    for (int32_t id : tokenizer_->encode(text)) {
      const TextStream::Update update = stream.push(id);
      out += update.text;
      if (update.stopped) return {out, true};
    }
    return {out + stream.finish(), false};
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(TextStreamTest, PassesTextThroughWithoutStops) {
  EXPECT_EQ(stream("Hello there, world.", {}, false), std::make_pair(std::string("Hello there, world."), false));
}

TEST_F(TextStreamTest, StopsAtTheFirstStopStringAndTrimsIt) {
  EXPECT_EQ(stream("one two three two", {"two"}, false), std::make_pair(std::string("one "), true));
  EXPECT_EQ(stream("one two three two", {"two"}, true), std::make_pair(std::string("one two"), true));
  EXPECT_EQ(stream("one two three", {"three", "wo t"}, false), std::make_pair(std::string("one t"), true));
}

TEST_F(TextStreamTest, HeldBackTextIsReleasedWhenItIsNotAStop) {
  TextStream stream(*tokenizer_, {"abcX"}, false);
  std::string out;
  for (int32_t id : tokenizer_->encode("xxabc")) out += stream.push(id).text;
  EXPECT_EQ(out, "xx") << "\"abc\" may begin the stop string: held back";
  for (int32_t id : tokenizer_->encode("Y")) out += stream.push(id).text;
  EXPECT_EQ(out, "xxabcY") << "\"abcY\" cannot: released";
  EXPECT_EQ(stream.finish(), "");
}

TEST_F(TextStreamTest, MultiByteTextIsNeverSplit) {
  const std::string text = "naïve café 😈 done";
  EXPECT_EQ(stream(text, {"😈"}, false), std::make_pair(std::string("naïve café "), true));
  EXPECT_EQ(stream(text, {}, false).first, text);
}

}  // namespace
}  // namespace ernie
