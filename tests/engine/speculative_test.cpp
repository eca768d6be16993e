// Speculative decoding's promise: a request emits exactly the tokens it emits without
// speculation (greedy, and seeded sampling too: every token is the target's own draw),
// whatever else runs, however its prompt is chunked, after preemption and with prefix
// hits, for MTP and n-gram drafts and 1..3 drafts a step; and every block is free at the
// end. The shipped kjv-moe model has a jointly trained MTP head, so drafts are accepted
// often enough for every path to run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"
#include "engine/speculative.h"
#include "model/ernie_model.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;

std::string kjv_moe_dir() { return std::string(ERNIE_SOURCE_DIR) + "/models/ernie-4.5-kjv-moe"; }

struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<float> logprobs;
  RequestOutput final_output;
};

class SpeculativeTest : public ::testing::TestWithParam<std::pair<SpeculativeMethod, int>> {
 protected:
  static void SetUpTestSuite() {
    pool_ = new ThreadPool(2);
    model_ = ErnieModel::load(kjv_moe_dir(), *pool_).release();
    tokenizer_ = new Tokenizer(Tokenizer::load(kjv_moe_dir()));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
    delete pool_;
  }

  static EngineConfig base_config() {
    EngineConfig config;
    config.block_size = 16;
    config.max_model_len = 256;
    config.max_num_seqs = 16;
    config.max_num_batched_tokens = 512;
    return config;
  }

  EngineConfig speculative_config() const {
    EngineConfig config = base_config();
    config.speculative.method = GetParam().first;
    config.speculative.num_speculative_tokens = GetParam().second;
    config.speculative.num_model_steps = GetParam().second;
    config.speculative.adaptive = false;  // draft for all sixteen, whatever it costs
    return config;
  }

  // Sixteen requests of KJV text (their continuations repeat phrases, which both
  // methods predict), greedy and seeded, with stop strings, stop ids, penalties,
  // min_tokens and logprobs spread over them.
  static std::vector<GenerateRequest> sixteen_requests() {
    const std::vector<std::string> openings = {
        "In the beginning God created the heaven and the earth.",
        "And God said, Let there be light: and there was light.",
        "The LORD is my shepherd; I shall not want.",
        "And it came to pass in those days,",
    };
    std::vector<GenerateRequest> requests;
    for (int i = 0; i < 16; ++i) {
      GenerateRequest request{"r" + std::to_string(i), tokenizer_->encode(openings[i % 4] + std::string(i / 4, ' ')), {}, {}};
      request.params.max_tokens = 30 + 7 * i;
      request.params.ignore_eos = true;
      request.params.temperature = i % 2 == 0 ? 0.0f : 0.8f;
      request.params.seed = 1000 + i;
      if (i % 4 == 1) request.params.stop = {"shall"};
      if (i % 4 == 2) request.params.repetition_penalty = 1.3f;
      if (i % 4 == 3) request.params.logprobs = 2;
      if (i == 5) request.params.min_tokens = 20;
      if (i == 6) request.params.stop_token_ids = {tokenizer_->encode(" and")[0]};
      requests.push_back(std::move(request));
    }
    return requests;
  }

  static std::map<std::string, Result> run(Engine& engine, const std::vector<GenerateRequest>& requests) {
    for (const GenerateRequest& request : requests) engine.add_request(request);
    std::map<std::string, Result> results;
    for (int steps = 0; engine.has_work(); ++steps) {
      if (steps > 100000) ADD_FAILURE() << "engine does not finish";
      for (RequestOutput& output : engine.step()) {
        Result& result = results[output.request_id];
        result.tokens.insert(result.tokens.end(), output.token_ids.begin(), output.token_ids.end());
        result.text += output.text;
        for (const SampledToken& sampled : output.logprobs) result.logprobs.push_back(sampled.logprob);
        if (output.finished()) result.final_output = output;
      }
    }
    return results;
  }

  std::unique_ptr<Engine> make_engine(const EngineConfig& config, int blocks) const {
    return std::make_unique<Engine>(*model_, *tokenizer_, config, blocks, std::vector<int32_t>{2});
  }

