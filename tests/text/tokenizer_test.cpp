#include "text/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

namespace fs = std::filesystem;

// Layout of the golden tokenizers (read from the model protos, and stated in
// shared/golden/README.md): <unk> 0, <s> 1, </s> 2, then <|begin_of_sentence|>,
// <|end_of_sentence|>, <mask:0>, <mask:1>, <mask:4> ... <mask:7> at 3..10. tiny-dense's
// byte pieces follow at 11 (byte b -> 11 + b); tiny-thinking has its 8 markers at
// 11..18 and the bytes from 19.
constexpr int32_t kBeginOfSentence = 3;
constexpr int32_t kEndOfSentence = 4;
constexpr int32_t kMaskZero = 5;
constexpr int32_t kMaskOne = 6;
constexpr int32_t kDenseFirstByte = 11;
constexpr int32_t kThinkingFirstByte = 19;
constexpr int32_t kDenseSpacePiece = 4013;  // "▁"

int32_t dense_byte(unsigned char byte) { return kDenseFirstByte + byte; }

class GoldenTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dense_ = new Tokenizer(Tokenizer::load(testing::golden_model_dir("tiny-dense")));
    thinking_ = new Tokenizer(Tokenizer::load(testing::golden_model_dir("tiny-thinking")));
  }
  static void TearDownTestSuite() {
    delete dense_;
    delete thinking_;
    dense_ = thinking_ = nullptr;
  }
  static const Tokenizer& dense() { return *dense_; }
  static const Tokenizer& thinking() { return *thinking_; }

  static void expect_round_trip(const Tokenizer& tokenizer, const std::string& text) {
    const auto ids = tokenizer.encode(text);
    EXPECT_EQ(tokenizer.decode(ids, false), text);
  }

 private:
  static Tokenizer* dense_;
  static Tokenizer* thinking_;
};

Tokenizer* GoldenTokenizerTest::dense_ = nullptr;
Tokenizer* GoldenTokenizerTest::thinking_ = nullptr;

TEST_F(GoldenTokenizerTest, ReadsVocabularyAndSpecialTokens) {
  EXPECT_EQ(dense().vocab_size(), 4096);
  EXPECT_EQ(dense().piece_count(), 4096);
  EXPECT_EQ(dense().unk_id(), 0);
  EXPECT_EQ(dense().bos_id(), 1);
  EXPECT_EQ(dense().eos_id(), 2);
  EXPECT_EQ(dense().pad_id(), 0);  // pad_token is "<unk>"
  EXPECT_EQ(dense().cls_token(), "<|begin_of_sentence|>");
  EXPECT_EQ(dense().sep_token(), "<|end_of_sentence|>");
  EXPECT_EQ(dense().token_id("<|begin_of_sentence|>"), kBeginOfSentence);
  EXPECT_EQ(dense().token_id("<|end_of_sentence|>"), kEndOfSentence);
  EXPECT_EQ(dense().token_id("<mask:1>"), kMaskOne);
  EXPECT_EQ(dense().token_id("<0x0A>"), dense_byte('\n'));
  EXPECT_EQ(dense().token_id("no such piece"), std::nullopt);
  EXPECT_EQ(dense().token_id(""), std::nullopt);
}

TEST_F(GoldenTokenizerTest, ReadsChatTemplate) {
  const std::string& chat_template = dense().chat_template();
  EXPECT_TRUE(chat_template.starts_with("{%- if not add_generation_prompt is defined -%}"));
  EXPECT_NE(chat_template.find("\"Assistant: \" + message[\"content\"] + sep_token"), std::string::npos);
  EXPECT_NE(thinking().chat_template().find("<|im_start|>assistant\\n<think>\\n"), std::string::npos);
}

TEST_F(GoldenTokenizerTest, RoundTripsAsciiAndWhitespace) {
  for (const std::string text : {"This is a test", "Hello, world!", "a", " ", "  ", "x  y   z    ",
                                 "line one\nline two\n\n\tindented\ttabs\r\nend", "   leading spaces",
                                 "trailing\n\n\n", "digits 0123456789 and 3.14159", "<eos> is plain text"}) {
    SCOPED_TRACE(text);
    expect_round_trip(dense(), text);
    expect_round_trip(thinking(), text);
  }
}

