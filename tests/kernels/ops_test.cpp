#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/fast_exp.h"

namespace ernie {
namespace {

TEST(OpsTest, RmsNormMatchesTheFormula) {
  const float x[] = {1.0f, -2.0f, 3.0f, 0.5f};
  const float w[] = {1.0f, 0.5f, 2.0f, -1.0f};
  float y[4];
  rms_norm(x, 1, 4, w, 1e-5f, y);
  const double rms = std::sqrt((1 + 4 + 9 + 0.25) / 4.0 + 1e-5);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], w[i] * x[i] / rms, 1e-6);
}

// Rows of 8-value lane groups plus a remainder (h = 1027), two rows with different
// magnitudes, against the formula in double.
TEST(OpsTest, RmsNormOfLongRowsMatchesTheFormula) {
  constexpr int64_t kWidth = 1027;
  std::vector<float> x(2 * kWidth), w(kWidth), y(2 * kWidth);
  for (int64_t i = 0; i < kWidth; ++i) {
    x[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    x[static_cast<size_t>(kWidth + i)] = std::cos(0.11f * static_cast<float>(i)) * 0.01f;
    w[static_cast<size_t>(i)] = 0.5f + 0.001f * static_cast<float>(i);
  }
  rms_norm(x.data(), 2, kWidth, w.data(), 1e-6f, y.data());
  for (int64_t t = 0; t < 2; ++t) {
    double sum = 0;
    for (int64_t i = 0; i < kWidth; ++i) sum += double(x[static_cast<size_t>(t * kWidth + i)]) * x[static_cast<size_t>(t * kWidth + i)];
    const double rms = std::sqrt(sum / kWidth + 1e-6);
    for (int64_t i = 0; i < kWidth; ++i) {
      const double expected = w[static_cast<size_t>(i)] * x[static_cast<size_t>(t * kWidth + i)] / rms;
      ASSERT_NEAR(y[static_cast<size_t>(t * kWidth + i)], expected, 1e-6 * std::max(1.0, std::fabs(expected))) << t << "," << i;
    }
  }
}

// RoPE at `position`, through the two steps the model uses.
void apply_rope(float* heads, int num_heads, int head_dim, float position, const float* inv_freq) {
  std::vector<float> cos_sin(static_cast<size_t>(head_dim));
  rope_rotation(position, head_dim, inv_freq, cos_sin.data());
  apply_rope_rotation(heads, num_heads, head_dim, cos_sin.data());
}

TEST(OpsTest, RopeRotatesAdjacentPairsNotHalves) {
  // head_dim 4, theta 10000: pair 0 turns by pos * 1, pair 1 by pos * 10000^(-1/2).
  const std::vector<float> inv_freq = rope_inverse_frequencies(4, 10000.0);
  ASSERT_EQ(inv_freq.size(), 2u);
  EXPECT_FLOAT_EQ(inv_freq[0], 1.0f);
  EXPECT_FLOAT_EQ(inv_freq[1], 0.01f);
  float head[] = {1.0f, 0.0f, 0.0f, 1.0f};
  apply_rope(head, 1, 4, 3.0f, inv_freq.data());
  EXPECT_NEAR(head[0], std::cos(3.0), 1e-6);   // (1, 0) rotated by 3 rad
  EXPECT_NEAR(head[1], std::sin(3.0), 1e-6);
  EXPECT_NEAR(head[2], -std::sin(0.03), 1e-6);  // (0, 1) rotated by 0.03 rad
  EXPECT_NEAR(head[3], std::cos(0.03), 1e-6);
}

TEST(OpsTest, RopeAtPositionZeroIsIdentityAndAppliesToEveryHead) {
  const std::vector<float> inv_freq = rope_inverse_frequencies(2, 500000.0);
  float heads[] = {0.5f, -1.5f, 2.0f, 3.0f};
  apply_rope(heads, 2, 2, 0.0f, inv_freq.data());
  EXPECT_EQ(heads[0], 0.5f);
  EXPECT_EQ(heads[3], 3.0f);
  apply_rope(heads, 2, 2, 1.0f, inv_freq.data());
  EXPECT_NEAR(heads[2], 2.0 * std::cos(1.0) - 3.0 * std::sin(1.0), 1e-6);
}

// The model's shapes (16 query heads of 128), where the clones take the vector path, and an
// odd pair count that leaves a tail: each pair against the rotation in double precision.
TEST(OpsTest, RopeRotationMatchesTheDoublePrecisionRotationAtModelWidths) {
  for (const int head_dim : {128, 14}) {
    const int heads = 16, pairs = head_dim / 2;
    std::vector<float> cos_sin(static_cast<size_t>(head_dim)), x(static_cast<size_t>(heads * head_dim));
    for (int i = 0; i < pairs; ++i) {
      const double angle = 0.37 * (i + 1);
      cos_sin[static_cast<size_t>(2 * i)] = static_cast<float>(std::cos(angle));
      cos_sin[static_cast<size_t>(2 * i + 1)] = static_cast<float>(std::sin(angle));
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)) * 3.0);
    std::vector<float> y = x;
    apply_rope_rotation(y.data(), heads, head_dim, cos_sin.data());
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < pairs; ++i) {
        const size_t at = static_cast<size_t>(h * head_dim + 2 * i);
        const double c = cos_sin[static_cast<size_t>(2 * i)], s = cos_sin[static_cast<size_t>(2 * i + 1)];
        const double even = x[at], odd = x[at + 1];
        // Two products and a sum in float: a few ulps of the operands' size (|x| <= 3).
        EXPECT_NEAR(y[at], even * c - odd * s, 3e-6) << head_dim << ": head " << h << " pair " << i;
        EXPECT_NEAR(y[at + 1], odd * c + even * s, 3e-6) << head_dim << ": head " << h << " pair " << i;
      }
  }
}

