// What every engine-driven command shares: the engine flags with FastDeploy's names,
// the environment variables FastDeploy reads, and loading model + tokenizer + engine.
#pragma once

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "dist/tensor_parallel.h"
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
  std::unique_ptr<Communicator> communicator;  // --tensor-parallel-size > 1: the link to the other ranks
  std::unique_ptr<ErnieModel> model;
  std::unique_ptr<TensorParallelModel> parallel_model;  // rank 0 under tensor parallelism
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<EngineClient> client;  // null on a rank other than 0, once rank 0 stopped it

  // The model the engine runs (the sharded model's rank-0 face under tensor parallelism).
  LanguageModel& engine_model() const {
    return parallel_model ? static_cast<LanguageModel&>(*parallel_model) : *model;
  }
};

// `tokenizer_dir` empty: the tokenizer files are in `model_dir`. Under tensor
// parallelism (config.tensor_parallel_size > 1, in an MPI job) every rank loads its
// shard; rank 0 gets the engine, and on the other ranks this returns, with no client,
// only after rank 0 stopped them. `prepare`, when given, sees the engine before its
// thread starts.
LoadedEngine load_engine(const std::string& model_dir, const EngineConfig& config, size_t threads,
                         const std::string& tokenizer_dir = "", const std::function<void(Engine&)>& prepare = {});

}  // namespace ernie
