// The OpenAI-compatible routes on top of the engine: /v1/chat/completions,
// /v1/completions, /v1/models, /health, /ping, /metrics. Generation requests are parsed,
// templated and tokenized on a small worker pool (never on an IO thread, so /health
// answers at once whatever a request asks for), submitted to the EngineClient, and
// answered from the engine thread's outputs (a JSON body at the end, or SSE chunks as
// tokens arrive).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_set>

#include "engine/engine_client.h"
#include "model/generation_config.h"
#include "serving/http_server.h"
#include "serving/metrics.h"
#include "serving/multimodal_input.h"
#include "serving/openai_protocol.h"
#include "serving/output_parser.h"
#include "serving/serve_config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/worker_pool.h"

namespace ernie {

class ResponseAssembler;

class OpenAiService : public std::enable_shared_from_this<OpenAiService> {
 public:
  // Throws ernie::Error when a configured parser's markers are not single tokens.
  // `model` is read for its config, and for ERNIE-4.5-VL encodes the requests' images.
  OpenAiService(const ServeConfig& config, EngineClient& engine, const Tokenizer& tokenizer, LanguageModel& model,
                const GenerationConfig& generation);

  // Routes one HTTP request of the main port.
  void handle(HttpRequest request, std::shared_ptr<HttpResponder> responder);
  // The metrics port serves only /metrics.
  void handle_metrics_port(HttpRequest request, std::shared_ptr<HttpResponder> responder);

  // Prompts being generated (each prompt of a batch counts).
  int in_flight() const { return in_flight_.load(); }
  ServingMetrics& metrics() { return metrics_; }

  // Aborts every request in flight; returns their response ids. For the end of the
  // shutdown grace period, while their clients are still connected.
  std::vector<std::string> abort_all_requests();
  // After the HTTP server stopped: no more requests start, anything still running is
  // aborted, and this waits (up to `wait`) until every request has finished. Returns
  // the response ids it aborted. Engine callbacks stay safe afterwards: each request
  // keeps the service alive until its last output.
  std::vector<std::string> shutdown(std::chrono::milliseconds wait);

  // FastDeploy's /v1/pause: new requests are refused (503) and every request in flight
  // is aborted (finish_reason "abort", the text so far kept); returns their response ids.
  // /v1/resume admits requests again. Both may be repeated.
  std::vector<std::string> pause();
  void resume();
  bool paused() const { return paused_.load(); }

 private:
  friend class ResponseAssembler;
  void handle_generation(ApiKind kind, const HttpRequest& request, std::shared_ptr<HttpResponder> responder,
                         std::chrono::steady_clock::time_point arrival);
  // A parsed request from its prompt to the engine; throws ApiException for a bad one.
  void generate(ApiKind kind, OpenAiRequest request, const std::shared_ptr<HttpResponder>& responder,
                std::chrono::steady_clock::time_point arrival);
  // Registers a request about to start; throws ApiException (429 over --max-concurrency,
  // 400 for a client request_id already in flight).
  void admit(const std::shared_ptr<ResponseAssembler>& assembler);
  void forget(const ResponseAssembler& assembler);  // its final output went out
  // Hands a choice to the engine unless the service is paused (false then). Holding the
  // pause lock shared while submitting means a pause either sees the request in the
  // engine, and aborts it, or this sees the pause.
  bool submit_unless_paused(GenerateRequest request, EngineClient::OutputSink sink);
  HttpResponse control_response(const char* method);  // /v1/pause, /v1/resume, /v1/is_paused
  void check_prompt_bytes(const std::string& text, const char* field) const;
  // The prompts' tokens; for a chat request with images, also their encoded form.
  std::vector<std::vector<int32_t>> prompts_for(const OpenAiRequest& request, std::string& rendered_prompt,
                                                std::shared_ptr<const MultimodalPrompt>& multimodal) const;
  void finalize_params(OpenAiRequest& request, size_t prompt_length) const;
  // The request's output constraint (response_format, guided_*, structural_tag, forced
  // tool calls) compiled; null when it has none. Throws ApiException (400) naming the field.
  std::shared_ptr<const structured::CompiledConstraint> compile_output_constraint(const OpenAiRequest& request) const;
  // A logprob count (-1: the vocabulary) within --max-logprobs, or a 400 naming `field`.
  int settle_logprob_count(const char* field, int count) const;
  bool authorized(const HttpRequest& request) const;
  std::string metrics_text() const;
  HttpResponse models_response() const;

  ServeConfig config_;
  EngineClient& engine_;
  const Tokenizer& tokenizer_;
  const ModelConfig& model_;
  std::unique_ptr<VisionFrontend> vision_;      // ERNIE-4.5-VL
  std::unique_ptr<WorkerPool> media_workers_;  // requests with images or video, off the parsing workers
  RequestDefaults defaults_;
  std::unique_ptr<ChatTemplate> chat_template_;
  ServingMetrics metrics_;
  MarkerTokens markers_;
  std::vector<int32_t> eos_token_ids_;
  size_t max_prompt_bytes_ = 0;  // longer text cannot fit --max-model-len tokens
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_serial_{1};  // fairness groups
  int64_t created_;

  mutable std::mutex live_mutex_;
  std::condition_variable live_changed_;
  std::map<const ResponseAssembler*, std::weak_ptr<ResponseAssembler>> live_;
  std::unordered_set<std::string> client_ids_;  // client request_ids in flight
  bool shutting_down_ = false;
  std::shared_mutex pause_mutex_;
  std::atomic<bool> paused_{false};
  // Declared last: destroyed (its threads joined) before anything they use.
  std::unique_ptr<WorkerPool> workers_;
};

HttpResponse json_error_response(const ApiError& error);

}  // namespace ernie
