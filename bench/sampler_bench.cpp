// Sampling speed at ERNIE 4.5's vocabulary (103424), kBase against kRejection, on a row
// of random normal logits times 3 (a fairly flat step: the top token has 4.6% and the 0.9
// nucleus holds 4,314 tokens) and on a peaked one (times 6: the top token has 31% and the
// nucleus 20 tokens).
// Each iteration copies the row into the sampler's scratch first, as the engine hands it a
// fresh row per step; BM_CopyRow measures that copy alone.
//
// Run: sampler_bench [--benchmark_filter=...]; items/s = tokens sampled per second.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "engine/sampler.h"
#include "util/random.h"

namespace ernie {
namespace {

constexpr size_t kVocab = 103424;

std::vector<float> normal_row(float scale) {
  Random random(2024);
  std::vector<float> row(kVocab);
  for (float& logit : row) logit = scale * static_cast<float>(random.normal());
  return row;
}

SamplingParams greedy() {
  SamplingParams params;
  params.temperature = 0.0f;
  return params;
}

SamplingParams top_p(float p) {
  SamplingParams params;
  params.top_p = p;
  return params;
}

SamplingParams top_k_top_p(int k, float p) {
  SamplingParams params;
  params.top_k = k;
  params.top_p = p;
  return params;
}

SamplingParams temperature_only(float temperature) {
  SamplingParams params;
  params.temperature = temperature;
  return params;
}

void BM_Sample(benchmark::State& state, SamplingParams params, SamplingClass sampling_class, float logit_scale) {
  const std::vector<float> row = normal_row(logit_scale);
  std::vector<float> scratch(row.size());
  RequestSampler sampler(params, {}, {2}, /*default_seed=*/1, sampling_class);
  for (auto _ : state) {
    std::copy(row.begin(), row.end(), scratch.begin());
    benchmark::DoNotOptimize(sampler.sample(scratch).token);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_CopyRow(benchmark::State& state) {
  const std::vector<float> row = normal_row(3.0f);
  std::vector<float> scratch(row.size());
  for (auto _ : state) {
    std::copy(row.begin(), row.end(), scratch.begin());
    benchmark::DoNotOptimize(scratch.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

constexpr SamplingClass kBase = SamplingClass::kBase;
constexpr SamplingClass kRejection = SamplingClass::kRejection;

BENCHMARK(BM_CopyRow);
BENCHMARK_CAPTURE(BM_Sample, greedy/base, greedy(), kBase, 3.0f);
BENCHMARK_CAPTURE(BM_Sample, greedy/rejection, greedy(), kRejection, 3.0f);
BENCHMARK_CAPTURE(BM_Sample, temperature_0.8/base, temperature_only(0.8f), kBase, 3.0f);
BENCHMARK_CAPTURE(BM_Sample, temperature_0.8/rejection, temperature_only(0.8f), kRejection, 3.0f);
BENCHMARK_CAPTURE(BM_Sample, top_p_0.9/base, top_p(0.9f), kBase, 3.0f);
BENCHMARK_CAPTURE(BM_Sample, top_p_0.9/rejection, top_p(0.9f), kRejection, 3.0f);
BENCHMARK_CAPTURE(BM_Sample, top_k_50_top_p_0.9/base, top_k_top_p(50, 0.9f), kBase, 3.0f);
BENCHMARK_CAPTURE(BM_Sample, top_k_50_top_p_0.9/rejection, top_k_top_p(50, 0.9f), kRejection, 3.0f);
BENCHMARK_CAPTURE(BM_Sample, top_k_50/base, top_k_top_p(50, 1.0f), kBase, 3.0f);
BENCHMARK_CAPTURE(BM_Sample, top_k_50/rejection, top_k_top_p(50, 1.0f), kRejection, 3.0f);
BENCHMARK_CAPTURE(BM_Sample, peaked_top_p_0.9/base, top_p(0.9f), kBase, 6.0f);
BENCHMARK_CAPTURE(BM_Sample, peaked_top_p_0.9/rejection, top_p(0.9f), kRejection, 6.0f);

}  // namespace
}  // namespace ernie

BENCHMARK_MAIN();
