#include "kernels/quantize.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kernels/cpu_features.h"
#include "kernels/matmul_bf16.h"
#include "kernels/simd_dispatch.h"
#include "kernels/wint2.h"
#include "kernels/x86_intrinsics.h"
#include "util/error.h"
#include "util/weight_buffer.h"

namespace ernie {
namespace {

// 1.5 * 2^23: (v + m) - m rounds v to the nearest integer, ties to even, in plain
// vector arithmetic, for |v| < 2^22 (std::nearbyint is a libm call per value).
constexpr float kRoundingMagic = 12582912.0f;

int64_t padded_rows(int64_t rows) { return (rows + kQuantPanelRows - 1) / kQuantPanelRows * kQuantPanelRows; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One 64-byte aligned allocation holding packed values then scales (none for the integer
// formats, whose scales lie in their panels).
struct OwnedBytes {
  std::shared_ptr<uint8_t> bytes;
  uint8_t* data = nullptr;
  uint8_t* scales = nullptr;
};

OwnedBytes allocate(size_t value_bytes, size_t scale_bytes) {
  const size_t value_space = (value_bytes + 63) / 64 * 64;
  const size_t total = value_space + scale_bytes;
  OwnedBytes owned;
  owned.bytes = allocate_weight_buffer(total);
  if (owned.bytes == nullptr) fail("out of memory for a quantized weight of ", total, " bytes");
  owned.data = owned.bytes.get();
  owned.scales = scale_bytes > 0 ? owned.data + value_space : nullptr;
  return owned;
}

// Byte offsets in an integer matrix's data of value line q of row r's panel, and of row
// r's scale of block b (kernels/quantize.h).
int64_t value_line_offset(const IntegerPanel& panel, int64_t r, int64_t q) {
  return (r / kQuantPanelRows) * panel.bytes + panel.values_at(q / panel.block_lines) + (q % panel.block_lines) * 64;
}
int64_t scale_offset(const IntegerPanel& panel, int64_t r, int64_t b) {
  return (r / kQuantPanelRows) * panel.bytes + panel.scales_at(b) + (r % kQuantPanelRows) * 2;
}

void store_scale_bits(uint8_t* data, const IntegerPanel& panel, int64_t r, int64_t b, uint16_t bits) {
  std::memcpy(data + scale_offset(panel, r, b), &bits, sizeof bits);
}

float load_scale(const uint8_t* data, const IntegerPanel& panel, int64_t r, int64_t b) {
  uint16_t bits;
  std::memcpy(&bits, data + scale_offset(panel, r, b), sizeof bits);
  return f16_to_f32(bits);
}

std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> table{};
  for (int bits = 0; bits < 256; ++bits) {
    const int exponent = (bits >> 3) & 0xf, mantissa = bits & 7;
    float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                    : std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
    if ((bits & 0x7f) == 0x7f) magnitude = std::nanf("");  // e4m3fn's only NaN
    table[static_cast<size_t>(bits)] = (bits & 0x80) ? -magnitude : magnitude;
  }
  return table;
}

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = make_e4m3_table();
  return table;
}

// Rows of `dense` converted to fp32, one at a time.
class RowReader {
 public:
  explicit RowReader(const WeightMatrix& dense) : dense_(dense), row_(static_cast<size_t>(dense.cols)) {}
  const float* operator()(int64_t r) {
    convert_to_f32(dense_.dtype, dense_.row(r), row_.data(), row_.size());
    return row_.data();
  }

