// Running one sharded model on several ranks: rank 0 runs the engine (scheduler,
// sampling, HTTP) and, before each forward pass, broadcasts the step's plan (tokens,
// positions, block tables, logit rows) so that every other rank runs the same pass on
// its shard, over its own KV blocks with the same block ids. The all-reduces inside the
// pass keep the ranks in step; rank 0 gathers the logits.
#pragma once

#include <cstdint>
#include <string>

#include "dist/communicator.h"
#include "model/ernie_model.h"

namespace ernie {

// Rank 0's model as the engine sees it.
class TensorParallelModel final : public LanguageModel {
 public:
  TensorParallelModel(ErnieModel& model, Communicator& communicator);
  // Stops the other ranks' loops (they return from run_tensor_parallel_worker).
  ~TensorParallelModel() override;

  const ModelConfig& config() const override { return model_.config(); }
  size_t kv_row_bytes() const override { return model_.kv_row_bytes(); }
  std::vector<float>& forward(const ForwardBatch& batch) override;
  std::span<const float> last_hidden_states() const override { return model_.last_hidden_states(); }

  // Sends every rank the KV pool size rank 0 planned; call once before the first step.
  void share_kv_blocks(int num_blocks);
  void stop_workers();

 private:
  ErnieModel& model_;
  Communicator& communicator_;
  bool stopped_ = false;
  std::vector<uint8_t> plan_;
};

// A rank other than 0: receives the KV pool size, then runs every step rank 0 plans
// until it stops them. `kv_layers` and `block_size` as rank 0's engine uses them.
void run_tensor_parallel_worker(ErnieModel& model, Communicator& communicator, int kv_layers, int block_size);

// What must be the same on every rank (binary, model, quantization, shard layout) as one
// line of text; check_ranks_agree refuses to start when they differ, naming the ranks.
std::string rank_fingerprint(const ErnieModel& model, const std::string& quantization);
void check_ranks_agree(Communicator& communicator, const std::string& fingerprint, const std::string& host);

}  // namespace ernie
