#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>

#include "kernels/simd_dispatch.h"
#include "util/error.h"

namespace ernie {
namespace {

constexpr float kBannedLogit = -1e10f;  // FastDeploy's value for a token that must not be drawn
constexpr float kGreedyBelow = 1e-5f;   // FastDeploy's floor: temperature or top_p below it is greedy
constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();
// Tokens per partial sum of the weights, so that a draw from the whole row walks the
// partial sums and then one block instead of the whole row.
constexpr size_t kBlock = 256;
// Below this many candidates the nucleus boundary is found by sorting them.
constexpr size_t kFinalSortSize = 64;

// ---- 8 floats at a time, with GCC/Clang vector extensions: the loops compile to SSE,
// AVX2 or AVX-512 (ERNIE_CLONE_FOR_ISAS picks at run time) at any -O level, and the
// remainders go through the same lane code, so every token's weight is computed by the
// same arithmetic whichever path needs it, and sums add in the same order on every ISA.
// Not 16: GCC 12 lowers comparisons of 16-float vectors on AVX2 lane by lane through the
// stack, which made the x86-64-v3 clone of `exponentiate` about 6 times longer.
constexpr size_t kLanes = 8;
using FloatLanes = float __attribute__((vector_size(kLanes * sizeof(float))));
using IntLanes = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));
static_assert(kBlock % kLanes == 0);

#if defined(__GNUC__)  // GCC and Clang
// The lane helpers pass 32-byte vectors by value, and GCC warns that the ABI of such a
// call depends on AVX. They are always inlined, so no such call exists. Left off to
// the end of the file: at -O3 GCC reports it from there.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

[[gnu::always_inline]] inline FloatLanes broadcast(float value) { return FloatLanes{} + value; }

[[gnu::always_inline]] inline FloatLanes load_lanes(const float* values) {
  FloatLanes lanes;
  std::memcpy(&lanes, values, sizeof lanes);
  return lanes;
}

// The first `count` (< kLanes) lanes from `values`, the rest `fill`.
[[gnu::always_inline]] inline FloatLanes load_partial_lanes(const float* values, size_t count, float fill) {
  FloatLanes lanes = broadcast(fill);
  for (size_t i = 0; i < count; ++i) lanes[i] = values[i];
  return lanes;
}

// Horizontal reductions fold the vector in halves (8 -> 4 -> 2 lanes, then scalars): a
// few shuffles instead of a chain of 8 dependent scalar steps.
using FloatHalfLanes = float __attribute__((vector_size(kLanes / 2 * sizeof(float))));
using FloatQuarterLanes = float __attribute__((vector_size(kLanes / 4 * sizeof(float))));

template <typename Half, typename Whole>
[[gnu::always_inline]] inline void split_halves(const Whole& whole, Half& low, Half& high) {
  static_assert(2 * sizeof(Half) == sizeof(Whole));
  std::memcpy(&low, &whole, sizeof low);
  std::memcpy(&high, reinterpret_cast<const char*>(&whole) + sizeof low, sizeof high);
}

[[gnu::always_inline]] inline float horizontal_max(const FloatLanes& lanes) {
  FloatHalfLanes low, high;
  split_halves(lanes, low, high);
  const FloatHalfLanes half = low > high ? low : high;
  FloatQuarterLanes quarter_low, quarter_high;
  split_halves(half, quarter_low, quarter_high);
  const FloatQuarterLanes quarter = quarter_low > quarter_high ? quarter_low : quarter_high;
  return quarter[0] > quarter[1] ? quarter[0] : quarter[1];
}

[[gnu::always_inline]] inline double horizontal_sum(const FloatLanes& lanes) {
  FloatHalfLanes low, high;
  split_halves(lanes, low, high);
  FloatQuarterLanes quarter_low, quarter_high;
  split_halves(FloatHalfLanes(low + high), quarter_low, quarter_high);
  const FloatQuarterLanes quarter = quarter_low + quarter_high;
  return static_cast<double>(quarter[0]) + static_cast<double>(quarter[1]);
}

// exp(x) for x <= 0, within 3e-7 relative; exactly 0 below -87 (where float exp leaves the
// normal range), so banned (-1e10) and -inf logits weigh exactly nothing. NaN gives NaN.
// x = n ln2 + r with |r| <= ln2/2, exp(r) by its Taylor series to r^6, 2^n put into the
// exponent bits.
[[gnu::always_inline]] inline FloatLanes exp_lanes(const FloatLanes& x) {
  constexpr float kUnderflow = -87.0f;
  constexpr float kLog2E = 1.44269504f;
  constexpr float kLn2High = 0.693145751953125f;  // ln 2 = kLn2High + kLn2Low, kLn2High exact in few bits
  constexpr float kLn2Low = 1.42860677e-6f;
  constexpr float kRoundingShift = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const IntLanes in_range = x >= kUnderflow;  // false for NaN too, which must not reach the int conversion
  const FloatLanes clamped = in_range ? x : broadcast(kUnderflow);
  const FloatLanes n = (clamped * kLog2E + kRoundingShift) - kRoundingShift;
  const FloatLanes r = (clamped - n * kLn2High) - n * kLn2Low;
  FloatLanes series = r * (1.0f / 720.0f) + (1.0f / 120.0f);
  series = series * r + (1.0f / 24.0f);
  series = series * r + (1.0f / 6.0f);
  series = series * r + 0.5f;
  series = series * r + 1.0f;
  series = series * r + 1.0f;
  const IntLanes exponent_bits = (__builtin_convertvector(n, IntLanes) + 127) << 23;
  const FloatLanes power_of_two = std::bit_cast<FloatLanes>(exponent_bits);
  const IntLanes is_nan = x != x;
  return in_range ? series * power_of_two : (is_nan ? x : FloatLanes{});
}

