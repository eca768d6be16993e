#include "kernels/matmul_bf16.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/x86_intrinsics.h"
#include "util/error.h"
#include "util/weight_buffer.h"

namespace ernie {
namespace {

constexpr int64_t kPanelRows = kBf16GroupRows * kBf16PanelGroups;
// Tokens in one prefill tile (every ISA's panel kernel takes 1..kTileTokens).
constexpr int kTileTokens = 6;
// Tokens whose activations and results a thread keeps near while it walks its panels: a
// whole number of tiles, so only the batch's last tile can be a narrower one.
constexpr int64_t kTokenChunk = 10 * kTileTokens;
// Batches of up to this many tokens are decode: bound by memory, each thread streams its
// share of the weights once (prefetching ahead); larger ones are prefill, bound by
// arithmetic.
constexpr int64_t kStreamingTokens = 3;

int64_t even_cols(int64_t cols) { return (cols + 1) / 2 * 2; }
int64_t padded_rows(int64_t rows) { return (rows + kBf16GroupRows - 1) / kBf16GroupRows * kBf16GroupRows; }
int64_t panel_count(int64_t rows) { return (rows + kPanelRows - 1) / kPanelRows; }
int64_t token_chunks(int64_t n) { return (n + kTokenChunk - 1) / kTokenChunk; }
// Groups in panel p of a matrix with `rows` rows.
int panel_groups(int64_t rows, int64_t p) {
  return static_cast<int>(std::min(kBf16PanelGroups, padded_rows(rows) / kBf16GroupRows - p * kBf16PanelGroups));
}

// Where row r's input pair j lives (the first of its two elements).
int64_t packed_index(int64_t rows, int64_t kp, int64_t r, int64_t j) {
  const int64_t p = r / kPanelRows, q = r % kPanelRows;
  return p * kPanelRows * kp + j * panel_groups(rows, p) * 2 * kBf16GroupRows + q * 2;
}

// Rows [first, first + groups·16) of panel `panel` for T tokens: out[t][row] over all
// pairs, in order, on any CPU (no vdpbf16ps): each pair adds w0·x0 + w1·x1 in fp32.
void generic_panel(const uint16_t* panel, int groups, int64_t pairs, const uint32_t* const* x, int tokens,
                   float* const* y, int64_t first_row, int64_t valid_rows) {
  const int lanes = groups * static_cast<int>(kBf16GroupRows);
  for (int t = 0; t < tokens; ++t) {
    float acc[kPanelRows] = {};
    const uint16_t* w = panel;
    for (int64_t j = 0; j < pairs; ++j, w += 2 * lanes) {
      const uint32_t pair = x[t][j];
      const float x0 = bf16_to_f32(static_cast<uint16_t>(pair & 0xffffu)), x1 = bf16_to_f32(static_cast<uint16_t>(pair >> 16));
      for (int l = 0; l < lanes; ++l) acc[l] += bf16_to_f32(w[2 * l + 1]) * x1 + bf16_to_f32(w[2 * l]) * x0;
    }
    for (int64_t l = 0; l < std::min<int64_t>(lanes, valid_rows); ++l) y[t][first_row + l] = acc[l];
  }
}

#if defined(__x86_64__)
#define ERNIE_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))

// Elements [c0, c1) of rows [t0, t1) of x (row length cols) into rows of `stride` bf16:
// vcvtne2ps2bf16 on 32 inputs at a time (nearest even). A range that ends the row also
// writes its padding input (zero); tails go through the same instruction under a mask.
ERNIE_BF16_TARGET void round_range_avx512(const float* x, int64_t cols, int64_t stride, int64_t t0, int64_t t1, int64_t c0,
                                          int64_t c1, uint16_t* out) {
  const int64_t end = c1 == cols ? stride : c1;
  for (int64_t t = t0; t < t1; ++t) {
    const float* in = x + t * cols;
    uint16_t* row = out + t * stride;
    for (int64_t i = c0; i < end; i += 32) {
      const int64_t count = std::clamp<int64_t>(c1 - i, 0, 32);
      const auto low_mask = static_cast<__mmask16>(count >= 16 ? 0xffff : (1u << count) - 1u);
      const auto high_mask = static_cast<__mmask16>(count <= 16 ? 0 : count >= 32 ? 0xffff : (1u << (count - 16)) - 1u);
      const __m512bh pair =
          _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(high_mask, in + i + 16), _mm512_maskz_loadu_ps(low_mask, in + i));
      const int64_t width = std::min<int64_t>(32, end - i);
      const auto mask = static_cast<__mmask32>(width >= 32 ? 0xffffffffu : (1u << width) - 1u);
      _mm512_mask_storeu_epi16(row + i, mask, reinterpret_cast<__m512i>(pair));
    }
  }
}

// T tokens x G groups of 16 rows: T·G accumulators, and per input pair G weight loads
// and T broadcasts for T·G vdpbf16ps. Decode (streaming) prefetches the panel 4 KiB
// ahead, non-temporally: each weight line is read once per token (on the 0.3B shape,
// 91% of the roofline measured in the same run against 86% with _MM_HINT_T0, medians of
// 5 alternating runs).
template <int T, int G>
ERNIE_BF16_TARGET void packed_tile(const uint16_t* panel, int64_t pairs, const uint32_t* const* x, float* const* y,
                                   int64_t first_row, int64_t valid_rows, bool streaming) {
  __m512 acc[T][G];
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < G; ++g) acc[t][g] = _mm512_setzero_ps();
  const uint16_t* w = panel;
  constexpr int64_t kStep = G * 2 * kBf16GroupRows;  // bf16 per input pair
  // A do-while: a weight has at least one input pair. With a loop that might run zero
  // times, GCC kept the accumulators in a stack array on both ways out of it, storing
  // all 24 before and after the loop and reloading them to store the results (9% of the
  // tile's samples fell outside its loop, 512 tokens x 1024 inputs).
  int64_t j = 0;
  do {
    __m512bh wv[G];
    for (int g = 0; g < G; ++g) {
      if (streaming) _mm_prefetch(reinterpret_cast<const char*>(w + g * 32 + 16 * kStep), _MM_HINT_NTA);
      wv[g] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + g * 32));
    }
    for (int t = 0; t < T; ++t) {
      const auto xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(x[t][j])));
      for (int g = 0; g < G; ++g) acc[t][g] = _mm512_dpbf16_ps(acc[t][g], wv[g], xv);
    }
    w += kStep;
  } while (++j < pairs);
  for (int g = 0; g < G; ++g) {
    const int64_t rows = std::clamp<int64_t>(valid_rows - g * kBf16GroupRows, 0, kBf16GroupRows);
    const auto mask = static_cast<__mmask16>((1u << rows) - 1u);
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y[t] + first_row + g * kBf16GroupRows, mask, acc[t][g]);
  }
}

