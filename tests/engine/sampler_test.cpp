#include "engine/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "engine/sampling_params.h"
#include "support/test_support.h"
#include "util/error.h"
#include "util/random.h"

namespace ernie {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr SamplingClass kBothClasses[] = {SamplingClass::kBase, SamplingClass::kRejection};
constexpr size_t kErnieVocab = 103424;

// The five-token row the hand computations below start from.
const std::vector<float> kFiveLogits = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f};

// ---------------------------------------------------------------------------------------
// Statistics. Every statistical test below uses a fixed seed, so it passes or fails the
// same way on every run; the significance says how often a correct sampler would fail it
// for a seed picked at random. Each test is run at alpha = 1e-5 (upper-tail normal
// quantile 4.2649), so the whole suite's ~30 statistical checks would falsely fail for
// about 3 seeds in 10,000. The negative controls show that the same tests do fail on a
// distribution that is off.

constexpr double kAlpha = 1e-5;
constexpr double kNormalQuantile = 4.2649;  // P(Z > 4.2649) = 1e-5

// Upper kAlpha quantile of the chi-square distribution with `df` degrees of freedom:
// exact for df = 2 (the survival function is exp(-x/2)), Wilson-Hilferty otherwise
// (within ~1% from df = 3 on).
double chi_square_critical(int df) {
  if (df == 2) return -2.0 * std::log(kAlpha);
  const double k = df;
  const double cube_root = 1.0 - 2.0 / (9.0 * k) + kNormalQuantile * std::sqrt(2.0 / (9.0 * k));
  return k * cube_root * cube_root * cube_root;
}

struct ChiSquare {
  double statistic = 0.0;
  int degrees_of_freedom = 0;
  bool rejects() const { return degrees_of_freedom > 0 && statistic > chi_square_critical(degrees_of_freedom); }
};

std::ostream& operator<<(std::ostream& out, const ChiSquare& test) {
  return out << "chi-square " << test.statistic << " with " << test.degrees_of_freedom << " df (critical "
             << chi_square_critical(test.degrees_of_freedom) << " at alpha " << kAlpha << ")";
}

// Pearson's goodness of fit of token counts to probabilities. Tokens are pooled, most
// probable first, into bins of expected count >= 10 so that the chi-square approximation
// holds. A token of probability 0 that was drawn fails the test outright.
ChiSquare goodness_of_fit(const std::vector<int64_t>& counts, const std::vector<double>& probabilities) {
  const double draws = static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  std::vector<size_t> order(probabilities.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probabilities[a] > probabilities[b]; });
  std::vector<std::pair<double, double>> bins;  // (observed, expected)
  double observed = 0.0, expected = 0.0;
  for (size_t token : order) {
    if (probabilities[token] == 0.0) {
      if (counts[token] != 0) return {std::numeric_limits<double>::infinity(), 1};
      continue;
    }
    observed += static_cast<double>(counts[token]);
    expected += probabilities[token] * draws;
    if (expected >= 10.0) {
      bins.emplace_back(observed, expected);
      observed = expected = 0.0;
    }
  }
  if (expected > 0.0) {
    if (bins.empty()) bins.emplace_back(0.0, 0.0);
    bins.back().first += observed;
    bins.back().second += expected;
  }
  ChiSquare test;
  for (const auto& [o, e] : bins) test.statistic += (o - e) * (o - e) / e;
  test.degrees_of_freedom = static_cast<int>(bins.size()) - 1;
  return test;
}

// Chi-square test of homogeneity: do two samples over the same tokens come from the same
// distribution? Tokens are pooled in the given order (most likely first) into bins holding
// at least `min_pooled` draws of both samples together.
ChiSquare homogeneity(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const std::vector<size_t>& order,
                      int64_t min_pooled) {
  const double total_a = static_cast<double>(std::accumulate(a.begin(), a.end(), int64_t{0}));
  const double total_b = static_cast<double>(std::accumulate(b.begin(), b.end(), int64_t{0}));
  std::vector<std::pair<double, double>> bins;
  double bin_a = 0.0, bin_b = 0.0;
  for (size_t token : order) {
    bin_a += static_cast<double>(a[token]);
    bin_b += static_cast<double>(b[token]);
    if (bin_a + bin_b >= static_cast<double>(min_pooled)) {
      bins.emplace_back(bin_a, bin_b);
      bin_a = bin_b = 0.0;
    }
  }
  if (bin_a + bin_b > 0.0 && !bins.empty()) {
    bins.back().first += bin_a;
    bins.back().second += bin_b;
  }
  ChiSquare test;
  for (const auto& [in_a, in_b] : bins) {
    const double pooled = in_a + in_b;
    const double expected_a = pooled * total_a / (total_a + total_b);
    const double expected_b = pooled * total_b / (total_a + total_b);
    test.statistic += (in_a - expected_a) * (in_a - expected_a) / expected_a;
    test.statistic += (in_b - expected_b) * (in_b - expected_b) / expected_b;
  }
  test.degrees_of_freedom = static_cast<int>(bins.size()) - 1;
  return test;
}

// ---------------------------------------------------------------------------------------
// The distribution a sampler should draw from, computed independently and plainly: double
// precision, a full sort, no prefilters. Ties at a top-k or top-p boundary are kept.

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> probabilities(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) total += probabilities[i] = std::exp((logits[i] - max_logit) / temperature);
  for (double& p : probabilities) p /= total;
  return probabilities;
}

std::vector<double> reference_distribution(const std::vector<float>& logits, const SamplingParams& params) {
  std::vector<double> p = softmax(logits, params.temperature);
  const double max_p = *std::max_element(p.begin(), p.end());
  std::vector<size_t> kept;  // most likely first
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] >= params.min_p * max_p) kept.push_back(i);
  }
  std::stable_sort(kept.begin(), kept.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  auto keep_down_to = [&](float boundary) {
    std::erase_if(kept, [&](size_t token) { return logits[token] < boundary; });
  };
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < kept.size())
    keep_down_to(logits[kept[static_cast<size_t>(params.top_k) - 1]]);
  if (params.top_p < 1.0f) {
    double mass = 0.0;
    for (size_t token : kept) mass += p[token];
    double cumulative = 0.0;
    for (size_t token : kept) {
      cumulative += p[token];
      if (cumulative >= params.top_p * mass) {
        keep_down_to(logits[token]);
        break;
      }
    }
  }
  std::vector<double> restricted(p.size(), 0.0);
  double total = 0.0;
  for (size_t token : kept) total += restricted[token] = p[token];
  for (double& q : restricted) q /= total;
  return restricted;
}

// ---------------------------------------------------------------------------------------
// Drawing.

