// Matmul speed per weight format at ERNIE-4.5-0.3B shapes, next to what the machine can
// do at all:
//   BM_MemoryRead      - all threads summing a 1 GiB buffer: the bandwidth roofline (GB/s)
//   BM_PeakFma         - fp32 FMAs on independent registers (AVX-512, else AVX2): the
//                        float compute peak, and the bound of the AVX2 bf16 path
//   BM_PeakVnni        - int8 vpdpbusd on independent registers (AVX-512 VNNI only)
//   BM_PeakBf16        - vdpbf16ps on independent registers (AVX512-BF16 only): the
//                        peak of the bf16-product path (kernels/matmul.h)
//   BM_Matmul/...      - y = x·Wᵀ; counters GB/s (weight bytes streamed per second) and
//                        GFLOP/s (2·n·rows·cols, integer multiply-adds counted as flops)
//   BM_MatmulStream/...- one token through 48 distinct matrices, as decode streams them
// Decode (n = 1) should sit near BM_MemoryRead's GB/s; prefill (n = 512) near the peak.
//
// Run: build/bench/matmul_bench [--benchmark_filter=...] (2 threads = all cores here).
#include <benchmark/benchmark.h>

#include <cstring>
#include <thread>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/matmul_bf16.h"
#include "kernels/memory_bandwidth.h"
#include "kernels/quantize.h"
#include "kernels/x86_intrinsics.h"
#include "util/random.h"