 private:
  const WeightMatrix& dense_;
  std::vector<float> row_;
};

float max_abs(const float* values, int64_t count) {
  float m = 0.0f;
  for (int64_t i = 0; i < count; ++i) m = std::max(m, std::fabs(values[i]));
  return m;
}

// Rounded to nearest even and clamped to [lo, hi] (integers); clamping first keeps the
// magic-number rounding exact.
int8_t round_clamp(float value, float lo, float hi) {
  const float clamped = std::clamp(value, lo, hi);
  return static_cast<int8_t>((clamped + kRoundingMagic) - kRoundingMagic);
}

// The quantized matrix over `owned`, with `dense`'s shape.
WeightMatrix quantized_matrix(const WeightMatrix& dense, WeightFormat format, int32_t group, const OwnedBytes& owned) {
  WeightMatrix out;
  out.format = format;
  out.dtype = dense.dtype;
  out.group = group;
  out.rows = dense.rows;
  out.cols = dense.cols;
  out.data = owned.data;
  out.scales = owned.scales;
  out.storage = owned.bytes;
  out.source_tensor = dense.source_tensor;
  return out;
}

// An integer matrix's panels for `rows` rows (padded to whole panels): every value byte
// `zero` (the stored zero of int8 and int4) and every scale 0.
OwnedBytes allocate_integer(const IntegerPanel& panel, int64_t rows, uint8_t zero) {
  const int64_t panels = padded_rows(rows) / kQuantPanelRows;
  OwnedBytes owned = allocate(static_cast<size_t>(panels * panel.bytes), 0);
  std::memset(owned.data, zero, static_cast<size_t>(panels * panel.bytes));
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t b = 0; b < panel.blocks; b += 2) std::memset(owned.data + p * panel.bytes + panel.scales_at(b), 0, 64);
  return owned;
}

// The fp16 scale a block is stored with, and the inverse its codes are rounded with (of
// the stored value, so codes and scale agree exactly).
struct BlockScale {
  uint16_t stored;
  float inverse;
};

BlockScale store_scale(float scale) {
  const uint16_t stored = f32_to_f16(scale);
  const float rounded = f16_to_f32(stored);
  return {stored, rounded != 0 ? 1.0f / rounded : 0.0f};
}

WeightMatrix quantize_int8(const WeightMatrix& dense, int32_t group) {
  const int64_t rows = dense.rows, cols = dense.cols;
  const IntegerPanel panel = integer_panel(WeightFormat::kInt8, cols, group);
  // Padding rows hold the stored zero (128) so they add nothing.
  OwnedBytes owned = allocate_integer(panel, rows, 128);
  RowReader read(dense);
  for (int64_t r = 0; r < rows; ++r) {
    const float* w = read(r);
    const int64_t lane = r % kQuantPanelRows;
    for (int64_t b = 0; b < panel.blocks; ++b) {
      const BlockScale scale = store_scale(max_abs(w + b * group, group) / 127.0f);
      for (int64_t k = b * group; k < (b + 1) * group; ++k)
        owned.data[value_line_offset(panel, r, k / 4) + lane * 4 + k % 4] =
            static_cast<uint8_t>(round_clamp(w[k] * scale.inverse, -127, 127) + 128);
      store_scale_bits(owned.data, panel, r, b, scale.stored);
    }
  }
  return quantized_matrix(dense, WeightFormat::kInt8, group, owned);
}

// The scale of one block of 32 weights for a signed integer grid [-kLowest, kLowest - 1]
// (int4: 8, int6: 32) that minimises the squared error, as llama.cpp's k-quants choose
// theirs: for each trial grid (the extreme value mapped to -kLowest · f for f from 0.875
// to 1.125 in steps of 0.025) round every weight to its code, then take the least-squares
// scale Σwq / Σq² for those codes; keep the trial whose fit leaves the least error
// Σw² - (Σwq)² / Σq². Absmax alone (f = 1, Q4_0's choice) wastes part of the range on
// one outlier.
//
// Written with GCC vector extensions of 8 floats, which every clone compiles to the
// same IEEE operations in the same order (no fused multiply-adds, a fixed reduction
// tree), so every ISA picks the same scale. A plain loop kept the clamps as scalar
// branches and the sums sequential, and this search was most of a wint4 load.
using Floats8 = float __attribute__((vector_size(32)));

// The codes of 8 weights at one trial's inverse scale: rounded to nearest even, clamped
// to [-kLowest, kLowest - 1] (NaN passes through). Vectors go by reference: by value,
// their calling convention would differ between the clones.
template <int kLowest>
__attribute__((always_inline, optimize("fp-contract=off"))) inline void grid_codes(const Floats8& v, float inverse,
                                                                                  Floats8& q) {
  const Floats8 magic = Floats8{} + kRoundingMagic, top = Floats8{} + static_cast<float>(kLowest - 1),
                bottom = Floats8{} - static_cast<float>(kLowest);
  q = (v * inverse + magic) - magic;
  q = q > top ? top : q;
  q = q < bottom ? bottom : q;
}

// The sum of 8 lanes as a fixed tree: halves, then quarters, then the last pair.
__attribute__((always_inline, optimize("fp-contract=off"))) inline float lane_sum(const Floats8& v) {
  const float a = (v[0] + v[4]) + (v[2] + v[6]), b = (v[1] + v[5]) + (v[3] + v[7]);
  return a + b;
}

template <int kLowest>
__attribute__((always_inline, optimize("fp-contract=off"))) inline float least_squares_block_scale(const float* w) {
  Floats8 v[4];  // the block's 32 weights
  std::memcpy(v, w, sizeof v);
  // The value of largest magnitude (the positive one on a tie).
  Floats8 highs = v[0], lows = v[0];
  for (int i = 1; i < 4; ++i) {
    highs = v[i] > highs ? v[i] : highs;
    lows = v[i] < lows ? v[i] : lows;
  }
  float high = highs[0], low = lows[0];
  for (int l = 1; l < 8; ++l) {
    high = highs[l] > high ? highs[l] : high;
    low = lows[l] < low ? lows[l] : low;
  }
  const float extreme = high >= -low ? high : low;
  if (extreme == 0.0f) return 0.0f;
  constexpr float kLevels = static_cast<float>(kLowest), kTrialStep = kLevels / 40.0f;  // f steps of 0.025
  float best_scale = extreme / -kLevels, best_fit = -1.0f;
  for (int trial = -5; trial <= 5; ++trial) {
    const float inverse = -(kLevels + kTrialStep * static_cast<float>(trial)) / extreme;
    Floats8 wq{}, qq{};
    for (int i = 0; i < 4; ++i) {
      Floats8 q;
      grid_codes<kLowest>(v[i], inverse, q);
      wq += v[i] * q;
      qq += q * q;
    }
    const float wq_total = lane_sum(wq), qq_total = lane_sum(qq);
    if (qq_total > 0.0f && wq_total * wq_total / qq_total > best_fit) {
      best_fit = wq_total * wq_total / qq_total;
      best_scale = wq_total / qq_total;
    }
  }
  return best_scale;
}

ERNIE_CLONE_FOR_ISAS __attribute__((optimize("fp-contract=off")))
float int4_block_scale(const float* w) { return least_squares_block_scale<8>(w); }

ERNIE_CLONE_FOR_ISAS __attribute__((optimize("fp-contract=off")))
float int6_block_scale(const float* w) { return least_squares_block_scale<32>(w); }

// Row r's codes (level + kLowest) and fp16 scales in the least-squares formats: int4
// (kLowest 8) and int6 (32).
// Row r's codes and scales go to `data` (its panels' layout).
template <int kLowest>
void least_squares_row(const float* w, int64_t r, uint8_t* data, const IntegerPanel& panel, uint8_t* codes) {
  for (int64_t b = 0; b < panel.blocks; ++b) {
    const float* block = w + b * kIntegerGroup;
    const BlockScale scale = store_scale(kLowest == 8 ? int4_block_scale(block) : int6_block_scale(block));
    for (int64_t k = b * kIntegerGroup; k < (b + 1) * kIntegerGroup; ++k)
      codes[k] = static_cast<uint8_t>(round_clamp(w[k] * scale.inverse, -kLowest, kLowest - 1) + kLowest);
    store_scale_bits(data, panel, r, b, scale.stored);
  }
}

// Row r's offset codes (level + 8, one per input) into its panel's 64-byte lines.
void pack_int4_row(uint8_t* data, const IntegerPanel& panel, int64_t r, int64_t cols, const uint8_t* codes) {
  const int64_t lane = r % kQuantPanelRows;
  for (int64_t q = 0; q < cols / 8; ++q) {
    uint8_t* line = data + value_line_offset(panel, r, q);
    for (int64_t j = 0; j < 4; ++j)
      line[lane * 4 + j] = static_cast<uint8_t>(codes[8 * q + j] | (codes[8 * q + 4 + j] << 4));
  }
}

// A kInt4 matrix of rows x cols (rows padded to whole panels), every value a stored zero
// (level 0 + 8 in both nibbles) and every fp16 scale still to be written.
OwnedBytes allocate_int4(const IntegerPanel& panel, int64_t rows) { return allocate_integer(panel, rows, 0x88); }

WeightMatrix quantize_int4(const WeightMatrix& dense, int32_t group) {
  if (group != kIntegerGroup) fail("int4 blocks are ", kIntegerGroup, " inputs, not ", group);
  const int64_t rows = dense.rows, cols = dense.cols;
  const IntegerPanel panel = integer_panel(WeightFormat::kInt4, cols, group);
  OwnedBytes owned = allocate_int4(panel, rows);
  RowReader read(dense);
  std::vector<uint8_t> codes(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    least_squares_row<8>(read(r), r, owned.data, panel, codes.data());
    pack_int4_row(owned.data, panel, r, cols, codes.data());
  }
  return quantized_matrix(dense, WeightFormat::kInt4, group, owned);
}

// Row r's offset codes (level + 32, 0..63) into its panel's units of 16 inputs, three
// 64-byte lines each (layout in kernels/quantize.h; a unit never spans two blocks).
void pack_int6_row(uint8_t* data, const IntegerPanel& panel, int64_t r, int64_t cols, const uint8_t* codes) {
  const int64_t lane = r % kQuantPanelRows;
  for (int64_t u = 0; u < cols / 16; ++u) {
    uint8_t* unit = data + value_line_offset(panel, r, 3 * u);
    const uint8_t* c = codes + 16 * u;
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t at = lane * 4 + j;
      unit[at] = static_cast<uint8_t>((c[j] & 15) | (c[4 + j] & 15) << 4);
      unit[64 + at] = static_cast<uint8_t>((c[8 + j] & 15) | (c[12 + j] & 15) << 4);
      unit[128 + at] =
          static_cast<uint8_t>((c[j] >> 4) | (c[4 + j] >> 4) << 2 | (c[8 + j] >> 4) << 4 | (c[12 + j] >> 4) << 6);
    }
  }
}

