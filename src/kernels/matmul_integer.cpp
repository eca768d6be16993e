#include "kernels/matmul_integer.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/simd_dispatch.h"
#include "util/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12's _mm512_mask_storeu_ps helpers start from a deliberately undefined vector,
// which its own flow analysis then reports; the values are never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace ernie {
namespace {

constexpr int64_t kLineBytes = 64;
// Decode streams each panel once; prefetching this far ahead keeps more lines in flight
// than the hardware prefetcher alone does (on the 0.3B shape at wint4, 4 KiB gave 20%
// more tokens/s than 1 KiB; 8 KiB no more). The VNNI path prefetches non-temporally:
// each weight line is read once per token, and keeping it out of the outer caches leaves
// them to the activations and the KV cache (on the 0.3B shape at wint4, 80% of the
// roofline measured in the same run against 74%, medians of 5 alternating runs).
constexpr int64_t kPrefetchBytes = 4096;

// Everything a tile needs about the weight, resolved once per call.
struct IntegerWeight {
  const uint8_t* data;
  IntegerPanel panel;  // where a panel keeps its values and fp16 scales (kernels/quantize.h)
  int64_t rows, prows, cols, group, blocks;
  int bits;            // 8, 6 or 4 (kernels/quantize.h)
  int32_t offset;      // the value stored for zero: 128 (int8), 32 (int6) or 8 (int4)
  // int4: per (token, block) of this call's activations, offset · Σx · scale, what the
  // stored zero adds to a block's product in real units (matmul_integer_group); the AVX2
  // tiles read it, the others remove the offset in integers.
  const float* int4_offsets = nullptr;

  // Panel p's block b: its first value line and its 16 scales. The scales sit in the
  // panel's own stream, so the values' prefetch brings them in too.
  const uint8_t* block_values(int64_t p, int64_t b) const { return data + p * panel.bytes + panel.values_at(b); }
  const uint16_t* block_scales(int64_t p, int64_t b) const {
    return reinterpret_cast<const uint16_t*>(data + p * panel.bytes + panel.scales_at(b));
  }
};

IntegerWeight describe(const WeightMatrix& w) {
  IntegerWeight iw{};
  iw.data = static_cast<const uint8_t*>(w.data);
  iw.panel = integer_panel(w.format, w.cols, w.group);
  iw.rows = w.rows;
  iw.prows = (w.rows + kQuantPanelRows - 1) / kQuantPanelRows * kQuantPanelRows;
  iw.cols = w.cols;
  iw.group = w.group;
  iw.blocks = w.cols / w.group;
  iw.bits = integer_bits(w.format);
  iw.offset = 1 << (iw.bits - 1);
  return iw;
}

// Portable path: one token against one panel, accumulating each (row, byte-in-word)
// lane separately so the inner loop is a plain widening multiply-add the compiler
// vectorises for whatever ISA the clone targets.
ERNIE_CLONE_FOR_ISAS
void panel_token_portable(const IntegerWeight& w, int64_t panel, const int8_t* x, const float* xs, const int32_t* xsum,
                          float* out, int64_t valid_rows) {
  float total[kQuantPanelRows] = {};
  for (int64_t b = 0; b < w.blocks; ++b) {
    int32_t lanes[kLineBytes] = {};
    const uint8_t* block = w.block_values(panel, b);
    if (w.bits == 6) {
      for (int64_t u = b * w.group / 16; u < (b + 1) * w.group / 16; ++u) {
        // then the second low line, the high bits
        const uint8_t* low = block + (u - b * w.group / 16) * 3 * kLineBytes;
        for (int i = 0; i < kLineBytes; ++i) {
          const int high = low[2 * kLineBytes + i];
          const int8_t* xu = x + 16 * u + i % 4;
          lanes[i] += ((low[i] & 15) | (high & 3) << 4) * xu[0] + ((low[i] >> 4) | (high >> 2 & 3) << 4) * xu[4] +
                      ((low[kLineBytes + i] & 15) | (high >> 4 & 3) << 4) * xu[8] +
                      ((low[kLineBytes + i] >> 4) | (high >> 6) << 4) * xu[12];
        }
      }
    } else if (w.bits == 4) {
      for (int64_t q = b * w.group / 8; q < (b + 1) * w.group / 8; ++q) {
        const uint8_t* line = block + (q - b * w.group / 8) * kLineBytes;
        for (int i = 0; i < kLineBytes; ++i)
          lanes[i] += (line[i] & 15) * x[8 * q + i % 4] + (line[i] >> 4) * x[8 * q + 4 + i % 4];
      }
    } else {
      for (int64_t q = b * w.group / 4; q < (b + 1) * w.group / 4; ++q) {
        const uint8_t* line = block + (q - b * w.group / 4) * kLineBytes;
        for (int i = 0; i < kLineBytes; ++i) lanes[i] += line[i] * x[4 * q + i % 4];
      }
    }
    const uint16_t* scales = w.block_scales(panel, b);
    for (int r = 0; r < kQuantPanelRows; ++r) {
      const int32_t sum = lanes[4 * r] + lanes[4 * r + 1] + lanes[4 * r + 2] + lanes[4 * r + 3] - w.offset * xsum[b];
      total[r] += static_cast<float>(sum) * (f16_to_f32(scales[r]) * xs[b]);
    }
  }
  std::memcpy(out, total, static_cast<size_t>(valid_rows) * sizeof(float));
}

void panels_portable(const QuantizedActivations& x, const IntegerWeight& w, int64_t panel_begin, int64_t panel_end,
                     float* y) {
  for (int64_t t = 0; t < x.n; ++t)
    for (int64_t p = panel_begin; p < panel_end; ++p)
      panel_token_portable(w, p, x.values.data() + t * x.cols, x.scales.data() + t * w.blocks,
                           x.sums.data() + t * w.blocks, y + t * w.rows + p * kQuantPanelRows,
                           std::min(kQuantPanelRows, w.rows - p * kQuantPanelRows));
}

#if defined(__x86_64__)
#define ERNIE_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,fma")))

// 16 fp16 scales as floats.
ERNIE_VNNI_TARGET inline __m512 load_scales(const uint16_t* scales) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
}