// The sampling weight exp((logit - max) / temperature); 0 where it falls below min_weight
// and for NaN logits, which are never drawn (as argmax skips them).
[[gnu::always_inline]] inline FloatLanes weigh_lanes(const FloatLanes& logits, const FloatLanes& max_logit,
                                                     const FloatLanes& inverse_temperature, const FloatLanes& min_weight) {
  const FloatLanes weights = exp_lanes((logits - max_logit) * inverse_temperature);
  return weights >= min_weight ? weights : FloatLanes{};
}

// ---- Passes over the whole row.

ERNIE_CLONE_FOR_ISAS float max_of(const float* values, size_t count) {
  FloatLanes best = broadcast(kNegativeInfinity);
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    const FloatLanes lanes = load_lanes(values + i);
    best = lanes > best ? lanes : best;
  }
  float result = horizontal_max(best);
  for (; i < count; ++i) result = values[i] > result ? values[i] : result;
  return result;
}

ERNIE_CLONE_FOR_ISAS int32_t argmax_of(const float* values, size_t count) {
  // Each lane keeps its first maximum; across lanes the smallest index among equal maxima
  // is the first maximum of the row.
  FloatLanes best = broadcast(kNegativeInfinity);
  IntLanes best_index = {};
  IntLanes index;
  for (size_t lane = 0; lane < kLanes; ++lane) index[lane] = static_cast<int32_t>(lane);
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    const FloatLanes lanes = load_lanes(values + i);
    const IntLanes larger = lanes > best;
    best = larger ? lanes : best;
    best_index = larger ? index : best_index;
    index += static_cast<int32_t>(kLanes);
  }
  float result = kNegativeInfinity;
  int32_t result_index = 0;
  for (size_t lane = 0; lane < kLanes; ++lane) {
    if (best[lane] > result || (best[lane] == result && best_index[lane] < result_index)) {
      result = best[lane];
      result_index = best_index[lane];
    }
  }
  for (; i < count; ++i) {
    if (values[i] > result) {
      result = values[i];
      result_index = static_cast<int32_t>(i);
    }
  }
  return result_index;
}

// Writes every token's weight and each block's sum; returns the total.
ERNIE_CLONE_FOR_ISAS double exponentiate(const float* logits, size_t count, float max_logit, float inverse_temperature,
                                         float min_weight, float* weights, double* block_weights) {
  const FloatLanes shift = broadcast(max_logit);
  const FloatLanes scale = broadcast(inverse_temperature);
  const FloatLanes floor = broadcast(min_weight);
  double total = 0.0;
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t end = std::min(count, start + kBlock);
    FloatLanes block_sum = {};
    size_t i = start;
    for (; i + kLanes <= end; i += kLanes) {
      const FloatLanes lanes = weigh_lanes(load_lanes(logits + i), shift, scale, floor);
      std::memcpy(weights + i, &lanes, sizeof lanes);
      block_sum += lanes;
    }
    if (i < end) {
      const FloatLanes lanes =
          weigh_lanes(load_partial_lanes(logits + i, end - i, kNegativeInfinity), shift, scale, floor);
      for (size_t lane = 0; i + lane < end; ++lane) weights[i + lane] = lanes[lane];
      block_sum += lanes;  // the padding lanes weigh 0
    }
    block_weights[start / kBlock] = horizontal_sum(block_sum);
    total += block_weights[start / kBlock];
  }
  return total;
}

struct MassAbove {
  int64_t count = 0;  // tokens whose logit is strictly above the pivot
  double mass = 0.0;  // their weight
};

ERNIE_CLONE_FOR_ISAS MassAbove mass_above(const float* logits, const float* weights, size_t count, float pivot) {
  const FloatLanes threshold = broadcast(pivot);
  IntLanes counts = {};
  MassAbove result;
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t end = std::min(count, start + kBlock);
    FloatLanes block_mass = {};
    size_t i = start;
    for (; i + kLanes <= end; i += kLanes) {
      const IntLanes above = load_lanes(logits + i) > threshold;
      counts -= above;  // true is -1
      block_mass += above ? load_lanes(weights + i) : FloatLanes{};
    }
    for (; i < end; ++i) {
      if (logits[i] > pivot) {
        ++result.count;
        result.mass += weights[i];
      }
    }
    result.mass += horizontal_sum(block_mass);
  }
  for (size_t lane = 0; lane < kLanes; ++lane) result.count += counts[lane];
  return result;
}