WeightMatrix quantize_int6(const WeightMatrix& dense, int32_t group) {
  if (group != kIntegerGroup) fail("int6 blocks are ", kIntegerGroup, " inputs, not ", group);
  const int64_t rows = dense.rows, cols = dense.cols, prows = padded_rows(rows);
  const IntegerPanel panel = integer_panel(WeightFormat::kInt6, cols, group);
  OwnedBytes owned = allocate_integer(panel, rows, 0);
  // Padding rows hold the stored zero (code 32) so they add nothing; their scales stay 0.
  std::vector<uint8_t> codes(static_cast<size_t>(cols), 32);
  for (int64_t r = rows; r < prows; ++r) pack_int6_row(owned.data, panel, r, cols, codes.data());
  RowReader read(dense);
  for (int64_t r = 0; r < rows; ++r) {
    least_squares_row<32>(read(r), r, owned.data, panel, codes.data());
    pack_int6_row(owned.data, panel, r, cols, codes.data());
  }
  return quantized_matrix(dense, WeightFormat::kInt6, group, owned);
}

WeightMatrix quantize_fp8(const WeightMatrix& dense) {
  const int64_t rows = dense.rows, cols = dense.cols;
  const int64_t row_blocks = ceil_div(rows, kFp8Block), col_blocks = ceil_div(cols, kFp8Block);
  OwnedBytes owned = allocate(static_cast<size_t>(rows * cols), static_cast<size_t>(row_blocks * col_blocks) * sizeof(float));
  auto* scales = reinterpret_cast<float*>(owned.scales);
  std::vector<float> block_rows(static_cast<size_t>(kFp8Block * cols));
  for (int64_t rb = 0; rb < row_blocks; ++rb) {
    const int64_t first = rb * kFp8Block, count = std::min(kFp8Block, rows - first);
    convert_to_f32(dense.dtype, dense.row(first), block_rows.data(), static_cast<size_t>(count * cols));
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t k0 = cb * kFp8Block, width = std::min(kFp8Block, cols - k0);
      float m = 0.0f;
      for (int64_t r = 0; r < count; ++r) m = std::max(m, max_abs(block_rows.data() + r * cols + k0, width));
      const float scale = m / 448.0f;
      const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
      scales[rb * col_blocks + cb] = scale;
      for (int64_t r = 0; r < count; ++r)
        for (int64_t k = k0; k < k0 + width; ++k)
          owned.data[(first + r) * cols + k] = f32_to_e4m3(block_rows[static_cast<size_t>(r * cols + k)] * inverse);
    }
  }
  return quantized_matrix(dense, WeightFormat::kFp8, static_cast<int32_t>(kFp8Block), owned);
}

}  // namespace

