// bf16 weights multiplied as bf16 products (AVX512-BF16's vdpbf16ps: pairs of bf16
// products summed in fp32; on AVX2, the same exact products as fp32 multiply-adds), on
// weights repacked once at load into the layout that instruction wants: one fp32 lane
// per output row, so a weight vector serves 16 rows (AVX2: two halves of 8) and an
// activation is a broadcast, with no horizontal sums at all.
//
// Layout (WeightFormat::kBf16Packed): the inputs are taken in pairs (cols rounded up to
// even, the extra input zero) and the rows in groups of 16 (rows rounded up to a
// multiple of 16, the extra rows zero). Rows [64p, 64p + 64) form panel p, of G = 4
// groups (the last panel may hold fewer). Panel p starts at element 64p·kp (kp: the
// even column count); inside it, input pair j holds G·32 consecutive bf16: group g's
// row l at g·32 + 2l (input 2j) and g·32 + 2l + 1 (input 2j + 1). A panel is one
// sequential stream, so decode reads each thread's share of the weights front to back.
//
// Every output is one fp32 lane summed over the input pairs in order, whatever the
// batch, the tile or the thread split: a token's result does not depend on its
// neighbours.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/weight_matrix.h"
#include "util/thread_pool.h"

namespace ernie {

// Rows that share a vdpbf16ps: one fp32 lane each.
constexpr int64_t kBf16GroupRows = 16;
// Groups in a panel (the rows one tile of the kernel produces).
constexpr int64_t kBf16PanelGroups = 4;

// Whether this CPU has a fast path for bf16 products at the active ISA level
// (kernels/cpu_features.h): AVX512-BF16, or AVX2 with FMA.
bool bf16_products_available();
// Whether bf16 weights are multiplied as bf16 products in this process: available and
// set_bf16_products(true) (kernels/matmul.h). The loader packs bf16 Linears when it is.
bool bf16_products_active();

// A dense bf16 matrix in the layout above (owned); others cannot be packed.
bool can_pack_bf16(const WeightMatrix& dense);
WeightMatrix pack_bf16_weight(const WeightMatrix& dense);
// Row r of a packed matrix as its cols bf16 values.
void unpack_bf16_row(const WeightMatrix& packed, int64_t r, uint16_t* out);
// The packed bytes, padding included (what a product reads).
uint64_t packed_bf16_bytes(int64_t rows, int64_t cols);

// y[n, w.rows] = bf16(x) · Wᵀ for a packed w: vdpbf16ps where the CPU has it, fp32
// multiply-adds of the same exact products on AVX2, else the same sums (in the same
// order as vdpbf16ps, with fp32 multiply-adds) on any CPU.
void matmul_bf16_packed(ThreadPool& pool, const float* x, int64_t n, const WeightMatrix& w, float* y);
// The same for 1 to 4 packed weights that take the same input (ys[i] = bf16(x) · ws[i]ᵀ):
// the activations are rounded once and all the weights' work is one parallel loop.
void matmul_bf16_packed_group(ThreadPool& pool, const float* x, int64_t n, std::span<const WeightMatrix* const> ws,
                              std::span<float* const> ys);

}  // namespace ernie
