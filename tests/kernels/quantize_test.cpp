#include "kernels/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "kernels/matmul.h"
#include "kernels/random_operands.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

using testing::OwnedDense;
using testing::random_activations;
using testing::random_bf16;

TEST(Fp8Test, KnownEncodings) {
  EXPECT_EQ(f32_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(f32_to_e4m3(-2.0f), 0xc0);
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7e);                   // saturates
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -9)), 0x01);  // smallest subnormal
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -11)), 0x00);  // below half of it
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);  // halfway between 1 and 1.125: ties to even
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);  // halfway between 1.125 and 1.25: ties to even (1.25)
  EXPECT_FLOAT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_FLOAT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_FLOAT_EQ(e4m3_to_f32(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
}

TEST(Fp8Test, EveryCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f || code == 0x80) continue;  // NaN; -0 encodes as +0's sign twin
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(code))), code) << code;
  }
}

TEST(QuantizeTest, GroupSizes) {
  EXPECT_EQ(integer_group_size(1024), 32);
  EXPECT_EQ(integer_group_size(96), 32);
  EXPECT_EQ(integer_group_size(100), 0);
  const OwnedDense odd = random_bf16(4, 100, 1);
  EXPECT_FALSE(can_quantize(odd.matrix, WeightFormat::kInt8));
  EXPECT_TRUE(can_quantize(odd.matrix, WeightFormat::kFp8));
  EXPECT_THROW(quantize_weight(odd.matrix, WeightFormat::kInt4), Error);
}

TEST(QuantizeTest, FormatNames) {
  EXPECT_EQ(parse_weight_format("wint8"), WeightFormat::kInt8);
  EXPECT_EQ(parse_weight_format("wint4"), WeightFormat::kInt4);
  EXPECT_EQ(parse_weight_format("block_wise_fp8"), WeightFormat::kFp8);
  EXPECT_EQ(parse_weight_format("bf16"), WeightFormat::kDense);
  EXPECT_FALSE(parse_weight_format("wint3").has_value());
}

// Each stored value is within half a quantization step of the original, except int4 and
// int6 values at the ends of their code ranges ([-8, 7], [-32, 31]): the error-minimising
// scale may clip a block's outliers, by at most the 1/8 it shrinks the range plus the
// missing top code (within 2 steps at int4, 5 at int6).
// A copy owns bytes of its own, equal to the original's, in the layout the kernels read:
// it dequantizes to the very same values after the original's storage is gone.
TEST(QuantizeTest, ACopyOwnsTheSameBytes) {
  const OwnedDense dense = random_bf16(37, 256, 2, 41);
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kInt6, WeightFormat::kFp8}) {
    WeightMatrix original = quantize_weight(dense.matrix, format);
    const std::vector<float> expected = dequantize_weight(original);
    const WeightMatrix copy = copy_quantized_weight(original);
    EXPECT_NE(copy.data, original.data) << weight_format_name(format);
    EXPECT_NE(copy.storage, nullptr) << weight_format_name(format);
    original = WeightMatrix{};  // frees the original's bytes
    EXPECT_EQ(dequantize_weight(copy), expected) << weight_format_name(format);
  }
  EXPECT_THROW(copy_quantized_weight(dense.matrix), Error);
}

TEST(QuantizeTest, DequantizedValuesAreWithinHalfAStep) {
  const int64_t rows = 37, cols = 256;
  const OwnedDense dense = random_bf16(rows, cols, 2, 97);
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kInt6, WeightFormat::kFp8}) {
    const WeightMatrix q = quantize_weight(dense.matrix, format);
    const std::vector<float> back = dequantize_weight(q);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) {
        const float original = dense.values[static_cast<size_t>(r * cols + k)];
        const float restored = back[static_cast<size_t>(r * cols + k)];
        float step = 0;
        if (format == WeightFormat::kFp8) {
          // Half an ulp of a 3-bit mantissa, or half the subnormal step of the block.
          const float block_scale = q.fp8_scales()[(r / kFp8Block) * 2 + k / kFp8Block];
          step = std::max(std::fabs(original) / 8.0f, std::ldexp(1.0f, -9) * block_scale);
        } else {
          const float scale = integer_scale(q, r, k / q.group);
          step = std::fabs(scale);
          const float code = restored / scale;
          if (format == WeightFormat::kInt4 && (code < -7.5f || code > 6.5f)) step *= 4;
          if (format == WeightFormat::kInt6 && (code < -31.5f || code > 30.5f)) step *= 10;
        }
        ASSERT_LE(std::fabs(restored - original), step / 2 * 1.0001f + 1e-12f)
            << weight_format_name(format) << " r=" << r << " k=" << k;
      }
    }
  }
}