int integer_bits(WeightFormat format) {
  switch (format) {
    case WeightFormat::kInt8: return 8;
    case WeightFormat::kInt6: return 6;
    case WeightFormat::kInt4: return 4;
    default: fail(weight_format_name(format), " is not an integer format");
  }
}

IntegerPanel integer_panel(WeightFormat format, int64_t cols, int32_t group) {
  IntegerPanel panel;
  panel.block_lines = group * integer_bits(format) / 32;
  panel.blocks = cols / group;
  // An odd last block's pair is laid out whole, its second block never read.
  panel.bytes = (panel.blocks + 1) / 2 * (2 * panel.block_lines + 1) * 64;
  return panel;
}

float integer_scale(const WeightMatrix& m, int64_t r, int64_t b) {
  return load_scale(static_cast<const uint8_t*>(m.data), integer_panel(m.format, m.cols, m.group), r, b);
}

std::optional<WeightFormat> parse_weight_format(std::string_view name) {
  if (name == "wint8") return WeightFormat::kInt8;
  if (name == "wint4") return WeightFormat::kInt4;
  if (name == "int6") return WeightFormat::kInt6;
  if (name == "block_wise_fp8") return WeightFormat::kFp8;
  if (name == "bf16" || name == "none" || name.empty()) return WeightFormat::kDense;
  return std::nullopt;
}

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kDense: return "bf16";
    case WeightFormat::kInt8: return "wint8";
    case WeightFormat::kInt4: return "wint4";
    case WeightFormat::kInt6: return "int6";
    case WeightFormat::kFp8: return "block_wise_fp8";
    case WeightFormat::kWint2: return "wint2";
    case WeightFormat::kBf16Packed: return "bf16 (packed for bf16 products)";
  }
  return "?";
}

int32_t integer_group_size(int64_t cols) { return cols % kIntegerGroup == 0 ? static_cast<int32_t>(kIntegerGroup) : 0; }

bool can_quantize(const WeightMatrix& dense, WeightFormat format) {
  // A packed bf16 matrix holds the same values as its dense form (unpacked on the way).
  const bool float_source = dense.dense() || dense.format == WeightFormat::kBf16Packed;
  if (!float_source || format == WeightFormat::kWint2) return false;  // WINT2 is made offline only
  if (format == WeightFormat::kInt8 || format == WeightFormat::kInt4 || format == WeightFormat::kInt6)
    return integer_group_size(dense.cols) > 0;
  if (format == WeightFormat::kBf16Packed) return can_pack_bf16(dense);
  return true;
}

// The dense bf16 matrix a packed one holds (owned).
static WeightMatrix unpack_bf16_weight(const WeightMatrix& packed) {
  auto owned = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(packed.rows * packed.cols));
  for (int64_t r = 0; r < packed.rows; ++r) unpack_bf16_row(packed, r, owned->data() + r * packed.cols);
  WeightMatrix dense = packed;
  dense.format = WeightFormat::kDense;
  dense.dtype = DType::kBF16;
  dense.data = owned->data();
  dense.storage = std::shared_ptr<const void>(owned, owned->data());
  return dense;
}

WeightMatrix quantize_weight(const WeightMatrix& dense, WeightFormat format) {
  if (!can_quantize(dense, format))
    fail("cannot store a ", dense.rows, "x", dense.cols, " weight as ", weight_format_name(format),
         dense.dense() ? ": its input width must be a multiple of 32" : ": it is already quantized");
  if (dense.format == WeightFormat::kBf16Packed) {
    if (format == WeightFormat::kBf16Packed) return dense;
    return quantize_weight(unpack_bf16_weight(dense), format);
  }
  switch (format) {
    case WeightFormat::kDense: return dense;
    case WeightFormat::kInt8: return quantize_int8(dense, integer_group_size(dense.cols));
    case WeightFormat::kInt4: return quantize_int4(dense, integer_group_size(dense.cols));
    case WeightFormat::kInt6: return quantize_int6(dense, integer_group_size(dense.cols));
    case WeightFormat::kFp8: return quantize_fp8(dense);
    case WeightFormat::kBf16Packed: return pack_bf16_weight(dense);
    case WeightFormat::kWint2: break;  // refused by can_quantize
  }
  return dense;
}

