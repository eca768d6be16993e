#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul_bf16.h"
#include "kernels/matmul_integer.h"
#include "kernels/wint2.h"
#include "kernels/x86_intrinsics.h"
#include "util/error.h"

// The vector helpers below are always inlined into functions compiled for one ISA, so
// the calling-convention note GCC gives for vector arguments never applies.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace ernie {
namespace {

// Portable SIMD through GCC/Clang vector types: the same source becomes SSE, AVX2,
// AVX-512 or NEON code depending on the target of the function it is inlined into.
typedef float v4f __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));
typedef uint16_t v4u16 __attribute__((vector_size(8)));
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint16_t v16u16 __attribute__((vector_size(32)));
typedef uint32_t v4u32 __attribute__((vector_size(16)));
typedef uint32_t v8u32 __attribute__((vector_size(32)));
typedef uint32_t v16u32 __attribute__((vector_size(64)));
typedef uint8_t v4u8 __attribute__((vector_size(4)));
typedef uint8_t v8u8 __attribute__((vector_size(8)));
typedef uint8_t v16u8 __attribute__((vector_size(16)));

// kWidth bytes as uint32 lanes. GCC 12 turns __builtin_convertvector from 8- to 32-bit
// lanes into scalar code, so x86 takes the one instruction it should be. These are not
// always_inline (GCC would then require their ISA in every function they are written
// into, including the ISA-neutral templates below), but they are small and GCC inlines
// them into the wrapper of their own ISA.
inline v4u32 widen_bytes_generic(const uint8_t* p) {
  v4u8 packed;
  std::memcpy(&packed, p, sizeof packed);
  return __builtin_convertvector(packed, v4u32);
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) inline v8u32 widen_bytes_avx2(const uint8_t* p) {
  return reinterpret_cast<v8u32>(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
__attribute__((target("avx512f"))) inline v16u32 widen_bytes_avx512(const uint8_t* p) {
  return reinterpret_cast<v16u32>(
      _mm512_maskz_cvtepu8_epi32(__mmask16{0xffff}, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
#else
inline v8u32 widen_bytes_avx2(const uint8_t* p) {
  v8u8 packed;
  std::memcpy(&packed, p, sizeof packed);
  return __builtin_convertvector(packed, v8u32);
}
inline v16u32 widen_bytes_avx512(const uint8_t* p) {
  v16u8 packed;
  std::memcpy(&packed, p, sizeof packed);
  return __builtin_convertvector(packed, v16u32);
}
#endif

template <typename V, typename U16, typename U32, typename U8>
struct Simd {
  using Bytes = U8;   // kWidth uint8 lanes
  using Words = U32;  // kWidth uint32 lanes
  using Float = V;
  static constexpr int kWidth = sizeof(V) / sizeof(float);
  // Token rows per tile: 4 x 4 accumulators fit AVX-512's 32 registers; narrower
  // vectors (16 registers) take 2 x 4.
  static constexpr int kTokenTile = kWidth >= 16 ? 4 : 2;

  [[gnu::always_inline]] static inline V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  // bf16 is the upper half of an fp32: widen and shift.
  [[gnu::always_inline]] static inline V load_bf16(const uint16_t* p) {
    U16 half;
    std::memcpy(&half, p, sizeof half);
    U32 wide = __builtin_convertvector(half, U32) << 16;
    V v;
    std::memcpy(&v, &wide, sizeof v);
    return v;
  }
  [[gnu::always_inline]] static inline U32 widen_bytes(const uint8_t* p) {
    if constexpr (kWidth == 16) return widen_bytes_avx512(p);
    else if constexpr (kWidth == 8) return widen_bytes_avx2(p);
    else return widen_bytes_generic(p);
  }
  [[gnu::always_inline]] static inline float sum(V v) {
    float total = 0.0f;
    for (int lane = 0; lane < kWidth; ++lane) total += v[lane];
    return total;
  }
};

// FP8 e4m3 weights times their 128x128 block's scale. An e4m3 byte's exponent and
// mantissa bits, placed at the top of an fp32's (bits 20..26), give the same value
// times 2^-120 - subnormals included - so the conversion is two masks, a shift and a
// multiply folded into the scale. `scales` is the row's run of block scales and `at`
// a multiple of W: W divides 128, so one vector never straddles two blocks.
template <typename S>
[[gnu::always_inline]] inline typename S::Float load_fp8(const uint8_t* row, const float* scales, int64_t at) {
  using V = typename S::Float;
  const typename S::Words wide = S::widen_bytes(row + at);
  const typename S::Words bits = ((wide & 0x80u) << 24) | ((wide & 0x7fu) << 20);
  V value;
  std::memcpy(&value, &bits, sizeof value);
  return value * (scales[at / kFp8Block] * 0x1p120f);
}
// The same value for one weight (the tails of rows that are not a multiple of W).
inline float fp8_weight(const uint8_t* row, const float* scales, int64_t at) {
  return e4m3_to_f32(row[at]) * scales[at / kFp8Block];
}

// Where a tile's weight rows come from: fp32 rows (converted into a panel of scratch,
// or an fp32 weight), or the stored bf16 or FP8 rows widened in registers (the few-token
// path: every byte is read once anyway). Each gives a weight the same fp32 value, so
// the products, and their order, do not depend on the path: a token row's result is
// the same whatever other rows share the call.
enum class Source { kF32, kBf16, kFp8 };
template <Source kSource>
struct RowSource {
  const void* rows[4];
  const float* scales[4];  // FP8: each row's block scales
};

// Bytes the few-token path prefetches ahead in each weight row it streams.
constexpr int64_t kPrefetchBytes = 512;

// y[t][r] = x_t · w_r for T token rows and R weight rows, vectorised over k: each x
// load serves R rows and each w load serves T tokens. Every (t, r) sums in the same
// order whatever T and R are: one vector accumulator over k, its lanes in order, then
// the tail.
template <typename S, int T, int R, Source kSource>
[[gnu::always_inline]] inline void tile(const float* const* x, const RowSource<kSource>& w, int64_t k, float* const* y,
                                        int64_t r_offset) {
  using V = typename S::Float;
  constexpr int W = S::kWidth;
  V acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = V{};
  int64_t i = 0;
  for (; i + W <= k; i += W) {
    V wv[R];
    for (int r = 0; r < R; ++r) {
      if constexpr (kSource == Source::kBf16) {
        const auto* row = static_cast<const uint16_t*>(w.rows[r]);
        if (i % 32 == 0) __builtin_prefetch(row + i + kPrefetchBytes / 2);
        wv[r] = S::load_bf16(row + i);
      } else if constexpr (kSource == Source::kFp8) {
        const auto* row = static_cast<const uint8_t*>(w.rows[r]);
        if (i % 64 == 0) __builtin_prefetch(row + i + kPrefetchBytes);
        wv[r] = load_fp8<S>(row, w.scales[r], i);
      } else {
        wv[r] = S::load(static_cast<const float*>(w.rows[r]) + i);
      }
    }
    for (int t = 0; t < T; ++t) {
      const V xv = S::load(x[t] + i);
      for (int r = 0; r < R; ++r) acc[t][r] += xv * wv[r];
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      float total = S::sum(acc[t][r]);
      for (int64_t j = i; j < k; ++j) {
        float wj;
        if constexpr (kSource == Source::kBf16) wj = bf16_to_f32(static_cast<const uint16_t*>(w.rows[r])[j]);
        else if constexpr (kSource == Source::kFp8) wj = fp8_weight(static_cast<const uint8_t*>(w.rows[r]), w.scales[r], j);
        else wj = static_cast<const float*>(w.rows[r])[j];
        total += x[t][j] * wj;
      }
      y[t][r_offset + r] = total;
    }
  }
}

template <typename S, int T, Source kSource>
[[gnu::always_inline]] inline void tile_rows(const float* const* x, const RowSource<kSource>& w, int rows, int64_t k,
                                             float* const* y, int64_t r_offset) {
  switch (rows) {
    case 4: tile<S, T, 4, kSource>(x, w, k, y, r_offset); break;
    case 3: tile<S, T, 3, kSource>(x, w, k, y, r_offset); break;
    case 2: tile<S, T, 2, kSource>(x, w, k, y, r_offset); break;
    default: tile<S, T, 1, kSource>(x, w, k, y, r_offset); break;
  }
}

// Rows converted together: they stay in L2 while every token of the chunk uses them.
constexpr int64_t kPanelRows = 16;
// Tokens processed against one panel; their activations stay in L2 too.
constexpr int64_t kTokenChunk = 64;

const float* fp8_row_scales(const WeightMatrix& w, int64_t r) {
  return w.fp8_scales() + (r / kFp8Block) * ((w.cols + kFp8Block - 1) / kFp8Block);
}

// FP8 rows widened to fp32, each weight the value load_fp8 / fp8_weight give it.
template <typename S>
[[gnu::always_inline]] inline void widen_fp8_rows(const WeightMatrix& w, int64_t first, int64_t count, float* out) {
  constexpr int W = S::kWidth;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  for (int64_t r = first; r < first + count; ++r, out += w.cols) {
    const uint8_t* row = bytes + r * w.cols;
    const float* scales = fp8_row_scales(w, r);
    int64_t k = 0;
    for (; k + W <= w.cols; k += W) {
      const typename S::Float value = load_fp8<S>(row, scales, k);
      std::memcpy(out + k, &value, sizeof value);
    }
    for (; k < w.cols; ++k) out[k] = fp8_weight(row, scales, k);
  }
}

template <typename S>
[[gnu::always_inline]] inline void widen_rows(const WeightMatrix& w, int64_t first, int64_t count, float* out) {
  if (w.format == WeightFormat::kFp8) {
    widen_fp8_rows<S>(w, first, count, out);
    return;
  }
  const size_t total = static_cast<size_t>(count * w.cols);
  if (w.dtype != DType::kBF16) {
    convert_to_f32(w.dtype, w.row(first), out, total);
    return;
  }
  const auto* in = reinterpret_cast<const uint16_t*>(w.row(first));
  size_t i = 0;
  for (; i + S::kWidth <= total; i += S::kWidth) {
    const typename S::Float v = S::load_bf16(in + i);
    std::memcpy(out + i, &v, sizeof v);
  }
  for (; i < total; ++i) out[i] = bf16_to_f32(in[i]);
}

// Output rows [row_begin, row_end) of y for n <= 3 tokens, reading the stored rows.
template <typename S, Source kSource>
[[gnu::always_inline]] inline void few_tokens(const float* x, int64_t n, const WeightMatrix& w, int64_t row_begin,
                                              int64_t row_end, float* y) {
  const int64_t k = w.cols;
  const float* xs[3];
  float* ys[3];
  for (int64_t t = 0; t < n; ++t) {
    xs[t] = x + t * k;
    ys[t] = y + t * w.rows;
  }
  for (int64_t r = row_begin; r < row_end; r += 4) {
    const int rows = static_cast<int>(std::min<int64_t>(4, row_end - r));
    RowSource<kSource> source{};
    for (int j = 0; j < rows; ++j) {
      if constexpr (kSource == Source::kFp8) {
        source.rows[j] = static_cast<const uint8_t*>(w.data) + (r + j) * k;
        source.scales[j] = fp8_row_scales(w, r + j);
      } else {
        source.rows[j] = w.row(r + j);
      }
    }
    switch (n) {
      case 3: tile_rows<S, 3, kSource>(xs, source, rows, k, ys, r); break;
      case 2: tile_rows<S, 2, kSource>(xs, source, rows, k, ys, r); break;
      default: tile_rows<S, 1, kSource>(xs, source, rows, k, ys, r); break;
    }
  }
}

// Output rows [row_begin, row_end) of y for all n tokens.
template <typename S>
[[gnu::always_inline]] inline void matmul_rows(const float* x, int64_t n, const WeightMatrix& w, int64_t row_begin,
                                               int64_t row_end, float* y, float* scratch) {
  const int64_t k = w.cols;
  if (n <= 3 && w.dense() && w.dtype == DType::kBF16) {
    // A few tokens: stream the bf16 rows once, widening in registers; widening whole
    // panels into scratch would cost more than the few products that reuse them.
    few_tokens<S, Source::kBf16>(x, n, w, row_begin, row_end, y);
    return;
  }
  if (n <= 3 && w.format == WeightFormat::kFp8) {
    few_tokens<S, Source::kFp8>(x, n, w, row_begin, row_end, y);
    return;
  }
  for (int64_t t0 = 0; t0 < n; t0 += kTokenChunk) {
    const int64_t tokens = std::min(kTokenChunk, n - t0);
    for (int64_t p = row_begin; p < row_end; p += kPanelRows) {
      const int64_t panel = std::min(kPanelRows, row_end - p);
      const float* panel_rows = static_cast<const float*>(w.data) + p * k;
      if (!w.dense() || w.dtype != DType::kF32) {
        widen_rows<S>(w, p, panel, scratch);
        panel_rows = scratch;
      }
      for (int64_t r = 0; r < panel; r += 4) {
        const int rows = static_cast<int>(std::min<int64_t>(4, panel - r));
        RowSource<Source::kF32> source{};
        for (int j = 0; j < rows; ++j) source.rows[j] = panel_rows + (r + j) * k;
        constexpr int kTile = S::kTokenTile;
        int64_t t = t0;
        for (; t + kTile <= t0 + tokens; t += kTile) {
          const float* xs[kTile];
          float* ys[kTile];
          for (int j = 0; j < kTile; ++j) {
            xs[j] = x + (t + j) * k;
            ys[j] = y + (t + j) * w.rows;
          }
          tile_rows<S, kTile, Source::kF32>(xs, source, rows, k, ys, p + r);
        }
        // The last 1..kTile-1 tokens in one tile, so each weight row is read once.
        const int64_t rest = t0 + tokens - t;
        if (rest > 0) {
          const float* xs[4];
          float* ys[4];
          for (int64_t j = 0; j < rest; ++j) {
            xs[j] = x + (t + j) * k;
            ys[j] = y + (t + j) * w.rows;
          }
          switch (rest) {
            case 3: tile_rows<S, 3, Source::kF32>(xs, source, rows, k, ys, p + r); break;
            case 2: tile_rows<S, 2, Source::kF32>(xs, source, rows, k, ys, p + r); break;
            default: tile_rows<S, 1, Source::kF32>(xs, source, rows, k, ys, p + r); break;
          }
        }
      }
    }
  }
}

using RowRangeKernel = void (*)(const float*, int64_t, const WeightMatrix&, int64_t, int64_t, float*, float*);

void matmul_rows_generic(const float* x, int64_t n, const WeightMatrix& w, int64_t begin, int64_t end, float* y,
                         float* scratch) {
  matmul_rows<Simd<v4f, v4u16, v4u32, v4u8>>(x, n, w, begin, end, y, scratch);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) void matmul_rows_avx2(const float* x, int64_t n, const WeightMatrix& w,
                                                                int64_t begin, int64_t end, float* y, float* scratch) {
  matmul_rows<Simd<v8f, v8u16, v8u32, v8u8>>(x, n, w, begin, end, y, scratch);
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c"))) void matmul_rows_avx512(
    const float* x, int64_t n, const WeightMatrix& w, int64_t begin, int64_t end, float* y, float* scratch) {
  matmul_rows<Simd<v16f, v16u16, v16u32, v16u8>>(x, n, w, begin, end, y, scratch);
}
#endif

RowRangeKernel select_kernel() {
#if defined(__x86_64__)
  switch (active_isa_level()) {
    case IsaLevel::kAvx512: return matmul_rows_avx512;
    case IsaLevel::kAvx2: return matmul_rows_avx2;
    case IsaLevel::kGeneric: break;
  }
#endif
  return matmul_rows_generic;
}

// Each thread's panel of widened weight rows.
std::vector<float>& panel_scratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

void matmul_float(ThreadPool& pool, const float* x, int64_t n, const WeightMatrix& w, float* y) {
  if (n == 0) return;
  static const RowRangeKernel kernel = select_kernel();
  // Threads split the output features into panels: each streams a disjoint share of
  // the weights, the largest operand.
  const int64_t panels = (w.rows + kPanelRows - 1) / kPanelRows;
  const size_t grain =
      static_cast<size_t>(std::max<int64_t>(1, panels / (static_cast<int64_t>(pool.num_threads()) * 4)));
  pool.parallel_for(static_cast<size_t>(panels), grain, [&](size_t begin, size_t end) {
    std::vector<float>& scratch = panel_scratch();
    if (scratch.size() < static_cast<size_t>(kPanelRows * w.cols)) scratch.resize(static_cast<size_t>(kPanelRows * w.cols));
    kernel(x, n, w, static_cast<int64_t>(begin) * kPanelRows, std::min(w.rows, static_cast<int64_t>(end) * kPanelRows),
           y, scratch.data());
  });
}

std::atomic<bool> bf16_products{false};
std::atomic<uint64_t> streamed_weight_bytes{0};

// Token t of x in the int8 form `w`'s kernel reads: per block, or with w's static scale.
void quantize_token_for(const WeightMatrix& w, const float* x, int64_t t, QuantizedActivations& out) {
  if (w.input_absmax > 0.0f) quantize_activation_token_static(x, t, w.input_absmax, w.input_hadamard, out);
  else quantize_activation_token(x, t, out);
}

void count_streamed(const WeightMatrix& w) { streamed_weight_bytes.fetch_add(weight_bytes(w), std::memory_order_relaxed); }

}  // namespace

bool is_integer(const WeightMatrix& w) {
  return w.format == WeightFormat::kInt8 || w.format == WeightFormat::kInt4 || w.format == WeightFormat::kInt6;
}

void set_bf16_products(bool enabled) { bf16_products.store(enabled, std::memory_order_relaxed); }
bool bf16_products_enabled() { return bf16_products.load(std::memory_order_relaxed); }

void MatmulInput::reset(const float* x, int64_t n, int64_t cols) {
  x_ = x;
  n_ = n;
  cols_ = cols;
  have_int8_ = have_fp8_ = have_bf16_ = rounding_while_writing_ = false;
}

const Bf16Activations& MatmulInput::bf16_rows(ThreadPool& pool) {
  if (!have_bf16_) {
    need_floats("bf16");
    bf16_.reset(n_, cols_);
    bf16_.round_all(pool, x_);
    have_bf16_ = true;
  }
  return bf16_;
}

Bf16Activations* MatmulInput::bf16_form_alone(const WeightMatrix& w, int64_t n, int64_t cols) {
  if (w.format != WeightFormat::kBf16Packed || w.cols != cols || !bf16_rows_writable()) return nullptr;
  reset(nullptr, n, cols);
  bf16_.reset(n, cols);
  have_bf16_ = true;
  return &bf16_;
}

bool MatmulInput::round_while_writing(const WeightMatrix& w) {
  if (w.format != WeightFormat::kBf16Packed || w.cols != cols_) return false;
  bf16_.reset(n_, cols_);
  have_bf16_ = rounding_while_writing_ = true;
  return true;
}

void MatmulInput::need_floats(const char* form) const {
  if (x_ == nullptr && n_ > 0)
    fail("an input written in bf16-product form alone (by a fused SwiGLU or bf16 attention) has no ", form, " form");
}

const QuantizedActivations& MatmulInput::int8_for(ThreadPool& pool, const WeightMatrix& w) {
  need_floats("int8");
  if (have_int8_ && int8_.group == w.group && int8_absmax_ == w.input_absmax && int8_hadamard_ == w.input_hadamard)
    return int8_;
  prepare_activations(n_, cols_, w.group, int8_);
  pool.parallel_for(static_cast<size_t>(n_), 0, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) quantize_token_for(w, x_, static_cast<int64_t>(t), int8_);
  });
  have_int8_ = true;
  int8_absmax_ = w.input_absmax;
  int8_hadamard_ = w.input_hadamard;
  return int8_;
}

const float* MatmulInput::fp8_rounded() {
  need_floats("fp8");
  if (!have_fp8_) {
    fp8_.assign(x_, x_ + n_ * cols_);
    fake_quantize_fp8_activations(fp8_.data(), n_, cols_);
    have_fp8_ = true;
  }
  return fp8_.data();
}

uint64_t weight_bytes_streamed() { return streamed_weight_bytes.load(std::memory_order_relaxed); }

void matmul(ThreadPool& pool, MatmulInput& input, const WeightMatrix& w, float* y) {
  if (input.cols() != w.cols) fail("matmul: input width ", input.cols(), " does not match the weight's ", w.cols);
  if (input.n() == 0) return;
  if (input.x() == nullptr && w.format != WeightFormat::kBf16Packed)
    fail("a ", weight_format_name(w.format), " weight cannot take an input written in bf16-product form alone");
  count_streamed(w);
  if (is_integer(w)) {
    matmul_integer(pool, input.int8_for(pool, w), w, y);
  } else if (w.format == WeightFormat::kFp8) {
    matmul_float(pool, input.fp8_rounded(), input.n(), w, y);
  } else if (w.format == WeightFormat::kWint2) {
    matmul_wint2(pool, input.x(), input.n(), w, y);
  } else if (w.format == WeightFormat::kBf16Packed) {
    const WeightMatrix* ws[] = {&w};
    float* ys[] = {y};
    matmul_bf16_packed_group(pool, input.bf16_rows(pool), ws, ys);
  } else {
    matmul_float(pool, input.x(), input.n(), w, y);
  }
}

void matmul_shared_input(ThreadPool& pool, MatmulInput& input, std::span<const WeightMatrix* const> weights,
                         std::span<float* const> outputs) {
  if (weights.size() != outputs.size() || weights.empty() || weights.size() > 4)
    fail("matmul_shared_input takes 1 to 4 weights, each with an output");
  for (const WeightMatrix* w : weights)
    if (w->cols != input.cols()) fail("matmul: input width ", input.cols(), " does not match the weight's ", w->cols);
  if (input.n() == 0) return;
  const auto all = [&](auto predicate) { return std::all_of(weights.begin(), weights.end(), predicate); };
  const WeightMatrix& first = *weights[0];
  if (all([&](const WeightMatrix* w) {
        return is_integer(*w) && w->group == first.group && w->input_absmax == first.input_absmax &&
               w->input_hadamard == first.input_hadamard;
      })) {
    for (const WeightMatrix* w : weights) count_streamed(*w);
    matmul_integer_group(pool, input.int8_for(pool, first), weights, outputs);
  } else if (all([](const WeightMatrix* w) { return w->format == WeightFormat::kBf16Packed; })) {
    for (const WeightMatrix* w : weights) count_streamed(*w);
    matmul_bf16_packed_group(pool, input.bf16_rows(pool), weights, outputs);
  } else {
    for (size_t i = 0; i < weights.size(); ++i) matmul(pool, input, *weights[i], outputs[i]);
  }
}

bool matmul_swiglu(ThreadPool& pool, MatmulInput& input, const WeightMatrix& gate, const WeightMatrix& up,
                   const WeightMatrix& down, MatmulInput& out) {
  const auto packed = [](const WeightMatrix& w) { return w.format == WeightFormat::kBf16Packed; };
  if (!packed(gate) || !packed(up) || gate.rows != up.rows || gate.cols != up.cols) return false;
  if (input.cols() != gate.cols) fail("matmul: input width ", input.cols(), " does not match the weight's ", gate.cols);
  Bf16Activations* rows = out.bf16_form_alone(down, input.n(), gate.rows);
  if (rows == nullptr) return false;
  count_streamed(gate);
  count_streamed(up);
  matmul_bf16_swiglu(pool, input.bf16_rows(pool), gate, up, *rows);
  return true;
}

void matmul_batch(ThreadPool& pool, std::span<MatmulInput* const> inputs, std::span<const WeightMatrix* const> weights,
                  std::span<float* const> outputs) {
  if (inputs.size() != weights.size() || weights.size() != outputs.size())
    fail("matmul_batch takes one input and one output per weight");
  for (size_t i = 0; i < weights.size(); ++i)
    if (inputs[i]->cols() != weights[i]->cols)
      fail("matmul: input width ", inputs[i]->cols(), " does not match the weight's ", weights[i]->cols);
  // One loop needs integer weights, and weights that read one input must want the same
  // quantized form of it (int8_for keeps one).
  const auto same_form = [](const WeightMatrix& a, const WeightMatrix& b) {
    return a.group == b.group && a.input_absmax == b.input_absmax && a.input_hadamard == b.input_hadamard;
  };
  bool together = weights.size() <= kMaxBatchWeights;
  for (size_t i = 0; together && i < weights.size(); ++i) {
    together = is_integer(*weights[i]);
    for (size_t j = 0; together && j < i; ++j)
      together = inputs[j] != inputs[i] || same_form(*weights[j], *weights[i]);
  }
  if (!together) {
    for (size_t i = 0; i < weights.size(); ++i) matmul(pool, *inputs[i], *weights[i], outputs[i]);
    return;
  }
  const QuantizedActivations* xs[kMaxBatchWeights];
  const WeightMatrix* ws[kMaxBatchWeights];
  float* ys[kMaxBatchWeights];
  size_t count = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (inputs[i]->n() == 0) continue;
    count_streamed(*weights[i]);
    xs[count] = &inputs[i]->int8_for(pool, *weights[i]);
    ws[count] = weights[i];
    ys[count++] = outputs[i];
  }
  if (count > 0) matmul_integer_batch(pool, std::span(xs, count), std::span(ws, count), std::span(ys, count));
}

void matmul(ThreadPool& pool, const float* x, int64_t n, const WeightMatrix& w, float* y) {
  if (w.dense()) {
    if (n > 0) count_streamed(w);
    matmul_float(pool, x, n, w, y);
    return;
  }
  thread_local MatmulInput input;
  input.reset(x, n, w.cols);
  matmul(pool, input, w, y);
}

void reserve_matmul_scratch(int64_t max_cols) {
  std::vector<float>& scratch = panel_scratch();
  if (scratch.size() < static_cast<size_t>(kPanelRows * max_cols)) scratch.resize(static_cast<size_t>(kPanelRows * max_cols));
  reserve_integer_scratch(kDecodeRows, max_cols);
}

void matmul_reference(const float* x, int64_t n, const WeightMatrix& w, float* y) {
  if (is_integer(w)) {
    QuantizedActivations quantized;
    prepare_activations(n, w.cols, w.group, quantized);
    for (int64_t t = 0; t < n; ++t) quantize_token_for(w, x, t, quantized);
    matmul_integer_reference(quantized, w, y);
    return;
  }
  std::vector<float> rounded;
  if (w.format == WeightFormat::kFp8) {
    rounded.assign(x, x + n * w.cols);
    fake_quantize_fp8_activations(rounded.data(), n, w.cols);
    x = rounded.data();
  } else if (w.format == WeightFormat::kBf16Packed) {
    rounded.resize(static_cast<size_t>(n * w.cols));
    for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(x[i]));
    x = rounded.data();
  }
  const std::vector<float> weights = dequantize_weight(w);
  for (int64_t r = 0; r < w.rows; ++r) {
    const float* row = weights.data() + r * w.cols;
    for (int64_t t = 0; t < n; ++t) {
      double sum = 0.0;
      for (int64_t i = 0; i < w.cols; ++i) sum += static_cast<double>(x[t * w.cols + i]) * row[i];
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
