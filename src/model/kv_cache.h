// Per-sequence storage of post-RoPE keys and values, one fp32 row of width
// num_kv_heads * head_dim per (layer, position). The forward pass writes and reads
// through this interface; the engine's paged block pool implements it too.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace ernie {

class KvCache {
 public:
  virtual ~KvCache() = default;
  // Makes positions [0, num_positions) addressable.
  virtual void reserve(int64_t num_positions) = 0;
  virtual float* key(int layer, int64_t position) = 0;
  virtual float* value(int layer, int64_t position) = 0;
};

// A private cache for one sequence, grown in blocks of kBlockPositions so it never
// moves rows that are already written.
class SequenceKvCache final : public KvCache {
 public:
  static constexpr int64_t kBlockPositions = 64;

  SequenceKvCache(int num_layers, int64_t kv_width) : num_layers_(num_layers), kv_width_(kv_width) {}

  void reserve(int64_t num_positions) override;
  float* key(int layer, int64_t position) override { return row(layer, position, 0); }
  float* value(int layer, int64_t position) override { return row(layer, position, 1); }
  int64_t capacity() const { return static_cast<int64_t>(blocks_.size()) * kBlockPositions; }

 private:
  float* row(int layer, int64_t position, int kind);

  int num_layers_;
  int64_t kv_width_;
  // Each block: [kind (K, V)][layer][position in block][kv_width].
  std::vector<std::unique_ptr<float[]>> blocks_;
};

}  // namespace ernie
