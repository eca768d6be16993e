#include "kernels/flash_attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/cpu_features.h"
#include "kernels/fast_exp.h"
#include "kernels/matmul.h"
#include "kernels/x86_intrinsics.h"
#include "tensor/dtype.h"
#include "util/error.h"

// The vector helpers below are always inlined into functions compiled for one ISA, so
// the calling-convention note GCC gives for vector arguments never applies.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace ernie {

namespace {

size_t int8_scales_offset(int kv_heads, int head_dim) {
  const size_t codes = static_cast<size_t>(kv_heads) * static_cast<size_t>(head_dim);
  return (codes + 3) & ~size_t{3};
}

}  // namespace

const char* kv_storage_name(KvStorage storage) {
  switch (storage) {
    case KvStorage::kF32: return "fp32";
    case KvStorage::kInt8: return "int8";
    case KvStorage::kBF16: return "bf16";
  }
  return "?";
}

size_t kv_row_bytes(KvStorage storage, int kv_heads, int head_dim) {
  const size_t values = static_cast<size_t>(kv_heads) * static_cast<size_t>(head_dim);
  if (storage == KvStorage::kF32) return values * sizeof(float);
  if (storage == KvStorage::kBF16) return values * sizeof(uint16_t);
  return int8_scales_offset(kv_heads, head_dim) + static_cast<size_t>(kv_heads) * sizeof(float);
}

void store_kv_row(const float* values, int kv_heads, int head_dim, KvStorage storage, void* row) {
  if (storage == KvStorage::kF32) {
    std::memcpy(row, values, kv_row_bytes(storage, kv_heads, head_dim));
    return;
  }
  if (storage == KvStorage::kBF16) {
    const size_t count = static_cast<size_t>(kv_heads) * static_cast<size_t>(head_dim);
    for (size_t i = 0; i < count; ++i) {
      const uint16_t bits = f32_to_bf16(values[i]);
      std::memcpy(static_cast<uint8_t*>(row) + 2 * i, &bits, sizeof bits);
    }
    return;
  }
  auto* codes = static_cast<int8_t*>(row);
  auto* scales = static_cast<uint8_t*>(row) + int8_scales_offset(kv_heads, head_dim);
  for (int head = 0; head < kv_heads; ++head) {
    const float* x = values + static_cast<size_t>(head) * head_dim;
    float max_abs = 0.0f;
    for (int d = 0; d < head_dim; ++d) max_abs = std::max(max_abs, std::fabs(x[d]));
    const float scale = max_abs / 127.0f;
    const float inverse = max_abs > 0.0f ? 127.0f / max_abs : 0.0f;
    for (int d = 0; d < head_dim; ++d) {
      const float code = std::clamp(std::nearbyint(x[d] * inverse), -127.0f, 127.0f);
      codes[static_cast<size_t>(head) * head_dim + d] = static_cast<int8_t>(code);
    }
    // memcpy: the caller promises no alignment for the row.
    std::memcpy(scales + sizeof(float) * static_cast<size_t>(head), &scale, sizeof scale);
  }
}

void store_kv_row_static(const float* values, int kv_heads, int head_dim, const float* inverse_scales, void* row) {
  auto* codes = static_cast<int8_t*>(row);
  const size_t count = static_cast<size_t>(kv_heads) * static_cast<size_t>(head_dim);
  for (size_t c = 0; c < count; ++c)
    codes[c] = static_cast<int8_t>(std::clamp(std::nearbyint(values[c] * inverse_scales[c]), -127.0f, 127.0f));
  const float one = 1.0f;
  auto* scales = static_cast<uint8_t*>(row) + int8_scales_offset(kv_heads, head_dim);
  for (int head = 0; head < kv_heads; ++head) std::memcpy(scales + sizeof(float) * static_cast<size_t>(head), &one, sizeof one);
}

void load_kv_row(const void* row, int kv_heads, int head_dim, KvStorage storage, float* values) {
  if (storage == KvStorage::kF32) {
    std::memcpy(values, row, kv_row_bytes(storage, kv_heads, head_dim));
    return;
  }
  if (storage == KvStorage::kBF16) {
    convert_to_f32(DType::kBF16, row, values, static_cast<size_t>(kv_heads) * static_cast<size_t>(head_dim));
    return;
  }
  const auto* codes = static_cast<const int8_t*>(row);
  const auto* scales = static_cast<const uint8_t*>(row) + int8_scales_offset(kv_heads, head_dim);
  for (int head = 0; head < kv_heads; ++head) {
    float scale;
    std::memcpy(&scale, scales + sizeof(float) * static_cast<size_t>(head), sizeof scale);
    for (int d = 0; d < head_dim; ++d) {
      const size_t i = static_cast<size_t>(head) * head_dim + d;
      values[i] = static_cast<float>(codes[i]) * scale;
    }
  }
}

namespace {

// Query rows (token x head) per tile and key positions per block. A tile's Q and its O
// accumulator (144 x 128 floats each) stay in L2 while every key block passes; a block's
// K and V rows stay in L1/L2 while every row of the tile uses them. More rows per tile
// share each staged K/V block more widely: on the AVX2 host, 144 rows gave 20% more
// FLOP/s than 64 together with 3 x 4 score tiles (attention_bench BM_PrefillBf16,
// medians of 12 interleaved runs; 192 rows +16%). 144 is a whole number of row groups
// for every ISA's configuration below.
constexpr int kTileRows = 144;
constexpr int kBlockKeys = 64;
// Buffers start on 64-byte boundaries so whole-vector loads never split cache lines.
constexpr size_t kAlignFloats = 16;

constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// The call's arguments plus the scratch carved into buffers (see carve_scratch).
struct Problem {
  const void* const* key_rows;
  const void* const* value_rows;
  const float* q;
  float* out;
  uint16_t* out_bf16;  // instead of out where set: the output rounded to bf16 (nearest even)
  int64_t q_stride, out_stride, first_position;
  int64_t all_keys;  // > 0: every query sees keys 0 .. all_keys - 1 (bidirectional)
  int num_queries, kv_heads, kv_head, group, head_dim;
  float scale;
  KvStorage storage;
  float* qt;     // the tile's queries times scale·log2(e): [head_dim][tile rows] or [tile rows][o_stride]
  float* o;      // [tile rows][o_stride]: unnormalised output accumulator
  float* s;      // [block keys][tile rows]: scores, then probabilities, of one block
  float* limit;  // [tile rows]: last key position each row may see (as float: exact below 2^24)
  float* m;      // [tile rows]: running max of the scores (log2 domain)
  float* l;      // [tile rows]: running sum of the probabilities
  float* alpha;  // [tile rows]: rescale factor of the current block
  float* kf;     // [block keys][o_stride]: keys converted to fp32 (int8 rows, odd head_dim)
  float* vf;     // [block keys][o_stride]: values likewise
  // bf16 products (attend_bf16): the block's probabilities rounded to bf16, two keys to
  // each 32-bit lane (bits only, never read as floats): [block keys / 2][tile rows].
  float* probability_pairs;
  int o_stride;  // head_dim rounded up to 16 floats
};

size_t scratch_floats(int head_dim) {
  const size_t padded = round_up(static_cast<size_t>(head_dim), kAlignFloats);
  return 2 * kTileRows * padded + kBlockKeys * kTileRows + 4 * kTileRows + 2 * kBlockKeys * padded +
         kBlockKeys / 2 * kTileRows + kAlignFloats;
}

void carve_scratch(float* base, Problem& p) {
  auto take = [&](size_t floats) {
    float* at = base;
    base += round_up(floats, kAlignFloats);
    return at;
  };
  p.o_stride = static_cast<int>(round_up(static_cast<size_t>(p.head_dim), kAlignFloats));
  const size_t padded = static_cast<size_t>(p.o_stride);
  p.qt = take(kTileRows * padded);
  p.o = take(kTileRows * padded);
  p.s = take(kBlockKeys * kTileRows);
  p.limit = take(kTileRows);
  p.m = take(kTileRows);
  p.l = take(kTileRows);
  p.alpha = take(kTileRows);
  p.kf = take(kBlockKeys * padded);
  p.vf = take(kBlockKeys * padded);
  p.probability_pairs = take(kBlockKeys / 2 * kTileRows);
}

#define ERNIE_INLINE [[gnu::always_inline]] inline

// Portable SIMD through GCC/Clang vector types, as in matmul.cpp: the same source becomes
// SSE, AVX2 or AVX-512 code depending on the target of the function it is inlined into.
typedef float v4f __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef int32_t v16i __attribute__((vector_size(64)));

template <typename F, typename I>
struct Lanes {
  using Float = F;
  using Int = I;
  static constexpr int kWidth = sizeof(F) / sizeof(float);