template <int T>
ERNIE_BF16_TARGET void packed_tile_groups(int groups, const uint16_t* panel, int64_t pairs, const uint32_t* const* x,
                                          float* const* y, int64_t first_row, int64_t valid_rows, bool streaming) {
  switch (groups) {
    case 4: packed_tile<T, 4>(panel, pairs, x, y, first_row, valid_rows, streaming); break;
    case 3: packed_tile<T, 3>(panel, pairs, x, y, first_row, valid_rows, streaming); break;
    case 2: packed_tile<T, 2>(panel, pairs, x, y, first_row, valid_rows, streaming); break;
    default: packed_tile<T, 1>(panel, pairs, x, y, first_row, valid_rows, streaming); break;
  }
}

ERNIE_BF16_TARGET void panel_avx512(const uint16_t* panel, int groups, int64_t pairs, const uint32_t* const* x,
                                    int tokens, float* const* y, int64_t first_row, int64_t valid_rows, bool streaming) {
  switch (tokens) {
    case 6: packed_tile_groups<6>(groups, panel, pairs, x, y, first_row, valid_rows, streaming); break;
    case 5: packed_tile_groups<5>(groups, panel, pairs, x, y, first_row, valid_rows, streaming); break;
    case 4: packed_tile_groups<4>(groups, panel, pairs, x, y, first_row, valid_rows, streaming); break;
    case 3: packed_tile_groups<3>(groups, panel, pairs, x, y, first_row, valid_rows, streaming); break;
    case 2: packed_tile_groups<2>(groups, panel, pairs, x, y, first_row, valid_rows, streaming); break;
    default: packed_tile_groups<1>(groups, panel, pairs, x, y, first_row, valid_rows, streaming); break;
  }
}