// acc + the 4-byte dot products of unsigned `weights` and signed `x` (vpdpbusd), in
// place. GCC 12 copies the accumulator into a fresh register before every
// _mm512_dpbusd_epi32 and back after it: two moves per product that made the 4 x 3 tile
// front-end bound (measured: 12 products and 24 moves per step).
ERNIE_VNNI_TARGET inline __m512i dpbusd(__m512i acc, __m512i weights, __m512i x) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(weights), "v"(x));
  return acc;
}

// (a & mask) | b in one instruction.
ERNIE_VNNI_TARGET inline __m512i masked_or(__m512i a, __m512i mask, __m512i b) {
  return _mm512_ternarylogic_epi32(a, mask, b, 0xEA);
}

// The 4 lines of byte codes (inputs k..k+3, k+4.., k+8.., k+12..) of the int6 unit at
// `unit` (three 64-byte lines, kernels/quantize.h).
ERNIE_VNNI_TARGET inline void int6_codes(const uint8_t* unit, __m512i codes[4]) {
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f), high_pair = _mm512_set1_epi8(0x30);
  const __m512i first = _mm512_loadu_si512(unit), second = _mm512_loadu_si512(unit + kLineBytes);
  const __m512i high = _mm512_loadu_si512(unit + 2 * kLineBytes);
  // 16-bit shifts move bits across the bytes of a word; the masks keep each byte's own.
  codes[0] = masked_or(first, low_nibbles, _mm512_and_si512(_mm512_slli_epi16(high, 4), high_pair));
  codes[1] = masked_or(_mm512_srli_epi16(first, 4), low_nibbles, _mm512_and_si512(_mm512_slli_epi16(high, 2), high_pair));
  codes[2] = masked_or(second, low_nibbles, _mm512_and_si512(high, high_pair));
  codes[3] = masked_or(_mm512_srli_epi16(second, 4), low_nibbles, _mm512_and_si512(_mm512_srli_epi16(high, 2), high_pair));
}

