#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu_features.h"
#include "util/random.h"

namespace ernie {
namespace {

// A random weight matrix stored in `dtype`.
struct OwnedMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix matrix;
};

OwnedMatrix random_matrix(DType dtype, int64_t rows, int64_t cols, uint64_t seed) {
  Random random(seed);
  OwnedMatrix owned;
  owned.bytes.resize(static_cast<size_t>(rows * cols) * dtype_size(dtype));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float value = static_cast<float>(random.normal() * 0.5);
    if (dtype == DType::kF32) {
      std::memcpy(owned.bytes.data() + i * 4, &value, 4);
    } else {
      // bf16 bits, or f16 bits for a value exactly representable in both (k/256).
      const uint16_t bits = dtype == DType::kBF16 ? f32_to_bf16(value) : static_cast<uint16_t>(0x3c00 + (i % 64));
      std::memcpy(owned.bytes.data() + i * 2, &bits, 2);
    }
  }
  owned.matrix.dtype = dtype;
  owned.matrix.rows = rows;
  owned.matrix.cols = cols;
  owned.matrix.data = owned.bytes.data();
  return owned;
}

class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, MatchesTheDoubleReferenceOnOddShapes) {
  ThreadPool pool(2);
  Random random(5);
  for (const auto& [n, rows, cols] : {std::tuple{1, 1, 1}, std::tuple{1, 7, 33}, std::tuple{3, 130, 256},
                                      std::tuple{2, 19, 70}, std::tuple{17, 5, 1000}, std::tuple{64, 67, 48},
                                      std::tuple{130, 37, 129}}) {
    const OwnedMatrix w = random_matrix(GetParam(), rows, cols, static_cast<uint64_t>(rows * cols));
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (float& value : x) value = static_cast<float>(random.normal());
    std::vector<float> fast(static_cast<size_t>(n * rows)), reference(fast.size());
    matmul(pool, x.data(), n, w.matrix, fast.data());
    matmul_reference(x.data(), n, w.matrix, reference.data());
    // fp32 accumulation of `cols` products: error grows like sqrt(cols) ulps of the terms.
    const double tolerance = 2e-6 * std::sqrt(static_cast<double>(cols)) * 8.0;
    for (size_t i = 0; i < fast.size(); ++i)
      ASSERT_NEAR(fast[i], reference[i], tolerance * (1.0 + std::fabs(reference[i])))
          << "n=" << n << " rows=" << rows << " cols=" << cols << " i=" << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, MatmulTest, ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const auto& test_info) { return std::string(safetensors_dtype_name(test_info.param)); });

// No token rows (a step that wants no logits): nothing is read or written.
TEST(MatmulTest, NoRowsIsANoOp) {
  ThreadPool pool(2);
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    const OwnedMatrix w = random_matrix(dtype, 40, 64, 3);
    float untouched = 7.0f;
    matmul(pool, nullptr, 0, w.matrix, &untouched);
    EXPECT_EQ(untouched, 7.0f);
    for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kFp8}) {
      if (dtype != DType::kBF16) continue;
      matmul(pool, nullptr, 0, quantize_weight(w.matrix, format), &untouched);
      EXPECT_EQ(untouched, 7.0f);
    }
  }
}

TEST(MatmulTest, HandComputedProduct) {
  const float w[] = {1, 2, 3, 4, 5, 6};  // [2 out, 3 in]
  const float x[] = {1, 0, -1, 2, 2, 2};  // [2 rows, 3 in]
  float y[4];
  ThreadPool pool(2);
  matmul(pool, x, 2, f32_matrix_view(w, 2, 3), y);
  EXPECT_EQ(y[0], -2.0f);  // 1 - 3
  EXPECT_EQ(y[1], -2.0f);  // 4 - 6
  EXPECT_EQ(y[2], 12.0f);
  EXPECT_EQ(y[3], 30.0f);
}

}  // namespace
}  // namespace ernie