// One token still in the running while a row is sampled.
struct Candidate {
  float logit;   // processed logit: decides the order
  float weight;  // exp((logit - max) / temperature): decides the mass
  int32_t token;
};

// Most likely first; among equal logits the lower token id first.
constexpr auto kMoreLikely = [](const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
};

// Writes to `out` (room for `count`) every token whose key is >= threshold (> when
// strictly_above) and returns how many. Blocks of 16 keys with nothing to keep are skipped
// whole; inside a block every token is written and the count advanced only for those
// kept, which costs less than the mispredicted branches of a push_back.
ERNIE_CLONE_FOR_ISAS size_t collect_candidates(const float* keys, float threshold, bool strictly_above,
                                               const float* logits, const float* weights, size_t count, Candidate* out) {
  auto keep = [&](size_t token) { return strictly_above ? keys[token] > threshold : keys[token] >= threshold; };
  size_t kept = 0;
  auto offer = [&](size_t token) {
    out[kept] = {logits[token], weights != nullptr ? weights[token] : 0.0f, static_cast<int32_t>(token)};
    kept += keep(token) ? 1 : 0;
  };
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    const float largest = horizontal_max(load_lanes(keys + i));
    if (strictly_above ? !(largest > threshold) : !(largest >= threshold)) continue;
    for (size_t token = i; token < i + kLanes; ++token) offer(token);
  }
  for (; i < count; ++i) offer(i);
  return kept;
}

// The k-th largest value (0 < k <= count; NaN counts as -inf), from a min-heap of the k
// largest seen so far; blocks of 16 holding nothing above the heap's top are skipped whole.
ERNIE_CLONE_FOR_ISAS float kth_largest(const float* values, size_t count, size_t k, std::vector<float>& heap) {
  heap.assign(values, values + k);
  for (float& value : heap) value = std::isnan(value) ? kNegativeInfinity : value;
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  auto offer = [&heap](float value) {
    if (!(value > heap.front())) return;
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    heap.back() = value;
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  size_t i = k;
  for (; i + kLanes <= count; i += kLanes) {
    if (!(horizontal_max(load_lanes(values + i)) > heap.front())) continue;
    for (size_t j = i; j < i + kLanes; ++j) offer(values[j]);
  }
  for (; i < count; ++i) offer(values[i]);
  return heap.front();
}

// The `wanted` most likely tokens, most likely first, into `out` (a small sorted buffer;
// blocks of 16 that cannot enter it are skipped whole).
ERNIE_CLONE_FOR_ISAS void most_likely_tokens(const float* logits, size_t count, size_t wanted,
                                             std::vector<Candidate>& out) {
  out.clear();
  auto offer = [&](size_t token) {
    const Candidate candidate{logits[token], 0.0f, static_cast<int32_t>(token)};
    if (std::isnan(candidate.logit)) return;
    if (out.size() == wanted) {
      if (!kMoreLikely(candidate, out.back())) return;
      out.pop_back();
    }
    out.insert(std::upper_bound(out.begin(), out.end(), candidate, kMoreLikely), candidate);
  };
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    if (out.size() == wanted && !(horizontal_max(load_lanes(logits + i)) > out.back().logit)) continue;
    for (size_t token = i; token < i + kLanes; ++token) offer(token);
  }
  for (; i < count; ++i) offer(i);
}

// Same weights as exponentiate for a list of candidates: same lane arithmetic, and cloned
// the same way, so that a machine computes a token's weight identically on either path.
ERNIE_CLONE_FOR_ISAS void weigh_candidates(std::span<Candidate> candidates, float max_logit, float inverse_temperature, float min_weight) {
  for (size_t start = 0; start < candidates.size(); start += kLanes) {
    const size_t count = std::min(kLanes, candidates.size() - start);
    FloatLanes logits = broadcast(kNegativeInfinity);
    for (size_t lane = 0; lane < count; ++lane) logits[lane] = candidates[start + lane].logit;
    const FloatLanes weights =
        weigh_lanes(logits, broadcast(max_logit), broadcast(inverse_temperature), broadcast(min_weight));
    for (size_t lane = 0; lane < count; ++lane) candidates[start + lane].weight = weights[lane];
  }
}

// ---- Per-thread scratch.

// A list of candidates whose storage only grows, so that refilling it allocates nothing.
class CandidateList {
 public:
  // Storage for up to `capacity` candidates, to be filled and then sized with resize().
  Candidate* room_for(size_t capacity) {
    if (storage_.size() < capacity) storage_.resize(capacity);
    size_ = 0;
    return storage_.data();
  }
  void resize(size_t size) { size_ = size; }  // at most the room asked for
  std::span<Candidate> items() { return {storage_.data(), size_}; }
  size_t size() const { return size_; }

 private:
  std::vector<Candidate> storage_;
  size_t size_ = 0;
};

