// The linear ordered parse against the JSON library's own parsers: same values, members
// in the order written, repeated keys resolved as nlohmann::json resolves them.
#include "serving/ordered_json_parse.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace ernie {
namespace {

using ordered_json = nlohmann::ordered_json;

TEST(OrderedJsonParseTest, KeepsTheWrittenOrderAndEveryValue) {
  const std::string text = R"({"z": 1, "a": [true, null, -2, 3.5, "s", {"y": {}, "b": []}], "m": {"q": 18446744073709551615}})";
  const ordered_json parsed = parse_ordered_json(text);
  EXPECT_EQ(parsed, ordered_json::parse(text));
  EXPECT_EQ(parsed.dump(), ordered_json::parse(text).dump());
  EXPECT_EQ(parsed.begin().key(), "z");
  EXPECT_EQ(parse_ordered_json("[1, [2, [3]]]"), ordered_json::parse("[1, [2, [3]]]"));
  EXPECT_EQ(parse_ordered_json("\"x\""), "x");
}

TEST(OrderedJsonParseTest, ARepeatedKeyKeepsItsFirstPlaceAndLastValue) {
  const ordered_json parsed = parse_ordered_json(R"({"a": 1, "b": 2, "a": {"c": 3}})");
  EXPECT_EQ(parsed.size(), 2u);
  EXPECT_EQ(parsed.begin().key(), "a");
  EXPECT_EQ(parsed.at("a"), nlohmann::json::parse(R"({"a": 1, "b": 2, "a": {"c": 3}})").at("a"));
}

TEST(OrderedJsonParseTest, MalformedTextThrowsTheLibrarysParseError) {
  EXPECT_THROW(parse_ordered_json("{\"a\": }"), nlohmann::json::parse_error);
  EXPECT_THROW(parse_ordered_json("[1, 2"), nlohmann::json::parse_error);
}

TEST(OrderedJsonParseTest, AnObjectWithManyKeysIsReadInLinearTime) {
  // 200,000 keys: a parser that searches the keys on each insert does 2e10 comparisons
  // (minutes); this one a hash lookup each. Measured against a parse of the same text
  // into the unordered json, which is linear too: not a timing test, a complexity one.
  std::string text = "{";
  for (int i = 0; i < 200000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += "}";
  const auto started = std::chrono::steady_clock::now();
  const ordered_json parsed = parse_ordered_json(text);
  const double ordered = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const auto again = std::chrono::steady_clock::now();
  const nlohmann::json reference = nlohmann::json::parse(text);
  const double unordered = std::chrono::duration<double>(std::chrono::steady_clock::now() - again).count();
  EXPECT_EQ(parsed.size(), 200000u);
  EXPECT_EQ(parsed.at("k123456"), 123456);
  EXPECT_EQ(reference.size(), parsed.size());
  EXPECT_LT(ordered, 20 * unordered + 0.5) << "ordered " << ordered << " s, unordered " << unordered << " s";
}

}  // namespace
}  // namespace ernie
