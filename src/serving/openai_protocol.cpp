#include "serving/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "serving/ordered_json_parse.h"

namespace ernie {
namespace {

using json = nlohmann::json;

// The same value as an ordered_json, in linear time. ordered_json's own parser and
// insertions search an object's keys on every insert, which a body holding one object
// with a million keys would turn into hours of work; the keys of a parsed `json` are
// already unique, so they are appended as they are. Recursion is bounded by the
// nesting limit checked before parsing.
ordered_json to_ordered(const json& value) {
  switch (value.type()) {
    case json::value_t::object: {
      ordered_json out = ordered_json::object();
      auto& members = static_cast<std::vector<std::pair<const std::string, ordered_json>>&>(
          out.get_ref<ordered_json::object_t&>());
      members.reserve(value.size());
      for (const auto& [key, member] : value.items()) members.emplace_back(key, to_ordered(member));
      return out;
    }
    case json::value_t::array: {
      ordered_json out = ordered_json::array();
      auto& items = out.get_ref<ordered_json::array_t&>();
      items.reserve(value.size());
      for (const json& item : value) items.push_back(to_ordered(item));
      return out;
    }
    case json::value_t::string: return value.get_ref<const std::string&>();
    case json::value_t::boolean: return value.get<bool>();
    case json::value_t::number_integer: return value.get<int64_t>();
    case json::value_t::number_unsigned: return value.get<uint64_t>();
    case json::value_t::number_float: return value.get<double>();
    default: return nullptr;
  }
}

template <typename Json>
bool present(const Json& body, const char* key) {
  return body.contains(key) && !body.at(key).is_null();
}

float number_field(const json& body, const char* key, float fallback) {
  if (!present(body, key)) return fallback;
  const json& value = body.at(key);
  if (!value.is_number()) invalid_field(key, std::string("\"") + key + "\" must be a number, got " + value.dump());
  const double number = value.get<double>();
  if (!std::isfinite(number)) invalid_field(key, std::string("\"") + key + "\" must be finite");
  return static_cast<float>(number);
}

std::optional<int64_t> int_field(const json& body, const char* key) {
  if (!present(body, key)) return std::nullopt;
  const json& value = body.at(key);
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float() && value.get<double>() == std::floor(value.get<double>()) && std::fabs(value.get<double>()) < 9e18)
    return static_cast<int64_t>(value.get<double>());
  invalid_field(key, std::string("\"") + key + "\" must be an integer, got " + value.dump());
}

bool bool_field(const json& body, const char* key, bool fallback) {
  if (!present(body, key)) return fallback;
  const json& value = body.at(key);
  if (!value.is_boolean()) invalid_field(key, std::string("\"") + key + "\" must be true or false, got " + value.dump());
  return value.get<bool>();
}

std::vector<int32_t> token_list(const json& value, const std::string& key) {
  if (!value.is_array()) invalid_field(key, "\"" + key + "\" must be a list of token ids");
  std::vector<int32_t> ids;
  for (const json& id : value) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      invalid_field(key, "\"" + key + "\" must hold non-negative integer token ids, got " + id.dump());
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

std::vector<std::string> string_or_list(const json& body, const char* key) {
  if (!present(body, key)) return {};
  const json& value = body.at(key);
  if (value.is_string()) return {value.get<std::string>()};
  if (!value.is_array()) invalid_field(key, std::string("\"") + key + "\" must be a string or a list of strings");
  std::vector<std::string> items;
  for (const json& item : value) {
    if (!item.is_string()) invalid_field(key, std::string("\"") + key + "\" must hold strings, got " + item.dump());
    items.push_back(item.get<std::string>());
  }
  return items;
}

void check_batch_size(size_t prompts, const char* field) {
  if (prompts > kMaxPromptsPerRequest)
    invalid_field(field, std::string("\"") + field + "\" holds " + std::to_string(prompts) + " prompts; the limit is " +
                             std::to_string(kMaxPromptsPerRequest) + " per request");
}

// FastDeploy's prompt_token_ids: one list of ids or a batch of lists. It takes priority
// over "prompt" and "messages", which may then be empty.
std::vector<std::vector<int32_t>> prompt_token_id_lists(const json& value) {
  if (!value.is_array() || value.empty())
    invalid_field("prompt_token_ids", "\"prompt_token_ids\" must be a non-empty list of token ids, or a list of such lists");
  if (!value.at(0).is_array()) return {token_list(value, "prompt_token_ids")};
  check_batch_size(value.size(), "prompt_token_ids");
  std::vector<std::vector<int32_t>> lists;
  for (const json& item : value) {
    lists.push_back(token_list(item, "prompt_token_ids"));
    if (lists.back().empty()) invalid_field("prompt_token_ids", "\"prompt_token_ids\" holds an empty list");
  }
  return lists;
}

void parse_prompt(const json& body, OpenAiRequest& request) {
  if (present(body, "prompt_token_ids")) {
    request.prompt_ids = prompt_token_id_lists(body.at("prompt_token_ids"));
    return;
  }
  if (!present(body, "prompt")) invalid_field("prompt", "\"prompt\" is required");
  const json& prompt = body.at("prompt");
  if (prompt.is_string()) {
    request.prompt_texts.push_back(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty() && prompt.at(0).is_number_integer()) {
    request.prompt_ids.push_back(token_list(prompt, "prompt"));
  } else if (prompt.is_array() && !prompt.empty()) {
    for (const json& item : prompt) {
      if (item.is_string()) request.prompt_texts.push_back(item.get<std::string>());
      else if (item.is_array()) request.prompt_ids.push_back(token_list(item, "prompt"));
      else invalid_field("prompt", "\"prompt\" list entries must be strings or lists of token ids, got " + item.dump());
    }
    check_batch_size(prompt.size(), "prompt");
    if (!request.prompt_texts.empty() && !request.prompt_ids.empty())
      invalid_field("prompt", "\"prompt\" must not mix strings and token id lists");
  } else {
    invalid_field("prompt", "\"prompt\" must be a string, a list of strings, or token ids; got " + prompt.dump());
  }
  for (const std::string& text : request.prompt_texts)
    if (text.empty()) invalid_field("prompt", "\"prompt\" is empty");
  for (const auto& ids : request.prompt_ids)
    if (ids.empty()) invalid_field("prompt", "\"prompt\" token list is empty");
}

// An assistant turn's tool_calls, as the OpenAI client sends them back in the history.
void check_history_tool_calls(const json& message) {
  if (!message.contains("tool_calls") || message.at("tool_calls").is_null()) return;
  const json& calls = message.at("tool_calls");
  if (!calls.is_array()) invalid_field("messages", "an assistant message's \"tool_calls\" must be a list, got " + calls.dump());
  for (const json& call : calls) {
    const bool named = call.is_object() && call.contains("function") && call.at("function").is_object() &&
                       call.at("function").contains("name") && call.at("function").at("name").is_string();
    if (!named)
      invalid_field("messages", "every tool call in the history needs \"function\": {\"name\": ..., \"arguments\": ...}, got " +
                                    call.dump());
    const json& function = call.at("function");
    if (function.contains("arguments") && !function.at("arguments").is_string() && !function.at("arguments").is_object())
      invalid_field("messages", "tool call arguments must be a JSON string or an object, got " + function.at("arguments").dump());
  }
}

void validate_tools(const json& body) {
  if (present(body, "tools")) {
    const json& tools = body.at("tools");
    if (!tools.is_array()) invalid_field("tools", "\"tools\" must be a list");
    for (const json& tool : tools) {
      const bool function = tool.is_object() && tool.contains("type") && tool.at("type") == "function" && tool.contains("function") &&
                            tool.at("function").is_object() && tool.at("function").contains("name") &&
                            tool.at("function").at("name").is_string();
      if (!function)
        invalid_field("tools", "every tool must be {\"type\": \"function\", \"function\": {\"name\": ..., "
                               "\"parameters\": ...}}, got " + tool.dump());
    }
  }
}

// Reads the tools again in the client's order, and tool_choice: "auto" (the default),
// "none" (tools shown, calls stay text), "required" (at least one call) or
// {"type": "function", "function": {"name": N}} (one call of N).
void parse_tool_choice(const ordered_json& body, OpenAiRequest& request) {
  if (present(body, "tools") && !body.at("tools").empty()) request.tools = body.at("tools");
  if (!present(body, "tool_choice")) return;
  const ordered_json& choice = body.at("tool_choice");
  if (choice == "none") {
    request.tool_choice_none = true;
    return;
  }
  if (choice == "auto") return;
  if (choice == "required") {
    request.tool_choice_required = true;
  } else if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("function") &&
             choice.at("function").is_object() && choice.at("function").contains("name") &&
             choice.at("function").at("name").is_string()) {
    request.tool_choice_required = true;
    request.tool_choice_function = choice.at("function").at("name").get<std::string>();
  } else {
    invalid_field("tool_choice", "\"tool_choice\" must be \"auto\", \"none\", \"required\" or "
                                 "{\"type\": \"function\", \"function\": {\"name\": ...}}, got " + choice.dump());
  }
  if (request.tools.is_null())
    invalid_field("tool_choice", "\"tool_choice\" " + choice.dump() + " needs \"tools\" to choose from");
  if (!request.tool_choice_function.empty()) {
    bool known = false;
    for (const ordered_json& tool : request.tools) known = known || tool.at("function").at("name") == request.tool_choice_function;
    if (!known)
      invalid_field("tool_choice", "tool_choice names the function \"" + request.tool_choice_function +
                                       "\", which is not among the tools");
  }
  if (request.constraint)
    invalid_field("tool_choice", "tool_choice " + choice.dump() + " forces tool calls and cannot be combined with \"" +
                                     request.constraint_field + "\"");
}

void parse_messages(const json& body, OpenAiRequest& request) {
  const bool ids_given = present(body, "prompt_token_ids");
  if (!present(body, "messages") && !ids_given) invalid_field("messages", "\"messages\" is required");
  const json& messages = present(body, "messages") ? body.at("messages") : json::array();
  if (!messages.is_array() || (messages.empty() && !ids_given))
    invalid_field("messages", "\"messages\" must be a non-empty list");
  for (const json& message : messages) {
    if (!message.is_object() || !message.contains("role") || !message.at("role").is_string())
      invalid_field("messages", "every message needs a string \"role\", got " + message.dump());
    const std::string role = message.at("role").get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer" && role != "function")
      invalid_field("messages", "message role \"" + role + "\" is not one of system, user, assistant, tool");
    if (message.contains("content") && !message.at("content").is_null() && !message.at("content").is_string() &&
        !message.at("content").is_array())
      invalid_field("messages", "message content must be a string or a list of parts, got " + message.at("content").dump());
    if (role == "assistant") check_history_tool_calls(message);
    if (role == "tool" && (!message.contains("content") || message.at("content").is_null()))
      invalid_field("messages", "a \"tool\" message needs \"content\": the tool's result");
  }
  request.messages = to_ordered(messages);
  validate_tools(body);
  if (present(body, "chat_template_kwargs")) {
    if (!body.at("chat_template_kwargs").is_object())
      invalid_field("chat_template_kwargs", "\"chat_template_kwargs\" must be an object");
    request.chat_template_kwargs = to_ordered(body.at("chat_template_kwargs"));
  }
  if (present(body, "chat_template")) {
    if (!body.at("chat_template").is_string()) invalid_field("chat_template", "\"chat_template\" must be a string");
    request.chat_template = body.at("chat_template").get<std::string>();
  }
  request.disable_chat_template = bool_field(body, "disable_chat_template", false);
  if (ids_given) request.prompt_token_ids = prompt_token_id_lists(body.at("prompt_token_ids"));
}

void parse_sampling(const json& body, const RequestDefaults& defaults, OpenAiRequest& request) {
  SamplingParams& params = request.params;
  params.temperature = number_field(body, "temperature", defaults.temperature);
  params.top_p = number_field(body, "top_p", defaults.top_p);
  params.min_p = number_field(body, "min_p", 0.0f);
  params.repetition_penalty = number_field(body, "repetition_penalty", defaults.repetition_penalty);
  params.presence_penalty = number_field(body, "presence_penalty", 0.0f);
  params.frequency_penalty = number_field(body, "frequency_penalty", 0.0f);
  if (auto top_k = int_field(body, "top_k")) {
    if (*top_k < -1 || *top_k > INT32_MAX) invalid_field("top_k", "\"top_k\" must be -1, 0 or positive");
    params.top_k = static_cast<int>(*top_k);
  }
  if (auto min_tokens = int_field(body, "min_tokens")) {
    if (*min_tokens < 0 || *min_tokens > INT32_MAX) invalid_field("min_tokens", "\"min_tokens\" must be >= 0");
    params.min_tokens = static_cast<int>(*min_tokens);
  }
  if (auto seed = int_field(body, "seed")) {
    if (*seed < 0 || static_cast<uint64_t>(*seed) > kMaxSeed)
      invalid_field("seed", "\"seed\" must lie in [0, " + std::to_string(kMaxSeed) + "]");
    params.seed = static_cast<uint64_t>(*seed);
  }
  params.stop = string_or_list(body, "stop");
  if (params.stop.size() > 5) invalid_field("stop", "at most 5 stop sequences are allowed, got " + std::to_string(params.stop.size()));
  for (const std::string& stop : params.stop)
    if (stop.empty()) invalid_field("stop", "stop sequences must not be empty");
  if (present(body, "stop_token_ids")) params.stop_token_ids = token_list(body.at("stop_token_ids"), "stop_token_ids");
  if (present(body, "bad_words_token_ids"))
    params.bad_words_token_ids = token_list(body.at("bad_words_token_ids"), "bad_words_token_ids");
  request.bad_words = string_or_list(body, "bad_words");
  params.include_stop_str_in_output = bool_field(body, "include_stop_str_in_output", false);
  params.ignore_eos = bool_field(body, "ignore_eos", false);

  std::optional<int64_t> max_tokens = int_field(body, "max_completion_tokens");
  if (!max_tokens) max_tokens = int_field(body, "max_tokens");
  if (max_tokens) {
    if (*max_tokens < 1 || *max_tokens > INT32_MAX)
      invalid_field(present(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
                    "max_tokens must be at least 1, got " + std::to_string(*max_tokens));
    request.max_tokens = static_cast<int>(*max_tokens);
  }
  if (auto budget = int_field(body, "reasoning_max_tokens")) {
    if (*budget < 1 || *budget > INT32_MAX)
      invalid_field("reasoning_max_tokens", "\"reasoning_max_tokens\" must be at least 1, got " + std::to_string(*budget));
    params.reasoning_max_tokens = static_cast<int>(*budget);
  }
  if (auto n = int_field(body, "n")) {
    if (*n < 1 || *n > static_cast<int64_t>(kMaxPromptsPerRequest))
      invalid_field("n", "\"n\" must lie in [1, " + std::to_string(kMaxPromptsPerRequest) + "], got " + std::to_string(*n));
    request.n = static_cast<int>(*n);
  }
}

// A count of logprobs: -1 (the whole vocabulary, within --max-logprobs) or more.
int logprob_count(const json& body, const char* key) {
  const int64_t count = *int_field(body, key);
  if (count < -1 || count > INT32_MAX)
    invalid_field(key, std::string("\"") + key + "\" must be -1 (the whole vocabulary) or at least 0, got " +
                           std::to_string(count));
  return static_cast<int>(count);
}

void parse_logprobs(const json& body, OpenAiRequest& request) {
  if (request.kind == ApiKind::kChat) {
    request.logprobs = bool_field(body, "logprobs", false);
    if (int_field(body, "top_logprobs")) {
      request.top_logprobs = logprob_count(body, "top_logprobs");
      if (!request.logprobs) invalid_field("top_logprobs", "\"top_logprobs\" needs \"logprobs\": true");
    }
  } else if (present(body, "logprobs") && body.at("logprobs").is_boolean()) {
    // Lenient as FastDeploy: `true` on completions means the chosen token's logprob
    // with one alternative, `false` none.
    if (body.at("logprobs").get<bool>()) {
      request.logprobs = true;
      request.top_logprobs = 1;
    }
  } else if (int_field(body, "logprobs")) {
    request.logprobs = true;
    request.top_logprobs = logprob_count(body, "logprobs");
  }
  if (int_field(body, "prompt_logprobs")) request.prompt_logprobs = logprob_count(body, "prompt_logprobs");
  request.include_logprobs_decode_token = bool_field(body, "include_logprobs_decode_token", true);
  request.params.temp_scaled_logprobs = bool_field(body, "temp_scaled_logprobs", false);
  request.params.top_p_normalized_logprobs = bool_field(body, "top_p_normalized_logprobs", false);
}

// nlohmann's messages start with its internal exception name ("[json.exception.
// parse_error.101] "), which means nothing to a client.
std::string readable_json_error(const json::exception& error) {
  std::string_view message = error.what();
  if (message.substr(0, 1) == "[") {
    const size_t end = message.find("] ");
    if (end != std::string_view::npos) message.remove_prefix(end + 2);
  }
  return std::string(message);
}

// The client's label for its request: shown in logs and in the response id, so it must
// be printable and short.
void parse_request_id(const json& value, OpenAiRequest& request) {
  if (!value.is_string()) invalid_field("request_id", "\"request_id\" must be a string");
  const std::string& id = value.get_ref<const std::string&>();
  if (id.empty() || id.size() > kMaxRequestIdBytes)
    invalid_field("request_id", "\"request_id\" must hold 1 to " + std::to_string(kMaxRequestIdBytes) + " bytes, got " +
                                    std::to_string(id.size()));
  for (const char c : id) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f)
      invalid_field("request_id", "\"request_id\" must not contain control characters");
  }
  request.request_id = id;
}

const char* const kGuidedFields[] = {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                                     "guided_json_object", "structural_tag"};

// A JSON value given as an object or as its text: the text, checked to be JSON.
std::string json_text_field(const ordered_json& body, const char* field) {
  const ordered_json& value = body.at(field);
  if (value.is_string()) {
    if (!json::accept(value.get<std::string>()))
      invalid_field(field, std::string("\"") + field + "\" is a string that is not valid JSON");
    return value.get<std::string>();
  }
  if (!value.is_object()) invalid_field(field, std::string("\"") + field + "\" must be a JSON object or its text");
  return value.dump();
}

std::string string_member(const ordered_json& body, const char* field) {
  if (!body.at(field).is_string()) invalid_field(field, std::string("\"") + field + "\" must be a string");
  return body.at(field).get<std::string>();
}

using structured::ConstraintSpec;

std::optional<ConstraintSpec> response_format_constraint(const ordered_json& format) {
  if (!format.is_object() || !format.contains("type") || !format.at("type").is_string())
    invalid_field("response_format", "\"response_format\" must be an object with a \"type\": text, json_object, "
                                     "json_schema or structural_tag");
  const std::string type = format.at("type").get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return ConstraintSpec{.kind = ConstraintSpec::Kind::kJsonObject};
  if (type == "structural_tag") return ConstraintSpec{.kind = ConstraintSpec::Kind::kStructuralTag, .text = format.dump()};
  if (type != "json_schema")
    invalid_field("response_format", "response_format type \"" + type +
                                         "\" is not one of text, json_object, json_schema, structural_tag");
  if (!format.contains("json_schema") || !format.at("json_schema").is_object())
    invalid_field("response_format", "response_format json_schema needs an object \"json_schema\" with a \"schema\"");
  const ordered_json& json_schema = format.at("json_schema");
  // OpenAI's "strict" asks the output to follow the schema exactly, which is what every
  // constraint here does; without a schema any JSON object is accepted.
  if (json_schema.contains("strict") && !json_schema.at("strict").is_boolean())
    invalid_field("response_format", "response_format json_schema.strict must be true or false");
  if (!json_schema.contains("schema") || json_schema.at("schema").is_null())
    return ConstraintSpec{.kind = ConstraintSpec::Kind::kJsonObject};
  if (!json_schema.at("schema").is_object() && !json_schema.at("schema").is_boolean())
    invalid_field("response_format", "response_format json_schema.schema must be a JSON Schema object");
  return ConstraintSpec{.kind = ConstraintSpec::Kind::kJsonSchema, .text = json_schema.at("schema").dump()};
}

// response_format, the guided_* fields and structural_tag: at most one may constrain the
// output, as FastDeploy allows.
void parse_constraint(const ordered_json& body, OpenAiRequest& request) {
  std::vector<std::string> given;
  const auto take = [&](const char* field, ConstraintSpec spec) {
    given.push_back(field);
    request.constraint = std::move(spec);
    request.constraint_field = field;
  };
  if (present(body, "response_format"))
    if (auto spec = response_format_constraint(body.at("response_format"))) take("response_format", std::move(*spec));
  if (present(body, "guided_json"))
    take("guided_json", {.kind = ConstraintSpec::Kind::kJsonSchema, .text = json_text_field(body, "guided_json")});
  if (present(body, "guided_regex"))
    take("guided_regex", {.kind = ConstraintSpec::Kind::kRegex, .text = string_member(body, "guided_regex")});
  if (present(body, "guided_grammar"))
    take("guided_grammar", {.kind = ConstraintSpec::Kind::kGrammar, .text = string_member(body, "guided_grammar")});
  if (present(body, "structural_tag"))
    take("structural_tag", {.kind = ConstraintSpec::Kind::kStructuralTag, .text = json_text_field(body, "structural_tag")});
  if (present(body, "guided_choice")) {
    const ordered_json& choices = body.at("guided_choice");
    ConstraintSpec spec{.kind = ConstraintSpec::Kind::kChoice};
    if (!choices.is_array() || choices.empty())
      invalid_field("guided_choice", "\"guided_choice\" must be a non-empty list of strings");
    for (const ordered_json& choice : choices) {
      if (!choice.is_string()) invalid_field("guided_choice", "\"guided_choice\" must list strings, got " + choice.dump());
      spec.choices.push_back(choice.get<std::string>());
    }
    take("guided_choice", std::move(spec));
  }
  if (present(body, "guided_json_object")) {
    if (!body.at("guided_json_object").is_boolean())
      invalid_field("guided_json_object", "\"guided_json_object\" must be true or false");
    if (body.at("guided_json_object").get<bool>())
      take("guided_json_object", {.kind = ConstraintSpec::Kind::kJsonObject});
  }
  if (given.size() > 1)
    invalid_field(given[1], "only one kind of guided decoding may be used, but the request has both \"" + given[0] +
                                "\" and \"" + given[1] + "\"");
}

}  // namespace

