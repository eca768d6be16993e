#include "serving/openai_server.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>

#include "serving/webui.h"
#include "util/error.h"
#include "util/log.h"

namespace ernie {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

const char* reason_text(FinishReason reason) { return finish_reason_name(reason); }

// `bytes` random bytes as hex, from the operating system's generator: ids a client can
// see or guess must not be predictable.
std::string random_hex(size_t bytes) {
  static std::mutex mutex;
  static std::random_device device;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  std::lock_guard<std::mutex> lock(mutex);
  for (size_t i = 0; i < bytes; i += 4) {
    uint32_t word = device();
    for (size_t k = 0; k < 4 && i + k < bytes; ++k, word >>= 8) {
      out += kHex[(word >> 4) & 15];
      out += kHex[word & 15];
    }
  }
  return out;
}

// Adds CORS's Access-Control-Allow-Origin to whatever the handler answers, so browser
// pages on any origin can read the API (as FastAPI's CORS middleware with "*" does).
class CorsResponder final : public HttpResponder {
 public:
  explicit CorsResponder(std::shared_ptr<HttpResponder> inner) : inner_(std::move(inner)) {}
  void respond(HttpResponse response) override {
    response.headers.emplace_back("Access-Control-Allow-Origin", "*");
    inner_->respond(std::move(response));
  }
  std::shared_ptr<HttpStream> start_stream(int status, std::string content_type,
                                           std::vector<std::pair<std::string, std::string>> headers) override {
    headers.emplace_back("Access-Control-Allow-Origin", "*");
    return inner_->start_stream(status, std::move(content_type), std::move(headers));
  }
  void on_disconnect(std::function<void()> callback) override { inner_->on_disconnect(std::move(callback)); }

 private:
  std::shared_ptr<HttpResponder> inner_;
};

// The answer to a CORS preflight (OPTIONS): any origin, the API's methods, the headers
// the page asked to send.
HttpResponse cors_preflight(const HttpRequest& request) {
  HttpResponse response{204, "text/plain", "", {}};
  const auto asked = request.headers.find("access-control-request-headers");
  response.headers = {{"Access-Control-Allow-Origin", "*"},
                      {"Access-Control-Allow-Methods", "GET, POST, HEAD, OPTIONS"},
                      {"Access-Control-Allow-Headers",
                       asked != request.headers.end() ? asked->second : "Authorization, Content-Type"},
                      {"Access-Control-Max-Age", "600"}};
  return response;
}

// The labels of fastdeploy:cache_config_info: the KV cache as configured.
std::string cache_config_labels(const EngineConfig& engine, const EngineStats& stats) {
  auto flag = [](bool on) { return on ? "True" : "False"; };
  return str_cat("block_size=\"", engine.block_size, "\",num_gpu_blocks=\"", stats.blocks_total,
                 "\",enable_prefix_caching=\"", flag(engine.prefix_caching), "\",enable_chunked_prefill=\"",
                 flag(engine.chunked_prefill), "\",kv_cache_ratio=\"", engine.kv_cache_ratio, "\",max_num_seqs=\"",
                 engine.max_num_seqs, "\",max_model_len=\"", engine.max_model_len, "\",max_num_batched_tokens=\"",
                 engine.effective_max_num_batched_tokens(), "\",num_cpu_blocks=\"", stats.swap.capacity_blocks, "\"");
}

// Special-token strings the chat templates use (bos_token, cls_token, ...).
std::map<std::string, std::string> special_token_strings(const Tokenizer& tokenizer) {
  std::map<std::string, std::string> tokens;
  auto add = [&](const char* name, int32_t id) {
    if (id != Tokenizer::kNoToken) tokens[name] = tokenizer.token_bytes(id, false);
  };
  add("bos_token", tokenizer.bos_id());
  add("eos_token", tokenizer.eos_id());
  add("unk_token", tokenizer.unk_id());
  add("pad_token", tokenizer.pad_id());
  if (!tokenizer.cls_token().empty()) tokens["cls_token"] = tokenizer.cls_token();
  if (!tokenizer.sep_token().empty()) tokens["sep_token"] = tokenizer.sep_token();
  return tokens;
}

}  // namespace

HttpResponse json_error_response(const ApiError& error) {
  HttpResponse response;
  response.status = error.status;
  response.body = error_body(error);
  return response;
}

// Collects one HTTP request's engine outputs (one engine request per choice) and turns
// them into the response: SSE chunks as they come, or one JSON body at the end. Outputs
// arrive on the engine thread; a disconnect arrives on an IO thread.
class ResponseAssembler : public std::enable_shared_from_this<ResponseAssembler> {
 public:
  struct Choice {
    std::string engine_id;
    std::vector<int32_t> prompt_ids;
    std::shared_ptr<const MultimodalPrompt> multimodal;  // a VL prompt's encoded images
    std::string prompt_text;  // for echo, and prompt_tokens with return_token_ids
    std::string raw_text;   // everything generated, before any parser (completion_tokens)
    std::string text;       // content (all the text when no parser runs)
    std::string reasoning;  // reasoning_content
    std::vector<ParsedToolCall> tool_calls;
    std::unique_ptr<OutputParser> parser;  // chat with a reasoning or tool-call parser
    bool starts_in_reasoning = false;
    std::vector<int32_t> token_ids;
    std::vector<LogprobEntry> logprobs;
    ordered_json prompt_logprobs;  // null unless the request asked for them
    std::optional<FinishReason> finish_reason;
    int64_t cached_tokens = 0;
    int64_t draft_tokens = 0;  // speculative drafts verified, and accepted
    int64_t accepted_draft_tokens = 0;
    // n > 1: the choices after the first of a prompt wait for that one's first output,
    // so its prompt is in the prefix cache and is computed once.
    std::optional<size_t> after;
    bool submitted = false;
    bool cancelled = false;     // aborted before it was submitted
    bool released_siblings = false;
    uint64_t seed_offset = 0;   // each choice of a seeded request draws its own stream
    // Streaming: deltas not yet sent (max_streaming_response_tokens packs several).
    std::vector<ordered_json> pending;
  };