// A SwiGLU MLP's gate and up for T tokens: G groups of gate rows and the same G groups of
// up rows, from group g0 of panels of `groups` groups (2·T·G accumulators; the loop is
// packed_tile's, over two panels at once), then silu(gate)·up for every row, rounded to
// bf16 (nearest even) into the tokens' rows of down's input at column first_col, at most
// `cols` of them. The epilogue is silu_mul and vcvtne2ps2bf16, what the unfused path runs
// over the fp32 gate rows, so the bits are the same; no fp32 gate or up row is written.
// Padding rows have zero weights, so their outputs are silu(0)·0 = 0: the padding input
// down expects.
template <int T, int G>
ERNIE_BF16_TARGET void swiglu_tile(const uint16_t* gate_panel, const uint16_t* up_panel, int groups, int g0,
                                   int64_t pairs, const uint32_t* const* x, uint16_t* const* out, int64_t first_col,
                                   int64_t cols, bool streaming) {
  __m512 gate[T][G], up[T][G];
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < G; ++g) gate[t][g] = up[t][g] = _mm512_setzero_ps();
  const int64_t step = groups * 2 * kBf16GroupRows;  // bf16 per input pair in a panel
  const uint16_t* gw = gate_panel + g0 * 2 * kBf16GroupRows;
  const uint16_t* uw = up_panel + g0 * 2 * kBf16GroupRows;
  int64_t j = 0;
  do {  // a do-while for the reason packed_tile gives
    __m512bh gv[G], uv[G];
    for (int g = 0; g < G; ++g) {
      if (streaming) {
        _mm_prefetch(reinterpret_cast<const char*>(gw + g * 32 + 16 * step), _MM_HINT_NTA);
        _mm_prefetch(reinterpret_cast<const char*>(uw + g * 32 + 16 * step), _MM_HINT_NTA);
      }
      gv[g] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(gw + g * 32));
      uv[g] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(uw + g * 32));
    }
    for (int t = 0; t < T; ++t) {
      const auto xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(x[t][j])));
      for (int g = 0; g < G; ++g) {
        gate[t][g] = _mm512_dpbf16_ps(gate[t][g], gv[g], xv);
        up[t][g] = _mm512_dpbf16_ps(up[t][g], uv[g], xv);
      }
    }
    gw += step;
    uw += step;
  } while (++j < pairs);
  constexpr int kCols = G * kBf16GroupRows;
  alignas(64) float gate_values[T][kCols], up_values[T][kCols];
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < G; ++g) {
      _mm512_store_ps(&gate_values[t][g * kBf16GroupRows], gate[t][g]);
      _mm512_store_ps(&up_values[t][g * kBf16GroupRows], up[t][g]);
    }
  silu_mul(&gate_values[0][0], &up_values[0][0], T * kCols);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < kCols && c < cols; c += 32) {
      const __m512 low = _mm512_load_ps(&gate_values[t][c]);
      const __m512 high = c + 16 < kCols ? _mm512_load_ps(&gate_values[t][c + 16]) : _mm512_setzero_ps();
      const int64_t width = std::min<int64_t>({32, kCols - c, cols - c});  // never past this tile's columns
      const auto mask = static_cast<__mmask32>(width >= 32 ? 0xffffffffu : (1u << width) - 1u);
      _mm512_mask_storeu_epi16(out[t] + first_col + c, mask, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low)));
    }
}

// One panel of gate and up for `tokens` tokens: up to 3 tokens (decode) take all its
// groups at once, so each panel stays one forward stream; more take 2 groups at a time
// (24 accumulators for 6 tokens, as packed_tile's 6 x 4).
template <int T>
ERNIE_BF16_TARGET void swiglu_panel_tokens(const uint16_t* gate_panel, const uint16_t* up_panel, int groups,
                                           int64_t pairs, const uint32_t* const* x, uint16_t* const* out,
                                           int64_t first_col, int64_t cols, bool streaming) {
  constexpr int kMaxGroups = T <= 3 ? 4 : 2;
  for (int g0 = 0; g0 < groups; g0 += kMaxGroups) {
    const int64_t col = first_col + g0 * kBf16GroupRows, left = cols - g0 * kBf16GroupRows;
    const auto tile = [&](auto g) {
      swiglu_tile<T, decltype(g)::value>(gate_panel, up_panel, groups, g0, pairs, x, out, col, left, streaming);
    };
    switch (std::min(kMaxGroups, groups - g0)) {
      case 4: if constexpr (kMaxGroups >= 4) tile(std::integral_constant<int, 4>{}); break;
      case 3: if constexpr (kMaxGroups >= 3) tile(std::integral_constant<int, 3>{}); break;
      case 2: tile(std::integral_constant<int, 2>{}); break;
      default: tile(std::integral_constant<int, 1>{}); break;
    }
  }
}