// Sampling needs a few vocabulary-sized buffers; they live per thread rather than per
// request (a request waiting between steps holds none), and once grown are reused.
struct Scratch {
  std::vector<float> weights;
  std::vector<double> block_weights;
  CandidateList candidates;
  std::vector<float> heap;
  std::vector<Candidate> ranked;
  std::vector<Candidate> candidates_sorted;  // the whole row, for the top-p nucleus of logprobs
  std::vector<float> raw_logits;
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// The truncation settings of one draw, with the vocabulary known.
struct Truncation {
  float inverse_temperature;
  float min_p;
  size_t top_k;  // 0: off (also when it would keep the whole vocabulary)
  float top_p;   // 1: off
  bool top_k_on() const { return top_k > 0; }
  bool top_p_on() const { return top_p < 1.0f; }
};

// ---- Drawing.

// Sum of the weights of the candidates whose weight is at least `lightest` (all by
// default). Four running sums, so that the additions do not wait on one another.
double sum_of_weights(std::span<const Candidate> candidates, float lightest = 0.0f) {
  double sums[4] = {0.0, 0.0, 0.0, 0.0};
  size_t i = 0;
  for (; i + 4 <= candidates.size(); i += 4) {
    for (size_t j = 0; j < 4; ++j) {
      const float weight = candidates[i + j].weight;
      sums[j] += weight >= lightest ? weight : 0.0f;
    }
  }
  for (; i < candidates.size(); ++i) sums[0] += candidates[i].weight >= lightest ? candidates[i].weight : 0.0f;
  return (sums[0] + sums[1]) + (sums[2] + sums[3]);
}

// Index of one candidate drawn in proportion to its weight.
size_t draw_index(std::span<const Candidate> candidates, double total, Random& random) {
  double target = random.uniform() * total;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (target < candidates[i].weight) return i;
    target -= candidates[i].weight;
  }
  // Rounding left the target past the end: the last token that has weight.
  for (size_t i = candidates.size(); i-- > 0;) {
    if (candidates[i].weight > 0.0f) return i;
  }
  fail("no token left to sample: every candidate has weight 0");
}

// Weighs the whole row into scratch.weights / block_weights; returns the total weight.
double weigh_row(std::span<const float> logits, const Truncation& truncation, Scratch& scratch) {
  const float max_logit = max_of(logits.data(), logits.size());
  if (!std::isfinite(max_logit)) fail("the logits row has no finite maximum (", max_logit, "); cannot sample");
  scratch.weights.resize(logits.size());
  scratch.block_weights.resize((logits.size() + kBlock - 1) / kBlock);
  const double total = exponentiate(logits.data(), logits.size(), max_logit, truncation.inverse_temperature,
                                    truncation.min_p, scratch.weights.data(), scratch.block_weights.data());
  return total;
}

// A token drawn from the whole weighed row: walk the block sums, then one block.
int32_t draw_from_row(const Scratch& scratch, double total_weight, Random& random) {
  const std::vector<float>& weights = scratch.weights;
  double target = random.uniform() * total_weight;
  for (size_t block = 0; block < scratch.block_weights.size(); ++block) {
    if (target >= scratch.block_weights[block]) {
      target -= scratch.block_weights[block];
      continue;
    }
    const size_t start = block * kBlock;
    const size_t end = std::min(weights.size(), start + kBlock);
    for (size_t token = start; token < end; ++token) {
      if (target < weights[token]) return static_cast<int32_t>(token);
      target -= weights[token];
    }
    // The block's sum (added in another order) exceeded the target: its last weighted token.
    for (size_t token = end; token-- > start;) {
      if (weights[token] > 0.0f) return static_cast<int32_t>(token);
    }
  }
  for (size_t token = weights.size(); token-- > 0;) {
    if (weights[token] > 0.0f) return static_cast<int32_t>(token);
  }
  fail("no token left to sample: every weight is 0");
}

// Leaves in scratch.candidates the top_k tokens by logit (and any tied with the k-th),
// weighed, less those min_p drops; returns their weight.
double select_top_k(std::span<const float> logits, const Truncation& truncation, Scratch& scratch) {
  const float kth = kth_largest(logits.data(), logits.size(), truncation.top_k, scratch.heap);
  Candidate* room = scratch.candidates.room_for(logits.size());
  scratch.candidates.resize(collect_candidates(logits.data(), kth, /*strictly_above=*/false, logits.data(), nullptr,
                                               logits.size(), room));
  const std::span<Candidate> top = scratch.candidates.items();
  float max_logit = kNegativeInfinity;
  for (const Candidate& candidate : top) max_logit = std::max(max_logit, candidate.logit);
  if (!std::isfinite(max_logit)) fail("the logits row has no finite maximum (", max_logit, "); cannot sample");
  weigh_candidates(top, max_logit, truncation.inverse_temperature, truncation.min_p);
  const auto weighed_end = std::remove_if(top.begin(), top.end(), [](const Candidate& c) { return !(c.weight > 0.0f); });
  scratch.candidates.resize(static_cast<size_t>(weighed_end - top.begin()));
  return sum_of_weights(scratch.candidates.items());
}

// ---- kBase: prefilter, then partially sort.

