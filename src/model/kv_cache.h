// Per-sequence storage of post-RoPE keys and values: one row of `row_bytes` per
// (layer, position) holding all kv heads, in the format the model chose (fp32, or int8
// with per-head scales: kernels/flash_attention.h). The forward pass writes and reads
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
  virtual void* key(int layer, int64_t position) = 0;
  virtual void* value(int layer, int64_t position) = 0;
};

// A private cache for one sequence, grown in blocks of kBlockPositions so it never
// moves rows that are already written.
class SequenceKvCache final : public KvCache {
 public:
  static constexpr int64_t kBlockPositions = 64;

  SequenceKvCache(int num_layers, size_t row_bytes) : num_layers_(num_layers), row_bytes_(row_bytes) {}

  void reserve(int64_t num_positions) override;
  void* key(int layer, int64_t position) override { return row(layer, position, 0); }
  void* value(int layer, int64_t position) override { return row(layer, position, 1); }
  int64_t capacity() const { return static_cast<int64_t>(blocks_.size()) * kBlockPositions; }

 private:
  uint8_t* row(int layer, int64_t position, int kind);

  int num_layers_;
  size_t row_bytes_;
  // Each block: [kind (K, V)][layer][position in block][row_bytes].
  std::vector<std::unique_ptr<uint8_t[]>> blocks_;
};

}  // namespace ernie
