#include "model/kv_cache.h"

#include "util/error.h"

namespace ernie {

void SequenceKvCache::reserve(int64_t num_positions) {
  while (capacity() < num_positions) {
    const size_t bytes = static_cast<size_t>(2 * num_layers_ * kBlockPositions) * row_bytes_;
    blocks_.push_back(std::make_unique<uint8_t[]>(bytes));
  }
}

uint8_t* SequenceKvCache::row(int layer, int64_t position, int kind) {
  if (position < 0 || position >= capacity())
    fail("KV cache position ", position, " is outside the reserved 0..", capacity() - 1);
  uint8_t* block = blocks_[static_cast<size_t>(position / kBlockPositions)].get();
  const int64_t index = (static_cast<int64_t>(kind) * num_layers_ + layer) * kBlockPositions + position % kBlockPositions;
  return block + static_cast<size_t>(index) * row_bytes_;
}

}  // namespace ernie