  ResponseAssembler(std::shared_ptr<OpenAiService> service, OpenAiRequest request, std::string id,
                    std::string model_name, std::shared_ptr<HttpResponder> responder, Clock::time_point arrival)
      : owner_(std::move(service)),
        service_(*owner_),
        request_(std::move(request)),
        id_(std::move(id)),
        model_name_(std::move(model_name)),
        responder_(std::move(responder)),
        arrival_(arrival),
        created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()) {}

  // The output constraint every choice follows (null: none).
  std::shared_ptr<const structured::CompiledConstraint> constraint;
  std::vector<Choice>& choices() { return choices_; }
  const std::string& id() const { return id_; }
  const std::string& client_request_id() const { return request_.request_id; }
  size_t num_choices() const { return choices_.size(); }

  // Ends every choice with "abort" (the engine answers through on_output as usual; a
  // choice still waiting for its sibling is ended here).
  void abort_all() {
    std::vector<std::string> running;
    std::vector<size_t> waiting;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < choices_.size(); ++i) {
        Choice& choice = choices_[i];
        // Only a choice that waits for its sibling is ended here. Any other is the
        // engine's to end, even when start() has not handed it over yet: ending it here
        // could finish the response before start() has opened the stream.
        if (choice.after && !choice.submitted) {
          if (!std::exchange(choice.cancelled, true)) waiting.push_back(i);
        } else {
          running.push_back(choice.engine_id);
        }
      }
    }
    for (const std::string& id : running) service_.engine_.abort(id);
    for (const size_t i : waiting) {
      RequestOutput aborted;
      aborted.finish_reason = FinishReason::kAbort;
      on_output(i, std::move(aborted));
    }
  }

  // Sends the response head (streaming) and submits every choice to the engine.
  void start() {
    auto self = shared_from_this();
    if (request_.stream) {
      // The charset matters: without it Python's requests reads the stream as
      // ISO-8859-1 and splits multi-byte characters.
      stream_ = responder_->start_stream(200, "text/event-stream; charset=utf-8");
      stream_->on_disconnect([self] { self->on_disconnect(); });
      // The first chunk of each choice carries the prompt's ids (FastDeploy): the chat
      // role, or for completions the echoed prompt or an empty text.
      std::vector<ordered_json> first;
      for (size_t i = 0; i < choices_.size(); ++i) {
        const Choice& choice = choices_[i];
        ordered_json entry = {{"index", i}};
        if (request_.kind == ApiKind::kChat) {
          ordered_json delta = {{"role", "assistant"}, {"content", ""}};
          if (choice.parser && service_.config_.reasoning_parser != ReasoningParser::kNone) delta["reasoning_content"] = "";
          add_token_fields(delta, &choice.prompt_ids, &choice.prompt_text, nullptr, nullptr);
          entry["delta"] = std::move(delta);
        } else if (request_.echo || request_.return_token_ids) {
          entry["text"] = request_.echo ? choice.prompt_text : "";
          add_token_fields(entry, &choice.prompt_ids, &choice.prompt_text, nullptr, nullptr);
        } else {
          continue;
        }
        entry["logprobs"] = nullptr;
        entry["finish_reason"] = nullptr;
        first.push_back(std::move(entry));
      }
      if (!first.empty()) write_chunk(first);
    }
    // A client that leaves stops its work, streamed or not (registered once the stream
    // exists; a disconnect before now is still reported). Weak: the engine's sinks are
    // what keep an assembler alive, not the connection.
    responder_->on_disconnect([weak = weak_from_this()] {
      if (auto alive = weak.lock()) alive->on_disconnect();
    });
    submitted_ = Clock::now();
    fairness_group_ = choices_.size() > 1 ? service_.next_serial_.fetch_add(1) : 0;
    std::vector<size_t> now;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < choices_.size(); ++i) {
        if (choices_[i].after) continue;
        choices_[i].submitted = true;
        now.push_back(i);
      }
    }
    for (const size_t i : now) submit(i);
  }

 private:
  // Hands choice `i` to the engine; called without mutex_ held.
  void submit(size_t i) {
    const Choice& choice = choices_[i];
    GenerateRequest engine_request;
    engine_request.id = choice.engine_id;
    engine_request.prompt = choice.prompt_ids;
    engine_request.multimodal = choice.multimodal;
    engine_request.params = request_.params;
    if (engine_request.params.seed)
      engine_request.params.seed = (*engine_request.params.seed + choice.seed_offset) % (kMaxSeed + 1);
    engine_request.fairness_group = fairness_group_;
    if (choice.parser) engine_request.visible_special_tokens = service_.markers_.all_ids();
    engine_request.constraint = constraint;
    engine_request.constrain_after_reasoning = choice.starts_in_reasoning;
    try {
      if (!service_.submit_unless_paused(std::move(engine_request), [self = shared_from_this(), i](RequestOutput output) {
            self->on_output(i, std::move(output));
          })) {
        RequestOutput aborted;  // admitted just before a pause
        aborted.finish_reason = FinishReason::kAbort;
        on_output(i, std::move(aborted));
      }
    } catch (const Error& error) {
      RequestOutput failed;
      failed.finish_reason = FinishReason::kError;
      failed.error = error.what();
      on_output(i, std::move(failed));
    }
  }

  void on_disconnect() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      disconnected_ = true;
    }
    abort_all();
  }

  void write_chunk(const std::vector<ordered_json>& entries) {
    ordered_json chunk = {{"id", id_},
                          {"object", request_.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion"},
                          {"created", created_},
                          {"model", model_name_},
                          {"choices", entries}};
    if (request_.continuous_usage) chunk["usage"] = usage_json(usage());  // the counts so far
    stream_->write("data: " + dump_json(chunk) + "\n\n");
  }

  // FastDeploy's token fields: present in every message, choice and delta, null unless
  // return_token_ids asked for them (or when this piece has none of that kind).
  void add_token_fields(ordered_json& target, const std::vector<int32_t>* prompt_ids, const std::string* prompt_text,
                        const std::vector<int32_t>* completion_ids, const std::string* completion_text) const {
    const bool show = request_.return_token_ids;
    target["prompt_token_ids"] = show && prompt_ids ? ordered_json(*prompt_ids) : ordered_json(nullptr);
    target["completion_token_ids"] = show && completion_ids ? ordered_json(*completion_ids) : ordered_json(nullptr);
    target["prompt_tokens"] = show && prompt_text ? ordered_json(*prompt_text) : ordered_json(nullptr);
    target["completion_tokens"] = show && completion_text ? ordered_json(*completion_text) : ordered_json(nullptr);
  }

  // `first_call_index`: the position of delta.tool_calls[0] among the choice's calls.
  ordered_json delta_entry(size_t index, const ParsedDelta& parsed, size_t first_call_index, const std::vector<int32_t>& tokens,
                           const std::string& raw_text, const std::vector<LogprobEntry>& logprobs) const {
    const std::string& text = parsed.content;
    ordered_json entry = {{"index", index}};
    if (request_.kind == ApiKind::kChat) {
      ordered_json delta = ordered_json::object();
      if (!parsed.reasoning.empty()) delta["reasoning_content"] = parsed.reasoning;
      if (!text.empty() || (parsed.reasoning.empty() && parsed.tool_calls.empty())) delta["content"] = text;
      if (!parsed.tool_calls.empty()) {
        ordered_json calls = ordered_json::array();
        for (size_t k = 0; k < parsed.tool_calls.size(); ++k) {
          ordered_json call = tool_call_json(parsed.tool_calls[k]);
          call["index"] = first_call_index + k;
          calls.push_back(std::move(call));
        }
        delta["tool_calls"] = std::move(calls);
      }
      add_token_fields(delta, nullptr, nullptr, &tokens, &raw_text);
      entry["delta"] = delta;
      entry["logprobs"] = request_.logprobs ? chat_logprobs_json(logprobs) : ordered_json(nullptr);
    } else {
      entry["text"] = text;
      add_token_fields(entry, nullptr, nullptr, &tokens, &raw_text);
      entry["logprobs"] = request_.logprobs ? completion_logprobs_json(logprobs, 0) : ordered_json(nullptr);
    }
    entry["finish_reason"] = nullptr;
    return entry;
  }

  static ordered_json tool_call_json(const ParsedToolCall& call) {
    return {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
  }

  // OpenAI's "tool_calls" when the answer called a tool and ended by itself.
  static std::string finish_text(const Choice& choice) {
    if (*choice.finish_reason == FinishReason::kStop && !choice.tool_calls.empty()) return "tool_calls";
    return reason_text(*choice.finish_reason);
  }

  // Generated tokens spent inside <think>: up to the first </think>, or all of them
  // (less a final end token) when thinking never ended.
  int64_t reasoning_tokens(const Choice& choice) const {
    if (!choice.starts_in_reasoning) return 0;
    const std::vector<int32_t>& ids = choice.token_ids;
    const auto end = std::find(ids.begin(), ids.end(), service_.markers_.id_of(kThinkEnd).value_or(-1));
    if (end != ids.end()) return end - ids.begin();
    const bool ended_by_token = !ids.empty() && choice.finish_reason == FinishReason::kStop &&
                                std::find(service_.eos_token_ids_.begin(), service_.eos_token_ids_.end(), ids.back()) !=
                                    service_.eos_token_ids_.end();
    return static_cast<int64_t>(ids.size()) - (ended_by_token ? 1 : 0);
  }

  std::vector<LogprobEntry> logprob_entries(const RequestOutput& output) const {
    std::vector<LogprobEntry> entries;
    const Tokenizer& tokenizer = service_.tokenizer_;
    for (const SampledToken& sampled : output.logprobs) {
      LogprobEntry entry{tokenizer.token_bytes(sampled.token, false), sampled.logprob, {}};
      for (const TokenLogprob& top : sampled.top_logprobs)
        entry.top.emplace_back(tokenizer.token_bytes(top.token, false), top.logprob);
      entries.push_back(std::move(entry));
    }
    return entries;
  }

  // FastDeploy's (and vLLM's) prompt_logprobs: null for the first prompt token, then per
  // token {"<id>": {logprob, rank, decoded_token}} for the token itself and the most
  // likely ones. -inf, which JSON cannot hold, becomes FastDeploy's -9999.0.
  ordered_json prompt_logprobs_json(const std::vector<PromptTokenLogprob>& scored) const {
    const Tokenizer& tokenizer = service_.tokenizer_;
    auto entry = [&](int32_t token, float logprob, int64_t rank) {
      return ordered_json{{"logprob", std::isinf(logprob) ? -9999.0f : logprob},
                          {"rank", rank},
                          {"decoded_token", request_.include_logprobs_decode_token
                                                ? ordered_json(tokenizer.token_bytes(token, false))
                                                : ordered_json(nullptr)}};
    };
    ordered_json list = ordered_json::array({nullptr});
    for (const PromptTokenLogprob& position : scored) {
      ordered_json tokens = ordered_json::object();
      tokens[std::to_string(position.token)] = entry(position.token, position.logprob, position.rank);
      for (size_t k = 0; k < position.top.size(); ++k) {
        const std::string key = std::to_string(position.top[k].token);
        if (!tokens.contains(key)) tokens[key] = entry(position.top[k].token, position.top[k].logprob, static_cast<int64_t>(k) + 1);
      }
      list.push_back(std::move(tokens));
    }
    return list;
  }

  void on_output(size_t index, RequestOutput output) {
    std::vector<size_t> siblings;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      take_output(index, std::move(output), siblings);
    }
    for (const size_t sibling : siblings) submit(sibling);
  }

  // on_output with mutex_ held; `siblings` receives the choices its first output releases.
  void take_output(size_t index, RequestOutput output, std::vector<size_t>& siblings) {
    Choice& choice = choices_[index];
    if (!std::exchange(choice.released_siblings, true)) {
      for (size_t j = 0; j < choices_.size(); ++j) {
        Choice& sibling = choices_[j];
        if (sibling.after != index || sibling.submitted || sibling.cancelled) continue;
        sibling.submitted = true;
        siblings.push_back(j);
      }
    }
    if (output.finish_reason == FinishReason::kError) {
      error_ = output.error;
      server_fault_ = server_fault_ || output.server_fault;
      waited_too_long_ = waited_too_long_ || output.waited_too_long;
      choice.finish_reason = FinishReason::kError;
    } else {
      if (!output.token_ids.empty() && !first_token_) first_token_ = Clock::now();
      ParsedDelta parsed;
      if (choice.parser) {
        parsed = choice.parser->push(output.text);
        if (output.finished()) parsed.append(choice.parser->finish());
      } else {
        parsed.content = output.text;
      }
      const size_t first_call_index = choice.tool_calls.size();
      choice.raw_text += output.text;
      choice.text += parsed.content;
      choice.reasoning += parsed.reasoning;
      choice.tool_calls.insert(choice.tool_calls.end(), parsed.tool_calls.begin(), parsed.tool_calls.end());
      choice.token_ids.insert(choice.token_ids.end(), output.token_ids.begin(), output.token_ids.end());
      const std::vector<LogprobEntry> logprobs = request_.logprobs ? logprob_entries(output) : std::vector<LogprobEntry>{};
      choice.logprobs.insert(choice.logprobs.end(), logprobs.begin(), logprobs.end());
      choice.cached_tokens = output.cached_tokens;
      choice.draft_tokens = output.draft_tokens;
      choice.accepted_draft_tokens = output.accepted_draft_tokens;
      if (output.finished()) choice.finish_reason = output.finish_reason;
      // With a parser, a delta that only carried markers says nothing (FastDeploy sends
      // none), unless the client asked for every token's ids or logprobs.
      const bool has_prompt_logprobs = !output.prompt_logprobs.empty();
      if (has_prompt_logprobs) choice.prompt_logprobs = prompt_logprobs_json(output.prompt_logprobs);
      const bool worth_sending =
          !parsed.empty() || has_prompt_logprobs ||
          (!output.token_ids.empty() && (!choice.parser || request_.return_token_ids || request_.logprobs));
      if (request_.stream && !disconnected_ && worth_sending) {
        choice.pending.push_back(delta_entry(index, parsed, first_call_index, output.token_ids, output.text, logprobs));
        // Streamed, the prompt's logprobs ride on the choice's first generated token.
        if (has_prompt_logprobs) choice.pending.back()["prompt_logprobs"] = choice.prompt_logprobs;
      }
      if (request_.stream && !disconnected_) flush_stream_entries(index, output.finished());
    }
    if (!choice.finish_reason) return;
    for (const Choice& other : choices_)
      if (!other.finish_reason) return;
    finish();
  }

  // Sends pending deltas once max_streaming_response_tokens of them are ready, or at the end.
  void flush_stream_entries(size_t index, bool finished) {
    Choice& choice = choices_[index];
    if (finished) {
      // The finish reason rides on the last delta, or on an empty one.
      if (choice.pending.empty()) choice.pending.push_back(delta_entry(index, {}, 0, {}, {}, {}));
      choice.pending.back()["finish_reason"] = finish_text(choice);
    }
    if (choice.pending.empty()) return;
    if (!finished && static_cast<int>(choice.pending.size()) < request_.max_streaming_response_tokens) return;
    write_chunk(choice.pending);
    choice.pending.clear();
  }

  Usage usage() const {
    Usage usage;
    usage.reports_reasoning = service_.config_.reasoning_parser != ReasoningParser::kNone && request_.kind == ApiKind::kChat;
    for (const Choice& choice : choices_) {
      usage.reasoning_tokens += reasoning_tokens(choice);
      usage.completion_tokens += static_cast<int64_t>(choice.token_ids.size());
      if (choice.after) continue;  // a prompt counts once, however many choices it has
      usage.prompt_tokens += static_cast<int64_t>(choice.prompt_ids.size());
      usage.cached_tokens += choice.cached_tokens;
    }
    return usage;
  }

  void finish() {
    const Usage totals = usage();
    const bool failed = !error_.empty();
    if (request_.stream) {
      if (!disconnected_) {
        if (failed) {
          stream_->write("data: " + error_body(failure()) + "\n\n");
        } else if (request_.include_usage) {
          ordered_json chunk = {{"id", id_},
                                {"object", request_.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion"},
                                {"created", created_},
                                {"model", model_name_},
                                {"choices", ordered_json::array()},
                                {"usage", usage_json(totals)}};
          stream_->write("data: " + dump_json(chunk) + "\n\n");
        }
        stream_->write("data: [DONE]\n\n");
      }
      stream_->close();
    } else if (failed) {
      responder_->respond(json_error_response(failure()));
    } else {
      responder_->respond(final_body(totals));
    }
    record(totals, failed);
  }

  // An engine fault is the server's (500); anything else the request's (400).
  ApiError failure() const {
    if (server_fault_) return {500, error_, "server_error", ""};
    // FastDeploy's type and code for a request that waited too long; 503, not its blanket
    // 500, since the server is busy rather than broken and a retry may well succeed.
    if (waited_too_long_) return {503, error_, "timeout_error", ""};
    return {400, error_, "invalid_request_error", ""};
  }

  HttpResponse final_body(const Usage& totals) const {
    ordered_json choices = ordered_json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const Choice& choice = choices_[i];
      ordered_json entry = {{"index", i}};
      if (request_.kind == ApiKind::kChat) {
        ordered_json message = {{"role", "assistant"}, {"content", choice.text}};
        if (choice.text.empty() && !choice.tool_calls.empty()) message["content"] = nullptr;
        // Always present, as in FastDeploy's messages: null without a reasoning parser.
        message["reasoning_content"] = choice.parser && service_.config_.reasoning_parser != ReasoningParser::kNone
                                           ? ordered_json(choice.reasoning)
                                           : ordered_json(nullptr);
        if (!choice.tool_calls.empty()) {
          ordered_json calls = ordered_json::array();
          for (const ParsedToolCall& call : choice.tool_calls) calls.push_back(tool_call_json(call));
          message["tool_calls"] = std::move(calls);
        }
        add_token_fields(message, &choice.prompt_ids, &choice.prompt_text, &choice.token_ids, &choice.raw_text);
        entry["message"] = message;
        entry["logprobs"] = request_.logprobs ? chat_logprobs_json(choice.logprobs) : ordered_json(nullptr);
      } else {
        const std::string prefix = request_.echo ? choice.prompt_text : "";
        entry["text"] = prefix + choice.text;
        add_token_fields(entry, &choice.prompt_ids, &choice.prompt_text, &choice.token_ids, &choice.raw_text);
        entry["logprobs"] = request_.logprobs ? completion_logprobs_json(choice.logprobs, prefix.size()) : ordered_json(nullptr);
      }
      entry["prompt_logprobs"] = choice.prompt_logprobs;  // null unless asked for
      entry["finish_reason"] = finish_text(choice);
      choices.push_back(entry);
    }
    ordered_json body = {{"id", id_},
                         {"object", request_.kind == ApiKind::kChat ? "chat.completion" : "text_completion"},
                         {"created", created_},
                         {"model", model_name_},
                         {"choices", choices},
                         {"usage", usage_json(totals)}};
    HttpResponse response;
    response.body = dump_json(body);
    return response;
  }

  void record(const Usage& totals, bool failed) {
    FinishedRequestFigures figures;
    figures.success = !failed && !disconnected_;
    figures.e2e_seconds = seconds_since(arrival_);
    figures.ttft_seconds = first_token_ ? std::chrono::duration<double>(*first_token_ - arrival_).count() : 0.0;
    figures.queue_seconds = std::chrono::duration<double>(submitted_ - arrival_).count();
    const Clock::time_point now = Clock::now();
    figures.inference_seconds = std::chrono::duration<double>(now - submitted_).count();
    if (first_token_) {
      figures.prefill_seconds = std::chrono::duration<double>(*first_token_ - submitted_).count();
      figures.decode_seconds = std::chrono::duration<double>(now - *first_token_).count();
    }
    figures.prompt_tokens = totals.prompt_tokens;
    figures.generation_tokens = totals.completion_tokens;
    figures.max_tokens = request_.params.max_tokens;
    service_.metrics_.request_finished(figures);
    std::string reasons;
    int64_t drafts = 0, accepted = 0;
    for (const Choice& choice : choices_) {
      reasons += (reasons.empty() ? "" : ",") + finish_text(choice);
      drafts += choice.draft_tokens;
      accepted += choice.accepted_draft_tokens;
    }
    const std::string speculation =
        drafts > 0 ? str_cat(" drafts_accepted=", accepted, "/", drafts) : std::string();
    log_info("request ", id_, " ", request_.kind == ApiKind::kChat ? "chat" : "completion",
             request_.stream ? " stream" : "", " prompt_tokens=", totals.prompt_tokens,
             " cached_tokens=", totals.cached_tokens, " completion_tokens=", totals.completion_tokens,
             speculation, " ttft=", figures.ttft_seconds, "s total=", figures.e2e_seconds, "s finish=", reasons,
             disconnected_ ? " (client disconnected)" : "", failed ? " error: " + error_ : "");
    service_.forget(*this);
  }

  // Keeps the service alive until this request's last output: the engine thread may
  // still deliver one while the server shuts down.
  const std::shared_ptr<OpenAiService> owner_;
  OpenAiService& service_;
  OpenAiRequest request_;
  std::string id_;
  std::string model_name_;
  std::shared_ptr<HttpResponder> responder_;
  std::shared_ptr<HttpStream> stream_;
  Clock::time_point arrival_;
  Clock::time_point submitted_;
  std::optional<Clock::time_point> first_token_;
  int64_t created_;
  std::vector<Choice> choices_;
  std::mutex mutex_;
  uint64_t fairness_group_ = 0;
  bool disconnected_ = false;
  std::string error_;
  bool server_fault_ = false;
  bool waited_too_long_ = false;
};

