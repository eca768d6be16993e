// FastDeploy's W4A8 expert weights (docs/quantization.md): the product our int4 kernels
// compute for them against the release's arithmetic written out here in double from the
// format description: x quantized with the static scale, integer sums with 16 · w_int4,
// times bf16(weight_scale / (127 · 112) · activation_scale); and the Hadamard rotation
// against its definition H[i][j] = (-1)^popcount(i & j). Whole-model logits are checked
// against tools/ref_w4a8c8_numpy.py in tests/model/numpy_reference_test.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/matmul.h"
#include "kernels/quantize.h"
#include "support/test_support.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace ernie {
namespace {

struct W4a8Tensors {
  int64_t k = 0, n = 0;
  std::vector<uint8_t> packed;  // [k/2, n]
  std::vector<float> weight_scale;
  float activation_scale = 0.0f;
  int level(int64_t row, int64_t column) const {  // signed int4, low nibble = even input
    const uint8_t byte = packed[static_cast<size_t>((row / 2) * n + column)];
    const int nibble = row % 2 == 0 ? (byte & 0xf) : (byte >> 4);
    return nibble >= 8 ? nibble - 16 : nibble;
  }
};

W4a8Tensors random_w4a8_tensors(int64_t k, int64_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  W4a8Tensors t{k, n, {}, {}, 0.0f};
  for (int64_t i = 0; i < k / 2 * n; ++i) t.packed.push_back(static_cast<uint8_t>(random() & 0xff));
  for (int64_t i = 0; i < n; ++i) t.weight_scale.push_back(0.01f + 0.2f * unit(random));
  t.activation_scale = 3.0f;
  return t;
}

std::vector<double> hadamard_by_definition(const std::vector<float>& x, int block) {
  std::vector<double> out(x.size(), 0.0);
  for (size_t first = 0; first < x.size(); first += static_cast<size_t>(block))
    for (int i = 0; i < block; ++i)
      for (int j = 0; j < block; ++j)
        out[first + static_cast<size_t>(i)] +=
            (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) * x[first + static_cast<size_t>(j)];
  return out;
}

// The release's product for one token, in double except where FastDeploy rounds; and
// the sum of its terms' magnitudes, which bounds the float rounding of any summation.
struct Product {
  std::vector<double> y, magnitude;
};
Product release_product(const W4a8Tensors& t, const std::vector<double>& x) {
  const float s = 1.0f / t.activation_scale;
  Product p{std::vector<double>(static_cast<size_t>(t.n)), std::vector<double>(static_cast<size_t>(t.n))};
  for (int64_t column = 0; column < t.n; ++column) {
    int64_t sum = 0, magnitude = 0;
    for (int64_t row = 0; row < t.k; ++row) {
      const float scaled = 127.0f * s * static_cast<float>(x[static_cast<size_t>(row)]);
      const auto code = static_cast<int64_t>(std::clamp(std::round(static_cast<double>(scaled)), -127.0, 127.0));
      sum += code * 16 * t.level(row, column);
      magnitude += std::abs(code * 16 * t.level(row, column));
    }
    const float scale = bf16_to_f32(f32_to_bf16(t.weight_scale[static_cast<size_t>(column)] / (127.0f * 112.0f) / s));
    p.y[static_cast<size_t>(column)] = static_cast<double>(sum) * scale;
    p.magnitude[static_cast<size_t>(column)] = static_cast<double>(magnitude) * scale;
  }
  return p;
}

TEST(W4a8Test, HadamardTransformMatchesItsDefinition) {
  std::mt19937 random(5);
  std::normal_distribution<float> normal;
  for (const int block : {2, 32, 128}) {
    std::vector<float> x(256);
    for (float& v : x) v = normal(random);
    const std::vector<double> expected = hadamard_by_definition(x, block);
    hadamard_transform_blocks(x.data(), 256, block);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], expected[i], 1e-4) << "block " << block << " index " << i;
  }
}

