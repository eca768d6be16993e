// The ERNIE 4.5 text model (dense and MoE) evaluated over a packed batch: the tokens
// of several sequences, each at its own positions with its own KV cache, in one call.
// Linear layers run once over all rows; attention runs per sequence over its cache.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "kernels/flash_attention.h"
#include "kernels/matmul.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/ernie_weights.h"
#include "model/kv_cache.h"
#include "model/language_model.h"
#include "model/quantization.h"
#include "model/vision_encoder.h"
#include "model/weight_sharding.h"
#include "util/thread_pool.h"

namespace ernie {

// One sequence's `tokens` at positions start_position, start_position + 1, ... with the
// logits of every row (all_rows) or of the last row only.
ForwardBatch single_sequence_batch(KvCache& cache, std::span<const int32_t> tokens, int64_t start_position,
                                   bool all_rows);

struct LoadReport {
  double seconds = 0;
  double quantize_seconds = 0;
  uint64_t tensor_bytes = 0;         // in the checkpoint
  uint64_t weight_bytes = 0;         // as the kernels hold them (after quantization)
  int kept_dense = 0;                // matrices the plan named that could not be quantized
  bool from_cache = false;           // the packed weights came from the quantized-weights cache
  bool prequantized = false;         // ... or from a checkpoint `ernie quantize` wrote
  size_t num_files = 0;
  CheckpointLayout layout = CheckpointLayout::kTorch;
};

class ErnieModel final : public LanguageModel {
 public:
  // Loads config.json and the weights from `model_dir`. `pool` runs the kernels and
  // must outlive the model.
  // `quantization` (default: none) is applied once the weights are loaded. `mtp_dir`: a
  // checkpoint whose MTP head replaces the main checkpoint's (empty: none).
  // `report_progress`: show the bytes quantized, or - unquantized, when the weights fit
  // in memory - read them in now with the bytes read shown (util/progress.h).
  // `shard` and `communicator`: under tensor/expert parallelism, the part of the model
  // this rank holds and the link to the other ranks (which must run every forward pass
  // with it: the partial sums are all-reduced, and the logits gathered on rank 0).
  static std::unique_ptr<ErnieModel> load(const std::string& model_dir, ThreadPool& pool,
                                          const LayerProgress& on_layer_loaded = nullptr,
                                          const QuantizationPlan& quantization = {}, const std::string& mtp_dir = "",
                                          bool report_progress = false, const ShardPlan& shard = {},
                                          Communicator* communicator = nullptr);

  ErnieModel(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint, ErnieWeights weights, ThreadPool& pool,
             KvStorage kv_storage = KvStorage::kF32, const ShardPlan& shard = {}, Communicator* communicator = nullptr);
  const ShardPlan& shard() const { return shard_; }

  const ModelConfig& config() const override { return config_; }
  const ErnieWeights& weights() const { return weights_; }
  // The checkpoint the weights were read from (its tensors stay mapped while the model lives).
  Checkpoint& checkpoint() { return *checkpoint_; }
  const LoadReport& load_report() const { return load_report_; }

  // How KV rows are stored, and the bytes of one (layer, position) row of K or of V.
  KvStorage kv_storage() const { return kv_storage_; }
  size_t kv_row_bytes() const override;
  std::unique_ptr<KvCache> new_kv_cache() const;

  // Runs the batch, writing its keys and values into the caches, and returns the logits
  // of batch.logit_rows as [logit_rows.size(), vocab_size], row-major (under tensor
  // parallelism on rank 0 only; the other ranks get their vocabulary part). The returned
  // buffer belongs to the model (callers may modify it, e.g. to apply penalties) and is
  // overwritten by the next call. Buffers grow to
  // the largest batch seen and are then reused: a forward pass over a batch no larger
  // than an earlier one allocates nothing.
  std::vector<float>& forward(const ForwardBatch& batch) override;

  bool has_mtp() const override { return !weights_.mtp.empty(); }
  // The int8 copy of the LM head that drafting projects with (see forward_mtp).
  void prepare_mtp() override;
  std::vector<float>& forward_mtp(const ForwardBatch& batch, std::span<const float> hidden,
                                  bool normalize_hidden) override;
  std::span<const float> last_hidden_states() const override;

  bool has_vision() const override { return weights_.vision.has_value(); }
  std::vector<float> encode_vision(const ImagePatches& patches, ThreadPool& pool) override;