// candidates[last] ends the nucleus, and everything after `sorted_end` is less likely than
// everything before. Moves the tokens tied with candidates[last] next to it and returns the
// length of the prefix that ends with the tie.
size_t extend_over_ties(std::span<Candidate> candidates, size_t last, size_t sorted_end) {
  const float boundary = candidates[last].logit;
  size_t kept = last + 1;
  while (kept < sorted_end && candidates[kept].logit == boundary) ++kept;
  if (kept < sorted_end) return kept;
  const auto tied_end = std::partition(candidates.begin() + static_cast<std::ptrdiff_t>(sorted_end), candidates.end(),
                                       [boundary](const Candidate& c) { return c.logit == boundary; });
  return static_cast<size_t>(tied_end - candidates.begin());
}

// Finds the strict nucleus by partial sorting: the shortest run of most likely candidates
// whose weight reaches nucleus_mass, extended over tokens tied with its last one, is moved
// to the front; returns its length. Halves the range that holds the boundary with
// nth_element (everything before the median is more likely than everything after it) until
// it is small, then sorts that. About 2n comparisons instead of a sort's n log n.
size_t partition_nucleus(std::span<Candidate> candidates, double nucleus_mass) {
  size_t low = 0;  // [0, low): in the nucleus, more likely than everything after
  size_t high = candidates.size();
  double mass_before = 0.0;  // weight of [0, low)
  while (high - low > kFinalSortSize) {
    const size_t middle = low + (high - low) / 2;
    const auto begin = candidates.begin();
    std::nth_element(begin + static_cast<std::ptrdiff_t>(low), begin + static_cast<std::ptrdiff_t>(middle),
                     begin + static_cast<std::ptrdiff_t>(high), kMoreLikely);
    const double upper_mass = sum_of_weights(candidates.subspan(low, middle - low));
    if (mass_before + upper_mass >= nucleus_mass) {
      high = middle;
    } else {
      mass_before += upper_mass;
      low = middle;
    }
  }
  std::sort(candidates.begin() + static_cast<std::ptrdiff_t>(low), candidates.begin() + static_cast<std::ptrdiff_t>(high),
            kMoreLikely);
  double mass = mass_before;
  for (size_t i = low; i < high; ++i) {
    mass += candidates[i].weight;
    if (mass >= nucleus_mass) return extend_over_ties(candidates, i, high);
  }
  return candidates.size();  // the whole list falls short of the target (by rounding): keep all
}

// The candidates are an upper set of the row (every token more likely than one of them is
// among them) whose mass kept_mass reaches nucleus_mass. Drops their lightest tokens while
// that stays true, so that little is left to sort: tokens lighter than slack / count, with
// slack = kept_mass - nucleus_mass, weigh less than the slack all together. Each round is
// checked by summing what would stay, not assumed, since rounding could tip the bound.
void narrow_to_nucleus(CandidateList& list, double kept_mass, double nucleus_mass) {
  constexpr int kMaxRounds = 8;
  for (int round = 0; round < kMaxRounds; ++round) {
    const std::span<Candidate> candidates = list.items();
    const double slack = kept_mass - nucleus_mass;
    if (candidates.empty() || !(slack > 0.0)) return;
    const auto lightest_kept = static_cast<float>(slack / static_cast<double>(candidates.size()));
    const double heavy_mass = sum_of_weights(candidates, lightest_kept);
    if (heavy_mass < nucleus_mass) return;
    size_t kept = 0;
    for (const Candidate& c : candidates) {  // compacts in place, without branches
      candidates[kept] = c;
      kept += c.weight >= lightest_kept ? 1 : 0;
    }
    list.resize(kept);
    kept_mass = heavy_mass;
    if (kept * 8 > candidates.size() * 7) return;  // shrank by less than 1/8: not worth another pass
  }
}

int32_t sample_nucleus_by_sorting(std::span<Candidate> candidates, double nucleus_mass, Random& random) {
  const std::span<const Candidate> nucleus = candidates.first(partition_nucleus(candidates, nucleus_mass));
  return nucleus[draw_index(nucleus, sum_of_weights(nucleus), random)].token;
}