  ERNIE_INLINE static F load(const float* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  ERNIE_INLINE static void store(float* p, F v) { std::memcpy(p, &v, sizeof v); }
  // For constants only. Run-time scalars are broadcast by writing `scalar * vector`, which
  // GCC turns into vbroadcastss or an embedded {1toN} operand; a splat helper for them
  // costs an extra add (F{} + x: 0 + -0 is +0) or a trip through memory.
  ERNIE_INLINE static F constant(float x) { return F{} + x; }
  ERNIE_INLINE static F max(F a, F b) { return a > b ? a : b; }
};

using L4 = Lanes<v4f, v4i>;
using L8 = Lanes<v8f, v8i>;
using L16 = Lanes<v16f, v16i>;

// 2^t for t <= 0; anything below -127 (including -inf, the masked scores) gives 0.
// t = n + f with n integer and |f| <= 1/2; 2^f from its Taylor series to degree 7
// (truncation error below 6e-9 relative, so the result is within a few ulp), 2^n built in
// the exponent bits. Scores are kept in the log2 domain (q is pre-multiplied by log2(e)),
// so this is exp() of the natural-log scores without an extra multiply.
template <typename L>
ERNIE_INLINE typename L::Float exp2_nonpositive(typename L::Float t) {
  using F = typename L::Float;
  using I = typename L::Int;
  const F lowest = L::constant(-127.0f);
  t = t < lowest ? lowest : t;
  // Adding and subtracting 1.5·2^23 rounds to the nearest integer (|t| is far below 2^22).
  const F shifter = L::constant(12582912.0f);
  const F n = (t + shifter) - shifter;
  const F p = exp2_taylor(t - n);
  // n = -127 gives a zero exponent field, i.e. 2^n flushed to 0: exactly what masked
  // positions need.
  const I bits = (__builtin_convertvector(n, I) + 127) << 23;
  F power;
  std::memcpy(&power, &bits, sizeof power);
  return p * power;
}

// Sum of each of W accumulators, transposed into one vector (lane n = Σ lanes of x[n]).
// Each level folds pairs of vectors: u takes the low half of every 2H-lane block of a and
// of b, v the high halves, and u + v keeps H partial sums of a beside H of b per block.
// After log2(W) levels lane l holds the sum of input bit_reverse(l), so inputs go in
// bit-reversed order.
template <int W, int H>
constexpr int fold_low(int i) {
  return (i % (2 * H) < H ? 0 : W - H) + i / (2 * H) * 2 * H + i % (2 * H);
}
template <int W, int H>
constexpr int fold_high(int i) {
  return fold_low<W, H>(i) + H;
}
template <typename F, int W, int H, size_t... I>
ERNIE_INLINE F fold_pair(F a, F b, std::index_sequence<I...>) {
  return __builtin_shufflevector(a, b, fold_low<W, H>(I)...) + __builtin_shufflevector(a, b, fold_high<W, H>(I)...);
}
constexpr int bit_reverse(int i, int width) {
  int r = 0;
  for (int bit = 1; bit < width; bit <<= 1) r = (r << 1) | ((i & bit) ? 1 : 0);
  return r;
}
template <typename L, int H>
ERNIE_INLINE void fold_levels(typename L::Float* v) {
  for (int i = 0; i < H; ++i)
    v[i] = fold_pair<typename L::Float, L::kWidth, H>(v[2 * i], v[2 * i + 1], std::make_index_sequence<L::kWidth>());
  if constexpr (H > 1) fold_levels<L, H / 2>(v);
}
template <typename L>
ERNIE_INLINE typename L::Float transpose_sum(const typename L::Float* x) {
  constexpr int W = L::kWidth;
  typename L::Float v[W];
  for (int m = 0; m < W; ++m) v[m] = x[bit_reverse(m, W)];
  if constexpr (W > 1) fold_levels<L, W / 2>(v);
  return v[0];
}

// How the scores S = Q·Kᵀ of a block are computed.
//   kOuter: vectorised over query rows. Q is stored transposed; per head_dim element, one
//           load per row vector and one broadcast per key. Best with many rows (prefill).
//   kDot:   vectorised over head_dim, a few rows x keys of dot products reduced together
//           by transpose_sum. For decode, where rows are one token's group of heads: fewer
//           instructions than kOuter with half-empty row vectors.
enum class Scores { kOuter, kDot };

// Register blocking of one ISA. Row vectors hold `Row::kWidth` query rows (the softmax is
// vectorised over rows); dim vectors hold `Dim::kWidth` head_dim values (P·V is
// vectorised over head_dim).
//   kOuter S tile: QkRows row vectors x QkKeys keys of accumulators.
//   kDot S tile:   QkRows rows x QkKeys keys dot products, QkRows·QkKeys = Dim::kWidth.
//   PV tile:       PvRows rows x PvVecs dim vectors of accumulators; per key, PvVecs V loads
//                  and PvRows broadcasts of P.
template <typename RowLanes, typename DimLanes, Scores Mode, int QkRows, int QkKeys, int PvRows, int PvVecs>
struct Config {
  using Row = RowLanes;
  using Dim = DimLanes;
  static constexpr Scores kScores = Mode;
  static constexpr int kQkRows = QkRows;
  static constexpr int kQkKeys = QkKeys;
  static constexpr int kPvRows = PvRows;
  static constexpr int kPvVecs = PvVecs;
  // Tiles are padded to a multiple of this many rows.
  static constexpr int kRowAlign = Mode == Scores::kDot && QkRows > Row::kWidth ? QkRows : Row::kWidth;
  static_assert(kBlockKeys % kQkKeys == 0, "blocks are padded to whole key groups");
  static_assert(kRowAlign % kPvRows == 0 && kRowAlign % Row::kWidth == 0, "row groups must tile the padded rows");
  static_assert(Mode == Scores::kOuter || (kRowAlign % kQkRows == 0 && kQkRows * kQkKeys == Dim::kWidth));
  static_assert(kTileRows % kRowAlign == 0 && Dim::kWidth <= static_cast<int>(kAlignFloats));
};

// kOuter: S[j][rows] = Qt[·][rows] · k_j for the row vectors rv0 .. rv0+RV-1 of the tile.
template <typename C, int RV>
ERNIE_INLINE void outer_scores(const float* qt, int t_pad, int rv0, const float* const* krow, int nb_pad, int head_dim,
                               float* s) {
  using R = typename C::Row;
  using F = typename R::Float;
  constexpr int W = R::kWidth, KB = C::kQkKeys;
  for (int j0 = 0; j0 < nb_pad; j0 += KB) {
    F acc[KB][RV];
    for (int k = 0; k < KB; ++k)
      for (int b = 0; b < RV; ++b) acc[k][b] = F{};
    const float* qcol = qt + rv0 * W;
    for (int d = 0; d < head_dim; ++d, qcol += t_pad) {
      F qv[RV];
      for (int b = 0; b < RV; ++b) qv[b] = R::load(qcol + b * W);
      for (int k = 0; k < KB; ++k)
        for (int b = 0; b < RV; ++b) acc[k][b] += krow[j0 + k][d] * qv[b];
    }
    for (int k = 0; k < KB; ++k)
      for (int b = 0; b < RV; ++b) R::store(s + (j0 + k) * t_pad + (rv0 + b) * W, acc[k][b]);
  }
}

// kDot: S[j][r0 .. r0+RB) = q_r · k_j with q rows [row][q_stride], keys and queries both
// zero padded to hd_vec.
template <typename C>
ERNIE_INLINE void dot_scores(const float* qrows, int q_stride, int r0, const float* const* krow, int nb_pad,
                             int hd_vec, int t_pad, float* s) {
  using D = typename C::Dim;
  using F = typename D::Float;
  constexpr int W = D::kWidth, RB = C::kQkRows, KB = C::kQkKeys;
  for (int j0 = 0; j0 < nb_pad; j0 += KB) {
    F acc[KB * RB];  // [key][row], the lane order transpose_sum returns
    for (int n = 0; n < KB * RB; ++n) acc[n] = F{};
    for (int c = 0; c < hd_vec; c += W) {
      F kv[KB];
      for (int k = 0; k < KB; ++k) kv[k] = D::load(krow[j0 + k] + c);
      for (int r = 0; r < RB; ++r) {
        const F qv = D::load(qrows + (r0 + r) * q_stride + c);
        for (int k = 0; k < KB; ++k) acc[k * RB + r] += qv * kv[k];
      }
    }
    float sums[W];
    const F total = transpose_sum<D>(acc);
    std::memcpy(sums, &total, sizeof total);
    for (int k = 0; k < KB; ++k) std::memcpy(s + (j0 + k) * t_pad + r0, sums + k * RB, sizeof(float) * RB);
  }
}

// Online softmax over one block: masks keys past each row's limit (when `masked`), raises
// the running max, turns scores into probabilities in place, and leaves in alpha the
// factor by which the rows' earlier accumulation must shrink.
template <typename C>
ERNIE_INLINE void softmax_block(const Problem& p, int t_pad, int nb_pad, int64_t k0, bool masked) {
  using R = typename C::Row;
  using F = typename R::Float;
  constexpr int W = R::kWidth;
  const F minus_infinity = R::constant(-std::numeric_limits<float>::infinity());
  for (int r = 0; r < t_pad; r += W) {
    float* column = p.s + r;
    F block_max = minus_infinity;
    if (masked) {
      const F limit = R::load(p.limit + r);
      for (int j = 0; j < nb_pad; ++j) {
        F score = R::load(column + j * t_pad);
        score = limit < static_cast<float>(k0 + j) ? minus_infinity : score;
        R::store(column + j * t_pad, score);
        block_max = R::max(block_max, score);
      }
    } else {
      for (int j = 0; j < nb_pad; ++j) block_max = R::max(block_max, R::load(column + j * t_pad));
    }
    // Every row sees key 0, so after the first block the max is finite and the subtraction
    // below never meets inf - inf.
    const F old_max = R::load(p.m + r);
    const F new_max = R::max(old_max, block_max);
    const F alpha = exp2_nonpositive<R>(old_max - new_max);
    F sum = F{};
    for (int j = 0; j < nb_pad; ++j) {
      const F prob = exp2_nonpositive<R>(R::load(column + j * t_pad) - new_max);
      R::store(column + j * t_pad, prob);
      sum += prob;
    }
    R::store(p.l + r, R::load(p.l + r) * alpha + sum);
    R::store(p.m + r, new_max);
    R::store(p.alpha + r, alpha);
  }
}

// O[r0 .. r0+PR)[c0 .. c0+DC·width) = alpha·O + P·V over the block.
template <typename C, int PR, int DC>
ERNIE_INLINE void accumulate_block(const Problem& p, int t_pad, int r0, const float* const* vrow, int nb_pad, int c0) {
  using D = typename C::Dim;
  using F = typename D::Float;
  constexpr int W = D::kWidth;
  F acc[PR][DC];
  for (int i = 0; i < PR; ++i)
    for (int c = 0; c < DC; ++c) acc[i][c] = D::load(p.o + (r0 + i) * p.o_stride + c0 + c * W) * p.alpha[r0 + i];
  for (int j = 0; j < nb_pad; ++j) {
    F v[DC];
    for (int c = 0; c < DC; ++c) v[c] = D::load(vrow[j] + c0 + c * W);
    const float* probs = p.s + j * t_pad + r0;
    for (int i = 0; i < PR; ++i)
      for (int c = 0; c < DC; ++c) acc[i][c] += probs[i] * v[c];
  }
  for (int i = 0; i < PR; ++i)
    for (int c = 0; c < DC; ++c) D::store(p.o + (r0 + i) * p.o_stride + c0 + c * W, acc[i][c]);
}

// One kv head's part of a cached row as fp32 in `dst`, zero padded to `padded` floats.
ERNIE_INLINE void stage_row(const Problem& p, const void* row, int padded, float* __restrict dst) {
  const int hd = p.head_dim;
  if (p.storage == KvStorage::kF32) {
    const float* src = static_cast<const float*>(row) + static_cast<size_t>(p.kv_head) * hd;
    std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(hd));
  } else if (p.storage == KvStorage::kBF16) {
    // bf16 is the top half of an fp32: widening is a shift, which vectorises.
    const auto* __restrict bits = static_cast<const uint8_t*>(row) + sizeof(uint16_t) * static_cast<size_t>(p.kv_head) * hd;
    for (int d = 0; d < hd; ++d) {
      uint16_t half;
      std::memcpy(&half, bits + 2 * d, sizeof half);
      const uint32_t word = static_cast<uint32_t>(half) << 16;
      std::memcpy(dst + d, &word, sizeof word);
    }
  } else {
    const int8_t* __restrict codes = static_cast<const int8_t*>(row) + static_cast<size_t>(p.kv_head) * hd;
    float scale;
    std::memcpy(&scale,
                static_cast<const uint8_t*>(row) + int8_scales_offset(p.kv_heads, hd) + sizeof(float) * p.kv_head,
                sizeof scale);
    // A plain loop on purpose: GCC's vectoriser widens int8 with whole-register
    // vpmovsxbw/vpmovsxwd, while __builtin_convertvector on int8 vectors splits into many
    // shuffles (GCC 12).
    for (int d = 0; d < hd; ++d) dst[d] = static_cast<float>(codes[d]) * scale;
  }
  for (int d = hd; d < padded; ++d) dst[d] = 0.0f;
}

// Row r of a tile: query token r / group, head r % group of the kv head's group.
struct RowHead {
  int64_t token;
  int head;
};
inline RowHead row_head(const Problem& p, int64_t row) {
  return {row / p.group, p.kv_head * p.group + static_cast<int>(row % p.group)};
}

// Row r of the tile starting at row r0: sets its causal limit, resets its running max
// and sum, and returns its query (nullptr for padding rows past `rows`).
ERNIE_INLINE const float* start_row(const Problem& p, int64_t r0, int r, int rows, int64_t max_limit) {
  p.m[r] = -std::numeric_limits<float>::infinity();
  p.l[r] = 0.0f;
  if (r >= rows) {
    // Padding rows see what the tile's last row sees, so they stay finite; they are
    // never written out.
    p.limit[r] = static_cast<float>(max_limit);
    return nullptr;
  }
  const RowHead at = row_head(p, r0 + r);
  p.limit[r] = static_cast<float>(p.all_keys > 0 ? p.all_keys - 1 : p.first_position + at.token);
  return p.q + at.token * p.q_stride + static_cast<int64_t>(at.head) * p.head_dim;
}

// Where row r's output starts in p.out (or p.out_bf16): its token's row, its head's columns.
inline int64_t output_offset(const Problem& p, int64_t r) {
  const RowHead at = row_head(p, r);
  return at.token * p.out_stride + static_cast<int64_t>(at.head) * p.head_dim;
}

// The tile's rows of O divided by their probability sums, into their places in p.out.
ERNIE_INLINE void write_tile_output(const Problem& p, int64_t r0, int rows) {
  for (int r = 0; r < rows; ++r) {
    float* dst = p.out + output_offset(p, r0 + r);
    const float* src = p.o + static_cast<size_t>(r) * p.o_stride;
    const float inverse = 1.0f / p.l[r];
    for (int d = 0; d < p.head_dim; ++d) dst[d] = src[d] * inverse;
  }
}

// Loads the tile's queries times scale·log2(e) (so scores are in the log2 domain) into
// p.qt, transposed for kOuter, row-major with p.o_stride for kDot; padding rows are zero.
// Also each row's causal limit and reset running max and sum (start_row).
template <typename C>
ERNIE_INLINE void load_queries(const Problem& p, int64_t r0, int rows, int t_pad, int64_t max_limit) {
  const int hd = p.head_dim;
  const float factor = p.scale * 1.4426950408889634f;
  for (int r = 0; r < t_pad; ++r) {
    const float* src = start_row(p, r0, r, rows, max_limit);
    if constexpr (C::kScores == Scores::kOuter) {
      for (int d = 0; d < hd; ++d) p.qt[d * t_pad + r] = src != nullptr ? src[d] * factor : 0.0f;
    } else {
      float* dst = p.qt + static_cast<size_t>(r) * p.o_stride;
      for (int d = 0; d < p.o_stride; ++d) dst[d] = src != nullptr && d < hd ? src[d] * factor : 0.0f;
    }
  }
}

// Points krow/vrow at keys k0 .. k0+nb-1 for this kv head, converting them into scratch
// when staged, then pads to nb_pad with copies of the last row. Padding keys lie past
// every row's limit (the last block ends at the tile's last visible key), so the mask
// zeroes their probabilities.
ERNIE_INLINE void gather_block(const Problem& p, int64_t k0, int nb, int nb_pad, bool staged, int hd_vec,
                               const float** krow, const float** vrow) {
  for (int j = 0; j < nb; ++j) {
    const void* key = p.key_rows[k0 + j];
    const void* value = p.value_rows[k0 + j];
    if (staged) {
      float* kdst = p.kf + static_cast<size_t>(j) * p.o_stride;
      float* vdst = p.vf + static_cast<size_t>(j) * p.o_stride;
      stage_row(p, key, hd_vec, kdst);
      stage_row(p, value, hd_vec, vdst);
      krow[j] = kdst;
      vrow[j] = vdst;
    } else {
      krow[j] = static_cast<const float*>(key) + static_cast<size_t>(p.kv_head) * p.head_dim;
      vrow[j] = static_cast<const float*>(value) + static_cast<size_t>(p.kv_head) * p.head_dim;
    }
  }
  for (int j = nb; j < nb_pad; ++j) {
    krow[j] = krow[nb - 1];
    vrow[j] = vrow[nb - 1];
  }
}

// Rows of a tile with at least this many are staged even from fp32 rows: the copy is
// shared by all of them, and cache rows sit at a power-of-two stride (all kv heads, every
// position) that crowds a few L1 sets and is rarely 64-byte aligned.
constexpr int kStageRows = 16;

// Rows r0 .. r0+rows-1 of the problem (row = token·group + head in group).
template <typename C>
ERNIE_INLINE void attend_tile(const Problem& p, int64_t r0, int rows) {
  using D = typename C::Dim;
  constexpr int KB = C::kQkKeys, PR = C::kPvRows, DC = C::kPvVecs;
  const int hd = p.head_dim;
  const int t_pad = static_cast<int>(round_up(static_cast<size_t>(rows), C::kRowAlign));
  const int pv_rows = static_cast<int>(round_up(static_cast<size_t>(rows), PR));
  // Values (and kDot keys) are read in whole dim vectors; rows whose head_dim is not a
  // multiple are staged zero padded, like int8 rows.
  const int hd_vec = static_cast<int>(round_up(static_cast<size_t>(hd), D::kWidth));
  const bool staged = p.storage != KvStorage::kF32 || hd_vec != hd || rows >= kStageRows;
  const int64_t min_limit = p.all_keys > 0 ? p.all_keys - 1 : p.first_position + r0 / p.group;
  const int64_t max_limit = p.all_keys > 0 ? p.all_keys - 1 : p.first_position + (r0 + rows - 1) / p.group;

  load_queries<C>(p, r0, rows, t_pad, max_limit);
  std::fill(p.o, p.o + static_cast<size_t>(pv_rows) * p.o_stride, 0.0f);

  const float* krow[kBlockKeys];
  const float* vrow[kBlockKeys];
  const int64_t n_keys = max_limit + 1;  // keys past the last row's limit are never visited
  for (int64_t k0 = 0; k0 < n_keys; k0 += kBlockKeys) {
    const int nb = static_cast<int>(std::min<int64_t>(kBlockKeys, n_keys - k0));
    const int nb_pad = static_cast<int>(round_up(static_cast<size_t>(nb), KB));
    gather_block(p, k0, nb, nb_pad, staged, hd_vec, krow, vrow);

    if constexpr (C::kScores == Scores::kOuter) {
      constexpr int QR = C::kQkRows, W = C::Row::kWidth;
      // Whole groups of QR row vectors, then what is left two and one at a time.
      int rv = 0;
      for (; rv + QR <= t_pad / W; rv += QR) outer_scores<C, QR>(p.qt, t_pad, rv, krow, nb_pad, hd, p.s);
      if constexpr (QR > 2)
        for (; rv + 2 <= t_pad / W; rv += 2) outer_scores<C, 2>(p.qt, t_pad, rv, krow, nb_pad, hd, p.s);
      for (; rv < t_pad / W; ++rv) outer_scores<C, 1>(p.qt, t_pad, rv, krow, nb_pad, hd, p.s);
    } else {
      for (int r = 0; r < t_pad; r += C::kQkRows) dot_scores<C>(p.qt, p.o_stride, r, krow, nb_pad, hd_vec, t_pad, p.s);
    }

    softmax_block<C>(p, t_pad, nb_pad, k0, k0 + nb_pad - 1 > min_limit);

    for (int r = 0; r < pv_rows; r += PR) {
      int c = 0;
      for (; c + DC * D::kWidth <= hd_vec; c += DC * D::kWidth) accumulate_block<C, PR, DC>(p, t_pad, r, vrow, nb_pad, c);
      for (; c < hd_vec; c += D::kWidth) accumulate_block<C, PR, 1>(p, t_pad, r, vrow, nb_pad, c);
    }
  }

  write_tile_output(p, r0, rows);
}

template <typename C>
ERNIE_INLINE void attend(const Problem& p) {
  // Rows are token-major, so a tile's rows have nearly the same causal limit and only the
  // last block or two of each tile needs masking.
  const int64_t total_rows = static_cast<int64_t>(p.num_queries) * p.group;
  for (int64_t r0 = 0; r0 < total_rows; r0 += kTileRows)
    attend_tile<C>(p, r0, static_cast<int>(std::min<int64_t>(kTileRows, total_rows - r0)));
}

int64_t total_rows(const Problem& p) { return static_cast<int64_t>(p.num_queries) * p.group; }

using Kernel = void (*)(const Problem&);

// Calls of up to this many rows (one token's group of heads) take the kDot scores.
constexpr int64_t kDecodeCallRows = 8;

void attend_generic(const Problem& p) { attend<Config<L4, L4, Scores::kOuter, 2, 4, 4, 2>>(p); }

#if defined(__x86_64__)
// Up to 8 rows (decode of one token: the group of heads) take kDot scores, the softmax in
// one 8-row vector where more than 4 rows fill it (half the exp work of two 4-row
// vectors: attention_bench BM_DecodeBf16 +4%, 8 interleaved runs). Prefill keeps
// 12 accumulators of the 16 ymm registers in both tiles (3 row vectors x 4 keys for the
// scores, 4 rows x 3 dim vectors for P·V): 8 left FMA latency exposed (10% fewer FLOP/s).
__attribute__((target("avx2,fma"))) void attend_avx2(const Problem& p) {
  if (total_rows(p) <= 4) attend<Config<L4, L8, Scores::kDot, 4, 2, 4, 2>>(p);
  else if (total_rows(p) <= 8) attend<Config<L8, L8, Scores::kDot, 4, 2, 4, 2>>(p);
  else attend<Config<L8, L8, Scores::kOuter, 3, 4, 4, 3>>(p);
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"))) void attend_avx512(const Problem& p) {
  if (total_rows(p) <= kDecodeCallRows) attend<Config<L8, L16, Scores::kDot, 8, 2, 4, 4>>(p);
  else attend<Config<L16, L16, Scores::kOuter, 4, 4, 4, 4>>(p);
}

// bf16 products on a bf16 cache (bf16_attention_applies): vdpbf16ps multiplies a pair of
// bf16 by a pair and adds both products to one fp32 lane, twice the rate of fp32 FMAs,
// and the keys are read from their cache rows as they are stored, never widened.
//  - Scores: the queries rounded to bf16 and held transposed in pairs of head_dim
//    elements ([head_dim / 2][tile rows] 32-bit lanes), so 16 rows are one load and a key's
//    pair one 32-bit broadcast from its row. The scale (times log2 e) multiplies the fp32
//    sums, so the queries' rounding is the only one before the softmax.
//  - Every row is one lane throughout, summed in the same order whatever tile it is in,
//    decode tiles (up to 8 rows, half a vector) included: a position's output is the same
//    bits decoded alone or inside a prefill chunk. That matters more here than in fp32:
//    the probabilities are rounded to bf16, so two sums a last bit apart can round 2^-8
//    apart (a prefill/decode split whose decode instance recomputes the last prompt
//    token must answer exactly as one instance does).
//  - The softmax is the fp32 one every path runs (softmax_block).
//  - P·V: each row's probabilities rounded to bf16 in pairs of keys ([keys / 2][tile rows])
//    against the values of the same two keys interleaved per dim ([keys / 2][head_dim]).
// Flash attention on bf16 tensors computes the same (FastDeploy's GPU kernels take bf16
// Q, K and V and round P to bf16 for P·V); the running max, sums and output stay fp32.
#define ERNIE_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))

namespace bf16_products {

constexpr int kWidth = 16;  // rows (or dims) per fp32 vector
// Register tiles: 4 row vectors x 4 keys of scores (1 x 16 for a decode tile's single row
// vector), 4 rows x 4 dim vectors of P·V (16 accumulators each, enough independent
// chains for vdpbf16ps' latency on two pipes).
constexpr int kScoreVectors = 4, kScoreKeys = 4, kPvRows = 4, kPvVectors = 4;
// Keys per score tile when the tile is one row vector.
constexpr int kDecodeScoreKeys = 16;
// Keys per score tile when the tile is at most half a row vector (two_key_scores).
constexpr int kTwoKeyScoreKeys = 32;
// Lines of the next block's rows a decode tile asks for per step of its loops (RowPrefetch):
// per block of 64 keys at head_dim 128, 32 score steps, 32 value pairs and 64 P·V steps
// ask for 4 each, the block's 512 lines (4 of keys and 4 of values a key).
constexpr int kPrefetchLinesPerStep = 4;
using Softmax = Config<L16, L16, Scores::kOuter, kScoreVectors, kScoreKeys, kPvRows, kPvVectors>;

ERNIE_BF16_TARGET inline __m512bh pairs_at(const float* p) { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p)); }
ERNIE_BF16_TARGET inline __m512bh broadcast_pair(const void* p) {
  int32_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(bits));
}

