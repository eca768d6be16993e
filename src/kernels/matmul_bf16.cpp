#include "kernels/matmul_bf16.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/quantize.h"
#include "util/error.h"

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
  return n == 1 && (bf16 || fp8) && active_isa_level() == IsaLevel::kAvx512 &&
         cpu_features().avx512_bf16;
}

#if defined(__x86_64__)
namespace {

#define ERNIE_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

// Each thread's FP8 activations scaled for the current row block, hi and lo parts.
std::vector<uint16_t>& scaled_scratch() {
  thread_local std::vector<uint16_t> scaled;
  return scaled;
}

// x [k] as bf16 hi and lo parts, rounding to nearest even. With `block_scales`, input i
// is first multiplied by block_scales[i / 128] * 2^120 (FP8).
ERNIE_BF16_TARGET void split_activations(const float* x, int64_t k, const float* block_scales, uint16_t* hi,
                                         uint16_t* lo) {
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 mask = k - i >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (k - i)) - 1);
    __m512 value = _mm512_maskz_loadu_ps(mask, x + i);
    if (block_scales != nullptr) value = _mm512_mul_ps(value, _mm512_set1_ps(block_scales[i / 128] * 0x1p120f));
    const __m256bh high = _mm512_cvtneps_pbh(value);
    const __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)high), 16));
    const __m256bh low = _mm512_cvtneps_pbh(_mm512_sub_ps(value, back));
    _mm256_mask_storeu_epi16(hi + i, mask, (__m256i)high);
    _mm256_mask_storeu_epi16(lo + i, mask, (__m256i)low);
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

// 32 inputs at `seg` (lanes outside `mask` read as zero) of one weight row into
// accumulator pair j: acc[j] gets the hi products and acc[4 + j] the lo ones, so
// consecutive dot products never wait on each other.
template <bool kFp8>
ERNIE_BF16_TARGET inline void segment(const uint16_t* hi, const uint16_t* lo, const void* row, int64_t seg,
                                      __mmask32 mask, int j, __m512 (&acc)[8]) {
  const __m512bh wv = kFp8 ? load_fp8(row, seg, mask) : load_bf16(row, seg, mask);
  acc[j] = _mm512_dpbf16_ps(acc[j], wv, (__m512bh)_mm512_maskz_loadu_epi16(mask, hi + seg));
  acc[4 + j] = _mm512_dpbf16_ps(acc[4 + j], wv, (__m512bh)_mm512_maskz_loadu_epi16(mask, lo + seg));
}

// 128 inputs from `at` (fewer at the row's end) as four 32-input segments.
template <bool kFp8>
ERNIE_BF16_TARGET inline void block(const uint16_t* hi, const uint16_t* lo, int64_t k, const void* row, int64_t at,
                                    __m512 (&acc)[8]) {
  if (at + 128 <= k) {
    constexpr int64_t kBytesPerInput = kFp8 ? 1 : 2;
    _mm_prefetch(static_cast<const char*>(row) + (at + 512) * kBytesPerInput, _MM_HINT_T0);
    for (int j = 0; j < 4; ++j) segment<kFp8>(hi, lo, row, at + 32 * j, ~__mmask32{0}, j, acc);
    return;
  }
  for (int j = 0; j < 4 && at + 32 * j < k; ++j) {
    const int64_t left = k - (at + 32 * j);
    const __mmask32 mask = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1ull << left) - 1);
    segment<kFp8>(hi, lo, row, at + 32 * j, mask, j, acc);
  }
}

// y[r] for one weight row. Rows are read one after another, front to back, so each
// thread's weights are a single sequential stream, which the hardware prefetcher follows
// best.
template <bool kFp8>
ERNIE_BF16_TARGET void one_row(const uint16_t* hi, const uint16_t* lo, const WeightMatrix& w, int64_t r, float* y) {
  const int64_t k = w.cols;
  const void* row = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r * k) * (kFp8 ? 1 : 2);
  __m512 total[8];
  for (__m512& t : total) t = _mm512_setzero_ps();
  for (int64_t at = 0; at < k; at += 128) block<kFp8>(hi, lo, k, row, at, total);
  __m512 sum = total[0];
  for (int j = 1; j < 8; ++j) sum = _mm512_add_ps(sum, total[j]);
  y[r] = _mm512_reduce_add_ps(sum);
}