  // Each of the sixteen alone, without speculation: the reference of every test, so it
  // is computed once per process (the sanitized run takes every test in one process).
  const std::map<std::string, Result>& alone() const {
    static const std::map<std::string, Result> results = [this] {
      std::map<std::string, Result> reference;
      for (const GenerateRequest& request : sixteen_requests()) {
        EngineConfig config = base_config();
        config.prefix_caching = false;
        auto engine = make_engine(config, 64);
        reference[request.id] = run(*engine, {request})[request.id];
      }
      return reference;
    }();
    return results;
  }

  // Runs the sixteen together under `config` and holds each to its run alone.
  EngineStats expect_same_as_alone(const EngineConfig& config, int blocks) const {
    const std::vector<GenerateRequest> requests = sixteen_requests();
    auto engine = make_engine(config, blocks);
    const auto together = run(*engine, requests);
    const auto& reference = alone();
    for (const GenerateRequest& request : requests) {
      const Result& got = together.at(request.id);
      const Result& expected = reference.at(request.id);
      EXPECT_EQ(got.tokens, expected.tokens) << request.id;
      EXPECT_EQ(got.text, expected.text) << request.id;
      EXPECT_EQ(got.final_output.finish_reason, expected.final_output.finish_reason) << request.id;
      EXPECT_EQ(got.logprobs.size(), expected.logprobs.size()) << request.id;
      for (size_t i = 0; i < std::min(got.logprobs.size(), expected.logprobs.size()); ++i) EXPECT_NEAR(got.logprobs[i], expected.logprobs[i], 1e-4) << request.id;
    }
    const EngineStats stats = engine->stats();
    EXPECT_EQ(stats.blocks_free, stats.blocks_total) << "rollback and finishing leave every block free";
    EXPECT_GT(stats.spec_draft_tokens, 0);
    EXPECT_GT(stats.spec_accepted_tokens, 0) << "the drafts were verified and some accepted";
    return stats;
  }

  static ThreadPool* pool_;
  static ErnieModel* model_;
  static Tokenizer* tokenizer_;
};

ThreadPool* SpeculativeTest::pool_ = nullptr;
ErnieModel* SpeculativeTest::model_ = nullptr;
Tokenizer* SpeculativeTest::tokenizer_ = nullptr;

TEST_P(SpeculativeTest, OutputIsTheSameAsWithoutSpeculationAmongFifteenOthers) {
  const EngineStats stats = expect_same_as_alone(speculative_config(), 400);
  std::cout << speculative_method_name(GetParam().first) << " k=" << GetParam().second << ": "
            << stats.spec_accepted_tokens << "/" << stats.spec_draft_tokens << " drafts accepted\n";
}

TEST_P(SpeculativeTest, OutputIsTheSameWithATinyChunkBudgetAndPrefixHits) {
  EngineConfig config = speculative_config();
  config.max_num_batched_tokens = 16;  // prompts over several steps; drafts compete for the budget
  expect_same_as_alone(config, 400);
  // The same prompts again on one engine: the second round takes their prefixes from
  // the cache (drafts never enter it: only accepted tokens are registered).
  const auto requests = sixteen_requests();
  auto engine = make_engine(speculative_config(), 400);
  const auto first = run(*engine, requests);
  const auto second = run(*engine, requests);
  EXPECT_GT(engine->stats().prefix_cache.hit_tokens, 0);
  for (const GenerateRequest& request : requests) EXPECT_EQ(second.at(request.id).tokens, first.at(request.id).tokens);
}

TEST_P(SpeculativeTest, OutputIsTheSameAfterPreemption) {
  EngineConfig config = speculative_config();
  config.prefix_caching = false;
  // 40 blocks of 16 tokens cannot hold sixteen growing sequences.
  EXPECT_GT(expect_same_as_alone(config, 40).preemptions, 0);
}

