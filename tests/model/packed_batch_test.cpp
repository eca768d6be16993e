// The packed batch must not change any sequence's result: several sequences in one
// call, prompts split into chunks across calls, and batched decoding at different
// positions all give the logits of running each sequence alone. Exactly, up to float
// rounding: a row can take a different kernel path depending on the batch's shape
// (attention for 8 or fewer query rows and bf16 matmuls of 4 or fewer token rows use
// decode kernels that sum in another order). The golden models amplify such rounding
// (each matmul multiplies a perturbation by about 2.4), and rows agree within 1.4e-4
// on logits of magnitude up to 11: kLogitTolerance is 5e-4, a quarter of the golden
// tests' 2e-3.
#include <gtest/gtest.h>

#include <cmath>

#include "model/ernie_model.h"
#include "util/error.h"
#include "support/test_support.h"

namespace ernie {
namespace {

// Logits of every position of `ids`, computed alone in one call.
std::vector<float> alone(ErnieModel& model, const std::vector<int32_t>& ids) {
  auto cache = model.new_kv_cache();
  return model.forward(single_sequence_batch(*cache, ids, 0, true));
}

constexpr float kLogitTolerance = 5e-4f;

void expect_same_logits(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  float worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) worst = std::max(worst, std::fabs(actual[i] - expected[i]));
  EXPECT_LE(worst, kLogitTolerance);
}

class PackedBatchTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = ErnieModel::load(testing::golden_model_dir(GetParam()), pool_); }
  ThreadPool pool_{2};
  std::unique_ptr<ErnieModel> model_;
};

TEST_P(PackedBatchTest, SeveralSequencesInOneCallEqualEachAlone) {
  const std::vector<std::vector<int32_t>> prompts = {testing::synthetic_token_ids(1, 5), testing::synthetic_token_ids(2, 70),
                                                     testing::synthetic_token_ids(3, 1), testing::synthetic_token_ids(4, 17)};
  const int64_t vocab = model_->config().vocab_size;
  std::vector<std::unique_ptr<KvCache>> caches;
  ForwardBatch batch;
  for (const auto& prompt : prompts) {
    caches.push_back(model_->new_kv_cache());
    const int32_t first = static_cast<int32_t>(batch.tokens.size());
    batch.sequences.push_back({caches.back().get(), 0, first, static_cast<int32_t>(prompt.size())});
    batch.tokens.insert(batch.tokens.end(), prompt.begin(), prompt.end());
  }
  for (int32_t i = 0; i < static_cast<int32_t>(batch.tokens.size()); ++i) batch.logit_rows.push_back(i);
  const std::vector<float> packed = model_->forward(batch);

  size_t row = 0;
  for (const auto& prompt : prompts) {
    const std::vector<float> expected = alone(*model_, prompt);
    const std::vector<float> got(packed.begin() + static_cast<int64_t>(row) * vocab,
                                 packed.begin() + static_cast<int64_t>(row + prompt.size()) * vocab);
    SCOPED_TRACE("sequence of length " + std::to_string(prompt.size()));
    expect_same_logits(got, expected);
    row += prompt.size();
  }
}

TEST_P(PackedBatchTest, ChunkedPrefillEqualsOneCall) {
  const std::vector<int32_t> prompt = testing::synthetic_token_ids(5, 100);
  const int64_t vocab = model_->config().vocab_size;
  const std::vector<float> expected = alone(*model_, prompt);
  auto cache = model_->new_kv_cache();
  std::vector<float> chunked;
  int32_t done = 0;
  for (int32_t chunk : {1, 30, 33, 36}) {  // crosses the 64-position block boundary
    const std::vector<float> logits = model_->forward(
        single_sequence_batch(*cache, std::span(prompt).subspan(static_cast<size_t>(done), static_cast<size_t>(chunk)), done, true));
    chunked.insert(chunked.end(), logits.begin(), logits.end());
    done += chunk;
  }
  ASSERT_EQ(done, 100);
  ASSERT_EQ(chunked.size(), static_cast<size_t>(100 * vocab));
  expect_same_logits(chunked, expected);
}

TEST_P(PackedBatchTest, MixedDecodeAndPrefillRowsMatchSeparateRuns) {
  // Sequence A decodes one token at position 40 while sequence B prefills 9 tokens.
  const std::vector<int32_t> a = testing::synthetic_token_ids(6, 41), b = testing::synthetic_token_ids(7, 9);
  const int64_t vocab = model_->config().vocab_size;
  auto cache_a = model_->new_kv_cache();
  auto cache_b = model_->new_kv_cache();
  ForwardBatch prefill_a;
  prefill_a.tokens.assign(a.begin(), a.end() - 1);
  prefill_a.sequences.push_back({cache_a.get(), 0, 0, 40});
  model_->forward(prefill_a);

  ForwardBatch mixed;
  mixed.tokens = {a.back()};
  mixed.tokens.insert(mixed.tokens.end(), b.begin(), b.end());
  mixed.sequences.push_back({cache_a.get(), 40, 0, 1});
  mixed.sequences.push_back({cache_b.get(), 0, 1, 9});
  mixed.logit_rows = {0, 9};  // A's new token and B's last prompt token
  const std::vector<float> logits = model_->forward(mixed);

  const std::vector<float> expected_a = alone(*model_, a), expected_b = alone(*model_, b);
  expect_same_logits(std::vector<float>(logits.begin(), logits.begin() + vocab),
                     std::vector<float>(expected_a.end() - vocab, expected_a.end()));
  expect_same_logits(std::vector<float>(logits.begin() + vocab, logits.end()),
                     std::vector<float>(expected_b.end() - vocab, expected_b.end()));
}

TEST_P(PackedBatchTest, RejectsMalformedBatches) {
  auto cache = model_->new_kv_cache();
  ForwardBatch gap;
  gap.tokens = {5, 6};
  gap.sequences.push_back({cache.get(), 0, 0, 1});
  EXPECT_THROW(model_->forward(gap), Error);
  ForwardBatch bad_token;
  bad_token.tokens = {model_->config().vocab_size};
  bad_token.sequences.push_back({cache.get(), 0, 0, 1});
  EXPECT_THROW(model_->forward(bad_token), Error);
  ForwardBatch bad_row;
  bad_row.tokens = {5};
  bad_row.sequences.push_back({cache.get(), 0, 0, 1});
  bad_row.logit_rows = {1};
  EXPECT_THROW(model_->forward(bad_row), Error);
}

INSTANTIATE_TEST_SUITE_P(Golden, PackedBatchTest, ::testing::Values("tiny-dense", "tiny-moe"),
                         [](const auto& test_info) { return test_info.param == "tiny-dense" ? "dense" : "moe"; });

}  // namespace
}  // namespace ernie