// Rows [begin, end) of w. `hi`/`lo` are x split as it is (bf16 weights); FP8 weights
// split x themselves with their block scales.
ERNIE_BF16_TARGET void rows_range(const uint16_t* hi, const uint16_t* lo, const float* x, const WeightMatrix& w,
                                  int64_t begin, int64_t end, float* y) {
  if (w.format != WeightFormat::kFp8) {
    for (int64_t r = begin; r < end; ++r) one_row<false>(hi, lo, w, r, y);
    return;
  }
  // FP8: the 128x128 block scales (times the 2^120 the bit placement leaves out) go into
  // the activations, once per 128 weight rows, so the row loop is the bf16 one.
  const int64_t k = w.cols, col_blocks = (k + kFp8Block - 1) / kFp8Block;
  std::vector<uint16_t>& scaled = scaled_scratch();
  if (scaled.size() < static_cast<size_t>(2 * k)) scaled.resize(static_cast<size_t>(2 * k));
  uint16_t* shi = scaled.data();
  uint16_t* slo = scaled.data() + k;
  for (int64_t r = begin; r < end;) {
    const int64_t row_block = r / kFp8Block, stop = std::min(end, (row_block + 1) * kFp8Block);
    split_activations(x, k, w.scales + row_block * col_blocks, shi, slo);
    for (; r < stop; ++r) one_row<true>(shi, slo, w, r, y);
  }
}

}  // namespace

void reserve_bf16_dot_scratch(int64_t max_cols) {
  const auto needed = static_cast<size_t>(2 * max_cols);
  if (scaled_scratch().size() < needed) scaled_scratch().resize(needed);
}

void matmul_bf16_dot(ThreadPool& pool, const float* x, const WeightMatrix& w, float* y) {
  const WeightMatrix* ws[1] = {&w};
  float* ys[1] = {y};
  matmul_bf16_dot_group(pool, x, ws, ys);
}

void matmul_bf16_dot_group(ThreadPool& pool, const float* x, std::span<const WeightMatrix* const> ws,
                           std::span<float* const> ys) {
  constexpr size_t kMaxWeights = 4;
  if (ws.empty() || ws.size() > kMaxWeights || ws.size() != ys.size())
    fail("matmul_bf16_dot_group takes 1 to 4 weights, each with an output");
  const int64_t k = ws[0]->cols;
  // The plain split serves bf16 weights; FP8 ones make their own scaled splits.
  thread_local std::vector<uint16_t> split;
  if (split.size() < static_cast<size_t>(2 * k)) split.resize(static_cast<size_t>(2 * k));
  uint16_t* hi = split.data();
  uint16_t* lo = split.data() + k;
  if (std::any_of(ws.begin(), ws.end(), [](const WeightMatrix* w) { return w->format != WeightFormat::kFp8; }))
    split_activations(x, k, nullptr, hi, lo);
  // Chunks of 128 rows: enough per task to amortise the hand-out, many tasks per thread,
  // and one FP8 row block each.
  constexpr int64_t kChunk = 128;
  int64_t first_chunk[kMaxWeights + 1] = {0};  // chunks of weight i: [first_chunk[i], first_chunk[i + 1])
  for (size_t i = 0; i < ws.size(); ++i) first_chunk[i + 1] = first_chunk[i] + (ws[i]->rows + kChunk - 1) / kChunk;
  pool.parallel_for(static_cast<size_t>(first_chunk[ws.size()]), 1, [&](size_t first, size_t last) {
    for (auto c = static_cast<int64_t>(first); c < static_cast<int64_t>(last); ++c) {
      size_t i = 0;
      while (c >= first_chunk[i + 1]) ++i;
      const int64_t begin = (c - first_chunk[i]) * kChunk;
      rows_range(hi, lo, x, *ws[i], begin, std::min(ws[i]->rows, begin + kChunk), ys[i]);
    }
  });
}
#else
void reserve_bf16_dot_scratch(int64_t) {}
void matmul_bf16_dot(ThreadPool&, const float*, const WeightMatrix&, float*) {}
void matmul_bf16_dot_group(ThreadPool&, const float*, std::span<const WeightMatrix* const>, std::span<float* const>) {}
#endif

}  // namespace ernie