TEST(W4a8Test, ProductEqualsTheReleaseArithmetic) {
  for (const auto& [k, n, hadamard] : {std::tuple<int64_t, int64_t, int>{256, 40, 0}, {128, 33, 128}, {96, 16, 32}}) {
    const W4a8Tensors t = random_w4a8_tensors(k, n, static_cast<uint32_t>(k + n));
    // All of the matrix, and columns [3, n) as a fused tensor's second part.
    for (const int64_t first : {int64_t{0}, int64_t{3}}) {
      const WeightMatrix w = make_w4a8_weight(t.packed.data(), t.weight_scale.data(), t.activation_scale, hadamard, k,
                                              n, first, n - first);
      EXPECT_EQ(w.format, WeightFormat::kInt4);
      std::mt19937 random(7);
      std::normal_distribution<float> normal;
      const int64_t tokens = 5;
      std::vector<float> x(static_cast<size_t>(tokens * k));
      for (float& v : x) v = normal(random) * (hadamard > 0 ? 0.1f : 1.0f);
      x[3] = 40.0f;  // beyond the static absmax: clipped to 127
      // One token (decode's kernel) and all of them (prefill's); CTest runs this under
      // each ERNIE_ISA cap.
      for (const int64_t count : {int64_t{1}, tokens}) {
        std::vector<float> y(static_cast<size_t>(count * (n - first)));
        ThreadPool pool(2);
        matmul(pool, x.data(), count, w, y.data());
        for (int64_t token = 0; token < count; ++token) {
          const std::vector<float> row(x.begin() + token * k, x.begin() + (token + 1) * k);
          const std::vector<double> input = hadamard > 0 ? hadamard_by_definition(row, hadamard)
                                                          : std::vector<double>(row.begin(), row.end());
          const Product expected = release_product(t, input);
          for (int64_t c = first; c < n; ++c) {
            // The scales are the release's exactly; only the fp32 sum of the blocks rounds.
            const double want = expected.y[static_cast<size_t>(c)];
            EXPECT_NEAR(y[static_cast<size_t>(token * (n - first) + c - first)], want,
                        1e-6 * expected.magnitude[static_cast<size_t>(c)] + 1e-9)
                << "k " << k << " token " << token << " column " << c;
          }
        }
      }
    }
  }
}

// C's round: halves go away from zero, and values just below a half stay down.
TEST(W4a8Test, ActivationsRoundHalfAwayFromZero) {
  const float absmax = 2.0f, factor = 127.0f * (1.0f / absmax);
  std::vector<float> x;
  for (int n = -130; n <= 130; ++n) {
    const float tie = (static_cast<float>(n) + 0.5f) / factor;
    for (const float v : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 1e9f), std::nextafter(tie, -1e9f)})
      x.push_back(v);
  }
  x.resize(x.size() / 32 * 32);
  QuantizedActivations q;
  prepare_activations(1, static_cast<int64_t>(x.size()), 32, q);
  quantize_activation_token_static(x.data(), 0, absmax, 0, q);
  for (size_t i = 0; i < x.size(); ++i) {
    const float expected = std::clamp(std::round(factor * x[i]), -127.0f, 127.0f);
    ASSERT_EQ(q.values[i], static_cast<int8_t>(expected)) << "x " << x[i] << " scaled " << factor * x[i];
  }
  EXPECT_EQ(q.scales[0], w4a8_activation_block_scale(absmax));
}

TEST(W4a8Test, RefusesAScaleThatIsNotPositive) {
  const W4a8Tensors t = random_w4a8_tensors(64, 16, 1);
  for (const float bad : {0.0f, -1.0f, std::nanf("")})
    EXPECT_THROW(make_w4a8_weight(t.packed.data(), t.weight_scale.data(), bad, 0, 64, 16, 0, 16), Error);
}

}  // namespace
}  // namespace ernie
