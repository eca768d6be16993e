// FastDeploy's WINT2 weights ("2-bit CCQ"), as ERNIE-4.5-300B-A47B-2Bits-Paddle stores
// its routed experts (docs/quantization.md has the format with its sources). Each byte
// holds four consecutive inputs of one output: decoded through the output's affine map
// d = floor(byte * code_scale + code_zp + 0.5), input 4r + j is the 6-bit window
// ((d >> (9 - 3j)) & 63) - 32, times the scale of its group of 64 inputs, a 4-bit
// number times the output's super scale. 8 bits per 4 weights, read as stored.
//
// In a WeightMatrix (format kWint2, group 64) the bytes are [rows][cols / 4]: output
// rows, as every other format here (the checkpoint's [cols / 4, rows] transposed at
// load); `scales` points at the matrix's Wint2Params.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/weight_matrix.h"
#include "util/thread_pool.h"

namespace ernie {

inline constexpr int32_t kWint2Group = 64;

struct Wint2Params {
  std::vector<float> code_scale;    // [rows]
  std::vector<float> code_zp;       // [rows]
  std::vector<float> super_scale;   // [rows] (bf16 in the checkpoint, exact in float)
  std::vector<uint8_t> group_scale; // [rows][cols / 64], 0..15
};

// The checkpoint's tensors of one Linear with `in_features` inputs and `out_features`
// outputs, in FastDeploy's layout: quant_weight [in/4, out] bytes, weight_scale
// [in/128, out] bytes (two 4-bit group scales each: the high nibble for even groups),
// super_scales / code_scale / code_zp [out] floats. Columns [first_out, first_out +
// count) become the matrix's rows (up_gate_proj holds gate then up). Throws
// ernie::Error when in_features is not a multiple of 128.
WeightMatrix make_wint2_weight(const uint8_t* quant_weight, const uint8_t* weight_scale, const float* super_scales,
                               const float* code_scale, const float* code_zp, int64_t in_features,
                               int64_t out_features, int64_t first_out, int64_t count);

// Row `row` of the matrix as floats (level times scale, exact in float).
void wint2_dequantize_row(const WeightMatrix& w, int64_t row, float* out);

// y[n, w.rows] = x[n, w.cols] · Wᵀ.
void matmul_wint2(ThreadPool& pool, const float* x, int64_t n, const WeightMatrix& w, float* y);

// Bytes of the matrix as stored: 2 bits per weight, plus its per-row parameters.
uint64_t wint2_bytes(const WeightMatrix& w);

}  // namespace ernie