INSTANTIATE_TEST_SUITE_P(MethodsAndDrafts, SpeculativeTest,
                         ::testing::Values(std::pair{SpeculativeMethod::kMtp, 1}, std::pair{SpeculativeMethod::kMtp, 2},
                                           std::pair{SpeculativeMethod::kMtp, 3}, std::pair{SpeculativeMethod::kNgram, 1},
                                           std::pair{SpeculativeMethod::kNgram, 2}, std::pair{SpeculativeMethod::kNgram, 3}),
                         [](const auto& test_info) {
                           return std::string(speculative_method_name(test_info.param.first)) + "_k" +
                                  std::to_string(test_info.param.second);
                         });

TEST(SpeculativeConfigTest, ParsesFastDeploysKeysAndRefusesTheRest) {
  const SpeculativeConfig mtp = parse_speculative_config(R"({"method": "mtp", "num_speculative_tokens": 1, "model": "/m"})");
  EXPECT_EQ(mtp.method, SpeculativeMethod::kMtp);
  EXPECT_EQ(mtp.num_speculative_tokens, 1);
  EXPECT_EQ(mtp.mtp_drafts(), 1);
  EXPECT_EQ(mtp.model, "/m");
  const SpeculativeConfig old = parse_speculative_config(R"({"method": "ngram_match", "num_speculative_tokens": 4})");
  EXPECT_EQ(old.method, SpeculativeMethod::kNgram);
  EXPECT_EQ(old.mtp_drafts(), 0);
  const SpeculativeConfig mixed = parse_speculative_config(
      R"({"method": "mtp", "num_speculative_tokens": 3, "mtp_strategy": "with_ngram", "max_candidate_len": 5})");
  EXPECT_TRUE(mixed.mtp_with_ngram);
  EXPECT_EQ(mixed.num_model_steps, 1) << "with_ngram: one MTP draft, n-gram fills the rest";
  const auto error = [](const std::string& json) { return testing::error_message([&] { parse_speculative_config(json); }); };
  EXPECT_THAT(error("{mtp"), HasSubstr("expects a JSON object"));
  EXPECT_THAT(error(R"({"method": "eagle"})"), HasSubstr("valid: mtp, ngram, ngram_match"));
  EXPECT_THAT(error(R"({"method": "mtp", "num_speculative_tokens": 6})"), HasSubstr("1..5"));
  EXPECT_THAT(error(R"({"method": "mtp", "num_speculative_tokens": 1, "num_model_steps": 2})"), HasSubstr("exceeds"));
  EXPECT_THAT(error(R"({"method": "ngram", "min_ngram_size": 4, "max_ngram_size": 3})"), HasSubstr("above"));
  EXPECT_THAT(error(R"({"method": "mtp", "speed": "fast"})"), HasSubstr("unknown key \"speed\""));
  EXPECT_THAT(error(R"({"num_speculative_tokens": 2})"), HasSubstr("needs \"method\""));
}

TEST(NgramDraftsTest, FollowTheMostRecentEarlierMatchOfTheLongestTail) {
  const std::vector<int32_t> context = {1, 2, 3, 4, 9, 1, 2, 3, 5, 7, 2, 3};
  // The tail 2 3 occurs at 6 (then 5 7 ...) and at 1 (then 4 9 ...): the most recent wins.
  EXPECT_EQ(propose_ngram_drafts(context, 2, 2, 5), (std::vector<int32_t>{5, 7}));
  // A longer tail decides first: 7 2 3 never recurs, 2 3 does.
  EXPECT_EQ(propose_ngram_drafts(context, 3, 2, 3), (std::vector<int32_t>{5, 7, 2}));
  EXPECT_TRUE(propose_ngram_drafts(std::vector<int32_t>{1, 2, 3, 4}, 3, 2, 5).empty());
  // At the end of the context fewer tokens follow.
  EXPECT_EQ(propose_ngram_drafts(std::vector<int32_t>{8, 8, 8}, 4, 2, 2), (std::vector<int32_t>{8}));
}