// int4 picks each block's scale to minimise its squared error: on Gaussian weights that
// beats mapping the block's extreme to -8 (Q4_0's rule, computed here independently
// from the same bf16 values) by about 12% in squared error.
TEST(QuantizeTest, Int4ScalesBeatAbsmaxScales) {
  const int64_t rows = 64, cols = 512;
  const OwnedDense dense = random_bf16(rows, cols, 5);
  const WeightMatrix q = quantize_weight(dense.matrix, WeightFormat::kInt4);
  const std::vector<float> back = dequantize_weight(q);
  double ours = 0, absmax = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b) {
      const float* w = dense.values.data() + r * cols + b * 32;
      float extreme = 0;
      for (int k = 0; k < 32; ++k)
        if (std::fabs(w[k]) > std::fabs(extreme)) extreme = w[k];
      const float scale = extreme / -8.0f;
      for (int k = 0; k < 32; ++k) {
        const float code = std::clamp(std::nearbyint(w[k] / scale), -8.0f, 7.0f);
        absmax += std::pow(w[k] - code * scale, 2);
        ours += std::pow(w[k] - back[static_cast<size_t>(r * cols + b * 32 + k)], 2);
      }
    }
  EXPECT_LT(ours, 0.93 * absmax) << ours / absmax;  // measured 0.88
}

// The int6 layout against tools/ref_int6_numpy.py, which decodes the packed bytes and
// scales from the format's description and checks that each code is its weight's
// rounding at the stored scale and that the scales beat the absmax rule. Rows 37 (not a
// whole panel, so padding is checked too) by 224 (7 blocks: the last scale line half
// used), trained-like outliers included.
TEST(QuantizeTest, Int6MatchesTheNumpyDecoderExactly) {
  const int64_t rows = 37, cols = 224;
  const OwnedDense dense = random_bf16(rows, cols, 23, 97);
  const WeightMatrix q = quantize_weight(dense.matrix, WeightFormat::kInt6);
  testing::TempDir dir;
  testing::write_raw_file(dir.file("original.f32"), dense.values);
  testing::write_raw_file(dir.file("packed.u8"), q.data, packed_value_bytes(q));
  const testing::CommandResult run = testing::run_shell(testing::python3() + " " + ERNIE_SOURCE_DIR
                                                        "/tools/ref_int6_numpy.py " + dir.path() + " 37 224");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<float> reference = testing::read_f32_file(dir.file("dequantized.f32"));
  const std::vector<float> ours = dequantize_weight(q);
  ASSERT_EQ(reference.size(), ours.size());
  int mismatches = 0;
  for (size_t i = 0; i < ours.size(); ++i) mismatches += ours[i] != reference[i];
  EXPECT_EQ(mismatches, 0) << "a 6-bit level times an fp16 scale is exact in float";
}

