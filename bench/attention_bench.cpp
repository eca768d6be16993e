// Causal attention of one kv head's group at ERNIE-4.5-0.3B's shape (16 query heads,
// 2 kv heads, head_dim 128: 8 query heads per kv head), one thread:
//   Prefill: 512 query tokens from position 0 (131,328 visible token-key pairs per head).
//   Decode:  1 query token after `context` cached positions.
// Each for fp32, int8 and bf16 rows (bf16: the cache's default; also with bf16 products,
// as `ernie serve` multiplies them where the CPU has AVX512-BF16), and the
// per-(token, head) attend_one_head loop the flash kernel replaces (fp32 only) as a
// baseline.
//
// Run: attention_bench [--benchmark_filter=...]; items/s = query tokens per second,
// FLOP/s = 4 · head_dim · group heads · visible pairs per second (q·k and p·v, 2 each).
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "kernels/matmul.h"
#include "util/random.h"

namespace ernie {
namespace {

constexpr int kHeads = 16, kKvHeads = 2, kHeadDim = 128, kGroup = kHeads / kKvHeads;

struct Setup {
  AttentionShape shape;
  std::vector<uint8_t> keys, values;
  std::vector<const void*> key_rows, value_rows;
  std::vector<float> q, out;
};

Setup make_setup(KvStorage storage, int64_t positions, int num_queries) {
  Setup s{{kHeads, kKvHeads, kHeadDim, static_cast<float>(1.0 / std::sqrt(double(kHeadDim))), storage}, {}, {}, {},
          {}, {}, {}};
  const size_t row_bytes = kv_row_bytes(storage, kKvHeads, kHeadDim);
  s.keys.resize(row_bytes * static_cast<size_t>(positions));
  s.values.resize(s.keys.size());
  Random random(1);
  std::vector<float> row(kKvHeads * kHeadDim);
  for (int64_t p = 0; p < positions; ++p) {
    for (float& x : row) x = static_cast<float>(random.normal());
    store_kv_row(row.data(), kKvHeads, kHeadDim, storage, s.keys.data() + row_bytes * p);
    for (float& x : row) x = static_cast<float>(random.normal());
    store_kv_row(row.data(), kKvHeads, kHeadDim, storage, s.values.data() + row_bytes * p);
    s.key_rows.push_back(s.keys.data() + row_bytes * p);
    s.value_rows.push_back(s.values.data() + row_bytes * p);
  }
  s.q.resize(static_cast<size_t>(num_queries) * kHeads * kHeadDim);
  for (float& x : s.q) x = static_cast<float>(random.normal());
  s.out.resize(s.q.size());
  return s;
}

void set_counters(benchmark::State& state, int num_queries, int64_t first_position) {
  const double pairs = double(num_queries) * double(first_position) + double(num_queries) * (num_queries + 1) / 2.0;
  state.SetItemsProcessed(state.iterations() * num_queries);
  state.counters["FLOP/s"] = benchmark::Counter(4.0 * kHeadDim * kGroup * pairs, benchmark::Counter::kIsIterationInvariantRate);
}

void run_flash(benchmark::State& state, KvStorage storage, int num_queries, int64_t first_position) {
  Setup s = make_setup(storage, first_position + num_queries, num_queries);
  AttentionScratch scratch;
  const int64_t stride = kHeads * kHeadDim;
  for (auto _ : state) {
    causal_attention_group(s.shape, s.key_rows.data(), s.value_rows.data(), 0, s.q.data(), stride, first_position,
                           num_queries, s.out.data(), stride, scratch);
    benchmark::DoNotOptimize(s.out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, num_queries, first_position);
}

void run_simple(benchmark::State& state, int num_queries, int64_t first_position) {
  Setup s = make_setup(KvStorage::kF32, first_position + num_queries, num_queries);
  std::vector<const float*> keys, values;
  for (size_t p = 0; p < s.key_rows.size(); ++p) {
    keys.push_back(static_cast<const float*>(s.key_rows[p]));
    values.push_back(static_cast<const float*>(s.value_rows[p]));
  }
  std::vector<float> scores(keys.size());
  for (auto _ : state) {
    for (int i = 0; i < num_queries; ++i)
      for (int h = 0; h < kGroup; ++h)
        attend_one_head(s.q.data() + (i * kHeads + h) * kHeadDim, keys.data(), values.data(), first_position + i + 1,
                        0, kHeadDim, s.shape.scale, scores.data(), s.out.data() + (i * kHeads + h) * kHeadDim);
    benchmark::DoNotOptimize(s.out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, num_queries, first_position);
}

void BM_PrefillF32(benchmark::State& state) { run_flash(state, KvStorage::kF32, 512, 0); }
void BM_PrefillInt8(benchmark::State& state) { run_flash(state, KvStorage::kInt8, 512, 0); }
void BM_PrefillBf16(benchmark::State& state) { run_flash(state, KvStorage::kBF16, 512, 0); }
// bf16 rows multiplied in bf16 (vdpbf16ps; kernels/flash_attention.h), as `ernie serve`
// runs them on a CPU with AVX512-BF16; elsewhere the same fp32 kernel as the plain bf16 case.
void run_bf16_products(benchmark::State& state, int num_queries, int64_t first_position) {
  set_bf16_products(true);
  const bool products = attention_uses_bf16_products({kHeads, kKvHeads, kHeadDim, 1.0f, KvStorage::kBF16});
  run_flash(state, KvStorage::kBF16, num_queries, first_position);
  set_bf16_products(false);
  state.SetLabel(products ? "bf16 products" : "fp32 (no AVX512-BF16)");
}
void BM_PrefillBf16Products(benchmark::State& state) { run_bf16_products(state, 512, 0); }
void BM_PrefillSimple(benchmark::State& state) { run_simple(state, 512, 0); }
void BM_DecodeF32(benchmark::State& state) { run_flash(state, KvStorage::kF32, 1, state.range(0)); }
void BM_DecodeInt8(benchmark::State& state) { run_flash(state, KvStorage::kInt8, 1, state.range(0)); }
void BM_DecodeBf16(benchmark::State& state) { run_flash(state, KvStorage::kBF16, 1, state.range(0)); }
void BM_DecodeBf16Products(benchmark::State& state) { run_bf16_products(state, 1, state.range(0)); }
void BM_DecodeSimple(benchmark::State& state) { run_simple(state, 1, state.range(0)); }

BENCHMARK(BM_PrefillF32)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillInt8)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillBf16)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillBf16Products)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillSimple)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeF32)->Arg(128)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeInt8)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeBf16)->Arg(128)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeBf16Products)->Arg(128)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeSimple)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ernie

BENCHMARK_MAIN();
