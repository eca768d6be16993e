// The engine's promise: a request's greedy output does not depend on what else runs,
// how its prompt is chunked, whether it was preempted and recomputed, or whether its
// prefix came from the cache. And every block is free again afterwards.
#include "engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "model/ernie_model.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;

struct Finished {
  std::vector<int32_t> tokens;
  std::string text;
  RequestOutput final_output;
};

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pool_ = new ThreadPool(2);
    model_ = ErnieModel::load(testing::golden_model_dir("tiny-moe"), *pool_).release();
    tokenizer_ = new Tokenizer(Tokenizer::load(testing::golden_model_dir("tiny-moe")));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
    delete pool_;
  }

  static EngineConfig small_config() {
    EngineConfig config;
    config.block_size = 16;
    config.max_model_len = 512;
    config.max_num_seqs = 16;
    return config;
  }

  std::unique_ptr<Engine> make_engine(const EngineConfig& config, int blocks) {
    return std::make_unique<Engine>(*model_, *tokenizer_, config, blocks, std::vector<int32_t>{2});
  }

  static std::vector<int32_t> prompt(int seed, int length) {
    std::vector<int32_t> ids;
    for (int i = 0; i < length; ++i) ids.push_back(20 + (seed * 7919 + i * 104729) % 4000);
    return ids;
  }

  static GenerateRequest greedy(const std::string& id, std::vector<int32_t> ids, int max_tokens) {
    GenerateRequest request{id, std::move(ids), {}, {}};
    request.params.temperature = 0.0f;
    request.params.max_tokens = max_tokens;
    request.params.ignore_eos = true;
    return request;
  }

  // Steps until every request finished; collects each request's tokens and text.
  std::map<std::string, Finished> run(Engine& engine, std::vector<GenerateRequest> requests) {
    for (auto& request : requests) engine.add_request(std::move(request));
    std::map<std::string, Finished> results;
    for (int steps = 0; engine.has_work(); ++steps) {
      if (steps > 100000) ADD_FAILURE() << "engine does not finish";
      for (RequestOutput& output : engine.step()) {
        Finished& finished = results[output.request_id];
        finished.tokens.insert(finished.tokens.end(), output.token_ids.begin(), output.token_ids.end());
        finished.text += output.text;
        if (output.finished()) finished.final_output = output;
      }
    }
    return results;
  }

  std::vector<int32_t> alone(const GenerateRequest& request) {
    EngineConfig config = small_config();
    config.prefix_caching = false;
    auto engine = make_engine(config, 64);
    return run(*engine, {request})[request.id].tokens;
  }

  // Runs sixteen_requests() together under `config` and holds each request's tokens to
  // its run alone; every block must be free afterwards. Returns the engine's stats.
  EngineStats expect_sixteen_match_alone(const EngineConfig& config, int blocks);

  static void expect_all_blocks_free(const Engine& engine) {
    const EngineStats stats = engine.stats();
    EXPECT_EQ(stats.blocks_free, stats.blocks_total);
    EXPECT_EQ(stats.running, 0u);
    EXPECT_EQ(stats.waiting, 0u);
  }

  static ThreadPool* pool_;
  static ErnieModel* model_;
  static Tokenizer* tokenizer_;
};

ThreadPool* EngineTest::pool_ = nullptr;
ErnieModel* EngineTest::model_ = nullptr;
Tokenizer* EngineTest::tokenizer_ = nullptr;

std::vector<GenerateRequest> sixteen_requests() {
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 16; ++i) {
    GenerateRequest request{"r" + std::to_string(i), {}, {}, {}};
    for (int t = 0; t < 5 + 9 * i; ++t) request.prompt.push_back(20 + (i * 7919 + t * 104729) % 4000);
    request.params.temperature = 0.0f;
    request.params.max_tokens = 12 + i;
    request.params.ignore_eos = true;
    requests.push_back(std::move(request));
  }
  return requests;
}

EngineStats EngineTest::expect_sixteen_match_alone(const EngineConfig& config, int blocks) {
  const auto requests = sixteen_requests();
  auto engine = make_engine(config, blocks);
  const auto results = run(*engine, requests);
  for (const auto& request : requests) EXPECT_EQ(results.at(request.id).tokens, alone(request)) << request.id;
  expect_all_blocks_free(*engine);
  return engine->stats();
}