TEST_F(GoldenTokenizerTest, RoundTripsMultiByteUtf8) {
  for (const std::string text : {"é à ü ß", "中文文本", "日本語のテキスト", "😈🤗!", "ปี ด",
                                 "e\u0301 combining", "mixed: a😈b é\n中\t🤗", "\x01\x02\x7f control"}) {
    SCOPED_TRACE(text);
    expect_round_trip(dense(), text);
  }
}

TEST_F(GoldenTokenizerTest, FallsBackToBytes) {
  // The corpus (licence texts) has no emoji, so each of its four bytes is a byte piece.
  const std::vector<int32_t> emoji = {dense_byte(0xF0), dense_byte(0x9F), dense_byte(0x98),
                                      dense_byte(0x88)};
  EXPECT_EQ(dense().encode("😈"), emoji);
  EXPECT_EQ(dense().encode("\n"), std::vector<int32_t>{dense_byte('\n')});
  EXPECT_EQ(dense().encode("\t\t"), (std::vector<int32_t>{dense_byte('\t'), dense_byte('\t')}));
  EXPECT_EQ(dense().decode(emoji), "😈");
  EXPECT_EQ(dense().token_bytes(dense_byte(0xF0), true), std::string("\xF0"));
}

TEST_F(GoldenTokenizerTest, HasNoDummyPrefix) {
  EXPECT_NE(dense().encode(" Hello"), dense().encode("Hello"));
  EXPECT_EQ(dense().token_id("▁"), kDenseSpacePiece);
  EXPECT_EQ(dense().encode(" "), std::vector<int32_t>{kDenseSpacePiece});
  // The golden model has no whitespace-only pieces besides "▁", so runs of spaces stay single.
  EXPECT_EQ(dense().encode("  "), (std::vector<int32_t>{kDenseSpacePiece, kDenseSpacePiece}));
  const auto a = dense().encode("a");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(dense().token_bytes(a[0], true), "a");
  EXPECT_EQ(dense().decode(dense().encode(" Hello")), " Hello");
}

TEST_F(GoldenTokenizerTest, SplitsSpecialTokensBeforeSentencePiece) {
  const std::string prompt = "<|begin_of_sentence|>User: hi\nAssistant: ";
  const auto ids = dense().encode(prompt);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], kBeginOfSentence);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end()), dense().encode("User: hi\nAssistant: "));
  EXPECT_EQ(dense().decode(ids), "User: hi\nAssistant: ");
  EXPECT_EQ(dense().decode(ids, false), prompt);
}

TEST_F(GoldenTokenizerTest, LiteralModeNeverProducesSpecialIds) {
  const std::string prompt = "<|begin_of_sentence|>User: hi<|end_of_sentence|><mask:1><s></s>";
  const auto ids = dense().encode(prompt, false);
  for (const int32_t id : ids) {
    EXPECT_FALSE(dense().is_special(id)) << "id " << id;
    EXPECT_GT(id, 10) << "ids 0..10 are the unknown, control and user-defined pieces";
  }
  EXPECT_EQ(dense().decode(ids), prompt);
}

TEST_F(GoldenTokenizerTest, MatchesControlTokenStrings) {
  EXPECT_EQ(dense().encode("<s>hi</s>").front(), 1);
  EXPECT_EQ(dense().encode("<s>hi</s>").back(), 2);
  EXPECT_EQ(dense().encode("<unk>"), std::vector<int32_t>{0});
  const auto literal = dense().encode("<s>hi</s>", false);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), 1), 0);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), 2), 0);
  EXPECT_EQ(dense().decode(literal), "<s>hi</s>");
}

TEST_F(GoldenTokenizerTest, ThinkingMarkersAreSingleTokens) {
  const std::vector<std::string> markers = {"<|im_start|>", "<|im_end|>", "<think>",     "</think>",
                                            "<response>",   "</response>", "<tool_call>", "</tool_call>"};
  for (size_t i = 0; i < markers.size(); ++i) {
    SCOPED_TRACE(markers[i]);
    const auto expected_id = static_cast<int32_t>(11 + i);
    EXPECT_EQ(thinking().encode(markers[i]), std::vector<int32_t>{expected_id});
    EXPECT_EQ(thinking().token_id(markers[i]), expected_id);
    EXPECT_TRUE(thinking().is_special(expected_id));
    EXPECT_EQ(thinking().token_bytes(expected_id, false), markers[i]);
    EXPECT_EQ(thinking().token_bytes(expected_id, true), "");
  }
}

