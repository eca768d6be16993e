#include "text/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace ernie {
namespace {

// The golden tiny-dense tokenizer's byte pieces start at id 11 (byte b -> 11 + b); see
// tokenizer_test.cpp and shared/golden/README.md.
constexpr int32_t kFirstByte = 11;
constexpr int32_t kBosId = 3;

int32_t byte_id(unsigned char byte) { return kFirstByte + byte; }

std::vector<int32_t> byte_ids(std::string_view bytes) {
  std::vector<int32_t> ids;
  for (const char byte : bytes) ids.push_back(byte_id(static_cast<unsigned char>(byte)));
  return ids;
}

bool is_continuation_byte(char byte) { return (static_cast<unsigned char>(byte) & 0xC0) == 0x80; }

class IncrementalDetokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = new Tokenizer(Tokenizer::load(std::string(ERNIE_SHARED_DIR) + "/golden/models/tiny-dense"));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  static const Tokenizer& tokenizer() { return *tokenizer_; }

  // Streams `ids` and checks that the text so far is always a prefix of `expected` that
  // ends on a character boundary, i.e. no half character was ever emitted.
  static void expect_whole_characters(const std::vector<int32_t>& ids, const std::string& expected) {
    IncrementalDetokenizer detokenizer(tokenizer());
    std::string streamed;
    for (size_t i = 0; i < ids.size(); ++i) {
      streamed += detokenizer.push(ids[i]);
      SCOPED_TRACE("after token " + std::to_string(i));
      ASSERT_LE(streamed.size(), expected.size());
      ASSERT_EQ(streamed, expected.substr(0, streamed.size()));
      if (streamed.size() < expected.size()) {
        EXPECT_FALSE(is_continuation_byte(expected[streamed.size()]));
      }
    }
    streamed += detokenizer.flush();
    EXPECT_EQ(streamed, expected);
  }

  static std::string stream(const std::vector<int32_t>& ids, bool skip_special = true) {
    IncrementalDetokenizer detokenizer(tokenizer(), skip_special);
    std::string streamed;
    for (const int32_t id : ids) streamed += detokenizer.push(id);
    return streamed + detokenizer.flush();
  }

 private:
  static Tokenizer* tokenizer_;
};

Tokenizer* IncrementalDetokenizerTest::tokenizer_ = nullptr;

TEST_F(IncrementalDetokenizerTest, HoldsBackIncompleteCharacters) {
  IncrementalDetokenizer detokenizer(tokenizer());
  // U+1F608 is F0 9F 98 88.
  EXPECT_EQ(detokenizer.push(byte_id(0xF0)), "");
  EXPECT_EQ(detokenizer.pending_bytes(), 1u);
  EXPECT_EQ(detokenizer.push(byte_id(0x9F)), "");
  EXPECT_EQ(detokenizer.push(byte_id(0x98)), "");
  EXPECT_EQ(detokenizer.pending_bytes(), 3u);
  EXPECT_EQ(detokenizer.push(byte_id(0x88)), "😈");
  EXPECT_EQ(detokenizer.pending_bytes(), 0u);
  EXPECT_EQ(detokenizer.push(byte_id('a')), "a");
  EXPECT_EQ(detokenizer.flush(), "");
}

TEST_F(IncrementalDetokenizerTest, EveryByteSplitEmitsWholeCharacters) {
  for (const std::string text : {"é", "中文", "😈🤗", "a😈b é\n中\t🤗z", "ß\u0301ü", "\U0010FFFF\u0800\u07FF"}) {
    SCOPED_TRACE(text);
    expect_whole_characters(byte_ids(text), text);
    EXPECT_EQ(stream(byte_ids(text)), tokenizer().decode(byte_ids(text)));
  }
}

TEST_F(IncrementalDetokenizerTest, StreamEqualsDecodeOfEncodedText) {
  for (const std::string text : {"Hello, world! 😈 and é\n\n  spaced\ttext", "中文 mixed with English 123",
                                 "<|begin_of_sentence|>User: 🤗\nAssistant: "}) {
    SCOPED_TRACE(text);
    const auto ids = tokenizer().encode(text);
    EXPECT_EQ(stream(ids, true), tokenizer().decode(ids, true));
    EXPECT_EQ(stream(ids, false), tokenizer().decode(ids, false));
    EXPECT_EQ(stream(ids, false), text);
  }
}

