// ernie serve: the OpenAI-compatible server, with FastDeploy's command line.
#include <filesystem>

#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "model/generation_config.h"
#include "serving/output_parser.h"
#include "serving/router_registration.h"
#include "serving/serve_config.h"
#include "serving/server_runner.h"
#include "util/log.h"

namespace ernie {
namespace {

void check_parser_markers(const ServeConfig& config) {
  if (config.reasoning_parser == ReasoningParser::kNone && config.tool_call_parser == ToolCallParser::kNone) return;
  resolve_marker_tokens(Tokenizer::load(config.tokenizer_dir), config.reasoning_parser, config.tool_call_parser);
}

}  // namespace

int serve_command(int argc, char** argv) {
  const sigset_t shutdown_signals = block_shutdown_signals();
  set_log_to_stdout(true);
  const std::optional<ServeConfig> parsed = parse_serve_args(argc, argv, 2);
  if (!parsed) return 0;
  const ServeConfig& config = *parsed;
  std::filesystem::create_directories(config.log_dir);
  add_log_file(config.log_dir + "/api_server.log");
  check_parser_markers(config);  // before minutes of loading weights

  // Declared before the engine so that it outlives the engine client; stopped before it.
  disagg::Disaggregation disaggregation(config.disaggregation, config.engine.max_num_seqs);
  LoadedEngine engine = load_engine(config.model_dir, config.engine, config.threads, config.tokenizer_dir,
                                    [&](Engine& made) { disaggregation.prepare(made); });
  if (!engine.client) return 0;  // a tensor-parallel rank other than 0: rank 0 has stopped
  disaggregation.attach(*engine.client);
  struct StopBeforeEngine {
    disagg::Disaggregation& disaggregation;
    ~StopBeforeEngine() { disaggregation.stop(); }
  } stop_before_engine{disaggregation};
  std::unique_ptr<RouterRegistration> registration;
  if (!config.router.empty()) {
    const disagg::PrefillServer* prefill = disaggregation.prefill_server();
    registration = std::make_unique<RouterRegistration>(
        RouterRegistrationInfo{config.router, disagg::role_name(config.disaggregation.role), config.host, config.port,
                               prefill ? prefill->port() : 0},
        [&disaggregation](const std::vector<std::string>& endpoints) { disaggregation.set_prefill_endpoints(endpoints); });
  }
  const GenerationConfig generation = load_generation_config(config.model_dir);
  return serve_until_signalled(config, shutdown_signals, *engine.client, *engine.tokenizer, engine.engine_model(),
                               generation);
}

}  // namespace ernie