WeightMatrix make_w4a8_weight(const uint8_t* packed, const float* weight_scale, float activation_scale,
                              int32_t hadamard, int64_t in, int64_t total, int64_t first, int64_t count) {
  if (in % kIntegerGroup != 0) fail("a W4A8 Linear needs a multiple of ", kIntegerGroup, " inputs, got ", in);
  if (!(activation_scale > 0.0f) || !std::isfinite(activation_scale))
    fail("a W4A8 activation_scale must be a positive number, got ", activation_scale);
  const IntegerPanel panel = integer_panel(WeightFormat::kInt4, in, static_cast<int32_t>(kIntegerGroup));
  OwnedBytes owned = allocate_int4(panel, count);
  // FastDeploy's load (fused_moe_cutlass_backend.py): s = 1 / activation_scale and the
  // output scale bf16(weight_scale / (127 · 112) / s) multiplies the sum of x_int8 · 16 ·
  // w_int4. The activation blocks carry a power of two (w4a8_activation_block_scale), so
  // the weight blocks carry the rest exactly.
  const float s = 1.0f / activation_scale, activation_block = 1.0f / w4a8_activation_block_scale(activation_scale);
  // A panel's rows at a time: each packed input row then gives 16 adjacent bytes.
  std::vector<uint8_t> codes(static_cast<size_t>(kQuantPanelRows * in));
  for (int64_t r0 = 0; r0 < count; r0 += kQuantPanelRows) {
    const int64_t rows = std::min(kQuantPanelRows, count - r0);
    for (int64_t k2 = 0; k2 < in / 2; ++k2) {
      const uint8_t* bytes = packed + k2 * total + first + r0;
      for (int64_t r = 0; r < rows; ++r) {
        // Two's complement levels, stored as level + 8.
        codes[static_cast<size_t>(r * in + 2 * k2)] = static_cast<uint8_t>((bytes[r] & 0xf) ^ 0x8);
        codes[static_cast<size_t>(r * in + 2 * k2 + 1)] = static_cast<uint8_t>((bytes[r] >> 4) ^ 0x8);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float output_scale = bf16_to_f32(f32_to_bf16(weight_scale[first + r0 + r] / (127.0f * 112.0f) / s));
      const uint16_t stored = f32_to_f16(16.0f * output_scale * activation_block);
      for (int64_t b = 0; b < panel.blocks; ++b) store_scale_bits(owned.data, panel, r0 + r, b, stored);
      pack_int4_row(owned.data, panel, r0 + r, in, codes.data() + r * in);
    }
  }
  WeightMatrix shape;  // what quantized_matrix takes the shape from
  shape.rows = count;
  shape.cols = in;
  WeightMatrix out = quantized_matrix(shape, WeightFormat::kInt4, static_cast<int32_t>(kIntegerGroup), owned);
  out.input_absmax = activation_scale;
  out.input_hadamard = hadamard;
  return out;
}

std::vector<float> dequantize_weight(const WeightMatrix& m) {
  if (m.dense()) return m.to_f32();
  const int64_t rows = m.rows, cols = m.cols;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  if (m.format == WeightFormat::kWint2) {
    for (int64_t r = 0; r < rows; ++r) wint2_dequantize_row(m, r, out.data() + r * cols);
    return out;
  }
  if (m.format == WeightFormat::kBf16Packed) {
    std::vector<uint16_t> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      unpack_bf16_row(m, r, row.data());
      convert_to_f32(DType::kBF16, row.data(), out.data() + r * cols, row.size());
    }
    return out;
  }
  const auto* bytes = static_cast<const uint8_t*>(m.data);
  const IntegerPanel panel = m.format == WeightFormat::kFp8 ? IntegerPanel{} : integer_panel(m.format, cols, m.group);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t lane = r % kQuantPanelRows;
    for (int64_t k = 0; k < cols; ++k) {
      float value = 0.0f;
      if (m.format == WeightFormat::kInt8) {
        const int code = bytes[value_line_offset(panel, r, k / 4) + lane * 4 + k % 4];
        value = static_cast<float>(code - 128) * load_scale(bytes, panel, r, k / m.group);
      } else if (m.format == WeightFormat::kInt4) {
        const uint8_t byte = bytes[value_line_offset(panel, r, k / 8) + lane * 4 + k % 4];
        const int code = (k % 8) < 4 ? (byte & 0xf) : (byte >> 4);
        value = static_cast<float>(code - 8) * load_scale(bytes, panel, r, k / m.group);
      } else if (m.format == WeightFormat::kInt6) {
        const uint8_t* unit = bytes + value_line_offset(panel, r, 3 * (k / 16));
        const int64_t quarter = (k % 16) / 4, at = lane * 4 + k % 4;  // which 4 inputs of the unit
        const uint8_t low = unit[(quarter / 2) * 64 + at];
        const int code = ((quarter % 2 == 0) ? (low & 0xf) : (low >> 4)) | ((unit[128 + at] >> (2 * quarter)) & 3) << 4;
        value = static_cast<float>(code - 32) * load_scale(bytes, panel, r, k / m.group);
      } else {
        const int64_t col_blocks = ceil_div(cols, kFp8Block);
        value = e4m3_to_f32(bytes[r * cols + k]) * m.fp8_scales()[(r / kFp8Block) * col_blocks + k / kFp8Block];
      }
      out[static_cast<size_t>(r * cols + k)] = value;
    }
  }
  return out;
}

