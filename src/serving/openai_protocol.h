// The OpenAI API's request and response shapes with FastDeploy's extras
// (fastdeploy-behaviour.md §3): parsing and validating request bodies, and building
// response bodies, streaming chunks and errors. No HTTP and no engine here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling_params.h"
#include "structured/constraint.h"

namespace ernie {

using ordered_json = nlohmann::ordered_json;

// An error for the client, in OpenAI's shape {"error": {message, type, param, code}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, when there is one
};
struct ApiException {
  ApiError error;
};
[[noreturn]] void invalid_field(const std::string& param, const std::string& message);
std::string error_body(const ApiError& error);

enum class ApiKind { kChat, kCompletion };

// Limits on what one request body may hold; beyond them the answer is a 400 naming the
// limit. No real request comes near them.
inline constexpr size_t kMaxJsonDepth = 64;            // nesting of arrays and objects
inline constexpr size_t kMaxPromptsPerRequest = 128;   // prompts in one batch, and choices (prompts × n)
inline constexpr size_t kMaxRequestIdBytes = 256;      // the client's request_id

// The deepest nesting of arrays and objects in JSON text (strings skipped; not a
// validator: malformed text gives some number and fails to parse later).
size_t json_nesting_depth(std::string_view text);

// Defaults applied when a field is absent (FastDeploy: top_p 0.7, temperature 1.0, each
// overridden by generation_config.json).
struct RequestDefaults {
  float temperature = 1.0f;
  float top_p = 0.7f;
  float repetition_penalty = 1.0f;
};

struct OpenAiRequest {
  ApiKind kind = ApiKind::kChat;
  std::string model;
  std::string request_id;  // the client's "request_id", if any
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats: usage on every chunk
  bool return_token_ids = false;
  int max_streaming_response_tokens = 1;
  int n = 1;          // choices per prompt
  bool echo = false;  // completions
  bool logprobs = false;
  int top_logprobs = 0;                 // -1: the whole vocabulary (settled against --max-logprobs)
  std::optional<int> prompt_logprobs;   // -1: the whole vocabulary
  bool include_logprobs_decode_token = true;  // prompt_logprobs carry each token's text
  std::optional<int> max_tokens;  // max_completion_tokens or max_tokens
  SamplingParams params;          // max_tokens is settled once the prompt length is known
  std::vector<std::string> bad_words;

  // Completions: one choice per prompt, as text or as token ids.
  std::vector<std::string> prompt_texts;
  std::vector<std::vector<int32_t>> prompt_ids;
  // Chat.
  ordered_json messages;
  ordered_json tools;      // null, or a list of {"type": "function", "function": {"name", ...}}
  bool tool_choice_none = false;  // "tool_choice": "none": tools are shown to the model, calls stay text
  // "tool_choice": "required" or a named function: the answer must be tool calls (of
  // that function only, and one, when named).
  bool tool_choice_required = false;
  std::string tool_choice_function;
  ordered_json chat_template_kwargs = ordered_json::object();
  std::string chat_template;  // per-request override
  bool disable_chat_template = false;
  // Structured output (response_format, guided_*, structural_tag): what the output must
  // follow, and the field that said so (for errors). The server sets any_whitespace.
  std::optional<structured::ConstraintSpec> constraint;
  std::string constraint_field;
  // Chat: skip templating and tokenizing; one choice per list.
  std::optional<std::vector<std::vector<int32_t>>> prompt_token_ids;
};

// Parses a request body; throws ApiException naming the bad field.
OpenAiRequest parse_openai_request(ApiKind kind, const std::string& body, const RequestDefaults& defaults);

// Text of one token for logprobs: its bytes, with invalid UTF-8 left to the JSON writer.
struct LogprobEntry {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// A finished request's counts, for "usage".
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  bool reports_reasoning = false;  // a reasoning parser runs: completion_tokens_details.reasoning_tokens
  int64_t reasoning_tokens = 0;
};
ordered_json usage_json(const Usage& usage);

// Chat logprobs {"content": [...]} and completions logprobs {tokens, token_logprobs, ...}.
ordered_json chat_logprobs_json(const std::vector<LogprobEntry>& entries);
ordered_json completion_logprobs_json(const std::vector<LogprobEntry>& entries, size_t text_offset);

// JSON text that never throws on invalid UTF-8 (it is replaced).
std::string dump_json(const ordered_json& value);

}  // namespace ernie