ERNIE_BF16_TARGET void swiglu_panel(const uint16_t* gate_panel, const uint16_t* up_panel, int groups, int64_t pairs,
                                    const uint32_t* const* x, int tokens, uint16_t* const* out, int64_t first_col,
                                    int64_t cols, bool streaming) {
  switch (tokens) {
    case 6: swiglu_panel_tokens<6>(gate_panel, up_panel, groups, pairs, x, out, first_col, cols, streaming); break;
    case 5: swiglu_panel_tokens<5>(gate_panel, up_panel, groups, pairs, x, out, first_col, cols, streaming); break;
    case 4: swiglu_panel_tokens<4>(gate_panel, up_panel, groups, pairs, x, out, first_col, cols, streaming); break;
    case 3: swiglu_panel_tokens<3>(gate_panel, up_panel, groups, pairs, x, out, first_col, cols, streaming); break;
    case 2: swiglu_panel_tokens<2>(gate_panel, up_panel, groups, pairs, x, out, first_col, cols, streaming); break;
    default: swiglu_panel_tokens<1>(gate_panel, up_panel, groups, pairs, x, out, first_col, cols, streaming); break;
  }
}
#endif

#if defined(__x86_64__)
#define ERNIE_AVX2_FMA_TARGET __attribute__((target("avx2,fma")))

// Without vdpbf16ps the same products are fp32 multiply-adds: a bf16 x bf16 product is
// exact in fp32, so only the summation rounding differs from the instruction's. The
// activations are rounded to bf16 as the AVX-512 path rounds them (nearest even, as
// f32_to_bf16; NaN stays NaN), but kept as floats so each is one broadcast load.
ERNIE_AVX2_FMA_TARGET void round_range_to_floats_avx2(const float* x, int64_t cols, int64_t stride, int64_t t0, int64_t t1,
                                                      int64_t c0, int64_t c1, float* out) {
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t t = t0; t < t1; ++t) {
    const float* in = x + t * cols;
    float* row = out + t * stride;
    int64_t i = c0;
    for (; i + 8 <= c1; i += 8) {
      const __m256 value = _mm256_loadu_ps(in + i);
      const __m256i bits = _mm256_castps_si256(value);
      const __m256i rounding = _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(bits, 16), one));
      const __m256 rounded = _mm256_castsi256_ps(_mm256_and_si256(_mm256_add_epi32(bits, rounding), high));
      const __m256 nan = _mm256_castsi256_ps(_mm256_and_si256(_mm256_or_si256(bits, _mm256_set1_epi32(0x400000)), high));
      _mm256_storeu_ps(row + i, _mm256_blendv_ps(rounded, nan, _mm256_cmp_ps(value, value, _CMP_UNORD_Q)));
    }
    for (; i < c1; ++i) row[i] = bf16_to_f32(f32_to_bf16(in[i]));
    if (c1 == cols)
      for (; i < stride; ++i) row[i] = 0.0f;
  }
}

// T tokens x G groups of the panel (from group g0), each group as two 8-row halves. The
// two inputs of a pair are taken one after the other: the input's weights for every
// half (one 32-byte load per half holds both inputs' bf16, each 4-byte lane the first
// input's in its low half and the second's in its high half, widened by shifts), then
// one broadcast per token and one fused multiply-add per accumulator. So every output
// lane adds its products one input at a time, in order, whatever T and G: a token's
// result does not depend on its batch here either. Prefill (T up to 6, one group) keeps
// 12 accumulators and needs 3 shifts and 6 broadcasts per 12 multiply-adds: alone in L1
// it runs at 96% of the FMA peak, and 99% on fp32 weights with no shifts at all. (A mask
// for the second input saves a shift but needs a 16th register, and GCC then spills.)
// Decode prefetches 4 KiB ahead, as the AVX2 integer kernels do.
//
// Every loop is unrolled explicitly: an accumulator array that GCC still indexes at run
// time stays in memory, and the loop then stores all of it every input pair.
template <int T, int G>
ERNIE_AVX2_FMA_TARGET void packed_tile_avx2(const uint16_t* panel, int panel_groups_total, int g0, int64_t pairs,
                                            const float* const* x, float* const* y, int64_t first_row,
                                            int64_t valid_rows, bool streaming) {
  __m256 acc[T][G][2];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) acc[t][g][0] = acc[t][g][1] = _mm256_setzero_ps();
  const int64_t step = panel_groups_total * 2 * kBf16GroupRows;  // bf16 per input pair
  const uint16_t* w = panel + g0 * 2 * kBf16GroupRows;
  for (int64_t j = 0; j < pairs; ++j, w += step) {
    if (streaming)
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) _mm_prefetch(reinterpret_cast<const char*>(w + g * 32) + 4096, _MM_HINT_T0);
#pragma GCC unroll 8
    for (int input = 0; input < 2; ++input) {
      __m256 wv[G][2];
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
        for (int h = 0; h < 2; ++h) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + g * 32 + h * 16));
          wv[g][h] = _mm256_castsi256_ps(_mm256_slli_epi32(input == 0 ? v : _mm256_srli_epi32(v, 16), 16));
        }
      }
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m256 xv = _mm256_broadcast_ss(x[t] + 2 * j + input);
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
          for (int h = 0; h < 2; ++h) acc[t][g][h] = _mm256_fmadd_ps(wv[g][h], xv, acc[t][g][h]);
      }
    }
  }
  alignas(32) float sums[T][G][2][8];
