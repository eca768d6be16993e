// Products of int8-quantized activations with kInt8 / kInt4 / kInt6 weights (layouts in
// kernels/quantize.h): y[t][r] = Σ_b xs[t][b] · ws[b][r] · Σ_{k in b} x8[t][k] · w[r][k].
// The integer sums are exact, so the VNNI path, the portable path and the reference
// agree up to the float rounding of the per-block epilogue.
#pragma once

#include <span>

#include "kernels/matmul.h"
#include "kernels/quantize.h"
#include "util/thread_pool.h"

namespace ernie {

void matmul_integer(ThreadPool& pool, const QuantizedActivations& x, const WeightMatrix& w, float* y);

// Several weights that read the same activations (q, k and v; gate and up), up to 4, in
// one parallel loop: fewer hand-offs, and the threads' shares even out across them.
void matmul_integer_group(ThreadPool& pool, const QuantizedActivations& x, std::span<const WeightMatrix* const> ws,
                          std::span<float* const> ys);

// Independent products, each weight with its own activations (a MoE decode step's
// experts: every expert's gate and up on its tokens, then every down on its own), up to
// kMaxBatchWeights (kernels/matmul.h), in one parallel loop: decode streams all the
// weights as one run split between the threads, as it streams one large matrix. Each y_i
// is bitwise what matmul_integer(pool, *xs[i], *ws[i], ys[i]) gives.
void matmul_integer_batch(ThreadPool& pool, std::span<const QuantizedActivations* const> xs,
                          std::span<const WeightMatrix* const> ws, std::span<float* const> ys);

// Sizes the calling thread's buffers for products of up to `max_tokens` activation rows
// of up to `max_cols` inputs, so later ones on this thread allocate nothing.
void reserve_integer_scratch(int64_t max_tokens, int64_t max_cols);

// The same sum in double on one thread, from dequantize_weight: the tests' oracle.
void matmul_integer_reference(const QuantizedActivations& x, const WeightMatrix& w, float* y);

}  // namespace ernie