RequestSampler make_sampler(const SamplingParams& params, SamplingClass sampling_class, uint64_t seed = 1,
                            std::vector<int32_t> prompt = {}, std::vector<int32_t> eos = {}) {
  return RequestSampler(params, prompt, std::move(eos), seed, sampling_class);
}

// Samples `draws` times from fresh copies of `logits` (sample() writes into its row),
// without accepting the tokens, so the state stays as it is; returns the count per token.
// `allowed`: an output constraint's token mask (one bit per token), or null.
std::vector<int64_t> draw_counts(RequestSampler& sampler, const std::vector<float>& logits, int64_t draws,
                                 const uint32_t* allowed = nullptr) {
  std::vector<int64_t> counts(logits.size(), 0);
  std::vector<float> row(logits.size());
  for (int64_t i = 0; i < draws; ++i) {
    std::copy(logits.begin(), logits.end(), row.begin());
    ++counts[static_cast<size_t>(sampler.sample(row, allowed).token)];
  }
  return counts;
}

std::vector<float> normal_logits(size_t vocab, float scale, uint64_t seed) {
  Random random(seed);
  std::vector<float> logits(vocab);
  for (float& logit : logits) logit = scale * static_cast<float>(random.normal());
  return logits;
}

std::vector<int32_t> drawn_tokens(const std::vector<int64_t>& counts) {
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > 0) tokens.push_back(static_cast<int32_t>(i));
  }
  return tokens;
}

const char* class_name(SamplingClass sampling_class) { return sampling_class_name(sampling_class); }

// ---------------------------------------------------------------------------------------
// argmax and greedy.

TEST(ArgmaxTest, ReturnsTheFirstOfEqualMaxima) {
  EXPECT_EQ(argmax(std::vector<float>{3, 7, 7}), 1);
  EXPECT_EQ(argmax(std::vector<float>{-1, -1, -1}), 0);
  std::vector<float> ties(100, 1.0f);
  ties[37] = ties[70] = 2.0f;  // in different lanes
  EXPECT_EQ(argmax(ties), 37);
}

TEST(ArgmaxTest, FindsTheMaximumAnywhereInALongRow) {
  const std::vector<float> row = normal_logits(kErnieVocab + 7, 1.0f, 3);
  for (size_t position : {size_t{0}, size_t{15}, size_t{16}, size_t{5000}, kErnieVocab - 1, kErnieVocab + 6}) {
    std::vector<float> copy = row;
    copy[position] = 100.0f;
    EXPECT_EQ(argmax(copy), static_cast<int32_t>(position));
  }
}

TEST(ArgmaxTest, SkipsNaNAndRejectsAnEmptyRow) {
  EXPECT_EQ(argmax(std::vector<float>{1.0f, std::nanf(""), 0.5f}), 0);
  EXPECT_THROW(argmax(std::vector<float>{}), Error);
}

TEST(GreedyTest, TemperatureZeroTopKOneAndTopPZeroAreArgmax) {
  SamplingParams cold, top1, nucleus0;
  cold.temperature = 0.0f;
  top1.top_k = 1;
  nucleus0.top_p = 0.0f;
  for (SamplingClass sampling_class : kBothClasses) {
    for (const SamplingParams& params : {cold, top1, nucleus0}) {
      RequestSampler sampler = make_sampler(params, sampling_class);
      const std::vector<int64_t> counts = draw_counts(sampler, kFiveLogits, 100);
      EXPECT_EQ(counts[1], 100) << class_name(sampling_class);
    }
  }
}

TEST(GreedyTest, TakesTheArgmaxAfterPenaltiesAndBans) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 2.0f;  // token 1: 2.0 -> 1.0, below token 3's 1.5
  RequestSampler penalised = make_sampler(params, SamplingClass::kBase, 1, /*prompt=*/{1});
  std::vector<float> row = kFiveLogits;
  EXPECT_EQ(penalised.sample(row).token, 3);

  params.repetition_penalty = 1.0f;
  params.bad_words_token_ids = {1, 3};
  RequestSampler banned = make_sampler(params, SamplingClass::kRejection);
  row = kFiveLogits;
  EXPECT_EQ(banned.sample(row).token, 0);
}

// ---------------------------------------------------------------------------------------
// Seeds.

std::vector<int32_t> generate(RequestSampler& sampler, const std::vector<float>& logits, int count) {
  std::vector<int32_t> tokens;
  std::vector<float> row(logits.size());
  for (int i = 0; i < count; ++i) {
    std::copy(logits.begin(), logits.end(), row.begin());
    tokens.push_back(sampler.sample(row).token);
    sampler.accept(tokens.back());
  }
  return tokens;
}

TEST(SeedTest, TheSameSeedGivesTheSameDrawsAndOthersDiffer) {
  const std::vector<float> logits = normal_logits(1000, 2.0f, 5);
  SamplingParams params;
  params.top_p = 0.95f;
  params.frequency_penalty = 0.1f;
  for (SamplingClass sampling_class : kBothClasses) {
    params.seed = 42;
    RequestSampler a = make_sampler(params, sampling_class), b = make_sampler(params, sampling_class);
    params.seed = 43;
    RequestSampler c = make_sampler(params, sampling_class);
    const std::vector<int32_t> from_a = generate(a, logits, 200);
    EXPECT_EQ(from_a, generate(b, logits, 200)) << class_name(sampling_class);
    EXPECT_NE(from_a, generate(c, logits, 200)) << class_name(sampling_class);
  }
}

TEST(SeedTest, ParamsSeedOverridesTheDefaultSeed) {
  const std::vector<float> logits = normal_logits(1000, 2.0f, 6);
  SamplingParams unseeded;
  SamplingParams seeded;
  seeded.seed = 7;
  RequestSampler by_default = make_sampler(unseeded, SamplingClass::kBase, /*seed=*/7);
  RequestSampler by_params = make_sampler(seeded, SamplingClass::kBase, /*seed=*/1234);
  RequestSampler other_default = make_sampler(unseeded, SamplingClass::kBase, /*seed=*/8);
  const std::vector<int32_t> expected = generate(by_default, logits, 100);
  EXPECT_EQ(generate(by_params, logits, 100), expected);
  EXPECT_NE(generate(other_default, logits, 100), expected);
}