// MR tokens x NR panels (16 rows each): per block, exact int32 sums with vpdpbusd
// (stored unsigned weights x signed activations), then one float multiply-add per
// accumulator with the block's weight and activation scales. vpdpbusd adds into its
// accumulator, so one accumulator per (token, panel) is a chain of 32 dependent
// instructions per block: small tiles (decode) spread each sum over kChains
// accumulators added at the block's end, which changes nothing (integer sums are exact).
template <int MR, int NR, int kBits>
ERNIE_VNNI_TARGET inline void vnni_tile(const QuantizedActivations& x, const IntegerWeight& w, int64_t t0, int64_t p0,
                                        float* y) {
  constexpr int kChains = MR * NR >= 4 ? 1 : MR * NR >= 2 ? 2 : 4;
  __m512 total[MR][NR];
  for (int t = 0; t < MR; ++t)
    for (int j = 0; j < NR; ++j) total[t][j] = _mm512_setzero_ps();
  const int8_t* xrow[MR];
  for (int t = 0; t < MR; ++t) xrow[t] = x.values.data() + (t0 + t) * x.cols;
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  constexpr bool kInt4 = kBits == 4;
  // Blocks of kIntegerGroup inputs (panels_vnni takes no other size).
  constexpr int64_t kLines = kIntegerGroup * kBits / 32;

  for (int64_t b = 0; b < w.blocks; ++b) {
    const uint8_t* block[NR];
    for (int j = 0; j < NR; ++j) block[j] = w.block_values(p0 + j, b);
    // Each sum starts at minus the stored offset's contribution, so the integer result
    // comes out exact with no subtraction per accumulator afterwards.
    __m512i sum[kChains][MR][NR];
    for (int t = 0; t < MR; ++t) {
      const __m512i start = _mm512_set1_epi32(-w.offset * x.sums[static_cast<size_t>((t0 + t) * w.blocks + b)]);
      for (int j = 0; j < NR; ++j) {
        sum[0][t][j] = start;
        for (int c = 1; c < kChains; ++c) sum[c][t][j] = _mm512_setzero_si512();
      }
    }
    if constexpr (kBits == 6) {
      // Units of 16 inputs: 4 lines of codes from 3 of storage, one chain each.
      for (int64_t i = 0; i < kIntegerGroup / 16; ++i) {
        const int64_t u = b * (kIntegerGroup / 16) + i;
        __m512i codes[NR][4];
        for (int j = 0; j < NR; ++j) {
          const uint8_t* unit = block[j] + i * 3 * kLineBytes;
          if constexpr (MR == 1)
            for (int l = 0; l < 3; ++l)
              _mm_prefetch(reinterpret_cast<const char*>(unit + l * kLineBytes + kPrefetchBytes), _MM_HINT_NTA);
          int6_codes(unit, codes[j]);
        }
        for (int t = 0; t < MR; ++t)
          for (int v = 0; v < 4; ++v) {
            int32_t four;
            std::memcpy(&four, xrow[t] + 16 * u + 4 * v, 4);
            const __m512i xv = _mm512_set1_epi32(four);
            for (int j = 0; j < NR; ++j) sum[v % kChains][t][j] = dpbusd(sum[v % kChains][t][j], codes[j][v], xv);
          }
      }
    } else {
      // Lines of the block, kChains at a time.
      for (int64_t i0 = 0; i0 < kLines; i0 += kChains) {
        for (int c = 0; c < kChains; ++c) {
          const int64_t i = i0 + c, q = b * kLines + i;  // q: the line's place among the row's inputs
          __m512i lo[NR], hi[NR];
          for (int j = 0; j < NR; ++j) {
            const uint8_t* at = block[j] + i * kLineBytes;
            if constexpr (MR == 1) _mm_prefetch(reinterpret_cast<const char*>(at + kPrefetchBytes), _MM_HINT_NTA);
            const __m512i line = _mm512_loadu_si512(at);
            lo[j] = kInt4 ? _mm512_and_si512(line, low_nibbles) : line;
            if constexpr (kInt4) hi[j] = _mm512_and_si512(_mm512_srli_epi16(line, 4), low_nibbles);
          }
          for (int t = 0; t < MR; ++t) {
            if constexpr (kInt4) {
              int32_t first, second;
              std::memcpy(&first, xrow[t] + 8 * q, 4);
              std::memcpy(&second, xrow[t] + 8 * q + 4, 4);
              const __m512i xa = _mm512_set1_epi32(first), xb = _mm512_set1_epi32(second);
              for (int j = 0; j < NR; ++j) {
                sum[c][t][j] = dpbusd(sum[c][t][j], lo[j], xa);
                sum[c][t][j] = dpbusd(sum[c][t][j], hi[j], xb);
              }
            } else {
              int32_t four;
              std::memcpy(&four, xrow[t] + 4 * q, 4);
              const __m512i xv = _mm512_set1_epi32(four);
              for (int j = 0; j < NR; ++j) sum[c][t][j] = dpbusd(sum[c][t][j], lo[j], xv);
            }
          }
        }
      }
    }
    for (int c = 1; c < kChains; ++c)
      for (int t = 0; t < MR; ++t)
        for (int j = 0; j < NR; ++j) sum[0][t][j] = _mm512_add_epi32(sum[0][t][j], sum[c][t][j]);
    __m512 wscale[NR];
    for (int j = 0; j < NR; ++j) wscale[j] = load_scales(w.block_scales(p0 + j, b));
    for (int t = 0; t < MR; ++t) {
      const int64_t at = (t0 + t) * w.blocks + b;
      const __m512 xscale = _mm512_set1_ps(x.scales[static_cast<size_t>(at)]);
      for (int j = 0; j < NR; ++j)
        total[t][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[0][t][j]), _mm512_mul_ps(wscale[j], xscale), total[t][j]);
    }
  }
  for (int j = 0; j < NR; ++j) {
    const int64_t first_row = (p0 + j) * kQuantPanelRows;
    const int64_t valid = std::min(kQuantPanelRows, w.rows - first_row);
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    for (int t = 0; t < MR; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * w.rows + first_row, mask, total[t][j]);
  }
}

