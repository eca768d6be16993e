#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "kernels/simd_dispatch.h"

namespace ernie {
namespace {

// Weight rows converted to fp32 together; each x row loaded once serves all of them.
constexpr int64_t kRowBlock = 4;
// Independent partial sums let the compiler keep several vector accumulators busy.
constexpr int64_t kLanes = 16;

inline float dot(const float* a, const float* b, int64_t k) {
  float partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) partial[l] += a[i + l] * b[i + l];
  float sum = 0.0f;
  for (int64_t l = 0; l < kLanes; ++l) sum += partial[l];
  for (; i < k; ++i) sum += a[i] * b[i];
  return sum;
}

// bf16 widening is inlined so each ISA clone vectorises it; rarer dtypes go through
// the shared converter.
inline void widen_row(DType dtype, const void* src, float* dst, int64_t k) {
  if (dtype == DType::kBF16) {
    const auto* bits = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < k; ++i) dst[i] = bf16_to_f32(bits[i]);
  } else {
    convert_to_f32(dtype, src, dst, static_cast<size_t>(k));
  }
}

ERNIE_CLONE_FOR_ISAS
void matmul_row_range(const float* x, int64_t n, const WeightMatrix& w, int64_t row_begin, int64_t row_end, float* y,
                      float* scratch) {
  const int64_t k = w.cols;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowBlock) {
    const int64_t rows = std::min(kRowBlock, row_end - r0);
    for (int64_t r = 0; r < rows; ++r) widen_row(w.dtype, w.row(r0 + r), scratch + r * k, k);
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x + t * k;
      float* yt = y + t * w.rows + r0;
      for (int64_t r = 0; r < rows; ++r) yt[r] = dot(xt, scratch + r * k, k);
    }
  }
}

}  // namespace

void matmul(ThreadPool& pool, const float* x, int64_t n, const WeightMatrix& w, float* y) {
  // Split the output features: every thread streams a disjoint share of the weights.
  const int64_t blocks = (w.rows + kRowBlock - 1) / kRowBlock;
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, blocks / (static_cast<int64_t>(pool.num_threads()) * 4)));
  pool.parallel_for(static_cast<size_t>(blocks), grain, [&](size_t begin, size_t end) {
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(kRowBlock * w.cols));
    matmul_row_range(x, n, w, static_cast<int64_t>(begin) * kRowBlock,
                     std::min(w.rows, static_cast<int64_t>(end) * kRowBlock), y, scratch.data());
  });
}

void matmul_reference(const float* x, int64_t n, const WeightMatrix& w, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    convert_to_f32(w.dtype, w.row(r), row.data(), row.size());
    for (int64_t t = 0; t < n; ++t) {
      double sum = 0.0;
      for (int64_t i = 0; i < w.cols; ++i) sum += static_cast<double>(x[t * w.cols + i]) * row[static_cast<size_t>(i)];
      y[t * w.rows + r] = static_cast<float>(sum);
    }
  }
}

WeightMatrix f32_matrix_view(const float* data, int64_t rows, int64_t cols) {
  WeightMatrix matrix;
  matrix.dtype = DType::kF32;
  matrix.rows = rows;
  matrix.cols = cols;
  matrix.data = data;
  return matrix;
}

}  // namespace ernie
