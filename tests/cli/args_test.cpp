#include "cli/args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;

const ArgParser kParser("ernie test", "A test command.",
                        {{"model", "DIR", "model dir", ""},
                         {"max-tokens", "N", "tokens", "16"},
                         {"temperature", "T", "temp", "0.8"},
                         {"ignore-eos", "", "flag", ""}});

ParsedArgs parse(std::vector<std::string> words) {
  std::vector<char*> argv = {const_cast<char*>("ernie"), const_cast<char*>("test")};
  for (auto& word : words) argv.push_back(word.data());
  return kParser.parse(static_cast<int>(argv.size()), argv.data(), 2);
}

std::string error_of(std::vector<std::string> words) {
  return testing::error_message([&] { parse(std::move(words)); });
}

TEST(ArgsTest, ParsesBothSpellingsAndDefaults) {
  const ParsedArgs args = parse({"--model", "/m", "--max_tokens=5", "--ignore-eos"});
  EXPECT_EQ(args.get("model"), "/m");
  EXPECT_EQ(args.get_int("max-tokens"), 5);
  EXPECT_DOUBLE_EQ(args.get_double("temperature"), 0.8);
  EXPECT_TRUE(args.flag("ignore-eos"));
  EXPECT_FALSE(args.has("temperature"));
  EXPECT_TRUE(parse({"--help"}).help_requested());
}

TEST(ArgsTest, ErrorsSayWhatWasWrong) {
  EXPECT_THAT(error_of({"--max-token", "3"}), HasSubstr("unknown flag --max-token; did you mean --max-tokens?"));
  EXPECT_THAT(error_of({"--zzzzzzzzzzzz"}), HasSubstr("unknown flag --zzzzzzzzzzzz (see --help)"));
  EXPECT_THAT(error_of({"--model"}), HasSubstr("--model needs a value (DIR)"));
  EXPECT_THAT(error_of({"--model", "a", "--model", "b"}), HasSubstr("given twice"));
  EXPECT_THAT(error_of({"stray"}), HasSubstr("unexpected argument \"stray\""));
  EXPECT_THAT(error_of({"--ignore-eos=yes"}), HasSubstr("takes no value"));
  try {
    parse({"--max-tokens", "ten"}).get_int("max-tokens");
    FAIL();
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("--max-tokens expects an integer, got \"ten\""));
  }
  EXPECT_THROW(parse({}).get("model"), Error);
}

TEST(ArgsTest, HelpListsEveryFlagWithItsDefault) {
  const std::string help = kParser.help_text();
  EXPECT_THAT(help, HasSubstr("--max-tokens N"));
  EXPECT_THAT(help, HasSubstr("(default: 16)"));
  EXPECT_THAT(help, HasSubstr("--ignore-eos"));
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

}  // namespace
}  // namespace ernie
