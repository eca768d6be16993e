#include "serving/serve_config.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/args.h"
#include "cli/engine_setup.h"
#include "cli/model_loading.h"
#include "serving/output_parser.h"
#include "util/error.h"
#include "util/json_flag.h"
#include "util/log.h"
#include "util/text_file.h"

namespace ernie {
namespace {

namespace fs = std::filesystem;

// How the server treats a FastDeploy flag it accepts.
enum class FlagRole {
  kImplemented,  // parsed into ServeConfig
  kCpuMeaning,   // has no meaning on a CPU: a log line says what happens instead
  kLater,        // implemented by a later part of ernie.cpp: a log line says so
  kRefused,      // a design ernie.cpp does not follow: the server refuses to start, saying what to use
};

struct FlagInfo {
  OptionSpec spec;
  FlagRole role;
  std::string note;  // the log line for kCpuMeaning / kLater
};

FlagInfo flag(std::string name, std::string value, std::string help, std::string fallback = "") {
  return {{std::move(name), std::move(value), std::move(help), std::move(fallback)}, FlagRole::kImplemented, ""};
}
FlagInfo cpu(std::string name, std::string value, std::string note) {
  return {{std::move(name), std::move(value), "accepted for FastDeploy compatibility: " + note, ""}, FlagRole::kCpuMeaning,
          std::move(note)};
}
FlagInfo later(std::string name, std::string value, std::string note) {
  return {{std::move(name), std::move(value), "accepted; " + note, ""}, FlagRole::kLater, std::move(note)};
}
FlagInfo refused(std::string name, std::string value, std::string note) {
  return {{std::move(name), std::move(value), "refused: " + note, ""}, FlagRole::kRefused, std::move(note)};
}

const char* const kSplitwiseSchedulerNote =
    "FastDeploy's Redis \"splitwise\" scheduler is not supported; start `ernie router` and give each prefill and "
    "decode instance --router HOST:PORT (docs/disaggregation.md)";

std::vector<FlagInfo> serve_flags() {
  std::vector<FlagInfo> flags = {
      flag("model", "DIR|NAME",
           "checkpoint directory, or a hub name found in the local Hugging Face cache (default: the small trained "
           "model that ships in models/" + std::string(kDefaultModelName) + ")"),
      flag("served-model-name", "NAME", "model name in /v1/models and responses (default: --model as given)"),
      flag("tokenizer", "DIR", "tokenizer directory (default: the model directory)"),
      flag("host", "HOST", "address to bind", "0.0.0.0"),
      flag("port", "PORT", "HTTP port of the OpenAI API", "8000"),
      flag("metrics-port", "PORT", "serve /metrics on this port too (it is always on the main port)"),
      flag("max-concurrency", "N", "requests in flight at once; more get HTTP 429", "512"),
      flag("max-waiting-time", "SECONDS",
           "refuse a request the engine has not admitted within this time (503, timeout_error); -1: no limit", "-1"),
      flag("api-key", "KEY", "require Authorization: Bearer KEY (repeatable; also FD_API_KEY, comma-separated)"),
      flag("chat-template", "FILE|TEXT", "Jinja chat template replacing the model's"),
      flag("enable-logprob", "", "allow requests to ask for logprobs"),
      flag("no-webui", "", "do not serve the built-in chat page at / (docs/webui.md)"),
      flag("max-logprobs", "N", "most top_logprobs / prompt_logprobs a request may ask for; -1: the vocabulary size", "20"),
      flag("reasoning-parser", "NAME", "ernie_x1 (alias ernie-x1) or ernie-45-vl"),
      flag("tool-call-parser", "NAME", "ernie_x1"),
      flag("ips", "IP,IP,...",
           "with --tensor-parallel-size: the machines the ranks run on, the master first (given to mpirun as -H; "
           "docs/parallelism.md)"),
      flag("timeout-graceful-shutdown", "SECONDS", "on SIGINT/SIGTERM, wait this long for in-flight requests", "30"),
      cpu("workers", "N", "one process serves every connection with asynchronous IO"),
      cpu("use-cudagraph", "", "on anyway: the CPU counterpart of a captured graph - a persistent thread pool and step buffers planned once and reused, so a step starts no thread and allocates nothing - is always used"),
      cpu("graph-optimization-config", "JSON", "the CPU engine has no graph capture; the JSON is checked and otherwise unused"),
      flag("engine-worker-queue-port", "PORT",
           "--splitwise-role prefill: where decode instances send tasks and get keys and values back (TCP, and a "
           "Unix socket for decode instances on this machine); other roles open no worker queue port"),
      cpu("cache-queue-port", "PORT", "KV cache blocks live in this process's memory; no cache transfer process runs"),
      cpu("load-choices", "NAME", "both PT and Paddle checkpoint layouts are read natively by one loader"),
      cpu("use-warmup", "N", "the first request pages the weights in; no separate warm-up run"),
      cpu("enable-mm", "", "deprecated in FastDeploy; the architecture is read from config.json"),
      cpu("disable-custom-all-reduce", "", "no GPU all-reduce kernels on a CPU"),
      cpu("enable-custom-all-reduce", "", "no GPU all-reduce kernels on a CPU"),
      cpu("controller-port", "PORT", "no separate controller app runs"),
      cpu("scheduler-name", "NAME", "one local scheduler runs in the engine"),
      cpu("data-parallel-size", "N", "one engine per process; run several servers behind a load balancer for data parallelism"),
      cpu("lm_head-fp32", "", "the vocabulary projection already accumulates in fp32"),
      cpu("moe-gate-fp32", "", "the MoE router already runs in fp32"),
      cpu("model-loader-extra-config", "JSON", "checkpoints are memory-mapped; the JSON is checked and otherwise unused"),
      flag("splitwise-role", "ROLE",
           "mixed, or prefill / decode for prefill/decode disaggregation (docs/disaggregation.md): clients talk to "
           "the decode instance, which has its prompts computed by the prefill instances",
           "mixed"),
      flag("innode-prefill-ports", "PORT,...",
           "--splitwise-role decode: the prefill instances' --engine-worker-queue-port (PORT on this machine, or "
           "HOST:PORT)"),
      flag("router", "HOST:PORT",
           "register with `ernie router` at HOST:PORT (every second); a decode instance takes its prefill instances "
           "from it"),
      cpu("cache-transfer-protocol", "PROTOCOLS",
          "keys and values move over ZeroMQ: a Unix socket on one machine, TCP between machines"),
      cpu("rdma-comm-ports", "PORTS", "no RDMA: keys and values move over TCP between machines"),
      cpu("pd-comm-port", "PORT", "a decode instance reaches its prefill instances at their --engine-worker-queue-port"),
      refused("scheduler-host", "HOST", kSplitwiseSchedulerNote),
      refused("scheduler-port", "PORT", kSplitwiseSchedulerNote),
      refused("scheduler-topic", "TOPIC", kSplitwiseSchedulerNote),
      refused("scheduler-ttl", "SECONDS", kSplitwiseSchedulerNote),
      refused("scheduler-password", "PASSWORD", kSplitwiseSchedulerNote),
      refused("scheduler-db", "N", kSplitwiseSchedulerNote),
      flag("limit-mm-per-prompt", "JSON", "most images and videos in one prompt, e.g. '{\"image\": 100, \"video\": 100}'",
           "{\"image\": 16, \"video\": 2}"),
      flag("mm-processor-kwargs", "JSON",
           "image/video preprocessing: image_min_pixels, image_max_pixels, video_min_pixels, video_max_pixels"),
      flag("guided-decoding-backend", "NAME",
           "structured output (response_format, guided_*, structural_tag, forced tool calls): auto = ernie.cpp's own "
           "grammar engine; xgrammar and guidance are accepted as its aliases; off refuses such requests",
           "auto"),
      flag("guided-decoding-disable-any-whitespace", "",
           "JSON constraints allow no free whitespace: compact JSON with one space after ':' and ','"),
      later("dynamic-load-weight", "", "weight hot-swapping is not supported"),
  };
  for (OptionSpec& spec : engine_option_specs()) flags.push_back({std::move(spec), FlagRole::kImplemented, ""});
  for (FlagInfo& info : flags)
    if (info.spec.name == "api-key") info.spec.repeatable = true;
  return flags;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}


void check_choice(const std::string& flag_name, const std::string& value, const std::vector<std::string>& valid) {
  std::string listed;
  for (const std::string& option : valid) {
    if (option == value) return;
    listed += (listed.empty() ? "" : ", ") + option;
  }
  fail("--", flag_name, " \"", value, "\" is not known (valid: ", listed, ")");
}

// Checks the values of accepted-but-unimplemented flags, so a typo is caught today.
void check_flag_value(const std::string& name, const std::string& value) {
  if (name == "graph-optimization-config" || name == "model-loader-extra-config") parse_json_object_flag(name, value);
  if (name == "load-choices") check_choice(name, value, {"default", "default_v1", "new_loader", "dummy"});
  if (name == "scheduler-name" && value == "splitwise") fail("--scheduler-name splitwise: ", kSplitwiseSchedulerNote);
}

std::string read_template_argument(const std::string& value) {
  return fs::is_regular_file(value) ? read_text_file(value) : value;
}

// FastDeploy's environment variables that mean nothing here, with what happens instead.
void announce_environment() {
  const std::pair<const char*, const char*> cpu_only[] = {
      {"CUDA_VISIBLE_DEVICES", "this server runs on the CPU; no GPU is used"},
      {"FD_ATTENTION_BACKEND", "one CPU attention kernel is used"},
      {"INFERENCE_MSG_QUEUE_ID", "the engine runs inside the server process; no message queue is opened"},
      {"FD_MOE_BACKEND", "one CPU MoE path is used"},
      {"FD_USE_MACHETE", "no GPU GEMM kernels on a CPU"},
      {"FD_USE_DEEP_GEMM", "no GPU GEMM kernels on a CPU"},
  };
  for (const auto& [name, note] : cpu_only)
    if (std::getenv(name) != nullptr) log_info(name, " is set: ", note);
}

disagg::DisaggregationConfig parse_disaggregation(const ParsedArgs& args, const std::string& host,
                                                  const EngineConfig& engine) {
  using disagg::Role;
  disagg::DisaggregationConfig config;
  const std::string role = args.get("splitwise-role");
  check_choice("splitwise-role", role, {"mixed", "prefill", "decode"});
  config.role = role == "prefill" ? Role::kPrefill : role == "decode" ? Role::kDecode : Role::kMixed;
  config.host = host;
  if (args.has("engine-worker-queue-port")) {
    const int64_t port = args.get_int("engine-worker-queue-port");
    if (port < 1 || port > 65535) fail("--engine-worker-queue-port must lie in 1..65535, got ", port);
    config.engine_worker_queue_port = static_cast<int>(port);
    if (config.role != Role::kPrefill)
      log_info("--engine-worker-queue-port ", port, ": only a prefill instance opens it; the ", role,
               " engine runs inside the server process");
  }
  if (args.has("innode-prefill-ports")) {
    if (config.role != Role::kDecode)
      fail("--innode-prefill-ports names the prefill instances of a decode instance; add --splitwise-role decode");
    std::stringstream entries(args.get("innode-prefill-ports"));
    for (std::string entry; std::getline(entries, entry, ',');)
      config.decode.prefill_endpoints.push_back(disagg::prefill_endpoint(entry));
  }
  if (config.role == Role::kPrefill && config.engine_worker_queue_port == 0)
    fail("--splitwise-role prefill needs --engine-worker-queue-port: the port decode instances send tasks to");
  if (config.role == Role::kDecode && config.decode.prefill_endpoints.empty() && !args.has("router"))
    fail("--splitwise-role decode needs --innode-prefill-ports (the prefill instances' --engine-worker-queue-port) or "
         "--router (the `ernie router` they register with)");
  if (config.role != Role::kMixed && engine.tensor_parallel_size > 1)
    fail("--splitwise-role ", role, " with --tensor-parallel-size ", engine.tensor_parallel_size,
         " is not supported: keys and values move between single-process instances");
  if (config.role != Role::kMixed && engine.speculative.mtp_drafts() > 0)
    fail("--splitwise-role ", role, " with --speculative-config method \"mtp\" is not supported: the MTP head's "
         "keys and values of the prompt are not transferred; use method \"ngram\" (on the decode instance)");
  const std::string changeable = env_or("FD_PD_CHANGEABLE", "0");
  if (changeable != "0" && changeable != "1") fail("FD_PD_CHANGEABLE must be 0 or 1, got \"", changeable, "\"");
  config.decode.changeable = changeable == "1";
  const std::string timeout = env_or("ERNIE_PD_TRANSFER_TIMEOUT", "600");
  char* end = nullptr;
  const double seconds = std::strtod(timeout.c_str(), &end);
  if (end == timeout.c_str() || *end != '\0' || !(seconds > 0) || seconds > 86400)
    fail("ERNIE_PD_TRANSFER_TIMEOUT must be a number of seconds in (0, 86400], got \"", timeout, "\"");
  config.decode.transfer_timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  const std::string local = env_or("ERNIE_PD_LOCAL_PROMPT_TOKENS", "0");
  int64_t local_tokens = -1;
  const auto [local_end, local_error] = std::from_chars(local.data(), local.data() + local.size(), local_tokens);
  if (local_error != std::errc() || local_end != local.data() + local.size() || local_tokens < 0 ||
      local_tokens > 1000000000)
    fail("ERNIE_PD_LOCAL_PROMPT_TOKENS must be a whole number of tokens >= 0, got \"", local, "\"");
  config.local_prompt_tokens = local_tokens;
  return config;
}

}  // namespace

std::string default_model_dir() {
  // From the checkout the binary was built in, or from models/ below the working directory.
  const std::vector<std::filesystem::path> candidates = {std::filesystem::path("models") / kDefaultModelName,
                                                         std::filesystem::path(ERNIE_MODELS_DIR) / kDefaultModelName};
  for (const auto& candidate : candidates)
    if (std::filesystem::is_regular_file(candidate / "config.json")) return candidate.string();
  fail("--model was not given and the shipped model is missing (looked in ", candidates[0].string(), " and ",
       candidates[1].string(), "); point --model at an ERNIE 4.5 checkpoint directory");
}

std::optional<ServeConfig> parse_serve_args(int argc, char** argv, int first) {
  const std::vector<FlagInfo> flags = serve_flags();
  std::vector<OptionSpec> specs;
  for (const FlagInfo& info : flags) specs.push_back(info.spec);
  const ArgParser parser("ernie serve --model DIR [flags]",
                         "Serves the model behind an OpenAI-compatible HTTP API (FastDeploy's flags and meanings).",
                         specs);
  const ParsedArgs args = parser.parse(argc, argv, first);
  if (args.help_requested()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return std::nullopt;
  }

  for (const FlagInfo& info : flags) {
    if (info.role == FlagRole::kImplemented || !args.has(info.spec.name)) continue;
    if (info.role == FlagRole::kRefused) fail("--", info.spec.name, ": ", info.note);
    const std::string value = info.spec.value_name.empty() ? "" : args.get(info.spec.name);
    check_flag_value(info.spec.name, value);
    log_info("--", info.spec.name, value.empty() ? "" : " " + value, ": ", info.note);
  }
  announce_environment();

  ServeConfig config;
  if (args.has("model")) {
    config.model_dir = resolve_model_path(args.get("model"));
    config.model_name = args.get_optional("served-model-name").value_or(args.get("model"));
    config.model_name_served = args.has("served-model-name");
  } else {
    config.model_dir = default_model_dir();
    config.model_name = args.get_optional("served-model-name").value_or(kDefaultModelName);
    config.model_name_served = args.has("served-model-name");
    log_info("no --model: serving the shipped ", kDefaultModelName, " from ", config.model_dir);
  }
  config.tokenizer_dir = args.has("tokenizer") ? resolve_model_path(args.get("tokenizer")) : config.model_dir;
  config.host = args.get("host");
  const int64_t port = args.get_int("port");
  if (port < 0 || port > 65535) fail("--port must lie in 0..65535, got ", port);
  config.port = static_cast<int>(port);
  if (args.has("metrics-port")) {
    const int64_t metrics_port = args.get_int("metrics-port");
    if (metrics_port < 0 || metrics_port > 65535) fail("--metrics-port must lie in 0..65535, got ", metrics_port);
    if (metrics_port != port) config.metrics_port = static_cast<int>(metrics_port);
  }
  const int64_t concurrency = args.get_int("max-concurrency");
  if (concurrency < 1 || concurrency > 1000000) fail("--max-concurrency must be at least 1, got ", concurrency);
  config.max_concurrency = static_cast<int>(concurrency);
  config.api_keys = args.get_all("api-key");
  // An empty key would be matched by "Authorization: Bearer " with nothing after it:
  // almost certainly an unset shell variable, and no protection at all.
  for (const std::string& key : config.api_keys)
    if (key.empty()) fail("--api-key must not be empty (an unset variable?); give the key, or leave the flag out to serve without one");
  if (config.api_keys.empty()) {
    std::stringstream keys(env_or("FD_API_KEY", ""));
    for (std::string key; std::getline(keys, key, ',');)
      if (!key.empty()) config.api_keys.push_back(key);
  }
  if (args.has("chat-template")) config.chat_template = read_template_argument(args.get("chat-template"));
  config.enable_logprob = args.flag("enable-logprob");
  config.webui = !args.flag("no-webui");
  const double max_waiting = args.get_double("max-waiting-time");
  if (!(max_waiting > 0 || max_waiting == -1))
    fail("--max-waiting-time must be a number of seconds above 0, or -1 for no limit, got ", args.get("max-waiting-time"));
  const int64_t max_logprobs = args.get_int("max-logprobs");
  if (max_logprobs < -1 || max_logprobs > INT32_MAX)
    fail("--max-logprobs must be -1 (the vocabulary size) or at least 0, got ", max_logprobs);
  config.max_logprobs = static_cast<int>(max_logprobs);
  if (args.has("reasoning-parser")) {
    config.reasoning_parser = parse_reasoning_parser_name(args.get("reasoning-parser"));
  }
  if (args.has("tool-call-parser")) {
    config.tool_call_parser = parse_tool_call_parser_name(args.get("tool-call-parser"));
  }
  const std::string backend = args.get("guided-decoding-backend");
  check_choice("guided-decoding-backend", backend, {"auto", "off", "xgrammar", "guidance"});
  if (backend == "xgrammar" || backend == "guidance")
    log_info("--guided-decoding-backend ", backend, ": constraints run on ernie.cpp's own grammar engine, which "
             "accepts the same request fields");
  config.guided_decoding = backend != "off";
  config.guided_any_whitespace = !args.flag("guided-decoding-disable-any-whitespace");
  config.graceful_shutdown_seconds = static_cast<int>(args.get_int("timeout-graceful-shutdown"));
  if (config.graceful_shutdown_seconds < 0) fail("--timeout-graceful-shutdown must be >= 0");
  config.log_dir = env_or("FD_LOG_DIR", "log");
  config.threads = thread_count_from_flag(args.get_int("threads"));
  config.multimodal = parse_multimodal_options(args.get("limit-mm-per-prompt"), args.get_optional("mm-processor-kwargs").value_or(""));
  config.engine = engine_config_from_args(args);
  if (max_waiting > 0) config.engine.max_waiting_time = max_waiting;
  config.disaggregation = parse_disaggregation(args, config.host, config.engine);
  if (args.has("router")) {
    config.router = args.get("router");
    const size_t colon = config.router.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == config.router.size())
      fail("--router must be HOST:PORT, got \"", config.router, "\"");
  }
  const ModelConfig model = load_model_config(config.model_dir);
  fit_max_model_len(config.engine, model);
  // A bad --quantization is refused now, not after minutes of loading.
  if (!config.engine.quantization.empty()) parse_quantization(config.engine.quantization, model);
  return config;
}

}  // namespace ernie
