// A 2-D weight in the orientation every kernel expects: [rows = out features,
// cols = in features], y = x · Wᵀ. A dense matrix is row-major elements of `dtype`
// and either views checkpoint bytes (zero-copy, torch layout) or owns a re-laid-out
// copy (Paddle's [in, out]). A quantized one owns packed bytes and scales laid out
// for its kernel (src/kernels/quantize.h, docs/quantization.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace ernie {

// How a WeightMatrix stores its values (FastDeploy's --quantization names in brackets).
enum class WeightFormat : uint8_t {
  kDense,  // elements of `dtype`, row-major
  kInt8,   // [wint8] int8, one fp16 scale per output row and group of `group` inputs
  kInt4,   // [wint4] int4, likewise
  kFp8,    // [block_wise_fp8] FP8 e4m3, one scale per 128x128 block
  kWint2,  // [wint2] FastDeploy's 2-bit CCQ, read from pre-quantized checkpoints (kernels/wint2.h)
  // bf16 repacked at load for bf16 products (kernels/matmul_bf16.h), where the CPU has
  // AVX512-BF16: the same values as a kDense bf16 matrix, in the kernel's layout.
  kBf16Packed,
  kInt6,  // int6, as kInt8: the LM head under the 4-bit names (never a --quantization value)
};

struct WeightMatrix {
  DType dtype = DType::kBF16;  // element type of a kDense matrix
  WeightFormat format = WeightFormat::kDense;
  int32_t group = 0;              // inputs per scale (quantized formats)
  // FastDeploy's W4A8 experts (pre-quantized releases): the input is quantized with this
  // static, calibrated absmax instead of per block of inputs, after an unnormalised
  // Hadamard transform over blocks of `input_hadamard` inputs when that is > 0 (the
  // stored weights live in that basis). 0: activations are quantized per block.
  float input_absmax = 0.0f;
  int32_t input_hadamard = 0;
  // kFp8's float scales (kInt8/kInt4/kInt6 keep theirs in `data`, kWint2 its parameters);
  // layouts in kernels/quantize.h.
  const void* scales = nullptr;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features
  const void* data = nullptr;
  std::shared_ptr<const void> storage;  // set when the matrix owns its bytes
  // The checkpoint tensor a Linear was read from (owned by the Checkpoint), so `ernie
  // quantize` knows which tensors its packed copy replaces.
  const std::string* source_tensor = nullptr;

  bool empty() const { return data == nullptr; }
  const float* fp8_scales() const { return static_cast<const float*>(scales); }
  bool dense() const { return format == WeightFormat::kDense; }
  // Row access and slicing apply to dense matrices only.
  size_t row_bytes() const { return static_cast<size_t>(cols) * dtype_size(dtype); }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes(); }

  // A view of rows [first, first + count), sharing this matrix's storage.
  WeightMatrix row_slice(int64_t first, int64_t count) const {
    WeightMatrix slice = *this;
    slice.rows = count;
    slice.data = row(first);
    return slice;
  }

  // Converts a dense matrix to fp32 (tests and small weights only); quantized ones
  // go through dequantize_weight (kernels/quantize.h).
  std::vector<float> to_f32() const {
    std::vector<float> out(static_cast<size_t>(rows * cols));
    convert_to_f32(dtype, data, out.data(), out.size());
    return out;
  }
};

}  // namespace ernie