template <int MR, int NR>
ERNIE_VNNI_TARGET inline void vnni_tile_format(const QuantizedActivations& x, const IntegerWeight& w, int64_t t0,
                                               int64_t p0, float* y) {
  if (w.bits == 4) vnni_tile<MR, NR, 4>(x, w, t0, p0, y);
  else if (w.bits == 6) vnni_tile<MR, NR, 6>(x, w, t0, p0, y);
  else vnni_tile<MR, NR, 8>(x, w, t0, p0, y);
}

template <int MR>
ERNIE_VNNI_TARGET inline void vnni_tile_panels(const QuantizedActivations& x, const IntegerWeight& w, int64_t t0,
                                               int64_t p0, int nr, float* y) {
  switch (nr) {
    case 4: vnni_tile_format<MR, 4>(x, w, t0, p0, y); break;
    case 3: vnni_tile_format<MR, 3>(x, w, t0, p0, y); break;
    case 2: vnni_tile_format<MR, 2>(x, w, t0, p0, y); break;
    default: vnni_tile_format<MR, 1>(x, w, t0, p0, y); break;
  }
}

// Tokens in chunks whose activations stay in L2 while the panels stream past them.
ERNIE_VNNI_TARGET void panels_vnni(const QuantizedActivations& x, const IntegerWeight& w, int64_t panel_begin,
                                   int64_t panel_end, float* y) {
  if (w.group != kIntegerGroup) return panels_portable(x, w, panel_begin, panel_end, y);
  const int64_t chunk = std::clamp<int64_t>((256 * 1024 / x.cols) / 4 * 4, 4, 256);
  // Few tokens: one panel at a time, so each thread reads its weights as one sequential
  // stream (measured faster than interleaving panels, which the prefetcher follows
  // worse); many tokens: 4 x 3 tiles use 24 of the 32 vector registers for accumulators.
  const int max_nr = x.n < 4 ? 1 : 3;
  for (int64_t c0 = 0; c0 < x.n; c0 += chunk) {
    const int64_t c1 = std::min(x.n, c0 + chunk);
    for (int64_t p = panel_begin; p < panel_end; p += max_nr) {
      const int nr = static_cast<int>(std::min<int64_t>(max_nr, panel_end - p));
      int64_t t = c0;
      for (; t + 4 <= c1; t += 4) vnni_tile_panels<4>(x, w, t, p, nr, y);
      switch (c1 - t) {
        case 3: vnni_tile_panels<3>(x, w, t, p, nr, y); break;
        case 2: vnni_tile_panels<2>(x, w, t, p, nr, y); break;
        case 1: vnni_tile_panels<1>(x, w, t, p, nr, y); break;
        default: break;
      }
    }
  }
}
#endif

#if defined(__x86_64__)
#define ERNIE_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

// The int6 unit's 4 lines of byte codes (as int6_codes above), for the 8 rows of the
// 32-byte half at `half` of its three lines.
ERNIE_AVX2_TARGET inline void int6_codes_half(const uint8_t* half, __m256i codes[4]) {
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f), high_pair = _mm256_set1_epi8(0x30);
  const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(half));
  const __m256i second = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(half + kLineBytes));
  const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(half + 2 * kLineBytes));
  codes[0] = _mm256_or_si256(_mm256_and_si256(first, low_nibbles), _mm256_and_si256(_mm256_slli_epi16(high, 4), high_pair));
  codes[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(first, 4), low_nibbles),
                             _mm256_and_si256(_mm256_slli_epi16(high, 2), high_pair));
  codes[2] = _mm256_or_si256(_mm256_and_si256(second, low_nibbles), _mm256_and_si256(high, high_pair));
  codes[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(second, 4), low_nibbles),
                             _mm256_and_si256(_mm256_srli_epi16(high, 2), high_pair));
}

