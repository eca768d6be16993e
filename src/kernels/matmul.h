// Matrix products against weights: y[n, W.rows] = x[n, W.cols] · Wᵀ with fp32
// activations and fp32 accumulation, for every weight dtype a WeightMatrix can hold.
// This is the portable path and the test oracle; ISA-specific fast paths plug in
// behind the same call (the compiler clones the inner loop per ISA and the loader
// picks the best clone the CPU supports at run time).
#pragma once

#include <cstdint>

#include "tensor/weight_matrix.h"
#include "util/thread_pool.h"

namespace ernie {

void matmul(ThreadPool& pool, const float* x, int64_t n, const WeightMatrix& w, float* y);

// The same product on one thread, element by element, in double: the reference the
// tests hold every fast path to.
void matmul_reference(const float* x, int64_t n, const WeightMatrix& w, float* y);

// Wraps an fp32 buffer [rows, cols] (e.g. the router) as a WeightMatrix view.
WeightMatrix f32_matrix_view(const float* data, int64_t rows, int64_t cols);

}  // namespace ernie