TEST_F(EngineTest, GreedyOutputIsTheSameBesideFifteenOthers) {
  const auto requests = sixteen_requests();
  auto engine = make_engine(small_config(), 200);
  const auto results = run(*engine, requests);
  for (const auto& request : requests) {
    const Finished& got = results.at(request.id);
    EXPECT_EQ(got.tokens, alone(request)) << request.id;
    EXPECT_EQ(got.final_output.finish_reason, FinishReason::kLength);
    EXPECT_EQ(got.final_output.completion_tokens, request.params.max_tokens);
  }
  expect_all_blocks_free(*engine);
}

TEST_F(EngineTest, GreedyOutputIsTheSameWithATinyChunkBudget) {
  EngineConfig config = small_config();
  config.max_num_batched_tokens = 16;
  // The prompts hold 1160 tokens: at 16 per step prefilling alone takes 73 steps.
  EXPECT_GT(expect_sixteen_match_alone(config, 200).steps, 72) << "the budget must split prompts over steps";
}

TEST_F(EngineTest, GreedyOutputIsTheSameAfterPreemption) {
  EngineConfig config = small_config();
  config.max_model_len = 256;
  config.prefix_caching = false;
  // 20 blocks of 16 tokens cannot hold 16 growing sequences: requests get preempted
  // and recomputed.
  EXPECT_GT(expect_sixteen_match_alone(config, 20).preemptions, 0);
}

TEST_F(EngineTest, PreemptionWithPrefixCachingKeepsOutputs) {
  EngineConfig config = small_config();
  config.max_model_len = 256;
  EXPECT_GT(expect_sixteen_match_alone(config, 20).preemptions, 0);
}

TEST_F(EngineTest, CachedPrefixIsReusedAndGivesTheSameOutput) {
  auto engine = make_engine(small_config(), 64);
  const std::vector<int32_t> shared = prompt(3, 40);  // two full 16-token blocks and a tail
  std::vector<int32_t> second = shared;
  second.push_back(77);
  second.push_back(78);
  const auto first_results = run(*engine, {greedy("a", shared, 5)});
  EXPECT_EQ(first_results.at("a").final_output.cached_tokens, 0);
  const auto second_results = run(*engine, {greedy("b", second, 7)});
  EXPECT_EQ(second_results.at("b").final_output.cached_tokens, 32);
  EXPECT_EQ(second_results.at("b").tokens, alone(greedy("b", second, 7)));
  // The same prompt again: everything but the last token is found (the tail block of
  // 16 is full after 48 tokens of prompt + output were computed).
  const auto again = run(*engine, {greedy("c", shared, 5)});
  EXPECT_EQ(again.at("c").final_output.cached_tokens, 32);
  EXPECT_EQ(again.at("c").tokens, first_results.at("a").tokens);
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.prefix_cache.hit_tokens, 64);
  EXPECT_EQ(stats.prefix_cache.hits, 2);
  EXPECT_GT(stats.blocks_cached, 0);
  expect_all_blocks_free(*engine);
}

// --swap-space: a prefix whose blocks were evicted from the pool comes back from the
// second tier, reported as cached, and the answer is the same as computing it.
TEST_F(EngineTest, APrefixEvictedToTheSwapTierIsRestoredWithTheSameOutput) {
  EngineConfig config = small_config();
  config.max_num_seqs = 1;
  config.swap_space_gb = 0.01;
  auto engine = make_engine(config, 8);  // 8 blocks of 16 positions
  const std::vector<int32_t> first = prompt(5, 64);
  const auto original = run(*engine, {greedy("a", first, 8)});
  // Other prompts take every block in turn, evicting all of the first one's.
  for (int other = 0; other < 3; ++other) run(*engine, {greedy("x" + std::to_string(other), prompt(20 + other, 100), 8)});
  const EngineStats evicted = engine->stats();
  EXPECT_GT(evicted.swap.swapped_out, 3);
  const auto again = run(*engine, {greedy("b", first, 8)});
  EXPECT_EQ(again.at("b").final_output.cached_tokens, 48) << "three full blocks before the last token";
  EXPECT_EQ(again.at("b").tokens, original.at("a").tokens);
  const EngineStats restored = engine->stats();
  EXPECT_GE(restored.swap.swapped_in - evicted.swap.swapped_in, 3);
  expect_all_blocks_free(*engine);
}