// Word indices for vpermw / vpermt2w that pair word first + i with word second + i, for
// i = 0..15 (in vpermt2w an index from 32 up selects the second source).
ERNIE_BF16_TARGET inline __m512i pair_index(int first, int second) {
  alignas(64) int16_t index[32];
  for (int i = 0; i < 16; ++i) {
    index[2 * i] = static_cast<int16_t>(first + i);
    index[2 * i + 1] = static_cast<int16_t>(second + i);
  }
  return _mm512_load_si512(index);
}

// The tile's queries rounded to bf16, pairs of head_dim elements transposed into p.qt
// ([head_dim / 2][t_pad] 32-bit lanes); padding rows are zero. Also each row's causal
// limit and reset running max and sum (start_row). vcvtne2ps2bf16 rounds 32 elements at
// a time (nearest even, as the weights' activations are rounded); rounding them one by
// one in scalar code took 15% of a prefill's attention.
ERNIE_BF16_TARGET inline void load_query_pairs(const Problem& p, int64_t r0, int rows, int t_pad, int64_t max_limit) {
  auto* pairs = reinterpret_cast<uint32_t*>(p.qt);
  const auto stride = static_cast<size_t>(t_pad);
  for (int r = 0; r < t_pad; ++r) {
    const float* src = start_row(p, r0, r, rows, max_limit);
    uint32_t* column = pairs + r;
    if (src == nullptr) {
      for (int i = 0; i < p.head_dim / 2; ++i) column[static_cast<size_t>(i) * stride] = 0u;
      continue;
    }
    for (int d = 0; d < p.head_dim; d += 32) {
      // Words 0..15 from the second operand: pair i is (src[d + 2i], src[d + 2i + 1]).
      alignas(64) uint32_t rounded[16];
      _mm512_store_si512(rounded, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + d + 16),
                                                                                _mm512_loadu_ps(src + d))));
      uint32_t* out = column + static_cast<size_t>(d / 2) * stride;
      for (int i = 0; i < 16; ++i) out[static_cast<size_t>(i) * stride] = rounded[i];
    }
  }
}

