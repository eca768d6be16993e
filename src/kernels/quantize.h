// Weight quantization at load time (FastDeploy's wint8, wint4, block_wise_fp8) and the
// matching activation quantization done on the fly by the kernels.
//
// Integer formats (kInt8, kInt4, kInt6) are laid out for 4-byte integer dot products
// (AVX-512 VNNI vpdpbusd, or its portable equivalent): output rows are grouped into
// panels of kQuantPanelRows, and within a panel each 64-byte line holds, for 4 consecutive
// inputs (int8) or 2 x 4 (int4, low and high nibble), the values of all 16 rows:
//   int8 value line q of panel p: byte 4r + j = w[16p + r][4q + j] + 128           (u8)
//   int4 value line q of panel p: byte 4r + j = (w[16p+r][8q+j] + 8) | (w[16p+r][8q+4+j] + 8) << 4
//   int6 (the LM head under the 4-bit names) comes in units of 16 inputs, three lines
//   each: with c = w + 32 (0..63) and k = 16u, unit u of panel p holds
//     line 0, byte 4r + j = c[k+j] & 15 | (c[k+4+j] & 15) << 4
//     line 1, byte 4r + j = c[k+8+j] & 15 | (c[k+12+j] & 15) << 4
//     line 2, byte 4r + j = c[k+j] >> 4 | (c[k+4+j] >> 4) << 2 | (c[k+8+j] >> 4) << 4 | (c[k+12+j] >> 4) << 6
//   (row 16p + r), so the kernels rebuild 4 lines of byte codes from 3 with masks and shifts.
//   Lines and units are counted over the panel's values alone; its scale lines (below)
//   sit between them.
// Values are stored with an offset so they are unsigned; the kernels remove the offset
// with the activations' block sums. Each row has one scale per block of kIntegerGroup
// (32) inputs, as llama.cpp's Q8_0 / Q4_0 do, stored as fp16 inside the panel beside
// its values: a panel is its blocks in pairs, each pair's value lines (block 2i's, then
// block 2i+1's) followed by one 64-byte line of their scales (the 16 rows' of block 2i in
// bytes 0..31, of block 2i+1 in 32..63; an odd last block is followed by room for a
// second that is never read, and its scale line's second half is zero).
// Decode then reads each panel as one sequential stream: with the scales in an array of
// their own, that second stream cost the 0.3B shape's decode 15-19% of its tokens/s.
// int8 scales are the block's max|w| / 127; int4 and int6 scales minimise the block's
// squared error.
// Activations are quantized per token and per block of `group` inputs to int8 with
// scale max|x| / 127, so every integer sum is exact and every ISA path computes the
// same numbers up to the final float rounding.
//
// kFp8: row-major e4m3 bytes (max 448) with one float scale per 128 x 128 block,
// scales [ceil(rows/128)][ceil(cols/128)]; activations are rounded through e4m3 with
// one scale per token and 128 inputs, as FastDeploy's block_wise_fp8 does on GPUs.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "tensor/weight_matrix.h"