OpenAiService::OpenAiService(const ServeConfig& config, EngineClient& engine, const Tokenizer& tokenizer,
                             LanguageModel& language_model, const GenerationConfig& generation)
    : config_(config),
      engine_(engine),
      tokenizer_(tokenizer),
      model_(language_model.config()),
      metrics_(cache_config_labels(config.engine, engine.stats())),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()) {
  defaults_.temperature = generation.temperature.value_or(defaults_.temperature);
  defaults_.top_p = generation.top_p.value_or(defaults_.top_p);
  defaults_.repetition_penalty = generation.repetition_penalty.value_or(defaults_.repetition_penalty);
  const std::string source = config.chat_template.empty() ? tokenizer.chat_template() : config.chat_template;
  if (!source.empty()) chat_template_ = std::make_unique<ChatTemplate>(source, special_token_strings(tokenizer));
  else log_warning("the model has no chat template: /v1/chat/completions needs --chat-template or disable_chat_template");
  eos_token_ids_ = end_token_ids(generation, model_);
  if (language_model.has_vision()) {
    // Images are encoded on the requests' worker threads with a pool of their own (half
    // the engine's threads, at least one), so decoding never waits for them.
    vision_ = std::make_unique<VisionFrontend>(language_model, std::max<size_t>(1, config.threads / 2));
    media_workers_ = std::make_unique<WorkerPool>(2, 64);
    log_info("images: up to ", config.multimodal.max_images, " image(s) per prompt (--limit-mm-per-prompt), ",
             config.multimodal.image.min_pixels, "..", config.multimodal.image.max_pixels, " pixels each after resizing");
  }
  // No token is longer than the longest piece, so a text of more than this many bytes
  // holds more than max_model_len tokens (twice over, for tokenizers that fold a run of
  // unknown characters into one token) and is refused before any tokenizing.
  size_t longest_token = 4;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    longest_token = std::max(longest_token, tokenizer.token_bytes(id, false).size());
  max_prompt_bytes_ = 2 * longest_token * static_cast<size_t>(config.engine.max_model_len);
  // Two workers: one slow chat template cannot hold up every other request.
  workers_ = std::make_unique<WorkerPool>(2, 4096);
  if (config_.reasoning_parser != ReasoningParser::kNone || config_.tool_call_parser != ToolCallParser::kNone) {
    markers_ = resolve_marker_tokens(tokenizer, config_.reasoning_parser, config_.tool_call_parser);
    std::string listed;
    for (const auto& [text, id] : markers_.ids) listed += (listed.empty() ? "" : ", ") + text + "=" + std::to_string(id);
    log_info("chat answers are parsed for", config_.reasoning_parser != ReasoningParser::kNone ? " reasoning_content" : "",
             config_.tool_call_parser != ToolCallParser::kNone ? " tool_calls" : "", "; markers ", listed);
  }
}

