#include "engine/engine_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/kv_block_pool.h"
#include "util/error.h"
#include "util/json_flag.h"
#include "util/log.h"

namespace ernie {

EarlyStopConfig parse_early_stop_config(bool flag, const std::optional<std::string>& json_text) {
  EarlyStopConfig config;
  config.enabled = flag;
  if (!json_text) return config;
  const nlohmann::json parsed = parse_json_object_flag("early-stop-config", *json_text);
  for (const auto& [key, value] : parsed.items()) {
    if (key == "enable_early_stop") {
      if (!value.is_boolean()) fail("--early-stop-config: enable_early_stop must be true or false, got ", value.dump());
      // FastDeploy refuses the flag beside a config that turns it off.
      if (flag && !value.get<bool>())
        fail("--enable-early-stop contradicts --early-stop-config's \"enable_early_stop\": false");
      config.enabled = value.get<bool>();
    } else if (key == "strategy") {
      if (value != "repetition")
        fail("--early-stop-config: strategy ", value.dump(), " is not supported; the only strategy is \"repetition\"");
    } else if (key == "window_size") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 1000000)
        fail("--early-stop-config: window_size must be an integer in 1..1000000, got ", value.dump());
      config.window_size = value.get<int>();
    } else if (key == "threshold") {
      if (!value.is_number() || !(value.get<double>() >= 0.0 && value.get<double>() <= 1.0))
        fail("--early-stop-config: threshold must be a number in [0, 1], got ", value.dump());
      config.threshold = value.get<double>();
    } else {
      fail("--early-stop-config: unknown key \"", key, "\" (known: enable_early_stop, strategy, window_size, threshold)");
    }
  }
  return config;
}

void fit_max_model_len(EngineConfig& config, const ModelConfig& model) {
  if (config.max_model_len_given || model.max_position_embeddings >= config.max_model_len) return;
  log_info("--max-model-len defaults to the model's max_position_embeddings, ", model.max_position_embeddings,
           " (not ", config.max_model_len, ")");
  config.max_model_len = model.max_position_embeddings;
}

int64_t EngineConfig::effective_max_num_batched_tokens() const {
  if (max_num_batched_tokens) return *max_num_batched_tokens;
  return chunked_prefill ? 512 : max_model_len;
}

void validate_engine_config(const EngineConfig& config, const ModelConfig& model) {
  if (config.block_size < 1 || config.block_size > 4096)
    fail("--block-size must lie in 1..4096, got ", config.block_size);
  if (!(config.gpu_memory_utilization > 0 && config.gpu_memory_utilization <= 1))
    fail("--gpu-memory-utilization must lie in (0, 1], got ", config.gpu_memory_utilization);
  if (config.num_gpu_blocks_override && *config.num_gpu_blocks_override < 1)
    fail("--num-gpu-blocks-override must be at least 1, got ", *config.num_gpu_blocks_override);
  if (config.max_num_seqs < 1 || config.max_num_seqs > 512)
    fail("--max-num-seqs must lie in 1..512, got ", config.max_num_seqs);
  if (config.max_model_len < 16) fail("--max-model-len must be at least 16, got ", config.max_model_len);
  if (config.max_model_len > model.max_position_embeddings)
    fail("--max-model-len ", config.max_model_len, " exceeds the model's max_position_embeddings ",
         model.max_position_embeddings);
  if (config.effective_max_num_batched_tokens() < 1)
    fail("--max-num-batched-tokens must be at least 1, got ", config.effective_max_num_batched_tokens());
  if (!config.chunked_prefill && config.effective_max_num_batched_tokens() < config.max_model_len)
    fail("without chunked prefill --max-num-batched-tokens (", config.effective_max_num_batched_tokens(),
         ") must be at least --max-model-len (", config.max_model_len, ") so that every prompt fits one step");
  if (!(config.kv_cache_ratio > 0 && config.kv_cache_ratio <= 1))
    fail("--kv-cache-ratio must lie in (0, 1], got ", config.kv_cache_ratio);
}

int plan_kv_blocks(const EngineConfig& config, const ModelConfig& model, uint64_t weight_bytes, size_t kv_row_bytes,
                   uint64_t machine_bytes) {
  const uint64_t block_bytes = KvBlockPool::bytes_per_block(config.kv_layers(model), kv_row_bytes, config.block_size);
  const int64_t needed_blocks = (config.max_model_len + config.block_size - 1) / config.block_size;
  int blocks;
  if (config.num_gpu_blocks_override) {
    blocks = *config.num_gpu_blocks_override;
  } else {
    // Activations of the largest step: the widest per-token buffers of a layer, the
    // bf16 copies of the matmul inputs (kernels/matmul_bf16.h), and logits rows for
    // every sequence.
    const uint64_t per_token = 4ull * (4ull * model.hidden_size + 2ull * model.q_width() + 2ull * model.kv_width() +
                                       3ull * model.intermediate_size) +
                               2ull * (model.hidden_size + model.q_width() + model.intermediate_size);
    const uint64_t activation_bytes =
        per_token * static_cast<uint64_t>(config.effective_max_num_batched_tokens()) +
        4ull * static_cast<uint64_t>(model.vocab_size) * static_cast<uint64_t>(config.max_num_seqs);
    const double budget = config.gpu_memory_utilization * static_cast<double>(machine_bytes) -
                          static_cast<double>(weight_bytes) - static_cast<double>(activation_bytes);
    blocks = budget > 0 ? static_cast<int>(std::min(budget / static_cast<double>(block_bytes), 1e9)) : 0;
    if (blocks < needed_blocks)
      fail("KV cache: ", config.gpu_memory_utilization, " of ", machine_bytes / (1 << 20), " MiB usable memory leaves ",
           budget > 0 ? static_cast<int64_t>(budget) / (1 << 20) : 0, " MiB after ", weight_bytes / (1 << 20),
           " MiB of weights and ", activation_bytes / (1 << 20), " MiB of activations: ", blocks, " blocks of ",
           block_bytes / 1024, " KiB, but one --max-model-len ", config.max_model_len, " sequence needs ",
           needed_blocks, "; raise --gpu-memory-utilization or lower --max-model-len");
  }
  if (blocks < needed_blocks)
    fail("KV cache: ", blocks, " blocks of ", config.block_size, " tokens hold ",
         static_cast<int64_t>(blocks) * config.block_size, " tokens, but one --max-model-len ", config.max_model_len,
         " sequence needs ", needed_blocks, " blocks");
  // A tensor-parallel rank keeps kv_heads / N heads, or one replicated head.
  const int ranks = config.tensor_parallel_size, kv_heads = model.num_key_value_heads;
  const size_t local_width =
      static_cast<size_t>(kv_heads >= ranks ? kv_heads / ranks : 1) * static_cast<size_t>(model.head_dim);
  log_info("KV cache: total_block_num ", blocks, " blocks of ", config.block_size, " tokens = ",
           static_cast<int64_t>(blocks) * config.block_size, " tokens, ",
           static_cast<double>(block_bytes) * blocks / (1 << 30), " GiB (",
           kv_row_bytes >= local_width * sizeof(float)      ? "fp32"
           : kv_row_bytes == local_width * sizeof(uint16_t) ? "bf16"
                                                           : "int8",
           config.tensor_parallel_size > 1 ? ", this rank's KV heads" : "", ")");
  return blocks;
}

}  // namespace ernie
