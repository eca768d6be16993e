// Perplexity against the golden logits (llama.cpp's, an independent implementation):
// over one window it must equal exp(mean NLL) computed from the reference logits, and
// windows must restart the context.
#include "model/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/quantization.h"
#include "support/test_support.h"

namespace ernie {
namespace {

using testing::read_f32_file;
using testing::read_file;

struct GoldenCase {
  std::vector<int32_t> ids;
  std::vector<float> logits;
};

GoldenCase golden_case(const std::string& name) {
  const std::string dir = testing::shared_dir() + "/golden/tiny-dense";
  const nlohmann::json cases = nlohmann::json::parse(read_file(dir + "/cases.json"));
  for (const auto& c : cases.at("cases"))
    if (c.at("name") == name) return {c.at("input_ids").get<std::vector<int32_t>>(), read_f32_file(dir + "/" + c.at("logits_file").get<std::string>())};
  throw std::runtime_error("no golden case " + name);
}

// Sum of -log p(ids[i+1] | ids[..i]) for rows [first, last), in double.
double reference_nll_sum(const GoldenCase& golden, size_t first, size_t last, size_t vocab) {
  double sum = 0;
  for (size_t row = first; row < last; ++row) {
    const float* values = golden.logits.data() + row * vocab;
    double peak = values[0];
    for (size_t v = 1; v < vocab; ++v) peak = std::max(peak, static_cast<double>(values[v]));
    double total = 0;
    for (size_t v = 0; v < vocab; ++v) total += std::exp(values[v] - peak);
    sum += peak + std::log(total) - values[golden.ids[row + 1]];
  }
  return sum;
}

class PerplexityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pool_ = new ThreadPool(2);
    model_ = ErnieModel::load(testing::golden_model_dir("tiny-dense"), *pool_).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
  }
  static ThreadPool* pool_;
  static ErnieModel* model_;
};
ThreadPool* PerplexityTest::pool_ = nullptr;
ErnieModel* PerplexityTest::model_ = nullptr;

// Golden logits agree to 2e-3, so NLLs agree to about that too.
constexpr double kNllTolerance = 2e-3;

TEST_F(PerplexityTest, OneWindowMatchesTheReferenceLogits) {
  const GoldenCase golden = golden_case("len130");
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  const PerplexityResult result = evaluate_perplexity(*model_, golden.ids, 256);
  EXPECT_EQ(result.windows, 1);
  EXPECT_EQ(result.predicted_tokens, 129);
  const double expected = reference_nll_sum(golden, 0, golden.ids.size() - 1, vocab) / 129.0;
  EXPECT_NEAR(result.mean_nll, expected, kNllTolerance);
  EXPECT_NEAR(result.perplexity, std::exp(expected), std::exp(expected) * kNllTolerance);
}

TEST_F(PerplexityTest, WindowsRestartTheContext) {
  const GoldenCase golden = golden_case("len130");
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  // Windows of 100 and 30: the first one is the reference's first 100 positions; the
  // second starts afresh, so it equals scoring those 30 tokens alone.
  const PerplexityResult split = evaluate_perplexity(*model_, golden.ids, 100);
  EXPECT_EQ(split.windows, 2);
  EXPECT_EQ(split.predicted_tokens, 99 + 29);
  const std::span<const int32_t> tail(golden.ids.data() + 100, 30);
  const PerplexityResult alone = evaluate_perplexity(*model_, tail, 256);
  const double expected = (reference_nll_sum(golden, 0, 99, vocab) + alone.mean_nll * 29) / 128.0;
  EXPECT_NEAR(split.mean_nll, expected, kNllTolerance);
  // A one-token last window predicts nothing.
  EXPECT_EQ(evaluate_perplexity(*model_, std::span<const int32_t>(golden.ids.data(), 101), 100).predicted_tokens, 99);
}

