// Writing safetensors files (and sharded sets with model.safetensors.index.json), for
// the synthetic checkpoint generator and for tools that save converted weights.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace ernie {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian elements, row-major
  // Instead of `bytes`: makes them when the tensor is written, so a checkpoint larger
  // than memory is written one tensor at a time.
  std::function<std::vector<uint8_t>()> produce = nullptr;

  uint64_t byte_size() const;  // what the shape and dtype call for
};

// Writes one safetensors file; tensors are laid out in the given order after a header
// padded so that the data area starts at a multiple of `alignment` bytes (8, as the
// format recommends, or more: 64 lets mapped tensors whose sizes are multiples of 64
// start on cache lines).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata, size_t alignment = 8);

// Splits the tensors into `num_shards` files of similar size named
// model-0000i-of-0000n.safetensors and writes model.safetensors.index.json; with one
// shard writes a plain model.safetensors.
void write_sharded_safetensors(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata, int num_shards);

}  // namespace ernie
