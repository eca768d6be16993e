#include "text/tokenizer_trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace ernie {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;


fs::path unique_temp_dir(const std::string& name) {
  return fs::temp_directory_path() / ("ernie_trainer_test_" + std::to_string(getpid()) + "_" + name);
}

using testing::read_file;

json read_json_file(const fs::path& path) { return json::parse(read_file(path)); }

// Trains once per suite (a fraction of a second each): a text tokenizer, and one with
// the Thinking markers.
class TokenizerTrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    text_dir_ = new fs::path(unique_temp_dir("text"));
    thinking_dir_ = new fs::path(unique_temp_dir("thinking"));
    write_synthetic_tokenizer(text_dir_->string(), {});
    SyntheticTokenizerOptions thinking_options;
    thinking_options.extra_markers = ernie_thinking_markers();
    write_synthetic_tokenizer(thinking_dir_->string(), thinking_options);
    text_ = new Tokenizer(Tokenizer::load(text_dir_->string()));
    thinking_ = new Tokenizer(Tokenizer::load(thinking_dir_->string()));
  }
  static void TearDownTestSuite() {
    delete text_;
    delete thinking_;
    fs::remove_all(*text_dir_);
    fs::remove_all(*thinking_dir_);
    delete text_dir_;
    delete thinking_dir_;
  }

  static fs::path* text_dir_;
  static fs::path* thinking_dir_;
  static Tokenizer* text_;
  static Tokenizer* thinking_;
};

fs::path* TokenizerTrainerTest::text_dir_ = nullptr;
fs::path* TokenizerTrainerTest::thinking_dir_ = nullptr;
Tokenizer* TokenizerTrainerTest::text_ = nullptr;
Tokenizer* TokenizerTrainerTest::thinking_ = nullptr;

TEST_F(TokenizerTrainerTest, WritesTheThreeFiles) {
  for (const char* name : {"tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"}) {
    EXPECT_TRUE(fs::is_regular_file(*text_dir_ / name)) << name;
  }
  EXPECT_EQ(text_->vocab_size(), 4096);
  EXPECT_EQ(text_->piece_count(), 4096);
}

TEST_F(TokenizerTrainerTest, JsonFilesMatchTheGoldenOnes) {
  EXPECT_EQ(read_json_file(*text_dir_ / "tokenizer_config.json"),
            read_json_file(testing::golden_model_dir("tiny-dense") + "/tokenizer_config.json"));
  EXPECT_EQ(read_json_file(*text_dir_ / "special_tokens_map.json"),
            read_json_file(testing::golden_model_dir("tiny-dense") + "/special_tokens_map.json"));
  // The Thinking golden carries its own reconstructed chat template, which the trainer
  // does not write by default.
  json config = read_json_file(*thinking_dir_ / "tokenizer_config.json");
  json golden = read_json_file(testing::golden_model_dir("tiny-thinking") + "/tokenizer_config.json");
  EXPECT_EQ(config["added_tokens_decoder"], golden["added_tokens_decoder"]);
  config.erase("chat_template");
  golden.erase("chat_template");
  EXPECT_EQ(config, golden);
}

TEST_F(TokenizerTrainerTest, SpecialPiecesSitWhereTheGoldenModelsHaveThem) {
  const Tokenizer golden = Tokenizer::load(testing::golden_model_dir("tiny-thinking"));
  EXPECT_EQ(thinking_->token_id("<unk>"), 0);
  EXPECT_EQ(thinking_->token_id("<s>"), 1);
  EXPECT_EQ(thinking_->token_id("</s>"), 2);
  for (const std::string piece : {"<|begin_of_sentence|>", "<|end_of_sentence|>", "<mask:0>", "<mask:1>",
                                  "<mask:4>", "<mask:5>", "<mask:6>", "<mask:7>", "<0x00>", "<0xFF>"}) {
    SCOPED_TRACE(piece);
    EXPECT_EQ(thinking_->token_id(piece), golden.token_id(piece));
    EXPECT_TRUE(thinking_->token_id(piece).has_value());
  }
  const auto& markers = ernie_thinking_markers();
  ASSERT_EQ(markers.size(), 8u);
  for (size_t i = 0; i < markers.size(); ++i) {
    EXPECT_EQ(thinking_->token_id(markers[i]), static_cast<int32_t>(11 + i)) << markers[i];
    EXPECT_EQ(thinking_->encode(markers[i]), std::vector<int32_t>{static_cast<int32_t>(11 + i)});
  }
  EXPECT_EQ(text_->token_id("<|begin_of_sentence|>"), 3);
  EXPECT_EQ(text_->token_id("<0x00>"), 11);
  EXPECT_EQ(text_->token_id("<think>"), std::nullopt);
  EXPECT_EQ(text_->bos_id(), 1);
  EXPECT_EQ(text_->eos_id(), 2);
  EXPECT_EQ(text_->pad_id(), 0);
}