// S[j][rows of row vectors rv0 .. rv0+RV) = factor · Σ_d q_d k_jd, k from bf16 rows.
// Keys [j_begin, j_end) in tiles of `Keys` (j_end - j_begin a multiple of it). Every
// (row, key) sum runs over the head_dim pairs in order whatever the tile, so a row's
// scores are the same bits in any of them.
template <int RV, int Keys = kScoreKeys>
ERNIE_BF16_TARGET inline void outer_pair_scores(const Problem& p, int t_pad, int rv0, const uint8_t* const* krow,
                                                int j_begin, int j_end, float factor) {
  const __m512 scale = _mm512_set1_ps(factor);
  for (int j0 = j_begin; j0 < j_end; j0 += Keys) {
    __m512 acc[Keys][RV];
    for (int k = 0; k < Keys; ++k)
      for (int b = 0; b < RV; ++b) acc[k][b] = _mm512_setzero_ps();
    const float* column = p.qt + rv0 * kWidth;
    for (int i = 0; i < p.head_dim / 2; ++i, column += t_pad) {
      __m512bh q[RV];
      for (int b = 0; b < RV; ++b) q[b] = pairs_at(column + b * kWidth);
      for (int k = 0; k < Keys; ++k) {
        const __m512bh key = broadcast_pair(krow[j0 + k] + 4 * i);
        for (int b = 0; b < RV; ++b) acc[k][b] = _mm512_dpbf16_ps(acc[k][b], q[b], key);
      }
    }
    for (int k = 0; k < Keys; ++k)
      for (int b = 0; b < RV; ++b) _mm512_storeu_ps(p.s + (j0 + k) * t_pad + (rv0 + b) * kWidth, _mm512_mul_ps(acc[k][b], scale));
  }
}