TEST(DraftPlannerTest, DraftsOnlyWhenTheExpectedTokensPerSecondRise) {
  DraftPlanner planner;
  EXPECT_EQ(planner.plan(1, 3), 0) << "the plain step is measured first";
  planner.record_step(1, 0.010);
  EXPECT_EQ(planner.plan(1, 3), 3) << "untried sizes are assumed free, so they get tried";
  // Reading weights dominates: two to four rows cost about what one does.
  for (int rows = 2; rows <= 4; ++rows) planner.record_step(rows, 0.0105);
  for (int i = 0; i < 30; ++i) planner.record_verification(3, 3);  // every draft accepted
  EXPECT_EQ(planner.plan(1, 3), 3);
  for (int i = 0; i < 60; ++i) planner.record_verification(3, 0);  // none accepted any more
  EXPECT_EQ(planner.plan(1, 3), 0);
  // It still probes now and then, so a better stretch is noticed.
  int probes = 0;
  for (int i = 0; i < 64; ++i) probes += planner.plan(1, 3) > 0;
  EXPECT_EQ(probes, 2);
  // Compute-bound: rows cost in proportion; even perfect drafts gain nothing.
  DraftPlanner bound;
  for (int rows = 4; rows <= 16; rows += 4) bound.record_step(rows, 0.001 * rows);
  for (int i = 0; i < 30; ++i) bound.record_verification(1, 1);
  EXPECT_EQ(bound.plan(4, 3), 0);
  EXPECT_EQ(bound.plan(4, 0), 0) << "no drafts allowed: no probe either";
}

TEST(SpeculativeEngineTest, MtpNeedsAnMtpHead) {
  ThreadPool pool(1);
  auto model = ErnieModel::load(testing::golden_model_dir("tiny-dense"), pool);
  const Tokenizer tokenizer = Tokenizer::load(testing::golden_model_dir("tiny-dense"));
  EngineConfig config;
  config.max_model_len = 128;
  config.speculative = parse_speculative_config(R"({"method": "mtp"})");
  EXPECT_THAT(testing::error_message([&] { Engine(*model, tokenizer, config, 16, {2}); }), HasSubstr("use method \"ngram\""));
}

TEST(SpeculativeEngineTest, AnMtpHeadFromAnotherCheckpointDrafts) {
  testing::TempDir temp;
  SyntheticModelSpec spec = synthetic_preset("tiny-moe");  // the golden tiny-moe's shapes
  spec.with_mtp = true;
  const std::string mtp_dir = testing::make_checkpoint(temp, "mtp", spec, CheckpointLayout::kPaddle, 1);
  ThreadPool pool(2);
  const std::string main_dir = testing::golden_model_dir("tiny-moe");
  auto model = ErnieModel::load(main_dir, pool, nullptr, {}, mtp_dir);
  ASSERT_TRUE(model->has_mtp());
  const Tokenizer tokenizer = Tokenizer::load(main_dir);
  std::vector<std::vector<int32_t>> outputs;
  for (const char* speculative : {"", R"({"method": "mtp", "num_speculative_tokens": 2})"}) {
    EngineConfig config;
    config.max_model_len = 128;
    if (*speculative != '\0') config.speculative = parse_speculative_config(speculative);
    Engine engine(*model, tokenizer, config, 32, {2});
    GenerateRequest request{"a", testing::synthetic_token_ids(3, 12), {}, {}};
    request.params.temperature = 0.0f;
    request.params.max_tokens = 40;
    request.params.ignore_eos = true;
    engine.add_request(request);
    std::vector<int32_t> tokens;
    while (engine.has_work())
      for (const RequestOutput& output : engine.step()) tokens.insert(tokens.end(), output.token_ids.begin(), output.token_ids.end());
    outputs.push_back(tokens);
    if (config.speculative.enabled()) {
      EXPECT_GT(engine.stats().spec_draft_tokens, 0);
    }
  }
  EXPECT_EQ(outputs[0], outputs[1]) << "a random head's drafts are rejected, never emitted";
}

}  // namespace
}  // namespace ernie
