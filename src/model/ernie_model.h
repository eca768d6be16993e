// The ERNIE 4.5 text model (dense and MoE) evaluated over a packed batch: the tokens
// of several sequences, each at its own positions with its own KV cache, in one call.
// Linear layers run once over all rows; attention runs per sequence over its cache.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/ernie_weights.h"
#include "model/kv_cache.h"
#include "util/thread_pool.h"

namespace ernie {

// The consecutive tokens [first_token, first_token + num_tokens) of the batch belong to
// one sequence and sit at positions start_position, start_position + 1, ... Positions
// before start_position must already be in `cache`.
struct SequenceChunk {
  KvCache* cache = nullptr;
  int64_t start_position = 0;
  int32_t first_token = 0;
  int32_t num_tokens = 0;
};

struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<SequenceChunk> sequences;  // cover `tokens` in order
  std::vector<int32_t> logit_rows;       // batch rows whose next-token logits are wanted
};

// One sequence's `tokens` at positions start_position, start_position + 1, ... with the
// logits of every row (all_rows) or of the last row only.
ForwardBatch single_sequence_batch(KvCache& cache, std::span<const int32_t> tokens, int64_t start_position,
                                   bool all_rows);

struct LoadReport {
  double seconds = 0;
  uint64_t tensor_bytes = 0;
  size_t num_files = 0;
  CheckpointLayout layout = CheckpointLayout::kTorch;
};

class ErnieModel {
 public:
  // Loads config.json and the weights from `model_dir`. `pool` runs the kernels and
  // must outlive the model.
  static std::unique_ptr<ErnieModel> load(const std::string& model_dir, ThreadPool& pool,
                                          const LayerProgress& on_layer_loaded = nullptr);

  ErnieModel(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint, ErnieWeights weights, ThreadPool& pool);

  const ModelConfig& config() const { return config_; }
  const ErnieWeights& weights() const { return weights_; }
  const LoadReport& load_report() const { return load_report_; }

  std::unique_ptr<KvCache> new_kv_cache() const;

  // Runs the batch, writing its keys and values into the caches, and returns the logits
  // of batch.logit_rows as [logit_rows.size(), vocab_size], row-major.
  std::vector<float> forward(const ForwardBatch& batch);

 private:
  void validate(const ForwardBatch& batch) const;
  void attention_block(const DecoderLayerWeights& layer, int layer_index, const ForwardBatch& batch,
                       const std::vector<float>& normed, std::vector<float>& out);
  void mlp_block(const MlpWeights& mlp, const float* input, int64_t n, float* out);
  void moe_block(const MoeWeights& moe, const std::vector<float>& normed, int64_t n, std::vector<float>& out);

  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;  // keeps zero-copy weights mapped
  ErnieWeights weights_;
  ThreadPool& pool_;
  std::vector<float> rope_inv_freq_;
  LoadReport load_report_;
};

}  // namespace ernie
