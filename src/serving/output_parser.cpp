#include "serving/output_parser.h"

#include <algorithm>
#include <random>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "util/error.h"

namespace ernie {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// Length of the longest suffix of `text` that is a proper prefix of one of `markers`.
size_t partial_marker_length(std::string_view text, const std::vector<std::string_view>& markers) {
  size_t longest = 0;
  for (std::string_view marker : markers) {
    for (size_t length = std::min(marker.size() - 1, text.size()); length > longest; --length) {
      if (text.substr(text.size() - length) == marker.substr(0, length)) {
        longest = length;
        break;
      }
    }
  }
  return longest;
}

}  // namespace

ReasoningParser parse_reasoning_parser_name(const std::string& name) {
  if (name == "ernie_x1" || name == "ernie-x1") return ReasoningParser::kErnieX1;
  if (name == "ernie-45-vl") return ReasoningParser::kErnie45Vl;
  fail("--reasoning-parser \"", name, "\" is not known (valid: ernie_x1, ernie-x1, ernie-45-vl)");
}

ToolCallParser parse_tool_call_parser_name(const std::string& name) {
  if (name == "ernie_x1" || name == "ernie-x1") return ToolCallParser::kErnieX1;
  fail("--tool-call-parser \"", name, "\" is not known (valid: ernie_x1, ernie-x1)");
}

std::optional<int32_t> MarkerTokens::id_of(std::string_view marker) const {
  for (const auto& [text, id] : ids)
    if (text == marker) return id;
  return std::nullopt;
}

std::vector<int32_t> MarkerTokens::all_ids() const {
  std::vector<int32_t> all;
  for (const auto& entry : ids) all.push_back(entry.second);
  return all;
}

MarkerTokens resolve_marker_tokens(const Tokenizer& tokenizer, ReasoningParser reasoning, ToolCallParser tools) {
  std::vector<std::string_view> needed;
  if (reasoning != ReasoningParser::kNone) needed = {kThinkStart, kThinkEnd};
  if (reasoning == ReasoningParser::kErnieX1) {
    for (std::string_view marker : {kResponseStart, kResponseEnd, kToolCallStart, kToolCallEnd}) needed.push_back(marker);
  }
  if (tools == ToolCallParser::kErnieX1) {
    for (std::string_view marker : {kToolCallStart, kToolCallEnd})
      if (std::find(needed.begin(), needed.end(), marker) == needed.end()) needed.push_back(marker);
  }
  MarkerTokens markers;
  for (std::string_view marker : needed) {
    const std::optional<int32_t> id = tokenizer.token_id(marker);
    if (!id)
      fail("the ", reasoning != ReasoningParser::kNone ? "reasoning" : "tool-call", " parser needs \"", marker,
           "\" to be a single token of the model's vocabulary, and this tokenizer has no such token; use a model "
           "made for this parser (e.g. ERNIE-4.5-21B-A3B-Thinking) or leave the parser out");
    markers.ids.emplace_back(std::string(marker), *id);
  }
  return markers;
}

OutputSection initial_section(ReasoningParser reasoning, std::span<const int32_t> prompt, const MarkerTokens& markers) {
  if (reasoning == ReasoningParser::kNone) return OutputSection::kAnswer;
  const OutputSection after_thinking = reasoning == ReasoningParser::kErnieX1 ? OutputSection::kBetween : OutputSection::kAnswer;
  const auto id = [&](std::string_view marker) { return markers.id_of(marker).value_or(-1); };
  for (auto token = prompt.rbegin(); token != prompt.rend(); ++token) {
    if (*token == id(kThinkStart)) return OutputSection::kReasoning;
    if (*token == id(kThinkEnd)) return after_thinking;
    if (reasoning != ReasoningParser::kErnieX1) continue;
    if (*token == id(kResponseStart)) return OutputSection::kResponse;
    if (*token == id(kResponseEnd) || *token == id(kToolCallEnd)) return OutputSection::kBetween;
  }
  return OutputSection::kReasoning;
}

void ParsedDelta::append(ParsedDelta&& more) {
  reasoning += more.reasoning;
  content += more.content;
  for (ParsedToolCall& call : more.tool_calls) tool_calls.push_back(std::move(call));
}

std::string new_tool_call_id() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "chatcmpl-tool-";
  for (int part = 0; part < 2; ++part) {
    uint64_t bits = generator();
    for (int digit = 0; digit < 16; ++digit, bits >>= 4) id += kHex[bits & 15];
  }
  return id;
}

std::optional<ParsedToolCall> parse_tool_call_block(std::string_view text) {
  const nlohmann::ordered_json call = nlohmann::ordered_json::parse(trim(text), nullptr, /*allow_exceptions=*/false);
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return std::nullopt;
  ParsedToolCall parsed;
  parsed.name = call["name"].get<std::string>();
  if (parsed.name.empty()) return std::nullopt;
  const auto arguments = call.find("arguments");
  if (arguments == call.end() || arguments->is_null()) {
    parsed.arguments = "{}";
  } else if (arguments->is_object()) {
    parsed.arguments = arguments->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  } else if (arguments->is_string()) {
    // Some models write the arguments already serialised; OpenAI's field is that string.
    parsed.arguments = arguments->get<std::string>();
  } else {
    return std::nullopt;
  }
  parsed.id = new_tool_call_id();
  return parsed;
}