namespace ernie {

constexpr int64_t kQuantPanelRows = 16;
constexpr int64_t kIntegerGroup = 32;
constexpr int64_t kFp8Block = 128;

// Where a 16-row panel of a kInt8, kInt4 or kInt6 matrix keeps its values and scales.
struct IntegerPanel {
  int64_t block_lines = 0;  // 64-byte lines of one block's values
  int64_t blocks = 0;       // blocks of `group` inputs per row
  int64_t bytes = 0;        // one panel: every block's values and scale lines
  // Offsets in the panel of block b's first value line and of its 16 fp16 scales.
  int64_t values_at(int64_t b) const { return ((b >> 1) * (2 * block_lines + 1) + (b & 1) * block_lines) * 64; }
  int64_t scales_at(int64_t b) const { return ((b >> 1) * (2 * block_lines + 1) + 2 * block_lines) * 64 + (b & 1) * 32; }
};
// Bits per stored value of an integer format: 8, 6 or 4.
int integer_bits(WeightFormat format);
IntegerPanel integer_panel(WeightFormat format, int64_t cols, int32_t group);
// The scale of row r, block b of a kInt8, kInt4 or kInt6 matrix.
float integer_scale(const WeightMatrix& matrix, int64_t r, int64_t b);

// Parses "wint8", "wint4", "block_wise_fp8", "int6" (and "bf16"/"none" as kDense); nullopt
// otherwise. "int6" names the head's format in caches; --quantization refuses it.
std::optional<WeightFormat> parse_weight_format(std::string_view name);
const char* weight_format_name(WeightFormat format);

// The group size an integer format uses for a matrix with `cols` inputs: kIntegerGroup,
// or 0 when cols is not a multiple of it (the matrix then stays dense).
int32_t integer_group_size(int64_t cols);

// Whether `dense` can be stored in `format` (integer formats need integer_group_size > 0,
// kBf16Packed a bf16 source). A kBf16Packed matrix counts as dense here.
bool can_quantize(const WeightMatrix& dense, WeightFormat format);

// Quantizes a dense matrix (any dtype, or bf16 packed) into `format`, owning the result.
// Throws ernie::Error when can_quantize is false.
WeightMatrix quantize_weight(const WeightMatrix& dense, WeightFormat format);

// An owning copy of a matrix quantize_weight made (kInt8, kInt4, kInt6, kFp8) whose bytes
// lie elsewhere (a file mapping), in the same single block as quantize_weight's own.
WeightMatrix copy_quantized_weight(const WeightMatrix& packed);

// FastDeploy's W4A8 Linear as its releases store it (is_permuted false; docs/quantization.md):
// `packed` int8 [in/2, total], two signed int4 levels a byte along the inputs (low nibble
// the even input), `weight_scale` [total] per output and the expert's static
// `activation_scale`. Columns [first, first + count) become a kInt4 matrix whose input is
// quantized with that static scale, after a Hadamard over blocks of `hadamard` inputs
// when > 0 (the down projection's).
WeightMatrix make_w4a8_weight(const uint8_t* packed, const float* weight_scale, float activation_scale,
                              int32_t hadamard, int64_t in, int64_t total, int64_t first, int64_t count);

// Whether a matrix holds a FastDeploy release's weights as they were stored (WINT2, W4A8),
// which no quantized-weights cache or `ernie quantize` file needs to repeat.
inline bool read_as_stored(const WeightMatrix& m) { return m.format == WeightFormat::kWint2 || m.input_absmax > 0.0f; }

// The values a quantized (or dense) matrix represents, as fp32 [rows, cols].
std::vector<float> dequantize_weight(const WeightMatrix& matrix);

// Bytes of weight data a matmul streams for this matrix (packed values and scales).
uint64_t weight_bytes(const WeightMatrix& matrix);
// The exact sizes in bytes of a quantized matrix's two arrays (`data`, `scales`), as
// quantize_weight allocates them (integer formats pad rows to whole panels and keep
// their scales in `data`: no `scales` array).
uint64_t packed_value_bytes(const WeightMatrix& matrix);
uint64_t packed_scale_bytes(const WeightMatrix& matrix);

// FP8 e4m3 ("fn": no infinities, max 448) conversions, round to nearest even.
uint8_t f32_to_e4m3(float value);
float e4m3_to_f32(uint8_t bits);

// Activations of n tokens quantized for the integer kernels.
struct QuantizedActivations {
  int64_t n = 0, cols = 0;
  int32_t group = 0;
  std::vector<int8_t> values;  // [n][cols]
  std::vector<float> scales;   // [n][cols / group]
  std::vector<int32_t> sums;   // [n][cols / group], sum of the int8 values of each block
};

// Fills `out` (reusing its capacity) from fp32 x [n, cols].
void quantize_activations(const float* x, int64_t n, int64_t cols, int32_t group, QuantizedActivations& out);
// The same in two steps, so tokens can be quantized in parallel: size `out`, then fill
// token t from x [n, cols].
void prepare_activations(int64_t n, int64_t cols, int32_t group, QuantizedActivations& out);
void quantize_activation_token(const float* x, int64_t t, QuantizedActivations& out);

// FastDeploy's W4A8 activations (fused_moe_op.h; docs/quantization.md): token t of x,
// first transformed by an unnormalised natural-order Hadamard over blocks of `hadamard`
// inputs when `hadamard` > 0, is quantized with the static absmax `absmax`:
// v = clip(round_half_away(127 · (1 / absmax) · x), ±127), every block's scale absmax / 127.
void quantize_activation_token_static(const float* x, int64_t t, float absmax, int32_t hadamard,
                                      QuantizedActivations& out);
// The block scale those activations carry: the power of two nearest absmax / 127, so the
// weight blocks hold FastDeploy's bf16 output scale times an exact power of two, which
// fp16 represents without rounding (their product is the release's scale exactly).
float w4a8_activation_block_scale(float absmax);
// The unnormalised Sylvester Hadamard transform (H[i][j] = (-1)^popcount(i & j)) of each
// block of `block` values of x [cols], in place; `block` a power of two dividing cols.
void hadamard_transform_blocks(float* x, int64_t cols, int32_t block);

// Rounds x [n, cols] through e4m3 with one scale per token and 128 inputs (in place).
void fake_quantize_fp8_activations(float* x, int64_t n, int64_t cols);

}  // namespace ernie
