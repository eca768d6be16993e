#include "kernels/matmul_bf16.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/quantize.h"

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12's AVX-512 helpers start from deliberately undefined vectors and then warn.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace ernie {

bool bf16_dot_applies(int64_t n, const WeightMatrix& w) {
  const bool bf16 = w.dense() && w.dtype == DType::kBF16;
  const bool fp8 = w.format == WeightFormat::kFp8;
  return n >= 1 && n <= kBf16DotMaxRows && (bf16 || fp8) && active_isa_level() == IsaLevel::kAvx512 &&
         cpu_features().avx512_bf16;
}

#if defined(__x86_64__)
namespace {

#define ERNIE_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

// x [n, k] as bf16 hi and lo parts, each [n, k].
void split_activations(const float* x, int64_t n, int64_t k, uint16_t* hi, uint16_t* lo) {
  for (int64_t i = 0; i < n * k; ++i) {
    hi[i] = f32_to_bf16(x[i]);
    lo[i] = f32_to_bf16(x[i] - bf16_to_f32(hi[i]));
  }
}

// 32 weights of a row starting at `at` as bf16 lanes (zero outside `mask`).
ERNIE_BF16_TARGET inline __m512bh load_bf16(const void* row, int64_t at, __mmask32 mask) {
  return (__m512bh)_mm512_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(row) + at);
}

// 32 e4m3 bytes as bf16 lanes: sign to bit 15, exponent and mantissa to bits 4..10. The
// result is the e4m3 value times 2^-120, which the caller's scale undoes.
ERNIE_BF16_TARGET inline __m512bh load_fp8(const void* row, int64_t at, __mmask32 mask) {
  const __m512i bytes = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(mask, static_cast<const uint8_t*>(row) + at));
  const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(bytes, _mm512_set1_epi16(0x80)), 8);
  const __m512i rest = _mm512_slli_epi16(_mm512_and_si512(bytes, _mm512_set1_epi16(0x7f)), 4);
  return (__m512bh)_mm512_or_si512(sign, rest);
}

// One step of 32 inputs at `at` (lanes outside `mask` read as zero) for T tokens x 4 rows.
template <int T, bool kFp8>
ERNIE_BF16_TARGET inline void dot_step(const uint16_t* hi, const uint16_t* lo, int64_t k, const void* const* wrow,
                                       int64_t at, __mmask32 mask, __m512 (&acc)[T][4]) {
  __m512bh wv[4];
  for (int j = 0; j < 4; ++j) wv[j] = kFp8 ? load_fp8(wrow[j], at, mask) : load_bf16(wrow[j], at, mask);
  for (int t = 0; t < T; ++t) {
    const __m512bh xh = (__m512bh)_mm512_maskz_loadu_epi16(mask, hi + t * k + at);
    const __m512bh xl = (__m512bh)_mm512_maskz_loadu_epi16(mask, lo + t * k + at);
    for (int j = 0; j < 4; ++j) {
      acc[t][j] = _mm512_dpbf16_ps(acc[t][j], wv[j], xh);
      acc[t][j] = _mm512_dpbf16_ps(acc[t][j], wv[j], xl);
    }
  }
}

// Steps over inputs [begin, end) into acc.
template <int T, bool kFp8>
ERNIE_BF16_TARGET inline void dot_range(const uint16_t* hi, const uint16_t* lo, int64_t k, const void* const* wrow,
                                        int64_t begin, int64_t end, __m512 (&acc)[T][4]) {
  int64_t i = begin;
  for (; i + 32 <= end; i += 32) dot_step<T, kFp8>(hi, lo, k, wrow, i, ~__mmask32{0}, acc);
  if (i < end) dot_step<T, kFp8>(hi, lo, k, wrow, i, static_cast<__mmask32>((1ull << (end - i)) - 1), acc);
}