// int6 sits between int8 and int4 in squared error: about 16 times below int4's (two
// more bits) and 16 times above int8's, on the same Gaussian weights.
TEST(QuantizeTest, Int6ErrorLiesBetweenInt8AndInt4) {
  const int64_t rows = 64, cols = 512;
  const OwnedDense dense = random_bf16(rows, cols, 31);
  double error[3] = {};
  const WeightFormat formats[3] = {WeightFormat::kInt8, WeightFormat::kInt6, WeightFormat::kInt4};
  for (int f = 0; f < 3; ++f) {
    const std::vector<float> back = dequantize_weight(quantize_weight(dense.matrix, formats[f]));
    for (size_t i = 0; i < back.size(); ++i) error[f] += std::pow(back[i] - dense.values[i], 2);
  }
  EXPECT_GT(error[1], 4 * error[0]) << error[1] / error[0];
  EXPECT_LT(error[1], error[2] / 8) << error[2] / error[1];
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;  // n, rows, cols

class QuantizedMatmulTest : public ::testing::TestWithParam<WeightFormat> {};

// The fast kernels (VNNI here, the portable one under ERNIE_ISA=generic/avx2) against
// the double reference on the same quantized operands: only float rounding differs.
TEST_P(QuantizedMatmulTest, MatchesTheReferenceOnOddShapes) {
  ThreadPool pool(2);
  for (const auto& [n, rows, cols] : {Shape{1, 16, 32}, Shape{1, 7, 96}, Shape{2, 300, 1024}, Shape{3, 33, 192},
                                      Shape{5, 100, 128}, Shape{17, 64, 384}, Shape{130, 50, 256},
                                      Shape{130, 256, 128}, Shape{20, 256, 96}, Shape{3, 256, 96}, Shape{130, 64, 160}}) {
    const OwnedDense dense = random_bf16(rows, cols, static_cast<uint64_t>(rows * cols));
    const WeightMatrix q = quantize_weight(dense.matrix, GetParam());
    const std::vector<float> x = random_activations(n, cols, static_cast<uint64_t>(n + cols));
    std::vector<float> fast(static_cast<size_t>(n * rows)), reference(fast.size());
    matmul(pool, x.data(), n, q, fast.data());
    matmul_reference(x.data(), n, q, reference.data());
    // fp32 accumulation over `cols` products of O(0.05) weights and O(1) inputs.
    const double tolerance = 2e-6 * std::sqrt(static_cast<double>(cols)) * 8.0;
    for (size_t i = 0; i < fast.size(); ++i)
      ASSERT_NEAR(fast[i], reference[i], tolerance * (1.0 + std::fabs(reference[i])))
          << weight_format_name(GetParam()) << " n=" << n << " rows=" << rows << " cols=" << cols << " i=" << i;
  }
}

// The largest codes against the largest activations: whole blocks of +-1 weights (int8
// +-127, int4 code 15 or 0, int6 63 or 0) times blocks of +-1 inputs (+-127), where a kernel that sums
// in 16 bits (AVX2's vpmaddubsw path) would saturate if it summed too long.
TEST_P(QuantizedMatmulTest, ExtremeCodesDoNotSaturate) {
  ThreadPool pool(2);
  const int64_t n = 6, rows = 32, cols = 256;
  OwnedDense dense = random_bf16(rows, cols, 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k)
      dense.bits[static_cast<size_t>(r * cols + k)] = f32_to_bf16(((r + k / 32) % 3 == 0) ? -1.0f : 1.0f);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < cols; ++k) x[static_cast<size_t>(t * cols + k)] = ((t + k / 64) % 4 == 0) ? -1.0f : 1.0f;
  const WeightMatrix q = quantize_weight(dense.matrix, GetParam());
  std::vector<float> fast(static_cast<size_t>(n * rows)), reference(fast.size());
  matmul(pool, x.data(), n, q, fast.data());
  matmul_reference(x.data(), n, q, reference.data());
  double largest = 0;
  for (size_t i = 0; i < fast.size(); ++i) {
    ASSERT_NEAR(fast[i], reference[i], 1e-4 * (1.0 + std::fabs(reference[i]))) << weight_format_name(GetParam()) << " i=" << i;
    largest = std::max(largest, std::fabs(static_cast<double>(reference[i])));
  }
  EXPECT_GT(largest, 100.0) << "the operands must add up, not cancel";
}

