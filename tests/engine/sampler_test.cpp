#include "engine/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "util/error.h"

namespace ernie {
namespace {

const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f};

TEST(SamplerTest, TemperatureZeroIsArgmax) {
  Sampler sampler(1);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(sampler.sample(kLogits, greedy), 1);
  SamplingParams top1;
  top1.top_k = 1;
  EXPECT_EQ(sampler.sample(kLogits, top1), 1);
  EXPECT_EQ(argmax(std::vector<float>{3, 7, 7}), 1) << "first of equal maxima";
}

TEST(SamplerTest, SameSeedSameDraws) {
  Sampler a(42), b(42), c(43);
  SamplingParams params;
  std::vector<int32_t> from_a, from_b, from_c;
  for (int i = 0; i < 50; ++i) {
    from_a.push_back(a.sample(kLogits, params));
    from_b.push_back(b.sample(kLogits, params));
    from_c.push_back(c.sample(kLogits, params));
  }
  EXPECT_EQ(from_a, from_b);
  EXPECT_NE(from_a, from_c);
}

TEST(SamplerTest, FrequenciesFollowTheSoftmaxAtTheTemperature) {
  Sampler sampler(7);
  SamplingParams params;
  params.temperature = 0.7f;
  const int draws = 200000;
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) counts[sampler.sample(kLogits, params)]++;
  double total = 0;
  std::vector<double> expected;
  for (float logit : kLogits) total += std::exp(logit / 0.7);
  for (float logit : kLogits) expected.push_back(std::exp(logit / 0.7) / total);
  // Chi-square with 4 degrees of freedom; 18.5 is the 0.999 quantile.
  double chi_square = 0;
  for (size_t i = 0; i < kLogits.size(); ++i) {
    const double e = expected[i] * draws;
    chi_square += (counts[static_cast<int32_t>(i)] - e) * (counts[static_cast<int32_t>(i)] - e) / e;
  }
  EXPECT_LT(chi_square, 18.5);
}

TEST(SamplerTest, TopPAndTopKRestrictTheCandidates) {
  Sampler sampler(9);
  SamplingParams nucleus;
  nucleus.top_p = 0.45f;  // p = [.11 .50 .02 .30 .07]: token 1 alone reaches 0.45
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sampler.sample(kLogits, nucleus), 1);
  SamplingParams top2;
  top2.top_k = 2;
  for (int i = 0; i < 200; ++i) EXPECT_THAT(sampler.sample(kLogits, top2), ::testing::AnyOf(1, 3));
}

TEST(SamplerTest, RejectsOutOfRangeParameters) {
  SamplingParams bad;
  bad.temperature = -1.0f;
  EXPECT_THROW(validate_sampling_params(bad), Error);
  bad = {};
  bad.top_p = 0.0f;
  EXPECT_THROW(validate_sampling_params(bad), Error);
  bad = {};
  bad.top_p = 1.5f;
  EXPECT_THROW(validate_sampling_params(bad), Error);
  bad = {};
  bad.top_k = -2;
  EXPECT_THROW(validate_sampling_params(bad), Error);
  EXPECT_NO_THROW(validate_sampling_params(SamplingParams{}));
}

}  // namespace
}  // namespace ernie