// AVX2 has no vpdpbusd; vpmaddubsw (unsigned x signed bytes, adjacent pairs summed to
// int16 with saturation) and vpmaddwd against ones (int16 pairs to int32) do the same
// 4-byte dot products. A 64-byte line is two 32-byte halves of 8 rows; a tile is MR
// tokens x NH halves, each half's values loaded once for all MR tokens.
//  - int8 (stored + 128): the flipped byte is the signed weight; its magnitude goes in as
//    the unsigned operand and its sign moves onto the activation, so a pair is at most
//    2 * 127 * 127 and never saturates, and the sum is exact with no offset to remove.
//  - int4 codes (0..15) go in as they are, and a block's 4 lines are summed in 16 bits
//    (8 vpmaddubsw of at most 2 * 15 * 127 each: 30480 < 32767) before one vpmaddwd
//    widens them: a quarter of int8's widening work per product. The codes carry 8 * Σx
//    per block, removed in the float epilogue.
//  - int6 codes (0..63) are rebuilt from their unit's three lines; two vpmaddubsw (at most
//    2 * 2 * 63 * 127 = 32004) fit 16 bits before each vpmaddwd, and the sums start at
//    -32 * Σx so they come out exact.
template <int MR, int NH, int kBits>
ERNIE_AVX2_TARGET inline void avx2_tile(const QuantizedActivations& x, const IntegerWeight& w, int64_t t0, int64_t p,
                                        int h0, float* y) {
  // Blocks of kIntegerGroup inputs (panels_avx2 takes no other size): 4 int4 lines, whose
  // 8 vpmaddubsw fit a 16-bit sum, 6 int6 lines (2 units) or 8 int8 lines.
  constexpr bool kInt4 = kBits == 4;
  constexpr int64_t kLines = kIntegerGroup * kBits / 32;
  static_assert(!kInt4 || 2 * kLines * 2 * 15 * 127 <= 32767, "int4 16-bit block sums must not saturate");
  static_assert(2 * 2 * 63 * 127 <= 32767, "int6 pairs of vpmaddubsw must not saturate");
  __m256 total[MR][NH];
  for (int t = 0; t < MR; ++t)
    for (int h = 0; h < NH; ++h) total[t][h] = _mm256_setzero_ps();
  const int8_t* xrow[MR];
  const float* xscale[MR];
  const float* xoffset[MR];  // int4 only
  for (int t = 0; t < MR; ++t) {
    xrow[t] = x.values.data() + (t0 + t) * x.cols;
    xscale[t] = x.scales.data() + (t0 + t) * w.blocks;
    xoffset[t] = kInt4 ? w.int4_offsets + (t0 + t) * w.blocks : nullptr;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < w.blocks; ++b) {
    const uint8_t* line = w.block_values(p, b) + 32 * h0;
    __m256i sum[MR][NH];
    for (int t = 0; t < MR; ++t) {
      const __m256i start = kBits == 6 ? _mm256_set1_epi32(-w.offset * x.sums[static_cast<size_t>((t0 + t) * w.blocks + b)])
                                       : _mm256_setzero_si256();
      for (int h = 0; h < NH; ++h) sum[t][h] = start;
    }
    if constexpr (kBits == 6) {
      for (int64_t u = 0; u < kIntegerGroup / 16; ++u, line += 3 * kLineBytes) {
        if constexpr (NH == 2)
          for (int l = 0; l < 3; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(line + l * kLineBytes + kPrefetchBytes), _MM_HINT_T0);
        __m256i codes[NH][4];
        for (int h = 0; h < NH; ++h) int6_codes_half(line + 32 * h, codes[h]);
        const int64_t k = 16 * (b * (kIntegerGroup / 16) + u);
        for (int t = 0; t < MR; ++t) {
          __m256i xv[4];
          for (int v = 0; v < 4; ++v) {
            int32_t four;
            std::memcpy(&four, xrow[t] + k + 4 * v, 4);
            xv[v] = _mm256_set1_epi32(four);
          }
          for (int h = 0; h < NH; ++h) {
            const __m256i front = _mm256_add_epi16(_mm256_maddubs_epi16(codes[h][0], xv[0]), _mm256_maddubs_epi16(codes[h][1], xv[1]));
            const __m256i back = _mm256_add_epi16(_mm256_maddubs_epi16(codes[h][2], xv[2]), _mm256_maddubs_epi16(codes[h][3], xv[3]));
            sum[t][h] = _mm256_add_epi32(sum[t][h], _mm256_add_epi32(_mm256_madd_epi16(front, ones), _mm256_madd_epi16(back, ones)));
          }
        }
      }
    } else if constexpr (kInt4) {
      const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 2
      for (int64_t i = 0; i < kLines; ++i, line += kLineBytes) {
        if constexpr (NH == 2) _mm_prefetch(reinterpret_cast<const char*>(line + kPrefetchBytes), _MM_HINT_T0);
        __m256i lo[NH], hi[NH];
        for (int h = 0; h < NH; ++h) {
          const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + 32 * h));
          lo[h] = _mm256_and_si256(half, low_nibbles);
          hi[h] = _mm256_and_si256(_mm256_srli_epi16(half, 4), low_nibbles);
        }
        const int64_t k = 8 * (b * kLines + i);
        for (int t = 0; t < MR; ++t) {
          int32_t first, second;
          std::memcpy(&first, xrow[t] + k, 4);
          std::memcpy(&second, xrow[t] + k + 4, 4);
          const __m256i xa = _mm256_set1_epi32(first), xb = _mm256_set1_epi32(second);
          for (int h = 0; h < NH; ++h) {
            const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], xa), _mm256_maddubs_epi16(hi[h], xb));
            sum[t][h] = _mm256_add_epi16(sum[t][h], pairs);
          }
        }
      }
    } else {
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 2
      for (int64_t i = 0; i < kLines; ++i, line += kLineBytes) {
        if constexpr (NH == 2) _mm_prefetch(reinterpret_cast<const char*>(line + kPrefetchBytes), _MM_HINT_T0);
        __m256i value[NH], magnitude[NH];
        for (int h = 0; h < NH; ++h) {
          value[h] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + 32 * h)), flip);
          magnitude[h] = _mm256_abs_epi8(value[h]);
        }
        const int64_t k = 4 * (b * kLines + i);
        for (int t = 0; t < MR; ++t) {
          int32_t four;
          std::memcpy(&four, xrow[t] + k, 4);
          const __m256i xv = _mm256_set1_epi32(four);
          for (int h = 0; h < NH; ++h) {
            const __m256i products = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude[h], _mm256_sign_epi8(xv, value[h])), ones);
            sum[t][h] = _mm256_add_epi32(sum[t][h], products);
          }
        }
      }
    }
    __m256 wscale[NH];
    for (int h = 0; h < NH; ++h)
      wscale[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.block_scales(p, b) + 8 * (h0 + h))));
    for (int t = 0; t < MR; ++t) {
      const __m256 scale = _mm256_set1_ps(xscale[t][b]);
      if constexpr (kInt4) {
        // The codes' offset comes off in float, precomputed per (token, block): one
        // fused multiply-subtract instead of an integer product, shift and subtraction.
        const __m256 offset = _mm256_set1_ps(xoffset[t][b]);
        for (int h = 0; h < NH; ++h) {
          const __m256 block = _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sum[t][h], ones)), scale, offset);
          total[t][h] = _mm256_fmadd_ps(block, wscale[h], total[t][h]);
        }
      } else {
        for (int h = 0; h < NH; ++h)
          total[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t][h]), _mm256_mul_ps(wscale[h], scale), total[t][h]);
      }
    }
  }
  for (int h = 0; h < NH; ++h) {
    const int64_t first_row = p * kQuantPanelRows + 8 * (h0 + h);
    const int64_t valid = std::min<int64_t>(8, w.rows - first_row);
    if (valid <= 0) break;
    for (int t = 0; t < MR; ++t) {
      float* out = y + (t0 + t) * w.rows + first_row;
      if (valid == 8) {
        _mm256_storeu_ps(out, total[t][h]);
      } else {
        alignas(32) float rows[8];
        _mm256_store_ps(rows, total[t][h]);
        std::memcpy(out, rows, static_cast<size_t>(valid) * sizeof(float));
      }
    }
  }
}