int32_t draw_base(std::span<const float> logits, const Truncation& truncation, Scratch& scratch, Random& random) {
  if (truncation.top_k_on()) {
    const double top_k_mass = select_top_k(logits, truncation, scratch);
    const std::span<Candidate> top = scratch.candidates.items();
    if (truncation.top_p_on())
      return sample_nucleus_by_sorting(top, static_cast<double>(truncation.top_p) * top_k_mass, random);
    return top[draw_index(top, top_k_mass, random)].token;
  }
  const double total = weigh_row(logits, truncation, scratch);
  if (!truncation.top_p_on()) return draw_from_row(scratch, total, random);
  const size_t vocab = logits.size();
  const double nucleus_mass = static_cast<double>(truncation.top_p) * total;
  // Tokens lighter than (1 - top_p) * total / vocab weigh less than (1 - top_p) * total all
  // together, so those at least that heavy already reach the nucleus mass: it lies among them.
  const double lightest_needed = (1.0 - static_cast<double>(truncation.top_p)) * total / static_cast<double>(vocab);
  Candidate* room = scratch.candidates.room_for(vocab);
  scratch.candidates.resize(collect_candidates(scratch.weights.data(), static_cast<float>(lightest_needed),
                                               /*strictly_above=*/false, logits.data(), scratch.weights.data(), vocab,
                                               room));
  double kept_mass = sum_of_weights(scratch.candidates.items());
  if (kept_mass < nucleus_mass) {  // only by rounding: start from every token with weight
    scratch.candidates.resize(collect_candidates(scratch.weights.data(), 0.0f, /*strictly_above=*/true, logits.data(),
                                                 scratch.weights.data(), vocab, room));
    kept_mass = sum_of_weights(scratch.candidates.items());
  }
  narrow_to_nucleus(scratch.candidates, kept_mass, nucleus_mass);
  return sample_nucleus_by_sorting(scratch.candidates.items(), nucleus_mass, random);
}

// ---- kRejection: FlashInfer's idea, no sort.
//
// Draw from the current candidates; if the token breaks the constraint, so does every token
// at most as likely (the count and the mass of tokens above a token only grow as the token
// gets less likely), so drop them all and draw again. The candidates always contain the
// constrained set, and each draw is fresh, so the first accepted token is distributed as
// the weights restricted to that set: the same distribution kBase draws from.

template <typename Accepts>
int32_t reject_until_accepted_in_candidates(CandidateList& list, Random& random, Accepts accepts) {
  double total = sum_of_weights(list.items());
  for (;;) {
    const std::span<Candidate> candidates = list.items();
    const Candidate drawn = candidates[draw_index(candidates, total, random)];
    MassAbove above;
    for (const Candidate& candidate : candidates) {
      if (candidate.logit > drawn.logit) {
        ++above.count;
        above.mass += candidate.weight;
      }
    }
    if (accepts(above)) return drawn.token;
    const auto kept_end = std::remove_if(candidates.begin(), candidates.end(),
                                         [&drawn](const Candidate& c) { return !(c.logit > drawn.logit); });
    list.resize(static_cast<size_t>(kept_end - candidates.begin()));
    total = above.mass;
  }
}

// The first round runs on the whole weighed row; what survives it becomes a candidate list.
template <typename Accepts>
int32_t reject_until_accepted_in_row(std::span<const float> logits, double total, Scratch& scratch, Random& random,
                                     Accepts accepts) {
  const int32_t token = draw_from_row(scratch, total, random);
  const float pivot = logits[static_cast<size_t>(token)];
  if (accepts(mass_above(logits.data(), scratch.weights.data(), logits.size(), pivot))) return token;
  Candidate* room = scratch.candidates.room_for(logits.size());
  scratch.candidates.resize(collect_candidates(logits.data(), pivot, /*strictly_above=*/true, logits.data(),
                                               scratch.weights.data(), logits.size(), room));
  return reject_until_accepted_in_candidates(scratch.candidates, random, accepts);
}

int32_t draw_rejection(std::span<const float> logits, const Truncation& truncation, Scratch& scratch, Random& random) {
  if (truncation.top_k_on() && truncation.top_p_on()) {
    // FlashInfer's top_k_first: renormalise over the top-k set, then top-p inside it.
    const double nucleus_mass = static_cast<double>(truncation.top_p) * select_top_k(logits, truncation, scratch);
    return reject_until_accepted_in_candidates(
        scratch.candidates, random, [nucleus_mass](const MassAbove& above) { return above.mass < nucleus_mass; });
  }
  const double total = weigh_row(logits, truncation, scratch);
  if (truncation.top_k_on()) {
    const auto top_k = static_cast<int64_t>(truncation.top_k);
    return reject_until_accepted_in_row(logits, total, scratch, random,
                                        [top_k](const MassAbove& above) { return above.count < top_k; });
  }
  if (truncation.top_p_on()) {
    const double nucleus_mass = static_cast<double>(truncation.top_p) * total;
    return reject_until_accepted_in_row(logits, total, scratch, random,
                                        [nucleus_mass](const MassAbove& above) { return above.mass < nucleus_mass; });
  }
  return draw_from_row(scratch, total, random);
}

// ---- Logprobs of the raw row.

// The `wanted` most likely tokens of a row, most likely first (ties: lower id first).
// A few are kept in a sorted insertion list; many (a client may ask for the whole
// vocabulary) are partially sorted instead, which stays O(n log wanted).
void rank_most_likely(std::span<const float> raw, size_t wanted, std::vector<Candidate>& out) {
  constexpr size_t kInsertionListLimit = 64;
  if (wanted <= kInsertionListLimit) {
    most_likely_tokens(raw.data(), raw.size(), wanted, out);
    return;
  }
  out.clear();
  for (size_t token = 0; token < raw.size(); ++token)
    if (!std::isnan(raw[token])) out.push_back({raw[token], 0.0f, static_cast<int32_t>(token)});
  wanted = std::min(wanted, out.size());
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(wanted), out.end(), kMoreLikely);
  out.resize(wanted);
}