TEST_F(GoldenTokenizerTest, SplitsMarkersGluedToText) {
  const auto x = thinking().encode("x");
  ASSERT_EQ(x.size(), 1u);
  const int32_t newline = kThinkingFirstByte + '\n';
  const std::vector<int32_t> expected = {x[0], 14, newline, newline, 15};
  EXPECT_EQ(thinking().encode("x</think>\n\n<response>"), expected);
  EXPECT_EQ(thinking().decode(expected, false), "x</think>\n\n<response>");
  EXPECT_EQ(thinking().decode(expected, true), "x\n\n");

  const auto literal = thinking().encode("x</think>\n\n<response>", false);
  for (const int32_t id : literal) EXPECT_TRUE(id < 11 || id > 18) << "id " << id;
  EXPECT_EQ(thinking().decode(literal), "x</think>\n\n<response>");
}

TEST_F(GoldenTokenizerTest, SkipsSpecialTokensWhenAsked) {
  const std::vector<int32_t> ids = {1, kBeginOfSentence, dense_byte('h'), kEndOfSentence, 2, 0};
  EXPECT_EQ(dense().decode(ids, true), "h");
  EXPECT_EQ(dense().decode(ids, false), "<s><|begin_of_sentence|>h<|end_of_sentence|></s><unk>");
  EXPECT_TRUE(dense().is_special(0));
  EXPECT_TRUE(dense().is_special(1));
  EXPECT_TRUE(dense().is_special(kMaskOne));
  // <mask:0> is a SentencePiece piece that no special-token list names: plain text, as
  // in transformers.
  EXPECT_FALSE(dense().is_special(kMaskZero));
  EXPECT_EQ(dense().decode(std::vector<int32_t>{kMaskZero}), "<mask:0>");
  EXPECT_FALSE(dense().is_special(dense_byte('a')));
}

TEST_F(GoldenTokenizerTest, IdsBeyondTheVocabularyDecodeToNothing) {
  // The real embedding has 103424 rows, more than the tokenizer has ids.
  const std::vector<int32_t> unknown = {4096, 5000, 103423, -1};
  EXPECT_EQ(dense().decode(unknown), "");
  EXPECT_EQ(dense().decode(unknown, false), "");
  for (const int32_t id : unknown) {
    EXPECT_EQ(dense().token_bytes(id, false), "");
    EXPECT_FALSE(dense().is_special(id));
  }
  const std::vector<int32_t> mixed = {dense_byte('o'), 103423, dense_byte('k')};
  EXPECT_EQ(dense().decode(mixed), "ok");
}

TEST_F(GoldenTokenizerTest, DecodeRepairsInvalidUtf8) {
  const std::vector<int32_t> lone_byte = {dense_byte(0xFF), dense_byte('a')};
  EXPECT_EQ(dense().decode(lone_byte), "\uFFFDa");
  const std::vector<int32_t> truncated = {dense_byte(0xF0), dense_byte(0x9F), dense_byte('a')};
  EXPECT_EQ(dense().decode(truncated), "\uFFFDa");
  const std::vector<int32_t> truncated_at_end = {dense_byte('a'), dense_byte(0xE4), dense_byte(0xB8)};
  EXPECT_EQ(dense().decode(truncated_at_end), "a\uFFFD");
}

// ---------------------------------------------------------------------------------------
// Tokenizer directories written by the tests.

class TokenizerDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ernie_tokenizer_test_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void copy_model(const std::string& as_name = "tokenizer.model") const {
    fs::copy_file(testing::golden_model_dir("tiny-dense") + "/tokenizer.model", dir_ / as_name);
  }
  void write(const std::string& name, const std::string& content) const {
    std::ofstream(dir_ / name, std::ios::binary) << content;
  }
  std::string load_error() const {
    try {
      Tokenizer::load(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(TokenizerDirTest, MatchesLongestAddedTokenFirst) {
  copy_model();
  write("tokenizer_config.json", R"({
    "added_tokens_decoder": {
      "5000": {"content": "<a>", "special": true},
      "5001": {"content": "<a><b>", "special": true},
      "5002": {"content": "<a><b", "special": true}
    }
  })");
  const Tokenizer tokenizer = Tokenizer::load(dir_.string());
  EXPECT_EQ(tokenizer.vocab_size(), 5003);
  EXPECT_EQ(tokenizer.encode("<a><b><a>"), (std::vector<int32_t>{5001, 5000}));
  EXPECT_EQ(tokenizer.encode("<a><b"), std::vector<int32_t>{5002});
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{5001, 5000}, false), "<a><b><a>");
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{5001, 5000}, true), "");
  const auto literal = tokenizer.encode("<a><b><a>", false);
  EXPECT_TRUE(std::all_of(literal.begin(), literal.end(), [](int32_t id) { return id < 4096; }));
  EXPECT_EQ(tokenizer.decode(literal), "<a><b><a>");
}