// The next key block's key and value rows (one kv head's part of each), asked for in
// order a few 64-byte lines at a time by ask(n), or all that are left by ask_rest().
struct RowPrefetch {
  const void* const* key_rows;
  const void* const* value_rows;
  size_t offset;  // the kv head's part of a row
  int lines;      // 64-byte lines of that part
  int64_t at, end;
  int line = 0;  // of key `at`: its key lines, then its value lines

  void ask(int n) {
    for (; n > 0 && at < end; --n) {
      const bool key = line < lines;
      const void* row = key ? key_rows[at] : value_rows[at];
      __builtin_prefetch(static_cast<const uint8_t*>(row) + offset + 64 * (key ? line : line - lines), 0, 3);
      if (++line == 2 * lines) {
        line = 0;
        ++at;
      }
    }
  }
  void ask_rest() { ask(std::numeric_limits<int>::max()); }
};

// Pairs i0 .. i0+3 of a key row, in both 128-bit lanes.
ERNIE_BF16_TARGET inline __m256i four_pairs(const uint8_t* row, int i0) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 4 * i0)));
}

// S[j][rows 0..7] as outer_pair_scores computes it, for a tile of at most 8 rows (decode:
// a token's group of heads, 8 at 0.3B and 300B-A47B, 5 at 21B-A3B), two keys per
// vdpbf16ps: lanes 0..7 take key j and lanes 8..15 key j + 1, against the rows' queries in
// both halves. One row vector would leave half of every product on padding rows. A key's
// pairs come in 4 at a time (16 bytes, copied to both 128-bit lanes of its half) and
// vpshufd spreads each over its half: broadcasting every pair from memory instead bound
// the loop on broadcasts whether one key or two shared a vector (scratch test, 512 keys
// in L2: 11.7 ns a key one key per vector, 11.6 two by masked broadcast, 11.1 two by
// vpermd, 7.5 this way). Every lane still adds its pairs in order, so the scores are the
// same bits; rows 8..15 get the zeros their zero queries would. Each step of 4 pairs asks
// `next` for kPrefetchLinesPerStep lines of the next block.
ERNIE_BF16_TARGET inline void two_key_scores(const Problem& p, const uint8_t* const* krow, int j_begin, int j_end,
                                             float factor, RowPrefetch& next) {
  constexpr int kPairs = kTwoKeyScoreKeys / 2;
  const __m512 scale = _mm512_set1_ps(factor);
  const __m256 zero = _mm256_setzero_ps();
  for (int j0 = j_begin; j0 < j_end; j0 += kTwoKeyScoreKeys) {
    __m512 acc[kPairs];
    for (int k = 0; k < kPairs; ++k) acc[k] = _mm512_setzero_ps();
    for (int i0 = 0; i0 < p.head_dim / 2; i0 += 4) {
      next.ask(kPrefetchLinesPerStep);
      __m512bh q[4];
      for (int i = 0; i < 4; ++i)
        q[i] = reinterpret_cast<__m512bh>(
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.qt + (i0 + i) * kWidth))));
      for (int k = 0; k < kPairs; ++k) {
        const __m512i keys = _mm512_inserti64x4(_mm512_castsi256_si512(four_pairs(krow[j0 + 2 * k], i0)),
                                                four_pairs(krow[j0 + 2 * k + 1], i0), 1);
        acc[k] = _mm512_dpbf16_ps(acc[k], q[0], reinterpret_cast<__m512bh>(_mm512_shuffle_epi32(keys, _MM_PERM_AAAA)));
        acc[k] = _mm512_dpbf16_ps(acc[k], q[1], reinterpret_cast<__m512bh>(_mm512_shuffle_epi32(keys, _MM_PERM_BBBB)));
        acc[k] = _mm512_dpbf16_ps(acc[k], q[2], reinterpret_cast<__m512bh>(_mm512_shuffle_epi32(keys, _MM_PERM_CCCC)));
        acc[k] = _mm512_dpbf16_ps(acc[k], q[3], reinterpret_cast<__m512bh>(_mm512_shuffle_epi32(keys, _MM_PERM_DDDD)));
      }
    }
    for (int k = 0; k < kPairs; ++k) {
      const __m512 scores = _mm512_mul_ps(acc[k], scale);
      float* even = p.s + (j0 + 2 * k) * kWidth;
      _mm256_storeu_ps(even, _mm512_castps512_ps256(scores));
      _mm256_storeu_ps(even + 8, zero);
      _mm256_storeu_ps(even + kWidth, _mm512_extractf32x8_ps(scores, 1));
      _mm256_storeu_ps(even + kWidth + 8, zero);
    }
  }
}