void invalid_field(const std::string& param, const std::string& message) {
  throw ApiException{{400, message, "invalid_request_error", param}};
}

std::string error_body(const ApiError& error) {
  ordered_json body;
  body["error"] = {{"message", error.message},
                   {"type", error.type},
                   {"param", error.param.empty() ? ordered_json(nullptr) : ordered_json(error.param)},
                   // FastDeploy's code for a timeout is a word; any other is the status.
                   {"code", error.type == "timeout_error" ? ordered_json("timeout") : ordered_json(error.status)}};
  return dump_json(body);
}

size_t json_nesting_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

OpenAiRequest parse_openai_request(ApiKind kind, const std::string& body_text, const RequestDefaults& defaults) {
  // Checked before parsing: the JSON library recurses once per level when it copies,
  // compares or prints a value, so an absurdly deep body would exhaust the stack.
  if (const size_t depth = json_nesting_depth(body_text); depth > kMaxJsonDepth)
    throw ApiException{{400, "the request body nests JSON " + std::to_string(depth) + " levels deep; the limit is " +
                                 std::to_string(kMaxJsonDepth),
                        "invalid_request_error", ""}};
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& error) {
    throw ApiException{{400, "the request body is not valid JSON: " + readable_json_error(error), "invalid_request_error", ""}};
  }
  if (!body.is_object()) throw ApiException{{400, "the request body must be a JSON object", "invalid_request_error", ""}};
  OpenAiRequest request;
  request.kind = kind;
  if (present(body, "model")) {
    if (!body.at("model").is_string()) invalid_field("model", "\"model\" must be a string");
    request.model = body.at("model").get<std::string>();
  }
  if (present(body, "request_id")) parse_request_id(body.at("request_id"), request);
  request.stream = bool_field(body, "stream", false);
  if (present(body, "stream_options")) {
    const json& options = body.at("stream_options");
    if (!request.stream) invalid_field("stream_options", "\"stream_options\" is only allowed with \"stream\": true");
    if (!options.is_object()) invalid_field("stream_options", "\"stream_options\" must be an object");
    request.include_usage = bool_field(options, "include_usage", true);
    request.continuous_usage = bool_field(options, "continuous_usage_stats", false);
  }
  request.return_token_ids = bool_field(body, "return_token_ids", false);
  if (auto per_chunk = int_field(body, "max_streaming_response_tokens")) {
    if (*per_chunk < 1 || *per_chunk > 1024)
      invalid_field("max_streaming_response_tokens", "\"max_streaming_response_tokens\" must lie in 1..1024");
    request.max_streaming_response_tokens = static_cast<int>(*per_chunk);
  }
  if (kind == ApiKind::kChat) {
    parse_messages(body, request);
  } else {
    parse_prompt(body, request);
    request.echo = bool_field(body, "echo", false);
  }
  parse_sampling(body, defaults, request);
  parse_logprobs(body, request);
  // Where the order of members means something (a schema's properties are generated in
  // the order declared; tools are rendered into the prompt as written), it is read from
  // the text again, in order.
  const bool ordered_needed = present(body, "response_format") || present(body, "tools") || present(body, "tool_choice") ||
                              std::any_of(std::begin(kGuidedFields), std::end(kGuidedFields),
                                          [&](const char* field) { return present(body, field); });
  if (ordered_needed) {
    const ordered_json ordered = parse_ordered_json(body_text);
    parse_constraint(ordered, request);
    if (kind == ApiKind::kChat) parse_tool_choice(ordered, request);
  }
  return request;
}