TEST(SeedTest, OtherRequestsInTheBatchDoNotChangeARequestsDraws) {
  const std::vector<float> logits = normal_logits(1000, 2.0f, 7);
  SamplingParams params;
  params.seed = 99;
  RequestSampler alone = make_sampler(params, SamplingClass::kRejection);
  const std::vector<int32_t> expected = generate(alone, logits, 50);

  RequestSampler mine = make_sampler(params, SamplingClass::kRejection);
  SamplingParams other_params;
  other_params.top_k = 20;
  RequestSampler other = make_sampler(other_params, SamplingClass::kRejection, 5);
  std::vector<int32_t> interleaved;
  std::vector<float> row(logits.size());
  for (int i = 0; i < 50; ++i) {
    for (int j = 0; j < i % 3; ++j) generate(other, logits, 1);
    std::copy(logits.begin(), logits.end(), row.begin());
    interleaved.push_back(mine.sample(row).token);
    mine.accept(interleaved.back());
  }
  EXPECT_EQ(interleaved, expected);
}

// ---------------------------------------------------------------------------------------
// Penalties, each against logits worked out by hand. sample() leaves the processed
// logits in its row (documented in sampler.h), which makes them checkable exactly; the
// draws are then checked against the softmax of the hand-computed logits.

struct PenaltyCase {
  SamplingParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  std::vector<float> expected_logits;
};

void check_penalties(const PenaltyCase& c) {
  for (SamplingClass sampling_class : kBothClasses) {
    SCOPED_TRACE(class_name(sampling_class));
    RequestSampler sampler = make_sampler(c.params, sampling_class, 11, c.prompt);
    for (int32_t token : c.generated) sampler.accept(token);
    EXPECT_EQ(sampler.num_generated(), static_cast<int>(c.generated.size()));
    std::vector<float> row = kFiveLogits;
    sampler.sample(row);
    for (size_t i = 0; i < row.size(); ++i) EXPECT_NEAR(row[i], c.expected_logits[i], 1e-6) << "token " << i;
    const ChiSquare fit = goodness_of_fit(draw_counts(sampler, kFiveLogits, 20000),
                                          softmax(c.expected_logits, c.params.temperature));
    EXPECT_FALSE(fit.rejects()) << fit;
  }
}

TEST(PenaltyTest, RepetitionDividesPositiveAndMultipliesNegativeLogitsOfPromptAndOutput) {
  PenaltyCase c;
  c.params.repetition_penalty = 2.0f;
  c.prompt = {2, 3, 3};  // 3 twice: still penalised once
  c.generated = {1};
  //                  0.5   2.0/2  -1.0*2  1.5/2  0.0
  c.expected_logits = {0.5f, 1.0f, -2.0f, 0.75f, 0.0f};
  check_penalties(c);
}

TEST(PenaltyTest, FrequencyScalesWithHowOftenATokenWasGenerated) {
  PenaltyCase c;
  c.params.frequency_penalty = 0.5f;
  c.prompt = {1};  // prompt tokens are not counted
  c.generated = {3, 3, 3, 0};
  //                  0.5-0.5 2.0  -1.0  1.5-3*0.5  0.0
  c.expected_logits = {0.0f, 2.0f, -1.0f, 0.0f, 0.0f};
  check_penalties(c);
}

TEST(PenaltyTest, PresenceIsSubtractedOncePerGeneratedToken) {
  PenaltyCase c;
  c.params.presence_penalty = 1.0f;
  c.params.temperature = 0.5f;
  c.prompt = {4};
  c.generated = {1, 1, 1, 1, 2};
  //                  0.5   2.0-1  -1.0-1  1.5   0.0
  c.expected_logits = {0.5f, 1.0f, -2.0f, 1.5f, 0.0f};
  check_penalties(c);
}

TEST(PenaltyTest, AllThreeCombineAsFastDeployOrdersThem) {
  PenaltyCase c;
  c.params.repetition_penalty = 1.5f;
  c.params.frequency_penalty = 0.3f;
  c.params.presence_penalty = 0.2f;
  c.params.temperature = 0.8f;
  c.prompt = {2, 3};
  c.generated = {1, 1, 4};
  // token 1: 2.0 / 1.5 - 2 * 0.3 - 0.2 = 0.53333;  token 2: -1.0 * 1.5;  token 3: 1.5 / 1.5;
  // token 4: 0.0 / 1.5 - 0.3 - 0.2 = -0.5
  c.expected_logits = {0.5f, 2.0f / 1.5f - 0.8f, -1.5f, 1.0f, -0.5f};
  check_penalties(c);
}

TEST(PenaltyTest, NegativePenaltiesEncourageRepeats) {
  PenaltyCase c;
  c.params.frequency_penalty = -1.0f;
  c.params.presence_penalty = -0.5f;
  c.generated = {2, 2};
  c.expected_logits = {0.5f, 2.0f, -1.0f + 2.0f + 0.5f, 1.5f, 0.0f};
  check_penalties(c);
}

// ---------------------------------------------------------------------------------------
// min_tokens and bad words.

TEST(MinTokensTest, EndTokensAreBannedUntilMinTokensWereGenerated) {
  const std::vector<float> logits = {0.0f, 1.0f, 9.0f, 0.5f, 10.0f};  // 2 and 4 are the end tokens
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.min_tokens = 3;
  RequestSampler sampler = make_sampler(greedy, SamplingClass::kBase, 1, {}, /*eos=*/{4, 2});
  std::vector<int32_t> tokens;
  for (int i = 0; i < 4; ++i) {
    std::vector<float> row = logits;
    tokens.push_back(sampler.sample(row).token);
    sampler.accept(tokens.back());
  }
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 1, 1, 4}));

  SamplingParams sampled;
  sampled.min_tokens = 2;
  for (SamplingClass sampling_class : kBothClasses) {
    RequestSampler s = make_sampler(sampled, sampling_class, 3, {}, {4, 2});
    std::vector<int64_t> counts = draw_counts(s, logits, 2000);
    EXPECT_EQ(counts[2] + counts[4], 0) << class_name(sampling_class);
    s.accept(0);
    counts = draw_counts(s, logits, 2000);
    EXPECT_EQ(counts[2] + counts[4], 0) << "one generated, two required";
    s.accept(0);
    counts = draw_counts(s, logits, 2000);
    EXPECT_GT(counts[2] + counts[4], 1900) << "end tokens allowed once two were generated";
  }
}

TEST(BadWordsTest, BannedTokensAreNeverDrawn) {
  const std::vector<float> logits = {5.0f, 4.0f, 3.0f, 0.0f, 0.0f};
  SamplingParams params;
  params.bad_words_token_ids = {0, 2};
  params.temperature = 2.0f;
  for (SamplingClass sampling_class : kBothClasses) {
    for (float top_p : {1.0f, 0.999f}) {
      params.top_p = top_p;
      RequestSampler sampler = make_sampler(params, sampling_class);
      const std::vector<int64_t> counts = draw_counts(sampler, logits, 5000);
      EXPECT_EQ(counts[0] + counts[2], 0) << class_name(sampling_class);
      EXPECT_THAT(drawn_tokens(counts), ::testing::ElementsAre(1, 3, 4));
    }
  }
}

