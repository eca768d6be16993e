// structural_tag and forced tool calls: which texts the compiled grammar takes, checked
// on hand-written sentences (the JSON parts are held to their schemas by
// json_schema_test; here the concern is the free text, the triggers and the tags).
#include "structured/structural_tag.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "structured/constraint.h"
#include "structured/matcher.h"
#include "support/test_support.h"

namespace ernie::structured {
namespace {

using json = nlohmann::ordered_json;
using ::testing::HasSubstr;

const char* kWeatherTag = R"({"type": "structural_tag",
  "structures": [
    {"begin": "<function=get_weather>", "schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                                   "required": ["city"]}, "end": "</function>"},
    {"begin": "<function=get_time>", "schema": {"type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}},
                                                "required": ["zone"]}, "end": "</function>"}],
  "triggers": ["<function="]})";

GrammarMatcher tag_matcher(const std::string& tag) {
  return GrammarMatcher(compile_constraint({.kind = ConstraintSpec::Kind::kStructuralTag, .text = tag}));
}

TEST(StructuralTagTest, FreeTextWithTaggedCallsWhereverATriggerAppears) {
  GrammarMatcher matcher = tag_matcher(kWeatherTag);
  for (const char* text : {"", "hello", "a < b and <function but no equals sign <functio",
                           R"(Let me look. <function=get_weather>{"city": "Paris"}</function> Done.)",
                           R"(<function=get_time>{"zone": "utc"}</function><function=get_weather>{"city":"x"}</function>)"})
    EXPECT_TRUE(matcher.matches(text)) << text;
  for (const char* text : {"<function=get_date>{}</function>", R"(<function=get_time>{"zone": "pst"}</function>)",
                           R"(<function=get_weather>{"town": "x"}</function>)",
                           R"(<function=get_weather>{"city": "x"}</func>)"})
    EXPECT_TRUE(matcher.step(matcher.start(), text).dead()) << text;
  // Inside a structure the output cannot end.
  const MatchState open = matcher.step(matcher.start(), R"(see <function=get_weather>{"city": "x"})");
  EXPECT_FALSE(open.accepting);
  EXPECT_FALSE(open.dead());
}

TEST(StructuralTagTest, ATriggerEndingInsideALongerTriggersPrefixStillFires) {
  const std::string tag = R"({"structures": [{"begin": "b=", "schema": {"const": 1}, "end": ";"},
                                             {"begin": "abc=", "schema": {"const": 2}, "end": ";"}],
                              "triggers": ["abc", "b"]})";
  GrammarMatcher matcher = tag_matcher(tag);
  EXPECT_TRUE(matcher.matches("xab=1; ac"));  // "ab" ends with the trigger "b", which fires first
  EXPECT_TRUE(matcher.matches("b=1;"));
  EXPECT_TRUE(matcher.step(matcher.start(), "ab=2;").dead());
  EXPECT_TRUE(matcher.step(matcher.start(), "xbz").dead());
}

TEST(StructuralTagTest, MalformedTagsAreRefusedSayingWhy) {
  const auto error = [](const std::string& tag) {
    return testing::error_message([&] { tag_matcher(tag); });
  };
  EXPECT_THAT(error(R"({"structures": [{"begin": "<f>", "schema": {}, "end": "</f>"}], "triggers": ["<g"]})"),
              HasSubstr("starts with none of the triggers"));
  EXPECT_THAT(error(R"({"structures": [], "triggers": ["<g"]})"), HasSubstr("non-empty list \"structures\""));
  EXPECT_THAT(error(R"({"structures": [{"begin": "<g>", "end": 3}], "triggers": ["<g"]})"), HasSubstr("\"end\""));
  EXPECT_THAT(error(R"({"structures": [{"begin": "<g>", "schema": {"multipleOf": 2}, "end": "x"}], "triggers": ["<g"]})"),
              HasSubstr("multipleOf"));
  EXPECT_THAT(error("[1"), HasSubstr("not valid JSON"));
}

TEST(ToolCallSequenceTest, OnlyCallsBetweenTheCountsWithUpToTwoNewlinesAround) {
  json calls = {{"min", 1}, {"max", -1}, {"structures", json::array()}};
  for (const char* name : {"get_weather", "get_time"})
    calls["structures"].push_back(
        {{"begin", "<tool_call>\n"},
         {"schema", {{"type", "object"},
                     {"properties", {{"name", {{"const", name}}}, {"arguments", {{"type", "object"}}}}},
                     {"required", {"name", "arguments"}}}},
         {"end", "\n</tool_call>"}});
  GrammarMatcher any(compile_constraint({.kind = ConstraintSpec::Kind::kToolCalls, .text = calls.dump()}));
  const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>";
  const std::string time = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(any.matches(weather));
  EXPECT_TRUE(any.matches("\n\n" + weather + "\n" + time + "\n"));
  EXPECT_FALSE(any.matches(""));
  EXPECT_FALSE(any.matches("\n\n\n" + weather));
  EXPECT_TRUE(any.step(any.start(), "Sure: " + weather).dead());
  EXPECT_TRUE(any.step(any.start(), "<tool_call>\n{\"name\": \"get_date\"").dead());
  calls["max"] = 1;
  GrammarMatcher one(compile_constraint({.kind = ConstraintSpec::Kind::kToolCalls, .text = calls.dump()}));
  EXPECT_TRUE(one.matches(time));
  EXPECT_FALSE(one.matches(time + "\n" + time));
}

}  // namespace
}  // namespace ernie::structured