TEST_F(EngineTest, WholePromptCachedStillComputesTheLastToken) {
  auto engine = make_engine(small_config(), 64);
  const std::vector<int32_t> exact = prompt(4, 32);  // exactly two blocks
  const auto first = run(*engine, {greedy("a", exact, 3)});
  const auto second = run(*engine, {greedy("b", exact, 3)});
  EXPECT_EQ(second.at("b").final_output.cached_tokens, 16) << "the last block is recomputed for its logits";
  EXPECT_EQ(second.at("b").tokens, first.at("a").tokens);
}

TEST_F(EngineTest, SeededSamplingDoesNotDependOnTheBatch) {
  GenerateRequest sampled{"s", prompt(5, 9), {}, {}};
  sampled.params.temperature = 1.0f;
  sampled.params.seed = 1234;
  sampled.params.max_tokens = 20;
  sampled.params.ignore_eos = true;
  const std::vector<int32_t> by_itself = alone(sampled);
  auto requests = sixteen_requests();
  requests.push_back(sampled);
  auto engine = make_engine(small_config(), 200);
  EXPECT_EQ(run(*engine, requests).at("s").tokens, by_itself);
}

TEST_F(EngineTest, V0AdmissionPolicyProducesTheSameOutputs) {
  EngineConfig config = small_config();
  config.v1_scheduler = false;
  config.kv_cache_ratio = 0.5;
  expect_sixteen_match_alone(config, 60);
}

TEST_F(EngineTest, WithoutChunkedPrefillPromptsRunWhole) {
  EngineConfig config = small_config();
  config.chunked_prefill = false;
  expect_sixteen_match_alone(config, 200);
}

TEST_F(EngineTest, StopsOnEosStopTokensStopStringsAndLength) {
  auto engine = make_engine(small_config(), 64);
  GenerateRequest reference = greedy("ref", prompt(6, 10), 12);
  const Finished full = run(*engine, {reference})["ref"];
  ASSERT_EQ(full.tokens.size(), 12u);

  // A stop token id: finish at its first occurrence, its text not included.
  GenerateRequest stop_token = greedy("st", prompt(6, 10), 12);
  stop_token.params.stop_token_ids = {full.tokens[4]};
  const Finished stopped = run(*engine, {stop_token})["st"];
  const size_t first = static_cast<size_t>(std::find(full.tokens.begin(), full.tokens.end(), full.tokens[4]) - full.tokens.begin());
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + static_cast<int64_t>(first) + 1));
  EXPECT_EQ(stopped.final_output.finish_reason, FinishReason::kStop);

  // A stop string taken from the middle of the reference text.
  ASSERT_GT(full.text.size(), 6u);
  const std::string stop = full.text.substr(full.text.size() / 2, 3);
  GenerateRequest stop_string = greedy("ss", prompt(6, 10), 12);
  stop_string.params.stop = {stop};
  const Finished string_stopped = run(*engine, {stop_string})["ss"];
  EXPECT_EQ(string_stopped.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(string_stopped.final_output.finish_reason, FinishReason::kStop);
  stop_string.id = "ss2";
  stop_string.params.include_stop_str_in_output = true;
  EXPECT_EQ(run(*engine, {stop_string})["ss2"].text, full.text.substr(0, full.text.find(stop) + stop.size()));
  expect_all_blocks_free(*engine);
}

TEST_F(EngineTest, EndTokenStopsUnlessIgnored) {
  // Force the end token by making it the only allowed choice: every other id is a bad word.
  GenerateRequest request = greedy("e", prompt(7, 5), 10);
  request.params.ignore_eos = false;
  for (int32_t id = 0; id < 4096; ++id)
    if (id != 2) request.params.bad_words_token_ids.push_back(id);
  auto engine = make_engine(small_config(), 64);
  const Finished result = run(*engine, {request})["e"];
  EXPECT_EQ(result.tokens, std::vector<int32_t>{2});
  EXPECT_EQ(result.final_output.finish_reason, FinishReason::kStop);
  EXPECT_EQ(result.text, "");
}

