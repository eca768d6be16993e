// `ernie serve`'s command line: FastDeploy's flags and environment variables with the
// same names and meanings. Every flag of FastDeploy's api_server is accepted; one that
// means nothing on a CPU, or that a later part of ernie.cpp implements, says so in a log
// line when given (never silently ignored). A misspelt flag is refused with the closest.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "disagg/disaggregation.h"
#include "engine/engine_config.h"
#include "serving/multimodal_input.h"
#include "serving/output_parser.h"

namespace ernie {

struct ServeConfig {
  std::string model_dir;              // resolved local directory
  std::string model_name;             // --served-model-name, else --model as given
  bool model_name_served = false;     // --served-model-name given: requests must name it
  std::string tokenizer_dir;          // --tokenizer, else the model directory
  std::string host = "0.0.0.0";
  int port = 8000;
  std::optional<int> metrics_port;    // unset: /metrics on the main port
  int max_concurrency = 512;          // in-flight requests; more get 429
  std::vector<std::string> api_keys;  // --api-key (repeatable) or FD_API_KEY (comma-separated)
  std::string chat_template;          // --chat-template: the template text (a file's content or the string)
  bool enable_logprob = false;        // --enable-logprob
  bool webui = true;                  // the chat page at / (off with --no-webui)
  int max_logprobs = 20;
  ReasoningParser reasoning_parser = ReasoningParser::kNone;  // --reasoning-parser
  ToolCallParser tool_call_parser = ToolCallParser::kNone;    // --tool-call-parser
  bool guided_decoding = true;        // --guided-decoding-backend other than off
  bool guided_any_whitespace = true;  // off with --guided-decoding-disable-any-whitespace
  std::string log_dir = "log";        // FD_LOG_DIR
  int graceful_shutdown_seconds = 30; // --timeout-graceful-shutdown (0 in FastDeploy = unbounded; we bound it)
  size_t threads = 0;
  MultimodalOptions multimodal;       // --limit-mm-per-prompt, --mm-processor-kwargs (ERNIE-4.5-VL)
  EngineConfig engine;
  disagg::DisaggregationConfig disaggregation;  // --splitwise-role and its ports
  std::string router;                 // --router HOST:PORT: register with `ernie router`; empty: none
};

// Parses argv[first..] (after `ernie serve`) and the environment. Returns nullopt when
// --help was printed.
std::optional<ServeConfig> parse_serve_args(int argc, char** argv, int first);

// The model `ernie serve` runs without --model: the small trained dense model in models/.
inline constexpr const char* kDefaultModelName = "ernie-4.5-kjv-dense";
// Its directory; throws ernie::Error naming where it looked when it is absent.
std::string default_model_dir();


}  // namespace ernie
