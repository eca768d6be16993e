#include "kernels/matmul_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"
#include "kernels/random_operands.h"
#include "util/error.h"

namespace ernie {
namespace {

using testing::OwnedDense;
using testing::random_activations;
using testing::random_bf16;

// Shapes around every boundary of the layout: odd inputs (a padded pair), rows short of
// a group, of a panel, and several panels with a short last one.
constexpr std::tuple<int64_t, int64_t> kShapes[] = {{1, 1}, {7, 33}, {16, 2}, {19, 70}, {64, 64}, {130, 256},
                                                    {37, 129}, {200, 1000}};

TEST(MatmulBf16Test, PackingKeepsEveryValue) {
  for (const auto& [rows, cols] : kShapes) {
    const OwnedDense dense = random_bf16(rows, cols, static_cast<uint64_t>(rows * 1000 + cols));
    const WeightMatrix packed = pack_bf16_weight(dense.matrix);
    EXPECT_EQ(packed.format, WeightFormat::kBf16Packed);
    EXPECT_EQ(weight_bytes(packed), packed_bf16_bytes(rows, cols));
    std::vector<uint16_t> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      unpack_bf16_row(packed, r, row.data());
      ASSERT_EQ(0, std::memcmp(row.data(), dense.bits.data() + r * cols, row.size() * 2)) << rows << "x" << cols << " r=" << r;
    }
    EXPECT_EQ(dequantize_weight(packed), dense.matrix.to_f32());
  }
}

TEST(MatmulBf16Test, OnlyDenseBf16Packs) {
  OwnedDense dense = random_bf16(4, 64, 1);
  EXPECT_TRUE(can_quantize(dense.matrix, WeightFormat::kBf16Packed));
  WeightMatrix f32 = dense.matrix;
  f32.dtype = DType::kF32;
  EXPECT_FALSE(can_pack_bf16(f32));
  EXPECT_THROW(pack_bf16_weight(quantize_weight(dense.matrix, WeightFormat::kInt8)), Error);
}

// A packed matrix quantizes to exactly what its dense form does (the MTP draft head is
// made from the packed LM head).
TEST(MatmulBf16Test, QuantizingAPackedMatrixEqualsQuantizingItsSource) {
  const OwnedDense dense = random_bf16(40, 128, 3);
  const WeightMatrix packed = pack_bf16_weight(dense.matrix);
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kFp8}) {
    EXPECT_EQ(dequantize_weight(quantize_weight(packed, format)), dequantize_weight(quantize_weight(dense.matrix, format)))
        << weight_format_name(format);
  }
}

// The product rounds activations to bf16 and sums exact bf16 x bf16 products in fp32,
// so against matmul_reference (double sums over the same rounded activations) only fp32
// accumulation error remains, with vdpbf16ps or without (the ISA-capped runs of this
// suite take the portable path).
TEST(MatmulBf16Test, MatchesTheReferenceOnRoundedActivations) {
  ThreadPool pool(2);
  for (const auto& [rows, cols] : kShapes) {
    for (int64_t n : {1, 2, 3, 7, 17, 70}) {
      const OwnedDense dense = random_bf16(rows, cols, static_cast<uint64_t>(rows + cols));
      const WeightMatrix packed = pack_bf16_weight(dense.matrix);
      const std::vector<float> x = random_activations(n, cols, static_cast<uint64_t>(n));
      std::vector<float> fast(static_cast<size_t>(n * rows)), reference(fast.size()), unrounded(fast.size());
      matmul(pool, x.data(), n, packed, fast.data());
      matmul_reference(x.data(), n, packed, reference.data());
      matmul_reference(x.data(), n, dense.matrix, unrounded.data());
      const double tolerance = 2e-6 * std::sqrt(static_cast<double>(cols)) * 8.0;
      double moved = 0;
      for (size_t i = 0; i < fast.size(); ++i) {
        ASSERT_NEAR(fast[i], reference[i], tolerance * (1.0 + std::fabs(reference[i])))
            << "n=" << n << " rows=" << rows << " cols=" << cols << " i=" << i;
        moved = std::max(moved, std::fabs(static_cast<double>(fast[i]) - unrounded[i]));
      }
      // The rounding is real: on wide rows it moves results beyond the fp32 tolerance.
      if (cols >= 256) {
        EXPECT_GT(moved, tolerance) << "cols=" << cols;
      }
    }
  }
}