bool OpenAiService::authorized(const HttpRequest& request) const {
  if (config_.api_keys.empty()) return true;
  const auto header = request.headers.find("authorization");
  if (header == request.headers.end()) return false;
  const std::string& value = header->second;
  const std::string prefix = "Bearer ";
  if (value.rfind(prefix, 0) != 0) return false;
  const std::string key = value.substr(prefix.size());
  return std::find(config_.api_keys.begin(), config_.api_keys.end(), key) != config_.api_keys.end();
}

std::string OpenAiService::metrics_text() const {
  return metrics_.render(engine_.stats(), engine_.kv_resident_bytes(), config_.engine.max_num_seqs);
}

HttpResponse OpenAiService::models_response() const {
  ordered_json model = {{"id", config_.model_name},
                        {"object", "model"},
                        {"created", created_},
                        {"owned_by", "ernie.cpp"},
                        {"root", config_.model_dir},
                        {"parent", nullptr},
                        {"max_model_len", config_.engine.max_model_len},
                        // What a client (the chat page) may offer: images and videos, a
                        // separate reasoning_content, tool calls.
                        {"capabilities",
                         {{"vision", vision_ != nullptr},
                          {"reasoning", config_.reasoning_parser != ReasoningParser::kNone},
                          {"tools", config_.tool_call_parser != ToolCallParser::kNone}}}};
  HttpResponse response;
  response.body = dump_json({{"object", "list"}, {"data", ordered_json::array({model})}});
  return response;
}