// A long prompt's prefill must not hold back a request that arrives while it runs: the
// newcomer gets half of every step until it is seated (issue 12: a 32,000-token
// prefill delayed a 4-token request by 13 s).
TEST_F(EngineTest, AShortRequestIsServedDuringALongPrefill) {
  EngineConfig config = small_config();
  config.max_num_batched_tokens = 32;
  auto engine = make_engine(config, 64);
  engine->add_request(greedy("long", prompt(1, 480), 4));
  engine->step();
  engine->add_request(greedy("short", prompt(2, 4), 2));
  int steps = 0;
  bool long_done = false, short_done = false;
  while (!short_done && steps < 100) {
    ++steps;
    for (const RequestOutput& output : engine->step()) {
      if (output.finished() && output.request_id == "short") short_done = true;
      if (output.finished() && output.request_id == "long") long_done = true;
    }
  }
  EXPECT_TRUE(short_done);
  EXPECT_FALSE(long_done) << "the short request waited for the whole prefill";
  EXPECT_LE(steps, 3) << "one step to prefill and sample, one more to finish";
  run(*engine, {});
  expect_all_blocks_free(*engine);
}

// The prompts of one batched request share a fairness group: a request from someone
// else is seated before the batch's later prompts, not after all of them.
TEST_F(EngineTest, ALoneRequestIsNotStarvedByABatch) {
  EngineConfig config = small_config();
  config.max_num_seqs = 2;
  auto engine = make_engine(config, 64);
  for (int i = 0; i < 12; ++i) {
    GenerateRequest request = greedy("batch-" + std::to_string(i), prompt(10 + i, 6), 3);
    request.fairness_group = 42;
    engine->add_request(std::move(request));
  }
  engine->step();
  engine->add_request(greedy("lone", prompt(3, 6), 3));
  std::vector<std::string> finish_order;
  for (int steps = 0; engine->has_work() && steps < 1000; ++steps)
    for (const RequestOutput& output : engine->step())
      if (output.finished()) finish_order.push_back(output.request_id);
  const auto lone = std::find(finish_order.begin(), finish_order.end(), "lone");
  ASSERT_NE(lone, finish_order.end());
  EXPECT_LE(lone - finish_order.begin(), 3) << "the lone request was seated behind most of the batch";
  expect_all_blocks_free(*engine);
}

// Prompt logprobs against the golden logits (an independent implementation, llama.cpp):
// log_softmax of the row that predicted each prompt token, its rank, the top tokens.
// The prompt is chunked over several steps and its prefix is already cached, which it
// must not use.
TEST_F(EngineTest, PromptLogprobsMatchTheGoldenLogits) {
  const std::string golden_dir = testing::shared_dir() + "/golden/tiny-moe";
  const nlohmann::json cases = nlohmann::json::parse(testing::read_file(golden_dir + "/cases.json"));
  const nlohmann::json& test_case = cases.at("cases").at(3);
  ASSERT_EQ(test_case.at("name"), "len130");
  const auto ids = test_case.at("input_ids").get<std::vector<int32_t>>();
  const std::vector<float> golden = testing::read_f32_file(golden_dir + "/" + test_case.at("logits_file").get<std::string>());
  const size_t vocab = 4096;
  const double tolerance = 2 * cases.at("tolerance_max_abs").get<double>();  // a logit error moves log Z too

  EngineConfig config = small_config();
  config.max_num_batched_tokens = 48;
  auto engine = make_engine(config, 64);
  run(*engine, {greedy("warm", ids, 1)});  // puts the prompt's blocks in the prefix cache
  GenerateRequest request = greedy("scored", ids, 2);
  request.params.prompt_logprobs = 3;
  engine->add_request(std::move(request));
  std::vector<PromptTokenLogprob> scored;
  int outputs_with_scores = 0;
  while (engine->has_work()) {
    for (RequestOutput& output : engine->step()) {
      if (output.prompt_logprobs.empty()) continue;
      ++outputs_with_scores;
      scored = output.prompt_logprobs;
      EXPECT_EQ(output.cached_tokens, 0);
    }
  }
  EXPECT_EQ(outputs_with_scores, 1);
  ASSERT_EQ(scored.size(), ids.size() - 1);
  for (size_t j = 1; j < ids.size(); ++j) {
    SCOPED_TRACE(::testing::Message() << "prompt position " << j);
    const std::span<const float> row(golden.data() + (j - 1) * vocab, vocab);
    const double max_logit = *std::max_element(row.begin(), row.end());
    double total = 0;
    for (float logit : row) total += std::exp(logit - max_logit);
    const auto logprob = [&](int32_t token) { return row[static_cast<size_t>(token)] - max_logit - std::log(total); };
    const PromptTokenLogprob& entry = scored[j - 1];
    EXPECT_EQ(entry.token, ids[j]);
    EXPECT_NEAR(entry.logprob, logprob(ids[j]), tolerance);
    // The rank may only differ through tokens within the tolerance of this one.
    const float own = row[static_cast<size_t>(ids[j])];
    const auto above = [&](double margin) {
      return std::count_if(row.begin(), row.end(), [&](float logit) { return logit > own + margin; });
    };
    EXPECT_GE(entry.rank, above(tolerance) + 1);
    EXPECT_LE(entry.rank, above(-tolerance) + 1);
    ASSERT_EQ(entry.top.size(), 3u);
    for (const TokenLogprob& top : entry.top) EXPECT_NEAR(top.logprob, logprob(top.token), tolerance);
    EXPECT_NEAR(entry.top[0].logprob, logprob(static_cast<int32_t>(argmax(row))), tolerance);
  }
  expect_all_blocks_free(*engine);
}