// A token's result is bitwise the same alone and among others (tiles of 1..6 tokens,
// streamed or not, any thread split).
TEST(MatmulBf16Test, ATokensResultDoesNotDependOnItsBatch) {
  ThreadPool pool(2);
  const OwnedDense dense = random_bf16(200, 333, 5);
  const WeightMatrix packed = pack_bf16_weight(dense.matrix);
  constexpr int64_t kTokens = 77;
  const std::vector<float> x = random_activations(kTokens, 333, 6);
  std::vector<float> together(static_cast<size_t>(kTokens * 200)), alone(200);
  matmul(pool, x.data(), kTokens, packed, together.data());
  for (int64_t t = 0; t < kTokens; ++t) {
    matmul(pool, x.data() + t * 333, 1, packed, alone.data());
    ASSERT_EQ(0, std::memcmp(alone.data(), together.data() + t * 200, alone.size() * sizeof(float))) << "token " << t;
  }
}

// Weights that share an input (q, k, v) go through matmul_shared_input as one loop; each
// output is bitwise what its own matmul gives, whatever the weights' row counts.
TEST(MatmulBf16Test, SharedInputGroupEqualsEachWeightAlone) {
  ThreadPool pool(2);
  constexpr int64_t kCols = 129;
  const OwnedDense a = random_bf16(130, kCols, 11), b = random_bf16(19, kCols, 12), c = random_bf16(64, kCols, 13);
  const WeightMatrix packed[] = {pack_bf16_weight(a.matrix), pack_bf16_weight(b.matrix), pack_bf16_weight(c.matrix)};
  for (int64_t n : {1, 2, 3, 70}) {
    const std::vector<float> x = random_activations(n, kCols, static_cast<uint64_t>(20 + n));
    std::vector<float> grouped[3], alone(static_cast<size_t>(n * 130));
    for (int i = 0; i < 3; ++i) grouped[i].assign(static_cast<size_t>(n * packed[i].rows), -1.0f);
    const WeightMatrix* ws[] = {&packed[0], &packed[1], &packed[2]};
    float* ys[] = {grouped[0].data(), grouped[1].data(), grouped[2].data()};
    MatmulInput input;
    input.reset(x.data(), n, kCols);
    matmul_shared_input(pool, input, ws, ys);
    for (int i = 0; i < 3; ++i) {
      matmul(pool, x.data(), n, packed[i], alone.data());
      ASSERT_EQ(0, std::memcmp(alone.data(), grouped[i].data(), grouped[i].size() * sizeof(float)))
          << "n=" << n << " weight " << i;
    }
  }
  const OwnedDense narrow = random_bf16(8, 64, 14);
  const WeightMatrix other = pack_bf16_weight(narrow.matrix);
  const WeightMatrix* mixed[] = {&packed[0], &other};
  std::vector<float> y0(130), y1(8);
  float* ys[] = {y0.data(), y1.data()};
  const std::vector<float> x = random_activations(1, kCols, 30);
  Bf16Activations rounded;
  rounded.reset(1, kCols);
  rounded.round_all(pool, x.data());
  EXPECT_THROW(matmul_bf16_packed_group(pool, rounded, mixed, ys), Error);
}

// A producer that rounds its output piece by piece as it writes it (rows and column
// ranges in any order, on any thread, an odd width with its padding input) hands the
// product exactly the input a rounding pass of its own would: the same bits out.
TEST(MatmulBf16Test, RoundingWhileWritingEqualsRoundingBeforeTheProduct) {
  ThreadPool pool(2);
  for (const auto& [rows, cols] : {std::tuple<int64_t, int64_t>{70, 129}, {130, 256}, {19, 1000}}) {
    const OwnedDense dense = random_bf16(rows, cols, static_cast<uint64_t>(rows + cols));
    const WeightMatrix packed = pack_bf16_weight(dense.matrix);
    for (int64_t n : {1, 3, 17, 64}) {
      const std::vector<float> x = random_activations(n, cols, static_cast<uint64_t>(n * cols));
      std::vector<float> expected(static_cast<size_t>(n * rows)), written(expected.size());
      matmul(pool, x.data(), n, packed, expected.data());

      std::vector<float> produced(x.size(), std::nanf(""));
      MatmulInput input;
      input.reset(produced.data(), n, cols);
      ASSERT_TRUE(input.round_while_writing(packed));
      // Columns in three uneven ranges, rows from the last backwards, split over threads.
      const int64_t cuts[] = {0, cols / 3, cols / 3 + 1, cols};
      pool.parallel_for(static_cast<size_t>(n), 1, [&](size_t begin, size_t end) {
        for (auto t = static_cast<int64_t>(end) - 1; t >= static_cast<int64_t>(begin); --t) {
          for (int piece = 2; piece >= 0; --piece) {
            for (int64_t c = cuts[piece]; c < cuts[piece + 1]; ++c) produced[t * cols + c] = x[t * cols + c];
            input.round_written(t, t + 1, cuts[piece], cuts[piece + 1]);
          }
        }
      });
      matmul(pool, input, packed, written.data());
      ASSERT_EQ(0, std::memcmp(expected.data(), written.data(), expected.size() * sizeof(float)))
          << rows << "x" << cols << " n=" << n;
    }
  }
  // An input whose consumer is not a packed bf16 weight is rounded by nobody early.
  MatmulInput input;
  const std::vector<float> x = random_activations(2, 64, 5);
  input.reset(x.data(), 2, 64);
  EXPECT_FALSE(input.round_while_writing(quantize_weight(random_bf16(8, 64, 6).matrix, WeightFormat::kInt8)));
}

