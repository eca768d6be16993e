// What the engine needs of a model: its config, the size of a KV cache row, and a
// forward pass over a packed batch. ErnieModel is the one real implementation; tests
// put a scripted model behind the same interface to drive the serving stack with
// answers they choose.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"
#include "util/thread_pool.h"
#include "vision/preprocess.h"

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
  // ERNIE-4.5-VL only; both empty for text. rope_positions: (t, h, w) per token, 3 values
  // each, the 3-D RoPE position (a text token's is (p, p, p), with p behind the cache
  // position once an image's tokens have shared positions). input_embeddings: per token,
  // hidden_size values that replace the token's embedding (an image's features), or null.
  std::vector<int32_t> rope_positions;
  std::vector<const float*> input_embeddings;
  // Called after each decoder layer has written its keys and values (prefill/decode
  // disaggregation sends them from here while later layers compute); may be empty.
  std::function<void(int layer)> after_layer;
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual const ModelConfig& config() const = 0;
  // Bytes of one (layer, position) row of K or of V in the caches it is given.
  virtual size_t kv_row_bytes() const = 0;
  // Runs the batch, writing its keys and values into the caches, and returns the logits
  // of batch.logit_rows as [logit_rows.size(), vocab_size], row-major, in a buffer the
  // model owns and overwrites on the next call (callers may modify it).
  virtual std::vector<float>& forward(const ForwardBatch& batch) = 0;

  // Speculative decoding's multi-token-prediction head (model spec §4), when the model
  // has one. Row t of `batch` is the token x_{t+1} at position t, and row t of `hidden`
  // ([rows, hidden_size], not a view of the model's buffers) the main model's hidden
  // state h_t before its final norm (normalize_hidden applies that norm first, as
  // FastDeploy feeds it). Keys and values go to layer config().num_hidden_layers of the
  // caches. Returns the logits of batch.logit_rows like forward().
  virtual bool has_mtp() const { return false; }
  // Switches forward_mtp to what drafting wants (ErnieModel: an int8 copy of the head,
  // made now so that no step pays for it); before it, forward_mtp is exact.
  virtual void prepare_mtp() {}
  virtual std::vector<float>& forward_mtp(const ForwardBatch& batch, std::span<const float> hidden,
                                          bool normalize_hidden);
  // The hidden states [rows, hidden_size] the last forward() or forward_mtp() left, before
  // the final norm: the main model's h_t, or the MTP head's output (fed back to draft
  // again). Valid until the next call.
  virtual std::span<const float> last_hidden_states() const { return {}; }

  // ERNIE-4.5-VL: the features [tokens, hidden_size] of one image or video, which the
  // placeholder tokens of its block take as their input embeddings. Runs its kernels on
  // `pool`, not the forward pass's, so it may run on another thread beside forward().
  virtual bool has_vision() const { return false; }
  virtual std::vector<float> encode_vision(const ImagePatches& patches, ThreadPool& pool);
};

}  // namespace ernie
