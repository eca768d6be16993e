#include "serving/output_parser.h"

#include <gtest/gtest.h>

#include "support/test_support.h"
#include "text/tokenizer.h"

namespace ernie {
namespace {

struct Expected {
  std::string reasoning;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

struct Case {
  std::string name;
  ReasoningParser reasoning;
  bool tools;
  OutputSection start;
  std::string text;
  Expected expected;
};

std::vector<Case> cases() {
  const std::string weather = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}";
  return {
      {"x1_response", ReasoningParser::kErnieX1, true, OutputSection::kReasoning,
       "Let me think.\nStep two.\n</think>\n\n<response>\nParis is the capital.\n\nIt is big.\n</response>\n",
       {"Let me think.\nStep two.", "Paris is the capital.\n\nIt is big.", {}}},
      {"x1_two_tool_calls", ReasoningParser::kErnieX1, true, OutputSection::kReasoning,
       "Need the weather.\n</think>\n\n<tool_call>\n" + weather +
           "\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n",
       {"Need the weather.", "", {{"get_weather", "{\"city\":\"Paris\",\"unit\":\"c\"}"}, {"get_time", "{}"}}}},
      {"x1_malformed_tool_json_is_content", ReasoningParser::kErnieX1, true, OutputSection::kReasoning,
       "Hmm.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
       {"Hmm.", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>", {}}},
      {"x1_call_without_name_is_content", ReasoningParser::kErnieX1, true, OutputSection::kReasoning,
       "r\n</think>\n<tool_call>\n{\"arguments\": {}}\n</tool_call>",
       {"r", "<tool_call>\n{\"arguments\": {}}\n</tool_call>", {}}},
      {"x1_unterminated_call", ReasoningParser::kErnieX1, true, OutputSection::kReasoning,
       "r\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"城市 ok\"}}",
       {"r", "", {{"f", "{\"q\":\"城市 ok\"}"}}}},
      {"x1_string_arguments_kept", ReasoningParser::kErnieX1, true, OutputSection::kReasoning,
       "r\n</think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>",
       {"r", "", {{"f", "{\"a\": 1}"}}}},
      {"x1_never_finishes_thinking", ReasoningParser::kErnieX1, true, OutputSection::kReasoning,
       "thinking and thinking\n", {"thinking and thinking\n", "", {}}},
      {"x1_answer_outside_blocks", ReasoningParser::kErnieX1, true, OutputSection::kReasoning,
       "r\n</think>\n\n  Just an answer.\n\n", {"r", "Just an answer.", {}}},
      {"x1_tool_tags_without_tool_parser_stay_text", ReasoningParser::kErnieX1, false, OutputSection::kReasoning,
       "r\n</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>\n",
       {"r", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", {}}},
      {"x1_unclosed_response", ReasoningParser::kErnieX1, true, OutputSection::kReasoning,
       "r\n</think>\n<response>\nhalf an answer\n", {"r", "half an answer\n", {}}},
      {"x1_prompt_already_in_response", ReasoningParser::kErnieX1, true, OutputSection::kResponse,
       "\nanswer</response>", {"", "answer", {}}},
      {"x1_repeated_think_tag_dropped", ReasoningParser::kErnieX1, true, OutputSection::kReasoning,
       "<think>\nidea\n</think><response>a</response>", {"\nidea", "a", {}}},
      {"vl_split", ReasoningParser::kErnie45Vl, false, OutputSection::kReasoning, "reason\n</think>\nanswer\n",
       {"reason\n", "\nanswer\n", {}}},
      {"vl_thinking_disabled", ReasoningParser::kErnie45Vl, false, OutputSection::kAnswer, "a</think>b",
       {"", "a</think>b", {}}},
      {"tools_only", ReasoningParser::kNone, true, OutputSection::kAnswer,
       "Sure <tool_call>{\"name\":\"f\",\"arguments\":{\"x\":[1,2]}}</tool_call> done <tool_",
       {"", "Sure  done <tool_", {{"f", "{\"x\":[1,2]}"}}}},
      {"no_parsers_markers_are_text", ReasoningParser::kNone, false, OutputSection::kAnswer,
       "<think>a</think><response>b</response>", {"", "<think>a</think><response>b</response>", {}}},
  };
}

Expected collect(std::vector<ParsedDelta> deltas) {
  Expected got;
  for (ParsedDelta& delta : deltas) {
    got.reasoning += delta.reasoning;
    got.content += delta.content;
    for (const ParsedToolCall& call : delta.tool_calls) {
      EXPECT_EQ(call.id.rfind("chatcmpl-tool-", 0), 0u) << call.id;
      EXPECT_EQ(call.id.size(), std::string("chatcmpl-tool-").size() + 32);
      got.calls.emplace_back(call.name, call.arguments);
    }
  }
  return got;
}

Expected parse_in_pieces(const Case& c, const std::vector<size_t>& cuts) {
  OutputParser parser(c.reasoning, c.tools, c.start);
  std::vector<ParsedDelta> deltas;
  size_t begin = 0;
  for (size_t cut : cuts) {
    deltas.push_back(parser.push(std::string_view(c.text).substr(begin, cut - begin)));
    begin = cut;
  }
  deltas.push_back(parser.push(std::string_view(c.text).substr(begin)));
  deltas.push_back(parser.finish());
  return collect(std::move(deltas));
}

void expect_equal(const Expected& got, const Expected& want, const std::string& where) {
  EXPECT_EQ(got.reasoning, want.reasoning) << where;
  EXPECT_EQ(got.content, want.content) << where;
  EXPECT_EQ(got.calls, want.calls) << where;
}

TEST(OutputParserTest, WholeAnswersSplitAsTheFormatSays) {
  for (const Case& c : cases()) expect_equal(parse_in_pieces(c, {}), c.expected, c.name);
}

// Every cut into two deltas, and every cut into three, gives the same split: markers
// and withheld newlines may straddle any delta boundary.
TEST(OutputParserTest, EverySplitPositionGivesTheSameAnswer) {
  for (const Case& c : cases()) {
    for (size_t i = 0; i <= c.text.size(); ++i) {
      expect_equal(parse_in_pieces(c, {i}), c.expected, c.name + " cut at " + std::to_string(i));
      for (size_t j = i; j <= c.text.size(); j += 3)
        expect_equal(parse_in_pieces(c, {i, j}), c.expected, c.name + " cuts at " + std::to_string(i) + "," + std::to_string(j));
    }
  }
}

TEST(OutputParserTest, ByteByByteStreamingNeverShowsPartOfAMarker) {
  for (const Case& c : cases()) {
    OutputParser parser(c.reasoning, c.tools, c.start);
    std::vector<ParsedDelta> deltas;
    for (char ch : c.text) {
      deltas.push_back(parser.push(std::string_view(&ch, 1)));
      // No reasoning text here contains '<' except inside markers.
      EXPECT_EQ(deltas.back().reasoning.find('<'), std::string::npos) << c.name;
    }
    deltas.push_back(parser.finish());
    expect_equal(collect(std::move(deltas)), c.expected, c.name + " byte by byte");
  }
}

TEST(OutputParserTest, ReasoningIsReportedWhileItStreams) {
  OutputParser parser(ReasoningParser::kErnieX1, true, OutputSection::kReasoning);
  EXPECT_EQ(parser.push("step one").reasoning, "step one");
  EXPECT_TRUE(parser.in_reasoning());
  EXPECT_EQ(parser.push("\n").reasoning, "");  // could be the newline before </think>
  EXPECT_EQ(parser.push("\nmore").reasoning, "\n\nmore");
  const ParsedDelta end = parser.push("\n</think>\n\n<response>\nA");
  EXPECT_EQ(end.reasoning, "");
  EXPECT_EQ(end.content, "A");
  EXPECT_FALSE(parser.in_reasoning());
}

TEST(OutputParserTest, ToolCallIdsAreUnique) {
  EXPECT_NE(new_tool_call_id(), new_tool_call_id());
}

TEST(OutputParserTest, ParserNamesAreCheckedAndListed) {
  EXPECT_EQ(parse_reasoning_parser_name("ernie-x1"), ReasoningParser::kErnieX1);
  EXPECT_EQ(parse_reasoning_parser_name("ernie_x1"), ReasoningParser::kErnieX1);
  EXPECT_EQ(parse_reasoning_parser_name("ernie-45-vl"), ReasoningParser::kErnie45Vl);
  EXPECT_EQ(parse_tool_call_parser_name("ernie_x1"), ToolCallParser::kErnieX1);
  const std::string reasoning_error = testing::error_message([] { parse_reasoning_parser_name("qwen3"); });
  EXPECT_NE(reasoning_error.find("\"qwen3\""), std::string::npos) << reasoning_error;
  EXPECT_NE(reasoning_error.find("ernie-45-vl"), std::string::npos) << reasoning_error;
  const std::string tool_error = testing::error_message([] { parse_tool_call_parser_name("hermes"); });
  EXPECT_NE(tool_error.find("valid: ernie_x1"), std::string::npos) << tool_error;
}

TEST(OutputParserTest, MarkersMustBeSingleTokens) {
  const Tokenizer thinking = Tokenizer::load(testing::golden_model_dir("tiny-thinking"));
  const MarkerTokens markers = resolve_marker_tokens(thinking, ReasoningParser::kErnieX1, ToolCallParser::kErnieX1);
  // The golden Thinking tokenizer's ids (golden/README.md).
  EXPECT_EQ(markers.id_of(kThinkStart), 13);
  EXPECT_EQ(markers.id_of(kThinkEnd), 14);
  EXPECT_EQ(markers.id_of(kResponseStart), 15);
  EXPECT_EQ(markers.id_of(kResponseEnd), 16);
  EXPECT_EQ(markers.id_of(kToolCallStart), 17);
  EXPECT_EQ(markers.id_of(kToolCallEnd), 18);

  const Tokenizer plain = Tokenizer::load(testing::golden_model_dir("tiny-dense"));
  const std::string reasoning_error =
      testing::error_message([&] { resolve_marker_tokens(plain, ReasoningParser::kErnie45Vl, ToolCallParser::kNone); });
  EXPECT_NE(reasoning_error.find("\"<think>\""), std::string::npos) << reasoning_error;
  const std::string tool_error =
      testing::error_message([&] { resolve_marker_tokens(plain, ReasoningParser::kNone, ToolCallParser::kErnieX1); });
  EXPECT_NE(tool_error.find("\"<tool_call>\""), std::string::npos) << tool_error;
}

TEST(OutputParserTest, ThePromptsLastMarkerSetsTheStart) {
  const Tokenizer thinking = Tokenizer::load(testing::golden_model_dir("tiny-thinking"));
  const MarkerTokens markers = resolve_marker_tokens(thinking, ReasoningParser::kErnieX1, ToolCallParser::kErnieX1);
  const auto start = [&](ReasoningParser parser, std::vector<int32_t> prompt) { return initial_section(parser, prompt, markers); };
  EXPECT_EQ(start(ReasoningParser::kErnieX1, {100, 13, 200}), OutputSection::kReasoning);
  EXPECT_EQ(start(ReasoningParser::kErnieX1, {13, 200, 14, 23}), OutputSection::kBetween);
  EXPECT_EQ(start(ReasoningParser::kErnie45Vl, {13, 14}), OutputSection::kAnswer);
  EXPECT_EQ(start(ReasoningParser::kErnieX1, {14, 15, 300}), OutputSection::kResponse);
  EXPECT_EQ(start(ReasoningParser::kErnieX1, {300, 301}), OutputSection::kReasoning);
  EXPECT_EQ(start(ReasoningParser::kNone, {13}), OutputSection::kAnswer);
}

}  // namespace
}  // namespace ernie