// ---------------------------------------------------------------------------------------
// Truncation: which tokens stay candidates, on rows whose probabilities are easy to read.

// Logits whose softmax at temperature 1 is `probabilities`.
std::vector<float> logits_for(const std::vector<double>& probabilities) {
  std::vector<float> logits;
  for (double p : probabilities) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

void expect_candidates(const SamplingParams& params, const std::vector<float>& logits,
                       const std::vector<int32_t>& expected_tokens) {
  for (SamplingClass sampling_class : kBothClasses) {
    SCOPED_TRACE(class_name(sampling_class));
    RequestSampler sampler = make_sampler(params, sampling_class, 21);
    const std::vector<int64_t> counts = draw_counts(sampler, logits, 20000);
    EXPECT_EQ(drawn_tokens(counts), expected_tokens);
    const std::vector<double> expected = reference_distribution(logits, params);
    for (size_t i = 0; i < expected.size(); ++i) {
      const bool in_expected_set =
          std::find(expected_tokens.begin(), expected_tokens.end(), static_cast<int32_t>(i)) != expected_tokens.end();
      EXPECT_EQ(expected[i] > 0.0, in_expected_set) << "the reference disagrees on token " << i;
    }
    const ChiSquare fit = goodness_of_fit(counts, expected);
    EXPECT_FALSE(fit.rejects()) << fit;
  }
}

const std::vector<float> kReadableLogits = logits_for({0.05, 0.5, 0.03, 0.25, 0.15, 0.02});

TEST(TruncationTest, MinPKeepsTokensWithAtLeastThatFractionOfTheTopProbability) {
  SamplingParams params;
  params.min_p = 0.2f;  // keeps p >= 0.1: 0.5, 0.25, 0.15
  expect_candidates(params, kReadableLogits, {1, 3, 4});
}

TEST(TruncationTest, TopKKeepsTheKMostLikely) {
  SamplingParams params;
  params.top_k = 2;
  expect_candidates(params, kReadableLogits, {1, 3});
  params.top_k = 100;  // more than the vocabulary: no limit
  expect_candidates(params, kReadableLogits, {0, 1, 2, 3, 4, 5});
}

TEST(TruncationTest, TopKKeepsTokensTiedWithTheKth) {
  SamplingParams params;
  params.top_k = 2;
  expect_candidates(params, {1.0f, 2.0f, 1.0f, 0.0f, 1.0f}, {0, 1, 2, 4});
}

TEST(TruncationTest, TopPKeepsTheStrictNucleus) {
  SamplingParams params;
  params.top_p = 0.7f;  // 0.5 + 0.25 reaches 0.7
  expect_candidates(params, kReadableLogits, {1, 3});
  params.top_p = 0.8f;  // 0.75 does not; + 0.15 does
  expect_candidates(params, kReadableLogits, {1, 3, 4});
  params.top_p = 0.4f;  // the top token alone
  expect_candidates(params, kReadableLogits, {1});
}

TEST(TruncationTest, TopPKeepsTokensTiedWithTheLastOneNeeded) {
  SamplingParams params;
  params.top_p = 0.5f;  // p = [.4 .2 .2 .2]: the first two reach 0.5; token 3 ties with token 1
  expect_candidates(params, logits_for({0.4, 0.2, 0.2, 0.2}), {0, 1, 2, 3});
}

TEST(TruncationTest, TopPAppliesToTheRenormalisedTopKSet) {
  SamplingParams params;
  params.top_k = 3;    // 0.5, 0.25, 0.15, renormalised to .556, .278, .167
  params.top_p = 0.8f;  // .556 + .278 = .833 reaches 0.8; of the whole row (.75) it would not
  expect_candidates(params, kReadableLogits, {1, 3});
}

// ---------------------------------------------------------------------------------------
// The whole distribution, against the independent reference.

struct DistributionCase {
  const char* name;
  SamplingParams params;
};

std::vector<DistributionCase> distribution_cases() {
  std::vector<DistributionCase> cases;
  auto add = [&](const char* name, float temperature, int top_k, float top_p, float min_p) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = top_k;
    params.top_p = top_p;
    params.min_p = min_p;
    cases.push_back({name, params});
  };
  add("temperature 0.7", 0.7f, 0, 1.0f, 0.0f);
  add("temperature 1.6", 1.6f, 0, 1.0f, 0.0f);
  add("top_k 5", 1.0f, 5, 1.0f, 0.0f);
  add("top_p 0.6", 1.0f, 0, 0.6f, 0.0f);
  add("top_k 10 + top_p 0.7", 0.9f, 10, 0.7f, 0.0f);
  add("min_p 0.05 at temperature 1.3", 1.3f, 0, 1.0f, 0.05f);
  add("everything", 0.9f, 12, 0.8f, 0.02f);
  return cases;
}

TEST(DistributionTest, BothClassesMatchTheReferenceOnSmallRows) {
  const std::vector<float> smooth = normal_logits(40, 1.5f, 31);
  std::vector<float> tied = normal_logits(40, 2.0f, 32);  // in steps of 0.5: many ties at the boundaries
  for (float& logit : tied) logit = std::round(logit * 2.0f) / 2.0f;
  for (const std::vector<float>* row : {&smooth, static_cast<const std::vector<float>*>(&tied)}) {
    for (const DistributionCase& c : distribution_cases()) {
      for (SamplingClass sampling_class : kBothClasses) {
        SCOPED_TRACE(std::string(c.name) + ", " + class_name(sampling_class) + (row == &tied ? ", tied row" : ""));
        RequestSampler sampler = make_sampler(c.params, sampling_class, 41);
        const ChiSquare fit = goodness_of_fit(draw_counts(sampler, *row, 20000), reference_distribution(*row, c.params));
        EXPECT_FALSE(fit.rejects()) << fit;
      }
    }
  }
}

TEST(DistributionTest, TheGoodnessOfFitTestRejectsAWrongDistribution) {
  // Negative controls: the same test, against a distribution that is slightly off.
  const std::vector<float> row = normal_logits(40, 1.5f, 31);
  SamplingParams params;
  params.temperature = 0.7f;
  RequestSampler sampler = make_sampler(params, SamplingClass::kBase, 41);
  const std::vector<int64_t> counts = draw_counts(sampler, row, 20000);
  SamplingParams warmer = params;
  warmer.temperature = 0.8f;
  EXPECT_TRUE(goodness_of_fit(counts, reference_distribution(row, warmer)).rejects());
  SamplingParams truncated = params;
  truncated.top_p = 0.95f;
  EXPECT_TRUE(goodness_of_fit(counts, reference_distribution(row, truncated)).rejects());
}

