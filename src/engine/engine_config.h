// The engine's settings, with FastDeploy's flag names and meanings (README lists the
// flags and where our CPU defaults differ from FastDeploy's GPU ones).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/sampling_params.h"
#include "engine/speculative.h"
#include "model/config.h"

namespace ernie {

// FastDeploy's repetition early stop (--enable-early-stop, --early-stop-config): a request
// whose last window_size sampled tokens each had probability above threshold ends, its
// last token replaced by the first end token (finish reason "stop").
struct EarlyStopConfig {
  bool enabled = false;
  int window_size = 3000;
  double threshold = 0.99;
};

// --early-stop-config's JSON (keys enable_early_stop, strategy "repetition", window_size,
// threshold) over the --enable-early-stop flag, checked as FastDeploy checks them; throws
// ernie::Error naming the key, the value and what was expected.
EarlyStopConfig parse_early_stop_config(bool flag, const std::optional<std::string>& json_text);

struct EngineConfig {
  int block_size = 64;                          // --block-size
  double gpu_memory_utilization = 0.9;          // --gpu-memory-utilization: share of this machine's RAM
  std::optional<int> num_gpu_blocks_override;   // --num-gpu-blocks-override
  int max_num_seqs = 8;                         // --max-num-seqs
  std::optional<int64_t> max_num_batched_tokens;  // --max-num-batched-tokens (default below)
  int64_t max_model_len = 2048;                 // --max-model-len
  bool max_model_len_given = false;             // false: the default, which a smaller model lowers
  bool chunked_prefill = true;                  // --enable-chunked-prefill / FD_DISABLE_CHUNKED_PREFILL
  bool prefix_caching = true;                   // --enable-prefix-caching / --no-enable-prefix-caching
  bool v1_scheduler = true;                     // ENABLE_V1_KVCACHE_SCHEDULER
  double kv_cache_ratio = 0.75;                 // --kv-cache-ratio (V0 scheduler only)
  SamplingClass sampling_class = SamplingClass::kBase;  // FD_SAMPLING_CLASS
  uint64_t seed = 0;                            // seeds requests that bring no seed
  std::string quantization;  // --quantization as given; model/quantization.h parses it against the model
  EarlyStopConfig early_stop;
  SpeculativeConfig speculative;  // --speculative-config
  // ERNIE_MTP_HIDDEN: which main-model hidden state the MTP head sees (model spec §4.2):
  // false: before the final norm, as ERNIE's training code; true: after it, as FastDeploy.
  bool mtp_normed_hidden = false;
  // --tensor-parallel-size: ranks (MPI processes) one model is sharded over; rank 0 runs
  // the engine (dist/tensor_parallel.h). --enable-expert-parallel: routed experts are
  // placed whole on the ranks instead of split.
  int tensor_parallel_size = 1;
  bool expert_parallel = false;
  // --swap-space GB: a second KV tier that evicted prefix-cache blocks move to
  // (engine/kv_swap_tier.h); 0: none.
  double swap_space_gb = 0;

  // KV cache layers per position: the model's, plus the MTP head's when it drafts.
  int kv_layers(const ModelConfig& model) const { return model.num_hidden_layers + (speculative.mtp_drafts() > 0 ? 1 : 0); }
  // --max-waiting-time: seconds a request may wait for its first admission before it is
  // refused (RequestOutput::waited_too_long); unset: no limit (FastDeploy's -1).
  std::optional<double> max_waiting_time;

  // Tokens per step when the flag is absent: 512 with chunked prefill (a CPU computes a
  // 2048-token chunk for seconds, stalling every decode behind it), else max_model_len
  // so that any prompt fits one step, as FastDeploy does.
  int64_t effective_max_num_batched_tokens() const;
};

// Checks ranges and combinations; throws ernie::Error naming the flag.
void validate_engine_config(const EngineConfig& config, const ModelConfig& model);

// Lowers the default --max-model-len to a model that holds fewer positions (a small
// model trained on short windows), saying so; a value given on the command line is left
// for validate_engine_config to judge.
void fit_max_model_len(EngineConfig& config, const ModelConfig& model);

// How many KV blocks to make: the override, or what fits in gpu_memory_utilization of
// `machine_bytes` (the memory this process may use: read_memory_budget().usable(), not
// the machine's RAM) after the weights and the activations of one full step, for KV rows of
// `kv_row_bytes` (ErnieModel::kv_row_bytes). Refuses, with the numbers, a pool that
// cannot hold one max_model_len sequence.
int plan_kv_blocks(const EngineConfig& config, const ModelConfig& model, uint64_t weight_bytes, size_t kv_row_bytes,
                   uint64_t machine_bytes);

}  // namespace ernie