void OpenAiService::handle_metrics_port(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  if (request.path != "/metrics") {
    responder->respond(json_error_response({404, "the metrics port serves only /metrics", "invalid_request_error", ""}));
    return;
  }
  responder->respond({200, "text/plain; version=0.0.4", metrics_text(), {}});
}

void OpenAiService::handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  const std::string& path = request.path;
  // HEAD is GET without the body (the HTTP layer leaves it out).
  const bool get = request.method == "GET" || request.method == "HEAD", post = request.method == "POST";
  const bool control = path == "/v1/pause" || path == "/v1/resume" || path == "/v1/is_paused";
  const bool known = path == "/v1/models" || path == "/v1/chat/completions" || path == "/v1/completions" ||
                     path == "/health" || path == "/ping" || path == "/metrics" || control;
  // The chat page: static files from memory, no key needed (it asks for one when the
  // API answers 401).
  if (get && config_.webui) {
    if (std::optional<HttpResponse> page = webui_response(path)) {
      responder->respond(std::move(*page));
      return;
    }
  }
  if (request.method == "OPTIONS" && known) {
    responder->respond(cors_preflight(request));
    return;
  }
  if (request.headers.count("origin") != 0) responder = std::make_shared<CorsResponder>(std::move(responder));
  if (path == "/health" || path == "/ping") {
    if (get || (post && path == "/ping")) responder->respond({200, "application/json", "", {}});
    else responder->respond(json_error_response({405, "method " + request.method + " is not allowed on " + path, "invalid_request_error", ""}));
    return;
  }
  if (path == "/metrics" && get) {
    responder->respond({200, "text/plain; version=0.0.4", metrics_text(), {}});
    return;
  }
  if (!known || path == "/metrics") {
    responder->respond(json_error_response({404, "no route for " + request.method + " " + path, "invalid_request_error", ""}));
    return;
  }
  if (!authorized(request)) {
    HttpResponse response = json_error_response(
        {401, "a valid API key is required: send Authorization: Bearer <key>", "authentication_error", ""});
    response.headers.emplace_back("WWW-Authenticate", "Bearer");
    responder->respond(response);
    return;
  }
  if (path == "/v1/models") {
    if (!get) responder->respond(json_error_response({405, "use GET for /v1/models", "invalid_request_error", ""}));
    else responder->respond(models_response());
    return;
  }
  if (control) {
    const bool is_paused = path == "/v1/is_paused";
    if (is_paused ? !get : !post)
      responder->respond(json_error_response({405, std::string("use ") + (is_paused ? "GET" : "POST") + " for " + path,
                                              "invalid_request_error", ""}));
    else responder->respond(control_response(path.c_str() + 4));  // "pause", "resume" or "is_paused"
    return;
  }
  if (!post) {
    responder->respond(json_error_response({405, "use POST for " + path, "invalid_request_error", ""}));
    return;
  }
  const ApiKind kind = path == "/v1/chat/completions" ? ApiKind::kChat : ApiKind::kCompletion;
  const Clock::time_point arrival = Clock::now();
  std::function<void()> task = [self = shared_from_this(), kind, request = std::move(request), responder, arrival] {
    self->handle_generation(kind, request, responder, arrival);
  };
  if (!workers_ || !workers_->try_post(task))
    responder->respond(json_error_response({503, "the server is overloaded or shutting down; retry later", "server_error", ""}));
}