// A realistic row: ERNIE's vocabulary, random normal logits times 3 (the top token has
// 4.6%, the 0.9 nucleus 4,314 tokens, the top 50 tokens 35% of the mass).
const std::vector<float>& realistic_row() {
  static const std::vector<float> row = normal_logits(kErnieVocab, 3.0f, 2024);
  return row;
}

std::vector<size_t> most_likely_first(const std::vector<float>& logits) {
  std::vector<size_t> order(logits.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  return order;
}

SamplingParams top_k_top_p(int k, float p) {
  SamplingParams params;
  params.top_k = k;
  params.top_p = p;
  return params;
}

TEST(DistributionTest, BaseAndRejectionDrawTheSameDistributionOnARealisticRow) {
  // Two-sample chi-square test of homogeneity: each class draws N tokens from the same row;
  // tokens are pooled, most likely first, into bins of >= 100 draws of both together; under
  // the hypothesis that both draw the same distribution the statistic is chi-square with
  // bins - 1 df. At alpha = 1e-5 a correct pair fails it for 1 seed pair in 100,000.
  const std::vector<float>& row = realistic_row();
  const std::vector<size_t> order = most_likely_first(row);
  struct Case {
    const char* name;
    SamplingParams params;
    int64_t draws;
  };
  for (const Case& c : {Case{"top_k 50 + top_p 0.9", top_k_top_p(50, 0.9f), 20000},
                        Case{"top_p 0.9", top_k_top_p(0, 0.9f), 5000}}) {
    SCOPED_TRACE(c.name);
    RequestSampler base = make_sampler(c.params, SamplingClass::kBase, 51);
    RequestSampler rejection = make_sampler(c.params, SamplingClass::kRejection, 52);
    const std::vector<int64_t> from_base = draw_counts(base, row, c.draws);
    const std::vector<int64_t> from_rejection = draw_counts(rejection, row, c.draws);
    const ChiSquare test = homogeneity(from_base, from_rejection, order, 100);
    EXPECT_GT(test.degrees_of_freedom, 20);
    EXPECT_FALSE(test.rejects()) << test;

    // Negative control: against rejection sampling at a nucleus 0.05 smaller, it must fail.
    SamplingParams narrower = c.params;
    narrower.top_p -= 0.05f;
    RequestSampler other = make_sampler(narrower, SamplingClass::kRejection, 53);
    EXPECT_TRUE(homogeneity(from_base, draw_counts(other, row, c.draws), order, 100).rejects());
  }
}

TEST(DistributionTest, BothClassesMatchTheReferenceOnARealisticRow) {
  const std::vector<float>& row = realistic_row();
  struct Case {
    const char* name;
    SamplingParams params;
    int64_t draws;
  };
  SamplingParams warm;
  warm.temperature = 0.5f;
  SamplingParams min_p = top_k_top_p(0, 1.0f);
  min_p.min_p = 0.1f;
  for (const Case& c : {Case{"top_k 50 + top_p 0.9", top_k_top_p(50, 0.9f), 10000},
                        Case{"top_k 50", top_k_top_p(50, 1.0f), 10000}, Case{"top_p 0.9", top_k_top_p(0, 0.9f), 5000},
                        Case{"temperature 0.5", warm, 10000}, Case{"min_p 0.1", min_p, 10000}}) {
    const std::vector<double> expected = reference_distribution(row, c.params);
    for (SamplingClass sampling_class : kBothClasses) {
      SCOPED_TRACE(std::string(c.name) + ", " + class_name(sampling_class));
      RequestSampler sampler = make_sampler(c.params, sampling_class, 61);
      const ChiSquare fit = goodness_of_fit(draw_counts(sampler, row, c.draws), expected);
      EXPECT_FALSE(fit.rejects()) << fit;
    }
  }
  // Negative control: top-p over the whole row instead of the renormalised top-k set keeps
  // all 50 tokens (they hold 35% of the mass); the test must tell the difference.
  RequestSampler sampler = make_sampler(top_k_top_p(50, 0.9f), SamplingClass::kRejection, 62);
  EXPECT_TRUE(goodness_of_fit(draw_counts(sampler, row, 10000), reference_distribution(row, top_k_top_p(50, 1.0f)))
                  .rejects());
}

// ---------------------------------------------------------------------------------------
// Output constraints: a token mask keeps only the allowed tokens.

std::vector<double> log_softmax(const std::vector<float>& logits);  // below, with the logprobs tests

// Every third of the 300 most likely tokens and every 97th token overall.
std::vector<uint32_t> sparse_mask(const std::vector<float>& row) {
  std::vector<uint32_t> mask((row.size() + 31) / 32, 0u);
  const auto allow = [&](size_t id) { mask[id / 32] |= 1u << (id % 32); };
  const std::vector<size_t> order = most_likely_first(row);
  for (size_t rank = 0; rank < 300; rank += 3) allow(order[rank]);
  for (size_t id = 0; id < row.size(); id += 97) allow(id);
  return mask;
}

bool mask_allows(const std::vector<uint32_t>& mask, size_t id) { return (mask[id / 32] >> (id % 32)) & 1u; }

TEST(TokenMaskTest, DrawsAreTheUnmaskedDistributionRenormalisedOverTheAllowedTokens) {
  const std::vector<float>& row = realistic_row();
  const std::vector<uint32_t> mask = sparse_mask(row);
  // Without truncation: p(t | allowed) = p(t) / P(allowed), from the unmasked softmax.
  SamplingParams plain;
  const std::vector<double> unmasked = softmax(row, plain.temperature);
  std::vector<double> expected(row.size(), 0.0);
  double allowed_mass = 0.0;
  for (size_t id = 0; id < row.size(); ++id)
    if (mask_allows(mask, id)) allowed_mass += unmasked[id];
  for (size_t id = 0; id < row.size(); ++id)
    if (mask_allows(mask, id)) expected[id] = unmasked[id] / allowed_mass;
  // With truncation, top_k and top_p apply to what the mask leaves, as with FastDeploy's
  // bitmask applied to the logits before the sampler.
  std::vector<float> masked_row = row;
  for (size_t id = 0; id < row.size(); ++id)
    if (!mask_allows(mask, id)) masked_row[id] = -std::numeric_limits<float>::infinity();
  for (SamplingClass sampling_class : kBothClasses) {
    SCOPED_TRACE(class_name(sampling_class));
    RequestSampler sampler = make_sampler(plain, sampling_class, 71);
    const ChiSquare fit = goodness_of_fit(draw_counts(sampler, row, 10000, mask.data()), expected);
    EXPECT_FALSE(fit.rejects()) << fit;
    RequestSampler truncated = make_sampler(top_k_top_p(20, 0.8f), sampling_class, 72);
    const ChiSquare truncated_fit = goodness_of_fit(draw_counts(truncated, row, 10000, mask.data()),
                                                    reference_distribution(masked_row, top_k_top_p(20, 0.8f)));
    EXPECT_FALSE(truncated_fit.rejects()) << truncated_fit;
  }
  // Negative control: the unmasked distribution is told apart.
  RequestSampler sampler = make_sampler(plain, SamplingClass::kBase, 73);
  EXPECT_TRUE(goodness_of_fit(draw_counts(sampler, row, 10000, mask.data()), unmasked).rejects());
}

TEST(DistributionTest, DrawsFromARealisticRowStayInsideTheKeptSet) {
  // The statistical tests on the realistic row need tens of thousands of draws of 103424
  // tokens; the sanitizer run (scripts/sanitize.sh) leaves them out for time and runs this
  // one, which takes the same full-vocabulary paths (both classes, with and without a
  // token mask) a few hundred times and checks that every token drawn may be drawn.
  const std::vector<float>& row = realistic_row();
  const std::vector<uint32_t> mask = sparse_mask(row);
  SamplingParams min_p = top_k_top_p(0, 1.0f);
  min_p.min_p = 0.1f;
  for (const SamplingParams& params : {top_k_top_p(50, 0.9f), top_k_top_p(0, 0.9f), min_p}) {
    const std::vector<double> expected = reference_distribution(row, params);
    for (SamplingClass sampling_class : kBothClasses) {
      SCOPED_TRACE(class_name(sampling_class));
      RequestSampler sampler = make_sampler(params, sampling_class, 81);
      const std::vector<int64_t> counts = draw_counts(sampler, row, 300);
      const std::vector<int64_t> masked = draw_counts(sampler, row, 300, mask.data());
      for (size_t id = 0; id < row.size(); ++id) {
        if (counts[id] > 0) {
          EXPECT_GT(expected[id], 0.0) << "token " << id << " is outside the kept set";
        }
        if (masked[id] > 0) {
          EXPECT_TRUE(mask_allows(mask, id)) << "token " << id << " is masked";
        }
      }
    }
  }
}

TEST(TokenMaskTest, GreedyTakesTheBestAllowedTokenAndLogprobsStayRaw) {
  const std::vector<float>& row = realistic_row();
  const std::vector<uint32_t> mask = sparse_mask(row);
  size_t best = row.size();
  for (size_t id = 0; id < row.size(); ++id)
    if (mask_allows(mask, id) && (best == row.size() || row[id] > row[best])) best = id;
  SamplingParams params;
  params.temperature = 0.0f;
  params.logprobs = 1;
  for (SamplingClass sampling_class : kBothClasses) {
    RequestSampler sampler = make_sampler(params, sampling_class);
    std::vector<float> copy = row;
    const SampledToken sampled = sampler.sample(copy, mask.data());
    EXPECT_EQ(sampled.token, static_cast<int32_t>(best));
    // The raw row's log-softmax: the constraint changes the draw, not what the model said.
    EXPECT_NEAR(sampled.logprob, log_softmax(row)[best], 1e-4);
    EXPECT_EQ(sampled.top_logprobs.at(0).token, static_cast<int32_t>(most_likely_first(row)[0]));
  }
  // Only an end token allowed, and min_tokens banning it: the constraint wins.
  params.min_tokens = 5;
  RequestSampler banned = make_sampler(params, SamplingClass::kBase, 1, {}, {7});
  std::vector<uint32_t> only_end(mask.size(), 0u);
  only_end[0] = 1u << 7;
  std::vector<float> copy = row;
  EXPECT_EQ(banned.sample(copy, only_end.data()).token, 7);
  std::vector<uint32_t> nothing(mask.size(), 0u);
  copy = row;
  EXPECT_THAT(testing::error_message([&] { banned.sample(copy, nothing.data()); }), HasSubstr("allows no token"));
}

// ---------------------------------------------------------------------------------------
// Logprobs: log_softmax of the raw row, computed here independently in double.

std::vector<double> log_softmax(const std::vector<float>& logits) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (float logit : logits) total += std::exp(logit - max_logit);
  std::vector<double> result;
  for (float logit : logits) result.push_back(logit - max_logit - std::log(total));
  return result;
}