// The fused SwiGLU (gate and up in one loop, silu·up rounded straight into down's input)
// gives down the same bits as the two products, silu_mul and rounding do: decode and
// prefill token counts, panels with 1 to 4 groups, an odd width (its padding input).
TEST(MatmulBf16Test, FusedSwigluEqualsProductsThenSiluMul) {
  ThreadPool pool(2);
  constexpr int64_t kHidden = 24;
  for (const auto& [inner, cols] : {std::tuple<int64_t, int64_t>{200, 129}, {37, 70}, {64, 64}, {19, 1000}, {130, 256}}) {
    const OwnedDense gate = random_bf16(inner, cols, static_cast<uint64_t>(inner)),
                     up = random_bf16(inner, cols, static_cast<uint64_t>(inner + 1)),
                     down = random_bf16(kHidden, inner, static_cast<uint64_t>(inner + 2));
    const WeightMatrix packed_gate = pack_bf16_weight(gate.matrix), packed_up = pack_bf16_weight(up.matrix),
                       packed_down = pack_bf16_weight(down.matrix);
    for (int64_t n : {1, 2, 3, 4, 7, 17, 70}) {
      const std::vector<float> x = random_activations(n, cols, static_cast<uint64_t>(n * cols));
      std::vector<float> g(static_cast<size_t>(n * inner)), u(g.size());
      std::vector<float> expected(static_cast<size_t>(n * kHidden)), fused(expected.size(), -1.0f);
      matmul(pool, x.data(), n, packed_gate, g.data());
      matmul(pool, x.data(), n, packed_up, u.data());
      silu_mul(g.data(), u.data(), n * inner);
      matmul(pool, g.data(), n, packed_down, expected.data());

      MatmulInput input, down_input;
      input.reset(x.data(), n, cols);
      if (!matmul_swiglu(pool, input, packed_gate, packed_up, packed_down, down_input)) {
        EXPECT_FALSE(bf16_rows_writable());
        GTEST_SKIP() << "no AVX512-BF16: the MLP multiplies gate and up unfused";
      }
      EXPECT_EQ(down_input.x(), nullptr);
      matmul(pool, down_input, packed_down, fused.data());
      ASSERT_EQ(0, std::memcmp(expected.data(), fused.data(), expected.size() * sizeof(float)))
          << inner << "x" << cols << " n=" << n;
      // Its input exists in bf16 form alone: a weight that wants another form is refused.
      EXPECT_THROW(matmul(pool, down_input, down.matrix, fused.data()), Error);
    }
  }
}

// The fused loop is taken only where all three weights are packed bf16 of matching
// shapes; otherwise the call does nothing and the MLP runs unfused.
TEST(MatmulBf16Test, FusedSwigluDeclinesWhatItCannotFuse) {
  ThreadPool pool(2);
  const OwnedDense gate = random_bf16(32, 64, 1), up = random_bf16(32, 64, 2), down = random_bf16(8, 32, 3),
                   short_up = random_bf16(16, 64, 4);
  const WeightMatrix packed_gate = pack_bf16_weight(gate.matrix), packed_up = pack_bf16_weight(up.matrix),
                     packed_down = pack_bf16_weight(down.matrix), packed_short = pack_bf16_weight(short_up.matrix);
  const WeightMatrix int8_down = quantize_weight(down.matrix, WeightFormat::kInt8);
  const std::vector<float> x = random_activations(3, 64, 5);
  MatmulInput input, down_input;
  input.reset(x.data(), 3, 64);
  EXPECT_FALSE(matmul_swiglu(pool, input, packed_gate, packed_up, int8_down, down_input));
  EXPECT_FALSE(matmul_swiglu(pool, input, packed_gate, packed_short, packed_down, down_input));
  EXPECT_FALSE(matmul_swiglu(pool, input, gate.matrix, up.matrix, down.matrix, down_input));
}

}  // namespace
}  // namespace ernie