// FastDeploy's logprob post-processing (fastdeploy-behaviour.md §7): logprobs of
// logits / temperature, then, with top_p < 1, renormalised over the top-p nucleus (the
// most likely tokens while the mass before each is at most top_p); tokens outside it get
// the lowest float, as FastDeploy clips log(0) to.
struct LogprobTransform {
  float inverse_temperature = 1.0f;
  float top_p = 1.0f;  // 1: no renormalisation
};

// log p of every token of `raw` under the transform: logprob(t) = raw[t] * scale - offset
// for tokens in `kept`, the lowest float for the others.
class LogprobRow {
 public:
  LogprobRow(std::span<const float> raw, const LogprobTransform& transform, Scratch& scratch)
      : raw_(raw), scale_(transform.inverse_temperature) {
    const float max_logit = max_of(raw.data(), raw.size());
    scratch.weights.resize(raw.size());
    scratch.block_weights.resize((raw.size() + kBlock - 1) / kBlock);
    const double total = exponentiate(raw.data(), raw.size(), max_logit, scale_, 0.0f, scratch.weights.data(),
                                      scratch.block_weights.data());
    double kept_mass = total;
    if (transform.top_p < 1.0f) {
      // Walk the tokens from the most likely until the mass before the next one passes
      // top_p; the last one walked bounds the nucleus.
      // top_p is rarely reached after more than a few hundred tokens, so rank those
      // first and the whole row only when they fall short.
      const double limit = static_cast<double>(transform.top_p) * total;
      for (size_t window = std::min<size_t>(256, raw.size());; window = raw.size()) {
        rank_most_likely(raw, window, scratch.candidates_sorted);
        double before = 0.0;
        bool passed = false;
        for (const Candidate& candidate : scratch.candidates_sorted) {
          if (before > limit) {
            passed = true;
            break;
          }
          before += scratch.weights[static_cast<size_t>(candidate.token)];
          last_kept_ = candidate;
        }
        kept_mass = before;
        if (passed || window == raw.size()) break;
      }
      nucleus_ = true;
    }
    offset_ = static_cast<double>(max_logit) * scale_ + std::log(kept_mass);
  }

  float operator()(int32_t token) const {
    const float logit = raw_[static_cast<size_t>(token)];
    if (nucleus_ && kMoreLikely(last_kept_, Candidate{logit, 0.0f, token}))
      return std::numeric_limits<float>::lowest();
    return static_cast<float>(static_cast<double>(logit) * scale_ - offset_);
  }

 private:
  std::span<const float> raw_;
  float scale_;
  double offset_ = 0.0;
  bool nucleus_ = false;
  Candidate last_kept_{};
};

void fill_logprobs(std::span<const float> raw, const LogprobTransform& transform, Scratch& scratch, int32_t token,
                   size_t wanted, SampledToken& result) {
  const LogprobRow logprob(raw, transform, scratch);
  result.logprob = logprob(token);
  wanted = std::min(wanted, raw.size());
  if (wanted == 0) return;
  rank_most_likely(raw, wanted, scratch.ranked);
  result.top_logprobs.reserve(wanted);
  for (const Candidate& candidate : scratch.ranked) result.top_logprobs.push_back({candidate.token, logprob(candidate.token)});
}

float& logit_of(std::span<float> logits, int32_t token, const char* what) {
  if (token < 0 || static_cast<size_t>(token) >= logits.size())
    fail(what, " token id ", token, " is outside the vocabulary of the logits row [0, ", logits.size(), ")");
  return logits[static_cast<size_t>(token)];
}

}  // namespace

PromptTokenLogprob score_prompt_token(std::span<const float> logits, int32_t token, size_t top) {
  if (logits.empty()) fail("cannot score a prompt token against an empty row of logits");
  if (token < 0 || static_cast<size_t>(token) >= logits.size())
    fail("prompt token id ", token, " is outside the vocabulary of the logits row [0, ", logits.size(), ")");
  Scratch& scratch = thread_scratch();
  SampledToken scored;
  fill_logprobs(logits, LogprobTransform{}, scratch, token, top, scored);
  const float logit = logits[static_cast<size_t>(token)];
  const auto more_likely = std::count_if(logits.begin(), logits.end(), [logit](float other) { return other > logit; });
  return {token, scored.logprob, static_cast<int64_t>(more_likely) + 1, std::move(scored.top_logprobs)};
}

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) fail("argmax of an empty row of logits");
  return argmax_of(logits.data(), logits.size());
}

RequestSampler::RequestSampler(const SamplingParams& params, std::span<const int32_t> prompt,
                               std::vector<int32_t> eos_token_ids, uint64_t default_seed, SamplingClass sampling_class,
                               bool report_probability)
    : params_(params),
      eos_token_ids_(std::move(eos_token_ids)),
      sampling_class_(sampling_class),
      random_(params.seed.value_or(default_seed)),
      greedy_(params.temperature < kGreedyBelow || params.top_k == 1 || params.top_p < kGreedyBelow),
      inverse_temperature_(greedy_ ? 1.0f : 1.0f / params.temperature),
      top_k_(params.top_k > 0 ? params.top_k : 0),
      top_p_(params.top_p),
      report_probability_(report_probability) {
  seen_index_.reserve(prompt.size());
  for (int32_t token : prompt) note_seen(token);
}