uint64_t weight_bytes(const WeightMatrix& m) {
  const auto elements = static_cast<uint64_t>(m.rows * m.cols);
  switch (m.format) {
    case WeightFormat::kDense: return elements * dtype_size(m.dtype);
    case WeightFormat::kInt8: return elements + static_cast<uint64_t>(m.cols / m.group * m.rows) * 2;
    case WeightFormat::kInt4: return elements / 2 + static_cast<uint64_t>(m.cols / m.group * m.rows) * 2;
    case WeightFormat::kInt6: return elements * 3 / 4 + static_cast<uint64_t>(m.cols / m.group * m.rows) * 2;
    case WeightFormat::kFp8:
      return elements + static_cast<uint64_t>(ceil_div(m.rows, kFp8Block) * ceil_div(m.cols, kFp8Block)) * 4;
    case WeightFormat::kWint2: return wint2_bytes(m);
    case WeightFormat::kBf16Packed: return packed_bf16_bytes(m.rows, m.cols);
  }
  return elements;
}

WeightMatrix copy_quantized_weight(const WeightMatrix& packed) {
  if (packed.dense() || packed.format == WeightFormat::kBf16Packed || read_as_stored(packed))
    fail("copy_quantized_weight takes a matrix quantize_weight made, not a ", weight_format_name(packed.format), " one");
  const uint64_t values = packed_value_bytes(packed), scales = packed_scale_bytes(packed);
  const OwnedBytes owned = allocate(values, scales);
  std::memcpy(owned.data, packed.data, values);
  if (scales > 0) std::memcpy(owned.scales, packed.scales, scales);
  WeightMatrix copy = packed;
  copy.data = owned.data;
  copy.scales = owned.scales;
  copy.storage = owned.bytes;
  return copy;
}

uint64_t packed_value_bytes(const WeightMatrix& m) {
  switch (m.format) {
    case WeightFormat::kDense: return static_cast<uint64_t>(m.rows * m.cols) * dtype_size(m.dtype);
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
    case WeightFormat::kInt6:
      return static_cast<uint64_t>(padded_rows(m.rows) / kQuantPanelRows * integer_panel(m.format, m.cols, m.group).bytes);
    case WeightFormat::kFp8: return static_cast<uint64_t>(m.rows * m.cols);
    case WeightFormat::kWint2: return static_cast<uint64_t>(m.rows * m.cols / 4);
    case WeightFormat::kBf16Packed: return packed_bf16_bytes(m.rows, m.cols);
  }
  return 0;
}

uint64_t packed_scale_bytes(const WeightMatrix& m) {
  switch (m.format) {
    case WeightFormat::kDense:
    case WeightFormat::kBf16Packed:
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
    case WeightFormat::kInt6: return 0;  // the integer formats' scales are in their panels
    case WeightFormat::kWint2: return wint2_bytes(m) - packed_value_bytes(m);
    case WeightFormat::kFp8:
      return static_cast<uint64_t>(ceil_div(m.rows, kFp8Block) * ceil_div(m.cols, kFp8Block)) * sizeof(float);
  }
  return 0;
}

uint8_t f32_to_e4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float a = std::min(std::fabs(value), 448.0f);  // saturate, as the scaled inputs never exceed it
  if (a < std::ldexp(1.0f, -6)) {
    // Subnormal: multiples of 2^-9, round to nearest even (8 becomes the smallest normal).
    const auto steps = static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
    return static_cast<uint8_t>(sign | steps);
  }
  uint32_t bits;
  std::memcpy(&bits, &a, sizeof bits);
  // Keep 3 mantissa bits with round-to-nearest-even on the fp32 bit pattern; a carry
  // into the exponent is the correct rounding.
  bits += 0x7ffffu + ((bits >> 20) & 1u);
  const int exponent = static_cast<int>(bits >> 23) - 127 + 7;
  const uint32_t mantissa = (bits >> 20) & 7u;
  if (exponent > 15 || (exponent == 15 && mantissa == 7)) return static_cast<uint8_t>(sign | 0x7e);  // 448
  return static_cast<uint8_t>(sign | (exponent << 3) | mantissa);
}

float e4m3_to_f32(uint8_t bits) { return e4m3_table()[bits]; }

#if defined(__x86_64__)
// quantize_activation_row_portable with AVX-512, 16 values per step (it was 7% of a
// 512-token prefill): vcvtps2dq rounds to nearest even as the portable magic-number
// rounding does, so both give the same codes.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) void quantize_activation_row_avx512(
    const float* x, int64_t cols, int32_t group, int8_t* values, float* scales, int32_t* sums) {
  const __m512 sign_off = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512i high = _mm512_set1_epi32(127), low = _mm512_set1_epi32(-127);
  for (int64_t b = 0; b < cols / group; ++b) {
    const float* in = x + b * group;
    __m512 peak = _mm512_setzero_ps();
    for (int64_t k = 0; k < group; k += 16) peak = _mm512_max_ps(peak, _mm512_and_ps(_mm512_loadu_ps(in + k), sign_off));
    const float m = _mm512_reduce_max_ps(peak);
    const float scale = m / 127.0f;
    const __m512 inverse = _mm512_set1_ps(scale > 0 ? 1.0f / scale : 0.0f);
    __m512i total = _mm512_setzero_si512();
    for (int64_t k = 0; k < group; k += 16) {
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(in + k), inverse));
      q = _mm512_max_epi32(_mm512_min_epi32(q, high), low);
      total = _mm512_add_epi32(total, q);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(values + b * group + k), _mm512_cvtepi32_epi8(q));
    }
    scales[b] = scale;
    sums[b] = _mm512_reduce_add_epi32(total);
  }
}