TEST(LogprobsTest, AreTheLogSoftmaxOfTheRawLogitsMostLikelyFirst) {
  const std::vector<float> logits = normal_logits(kErnieVocab, 3.0f, 71);
  const std::vector<double> expected = log_softmax(logits);
  const std::vector<size_t> order = most_likely_first(logits);
  SamplingParams params;
  params.logprobs = 5;
  params.temperature = 0.7f;          // neither these
  params.repetition_penalty = 1.8f;   // nor the penalties
  params.top_k = 3;                   // change the reported logprobs
  const std::vector<int32_t> prompt = {static_cast<int32_t>(order[0]), static_cast<int32_t>(order[1])};
  for (SamplingClass sampling_class : kBothClasses) {
    RequestSampler sampler = make_sampler(params, sampling_class, 3, prompt);
    for (int step = 0; step < 5; ++step) {
      std::vector<float> row = logits;
      const SampledToken sampled = sampler.sample(row);
      EXPECT_NEAR(sampled.logprob, expected[static_cast<size_t>(sampled.token)], 1e-4);
      ASSERT_EQ(sampled.top_logprobs.size(), 5u);
      for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(sampled.top_logprobs[i].token, static_cast<int32_t>(order[i]));
        EXPECT_NEAR(sampled.top_logprobs[i].logprob, expected[order[i]], 1e-4);
      }
      sampler.accept(sampled.token);
    }
  }
}

TEST(LogprobsTest, GiveTheRequestedCountAlsoWhenGreedy) {
  const std::vector<float> logits = normal_logits(300, 1.0f, 72);
  const std::vector<double> expected = log_softmax(logits);
  SamplingParams params;
  params.temperature = 0.0f;
  for (int wanted : {0, 1, 20}) {
    params.logprobs = wanted;
    RequestSampler sampler = make_sampler(params, SamplingClass::kBase);
    std::vector<float> row = logits;
    const SampledToken sampled = sampler.sample(row);
    EXPECT_EQ(sampled.token, argmax(logits));
    EXPECT_NEAR(sampled.logprob, expected[static_cast<size_t>(sampled.token)], 1e-4);
    EXPECT_EQ(sampled.top_logprobs.size(), static_cast<size_t>(wanted));
    for (size_t i = 1; i < sampled.top_logprobs.size(); ++i)
      EXPECT_GE(sampled.top_logprobs[i - 1].logprob, sampled.top_logprobs[i].logprob);
  }
}

