// A small seeded generator (splitmix64) whose output is the same on every platform and
// standard library, unlike std::normal_distribution and friends. Used wherever a seed
// must reproduce a result: sampling, synthetic weights, tests.
#pragma once

#include <cmath>
#include <cstdint>

#include "util/hash.h"

namespace ernie {

class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}

  uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }
  // Uniform in the open interval (0, 1).
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard normal by Box-Muller.
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()); }

 private:
  uint64_t state_;
};

}  // namespace ernie