// The same with AVX2, 8 values per step: the AVX2 clone of the portable loop leaves the
// rounding, clamping and narrowing scalar (2% of a 512-token MoE prefill).
__attribute__((target("avx2,fma"))) void quantize_activation_row_avx2(const float* x, int64_t cols, int32_t group,
                                                                    int8_t* values, float* scales, int32_t* sums) {
  const __m256 sign_off = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i high = _mm256_set1_epi32(127), low = _mm256_set1_epi32(-127);
  const __m256 magic = _mm256_set1_ps(kRoundingMagic);
  // packs_epi32 / packs_epi16 interleave the 128-bit lanes; this puts the 16 bytes back in order.
  const __m256i lane_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < cols / group; ++b) {
    const float* in = x + b * group;
    __m256 peak = _mm256_setzero_ps();
    for (int64_t k = 0; k < group; k += 8) peak = _mm256_max_ps(peak, _mm256_and_ps(_mm256_loadu_ps(in + k), sign_off));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(peak), _mm256_extractf128_ps(peak, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float scale = _mm_cvtss_f32(m4) / 127.0f;
    const __m256 inverse = _mm256_set1_ps(scale > 0 ? 1.0f / scale : 0.0f);
    __m256i total = _mm256_setzero_si256();
    for (int64_t k = 0; k < group; k += 32) {
      __m256i q[4];
      for (int i = 0; i < 4; ++i) {
        // Rounded as the portable loop's x86-64-v3 clone rounds (it contracts to one fused
        // multiply-add with the magic number), so AVX2 hosts keep their exact codes.
        const __m256 rounded = _mm256_sub_ps(_mm256_fmadd_ps(_mm256_loadu_ps(in + k + 8 * i), inverse, magic), magic);
        q[i] = _mm256_cvtps_epi32(rounded);
        q[i] = _mm256_max_epi32(_mm256_min_epi32(q[i], high), low);
        total = _mm256_add_epi32(total, q[i]);
      }
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(values + b * group + k),
                          _mm256_permutevar8x32_epi32(bytes, lane_order));
    }
    __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4e));
    t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xb1));
    scales[b] = scale;
    sums[b] = _mm_cvtsi128_si32(t4);
  }
}
#endif

ERNIE_CLONE_FOR_ISAS
void quantize_activation_row_portable(const float* x, int64_t cols, int32_t group, int8_t* values, float* scales,
                                      int32_t* sums) {
  for (int64_t b = 0; b < cols / group; ++b) {
    const float* in = x + b * group;
    int8_t* q = values + b * group;
    // Sixteen running maxima and plain selects vectorise on every ISA (group % 32 == 0).
    float lanes[16] = {};
    for (int64_t k = 0; k < group; k += 16)
      for (int l = 0; l < 16; ++l) {
        const float a = std::fabs(in[k + l]);
        lanes[l] = lanes[l] < a ? a : lanes[l];
      }
    float m = 0.0f;
    for (float lane : lanes) m = std::max(m, lane);
    const float scale = m / 127.0f;
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    int32_t sum = 0;
    // kRoundingMagic rounds exactly here: |v| <= 127.
    for (int64_t k = 0; k < group; ++k) {
      const float rounded = (in[k] * inverse + kRoundingMagic) - kRoundingMagic;
      q[k] = static_cast<int8_t>(rounded > 127.0f ? 127.0f : rounded < -127.0f ? -127.0f : rounded);
      sum += q[k];
    }
    scales[b] = scale;
    sums[b] = sum;
  }
}

void quantize_activation_row(const float* x, int64_t cols, int32_t group, int8_t* values, float* scales,
                             int32_t* sums) {
#if defined(__x86_64__)
  static const IsaLevel isa = active_isa_level();
  if (isa == IsaLevel::kAvx512 && group % 16 == 0)
    return quantize_activation_row_avx512(x, cols, group, values, scales, sums);
  if (isa == IsaLevel::kAvx2 && group % 32 == 0)
    return quantize_activation_row_avx2(x, cols, group, values, scales, sums);
#endif
  quantize_activation_row_portable(x, cols, group, values, scales, sums);
}

void quantize_activations(const float* x, int64_t n, int64_t cols, int32_t group, QuantizedActivations& out) {
  prepare_activations(n, cols, group, out);
  for (int64_t t = 0; t < n; ++t) quantize_activation_token(x, t, out);
}

void prepare_activations(int64_t n, int64_t cols, int32_t group, QuantizedActivations& out) {
  const int64_t blocks = cols / group;
  out.n = n;
  out.cols = cols;
  out.group = group;
  out.values.resize(static_cast<size_t>(n * cols));
  out.scales.resize(static_cast<size_t>(n * blocks));
  out.sums.resize(static_cast<size_t>(n * blocks));
}

void quantize_activation_token(const float* x, int64_t t, QuantizedActivations& out) {
  const int64_t blocks = out.cols / out.group;
  quantize_activation_row(x + t * out.cols, out.cols, out.group, out.values.data() + t * out.cols,
                          out.scales.data() + t * blocks, out.sums.data() + t * blocks);
}