TEST_F(EngineTest, EarlyStopEndsARunOfConfidentTokensWithTheEndToken) {
  EngineConfig config = small_config();
  config.early_stop = {.enabled = true, .window_size = 5, .threshold = 0.0};  // every token passes
  auto engine = make_engine(config, 64);
  GenerateRequest request = greedy("a", prompt(1, 9), 40);  // ignore_eos does not hold it back
  const Finished finished = run(*engine, {request})["a"];
  ASSERT_EQ(finished.tokens.size(), 5u);
  EXPECT_EQ(finished.tokens.back(), 2) << "the end token replaces the fifth";
  EXPECT_EQ(finished.final_output.finish_reason, FinishReason::kStop);
  const std::vector<int32_t> unstopped = alone(request);
  EXPECT_EQ(std::vector<int32_t>(finished.tokens.begin(), finished.tokens.end() - 1),
            std::vector<int32_t>(unstopped.begin(), unstopped.begin() + 4));

  config.early_stop.threshold = 1.0;  // no probability lies above 1
  engine = make_engine(config, 64);
  EXPECT_EQ(run(*engine, {request})["a"].tokens.size(), 40u);
  EXPECT_EQ(parse_early_stop_config(false, R"({"enable_early_stop": true, "window_size": 7})").window_size, 7);
  EXPECT_THROW(parse_early_stop_config(true, R"({"enable_early_stop": false})"), Error);
  EXPECT_THROW(parse_early_stop_config(true, R"({"threshold": 1.5})"), Error);
  EXPECT_THROW(parse_early_stop_config(true, R"({"strategy": "probability"})"), Error);
  EXPECT_THROW(parse_early_stop_config(true, R"({"window": 3})"), Error);
}

TEST_F(EngineTest, ARequestNotAdmittedWithinTheMaxWaitingTimeIsRefused) {
  EngineConfig config = small_config();
  config.max_num_seqs = 1;
  config.max_waiting_time = 0.05;
  auto engine = make_engine(config, 64);
  engine->add_request(greedy("first", prompt(1, 9), 30));
  engine->add_request(greedy("second", prompt(2, 9), 30));
  std::map<std::string, RequestOutput> final_outputs;
  const auto collect = [&](std::vector<RequestOutput> outputs) {
    for (RequestOutput& output : outputs)
      if (output.finished()) final_outputs[output.request_id] = output;
  };
  collect(engine->step());  // admits "first"; "second" waits for the one seat
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  while (engine->has_work()) collect(engine->step());
  EXPECT_EQ(final_outputs.at("first").finish_reason, FinishReason::kLength);
  EXPECT_EQ(final_outputs.at("second").finish_reason, FinishReason::kError);
  EXPECT_TRUE(final_outputs.at("second").waited_too_long);
  EXPECT_THAT(final_outputs.at("second").error, HasSubstr("--max-waiting-time"));
  expect_all_blocks_free(*engine);
}

