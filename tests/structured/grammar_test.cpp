// Grammars over bytes: the EBNF dialect of guided_grammar, the matcher that follows
// every parse at once, and token masks from the vocabulary trie, each held to an
// independent check (hand-written sentence lists, UTF-8 encodings from first principles,
// and a brute-force token-by-token mask).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "structured/ebnf.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured/token_mask.h"
#include "support/test_support.h"

namespace ernie::structured {
namespace {

struct Case {
  std::string grammar;
  std::vector<std::string> accepted, rejected;
};

TEST(EbnfTest, AcceptsExactlyTheSentencesOfTheGrammar) {
  const std::vector<Case> cases = {
      {R"(root ::= "yes" | "no")", {"yes", "no"}, {"", "ye", "yess", "maybe", "noyes"}},
      {R"(root ::= [0-9]+ ("." [0-9]{1,3})?)", {"7", "12", "12.5", "1.123"}, {"", ".5", "1.", "1.1234", "a"}},
      {"root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"", {"\"\"", "\"héllo ✓\"", "\"a b\""}, {"\"", "\"a\"b", "\"a\\\"", "x"}},
      {"root ::= . .  # two characters, whatever their width\n", {"ab", "éx", "✓✓", "😀a"}, {"a", "abc", "\xff\xfe"}},
      {"root ::= item (\",\" item)*\nitem ::= [a-z]{2,}\n", {"ab", "ab,cde", "xy,zz,ww"}, {"a", "ab,", ",ab", "ab,c"}},
      {"root ::= \"a\"{3} \"b\"{0,2} \"c\"{2,}", {"aaacc", "aaabbccc"}, {"aacc", "aaabbbcc", "aaac"}},
      {"root ::= ( \"x\" | \"y\" )+ \"\\n\"", {"x\n", "yxy\n"}, {"\n", "xz\n", "xy"}},
      {"root ::= \"\\u00e9\\x41\" [\\u4e00-\\u9fff]", {"éA中", "éA龥"}, {"éA", "eA中", "éAa"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.grammar);
    const Grammar grammar = parse_ebnf(c.grammar);
    GrammarMatcher matcher(grammar);
    for (const std::string& text : c.accepted) EXPECT_TRUE(matcher.matches(text)) << text;
    for (const std::string& text : c.rejected) EXPECT_FALSE(matcher.matches(text)) << text;
  }
}

TEST(EbnfTest, ProblemsAreNamedWithTheirPlace) {
  const auto message = [](const std::string& grammar) { return testing::error_message([&] { parse_ebnf(grammar); }); };
  EXPECT_NE(message("root ::= root \"a\" | \"a\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(message("root ::= x? root \"a\"\nx ::= \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(message("root ::= item").find("\"item\" is used but never defined"), std::string::npos);
  EXPECT_NE(message("start ::= \"a\"").find("no rule named \"root\""), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\n").find("unterminated"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"\n  @").find("line 2, column 3"), std::string::npos);
  EXPECT_NE(message("root ::= [b-a]").find("out of order"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"{3,2}").find("m <= n"), std::string::npos);
}

// Code-point ranges become UTF-8 byte sequences: every code point of the range is
// accepted as its own encoding (computed here from the definition), and nothing else:
// neighbours outside the range, overlong forms, surrogates and stray bytes.
TEST(EbnfTest, CodePointRangesMatchTheirUtf8EncodingsOnly) {
  const auto encode = [](uint32_t c) {
    std::string out;
    if (c < 0x80) return std::string(1, static_cast<char>(c));
    const int length = c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    for (int i = length - 1; i >= 0; --i) out += static_cast<char>(0x80 | ((c >> (6 * i)) & 0x3F));
    out[0] = static_cast<char>(static_cast<uint8_t>(out[0]) | (0xF00 >> length));
    out[0] = static_cast<char>(static_cast<uint8_t>(out[0]) & ~(0x80 >> length));
    return out;
  };
  std::mt19937 random(3);
  for (const auto& [first, last] : std::vector<std::pair<uint32_t, uint32_t>>{
           {0x41, 0x5A}, {0x7F, 0x80}, {0x3A9, 0x1F600}, {0xD700, 0xE100}, {0xFFFF, 0x10FFFF}, {0x80, 0x7FF}}) {
    GrammarBuilder builder;
    const int32_t root = builder.add_rule("root");
    add_code_point_range(builder, root, first, last);
    const Grammar grammar = builder.build(root);
    GrammarMatcher matcher(grammar);
    std::vector<uint32_t> samples = {first, last, first > 0 ? first - 1 : 0, last + 1};
    for (int i = 0; i < 300; ++i) samples.push_back(first + random() % (last - first + 1));
    for (uint32_t c : samples) {
      if (c > 0x10FFFF) continue;
      const bool surrogate = c >= 0xD800 && c <= 0xDFFF;
      const bool inside = c >= first && c <= last && !surrogate;
      ASSERT_EQ(matcher.matches(encode(c)), inside) << std::hex << c;
      EXPECT_EQ(utf8_encode(c), encode(c));
    }
    EXPECT_FALSE(matcher.matches("\xC0\x81")) << "overlong";
    EXPECT_FALSE(matcher.matches("\xED\xA0\x80")) << "surrogate";
    EXPECT_FALSE(matcher.matches("\x80"));
  }
}

// A JSON grammar in the dialect, as an agent would send for free-form JSON.
constexpr const char* kJsonGrammar = R"(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}" ws
member ::= string ":" ws value
array  ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"" ws
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ws
ws     ::= [ \t\n]*
)";

TEST(GrammarMatcherTest, FollowsAJsonGrammar) {
  const Grammar grammar = parse_ebnf(kJsonGrammar);
  GrammarMatcher matcher(grammar);
  for (const char* text : {"{}", "[1, 2.5, -3e10]", "{\"a\": [true, null], \"b\": {\"c\": \"\\u00e9 ✓\"}}", "\"x\"", "0"})
    EXPECT_TRUE(matcher.matches(text)) << text;
  for (const char* text : {"{", "[1,]", "{\"a\" 1}", "01", "\"\x01\"", "tru", "{\"a\": }"})
    EXPECT_FALSE(matcher.matches(text)) << text;
  // States are values: stepping twice from one state gives the same state.
  const MatchState after = matcher.step(matcher.start(), "{\"key\": [1, ");
  EXPECT_EQ(matcher.step(matcher.start(), "{\"key\": [1, "), after);
  EXPECT_FALSE(after.dead());
  EXPECT_FALSE(after.accepting);
  EXPECT_TRUE(matcher.step(after, "2]}").accepting);
}

// The trie mask against brute force: each token's bytes stepped one by one from the same
// state; end tokens allowed exactly when the text so far is complete.
// Tokens for the mask tests: JSON punctuation, pieces of literals, UTF-8 pieces, and 300
// random strings over JSON's characters (quotes and backslashes among them).
std::vector<std::string> mask_test_vocabulary() {
  std::vector<std::string> vocab = {"", "{", "}", "[", "]", ",", ":", " ", "\"", "\"a", "a\"", "ab", "true", "tr",
                                    "ue", "null", "1", "12", "2.", ".5", "e3", "-", "\\u", "00e9", "é", "\xc3", "\xa9",
                                    "{\"", "\":", "\"}", ", \"", "[1", "1]", "😀", "\n", "x"};
  std::mt19937 random(7);
  const std::string alphabet = "{}[]\":,. 0123456789abetrunl-\\";
  for (int i = 0; i < 300; ++i) {
    std::string token;
    for (int n = 1 + static_cast<int>(random() % 4); n > 0; --n) token += alphabet[random() % alphabet.size()];
    vocab.push_back(token);
  }
  return vocab;
}

// Holds the trie's mask at the state after each prefix to the brute-force one.
void expect_masks_match(const Grammar& grammar, const std::vector<std::string>& prefixes) {
  const std::vector<std::string> vocab = mask_test_vocabulary();
  const int32_t end = 0;  // the empty string: never text, allowed only as the end token
  const TokenTrie trie(vocab, {end});
  GrammarMatcher matcher(grammar);
  std::vector<uint32_t> mask;
  for (const std::string& prefix : prefixes) {
    SCOPED_TRACE(prefix);
    const MatchState state = matcher.step(matcher.start(), prefix);
    ASSERT_FALSE(state.dead());
    trie.allowed(matcher, state, mask);
    size_t allowed = 0;
    for (size_t id = 0; id < vocab.size(); ++id) {
      const bool expected = id == end ? state.accepting : !matcher.step(state, vocab[id]).dead();
      const bool got = (mask[id >> 5] >> (id & 31)) & 1u;
      ASSERT_EQ(got, expected) << "token " << id << " \"" << vocab[id] << "\"";
      allowed += got;
    }
    EXPECT_GT(allowed, 0u);
  }
}

TEST(TokenMaskTest, EqualsTheTokenByTokenMask) {
  expect_masks_match(parse_ebnf(kJsonGrammar),
                     {"", "{", "{\"a", "{\"a\": [1", "{\"a\": [1, tr", "{\"a\": \"\xc3", "[12", "12", "\"x\""});
}

// Inside a string most bytes lead back to the same state, and the mask takes the tokens
// made of them at once, walking only the subtrees with other bytes: held to brute force
// in strings with and without escapes, in keys, after a multi-byte character's first byte
// and in a bounded string (whose states do not loop).
TEST(TokenMaskTest, StringStatesMatchTheTokenByTokenMask) {
  const auto schema = nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string", "maxLength": 3}},
          "additionalProperties": {"type": "string"}})");
  expect_masks_match(compile_json_schema(schema),
                     {"{\"a\": \"", "{\"a\": \"xy", "{\"a\": \"x\\", "{\"a\": \"x\\u00", "{\"a\": \"\xc3",
                      "{\"a\": \"x\", \"b\": \"1", "{\"a\": \"x\", \"zz", "{\"a\": \"x\", \"zz\": \"q"});
}

}  // namespace
}  // namespace ernie::structured