void OpenAiService::check_prompt_bytes(const std::string& text, const char* field) const {
  if (text.size() <= max_prompt_bytes_) return;
  invalid_field(field, "the prompt has " + std::to_string(text.size()) + " bytes; no prompt of more than " +
                           std::to_string(max_prompt_bytes_) + " bytes fits --max-model-len " +
                           std::to_string(config_.engine.max_model_len) + " tokens");
}

void OpenAiService::admit(const std::shared_ptr<ResponseAssembler>& assembler) {
  const int prompts = static_cast<int>(assembler->num_choices());
  const std::string& client_id = assembler->client_request_id();
  std::lock_guard<std::mutex> lock(live_mutex_);
  if (shutting_down_) throw ApiException{{503, "the server is shutting down", "server_error", ""}};
  if (paused_.load())
    throw ApiException{{503, "Request is aborted since LLM Engine is paused. (POST /v1/resume resumes it)", "server_error", ""}};
  // Each prompt of a batch counts: a batch is as much work as that many requests.
  if (in_flight_.load() + prompts > config_.max_concurrency)
    throw ApiException{{429, "Too many requests, current max concurrency is " + std::to_string(config_.max_concurrency) +
                                 (prompts > 1 ? " (this request holds " + std::to_string(prompts) + " prompts)" : ""),
                        "rate_limit_error", ""}};
  if (!client_id.empty() && !client_ids_.insert(client_id).second)
    invalid_field("request_id", "request_id \"" + client_id + "\" is already in flight");
  in_flight_.fetch_add(prompts);
  live_.emplace(assembler.get(), assembler);
}

void OpenAiService::forget(const ResponseAssembler& assembler) {
  {
    std::lock_guard<std::mutex> lock(live_mutex_);
    if (live_.erase(&assembler) == 0) return;
    if (!assembler.client_request_id().empty()) client_ids_.erase(assembler.client_request_id());
    in_flight_.fetch_sub(static_cast<int>(assembler.num_choices()));
  }
  live_changed_.notify_all();
}

std::vector<std::string> OpenAiService::abort_all_requests() {
  std::vector<std::shared_ptr<ResponseAssembler>> running;
  {
    std::lock_guard<std::mutex> lock(live_mutex_);
    for (const auto& [key, weak] : live_)
      if (auto alive = weak.lock()) running.push_back(std::move(alive));
  }
  std::vector<std::string> cut_off;
  for (const auto& assembler : running) {
    cut_off.push_back(assembler->id());
    assembler->abort_all();
  }
  return cut_off;
}

bool OpenAiService::submit_unless_paused(GenerateRequest request, EngineClient::OutputSink sink) {
  std::shared_lock<std::shared_mutex> lock(pause_mutex_);
  if (paused_.load()) return false;
  engine_.submit(std::move(request), std::move(sink));
  return true;
}

std::vector<std::string> OpenAiService::pause() {
  {
    std::unique_lock<std::shared_mutex> lock(pause_mutex_);
    if (paused_.exchange(true)) return {};
  }
  std::vector<std::string> aborted = abort_all_requests();
  log_info("paused (POST /v1/pause): new requests are refused; aborted ", aborted.size(), " request(s) in flight");
  return aborted;
}

void OpenAiService::resume() {
  std::unique_lock<std::shared_mutex> lock(pause_mutex_);
  if (paused_.exchange(false)) log_info("resumed (POST /v1/resume): requests are admitted again");
}

// FastDeploy's control answer: {"request_id": "control-…", "status": "success",
// "error_message": "Success", "result": null, or {"is_paused": …} for is_paused}.
HttpResponse OpenAiService::control_response(const char* method) {
  ordered_json result = nullptr;
  if (std::string_view(method) == "pause") pause();
  else if (std::string_view(method) == "resume") resume();
  else result = {{"is_paused", paused()}};
  ordered_json body = {{"request_id", "control-" + random_hex(16)},
                       {"status", "success"},
                       {"error_message", "Success"},
                       {"result", result}};
  HttpResponse response;
  response.body = dump_json(body);
  return response;
}

std::vector<std::string> OpenAiService::shutdown(std::chrono::milliseconds wait) {
  {
    std::lock_guard<std::mutex> lock(live_mutex_);
    shutting_down_ = true;
  }
  workers_.reset();  // requests still queued are answered 503 by their responders' drop
  media_workers_.reset();
  std::vector<std::string> cut_off = abort_all_requests();
  std::unique_lock<std::mutex> lock(live_mutex_);
  if (!live_changed_.wait_for(lock, wait, [&] { return live_.empty(); }))
    log_warning(live_.size(), " request(s) did not finish within ", wait.count(), " ms of being aborted");
  return cut_off;
}

