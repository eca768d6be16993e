// The OpenAI-compatible routes on top of the engine: /v1/chat/completions,
// /v1/completions, /v1/models, /health, /ping, /metrics. Requests are parsed and
// templated on an IO thread, submitted to the EngineClient, and answered from the engine
// thread's outputs (a JSON body at the end, or SSE chunks as tokens arrive). Nothing
// here blocks an IO thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "engine/engine_client.h"
#include "model/generation_config.h"
#include "serving/http_server.h"
#include "serving/metrics.h"
#include "serving/openai_protocol.h"
#include "serving/output_parser.h"
#include "serving/serve_config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ernie {

class OpenAiService : public std::enable_shared_from_this<OpenAiService> {
 public:
  // Throws ernie::Error when a configured parser's markers are not single tokens.
  OpenAiService(const ServeConfig& config, EngineClient& engine, const Tokenizer& tokenizer,
                const ModelConfig& model, const GenerationConfig& generation);

  // Routes one HTTP request of the main port.
  void handle(HttpRequest request, std::shared_ptr<HttpResponder> responder);
  // The metrics port serves only /metrics.
  void handle_metrics_port(HttpRequest request, std::shared_ptr<HttpResponder> responder);

  int in_flight() const { return in_flight_.load(); }
  ServingMetrics& metrics() { return metrics_; }

 private:
  friend class ResponseAssembler;
  void handle_generation(ApiKind kind, const HttpRequest& request, std::shared_ptr<HttpResponder> responder);
  std::vector<std::vector<int32_t>> prompts_for(const OpenAiRequest& request, std::string& rendered_prompt) const;
  void finalize_params(OpenAiRequest& request, size_t prompt_length) const;
  bool authorized(const HttpRequest& request) const;
  std::string metrics_text() const;
  HttpResponse models_response() const;

  ServeConfig config_;
  EngineClient& engine_;
  const Tokenizer& tokenizer_;
  const ModelConfig& model_;
  RequestDefaults defaults_;
  std::unique_ptr<ChatTemplate> chat_template_;
  ServingMetrics metrics_;
  MarkerTokens markers_;
  std::vector<int32_t> eos_token_ids_;
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_id_{1};
  int64_t created_;
};

HttpResponse json_error_response(const ApiError& error);

}  // namespace ernie