// The block's probabilities (p.s, fp32 [key][row]) rounded to bf16 in pairs of keys per
// row, and its values interleaved in pairs of keys per dim into p.vf, asking `next` for
// AskLines lines per pair.
template <int AskLines>
ERNIE_BF16_TARGET inline void pair_block(const Problem& p, int t_pad, const uint8_t* const* vrow, int nb_pad,
                                         RowPrefetch& next) {
  // vcvtne2ps2bf16 puts its second operand's 16 values in the low half, so key 2j's
  // probabilities come out as words 0..15 and key 2j+1's as 16..31; vpermw pairs them.
  const __m512i probability_order = pair_index(0, 16);
  for (int jp = 0; jp < nb_pad / 2; ++jp) {
    const float* even = p.s + (2 * jp) * t_pad;
    const float* odd = even + t_pad;
    for (int r = 0; r < t_pad; r += kWidth) {
      const __m512bh rounded = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(odd + r), _mm512_loadu_ps(even + r));
      _mm512_storeu_si512(p.probability_pairs + jp * t_pad + r,
                          _mm512_permutexvar_epi16(probability_order, reinterpret_cast<__m512i>(rounded)));
    }
  }
  const __m512i low = pair_index(0, 32), high = pair_index(16, 48);
  const int hd = p.head_dim;
  for (int jp = 0; jp < nb_pad / 2; ++jp) {
    const uint8_t* a = vrow[2 * jp];
    const uint8_t* b = vrow[2 * jp + 1];
    float* dst = p.vf + static_cast<size_t>(jp) * hd;
    if constexpr (AskLines > 0) next.ask(AskLines);
    for (int d = 0; d < hd; d += 32) {
      const __m512i va = _mm512_loadu_si512(a + 2 * d), vb = _mm512_loadu_si512(b + 2 * d);
      _mm512_storeu_si512(dst + d, _mm512_permutex2var_epi16(va, low, vb));
      _mm512_storeu_si512(dst + d + 16, _mm512_permutex2var_epi16(va, high, vb));
    }
  }
}