// T token rows against the weight rows [r, r + rows), rows <= 4 (a short group repeats
// its last row and drops the extra sums). FP8 sums each 128-input block on its own and
// adds it times the block's scale; the 4 rows never straddle a 128-row block.
template <int T, bool kFp8>
ERNIE_BF16_TARGET void rows_tile(const uint16_t* hi, const uint16_t* lo, const WeightMatrix& w, int64_t r, int rows,
                                 float* y) {
  const int64_t k = w.cols;
  const size_t row_bytes = static_cast<size_t>(k) * (kFp8 ? 1 : 2);
  const void* wrow[4];
  for (int j = 0; j < 4; ++j) wrow[j] = static_cast<const uint8_t*>(w.data) + (r + std::min(j, rows - 1)) * row_bytes;
  __m512 total[T][4];
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < 4; ++j) total[t][j] = _mm512_setzero_ps();
  if constexpr (kFp8) {
    const int64_t col_blocks = (k + kFp8Block - 1) / kFp8Block;
    const float* scales = w.scales + (r / kFp8Block) * col_blocks;
    for (int64_t b = 0; b < col_blocks; ++b) {
      __m512 acc[T][4];
      for (int t = 0; t < T; ++t)
        for (int j = 0; j < 4; ++j) acc[t][j] = _mm512_setzero_ps();
      dot_range<T, true>(hi, lo, k, wrow, b * kFp8Block, std::min(k, (b + 1) * kFp8Block), acc);
      const __m512 scale = _mm512_set1_ps(scales[b] * 0x1p120f);
      for (int t = 0; t < T; ++t)
        for (int j = 0; j < 4; ++j) total[t][j] = _mm512_fmadd_ps(acc[t][j], scale, total[t][j]);
    }
  } else {
    dot_range<T, false>(hi, lo, k, wrow, 0, k, total);
  }
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < rows; ++j) y[t * w.rows + r + j] = _mm512_reduce_add_ps(total[t][j]);
}

template <int T>
ERNIE_BF16_TARGET void rows_range(const uint16_t* hi, const uint16_t* lo, const WeightMatrix& w, int64_t begin,
                                  int64_t end, float* y) {
  const bool fp8 = w.format == WeightFormat::kFp8;
  for (int64_t r = begin; r < end; r += 4) {
    const int rows = static_cast<int>(std::min<int64_t>(4, end - r));
    if (fp8) rows_tile<T, true>(hi, lo, w, r, rows, y);
    else rows_tile<T, false>(hi, lo, w, r, rows, y);
  }
}

}  // namespace

void matmul_bf16_dot(ThreadPool& pool, const float* x, int64_t n, const WeightMatrix& w, float* y) {
  thread_local std::vector<uint16_t> split;
  split.resize(static_cast<size_t>(2 * n * w.cols));
  uint16_t* hi = split.data();
  uint16_t* lo = split.data() + n * w.cols;
  split_activations(x, n, w.cols, hi, lo);
  // Chunks of 64 rows: enough per task to amortise the hand-out, many tasks per thread.
  constexpr int64_t kChunk = 64;
  const int64_t chunks = (w.rows + kChunk - 1) / kChunk;
  pool.parallel_for(static_cast<size_t>(chunks), 1, [&](size_t first, size_t last) {
    const int64_t begin = static_cast<int64_t>(first) * kChunk;
    const int64_t end = std::min(w.rows, static_cast<int64_t>(last) * kChunk);
    switch (n) {
      case 1: rows_range<1>(hi, lo, w, begin, end, y); break;
      case 2: rows_range<2>(hi, lo, w, begin, end, y); break;
      case 3: rows_range<3>(hi, lo, w, begin, end, y); break;
      default: rows_range<4>(hi, lo, w, begin, end, y); break;
    }
  });
}
#else
void matmul_bf16_dot(ThreadPool&, const float*, int64_t, const WeightMatrix&, float*) {}
#endif

}  // namespace ernie