TEST_F(EngineTest, AbortFreesTheRequest) {
  auto engine = make_engine(small_config(), 64);
  engine->add_request(greedy("x", prompt(8, 30), 50));
  engine->step();
  const std::optional<RequestOutput> aborted = engine->abort_request("x");
  ASSERT_TRUE(aborted.has_value());
  EXPECT_EQ(aborted->finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(engine->abort_request("x").has_value());
  expect_all_blocks_free(*engine);
}

TEST_F(EngineTest, RefusesBadRequestsNamingTheProblem) {
  auto engine = make_engine(small_config(), 64);
  auto error_of = [&](GenerateRequest request) -> std::string {
    try {
      engine->add_request(std::move(request));
    } catch (const Error& error) {
      return error.what();
    }
    return "(no error)";
  };
  EXPECT_THAT(error_of(greedy("a", {}, 4)), HasSubstr("prompt is empty"));
  EXPECT_THAT(error_of(greedy("b", prompt(1, 600), 4)), HasSubstr("--max-model-len is 512"));
  EXPECT_THAT(error_of(greedy("c", {5, 99999}, 4)), HasSubstr("token id 99999"));
  engine->add_request(greedy("d", prompt(1, 5), 4));
  EXPECT_THAT(error_of(greedy("d", prompt(1, 5), 4)), HasSubstr("already in use"));
}

TEST_F(EngineTest, OutputLengthIsCappedByMaxModelLen) {
  EngineConfig config = small_config();
  config.max_model_len = 40;
  auto engine = make_engine(config, 64);
  const auto results = run(*engine, {greedy("cap", prompt(9, 30), 100)});
  EXPECT_EQ(results.at("cap").tokens.size(), 10u);
  EXPECT_EQ(results.at("cap").final_output.finish_reason, FinishReason::kLength);
}

// tiny-thinking is tiny-moe's weights with a tokenizer that has the Thinking markers
// (<think> 13, </think> 14, <|im_end|> 12).
class ThinkingEngineTest : public EngineTest {
 protected:
  static constexpr int32_t kThinkStart = 13, kThinkEnd = 14, kImEnd = 12;
  void SetUp() override { thinking_tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(testing::golden_model_dir("tiny-thinking"))); }
  std::map<std::string, Finished> run_thinking(std::vector<GenerateRequest> requests) {
    Engine engine(*model_, *thinking_tokenizer_, small_config(), 64, std::vector<int32_t>{2, kImEnd});
    return run(engine, std::move(requests));
  }
  static GenerateRequest thinking_prompt(const std::string& id, int32_t last_marker, std::optional<int> budget) {
    std::vector<int32_t> ids = prompt(3, 20);
    ids.push_back(last_marker);
    ids.push_back(23);  // "\n"
    GenerateRequest request = greedy(id, ids, 12);
    request.params.ignore_eos = false;
    request.params.reasoning_max_tokens = budget;
    return request;
  }
  std::unique_ptr<Tokenizer> thinking_tokenizer_;
};

TEST_F(ThinkingEngineTest, BudgetForcesTheEndOfThinking) {
  auto results = run_thinking({thinking_prompt("free", kThinkStart, std::nullopt), thinking_prompt("budget", kThinkStart, 3)});
  const std::vector<int32_t>& free = results.at("free").tokens;
  const std::vector<int32_t>& budget = results.at("budget").tokens;
  // Greedy and the same prompt: identical until the budget (or an end token) bites.
  size_t forced = 0;
  while (forced < 3 && forced < free.size() && free[forced] != kThinkEnd && free[forced] != 2 && free[forced] != kImEnd) ++forced;
  ASSERT_GT(budget.size(), forced);
  EXPECT_EQ(std::vector<int32_t>(budget.begin(), budget.begin() + static_cast<long>(forced)),
            std::vector<int32_t>(free.begin(), free.begin() + static_cast<long>(forced)));
  EXPECT_EQ(budget[forced], kThinkEnd) << "the token after " << forced << " reasoning tokens must be </think>";
}