// Quantized products stay close to the bf16 product: relative RMS error bounds that
// follow from the step sizes (int8 ~0.5%, fp8 ~3%, int4 group-wise ~10% on Gaussian data).
TEST_P(QuantizedMatmulTest, StaysCloseToTheBf16Product) {
  ThreadPool pool(2);
  const int64_t n = 9, rows = 70, cols = 512;
  const OwnedDense dense = random_bf16(rows, cols, 11);
  const WeightMatrix q = quantize_weight(dense.matrix, GetParam());
  const std::vector<float> x = random_activations(n, cols, 12);
  std::vector<float> exact(static_cast<size_t>(n * rows)), quantized(exact.size());
  matmul_reference(x.data(), n, dense.matrix, exact.data());
  matmul(pool, x.data(), n, q, quantized.data());
  double error = 0, norm = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    error += (quantized[i] - exact[i]) * (quantized[i] - exact[i]);
    norm += exact[i] * exact[i];
  }
  const double relative = std::sqrt(error / norm);
  const double bound = GetParam() == WeightFormat::kInt8  ? 0.015
                       : GetParam() == WeightFormat::kFp8 ? 0.06
                       : GetParam() == WeightFormat::kInt6 ? 0.04
                                                           : 0.15;
  EXPECT_LT(relative, bound) << weight_format_name(GetParam());
  EXPECT_GT(relative, 0.0) << "quantization must change something";
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedMatmulTest,
                         ::testing::Values(WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kInt6, WeightFormat::kFp8),
                         [](const auto& test_info) { return std::string(weight_format_name(test_info.param)); });

TEST(QuantizeTest, ActivationBlocksAreExact) {
  const std::vector<float> x = {0.0f, 0.25f, -2.0f, 0.5f};
  std::vector<float> wide(64, 0.0f);
  std::copy(x.begin(), x.end(), wide.begin());
  QuantizedActivations q;
  quantize_activations(wide.data(), 2, 32, 32, q);
  EXPECT_FLOAT_EQ(q.scales[0], 2.0f / 127.0f);
  EXPECT_EQ(q.values[2], -127);
  EXPECT_EQ(q.values[1], 16);  // 15.875
  EXPECT_EQ(q.sums[0], 0 + 16 - 127 + 32);
  EXPECT_EQ(q.scales[1], 0.0f);  // an all-zero block
  EXPECT_EQ(q.sums[1], 0);
}

// Activation blocks against a scalar oracle: max|x| / 127 as the scale, each value
// times its inverse rounded to nearest even. Every ISA path (this binary also runs under
// ERNIE_ISA=generic and avx2) must give exactly these codes, sums and scales.
TEST(QuantizeTest, ActivationCodesEqualTheScalarRounding) {
  const int64_t n = 3, cols = 256;
  std::vector<float> x = random_activations(n, cols, 21);
  for (size_t i = 0; i < x.size(); i += 7) x[i] = std::nearbyint(x[i] * 4) / 4;  // ties after scaling are likelier
  x[40] = 0.0f;
  QuantizedActivations q;
  quantize_activations(x.data(), n, cols, 32, q);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t b = 0; b < cols / 32; ++b) {
      const float* in = x.data() + t * cols + b * 32;
      float m = 0;
      for (int k = 0; k < 32; ++k) m = std::max(m, std::fabs(in[k]));
      const float scale = m / 127.0f, inverse = scale > 0 ? 1.0f / scale : 0.0f;
      ASSERT_EQ(q.scales[static_cast<size_t>(t * (cols / 32) + b)], scale);
      int32_t sum = 0;
      for (int k = 0; k < 32; ++k) {
        const auto code = static_cast<int8_t>(std::clamp(std::nearbyint(in[k] * inverse), -127.0f, 127.0f));
        ASSERT_EQ(q.values[static_cast<size_t>(t * cols + b * 32 + k)], code) << "t=" << t << " k=" << b * 32 + k;
        sum += code;
      }
      ASSERT_EQ(q.sums[static_cast<size_t>(t * (cols / 32) + b)], sum);
    }
}

}  // namespace
}  // namespace ernie

