// FastDeploy's WINT2 weights: ours against tools/ref_wint2_numpy.py, a numpy
// dequantizer written from the format's description, on random tensors in the
// checkpoint's layout; then the matmul kernel against the dequantized weights.
#include "kernels/wint2.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/matmul.h"
#include "kernels/quantize.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

struct Wint2Tensors {
  int64_t k = 0, n = 0;
  std::vector<uint8_t> quant_weight, weight_scale;
  std::vector<float> super_scales, code_scale, code_zp;
};

// Random tensors whose codes cover the whole 15-bit range, as a quantizer's would.
Wint2Tensors random_wint2_tensors(int64_t k, int64_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Wint2Tensors t;
  t.k = k;
  t.n = n;
  t.quant_weight.resize(static_cast<size_t>(k / 4 * n));
  t.weight_scale.resize(static_cast<size_t>(k / 128 * n));
  for (uint8_t& byte : t.quant_weight) byte = static_cast<uint8_t>(random() & 0xff);
  for (uint8_t& byte : t.weight_scale) byte = static_cast<uint8_t>(random() & 0xff);
  for (int64_t i = 0; i < n; ++i) {
    // bf16-exact super scales, so the checkpoint's bf16 is represented exactly.
    const float super = std::ldexp(std::round(unit(random) * 127.0f + 128.0f) / 256.0f, -9);
    t.super_scales.push_back(super);
    t.code_scale.push_back(100.0f + unit(random) * 28.0f);  // 255 * 128 stays inside 15 bits
    t.code_zp.push_back(unit(random) * 400.0f);
  }
  return t;
}

WeightMatrix matrix_of(const Wint2Tensors& t, int64_t first = 0, int64_t count = -1) {
  return make_wint2_weight(t.quant_weight.data(), t.weight_scale.data(), t.super_scales.data(), t.code_scale.data(),
                           t.code_zp.data(), t.k, t.n, first, count < 0 ? t.n : count);
}

TEST(Wint2Test, DequantizedWeightsEqualTheNumpyReferenceExactly) {
  const Wint2Tensors t = random_wint2_tensors(256, 48, 7);
  testing::TempDir dir;
  testing::write_raw_file(dir.file("quant_weight.u8"), t.quant_weight);
  testing::write_raw_file(dir.file("weight_scale.u8"), t.weight_scale);
  testing::write_raw_file(dir.file("super_scales.f32"), t.super_scales);
  testing::write_raw_file(dir.file("code_scale.f32"), t.code_scale);
  testing::write_raw_file(dir.file("code_zp.f32"), t.code_zp);
  const testing::CommandResult run = testing::run_shell(
      testing::python3() + " " + ERNIE_SOURCE_DIR "/tools/ref_wint2_numpy.py " + dir.path() + " 256 48");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<float> reference = testing::read_f32_file(dir.file("dequantized.f32"));  // [K, N]
  // Outputs 8..39 only: up_gate_proj's halves are slices like this one.
  const WeightMatrix w = matrix_of(t, 8, 32);
  const std::vector<float> ours = dequantize_weight(w);  // [32, K]
  int mismatches = 0;
  for (int64_t row = 0; row < 32; ++row)
    for (int64_t k = 0; k < 256; ++k)
      mismatches += ours[static_cast<size_t>(row * 256 + k)] != reference[static_cast<size_t>(k * 48 + 8 + row)];
  EXPECT_EQ(mismatches, 0) << "the product of a 6-bit level, a 4-bit scale and a bf16 scale is exact in float";
}

TEST(Wint2Test, MatmulEqualsTheDequantizedProductForDecodeAndPrefill) {
  const Wint2Tensors t = random_wint2_tensors(512, 96, 11);
  const WeightMatrix w = matrix_of(t);
  ThreadPool pool(2);
  std::mt19937 random(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n : {1, 3, 17}) {
    std::vector<float> x(static_cast<size_t>(n * 512));
    for (float& value : x) value = normal(random);
    std::vector<float> y(static_cast<size_t>(n * 96)), expected(y.size());
    matmul(pool, x.data(), n, w, y.data());
    matmul_reference(x.data(), n, w, expected.data());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - expected[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(expected[i])));
    }
    // fp32 sums of 512 products against double: well inside 1e-5 of the largest output.
    EXPECT_LT(worst, 1e-5 * scale) << n << " tokens";
  }
  EXPECT_EQ(weight_bytes(w), 96u * 512 / 4 + 96u * 8 + 96u * 12) << "2 bits a weight, a byte per 64-input group";
}

TEST(Wint2Test, InputsThatAreNotWholeScaleBytesAreRefused) {
  const Wint2Tensors t = random_wint2_tensors(128, 4, 1);
  EXPECT_NE(testing::error_message([&] {
              make_wint2_weight(t.quant_weight.data(), t.weight_scale.data(), t.super_scales.data(),
                                t.code_scale.data(), t.code_zp.data(), 64, 4, 0, 4);
            }).find("multiple of 128"),
            std::string::npos);
}

}  // namespace
}  // namespace ernie
