#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "util/error.h"

namespace ernie {

void validate_sampling_params(const SamplingParams& params) {
  if (!(params.temperature >= 0.0f) || !std::isfinite(params.temperature))
    fail("temperature must be a finite number >= 0, got ", params.temperature);
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) fail("top_p must lie in (0, 1], got ", params.top_p);
  if (params.top_k < 0) fail("top_k must be >= 0, got ", params.top_k);
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t Sampler::sample(std::span<const float> logits, const SamplingParams& params) {
  // Below this temperature the distribution is a point mass in fp32 anyway.
  if (params.temperature < 1e-5f || params.top_k == 1) return argmax(logits);

  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  auto more_likely = [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  };
  size_t kept = order.size();
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < kept) kept = static_cast<size_t>(params.top_k);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kept), order.end(), more_likely);

  const double max_logit = logits[static_cast<size_t>(order[0])];
  std::vector<double> weights(kept);
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    weights[i] = std::exp((logits[static_cast<size_t>(order[i])] - max_logit) / params.temperature);
    total += weights[i];
  }
  // Nucleus: the smallest prefix (by probability) whose mass reaches top_p.
  if (params.top_p < 1.0f) {
    double mass = 0.0;
    for (size_t i = 0; i < kept; ++i) {
      mass += weights[i] / total;
      if (mass >= params.top_p) {
        kept = i + 1;
        break;
      }
    }
    total = std::accumulate(weights.begin(), weights.begin() + static_cast<std::ptrdiff_t>(kept), 0.0);
  }
  double target = random_.uniform() * total;
  for (size_t i = 0; i < kept; ++i) {
    target -= weights[i];
    if (target <= 0.0) return order[i];
  }
  return order[kept - 1];
}

}  // namespace ernie