 private:
  // Where a batch row's token sits: its sequence chunk and position.
  struct TokenSlot {
    const SequenceChunk* chunk;
    int64_t position;
  };
  // One unit of attention work: a run of query tokens of one sequence, one kv head.
  struct AttentionItem {
    int32_t sequence;
    int32_t kv_head;
    int32_t first_token;  // batch row
    int32_t num_tokens;
  };
  struct Routing {
    int32_t token;
    float weight;
  };
  // One expert's working memory when its work is not the pool's one expert at a time
  // (experts_streamed, experts_on_threads).
  struct ExpertScratch {
    MatmulInput input, down_input;
    std::vector<float> gathered, gate, up;
  };

  void validate(const ForwardBatch& batch) const;
  void plan_batch(const ForwardBatch& batch);
  void prepare_threads();
  // validate, reserve the caches, plan the batch, its rows' RoPE rotations and buffers.
  void begin_batch(const ForwardBatch& batch);
  void embed(std::span<const int32_t> tokens, float* out) const;
  // x[n, H] += attention and MLP (or MoE) of one decoder layer; keys and values go to
  // layer `kv_layer` of the caches.
  void decoder_layer(const DecoderLayerWeights& layer, int kv_layer, const ForwardBatch& batch, float* x);
  // Final norm and `head` (the LM head, or the MTP's int8 copy) of the rows `rows_wanted` of x.
  std::vector<float>& head_logits(const float* x, std::span<const int32_t> rows_wanted, const WeightMatrix& head);
  // body(t0, t1) over the token rows [0, n): split over the pool for prefill-sized
  // batches, on this thread for decode-sized ones.
  void for_rows(int64_t n, FunctionRef<void(int64_t, int64_t)> body);
  // Row i of dst[count, H] = row source_row(i) of src, split like for_rows.
  void gather_rows(const float* src, int64_t count, FunctionRef<int64_t(int64_t)> source_row, float* dst);
  // Row target_row(i) of dst += weight(i) · row i of src[count, H], split like for_rows:
  // no two i may share a target row.
  void scatter_add_rows(const float* src, int64_t count, FunctionRef<int64_t(int64_t)> target_row,
                        FunctionRef<float(int64_t)> weight, float* dst);
  void attention_block(const DecoderLayerWeights& layer, int layer_index, const ForwardBatch& batch, float* out);
  // MLP(input) for the n rows of H in `input`: n rows of H in a buffer that lasts until
  // the next MLP.
  float* mlp_forward(const MlpWeights& mlp, MatmulInput& input);
  // out[n, H] += MLP(input).
  void mlp_block(const MlpWeights& mlp, MatmulInput& input, float* out);
  // out[n, H] += the routed experts of `moe` for the n rows of `input`. The shared
  // experts are the caller's, except that with `shared` (the layer's shared experts) they
  // may join the routed ones (decode-sized, all integer: experts_streamed); returns
  // whether their rows were added.
  bool routed_experts(const MoeWeights& moe, const float* input, int64_t n, float* out,
                      const MlpWeights* shared = nullptr);
  // routed_experts for decode-sized batches on several threads, once the tokens are
  // grouped by expert: each thread runs whole experts (gate and up, SiLU, down) on its
  // own, so one expert's weights stream on one core as one sequence and the threads meet
  // once per layer instead of twice per expert. The outputs are added in expert order,
  // as the expert-by-expert loop adds them, so both give the same bits. False (nothing
  // done) where that loop is better: larger batches, fewer active experts than threads,
  // experts split into tensor-parallel parts.
  // num_active: decode_sized_active_experts(moe), computed once by routed_experts.
  bool experts_on_threads(const MoeWeights& moe, const float* input, int64_t n, int64_t num_active, float* out);
  // routed_experts for decode-sized batches whose experts are all integer (wint8, wint4):
  // every active expert's gate and up in one parallel loop, SiLU, then every down in
  // another (matmul_batch), so both threads stream all the experts' weights as one run,
  // as they stream one large matrix, and meet twice per layer. Each expert computes what
  // it computes alone, and the outputs are added in expert order: the same bits as the
  // loop. False (nothing done) where experts_on_threads or the loop apply instead.
  // With `shared` (integer, decode-sized), the shared experts join both loops and their
  // rows are added last with weight 1, as moe_block adds them.
  bool experts_streamed(const MoeWeights& moe, const float* input, int64_t n, int64_t num_active, float* out,
                        const MlpWeights* shared);
  // The active experts of a decode-sized batch into active_experts_ (every expert's
  // token count below kDecodeRows, whole experts, at least two threads), with their
  // scratch sized; 0 where none of that holds.
  int64_t decode_sized_active_experts(const MoeWeights& moe);
  // Gathers an expert's tokens' rows of `input` into its scratch and points its input there.
  void gather_expert_input(int32_t expert, const float* input);
  // out += the active experts' output rows (at their offsets in `outputs`), each row
  // times its routing weight, in expert order.
  void add_expert_outputs(const float* outputs, int64_t num_active, float* out);
  // Chooses top_k experts and their weights for n rows of `input` (chosen_expert_,
  // chosen_weight_, and per-expert counts in expert_count_).
  void route(const MoeWeights& moe, const float* input, int64_t n);
  // Expert parallelism, as FastDeploy's EP: each rank routes its share of the tokens,
  // sends each (token, expert) row to the expert's rank and its output back (all-to-all),
  // and the shares are gathered; the shared experts are a tensor-parallel MLP. `out`
  // (zeros) receives the whole layer's MoE output, the same on every rank.
  void expert_parallel_moe(const MoeWeights& moe, int64_t n, float* out);
  // The MoE part of a decoder layer: routed experts (per modality for VL) and shared ones.
  void moe_block(const DecoderLayerWeights& layer, const ForwardBatch& batch, float* out);