#pragma GCC unroll 48
  for (int i = 0; i < T * G * 2; ++i) _mm256_store_ps(sums[i / (2 * G)][i / 2 % G][i % 2], acc[i / (2 * G)][i / 2 % G][i % 2]);
  for (int g = 0; g < G; ++g) {
    for (int h = 0; h < 2; ++h) {
      const int64_t offset = (g0 + g) * kBf16GroupRows + 8 * h;
      const int64_t rows = std::clamp<int64_t>(valid_rows - offset, 0, 8);
      for (int t = 0; t < T; ++t) {
        if (rows == 8)
          std::memcpy(y[t] + first_row + offset, sums[t][g][h], sizeof(sums[t][g][h]));
        else if (rows > 0)
          std::memcpy(y[t] + first_row + offset, sums[t][g][h], static_cast<size_t>(rows) * sizeof(float));
      }
    }
  }
}

// One token over up to 4 groups (decode), or up to 6 tokens over one group at a time
// (prefill: 12 accumulators, 2 weights and a broadcast in the 16 ymm registers).
ERNIE_AVX2_FMA_TARGET void panel_avx2(const uint16_t* panel, int groups, int64_t pairs, const float* const* x,
                                      int tokens, float* const* y, int64_t first_row, int64_t valid_rows, bool streaming) {
  if (tokens == 1) {
    switch (groups) {
      case 4: packed_tile_avx2<1, 4>(panel, groups, 0, pairs, x, y, first_row, valid_rows, streaming); return;
      case 3: packed_tile_avx2<1, 3>(panel, groups, 0, pairs, x, y, first_row, valid_rows, streaming); return;
      case 2: packed_tile_avx2<1, 2>(panel, groups, 0, pairs, x, y, first_row, valid_rows, streaming); return;
      default: packed_tile_avx2<1, 1>(panel, groups, 0, pairs, x, y, first_row, valid_rows, streaming); return;
    }
  }
  for (int g = 0; g < groups; ++g) {
    switch (tokens) {
      case 6: packed_tile_avx2<6, 1>(panel, groups, g, pairs, x, y, first_row, valid_rows, streaming); break;
      case 5: packed_tile_avx2<5, 1>(panel, groups, g, pairs, x, y, first_row, valid_rows, streaming); break;
      case 4: packed_tile_avx2<4, 1>(panel, groups, g, pairs, x, y, first_row, valid_rows, streaming); break;
      case 3: packed_tile_avx2<3, 1>(panel, groups, g, pairs, x, y, first_row, valid_rows, streaming); break;
      default: packed_tile_avx2<2, 1>(panel, groups, g, pairs, x, y, first_row, valid_rows, streaming); break;
    }
  }
}
#endif

bool has_bf16_instructions() {
#if defined(__x86_64__)
  static const bool available = active_isa_level() == IsaLevel::kAvx512 && cpu_features().avx512_bf16;
  return available;
#else
  return false;
#endif
}

// AVX2 with FMA (fp32 multiply-adds on the packed layout, panel_avx2).
bool has_avx2_products() {
#if defined(__x86_64__)
  static const bool available = !has_bf16_instructions() && active_isa_level() >= IsaLevel::kAvx2;
  return available;
#else
  return false;
#endif
}