OutputParser::OutputParser(ReasoningParser reasoning, bool parse_tool_calls, OutputSection start)
    : reasoning_(reasoning), parse_tool_calls_(parse_tool_calls), section_(start) {
  if (section_ == OutputSection::kResponse) response_fresh_ = true;
}

ParsedDelta OutputParser::push(std::string_view text) {
  ParsedDelta out;
  buffer_ += text;
  process(false, out);
  return out;
}

ParsedDelta OutputParser::finish() {
  ParsedDelta out;
  process(true, out);
  if (in_tool_call_) {
    finish_tool_call(/*closed=*/false, out);
  } else if (section_ == OutputSection::kReasoning) {
    out.reasoning += held_;  // no </think> came, so the newline was part of the reasoning
  } else if (section_ == OutputSection::kResponse) {
    out.content += held_;  // no </response> came
  }
  held_.clear();
  return out;
}

std::vector<std::string_view> OutputParser::active_markers() const {
  if (in_tool_call_) return {kToolCallEnd};
  std::vector<std::string_view> markers;
  switch (section_) {
    case OutputSection::kReasoning: markers = {kThinkEnd, kThinkStart}; break;
    case OutputSection::kBetween: markers = {kResponseStart}; break;
    case OutputSection::kResponse: markers = {kResponseEnd}; break;
    case OutputSection::kAnswer: break;
  }
  if (parse_tool_calls_ && section_ != OutputSection::kReasoning) markers.push_back(kToolCallStart);
  return markers;
}

void OutputParser::process(bool at_end, ParsedDelta& out) {
  for (;;) {
    const std::vector<std::string_view> markers = active_markers();
    size_t found = std::string::npos;
    std::string_view which;
    for (std::string_view marker : markers) {
      const size_t at = buffer_.find(marker);
      if (at < found) {
        found = at;
        which = marker;
      }
    }
    if (found != std::string::npos) {
      take_text(buffer_.substr(0, found), out);
      buffer_.erase(0, found + which.size());
      take_marker(which, out);
      continue;
    }
    const size_t keep = at_end ? 0 : partial_marker_length(buffer_, markers);
    take_text(buffer_.substr(0, buffer_.size() - keep), out);
    buffer_.erase(0, buffer_.size() - keep);
    return;
  }
}

void OutputParser::take_text(std::string text, ParsedDelta& out) {
  if (text.empty()) return;
  if (in_tool_call_) {
    tool_text_ += text;
    return;
  }
  text.insert(0, held_);
  held_.clear();
  switch (section_) {
    case OutputSection::kReasoning:
      // ernie_x1 writes "REASONING\n</think>": hold a trailing newline until we know.
      if (reasoning_ == ReasoningParser::kErnieX1 && text.back() == '\n') {
        held_ = "\n";
        text.pop_back();
      }
      out.reasoning += text;
      break;
    case OutputSection::kResponse:
      if (response_fresh_) {
        if (text.front() == '\n') text.erase(0, 1);
        response_fresh_ = false;
      }
      if (!text.empty() && text.back() == '\n') {
        held_ = "\n";
        text.pop_back();
      }
      out.content += text;
      break;
    case OutputSection::kBetween: {
      size_t begin = 0;
      if (!between_started_) {
        while (begin < text.size() && is_space(text[begin])) ++begin;
        if (begin < text.size()) between_started_ = true;
      }
      size_t end = text.size();
      while (end > begin && is_space(text[end - 1])) --end;
      held_ = text.substr(end);
      out.content += text.substr(begin, end - begin);
      break;
    }
    case OutputSection::kAnswer: out.content += text; break;
  }
}

void OutputParser::take_marker(std::string_view marker, ParsedDelta& out) {
  if (marker == kToolCallEnd) {
    finish_tool_call(/*closed=*/true, out);
    return;
  }
  if (marker == kThinkStart) return;  // a repeated opening tag inside the reasoning says nothing
  held_.clear();  // every other marker decides that withheld newlines or spaces were format
  if (marker == kThinkEnd) {
    section_ = reasoning_ == ReasoningParser::kErnieX1 ? OutputSection::kBetween : OutputSection::kAnswer;
    between_started_ = false;
  } else if (marker == kResponseStart) {
    section_ = OutputSection::kResponse;
    response_fresh_ = true;
  } else if (marker == kResponseEnd) {
    section_ = OutputSection::kBetween;
    between_started_ = false;
  } else if (marker == kToolCallStart) {
    in_tool_call_ = true;
    tool_text_.clear();
    // After a block, ernie_x1 is outside any block again.
    if (section_ == OutputSection::kResponse) section_ = OutputSection::kBetween;
    between_started_ = false;
  }
}

void OutputParser::finish_tool_call(bool closed, ParsedDelta& out) {
  in_tool_call_ = false;
  if (std::optional<ParsedToolCall> call = parse_tool_call_block(tool_text_)) {
    out.tool_calls.push_back(std::move(*call));
    ++tool_calls_made_;
  } else {
    // Not a call we can hand over: the client gets the text itself, tags and all.
    out.content += std::string(kToolCallStart) + tool_text_ + (closed ? std::string(kToolCallEnd) : "");
  }
  tool_text_.clear();
}

}  // namespace ernie
