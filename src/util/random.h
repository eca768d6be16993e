// A small seeded generator (splitmix64) whose output is the same on every platform and
// standard library, unlike std::normal_distribution and friends. Used wherever a seed
// must reproduce a result: sampling, synthetic weights, tests.
#pragma once

#include <cmath>
#include <cstdint>

namespace ernie {

class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in the open interval (0, 1).
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard normal by Box-Muller.
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()); }

 private:
  uint64_t state_;
};

}  // namespace ernie