TEST_F(TokenizerDirTest, NonSpecialAddedTokensAlwaysMatch) {
  copy_model();
  write("added_tokens.json", R"({"<|plain|>": 4100})");
  const Tokenizer tokenizer = Tokenizer::load(dir_.string());
  EXPECT_EQ(tokenizer.vocab_size(), 4101);
  EXPECT_EQ(tokenizer.encode("<|plain|>", false), std::vector<int32_t>{4100});
  EXPECT_FALSE(tokenizer.is_special(4100));
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{4100, 4099}), "<|plain|>");
}

TEST_F(TokenizerDirTest, ReadsObjectValuedSpecialTokens) {
  copy_model();
  write("special_tokens_map.json", R"({
    "bos_token": {"content": "<|begin_of_sentence|>", "lstrip": false},
    "eos_token": "<|end_of_sentence|>",
    "additional_special_tokens": ["<mask:0>", {"content": "<mask:4>"}]
  })");
  const Tokenizer tokenizer = Tokenizer::load(dir_.string());
  EXPECT_EQ(tokenizer.bos_id(), kBeginOfSentence);
  EXPECT_EQ(tokenizer.eos_id(), kEndOfSentence);
  EXPECT_TRUE(tokenizer.is_special(kMaskZero));
  EXPECT_TRUE(tokenizer.is_special(7));  // <mask:4>
  EXPECT_EQ(tokenizer.pad_id(), Tokenizer::kNoToken);
  EXPECT_EQ(tokenizer.chat_template(), "");
}

TEST_F(TokenizerDirTest, AcceptsFastDeployModelNames) {
  copy_model("spm.model");
  EXPECT_EQ(Tokenizer::load(dir_.string()).vocab_size(), 4096);
  fs::rename(dir_ / "spm.model", dir_ / "ernie_token_100k.model");
  EXPECT_EQ(Tokenizer::load(dir_.string()).vocab_size(), 4096);
}

TEST_F(TokenizerDirTest, PrefersChatTemplateFile) {
  copy_model();
  write("tokenizer_config.json", R"({"chat_template": "from config"})");
  EXPECT_EQ(Tokenizer::load(dir_.string()).chat_template(), "from config");
  write("chat_template.jinja", "from file\n");
  EXPECT_EQ(Tokenizer::load(dir_.string()).chat_template(), "from file\n");
}

TEST_F(TokenizerDirTest, ReportsMissingModelFile) {
  const std::string message = load_error();
  EXPECT_NE(message.find("tokenizer.model"), std::string::npos) << message;
  EXPECT_NE(message.find(dir_.string()), std::string::npos) << message;
}

TEST_F(TokenizerDirTest, ReportsMissingDirectory) {
  fs::remove_all(dir_);
  EXPECT_NE(load_error().find("does not exist"), std::string::npos);
}

TEST_F(TokenizerDirTest, ReportsCorruptModelFile) {
  write("tokenizer.model", "this is not a protobuf");
  EXPECT_NE(load_error().find("tokenizer.model"), std::string::npos);
}

TEST_F(TokenizerDirTest, ReportsBadJsonWithFileName) {
  copy_model();
  write("tokenizer_config.json", "{\"bos_token\": ");
  EXPECT_NE(load_error().find("tokenizer_config.json"), std::string::npos);
  write("tokenizer_config.json", "[1, 2]");
  EXPECT_NE(load_error().find("expected an object"), std::string::npos);
  write("tokenizer_config.json", R"({"added_tokens_decoder": {"x": {"content": "<a>"}}})");
  EXPECT_NE(load_error().find("bad token id \"x\""), std::string::npos);
  write("tokenizer_config.json", "{}");
  write("added_tokens.json", R"({"<a>": "five"})");
  EXPECT_NE(load_error().find("added_tokens.json"), std::string::npos);
}

}  // namespace
}  // namespace ernie