// Work units [begin, end): unit u is panel u / chunks for the tokens of chunk
// u % chunks (kTokenChunk tokens each), kTokens tokens at a time. row_of(t) is token t's
// activations as its panel kernel takes them, and panel(...) multiplies one panel.
template <int kTokens, typename RowOf, typename Panel>
void multiply_units(int64_t n, const WeightMatrix& w, int64_t begin, int64_t end, float* y, RowOf row_of,
                    Panel panel) {
  using Row = decltype(row_of(int64_t{0}));
  const int64_t kp = even_cols(w.cols), pairs = kp / 2, chunks = token_chunks(n);
  const auto* weights = static_cast<const uint16_t*>(w.data);
  const bool streaming = n <= kStreamingTokens;
  for (int64_t u = begin; u < end; ++u) {
    const int64_t p = u / chunks, t0 = u % chunks * kTokenChunk, t1 = std::min(n, t0 + kTokenChunk);
    const uint16_t* panel_weights = weights + p * kPanelRows * kp;
    const int64_t first_row = p * kPanelRows, valid_rows = std::min(kPanelRows, w.rows - first_row);
    for (int64_t t = t0; t < t1; t += kTokens) {
      const int tokens = static_cast<int>(std::min<int64_t>(kTokens, t1 - t));
      Row xs[kTokens];
      float* ys[kTokens];
      for (int i = 0; i < tokens; ++i) {
        xs[i] = row_of(t + i);
        ys[i] = y + (t + i) * w.rows;
      }
      panel(panel_weights, panel_groups(w.rows, p), pairs, xs, tokens, ys, first_row, valid_rows, streaming);
    }
  }
}

}  // namespace

bool bf16_products_available() { return has_bf16_instructions() || has_avx2_products(); }
bool bf16_products_active() { return bf16_products_available() && bf16_products_enabled(); }

bool can_pack_bf16(const WeightMatrix& dense) { return dense.dense() && dense.dtype == DType::kBF16 && !dense.empty(); }

uint64_t packed_bf16_bytes(int64_t rows, int64_t cols) {
  return static_cast<uint64_t>(padded_rows(rows) * even_cols(cols)) * sizeof(uint16_t);
}

WeightMatrix pack_bf16_weight(const WeightMatrix& dense) {
  if (!can_pack_bf16(dense))
    fail("cannot pack a ", dense.rows, "x", dense.cols, " ", dense.dense() ? safetensors_dtype_name(dense.dtype) : "quantized",
         " weight for bf16 products: only dense bf16 weights can be");
  const int64_t rows = dense.rows, cols = dense.cols, kp = even_cols(cols);
  // 64-byte aligned, so no 64-byte load of a panel straddles two cache lines (a large
  // std::vector sits 16 bytes into its pages).
  const std::shared_ptr<uint8_t> owned = allocate_weight_buffer(packed_bf16_bytes(rows, cols));
  if (owned == nullptr) fail("out of memory packing a ", rows, "x", cols, " weight for bf16 products");
  auto* out = reinterpret_cast<uint16_t*>(owned.get());
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = reinterpret_cast<const uint16_t*>(dense.row(r));
    for (int64_t j = 0; j < kp / 2; ++j) {
      uint16_t* at = out + packed_index(rows, kp, r, j);
      at[0] = row[2 * j];
      at[1] = 2 * j + 1 < cols ? row[2 * j + 1] : uint16_t{0};
    }
  }
  WeightMatrix packed = dense;
  packed.format = WeightFormat::kBf16Packed;
  packed.data = out;
  packed.storage = owned;
  return packed;
}

void unpack_bf16_row(const WeightMatrix& packed, int64_t r, uint16_t* out) {
  const int64_t kp = even_cols(packed.cols);
  const auto* data = static_cast<const uint16_t*>(packed.data);
  for (int64_t k = 0; k < packed.cols; ++k) out[k] = data[packed_index(packed.rows, kp, r, k / 2) + k % 2];
}

void Bf16Activations::reset(int64_t n, int64_t cols) {
  n_ = n;
  cols_ = cols;
  const int64_t kp = even_cols(cols);
  if (has_avx2_products()) {
    // Rows one cache line longer than the inputs: at a multiple of 4 KiB apart (every
    // ERNIE width is), a tile's token rows would all fall in the same L1 sets and evict
    // each other (the tile alone: 87% of the FMA peak at that stride, 93% padded).
    stride_ = kp + 16;
    if (floats_.size() < static_cast<size_t>(n * stride_)) floats_.resize(static_cast<size_t>(n * stride_));
  } else {
    stride_ = kp;
    if (bf16_.size() < static_cast<size_t>(n * stride_)) bf16_.resize(static_cast<size_t>(n * stride_));
  }
}

