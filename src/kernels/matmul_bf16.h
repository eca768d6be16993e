// Decode products (one token row) against bf16 or FP8 weights with AVX512-BF16 dot
// products, streaming the checkpoint's rows as they are. Each fp32 activation is split
// into two bf16 numbers, hi = bf16(x) and lo = bf16(x - hi), and both are multiplied
// with the weights (vdpbf16ps), so the product keeps about 16 bits of the activation
// (relative error ~2^-17) instead of bf16's 8 - close to the fp32 path's result at half
// the instructions per weight byte, which lets decode run at memory speed.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/weight_matrix.h"
#include "util/thread_pool.h"

namespace ernie {

// Whether this CPU (and ERNIE_ISA) allows the path for this product: one token row (the
// decode of one sequence, where it runs at memory speed; for 2 to 32 rows it measured
// 2-3x slower here, AMD EPYC at 3072 x 1024, than the tiled path, which widens bf16 to
// fp32 in registers or panels for FMAs) against dense bf16 weights or FP8 weights (each e4m3 byte becomes a bf16 by placing its bits; subnormal
// e4m3 values, below 2^-6 of a block's scale unit, then read as zero).
bool bf16_dot_applies(int64_t n, const WeightMatrix& w);

// Sizes the calling thread's buffers for weights of up to `max_cols` inputs.
void reserve_bf16_dot_scratch(int64_t max_cols);

// y[w.rows] = x · Wᵀ for one token row x; requires bf16_dot_applies(1, w).
void matmul_bf16_dot(ThreadPool& pool, const float* x, const WeightMatrix& w, float* y);

// The same for up to 4 weights that read the same x, in one parallel loop; requires
// bf16_dot_applies(1, ·) for each.
void matmul_bf16_dot_group(ThreadPool& pool, const float* x, std::span<const WeightMatrix* const> ws,
                           std::span<float* const> ys);

}  // namespace ernie