// FastDeploy's post-processing, written here from its description: temp_scaled_logprobs
// is log_softmax(raw / T); top_p_normalized_logprobs keeps the most likely tokens while
// the mass before each is at most top_p, renormalises over them, and clips the rest to
// the lowest float.
std::vector<double> fastdeploy_logprobs(const std::vector<float>& raw, double temperature, double top_p) {
  std::vector<float> scaled;
  for (float logit : raw) scaled.push_back(static_cast<float>(logit / temperature));
  std::vector<double> logprobs = log_softmax(scaled);
  if (top_p >= 1.0) return logprobs;
  const std::vector<size_t> order = most_likely_first(raw);
  double before = 0.0;
  size_t kept = 0;
  while (kept < order.size() && before <= top_p) before += std::exp(logprobs[order[kept++]]);
  std::vector<double> result(raw.size(), std::numeric_limits<float>::lowest());
  for (size_t i = 0; i < kept; ++i) result[order[i]] = logprobs[order[i]] - std::log(before);
  return result;
}

TEST(LogprobsTest, TemperatureScaledAndTopPNormalisedAsFastDeployDefinesThem) {
  const std::vector<float> logits = normal_logits(kErnieVocab, 4.0f, 73);  // peaked: small nuclei
  const std::vector<size_t> order = most_likely_first(logits);
  for (const auto& [temperature, top_p, scaled, normalised] :
       std::vector<std::tuple<float, float, bool, bool>>{{0.5f, 1.0f, true, false},
                                                         {0.7f, 0.6f, true, true},
                                                         {1.0f, 0.3f, false, true},
                                                         {0.8f, 0.9f, false, false}}) {
    SCOPED_TRACE(::testing::Message() << "T " << temperature << " top_p " << top_p);
    SamplingParams params;
    params.temperature = temperature;
    params.top_p = top_p;
    params.logprobs = 40;  // more than the nucleus holds at top_p 0.3, so some are clipped
    params.temp_scaled_logprobs = scaled;
    params.top_p_normalized_logprobs = normalised;
    const std::vector<double> expected =
        fastdeploy_logprobs(logits, scaled ? temperature : 1.0, normalised ? top_p : 1.0);
    for (SamplingClass sampling_class : kBothClasses) {
      RequestSampler sampler = make_sampler(params, sampling_class, 5);
      std::vector<float> row = logits;
      const SampledToken sampled = sampler.sample(row);
      EXPECT_NEAR(sampled.logprob, expected[static_cast<size_t>(sampled.token)], 1e-4);
      ASSERT_EQ(sampled.top_logprobs.size(), 40u);
      size_t clipped = 0;
      for (size_t i = 0; i < 40; ++i) {
        EXPECT_EQ(sampled.top_logprobs[i].token, static_cast<int32_t>(order[i]));
        if (expected[order[i]] == std::numeric_limits<float>::lowest()) {
          EXPECT_EQ(sampled.top_logprobs[i].logprob, std::numeric_limits<float>::lowest());
          ++clipped;
        } else {
          EXPECT_NEAR(sampled.top_logprobs[i].logprob, expected[order[i]], 1e-4);
        }
      }
      if (normalised && top_p < 0.5f) {
        EXPECT_GT(clipped, 0u) << "the nucleus should be smaller than 40 tokens";
      }
    }
  }
}

TEST(LogprobsTest, PromptTokensAreScoredWithTheirRank) {
  const std::vector<float> logits = normal_logits(5000, 2.0f, 74);
  const std::vector<double> expected = log_softmax(logits);
  const std::vector<size_t> order = most_likely_first(logits);
  for (const size_t rank : {size_t{1}, size_t{2}, size_t{17}, size_t{4999}}) {
    const auto token = static_cast<int32_t>(order[rank - 1]);
    const PromptTokenLogprob scored = score_prompt_token(logits, token, 3);
    EXPECT_EQ(scored.token, token);
    EXPECT_EQ(scored.rank, static_cast<int64_t>(rank));
    EXPECT_NEAR(scored.logprob, expected[static_cast<size_t>(token)], 1e-4);
    ASSERT_EQ(scored.top.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(scored.top[i].token, static_cast<int32_t>(order[i]));
  }
  // The whole vocabulary, ranked, when asked for it.
  const PromptTokenLogprob all = score_prompt_token(logits, 0, logits.size());
  ASSERT_EQ(all.top.size(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i) ASSERT_EQ(all.top[i].token, static_cast<int32_t>(order[i]));
  // Tied tokens share the better rank.
  const std::vector<float> tied = {1.0f, 3.0f, 3.0f, 0.0f};
  EXPECT_EQ(score_prompt_token(tied, 2, 0).rank, 1);
  EXPECT_EQ(score_prompt_token(tied, 0, 0).rank, 3);
  EXPECT_THROW(score_prompt_token(tied, 4, 0), Error);
}

TEST(LogprobsTest, OrderTiesByTokenIdAndStopAtTheVocabulary) {
  SamplingParams params;
  params.logprobs = 20;
  RequestSampler sampler = make_sampler(params, SamplingClass::kRejection);
  std::vector<float> row = {1.0f, 3.0f, 1.0f, 3.0f};
  const SampledToken sampled = sampler.sample(row);
  ASSERT_EQ(sampled.top_logprobs.size(), 4u);
  const std::vector<int32_t> tokens = {sampled.top_logprobs[0].token, sampled.top_logprobs[1].token,
                                       sampled.top_logprobs[2].token, sampled.top_logprobs[3].token};
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 3, 0, 2}));
  const double top = std::log(std::exp(2.0) / (2.0 * std::exp(2.0) + 2.0));
  EXPECT_NEAR(sampled.top_logprobs[0].logprob, top, 1e-5);
}

TEST(LogprobsTest, AreLeftEmptyWhenNotRequested) {
  RequestSampler sampler = make_sampler(SamplingParams{}, SamplingClass::kBase);
  std::vector<float> row = kFiveLogits;
  const SampledToken sampled = sampler.sample(row);
  EXPECT_EQ(sampled.logprob, 0.0f);
  EXPECT_TRUE(sampled.top_logprobs.empty());
}

// ---------------------------------------------------------------------------------------
// Rows the sampler cannot use.