// O[r0 .. r0+kPvRows)[c0 .. c0+DC·16) = alpha·O + P·V over the block's key pairs, asking
// `next` for AskLines lines every second pair.
template <int DC, int AskLines>
ERNIE_BF16_TARGET inline void pair_accumulate(const Problem& p, int t_pad, int r0, int pairs, int c0,
                                              RowPrefetch& next) {
  __m512 acc[kPvRows][DC];
  for (int i = 0; i < kPvRows; ++i) {
    const __m512 alpha = _mm512_set1_ps(p.alpha[r0 + i]);
    for (int c = 0; c < DC; ++c)
      acc[i][c] = _mm512_mul_ps(_mm512_loadu_ps(p.o + (r0 + i) * p.o_stride + c0 + c * kWidth), alpha);
  }
  for (int jp = 0; jp < pairs; ++jp) {
    if constexpr (AskLines > 0)
      if (jp % 2 == 0) next.ask(AskLines);
    __m512bh v[DC];
    for (int c = 0; c < DC; ++c) v[c] = pairs_at(p.vf + static_cast<size_t>(jp) * p.head_dim + c0 + c * kWidth);
    const float* probabilities = p.probability_pairs + jp * t_pad + r0;
    for (int i = 0; i < kPvRows; ++i) {
      const __m512bh pair = broadcast_pair(probabilities + i);
      for (int c = 0; c < DC; ++c) acc[i][c] = _mm512_dpbf16_ps(acc[i][c], pair, v[c]);
    }
  }
  for (int i = 0; i < kPvRows; ++i)
    for (int c = 0; c < DC; ++c) _mm512_storeu_ps(p.o + (r0 + i) * p.o_stride + c0 + c * kWidth, acc[i][c]);
}

// O += P·V for the tile's first pv_rows rows, in groups of kPvRows rows and kPvVectors
// dim vectors.
template <int AskLines>
ERNIE_BF16_TARGET inline void value_products(const Problem& p, int t_pad, int pv_rows, int nb_pad, RowPrefetch& next) {
  const int hd = p.head_dim;
  for (int r = 0; r < pv_rows; r += kPvRows) {
    int c = 0;
    for (; c + kPvVectors * kWidth <= hd; c += kPvVectors * kWidth)
      pair_accumulate<kPvVectors, AskLines>(p, t_pad, r, nb_pad / 2, c, next);
    for (; c < hd; c += kWidth) pair_accumulate<1, AskLines>(p, t_pad, r, nb_pad / 2, c, next);
  }
}

// write_tile_output for this kernel (head_dim a multiple of 32), and bf16 output rounded
// by vcvtne2ps2bf16 32 values at a time, the instruction Bf16Activations rounds with.
ERNIE_BF16_TARGET inline void write_output(const Problem& p, int64_t r0, int rows) {
  if (p.out_bf16 == nullptr) return write_tile_output(p, r0, rows);
  for (int r = 0; r < rows; ++r) {
    const float* src = p.o + static_cast<size_t>(r) * p.o_stride;
    const __m512 inverse = _mm512_set1_ps(1.0f / p.l[r]);
    uint16_t* dst = p.out_bf16 + output_offset(p, r0 + r);
    for (int d = 0; d < p.head_dim; d += 32) {
      const __m512bh rounded = _mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_loadu_ps(src + d + 16), inverse),
                                                   _mm512_mul_ps(_mm512_loadu_ps(src + d), inverse));
      _mm512_storeu_si512(dst + d, reinterpret_cast<__m512i>(rounded));
    }
  }
}