TEST_F(TokenizerTrainerTest, ChatTemplateIsTheErnieTextTemplate) {
  const Tokenizer golden = Tokenizer::load(testing::golden_model_dir("tiny-dense"));
  EXPECT_EQ(text_->chat_template(), golden.chat_template());
  EXPECT_EQ(ernie_text_chat_template(), golden.chat_template());
}

TEST_F(TokenizerTrainerTest, RoundTripsText) {
  for (const std::string text : {"The GNU General Public License", "x  y\n\n\tz   ", "😈 中文 é",
                                 "<|begin_of_sentence|>User: hi\nAssistant: ok<|end_of_sentence|>"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(text_->decode(text_->encode(text), false), text);
    EXPECT_EQ(thinking_->decode(thinking_->encode(text, false)), text);
  }
}

TEST_F(TokenizerTrainerTest, BehavesLikeErniesTokenizer) {
  EXPECT_NE(text_->encode(" Hello"), text_->encode("Hello"));
  EXPECT_EQ(text_->encode(" "), std::vector<int32_t>{*text_->token_id("▁")});
  // Whitespace-only pieces are allowed, as ERNIE has "▁▁" (id 269 in the real vocabulary).
  ASSERT_TRUE(text_->token_id("▁▁").has_value());
  EXPECT_EQ(text_->encode("  "), std::vector<int32_t>{*text_->token_id("▁▁")});
  // Digits are split.
  const std::vector<int32_t> digits = {*text_->token_id("2"), *text_->token_id("0"), *text_->token_id("2"),
                                       *text_->token_id("4")};
  EXPECT_EQ(text_->encode("2024"), digits);
  // Identity normalization: newline is a byte piece, tabs survive.
  EXPECT_EQ(text_->encode("\n"), std::vector<int32_t>{11 + '\n'});
}

TEST(TokenizerTrainerStandaloneTest, IsDeterministic) {
  const fs::path first = unique_temp_dir("first");
  const fs::path second = unique_temp_dir("second");
  SyntheticTokenizerOptions options;
  options.vocab_size = 1024;
  write_synthetic_tokenizer(first.string(), options);
  write_synthetic_tokenizer(second.string(), options);
  EXPECT_EQ(read_file(first / "tokenizer.model"), read_file(second / "tokenizer.model"));
  EXPECT_EQ(Tokenizer::load(first.string()).vocab_size(), 1024);
  fs::remove_all(first);
  fs::remove_all(second);
}

TEST(TokenizerTrainerStandaloneTest, TrainsOnGivenCorpus) {
  const fs::path dir = unique_temp_dir("corpus");
  fs::create_directories(dir);
  {
    std::ofstream corpus(dir / "corpus.txt");
    for (int i = 0; i < 200; ++i) corpus << "the quick brown fox jumps over the lazy dog " << i << "\n";
  }
  SyntheticTokenizerOptions options;
  options.corpus_files = {(dir / "corpus.txt").string()};
  options.vocab_size = 320;
  write_synthetic_tokenizer((dir / "out").string(), options);
  const Tokenizer tokenizer = Tokenizer::load((dir / "out").string());
  EXPECT_EQ(tokenizer.vocab_size(), 320);
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("the lazy fox")), "the lazy fox");
  fs::remove_all(dir);
}

TEST(TokenizerTrainerStandaloneTest, RejectsBadOptions) {
  const fs::path dir = unique_temp_dir("bad");
  SyntheticTokenizerOptions bad_marker;
  bad_marker.extra_markers = {"<a,b>"};
  EXPECT_THROW(write_synthetic_tokenizer(dir.string(), bad_marker), Error);
  SyntheticTokenizerOptions duplicate_marker;
  duplicate_marker.extra_markers = {"<|begin_of_sentence|>"};
  EXPECT_THROW(write_synthetic_tokenizer(dir.string(), duplicate_marker), Error);

  SyntheticTokenizerOptions missing_corpus;
  missing_corpus.corpus_files = {"/nonexistent/corpus.txt"};
  try {
    write_synthetic_tokenizer(dir.string(), missing_corpus);
    ADD_FAILURE() << "expected an error for a missing corpus file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/corpus.txt"), std::string::npos) << e.what();
  }

  SyntheticTokenizerOptions too_large;
  too_large.vocab_size = 1 << 20;
  EXPECT_THROW(write_synthetic_tokenizer(dir.string(), too_large), Error);
  EXPECT_FALSE(fs::exists(dir / "tokenizer.model"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ernie