void Bf16Activations::round(const float* x, int64_t t0, int64_t t1, int64_t c0, int64_t c1) {
#if defined(__x86_64__)
  if (has_avx2_products()) return round_range_to_floats_avx2(x, cols_, stride_, t0, t1, c0, c1, floats_.data());
  if (has_bf16_instructions()) return round_range_avx512(x, cols_, stride_, t0, t1, c0, c1, bf16_.data());
#endif
  for (int64_t t = t0; t < t1; ++t) {
    uint16_t* row = bf16_.data() + t * stride_;
    for (int64_t i = c0; i < c1; ++i) row[i] = f32_to_bf16(x[t * cols_ + i]);
    if (c1 == cols_)
      for (int64_t i = cols_; i < stride_; ++i) row[i] = 0;  // the padding input
  }
}

void Bf16Activations::round_all(ThreadPool& pool, const float* x) {
  if (n_ <= kStreamingTokens) return round(x, 0, n_, 0, cols_);
  pool.parallel_for(static_cast<size_t>(n_), 16, [&](size_t begin, size_t end) {
    round(x, static_cast<int64_t>(begin), static_cast<int64_t>(end), 0, cols_);
  });
}

const uint32_t* Bf16Activations::pairs(int64_t t) const {
  return reinterpret_cast<const uint32_t*>(bf16_.data() + t * stride_);
}
const float* Bf16Activations::floats(int64_t t) const { return floats_.data() + t * stride_; }
uint16_t* Bf16Activations::bf16_row(int64_t t) { return bf16_.data() + t * stride_; }

void matmul_bf16_packed_group(ThreadPool& pool, const Bf16Activations& x, std::span<const WeightMatrix* const> ws,
                              std::span<float* const> ys) {
  constexpr size_t kMaxWeights = 4;
  if (ws.empty() || ws.size() > kMaxWeights || ws.size() != ys.size())
    fail("matmul_bf16_packed_group takes 1 to 4 weights, each with an output");
  for (const WeightMatrix* w : ws) {
    if (w->format != WeightFormat::kBf16Packed) fail("matmul_bf16_packed takes a packed bf16 weight");
    if (w->cols != x.cols()) fail("matmul_bf16_packed_group: the input has ", x.cols(), " values, a weight takes ", w->cols);
  }
  const int64_t n = x.n();
  if (n == 0) return;
  const int64_t chunks = token_chunks(n);
  // Units (panel x token chunk) of weight i: [first_unit[i], first_unit[i + 1]).
  int64_t first_unit[kMaxWeights + 1] = {0};
  for (size_t i = 0; i < ws.size(); ++i) first_unit[i + 1] = first_unit[i] + panel_count(ws[i]->rows) * chunks;
  const auto units = static_cast<size_t>(first_unit[ws.size()]);
  // Units are one panel for one chunk of tokens, a panel's chunks neighbours. Each
  // thread walks a contiguous share of them, the first done taking runs of units from
  // the back of the other's (ThreadPool::parallel_streams): decode streams each
  // weight byte once, and in prefill each panel comes into one thread's L2 once and
  // serves all its chunks there. Prefill units claimed in turn, which made both threads
  // fetch every panel, ran 3-4% slower (0.3B bf16, alternating runs: the matmuls in
  // sequence 725 against 757 GFLOP/s over 6, `ernie bench --pp 512` 1155 against 1193
  // tokens/s over 5); units of whole panels left one thread waiting for the other 8% of
  // the time, and chunk-major ones, which stream every panel once per chunk, gave 13%
  // fewer tokens/s. Weights that share the input (q, k, v; gate, up) are one loop over
  // all their units.
  // Runs multiply(weight, local begin, local end) for the part of units [begin, end)
  // that falls in each weight.
  const auto per_weight = [&](size_t begin, size_t end, auto multiply) {
    for (size_t i = 0; i < ws.size(); ++i) {
      const int64_t u0 = std::max(static_cast<int64_t>(begin), first_unit[i]);
      const int64_t u1 = std::min(static_cast<int64_t>(end), first_unit[i + 1]);
      if (u0 < u1) multiply(i, u0 - first_unit[i], u1 - first_unit[i]);
    }
  };
#if defined(__x86_64__)
  if (has_avx2_products()) {
    const auto row_of = [&](int64_t t) { return x.floats(t); };
    pool.parallel_streams(units, 1, [&](size_t begin, size_t end) {
      per_weight(begin, end, [&](size_t i, int64_t u0, int64_t u1) {
        multiply_units<kTileTokens>(n, *ws[i], u0, u1, ys[i], row_of, panel_avx2);
      });
    });
    return;
  }
#endif
  const auto row_of = [&](int64_t t) { return x.pairs(t); };
  const auto panel = [](const uint16_t* weights, int groups, int64_t pairs, const uint32_t* const* xs, int tokens,
                        float* const* outs, int64_t first_row, int64_t valid_rows, bool streaming) {
#if defined(__x86_64__)
    if (has_bf16_instructions()) return panel_avx512(weights, groups, pairs, xs, tokens, outs, first_row, valid_rows, streaming);
#endif
    (void)streaming;
    generic_panel(weights, groups, pairs, xs, tokens, outs, first_row, valid_rows);
  };
  pool.parallel_streams(units, 1, [&](size_t begin, size_t end) {
    per_weight(begin, end, [&](size_t i, int64_t u0, int64_t u1) {
      multiply_units<kTileTokens>(n, *ws[i], u0, u1, ys[i], row_of, panel);
    });
  });
}