std::vector<std::vector<int32_t>> OpenAiService::prompts_for(const OpenAiRequest& request, std::string& rendered,
                                                             std::shared_ptr<const MultimodalPrompt>& multimodal) const {
  if (request.kind == ApiKind::kCompletion) {
    std::vector<std::vector<int32_t>> prompts = request.prompt_ids;
    for (const std::string& text : request.prompt_texts) check_prompt_bytes(text, "prompt");
    for (const std::string& text : request.prompt_texts) prompts.push_back(tokenizer_.encode(text));
    return prompts;
  }
  if (request.prompt_token_ids) return *request.prompt_token_ids;
  if (request.disable_chat_template) {
    const ordered_json& content = request.messages.at(0).contains("content") ? request.messages.at(0).at("content") : ordered_json();
    if (!content.is_string()) invalid_field("messages", "with disable_chat_template, messages[0].content must be the prompt string");
    rendered = content.get<std::string>();
    check_prompt_bytes(rendered, "messages");
    return {tokenizer_.encode(rendered)};
  }
  // Images first: a bad one is refused before any template work, and the template only
  // runs for requests whose media are all readable.
  const std::vector<MediaItem> media = collect_media(request.messages, config_.multimodal, vision_ != nullptr);
  std::vector<EncodedVisual> encoded;
  int64_t budget = config_.engine.max_model_len - 1;  // tokens the items may still take
  for (const MediaItem& item : media) {
    try {
      encoded.push_back(vision_->encode(item, config_.multimodal, budget));
      budget -= visual_token_count(encoded.back().grid);
    } catch (const Error& error) {
      invalid_field(item.field, item.field + ": " + error.what());
    }
  }
  ChatTemplateInputs inputs;
  inputs.messages = request.messages;
  inputs.tools = request.tools;
  inputs.extra = request.chat_template_kwargs;
  // ernie_x1 models always think (FastDeploy turns enable_thinking on for this parser).
  // ERNIE-4.5-VL thinks unless asked not to (FastDeploy's default_thinking for the VL models).
  if ((config_.reasoning_parser == ReasoningParser::kErnieX1 || model_.vl) && !inputs.extra.contains("enable_thinking"))
    inputs.extra["enable_thinking"] = true;
  if (request.chat_template_kwargs.contains("add_generation_prompt") &&
      request.chat_template_kwargs.at("add_generation_prompt").is_boolean())
    inputs.add_generation_prompt = request.chat_template_kwargs.at("add_generation_prompt").get<bool>();
  // A request's template is code from the client: its render is bounded in time and in
  // size (no prompt longer than max_prompt_bytes_ could be served anyway).
  ChatTemplateLimits limits;
  limits.max_output_bytes = max_prompt_bytes_;
  limits.max_string_bytes = max_prompt_bytes_;
  try {
    if (!request.chat_template.empty()) {
      rendered = ChatTemplate(request.chat_template, special_token_strings(tokenizer_)).render(inputs, limits);
    } else {
      if (!chat_template_)
        invalid_field("messages", "this model has no chat template; start the server with --chat-template or send "
                                  "disable_chat_template");
      rendered = chat_template_->render(inputs, limits);
    }
  } catch (const Error& error) {
    invalid_field(request.chat_template.empty() ? "messages" : "chat_template",
                  std::string("the chat template could not be rendered: ") + error.what());
  }
  check_prompt_bytes(rendered, "messages");
  if (media.empty()) return {tokenizer_.encode(rendered)};
  std::vector<int32_t> tokens = tokenize_with_media(rendered, tokenizer_, media, encoded, model_.vl->im_patch_id);
  multimodal = make_multimodal_prompt(tokens, model_.vl->im_patch_id, model_.hidden_size, std::move(encoded));
  return {std::move(tokens)};
}

int OpenAiService::settle_logprob_count(const char* field, int count) const {
  const int vocab = model_.vocab_size;
  const int most = config_.max_logprobs == -1 ? vocab : std::min(config_.max_logprobs, vocab);
  if (count == -1) {
    if (most < vocab)
      invalid_field(field, "The requested value of (" + std::to_string(vocab) + ") for " + field +
                               " (-1) exceeds the maximum allowed value of (" + std::to_string(most) + ") (--max-logprobs)");
    return vocab;
  }
  if (count > most)
    invalid_field(field, "Number of " + std::string(field) + " requested (" + std::to_string(count) +
                             ") exceeds maximum allowed value (" + std::to_string(most) + ") (--max-logprobs)");
  return count;
}

void OpenAiService::finalize_params(OpenAiRequest& request, size_t prompt_length) const {
  const int64_t max_model_len = config_.engine.max_model_len;
  const int64_t length = static_cast<int64_t>(prompt_length);
  if (length == 0) invalid_field(request.kind == ApiKind::kChat ? "messages" : "prompt", "the prompt is empty");
  if (length + request.params.min_tokens >= max_model_len)
    invalid_field(request.kind == ApiKind::kChat ? "messages" : "prompt",
                  "Input text is too long, input_ids_len (" + std::to_string(length) + ") + min_tokens(" +
                      std::to_string(request.params.min_tokens) + ") >= max_model_len(" + std::to_string(max_model_len) + ")");
  const int64_t room = max_model_len - length;
  if (request.max_tokens && *request.max_tokens >= max_model_len)
    invalid_field("max_tokens", "max_tokens must be in [1, max_model_len) = [1, " + std::to_string(max_model_len) +
                                    "), got " + std::to_string(*request.max_tokens));
  // Absent: all the room left; larger than the room: clipped (FastDeploy does both).
  request.params.max_tokens = static_cast<int>(std::min<int64_t>(request.max_tokens.value_or(room), room));
  // FastDeploy's messages, with the flag to use.
  if (request.logprobs && !config_.enable_logprob)
    invalid_field("logprobs", "Logprobs is disabled, please enable it in startup config (--enable-logprob).");
  if (request.prompt_logprobs && !config_.enable_logprob)
    invalid_field("prompt_logprobs", "`enable_logprob` is disabled, please enable it in startup config (--enable-logprob).");
  if (request.logprobs)
    request.params.logprobs = settle_logprob_count(request.kind == ApiKind::kChat ? "top_logprobs" : "logprobs",
                                                   request.top_logprobs);
  if (request.prompt_logprobs)
    request.params.prompt_logprobs = settle_logprob_count("prompt_logprobs", *request.prompt_logprobs);
  for (const std::string& word : request.bad_words) {
    // FastDeploy keeps the words that are one token, as written or after a space.
    for (const std::string& form : {word, " " + word}) {
      const std::vector<int32_t> ids = tokenizer_.encode(form);
      if (ids.size() == 1) request.params.bad_words_token_ids.push_back(ids[0]);
    }
  }
  try {
    validate_sampling_params(request.params, model_.vocab_size);
  } catch (const Error& error) {
    // The sampler's messages start with the field they are about ("top_p must lie ...").
    const std::string message = error.what();
    const size_t end = message.find_first_not_of("abcdefghijklmnopqrstuvwxyz_");
    throw ApiException{{400, message, "invalid_request_error", message.substr(0, end)}};
  }
}

namespace {

// Runs `body`, answering the client with the error when it throws.
template <typename Body>
void answering_errors(HttpResponder& responder, const Body& body) {
  try {
    body();
  } catch (const ApiException& exception) {
    log_info("request rejected (", exception.error.status, "): ", exception.error.message);
    responder.respond(json_error_response(exception.error));
  } catch (const std::exception& exception) {
    log_warning("request failed: ", exception.what());
    responder.respond(json_error_response({500, "internal error", "server_error", ""}));
  }
}

}  // namespace