namespace ernie {
namespace {

// Weights sharing one input (q, k, v) give in one grouped call exactly what separate
// calls give, for the integer, bf16-decode and mixed (fallback) cases.
TEST(MatmulSharedInputTest, EqualsSeparateCalls) {
  ThreadPool pool(2);
  const OwnedDense a = random_bf16(300, 256, 21), b = random_bf16(40, 256, 22), c = random_bf16(17, 256, 23);
  for (int64_t n : {1, 5, 40}) {
    for (int mode = 0; mode < 3; ++mode) {
      const WeightFormat format = mode == 0 ? WeightFormat::kInt8 : mode == 1 ? WeightFormat::kDense : WeightFormat::kInt4;
      const WeightMatrix wa = quantize_weight(a.matrix, format);
      const WeightMatrix wb = quantize_weight(b.matrix, format);
      // The mixed case: the third weight in another format, so the call falls back.
      const WeightMatrix wc = quantize_weight(c.matrix, mode == 2 ? WeightFormat::kInt8 : format);
      const std::vector<float> x = random_activations(n, 256, static_cast<uint64_t>(n));
      std::vector<float> ya(static_cast<size_t>(n * 300)), yb(static_cast<size_t>(n * 40)), yc(static_cast<size_t>(n * 17));
      MatmulInput input;
      input.reset(x.data(), n, 256);
      const WeightMatrix* ws[] = {&wa, &wb, &wc};
      float* ys[] = {ya.data(), yb.data(), yc.data()};
      matmul_shared_input(pool, input, ws, ys);
      for (int i = 0; i < 3; ++i) {
        std::vector<float> alone(static_cast<size_t>(n * ws[i]->rows));
        matmul(pool, x.data(), n, *ws[i], alone.data());
        EXPECT_EQ(alone, std::vector<float>(ys[i], ys[i] + n * ws[i]->rows)) << "n=" << n << " mode=" << mode << " weight " << i;
      }
    }
  }
}

// A MoE step's experts as one batch: each weight with its own input (an input shared by
// two weights, as an expert's gate and up), int8, int4 and int6 mixed, a weight whose
// input has no tokens, and 1 to 3 tokens per expert as decode batches route them. Each
// output is bitwise what its own matmul gives; with a bf16 weight in the batch it falls
// back to one call after another, with the same results.
TEST(MatmulBatchTest, EqualsSeparateCalls) {
  ThreadPool pool(2);
  const OwnedDense a = random_bf16(96, 256, 31), b = random_bf16(96, 256, 32), c = random_bf16(256, 96, 33);
  const OwnedDense d = random_bf16(40, 256, 34), e = random_bf16(17, 96, 35);
  for (const bool with_dense : {false, true}) {
    const WeightMatrix wa = quantize_weight(a.matrix, WeightFormat::kInt4);
    const WeightMatrix wb = quantize_weight(b.matrix, WeightFormat::kInt4);
    const WeightMatrix wc = quantize_weight(c.matrix, WeightFormat::kInt8);
    const WeightMatrix wd = quantize_weight(d.matrix, with_dense ? WeightFormat::kDense : WeightFormat::kInt6);
    const WeightMatrix we = quantize_weight(e.matrix, WeightFormat::kInt8);
    const std::vector<float> x1 = random_activations(2, 256, 41), x2 = random_activations(3, 96, 42);
    const std::vector<float> x3 = random_activations(1, 256, 43);
    MatmulInput shared, own, single, empty;
    shared.reset(x1.data(), 2, 256);
    own.reset(x2.data(), 3, 96);
    single.reset(x3.data(), 1, 256);
    empty.reset(x2.data(), 0, 96);
    MatmulInput* inputs[] = {&shared, &shared, &own, &single, &empty};
    const WeightMatrix* ws[] = {&wa, &wb, &wc, &wd, &we};
    std::vector<float> ys[5];
    float* outputs[5];
    for (int i = 0; i < 5; ++i) {
      ys[i].assign(static_cast<size_t>(inputs[i]->n() * ws[i]->rows), -1.0f);
      outputs[i] = ys[i].data();
    }
    matmul_batch(pool, inputs, ws, outputs);
    for (int i = 0; i < 5; ++i) {
      std::vector<float> alone(ys[i].size());
      matmul(pool, inputs[i]->x(), inputs[i]->n(), *ws[i], alone.data());
      EXPECT_EQ(alone, ys[i]) << "weight " << i << (with_dense ? " (with a dense weight)" : "");
    }
  }
  MatmulInput wrong;
  const std::vector<float> x = random_activations(1, 96, 44);
  wrong.reset(x.data(), 1, 96);
  const WeightMatrix wa = quantize_weight(a.matrix, WeightFormat::kInt8);
  MatmulInput* inputs[] = {&wrong};
  const WeightMatrix* ws[] = {&wa};
  std::vector<float> y(96);
  float* outputs[] = {y.data()};
  EXPECT_THROW(matmul_batch(pool, inputs, ws, outputs), Error);
}

}  // namespace
}  // namespace ernie
