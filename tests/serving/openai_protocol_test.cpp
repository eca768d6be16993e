#include "serving/openai_protocol.h"

#include <chrono>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ernie {
namespace {

using ::testing::HasSubstr;

ApiError api_error_of(ApiKind kind, const std::string& body) {
  try {
    parse_openai_request(kind, body, {});
  } catch (const ApiException& exception) {
    return exception.error;
  }
  return {0, "(no error)", "", ""};
}

TEST(OpenAiProtocolTest, ParsesAChatRequestWithExtras) {
  const OpenAiRequest request = parse_openai_request(ApiKind::kChat, R"({
    "model": "m", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
    "temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "max_completion_tokens": 33, "seed": 7,
    "stop": "END", "stop_token_ids": [2], "frequency_penalty": 0.5, "presence_penalty": -0.5,
    "repetition_penalty": 1.1, "min_tokens": 2, "stream": true, "stream_options": {"include_usage": true},
    "logprobs": true, "top_logprobs": 3, "chat_template_kwargs": {"enable_thinking": false},
    "return_token_ids": true, "max_streaming_response_tokens": 4, "bad_words": ["x", "y"], "request_id": "abc"
  })", {});
  EXPECT_EQ(request.model, "m");
  EXPECT_EQ(request.messages.size(), 2u);
  EXPECT_EQ(request.messages[0]["role"], "system");
  EXPECT_FLOAT_EQ(request.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(request.params.top_p, 0.9f);
  EXPECT_EQ(request.params.top_k, 20);
  EXPECT_EQ(request.max_tokens, 33);
  EXPECT_EQ(request.params.seed, 7u);
  EXPECT_EQ(request.params.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(request.params.stop_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(request.params.min_tokens, 2);
  EXPECT_TRUE(request.stream);
  EXPECT_TRUE(request.include_usage);
  EXPECT_TRUE(request.logprobs);
  EXPECT_EQ(request.top_logprobs, 3);  // settled against --max-logprobs by the server
  EXPECT_EQ(request.chat_template_kwargs["enable_thinking"], false);
  EXPECT_TRUE(request.return_token_ids);
  EXPECT_EQ(request.max_streaming_response_tokens, 4);
  EXPECT_EQ(request.bad_words.size(), 2u);
  EXPECT_EQ(request.request_id, "abc");
}

TEST(OpenAiProtocolTest, DefaultsComeFromTheServer) {
  RequestDefaults defaults;
  defaults.temperature = 0.8f;
  defaults.top_p = 0.8f;
  const OpenAiRequest request = parse_openai_request(ApiKind::kCompletion, R"({"prompt": "hi"})", defaults);
  EXPECT_FLOAT_EQ(request.params.temperature, 0.8f);
  EXPECT_FLOAT_EQ(request.params.top_p, 0.8f);
  EXPECT_FALSE(request.max_tokens.has_value()) << "settled later from max_model_len";
  EXPECT_EQ(request.prompt_texts, std::vector<std::string>{"hi"});
}

TEST(OpenAiProtocolTest, CompletionPromptForms) {
  EXPECT_EQ(parse_openai_request(ApiKind::kCompletion, R"({"prompt": ["a", "b"]})", {}).prompt_texts.size(), 2u);
  EXPECT_EQ(parse_openai_request(ApiKind::kCompletion, R"({"prompt": [1, 2, 3]})", {}).prompt_ids,
            (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(parse_openai_request(ApiKind::kCompletion, R"({"prompt": [[1], [2, 3]]})", {}).prompt_ids.size(), 2u);
  const OpenAiRequest logprobs = parse_openai_request(ApiKind::kCompletion, R"({"prompt": "x", "logprobs": 5, "echo": true})", {});
  EXPECT_TRUE(logprobs.logprobs);
  EXPECT_EQ(logprobs.top_logprobs, 5);
  EXPECT_TRUE(logprobs.echo);
}

TEST(OpenAiProtocolTest, ErrorsNameTheField) {
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{not json").param, "");
  EXPECT_THAT(api_error_of(ApiKind::kChat, "{not json").message, HasSubstr("not valid JSON"));
  EXPECT_EQ(api_error_of(ApiKind::kChat, "[1]").status, 400);
  EXPECT_EQ(api_error_of(ApiKind::kChat, R"({})").param, "messages");
  EXPECT_EQ(api_error_of(ApiKind::kChat, R"({"messages": []})").param, "messages");
  EXPECT_EQ(api_error_of(ApiKind::kChat, R"({"messages": [{"content": "x"}]})").param, "messages");
  EXPECT_EQ(api_error_of(ApiKind::kChat, R"({"messages": [{"role": "robot", "content": "x"}]})").param, "messages");
  const std::string ok = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{" + ok + R"(, "temperature": "hot"})").param, "temperature");
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{" + ok + R"(, "max_tokens": 0})").param, "max_tokens");
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{" + ok + R"(, "top_logprobs": 3})").param, "top_logprobs");
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{" + ok + R"(, "top_logprobs": -2, "logprobs": true})").param, "top_logprobs");
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{" + ok + R"(, "prompt_logprobs": -3})").param, "prompt_logprobs");
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{" + ok + R"(, "temp_scaled_logprobs": 1})").param, "temp_scaled_logprobs");
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{" + ok + R"(, "stream_options": {"include_usage": true}})").param, "stream_options");
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{" + ok + R"(, "n": 0})").param, "n");
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{" + ok + R"(, "seed": -1})").param, "seed");
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{" + ok + R"(, "stop": ["a","b","c","d","e","f"]})").param, "stop");
  EXPECT_EQ(api_error_of(ApiKind::kChat, "{" + ok + R"(, "stop_token_ids": [-3]})").param, "stop_token_ids");
  EXPECT_EQ(api_error_of(ApiKind::kCompletion, R"({"prompt": ""})").param, "prompt");
  EXPECT_EQ(api_error_of(ApiKind::kCompletion, R"({"prompt": ["a", [1]]})").param, "prompt");
  EXPECT_EQ(api_error_of(ApiKind::kCompletion, R"({"prompt": {"a": 1}})").param, "prompt");
}

TEST(OpenAiProtocolTest, ToolsToolChoiceAndThinkingBudget) {
  const std::string user = R"({"role": "user", "content": "x"})";
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}])";
  const OpenAiRequest request = parse_openai_request(
      ApiKind::kChat, "{\"messages\": [" + user + "], " + tools + R"(, "tool_choice": "auto", "reasoning_max_tokens": 64})", {});
  EXPECT_EQ(request.tools.size(), 1u);
  EXPECT_FALSE(request.tool_choice_none);
  EXPECT_EQ(request.params.reasoning_max_tokens, 64);
  EXPECT_TRUE(parse_openai_request(ApiKind::kChat, "{\"messages\": [" + user + "], " + tools + R"(, "tool_choice": "none"})", {})
                  .tool_choice_none);
  // An empty list means no tools.
  EXPECT_TRUE(parse_openai_request(ApiKind::kChat, "{\"messages\": [" + user + R"(], "tools": []})", {}).tools.is_null());

  const auto param = [&](const std::string& rest) { return api_error_of(ApiKind::kChat, "{\"messages\": [" + user + "], " + rest + "}").param; };
  const auto chat = [&](const std::string& rest) {
    return parse_openai_request(ApiKind::kChat, "{\"messages\": [" + user + "], " + rest + "}", {});
  };
  EXPECT_TRUE(chat(tools + R"(, "tool_choice": "required")").tool_choice_required);
  const OpenAiRequest named = chat(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}})");
  EXPECT_TRUE(named.tool_choice_required);
  EXPECT_EQ(named.tool_choice_function, "f");
  EXPECT_EQ(param(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}})"), "tool_choice");
  EXPECT_EQ(param(R"("tool_choice": "required")"), "tool_choice");  // no tools to choose from
  EXPECT_EQ(param(tools + R"(, "tool_choice": "always")"), "tool_choice");
  EXPECT_EQ(param(tools + R"(, "tool_choice": "required", "guided_regex": "a")"), "tool_choice");
  EXPECT_EQ(param(R"("tools": {"f": 1})"), "tools");
  EXPECT_EQ(param(R"("tools": [{"type": "function", "function": {}}])"), "tools");
  EXPECT_EQ(param(R"("tools": [{"type": "retrieval"}])"), "tools");
  EXPECT_EQ(param(R"("tools": [{"type": 5, "function": {"name": "f"}}])"), "tools");
  EXPECT_EQ(param(R"("reasoning_max_tokens": 0)"), "reasoning_max_tokens");