TEST(OpsTest, Rope3dTurnsPairsByHeightWidthAndTime) {
  // head_dim 12: 6 pairs; freq_allocation 2 leaves pairs 0-3 to h, w, h, w and 4-5 to t.
  const std::vector<float> inv_freq = rope_inverse_frequencies(12, 10000.0);
  std::vector<float> cos_sin(12);
  rope_rotation_3d(3.0f, 5.0f, 7.0f, 12, 2, inv_freq.data(), cos_sin.data());
  const float axis[] = {5, 7, 5, 7, 3, 3};
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(cos_sin[2 * i], std::cos(axis[i] * inv_freq[i]), 1e-6) << "pair " << i;
    EXPECT_NEAR(cos_sin[2 * i + 1], std::sin(axis[i] * inv_freq[i]), 1e-6) << "pair " << i;
  }
  // On the diagonal it is the 1-D rotation.
  std::vector<float> one_d(12);
  rope_rotation(4.0f, 12, inv_freq.data(), one_d.data());
  rope_rotation_3d(4.0f, 4.0f, 4.0f, 12, 2, inv_freq.data(), cos_sin.data());
  EXPECT_EQ(cos_sin, one_d);
}

TEST(OpsTest, LayerNormAndGelus) {
  const float x[] = {1.0f, -2.0f, 3.0f, 0.5f};
  const float w[] = {1.0f, 0.5f, 2.0f, -1.0f};
  const float b[] = {0.0f, 0.25f, -1.0f, 2.0f};
  float y[4];
  layer_norm(x, 1, 4, w, b, 1e-6f, y);
  const double mean = 2.5 / 4, var = ((1 - mean) * (1 - mean) + (-2 - mean) * (-2 - mean) + (3 - mean) * (3 - mean) +
                                      (0.5 - mean) * (0.5 - mean)) / 4;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], (x[i] - mean) / std::sqrt(var + 1e-6) * w[i] + b[i], 1e-6);
  // quick_gelu(x) = x·σ(1.702x); GELU(x) = x·Φ(x): Φ(1) = 0.841344746, Φ(-2) = 0.022750132.
  float quick[] = {0.0f, 1.0f, -2.0f, 30.0f, -30.0f};
  quick_gelu(quick, 5);
  EXPECT_EQ(quick[0], 0.0f);
  EXPECT_NEAR(quick[1], 1.0 / (1.0 + std::exp(-1.702)), 1e-6);
  EXPECT_NEAR(quick[2], -2.0 / (1.0 + std::exp(3.404)), 1e-6);
  EXPECT_NEAR(quick[3], 30.0f, 1e-5);
  EXPECT_NEAR(quick[4], 0.0f, 1e-5);
  float exact[] = {1.0f, -2.0f};
  gelu_erf(exact, 2);
  EXPECT_NEAR(exact[0], 0.841344746, 1e-6);
  EXPECT_NEAR(exact[1], -2.0 * 0.022750132, 1e-6);
}

