// Random weights and activations for the kernel tests.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/weight_matrix.h"
#include "util/random.h"

namespace ernie::testing {

// A dense bf16 matrix [rows, cols] that owns its bits, with its values as fp32.
struct OwnedDense {
  std::vector<uint16_t> bits;
  WeightMatrix matrix;
  std::vector<float> values;
};

// Normal weights of standard deviation 0.05; every `outlier_every`-th one (when > 0)
// 20 times larger, as trained weights have.
inline OwnedDense random_bf16(int64_t rows, int64_t cols, uint64_t seed, double outlier_every = 0) {
  Random random(seed);
  OwnedDense owned;
  owned.bits.resize(static_cast<size_t>(rows * cols));
  owned.values.resize(owned.bits.size());
  for (size_t i = 0; i < owned.bits.size(); ++i) {
    double value = random.normal() * 0.05;
    if (outlier_every > 0 && i % static_cast<size_t>(outlier_every) == 0) value *= 20;
    owned.bits[i] = f32_to_bf16(static_cast<float>(value));
    owned.values[i] = bf16_to_f32(owned.bits[i]);
  }
  owned.matrix.dtype = DType::kBF16;
  owned.matrix.rows = rows;
  owned.matrix.cols = cols;
  owned.matrix.data = owned.bits.data();
  return owned;
}

// n rows of cols standard normal activations.
inline std::vector<float> random_activations(int64_t n, int64_t cols, uint64_t seed) {
  Random random(seed);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (float& value : x) value = static_cast<float>(random.normal());
  return x;
}

}  // namespace ernie::testing