  // History: an assistant turn's tool_calls and a tool turn's result.
  const std::string call = R"({"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}})";
  const std::string history = R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [)" +
                              call + R"(]}, {"role": "tool", "tool_call_id": "c1", "content": "42"}]})";
  EXPECT_EQ(parse_openai_request(ApiKind::kChat, history, {}).messages.size(), 3u);
  EXPECT_THAT(api_error_of(ApiKind::kChat, R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]})").message,
              HasSubstr("\"function\": {\"name\""));
  EXPECT_THAT(api_error_of(ApiKind::kChat, R"({"messages": [{"role": "assistant", "tool_calls": {"a": 1}}]})").message,
              HasSubstr("must be a list"));
  EXPECT_THAT(api_error_of(ApiKind::kChat, R"({"messages": [{"role": "tool", "tool_call_id": "c1"}]})").message,
              HasSubstr("needs \"content\""));
}

TEST(OpenAiProtocolTest, ResponsePieces) {
  const std::string error = error_body({429, "Too many", "rate_limit_error", ""});
  const auto parsed = nlohmann::json::parse(error);
  EXPECT_EQ(parsed["error"]["message"], "Too many");
  EXPECT_EQ(parsed["error"]["code"], 429);
  EXPECT_TRUE(parsed["error"]["param"].is_null());
  const ordered_json usage = usage_json({10, 5, 4});
  EXPECT_EQ(usage["total_tokens"], 15);
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_FALSE(usage.contains("completion_tokens_details"));
  Usage thinking{10, 5, 0, true, 3};
  EXPECT_EQ(usage_json(thinking)["completion_tokens_details"]["reasoning_tokens"], 3);
  const ordered_json chat = chat_logprobs_json({{"a", -0.5f, {{"a", -0.5f}, {"b", -1.5f}}}});
  EXPECT_EQ(chat["content"][0]["token"], "a");
  EXPECT_EQ(chat["content"][0]["bytes"], ordered_json::array({97}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"].size(), 2u);
  const ordered_json completion = completion_logprobs_json({{"ab", -1.0f, {}}, {"c", -2.0f, {}}}, 3);
  EXPECT_EQ(completion["text_offset"], ordered_json::array({3, 5}));
  // Invalid UTF-8 in a token never breaks the JSON writer.
  EXPECT_NO_THROW(dump_json(ordered_json{{"t", std::string("\xff")}}));
}

std::string nested_array(size_t depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

// Issue 12: a body nested 70,000 deep crashed the server (stack exhaustion while the JSON
// library copied or printed it). The depth is refused before parsing, wherever it is.
TEST(OpenAiProtocolTest, DeepNestingIsRefusedBeforeParsing) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  const std::vector<std::pair<std::string, std::string>> places = {
      {"{" + user + R"(, "temperature": )", "}"},
      {R"({"messages": [)", "]}"},
      {R"({"messages": [{"role": "user", "content": )", "}]}"},
      {"{" + user + R"(, "chat_template_kwargs": {"a": )", "}}"},
      {"{" + user + R"(, "tools": )", "}"},
  };
  for (const auto& [before, after] : places) {
    const ApiError error = api_error_of(ApiKind::kChat, before + nested_array(70000) + after);
    EXPECT_EQ(error.status, 400);
    EXPECT_THAT(error.message, HasSubstr("the limit is 64")) << before;
  }
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[{{{{", "b": [[1]]})"), 3u) << "brackets inside strings do not count";
  EXPECT_EQ(json_nesting_depth(R"({"a": "\"[[[", "b": 1})"), 1u) << "an escaped quote does not end the string";
  // 64 levels in all (the body object is one) is still fine.
  const ApiError ok = api_error_of(ApiKind::kChat, R"({"messages": [{"role": "user", "content": "x"}], "x": )" +
                                                   nested_array(63) + "}");
  EXPECT_EQ(ok.status, 0) << ok.message;
}

TEST(OpenAiProtocolTest, JsonErrorsDoNotNameTheLibrarysExceptions) {
  const ApiError error = api_error_of(ApiKind::kChat, "{\"messages\": [}");
  EXPECT_EQ(error.status, 400);
  EXPECT_THAT(error.message, HasSubstr("not valid JSON"));
  EXPECT_THAT(error.message, ::testing::Not(HasSubstr("json.exception")));
}

TEST(OpenAiProtocolTest, EveryConstraintFieldBecomesOneConstraint) {
  using Kind = structured::ConstraintSpec::Kind;
  const std::string messages = R"("messages": [{"role": "user", "content": "x"}])";
  const auto constraint = [&](const std::string& field) {
    const OpenAiRequest request = parse_openai_request(ApiKind::kChat, "{" + messages + ", " + field + "}", {});
    EXPECT_TRUE(request.constraint.has_value()) << field;
    return request.constraint.value_or(structured::ConstraintSpec{});
  };
  // A schema keeps its properties in the order written (they are generated in that order).
  const auto schema = constraint(R"("guided_json": {"properties": {"zeta": {}, "alpha": {}}, "type": "object"})");
  EXPECT_EQ(schema.kind, Kind::kJsonSchema);
  EXPECT_EQ(schema.text, R"({"properties":{"zeta":{},"alpha":{}},"type":"object"})");
  EXPECT_EQ(constraint(R"("guided_json": "{\"type\": \"integer\"}")").text, R"({"type": "integer"})");
  EXPECT_EQ(constraint(R"("guided_regex": "a+")").kind, Kind::kRegex);
  EXPECT_EQ(constraint(R"("guided_choice": ["a", "b"])").choices, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(constraint(R"("guided_grammar": "root ::= \"a\"")").kind, Kind::kGrammar);
  EXPECT_EQ(constraint(R"("guided_json_object": true)").kind, Kind::kJsonObject);
  EXPECT_EQ(constraint(R"("structural_tag": {"structures": [], "triggers": []})").kind, Kind::kStructuralTag);
  EXPECT_EQ(constraint(R"("response_format": {"type": "json_object"})").kind, Kind::kJsonObject);
  const auto strict = constraint(
      R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true, "schema": {"b": 1, "a": 2}}})");
  EXPECT_EQ(strict.kind, Kind::kJsonSchema);
  EXPECT_EQ(strict.text, R"({"b":1,"a":2})");
  EXPECT_EQ(constraint(R"("response_format": {"type": "json_schema", "json_schema": {"name": "n"}})").kind, Kind::kJsonObject);
  EXPECT_EQ(constraint(R"("response_format": {"type": "structural_tag", "structures": [], "triggers": []})").kind,
            Kind::kStructuralTag);
  EXPECT_FALSE(parse_openai_request(ApiKind::kChat, "{" + messages + R"(, "response_format": {"type": "text"}})", {})
                   .constraint.has_value());
  EXPECT_FALSE(parse_openai_request(ApiKind::kCompletion, R"({"prompt": "x", "guided_json_object": false})", {})
                   .constraint.has_value());
  EXPECT_EQ(parse_openai_request(ApiKind::kCompletion, R"({"prompt": "x", "guided_regex": "[0-9]"})", {}).constraint_field,
            "guided_regex");
}

TEST(OpenAiProtocolTest, MalformedOrConflictingConstraintsAreRefusedNamingTheField) {
  const std::string messages = R"("messages": [{"role": "user", "content": "x"}])";
  const auto refused = [&](const std::string& field) { return api_error_of(ApiKind::kChat, "{" + messages + ", " + field + "}"); };
  EXPECT_EQ(refused(R"("guided_regex": 5)").param, "guided_regex");
  EXPECT_EQ(refused(R"("guided_choice": [])").param, "guided_choice");
  EXPECT_EQ(refused(R"("guided_choice": ["a", 1])").param, "guided_choice");
  EXPECT_EQ(refused(R"("guided_json": "{not json")").param, "guided_json");
  EXPECT_EQ(refused(R"("guided_json": [1])").param, "guided_json");
  EXPECT_EQ(refused(R"("guided_json_object": "yes")").param, "guided_json_object");
  EXPECT_EQ(refused(R"("response_format": {"type": "xml"})").param, "response_format");
  EXPECT_EQ(refused(R"("response_format": {"type": "json_schema"})").param, "response_format");
  EXPECT_EQ(refused(R"("response_format": {"type": "json_schema", "json_schema": {"schema": 3}})").param, "response_format");
  const ApiError both = refused(R"("guided_regex": "a", "guided_choice": ["a"])");
  EXPECT_EQ(both.status, 400);
  EXPECT_THAT(both.message, HasSubstr("only one kind of guided decoding"));
  EXPECT_EQ(refused(R"("response_format": {"type": "json_object"}, "guided_json": {})").status, 400);
}

TEST(OpenAiProtocolTest, RequestIdsMustBePrintableAndShort) {
  EXPECT_EQ(api_error_of(ApiKind::kCompletion, R"({"prompt": "x", "request_id": "a\nINFO forged line"})").param, "request_id");
  EXPECT_EQ(api_error_of(ApiKind::kCompletion, R"({"prompt": "x", "request_id": ""})").param, "request_id");
  EXPECT_EQ(api_error_of(ApiKind::kCompletion, R"({"prompt": "x", "request_id": ")" + std::string(300, 'a') + "\"}").param,
            "request_id");
  EXPECT_EQ(parse_openai_request(ApiKind::kCompletion, R"({"prompt": "x", "request_id": "mine-1"})", {}).request_id, "mine-1");
}

TEST(OpenAiProtocolTest, BatchesAreCapped) {
  std::string prompts = "[";
  for (size_t i = 0; i <= kMaxPromptsPerRequest; ++i) prompts += (i ? ",\"p\"" : "\"p\"");
  prompts += "]";
  const ApiError error = api_error_of(ApiKind::kCompletion, R"({"prompt": )" + prompts + "}");
  EXPECT_EQ(error.param, "prompt");
  EXPECT_THAT(error.message, HasSubstr("the limit is " + std::to_string(kMaxPromptsPerRequest)));
}

// ordered_json searches an object's keys on every insert: a body holding one object with
// a million keys must not cost hours (issue 12: a worker must not stall).
TEST(OpenAiProtocolTest, HugeObjectsAreCopiedInLinearTime) {
  std::string kwargs = "{";
  for (int i = 0; i < 300000; ++i) kwargs += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": " + std::to_string(i);
  kwargs += "}";
  const auto start = std::chrono::steady_clock::now();
  const OpenAiRequest request = parse_openai_request(
      ApiKind::kChat, R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": )" + kwargs + "}", {});
  EXPECT_EQ(request.chat_template_kwargs.size(), 300000u);
  EXPECT_EQ(request.chat_template_kwargs.at("k299999"), 299999);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << "quadratic copies take minutes";
  const OpenAiRequest nested = parse_openai_request(
      ApiKind::kChat, R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}], "x": [1, 2.5, true, null, {"a": -3}]}]})", {});
  EXPECT_EQ(nested.messages.dump(), R"([{"content":[{"text":"hi","type":"text"}],"role":"user","x":[1,2.5,true,null,{"a":-3}]}])");
}

TEST(OpenAiProtocolTest, CompletionLogprobsMayBeABoolean) {
  const OpenAiRequest on = parse_openai_request(ApiKind::kCompletion, R"({"prompt": "x", "logprobs": true})", {});
  EXPECT_TRUE(on.logprobs);
  EXPECT_EQ(on.top_logprobs, 1);
  const OpenAiRequest off = parse_openai_request(ApiKind::kCompletion, R"({"prompt": "x", "logprobs": false})", {});
  EXPECT_FALSE(off.logprobs);
  EXPECT_EQ(parse_openai_request(ApiKind::kCompletion, R"({"prompt": "x", "logprobs": 3})", {}).top_logprobs, 3);
  EXPECT_EQ(api_error_of(ApiKind::kCompletion, R"({"prompt": "x", "logprobs": "yes"})").param, "logprobs");
}

}  // namespace
}  // namespace ernie