ERNIE_CLONE_FOR_ISAS
void hadamard_transform_blocks(float* x, int64_t cols, int32_t block) {
  for (int64_t first = 0; first < cols; first += block) {
    float* v = x + first;
    // Butterflies (a + b, a - b) at strides 1, 2, 4, ...: natural (Sylvester) order.
    for (int32_t half = 1; half < block; half *= 2)
      for (int32_t i = 0; i < block; i += 2 * half)
        for (int32_t j = i; j < i + half; ++j) {
          const float a = v[j], b = v[j + half];
          v[j] = a + b;
          v[j + half] = a - b;
        }
  }
}

float w4a8_activation_block_scale(float absmax) { return std::exp2(std::round(std::log2(absmax / 127.0f))); }

namespace {

// v = factor · x rounded half away from zero (C's round, which FastDeploy's kernel
// calls) and clamped to ±127, with the block sums. trunc and a compare vectorise where
// std::round is a libm call per value; v - trunc(v) is exact, so the result is round's.
ERNIE_CLONE_FOR_ISAS
void quantize_static_row_portable(const float* x, int64_t cols, int32_t group, float factor, int8_t* values,
                                  int32_t* sums) {
  for (int64_t b = 0; b < cols / group; ++b) {
    int32_t sum = 0;
    for (int64_t k = b * group; k < (b + 1) * group; ++k) {
      const float v = factor * x[k], whole = std::trunc(v), part = v - whole;
      const float rounded = whole + (part >= 0.5f ? 1.0f : 0.0f) - (part <= -0.5f ? 1.0f : 0.0f);
      const auto code = static_cast<int32_t>(std::clamp(rounded, -127.0f, 127.0f));
      values[k] = static_cast<int8_t>(code);
      sum += code;
    }
    sums[b] = sum;
  }
}

#if defined(__x86_64__)
// The same with AVX-512, 16 values a step (GCC leaves the portable loop scalar).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) void quantize_static_row_avx512(
    const float* x, int64_t cols, int32_t group, float factor, int8_t* values, int32_t* sums) {
  const __m512 scale = _mm512_set1_ps(factor), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512 high = _mm512_set1_ps(127.0f), low = _mm512_set1_ps(-127.0f);
  for (int64_t b = 0; b < cols / group; ++b) {
    __m512i total = _mm512_setzero_si512();
    for (int64_t k = b * group; k < (b + 1) * group; k += 16) {
      const __m512 v = _mm512_mul_ps(scale, _mm512_loadu_ps(x + k));
      const __m512 whole = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m512 part = _mm512_sub_ps(v, whole);
      __m512 rounded = _mm512_mask_add_ps(whole, _mm512_cmp_ps_mask(part, half, _CMP_GE_OQ), whole, one);
      rounded = _mm512_mask_sub_ps(rounded, _mm512_cmp_ps_mask(part, _mm512_sub_ps(_mm512_setzero_ps(), half), _CMP_LE_OQ),
                                   rounded, one);
      const __m512i q = _mm512_cvttps_epi32(_mm512_max_ps(_mm512_min_ps(rounded, high), low));
      total = _mm512_add_epi32(total, q);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(values + k), _mm512_cvtepi32_epi8(q));
    }
    sums[b] = _mm512_reduce_add_epi32(total);
  }
}
#endif

void quantize_static_row(const float* x, int64_t cols, int32_t group, float factor, int8_t* values, int32_t* sums) {
#if defined(__x86_64__)
  static const bool avx512 = active_isa_level() == IsaLevel::kAvx512;
  if (avx512 && group % 16 == 0) return quantize_static_row_avx512(x, cols, group, factor, values, sums);
#endif
  quantize_static_row_portable(x, cols, group, factor, values, sums);
}

}  // namespace

void quantize_activation_token_static(const float* x, int64_t t, float absmax, int32_t hadamard,
                                      QuantizedActivations& out) {
  const int64_t cols = out.cols, blocks = cols / out.group;
  const float* row = x + t * cols;
  thread_local std::vector<float> rotated;
  if (hadamard > 0) {
    rotated.assign(row, row + cols);
    hadamard_transform_blocks(rotated.data(), cols, hadamard);
    row = rotated.data();
  }
  // FastDeploy multiplies by the reciprocal it stored at load (1 / activation_scale), in
  // float: (127 · (1 / absmax)) · x.
  const float factor = 127.0f * (1.0f / absmax);
  quantize_static_row(row, cols, out.group, factor, out.values.data() + t * cols, out.sums.data() + t * blocks);
  std::fill_n(out.scales.data() + t * blocks, blocks, w4a8_activation_block_scale(absmax));
}

void fake_quantize_fp8_activations(float* x, int64_t n, int64_t cols) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k0 = 0; k0 < cols; k0 += kFp8Block) {
      float* block = x + t * cols + k0;
      const int64_t width = std::min(kFp8Block, cols - k0);
      const float scale = max_abs(block, width) / 448.0f;
      if (scale == 0) continue;
      const float inverse = 1.0f / scale;
      for (int64_t k = 0; k < width; ++k) block[k] = e4m3_to_f32(f32_to_e4m3(block[k] * inverse)) * scale;
    }
  }
}

}  // namespace ernie
