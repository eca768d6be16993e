// A constraint over a real SentencePiece vocabulary (the shipped model's): the tokens a
// mask allows, concatenated, are exactly what the tokenizer decodes, and every
// constrained generation decodes to a document of the schema.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <random>

#include "structured/json_schema.h"
#include "structured/token_mask.h"

namespace ernie::structured {
namespace {

TEST(VocabularyTrieTest, ConstrainedTokenWalksDecodeToDocumentsOfTheSchema) {
  const Tokenizer tokenizer = Tokenizer::load(std::string(ERNIE_SOURCE_DIR) + "/models/ernie-4.5-kjv-dense");
  const int32_t eos = tokenizer.eos_id();
  const TokenTrie trie = vocabulary_trie(tokenizer, tokenizer.vocab_size(), {eos});
  const auto schema = nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "verse": {"type": "string", "maxLength": 12}},
          "required": ["answer", "verse"]})");
  GrammarMatcher matcher(compile_json_schema(schema, {.any_whitespace = false}));
  std::mt19937 random(3);
  std::vector<uint32_t> mask;
  for (int run = 0; run < 20; ++run) {
    MatchState state = matcher.start();
    std::vector<int32_t> ids;
    std::string bytes;
    for (int step = 0; step < 64; ++step) {
      trie.allowed(matcher, state, mask);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
        if ((mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u) allowed.push_back(id);
      ASSERT_FALSE(allowed.empty()) << "the grammar never leaves a state with no way on";
      // Finish as soon as the grammar allows it, else a random allowed token.
      const bool can_end = std::find(allowed.begin(), allowed.end(), eos) != allowed.end();
      if (can_end) break;
      const int32_t id = allowed[random() % allowed.size()];
      ids.push_back(id);
      bytes += tokenizer.token_bytes(id, true);
      state = matcher.step(state, tokenizer.token_bytes(id, true));
      ASSERT_FALSE(state.dead());
    }
    ASSERT_TRUE(state.accepting) << bytes;
    EXPECT_EQ(tokenizer.decode(ids), bytes) << "the trie's bytes are what decoding gives";
    const auto document = nlohmann::json::parse(bytes);
    EXPECT_TRUE(document.at("answer") == "yes" || document.at("answer") == "no") << bytes;
    // maxLength counts characters (code points), not bytes.
    size_t characters = 0;
    for (char c : document.at("verse").get<std::string>()) characters += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    EXPECT_LE(characters, 12u) << bytes;
  }
}

}  // namespace
}  // namespace ernie::structured
