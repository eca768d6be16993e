// JSON Schema as grammars: documents sampled from each compiled schema are checked by
// an independent validator (Debian's python3-jsonschema, with json.loads for syntax);
// documents that break the schema are rejected; unsupported keywords are refused by name.
#include "structured/json_schema.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "structured/constraint.h"
#include "structured/matcher.h"
#include "support/test_support.h"

namespace ernie::structured {
namespace {

using json = nlohmann::ordered_json;

// A random document of the grammar over printable ASCII (nullopt when the walk ran long).
std::optional<std::string> sample_document(GrammarMatcher& matcher, std::mt19937& random) {
  MatchState state = matcher.start();
  std::string text;
  while (text.size() < 400) {
    std::vector<uint8_t> bytes, closing;
    for (int b = 0x20; b < 0x7f; ++b) {
      if (!matcher.can_take(state, static_cast<uint8_t>(b))) continue;
      bytes.push_back(static_cast<uint8_t>(b));
      if (b == '"' || b == ']' || b == '}' || (b >= '0' && b <= '9')) closing.push_back(static_cast<uint8_t>(b));
    }
    if (state.accepting && (bytes.empty() || random() % 3 == 0)) return text;
    if (bytes.empty()) return std::nullopt;
    // Past 120 bytes, steer towards closing what is open.
    const std::vector<uint8_t>& from = text.size() > 120 && !closing.empty() ? closing : bytes;
    const uint8_t byte = from[random() % from.size()];
    text += static_cast<char>(byte);
    state = matcher.step(state, byte);
  }
  return std::nullopt;
}

const std::vector<json>& schemas() {
  static const std::vector<json> list = {
      json::parse(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                       "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3}},
                      "required": ["name"]})"),
      json::parse(R"({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 4})"),
      json::parse(R"({"enum": ["red", "green", 3, null, {"a": [1]}]})"),
      json::parse(R"({"type": ["string", "null"], "minLength": 2, "maxLength": 6})"),
      json::parse(R"({"anyOf": [{"type": "boolean"}, {"const": "yes"}, {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]}]})"),
      json::parse(R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
                       "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                       "required": ["value"]}}, "$ref": "#/$defs/node"})"),
      json::parse(R"({"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
                       "when": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date"}},
                      "required": ["id", "when", "day"], "additionalProperties": false})"),
      json::parse(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "minItems": 2, "items": false})"),
      json::parse(R"({"type": "object", "properties": {"a": {"type": "boolean"}}, "additionalProperties": {"type": "integer"}})"),
      json::parse(R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
                       "note": {"type": "string", "pattern": "^ab+c"}, "quote": {"type": "string", "pattern": "^say \"[a-z\\\\]+\"$"}},
                      "required": ["code", "note", "quote"]})"),
      json::parse(R"({"title": "tool call", "type": "object", "properties": {"name": {"const": "get_weather"},
                       "arguments": {"type": "object", "properties": {"city": {"type": "string"},
                       "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}, "required": ["name", "arguments"]})"),
      json::parse(R"({"type": "array", "items": {"type": "integer", "minimum": -120, "exclusiveMaximum": 4077}})"),
      json::parse(R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 18}, "t": {"type": "integer", "maximum": -7}}})"),
  };
  return list;
}

constexpr const char* kValidator = R"(
import json, sys, jsonschema
cases = json.load(open(sys.argv[1]))
checked = 0
for case in cases:
    for text in case["outputs"]:
        document = json.loads(text)
        jsonschema.validate(document, case["schema"])
        checked += 1
print("ok", checked)
)";

