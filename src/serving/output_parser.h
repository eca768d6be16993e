// FastDeploy's reasoning and tool-call parsers (fastdeploy-behaviour.md §4): they split
// a chat answer's text into reasoning_content, content and tool_calls. One state machine
// serves streaming and whole responses alike, so a streamed answer concatenates to
// exactly what the non-streamed one returns, however the text was cut into deltas.
//
// The output formats (ernie45-model-spec.md §7.2):
//   ernie_x1     REASONING\n</think>\n\n<response>\nANSWER\n</response>
//                REASONING\n</think>\n\n<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
//   ernie-45-vl  REASONING</think>ANSWER
// Rules (FastDeploy's later behaviour, which keeps every newline of the answer):
// - reasoning is the text before </think>; ernie_x1 drops the one newline before it;
// - ernie_x1 content is the text inside <response> … </response> without the newline
//   after the opening and before the closing tag; text after </think> outside any block
//   is content too (trimmed of surrounding whitespace), so nothing the model says is lost;
// - a <tool_call> block becomes a tool call when its JSON has a string "name" and an
//   object (or JSON string) "arguments"; otherwise the whole block, tags included, is
//   content. An unterminated last block is parsed as far as it goes.
// - without </think> the whole answer is reasoning (the model never finished thinking).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ernie {

class Tokenizer;

enum class ReasoningParser { kNone, kErnieX1, kErnie45Vl };
enum class ToolCallParser { kNone, kErnieX1 };

// "ernie_x1" / "ernie-x1" / "ernie-45-vl"; anything else throws, listing the valid names.
ReasoningParser parse_reasoning_parser_name(const std::string& name);
// "ernie_x1" / "ernie-x1".
ToolCallParser parse_tool_call_parser_name(const std::string& name);

inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kResponseStart = "<response>";
inline constexpr std::string_view kResponseEnd = "</response>";
inline constexpr std::string_view kToolCallStart = "<tool_call>";
inline constexpr std::string_view kToolCallEnd = "</tool_call>";

// The marker tokens the chosen parsers read, each of which must be one token of the
// vocabulary (FastDeploy refuses to start otherwise).
struct MarkerTokens {
  std::vector<std::pair<std::string, int32_t>> ids;  // marker text -> token id
  std::optional<int32_t> id_of(std::string_view marker) const;
  std::vector<int32_t> all_ids() const;
};
// Throws ernie::Error naming the first marker that is not a single token.
MarkerTokens resolve_marker_tokens(const Tokenizer& tokenizer, ReasoningParser reasoning, ToolCallParser tools);

// Where the prompt leaves the model.
enum class OutputSection {
  kReasoning,  // inside <think>
  kAnswer,     // plain answer text (no reasoning parser, or ernie-45-vl after </think>)
  kBetween,    // ernie_x1 after </think>: outside <response> and <tool_call> blocks
  kResponse,   // ernie_x1 inside <response>
};
// The last thinking marker in the prompt decides (FastDeploy's "model status"); a prompt
// without one starts in reasoning when a reasoning parser is on.
OutputSection initial_section(ReasoningParser reasoning, std::span<const int32_t> prompt, const MarkerTokens& markers);

struct ParsedToolCall {
  std::string id;         // "chatcmpl-tool-" + 32 hex digits
  std::string name;
  std::string arguments;  // a JSON text, as OpenAI sends it
};

struct ParsedDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  void append(ParsedDelta&& more);
};

// Parses one tool_call block's inner text; nullopt when it is not a valid call.
std::optional<ParsedToolCall> parse_tool_call_block(std::string_view text);
std::string new_tool_call_id();

class OutputParser {
 public:
  OutputParser(ReasoningParser reasoning, bool parse_tool_calls, OutputSection start);

  // Feeds the next piece of answer text; returns what can be told to the client now.
  // Text that may be the start of a marker or a newline the format drops is held back.
  ParsedDelta push(std::string_view text);
  // The answer ended: returns whatever was held back.
  ParsedDelta finish();

  // Whether the answer has left the reasoning section yet.
  bool in_reasoning() const { return section_ == OutputSection::kReasoning; }
  size_t tool_calls_made() const { return tool_calls_made_; }

 private:
  void process(bool at_end, ParsedDelta& out);
  std::vector<std::string_view> active_markers() const;
  void take_text(std::string text, ParsedDelta& out);
  void take_marker(std::string_view marker, ParsedDelta& out);
  void finish_tool_call(bool closed, ParsedDelta& out);

  ReasoningParser reasoning_;
  bool parse_tool_calls_;
  OutputSection section_;
  bool in_tool_call_ = false;
  std::string buffer_;     // text not yet looked at for markers
  std::string held_;       // text withheld until the next text or marker decides its fate
  std::string tool_text_;  // the open tool_call block
  bool response_fresh_ = false;   // just after <response>: its first newline is dropped
  bool between_started_ = false;  // kBetween has emitted non-whitespace
  size_t tool_calls_made_ = 0;
};

}  // namespace ernie
