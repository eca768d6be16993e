#include "model/kv_cache.h"

#include "util/error.h"

namespace ernie {

void SequenceKvCache::reserve(int64_t num_positions) {
  while (capacity() < num_positions) {
    const size_t floats = static_cast<size_t>(2 * num_layers_ * kBlockPositions * kv_width_);
    blocks_.push_back(std::make_unique<float[]>(floats));
  }
}

float* SequenceKvCache::row(int layer, int64_t position, int kind) {
  if (position < 0 || position >= capacity())
    fail("KV cache position ", position, " is outside the reserved 0..", capacity() - 1);
  float* block = blocks_[static_cast<size_t>(position / kBlockPositions)].get();
  const int64_t index = (static_cast<int64_t>(kind) * num_layers_ + layer) * kBlockPositions + position % kBlockPositions;
  return block + index * kv_width_;
}

}  // namespace ernie