TEST(JsonSchemaTest, SampledDocumentsValidateWithPythonJsonschema) {
  std::mt19937 random(21);
  json cases = json::array();
  for (bool any_whitespace : {true, false}) {
    for (const json& schema : schemas()) {
      SCOPED_TRACE(schema.dump());
      GrammarMatcher matcher(compile_json_schema(schema, {.any_whitespace = any_whitespace}));
      json outputs = json::array();
      for (int i = 0; i < 40 && outputs.size() < 15; ++i)
        if (const auto text = sample_document(matcher, random)) outputs.push_back(*text);
      ASSERT_GE(outputs.size(), 5u) << "too few finished samples";
      cases.push_back({{"schema", schema}, {"outputs", outputs}});
    }
  }
  testing::TempDir temp;
  testing::write_file(temp.file("cases.json"), cases.dump());
  testing::write_file(temp.file("validate.py"), kValidator);
  const auto result = testing::run_shell("/usr/bin/python3 " + temp.file("validate.py") + " " + temp.file("cases.json"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("ok "), std::string::npos) << result.output;
}

TEST(JsonSchemaTest, DocumentsBreakingTheSchemaAreRejected) {
  GrammarMatcher person(compile_json_schema(schemas()[0]));
  EXPECT_TRUE(person.matches(R"({"name": "Ann", "age": 3, "tags": ["a", "bc"]})"));
  EXPECT_TRUE(person.matches(R"({"name":"Ann"})"));
  EXPECT_FALSE(person.matches(R"({"age": 3})")) << "name is required";
  EXPECT_FALSE(person.matches(R"({"name": "Ann", "extra": 1})")) << "no additional properties";
  EXPECT_FALSE(person.matches(R"({"name": "Ann", "tags": ["toolong"]})")) << "maxLength 5";
  EXPECT_FALSE(person.matches(R"({"name": "Ann", "tags": ["a", "b", "c", "d"]})")) << "maxItems 3";
  EXPECT_FALSE(person.matches(R"({"name": "Ann", "age": 1.5})")) << "integer";
  GrammarMatcher numbers(compile_json_schema(schemas()[1]));
  EXPECT_FALSE(numbers.matches("[1]"));
  EXPECT_TRUE(numbers.matches("[1, -2.5e3]"));
  GrammarMatcher tree(compile_json_schema(schemas()[5]));
  EXPECT_TRUE(tree.matches(R"({"value": 1, "children": [{"value": 2, "children": []}]})"));
  EXPECT_FALSE(tree.matches(R"({"value": 1, "children": [{"children": []}]})"));
  GrammarMatcher patterned(compile_json_schema(schemas()[9]));
  EXPECT_TRUE(patterned.matches(R"({"code": "AB-123", "note": "abbbcyy", "quote": "say \"hi\\\\\""})"));
  EXPECT_FALSE(patterned.matches(R"({"code": "AB-1234", "note": "abc", "quote": "say \"hi\""})")) << "anchored";
  EXPECT_FALSE(patterned.matches(R"({"code": "AB-123", "note": "xabc", "quote": "say \"hi\""})")) << "anchored start";
  // An unanchored pattern is searched for, as JSON Schema (and re.search) do.
  GrammarMatcher searched(compile_json_schema(json::parse(R"({"type": "string", "pattern": "ab+c"})")));
  EXPECT_TRUE(searched.matches(R"("xxabbbcyy")"));
  EXPECT_FALSE(searched.matches(R"("xxacyy")"));
  GrammarMatcher object(compile_json_object());
  EXPECT_TRUE(object.matches(R"({"any": [1, {"x": null}]})"));
  EXPECT_FALSE(object.matches("[1]"));
  GrammarMatcher compact(compile_json_schema(schemas()[0], {.any_whitespace = false}));
  EXPECT_TRUE(compact.matches(R"({"name": "Ann", "age": 3})"));
  EXPECT_FALSE(compact.matches(R"({ "name": "Ann"})"));
}

// Integer bounds: every integer of a window around the bounds is accepted exactly when
// it lies within them (the definition, checked value by value).
TEST(JsonSchemaTest, IntegerBoundsAcceptExactlyTheIntegersWithinThem) {
  struct Bounds {
    const char* schema;
    int64_t lo, hi;  // inclusive; INT64_MIN / INT64_MAX: unbounded
  };
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  for (const Bounds& b : {Bounds{R"({"minimum": 0, "maximum": 9})", 0, 9}, Bounds{R"({"minimum": 7, "maximum": 1234})", 7, 1234},
                          Bounds{R"({"minimum": -305, "maximum": -17})", -305, -17}, Bounds{R"({"minimum": -45, "maximum": 2002})", -45, 2002},
                          Bounds{R"({"minimum": 99})", 99, kNone}, Bounds{R"({"maximum": -3})", -kNone, -3},
                          Bounds{R"({"maximum": 250})", -kNone, 250}, Bounds{R"({"exclusiveMinimum": 10, "exclusiveMaximum": 100})", 11, 99},
                          Bounds{R"({"minimum": 2.5, "maximum": 40.5})", 3, 40}, Bounds{R"({"exclusiveMinimum": -1.5})", -1, kNone},
                          Bounds{R"({"minimum": 1000, "maximum": 1000})", 1000, 1000}}) {
    json schema = json::parse(b.schema);
    schema["type"] = "integer";
    GrammarMatcher matcher(compile_json_schema(schema));
    for (int64_t v = -2600; v <= 2600; ++v) {
      const bool within = v >= b.lo && v <= b.hi;
      ASSERT_EQ(matcher.matches(std::to_string(v)), within) << b.schema << " at " << v;
    }
    for (const int64_t far : {int64_t{-123456789}, int64_t{987654321}})
      EXPECT_EQ(matcher.matches(std::to_string(far)), far >= b.lo && far <= b.hi) << b.schema << " at " << far;
    EXPECT_FALSE(matcher.matches("-0"));
    EXPECT_FALSE(matcher.matches("007"));
  }
}

TEST(JsonSchemaTest, UnsupportedKeywordsAreRefusedByName) {
  const auto message = [](const char* schema) {
    return testing::error_message([&] { compile_json_schema(json::parse(schema)); });
  };
  EXPECT_NE(message(R"({"type": "object", "patternProperties": {"^a": {}}})").find("\"patternProperties\""), std::string::npos);
  EXPECT_NE(message(R"({"type": "string", "pattern": "(a)\\1"})").find("backreferences"), std::string::npos);
  EXPECT_NE(message(R"({"type": "number", "minimum": 0})").find("integers only"), std::string::npos);
  EXPECT_NE(message(R"({"maximum": 0})").find("\"type\": \"integer\""), std::string::npos);
  EXPECT_NE(message(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("no integer"), std::string::npos);
  EXPECT_NE(message(R"({"not": {"type": "string"}})").find("\"not\""), std::string::npos);
  EXPECT_NE(message(R"({"type": "string", "format": "ipv4"})").find("\"ipv4\""), std::string::npos);
  EXPECT_NE(message(R"({"$ref": "#/components/x"})").find("$ref"), std::string::npos);
  EXPECT_NE(message(R"({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2}}})").find("#/properties/a"),
            std::string::npos);
  EXPECT_NE(message("false").find("matches nothing"), std::string::npos);
}

}  // namespace
}  // namespace ernie::structured

namespace ernie::structured {
namespace {

TEST(ConstraintTest, EveryKindCompilesAndChoicesAreExact) {
  GrammarMatcher choice(compile_constraint({.kind = ConstraintSpec::Kind::kChoice, .choices = {"yes", "no", "yes!"}}));
  EXPECT_TRUE(choice.matches("yes"));
  EXPECT_TRUE(choice.matches("yes!"));
  EXPECT_FALSE(choice.matches("ye"));
  EXPECT_FALSE(choice.matches("no!"));
  EXPECT_TRUE(GrammarMatcher(compile_constraint({.kind = ConstraintSpec::Kind::kRegex, .text = "[0-9]+"})).matches("42"));
  EXPECT_TRUE(GrammarMatcher(compile_constraint({.kind = ConstraintSpec::Kind::kGrammar, .text = "root ::= \"x\"+"})).matches("xx"));
  EXPECT_TRUE(GrammarMatcher(compile_constraint({.kind = ConstraintSpec::Kind::kJsonSchema, .text = R"({"type": "integer"})"}))
                  .matches("-7"));
  EXPECT_TRUE(GrammarMatcher(compile_constraint({.kind = ConstraintSpec::Kind::kJsonObject})).matches("{}"));
  EXPECT_NE(testing::error_message([] { compile_constraint({.kind = ConstraintSpec::Kind::kJsonSchema, .text = "{"}); })
                .find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(testing::error_message([] { compile_choices({}); }).find("at least one"), std::string::npos);
  // Keys tell constraints apart.
  const ConstraintSpec a{.kind = ConstraintSpec::Kind::kChoice, .choices = {"ab", "c"}};
  const ConstraintSpec b{.kind = ConstraintSpec::Kind::kChoice, .choices = {"a", "bc"}};
  EXPECT_NE(a.key(), b.key());
}

}  // namespace
}  // namespace ernie::structured