template <int MR, int NH>
ERNIE_AVX2_TARGET inline void avx2_tile_format(const QuantizedActivations& x, const IntegerWeight& w, int64_t t0,
                                               int64_t p, int h0, float* y) {
  if (w.bits == 4) avx2_tile<MR, NH, 4>(x, w, t0, p, h0, y);
  else if (w.bits == 6) avx2_tile<MR, NH, 6>(x, w, t0, p, h0, y);
  else avx2_tile<MR, NH, 8>(x, w, t0, p, h0, y);
}

// Few tokens: whole panels (both halves), one sequential stream per thread. Many tokens:
// 4 tokens x one half at a time (16 of the 16 ymm registers), the panel re-read from L1
// for the second half and for every 4 tokens.
ERNIE_AVX2_TARGET void panels_avx2(const QuantizedActivations& x, const IntegerWeight& w, int64_t panel_begin,
                                   int64_t panel_end, float* y) {
  if (w.group != kIntegerGroup) return panels_portable(x, w, panel_begin, panel_end, y);
  if (x.n < 4) {
    for (int64_t p = panel_begin; p < panel_end; ++p) {
      int64_t t = 0;
      for (; t + 2 <= x.n; t += 2) avx2_tile_format<2, 2>(x, w, t, p, 0, y);
      if (t < x.n) avx2_tile_format<1, 2>(x, w, t, p, 0, y);
    }
    return;
  }
  const int64_t chunk = std::clamp<int64_t>((256 * 1024 / x.cols) / 4 * 4, 4, 256);
  for (int64_t c0 = 0; c0 < x.n; c0 += chunk) {
    const int64_t c1 = std::min(x.n, c0 + chunk);
    for (int64_t p = panel_begin; p < panel_end; ++p) {
      for (int h = 0; h < 2; ++h) {
        int64_t t = c0;
        for (; t + 4 <= c1; t += 4) avx2_tile_format<4, 1>(x, w, t, p, h, y);
        switch (c1 - t) {
          case 3: avx2_tile_format<3, 1>(x, w, t, p, h, y); break;
          case 2: avx2_tile_format<2, 1>(x, w, t, p, h, y); break;
          case 1: avx2_tile_format<1, 1>(x, w, t, p, h, y); break;
          default: break;
        }
      }
    }
  }
}
#endif

