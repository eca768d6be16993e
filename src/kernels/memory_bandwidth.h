// The machine's memory read bandwidth as a streaming kernel sees it: every thread sums its
// share of a buffer far larger than the caches, with wide loads, once with software
// prefetch as the decode kernels use it and once without, the faster counting. Decode of a model whose weights do not fit the caches cannot
// run faster than this figure divided by the bytes it reads per token (`ernie bench`'s
// roofline; bench/matmul_bench's BM_MemoryRead).
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/thread_pool.h"

namespace ernie {

// Sum of `count` 64-bit words (what the measurement reads; also keeps it from being
// optimised away), with software prefetch 1 KiB ahead or without.
uint64_t sum_words(const uint64_t* words, size_t count, bool prefetch = true);

// Best of `repetitions` reads of a `bytes` buffer on all of `pool`'s threads, each with
// and without software prefetch, in GB/s (10^9 bytes per second).
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t{1} << 30, int repetitions = 3);

}  // namespace ernie