void OpenAiService::handle_generation(ApiKind kind, const HttpRequest& http, std::shared_ptr<HttpResponder> responder,
                                      Clock::time_point arrival) {
  metrics_.request_received();
  answering_errors(*responder, [&] {
    OpenAiRequest request = parse_openai_request(kind, http.body, defaults_);
    // As FastDeploy: any name reaches the loaded model (clients often send a fixed one),
    // unless --served-model-name says which names the server answers to.
    if (config_.model_name_served && !request.model.empty() && request.model != config_.model_name &&
        request.model != "default")
      throw ApiException{{404, "The model `" + request.model + "` does not exist; this server serves `" +
                                   config_.model_name + "`", "invalid_request_error", "model"}};
    // Images and video take seconds to minutes to encode: such requests continue on
    // workers of their own, so they never hold up the text requests behind them.
    if (media_workers_ && kind == ApiKind::kChat &&
        !collect_media(request.messages, config_.multimodal, true).empty()) {
      std::function<void()> task = [self = shared_from_this(), kind, request = std::move(request), responder, arrival] {
        answering_errors(*responder, [&] { self->generate(kind, request, responder, arrival); });
      };
      if (!media_workers_->try_post(task))
        throw ApiException{{503, "too many requests with images or video are waiting to be encoded; retry later",
                            "server_error", ""}};
      return;
    }
    generate(kind, request, responder, arrival);
  });
}

std::shared_ptr<const structured::CompiledConstraint> OpenAiService::compile_output_constraint(
    const OpenAiRequest& request) const {
  if (!request.constraint && !request.tool_choice_required) return nullptr;
  const std::string field = request.constraint ? request.constraint_field : "tool_choice";
  if (!config_.guided_decoding)
    invalid_field(field, "\"" + field + "\" needs structured output, which this server runs without "
                         "(--guided-decoding-backend off); start it with --guided-decoding-backend auto");
  structured::ConstraintSpec spec;
  if (request.constraint) {
    spec = *request.constraint;
  } else {
    if (config_.tool_call_parser == ToolCallParser::kNone)
      invalid_field("tool_choice", "tool_choice \"required\" or a named function needs --tool-call-parser ernie_x1, "
                                   "which defines the format of a tool call");
    // ernie_x1's format: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>.
    ordered_json calls = {{"min", 1}, {"max", request.tool_choice_function.empty() ? -1 : 1}, {"structures", ordered_json::array()}};
    for (const ordered_json& tool : request.tools) {
      const ordered_json& function = tool.at("function");
      const std::string name = function.at("name").get<std::string>();
      if (!request.tool_choice_function.empty() && name != request.tool_choice_function) continue;
      ordered_json parameters = function.contains("parameters") && !function.at("parameters").is_null()
                                    ? function.at("parameters")
                                    : ordered_json{{"type", "object"}};
      ordered_json call_schema = {{"type", "object"},
                                  {"properties", {{"name", {{"const", name}}}, {"arguments", std::move(parameters)}}},
                                  {"required", {"name", "arguments"}}};
      calls["structures"].push_back({{"begin", std::string(kToolCallStart) + "\n"},
                                     {"schema", std::move(call_schema)},
                                     {"end", "\n" + std::string(kToolCallEnd)}});
    }
    spec = {.kind = structured::ConstraintSpec::Kind::kToolCalls, .text = calls.dump()};
  }
  spec.any_whitespace = config_.guided_any_whitespace;
  try {
    return structured::compile(spec);
  } catch (const Error& error) {
    invalid_field(field, "\"" + field + "\" cannot be followed: " + error.what());
  }
}

void OpenAiService::generate(ApiKind kind, OpenAiRequest request, const std::shared_ptr<HttpResponder>& responder,
                             Clock::time_point arrival) {
  std::string rendered;
  std::shared_ptr<const MultimodalPrompt> multimodal;
  std::vector<std::vector<int32_t>> prompts = prompts_for(request, rendered, multimodal);
  // Checked here, not only by the engine, so a stream never starts for a bad prompt.
  try {
    for (const auto& prompt : prompts) validate_prompt_tokens(prompt, model_.vocab_size);
  } catch (const Error& error) {
    invalid_field(kind == ApiKind::kChat ? "prompt_token_ids" : "prompt", error.what());
  }
  size_t longest = 0;
  for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
  for (const auto& prompt : prompts)
    if (prompt.empty()) finalize_params(request, 0);  // reports the empty prompt
  finalize_params(request, longest);
  // The response id is the client's request_id (prefixed as FastDeploy does) or a
  // random one; engine ids are always our own and random, so no client can name, and
  // abort, another client's request.
  const std::string prefix = kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-";
  const std::string id = request.request_id.empty()                  ? prefix + random_hex(16)
                         : request.request_id.rfind(prefix, 0) == 0 ? request.request_id
                                                                     : prefix + request.request_id;
  const auto constraint = compile_output_constraint(request);
  auto assembler = std::make_shared<ResponseAssembler>(shared_from_this(), request, id, config_.model_name, responder, arrival);
  assembler->constraint = constraint;
  const std::string engine_id = random_hex(16);
  const size_t n = static_cast<size_t>(request.n);
  if (prompts.size() * n > kMaxPromptsPerRequest)
    invalid_field("n", std::to_string(prompts.size()) + " prompts × n " + std::to_string(n) + " = " +
                           std::to_string(prompts.size() * n) + " choices; the limit is " +
                           std::to_string(kMaxPromptsPerRequest) + " per request");
  // Choice k is prompt k / n, as OpenAI numbers them.
  for (size_t k = 0; k < prompts.size() * n; ++k) {
    const size_t i = k / n;
    ResponseAssembler::Choice choice;
    choice.engine_id = engine_id + "-" + std::to_string(k);
    choice.prompt_ids = prompts[i];
    choice.multimodal = multimodal;
    choice.seed_offset = k % n;
    if (k % n != 0 && config_.engine.prefix_caching) choice.after = k - k % n;
    // The prompt as text, for echo and for prompt_tokens: what the client sent or the
    // template rendered, else the decoded ids.
    if (request.echo || request.return_token_ids) {
      if (kind == ApiKind::kCompletion && i < request.prompt_texts.size()) choice.prompt_text = request.prompt_texts[i];
      else if (kind == ApiKind::kChat && !rendered.empty()) choice.prompt_text = rendered;
      else choice.prompt_text = tokenizer_.decode(prompts[i], false);
    }
    const bool parse_tool_calls = config_.tool_call_parser != ToolCallParser::kNone && !request.tools.is_null() && !request.tool_choice_none;
    if (kind == ApiKind::kChat && (config_.reasoning_parser != ReasoningParser::kNone || parse_tool_calls)) {
      const OutputSection start = initial_section(config_.reasoning_parser, prompts[i], markers_);
      choice.starts_in_reasoning = start == OutputSection::kReasoning;
      choice.parser = std::make_unique<OutputParser>(config_.reasoning_parser, parse_tool_calls, start);
    }
    assembler->choices().push_back(std::move(choice));
  }
  admit(assembler);
  assembler->start();
}

}  // namespace ernie