TEST(SamplerErrorsTest, RejectsRowsAndTokensItCannotUse) {
  for (SamplingClass sampling_class : kBothClasses) {
    RequestSampler sampler = make_sampler(SamplingParams{}, sampling_class);
    std::vector<float> empty;
    EXPECT_THROW(sampler.sample(empty), Error);
    std::vector<float> infinite = {1.0f, std::numeric_limits<float>::infinity()};
    EXPECT_THROW(sampler.sample(infinite), Error);
    std::vector<float> all_nan = {std::nanf(""), std::nanf("")};
    EXPECT_THROW(sampler.sample(all_nan), Error);
  }
  // NaN logits are skipped, as argmax skips them: never drawn, whatever the path.
  const std::vector<float> with_nan = {1.0f, std::nanf(""), 0.0f, 0.5f};
  for (const SamplingParams& params : {SamplingParams{}, top_k_top_p(2, 1.0f), top_k_top_p(0, 0.9f)}) {
    for (SamplingClass sampling_class : kBothClasses) {
      RequestSampler sampler = make_sampler(params, sampling_class);
      EXPECT_EQ(draw_counts(sampler, with_nan, 2000)[1], 0) << class_name(sampling_class);
    }
  }
  RequestSampler with_big_prompt_token = [] {
    SamplingParams params;
    params.repetition_penalty = 1.2f;
    return make_sampler(params, SamplingClass::kBase, 1, /*prompt=*/{10});
  }();
  std::vector<float> row = kFiveLogits;
  try {
    with_big_prompt_token.sample(row);
    ADD_FAILURE() << "a prompt token outside the row was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("10"), HasSubstr("[0, 5)")));
  }
  RequestSampler sampler = make_sampler(SamplingParams{}, SamplingClass::kBase);
  EXPECT_THROW(sampler.accept(-1), Error);
}

// ---------------------------------------------------------------------------------------
// Validation.

std::string validation_error(const SamplingParams& params, int vocab_size = 1000) {
  try {
    validate_sampling_params(params, vocab_size);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(ValidationTest, AcceptsDefaultsAndTheEdgesOfEachRange) {
  EXPECT_EQ(validation_error(SamplingParams{}), "");
  SamplingParams edges;
  edges.temperature = 0.0f;
  edges.top_p = 0.0f;
  edges.top_k = -1;
  edges.min_p = 1.0f;
  edges.repetition_penalty = 0.01f;
  edges.presence_penalty = -2.0f;
  edges.frequency_penalty = 2.0f;
  edges.min_tokens = 16;
  edges.max_tokens = 16;
  edges.seed = kMaxSeed;
  edges.logprobs = 20;
  edges.stop_token_ids = {0, 999};
  edges.bad_words_token_ids = {999};
  edges.stop = {"\n\n"};
  EXPECT_EQ(validation_error(edges), "");
}

TEST(ValidationTest, NamesTheFieldTheValueAndTheRange) {
  struct Case {
    const char* field;
    void (*make_bad)(SamplingParams&);
    const char* value;
    const char* range;
  };
  const Case cases[] = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.5f; }, "-0.5", ">= 0"},
      {"temperature", [](SamplingParams& p) { p.temperature = std::numeric_limits<float>::infinity(); }, "inf",
       ">= 0"},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.5f; }, "1.5", "[0, 1]"},
      {"top_p", [](SamplingParams& p) { p.top_p = std::nanf(""); }, "nan", "[0, 1]"},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }, "-2", ">= -1"},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.1f; }, "-0.1", "[0, 1]"},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "0", "> 0"},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5f; }, "2.5", "[-2, 2]"},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "-3", "[-2, 2]"},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = 0; }, "0", ">= 1"},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = -1; }, "-1", ">= 0"},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = 17; }, "17", "max_tokens (16)"},
      {"seed", [](SamplingParams& p) { p.seed = kMaxSeed + 1; }, "922337203685477581", "922337203685477580"},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 1001; }, "1001", "[0, 1000]"},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -1; }, "-1", "[0, 1000]"},
      {"prompt_logprobs", [](SamplingParams& p) { p.prompt_logprobs = -1; }, "-1", "[0, 1000]"},
      {"stop[1]", [](SamplingParams& p) { p.stop = {"end", ""}; }, "empty", "non-empty"},
      {"stop_token_ids[1]", [](SamplingParams& p) { p.stop_token_ids = {2, 1000}; }, "1000", "[0, 1000)"},
      {"bad_words_token_ids[0]", [](SamplingParams& p) { p.bad_words_token_ids = {-4}; }, "-4", "[0, 1000)"},
  };
  for (const Case& c : cases) {
    SamplingParams params;
    c.make_bad(params);
    EXPECT_THAT(validation_error(params), AllOf(HasSubstr(c.field), HasSubstr(c.value), HasSubstr(c.range)))
        << "field " << c.field;
  }
  EXPECT_THAT(validation_error(SamplingParams{}, 0), HasSubstr("vocabulary size"));
}

// ---------------------------------------------------------------------------------------
// FD_SAMPLING_CLASS.

TEST(SamplingClassTest, ParsesFastDeploysNames) {
  EXPECT_EQ(parse_sampling_class("base"), SamplingClass::kBase);
  EXPECT_EQ(parse_sampling_class("rejection"), SamplingClass::kRejection);
  EXPECT_EQ(parse_sampling_class("base_non_truncated"), SamplingClass::kBase);
  EXPECT_EQ(parse_sampling_class("air"), SamplingClass::kBase);
  try {
    parse_sampling_class("Rejection");
    ADD_FAILURE() << "an unknown name was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("FD_SAMPLING_CLASS"), HasSubstr("\"Rejection\""), HasSubstr("base"),
                                    HasSubstr("rejection"), HasSubstr("air")));
  }
  EXPECT_STREQ(sampling_class_name(SamplingClass::kRejection), "rejection");
}

TEST(SamplingClassTest, ReadsTheEnvironmentVariable) {
  const char* saved = std::getenv("FD_SAMPLING_CLASS");
  const std::string saved_value = saved != nullptr ? saved : "";
  unsetenv("FD_SAMPLING_CLASS");
  EXPECT_EQ(sampling_class_from_env(), SamplingClass::kBase);
  setenv("FD_SAMPLING_CLASS", "rejection", 1);
  EXPECT_EQ(sampling_class_from_env(), SamplingClass::kRejection);
  setenv("FD_SAMPLING_CLASS", "topk", 1);
  EXPECT_THROW(sampling_class_from_env(), Error);
  if (saved != nullptr) {
    setenv("FD_SAMPLING_CLASS", saved_value.c_str(), 1);
  } else {
    unsetenv("FD_SAMPLING_CLASS");
  }
}

}  // namespace
}  // namespace ernie