namespace ernie {
namespace {

ThreadPool& pool() {
  static ThreadPool instance(std::thread::hardware_concurrency());
  return instance;
}

void BM_MemoryRead(benchmark::State& state) {
  const size_t bytes = size_t{1} << 30;
  std::vector<uint64_t> buffer(bytes / 8, 1);
  const size_t threads = pool().num_threads();
  std::vector<uint64_t> sums(threads * 8);
  for (auto _ : state) {
    pool().parallel_for(threads, 1, [&](size_t begin, size_t) {
      const size_t share = buffer.size() / threads;
      sums[begin * 8] = sum_words(buffer.data() + begin * share, share);
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(state.iterations()),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_MemoryRead)->Unit(benchmark::kMillisecond)->UseRealTime();

#if defined(__x86_64__)
constexpr int64_t kPeakSteps = 1 << 22;
// Independent accumulator chains: enough to cover latency x throughput of each unit. On
// Zen 5 twelve vdpbf16ps chains gave 8% under the rate sixteen reach (the matmul tiles,
// with 24 accumulators, ran faster than the "peak" of twelve).
constexpr int kPeakChains = 16;
// AVX2 has 16 ymm registers, two of which hold the operands: 12 chains stay in registers.
constexpr int kPeakChainsAvx2 = 12;

__attribute__((target("avx512f"))) float peak_fma_avx512() {
  __m512 acc[kPeakChains];
  for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t s = 0; s < kPeakSteps; ++s)
    for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 total = acc[0];
  for (int i = 1; i < kPeakChains; ++i) total = _mm512_add_ps(total, acc[i]);
  return _mm512_reduce_add_ps(total);
}

__attribute__((target("avx2,fma"))) float peak_fma_avx2() {
  __m256 acc[kPeakChainsAvx2];
  for (int i = 0; i < kPeakChainsAvx2; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t s = 0; s < kPeakSteps; ++s)
    for (int i = 0; i < kPeakChainsAvx2; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 total = acc[0];
  for (int i = 1; i < kPeakChainsAvx2; ++i) total = _mm256_add_ps(total, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, total);
  return lanes[0];
}

__attribute__((target("avx512f,avx512vnni"))) int peak_vnni() {
  __m512i acc[kPeakChains];
  for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-1);
  for (int64_t s = 0; s < kPeakSteps; ++s)
    for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  __m512i total = acc[0];
  for (int i = 1; i < kPeakChains; ++i) total = _mm512_add_epi32(total, acc[i]);
  return _mm512_reduce_add_epi32(total);
}

__attribute__((target("avx512f,avx512bf16"))) float peak_bf16() {
  __m512 acc[kPeakChains];
  for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.999f), _mm512_set1_ps(0.999f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.001f), _mm512_set1_ps(0.001f));
  for (int64_t s = 0; s < kPeakSteps; ++s)
    for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 total = acc[0];
  for (int i = 1; i < kPeakChains; ++i) total = _mm512_add_ps(total, acc[i]);
  return _mm512_reduce_add_ps(total);
}

// Runs `body` on every thread at once and reports flops_per_call per thread as GFLOP/s.
template <typename Body>
void run_peak(benchmark::State& state, double flops_per_call, Body body) {
  const size_t threads = pool().num_threads();
  std::vector<double> sink(threads * 8);
  for (auto _ : state) {
    pool().parallel_for(threads, 1, [&](size_t begin, size_t) { sink[begin * 8] = body(); });
    benchmark::DoNotOptimize(sink.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_call * static_cast<double>(threads) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void BM_PeakFma(benchmark::State& state) {
  if (cpu_features().avx512)
    return run_peak(state, 2.0 * 16 * kPeakChains * kPeakSteps, [] { return static_cast<double>(peak_fma_avx512()); });
  if (!cpu_features().avx2) return state.SkipWithError("no AVX2 with FMA on this CPU");
  run_peak(state, 2.0 * 8 * kPeakChainsAvx2 * kPeakSteps, [] { return static_cast<double>(peak_fma_avx2()); });
}
BENCHMARK(BM_PeakFma)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_PeakVnni(benchmark::State& state) {
  if (!cpu_features().avx512_vnni) return state.SkipWithError("no AVX-512 VNNI on this CPU");
  run_peak(state, 2.0 * 64 * kPeakChains * kPeakSteps, [] { return static_cast<double>(peak_vnni()); });
}
BENCHMARK(BM_PeakVnni)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_PeakBf16(benchmark::State& state) {
  if (!cpu_features().avx512_bf16) return state.SkipWithError("no AVX512-BF16 on this CPU");
  run_peak(state, 2.0 * 32 * kPeakChains * kPeakSteps, [] { return static_cast<double>(peak_bf16()); });
}
BENCHMARK(BM_PeakBf16)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

struct Operands {
  std::vector<uint16_t> bits;
  WeightMatrix weight;
  std::vector<float> x, y;
};

Operands make_operands(WeightFormat format, int64_t n, int64_t rows, int64_t cols) {
  Operands o;
  Random random(7);
  o.bits.resize(static_cast<size_t>(rows * cols));
  for (uint16_t& b : o.bits) b = f32_to_bf16(static_cast<float>(random.normal() * 0.02));
  WeightMatrix dense;
  dense.dtype = DType::kBF16;
  dense.rows = rows;
  dense.cols = cols;
  dense.data = o.bits.data();
  // bf16 weights as the serving commands hold them: packed for bf16 products where the
  // CPU has AVX512-BF16 (kernels/matmul_bf16.h).
  if (format == WeightFormat::kDense && bf16_products_active()) format = WeightFormat::kBf16Packed;
  o.weight = format == WeightFormat::kDense ? dense : quantize_weight(dense, format);
  if (format != WeightFormat::kDense) o.bits = {};
  o.x.resize(static_cast<size_t>(n * cols));
  for (float& v : o.x) v = static_cast<float>(random.normal());
  o.y.resize(static_cast<size_t>(n * rows));
  return o;
}

// Args: format, n, rows, cols.
void BM_Matmul(benchmark::State& state) {
  const auto format = static_cast<WeightFormat>(state.range(0));
  const int64_t n = state.range(1), rows = state.range(2), cols = state.range(3);
  set_bf16_products(true);  // as the serving commands do
  Operands o = make_operands(format, n, rows, cols);
  MatmulInput input;
  for (auto _ : state) {
    // A fresh input each time, so the activation quantization is part of the cost.
    input.reset(o.x.data(), n, cols);
    matmul(pool(), input, o.weight, o.y.data());
    benchmark::DoNotOptimize(o.y.data());
  }
  const auto iterations = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes(o.weight)) * iterations,
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * rows * cols) * iterations,
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetLabel(weight_format_name(o.weight.format));
}

// Decode as a token sees it: one token through many distinct matrices, so every weight
// byte comes from memory as in a real forward pass (BM_Matmul's single matrix of a layer
// shape stays in the last-level cache). Args: format, rows, cols, matrices. Its GB/s is
// the one to hold against BM_MemoryRead.
void BM_MatmulStream(benchmark::State& state) {
  const auto format = static_cast<WeightFormat>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), count = state.range(3);
  set_bf16_products(true);
  std::vector<Operands> matrices;
  for (int64_t i = 0; i < count; ++i) matrices.push_back(make_operands(format, 1, rows, cols));
  MatmulInput input;
  uint64_t bytes = 0;
  for (auto _ : state) {
    for (Operands& o : matrices) {
      input.reset(o.x.data(), 1, cols);
      matmul(pool(), input, o.weight, o.y.data());
      benchmark::DoNotOptimize(o.y.data());
      bytes += weight_bytes(o.weight);
    }
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
  state.SetLabel(weight_format_name(matrices.front().weight.format));
}
// The 0.3B MLP's up projection, 48 distinct copies (75 MB at int4, twice the L3).
BENCHMARK(BM_MatmulStream)
    ->ArgsProduct({{static_cast<int64_t>(WeightFormat::kDense), static_cast<int64_t>(WeightFormat::kInt8),
                    static_cast<int64_t>(WeightFormat::kInt4)},
                   {3072},
                   {1024},
                   {48}})
    ->ArgNames({"format", "rows", "cols", "matrices"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// silu(gate)·up over one prefill's MLP rows of the 0.3B (512 x 3072), on one thread.
void BM_SiluMul(benchmark::State& state) {
  const int64_t count = 512 * 3072;
  Random random(3);
  std::vector<float> gate(static_cast<size_t>(count)), up(gate.size()), work(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    gate[i] = static_cast<float>(random.normal() * 3.0);
    up[i] = static_cast<float>(random.normal());
  }
  for (auto _ : state) {
    state.PauseTiming();
    work = gate;
    state.ResumeTiming();
    silu_mul(work.data(), up.data(), count);
    benchmark::DoNotOptimize(work.data());
  }
  state.SetItemsProcessed(state.iterations() * count);
}
BENCHMARK(BM_SiluMul)->Unit(benchmark::kMicrosecond);

// A SwiGLU MLP of the 0.3B (1024 -> 3072 -> 1024) on n tokens in bf16 products, gate
// and up fused with silu·up (matmul_swiglu) or as two products, silu_mul and the
// rounding pass. Args: fused, n.
void BM_MlpBf16(benchmark::State& state) {
  const bool fused = state.range(0) != 0;
  const int64_t n = state.range(1), hidden = 1024, inner = 3072;
  set_bf16_products(true);
  Operands gate = make_operands(WeightFormat::kDense, n, inner, hidden), up = make_operands(WeightFormat::kDense, n, inner, hidden);
  Operands down = make_operands(WeightFormat::kDense, n, hidden, inner);
  std::vector<float> g(static_cast<size_t>(n * inner)), u(g.size());
  MatmulInput input, down_input;
  for (auto _ : state) {
    input.reset(gate.x.data(), n, hidden);
    if (!fused || !matmul_swiglu(pool(), input, gate.weight, up.weight, down.weight, down_input)) {
      const WeightMatrix* ws[] = {&gate.weight, &up.weight};
      float* ys[] = {g.data(), u.data()};
      matmul_shared_input(pool(), input, ws, ys);
      down_input.reset(g.data(), n, inner);
      down_input.round_while_writing(down.weight);
      pool().parallel_for(static_cast<size_t>(n), 16, [&](size_t begin, size_t end) {
        const auto t0 = static_cast<int64_t>(begin), t1 = static_cast<int64_t>(end);
        silu_mul(g.data() + t0 * inner, u.data() + t0 * inner, (t1 - t0) * inner);
        down_input.round_written(t0, t1);
      });
    }
    matmul(pool(), down_input, down.weight, down.y.data());
    benchmark::DoNotOptimize(down.y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(6.0 * static_cast<double>(n * inner * hidden) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_MlpBf16)->ArgsProduct({{0, 1}, {1, 512}})->ArgNames({"fused", "n"})->Unit(benchmark::kMicrosecond)->UseRealTime();

void matmul_shapes(benchmark::internal::Benchmark* b) {
  for (WeightFormat format : {WeightFormat::kDense, WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kFp8}) {
    const auto f = static_cast<int64_t>(format);
    // 0.3B's MLP up projection (3072 x 1024) and down projection (1024 x 3072).
    for (int64_t n : {1, 512}) {
      b->Args({f, n, 3072, 1024});
      b->Args({f, n, 1024, 3072});
    }
    b->Args({f, 1, 103424, 1024});  // the (tied) LM head, decode only
  }
  b->Args({static_cast<int64_t>(WeightFormat::kInt6), 1, 103424, 1024});  // the head under the 4-bit names
  b->ArgNames({"format", "n", "rows", "cols"});
}
BENCHMARK(BM_Matmul)->Apply(matmul_shapes)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace ernie

BENCHMARK_MAIN();
