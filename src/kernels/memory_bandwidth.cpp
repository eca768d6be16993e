#include "kernels/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/x86_intrinsics.h"
#include "util/error.h"
#include "util/weight_buffer.h"

namespace ernie {
namespace {

#if defined(__x86_64__)
// 64-byte loads into four accumulators, prefetching 1 KiB ahead or not at all.
__attribute__((target("avx512f"))) uint64_t sum_words_avx512(const uint64_t* p, size_t count, bool prefetch) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    if (prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 128), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 136), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 144), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 152), _MM_HINT_T0);
    }
    a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
    b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 8));
    c = _mm512_add_epi64(c, _mm512_loadu_si512(p + i + 16));
    d = _mm512_add_epi64(d, _mm512_loadu_si512(p + i + 24));
  }
  uint64_t rest = 0;
  for (; i < count; ++i) rest += p[i];
  return rest + static_cast<uint64_t>(
                    _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d))));
}

// The same with 32-byte loads: without it an AVX2 machine measured its bandwidth through
// the portable loop below, under what its decode kernels read.
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* p, size_t count, bool prefetch) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    if (prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 128), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 136), _MM_HINT_T0);
    }
    a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    c = _mm256_add_epi64(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    d = _mm256_add_epi64(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
  uint64_t rest = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < count; ++i) rest += p[i];
  return rest;
}
#endif

}  // namespace

uint64_t sum_words(const uint64_t* p, size_t count, bool prefetch) {
#if defined(__x86_64__)
  if (cpu_features().avx512) return sum_words_avx512(p, count, prefetch);
  if (cpu_features().avx2) return sum_words_avx2(p, count, prefetch);
#endif
  (void)prefetch;
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < count; ++i) a += p[i];
  return a + b + c + d;
}

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repetitions) {
  // Allocated as the weights are (huge pages where the kernel gives them), and written
  // once by the allocation, so every page is backed.
  const std::shared_ptr<uint8_t> block = allocate_weight_buffer(bytes);
  if (block == nullptr) fail("out of memory allocating the ", bytes, "-byte buffer that measures read bandwidth");
  const auto* words = reinterpret_cast<const uint64_t*>(block.get());
  const size_t threads = pool.num_threads(), share = bytes / sizeof(uint64_t) / threads;
  std::vector<uint64_t> sums(threads * 8);  // a cache line apart
  double best = 0.0;
  // Each repetition reads the buffer with and without software prefetch: which is
  // faster depends on the machine (on an AVX2-only Zen 3 host, no prefetch read 10-20%
  // faster in a standalone test), and the roofline wants the best.
  for (int r = 0; r < 2 * repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(threads, 1, [&](size_t begin, size_t) {
      sums[begin * 8] += sum_words(words + begin * share, share, r % 2 == 0);
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(share * threads * sizeof(uint64_t)) / seconds / 1e9);
  }
  // The sums must be read, or the loads could go.
  volatile uint64_t sink = 0;
  for (const uint64_t s : sums) sink = sink + s;
  return best;
}

}  // namespace ernie
