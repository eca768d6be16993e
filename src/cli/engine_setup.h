// What every engine-driven command shares: the engine flags with FastDeploy's names,
// the environment variables FastDeploy reads, and loading model + tokenizer + engine.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "engine/engine_client.h"
#include "model/ernie_model.h"

namespace ernie {

// Flag specs of EngineConfig (README: "Engine flags").
std::vector<OptionSpec> engine_option_specs();
// Builds the config from the flags and the environment (ENABLE_V1_KVCACHE_SCHEDULER,
// FD_DISABLE_CHUNKED_PREFILL, FD_SAMPLING_CLASS), logging what a flag does on a CPU.
EngineConfig engine_config_from_args(const ParsedArgs& args);

// Model, tokenizer and a running engine. Members are destroyed in reverse order, so
// the engine stops before the model and the threads it uses go away.
struct LoadedEngine {
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<ErnieModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<EngineClient> client;
};

// `tokenizer_dir` empty: the tokenizer files are in `model_dir`.
LoadedEngine load_engine(const std::string& model_dir, const EngineConfig& config, size_t threads,
                         const std::string& tokenizer_dir = "");

}  // namespace ernie