ERNIE_BF16_TARGET void attend_tile(const Problem& p, int64_t r0, int rows) {
  const int hd = p.head_dim;
  const int t_pad = static_cast<int>(round_up(static_cast<size_t>(rows), kWidth));
  const int64_t min_limit = p.all_keys > 0 ? p.all_keys - 1 : p.first_position + r0 / p.group;
  const int64_t max_limit = p.all_keys > 0 ? p.all_keys - 1 : p.first_position + (r0 + rows - 1) / p.group;
  const float factor = p.scale * 1.4426950408889634f;

  // Rows past the last group of kPvRows are padding: P·V skips them.
  const int pv_rows = static_cast<int>(round_up(static_cast<size_t>(rows), kPvRows));
  load_query_pairs(p, r0, rows, t_pad, max_limit);
  std::fill(p.o, p.o + static_cast<size_t>(pv_rows) * p.o_stride, 0.0f);

  const uint8_t* krow[kBlockKeys];
  const uint8_t* vrow[kBlockKeys];
  const size_t head_offset = sizeof(uint16_t) * static_cast<size_t>(p.kv_head) * hd;
  const int64_t n_keys = max_limit + 1;
  const int row_lines = static_cast<int>((sizeof(uint16_t) * static_cast<size_t>(hd) + 63) / 64);  // one kv head's part of a row
  for (int64_t k0 = 0; k0 < n_keys; k0 += kBlockKeys) {
    const int nb = static_cast<int>(std::min<int64_t>(kBlockKeys, n_keys - k0));
    const int nb_pad = static_cast<int>(round_up(static_cast<size_t>(nb), kScoreKeys));
    // Padding keys repeat the last one; they lie past every row's limit, so the mask
    // gives them probability 0.
    for (int j = 0; j < nb_pad; ++j) {
      const int64_t at = k0 + std::min(j, nb - 1);
      krow[j] = static_cast<const uint8_t*>(p.key_rows[at]) + head_offset;
      vrow[j] = static_cast<const uint8_t*>(p.value_rows[at]) + head_offset;
    }
    // The next block's keys and values come in while this one is worked on: a long
    // context's rows, a layer apart in time, come from memory, and a prefill tile past a
    // few thousand positions reads them from L3. A prefill tile asks for all of them
    // here. A decode tile's block is only a few thousand cycles of work, about as long as
    // its 512 lines take to arrive, and asked for at once they kept the core waiting
    // behind the requests, so it asks a few lines at a time through its loops instead
    // (one thread, 18 layers x 2 kv heads of 8000 positions from memory: 18.0-23.6 ms a
    // token for attention -> 14.2-14.7, the rows' bytes alone take 7.6 to read).
    RowPrefetch next{p.key_rows, p.value_rows, head_offset, row_lines, k0 + kBlockKeys,
                     std::min(n_keys, k0 + 2 * kBlockKeys)};
    const bool two_keys = rows <= kWidth / 2;  // one row vector, half of it padding
    if (!two_keys) next.ask_rest();
    int rv = 0;
    for (; rv + kScoreVectors <= t_pad / kWidth; rv += kScoreVectors)
      outer_pair_scores<kScoreVectors>(p, t_pad, rv, krow, 0, nb_pad, factor);
    for (; rv + 2 <= t_pad / kWidth; rv += 2) outer_pair_scores<2>(p, t_pad, rv, krow, 0, nb_pad, factor);
    if (rv < t_pad / kWidth) {
      // A lone row vector (decode: a token's group of heads) scores 16 keys at a time: 4
      // keys would be 4 chains, a third of vdpbf16ps' rate. A tile of at most 8 rows
      // scores two keys per instruction.
      const int paired = two_keys ? nb_pad / kTwoKeyScoreKeys * kTwoKeyScoreKeys : 0;
      two_key_scores(p, krow, 0, paired, factor, next);
      const int wide = paired + (nb_pad - paired) / kDecodeScoreKeys * kDecodeScoreKeys;
      outer_pair_scores<1, kDecodeScoreKeys>(p, t_pad, rv, krow, paired, wide, factor);
      outer_pair_scores<1>(p, t_pad, rv, krow, wide, nb_pad, factor);
    }

    softmax_block<Softmax>(p, t_pad, nb_pad, k0, k0 + nb_pad - 1 > min_limit);
    if (two_keys) {
      pair_block<kPrefetchLinesPerStep>(p, t_pad, vrow, nb_pad, next);
      value_products<kPrefetchLinesPerStep>(p, t_pad, pv_rows, nb_pad, next);
      next.ask_rest();
    } else {
      pair_block<0>(p, t_pad, vrow, nb_pad, next);
      value_products<0>(p, t_pad, pv_rows, nb_pad, next);
    }
  }

  write_output(p, r0, rows);
}

ERNIE_BF16_TARGET void attend(const Problem& p) {
  for (int64_t r0 = 0; r0 < total_rows(p); r0 += kTileRows)
    attend_tile(p, r0, static_cast<int>(std::min<int64_t>(kTileRows, total_rows(p) - r0)));
}

}  // namespace bf16_products
#endif

Kernel select_kernel() {
#if defined(__x86_64__)
  switch (active_isa_level()) {
    case IsaLevel::kAvx512: return attend_avx512;
    case IsaLevel::kAvx2: return attend_avx2;
    case IsaLevel::kGeneric: break;
  }
#endif
  return attend_generic;
}

}  // namespace

bool attention_uses_bf16_products(const AttentionShape& shape) {
#if defined(__x86_64__)
  static const bool available = active_isa_level() == IsaLevel::kAvx512 && cpu_features().avx512_bf16;
  return available && bf16_products_enabled() && shape.storage == KvStorage::kBF16 && shape.head_dim % 32 == 0;
#else
  (void)shape;
  return false;
#endif
}

void reserve_attention_scratch(AttentionScratch& scratch, int head_dim) {
  const size_t needed = scratch_floats(head_dim);
  if (scratch.storage.size() < needed) scratch.storage.resize(needed);
}

namespace {

void run_attention(const AttentionShape& shape, const void* const* key_rows, const void* const* value_rows,
                   int kv_head, const float* q, int64_t q_stride, int64_t first_position, int64_t all_keys,
                   int num_queries, float* out, uint16_t* out_bf16, int64_t out_stride, AttentionScratch& scratch) {
  assert(shape.head_dim >= 1 && shape.kv_heads >= 1 && shape.heads % shape.kv_heads == 0);
  assert(kv_head >= 0 && kv_head < shape.kv_heads && first_position >= 0);
  if (num_queries <= 0) return;
  static const Kernel kernel = select_kernel();

  const size_t needed = scratch_floats(shape.head_dim);
  if (scratch.storage.size() < needed) scratch.storage.resize(needed);
  const auto address = reinterpret_cast<uintptr_t>(scratch.storage.data());
  const uintptr_t aligned = (address + kAlignFloats * sizeof(float) - 1) & ~(kAlignFloats * sizeof(float) - 1);

  Problem p{};
  p.key_rows = key_rows;
  p.value_rows = value_rows;
  p.q = q;
  p.out = out;
  p.out_bf16 = out_bf16;
  p.q_stride = q_stride;
  p.out_stride = out_stride;
  p.first_position = first_position;
  p.all_keys = all_keys;
  p.num_queries = num_queries;
  p.kv_heads = shape.kv_heads;
  p.kv_head = kv_head;
  p.group = shape.heads / shape.kv_heads;
  p.head_dim = shape.head_dim;
  p.scale = shape.scale;
  p.storage = shape.storage;
  carve_scratch(reinterpret_cast<float*>(aligned), p);
  // bf16 output is rounded by the instruction the bf16-products kernel has.
  if (out_bf16 != nullptr && !attention_uses_bf16_products(shape))
    fail("attention with bf16 output needs bf16 products (AVX512-BF16, a bf16 cache, head_dim a multiple of 32)");
#if defined(__x86_64__)
  if (attention_uses_bf16_products(shape)) {
    bf16_products::attend(p);
    return;
  }
#endif
  kernel(p);
}

}  // namespace

void causal_attention_group(const AttentionShape& shape, const void* const* key_rows, const void* const* value_rows,
                            int kv_head, const float* q, int64_t q_stride, int64_t first_position, int num_queries,
                            float* out, int64_t out_stride, AttentionScratch& scratch) {
  run_attention(shape, key_rows, value_rows, kv_head, q, q_stride, first_position, 0, num_queries, out, nullptr,
                out_stride, scratch);
}

void causal_attention_group(const AttentionShape& shape, const void* const* key_rows, const void* const* value_rows,
                            int kv_head, const float* q, int64_t q_stride, int64_t first_position, int num_queries,
                            uint16_t* out, int64_t out_stride, AttentionScratch& scratch) {
  run_attention(shape, key_rows, value_rows, kv_head, q, q_stride, first_position, 0, num_queries, nullptr, out,
                out_stride, scratch);
}

void bidirectional_attention_group(const AttentionShape& shape, const void* const* key_rows,
                                   const void* const* value_rows, int kv_head, const float* q, int64_t q_stride,
                                   int64_t num_keys, int num_queries, float* out, int64_t out_stride,
                                   AttentionScratch& scratch) {
  assert(num_keys >= 1);
  run_attention(shape, key_rows, value_rows, kv_head, q, q_stride, 0, num_keys, num_queries, out, nullptr, out_stride,
                scratch);
}

}  // namespace ernie

#undef ERNIE_INLINE