TEST_F(ThinkingEngineTest, BudgetIsIdleOutsideThinking) {
  auto results = run_thinking({thinking_prompt("free", kThinkEnd, std::nullopt), thinking_prompt("budget", kThinkEnd, 1)});
  EXPECT_EQ(results.at("budget").tokens, results.at("free").tokens);
}

TEST_F(ThinkingEngineTest, ParserMarkersStayInTheText) {
  GenerateRequest hidden = thinking_prompt("hidden", kThinkStart, 2);
  GenerateRequest visible = thinking_prompt("visible", kThinkStart, 2);
  visible.visible_special_tokens = {kThinkEnd};
  auto results = run_thinking({hidden, visible});
  const std::vector<int32_t>& tokens = results.at("visible").tokens;
  ASSERT_EQ(results.at("hidden").tokens, tokens);
  ASSERT_NE(std::find(tokens.begin(), tokens.end(), kThinkEnd), tokens.end());
  std::string with_marker;
  for (int32_t token : tokens)
    if (token != 2 && token != kImEnd) with_marker += thinking_tokenizer_->token_bytes(token, token != kThinkEnd);
  EXPECT_EQ(results.at("visible").text, with_marker);
  EXPECT_EQ(results.at("hidden").text, thinking_tokenizer_->decode(tokens, /*skip_special_tokens=*/true));
  EXPECT_NE(results.at("visible").text.find("</think>"), std::string::npos);
  EXPECT_EQ(results.at("hidden").text.find("</think>"), std::string::npos);
}

TEST_F(EngineTest, BudgetNeedsAThinkEndToken) {
  auto engine = make_engine(small_config(), 64);
  GenerateRequest request = greedy("r", prompt(1, 5), 4);
  request.params.reasoning_max_tokens = 8;
  const std::string message = testing::error_message([&] { engine->add_request(request); });
  EXPECT_THAT(message, HasSubstr("</think>"));
  request.params.reasoning_max_tokens = 0;
  EXPECT_THAT(testing::error_message([&] { engine->add_request(request); }), HasSubstr("reasoning_max_tokens must be >= 1"));
}

TEST(EngineConfigTest, TheDefaultLengthFitsASmallModel) {
  ModelConfig model = load_model_config(testing::golden_model_dir("tiny-dense"));
  model.max_position_embeddings = 256;
  EngineConfig config;  // the default 2048
  fit_max_model_len(config, model);
  EXPECT_EQ(config.max_model_len, 256);
  EngineConfig given;
  given.max_model_len = 4096;
  given.max_model_len_given = true;
  fit_max_model_len(given, model);
  EXPECT_EQ(given.max_model_len, 4096);  // left for validation to refuse
  EXPECT_THROW(validate_engine_config(given, model), Error);
  model.max_position_embeddings = 131072;
  EngineConfig roomy;
  fit_max_model_len(roomy, model);
  EXPECT_EQ(roomy.max_model_len, 2048);
}

TEST(EngineConfigTest, BlockPlanRefusesAPoolTooSmallForOneSequence) {
  ModelConfig model = load_model_config(testing::golden_model_dir("tiny-dense"));
  const size_t kFp32Row = static_cast<size_t>(model.kv_width()) * sizeof(float);
  EngineConfig config;
  config.max_model_len = 4096;
  config.num_gpu_blocks_override = 10;
  try {
    plan_kv_blocks(config, model, 0, kFp32Row, 1ull << 30);
    FAIL();
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("one --max-model-len 4096 sequence needs 64 blocks"));
  }
  config.num_gpu_blocks_override.reset();
  config.gpu_memory_utilization = 0.001;
  EXPECT_THROW(plan_kv_blocks(config, model, 0, kFp32Row, 1ull << 30), Error);
  config.gpu_memory_utilization = 0.5;
  // 3 layers x 2 (K, V) x 64 positions x 256 floats x 4 bytes = 384 KiB per block.
  const int blocks = plan_kv_blocks(config, model, 100ull << 20, kFp32Row, 1ull << 30);
  EXPECT_GT(blocks, 64);
  EXPECT_LT(blocks, (512 - 100) * 1024 / 384 + 1);
}

}  // namespace
}  // namespace ernie