  // The row-parallel partial sums of a block, summed over the ranks (no-op in one process).
  void all_reduce(float* data, int64_t count);

  ModelConfig config_;
  ShardPlan shard_;
  ShardShape shape_;             // this rank's heads, KV heads and vocabulary rows
  Communicator* communicator_;  // null: the whole model in this process
  std::vector<float> local_logits_;     // this rank's vocabulary part, before the gather
  std::vector<float> gathered_logits_;  // rank 0: every rank's part, rank-major
  std::vector<int> gather_counts_;
  std::unique_ptr<Checkpoint> checkpoint_;  // keeps zero-copy weights mapped
  std::unique_ptr<Checkpoint> mtp_checkpoint_;  // the same for an MTP head loaded from elsewhere
  ErnieWeights weights_;
  ThreadPool& pool_;
  KvStorage kv_storage_;
  std::vector<float> rope_inv_freq_;
  LoadReport load_report_;
  std::thread::id threads_prepared_for_;  // the caller whose pool threads have sized buffers

  // The forward pass's working memory (see forward()).
  std::vector<float> rope_cos_sin_;  // [rows][head_dim]: RoPE rotation of each row's position
  std::vector<float> x_, normed_, block_out_, q_, k_, v_, attended_, gate_, up_, down_, last_, logits_;
  std::vector<float> kv_scales_;  // C8: quantize and dequantize scales of the keys and values
  std::vector<float> mtp_input_;  // [rows, 2H]: normed embedding ; normed hidden
  int64_t hidden_rows_ = 0;       // rows of x_ the last forward left
  std::unique_ptr<WeightMatrix> mtp_head_;  // int8 copy of the LM head for drafting
  std::vector<float> router_logits_, expert_in_, expert_out_, probs_, scores_, chosen_weight_;
  std::vector<int32_t> order_, chosen_expert_, expert_count_, expert_offset_, active_experts_;
  std::vector<Routing> routed_;  // [E][tokens routed to it], grouped by expert
  // Expert parallelism's exchange buffers.
  std::vector<int> ep_counts_;
  std::vector<int32_t> ep_order_;
  std::vector<uint8_t> ep_send_, ep_receive_;
  std::vector<float> ep_results_, ep_returned_, ep_share_out_, ep_gathered_;
  std::vector<int32_t> modality_rows_;         // VL: batch rows of one modality
  std::vector<float> modality_in_, modality_out_;
  MatmulInput input_, expert_input_, down_input_, attended_input_;
  std::vector<ExpertScratch> expert_scratch_;  // [E], for experts_streamed and experts_on_threads
  std::vector<TokenSlot> slots_;
  std::vector<AttentionItem> attention_items_;
  std::vector<std::vector<const void*>> key_rows_, value_rows_;
};

}  // namespace ernie
