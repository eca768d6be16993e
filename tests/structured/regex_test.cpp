// guided_regex: compiled regexes against std::regex (libstdc++'s ECMAScript engine, an
// independent implementation) on strings sampled from our grammar and random ones, and
// the features a grammar cannot hold refused by name.
#include "structured/regex.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>

#include "structured/matcher.h"
#include "support/test_support.h"

namespace ernie::structured {
namespace {

// A random ASCII sentence of the grammar (nullopt when the walk did not finish).
std::optional<std::string> sample_sentence(GrammarMatcher& matcher, std::mt19937& random) {
  MatchState state = matcher.start();
  std::string text;
  while (text.size() < 60) {
    std::vector<uint8_t> bytes;
    for (int b = 1; b < 0x80; ++b)
      if (matcher.can_take(state, static_cast<uint8_t>(b))) bytes.push_back(static_cast<uint8_t>(b));
    if (state.accepting && (bytes.empty() || random() % 4 == 0)) return text;
    if (bytes.empty()) return std::nullopt;
    const uint8_t byte = bytes[random() % bytes.size()];
    text += static_cast<char>(byte);
    state = matcher.step(state, byte);
  }
  return state.accepting ? std::optional<std::string>(text) : std::nullopt;
}

TEST(RegexTest, AgreesWithStdRegexOnSampledAndRandomStrings) {
  const std::vector<std::string> patterns = {
      "[a-c]+x?", "(ab|cd)*e", "\\d{2,4}-\\w+", "a.c", "[^abc]{2}", "(?:foo|ba[rz])+", "x{3}", "^abc$",
      "[0-9]{1,3}(\\.[0-9]{1,3}){3}", "\\s*\\S+", "a|b|", "[\\w.-]+@[a-z]+\\.(com|org)", "(?P<y>[0-9]{4})-(?<m>0[1-9]|1[0-2])",
      "[-+]?(0|[1-9][0-9]*)(\\.[0-9]+)?", "\\(\\)\\[\\]\\{\\}\\.\\*", "a{2,}b{,3}", "[\\d\\s]+", "\\x41\\u0042c*?"};
  std::mt19937 random(13);
  const std::string alphabet = "abcdexyz019-+.@ ()[]{}*_ABCorgm\t";
  for (const std::string& pattern : patterns) {
    SCOPED_TRACE(pattern);
    const Grammar grammar = compile_regex(pattern);
    GrammarMatcher matcher(grammar);
    // Python's {,3} is {0,3}; ECMAScript has only the second spelling.
    const std::string ecma = pattern == "a{2,}b{,3}" ? "a{2,}b{0,3}" : pattern;
    const std::string plain = std::regex_replace(std::regex_replace(ecma, std::regex("\\(\\?P?<[a-z]+>"), "("),
                                                 std::regex("\\\\u0042"), "B");
    const std::regex oracle(plain, std::regex::ECMAScript);
    int sampled = 0;
    for (int i = 0; i < 200; ++i) {
      if (const auto text = sample_sentence(matcher, random)) {
        ++sampled;
        ASSERT_TRUE(std::regex_match(*text, oracle)) << "sampled \"" << *text << "\"";
      }
      std::string text;
      for (int n = static_cast<int>(random() % 8); n > 0; --n) text += alphabet[random() % alphabet.size()];
      ASSERT_EQ(matcher.matches(text), std::regex_match(text, oracle)) << "random \"" << text << "\"";
    }
    EXPECT_GT(sampled, 20);
  }
}

// Python reads a ] first in a class as a member (ECMAScript would see an empty class).
TEST(RegexTest, ABracketFirstInAClassIsAMember) {
  GrammarMatcher matcher(compile_regex("[]a]+"));
  EXPECT_TRUE(matcher.matches("]a]"));
  EXPECT_FALSE(matcher.matches("b"));
}

TEST(RegexTest, NonAsciiCharactersAreWholeCodePoints) {
  const Grammar grammar = compile_regex("[é-ë]{2}.");
  GrammarMatcher matcher(grammar);
  EXPECT_TRUE(matcher.matches("éë✓"));
  EXPECT_FALSE(matcher.matches("éë\n"));
  EXPECT_FALSE(matcher.matches("ée✓"));
  EXPECT_FALSE(matcher.matches("\xc3\xa9\xc3"));
}

TEST(RegexTest, FeaturesAGrammarCannotHoldAreRefusedByName) {
  const auto message = [](const std::string& pattern) { return testing::error_message([&] { compile_regex(pattern); }); };
  EXPECT_NE(message("(a)\\1").find("backreferences"), std::string::npos);
  EXPECT_NE(message("a(?=b)").find("lookaround"), std::string::npos);
  EXPECT_NE(message("(?<!a)b").find("lookaround"), std::string::npos);
  EXPECT_NE(message("\\bword").find("word boundaries"), std::string::npos);
  EXPECT_NE(message("(?i)abc").find("inline flags"), std::string::npos);
  EXPECT_NE(message("a++").find("possessive"), std::string::npos);
  EXPECT_NE(message("a^b").find("^ is supported only at the start"), std::string::npos);
  EXPECT_NE(message("(ab").find("missing )"), std::string::npos);
  EXPECT_NE(message("ab)").find("unbalanced )"), std::string::npos);
  EXPECT_NE(message("*a").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(message("[z-a]").find("out of order"), std::string::npos);
}

}  // namespace
}  // namespace ernie::structured