TEST(OpsTest, SiluMulAndSoftmax) {
  float gate[] = {0.0f, 1.0f, -2.0f};
  const float up[] = {5.0f, 2.0f, 1.0f};
  silu_mul(gate, up, 3);
  EXPECT_EQ(gate[0], 0.0f);
  EXPECT_NEAR(gate[1], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(gate[2], -2.0 / (1.0 + std::exp(2.0)), 1e-6);

  float values[] = {1000.0f, 1001.0f, 999.0f};  // large values must not overflow
  softmax(values, 3);
  const double denominator = std::exp(-1.0) + 1.0 + std::exp(-2.0);
  EXPECT_NEAR(values[1], 1.0 / denominator, 1e-6);
  EXPECT_NEAR(values[0] + values[1] + values[2], 1.0, 1e-6);
}

// The activations run 8 values at a time with a scalar remainder: every position of a
// 45-value row (5 full lane groups and 5 left over) against the formula in double, over
// the range where exp under- and overflows.
TEST(OpsTest, SiluMulAndQuickGeluMatchTheFormulaInLanesAndRemainder) {
  constexpr int kCount = 45;
  float gate[kCount], up[kCount], quick[kCount];
  for (int i = 0; i < kCount; ++i) {
    gate[i] = -100.0f + 200.0f * static_cast<float>(i) / (kCount - 1) + 0.37f;
    up[i] = 0.5f + 0.03f * static_cast<float>(i);
    quick[i] = gate[i] / 4.0f;
  }
  float silu[kCount];
  std::copy(gate, gate + kCount, silu);
  silu_mul(silu, up, kCount);
  float gelu[kCount];
  std::copy(quick, quick + kCount, gelu);
  quick_gelu(gelu, kCount);
  for (int i = 0; i < kCount; ++i) {
    const double g = gate[i], q = quick[i];
    const double silu_expected = g / (1.0 + std::exp(-g)) * up[i];
    const double gelu_expected = q / (1.0 + std::exp(-1.702 * q));
    EXPECT_NEAR(silu[i], silu_expected, 1e-6 * std::max(1.0, std::fabs(silu_expected))) << "at " << i;
    EXPECT_NEAR(gelu[i], gelu_expected, 1e-6 * std::max(1.0, std::fabs(gelu_expected))) << "at " << i;
  }
}

}  // namespace
}  // namespace ernie

namespace ernie {
namespace {

// fast_exp (used by silu_mul) against std::exp in double over the range activations
// reach, and at the ends where it must give 0 and +inf. The error grows with |x|:
// x·log2(e) is rounded to fp32 (2^-24 relative), which at |x| = 80 is 4e-6 of the result.
TEST(FastExpTest, MatchesExpWithinAFewUlp) {
  double worst = 0;
  for (float x = -80.0f; x <= 80.0f; x += 0.01237f) {
    const double exact = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(fast_exp(x) - exact) / exact);
  }
  EXPECT_LT(worst, 5e-6);
  EXPECT_EQ(fast_exp(-200.0f), 0.0f);
  EXPECT_TRUE(std::isinf(fast_exp(200.0f)));
  EXPECT_FLOAT_EQ(fast_exp(0.0f), 1.0f);
}

}  // namespace
}  // namespace ernie