ordered_json usage_json(const Usage& usage) {
  ordered_json json = {{"prompt_tokens", usage.prompt_tokens},
                       {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
                       {"completion_tokens", usage.completion_tokens},
                       {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
  if (usage.reports_reasoning) json["completion_tokens_details"] = {{"reasoning_tokens", usage.reasoning_tokens}};
  return json;
}

namespace {
ordered_json bytes_of(const std::string& token) {
  ordered_json bytes = ordered_json::array();
  for (unsigned char c : token) bytes.push_back(static_cast<int>(c));
  return bytes;
}
}  // namespace

ordered_json chat_logprobs_json(const std::vector<LogprobEntry>& entries) {
  ordered_json content = ordered_json::array();
  for (const LogprobEntry& entry : entries) {
    ordered_json top = ordered_json::array();
    for (const auto& [token, logprob] : entry.top)
      top.push_back({{"token", token}, {"logprob", logprob}, {"bytes", bytes_of(token)}});
    content.push_back({{"token", entry.token}, {"logprob", entry.logprob}, {"bytes", bytes_of(entry.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

ordered_json completion_logprobs_json(const std::vector<LogprobEntry>& entries, size_t text_offset) {
  ordered_json tokens = ordered_json::array(), token_logprobs = ordered_json::array(), top = ordered_json::array(),
               offsets = ordered_json::array();
  for (const LogprobEntry& entry : entries) {
    tokens.push_back(entry.token);
    token_logprobs.push_back(entry.logprob);
    ordered_json alternatives = ordered_json::object();
    for (const auto& [token, logprob] : entry.top) alternatives[token] = logprob;
    top.push_back(alternatives);
    offsets.push_back(text_offset);
    text_offset += entry.token.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

std::string dump_json(const ordered_json& value) {
  return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace ernie