// llama-perplexity's protocol: whole windows only, and within each only rows context/2
// .. context-2 predict (tokens context/2 + 1 .. context - 1).
TEST_F(PerplexityTest, SecondHalfScoresTheSecondHalfOfWholeWindows) {
  const GoldenCase golden = golden_case("len130");
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  PerplexityOptions options{.context = 64, .protocol = PerplexityProtocol::kSecondHalf};
  const PerplexityResult result = evaluate_perplexity(*model_, golden.ids, options);
  EXPECT_EQ(result.windows, 2);  // 130 tokens: two whole windows, the last 2 tokens dropped
  EXPECT_EQ(result.predicted_tokens, 2 * 31);
  // The first window is the reference's first 64 positions; the second starts afresh.
  const std::span<const int32_t> second(golden.ids.data() + 64, 64);
  const PerplexityResult alone = evaluate_perplexity(*model_, second, options);
  EXPECT_EQ(alone.predicted_tokens, 31);
  const double expected = (reference_nll_sum(golden, 32, 63, vocab) + alone.mean_nll * 31) / 62.0;
  EXPECT_NEAR(result.mean_nll, expected, kNllTolerance);
  // With a BOS id, each window's first token is replaced by it: the same as scoring a
  // copy with those tokens swapped and no BOS.
  options.bos_id = 1;
  std::vector<int32_t> swapped = golden.ids;
  swapped[0] = swapped[64] = 1;
  PerplexityOptions plain = options;
  plain.bos_id = -1;
  EXPECT_DOUBLE_EQ(evaluate_perplexity(*model_, golden.ids, options).mean_nll,
                   evaluate_perplexity(*model_, swapped, plain).mean_nll);
  // Fewer tokens than one window score nothing, and say so.
  const std::span<const int32_t> short_text(golden.ids.data(), 63);
  EXPECT_NE(testing::error_message([&] { evaluate_perplexity(*model_, short_text, options); }).find("whole window"),
            std::string::npos);
}

// KL divergence against a reference model: zero against itself; against the unquantized
// weights a wint8 copy drifts a little and mostly keeps the top token (this random model
// amplifies perturbations, so the bounds are loose).
TEST_F(PerplexityTest, KlDivergenceAgainstAReferenceModel) {
  const GoldenCase golden = golden_case("len130");
  PerplexityOptions options{.context = 128, .reference = model_};
  const PerplexityResult self = evaluate_perplexity(*model_, golden.ids, options);
  EXPECT_NEAR(self.mean_kl, 0.0, 1e-9);
  EXPECT_EQ(self.same_top1, 1.0);
  const std::string dir = testing::golden_model_dir("tiny-dense");
  auto quantized = ErnieModel::load(dir, *pool_, nullptr, parse_quantization("wint8", load_model_config(dir)));
  const PerplexityResult drifted = evaluate_perplexity(*quantized, golden.ids, options);
  EXPECT_GT(drifted.mean_kl, 1e-3);
  EXPECT_LT(drifted.mean_kl, 0.5);
  EXPECT_GT(drifted.same_top1, 0.5);
  EXPECT_LT(drifted.same_top1, 1.0);
  EXPECT_EQ(drifted.predicted_tokens, self.predicted_tokens);
}

TEST_F(PerplexityTest, BadInputIsRefused) {
  const std::vector<int32_t> ids = {5, 6, 7};
  EXPECT_NE(testing::error_message([&] { evaluate_perplexity(*model_, ids, 1); }).find("at least 2"), std::string::npos);
  const std::vector<int32_t> outside = {5, 99999};
  EXPECT_NE(testing::error_message([&] { evaluate_perplexity(*model_, outside, 8); }).find("99999"), std::string::npos);
  const std::vector<int32_t> one = {5};
  EXPECT_NE(testing::error_message([&] { evaluate_perplexity(*model_, one, 8); }).find("1 token"), std::string::npos);
}

}  // namespace
}  // namespace ernie