using PanelKernel = void (*)(const QuantizedActivations&, const IntegerWeight&, int64_t, int64_t, float*);

// offset · Σx · scale for every (token, block) of x, in a buffer of the calling thread
// that lasts until its next call (the pool's threads read it within this one).
std::vector<float>& int4_offset_buffer() {
  thread_local std::vector<float> offsets;
  return offsets;
}

// Writes x's x.sums.size() offsets at `out`.
void fill_int4_offsets(const QuantizedActivations& x, int32_t offset, float* out) {
  for (size_t i = 0; i < x.sums.size(); ++i) out[i] = static_cast<float>(offset) * x.scales[i] * static_cast<float>(x.sums[i]);
}

// Whether `kernel` takes int4's offset from int4_offsets (the AVX2 tiles) rather than
// in integers, so the others are spared computing it.
bool reads_int4_offsets(PanelKernel kernel) {
#if defined(__x86_64__)
  return kernel == panels_avx2;
#else
  (void)kernel;
  return false;
#endif
}

PanelKernel select_kernel() {
#if defined(__x86_64__)
  if (active_isa_level() == IsaLevel::kAvx512 && cpu_features().avx512_vnni) return panels_vnni;
  if (active_isa_level() >= IsaLevel::kAvx2) return panels_avx2;
#endif
  return panels_portable;
}

}  // namespace

void reserve_integer_scratch(int64_t max_tokens, int64_t max_cols) {
  int4_offset_buffer().reserve(static_cast<size_t>(max_tokens * (max_cols / kIntegerGroup)));
}

void matmul_integer(ThreadPool& pool, const QuantizedActivations& x, const WeightMatrix& w, float* y) {
  const WeightMatrix* ws[1] = {&w};
  float* ys[1] = {y};
  matmul_integer_group(pool, x, ws, ys);
}

void matmul_integer_group(ThreadPool& pool, const QuantizedActivations& x, std::span<const WeightMatrix* const> ws,
                          std::span<float* const> ys) {
  if (ws.size() > 4) fail("matmul_integer_group takes 1 to 4 weights");
  const QuantizedActivations* xs[4] = {&x, &x, &x, &x};
  matmul_integer_batch(pool, std::span(xs, ws.size()), ws, ys);
}

