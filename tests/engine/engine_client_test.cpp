// EngineClient from several threads: many concurrent submissions, aborts, errors and
// stats, against the same outputs the synchronous engine gives.
#include "engine/engine_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "model/ernie_model.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

class EngineClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = ErnieModel::load(testing::golden_model_dir("tiny-dense"), pool_);
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(testing::golden_model_dir("tiny-dense")));
    EngineConfig config;
    config.block_size = 16;
    config.max_model_len = 256;
    config.max_num_seqs = 8;
    client_ = std::make_unique<EngineClient>(
        std::make_unique<Engine>(*model_, *tokenizer_, config, 128, std::vector<int32_t>{2}));
  }
  void TearDown() override { client_.reset(); }

  static GenerateRequest request(const std::string& id, int seed, int max_tokens) {
    GenerateRequest r{id, {}, {}, {}};
    for (int i = 0; i < 6 + seed; ++i) r.prompt.push_back(30 + (seed * 31 + i * 17) % 4000);
    r.params.temperature = 0.0f;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    return r;
  }

  static std::vector<int32_t> drain(OutputStream& stream, RequestOutput* last = nullptr) {
    std::vector<int32_t> tokens;
    while (std::optional<RequestOutput> output = stream.next()) {
      tokens.insert(tokens.end(), output->token_ids.begin(), output->token_ids.end());
      if (last) *last = *output;
    }
    return tokens;
  }

  ThreadPool pool_{2};
  std::unique_ptr<ErnieModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<EngineClient> client_;
};

TEST_F(EngineClientTest, ConcurrentSubmittersEachGetTheirOwnCompleteStream) {
  const std::vector<int32_t> solo = drain(*client_->submit(request("solo", 3, 10)));
  ASSERT_EQ(solo.size(), 10u);
  std::vector<std::thread> threads;
  std::vector<std::vector<int32_t>> results(12);
  for (int t = 0; t < 12; ++t)
    threads.emplace_back([&, t] { results[static_cast<size_t>(t)] = drain(*client_->submit(request("t" + std::to_string(t), t % 4, 10))); });
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 12; ++t) {
    EXPECT_EQ(results[static_cast<size_t>(t)].size(), 10u);
    if (t % 4 == 3) {
      EXPECT_EQ(results[static_cast<size_t>(t)], solo) << "same prompt, same greedy output";
    }
  }
  const EngineStats stats = client_->stats();
  EXPECT_EQ(stats.blocks_free, stats.blocks_total);
  EXPECT_EQ(stats.finished_requests, 13);
}

TEST_F(EngineClientTest, AbortEndsTheStreamWithAbort) {
  auto stream = client_->submit(request("long", 1, 200));
  ASSERT_TRUE(stream->next().has_value());  // it is running
  client_->abort("long");
  RequestOutput last;
  drain(*stream, &last);
  EXPECT_EQ(last.finish_reason, FinishReason::kAbort);
  EXPECT_LT(last.completion_tokens, 200);
  EXPECT_TRUE(stream->done());
}

TEST_F(EngineClientTest, InvalidRequestsFailAtSubmitOrOnTheStream) {
  EXPECT_THROW(client_->submit(request("", 0, 0)), Error) << "max_tokens 0";
  GenerateRequest empty{"e", {}, {}, {}};
  EXPECT_THROW(client_->submit(empty), Error);
  auto first = client_->submit(request("dup", 1, 50));
  auto second = client_->submit(request("dup", 1, 5));
  RequestOutput last;
  drain(*second, &last);
  EXPECT_EQ(last.finish_reason, FinishReason::kError);
  EXPECT_THAT(last.error, ::testing::HasSubstr("already in use"));
  client_->abort("dup");
  drain(*first);
}

TEST_F(EngineClientTest, ASlowReaderDoesNotHoldUpOthers) {
  auto slow = client_->submit(request("slow", 2, 40));  // never read until the end
  const std::vector<int32_t> fast = drain(*client_->submit(request("fast", 5, 5)));
  EXPECT_EQ(fast.size(), 5u);
  EXPECT_EQ(drain(*slow).size(), 40u);
}

}  // namespace
}  // namespace ernie
