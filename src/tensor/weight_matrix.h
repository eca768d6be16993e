// A 2-D weight in the orientation every kernel expects: [rows = out features,
// cols = in features], row-major, y = x · Wᵀ. It either views checkpoint bytes
// (zero-copy, torch layout) or owns a re-laid-out copy (Paddle's [in, out]).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/dtype.h"

namespace ernie {

struct WeightMatrix {
  DType dtype = DType::kBF16;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features
  const void* data = nullptr;
  std::shared_ptr<const void> storage;  // set when the matrix owns its bytes

  bool empty() const { return data == nullptr; }
  size_t row_bytes() const { return static_cast<size_t>(cols) * dtype_size(dtype); }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes(); }

  // A view of rows [first, first + count), sharing this matrix's storage.
  WeightMatrix row_slice(int64_t first, int64_t count) const {
    WeightMatrix slice = *this;
    slice.rows = count;
    slice.data = row(first);
    return slice;
  }

  // Converts the whole matrix to fp32 (tests and small weights only).
  std::vector<float> to_f32() const {
    std::vector<float> out(static_cast<size_t>(rows * cols));
    convert_to_f32(dtype, data, out.data(), out.size());
    return out;
  }
};

}  // namespace ernie