size_t RequestSampler::note_seen(int32_t token) {
  if (token < 0) fail("token id ", token, " is negative; token ids lie in [0, vocabulary size)");
  const auto [entry, inserted] = seen_index_.try_emplace(token, seen_.size());
  if (inserted) seen_.push_back({token, 0});
  return entry->second;
}

void RequestSampler::accept(int32_t token) {
  ++seen_[note_seen(token)].times_generated;
  ++num_generated_;
}

SampledToken RequestSampler::sample(std::span<float> logits, const uint32_t* allowed) {
  if (logits.empty()) fail("cannot sample from an empty row of logits");
  Scratch& scratch = thread_scratch();
  if (params_.logprobs) scratch.raw_logits.assign(logits.begin(), logits.end());
  if (allowed != nullptr) apply_token_mask(logits, allowed);
  apply_logit_processors(logits);
  SampledToken result;
  if (greedy_) {
    result.token = argmax(logits);
  } else {
    const size_t vocab = logits.size();
    const Truncation truncation{
        .inverse_temperature = inverse_temperature_,
        .min_p = params_.min_p,
        .top_k = top_k_ > 0 && static_cast<size_t>(top_k_) < vocab ? static_cast<size_t>(top_k_) : 0,
        .top_p = top_p_,
    };
    result.token = sampling_class_ == SamplingClass::kBase ? draw_base(logits, truncation, scratch, random_)
                                                           : draw_rejection(logits, truncation, scratch, random_);
  }
  if (params_.logprobs) {
    LogprobTransform transform;
    if (params_.temp_scaled_logprobs) transform.inverse_temperature = 1.0f / std::max(params_.temperature, kGreedyBelow);
    if (params_.top_p_normalized_logprobs) transform.top_p = params_.top_p;
    fill_logprobs(scratch.raw_logits, transform, scratch, result.token, static_cast<size_t>(*params_.logprobs), result);
  }
  if (report_probability_) {
    // The chosen token's probability under the processed row at the request's
    // temperature, before truncation (FastDeploy's early stopper reads the same); a
    // greedy request is judged at temperature 1, where its confidence means something.
    const float scale = greedy_ ? 1.0f : inverse_temperature_;
    const float max_logit = max_of(logits.data(), logits.size());
    scratch.weights.resize(logits.size());
    scratch.block_weights.resize((logits.size() + kBlock - 1) / kBlock);
    const double total = exponentiate(logits.data(), logits.size(), max_logit, scale, 0.0f, scratch.weights.data(),
                                      scratch.block_weights.data());
    result.probability = static_cast<float>(scratch.weights[static_cast<size_t>(result.token)] / total);
  }
  return result;
}

void RequestSampler::apply_token_mask(std::span<float> logits, const uint32_t* allowed) {
  // -inf, not the banned logit: no penalty can lift a disallowed token back, and a row
  // whose only allowed token is banned (an end token before min_tokens) still has one.
  const size_t words = (logits.size() + 31) / 32;
  bool any = false;
  for (size_t w = 0; w < words; ++w) {
    const uint32_t bits = allowed[w];
    any = any || bits != 0;
    if (bits == ~0u && 32 * w + 32 <= logits.size()) continue;
    const size_t end = std::min(logits.size(), 32 * w + 32);
    for (size_t id = 32 * w; id < end; ++id)
      if (((bits >> (id & 31)) & 1u) == 0) logits[id] = -std::numeric_limits<float>::infinity();
  }
  if (!any) fail("the output constraint allows no token here");
}

void RequestSampler::apply_logit_processors(std::span<float> logits) const {
  if (num_generated_ < params_.min_tokens) {
    for (int32_t eos : eos_token_ids_) logit_of(logits, eos, "end-of-sequence") = kBannedLogit;
  }
  apply_penalties(logits);
  for (int32_t bad : params_.bad_words_token_ids) logit_of(logits, bad, "bad_words_token_ids") = kBannedLogit;
}

void RequestSampler::apply_penalties(std::span<float> logits) const {
  const float repetition = params_.repetition_penalty;
  const float frequency = params_.frequency_penalty;
  const float presence = params_.presence_penalty;
  const bool penalise_repetition = repetition != 1.0f;
  const bool penalise_output = frequency != 0.0f || presence != 0.0f;
  if (!penalise_repetition && !penalise_output) return;
  for (const SeenToken& seen : seen_) {
    float& logit = logit_of(logits, seen.token, "seen");
    // Dividing a negative logit would raise it; multiplying lowers it, as intended.
    if (penalise_repetition) logit = logit < 0.0f ? logit * repetition : logit / repetition;
    if (seen.times_generated > 0) logit = logit - static_cast<float>(seen.times_generated) * frequency - presence;
  }
}

}  // namespace ernie