void matmul_integer_batch(ThreadPool& pool, std::span<const QuantizedActivations* const> xs,
                          std::span<const WeightMatrix* const> ws, std::span<float* const> ys) {
  static const PanelKernel kernel = select_kernel();
  static const bool wants_int4_offsets = reads_int4_offsets(kernel);
  if (ws.empty() || ws.size() > kMaxBatchWeights || ws.size() != ys.size() || ws.size() != xs.size())
    fail("matmul_integer_batch takes 1 to ", kMaxBatchWeights, " weights, each with its activations and output");
  // Work is split in units of panels so every thread streams its own share of the
  // weights. Decode (few tokens) is bound by memory: parallel_streams gives each thread
  // one contiguous share, as long a stream as there can be (measured on the 0.3B shape at
  // wint4: 11% more tokens/s than units of 12 panels claimed in turn), and a thread done
  // with its share takes half of what the other has left off its back. Prefill is bound by
  // arithmetic: units of 3 panels (one 4x3 tile column) even out the threads' shares, at
  // the cost of re-reading activations from cache.
  IntegerWeight described[kMaxBatchWeights];
  // Whether weight i reads the activations of int4 weight i - 1 (gate and up): it shares
  // their offsets.
  const auto same_int4_input = [&](size_t i) { return i > 0 && xs[i] == xs[i - 1] && described[i - 1].bits == 4; };
  bool decode = true;
  size_t offset_floats = 0;  // int4 offsets of every distinct activation (AVX2 tiles)
  for (size_t i = 0; i < ws.size(); ++i) {
    described[i] = describe(*ws[i]);
    decode = decode && xs[i]->n < kDecodeRows;
    if (described[i].bits == 4 && wants_int4_offsets && !same_int4_input(i)) offset_floats += xs[i]->sums.size();
  }
  if (offset_floats > 0) {
    // One buffer for all, sized before any pointer into it is taken.
    std::vector<float>& offsets = int4_offset_buffer();
    offsets.resize(offset_floats);
    float* next = offsets.data();
    for (size_t i = 0; i < ws.size(); ++i) {
      if (described[i].bits != 4) continue;
      if (same_int4_input(i)) {
        described[i].int4_offsets = described[i - 1].int4_offsets;
        continue;
      }
      fill_int4_offsets(*xs[i], described[i].offset, next);
      described[i].int4_offsets = next;
      next += xs[i]->sums.size();
    }
  }
  const int64_t unit = decode ? 1 : 3;
  int64_t first_unit[kMaxBatchWeights + 1] = {0};  // units of weight i: [first_unit[i], first_unit[i + 1])
  for (size_t i = 0; i < ws.size(); ++i) {
    const int64_t panels = described[i].prows / kQuantPanelRows;
    first_unit[i + 1] = first_unit[i] + (panels + unit - 1) / unit;
  }
  // Units [begin, end), one kernel call per weight they cover.
  const auto run_units = [&](size_t begin, size_t end) {
    for (size_t i = 0; i < ws.size(); ++i) {
      const int64_t u0 = std::max(static_cast<int64_t>(begin), first_unit[i]);
      const int64_t u1 = std::min(static_cast<int64_t>(end), first_unit[i + 1]);
      if (u0 >= u1) continue;
      const int64_t panels = described[i].prows / kQuantPanelRows;
      kernel(*xs[i], described[i], (u0 - first_unit[i]) * unit, std::min(panels, (u1 - first_unit[i]) * unit), ys[i]);
    }
  };
  const auto units = static_cast<size_t>(first_unit[ws.size()]);
  if (decode) pool.parallel_streams(units, 1, run_units);
  else pool.parallel_for(units, 1, run_units);
}

void matmul_integer_reference(const QuantizedActivations& x, const WeightMatrix& w, float* y) {
  const std::vector<float> weights = dequantize_weight(w);
  const int64_t blocks = w.cols / w.group;
  for (int64_t t = 0; t < x.n; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      double total = 0.0;
      for (int64_t b = 0; b < blocks; ++b) {
        double block = 0.0;
        for (int64_t k = b * w.group; k < (b + 1) * w.group; ++k)
          block += static_cast<double>(x.values[static_cast<size_t>(t * x.cols + k)]) *
                   weights[static_cast<size_t>(r * w.cols + k)];
        total += block * x.scales[static_cast<size_t>(t * blocks + b)];
      }
      y[t * w.rows + r] = static_cast<float>(total);
    }
  }
}

}  // namespace ernie
