// Choosing the next token from a row of logits. Temperature 0 is greedy; otherwise
// softmax at the temperature, restricted to the top_k most likely tokens and to the
// smallest set whose probability reaches top_p, then one seeded draw.
#pragma once

#include <cstdint>
#include <span>

#include "util/random.h"

namespace ernie {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;        // in (0, 1]
  int top_k = 0;             // 0: no limit
};

// Throws ernie::Error naming the bad value when a parameter is out of range.
void validate_sampling_params(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(uint64_t seed) : random_(seed) {}
  int32_t sample(std::span<const float> logits, const SamplingParams& params);

 private:
  Random random_;
};

// Index of the largest logit (the first on ties).
int32_t argmax(std::span<const float> logits);

}  // namespace ernie