bool bf16_rows_writable() { return has_bf16_instructions(); }

void matmul_bf16_swiglu(ThreadPool& pool, const Bf16Activations& x, const WeightMatrix& gate, const WeightMatrix& up,
                        Bf16Activations& out) {
  if (gate.format != WeightFormat::kBf16Packed || up.format != WeightFormat::kBf16Packed)
    fail("matmul_bf16_swiglu takes packed bf16 gate and up weights");
  if (gate.rows != up.rows || gate.cols != up.cols)
    fail("matmul_bf16_swiglu: gate is ", gate.rows, "x", gate.cols, " but up ", up.rows, "x", up.cols);
  if (x.cols() != gate.cols || out.n() != x.n() || out.cols() != gate.rows)
    fail("matmul_bf16_swiglu: ", x.n(), " inputs of ", x.cols(), " values and ", out.n(), " outputs of ", out.cols(),
         " do not fit a ", gate.rows, "x", gate.cols, " gate");
  if (!bf16_rows_writable()) fail("matmul_bf16_swiglu needs AVX512-BF16");
  const int64_t n = x.n();
  if (n == 0) return;
#if defined(__x86_64__)
  const int64_t kp = even_cols(gate.cols), pairs = kp / 2, chunks = token_chunks(n);
  // The outputs' columns down reads: every row's value and, for an odd count, the padding
  // input (a padding row's zero).
  const int64_t out_cols = even_cols(gate.rows);
  const auto* gate_weights = static_cast<const uint16_t*>(gate.data);
  const auto* up_weights = static_cast<const uint16_t*>(up.data);
  const bool streaming = n <= kStreamingTokens;
  // The units and their split are matmul_bf16_packed_group's, a unit being a panel of
  // gate and the same panel of up for one chunk of tokens.
  const auto units = static_cast<size_t>(panel_count(gate.rows) * chunks);
  pool.parallel_streams(units, 1, [&](size_t begin, size_t end) {
    for (auto u = static_cast<int64_t>(begin); u < static_cast<int64_t>(end); ++u) {
      const int64_t p = u / chunks, t0 = u % chunks * kTokenChunk, t1 = std::min(n, t0 + kTokenChunk);
      const int64_t first_col = p * kPanelRows;
      for (int64_t t = t0; t < t1; t += kTileTokens) {
        const int tokens = static_cast<int>(std::min<int64_t>(kTileTokens, t1 - t));
        const uint32_t* xs[kTileTokens];
        uint16_t* outs[kTileTokens];
        for (int i = 0; i < tokens; ++i) {
          xs[i] = x.pairs(t + i);
          outs[i] = out.bf16_row(t + i);
        }
        swiglu_panel(gate_weights + p * kPanelRows * kp, up_weights + p * kPanelRows * kp, panel_groups(gate.rows, p),
                     pairs, xs, tokens, outs, first_col, std::min(kPanelRows, out_cols - first_col), streaming);
      }
    }
  });
#else
  (void)pool;
  (void)out;
#endif
}

}  // namespace ernie