TEST_F(IncrementalDetokenizerTest, SkipsSpecialTokensWhenAsked) {
  const std::vector<int32_t> ids = {kBosId, byte_id('h'), 2};
  EXPECT_EQ(stream(ids, true), "h");
  EXPECT_EQ(stream(ids, false), "<|begin_of_sentence|>h</s>");
}

TEST_F(IncrementalDetokenizerTest, ReplacesImpossibleBytesAtOnce) {
  IncrementalDetokenizer detokenizer(tokenizer());
  EXPECT_EQ(detokenizer.push(byte_id(0xFF)), "\uFFFD");
  EXPECT_EQ(detokenizer.push(byte_id(0x80)), "\uFFFD");  // continuation byte without a lead
  EXPECT_EQ(detokenizer.push(byte_id(0xC0)), "\uFFFD");  // only ever starts overlong forms
  EXPECT_EQ(detokenizer.pending_bytes(), 0u);
}

TEST_F(IncrementalDetokenizerTest, ReplacesBrokenSequenceWhenTheNextByteArrives) {
  IncrementalDetokenizer detokenizer(tokenizer());
  EXPECT_EQ(detokenizer.push(byte_id(0xF0)), "");
  EXPECT_EQ(detokenizer.push(byte_id(0x9F)), "");
  // Maximal-subpart rule: the valid prefix F0 9F becomes one U+FFFD, then 'a' follows.
  EXPECT_EQ(detokenizer.push(byte_id('a')), "\uFFFDa");
  EXPECT_EQ(detokenizer.push(byte_id(0xC3)), "");
  EXPECT_EQ(detokenizer.push(byte_id(0xC3)), "\uFFFD");
  EXPECT_EQ(detokenizer.push(byte_id(0xA9)), "é");
}

TEST_F(IncrementalDetokenizerTest, FlushReplacesAnIncompleteTail) {
  IncrementalDetokenizer detokenizer(tokenizer());
  EXPECT_EQ(detokenizer.push(byte_id('x')), "x");
  EXPECT_EQ(detokenizer.push(byte_id(0xE4)), "");
  EXPECT_EQ(detokenizer.push(byte_id(0xB8)), "");
  EXPECT_EQ(detokenizer.flush(), "\uFFFD");
  EXPECT_EQ(detokenizer.flush(), "");
}

TEST_F(IncrementalDetokenizerTest, StreamEqualsDecodeForInvalidBytes) {
  // Expected strings follow Unicode's "substitution of maximal subparts" (what Python's
  // bytes.decode("utf-8", "replace") gives).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\xED\xA0\x80", "\uFFFD\uFFFD\uFFFD"},  // UTF-16 surrogate
      {"\xC0\x80", "\uFFFD\uFFFD"},            // overlong NUL
      {"\xE0\x80\x80", "\uFFFD\uFFFD\uFFFD"},  // overlong
      {"\xF4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},  // beyond U+10FFFF
      {"\xE4\xB8z", "\uFFFDz"},
      {"a\xF0\x9F\x98", "a\uFFFD"},
  };
  for (const auto& [bytes, expected] : cases) {
    SCOPED_TRACE(bytes);
    EXPECT_EQ(stream(byte_ids(bytes)), expected);
    EXPECT_EQ(tokenizer().decode(byte_ids(bytes)), expected);
  }
}

TEST_F(IncrementalDetokenizerTest, IgnoresIdsBeyondTheVocabulary) {
  IncrementalDetokenizer detokenizer(tokenizer());
  EXPECT_EQ(detokenizer.push(103423), "");
  EXPECT_EQ(detokenizer.push(-5), "");
  EXPECT_EQ(detokenizer.push(byte_id('k')), "k");
}

}  // namespace
}  // namespace ernie
